/*
 * test_batchdir.c - the CUDA-free logic of the GPU companion: listing a
 * folder of batch files and checking batch headers (tools/gpu/batchdir.c),
 * what each batch is delivered as and the host reference of the normalize
 * kernel (tools/gpu/convert.c), the library's code table and version
 * (tools/gpu/info.c).  Runs everywhere (no GPU, no CUDA), under ASan with
 * SAN=address.
 */
#include "tools/gpu/batchdir.h"

#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "engine/version.h"
#include "tools/gpu/batchfs_gpu.h"
#include "tools/gpu/convert.h"

#include <math.h>

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

/* check_file with bfs__gpu_check_images_in(files) */
static int check_in(const char *descr, const uint64_t *shape, int files,
		    bfs__gpu_hdr *h, char *errmsg)
{
	static int k;
	char name[64], path[600];
	unsigned char *buf;
	size_t len;
	int err;

	snprintf(name, sizeof(name), "g%d.npy", k++);
	write_npy(tmpdir, name, descr, shape, 4, 0);
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	read_file(path, &buf, &len);
	err = bfs__gpu_check_images_in(buf, len, len, files, h, errmsg);
	free(buf);
	return err;
}

static void test_images_accept_float16_and_nchw_as_a_mount_serves(void **st)
{
	uint64_t nhwc[4] = {4, 32, 30, 3}, nchw[4] = {4, 3, 32, 30};
	bfs__gpu_hdr h;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	assert_int_equal(check_in("<f2", nhwc, 0, &h, errmsg), 0);
	assert_int_equal(h.dtype, BFS_GPU_FLOAT16);
	assert_int_equal(h.nchw, 0);
	assert_int_equal(h.data_len, 2 * 4 * 32 * 30 * 3);
	assert_true(h.n == 4 && h.c == 3 && h.h == 32 && h.w == 30);
	assert_int_equal(check_in("<f2", nchw, 0, &h, errmsg), 0);
	assert_int_equal(h.nchw, 1);
	assert_true(h.n == 4 && h.c == 3 && h.h == 32 && h.w == 30);
	assert_int_equal(h.shape[1], 3);
	assert_int_equal(check_in("|u1", nchw, 0, &h, errmsg), 0);
	assert_true(h.dtype == BFS_GPU_UINT8 && h.nchw == 1);
	assert_int_equal(check_in("<f4", nchw, BFS_GPU_FILES_NCHW, &h, errmsg),
			 0);
	assert_true(h.dtype == BFS_GPU_FLOAT32 && h.nchw == 1);
}

static void test_images_layout_comes_from_the_flag_else_the_shape(void **st)
{
	uint64_t both[4] = {2, 3, 4, 3}, neither[4] = {2, 5, 6, 7};
	uint64_t nchw[4] = {2, 3, 8, 9};
	bfs__gpu_hdr h;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	/* both fit: the shape says NHWC, the flag can say NCHW */
	assert_int_equal(check_in("|u1", both, 0, &h, errmsg), 0);
	assert_true(h.nchw == 0 && h.c == 3 && h.h == 3 && h.w == 4);
	assert_int_equal(check_in("|u1", both, BFS_GPU_FILES_NCHW, &h, errmsg),
			 0);
	assert_true(h.nchw == 1 && h.c == 3 && h.h == 4 && h.w == 3);
	/* a flag that the shape contradicts, or no channel dimension at all */
	assert_int_equal(check_in("|u1", nchw, BFS_GPU_FILES_NHWC, &h, errmsg),
			 BFS_E_FORMAT);
	assert_non_null(strstr(errmsg, "the files are NHWC"));
	assert_int_equal(check_in("|u1", neither, 0, &h, errmsg), BFS_E_FORMAT);
	assert_non_null(strstr(errmsg, "NHWC or NCHW"));
	assert_int_equal(check_in("<f8", nchw, 0, &h, errmsg), BFS_E_FORMAT);
	assert_non_null(strstr(errmsg, "'<f2'"));
}

/* bfs__gpu_plan_batch for a header of the given dtype/layout. */
static bfs__gpu_plan plan_for(int dtype, int nchw, int flags)
{
	bfs__gpu_hdr h;
	bfs__gpu_plan p;

	memset(&h, 0, sizeof(h));
	h.dtype = dtype;
	h.nchw = nchw;
	h.n = 2, h.c = 3, h.h = 5, h.w = 7;
	h.shape[0] = 2;
	h.shape[1] = nchw ? 3 : 5;
	h.shape[2] = nchw ? 5 : 7;
	h.shape[3] = nchw ? 7 : 3;
	h.data_len = 2 * 3 * 5 * 7 * bfs__gpu_dtype_size(dtype);
	bfs__gpu_plan_batch(&h, flags, &p);
	return p;
}

static void test_plan_delivers_what_the_header_table_says(void **st)
{
	static const int dtypes[] = {BFS_GPU_UINT8, BFS_GPU_FLOAT16,
				     BFS_GPU_FLOAT32};
	static const int outs[] = {0, BFS_GPU_NCHW, BFS_GPU_NHWC};
	size_t i, o;
	int nchw;

	for (i = 0; i < 3; i++) {
		for (nchw = 0; nchw < 2; nchw++) {
			bfs__gpu_plan p = plan_for(dtypes[i], nchw, 0);

			/* without NORMALIZE: as stored */
			assert_int_equal(p.dtype, dtypes[i]);
			assert_int_equal(p.nchw, nchw);
			assert_int_equal(p.normalize, 0);
			assert_int_equal(p.shape[1], nchw ? 3 : 5);
			assert_int_equal(p.bytes, 210 * bfs__gpu_dtype_size(
						dtypes[i]));
			for (o = 0; o < 3; o++) {
				int want = outs[o] == BFS_GPU_NCHW ? 1
					   : outs[o] == BFS_GPU_NHWC ? 0 : nchw;

				p = plan_for(dtypes[i], nchw,
					     BFS_GPU_NORMALIZE | outs[o]);
				assert_int_equal(p.dtype, BFS_GPU_FLOAT32);
				assert_int_equal(p.normalize, 1);
				assert_int_equal(p.nchw, want);
				assert_int_equal(p.layout,
					(want ? BFS_GPU_NORM_DST_NCHW : 0) |
					(nchw ? BFS_GPU_NORM_SRC_NCHW : 0));
				assert_int_equal(p.shape[0], 2);
				assert_int_equal(p.shape[1], want ? 3 : 5);
				assert_int_equal(p.shape[2], want ? 5 : 7);
				assert_int_equal(p.shape[3], want ? 7 : 3);
				assert_int_equal(p.bytes, 210 * 4);
			}
		}
	}
}

static void test_half_to_float_is_exact_for_every_half(void **st)
{
	uint32_t v;
	float prev = -INFINITY;

	assert_true(bfs__gpu_half_to_float(0x3c00) == 1.0f);
	assert_true(bfs__gpu_half_to_float(0xc000) == -2.0f);
	assert_true(bfs__gpu_half_to_float(0x7bff) == 65504.0f);
	assert_true(bfs__gpu_half_to_float(0x0001) == ldexpf(1, -24));
	assert_true(bfs__gpu_half_to_float(0x7c00) == INFINITY);
	assert_true(isnan(bfs__gpu_half_to_float(0x7e00)));
	assert_true(signbit(bfs__gpu_half_to_float(0x8000)));
	for (v = 0; v < 0x7c00; v++) {  /* every finite non-negative half */
		uint32_t e = v >> 10, m = v & 0x3ff;
		double want = e ? ldexp(1.0 + m / 1024.0, (int)e - 15)
				: ldexp((double)m, -24);
		float f = bfs__gpu_half_to_float((uint16_t)v);

		assert_true((double)f == want);
		assert_true(f > prev || v == 0);
		assert_true(bfs__gpu_half_to_float((uint16_t)(v | 0x8000)) == -f);
		prev = f;
	}
}

static void test_host_normalize_maps_every_layout_and_dtype(void **st)
{
	enum { N = 2, C = 3, H = 2, W = 3, T = N * C * H * W };
	unsigned char u8[T];
	uint16_t f16[T];
	float f32[T], out[4][T], mean[C] = {0.5f, 0.25f, 0.125f};
	float sd[C] = {0.5f, 2.0f, 4.0f};
	int i, b, c, r, lay;

	for (i = 0; i < T; i++) {
		u8[i] = (unsigned char)(i * 7);
		f16[i] = (uint16_t)(0x3c00 + i);  /* 1 + i/1024 */
		f32[i] = (float)i / 8.0f;
	}
	/* NHWC src: element (b, r, c) at (b*H*W + r)*C + c */
	for (lay = 0; lay < 4; lay++)
		assert_int_equal(bfs__gpu_normalize_host(u8, BFS_GPU_UINT8,
				out[lay], N, H, W, C, mean, sd,
				lay), 0);
	/* element (b, pixel r, channel c) is at hwc in NHWC, chw in NCHW */
	for (b = 0; b < N; b++)
		for (r = 0; r < H * W; r++)
			for (c = 0; c < C; c++) {
				int hwc = (b * H * W + r) * C + c;
				int chw = (b * C + c) * H * W + r;

				for (lay = 0; lay < 4; lay++) {
					int si = lay & BFS_GPU_NORM_SRC_NCHW ? chw
									     : hwc;
					int di = lay & BFS_GPU_NORM_DST_NCHW ? chw
									     : hwc;
					volatile float v = u8[si] / 255.0f, d;

					d = v - mean[c];
					v = d / sd[c];
					assert_memory_equal(&out[lay][di],
							    (float *)&v, 4);
				}
			}
	/* NCHW src -> NHWC dst is the inverse transpose of NHWC -> NCHW */
	assert_int_equal(bfs__gpu_normalize_host(f32, BFS_GPU_FLOAT32, out[0],
			 N, H, W, C, NULL, NULL, BFS_GPU_NORM_DST_NCHW), 0);
	assert_int_equal(bfs__gpu_normalize_host(out[0], BFS_GPU_FLOAT32,
			 out[1], N, H, W, C, NULL, NULL, BFS_GPU_NORM_SRC_NCHW),
			 0);
	assert_memory_equal(out[1], f32, sizeof(f32));
	assert_int_equal(bfs__gpu_normalize_host(out[0], BFS_GPU_FLOAT32,
			 out[2], N, H, W, C, NULL, NULL, BFS_GPU_NORM_SRC_NCHW |
			 BFS_GPU_NORM_DST_NCHW), 0);
	assert_memory_equal(out[2], out[0], sizeof(f32));
	/* float16: widened exactly, no /255; mean/std per channel plane */
	assert_int_equal(bfs__gpu_normalize_host(f16, BFS_GPU_FLOAT16, out[3],
			 N, H, W, C, mean, sd, BFS_GPU_NORM_SRC_NCHW |
			 BFS_GPU_NORM_DST_NCHW), 0);
	for (i = 0; i < T; i++) {
		volatile float x = 1.0f + i / 1024.0f, d;

		c = (i / (H * W)) % C;
		d = x - mean[c];
		x = d / sd[c];
		assert_memory_equal(&out[3][i], (float *)&x, 4);
	}
	/* the kernel's argument checks */
	assert_int_equal(bfs__gpu_normalize_host(u8, BFS_GPU_INT64, out[0], N,
			 H, W, C, NULL, NULL, 0), -EINVAL);
	assert_int_equal(bfs__gpu_normalize_host(u8, BFS_GPU_UINT8, out[0], N,
			 H, W, C, NULL, NULL, 4), -EINVAL);
	assert_int_equal(bfs__gpu_normalize_host(u8, BFS_GPU_UINT8, out[0], N,
			 H, W, 5, NULL, NULL, 0), -EINVAL);
	assert_int_equal(bfs__gpu_normalize_host(u8, BFS_GPU_UINT8, out[0], N,
			 H, W, C, mean, NULL, 0), -EINVAL);
	sd[1] = 0;
	assert_int_equal(bfs__gpu_normalize_host(u8, BFS_GPU_UINT8, out[0], N,
			 H, W, C, mean, sd, 0), -EINVAL);
}

static void test_codes_table_names_every_code_once_in_order(void **st)
{
	size_t n = 0, i, j;
	const bfs_gpu_code *t = bfs_gpu_codes(&n);

	assert_non_null(t);
	assert_int_equal(n, (BFS_E_LAST - BFS_E_FIRST - 1) +
			 (BFS_GPU_E_LAST - BFS_GPU_E_FIRST - 1));
	for (i = 0; i < n; i++) {
		int gpu = t[i].code > BFS_GPU_E_FIRST &&
			  t[i].code < BFS_GPU_E_LAST;

		assert_true(gpu || (t[i].code > BFS_E_FIRST &&
				    t[i].code < BFS_E_LAST));
		assert_true(strncmp(t[i].name, gpu ? "BFS_GPU_E_" : "BFS_E_",
				    gpu ? 10 : 6) == 0);
		assert_string_not_equal(bfs_gpu_strerror(t[i].code),
					"unknown error");
		if (i > 0)
			assert_true(t[i - 1].code < t[i].code);
		for (j = 0; j < i; j++)
			assert_string_not_equal(t[i].name, t[j].name);
	}
	assert_int_equal(t[0].code, BFS_GPU_E_NODEV);
	assert_string_equal(t[0].name, "BFS_GPU_E_NODEV");
	assert_string_equal(bfs_gpu_strerror(BFS_E_FORMAT),
			    "unrecognized format");
	assert_string_equal(bfs_gpu_version(), BFS_VERSION);
	assert_int_equal(bfs_gpu_abi(NULL, NULL), BFS_GPU_ABI_VERSION);
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
		cmocka_unit_test(test_images_accept_float16_and_nchw_as_a_mount_serves),
		cmocka_unit_test(test_images_layout_comes_from_the_flag_else_the_shape),
		cmocka_unit_test(test_plan_delivers_what_the_header_table_says),
		cmocka_unit_test(test_half_to_float_is_exact_for_every_half),
		cmocka_unit_test(test_host_normalize_maps_every_layout_and_dtype),
		cmocka_unit_test(test_codes_table_names_every_code_once_in_order),
	};

	return cmocka_run_group_tests_name("gpu_batchdir", tests, setup,
					   teardown);
}
