/*
 * preview.h - a batch as the model sees it, as one JPEG contact sheet:
 * normalization undone, each image shrunk to a tile, its label printed
 * under it with a built-in bitmap font, encoded with TurboJPEG.
 *
 * No global state: any thread may call bfs_preview_render, concurrently.
 * Each call makes and destroys its own TurboJPEG compressor.
 */
#ifndef BFS_PREVIEW_H
#define BFS_PREVIEW_H

#include <stdint.h>

#include "engine/base/types.h"

/* Largest sheet side TurboJPEG can write. */
#define BFS_PREVIEW_MAX_SIDE 65535

typedef struct {
	int h, w;           /* each image is h x w pixels, 3 channels (RGB) */
	bfs_dtype dtype;    /* FLOAT32, FLOAT16 or UINT8 */
	int nchw;           /* 1: image is [3][h][w]; 0: [h][w][3] */
	int normalized;     /* 1: values are (x - mean) / std; shown as
			     * value * std[c] + mean[c] */
	float mean[3];      /* per channel R, G, B, in [0, 1] scale */
	float std[3];
	unsigned tile;      /* longest tile side in pixels; 0 = 128 */
	int quality;        /* JPEG quality 1..100; 0 = 90 */
} bfs_preview_opts;

/*
 * Render n images into a contact sheet and encode it as a baseline JPEG
 * (4:2:0).
 *
 * Values: an element's [0, 1]-scale value is the element itself for
 * FLOAT32/FLOAT16 and element / 255 for UINT8; with normalized it becomes
 * value * std[c] + mean[c].  The shown pixel is that times 255, clamped to
 * [0, 255] (NaN shows as 0) and rounded.
 *
 * Layout: each image keeps its aspect ratio and is shrunk (area average)
 * so its longer side is at most `tile` pixels; it is never enlarged.
 * Tiles go row by row on a grid of ceil(sqrt(n)) columns with 4-pixel
 * margins on a dark gray background.  When labels is not NULL a strip
 * (12 pixels, 20 with doubled glyphs) under each tile shows its label:
 * class_names[label] when class_names is not NULL and 0 <= label < its
 * length, else the decimal number, centred and cut to the tile's width (a
 * cut name ends in '.').  The font has 5x7 glyphs, descenders in an 8th
 * row, for letters, digits, space and - . _ : / , ( ) + '; any other
 * character shows as '?' (one per UTF-8 sequence).  Glyphs are doubled on
 * tiles 200 pixels wide or more.  The sheet depends on nothing but the
 * arguments.
 *
 * Parameters:
 *   o            layout of `images` and how to show it (read only);
 *   images       n images back to back, as an engine batch holds them:
 *                n * 3 * h * w elements of o->dtype;
 *   labels       n labels, or NULL for no label strips;
 *   class_names  NULL, or a NULL-terminated array of class names
 *                (UTF-8), indexed by label;
 *   n            number of images, at least 1;
 *   jpeg         out: the JPEG, allocated by TurboJPEG; the caller owns it
 *                and frees it with tjFree() (not free()).  NULL on error;
 *   jpeg_len     out: its size in bytes, 0 on error;
 *   errmsg       BFS_ERRMSG_MAX bytes or NULL: what went wrong.
 * Returns 0, or:
 *   -EINVAL  NULL o/images/jpeg/jpeg_len, n == 0, h or w below 1, a batch
 *            too large to address, a dtype outside the three above, a
 *            quality over 100, or a sheet larger than
 *            BFS_PREVIEW_MAX_SIDE on a side (choose a smaller tile);
 *   -ENOMEM  the sheet or scratch could not be allocated;
 *   -EIO     TurboJPEG refused to start or to encode; errmsg holds
 *            TurboJPEG's message.
 */
int bfs_preview_render(const bfs_preview_opts *o, const void *images,
		       const int64_t *labels, const char *const *class_names,
		       unsigned n, unsigned char **jpeg,
		       unsigned long *jpeg_len, char *errmsg);

/* The sheet size bfs_preview_render makes for these options, n images
 * and labels shown (1) or not (0); 0 or -EINVAL as above. */
int bfs_preview_size(const bfs_preview_opts *o, unsigned n, int labels,
		     int *width, int *height);

/* The label font, for other pictures (fs/plot.c): the glyph of c as
 * BFS_PREVIEW_GLYPH_H rows of BFS_PREVIEW_GLYPH_W pixels, one byte a row,
 * bit 4 the leftmost pixel (the 8th row holds descenders); '?' for a
 * character the font lacks (see above), blank for ' '.  Never NULL. */
#define BFS_PREVIEW_GLYPH_W 5
#define BFS_PREVIEW_GLYPH_H 8
const uint8_t *bfs_preview_glyph(unsigned char c);

#endif
