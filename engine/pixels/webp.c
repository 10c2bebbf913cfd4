/*
 * webp.c - WebP to packed RGB8 with libwebp's default RGB output (see
 * webp.h): headers from WebPGetFeatures, pixels from WebPDecodeRGBInto
 * straight into the caller's buffer.
 */
#include "engine/pixels/webp.h"

#include <errno.h>
#include <string.h>

#include <webp/decode.h>

#include "engine/base/error.h"

size_t bfs_webp_work_bytes(int width, int height, int has_alpha, int lossless)
{
	size_t w = width > 0 ? (size_t)width : 0;
	size_t px = w * (size_t)(height > 0 ? height : 0);
	size_t n = 256 * w + (128u << 10);

	if (lossless)
		n += 5 * px;
	else if (has_alpha)
		n += 4 * px;
	return n;
}

static const char *status_text(VP8StatusCode st)
{
	switch (st) {
	case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
	case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
	case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
	case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
	case VP8_STATUS_SUSPENDED: return "suspended";
	case VP8_STATUS_USER_ABORT: return "aborted";
	case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (cut short?)";
	default: return "unknown error";
	}
}

int bfs_webp_header(const uint8_t *p, size_t len, bfs_webp_info *info,
		    char *errmsg)
{
	WebPBitstreamFeatures f;
	VP8StatusCode st;

	if ((!p && len) || !info)
		return -EINVAL;
	if (len < 12 || memcmp(p, "RIFF", 4) || memcmp(p + 8, "WEBP", 4)) {
		bfs_seterr(errmsg, "not a WebP: no RIFF/WEBP header");
		return BFS_E_DECODE;
	}
	st = WebPGetFeatures(p, len, &f);
	if (st != VP8_STATUS_OK) {
		bfs_seterr(errmsg, "WebP header: %s", status_text(st));
		return BFS_E_DECODE;
	}
	if (f.has_animation) {
		bfs_seterr(errmsg, "animated WebP is not supported (only still images are decoded)");
		return BFS_E_DECODE;
	}
	if (f.width <= 0 || f.height <= 0 || f.width > BFS_WEBP_MAX_SIDE ||
	    f.height > BFS_WEBP_MAX_SIDE) {
		bfs_seterr(errmsg, "WebP header: size %dx%d out of range", f.width, f.height);
		return BFS_E_DECODE;
	}
	info->width = f.width;
	info->height = f.height;
	info->has_alpha = f.has_alpha != 0;
	info->lossless = f.format == 2;
	info->work_bytes = bfs_webp_work_bytes(f.width, f.height, info->has_alpha,
					       info->lossless);
	return 0;
}

int bfs_webp_decode(const uint8_t *p, size_t len, const bfs_webp_info *info,
		    uint8_t *out, size_t out_len, char *errmsg)
{
	WebPDecoderConfig cfg;
	VP8StatusCode st;
	size_t stride;

	if ((!p && len) || !info || !out || info->width <= 0 || info->height <= 0)
		return -EINVAL;
	stride = (size_t)info->width * 3;
	if (out_len / (size_t)info->height < stride)
		return -EINVAL;
	if (!WebPInitDecoderConfig(&cfg))
		return -EINVAL; /* a libwebp of another ABI */
	/* the defaults of WebPDecodeRGBInto, into our buffer */
	cfg.output.colorspace = MODE_RGB;
	cfg.output.is_external_memory = 1;
	cfg.output.u.RGBA.rgba = out;
	cfg.output.u.RGBA.stride = (int)stride;
	cfg.output.u.RGBA.size = stride * (size_t)info->height;
	st = WebPDecode(p, len, &cfg);
	if (st == VP8_STATUS_OK && (cfg.output.width != info->width ||
				    cfg.output.height != info->height)) {
		bfs_seterr(errmsg, "WebP decoded to %dx%d, not the %dx%d of its header",
			   cfg.output.width, cfg.output.height, info->width, info->height);
		WebPFreeDecBuffer(&cfg.output);
		return BFS_E_DECODE;
	}
	WebPFreeDecBuffer(&cfg.output); /* frees nothing of ours */
	if (st == VP8_STATUS_OK)
		return 0;
	bfs_seterr(errmsg, "WebP: %s", status_text(st));
	return st == VP8_STATUS_OUT_OF_MEMORY ? -ENOMEM : BFS_E_DECODE;
}
