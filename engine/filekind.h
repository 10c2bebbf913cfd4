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
 * archive", "an ELF executable", "a PDF document", "a NumPy .npy file";
 * or NULL when no signature matches.  Signatures only: nothing is said of
 * text or of any other content.  Returns a static string.  Pure function:
 * any thread.
 */
const char *bfs_filekind(const uint8_t *head, size_t n);

#endif
