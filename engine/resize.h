/*
 * resize.h - bilinear resize of packed RGB8 to float32 or uint8 HWC, bit-exact
 * with TensorFlow's ResizeBilinear (half_pixel_centers=True, antialias off),
 * the kernel behind tf.image.resize(img, [H, W]) in the seed pipeline.
 *
 * Arithmetic, all in IEEE float32 without FMA contraction (the Makefile builds
 * resize.o with -ffp-contract=off, and resize.c asks for it by pragma too,
 * which gcc always honours and clang honours unless -ffp-contract=fast), in
 * the default rounding mode (round to nearest, ties to even):
 *   scale  = (float)in_size / (float)out_size
 *   in     = ((float)i + 0.5f) * scale - 0.5f
 *   lower  = max(floor(in), 0);  upper = min(ceil(in), in_size - 1)
 *   lerp   = in - floor(in)
 *   top    = tl + (tr - tl) * x_lerp;  bottom = bl + (br - bl) * x_lerp
 *   value  = top + (bottom - top) * y_lerp
 * Images smaller than the target are upscaled with the same formula.
 */
#ifndef BFS_RESIZE_H
#define BFS_RESIZE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/types.h"

/* Largest width or height bfs_resize_rgb accepts, source or destination. */
#define BFS_RESIZE_MAX_DIM (1 << 24)

/*
 * Bytes of scratch bfs_resize_rgb needs to resize src_w x src_h to
 * dst_w x dst_h (it depends only on dst_w today; pass all four anyway).
 * Returns 0 when a size is outside 1..BFS_RESIZE_MAX_DIM.  Pure; any thread.
 */
size_t bfs_resize_scratch_size(int src_w, int src_h, int dst_w, int dst_h);

/*
 * Resize src (src_h rows of src_w packed RGB8 pixels, src_stride bytes from
 * one row to the next, src_stride >= 3 * src_w) into dst: dst_h * dst_w * 3
 * elements of `dtype`, tightly packed HWC.
 *   BFS_DTYPE_FLOAT32: value / 255.0f (a true division, as `/ 255.0` in TF).
 *   BFS_DTYPE_UINT8:   value rounded to nearest, ties to even (np.round,
 *                      tf.round), clamped to 0..255.
 *   BFS_DTYPE_FLOAT16: the float32 result above as IEEE binary16, rounded to
 *                      nearest even (numpy's astype(np.float16)), subnormals
 *                      included; stored as uint16_t bit patterns.
 * scratch: caller-owned, at least bfs_resize_scratch_size(...) bytes, any
 *   alignment; its contents on entry do not matter and are garbage on return.
 *   The function allocates nothing.
 * src, dst and scratch must not overlap.
 *
 * Returns 0, or -EINVAL for a NULL pointer, a size outside
 * 1..BFS_RESIZE_MAX_DIM, a short stride or an unknown dtype (dst untouched).
 * Pure function of its inputs: same bytes on every call, any thread, any
 * number of threads at once (each with its own scratch).
 */
int bfs_resize_rgb(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                   void *dst, int dst_w, int dst_h, bfs_dtype dtype, void *scratch);

#endif
