/*
 * filekind.c - the kind of a file from its signature (see filekind.h).
 */
#include "engine/filekind.h"

#include <string.h>

#include "engine/crc32c.h"

static int at(const uint8_t *h, size_t n, size_t off, const void *sig,
	      size_t len)
{
	return n >= off + len && !memcmp(h + off, sig, len);
}

const char *bfs_filekind(const uint8_t *h, size_t n)
{
	static const struct { size_t off; const char *sig; size_t len;
			      const char *kind; } sigs[] = {
		{ 0, "\xff\xd8\xff", 3, "a JPEG image" },
		{ 0, "\x89PNG\r\n\x1a\n", 8, "a PNG image" },
		{ 0, "GIF87a", 6, "a GIF image" },
		{ 0, "GIF89a", 6, "a GIF image" },
		{ 0, "II*\0", 4, "a TIFF image" },
		{ 0, "MM\0*", 4, "a TIFF image" },
		{ 0, "\0\0\0\x0cjP  ", 8, "a JPEG 2000 image" },
		{ 4, "ftyp", 4, "an ISO media (HEIF/AVIF/MP4) file" },
		{ 257, "ustar", 5, "a tar archive" },
		{ 0, "\x1f\x8b", 2, "gzip data" },
		{ 0, "BZh", 3, "bzip2 data" },
		{ 0, "\xfd" "7zXZ\0", 6, "xz data" },
		{ 0, "\x28\xb5\x2f\xfd", 4, "zstd data" },
		{ 0, "PK\x03\x04", 4, "a zip archive" },
		{ 0, "7z\xbc\xaf\x27\x1c", 6, "a 7-Zip archive" },
		{ 0, "\x7f" "ELF", 4, "an ELF executable" },
		{ 0, "%PDF-", 5, "a PDF document" },
		{ 0, "\x93NUMPY", 6, "a NumPy .npy file" },
		{ 0, "BM", 2, "a BMP image" },
	};
	if (!h)
		return NULL;
	if (at(h, n, 0, "RIFF", 4) && at(h, n, 8, "WEBP", 4))
		return "a WebP image";
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (at(h, n, sigs[i].off, sigs[i].sig, sigs[i].len))
			return sigs[i].kind;
	if (n >= 12 && bfs_crc32c_mask(bfs_crc32c(0, h, 8)) ==
			       ((uint32_t)h[8] | (uint32_t)h[9] << 8 |
				(uint32_t)h[10] << 16 | (uint32_t)h[11] << 24))
		return "a TFRecord file";
	return NULL;
}
