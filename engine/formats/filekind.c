/*
 * filekind.c - the kind of a file from its signature (see filekind.h).
 */
#include "engine/formats/filekind.h"

#include <string.h>

#include "engine/base/crc32c.h"

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
	/* A zlib stream (RFC 1950) with a 32 KiB window, as zlib's
	 * compress() and TensorFlow's ZLIB option write it: CMF 0x78 and
	 * one of the four FLG bytes of its levels (no preset dictionary).
	 * Last, so that a TFRecord whose first length starts 78 9c is one. */
	if (n >= 2 && h[0] == 0x78 &&
	    (h[1] == 0x01 || h[1] == 0x5e || h[1] == 0x9c || h[1] == 0xda))
		return "zlib data";
	return NULL;
}

const char *bfs_filekind_advice(const char *kind)
{
	static const struct { const char *kind, *advice; } adv[] = {
		{ "gzip data",
		  "not a GZIP TFRecord or .tar.gz that batchfs could read "
		  "(they are read: see where it breaks with gzip -t FILE)" },
		{ "zlib data",
		  "a ZLIB-compressed TFRecord (TFRecordDataset's compression_type "
		  "\"ZLIB\"), which batchfs does not read: decompress it first "
		  "(python3 -c 'import sys, zlib; sys.stdout.buffer.write("
		  "zlib.decompress(sys.stdin.buffer.read()))' < FILE > NEW)" },
		{ "bzip2 data",
		  "a compressed file, which batchfs does not read: decompress it "
		  "first (bzip2 -dc < FILE > NEW)" },
		{ "xz data",
		  "a compressed file, which batchfs does not read: decompress it "
		  "first (xz -dc < FILE > NEW)" },
		{ "zstd data",
		  "a compressed file, which batchfs does not read: decompress it "
		  "first (zstd -dc < FILE > NEW)" },
	};

	for (size_t i = 0; kind && i < sizeof(adv) / sizeof(adv[0]); i++)
		if (!strcmp(kind, adv[i].kind))
			return adv[i].advice;
	return NULL;
}
