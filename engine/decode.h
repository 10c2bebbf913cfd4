/*
 * decode.h - JPEG to packed RGB8, decoded exactly as TensorFlow's
 * tf.io.decode_jpeg(x, channels=3) does with its defaults: libjpeg-turbo,
 * IFAST integer DCT, fancy (triangle) chroma upsampling, grayscale expanded
 * to three equal channels, CMYK/YCCK converted to RGB with TF's formula.
 *
 * One bfs_decoder per worker thread: it owns a TurboJPEG handle and a scratch
 * buffer that grows to the largest image seen and is reused (never shrunk):
 * 3 * width * height bytes, 4 * width * height for a CMYK image.
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

#endif
