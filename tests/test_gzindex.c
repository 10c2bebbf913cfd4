/*
 * test_gzindex.c - bfs_gzindex_* and bfs_gzcursor_*: gzip files written
 * here with zlib (one member and many, stored, fast and best levels, data
 * that compresses and data that does not) read back at random offsets
 * exactly as written, through restart points every few KiB; the saved
 * index loads back and refuses damage; damaged files index their good part
 * and say where the damage is.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "engine/base/error.h"
#include "engine/formats/gzindex.h"

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* n bytes: runs of text-like (compressible) and random (not) data. */
static uint8_t *data(size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	for (size_t i = 0; i < n;) {
		size_t run = 1000 + next() % 20000;
		int text = next() & 1;

		for (size_t k = 0; k < run && i < n; k++, i++)
			p[i] = text ? (uint8_t)("the quick brown fox "[(i / 3) % 20]) : (uint8_t)next();
	}
	return p;
}

/* gzip p[0..n) as `members` members at `level` (one deflate stream each,
 * with a file name in the first header, as gzip writes it). */
static uint8_t *gz(const uint8_t *p, size_t n, int members, int level, size_t *out_len)
{
	size_t cap = n + n / 10 + 4096 * (size_t)members, len = 0;
	uint8_t *o = malloc(cap);

	for (int m = 0; m < members; m++) {
		size_t a = n * (size_t)m / (size_t)members, b = n * (size_t)(m + 1) / (size_t)members;
		z_stream zs = { 0 };
		gz_header h = { 0 };

		assert_int_equal(deflateInit2(&zs, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
		if (m == 0) {
			h.name = (Bytef *)"shard.tfrecord";
			h.extra = (Bytef *)"xx";
			h.extra_len = 2;
			h.hcrc = 1;
			assert_int_equal(deflateSetHeader(&zs, &h), Z_OK);
		}
		zs.next_in = (Bytef *)p + a;
		zs.avail_in = (uInt)(b - a);
		zs.next_out = o + len;
		zs.avail_out = (uInt)(cap - len);
		assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
		len = cap - zs.avail_out;
		deflateEnd(&zs);
	}
	*out_len = len;
	return o;
}

static int temp_fd(const void *p, size_t n)
{
	FILE *f = tmpfile();
	int fd;

	assert_non_null(f);
	fd = dup(fileno(f));
	fclose(f);
	if (n)
		assert_int_equal(pwrite(fd, p, n, 0), (ssize_t)n);
	return fd;
}

/* Read back everything in random pieces (and in order) and compare. */
static void check_reads(const bfs_gzindex *idx, int fd, const uint8_t *want, size_t n)
{
	bfs_gzcursor *c;
	uint8_t *buf = malloc(300000);
	char msg[BFS_ERRMSG_MAX];

	assert_int_equal(bfs_gzcursor_create(&c), 0);
	for (int i = 0; i < 300; i++) {
		size_t off = n ? (size_t)(next() % n) : 0, len = (size_t)(next() % 300000);

		if (len > n - off)
			len = n - off;
		if (bfs_gzcursor_read(c, idx, fd, buf, len, off, msg))
			fail_msg("read %zu at %zu: %s", len, off, msg);
		assert_memory_equal(buf, want + off, len);
	}
	for (size_t off = 0; off < n; off += 77777) { /* in order: the cursor goes on */
		size_t len = n - off < 1000 ? n - off : 1000;

		assert_int_equal(bfs_gzcursor_read(c, idx, fd, buf, len, off, msg), 0);
		assert_memory_equal(buf, want + off, len);
	}
	assert_int_equal(bfs_gzcursor_read(c, idx, fd, buf, 1, n, msg), -EIO);
	assert_non_null(strstr(msg, "past the end"));
	bfs_gzcursor_destroy(c);
	free(buf);
}

static void test_gzindex_reads_any_offset_back_as_written(void **state)
{
	static const struct { size_t n; int members, level; } cases[] = {
		{ 0, 1, 6 }, { 1, 1, 6 }, { 3000000, 1, 6 }, { 3000000, 1, 1 },
		{ 2500000, 1, 0 }, { 3000000, 1, 9 }, { 3000000, 7, 6 }, { 100000, 40, 6 },
	};

	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		size_t clen;
		uint8_t *p = data(cases[k].n), *z = gz(p, cases[k].n, cases[k].members,
						       cases[k].level, &clen);
		int fd = temp_fd(z, clen);
		bfs_gzindex *idx;
		char msg[BFS_ERRMSG_MAX] = "";

		if (bfs_gzindex_build(fd, clen, 64 << 10, 0, 0, &idx, msg))
			fail_msg("case %zu: %s", k, msg);
		assert_true(bfs_gzindex_complete(idx));
		assert_string_equal(bfs_gzindex_damage(idx), "");
		assert_int_equal(bfs_gzindex_size(idx), cases[k].n);
		if (cases[k].n >= 3000000 && cases[k].level)
			assert_true(bfs_gzindex_npoints(idx) >= 20); /* a point every 64 KiB */
		check_reads(idx, fd, p, cases[k].n);
		bfs_gzindex_free(idx);
		close(fd);
		free(z);
		free(p);
	}
}

static void test_gzindex_saved_index_reads_the_same_and_refuses_damage(void **state)
{
	size_t clen, blen;
	uint8_t *p = data(2000000), *z = gz(p, 2000000, 2, 6, &clen);
	int fd = temp_fd(z, clen);
	bfs_gzindex *idx, *back;
	char msg[BFS_ERRMSG_MAX];
	uint8_t *blob;
	void *b;

	(void)state;
	assert_int_equal(bfs_gzindex_build(fd, clen, 100 << 10, 0, 0, &idx, msg), 0);
	assert_int_equal(bfs_gzindex_save(idx, &b, &blen), 0);
	blob = b;
	assert_int_equal(bfs_gzindex_load(blob, blen, clen, &back, msg), 0);
	assert_int_equal(bfs_gzindex_npoints(back), bfs_gzindex_npoints(idx));
	check_reads(back, fd, p, 2000000);
	bfs_gzindex_free(back);
	/* for another compressed size, cut, longer, or with a point moved */
	assert_int_equal(bfs_gzindex_load(blob, blen, clen + 1, &back, msg), BFS_E_CORRUPT);
	assert_int_equal(bfs_gzindex_load(blob, blen - 1, clen, &back, msg), BFS_E_CORRUPT);
	for (size_t i = 8; i < 32 + 40 * 3; i += 4) {
		uint8_t *c = malloc(blen);

		memcpy(c, blob, blen);
		c[i] ^= 0x80;
		c[i + 3] ^= 0x40;
		if (bfs_gzindex_load(c, blen, clen, &back, msg) == 0) {
			/* a change the checks cannot see (a window byte):
			 * it loads, and reading stays within bounds */
			uint8_t buf[100];
			bfs_gzcursor *cur;

			assert_int_equal(bfs_gzcursor_create(&cur), 0);
			(void)bfs_gzcursor_read(cur, back, fd, buf, sizeof(buf), 1500000, msg);
			bfs_gzcursor_destroy(cur);
			bfs_gzindex_free(back);
		}
		free(c);
	}
	free(b);
	bfs_gzindex_free(idx);
	close(fd);
	free(z);
	free(p);
}

static void test_gzindex_indexes_the_good_part_of_damaged_data(void **state)
{
	size_t clen, n = 1500000;
	uint8_t *p = data(n), *z = gz(p, n, 3, 6, &clen);
	bfs_gzindex *idx;
	char msg[BFS_ERRMSG_MAX];
	int fd;

	(void)state;
	/* cut in the middle: the good part is served, the rest says why */
	fd = temp_fd(z, clen / 2);
	assert_int_equal(bfs_gzindex_build(fd, clen / 2, 64 << 10, 0, 0, &idx, msg), 0);
	assert_false(bfs_gzindex_complete(idx));
	assert_non_null(strstr(bfs_gzindex_damage(idx), "ends inside member 1"));
	assert_true(bfs_gzindex_size(idx) > n / 3 && bfs_gzindex_size(idx) < n);
	{
		bfs_gzcursor *c;
		uint8_t buf[64];

		assert_int_equal(bfs_gzcursor_create(&c), 0);
		assert_int_equal(bfs_gzcursor_read(c, idx, fd, buf, 64, 1000, msg), 0);
		assert_memory_equal(buf, p + 1000, 64);
		assert_int_equal(bfs_gzcursor_read(c, idx, fd, buf, 64,
						   bfs_gzindex_size(idx), msg), -EIO);
		assert_non_null(strstr(msg, "ends inside member 1"));
		bfs_gzcursor_destroy(c);
	}
	bfs_gzindex_free(idx);
	close(fd);

	/* a wrong CRC in member 1's trailer: none of member 1 is served */
	{
		uint8_t *bad = malloc(clen);
		size_t m0 = 0, m1;

		memcpy(bad, z, clen);
		/* find member 1: the second 1f 8b 08 after a trailer */
		for (size_t i = 20; i + 3 < clen; i++)
			if (bad[i] == 0x1f && bad[i + 1] == 0x8b && bad[i + 2] == 8 && bad[i + 3] == 0) {
				m0 = i;
				break;
			}
		assert_true(m0 > 0);
		m1 = 0;
		for (size_t i = m0 + 20; i + 3 < clen; i++)
			if (bad[i] == 0x1f && bad[i + 1] == 0x8b && bad[i + 2] == 8 && bad[i + 3] == 0) {
				m1 = i;
				break;
			}
		assert_true(m1 > m0);
		bad[m1 - 8] ^= 1; /* member 1's CRC-32 */
		fd = temp_fd(bad, clen);
		assert_int_equal(bfs_gzindex_build(fd, clen, 64 << 10, 0, 0, &idx, msg), 0);
		assert_false(bfs_gzindex_complete(idx));
		assert_non_null(strstr(msg, "member 1"));
		assert_non_null(strstr(msg, "CRC-32"));
		assert_int_equal(bfs_gzindex_size(idx), n / 3);
		bfs_gzindex_free(idx);
		close(fd);

		/* bytes after the last member that are not a member */
		memcpy(bad, z, clen);
		bad = realloc(bad, clen + 5);
		memcpy(bad + clen, "junk!", 5);
		fd = temp_fd(bad, clen + 5);
		assert_int_equal(bfs_gzindex_build(fd, clen + 5, 64 << 10, 0, 0, &idx, msg), 0);
		assert_false(bfs_gzindex_complete(idx));
		assert_int_equal(bfs_gzindex_size(idx), n);
		assert_non_null(strstr(msg, "not a gzip member"));
		bfs_gzindex_free(idx);
		close(fd);
		free(bad);
	}
	/* flipped deflate bytes: an error or a CRC mismatch, never a crash */
	for (int k = 0; k < 20; k++) {
		uint8_t *bad = malloc(clen);

		memcpy(bad, z, clen);
		bad[40 + next() % (clen - 60)] ^= (uint8_t)(1 + next() % 255);
		fd = temp_fd(bad, clen);
		assert_int_equal(bfs_gzindex_build(fd, clen, 64 << 10, 0, 0, &idx, msg), 0);
		if (bfs_gzindex_complete(idx))
			fail_msg("a damaged gzip file indexed as whole");
		assert_true(bfs_gzindex_size(idx) < n);
		bfs_gzindex_free(idx);
		close(fd);
		free(bad);
	}
	free(z);
	free(p);
}

static void test_gzindex_refuses_what_is_not_gzip(void **state)
{
	bfs_gzindex *idx;
	char msg[BFS_ERRMSG_MAX];
	int fd = temp_fd("\x89PNG\r\n\x1a\nxxxxxxxxxxxxxx", 22);

	(void)state;
	assert_int_equal(bfs_gzindex_build(fd, 22, 0, 0, 0, &idx, msg), -EINVAL);
	assert_null(idx);
	assert_non_null(strstr(msg, "not a gzip file"));
	close(fd);
	fd = temp_fd("", 0);
	assert_int_equal(bfs_gzindex_build(fd, 0, 0, 0, 0, &idx, msg), -EINVAL);
	assert_non_null(strstr(msg, "empty"));
	close(fd);
	assert_true(bfs_gz_probe((const uint8_t *)"\x1f\x8b\x08", 3));
	assert_false(bfs_gz_probe((const uint8_t *)"\x1f\x8b", 2));
}

/* gzip of n zero bytes (a gzip bomb in small), in 1 MiB steps. */
static uint8_t *gz_zeros(size_t n, size_t *out_len)
{
	static const uint8_t zero[1 << 20];
	size_t cap = n / 500 + 65536;
	uint8_t *o = malloc(cap);
	z_stream zs = { 0 };

	assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_out = o;
	zs.avail_out = (uInt)cap;
	for (size_t done = 0; done < n;) {
		size_t k = n - done < sizeof(zero) ? n - done : sizeof(zero);

		zs.next_in = (Bytef *)zero;
		zs.avail_in = (uInt)k;
		assert_int_equal(deflate(&zs, Z_NO_FLUSH), Z_OK);
		assert_int_equal(zs.avail_in, 0);
		done += k;
	}
	assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
	*out_len = cap - zs.avail_out;
	deflateEnd(&zs);
	return o;
}

static void test_gzindex_refuses_a_gzip_bomb_as_soon_as_it_passes_the_ratio(void **state)
{
	size_t clen, n = 64u << 20, tn = 3000000, tlen;
	uint8_t *z = gz_zeros(n, &clen), *p = data(tn), *t = gz(p, tn, 1, 6, &tlen);
	unsigned long long out = 0, in = 0, ratio = 0;
	bfs_gzindex *idx = (bfs_gzindex *)&idx;
	char msg[BFS_ERRMSG_MAX] = "";
	const char *at;
	int fd = temp_fd(z, clen);

	(void)state;
	assert_true(clen < n / 500); /* over 500 times */
	assert_int_equal(bfs_gzindex_build(fd, clen, 0, 0, 100, &idx, msg), -EFBIG);
	assert_null(idx);
	if (!strstr(msg, "more than 100 times") || !strstr(msg, "--max-inflate-ratio") ||
	    !(at = strstr(msg, "size: ")) ||
	    sscanf(at, "size: %llu bytes from its first %llu compressed bytes (ratio %llu)",
		   &out, &in, &ratio) != 3)
		fail_msg("%s", msg);
	/* it stopped once past the floor, not at the end of the data */
	assert_true(out > BFS_GZ_RATIO_FLOOR && out < BFS_GZ_RATIO_FLOOR + (128u << 10));
	assert_true(in < clen / 10);
	assert_true(ratio > 100 && ratio == out / in);
	close(fd);

	/* data that inflate less than the limit index whole */
	fd = temp_fd(t, tlen);
	assert_int_equal(bfs_gzindex_build(fd, tlen, 64 << 10, 0, 100, &idx, msg), 0);
	assert_int_equal(bfs_gzindex_size(idx), tn);
	bfs_gzindex_free(idx);
	close(fd);
	free(t);
	free(p);
	free(z);
}

static void test_gzindex_memory_is_bounded_by_the_compressed_size(void **state)
{
	const uint32_t span = 64u << 10;
	size_t clen, n = 64u << 20, blen, tn = 300000, tlen;
	uint8_t *z = gz_zeros(n, &clen), *p = data(tn), *t;
	bfs_gzindex *idx;
	char msg[BFS_ERRMSG_MAX] = "";
	void *blob;
	int fd = temp_fd(z, clen);

	(void)state;
	/* no limit: 64 MiB of output, a point every BFS_GZ_SPAN of it would
	 * be 16 windows of 32 KiB, 8 times the file; a window needs
	 * BFS_GZ_SPAN / 8 bytes of input too, so they take 1/16 of it */
	assert_int_equal(bfs_gzindex_build(fd, clen, 0, 0, 0, &idx, msg), 0);
	assert_true(bfs_gzindex_complete(idx));
	assert_int_equal(bfs_gzindex_size(idx), n);
	assert_true(bfs_gzindex_npoints(idx) <= 2 + clen / (BFS_GZ_SPAN / 8));
	assert_int_equal(bfs_gzindex_save(idx, &blob, &blen), 0);
	assert_true(blen <= clen / 16 + 40 * bfs_gzindex_npoints(idx) + 64);
	free(blob);
	{
		bfs_gzcursor *c;
		uint8_t buf[4096], zero[4096] = { 0 };

		assert_int_equal(bfs_gzcursor_create(&c), 0);
		for (int k = 0; k < 20; k++) {
			size_t off = (size_t)(next() % (n - sizeof(buf)));

			assert_int_equal(bfs_gzcursor_read(c, idx, fd, buf, sizeof(buf), off, msg), 0);
			assert_memory_equal(buf, zero, sizeof(buf));
		}
		bfs_gzcursor_destroy(c);
	}
	bfs_gzindex_free(idx);
	close(fd);
	free(z);

	/* 3000 tiny members: a point each span of output, not each member */
	t = gz(p, tn, 3000, 6, &tlen);
	fd = temp_fd(t, tlen);
	assert_int_equal(bfs_gzindex_build(fd, tlen, span, 0, 0, &idx, msg), 0);
	assert_true(bfs_gzindex_npoints(idx) <= 2 + tn / span);
	check_reads(idx, fd, p, tn);
	bfs_gzindex_free(idx);
	close(fd);
	free(t);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gzindex_reads_any_offset_back_as_written),
		cmocka_unit_test(test_gzindex_saved_index_reads_the_same_and_refuses_damage),
		cmocka_unit_test(test_gzindex_indexes_the_good_part_of_damaged_data),
		cmocka_unit_test(test_gzindex_refuses_what_is_not_gzip),
		cmocka_unit_test(test_gzindex_refuses_a_gzip_bomb_as_soon_as_it_passes_the_ratio),
		cmocka_unit_test(test_gzindex_memory_is_bounded_by_the_compressed_size),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
