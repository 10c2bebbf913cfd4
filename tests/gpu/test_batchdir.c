/*
 * test_batchdir.c - the CUDA-free logic of the GPU companion: listing a
 * folder of batch files and checking batch headers (tools/gpu/batchdir.c).
 * Runs everywhere (no GPU, no CUDA), under ASan with SAN=address.
 */
#include "tools/gpu/batchdir.h"

#include "engine/error.h"
#include "engine/npy.h"
#include "tools/gpu/batchfs_gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char tmpdir[] = "/tmp/bfs-gpu-test-XXXXXX";

/* Write an .npy file of `descr`/shape with data bytes 0,1,2,... plus
 * `extra` trailing bytes (negative: cut that many). */
static void write_npy(const char *dir, const char *name, const char *descr,
		      const uint64_t *shape, int ndim, long extra)
{
	char path[512], hdr[512];
	uint64_t n = 1;
	size_t item = bfs_npy_itemsize(descr), i;
	int len = bfs_npy_header(hdr, sizeof(hdr), descr, shape, ndim);
	long total;
	unsigned char *buf;
	FILE *f;

	assert_true(len > 0);
	for (i = 0; i < (size_t)ndim; i++)
		n *= shape[i];
	total = (long)(n * item) + extra;
	assert_true(total >= 0);
	buf = malloc((size_t)total + 1);
	for (i = 0; i < (size_t)total; i++)
		buf[i] = (unsigned char)i;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(hdr, 1, (size_t)len, f), (size_t)len);
	assert_int_equal(fwrite(buf, 1, (size_t)total, f), (size_t)total);
	fclose(f);
	free(buf);
}

static void write_batch(const char *dir, int idx, uint64_t b)
{
	uint64_t shape[4] = {b, 4, 5, 3}, lshape[1] = {b};
	char name[64];

	snprintf(name, sizeof(name), "batch-%06d.npy", idx);
	write_npy(dir, name, "|u1", shape, 4, 0);
	snprintf(name, sizeof(name), "batch-%06d.labels.npy", idx);
	write_npy(dir, name, "<i8", lshape, 1, 0);
}

static char *subdir(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	assert_int_equal(mkdir(path, 0700), 0);
	return path;
}

static void read_file(const char *path, unsigned char **buf, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	*buf = malloc(*len + 1);
	assert_int_equal(bfs__gpu_read_full(fd, *buf, *len), 0);
	close(fd);
}

static void test_scan_lists_batches_sorted_without_labels_or_strays(void **st)
{
	char *d = subdir("sorted");
	char dir[512];
	bfs__gpu_dir bd;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	FILE *f;
	char stray[600];

	snprintf(dir, sizeof(dir), "%s", d);
	write_batch(dir, 2, 3);
	write_batch(dir, 0, 8);
	write_batch(dir, 1, 8);
	snprintf(stray, sizeof(stray), "%s/dataset.json", dir);
	f = fopen(stray, "w");
	fputs("{}", f);
	fclose(f);
	snprintf(stray, sizeof(stray), "%s/other.npy", dir);
	f = fopen(stray, "w");
	fclose(f);

	assert_int_equal(bfs__gpu_dir_scan(dir, &bd, errmsg), 0);
	assert_int_equal(bd.n, 3);
	assert_non_null(strstr(bd.images[0], "/batch-000000.npy"));
	assert_non_null(strstr(bd.images[1], "/batch-000001.npy"));
	assert_non_null(strstr(bd.images[2], "/batch-000002.npy"));
	assert_non_null(strstr(bd.labels[2], "/batch-000002.labels.npy"));
	/* 128-byte header + 8*4*5*3 bytes; labels 128 + 8*8 */
	assert_int_equal(bd.max_images, 128 + 8 * 4 * 5 * 3);
	assert_int_equal(bd.max_labels, 128 + 8 * 8);
	bfs__gpu_dir_free(&bd);
	bfs__gpu_dir_free(&bd);  /* idempotent on a zeroed struct */
	bfs__gpu_dir_free(NULL);
}

static void test_scan_rejects_missing_folder(void **st)
{
	bfs__gpu_dir bd;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	char path[512];

	snprintf(path, sizeof(path), "%s/nope", tmpdir);
	assert_int_equal(bfs__gpu_dir_scan(path, &bd, errmsg), -ENOENT);
	assert_non_null(strstr(errmsg, "nope"));
	assert_int_equal(bd.n, 0);
}

static void test_scan_rejects_a_file_as_folder(void **st)
{
	bfs__gpu_dir bd;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	char *d = subdir("file");
	char dir[512];

	snprintf(dir, sizeof(dir), "%s", d);
	write_batch(dir, 0, 2);
	strcat(dir, "/batch-000000.npy");
	assert_int_equal(bfs__gpu_dir_scan(dir, &bd, errmsg), -ENOTDIR);
}

static void test_scan_says_empty_for_a_folder_without_batches(void **st)
{
	bfs__gpu_dir bd;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	assert_int_equal(bfs__gpu_dir_scan(subdir("empty"), &bd, errmsg),
			 BFS_E_EMPTY);
	assert_non_null(strstr(errmsg, "no batch"));
}

static void test_scan_names_a_missing_labels_file(void **st)
{
	bfs__gpu_dir bd;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	char *d = subdir("nolabels");
	char dir[512], path[600];

	snprintf(dir, sizeof(dir), "%s", d);
	write_batch(dir, 0, 2);
	write_batch(dir, 1, 2);
	snprintf(path, sizeof(path), "%s/batch-000001.labels.npy", dir);
	unlink(path);
	assert_int_equal(bfs__gpu_dir_scan(dir, &bd, NULL), -ENOENT);
	assert_int_equal(bfs__gpu_dir_scan(dir, &bd, errmsg), -ENOENT);
	assert_non_null(strstr(errmsg, "batch-000001.labels.npy"));
	assert_null(bd.images);
}

/* Check the header of an in-memory file made by write_npy. */
static int check_file(const char *descr, const uint64_t *shape, int ndim,
		      long extra, int labels, int64_t batch, bfs__gpu_hdr *h,
		      char *errmsg)
{
	static int k;
	char name[64], path[600];
	unsigned char *buf;
	size_t len;
	int err;

	snprintf(name, sizeof(name), "f%d.npy", k++);
	write_npy(tmpdir, name, descr, shape, ndim, extra);
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	read_file(path, &buf, &len);
	err = labels ? bfs__gpu_check_labels(buf, len, len, batch, h, errmsg)
		     : bfs__gpu_check_images(buf, len, len, h, errmsg);
	free(buf);
	return err;
}

static void test_images_accept_uint8_and_float32_nhwc(void **st)
{
	uint64_t shape[4] = {7, 3, 2, 3};
	bfs__gpu_hdr h;

	assert_int_equal(check_file("|u1", shape, 4, 0, 0, 0, &h, NULL), 0);
	assert_int_equal(h.dtype, BFS_GPU_UINT8);
	assert_int_equal(h.shape[0], 7);
	assert_int_equal(h.shape[3], 3);
	assert_int_equal(h.header_len, 128);
	assert_int_equal(h.data_len, 7 * 3 * 2 * 3);
	assert_int_equal(check_file("<f4", shape, 4, 0, 0, 0, &h, NULL), 0);
	assert_int_equal(h.dtype, BFS_GPU_FLOAT32);
	assert_int_equal(h.data_len, 4 * 7 * 3 * 2 * 3);
}

static void test_images_reject_other_dtypes_and_ranks(void **st)
{
	uint64_t shape[4] = {2, 3, 2, 3}, s5[4] = {2, 3, 2, 5};
	bfs__gpu_hdr h;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	assert_int_equal(check_file("<f8", shape, 4, 0, 0, 0, &h, errmsg),
			 BFS_E_FORMAT);
	assert_non_null(strstr(errmsg, "<f8"));
	assert_int_equal(check_file("|u1", shape, 3, 0, 0, 0, &h, errmsg),
			 BFS_E_FORMAT);
	assert_non_null(strstr(errmsg, "dimensions"));
	assert_int_equal(check_file("|u1", s5, 4, 0, 0, 0, &h, errmsg),
			 BFS_E_FORMAT);
}

static void test_images_reject_wrong_sizes(void **st)
{
	uint64_t shape[4] = {2, 3, 2, 3};
	bfs__gpu_hdr h;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	assert_int_equal(check_file("|u1", shape, 4, -1, 0, 0, &h, errmsg),
			 BFS_E_TRUNCATED);
	assert_int_equal(check_file("|u1", shape, 4, 5, 0, 0, &h, errmsg),
			 BFS_E_FORMAT);
	assert_non_null(strstr(errmsg, "after the array data"));
	/* not an npy file at all */
	assert_int_equal(bfs__gpu_check_images("hello world", 11, 11, &h,
					       errmsg), BFS_E_FORMAT);
}

static void test_labels_must_be_int64_of_the_batch_length(void **st)
{
	uint64_t l4[1] = {4}, l3[1] = {3}, l22[2] = {2, 2};
	bfs__gpu_hdr h;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	assert_int_equal(check_file("<i8", l4, 1, 0, 1, 4, &h, errmsg), 0);
	assert_int_equal(h.data_len, 32);
	assert_int_equal(h.dtype, BFS_GPU_INT64);
	assert_int_equal(check_file("<i8", l3, 1, 0, 1, 4, &h, errmsg),
			 BFS_E_FORMAT);
	assert_int_equal(check_file("<i4", l4, 1, 0, 1, 4, &h, errmsg),
			 BFS_E_FORMAT);
	assert_int_equal(check_file("<i8", l22, 2, 0, 1, 4, &h, errmsg),
			 BFS_E_FORMAT);
}

static void test_read_full_reports_a_short_file(void **st)
{
	char path[600];
	unsigned char buf[64];
	int fd;

	snprintf(path, sizeof(path), "%s/short", tmpdir);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "0123456789", 10), 10);
	assert_int_equal(bfs__gpu_read_full(fd, buf, 10), 0);
	assert_memory_equal(buf, "0123456789", 10);
	assert_int_equal(bfs__gpu_read_full(fd, buf, 11), BFS_E_TRUNCATED);
	close(fd);
	assert_int_equal(bfs__gpu_read_full(fd, buf, 1), -EBADF);
}

static int setup(void **st)
{
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **st)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scan_lists_batches_sorted_without_labels_or_strays),
		cmocka_unit_test(test_scan_rejects_missing_folder),
		cmocka_unit_test(test_scan_rejects_a_file_as_folder),
		cmocka_unit_test(test_scan_says_empty_for_a_folder_without_batches),
		cmocka_unit_test(test_scan_names_a_missing_labels_file),
		cmocka_unit_test(test_images_accept_uint8_and_float32_nhwc),
		cmocka_unit_test(test_images_reject_other_dtypes_and_ranks),
		cmocka_unit_test(test_images_reject_wrong_sizes),
		cmocka_unit_test(test_labels_must_be_int64_of_the_batch_length),
		cmocka_unit_test(test_read_full_reports_a_short_file),
	};

	return cmocka_run_group_tests_name("gpu_batchdir", tests, setup,
					   teardown);
}
