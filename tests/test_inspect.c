/*
 * test_inspect.c - fs/inspect: statistics per dtype and byte order,
 * NaN handling, accuracy on long arrays, the label summary, and exit
 * statuses for good, truncated and garbage files.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/npy.h"
#include "fs/inspect.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bfs_npy_info info_1d(const char *descr, uint64_t n, size_t itemsize)
{
	bfs_npy_info info;

	memset(&info, 0, sizeof(info));
	strcpy(info.descr, descr);
	info.ndim = 1;
	info.shape[0] = n;
	info.data_len = (size_t)n * itemsize;
	return info;
}

static void test_inspect_computes_uint8_statistics_like_numpy(void **state)
{
	uint8_t v[256];
	bfs_npy_info info = info_1d("|u1", 256, 1);
	bfs_inspect_stats s;

	for (int i = 0; i < 256; i++)
		v[i] = (uint8_t)i;
	bfs_inspect_compute(v, &info, &s);
	assert_true(s.supported);
	assert_int_equal(s.count, 256);
	assert_true(s.min == 0 && s.max == 255 && s.mean == 127.5);
	/* np.arange(256).std() */
	assert_true(fabs(s.std - 73.90027063549903) < 1e-9);
}

static void test_inspect_reads_big_endian_and_float16_values(void **state)
{
	/* >i2 values -2, 300; <f2 values 1.0, -2.0, 2^-24 (subnormal), NaN */
	static const uint8_t be[4] = {0xff, 0xfe, 0x01, 0x2c};
	static const uint8_t half[8] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00,
					0x00, 0x7e};
	bfs_npy_info i2 = info_1d(">i2", 2, 2), f2 = info_1d("<f2", 4, 2);
	bfs_inspect_stats s;

	bfs_inspect_compute(be, &i2, &s);
	assert_true(s.min == -2 && s.max == 300 && s.mean == 149);
	bfs_inspect_compute(half, &f2, &s);
	assert_int_equal(s.count, 4);
	assert_int_equal(s.nan, 1);
	assert_true(s.min == -2.0 && s.max == 1.0);
	assert_true(fabs(s.mean - (1.0 - 2.0 + ldexp(1, -24)) / 3) < 1e-12);
}

static void test_inspect_leaves_nans_out_of_the_statistics(void **state)
{
	float v[5] = {1, NAN, 3, NAN, 5};
	bfs_npy_info info = info_1d("<f4", 5, 4);
	bfs_inspect_stats s;

	bfs_inspect_compute(v, &info, &s);
	assert_int_equal(s.nan, 2);
	assert_true(s.min == 1 && s.max == 5 && s.mean == 3);
}

static void test_inspect_marks_strings_as_without_statistics(void **state)
{
	char v[8] = "abcdefg";
	bfs_npy_info info = info_1d("|S4", 2, 4);
	bfs_inspect_stats s;

	bfs_inspect_compute(v, &info, &s);
	assert_false(s.supported);
}

static void test_inspect_stays_accurate_over_a_long_array(void **state)
{
	/* 1e6 + (i & 1): a naive sum of squares loses the 0.5 std entirely. */
	const size_t n = 3000001;
	double *v = malloc(n * sizeof(*v));
	bfs_npy_info info = info_1d("<f8", n, 8);
	bfs_inspect_stats s;

	for (size_t i = 0; i < n; i++)
		v[i] = 1e6 + (double)(i & 1);
	bfs_inspect_compute(v, &info, &s);
	assert_true(fabs(s.mean - (1e6 + 1500000.0 / 3000001.0)) < 1e-7);
	assert_true(fabs(s.std - 0.5) < 1e-6);
	free(v);
}

/* Write a .npy of n int64 values, optionally cutting `cut` data bytes. */
static void write_npy(const char *path, const char *descr, const void *data,
		      uint64_t n, size_t itemsize, size_t cut)
{
	char hdr[256];
	int len = bfs_npy_header(hdr, sizeof(hdr), descr, &n, 1);
	FILE *f = fopen(path, "wb");

	assert_true(len > 0);
	assert_non_null(f);
	assert_int_equal(fwrite(hdr, 1, (size_t)len, f), (size_t)len);
	assert_int_equal(fwrite(data, 1, n * itemsize - cut, f), n * itemsize - cut);
	assert_int_equal(fclose(f), 0);
}

/* Run bfs_inspect_main with stdout and stderr going to `out`. */
static int run_inspect(const char *out, int argc, char **argv)
{
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int so = dup(1), se = dup(2), r;

	assert_true(fd >= 0 && so >= 0 && se >= 0);
	fflush(stdout);
	fflush(stderr);
	dup2(fd, 1);
	dup2(fd, 2);
	r = bfs_inspect_main(argc, argv);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	close(fd);
	return r;
}

static char *slurp(const char *path)
{
	static char buf[8192];
	FILE *f = fopen(path, "rb");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

typedef struct {
	char dir[64], good[96], trunc[96], junk[96], out[96];
} files;

static int make_files(void **state)
{
	static files f;
	static const int64_t labels[10] = {7, 2, 7, 9, -1, 2, 7, 2, 0, 5};
	FILE *j;

	strcpy(f.dir, "/tmp/test_inspect.XXXXXX");
	if (!mkdtemp(f.dir))
		return -1;
	snprintf(f.good, sizeof(f.good), "%s/labels.npy", f.dir);
	snprintf(f.trunc, sizeof(f.trunc), "%s/trunc.npy", f.dir);
	snprintf(f.junk, sizeof(f.junk), "%s/junk.npy", f.dir);
	snprintf(f.out, sizeof(f.out), "%s/out.txt", f.dir);
	write_npy(f.good, "<i8", labels, 10, 8, 0);
	write_npy(f.trunc, "<i8", labels, 10, 8, 3);
	j = fopen(f.junk, "wb");
	fputs("this is not numpy", j);
	fclose(j);
	*state = &f;
	return 0;
}

static int remove_files(void **state)
{
	files *f = *state;

	unlink(f->good);
	unlink(f->trunc);
	unlink(f->junk);
	unlink(f->out);
	rmdir(f->dir);
	return 0;
}

static void test_inspect_summarizes_a_label_file(void **state)
{
	files *f = *state;
	char *argv[] = {"inspect", f->good, NULL};
	char *text;

	assert_int_equal(run_inspect(f->out, 2, argv), 0);
	text = slurp(f->out);
	assert_non_null(strstr(text, "shape   (10,)"));
	assert_non_null(strstr(text, "dtype   <i8 (int64), C order"));
	assert_non_null(strstr(text, "bytes   80 data + 128 header = 208"));
	assert_non_null(strstr(text, "labels  10 values, 6 distinct, min -1, max 9"));
	assert_non_null(strstr(text, "top     2 (x3), 7 (x3), -1 (x1), 0 (x1), 5 (x1)"));
}

static void test_inspect_reports_a_truncated_file_and_fails(void **state)
{
	files *f = *state;
	char *argv[] = {"inspect", f->trunc, f->good, NULL};
	char *text;

	assert_int_equal(run_inspect(f->out, 3, argv), 1);
	text = slurp(f->out);
	assert_non_null(strstr(text, "truncated: the header promises 80 data "
				     "bytes but only 77 follow"));
	assert_non_null(strstr(text, "labels  10 values")); /* went on */
}

static void test_inspect_rejects_a_file_that_is_not_npy(void **state)
{
	files *f = *state;
	char *argv[] = {"inspect", f->junk, NULL};

	assert_int_equal(run_inspect(f->out, 2, argv), 1);
	assert_non_null(strstr(slurp(f->out), "bad magic"));
}

static void test_inspect_exits_two_on_usage_errors_and_zero_on_help(void **state)
{
	files *f = *state;
	char *none[] = {"inspect", NULL};
	char *bogus[] = {"inspect", "--bogus", NULL};
	char *help[] = {"inspect", "--help", NULL};

	assert_int_equal(run_inspect(f->out, 1, none), 2);
	assert_int_equal(run_inspect(f->out, 2, bogus), 2);
	assert_int_equal(run_inspect(f->out, 2, help), 0);
	assert_non_null(strstr(slurp(f->out), "usage: batchfs inspect"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inspect_computes_uint8_statistics_like_numpy),
		cmocka_unit_test(test_inspect_reads_big_endian_and_float16_values),
		cmocka_unit_test(test_inspect_leaves_nans_out_of_the_statistics),
		cmocka_unit_test(test_inspect_marks_strings_as_without_statistics),
		cmocka_unit_test(test_inspect_stays_accurate_over_a_long_array),
		cmocka_unit_test(test_inspect_summarizes_a_label_file),
		cmocka_unit_test(test_inspect_reports_a_truncated_file_and_fails),
		cmocka_unit_test(test_inspect_rejects_a_file_that_is_not_npy),
		cmocka_unit_test(test_inspect_exits_two_on_usage_errors_and_zero_on_help),
	};

	return cmocka_run_group_tests(tests, make_files, remove_files);
}
