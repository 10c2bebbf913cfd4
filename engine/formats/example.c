/*
 * example.c - tf.train.Example decoder and builder, by hand (see
 * example.h).
 *
 * Decoding walks the protobuf wire format with one bounds-checked field
 * iterator (pb_next) that every level shares; offsets in error messages are
 * from the start of the serialized Example.  Merge rules, where real files
 * never exercise them, are kept simple and stated in find_in_feature().
 */
#include "engine/formats/example.h"

#include "engine/base/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_SGROUP = 3,
       WT_EGROUP = 4, WT_FIXED32 = 5 };

enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };

static const char *const kind_name[] = {
	"no value", "bytes_list", "float_list", "int64_list"
};

/* ---- wire format ------------------------------------------------------- */

/* A message body: buf[pos..end), offsets into the whole Example. */
typedef struct {
	const uint8_t *buf;
	size_t pos, end;
} pb;

typedef struct {
	uint32_t field;
	int wt;
	size_t at;      /* offset of the tag, for messages */
	uint64_t v;     /* varint value, or fixed32/64 bits */
	size_t off, len; /* WT_LEN payload */
} pbfield;

static int corrupt(char *errmsg, size_t at, const char *what)
{
	bfs_seterr(errmsg, "malformed protobuf at byte %zu: %s", at, what);
	return BFS_E_CORRUPT;
}

/* Returns 0, or -1 when the varint is truncated or longer than 64 bits. */
static int read_varint(const uint8_t *buf, size_t *pos, size_t end,
		       uint64_t *v)
{
	uint64_t x = 0;
	size_t p = *pos;

	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t byte;

		if (p >= end)
			return -1;
		byte = buf[p++];
		if (shift == 63 && byte > 1)
			return -1;
		x |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80)) {
			*pos = p;
			*v = x;
			return 0;
		}
	}
	return -1;
}

/* Next field of the message: 1 with *f filled, 0 at the end, or
 * BFS_E_CORRUPT. */
static int pb_next(pb *m, pbfield *f, char *errmsg)
{
	uint64_t tag, n;

	if (m->pos >= m->end)
		return 0;
	f->at = m->pos;
	if (read_varint(m->buf, &m->pos, m->end, &tag))
		return corrupt(errmsg, f->at, "truncated or overlong field tag");
	if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff)
		return corrupt(errmsg, f->at, "invalid field number");
	f->field = (uint32_t)(tag >> 3);
	f->wt = (int)(tag & 7);
	switch (f->wt) {
	case WT_VARINT:
		if (read_varint(m->buf, &m->pos, m->end, &f->v))
			return corrupt(errmsg, f->at, "truncated or overlong varint");
		break;
	case WT_FIXED64:
	case WT_FIXED32: {
		size_t w = f->wt == WT_FIXED64 ? 8 : 4;

		if (m->end - m->pos < w)
			return corrupt(errmsg, f->at, "truncated fixed-width value");
		f->v = 0;
		for (size_t i = w; i-- > 0;)
			f->v = f->v << 8 | m->buf[m->pos + i];
		m->pos += w;
		break;
	}
	case WT_LEN:
		if (read_varint(m->buf, &m->pos, m->end, &n))
			return corrupt(errmsg, f->at, "truncated or overlong length");
		if (n > m->end - m->pos)
			return corrupt(errmsg, f->at,
				       "length runs past the end of its message");
		f->off = m->pos;
		f->len = (size_t)n;
		m->pos += (size_t)n;
		break;
	case WT_SGROUP:
	case WT_EGROUP:
		return corrupt(errmsg, f->at, "groups are not supported");
	default:
		return corrupt(errmsg, f->at, "invalid wire type");
	}
	return 1;
}

static pb sub(const pb *m, const pbfield *f)
{
	pb s = { m->buf, f->off, f->off + f->len };

	return s;
}

/* ---- walking the feature map ------------------------------------------- */

/* Called for each map entry: key = buf[koff..koff+klen), value Feature =
 * buf[voff..voff+vlen) (vlen 0 when absent). */
typedef void (*entry_fn)(void *ctx, const uint8_t *buf, size_t koff,
			 size_t klen, size_t voff, size_t vlen);

static int walk_entry(const pb *e, entry_fn fn, void *ctx, char *errmsg)
{
	pb m = *e;
	pbfield f;
	size_t koff = e->pos, klen = 0, voff = e->pos, vlen = 0;
	int r;

	/* Singular fields: the last occurrence wins. */
	while ((r = pb_next(&m, &f, errmsg)) > 0) {
		if (f.field == 1 || f.field == 2) {
			if (f.wt != WT_LEN)
				return corrupt(errmsg, f.at, "map entry field is "
					       "not length-delimited");
			if (f.field == 1) {
				koff = f.off;
				klen = f.len;
			} else {
				voff = f.off;
				vlen = f.len;
			}
		}
	}
	if (r < 0)
		return r;
	fn(ctx, e->buf, koff, klen, voff, vlen);
	return 0;
}

static int walk(const uint8_t *buf, size_t len, entry_fn fn, void *ctx,
		char *errmsg)
{
	pb ex = { buf, 0, len };
	pbfield f, g;
	int r, s;

	/* Example.features may repeat: protobuf merges, i.e. the maps add up. */
	while ((r = pb_next(&ex, &f, errmsg)) > 0) {
		pb feats;

		if (f.field != 1)
			continue;
		if (f.wt != WT_LEN)
			return corrupt(errmsg, f.at, "Example.features is not "
				       "length-delimited");
		feats = sub(&ex, &f);
		while ((s = pb_next(&feats, &g, errmsg)) > 0) {
			pb entry;

			if (g.field != 1)
				continue;
			if (g.wt != WT_LEN)
				return corrupt(errmsg, g.at, "Features.feature is "
					       "not length-delimited");
			entry = sub(&feats, &g);
			if ((s = walk_entry(&entry, fn, ctx, errmsg)))
				return s;
		}
		if (s < 0)
			return s;
	}
	return r;
}

typedef struct {
	const char *key;
	size_t key_len;
	int found;
	size_t voff, vlen; /* the last entry with this key */
} wanted;

typedef struct {
	wanted image, label;
} find_ctx;

static void match(wanted *w, const uint8_t *buf, size_t koff, size_t klen,
		  size_t voff, size_t vlen)
{
	if (w->key && klen == w->key_len && memcmp(buf + koff, w->key, klen) == 0) {
		w->found = 1; /* map semantics: the last entry wins */
		w->voff = voff;
		w->vlen = vlen;
	}
}

static void on_find(void *ctx, const uint8_t *buf, size_t koff, size_t klen,
		    size_t voff, size_t vlen)
{
	find_ctx *c = ctx;

	match(&c->image, buf, koff, klen, voff, vlen);
	match(&c->label, buf, koff, klen, voff, vlen);
}

typedef struct {
	char text[BFS_ERRMSG_MAX];
	size_t n;
	int count, full;
} key_list;

static void on_list(void *ctx, const uint8_t *buf, size_t koff, size_t klen,
		    size_t voff, size_t vlen)
{
	key_list *k = ctx;
	const size_t room = 120; /* leave space for the rest of the message */

	if (k->full)
		return;
	if (k->n + klen + 8 > room) {
		const char *more = k->count ? ", ..." : "...";

		memcpy(k->text + k->n, more, strlen(more) + 1);
		k->n += strlen(more);
		k->full = 1;
		return;
	}
	if (k->count++)
		k->text[k->n++] = ',', k->text[k->n++] = ' ';
	k->text[k->n++] = '\'';
	for (size_t i = 0; i < klen; i++) {
		uint8_t ch = buf[koff + i];

		k->text[k->n++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	k->text[k->n++] = '\'';
	k->text[k->n] = '\0';
}

/*
 * In the Feature buf[voff..voff+vlen): which kind it holds (the last
 * oneof field set wins), how many values of that kind it holds, and the
 * first of them.  Lists of the same kind that follow each other are
 * merged, as protobuf does, so the values counted are those after the kind
 * last changed.  Returns 0 with *kind and *count set (and the first value
 * when *count > 0), or BFS_E_CORRUPT.  For a float_list *count is 0 or 1:
 * callers only need its kind.
 */
static int find_in_feature(const uint8_t *buf, size_t voff, size_t vlen,
			   int *kind, size_t *count, size_t *off, size_t *len,
			   uint64_t *v, char *errmsg)
{
	pb feat = { buf, voff, voff + vlen }, m;
	pbfield f, g;
	size_t run_start = voff;
	int r;

	*kind = KIND_NONE;
	*count = 0;
	while ((r = pb_next(&feat, &f, errmsg)) > 0) {
		if (f.field < 1 || f.field > 3)
			continue;
		if (f.wt != WT_LEN)
			return corrupt(errmsg, f.at, "Feature list is not "
				       "length-delimited");
		if ((int)f.field != *kind)
			run_start = f.at;
		*kind = (int)f.field;
	}
	if (r < 0 || *kind == KIND_NONE)
		return r;

	feat.pos = run_start;
	while ((r = pb_next(&feat, &f, errmsg)) > 0) {
		if ((int)f.field != *kind)
			continue;
		m = sub(&feat, &f);
		while ((r = pb_next(&m, &g, errmsg)) > 0) {
			if (g.field != 1)
				continue;
			if (*kind == KIND_BYTES) {
				if (g.wt != WT_LEN)
					return corrupt(errmsg, g.at, "BytesList value "
						       "is not length-delimited");
				if ((*count)++ == 0) {
					*off = g.off;
					*len = g.len;
				}
				continue;
			}
			if (*kind == KIND_INT64) {
				if (g.wt == WT_VARINT) {
					if ((*count)++ == 0)
						*v = g.v;
					continue;
				}
				if (g.wt != WT_LEN)
					return corrupt(errmsg, g.at, "Int64List value "
						       "has a bad wire type");
				/* Packed: every value counts. */
				size_t p = g.off, e = g.off + g.len;
				uint64_t x;

				while (p < e) {
					if (read_varint(buf, &p, e, &x))
						return corrupt(errmsg, p, "truncated "
							       "or overlong packed varint");
					if ((*count)++ == 0)
						*v = x;
				}
				continue;
			}
			*count = 1; /* KIND_FLOAT: callers only need the kind */
			return 0;
		}
		if (r < 0)
			return r;
	}
	return r;
}

int bfs_example_find(const uint8_t *buf, size_t len, const char *image_key,
		     const char *label_key, const uint8_t **image,
		     size_t *image_len, int64_t *label, char *errmsg)
{
	find_ctx c;
	size_t off = 0, vlen = 0, count;
	uint64_t v = 0;
	int r, kind;

	if (!buf && len)
		return -EINVAL;
	memset(&c, 0, sizeof(c));
	c.image.key = image_key;
	c.image.key_len = strlen(image_key);
	c.label.key = label_key;
	c.label.key_len = label_key ? strlen(label_key) : 0;
	if ((r = walk(buf, len, on_find, &c, errmsg)))
		return r;

	if (!c.image.found) {
		key_list k = { .n = 0 };

		(void)walk(buf, len, on_list, &k, NULL);
		bfs_seterr(errmsg, "no feature '%s'; keys present: %s", image_key,
			   k.count ? k.text : "(none)");
		return BFS_E_NOKEY;
	}
	r = find_in_feature(buf, c.image.voff, c.image.vlen, &kind, &count,
			    &off, &vlen, &v, errmsg);
	if (r < 0)
		return r;
	if (kind != KIND_BYTES && kind != KIND_NONE) {
		bfs_seterr(errmsg, "feature '%s' is a %s, expected a bytes_list",
			   image_key, kind_name[kind]);
		return BFS_E_FORMAT;
	}
	if (count == 0) {
		bfs_seterr(errmsg, "feature '%s' holds no bytes value", image_key);
		return BFS_E_NOKEY;
	}
	if (count > 1) {
		bfs_seterr(errmsg, "feature '%s' holds %zu bytes values, expected "
			   "1 (one image per record, as TensorFlow's "
			   "FixedLenFeature([], tf.string) requires)", image_key,
			   count);
		return BFS_E_FORMAT;
	}

	if (c.label.found) {
		size_t loff, llen;

		r = find_in_feature(buf, c.label.voff, c.label.vlen, &kind,
				    &count, &loff, &llen, &v, errmsg);
		if (r < 0)
			return r;
		if (kind != KIND_INT64 && kind != KIND_NONE) {
			bfs_seterr(errmsg, "feature '%s' is a %s, expected an "
				   "int64_list", label_key, kind_name[kind]);
			return BFS_E_FORMAT;
		}
		if (count > 1) {
			bfs_seterr(errmsg, "feature '%s' holds %zu int64 values, "
				   "expected 1 (one label per record, as "
				   "TensorFlow's FixedLenFeature([], tf.int64) "
				   "requires)", label_key, count);
			return BFS_E_FORMAT;
		}
		if (count == 1)
			*label = (int64_t)v;
	}
	*image = buf + off;
	*image_len = vlen;
	return 0;
}

/* ---- skimming a record read piecewise ----------------------------------- */

static size_t varint_len(uint64_t v);
static uint8_t *put_varint(uint8_t *p, uint64_t v);

/* The record seen through a window: head (what the caller already has)
 * and a SKIM_WINDOW-byte buffer refilled by read, so only the bytes of
 * field tags, lengths and wanted entries are ever read. */
#define SKIM_WINDOW 4096

typedef struct {
	const uint8_t *head;
	size_t head_len, total;
	bfs_example_read_fn read;   /* (ctx, off, buf, len) */
	void *ctx;
	uint8_t win[SKIM_WINDOW];
	size_t woff, wlen;
	char *errmsg;
} skimmer;

/* Point *p at bytes [off, off + n) of the record (n <= SKIM_WINDOW,
 * off + n <= total).  0 or read's error. */
static int skim_at(skimmer *k, size_t off, size_t n, const uint8_t **p)
{
	size_t want;
	int err;

	if (off + n <= k->head_len) {
		*p = k->head + off;
		return 0;
	}
	if (off >= k->woff && off + n <= k->woff + k->wlen) {
		*p = k->win + (off - k->woff);
		return 0;
	}
	want = k->total - off < SKIM_WINDOW ? k->total - off : SKIM_WINDOW;
	if ((err = k->read(k->ctx, off, k->win, want))) {
		bfs_seterr(k->errmsg, "cannot read the record at byte %zu: %s", off,
			   bfs_strerror(err));
		return err;
	}
	k->woff = off;
	k->wlen = want;
	*p = k->win;
	return 0;
}

/* Read a varint at *pos inside a message ending at end: 0, 1 when it is
 * truncated or overlong (as read_varint), or read's error (< 0). */
static int skim_varint(skimmer *k, size_t *pos, size_t end, uint64_t *v)
{
	size_t n = end - *pos < 10 ? end - *pos : 10, p = 0;
	const uint8_t *b;
	int err;

	if (n == 0)
		return 1;
	if ((err = skim_at(k, *pos, n, &b)))
		return err;
	if (read_varint(b, &p, n, v))
		return 1;
	*pos += p;
	return 0;
}

/* pb_next over the skimmer: the same checks, the same messages; a
 * length-delimited payload is only skipped. */
static int skim_next(skimmer *k, size_t *pos, size_t end, pbfield *f)
{
	uint64_t tag, n;
	int r;

	if (*pos >= end)
		return 0;
	f->at = *pos;
	if ((r = skim_varint(k, pos, end, &tag)))
		return r < 0 ? r : corrupt(k->errmsg, f->at,
					   "truncated or overlong field tag");
	if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff)
		return corrupt(k->errmsg, f->at, "invalid field number");
	f->field = (uint32_t)(tag >> 3);
	f->wt = (int)(tag & 7);
	switch (f->wt) {
	case WT_VARINT:
		if ((r = skim_varint(k, pos, end, &f->v)))
			return r < 0 ? r : corrupt(k->errmsg, f->at,
						   "truncated or overlong varint");
		break;
	case WT_FIXED64:
	case WT_FIXED32: {
		size_t w = f->wt == WT_FIXED64 ? 8 : 4;

		if (end - *pos < w)
			return corrupt(k->errmsg, f->at, "truncated fixed-width value");
		*pos += w;
		break;
	}
	case WT_LEN:
		if ((r = skim_varint(k, pos, end, &n)))
			return r < 0 ? r : corrupt(k->errmsg, f->at,
						   "truncated or overlong length");
		if (n > end - *pos)
			return corrupt(k->errmsg, f->at,
				       "length runs past the end of its message");
		f->off = *pos;
		f->len = (size_t)n;
		*pos += (size_t)n;
		break;
	case WT_SGROUP:
	case WT_EGROUP:
		return corrupt(k->errmsg, f->at, "groups are not supported");
	default:
		return corrupt(k->errmsg, f->at, "invalid wire type");
	}
	return 1;
}

/* Is the key at [off, off + len) one of keys? */
static int skim_wanted(skimmer *k, size_t off, size_t len,
		       const char *const *keys, int *err)
{
	const uint8_t *b;

	*err = 0;
	if (len > 255)
		return 0; /* longer than any key asked for */
	for (size_t i = 0; keys[i]; i++) {
		if (strlen(keys[i]) != len)
			continue;
		if ((*err = skim_at(k, off, len, &b)))
			return 0;
		if (!memcmp(b, keys[i], len))
			return 1;
	}
	return 0;
}

int bfs_example_skim(const uint8_t *head, size_t head_len, size_t total,
		     bfs_example_read_fn read, void *ctx,
		     const char *const *keys, uint8_t *out, size_t cap,
		     size_t *out_len, char *errmsg)
{
	skimmer ks, *k = &ks; /* 4 KiB on the stack: no allocation per record */
	size_t pos = 0, o = 6; /* out[0..6): the features tag and length */
	pbfield f, g, h;
	int r, err = 0;

	*out_len = 0;
	if (cap < 6 || (!head && head_len))
		return -EINVAL;
	k->head = head;
	k->head_len = head_len < total ? head_len : total;
	k->total = total;
	k->read = read;
	k->ctx = ctx;
	k->woff = k->wlen = 0;
	k->errmsg = errmsg;
	/* as walk(): Example.features may repeat, Features.feature entries */
	while ((r = skim_next(k, &pos, total, &f)) > 0) {
		size_t fpos, fend;

		if (f.field != 1)
			continue;
		if (f.wt != WT_LEN) {
			r = corrupt(errmsg, f.at, "Example.features is not "
				    "length-delimited");
			break;
		}
		fpos = f.off;
		fend = f.off + f.len;
		while ((r = skim_next(k, &fpos, fend, &g)) > 0) {
			size_t epos = g.off, eend = g.off + g.len;
			size_t koff = g.off, klen = 0;

			if (g.field != 1)
				continue;
			if (g.wt != WT_LEN) {
				r = corrupt(errmsg, g.at, "Features.feature is "
					    "not length-delimited");
				break;
			}
			/* as walk_entry(): the last key wins */
			while ((r = skim_next(k, &epos, eend, &h)) > 0) {
				if (h.field != 1 && h.field != 2)
					continue;
				if (h.wt != WT_LEN) {
					r = corrupt(errmsg, h.at, "map entry field "
						    "is not length-delimited");
					break;
				}
				if (h.field == 1) {
					koff = h.off;
					klen = h.len;
				}
			}
			if (r < 0)
				break;
			if (skim_wanted(k, koff, klen, keys, &err)) {
				const uint8_t *b;
				size_t vl = varint_len(g.len);

				if (g.len > SKIM_WINDOW || 1 + vl + g.len > cap - o) {
					bfs_seterr(errmsg, "feature map entry at byte "
						   "%zu is %zu bytes, more than %zu",
						   g.at, g.len, cap - o < SKIM_WINDOW
						   ? cap - o : (size_t)SKIM_WINDOW);
					r = BFS_E_TOOBIG;
					break;
				}
				if ((r = skim_at(k, g.off, g.len, &b)))
					break;
				out[o++] = 0x0a; /* Features.feature, LEN */
				o = (size_t)(put_varint(out + o, g.len) - out);
				memcpy(out + o, b, g.len);
				o += g.len;
			} else if (err) {
				r = err;
				break;
			}
		}
		if (r < 0)
			break;
	}
	if (r == 0) {
		/* the Example: its features tag and length, then the entries */
		size_t body = o - 6, vl = varint_len(body);

		out[0] = 0x0a;
		put_varint(out + 1, body);
		memmove(out + 1 + vl, out + 6, body);
		*out_len = 1 + vl + body;
	}
	return r;
}

/* ---- builder ----------------------------------------------------------- */

/* The Example's own tag and length go in front of the entries at finish,
 * in the HEAD bytes reserved for them. */
#define HEAD 11

struct bfs_example_builder {
	uint8_t *buf; /* buf[HEAD..len) = the encoded map entries */
	size_t len, cap;
	size_t start; /* set by finish: the Example is buf[start..len) */
};

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

int bfs_example_builder_create(bfs_example_builder **out)
{
	bfs_example_builder *b = calloc(1, sizeof(*b));

	*out = NULL;
	if (!b)
		return -ENOMEM;
	b->cap = 4096;
	b->buf = malloc(b->cap);
	if (!b->buf) {
		free(b);
		return -ENOMEM;
	}
	b->len = HEAD;
	*out = b;
	return 0;
}

void bfs_example_builder_destroy(bfs_example_builder *b)
{
	if (!b)
		return;
	free(b->buf);
	free(b);
}

void bfs_example_builder_reset(bfs_example_builder *b)
{
	b->len = HEAD;
}

static int reserve(bfs_example_builder *b, size_t extra)
{
	size_t ncap;
	uint8_t *n;

	if (extra <= b->cap - b->len)
		return 0;
	if (extra > SIZE_MAX / 2 - b->len)
		return -ENOMEM;
	ncap = b->cap * 2;
	while (ncap - b->len < extra)
		ncap *= 2;
	n = realloc(b->buf, ncap);
	if (!n)
		return -ENOMEM;
	b->buf = n;
	b->cap = ncap;
	return 0;
}

/*
 * Append one map entry whose Feature holds a list of kind `kind` with
 * list_len bytes of body; returns where the caller writes that body (the
 * caller has reserved exactly enough), or NULL on -ENOMEM.
 */
static uint8_t *begin_entry(bfs_example_builder *b, const char *key,
			    int kind, size_t list_len)
{
	size_t klen = strlen(key);
	size_t flen = 1 + varint_len(list_len) + list_len; /* Feature */
	size_t elen = 1 + varint_len(klen) + klen + 1 + varint_len(flen) + flen;
	uint8_t *p;

	if (list_len > SIZE_MAX / 4 || klen > SIZE_MAX / 4 ||
	    reserve(b, 1 + varint_len(elen) + elen))
		return NULL;
	p = b->buf + b->len;
	*p++ = 0x0a; /* Features.feature (map entry) */
	p = put_varint(p, elen);
	*p++ = 0x0a; /* entry.key */
	p = put_varint(p, klen);
	memcpy(p, key, klen);
	p += klen;
	*p++ = 0x12; /* entry.value */
	p = put_varint(p, flen);
	*p++ = (uint8_t)(kind << 3 | WT_LEN); /* Feature.kind */
	p = put_varint(p, list_len);
	b->len = (size_t)(p - b->buf) + list_len;
	return p;
}

int bfs_example_builder_add_bytes(bfs_example_builder *b, const char *key,
				  const void *data, size_t len)
{
	return bfs_example_builder_add_bytes_list(b, key, &data, &len, 1);
}

int bfs_example_builder_add_bytes_list(bfs_example_builder *b,
				       const char *key,
				       const void *const *data,
				       const size_t *len, size_t n)
{
	size_t list_len = 0;
	uint8_t *p;

	for (size_t i = 0; i < n; i++) {
		if (len[i] > SIZE_MAX / 4 || list_len > SIZE_MAX / 4)
			return -ENOMEM;
		list_len += 1 + varint_len(len[i]) + len[i];
	}
	p = begin_entry(b, key, KIND_BYTES, list_len);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		*p++ = 0x0a; /* BytesList.value */
		p = put_varint(p, len[i]);
		if (len[i])
			memcpy(p, data[i], len[i]);
		p += len[i];
	}
	return 0;
}

int bfs_example_builder_add_int64s(bfs_example_builder *b, const char *key,
				   const int64_t *v, size_t n, int packed)
{
	size_t body = 0, list_len;
	uint8_t *p;

	for (size_t i = 0; i < n; i++)
		body += varint_len((uint64_t)v[i]) + (packed ? 0 : 1);
	list_len = packed && n ? 1 + varint_len(body) + body : body;
	p = begin_entry(b, key, KIND_INT64, list_len);
	if (!p)
		return -ENOMEM;
	if (packed && n) {
		*p++ = 0x0a; /* Int64List.value, packed */
		p = put_varint(p, body);
	}
	for (size_t i = 0; i < n; i++) {
		if (!packed)
			*p++ = 0x08; /* Int64List.value, one varint */
		p = put_varint(p, (uint64_t)v[i]);
	}
	return 0;
}

int bfs_example_builder_add_int64(bfs_example_builder *b, const char *key,
				  int64_t v)
{
	return bfs_example_builder_add_int64s(b, key, &v, 1, 1);
}

int bfs_example_builder_add_float(bfs_example_builder *b, const char *key,
				  float v)
{
	uint8_t *p = begin_entry(b, key, KIND_FLOAT, 6);
	uint32_t bits;

	if (!p)
		return -ENOMEM;
	memcpy(&bits, &v, 4);
	*p++ = 0x0a; /* FloatList.value, packed */
	*p++ = 4;
	for (int i = 0; i < 4; i++, bits >>= 8)
		*p++ = (uint8_t)bits;
	return 0;
}

int bfs_example_builder_finish(bfs_example_builder *b, const uint8_t **data,
			       size_t *len)
{
	size_t body = b->len - HEAD;
	uint8_t *p;

	b->start = HEAD - 1 - varint_len(body);
	p = b->buf + b->start;
	*p++ = 0x0a; /* Example.features */
	put_varint(p, body);
	*data = b->buf + b->start;
	*len = b->len - b->start;
	return 0;
}
