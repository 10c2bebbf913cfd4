/*
 * test_png.c - bfs_png_*: TensorFlow goldens (tf.io.decode_png(channels=3)
 * of every PNG kind, and decode + resize, from tests/data/golden/png/, made
 * by tools/make_golden_png.py), the header read that allocates nothing,
 * the work-memory bound, and every way a PNG is refused.  PNGs for the
 * refusals are written here (zlib and a CRC).  Run from the repo root.
 */
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
#include <zlib.h>

#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "engine/pixels/png.h"
#include "engine/pixels/resize.h"

#define PNG_DIR "tests/data/golden/png/"

struct buf {
	uint8_t *p;
	size_t len;
};

static struct buf read_file(const char *path)
{
	struct buf b = { NULL, 0 };
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		fail_msg("cannot open %s (tests run from the repository root)", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	b.len = (size_t)n;
	b.p = malloc(b.len ? b.len : 1);
	assert_non_null(b.p);
	assert_int_equal(fread(b.p, 1, b.len, f), b.len);
	fclose(f);
	return b;
}

/* Decode a whole PNG with a bound of its own header's work_bytes. */
static int decode(const struct buf *png, uint8_t **out, bfs_png_info *info,
		  char *msg)
{
	int rc = bfs_png_header(png->p, png->len, info, msg);

	*out = NULL;
	if (rc)
		return rc;
	*out = malloc((size_t)info->width * info->height * 3);
	assert_non_null(*out);
	return bfs_png_decode(png->p, png->len, info, *out,
			      (size_t)info->width * info->height * 3,
			      info->work_bytes, msg);
}

static void test_png_decodes_every_fixture_as_tensorflow_does(void **state)
{
	FILE *f = fopen(PNG_DIR "manifest.txt", "r");
	char line[512];
	int n = 0, bad = 0;

	(void)state;
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char png_name[200], npy_name[200], path[300], msg[BFS_ERRMSG_MAX] = "";
		struct buf png, npy;
		bfs_npy_info ni;
		bfs_png_info info;
		uint8_t *out;
		size_t diff = 0;

		if (sscanf(line, "decode %199s %199s", png_name, npy_name) != 2)
			continue;
		snprintf(path, sizeof(path), PNG_DIR "%s", png_name);
		png = read_file(path);
		snprintf(path, sizeof(path), PNG_DIR "%s", npy_name);
		npy = read_file(path);
		assert_int_equal(bfs_npy_parse(npy.p, npy.len, &ni, msg), 0);
		assert_string_equal(ni.descr, "|u1");
		if (decode(&png, &out, &info, msg))
			fail_msg("%s: %s", png_name, msg);
		assert_int_equal(ni.shape[0], info.height);
		assert_int_equal(ni.shape[1], info.width);
		assert_int_equal(ni.shape[2], 3);
		for (size_t k = 0; k < ni.data_len; k++)
			diff += out[k] != npy.p[ni.header_len + k];
		if (diff) {
			print_error("%s: %zu of %zu bytes differ from tf.io.decode_png\n",
				    png_name, diff, (size_t)ni.data_len);
			bad++;
		}
		free(out);
		free(png.p);
		free(npy.p);
		n++;
	}
	fclose(f);
	assert_int_equal(bad, 0);
	print_message("  %d PNG fixtures equal tf.io.decode_png(channels=3) bit for bit\n", n);
	assert_true(n >= 30);
}

static void test_png_decode_then_resize_matches_tensorflow_goldens(void **state)
{
	FILE *f = fopen(PNG_DIR "manifest.txt", "r");
	char line[512];
	int n = 0;

	(void)state;
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char png_name[200], npy_name[200], path[300], msg[BFS_ERRMSG_MAX] = "";
		struct buf png, npy;
		bfs_npy_info ni;
		bfs_png_info info;
		uint8_t *rgb;
		float *out, maxdiff = 0;
		void *scratch;
		int h, w;

		if (sscanf(line, "resize %199s %d %d %199s", png_name, &h, &w, npy_name) != 4)
			continue;
		snprintf(path, sizeof(path), PNG_DIR "%s", png_name);
		png = read_file(path);
		snprintf(path, sizeof(path), PNG_DIR "%s", npy_name);
		npy = read_file(path);
		assert_int_equal(bfs_npy_parse(npy.p, npy.len, &ni, msg), 0);
		assert_string_equal(ni.descr, "<f4");
		assert_int_equal(decode(&png, &rgb, &info, msg), 0);
		scratch = malloc(bfs_resize_scratch_size(info.width, info.height, w, h));
		out = malloc((size_t)h * w * 3 * sizeof(float));
		assert_int_equal(bfs_resize_rgb(rgb, info.width, info.height,
						(size_t)info.width * 3, out, w, h,
						BFS_DTYPE_FLOAT32, scratch), 0);
		for (size_t k = 0; k < (size_t)h * w * 3; k++) {
			float want;

			memcpy(&want, npy.p + ni.header_len + k * 4, 4);
			if (fabsf(out[k] - want) > maxdiff)
				maxdiff = fabsf(out[k] - want);
		}
		if (maxdiff > 1e-5f)
			fail_msg("%s: max abs diff %g", png_name, (double)maxdiff);
		free(scratch);
		free(out);
		free(rgb);
		free(png.p);
		free(npy.p);
		n++;
	}
	fclose(f);
	assert_true(n >= 3);
}

/* ---- PNGs written here ------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void add_chunk(struct buf *b, const char *type, const uint8_t *data, size_t n)
{
	uint8_t *p;

	b->p = realloc(b->p, b->len + 12 + n);
	assert_non_null(b->p);
	p = b->p + b->len;
	put32(p, (uint32_t)n);
	memcpy(p + 4, type, 4);
	if (n)
		memcpy(p + 8, data, n);
	put32(p + 8 + n, (uint32_t)crc32(0, p + 4, (uInt)(4 + n)));
	b->len += 12 + n;
}

/* A w x h PNG of color type ct, depth 8, filter 0 rows of `pix` (its
 * samples, ch per pixel), with `extra` chunks before IDAT. */
static struct buf make_png(uint32_t w, uint32_t h, int ct, int depth,
			   const uint8_t *pix, size_t rowbytes,
			   const uint8_t *plte, size_t plte_len)
{
	struct buf b = { NULL, 0 };
	uint8_t ihdr[13], *raw, *z;
	uLongf zlen;

	b.p = malloc(8);
	memcpy(b.p, "\x89PNG\r\n\x1a\n", 8);
	b.len = 8;
	put32(ihdr, w);
	put32(ihdr + 4, h);
	ihdr[8] = (uint8_t)depth;
	ihdr[9] = (uint8_t)ct;
	ihdr[10] = ihdr[11] = ihdr[12] = 0;
	add_chunk(&b, "IHDR", ihdr, 13);
	if (plte)
		add_chunk(&b, "PLTE", plte, plte_len);
	raw = malloc(h * (rowbytes + 1));
	for (uint32_t y = 0; y < h; y++) {
		raw[y * (rowbytes + 1)] = 0;
		memcpy(raw + y * (rowbytes + 1) + 1, pix + y * rowbytes, rowbytes);
	}
	zlen = compressBound(h * (rowbytes + 1));
	z = malloc(zlen);
	assert_int_equal(compress(z, &zlen, raw, h * (rowbytes + 1)), Z_OK);
	add_chunk(&b, "IDAT", z, zlen);
	add_chunk(&b, "IEND", NULL, 0);
	free(raw);
	free(z);
	return b;
}

static struct buf small_rgb(void)
{
	uint8_t pix[4 * 3 * 3];

	for (size_t i = 0; i < sizeof(pix); i++)
		pix[i] = (uint8_t)(i * 7);
	return make_png(4, 3, 2, 8, pix, 12, NULL, 0);
}

static void test_png_header_reads_the_size_without_decoding(void **state)
{
	struct buf b = small_rgb();
	bfs_png_info info;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	/* only signature + IHDR are needed: the rest may be missing */
	assert_int_equal(bfs_png_header(b.p, 33, &info, msg), 0);
	assert_int_equal(info.width, 4);
	assert_int_equal(info.height, 3);
	assert_int_equal(info.bit_depth, 8);
	assert_int_equal(info.color_type, 2);
	assert_true(info.work_bytes >= BFS_PNG_WORK_BASE);
	assert_int_equal(bfs_png_header(b.p, 32, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "cut short"));
	free(b.p);
}

static void test_png_header_refuses_a_side_over_libpngs_limit(void **state)
{
	uint8_t pix[3] = { 1, 2, 3 };
	struct buf b = make_png(1, 1, 2, 8, pix, 3, NULL, 0);
	bfs_png_info info;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	/* rewrite the width to 1,000,001 (and the IHDR CRC) */
	put32(b.p + 16, BFS_PNG_MAX_SIDE + 1);
	put32(b.p + 29, (uint32_t)crc32(0, b.p + 12, 17));
	assert_int_equal(bfs_png_header(b.p, b.len, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "1000001x1"));
	put32(b.p + 16, BFS_PNG_MAX_SIDE);
	put32(b.p + 29, (uint32_t)crc32(0, b.p + 12, 17));
	assert_int_equal(bfs_png_header(b.p, b.len, &info, msg), 0);
	free(b.p);
}

static void test_png_header_refuses_bad_ihdr_fields(void **state)
{
	struct buf b = small_rgb();
	bfs_png_info info;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	b.p[24] = 4; /* RGB at 4 bits does not exist */
	put32(b.p + 29, (uint32_t)crc32(0, b.p + 12, 17));
	assert_int_equal(bfs_png_header(b.p, b.len, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "bit depth 4 with color type 2"));
	b.p[24] = 8;
	b.p[28] = 2; /* interlace method 2 */
	put32(b.p + 29, (uint32_t)crc32(0, b.p + 12, 17));
	assert_int_equal(bfs_png_header(b.p, b.len, &info, msg), BFS_E_DECODE);
	b.p[28] = 0;
	assert_int_equal(bfs_png_header(b.p, b.len, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "CRC"));
	assert_int_equal(bfs_png_header((const uint8_t *)"GIF89a", 6, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "not a PNG"));
	free(b.p);
}

static void test_png_refuses_a_truncated_image(void **state)
{
	uint8_t pix[64 * 64 * 3];
	struct buf b;
	bfs_png_info info;
	uint8_t *out;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof(pix); i++)
		pix[i] = (uint8_t)(i * 2654435761u >> 13);
	b = make_png(64, 64, 2, 8, pix, 64 * 3, NULL, 0);
	assert_int_equal(decode(&b, &out, &info, msg), 0);
	free(out);
	/* every cut in the last 40 bytes (IEND, the end of IDAT), then
	 * every 37th byte back to the IHDR */
	for (size_t cut = b.len - 1; cut >= 33; cut -= b.len - cut < 40 ? 1 : 37) {
		struct buf c = { b.p, cut };

		if (decode(&c, &out, &info, msg) == 0)
			fail_msg("a PNG cut at %zu of %zu bytes decoded", cut, b.len);
		free(out);
		if (cut < 37 + 33)
			break;
	}
	free(b.p);
}

static void test_png_refuses_a_damaged_idat(void **state)
{
	struct buf b = small_rgb();
	bfs_png_info info;
	uint8_t *out;
	char msg[BFS_ERRMSG_MAX];
	size_t idat = 33 + 8; /* after IHDR: length, "IDAT", data */

	(void)state;
	assert_int_equal(memcmp(b.p + 37, "IDAT", 4), 0);
	b.p[idat + 2] ^= 0x40;
	assert_int_equal(decode(&b, &out, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "PNG"));
	free(out);
	free(b.p);
}

static void test_png_refuses_a_palette_index_past_the_palette(void **state)
{
	uint8_t plte[6] = { 10, 20, 30, 40, 50, 60 }, pix[4] = { 0, 1, 2, 1 };
	struct buf b = make_png(4, 1, 3, 8, pix, 4, plte, 6);
	bfs_png_info info;
	uint8_t *out;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	assert_int_equal(decode(&b, &out, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "index 2"));
	free(out);
	free(b.p);
	pix[2] = 0;
	b = make_png(4, 1, 3, 8, pix, 4, plte, 6);
	assert_int_equal(decode(&b, &out, &info, msg), 0);
	assert_int_equal(out[3], 40);
	assert_int_equal(out[8], 30);
	free(out);
	free(b.p);
}

static void test_png_needs_its_iend(void **state)
{
	struct buf b = small_rgb();
	bfs_png_info info;
	uint8_t *out;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	b.len -= 12; /* drop IEND */
	assert_int_equal(decode(&b, &out, &info, msg), BFS_E_DECODE);
	free(out);
	free(b.p);
}

static void test_png_stays_within_its_work_bound_and_refuses_past_it(void **state)
{
	uint8_t pix[300 * 2 * 3] = { 0 };
	struct buf b = make_png(300, 2, 2, 8, pix, 900, NULL, 0);
	bfs_png_info info;
	uint8_t out[300 * 2 * 3];
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	assert_int_equal(bfs_png_header(b.p, b.len, &info, msg), 0);
	assert_int_equal(bfs_png_decode(b.p, b.len, &info, out, sizeof(out),
					info.work_bytes, msg), 0);
	assert_int_equal(bfs_png_decode(b.p, b.len, &info, out, sizeof(out),
					20000, msg), BFS_E_MEMORY);
	assert_non_null(strstr(msg, "work memory"));
	/* and the decoder did not leak what it had taken (ASan checks) */
	assert_int_equal(bfs_png_decode(b.p, b.len, &info, out, sizeof(out) - 1,
					info.work_bytes, msg), -EINVAL);
	free(b.p);
}

static void test_png_skips_an_ancillary_chunk_too_big_to_keep(void **state)
{
	uint8_t pix[4 * 3 * 3];
	struct buf b = { NULL, 0 }, ref = small_rgb();
	size_t big = 5u << 20;
	uint8_t *text = calloc(1, big), *out, *want;
	bfs_png_info info;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof(pix); i++)
		pix[i] = (uint8_t)(i * 7);
	memcpy(text, "Comment", 8);
	/* ref without the chunk, b with a 4 MiB tEXt between IHDR and IDAT */
	b.p = malloc(33);
	memcpy(b.p, ref.p, 33);
	b.len = 33;
	add_chunk(&b, "tEXt", text, big);
	b.p = realloc(b.p, b.len + ref.len - 33);
	memcpy(b.p + b.len, ref.p + 33, ref.len - 33);
	b.len += ref.len - 33;
	assert_int_equal(decode(&ref, &want, &info, msg), 0);
	if (decode(&b, &out, &info, msg))
		fail_msg("a PNG with a big tEXt chunk: %s", msg);
	assert_memory_equal(out, want, 36);
	free(out);
	free(want);
	free(text);
	free(b.p);
	free(ref.p);
}

static void test_png_rejects_null_arguments(void **state)
{
	bfs_png_info info = { .width = 1, .height = 1 };
	uint8_t out[3];

	(void)state;
	assert_int_equal(bfs_png_header(NULL, 3, &info, NULL), -EINVAL);
	assert_int_equal(bfs_png_header((const uint8_t *)"x", 1, NULL, NULL), -EINVAL);
	assert_int_equal(bfs_png_decode(NULL, 3, &info, out, 3, 1 << 20, NULL), -EINVAL);
	assert_int_equal(bfs_png_decode((const uint8_t *)"x", 1, &info, NULL, 3, 1 << 20, NULL),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_png_decodes_every_fixture_as_tensorflow_does),
		cmocka_unit_test(test_png_decode_then_resize_matches_tensorflow_goldens),
		cmocka_unit_test(test_png_header_reads_the_size_without_decoding),
		cmocka_unit_test(test_png_header_refuses_a_side_over_libpngs_limit),
		cmocka_unit_test(test_png_header_refuses_bad_ihdr_fields),
		cmocka_unit_test(test_png_refuses_a_truncated_image),
		cmocka_unit_test(test_png_refuses_a_damaged_idat),
		cmocka_unit_test(test_png_refuses_a_palette_index_past_the_palette),
		cmocka_unit_test(test_png_needs_its_iend),
		cmocka_unit_test(test_png_stays_within_its_work_bound_and_refuses_past_it),
		cmocka_unit_test(test_png_skips_an_ancillary_chunk_too_big_to_keep),
		cmocka_unit_test(test_png_rejects_null_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
