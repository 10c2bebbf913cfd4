/*
 * png.h - PNG to packed RGB8 through libspng, exactly as TensorFlow's
 * tf.io.decode_png(x, channels=3) (libpng) decodes it:
 *
 *   - 16-bit samples keep their high byte (libpng's png_set_strip_16, which
 *     TensorFlow asks for when it wants uint8): v8 = v16 >> 8;
 *   - alpha is dropped, not composited: RGBA gives its RGB, gray+alpha its
 *     gray, and a tRNS chunk (palette or color-key transparency) is
 *     ignored (png_set_strip_alpha);
 *   - palette images give their palette's RGB (png_set_palette_to_rgb);
 *   - gray expands to three equal channels (png_set_gray_to_rgb), 1-, 2-
 *     and 4-bit gray first scaled to 8 bits as libpng does (x255, x85,
 *     x17: png_set_expand_gray_1_2_4_to_8);
 *   - no gamma, sRGB or ICC conversion (TensorFlow asks for none);
 *   - Adam7-interlaced images are deinterlaced.
 *
 * Stricter than TensorFlow on damage, as the JPEG decoder is: a palette
 * index past the palette (libpng warns and draws black), data after the
 * image in IDAT, and anything libspng refuses are errors.  Ancillary
 * chunks (gAMA, iCCP, tRNS, text, ...) are not read at all: none changes
 * what TensorFlow decodes, and libpng only warns about a damaged one.  A
 * critical chunk whose CRC fails is an error, and the image must run to a
 * whole IEND chunk (TensorFlow reads to the end too).
 *
 * Memory.  bfs_png_header reads the IHDR chunk only, allocating nothing,
 * and says how much the decode will allocate: the caller's output
 * (3 * width * height bytes, which it owns) and the work memory that
 * libspng and this module allocate during the call and free before it
 * returns (scanline buffers and zlib's state: a few times the width in
 * bytes plus BFS_PNG_WORK_BASE).  bfs_png_decode counts every
 * allocation libspng makes and refuses any past work_max, so that bound
 * holds whatever the file says.
 *
 * No global state (the allocation count lives on the decoding thread's
 * stack for the call): any thread, any number at once.
 */
#ifndef BFS_PNG_H
#define BFS_PNG_H

#include <stddef.h>
#include <stdint.h>

/* libpng's default limit on each side (PNG_USER_WIDTH_MAX and _HEIGHT_MAX),
 * which TensorFlow keeps: a wider or taller PNG is refused. */
#define BFS_PNG_MAX_SIDE 1000000u

/* Work memory every decode may use besides its rows: libspng's context
 * and read buffer, and zlib's inflate state and window.  libspng never
 * sees the ancillary chunks (png.c drops them: none changes what
 * TensorFlow decodes), so none is kept in memory, whatever its size. */
#define BFS_PNG_WORK_BASE (256u << 10)

typedef struct {
	int width, height;
	int bit_depth;      /* 1, 2, 4, 8 or 16 */
	int color_type;     /* 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA */
	int interlaced;     /* Adam7 */
	size_t work_bytes;  /* the most bfs_png_decode allocates besides the
			     * output */
} bfs_png_info;

/* The work memory a PNG of this header needs at most
 * (bfs_png_info.work_bytes): a few rows, and for an interlaced image of 1,
 * 2 or 4 bits per sample the whole image in its own format (libspng
 * decodes those only whole).  Pure function: any thread. */
size_t bfs_png_work_bytes(uint32_t width, uint32_t height, int bit_depth,
			  int color_type, int interlaced);

/*
 * Read the signature and the IHDR chunk of png[0..len).  Allocates nothing.
 * Returns 0 and *info, or BFS_E_DECODE (not a PNG, IHDR missing, cut or
 * failing its CRC, a size of 0, a side over BFS_PNG_MAX_SIDE, a bit depth,
 * color type, compression, filter or interlace method PNG does not
 * define) with errmsg (BFS_ERRMSG_MAX bytes, may be NULL) saying which;
 * -EINVAL for NULL png (with len > 0) or info.
 */
int bfs_png_header(const uint8_t *png, size_t len, bfs_png_info *info,
		   char *errmsg);

/*
 * Decode png[0..len), whose header is *info (from bfs_png_header on the
 * same bytes), into out: 3 * width * height bytes of packed RGB8, stride
 * 3 * width, as described above.  Allocates at most work_max bytes
 * (info->work_bytes is enough) and frees them before returning.
 * Returns 0 or:
 *   BFS_E_DECODE  corrupt, truncated or refused data (errmsg: libspng's
 *                 message, or which palette index is out of range);
 *   BFS_E_MEMORY  the decode wanted more than work_max;
 *   -ENOMEM       an allocation within work_max failed;
 *   -EINVAL       NULL arguments, or out_len below 3 * width * height.
 * out is undefined after an error.
 */
int bfs_png_decode(const uint8_t *png, size_t len, const bfs_png_info *info,
		   uint8_t *out, size_t out_len, size_t work_max,
		   char *errmsg);

#endif
