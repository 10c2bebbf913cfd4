/*
 * rrcref - the RandomResizedCrop reference a mount's samples are compared
 * with: decode the whole image (a JPEG with bfs_decode_rgb; PNG and WebP
 * through image.h, whose decoders have their own goldens), reduce it when its
 * shorter side is above CACHE_RES (0: never), cut the box out into a
 * buffer of its own, resize that (bilinear, half-pixel, no antialias) and
 * mirror it when flipped.  One thread, no engine, no cache, no box
 * decoding.  Integration tests (test_rrc.sh) read each sample's box from
 * index.json and compare.
 *
 *   rrcref H W float32|uint8|float16 CACHE_RES OUT.npy JPEG Y X BH BW FLIP ...
 *
 * writes OUT.npy of shape (n, H, W, 3), one sample per (JPEG, box, flip).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pixels/decode.h"
#include "engine/base/error.h"
#include "engine/pixels/image.h"
#include "engine/base/npy.h"
#include "engine/pixels/resize.h"
#include "engine/pixels/rrc.h"

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n) {
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	bfs_decoder *dec = NULL;
	bfs_dtype dt;
	int h, w, res, n;
	size_t es, sample;
	uint8_t *out;
	char hdr[256];
	FILE *f;

	if (argc < 6 || (argc - 6) % 6 != 0) {
		fprintf(stderr, "usage: rrcref H W float32|uint8|float16 CACHE_RES OUT.npy "
				"[JPEG Y X BH BW FLIP]...\n");
		return 2;
	}
	h = atoi(argv[1]);
	w = atoi(argv[2]);
	dt = !strcmp(argv[3], "uint8") ? BFS_DTYPE_UINT8
	     : !strcmp(argv[3], "float16") ? BFS_DTYPE_FLOAT16 : BFS_DTYPE_FLOAT32;
	res = atoi(argv[4]);
	n = (argc - 6) / 6;
	es = bfs_dtype_size(dt);
	sample = (size_t)h * w * 3 * es;
	if (!(out = malloc(sample * (size_t)(n ? n : 1))) || bfs_decoder_create(&dec))
		return 1;
	for (int k = 0; k < n; k++) {
		char **a = argv + 6 + 6 * k, msg[BFS_ERRMSG_MAX] = "";
		bfs_rrc_box box = { atoi(a[1]), atoi(a[2]), atoi(a[3]), atoi(a[4]), 0 }, rb;
		int flip = atoi(a[5]), sw, sh, rw, rh;
		const uint8_t *rgb;
		uint8_t *img, *crop, *dst = out + (size_t)k * sample;
		void *scratch;
		size_t len;
		unsigned char *jpeg = slurp(a[0], &len);

		bfs_image_info info;
		uint8_t *pix = NULL;
		int err = !jpeg ? -EIO : bfs_image_header(dec, jpeg, len, &info, msg);

		if (!err && info.format == BFS_IMAGE_JPEG)
			err = bfs_decode_rgb(dec, jpeg, len, 0, &rgb, &sw, &sh, msg);
		else if (!err)
			err = !(pix = malloc(info.pixel_bytes)) ? -ENOMEM
				: bfs_image_decode(dec, jpeg, len, &info, 0, pix, info.pixel_bytes,
						   &rgb, &sw, &sh, msg);
		if (err) {
			fprintf(stderr, "rrcref: %s: %s\n", a[0], jpeg ? msg : "cannot read");
			return 1;
		}
		/* the copy the cache would keep */
		bfs_rrc_reduced_size(sw, sh, res, &rw, &rh);
		img = malloc((size_t)rw * rh * 3);
		scratch = malloc(bfs_resize_scratch_size(sw, sh, rw > w ? rw : w, rh) +
				 bfs_resize_scratch_size(1, 1, w, h));
		if (!img || !scratch)
			return 1;
		if (rw != sw || rh != sh)
			bfs_resize_rgb(rgb, sw, sh, (size_t)sw * 3, img, rw, rh, BFS_DTYPE_UINT8,
				       scratch);
		else
			memcpy(img, rgb, (size_t)sw * sh * 3);
		/* the box, in the copy, cut out into its own buffer */
		bfs_rrc_map_box(&box, sw, sh, rw, rh, &rb);
		if (!(crop = malloc((size_t)rb.w * rb.h * 3)))
			return 1;
		for (int y = 0; y < rb.h; y++)
			memcpy(crop + (size_t)y * rb.w * 3, img + ((size_t)(rb.y + y) * rw + rb.x) * 3,
			       (size_t)rb.w * 3);
		free(scratch);
		if (!(scratch = malloc(bfs_resize_scratch_size(rb.w, rb.h, w, h))) ||
		    bfs_resize_rgb(crop, rb.w, rb.h, (size_t)rb.w * 3, dst, w, h, dt, scratch)) {
			fprintf(stderr, "rrcref: resize of %s failed\n", a[0]);
			return 1;
		}
		if (flip) /* mirror each row, pixel by pixel */
			for (int y = 0; y < h; y++) {
				uint8_t *row = dst + (size_t)y * w * 3 * es, t[12];

				for (int x = 0; x < w / 2; x++) {
					uint8_t *p = row + (size_t)x * 3 * es;
					uint8_t *q = row + (size_t)(w - 1 - x) * 3 * es;

					memcpy(t, p, 3 * es);
					memcpy(p, q, 3 * es);
					memcpy(q, t, 3 * es);
				}
			}
		free(scratch);
		free(crop);
		free(img);
		free(pix);
		free(jpeg);
	}
	{
		uint64_t shape[4] = { (uint64_t)n, (uint64_t)h, (uint64_t)w, 3 };
		int hl = bfs_npy_header(hdr, sizeof(hdr), bfs_dtype_descr(dt), shape, 4);

		if (hl <= 0 || !(f = fopen(argv[5], "wb")) || fwrite(hdr, 1, (size_t)hl, f) != (size_t)hl ||
		    fwrite(out, sample, (size_t)n, f) != (size_t)n || fclose(f))
			return 1;
	}
	bfs_decoder_destroy(dec);
	free(out);
	return 0;
}
