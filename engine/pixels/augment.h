/*
 * augment.h - training-time post-processing after the cache: the random
 * flip and crop drawn per (seed, epoch, sample), and the pass that turns a
 * cached stage-1 sample into the output sample (crop, flip, normalize,
 * dtype, NHWC or NCHW layout).
 *
 * The stage-1 sample (what the cache holds, one per source sample) is
 * src_h x src_w x 3, HWC, packed: float32 = resized value / 255 (so in
 * [0, 1]), or uint8 = the resized value rounded.  Nothing here depends on
 * the epoch except through bfs_aug, so the cache stays valid across epochs.
 */
#ifndef BFS_AUGMENT_H
#define BFS_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/types.h"

/* One sample's augmentation: mirror left-right, and the top-left corner of
 * the h x w window in the src_h x src_w stage-1 sample. */
typedef struct {
	int flip;   /* 0 or 1 */
	int x0, y0; /* 0 <= x0 <= src_w - w, 0 <= y0 <= src_h - h */
} bfs_aug;

/*
 * Draw the augmentation of source sample `sample` (its global index in the
 * dataset, not its position in an epoch or a rank, so a sample gets the
 * same draw whatever the world size) in epoch `epoch` under `seed`:
 *   flip: 1 with probability exactly 1/2 when do_flip, else 0;
 *   x0:   uniform on the integers 0..src_w - w when do_crop, each value with
 *         probability exactly 1/(src_w - w + 1); else (src_w - w) / 2,
 *         rounded down (the center);
 *   y0:   the same on 0..src_h - h, independent of x0 and of flip.
 * "Exactly" is relative to a uniform 64-bit source: the bits come from a
 * counter-based hash (splitmix64's finalizer over (seed, epoch, sample,
 * draw counter)), no state and no rand(); ranges are mapped by Lemire's
 * multiply-shift with rejection, so there is no modulo bias.  Draws for
 * different samples or epochs are unrelated; the same arguments always give
 * the same draw, on any machine.  If a window side exceeds the source side
 * (bfs_post_check rejects that), the offset on that axis is 0.
 * out: written, never NULL.  Pure; any thread.
 */
void bfs_aug_draw(uint64_t seed, uint64_t epoch, uint64_t sample, int src_h, int src_w,
                  int h, int w, int do_flip, int do_crop, bfs_aug *out);

/* How bfs_post_apply turns a stage-1 sample into an output sample. */
typedef struct {
	int src_h, src_w;    /* stage-1 sample size */
	bfs_dtype src_dtype; /* FLOAT32 (value / 255) or UINT8 */
	int h, w;            /* output size, <= the stage-1 size */
	bfs_dtype out_dtype; /* FLOAT32, FLOAT16 (from float32 src) or UINT8 (from uint8) */
	int nchw;            /* 0: h x w x 3 (NHWC); 1: 3 x h x w (NCHW) */
	int normalize;       /* nonzero: out = (x - mean[c]) / std[c] */
	float mean[3], std[3]; /* per channel R, G, B, on the [0, 1] scale */
} bfs_post_opts;

/* Largest stage-1 or output side bfs_post_check accepts. */
#define BFS_POST_MAX_DIM (1 << 24)

/*
 * Validate o: sizes in 1..BFS_POST_MAX_DIM with h <= src_h and w <= src_w;
 * known dtypes; UINT8 output needs UINT8 src and no normalize; FLOAT32 and
 * FLOAT16 outputs need FLOAT32 src; with normalize, finite means and finite
 * std > 0.  Returns 0, or -EINVAL with the reason in errmsg
 * (BFS_ERRMSG_MAX bytes, may be NULL).  Pure; any thread.
 */
int bfs_post_check(const bfs_post_opts *o, char *errmsg);

/* Bytes of one output sample, h * w * 3 * dtype size; 0 for sizes < 1. */
size_t bfs_post_out_bytes(const bfs_post_opts *o);

/*
 * Write the output sample for stage-1 sample src into dst:
 *   1. crop: the h x w window at (a->y0, a->x0) (each clamped into range);
 *   2. flip: mirror each row left-right when a->flip;
 *   3. normalize (float32 src only): out = (x - mean[c]) / std[c] in float32,
 *      a subtraction then a true division, as torchvision's Normalize on a
 *      float32 tensor ToTensor made (x in [0, 1]);
 *   4. convert: FLOAT32 as is; FLOAT16 via bfs_resize_f16_n (round to
 *      nearest even, numpy's astype(np.float16)); UINT8 copied;
 *   5. lay out: NHWC ([y][x][c]) or NCHW ([c][y][x]).
 * o: valid (bfs_post_check returned 0); otherwise the behaviour is
 * undefined.  a: from bfs_aug_draw with the same sizes, not NULL.
 * src: src_h * src_w * 3 elements of src_dtype, HWC, packed.  dst:
 * bfs_post_out_bytes(o) bytes, any alignment, must not overlap src.
 * Allocates nothing (a few KiB of stack).  Pure; any thread.
 */
void bfs_post_apply(const bfs_post_opts *o, const bfs_aug *a, const void *src, void *dst);

#endif
