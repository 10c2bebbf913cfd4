/*
 * test_jsonread.c - fs/jsonread: what the JSON writer (fs/json.h) writes
 * reads back to the same values and bytes, and malformed text is refused
 * with where.
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

#include "fs/json.h"
#include "fs/jsonread.h"

static bfs_jr *parse(const char *text)
{
	char err[128];
	bfs_jr *v = NULL;
	int rc = bfs_jr_parse(text, strlen(text), &v, err, sizeof(err));

	if (rc)
		fail_msg("'%s' refused: %s", text, err);
	return v;
}

static void expect_refused(const char *text, const char *why)
{
	char err[128] = "";
	bfs_jr *v = (bfs_jr *)1;

	assert_int_equal(bfs_jr_parse(text, strlen(text), &v, err, sizeof(err)),
			 -EINVAL);
	assert_null(v);
	if (!strstr(err, why))
		fail_msg("'%s': error '%s' does not say '%s'", text, err, why);
}

static void test_jsonread_reads_back_what_the_writer_wrote(void **state)
{
	/* names as they come from shards: UTF-8, a byte that is not, controls */
	static const char *const names[] = { "données.tfrecord", "猫",
					     "caf\xe9", "a\"b\\c\n\x01\x7f",
					     "\xf0\x9f\x90\x88 x", "" };
	bfs_json j;
	char *text;
	size_t len;
	bfs_jr *v;

	for (int compact = 0; compact < 2; compact++) {
		bfs_json_init(&j);
		j.compact = compact;
		bfs_json_open(&j, NULL, '{');
		bfs_json_u64(&j, "n", 18446744073709551615ull);
		bfs_json_i64(&j, "neg", -42);
		bfs_json_f64(&j, "rate", 1234.5);
		bfs_json_fixed(&j, "t", 1796168589.787, 3);
		bfs_json_bool(&j, "yes", 1);
		bfs_json_null(&j, "none");
		bfs_json_open(&j, "names", '[');
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			bfs_json_str(&j, NULL, names[i]);
		bfs_json_close(&j, ']');
		bfs_json_open(&j, "empty", '{');
		bfs_json_close(&j, '}');
		bfs_json_close(&j, '}');
		assert_int_equal(bfs_json_take(&j, &text, &len), 0);
		if (compact)
			assert_null(memchr(text, '\n', len - 1)); /* one line */
		v = parse(text);
		assert_int_equal(v->type, BFS_JR_OBJECT);
		assert_true(bfs_jr_num(bfs_jr_get(v, "n"), 0) == 18446744073709551615.0);
		assert_true(bfs_jr_num(bfs_jr_get(v, "neg"), 0) == -42);
		assert_true(bfs_jr_num(bfs_jr_get(v, "rate"), 0) == 1234.5);
		assert_true(bfs_jr_num(bfs_jr_get(v, "t"), 0) == 1796168589.787);
		assert_true(bfs_jr_bool(bfs_jr_get(v, "yes"), 0));
		assert_int_equal(bfs_jr_get(v, "none")->type, BFS_JR_NULL);
		assert_int_equal(bfs_jr_get(v, "empty")->n, 0);
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			const bfs_jr *s = bfs_jr_at(bfs_jr_get(v, "names"), i);

			assert_non_null(s);
			assert_int_equal(s->len, strlen(names[i]));
			assert_memory_equal(s->str, names[i], s->len);
		}
		assert_null(bfs_jr_at(bfs_jr_get(v, "names"), 6));
		bfs_jr_free(v);
		free(text);
	}
}

static void test_jsonread_decodes_every_escape(void **state)
{
	bfs_jr *v = parse("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u732b\", "
			  "\"\\ud83d\\udc08\", \"\\ud800x\", \"\\udce9\", \"a\\u0000b\"]");

	assert_string_equal(bfs_jr_at(v, 0)->str, "\"\\/\b\f\n\r\t");
	assert_string_equal(bfs_jr_at(v, 1)->str, "\xc3\xa9\xe7\x8c\xab");
	assert_string_equal(bfs_jr_at(v, 2)->str, "\xf0\x9f\x90\x88"); /* a pair */
	assert_string_equal(bfs_jr_at(v, 3)->str, "\xef\xbf\xbdx"); /* lone high */
	assert_string_equal(bfs_jr_at(v, 4)->str, "\xe9");  /* surrogateescape */
	assert_int_equal(bfs_jr_at(v, 5)->len, 3);
	assert_memory_equal(bfs_jr_at(v, 5)->str, "a\0b", 3);
	bfs_jr_free(v);
}

static void test_jsonread_finds_the_last_of_duplicate_keys_and_nothing_in_other_types(void **state)
{
	bfs_jr *v = parse(" {\"a\": 1, \"b\": [true, false], \"a\": 2} ");

	assert_true(bfs_jr_num(bfs_jr_get(v, "a"), 0) == 2);
	assert_null(bfs_jr_get(v, "c"));
	assert_null(bfs_jr_get(bfs_jr_get(v, "b"), "a"));
	assert_null(bfs_jr_at(v, 0));
	assert_false(bfs_jr_bool(bfs_jr_at(bfs_jr_get(v, "b"), 1), 1));
	assert_true(bfs_jr_num(bfs_jr_get(v, "b"), 7) == 7);
	assert_string_equal(bfs_jr_str(bfs_jr_get(v, "a"), "dflt"), "dflt");
	assert_null(bfs_jr_get(NULL, "a"));
	bfs_jr_free(v);
	bfs_jr_free(NULL);
}

static void test_jsonread_refuses_malformed_text_and_says_where(void **state)
{
	char deep[200];

	expect_refused("", "a value is missing");
	expect_refused("{\"a\": 1,}", "expected a member name");
	expect_refused("[1, 2,]", "offset 6");
	expect_refused("[1 2]", "expected ',' or ']'");
	expect_refused("{\"a\" 1}", "expected ':'");
	expect_refused("01", "text after the value");
	expect_refused("-", "ends too soon");
	expect_refused("1.", "a digit must follow '.'");
	expect_refused("1e+", "a digit must follow the exponent");
	expect_refused("NaN", "bad number");
	expect_refused("\"abc", "not closed");
	expect_refused("\"a\x01\"", "control character");
	expect_refused("\"\\x41\"", "bad escape");
	expect_refused("\"\\u12\"", "four hex digits");
	expect_refused("tru", "unexpected");
	expect_refused("{} {}", "text after the value");
	memset(deep, '[', 70);
	memset(deep + 70, ']', 70);
	deep[140] = '\0';
	expect_refused(deep, "nested deeper than 64");
	memset(deep, '[', 64);
	memset(deep + 64, ']', 64);
	deep[128] = '\0';
	bfs_jr_free(parse(deep));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jsonread_reads_back_what_the_writer_wrote),
		cmocka_unit_test(test_jsonread_decodes_every_escape),
		cmocka_unit_test(test_jsonread_finds_the_last_of_duplicate_keys_and_nothing_in_other_types),
		cmocka_unit_test(test_jsonread_refuses_malformed_text_and_says_where),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
