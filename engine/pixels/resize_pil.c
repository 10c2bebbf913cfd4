/*
 * resize_pil.c - Pillow's bilinear resize (Image.BILINEAR), bit for bit:
 * see resize_pil.h for the arithmetic.  Written from Pillow's documented
 * behaviour and its Resample.c's rules (coefficients, rounding, the pass
 * order and the skipped passes), not from its code.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "engine/pixels/resize_pil.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/pixels/resize.h"

#define PIL_BITS 22 /* Pillow's PRECISION_BITS for 8-bit images: 32 - 8 - 2 */

static int dim_ok(int n)
{
	return n >= 1 && n <= BFS_RESIZE_MAX_DIM;
}

/* The coefficients per output pixel of one axis: 2 * ceil(support) + 1. */
static int64_t taps_of(int in, int out)
{
	double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale;

	return (int64_t)ceil(fs) * 2 + 1;
}

/* One axis: for the n output pixels off .. off + n - 1 of an in -> out
 * resize (reversed when rev), the first source pixel, the tap count and
 * ksize fixed-point coefficients each. */
struct axis {
	int32_t *first, *count, *k;
	int ksize;
};

static double tri(double t)
{
	if (t < 0.0)
		t = -t;
	return t < 1.0 ? 1.0 - t : 0.0;
}

static void axis_fill(struct axis *a, int in, int out, int off, int n, int rev)
{
	double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale;
	double support = 1.0 * fs, ss = 1.0 / fs;

	for (int j = 0; j < n; j++) {
		int i = off + (rev ? n - 1 - j : j);
		double center = (i + 0.5) * scale, ww = 0.0;
		int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
		int32_t *k = a->k + (size_t)j * (size_t)a->ksize;

		if (lo < 0)
			lo = 0;
		if (hi > in)
			hi = in;
		hi -= lo;
		/* the weights twice (the same bits): once for their sum, once
		 * each divided by it, as Pillow normalises in place */
		for (int x = 0; x < hi; x++)
			ww += tri((x + lo - center + 0.5) * ss);
		for (int x = 0; x < hi; x++) {
			double w = tri((x + lo - center + 0.5) * ss);

			if (ww != 0.0)
				w /= ww;
			k[x] = w < 0 ? (int32_t)(-0.5 + w * (1 << PIL_BITS))
				     : (int32_t)(0.5 + w * (1 << PIL_BITS));
		}
		a->first[j] = lo;
		a->count[j] = hi;
	}
}

static uint8_t clip8(int32_t s)
{
	s >>= PIL_BITS; /* arithmetic shift: floor, as Pillow's */
	return s < 0 ? 0 : s > 255 ? 255 : (uint8_t)s;
}

/* The scratch a window needs: both axes' tables, and the horizontal pass's
 * rows (at most every source row).  0 when it would not fit. */
static uint64_t pil_tmp_bytes(int sw, int sh, int dw, int dh)
{
	uint64_t a = (uint64_t)dw * (uint64_t)sh, b = (uint64_t)dh * (uint64_t)sw;

	return (a > b ? a : b) * 3;
}

static size_t window_scratch(int sw, int sh, int fw, int fh, int dw, int dh)
{
	uint64_t kx = (uint64_t)taps_of(sw, fw), ky = (uint64_t)taps_of(sh, fh);
	uint64_t n = 64; /* alignment slack */

	n += ((uint64_t)dw * (kx + 2) + (uint64_t)dh * (ky + 2)) * sizeof(int32_t) + 16;
	n += pil_tmp_bytes(sw, sh, dw, dh) + 16 + (uint64_t)dw * (uint64_t)dh * 3 + 16;
	n += (uint64_t)(dw > sw ? dw : sw) * 3 * sizeof(int32_t); /* vpass_u8's sums */
	if (n > (uint64_t)SIZE_MAX / 2 || n > ((uint64_t)1 << 46))
		return 0;
	return (size_t)n;
}

static void *align16(void *p)
{
	return (void *)(((uintptr_t)p + 15) & ~(uintptr_t)15);
}

/* A pass over one axis: out (n outputs per line, lines lines) from in,
 * where output j of a line reads in's elements first[j] .. first[j] +
 * count[j] - 1 of that line, each `step` bytes apart; lines are `lstep`
 * bytes apart in in, and out is written as uint8 with element j of line l
 * at out + l * olstep + j * ostep.  first[] is relative to in. */
static void pass_u8(const uint8_t *restrict in, size_t step, size_t lstep, int lines,
		    const struct axis *a, int n, int base, uint8_t *restrict out, size_t ostep,
		    size_t olstep)
{
	for (int l = 0; l < lines; l++) {
		const uint8_t *line = in + (size_t)l * lstep;
		uint8_t *o = out + (size_t)l * olstep;

		for (int j = 0; j < n; j++) {
			const int32_t *k = a->k + (size_t)j * (size_t)a->ksize;
			const uint8_t *q = line + (size_t)(a->first[j] - base) * step;
			int32_t s0 = 1 << (PIL_BITS - 1), s1 = s0, s2 = s0;

			for (int x = 0; x < a->count[j]; x++, q += step) {
				s0 += q[0] * k[x];
				s1 += q[1] * k[x];
				s2 += q[2] * k[x];
			}
			o[(size_t)j * ostep + 0] = clip8(s0);
			o[(size_t)j * ostep + 1] = clip8(s1);
			o[(size_t)j * ostep + 2] = clip8(s2);
		}
	}
}

/* The vertical pass row by row: output row i (of n) is the sum over its
 * taps y of row first[i] - base + y of in (istride apart) times k[y],
 * over `bytes` bytes of each row (the same arithmetic as pass_u8, in an
 * order the compiler vectorises).  acc: `bytes` int32s of scratch. */
static void vpass_u8(const uint8_t *restrict in, size_t istride, int base,
		     const struct axis *a, int n, size_t bytes, uint8_t *restrict out,
		     size_t ostride, int32_t *restrict acc)
{
	for (int i = 0; i < n; i++) {
		const int32_t *k = a->k + (size_t)i * (size_t)a->ksize;
		const uint8_t *restrict row = in + (size_t)(a->first[i] - base) * istride;
		uint8_t *restrict o = out + (size_t)i * ostride;

		for (size_t e = 0; e < bytes; e++)
			acc[e] = 1 << (PIL_BITS - 1);
		for (int y = 0; y < a->count[i]; y++, row += istride) {
			int32_t ky = k[y];

			for (size_t e = 0; e < bytes; e++)
				acc[e] += row[e] * ky;
		}
		for (size_t e = 0; e < bytes; e++)
			o[e] = clip8(acc[e]);
	}
}

/* The lowest first and the highest end of an axis's n outputs. */
static void span(const struct axis *a, int n, int *lo, int *hi)
{
	*lo = a->first[0];
	*hi = a->first[0] + a->count[0];
	for (int j = 1; j < n; j++) {
		if (a->first[j] < *lo)
			*lo = a->first[j];
		if (a->first[j] + a->count[j] > *hi)
			*hi = a->first[j] + a->count[j];
	}
}

/* An axis that keeps its size: output j is input off + j (reversed when
 * rev), one tap of weight 1, which the passes below copy instead. */
static void axis_identity(struct axis *a, int off, int n, int rev)
{
	for (int j = 0; j < n; j++) {
		a->first[j] = off + (rev ? n - 1 - j : j);
		a->count[j] = 1;
	}
}

/* The dw x dh window at (ox, oy) of Pillow's resize of src to fw x fh,
 * mirrored when mirror.  Arguments are checked.
 * Pass order (Pillow 13's ImagingResampleInner): the horizontal pass
 * first, over the rows the vertical one reads, unless the height loses
 * more than twice as many pixels as the width (sh - fh > 0 and sh - fh >
 * 2 * (sw - fw), on the full resized size); then the vertical pass first,
 * over the columns the horizontal one reads.  A pass whose axis keeps its
 * size is not run. */
static void resize_window(const uint8_t *src, int sw, int sh, size_t stride, int fw, int fh,
			  int ox, int oy, void *dst, int dw, int dh, bfs_dtype dt, int mirror,
			  void *scratch)
{
	int need_h = fw != sw, need_v = fh != sh;
	int h_first = !(sh - fh > 0 && (int64_t)(sh - fh) > 2 * (int64_t)(sw - fw));
	struct axis ax, ay;
	float f32[256];
	uint16_t f16[256];
	int32_t *p = align16(scratch);
	uint8_t *tmp, *u8;
	int32_t *acc;        /* vpass_u8's sums: a row of the wider of dw, sw */
	size_t out_px = (size_t)dw * (size_t)dh * 3;

	for (int v = 0; v < 256; v++)
		f32[v] = (float)v / 255.0f;
	if (dt == BFS_DTYPE_FLOAT16)
		bfs_resize_f16_n(f32, f16, 256);

	ax.ksize = (int)taps_of(sw, fw);
	ax.first = p;
	ax.count = p + dw;
	ax.k = p + 2 * (size_t)dw;
	p = ax.k + (size_t)dw * (size_t)ax.ksize;
	ay.ksize = (int)taps_of(sh, fh);
	ay.first = p;
	ay.count = p + dh;
	ay.k = p + 2 * (size_t)dh;
	p = ay.k + (size_t)dh * (size_t)ay.ksize;
	tmp = align16(p);
	/* the result as uint8 goes straight to dst, else after tmp */
	u8 = dt == BFS_DTYPE_UINT8 ? dst : align16(tmp + pil_tmp_bytes(sw, sh, dw, dh));
	acc = align16((dt == BFS_DTYPE_UINT8 ? tmp + pil_tmp_bytes(sw, sh, dw, dh)
					     : u8 + (size_t)dw * (size_t)dh * 3));

	if (need_h)
		axis_fill(&ax, sw, fw, ox, dw, mirror);
	else
		axis_identity(&ax, ox, dw, mirror);
	if (need_v)
		axis_fill(&ay, sh, fh, oy, dh, 0);
	else
		axis_identity(&ay, oy, dh, 0);

	if (need_h && need_v && h_first) {
		int r0, r1;

		span(&ay, dh, &r0, &r1);
		pass_u8(src + (size_t)r0 * stride, 3, stride, r1 - r0, &ax, dw, 0, tmp, 3,
			(size_t)dw * 3);
		vpass_u8(tmp, (size_t)dw * 3, r0, &ay, dh, (size_t)dw * 3, u8, (size_t)dw * 3, acc);
	} else if (need_h && need_v) {
		int c0, c1;

		span(&ax, dw, &c0, &c1);
		vpass_u8(src + (size_t)c0 * 3, stride, 0, &ay, dh, (size_t)(c1 - c0) * 3, tmp,
			 (size_t)(c1 - c0) * 3, acc);
		pass_u8(tmp, 3, (size_t)(c1 - c0) * 3, dh, &ax, dw, c0, u8, 3, (size_t)dw * 3);
	} else if (need_h) {
		pass_u8(src + (size_t)oy * stride, 3, stride, dh, &ax, dw, 0, u8, 3,
			(size_t)dw * 3);
	} else if (need_v) {
		if (!mirror) {
			vpass_u8(src + (size_t)ox * 3, stride, 0, &ay, dh, (size_t)dw * 3, u8,
				 (size_t)dw * 3, acc);
		} else {
			/* the window's columns reversed: each its own line */
			for (int j = 0; j < dw; j++)
				pass_u8(src + (size_t)ax.first[j] * 3, stride, 3, 1, &ay, dh, 0,
					u8 + (size_t)j * 3, (size_t)dw * 3, 3);
		}
	} else {
		for (int i = 0; i < dh; i++)
			for (int j = 0; j < dw; j++)
				memcpy(u8 + ((size_t)i * dw + j) * 3,
				       src + (size_t)(oy + i) * stride + (size_t)ax.first[j] * 3, 3);
	}
	if (dt == BFS_DTYPE_FLOAT32)
		for (size_t e = 0; e < out_px; e++)
			((float *)dst)[e] = f32[u8[e]];
	else if (dt == BFS_DTYPE_FLOAT16)
		for (size_t e = 0; e < out_px; e++)
			((uint16_t *)dst)[e] = f16[u8[e]];
}

static int args_ok(const uint8_t *src, int sw, int sh, size_t stride, const void *dst, int dw,
		   int dh, bfs_dtype dt, const void *scratch)
{
	return src && dst && scratch && dim_ok(sw) && dim_ok(sh) && dim_ok(dw) && dim_ok(dh) &&
	       stride >= (size_t)sw * 3 &&
	       (dt == BFS_DTYPE_FLOAT32 || dt == BFS_DTYPE_UINT8 || dt == BFS_DTYPE_FLOAT16);
}

size_t bfs_resize_pil_scratch_size(int src_w, int src_h, int dst_w, int dst_h)
{
	if (!dim_ok(src_w) || !dim_ok(src_h) || !dim_ok(dst_w) || !dim_ok(dst_h))
		return 0;
	return window_scratch(src_w, src_h, dst_w, dst_h, dst_w, dst_h);
}

int bfs_resize_pil(const uint8_t *src, int src_w, int src_h, size_t src_stride, void *dst,
		   int dst_w, int dst_h, bfs_dtype dtype, unsigned flags, void *scratch)
{
	if (!args_ok(src, src_w, src_h, src_stride, dst, dst_w, dst_h, dtype, scratch) ||
	    (flags & ~(unsigned)(BFS_RESIZE_MIRROR | BFS_RESIZE_STREAM)) ||
	    !window_scratch(src_w, src_h, dst_w, dst_h, dst_w, dst_h))
		return -EINVAL;
	resize_window(src, src_w, src_h, src_stride, dst_w, dst_h, 0, 0, dst, dst_w, dst_h,
		      dtype, !!(flags & BFS_RESIZE_MIRROR), scratch);
	return 0;
}

/* Python's round(d / 2) for d >= 0: a half goes to the even neighbour. */
static int center_offset(int64_t d)
{
	int64_t k = d / 2;

	return (int)((d & 1) && (k & 1) ? k + 1 : k);
}

/* torchvision's Resize(short_side) size and CenterCrop offsets. */
static int crop_geometry(int src_w, int src_h, int short_side, int dst_w, int dst_h,
			 int *fw, int *fh, int *ox, int *oy)
{
	int64_t w, h;

	if (!dim_ok(src_w) || !dim_ok(src_h) || !dim_ok(short_side) || !dim_ok(dst_w) ||
	    !dim_ok(dst_h))
		return -EINVAL;
	if (src_w <= src_h) {
		w = short_side;
		h = (int64_t)short_side * src_h / src_w;
	} else {
		h = short_side;
		w = (int64_t)short_side * src_w / src_h;
	}
	if (w > BFS_RESIZE_MAX_DIM || h > BFS_RESIZE_MAX_DIM || dst_w > w || dst_h > h)
		return -EINVAL;
	*fw = (int)w;
	*fh = (int)h;
	*ox = center_offset(w - dst_w);
	*oy = center_offset(h - dst_h);
	return 0;
}

size_t bfs_resize_pil_crop_scratch_size(int src_w, int src_h, int short_side, int dst_w,
					int dst_h)
{
	int fw, fh, ox, oy;

	if (crop_geometry(src_w, src_h, short_side, dst_w, dst_h, &fw, &fh, &ox, &oy))
		return 0;
	return window_scratch(src_w, src_h, fw, fh, dst_w, dst_h);
}

int bfs_resize_pil_crop(const uint8_t *src, int src_w, int src_h, size_t src_stride,
			int short_side, void *dst, int dst_w, int dst_h, bfs_dtype dtype,
			void *scratch)
{
	int fw, fh, ox, oy;

	if (!args_ok(src, src_w, src_h, src_stride, dst, dst_w, dst_h, dtype, scratch) ||
	    crop_geometry(src_w, src_h, short_side, dst_w, dst_h, &fw, &fh, &ox, &oy) ||
	    !window_scratch(src_w, src_h, fw, fh, dst_w, dst_h))
		return -EINVAL;
	resize_window(src, src_w, src_h, src_stride, fw, fh, ox, oy, dst, dst_w, dst_h, dtype, 0,
		      scratch);
	return 0;
}
