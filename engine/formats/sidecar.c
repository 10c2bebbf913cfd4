/*
 * sidecar.c - the sidecar index file (sidecar.h): written from the shards'
 * identities and index blobs, and checked, then looked up in, when read.
 * The byte layout is docs/SIDECAR_INDEX.md's; the offsets below are its.
 */
#include "engine/formats/sidecar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "engine/base/crc32c.h"
#include "engine/base/error.h"

#define MAGIC "BFSSIDEC"
#define HDR_LEN 64u
#define ENT_LEN 64u      /* an entry's fixed part; its name and ETag follow */
#define DEFLATE_MAX 1032u /* the most deflate can expand data by */

enum { TAG_LABEL_KEY = 1, TAG_SOURCE = 2, TAG_WRITER = 3, NTAGS = 4 };
enum { ENC_RAW = 0, ENC_ZLIB = 1 };

/* ---- little-endian fields --------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- names ------------------------------------------------------------- */

/* A name the file may hold: 1..BFS_SIDECAR_NAME_MAX bytes, no NUL, not
 * absolute, no "." or ".." component (it is joined to a directory). */
static int name_ok(const char *s, size_t n)
{
	if (n == 0 || n > BFS_SIDECAR_NAME_MAX || s[0] == '/' || memchr(s, '\0', n))
		return 0;
	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && s[j] != '/')
			j++;
		if ((j - i == 1 && s[i] == '.') ||
		    (j - i == 2 && s[i] == '.' && s[i + 1] == '.'))
			return 0;
		i = j + 1;
	}
	return 1;
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);

	return c ? c : an < bn ? -1 : an > bn;
}

/* An ETag that can prove an object unchanged: not empty, not weak. */
static int etag_ok(const char *e, size_t n)
{
	return n > 0 && n <= BFS_SIDECAR_ETAG_MAX && !memchr(e, '\0', n) &&
	       !(n >= 2 && e[0] == 'W' && e[1] == '/');
}

/* ---- writing ----------------------------------------------------------- */

struct wentry {
	char *name;
	size_t name_len;
	int kind;
	char etag[BFS_SIDECAR_ETAG_MAX + 1];
	uint64_t size, ino;
	int64_t mtime_ns, ctime_ns;
	uint8_t *blob;         /* as stored */
	size_t blob_len;
	uint32_t raw_len, crc;
	int enc;
	size_t seq;            /* the order of adding: the last of a name wins */
};

struct bfs_sidecar_writer {
	struct wentry *v;
	size_t n, cap;
};

int bfs_sidecar_writer_create(bfs_sidecar_writer **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void bfs_sidecar_writer_destroy(bfs_sidecar_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++) {
		free(w->v[i].name);
		free(w->v[i].blob);
	}
	free(w->v);
	free(w);
}

size_t bfs_sidecar_writer_count(const bfs_sidecar_writer *w)
{
	return w->n;
}

int bfs_sidecar_writer_add(bfs_sidecar_writer *w, const char *name,
			   const bfs_sidecar_id *id, const void *blob,
			   size_t len)
{
	struct wentry e = { 0 };
	size_t nl = name ? strlen(name) : 0;
	uLongf zl;

	if (!name || !name_ok(name, nl) || !id || !blob || len == 0 ||
	    len > BFS_SIDECAR_BLOB_MAX || w->n >= BFS_SIDECAR_ENTRIES_MAX)
		return -EINVAL;
	if (id->kind == BFS_SIDECAR_ID_ETAG) {
		if (!id->etag || !etag_ok(id->etag, strlen(id->etag)))
			return -EINVAL;
		snprintf(e.etag, sizeof(e.etag), "%s", id->etag);
	} else if (id->kind == BFS_SIDECAR_ID_STAMP) {
		e.mtime_ns = id->mtime_ns;
		e.ino = id->ino;
		e.ctime_ns = id->ctime_ns;
	} else {
		return -EINVAL;
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct wentry *v = realloc(w->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->v = v;
		w->cap = cap;
	}
	e.kind = id->kind;
	e.seq = w->n;
	e.size = id->size;
	e.name_len = nl;
	e.raw_len = (uint32_t)len;
	if (!(e.name = strdup(name)))
		return -ENOMEM;
	/* deflated when that is smaller: offsets and names shrink well */
	zl = compressBound((uLong)len);
	if ((e.blob = malloc(zl)) &&
	    compress2(e.blob, &zl, blob, (uLong)len, Z_DEFAULT_COMPRESSION) == Z_OK &&
	    zl < len) {
		uint8_t *fit = realloc(e.blob, zl);

		e.blob = fit ? fit : e.blob;
		e.blob_len = zl;
		e.enc = ENC_ZLIB;
	} else {
		free(e.blob);
		if (!(e.blob = malloc(len))) {
			free(e.name);
			return -ENOMEM;
		}
		memcpy(e.blob, blob, len);
		e.blob_len = len;
		e.enc = ENC_RAW;
	}
	e.crc = bfs_crc32c(0, e.blob, e.blob_len);
	w->v[w->n++] = e;
	return 0;
}

static int cmp_wentry(const void *a, const void *b)
{
	const struct wentry *x = a, *y = b;
	int c = cmp_bytes(x->name, x->name_len, y->name, y->name_len);

	return c ? c : x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Append one string field (tag, length, bytes); returns its bytes. */
static size_t put_str(uint8_t *p, int tag, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n)
		return 0;
	if (p) {
		put16(p, (uint16_t)tag);
		put16(p + 2, (uint16_t)n);
		memcpy(p + 4, s, n);
	}
	return 4 + n;
}

int bfs_sidecar_writer_finish(bfs_sidecar_writer *w,
			      const bfs_sidecar_info *info, void **out,
			      size_t *len)
{
	const char *strs[NTAGS] = { NULL, info->label_key, info->source, info->writer };
	uint64_t str_len = 0, dir_len = 0, data_len = 0, total;
	uint8_t *buf, *p;

	*out = NULL;
	*len = 0;
	if (info->format != BFS_SIDECAR_TFRECORD && info->format != BFS_SIDECAR_TAR)
		return -EINVAL;
	for (int t = 1; t < NTAGS; t++) {
		if (strs[t] && strlen(strs[t]) > UINT16_MAX)
			return -EINVAL;
		str_len += put_str(NULL, t, strs[t]);
	}
	if (str_len > UINT32_MAX)
		return -EINVAL;
	/* sorted by name, a name's entries in the order added: the last
	 * added replaces the others */
	if (w->n)
		qsort(w->v, w->n, sizeof(*w->v), cmp_wentry);
	{
		size_t o = 0;

		for (size_t i = 0; i < w->n; i++) {
			if (i + 1 < w->n && !cmp_bytes(w->v[i].name, w->v[i].name_len,
						      w->v[i + 1].name, w->v[i + 1].name_len)) {
				free(w->v[i].name);
				free(w->v[i].blob);
				continue;
			}
			w->v[o] = w->v[i];
			w->v[o].seq = o;
			o++;
		}
		w->n = o;
	}
	for (size_t i = 0; i < w->n; i++) {
		dir_len += ENT_LEN + w->v[i].name_len + strlen(w->v[i].etag);
		data_len += w->v[i].blob_len;
	}
	total = HDR_LEN + str_len + dir_len + data_len;
	if (total > SIZE_MAX || !(buf = calloc(1, (size_t)total)))
		return -ENOMEM;
	p = buf + HDR_LEN;
	for (int t = 1; t < NTAGS; t++)
		p += put_str(p, t, strs[t]);
	{
		uint64_t off = 0;

		for (size_t i = 0; i < w->n; i++) {
			const struct wentry *e = &w->v[i];
			size_t el = strlen(e->etag);

			put64(p, e->size);
			put64(p + 8, (uint64_t)e->mtime_ns);
			put64(p + 16, e->ino);
			put64(p + 24, (uint64_t)e->ctime_ns);
			put64(p + 32, off);
			put64(p + 40, e->blob_len);
			put32(p + 48, e->raw_len);
			put32(p + 52, e->crc);
			put16(p + 56, (uint16_t)e->name_len);
			p[58] = (uint8_t)e->kind;
			p[59] = (uint8_t)el;
			p[60] = (uint8_t)e->enc;
			memcpy(p + ENT_LEN, e->name, e->name_len);
			memcpy(p + ENT_LEN + e->name_len, e->etag, el);
			p += ENT_LEN + e->name_len + el;
			off += e->blob_len;
		}
	}
	for (size_t i = 0; i < w->n; i++) {
		memcpy(p, w->v[i].blob, w->v[i].blob_len);
		p += w->v[i].blob_len;
	}
	memcpy(buf, MAGIC, 8);
	put32(buf + 8, BFS_SIDECAR_VERSION);
	put32(buf + 12, HDR_LEN);
	put32(buf + 16, 0);
	put32(buf + 20, info->format);
	put32(buf + 24, (uint32_t)w->n);
	put32(buf + 28, (uint32_t)str_len);
	put64(buf + 32, dir_len);
	put64(buf + 40, data_len);
	put64(buf + 48, (uint64_t)info->created_ns);
	put32(buf + 56, bfs_crc32c(0, buf + HDR_LEN, (size_t)(str_len + dir_len)));
	put32(buf + 60, bfs_crc32c(0, buf, 60));
	*out = buf;
	*len = (size_t)total;
	return 0;
}

/* ---- reading ----------------------------------------------------------- */

struct rentry {
	const char *name;      /* NUL-terminated, in sc->names */
	size_t name_len;
	const char *etag;      /* NUL-terminated, in sc->names after the name */
	const uint8_t *ent;    /* its fixed part in the data */
	const uint8_t *blob;   /* its stored bytes in the data */
};

struct bfs_sidecar {
	const uint8_t *data;
	size_t len;
	uint32_t format;
	int64_t created_ns;
	char *strs[NTAGS];     /* NUL-terminated copies; NULL when absent */
	struct rentry *v;
	size_t n;
	char *names;
};

void bfs_sidecar_close(bfs_sidecar *sc)
{
	if (!sc)
		return;
	for (int t = 0; t < NTAGS; t++)
		free(sc->strs[t]);
	free(sc->v);
	free(sc->names);
	free(sc);
}

/* The string fields at p[0..n): each known tag at most once, each field
 * inside the area, the fields tiling it exactly. */
static int read_strings(bfs_sidecar *sc, const uint8_t *p, size_t n,
			char *errmsg)
{
	while (n) {
		uint16_t tag, l;

		if (n < 4 || (l = get16(p + 2)) > n - 4) {
			bfs_seterr(errmsg, "sidecar index: a string field runs past its area");
			return BFS_E_CORRUPT;
		}
		tag = get16(p);
		if (tag > 0 && tag < NTAGS) { /* others: a later version's, passed over */
			if (sc->strs[tag] || memchr(p + 4, '\0', l)) {
				bfs_seterr(errmsg, "sidecar index: string field %u repeated or holding a NUL",
					   (unsigned)tag);
				return BFS_E_CORRUPT;
			}
			if (!(sc->strs[tag] = strndup((const char *)p + 4, l)))
				return -ENOMEM;
		}
		p += 4 + l;
		n -= 4 + l;
	}
	return 0;
}

/* The directory at p[0..n) with its nent entries, blobs in the area at
 * data[0..data_len).  Every field checked; see docs/SIDECAR_INDEX.md. */
static int read_directory(bfs_sidecar *sc, const uint8_t *p, size_t n,
			  uint32_t nent, const uint8_t *data, uint64_t data_len,
			  char *errmsg)
{
	uint64_t off = 0;
	size_t names_len = 0, k;
	const uint8_t *q = p;

	/* every entry takes at least ENT_LEN + 1 bytes of the directory */
	if (nent > BFS_SIDECAR_ENTRIES_MAX || (uint64_t)nent * (ENT_LEN + 1) > n) {
		bfs_seterr(errmsg, "sidecar index: %u entries cannot fit its directory",
			   (unsigned)nent);
		return BFS_E_CORRUPT;
	}
	if (nent && !(sc->v = calloc(nent, sizeof(*sc->v))))
		return -ENOMEM;
	for (k = 0; k < nent; k++) {
		size_t left = n - (size_t)(q - p), nl, el;
		uint64_t blen;
		uint32_t raw;
		const char *name;
		int kind, enc;

		if (left < ENT_LEN)
			goto bad_len;
		nl = get16(q + 56);
		kind = q[58];
		el = q[59];
		enc = q[60];
		blen = get64(q + 40);
		raw = get32(q + 48);
		if (left - ENT_LEN < nl + el)
			goto bad_len;
		name = (const char *)q + ENT_LEN;
		if (!name_ok(name, nl) || q[61] || q[62] || q[63] ||
		    (kind != BFS_SIDECAR_ID_ETAG && kind != BFS_SIDECAR_ID_STAMP) ||
		    (kind == BFS_SIDECAR_ID_ETAG ? !etag_ok(name + nl, el) : el != 0) ||
		    (kind == BFS_SIDECAR_ID_ETAG && (get64(q + 8) || get64(q + 16) || get64(q + 24))) ||
		    (enc != ENC_RAW && enc != ENC_ZLIB) || raw == 0 ||
		    raw > BFS_SIDECAR_BLOB_MAX || blen == 0 ||
		    (enc == ENC_RAW ? blen != raw : raw / DEFLATE_MAX > blen)) {
			bfs_seterr(errmsg, "sidecar index: entry %zu has a field that cannot be", k);
			return BFS_E_CORRUPT;
		}
		if (get64(q + 32) != off || blen > data_len - off) {
			bfs_seterr(errmsg, "sidecar index: entry %zu's blob is not where the one "
				   "before it ends, or runs past the file", k);
			return BFS_E_CORRUPT;
		}
		if (k && cmp_bytes(sc->v[k - 1].name, sc->v[k - 1].name_len, name, nl) >= 0) {
			bfs_seterr(errmsg, "sidecar index: entry %zu's name is not after the one "
				   "before it (names sorted bytewise, each once)", k);
			return BFS_E_CORRUPT;
		}
		sc->v[k].name = name; /* for now: replaced by a NUL-terminated copy */
		sc->v[k].name_len = nl;
		sc->v[k].ent = q;
		sc->v[k].blob = data + off;
		off += blen;
		names_len += nl + 1 + el + 1;
		q += ENT_LEN + nl + el;
	}
	if ((size_t)(q - p) != n || off != data_len) {
		bfs_seterr(errmsg, "sidecar index: the directory or the blobs do not fill "
			   "their areas exactly");
		return BFS_E_CORRUPT;
	}
	sc->n = nent;
	if (!(sc->names = malloc(names_len ? names_len : 1)))
		return -ENOMEM;
	for (size_t i = 0, at = 0; i < sc->n; i++) {
		struct rentry *e = &sc->v[i];
		size_t el = e->ent[59];

		memcpy(sc->names + at, e->name, e->name_len + el);
		sc->names[at + e->name_len + el] = '\0';
		memmove(sc->names + at + e->name_len + 1, sc->names + at + e->name_len, el + 1);
		sc->names[at + e->name_len] = '\0';
		e->name = sc->names + at;
		e->etag = e->name + e->name_len + 1;
		at += e->name_len + 1 + el + 1;
	}
	return 0;
bad_len:
	bfs_seterr(errmsg, "sidecar index: entry %zu runs past the directory", k);
	return BFS_E_CORRUPT;
}

int bfs_sidecar_open(const void *data, size_t len, bfs_sidecar **out,
		     char *errmsg)
{
	const uint8_t *d = data;
	uint64_t str_len, dir_len, data_len;
	uint32_t version, nent;
	bfs_sidecar *sc;
	int err;

	*out = NULL;
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	bfs_seterr(errmsg, "sidecar index: its blobs are little-endian and this host is not");
	return -ENOTSUP;
#endif
	if (!d || len < HDR_LEN || memcmp(d, MAGIC, 8)) {
		bfs_seterr(errmsg, "not a batchfs sidecar index (no %s magic)", MAGIC);
		return BFS_E_FORMAT;
	}
	if (get32(d + 60) != bfs_crc32c(0, d, 60)) {
		bfs_seterr(errmsg, "sidecar index: its header's CRC32C fails");
		return BFS_E_CRC;
	}
	version = get32(d + 8);
	if (version != BFS_SIDECAR_VERSION || get32(d + 12) != HDR_LEN || get32(d + 16)) {
		bfs_seterr(errmsg, "sidecar index: version %u (flags %#x): this batchfs "
			   "reads version %d; rerun batchfs index with this one",
			   (unsigned)version, (unsigned)get32(d + 16), BFS_SIDECAR_VERSION);
		return BFS_E_FORMAT;
	}
	nent = get32(d + 24);
	str_len = get32(d + 28);
	dir_len = get64(d + 32);
	data_len = get64(d + 40);
	if (dir_len > len || data_len > len ||
	    HDR_LEN + str_len + dir_len + data_len != len) {
		bfs_seterr(errmsg, "sidecar index: its areas add up to another length than "
			   "the file's %zu bytes (cut short, or more after it)", len);
		return BFS_E_CORRUPT;
	}
	if (get32(d + 20) != BFS_SIDECAR_TFRECORD && get32(d + 20) != BFS_SIDECAR_TAR) {
		bfs_seterr(errmsg, "sidecar index: format %u is none this batchfs knows",
			   (unsigned)get32(d + 20));
		return BFS_E_FORMAT;
	}
	if (get32(d + 56) != bfs_crc32c(0, d + HDR_LEN, (size_t)(str_len + dir_len))) {
		bfs_seterr(errmsg, "sidecar index: its directory's CRC32C fails");
		return BFS_E_CRC;
	}
	if (!(sc = calloc(1, sizeof(*sc))))
		return -ENOMEM;
	sc->data = d;
	sc->len = len;
	sc->format = get32(d + 20);
	sc->created_ns = (int64_t)get64(d + 48);
	if ((err = read_strings(sc, d + HDR_LEN, (size_t)str_len, errmsg)) ||
	    (err = read_directory(sc, d + HDR_LEN + str_len, (size_t)dir_len, nent,
				  d + HDR_LEN + str_len + dir_len, data_len, errmsg))) {
		bfs_sidecar_close(sc);
		return err;
	}
	*out = sc;
	return 0;
}

void bfs_sidecar_get_info(const bfs_sidecar *sc, bfs_sidecar_info *out)
{
	out->format = sc->format;
	out->label_key = sc->strs[TAG_LABEL_KEY] ? sc->strs[TAG_LABEL_KEY] : "";
	out->source = sc->strs[TAG_SOURCE] ? sc->strs[TAG_SOURCE] : "";
	out->writer = sc->strs[TAG_WRITER] ? sc->strs[TAG_WRITER] : "";
	out->created_ns = sc->created_ns;
}

size_t bfs_sidecar_count(const bfs_sidecar *sc)
{
	return sc->n;
}

/* Entry e's identity (etag points into sc). */
static void id_of(const struct rentry *e, bfs_sidecar_id *id)
{
	const uint8_t *q = e->ent;

	memset(id, 0, sizeof(*id));
	id->kind = q[58];
	id->size = get64(q);
	id->mtime_ns = (int64_t)get64(q + 8);
	id->ino = get64(q + 16);
	id->ctime_ns = (int64_t)get64(q + 24);
	id->etag = e->etag;
}

int bfs_sidecar_entry(const bfs_sidecar *sc, size_t i, const char **name,
		      bfs_sidecar_id *id)
{
	if (i >= sc->n)
		return -EINVAL;
	*name = sc->v[i].name;
	id_of(&sc->v[i], id);
	return 0;
}

static const struct rentry *find(const bfs_sidecar *sc, const char *name)
{
	size_t lo = 0, hi = sc->n, nl = strlen(name);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = cmp_bytes(sc->v[mid].name, sc->v[mid].name_len, name, nl);

		if (c == 0)
			return &sc->v[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int bfs_sidecar_find(const bfs_sidecar *sc, const char *name,
		     bfs_sidecar_id *id)
{
	const struct rentry *e = find(sc, name);

	if (!e)
		return -ENOENT;
	id_of(e, id);
	return 0;
}

int bfs_sidecar_lookup(const bfs_sidecar *sc, const char *name,
		       const bfs_sidecar_id *id, void **blob, size_t *len)
{
	const struct rentry *e = find(sc, name);
	bfs_sidecar_id have;
	uint64_t blen;
	uint32_t raw;
	uint8_t *out;

	*blob = NULL;
	*len = 0;
	if (!e)
		return -ENOENT;
	id_of(e, &have);
	if (have.kind != id->kind || have.size != id->size)
		return -ESTALE;
	if (id->kind == BFS_SIDECAR_ID_ETAG
		    ? !id->etag || !etag_ok(id->etag, strlen(id->etag)) ||
		      strcmp(id->etag, have.etag)
		    : have.mtime_ns != id->mtime_ns || have.ino != id->ino ||
		      have.ctime_ns != id->ctime_ns)
		return -ESTALE;
	blen = get64(e->ent + 40);
	raw = get32(e->ent + 48);
	if (bfs_crc32c(0, e->blob, (size_t)blen) != get32(e->ent + 52))
		return BFS_E_CRC;
	if (!(out = malloc(raw)))
		return -ENOMEM;
	if (e->ent[60] == ENC_RAW) {
		memcpy(out, e->blob, raw);
	} else {
		uLongf got = raw;

		if (uncompress(out, &got, e->blob, (uLong)blen) != Z_OK || got != raw) {
			free(out);
			return BFS_E_CORRUPT;
		}
	}
	*blob = out;
	*len = raw;
	return 0;
}
