/*
 * gzindex.h - random access into a gzip file through an index of restart
 * points (zlib's zran technique), for GZIP TFRecord shards (what
 * tf.data.TFRecordDataset(compression_type="GZIP") reads) and .tar.gz
 * WebDataset shards.
 *
 * bfs_gzindex_build inflates the whole file once.  Every BFS_GZ_SPAN bytes
 * of output, at the next deflate block boundary once BFS_GZ_SPAN / 8 bytes
 * of input are past too, it keeps a restart point: where that block starts
 * in the compressed file (to the bit) and the 32 KiB of output before it,
 * which the block's back-references may reach.  The start of the first
 * gzip member is a restart point, which needs no window, and so is that of
 * any other member a span of output past the last point.  A read at
 * uncompressed offset X then inflates from the last point at or before X:
 * BFS_GZ_SPAN bytes (more for data that compress better than 8:1, at most
 * BFS_GZ_SPAN / 8 bytes of input), plus the member headers and trailers on
 * the way.  Memory is bounded by the compressed size, not by what it
 * inflates to: windows take at most 1/16 of the compressed size, and the
 * points 40 bytes per BFS_GZ_SPAN of output, kept for as long as the index.
 * An inflation limit (max_ratio) refuses a gzip bomb early.
 *
 * Concatenated gzip members (pigz, bgzip, `cat a.gz b.gz`) are one stream,
 * as gzip -d and TensorFlow read them.  Each member's CRC-32 and ISIZE are
 * checked while building.  A damaged file (bad deflate data, a CRC or
 * ISIZE mismatch, a cut member, bytes after the last member that are not
 * another member) gives an index of the good part only:
 * bfs_gzindex_complete is 0, bfs_gzindex_size is how far the data was
 * good (for a CRC or ISIZE mismatch, the start of that member, since none
 * of its bytes can be trusted), and bfs_gzindex_damage says what and
 * where; reads past it fail with that message.
 *
 * Nothing is ever allocated from a length in the file: inflate works in
 * fixed 64 KiB buffers and the window, whatever the data claim to hold.
 *
 * Threads: an index is immutable once built or loaded, so any number of
 * cursors (one per thread) may read through it at once.  A cursor is one
 * thread's.
 */
#ifndef BFS_GZINDEX_H
#define BFS_GZINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/reader.h"

/* Uncompressed bytes between restart points, and the window each keeps. */
#define BFS_GZ_SPAN   (4u << 20)
#define BFS_GZ_WINDOW 32768u
/* Output that may come out of any input before max_ratio is applied, so
 * that a small file is not judged by its first, often repetitive, bytes. */
#define BFS_GZ_RATIO_FLOOR (1u << 20)

typedef struct bfs_gzindex bfs_gzindex;
typedef struct bfs_gzcursor bfs_gzcursor;

/* 1 if head[0..n) starts like a gzip member (1f 8b 08).  Pure. */
int bfs_gz_probe(const uint8_t *head, size_t n);

/*
 * The first bytes of the uncompressed data of the gzip file open on fd
 * (csize bytes), for format detection: up to n bytes into out, *got of
 * them (fewer when the data are shorter or damaged early).  Returns 0, or
 * -EINVAL (not gzip), -ENOMEM, -errno.  Reads at most 64 KiB of the file.
 */
int bfs_gz_peek(int fd, uint64_t csize, uint8_t *out, size_t n, size_t *got);

/*
 * Inflate the gzip file open on fd (csize bytes; only pread is used) and
 * index it; span: bytes between points (0: BFS_GZ_SPAN; tests use less).
 * flags: BFS_GZ_KEEP_BAD_CRC serves a member whose CRC-32 or ISIZE fails
 * all the same (for data whose records carry CRCs of their own, as
 * TFRecords do): the index is complete and bfs_gzindex_damage names the
 * first such member.
 * max_ratio (0: no limit) bounds what the file may inflate to: as soon as
 * the output is over BFS_GZ_RATIO_FLOOR bytes and over max_ratio times the
 * compressed bytes read so far, inflating stops and the file is refused
 * with -EFBIG (a gzip bomb), errmsg giving the limit, the bytes out and in,
 * the ratio reached and the option that sets it (--max-inflate-ratio).  So
 * a file that indexes inflates to at most max(max_ratio * csize,
 * BFS_GZ_RATIO_FLOOR) bytes, plus 64 KiB.
 * *out receives the index, damaged or not (see above).  Returns 0, or
 * -ENOMEM, -errno (a failed read), -EFBIG (see max_ratio), -EINVAL (NULL
 * out, or a file that does not start with a gzip header); on an error *out
 * is NULL and errmsg says why.  errmsg (BFS_ERRMSG_MAX bytes, may be
 * NULL): on success of a damaged file the same text as bfs_gzindex_damage.
 */
#define BFS_GZ_KEEP_BAD_CRC 1
int bfs_gzindex_build(int fd, uint64_t csize, uint32_t span, int flags,
		      uint32_t max_ratio, bfs_gzindex **out, char *errmsg);

void bfs_gzindex_free(bfs_gzindex *idx); /* accepts NULL */

/* Uncompressed bytes the index serves (all of them when complete). */
uint64_t bfs_gzindex_size(const bfs_gzindex *idx);
int bfs_gzindex_complete(const bfs_gzindex *idx);
/* What is damaged and where ("" when nothing is; with BFS_GZ_KEEP_BAD_CRC
 * a complete index may name a member whose CRC failed); lives with idx. */
const char *bfs_gzindex_damage(const bfs_gzindex *idx);
size_t bfs_gzindex_npoints(const bfs_gzindex *idx);
/* The compressed size the index was built for. */
uint64_t bfs_gzindex_csize(const bfs_gzindex *idx);

/*
 * A complete index as bytes, to store (the source's index_put), and back.
 * save: *blob is malloc()ed, the caller frees it; 0, -EINVAL (a damaged
 * index is not saved) or -ENOMEM.  load: every field is checked (points in
 * order, inside csize, bits 0..7, windows at most 32 KiB and no longer
 * than the output before them, the blob's length exact); 0, BFS_E_CORRUPT
 * (errmsg says what) or -ENOMEM.
 */
int bfs_gzindex_save(const bfs_gzindex *idx, void **blob, size_t *len);
int bfs_gzindex_load(const void *blob, size_t len, uint64_t csize,
		     bfs_gzindex **out, char *errmsg);

/*
 * A cursor reads uncompressed bytes through idx from the gzip file open on
 * whatever fd each read names (the caller checks it is the indexed file).
 * It keeps its inflate state between reads, so a read just after the
 * previous one goes on from there instead of from a restart point.
 * Memory: about 200 KiB (zlib's state and window, 64 KiB in and out).
 * create: 0 or -ENOMEM.  destroy accepts NULL.
 */
int bfs_gzcursor_create(bfs_gzcursor **out);
void bfs_gzcursor_destroy(bfs_gzcursor *c);

/*
 * Read exactly n bytes at uncompressed offset off into buf.  Returns 0,
 * -EIO (past the end of the data, or past the damage of a damaged index:
 * errmsg says which), BFS_E_CORRUPT (the compressed bytes no longer
 * inflate as when indexed: errmsg names the compressed offset and zlib's
 * message), -errno from pread, -ENOMEM.
 */
int bfs_gzcursor_read(bfs_gzcursor *c, const bfs_gzindex *idx, int fd,
		      void *buf, size_t n, uint64_t off, char *errmsg);

/* A bfs_reader over a cursor, an index and an fd (held in *ctx, which must
 * outlive the reader).  Its errors are -EIO with the cursor's message. */
typedef struct {
	bfs_gzcursor *cursor;
	const bfs_gzindex *idx;
	int fd;
} bfs_gz_reader_ctx;
bfs_reader bfs_gz_reader(bfs_gz_reader_ctx *ctx);

#endif
