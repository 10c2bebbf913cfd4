/*
 * plot.h - a picture of a run: a mount's history (fs/history.h) drawn as
 * three line charts, one above the other, over the mount's life:
 *
 *   1. images per second: served to readers (the training loop's rate),
 *      and decoded (what the cache did not save);
 *   2. reader wait: seconds the readers spent waiting for batches per
 *      second of the run, all readers together (0: the loader kept up;
 *      1: one reader always waited);
 *   3. cache hit rate: the sample cache's hits per lookup, in percent
 *      (no line where an interval had no lookup; a note when the mount
 *      has no cache).
 *
 * Each rate is the change between two points of the history over the
 * seconds between them, drawn as a step (flat across its interval), with
 * the area under it tinted.  Each chart has its title, y axis ticks from
 * 0 to a round number at or above its highest value, and time ticks
 * ("30s", "5m", "1h30m") since the mount began.  The font is the preview's
 * (engine/pixels/preview.h), at twice its size.
 *
 * FUSE-free and pure: history in, packed RGB8 out; then PNG bytes through
 * libspng (bfs_plot_png).  No global state: any thread.
 */
#ifndef BFS_FS_PLOT_H
#define BFS_FS_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "fs/history.h"

#define BFS_PLOT_WIDTH  960       /* default size */
#define BFS_PLOT_HEIGHT 720
#define BFS_PLOT_MIN_W  480       /* the smallest that holds the text */
#define BFS_PLOT_MIN_H  360
#define BFS_PLOT_MAX_SIDE 8192

#define BFS_PLOT_PANELS 3

/* The colours (0xRRGGBB) of the background and the lines; the area
 * under a line is a pale tint of its colour. */
#define BFS_PLOT_BG      0xffffff
#define BFS_PLOT_SERVED  0x1f77b4
#define BFS_PLOT_DECODED 0xff7f0e
#define BFS_PLOT_WAIT    0xd62728
#define BFS_PLOT_HIT     0x2ca02c

typedef struct {
	int width, height;   /* 0: the defaults; else MIN..MAX_SIDE */
	const char *title;   /* the top line (the mount point); NULL: none */
	int cache;           /* the mount has a sample cache */
} bfs_plot_opts;

/* One interval between two points: its rates. */
typedef struct {
	double t0, t1;       /* seconds since the mount began */
	double served;       /* images/s served */
	double decoded;      /* images/s decoded */
	double wait;         /* reader wait, seconds per second */
	double hit;          /* cache hits per lookup, 0..1; NaN: no lookup */
} bfs_plot_rate;

/* The n - 1 intervals of points p[0..n) into out (n - 1 of them; n may be
 * 0 or 1: none).  A point not after the one before it is passed over; a
 * counter that went down (it never should) counts as no change.  Returns
 * how many were written. */
size_t bfs_plot_rates(const bfs_history_point *p, size_t n, bfs_plot_rate *out);

/* Where a chart is drawn, for the tests: the plot area of panel k
 * (0..2), pixels [x0, x1] x [y0, y1] inclusive, y0 at the top, and the
 * value at its top edge (its bottom edge is 0; panel 2 is in percent,
 * ymax 100).  Value v is drawn on rows y and y - 1, where
 * y = y1 - round(v / ymax * (y1 - y0)); time t at column
 * x0 + round(t / tmax * (x1 - x0)), 0 at x0 to tmax at x1. */
typedef struct {
	int x0, y0, x1, y1;
	double ymax;
	double tmax;
} bfs_plot_box;

/* The layout rates[0..n) get with these options: *box for panel k.
 * 0, or -EINVAL (k out of range, a size outside the limits). */
int bfs_plot_layout(const bfs_plot_opts *o, const bfs_plot_rate *r, size_t n,
		    int k, bfs_plot_box *box);

/* Draw the history p[0..n) (n may be 0 or 1: the axes and "no data yet"):
 * 0 with a malloc()ed *rgb of 3 * *w * *h bytes (stride 3 * *w), or
 * -EINVAL (NULL arguments, a size outside the limits), -ENOMEM. */
int bfs_plot_render(const bfs_plot_opts *o, const bfs_history_point *p,
		    size_t n, uint8_t **rgb, int *w, int *h);

/* rgb (w x h, packed RGB8) as PNG bytes: 0 and a malloc()ed *png of
 * *len bytes, or -EINVAL, -ENOMEM, -EIO (libspng refused; errmsg,
 * BFS_ERRMSG_MAX bytes or NULL, says why). */
int bfs_plot_png(const uint8_t *rgb, int w, int h, void **png, size_t *len,
		 char *errmsg);

#endif
