/*
 * fuzz_decode.c - the JPEG entry (bfs_decode_header, bfs_decode_rgb) from
 * any bytes, with the pixel limit at 4M pixels as a mount would set it.
 *
 * Properties: a documented result; BFS_E_TOOBIG exactly when the header
 * says more than 4M pixels (run with -malloc_limit_mb: nothing big is ever
 * allocated for such an image); the header call and the decode agree on
 * the size and on failure; every one of the 3*w*h output bytes is readable
 * (ASan); and the result does not depend on the decoder's history: a
 * decoder that has seen every earlier input, errors included, succeeds or
 * fails as a fresh one does, with the same pixels.  bfs_decode_box of a
 * box taken from the input's last bytes fails exactly when the full decode
 * fails (BFS_E_DECODE, the same message), and otherwise holds the full
 * decode's pixels in that box; stopping after the box
 * (BFS_DECODE_BOX_STOP), it holds them too when the full decode succeeds,
 * and on any input it returns cleanly, its rows readable when it succeeds.
 *
 * That last property found engine/pixels/decode.c keeping libjpeg's quantization
 * and Huffman tables from one image to the next (fixed in 96050e5: a
 * fresh TurboJPEG handle per image); tests/fuzz/test_fuzz_corpus.c keeps
 * the reproducers (tests/fuzz/corpus/decode/history-*) as a unit test.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pixels/decode.h"
#include "engine/base/error.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PIXELS (4u << 20)
#define FRESH_CHECK_PIXELS (256u << 10) /* compare with a fresh decoder up to this */

/* A box of a w x h image from the input's last 8 bytes. */
static bfs_box box_from(const uint8_t *data, size_t size, int w, int h)
{
	uint8_t b[8] = { 0 };
	bfs_box r;

	memcpy(b, data + (size > 8 ? size - 8 : 0), size < 8 ? size : 8);
	r.w = 1 + (int)((b[0] | b[1] << 8) % (unsigned)w);
	r.h = 1 + (int)((b[2] | b[3] << 8) % (unsigned)h);
	r.x = (int)((b[4] | b[5] << 8) % (unsigned)(w - r.w + 1));
	r.y = (int)((b[6] | b[7] << 8) % (unsigned)(h - r.h + 1));
	return r;
}

/* bfs_decode_box on d2 against the full decode's result r (pixels rgb of
 * a w x h image when r == 0; with message msg when not). */
static void check_box(bfs_decoder *d2, const uint8_t *data, size_t size, int r,
		      const char *msg, const uint8_t *rgb, int w, int h)
{
	char bmsg[BFS_ERRMSG_MAX];
	bfs_decoded_box out;
	bfs_box bx = box_from(data, size, w, h);
	int rb = bfs_decode_box_flags(d2, data, size, MAX_PIXELS, &bx, 1, BFS_DECODE_BOX_STOP,
				      &out, bmsg);
	volatile unsigned sink = 0;

	if (rb == 0)
		for (int y = 0; y < bx.h; y++)
			for (int x = 0; x < bx.w * 3; x++)
				sink += out.rgb[(size_t)y * out.stride + x];
	if (r == 0) {
		CHECK(rb == 0, "the stopped box failed (%d: %s) where the full decode did not", rb,
		      bmsg);
		for (int y = 0; y < bx.h; y++)
			CHECK(memcmp(out.rgb + (size_t)y * out.stride,
				     rgb + ((size_t)(bx.y + y) * w + bx.x) * 3,
				     (size_t)bx.w * 3) == 0,
			      "stopped box %dx%d at (%d, %d): row %d differs from the full decode",
			      bx.w, bx.h, bx.x, bx.y, y);
	}
	rb = bfs_decode_box(d2, data, size, MAX_PIXELS, &bx, 1, &out, bmsg);
	if (r != 0) {
		CHECK(rb != 0, "the box decoded what the full decode refused (%d: %s)", r, msg);
		if (r == BFS_E_DECODE && rb == BFS_E_DECODE)
			CHECK(strcmp(msg, bmsg) == 0, "messages differ: '%s' / '%s'", msg, bmsg);
		return;
	}
	CHECK(rb == 0, "the box failed (%d: %s) where the full decode did not", rb, bmsg);
	for (int y = 0; y < bx.h; y++)
		CHECK(memcmp(out.rgb + (size_t)y * out.stride,
			     rgb + ((size_t)(bx.y + y) * w + bx.x) * 3, (size_t)bx.w * 3) == 0,
		      "box %dx%d at (%d, %d): row %d differs from the full decode", bx.w, bx.h,
		      bx.x, bx.y, y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bfs_decoder *d, *d2;
	char msg[BFS_ERRMSG_MAX];
	const uint8_t *rgb = NULL;
	int w = -1, h = -1, hw = -1, hh = -1, rh, r;
	volatile unsigned sink = 0;
	uint64_t npix;

	if (!d)
		CHECK(bfs_decoder_create(&d) == 0, "decoder");
	if (!d2)
		CHECK(bfs_decoder_create(&d2) == 0, "decoder");
	memset(msg, 'x', sizeof(msg));
	msg[sizeof(msg) - 1] = 0;
	rh = bfs_decode_header(d, data, size, &hw, &hh, msg);
	CHECK(rh == 0 || rh == BFS_E_DECODE || rh == -ENOMEM, "header returned %d", rh);
	CHECK_MSG(msg);
	if (rh == 0)
		CHECK(hw > 0 && hh > 0, "header size %dx%d", hw, hh);

	r = bfs_decode_rgb(d, data, size, MAX_PIXELS, &rgb, &w, &h, msg);
	CHECK(r == 0 || r == BFS_E_DECODE || r == BFS_E_TOOBIG || r == -ENOMEM,
	      "decode returned %d", r);
	CHECK_MSG(msg);
	if (rh != 0 && rh != -ENOMEM)
		CHECK(r == rh, "header failed (%d) but decode returned %d", rh, r);
	if (r != 0) {
		CHECK(msg[0], "error %d without a message", r);
		if (r == BFS_E_TOOBIG)
			CHECK(rh == 0 && (uint64_t)hw * (uint64_t)hh > MAX_PIXELS,
			      "TOOBIG for %dx%d", hw, hh);
		if (r == BFS_E_DECODE && rh == 0 &&
		    (uint64_t)hw * (uint64_t)hh <= FRESH_CHECK_PIXELS) {
			bfs_decoder *fresh;
			const uint8_t *rgb2;
			int w2, h2;

			CHECK(bfs_decoder_create(&fresh) == 0, "fresh decoder");
			CHECK(bfs_decode_rgb(fresh, data, size, MAX_PIXELS, &rgb2, &w2,
					     &h2, msg) != 0,
			      "a fresh decoder decodes what a used one refused");
			bfs_decoder_destroy(fresh);
			check_box(d2, data, size, r, msg, NULL, hw, hh);
		}
		return 0;
	}
	CHECK(w == hw && h == hh, "decode %dx%d, header %dx%d", w, h, hw, hh);
	npix = (uint64_t)w * (uint64_t)h;
	CHECK(npix <= MAX_PIXELS, "%dx%d over the limit decoded", w, h);
	for (uint64_t i = 0; i < 3 * npix; i += 61)
		sink += rgb[i];
	sink += rgb[3 * npix - 1];

	if (npix <= FRESH_CHECK_PIXELS) {
		bfs_decoder *fresh;
		const uint8_t *rgb2;
		int w2, h2;
		uint8_t *copy = malloc(3 * npix);

		CHECK(copy, "malloc");
		memcpy(copy, rgb, 3 * npix);
		CHECK(bfs_decoder_create(&fresh) == 0, "fresh decoder");
		r = bfs_decode_rgb(fresh, data, size, MAX_PIXELS, &rgb2, &w2, &h2, msg);
		CHECK(r == 0 && w2 == w && h2 == h, "a fresh decoder returned %d (%s)",
		      r, msg);
		CHECK(memcmp(copy, rgb2, 3 * npix) == 0,
		      "pixels depend on the decoder's history");
		bfs_decoder_destroy(fresh);
		check_box(d2, data, size, 0, "", copy, w, h);
		free(copy);
	}
	(void)sink;
	return 0;
}
