/*
 * tfrecord.h - TFRecord framing: index a shard from its record headers,
 * check one payload's CRC, append records.
 *
 * On disk each record is
 *   u64 length | u32 masked_crc32c(length) | data[length] | u32 masked_crc32c(data)
 * all little-endian; see bfs_crc32c_mask() for the mask.
 *
 * No global state: every function may be called from any thread, on
 * different file descriptors concurrently.
 */
#ifndef BFS_TFRECORD_H
#define BFS_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/reader.h"

/* Bytes of framing around each payload: 12 before it, 4 after it. */
#define BFS_TFRECORD_HEADER 12
#define BFS_TFRECORD_FOOTER 4

typedef struct {
	uint64_t offset; /* file offset of data[0] (record start + 12) */
	uint64_t length; /* payload bytes */
	int status;      /* 0, or BFS_E_CRC: the length CRC was bad but the
			  * length was proven by the next header validating
			  * (or the record ending exactly at EOF) -- a bad
			  * record that keeps its slot */
	const uint8_t *data; /* the payload's first data_len bytes, as far as
			  * the scan has read them anyway (0 <= data_len <=
			  * length; data may be NULL when data_len is 0): a
			  * caller may look into the record without a read */
	size_t data_len;
} bfs_tfrecord_entry;

/* Called once per record, in file order.  `e` is valid only during the
 * call.  A nonzero return stops the scan and is returned by it. */
typedef int (*bfs_tfrecord_scan_fn)(void *ctx, const bfs_tfrecord_entry *e);

/*
 * Index the shard open on `fd` (any file position; only pread is used) of
 * `file_size` bytes by reading the 12-byte record headers only: runs of
 * small records are read in 256 KiB chunks, and after a record of 16 KiB or
 * more the next header is fetched with one 4 KiB pread, so JPEG-sized
 * payloads are skipped, not read.  Payload CRCs are NOT checked here (see
 * bfs_tfrecord_check).  Allocates one 256 KiB buffer for the call.
 *
 * Calls fn(ctx, entry) for every complete record.  Returns:
 *   0                when the last record ends exactly at file_size
 *                    (an empty file is 0 records and success);
 *   BFS_E_TRUNCATED  when the file ends inside a header or a record (also
 *                    for an absurd length whose CRC holds; nothing is ever
 *                    allocated from a length field);
 *   BFS_E_CRC        when a length CRC fails and the length cannot be
 *                    proven (see bfs_tfrecord_entry.status);
 *   -errno           when pread fails; -EIO if the file is shorter than
 *                    file_size says; -ENOMEM;
 *   fn's nonzero return value, unchanged.
 * In every error case fn has been called for each complete record before
 * the bad one, and errmsg (BFS_ERRMSG_MAX bytes, may be NULL) names the
 * record index and the byte offset of its header, e.g. "record 41 at offset
 * 123456: length 9000 runs past end of file (size 130000)".
 */
int bfs_tfrecord_scan(int fd, uint64_t file_size, bfs_tfrecord_scan_fn fn,
		      void *ctx, char *errmsg);

/*
 * The same scan over any byte source: `src` holds file_size bytes (for a
 * gzip shard, its uncompressed bytes, gzindex.h).  A read that src fails
 * with a message of its own (a damaged gzip stream) ends the scan with
 * that message after the record index and offset.
 */
int bfs_tfrecord_scan_reader(const bfs_reader *src, uint64_t file_size,
			     bfs_tfrecord_scan_fn fn, void *ctx, char *errmsg);

/*
 * Check a payload against the masked CRC stored after it: buf holds
 * length + 4 bytes as read by pread at entry->offset.  Returns 0, or
 * BFS_E_CRC with the stored and computed values in errmsg.
 */
int bfs_tfrecord_check(const uint8_t *buf, uint64_t length, char *errmsg);

/*
 * Append one record (header, data, footer) at the current position of fd
 * with one writev, retrying partial writes and EINTR.  data may be NULL
 * when length is 0.  Returns 0 or -errno; after an error the file may hold
 * a partial record.  Unbuffered, so records from different threads must
 * not share an fd.
 */
int bfs_tfrecord_write(int fd, const void *data, uint64_t length);

#endif
