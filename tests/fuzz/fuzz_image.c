/*
 * fuzz_image.c - the image entry (bfs_image_header, bfs_image_decode) from
 * any bytes: format sniffing, PNG (libspng through png.c's chunk filter and
 * counting allocator), WebP (libwebp) and JPEG, with the pixel limit at 4M
 * pixels as a mount would set it.
 *
 * Properties: a documented result; a message with every error; BFS_E_TOOBIG
 * exactly when the header says more than 4M pixels; a decode never asks
 * for more work memory than its header said (BFS_E_MEMORY would mean the
 * bound png.h documents is wrong); every one of the 3*w*h output bytes is
 * written (the output starts poisoned and is read back: MSan/valgrind see
 * it, ASan its bounds); and the same bytes decode to the same pixels twice
 * (no history: libspng once left bits of a previous image in an
 * interlaced one).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/pixels/image.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PIXELS (4u << 20)

static int decode(bfs_decoder *d, const uint8_t *data, size_t size,
		  bfs_image_info *info, uint8_t **out, const uint8_t **rgb,
		  int *w, int *h, char *msg)
{
	int r = bfs_image_header(d, data, size, info, msg);

	*out = NULL;
	if (r)
		return r;
	if ((uint64_t)info->width * (uint64_t)info->height > MAX_PIXELS)
		return bfs_image_decode(d, data, size, info, MAX_PIXELS, NULL, 0,
					rgb, w, h, msg);
	if (info->format != BFS_IMAGE_JPEG) {
		*out = malloc(info->pixel_bytes);
		CHECK(*out, "malloc");
		memset(*out, 0xA5, info->pixel_bytes);
	}
	return bfs_image_decode(d, data, size, info, MAX_PIXELS, *out,
				*out ? info->pixel_bytes : 0, rgb, w, h, msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bfs_decoder *d;
	char msg[BFS_ERRMSG_MAX];
	bfs_image_info info;
	const uint8_t *rgb = NULL, *rgb2 = NULL;
	uint8_t *out = NULL, *out2 = NULL, *copy;
	int w = 0, h = 0, w2, h2, r, r2;
	uint64_t npix;
	volatile unsigned sink = 0;

	if (!d)
		CHECK(bfs_decoder_create(&d) == 0, "decoder");
	memset(msg, 'x', sizeof(msg));
	msg[sizeof(msg) - 1] = 0;
	r = decode(d, data, size, &info, &out, &rgb, &w, &h, msg);
	CHECK_MSG(msg);
	CHECK(r == 0 || r == BFS_E_DECODE || r == BFS_E_FORMAT || r == BFS_E_TOOBIG ||
	      r == -ENOMEM, "returned %d (%s)", r, msg);
	CHECK(r != BFS_E_MEMORY, "decode wanted more work memory than its header said: %s", msg);
	if (r == BFS_E_FORMAT)
		CHECK(info.format == BFS_IMAGE_GIF, "FORMAT for a non-GIF");
	if (r) {
		CHECK(msg[0], "error %d without a message", r);
		if (r == BFS_E_TOOBIG)
			CHECK((uint64_t)info.width * (uint64_t)info.height > MAX_PIXELS,
			      "TOOBIG for %dx%d", info.width, info.height);
		free(out);
		return 0;
	}
	CHECK(w == info.width && h == info.height, "decoded %dx%d, header %dx%d", w, h,
	      info.width, info.height);
	npix = (uint64_t)w * (uint64_t)h;
	CHECK(npix && npix <= MAX_PIXELS, "%dx%d", w, h);
	for (uint64_t i = 0; i < 3 * npix; i++)
		sink += rgb[i];
	if (info.format == BFS_IMAGE_JPEG) { /* decode.h's own fuzz covers it */
		free(out);
		return 0;
	}
	copy = malloc(3 * npix);
	CHECK(copy, "malloc");
	memcpy(copy, rgb, 3 * npix);
	r2 = decode(d, data, size, &info, &out2, &rgb2, &w2, &h2, msg);
	CHECK(r2 == 0 && w2 == w && h2 == h, "second decode returned %d (%s)", r2, msg);
	CHECK(memcmp(copy, rgb2, 3 * npix) == 0, "pixels differ between two decodes");
	free(copy);
	free(out);
	free(out2);
	(void)sink;
	return 0;
}
