/*
 * known_bugs.c - reproducers of bugs found by fuzzing in files this suite
 * does not own, kept out of `make test` until their owners fix them (see
 * docs/RELIABILITY.md).  Exit status 1 while any still reproduces.
 *
 *   make known-bugs            (runs $(BUILD)/tests/known_bugs)
 *
 * 1. engine/decode.c: a decoder's result depends on the image it decoded
 *    before.  libjpeg keeps quantization and Huffman tables in the handle
 *    across images (SOI does not reset them, for abbreviated streams), and
 *    decode.c reuses one TurboJPEG handle per worker, so an image that uses
 *    a table slot it does not define decodes with the previous image's
 *    table (a JPEG without DQT: TF refuses it, batchfs serves pixels that
 *    depend on which worker decoded what before), or fails where a fresh
 *    decoder succeeds (a JPEG without DHT: libjpeg's standard tables are
 *    used only when the slot is empty).  Either way a batch's bytes, or
 *    whether it fails, depend on thread count and read order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/decode.h"
#include "engine/error.h"

static unsigned char *slurp(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	unsigned char *b;

	if (!f) {
		perror(p);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	b = malloc(*n ? *n : 1);
	if (!b || fread(b, 1, *n, f) != *n)
		exit(2);
	fclose(f);
	return b;
}

/* Decode target on a fresh decoder and on one that decoded prev first;
 * 1 when the two disagree (result code or pixels). */
static int history_differs(const char *prev, const char *target)
{
	size_t pn, tn;
	unsigned char *p = slurp(prev, &pn), *t = slurp(target, &tn);
	char m1[BFS_ERRMSG_MAX] = "", m2[BFS_ERRMSG_MAX] = "";
	const uint8_t *a, *b;
	uint8_t *copy = NULL;
	int wa = 0, ha = 0, wb = 0, hb = 0, ra, rb, differs;
	bfs_decoder *fresh, *used;

	bfs_decoder_create(&fresh);
	bfs_decoder_create(&used);
	ra = bfs_decode_rgb(fresh, t, tn, 0, &a, &wa, &ha, m1);
	if (ra == 0) {
		copy = malloc((size_t)wa * ha * 3);
		memcpy(copy, a, (size_t)wa * ha * 3);
	}
	(void)bfs_decode_rgb(used, p, pn, 0, &b, &wb, &hb, m2);
	rb = bfs_decode_rgb(used, t, tn, 0, &b, &wb, &hb, m2);
	differs = ra != rb || (ra == 0 && (wa != wb || ha != hb ||
					   memcmp(copy, b, (size_t)wa * ha * 3)));
	printf("%s %s after %s:\n  fresh decoder: %s\n  after it:      %s\n",
	       differs ? "REPRODUCES" : "fixed     ", target, prev,
	       ra ? m1 : "decodes", rb ? m2 : ra ? "decodes" :
	       differs ? "decodes, other pixels" : "decodes, same pixels");
	bfs_decoder_destroy(fresh);
	bfs_decoder_destroy(used);
	free(copy);
	free(p);
	free(t);
	return differs;
}

int main(void)
{
	static const char *const pairs[][2] = {
		{ "tests/data/golden/photo_500x375_420.jpg", "tests/fuzz/known/no-dqt.jpg" },
		{ "tests/data/golden/tfenc_90x67_420.jpg", "tests/fuzz/known/no-dqt.jpg" },
		{ "tests/data/golden/progressive_133x97_420.jpg", "tests/fuzz/known/no-dht.jpg" },
		{ "tests/data/golden/small_20x15_420.jpg",
		  "tests/fuzz/known/decode-crash-848419419362cda71d9d333bbef26e7b9f64c38f" },
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
		bad |= history_differs(pairs[i][0], pairs[i][1]);
	return bad;
}
