/*
 * test_tfrecord.c - engine/formats/tfrecord: write and scan back, bad length and
 * payload CRCs, truncation at every byte, empty files, absurd lengths,
 * and the speed of a 1M-record scan.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/formats/tfrecord.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXREC 4096

typedef struct {
	bfs_tfrecord_entry e[MAXREC];
	size_t n;
	int stop_at; /* return 42 from this callback index; -1 never */
} collected;

static int collect(void *ctx, const bfs_tfrecord_entry *e)
{
	collected *c = ctx;

	if ((int)c->n == c->stop_at)
		return 42;
	assert_true(c->n < MAXREC);
	c->e[c->n++] = *e;
	return 0;
}

static int count_only(void *ctx, const bfs_tfrecord_entry *e)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

/* An unlinked temp file; closing the fd deletes it. */
static int temp_fd(void)
{
	FILE *f = tmpfile();
	int fd;

	assert_non_null(f);
	fd = dup(fileno(f));
	fclose(f);
	assert_true(fd >= 0);
	return fd;
}

static uint64_t file_size(int fd)
{
	off_t end = lseek(fd, 0, SEEK_END);

	assert_true(end >= 0);
	return (uint64_t)end;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/* Record i's payload length: mostly small, some above the 16 KiB "big
 * record" mark and a few above the 256 KiB chunk, so every read path runs. */
static size_t rec_len(size_t i)
{
	if (i % 97 == 50)
		return 300000 + i;
	if (i % 13 == 4 || i % 13 == 5)
		return 20000 + i;
	return (i * 37) % 1500;
}

/* Write n records; returns the fd.  starts[i] = header offset of record i,
 * starts[n] = file size. */
static int write_records(size_t n, uint64_t *starts)
{
	static uint8_t data[400000];
	int fd = temp_fd();
	uint64_t pos = 0;

	for (size_t i = 0; i < n; i++) {
		fill(data, rec_len(i), (unsigned)i);
		starts[i] = pos;
		assert_int_equal(bfs_tfrecord_write(fd, data, rec_len(i)), 0);
		pos += 16 + rec_len(i);
	}
	starts[n] = pos;
	assert_int_equal(file_size(fd), pos);
	return fd;
}

static void pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
	assert_int_equal(pwrite(fd, p, n, (off_t)off), (ssize_t)n);
}

static void test_tfrecord_scan_reads_back_every_written_record(void **state)
{
	static uint64_t starts[301];
	static collected c;
	static uint8_t buf[400000 + 4], want[400000];
	int fd = write_records(300, starts);

	memset(&c, 0, sizeof(c));
	c.stop_at = -1;
	assert_int_equal(bfs_tfrecord_scan(fd, starts[300], collect, &c, NULL), 0);
	assert_int_equal(c.n, 300);
	for (size_t i = 0; i < 300; i++) {
		assert_int_equal(c.e[i].offset, starts[i] + 12);
		assert_int_equal(c.e[i].length, rec_len(i));
		assert_int_equal(c.e[i].status, 0);
		assert_int_equal(pread(fd, buf, rec_len(i) + 4, (off_t)c.e[i].offset),
				 (ssize_t)(rec_len(i) + 4));
		assert_int_equal(bfs_tfrecord_check(buf, rec_len(i), NULL), 0);
		fill(want, rec_len(i), (unsigned)i);
		assert_memory_equal(buf, want, rec_len(i));
	}
	close(fd);
}

/* Each entry's data must be the payload's first data_len bytes. */
struct peek {
	size_t n, whole, some;
	int wrong;
};

static int check_data(void *ctx, const bfs_tfrecord_entry *e)
{
	struct peek *p = ctx;
	static uint8_t want[400000];

	if (e->data_len > e->length || (e->data_len && !e->data))
		p->wrong = 1;
	fill(want, e->length, (unsigned)p->n);
	if (e->data_len && memcmp(e->data, want, e->data_len))
		p->wrong = 1;
	p->whole += e->data_len == e->length;
	p->some += e->data_len > 0;
	p->n++;
	return 0;
}

static void test_tfrecord_scan_hands_over_the_payload_bytes_it_holds(void **state)
{
	static uint64_t starts[301];
	struct peek p = { 0 };
	int fd = write_records(300, starts);

	assert_int_equal(bfs_tfrecord_scan(fd, starts[300], check_data, &p, NULL), 0);
	assert_int_equal(p.n, 300);
	assert_false(p.wrong);
	/* small records come whole from the chunks; after a big record the
	 * next header's 4 KiB read brings the start of its payload */
	assert_true(p.whole > 200);
	assert_true(p.some > p.whole);
	close(fd);
}

static void test_tfrecord_scan_of_an_empty_file_finds_nothing(void **state)
{
	collected *c = calloc(1, sizeof(*c));
	int fd = temp_fd();

	c->stop_at = -1;
	assert_int_equal(bfs_tfrecord_scan(fd, 0, collect, c, NULL), 0);
	assert_int_equal(c->n, 0);
	close(fd);
	free(c);
}

static void test_tfrecord_scan_returns_the_callbacks_nonzero_value(void **state)
{
	uint64_t starts[11];
	collected *c = calloc(1, sizeof(*c));
	int fd = write_records(10, starts);

	c->stop_at = 4;
	assert_int_equal(bfs_tfrecord_scan(fd, starts[10], collect, c, NULL), 42);
	assert_int_equal(c->n, 4);
	close(fd);
	free(c);
}

static void test_tfrecord_scan_keeps_a_record_whose_bad_length_crc_is_proven(void **state)
{
	uint64_t starts[21];
	collected *c = calloc(1, sizeof(*c));
	int fd = write_records(20, starts);
	uint8_t junk[4] = {1, 2, 3, 4};

	/* Record 7's length CRC is wrong, but record 8's header holds, and
	 * record 19's is wrong but it ends exactly at EOF. */
	pwrite_all(fd, junk, 4, starts[7] + 8);
	pwrite_all(fd, junk, 4, starts[19] + 8);
	c->stop_at = -1;
	assert_int_equal(bfs_tfrecord_scan(fd, starts[20], collect, c, NULL), 0);
	assert_int_equal(c->n, 20);
	for (size_t i = 0; i < 20; i++) {
		assert_int_equal(c->e[i].offset, starts[i] + 12);
		assert_int_equal(c->e[i].status, i == 7 || i == 19 ? BFS_E_CRC : 0);
	}
	close(fd);
	free(c);
}

static void test_tfrecord_scan_stops_at_an_unprovable_bad_length_crc(void **state)
{
	uint64_t starts[21];
	collected *c = calloc(1, sizeof(*c));
	char err[BFS_ERRMSG_MAX], want[80];
	int fd = write_records(20, starts);
	uint8_t b;

	/* Flip a bit of record 12's length: the CRC fails and the length
	 * it now claims does not land on a valid header. */
	assert_int_equal(pread(fd, &b, 1, (off_t)starts[12]), 1);
	b ^= 0x02;
	pwrite_all(fd, &b, 1, starts[12]);
	c->stop_at = -1;
	assert_int_equal(bfs_tfrecord_scan(fd, starts[20], collect, c, err),
			 BFS_E_CRC);
	assert_int_equal(c->n, 12);
	snprintf(want, sizeof(want), "record 12 at offset %llu: length CRC",
		 (unsigned long long)starts[12]);
	assert_non_null(strstr(err, want));
	close(fd);
	free(c);
}

static void test_tfrecord_check_detects_a_bad_payload_crc(void **state)
{
	uint64_t starts[4];
	uint8_t buf[2000];
	char err[BFS_ERRMSG_MAX];
	int fd = write_records(3, starts);
	size_t len = rec_len(2);

	assert_int_equal(pread(fd, buf, len + 4, (off_t)starts[2] + 12),
			 (ssize_t)(len + 4));
	assert_int_equal(bfs_tfrecord_check(buf, len, err), 0);
	buf[len / 2] ^= 0x10;
	assert_int_equal(bfs_tfrecord_check(buf, len, err), BFS_E_CRC);
	assert_non_null(strstr(err, "payload CRC32C mismatch"));
	buf[len / 2] ^= 0x10;
	buf[len + 3] ^= 0x80; /* the stored CRC itself */
	assert_int_equal(bfs_tfrecord_check(buf, len, err), BFS_E_CRC);
	/* The header scan does not read payloads, so it still succeeds. */
	pwrite_all(fd, buf, len + 4, starts[2] + 12);
	{
		uint64_t n = 0;

		assert_int_equal(bfs_tfrecord_scan(fd, starts[3], count_only, &n,
						   NULL), 0);
		assert_int_equal(n, 3);
	}
	close(fd);
}

static void test_tfrecord_scan_reports_a_cut_at_every_byte(void **state)
{
	/* Small records so every cut point is cheap: lengths 0..5. */
	static const size_t lens[6] = {3, 0, 5, 1, 4, 2};
	uint64_t starts[7], pos = 0;
	uint8_t data[8] = "abcdefg";
	collected *c = calloc(1, sizeof(*c));
	int fd = temp_fd();

	for (size_t i = 0; i < 6; i++) {
		starts[i] = pos;
		pos += 16 + lens[i];
	}
	starts[6] = pos;
	for (uint64_t cut = 0; cut <= pos; cut++) {
		char err[BFS_ERRMSG_MAX] = "", want[64];
		size_t complete = 0;
		int boundary = 0, r;

		while (complete < 6 && starts[complete + 1] <= cut)
			complete++;
		for (size_t i = 0; i <= 6; i++)
			boundary |= starts[i] == cut;
		assert_int_equal(ftruncate(fd, 0), 0);
		assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
		for (size_t i = 0; i < 6; i++)
			assert_int_equal(bfs_tfrecord_write(fd, data, lens[i]), 0);
		assert_int_equal(ftruncate(fd, (off_t)cut), 0);
		memset(c, 0, sizeof(*c));
		c->stop_at = -1;
		r = bfs_tfrecord_scan(fd, cut, collect, c, err);
		assert_int_equal(c->n, complete);
		if (boundary) {
			assert_int_equal(r, 0);
			continue;
		}
		assert_int_equal(r, BFS_E_TRUNCATED);
		snprintf(want, sizeof(want), "record %zu at offset %llu: ",
			 complete, (unsigned long long)starts[complete]);
		assert_non_null(strstr(err, want));
		if (cut - starts[complete] < 12)
			assert_non_null(strstr(err, "inside the 12-byte header"));
		else
			assert_non_null(strstr(err, "runs past end of file"));
	}
	close(fd);
	free(c);
}

static void test_tfrecord_scan_rejects_a_huge_length_without_allocating(void **state)
{
	static const uint64_t huge[] = {UINT64_MAX, UINT64_MAX - 15, 1ull << 63,
					1ull << 40};
	collected *c = calloc(1, sizeof(*c));
	uint8_t h[32] = {0};
	char err[BFS_ERRMSG_MAX];

	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		int fd = temp_fd();
		uint32_t crc;

		assert_int_equal(bfs_tfrecord_write(fd, "ok", 2), 0);
		for (int k = 0; k < 8; k++)
			h[k] = (uint8_t)(huge[i] >> (8 * k));
		crc = bfs_crc32c_mask(bfs_crc32c(0, h, 8));
		memcpy(h + 8, &crc, 4);
		pwrite_all(fd, h, sizeof(h), 18);
		memset(c, 0, sizeof(*c));
		c->stop_at = -1;
		assert_int_equal(bfs_tfrecord_scan(fd, 18 + sizeof(h), collect, c, err),
				 BFS_E_TRUNCATED);
		assert_int_equal(c->n, 1);
		assert_non_null(strstr(err, "record 1 at offset 18: length"));
		close(fd);
	}
	free(c);
}

static void test_tfrecord_scan_reports_eio_when_the_file_is_shorter_than_said(void **state)
{
	uint64_t starts[3], n = 0;
	int fd = write_records(2, starts);

	assert_int_equal(bfs_tfrecord_scan(fd, starts[2] + 100, count_only, &n,
					   NULL), -EIO);
	close(fd);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Scan a file holding exactly p[0..n); returns the result, err filled. */
static int scan_bytes(const void *p, size_t n, char *err)
{
	collected *c = calloc(1, sizeof(*c));
	int fd = temp_fd(), r;

	assert_non_null(c);
	pwrite_all(fd, p, n, 0);
	c->stop_at = -1;
	err[0] = '\0';
	r = bfs_tfrecord_scan(fd, n, collect, c, err);
	assert_int_equal(c->n, 0);
	close(fd);
	free(c);
	return r;
}

static void test_tfrecord_scan_names_a_file_that_is_not_a_tfrecord_without_quoting_it(void **state)
{
	static const char secret[] = "SECRET-TOKEN-1234 root:$6$saltsalt$hash:19000:0:99999:7:::\n";
	static const uint8_t gz[32] = { 0x1f, 0x8b, 0x08, 0x00, 0x12, 0x34, 0x56, 0x78 };
	static const uint8_t png[32] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
					  0, 0, 0, 13, 'I', 'H', 'D', 'R' };
	char err[BFS_ERRMSG_MAX];

	/* What used to be said: "record 0 at offset 0: length CRC mismatch
	 * (length field 6076328517386323283, stored 0x4b4f542d, ...)", eight
	 * and four bytes of the file. */
	assert_int_equal(scan_bytes(secret, sizeof(secret) - 1, err), BFS_E_CRC);
	assert_string_equal(err, "not a TFRecord, tar or JPEG file: its first "
			    "record header fails its length CRC");
	assert_int_equal(scan_bytes(gz, sizeof(gz), err), BFS_E_CRC);
	assert_string_equal(err, "not a TFRecord file: its first record header "
			    "fails its length CRC; it looks like gzip data");
	assert_int_equal(scan_bytes(png, sizeof(png), err), BFS_E_CRC);
	assert_string_equal(err, "not a TFRecord file: its first record header "
			    "fails its length CRC; it looks like a PNG image");
}

static void test_tfrecord_scan_indexes_a_million_tiny_records_quickly(void **state)
{
	const size_t n = 1000000, rec = 16 + 1;
	uint8_t *img = malloc(n * rec);
	uint64_t count = 0;
	double t0, t;
	int fd = temp_fd();

	/* Frame the records by hand (an independent check of the writer's
	 * layout) and write them with one call. */
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = img + i * rec;
		uint32_t c;

		memset(p, 0, 8);
		p[0] = 1;
		c = bfs_crc32c_mask(bfs_crc32c(0, p, 8));
		memcpy(p + 8, &c, 4);
		p[12] = (uint8_t)i;
		c = bfs_crc32c_mask(bfs_crc32c(0, p + 12, 1));
		memcpy(p + 13, &c, 4);
	}
	pwrite_all(fd, img, n * rec, 0);
	t0 = now_s();
	assert_int_equal(bfs_tfrecord_scan(fd, n * rec, count_only, &count, NULL), 0);
	t = now_s() - t0;
	assert_int_equal(count, n);
	print_message("tfrecord: scanned %zu records (%zu MB) in %.1f ms\n", n,
		      n * rec >> 20, t * 1e3);
	assert_true(t < 5.0); /* well under 1 s in an -O2 build */
	close(fd);
	free(img);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tfrecord_scan_reads_back_every_written_record),
		cmocka_unit_test(test_tfrecord_scan_hands_over_the_payload_bytes_it_holds),
		cmocka_unit_test(test_tfrecord_scan_of_an_empty_file_finds_nothing),
		cmocka_unit_test(test_tfrecord_scan_returns_the_callbacks_nonzero_value),
		cmocka_unit_test(test_tfrecord_scan_keeps_a_record_whose_bad_length_crc_is_proven),
		cmocka_unit_test(test_tfrecord_scan_stops_at_an_unprovable_bad_length_crc),
		cmocka_unit_test(test_tfrecord_check_detects_a_bad_payload_crc),
		cmocka_unit_test(test_tfrecord_scan_reports_a_cut_at_every_byte),
		cmocka_unit_test(test_tfrecord_scan_rejects_a_huge_length_without_allocating),
		cmocka_unit_test(test_tfrecord_scan_reports_eio_when_the_file_is_shorter_than_said),
		cmocka_unit_test(test_tfrecord_scan_names_a_file_that_is_not_a_tfrecord_without_quoting_it),
		cmocka_unit_test(test_tfrecord_scan_indexes_a_million_tiny_records_quickly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
