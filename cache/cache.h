/*
 * cache.h - the persistent sample cache: decoded, resized samples (and
 * shard indexes) in one LMDB environment on disk, shared by every mount and
 * process that opens the same directory, so later epochs, remounts and
 * other mounts of the same shards skip decoding.
 *
 * DESIGN
 *   Keys.  A sample key (bfs_cache_key, 24 bytes) is
 *       fingerprint (8) | shard hash (8) | record offset (8), big-endian,
 *   where the fingerprint is bfs_cache_fingerprint() (every engine and
 *   source setting that changes a sample's bytes) and the shard hash
 *   covers the shard's absolute path and its bfs_shard_stamp: size, mtime,
 *   inode number and ctime (a shard rewritten at the same size with its
 *   mtime set back still gets a new ctime).  Different settings or a
 *   changed shard produce different keys, so a stale entry is never hit.
 *   A remote shard (s3://, https://) is keyed by its URL, size and ETag
 *   instead: its "absolute path" is the storage's root URL joined to the
 *   object's name, its stamp bfs_shard_stamp_remote's (engine/source.h),
 *   so its entries outlive the node-local copy of the shard.  A second,
 *   independent 64-bit hash of the full identity travels in the value and
 *   is compared on every get, so even a shard-hash collision cannot serve
 *   another sample's bytes.  Entries of one shard are adjacent, in offset
 *   order; entries of one fingerprint are one key range.
 *   Values.  A 64-byte header (magic, format version, CRC32C, payload
 *   length, int64 label, identity check, the sample's shape:
 *   bfs_store_shape) followed by exactly the sample's bytes as the engine
 *   caches them (H*W*3*itemsize, float32 stays float32; with
 *   RandomResizedCrop a reduced uint8 copy of the image, of its own size).
 *   The CRC32C covers payload, header and the key, so a key changed on
 *   disk is caught too.  The payload starts 80 bytes into its LMDB
 *   overflow page, 16-byte aligned in the map.
 *   Reads.  One bfs_cache_reader per worker thread: a read-only LMDB
 *   transaction renewed at the start of each bfs_cache_get and reset at its
 *   end (measured: a whole get that misses costs 0.15-0.4 us, copying and
 *   checking a 602,112-byte sample 70-100 us), so readers always see the latest commits and
 *   never pin old pages between calls.  The value is read in place from the
 *   map and copied once into the caller's buffer while its CRC is checked;
 *   or, with bfs_cache_get_ref, checked in place and lent as a pointer into
 *   the map, the transaction kept open until bfs_cache_put_ref (the only
 *   time a reader pins pages between calls: one sample's crop and resize).
 *   Writes.  One writer thread per bfs_cache.  bfs_cache_submit() queues a
 *   batch of (key, label, pointer to bytes); the writer takes every
 *   submission queued one after the other (up to 32 MiB of values, or one
 *   larger submission) into one write transaction, writes their bytes
 *   into the transaction's pages, calls each done(ctx) so the caller can
 *   reuse the memory, and only then commits (with its sync): a
 *   writer behind the decoders pays one sync for all it catches up on,
 *   and the caller's memory never waits for the disk.  What a kill -9 or
 *   a power loss leaves is what the sync mode says (Integrity): a
 *   commit is whole or absent; done no longer means committed
 *   (bfs_cache_flush does).  The queue is bounded; a full queue drops the
 *   submission at once.  CRC failures found by readers are sent to the
 *   writer, which re-checks and deletes the entry.
 *   Size limit and eviction.  The limit (max_bytes) is the writer's
 *   policy: a transaction may reuse free pages anywhere but may not take
 *   data.mdb's used end past max(limit, the used end it began with); a
 *   put past that is "full", as MDB_MAP_FULL is at the map's end.  The
 *   map itself is max(limit, data.mdb's length): with MDB_WRITEMAP, LMDB
 *   sets the file's length to the opener's map, so a map smaller than
 *   another process's would cut pages from under it (a SIGBUS there, or
 *   damage to what its open transaction put); so no opener maps less than
 *   the file, and the length changes only under the writer lock.  Epoch-style access scans the whole data set in a
 *   cycle, where LRU and FIFO evict exactly the sample needed next (hit
 *   rate 0 once the data set exceeds the cache).  So the policy is "fill,
 *   then keep": samples of this mount's fingerprint are inserted until the
 *   map is full, and the entries already there stay -- a stable subset
 *   that hits on every later epoch (hit rate = cache / data set, the best a
 *   cyclic scan allows).  Space is reclaimed only from (1) fingerprints
 *   other than this mount's that have been idle (no mount read or wrote
 *   them) for foreign_idle_s, oldest first, (2) entries of a shard whose
 *   size or mtime changed (found when bfs_cache_index_put() replaces the
 *   shard's index), (3) entries failing their CRC, (4) bfs_cache_clear().
 *   MDB_MAP_FULL, and ENOSPC/EIO from a full file system, abort the
 *   transaction (what fitted of the submission is committed in a retry),
 *   and inserts pause for 5 s (submissions are dropped and counted) before
 *   the writer probes again.  Serving is never affected: a miss decodes.
 *   Integrity.  Every value carries a CRC32C, checked on every get; so do
 *   shard indexes and the counter and fingerprint records.  The
 *   environment is opened with MDB_WRITEMAP where fallocate() works on
 *   data.mdb (else without it, as before): a write transaction's pages
 *   are the shared map's, and every page it may touch past the committed
 *   end is given its blocks (fallocate, a chunk ahead) before the
 *   transaction writes, so a full disk is an ENOSPC of that fallocate
 *   (the full path below), never a SIGBUS of a touched page.  LMDB never
 *   writes a page the last committed snapshot uses, WRITEMAP or not, so
 *   the crash story below is unchanged.  Also MDB_NOTLS (reader
 *   transactions belong to bfs_cache_reader objects, not threads) and, by
 *   default, MDB_NOMETASYNC: each commit syncs its data pages (msync with
 *   WRITEMAP, which flushes the file's range however its pages were
 *   written; fdatasync without) and
 *   the meta page goes to disk with the next commit, so the environment is
 *   consistent after a kill -9 *and* after a power loss (the last commit
 *   may be undone).  BFS_CACHE_SYNC_NONE (MDB_NOSYNC) skips the fsync: a
 *   kill -9 of the process is still safe (LMDB never overwrites a page the
 *   last committed snapshot uses, and every write() already sits in the
 *   kernel's page cache, which outlives the process), but a power loss or
 *   kernel crash may corrupt the environment; the writer then syncs every
 *   30 s and at close to narrow that window.
 *   Damage.  A CRC covers what LMDB stores, not how: LMDB trusts its page
 *   structure, and one bad byte in a node's offset, flags or size makes
 *   mdb_get read, or the writer write, anywhere -- a SIGSEGV, which for a
 *   mount is ENOTCONN.  So the first open of a directory in a process
 *   checks data.mdb before LMDB touches it (bfs_cache_check: a bounds-
 *   checked walk of LMDB's on-disk format, every branch and leaf page of
 *   every database and the free list, in a forked child, so that even a
 *   bug in the check cannot crash the caller).  A file that fails the
 *   check, or whose check dies, is moved aside when no other process has
 *   the directory open: renamed to data.mdb.damaged-YYYYmmddTHHMMSSZ (the
 *   newest such copy is kept, for a post-mortem; clear removes it), and a
 *   fresh cache starts, which bfs_cache_notice() reports.  A damage costs
 *   a rebuild, never the mount.  With other processes on the directory it
 *   is kept for them and the open fails (BFS_E_CORRUPT: run without a
 *   cache).  Overflow values (every sample larger than ~2 KB) are not read
 *   at open -- that would be a random read per sample --; instead every
 *   get and every delete or overwrite checks the 16-byte LMDB page header
 *   in front of the value (page number, P_OVERFLOW, page count), by which
 *   LMDB frees the value's pages (not a value the writer's own open
 *   transaction put, which it knows good: with MDB_WRITEMAP those pages
 *   lie in the map, flagged dirty by LMDB until the commit, and would
 *   fail the check -- a sample offered twice before a commit is a
 *   duplicate, not damage).  A value whose header is wrong is never
 *   served, deleted or overwritten; it is counted in `damaged`, and
 *   DIR/damaged is left so that the next open with the directory to itself
 *   moves the file aside.  What one bad byte can still do unseen, and why
 *   that is harmless, is listed in docs/RELIABILITY.md.
 *   Sharing.  LMDB's lock file coordinates processes (robust mutexes: a
 *   writer killed mid-transaction releases the lock; reader slots of dead
 *   processes are cleared at open, every 30 s and when the map is full).
 *   A robust mutex does not help against a holder that is stopped
 *   (SIGSTOP, a suspended job): LMDB's writer mutex waits for it forever.
 *   So every write transaction, and every open or map change that may set
 *   the file's length, first takes the cache's own writer lock, a POSIX
 *   write lock on DIR/writer.lock polled until a deadline
 *   (BFS_CACHE_LOCK_WAIT_MS; its holder's pid comes from F_GETLK and its
 *   state from /proc/PID/stat).  Only its holder begins an LMDB write
 *   transaction, so LMDB's writer mutex is then free or about to be.  An
 *   open that cannot get it reads without writing (bfs_cache_notice says
 *   who holds it); a running writer that cannot pauses inserts (dropped,
 *   counted in dropped_locked, said once through opts.log) and retries
 *   without waiting until it has the lock again; clear fails with
 *   -ETIMEDOUT.  users.lock's shared wait has the same deadline.  Not
 *   covered: LMDB's reader-table mutex, held only for the moment a reader
 *   slot is taken or the table scanned (a holder stopped exactly then
 *   still blocks new readers).  Within one process an environment
 *   must be opened once, so bfs_cache handles on the same directory share
 *   one MDB_env (a process-wide registry keyed by the directory's device
 *   and inode); a child after fork() must open its own handles.
 *
 *   Writer speed.  The writer's CPU is the filling epoch's cost, taken
 *   from decoding.  With MDB_WRITEMAP a value's bytes are copied once:
 *   MDB_RESERVE gives their place in the map, and the writer computes
 *   the CRC over a 256 KiB piece and pwrite()s that piece to data.mdb
 *   at once, while it is still in the CPU's cache (the page cache is the
 *   map's, so LMDB and readers see the bytes); the value header, with
 *   the CRC, goes last.  pwrite() fills whole pages, where a first touch
 *   through the map would zero each page first; and the map past the
 *   committed end is MADV_RANDOM, so that LMDB's touch of a value's first
 *   page does not read ahead (zero) the pages about to be written.  After
 *   the commit the values' pages are unmapped from the process (they stay
 *   in the page cache), so a filling epoch's resident set does not grow
 *   with the cache.  Without MDB_WRITEMAP LMDB copies each value into
 *   malloc()ed overflow pages and writev()s them at commit: two copies.
 *   A writer slower than decoding holds decoding back instead of losing
 *   samples: a queued submission pins the caller's memory until its
 *   done(ctx) (the engine's batch slot, see INTEGRATION; done comes once
 *   the bytes are copied, before the commit's sync), and the default
 *   queue_max (BFS_CACHE_QUEUE_MAX) is high enough that the engine runs
 *   out of free slots first, so production waits for the writer.  A
 *   submission is dropped only when queue_max submissions are already
 *   waiting (-EAGAIN, dropped_queue) or while inserts are paused because
 *   the cache is full (dropped_full: refused by submit with -ENOSPC, or
 *   dropped by the writer when it reaches it); the next epoch's misses
 *   submit it again.
 *
 * INTEGRATION (engine, source, mount)
 *   Mount start-up, in the daemon process (after the fork):
 *     engine fp   = bfs_engine_fingerprint(&engine_opts)
 *     fp          = bfs_cache_fingerprint(engine fp, "image_key=..;
 *                   label_key=..") (every source option that changes a
 *                   sample's bytes or raw label, defaults spelled out)
 *     cache       = bfs_cache_open({dir = --cache or NULL for the default,
 *                   max_bytes = --cache-size or 0, fingerprint = fp})
 *     on error: log errmsg and run without a cache.
 *     on success, log bfs_cache_notice() if it is not NULL (a damaged
 *     data.mdb was moved aside).
 *   Source open, per shard: bfs_cache_index_get(cache, abs dir, shard,
 *     stamp) -> use the blob, or scan and bfs_cache_index_put() the
 *     serialized index (the same bfs_shard_stamp as bfs_sample_identity
 *     carries).
 *   Each worker: one bfs_cache_reader, created with the worker, destroyed
 *     before bfs_cache_close.
 *   Producing source sample i into dst (the stage-1 sample, before
 *     augmentation and before --label-offset):
 *       bfs_source_identity(src, i, &id);
 *       bfs_cache_key_make(&key, fp, bfs_source_dir(src), &id);
 *       bfs_cache_get(reader, &key, dst, stage1_bytes, &raw_label)
 *         0: done, no decode;  anything else: decode as without a cache
 *         and remember (position j -> key of the sample actually decoded,
 *         i.e. the replacement's key in skip mode; raw label).
 *   Batch complete (every position filled): items for the positions that
 *     were decoded = { key, raw label, dst of j, stage1_bytes }; pin the
 *     slot's stage-1 buffer; then, with no engine lock held,
 *     bfs_cache_submit(cache, items, n, unpin_slot, slot).  unpin_slot
 *     (writer thread, or the caller's own thread when the submission is
 *     dropped) takes the engine lock, clears the pin, signals.  A pinned
 *     slot may be read but not refilled, so a writer behind decoding
 *     holds slots until it catches up and production waits for them:
 *     back-pressure from the memory budget, nothing dropped.
 *   stats.json: bfs_cache_get_stats(): hits, misses, inserts, evictions,
 *     dropped_full + dropped_queue, crc_errors, bytes_used, file_bytes,
 *     map_bytes, full.
 *   Unmount: destroy readers, then bfs_cache_close (commits the queue).
 *
 * Threads: see each function.  In short: open/close and reader
 * create/destroy from any thread but not concurrently with uses of that
 * object; a reader is used by one thread at a time; submit, flush,
 * index_get/put, get_stats, clear, verify and fingerprints from any number
 * of threads at once.
 *
 * The implementation is cache/cache_*.c, one concern a file;
 * cache_internal.h lists them in the one-way order in which they call
 * each other.
 */
#ifndef BFS_CACHE_H
#define BFS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"
#include "engine/source.h"
#include "engine/store.h"

typedef struct bfs_cache bfs_cache;
typedef struct bfs_cache_reader bfs_cache_reader;

/* Default limit: 10% of the free space of the cache's file system (plus
 * what the cache already occupies), at most 64 GiB, at least 16 MiB.  A
 * full ImageNet epoch at 224x224 is ~770 GB as float32 and ~190 GB as
 * uint8, more than a default should ever take from a shared disk, so the
 * default cannot cover it: it is sized so that a cache never fills a disk
 * behind a user's back, and small data sets (CIFAR, ImageNet subsets,
 * fine-tuning sets of tens of GB) fit whole.  Larger runs pass
 * --cache-size. */
#define BFS_CACHE_DEFAULT_MAX    (64ull << 30)
#define BFS_CACHE_DEFAULT_MIN    (16ull << 20)
#define BFS_CACHE_MIN_BYTES      (1ull << 20)   /* smallest max_bytes */
#define BFS_CACHE_FOREIGN_IDLE_S 3600           /* default foreign_idle_s */
/* Default queue_max: high enough that the caller's own memory bounds the
 * queue instead.  The engine's submissions each pin a batch slot, so when
 * the writer falls behind decoding, decoding waits for free slots rather
 * than the cache dropping batches: the first epoch is cached whole, and
 * the epoch after a remount decodes nothing.  (With 4, a cold epoch of
 * 2,000 float32 224x224 samples dropped 816 of them here; the next epoch
 * decoded those again.) */
#define BFS_CACHE_QUEUE_MAX      256
/* How long a wait for a cache's locks (its writer lock, users.lock) may
 * take before it gives up, in milliseconds; the environment variable
 * BATCHFS_CACHE_LOCK_WAIT_MS overrides it (tests shorten it).  A holder
 * that keeps a lock that long is stopped (SIGSTOP, a suspended job) or
 * hung; LMDB's own writer mutex would wait for it forever. */
#define BFS_CACHE_LOCK_WAIT_MS   10000

typedef enum {
	/* MDB_NOMETASYNC: consistent after kill -9 and after power loss. */
	BFS_CACHE_SYNC_DATA = 0,
	/* MDB_NOSYNC: consistent after kill -9; a power loss may corrupt
	 * the environment (then `batchfs cache clear DIR`). */
	BFS_CACHE_SYNC_NONE = 1,
} bfs_cache_sync;

typedef struct {
	/* The directory holding the environment (data.mdb, lock.mdb, writer.lock,
	 * users.lock); created (with parents, mode 0700) if missing unless
	 * admin.  NULL = bfs_cache_default_dir(). */
	const char *dir;
	/* The limit on data.mdb in bytes (rounded down to the page size);
	 * 0 = bfs_cache_default_size(dir).  Minimum BFS_CACHE_MIN_BYTES.
	 * The limit is this handle's writer's policy: its transactions use
	 * free pages anywhere but never take data.mdb's used end past
	 * max(limit, the used end already there).  The LMDB map is
	 * max(limit, data.mdb's length): with MDB_WRITEMAP LMDB sets the
	 * file's length to the map, so every opener maps at least what the
	 * others map and the file is never cut under another process (the
	 * length changes only under the writer lock).  So processes sharing a
	 * directory with different limits each keep to their own, and the
	 * file's length is the largest map any of them had.  A file already
	 * larger than this (an earlier, larger limit) is not shrunk, until
	 * `batchfs cache clear` removes it.  Handles of one process on one
	 * directory share the first one's sync mode. */
	uint64_t max_bytes;
	/* This mount's settings: 16 hex digits from bfs_engine_fingerprint().
	 * Required unless admin.  Its entries are the ones "fill, then keep"
	 * protects; entries of other fingerprints may be evicted when idle. */
	const char *fingerprint;
	bfs_cache_sync sync;
	/* Submissions that may wait for the writer; 0 = BFS_CACHE_QUEUE_MAX.
	 * Each one pins the caller's memory until its done(ctx), so the
	 * caller's memory budget is the real bound. */
	unsigned queue_max;
	/* Seconds a foreign fingerprint must have been idle before its
	 * entries may be evicted to make room; 0 = BFS_CACHE_FOREIGN_IDLE_S,
	 * negative = never evict other fingerprints. */
	int foreign_idle_s;
	/* 1: do not check CRCs on get (measurements only). */
	int skip_crc;
	/* 1: tools (`batchfs cache`): the directory and environment must
	 * exist (-ENOENT otherwise), the map size is adopted from the file
	 * (max_bytes ignored), no writer thread is started (submit and
	 * index_put return -EPERM), and nothing is written at open: a
	 * damaged data.mdb fails the open (BFS_E_CORRUPT, errmsg says where)
	 * and stays where it is. */
	int admin;
	/* Called with one line a person should hear about while the cache
	 * runs (warn 1: a problem, 0: it is over): the first samples dropped
	 * for lack of room (the limit, or a full file system), the writer
	 * lock held by another process past BFS_CACHE_LOCK_WAIT_MS and its
	 * release.  From the writer thread; it must not call into c.  NULL:
	 * nothing is said.  The cache itself never prints. */
	void (*log)(void *ctx, int warn, const char *line);
	void *log_ctx;
} bfs_cache_opts;

/* One sample's cache key; see DESIGN.  Plain value, copy freely. */
#define BFS_CACHE_KEY_BYTES 24
typedef struct {
	uint8_t k[BFS_CACHE_KEY_BYTES]; /* the LMDB key */
	uint64_t check;                 /* identity hash kept in the value */
} bfs_cache_key;

/* One sample to insert. */
typedef struct {
	bfs_cache_key key;
	int64_t label;
	const void *data; /* len bytes; must stay valid and unchanged until
			     the submission's done(ctx) */
	size_t len;       /* H * W * 3 * itemsize; 1 .. 1 GiB */
	bfs_store_shape shape; /* kept beside the bytes, given back by
				  bfs_cache_get_shaped (zero: none said) */
} bfs_cache_item;

typedef struct {
	/* This handle since open (atomic counters). */
	uint64_t hits;          /* gets that returned 0 */
	uint64_t misses;        /* gets that returned -ENOENT */
	uint64_t crc_errors;    /* gets that returned BFS_E_CRC */
	uint64_t inserts;       /* entries committed by this handle's writer */
	uint64_t duplicates;    /* submitted entries already present (kept) */
	uint64_t dropped_queue; /* items dropped: the writer queue was full */
	uint64_t dropped_full;  /* items not inserted: map or disk full */
	uint64_t dropped_locked;/* items not inserted: the writer lock was
				   held by another process past the wait */
	uint64_t evictions;     /* entries removed by the writer: idle foreign
				   fingerprints, changed shards, bad CRCs */
	uint64_t write_errors;  /* transactions failed for other reasons */
	uint64_t index_hits, index_misses;
	uint64_t damaged;       /* values found on a damaged LMDB page (see
				   DESIGN, Damage): not served, never deleted
				   or overwritten */
	/* The environment now (all fingerprints, all processes). */
	uint64_t entries;       /* samples stored */
	uint64_t index_entries; /* shard indexes stored */
	uint64_t bytes_used;    /* pages in use by the cache's databases */
	uint64_t file_bytes;    /* data.mdb's blocks on disk (high-water
				   mark; its length may be the map's) */
	uint64_t map_bytes;     /* this handle's limit (max_bytes; admin:
				   the map size) */
	uint64_t total_hits;    /* persisted: every process, since created or */
	uint64_t total_misses;  /*   cleared, including unflushed counts here */
	int full;               /* 1 while inserts are paused: cache full */
	int fs_full;            /* 1 once a drop for lack of room was the
				   file system's (ENOSPC, EDQUOT), not the
				   limit's */
	int nowrite;            /* 1: opened without the writer lock (held
				   by a stopped process): adds nothing */
} bfs_cache_stats;

/* One fingerprint present in the cache (bfs_cache_fingerprints). */
typedef struct {
	char fingerprint[17];   /* 16 hex digits */
	uint64_t entries;
	uint64_t bytes;         /* value bytes (headers included) */
	int64_t last_active_ns; /* CLOCK_REALTIME of the last use by a mount;
				   0 if unknown */
} bfs_cache_fp_info;

/* One entry as reported by bfs_cache_verify(). */
typedef struct {
	char db[8];             /* "samples", "index" or "meta" */
	char fingerprint[17];   /* samples only ("-" otherwise) */
	uint64_t shard_hash;    /* samples only */
	uint64_t offset;        /* record offset in the shard; samples only */
	uint64_t len;           /* stored value size */
	/* BFS_E_CRC: CRC, header or key wrong; BFS_E_CORRUPT: the value's
	 * LMDB page header is damaged, or a key that does not belong in
	 * that database */
	int code;
} bfs_cache_entry_info;

/* What bfs_cache_check() walked. */
typedef struct {
	uint64_t txnid;          /* the LMDB snapshot checked */
	uint64_t psize;          /* LMDB page size */
	uint64_t pages;          /* pages up to the snapshot's last one */
	uint64_t tree_pages;     /* branch and leaf pages, read whole */
	uint64_t overflow_pages; /* pages of values kept outside the trees */
	uint64_t free_pages;     /* pages on LMDB's free list */
	uint64_t samples;        /* sample entries */
	uint64_t indexes;        /* shard index entries */
	uint64_t usec;           /* wall time, fork included (bfs_cache_check) */
} bfs_cache_check_info;

/*
 * The default cache directory: "$XDG_CACHE_HOME/batchfs" when
 * XDG_CACHE_HOME is set to an absolute path, else "$HOME/.cache/batchfs"
 * (HOME from the environment, else the password database).  Writes the
 * path (NUL-terminated) into buf.  Creates nothing.
 * Errors: -ENAMETOOLONG (cap too small), -ENOENT (no home directory).
 * Any thread (reads the environment; not safe against concurrent setenv).
 */
int bfs_cache_default_dir(char *buf, size_t cap);

/*
 * The default limit for a cache in dir (see BFS_CACHE_DEFAULT_MAX):
 * min(64 GiB, existing data.mdb + free space / 10), at least 16 MiB.  dir
 * need not exist (its nearest existing parent's file system is measured).
 * Never fails: 16 MiB when nothing can be measured.  Any thread.
 */
uint64_t bfs_cache_default_size(const char *dir);

/*
 * Open (creating if needed, unless o->admin) the cache in o->dir and start
 * its writer thread.  o and its strings are copied.  Several handles may
 * be open on one directory in one process (they share the environment)
 * and any number of processes may open it at once.  On failure nothing is
 * left open; the caller should run without a cache.
 * The first open of a directory in a process checks data.mdb
 * (bfs_cache_check, in a child process; see DESIGN, Damage) before LMDB
 * reads it.  A damaged file is moved aside to data.mdb.damaged-TIME and
 * replaced by an empty cache when no other process has the directory
 * open; bfs_cache_notice() then says so.  Files that are not a usable
 * LMDB environment, or a cache of another batchfs cache format, are
 * deleted and replaced the same way (it is only a cache).
 * Waits for the cache's locks are bounded (BFS_CACHE_LOCK_WAIT_MS): when
 * another process holds the writer lock all that time (stopped, say), the
 * handle opens without it: it reads the cache and adds nothing (submit
 * drops, counted in dropped_locked; index_put -EROFS), and
 * bfs_cache_notice() names the holder and says whether it is stopped.
 * Errors: -ETIMEDOUT (users.lock held exclusively past the wait: errmsg
 * names the holder), -EINVAL (bad options: max_bytes below BFS_CACHE_MIN_BYTES,
 * fingerprint not 16 hex digits or missing), -ENOENT (admin and no cache
 * there), -EACCES, -ENOSPC, -ENOMEM, -EAGAIN (thread), BFS_E_CORRUPT (the
 * files are damaged or unusable and another process has them open, or
 * admin: `batchfs cache clear DIR` removes them); errmsg says which file
 * and what is wrong (the page and what the check found, or what LMDB
 * said).
 * Any thread (it forks for the check; the child runs only the check and
 * exits); call it after any fork() that will use it (a daemon opens its
 * cache in the daemon process).
 */
int bfs_cache_open(const bfs_cache_opts *o, bfs_cache **out, char *errmsg);

/*
 * Whether a writer could take c's writer lock (DIR/writer.lock) now,
 * waiting at most BFS_CACHE_LOCK_WAIT_MS: 0 (it could; taken and given
 * back at once), -ETIMEDOUT (another process held it all that time:
 * errmsg names it by pid and says whether it is stopped, from
 * /proc/PID/stat), -errno.  For tools: `batchfs cache clear` and
 * `verify` report a stopped writer instead of waiting for it.  Any
 * thread; not while this thread is in a transaction of c.
 */
int bfs_cache_writer_probe(bfs_cache *c, char *errmsg);

/*
 * Commit what is queued (every pending submit's done(ctx) is called, from
 * the writer thread, before this returns), flush the counters to the
 * meta database, sync (SYNC_NONE), stop the writer and release the
 * environment.  Every reader of c must have been destroyed and no other
 * call on c may be running or follow.  Accepts NULL and half-built
 * handles.  Any thread, except a done() callback of c.
 */
void bfs_cache_close(bfs_cache *c);

/* The directory of an open cache (absolute or as given); lives as long as
 * c.  Any thread. */
const char *bfs_cache_dir(const bfs_cache *c);

/* What bfs_cache_open found and did that a person should hear about, as
 * one line ("data.mdb was damaged (page 12 (leaf of 'samples'): ...);
 * moved it aside to data.mdb.damaged-20240102T030405Z, and a new cache was
 * started"), or NULL.  Lives as long as c.  Any thread. */
const char *bfs_cache_notice(const bfs_cache *c);

/*
 * The fingerprint to key a mount's samples with: engine_fp (16 hex digits
 * from bfs_engine_fingerprint, which covers size, dtype, decode and resize
 * rules and BFS_FORMAT_VERSION) folded with every *source* setting that
 * changes a sample's bytes or its stored label for the same record, as one
 * canonical string, defaults spelled out, e.g.
 *   "image_key=image/encoded;label_key=image/class/label".
 * Labels are stored as the source gives them: a --label-offset must be
 * applied after bfs_cache_get, never stored, so it stays out of here.
 * Writes 16 hex digits + NUL into out.  Pure: any thread.
 * Errors: -EINVAL (engine_fp not 16 hex digits, or NULL arguments).
 */
int bfs_cache_fingerprint(char out[17], const char *engine_fp,
			  const char *source_settings);

/*
 * Build the key of one sample.  fingerprint: 16 hex digits
 * (bfs_engine_fingerprint); dir: bfs_source_dir() (absolute, trailing '/'
 * ignored); id: from bfs_source_identity(), whose shard is joined to dir
 * as "dir/shard".  Pure function of its arguments: any thread, no
 * allocation (about 100 ns).
 * Errors: -EINVAL (fingerprint not 16 hex digits, dir or id->shard NULL).
 */
int bfs_cache_key_make(bfs_cache_key *key, const char *fingerprint,
		       const char *dir, const bfs_sample_identity *id);

/*
 * A reader for one worker thread: holds one LMDB reader slot (of 2048
 * shared by every process on the directory) for its whole life.  Create
 * one per thread that calls bfs_cache_get; a reader may move between
 * threads but must be used by one at a time.
 * Errors: -EAGAIN (reader table full: run that worker without the cache),
 * BFS_E_CORRUPT (the environment failed; see open), -ENOMEM.
 */
int bfs_cache_reader_create(bfs_cache *c, bfs_cache_reader **out);
/* Free a reader and its slot.  Accepts NULL.  Before bfs_cache_close. */
void bfs_cache_reader_destroy(bfs_cache_reader *r);

/*
 * Look up key and, on a hit, copy its sample into dst (exactly len bytes,
 * which must equal the stored length) and its label into *label.  The
 * value is read in place from the map (no copy inside LMDB) and copied
 * once into dst while its CRC32C is checked; nothing of the map is
 * referenced after the call.  dst may be any alignment.
 * Returns 0 (hit; counted in hits), -ENOENT (miss; counted), BFS_E_CRC
 * (the entry is corrupt: dst holds garbage, the entry has been handed to
 * the writer for deletion, counted in crc_errors -- decode the sample and
 * count it as a cache CRC error), -EINVAL (len differs from the stored
 * length: a caller bug, the key's fingerprint does not match the size;
 * not counted), BFS_E_CORRUPT (the value's LMDB page header is damaged:
 * counted in damaged, never deleted or replaced; or the environment
 * failed), -EIO (the environment failed); treat those as a miss.  On any
 * error *label is untouched.  Whatever the code, the caller can always
 * fall back to decoding.
 * Threads: one thread per reader at a time; any number of readers of one
 * cache at once.  Never blocks on the writer (LMDB readers take no lock),
 * except for a moment while another process's growth of the map is
 * adopted.
 */
int bfs_cache_get(bfs_cache_reader *r, const bfs_cache_key *key, void *dst,
		  size_t len, int64_t *label);

/*
 * bfs_cache_get for samples whose size the caller does not know: a hit
 * copies the stored bytes into dst when they fit in cap and gives their
 * length in *len, their shape (as submitted) in *shape and the label in
 * *label.  -ENOBUFS: the sample is larger than cap; *len says how large,
 * nothing is copied or counted (ask again with room).  Otherwise as
 * bfs_cache_get (no -EINVAL for a length).  Same threads as bfs_cache_get.
 */
int bfs_cache_get_shaped(bfs_cache_reader *r, const bfs_cache_key *key, void *dst,
			 size_t cap, size_t *len, bfs_store_shape *shape,
			 int64_t *label);

/*
 * bfs_cache_get_shaped without the copy: a hit points *data at the
 * sample's *len stored bytes where they lie in the map, after their CRC32C
 * was checked there (with skip_crc, their header only), and gives their
 * shape and label.  The bytes are read-only and belong to the cache.
 * They stay valid and unchanged -- a snapshot: an entry deleted, replaced
 * or cleared meanwhile, by this process or another, does not touch them --
 * until the same thread calls bfs_cache_put_ref(r), or asks r again
 * (bfs_cache_get, _get_shaped, _get_ref), or destroys r; one reference per
 * reader at a time.  While it is lent the reader's read transaction stays
 * open and the map lock read-held: the writer cannot reuse the pages freed
 * since, and a map grown by another process is adopted only after it
 * comes back.  So give it back as soon as the bytes are used, and never
 * wait on anything (a condition, the writer, another reader's thread)
 * while holding it, nor begin another transaction of this cache on that
 * thread.  No -ENOBUFS; otherwise the returns and counts of
 * bfs_cache_get_shaped, and on error nothing is lent (*data untouched).
 * Threads: as bfs_cache_get; put_ref on the thread that got the reference.
 */
int bfs_cache_get_ref(bfs_cache_reader *r, const bfs_cache_key *key, const void **data,
		      size_t *len, bfs_store_shape *shape, int64_t *label);
/* Give back r's lent reference, if any (the bytes are no longer valid).
 * Accepts NULL and a reader that lends nothing.  The thread that got it. */
void bfs_cache_put_ref(bfs_cache_reader *r);

/* Whether an entry of key is stored: 1 or 0 (an error is 0).  Only the
 * key is looked up: its value is not read, checked or counted (a hint, for
 * planning what the shards will have to give).  As bfs_cache_get's
 * threads; gives back r's lent reference first. */
int bfs_cache_has(bfs_cache_reader *r, const bfs_cache_key *key);

/*
 * Whether a submission now would be inserted rather than dropped: 0 while
 * inserts are paused because the cache is full (see DESIGN, Size limit)
 * or for an admin handle, else 1.  A hint (the state may change the next
 * moment), read without locks.  Any thread.
 */
int bfs_cache_inserting(bfs_cache *c);

/*
 * Queue n items for insertion in one write transaction, then done(ctx).
 * The items array is copied; the bytes they point to are not: they must
 * stay valid and unchanged until done(ctx) is called.  done is called
 * exactly once for every call, whatever the return value:
 *   - returns 0: queued; done is called later from the writer thread,
 *     once the bytes are copied into the transaction (before its commit)
 *     or the submission is dropped;
 *   - returns an error: nothing is queued and done has already been called
 *     on the calling thread, before this returned.  So never hold a lock
 *     that done takes while calling submit.
 * Entries already present are kept (counted in duplicates) unless they
 * fail their CRC, in which case they are replaced.  When the queue is full
 * or inserts are paused because the cache is full, the submission is
 * dropped and counted (dropped_queue / dropped_full).  Never blocks
 * beyond a short mutex hold.  done runs without cache locks held; it must
 * not block for long, and must not call bfs_cache_close.
 * Errors: -EAGAIN (queue full), -ENOSPC (cache full, inserts paused),
 * -EPERM (admin handle), -EINVAL (n > 65536, an item with len 0 or above
 * 1 GiB, or data NULL), -ENOMEM, -ESHUTDOWN (closing).  n == 0 just calls
 * done and returns 0.
 * Any thread.
 */
int bfs_cache_submit(bfs_cache *c, const bfs_cache_item *items, size_t n,
		     void (*done)(void *ctx), void *ctx);

/*
 * The engine's store (engine/store.h) over c: a sample's identity becomes
 * its key through bfs_cache_key_make with this fingerprint (the mount's
 * bfs_cache_fingerprint) and dir (bfs_source_dir()); get is
 * bfs_cache_get_shaped (a hit, -ENOENT, -ENOBUFS, BFS_E_CRC, ...), offer
 * one bfs_cache_submit (its done is called exactly once, shapes kept),
 * wants bfs_cache_inserting, flush bfs_cache_flush.  Each store reader holds
 * one cache reader.  *out is filled in; bfs_cache_store_close frees what
 * it holds, after the engine that used it is gone and before c is closed.
 * 0, -EINVAL (fingerprint not 16 characters, NULL arguments), -ENOMEM.
 */
int bfs_cache_store_open(bfs_cache *c, const char *fingerprint,
			 const char *dir, bfs_store *out);
void bfs_cache_store_close(bfs_store *s); /* accepts NULL, or a closed one */

/*
 * Wait until everything submitted to c (samples, index puts, CRC
 * deletions) before this call has been committed or dropped.  Returns 0,
 * or -EPERM for an admin handle.  Any thread except c's done callbacks.
 */
int bfs_cache_flush(bfs_cache *c);

/*
 * The stored index of one shard, identified like a sample (dir =
 * bfs_source_dir(), shard relative to it, *st the shard's stamp: size,
 * mtime, inode number and ctime; for a remote shard dir is the root URL,
 * shard the object's name and *st bfs_shard_stamp_remote(size, ETag)).  On a hit *blob is a malloc()ed copy of
 * exactly the bytes given to bfs_cache_index_put, *len its length; the
 * caller frees it with free().
 * Returns 0, -ENOENT (never stored, or stored for another stamp; counted
 * in index_misses), BFS_E_CRC (stored copy corrupt, counted in
 * index_misses: rescan and put, which replaces it), -EINVAL (NULL
 * arguments), -ENOMEM, -EIO or BFS_E_CORRUPT (environment failed, or the
 * stored copy's page is damaged: rescan).
 * Any thread, at any time (uses its own short read transaction).
 */
int bfs_cache_index_get(bfs_cache *c, const char *dir, const char *shard,
			const bfs_shard_stamp *st, void **blob, size_t *len);

/*
 * Store the index of one shard (blob is copied; the caller keeps it).  The
 * write happens on the writer thread, batched with other index puts into
 * one transaction; bfs_cache_flush() waits for it.  If an index for the
 * same dir/shard with another stamp is stored, it is replaced and every
 * sample entry of the old shard identity (all fingerprints) is deleted,
 * counted in evictions.  Returns 0 (queued), -EAGAIN (more than 256 MiB
 * of index puts pending: not stored, scan next time), -EPERM (admin),
 * -EINVAL (len above 1 GiB, NULL arguments), -ENOMEM.
 * Any thread.
 */
int bfs_cache_index_put(bfs_cache *c, const char *dir, const char *shard,
			const bfs_shard_stamp *st, const void *blob,
			size_t len);

/*
 * Fill *st (see bfs_cache_stats).  Counters are read atomically one by
 * one; the environment figures come from a short read transaction.
 * Cheap (a few microseconds).  Any thread.
 */
void bfs_cache_get_stats(bfs_cache *c, bfs_cache_stats *st);

/*
 * Delete every sample entry of fingerprint (16 hex digits), or, with
 * fingerprint NULL, every sample, every shard index and the persisted
 * counters.  Runs on the calling thread in transactions of a bounded size,
 * concurrently with readers and writers (of any process); the space is
 * reused, data.mdb keeps its size (see bfs_cache_remove_files).  *removed
 * (may be NULL) gets the number of sample entries deleted.  Also lifts a
 * paused "cache full" state.
 * Errors: -EINVAL (bad fingerprint), -EIO/BFS_E_CORRUPT (environment).
 * Any thread.
 */
int bfs_cache_clear(bfs_cache *c, const char *fingerprint,
		    uint64_t *removed);

/* One source's entries (bfs_cache_source). */
typedef struct {
	uint64_t shards;        /* shard indexes stored for the source */
	uint64_t index_bytes;   /* their bytes */
	uint64_t samples;       /* sample entries of those shards (every
				 * fingerprint) */
	uint64_t sample_bytes;
} bfs_cache_source_info;

/*
 * The entries of one source: the shard indexes whose path lies under root
 * (a local shard directory's absolute path, or a remote source's root URL,
 * bfs_storage_root: its trailing '/' does not matter) and the sample
 * entries, of every fingerprint, of the shards those indexes name (each
 * by the identity its index was stored with).  With remove, they are
 * deleted as well (samples first, then the indexes, in transactions of a
 * bounded size, concurrently with readers and writers; the space is
 * reused).  *info gets what was found (and removed).  The images of a
 * folder layout have no stored index, so their samples are not found
 * this way (bfs_cache_clear by fingerprint removes them).  Damaged index
 * entries are passed over (bfs_cache_verify reports them).
 * Returns 0, -EINVAL (NULL, or an empty root), -ENOMEM, -EIO/BFS_E_CORRUPT
 * (environment).  Any thread.
 */
int bfs_cache_source(bfs_cache *c, const char *root, int remove,
		     bfs_cache_source_info *info);

/*
 * Remove the cache files of dir (data.mdb, lock.mdb, a damaged copy that
 * an open moved aside and a mount's damage marker), so the space goes
 * back to the file system -- only if no bfs_cache of any process has dir
 * open (users.lock is free).  Works on an environment LMDB cannot open.
 * Returns 0 (removed, or nothing was there), -EBUSY (in use: use
 * bfs_cache_clear), -errno.  Any thread; never with a handle of this
 * process open on dir.
 */
int bfs_cache_remove_files(const char *dir);

/*
 * Check the CRC, header and key of every sample entry (of fingerprint
 * only, when not NULL) and the LMDB page header of each one's value; with
 * fingerprint NULL, also every shard index (CRC, and a key that is its
 * path's) and every meta record (a known name, its CRC).  The structure
 * of data.mdb was checked when c was opened (bfs_cache_open).  For each
 * bad entry calls bad(ctx, info) (may be NULL) and, when remove is 1,
 * deletes it if it is a bad sample entry with a sound page (BFS_E_CRC).
 * *checked gets the number of sample entries checked, *nbad the number
 * of bad entries of any database (either may be NULL).  Reads samples
 * in chunks of short read transactions, so it does not pin pages for
 * long; entries added meanwhile may or may not be seen.  Returns 0
 * (whether or not bad entries were found), -EINVAL (bad fingerprint),
 * -EIO/BFS_E_CORRUPT (environment).
 * Any thread.
 */
int bfs_cache_verify(bfs_cache *c, const char *fingerprint, int remove,
		     void (*bad)(void *ctx, const bfs_cache_entry_info *e),
		     void *ctx, uint64_t *checked, uint64_t *nbad);

/*
 * List the fingerprints that have sample entries (plus ones with a
 * recorded use but none left), sorted by fingerprint, with counts.  Scans
 * every key (values are not read): about 10 ms per 100,000 entries.
 * *out is a malloc()ed array of *n elements (NULL when *n is 0), freed by
 * the caller with free().  Errors: -ENOMEM, -EIO/BFS_E_CORRUPT.
 * Any thread.
 */
int bfs_cache_fingerprints(bfs_cache *c, bfs_cache_fp_info **out,
			   size_t *n);

/*
 * Check the structure of dir/data.mdb without trusting any byte of it
 * (see DESIGN, Damage): the meta pages; the snapshot LMDB uses, walked
 * from its roots (the free database, the main one and every named one it
 * lists): each branch and leaf page's header (page number, flags, pad,
 * lower/upper), its node offsets inside the page and the nodes tiling
 * the used part exactly, key and data sizes inside the page, node flags a
 * batchfs cache uses, keys ascending within each page and inside the
 * range the parent's separators give it, the same depth for every leaf,
 * overflow page numbers and counts inside the file, the free list's page
 * lists (inside the file, descending), no page reached twice (a loop, or
 * a page both in use and free), and the counts of every database record
 * and of the meta page exactly matched (every page up to the last is in
 * use or free).  Samples' overflow pages are claimed but not read.
 * Runs in a forked child; a check that dies is a verdict (BFS_E_CORRUPT),
 * never a crash of the caller.  When no other process has dir open
 * (users.lock) the newest snapshot is walked; otherwise the child begins
 * an LMDB read transaction first, whose snapshot other writers cannot
 * recycle under the walk.  Costs one read of every branch and leaf page
 * (about 40 bytes of tree per sample) -- docs/RELIABILITY.md has
 * measurements.
 * Returns 0 (sound; *info filled), BFS_E_CORRUPT (damaged: errmsg says
 * which page and what is wrong, or how the check died), -ENOENT (no
 * data.mdb), -EAGAIN (other processes committed too fast for a snapshot
 * to be walked, three times), -ENOMEM, -errno (pipe, fork, open, mmap).
 * info may be NULL.  Any thread; forks.
 */
int bfs_cache_check(const char *dir, bfs_cache_check_info *info,
		    char *errmsg);

/*
 * The same walk over an image of data.mdb in memory (len bytes; all of it
 * readable), in the calling process, for tests: nothing in the bytes is
 * trusted.  The newest snapshot is walked.  Returns 0, BFS_E_CORRUPT
 * (errmsg says why), -ENOMEM, -EINVAL (data NULL).  Any thread.
 */
int bfs_cache_check_image(const void *data, size_t len,
			  bfs_cache_check_info *info, char *errmsg);

#endif
