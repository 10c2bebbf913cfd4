/*
 * history.h - what a mount did over its whole life, in a fixed few hundred
 * points, for `batchfs status MNT --plot` (fs/plot.h) and for stats.json's
 * "history".
 *
 * DESIGN
 * A point holds the cumulative counters a picture of the run needs
 * (samples served and decoded, the readers' wait in seconds, the sample
 * cache's hits and misses) and when they were taken; rates are the
 * change between two points, worked out when drawing, so nothing is lost
 * by keeping fewer points.
 *
 * The ring is bounded: BFS_HISTORY_CAP points.  Point k is taken at tick k
 * (k * every_s seconds after the start), and only ticks that are a
 * multiple of the stride are kept; the stride starts at 1.  When the ring
 * is full, every other point is dropped (points 0, 2, 4, ... stay, which
 * are the ticks of twice the stride) and the stride doubles.  So a mount
 * of any length keeps its whole life, from its first point, at a
 * resolution that halves each time it fills: between CAP/2 and CAP points
 * evenly spaced, always.  Memory: CAP points, whatever the uptime.
 *
 * The sampler is one small thread of fs/ (bfs_history_start): it sleeps
 * on a condition variable until the next kept tick (an absolute deadline,
 * so no drift), calls the caller's sample function with no lock held,
 * and adds the point under the ring's mutex, which is held only to copy
 * points.  bfs_history_stop wakes and joins it at once.  The core
 * (engine/, cache/) knows nothing of it: the sample function reads their
 * counters as stats.json does.
 *
 * Threads: bfs_history_add, _copy and _json from any thread at once;
 * start and stop from one thread.
 */
#ifndef BFS_FS_HISTORY_H
#define BFS_FS_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "fs/json.h"

#define BFS_HISTORY_CAP 256        /* points kept at most (even) */
#define BFS_HISTORY_EVERY 10       /* default seconds between ticks */

typedef struct {
	double t;           /* seconds since the history began */
	uint64_t served;    /* samples_served so far */
	uint64_t decoded;   /* samples_decoded so far */
	double wait_s;      /* reader_wait_seconds so far, all readers */
	uint64_t hits;      /* the sample cache's hits and misses so far */
	uint64_t misses;
} bfs_history_point;

typedef struct bfs_history bfs_history;

/* Fills *p (all but t) with the counters now.  Called on the sampler's
 * thread, no lock of the history held. */
typedef void (*bfs_history_sample)(void *ctx, bfs_history_point *p);

/* An empty history ticking every every_s seconds (0: BFS_HISTORY_EVERY);
 * its clock starts now, and again at bfs_history_start.  0 and *out, or -ENOMEM, -EINVAL (over a day). */
int bfs_history_create(unsigned every_s, bfs_history **out);
/* Stops the sampler if it runs, then frees.  NULL ok. */
void bfs_history_free(bfs_history *h);

/* Point p taken at tick `tick` (ticks only go up): kept if the tick is a
 * multiple of the stride, thinning the ring first when it is full.
 * Returns 1 if kept, 0 if not (its tick is between kept ones, or not
 * after the last kept one). */
int bfs_history_add(bfs_history *h, uint64_t tick, const bfs_history_point *p);

/* The points kept, oldest first, into out (cap of them at most): their
 * count.  *step_s (may be NULL): the seconds between them now. */
size_t bfs_history_copy(const bfs_history *h, bfs_history_point *out,
			size_t cap, double *step_s);

/* stats.json's "history" member, into j (an object is open):
 *   "history": {"interval_seconds": E, "step_seconds": S,
 *     "fields": ["t", "samples_served", "samples_decoded",
 *                "reader_wait_seconds", "cache_hits", "cache_misses"],
 *     "points": [[t, served, decoded, wait, hits, misses], ...]}
 * each point on one line.  h may be NULL: nothing is written. */
void bfs_history_json(const bfs_history *h, bfs_json *j);

/* Start the sampler: its clock starts now (so after a view made before:
 * a point's t is never past stats.json's uptime_seconds), a point at
 * once (tick 0), then one at each kept tick.  0, -EINVAL (already started, or no fn), -EAGAIN. */
int bfs_history_start(bfs_history *h, bfs_history_sample fn, void *ctx);
/* Wake and join the sampler; NULL or never started ok. */
void bfs_history_stop(bfs_history *h);

#endif
