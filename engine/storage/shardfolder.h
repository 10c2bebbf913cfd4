/*
 * shardfolder.h - one source's folder in the node-local shard cache, as
 * every process of the node shares it: the objects kept whole, the fetches
 * under way, a ledger of the bytes on disk, and the locks that let several
 * mounts and ranks fill, read and evict it together.  No policy here: the
 * shard cache (shardcache.h) decides what to fetch and evict.
 *
 * Layout of DIR/ID/ (ID: the first 16 hex digits of SHA-256 of the source's
 * root URL, bfs_storage_root):
 *   source      the root URL, for a person
 *   data/NAME   an object kept whole: its bytes, then a trailer (its ETag,
 *               its size, a CRC-32C and a magic) that proves the file whole
 *               and of that identity; renamed in only once written,
 *               trailer included, and fsynced
 *   tmp/T       a fetch under way, made at its full size when its room was
 *               reserved and flocked (LOCK_EX) by its writer while it lives
 *   space       the ledger: the bytes that data/ and tmp/ take (each file
 *               at bfs_shardfolder_cost), in decimal
 *   lock        OFD record locks: byte 0 is held while `space` changes
 *               (a reservation, a commit, an eviction, a recount), and
 *               byte 1 + h(NAME) by whoever fetches, commits or evicts
 *               NAME, so no object is fetched twice at once on the node
 * A process that reads an object keeps it open and flocked LOCK_SH; only
 * an object nobody holds is evicted (LOCK_EX taken, then unlinked), so an
 * eviction by one mount never pulls an object from under another, and the
 * ledger stays the truth (an unlinked file someone still holds would take
 * room the ledger no longer counts).
 *
 * Crash safety: a kill -9 at any moment leaves data/ holding only whole
 * objects, and tmp/ files that nobody holds any more, which the next
 * recount removes; `space` may then count too much, never too little,
 * until that recount.  An object is used only after its trailer matched
 * the listing's (size, ETag).
 *
 * Threads: any, concurrently; the ledger is also serialised in-process.
 * Two objects of one process whose names hash to one lock byte share it
 * (OFD locks of one descriptor do not exclude each other), so the caller
 * keeps one fetch per object itself; across processes a collision of the
 * 40-bit hash only serialises two fetches.
 */
#ifndef BFS_SHARDFOLDER_H
#define BFS_SHARDFOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/storage.h"

typedef struct bfs_shardfolder bfs_shardfolder;

/* A fetch under way: its file in tmp/ (owned by the caller from reserve
 * until commit or abandon). */
typedef struct {
	int fd;
	char path[4096];
	uint64_t cost;
} bfs_shardfolder_tmp;

/* Bytes an object of `size` bytes whose ETag is etag_len long takes in the
 * cache: with its trailer, rounded up to 4 KiB blocks, and a block more for
 * the file system's own (an extent tree's). */
uint64_t bfs_shardfolder_cost(uint64_t size, size_t etag_len);

/* ID, the name of the folder of the source whose root URL is root: the
 * first 16 hex digits of SHA-256 of root, and a NUL.  Pure. */
void bfs_shardfolder_id(const char *root, char id[17]);

/*
 * Open (making it) the folder of the source whose root URL is root under
 * dir, with `limit` bytes for data/ and tmp/ together.  Waits at most
 * lock_wait_ms (0: 30 s) for the ledger's lock whenever it takes it.
 * Nothing is counted yet: call bfs_shardfolder_recount.  0, -ENOMEM, or
 * -errno for the folder (errmsg names it).
 */
int bfs_shardfolder_open(const char *dir, const char *root, uint64_t limit,
			 unsigned lock_wait_ms, bfs_shardfolder **out,
			 char *errmsg);
void bfs_shardfolder_close(bfs_shardfolder *f); /* NULL is fine */

/* DIR/ID, the source's folder.  Valid until close. */
const char *bfs_shardfolder_path(const bfs_shardfolder *f);
uint64_t bfs_shardfolder_limit(const bfs_shardfolder *f);
/* Change the limit (the default one is known only once the folder has
 * been counted). */
void bfs_shardfolder_set_limit(bfs_shardfolder *f, uint64_t limit);
/* The ledger as this process last read or wrote it. */
uint64_t bfs_shardfolder_used(const bfs_shardfolder *f);

/*
 * Count the ledger anew from the folder: tmp/ files nobody holds (a
 * crashed fetch) are removed; files in data/ that are not whole objects of
 * the listing objs[0..n) (sorted by name: another identity, no longer
 * listed, no trailer) are removed when nobody holds them; present[k] (if
 * not NULL) is set for each object whole in data/.  *removed (may be NULL)
 * counts the files removed.  The old layout's meta/ is removed.  0,
 * -ETIMEDOUT (the ledger's lock), -errno.
 */
int bfs_shardfolder_recount(bfs_shardfolder *f, const bfs_storage_object *objs,
			    size_t n, uint8_t *present, uint64_t *removed,
			    char *errmsg);

/* Take the node-wide lock of fetching object `name`, without waiting:
 * 1 taken, 0 another process holds it, -errno. */
int bfs_shardfolder_lock(bfs_shardfolder *f, const char *name);
void bfs_shardfolder_unlock(bfs_shardfolder *f, const char *name);
/* Whether another process holds that lock now (it is fetching `name`):
 * 1, 0, -errno.  Takes nothing. */
int bfs_shardfolder_busy(bfs_shardfolder *f, const char *name);

/* data/NAME opened if it is whole and of o's identity, and held (LOCK_SH)
 * for as long as the descriptor is open: the descriptor (the caller
 * closes it), or -ENOENT (absent, being evicted, not whole, or of another
 * identity), -errno. */
int bfs_shardfolder_open_object(bfs_shardfolder *f, const bfs_storage_object *o);

/* Reserve o's room in the ledger and make its file in tmp/, at full size,
 * held LOCK_EX: 0 with *t, -ENOSPC when the limit has no room for it now,
 * -ETIMEDOUT (the ledger's lock), -errno with errmsg. */
int bfs_shardfolder_reserve(bfs_shardfolder *f, const bfs_storage_object *o,
			    bfs_shardfolder_tmp *t, char *errmsg);

/* o's bytes are all in t's file: write its trailer, fsync, rename it to
 * data/NAME and hold it LOCK_SH.  The caller holds o's lock.  0 (t->fd is
 * now the object's held descriptor, the caller's to close), or -errno
 * (t abandoned: its file removed, its room given back). */
int bfs_shardfolder_commit(bfs_shardfolder *f, const bfs_storage_object *o,
			   bfs_shardfolder_tmp *t, char *errmsg);

/* Give up a fetch: its file removed, its room given back. */
void bfs_shardfolder_abandon(bfs_shardfolder *f, bfs_shardfolder_tmp *t);

/* Evict data/NAME when nobody holds it and nobody fetches it: 1 evicted
 * (its room given back), 0 someone holds or fetches it, -ENOENT it is not
 * there, -errno.  The caller must not hold it itself. */
int bfs_shardfolder_evict(bfs_shardfolder *f, const bfs_storage_object *o);

#endif
