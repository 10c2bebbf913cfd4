/*
 * test_label.c - engine/formats/label: --label-offset is added unless the sum
 * overflows int64, which is refused with the label and the offset named;
 * labels read from WebDataset .cls/.txt decimals and .json objects, as
 * Python's int() and json module read them.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/formats/label.h"

static void test_label_offset_is_added_when_the_sum_fits(void **state)
{
	static const int64_t cases[][3] = {
		{ 5, -1, 4 },
		{ 0, INT64_MAX, INT64_MAX },
		{ -1, INT64_MAX, INT64_MAX - 1 },
		{ 0, INT64_MIN, INT64_MIN },
		{ 1, INT64_MIN, INT64_MIN + 1 },
		{ INT64_MAX, INT64_MIN, -1 },
		{ INT64_MIN, 0, INT64_MIN },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t l = cases[i][0];

		assert_int_equal(bfs_label_add_offset(&l, cases[i][1], NULL), 0);
		assert_true(l == cases[i][2]);
	}
}

static void test_label_offset_that_overflows_is_refused_and_named(void **state)
{
	static const int64_t cases[][2] = {
		{ 1, INT64_MAX }, { INT64_MAX, 1 }, { INT64_MAX, INT64_MAX },
		{ -1, INT64_MIN }, { INT64_MIN, -1 }, { INT64_MIN, INT64_MIN },
	};
	char msg[BFS_ERRMSG_MAX];
	int64_t l = 3;

	assert_int_equal(bfs_label_add_offset(&l, INT64_MAX, msg), -ERANGE);
	assert_string_equal(msg, "label 3 + --label-offset 9223372036854775807 "
			    "overflows int64");
	assert_true(l == 3); /* untouched */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		l = cases[i][0];
		assert_int_equal(bfs_label_add_offset(&l, cases[i][1], NULL),
				 -ERANGE);
		assert_true(l == cases[i][0]);
	}
}


static int json_label(const char *text, const char *key, int64_t *out, char *msg)
{
	return bfs_label_json((const uint8_t *)text, strlen(text), key, out, msg);
}

static void test_label_json_reads_the_top_level_integer_of_the_key(void **state)
{
	static const struct { const char *json, *key; int64_t want; } ok[] = {
		{ "{\"label\": 3}", "label", 3 },
		{ " \n{\"a\":[1,{\"label\":9}],\"label\":-12, \"b\":null}\t", "label", -12 },
		{ "{\"label\":1,\"label\":2}", "label", 2 },            /* last wins */
		{ "{\"image/class/label\": 0}", "image/class/label", 0 },
		{ "{\"im\\/g\": 5}", "im/g", 5 },                       /* escapes */
		{ "{\"caf\\u00e9\": 6}", "caf\xc3\xa9", 6 },             /* \\u to UTF-8 */
		{ "{\"\\ud83d\\ude00\": 7}", "\xf0\x9f\x98\x80", 7 },    /* a surrogate pair */
		{ "{\"n\": 9223372036854775807}", "n", INT64_MAX },
		{ "{\"n\": -9223372036854775808}", "n", INT64_MIN },
		{ "{\"x\": \"{\\\"n\\\": 1}\", \"n\": 4}", "n", 4 },  /* a key inside a string */
	};
	static const struct { const char *json, *key; int code; const char *why; } bad[] = {
		{ "{\"label\": 3.0}", "label", BFS_E_CORRUPT, "is not an integer" },
		{ "{\"label\": 1e3}", "label", BFS_E_CORRUPT, "is not an integer" },
		{ "{\"label\": \"3\"}", "label", BFS_E_CORRUPT, "is not an integer" },
		{ "{\"label\": true}", "label", BFS_E_CORRUPT, "is not an integer" },
		{ "{\"label\": 9223372036854775808}", "label", BFS_E_CORRUPT, "is not an integer" },
		{ "{\"other\": 3}", "label", BFS_E_NOKEY, "has no member \"label\"" },
		{ "{\"meta\": {\"label\": 3}}", "label", BFS_E_NOKEY, "has no member" },
		{ "[1, 2]", "label", BFS_E_CORRUPT, "is not a JSON object" },
		{ "{\"label\": 3", "label", BFS_E_CORRUPT, "is not JSON" },
		{ "{\"label\": 03}", "label", BFS_E_CORRUPT, "is not JSON" },
		{ "{\"label\": 3} {}", "label", BFS_E_CORRUPT, "more after the object" },
		{ "{label: 3}", "label", BFS_E_CORRUPT, "is not JSON" },
		{ "", "label", BFS_E_CORRUPT, "is not a JSON object" },
	};
	char msg[BFS_ERRMSG_MAX];
	int64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		if (json_label(ok[i].json, ok[i].key, &v, msg))
			fail_msg("%s: %s", ok[i].json, msg);
		assert_true(v == ok[i].want);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 77;
		assert_int_equal(json_label(bad[i].json, bad[i].key, &v, msg), bad[i].code);
		if (!strstr(msg, bad[i].why))
			fail_msg("%s: '%s' lacks '%s'", bad[i].json, msg, bad[i].why);
		assert_true(v == 77);
	}
}

static void test_label_json_refuses_nesting_past_its_limit_without_recursing_on(void **state)
{
	char deep[4 * BFS_LABEL_JSON_DEPTH + 64], msg[BFS_ERRMSG_MAX];
	size_t n = 0;
	int64_t v;

	n += (size_t)sprintf(deep, "{\"a\":");
	for (int i = 0; i < BFS_LABEL_JSON_DEPTH + 2; i++)
		deep[n++] = '[';
	for (int i = 0; i < BFS_LABEL_JSON_DEPTH + 2; i++)
		deep[n++] = ']';
	n += (size_t)sprintf(deep + n, ",\"label\":1}");
	assert_int_equal(bfs_label_json((const uint8_t *)deep, n, "label", &v, msg), BFS_E_CORRUPT);
}

static void test_label_decimal_reads_as_webdataset_does(void **state)
{
	int64_t v;

	assert_int_equal(bfs_label_parse_decimal((const uint8_t *)" 42\n", 4, &v), 0);
	assert_true(v == 42);
	assert_int_equal(bfs_label_parse_decimal((const uint8_t *)"-7", 2, &v), 0);
	assert_true(v == -7);
	assert_int_equal(bfs_label_parse_decimal((const uint8_t *)"4 2", 3, &v), -1);
	assert_int_equal(bfs_label_parse_decimal((const uint8_t *)"", 0, &v), -1);
	assert_int_equal(bfs_label_parse_decimal((const uint8_t *)"a cat", 5, &v), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_label_offset_is_added_when_the_sum_fits),
		cmocka_unit_test(test_label_offset_that_overflows_is_refused_and_named),
		cmocka_unit_test(test_label_json_reads_the_top_level_integer_of_the_key),
		cmocka_unit_test(test_label_json_refuses_nesting_past_its_limit_without_recursing_on),
		cmocka_unit_test(test_label_decimal_reads_as_webdataset_does),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
