/*
 * gzindex.c - random access into gzip files (see gzindex.h): one inflate
 * pass builds restart points (zran), cursors inflate from the nearest one.
 * Gzip member headers and trailers are parsed here and the deflate data is
 * inflated raw, so that a restart point inside a member and a member start
 * take the same path.  Owns: the index (points and their windows), and per
 * cursor zlib's state and two 64 KiB buffers.
 */
#include "engine/formats/gzindex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "engine/base/error.h"

#define IN_SZ  (64u * 1024)
#define OUT_SZ (64u * 1024)

struct point {
	uint64_t uoff;      /* uncompressed offset */
	uint64_t coff;      /* compressed offset: the member's header, or the
			     * first whole byte after the block's start */
	uint32_t bits;      /* bits of the byte before coff that belong to
			     * the block (0..7) */
	uint32_t wlen;      /* window bytes (0 at a member start) */
	uint32_t member;    /* 1: a member starts here (header at coff) */
	uint8_t *window;    /* the wlen bytes of output before uoff */
};

struct bfs_gzindex {
	struct point *pts;
	size_t n, cap;
	uint64_t csize;     /* compressed bytes indexed */
	uint64_t usize;     /* uncompressed bytes served */
	int complete;
	char damage[BFS_ERRMSG_MAX];
};

/* ---- compressed input ------------------------------------------------- */

typedef struct {
	int fd;
	uint64_t csize;
	uint8_t *in;        /* IN_SZ */
	uint64_t end_off;   /* file offset just past the bytes loaded */
	z_stream zs;        /* next_in/avail_in: the loaded bytes not used */
	int zinit;
	int rerr;           /* the -errno of a failed pread, or 0 */
} gzin;

static uint64_t consumed(const gzin *g)
{
	return g->end_off - g->zs.avail_in;
}

static void seek_to(gzin *g, uint64_t pos)
{
	g->end_off = pos;
	g->zs.next_in = g->in;
	g->zs.avail_in = 0;
}

/* Load more input when none is left.  0, 1 at the end of the file, or
 * -errno. */
static int refill(gzin *g)
{
	size_t want;
	ssize_t k;

	if (g->zs.avail_in)
		return 0;
	if (g->end_off >= g->csize)
		return 1;
	want = g->csize - g->end_off < IN_SZ ? (size_t)(g->csize - g->end_off) : IN_SZ;
	do
		k = pread(g->fd, g->in, want, (off_t)g->end_off);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return g->rerr = -errno;
	if (k == 0)
		return 1; /* shorter than csize: the file changed */
	g->zs.next_in = g->in;
	g->zs.avail_in = (uInt)k;
	g->end_off += (uint64_t)k;
	return 0;
}

/* One byte of input: 0, 1 at the end of the file, or -errno. */
static int next_byte(gzin *g, unsigned *b)
{
	int rc = refill(g);

	if (rc)
		return rc;
	*b = *g->zs.next_in++;
	g->zs.avail_in--;
	return 0;
}

static int gzin_init(gzin *g, int fd, uint64_t csize)
{
	memset(g, 0, sizeof(*g));
	g->fd = fd;
	g->csize = csize;
	if (!(g->in = malloc(IN_SZ)))
		return -ENOMEM;
	if (inflateInit2(&g->zs, -15) != Z_OK) {
		free(g->in);
		g->in = NULL;
		return -ENOMEM;
	}
	g->zinit = 1;
	seek_to(g, 0);
	return 0;
}

static void gzin_free(gzin *g)
{
	if (g->zinit)
		inflateEnd(&g->zs);
	free(g->in);
	g->in = NULL;
	g->zinit = 0;
}

/*
 * A gzip member header (RFC 1952) at the input position.  0; 1 when the
 * file ends before or inside it (*what says which); -2 when the bytes are
 * not a gzip header; -errno.
 */
static int member_header(gzin *g, const char **what)
{
	unsigned b[10], x;
	int rc;

	static const unsigned magic[3] = { 0x1f, 0x8b, 8 };

	for (int i = 0; i < 10; i++) {
		if ((rc = next_byte(g, &b[i]))) {
			*what = i ? "the file ends inside a gzip member header" : "";
			return rc;
		}
		if ((i < 3 && b[i] != magic[i]) || (i == 3 && (b[3] & 0xe0))) {
			*what = "not a gzip member header";
			return -2;
		}
	}
	*what = "the file ends inside a gzip member header";
	if (b[3] & 4) { /* FEXTRA */
		unsigned lo, hi;
		uint32_t xlen;

		if ((rc = next_byte(g, &lo)) || (rc = next_byte(g, &hi)))
			return rc;
		for (xlen = lo | hi << 8; xlen; xlen--)
			if ((rc = next_byte(g, &x)))
				return rc;
	}
	for (int f = 8; f <= 16; f <<= 1) /* FNAME, FCOMMENT */
		if (b[3] & f)
			do
				if ((rc = next_byte(g, &x)))
					return rc;
			while (x);
	if (b[3] & 2) /* FHCRC */
		for (int i = 0; i < 2; i++)
			if ((rc = next_byte(g, &x)))
				return rc;
	return 0;
}

int bfs_gz_probe(const uint8_t *head, size_t n)
{
	return head && n >= 3 && head[0] == 0x1f && head[1] == 0x8b && head[2] == 8;
}

int bfs_gz_peek(int fd, uint64_t csize, uint8_t *out, size_t n, size_t *got)
{
	const char *what;
	gzin g;
	int rc;

	*got = 0;
	if ((rc = gzin_init(&g, fd, csize < IN_SZ ? csize : IN_SZ)))
		return rc;
	if ((rc = member_header(&g, &what))) {
		gzin_free(&g);
		return rc < 0 && rc != -2 ? rc : -EINVAL;
	}
	g.zs.next_out = out;
	g.zs.avail_out = (uInt)n;
	while (g.zs.avail_out && refill(&g) == 0) {
		int zr = inflate(&g.zs, Z_NO_FLUSH);

		if (zr != Z_OK)
			break;
	}
	*got = n - g.zs.avail_out;
	gzin_free(&g);
	return 0;
}

/* ---- the index -------------------------------------------------------- */

static int add_point(bfs_gzindex *idx, uint64_t uoff, uint64_t coff,
		     uint32_t bits, int member, const uint8_t *hist,
		     size_t hpos, size_t hfill)
{
	struct point *p;
	uint32_t wlen = member ? 0 : (uint32_t)hfill;

	if (idx->n == idx->cap) {
		size_t cap = idx->cap ? idx->cap * 2 : 16;
		struct point *np = realloc(idx->pts, cap * sizeof(*np));

		if (!np)
			return -ENOMEM;
		idx->pts = np;
		idx->cap = cap;
	}
	p = &idx->pts[idx->n];
	memset(p, 0, sizeof(*p));
	if (wlen) {
		/* the ring's last wlen bytes, oldest first */
		size_t start = (hpos + BFS_GZ_WINDOW - wlen) % BFS_GZ_WINDOW;
		size_t first = BFS_GZ_WINDOW - start < wlen ? BFS_GZ_WINDOW - start : wlen;

		if (!(p->window = malloc(wlen)))
			return -ENOMEM;
		memcpy(p->window, hist + start, first);
		memcpy(p->window + first, hist, wlen - first);
	}
	p->uoff = uoff;
	p->coff = coff;
	p->bits = bits;
	p->wlen = wlen;
	p->member = member != 0;
	idx->n++;
	return 0;
}

/* Drop the points past uoff (inside a member found bad). */
static void drop_points_after(bfs_gzindex *idx, uint64_t uoff)
{
	while (idx->n && idx->pts[idx->n - 1].uoff > uoff) {
		idx->n--;
		free(idx->pts[idx->n].window);
	}
}

void bfs_gzindex_free(bfs_gzindex *idx)
{
	if (!idx)
		return;
	for (size_t i = 0; i < idx->n; i++)
		free(idx->pts[i].window);
	free(idx->pts);
	free(idx);
}

uint64_t bfs_gzindex_size(const bfs_gzindex *idx) { return idx->usize; }
int bfs_gzindex_complete(const bfs_gzindex *idx) { return idx->complete; }
const char *bfs_gzindex_damage(const bfs_gzindex *idx) { return idx->damage; }
size_t bfs_gzindex_npoints(const bfs_gzindex *idx) { return idx->n; }
uint64_t bfs_gzindex_csize(const bfs_gzindex *idx) { return idx->csize; }

static uint32_t le32(const unsigned *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

int bfs_gzindex_build(int fd, uint64_t csize, uint32_t span, int flags,
		      uint32_t max_ratio, bfs_gzindex **out, char *errmsg)
{
	bfs_gzindex *idx;
	gzin g;
	uint8_t *obuf = NULL, *hist = NULL;
	uint64_t upos = 0, member_u = 0, member_c = 0, last_u = 0, last_c = 0;
	size_t hpos = 0, hfill = 0;
	unsigned long members = 0;
	int rc, err = 0;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!span)
		span = BFS_GZ_SPAN;
	if (!(idx = calloc(1, sizeof(*idx))))
		return -ENOMEM;
	idx->csize = csize;
	if ((err = gzin_init(&g, fd, csize)))
		goto fail;
	obuf = malloc(OUT_SZ);
	hist = malloc(BFS_GZ_WINDOW);
	if (!obuf || !hist) {
		err = -ENOMEM;
		goto fail;
	}
	for (;;) { /* one gzip member a turn */
		const char *what = "";
		unsigned t[8];
		uLong crc = crc32(0, NULL, 0);
		uint64_t isize = 0;
		int own = 0;    /* this member starts with a point of its own */

		member_c = consumed(&g);
		member_u = upos;
		rc = member_header(&g, &what);
		if (rc < 0 && rc != -2) {
			err = rc;
			goto fail;
		}
		if (rc && members == 0) {
			bfs_seterr(errmsg, "not a gzip file: %s",
				   rc == 1 && !what[0] ? "it is empty" : what);
			err = -EINVAL;
			goto fail;
		}
		if (rc) {
			snprintf(idx->damage, sizeof(idx->damage),
				 "gzip: %s at compressed offset %llu, after %lu whole member%s",
				 rc == -2 ? "bytes that are not a gzip member"
					  : "the file ends inside a member header",
				 (unsigned long long)member_c, members,
				 members == 1 ? "" : "s");
			break;
		}
		/* a point of its own (no window) for the first member, and
		 * for the others only a span past the last point: empty or
		 * tiny members add none, a cursor reads through them */
		if (members == 0 || upos - last_u >= span) {
			if ((err = add_point(idx, upos, member_c, 0, 1, NULL, 0, 0)))
				goto fail;
			last_u = upos;
			last_c = member_c;
			own = 1;
		}
		hfill = hpos = 0;
		inflateReset(&g.zs);
		for (;;) {
			size_t made;
			int zr;

			if ((rc = refill(&g)) < 0) {
				err = rc;
				goto fail;
			}
			/* at the end of the file inflate may still hold output
			 * from input it has taken: one more call gives it */
			g.zs.next_out = obuf;
			g.zs.avail_out = OUT_SZ;
			zr = inflate(&g.zs, Z_BLOCK);
			made = OUT_SZ - g.zs.avail_out;
			if (rc == 1 && !made && zr != Z_STREAM_END) {
				snprintf(idx->damage, sizeof(idx->damage),
					 "gzip: the file ends inside member %lu (compressed offset %llu), %llu bytes into its data",
					 members, (unsigned long long)member_c,
					 (unsigned long long)(upos - member_u));
				goto done;
			}
			if (zr != Z_OK && zr != Z_BUF_ERROR && zr != Z_STREAM_END)
				made = 0; /* the good part ends before this call */
			if (made) {
				crc = crc32(crc, obuf, (uInt)made);
				isize += made;
				upos += made;
				if (max_ratio && upos > BFS_GZ_RATIO_FLOOR &&
				    upos / max_ratio > consumed(&g)) {
					bfs_seterr(errmsg, "gzip: inflates to more than %u "
						   "times its compressed size: %llu bytes "
						   "from its first %llu compressed bytes "
						   "(ratio %llu), so the rest was not "
						   "inflated (a gzip bomb?); "
						   "--max-inflate-ratio N sets the limit "
						   "(0: none)", max_ratio,
						   (unsigned long long)upos,
						   (unsigned long long)consumed(&g),
						   (unsigned long long)(upos / consumed(&g)));
					err = -EFBIG;
					goto fail;
				}
				/* the last 32 KiB of output, for windows */
				if (made >= BFS_GZ_WINDOW) {
					memcpy(hist, obuf + made - BFS_GZ_WINDOW, BFS_GZ_WINDOW);
					hpos = 0;
					hfill = BFS_GZ_WINDOW;
				} else {
					size_t first = BFS_GZ_WINDOW - hpos < made ? BFS_GZ_WINDOW - hpos : made;

					memcpy(hist + hpos, obuf, first);
					memcpy(hist, obuf + first, made - first);
					hpos = (hpos + made) % BFS_GZ_WINDOW;
					hfill = hfill + made > BFS_GZ_WINDOW ? BFS_GZ_WINDOW : hfill + made;
				}
			}
			if (zr == Z_STREAM_END)
				break;
			if (zr != Z_OK && zr != Z_BUF_ERROR) {
				snprintf(idx->damage, sizeof(idx->damage),
					 "gzip: damaged deflate data in member %lu, before compressed offset %llu (%s)",
					 members, (unsigned long long)consumed(&g),
					 zr == Z_MEM_ERROR ? "out of memory"
					 : g.zs.msg ? g.zs.msg : "data error");
				if (zr == Z_MEM_ERROR) {
					err = -ENOMEM;
					goto fail;
				}
				goto done;
			}
			/* a block boundary (not after the last block): a
			 * restart point, once a span of output and an eighth
			 * of a span of input are past (so that windows cost
			 * at most 1/16 of the compressed size, however well
			 * the data compress) */
			if ((g.zs.data_type & 128) && !(g.zs.data_type & 64) &&
			    upos - last_u >= span && consumed(&g) - last_c >= span / 8) {
				if ((err = add_point(idx, upos, consumed(&g),
						     (uint32_t)(g.zs.data_type & 7), 0,
						     hist, hpos, hfill)))
					goto fail;
				last_u = upos;
				last_c = consumed(&g);
			}
		}
		for (int i = 0; i < 8; i++)
			if ((rc = next_byte(&g, &t[i]))) {
				if (rc < 0) {
					err = rc;
					goto fail;
				}
				snprintf(idx->damage, sizeof(idx->damage),
					 "gzip: the file ends inside the trailer of member %lu (compressed offset %llu)",
					 members, (unsigned long long)member_c);
				goto done;
			}
		if ((le32(t) != (uint32_t)crc || le32(t + 4) != (uint32_t)isize) &&
		    (flags & BFS_GZ_KEEP_BAD_CRC)) {
			if (!idx->damage[0])
				snprintf(idx->damage, sizeof(idx->damage),
					 "gzip: member %lu (compressed offset %llu) fails its %s check; its data are served all the same, each record checked by its own CRC",
					 members, (unsigned long long)member_c,
					 le32(t) != (uint32_t)crc ? "CRC-32" : "length (ISIZE)");
		} else if (le32(t) != (uint32_t)crc || le32(t + 4) != (uint32_t)isize) {
			snprintf(idx->damage, sizeof(idx->damage),
				 "gzip: member %lu (compressed offset %llu) fails its %s check; none of its bytes are used",
				 members, (unsigned long long)member_c,
				 le32(t) != (uint32_t)crc ? "CRC-32" : "length (ISIZE)");
			upos = member_u;
			drop_points_after(idx, member_u);
			if (own)
				idx->n--; /* its own start point (no window) */
			goto done;
		}
		members++;
		if (consumed(&g) >= csize) {
			idx->complete = 1;
			break;
		}
	}
done:
	idx->usize = upos;
	if (!idx->complete)
		bfs_seterr(errmsg, "%s", idx->damage);
	gzin_free(&g);
	free(obuf);
	free(hist);
	*out = idx;
	return 0;
fail:
	if (err == -ENOMEM)
		bfs_seterr(errmsg, "out of memory while indexing gzip data");
	else if (err != -EINVAL && err != -EFBIG)
		bfs_seterr(errmsg, "gzip: read failed: %s", strerror(-err));
	gzin_free(&g);
	free(obuf);
	free(hist);
	bfs_gzindex_free(idx);
	return err;
}

/* ---- saved form ------------------------------------------------------- */

#define GZ_MAGIC "BFSGZX01"

struct saved_hdr {
	char magic[8];
	uint64_t csize, usize, npoints;
};
struct saved_point {
	uint64_t uoff, coff;
	uint32_t bits, wlen, member, pad;
};

int bfs_gzindex_save(const bfs_gzindex *idx, void **blob, size_t *len)
{
	struct saved_hdr h;
	size_t n = sizeof(h);
	uint8_t *p, *q;

	if (!idx || !idx->complete || !blob || !len)
		return -EINVAL;
	for (size_t i = 0; i < idx->n; i++)
		n += sizeof(struct saved_point) + idx->pts[i].wlen;
	if (!(p = malloc(n)))
		return -ENOMEM;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, GZ_MAGIC, 8);
	h.csize = idx->csize;
	h.usize = idx->usize;
	h.npoints = idx->n;
	memcpy(p, &h, sizeof(h));
	q = p + sizeof(h);
	for (size_t i = 0; i < idx->n; i++) {
		const struct point *pt = &idx->pts[i];
		struct saved_point sp = { pt->uoff, pt->coff, pt->bits, pt->wlen, pt->member, 0 };

		memcpy(q, &sp, sizeof(sp));
		q += sizeof(sp);
		if (pt->wlen)
			memcpy(q, pt->window, pt->wlen);
		q += pt->wlen;
	}
	*blob = p;
	*len = n;
	return 0;
}

int bfs_gzindex_load(const void *blob, size_t len, uint64_t csize,
		     bfs_gzindex **out, char *errmsg)
{
	const uint8_t *p = blob, *end = p + len;
	struct saved_hdr h;
	bfs_gzindex *idx;
	int err = BFS_E_CORRUPT;

	*out = NULL;
	if (!blob || len < sizeof(h)) {
		bfs_seterr(errmsg, "gzip index: too short");
		return BFS_E_CORRUPT;
	}
	memcpy(&h, p, sizeof(h));
	p += sizeof(h);
	if (memcmp(h.magic, GZ_MAGIC, 8) || h.csize != csize ||
	    h.npoints == 0 || h.npoints > (len - sizeof(h)) / sizeof(struct saved_point)) {
		bfs_seterr(errmsg, "gzip index: bad header");
		return BFS_E_CORRUPT;
	}
	if (!(idx = calloc(1, sizeof(*idx))))
		return -ENOMEM;
	idx->csize = csize;
	idx->usize = h.usize;
	idx->complete = 1;
	if (!(idx->pts = calloc((size_t)h.npoints, sizeof(*idx->pts)))) {
		err = -ENOMEM;
		goto fail;
	}
	idx->cap = (size_t)h.npoints;
	for (uint64_t i = 0; i < h.npoints; i++) {
		struct saved_point sp;
		struct point *pt = &idx->pts[i];
		const struct point *prev = i ? &idx->pts[i - 1] : NULL;

		if ((size_t)(end - p) < sizeof(sp))
			goto bad;
		memcpy(&sp, p, sizeof(sp));
		p += sizeof(sp);
		if (sp.bits > 7 || sp.wlen > BFS_GZ_WINDOW || sp.wlen > sp.uoff ||
		    sp.member > 1 || (sp.member && (sp.wlen || sp.bits)) ||
		    sp.uoff > h.usize || sp.coff > csize || (sp.bits && sp.coff == 0) ||
		    (i == 0 && (sp.uoff || sp.coff || !sp.member)) ||
		    (prev && (sp.uoff < prev->uoff || sp.coff <= prev->coff)) ||
		    (size_t)(end - p) < sp.wlen)
			goto bad;
		pt->uoff = sp.uoff;
		pt->coff = sp.coff;
		pt->bits = sp.bits;
		pt->wlen = sp.wlen;
		pt->member = sp.member;
		idx->n++;
		if (sp.wlen) {
			if (!(pt->window = malloc(sp.wlen))) {
				err = -ENOMEM;
				goto fail;
			}
			memcpy(pt->window, p, sp.wlen);
			p += sp.wlen;
		}
	}
	if (p != end)
		goto bad;
	*out = idx;
	return 0;
bad:
	bfs_seterr(errmsg, "gzip index: a restart point is out of order or out of range");
fail:
	bfs_gzindex_free(idx);
	return err;
}

/* ---- cursors ---------------------------------------------------------- */

enum { ST_HEADER, ST_DEFLATE, ST_END };

struct bfs_gzcursor {
	gzin g;
	const bfs_gzindex *idx; /* the index its state belongs to */
	int valid;
	int state;
	uint64_t upos;          /* uncompressed offset of the next byte */
	uint8_t *out;           /* OUT_SZ: output before the wanted bytes */
};

int bfs_gzcursor_create(bfs_gzcursor **out)
{
	bfs_gzcursor *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return -ENOMEM;
	if (gzin_init(&c->g, -1, 0) || !(c->out = malloc(OUT_SZ))) {
		bfs_gzcursor_destroy(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void bfs_gzcursor_destroy(bfs_gzcursor *c)
{
	if (!c)
		return;
	gzin_free(&c->g);
	free(c->out);
	free(c);
}

/* The last point at or before off. */
static const struct point *point_for(const bfs_gzindex *idx, uint64_t off)
{
	size_t lo = 0, hi = idx->n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (idx->pts[mid].uoff <= off)
			lo = mid;
		else
			hi = mid;
	}
	return &idx->pts[lo];
}

static int restart(bfs_gzcursor *c, const bfs_gzindex *idx,
		   const struct point *p, char *errmsg)
{
	int rc;

	c->idx = idx;
	c->valid = 0;
	c->upos = p->uoff;
	if (p->member) {
		seek_to(&c->g, p->coff);
		c->state = ST_HEADER;
		c->valid = 1;
		return 0;
	}
	inflateReset(&c->g.zs);
	seek_to(&c->g, p->coff - (p->bits ? 1 : 0));
	if (p->bits) {
		unsigned b;

		if ((rc = next_byte(&c->g, &b)))
			goto cut;
		if (inflatePrime(&c->g.zs, (int)p->bits, (int)(b >> (8 - p->bits))) != Z_OK)
			goto bad;
	}
	if (p->wlen && inflateSetDictionary(&c->g.zs, p->window, p->wlen) != Z_OK)
		goto bad;
	c->state = ST_DEFLATE;
	c->valid = 1;
	return 0;
cut:
	if (rc < 0) {
		bfs_seterr(errmsg, "gzip: read failed: %s", strerror(-rc));
		return rc;
	}
bad:
	bfs_seterr(errmsg, "gzip: the restart point at compressed offset %llu no longer fits the file (changed since it was indexed?)",
		   (unsigned long long)p->coff);
	return BFS_E_CORRUPT;
}

int bfs_gzcursor_read(bfs_gzcursor *c, const bfs_gzindex *idx, int fd,
		      void *buf, size_t n, uint64_t off, char *errmsg)
{
	const struct point *p;
	uint8_t *dst = buf;
	int rc;

	if (!n)
		return 0;
	if (off > idx->usize || n > idx->usize - off) {
		if (idx->complete)
			bfs_seterr(errmsg, "gzip: read of %zu bytes at %llu runs past the end of the data (%llu bytes)",
				   n, (unsigned long long)off,
				   (unsigned long long)idx->usize);
		else
			bfs_seterr(errmsg, "%s", idx->damage);
		return -EIO;
	}
	c->g.fd = fd;
	c->g.csize = idx->csize;
	p = point_for(idx, off);
	if (!(c->valid && c->idx == idx && c->upos <= off && c->upos >= p->uoff) &&
	    (rc = restart(c, idx, p, errmsg)))
		return rc;
	while (c->upos < off + n) {
		const char *what = "";
		size_t made;
		uint8_t *to;
		uInt room;
		int zr;

		if (c->state == ST_HEADER) {
			rc = member_header(&c->g, &what);
			if (rc) {
				c->valid = 0;
				if (rc < 0 && rc != -2) {
					bfs_seterr(errmsg, "gzip: read failed: %s", strerror(-rc));
					return rc;
				}
				bfs_seterr(errmsg, "gzip: no member header at compressed offset %llu any more (changed since it was indexed?)",
					   (unsigned long long)consumed(&c->g));
				return BFS_E_CORRUPT;
			}
			inflateReset(&c->g.zs);
			c->state = ST_DEFLATE;
			continue;
		}
		if (c->state == ST_END) {
			c->valid = 0;
			bfs_seterr(errmsg, "gzip: the data end before offset %llu (changed since it was indexed?)",
				   (unsigned long long)(off + n));
			return BFS_E_CORRUPT;
		}
		if ((rc = refill(&c->g)) < 0) {
			c->valid = 0;
			bfs_seterr(errmsg, "gzip: read failed: %s", strerror(-rc));
			return rc;
		}
		if (c->upos < off) {
			to = c->out;
			room = off - c->upos < OUT_SZ ? (uInt)(off - c->upos) : OUT_SZ;
		} else {
			to = dst + (c->upos - off);
			room = off + n - c->upos < (1u << 30) ? (uInt)(off + n - c->upos) : (1u << 30);
		}
		c->g.zs.next_out = to;
		c->g.zs.avail_out = room;
		zr = inflate(&c->g.zs, Z_NO_FLUSH);
		made = room - c->g.zs.avail_out;
		c->upos += made;
		if (rc == 1 && !made && zr != Z_STREAM_END) {
			/* no input left and nothing more came out */
			c->valid = 0;
			bfs_seterr(errmsg, "gzip: the file ends at compressed offset %llu, inside deflate data (changed since it was indexed?)",
				   (unsigned long long)consumed(&c->g));
			return BFS_E_CORRUPT;
		}
		if (zr == Z_STREAM_END) {
			unsigned t;

			for (int i = 0; i < 8; i++) /* the trailer, checked when indexed */
				if ((rc = next_byte(&c->g, &t))) {
					c->state = ST_END;
					break;
				}
			if (c->state != ST_END)
				c->state = consumed(&c->g) >= c->g.csize ? ST_END : ST_HEADER;
			continue;
		}
		if (zr != Z_OK && zr != Z_BUF_ERROR) {
			c->valid = 0; /* the next read starts again */
			if (c->upos >= off + n)
				return 0; /* what was asked for came before it */
			if (zr == Z_MEM_ERROR) {
				bfs_seterr(errmsg, "gzip: out of memory");
				return -ENOMEM;
			}
			bfs_seterr(errmsg, "gzip: the deflate data before compressed offset %llu no longer inflate (%s; changed since it was indexed?)",
				   (unsigned long long)consumed(&c->g),
				   c->g.zs.msg ? c->g.zs.msg : "data error");
			return BFS_E_CORRUPT;
		}
	}
	return 0;
}

static int gz_pread(void *ctx, void *buf, size_t n, uint64_t off, char *errmsg)
{
	bfs_gz_reader_ctx *r = ctx;
	int rc = bfs_gzcursor_read(r->cursor, r->idx, r->fd, buf, n, off, errmsg);

	return rc == BFS_E_CORRUPT ? -EIO : rc;
}

bfs_reader bfs_gz_reader(bfs_gz_reader_ctx *ctx)
{
	bfs_reader r = { gz_pread, ctx };

	return r;
}
