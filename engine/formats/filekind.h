/*
 * filekind.h - what a file that is not the shard it was taken for looks
 * like, named from its first bytes, for error messages that must not quote
 * those bytes.
 *
 * A shard directory may hold anything (a symlink to /etc/shadow, with
 * --allow-other, makes its first bytes readable to every user through
 * stats.json and the log), so the scanners and the decoder never print
 * bytes, characters or numbers read from a file that is not a recognized
 * shard.  They name the file's kind instead: "not a TFRecord file: ...; it
 * looks like gzip data".
 */
#ifndef BFS_FILEKIND_H
#define BFS_FILEKIND_H

#include <stddef.h>
#include <stdint.h>

/*
 * The kind of file whose first n bytes are head[0..n) (n may be 0), as a
 * noun phrase: "a JPEG image", "a PNG image", "a GIF image", "a WebP
 * image", "a TIFF image", "a BMP image", "a JPEG 2000 image", "an ISO media
 * (HEIF/AVIF/MP4) file", "a TFRecord file" (the first record header's
 * length CRC holds), "a tar archive" (ustar magic at 257), "gzip data",
 * "bzip2 data", "xz data", "zstd data", "a zip archive", "a 7-Zip
 * archive", "an ELF executable", "a PDF document", "a NumPy .npy file",
 * "zlib data" (a zlib header as zlib and TensorFlow's ZLIB option write
 * it: 78 01, 78 5e, 78 9c or 78 da, tried last); or NULL when no
 * signature matches.  Signatures only: nothing is said of
 * text or of any other content.  Returns a static string.  Pure function:
 * any thread.
 */
const char *bfs_filekind(const uint8_t *head, size_t n);

/*
 * For a kind bfs_filekind names that is compressed data a user may have
 * given as shards (gzip, zlib, bzip2, xz, zstd), what it likely is and
 * what to do, as a phrase that follows "it looks like KIND: ": "a
 * ZLIB-compressed TFRecord (...), which batchfs does not read: decompress
 * it first (python3 -c ...)".  gzip data is read (GZIP TFRecords, .tar.gz),
 * so its phrase is for gzip data that could not be.  NULL for any other
 * kind (and for NULL).  Returns a static string; any thread.
 */
const char *bfs_filekind_advice(const char *kind);

#endif
