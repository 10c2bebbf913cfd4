/*
 * resize_pil.h - bilinear resize of packed RGB8, bit-exact with Pillow's
 * Image.resize((w, h), Image.BILINEAR) on an RGB image (src/libImaging/
 * Resample.c), the resize behind torchvision's transforms on PIL images
 * (Resize, CenterCrop after it, RandomResizedCrop's box).
 *
 * Per axis (in = the source size, out = the output size), in double:
 *   scale   = in / out;  fs = max(scale, 1);  support = 1.0 * fs
 *             (the triangle widened by the scale when shrinking: antialias)
 *   ksize   = 2 * ceil(support) + 1 coefficients per output pixel at most
 *   center  = (i + 0.5) * scale
 *   first   = max((int)(center - support + 0.5), 0)     (truncating casts)
 *   end     = min((int)(center + support + 0.5), in)
 *   w[x]    = tri((first + x - center + 0.5) / fs), tri(t) = max(1 - |t|, 0)
 *             (multiplied by 1 / fs as Pillow does), summed in order to ww,
 *             each divided by ww when ww != 0
 *   k[x]    = (int)(0.5 + w[x] * 2^22)  (PRECISION_BITS 22; w >= 0 here)
 *   value   = clip(sum(k[x] * p[first + x]) + 2^21) >> 22, clipped to 0..255
 * Two passes, each to uint8: the horizontal one first (over the source
 * rows the vertical one reads), unless the height loses more than twice as
 * many pixels as the width (in_h - out_h > 0 and in_h - out_h > 2 * (in_w -
 * out_w)): then the vertical one first.  That is Pillow 13.0's order;
 * Pillow 12 and older always ran the horizontal pass first, which gives
 * other bytes (by 1/255 here and there) exactly when the vertical-first
 * rule applies and both axes change.  A pass whose axis keeps its size is
 * skipped (its pixels pass through), as in Pillow.
 * Outputs: uint8 as is; float32 value / 255.0f (torchvision's ToTensor);
 * float16 that float32 as IEEE half, rounded to nearest even.
 *
 * Plain C (no SIMD); all arithmetic but the coefficients is integer, and
 * resize_pil.o is built with -ffp-contract=off so the coefficients round
 * as Pillow's do on x86-64 (SSE2 doubles, no FMA).
 */
#ifndef BFS_RESIZE_PIL_H
#define BFS_RESIZE_PIL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/types.h"

/*
 * Bytes of scratch bfs_resize_pil needs for src_w x src_h -> dst_w x dst_h,
 * or 0 when a size is outside 1..BFS_RESIZE_MAX_DIM (resize.h) or the
 * coefficient tables would not fit in memory.  Pure; any thread.
 */
size_t bfs_resize_pil_scratch_size(int src_w, int src_h, int dst_w, int dst_h);

/*
 * Resize src (src_h rows of src_w packed RGB8 pixels, src_stride bytes
 * apart) into dst (dst_h * dst_w * 3 elements of dtype, packed HWC), as
 * above.  flags: 0, or BFS_RESIZE_MIRROR (resize.h): column x holds what
 * column dst_w - 1 - x would (a horizontal flip of the result);
 * BFS_RESIZE_STREAM is accepted and changes nothing here.
 * scratch: at least bfs_resize_pil_scratch_size(...) bytes, any alignment,
 * garbage on return.  Nothing is allocated.  src, dst and scratch must not
 * overlap.
 * Returns 0, or -EINVAL (dst untouched) for a NULL pointer, a size out of
 * range, a short stride, an unknown dtype or flag.  Pure; any thread, each
 * with its own scratch.
 */
int bfs_resize_pil(const uint8_t *src, int src_w, int src_h, size_t src_stride, void *dst,
                   int dst_w, int dst_h, bfs_dtype dtype, unsigned flags, void *scratch);

/*
 * torchvision's Resize(short_side) + CenterCrop((dst_h, dst_w)) on a PIL
 * image: bit for bit the dst_h x dst_w window of bfs_resize_pil's result at
 * the resized size, only the window computed.  The resized size and the
 * window are those of bfs_resize_rgb_crop (resize.h): the shorter side
 * becomes short_side, the other int(short_side * long / short) (exact
 * integer floor, the same value; a square counts as portrait); top =
 * int(round((H - dst_h) / 2.0)), left likewise, halves to even (Python's
 * round).  A resized size equal to the source's on an axis skips that
 * axis's pass, as Pillow does.
 * Returns 0, or -EINVAL (dst untouched) as bfs_resize_rgb_crop.  Pure;
 * any thread, each with its own scratch.
 */
int bfs_resize_pil_crop(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                        int short_side, void *dst, int dst_w, int dst_h, bfs_dtype dtype,
                        void *scratch);

/* Scratch for bfs_resize_pil_crop, or 0 where it would refuse. */
size_t bfs_resize_pil_crop_scratch_size(int src_w, int src_h, int short_side, int dst_w,
                                        int dst_h);

#endif
