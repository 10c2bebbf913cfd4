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
 * fails as a fresh one does, with the same pixels.
 *
 * KNOWN BUG (engine/decode.c, reported; docs/RELIABILITY.md): libjpeg keeps
 * quantization and Huffman tables in the handle from one image to the
 * next (they are not reset at SOI, for abbreviated streams), so an image
 * that uses a table slot it does not define itself decodes with whatever
 * the worker's previous image left there.  Until decode.c gives each image
 * fresh tables, the history property is checked only for self-contained
 * images (self_contained() below); set FUZZ_STRICT_HISTORY=1 in the
 * environment to check every input.  Reproducer: tests/fuzz/known_bugs.sh.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/decode.h"
#include "engine/error.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PIXELS (4u << 20)
#define FRESH_CHECK_PIXELS (256u << 10) /* compare with a fresh decoder up to this */

/*
 * 1 if every quantization table a frame component uses, and (for Huffman
 * coding) every Huffman table a scan names, is defined in this stream
 * before the scan that needs it; 0 otherwise, or when the markers cannot
 * be followed.  Arithmetic conditioning tables need no check: SOI resets
 * them.
 */
static int self_contained(const uint8_t *p, size_t n)
{
	uint8_t q[4] = { 0 }, h[2][4] = { { 0 } }, comp_q[256];
	int arith = 0, have_sof = 0;
	size_t i = 2;

	memset(comp_q, 0xff, sizeof(comp_q));
	if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
		return 0;
	while (i + 1 < n) {
		unsigned m;
		size_t len, j;

		if (p[i] != 0xFF)
			return 0;
		m = p[i + 1];
		if (m == 0xFF) {
			i++;
			continue;
		}
		if (m == 0xD9)
			return 1;
		if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) {
			i += 2;
			continue;
		}
		if (i + 4 > n)
			return 0;
		len = (size_t)p[i + 2] << 8 | p[i + 3];
		if (len < 2 || i + 2 + len > n)
			return 0;
		j = i + 4;
		if (m == 0xDB) { /* DQT */
			while (j < i + 2 + len) {
				q[p[j] & 3] = 1;
				j += 1 + ((p[j] >> 4) ? 128 : 64);
			}
		} else if (m == 0xC4) { /* DHT */
			while (j + 17 <= i + 2 + len) {
				size_t cnt = 0;

				for (int k = 1; k <= 16; k++)
					cnt += p[j + k];
				h[(p[j] >> 4) & 1][p[j] & 3] = 1;
				j += 17 + cnt;
			}
		} else if (m >= 0xC0 && m <= 0xCF && m != 0xC8 && m != 0xCC) {
			if (len < 8)
				return 0;
			arith = m >= 0xC9;
			have_sof = 1;
			for (unsigned c = 0; c < p[i + 9] && j + 6 + 3 * c + 2 < i + 2 + len; c++)
				comp_q[p[j + 6 + 3 * c]] = p[j + 6 + 3 * c + 2] & 3;
		} else if (m == 0xDA) { /* SOS: check, then skip the entropy data */
			if (!have_sof || len < 3)
				return 0;
			for (unsigned c = 0; c < p[j] && j + 1 + 2 * c + 1 < i + 2 + len; c++) {
				uint8_t id = p[j + 1 + 2 * c], sel = p[j + 2 + 2 * c];

				if (comp_q[id] == 0xff || !q[comp_q[id]])
					return 0;
				if (!arith && (!h[0][(sel >> 4) & 3] || !h[1][sel & 3]))
					return 0;
			}
			i += 2 + len;
			while (i + 1 < n && !(p[i] == 0xFF && p[i + 1] != 0 &&
					      !(p[i + 1] >= 0xD0 && p[i + 1] <= 0xD7)))
				i++;
			continue;
		}
		i += 2 + len;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bfs_decoder *d;
	static int strict = -1;
	char msg[BFS_ERRMSG_MAX];
	const uint8_t *rgb = NULL;
	int w = -1, h = -1, hw = -1, hh = -1, rh, r, history;
	volatile unsigned sink = 0;
	uint64_t npix;

	if (!d)
		CHECK(bfs_decoder_create(&d) == 0, "decoder");
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
	strict = strict >= 0 ? strict : getenv("FUZZ_STRICT_HISTORY") != NULL;
	history = strict || self_contained(data, size);
	if (r != 0) {
		CHECK(msg[0], "error %d without a message", r);
		if (r == BFS_E_TOOBIG)
			CHECK(rh == 0 && (uint64_t)hw * (uint64_t)hh > MAX_PIXELS,
			      "TOOBIG for %dx%d", hw, hh);
		if (r == BFS_E_DECODE && rh == 0 && history &&
		    (uint64_t)hw * (uint64_t)hh <= FRESH_CHECK_PIXELS) {
			bfs_decoder *fresh;
			const uint8_t *rgb2;
			int w2, h2;

			CHECK(bfs_decoder_create(&fresh) == 0, "fresh decoder");
			CHECK(bfs_decode_rgb(fresh, data, size, MAX_PIXELS, &rgb2, &w2,
					     &h2, msg) != 0,
			      "a fresh decoder decodes what a used one refused");
			bfs_decoder_destroy(fresh);
		}
		return 0;
	}
	CHECK(w == hw && h == hh, "decode %dx%d, header %dx%d", w, h, hw, hh);
	npix = (uint64_t)w * (uint64_t)h;
	CHECK(npix <= MAX_PIXELS, "%dx%d over the limit decoded", w, h);
	for (uint64_t i = 0; i < 3 * npix; i += 61)
		sink += rgb[i];
	sink += rgb[3 * npix - 1];

	if (history && npix <= FRESH_CHECK_PIXELS) {
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
		free(copy);
	}
	(void)sink;
	return 0;
}
