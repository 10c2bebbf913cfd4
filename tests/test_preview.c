/*
 * test_preview.c - engine/pixels/preview: sheet size and JPEG validity, colors
 * kept through normalization and every dtype, NCHW = NHWC, area-average
 * shrinking, label strips and their text, bad arguments.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/pixels/preview.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

static const float IMAGENET_MEAN[3] = { 0.485f, 0.456f, 0.406f };
static const float IMAGENET_STD[3] = { 0.229f, 0.224f, 0.225f };

typedef struct {
	unsigned char *jpeg;
	unsigned long len;
	int w, h, subsamp;
	uint8_t *rgb; /* decoded */
} sheet;

static bfs_preview_opts opts(int h, int w, bfs_dtype dt)
{
	bfs_preview_opts o;

	memset(&o, 0, sizeof(o));
	o.h = h;
	o.w = w;
	o.dtype = dt;
	return o;
}

/* Render and decode; fails the test on any error. */
static sheet render(const bfs_preview_opts *o, const void *images,
		    const int64_t *labels, const char *const *names,
		    unsigned n)
{
	sheet s = { 0 };
	char err[BFS_ERRMSG_MAX] = "";
	int cs, rc;
	tjhandle tj;

	rc = bfs_preview_render(o, images, labels, names, n, &s.jpeg, &s.len,
				err);
	if (rc)
		fail_msg("bfs_preview_render: %d %s", rc, err);
	assert_non_null(s.jpeg);
	assert_true(s.len > 0);
	tj = tjInitDecompress();
	assert_non_null(tj);
	assert_int_equal(tjDecompressHeader3(tj, s.jpeg, s.len, &s.w, &s.h,
					     &s.subsamp, &cs), 0);
	s.rgb = malloc((size_t)s.w * (size_t)s.h * 3);
	assert_non_null(s.rgb);
	assert_int_equal(tjDecompress2(tj, s.jpeg, s.len, s.rgb, s.w, 0, s.h,
				       TJPF_RGB, 0), 0);
	tjDestroy(tj);
	return s;
}

static void sheet_free(sheet *s)
{
	tjFree(s->jpeg);
	free(s->rgb);
}

/* Mean of channel c over a w x h rectangle of the decoded sheet. */
static double rect_mean(const sheet *s, int x, int y, int w, int h, int c)
{
	double acc = 0;

	for (int r = y; r < y + h; r++)
		for (int k = x; k < x + w; k++)
			acc += s->rgb[((size_t)r * (size_t)s->w + (size_t)k) * 3 +
				      (size_t)c];
	return acc / ((double)w * h);
}

/* Brightest channel value in a w x h rectangle of the decoded sheet. */
static int rect_max(const sheet *s, int x, int y, int w, int h)
{
	int m = 0;

	for (int r = y; r < y + h; r++)
		for (int k = x; k < x + w; k++)
			for (int c = 0; c < 3; c++) {
				int v = s->rgb[((size_t)r * (size_t)s->w +
						(size_t)k) * 3 + (size_t)c];

				m = v > m ? v : m;
			}
	return m;
}

static float *flat_nhwc(int h, int w, unsigned n, const uint8_t (*rgb)[3],
			int normalize)
{
	float *p = malloc((size_t)n * (size_t)h * (size_t)w * 3 * sizeof(float));

	assert_non_null(p);
	for (unsigned i = 0; i < n; i++)
		for (size_t q = 0; q < (size_t)h * (size_t)w; q++)
			for (int c = 0; c < 3; c++) {
				float v = rgb[i][c] / 255.0f;

				if (normalize)
					v = (v - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
				p[((size_t)i * (size_t)h * (size_t)w + q) * 3 +
				  (size_t)c] = v;
			}
	return p;
}

/* A smooth, colorful test picture: NHWC uint8. */
static uint8_t *picture(int h, int w, unsigned n)
{
	uint8_t *p = malloc((size_t)n * (size_t)h * (size_t)w * 3);

	assert_non_null(p);
	for (unsigned i = 0; i < n; i++)
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++) {
				uint8_t *q = p + (((size_t)i * (size_t)h + (size_t)y) *
						  (size_t)w + (size_t)x) * 3;

				q[0] = (uint8_t)(x * 255 / (w - 1));
				q[1] = (uint8_t)(y * 255 / (h - 1));
				q[2] = (uint8_t)((i * 60 + (unsigned)(x + y)) & 255);
			}
	return p;
}

static void test_preview_is_a_jpeg_of_the_reported_size(void **state)
{
	static const uint8_t colors[10][3] = { { 0 } };
	bfs_preview_opts o = opts(224, 224, BFS_DTYPE_FLOAT32);
	float *img = flat_nhwc(224, 224, 10, colors, 0);
	int64_t labels[10] = { 0 };
	int w, h;
	sheet s;

	/* 10 tiles: 4 columns, 3 rows, 128 px, 4 px margins, 12 px strips */
	assert_int_equal(bfs_preview_size(&o, 10, 1, &w, &h), 0);
	assert_int_equal(w, 4 * 128 + 5 * 4);
	assert_int_equal(h, 3 * (128 + 12) + 4 * 4);
	s = render(&o, img, labels, NULL, 10);
	assert_int_equal(s.w, w);
	assert_int_equal(s.h, h);
	assert_int_equal(s.subsamp, TJSAMP_420);
	assert_int_equal(s.jpeg[0], 0xff);
	assert_int_equal(s.jpeg[1], 0xd8);
	assert_int_equal(s.jpeg[s.len - 2], 0xff);
	assert_int_equal(s.jpeg[s.len - 1], 0xd9);
	sheet_free(&s);
	/* without labels: no strips; one image: one tile */
	assert_int_equal(bfs_preview_size(&o, 10, 0, &w, &h), 0);
	assert_int_equal(h, 3 * 128 + 4 * 4);
	assert_int_equal(bfs_preview_size(&o, 1, 0, &w, &h), 0);
	assert_int_equal(w, 128 + 8);
	assert_int_equal(h, 128 + 8);
	/* 16 is square, 17 needs a fifth column */
	assert_int_equal(bfs_preview_size(&o, 16, 0, &w, &h), 0);
	assert_int_equal(w, 4 * 128 + 5 * 4);
	assert_int_equal(bfs_preview_size(&o, 17, 0, &w, &h), 0);
	assert_int_equal(w, 5 * 128 + 6 * 4);
	assert_int_equal(h, 4 * 128 + 5 * 4);
	free(img);
}

static void test_preview_keeps_aspect_and_never_enlarges(void **state)
{
	bfs_preview_opts o = opts(150, 300, BFS_DTYPE_UINT8);
	int w, h;

	assert_int_equal(bfs_preview_size(&o, 1, 0, &w, &h), 0);
	assert_int_equal(w, 128 + 8);
	assert_int_equal(h, 64 + 8);
	o.h = 32;
	o.w = 64;
	assert_int_equal(bfs_preview_size(&o, 1, 0, &w, &h), 0);
	assert_int_equal(w, 64 + 8);
	assert_int_equal(h, 32 + 8);
	o.tile = 16;
	assert_int_equal(bfs_preview_size(&o, 1, 0, &w, &h), 0);
	assert_int_equal(w, 16 + 8);
	assert_int_equal(h, 8 + 8);
	/* 2x text on wide tiles */
	o.h = o.w = 256;
	o.tile = 256;
	assert_int_equal(bfs_preview_size(&o, 1, 1, &w, &h), 0);
	assert_int_equal(h, 256 + 8 + 4 + 16);
}

static void test_preview_keeps_flat_colors_after_undoing_normalization(void **state)
{
	static const uint8_t colors[6][3] = {
		{ 200, 30, 40 }, { 20, 180, 60 }, { 30, 40, 220 },
		{ 128, 128, 128 }, { 250, 250, 10 }, { 5, 5, 5 },
	};
	bfs_preview_opts o = opts(96, 80, BFS_DTYPE_FLOAT32);
	float *img = flat_nhwc(96, 80, 6, colors, 1);
	sheet s;

	o.normalized = 1;
	memcpy(o.mean, IMAGENET_MEAN, sizeof(o.mean));
	memcpy(o.std, IMAGENET_STD, sizeof(o.std));
	s = render(&o, img, NULL, NULL, 6);
	/* 3 columns of 80x96 tiles */
	assert_int_equal(s.w, 3 * 80 + 4 * 4);
	for (int i = 0; i < 6; i++) {
		int x = 4 + (i % 3) * 84, y = 4 + (i / 3) * 100;

		for (int c = 0; c < 3; c++) {
			/* the middle of the tile, away from chroma bleed */
			double m = rect_mean(&s, x + 16, y + 16, 48, 64, c);

			if (fabs(m - colors[i][c]) > 3)
				fail_msg("tile %d channel %d: mean %.1f, "
					 "want %d", i, c, m, colors[i][c]);
		}
	}
	/* the margins stay background */
	assert_true(rect_mean(&s, 0, 0, s.w, 2, 0) < 40);
	sheet_free(&s);
	free(img);
}

static void test_preview_gives_the_same_jpeg_for_nchw_and_nhwc(void **state)
{
	const int h = 70, w = 90;
	const unsigned n = 3;
	uint8_t *pic = picture(h, w, n);
	float *nhwc = malloc((size_t)n * h * w * 3 * sizeof(float));
	float *nchw = malloc((size_t)n * h * w * 3 * sizeof(float));
	bfs_preview_opts o = opts(h, w, BFS_DTYPE_FLOAT32);
	int64_t labels[3] = { 7, 8, 9 };
	sheet a, b, again;

	for (unsigned i = 0; i < n; i++)
		for (size_t q = 0; q < (size_t)h * w; q++)
			for (int c = 0; c < 3; c++) {
				size_t img = (size_t)i * h * w * 3;
				float v = pic[img + q * 3 + (size_t)c] / 255.0f;

				v = (v - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
				nhwc[img + q * 3 + (size_t)c] = v;
				nchw[img + (size_t)c * h * w + q] = v;
			}
	o.normalized = 1;
	memcpy(o.mean, IMAGENET_MEAN, sizeof(o.mean));
	memcpy(o.std, IMAGENET_STD, sizeof(o.std));
	o.tile = 64;
	a = render(&o, nhwc, labels, NULL, n);
	o.nchw = 1;
	b = render(&o, nchw, labels, NULL, n);
	again = render(&o, nchw, labels, NULL, n);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.jpeg, b.jpeg, a.len);
	assert_int_equal(b.len, again.len);
	assert_memory_equal(b.jpeg, again.jpeg, b.len);
	sheet_free(&a);
	sheet_free(&b);
	sheet_free(&again);
	free(nhwc);
	free(nchw);
	free(pic);
}

static uint16_t float_to_half(float f)
{
	/* round to nearest even; finite values in half range only */
	uint32_t x;
	int e;
	uint32_t m, r;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) == 0)
		return (uint16_t)(x >> 16);
	e = (int)((x >> 23) & 0xff) - 127 + 15;
	m = x & 0x7fffff;
	if (e <= 0) { /* subnormal half */
		m |= 0x800000;
		r = m >> (14 - e);
		if ((m >> (13 - e)) & 1 && ((m & ((1u << (13 - e)) - 1)) || (r & 1)))
			r++;
		return (uint16_t)((x >> 16 & 0x8000) | r);
	}
	r = (uint32_t)e << 10 | m >> 13;
	if ((m & 0x1000) && ((m & 0xfff) || (r & 1)))
		r++;
	return (uint16_t)((x >> 16 & 0x8000) | r);
}

static void test_preview_shows_uint8_float32_and_float16_nearly_alike(void **state)
{
	const int h = 64, w = 64;
	const unsigned n = 4;
	size_t count = (size_t)n * h * w * 3;
	uint8_t *u8 = picture(h, w, n);
	float *f32 = malloc(count * sizeof(float));
	uint16_t *f16 = malloc(count * sizeof(uint16_t));
	bfs_preview_opts o = opts(h, w, BFS_DTYPE_UINT8);
	int64_t labels[4] = { 1, 2, 3, 4 };
	sheet a, b, c;
	double diff_ab = 0, diff_ac = 0;

	for (size_t i = 0; i < count; i++) {
		f32[i] = u8[i] / 255.0f;
		f16[i] = float_to_half(f32[i]);
	}
	a = render(&o, u8, labels, NULL, n);
	o.dtype = BFS_DTYPE_FLOAT32;
	b = render(&o, f32, labels, NULL, n);
	o.dtype = BFS_DTYPE_FLOAT16;
	c = render(&o, f16, labels, NULL, n);
	assert_int_equal(a.w, b.w);
	assert_int_equal(a.h, c.h);
	for (size_t i = 0; i < (size_t)a.w * a.h * 3; i++) {
		diff_ab += abs(a.rgb[i] - b.rgb[i]);
		diff_ac += abs(a.rgb[i] - c.rgb[i]);
	}
	diff_ab /= (double)a.w * a.h * 3;
	diff_ac /= (double)a.w * a.h * 3;
	print_message("mean |uint8 - float32| = %.4f, |uint8 - float16| = %.4f\n",
		      diff_ab, diff_ac);
	assert_true(diff_ab < 0.05);
	assert_true(diff_ac < 0.5);
	sheet_free(&a);
	sheet_free(&b);
	sheet_free(&c);
	free(u8);
	free(f32);
	free(f16);
}

static void test_preview_shrinks_by_area_average(void **state)
{
	/* A 1-pixel checkerboard shrunk 2x is flat mid gray: an area
	 * filter, not a nearest-pixel pick. */
	const int n = 256;
	uint8_t *img = malloc((size_t)n * n * 3);
	bfs_preview_opts o = opts(n, n, BFS_DTYPE_UINT8);
	sheet s;
	double m, var = 0;

	for (int y = 0; y < n; y++)
		for (int x = 0; x < n; x++)
			memset(img + ((size_t)y * n + (size_t)x) * 3,
			       (x + y) % 2 ? 255 : 0, 3);
	s = render(&o, img, NULL, NULL, 1);
	assert_int_equal(s.w, 128 + 8);
	m = rect_mean(&s, 4, 4, 128, 128, 1);
	for (int y = 4; y < 132; y++)
		for (int x = 4; x < 132; x++) {
			double d = s.rgb[((size_t)y * s.w + (size_t)x) * 3 + 1] - m;

			var += d * d;
		}
	var /= 128.0 * 128;
	assert_true(fabs(m - 127.5) < 2);
	assert_true(var < 2);
	sheet_free(&s);
	free(img);
}

static void test_preview_clamps_out_of_range_and_nan_values(void **state)
{
	const int h = 32, w = 32;
	float *img = malloc((size_t)h * w * 3 * sizeof(float));
	bfs_preview_opts o = opts(h, w, BFS_DTYPE_FLOAT32);
	sheet s;

	for (size_t q = 0; q < (size_t)h * w; q++) {
		img[q * 3 + 0] = 7.0f;      /* > 1 */
		img[q * 3 + 1] = NAN;
		img[q * 3 + 2] = -3.0f;
	}
	s = render(&o, img, NULL, NULL, 1);
	assert_true(rect_mean(&s, 12, 12, 8, 8, 0) > 250);
	assert_true(rect_mean(&s, 12, 12, 8, 8, 1) < 5);
	assert_true(rect_mean(&s, 12, 12, 8, 8, 2) < 5);
	sheet_free(&s);
	free(img);
}

static void test_preview_draws_a_label_strip_under_each_tile(void **state)
{
	static const uint8_t colors[5][3] = { { 0 } };
	bfs_preview_opts o = opts(64, 64, BFS_DTYPE_FLOAT32);
	float *img = flat_nhwc(64, 64, 5, colors, 0);
	int64_t labels[5] = { 0, 1, 22, 333, 4444 };
	sheet s;

	s = render(&o, img, labels, NULL, 5);
	/* 3 columns; strips are rows y + 64 .. y + 75 */
	assert_int_equal(s.h, 2 * (64 + 12) + 3 * 4);
	for (int i = 0; i < 5; i++) {
		int x = 4 + (i % 3) * 68, y = 4 + (i / 3) * 80;

		/* light text in the strip, dark tile above it */
		assert_true(rect_max(&s, x, y + 64 + 2, 64, 7) > 150);
		assert_true(rect_mean(&s, x + 8, y + 8, 48, 48, 0) < 10);
	}
	/* the sixth cell is empty: background only */
	assert_true(rect_max(&s, 4 + 2 * 68, 4 + 80 + 64, 64, 12) < 60);
	sheet_free(&s);
	free(img);
}

/* Whether two renders of a 1-image batch with these labels are equal. */
static int same_sheet(const char *const *na, int64_t la, const char *const *nb,
		      int64_t lb)
{
	static const uint8_t colors[1][3] = { { 90, 60, 30 } };
	bfs_preview_opts o = opts(48, 96, BFS_DTYPE_FLOAT32);
	float *img = flat_nhwc(48, 96, 1, colors, 0);
	sheet a = render(&o, img, &la, na, 1), b = render(&o, img, &lb, nb, 1);
	int same = a.len == b.len && !memcmp(a.jpeg, b.jpeg, a.len);

	sheet_free(&a);
	sheet_free(&b);
	free(img);
	return same;
}

static void test_preview_prints_class_names_or_numbers(void **state)
{
	static const char *const names[] = { "cat", "dog", "1", NULL };
	static const char *const as_text[] = { "2", "-1", "7", NULL };
	static const char *const odd[] = { "caf\xc3\xa9~", "n01_x-y.z", NULL };
	static const char *const qs[] = { "caf??", "n01_x-y.z", NULL };
	static const char *const longer[] = {
		"a_class_name_far_too_long_for_the_tile", NULL };
	static const char *const cut[] = {
		"a_class_name_far_too_long_for_the_tile_and_more", NULL };

	assert_false(same_sheet(names, 0, names, 1));
	/* a label the names cover prints the name ... */
	assert_true(same_sheet(names, 2, NULL, 1));
	/* ... one they do not, or a negative one, its number */
	assert_true(same_sheet(names, 7, NULL, 7));
	assert_true(same_sheet(names, -1, NULL, -1));
	assert_true(same_sheet(as_text, 1, NULL, -1));
	/* é is one '?', and so is '~' (not in the font) */
	assert_true(same_sheet(odd, 0, qs, 0));
	assert_true(same_sheet(odd, 1, qs, 1));
	/* names are cut to the tile's 16 characters */
	assert_true(same_sheet(longer, 0, cut, 0));
}

static void test_preview_rejects_bad_arguments(void **state)
{
	static const uint8_t colors[1][3] = { { 1, 2, 3 } };
	bfs_preview_opts o = opts(8, 8, BFS_DTYPE_FLOAT32), bad;
	float *img = flat_nhwc(8, 8, 1, colors, 0);
	unsigned char *jpeg = (unsigned char *)1;
	unsigned long len = 1;
	char err[BFS_ERRMSG_MAX];
	int w, h;

	assert_int_equal(bfs_preview_render(NULL, img, NULL, NULL, 1, &jpeg,
					    &len, err), -EINVAL);
	assert_null(jpeg);
	assert_int_equal(len, 0);
	assert_int_equal(bfs_preview_render(&o, NULL, NULL, NULL, 1, &jpeg,
					    &len, err), -EINVAL);
	assert_int_equal(bfs_preview_render(&o, img, NULL, NULL, 1, NULL,
					    &len, err), -EINVAL);
	assert_int_equal(bfs_preview_render(&o, img, NULL, NULL, 0, &jpeg,
					    &len, err), -EINVAL);
	bad = o;
	bad.h = 0;
	assert_int_equal(bfs_preview_render(&bad, img, NULL, NULL, 1, &jpeg,
					    &len, err), -EINVAL);
	bad = o;
	bad.w = -3;
	assert_int_equal(bfs_preview_size(&bad, 1, 0, &w, &h), -EINVAL);
	bad = o;
	bad.dtype = (bfs_dtype)9;
	assert_int_equal(bfs_preview_render(&bad, img, NULL, NULL, 1, &jpeg,
					    &len, err), -EINVAL);
	assert_non_null(strstr(err, "dtype"));
	bad = o;
	bad.quality = 101;
	assert_int_equal(bfs_preview_render(&bad, img, NULL, NULL, 1, &jpeg,
					    &len, err), -EINVAL);
	/* a sheet past TurboJPEG's 65535 pixels: checked before any pixel
	 * is read, so the one image here is enough */
	bad = o;
	bad.h = bad.w = 4000;
	bad.tile = 4000;
	assert_int_equal(bfs_preview_render(&bad, img, NULL, NULL, 300, &jpeg,
					    &len, err), -EINVAL);
	assert_non_null(strstr(err, "smaller tile"));
	assert_null(jpeg);
	free(img);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_preview_is_a_jpeg_of_the_reported_size),
		cmocka_unit_test(test_preview_keeps_aspect_and_never_enlarges),
		cmocka_unit_test(test_preview_keeps_flat_colors_after_undoing_normalization),
		cmocka_unit_test(test_preview_gives_the_same_jpeg_for_nchw_and_nhwc),
		cmocka_unit_test(test_preview_shows_uint8_float32_and_float16_nearly_alike),
		cmocka_unit_test(test_preview_shrinks_by_area_average),
		cmocka_unit_test(test_preview_clamps_out_of_range_and_nan_values),
		cmocka_unit_test(test_preview_draws_a_label_strip_under_each_tile),
		cmocka_unit_test(test_preview_prints_class_names_or_numbers),
		cmocka_unit_test(test_preview_rejects_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
