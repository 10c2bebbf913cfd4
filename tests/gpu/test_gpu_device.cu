/*
 * test_gpu_device.cu - tests of libbatchfs_gpu that need a CUDA device:
 * device bytes equal file bytes for every batch (every I/O mode, depth and
 * reader count), the normalization kernel against a CPU reference (bit for
 * bit), the upload of batch N+1 overlapping work on batch N (CUDA events),
 * the ring's rules and reader errors; float16 and NCHW files, and the
 * kernel and the loader for every dtype x layout x output layout against
 * the host reference (tools/gpu/convert.c) that CI checks against NumPy.
 * Without a device every test is a skip with the reason.  Prints ok /
 * not ok / skip lines, then "N passed, N failed, N skipped".
 */
extern "C" {  /* the engine headers and the CUDA-free helpers are C */
#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "tools/gpu/convert.h"
}
#include "tools/gpu/batchfs_gpu.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

static int passed, failed, skipped;
static char why[1024];
static std::string tmp;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			snprintf(why, sizeof(why), __VA_ARGS__);           \
			return 1;                                          \
		}                                                          \
	} while (0)
#define CUDA(call)                                                         \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		CHECK(e_ == cudaSuccess, "%s: %s", #call,                  \
		      cudaGetErrorString(e_));                             \
	} while (0)

static void run(const char *name, int (*fn)())
{
	why[0] = '\0';
	if (fn() == 0) {
		passed++;
		printf("ok %s\n", name);
	} else {
		failed++;
		printf("not ok %s: %s\n", name, why);
	}
	fflush(stdout);
}

/* ---- batch folders ----------------------------------------------------- */

struct Batch {
	std::vector<unsigned char> data;  /* images array bytes */
	std::vector<int64_t> labels;
	uint64_t shape[4];                /* as stored */
	bool f32;
	int dtype;                        /* bfs_gpu_dtype */
	bool nchw;                        /* stored (B,C,H,W) */
	int64_t n, c, h, w;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd()
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 11);
}

static void write_npy(const std::string &path, const char *descr,
		      const uint64_t *shape, int ndim, const void *data,
		      size_t len)
{
	char hdr[512];
	int n = bfs_npy_header(hdr, sizeof(hdr), descr, shape, ndim);
	FILE *f = fopen(path.c_str(), "wb");

	if (n <= 0 || !f) {
		fprintf(stderr, "cannot write %s\n", path.c_str());
		exit(2);
	}
	fwrite(hdr, 1, (size_t)n, f);
	fwrite(data, 1, len, f);
	fclose(f);
}

/* A folder of `batches` files of dtype (bfs_gpu_dtype) in NHWC or NCHW.
 * float16 data are random finite halves (subnormals included). */
static std::vector<Batch> make_folder_as(const std::string &dir, int batches,
					 int b, int h, int w, int c, int dtype,
					 bool nchw, int last)
{
	std::vector<Batch> out;
	size_t esize = bfs__gpu_dtype_size(dtype);
	const char *descr = dtype == BFS_GPU_FLOAT32 ? "<f4"
			    : dtype == BFS_GPU_FLOAT16 ? "<f2" : "|u1";

	mkdir(dir.c_str(), 0700);
	for (int i = 0; i < batches; i++) {
		Batch bt;
		int bb = (i == batches - 1 && last > 0) ? last : b;
		size_t n = (size_t)bb * h * w * c;
		char name[64];

		bt.shape[0] = bb;
		bt.shape[1] = nchw ? c : h;
		bt.shape[2] = nchw ? h : w;
		bt.shape[3] = nchw ? w : c;
		bt.f32 = dtype == BFS_GPU_FLOAT32;
		bt.dtype = dtype;
		bt.nchw = nchw;
		bt.n = bb, bt.c = c, bt.h = h, bt.w = w;
		bt.data.resize(n * esize);
		if (dtype == BFS_GPU_FLOAT32) {
			float *p = (float *)bt.data.data();
			for (size_t k = 0; k < n; k++)
				p[k] = (float)(rnd() & 255) / 255.0f;
		} else if (dtype == BFS_GPU_FLOAT16) {
			uint16_t *p = (uint16_t *)bt.data.data();
			for (size_t k = 0; k < n; k++)
				p[k] = (uint16_t)((rnd() & 0x8000) |
						  ((rnd() % 31) << 10) |
						  (rnd() & 0x3ff));
		} else {
			for (size_t k = 0; k < n; k++)
				bt.data[k] = (unsigned char)rnd();
		}
		for (int k = 0; k < bb; k++)
			bt.labels.push_back((int64_t)(rnd() % 1000));
		snprintf(name, sizeof(name), "/batch-%06d.npy", i);
		write_npy(dir + name, descr, bt.shape, 4, bt.data.data(),
			  bt.data.size());
		uint64_t ls[1] = {(uint64_t)bb};
		snprintf(name, sizeof(name), "/batch-%06d.labels.npy", i);
		write_npy(dir + name, "<i8", ls, 1, bt.labels.data(),
			  bt.labels.size() * 8);
		out.push_back(bt);
	}
	return out;
}

static std::vector<Batch> make_folder(const std::string &dir, int batches,
				      int b, int h, int w, int c, bool f32,
				      int last)
{
	return make_folder_as(dir, batches, b, h, w, c,
			      f32 ? BFS_GPU_FLOAT32 : BFS_GPU_UINT8, false,
			      last);
}

/* ---- device bytes == file bytes ---------------------------------------- */

static int check_stream(const std::string &dir, const std::vector<Batch> &ref,
			int depth, int readers, int io, int passes)
{
	bfs_gpu_opts o;
	bfs_gpu_loader *ld = NULL;
	bfs_gpu_batch b;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	cudaStream_t st;
	std::vector<unsigned char> host;
	std::vector<int64_t> lab;
	int err;
	int64_t seq = 0;

	CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	bfs_gpu_opts_init(&o);
	o.depth = depth;
	o.readers = readers;
	o.io = io;
	o.passes = passes;
	o.stream = st;
	err = bfs_gpu_open(dir.c_str(), &o, &ld, errmsg);
	CHECK(err == 0, "open: %s: %s", bfs_gpu_strerror(err), errmsg);
	CHECK(bfs_gpu_count(ld) == (int64_t)ref.size(), "count");
	while ((err = bfs_gpu_next(ld, &b)) == 0) {
		const Batch &r = ref[seq % ref.size()];

		CHECK(b.seq == seq && b.index == seq % (int64_t)ref.size(),
		      "order: seq %lld index %lld", (long long)b.seq,
		      (long long)b.index);
		CHECK(b.ndim == 4 && b.shape[0] == (int64_t)r.shape[0] &&
		      b.shape[1] == (int64_t)r.shape[1] &&
		      b.shape[2] == (int64_t)r.shape[2] &&
		      b.shape[3] == (int64_t)r.shape[3], "shape of %lld",
		      (long long)seq);
		CHECK(b.dtype == r.dtype && b.nchw == (int)r.nchw,
		      "dtype %d nchw %d", b.dtype, b.nchw);
		CHECK(b.images_bytes == r.data.size() &&
		      b.upload_bytes == r.data.size() &&
		      b.labels_len == (int64_t)r.labels.size(), "sizes");
		host.assign(r.data.size(), 0xee);
		lab.assign(r.labels.size(), -7);
		/* the consumer stream already waits on b.ready */
		CUDA(cudaMemcpyAsync(host.data(), b.images, host.size(),
				     cudaMemcpyDeviceToHost, st));
		CUDA(cudaMemcpyAsync(lab.data(), b.labels, lab.size() * 8,
				     cudaMemcpyDeviceToHost, st));
		CUDA(cudaStreamSynchronize(st));
		CHECK(memcmp(host.data(), r.data.data(), host.size()) == 0,
		      "batch %lld: device images differ from the file",
		      (long long)seq);
		CHECK(lab == r.labels, "batch %lld: labels differ",
		      (long long)seq);
		CHECK(bfs_gpu_release(ld, &b) == 0, "release");
		seq++;
	}
	CHECK(err == BFS_GPU_E_END, "next: %s: %s", bfs_gpu_strerror(err),
	      bfs_gpu_errmsg(ld));
	CHECK(seq == (int64_t)ref.size() * passes, "%lld batches",
	      (long long)seq);
	CHECK(bfs_gpu_next(ld, &b) == BFS_GPU_E_END, "END is sticky");
	bfs_gpu_close(ld);
	CUDA(cudaStreamDestroy(st));
	return 0;
}

static int test_device_bytes_equal_file_bytes_for_every_batch()
{
	std::string u8 = tmp + "/u8", f32 = tmp + "/f32";
	auto ru = make_folder(u8, 7, 16, 32, 40, 3, false, 5);
	auto rf = make_folder(f32, 5, 8, 17, 19, 3, true, 3);
	static const int cfg[][4] = {
		/* depth, readers, io, passes */
		{1, 1, BFS_GPU_IO_PREAD, 1}, {2, 1, BFS_GPU_IO_PREAD, 2},
		{3, 2, BFS_GPU_IO_PREAD, 3}, {4, 3, BFS_GPU_IO_PREAD, 1},
		{2, 1, BFS_GPU_IO_MMAP, 2},  {3, 3, BFS_GPU_IO_MMAP, 1},
	};

	for (auto &c : cfg) {
		if (check_stream(u8, ru, c[0], c[1], c[2], c[3]) ||
		    check_stream(f32, rf, c[0], c[1], c[2], c[3])) {
			char w[1024];
			snprintf(w, sizeof(w), "%s (depth %d readers %d io %d)",
				 why, c[0], c[1], c[2]);
			snprintf(why, sizeof(why), "%s", w);
			return 1;
		}
	}
	return 0;
}

/* ---- normalization ----------------------------------------------------- */

static float ref_value(float x, bool u8, const float *mean, const float *sd,
		       int ch)
{
	volatile float v = u8 ? x / 255.0f : x;  /* one IEEE op at a time */

	if (mean) {
		volatile float d = v - mean[ch];
		v = d / sd[ch];
	}
	return v;
}

static int norm_case(int n, int h, int w, int c, bool u8, bool ms, bool nchw,
		     int misalign)
{
	size_t total = (size_t)n * h * w * c, isz = u8 ? 1 : 4;
	std::vector<unsigned char> src(total * isz);
	std::vector<float> out(total), ref(total);
	float mean[4] = {0.485f, 0.456f, 0.406f, 0.5f};
	float sd[4] = {0.229f, 0.224f, 0.225f, 0.25f};
	unsigned char *dsrc;
	float *ddst;

	if (u8) {
		for (auto &v : src)
			v = (unsigned char)rnd();
	} else {
		float *p = (float *)src.data();
		for (size_t k = 0; k < total; k++)
			p[k] = (float)(rnd() % 100000) / 777.0f - 50.0f;
	}
	for (size_t i = 0; i < total; i++) {
		size_t pix = i / c, ch = i % c;
		size_t nn = pix / ((size_t)h * w), hw = pix % ((size_t)h * w);
		float x = u8 ? (float)src[i] : ((float *)src.data())[i];
		size_t o = nchw ? (nn * c + ch) * h * w + hw : i;

		ref[o] = ref_value(x, u8, ms ? mean : NULL, ms ? sd : NULL,
				   (int)ch);
	}
	CUDA(cudaMalloc(&dsrc, src.size() + 16));
	CUDA(cudaMalloc(&ddst, total * 4 + 16));
	CUDA(cudaMemcpy(dsrc + misalign, src.data(), src.size(),
			cudaMemcpyHostToDevice));
	CUDA(cudaMemset(ddst, 0xff, total * 4 + 16));  /* NaN poison */
	int err = bfs_gpu_normalize(dsrc + misalign,
				    u8 ? BFS_GPU_UINT8 : BFS_GPU_FLOAT32,
				    ddst, n, h, w, c, ms ? mean : NULL,
				    ms ? sd : NULL, nchw, NULL);
	CHECK(err == 0, "normalize: %s", bfs_gpu_strerror(err));
	CUDA(cudaDeviceSynchronize());
	CUDA(cudaMemcpy(out.data(), ddst, total * 4, cudaMemcpyDeviceToHost));
	cudaFree(dsrc);
	cudaFree(ddst);
	for (size_t i = 0; i < total; i++)
		CHECK(memcmp(&out[i], &ref[i], 4) == 0,
		      "(%d,%d,%d,%d) %s%s%s off %d: element %zu: %.9g, want "
		      "%.9g", n, h, w, c, u8 ? "u8" : "f32",
		      ms ? " mean/std" : "", nchw ? " nchw" : "", misalign, i,
		      out[i], ref[i]);
	return 0;
}

static int test_normalize_kernel_matches_cpu_reference_bit_for_bit()
{
	static const int shapes[][4] = {
		{4, 31, 33, 3}, {1, 3, 5, 3}, {2, 7, 9, 1}, {3, 8, 8, 4},
		{64, 224, 224, 3},
	};

	for (auto &s : shapes)
		for (int u8 = 0; u8 < 2; u8++)
			for (int ms = 0; ms < 2; ms++)
				for (int nchw = 0; nchw < 2; nchw++)
					if (norm_case(s[0], s[1], s[2], s[3],
						      u8, ms, nchw, 0))
						return 1;
	/* unaligned source takes the scalar path */
	if (norm_case(2, 5, 6, 3, true, true, false, 1) ||
	    norm_case(2, 5, 6, 3, false, false, false, 4))
		return 1;
	{
		float m[3] = {0, 0, 0}, z[3] = {1, 0, 1};
		float *d;

		CUDA(cudaMalloc(&d, 64));
		CHECK(bfs_gpu_normalize(d, BFS_GPU_UINT8, d + 8, 1, 1, 1, 3,
					m, z, 0, NULL) == -EINVAL, "std 0");
		CHECK(bfs_gpu_normalize(d, BFS_GPU_INT64, d + 8, 1, 1, 1, 3,
					NULL, NULL, 0, NULL) == -EINVAL,
		      "int64 source");
		CHECK(bfs_gpu_normalize(d, BFS_GPU_UINT8, d + 8, 1, 1, 1, 5,
					NULL, NULL, 0, NULL) == -EINVAL,
		      "5 channels");
		CHECK(bfs_gpu_normalize(d, BFS_GPU_UINT8, d + 8, 1, 1, 1, 3,
					m, NULL, 0, NULL) == -EINVAL,
		      "mean without std");
		cudaFree(d);
	}
	return 0;
}

static int test_loader_normalizes_to_nchw_like_the_reference()
{
	std::string dir = tmp + "/norm";
	auto r = make_folder(dir, 3, 4, 6, 10, 3, false, 2);
	bfs_gpu_opts o;
	bfs_gpu_loader *ld;
	bfs_gpu_batch b;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f,
							    0.225f};
	int err, i = 0;

	bfs_gpu_opts_init(&o);
	o.flags = BFS_GPU_NORMALIZE | BFS_GPU_NCHW;
	memcpy(o.mean, mean, sizeof(mean));
	memcpy(o.std, sd, sizeof(sd));
	err = bfs_gpu_open(dir.c_str(), &o, &ld, errmsg);
	CHECK(err == 0, "open: %s", errmsg);
	while ((err = bfs_gpu_next(ld, &b)) == 0) {
		const Batch &x = r[i];
		size_t n = x.data.size();
		std::vector<float> out(n);
		int H = 6, W = 10, C = 3;

		CHECK(b.dtype == BFS_GPU_FLOAT32 && b.nchw == 1 &&
		      b.shape[1] == 3 && b.shape[2] == 6 && b.shape[3] == 10 &&
		      b.images_bytes == 4 * n && b.upload_bytes == n,
		      "batch %d description", i);
		CUDA(cudaStreamSynchronize(NULL));
		CUDA(cudaMemcpy(out.data(), b.images, 4 * n,
				cudaMemcpyDeviceToHost));
		for (size_t k = 0; k < n; k++) {
			size_t pix = k / C, ch = k % C;
			size_t nn = pix / (H * W), hw = pix % (H * W);
			float want = ref_value(x.data[k], true, mean, sd,
					       (int)ch);
			float got = out[(nn * C + ch) * H * W + hw];
			CHECK(memcmp(&got, &want, 4) == 0,
			      "batch %d element %zu: %.9g want %.9g", i, k,
			      got, want);
		}
		CHECK(bfs_gpu_release(ld, &b) == 0, "release");
		i++;
	}
	CHECK(err == BFS_GPU_E_END && i == 3, "end: %d after %d", err, i);
	bfs_gpu_close(ld);
	return 0;
}

/* ---- float16 and NCHW files, every output ------------------------------ */

static int test_device_bytes_equal_file_bytes_for_float16_and_nchw()
{
	struct F {
		const char *name;
		int dtype;
		bool nchw;
	} fs[] = {
		{"/f16", BFS_GPU_FLOAT16, false},
		{"/f16c", BFS_GPU_FLOAT16, true},
		{"/u8c", BFS_GPU_UINT8, true},
		{"/f32c", BFS_GPU_FLOAT32, true},
	};
	static const int cfg[][4] = {
		{1, 1, BFS_GPU_IO_PREAD, 1}, {3, 2, BFS_GPU_IO_PREAD, 2},
		{2, 1, BFS_GPU_IO_MMAP, 1},
	};

	for (auto &f : fs) {
		auto r = make_folder_as(tmp + f.name, 4, 6, 11, 13, 3, f.dtype,
					f.nchw, 5);
		for (auto &c : cfg)
			if (check_stream(tmp + f.name, r, c[0], c[1], c[2],
					 c[3])) {
				char w[1024];
				snprintf(w, sizeof(w), "%s (%s, depth %d io %d)",
					 why, f.name, c[0], c[2]);
				snprintf(why, sizeof(why), "%s", w);
				return 1;
			}
	}
	return 0;
}

/* The kernel against bfs__gpu_normalize_host, bit for bit. */
static int host_case(int n, int h, int w, int c, int dtype, int layout,
		     bool ms, int misalign)
{
	size_t total = (size_t)n * h * w * c, esize = bfs__gpu_dtype_size(dtype);
	std::vector<unsigned char> src(total * esize + 16);
	std::vector<float> out(total), ref(total);
	float mean[4] = {0.485f, 0.456f, 0.406f, 0.5f};
	float sd[4] = {0.229f, 0.224f, 0.225f, 0.25f};
	unsigned char *dsrc;
	float *ddst;

	for (size_t k = 0; k < total; k++) {
		unsigned char *p = src.data() + k * esize;
		if (dtype == BFS_GPU_FLOAT16) {
			uint16_t v = (uint16_t)((rnd() & 0x8000) |
						((rnd() % 31) << 10) |
						(rnd() & 0x3ff));
			memcpy(p, &v, 2);
		} else if (dtype == BFS_GPU_FLOAT32) {
			float v = (float)(rnd() % 100000) / 777.0f - 50.0f;
			memcpy(p, &v, 4);
		} else {
			*p = (unsigned char)rnd();
		}
	}
	CHECK(bfs__gpu_normalize_host(src.data(), dtype, ref.data(), n, h, w, c,
				      ms ? mean : NULL, ms ? sd : NULL,
				      layout) == 0, "host reference");
	CUDA(cudaMalloc(&dsrc, src.size() + 16));
	CUDA(cudaMalloc(&ddst, total * 4 + 16));
	CUDA(cudaMemcpy(dsrc + misalign, src.data(), total * esize,
			cudaMemcpyHostToDevice));
	CUDA(cudaMemset(ddst, 0xff, total * 4 + 16));  /* NaN poison */
	int err = bfs_gpu_normalize(dsrc + misalign, dtype, ddst, n, h, w, c,
				    ms ? mean : NULL, ms ? sd : NULL, layout,
				    NULL);
	CHECK(err == 0, "normalize: %s", bfs_gpu_strerror(err));
	CUDA(cudaDeviceSynchronize());
	CUDA(cudaMemcpy(out.data(), ddst, total * 4, cudaMemcpyDeviceToHost));
	cudaFree(dsrc);
	cudaFree(ddst);
	for (size_t i = 0; i < total; i++)
		CHECK(memcmp(&out[i], &ref[i], 4) == 0,
		      "(%d,%d,%d,%d) dtype %d layout %d%s off %d: element %zu: "
		      "%.9g, want %.9g", n, h, w, c, dtype, layout,
		      ms ? " mean/std" : "", misalign, i, out[i], ref[i]);
	return 0;
}

static int test_normalize_kernel_matches_host_reference_for_every_dtype_and_layout()
{
	static const int shapes[][4] = {
		{4, 31, 33, 3}, {1, 3, 5, 3}, {2, 7, 9, 1}, {3, 8, 8, 4},
		{2, 4, 6, 3}, {16, 224, 224, 3},
	};
	static const int dtypes[] = {BFS_GPU_UINT8, BFS_GPU_FLOAT16,
				     BFS_GPU_FLOAT32};

	for (auto &s : shapes)
		for (int d : dtypes)
			for (int layout = 0; layout < 4; layout++)
				for (int ms = 0; ms < 2; ms++)
					if (host_case(s[0], s[1], s[2], s[3], d,
						      layout, ms, 0))
						return 1;
	/* sources one element off alignment take the scalar paths */
	for (int d : dtypes)
		for (int layout = 0; layout < 4; layout++)
			if (host_case(2, 4, 6, 3, d, layout, true,
				      (int)bfs__gpu_dtype_size(d)))
				return 1;
	{
		float *dv;

		CUDA(cudaMalloc(&dv, 64));
		CHECK(bfs_gpu_normalize(dv, BFS_GPU_FLOAT16, dv + 8, 1, 1, 1, 3,
					NULL, NULL, 4, NULL) == -EINVAL,
		      "layout bit 4");
		cudaFree(dv);
	}
	return 0;
}

/* One loader run over `r` with `flags`; every batch as the header's table
 * says, its bytes equal the file's or the host reference's. */
static int loader_case(const std::string &dir, const std::vector<Batch> &r,
		       int flags)
{
	float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f,
							    0.225f};
	bfs_gpu_opts o;
	bfs_gpu_loader *ld;
	bfs_gpu_batch b;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	int err, i = 0;
	bool norm = flags & BFS_GPU_NORMALIZE;

	bfs_gpu_opts_init(&o);
	o.flags = flags;
	memcpy(o.mean, mean, sizeof(mean));
	memcpy(o.std, sd, sizeof(sd));
	err = bfs_gpu_open(dir.c_str(), &o, &ld, errmsg);
	CHECK(err == 0, "open: %s", errmsg);
	while ((err = bfs_gpu_next(ld, &b)) == 0) {
		const Batch &x = r[i];
		bool nchw = !norm ? x.nchw : (flags & BFS_GPU_NCHW) ? true
			    : (flags & BFS_GPU_NHWC) ? false : x.nchw;
		int64_t want[4] = {x.n, nchw ? x.c : x.h, nchw ? x.h : x.w,
				   nchw ? x.w : x.c};
		size_t elems = (size_t)(x.n * x.c * x.h * x.w);
		size_t bytes = norm ? 4 * elems : x.data.size();
		std::vector<unsigned char> got(bytes), ref(bytes);

		CHECK(b.dtype == (norm ? BFS_GPU_FLOAT32 : x.dtype) &&
		      b.nchw == (int)nchw && b.images_bytes == bytes &&
		      b.upload_bytes == x.data.size() &&
		      !memcmp(b.shape, want, sizeof(want)),
		      "batch %d: dtype %d nchw %d shape (%lld,%lld,%lld,%lld)",
		      i, b.dtype, b.nchw, (long long)b.shape[0],
		      (long long)b.shape[1], (long long)b.shape[2],
		      (long long)b.shape[3]);
		if (norm)
			CHECK(bfs__gpu_normalize_host(x.data.data(), x.dtype,
				(float *)ref.data(), x.n, x.h, x.w, x.c, o.mean,
				o.std, (nchw ? BFS_GPU_NORM_DST_NCHW : 0) |
				(x.nchw ? BFS_GPU_NORM_SRC_NCHW : 0)) == 0,
			      "host reference");
		else
			ref = x.data;
		CUDA(cudaStreamSynchronize(NULL));
		CUDA(cudaMemcpy(got.data(), b.images, bytes,
				cudaMemcpyDeviceToHost));
		CHECK(got == ref, "batch %d: device bytes differ", i);
		CHECK(bfs_gpu_release(ld, &b) == 0, "release");
		i++;
	}
	CHECK(err == BFS_GPU_E_END && i == (int)r.size(), "end: %d after %d",
	      err, i);
	bfs_gpu_close(ld);
	return 0;
}

static int test_loader_delivers_every_dtype_and_layout_as_the_header_says()
{
	static const int dtypes[] = {BFS_GPU_UINT8, BFS_GPU_FLOAT16,
				     BFS_GPU_FLOAT32};
	static const int flags[] = {
		0, BFS_GPU_NORMALIZE, BFS_GPU_NORMALIZE | BFS_GPU_NCHW,
		BFS_GPU_NORMALIZE | BFS_GPU_NHWC,
	};
	int k = 0;

	for (int d : dtypes)
		for (int nchw = 0; nchw < 2; nchw++) {
			std::string dir = tmp + "/every" + std::to_string(k++);
			auto r = make_folder_as(dir, 3, 4, 6, 10, 3, d, nchw, 2);

			for (int f : flags)
				if (loader_case(dir, r, f)) {
					char w[1024];
					snprintf(w, sizeof(w), "%s (dtype %d %s, "
						 "flags 0x%x)", why, d,
						 nchw ? "NCHW" : "NHWC", f);
					snprintf(why, sizeof(why), "%s", w);
					return 1;
				}
		}
	return 0;
}

/* ---- overlap ------------------------------------------------------------ */

__global__ void spin_on(const unsigned char *batch, unsigned long long ns,
			int *sink)
{
	unsigned long long t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
	if (batch[0] == 0xAB && t == 1)  /* "use" the batch */
		*sink = 1;
}

static int test_upload_of_next_batch_overlaps_work_on_current()
{
	const int M = 12, SPIN_MS = 8;
	std::string dir = tmp + "/overlap";
	make_folder(dir, M, 64, 160, 160, 3, false, 0);  /* 4.9 MB each */
	bfs_gpu_opts o;
	bfs_gpu_loader *ld;
	bfs_gpu_batch b;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	cudaStream_t st;
	cudaEvent_t base, ks[M], ke[M];
	float cs[M], ce[M];
	int *sink, err, inside = 0;
	float busy = 0, span;

	CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CUDA(cudaMalloc(&sink, 4));
	CUDA(cudaEventCreate(&base));
	for (int i = 0; i < M; i++) {
		CUDA(cudaEventCreate(&ks[i]));
		CUDA(cudaEventCreate(&ke[i]));
	}
	bfs_gpu_opts_init(&o);
	o.depth = 2;
	o.stream = st;
	o.flags = BFS_GPU_TIMING;
	err = bfs_gpu_open(dir.c_str(), &o, &ld, errmsg);
	CHECK(err == 0, "open: %s", errmsg);
	CUDA(cudaEventRecord(base, st));
	for (int i = 0; i < M; i++) {
		err = bfs_gpu_next(ld, &b);
		CHECK(err == 0, "next %d: %s", i, bfs_gpu_errmsg(ld));
		CUDA(cudaEventRecord(ks[i], st));
		spin_on<<<1, 1, 0, st>>>((const unsigned char *)b.images,
					 SPIN_MS * 1000000ull, sink);
		CUDA(cudaGetLastError());
		CUDA(cudaEventRecord(ke[i], st));
		/* read this upload's window before the slot is reused; its
		 * copy ran during the previous batch's kernel */
		CUDA(cudaEventSynchronize((cudaEvent_t)b.ready));
		CUDA(cudaEventElapsedTime(&cs[i], base,
					  (cudaEvent_t)b.copy_start));
		CUDA(cudaEventElapsedTime(&ce[i], base, (cudaEvent_t)b.ready));
		CHECK(bfs_gpu_release(ld, &b) == 0, "release %d", i);
	}
	CUDA(cudaStreamSynchronize(st));
	printf("# batch  upload window (ms)   kernel on previous batch (ms)\n");
	for (int i = 1; i < M; i++) {
		float a, z;

		CUDA(cudaEventElapsedTime(&a, base, ks[i - 1]));
		CUDA(cudaEventElapsedTime(&z, base, ke[i - 1]));
		printf("# %5d  %8.3f..%-8.3f   %8.3f..%-8.3f%s\n", i, cs[i],
		       ce[i], a, z,
		       (i >= 2 && cs[i] >= a - 0.05f && ce[i] <= z)
			       ? "  inside" : "");
		if (i >= 2 && cs[i] >= a - 0.05f && ce[i] <= z)
			inside++;
	}
	/* GPU busy share over kernels 1..M-1: their sum over their span */
	for (int i = 1; i < M; i++) {
		float k;

		CUDA(cudaEventElapsedTime(&k, ks[i], ke[i]));
		busy += k;
	}
	CUDA(cudaEventElapsedTime(&span, ks[1], ke[M - 1]));
	printf("# uploads inside the previous batch's kernel: %d of %d; "
	       "GPU busy %.1f%% from batch 1 to %d\n", inside, M - 2,
	       100.0 * busy / span, M - 1);
	bfs_gpu_close(ld);
	CHECK(inside == M - 2, "only %d of %d uploads overlapped", inside,
	      M - 2);
	CHECK(busy / span > 0.95, "GPU busy only %.1f%%", 100.0 * busy / span);
	for (int i = 0; i < M; i++) {
		cudaEventDestroy(ks[i]);
		cudaEventDestroy(ke[i]);
	}
	cudaEventDestroy(base);
	cudaFree(sink);
	cudaStreamDestroy(st);
	return 0;
}

/* ---- ring rules and errors --------------------------------------------- */

static int test_ring_refuses_overholding_and_bad_releases()
{
	std::string dir = tmp + "/ring";
	make_folder(dir, 5, 2, 4, 4, 3, false, 0);
	bfs_gpu_opts o;
	bfs_gpu_loader *ld;
	bfs_gpu_batch b[3], x;
	char errmsg[BFS_GPU_ERRMSG_MAX];

	bfs_gpu_opts_init(&o);
	o.depth = 2;
	CHECK(bfs_gpu_open(dir.c_str(), &o, &ld, errmsg) == 0, "open");
	CHECK(bfs_gpu_next(ld, &b[0]) == 0 && bfs_gpu_next(ld, &b[1]) == 0,
	      "next");
	CHECK(bfs_gpu_next(ld, &x) == -EBUSY, "third next while 2 held");
	CHECK(bfs_gpu_release(ld, &b[1]) == 0, "out-of-order release");
	CHECK(bfs_gpu_release(ld, &b[1]) == -EINVAL, "double release");
	CHECK(bfs_gpu_next(ld, &x) == -EBUSY, "slot 0 still held");
	CHECK(bfs_gpu_release(ld, &b[0]) == 0, "release 0");
	CHECK(bfs_gpu_next(ld, &b[2]) == 0 && b[2].seq == 2, "next 2");
	x = b[2];
	x.seq = 0;
	CHECK(bfs_gpu_release(ld, &x) == -EINVAL, "stale batch");
	x.slot = 9;
	CHECK(bfs_gpu_release(ld, &x) == -EINVAL, "bad slot");
	CHECK(bfs_gpu_release(NULL, &b[2]) == -EINVAL, "NULL loader");
	bfs_gpu_close(ld);  /* with a batch still held */
	bfs_gpu_close(NULL);
	return 0;
}

static int test_reader_error_comes_after_the_good_batches()
{
	std::string dir = tmp + "/bad";
	make_folder(dir, 5, 2, 4, 4, 3, false, 0);
	FILE *f = fopen((dir + "/batch-000002.npy").c_str(), "r+b");
	bfs_gpu_opts o;
	bfs_gpu_loader *ld;
	bfs_gpu_batch b;
	char errmsg[BFS_GPU_ERRMSG_MAX];
	int err, n = 0;

	CHECK(f, "fopen");
	fwrite("JUNK", 1, 4, f);
	fclose(f);
	bfs_gpu_opts_init(&o);
	o.readers = 2;
	CHECK(bfs_gpu_open(dir.c_str(), &o, &ld, errmsg) == 0, "open");
	while ((err = bfs_gpu_next(ld, &b)) == 0) {
		n++;
		bfs_gpu_release(ld, &b);
	}
	CHECK(n == 2, "%d good batches before the error", n);
	CHECK(err == BFS_E_FORMAT, "error %d (%s)", err, bfs_gpu_strerror(err));
	CHECK(strstr(bfs_gpu_errmsg(ld), "batch-000002.npy"),
	      "errmsg '%s'", bfs_gpu_errmsg(ld));
	CHECK(bfs_gpu_next(ld, &b) == BFS_E_FORMAT, "sticky");
	bfs_gpu_close(ld);
	return 0;
}

int main()
{
	struct T {
		const char *name;
		int (*fn)();
	} tests[] = {
		{"device_bytes_equal_file_bytes_for_every_batch",
		 test_device_bytes_equal_file_bytes_for_every_batch},
		{"normalize_kernel_matches_cpu_reference_bit_for_bit",
		 test_normalize_kernel_matches_cpu_reference_bit_for_bit},
		{"loader_normalizes_to_nchw_like_the_reference",
		 test_loader_normalizes_to_nchw_like_the_reference},
		{"upload_of_next_batch_overlaps_work_on_current",
		 test_upload_of_next_batch_overlaps_work_on_current},
		{"ring_refuses_overholding_and_bad_releases",
		 test_ring_refuses_overholding_and_bad_releases},
		{"reader_error_comes_after_the_good_batches",
		 test_reader_error_comes_after_the_good_batches},
		{"device_bytes_equal_file_bytes_for_float16_and_nchw",
		 test_device_bytes_equal_file_bytes_for_float16_and_nchw},
		{"normalize_kernel_matches_host_reference_for_every_dtype_and_layout",
		 test_normalize_kernel_matches_host_reference_for_every_dtype_and_layout},
		{"loader_delivers_every_dtype_and_layout_as_the_header_says",
		 test_loader_delivers_every_dtype_and_layout_as_the_header_says},
	};
	char errmsg[BFS_GPU_ERRMSG_MAX] = "";
	char dtmp[] = "/tmp/bfs-gpu-dev-XXXXXX";

	if (bfs_gpu_device_count(NULL, errmsg) != 0) {
		for (auto &t : tests) {
			printf("skip %s: no CUDA device (%s)\n", t.name, errmsg);
			skipped++;
		}
		printf("0 passed, 0 failed, %d skipped\n", skipped);
		return 0;
	}
	if (!mkdtemp(dtmp)) {
		perror("mkdtemp");
		return 2;
	}
	tmp = dtmp;
	{
		cudaDeviceProp p;
		cudaGetDeviceProperties(&p, 0);
		printf("# device 0: %s (sm_%d%d)\n", p.name, p.major, p.minor);
	}
	for (auto &t : tests)
		run(t.name, t.fn);
	std::string rm = "rm -rf '" + tmp + "'";
	if (system(rm.c_str()) != 0)
		fprintf(stderr, "could not remove %s\n", tmp.c_str());
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
