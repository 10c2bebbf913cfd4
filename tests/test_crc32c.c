/*
 * test_crc32c.c - engine/base/crc32c: known vectors on both paths, unaligned
 * buffers and odd lengths, chaining, the TFRecord mask.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/crc32c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* Bit-at-a-time reference, straight from the definition. */
static uint32_t crc_ref(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	int k;

	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
	}
	return ~crc;
}

static void check_vectors(crc_fn f)
{
	unsigned char buf[48];

	assert_int_equal(f(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(f(0, NULL, 0), 0);
	assert_int_equal(f(0, "a", 1), 0xC1D04330u);
	/* RFC 3720 (iSCSI) B.4 test patterns. */
	memset(buf, 0, 32);
	assert_int_equal(f(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, 32);
	assert_int_equal(f(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	assert_int_equal(f(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	assert_int_equal(f(0, buf, 32), 0x113FDB5Cu);
	/* "The quick brown fox jumps over the lazy dog" */
	assert_int_equal(f(0, "The quick brown fox jumps over the lazy dog", 43),
			 0x22620404u);
}

static void test_crc32c_table_path_matches_known_vectors(void **state)
{
	check_vectors(bfs_crc32c_sw);
}

static void test_crc32c_hardware_path_matches_known_vectors(void **state)
{
	if (!bfs_crc32c_hw_available())
		skip(); /* no SSE4.2 here: bfs_crc32c_hw is the table path */
	check_vectors(bfs_crc32c_hw);
}

static void test_crc32c_default_path_matches_known_vectors(void **state)
{
	check_vectors(bfs_crc32c);
}

static unsigned char *random_bytes(size_t n, unsigned seed)
{
	unsigned char *b = malloc(n);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		b[i] = (unsigned char)(seed >> 16);
	}
	return b;
}

static void test_crc32c_paths_agree_on_every_alignment_and_length(void **state)
{
	/* Up to 3 long blocks + change, so every fold path runs. */
	const size_t n = 3 * 8192 * 2 + 3 * 256 + 77;
	unsigned char *b = random_bytes(n + 16, 7);
	size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 63, 255, 256, 767, 768, 769,
			 3 * 256 + 8, 8191, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1,
			 n - 1, n};

	for (size_t off = 0; off < 16; off++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint32_t want = crc_ref(0x12345678u, b + off, lens[i]);

			assert_int_equal(bfs_crc32c_sw(0x12345678u, b + off, lens[i]), want);
			assert_int_equal(bfs_crc32c_hw(0x12345678u, b + off, lens[i]), want);
			assert_int_equal(bfs_crc32c(0x12345678u, b + off, lens[i]), want);
		}
	free(b);
}

static void test_crc32c_unaligned_short_buffers_match_reference(void **state)
{
	unsigned char *b = random_bytes(200, 3);

	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len + off <= 200; len++) {
			uint32_t want = crc_ref(0, b + off, len);

			assert_int_equal(bfs_crc32c_sw(0, b + off, len), want);
			assert_int_equal(bfs_crc32c_hw(0, b + off, len), want);
		}
	free(b);
}

static void test_crc32c_chains_across_split_points(void **state)
{
	unsigned char *b = random_bytes(30000, 11);
	uint32_t whole = bfs_crc32c(0, b, 30000);

	for (size_t cut = 0; cut <= 30000; cut += 997) {
		assert_int_equal(bfs_crc32c(bfs_crc32c(0, b, cut), b + cut, 30000 - cut),
				 whole);
		assert_int_equal(bfs_crc32c_sw(bfs_crc32c_hw(0, b, cut), b + cut,
					       30000 - cut),
				 whole);
	}
	free(b);
}

static void test_crc32c_mask_matches_tensorflow(void **state)
{
	/* Bytes of a file written by tf.io.TFRecordWriter (TF 2.21) holding
	 * the records "" and "hello":
	 * 0000000000000000 29039807 d8ea82a2
	 * 0500000000000000 eab2043e 68656c6c6f bb1f1c19 */
	static const unsigned char zero8[8] = {0};
	static const unsigned char five[8] = {5};

	assert_int_equal(bfs_crc32c_mask(bfs_crc32c(0, zero8, 8)), 0x07980329u);
	assert_int_equal(bfs_crc32c_mask(bfs_crc32c(0, NULL, 0)), 0xa282ead8u);
	assert_int_equal(bfs_crc32c_mask(bfs_crc32c(0, five, 8)), 0x3e04b2eau);
	assert_int_equal(bfs_crc32c_mask(bfs_crc32c(0, "hello", 5)), 0x191c1fbbu);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Not an assertion: prints GB/s of both paths for the record. */
static void test_crc32c_speed_is_reported(void **state)
{
	const size_t n = 64u << 20;
	unsigned char *b = random_bytes(n, 5);
	volatile uint32_t sink = 0;
	double t0, t1, t2;

	t0 = now_s();
	sink ^= bfs_crc32c_sw(0, b, n);
	t1 = now_s();
	sink ^= bfs_crc32c_hw(0, b, n);
	t2 = now_s();
	print_message("crc32c: table %.2f GB/s, sse4.2 %.2f GB/s%s\n",
		      (double)n / (t1 - t0) / 1e9, (double)n / (t2 - t1) / 1e9,
		      bfs_crc32c_hw_available() ? "" : " (not available)");
	(void)sink;
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_table_path_matches_known_vectors),
		cmocka_unit_test(test_crc32c_hardware_path_matches_known_vectors),
		cmocka_unit_test(test_crc32c_default_path_matches_known_vectors),
		cmocka_unit_test(test_crc32c_paths_agree_on_every_alignment_and_length),
		cmocka_unit_test(test_crc32c_unaligned_short_buffers_match_reference),
		cmocka_unit_test(test_crc32c_chains_across_split_points),
		cmocka_unit_test(test_crc32c_mask_matches_tensorflow),
		cmocka_unit_test(test_crc32c_speed_is_reported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
