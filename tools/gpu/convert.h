/*
 * convert.h - internal to tools/gpu: what the loader delivers for one batch
 * file (dtype, layout, shape, bytes) under the opts flags, and the host
 * reference of the bfs_gpu_normalize kernel.  No CUDA here, so the rules of
 * batchfs_gpu.h's "What a batch is delivered as" table run in CI
 * (tests/gpu/test_batchdir.c, tests/gpu/hostref.c), and the device test
 * compares the kernel with the same reference.  Prefix bfs__gpu_.
 *
 * Pure functions over caller-owned memory; no allocation.  Any thread.
 */
#ifndef BFS_GPU_CONVERT_H
#define BFS_GPU_CONVERT_H

#include "tools/gpu/batchdir.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
	int dtype;            /* bfs_gpu_dtype delivered */
	int nchw;             /* 1: delivered (B,C,H,W) */
	int64_t shape[4];     /* delivered shape */
	int normalize;        /* 1: run bfs_gpu_normalize */
	int layout;           /* its BFS_GPU_NORM_* bits (with normalize) */
	uint64_t bytes;       /* delivered images bytes */
} bfs__gpu_plan;

/*
 * Fill *p with what a batch whose images header is *h (from
 * bfs__gpu_check_images_in) is delivered as under bfs_gpu_opts.flags
 * `flags` (already validated: NCHW/NHWC only with NORMALIZE, not both).
 * Without NORMALIZE: the file's dtype, layout and bytes.  With it: float32,
 * the file's layout unless BFS_GPU_NCHW or BFS_GPU_NHWC asks otherwise.
 */
void bfs__gpu_plan_batch(const bfs__gpu_hdr *h, int flags, bfs__gpu_plan *p);

/* The element size of a bfs_gpu_dtype in bytes (8 for INT64); 0 if unknown. */
size_t bfs__gpu_dtype_size(int dtype);

/* IEEE half (bits) to float, exactly (what __half2float and numpy's
 * astype(np.float32) give; NaN payloads kept). */
float bfs__gpu_half_to_float(uint16_t h);

/*
 * The host reference of bfs_gpu_normalize: the same arguments and the same
 * result bit for bit, on host memory, one IEEE float32 operation at a time.
 * Errors: -EINVAL as bfs_gpu_normalize.
 */
int bfs__gpu_normalize_host(const void *src, int src_dtype, float *dst,
			    int64_t n, int64_t h, int64_t w, int64_t c,
			    const float *mean, const float *std, int layout);

#endif
