/*
 * convert.c - what the GPU loader delivers for a batch and the host
 * reference of its normalize kernel (see convert.h).
 */
#include "tools/gpu/convert.h"

#include "tools/gpu/batchfs_gpu.h"

#include <errno.h>
#include <string.h>

size_t bfs__gpu_dtype_size(int dtype)
{
	switch (dtype) {
	case BFS_GPU_UINT8:   return 1;
	case BFS_GPU_FLOAT16: return 2;
	case BFS_GPU_FLOAT32: return 4;
	case BFS_GPU_INT64:   return 8;
	}
	return 0;
}

void bfs__gpu_plan_batch(const bfs__gpu_hdr *h, int flags, bfs__gpu_plan *p)
{
	int64_t elems = h->n * h->c * h->h * h->w;

	memset(p, 0, sizeof(*p));
	if (!(flags & BFS_GPU_NORMALIZE)) {
		p->dtype = h->dtype;
		p->nchw = h->nchw;
		memcpy(p->shape, h->shape, sizeof(p->shape));
		p->bytes = h->data_len;
		return;
	}
	p->normalize = 1;
	p->dtype = BFS_GPU_FLOAT32;
	p->nchw = (flags & BFS_GPU_NCHW) ? 1 : (flags & BFS_GPU_NHWC) ? 0
		  : h->nchw;
	p->layout = (p->nchw ? BFS_GPU_NORM_DST_NCHW : 0) |
		    (h->nchw ? BFS_GPU_NORM_SRC_NCHW : 0);
	p->shape[0] = h->n;
	p->shape[1] = p->nchw ? h->c : h->h;
	p->shape[2] = p->nchw ? h->h : h->w;
	p->shape[3] = p->nchw ? h->w : h->c;
	p->bytes = (uint64_t)elems * 4;
}

float bfs__gpu_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
	float f;

	if (exp == 0x1f) {          /* inf, NaN */
		bits = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) {      /* normal: rebias 15 -> 127 */
		bits = sign | ((exp + 112u) << 23) | (man << 13);
	} else if (man == 0) {      /* +-0 */
		bits = sign;
	} else {                    /* subnormal: man * 2^-24, exact */
		f = (float)man * 0x1p-24f;
		memcpy(&bits, &f, 4);
		bits |= sign;
	}
	memcpy(&f, &bits, 4);
	return f;
}

static float load(const void *src, int dtype, int64_t i)
{
	switch (dtype) {
	case BFS_GPU_UINT8:
		return (float)((const unsigned char *)src)[i];
	case BFS_GPU_FLOAT16: {
		uint16_t v;

		memcpy(&v, (const unsigned char *)src + 2 * i, 2);
		return bfs__gpu_half_to_float(v);
	}
	default: {
		float v;

		memcpy(&v, (const unsigned char *)src + 4 * i, 4);
		return v;
	}
	}
}

int bfs__gpu_normalize_host(const void *src, int src_dtype, float *dst,
			    int64_t n, int64_t h, int64_t w, int64_t c,
			    const float *mean, const float *std, int layout)
{
	int src_nchw = !!(layout & BFS_GPU_NORM_SRC_NCHW);
	int dst_nchw = !!(layout & BFS_GPU_NORM_DST_NCHW);
	int64_t hw = h * w, b, ch, r;
	int k;

	if (!src || !dst || n < 0 || h < 0 || w < 0 || c < 1 ||
	    c > BFS_GPU_MAX_CHANNELS || (!mean) != (!std) ||
	    (layout & ~(BFS_GPU_NORM_SRC_NCHW | BFS_GPU_NORM_DST_NCHW)) ||
	    (src_dtype != BFS_GPU_UINT8 && src_dtype != BFS_GPU_FLOAT16 &&
	     src_dtype != BFS_GPU_FLOAT32))
		return -EINVAL;
	for (k = 0; mean && k < c; k++)
		if (std[k] == 0.0f)
			return -EINVAL;
	for (b = 0; b < n; b++)
		for (r = 0; r < hw; r++)
			for (ch = 0; ch < c; ch++) {
				int64_t si = src_nchw ? (b * c + ch) * hw + r
						      : (b * hw + r) * c + ch;
				int64_t di = dst_nchw ? (b * c + ch) * hw + r
						      : (b * hw + r) * c + ch;
				/* one IEEE operation at a time, as the kernel */
				volatile float v = load(src, src_dtype, si);

				if (src_dtype == BFS_GPU_UINT8)
					v = v / 255.0f;
				if (mean) {
					volatile float d = v - mean[ch];

					v = d / std[ch];
				}
				dst[di] = v;
			}
	return 0;
}
