/*
 * test_log.c - bfs_log_escape: names from shards stay readable (UTF-8 is
 * kept) and can never forge a log line or a terminal escape.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fs/log.h"

static void expect_escape(const char *in, size_t cap, const char *want)
{
	char out[256];

	assert_true(cap <= sizeof(out));
	memset(out, 'Z', sizeof(out));
	bfs_log_escape(in, out, cap);
	if (strcmp(out, want) != 0)
		fail_msg("escape of \"%s\" (cap %zu): got \"%s\", want \"%s\"",
			 in, cap, out, want);
}

static void test_log_keeps_utf8_names_readable(void **state)
{
	expect_escape("\xe7\x8c\xab/x.jpg", 256, "\xe7\x8c\xab/x.jpg");
	expect_escape("donn\xc3\xa9" "es.tfrecord", 256,
		      "donn\xc3\xa9" "es.tfrecord");
	expect_escape("\xf0\x9f\x90\x88", 256, "\xf0\x9f\x90\x88");
}

static void test_log_escapes_controls_and_backslashes(void **state)
{
	expect_escape("a\x1b[31mRED\x1b[0m\nFAKE\r\a", 256,
		      "a\\x1b[31mRED\\x1b[0m\\x0aFAKE\\x0d\\x07");
	expect_escape("\x7f\\", 256, "\\x7f\\x5c");
}

static void test_log_escapes_c1_controls_line_breaks_and_bidi_controls(void **state)
{
	/* U+009B (CSI), U+0085 (NEL), U+2028, U+202E (right-to-left
	 * override), U+2066 */
	expect_escape("\xc2\x9b" "31m\xc2\x85", 256, "\\xc2\\x9b31m\\xc2\\x85");
	expect_escape("a\xe2\x80\xa8" "b", 256, "a\\xe2\\x80\\xa8b");
	expect_escape("\xe2\x80\xae" "gpj.exe", 256, "\\xe2\\x80\\xaegpj.exe");
	expect_escape("\xe2\x81\xa6", 256, "\\xe2\\x81\\xa6");
}

static void test_log_escapes_each_byte_that_is_not_utf8(void **state)
{
	expect_escape("b\xff\xfe%s", 256, "b\\xff\\xfe%s");
	expect_escape("\xc0\x80", 256, "\\xc0\\x80");             /* overlong */
	expect_escape("\xed\xa0\x80", 256, "\\xed\\xa0\\x80");    /* surrogate */
	expect_escape("\xf4\x90\x80\x80", 256, "\\xf4\\x90\\x80\\x80");
	expect_escape("\xe7\x8c", 256, "\\xe7\\x8c");             /* cut short */
	expect_escape("\xe7\x8c" "a", 256, "\\xe7\\x8ca");
}

static void test_log_never_cuts_a_character_or_an_escape_in_half(void **state)
{
	/* "ab" + 猫 needs 6 bytes with the NUL: cap 5 leaves 猫 out */
	expect_escape("ab\xe7\x8c\xab", 5, "ab");
	expect_escape("ab\xe7\x8c\xab", 6, "ab\xe7\x8c\xab");
	expect_escape("ab\n", 6, "ab");
	expect_escape("ab\n", 7, "ab\\x0a");
	expect_escape("x", 1, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_log_keeps_utf8_names_readable),
		cmocka_unit_test(test_log_escapes_controls_and_backslashes),
		cmocka_unit_test(test_log_escapes_c1_controls_line_breaks_and_bidi_controls),
		cmocka_unit_test(test_log_escapes_each_byte_that_is_not_utf8),
		cmocka_unit_test(test_log_never_cuts_a_character_or_an_escape_in_half),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
