/*
 * daliidx.h - NVIDIA DALI's TFRecord index files (what its tfrecord2idx,
 * and the tfrecord package's, write: for each record of a shard, in file
 * order, "OFFSET SIZE" in decimal, OFFSET where the record's 12-byte
 * header starts and SIZE the whole record, header and trailing CRC
 * included), read so that a shard that has one need not be scanned.
 *
 * An index is used only when it describes the shard exactly: the records
 * tile it from byte 0 to its last byte, each one record's framing long
 * (at least 16 bytes) and each payload at most 4 GiB - 1 bytes.  What it
 * cannot prove -- that each record's bytes are the ones it was made for --
 * the payload CRC checked at every read catches: a record whose offset
 * does not hold it fails that check, never gives other bytes.
 *
 * Threads: pure functions.
 */
#ifndef BFS_DALIIDX_H
#define BFS_DALIIDX_H

#include <stddef.h>
#include <stdint.h>

/* The largest index file read (about 40 bytes a record: 25 million
 * records), so that a file that is not one is not read whole. */
#define BFS_DALIIDX_MAX (1u << 30)

typedef struct {
	uint64_t offset;   /* of the record's payload (its header + 12) */
	uint32_t length;   /* payload bytes (SIZE - 16) */
} bfs_daliidx_rec;

/*
 * Parse text[0..len) (numbers separated by ASCII white space, in pairs, as
 * DALI reads them) for a shard of shard_size bytes.  On success *recs is a
 * malloc()ed array of *n records (NULL when *n is 0: an empty shard) that
 * the caller frees.  Returns 0, or BFS_E_FORMAT (not numbers in pairs; a
 * number over 2^63; a NUL or another byte: errmsg says where), or
 * BFS_E_CORRUPT (the records do not tile the shard: errmsg names the
 * record and what does not hold), or -ENOMEM.
 */
int bfs_daliidx_parse(const char *text, size_t len, uint64_t shard_size,
		      bfs_daliidx_rec **recs, size_t *n, char *errmsg);

#endif
