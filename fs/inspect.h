/*
 * inspect.h - `batchfs inspect`: describe any .npy file (shape, dtype,
 * statistics, and a label summary for 1-D integer arrays).
 */
#ifndef BFS_TOOLS_INSPECT_H
#define BFS_TOOLS_INSPECT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/npy.h"

typedef struct {
	uint64_t count;    /* elements looked at */
	uint64_t nan;      /* NaNs (floats only); left out of everything below */
	double min, max;   /* over non-NaN elements; 0 when none */
	double mean, std;  /* population std */
	int supported;     /* 0: dtype has no statistics (strings, complex...) */
} bfs_inspect_stats;

/*
 * Statistics of the array described by info whose data are data[0..
 * info->data_len) (caller checked that the file holds that much), in one
 * pass.  Understands bool, int8..int64, uint8..uint64, float16/32/64 in
 * either byte order; for other dtypes sets supported = 0.  Pure function,
 * any thread.
 */
void bfs_inspect_compute(const void *data, const bfs_npy_info *info,
			 bfs_inspect_stats *out);

/*
 * batchfs inspect [--help] FILE.npy...
 *
 * argv[0] is "inspect".  Prints a block per file on stdout and errors on
 * stderr; goes on with the next file after an error.  Returns 0 when every
 * file was read, 1 when any failed, 2 on usage errors.  Call from main only.
 */
int bfs_inspect_main(int argc, char **argv);

#endif
