/*
 * test_label.c - engine/label: --label-offset is added unless the sum
 * overflows int64, which is refused with the label and the offset named.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/error.h"
#include "engine/label.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_label_offset_is_added_when_the_sum_fits),
		cmocka_unit_test(test_label_offset_that_overflows_is_refused_and_named),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
