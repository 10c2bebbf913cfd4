/*
 * cache_internal.h - what the files of cache/ share.  Not part of the
 * contract; see cache.h.
 *
 * The files, lowest first.  A file may call functions of the files listed
 * before it, never of one listed after it; where a lower one must reach
 * up, the higher one hands it a function pointer (c->crcdel).
 *   cache_env.c     an open environment: the writer lock (writer.lock,
 *                   with a deadline), transactions under the map lock,
 *                   adopting a grown map, the overflow page check, the
 *                   damage marker, LMDB codes as ours, the clocks
 *   cache_key.c     keys, fingerprints and shard hashes (pure)
 *   cache_value.c   the stored formats and their checks: sample values,
 *                   index values, meta records
 *   cache_read.c    readers, bfs_cache_get, index reads, stats
 *   cache_writer.c  the writer thread: the queue behind submit and
 *                   index_put, commits, "fill, then keep", eviction, CRC
 *                   deletions, persisted counters
 *   cache_admin.c   clear, verify, the fingerprint list, one source's
 *                   entries, removing the files of an unused cache and
 *                   damaged copies
 *   cache_check.c   the structural check of data.mdb (calls none of the
 *                   others)
 *   cache_open.c    opening and closing a handle: defaults, users.lock, the
 *                   environment registry, the check at first open, moving a
 *                   damaged file aside, starting and stopping the writer
 * cache_store.c, the engine's store over the cache, uses cache.h alone;
 * nothing in cache/ calls it.
 */
#ifndef BFS_CACHE_INTERNAL_H
#define BFS_CACHE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/cache.h"

/* The format of what the cache stores.  Bump on any change of keys,
 * headers or meta records: an environment with another value is refused
 * (BFS_E_CORRUPT) and `batchfs cache clear` removes it.  The "format"
 * record itself (4 bytes, no CRC) never changes, so every version can read
 * it.  2: index headers and shard hashes carry the inode number and
 * ctime.  3: sample CRCs cover the key; counter and fingerprint records
 * carry a CRC32C.  4: sample values carry their shape (variable-size
 * samples: RandomResizedCrop's reduced copies) in a 64-byte header. */
#define BFS__CACHE_FORMAT 4

#define BFS__VMAGIC   0x63534642u /* "BFSc" */
#define BFS__IMAGIC   0x69534642u /* "BFSi" */
#define BFS__VHDR     64
#define BFS__IHDR     64
#define BFS__MAXREADERS 2048
#define BFS__ITEM_MAX (1ull << 30)
#define BFS__PAUSE_NS (5ll * 1000000000ll)   /* inserts paused when full */
#define BFS__FLUSH_NS (30ll * 1000000000ll)  /* counters -> meta DB */
/* A damaged data.mdb moved aside at open: DIR/data.mdb.damaged-TIME.  Its
 * marker, DIR/damaged, is left by a mount that met damage at run time. */
#define BFS__DAMAGED_PREFIX "data.mdb.damaged-"

/* The header in front of every sample value.  The CRC32C covers the
 * payload, then header bytes [0, 8) and [12, 64), then the 24-byte key. */
struct bfs__vhdr {
	uint32_t magic;
	uint16_t version;  /* BFS__CACHE_FORMAT */
	uint16_t hdr_len;  /* BFS__VHDR */
	uint32_t crc;
	uint32_t flags;    /* 0 */
	uint64_t len;      /* payload bytes */
	int64_t label;
	uint64_t check;    /* bfs_cache_key.check */
	int64_t stamp_ns;  /* CLOCK_REALTIME at insert (informational) */
	uint32_t h, w;     /* bfs_store_shape, as submitted */
	uint32_t src_h, src_w;
};

/* The header in front of every index value, followed by the path (no NUL)
 * and the blob.  CRC32C covers path and blob, then bytes [0,8), [12,64).
 * size, mtime_ns, ino and ctime_ns are the shard's bfs_shard_stamp. */
struct bfs__ihdr {
	uint32_t magic;
	uint16_t version;
	uint16_t hdr_len;  /* BFS__IHDR */
	uint32_t crc;
	uint32_t path_len;
	uint64_t size;
	int64_t mtime_ns;
	uint64_t blob_len;
	int64_t stamp_ns;  /* CLOCK_REALTIME at insert (informational) */
	uint64_t ino;
	int64_t ctime_ns;
};

/* The meta record of one fingerprint ("fp" + 8 bytes), stored like the
 * counters "hits" and "misses" (uint64_t): the value's bytes, then a CRC32C
 * of key and value (bfs__meta_get/put). */
struct bfs__fprec {
	int64_t last_active_ns; /* CLOCK_REALTIME */
	int64_t first_seen_ns;
};

/* One environment of one directory in one process, shared by every
 * bfs_cache handle on that directory (LMDB forbids opening it twice). */
struct bfs__env {
	struct bfs__env *next;  /* protected by reg_lock (cache_open.c) */
	unsigned refs;          /* protected by reg_lock (cache_open.c) */
	dev_t dev;
	ino_t ino;
	pid_t pid;              /* entries inherited through fork() are
				   never used or closed by the child */
	MDB_env *env;
	MDB_dbi samples, index, meta;
	unsigned psize;
	/* The map (bfs__check_ovhdr), protected by maplock: read-held to use,
	 * set at open and while write-held in adopt_map. */
	const uint8_t *map;
	size_t mapsize;
	_Atomic int damaged;    /* 1 once bfs__note_damage wrote the marker */
	/* MDB_WRITEMAP: write transactions put their pages straight into the
	 * shared map, so every page LMDB may touch past the committed end
	 * must have its blocks first (bfs__reserve), or a full disk would be
	 * a SIGBUS.  Set at open.  reserved: data.mdb has blocks up to here
	 * (bytes), as far as this process made sure; protected by LMDB's
	 * write lock (read and written only inside a write transaction). */
	int writemap;
	uint64_t reserved;
	/* MDB_WRITEMAP: the map is MADV_RANDOM from random_from (bytes) on,
	 * in the map at random_map: LMDB's first touch of a new page there
	 * must not read ahead (zero) the pages that pwrite() is about to
	 * fill.  Protected like reserved. */
	const uint8_t *random_map;
	uint64_t random_from;
	int lock_fd;            /* our own fd of lock.mdb (fallocate); closed
				   only after mdb_env_close */
	/* The writer lock (bfs__wlock): a POSIX write lock on
	 * DIR/writer.lock, taken with a deadline before every LMDB write
	 * transaction (LMDB's own writer mutex waits forever for a holder
	 * that is stopped) and around every change of the map's size (so
	 * that no process cuts data.mdb below another's map).  wlock_fd is
	 * the only fd of writer.lock in the process (closing any other would
	 * drop the lock).  wmutex serializes the process's threads around
	 * it (POSIX locks belong to the process) and protects wtxn, the
	 * write transaction the lock is held for (NULL: held outside one, or
	 * not held). */
	int wlock_fd;
	pthread_mutex_t wmutex;
	MDB_txn *_Atomic wtxn;
	int64_t lock_wait_ns;   /* the deadline of a wait; set at open */
	/* 1 after a wait ran out on a stopped holder, until the lock is had
	 * again: while it stays stopped, later takers try once and do not
	 * wait. */
	_Atomic int lock_stuck;
	/* The limits of the handles on e (max_bytes, the largest): data.mdb
	 * gets blocks past the committed end up to here (bfs__reserve).
	 * Protected by reg_lock (cache_open.c); read without it. */
	_Atomic uint64_t limit;
	/* Read-held by every transaction of this process, write-held while
	 * the map is replaced (MDB_MAP_RESIZED: another process grew the
	 * file past our map).  Writer-preferring. */
	pthread_rwlock_t maplock;
};

enum { BFS__P_SUBMIT, BFS__P_INDEX, BFS__P_CRCDEL };

/* One unit of work for the writer, in FIFO order. */
struct bfs__pending {
	struct bfs__pending *next;
	int kind;
	uint64_t seq;
	/* BFS__P_SUBMIT */
	bfs_cache_item *items;
	size_t n;
	uint64_t bytes;         /* the items' lengths, summed */
	void (*done)(void *ctx);
	void *ctx;
	/* BFS__P_INDEX: key, then the whole value ready to store */
	uint8_t ikey[16];
	void *ival;
	size_t ival_len;
	/* BFS__P_CRCDEL */
	bfs_cache_key key;
};

struct bfs_cache {
	bfs_cache_opts o;       /* copy; strings point into this struct */
	char *dir;
	char *notice;           /* bfs_cache_notice(); set at open */
	char fp_hex[17];
	uint8_t fp[8];
	int has_fp;
	struct bfs__env *e;
	int users_fd;           /* LOCK_SH on users.lock while open */

	pthread_mutex_t lock;
	pthread_cond_t wake;    /* work queued, or stop */
	pthread_cond_t progress;/* seq_done advanced */
	/* protected by lock: */
	struct bfs__pending *head, *tail;
	unsigned nsubmits;      /* BFS__P_SUBMIT entries queued */
	unsigned ncrcdel;       /* BFS__P_CRCDEL entries queued */
	size_t index_bytes;     /* BFS__P_INDEX bytes queued */
	uint64_t seq_queued, seq_done;
	int stop;

	pthread_t writer;
	int writer_started;
	/* Queue the deletion of a sample entry that failed its CRC: the hook
	 * by which bfs_cache_get hands the key to the writer, which sits above
	 * the read path.  Set by bfs__writer_start before c is handed out and
	 * kept until close; NULL when no writer runs (admin handles).  The
	 * hook itself may be called from any thread. */
	void (*crcdel)(bfs_cache *c, const bfs_cache_key *key);

	/* The size limit, a policy of the writer: a transaction may use
	 * free pages anywhere, but may not take data.mdb's used end past
	 * max(limit, the used end when it began).  The map is at least this
	 * and at least data.mdb's length (never cut below another process's
	 * map).  Set at open. */
	uint64_t limit;
	/* 1: the writer lock could not be had at open: no writer runs,
	 * submissions are dropped (dropped_locked), index puts refused. */
	int nowrite;
	/* Called with a line a person should hear about (the first drop for
	 * lack of room, a writer lock that ran out), from the writer thread;
	 * o.log.  Each episode once: */
	_Atomic int said_full, said_locked;
	_Atomic int fs_full;    /* the last "full" was the file system's */

	_Atomic int64_t paused_until_ns; /* CLOCK_MONOTONIC; 0 = not full */
	_Atomic int paused_locked;       /* the pause is a writer lock that
					    ran out, not a full cache */
	_Atomic uint64_t hits, misses, crc_errors, inserts, duplicates,
		dropped_queue, dropped_full, dropped_locked, evictions,
		write_errors,
		index_hits, index_misses, damaged;
	/* Odd while the writer commits a counter flush and moves flushed_*
	 * (a seqlock for get_stats). */
	_Atomic uint64_t flush_seq;
	/* hits/misses already added to the meta DB (written by the writer) */
	_Atomic uint64_t flushed_hits, flushed_misses;
	uint64_t pend_hits, pend_misses; /* writer: in the open txn */
	/* writer thread only: */
	int64_t last_flush_ns;
	int64_t last_sync_ns;
	int unsynced;
};

struct bfs_cache_reader {
	bfs_cache *c;
	MDB_txn *txn;           /* reset between gets; slot held */
	/* 1 while a bfs_cache_get_ref's value is lent out: txn stays renewed
	 * and e->maplock read-held by the thread that asked, until
	 * bfs_cache_put_ref, the next get, or destroy.  Owner thread only. */
	int lent;
	const void *lent_at;    /* the lent value's bytes in the map */
	size_t lent_len;
};

/* The functions each file shares, in the order above (cache_read.c and
 * cache_open.c define only functions of cache.h). */

/* cache_env.c */
/* An LMDB code (or a positive errno) as 0 or a negative error of ours. */
int bfs__map_err(int rc);
int64_t bfs__now_ns(void);      /* CLOCK_MONOTONIC */
int64_t bfs__wall_ns(void);     /* CLOCK_REALTIME */
/* Set e->map and e->mapsize: where LMDB mapped data.mdb (map NULL when
 * that cannot be told).  maplock write-held, or e not yet shared. */
void bfs__note_map(struct bfs__env *e);
/* Begin a transaction (read-only when rdonly) with e->maplock read-held;
 * adopts a grown map on MDB_MAP_RESIZED.  On success the caller must
 * bfs__txn_end() it.  Returns an LMDB/errno code. */
int bfs__txn_begin(struct bfs__env *e, int rdonly, MDB_txn **txn);
/* The deadline of a wait for the writer lock: BFS_CACHE_LOCK_WAIT_MS, or
 * what BATCHFS_CACHE_LOCK_WAIT_MS says (milliseconds, > 0). */
int64_t bfs__lock_wait_ns(void);
/* Take the writer lock of e (see struct bfs__env): e->wmutex, then the
 * write lock on writer.lock, each waited for until e->lock_wait_ns from
 * now (tried once, no wait, while e->lock_stuck).  0, or ETIMEDOUT (the
 * wait ran out; *holder, when not NULL, gets the pid that holds
 * writer.lock, 0 if unknown; e->lock_stuck is set when that process is
 * stopped), or an errno.
 * Matched by bfs__wunlock.  Not while holding e->maplock. */
int bfs__wlock(struct bfs__env *e, pid_t *holder);
void bfs__wunlock(struct bfs__env *e);
/* The pid holding a lock that conflicts with a write lock of fd's whole
 * file (POSIX record locks), 0 when none or unknown. */
pid_t bfs__lock_holder(int fd);
/* "pid 123 (batchfs), which is stopped (state T)" or "pid 123
 * (batchfs)" or "another process" (pid 0), into buf. */
void bfs__describe_pid(pid_t pid, char *buf, size_t cap);
/* Inside a write transaction of e: where the pages of v, a value of a
 * ksize-byte key that the transaction has just put (MDB_RESERVE), end in
 * data.mdb (bytes from the start); 0 when v lies inside a leaf page (its
 * growth is the tree's, counted in the slack) or that cannot be told. */
uint64_t bfs__value_end(const struct bfs__env *e, size_t ksize,
			const MDB_val *v);
/* Commit (commit=1) or abort, then release maplock. */
int bfs__txn_end(struct bfs__env *e, MDB_txn *txn, int commit);
/* Inside a write transaction of e: with e->writemap, make sure data.mdb
 * has blocks for `bytes` more (what the transaction will put) past the
 * committed end, plus a slack for LMDB's own pages (tree, free list);
 * without, nothing.  0, or an errno (ENOSPC, EDQUOT, ...): the
 * transaction must then write nothing (abort it). */
int bfs__reserve(struct bfs__env *e, uint64_t bytes);
/* Drop this process's mapping of the map's pages that [from, from+len)
 * touches (maplock held; a range outside the map is ignored): their bytes
 * stay in the page cache, and a later read maps them again, but they no
 * longer count in the process's resident set. */
void bfs__drop_range(struct bfs__env *e, const void *from, size_t len);
/* Commit (commit=1) or abort like bfs__txn_end, then, still under
 * maplock, drop this process's mapping of the pages of vals[0..n) (the
 * values put in txn): their bytes stay in the page cache, but they no
 * longer count in the process's resident set. */
int bfs__txn_end_drop(struct bfs__env *e, MDB_txn *txn, int commit,
		      const MDB_val *vals, size_t n);
/* Renew a reset read-only transaction (a reader's) with e->maplock
 * read-held, adopting a grown map on MDB_MAP_RESIZED.  On success the
 * caller must bfs__txn_reset() it.  Returns an LMDB/errno code. */
int bfs__txn_renew(struct bfs__env *e, MDB_txn *txn);
/* Reset a read-only transaction (it keeps its reader slot), then release
 * maplock. */
void bfs__txn_reset(struct bfs__env *e, MDB_txn *txn);
/* 0, or BFS_E_CORRUPT when v (read in a transaction of e, maplock held)
 * lies on an overflow page whose header is not what LMDB wrote: LMDB
 * would free or overwrite the wrong pages when the value is deleted or
 * replaced, so it must be neither.  Values outside the map (without
 * MDB_WRITEMAP, pages dirtied by the caller's own write transaction) and
 * values inside leaf pages pass.  With MDB_WRITEMAP the pages the
 * caller's write transaction dirtied lie in the map, flagged dirty until
 * the commit, and fail: a writer never checks a value its own
 * transaction put (it knows that one good). */
int bfs__check_ovhdr(const struct bfs__env *e, const MDB_val *v);
/* Record that c found its environment damaged at run time (why: text):
 * once per environment, DIR/damaged is written, so the next open that
 * has the directory to itself moves data.mdb aside.  No-op for admin
 * handles.  Any thread. */
void bfs__note_damage(bfs_cache *c, const char *why);

/* cache_key.c */
void bfs__put_be64(uint8_t *p, uint64_t v);
uint64_t bfs__get_be64(const uint8_t *p);
/* 16 hex digits -> 8 bytes (big-endian): 0, or -EINVAL. */
int bfs__parse_fp(const char *hex, uint8_t out[8]);
void bfs__fp_hex(const uint8_t fp[8], char out[17]);
/* The shard hash of a sample key: dir/shard and its stamp. */
uint64_t bfs__shard_hash(const char *dir, const char *shard,
			 const bfs_shard_stamp *st);
/* The same, from the joined path "dir/shard" (n bytes, no NUL) as stored
 * in an index value. */
uint64_t bfs__shard_hash_joined(const void *path, size_t n,
				const bfs_shard_stamp *st);
/* The key of dir/shard's entry in the index database. */
void bfs__index_key(const char *dir, const char *shard, uint8_t out[16]);
/* The same, from the joined path as stored in an index value. */
void bfs__index_key_joined(const void *path, size_t n, uint8_t out[16]);

/* cache_value.c */
/* Copy n bytes src -> dst, returning the CRC32C (extending crc) of the
 * bytes written; chunked so the map is read once. */
uint32_t bfs__copy_crc(void *dst, const void *src, size_t n, uint32_t crc);
/* Extend a payload CRC with the covered header bytes. */
uint32_t bfs__vhdr_crc(uint32_t crc, const struct bfs__vhdr *h);
/* What a read wants of a sample value, and what it gets back. */
struct bfs__want {
	void *dst;              /* the payload goes here; NULL: checked in
				   place, not copied (bfs_cache_get_ref) */
	size_t cap;             /* bytes at dst (unused without dst) */
	int exact;              /* 1: the stored length must be cap */
	size_t len;             /* out: the stored length */
	bfs_store_shape shape;  /* out */
	int64_t label;          /* out */
};
/* Check a stored sample value under key (24 bytes), read in a
 * transaction of e: 0 ok, BFS_E_CRC (bad CRC or header: the entry may be
 * deleted or replaced), BFS_E_CORRUPT (the LMDB page holding it is
 * damaged, bfs__check_ovhdr: never delete or replace it), -ENOENT
 * (identity check differs, when check != 0), -EINVAL (exact and a stored
 * length other than cap), -ENOBUFS (not exact and a stored length above
 * cap: want->len says it; nothing copied).  With want (NULL: check only)
 * the payload is copied into want->dst while checked (want->dst NULL:
 * checked where it lies, any length), and len, shape and label are
 * filled in. */
int bfs__check_value(const struct bfs__env *e, const uint8_t *key,
		     const MDB_val *v, uint64_t check, struct bfs__want *want);
/* The same without the CRC (skip_crc): the page and the header are
 * checked and the payload copied (not with want->dst NULL).  check is
 * always compared; want must not be NULL. */
int bfs__copy_value(const struct bfs__env *e, const MDB_val *v,
		    uint64_t check, struct bfs__want *want);
/* The index value v: 0 and its header in *h, or BFS_E_CRC (size, header
 * or CRC wrong).  The page is not checked: bfs__check_ovhdr first. */
int bfs__index_value(const MDB_val *v, struct bfs__ihdr *h);
/* Whole entries, for bfs_cache_verify: 0, BFS_E_CRC (bad CRC, header, or
 * a key that does not belong to the value) or BFS_E_CORRUPT (damaged
 * page, or a key the database never holds). */
int bfs__check_index_entry(const struct bfs__env *e, const MDB_val *k,
			   const MDB_val *v);
int bfs__check_meta_entry(const MDB_val *k, const MDB_val *v);
/* A counter or fingerprint record of the meta database (see struct
 * bfs__fprec): 0 and n bytes in out, MDB_NOTFOUND (absent, or its size or
 * CRC is wrong), or an LMDB code. */
int bfs__meta_get(struct bfs__env *e, MDB_txn *txn, const void *key,
		  size_t klen, void *out, size_t n);
int bfs__meta_put(struct bfs__env *e, MDB_txn *txn, const void *key,
		  size_t klen, const void *val, size_t n);

/* cache_writer.c */
/* Start c's writer thread and register its hooks in c (c->crcdel). */
int bfs__writer_start(bfs_cache *c);
void bfs__writer_stop(bfs_cache *c);
/* Delete every sample entry whose key starts with prefix[0..plen), in
 * chunks of short write transactions.  Returns 0 or an LMDB code;
 * *removed / *bytes get what was deleted. */
/* The next fingerprint present at or after fp (8 bytes, in/out) in
 * samples; 0 found, MDB_NOTFOUND none, else an LMDB code. */
int bfs__next_fp(struct bfs__env *e, MDB_txn *txn, uint8_t fp[8]);
int bfs__delete_prefix(bfs_cache *c, const uint8_t *prefix, size_t plen,
		       uint64_t max_bytes, uint64_t *removed,
		       uint64_t *bytes);

/* cache_admin.c */
/* Remove every DIR/data.mdb.damaged-* (best effort). */
void bfs__remove_damaged_copies(const char *dir);

/* cache_check.c */
/* Run fn(arg, info, errmsg) in a forked child and return what it returned,
 * with its info and message, through a pipe.  A child that dies before it
 * answers is BFS_E_CORRUPT, with a message naming the signal. */
int bfs__run_isolated(int (*fn)(void *arg, bfs_cache_check_info *info,
				char *errmsg),
		      void *arg, bfs_cache_check_info *info, char *errmsg);
/* bfs_cache_check of dir, in a child; pin: other processes may be writing
 * (walk the snapshot of a read transaction). */
int bfs__check_dir(const char *dir, int pin, bfs_cache_check_info *info,
		   char *errmsg);

#endif
