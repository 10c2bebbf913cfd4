/*
 * image.c - the format of an encoded image from its bytes, its header, and
 * its decode by the format's module (see image.h).
 */
#include "engine/pixels/image.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/formats/filekind.h"
#include "engine/pixels/png.h"
#include "engine/pixels/webp.h"

bfs_image_format bfs_image_sniff(const uint8_t *p, size_t len)
{
	if (!p)
		return BFS_IMAGE_UNKNOWN;
	if (len >= 2 && p[0] == 0xFF && p[1] == 0xD8)
		return BFS_IMAGE_JPEG;
	if (len >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
		return BFS_IMAGE_PNG;
	if (len >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
		return BFS_IMAGE_WEBP;
	if (len >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6)))
		return BFS_IMAGE_GIF;
	return BFS_IMAGE_UNKNOWN;
}

const char *bfs_image_format_name(bfs_image_format f)
{
	switch (f) {
	case BFS_IMAGE_JPEG: return "JPEG";
	case BFS_IMAGE_PNG:  return "PNG";
	case BFS_IMAGE_WEBP: return "WebP";
	case BFS_IMAGE_GIF:  return "GIF";
	default:             return "image";
	}
}

int bfs_image_header(bfs_decoder *jpeg, const uint8_t *p, size_t len,
		     bfs_image_info *info, char *errmsg)
{
	const char *kind;
	int rc;

	if (!jpeg || (!p && len) || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	if (len == 0) {
		bfs_seterr(errmsg, "empty input (0 bytes)");
		return BFS_E_DECODE;
	}
	info->format = bfs_image_sniff(p, len);
	switch (info->format) {
	case BFS_IMAGE_JPEG:
		rc = bfs_decode_header(jpeg, p, len, &info->width, &info->height, errmsg);
		if (rc)
			return rc;
		info->pixel_bytes = (size_t)info->width * (size_t)info->height * 4;
		return 0;
	case BFS_IMAGE_PNG: {
		bfs_png_info pi;

		if ((rc = bfs_png_header(p, len, &pi, errmsg)))
			return rc;
		info->width = pi.width;
		info->height = pi.height;
		info->pixel_bytes = (size_t)pi.width * (size_t)pi.height * 3;
		info->work_bytes = pi.work_bytes;
		info->u.png.bit_depth = pi.bit_depth;
		info->u.png.color_type = pi.color_type;
		info->u.png.interlaced = pi.interlaced;
		return 0;
	}
	case BFS_IMAGE_WEBP: {
		bfs_webp_info wi;

		if ((rc = bfs_webp_header(p, len, &wi, errmsg)))
			return rc;
		info->width = wi.width;
		info->height = wi.height;
		info->pixel_bytes = (size_t)wi.width * (size_t)wi.height * 3;
		info->work_bytes = wi.work_bytes;
		info->u.webp.has_alpha = wi.has_alpha;
		info->u.webp.lossless = wi.lossless;
		return 0;
	}
	case BFS_IMAGE_GIF:
		bfs_seterr(errmsg, "GIF images are not decoded (not even their first frame); convert them to PNG");
		return BFS_E_FORMAT;
	default:
		kind = bfs_filekind(p, len);
		if (kind)
			bfs_seterr(errmsg, "not a JPEG, PNG or WebP image: looks like %s", kind);
		else
			bfs_seterr(errmsg, "not a JPEG, PNG or WebP image: no image signature");
		return BFS_E_DECODE;
	}
}

int bfs_image_decode(bfs_decoder *jpeg, const uint8_t *p, size_t len,
		     const bfs_image_info *info, uint64_t max_pixels,
		     uint8_t *out, size_t out_cap, const uint8_t **rgb,
		     int *width, int *height, char *errmsg)
{
	uint64_t npix;
	int rc;

	if (!jpeg || (!p && len) || !info || !rgb || !width || !height)
		return -EINVAL;
	npix = (uint64_t)info->width * (uint64_t)info->height;
	if (max_pixels && npix > max_pixels) {
		bfs_seterr(errmsg, "%dx%d %s has %llu pixels, more than the limit of %llu",
			   info->width, info->height, bfs_image_format_name(info->format),
			   (unsigned long long)npix, (unsigned long long)max_pixels);
		return BFS_E_TOOBIG;
	}
	switch (info->format) {
	case BFS_IMAGE_JPEG:
		return bfs_decode_rgb(jpeg, p, len, max_pixels, rgb, width, height, errmsg);
	case BFS_IMAGE_PNG: {
		bfs_png_info pi = {
			.width = info->width, .height = info->height,
			.bit_depth = info->u.png.bit_depth,
			.color_type = info->u.png.color_type,
			.interlaced = info->u.png.interlaced,
			.work_bytes = info->work_bytes,
		};

		if (!out || out_cap < info->pixel_bytes)
			return -EINVAL;
		rc = bfs_png_decode(p, len, &pi, out, out_cap, info->work_bytes, errmsg);
		break;
	}
	case BFS_IMAGE_WEBP: {
		bfs_webp_info wi = {
			.width = info->width, .height = info->height,
			.has_alpha = info->u.webp.has_alpha,
			.lossless = info->u.webp.lossless,
			.work_bytes = info->work_bytes,
		};

		if (!out || out_cap < info->pixel_bytes)
			return -EINVAL;
		rc = bfs_webp_decode(p, len, &wi, out, out_cap, errmsg);
		break;
	}
	default:
		return -EINVAL; /* bfs_image_header refused it */
	}
	if (rc)
		return rc;
	*rgb = out;
	*width = info->width;
	*height = info->height;
	return 0;
}

uint64_t bfs_image_scratch_max(uint64_t pixels)
{
	uint64_t jpeg = pixels * 4, png, webp;
	uint64_t side;

	/* PNG: 3 per pixel plus rows of at most BFS_PNG_MAX_SIDE pixels of
	 * 8 bytes (16-bit RGBA), plus an interlaced 4-bit image whole */
	side = pixels < BFS_PNG_MAX_SIDE ? pixels : BFS_PNG_MAX_SIDE;
	png = pixels * 3 + bfs_png_work_bytes((uint32_t)side, 1, 16, 6, 0) +
	      pixels / 2 + 1;
	/* WebP: the lossless case, with the widest row */
	side = pixels < BFS_WEBP_MAX_SIDE ? pixels : BFS_WEBP_MAX_SIDE;
	webp = pixels * 3 + 256 * side + (128u << 10) + 5 * pixels;
	if (png > jpeg)
		jpeg = png;
	return webp > jpeg ? webp : jpeg;
}
