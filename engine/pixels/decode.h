/*
 * decode.h - JPEG to packed RGB8, decoded exactly as TensorFlow's
 * tf.io.decode_jpeg(x, channels=3) does with its defaults: libjpeg-turbo,
 * IFAST integer DCT, fancy (triangle) chroma upsampling, grayscale expanded
 * to three equal channels, CMYK/YCCK converted to RGB with TF's formula.
 *
 * One bfs_decoder per worker thread: it owns a TurboJPEG handle and a scratch
 * buffer that grows to the largest image seen and is reused (never shrunk):
 * 3 * width * height bytes, 4 * width * height for a CMYK image.
 *
 * bfs_decode_box decodes only a box of the image (RandomResizedCrop's),
 * through libjpeg-turbo's libjpeg API with the same settings, into the
 * same scratch.
 */
#ifndef BFS_DECODE_H
#define BFS_DECODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_decoder bfs_decoder;

/*
 * Create a decoder.  *out receives it on success, NULL on failure.
 * Returns 0, -EINVAL (out is NULL) or -ENOMEM.  Any thread.
 */
int bfs_decoder_create(bfs_decoder **out);

/*
 * How d decodes JPEGs from now on (bfs_decode_rgb and bfs_decode_box):
 * BFS_DECODE_TF (what bfs_decoder_create gives): TensorFlow's settings
 *   above, IFAST DCT.
 * BFS_DECODE_PIL: Pillow's, Image.open(f).convert("RGB") as torchvision's
 *   loader does: libjpeg's defaults, ISLOW (accurate integer) DCT, fancy
 *   upsampling, grayscale expanded to three equal channels; CMYK/YCCK
 *   read with Adobe's inverted polarity whatever the markers say, then
 *   Pillow's CMYK -> RGB: R = K - MULDIV255(255 - C, K) (MULDIV255(a, b)
 *   = (t + (t >> 8)) >> 8, t = a * b + 128), the same for G and B.
 * Returns 0, or -EINVAL for a NULL d or another method.  Not while a call
 * on d runs.
 */
#define BFS_DECODE_TF 0u
#define BFS_DECODE_PIL 1u
int bfs_decoder_set_method(bfs_decoder *d, unsigned method);

/* Free d, its TurboJPEG handle and its scratch.  Accepts NULL.  Pointers
 * handed out by bfs_decode_rgb on d become invalid. */
void bfs_decoder_destroy(bfs_decoder *d);

/*
 * Read only the JPEG header of jpeg[0..len) and report the image size.
 * d:      the caller's decoder (its TurboJPEG handle is used; no scratch).
 * width, height: out, set only on success.
 * errmsg: NULL or BFS_ERRMSG_MAX bytes; on failure, what went wrong.
 * Returns 0; BFS_E_DECODE for empty input, data that is not a JPEG (errmsg
 * names what it looks like: PNG, GIF, WebP, ...) or a header libjpeg
 * refuses; -EINVAL for NULL d, jpeg (with len > 0), width or height.
 * Threads: one call at a time per decoder.
 */
int bfs_decode_header(bfs_decoder *d, const uint8_t *jpeg, size_t len,
                      int *width, int *height, char *errmsg);

/*
 * Decode jpeg[0..len) to packed RGB8 (stride 3 * width, no padding).
 * max_pixels: BFS_E_TOOBIG if width * height exceeds it, checked from the
 *   header before anything is allocated; 0 means no limit.
 * rgb:    out; points into d's scratch, valid until the next call on d or
 *   bfs_decoder_destroy(d), whichever comes first.  Do not free it.
 * width, height: out, the image size.
 * errmsg: NULL or BFS_ERRMSG_MAX bytes; on failure the decoder's own message
 *   (e.g. libjpeg's "Premature end of JPEG file").
 * Outputs are set only on success.
 *
 * Returns 0 or:
 *   BFS_E_DECODE  empty input; not a JPEG (errmsg says what it looks like,
 *                 e.g. "PNG signature"); corrupt or truncated data.  libjpeg
 *                 warnings (premature end of file, corrupt entropy data,
 *                 extraneous bytes) are errors here: we never serve a
 *                 partly gray image.  Note TF itself only rejects the
 *                 truncated case and decodes the others.
 *   BFS_E_TOOBIG  more than max_pixels pixels.
 *   -ENOMEM       the scratch could not grow (the decoder stays usable).
 *   -EINVAL       NULL d, jpeg (with len > 0), rgb, width or height.
 *
 * Pixel values are those of tf.io.decode_jpeg(x, channels=3) built on the
 * same libjpeg-turbo.  CMYK and YCCK JPEGs are decoded to CMYK and converted
 * as TF does: with an Adobe APP14 marker (inverted ink, what Photoshop and
 * libjpeg write) R = C * K / 255, G = M * K / 255, B = Y * K / 255 in integer
 * arithmetic (truncating); without one R = (255 - C) * (255 - K) / 255, etc.
 *
 * Threads: one call at a time per decoder; different decoders are
 * independent.
 */
int bfs_decode_rgb(bfs_decoder *d, const uint8_t *jpeg, size_t len, uint64_t max_pixels,
                   const uint8_t **rgb, int *width, int *height, char *errmsg);

/*
 * A box of an image's pixels: columns x .. x + w - 1, rows y .. y + h - 1,
 * with 0 <= x, 0 <= y, w >= 1, h >= 1, x + w <= width, y + h <= height.
 */
typedef struct {
	int x, y, w, h;
} bfs_box;

/* What bfs_decode_box decoded.  Points into the decoder's scratch, valid
 * until the next call on the decoder or its destruction. */
typedef struct {
	const uint8_t *rgb; /* the box's top-left pixel: box.h rows of box.w
			     * packed RGB8 pixels, stride bytes apart */
	size_t stride;
	bfs_box box;        /* the box rgb holds, in pixels of the image as
			     * decoded (at 1/scale): the box asked for when
			     * scale is 1, else [floor(x/s), ceil((x+w)/s)) x
			     * [floor(y/s), ceil((y+h)/s)) cut to that image */
	int width, height;  /* the image's size as stored (unscaled) */
	int scaled_width, scaled_height; /* its size at 1/scale: ceil(width /
			     * scale), ceil(height / scale) */
	int scale;          /* 1, 2, 4 or 8 */
} bfs_decoded_box;

/*
 * Decode only what a box of jpeg[0..len) needs, as TensorFlow's
 * decode_and_crop_jpeg does (libjpeg-turbo's jpeg_skip_scanlines and
 * jpeg_crop_scanline): the rows above the box are entropy-decoded but not
 * transformed, and only the iMCU columns around the box are run through
 * the IDCT, upsampling and color conversion.  The rows below it are
 * entropy-decoded only, to the end of the stream, so that a JPEG
 * bfs_decode_rgb refuses is refused here too, whatever the box: whether a
 * sample is bad depends on its bytes alone.
 *
 * scale 1: the box's pixels are bit for bit bfs_decode_rgb's pixels in
 *   the same box (IFAST DCT, fancy upsampling, TF's CMYK/YCCK formula,
 *   grayscale expanded).  Fancy upsampling reads one chroma sample beyond
 *   each side of a column range, which a crop at the range's edge would
 *   replicate instead; so the decoded columns reach one iMCU past each
 *   side of the box (where the image has one), and the box is cut out of
 *   them.  Rows need no margin: jpeg_skip_scanlines keeps the context
 *   rows of vertical upsampling (tests/test_decode.c checks boxes of every
 *   subsampling, progressive and restart-interval images, gray and CMYK).
 * scale 2, 4 or 8: the IDCT is scaled down to 1/scale (libjpeg's scaled
 *   IDCTs): the image decodes at scaled_width x scaled_height, with other
 *   pixel values than a full decode resized down; out->box is the box
 *   mapped as above.
 * max_pixels: as bfs_decode_rgb (of the whole image, checked from the
 *   header before anything is allocated).
 * box: must lie inside the image (-EINVAL otherwise, found after the
 *   header is read).
 * Scratch: the decoded columns times box->h + 1 rows, 4 bytes a pixel at most
 *   (bfs_decode_box_scratch bounds it).
 * Returns 0 or the codes of bfs_decode_rgb, with the same messages;
 * -EINVAL also for a box outside the image or a scale other than 1, 2, 4,
 * 8.  out is set only on success.  Threads: one call at a time per
 * decoder.
 */
int bfs_decode_box(bfs_decoder *d, const uint8_t *jpeg, size_t len, uint64_t max_pixels,
                   const bfs_box *box, int scale, bfs_decoded_box *out, char *errmsg);

/*
 * bfs_decode_box with flags:
 * BFS_DECODE_BOX_STOP: stop after the box's last row, as TensorFlow's
 *   decode_and_crop_jpeg does: the rows below it are not entropy-decoded
 *   (libjpeg-turbo stops reading the stream there).  The box's pixels are
 *   the same bytes; what changes is that a JPEG damaged below the box is
 *   not refused.  So it is for a JPEG already known to decode whole: the
 *   engine remembers, per sample, one whose whole stream decoded without
 *   an error, and stops early only for those.  (A progressive JPEG reads
 *   every scan before its first row: the flag changes nothing there.)
 * flags 0 is bfs_decode_box.  Other bits: -EINVAL.
 */
#define BFS_DECODE_BOX_STOP 1u
int bfs_decode_box_flags(bfs_decoder *d, const uint8_t *jpeg, size_t len, uint64_t max_pixels,
                         const bfs_box *box, int scale, unsigned flags, bfs_decoded_box *out,
                         char *errmsg);

/* An upper bound on the scratch bytes bfs_decode_box needs for this box of
 * a width x height image at 1/scale (0 for arguments it would refuse).
 * Pure; any thread. */
size_t bfs_decode_box_scratch(int width, int height, const bfs_box *box, int scale);

#endif
