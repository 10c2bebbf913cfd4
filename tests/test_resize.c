/*
 * test_resize.c - bfs_resize_rgb: hand-computed values, rounding, strides,
 * bounds of the scratch buffer, and bit-equality with a naive per-pixel
 * transcription of TensorFlow's ResizeBilinear (half_pixel_centers).
 */
/* The reference must round like TF (no FMA), whatever flags build the test. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/resize.h"

/* Resize with exactly-sized heap buffers (so ASan/valgrind see overruns);
 * scratch deliberately misaligned by one byte and filled with garbage. */
static void *resize(const uint8_t *src, int sw, int sh, size_t stride, int dw, int dh,
                    bfs_dtype dt)
{
	size_t ss = bfs_resize_scratch_size(sw, sh, dw, dh);
	uint8_t *scratch = malloc(ss + 1);
	void *dst = malloc((size_t)dw * dh * 3 * bfs_dtype_size(dt));

	assert_true(ss > 0);
	assert_non_null(scratch);
	assert_non_null(dst);
	memset(scratch, 0xA5, ss + 1);
	assert_int_equal(bfs_resize_rgb(src, sw, sh, stride, dst, dw, dh, dt, scratch + 1), 0);
	free(scratch);
	return dst;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint8_t *random_image(int w, int h, uint64_t seed)
{
	uint8_t *p = malloc((size_t)w * h * 3);

	assert_non_null(p);
	for (size_t i = 0; i < (size_t)w * h * 3; i++)
		p[i] = (uint8_t)splitmix64(&seed);
	return p;
}

/* TF's resize_bilinear_op.cc, one output element at a time, no cleverness. */
static float tf_reference(const uint8_t *src, int sw, int sh, int dw, int dh, int y, int x, int c)
{
	float xs = (float)sw / (float)dw, ys = (float)sh / (float)dh;
	float xin = ((float)x + 0.5f) * xs - 0.5f, yin = ((float)y + 0.5f) * ys - 0.5f;
	float xf = floorf(xin), yf = floorf(yin);
	int xl = xf > 0 ? (int)xf : 0, yl = yf > 0 ? (int)yf : 0;
	int xu = (int)ceilf(xin) < sw - 1 ? (int)ceilf(xin) : sw - 1;
	int yu = (int)ceilf(yin) < sh - 1 ? (int)ceilf(yin) : sh - 1;
	float xlerp = xin - xf, ylerp = yin - yf;
	float tl = src[((size_t)yl * sw + xl) * 3 + c], tr = src[((size_t)yl * sw + xu) * 3 + c];
	float bl = src[((size_t)yu * sw + xl) * 3 + c], br = src[((size_t)yu * sw + xu) * 3 + c];
	volatile float top = tl + (tr - tl) * xlerp; /* volatile: no FMA contraction */
	volatile float bottom = bl + (br - bl) * xlerp;
	volatile float d = (bottom - top) * ylerp;

	return top + d;
}

static void test_resize_upscales_2x2_to_4x4_with_half_pixel_centers(void **state)
{
	/* Channel 0 corners: TL 0, TR 100, BL 200, BR 40; channel 1 = 255 - ch0;
	 * channel 2 = 7.  Half-pixel weights for 2 -> 4 are 0, .25, .75, 1. */
	static const uint8_t src[2 * 2 * 3] = { 0, 255, 7, 100, 155, 7, 200, 55, 7, 40, 215, 7 };
	static const float want[4][4] = {
		{ 0, 25, 75, 100 },
		{ 50, 58.75f, 76.25f, 85 },
		{ 150, 126.25f, 78.75f, 55 },
		{ 200, 160, 80, 40 },
	};
	static const uint8_t want_u8[4][4] = {
		{ 0, 25, 75, 100 }, { 50, 59, 76, 85 }, { 150, 126, 79, 55 }, { 200, 160, 80, 40 },
	};
	float *f = resize(src, 2, 2, 6, 4, 4, BFS_DTYPE_FLOAT32);
	uint8_t *u = resize(src, 2, 2, 6, 4, 4, BFS_DTYPE_UINT8);

	for (int y = 0; y < 4; y++) {
		for (int x = 0; x < 4; x++) {
			const float *p = f + (y * 4 + x) * 3;

			assert_true(p[0] == want[y][x] / 255.0f);
			assert_true(p[1] == (255.0f - want[y][x]) / 255.0f);
			assert_true(p[2] == 7.0f / 255.0f);
			assert_int_equal(u[(y * 4 + x) * 3], want_u8[y][x]);
			assert_int_equal(u[(y * 4 + x) * 3 + 2], 7);
		}
	}
	free(f);
	free(u);
}

static void test_resize_identity_size_returns_the_input(void **state)
{
	uint8_t *src = random_image(13, 7, 1);
	float *f = resize(src, 13, 7, 39, 13, 7, BFS_DTYPE_FLOAT32);
	uint8_t *u = resize(src, 13, 7, 39, 13, 7, BFS_DTYPE_UINT8);

	for (int i = 0; i < 13 * 7 * 3; i++) {
		assert_true(f[i] == (float)src[i] / 255.0f);
		assert_int_equal(u[i], src[i]);
	}
	free(src);
	free(f);
	free(u);
}

static void test_resize_handles_one_pixel_wide_and_tall_images(void **state)
{
	/* 1x6 column -> 1x3: rows average in pairs; width 1 -> 4 replicates. */
	static const uint8_t col[6 * 3] = {
		10, 0, 255, 20, 2, 255, 30, 4, 0, 50, 6, 0, 90, 8, 1, 91, 10, 2,
	};
	uint8_t *u = resize(col, 1, 6, 3, 4, 3, BFS_DTYPE_UINT8);
	static const uint8_t want[3][3] = { { 15, 1, 255 }, { 40, 5, 0 }, { 90, 9, 2 } };

	/* 90.5 -> 90 and 1.5 -> 2: ties to even. */
	for (int y = 0; y < 3; y++)
		for (int x = 0; x < 4; x++)
			for (int c = 0; c < 3; c++)
				assert_int_equal(u[(y * 4 + x) * 3 + c], want[y][c]);
	free(u);

	/* 5x1 row -> 10x1: bit-equal to the reference. */
	{
		uint8_t *src = random_image(5, 1, 2);
		float *f = resize(src, 5, 1, 15, 10, 1, BFS_DTYPE_FLOAT32);

		for (int x = 0; x < 10; x++)
			for (int c = 0; c < 3; c++)
				assert_true(f[x * 3 + c] ==
				            tf_reference(src, 5, 1, 10, 1, 0, x, c) / 255.0f);
		free(src);
		free(f);
	}
}

static void test_resize_downscale_by_two_averages_2x2_blocks(void **state)
{
	uint8_t *src = random_image(8, 6, 3);
	float *f = resize(src, 8, 6, 24, 4, 3, BFS_DTYPE_FLOAT32);

	for (int y = 0; y < 3; y++) {
		for (int x = 0; x < 4; x++) {
			for (int c = 0; c < 3; c++) {
				const uint8_t *p = src + ((size_t)(2 * y) * 8 + 2 * x) * 3 + c;
				float avg = (float)(p[0] + p[3] + p[24] + p[27]) / 4.0f;

				assert_true(f[(y * 4 + x) * 3 + c] == avg / 255.0f);
			}
		}
	}
	free(src);
	free(f);
}

static void test_resize_uint8_rounds_ties_to_even(void **state)
{
	/* 8x1 -> 4x1 averages pairs: 0.5, 1.5, 2.5, 254.5 -> 0, 2, 2, 254. */
	uint8_t src[8 * 3];
	static const uint8_t pairs[4][2] = { { 0, 1 }, { 1, 2 }, { 2, 3 }, { 254, 255 } };
	static const uint8_t want[4] = { 0, 2, 2, 254 };
	uint8_t *u;

	for (int x = 0; x < 4; x++)
		for (int c = 0; c < 3; c++) {
			src[(2 * x) * 3 + c] = pairs[x][0];
			src[(2 * x + 1) * 3 + c] = pairs[x][1];
		}
	u = resize(src, 8, 1, 24, 4, 1, BFS_DTYPE_UINT8);
	for (int x = 0; x < 4; x++)
		for (int c = 0; c < 3; c++)
			assert_int_equal(u[x * 3 + c], want[x]);
	free(u);
}

static void test_resize_matches_tensorflow_formula_bit_for_bit(void **state)
{
	static const int sizes[][4] = {
		{ 500, 375, 224, 224 }, { 53, 37, 64, 48 }, { 20, 15, 64, 64 }, { 77, 101, 17, 31 },
		{ 3, 3, 5, 7 }, { 1, 1, 9, 4 }, { 640, 480, 7, 5 }, { 33, 65, 33, 64 },
		{ 2, 1000, 3, 11 }, { 17, 17, 16, 18 },
	};

	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		int sw = sizes[t][0], sh = sizes[t][1], dw = sizes[t][2], dh = sizes[t][3];
		uint8_t *src = random_image(sw, sh, 100 + t);
		float *f = resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_FLOAT32);
		uint8_t *u = resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_UINT8);

		for (int y = 0; y < dh; y++) {
			for (int x = 0; x < dw; x++) {
				for (int c = 0; c < 3; c++) {
					float r = tf_reference(src, sw, sh, dw, dh, y, x, c);
					size_t i = ((size_t)y * dw + x) * 3 + c;

					if (f[i] != r / 255.0f || u[i] != (uint8_t)nearbyintf(r))
						fail_msg("%dx%d->%dx%d at y=%d x=%d c=%d: got %a/%d want %a/%d",
						         sw, sh, dw, dh, y, x, c, f[i], u[i], r / 255.0f,
						         (int)nearbyintf(r));
				}
			}
		}
		free(src);
		free(f);
		free(u);
	}
}

/* IEEE half of a finite f in [0, 65504], round to nearest even, by double
 * arithmetic (independent of resize.c's bit tricks). */
static uint16_t ref_half(float f)
{
	int e, E;
	double r;

	if (f == 0.0f)
		return 0;
	frexp(f, &e);
	E = e - 1 < -14 ? -14 : e - 1; /* f = 1.m * 2^E, or subnormal */
	r = nearbyint(ldexp(f, 10 - E)); /* exact scaling, then round */
	if (E == -14 && r < 1024)
		return (uint16_t)r;
	if (r == 2048) {
		E++;
		r = 1024;
	}
	return (uint16_t)(((E + 15) << 10) | ((int)r - 1024));
}

static void test_resize_float16_is_the_rounded_float32_value(void **state)
{
	static const int sizes[][4] = {
		{ 500, 375, 224, 224 }, { 20, 15, 64, 64 }, { 77, 101, 17, 31 }, { 3, 2, 9, 5 },
	};
	/* ref_half itself: 1 -> 0x3c00, 1/255, a tie that rounds down, the
	 * smallest subnormal, and a value that rounds up into the normals. */
	assert_int_equal(ref_half(1.0f), 0x3c00);
	assert_int_equal(ref_half(0.5f), 0x3800);
	assert_int_equal(ref_half(1.0f / 255.0f), 0x1c04);
	assert_int_equal(ref_half(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(ref_half(0x1p-24f), 0x0001);
	assert_int_equal(ref_half(0x1p-14f - 0x1p-26f), 0x0400);

	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		int sw = sizes[t][0], sh = sizes[t][1], dw = sizes[t][2], dh = sizes[t][3];
		uint8_t *src = random_image(sw, sh, 200 + t);
		float *f = resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_FLOAT32);
		uint16_t *h = resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_FLOAT16);

		for (size_t i = 0; i < (size_t)dw * dh * 3; i++)
			if (h[i] != ref_half(f[i]))
				fail_msg("%dx%d->%dx%d element %zu: %a -> %04x, want %04x", sw, sh,
				         dw, dh, i, f[i], h[i], ref_half(f[i]));
		free(src);
		free(f);
		free(h);
	}
}

static void test_resize_float16_rounds_tiny_values_to_subnormals(void **state)
{
	/* 1 -> 0 over 256 output pixels: values down to 1/(255*512) land in
	 * the half subnormal range (< 2^-14) and must round like numpy. */
	uint8_t src[2 * 3] = { 1, 1, 1, 0, 0, 0 };
	float *f = resize(src, 2, 1, 6, 256, 1, BFS_DTYPE_FLOAT32);
	uint16_t *h = resize(src, 2, 1, 6, 256, 1, BFS_DTYPE_FLOAT16);
	int subnormals = 0;

	for (int i = 0; i < 256 * 3; i++) {
		assert_int_equal(h[i], ref_half(f[i]));
		subnormals += h[i] > 0 && h[i] < 0x0400;
	}
	assert_true(subnormals > 0);
	free(f);
	free(h);
}

static void test_resize_honours_source_stride(void **state)
{
	int w = 31, h = 23;
	size_t stride = (size_t)w * 3 + 13;
	uint8_t *packed = random_image(w, h, 4);
	uint8_t *padded = malloc(stride * h);
	float *a, *b;

	assert_non_null(padded);
	memset(padded, 0xEE, stride * h);
	for (int y = 0; y < h; y++)
		memcpy(padded + y * stride, packed + (size_t)y * w * 3, (size_t)w * 3);
	a = resize(packed, w, h, (size_t)w * 3, 19, 40, BFS_DTYPE_FLOAT32);
	b = resize(padded, w, h, stride, 19, 40, BFS_DTYPE_FLOAT32);
	assert_memory_equal(a, b, 19 * 40 * 3 * sizeof(float));
	free(packed);
	free(padded);
	free(a);
	free(b);
}

static void test_resize_stays_inside_the_scratch_it_asked_for(void **state)
{
	/* resize() allocates exactly the advertised scratch (misaligned) and
	 * dst; ASan/valgrind flag any overrun.  Sweep shapes and directions. */
	static const int dims[] = { 1, 2, 3, 5, 16, 17, 63, 224 };
	uint64_t seed = 9;

	for (size_t i = 0; i < 8; i++) {
		for (size_t j = 0; j < 8; j++) {
			int sw = dims[i], sh = dims[(i + j) % 8], dw = dims[j], dh = dims[(i * 3 + j) % 8];
			uint8_t *src = random_image(sw, sh, splitmix64(&seed));
			free(resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_FLOAT32));
			free(resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_UINT8));
			free(resize(src, sw, sh, (size_t)sw * 3, dw, dh, BFS_DTYPE_FLOAT16));
			free(src);
		}
	}
}

static void test_resize_is_a_pure_function_of_its_inputs(void **state)
{
	uint8_t *src = random_image(97, 61, 5);
	float *a = resize(src, 97, 61, 291, 40, 50, BFS_DTYPE_FLOAT32);
	float *b = resize(src, 97, 61, 291, 40, 50, BFS_DTYPE_FLOAT32);

	assert_memory_equal(a, b, 40 * 50 * 3 * sizeof(float));
	free(src);
	free(a);
	free(b);
}

static void test_resize_rejects_bad_arguments(void **state)
{
	uint8_t src[12] = { 0 }, dst[64 * 4];
	uint8_t scratch[4096];

	assert_int_equal(bfs_resize_scratch_size(0, 2, 2, 2), 0);
	assert_int_equal(bfs_resize_scratch_size(2, 2, 2, -1), 0);
	assert_int_equal(bfs_resize_scratch_size(2, 2, BFS_RESIZE_MAX_DIM + 1, 2), 0);
	assert_true(bfs_resize_scratch_size(2, 2, 2, 2) <= sizeof(scratch));
	assert_int_equal(bfs_resize_rgb(NULL, 2, 2, 6, dst, 2, 2, BFS_DTYPE_UINT8, scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 6, NULL, 2, 2, BFS_DTYPE_UINT8, scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 6, dst, 2, 2, BFS_DTYPE_UINT8, NULL), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 5, dst, 2, 2, BFS_DTYPE_UINT8, scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 0, 2, 6, dst, 2, 2, BFS_DTYPE_UINT8, scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 6, dst, 2, 0, BFS_DTYPE_UINT8, scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 6, dst, 2, 2, (bfs_dtype)7, scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 6, dst, 2, 2, BFS_DTYPE_UINT8, scratch), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resize_upscales_2x2_to_4x4_with_half_pixel_centers),
		cmocka_unit_test(test_resize_identity_size_returns_the_input),
		cmocka_unit_test(test_resize_handles_one_pixel_wide_and_tall_images),
		cmocka_unit_test(test_resize_downscale_by_two_averages_2x2_blocks),
		cmocka_unit_test(test_resize_uint8_rounds_ties_to_even),
		cmocka_unit_test(test_resize_matches_tensorflow_formula_bit_for_bit),
		cmocka_unit_test(test_resize_float16_is_the_rounded_float32_value),
		cmocka_unit_test(test_resize_float16_rounds_tiny_values_to_subnormals),
		cmocka_unit_test(test_resize_honours_source_stride),
		cmocka_unit_test(test_resize_stays_inside_the_scratch_it_asked_for),
		cmocka_unit_test(test_resize_is_a_pure_function_of_its_inputs),
		cmocka_unit_test(test_resize_rejects_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
