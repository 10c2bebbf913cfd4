/*
 * test_daliidx.c - DALI's TFRecord index files (engine/formats/daliidx.h):
 * what tfrecord2idx writes for a shard gives its records' payloads; an
 * index that does not tile the shard exactly, or is not one, is refused
 * with what does not hold.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/formats/daliidx.h"

/* Three records of 100, 7 and 0 payload bytes: 116 + 23 + 16 bytes. */
static const char good[] = "0 116\n116 23\n139 16\n";
#define SHARD 155

static void test_daliidx_gives_each_records_payload(void **state)
{
	bfs_daliidx_rec *r;
	size_t n;

	assert_int_equal(bfs_daliidx_parse(good, strlen(good), SHARD, &r, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_int_equal(r[0].offset, 12);
	assert_int_equal(r[0].length, 100);
	assert_int_equal(r[1].offset, 128);
	assert_int_equal(r[1].length, 7);
	assert_int_equal(r[2].offset, 151);
	assert_int_equal(r[2].length, 0);
	free(r);
}

static void test_daliidx_reads_any_white_space_between_numbers(void **state)
{
	static const char crlf[] = "  0\t116\r\n116 23\r\n\r\n139   16";
	bfs_daliidx_rec *r;
	size_t n;

	assert_int_equal(bfs_daliidx_parse(crlf, strlen(crlf), SHARD, &r, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_int_equal(r[2].offset, 151);
	free(r);
}

static void test_daliidx_of_an_empty_shard_is_empty(void **state)
{
	bfs_daliidx_rec *r;
	size_t n = 9;

	assert_int_equal(bfs_daliidx_parse("", 0, 0, &r, &n, NULL), 0);
	assert_int_equal(n, 0);
	assert_null(r);
	assert_int_equal(bfs_daliidx_parse("\n", 1, 0, &r, &n, NULL), 0);
}

static void expect(const char *text, uint64_t size, int code, const char *says)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_daliidx_rec *r = (void *)1;
	size_t n = 9;

	assert_int_equal(bfs_daliidx_parse(text, strlen(text), size, &r, &n, msg), code);
	assert_null(r);
	assert_int_equal(n, 0);
	if (!strstr(msg, says))
		fail_msg("\"%s\": message \"%s\" does not say \"%s\"", text, msg, says);
}

static void test_daliidx_refuses_records_that_do_not_tile_the_shard(void **state)
{
	expect("0 116\n117 22\n139 16\n", SHARD, BFS_E_CORRUPT, "record 1 starts at 117");
	expect("0 116\n100 39\n139 16\n", SHARD, BFS_E_CORRUPT, "not where the one before it ends");
	expect("0 116\n116 23\n", SHARD, BFS_E_CORRUPT, "end at byte 139 of a shard of 155");
	expect(good, SHARD + 1, BFS_E_CORRUPT, "of a shard of 156");
	expect(good, SHARD - 1, BFS_E_CORRUPT, "past the end of the shard");
	expect("4 116\n", 120, BFS_E_CORRUPT, "record 0 starts at 4");
	expect("0 15\n15 16\n", 31, BFS_E_CORRUPT, "shorter than a record's framing");
	expect("0 4294967312\n", 4294967312ull, BFS_E_CORRUPT, "over 4 GiB");
}

static void test_daliidx_refuses_what_is_not_one(void **state)
{
	expect("0 116 116\n", SHARD, BFS_E_FORMAT, "the size after an offset");
	expect("0,116\n", SHARD, BFS_E_FORMAT, "byte 0");
	expect("0 -116\n", SHARD, BFS_E_FORMAT, "not a decimal number");
	expect("0 0x74\n", SHARD, BFS_E_FORMAT, "not a decimal number");
	expect("\x0a\x12\x00\x00", SHARD, BFS_E_FORMAT, "not a DALI index");
	expect("0 99999999999999999999\n", SHARD, BFS_E_FORMAT, "not a decimal number");
	{
		/* a NUL is no white space */
		static const char nul[] = "0 116\0 116 23";
		char msg[BFS_ERRMSG_MAX];
		bfs_daliidx_rec *r;
		size_t n;

		assert_int_equal(bfs_daliidx_parse(nul, sizeof(nul) - 1, SHARD, &r, &n, msg),
				 BFS_E_FORMAT);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daliidx_gives_each_records_payload),
		cmocka_unit_test(test_daliidx_reads_any_white_space_between_numbers),
		cmocka_unit_test(test_daliidx_of_an_empty_shard_is_empty),
		cmocka_unit_test(test_daliidx_refuses_records_that_do_not_tile_the_shard),
		cmocka_unit_test(test_daliidx_refuses_what_is_not_one),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
