/*
 * normalize.cu - the GPU normalization kernel of batchfs_gpu.h: uint8,
 * float16 or float32 batches, NHWC or NCHW, to float32 (x/255 - mean)/std
 * (no /255 for float input), NHWC or NCHW.
 *
 * Memory-bound: 1, 2 or 4 bytes in, 4 bytes out per element.  Same layout
 * in and out is an elementwise map that moves 4 elements per thread (one 4-,
 * 8- or 16-byte load, one 16-byte store) when sizes and alignment allow,
 * else one.  A layout change maps one thread to one pixel, so that the
 * channel planes (written for NHWC -> NCHW, read for NCHW -> NHWC) are
 * accessed coalesced.  Arithmetic is IEEE float32, op by op (__fdiv_rn,
 * __fsub_rn: no contraction) after an exact widening of the input, so the
 * host reference (tools/gpu/convert.c) and NumPy's
 * (x.astype(f4) / f4(255) - mean) / std match bit for bit.
 */
#include "tools/gpu/batchfs_gpu.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <stdint.h>

namespace {

/* Source element kinds, as template arguments. */
enum { K_U8, K_F16, K_F32 };

struct params {
	float mean[BFS_GPU_MAX_CHANNELS];
	float stdv[BFS_GPU_MAX_CHANNELS];
	int c;
	int with_ms;
};

template <int K>
__device__ __forceinline__ float cvt(float x, const params &p, int ch)
{
	float v = K == K_U8 ? __fdiv_rn(x, 255.0f) : x;

	if (p.with_ms)
		v = __fdiv_rn(__fsub_rn(v, p.mean[ch]), p.stdv[ch]);
	return v;
}

template <int K>
__device__ __forceinline__ float load1(const void *src, int64_t i)
{
	if (K == K_U8)
		return (float)((const unsigned char *)src)[i];
	if (K == K_F16)
		return __half2float(((const __half *)src)[i]);
	return ((const float *)src)[i];
}

/* Elements 4q .. 4q+3; src aligned to 4 elements. */
template <int K>
__device__ __forceinline__ void load4(const void *src, int64_t q, float x[4])
{
	if (K == K_U8) {
		uchar4 v = ((const uchar4 *)src)[q];
		x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
	} else if (K == K_F16) {
		uint2 v = ((const uint2 *)src)[q];
		__half2 a = *(const __half2 *)&v.x, b = *(const __half2 *)&v.y;
		float2 fa = __half22float2(a), fb = __half22float2(b);
		x[0] = fa.x; x[1] = fa.y; x[2] = fb.x; x[3] = fb.y;
	} else {
		float4 v = ((const float4 *)src)[q];
		x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
	}
}

/* Same layout in and out, 4 elements per thread; total % 4 == 0, aligned.
 * NHWC: the channel cycles along the elements.  NCHW: hw % 4 == 0, so the
 * 4 elements share one channel plane. */
template <int K, bool CHW>
__global__ void same4(const void *__restrict__ src, float4 *__restrict__ dst,
		      int64_t quads, int64_t hw, params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < quads; i += stride) {
		float x[4];
		float4 o;
		int ch = CHW ? (int)((i * 4 / hw) % p.c) : (int)((i * 4) % p.c);

		load4<K>(src, i, x);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			x[k] = cvt<K>(x[k], p, ch);
			if (!CHW)
				ch = ch + 1 == p.c ? 0 : ch + 1;
		}
		o.x = x[0]; o.y = x[1]; o.z = x[2]; o.w = x[3];
		dst[i] = o;
	}
}

/* Same layout in and out, one element per thread: any size or alignment. */
template <int K, bool CHW>
__global__ void same1(const void *__restrict__ src, float *__restrict__ dst,
		      int64_t total, int64_t hw, params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < total; i += stride) {
		int ch = CHW ? (int)((i / hw) % p.c) : (int)(i % p.c);

		dst[i] = cvt<K>(load1<K>(src, i), p, ch);
	}
}

/* NHWC -> NCHW, one pixel per thread. */
template <int K>
__global__ void hwc_to_chw(const void *__restrict__ src,
			   float *__restrict__ dst, int64_t pixels, int64_t hw,
			   params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < pixels; i += stride) {
		int64_t n = i / hw, r = i - n * hw;

		for (int ch = 0; ch < p.c; ch++)
			dst[(n * p.c + ch) * hw + r] =
				cvt<K>(load1<K>(src, i * p.c + ch), p, ch);
	}
}

/* NCHW -> NHWC, one pixel per thread. */
template <int K>
__global__ void chw_to_hwc(const void *__restrict__ src,
			   float *__restrict__ dst, int64_t pixels, int64_t hw,
			   params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (; i < pixels; i += stride) {
		int64_t n = i / hw, r = i - n * hw;

		for (int ch = 0; ch < p.c; ch++)
			dst[i * p.c + ch] = cvt<K>(
				load1<K>(src, (n * p.c + ch) * hw + r), p, ch);
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

template <int K>
void launch(const void *src, float *dst, int64_t pixels, int64_t hw,
	    int64_t total, int src_nchw, int dst_nchw, const params &p,
	    cudaStream_t st)
{
	const size_t esize = K == K_U8 ? 1 : K == K_F16 ? 2 : 4;
	bool vec = total % 4 == 0 && (uintptr_t)dst % 16 == 0 &&
		   (uintptr_t)src % (4 * esize) == 0;

	if (src_nchw != dst_nchw) {
		if (dst_nchw)
			hwc_to_chw<K><<<grid_for(pixels), 256, 0, st>>>(
				src, dst, pixels, hw, p);
		else
			chw_to_hwc<K><<<grid_for(pixels), 256, 0, st>>>(
				src, dst, pixels, hw, p);
	} else if (src_nchw) {
		if (vec && hw % 4 == 0)
			same4<K, true><<<grid_for(total / 4), 256, 0, st>>>(
				src, (float4 *)dst, total / 4, hw, p);
		else
			same1<K, true><<<grid_for(total), 256, 0, st>>>(
				src, dst, total, hw, p);
	} else {
		if (vec)
			same4<K, false><<<grid_for(total / 4), 256, 0, st>>>(
				src, (float4 *)dst, total / 4, hw, p);
		else
			same1<K, false><<<grid_for(total), 256, 0, st>>>(
				src, dst, total, hw, p);
	}
}

}  // namespace

extern "C" int bfs_gpu_normalize(const void *src, int src_dtype, float *dst,
				 int64_t n, int64_t h, int64_t w, int64_t c,
				 const float *mean, const float *std, int layout,
				 void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	int src_nchw = !!(layout & BFS_GPU_NORM_SRC_NCHW);
	int dst_nchw = !!(layout & BFS_GPU_NORM_DST_NCHW);
	int64_t pixels, total;
	params p = {};

	if (!src || !dst || n < 0 || h < 0 || w < 0 || c < 1 ||
	    c > BFS_GPU_MAX_CHANNELS || (!mean) != (!std) ||
	    (layout & ~(BFS_GPU_NORM_SRC_NCHW | BFS_GPU_NORM_DST_NCHW)) ||
	    (src_dtype != BFS_GPU_UINT8 && src_dtype != BFS_GPU_FLOAT16 &&
	     src_dtype != BFS_GPU_FLOAT32))
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

	if (src_dtype == BFS_GPU_UINT8)
		launch<K_U8>(src, dst, pixels, h * w, total, src_nchw, dst_nchw,
			     p, st);
	else if (src_dtype == BFS_GPU_FLOAT16)
		launch<K_F16>(src, dst, pixels, h * w, total, src_nchw,
			      dst_nchw, p, st);
	else
		launch<K_F32>(src, dst, pixels, h * w, total, src_nchw,
			      dst_nchw, p, st);
	return cudaGetLastError() == cudaSuccess ? 0 : BFS_GPU_E_CUDA;
}
