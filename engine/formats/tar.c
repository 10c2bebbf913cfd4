/*
 * tar.c - WebDataset tar shards: header-only, bounds-checked archive scan
 * that groups members into samples by KEY (see tar.h).
 *
 * The scan owns one 64 KiB read buffer, a scratch buffer for long names and
 * pax headers (at most BFS_TAR_MAX_EXT_HEADER), and the names of the member
 * and the sample in progress.  Nothing is sized from a header field before
 * that field has been checked against the file size.
 *
 * Hard links ('1', what GNU tar writes for a file linked to one already in
 * the archive) name an earlier member whose data they share.  Archives
 * without one pay nothing for them: at the first hard link the scan starts
 * over from offset 0 with a table of every regular member's name and data
 * extent (links), replaying the members before the link without reporting
 * again the samples it already reported (mute), and keeps the table to the
 * end of the scan.
 */
#include "engine/formats/tar.h"

#include "engine/base/error.h"
#include "engine/formats/filekind.h"
#include "engine/formats/label.h"
#include "engine/base/reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CHUNK (64u * 1024)
#define SMALL_READ 4096u
/* After a member this large, the next header is fetched with a small pread
 * rather than a chunk that would mostly hold image bytes. */
#define BIG_MEMBER (16u * 1024)
/* A .cls or .txt member longer than this is not a label. */
#define MAX_CLS 256

/* Header field offsets and sizes (POSIX.1-1988 ustar, GNU). */
#define H_NAME 0
#define H_NAME_LEN 100
#define H_SIZE 124
#define H_SIZE_LEN 12
#define H_CHKSUM 148
#define H_CHKSUM_LEN 8
#define H_TYPE 156
#define H_LINKNAME 157
#define H_LINKNAME_LEN 100
#define H_MAGIC 257
#define H_PREFIX 345
#define H_PREFIX_LEN 155
#define H_GNU_ISEXTENDED 482    /* old GNU sparse header */
#define H_SPARSE_ISEXTENDED 504 /* in each sparse extension block */

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

typedef struct {
	char *p;     /* NUL-terminated when len > 0 or p != NULL */
	size_t len;
	size_t cap;
} str;

static int str_set(str *s, const char *p, size_t n)
{
	if (n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 64;
		char *q;

		while (cap < n + 1)
			cap *= 2;
		q = realloc(s->p, cap);
		if (!q)
			return -ENOMEM;
		s->p = q;
		s->cap = cap;
	}
	memcpy(s->p, p, n);
	s->p[n] = '\0';
	s->len = n;
	return 0;
}

static int str_append(str *s, const char *p, size_t n)
{
	size_t old = s->p ? s->len : 0;

	if (old + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 64;
		char *q;

		while (cap < old + n + 1)
			cap *= 2;
		q = realloc(s->p, cap);
		if (!q)
			return -ENOMEM;
		s->p = q;
		s->cap = cap;
	}
	memcpy(s->p + old, p, n);
	s->p[old + n] = '\0';
	s->len = old + n;
	return 0;
}

static const char *str_c(const str *s)
{
	return s->p ? s->p : "";
}

/* ------------------------------------------------------------------ */
/* The hard-link table: member name -> data extent, open addressing.   */

typedef struct {
	uint64_t hash;
	size_t name, name_len;  /* in pool */
	uint64_t off, len;
	int sparse;
	int used;
} link_ent;

typedef struct {
	link_ent *ents;         /* cap entries, cap a power of two */
	size_t cap, count;
	char *pool;             /* the names, back to back */
	size_t pool_len, pool_cap;
} link_table;

static uint64_t name_hash(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
	return h;
}

static link_ent *links_slot(link_table *t, const char *p, size_t n,
			    uint64_t h)
{
	size_t i = (size_t)h & (t->cap - 1);

	while (t->ents[i].used &&
	       !(t->ents[i].hash == h && t->ents[i].name_len == n &&
		 (n == 0 || !memcmp(t->pool + t->ents[i].name, p, n))))
		i = (i + 1) & (t->cap - 1);
	return &t->ents[i];
}

static const link_ent *links_find(link_table *t, const char *p, size_t n)
{
	link_ent *e;

	if (!t->count)
		return NULL;
	e = links_slot(t, p, n, name_hash(p, n));

	return e->used ? e : NULL;
}

/* Remember member p[0..n) at [off, off + len); a later member of the same
 * name replaces an earlier one, as extracting the archive would. */
static int links_put(link_table *t, const char *p, size_t n, uint64_t off,
		     uint64_t len, int sparse)
{
	uint64_t h = name_hash(p, n);
	link_ent *e;

	if (2 * (t->count + 1) > t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 1024;
		link_ent *old = t->ents, *ne = calloc(cap, sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		t->ents = ne;
		for (size_t i = 0; i < t->cap; i++)
			if (old[i].used) {
				size_t k = (size_t)old[i].hash & (cap - 1);

				while (ne[k].used)
					k = (k + 1) & (cap - 1);
				ne[k] = old[i];
			}
		free(old);
		t->cap = cap;
	}
	e = links_slot(t, p, n, h);
	if (!e->used) {
		if (t->pool_len + n > t->pool_cap) {
			size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
			char *q;

			while (cap < t->pool_len + n)
				cap *= 2;
			if (!(q = realloc(t->pool, cap)))
				return -ENOMEM;
			t->pool = q;
			t->pool_cap = cap;
		}
		if (n) /* an empty name is legal, and pool may be NULL */
			memcpy(t->pool + t->pool_len, p, n);
		e->hash = h;
		e->name = t->pool_len;
		e->name_len = n;
		e->used = 1;
		t->pool_len += n;
		t->count++;
	}
	e->off = off;
	e->len = len;
	e->sparse = sparse;
	return 0;
}

static void links_free(link_table *t)
{
	free(t->ents);
	free(t->pool);
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

static uint64_t round_block(uint64_t n)
{
	/* Callers pass sizes already checked to fit in the file. */
	return (n + (BFS_TAR_BLOCK - 1)) & ~(uint64_t)(BFS_TAR_BLOCK - 1);
}

/*
 * A numeric header field: octal digits (leading spaces, ended by NUL or
 * space, empty meaning 0) or GNU base-256 (first byte 0x80 positive, 0xff
 * negative; the rest big-endian).  Returns 0, or -1 for anything else,
 * including a value of 2^63 or more and a negative one.
 */
static int parse_number(const uint8_t *f, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (n && (f[0] == 0x80 || f[0] == 0xff)) {
		if (f[0] == 0xff)
			return -1; /* negative */
		for (i = 1; i < n; i++) {
			if (v >> 55)
				return -1; /* would pass 2^63 */
			v = v << 8 | f[i];
		}
		*out = v;
		return 0;
	}
	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return -1;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	/* Terminator: NUL ends the field, spaces may pad it. */
	for (; i < n && f[i] != '\0'; i++)
		if (f[i] != ' ')
			return -1;
	*out = v;
	return 0;
}

/* Checksum of a header with its checksum field read as 8 spaces: the
 * unsigned sum (POSIX) and the signed one (some old tars). */
static void header_sums(const uint8_t *h, uint64_t *usum, int64_t *ssum)
{
	uint64_t u = 0;
	int64_t s = 0;

	for (size_t i = 0; i < BFS_TAR_BLOCK; i++) {
		uint8_t b = (i >= H_CHKSUM && i < H_CHKSUM + H_CHKSUM_LEN)
				    ? ' ' : h[i];

		u += b;
		s += (int8_t)b;
	}
	*usum = u;
	*ssum = s;
}

/* 0 when h's checksum holds; else -1 with the stored and computed values
 * (stored is UINT64_MAX when the field itself does not parse). */
static int check_header(const uint8_t *h, uint64_t *stored,
			uint64_t *computed)
{
	uint64_t u;
	int64_t s;

	header_sums(h, &u, &s);
	*computed = u;
	if (parse_number(h + H_CHKSUM, H_CHKSUM_LEN, stored)) {
		*stored = UINT64_MAX;
		return -1;
	}
	if (*stored == u || (s >= 0 && *stored == (uint64_t)s))
		return 0;
	return -1;
}

int bfs_tar_probe(const uint8_t *first512, size_t len)
{
	uint64_t stored, computed;

	if (!first512 || len < BFS_TAR_BLOCK)
		return 0;
	if (all_zero(first512, BFS_TAR_BLOCK))
		return 0;
	return check_header(first512, &stored, &computed) == 0;
}

/*
 * WebDataset's KEY rule, the regex ^((?:.*\/|)[^.]+)[.]([^/]*)$ : the split
 * is at the first '.' of the last component, and the part before it, back
 * to some '/' or the start, must be non-empty and dot-free.  Sets *keylen
 * and *ext; returns 0 when the name does not match (no extension).
 */
static int split_key(const char *name, size_t n, size_t *keylen,
		     const char **ext)
{
	size_t c = n, p;

	while (c > 0 && name[c - 1] != '/')
		c--;
	for (p = c; p < n && name[p] != '.'; p++)
		;
	if (p == n)
		return 0;
	if (p == c) {
		/* ".ext" as the last component: the base must reach back
		 * over the '/' into a dot-free previous component. */
		size_t b;

		if (c == 0)
			return 0;
		b = c - 1;
		while (b > 0 && name[b - 1] != '/')
			b--;
		for (size_t i = b; i < c; i++)
			if (name[i] == '.')
				return 0;
	}
	*keylen = p;
	*ext = name + p + 1;
	return 1;
}

/* The image members: WebDataset's image extensions that batchfs reads
 * (which of the formats it is comes from the bytes, not the name); gif
 * too, so that a GIF sample is refused by name rather than passed over. */
static int is_image_ext(const char *e)
{
	return !strcasecmp(e, "jpg") || !strcasecmp(e, "jpeg") ||
	       !strcasecmp(e, "png") || !strcasecmp(e, "webp") ||
	       !strcasecmp(e, "gif");
}

/* The members a label may come from. */
enum { LBL_CLS, LBL_TXT, LBL_JSON, LBL_KINDS };
static const char *const lbl_ext[LBL_KINDS] = { "cls", "txt", "json" };

static int label_kind(const char *e)
{
	for (int k = 0; k < LBL_KINDS; k++)
		if (!strcasecmp(e, lbl_ext[k]))
			return k;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Buffered preads                                                     */

typedef struct {
	const bfs_reader *src;
	uint64_t size;
	uint8_t *buf;   /* CHUNK bytes */
	uint64_t boff;  /* file offset of buf[0] */
	size_t blen;    /* valid bytes in buf */
	char why[BFS_ERRMSG_MAX]; /* what src said of a failed read, or "" */
} reader;

static int pread_full(reader *r, void *p, size_t n, uint64_t off)
{
	r->why[0] = '\0';
	return r->src->pread(r->src->ctx, p, n, off, r->why);
}

/* Point *out at the len bytes at pos (len <= CHUNK, pos + len <= size). */
static int read_at(reader *r, uint64_t pos, size_t len, int small,
		   const uint8_t **out)
{
	size_t want;
	int err;

	if (pos >= r->boff && r->blen >= len &&
	    pos - r->boff <= r->blen - len) {
		*out = r->buf + (pos - r->boff);
		return 0;
	}
	want = small ? SMALL_READ : CHUNK;
	if (want < len)
		want = len;
	if (want > r->size - pos)
		want = (size_t)(r->size - pos);
	r->blen = 0;
	/* All of want, not just len: image data is never read, so a read
	 * that comes back short is the only sign that the file shrank, and
	 * it must come before any sample whose image lies in the lost part
	 * is reported. */
	if ((err = pread_full(r, r->buf, want, pos)))
		return err;
	r->boff = pos;
	r->blen = want;
	*out = r->buf;
	return 0;
}

/* Copy n bytes at pos (pos + n <= size) into the growable s. */
static int read_into(reader *r, uint64_t pos, size_t n, str *s)
{
	const uint8_t *p;
	int err;

	if (n <= CHUNK) {
		if ((err = read_at(r, pos, n, 1, &p)))
			return err;
		return str_set(s, (const char *)p, n);
	}
	if ((err = str_set(s, "", 0)))
		return err;
	if (n + 1 > s->cap) {
		char *q = realloc(s->p, n + 1);

		if (!q)
			return -ENOMEM;
		s->p = q;
		s->cap = n + 1;
	}
	if ((err = pread_full(r, s->p, n, pos)))
		return err;
	s->p[n] = '\0';
	s->len = n;
	return 0;
}

/* ------------------------------------------------------------------ */
/* The scan                                                            */

typedef struct {
	/* What the extension headers before the next member said. */
	int have_ext;           /* some 'L', 'K', 'x' or 'g' was seen */
	uint64_t ext_start;     /* offset of the first of them */
	int have_long;          /* GNU 'L' */
	str longname;
	int have_longlink;      /* GNU 'K' */
	str longlink;
	int have_linkpath;      /* pax linkpath= */
	str paxlink;
	int have_path;          /* pax path= (or GNU.sparse.name=) */
	str paxpath;
	int have_sparse_name;
	int have_size;          /* pax size= */
	uint64_t paxsize;
	int sparse;             /* pax GNU.sparse.* keys */
} pending;

typedef struct {
	int active;             /* a KEY is in progress */
	str key;
	unsigned images;        /* image members seen */
	str img_name;
	uint64_t img_off, img_len, img_member, img_hdr;
	int img_sparse;
	struct {
		unsigned count; /* members of this kind seen */
		int status;     /* of the first: 0 (value holds its label) or
				 * BFS_E_CORRUPT/BFS_E_NOKEY with why */
		int64_t value;
		char why[200];  /* what is wrong with it, after its name */
	} lbl[LBL_KINDS];
	int bad_link;           /* its image or label member is a hard link
				 * to a name no earlier member has: */
	str bad_link_msg;       /* what to say */
} group;

typedef struct {
	reader r;
	bfs_tar_scan_fn fn;
	void *ctx;
	const char *json_key;   /* the label is this member of KEY.json; NULL:
				 * KEY.cls, else KEY.txt */
	pending x;
	group g;
	str name;               /* the member being looked at */
	str scratch;            /* long names and pax headers */
	str linkname;           /* a hard link's target */
	char msg[BFS_ERRMSG_MAX];
	int have_links;         /* links is kept (a hard link was seen) */
	link_table links;
	uint64_t reported;      /* fn calls made */
	uint64_t mute;          /* samples to pass over without calling fn:
				 * reported before the scan started over */
} scan;

static void pending_clear(pending *x)
{
	x->have_ext = x->have_long = x->have_path = x->have_size = 0;
	x->have_longlink = x->have_linkpath = 0;
	x->have_sparse_name = x->sparse = 0;
}

/* Report the sample in progress (if it has an image) and forget it.
 * `damaged`: the scan stopped at a bad header right after it. */
static int flush(scan *sc, int damaged)
{
	group *g = &sc->g;
	bfs_tar_sample s;
	int rc, lk;

	if (!g->active)
		return 0;
	g->active = 0;
	if (!g->images)
		return 0;
	s.offset = g->img_off;
	s.length = g->img_len;
	s.label = -1;
	s.key = str_c(&g->key);
	s.name = str_c(&g->img_name);
	s.member = g->img_member;
	s.header_offset = g->img_hdr;
	s.status = 0;
	s.msg = sc->msg;
	sc->msg[0] = '\0';
	lk = sc->json_key ? LBL_JSON : g->lbl[LBL_CLS].count ? LBL_CLS
	     : g->lbl[LBL_TXT].count ? LBL_TXT : -1;
	if (g->img_sparse) {
		s.status = BFS_E_FORMAT;
		bfs_seterr(sc->msg, "member %.300s is a sparse file, which "
			   "cannot hold an image", s.name);
	} else if (g->images > 1) {
		s.status = BFS_E_CORRUPT;
		bfs_seterr(sc->msg, "sample %.300s has %u image members",
			   s.key, g->images);
	} else if (lk >= 0 && g->lbl[lk].count > 1) {
		s.status = BFS_E_CORRUPT;
		bfs_seterr(sc->msg, "sample %.300s has %u .%s members",
			   s.key, g->lbl[lk].count, lbl_ext[lk]);
	} else if (g->bad_link) {
		s.status = BFS_E_CORRUPT;
		bfs_seterr(sc->msg, "%s", str_c(&g->bad_link_msg));
	} else if (lk < 0 || !g->lbl[lk].count) {
		s.status = BFS_E_NOKEY;
		if (sc->json_key)
			bfs_seterr(sc->msg, "member %.300s has no .json%s (the "
				   "label is its member \"%.100s\", as "
				   "--label-key says)", s.name, damaged
				   ? " before the damaged part of the archive"
				   : "", sc->json_key);
		else
			bfs_seterr(sc->msg, damaged
				   ? "member %.300s has no .cls or .txt before "
				     "the damaged part of the archive"
				   : "member %.300s has no .cls or .txt (for a "
				     "label in its .json, name its key with "
				     "--label-key)", s.name);
	} else if (g->lbl[lk].status) {
		s.status = g->lbl[lk].status;
		bfs_seterr(sc->msg, "%.300s.%s %s", s.key, lbl_ext[lk],
			   g->lbl[lk].why);
	} else {
		s.label = g->lbl[lk].value;
	}
	if (sc->mute) {
		sc->mute--; /* reported before the scan started over */
		return 0;
	}
	sc->reported++;
	rc = sc->fn(sc->ctx, &s);
	return rc;
}

/* A regular member named sc->name with data at [off, off + len), or, when
 * bad_link, a hard link named sc->name to sc->linkname, which no earlier
 * member has (len is then 0). */
static int member(scan *sc, uint64_t off, uint64_t len, uint64_t index,
		  uint64_t hdr, int sparse, int bad_link)
{
	group *g = &sc->g;
	const char *name = str_c(&sc->name);
	const char *ext;
	size_t keylen;
	int err, lk;

	if (!split_key(name, sc->name.len, &keylen, &ext))
		return 0;
	if (!strchr(name, '/') && !strncmp(name, "__", 2) &&
	    sc->name.len >= 4 && !strcmp(name + sc->name.len - 2, "__"))
		return 0; /* WebDataset metadata, as it skips it */
	if (g->active && (g->key.len != keylen ||
			  memcmp(g->key.p, name, keylen) != 0)) {
		if ((err = flush(sc, 0)))
			return err;
	}
	if (!g->active) {
		if ((err = str_set(&g->key, name, keylen)))
			return err;
		g->active = 1;
		g->images = 0;
		memset(g->lbl, 0, sizeof(g->lbl));
		g->bad_link = 0;
	}
	lk = label_kind(ext);
	if (lk >= 0 && (sc->json_key ? lk != LBL_JSON : lk == LBL_JSON))
		lk = -1; /* not where this mount's labels come from */
	if (bad_link && (is_image_ext(ext) || lk >= 0)) {
		int first = is_image_ext(ext) ? g->images == 0
					      : g->lbl[lk].count == 0;

		if (first && !g->bad_link) {
			char m[BFS_ERRMSG_MAX];

			g->bad_link = 1;
			bfs_seterr(m, "member %.200s is a hard link to %.200s, "
				   "which is not an earlier member of the "
				   "archive", name, str_c(&sc->linkname));
			if ((err = str_set(&g->bad_link_msg, m, strlen(m))))
				return err;
		}
	}
	if (is_image_ext(ext)) {
		if (g->images++ == 0) {
			if ((err = str_set(&g->img_name, name, sc->name.len)))
				return err;
			g->img_off = off;
			g->img_len = len;
			g->img_member = index;
			g->img_hdr = hdr;
			g->img_sparse = sparse;
		}
	} else if (lk >= 0 && g->lbl[lk].count++ == 0) {
		uint64_t most = lk == LBL_JSON ? BFS_TAR_MAX_JSON : MAX_CLS;
		const uint8_t *p;

		g->lbl[lk].status = BFS_E_CORRUPT;
		if (bad_link)
			return 0; /* said by bad_link_msg */
		if (sparse) {
			snprintf(g->lbl[lk].why, sizeof(g->lbl[lk].why),
				 "is a sparse file, not a label");
			return 0;
		}
		if (len > most) {
			snprintf(g->lbl[lk].why, sizeof(g->lbl[lk].why),
				 "is %llu bytes, %s", (unsigned long long)len,
				 lk == LBL_JSON ? "more than a label's .json "
				 "may have (64 KiB)" : "not a class label");
			return 0;
		}
		if ((err = read_at(&sc->r, off, (size_t)len, 1, &p)))
			return err;
		if (lk != LBL_JSON) {
			if (!bfs_label_parse_decimal(p, (size_t)len,
						     &g->lbl[lk].value))
				g->lbl[lk].status = 0;
			else
				snprintf(g->lbl[lk].why, sizeof(g->lbl[lk].why),
					 "is not a decimal class label");
		} else {
			char why[BFS_ERRMSG_MAX];

			g->lbl[lk].status = bfs_label_json(p, (size_t)len,
							   sc->json_key,
							   &g->lbl[lk].value,
							   why);
			if (g->lbl[lk].status)
				snprintf(g->lbl[lk].why, sizeof(g->lbl[lk].why),
					 "%s", why);
		}
	}
	return 0;
}

/* Parse the pax records in sc->scratch into sc->x.  0 or -1 with why. */
static int parse_pax(scan *sc, const char **why)
{
	const char *p = sc->scratch.p;
	size_t n = sc->scratch.len, i = 0;
	pending *x = &sc->x;

	while (i < n) {
		size_t reclen = 0, j = i, k, klen, vlen;
		const char *key, *val;

		if (all_zero((const uint8_t *)p + i, n - i))
			break; /* NUL padding after the last record */
		for (; j < n && p[j] >= '0' && p[j] <= '9'; j++) {
			if (reclen > (SIZE_MAX - 9) / 10) {
				*why = "record length overflows";
				return -1;
			}
			reclen = reclen * 10 + (size_t)(p[j] - '0');
		}
		if (j == i || j >= n || p[j] != ' ') {
			*why = "record does not start with 'LENGTH '";
			return -1;
		}
		if (reclen > n - i || reclen < j - i + 3 ||
		    p[i + reclen - 1] != '\n') {
			*why = "record length does not fit the header";
			return -1;
		}
		key = p + j + 1;
		k = j + 1;
		while (k < i + reclen - 1 && p[k] != '=')
			k++;
		if (k >= i + reclen - 1) {
			*why = "record has no '='";
			return -1;
		}
		klen = (size_t)(p + k - key);
		val = p + k + 1;
		vlen = i + reclen - 1 - (k + 1);
		vlen = strnlen(val, vlen);
		i += reclen;

#define KEY_IS(s) (klen == sizeof(s) - 1 && !memcmp(key, s, klen))
		if (KEY_IS("path")) {
			if (x->have_sparse_name)
				continue;
			x->have_path = vlen > 0; /* empty: back to the header */
			if (vlen && str_set(&x->paxpath, val, vlen))
				return -2;
		} else if (KEY_IS("linkpath")) {
			x->have_linkpath = vlen > 0;
			if (vlen && str_set(&x->paxlink, val, vlen))
				return -2;
		} else if (KEY_IS("GNU.sparse.name")) {
			x->sparse = 1;
			x->have_path = x->have_sparse_name = vlen > 0;
			if (vlen && str_set(&x->paxpath, val, vlen))
				return -2;
		} else if (KEY_IS("size")) {
			uint64_t v = 0;

			x->have_size = vlen > 0;
			for (size_t t = 0; t < vlen; t++) {
				if (val[t] < '0' || val[t] > '9' ||
				    v > (INT64_MAX - 9) / 10) {
					*why = "size= is not a decimal number "
					       "below 2^63";
					return -1;
				}
				v = v * 10 + (uint64_t)(val[t] - '0');
			}
			x->paxsize = v;
		} else if (klen > 11 && !memcmp(key, "GNU.sparse.", 11)) {
			x->sparse = 1;
		}
#undef KEY_IS
	}
	return 0;
}

/* The member name: pax path, else GNU long name, else ustar prefix/name. */
static int member_name(scan *sc, const uint8_t *h)
{
	pending *x = &sc->x;
	size_t n;
	int err;

	if (x->have_path)
		return str_set(&sc->name, x->paxpath.p, x->paxpath.len);
	if (x->have_long)
		return str_set(&sc->name, x->longname.p,
			       strnlen(x->longname.p, x->longname.len));
	if ((err = str_set(&sc->name, "", 0)))
		return err;
	if (!memcmp(h + H_MAGIC, "ustar\0", 6)) {
		n = strnlen((const char *)h + H_PREFIX, H_PREFIX_LEN);
		if (n && ((err = str_append(&sc->name,
					    (const char *)h + H_PREFIX, n)) ||
			  (err = str_append(&sc->name, "/", 1))))
			return err;
	}
	n = strnlen((const char *)h + H_NAME, H_NAME_LEN);
	return str_append(&sc->name, (const char *)h + H_NAME, n);
}

/* A hard link's target: pax linkpath, else GNU long link name, else the
 * header's linkname field. */
static int link_name(scan *sc, const uint8_t *h)
{
	pending *x = &sc->x;

	if (x->have_linkpath)
		return str_set(&sc->linkname, x->paxlink.p, x->paxlink.len);
	if (x->have_longlink)
		return str_set(&sc->linkname, x->longlink.p,
			       strnlen(x->longlink.p, x->longlink.len));
	return str_set(&sc->linkname, (const char *)h + H_LINKNAME,
		       strnlen((const char *)h + H_LINKNAME, H_LINKNAME_LEN));
}

int bfs_tar_scan(int fd, uint64_t file_size, bfs_tar_scan_fn fn, void *ctx,
		 char *errmsg)
{
	bfs_reader src = bfs_reader_fd(fd);

	return bfs_tar_scan_reader(&src, file_size, NULL, fn, ctx, errmsg);
}

int bfs_tar_scan_reader(const bfs_reader *src, uint64_t file_size,
			const bfs_tar_opts *opts, bfs_tar_scan_fn fn,
			void *ctx, char *errmsg)
{
	scan *sc;
	uint64_t pos = 0, index = 0;
	int small = 0, err = 0, damaged = 0;

	if (!fn)
		return -EINVAL;
	sc = calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	sc->r.src = src;
	sc->r.size = file_size;
	sc->json_key = opts && opts->json_key ? opts->json_key : NULL;
	sc->fn = fn;
	sc->ctx = ctx;
	sc->r.buf = malloc(CHUNK);
	if (!sc->r.buf) {
		err = -ENOMEM;
		goto out;
	}

	for (;;) {
		const uint8_t *h;
		const char *kind;
		uint64_t left = file_size - pos, size, data, stored, computed;
		uint64_t hdr;
		char type;
		int has_data, regular, sparse;

		if (pos >= file_size) {
			if (file_size == 0)
				break; /* an empty file: no archive at all */
			if (sc->x.have_ext)
				bfs_seterr(errmsg, "member %llu at offset "
					   "%llu: file ends after an extension "
					   "header, before its member",
					   (unsigned long long)index,
					   (unsigned long long)sc->x.ext_start);
			else
				bfs_seterr(errmsg, "member %llu at offset "
					   "%llu: file ends without the "
					   "end-of-archive blocks (size %llu)",
					   (unsigned long long)index,
					   (unsigned long long)pos,
					   (unsigned long long)file_size);
			err = BFS_E_TRUNCATED;
			damaged = 1;
			break;
		}
		if (left < BFS_TAR_BLOCK) {
			if ((err = read_at(&sc->r, pos, (size_t)left, small,
					   &h)))
				goto read_error;
			if (all_zero(h, (size_t)left) && !sc->x.have_ext)
				break; /* a cut end-of-archive marker */
			/* (a file this short may be anything, so nothing
			 * of it is quoted: its size, and what it looks like
			 * when that is something else) */
			kind = pos == 0 ? bfs_filekind(h, (size_t)left) : NULL;
			if (kind && strcmp(kind, "a tar archive")) {
				bfs_seterr(errmsg, "not a tar file: it is shorter "
					   "than one 512-byte header; it looks "
					   "like %s", kind);
				err = BFS_E_TRUNCATED;
				damaged = 1;
				break;
			}
			bfs_seterr(errmsg, "member %llu at offset %llu: file "
				   "ends inside the 512-byte header (%llu "
				   "bytes left)", (unsigned long long)index,
				   (unsigned long long)pos,
				   (unsigned long long)left);
			err = BFS_E_TRUNCATED;
			damaged = 1;
			break;
		}
		if ((err = read_at(&sc->r, pos, BFS_TAR_BLOCK, small, &h)))
			goto read_error;
		if (all_zero(h, BFS_TAR_BLOCK)) {
			if (sc->x.have_ext) {
				bfs_seterr(errmsg, "member %llu at offset "
					   "%llu: end-of-archive block after "
					   "an extension header",
					   (unsigned long long)index,
					   (unsigned long long)pos);
				err = BFS_E_CORRUPT;
				damaged = 1;
			}
			break;
		}
		if (check_header(h, &stored, &computed)) {
			/* The first block: the file may be anything, so say
			 * what it looks like, never what it holds. */
			kind = pos == 0 ? bfs_filekind(h, BFS_TAR_BLOCK) : NULL;
			if (pos == 0 && kind && !strcmp(kind, "a tar archive"))
				bfs_seterr(errmsg, "member 0 at offset 0: "
					   "header checksum does not match "
					   "(a damaged tar archive)");
			else if (pos == 0 && kind)
				bfs_seterr(errmsg, "not a tar file: its first "
					   "512 bytes are not a tar header; it "
					   "looks like %s", kind);
			else if (pos == 0)
				bfs_seterr(errmsg, "not a TFRecord, tar or JPEG "
					   "file: its first 512 bytes are not "
					   "a tar header");
			else if (stored == UINT64_MAX)
				bfs_seterr(errmsg, "member %llu at offset %llu: "
					   "not a tar header (checksum field "
					   "is not a number)",
					   (unsigned long long)index,
					   (unsigned long long)pos);
			else
				bfs_seterr(errmsg, "member %llu at offset %llu: "
					   "header checksum 0o%llo does not "
					   "match the computed 0o%llo",
					   (unsigned long long)index,
					   (unsigned long long)pos,
					   (unsigned long long)stored,
					   (unsigned long long)computed);
			err = BFS_E_CORRUPT;
			damaged = 1;
			break;
		}
		if (parse_number(h + H_SIZE, H_SIZE_LEN, &size)) {
			bfs_seterr(errmsg, "member %llu at offset %llu: size "
				   "field is not an octal or base-256 number "
				   "below 2^63", (unsigned long long)index,
				   (unsigned long long)pos);
			err = BFS_E_CORRUPT;
			damaged = 1;
			break;
		}
		type = (char)h[H_TYPE];
		data = pos + BFS_TAR_BLOCK;
		left -= BFS_TAR_BLOCK;

		if (type == 'L' || type == 'K' || type == 'x' ||
		    type == 'X' || type == 'g') {
			const char *why = NULL;

			if (size > left) {
				bfs_seterr(errmsg, "member %llu at offset %llu: "
					   "extension header '%c' of %llu "
					   "bytes runs past end of file "
					   "(size %llu)",
					   (unsigned long long)index,
					   (unsigned long long)pos, type,
					   (unsigned long long)size,
					   (unsigned long long)file_size);
				err = BFS_E_TRUNCATED;
				damaged = 1;
				break;
			}
			if (type != 'g' && size > BFS_TAR_MAX_EXT_HEADER) {
				bfs_seterr(errmsg, "member %llu at offset %llu: "
					   "extension header '%c' of %llu "
					   "bytes is over the %u-byte limit",
					   (unsigned long long)index,
					   (unsigned long long)pos, type,
					   (unsigned long long)size,
					   BFS_TAR_MAX_EXT_HEADER);
				err = BFS_E_CORRUPT;
				damaged = 1;
				break;
			}
			if (type != 'g' && !sc->x.have_ext) {
				/* Global headers stand alone; the others
				 * belong to the member after them. */
				sc->x.have_ext = 1;
				sc->x.ext_start = pos;
			}
			if (type == 'L') {
				if ((err = read_into(&sc->r, data, (size_t)size,
						     &sc->x.longname)))
					goto read_error;
				sc->x.have_long = 1;
			} else if (type == 'K') {
				if ((err = read_into(&sc->r, data, (size_t)size,
						     &sc->x.longlink)))
					goto read_error;
				sc->x.have_longlink = 1;
			} else if (type == 'x' || type == 'X') {
				if ((err = read_into(&sc->r, data, (size_t)size,
						     &sc->scratch)))
					goto read_error;
				err = parse_pax(sc, &why);
				if (err == -2) {
					err = -ENOMEM;
					goto out;
				}
				if (err) {
					bfs_seterr(errmsg, "member %llu at "
						   "offset %llu: bad pax "
						   "header: %s",
						   (unsigned long long)index,
						   (unsigned long long)pos,
						   why);
					err = BFS_E_CORRUPT;
					damaged = 1;
					break;
				}
			}
			small = size >= BIG_MEMBER;
			pos = data + round_block(size);
			continue;
		}

		/* A member proper. */
		hdr = sc->x.have_ext ? sc->x.ext_start : pos;
		if (sc->x.have_size)
			size = sc->x.paxsize;
		sparse = sc->x.sparse || type == 'S';
		regular = type == '0' || type == '\0' || type == '7' ||
			  type == 'S';
		/* Links, devices, directories and FIFOs have no data (as
		 * tar and Python's tarfile read them); any other type's
		 * size is skipped. */
		has_data = !(type >= '1' && type <= '6');
		if ((err = member_name(sc, h)))
			goto out;
		if (type == '\0' && sc->name.len &&
		    sc->name.p[sc->name.len - 1] == '/')
			regular = 0; /* v7 directory */
		if (type == 'S' && h[H_GNU_ISEXTENDED]) {
			/* Old GNU sparse: more sparse maps in whole blocks
			 * between the header and the data. */
			int more = 1;

			while (more) {
				const uint8_t *b;

				if (left < BFS_TAR_BLOCK) {
					bfs_seterr(errmsg, "member %llu at "
						   "offset %llu: file ends "
						   "inside a GNU sparse map",
						   (unsigned long long)index,
						   (unsigned long long)hdr);
					err = BFS_E_TRUNCATED;
					damaged = 1;
					goto stop;
				}
				if ((err = read_at(&sc->r, data, BFS_TAR_BLOCK,
						   small, &b)))
					goto read_error;
				more = b[H_SPARSE_ISEXTENDED] != 0;
				data += BFS_TAR_BLOCK;
				left -= BFS_TAR_BLOCK;
			}
		}
		if (has_data && size > left) {
			bfs_seterr(errmsg, "member %llu (%.200s) at offset "
				   "%llu: data of %llu bytes runs past end of "
				   "file (size %llu)",
				   (unsigned long long)index, str_c(&sc->name),
				   (unsigned long long)hdr,
				   (unsigned long long)size,
				   (unsigned long long)file_size);
			err = BFS_E_TRUNCATED;
			damaged = 1;
			break;
		}
		if (type == '1' && !sc->have_links) {
			/* The first hard link: its target is an earlier
			 * member, and none was remembered.  Start over,
			 * remembering every member this time, and pass over
			 * the samples already reported. */
			sc->have_links = 1;
			sc->mute = sc->reported;
			sc->g.active = 0;
			pending_clear(&sc->x);
			pos = 0;
			index = 0;
			small = 0;
			continue;
		}
		if (type == '1') {
			const link_ent *t;

			if ((err = link_name(sc, h)))
				goto out;
			t = links_find(&sc->links, sc->linkname.p,
				       sc->linkname.len);
			if (t)
				err = member(sc, t->off, t->len, index, hdr,
					     t->sparse, 0);
			else /* no data: its (empty) data follow its header */
				err = member(sc, data, 0, index, hdr, 0, 1);
			if (!err && t)
				err = links_put(&sc->links, sc->name.p,
						sc->name.len, t->off, t->len,
						t->sparse);
			if (err)
				goto out;
		}
		if (regular && (err = member(sc, data, size, index, hdr,
					     sparse, 0)))
			goto out;
		if (regular && sc->have_links &&
		    (err = links_put(&sc->links, sc->name.p, sc->name.len,
				     data, size, sparse)))
			goto out;
		pending_clear(&sc->x);
		index++;
		if (has_data) {
			small = size >= BIG_MEMBER;
			pos = data + round_block(size);
		} else {
			pos = data;
		}
	}
	goto stop;
read_error:
	/* A pread failed or came back short: the file shrank since its size
	 * was taken, or the disk failed.  The sample in progress is not
	 * reported: its image may lie in the part that is gone. */
	bfs_seterr(errmsg, "member %llu at offset %llu: %s",
		   (unsigned long long)index, (unsigned long long)pos,
		   sc->r.why[0] ? sc->r.why
		   : err == -EIO ? "the file is shorter than when the scan "
				   "began (changed while being read?)"
				 : strerror(-err));
	goto out;
stop:
	/* The sample in progress is whole when its image member is. */
	{
		int rc = flush(sc, damaged);

		if (rc)
			err = rc;
	}
out:
	if (sc) {
		free(sc->r.buf);
		free(sc->x.longname.p);
		free(sc->x.paxpath.p);
		free(sc->x.longlink.p);
		free(sc->x.paxlink.p);
		free(sc->g.key.p);
		free(sc->g.img_name.p);
		free(sc->g.bad_link_msg.p);
		free(sc->name.p);
		free(sc->scratch.p);
		free(sc->linkname.p);
		links_free(&sc->links);
		free(sc);
	}
	return err;
}
