/*
 * info.c - what libbatchfs_gpu says about itself: the text, name and value
 * of its error codes, its release version and its ABI (batchfs_gpu.h).  No
 * CUDA here: tests/gpu/test_batchdir.c checks the table in CI, and bindings
 * read codes and version from here instead of copying them.
 */
#include "tools/gpu/batchfs_gpu.h"

#include "engine/base/error.h"
#include "engine/version.h"

#define CODE(x) { x, #x }

/* Name and value come from the same token, so they cannot disagree; the
 * asserts below fail the build when a code is added to either enum and not
 * here. */
static const bfs_gpu_code codes[] = {
	CODE(BFS_GPU_E_NODEV),
	CODE(BFS_GPU_E_CUDA),
	CODE(BFS_GPU_E_END),
	CODE(BFS_E_CORRUPT),
	CODE(BFS_E_CRC),
	CODE(BFS_E_TRUNCATED),
	CODE(BFS_E_DECODE),
	CODE(BFS_E_TOOBIG),
	CODE(BFS_E_NOKEY),
	CODE(BFS_E_FORMAT),
	CODE(BFS_E_EMPTY),
	CODE(BFS_E_MEMORY),
	CODE(BFS_E_REMOTE),
};

_Static_assert(sizeof(codes) / sizeof(codes[0]) ==
	       (BFS_GPU_E_LAST - BFS_GPU_E_FIRST - 1) +
	       (BFS_E_LAST - BFS_E_FIRST - 1),
	       "bfs_gpu_codes: list every BFS_E_* and BFS_GPU_E_* code");

const bfs_gpu_code *bfs_gpu_codes(size_t *n)
{
	if (n)
		*n = sizeof(codes) / sizeof(codes[0]);
	return codes;
}

const char *bfs_gpu_strerror(int err)
{
	switch (err) {
	case BFS_GPU_E_NODEV: return "no CUDA device";
	case BFS_GPU_E_CUDA:  return "CUDA runtime error";
	case BFS_GPU_E_END:   return "end of batches";
	}
	return bfs_strerror(err);
}

const char *bfs_gpu_version(void)
{
	return BFS_VERSION;
}

int bfs_gpu_abi(size_t *opts_size, size_t *batch_size)
{
	if (opts_size)
		*opts_size = sizeof(bfs_gpu_opts);
	if (batch_size)
		*batch_size = sizeof(bfs_gpu_batch);
	return BFS_GPU_ABI_VERSION;
}
