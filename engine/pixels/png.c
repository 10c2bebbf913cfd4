/*
 * png.c - PNG to packed RGB8 with TensorFlow's decode_png rules (png.h):
 * the IHDR read by hand (nothing allocated), then libspng's progressive
 * decode in the file's own sample format, one row at a time, converted
 * here to RGB8 so that every rule is ours.  libspng's allocations go
 * through a counting allocator that refuses any past the call's bound.
 */
#include "engine/pixels/png.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>
#include <zlib.h>

#include "engine/base/error.h"

static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static int channels_of(int color_type)
{
	switch (color_type) {
	case 0: return 1;
	case 2: return 3;
	case 3: return 1;
	case 4: return 2;
	case 6: return 4;
	default: return 0;
	}
}

/* Bytes of one row of the file's samples (no filter byte). */
static size_t row_bytes(uint32_t width, int bit_depth, int color_type)
{
	return ((size_t)width * (size_t)channels_of(color_type) *
		(size_t)bit_depth + 7) / 8;
}

/* libspng 0.7's progressive decode writes nothing for the rows of an
 * interlaced image of 1, 2 or 4 bits per sample, so such an image is
 * decoded whole in its own format (at most half a byte per pixel). */
static int decode_whole(uint32_t height, int bit_depth, int interlaced)
{
	(void)height;
	return interlaced && bit_depth < 8;
}

size_t bfs_png_work_bytes(uint32_t width, uint32_t height, int bit_depth,
			  int color_type, int interlaced)
{
	size_t rb = row_bytes(width, bit_depth, color_type);

	/* libspng keeps three scanlines (current, previous, filtered) and
	 * one output row, each the row plus a filter byte and padding; we
	 * keep one more row of our own (or the whole image, above). */
	return 6 * (rb + 64) + BFS_PNG_WORK_BASE +
	       (decode_whole(height, bit_depth, interlaced) ? rb * height : 0);
}

int bfs_png_header(const uint8_t *p, size_t len, bfs_png_info *info,
		   char *errmsg)
{
	uint32_t w, h, crc;
	int depth, ct, ok;

	if ((!p && len) || !info)
		return -EINVAL;
	if (len < 8 || memcmp(p, png_sig, 8)) {
		bfs_seterr(errmsg, "not a PNG: no PNG signature");
		return BFS_E_DECODE;
	}
	if (len < 8 + 8 + 13 + 4) {
		bfs_seterr(errmsg, "PNG cut short before the end of its IHDR chunk (%zu bytes)",
			   len);
		return BFS_E_DECODE;
	}
	if (be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4)) {
		bfs_seterr(errmsg, "PNG does not start with a 13-byte IHDR chunk");
		return BFS_E_DECODE;
	}
	crc = (uint32_t)crc32(0, p + 12, 4 + 13);
	if (crc != be32(p + 29)) {
		bfs_seterr(errmsg, "PNG IHDR chunk fails its CRC");
		return BFS_E_DECODE;
	}
	w = be32(p + 16);
	h = be32(p + 20);
	depth = p[24];
	ct = p[25];
	if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu) {
		bfs_seterr(errmsg, "PNG of %ux%u pixels: each side must be 1 to 2^31-1", w, h);
		return BFS_E_DECODE;
	}
	if (w > BFS_PNG_MAX_SIDE || h > BFS_PNG_MAX_SIDE) {
		bfs_seterr(errmsg, "%ux%u PNG: a side is over %u pixels, the limit libpng (and so TensorFlow) keeps",
			   w, h, BFS_PNG_MAX_SIDE);
		return BFS_E_DECODE;
	}
	switch (ct) {
	case 0: ok = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16; break;
	case 3: ok = depth == 1 || depth == 2 || depth == 4 || depth == 8; break;
	case 2: case 4: case 6: ok = depth == 8 || depth == 16; break;
	default: ok = 0;
	}
	if (!ok) {
		bfs_seterr(errmsg, "PNG IHDR: bit depth %d with color type %d is not a PNG format",
			   depth, ct);
		return BFS_E_DECODE;
	}
	if (p[26] != 0 || p[27] != 0 || p[28] > 1) {
		bfs_seterr(errmsg, "PNG IHDR: unknown compression, filter or interlace method (%d, %d, %d)",
			   p[26], p[27], p[28]);
		return BFS_E_DECODE;
	}
	info->width = (int)w;
	info->height = (int)h;
	info->bit_depth = depth;
	info->color_type = ct;
	info->interlaced = p[28];
	info->work_bytes = bfs_png_work_bytes(w, h, depth, ct, p[28]);
	return 0;
}

/* ---- the counting allocator ------------------------------------------- */

/* libspng's allocator hooks take no context, so the count of the decode
 * running on this thread is reached through a thread-local pointer, set
 * for the length of bfs_png_decode only. */
struct budget {
	size_t used, cap;
	int refused;   /* an allocation went past cap */
};
static __thread struct budget *tl_budget;

#define HDR 16 /* keeps max_align_t alignment */

static void *b_malloc(size_t n)
{
	struct budget *b = tl_budget;
	uint8_t *p;

	if (!b)
		return NULL;
	if (b->cap - b->used < HDR || n > b->cap - b->used - HDR) {
		b->refused = 1;
		return NULL;
	}
	if (!(p = malloc(n + HDR)))
		return NULL;
	memcpy(p, &n, sizeof(n));
	b->used += n + HDR;
	return p + HDR;
}

static void b_free(void *q)
{
	struct budget *b = tl_budget;
	uint8_t *p = q;
	size_t n;

	if (!p)
		return;
	p -= HDR;
	memcpy(&n, p, sizeof(n));
	if (b)
		b->used -= n + HDR;
	free(p);
}

static void *b_calloc(size_t k, size_t n)
{
	void *p;

	if (n && k > SIZE_MAX / n)
		return NULL;
	if ((p = b_malloc(k * n)))
		memset(p, 0, k * n);
	return p;
}

static void *b_realloc(void *q, size_t n)
{
	uint8_t *p = q;
	size_t old;
	void *r;

	if (!p)
		return b_malloc(n);
	memcpy(&old, p - HDR, sizeof(old));
	if (!(r = b_malloc(n)))
		return NULL;
	memcpy(r, p, old < n ? old : n);
	b_free(p);
	return r;
}

/* ---- the chunks libspng sees ------------------------------------------ */

/*
 * libspng reads the PNG through this filter, which passes the signature
 * and the critical chunks (IHDR, PLTE, IDAT, IEND, and any other whose
 * name starts with a capital, which libspng refuses as libpng does) and
 * drops every ancillary one.  None of those changes what TensorFlow
 * decodes (gamma, color profiles and sBIT are not applied, transparency is
 * dropped with alpha), libpng only warns about a damaged one, and libspng
 * would keep them in memory or refuse one past its limits: so this is both
 * TensorFlow's rule and the work-memory bound.
 */
struct filter {
	const uint8_t *p;
	size_t len;
	size_t pos;       /* next input byte */
	size_t pass;      /* bytes of the current critical chunk still to pass */
};

static int filter_read(spng_ctx *ctx, void *user, void *dst, size_t n)
{
	struct filter *f = user;
	uint8_t *d = dst;

	(void)ctx;
	while (n) {
		size_t k;

		if (!f->pass) {
			uint32_t clen;

			if (f->pos < 8) { /* the signature */
				f->pass = 8 - f->pos;
				continue;
			}
			if (f->len - f->pos < 8) { /* a cut chunk header */
				f->pass = f->len - f->pos;
				if (!f->pass)
					return SPNG_IO_EOF;
				continue;
			}
			clen = be32(f->p + f->pos);
			if (f->p[f->pos + 4] & 0x20) { /* ancillary: dropped */
				f->pos = clen <= f->len && (size_t)clen + 12 <= f->len - f->pos
					 ? f->pos + (size_t)clen + 12 : f->len;
				continue;
			}
			/* critical (cut or not): libspng says what is wrong */
			f->pass = clen <= f->len && (size_t)clen + 12 <= f->len - f->pos
				  ? (size_t)clen + 12 : f->len - f->pos;
			continue;
		}
		k = n < f->pass ? n : f->pass;
		memcpy(d, f->p + f->pos, k);
		d += k;
		n -= k;
		f->pos += k;
		f->pass -= k;
	}
	return 0;
}

/* Whether png[0..len) has a whole IEND chunk, walking the chunks from the
 * signature (libspng does not insist on one; libpng, so TensorFlow, does). */
static int has_iend(const uint8_t *p, size_t len)
{
	size_t pos = 8;

	while (len - pos >= 12) {
		uint32_t clen = be32(p + pos);

		if (!memcmp(p + pos + 4, "IEND", 4))
			return clen == 0;
		if (clen > len || (size_t)clen + 12 > len - pos)
			return 0;
		pos += (size_t)clen + 12;
	}
	return 0;
}

/* ---- decoding --------------------------------------------------------- */

/* Sample x of a packed row of `depth`-bit samples (1, 2, 4 or 8). */
static unsigned packed(const uint8_t *row, size_t x, int depth)
{
	size_t bit = x * (size_t)depth;

	return (unsigned)(row[bit / 8] >> (8 - depth - (int)(bit % 8))) &
	       ((1u << depth) - 1);
}

/* libpng's png_set_expand_gray_1_2_4_to_8: v * 255 / (2^depth - 1). */
static uint8_t gray_to_8(unsigned v, int depth)
{
	switch (depth) {
	case 1: return (uint8_t)(v * 255);
	case 2: return (uint8_t)(v * 85);
	case 4: return (uint8_t)(v * 17);
	default: return (uint8_t)v;
	}
}

/* Convert the pixels of `row` (the file's format, 16-bit samples in host
 * order) at x = x0, x0 + dx, ... into out_row (RGB8).  -1 with *bad set
 * to the first palette index past the palette, else 0. */
static int convert_row(const bfs_png_info *in, const uint8_t *row,
		       const struct spng_plte *plte, uint32_t x0, uint32_t dx,
		       uint8_t *out_row, unsigned *bad)
{
	uint32_t w = (uint32_t)in->width;
	int d = in->bit_depth, ct = in->color_type;
	int ch = channels_of(ct);

	for (uint32_t x = x0; x < w; x += dx) {
		uint8_t *o = out_row + (size_t)x * 3;

		if (ct == 3) {
			unsigned i = d == 8 ? row[x] : packed(row, x, d);

			if (i >= plte->n_entries) {
				*bad = i;
				return -1;
			}
			o[0] = plte->entries[i].red;
			o[1] = plte->entries[i].green;
			o[2] = plte->entries[i].blue;
			continue;
		}
		if (d == 16) {
			const uint8_t *s = row + (size_t)x * ch * 2;
			uint16_t v[3];

			/* host-order uint16: the high byte is v >> 8 */
			for (int c = 0; c < (ch >= 3 ? 3 : 1); c++) {
				memcpy(&v[c], s + 2 * c, 2);
				v[c] >>= 8;
			}
			if (ch < 3)
				v[1] = v[2] = v[0];
			o[0] = (uint8_t)v[0];
			o[1] = (uint8_t)v[1];
			o[2] = (uint8_t)v[2];
			continue;
		}
		if (d < 8) { /* gray only */
			o[0] = o[1] = o[2] = gray_to_8(packed(row, x, d), d);
			continue;
		}
		if (ch >= 3) {
			memcpy(o, row + (size_t)x * ch, 3);
		} else {
			o[0] = o[1] = o[2] = row[(size_t)x * ch];
		}
	}
	return 0;
}

static const uint32_t adam7_x0[7] = { 0, 4, 0, 2, 0, 1, 0 };
static const uint32_t adam7_dx[7] = { 8, 8, 4, 4, 2, 2, 1 };

int bfs_png_decode(const uint8_t *png, size_t len, const bfs_png_info *info,
		   uint8_t *out, size_t out_len, size_t work_max,
		   char *errmsg)
{
	struct spng_alloc alloc = { b_malloc, b_realloc, b_calloc, b_free };
	struct budget budget = { 0, work_max, 0 };
	struct spng_plte plte = { 0 };
	struct filter filt = { png, len, 0, 0 };
	struct spng_ihdr ihdr;
	size_t rlen, stride;
	spng_ctx *ctx = NULL;
	uint8_t *row = NULL;
	int rc, err = 0, whole;

	if ((!png && len) || !info || !out || info->width <= 0 ||
	    info->height <= 0)
		return -EINVAL;
	stride = (size_t)info->width * 3;
	if (out_len / (size_t)info->height < stride)
		return -EINVAL;
	tl_budget = &budget;
	if (!(ctx = spng_ctx_new2(&alloc, 0))) {
		err = budget.refused ? BFS_E_MEMORY : -ENOMEM;
		bfs_seterr(errmsg, "out of memory for a PNG decoder");
		goto out;
	}
	/* libpng's defaults, which TensorFlow keeps: a bad CRC is an error in
	 * a critical chunk, and drops an ancillary one */
	spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
	spng_set_image_limits(ctx, BFS_PNG_MAX_SIDE, BFS_PNG_MAX_SIDE);
	if ((rc = spng_set_png_stream(ctx, filter_read, &filt)) ||
	    (rc = spng_get_ihdr(ctx, &ihdr)))
		goto spng_error;
	if (ihdr.width != (uint32_t)info->width ||
	    ihdr.height != (uint32_t)info->height ||
	    ihdr.bit_depth != info->bit_depth ||
	    ihdr.color_type != info->color_type) {
		bfs_seterr(errmsg, "PNG header differs from the one read before");
		err = BFS_E_DECODE;
		goto out;
	}
	if (info->color_type == 3 && (rc = spng_get_plte(ctx, &plte))) {
		if (rc == SPNG_ECHUNKAVAIL) {
			bfs_seterr(errmsg, "palette PNG has no PLTE chunk");
			err = BFS_E_DECODE;
			goto out;
		}
		goto spng_error;
	}
	if ((rc = spng_decoded_image_size(ctx, SPNG_FMT_PNG, &rlen)))
		goto spng_error;
	whole = decode_whole((uint32_t)info->height, info->bit_depth,
			     info->interlaced);
	if (!whole)
		rlen /= (size_t)info->height; /* one row of the file's format */
	if (!(row = b_malloc(rlen ? rlen : 1))) {
		err = budget.refused ? BFS_E_MEMORY : -ENOMEM;
		bfs_seterr(errmsg, "decoding this %dx%d PNG needs more than its %zu bytes of work memory",
			   info->width, info->height, work_max);
		goto out;
	}
	if (whole) {
		unsigned bad = 0;
		size_t rb = rlen / (size_t)info->height;

		/* libspng ORs a pass's sub-byte samples into the image, so it
		 * must start zeroed (or the result depends on what the memory
		 * held before: found by decoding one PNG after another) */
		memset(row, 0, rlen);
		if ((rc = spng_decode_image(ctx, row, rlen, SPNG_FMT_PNG, 0)))
			goto spng_error;
		for (int y = 0; y < info->height; y++)
			if (convert_row(info, row + (size_t)y * rb, &plte, 0, 1,
					out + (size_t)y * stride, &bad)) {
				bfs_seterr(errmsg, "PNG palette index %u is past its %u palette entries",
					   bad, plte.n_entries);
				err = BFS_E_DECODE;
				goto out;
			}
		goto chunks;
	}
	if ((rc = spng_decode_image(ctx, NULL, 0, SPNG_FMT_PNG,
				    SPNG_DECODE_PROGRESSIVE)))
		goto spng_error;
	for (;;) {
		struct spng_row_info ri;
		unsigned bad = 0;
		uint32_t x0 = 0, dx = 1;

		if ((rc = spng_get_row_info(ctx, &ri)))
			goto spng_error;
		memset(row, 0, rlen); /* as for a whole image, below */
		rc = spng_decode_row(ctx, row, rlen);
		if (rc && rc != SPNG_EOI)
			goto spng_error;
		if (info->interlaced) {
			x0 = adam7_x0[ri.pass];
			dx = adam7_dx[ri.pass];
		}
		if (ri.row_num >= (uint32_t)info->height ||
		    convert_row(info, row, &plte, x0, dx,
				out + (size_t)ri.row_num * stride, &bad)) {
			if (ri.row_num >= (uint32_t)info->height)
				bfs_seterr(errmsg, "PNG decoder returned row %u of %d",
					   ri.row_num, info->height);
			else
				bfs_seterr(errmsg, "PNG palette index %u is past its %u palette entries",
					   bad, plte.n_entries);
			err = BFS_E_DECODE;
			goto out;
		}
		if (rc == SPNG_EOI)
			break;
	}
chunks:
	/* the rest of the file, to IEND, as libpng's png_read_end */
	if ((rc = spng_decode_chunks(ctx)))
		goto spng_error;
	if (!has_iend(png, len)) {
		bfs_seterr(errmsg, "PNG has no IEND chunk (cut short?)");
		err = BFS_E_DECODE;
	}
	goto out;

spng_error:
	if (budget.refused) {
		err = BFS_E_MEMORY;
		bfs_seterr(errmsg, "decoding this %dx%d PNG needs more than its %zu bytes of work memory",
			   info->width, info->height, work_max);
	} else if (rc == SPNG_EMEM) {
		err = -ENOMEM;
		bfs_seterr(errmsg, "out of memory while decoding a %dx%d PNG",
			   info->width, info->height);
	} else {
		err = BFS_E_DECODE;
		bfs_seterr(errmsg, "PNG: %s", spng_strerror(rc));
	}
out:
	b_free(row);
	spng_ctx_free(ctx);
	tl_budget = NULL;
	return err;
}
