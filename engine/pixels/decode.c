/*
 * decode.c - JPEG to packed RGB8 through TurboJPEG, with TensorFlow's decode
 * settings (see decode.h), and a box of it through libjpeg-turbo's libjpeg
 * API with the same settings.  Owns one tjhandle and one growable scratch
 * buffer per bfs_decoder; never prints.
 */
#include "engine/pixels/decode.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "engine/base/error.h"
#include "engine/formats/filekind.h"

/*
 * TF's defaults: dct_method "" = JDCT_IFAST, fancy_upscaling = true (so no
 * TJFLAG_FASTUPSAMPLE).  STOPONWARNING turns libjpeg warnings (truncation,
 * corrupt entropy data) into errors instead of gray-filled output.
 * LIMITSCANS refuses progressive JPEGs with more than 500 scans, a known
 * CPU-exhaustion trick; real encoders write about 10.
 */
#define DECODE_FLAGS (TJFLAG_FASTDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)
/*
 * Pillow's (BFS_DECODE_PIL): its JPEG decoder keeps libjpeg's defaults
 * unless Image.draft() asked for speed, i.e. dct_method JDCT_ISLOW and
 * do_fancy_upsampling TRUE: TurboJPEG's without TJFLAG_FASTDCT.
 */
#define DECODE_FLAGS_PIL (TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)

struct bfs_decoder {
	tjhandle tj;
	uint8_t *buf;   /* scratch: decoded pixels; grows, never shrinks */
	size_t buf_cap; /* bytes allocated at buf */
	unsigned method; /* BFS_DECODE_TF or BFS_DECODE_PIL */
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

int bfs_decoder_set_method(bfs_decoder *d, unsigned method)
{
	if (!d || (method != BFS_DECODE_TF && method != BFS_DECODE_PIL))
		return -EINVAL;
	d->method = method;
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
/* Pillow's MULDIV255: a * b / 255, rounded, in its integer form. */
static unsigned muldiv255(unsigned a, unsigned b)
{
	unsigned t = a * b + 128;

	return ((t >> 8) + t) >> 8;
}

/*
 * CMYK -> RGB in place as Pillow's Image.open(f).convert("RGB"): it reads
 * every CMYK/YCCK JPEG with Adobe's (inverted) polarity, marker or not
 * (rawmode "CMYK;I": ink = 255 - stored), then R = nk - MULDIV255(ink_c,
 * nk) with nk = 255 - ink_k, i.e. nk = the stored K.
 */
static void cmyk_to_rgb_pil(uint8_t *p, size_t npix)
{
	for (size_t i = 0; i < npix; i++) {
		unsigned k = p[4 * i + 3];

		for (int ch = 0; ch < 3; ch++)
			p[3 * i + ch] = (uint8_t)(k - muldiv255(255u - p[4 * i + ch], k));
	}
}

static void cmyk_to_rgb_tf(uint8_t *p, size_t npix, int adobe)
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

static void cmyk_to_rgb(const bfs_decoder *d, uint8_t *p, size_t npix, int adobe)
{
	if (d->method == BFS_DECODE_PIL)
		cmyk_to_rgb_pil(p, npix);
	else
		cmyk_to_rgb_tf(p, npix, adobe);
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
	                  info.cmyk ? TJPF_CMYK : TJPF_RGB,
	                  d->method == BFS_DECODE_PIL ? DECODE_FLAGS_PIL : DECODE_FLAGS) != 0) {
		bfs_seterr(errmsg, "%s", tjGetErrorStr2(d->tj));
		return BFS_E_DECODE;
	}
	if (info.cmyk)
		cmyk_to_rgb(d, d->buf, (size_t)npix, info.adobe);
	*rgb = d->buf;
	*width = info.width;
	*height = info.height;
	return 0;
}

/* ---- a box, through the libjpeg API -------------------------------------- */

/*
 * libjpeg's error handling as TurboJPEG's tjDecompress2 sets it up with
 * DECODE_FLAGS: errors and warnings (STOPONWARNING) end the decode with
 * libjpeg's own message, nothing is printed, and more than 500 scans
 * (LIMITSCANS) is refused with TurboJPEG's message.
 */
struct box_err {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
};

static void box_output_message(j_common_ptr c)
{
	struct box_err *e = (struct box_err *)(void *)c->err;

	(*c->err->format_message)(c, e->msg);
}

static void box_error_exit(j_common_ptr c)
{
	struct box_err *e = (struct box_err *)(void *)c->err;

	box_output_message(c);
	longjmp(e->jb, 1);
}

static void box_emit_message(j_common_ptr c, int level)
{
	struct box_err *e = (struct box_err *)(void *)c->err;

	if (level < 0) { /* a warning: an error here, as STOPONWARNING */
		box_output_message(c);
		longjmp(e->jb, 1);
	}
}

struct box_progress {
	struct jpeg_progress_mgr pub;
	struct box_err *err;
};

static void box_progress(j_common_ptr c)
{
	struct box_progress *p = (struct box_progress *)(void *)c->progress;

	if (((j_decompress_ptr)c)->input_scan_number > 500) {
		snprintf(p->err->msg, sizeof(p->err->msg),
			 "Progressive JPEG image has more than 500 scans");
		longjmp(p->err->jb, 1);
	}
}

static int scale_ok(int scale)
{
	return scale == 1 || scale == 2 || scale == 4 || scale == 8;
}

/* The box at 1/scale, cut to the scaled image (sw x sh). */
static bfs_box scaled_box(const bfs_box *b, int scale, int sw, int sh)
{
	bfs_box r;
	int x1 = (b->x + b->w + scale - 1) / scale, y1 = (b->y + b->h + scale - 1) / scale;

	r.x = b->x / scale;
	r.y = b->y / scale;
	if (x1 > sw)
		x1 = sw;
	if (y1 > sh)
		y1 = sh;
	if (r.x > x1 - 1)
		r.x = x1 - 1;
	if (r.y > y1 - 1)
		r.y = y1 - 1;
	r.w = x1 - r.x;
	r.h = y1 - r.y;
	return r;
}

/* The widest iMCU of any JPEG, in output pixels: 8 x a sampling factor of 4. */
#define BOX_IMCU_MAX 32

size_t bfs_decode_box_scratch(int width, int height, const bfs_box *box, int scale)
{
	int sw, sh;
	size_t cols;
	bfs_box s;

	if (width < 1 || height < 1 || !box || !scale_ok(scale) || box->x < 0 ||
	    box->y < 0 || box->w < 1 || box->h < 1 || box->x > width - box->w ||
	    box->y > height - box->h)
		return 0;
	sw = (width + scale - 1) / scale;
	sh = (height + scale - 1) / scale;
	s = scaled_box(box, scale, sw, sh);
	/* a margin of three iMCUs each side (one, and two for a progressive
	 * JPEG's smoothing), and the alignment of the left edge; the box's
	 * rows and the image's last one */
	cols = (size_t)s.w + 7 * BOX_IMCU_MAX;
	if (cols > (size_t)sw)
		cols = (size_t)sw;
	return cols * ((size_t)s.h + 1) * 4;
}

int bfs_decode_box(bfs_decoder *d, const uint8_t *jpeg, size_t len, uint64_t max_pixels,
                   const bfs_box *box, int scale, bfs_decoded_box *out, char *errmsg)
{
	return bfs_decode_box_flags(d, jpeg, len, max_pixels, box, scale, 0, out, errmsg);
}

int bfs_decode_box_flags(bfs_decoder *d, const uint8_t *jpeg, size_t len, uint64_t max_pixels,
                         const bfs_box *box, int scale, unsigned flags, bfs_decoded_box *out,
                         char *errmsg)
{
	struct jpeg_decompress_struct cinfo;
	struct box_err jerr;
	struct box_progress prog;
	struct jpeg_info info;
	/* set after setjmp and read after a longjmp */
	volatile int created = 0, err = 0;
	JDIMENSION xoff, cols;
	bfs_box sb;
	size_t row, need;
	uint64_t npix;
	int nc, align, margin, x0, x1, sw, sh, rc;

	if (!d || (!jpeg && len) || !box || !out || !scale_ok(scale) ||
	    (flags & ~BFS_DECODE_BOX_STOP))
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
	if (box->x < 0 || box->y < 0 || box->w < 1 || box->h < 1 ||
	    box->x > info.width - box->w || box->y > info.height - box->h) {
		bfs_seterr(errmsg, "box %dx%d at (%d, %d) is not inside the %dx%d image",
			   box->w, box->h, box->x, box->y, info.width, info.height);
		return -EINVAL;
	}

	memset(&cinfo, 0, sizeof(cinfo));
	cinfo.err = jpeg_std_error(&jerr.pub);
	jerr.pub.error_exit = box_error_exit;
	jerr.pub.emit_message = box_emit_message;
	jerr.pub.output_message = box_output_message;
	jerr.msg[0] = '\0';
	if (setjmp(jerr.jb)) {
		if (!err) {
			bfs_seterr(errmsg, "%s", jerr.msg);
			err = BFS_E_DECODE;
		}
		goto out;
	}
	jpeg_create_decompress(&cinfo);
	created = 1;
	prog.pub.progress_monitor = box_progress;
	prog.err = &jerr;
	cinfo.progress = &prog.pub;
	jpeg_mem_src(&cinfo, jpeg, (unsigned long)len);
	jpeg_read_header(&cinfo, TRUE);
	cinfo.out_color_space = info.cmyk ? JCS_CMYK : JCS_EXT_RGB;
	cinfo.dct_method = d->method == BFS_DECODE_PIL ? JDCT_ISLOW : JDCT_IFAST;
	cinfo.do_fancy_upsampling = TRUE;
	cinfo.scale_num = 1;
	cinfo.scale_denom = (unsigned)scale;
	jpeg_start_decompress(&cinfo);

	nc = cinfo.output_components;
	sw = (int)cinfo.output_width; /* jpeg_crop_scanline changes it */
	sh = (int)cinfo.output_height;
	sb = scaled_box(box, scale, sw, sh);
	/* jpeg_crop_scanline's alignment: one iMCU column */
	align = cinfo.min_DCT_scaled_size *
		(cinfo.comps_in_scan == 1 && cinfo.num_components == 1 ? 1
								     : cinfo.max_h_samp_factor);
	/* A progressive JPEG whose scans stop short (a cut file) has blocks
	 * without AC coefficients, which libjpeg smooths from their
	 * neighbours up to two blocks away (at most two iMCU columns): a crop
	 * makes its edge an image edge, so the margin must hold them too, or
	 * the box's pixels near it differ from the whole decode's (as
	 * fuzz_decode found) */
	margin = cinfo.progressive_mode ? 3 * align : align;
	x0 = sb.x - margin > 0 ? sb.x - margin : 0;
	x1 = sb.x + sb.w + margin < sw ? sb.x + sb.w + margin : sw;
	xoff = (JDIMENSION)x0;
	cols = (JDIMENSION)(x1 - x0);
	if (cols < (JDIMENSION)sw)
		jpeg_crop_scanline(&cinfo, &xoff, &cols);
	row = (size_t)cols * (size_t)nc;
	need = row * ((size_t)sb.h + 1); /* + the last row, below */
	if (reserve(d, need) != 0) {
		bfs_seterr(errmsg, "out of memory for a %dx%d box of a %dx%d image", sb.w, sb.h,
			   info.width, info.height);
		err = -ENOMEM;
		goto out;
	}
	if (sb.y > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)sb.y) != (JDIMENSION)sb.y) {
		bfs_seterr(errmsg, "could not skip to row %d", sb.y);
		err = BFS_E_DECODE;
		goto out;
	}
	while (cinfo.output_scanline < (JDIMENSION)(sb.y + sb.h)) {
		JSAMPROW rp = d->buf + (size_t)(cinfo.output_scanline - (JDIMENSION)sb.y) * row;

		if (jpeg_read_scanlines(&cinfo, &rp, 1) != 1) {
			bfs_seterr(errmsg, "no scanline %u", cinfo.output_scanline);
			err = BFS_E_DECODE;
			goto out;
		}
	}
	/*
	 * The rest is entropy-decoded and checked, as a full decode does.  A
	 * skip to the very end would not do it (libjpeg-turbo then marks the
	 * input done without reading it), so the rows below are skipped but
	 * the last, which is read (its box columns only) after the box.
	 * BFS_DECODE_BOX_STOP wants exactly that skip to the end.
	 */
	if ((flags & BFS_DECODE_BOX_STOP) && cinfo.output_scanline < cinfo.output_height)
		jpeg_skip_scanlines(&cinfo, cinfo.output_height - cinfo.output_scanline);
	if (cinfo.output_scanline + 1 < cinfo.output_height)
		jpeg_skip_scanlines(&cinfo, cinfo.output_height - 1 - cinfo.output_scanline);
	if (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW rp = d->buf + (size_t)sb.h * row;

		if (jpeg_read_scanlines(&cinfo, &rp, 1) != 1) {
			bfs_seterr(errmsg, "no last scanline");
			err = BFS_E_DECODE;
			goto out;
		}
	}
	jpeg_finish_decompress(&cinfo);

	if (info.cmyk)
		for (int y = 0; y < sb.h; y++)
			cmyk_to_rgb(d, d->buf + (size_t)y * row, cols, info.adobe);
	out->rgb = d->buf + (size_t)(sb.x - (int)xoff) * 3;
	out->stride = row;
	out->box = sb;
	out->width = info.width;
	out->height = info.height;
	out->scaled_width = sw;
	out->scaled_height = sh;
	out->scale = scale;
out:
	if (created)
		jpeg_destroy_decompress(&cinfo);
	return err;
}
