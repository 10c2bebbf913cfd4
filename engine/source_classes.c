/*
 * source_classes.c - the class names of TFRecord shards: each record
 * skimmed for its label and name while its shard is scanned, a shard's
 * distinct (label, name) pairs, their section of a stored shard index, and
 * classes[label] merged over the shards when the list can be trusted.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/formats/example.h"

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

const char *const bfs__src_class_key[] = { "image/class/synset",
					 "image/class/text" };

struct class_pair {
	int64_t label;
	uint32_t name;    /* offset into ppool */
	uint16_t len;
	uint8_t kind;     /* CLASS_* */
};

void bfs__src_classes_broken(bfs_source *s, const char *fmt, ...)
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
int bfs__src_skim_class(bfs_source *s, const bfs_tfrecord_entry *e)
{
	/* Example{features{"\x01": bytes_list[""]}}: appended to the skimmed
	 * entries (Example.features may repeat: the maps add up), it gives
	 * bfs_example_find an image to find, so that it reads the label of
	 * any record, named or not.  No wanted key is "\x01". */
	static const uint8_t probe[] = { 0x0a, 0x0b, 0x0a, 0x09, 0x0a, 0x01, 0x01,
					 0x12, 0x04, 0x0a, 0x02, 0x0a, 0x00 };
	const char *keys[] = { s->label_key, bfs__src_class_key[0], bfs__src_class_key[1], NULL };
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
		int err = bfs_example_find(out, out_len, bfs__src_class_key[kind], NULL,
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
void bfs__src_pairs_dedupe(bfs_source *s)
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
int bfs__src_classes_merge(bfs_source *s)
{
	s->cls_unnamed += s->shard_unnamed;
	for (size_t i = 0; i < s->npairs; i++) {
		const struct class_pair *p = &s->pairs[i];
		const char *name = s->ppool + p->name;

		s->cls_named++;
		if (p->label < 0)
			continue; /* not an index into a list */
		if (s->cls_kind >= 0 && s->cls_kind != p->kind) {
			bfs__src_classes_broken(s, "some records name their class by %s, others by %s",
				       bfs__src_class_key[s->cls_kind], bfs__src_class_key[p->kind]);
			continue;
		}
		s->cls_kind = p->kind;
		if (p->label >= CLASS_MAX_LABEL) {
			bfs__src_classes_broken(s, "a label is %lld: too large for a class list",
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
			bfs__src_classes_broken(s, "label %lld has two names in %s",
				       (long long)p->label, bfs__src_class_key[p->kind]);
		}
	}
	return 0;
}

/* Start a shard's pairs afresh. */
void bfs__src_pairs_reset(bfs_source *s)
{
	s->npairs = 0;
	s->ppool_len = 0;
	s->shard_unnamed = 0;
}

/* After the last shard: keep classes[] only if it can be trusted. */
void bfs__src_classes_finish(bfs_source *s)
{
	if (!s->want_classes)
		return;
	if (!s->cls_note[0] && s->cls_unnamed && s->cls_named)
		bfs__src_classes_broken(s, "%llu of %llu labeled records have no %s",
			       (unsigned long long)s->cls_unnamed,
			       (unsigned long long)(s->cls_unnamed + s->cls_named),
			       bfs__src_class_key[s->cls_kind >= 0 ? s->cls_kind : 0]);
	if (!s->cls_note[0] && !s->cls_named)
		bfs__src_classes_broken(s, "the records have no %s or %s", bfs__src_class_key[0],
			       bfs__src_class_key[1]);
	if (s->cls_note[0]) {
		bfs__src_free_names(s->classes, s->nclasses);
		s->classes = NULL;
		s->nclasses = 0;
	}
	free(s->pairs);
	free(s->ppool);
	s->pairs = NULL;
	s->ppool = NULL;
	s->npairs = s->pairs_cap = s->ppool_len = s->ppool_cap = 0;
}

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
int bfs__src_load_classes(bfs_source *s, const uint8_t *p, size_t n)
{
	struct index_cls c;

	bfs__src_pairs_reset(s);
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

/* The class section of a stored index (struct index_cls, the label key,
 * the shard's pairs): its length, then written at p. */
size_t bfs__src_classes_section_len(const bfs_source *s)
{
	size_t len = sizeof(struct index_cls) +
		     (s->want_classes ? strlen(s->label_key) : 0);

	for (size_t i = 0; i < s->npairs; i++)
		len += PAIR_BYTES + s->pairs[i].len;
	return len;
}

uint8_t *bfs__src_classes_section_put(const bfs_source *s, uint8_t *p)
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
