/*
 * test_filekind.c - engine/formats/filekind: the kind of a file from its
 * signature, and nothing for text or anything else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/base/crc32c.h"
#include "engine/formats/filekind.h"

static void expect_kind(const void *p, size_t n, const char *want)
{
	const char *got = bfs_filekind(p, n);

	if (!want && got)
		fail_msg("%zu bytes: got '%s', want nothing", n, got);
	if (want && (!got || strcmp(got, want)))
		fail_msg("%zu bytes: got '%s', want '%s'", n, got ? got : "(none)",
			 want);
}

static void test_filekind_names_images_archives_and_compressed_data(void **state)
{
	uint8_t tar[512] = "a.jpg";

	expect_kind("\xff\xd8\xff\xe0", 4, "a JPEG image");
	expect_kind("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16, "a PNG image");
	expect_kind("GIF89a", 6, "a GIF image");
	expect_kind("RIFF\x10\0\0\0WEBPVP8 ", 16, "a WebP image");
	expect_kind("\0\0\0\x18" "ftypheic", 12, "an ISO media (HEIF/AVIF/MP4) file");
	expect_kind("\x1f\x8b\x08\x00", 4, "gzip data");
	expect_kind("BZh91AY&SY", 10, "bzip2 data");
	expect_kind("\xfd" "7zXZ\0\0", 7, "xz data");
	expect_kind("\x28\xb5\x2f\xfd", 4, "zstd data");
	expect_kind("PK\x03\x04", 4, "a zip archive");
	expect_kind("\x7f" "ELF\x02\x01", 6, "an ELF executable");
	expect_kind("%PDF-1.7", 8, "a PDF document");
	expect_kind("\x93NUMPY\x01\x00", 8, "a NumPy .npy file");
	memcpy(tar + 257, "ustar", 5);
	expect_kind(tar, sizeof(tar), "a tar archive");
	expect_kind(tar, 261, NULL); /* the magic cut short */
}

static void test_filekind_knows_a_tfrecord_by_its_first_length_crc(void **state)
{
	uint8_t h[12] = { 5, 0, 0, 0, 0, 0, 0, 0 };
	uint32_t c = bfs_crc32c_mask(bfs_crc32c(0, h, 8));

	h[8] = (uint8_t)c, h[9] = (uint8_t)(c >> 8);
	h[10] = (uint8_t)(c >> 16), h[11] = (uint8_t)(c >> 24);
	expect_kind(h, sizeof(h), "a TFRecord file");
	h[11] ^= 1;
	expect_kind(h, sizeof(h), NULL);
}

static void test_filekind_knows_zlib_streams_as_tensorflow_writes_them(void **state)
{
	expect_kind("\x78\x9c\xed\xd7", 4, "zlib data"); /* the default level */
	expect_kind("\x78\x01", 2, "zlib data");
	expect_kind("\x78\x5e", 2, "zlib data");
	expect_kind("\x78\xda", 2, "zlib data");
	expect_kind("\x78\x9d", 2, NULL);  /* not a zlib header's check */
	expect_kind("x-ray.txt", 9, NULL);
	expect_kind("\x78", 1, NULL);
}

static void test_filekind_says_what_to_do_with_compressed_data_only(void **state)
{
	const char *gz = bfs_filekind_advice("gzip data");

	assert_non_null(gz);
	/* GZIP TFRecords and .tar.gz are read: gzip data passed over is one
	 * that could not be read as them */
	assert_non_null(strstr(gz, "GZIP TFRecord or .tar.gz"));
	assert_non_null(strstr(gz, "gzip -t FILE"));
	assert_non_null(strstr(bfs_filekind_advice("zlib data"), "compression_type \"ZLIB\""));
	assert_non_null(strstr(bfs_filekind_advice("zlib data"), "zlib.decompress"));
	assert_non_null(strstr(bfs_filekind_advice("bzip2 data"), "bzip2 -dc"));
	assert_non_null(strstr(bfs_filekind_advice("xz data"), "xz -dc"));
	assert_non_null(strstr(bfs_filekind_advice("zstd data"), "zstd -dc"));
	assert_null(bfs_filekind_advice("a PNG image"));
	assert_null(bfs_filekind_advice("a zip archive"));
	assert_null(bfs_filekind_advice(NULL));
}

static void test_filekind_says_nothing_of_text_or_short_input(void **state)
{
	expect_kind("SECRET-TOKEN-1234", 17, NULL);
	expect_kind("root:x:0:0:root:/root:/bin/bash\n", 32, NULL);
	expect_kind("", 0, NULL);
	expect_kind("\x1f", 1, NULL);
	expect_kind(NULL, 0, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_filekind_names_images_archives_and_compressed_data),
		cmocka_unit_test(test_filekind_knows_a_tfrecord_by_its_first_length_crc),
		cmocka_unit_test(test_filekind_knows_zlib_streams_as_tensorflow_writes_them),
		cmocka_unit_test(test_filekind_says_what_to_do_with_compressed_data_only),
		cmocka_unit_test(test_filekind_says_nothing_of_text_or_short_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
