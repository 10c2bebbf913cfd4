/*
 * sidecar.h - the sidecar index: one file beside the shards of a source
 * (BFS_SIDECAR_NAME) that holds, for every shard, its name, its size and
 * identity (an object's ETag, or a local file's stamp) and its index as
 * the source stores it (source_index.c's BFSIDX03 or BFSGZS02 blob), so
 * that a mount on any node can start without scanning.  `batchfs index`
 * writes it; a mount reads it and uses an entry only for a shard whose
 * listed identity is the one the entry was written for.
 *
 * The byte layout, what a reader must verify, and why, are in
 * docs/SIDECAR_INDEX.md: all integers little-endian, a header with its own
 * CRC32C, a directory of entries sorted by name (one CRC32C over it), and
 * the entries' blobs after it, each with a CRC32C of its own and stored
 * raw or zlib-deflated.  A damaged header or directory makes the whole
 * file unusable (bfs_sidecar_open refuses it); a damaged blob, only its
 * shard (bfs_sidecar_lookup says so, and that shard is scanned).
 *
 * Nothing in a sidecar is trusted: every length and offset is checked
 * against the file before it is used, nothing is allocated from a length
 * in the file beyond what its bytes can hold (an inflated blob is at most
 * BFS_SIDECAR_BLOB_MAX and 1032 times its stored bytes, deflate's most,
 * and is allocated only once its CRC32C held), and
 * the blob itself is checked whole by the source before use, as any
 * stored index is.
 *
 * Threads: a writer is one thread's.  A bfs_sidecar is read-only once
 * open: any number of threads may look up in it at once.
 */
#ifndef BFS_SIDECAR_H
#define BFS_SIDECAR_H

#include <stddef.h>
#include <stdint.h>

/* Its name beside the shards: a local directory's file, an S3 object
 * under the prefix, or the file of that name in the folder of an http(s)
 * brace pattern.  Hidden, so listings of shards pass over it. */
#define BFS_SIDECAR_NAME ".batchfs-index"

#define BFS_SIDECAR_VERSION 1
/* The most one entry's index may hold once inflated (the index store's
 * limit too), and the most entries and name bytes a sidecar may have. */
#define BFS_SIDECAR_BLOB_MAX (1ull << 30)
#define BFS_SIDECAR_ENTRIES_MAX (1u << 24)
#define BFS_SIDECAR_NAME_MAX 4095
#define BFS_SIDECAR_ETAG_MAX 127

/* The layouts a sidecar may be written for. */
enum { BFS_SIDECAR_TFRECORD = 1, BFS_SIDECAR_TAR = 2 };

/* What identifies the bytes of one shard. */
enum {
	BFS_SIDECAR_ID_ETAG = 1,  /* a remote object: its ETag and size */
	BFS_SIDECAR_ID_STAMP = 2, /* a local file: size, mtime, inode, ctime
				   * (source.h's bfs_shard_stamp) */
};

typedef struct {
	int kind;             /* BFS_SIDECAR_ID_* */
	uint64_t size;        /* the shard's bytes (both kinds) */
	const char *etag;     /* ID_ETAG: as listed, quotes kept */
	int64_t mtime_ns;     /* ID_STAMP */
	uint64_t ino;
	int64_t ctime_ns;
} bfs_sidecar_id;

/* The options the indexes were made with, and where they came from. */
typedef struct {
	uint32_t format;       /* BFS_SIDECAR_TFRECORD or _TAR */
	const char *label_key; /* --label-key as given: NULL or "" for the
				* default, "none", or a key */
	const char *source;    /* the source as named when written (a path or
				* URL; informational) */
	const char *writer;    /* "batchfs 1.2.3" (informational) */
	int64_t created_ns;    /* wall clock when written (informational) */
} bfs_sidecar_info;

/* ---- writing ----------------------------------------------------------- */

typedef struct bfs_sidecar_writer bfs_sidecar_writer;

/* 0 or -ENOMEM.  Destroy with bfs_sidecar_writer_destroy. */
int bfs_sidecar_writer_create(bfs_sidecar_writer **out);
void bfs_sidecar_writer_destroy(bfs_sidecar_writer *w); /* accepts NULL */

/*
 * Add shard `name` (relative to the source's root, '/'-separated) with its
 * identity and index blob (copied; deflated when that makes it smaller).
 * Entries may come in any order; a name added again replaces the entry
 * added before.  Returns 0; -EINVAL (an empty name, one over BFS_SIDECAR_NAME_MAX bytes, with a NUL,
 * starting with '/' or holding a "." or ".." component; an ETag identity
 * that is empty, weak (W/...) or over BFS_SIDECAR_ETAG_MAX bytes; an
 * unknown kind; an empty blob or one over BFS_SIDECAR_BLOB_MAX; more than
 * BFS_SIDECAR_ENTRIES_MAX entries); -ENOMEM.
 */
int bfs_sidecar_writer_add(bfs_sidecar_writer *w, const char *name,
			   const bfs_sidecar_id *id, const void *blob,
			   size_t len);

/* Entries added so far (a name added twice counted twice until finish). */
size_t bfs_sidecar_writer_count(const bfs_sidecar_writer *w);

/*
 * The whole file, in a malloc()ed buffer the caller frees (*out, *len).
 * The writer may be destroyed afterwards, or added to and finished again.
 * Returns 0, -EINVAL (an unknown format, strings over 65535 bytes), or
 * -ENOMEM.
 */
int bfs_sidecar_writer_finish(bfs_sidecar_writer *w,
			      const bfs_sidecar_info *info, void **out,
			      size_t *len);

/* ---- reading ----------------------------------------------------------- */

typedef struct bfs_sidecar bfs_sidecar;

/*
 * Check a sidecar's header and directory (docs/SIDECAR_INDEX.md, "What a
 * reader verifies") and make a handle for looking shards up in it.  data
 * is borrowed: it must stay valid and unchanged until bfs_sidecar_close.
 * Returns 0; BFS_E_FORMAT (not a sidecar: another magic, or a version or
 * flags this reader does not know: errmsg says which); BFS_E_CRC (the
 * header or directory CRC fails); BFS_E_CORRUPT (lengths, offsets, names
 * or order that do not hold; errmsg says what); -ENOTSUP (a big-endian
 * host: the blobs are little-endian); -ENOMEM.  Blobs are not read here.
 */
int bfs_sidecar_open(const void *data, size_t len, bfs_sidecar **out,
		     char *errmsg);
void bfs_sidecar_close(bfs_sidecar *sc); /* accepts NULL */

/* The options it was written with; strings point into the data and live
 * as long as sc.  label_key is "" for the default. */
void bfs_sidecar_get_info(const bfs_sidecar *sc, bfs_sidecar_info *out);

size_t bfs_sidecar_count(const bfs_sidecar *sc);
/* Entry i's name (NUL-terminated copy held by sc) and identity (etag
 * points into sc), in name order; -EINVAL past the end. */
int bfs_sidecar_entry(const bfs_sidecar *sc, size_t i, const char **name,
		      bfs_sidecar_id *id);

/* The identity the entry of shard `name` was written for (etag pointing
 * into sc): 0, or -ENOENT when there is none.  For a caller that compares
 * identities its own way (a remote shard's stamp is made from its ETag),
 * then looks the blob up with the identity found. */
int bfs_sidecar_find(const bfs_sidecar *sc, const char *name,
		     bfs_sidecar_id *id);

/*
 * The index blob of shard `name` when the entry was written for identity
 * *id: both of the same kind with equal fields (an ETag entry: equal size
 * and the same ETag, byte for byte, which must be a strong one; a stamp
 * entry: all four fields equal).  *blob is a malloc()ed copy, inflated
 * when stored deflated, that the caller frees; *len its length.
 * Returns 0; -ENOENT (no entry of that name); -ESTALE (an entry for
 * another identity, or for an ETag the listing did not give); BFS_E_CRC
 * (its blob's CRC32C fails); BFS_E_CORRUPT (it does not inflate to the
 * length the entry says); -ENOMEM.  Any thread.
 */
int bfs_sidecar_lookup(const bfs_sidecar *sc, const char *name,
		       const bfs_sidecar_id *id, void **blob, size_t *len);

#endif
