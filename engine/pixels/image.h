/*
 * image.h - one encoded image to packed RGB8, whatever its format: the
 * format is sniffed from the bytes (never from a name), the header gives
 * the size and the memory the decode needs before anything is allocated,
 * and the decode goes to the format's module:
 *
 *   JPEG  decode.h  tf.io.decode_jpeg(channels=3) (TurboJPEG)
 *   PNG   png.h     tf.io.decode_png(channels=3) (libspng)
 *   WebP  webp.h    libwebp's RGB output
 *   GIF   refused, with a clear error: batchfs does not decode GIF (not
 *         even the first frame); convert such images to PNG.
 *
 * Anything else is refused naming what it looks like (filekind.h), never
 * quoting its bytes.  After decode every format goes through the same
 * pipeline (resize, cache, stage 2).
 *
 * Memory: a JPEG is decoded into its bfs_decoder's scratch, as before
 * (decode.h); PNG and WebP into a buffer the caller owns (its scratch),
 * plus work memory the format's library allocates and frees inside the
 * call.  bfs_image_header says both sizes, from the header alone, so the
 * caller can reserve them first.
 *
 * No state of its own: any thread, one call at a time per bfs_decoder.
 */
#ifndef BFS_IMAGE_H
#define BFS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pixels/decode.h"

typedef enum {
	BFS_IMAGE_UNKNOWN = 0,
	BFS_IMAGE_JPEG,
	BFS_IMAGE_PNG,
	BFS_IMAGE_WEBP,
	BFS_IMAGE_GIF,
} bfs_image_format;

typedef struct {
	bfs_image_format format;
	int width, height;
	size_t pixel_bytes;   /* the decoded image: for JPEG in the decoder's
			       * scratch (4 per pixel: CMYK decodes through four
			       * channels), else in the caller's out buffer
			       * (3 per pixel) */
	size_t work_bytes;    /* allocated and freed inside the decode, besides
			       * pixel_bytes (0 for JPEG: TurboJPEG's own
			       * buffers are not counted, as before) */
	union {
		struct { int bit_depth, color_type, interlaced; } png;
		struct { int has_alpha, lossless; } webp;
	} u;                  /* the format's header, for bfs_image_decode */
} bfs_image_info;

/* The format p[0..len) starts like (signatures only). */
bfs_image_format bfs_image_sniff(const uint8_t *p, size_t len);

/* "JPEG", "PNG", "WebP", "GIF" or "image". */
const char *bfs_image_format_name(bfs_image_format f);

/*
 * Read the header of p[0..len) (the JPEG decoder's handle is used for a
 * JPEG; nothing is allocated for the others) into *info.  Returns 0, or:
 *   BFS_E_DECODE  empty input; not a JPEG, PNG or WebP image (errmsg says
 *                 what it looks like, e.g. "not a JPEG, PNG or WebP image:
 *                 looks like a BMP image"); a header its decoder refuses;
 *   BFS_E_FORMAT  a GIF (errmsg says GIF is not decoded);
 *   -EINVAL       NULL jpeg, p (with len > 0) or info.
 * errmsg: NULL or BFS_ERRMSG_MAX bytes.
 */
int bfs_image_header(bfs_decoder *jpeg, const uint8_t *p, size_t len,
		     bfs_image_info *info, char *errmsg);

/*
 * Decode p[0..len), whose header bfs_image_header read into *info, to
 * packed RGB8 (stride 3 * width).  max_pixels: BFS_E_TOOBIG past it (0: no
 * limit), checked before anything is allocated.  out, out_cap: the
 * caller's buffer for PNG and WebP (at least info->pixel_bytes; unused for
 * JPEG).  *rgb points to the pixels: into jpeg's scratch (valid until its
 * next call) or to out.  Returns 0, or BFS_E_DECODE, BFS_E_TOOBIG,
 * BFS_E_MEMORY (PNG: more work memory than info->work_bytes), -ENOMEM,
 * -EINVAL, with errmsg.
 */
int bfs_image_decode(bfs_decoder *jpeg, const uint8_t *p, size_t len,
		     const bfs_image_info *info, uint64_t max_pixels,
		     uint8_t *out, size_t out_cap, const uint8_t **rgb,
		     int *width, int *height, char *errmsg);

/*
 * The most pixel_bytes + work_bytes that any image of at most `pixels`
 * pixels needs, in any format: what a budget must leave for one image
 * under --max-pixels.  Lossless WebP needs the most (about 8 bytes a
 * pixel: its 32-bit ARGB image besides the RGB output).  Pure function.
 */
uint64_t bfs_image_scratch_max(uint64_t pixels);

#endif
