/*
 * shardcache.h - the node-local shard cache: the objects of a remote
 * source (storage.h) fetched whole into a directory, as parallel ranged
 * GETs, so that the shard scanners and the engine read local files.
 *
 * Layout under opts.dir, one folder per source (named by a hash of its
 * URL, with the URL written in its `source` file):
 *   data/NAME   the objects, at their names: the folder a mount indexes
 *   meta/NAME   "SIZE ETAG\n" of data/NAME, written after it: what proves
 *               that data/NAME is the whole object of that identity
 *   tmp/        objects being fetched; emptied at every sync
 *   lock        held (flock) by the one process syncing; holds its pid
 * A crash at any moment leaves either no meta/NAME or one that does not
 * match the listing, so a partly written object is fetched again, never
 * used.  Objects that the listing no longer has are removed.
 *
 * Today the cache holds a whole source: a source larger than opts.max_bytes
 * is refused at sync, naming both sizes.  Reading a source through a
 * smaller cache, evicted in epoch order, is the next step (docs/OBJECT_STORAGE.md).
 * Threads: one sync at a time per process; syncs of several processes on
 * one directory are serialised by `lock`, with a deadline.
 */
#ifndef BFS_SHARDCACHE_H
#define BFS_SHARDCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/storage.h"

typedef struct {
	uint64_t objects;      /* in the listing */
	uint64_t hits;         /* already whole in the cache */
	uint64_t fetched;      /* fetched now */
	uint64_t removed;      /* no longer listed, so removed */
	uint64_t bytes_fetched;
	uint64_t bytes_on_disk;/* the source's data/ after the sync */
	double seconds;        /* the sync's wall time */
} bfs_shardcache_stats;

typedef struct {
	const char *dir;       /* --shard-cache */
	uint64_t max_bytes;    /* --shard-cache-size; 0: 90% of what the file
				* system has free plus what is already ours */
	unsigned parallel;     /* ranged GETs at once; 0: 16 */
	uint64_t part_bytes;   /* size of one ranged GET; 0: 8 MiB */
	unsigned lock_wait_s;  /* how long to wait for another process's sync;
				* 0: 600 */
	/* Called from the syncing thread as bytes arrive (at most ~10 times
	 * a second) and once at the end. */
	void (*progress)(void *ctx, const bfs_shardcache_stats *s,
			 uint64_t bytes_total);
	void *ctx;
} bfs_shardcache_opts;

/*
 * Make the cache hold every object of st, whole and current, and write the
 * path of its data folder into root (root_max bytes).  Returns 0;
 * -ENOSPC when the source is larger than the limit or the disk (errmsg
 * gives the sizes); -EWOULDBLOCK when another process held the lock for
 * lock_wait_s (errmsg names its pid and whether it is stopped); the
 * storage's errors for an object that could not be fetched (errmsg names
 * it); -errno for the directory.  stats (may be NULL) is filled either way.
 */
int bfs_shardcache_sync(bfs_storage *st, const bfs_shardcache_opts *o,
			char *root, size_t root_max, bfs_shardcache_stats *stats,
			char *errmsg);

#endif
