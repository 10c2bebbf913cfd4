/*
 * cli.c - build/batchfs-gpu: measure the GPU companion on a folder of batch
 * files.  `bench` streams every batch through the loader (H2D GB/s of its
 * uploads, batches/s end to end) and, in the same run, times raw pinned
 * cudaMemcpyAsync of the same sizes as the baseline.
 */
#include "tools/gpu/batchfs_gpu.h"

#include <cuda_runtime_api.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *prog = "batchfs-gpu";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s bench EPOCH_DIR [--depth N] [--readers N (0: min(depth,4))] [--passes N]\n"
		"                  [--normalize] [--nchw|--nhwc] [--files-nhwc|--files-nchw]\n"
		"                  [--io pread|mmap] [--device N]\n"
		"  Streams every batch-*.npy of EPOCH_DIR (uint8, float16 or float32,\n"
		"  NHWC or NCHW) to the GPU through the loader and reports its H2D GB/s\n"
		"  against raw pinned cudaMemcpyAsync of the same sizes, and batches/s\n"
		"  end to end.  --normalize delivers float32 in the files' layout, or\n"
		"  in the one --nchw/--nhwc names; --files-* says the files' layout\n"
		"  where their shape does not (see batchfs_gpu.h).\n", prog);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(call)                                                            \
	do {                                                                \
		cudaError_t e_ = (call);                                    \
		if (e_ != cudaSuccess) {                                    \
			fprintf(stderr, "%s: %s: %s\n", prog, #call,        \
				cudaGetErrorString(e_));                    \
			goto out;                                           \
		}                                                           \
	} while (0)

struct span {
	double a, b;  /* ms after the base event */
};

static int cmp_span(const void *x, const void *y)
{
	double d = ((const struct span *)x)->a - ((const struct span *)y)->a;

	return (d > 0) - (d < 0);
}

/* Length of the union of the intervals: time the copy engine spent on the
 * loader's uploads, counting overlapping uploads (several readers) once. */
static double union_ms(struct span *v, int64_t n)
{
	double total = 0, a, b;
	int64_t i;

	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_span);
	a = v[0].a;
	b = v[0].b;
	for (i = 1; i < n; i++) {
		if (v[i].a > b) {
			total += b - a;
			a = v[i].a;
		}
		if (v[i].b > b)
			b = v[i].b;
	}
	return total + b - a;
}

static const char *dtype_name(int d)
{
	return d == BFS_GPU_UINT8 ? "uint8" : d == BFS_GPU_FLOAT16 ? "float16"
	       : d == BFS_GPU_FLOAT32 ? "float32" : "int64";
}

/* Time raw pinned H2D copies of the given sizes (images, labels pairs) with
 * events around each pair, as the loader's windows are timed. */
static int raw_baseline(const uint64_t *isz, const uint64_t *lsz, int64_t n,
			uint64_t max_i, uint64_t max_l, double *ms_out,
			double *stream_ms_out)
{
	unsigned char *h = NULL;
	void *d = NULL, *dl = NULL;
	cudaStream_t st = NULL;
	cudaEvent_t a = NULL, b = NULL, t0 = NULL, t1 = NULL;
	double total = 0;
	float ms;
	int64_t i;
	int rc = -1;

	CK(cudaHostAlloc((void **)&h, max_i + max_l + 4096,
			 cudaHostAllocDefault));
	memset(h, 0x5a, max_i + max_l + 4096);  /* fault every page in */
	CK(cudaMalloc(&d, max_i));
	CK(cudaMalloc(&dl, max_l > 0 ? max_l : 1));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaEventCreate(&t0));
	CK(cudaEventCreate(&t1));
	/* warm-up */
	CK(cudaMemcpyAsync(d, h, max_i, cudaMemcpyHostToDevice, st));
	CK(cudaStreamSynchronize(st));
	for (i = 0; i < n; i++) {
		CK(cudaEventRecord(a, st));
		CK(cudaMemcpyAsync(d, h, isz[i], cudaMemcpyHostToDevice, st));
		CK(cudaMemcpyAsync(dl, h + max_i, lsz[i],
				   cudaMemcpyHostToDevice, st));
		CK(cudaEventRecord(b, st));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		total += ms;
	}
	*ms_out = total;
	/* the same copies back to back in one window */
	CK(cudaEventRecord(t0, st));
	for (i = 0; i < n; i++) {
		CK(cudaMemcpyAsync(d, h, isz[i], cudaMemcpyHostToDevice, st));
		CK(cudaMemcpyAsync(dl, h + max_i, lsz[i],
				   cudaMemcpyHostToDevice, st));
	}
	CK(cudaEventRecord(t1, st));
	CK(cudaEventSynchronize(t1));
	CK(cudaEventElapsedTime(&ms, t0, t1));
	*stream_ms_out = ms;
	rc = 0;
out:
	if (a) cudaEventDestroy(a);
	if (b) cudaEventDestroy(b);
	if (t0) cudaEventDestroy(t0);
	if (t1) cudaEventDestroy(t1);
	if (st) cudaStreamDestroy(st);
	cudaFree(d);
	cudaFree(dl);
	cudaFreeHost(h);
	return rc;
}

static int bench(int argc, char **argv)
{
	bfs_gpu_opts o;
	bfs_gpu_loader *ld = NULL;
	bfs_gpu_batch b;
	char errmsg[BFS_GPU_ERRMSG_MAX] = "";
	const char *dir = NULL;
	struct cudaDeviceProp prop;
	cudaStream_t st = NULL;
	uint64_t *isz = NULL, *lsz = NULL, max_i = 0, max_l = 0;
	struct span *spans = NULL;
	cudaEvent_t base = NULL;
	double kernel_ms = 0, busy_ms;
	uint64_t bytes = 0, images = 0;
	int64_t n = 0, cap = 0;
	double copy_ms = 0, raw_ms = 0, raw_stream_ms = 0;
	double t_open, t_first, t_end;
	int i, err, ndev, rc = 1, ex_dtype = -1, ex_nchw = 0;
	int64_t ex_shape[4] = {0};

	bfs_gpu_opts_init(&o);
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--normalize")) {
			o.flags |= BFS_GPU_NORMALIZE;
		} else if (!strcmp(a, "--nchw")) {
			o.flags |= BFS_GPU_NORMALIZE | BFS_GPU_NCHW;
		} else if (!strcmp(a, "--nhwc")) {
			o.flags |= BFS_GPU_NORMALIZE | BFS_GPU_NHWC;
		} else if (!strcmp(a, "--files-nhwc")) {
			o.flags |= BFS_GPU_FILES_NHWC;
		} else if (!strcmp(a, "--files-nchw")) {
			o.flags |= BFS_GPU_FILES_NCHW;
		} else if (i + 1 < argc && (!strcmp(a, "--depth") ||
			   !strcmp(a, "--readers") || !strcmp(a, "--passes") ||
			   !strcmp(a, "--device") || !strcmp(a, "--io"))) {
			const char *v = argv[++i];
			char *end;
			long x = strtol(v, &end, 10);

			if (!strcmp(a, "--io")) {
				if (!strcmp(v, "pread"))
					o.io = BFS_GPU_IO_PREAD;
				else if (!strcmp(v, "mmap"))
					o.io = BFS_GPU_IO_MMAP;
				else
					goto bad;
				continue;
			}
			if (*v == '\0' || *end != '\0')
				goto bad;
			if (!strcmp(a, "--depth")) o.depth = (int)x;
			else if (!strcmp(a, "--readers")) o.readers = (int)x;
			else if (!strcmp(a, "--passes")) o.passes = (int)x;
			else o.device = (int)x;
		} else if (a[0] != '-' && !dir) {
			dir = a;
		} else {
bad:
			fprintf(stderr, "%s: bad argument '%s'\n", prog, a);
			usage(stderr);
			return 2;
		}
	}
	if (!dir) {
		usage(stderr);
		return 2;
	}

	err = bfs_gpu_device_count(&ndev, errmsg);
	if (err) {
		fprintf(stderr, "%s: no CUDA device: %s\n", prog, errmsg);
		return 1;
	}
	if (o.device < 0 || o.device >= ndev ||
	    cudaGetDeviceProperties(&prop, o.device) != cudaSuccess ||
	    cudaSetDevice(o.device) != cudaSuccess) {
		fprintf(stderr, "%s: no CUDA device %d (this machine has %d)\n",
			prog, o.device, ndev);
		return 1;
	}
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&base));
	CK(cudaEventRecord(base, st));
	CK(cudaEventSynchronize(base));
	o.stream = st;
	o.flags |= BFS_GPU_TIMING;

	t_open = now_s();
	err = bfs_gpu_open(dir, &o, &ld, errmsg);
	if (err) {
		fprintf(stderr, "%s: %s: %s\n", prog, bfs_gpu_strerror(err),
			errmsg);
		goto out;
	}
	t_first = now_s();
	bfs_gpu_max_bytes(ld, &max_i, &max_l);
	while ((err = bfs_gpu_next(ld, &b)) == 0) {
		float t0, t1, t2;

		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			isz = realloc(isz, cap * sizeof(*isz));
			lsz = realloc(lsz, cap * sizeof(*lsz));
			spans = realloc(spans, cap * sizeof(*spans));
			if (!isz || !lsz || !spans) {
				fprintf(stderr, "%s: out of memory\n", prog);
				goto out;
			}
		}
		/* read this upload's timestamps before its slot is reused */
		CK(cudaEventSynchronize((cudaEvent_t)b.ready));
		CK(cudaEventElapsedTime(&t0, base, (cudaEvent_t)b.copy_start));
		CK(cudaEventElapsedTime(&t1, base, (cudaEvent_t)b.copy_end));
		CK(cudaEventElapsedTime(&t2, base, (cudaEvent_t)b.ready));
		spans[n].a = t0;
		spans[n].b = t1;
		copy_ms += t1 - t0;
		kernel_ms += t2 - t1;
		isz[n] = b.upload_bytes;  /* what crossed PCIe */
		lsz[n] = b.labels_bytes;
		bytes += isz[n] + lsz[n];
		images += (uint64_t)b.labels_len;
		if (ex_dtype < 0) {
			ex_dtype = b.dtype;
			ex_nchw = b.nchw;
			memcpy(ex_shape, b.shape, sizeof(ex_shape));
		}
		n++;
		err = bfs_gpu_release(ld, &b);
		if (err) {
			fprintf(stderr, "%s: release: %s\n", prog,
				bfs_gpu_strerror(err));
			goto out;
		}
	}
	if (err != BFS_GPU_E_END) {
		fprintf(stderr, "%s: %s: %s\n", prog, bfs_gpu_strerror(err),
			bfs_gpu_errmsg(ld));
		goto out;
	}
	CK(cudaStreamSynchronize(st));
	t_end = now_s();

	if (raw_baseline(isz, lsz, n, max_i, max_l, &raw_ms, &raw_stream_ms))
		goto out;
	busy_ms = union_ms(spans, n);

	printf("device      %s (sm_%d%d, %d SMs)\n", prop.name, prop.major,
	       prop.minor, prop.multiProcessorCount);
	printf("folder      %s: %lld batch files, %d pass(es), first batch "
	       "delivered (%lld,%lld,%lld,%lld) %s %s%s\n", dir,
	       (long long)bfs_gpu_count(ld), o.passes,
	       (long long)ex_shape[0], (long long)ex_shape[1],
	       (long long)ex_shape[2], (long long)ex_shape[3],
	       dtype_name(ex_dtype), ex_nchw ? "NCHW" : "NHWC",
	       (o.flags & BFS_GPU_NORMALIZE) ? " (normalized on GPU)" : "");
	printf("loader      depth %d, readers %d, io %s\n", o.depth,
	       o.readers ? o.readers : (o.depth < 4 ? o.depth : 4),
	       o.io == BFS_GPU_IO_MMAP ? "mmap+cudaHostRegister"
				       : "pread into pinned");
	printf("helper H2D  %.2f GB/s  (%lld uploads, %.3f GB over %.1f ms of "
	       "copy-engine time: the union of the event-timed upload windows; "
	       "per upload %.2f GB/s)\n", bytes / (busy_ms * 1e6), (long long)n,
	       bytes / 1e9, busy_ms, bytes / (copy_ms * 1e6));
	printf("raw H2D     %.2f GB/s  (pinned cudaMemcpyAsync, same sizes, "
	       "same timing; back to back: %.2f GB/s)\n",
	       bytes / (raw_ms * 1e6), bytes / (raw_stream_ms * 1e6));
	printf("ratio       %.3f  (helper / raw)\n", raw_ms / busy_ms);
	if (o.flags & BFS_GPU_NORMALIZE)
		printf("normalize   %.3f ms per batch on the loader's stream\n",
		       kernel_ms / (n ? n : 1));
	printf("end to end  %.1f batches/s, %.0f images/s, %.2f GB/s of "
	       "batch data (%.3f s from first next; open took %.3f s)\n",
	       n / (t_end - t_first), images / (t_end - t_first),
	       bytes / ((t_end - t_first) * 1e9), t_end - t_first,
	       t_first - t_open);
	printf("RESULT helper_gbps=%.3f raw_gbps=%.3f ratio=%.3f "
	       "batches_per_s=%.2f e2e_gbps=%.3f\n",
	       bytes / (busy_ms * 1e6), bytes / (raw_ms * 1e6),
	       raw_ms / busy_ms, n / (t_end - t_first),
	       bytes / ((t_end - t_first) * 1e9));
	rc = 0;
out:
	bfs_gpu_close(ld);
	if (base)
		cudaEventDestroy(base);
	if (st)
		cudaStreamDestroy(st);
	free(spans);
	free(isz);
	free(lsz);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "bench"))
		return bench(argc - 2, argv + 2);
	usage(stderr);
	return 2;
}
