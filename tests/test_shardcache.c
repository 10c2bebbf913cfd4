/*
 * test_shardcache.c - the node-local shard cache (engine/storage/
 * shardcache.h, shardfolder.h) over a local folder as its storage: reads
 * through a cache smaller than the source in the plan's order, the limit
 * kept on disk, pins, range reads where whole objects would not pay,
 * crash leftovers and stale copies never used, and two caches on one
 * folder fetching each object once.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/storage/shardcache.h"
#include "engine/storage/shardfolder.h"
#include "engine/storage/storage.h"

#define NOBJ 8
#define OBJ_BYTES 20000

static char tmp[256], src[300], dir[300];

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/bfs_shardcache_XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(src, sizeof(src), "%s/src", tmp);
	snprintf(dir, sizeof(dir), "%s/cache", tmp);
	mkdir(src, 0755);
	for (int k = 0; k < NOBJ; k++) {
		char path[400];
		FILE *f;

		snprintf(path, sizeof(path), "%s/shard-%02d.tar", src, k);
		if (!(f = fopen(path, "wb")))
			return -1;
		for (int i = 0; i < OBJ_BYTES; i++)
			fputc((k * 31 + i * 7) & 0xff, f);
		fclose(f);
	}
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

static uint8_t byte_of(int k, int i)
{
	return (uint8_t)((k * 31 + i * 7) & 0xff);
}

static bfs_storage *open_src(void)
{
	bfs_storage_opts o = { 0 };
	bfs_storage *st = NULL;
	char err[512] = "";

	assert_int_equal(bfs_storage_open(src, &o, &st, err), 0);
	return st;
}

static bfs_shardcache *open_cache(bfs_storage *st, uint64_t limit, unsigned fetchers)
{
	bfs_shardcache_opts o = { .dir = dir, .max_bytes = limit, .fetchers = fetchers,
				  .part_bytes = 8192, .lock_wait_s = 5 };
	bfs_shardcache *c = NULL;
	char err[512] = "";

	assert_int_equal(bfs_shardcache_open(st, &o, &c, err), 0);
	return c;
}

static uint64_t cost1(void)
{
	/* a local "ETag" is '"L' + three hex numbers + '"': at most 56 bytes,
	 * which stays inside the same 4 KiB blocks */
	return bfs_shardfolder_cost(OBJ_BYTES, 56);
}

/* Spans of a file-order epoch over objects 0..n-1, `per` records each,
 * starting at position base. */
static void file_order(bfs_span *s, int n, uint64_t per, uint64_t base)
{
	for (int k = 0; k < n; k++)
		s[k] = (bfs_span){ (uint32_t)k, base + (uint64_t)k * per,
				   base + (uint64_t)(k + 1) * per - 1, OBJ_BYTES };
}

static void check_record(bfs_shardcache *c, int k, int off, int len)
{
	uint8_t buf[4096];
	char err[512] = "";

	assert_true(len <= (int)sizeof(buf));
	assert_int_equal(bfs_shardcache_read(c, (size_t)k, (uint64_t)off, buf,
					     (size_t)len, err), 0);
	for (int i = 0; i < len; i++)
		assert_int_equal(buf[i], byte_of(k, off + i));
}

static void test_shardcache_reads_a_source_through_a_cache_smaller_than_it_in_plan_order(void **state)
{
	enum { PER = 10, REC = 2000 };
	bfs_storage *st = open_src();
	uint64_t limit = 3 * cost1();
	bfs_shardcache *c = open_cache(st, limit, 2);
	bfs_span spans[2 * NOBJ];
	bfs_shardcache_stats s;

	(void)state;
	assert_int_equal(bfs_shardcache_count(c), NOBJ);
	file_order(spans, NOBJ, PER, 0);
	file_order(spans + NOBJ, NOBJ, PER, NOBJ * PER);
	assert_int_equal(bfs_shardcache_plan(c, spans, 2 * NOBJ, 0, 0), 0);
	for (int e = 0; e < 2; e++) {
		for (int k = 0; k < NOBJ; k++)
			for (int r = 0; r < PER; r++) {
				bfs_shardcache_advance(c, (uint64_t)((e * NOBJ + k) * PER + r), e);
				/* a reader slower than the link, as a decoder is */
				usleep(2000);
				check_record(c, k, r * REC, REC);
				bfs_shardcache_get_stats(c, &s);
				assert_true(s.bytes_on_disk <= limit);
			}
	}
	bfs_shardcache_get_stats(c, &s);
	/* each object once an epoch, as the plan said: fetched ahead, so
	 * that only the first records can have come before their object */
	assert_int_equal(s.fetched, 2 * NOBJ);
	assert_true(s.range_reads <= PER);
	assert_int_equal(s.bytes_fetched, 2 * NOBJ * OBJ_BYTES);
	assert_true(s.evictions >= 2 * NOBJ - 3);
	assert_int_equal(s.epoch_first, 0);
	assert_int_equal(s.epoch_last, 1);
	/* every byte counted in one of them (without epoch positions, what
	 * was fetched ahead for epoch 1 counts in the reader's epoch 0) */
	assert_int_equal(s.epoch_bytes[0] + s.epoch_bytes[1],
			 s.bytes_fetched + s.range_bytes);
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

static void test_shardcache_fetches_nothing_without_a_plan_or_a_pin(void **state)
{
	bfs_storage *st = open_src();
	bfs_shardcache *c = open_cache(st, 100 * cost1(), 2);
	bfs_shardcache_stats s;
	bfs_http_stats hs;

	(void)state;
	usleep(300000);
	bfs_shardcache_get_stats(c, &s);
	bfs_storage_stats(st, &hs);
	assert_int_equal(s.fetched, 0);
	assert_int_equal(hs.requests, 0);
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

static void test_shardcache_pin_holds_the_whole_object_and_nothing_evicts_it(void **state)
{
	bfs_storage *st = open_src();
	bfs_shardcache *c = open_cache(st, 2 * cost1(), 2);
	bfs_span spans[NOBJ];
	uint8_t b[16];
	char err[512] = "";
	int fd;

	(void)state;
	assert_int_equal(bfs_shardcache_pin(c, 5, &fd, err), 0);
	assert_int_equal(pread(fd, b, sizeof(b), 100), (ssize_t)sizeof(b));
	for (int i = 0; i < (int)sizeof(b); i++)
		assert_int_equal(b[i], byte_of(5, 100 + i));
	/* a plan over everything else, read through the one slot left */
	file_order(spans, NOBJ, 1, 0);
	assert_int_equal(bfs_shardcache_plan(c, spans, NOBJ, 0, -1), 0);
	for (int k = 0; k < NOBJ; k++) {
		bfs_shardcache_advance(c, (uint64_t)k, -1);
		check_record(c, k, 0, 1000);
	}
	/* still the same open file, still readable */
	assert_int_equal(pread(fd, b, sizeof(b), 0), (ssize_t)sizeof(b));
	assert_int_equal(b[0], byte_of(5, 0));
	bfs_shardcache_unpin(c, 5);
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

static void test_shardcache_reads_by_range_what_a_whole_fetch_would_not_pay_for(void **state)
{
	bfs_storage *st = open_src();
	uint64_t limit = 2 * cost1();
	bfs_shardcache *c = open_cache(st, limit, 2);
	bfs_span spans[NOBJ];
	bfs_shardcache_stats s;

	(void)state;
	/* a global shuffle: every object needed over the whole pass */
	for (int k = 0; k < NOBJ; k++)
		spans[k] = (bfs_span){ (uint32_t)k, (uint64_t)k, 1000 - (uint64_t)k, OBJ_BYTES };
	assert_int_equal(bfs_shardcache_plan(c, spans, NOBJ, 0, 0), 0);
	for (int r = 0; r < 4; r++)
		for (int k = NOBJ - 1; k >= 0; k--) {
			bfs_shardcache_advance(c, (uint64_t)(10 + r * NOBJ + (NOBJ - 1 - k)), 0);
			check_record(c, k, 3000 + r * 50, 50);
			bfs_shardcache_get_stats(c, &s);
			assert_true(s.bytes_on_disk <= limit);
		}
	bfs_shardcache_get_stats(c, &s);
	/* what is kept whole is within the room; the others go by range */
	assert_true(s.fetched <= 1);
	assert_true(s.range_reads >= 4 * (NOBJ - 2));
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

static void put_bytes(const char *path, const char *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
}

static void test_shardcache_never_uses_what_a_crash_or_a_replaced_object_left(void **state)
{
	bfs_storage *st = open_src();
	bfs_shardcache *c = open_cache(st, 100 * cost1(), 2);
	char path[600], err[512] = "";
	bfs_shardcache_stats s;
	const char *folder;
	int fd;

	(void)state;
	/* one object whole in the cache */
	assert_int_equal(bfs_shardcache_pin(c, 0, &fd, err), 0);
	bfs_shardcache_unpin(c, 0);
	assert_int_equal(bfs_shardcache_pin(c, 1, &fd, err), 0);
	bfs_shardcache_unpin(c, 1);
	folder = bfs_shardcache_path(c);
	snprintf(path, sizeof(path), "%s", folder);
	bfs_shardcache_close(c);
	/* what a kill -9 leaves: a fetch under way nobody holds, an object
	 * cut short (its trailer gone), and an object of another identity */
	{
		char p[700];

		snprintf(p, sizeof(p), "%s/tmp/f99999-1", path);
		put_bytes(p, "partial", 7);
		snprintf(p, sizeof(p), "%s/data/shard-00.tar", path);
		assert_int_equal(truncate(p, OBJ_BYTES), 0);
		snprintf(p, sizeof(p), "%s/data/shard-02.tar", path);
		put_bytes(p, "not an object of this identity", 30);
	}
	c = open_cache(st, 100 * cost1(), 2);
	bfs_shardcache_get_stats(c, &s);
	assert_int_equal(s.removed, 3);
	{
		char p[700];
		struct stat sb;

		snprintf(p, sizeof(p), "%s/tmp/f99999-1", path);
		assert_int_equal(stat(p, &sb), -1);
	}
	/* object 1 is whole and found; 0 is fetched again, whole and right */
	check_record(c, 1, 0, 100);
	check_record(c, 0, OBJ_BYTES - 100, 100);
	assert_int_equal(bfs_shardcache_pin(c, 0, &fd, err), 0);
	bfs_shardcache_unpin(c, 0);
	bfs_shardcache_get_stats(c, &s);
	assert_int_equal(s.found, 1);
	assert_int_equal(s.fetched, 1);
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

static void test_shardcache_fails_the_reads_of_an_object_replaced_since_it_was_listed(void **state)
{
	bfs_storage *st = open_src();
	bfs_shardcache *c = open_cache(st, 100 * cost1(), 2);
	char path[400], err[512] = "";
	uint8_t b[10];
	int fd;

	(void)state;
	usleep(20000);
	snprintf(path, sizeof(path), "%s/shard-03.tar", src);
	put_bytes(path, "0123456789", 10);
	assert_int_equal(bfs_shardcache_read(c, 3, 0, b, sizeof(b), err), -ESTALE);
	assert_non_null(strstr(err, "shard-03.tar"));
	err[0] = '\0';
	assert_int_equal(bfs_shardcache_pin(c, 3, &fd, err), -ESTALE);
	assert_non_null(strstr(err, "changed since it was listed"));
	/* the others are served */
	check_record(c, 4, 0, 10);
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

static void test_shardcache_two_caches_on_one_folder_fetch_each_object_once(void **state)
{
	bfs_storage *st = open_src();
	bfs_shardcache *a = open_cache(st, 100 * cost1(), 2);
	bfs_shardcache *b = open_cache(st, 100 * cost1(), 2);
	bfs_span spans[NOBJ];
	bfs_shardcache_stats sa, sb;

	(void)state;
	file_order(spans, NOBJ, 1, 0);
	assert_int_equal(bfs_shardcache_plan(a, spans, NOBJ, 0, 0), 0);
	assert_int_equal(bfs_shardcache_plan(b, spans, NOBJ, 0, 0), 0);
	for (int k = 0; k < NOBJ; k++) {
		int fd;
		char err[512] = "";

		assert_int_equal(bfs_shardcache_pin(a, (size_t)k, &fd, err), 0);
		bfs_shardcache_unpin(a, (size_t)k);
		assert_int_equal(bfs_shardcache_pin(b, (size_t)k, &fd, err), 0);
		bfs_shardcache_unpin(b, (size_t)k);
	}
	bfs_shardcache_get_stats(a, &sa);
	bfs_shardcache_get_stats(b, &sb);
	assert_int_equal(sa.fetched + sb.fetched, NOBJ);
	assert_int_equal(sa.found + sb.found, NOBJ);
	assert_int_equal(sa.bytes_fetched + sb.bytes_fetched, NOBJ * OBJ_BYTES);
	bfs_shardcache_close(a);
	bfs_shardcache_close(b);
	bfs_storage_close(st);
}

/* Each fetch's file in tmp/ has a name no other fetch has: not another
 * folder of this process on the same directory (two mounts' caches in one
 * program), nor what a dead process of this pid left (a container's
 * daemon has the same small pid every time).  Names were f<pid>-<seq>. */
static void test_shardcache_a_fetch_s_file_never_meets_another_s_name(void **state)
{
	bfs_shardfolder *f1 = NULL, *f2 = NULL;
	bfs_storage_object a = { .name = (char *)"shard-00.tar", .size = OBJ_BYTES, .etag = "\"a\"" };
	bfs_storage_object b = { .name = (char *)"shard-01.tar", .size = OBJ_BYTES, .etag = "\"b\"" };
	bfs_shardfolder_tmp ta, tb, tc;
	char err[512] = "";

	(void)state;
	assert_int_equal(bfs_shardfolder_open(dir, src, 100 * cost1(), 5000, &f1, err), 0);
	assert_int_equal(bfs_shardfolder_open(dir, src, 100 * cost1(), 5000, &f2, err), 0);
	/* what a killed earlier process of this pid left, named as before */
	for (int i = 0; i < 4; i++) {
		char d[600];

		snprintf(d, sizeof(d), "%s/tmp/f%ld-%d", bfs_shardfolder_path(f1),
			 (long)getpid(), i);
		put_bytes(d, "partial", 7);
	}
	assert_int_equal(bfs_shardfolder_reserve(f1, &a, &ta, err), 0);
	assert_int_equal(bfs_shardfolder_reserve(f2, &b, &tb, err), 0);
	assert_int_equal(bfs_shardfolder_reserve(f2, &a, &tc, err), 0);
	assert_string_not_equal(ta.path, tb.path);
	assert_string_not_equal(ta.path, tc.path);
	assert_string_not_equal(tb.path, tc.path);
	bfs_shardfolder_abandon(f1, &ta);
	bfs_shardfolder_abandon(f2, &tb);
	bfs_shardfolder_abandon(f2, &tc);
	bfs_shardfolder_close(f1);
	bfs_shardfolder_close(f2);
}

static void test_shardcache_refuses_a_limit_below_its_largest_object(void **state)
{
	bfs_storage *st = open_src();
	bfs_shardcache_opts o = { .dir = dir, .max_bytes = 10000 };
	bfs_shardcache *c = NULL;
	char err[512] = "";

	(void)state;
	assert_int_equal(bfs_shardcache_open(st, &o, &c, err), -ENOSPC);
	assert_null(c);
	assert_non_null(strstr(err, "cannot hold the largest object"));
	bfs_storage_close(st);
}

/* Fetched ahead for the next epoch while the reader is still in this
 * one: those bytes are the next epoch's (a node of a shards split
 * fetches its share of each epoch, whenever it fetches it). */
static void test_shardcache_counts_what_it_fetches_ahead_towards_the_epoch_that_needs_it(void **state)
{
	enum { PER = 10 };
	bfs_storage *st = open_src();
	bfs_shardcache *c = open_cache(st, NOBJ * cost1(), 2);
	bfs_span spans[NOBJ];
	bfs_shardcache_stats s;

	(void)state;
	/* epoch 0 needs objects 0..3, epoch 1 objects 4..7 (positions
	 * NOBJ / 2 * PER an epoch) */
	file_order(spans, NOBJ, PER, 0);
	bfs_shardcache_epoch_positions(c, NOBJ / 2 * PER);
	assert_int_equal(bfs_shardcache_plan(c, spans, NOBJ, 0, 0), 0);
	check_record(c, 0, 0, 100);
	for (int i = 0; i < 5000; i++) { /* at most 10 s: every object */
		bfs_shardcache_get_stats(c, &s);
		if (s.fetched == NOBJ)
			break;
		usleep(2000);
	}
	assert_int_equal(s.fetched, NOBJ);
	assert_int_equal(s.epoch_first, 0);
	assert_int_equal(s.epoch_last, 1);
	assert_int_equal(s.epoch_bytes[0], NOBJ / 2 * OBJ_BYTES);
	assert_int_equal(s.epoch_bytes[1], NOBJ / 2 * OBJ_BYTES);
	bfs_shardcache_close(c);
	bfs_storage_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shardcache_reads_a_source_through_a_cache_smaller_than_it_in_plan_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_fetches_nothing_without_a_plan_or_a_pin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_pin_holds_the_whole_object_and_nothing_evicts_it, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_reads_by_range_what_a_whole_fetch_would_not_pay_for, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_never_uses_what_a_crash_or_a_replaced_object_left, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_fails_the_reads_of_an_object_replaced_since_it_was_listed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_two_caches_on_one_folder_fetch_each_object_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_a_fetch_s_file_never_meets_another_s_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_refuses_a_limit_below_its_largest_object, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shardcache_counts_what_it_fetches_ahead_towards_the_epoch_that_needs_it, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
