/*
 * tfrecord.c - TFRecord framing: header-only shard scan, payload CRC check,
 * record writer (see tfrecord.h).
 *
 * The scan owns one heap buffer for its whole run.  Runs of small records
 * are served from 256 KiB chunks; after a record of 16 KiB or more the next
 * header is fetched with a 4 KiB pread, so big payloads (JPEGs) are skipped
 * rather than read.
 */
#include "engine/formats/tfrecord.h"

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/formats/filekind.h"
#include "engine/base/reader.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define SCAN_CHUNK (256u * 1024)
#define SMALL_READ 4096u
/* After a payload this large, fetching the next header with one small pread
 * beats copying the chunk that would mostly hold payload bytes. */
#define BIG_RECORD (16u * 1024)

static inline uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline uint32_t masked_crc(const void *p, size_t n)
{
	return bfs_crc32c_mask(bfs_crc32c(0, p, n));
}

typedef struct {
	const bfs_reader *src;
	uint64_t size;
	uint8_t *buf;   /* SCAN_CHUNK bytes */
	uint64_t boff;  /* file offset of buf[0] */
	size_t blen;    /* valid bytes in buf */
	char why[BFS_ERRMSG_MAX]; /* what src said of a failed read, or "" */
} reader;

/* Point *h at the 12 header bytes at pos (pos + 12 <= r->size), reading a
 * small or a full chunk when they are not buffered. */
static int header_at(reader *r, uint64_t pos, int small, const uint8_t **h)
{
	size_t want, got;
	int err;

	if (pos >= r->boff && r->blen >= BFS_TFRECORD_HEADER &&
	    pos - r->boff <= r->blen - BFS_TFRECORD_HEADER) {
		*h = r->buf + (pos - r->boff);
		return 0;
	}
	want = small ? SMALL_READ : SCAN_CHUNK;
	if (want > r->size - pos)
		want = (size_t)(r->size - pos);
	r->blen = 0;
	r->why[0] = '\0';
	if ((err = r->src->pread(r->src->ctx, r->buf, want, pos, r->why)))
		return err;
	got = want;
	r->boff = pos;
	r->blen = got;
	*h = r->buf;
	return 0;
}

int bfs_tfrecord_scan(int fd, uint64_t file_size, bfs_tfrecord_scan_fn fn,
		      void *ctx, char *errmsg)
{
	bfs_reader src = bfs_reader_fd(fd);

	return bfs_tfrecord_scan_reader(&src, file_size, fn, ctx, errmsg);
}

int bfs_tfrecord_scan_reader(const bfs_reader *src, uint64_t file_size,
			     bfs_tfrecord_scan_fn fn, void *ctx, char *errmsg)
{
	reader r = { .src = src, .size = file_size };
	uint64_t pos = 0, idx = 0;
	int small = 0, err = 0;

	if (file_size == 0)
		return 0;
	r.buf = malloc(SCAN_CHUNK);
	if (!r.buf)
		return -ENOMEM;
	while (pos < file_size) {
		bfs_tfrecord_entry e;
		const uint8_t *h;
		uint64_t len, left;
		uint32_t stored, computed;
		int fits;

		left = file_size - pos;
		if (left < BFS_TFRECORD_HEADER) {
			bfs_seterr(errmsg,
				   "record %llu at offset %llu: file ends inside "
				   "the 12-byte header (%llu bytes left)",
				   (unsigned long long)idx,
				   (unsigned long long)pos,
				   (unsigned long long)left);
			err = BFS_E_TRUNCATED;
			break;
		}
		if ((err = header_at(&r, pos, small, &h)))
			goto io_error;
		len = le64(h);
		stored = le32(h + 8);
		computed = masked_crc(h, 8);
		left -= BFS_TFRECORD_HEADER;
		fits = left >= BFS_TFRECORD_FOOTER &&
		       len <= left - BFS_TFRECORD_FOOTER;
		e.offset = pos + BFS_TFRECORD_HEADER;
		e.length = len;
		e.status = 0;
		if (stored != computed) {
			/* The length is proven if the record ends exactly at
			 * EOF or the next header's own CRC holds. */
			int proven = 0;
			/* At offset 0 the file was never a TFRecord: say what
			 * it looks like, never what it holds (the buffer
			 * still starts at 0 here). */
			const char *kind = pos == 0 && r.boff == 0
				? bfs_filekind(r.buf, r.blen) : NULL;

			if (fits) {
				uint64_t next = e.offset + len + BFS_TFRECORD_FOOTER;
				const uint8_t *h2;

				if (next == file_size) {
					proven = 1;
				} else if (file_size - next >= BFS_TFRECORD_HEADER) {
					if ((err = header_at(&r, next, len >= BIG_RECORD,
							     &h2)))
						goto io_error;
					proven = masked_crc(h2, 8) == le32(h2 + 8);
				}
			}
			if (!proven && pos == 0) {
				if (kind)
					bfs_seterr(errmsg, "not a TFRecord file: "
						   "its first record header "
						   "fails its length CRC; it "
						   "looks like %s", kind);
				else
					bfs_seterr(errmsg, "not a TFRecord, tar "
						   "or JPEG file: its first "
						   "record header fails its "
						   "length CRC");
				err = BFS_E_CRC;
				break;
			}
			if (!proven) {
				bfs_seterr(errmsg,
					   "record %llu at offset %llu: length CRC "
					   "mismatch (length field %llu, stored "
					   "0x%08x, computed 0x%08x)",
					   (unsigned long long)idx,
					   (unsigned long long)pos,
					   (unsigned long long)len, stored,
					   computed);
				err = BFS_E_CRC;
				break;
			}
			e.status = BFS_E_CRC;
		} else if (!fits) {
			bfs_seterr(errmsg,
				   "record %llu at offset %llu: length %llu runs "
				   "past end of file (size %llu)",
				   (unsigned long long)idx,
				   (unsigned long long)pos,
				   (unsigned long long)len,
				   (unsigned long long)file_size);
			err = BFS_E_TRUNCATED;
			break;
		}
		/* what the buffer holds of the payload (it may have moved to
		 * the next header to prove this one's length) */
		e.data = NULL;
		e.data_len = 0;
		if (e.offset >= r.boff && e.offset < r.boff + r.blen) {
			uint64_t have = r.boff + r.blen - e.offset;

			e.data = r.buf + (e.offset - r.boff);
			e.data_len = (size_t)(have < len ? have : len);
		}
		if ((err = fn(ctx, &e)))
			break;
		small = len >= BIG_RECORD;
		pos = e.offset + len + BFS_TFRECORD_FOOTER;
		idx++;
	}
	free(r.buf);
	return err;

io_error:
	bfs_seterr(errmsg, "record %llu at offset %llu: %s",
		   (unsigned long long)idx, (unsigned long long)pos,
		   r.why[0] ? r.why
		   : err == -EIO ? "file is shorter than its size (changed "
				   "while scanning?)"
				 : bfs_strerror(err));
	free(r.buf);
	return err;
}

int bfs_tfrecord_check(const uint8_t *buf, uint64_t length, char *errmsg)
{
	uint32_t stored, computed;

	if (length > SIZE_MAX - BFS_TFRECORD_FOOTER) {
		bfs_seterr(errmsg, "payload of %llu bytes is too large",
			   (unsigned long long)length);
		return BFS_E_CRC;
	}
	stored = le32(buf + length);
	computed = masked_crc(buf, (size_t)length);
	if (stored != computed) {
		bfs_seterr(errmsg,
			   "payload CRC32C mismatch (length %llu, stored "
			   "0x%08x, computed 0x%08x)",
			   (unsigned long long)length, stored, computed);
		return BFS_E_CRC;
	}
	return 0;
}

int bfs_tfrecord_write(int fd, const void *data, uint64_t length)
{
	uint8_t head[BFS_TFRECORD_HEADER], foot[BFS_TFRECORD_FOOTER];
	struct iovec iov[3];
	struct iovec *v = iov;
	int nv = 3;

	if (length > SIZE_MAX || (length && !data))
		return -EINVAL;
	put_le64(head, length);
	put_le32(head + 8, masked_crc(head, 8));
	put_le32(foot, masked_crc(data, (size_t)length));
	iov[0] = (struct iovec){ head, sizeof(head) };
	iov[1] = (struct iovec){ (void *)data, (size_t)length };
	iov[2] = (struct iovec){ foot, sizeof(foot) };
	while (nv > 0) {
		ssize_t n = writev(fd, v, nv);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* a regular file should never do this */
		while (nv > 0 && (size_t)n >= v->iov_len) {
			n -= (ssize_t)v->iov_len;
			v++;
			nv--;
		}
		if (nv > 0) {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	return 0;
}
