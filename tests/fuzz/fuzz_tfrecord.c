/*
 * fuzz_tfrecord.c - TFRecord framing from any bytes: bfs_tfrecord_scan over
 * a memfd, then bfs_tfrecord_check and bfs_example_find on every record it
 * reports, as bfs_source_read does; plus CRC-32C hardware == software.
 *
 * Input: byte 0 is a mode; the rest is the shard file.  Mode bit 0 repairs
 * the CRCs of every header and payload along the record chain first, so the
 * fuzzer reaches multi-record files and the Example parser without having
 * to forge CRC-32C.  Bit 1 tells the scan the file is 1..64 bytes longer
 * than it is (a shard that shrank under the scan: must be -EIO, never a
 * read past the end).
 *
 * Properties: every reported record lies inside the file, records are
 * contiguous from offset 12, the result is one of the documented codes, 0
 * only when the last record ends at EOF, and errmsg is always terminated.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/formats/tfrecord.h"
#include "tests/fuzz/fuzz.h"

typedef struct {
	int fd;
	uint64_t size, real_size, next; /* next: where the next record must start */
	uint64_t records;
	uint8_t *buf;
	size_t cap;
} scan_ctx;

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t masked(const uint8_t *p, size_t n)
{
	return bfs_crc32c_mask(bfs_crc32c(0, p, n));
}

/* Rewrite the CRCs of every record along the chain while it fits. */
static void repair(uint8_t *p, size_t n)
{
	size_t pos = 0;

	while (n - pos >= BFS_TFRECORD_HEADER + BFS_TFRECORD_FOOTER) {
		uint64_t len = le64(p + pos);

		if (len > n - pos - BFS_TFRECORD_HEADER - BFS_TFRECORD_FOOTER)
			break;
		put_le32(p + pos + 8, masked(p + pos, 8));
		put_le32(p + pos + 12 + len, masked(p + pos + 12, (size_t)len));
		pos += BFS_TFRECORD_HEADER + (size_t)len + BFS_TFRECORD_FOOTER;
	}
}

static int on_record(void *arg, const bfs_tfrecord_entry *e)
{
	scan_ctx *c = arg;
	char msg[BFS_ERRMSG_MAX];
	const uint8_t *img;
	size_t img_len;
	int64_t label = -1;
	ssize_t got;
	int r;

	CHECK(e->offset == c->next + BFS_TFRECORD_HEADER,
	      "record %llu at %llu, expected %llu", (unsigned long long)c->records,
	      (unsigned long long)e->offset,
	      (unsigned long long)c->next + BFS_TFRECORD_HEADER);
	CHECK(e->length <= c->real_size &&
	      e->offset + e->length + BFS_TFRECORD_FOOTER <= c->real_size,
	      "record %llu (offset %llu, length %llu) runs past EOF %llu",
	      (unsigned long long)c->records, (unsigned long long)e->offset,
	      (unsigned long long)e->length, (unsigned long long)c->real_size);
	CHECK(e->status == 0 || e->status == BFS_E_CRC, "status %d", e->status);
	c->next = e->offset + e->length + BFS_TFRECORD_FOOTER;
	c->records++;

	/* Read it back and check it the way bfs_source_read does. */
	if (e->length + BFS_TFRECORD_FOOTER > c->cap) {
		free(c->buf);
		c->cap = (size_t)e->length + BFS_TFRECORD_FOOTER;
		c->buf = malloc(c->cap);
		CHECK(c->buf, "malloc");
	}
	got = pread(c->fd, c->buf, (size_t)e->length + BFS_TFRECORD_FOOTER,
		    (off_t)e->offset);
	CHECK(got == (ssize_t)(e->length + BFS_TFRECORD_FOOTER), "pread");
	msg[0] = 'x';
	r = bfs_tfrecord_check(c->buf, e->length, msg);
	CHECK(r == 0 || r == BFS_E_CRC, "check returned %d", r);
	if (r)
		CHECK_MSG(msg);
	if (r || e->status)
		return 0;
	r = bfs_example_find(c->buf, (size_t)e->length, "image/encoded",
			     "image/class/label", &img, &img_len, &label, msg);
	if (r == 0)
		CHECK(img >= c->buf && img_len <= e->length &&
		      (size_t)(img - c->buf) <= e->length - img_len,
		      "image outside the record");
	else
		CHECK_MSG(msg);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static uint8_t *copy;
	static size_t copy_cap;
	char msg[BFS_ERRMSG_MAX];
	scan_ctx c = { 0 };
	uint8_t mode;
	size_t n;
	int r;

	if (size < 1)
		return 0;
	mode = data[0];
	data++;
	n = size - 1;
	if (fd < 0) {
		fd = memfd_create("fuzz_tfrecord", MFD_CLOEXEC);
		CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
	}
	if (n > copy_cap) {
		free(copy);
		copy = malloc(n);
		CHECK(copy, "malloc");
		copy_cap = n;
	}
	if (n)
		memcpy(copy, data, n);
	if (mode & 1)
		repair(copy, n);
	CHECK(ftruncate(fd, 0) == 0, "ftruncate");
	CHECK(pwrite(fd, copy, n, 0) == (ssize_t)n, "pwrite");

	/* CRC-32C: the SSE4.2 path equals the table, also when chained. */
	if (n) {
		size_t cut = mode % (n + 1);
		uint32_t sw = bfs_crc32c_sw(bfs_crc32c_sw(0, copy, cut),
					    copy + cut, n - cut);

		CHECK(bfs_crc32c_hw(0, copy, n) == sw, "crc32c hw != sw");
		CHECK(bfs_crc32c(0, copy, n) == bfs_crc32c_sw(0, copy, n),
		      "crc32c != sw");
	}

	c.fd = fd;
	c.real_size = n;
	c.size = n + ((mode & 2) ? 1 + (mode >> 2) % 64 : 0);
	msg[0] = '\0';
	r = bfs_tfrecord_scan(fd, c.size, on_record, &c, msg);
	CHECK(r == 0 || r == BFS_E_TRUNCATED || r == BFS_E_CRC || r == -EIO,
	      "scan returned %d (%s)", r, bfs_strerror(r));
	CHECK_MSG(msg);
	if (r == 0)
		CHECK(c.next == c.size, "success but the last record ends at %llu "
		      "of %llu", (unsigned long long)c.next,
		      (unsigned long long)c.size);
	else
		CHECK(msg[0], "error %d without a message", r);
	if (r == -EIO)
		CHECK(c.size > c.real_size, "-EIO on an intact file");
	free(c.buf);
	return 0;
}
