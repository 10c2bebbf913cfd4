/*
 * augment.c - per-sample flip/crop draws from a counter-based hash, and the
 * post-cache pass (crop, flip, normalize, dtype, layout); see augment.h.
 *
 * DESIGN: bfs_post_apply walks output rows; each row is cut into chunks of
 * CHUNK pixels that fit a stack buffer.  NHWC chunks are mirrored (16-byte
 * pixel moves), normalized with three period-3 vectors, then converted;
 * float32 output is worked on in dst itself.  NCHW chunks are split into
 * planes by SSE shuffles that also mirror, then normalized per plane and
 * converted; float32 planes are written straight into dst.  Steps with
 * nothing to do are skipped, and the plain copy (same dtype, NHWC, no flip,
 * no normalization) is one memcpy per row, or one in all for full rows.
 * Every element gets the same float operations on every path, so vector
 * and scalar tails agree bit for bit.
 */
#include "engine/pixels/augment.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/pixels/resize.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define DOMAIN_AUG 0x6175676d656e7421ULL /* "augment!": unrelated to permute's keys */

/* Draw streams: which counter range each decision reads. */
enum { STREAM_FLIP = 0, STREAM_X = 1, STREAM_Y = 2 };

#define CHUNK 256 /* pixels per stack buffer */

typedef float v4sf __attribute__((vector_size(16)));

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The i-th 64-bit word of a stream of a sample's key. */
static uint64_t word(uint64_t key, unsigned stream, uint32_t i)
{
	return mix64(key + GOLDEN * (1 + ((uint64_t)stream << 32) + i));
}

/* Uniform on [0, range), range >= 1: Lemire's multiply-shift; words whose
 * low product falls under 2^64 mod range are rejected, which removes the
 * bias exactly.  Rejection has probability < range / 2^64, so the loop
 * practically never runs twice. */
static uint64_t uniform(uint64_t key, unsigned stream, uint64_t range)
{
	uint64_t threshold = (0 - range) % range;

	for (uint32_t i = 0;; i++) {
		unsigned __int128 m = (unsigned __int128)word(key, stream, i) * range;

		if ((uint64_t)m >= threshold)
			return (uint64_t)(m >> 64);
	}
}

void bfs_aug_draw(uint64_t seed, uint64_t epoch, uint64_t sample, int src_h, int src_w,
                  int h, int w, int do_flip, int do_crop, bfs_aug *out)
{
	uint64_t key = mix64(mix64(mix64(seed ^ DOMAIN_AUG) ^ epoch) ^ sample);
	int sx = src_w > w ? src_w - w : 0, sy = src_h > h ? src_h - h : 0;

	out->flip = do_flip ? (int)(word(key, STREAM_FLIP, 0) >> 63) : 0;
	if (do_crop) {
		out->x0 = (int)uniform(key, STREAM_X, (uint64_t)sx + 1);
		out->y0 = (int)uniform(key, STREAM_Y, (uint64_t)sy + 1);
	} else {
		out->x0 = sx / 2;
		out->y0 = sy / 2;
	}
}

static int dim_ok(int n)
{
	return n >= 1 && n <= BFS_POST_MAX_DIM;
}

int bfs_post_check(const bfs_post_opts *o, char *errmsg)
{
	if (!o) {
		bfs_seterr(errmsg, "no post-processing options");
		return -EINVAL;
	}
	if (!dim_ok(o->src_h) || !dim_ok(o->src_w) || !dim_ok(o->h) || !dim_ok(o->w)) {
		bfs_seterr(errmsg, "sizes must be 1..%d (stage-1 %dx%d, output %dx%d, HxW)",
		           BFS_POST_MAX_DIM, o->src_h, o->src_w, o->h, o->w);
		return -EINVAL;
	}
	if (o->h > o->src_h || o->w > o->src_w) {
		bfs_seterr(errmsg, "output %dx%d does not fit in the %dx%d stage-1 sample (HxW)",
		           o->h, o->w, o->src_h, o->src_w);
		return -EINVAL;
	}
	if (o->src_dtype != BFS_DTYPE_FLOAT32 && o->src_dtype != BFS_DTYPE_UINT8) {
		bfs_seterr(errmsg, "stage-1 samples must be float32 or uint8");
		return -EINVAL;
	}
	switch (o->out_dtype) {
	case BFS_DTYPE_UINT8:
		if (o->src_dtype != BFS_DTYPE_UINT8 || o->normalize) {
			bfs_seterr(errmsg, "uint8 output needs uint8 stage-1 samples and no "
			                   "normalization");
			return -EINVAL;
		}
		break;
	case BFS_DTYPE_FLOAT32:
	case BFS_DTYPE_FLOAT16:
		if (o->src_dtype != BFS_DTYPE_FLOAT32) {
			bfs_seterr(errmsg, "%s output needs float32 stage-1 samples",
			           bfs_dtype_name(o->out_dtype));
			return -EINVAL;
		}
		break;
	default:
		bfs_seterr(errmsg, "unknown output dtype %d", (int)o->out_dtype);
		return -EINVAL;
	}
	if (o->normalize) {
		for (int c = 0; c < 3; c++) {
			if (!isfinite(o->mean[c]) || !isfinite(o->std[c]) || !(o->std[c] > 0.0f)) {
				bfs_seterr(errmsg, "channel %d: mean %g and std %g must be finite, "
				                   "std > 0", c, (double)o->mean[c], (double)o->std[c]);
				return -EINVAL;
			}
		}
	}
	return 0;
}

size_t bfs_post_out_bytes(const bfs_post_opts *o)
{
	if (o->h < 1 || o->w < 1)
		return 0;
	return (size_t)o->h * (size_t)o->w * 3 * bfs_dtype_size(o->out_dtype);
}

/*
 * out pixel i = in pixel n - 1 - i, n pixels of 3 floats.  Inner pixels
 * move as one 16-byte copy: the extra float read is the next source pixel's
 * first, and the extra float written is overwritten by the next output
 * pixel.  The first and last output pixels, where that extra float would be
 * outside the chunk, are copied exactly.
 */
static void reverse_f32(const float *restrict in, float *restrict out, size_t n)
{
	memcpy(out, in + 3 * (n - 1), 3 * sizeof(float));
	for (size_t i = 1; i + 1 < n; i++)
		memcpy(out + 3 * i, in + 3 * (n - 1 - i), 4 * sizeof(float));
	if (n > 1)
		memcpy(out + 3 * (n - 1), in, 3 * sizeof(float));
}

/* The same for 3-byte pixels, with 4-byte copies. */
static void reverse_u8(const uint8_t *restrict in, uint8_t *restrict out, size_t n)
{
	memcpy(out, in + 3 * (n - 1), 3);
	for (size_t i = 1; i + 1 < n; i++)
		memcpy(out + 3 * i, in + 3 * (n - 1 - i), 4);
	if (n > 1)
		memcpy(out + 3 * (n - 1), in, 3);
}

/* Per-channel constants: for interleaved data, three vectors cover four
 * pixels (m[0] = m0 m1 m2 m0, m[1] = m1 m2 m0 m1, m[2] = m2 m0 m1 m2); for
 * planes, one broadcast vector per channel. */
struct norm {
	v4sf m[3], s[3], pm[3], ps[3];
	float mean[3], std[3];
};

static void norm_init(struct norm *k, const bfs_post_opts *o)
{
	for (int v = 0; v < 3; v++) {
		for (int j = 0; j < 4; j++) {
			k->m[v][j] = o->mean[(4 * v + j) % 3];
			k->s[v][j] = o->std[(4 * v + j) % 3];
			k->pm[v][j] = o->mean[v];
			k->ps[v][j] = o->std[v];
		}
	}
	memcpy(k->mean, o->mean, sizeof(k->mean));
	memcpy(k->std, o->std, sizeof(k->std));
}

/* out[3i + c] = (in[3i + c] - mean[c]) / std[c] for n interleaved pixels;
 * in == out is allowed (each block is loaded before it is stored). */
static void normalize_hwc(const struct norm *k, const float *in, float *out, size_t n)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		v4sf v[3];

		memcpy(v, in + 3 * i, sizeof(v));
		for (int j = 0; j < 3; j++)
			v[j] = (v[j] - k->m[j]) / k->s[j];
		memcpy(out + 3 * i, v, sizeof(v));
	}
	for (; i < n; i++)
		for (int c = 0; c < 3; c++)
			out[3 * i + c] = (in[3 * i + c] - k->mean[c]) / k->std[c];
}

/* p[i] = (p[i] - mean[c]) / std[c] in place, n elements of channel c. */
static void normalize_plane(const struct norm *k, int c, float *p, size_t n)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		v4sf v;

		memcpy(&v, p + i, sizeof(v));
		v = (v - k->pm[c]) / k->ps[c];
		memcpy(p + i, &v, sizeof(v));
	}
	for (; i < n; i++)
		p[i] = (p[i] - k->mean[c]) / k->std[c];
}

/*
 * Split n interleaved pixels into three planes; with flip, plane element i
 * comes from pixel n - 1 - i.  SSE: four pixels a = r0 g0 b0 r1,
 * b = g1 b1 r2 g2, c = b2 r3 g3 b3 become R = a0 a3 b2 c1, G = a1 b0 b3 c2,
 * B = a2 b1 c0 c3 in eight shuffles (plus one per plane to reverse).
 */
static void planes_f32(const float *restrict in, int flip, float *restrict p0,
                       float *restrict p1, float *restrict p2, size_t n)
{
	size_t i = 0;

#if defined(__SSE2__)
	for (; i + 4 <= n; i += 4) {
		const float *s = in + 3 * (flip ? n - 4 - i : i);
		__m128 a = _mm_loadu_ps(s), b = _mm_loadu_ps(s + 4), c = _mm_loadu_ps(s + 8);
		__m128 r = _mm_shuffle_ps(a, _mm_shuffle_ps(b, c, _MM_SHUFFLE(1, 1, 2, 2)),
		                          _MM_SHUFFLE(2, 0, 3, 0));
		__m128 g = _mm_shuffle_ps(_mm_shuffle_ps(a, b, _MM_SHUFFLE(0, 0, 1, 1)),
		                          _mm_shuffle_ps(b, c, _MM_SHUFFLE(2, 2, 3, 3)),
		                          _MM_SHUFFLE(2, 0, 2, 0));
		__m128 bl = _mm_shuffle_ps(_mm_shuffle_ps(a, b, _MM_SHUFFLE(1, 1, 2, 2)),
		                           _mm_shuffle_ps(c, c, _MM_SHUFFLE(3, 3, 0, 0)),
		                           _MM_SHUFFLE(2, 0, 2, 0));

		if (flip) {
			r = _mm_shuffle_ps(r, r, _MM_SHUFFLE(0, 1, 2, 3));
			g = _mm_shuffle_ps(g, g, _MM_SHUFFLE(0, 1, 2, 3));
			bl = _mm_shuffle_ps(bl, bl, _MM_SHUFFLE(0, 1, 2, 3));
		}
		_mm_storeu_ps(p0 + i, r);
		_mm_storeu_ps(p1 + i, g);
		_mm_storeu_ps(p2 + i, bl);
	}
#endif
	for (; i < n; i++) {
		const float *s = in + 3 * (flip ? n - 1 - i : i);

		p0[i] = s[0];
		p1[i] = s[1];
		p2[i] = s[2];
	}
}

/* NCHW uint8 row, flipped or not. */
static void planes_u8(const uint8_t *restrict in, int flip, uint8_t *restrict p0,
                      uint8_t *restrict p1, uint8_t *restrict p2, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const uint8_t *s = in + 3 * (flip ? n - 1 - i : i);

		p0[i] = s[0];
		p1[i] = s[1];
		p2[i] = s[2];
	}
}

static void apply_u8(const bfs_post_opts *o, int flip, const uint8_t *src, uint8_t *dst)
{
	size_t w = (size_t)o->w, plane = (size_t)o->h * w;

	for (size_t y = 0; y < (size_t)o->h; y++) {
		const uint8_t *s = src + y * (size_t)o->src_w * 3;

		if (o->nchw)
			planes_u8(s, flip, dst + y * w, dst + plane + y * w, dst + 2 * plane + y * w, w);
		else if (flip)
			reverse_u8(s, dst + y * w * 3, w);
		else
			memcpy(dst + y * w * 3, s, w * 3);
	}
}

/* One chunk of n output pixels, NHWC: flip and normalize into `work` (dst
 * itself for float32 output), then convert to float16 if asked. */
static void chunk_hwc(const bfs_post_opts *o, const struct norm *k, int flip,
                      const float *in, size_t n, void *out, float *buf)
{
	float *work = o->out_dtype == BFS_DTYPE_FLOAT32 ? (float *)out : buf;
	const float *v = in;

	if (flip) {
		reverse_f32(in, work, n);
		v = work;
	}
	if (o->normalize) {
		normalize_hwc(k, v, work, n);
		v = work;
	}
	if (o->out_dtype == BFS_DTYPE_FLOAT16)
		bfs_resize_f16_n(v, out, n * 3);
	else if (v != work)
		memcpy(work, v, n * 3 * sizeof(float));
}

/* One chunk of n output pixels, NCHW, at element `at` of each plane. */
static void chunk_chw(const bfs_post_opts *o, const struct norm *k, int flip,
                      const float *in, size_t n, void *dst, size_t at, float *buf)
{
	size_t plane = (size_t)o->h * o->w;
	float *p[3];

	for (int c = 0; c < 3; c++)
		p[c] = o->out_dtype == BFS_DTYPE_FLOAT32 ? (float *)dst + c * plane + at
		                                         : buf + c * CHUNK;
	planes_f32(in, flip, p[0], p[1], p[2], n);
	for (int c = 0; c < 3; c++) {
		if (o->normalize)
			normalize_plane(k, c, p[c], n);
		if (o->out_dtype == BFS_DTYPE_FLOAT16)
			bfs_resize_f16_n(p[c], (uint16_t *)dst + c * plane + at, n);
	}
}

/* float32 stage-1 window (src points at its top-left pixel) -> float32 or
 * float16 output, row by row, CHUNK pixels at a time. */
static void apply_f32(const bfs_post_opts *o, const struct norm *k, int flip,
                      const float *src, void *dst)
{
	size_t w = (size_t)o->w, es = bfs_dtype_size(o->out_dtype);
	float buf[CHUNK * 3];

	for (size_t y = 0; y < (size_t)o->h; y++) {
		const float *row = src + y * (size_t)o->src_w * 3;

		for (size_t x = 0; x < w; x += CHUNK) {
			size_t n = w - x < CHUNK ? w - x : CHUNK, at = y * w + x;
			/* output pixels x.. read source pixels x.., or when
			 * flipping w-x-n.. in reverse */
			const float *in = row + 3 * (flip ? w - x - n : x);

			if (o->nchw)
				chunk_chw(o, k, flip, in, n, dst, at, buf);
			else
				chunk_hwc(o, k, flip, in, n, (uint8_t *)dst + 3 * at * es, buf);
		}
	}
}

void bfs_post_apply(const bfs_post_opts *o, const bfs_aug *a, const void *src, void *dst)
{
	size_t es = bfs_dtype_size(o->src_dtype);
	int x0 = a->x0, y0 = a->y0, flip = a->flip != 0;
	const uint8_t *s;

	x0 = x0 < 0 ? 0 : x0 > o->src_w - o->w ? o->src_w - o->w : x0;
	y0 = y0 < 0 ? 0 : y0 > o->src_h - o->h ? o->src_h - o->h : y0;
	s = (const uint8_t *)src + ((size_t)y0 * o->src_w + x0) * 3 * es;

	/* Plain copy: one memcpy per row, or one in all for full-width rows. */
	if (!flip && !o->nchw && !o->normalize && o->out_dtype == o->src_dtype) {
		size_t row = (size_t)o->w * 3 * es, stride = (size_t)o->src_w * 3 * es;

		if (row == stride) {
			memcpy(dst, s, row * o->h);
			return;
		}
		for (int y = 0; y < o->h; y++)
			memcpy((uint8_t *)dst + y * row, s + y * stride, row);
		return;
	}
	if (o->src_dtype == BFS_DTYPE_UINT8) {
		apply_u8(o, flip, s, dst);
	} else {
		struct norm k;

		if (o->normalize)
			norm_init(&k, o);
		else
			memset(&k, 0, sizeof(k)); /* unused; mean/std may be unset */
		apply_f32(o, &k, flip, (const float *)(const void *)s, dst);
	}
}
