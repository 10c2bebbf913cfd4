/*
 * refbatch - the reference batch for a list of JPEG files, made directly
 * with the decode and resize modules on one thread: no shards, no engine,
 * no FUSE.  Integration tests compare what the mount serves with this.
 *
 *   refbatch H W float32|uint8 OUT.npy JPEG...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pixels/decode.h"
#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "engine/pixels/resize.h"

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
	int h, w, n;
	size_t sample;
	uint64_t shape[4];
	char hdr[256], msg[BFS_ERRMSG_MAX];
	unsigned char *out;
	FILE *f;

	if (argc < 6) {
		fprintf(stderr, "usage: refbatch H W float32|uint8 OUT.npy JPEG...\n");
		return 2;
	}
	h = atoi(argv[1]);
	w = atoi(argv[2]);
	dt = strcmp(argv[3], "uint8") == 0 ? BFS_DTYPE_UINT8 : BFS_DTYPE_FLOAT32;
	n = argc - 5;
	sample = (size_t)h * w * 3 * bfs_dtype_size(dt);
	out = malloc(sample * (size_t)n);
	if (!out || bfs_decoder_create(&dec))
		return 1;
	for (int i = 0; i < n; i++) {
		const uint8_t *rgb;
		size_t len;
		unsigned char *jpeg = slurp(argv[5 + i], &len);
		int sw, sh, err;
		void *scratch;

		if (!jpeg) {
			fprintf(stderr, "refbatch: cannot read %s\n", argv[5 + i]);
			return 1;
		}
		err = bfs_decode_rgb(dec, jpeg, len, 0, &rgb, &sw, &sh, msg);
		if (err) {
			fprintf(stderr, "refbatch: %s: %s\n", argv[5 + i], msg);
			return 1;
		}
		scratch = malloc(bfs_resize_scratch_size(sw, sh, w, h));
		if (!scratch || bfs_resize_rgb(rgb, sw, sh, (size_t)sw * 3,
					       out + sample * (size_t)i, w, h,
					       dt, scratch))
			return 1;
		free(scratch);
		free(jpeg);
	}
	shape[0] = (uint64_t)n;
	shape[1] = (uint64_t)h;
	shape[2] = (uint64_t)w;
	shape[3] = 3;
	int hl = bfs_npy_header(hdr, sizeof(hdr), bfs_dtype_descr(dt), shape, 4);
	if (hl <= 0 || !(f = fopen(argv[4], "wb")) ||
	    fwrite(hdr, 1, (size_t)hl, f) != (size_t)hl ||
	    fwrite(out, sample, (size_t)n, f) != (size_t)n || fclose(f))
		return 1;
	bfs_decoder_destroy(dec);
	free(out);
	return 0;
}
