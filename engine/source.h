/*
 * source.h - the sample index of a shard directory.
 *
 * A source turns SHARD_DIR into a flat, ordered list of samples and reads
 * any one of them back as encoded image bytes (JPEG, PNG, WebP: image.h
 * tells them apart) plus a label.  Three layouts:
 *
 *   TFRecord   every shard file holds tf.train.Example records; shards are
 *              sorted by name (bytewise), records are in file order.  The
 *              index keeps only record offsets and lengths; labels are read
 *              from the record when the sample is read.
 *   folder     ImageFolder layout: DIR/CLASS/IMAGE.jpg (.jpeg, .png,
 *              .webp, .gif, any case).  Classes sorted by name give the
 *              label (0-based); files sorted by name.  A flat folder of
 *              images is one class, label 0.
 *   tar        WebDataset shards: KEY.jpg (.jpeg, .png, .webp, .gif) with
 *              its label in KEY.cls, else KEY.txt, or with an explicit
 *              label_key in that member of KEY.json (tar.h); shards sorted
 *              by name, samples in member order.
 *
 * TFRecord and tar shards may be gzip files (GZIP TFRecords, .tar.gz):
 * they are indexed through gzindex.h (one inflate at open, restart points
 * every 4 MiB, kept with the shard index in the index store), their sample
 * offsets are into the uncompressed bytes, and reads inflate from the
 * nearest restart point through the caller's bfs_buf cursor.  A gzip shard
 * that inflates to more than opts.max_inflate_ratio times the compressed
 * bytes it came from (past its first MiB) is refused as soon as it does
 * (a gzip bomb): it adds no samples, and its scan error names the ratio
 * and --max-inflate-ratio.  A stored index of a shard that inflates past
 * the limit (stored by a mount with a higher one) is not used.
 *
 * Problems found while indexing (a shard cut mid-record, a length whose
 * CRC fails and that the next record cannot prove) do not fail the open:
 * the complete records before the problem are kept and the problem is
 * listed in bfs_source_scan_errors().  A record whose length CRC alone
 * fails but whose length the next record proves keeps its slot, unlisted,
 * and its read fails with BFS_E_CRC.  A TFRecord record or a tar image
 * member over 4 GiB - 1 bytes (the most one sample may hold) keeps its slot
 * too, unlisted, and the scan goes on after it (a CRC-valid length field,
 * a tar header's size, says where the next one starts); its read fails
 * with BFS_E_CORRUPT naming the record index or member name, the offset of
 * its header, its length and the limit.  Its identity's length is 0.
 *
 * Detection (BFS_FORMAT_AUTO) looks at names first, then at contents:
 * files named *.tfrecord, *.tfrec(s) or *-of-* are TFRecord shards and
 * *.tar tar shards whatever they hold (also with .gz after them; *.tgz is
 * tar); other files are probed by their first bytes (a gzip file's first
 * uncompressed bytes); images are found by their extensions.  Files that are none of
 * these are passed over.  TFRecord and tar shards in one directory are
 * refused (BFS_E_FORMAT).
 *
 * Threads: open/close from one thread; everything else may be called from
 * any number of threads at once (reads use pread on per-call descriptors,
 * or on the shard cache's).
 */
#ifndef BFS_SOURCE_H
#define BFS_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/shardcache.h"

typedef enum {
	BFS_FORMAT_AUTO = 0,
	BFS_FORMAT_TFRECORD,
	BFS_FORMAT_FOLDER,
	BFS_FORMAT_TAR,         /* WebDataset: KEY.jpg + KEY.cls members */
} bfs_format;

typedef struct bfs_source bfs_source;

/* What the file system says about a shard's file that changes whenever its
 * bytes can have: the size and mtime, and the two a user cannot set back --
 * the inode number (a file replaced by a rename or a copy is a new inode)
 * and the ctime (set to the current time by every write, truncate, utime,
 * chmod, chown, link and unlink of the file).  A shard rewritten in place at
 * the same size with its mtime restored (touch -d, rsync -t, tar x) keeps
 * size and mtime but gets a new ctime.  So a chmod or a new hard link of a
 * shard counts as a change too.  The device number is left out: it is not
 * stable across reboots for network and FUSE file systems, and the path
 * already says where the file is. */
typedef struct {
	uint64_t size;
	int64_t mtime_ns;
	uint64_t ino;
	int64_t ctime_ns;
} bfs_shard_stamp;

/*
 * A remote shard (an object of engine/storage/: s3://, http(s)://) is
 * identified by (URL, ETag, size), never by the file the node-local shard
 * cache happens to keep it in:
 *   dir    the storage's root URL (bfs_storage_root: "s3://BUCKET/PREFIX/",
 *          "https://HOST/PATH/"), which is what bfs_source_dir() returns for
 *          a remote source;
 *   shard  the object's name relative to that root (a '/'-separated key);
 *   stamp  bfs_shard_stamp_remote(size, ETag): the size, mtime_ns 0, and
 *          ino and ctime_ns the first 16 bytes of SHA-256 of the ETag as
 *          the server sends it, quotes kept (an ETag of "" for a server
 *          that sends none).
 * Sample-cache keys (bfs_sample_identity) and stored shard indexes
 * (index_get/index_put) of a remote shard are made from these, so they
 * hit again after the shard cache evicted the shard and fetched it anew,
 * on any node with the same LMDB cache, and miss once the object is
 * replaced (a new ETag or size).  A local path never starts with a URL
 * scheme, so the two kinds of key cannot meet.
 */
void bfs_shard_stamp_remote(uint64_t size, const char *etag,
			    bfs_shard_stamp *out);

/* How far indexing has come, for a progress line (bfs_source_opts). */
typedef struct {
	bfs_format format;      /* the layout being indexed */
	size_t done, total;     /* shard files indexed so far, of total (for
				 * folders: class folders) */
	uint64_t records;       /* samples found so far */
	uint64_t bytes;         /* bytes of the shards indexed so far (for
				 * folders: of the images found) */
	int finished;           /* the last call: every shard is indexed */
} bfs_source_progress;

typedef struct {
	const char *dir;        /* SHARD_DIR; ignored with shards */
	/* A remote source (s3://, https://): its objects as the shard cache
	 * lists them stand for the directory's files (a name with one '/' is
	 * a file in a class folder), and every byte of a shard is read
	 * through it: from the node-local copy when there is one, else
	 * fetched or read by range (shardcache.h).  Named by its root URL
	 * (bfs_source_dir), its shards stamped by bfs_shard_stamp_remote.
	 * Borrowed: it must outlive the source.  NULL: a local folder. */
	bfs_shardcache *shards;
	bfs_format format;      /* AUTO: see Detection above */
	const char *image_key;  /* default "image/encoded" */
	const char *label_key;  /* default "image/class/label"; "none": no
				 * label is read (TFRecord: every label -1;
				 * tar: -1 for a sample without KEY.cls) */
	/* Optional store of TFRecord shard indexes and of gzip shards'
	 * indexes (restart points, and for a .tar.gz its samples with where
	 * their labels came from) -- the sample cache -- so a remount skips
	 * the scan.  get: 0 and a malloc()ed *blob the source
	 * frees, or anything else for a miss.  put stores a copy.  Both are
	 * keyed by (dir, shard, *st), st valid only during the call.  Either
	 * may be NULL (no store). */
	int (*index_get)(void *ctx, const char *dir, const char *shard,
			 const bfs_shard_stamp *st, void **blob, size_t *len);
	int (*index_put)(void *ctx, const char *dir, const char *shard,
			 const bfs_shard_stamp *st, const void *blob,
			 size_t len);
	void *index_ctx;
	/* Optional: told how far indexing has come, from the thread that
	 * calls bfs_source_open, after each shard (class folder), every
	 * 65536 records inside a shard, and once with finished set when
	 * every shard is indexed (not after a failed open).  It may be
	 * called often: the callee decides what to show and when.  It must
	 * not call into the source.  p is valid only during the call. */
	void (*progress)(void *ctx, const bfs_source_progress *p);
	void *progress_ctx;
	/* gzip shards: the most they may inflate to, in times the compressed
	 * bytes (gzindex.h max_ratio).  0: BFS_INFLATE_RATIO_DEFAULT;
	 * BFS_INFLATE_RATIO_NONE: no limit. */
	uint32_t max_inflate_ratio;
	/* 1: no DALI index file is read (bfs_source_nindex_dali): a TFRecord
	 * shard without a stored index is scanned (batchfs index, whose
	 * sidecar holds each shard's own index, class names included). */
	int skip_dali;
	/* Another folder that holds DALI index files (--dali-index: NAME.idx
	 * or STEM.idx for shard NAME), looked in before the shard's own; NULL:
	 * only beside the shards. */
	const char *dali_dir;
} bfs_source_opts;

/* Real shards inflate far less: JPEG, PNG and WebP bytes are compressed
 * already (a TFRecord or tar of them inflates 1.0-1.1 times), and tar
 * headers and padding around small images make it a few times at most;
 * deflate cannot pass about 1032 times, which a stream of zeros reaches. */
#define BFS_INFLATE_RATIO_DEFAULT 100u
#define BFS_INFLATE_RATIO_NONE UINT32_MAX

/* A growable byte buffer owned by the caller (one per worker thread),
 * with the cursor its reads of gzip shards go on with (gzindex.h).  Start
 * it zeroed; bfs_buf_free releases both. */
typedef struct {
	uint8_t *data;
	size_t cap;
	struct bfs_gzcursor *gz;
} bfs_buf;

/* Index opts->dir.  On success *out owns everything it needs (the options
 * are copied).  Errors: BFS_E_EMPTY (no shards or images of the format
 * asked for, or every shard is empty: an explicit format that does not
 * fit the contents finds none, and errmsg says what it looked for),
 * BFS_E_FORMAT (auto found TFRecord and tar shards together), -ENOENT,
 * -ENOTDIR, -EACCES, -ENOMEM; errmsg says which path. */
int bfs_source_open(const bfs_source_opts *opts, bfs_source **out,
		    char *errmsg);
void bfs_source_close(bfs_source *s); /* accepts NULL */

uint64_t bfs_source_count(const bfs_source *s);
/* Shards whose index came from opts.index_get instead of a scan. */
size_t bfs_source_nindex_hits(const bfs_source *s);
/* TFRecord shards indexed from NVIDIA DALI's index file (NAME.idx, else
 * STEM.idx: "OFFSET SIZE" per record, as tfrecord2idx writes; in
 * opts.dali_dir, else beside the shard) instead of a scan: used when no stored index is, and only when
 * its records tile the shard exactly.  Their records are not skimmed, so
 * a source with one has no TFRecord class names (classes_note says so).
 * A read whose payload CRC fails says that the offset came from that
 * file.  Files named *.idx are never taken for shards. */
size_t bfs_source_nindex_dali(const bfs_source *s);
/* Why the first DALI index file found was not used ("a.idx does not
 * describe a.tfrecord (record 3 starts at ...); the shard was scanned"),
 * or NULL.  Valid while s lives. */
const char *bfs_source_dali_note(const bfs_source *s);
bfs_format bfs_source_format(const bfs_source *s);
const char *bfs_format_name(bfs_format f);
const char *bfs_source_dir(const bfs_source *s);     /* absolute path */

/* Shards (TFRecord files, or image files for folders), sorted. */
size_t bfs_source_nshards(const bfs_source *s);
const char *bfs_source_shard_name(const bfs_source *s, size_t i);
/* The samples shard i holds (0 past the end). */
uint64_t bfs_source_shard_samples(const bfs_source *s, size_t i);

/* Class names by label value.  Folder layout: the class folders' names
 * (none for a flat folder of JPEGs, whose one class has no name).
 * TFRecord: while indexing, each record is skimmed (bfs_example_skim:
 * only its small features are read, mostly from bytes the scan holds
 * anyway) for its label and the bytes of image/class/synset, else of
 * image/class/text; nclasses is the largest label + 1, and class_name(i)
 * is NULL for a label no record has.  The TFRecord list is given only
 * when it can be trusted -- every labeled record named, one name per
 * label, one of the two keys throughout, labels below 2^20 -- and is
 * otherwise empty, with bfs_source_classes_note saying why.  Not with
 * --label-key none, nor for tar shards (0).  Pairs are stored with the
 * shard's index (index_put), so a remount has them without a scan. */
size_t bfs_source_nclasses(const bfs_source *s);
const char *bfs_source_class_name(const bfs_source *s, size_t i);
/* Where the class names came from: "folder names", "image/class/synset",
 * "image/class/text", or NULL when there are none. */
const char *bfs_source_classes_from(const bfs_source *s);
/* Why a TFRecord source has no class names although labels were read
 * ("label 5 has two names in image/class/synset", "12 of 500 labeled
 * records have no image/class/synset", "the records have no ..."), or
 * NULL.  Valid while s lives. */
const char *bfs_source_classes_note(const bfs_source *s);

/* Problems found while indexing: n of them; text valid while s lives. */
size_t bfs_source_nscan_errors(const bfs_source *s);
const char *bfs_source_scan_error(const bfs_source *s, size_t i);
const char *bfs_source_scan_error_shard(const bfs_source *s, size_t i);

/* Read sample i.  buf is the caller's scratch and grows as needed; *jpeg
 * points into it (or is NULL when *jpeg_len is 0) and stays valid until the
 * next call with the same buf.  The payload CRC of a TFRecord is checked.
 * Errors: BFS_E_CRC, BFS_E_CORRUPT, BFS_E_FORMAT or BFS_E_NOKEY (the
 * Example: a missing image key lists the keys present), -EIO/-ENOENT/
 * -EACCES (the shard changed, went away or became unreadable: a shard
 * whose size, mtime, inode number or ctime differs from the index is
 * refused, never half-read), BFS_E_REMOTE (a remote shard's bytes could
 * not be had: the network past its give-up time, the object replaced --
 * the shard cache's message names the object, the last status and the
 * cause; a later read tries again), -EINVAL (i past the end), -ENOMEM.
 * errmsg says what.  On error *jpeg and *label are undefined. */
int bfs_source_read(bfs_source *s, uint64_t i, bfs_buf *buf,
		    const uint8_t **jpeg, size_t *jpeg_len, int64_t *label,
		    char *errmsg);

/* The tar member name of sample i (NULL for other formats). */
const char *bfs_source_member_name(const bfs_source *s, uint64_t i);

/* "train-00001.tfrecord record 17 (offset 1234)" or "cls/img.jpg":
 * where sample i lives, for error messages.  Writes at most cap bytes. */
void bfs_source_describe(const bfs_source *s, uint64_t i, char *out,
			 size_t cap);
/* The shard that holds sample i and its record index within that shard. */
const char *bfs_source_sample_shard(const bfs_source *s, uint64_t i,
				    uint64_t *record);

/* What identifies sample i's bytes on disk, for cache keys: the shard's
 * path relative to bfs_source_dir(), its stamp as indexed (size, mtime,
 * inode number and ctime: see bfs_shard_stamp), and the record's payload
 * offset (0 for a folder image) and length.  A shard whose stamp changes
 * gets new identities, so stale entries are never hit, even for a shard
 * rewritten at the same size with its mtime set back.  shard points into s
 * and lives as long as s.  Returns 0 or -EINVAL. */
typedef struct {
	const char *shard;
	uint64_t shard_size;
	int64_t shard_mtime_ns;
	uint64_t offset;
	uint32_t length;
	uint64_t shard_ino;
	int64_t shard_ctime_ns;
} bfs_sample_identity;
int bfs_source_identity(const bfs_source *s, uint64_t i,
			bfs_sample_identity *id);

/* Release the memory held by a bfs_buf (not the struct itself). */
void bfs_buf_free(bfs_buf *b);

/* ---- a remote source's plan -------------------------------------------- */

/* 1 when s reads its shards through a shard cache (opts.shards). */
int bfs_source_is_remote(const bfs_source *s);

/* How many samples a remote source's readers may have decoded at once
 * (the engine's read-ahead) and still leave its shard cache room to fetch
 * ahead: half the cache's limit, over the shards' mean bytes a sample, at
 * least 1.  Without the bound, read-ahead deeper than the cache holds pins
 * every object it has, the next ones cannot be fetched whole, and their
 * records are read by range and then fetched again.  UINT64_MAX for a
 * local source. */
uint64_t bfs_source_ahead_samples(const bfs_source *s);

/* The shard (its index, as bfs_source_shard_name's) that holds sample i;
 * i < bfs_source_count. */
size_t bfs_source_shard_of(const bfs_source *s, uint64_t i);

/* Give a remote source's shard cache the plan of what the reader will
 * need (shardplan.h: spans whose obj is a shard index here, positions of
 * the caller's choosing), with the reader at pos in `epoch`; and move the
 * reader on.  A local source ignores both (0).  0, -EINVAL (a shard out of
 * range), -ENOMEM.  Any thread (the shard cache serialises them). */
int bfs_source_plan(bfs_source *s, const bfs_span *spans, size_t n,
		    uint64_t pos, int64_t epoch);
void bfs_source_advance(bfs_source *s, uint64_t pos, int64_t epoch);
/* The plan's positions run n to an epoch (shardcache.h
 * bfs_shardcache_epoch_positions); a local source ignores it. */
void bfs_source_epoch_positions(bfs_source *s, uint64_t n);
/* Positions [pos, end) of the plan are being read now (shardcache.h). */
void bfs_source_window(bfs_source *s, uint64_t end);
/* A plan will come (the engine's planner runs): until the first one, a
 * read of a remote shard that is not local waits for it (a while) rather
 * than read by range what the plan may keep whole. */
void bfs_source_expect_plan(bfs_source *s);

#endif
