/*
 * source.c - index a shard directory (TFRecord shards or an ImageFolder
 * tree) into one ordered sample table, and read samples back.
 *
 * DESIGN: the index is built once by bfs_source_open() and never changes
 * afterwards, so readers need no lock.  Each sample costs one struct
 * bfs_sample (24 bytes); names live once per shard.  Reads open the shard,
 * check that it is still the file that was indexed (its bfs_shard_stamp:
 * size, mtime, inode number and ctime), pread
 * the record and close it again, so a deleted or rewritten shard gives a
 * clear error instead of wrong bytes.
 */
#include "engine/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/crc32c.h"
#include "engine/formats/example.h"
#include "engine/formats/filekind.h"
#include "engine/formats/gzindex.h"
#include "engine/formats/tar.h"
#include "engine/formats/tfrecord.h"

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
	char *dir;
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

	bfs_source_opts o;    /* index_get/put/ctx and progress only */
	uint32_t max_ratio;   /* gzindex max_ratio: 0 no limit */
	size_t index_hits;
	bfs_source_progress prog; /* what the progress hook is told */

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

/* ---- small helpers ---------------------------------------------------- */

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* List the non-hidden entries of dir of the wanted type (DT_REG or
 * DT_DIR), sorted bytewise.  *out is malloc'd, free with free_names(). */
static int list_dir(const char *dir, int want_dir, char ***out, size_t *n,
		    char *errmsg)
{
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *de;
	int err = 0;

	*out = NULL;
	*n = 0;
	if (!d) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", dir, strerror(errno));
		return err;
	}
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		struct stat st;
		int is_dir;

		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
		    (int)sizeof(path))
			continue;
		if (stat(path, &st) != 0)
			continue;
		is_dir = S_ISDIR(st.st_mode);
		if (is_dir != want_dir || (!is_dir && !S_ISREG(st.st_mode)))
			continue;
		if (cnt == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			char **nn = realloc(names, ncap * sizeof(*nn));
			if (!nn) {
				err = -ENOMEM;
				goto fail;
			}
			names = nn;
			cap = ncap;
		}
		if (!(names[cnt] = strdup(de->d_name))) {
			err = -ENOMEM;
			goto fail;
		}
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(names, cnt, sizeof(*names), cmp_names);
	*out = names;
	*n = cnt;
	return 0;
fail:
	closedir(d);
	free_names(names, cnt);
	bfs_seterr(errmsg, "%s: out of memory", dir);
	return err;
}

static int has_suffix_ci(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);
	return ls >= lf && strcasecmp(s + ls - lf, suf) == 0;
}

/* The image files of a folder layout: JPEG, PNG and WebP (which of them
 * a file is comes from its bytes), and GIF, so that a GIF is refused by
 * name rather than passed over (image.h). */
static int is_image_name(const char *name)
{
	return has_suffix_ci(name, ".jpg") || has_suffix_ci(name, ".jpeg") ||
	       has_suffix_ci(name, ".png") || has_suffix_ci(name, ".webp") ||
	       has_suffix_ci(name, ".gif");
}

/* The name rules look through a .gz suffix: x.tfrecord.gz is a (GZIP)
 * TFRecord shard, x.tar.gz and x.tgz tar shards. */
static int has_suffix_gz(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);

	if (has_suffix_ci(s, suf))
		return 1;
	return ls >= lf + 3 && has_suffix_ci(s, ".gz") &&
	       strncasecmp(s + ls - 3 - lf, suf, lf) == 0;
}

static int is_tfrecord_name(const char *name)
{
	return has_suffix_gz(name, ".tfrecord") ||
	       has_suffix_gz(name, ".tfrecords") ||
	       has_suffix_gz(name, ".tfrec") || strstr(name, "-of-") != NULL;
}

static int is_tar_name(const char *name)
{
	return has_suffix_gz(name, ".tar") || has_suffix_ci(name, ".tgz");
}

/* The first min(cap, size) bytes of a file, for format detection: the
 * count read, or 0 if it cannot be read.  For a gzip file, the first bytes
 * of its uncompressed data. */
static size_t read_head(const char *path, uint8_t *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t got = 0;
	ssize_t r;

	if (fd < 0)
		return 0;
	r = pread(fd, buf, cap, 0);
	if (r > 0 && bfs_gz_probe(buf, (size_t)r) && fstat(fd, &st) == 0 &&
	    bfs_gz_peek(fd, (uint64_t)st.st_size, buf, cap, &got) == 0)
		r = (ssize_t)got;
	close(fd);
	return r > 0 ? (size_t)r : 0;
}

/* Does the file start with a TFRecord header whose length CRC holds? */
static int looks_like_tfrecord(const uint8_t *h, size_t n)
{
	uint32_t crc;

	if (n < 12)
		return 0;
	memcpy(&crc, h + 8, 4);
	return bfs_crc32c_mask(bfs_crc32c(0, h, 8)) == crc;
}

static int add_error(bfs_source *s, const char *shard, const char *msg)
{
	struct scan_error *ne = realloc(s->errs, (s->nerrs + 1) * sizeof(*ne));

	if (!ne)
		return -ENOMEM;
	s->errs = ne;
	ne[s->nerrs].shard = strdup(shard);
	ne[s->nerrs].msg = strdup(msg);
	if (!ne[s->nerrs].shard || !ne[s->nerrs].msg) {
		free(ne[s->nerrs].shard);
		free(ne[s->nerrs].msg);
		return -ENOMEM;
	}
	s->nerrs++;
	return 0;
}

static void stamp_of(const struct stat *st, bfs_shard_stamp *out)
{
	out->size = (uint64_t)st->st_size;
	out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 +
			st->st_mtim.tv_nsec;
	out->ino = (uint64_t)st->st_ino;
	out->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 +
			st->st_ctim.tv_nsec;
}

static int stamp_equal(const bfs_shard_stamp *a, const bfs_shard_stamp *b)
{
	return a->size == b->size && a->mtime_ns == b->mtime_ns &&
	       a->ino == b->ino && a->ctime_ns == b->ctime_ns;
}

static int add_shard(bfs_source *s, const char *name, const struct stat *st)
{
	struct bfs_shard *sh;

	if (s->nshards == s->shards_cap) {
		size_t ncap = s->shards_cap ? s->shards_cap * 2 : 64;
		struct bfs_shard *n = realloc(s->shards, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->shards = n;
		s->shards_cap = ncap;
	}
	sh = &s->shards[s->nshards];
	memset(sh, 0, sizeof(*sh));
	if (!(sh->name = strdup(name)))
		return -ENOMEM;
	sh->first = s->nsamples;
	stamp_of(st, &sh->stamp);
	s->nshards++;
	return 0;
}

static int add_sample(bfs_source *s, uint64_t off, uint64_t len,
		      int32_t label, uint32_t flags)
{
	struct bfs_sample *smp;

	if (len > UINT32_MAX)
		return BFS_E_CORRUPT;
	if (s->nsamples == s->samples_cap) {
		uint64_t ncap = s->samples_cap ? s->samples_cap * 2 : 4096;
		struct bfs_sample *n = realloc(s->samples, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->samples = n;
		s->samples_cap = ncap;
	}
	smp = &s->samples[s->nsamples++];
	smp->offset = off;
	smp->length = (uint32_t)len;
	smp->shard = (uint32_t)(s->nshards - 1);
	smp->label = label;
	smp->flags = flags;
	s->shards[s->nshards - 1].count++;
	return 0;
}

/* Tell the progress hook (if any) where indexing stands. */
static void progress(bfs_source *s)
{
	if (!s->o.progress)
		return;
	s->prog.records = s->nsamples;
	s->o.progress(s->o.progress_ctx, &s->prog);
}

/* ---- class names (TFRecord) ----------------------------------------- */

/* While a TFRecord shard is scanned, each record is skimmed (engine/
 * example.h: only its small entries are read, and mostly from the bytes
 * the scan holds anyway) for its label and its class name: the bytes of
 * image/class/synset (mkshards and TensorFlow's ImageNet scripts write
 * it), else image/class/text.  A shard's distinct (label, name) pairs are
 * stored with its index and merged into classes[label].  The list is
 * only given when it can be trusted: every labeled record named, one name
 * per label, one key for all, labels below 2^20; else cls_note says why
 * not. */
enum { CLASS_SYNSET = 0, CLASS_TEXT = 1 };
#define CLASS_MAX_LABEL (1 << 20)
#define CLASS_MAX_NAME 1024

static const char *const class_key[] = { "image/class/synset",
					 "image/class/text" };

struct class_pair {
	int64_t label;
	uint32_t name;    /* offset into ppool */
	uint16_t len;
	uint8_t kind;     /* CLASS_* */
};

static void classes_broken(bfs_source *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void classes_broken(bfs_source *s, const char *fmt, ...)
{
	va_list ap;

	if (s->cls_note[0])
		return; /* the first reason stands */
	va_start(ap, fmt);
	vsnprintf(s->cls_note, sizeof(s->cls_note), fmt, ap);
	va_end(ap);
}

/* Remember the pair of one record of the shard being scanned. */
static int pair_add(bfs_source *s, int64_t label, const uint8_t *name,
		    size_t len, int kind)
{
	struct class_pair *p;

	if (s->npairs == s->pairs_cap) {
		size_t cap = s->pairs_cap ? s->pairs_cap * 2 : 256;
		struct class_pair *n = realloc(s->pairs, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->pairs = n;
		s->pairs_cap = cap;
	}
	if (s->ppool_len + len > s->ppool_cap) {
		size_t cap = s->ppool_cap ? s->ppool_cap : 4096;
		char *n;

		while (cap < s->ppool_len + len)
			cap *= 2;
		if (cap > UINT32_MAX || !(n = realloc(s->ppool, cap)))
			return -ENOMEM;
		s->ppool = n;
		s->ppool_cap = cap;
	}
	p = &s->pairs[s->npairs++];
	p->label = label;
	p->name = (uint32_t)s->ppool_len;
	p->len = (uint16_t)len;
	p->kind = (uint8_t)kind;
	memcpy(s->ppool + s->ppool_len, name, len);
	s->ppool_len += len;
	return 0;
}

struct skim_at {
	const bfs_reader *r;
	uint64_t base;        /* the record's offset in the shard's bytes */
};

static int skim_read(void *ctx, size_t off, void *buf, size_t len)
{
	const struct skim_at *at = ctx;

	return at->r->pread(at->r->ctx, buf, len, at->base + off, NULL);
}

/* The label and class name of the record just scanned.  A record that is
 * not an Example, or has no label, says nothing (its read will say what
 * is wrong); a labeled record without a usable name counts as unnamed.
 * 0 or -ENOMEM. */
static int skim_class(bfs_source *s, const bfs_tfrecord_entry *e)
{
	/* Example{features{"\x01": bytes_list[""]}}: appended to the skimmed
	 * entries (Example.features may repeat: the maps add up), it gives
	 * bfs_example_find an image to find, so that it reads the label of
	 * any record, named or not.  No wanted key is "\x01". */
	static const uint8_t probe[] = { 0x0a, 0x0b, 0x0a, 0x09, 0x0a, 0x01, 0x01,
					 0x12, 0x04, 0x0a, 0x02, 0x0a, 0x00 };
	const char *keys[] = { s->label_key, class_key[0], class_key[1], NULL };
	struct skim_at ctx = { s->scan_r, e->offset };
	uint8_t out[3 * 4096 + 64];
	const uint8_t *name;
	size_t out_len, len;
	int64_t label = INT64_MIN, unused;

	if (e->status || e->length > SIZE_MAX ||
	    bfs_example_skim(e->data, e->data_len, (size_t)e->length, skim_read,
			     &ctx, keys, out, sizeof(out) - sizeof(probe), &out_len,
			     NULL) != 0)
		return 0;
	memcpy(out + out_len, probe, sizeof(probe));
	out_len += sizeof(probe);
	if (bfs_example_find(out, out_len, "\x01", s->label_key, &name, &len,
			     &label, NULL) != 0 || label == INT64_MIN)
		return 0; /* no label (or not one int64): not a class member */
	for (int kind = CLASS_SYNSET; kind <= CLASS_TEXT; kind++) {
		int err = bfs_example_find(out, out_len, class_key[kind], NULL,
					   &name, &len, &unused, NULL);

		if (err == BFS_E_NOKEY)
			continue; /* not named by this key: try the next */
		if (err == 0 && len > 0 && len <= CLASS_MAX_NAME &&
		    !memchr(name, '\0', len))
			return pair_add(s, label, name, len, kind);
		break; /* a name that is not one bytes value */
	}
	s->shard_unnamed++;
	return 0;
}

static int cmp_pairs_by(const struct class_pair *a, const struct class_pair *b,
			const char *pool)
{
	size_t n = a->len < b->len ? a->len : b->len;
	int c;

	if (a->label != b->label)
		return a->label < b->label ? -1 : 1;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if ((c = memcmp(pool + a->name, pool + b->name, n)))
		return c;
	return a->len < b->len ? -1 : a->len > b->len;
}

static int cmp_pairs(const void *a, const void *b, void *pool)
{
	return cmp_pairs_by(a, b, pool);
}

/* The shard's pairs sorted, duplicates dropped. */
static void pairs_dedupe(bfs_source *s)
{
	size_t o = 0;

	if (!s->npairs)
		return;
	qsort_r(s->pairs, s->npairs, sizeof(*s->pairs), cmp_pairs, s->ppool);
	for (size_t i = 1; i < s->npairs; i++)
		if (cmp_pairs_by(&s->pairs[o], &s->pairs[i], s->ppool))
			s->pairs[++o] = s->pairs[i];
	s->npairs = o + 1;
}

/* Merge the shard's pairs into classes[label].  0 or -ENOMEM. */
static int classes_merge(bfs_source *s)
{
	s->cls_unnamed += s->shard_unnamed;
	for (size_t i = 0; i < s->npairs; i++) {
		const struct class_pair *p = &s->pairs[i];
		const char *name = s->ppool + p->name;

		s->cls_named++;
		if (p->label < 0)
			continue; /* not an index into a list */
		if (s->cls_kind >= 0 && s->cls_kind != p->kind) {
			classes_broken(s, "some records name their class by %s, others by %s",
				       class_key[s->cls_kind], class_key[p->kind]);
			continue;
		}
		s->cls_kind = p->kind;
		if (p->label >= CLASS_MAX_LABEL) {
			classes_broken(s, "a label is %lld: too large for a class list",
				       (long long)p->label);
			continue;
		}
		if ((size_t)p->label >= s->nclasses) {
			size_t n = s->nclasses ? s->nclasses : 64;
			char **nc;

			while (n <= (size_t)p->label)
				n *= 2;
			if (!(nc = realloc(s->classes, n * sizeof(*nc))))
				return -ENOMEM;
			memset(nc + s->nclasses, 0, (n - s->nclasses) * sizeof(*nc));
			s->classes = nc;
			s->classes_cap = n;
			s->nclasses = (size_t)p->label + 1;
		}
		if (!s->classes[p->label]) {
			if (!(s->classes[p->label] = strndup(name, p->len)))
				return -ENOMEM;
		} else if (strlen(s->classes[p->label]) != p->len ||
			   memcmp(s->classes[p->label], name, p->len)) {
			classes_broken(s, "label %lld has two names in %s",
				       (long long)p->label, class_key[p->kind]);
		}
	}
	return 0;
}

/* Start a shard's pairs afresh. */
static void pairs_reset(bfs_source *s)
{
	s->npairs = 0;
	s->ppool_len = 0;
	s->shard_unnamed = 0;
}

/* After the last shard: keep classes[] only if it can be trusted. */
static void classes_finish(bfs_source *s)
{
	if (!s->want_classes)
		return;
	if (!s->cls_note[0] && s->cls_unnamed && s->cls_named)
		classes_broken(s, "%llu of %llu labeled records have no %s",
			       (unsigned long long)s->cls_unnamed,
			       (unsigned long long)(s->cls_unnamed + s->cls_named),
			       class_key[s->cls_kind >= 0 ? s->cls_kind : 0]);
	if (!s->cls_note[0] && !s->cls_named)
		classes_broken(s, "the records have no %s or %s", class_key[0],
			       class_key[1]);
	if (s->cls_note[0]) {
		free_names(s->classes, s->nclasses);
		s->classes = NULL;
		s->nclasses = 0;
	}
	free(s->pairs);
	free(s->ppool);
	s->pairs = NULL;
	s->ppool = NULL;
	s->npairs = s->pairs_cap = s->ppool_len = s->ppool_cap = 0;
}

/* ---- TFRecord --------------------------------------------------------- */

static int on_record(void *ctx, const bfs_tfrecord_entry *e)
{
	bfs_source *s = ctx;
	int big = e->length > SAMPLE_MAX;
	int err = add_sample(s, e->offset, big ? 0 : e->length, -1,
			     (e->status ? SAMPLE_BAD_LENGTH_CRC : 0) |
			     (big ? SAMPLE_TOO_BIG : 0));

	if (!err && s->want_classes && !big)
		err = skim_class(s, e);
	if (!err && (s->nsamples & 0xffff) == 0)
		progress(s); /* a big shard: say so within it too */
	return err;
}

/* A shard's index as stored by opts.index_put: a header, the scan error
 * (if the shard is cut or damaged), one packed entry per record, then its
 * class names (struct index_cls, the label key they were read with, then
 * each distinct (label, name) pair as i64 label, u8 kind, u16 length,
 * bytes).
 * 02: scan errors no longer quote a file's bytes; an 01 index may hold a
 * message that does, so it is scanned again.  03: the class names. */
#define INDEX_MAGIC "BFSIDX03"
struct index_hdr {
	char magic[8];
	uint64_t count;
	uint32_t errlen;
	uint32_t pad;
};
struct index_ent {
	uint64_t offset;
	uint32_t length;
	uint32_t flags;
};
struct index_cls {
	uint64_t unnamed;  /* labeled records without a name */
	uint32_t npairs;
	uint16_t keylen;   /* the label key; skimmed 0: not looked for */
	uint8_t skimmed;
	uint8_t pad;
};
#define PAIR_BYTES 11      /* i64 label, u8 kind, u16 length */

/* The class section of a stored index at p[0..n): its pairs become the
 * shard's (s->pairs).  1 when it fits this source (read with the same
 * label key, or no classes wanted), 0 when not, -ENOMEM. */
static int load_classes(bfs_source *s, const uint8_t *p, size_t n)
{
	struct index_cls c;

	pairs_reset(s);
	if (n < sizeof(c))
		return 0;
	memcpy(&c, p, sizeof(c));
	p += sizeof(c);
	n -= sizeof(c);
	if (!s->want_classes)
		return 1;
	if (!c.skimmed || c.keylen != strlen(s->label_key) || c.keylen > n ||
	    memcmp(p, s->label_key, c.keylen))
		return 0; /* scanned for another label key: scan again */
	p += c.keylen;
	n -= c.keylen;
	for (uint32_t i = 0; i < c.npairs; i++) {
		int64_t label;
		uint16_t len;
		int err;

		if (n < PAIR_BYTES)
			return 0;
		memcpy(&label, p, 8);
		memcpy(&len, p + 9, 2);
		if (p[8] > CLASS_TEXT || len == 0 || len > CLASS_MAX_NAME ||
		    n - PAIR_BYTES < len)
			return 0;
		if ((err = pair_add(s, label, p + PAIR_BYTES, len, p[8])))
			return err;
		p += PAIR_BYTES + len;
		n -= PAIR_BYTES + len;
	}
	s->shard_unnamed = c.unnamed;
	return n == 0;
}

/* Fill shard `name` from a stored index.  1 if it was usable, 0 if not
 * (then nothing was added), or -ENOMEM. */
static int load_index(bfs_source *s, const char *name, const struct stat *st)
{
	struct index_hdr h;
	void *blob = NULL;
	size_t len = 0, used;
	const struct index_ent *ent;
	const char *err;
	bfs_shard_stamp stamp;
	int rc = 0;

	stamp_of(st, &stamp);
	if (!s->o.index_get ||
	    s->o.index_get(s->o.index_ctx, s->dir, name, &stamp, &blob,
			   &len) != 0)
		return 0;
	if (len < sizeof(h))
		goto out;
	memcpy(&h, blob, sizeof(h));
	if (memcmp(h.magic, INDEX_MAGIC, 8) != 0 || h.errlen > BFS_ERRMSG_MAX ||
	    h.errlen > len - sizeof(h) ||
	    h.count > (len - sizeof(h) - h.errlen) / sizeof(*ent))
		goto out;
	used = sizeof(h) + h.errlen + h.count * sizeof(*ent);
	err = (const char *)blob + sizeof(h);
	ent = (const struct index_ent *)(err + h.errlen);
	/* the class section first: a mismatch adds nothing */
	if ((rc = load_classes(s, (const uint8_t *)blob + used, len - used)) <= 0)
		goto out;
	if ((rc = add_shard(s, name, st)))
		goto out;
	for (uint64_t i = 0; i < h.count; i++) {
		struct index_ent e;

		memcpy(&e, &ent[i], sizeof(e));
		if ((rc = add_sample(s, e.offset, e.length, -1, e.flags)))
			goto out;
	}
	if (h.errlen) {
		char msg[BFS_ERRMSG_MAX + 1];

		memcpy(msg, err, h.errlen);
		msg[h.errlen] = '\0';
		if ((rc = add_error(s, name, msg)))
			goto out;
	}
	s->index_hits++;
	rc = 1;
out:
	free(blob);
	return rc;
}

/* The class section of a stored index (struct index_cls, the label key,
 * the shard's pairs): its length, then written at p. */
static size_t classes_section_len(const bfs_source *s)
{
	size_t len = sizeof(struct index_cls) +
		     (s->want_classes ? strlen(s->label_key) : 0);

	for (size_t i = 0; i < s->npairs; i++)
		len += PAIR_BYTES + s->pairs[i].len;
	return len;
}

static uint8_t *classes_section_put(const bfs_source *s, uint8_t *p)
{
	size_t klen = s->want_classes ? strlen(s->label_key) : 0;
	struct index_cls c = { .unnamed = s->shard_unnamed,
			       .npairs = (uint32_t)s->npairs,
			       .keylen = (uint16_t)klen,
			       .skimmed = (uint8_t)s->want_classes };

	memcpy(p, &c, sizeof(c));
	p += sizeof(c);
	memcpy(p, s->label_key, klen);
	p += klen;
	for (size_t i = 0; i < s->npairs; i++) {
		const struct class_pair *q = &s->pairs[i];

		memcpy(p, &q->label, 8);
		p[8] = q->kind;
		memcpy(p + 9, &q->len, 2);
		memcpy(p + PAIR_BYTES, s->ppool + q->name, q->len);
		p += PAIR_BYTES + q->len;
	}
	return p;
}

/* Store the index of the shard just scanned (the last one added), with
 * its class pairs (s->pairs, deduplicated). */
static void store_index(bfs_source *s, const char *errmsg)
{
	const struct bfs_shard *sh = &s->shards[s->nshards - 1];
	size_t elen = errmsg && errmsg[0] ? strlen(errmsg) : 0;
	size_t len = sizeof(struct index_hdr) + elen +
		     sh->count * sizeof(struct index_ent) +
		     classes_section_len(s);
	struct index_hdr h = { .count = sh->count, .errlen = (uint32_t)elen };
	uint8_t *blob, *p;

	if (!s->o.index_put || strlen(s->label_key) > UINT16_MAX ||
	    !(blob = malloc(len)))
		return;
	memcpy(h.magic, INDEX_MAGIC, 8);
	memcpy(blob, &h, sizeof(h));
	if (elen)
		memcpy(blob + sizeof(h), errmsg, elen);
	p = blob + sizeof(h) + elen;
	for (uint64_t i = 0; i < sh->count; i++) {
		const struct bfs_sample *smp = &s->samples[sh->first + i];
		struct index_ent e = { smp->offset, smp->length, smp->flags };

		memcpy(p, &e, sizeof(e));
		p += sizeof(e);
	}
	classes_section_put(s, p);
	s->o.index_put(s->o.index_ctx, s->dir, sh->name, &sh->stamp, blob,
		       len);
	free(blob);
}

/* A shard whose scan found not one record: when it is compressed data
 * (a GZIP or ZLIB TFRecord, a .tar.gz), say what it likely is and what to
 * do, after what the scanner said ("...; it looks like gzip data"). */
static void advise_compressed(int fd, char *msg, size_t cap)
{
	uint8_t head[16];
	ssize_t n = pread(fd, head, sizeof(head), 0);
	const char *kind = n > 0 ? bfs_filekind(head, (size_t)n) : NULL;
	const char *advice = bfs_filekind_advice(kind);
	char tail[64];
	size_t len = strlen(msg), tl;

	if (!advice)
		return;
	snprintf(tail, sizeof(tail), "it looks like %s", kind);
	tl = strlen(tail);
	if (len >= tl && !strcmp(msg + len - tl, tail))
		snprintf(msg + len, cap - len, ": %s", advice);
	else
		snprintf(msg + len, cap - len, "%s%s: %s", len ? "; " : "", tail,
			 advice);
}

/* Scan one open shard (its bytes through r), adding its samples; 0 or an
 * error with msg. */
typedef int (*scan_fn)(bfs_source *s, const bfs_reader *r, uint64_t size,
		       char *msg);

static int scan_tfrecord(bfs_source *s, const bfs_reader *r, uint64_t size,
			 char *msg)
{
	return bfs_tfrecord_scan_reader(r, size, on_record, s, msg);
}

static int scan_tar(bfs_source *s, const bfs_reader *r, uint64_t size,
		    char *msg);

/* ---- gzip shards ------------------------------------------------------ */

/*
 * A gzip shard's stored index: a header, the scan error, the gzip index
 * (gzindex.h), then one entry per sample as the scan reported it: for
 * TFRecord {offset, length, flags} and then the class section (as in a
 * plain shard's index), for tar {offset, length, label, status, name,
 * message}, so that loading replays the scan's callbacks.
 * A tar index depends on where labels come from, which is kept in it
 * (`labels`) and must match.
 */
#define GZS_MAGIC "BFSGZS02"  /* 02: TFRecord class names */
struct gzs_hdr {
	char magic[8];
	uint32_t tar;       /* 1: tar entries */
	uint32_t errlen;
	uint64_t count;
	uint64_t gzlen;
	uint32_t labelslen;
	uint32_t pad;
};
struct gzs_tar_ent {
	uint64_t offset, length;
	int64_t label;
	int32_t status;
	uint32_t namelen, msglen, pad;
};

/* Where tar labels come from, as stored with a tar index. */
static void labels_of(const bfs_source *s, char *out, size_t cap)
{
	snprintf(out, cap, "%s:%s", !s->label_key[0] ? "none"
		 : s->label_key_given ? "json" : "cls,txt",
		 s->label_key_given ? s->label_key : "");
}

static const struct bad_sample *find_bad(const bfs_source *s, uint64_t i);

static void store_gz_index(bfs_source *s, const char *errmsg)
{
	const struct bfs_shard *sh = &s->shards[s->nshards - 1];
	int tar = s->format == BFS_FORMAT_TAR;
	size_t elen = errmsg && errmsg[0] ? strlen(errmsg) : 0, len, gzlen;
	struct gzs_hdr h = { .tar = (uint32_t)tar, .errlen = (uint32_t)elen,
			     .count = sh->count };
	char labels[BFS_ERRMSG_MAX];
	uint8_t *blob, *p;
	void *gzb;

	if (!s->o.index_put || strlen(s->label_key) > UINT16_MAX ||
	    bfs_gzindex_save(sh->gz, &gzb, &gzlen))
		return;
	labels_of(s, labels, sizeof(labels));
	h.labelslen = tar ? (uint32_t)strlen(labels) : 0;
	h.gzlen = gzlen;
	len = sizeof(h) + elen + h.labelslen + gzlen;
	for (uint64_t i = 0; i < sh->count; i++) {
		uint64_t k = sh->first + i;
		const struct bad_sample *b = tar ? find_bad(s, k) : NULL;

		len += tar ? sizeof(struct gzs_tar_ent) + strlen(s->pool + s->names[k]) +
			     (b ? strlen(b->msg) : 0)
			   : sizeof(struct index_ent);
	}
	if (!tar)
		len += classes_section_len(s);
	if (!(blob = malloc(len))) {
		free(gzb);
		return;
	}
	memcpy(h.magic, GZS_MAGIC, 8);
	memcpy(blob, &h, sizeof(h));
	p = blob + sizeof(h);
	memcpy(p, errmsg ? errmsg : "", elen);
	p += elen;
	memcpy(p, labels, h.labelslen);
	p += h.labelslen;
	memcpy(p, gzb, gzlen);
	p += gzlen;
	free(gzb);
	for (uint64_t i = 0; i < sh->count; i++) {
		uint64_t k = sh->first + i;
		const struct bfs_sample *smp = &s->samples[k];

		if (tar) {
			const struct bad_sample *b = find_bad(s, k);
			const char *name = s->pool + s->names[k];
			struct gzs_tar_ent e = { smp->offset, smp->length, smp->label,
						 b ? b->code : 0, (uint32_t)strlen(name),
						 b ? (uint32_t)strlen(b->msg) : 0, 0 };

			memcpy(p, &e, sizeof(e));
			p += sizeof(e);
			memcpy(p, name, e.namelen);
			p += e.namelen;
			if (b)
				memcpy(p, b->msg, e.msglen);
			p += e.msglen;
		} else {
			struct index_ent e = { smp->offset, smp->length, smp->flags };

			memcpy(p, &e, sizeof(e));
			p += sizeof(e);
		}
	}
	if (!tar)
		classes_section_put(s, p);
	s->o.index_put(s->o.index_ctx, s->dir, sh->name, &sh->stamp, blob, len);
	free(blob);
}

static int on_tar_sample(void *ctx, const bfs_tar_sample *t);

/* Fill gzip shard `name` from a stored index: 1 if it was usable, 0 if
 * not (nothing added), or -ENOMEM. */
static int load_gz_index(bfs_source *s, const char *name, const struct stat *st)
{
	int tar = s->format == BFS_FORMAT_TAR;
	char labels[BFS_ERRMSG_MAX], text[BFS_ERRMSG_MAX + 1];
	const uint8_t *p, *end;
	bfs_shard_stamp stamp;
	struct gzs_hdr h;
	bfs_gzindex *gz = NULL;
	void *blob = NULL;
	size_t len = 0;
	int rc = 0;

	stamp_of(st, &stamp);
	if (!s->o.index_get ||
	    s->o.index_get(s->o.index_ctx, s->dir, name, &stamp, &blob, &len) != 0)
		return 0;
	p = blob;
	end = p + len;
	if (len < sizeof(h))
		goto out;
	memcpy(&h, p, sizeof(h));
	p += sizeof(h);
	labels_of(s, labels, sizeof(labels));
	if (memcmp(h.magic, GZS_MAGIC, 8) || h.tar != (uint32_t)tar ||
	    h.errlen > BFS_ERRMSG_MAX || h.labelslen > BFS_ERRMSG_MAX ||
	    (size_t)(end - p) < (size_t)h.errlen + h.labelslen ||
	    h.gzlen > (size_t)(end - p) - h.errlen - h.labelslen ||
	    (tar && (h.labelslen != strlen(labels) ||
		     memcmp(p + h.errlen, labels, h.labelslen))))
		goto out;
	memcpy(text, p, h.errlen);
	text[h.errlen] = '\0';
	p += h.errlen + h.labelslen;
	if (bfs_gzindex_load(p, (size_t)h.gzlen, (uint64_t)st->st_size, &gz, NULL))
		goto out;
	if (s->max_ratio && bfs_gzindex_size(gz) > BFS_GZ_RATIO_FLOOR &&
	    bfs_gzindex_size(gz) / s->max_ratio > (uint64_t)st->st_size)
		goto out; /* past this mount's limit: indexing again refuses it */
	p += h.gzlen;
	/* the entries must fill the rest exactly, each checked before use */
	{
		const uint8_t *q = p;

		for (uint64_t i = 0; i < h.count; i++) {
			if (tar) {
				struct gzs_tar_ent e;

				if ((size_t)(end - q) < sizeof(e))
					goto out;
				memcpy(&e, q, sizeof(e));
				q += sizeof(e);
				if (e.namelen > (size_t)(end - q) ||
				    e.msglen > (size_t)(end - q) - e.namelen ||
				    e.msglen >= BFS_ERRMSG_MAX || e.namelen >= (1u << 20))
					goto out;
				q += e.namelen + e.msglen;
			} else {
				if ((size_t)(end - q) < sizeof(struct index_ent))
					goto out;
				q += sizeof(struct index_ent);
			}
		}
		/* a TFRecord index ends with its class section: a mismatch
		 * (another label key) adds nothing */
		if (tar ? q != end : (rc = load_classes(s, q, (size_t)(end - q))) <= 0)
			goto out;
		rc = 0;
	}
	if ((rc = add_shard(s, name, st)))
		goto out;
	s->shards[s->nshards - 1].gz = gz;
	gz = NULL;
	for (uint64_t i = 0; i < h.count; i++) {
		if (tar) {
			struct gzs_tar_ent e;
			bfs_tar_sample t = { 0 };
			char *nm, msg[BFS_ERRMSG_MAX];

			memcpy(&e, p, sizeof(e));
			p += sizeof(e);
			if (!(nm = strndup((const char *)p, e.namelen))) {
				rc = -ENOMEM;
				goto out;
			}
			p += e.namelen;
			memcpy(msg, p, e.msglen);
			msg[e.msglen] = '\0';
			p += e.msglen;
			t.offset = e.offset;
			t.length = e.length;
			t.label = e.label;
			t.name = nm;
			t.status = e.status;
			t.msg = msg;
			rc = on_tar_sample(s, &t);
			free(nm);
		} else {
			struct index_ent e;

			memcpy(&e, p, sizeof(e));
			p += sizeof(e);
			rc = add_sample(s, e.offset, e.length, -1, e.flags);
		}
		if (rc)
			goto out;
	}
	if (h.errlen && (rc = add_error(s, name, text)))
		goto out;
	s->index_hits++;
	rc = 1;
out:
	bfs_gzindex_free(gz);
	free(blob);
	return rc;
}

/* Index gzip shard files[i] open on fd: its restart points, then the
 * scan over its uncompressed bytes.  0 or -ENOMEM (problems are scan
 * errors of the shard). */
static int index_gz_shard(bfs_source *s, const char *name, int fd,
			  const struct stat *st, scan_fn scan)
{
	char msg[BFS_ERRMSG_MAX] = "", full[BFS_ERRMSG_MAX];
	bfs_gzcursor *cur = NULL;
	bfs_gz_reader_ctx rc = { 0 };
	bfs_reader r;
	struct bfs_shard *sh;
	bfs_gzindex *gz;
	int err;

	/* TFRecords carry CRCs of their own, so a gzip member whose CRC
	 * fails is still read: only the records it damaged fail */
	err = bfs_gzindex_build(fd, (uint64_t)st->st_size, 0,
				s->format == BFS_FORMAT_TFRECORD ? BFS_GZ_KEEP_BAD_CRC : 0,
				s->max_ratio, &gz, msg);
	if (err == -ENOMEM)
		return err;
	if ((err = add_shard(s, name, st))) {
		bfs_gzindex_free(gz);
		return err;
	}
	if (!gz) /* not gzip after all, or unreadable */
		return add_error(s, name, msg[0] ? msg : bfs_strerror(err)) ? -ENOMEM : 0;
	sh = &s->shards[s->nshards - 1];
	sh->gz = gz;
	if ((err = bfs_gzcursor_create(&cur)))
		return err;
	rc.cursor = cur;
	rc.idx = gz;
	rc.fd = fd;
	r = bfs_gz_reader(&rc);
	msg[0] = '\0';
	pairs_reset(s);
	s->scan_r = &r;
	err = scan(s, &r, bfs_gzindex_size(gz), msg);
	s->scan_r = NULL;
	pairs_dedupe(s);
	bfs_gzcursor_destroy(cur);
	if (err == -ENOMEM)
		return err;
	if (err && !msg[0])
		snprintf(msg, sizeof(msg), "%s", bfs_strerror(err));
	if (err) { /* its offsets are into the uncompressed data: say so */
		snprintf(full, sizeof(full), "in its gzip-compressed data: %s", msg);
		snprintf(msg, sizeof(msg), "%s", full);
	}
	if (!bfs_gzindex_complete(gz)) {
		/* the scan stopped at the end of the good part, or before */
		if (err)
			snprintf(full, sizeof(full), "%s; %s", msg, bfs_gzindex_damage(gz));
		else
			snprintf(full, sizeof(full), "%s", bfs_gzindex_damage(gz));
		return add_error(s, name, full) ? -ENOMEM : 0;
	}
	if (bfs_gzindex_damage(gz)[0]) { /* a member's CRC failed */
		if (err)
			snprintf(full, sizeof(full), "%s; %s", msg, bfs_gzindex_damage(gz));
		else
			snprintf(full, sizeof(full), "%s", bfs_gzindex_damage(gz));
		snprintf(msg, sizeof(msg), "%s", full);
		if (!err)
			err = BFS_E_CRC;
	}
	if (err && add_error(s, name, msg))
		return -ENOMEM;
	if (!err || err == BFS_E_TRUNCATED || err == BFS_E_CRC ||
	    err == BFS_E_CORRUPT)
		store_gz_index(s, err ? msg : NULL);
	return 0;
}

/* Index the shard files of one format.  A shard that cannot be opened,
 * or whose scan stops early, is listed in the scan errors with whatever
 * complete samples it had; with cache_index the stored index of an
 * unchanged shard replaces the scan, and a fresh scan is stored. */
static int index_shards(bfs_source *s, char **files, size_t n, scan_fn scan,
			int cache_index, char *errmsg)
{
	s->prog.total = n;
	for (size_t i = 0; i < n; i++, s->prog.done = i, progress(s)) {
		char path[PATH_MAX], msg[BFS_ERRMSG_MAX] = "";
		struct stat st;
		int fd, err;

		snprintf(path, sizeof(path), "%s/%s", s->dir, files[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) != 0) {
			snprintf(msg, sizeof(msg), "cannot open: %s",
				 strerror(errno));
			if (fd >= 0)
				close(fd);
			if (add_error(s, files[i], msg))
				return -ENOMEM;
			continue;
		}
		s->prog.bytes += (uint64_t)st.st_size;
		{
			uint8_t magic[3];

			if (pread(fd, magic, 3, 0) == 3 && bfs_gz_probe(magic, 3)) {
				/* gzip: indexes are kept for both formats,
				 * since building one reads the whole file */
				pairs_reset(s);
				err = load_gz_index(s, files[i], &st);
				if (err == 0)
					err = index_gz_shard(s, files[i], fd, &st, scan);
				else if (err > 0)
					err = 0;
				close(fd);
				if (err == -ENOMEM) {
					bfs_seterr(errmsg, "%s: out of memory", path);
					return err;
				}
				if ((err = classes_merge(s)))
					return err;
				continue;
			}
		}
		if (cache_index && (err = load_index(s, files[i], &st)) != 0) {
			close(fd);
			if (err < 0 || (err = classes_merge(s)))
				return err;
			continue; /* the stored index was used */
		}
		if ((err = add_shard(s, files[i], &st))) {
			close(fd);
			return err;
		}
		pairs_reset(s);
		{
			bfs_reader r = bfs_reader_fd(fd);

			s->scan_r = &r;
			err = scan(s, &r, (uint64_t)st.st_size, msg);
			s->scan_r = NULL;
		}
		if (err && err != -ENOMEM && s->shards[s->nshards - 1].count == 0)
			advise_compressed(fd, msg, sizeof(msg));
		close(fd);
		if (err == -ENOMEM) {
			bfs_seterr(errmsg, "%s: out of memory", path);
			return err;
		}
		if (err && !msg[0])
			snprintf(msg, sizeof(msg), "%s", bfs_strerror(err));
		if (err && add_error(s, files[i], msg))
			return -ENOMEM;
		pairs_dedupe(s);
		/* a read error is not the shard's content: do not store it */
		if (cache_index && (!err || err == BFS_E_TRUNCATED ||
				    err == BFS_E_CRC || err == BFS_E_CORRUPT))
			store_index(s, err ? msg : NULL);
		if ((err = classes_merge(s)))
			return err;
	}
	return 0;
}

/* ---- WebDataset tar -------------------------------------------------- */

static int pool_add(bfs_source *s, const char *str, uint32_t *off)
{
	size_t len = strlen(str) + 1;

	if (s->pool_len + len > UINT32_MAX)
		return -ENOMEM;
	if (s->pool_len + len > s->pool_cap) {
		size_t cap = s->pool_cap ? s->pool_cap * 2 : 1 << 16;
		char *n;

		while (cap < s->pool_len + len)
			cap *= 2;
		if (!(n = realloc(s->pool, cap)))
			return -ENOMEM;
		s->pool = n;
		s->pool_cap = cap;
	}
	memcpy(s->pool + s->pool_len, str, len);
	*off = (uint32_t)s->pool_len;
	s->pool_len += len;
	return 0;
}

static int on_tar_sample(void *ctx, const bfs_tar_sample *t)
{
	bfs_source *s = ctx;
	int unlabeled = !s->label_key[0] && t->status == BFS_E_NOKEY;
	int status = unlabeled ? 0 : t->status;
	int64_t label = unlabeled ? -1 : t->label;
	int big = t->length > SAMPLE_MAX;
	uint32_t name;
	int err;

	if (!status && (label < INT32_MIN || label > INT32_MAX))
		status = BFS_E_CORRUPT;
	if (big)
		status = BFS_E_CORRUPT;
	if (s->nsamples + 1 > s->samples_cap) {
		/* names grows with samples: keep the same capacity */
		uint32_t *n = realloc(s->names, (s->samples_cap ? s->samples_cap * 2
					       : 4096) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->names = n;
	}
	if ((err = pool_add(s, t->name ? t->name : "?", &name)))
		return err;
	s->names[s->nsamples] = name;
	if (status) {
		struct bad_sample *nb = realloc(s->bad, (s->nbad + 1) * sizeof(*nb));
		char msg[BFS_ERRMSG_MAX];

		if (!nb)
			return -ENOMEM;
		s->bad = nb;
		if (big)
			snprintf(msg, sizeof(msg), "member %s at offset %llu: its "
				 "%llu bytes are over %llu (4 GiB), the most one "
				 "sample may hold; the other members are kept",
				 t->name ? t->name : "?",
				 (unsigned long long)t->header_offset,
				 (unsigned long long)t->length,
				 (unsigned long long)SAMPLE_MAX);
		else if (status == BFS_E_CORRUPT && !(t->msg && t->msg[0]))
			snprintf(msg, sizeof(msg), "member %s: label %lld out of range",
				 t->name ? t->name : "?", (long long)label);
		else
			snprintf(msg, sizeof(msg), "%s", t->msg && t->msg[0]
				 ? t->msg : bfs_strerror(status));
		nb[s->nbad].sample = s->nsamples;
		nb[s->nbad].code = status;
		if (!(nb[s->nbad].msg = strdup(msg)))
			return -ENOMEM;
		s->nbad++;
	}
	if ((err = add_sample(s, t->offset, big ? 0 : t->length,
			      status ? -1 : (int32_t)label, 0)))
		return err;
	if ((s->nsamples & 0xffff) == 0)
		progress(s);
	return 0;
}

static int scan_tar(bfs_source *s, const bfs_reader *r, uint64_t size,
		    char *msg)
{
	bfs_tar_opts to = { .json_key = s->label_key_given ? s->label_key : NULL };

	return bfs_tar_scan_reader(r, size, &to, on_tar_sample, s, msg);
}

static const struct bad_sample *find_bad(const bfs_source *s, uint64_t i)
{
	size_t lo = 0, hi = s->nbad;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->bad[mid].sample < i)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nbad && s->bad[lo].sample == i ? &s->bad[lo] : NULL;
}

const char *bfs_source_member_name(const bfs_source *s, uint64_t i)
{
	if (s->format != BFS_FORMAT_TAR || i >= s->nsamples)
		return NULL;
	return s->pool + s->names[i];
}

/* ---- folders ---------------------------------------------------------- */

static int index_class_dir(bfs_source *s, const char *rel, int32_t label)
{
	char dir[PATH_MAX];
	char **files;
	size_t n;
	int err;

	snprintf(dir, sizeof(dir), "%s%s%s", s->dir, rel[0] ? "/" : "", rel);
	if ((err = list_dir(dir, 0, &files, &n, NULL)))
		return err == -ENOMEM ? err : 0;
	for (size_t i = 0; i < n && !err; i++) {
		char name[PATH_MAX], path[PATH_MAX];
		struct stat st;

		if (!is_image_name(files[i]))
			continue;
		snprintf(name, sizeof(name), "%s%s%s", rel, rel[0] ? "/" : "",
			 files[i]);
		snprintf(path, sizeof(path), "%s/%s", s->dir, name);
		if (stat(path, &st) != 0)
			continue;
		s->prog.bytes += (uint64_t)st.st_size;
		if (!(err = add_shard(s, name, &st)))
			err = add_sample(s, 0, (uint64_t)st.st_size, label, 0);
	}
	free_names(files, n);
	return err;
}

static int index_folder(bfs_source *s, char **dirs, size_t ndirs)
{
	int err = 0;

	s->prog.total = ndirs ? ndirs : 1;
	if (ndirs == 0) {
		/* a flat folder: nothing names a class, so every label is 0 */
		classes_broken(s, "a flat folder (images directly in it, no class subfolders): every "
			       "image has label 0 and there are no classes; for labels, put each "
			       "class's images in a subfolder of its own (SRC/CLASS/IMAGE)");
		err = index_class_dir(s, "", 0);
		s->prog.done = 1;
		return err;
	}
	s->classes = calloc(ndirs, sizeof(*s->classes));
	if (!s->classes)
		return -ENOMEM;
	for (size_t i = 0; i < ndirs && !err; i++) {
		if (!(s->classes[i] = strdup(dirs[i])))
			return -ENOMEM;
		s->nclasses++;
		err = index_class_dir(s, dirs[i], (int32_t)i);
		s->prog.done = i + 1;
		progress(s);
	}
	return err;
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
	if (!realpath(o->dir, real)) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", o->dir, strerror(errno));
		return err;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->o.index_get = o->index_get;
	s->o.index_put = o->index_put;
	s->o.index_ctx = o->index_ctx;
	s->o.progress = o->progress;
	s->o.progress_ctx = o->progress_ctx;
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
	if ((err = list_dir(real, 0, &files, &nfiles, errmsg)) ||
	    (err = list_dir(real, 1, &dirs, &ndirs, errmsg)))
		goto fail;

	shards = calloc(nfiles ? nfiles : 1, sizeof(*shards));
	tars = calloc(nfiles ? nfiles : 1, sizeof(*tars));
	if (!shards || !tars) {
		err = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < nfiles; i++) {
		char path[PATH_MAX];
		uint8_t head[BFS_TAR_BLOCK];
		size_t head_len;

		if (is_image_name(files[i])) {
			njpeg++;
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", real, files[i]);
		/* one read of the first block serves both probes */
		head_len = o->format == BFS_FORMAT_AUTO
			? read_head(path, head, sizeof(head)) : 0;
		if (o->format == BFS_FORMAT_TAR ||
		    (o->format != BFS_FORMAT_TFRECORD &&
		     (is_tar_name(files[i]) ||
		      (head_len == sizeof(head) && bfs_tar_probe(head, head_len)))))
			tars[ntars++] = files[i];
		else if (o->format == BFS_FORMAT_TFRECORD ||
			 is_tfrecord_name(files[i]) ||
			 looks_like_tfrecord(head, head_len))
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
		if ((err = index_shards(s, tars, ntars, scan_tar, 0, errmsg)))
			goto fail;
	} else if (s->format == BFS_FORMAT_TFRECORD) {
		s->want_classes = s->label_key[0] != '\0';
		if (!nshards) {
			err = BFS_E_EMPTY;
			bfs_seterr(errmsg, "%s: no TFRecord shards found", real);
			goto fail;
		}
		if ((err = index_shards(s, shards, nshards, scan_tfrecord, 1,
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
		if ((err = index_folder(s, ndirs ? dirs : NULL, ndirs))) {
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
	free_names(files, nfiles);
	free_names(dirs, ndirs);
	classes_finish(s);
	s->prog.finished = 1;
	progress(s);
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
	free_names(files, nfiles);
	free_names(dirs, ndirs);
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
		bfs_gzindex_free(s->shards[i].gz);
	}
	for (size_t i = 0; i < s->nerrs; i++) {
		free(s->errs[i].shard);
		free(s->errs[i].msg);
	}
	free_names(s->classes, s->nclasses);
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
	free(s->image_key);
	free(s->label_key);
	free(s);
}

/* ---- accessors -------------------------------------------------------- */

uint64_t bfs_source_count(const bfs_source *s) { return s->nsamples; }
size_t bfs_source_nindex_hits(const bfs_source *s) { return s->index_hits; }
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

const char *bfs_source_class_name(const bfs_source *s, size_t i)
{
	return i < s->nclasses ? s->classes[i] : NULL;
}

const char *bfs_source_classes_from(const bfs_source *s)
{
	if (s->format == BFS_FORMAT_FOLDER && s->nclasses)
		return "folder names";
	if (s->format == BFS_FORMAT_TFRECORD && s->nclasses && s->cls_kind >= 0)
		return class_key[s->cls_kind];
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
		const struct bad_sample *bad = find_bad(s, i);

		if (bad) {
			bfs_seterr(errmsg, "%s", bad->msg);
			return bad->code;
		}
	}
	smp = &s->samples[i];
	sh = &s->shards[smp->shard];
	snprintf(path, sizeof(path), "%s/%s", s->dir, sh->name);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		bfs_seterr(errmsg, "cannot open shard: %s", strerror(errno));
		return err;
	}
	err = fstat(fd, &st);
	if (err == 0)
		stamp_of(&st, &now);
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
	if ((err = bfs_tfrecord_check(buf->data, smp->length, errmsg)))
		return err;
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
