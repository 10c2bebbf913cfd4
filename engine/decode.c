/*
 * decode.c - JPEG to packed RGB8 through TurboJPEG, with TensorFlow's decode
 * settings (see decode.h).  Owns one tjhandle and one growable scratch buffer
 * per bfs_decoder; never prints.
 */
#include "engine/decode.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "engine/error.h"
#include "engine/filekind.h"

/*
 * TF's defaults: dct_method "" = JDCT_IFAST, fancy_upscaling = true (so no
 * TJFLAG_FASTUPSAMPLE).  STOPONWARNING turns libjpeg warnings (truncation,
 * corrupt entropy data) into errors instead of gray-filled output.
 * LIMITSCANS refuses progressive JPEGs with more than 500 scans, a known
 * CPU-exhaustion trick; real encoders write about 10.
 */
#define DECODE_FLAGS (TJFLAG_FASTDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)

struct bfs_decoder {
	tjhandle tj;
	uint8_t *buf;   /* scratch: decoded pixels; grows, never shrinks */
	size_t buf_cap; /* bytes allocated at buf */
};

struct jpeg_info {
	int width, height;
	int cmyk;  /* 4-component (CMYK or YCCK) JPEG */
	int adobe; /* an Adobe APP14 marker precedes the first scan */
};

int bfs_decoder_create(bfs_decoder **out)
{
	bfs_decoder *d;

	if (!out)
		return -EINVAL;
	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->tj = tjInitDecompress();
	if (!d->tj) {
		free(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

void bfs_decoder_destroy(bfs_decoder *d)
{
	if (!d)
		return;
	if (d->tj)
		tjDestroy(d->tj);
	free(d->buf);
	free(d);
}

/* NULL when p starts like a JPEG (SOI), else what to say instead: what it
 * looks like, never what it holds (a folder image may be a symlink to any
 * file, and the message reaches stats.json and the log). */
static const char *sniff(const uint8_t *p, size_t len, char *buf, size_t cap)
{
	const char *kind;

	if (len >= 2 && p[0] == 0xFF && p[1] == 0xD8)
		return NULL;
	if (!(kind = bfs_filekind(p, len)))
		return "no JPEG SOI marker";
	snprintf(buf, cap, "looks like %s", kind);
	return buf;
}

/*
 * Walk the marker segments before the first scan, as libjpeg's reader does:
 * note the frame size from SOFn and whether an Adobe APP14 marker is present
 * (libjpeg: APP14 with >= 12 data bytes starting "Adobe" sets
 * saw_Adobe_marker).  Stops quietly at anything malformed; libjpeg will say
 * what is wrong.  Returns 1 when a SOF was found.
 */
static int scan_markers(const uint8_t *p, size_t len, int *w, int *h, int *ncomp, int *adobe)
{
	size_t i = 2;
	int have_sof = 0;

	*adobe = 0;
	while (i + 4 <= len) {
		unsigned marker = p[i + 1];
		size_t seglen, n;
		const uint8_t *seg;

		if (p[i] != 0xFF)
			break;
		if (marker == 0xFF) { /* fill byte */
			i++;
			continue;
		}
		if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) { /* no length */
			i += 2;
			continue;
		}
		if (marker == 0xDA || marker == 0xD9) /* SOS, EOI */
			break;
		seglen = (size_t)p[i + 2] << 8 | p[i + 3];
		if (seglen < 2)
			break;
		seg = p + i + 4;
		n = seglen - 2 < len - (i + 4) ? seglen - 2 : len - (i + 4);
		if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
		    marker != 0xCC && n >= 6 && !have_sof) {
			*h = seg[1] << 8 | seg[2];
			*w = seg[3] << 8 | seg[4];
			*ncomp = seg[5];
			have_sof = 1;
		}
		if (marker == 0xEE && seglen - 2 >= 12 && n >= 5 && !memcmp(seg, "Adobe", 5))
			*adobe = 1;
		i += 2 + seglen;
	}
	return have_sof;
}

static int read_header(bfs_decoder *d, const uint8_t *jpeg, size_t len,
                       struct jpeg_info *info, char *errmsg)
{
	const char *what, *tjmsg;
	char kind[64];
	int subsamp, cs, ncomp = 0, sof_w = 0, sof_h = 0, subsamp_refused;

	if (len == 0) {
		bfs_seterr(errmsg, "empty input (0 bytes)");
		return BFS_E_DECODE;
	}
	what = sniff(jpeg, len, kind, sizeof(kind));
	if (what) {
		bfs_seterr(errmsg, "not a JPEG: %s", what);
		return BFS_E_DECODE;
	}
	if (len > ULONG_MAX) {
		bfs_seterr(errmsg, "JPEG of %zu bytes is too large for TurboJPEG", len);
		return BFS_E_DECODE;
	}
	/*
	 * A fresh handle for every image.  libjpeg keeps quantization and
	 * Huffman tables in the handle across images (abbreviated streams rely
	 * on it), so a JPEG that uses a table it does not define would decode
	 * with the previous image's table, or fail where a fresh decoder
	 * succeeds: a batch's bytes would depend on which worker decoded what
	 * before.  tjInitDecompress + tjDestroy cost 0.65 us here, against
	 * ~1 ms per ImageNet decode.
	 */
	if (d->tj)
		tjDestroy(d->tj);
	if (!(d->tj = tjInitDecompress())) {
		bfs_seterr(errmsg, "out of memory for a TurboJPEG handle");
		return -ENOMEM;
	}
	info->width = info->height = 0;
	if (tjDecompressHeader3(d->tj, jpeg, (unsigned long)len, &info->width, &info->height,
	                        &subsamp, &cs) == 0) {
		/* 2.1 returns 0 and sets nothing for a tables-only stream. */
		if (info->width > 0 && info->height > 0) {
			info->cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
			info->adobe = 0;
			if (info->cmyk)
				scan_markers(jpeg, len, &sof_w, &sof_h, &ncomp, &info->adobe);
			return 0;
		}
		bfs_seterr(errmsg, "no image in JPEG data (%zu bytes, tables only or cut short)", len);
		return BFS_E_DECODE;
	}
	/*
	 * TurboJPEG 2.x's tjDecompressHeader3 returns early on libjpeg errors
	 * without aborting the decompressor, which then misreads the next
	 * header; so any failure here gets a fresh handle (rare; error path).
	 */
	tjmsg = tjGetErrorStr2(d->tj); /* read once: the call clears it */
	bfs_seterr(errmsg, "%s", tjmsg);
	subsamp_refused = strstr(tjmsg, "subsampling") != NULL;
	tjDestroy(d->tj);
	d->tj = tjInitDecompress(); /* NULL is retried on the next call */
	/*
	 * TurboJPEG 2.x also refuses headers whose chroma sampling factors match
	 * none of its TJSAMP_* types, although libjpeg (and so TF) decodes them:
	 * in that case only, read the size from SOF ourselves.
	 */
	if (subsamp_refused &&
	    scan_markers(jpeg, len, &sof_w, &sof_h, &ncomp, &info->adobe) &&
	    sof_w > 0 && sof_h > 0 && (ncomp == 1 || ncomp == 3 || ncomp == 4)) {
		info->width = sof_w;
		info->height = sof_h;
		info->cmyk = ncomp == 4;
		if (errmsg)
			errmsg[0] = '\0';
		return 0;
	}
	return BFS_E_DECODE;
}

int bfs_decode_header(bfs_decoder *d, const uint8_t *jpeg, size_t len,
                      int *width, int *height, char *errmsg)
{
	struct jpeg_info info;
	int rc;

	if (!d || (!jpeg && len) || !width || !height)
		return -EINVAL;
	rc = read_header(d, jpeg, len, &info, errmsg);
	if (rc)
		return rc;
	*width = info.width;
	*height = info.height;
	return 0;
}

/*
 * CMYK -> RGB in place (4 bytes per pixel in, 3 out; writes never overtake
 * reads), exactly as TF's jpeg_mem.cc: integer arithmetic, truncating.
 */
static void cmyk_to_rgb(uint8_t *p, size_t npix, int adobe)
{
	for (size_t i = 0; i < npix; i++) {
		unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];

		if (adobe) {
			p[3 * i + 0] = (uint8_t)(k * c / 255);
			p[3 * i + 1] = (uint8_t)(k * m / 255);
			p[3 * i + 2] = (uint8_t)(k * y / 255);
		} else {
			p[3 * i + 0] = (uint8_t)((255 - k) * (255 - c) / 255);
			p[3 * i + 1] = (uint8_t)((255 - k) * (255 - m) / 255);
			p[3 * i + 2] = (uint8_t)((255 - k) * (255 - y) / 255);
		}
	}
}

static int reserve(bfs_decoder *d, size_t need)
{
	uint8_t *p;

	if (need <= d->buf_cap)
		return 0;
	p = realloc(d->buf, need);
	if (!p)
		return -ENOMEM;
	d->buf = p;
	d->buf_cap = need;
	return 0;
}

int bfs_decode_rgb(bfs_decoder *d, const uint8_t *jpeg, size_t len, uint64_t max_pixels,
                   const uint8_t **rgb, int *width, int *height, char *errmsg)
{
	struct jpeg_info info;
	uint64_t npix, need;
	int rc;

	if (!d || (!jpeg && len) || !rgb || !width || !height)
		return -EINVAL;
	rc = read_header(d, jpeg, len, &info, errmsg);
	if (rc)
		return rc;

	npix = (uint64_t)info.width * (uint64_t)info.height;
	if (max_pixels && npix > max_pixels) {
		bfs_seterr(errmsg, "%dx%d JPEG has %" PRIu64 " pixels, more than the limit of %" PRIu64,
		           info.width, info.height, npix, max_pixels);
		return BFS_E_TOOBIG;
	}
	need = npix * (info.cmyk ? 4 : 3);
	if (!d->tj || need > SIZE_MAX || reserve(d, (size_t)need) != 0) {
		bfs_seterr(errmsg, "out of memory for a %dx%d image", info.width, info.height);
		return -ENOMEM;
	}
	if (tjDecompress2(d->tj, jpeg, (unsigned long)len, d->buf, info.width, 0, info.height,
	                  info.cmyk ? TJPF_CMYK : TJPF_RGB, DECODE_FLAGS) != 0) {
		bfs_seterr(errmsg, "%s", tjGetErrorStr2(d->tj));
		return BFS_E_DECODE;
	}
	if (info.cmyk)
		cmyk_to_rgb(d->buf, (size_t)npix, info.adobe);
	*rgb = d->buf;
	*width = info.width;
	*height = info.height;
	return 0;
}
