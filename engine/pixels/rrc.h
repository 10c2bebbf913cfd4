/*
 * rrc.h - RandomResizedCrop's geometry: the box drawn per (seed, epoch,
 * sample), with torchvision's semantics, and where that box lies in a
 * copy of the image reduced for the cache.
 *
 * The draw is torchvision.transforms.RandomResizedCrop.get_params, step
 * for step, with a counter-based hash in place of torch's generator:
 *   area = W * H
 *   up to 10 tries t:
 *     target = area * U(scale[0], scale[1])
 *     aspect = exp(U(log ratio[0], log ratio[1]))       (log-uniform)
 *     w = round(sqrt(target * aspect)), h = round(sqrt(target / aspect))
 *         (round half to even, as Python's round)
 *     if 0 < w <= W and 0 < h <= H:
 *       y = uniform integer on 0 .. H - h, x = uniform on 0 .. W - w
 *       return (y, x, h, w)
 *   fallback, the center crop of the clamped ratio:
 *     W / H < ratio[0]: w = W, h = round(w / ratio[0])
 *     W / H > ratio[1]: h = H, w = round(h * ratio[1])
 *     else:             w = W, h = H
 *     y = (H - h) / 2, x = (W - w) / 2 (rounded down)
 * U(a, b) is a + (b - a) * u with u a multiple of 2^-53 in [0, 1), from
 * splitmix64's finalizer over (seed, epoch, sample, stream, counter);
 * integers come by Lemire's multiply-shift with rejection (no modulo
 * bias).  Nothing but the arguments decides the box: the same arguments
 * give the same box on any machine, whatever the thread or the order.
 * tests/test_rrc.c compares the distribution with real torchvision's
 * (tools/rrc_golden.py).
 */
#ifndef BFS_RRC_H
#define BFS_RRC_H

#include <stdint.h>

/* The sampler's ranges, as torchvision's RandomResizedCrop(scale, ratio). */
typedef struct {
	double scale[2]; /* share of the area; torchvision's (0.08, 1.0) */
	double ratio[2]; /* w / h; torchvision's (3/4, 4/3) */
} bfs_rrc_opts;

/* A box of an image in pixels: rows y .. y + h - 1, columns x .. x + w - 1. */
typedef struct {
	int y, x, h, w;
	int fallback; /* 1: no try fitted, this is the center crop */
} bfs_rrc_box;

/* Validate: 0 < scale[0] <= scale[1] <= 1, 0 < ratio[0] <= ratio[1], all
 * finite.  0 or -EINVAL with the reason in errmsg (BFS_ERRMSG_MAX bytes,
 * may be NULL).  Pure; any thread. */
int bfs_rrc_check(const bfs_rrc_opts *o, char *errmsg);

/* Draw the box of source sample `sample` (its index in the dataset) in
 * epoch `epoch` under `seed`, for a width x height image (both >= 1), as
 * above.  o: valid (bfs_rrc_check).  out: written.  Pure; any thread. */
void bfs_rrc_draw(uint64_t seed, uint64_t epoch, uint64_t sample, int width, int height,
                  const bfs_rrc_opts *o, bfs_rrc_box *out);

/*
 * The size of the copy of a width x height image that the cache keeps
 * with --cache-res res: when the shorter side is above res it becomes res
 * and the longer one floor(res * longer / shorter) (torchvision's
 * Resize(int) sizing; a square counts as portrait); otherwise the image's
 * own size.  res 0: no limit.  Pure; any thread.
 */
void bfs_rrc_reduced_size(int width, int height, int res, int *rw, int *rh);

/*
 * The box b of a width x height image, in a copy of it resized to rw x
 * rh: each edge scaled and rounded to the nearest pixel (halves up), in
 * integer arithmetic; at least one pixel wide and high, inside the copy.
 * The same image size gives b unchanged.  Pure; any thread.
 */
void bfs_rrc_map_box(const bfs_rrc_box *b, int width, int height, int rw, int rh,
                     bfs_rrc_box *out);

#endif
