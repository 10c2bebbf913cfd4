/*
 * metrics.h - a mount's counters in the Prometheus text exposition format
 * (version 0.0.4), for `batchfs metrics MOUNTPOINT`, the --metrics-file
 * a mount rewrites and its --metrics-port page (fs/metricsd.h).
 *
 * The text is a function of one stats.json snapshot (and the mount's
 * labels): each value is the snapshot's, so a scrape and stats.json read
 * at the same moment agree.  Names: a batchfs_ prefix, _total for
 * counters, base units (_bytes, _seconds, _ratio); every sample carries
 * the labels mount="MOUNTPOINT" and rank="R" (a mount of --ranks A-B:
 * "A-B"); some add their own (cause, part, pid).  Histograms: the waits
 * of readers for batches not yet ready (batchfs_batch_wait_seconds) and
 * the time to read, decode and resize one image
 * (batchfs_decode_seconds).  docs/OPERATIONS.md lists every name.
 *
 * Pure functions, FUSE-free: any thread.
 */
#ifndef BFS_FS_METRICS_H
#define BFS_FS_METRICS_H

#include <stddef.h>

#include "fs/jsonread.h"

/* The rank label of a mount from its dataset.json: "R" for a mount of one
 * rank, "A-B" for --ranks A-B (a single "A" for --ranks A); "0" when
 * dataset is NULL or says neither.  Into buf (cap bytes). */
void bfs_metrics_rank_label(const bfs_jr *dataset, char *buf, size_t cap);

/* The exposition text of stats.json snapshot `stats`, every sample
 * labelled mount=mountpoint (bytes that are not UTF-8 become U+FFFD),
 * rank=rank.  0 and a malloc()ed, NUL-terminated *out of *len bytes for
 * the caller to free; -EINVAL when stats is not an object with the
 * counters of stats.json (uptime_seconds missing); -ENOMEM. */
int bfs_metrics_render(const char *mountpoint, const char *rank,
		       const bfs_jr *stats, char **out, size_t *len);

/* `batchfs metrics MOUNTPOINT`; argv[0] is "metrics".  Reads dataset.json
 * and stats.json through the mount and prints the text.  Returns the exit
 * status: 0, 1 (the mount cannot be read), 2 (usage). */
int bfs_metrics_main(int argc, char **argv);

#endif
