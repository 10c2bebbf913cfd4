/*
 * resize.c - separable bilinear resize, bit-exact with TensorFlow's
 * ResizeBilinear (half_pixel_centers), see resize.h for the arithmetic.
 *
 * DESIGN: TF computes top/bottom as horizontal lerps of two source rows and
 * then lerps vertically.  We do the same arithmetic in the same order, but
 * compute each needed source row's horizontal lerp once into one of two
 * float row buffers in scratch (dst rows walk source rows monotonically, so
 * two slots suffice), then run a vectorized vertical pass per output row.
 * Every float operation matches TF's scalar code operation for operation, so
 * results are identical bit for bit - as long as nothing fuses a multiply and
 * an add into an FMA, which the pragmas below and -ffp-contract=off forbid.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "engine/resize.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define ALIGN 64

typedef float v4sf __attribute__((vector_size(16)));
typedef int32_t v4si __attribute__((vector_size(16)));
typedef uint8_t v4qu __attribute__((vector_size(4)));

static size_t round_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static int dim_ok(int n)
{
	return n >= 1 && n <= BFS_RESIZE_MAX_DIM;
}

size_t bfs_resize_scratch_size(int src_w, int src_h, int dst_w, int dst_h)
{
	if (!dim_ok(src_w) || !dim_ok(src_h) || !dim_ok(dst_w) || !dim_ok(dst_h))
		return 0;
	/* x tables (lower, upper, lerp) + two float rows + alignment slack. */
	return ALIGN + 3 * round_up((size_t)dst_w * 4) +
	       2 * round_up((size_t)dst_w * 3 * sizeof(float));
}

/* TF's compute_interpolation_weights with HalfPixelScaler, for index i. */
static void interp(int i, float scale, int in_size, int *lower, int *upper, float *lerp)
{
	float in = ((float)i + 0.5f) * scale - 0.5f;
	float fl = floorf(in);
	int lo = (int)fl, hi = (int)ceilf(in);

	lo = lo < 0 ? 0 : lo;
	lo = lo > in_size - 1 ? in_size - 1 : lo; /* unreachable in practice */
	hi = hi > in_size - 1 ? in_size - 1 : hi;
	hi = hi < 0 ? 0 : hi;
	*lower = lo;
	*upper = hi;
	*lerp = in - fl;
}

/* Horizontal lerp of one source row: out[3x+c] = l + (r - l) * xlerp[x]. */
static void hrow(const uint8_t *restrict s, const int32_t *restrict lo3,
                 const int32_t *restrict hi3, const float *restrict xlerp,
                 int dst_w, float *restrict out)
{
	for (int x = 0; x < dst_w; x++) {
		const uint8_t *l = s + lo3[x], *r = s + hi3[x];
		float w = xlerp[x];
		float l0 = l[0], l1 = l[1], l2 = l[2];

		out[3 * x + 0] = l0 + ((float)r[0] - l0) * w;
		out[3 * x + 1] = l1 + ((float)r[1] - l1) * w;
		out[3 * x + 2] = l2 + ((float)r[2] - l2) * w;
	}
}

static v4sf load4(const float *p)
{
	v4sf v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* out[k] = (top[k] + (bot[k] - top[k]) * yl) / 255.0f */
static void vrow_f32(const float *restrict top, const float *restrict bot, float yl,
                     float *restrict out, size_t n)
{
	const v4sf vyl = { yl, yl, yl, yl };
	const v4sf k255 = { 255.0f, 255.0f, 255.0f, 255.0f };
	size_t k = 0;

	for (; k + 4 <= n; k += 4) {
		v4sf t = load4(top + k), b = load4(bot + k);
		v4sf v = (t + (b - t) * vyl) / k255;

		memcpy(out + k, &v, sizeof(v));
	}
	for (; k < n; k++)
		out[k] = (top[k] + (bot[k] - top[k]) * yl) / 255.0f;
}

/*
 * Round to nearest, ties to even, for 0 <= v < 2^23: adding 2^23 leaves no
 * fraction bits, so the FPU's default rounding does the work.  Without
 * -ffast-math the compiler may not fold (v + C) - C.
 */
#define ROUND_MAGIC 8388608.0f

static uint8_t round_u8(float v)
{
	v = v > 0.0f ? v : 0.0f;
	v = v < 255.0f ? v : 255.0f;
	return (uint8_t)(int32_t)((v + ROUND_MAGIC) - ROUND_MAGIC);
}

static void vrow_u8(const float *restrict top, const float *restrict bot, float yl,
                    uint8_t *restrict out, size_t n)
{
	const v4sf vyl = { yl, yl, yl, yl };
	const v4sf zero = { 0.0f, 0.0f, 0.0f, 0.0f };
	const v4sf max = { 255.0f, 255.0f, 255.0f, 255.0f };
	const v4sf magic = { ROUND_MAGIC, ROUND_MAGIC, ROUND_MAGIC, ROUND_MAGIC };
	size_t k = 0;

	for (; k + 4 <= n; k += 4) {
		v4sf t = load4(top + k), b = load4(bot + k);
		v4sf v = t + (b - t) * vyl;
		v4qu q;

		v4si above = v > zero, below = v < max;

		/* Clamp to [0, 255] with masks (vector ?: is C++ only). */
		v = (v4sf)((v4si)v & above);
		v = (v4sf)(((v4si)v & below) | ((v4si)max & ~below));
		v = (v + magic) - magic;
		q = __builtin_convertvector(__builtin_convertvector(v, v4si), v4qu);
		memcpy(out + k, &q, sizeof(q));
	}
	for (; k < n; k++)
		out[k] = round_u8(top[k] + (bot[k] - top[k]) * yl);
}

struct slot {
	float *row;
	int src_y; /* -1: empty */
};

int bfs_resize_rgb(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                   void *dst, int dst_w, int dst_h, bfs_dtype dtype, void *scratch)
{
	size_t rowlen = (size_t)dst_w * 3, rowbytes;
	uintptr_t base;
	int32_t *lo3, *hi3;
	float *xlerp, xscale, yscale;
	struct slot slot[2];

	if (!src || !dst || !scratch || !dim_ok(src_w) || !dim_ok(src_h) ||
	    !dim_ok(dst_w) || !dim_ok(dst_h) || src_stride < (size_t)src_w * 3 ||
	    (dtype != BFS_DTYPE_FLOAT32 && dtype != BFS_DTYPE_UINT8))
		return -EINVAL;

	base = ((uintptr_t)scratch + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
	lo3 = (int32_t *)base;
	hi3 = (int32_t *)(base + round_up((size_t)dst_w * 4));
	xlerp = (float *)(base + 2 * round_up((size_t)dst_w * 4));
	rowbytes = round_up(rowlen * sizeof(float));
	slot[0].row = (float *)(base + 3 * round_up((size_t)dst_w * 4));
	slot[1].row = (float *)((uintptr_t)slot[0].row + rowbytes);
	slot[0].src_y = slot[1].src_y = -1;

	/* TF: in_size / static_cast<float>(out_size). */
	xscale = (float)src_w / (float)dst_w;
	yscale = (float)src_h / (float)dst_h;
	for (int x = 0; x < dst_w; x++) {
		int lo, hi;

		interp(x, xscale, src_w, &lo, &hi, &xlerp[x]);
		lo3[x] = lo * 3;
		hi3[x] = hi * 3;
	}

	for (int y = 0; y < dst_h; y++) {
		const float *top = NULL, *bot = NULL;
		int lo, hi;
		float yl;

		interp(y, yscale, src_h, &lo, &hi, &yl);
		/* Find or fill the rows for lo and hi; never evict the other one. */
		for (int i = 0; i < 2; i++) {
			if (slot[i].src_y == lo)
				top = slot[i].row;
			if (slot[i].src_y == hi)
				bot = slot[i].row;
		}
		if (!top) {
			struct slot *s = &slot[slot[0].src_y == hi ? 1 : 0];

			hrow(src + (size_t)lo * src_stride, lo3, hi3, xlerp, dst_w, s->row);
			s->src_y = lo;
			top = s->row;
			if (hi == lo)
				bot = top;
		}
		if (!bot) {
			struct slot *s = &slot[slot[0].row == top ? 1 : 0];

			hrow(src + (size_t)hi * src_stride, lo3, hi3, xlerp, dst_w, s->row);
			s->src_y = hi;
			bot = s->row;
		}
		if (dtype == BFS_DTYPE_FLOAT32)
			vrow_f32(top, bot, yl, (float *)dst + (size_t)y * rowlen, rowlen);
		else
			vrow_u8(top, bot, yl, (uint8_t *)dst + (size_t)y * rowlen, rowlen);
	}
	return 0;
}
