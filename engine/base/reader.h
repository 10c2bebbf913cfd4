/*
 * reader.h - the interface of a byte source read by offset, which the shard
 * scanners (tfrecord.h, tar.h) read through: a plain file (pread on a
 * descriptor, bfs_reader_fd below), or the uncompressed bytes of a gzip
 * file (gzindex.h, bfs_gz_reader).
 *
 * A header-only interface, like store.h: the reader is handed in, the
 * scanners never know what is behind it.
 */
#ifndef BFS_READER_H
#define BFS_READER_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

typedef struct {
	/* Read exactly n bytes at offset off into buf.  Returns 0, -EIO when
	 * the source ends before off + n (a file shorter than its size, a
	 * gzip stream that ends or breaks there), or another -errno.  errmsg
	 * (BFS_ERRMSG_MAX bytes, may be NULL) may say more, e.g. where a gzip
	 * stream is damaged; on -EIO without a message the caller says the
	 * source is shorter than expected. */
	int (*pread)(void *ctx, void *buf, size_t n, uint64_t off,
		     char *errmsg);
	void *ctx;
} bfs_reader;

/* The plain-file reader: ctx is (intptr_t) fd. */
static inline int bfs__reader_fd_pread(void *ctx, void *buf, size_t n,
				       uint64_t off, char *errmsg)
{
	int fd = (int)(intptr_t)ctx;
	size_t got = 0;

	(void)errmsg;
	while (got < n) {
		ssize_t k = pread(fd, (uint8_t *)buf + got, n - got,
				  (off_t)(off + got));

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO; /* shorter than the size we were given */
		got += (size_t)k;
	}
	return 0;
}

/* A reader of the file open on fd (only pread is used, so the file
 * position is left alone).  Any thread. */
static inline bfs_reader bfs_reader_fd(int fd)
{
	bfs_reader r = { bfs__reader_fd_pread, (void *)(intptr_t)fd };

	return r;
}

#endif
