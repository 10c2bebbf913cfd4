/*
 * test_npy.c - engine/base/npy: header bytes identical to np.save, header_len,
 * parsing of v1/v2/v3 headers, rejection of garbage and truncation.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/base/npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Expected headers, generated once with numpy 2.4.6 by
 * numpy.lib._format_impl._write_array_header(f, d, (1, 0)), checked to be
 * a prefix of np.save()'s output for every shape small enough to save, and
 * printed as C literals (octal escapes for the non-ASCII bytes).
 */
typedef struct {
	const char *descr;
	int ndim;
	uint64_t shape[8];
	int len;
	const char *bytes;
} golden;

static const golden goldens[] = {
	{ "<f4", 4, {32ull, 224ull, 224ull, 3ull}, 128,
	  "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': (32, 224, 224, 3), }                                               \n" },
	{ "<i8", 1, {32ull}, 128,
	  "\223NUMPY\001\000v\000{'descr': '<i8', 'fortran_order': False, 'shape': (32,), }                                                           \n" },
	{ "|u1", 0, {0}, 128,
	  "\223NUMPY\001\000v\000{'descr': '|u1', 'fortran_order': False, 'shape': (), }                                                              \n" },
	{ "<f4", 1, {0ull}, 128,
	  "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }                                                            \n" },
	{ "|u1", 8, {1ull, 2ull, 3ull, 4ull, 5ull, 6ull, 7ull, 8ull}, 128,
	  "\223NUMPY\001\000v\000{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5, 6, 7, 8), }                                        \n" },
	{ "<u8", 1, {12345678901234567890ull}, 128,
	  "\223NUMPY\001\000v\000{'descr': '<u8', 'fortran_order': False, 'shape': (12345678901234567890,), }                                         \n" },
	{ ">i2", 2, {7ull, 3ull}, 128,
	  "\223NUMPY\001\000v\000{'descr': '>i2', 'fortran_order': False, 'shape': (7, 3), }                                                          \n" },
	/* Already 64-aligned before padding: numpy still pads a full 64. */
	{ "<f4", 6, {2ull, 1000000000000000000ull, 1000000000000000000ull, 1000000000000000000ull, 1000000000000000000ull, 1000000000000000000ull}, 256,
	  "\223NUMPY\001\000\366\000{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1000000000000000000, 1000000000000000000, 1000000000000000000, 1000000000000000000, 1000000000000000000), }                                                                                    \n" },
	{ "<f8", 8, {18446744073709551615ull, 18446744073709551615ull, 18446744073709551615ull, 18446744073709551615ull, 18446744073709551615ull, 18446744073709551615ull, 18446744073709551615ull, 18446744073709551615ull}, 256,
	  "\223NUMPY\001\000\366\000{'descr': '<f8', 'fortran_order': False, 'shape': (18446744073709551615, 18446744073709551615, 18446744073709551615, 18446744073709551615, 18446744073709551615, 18446744073709551615, 18446744073709551615, 18446744073709551615), }                \n" },
};

/* Written by np.lib.format.write_array(f, a, version=...) (numpy 2.4.6). */
static const char v2_header[] =
	"\223NUMPY\002\000t\000\000\000{'descr': '<u2', 'fortran_order': False, 'shape': (3, 5), }                                                        \n";
static const char v3_header[] =
	"\223NUMPY\003\000t\000\000\000{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }                                                          \n";
static const char fortran_header[] =
	"\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }                                                           \n";

#define NGOLDEN (sizeof(goldens) / sizeof(goldens[0]))

static void test_npy_header_matches_numpy_byte_for_byte(void **state)
{
	char out[512];
	size_t i;

	for (i = 0; i < NGOLDEN; i++) {
		const golden *g = &goldens[i];
		int n;

		memset(out, 'X', sizeof(out));
		n = bfs_npy_header(out, sizeof(out), g->descr, g->shape, g->ndim);
		assert_int_equal(n, g->len);
		assert_memory_equal(out, g->bytes, (size_t)g->len);
		assert_int_equal(out[n], 'X'); /* nothing written past the end */
		assert_int_equal(n % 64, 0);
	}
}

static void test_npy_header_len_matches_written_length(void **state)
{
	size_t i;

	for (i = 0; i < NGOLDEN; i++) {
		const golden *g = &goldens[i];

		assert_int_equal(bfs_npy_header_len(g->descr, g->shape, g->ndim),
				 (size_t)g->len);
	}
}

static void test_npy_header_reports_enospc_without_writing(void **state)
{
	const golden *g = &goldens[0];
	char out[128];

	memset(out, 'X', sizeof(out));
	assert_int_equal(bfs_npy_header(out, 127, g->descr, g->shape, g->ndim),
			 -ENOSPC);
	assert_int_equal(out[0], 'X');
	assert_int_equal(bfs_npy_header(out, 128, g->descr, g->shape, g->ndim),
			 128);
}

static void test_npy_header_rejects_bad_parameters(void **state)
{
	uint64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
	char out[512];

	assert_int_equal(bfs_npy_header(out, sizeof(out), "<f4", shape, 9), -EINVAL);
	assert_int_equal(bfs_npy_header(out, sizeof(out), "<f4", shape, -1), -EINVAL);
	assert_int_equal(bfs_npy_header(out, sizeof(out), NULL, shape, 1), -EINVAL);
	assert_int_equal(bfs_npy_header(out, sizeof(out), "'", shape, 1), -EINVAL);
	assert_int_equal(bfs_npy_header(out, sizeof(out), "<f4xxxxx", shape, 1), -EINVAL);
	assert_int_equal(bfs_npy_header_len("<f4", shape, 9), 0);
}

static void test_npy_parse_reads_back_every_golden_header(void **state)
{
	char err[BFS_ERRMSG_MAX];
	bfs_npy_info info;
	size_t i;

	for (i = 0; i < NGOLDEN; i++) {
		const golden *g = &goldens[i];
		int r;

		r = bfs_npy_parse(g->bytes, (size_t)g->len, &info, err);
		if (i == 5 || i == 7 || i == 8) {
			/* Shapes too large to address: parse says so. */
			assert_int_equal(r, BFS_E_FORMAT);
			assert_non_null(strstr(err, "overflow"));
			continue;
		}
		assert_int_equal(r, 0);
		assert_string_equal(info.descr, g->descr);
		assert_int_equal(info.ndim, g->ndim);
		assert_memory_equal(info.shape, g->shape,
				    sizeof(uint64_t) * (size_t)g->ndim);
		assert_int_equal(info.fortran_order, 0);
		assert_int_equal(info.header_len, (size_t)g->len);
	}
	assert_int_equal(bfs_npy_parse(goldens[0].bytes, 128, &info, err), 0);
	assert_int_equal(info.data_len, (size_t)32 * 224 * 224 * 3 * 4);
	assert_int_equal(bfs_npy_parse(goldens[2].bytes, 128, &info, err), 0);
	assert_int_equal(info.data_len, 1); /* a 0-D array holds one element */
	assert_int_equal(bfs_npy_parse(goldens[3].bytes, 128, &info, err), 0);
	assert_int_equal(info.data_len, 0);
}

static void test_npy_parse_accepts_v2_v3_and_fortran_order(void **state)
{
	bfs_npy_info info;

	assert_int_equal(bfs_npy_parse(v2_header, 128, &info, NULL), 0);
	assert_string_equal(info.descr, "<u2");
	assert_int_equal(info.header_len, 128);
	assert_int_equal(info.data_len, 30);

	assert_int_equal(bfs_npy_parse(v3_header, 128, &info, NULL), 0);
	assert_string_equal(info.descr, "<f2");
	assert_int_equal(info.ndim, 1);
	assert_int_equal(info.data_len, 8);

	assert_int_equal(bfs_npy_parse(fortran_header, 128, &info, NULL), 0);
	assert_int_equal(info.fortran_order, 1);
	assert_int_equal(info.data_len, 48);
}

/* Wrap a dict text in a v1.0 preamble (no padding needed by the parser). */
static size_t wrap(char *out, const char *dict)
{
	size_t n = strlen(dict);

	memcpy(out, "\223NUMPY\001\000", 8);
	out[8] = (char)(n & 0xff);
	out[9] = (char)(n >> 8);
	memcpy(out + 10, dict, n);
	return n + 10;
}

static void test_npy_parse_accepts_any_key_order_and_spacing(void **state)
{
	char buf[256];
	bfs_npy_info info;
	size_t n;

	n = wrap(buf, "{ \"shape\" :(2,3,) ,'fortran_order':False,'descr':'<M8[ns]'}\n");
	assert_int_equal(bfs_npy_parse(buf, n, &info, NULL), 0);
	assert_string_equal(info.descr, "<M8[ns]");
	assert_int_equal(info.ndim, 2);
	assert_int_equal(info.data_len, 48);

	n = wrap(buf, "{'descr': '<U10', 'fortran_order': False, 'shape': (3L,)}");
	assert_int_equal(bfs_npy_parse(buf, n, &info, NULL), 0);
	assert_int_equal(info.data_len, 120);
}

static void test_npy_parse_rejects_garbage(void **state)
{
	static const char *bad[] = {
		"",
		"{",
		"{}",
		"[1, 2]",
		"{'descr': '<f4', 'fortran_order': False}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
		"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,5,6,7,8,9)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} trailing",
		"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}",
		"{'descr': '|O', 'fortran_order': False, 'shape': (3,)}",
		"{'descr': '<x4', 'fortran_order': False, 'shape': (3,)}",
		"{'descr': '<f4 ', 'fortran_order': False, 'shape': (3,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
		"{'descr: '<f4', 'fortran_order': False, 'shape': (3,)}",
		"{'descr': 'x\\'', 'fortran_order': False, 'shape': (3,)}",
	};
	char buf[256], err[BFS_ERRMSG_MAX];
	bfs_npy_info info;
	size_t i, n;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = wrap(buf, bad[i]);
		err[0] = '\0';
		assert_int_equal(bfs_npy_parse(buf, n, &info, err), BFS_E_FORMAT);
		assert_true(strlen(err) > 0);
	}
	assert_int_equal(bfs_npy_parse("PK\003\004 not numpy at all", 22, &info, err),
			 BFS_E_FORMAT);
	assert_non_null(strstr(err, "magic"));
	memcpy(buf, "\223NUMPY\004\000\010\000{}      ", 18);
	assert_int_equal(bfs_npy_parse(buf, 18, &info, err), BFS_E_FORMAT);
	assert_non_null(strstr(err, "version"));
}

static void test_npy_parse_rejects_every_truncation_of_a_header(void **state)
{
	const golden *g = &goldens[0];
	bfs_npy_info info;
	char *copy;
	size_t n;

	/* Each prefix lives in its own exact-size heap block so ASan would
	 * catch a read past len. */
	for (n = 0; n < (size_t)g->len; n++) {
		copy = malloc(n ? n : 1);
		assert_non_null(copy);
		memcpy(copy, g->bytes, n);
		assert_int_equal(bfs_npy_parse(copy, n, &info, NULL), BFS_E_FORMAT);
		free(copy);
	}
	assert_int_equal(bfs_npy_parse(v2_header, 11, &info, NULL), BFS_E_FORMAT);
}

static void test_npy_parse_survives_random_header_bytes(void **state)
{
	char buf[128], dict[118];
	bfs_npy_info info;
	unsigned seed = 12345;
	int i, j;

	for (i = 0; i < 20000; i++) {
		memcpy(dict, goldens[0].bytes + 10, sizeof(dict));
		for (j = 0; j < 4; j++) {
			seed = seed * 1103515245u + 12345u;
			dict[(seed >> 8) % sizeof(dict)] = (char)(seed >> 20);
		}
		memcpy(buf, goldens[0].bytes, 10);
		memcpy(buf + 10, dict, sizeof(dict));
		(void)bfs_npy_parse(buf, sizeof(buf), &info, NULL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_npy_header_matches_numpy_byte_for_byte),
		cmocka_unit_test(test_npy_header_len_matches_written_length),
		cmocka_unit_test(test_npy_header_reports_enospc_without_writing),
		cmocka_unit_test(test_npy_header_rejects_bad_parameters),
		cmocka_unit_test(test_npy_parse_reads_back_every_golden_header),
		cmocka_unit_test(test_npy_parse_accepts_v2_v3_and_fortran_order),
		cmocka_unit_test(test_npy_parse_accepts_any_key_order_and_spacing),
		cmocka_unit_test(test_npy_parse_rejects_garbage),
		cmocka_unit_test(test_npy_parse_rejects_every_truncation_of_a_header),
		cmocka_unit_test(test_npy_parse_survives_random_header_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
