/*
 * shardcache.h - the node-local shard cache: the objects of a remote source
 * (storage.h) kept whole on the node's disk, within a size limit, fetched
 * ahead along the plan its reader gives it (shardplan.h) and evicted in
 * that plan's order; a record whose object is not local is read by range.
 * Several mounts and ranks of a node that name one directory share it
 * (shardfolder.h): none fetches an object another is fetching, and none
 * evicts what another holds.
 *
 * How a read is served (bfs_shardcache_read):
 *   held here      the object's file is open in this process: pread
 *   in data/       another process (or an earlier mount) keeps it: it is
 *                  opened, checked against its (size, ETag), held, pread
 *   being fetched  here: the part holding the record is read as soon as it
 *                  is written; it is awaited when it is under way and due
 *                  sooner than a range GET would take (both measured as
 *                  the cache runs), or when the plan still needs most of
 *                  the object (opts.wait_percent: one whole fetch then
 *                  costs fewer bytes and requests than reading its
 *                  records one by one), its parts put first
 *   not local      likewise: when the plan keeps its span whole and still
 *                  needs most of it, its fetch starts first of all and the
 *                  read waits for it (another process's fetch: for its
 *                  commit, up to opts.lock_wait_s); else the record is
 *                  read by range (a GET of the record alone, If-Match)
 * bfs_shardcache_pin waits for the whole object instead (a shard to scan,
 * a gzip shard to inflate): it is fetched now if need be, ahead of the
 * plan.
 *
 * Fetching: `fetchers` threads take parts (opts.part_bytes each, one
 * ranged GET with If-Match each, written to the object's file in tmp/ as
 * they arrive: no buffer but curl's) of the objects under way, the object
 * needed soonest first; an object starts when the plan says it is next
 * and its room can be made by evicting only objects needed later
 * (shardplan.h).  The last part commits it (shardfolder.h).  Nothing is
 * fetched without a plan or a pin, so a mount whose indexes are stored
 * fetches nothing until its reader asks for a batch.
 *
 * A fetch that fails (the network past --s3-giveup, an object replaced:
 * 412) fails the reads waiting on it with the storage's message, which
 * names the object, the attempts, the last status and the cause; the
 * object is tried again by the next read that needs it.
 *
 * Threads: any, concurrently, between open and close; c->lock guards the
 * objects' states, the plan and the counters, and is never held across a
 * request, a file operation or a wait on another process.
 */
#ifndef BFS_SHARDCACHE_H
#define BFS_SHARDCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/shardplan.h"
#include "engine/storage/storage.h"

typedef struct bfs_shardcache bfs_shardcache;

/* The default limit: a quarter of what the cache's file system has free
 * (counting the room this source already takes as free), at most 256 GiB:
 * beside the sample cache's 10% of free disk, at most 64 GiB (cache.h). */
#define BFS_SHARDCACHE_SHARE_DEFAULT 4        /* 1/4 of the free space */
#define BFS_SHARDCACHE_MAX_DEFAULT (256ull << 30)
#define BFS_SHARDCACHE_PART_DEFAULT (8ull << 20)

typedef struct {
	const char *dir;       /* --shard-cache */
	uint64_t max_bytes;    /* --shard-cache-size; 0: the default above */
	unsigned fetchers;     /* ranged GETs of parts at once; 0: 8 */
	uint64_t part_bytes;   /* bytes of one part; 0: the default above */
	unsigned lock_wait_s;  /* the longest a read waits on another
				* process's fetch, or a pin on the folder's
				* ledger; 0: 30 */
	/* A record whose object is not local, and whose span is kept whole:
	 * its read waits for the object's fetch (started first of all) when
	 * the span still needs at least this share of the object, else it
	 * is read by range: percent, 0: 10; 101: never wait (a bench's
	 * comparison).  Measured (bench_shardfetch, docs/OBJECT_STORAGE.md):
	 * a 110 KB record alone takes a round trip, a 28 MB shard whole two
	 * at 8 MiB parts, so with T decode threads waiting pays once the
	 * reader needs more than about 2 T / 250 of the shard's records --
	 * 10% covers 16 threads. */
	unsigned wait_percent;
} bfs_shardcache_opts;

#define BFS_SHARDCACHE_EPOCHS 64 /* per-epoch bytes kept in the stats */

typedef struct {
	uint64_t objects;      /* in the listing */
	uint64_t bytes_total;  /* their bytes */
	uint64_t limit;        /* the limit on disk */
	uint64_t bytes_on_disk;/* the folder's ledger: data/ and tmp/ */
	uint64_t held;         /* objects this process holds open now */
	uint64_t fetching;     /* objects this process is fetching now */
	uint64_t hits;         /* reads served from a local copy */
	uint64_t misses;       /* reads whose object was not local */
	uint64_t range_reads;  /* of those, read by a ranged GET of the record */
	uint64_t range_bytes;
	uint64_t waits;        /* reads and pins that waited for a fetch */
	double wait_seconds;   /* how long they waited in all */
	uint64_t fetched;      /* objects fetched whole */
	uint64_t bytes_fetched;/* their bytes (parts written) */
	uint64_t found;        /* objects found whole in data/ (kept by an
				* earlier mount, or fetched by another
				* process) instead of fetched */
	uint64_t evictions;    /* objects this process evicted */
	uint64_t evicted_bytes;
	uint64_t removed;      /* stale files removed when the folder was
				* counted (crashed fetches, replaced objects) */
	uint64_t failures;     /* fetches that failed */
	double link_mb_s;      /* the link's MB/s since the last snapshot
				* a second or more before */
	double part_mb_s;      /* measured: one connection's MB/s on a part */
	double range_ms;       /* measured: a range read's time */
	/* bytes fetched for epoch e, for the last BFS_SHARDCACHE_EPOCHS
	 * epochs: epoch_bytes[e % BFS_SHARDCACHE_EPOCHS], valid for e in
	 * [epoch_first, epoch_last].  A whole object counts towards the epoch
	 * of the plan's span it was fetched for (with
	 * bfs_shardcache_epoch_positions: one fetched ahead, while the reader
	 * is still in the epoch before, is the next epoch's), else the
	 * reader's; a range read towards the reader's epoch; a fetch before
	 * any plan of an epoch (indexing) towards none. */
	uint64_t epoch_bytes[BFS_SHARDCACHE_EPOCHS];
	int64_t epoch_first, epoch_last; /* -1: no plan has named one */
} bfs_shardcache_stats;

/*
 * List the source (bfs_storage_list), open its folder under opts.dir (the
 * objects' names checked to be safe paths), count what the folder holds
 * (shardfolder.h recount: a crash's leftovers removed), and start the
 * fetchers (idle until a plan or a pin).  st must outlive the cache.
 * Returns 0; -ENOSPC when the limit cannot hold the largest object (errmsg
 * gives both sizes); -EINVAL (a name that is no safe relative path);
 * the storage's errors for the listing (errmsg says which); -errno for the
 * folder.
 */
int bfs_shardcache_open(bfs_storage *st, const bfs_shardcache_opts *o,
			bfs_shardcache **out, char *errmsg);
/* End everything under way: requests end with -ECANCELED (the storage's
 * too: bfs_storage_cancel, for a storage that is closed next), fetches
 * are abandoned, and reads and pins waiting return -ECANCELED, as do any
 * made after.  For a mount that is ending, before it joins the threads
 * that read (the engine's workers).  Any thread. */
void bfs_shardcache_cancel(bfs_shardcache *c);
/* Stop the fetchers (each ends the part it is fetching; cancel first to
 * end them at once), abandon what is under way and close every file.
 * NULL is fine; no read or pin may be under way.  st may be used again
 * (another cache over it) unless it was cancelled. */
void bfs_shardcache_close(bfs_shardcache *c);

/* The listing, sorted by name: count, and object k (valid until close). */
size_t bfs_shardcache_count(const bfs_shardcache *c);
const bfs_storage_object *bfs_shardcache_object(const bfs_shardcache *c,
						size_t k);
/* The object named name, or -1. */
ssize_t bfs_shardcache_find(const bfs_shardcache *c, const char *name);
/* The source's folder in the cache (DIR/ID), and the storage. */
const char *bfs_shardcache_path(const bfs_shardcache *c);
bfs_storage *bfs_shardcache_storage(bfs_shardcache *c);

/*
 * Replace the plan (shardplan.h spans over object indexes, copied) and
 * say where the reader is (bfs_shardcache_advance).  `epoch` names what
 * the bytes fetched from now on count towards (stats' epoch_bytes; -1:
 * nothing).  The fetchers go on along the new plan at once.
 * 0, -EINVAL (a span out of range), -ENOMEM.
 */
int bfs_shardcache_plan(bfs_shardcache *c, const bfs_span *spans, size_t n,
			uint64_t pos, int64_t epoch);
/* The reader is at position pos now (positions as the plan's) and in
 * `epoch`.  Cheap: no call to the plan's whole sweep; never blocks. */
void bfs_shardcache_advance(bfs_shardcache *c, uint64_t pos, int64_t epoch);
/* The plan's positions run n to an epoch (epoch e is positions [e n,
 * (e + 1) n)): a whole object's bytes count towards the epoch of the span
 * it is fetched for (stats' epoch_bytes).  0 (the default): towards the
 * reader's epoch. */
void bfs_shardcache_epoch_positions(bfs_shardcache *c, uint64_t n);
/* Positions [pos, end) are being read now (the decode threads work on
 * several batches at once): what they need is in use, and a read that
 * waits for its shard may not evict it.  0 (the default): pos alone. */
void bfs_shardcache_window(bfs_shardcache *c, uint64_t end);
/* A plan of an epoch (epoch >= 0) will come: until it does, a read of an
 * object that is not local waits for it, up to a few seconds (the first
 * reads of a mount would otherwise go by range, and their objects then be
 * fetched whole as well). */
void bfs_shardcache_expect_plan(bfs_shardcache *c);

/*
 * Bytes [off, off + len) of object k into buf, from wherever they are
 * (see above).  0; -ERANGE past its end; -ESTALE (the object was replaced
 * since it was listed: nothing of the new one is served); -EIO/-ETIMEDOUT
 * (the network, past the give-up time), -EACCES, -ENOENT (the object is
 * gone), -ENOMEM, -errno: errmsg names the object, and for a network
 * failure its last status and cause.
 */
int bfs_shardcache_read(bfs_shardcache *c, size_t k, uint64_t off, void *buf,
			size_t len, char *errmsg);

/*
 * Object k whole on the local disk: fetched now if need be (before
 * anything the plan wants), and held.  *fd is its open file (the object's
 * bytes at offsets [0, size); only pread), valid until
 * bfs_shardcache_unpin(c, k); the object is not evicted meanwhile.  Errors
 * as bfs_shardcache_read's, and -ENOSPC when no room can be made (every
 * local object pinned).
 */
int bfs_shardcache_pin(bfs_shardcache *c, size_t k, int *fd, char *errmsg);
void bfs_shardcache_unpin(bfs_shardcache *c, size_t k);

/* A snapshot of the counters.  Any thread. */
void bfs_shardcache_get_stats(bfs_shardcache *c, bfs_shardcache_stats *out);

/* The limit for a cache in dir when none is given (see the default above):
 * 0 when the file system cannot be asked. */
uint64_t bfs_shardcache_default_limit(const char *dir, uint64_t ours);

#endif
