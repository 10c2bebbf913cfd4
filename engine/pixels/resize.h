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
 *
 * Also here: the center-crop mode (bfs_resize_rgb_crop, ImageNet evaluation)
 * and the float32 -> IEEE half conversion behind float16 outputs, exported
 * for the modules that write float16 after resizing (engine/pixels/augment.c).
 */
#ifndef BFS_RESIZE_H
#define BFS_RESIZE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/types.h"

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
 * number of threads at once (each with its own scratch).  The horizontal
 * pass uses AVX2 where the CPU has it and SSE2 otherwise, with the same
 * bits; BATCHFS_RESIZE_NO_AVX2 set in the environment keeps it on SSE2, and
 * BFS_RESIZE_STREAM below off (for tests).
 */
int bfs_resize_rgb(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                   void *dst, int dst_w, int dst_h, bfs_dtype dtype, void *scratch);

/*
 * bfs_resize_rgb mirrored left-right in the same pass: output column x
 * holds, bit for bit, what bfs_resize_rgb writes to column dst_w - 1 - x
 * (a horizontal flip of its result; RandomResizedCrop's flip without a
 * second pass).  Same arguments, scratch and returns as bfs_resize_rgb.
 */
int bfs_resize_rgb_mirror(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                          void *dst, int dst_w, int dst_h, bfs_dtype dtype, void *scratch);

/* Flags of bfs_resize_rgb_flags. */
#define BFS_RESIZE_MIRROR 1u /* as bfs_resize_rgb_mirror */
/* dst is written once and read later, after other work, by someone else
 * (a batch being filled): with AVX2, float32 rows are written with
 * streaming stores, which do not fetch dst's lines into the cache (and
 * leave them out of it), fenced before the call returns.  The same bytes;
 * only where they are cached changes.  Other dtypes, or no AVX2: ignored. */
#define BFS_RESIZE_STREAM 2u

/*
 * bfs_resize_rgb with flags (BFS_RESIZE_*, ORed; 0 is bfs_resize_rgb).
 * Same arguments, scratch and returns as bfs_resize_rgb, and -EINVAL for
 * an unknown flag (dst untouched).
 */
int bfs_resize_rgb_flags(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                         void *dst, int dst_w, int dst_h, bfs_dtype dtype, unsigned flags,
                         void *scratch);

/*
 * Center-crop mode (torchvision Resize(short_side) + CenterCrop((dst_h,
 * dst_w)) geometry, TensorFlow bilinear arithmetic): the result is bit for
 * bit the dst_h x dst_w window of the image that bfs_resize_rgb would make
 * at the "resized" size below, but only the window is computed.
 *   resized size W x H (torchvision's Resize(int) sizing): the shorter
 *     source side becomes short_side, the other floor(short_side * long /
 *     short) in exact integer arithmetic; src_w <= src_h counts as portrait,
 *     so a square source gives short_side x short_side.
 *   window: top = round((H - dst_h) / 2), left = round((W - dst_w) / 2),
 *     rounding halves to even (Python's round, as torchvision's CenterCrop:
 *     an odd difference 2k+1 gives whichever of k and k+1 is even).
 * src, src_w, src_h, src_stride, dst, dtype: as bfs_resize_rgb (dst is
 *   dst_h * dst_w * 3 elements of dtype, HWC).
 * scratch: caller-owned, at least bfs_resize_crop_scratch_size(...) bytes,
 *   any alignment, garbage on return; nothing is allocated.
 * Returns 0, or -EINVAL (dst untouched) for anything bfs_resize_rgb rejects,
 * short_side outside 1..BFS_RESIZE_MAX_DIM, a resized side above it, or a
 * window that does not fit (dst_w > W or dst_h > H, i.e. short_side smaller
 * than a dst side); torchvision would pad there, batchfs refuses.
 * Pure function of its inputs; any thread, each with its own scratch.
 */
int bfs_resize_rgb_crop(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                        int short_side, void *dst, int dst_w, int dst_h, bfs_dtype dtype,
                        void *scratch);

/*
 * Bytes of scratch bfs_resize_rgb_crop needs for these sizes, or 0 when
 * bfs_resize_rgb_crop would reject them (a size out of range, or a window
 * that does not fit).  Pure; any thread.
 */
size_t bfs_resize_crop_scratch_size(int src_w, int src_h, int short_side, int dst_w,
                                    int dst_h);

/*
 * out[i] = the IEEE binary16 bits of in[i], rounded to nearest, ties to
 * even, subnormals included: numpy's in.astype(np.float16), the conversion
 * FLOAT16 outputs use.  |x| >= 65520 gives +-inf; NaN gives a quiet NaN
 * (0x7e00 | sign).  in and out must not overlap.  Pure; any thread.
 */
void bfs_resize_f16_n(const float *in, uint16_t *out, size_t n);

#endif
