/*
 * source.c - the sample index of a shard directory (source.h): open (the
 * layout detected, then indexed by source_list.c or source_shards.c),
 * close, the accessors, the sample table every indexer adds to, and
 * reading one sample back.
 *
 * DESIGN: the index is built once by bfs_source_open() and never changes
 * afterwards, so readers need no lock.  Each sample costs one struct
 * bfs_sample (24 bytes); names live once per shard.  Reads open the shard,
 * check that it is still the file that was indexed (its bfs_shard_stamp:
 * size, mtime, inode number and ctime), pread
 * the record and close it again, so a deleted or rewritten shard gives a
 * clear error instead of wrong bytes.  The module's other files, and the
 * one way they call each other, are in source_internal.h.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/formats/filekind.h"
#include "engine/formats/gzindex.h"
#include "engine/formats/tar.h"
#include "engine/formats/tfrecord.h"

static int stamp_equal(const bfs_shard_stamp *a, const bfs_shard_stamp *b)
{
	return a->size == b->size && a->mtime_ns == b->mtime_ns &&
	       a->ino == b->ino && a->ctime_ns == b->ctime_ns;
}

/* ---- open/close ------------------------------------------------------- */

int bfs_source_open(const bfs_source_opts *o, bfs_source **out,
		    char *errmsg)
{
	char **files = NULL, **dirs = NULL, **shards = NULL, **tars = NULL;
	size_t nfiles = 0, ndirs = 0, nshards = 0, ntars = 0, njpeg = 0;
	/* files passed over that are compressed data: how many, the first */
	size_t ncompressed = 0;
	const char *zname = NULL, *zkind = NULL;
	char real[PATH_MAX];
	bfs_source *s;
	int err;

	*out = NULL;
	if (o->shards) {
		/* a remote source: named by its root URL */
		snprintf(real, sizeof(real), "%s",
			 bfs_storage_root(bfs_shardcache_storage(o->shards)));
	} else if (!realpath(o->dir, real)) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", o->dir, strerror(errno));
		return err;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->sc = o->shards;
	s->o.index_get = o->index_get;
	s->o.index_put = o->index_put;
	s->o.index_ctx = o->index_ctx;
	s->o.progress = o->progress;
	s->o.progress_ctx = o->progress_ctx;
	s->o.skip_dali = o->skip_dali;
	if (o->dali_dir && !(s->dali_dir = strdup(o->dali_dir))) {
		free(s);
		return -ENOMEM;
	}
	s->max_ratio = !o->max_inflate_ratio ? BFS_INFLATE_RATIO_DEFAULT
		     : o->max_inflate_ratio == BFS_INFLATE_RATIO_NONE ? 0
		     : o->max_inflate_ratio;
	s->dir = strdup(real);
	s->image_key = strdup(o->image_key ? o->image_key : "image/encoded");
	s->label_key = strdup(!o->label_key ? "image/class/label"
			      : strcmp(o->label_key, "none") == 0 ? ""
			      : o->label_key);
	s->cls_kind = -1;
	s->label_key_given = o->label_key && strcmp(o->label_key, "none");
	if (!s->dir || !s->image_key || !s->label_key) {
		err = -ENOMEM;
		goto fail;
	}
	if (s->sc) {
		if ((err = bfs__src_list_remote(s, "", 0, &files, &nfiles)) ||
		    (err = bfs__src_list_remote(s, "", 1, &dirs, &ndirs)))
			goto fail;
	} else if ((err = bfs__src_list_dir(real, 0, &files, &nfiles, errmsg)) ||
		   (err = bfs__src_list_dir(real, 1, &dirs, &ndirs, errmsg))) {
		goto fail;
	}

	shards = calloc(nfiles ? nfiles : 1, sizeof(*shards));
	tars = calloc(nfiles ? nfiles : 1, sizeof(*tars));
	if (!shards || !tars) {
		err = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < nfiles; i++) {
		uint8_t head[BFS_TAR_BLOCK];
		size_t head_len;

		if (bfs__src_is_index_name(files[i]))
			continue; /* DALI's index of a shard (source_dali.c) */
		if (bfs__src_is_image_name(files[i])) {
			njpeg++;
			continue;
		}
		/* one read of the first block serves both probes; a name
		 * that says what a shard is needs none (a remote one is not
		 * fetched for it) */
		head_len = o->format == BFS_FORMAT_AUTO &&
			   !(s->sc && (bfs__src_is_tar_name(files[i]) ||
				       bfs__src_is_tfrecord_name(files[i])))
			? bfs__src_head(s, files[i], head, sizeof(head)) : 0;
		if (o->format == BFS_FORMAT_TAR ||
		    (o->format != BFS_FORMAT_TFRECORD &&
		     (bfs__src_is_tar_name(files[i]) ||
		      (head_len == sizeof(head) && bfs_tar_probe(head, head_len)))))
			tars[ntars++] = files[i];
		else if (o->format == BFS_FORMAT_TFRECORD ||
			 bfs__src_is_tfrecord_name(files[i]) ||
			 bfs__src_looks_like_tfrecord(head, head_len))
			shards[nshards++] = files[i];
		else if (bfs_filekind_advice(bfs_filekind(head, head_len)) &&
			 !ncompressed++) {
			zname = files[i];
			zkind = bfs_filekind(head, head_len);
		}
	}

	s->format = o->format;
	if (s->format == BFS_FORMAT_AUTO) {
		if (nshards && ntars) {
			err = BFS_E_FORMAT;
			bfs_seterr(errmsg,
				   "%s: holds both TFRecord shards and tar shards; choose with --format",
				   real);
			goto fail;
		}
		s->format = nshards ? BFS_FORMAT_TFRECORD
			  : ntars ? BFS_FORMAT_TAR : BFS_FORMAT_FOLDER;
	}
	s->prog.format = s->format;

	if (s->format == BFS_FORMAT_TAR) {
		if (!ntars) {
			err = BFS_E_EMPTY;
			bfs_seterr(errmsg, "%s: no tar shards found", real);
			goto fail;
		}
		if ((err = bfs__src_index_shards(s, tars, ntars, bfs__src_scan_tar, 1, errmsg)))
			goto fail;
	} else if (s->format == BFS_FORMAT_TFRECORD) {
		s->want_classes = s->label_key[0] != '\0';
		if (!nshards) {
			err = BFS_E_EMPTY;
			bfs_seterr(errmsg, "%s: no TFRecord shards found", real);
			goto fail;
		}
		if ((err = bfs__src_index_shards(s, shards, nshards, bfs__src_scan_tfrecord, 1,
					errmsg)))
			goto fail;
	} else {
		if (!ndirs && !njpeg) {
			err = BFS_E_EMPTY;
			bfs_seterr(errmsg,
				   "%s: no TFRecord shards, class folders or image files found",
				   real);
			goto fail;
		}
		if ((err = bfs__src_index_folder(s, ndirs ? dirs : NULL, ndirs))) {
			bfs_seterr(errmsg, "%s: %s", real, bfs_strerror(err));
			goto fail;
		}
	}
	if (s->nsamples == 0) {
		err = BFS_E_EMPTY;
		if (s->nerrs)
			bfs_seterr(errmsg, "%s: no readable samples (%s: %s)",
				   real, s->errs[0].shard, s->errs[0].msg);
		else
			bfs_seterr(errmsg, "%s: no samples found", real);
		goto fail;
	}
	free(shards);
	free(tars);
	bfs__src_free_names(files, nfiles);
	bfs__src_free_names(dirs, ndirs);
	for (size_t i = 0; s->sc && i < s->nshards; i++)
		s->shards[i].obj = (size_t)bfs_shardcache_find(s->sc, s->shards[i].name);
	bfs__src_classes_finish(s);
	s->prog.finished = 1;
	bfs__src_progress(s);
	*out = s;
	return 0;
fail:
	if (err == BFS_E_EMPTY && ncompressed && errmsg) {
		/* "no TFRecord shards found" in a folder of .tar.gz files */
		size_t len = strlen(errmsg);

		snprintf(errmsg + len, BFS_ERRMSG_MAX - len,
			 "; %zu compressed file%s passed over: %s looks like %s: %s",
			 ncompressed, ncompressed == 1 ? "" : "s", zname, zkind,
			 bfs_filekind_advice(zkind));
	}
	free(shards);
	free(tars);
	bfs__src_free_names(files, nfiles);
	bfs__src_free_names(dirs, ndirs);
	bfs_source_close(s);
	if (err == -ENOMEM)
		bfs_seterr(errmsg, "%s: out of memory while indexing", o->dir);
	return err;
}

void bfs_source_close(bfs_source *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nshards; i++) {
		free(s->shards[i].name);
		free(s->shards[i].idx);
		bfs_gzindex_free(s->shards[i].gz);
	}
	for (size_t i = 0; i < s->nerrs; i++) {
		free(s->errs[i].shard);
		free(s->errs[i].msg);
	}
	bfs__src_free_names(s->classes, s->nclasses);
	free(s->pairs);
	free(s->ppool);
	for (size_t i = 0; i < s->nbad; i++)
		free(s->bad[i].msg);
	free(s->bad);
	free(s->names);
	free(s->pool);
	free(s->errs);
	free(s->shards);
	free(s->samples);
	free(s->dir);
	free(s->dali_dir);
	free(s->image_key);
	free(s->label_key);
	free(s);
}

/* ---- accessors -------------------------------------------------------- */

uint64_t bfs_source_count(const bfs_source *s) { return s->nsamples; }
size_t bfs_source_nindex_hits(const bfs_source *s) { return s->index_hits; }
size_t bfs_source_nindex_dali(const bfs_source *s) { return s->index_dali; }
const char *bfs_source_dali_note(const bfs_source *s)
{
	return s->dali_note[0] ? s->dali_note : NULL;
}
bfs_format bfs_source_format(const bfs_source *s) { return s->format; }
const char *bfs_source_dir(const bfs_source *s) { return s->dir; }
size_t bfs_source_nshards(const bfs_source *s) { return s->nshards; }
size_t bfs_source_nclasses(const bfs_source *s) { return s->nclasses; }
size_t bfs_source_nscan_errors(const bfs_source *s) { return s->nerrs; }

const char *bfs_format_name(bfs_format f)
{
	switch (f) {
	case BFS_FORMAT_TFRECORD: return "tfrecord";
	case BFS_FORMAT_FOLDER:   return "folder";
	case BFS_FORMAT_TAR:      return "tar";
	default:                  return "auto";
	}
}

const char *bfs_source_shard_name(const bfs_source *s, size_t i)
{
	return i < s->nshards ? s->shards[i].name : NULL;
}

uint64_t bfs_source_shard_samples(const bfs_source *s, size_t i)
{
	return i < s->nshards ? s->shards[i].count : 0;
}

const char *bfs_source_class_name(const bfs_source *s, size_t i)
{
	return i < s->nclasses ? s->classes[i] : NULL;
}

const char *bfs_source_classes_from(const bfs_source *s)
{
	if (s->format == BFS_FORMAT_FOLDER && s->nclasses)
		return "folder names";
	if (s->format == BFS_FORMAT_TFRECORD && s->nclasses && s->cls_kind >= 0)
		return bfs__src_class_key[s->cls_kind];
	return NULL;
}

const char *bfs_source_classes_note(const bfs_source *s)
{
	return s->cls_note[0] ? s->cls_note : NULL;
}

const char *bfs_source_scan_error(const bfs_source *s, size_t i)
{
	return i < s->nerrs ? s->errs[i].msg : NULL;
}

const char *bfs_source_scan_error_shard(const bfs_source *s, size_t i)
{
	return i < s->nerrs ? s->errs[i].shard : NULL;
}

const char *bfs_source_sample_shard(const bfs_source *s, uint64_t i,
				    uint64_t *record)
{
	const struct bfs_shard *sh;

	if (i >= s->nsamples)
		return NULL;
	sh = &s->shards[s->samples[i].shard];
	if (record)
		*record = i - sh->first;
	return sh->name;
}

void bfs_source_describe(const bfs_source *s, uint64_t i, char *out,
			 size_t cap)
{
	uint64_t rec;
	const char *name = bfs_source_sample_shard(s, i, &rec);

	if (!name)
		snprintf(out, cap, "sample %llu (out of range)",
			 (unsigned long long)i);
	else if (s->format == BFS_FORMAT_TAR)
		snprintf(out, cap, "%s member %s", name,
			 bfs_source_member_name(s, i));
	else if (s->format == BFS_FORMAT_TFRECORD)
		snprintf(out, cap, "%s record %llu (offset %llu)", name,
			 (unsigned long long)rec,
			 (unsigned long long)s->samples[i].offset);
	else
		snprintf(out, cap, "%s", name);
}

int bfs_source_identity(const bfs_source *s, uint64_t i,
			bfs_sample_identity *id)
{
	const struct bfs_shard *sh;

	if (i >= s->nsamples)
		return -EINVAL;
	sh = &s->shards[s->samples[i].shard];
	id->shard = sh->name;
	id->shard_size = sh->stamp.size;
	id->shard_mtime_ns = sh->stamp.mtime_ns;
	id->offset = s->samples[i].offset;
	id->length = s->samples[i].length;
	id->shard_ino = sh->stamp.ino;
	id->shard_ctime_ns = sh->stamp.ctime_ns;
	return 0;
}

int bfs_source_is_remote(const bfs_source *s) { return s->sc != NULL; }

uint64_t bfs_source_ahead_samples(const bfs_source *s)
{
	bfs_shardcache_stats st;
	uint64_t bytes = 0, per, n;

	if (!s->sc)
		return UINT64_MAX;
	for (size_t k = 0; k < s->nshards; k++)
		bytes += s->shards[k].stamp.size;
	bfs_shardcache_get_stats(s->sc, &st);
	per = s->nsamples ? bytes / s->nsamples : 0;
	n = per ? st.limit / 2 / per : UINT64_MAX;
	return n ? n : 1;
}

size_t bfs_source_shard_of(const bfs_source *s, uint64_t i)
{
	return s->samples[i].shard;
}

int bfs_source_plan(bfs_source *s, const bfs_span *spans, size_t n,
		    uint64_t pos, int64_t epoch)
{
	bfs_span *v;
	int err;

	if (!s->sc)
		return 0;
	if (!(v = malloc((n ? n : 1) * sizeof(*v))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (spans[i].obj >= s->nshards) {
			free(v);
			return -EINVAL;
		}
		v[i] = spans[i];
		v[i].obj = (uint32_t)s->shards[spans[i].obj].obj;
	}
	err = bfs_shardcache_plan(s->sc, v, n, pos, epoch);
	free(v);
	return err;
}

void bfs_source_advance(bfs_source *s, uint64_t pos, int64_t epoch)
{
	if (s->sc)
		bfs_shardcache_advance(s->sc, pos, epoch);
}

void bfs_source_epoch_positions(bfs_source *s, uint64_t n)
{
	if (s->sc)
		bfs_shardcache_epoch_positions(s->sc, n);
}

void bfs_source_window(bfs_source *s, uint64_t end)
{
	if (s->sc)
		bfs_shardcache_window(s->sc, end);
}

void bfs_source_expect_plan(bfs_source *s)
{
	if (s->sc)
		bfs_shardcache_expect_plan(s->sc);
}

void bfs_buf_free(bfs_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->cap = 0;
	bfs_gzcursor_destroy(b->gz);
	b->gz = NULL;
}

static int buf_reserve(bfs_buf *b, size_t need)
{
	uint8_t *n;
	size_t cap;

	if (b->cap >= need)
		return 0;
	cap = b->cap ? b->cap : 1 << 16;
	while (cap < need)
		cap *= 2;
	if (!(n = realloc(b->data, cap)))
		return -ENOMEM;
	b->data = n;
	b->cap = cap;
	return 0;
}

/* ---- reading ---------------------------------------------------------- */

/* A TFRecord over SAMPLE_MAX (SAMPLE_TOO_BIG): BFS_E_CORRUPT, naming it
 * with the length its header (read again from fd, the indexed shard) says,
 * or the error of that read. */
static int too_big(bfs_source *s, uint64_t i, bfs_buf *buf, int fd,
		   char *errmsg)
{
	const struct bfs_sample *smp = &s->samples[i];
	const struct bfs_shard *sh = &s->shards[smp->shard];
	uint64_t hdr = smp->offset - BFS_TFRECORD_HEADER, len = 0;
	uint8_t h[8];
	int err;

	if (sh->gz) {
		if (!buf->gz && (err = bfs_gzcursor_create(&buf->gz)))
			return err;
		if ((err = bfs_gzcursor_read(buf->gz, sh->gz, fd, h, sizeof(h),
					     hdr, errmsg)))
			return err == -EIO ? BFS_E_TRUNCATED : err;
	} else if (pread(fd, h, sizeof(h), (off_t)hdr) != (ssize_t)sizeof(h)) {
		bfs_seterr(errmsg, "record %llu at offset %llu: cannot read its "
			   "header again", (unsigned long long)(i - sh->first),
			   (unsigned long long)hdr);
		return -EIO;
	}
	for (int k = 7; k >= 0; k--)
		len = len << 8 | h[k];
	bfs_seterr(errmsg, "record %llu at offset %llu: its length %llu is over "
		   "%llu bytes (4 GiB), the most one sample may hold; the "
		   "shard's other records are kept",
		   (unsigned long long)(i - sh->first), (unsigned long long)hdr,
		   (unsigned long long)len, (unsigned long long)SAMPLE_MAX);
	return BFS_E_CORRUPT;
}

/* Bytes [off, off + n) of remote shard sh: a gzip shard's uncompressed
 * bytes from its whole local copy, else the shard cache's read (local or
 * by range).  0, BFS_E_REMOTE (errmsg says why, naming the object),
 * BFS_E_TRUNCATED, -ENOMEM. */
static int remote_read(bfs_source *s, const struct bfs_shard *sh, bfs_buf *buf,
		       uint8_t *dst, size_t n, uint64_t off, char *errmsg)
{
	int fd, err;

	if (sh->gz) {
		if (!buf->gz && (err = bfs_gzcursor_create(&buf->gz)))
			return err;
		if ((err = bfs_shardcache_pin(s->sc, sh->obj, &fd, errmsg)))
			return err == -ENOMEM ? err : BFS_E_REMOTE;
		err = bfs_gzcursor_read(buf->gz, sh->gz, fd, dst, n, off, errmsg);
		bfs_shardcache_unpin(s->sc, sh->obj);
		return err == -EIO ? BFS_E_TRUNCATED : err;
	}
	err = bfs_shardcache_read(s->sc, sh->obj, off, dst, n, errmsg);
	return !err || err == -ENOMEM ? err : BFS_E_REMOTE;
}

/* bfs_source_read of a remote source's sample (the shard cache checks the
 * identity: a local copy against its trailer, a range read with
 * If-Match). */
static int read_remote(bfs_source *s, uint64_t i, bfs_buf *buf, char *errmsg)
{
	const struct bfs_sample *smp = &s->samples[i];
	const struct bfs_shard *sh = &s->shards[smp->shard];
	size_t need;
	int err;

	if (smp->flags & SAMPLE_TOO_BIG) {
		uint64_t hdr = smp->offset - BFS_TFRECORD_HEADER, len = 0;
		uint8_t h[8];

		if ((err = remote_read(s, sh, buf, h, sizeof(h), hdr, errmsg)))
			return err;
		for (int k = 7; k >= 0; k--)
			len = len << 8 | h[k];
		bfs_seterr(errmsg, "record %llu at offset %llu: its length %llu is over "
			   "%llu bytes (4 GiB), the most one sample may hold; the "
			   "shard's other records are kept",
			   (unsigned long long)(i - sh->first), (unsigned long long)hdr,
			   (unsigned long long)len, (unsigned long long)SAMPLE_MAX);
		return BFS_E_CORRUPT;
	}
	need = (size_t)smp->length + (s->format == BFS_FORMAT_TFRECORD ? 4 : 0);
	if ((err = buf_reserve(buf, need ? need : 1)))
		return err;
	return need ? remote_read(s, sh, buf, buf->data, need, smp->offset, errmsg) : 0;
}

int bfs_source_read(bfs_source *s, uint64_t i, bfs_buf *buf,
		    const uint8_t **jpeg, size_t *jpeg_len, int64_t *label,
		    char *errmsg)
{
	const struct bfs_sample *smp;
	const struct bfs_shard *sh;
	char path[PATH_MAX];
	struct stat st;
	bfs_shard_stamp now;
	size_t need;
	ssize_t r;
	int fd, err;

	*jpeg = NULL;
	*jpeg_len = 0;
	if (i >= s->nsamples)
		return -EINVAL;
	if (s->nbad) {
		const struct bad_sample *bad = bfs__src_find_bad(s, i);

		if (bad) {
			bfs_seterr(errmsg, "%s", bad->msg);
			return bad->code;
		}
	}
	smp = &s->samples[i];
	sh = &s->shards[smp->shard];
	if (s->sc) {
		if ((err = read_remote(s, i, buf, errmsg)))
			return err;
		goto decode;
	}
	snprintf(path, sizeof(path), "%s/%s", s->dir, sh->name);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		bfs_seterr(errmsg, "cannot open shard: %s", strerror(errno));
		return err;
	}
	err = fstat(fd, &st);
	if (err == 0)
		bfs__src_stamp_of(&st, &now);
	if (err != 0 || !stamp_equal(&now, &sh->stamp)) {
		close(fd);
		bfs_seterr(errmsg,
			   "shard changed since it was indexed (size, mtime, inode or ctime); remount to re-index");
		return -EIO;
	}
	if (smp->flags & SAMPLE_TOO_BIG) {
		err = too_big(s, i, buf, fd, errmsg);
		close(fd);
		return err;
	}
	need = (size_t)smp->length + (s->format == BFS_FORMAT_TFRECORD ? 4 : 0);
	if ((err = buf_reserve(buf, need ? need : 1))) {
		close(fd);
		return err;
	}
	if (sh->gz) {
		/* a gzip shard: through this buffer's cursor, which goes on
		 * from the previous read when it can */
		if (!buf->gz && (err = bfs_gzcursor_create(&buf->gz))) {
			close(fd);
			return err;
		}
		err = bfs_gzcursor_read(buf->gz, sh->gz, fd, buf->data, need,
					smp->offset, errmsg);
		close(fd);
		if (err)
			return err == -EIO ? BFS_E_TRUNCATED : err;
		r = (ssize_t)need;
	} else {
		r = need ? pread(fd, buf->data, need, (off_t)smp->offset) : 0;
		err = r < 0 ? -errno : 0;
		close(fd);
		if (err) {
			bfs_seterr(errmsg, "read failed: %s", strerror(-err));
			return err;
		}
	}
	if ((size_t)r != need) {
		bfs_seterr(errmsg, "short read (%zd of %zu bytes)", r, need);
		return BFS_E_TRUNCATED;
	}
decode:
	if (s->format == BFS_FORMAT_FOLDER || s->format == BFS_FORMAT_TAR) {
		*jpeg = buf->data;
		*jpeg_len = smp->length;
		*label = smp->label;
		return 0;
	}
	if (smp->flags & SAMPLE_BAD_LENGTH_CRC) {
		bfs_seterr(errmsg, "length CRC32C mismatch in record header");
		return BFS_E_CRC;
	}
	if ((err = bfs_tfrecord_check(buf->data, smp->length, errmsg))) {
		if (sh->idx && errmsg) { /* the index may be what is wrong */
			size_t n = strlen(errmsg);

			snprintf(errmsg + n, BFS_ERRMSG_MAX - n,
				 "; this shard's offsets came from DALI's %s: if it "
				 "does not match the shard, remove or remake it",
				 sh->idx);
		}
		return err;
	}
	if (!s->label_key[0]) { /* --label-key none: unlabeled data */
		*label = -1;
		return bfs_example_find(buf->data, smp->length, s->image_key,
					NULL, jpeg, jpeg_len, label, errmsg);
	}
	*label = INT64_MIN; /* stays so when the feature is missing */
	err = bfs_example_find(buf->data, smp->length, s->image_key,
			       s->label_key, jpeg, jpeg_len, label, errmsg);
	if (!err && *label == INT64_MIN) {
		bfs_seterr(errmsg,
			   "no int64 feature '%s' (use --label-key, or --label-key none for unlabeled data)",
			   s->label_key);
		return BFS_E_NOKEY;
	}
	return err;
}
