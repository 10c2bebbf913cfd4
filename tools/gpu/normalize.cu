/*
 * normalize.cu - the GPU normalization kernel of batchfs_gpu.h: uint8 or
 * float32 NHWC batches to float32 (x/255 - mean)/std, NHWC or NCHW.
 *
 * Memory-bound: 1 (or 4) bytes in, 4 bytes out per element.  The NHWC path
 * moves 4 elements per thread (one 4-byte or 16-byte load, one 16-byte
 * store); the NCHW path maps one thread to one pixel, so that each channel
 * plane is written coalesced.  Arithmetic is IEEE float32, op by op
 * (__fdiv_rn, __fsub_rn: no contraction), so a NumPy float32 reference
 * (x.astype(f4) / f4(255) - mean) / std matches bit for bit.
 */
#include "tools/gpu/batchfs_gpu.h"

#include <cuda_runtime.h>

#include <errno.h>
#include <stdint.h>

namespace {

struct params {
	float mean[BFS_GPU_MAX_CHANNELS];
	float stdv[BFS_GPU_MAX_CHANNELS];
	int c;
	int with_ms;
};

template <bool U8>
__device__ __forceinline__ float cvt(float x, const params &p, int ch)
{
	float v = U8 ? __fdiv_rn(x, 255.0f) : x;

	if (p.with_ms)
		v = __fdiv_rn(__fsub_rn(v, p.mean[ch]), p.stdv[ch]);
	return v;
}

/* NHWC -> NHWC, 4 elements per thread; total % 4 == 0, aligned. */
template <bool U8>
__global__ void nhwc4(const void *__restrict__ src, float4 *__restrict__ dst,
		      int64_t quads, params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < quads; i += stride) {
		float x[4];
		float4 o;
		int ch = (int)((i * 4) % p.c);

		if (U8) {
			uchar4 v = ((const uchar4 *)src)[i];
			x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
		} else {
			float4 v = ((const float4 *)src)[i];
			x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
		}
#pragma unroll
		for (int k = 0; k < 4; k++) {
			x[k] = cvt<U8>(x[k], p, ch);
			ch = ch + 1 == p.c ? 0 : ch + 1;
		}
		o.x = x[0]; o.y = x[1]; o.z = x[2]; o.w = x[3];
		dst[i] = o;
	}
}

/* NHWC -> NHWC, one element per thread: any size or alignment. */
template <bool U8>
__global__ void nhwc1(const void *__restrict__ src, float *__restrict__ dst,
		      int64_t total, params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < total; i += stride) {
		float x = U8 ? (float)((const unsigned char *)src)[i]
			     : ((const float *)src)[i];
		dst[i] = cvt<U8>(x, p, (int)(i % p.c));
	}
}

/* NHWC -> NCHW, one pixel per thread. */
template <bool U8>
__global__ void nchw(const void *__restrict__ src, float *__restrict__ dst,
		     int64_t pixels, int64_t hw, params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < pixels; i += stride) {
		int64_t n = i / hw, r = i - n * hw;

		for (int ch = 0; ch < p.c; ch++) {
			int64_t j = i * p.c + ch;
			float x = U8 ? (float)((const unsigned char *)src)[j]
				     : ((const float *)src)[j];
			dst[(n * p.c + ch) * hw + r] = cvt<U8>(x, p, ch);
		}
	}
}

unsigned int grid_for(int64_t work)
{
	int64_t g = (work + 255) / 256;

	if (g < 1)
		g = 1;
	if (g > (1 << 20))  /* grid-stride loops cover the rest */
		g = 1 << 20;
	return (unsigned int)g;
}

}  // namespace

extern "C" int bfs_gpu_normalize(const void *src, int src_dtype, float *dst,
				 int64_t n, int64_t h, int64_t w, int64_t c,
				 const float *mean, const float *std, int nchw_out,
				 void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	bool u8 = src_dtype == BFS_GPU_UINT8;
	int64_t pixels, total;
	params p = {};

	if (!src || !dst || n < 0 || h < 0 || w < 0 || c < 1 ||
	    c > BFS_GPU_MAX_CHANNELS || (!mean) != (!std) ||
	    (src_dtype != BFS_GPU_UINT8 && src_dtype != BFS_GPU_FLOAT32))
		return -EINVAL;
	p.c = (int)c;
	p.with_ms = mean != nullptr;
	for (int k = 0; mean && k < c; k++) {
		if (std[k] == 0.0f)
			return -EINVAL;
		p.mean[k] = mean[k];
		p.stdv[k] = std[k];
	}
	pixels = n * h * w;
	total = pixels * c;
	if (total == 0)
		return 0;

	if (nchw_out) {
		if (u8)
			nchw<true><<<grid_for(pixels), 256, 0, st>>>(
				src, dst, pixels, h * w, p);
		else
			nchw<false><<<grid_for(pixels), 256, 0, st>>>(
				src, dst, pixels, h * w, p);
	} else if (total % 4 == 0 && (uintptr_t)dst % 16 == 0 &&
		   (uintptr_t)src % (u8 ? 4 : 16) == 0) {
		if (u8)
			nhwc4<true><<<grid_for(total / 4), 256, 0, st>>>(
				src, (float4 *)dst, total / 4, p);
		else
			nhwc4<false><<<grid_for(total / 4), 256, 0, st>>>(
				src, (float4 *)dst, total / 4, p);
	} else {
		if (u8)
			nhwc1<true><<<grid_for(total), 256, 0, st>>>(
				src, dst, total, p);
		else
			nhwc1<false><<<grid_for(total), 256, 0, st>>>(
				src, dst, total, p);
	}
	return cudaGetLastError() == cudaSuccess ? 0 : BFS_GPU_E_CUDA;
}
