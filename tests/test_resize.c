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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/pixels/resize.h"

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

static void test_resize_sse2_pass_gives_the_avx2_passes_bits(void **state)
{
	/* The horizontal pass (and a streamed float32 row's vertical pass)
	 * take AVX2 where the CPU has it; a child told not to
	 * (BATCHFS_RESIZE_NO_AVX2) runs the SSE2 passes over the same images,
	 * plain, mirrored and streamed, float32 and uint8, and must write the
	 * same bytes.  Widths around the vector loops' ends included. */
	static const int sizes[][4] = {
		{ 500, 375, 224, 224 }, { 53, 37, 64, 48 }, { 77, 101, 17, 31 }, { 3, 3, 5, 7 },
		{ 640, 480, 7, 5 }, { 33, 65, 33, 64 }, { 2, 1000, 3, 11 }, { 512, 683, 4, 3 },
	};
	int fd[2];
	pid_t pid;
	int status;

	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid != 0)
		close(fd[1]); /* a child that dies early ends the reads */
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 0 && pid != 0)
			continue; /* the parent reads the child's bytes below */
		if (pass == 1 && pid == 0)
			break;
		if (pid == 0) {
			close(fd[0]);
			setenv("BATCHFS_RESIZE_NO_AVX2", "1", 1);
		}
		for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
			int sw = sizes[t][0], sh = sizes[t][1], dw = sizes[t][2], dh = sizes[t][3];
			uint8_t *src = random_image(sw, sh, 300 + t);
			size_t n = (size_t)dw * dh * 3, bytes[2] = { n * 4, n };
			void *scratch = malloc(bfs_resize_scratch_size(sw, sh, dw, dh));
			bfs_dtype dt[2] = { BFS_DTYPE_FLOAT32, BFS_DTYPE_UINT8 };

			assert_non_null(scratch);
			for (int k = 0; k < 6; k++) {
				uint8_t *out = malloc(bytes[k % 2]), *child = malloc(bytes[k % 2]);
				unsigned flags = (k >= 2 && k < 4 ? BFS_RESIZE_MIRROR : 0) |
						 (k >= 4 ? BFS_RESIZE_STREAM : 0);
				int rc = bfs_resize_rgb_flags(src, sw, sh, (size_t)sw * 3, out, dw,
							      dh, dt[k % 2], flags, scratch);

				if (pid == 0) {
					if (rc || write(fd[1], out, bytes[k % 2]) != (ssize_t)bytes[k % 2])
						_exit(1);
				} else {
					size_t got = 0;
					ssize_t r;

					assert_int_equal(rc, 0);
					while (got < bytes[k % 2] &&
					       (r = read(fd[0], child + got, bytes[k % 2] - got)) > 0)
						got += (size_t)r;
					assert_int_equal(got, bytes[k % 2]);
					if (memcmp(out, child, bytes[k % 2]))
						fail_msg("%dx%d -> %dx%d %s flags %u: the SSE2 pass differs",
							 sw, sh, dw, dh, k % 2 ? "uint8" : "float32",
							 flags);
				}
				free(out);
				free(child);
			}
			free(scratch);
			free(src);
		}
		if (pid == 0)
			_exit(0);
	}
	close(fd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
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

static void test_resize_streamed_float32_is_exact_at_every_alignment_of_dst(void **state)
{
	/* With BFS_RESIZE_STREAM (and AVX2) float32 rows are written with
	 * 32-byte streaming stores from their first 32-byte boundary on, the
	 * floats before it and after the last full 8 one by one.  Every start
	 * within a 32-byte line, with rows of 8k floats and not, plain and
	 * mirrored, streamed and not: TF's values, and not a byte written
	 * outside dst. */
	static const int sizes[][4] = {
		{ 53, 37, 13, 9 }, { 500, 375, 224, 4 }, { 7, 5, 3, 2 }, { 40, 30, 16, 3 },
	};
	const size_t guard = 16; /* floats each side */

	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		int sw = sizes[t][0], sh = sizes[t][1], dw = sizes[t][2], dh = sizes[t][3];
		size_t n = (size_t)dw * dh * 3, total = n + 2 * guard + 8;
		uint8_t *src = random_image(sw, sh, 500 + t);
		void *scratch = malloc(bfs_resize_scratch_size(sw, sh, dw, dh));
		float *buf = aligned_alloc(32, (total * sizeof(float) + 31) & ~(size_t)31);

		assert_non_null(scratch);
		assert_non_null(buf);
		for (int off = 0; off < 8; off++) {
			for (int k = 0; k < 4; k++) {
				float *dst = buf + guard + off;
				int m = k & 1;
				unsigned flags = (m ? BFS_RESIZE_MIRROR : 0) |
						 (k & 2 ? BFS_RESIZE_STREAM : 0);

				memset(buf, 0xA5, total * sizeof(float));
				assert_int_equal(bfs_resize_rgb_flags(src, sw, sh, (size_t)sw * 3, dst,
								      dw, dh, BFS_DTYPE_FLOAT32,
								      flags, scratch),
						 0);
				for (size_t i = 0; i < total; i++) {
					const uint8_t *b = (const uint8_t *)(buf + i);

					if (buf + i >= dst && buf + i < dst + n)
						continue;
					if (b[0] != 0xA5 || b[1] != 0xA5 || b[2] != 0xA5 || b[3] != 0xA5)
						fail_msg("%dx%d->%dx%d flags %u at +%d floats: float "
							 "%zd outside dst written", sw, sh, dw, dh,
							 flags, off, (ssize_t)(buf + i - dst));
				}
				for (int y = 0; y < dh; y++)
					for (int x = 0; x < dw; x++)
						for (int c = 0; c < 3; c++) {
							float r = tf_reference(src, sw, sh, dw, dh, y,
									       m ? dw - 1 - x : x, c) /
								  255.0f;
							float got = dst[((size_t)y * dw + x) * 3 + c];

							if (got != r)
								fail_msg("%dx%d->%dx%d flags %u at +%d "
									 "floats, y=%d x=%d c=%d: got %a "
									 "want %a", sw, sh, dw, dh, flags,
									 off, y, x, c, got, r);
						}
			}
		}
		free(buf);
		free(scratch);
		free(src);
	}
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
	memset(dst, 0x5A, sizeof(dst));
	assert_int_equal(bfs_resize_rgb_flags(src, 2, 2, 6, dst, 2, 2, BFS_DTYPE_FLOAT32, 4u,
					      scratch), -EINVAL);
	assert_int_equal(dst[0], 0x5A); /* untouched */
	assert_int_equal(bfs_resize_rgb(src, 2, 2, 6, dst, 2, 2, BFS_DTYPE_UINT8, scratch), 0);
	assert_int_equal(bfs_resize_rgb_flags(src, 2, 2, 6, dst, 2, 2, BFS_DTYPE_FLOAT32,
					      BFS_RESIZE_MIRROR | BFS_RESIZE_STREAM, scratch), 0);
}

/* The center-crop window as torchvision computes it, written as Python
 * does: int(short * long / short) and round() on doubles (nearbyint rounds
 * halves to even in the default mode, as Python's round). */
static void torchvision_crop_box(int sw, int sh, int s, int dw, int dh, int *fw, int *fh,
                                 int *left, int *top)
{
	if (sw <= sh) {
		*fw = s;
		*fh = (int)((double)s * sh / sw);
	} else {
		*fh = s;
		*fw = (int)((double)s * sw / sh);
	}
	*left = (int)nearbyint((*fw - dw) / 2.0);
	*top = (int)nearbyint((*fh - dh) / 2.0);
}

/* bfs_resize_rgb_crop with exactly-sized heap buffers, misaligned scratch. */
static void *resize_crop(const uint8_t *src, int sw, int sh, size_t stride, int s, int dw,
                         int dh, bfs_dtype dt)
{
	size_t ss = bfs_resize_crop_scratch_size(sw, sh, s, dw, dh);
	uint8_t *scratch = malloc(ss + 1);
	void *dst = malloc((size_t)dw * dh * 3 * bfs_dtype_size(dt));

	assert_true(ss > 0);
	assert_non_null(scratch);
	assert_non_null(dst);
	memset(scratch, 0x5A, ss + 1);
	assert_int_equal(bfs_resize_rgb_crop(src, sw, sh, stride, s, dst, dw, dh, dt, scratch + 1),
	                 0);
	free(scratch);
	return dst;
}

static void test_resize_crop_equals_the_window_of_a_full_resize(void **state)
{
	/* src w, h, short side, dst w, h: landscape, portrait, square, upscale,
	 * odd differences that round down (58.5 -> 58) and up (1.5 -> 2),
	 * non-square windows, a full-size window, and one-pixel sources. */
	static const int cases[][5] = {
		{ 500, 375, 256, 224, 224 }, { 375, 500, 256, 224, 224 }, { 300, 300, 256, 224, 224 },
		{ 100, 80, 256, 224, 224 },  { 227, 227, 227, 224, 224 }, { 229, 229, 229, 224, 224 },
		{ 640, 427, 160, 150, 120 }, { 61, 97, 50, 50, 79 },      { 33, 17, 34, 64, 34 },
		{ 1, 1, 8, 5, 3 },           { 1, 9, 4, 3, 31 },          { 1000, 3, 7, 200, 6 },
	};
	static const bfs_dtype dts[] = { BFS_DTYPE_FLOAT32, BFS_DTYPE_UINT8, BFS_DTYPE_FLOAT16 };

	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
		int sw = cases[t][0], sh = cases[t][1], s = cases[t][2], dw = cases[t][3];
		int dh = cases[t][4], fw, fh, left, top;
		uint8_t *src = random_image(sw, sh, 300 + t);

		torchvision_crop_box(sw, sh, s, dw, dh, &fw, &fh, &left, &top);
		for (size_t d = 0; d < 3; d++) {
			size_t es = bfs_dtype_size(dts[d]), row = (size_t)dw * 3 * es;
			uint8_t *full = resize(src, sw, sh, (size_t)sw * 3, fw, fh, dts[d]);
			uint8_t *win = resize_crop(src, sw, sh, (size_t)sw * 3, s, dw, dh, dts[d]);

			for (int y = 0; y < dh; y++)
				if (memcmp(win + y * row,
				           full + (((size_t)(top + y) * fw + left) * 3) * es, row))
					fail_msg("%dx%d short %d -> %dx%d (%s): row %d differs", sw, sh,
					         s, dw, dh, bfs_dtype_name(dts[d]), y);
			free(full);
			free(win);
		}
		free(src);
	}
}

static void test_resize_crop_rounds_odd_margins_half_to_even(void **state)
{
	/* 227 - 224 = 3: round(1.5) = 2; 229 - 224 = 5: round(2.5) = 2.  With
	 * short side = source size the resize is the identity, so the window
	 * is visible in the pixels. */
	uint8_t *src = random_image(229, 227, 7);
	uint8_t *u = resize_crop(src, 229, 227, 229 * 3, 227, 224, 224, BFS_DTYPE_UINT8);

	for (int y = 0; y < 224; y++)
		assert_memory_equal(u + (size_t)y * 224 * 3, src + ((size_t)(y + 2) * 229 + 2) * 3,
		                    224 * 3);
	free(src);
	free(u);
}

static void test_resize_crop_honours_source_stride(void **state)
{
	int w = 45, h = 30;
	size_t stride = (size_t)w * 3 + 7;
	uint8_t *packed = random_image(w, h, 8), *padded = malloc(stride * h);
	float *a, *b;

	assert_non_null(padded);
	memset(padded, 0xEE, stride * h);
	for (int y = 0; y < h; y++)
		memcpy(padded + y * stride, packed + (size_t)y * w * 3, (size_t)w * 3);
	a = resize_crop(packed, w, h, (size_t)w * 3, 40, 32, 32, BFS_DTYPE_FLOAT32);
	b = resize_crop(padded, w, h, stride, 40, 32, 32, BFS_DTYPE_FLOAT32);
	assert_memory_equal(a, b, 32 * 32 * 3 * sizeof(float));
	free(packed);
	free(padded);
	free(a);
	free(b);
}

static void test_resize_crop_rejects_windows_that_do_not_fit(void **state)
{
	uint8_t src[4 * 4 * 3] = { 0 }, dst[300 * 300 * 3];
	static uint8_t scratch[1 << 16];

	/* short side below a window side */
	assert_true(bfs_resize_crop_scratch_size(4, 4, 200, 224, 224) == 0);
	assert_int_equal(bfs_resize_rgb_crop(src, 4, 4, 12, 200, dst, 224, 224, BFS_DTYPE_UINT8,
	                                     scratch), -EINVAL);
	/* 8x4 -> short 10 gives 20x10: a 21-wide window does not fit */
	assert_true(bfs_resize_crop_scratch_size(8, 4, 10, 20, 10) > 0);
	assert_true(bfs_resize_crop_scratch_size(8, 4, 10, 21, 10) == 0);
	assert_true(bfs_resize_crop_scratch_size(4, 4, 0, 1, 1) == 0);
	assert_true(bfs_resize_crop_scratch_size(1, 1 << 20, 1 << 10, 1, 1) == 0); /* 2^30 tall */
	assert_int_equal(bfs_resize_rgb_crop(NULL, 4, 4, 12, 8, dst, 4, 4, BFS_DTYPE_UINT8,
	                                     scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb_crop(src, 4, 4, 11, 8, dst, 4, 4, BFS_DTYPE_UINT8,
	                                     scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb_crop(src, 4, 4, 12, 8, dst, 4, 4, (bfs_dtype)7,
	                                     scratch), -EINVAL);
	assert_int_equal(bfs_resize_rgb_crop(src, 4, 4, 12, 8, dst, 4, 4, BFS_DTYPE_UINT8,
	                                     scratch), 0);
}

static void test_resize_f16_n_matches_numpy_for_every_pixel_value_and_specials(void **state)
{
	/* np.float16(np.float32(v) / np.float32(255)).view(np.uint16), v = 0..255 */
	static const uint16_t by_value[256] = {
		0x0000, 0x1c04, 0x2004, 0x2206, 0x2404, 0x2505, 0x2606, 0x2707, 0x2804, 0x2885,
		0x2905, 0x2986, 0x2a06, 0x2a87, 0x2b07, 0x2b88, 0x2c04, 0x2c44, 0x2c85, 0x2cc5,
		0x2d05, 0x2d45, 0x2d86, 0x2dc6, 0x2e06, 0x2e46, 0x2e87, 0x2ec7, 0x2f07, 0x2f47,
		0x2f88, 0x2fc8, 0x3004, 0x3024, 0x3044, 0x3064, 0x3085, 0x30a5, 0x30c5, 0x30e5,
		0x3105, 0x3125, 0x3145, 0x3165, 0x3186, 0x31a6, 0x31c6, 0x31e6, 0x3206, 0x3226,
		0x3246, 0x3266, 0x3287, 0x32a7, 0x32c7, 0x32e7, 0x3307, 0x3327, 0x3347, 0x3367,
		0x3388, 0x33a8, 0x33c8, 0x33e8, 0x3404, 0x3414, 0x3424, 0x3434, 0x3444, 0x3454,
		0x3464, 0x3474, 0x3485, 0x3495, 0x34a5, 0x34b5, 0x34c5, 0x34d5, 0x34e5, 0x34f5,
		0x3505, 0x3515, 0x3525, 0x3535, 0x3545, 0x3555, 0x3565, 0x3575, 0x3586, 0x3596,
		0x35a6, 0x35b6, 0x35c6, 0x35d6, 0x35e6, 0x35f6, 0x3606, 0x3616, 0x3626, 0x3636,
		0x3646, 0x3656, 0x3666, 0x3676, 0x3687, 0x3697, 0x36a7, 0x36b7, 0x36c7, 0x36d7,
		0x36e7, 0x36f7, 0x3707, 0x3717, 0x3727, 0x3737, 0x3747, 0x3757, 0x3767, 0x3777,
		0x3788, 0x3798, 0x37a8, 0x37b8, 0x37c8, 0x37d8, 0x37e8, 0x37f8, 0x3804, 0x380c,
		0x3814, 0x381c, 0x3824, 0x382c, 0x3834, 0x383c, 0x3844, 0x384c, 0x3854, 0x385c,
		0x3864, 0x386c, 0x3874, 0x387c, 0x3885, 0x388d, 0x3895, 0x389d, 0x38a5, 0x38ad,
		0x38b5, 0x38bd, 0x38c5, 0x38cd, 0x38d5, 0x38dd, 0x38e5, 0x38ed, 0x38f5, 0x38fd,
		0x3905, 0x390d, 0x3915, 0x391d, 0x3925, 0x392d, 0x3935, 0x393d, 0x3945, 0x394d,
		0x3955, 0x395d, 0x3965, 0x396d, 0x3975, 0x397d, 0x3986, 0x398e, 0x3996, 0x399e,
		0x39a6, 0x39ae, 0x39b6, 0x39be, 0x39c6, 0x39ce, 0x39d6, 0x39de, 0x39e6, 0x39ee,
		0x39f6, 0x39fe, 0x3a06, 0x3a0e, 0x3a16, 0x3a1e, 0x3a26, 0x3a2e, 0x3a36, 0x3a3e,
		0x3a46, 0x3a4e, 0x3a56, 0x3a5e, 0x3a66, 0x3a6e, 0x3a76, 0x3a7e, 0x3a87, 0x3a8f,
		0x3a97, 0x3a9f, 0x3aa7, 0x3aaf, 0x3ab7, 0x3abf, 0x3ac7, 0x3acf, 0x3ad7, 0x3adf,
		0x3ae7, 0x3aef, 0x3af7, 0x3aff, 0x3b07, 0x3b0f, 0x3b17, 0x3b1f, 0x3b27, 0x3b2f,
		0x3b37, 0x3b3f, 0x3b47, 0x3b4f, 0x3b57, 0x3b5f, 0x3b67, 0x3b6f, 0x3b77, 0x3b7f,
		0x3b88, 0x3b90, 0x3b98, 0x3ba0, 0x3ba8, 0x3bb0, 0x3bb8, 0x3bc0, 0x3bc8, 0x3bd0,
		0x3bd8, 0x3be0, 0x3be8, 0x3bf0, 0x3bf8, 0x3c00,
	};
	/* float bits -> np.float32(x).astype(np.float16).view(np.uint16): signed
	 * zeros, the largest half and the ties around it, overflow, inf, NaN,
	 * subnormal ties, the normal/subnormal boundary, ties in the normals,
	 * float subnormals, and normalized ImageNet values */
	static const struct { uint32_t f; uint16_t h; } special[] = {
		{ 0x00000000u, 0x0000 }, { 0x80000000u, 0x8000 }, { 0x3f800000u, 0x3c00 },
		{ 0xbf800000u, 0xbc00 }, { 0x477fe000u, 0x7bff }, { 0x477feffdu, 0x7bff },
		{ 0x477ff000u, 0x7c00 }, { 0xc77ff000u, 0xfc00 }, { 0x501502f9u, 0x7c00 },
		{ 0x7f800000u, 0x7c00 }, { 0xff800000u, 0xfc00 }, { 0x7fc00000u, 0x7e00 },
		{ 0x33800000u, 0x0001 }, { 0x33000000u, 0x0000 }, { 0x33000001u, 0x0001 },
		{ 0x33c00000u, 0x0002 }, { 0x38800000u, 0x0400 }, { 0x387fe000u, 0x0400 },
		{ 0x387fc000u, 0x03ff }, { 0x3f801000u, 0x3c00 }, { 0x3f803000u, 0x3c02 },
		{ 0x3f801008u, 0x3c01 }, { 0x3dcccccdu, 0x2e66 }, { 0x3eaaaaabu, 0x3555 },
		{ 0xc0078bacu, 0xc03c }, { 0x4028f5c3u, 0x4148 }, { 0x00800000u, 0x0000 },
		{ 0x00000001u, 0x0000 }, { 0x337ffae5u, 0x0001 }, { 0x3300d959u, 0x0001 },
		{ 0x32fffae5u, 0x0000 }, { 0x44fff000u, 0x6800 }, { 0x45001000u, 0x6800 },
		{ 0x45800800u, 0x6c00 }, { 0x3f000000u, 0x3800 }, { 0xc0078bbdu, 0xc03c },
	};
	enum { NS = sizeof(special) / sizeof(special[0]) };
	float in[256 + NS];
	uint16_t out[256 + NS + 1];

	for (int v = 0; v < 256; v++)
		in[v] = (float)v / 255.0f;
	for (int i = 0; i < NS; i++)
		memcpy(&in[256 + i], &special[i].f, sizeof(float));
	out[256 + NS] = 0xbeef;
	/* whole arrays (vector path) and single elements (scalar tail) */
	bfs_resize_f16_n(in, out, 256 + NS);
	assert_int_equal(out[256 + NS], 0xbeef);
	for (int v = 0; v < 256; v++)
		if (out[v] != by_value[v])
			fail_msg("%d/255 -> %04x, numpy %04x", v, out[v], by_value[v]);
	for (int i = 0; i < NS; i++) {
		uint16_t one;

		bfs_resize_f16_n(&in[256 + i], &one, 1);
		if (out[256 + i] != special[i].h || one != special[i].h)
			fail_msg("float %08x -> %04x/%04x, numpy %04x", special[i].f, out[256 + i],
			         one, special[i].h);
	}
}

static void test_resize_f16_n_gives_the_same_bits_on_every_path(void **state)
{
	/* Whole arrays take the vector path (F16C or SSE2), single elements the
	 * scalar one: random bit patterns, NaNs with payloads and signs included,
	 * must agree bit for bit.  (All 2^32 floats were checked once this way.) */
	enum { N = 1 << 20 };
	float *in = malloc(N * sizeof(float));
	uint16_t *out = malloc(N * sizeof(uint16_t));
	uint64_t seed = 77;

	assert_non_null(in);
	assert_non_null(out);
	for (int i = 0; i < N; i++) {
		uint32_t u = (uint32_t)splitmix64(&seed);

		if (i % 16 == 0)
			u |= 0x7f800000u; /* inf or NaN */
		memcpy(&in[i], &u, sizeof(u));
	}
	bfs_resize_f16_n(in, out, N);
	for (int i = 0; i < N; i++) {
		uint16_t one;

		bfs_resize_f16_n(&in[i], &one, 1);
		if (one != out[i]) {
			uint32_t u;

			memcpy(&u, &in[i], sizeof(u));
			fail_msg("float %08x: vector %04x, scalar %04x", u, out[i], one);
		}
	}
	free(in);
	free(out);
}

static void test_resize_mirror_is_the_flip_of_the_resize_bit_for_bit(void **state)
{
	static const int sizes[][4] = { { 1, 5, 7, 3 }, { 2, 4, 9, 9 }, { 3, 3, 1, 4 },
					{ 37, 23, 64, 48 }, { 500, 375, 224, 224 },
					{ 64, 64, 13, 17 }, { 5, 90, 200, 11 }, { 224, 1, 31, 2 } };
	const bfs_dtype dts[] = { BFS_DTYPE_FLOAT32, BFS_DTYPE_UINT8, BFS_DTYPE_FLOAT16 };
	uint64_t seed = 3;

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (size_t d = 0; d < 3; d++) {
			int sw = sizes[k][0], sh = sizes[k][1], dw = sizes[k][2], dh = sizes[k][3];
			size_t es = bfs_dtype_size(dts[d]), px = 3 * es;
			size_t ss = bfs_resize_scratch_size(sw, sh, dw, dh);
			uint8_t *src = malloc((size_t)sw * sh * 3), *scratch = malloc(ss + 1);
			uint8_t *plain, *mir = malloc((size_t)dw * dh * px);

			assert_non_null(src);
			assert_non_null(scratch);
			assert_non_null(mir);
			for (size_t i = 0; i < (size_t)sw * sh * 3; i++) {
				seed = seed * 6364136223846793005ull + 1442695040888963407ull;
				src[i] = (uint8_t)(seed >> 56);
			}
			plain = resize(src, sw, sh, (size_t)sw * 3, dw, dh, dts[d]);
			memset(scratch, 0x5A, ss + 1);
			assert_int_equal(bfs_resize_rgb_mirror(src, sw, sh, (size_t)sw * 3, mir, dw, dh,
							       dts[d], scratch + 1), 0);
			for (int y = 0; y < dh; y++)
				for (int x = 0; x < dw; x++)
					if (memcmp(mir + ((size_t)y * dw + x) * px,
						   plain + ((size_t)y * dw + dw - 1 - x) * px, px))
						fail_msg("%dx%d -> %dx%d dtype %d: pixel (%d, %d) differs",
							 sw, sh, dw, dh, (int)dts[d], x, y);
			free(plain);
			free(mir);
			free(scratch);
			free(src);
		}
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
		cmocka_unit_test(test_resize_sse2_pass_gives_the_avx2_passes_bits),
		cmocka_unit_test(test_resize_float16_is_the_rounded_float32_value),
		cmocka_unit_test(test_resize_float16_rounds_tiny_values_to_subnormals),
		cmocka_unit_test(test_resize_honours_source_stride),
		cmocka_unit_test(test_resize_streamed_float32_is_exact_at_every_alignment_of_dst),
		cmocka_unit_test(test_resize_stays_inside_the_scratch_it_asked_for),
		cmocka_unit_test(test_resize_is_a_pure_function_of_its_inputs),
		cmocka_unit_test(test_resize_rejects_bad_arguments),
		cmocka_unit_test(test_resize_crop_equals_the_window_of_a_full_resize),
		cmocka_unit_test(test_resize_crop_rounds_odd_margins_half_to_even),
		cmocka_unit_test(test_resize_crop_honours_source_stride),
		cmocka_unit_test(test_resize_crop_rejects_windows_that_do_not_fit),
		cmocka_unit_test(test_resize_f16_n_matches_numpy_for_every_pixel_value_and_specials),
		cmocka_unit_test(test_resize_f16_n_gives_the_same_bits_on_every_path),
		cmocka_unit_test(test_resize_mirror_is_the_flip_of_the_resize_bit_for_bit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
