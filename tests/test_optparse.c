/*
 * test_optparse.c - fs/optparse: the command line's numbers are read
 * whole; values that would wrap (sscanf's %u reads 4294967297 as 1),
 * carry a sign, leading spaces or trailing text are refused, never bent.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fs/optparse.h"

static void test_uint_reads_in_range_decimals(void **state)
{
	unsigned v = 7;

	assert_int_equal(bfs_opt_uint("0", 0, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(bfs_opt_uint("65536", 1, 65536, &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(bfs_opt_uint("4294967295", 0, UINT_MAX, &v), 0);
	assert_true(v == UINT_MAX);
}

static void test_uint_refuses_wrapping_signed_and_padded_values(void **state)
{
	static const char *const range[] = {
		"4294967296", "4294967297", "18446744073709551615",
		"18446744073709551616", "99999999999999999999999", "0", "65537",
	};
	static const char *const form[] = {
		"", "-1", "-4294967295", "+5", " 5", "5 ", "5x", "0x10", "1e3",
		"5M", "--5",
	};
	unsigned v = 7;

	for (size_t i = 0; i < sizeof(range) / sizeof(range[0]); i++)
		assert_int_equal(bfs_opt_uint(range[i], 1, 65536, &v), -ERANGE);
	for (size_t i = 0; i < sizeof(form) / sizeof(form[0]); i++)
		assert_int_equal(bfs_opt_uint(form[i], 0, 65536, &v), -EINVAL);
	assert_int_equal(bfs_opt_uint(NULL, 0, 1, &v), -EINVAL);
	assert_int_equal(v, 7); /* untouched */
}

static void test_hw_reads_sides_and_refuses_each_wrap_of_the_issue(void **state)
{
	static const char *const bad[] = {
		"4294967297x64", "-4294967295x64", "64x-4294967232", "4294967297",
		"64x4294967360", "0x64", "64x0", "16385x64", "64x16385", "x64",
		"64x", "64x64x3", " 64", "64 ", "+64", "64*64", "18446744073709551617x1",
	};
	int h = 5, w = 5;

	assert_int_equal(bfs_opt_hw("224x160", 16384, &h, &w), 0);
	assert_int_equal(h, 224);
	assert_int_equal(w, 160);
	assert_int_equal(bfs_opt_hw("96", 16384, &h, &w), 0);
	assert_int_equal(h, 96);
	assert_int_equal(w, 96);
	assert_int_equal(bfs_opt_hw("16384X1", 16384, &h, &w), 0);
	assert_int_equal(h, 16384);
	assert_int_equal(w, 1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		h = w = 5;
		assert_int_not_equal(bfs_opt_hw(bad[i], 16384, &h, &w), 0);
		assert_int_equal(h, 5);
		assert_int_equal(w, 5);
	}
}

static void test_size_takes_binary_suffixes_and_refuses_overflow(void **state)
{
	uint64_t v = 0;

	assert_int_equal(bfs_opt_size("1000", 0, &v), 0);
	assert_true(v == 1000);
	assert_int_equal(bfs_opt_size("64M", 0, &v), 0);
	assert_true(v == 64ull << 20);
	assert_int_equal(bfs_opt_size("2GiB", 0, &v), 0);
	assert_true(v == 2ull << 30);
	assert_int_equal(bfs_opt_size("3kB", 0, &v), 0);
	assert_true(v == 3ull << 10);
	assert_int_equal(bfs_opt_size("16777215T", 0, &v), 0);
	assert_true(v == 16777215ull << 40);
	v = 9;
	assert_int_equal(bfs_opt_size("16777216T", 0, &v), -ERANGE);
	assert_int_equal(bfs_opt_size("18446744073709551616", 0, &v), -ERANGE);
	assert_int_equal(bfs_opt_size("17179869184G", 0, &v), -ERANGE);
	assert_int_equal(bfs_opt_size("1K", 1u << 20, &v), -ERANGE);
	assert_int_equal(bfs_opt_size("-1", 0, &v), -EINVAL);
	assert_int_equal(bfs_opt_size("-1G", 0, &v), -EINVAL);
	assert_int_equal(bfs_opt_size(" 1G", 0, &v), -EINVAL);
	assert_int_equal(bfs_opt_size("1P", 0, &v), -EINVAL);
	assert_int_equal(bfs_opt_size("1GG", 0, &v), -EINVAL);
	assert_int_equal(bfs_opt_size("G", 0, &v), -EINVAL);
	assert_int_equal(bfs_opt_size("1.5G", 0, &v), -EINVAL);
	assert_true(v == 9);
}

static void test_i64_reads_both_ends_and_refuses_past_them(void **state)
{
	int64_t v = 0;

	assert_int_equal(bfs_opt_i64("-1", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == -1);
	assert_int_equal(bfs_opt_i64("+12", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == 12);
	assert_int_equal(bfs_opt_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(bfs_opt_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == INT64_MAX);
	v = 3;
	assert_int_equal(bfs_opt_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(bfs_opt_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(bfs_opt_i64("-18446744073709551616", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(bfs_opt_i64("-", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(bfs_opt_i64("--1", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(bfs_opt_i64(" 1", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(bfs_opt_i64("- 1", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(bfs_opt_i64("1.0", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_true(v == 3);
}

static void test_seed_reads_hex_and_refuses_a_negative_one(void **state)
{
	uint64_t v = 0;

	assert_int_equal(bfs_opt_seed("0xffffffffffffffff", &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(bfs_opt_seed("42", &v), 0);
	assert_true(v == 42);
	v = 5;
	/* strtoull reads "-1" as 2^64-1 and " -1" the same */
	assert_int_equal(bfs_opt_seed("-1", &v), -EINVAL);
	assert_int_equal(bfs_opt_seed(" -1", &v), -EINVAL);
	assert_int_equal(bfs_opt_seed("0x", &v), -EINVAL);
	assert_int_equal(bfs_opt_seed("0x10000000000000000", &v), -ERANGE);
	assert_int_equal(bfs_opt_seed("18446744073709551616", &v), -ERANGE);
	assert_true(v == 5);
}

static void test_doubles_are_finite_and_exactly_n(void **state)
{
	double v[3] = { 9, 9, 9 };

	assert_int_equal(bfs_opt_doubles("0.08,1", v, 2), 0);
	assert_true(v[0] == 0.08 && v[1] == 1.0);
	assert_int_equal(bfs_opt_doubles("0.485,-0.5,.25", v, 3), 0);
	assert_true(v[0] == 0.485 && v[1] == -0.5 && v[2] == 0.25);
	v[0] = v[1] = 9;
	assert_int_equal(bfs_opt_doubles("nan,1", v, 2), -ERANGE);
	assert_int_equal(bfs_opt_doubles("0.1,inf", v, 2), -ERANGE);
	assert_int_equal(bfs_opt_doubles("0.1,1e999", v, 2), -ERANGE);
	assert_int_equal(bfs_opt_doubles("0.1,1,2", v, 2), -EINVAL);
	assert_int_equal(bfs_opt_doubles("0.1", v, 2), -EINVAL);
	assert_int_equal(bfs_opt_doubles("0.1, 1", v, 2), -EINVAL);
	assert_int_equal(bfs_opt_doubles("0.1,1 ", v, 2), -EINVAL);
	assert_int_equal(bfs_opt_doubles("0.1,,1", v, 2), -EINVAL);
	assert_true(v[0] == 9 && v[1] == 9);
}

static void test_resume_reads_an_epoch_and_its_runs_and_prints_them_back(void **state)
{
	static const char *const good[] = { "3:1024@4/2", "0:96@3+60@2", "99999:0@1",
					    "7:18446744073709551615@1048576/1048576" };
	bfs_layout_resume r;
	char buf[256];

	assert_int_equal(bfs_opt_resume("3:1024@4/2+512@2", &r), 0);
	assert_true(r.on && r.epoch == 3 && r.nruns == 2);
	assert_true(r.runs[0].consumed == 1024 && r.runs[0].world == 4 && r.runs[0].node_ranks == 2);
	assert_true(r.runs[1].consumed == 512 && r.runs[1].world == 2 && r.runs[1].node_ranks == 0);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(bfs_opt_resume(good[i], &r), 0);
		assert_int_equal(bfs_opt_resume_format(&r, buf, sizeof(buf)), (int)strlen(good[i]));
		assert_string_equal(buf, good[i]);
	}
	assert_int_equal(bfs_opt_resume_format(&r, buf, 5), -ENOSPC);
}

static void test_resume_refuses_malformed_values_and_too_many_runs(void **state)
{
	static const char *const form[] = {
		"", "3", "3:", ":1@2", "3:1", "3:1@", "3:1@2/", "3:1@2+", "3:-1@2", "3:1@2/x",
		"3:1@2 ", "3:1@2,3@4", "3:1@2/3/4", "a:1@2", "3:1@@2",
	};
	static const char *const range[] = {
		"100000:1@2", "3:1@0", "3:1@1048577", "3:1@2/0", "3:18446744073709551616@2",
		"3:1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2+1@2",
	};
	bfs_layout_resume r = { .epoch = 77 };

	for (size_t i = 0; i < sizeof(form) / sizeof(form[0]); i++)
		if (bfs_opt_resume(form[i], &r) != -EINVAL)
			fail_msg("'%s' was not refused as malformed", form[i]);
	for (size_t i = 0; i < sizeof(range) / sizeof(range[0]); i++)
		if (bfs_opt_resume(range[i], &r) != -ERANGE)
			fail_msg("'%s' was not refused as out of range", range[i]);
	assert_int_equal(r.epoch, 77); /* untouched */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uint_reads_in_range_decimals),
		cmocka_unit_test(test_uint_refuses_wrapping_signed_and_padded_values),
		cmocka_unit_test(test_hw_reads_sides_and_refuses_each_wrap_of_the_issue),
		cmocka_unit_test(test_size_takes_binary_suffixes_and_refuses_overflow),
		cmocka_unit_test(test_i64_reads_both_ends_and_refuses_past_them),
		cmocka_unit_test(test_seed_reads_hex_and_refuses_a_negative_one),
		cmocka_unit_test(test_doubles_are_finite_and_exactly_n),
		cmocka_unit_test(test_resume_reads_an_epoch_and_its_runs_and_prints_them_back),
		cmocka_unit_test(test_resume_refuses_malformed_values_and_too_many_runs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
