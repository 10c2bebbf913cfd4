/*
 * Unit tests for fs/passthrough.c: reading the kernel's INIT offer and
 * turning passthrough on in libfuse 3.14's INIT reply, byte for byte as
 * the kernel reads it (protocol 7.40).  The mount itself is tested for real
 * in tests/integration/test_passthrough.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/fuse.h>

#include "fs/passthrough.h"

/* An INIT request as the kernel sends it: header, then fuse_init_in. */
static size_t init_request(uint8_t *buf, uint32_t opcode, uint64_t unique,
			   uint32_t flags, uint32_t flags2)
{
	struct fuse_in_header h = { .opcode = opcode, .unique = unique };
	struct fuse_init_in in = { .major = 7, .minor = 45,
				   .flags = flags, .flags2 = flags2 };

	h.len = sizeof(h) + sizeof(in);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &in, sizeof(in));
	return h.len;
}

static void test_init_offer_is_read_from_flags2(void **state)
{
	uint8_t buf[256];
	uint64_t unique = 0;
	size_t len;

	/* FUSE_PASSTHROUGH is bit 37: bit 5 of flags2, with FUSE_INIT_EXT */
	len = init_request(buf, FUSE_INIT, 42, FUSE_INIT_EXT, 1u << 5);
	assert_int_equal(bfs_pt_parse_init(buf, len, &unique), 1);
	assert_int_equal(unique, 42);
	len = init_request(buf, FUSE_INIT, 43, FUSE_INIT_EXT, 1u << 4);
	assert_int_equal(bfs_pt_parse_init(buf, len, &unique), 0);
	/* flags2 counts only with FUSE_INIT_EXT */
	len = init_request(buf, FUSE_INIT, 44, 0, 1u << 5);
	assert_int_equal(bfs_pt_parse_init(buf, len, &unique), 0);
	assert_int_equal(unique, 44);
}

static void test_other_requests_and_short_buffers_are_not_init(void **state)
{
	uint8_t buf[256];
	uint64_t unique = 7;
	size_t len = init_request(buf, FUSE_LOOKUP, 9, FUSE_INIT_EXT, 1u << 5);

	assert_int_equal(bfs_pt_parse_init(buf, len, &unique), -1);
	assert_int_equal(bfs_pt_parse_init(buf, 10, &unique), -1);
	assert_int_equal(unique, 7);
	/* an INIT cut short reads as offering nothing, never past the end */
	len = init_request(buf, FUSE_INIT, 5, FUSE_INIT_EXT, 1u << 5);
	assert_int_equal(bfs_pt_parse_init(buf, sizeof(struct fuse_in_header) + 12,
					   &unique), 0);
}

static void test_init_reply_gets_the_flag_and_stack_depth(void **state)
{
	struct fuse_init_out out = { .major = 7, .minor = 38,
				     .max_readahead = 1 << 20,
				     .flags = FUSE_ASYNC_READ | FUSE_MAX_PAGES,
				     .max_write = 1 << 20, .max_pages = 256 };
	uint8_t body[sizeof(out)];
	uint32_t flags, flags2, depth;

	memcpy(body, &out, sizeof(out));
	assert_int_equal(bfs_pt_patch_init_reply(body, sizeof(body)), 0);
	memcpy(&flags, body + offsetof(struct fuse_init_out, flags), 4);
	memcpy(&flags2, body + offsetof(struct fuse_init_out, flags2), 4);
	/* max_stack_depth is the first word after flags2 (7.40), which the
	 * 7.38 header calls unused[0] */
	memcpy(&depth, body + offsetof(struct fuse_init_out, flags2) + 4, 4);
	assert_int_equal(flags, FUSE_ASYNC_READ | FUSE_MAX_PAGES | FUSE_INIT_EXT);
	assert_int_equal(flags2, 1u << 5);
	assert_int_equal(depth, 1);
	/* everything else as libfuse wrote it */
	assert_int_equal(((struct fuse_init_out *)body)->max_write, 1 << 20);
	assert_int_equal(((struct fuse_init_out *)body)->max_pages, 256);
	assert_int_equal(((struct fuse_init_out *)body)->max_readahead, 1 << 20);
}

static void test_init_reply_refuses_writeback_and_short_bodies(void **state)
{
	struct fuse_init_out out = { .flags = FUSE_WRITEBACK_CACHE };
	uint8_t body[sizeof(out)], before[sizeof(out)];

	memcpy(body, &out, sizeof(out));
	memcpy(before, body, sizeof(body));
	assert_int_equal(bfs_pt_patch_init_reply(body, sizeof(body)), -EINVAL);
	assert_memory_equal(body, before, sizeof(body));
	/* FUSE_COMPAT_22_INIT_OUT_SIZE (24 bytes) has no flags2 */
	assert_int_equal(bfs_pt_patch_init_reply(body, 24), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_offer_is_read_from_flags2),
		cmocka_unit_test(test_other_requests_and_short_buffers_are_not_init),
		cmocka_unit_test(test_init_reply_gets_the_flag_and_stack_depth),
		cmocka_unit_test(test_init_reply_refuses_writeback_and_short_bodies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
