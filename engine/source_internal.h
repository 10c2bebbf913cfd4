/*
 * source_internal.h - what the files of the source module share (source.h
 * is its contract): the sample table, and the functions one file gives
 * another, prefixed bfs__src_.  The files call each other one way
 * (make check-layers checks it):
 *   source.c          open, close, the accessors, reading a sample
 *   source_list.c     listing, format detection, the folder layout
 *   source_shards.c   TFRecord and tar shards (gzip ones too) indexed
 *   source_index.c    the stored forms of a shard's index
 *   source_dali.c     a TFRecord shard indexed from DALI's .idx beside it
 *   source_tar.c      the samples of tar shards: member names, bad ones
 *   source_classes.c  TFRecord class names
 *   source_table.c    the sample table every indexer adds to
 * each calling only files below it.  Everything here runs in the thread
 * of bfs_source_open, except bfs__src_find_bad (any thread: the table is
 * read-only after open).
 */
#ifndef BFS_SOURCE_INTERNAL_H
#define BFS_SOURCE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/base/reader.h"
#include "engine/formats/gzindex.h"
#include "engine/formats/tar.h"
#include "engine/formats/tfrecord.h"
#include "engine/source.h"
#include "engine/storage/shardcache.h"

#define SAMPLE_BAD_LENGTH_CRC 1u /* length CRC failed but the length held */
#define SAMPLE_TOO_BIG 2u        /* a record over SAMPLE_MAX: a bad sample of
				  * length 0, its header says how long */

/* The most bytes one sample may hold (bfs_sample.length, the cache's
 * identities).  A longer record or member keeps its slot as a bad sample
 * that names it; the framing says where the next one starts. */
#define SAMPLE_MAX UINT32_MAX

struct bfs_sample {
	uint64_t offset;   /* of the record payload; 0 for folder images */
	uint32_t length;   /* payload bytes */
	uint32_t shard;    /* index into s->shards */
	int32_t label;     /* class index for folders, -1 for TFRecord */
	uint32_t flags;    /* SAMPLE_* */
};

struct bfs_shard {
	char *name;        /* relative to the source dir */
	uint64_t first;    /* index of its first sample */
	uint64_t count;
	bfs_shard_stamp stamp; /* identity checked at each read */
	bfs_gzindex *gz;   /* a gzip shard's restart points, or NULL; its
			    * offsets are into the uncompressed bytes */
	char *idx;         /* the DALI index file its offsets came from (its
			    * name beside the shard, or its path in
			    * opts.dali_dir), or NULL (source_dali.c) */
	size_t obj;        /* a remote source: its object in the shard cache */
};

struct scan_error {
	char *shard;
	char *msg;
};

/* A tar sample that keeps its slot but fails when read (no .cls, ...). */
struct bad_sample {
	uint64_t sample;
	int code;
	char *msg;
};

struct bfs_source {
	char *dir;            /* absolute path; a remote source's root URL */
	bfs_shardcache *sc;   /* a remote source: where its objects are read
			       * (borrowed); NULL for a local folder */
	bfs_format format;
	char *image_key;
	char *label_key;
	int label_key_given;  /* --label-key named one (not "none") */

	struct bfs_shard *shards;
	size_t nshards, shards_cap;

	struct bfs_sample *samples;
	uint64_t nsamples, samples_cap;

	char **classes;       /* folder: class folder names; TFRecord: class
			       * names by label (NULL: no record has it) */
	size_t nclasses, classes_cap;

	struct scan_error *errs;
	size_t nerrs;

	bfs_source_opts o;    /* index_get/put/ctx, progress, skip_dali only */
	char *dali_dir;       /* opts.dali_dir, or NULL */
	uint32_t max_ratio;   /* gzindex max_ratio: 0 no limit */
	size_t index_hits;
	size_t index_dali;    /* shards indexed from DALI .idx files */
	char dali_note[BFS_ERRMSG_MAX]; /* the first .idx file not used, why */
	bfs_source_progress prog; /* what the progress hook is told */
	/* A remote shard's stored index, asked for once (held_name the
	 * shard's, held_blob NULL for a miss) and handed to each loader in
	 * turn (bfs__src_index_get); held_name NULL: loaders ask index_get */
	const char *held_name;
	void *held_blob;
	size_t held_len;

	/* TFRecord class names (see "class names" below): classes[label]
	 * (in classes/nclasses above) once a shard's pairs are merged */
	int want_classes;     /* TFRecord with a label key: skim records */
	const bfs_reader *scan_r; /* the shard being scanned, for the skim */
	struct class_pair *pairs; /* the shard being scanned: its (label,
				   * name) pairs, names in ppool */
	size_t npairs, pairs_cap;
	char *ppool;
	size_t ppool_len, ppool_cap;
	uint64_t shard_unnamed; /* its records without a name */
	int cls_kind;         /* -1 none yet, else CLASS_SYNSET/CLASS_TEXT */
	uint64_t cls_named, cls_unnamed; /* records with, without a name */
	char cls_note[256];   /* why there are no classes; "" when fine */

	/* tar only */
	uint32_t *names;      /* per sample: offset into pool */
	char *pool;
	size_t pool_len, pool_cap;
	struct bad_sample *bad; /* sorted by sample */
	size_t nbad;
};

/* ---- source_table.c: the sample table ---------------------------------- */

/* Add a scan error of shard `shard` (copied).  0 or -ENOMEM. */
int bfs__src_add_error(bfs_source *s, const char *shard, const char *msg);
/* The stamp (size, mtime, inode, ctime) of a shard file's stat. */
void bfs__src_stamp_of(const struct stat *st, bfs_shard_stamp *out);
/* Start shard `name` (copied), with its stamp: the samples added next are
 * its.  0 or -ENOMEM. */
int bfs__src_add_shard(bfs_source *s, const char *name,
		       const bfs_shard_stamp *stamp);
/* Add a sample to the last shard.  0, BFS_E_CORRUPT (len over 4 GiB) or
 * -ENOMEM. */
int bfs__src_add_sample(bfs_source *s, uint64_t off, uint64_t len,
			int32_t label, uint32_t flags);
/* Tell the progress hook (if any) where indexing stands. */
void bfs__src_progress(bfs_source *s);
/* Free n strdup()ed names and their array. */
void bfs__src_free_names(char **names, size_t n);

/* ---- source_list.c: listing, detection, folders ------------------------ */

/* The non-hidden entries of dir that are directories (want_dir) or
 * regular files, sorted bytewise, in *out (free with bfs__src_free_names).
 * 0 or -errno with errmsg (may be NULL). */
int bfs__src_list_dir(const char *dir, int want_dir, char ***out, size_t *n,
		      char *errmsg);
/* The same for folder `rel` ("" the root) of a remote source: its objects
 * named rel/F (files), or the F of names rel/F/G (folders).  0 or
 * -ENOMEM. */
int bfs__src_list_remote(const bfs_source *s, const char *rel, int want_dir,
			 char ***out, size_t *n);
int bfs__src_is_image_name(const char *name);
int bfs__src_is_tfrecord_name(const char *name);
int bfs__src_is_tar_name(const char *name);
/* The first bytes of a file (of its uncompressed data for gzip): the count
 * read, 0 when it cannot be read. */
size_t bfs__src_read_head(const char *path, uint8_t *buf, size_t cap);
/* The same for shard `name` of s, local or remote (a remote gzip shard is
 * fetched whole for it; another is read by range). */
size_t bfs__src_head(bfs_source *s, const char *name, uint8_t *buf, size_t cap);
int bfs__src_looks_like_tfrecord(const uint8_t *h, size_t n);
/* Index the folder layout: the class folders dirs[0..ndirs), or with
 * ndirs 0 the images in s->dir itself.  0 or -ENOMEM. */
int bfs__src_index_folder(bfs_source *s, char **dirs, size_t ndirs);

/* ---- source_classes.c: TFRecord class names ---------------------------- */

/* "image/class/synset", "image/class/text": by CLASS_* kind. */
extern const char *const bfs__src_class_key[];
void bfs__src_classes_broken(bfs_source *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Skim the record just scanned for its label and class name. */
int bfs__src_skim_class(bfs_source *s, const bfs_tfrecord_entry *e);
void bfs__src_pairs_reset(bfs_source *s);
void bfs__src_pairs_dedupe(bfs_source *s);
int bfs__src_classes_merge(bfs_source *s);
void bfs__src_classes_finish(bfs_source *s);
/* The class section of a stored index: loaded into the shard's pairs (1
 * when it fits this source, 0 when not, -ENOMEM), its length, written. */
int bfs__src_load_classes(bfs_source *s, const uint8_t *p, size_t n);
size_t bfs__src_classes_section_len(const bfs_source *s);
uint8_t *bfs__src_classes_section_put(const bfs_source *s, uint8_t *p);

/* ---- source_index.c: stored shard indexes ------------------------------ */

/* The stored index of shard `name`: the one held for it (a copy), else
 * index_get's.  0 and a malloc()ed *blob the caller frees, or a miss. */
int bfs__src_index_get(bfs_source *s, const char *name,
		       const bfs_shard_stamp *st, void **blob, size_t *len);
/* Fill shard `name` (of that stamp) from a stored index: 1 if usable, 0
 * if not (nothing added), -ENOMEM. */
int bfs__src_load_index(bfs_source *s, const char *name,
			const bfs_shard_stamp *stamp);
int bfs__src_load_gz_index(bfs_source *s, const char *name,
			   const bfs_shard_stamp *stamp);
/* Store the index of the shard just scanned (the last one added). */
void bfs__src_store_index(bfs_source *s, const char *errmsg);
void bfs__src_store_gz_index(bfs_source *s, const char *errmsg);

/* ---- source_dali.c: DALI's TFRecord index files ------------------------- */

/* 1 for a name ending in .idx (any case): an index, never a shard. */
int bfs__src_is_index_name(const char *name);
/* Fill TFRecord shard `name` from the DALI index beside it: 1 if one
 * describes it exactly, 0 if not (nothing added; dali_note may say why),
 * -ENOMEM. */
int bfs__src_load_dali(bfs_source *s, const char *name,
		      const bfs_shard_stamp *st);

/* ---- source_shards.c: TFRecord and tar shards --------------------------- */

/* Scan one open shard (its bytes through r), adding its samples; 0 or an
 * error with msg. */
typedef int (*bfs__scan_fn)(bfs_source *s, const bfs_reader *r, uint64_t size,
			    char *msg);
int bfs__src_scan_tfrecord(bfs_source *s, const bfs_reader *r, uint64_t size,
			   char *msg);
/* Index the shard files files[0..n) of one format; with cache_index the
 * stored index of an unchanged shard replaces the scan.  0 or -ENOMEM
 * with errmsg. */
int bfs__src_index_shards(bfs_source *s, char **files, size_t n,
			  bfs__scan_fn scan, int cache_index, char *errmsg);

/* ---- source_tar.c: the samples of tar shards --------------------------- */

int bfs__src_scan_tar(bfs_source *s, const bfs_reader *r, uint64_t size,
		      char *msg);
/* One sample of a tar scan (or of a stored .tar.gz index) added. */
int bfs__src_on_tar_sample(void *ctx, const bfs_tar_sample *t);
/* The bad sample i of a tar scan, or NULL. */
const struct bad_sample *bfs__src_find_bad(const bfs_source *s, uint64_t i);

#endif
