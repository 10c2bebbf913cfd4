/*
 * webp.h - WebP to packed RGB8 through libwebp: exactly libwebp's own RGB
 * output (WebPDecodeRGBInto with its default options, as `dwebp -ppm`
 * writes it: fancy upsampling of lossy chroma, alpha dropped, not
 * composited).  Lossy (VP8), lossless (VP8L) and extended (VP8X) files
 * with alpha are read; an animated WebP is refused with a clear error.
 *
 * Memory.  bfs_webp_header reads the headers only (WebPGetFeatures, which
 * allocates nothing) and says how much the decode needs besides the
 * caller's output (3 * width * height bytes): libwebp's own buffers, which
 * it allocates and frees inside the call.  libwebp takes no allocator, so
 * this is its measured need with a margin (tests/test_webp.c): about 130
 * bytes a column for lossy data, plus the alpha plane and its decoder
 * (under 3 bytes a pixel, measured) when there is alpha, and for lossless
 * data the whole image as 32-bit ARGB plus its caches (about 4.1 bytes a
 * pixel, measured); see bfs_webp_work_bytes.
 *
 * No global state: any thread, any number at once.
 */
#ifndef BFS_WEBP_H
#define BFS_WEBP_H

#include <stddef.h>
#include <stdint.h>

/* The largest side WebP can code (14 bits). */
#define BFS_WEBP_MAX_SIDE 16383

typedef struct {
	int width, height;
	int has_alpha;
	int lossless;      /* VP8L data */
	size_t work_bytes; /* what the decode allocates besides the output */
} bfs_webp_info;

/* The work memory a WebP of this size and kind may need
 * (bfs_webp_info.work_bytes).  Pure function: any thread. */
size_t bfs_webp_work_bytes(int width, int height, int has_alpha, int lossless);

/*
 * Read the RIFF/WEBP headers of p[0..len).  Allocates nothing.  Returns 0
 * and *info, or BFS_E_DECODE (not a WebP, headers cut or malformed, an
 * animation) with errmsg (BFS_ERRMSG_MAX bytes, may be NULL) saying which;
 * -EINVAL for NULL p (with len > 0) or info.
 */
int bfs_webp_header(const uint8_t *p, size_t len, bfs_webp_info *info,
		    char *errmsg);

/*
 * Decode p[0..len), whose header is *info, into out (3 * width * height
 * bytes, stride 3 * width), as libwebp's RGB output.  Returns 0, or
 * BFS_E_DECODE (corrupt or truncated data: libwebp's status in errmsg),
 * -ENOMEM (libwebp could not allocate), -EINVAL (NULL arguments, out_len
 * too small).  out is undefined after an error.
 */
int bfs_webp_decode(const uint8_t *p, size_t len, const bfs_webp_info *info,
		    uint8_t *out, size_t out_len, char *errmsg);

#endif
