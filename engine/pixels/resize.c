/*
 * resize.c - separable bilinear resize, bit-exact with TensorFlow's
 * ResizeBilinear (half_pixel_centers), see resize.h for the arithmetic.
 *
 * DESIGN: TF computes top/bottom as horizontal lerps of two source rows and
 * then lerps vertically.  We do the same arithmetic in the same order, but
 * compute each needed source row's horizontal lerp once into one of two
 * float row buffers in scratch (dst rows walk source rows monotonically, so
 * two slots suffice), then run a vectorized vertical pass per output row.
 * The horizontal pass is a gather of pixel pairs (SSE2, or AVX2 where the
 * CPU has it, chosen at run time).  The vertical pass is bound by the true
 * division by 255 on SSE2; with AVX2 (eight divisions a step) a float32
 * row is bound by writing dst, which streaming stores halve (see
 * vrow_f32_avx2).  Tried and dropped as slower here: converting whole
 * source rows to float before gathering, and lerping two source rows per
 * pass; as no faster: one 8-float store of the AVX2 pair instead of two
 * 4-float ones, and vector loads for the pixels of the row's last pair
 * (instead of hrow_scalar's few).
 * Every float operation matches TF's scalar code operation for operation, so
 * results are identical bit for bit - as long as nothing fuses a multiply and
 * an add into an FMA, which the pragmas below and -ffp-contract=off forbid.
 *
 * Center crop: output pixel i of a resize depends only on i and the sizes,
 * not on its neighbours, so bfs_resize_rgb_crop runs the same two passes
 * over the window's columns and rows only, with the window's offsets added
 * to the indices fed to the TF interpolation formula.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "engine/pixels/resize.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h> /* F16C, used only behind a CPU check */
#endif

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
	/* x tables (base offset, broadcast lerp) + two float rows (one spare
	 * float each for 16-byte stores) + alignment slack. */
	return ALIGN + round_up((size_t)dst_w * sizeof(int32_t)) +
	       round_up((size_t)dst_w * 4 * sizeof(float)) +
	       2 * round_up(((size_t)dst_w * 3 + 1) * sizeof(float));
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

/*
 * Horizontal pass.  TF computes top = l + (r - l) * lerp from pixels lower
 * and upper.  We store every output pixel as a base pixel p and weight w
 * over the pair (p, p + 1), which gives the same float bit for bit:
 *   upper == lower + 1:  p = lower, w = lerp (TF's own operands);
 *   upper == lower:      TF yields l + 0 * lerp = l.  With p = lower, w = 0
 *                        we get l + (r - l) * 0 = l too; at the right edge
 *                        (no p + 1) p = lower - 1, w = 1 gives
 *                        l' + (l - l') * 1 = l exactly (small integers).
 * Only a 1-pixel-wide source has no pair; it is handled in hrow_scalar.
 * Pairs are contiguous, so one 8-byte load fetches both pixels.
 */
struct xtab {
	const int32_t *base3; /* 3 * p, byte offset of the pair in a source row */
	const float *w4;      /* w, four times per pixel (one SSE vector) */
	int vec_from, vec_to; /* pixels [vec_from, vec_to) may load 8 bytes at
			       * base3: a prefix, or mirrored a suffix */
	int src_w, dst_w;
	int avx2;             /* hrow may take hrow_avx2 (the CPU has it) */
};

/* Scalar version of the pair lerp for pixels [from, to). */
static void hrow_scalar(const uint8_t *restrict s, const struct xtab *t, int from, int to,
                        float *restrict out)
{
	for (int x = from; x < to; x++) {
		const uint8_t *l = s + t->base3[x];
		const uint8_t *r = t->src_w > 1 ? l + 3 : l;
		float w = t->w4[4 * x];

		for (int c = 0; c < 3; c++) {
			float lf = l[c];

			out[3 * x + c] = lf + ((float)r[c] - lf) * w;
		}
	}
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_DISPATCH 1
/* CPUID says AVX2 (leaf 7) and AVX, and the OS saves YMM state (XCR0 bits
 * 1-2); and BATCHFS_RESIZE_NO_AVX2 is not set in the environment (asked at
 * every call, not remembered: it keeps the SSE2 pass testable on machines
 * with AVX2, in a forked child too). */
static int have_avx2(void)
{
	static int known; /* 0: not asked yet, 1: no, 2: yes; same for all threads */
	int v = __atomic_load_n(&known, __ATOMIC_RELAXED);

	if (!v) {
		unsigned a, b, c, d, lo, hi;

		v = 1;
		if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX)) {
			__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
			if ((lo & 6) == 6 && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
			    (b & bit_AVX2))
				v = 2;
		}
		__atomic_store_n(&known, v, __ATOMIC_RELAXED);
	}
	return v == 2 && !getenv("BATCHFS_RESIZE_NO_AVX2");
}

/*
 * hrow's vector loop, two pixels a step: the same three float operations
 * per channel, l + (r - l) * w, in the same order and without FMA (no
 * "fma" target, contraction off), so the same bits.  Each 128-bit lane
 * holds one pixel: its pair's 8 bytes (a plain load for the first, a
 * broadcast for the second), spread by one in-lane shuffle into L0 L1 L2 0
 * and another into R0 R1 R2 0 as 32-bit integers.  The two lanes are
 * stored as two overlapping 4-float stores at 3x and 3x + 3: each one's
 * junk lane is the next pixel's first float, written after (or the row's
 * spare float).  Pixels [x, to), all with 8 loadable bytes at base3.
 * Returns the first pixel not done.
 */
__attribute__((target("avx2")))
static int hrow_avx2(const uint8_t *restrict s, const struct xtab *t, int x, int to,
		     float *restrict out)
{
	const __m256i pick_l = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, -1, -1,
						-1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1,
						-1, -1, -1, -1);
	const __m256i pick_r = _mm256_setr_epi8(3, -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, -1, -1,
						-1, -1, 3, -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1,
						-1, -1, -1, -1);

	for (; x + 2 <= to; x += 2) {
		long long q1;
		__m256i b;
		__m256 l, r, v;

		memcpy(&q1, s + t->base3[x + 1], sizeof(q1));
		b = _mm256_blend_epi32(_mm256_castsi128_si256(_mm_loadl_epi64(
					       (const __m128i *)(const void *)(s + t->base3[x]))),
				       _mm256_set1_epi64x(q1), 0xf0);
		l = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, pick_l));
		r = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, pick_r));
		v = _mm256_add_ps(l, _mm256_mul_ps(_mm256_sub_ps(r, l), _mm256_loadu_ps(t->w4 + 4 * x)));

		_mm_storeu_ps(out + 3 * x, _mm256_castps256_ps128(v));
		_mm_storeu_ps(out + 3 * x + 3, _mm256_extractf128_ps(v, 1));
	}
	return x;
}
#endif

/* out[3x + c] for one source row; out has 3 * dst_w + 1 floats.  The
 * scalar pixels before the vector range come first: a vector store writes
 * junk floats past its pixels, which the next pixels (or the spare float)
 * overwrite. */
static void hrow(const uint8_t *restrict s, const struct xtab *t, float *restrict out)
{
	int x = t->vec_from;

	hrow_scalar(s, t, 0, t->vec_from, out);
#if HAVE_AVX2_DISPATCH
	if (t->avx2)
		x = hrow_avx2(s, t, x, t->vec_to, out);
#endif
#if defined(__SSE2__)
	const __m128i z = _mm_setzero_si128();

	for (; x < t->vec_to; x++) {
		/* bytes L0 L1 L2 R0 R1 R2 . . -> floats L0 L1 L2 . and R0 R1 R2 . */
		__m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(s + t->base3[x]));
		__m128i h = _mm_unpacklo_epi8(b, z);
		__m128 l = _mm_cvtepi32_ps(_mm_unpacklo_epi16(h, z));
		__m128 r = _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_srli_si128(h, 6), z));
		__m128 v = _mm_add_ps(l, _mm_mul_ps(_mm_sub_ps(r, l), _mm_load_ps(t->w4 + 4 * x)));

		/* lane 3 is junk; the next pixel (or the spare float) takes it */
		_mm_storeu_ps(out + 3 * x, v);
	}
#endif
	hrow_scalar(s, t, x, t->dst_w, out);
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

#if HAVE_AVX2_DISPATCH
/*
 * vrow_f32 eight floats a step, for BFS_RESIZE_STREAM: the same
 * operations in the same order (sub, mul, add, a true division; no FMA),
 * so the same bits.  The row is written with streaming stores from its
 * first 32-byte boundary on: fetching the lines of a dst that is not in
 * the cache only to overwrite them costs a read from memory per line
 * (measured, a 224x224 float32 dst out of the cache: the SSE2 pass 33 us,
 * this one with plain stores 46 us, with streaming stores 24 us; into a
 * cached dst 16 us, which is why it is the caller's choice).  The caller
 * issues the sfence that orders them (resize_window, before it returns).
 */
__attribute__((target("avx2")))
static void vrow_f32_stream(const float *restrict top, const float *restrict bot, float yl,
			  float *restrict out, size_t n)
{
	const __m256 vyl = _mm256_set1_ps(yl), k255 = _mm256_set1_ps(255.0f);
	size_t k = 0;

	for (; k < n && ((uintptr_t)(out + k) & 31); k++)
		out[k] = (top[k] + (bot[k] - top[k]) * yl) / 255.0f;
	for (; k + 8 <= n; k += 8) {
		__m256 t = _mm256_loadu_ps(top + k), b = _mm256_loadu_ps(bot + k);

		_mm256_stream_ps(out + k, _mm256_div_ps(_mm256_add_ps(t, _mm256_mul_ps(
							_mm256_sub_ps(b, t), vyl)), k255));
	}
	for (; k < n; k++)
		out[k] = (top[k] + (bot[k] - top[k]) * yl) / 255.0f;
}
#endif

/*
 * float32 -> IEEE binary16, round to nearest, ties to even: the value numpy's
 * astype(np.float16) gives for the float32 output.  Three ranges:
 *   |f| >= 2^16:  inf (NaN stays NaN);
 *   |f| <  2^-14: half subnormal, a multiple of 2^-24.  Adding 0.5f, whose
 *                 ulp is 2^-24, makes the FPU round |f| to that grid; the
 *                 low mantissa bits of the sum are then the half's bits;
 *   otherwise:    rebias the exponent (127 -> 15) and round off 13 bits.
 */
#define F16_SUBNORMAL_BELOW 0x38800000u /* 2^-14 */
#define F16_INF_FROM 0x47800000u        /* 2^16 */
#define F16_REBIAS 0xc8000000u          /* -(112 << 23), mod 2^32 */

static uint16_t f32_to_f16(float f)
{
	uint32_t u, a, sign;

	memcpy(&u, &f, sizeof(u));
	sign = (u >> 16) & 0x8000u;
	a = u & 0x7fffffffu;
	if (a >= F16_INF_FROM)
		return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
	if (a < F16_SUBNORMAL_BELOW) {
		float g;

		memcpy(&g, &a, sizeof(g));
		g += 0.5f;
		memcpy(&a, &g, sizeof(a));
		return (uint16_t)(sign | (a - 0x3f000000u));
	}
	/* a carry out of the mantissa correctly bumps the exponent (to inf) */
	return (uint16_t)(sign | ((a + F16_REBIAS + 0xfffu + ((a >> 13) & 1u)) >> 13));
}

#if defined(__SSE2__)
/* f32_to_f16 on four lanes; the halves come back in the low 16 bits. */
static __m128i f32_to_f16_sse2(__m128 v)
{
	const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), sign_mask = _mm_set1_epi32(0x8000);
	const __m128i one = _mm_set1_epi32(1), round = _mm_set1_epi32((int)(F16_REBIAS + 0xfffu));
	const __m128i inf16 = _mm_set1_epi32(0x7c00), qnan_bit = _mm_set1_epi32(0x0200);
	__m128i u = _mm_castps_si128(v);
	__m128i a = _mm_and_si128(u, abs_mask);
	__m128i sub = _mm_sub_epi32(_mm_castps_si128(_mm_add_ps(_mm_castsi128_ps(a),
	                                                        _mm_set1_ps(0.5f))),
	                            _mm_set1_epi32(0x3f000000));
	__m128i nor = _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(a, round),
	                                           _mm_and_si128(_mm_srli_epi32(a, 13), one)), 13);
	__m128i is_sub = _mm_cmplt_epi32(a, _mm_set1_epi32((int)F16_SUBNORMAL_BELOW));
	__m128i is_inf = _mm_cmpgt_epi32(a, _mm_set1_epi32((int)F16_INF_FROM - 1));
	__m128i special = _mm_or_si128(inf16, _mm_and_si128(
		_mm_cmpgt_epi32(a, _mm_set1_epi32(0x7f800000)), qnan_bit));
	__m128i r = _mm_or_si128(_mm_and_si128(is_sub, sub), _mm_andnot_si128(is_sub, nor));

	r = _mm_or_si128(_mm_and_si128(is_inf, special), _mm_andnot_si128(is_inf, r));
	return _mm_or_si128(r, _mm_and_si128(_mm_srli_epi32(u, 16), sign_mask));
}
#endif

/* out[k] = half((top[k] + (bot[k] - top[k]) * yl) / 255.0f) */
static void vrow_f16(const float *restrict top, const float *restrict bot, float yl,
                     uint16_t *restrict out, size_t n)
{
	size_t k = 0;

#if defined(__SSE2__)
	const __m128 vyl = _mm_set1_ps(yl), k255 = _mm_set1_ps(255.0f);
	const __m128i bias16 = _mm_set1_epi32(0x8000);

	for (; k + 8 <= n; k += 8) {
		__m128i h[2];

		for (int j = 0; j < 2; j++) {
			__m128 t = _mm_loadu_ps(top + k + 4 * j), b = _mm_loadu_ps(bot + k + 4 * j);
			__m128 v = _mm_div_ps(_mm_add_ps(t, _mm_mul_ps(_mm_sub_ps(b, t), vyl)), k255);

			/* SSE2 has only a signed 32->16 pack: shift into range and back */
			h[j] = _mm_sub_epi32(f32_to_f16_sse2(v), bias16);
		}
		_mm_storeu_si128((__m128i *)(void *)(out + k),
		                 _mm_xor_si128(_mm_packs_epi32(h[0], h[1]), _mm_set1_epi16(-0x8000)));
	}
#endif
	for (; k < n; k++)
		out[k] = f32_to_f16((top[k] + (bot[k] - top[k]) * yl) / 255.0f);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_F16C_DISPATCH 1
/*
 * F16C's vcvtps2ph with imm 0 rounds to nearest even whatever MXCSR says,
 * and gives f32_to_f16's bits for every non-NaN float.  NaNs differ (F16C
 * keeps the payload), so NaN lanes are set to f32_to_f16's 0x7e00 | sign:
 * same bytes on every machine.  Returns how many leading elements it did.
 */
__attribute__((target("avx,f16c")))
static size_t f16_n_f16c(const float *in, uint16_t *out, size_t n)
{
	size_t k = 0;

	for (; k + 8 <= n; k += 8) {
		__m256 v = _mm256_loadu_ps(in + k), nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
		__m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);

		if (!_mm256_testz_ps(nan, nan)) {
			__m128i m = _mm_packs_epi32(_mm_castps_si128(_mm256_castps256_ps128(nan)),
			                            _mm_castps_si128(_mm256_extractf128_ps(nan, 1)));
			__m128i q = _mm_or_si128(_mm_set1_epi16(0x7e00),
			                         _mm_and_si128(h, _mm_set1_epi16(-0x8000)));

			h = _mm_or_si128(_mm_andnot_si128(m, h), _mm_and_si128(m, q));
		}
		_mm_storeu_si128((__m128i *)(void *)(out + k), h);
	}
	return k;
}

/* CPUID says F16C and AVX, and the OS saves YMM state (XCR0 bits 1-2).
 * (Not __builtin_cpu_supports: older clang does not know "f16c".) */
static int have_f16c(void)
{
	static int known; /* 0: not asked yet, 1: no, 2: yes; same for all threads */
	int v = __atomic_load_n(&known, __ATOMIC_RELAXED);

	if (!v) {
		unsigned a, b, c, d, lo, hi;

		v = 1;
		if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) &&
		    (c & bit_F16C)) {
			__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
			if ((lo & 6) == 6)
				v = 2;
		}
		__atomic_store_n(&known, v, __ATOMIC_RELAXED);
	}
	return v == 2;
}
#endif

void bfs_resize_f16_n(const float *in, uint16_t *out, size_t n)
{
	size_t k = 0;

#if HAVE_F16C_DISPATCH
	if (have_f16c())
		k = f16_n_f16c(in, out, n);
#endif
#if defined(__SSE2__)
	const __m128i bias16 = _mm_set1_epi32(0x8000);

	for (; k + 8 <= n; k += 8) {
		__m128i lo = _mm_sub_epi32(f32_to_f16_sse2(_mm_loadu_ps(in + k)), bias16);
		__m128i hi = _mm_sub_epi32(f32_to_f16_sse2(_mm_loadu_ps(in + k + 4)), bias16);

		_mm_storeu_si128((__m128i *)(void *)(out + k),
		                 _mm_xor_si128(_mm_packs_epi32(lo, hi), _mm_set1_epi16(-0x8000)));
	}
#endif
	for (; k < n; k++)
		out[k] = f32_to_f16(in[k]);
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
	size_t k = 0;

#if defined(__SSE2__)
	const __m128 vyl = _mm_set1_ps(yl);

	/* cvtps2dq rounds to nearest, ties to even (the default MXCSR mode);
	 * the saturating packs clamp to 0..255. */
	for (; k + 16 <= n; k += 16) {
		__m128i i[4];

		for (int j = 0; j < 4; j++) {
			__m128 t = _mm_loadu_ps(top + k + 4 * j), b = _mm_loadu_ps(bot + k + 4 * j);

			i[j] = _mm_cvtps_epi32(_mm_add_ps(t, _mm_mul_ps(_mm_sub_ps(b, t), vyl)));
		}
		_mm_storeu_si128((__m128i *)(void *)(out + k),
		                 _mm_packus_epi16(_mm_packs_epi32(i[0], i[1]),
		                                  _mm_packs_epi32(i[2], i[3])));
	}
#else
	const v4sf vyl = { yl, yl, yl, yl };
	const v4sf zero = { 0.0f, 0.0f, 0.0f, 0.0f };
	const v4sf max = { 255.0f, 255.0f, 255.0f, 255.0f };
	const v4sf magic = { ROUND_MAGIC, ROUND_MAGIC, ROUND_MAGIC, ROUND_MAGIC };

	for (; k + 4 <= n; k += 4) {
		v4sf t = load4(top + k), b = load4(bot + k);
		v4sf v = t + (b - t) * vyl;
		v4si above = v > zero, below = v < max;
		v4qu q;

		/* Clamp to [0, 255] with masks (vector ?: is C++ only). */
		v = (v4sf)((v4si)v & above);
		v = (v4sf)(((v4si)v & below) | ((v4si)max & ~below));
		v = (v + magic) - magic;
		q = __builtin_convertvector(__builtin_convertvector(v, v4si), v4qu);
		memcpy(out + k, &q, sizeof(q));
	}
#endif
	for (; k < n; k++)
		out[k] = round_u8(top[k] + (bot[k] - top[k]) * yl);
}

struct slot {
	float *row;
	int src_y; /* -1: empty */
};

static int args_ok(const uint8_t *src, int src_w, int src_h, size_t src_stride, void *dst,
                   int dst_w, int dst_h, bfs_dtype dtype, void *scratch)
{
	return src && dst && scratch && dim_ok(src_w) && dim_ok(src_h) && dim_ok(dst_w) &&
	       dim_ok(dst_h) && src_stride >= (size_t)src_w * 3 &&
	       (dtype == BFS_DTYPE_FLOAT32 || dtype == BFS_DTYPE_UINT8 ||
	        dtype == BFS_DTYPE_FLOAT16);
}

/*
 * The dst_w x dst_h window at (off_x, off_y) of src resized to full_w x
 * full_h; the whole image when the window is the full size.  Arguments
 * already checked, off + dst <= full.
 */
static void resize_window(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                          int full_w, int full_h, int off_x, int off_y, void *dst,
                          int dst_w, int dst_h, bfs_dtype dtype, unsigned flags,
                          void *scratch)
{
	int mirror = (flags & BFS_RESIZE_MIRROR) != 0, stream = 0;
	size_t rowlen = (size_t)dst_w * 3;
	uintptr_t p;
	int32_t *base3;
	float *w4, xscale, yscale;
	struct slot slot[2];
	struct xtab t;

	/* Carve scratch; same layout as bfs_resize_scratch_size counts. */
	p = ((uintptr_t)scratch + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
	base3 = (int32_t *)p;
	p += round_up((size_t)dst_w * sizeof(int32_t));
	w4 = (float *)p;
	p += round_up((size_t)dst_w * 4 * sizeof(float));
	slot[0].row = (float *)p;
	p += round_up((rowlen + 1) * sizeof(float));
	slot[1].row = (float *)p;
	slot[0].src_y = slot[1].src_y = -1;

	/* TF: in_size / static_cast<float>(out_size). */
	xscale = (float)src_w / (float)full_w;
	yscale = (float)src_h / (float)full_h;
	t.vec_from = t.vec_to = 0;
	for (int x = 0; x < dst_w; x++) {
		int lo, hi, pp;
		float lerp, w;

		/* mirrored, output pixel x is pixel dst_w - 1 - x */
		interp(off_x + (mirror ? dst_w - 1 - x : x), xscale, src_w, &lo, &hi, &lerp);
		if (hi == lo + 1) {
			pp = lo;
			w = lerp;
		} else if (lo + 1 < src_w || src_w == 1) {
			pp = lo;
			w = 0.0f;
		} else {
			pp = lo - 1;
			w = 1.0f;
		}
		base3[x] = pp * 3;
		w4[4 * x] = w4[4 * x + 1] = w4[4 * x + 2] = w4[4 * x + 3] = w;
		/* 8-byte loads at 3p stay inside the row while 3p + 8 <= 3 * src_w;
		 * p never decreases, so that holds for a prefix of the pixels
		 * (mirrored, p never increases: a suffix) */
		if ((int64_t)pp * 3 + 8 <= (int64_t)src_w * 3) {
			if (mirror && t.vec_to < x + 1) {
				if (t.vec_to == t.vec_from)
					t.vec_from = x;
				t.vec_to = x + 1;
			} else if (!mirror && t.vec_to == x) {
				t.vec_to = x + 1;
			}
		}
	}
	t.base3 = base3;
	t.w4 = w4;
	t.src_w = src_w;
	t.dst_w = dst_w;
#if HAVE_AVX2_DISPATCH
	t.avx2 = have_avx2();
	stream = t.avx2 && (flags & BFS_RESIZE_STREAM) && dtype == BFS_DTYPE_FLOAT32;
#else
	t.avx2 = 0;
#endif

	for (int y = 0; y < dst_h; y++) {
		const float *top = NULL, *bot = NULL;
		int lo, hi;
		float yl;

		interp(off_y + y, yscale, src_h, &lo, &hi, &yl);
		/* Find or fill the rows for lo and hi; never evict the other one. */
		for (int i = 0; i < 2; i++) {
			if (slot[i].src_y == lo)
				top = slot[i].row;
			if (slot[i].src_y == hi)
				bot = slot[i].row;
		}
		if (!top) {
			struct slot *s = &slot[slot[0].src_y == hi ? 1 : 0];

			hrow(src + (size_t)lo * src_stride, &t, s->row);
			s->src_y = lo;
			top = s->row;
			if (hi == lo)
				bot = top;
		}
		if (!bot) {
			struct slot *s = &slot[slot[0].row == top ? 1 : 0];

			hrow(src + (size_t)hi * src_stride, &t, s->row);
			s->src_y = hi;
			bot = s->row;
		}
#if HAVE_AVX2_DISPATCH
		if (stream)
			vrow_f32_stream(top, bot, yl, (float *)dst + (size_t)y * rowlen, rowlen);
		else
#endif
		if (dtype == BFS_DTYPE_FLOAT32)
			vrow_f32(top, bot, yl, (float *)dst + (size_t)y * rowlen, rowlen);
		else if (dtype == BFS_DTYPE_FLOAT16)
			vrow_f16(top, bot, yl, (uint16_t *)dst + (size_t)y * rowlen, rowlen);
		else
			vrow_u8(top, bot, yl, (uint8_t *)dst + (size_t)y * rowlen, rowlen);
	}
#if HAVE_AVX2_DISPATCH
	if (stream)
		_mm_sfence(); /* the streaming stores, before dst is handed on */
#endif
}

int bfs_resize_rgb_flags(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                         void *dst, int dst_w, int dst_h, bfs_dtype dtype, unsigned flags,
                         void *scratch)
{
	if (!args_ok(src, src_w, src_h, src_stride, dst, dst_w, dst_h, dtype, scratch) ||
	    (flags & ~(unsigned)(BFS_RESIZE_MIRROR | BFS_RESIZE_STREAM)))
		return -EINVAL;
	resize_window(src, src_w, src_h, src_stride, dst_w, dst_h, 0, 0, dst, dst_w, dst_h,
	              dtype, flags, scratch);
	return 0;
}

int bfs_resize_rgb(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                   void *dst, int dst_w, int dst_h, bfs_dtype dtype, void *scratch)
{
	return bfs_resize_rgb_flags(src, src_w, src_h, src_stride, dst, dst_w, dst_h, dtype, 0,
	                            scratch);
}

int bfs_resize_rgb_mirror(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                          void *dst, int dst_w, int dst_h, bfs_dtype dtype, void *scratch)
{
	return bfs_resize_rgb_flags(src, src_w, src_h, src_stride, dst, dst_w, dst_h, dtype,
	                            BFS_RESIZE_MIRROR, scratch);
}

/* Python's round(d / 2) for d >= 0: a half goes to the even neighbour. */
static int center_offset(int64_t d)
{
	int64_t k = d / 2;

	return (int)((d & 1) && (k & 1) ? k + 1 : k);
}

/* torchvision's Resize(short_side) size and CenterCrop offsets; 0 or -EINVAL. */
static int crop_geometry(int src_w, int src_h, int short_side, int dst_w, int dst_h,
                         int *full_w, int *full_h, int *off_x, int *off_y)
{
	int64_t fw, fh;

	if (!dim_ok(src_w) || !dim_ok(src_h) || !dim_ok(short_side) || !dim_ok(dst_w) ||
	    !dim_ok(dst_h))
		return -EINVAL;
	if (src_w <= src_h) {
		fw = short_side;
		fh = (int64_t)short_side * src_h / src_w;
	} else {
		fh = short_side;
		fw = (int64_t)short_side * src_w / src_h;
	}
	if (fw > BFS_RESIZE_MAX_DIM || fh > BFS_RESIZE_MAX_DIM || dst_w > fw || dst_h > fh)
		return -EINVAL;
	*full_w = (int)fw;
	*full_h = (int)fh;
	*off_x = center_offset(fw - dst_w);
	*off_y = center_offset(fh - dst_h);
	return 0;
}

size_t bfs_resize_crop_scratch_size(int src_w, int src_h, int short_side, int dst_w,
                                    int dst_h)
{
	int fw, fh, ox, oy;

	if (crop_geometry(src_w, src_h, short_side, dst_w, dst_h, &fw, &fh, &ox, &oy))
		return 0;
	/* the window's passes carve what a dst_w x dst_h resize carves */
	return bfs_resize_scratch_size(src_w, src_h, dst_w, dst_h);
}

int bfs_resize_rgb_crop(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                        int short_side, void *dst, int dst_w, int dst_h, bfs_dtype dtype,
                        void *scratch)
{
	int fw, fh, ox, oy;

	if (!args_ok(src, src_w, src_h, src_stride, dst, dst_w, dst_h, dtype, scratch) ||
	    crop_geometry(src_w, src_h, short_side, dst_w, dst_h, &fw, &fh, &ox, &oy))
		return -EINVAL;
	resize_window(src, src_w, src_h, src_stride, fw, fh, ox, oy, dst, dst_w, dst_h, dtype,
	              0, scratch);
	return 0;
}
