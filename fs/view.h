/*
 * view.h - the mount as its readers see it, without FUSE: which nodes
 * exist and their attributes, every file's contents (dataset.json,
 * stats.json, batch and label files, index.json, preview.jpg), the
 * snapshots that open files hold, and how each batch reaches its reader.
 *
 * The contents of the files that are not batches come from fs/files.c.
 * fs/ll.c turns FUSE requests into these calls and their results into
 * replies; nothing here knows FUSE, so all of it is tested without a mount
 * (tests/test_view.c).  Errors are 0 or a negative errno, as the reply
 * wants them: a batch that failed to decode is -EIO here, and its message
 * goes to the log.
 *
 * Delivery.  A batch file reaches its reader in one of three ways, and the
 * view decides which:
 *   - read: the reader's read() requests come to the daemon, which answers
 *     from the batch in the engine's memory (bfs_view_read);
 *   - push: read-ahead that finished while the engine had nothing else to
 *     do is copied into the kernel's page cache before the reader comes
 *     (bfs_view_push_plan says what to copy; the caller copies);
 *   - backing file: with passthrough the reader's open is handed the
 *     engine's own file of the batch and the kernel reads it directly
 *     (bfs_view_lend).
 *
 * Threads: any call from any thread at once, except create and destroy.
 * A call that needs a batch decoded (bfs_view_read of pixels, lend, and
 * the attributes or open of index.json and preview.jpg) waits for it in
 * the engine; no lock of the view is held while it waits.
 */
#ifndef BFS_FS_VIEW_H
#define BFS_FS_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "cache/cache.h"
#include "engine/engine.h"
#include "engine/source.h"
#include "fs/files.h"
#include "fs/namespace.h"

typedef struct bfs_view bfs_view;

/* What the FUSE side knows and stats.json shows (fs/files.h). */
typedef bfs_files_io bfs_view_io;

typedef struct {
	bfs_source *src;           /* both must outlive the view */
	const char *origin;        /* the source as given, when it is a URL */
	const char *shard_cache;   /* then its folder in the shard cache */
	bfs_engine *eng;
	bfs_cache *cache;          /* NULL: none (--cache none, or it failed) */
	const char *cache_fp;      /* bfs_cache_fingerprint of the mount */
	const char *image_key;     /* as asked for; NULL: the defaults */
	const char *label_key;
	struct timespec mounted;   /* every node's times (stats.json: now) */
	uid_t uid;                 /* owner of every node */
	gid_t gid;
	/* Fills *io for stats.json; may be NULL (all zero).  Any thread. */
	void (*io)(void *ctx, bfs_view_io *io);
	/* stats.json's "history" (fs/history.h); NULL: none.  Must outlive
	 * the view. */
	const bfs_history *history;
	/* --hold: /hold exists, and on_released is called (from the thread
	 * that answers the release, no lock of the view held) each time its
	 * last open is closed: the mount ends itself then.  The kernel closes
	 * every file of a process that exits, however it dies, so a holder
	 * that is killed is released too.  on_released may be NULL. */
	int hold;
	void (*on_released)(void *ctx);
	/* Says what went wrong where a reply can only say EIO (a batch that
	 * failed to decode, a preview that could not be drawn); the text may
	 * hold bytes from the shards.  May be NULL.  Any thread, no lock of
	 * the view held. */
	void (*warn)(void *ctx, const char *msg);
	void *ctx;                 /* for io and warn */
} bfs_view_opts;

/* Build the view (and dataset.json, once).  0, -ENOMEM. */
int bfs_view_create(const bfs_view_opts *o, bfs_view **out);
void bfs_view_destroy(bfs_view *v); /* accepts NULL; no call may be running */

/* The namespace's shape (epochs and batches per epoch; the ranks, from
 * the engine's opts.ranks: a rank level only when that is set). */
const bfs_ns_shape *bfs_view_shape(const bfs_view *v);
/* stats.json as a read of it would find it now: 0 and a malloc()ed *buf
 * of *len bytes for the caller to free, or -ENOMEM.  Any thread. */
int bfs_view_stats_json(bfs_view *v, char **buf, size_t *len);
/* dataset.json (built once): the view's, valid until bfs_view_destroy. */
const char *bfs_view_dataset_json(const bfs_view *v, size_t *len);

/* Opens of /hold now, and since the mount began (atomic reads). */
void bfs_view_holders(const bfs_view *v, uint64_t *now, uint64_t *ever);

/* How long the kernel may keep what a lookup or getattr returned: an
 * hour for everything but stats.json, whose size changes. */
#define BFS_VIEW_TIMEOUT 3600.0

/* ---- nodes ----------------------------------------------------------- */

/* The attributes of node n, as stat(2) shows them, and how long they may
 * be cached (*timeout, seconds).  Sizes are exact before anything is
 * decoded, except index.json's and preview.jpg's: those files are built
 * for `reader` (it waits for the batch), which is why readdir never lists
 * them.  0, or -EIO (their batch failed), -ENOMEM. */
int bfs_view_getattr(bfs_view *v, uint64_t reader, const bfs_node *n,
		     struct stat *st, double *timeout);

/* Entry `name` of directory dir: 0 with *n, *st and *timeout (as
 * getattr); -ENOENT (a miss is as permanent as a hit: it may be cached
 * for BFS_VIEW_TIMEOUT), -ENOTDIR, -ENAMETOOLONG, or getattr's errors. */
int bfs_view_lookup(bfs_view *v, uint64_t reader, const bfs_node *dir,
		    const char *name, bfs_node *n, struct stat *st,
		    double *timeout);

/* Entry k (0, 1, ...) of directory dir in listing order: ".", "..", then
 * the root's dataset.json, stats.json, hold (--hold) and epochs (or rank
 * directories), a rank directory's epochs, or an epoch's .npy and
 * .labels.npy per batch.  0 with its name (NUL-terminated, cap >= 64) and
 * *st holding st_ino and the file type; -ENOENT past the end, -ENOTDIR. */
int bfs_view_dirent(const bfs_view *v, const bfs_node *dir, uint64_t k,
		    char *name, size_t cap, struct stat *st);

/* May n be opened as a directory?  0 or -ENOTDIR. */
int bfs_view_opendir(const bfs_view *v, const bfs_node *n);

/* access(2) of n: 0, or -EROFS for write access (the mount is
 * read-only). */
int bfs_view_access(const bfs_view *v, const bfs_node *n, int mask);

/* ---- opening and reading --------------------------------------------- */

typedef struct {
	uint64_t fh;        /* the open's snapshot (stats.json, index.json,
			     * preview.jpg); 0 if none.  Give it back to
			     * bfs_view_read and bfs_view_release. */
	int keep_cache;     /* the file's bytes never change */
	int direct_io;      /* fresh at each open: no page cache */
	int lend;           /* a batch file with a backing file possible:
			     * the caller may hand it over (bfs_view_lend) */
	int hint;           /* a batch or label file: call bfs_view_hint
			     * once the open is answered */
} bfs_view_open_info;

/* Open n for reading (flags as open(2)).  0 and *oi; -EROFS for any
 * write, truncate or create flag; -EISDIR; -ENOMEM; index.json and
 * preview.jpg: getattr's errors.  lend_ok says whether the caller can
 * hand the kernel a backing file at all (passthrough negotiated). */
int bfs_view_open(bfs_view *v, uint64_t reader, const bfs_node *n, int flags,
		  int lend_ok, bfs_view_open_info *oi);

/* Reader `reader` is about to read batch or label file n: start its batch
 * and read ahead.  Never waits.  Call after answering the open: workers
 * woken for read-ahead just before the answer delay the reader by a
 * scheduler slice (4-5 ms measured). */
void bfs_view_hint(bfs_view *v, uint64_t reader, const bfs_node *n);

/* What a read or a lend holds until its reply is written. */
typedef struct {
	bfs_batch *batch;   /* pinned batch, or NULL */
	void *copy;         /* snapshot bytes copied out, or NULL */
	char hdr[256];      /* the NPY header piece of a batch read */
} bfs_view_pin;

/* Bytes [off, off + size) of file n opened as fh, gathered in iov (at
 * most two pieces: the header, then the batch's memory or a copy of a
 * snapshot), *niov of them; they stay valid until bfs_view_done(pin).
 * A read that reaches a batch's pixels waits for the batch.  0 (a read
 * past the end is 0 pieces); -EIO (the batch failed); -EBADF (the snapshot is gone: its release raced this read);
 * -EISDIR; -ENOMEM.  A failed batch's message goes to opts.warn (the
 * kernel retries a failed page read: once per batch in a row).  Always
 * call bfs_view_done. */
int bfs_view_read(bfs_view *v, uint64_t reader, const bfs_node *n,
		  uint64_t fh, size_t size, off_t off, struct iovec iov[2],
		  int *niov, bfs_view_pin *pin);
void bfs_view_done(bfs_view *v, bfs_view_pin *pin);

/* The open of n (fh) ended. */
void bfs_view_release(bfs_view *v, const bfs_node *n, uint64_t fh);

/* Lend batch file n's backing file to the kernel: waits until the batch
 * is decoded (starting no read-ahead: call bfs_view_hint after the
 * reply).  Returns a descriptor owned by the engine, holding exactly the
 * file's bytes, valid until bfs_view_done(pin); the caller opens its own
 * read-only descriptor of it (/proc/self/fd/N) to register.  -1 when the
 * batch must be read the ordinary way: it failed, it sits in plain
 * memory, or the memory budget cannot pay for another file readers may
 * hold.  Always call bfs_view_done. */
int bfs_view_lend(bfs_view *v, uint64_t reader, const bfs_node *n,
		  size_t *len, bfs_view_pin *pin);

/* ---- pushing read-ahead into the page cache --------------------------- */

/* One file's bytes to copy into the page cache: a header then data. */
typedef struct {
	bfs_node node;
	const void *hdr;
	size_t hdr_len;
	const void *data;
	size_t data_len;
	char hdr_buf[256];
} bfs_view_file_bytes;

typedef struct {
	bfs_node batch;             /* the batch file */
	int lookup;                 /* look its name up first, so that the
				     * reader's open needs no LOOKUP */
	unsigned nfiles;            /* files to push, in order */
	bfs_view_file_bytes files[2];
	int counts;                 /* 1: when files[0] is all there, the
				     * batch has been handed on (return 1
				     * to the engine) */
} bfs_view_push;

/* What to do with batch id (pinned as b), finished as read-ahead while
 * the engine was idle (the engine's on_batch_ready): with passthrough the
 * kernel reads the batch file from its backing file, so only the names
 * are looked up and the labels pushed; without it both files are pushed.
 * The pointers stay valid while b is pinned. */
void bfs_view_push_plan(const bfs_view *v, uint64_t id, const bfs_batch *b,
			int passthrough, bfs_view_push *plan);

/* ---- the rest --------------------------------------------------------- */

/* Extended attribute `name` of n into val (cap bytes): its length, or
 * -ENODATA.  user.batchfs.shape and user.batchfs.dtype on batch and label
 * files, user.batchfs.pid (the daemon) on the root, user.batchfs.holders
 * (opens now) and user.batchfs.holds (opens so far) on /hold. */
int bfs_view_getxattr(const bfs_view *v, const bfs_node *n, const char *name,
		      char *val, size_t cap);
/* The names of n's attributes, NUL-separated, and their total length. */
int bfs_view_listxattr(const bfs_view *v, const bfs_node *n,
		       const char **names);

void bfs_view_statfs(const bfs_view *v, struct statvfs *sv);

/* The engine's batch id of a batch-level node (bfs_ns_batch_id). */
uint64_t bfs_view_batch_id(const bfs_view *v, const bfs_node *n);

/* A node's inode number, and a number back into its node (0 or -ENOENT). */
uint64_t bfs_view_ino(const bfs_view *v, const bfs_node *n);
int bfs_view_node(const bfs_view *v, uint64_t ino, bfs_node *n);

#endif
