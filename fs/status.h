/*
 * status.h - `batchfs status MOUNTPOINT [--watch] [--json]`: what a mount
 * is doing, for a person watching a training run or for a script.
 *
 * It reads MOUNTPOINT/stats.json (and dataset.json once) through the
 * mount, like any reader, so it runs in its own process and needs nothing
 * of the daemon but its files.  Rates (samples per second served, decoded
 * and taken from the cache) are the change between two looks at
 * stats.json, --interval apart (1 s by default), by their uptime_seconds.
 *
 * The rendering is a function of the two snapshots and the dataset
 * (bfs_status_render), tested without a mount.
 */
#ifndef BFS_FS_STATUS_H
#define BFS_FS_STATUS_H

#include <stddef.h>

#include "fs/history.h"
#include "fs/jsonread.h"

/* The status of a mount from its dataset.json and two stats.json
 * snapshots (prev may be NULL: rates since the mount started), as text
 * for a terminal (json 0) or as one JSON object on one line, newline
 * included (json 1).  0 and a malloc'd *out, -ENOMEM. */
int bfs_status_render(const char *mountpoint, const bfs_jr *dataset,
		      const bfs_jr *prev, const bfs_jr *now, int json,
		      char **out);

/* The points to draw from one stats.json: its "history" points (rows
 * that are not 6-number arrays passed over), then the counters of the
 * snapshot itself as the point of now, when it is after the last one.
 * At most cap into out; returns how many (0 only when cap is 0). */
int bfs_status_history(const bfs_jr *stats, bfs_history_point *out,
		       size_t cap);

/* `batchfs status`; argv[0] is "status".  Returns the exit status: 0,
 * 1 (the mount cannot be read), 2 (usage). */
int bfs_status_main(int argc, char **argv);

#endif
