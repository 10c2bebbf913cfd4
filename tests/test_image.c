/*
 * test_image.c - bfs_image_*: the format comes from the bytes, whatever
 * the name; GIF and other formats are refused with a clear message that
 * never quotes the bytes; the header gives the size and memory of every
 * format; --max-pixels is applied before anything is allocated; and the
 * budget's bound covers every format.
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
#include <webp/encode.h>

#include "engine/base/error.h"
#include "engine/pixels/image.h"
#include "engine/pixels/png.h"

static uint8_t *read_all(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	p = malloc(*n);
	assert_int_equal(fread(p, 1, *n, f), *n);
	fclose(f);
	return p;
}

static void test_image_tells_formats_by_their_bytes(void **state)
{
	(void)state;
	assert_int_equal(bfs_image_sniff((const uint8_t *)"\xff\xd8\xff", 3), BFS_IMAGE_JPEG);
	assert_int_equal(bfs_image_sniff((const uint8_t *)"\x89PNG\r\n\x1a\n", 8), BFS_IMAGE_PNG);
	assert_int_equal(bfs_image_sniff((const uint8_t *)"RIFF\0\0\0\0WEBP", 12), BFS_IMAGE_WEBP);
	assert_int_equal(bfs_image_sniff((const uint8_t *)"GIF87a", 6), BFS_IMAGE_GIF);
	assert_int_equal(bfs_image_sniff((const uint8_t *)"RIFF\0\0\0\0WAVE", 12), BFS_IMAGE_UNKNOWN);
	assert_int_equal(bfs_image_sniff((const uint8_t *)"\x89PNG", 4), BFS_IMAGE_UNKNOWN);
	assert_int_equal(bfs_image_sniff(NULL, 0), BFS_IMAGE_UNKNOWN);
}

static void test_image_refuses_gif_and_names_other_formats_without_quoting(void **state)
{
	bfs_decoder *d;
	bfs_image_info info;
	char msg[BFS_ERRMSG_MAX];
	static const char bmp[] = "BMSECRET-TOKEN-and-more-bytes";

	(void)state;
	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_image_header(d, (const uint8_t *)"GIF89a\1\0\1\0", 10, &info, msg),
			 BFS_E_FORMAT);
	assert_non_null(strstr(msg, "GIF images are not decoded"));
	assert_int_equal(bfs_image_header(d, (const uint8_t *)bmp, sizeof(bmp) - 1, &info, msg),
			 BFS_E_DECODE);
	assert_string_equal(msg, "not a JPEG, PNG or WebP image: looks like a BMP image");
	assert_int_equal(bfs_image_header(d, (const uint8_t *)"SECRET", 6, &info, msg),
			 BFS_E_DECODE);
	assert_null(strstr(msg, "SECRET"));
	assert_int_equal(bfs_image_header(d, (const uint8_t *)"", 0, &info, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "empty"));
	bfs_decoder_destroy(d);
}

static void test_image_header_gives_size_and_memory_of_each_format(void **state)
{
	size_t n;
	uint8_t *png = read_all("tests/data/golden/png/rgba16_37x23.png", &n), *webp, rgba[8 * 6 * 4];
	size_t wn;
	bfs_decoder *d;
	bfs_image_info info;
	const uint8_t *rgb;
	uint8_t out[37 * 23 * 3];
	int w, h;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_image_header(d, png, n, &info, msg), 0);
	assert_int_equal(info.format, BFS_IMAGE_PNG);
	assert_int_equal(info.width, 37);
	assert_int_equal(info.height, 23);
	assert_int_equal(info.pixel_bytes, 37 * 23 * 3);
	assert_true(info.work_bytes >= BFS_PNG_WORK_BASE);
	/* over --max-pixels: refused before the caller's buffer is touched */
	assert_int_equal(bfs_image_decode(d, png, n, &info, 37 * 23 - 1, NULL, 0, &rgb, &w, &h, msg),
			 BFS_E_TOOBIG);
	assert_non_null(strstr(msg, "37x23 PNG has 851 pixels"));
	assert_int_equal(bfs_image_decode(d, png, n, &info, 0, out, sizeof(out) - 1, &rgb, &w, &h,
					  msg), -EINVAL);
	assert_int_equal(bfs_image_decode(d, png, n, &info, 851, out, sizeof(out), &rgb, &w, &h,
					  msg), 0);
	assert_ptr_equal(rgb, out);
	memset(rgba, 77, sizeof(rgba));
	wn = WebPEncodeLosslessRGBA(rgba, 8, 6, 32, &webp);
	assert_int_equal(bfs_image_header(d, webp, wn, &info, msg), 0);
	assert_int_equal(info.format, BFS_IMAGE_WEBP);
	assert_int_equal(info.u.webp.lossless, 1);
	assert_true(info.work_bytes >= 5 * 8 * 6);
	WebPFree(webp);
	bfs_decoder_destroy(d);
	free(png);
}

static void test_image_scratch_bound_covers_every_format(void **state)
{
	(void)state;
	for (uint64_t px = 1; px <= (64ull << 20); px = px * 3 + 1) {
		uint64_t bound = bfs_image_scratch_max(px);

		assert_true(bound >= px * 4); /* JPEG, CMYK */
		/* the widest PNG of px pixels, 16-bit RGBA */
		assert_true(bound >= px * 3 + bfs_png_work_bytes(px < BFS_PNG_MAX_SIDE
								 ? (uint32_t)px : BFS_PNG_MAX_SIDE,
								 1, 16, 6, 0));
		assert_true(bound >= px * 3 + 5 * px); /* lossless WebP */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_image_tells_formats_by_their_bytes),
		cmocka_unit_test(test_image_refuses_gif_and_names_other_formats_without_quoting),
		cmocka_unit_test(test_image_header_gives_size_and_memory_of_each_format),
		cmocka_unit_test(test_image_scratch_bound_covers_every_format),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
