/*
 * test_resize_pil.c - bfs_resize_pil / bfs_resize_pil_crop against goldens
 * made by real Pillow and torchvision (tools/make_golden_pil.py,
 * tests/data/golden/pil/manifest.txt): Image.resize(BILINEAR), Resize +
 * CenterCrop, resized_crop (+ hflip) and ToTensor, bit for bit; and the
 * JPEG decode Pillow does (ISLOW DCT, fancy upsampling) with a decoder set
 * to BFS_DECODE_PIL.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/base/npy.h"
#include "engine/base/error.h"
#include "engine/pixels/decode.h"
#include "engine/pixels/resize.h"
#include "engine/pixels/resize_pil.h"

#define DIR "tests/data/golden/pil/"

struct buf {
	uint8_t *p;
	size_t len;
};

static struct buf read_file(const char *name)
{
	char path[512];
	struct buf b = { 0 };
	FILE *f;
	long n;

	snprintf(path, sizeof(path), DIR "%s", name);
	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (run from the repository root)", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b.p = malloc((size_t)n + 1);
	assert_non_null(b.p);
	assert_int_equal(fread(b.p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	b.len = (size_t)n;
	return b;
}

/* An .npy of shape (h, w, 3) and dtype descr: its data, and h, w. */
static struct buf read_npy(const char *name, const char *descr, int *h, int *w)
{
	struct buf b = read_file(name), d;
	bfs_npy_info info;
	char msg[BFS_ERRMSG_MAX];

	if (bfs_npy_parse(b.p, b.len, &info, msg))
		fail_msg("%s: %s", name, msg);
	assert_string_equal(info.descr, descr);
	assert_int_equal(info.ndim, 3);
	assert_int_equal(info.shape[2], 3);
	assert_int_equal(info.header_len + info.data_len, b.len);
	*h = (int)info.shape[0];
	*w = (int)info.shape[1];
	d.len = info.data_len;
	d.p = malloc(d.len + 1);
	assert_non_null(d.p);
	memcpy(d.p, b.p + info.header_len, d.len);
	free(b.p);
	return d;
}

/* Scratch of exactly n bytes, misaligned by one, full of garbage. */
static uint8_t *scratch_of(size_t n)
{
	uint8_t *s = malloc(n + 1);

	assert_true(n > 0);
	assert_non_null(s);
	memset(s, 0xA5, n + 1);
	return s;
}

static void expect_same(const char *what, const uint8_t *got, const uint8_t *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i])
			fail_msg("%s: byte %zu is %u, Pillow's %u", what, i, got[i], want[i]);
}

static int cases_seen[5];

static void run_line(const char *line)
{
	char kind[16], a[128], g[128];
	int v[8], n, sh, sw, gh, gw;
	struct buf src, want = { 0 };

	if (sscanf(line, "%15s", kind) != 1 || kind[0] == '#')
		return;
	if (!strcmp(kind, "decode")) {
		struct buf jpg, dec;
		bfs_decoder *d;
		const uint8_t *rgb;
		int w, h;
		char msg[BFS_ERRMSG_MAX];

		assert_int_equal(sscanf(line, "%*s %127s %127s", a, g), 2);
		jpg = read_file(a);
		dec = read_npy(g, "|u1", &sh, &sw);
		assert_int_equal(bfs_decoder_create(&d), 0);
		assert_int_equal(bfs_decoder_set_method(d, BFS_DECODE_PIL), 0);
		assert_int_equal(bfs_decode_rgb(d, jpg.p, jpg.len, 0, &rgb, &w, &h, msg), 0);
		assert_int_equal(w, sw);
		assert_int_equal(h, sh);
		expect_same(a, rgb, dec.p, dec.len);
		/* the box decoder decodes as Pillow too */
		{
			bfs_box box = { 3, 5, w - 9, h - 7 };
			bfs_decoded_box out;

			assert_int_equal(bfs_decode_box(d, jpg.p, jpg.len, 0, &box, 1, &out, msg), 0);
			for (int y = 0; y < box.h; y++)
				expect_same(a, out.rgb + (size_t)y * out.stride,
					    dec.p + ((size_t)(y + box.y) * (size_t)w + (size_t)box.x) * 3,
					    (size_t)box.w * 3);
		}
		bfs_decoder_destroy(d);
		free(jpg.p);
		free(dec.p);
		cases_seen[0]++;
		return;
	}
	n = sscanf(line, "%*s %127s %d %d %d %d %d %d %d %127s", a, &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], g);
	src = read_npy(a, "|u1", &sh, &sw);
	if (!strcmp(kind, "resize") || !strcmp(kind, "tensor")) {
		int tensor = kind[0] == 't';
		size_t ss = bfs_resize_pil_scratch_size(sw, sh, v[0], v[1]);
		uint8_t *s = scratch_of(ss);
		size_t px = (size_t)v[0] * (size_t)v[1] * 3;
		uint8_t *u = malloc(px);
		float *f = malloc(px * sizeof(float));

		/* the name is the 4th field here */
		assert_true(n >= 3);
		sscanf(line, "%*s %*s %*d %*d %127s", g);
		want = read_npy(g, tensor ? "<f4" : "|u1", &gh, &gw);
		assert_int_equal(gh, v[1]);
		assert_int_equal(gw, v[0]);
		assert_int_equal(bfs_resize_pil(src.p, sw, sh, (size_t)sw * 3, u, v[0], v[1],
						BFS_DTYPE_UINT8, 0, s), 0);
		assert_int_equal(bfs_resize_pil(src.p, sw, sh, (size_t)sw * 3, f, v[0], v[1],
						BFS_DTYPE_FLOAT32, 0, s), 0);
		if (tensor) {
			/* ToTensor's float32 value / 255, every bit */
			expect_same(g, (const uint8_t *)f, want.p, px * sizeof(float));
		} else {
			expect_same(g, u, want.p, px);
			for (size_t i = 0; i < px; i++)
				assert_true(f[i] == (float)u[i] / 255.0f);
		}
		free(s);
		free(u);
		free(f);
		cases_seen[tensor ? 4 : 1]++;
	} else if (!strcmp(kind, "crop")) {
		size_t ss = bfs_resize_pil_crop_scratch_size(sw, sh, v[0], v[2], v[1]);
		uint8_t *s = scratch_of(ss);
		size_t px = (size_t)v[1] * (size_t)v[2] * 3;
		uint8_t *u = malloc(px);

		sscanf(line, "%*s %*s %*d %*d %*d %127s", g);
		want = read_npy(g, "|u1", &gh, &gw);
		assert_int_equal(gh, v[1]);
		assert_int_equal(gw, v[2]);
		assert_int_equal(bfs_resize_pil_crop(src.p, sw, sh, (size_t)sw * 3, v[0], u, v[2],
						     v[1], BFS_DTYPE_UINT8, s), 0);
		expect_same(g, u, want.p, px);
		free(s);
		free(u);
		cases_seen[2]++;
	} else if (!strcmp(kind, "rrc")) {
		int top = v[0], left = v[1], bh = v[2], bw = v[3], oh = v[4], ow = v[5];
		size_t ss = bfs_resize_pil_scratch_size(bw, bh, ow, oh);
		uint8_t *s = scratch_of(ss);
		size_t px = (size_t)oh * (size_t)ow * 3;
		uint8_t *u = malloc(px);

		assert_int_equal(n, 9);
		want = read_npy(g, "|u1", &gh, &gw);
		/* the box read in place: the source's stride */
		assert_int_equal(bfs_resize_pil(src.p + ((size_t)top * (size_t)sw + (size_t)left) * 3,
						bw, bh, (size_t)sw * 3, u, ow, oh, BFS_DTYPE_UINT8,
						v[6] ? BFS_RESIZE_MIRROR : 0, s), 0);
		expect_same(g, u, want.p, px);
		free(s);
		free(u);
		cases_seen[3]++;
	} else {
		fail_msg("manifest: unknown kind %s", kind);
	}
	free(src.p);
	free(want.p);
}

static void test_every_golden_matches_pillow_bit_for_bit(void **state)
{
	FILE *f = fopen(DIR "manifest.txt", "r");
	char line[512];

	(void)state;
	if (!f)
		fail_msg("cannot open " DIR "manifest.txt (run from the repository root)");
	while (fgets(line, sizeof(line), f))
		run_line(line);
	fclose(f);
	/* every kind was there: decode, resize, crop, rrc, tensor */
	for (int k = 0; k < 5; k++)
		assert_true(cases_seen[k] >= 2);
}

static uint8_t *noise(int w, int h, uint32_t seed)
{
	uint8_t *p = malloc((size_t)w * h * 3);

	assert_non_null(p);
	for (size_t i = 0; i < (size_t)w * h * 3; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
	return p;
}

/* The crop is the window of the full resize, and the mirror its flip. */
static void test_crop_is_the_window_and_mirror_the_flip(void **state)
{
	uint8_t *src = noise(83, 61, 7);
	int fw = 50 * 83 / 61, fh = 50; /* Resize(50) of a landscape 83x61 */
	size_t fs = bfs_resize_pil_scratch_size(83, 61, fw, fh);
	uint8_t *full = malloc((size_t)fw * fh * 3), *mir = malloc((size_t)fw * fh * 3);
	uint8_t *win = malloc(40 * 33 * 3), *s = scratch_of(fs);
	size_t cs = bfs_resize_pil_crop_scratch_size(83, 61, 50, 40, 33);
	uint8_t *c = scratch_of(cs);
	int ox = 14, oy = 8; /* round(28 / 2) = 14; round(17 / 2) = round(8.5) = 8 */

	(void)state;
	assert_int_equal(fw, 68);
	assert_int_equal(bfs_resize_pil(src, 83, 61, 83 * 3, full, fw, fh, BFS_DTYPE_UINT8, 0, s), 0);
	assert_int_equal(bfs_resize_pil(src, 83, 61, 83 * 3, mir, fw, fh, BFS_DTYPE_UINT8,
					BFS_RESIZE_MIRROR, s), 0);
	for (int y = 0; y < fh; y++)
		for (int x = 0; x < fw; x++)
			assert_memory_equal(mir + ((size_t)y * fw + x) * 3,
					    full + ((size_t)y * fw + (fw - 1 - x)) * 3, 3);
	assert_int_equal(bfs_resize_pil_crop(src, 83, 61, 83 * 3, 50, win, 40, 33,
					     BFS_DTYPE_UINT8, c), 0);
	for (int y = 0; y < 33; y++)
		assert_memory_equal(win + (size_t)y * 40 * 3,
				    full + ((size_t)(y + oy) * fw + ox) * 3, 40 * 3);
	free(src);
	free(full);
	free(mir);
	free(win);
	free(s);
	free(c);
}

static void test_refuses_bad_arguments(void **state)
{
	uint8_t src[4 * 4 * 3] = { 0 }, dst[4 * 4 * 3], s[4096];

	(void)state;
	assert_int_equal(bfs_resize_pil(NULL, 4, 4, 12, dst, 2, 2, BFS_DTYPE_UINT8, 0, s), -EINVAL);
	assert_int_equal(bfs_resize_pil(src, 4, 4, 11, dst, 2, 2, BFS_DTYPE_UINT8, 0, s), -EINVAL);
	assert_int_equal(bfs_resize_pil(src, 4, 4, 12, dst, 0, 2, BFS_DTYPE_UINT8, 0, s), -EINVAL);
	assert_int_equal(bfs_resize_pil(src, 4, 4, 12, dst, 2, 2, (bfs_dtype)9, 0, s), -EINVAL);
	assert_int_equal(bfs_resize_pil(src, 4, 4, 12, dst, 2, 2, BFS_DTYPE_UINT8, 8, s), -EINVAL);
	/* a window larger than the resized image */
	assert_int_equal(bfs_resize_pil_crop(src, 4, 4, 12, 3, dst, 4, 4, BFS_DTYPE_UINT8, s),
			 -EINVAL);
	assert_int_equal(bfs_resize_pil_crop_scratch_size(4, 4, 3, 4, 4), 0);
	assert_int_equal(bfs_resize_pil_scratch_size(0, 4, 2, 2), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_golden_matches_pillow_bit_for_bit),
		cmocka_unit_test(test_crop_is_the_window_and_mirror_the_flip),
		cmocka_unit_test(test_refuses_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
