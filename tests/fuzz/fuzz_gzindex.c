/*
 * fuzz_gzindex.c - the gzip index from any bytes.  The first byte picks:
 *
 *   even: the rest is a gzip file.  bfs_gzindex_build must return a
 *         documented result; when it indexes something, every read inside
 *         bfs_gzindex_size must give exactly what zlib's own gzip inflate
 *         (concatenated members, as gzip -d) gives at that offset, through
 *         restart points 1 KiB apart and after a save and load; reads past
 *         it fail with -EIO.
 *   odd:  the rest is a saved index: bfs_gzindex_load must refuse it or
 *         give an index whose reads of a small real gzip file stay within
 *         bounds (whatever they return).
 *
 * The file lives in a memfd, so reads go through pread as in a mount.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <zlib.h>

#include "engine/base/error.h"
#include "engine/formats/gzindex.h"
#include "tests/fuzz/fuzz.h"

static int file_of(const uint8_t *p, size_t n)
{
	int fd = memfd_create("fuzz_gzindex", 0);

	CHECK(fd >= 0, "memfd");
	if (n)
		CHECK(pwrite(fd, p, n, 0) == (ssize_t)n, "pwrite");
	return fd;
}

/* zlib's gzip inflate of p[0..n), members concatenated, up to cap bytes:
 * the count it produced before the end or an error. */
static size_t reference(const uint8_t *p, size_t n, uint8_t *out, size_t cap)
{
	z_stream zs;
	size_t got = 0;

	memset(&zs, 0, sizeof(zs));
	CHECK(inflateInit2(&zs, 31) == Z_OK, "inflateInit2");
	zs.next_in = (Bytef *)p;
	zs.avail_in = (uInt)n;
	while (got < cap) {
		int zr;

		zs.next_out = out + got;
		zs.avail_out = (uInt)(cap - got);
		zr = inflate(&zs, Z_NO_FLUSH);
		got = cap - zs.avail_out;
		if (zr == Z_STREAM_END) {
			if (!zs.avail_in)
				break;
			inflateReset(&zs);
			continue;
		}
		if (zr != Z_OK)
			break;
	}
	inflateEnd(&zs);
	return got;
}

static void check_reads(const bfs_gzindex *idx, int fd, const uint8_t *ref,
			size_t refn, const uint8_t *seed, size_t seedn)
{
	uint64_t n = bfs_gzindex_size(idx);
	bfs_gzcursor *c;
	uint8_t buf[4096];
	char msg[BFS_ERRMSG_MAX];

	CHECK(bfs_gzcursor_create(&c) == 0, "cursor");
	for (size_t k = 0; k < 24 && n; k++) {
		uint64_t off = (seedn ? seed[k % seedn] * 2654435761u + k * 977 : k) % n;
		size_t len = (size_t)((off * 31 + k) % sizeof(buf));
		int r;

		if (len > n - off)
			len = (size_t)(n - off);
		r = bfs_gzcursor_read(c, idx, fd, buf, len, off, msg);
		CHECK_MSG(msg);
		CHECK(r == 0, "read %zu at %llu inside the index failed: %s", len,
		      (unsigned long long)off, msg);
		if (off + len <= refn)
			CHECK(memcmp(buf, ref + off, len) == 0,
			      "read at %llu differs from zlib's inflate", (unsigned long long)off);
	}
	CHECK(bfs_gzcursor_read(c, idx, fd, buf, 1, n, msg) == -EIO, "read past the end");
	bfs_gzcursor_destroy(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char msg[BFS_ERRMSG_MAX];
	bfs_gzindex *idx = NULL, *back = NULL;

	if (size < 1)
		return 0;
	if (data[0] & 1) {
		static const char text[] = "a small file to read through a fuzzed index";
		uint8_t z[256], buf[64];
		uLongf zl = sizeof(z);
		bfs_gzcursor *c;
		int fd, r;

		/* a real gzip file (zlib format is close enough: its header
		 * is not gzip, so a loaded index is read against garbage) */
		CHECK(compress(z, &zl, (const Bytef *)text, sizeof(text)) == Z_OK, "compress");
		fd = file_of(z, zl);
		r = bfs_gzindex_load(data + 1, size - 1, zl, &back, msg);
		CHECK(r == 0 || r == BFS_E_CORRUPT || r == -ENOMEM, "load returned %d", r);
		CHECK_MSG(msg);
		if (r == 0) {
			CHECK(bfs_gzcursor_create(&c) == 0, "cursor");
			for (uint64_t off = 0; off < 64 && off < bfs_gzindex_size(back); off += 13)
				(void)bfs_gzcursor_read(c, back, fd, buf, sizeof(buf) / 2, off, msg);
			bfs_gzcursor_destroy(c);
			bfs_gzindex_free(back);
		}
		close(fd);
		return 0;
	}
	{
		const uint8_t *gz = data + 1;
		size_t gzn = size - 1, refn;
		uint8_t *ref = malloc(1 << 20);
		int fd = file_of(gz, gzn), r;
		void *blob;
		size_t blen;

		CHECK(ref, "malloc");
		r = bfs_gzindex_build(fd, gzn, 1024, data[0] & 2 ? BFS_GZ_KEEP_BAD_CRC : 0,
				      0, &idx, msg);
		CHECK_MSG(msg);
		CHECK(r == 0 || r == -EINVAL || r == -ENOMEM, "build returned %d", r);
		if (r == 0) {
			CHECK(bfs_gzindex_complete(idx) || bfs_gzindex_damage(idx)[0],
			      "damaged without a word");
			refn = reference(gz, gzn, ref, 1 << 20);
			check_reads(idx, fd, ref, refn, gz, gzn);
			if (bfs_gzindex_complete(idx) &&
			    bfs_gzindex_save(idx, &blob, &blen) == 0) {
				CHECK(bfs_gzindex_load(blob, blen, gzn, &back, msg) == 0,
				      "a saved index does not load: %s", msg);
				check_reads(back, fd, ref, refn, gz, gzn);
				bfs_gzindex_free(back);
				free(blob);
			}
			bfs_gzindex_free(idx);
		}
		free(ref);
		close(fd);
	}
	return 0;
}
