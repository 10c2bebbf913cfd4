/*
 * test_badset.c - the engine's record of bad samples: states, the next
 * sample worth trying after a run of bad ones (with wrapping and path
 * compression), and a random workout against a plain array model.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "engine/badset.h"

static void test_badset_knows_nothing_at_first(void **state)
{
	bfs_badset *b;

	assert_int_equal(bfs_badset_create(10, &b), 0);
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(bfs_badset_state(b, i, NULL), BFS_SAMPLE_UNKNOWN);
	assert_int_equal(bfs_badset_next(b, 3), 4);
	assert_int_equal(bfs_badset_next(b, 9), 0);
	assert_int_equal(bfs_badset_count(b), 0);
	bfs_badset_destroy(b);
}

static void test_badset_refuses_an_empty_source(void **state)
{
	bfs_badset *b = (bfs_badset *)1;

	assert_int_equal(bfs_badset_create(0, &b), -EINVAL);
	assert_null(b);
	bfs_badset_destroy(NULL);
}

static void test_badset_keeps_the_first_code_of_a_bad_sample(void **state)
{
	bfs_badset *b;
	int code = 0;

	assert_int_equal(bfs_badset_create(10, &b), 0);
	assert_int_equal(bfs_badset_mark_bad(b, 4, -5), 1);
	assert_int_equal(bfs_badset_mark_bad(b, 4, -7), 0);
	assert_int_equal(bfs_badset_state(b, 4, &code), BFS_SAMPLE_BAD);
	assert_int_equal(code, -5);
	assert_int_equal(bfs_badset_count(b), 1);
	bfs_badset_destroy(b);
}

static void test_badset_claim_then_unclaim_or_mark(void **state)
{
	bfs_badset *b;

	assert_int_equal(bfs_badset_create(10, &b), 0);
	assert_int_equal(bfs_badset_claim(b, 2), 0);
	assert_int_equal(bfs_badset_claim(b, 2), -EEXIST);
	assert_int_equal(bfs_badset_state(b, 2, NULL), BFS_SAMPLE_PENDING);
	bfs_badset_unclaim(b, 2);
	assert_int_equal(bfs_badset_state(b, 2, NULL), BFS_SAMPLE_UNKNOWN);
	assert_int_equal(bfs_badset_claim(b, 2), 0);
	assert_int_equal(bfs_badset_mark_bad(b, 2, -1), 1);
	assert_int_equal(bfs_badset_state(b, 2, NULL), BFS_SAMPLE_BAD);
	assert_int_equal(bfs_badset_claim(b, 2), -EEXIST);
	bfs_badset_unclaim(b, 2); /* no-op on a bad one */
	assert_int_equal(bfs_badset_state(b, 2, NULL), BFS_SAMPLE_BAD);
	bfs_badset_destroy(b);
}

static void test_badset_next_passes_a_run_and_stops_at_pending(void **state)
{
	bfs_badset *b;

	assert_int_equal(bfs_badset_create(100, &b), 0);
	for (uint64_t i = 10; i < 60; i++)
		bfs_badset_mark_bad(b, i, -1);
	assert_int_equal(bfs_badset_next(b, 9), 60);
	assert_int_equal(bfs_badset_next(b, 10), 60);
	assert_int_equal(bfs_badset_next(b, 35), 60);
	assert_int_equal(bfs_badset_claim(b, 60), 0);
	assert_int_equal(bfs_badset_next(b, 20), 60); /* pending: not passed */
	bfs_badset_mark_bad(b, 60, -1);
	assert_int_equal(bfs_badset_next(b, 20), 61);
	assert_int_equal(bfs_badset_next(b, 10), 61);
	bfs_badset_destroy(b);
}

static void test_badset_next_wraps_and_says_when_all_others_are_bad(void **state)
{
	bfs_badset *b;

	assert_int_equal(bfs_badset_create(8, &b), 0);
	for (uint64_t i = 5; i < 8; i++)
		bfs_badset_mark_bad(b, i, -1);
	bfs_badset_mark_bad(b, 0, -1);
	assert_int_equal(bfs_badset_next(b, 4), 1);
	assert_int_equal(bfs_badset_next(b, 6), 1);
	for (uint64_t i = 1; i < 5; i++)
		bfs_badset_mark_bad(b, i, -1);
	/* every sample bad: each one's search comes back to itself */
	for (uint64_t i = 0; i < 8; i++)
		assert_int_equal(bfs_badset_next(b, i), i);
	bfs_badset_destroy(b);

	assert_int_equal(bfs_badset_create(1, &b), 0);
	assert_int_equal(bfs_badset_next(b, 0), 0);
	bfs_badset_destroy(b);
}

/* The model: a plain array of states. */
static uint64_t model_next(const unsigned char *st, uint64_t n, uint64_t i)
{
	for (uint64_t d = 1; d < n; d++)
		if (st[(i + d) % n] != BFS_SAMPLE_BAD)
			return (i + d) % n;
	return i;
}

static void test_badset_agrees_with_a_model_over_random_operations(void **state)
{
	enum { N = 3000, OPS = 200000 };
	unsigned char *st = calloc(N, 1);
	uint64_t bad = 0;
	unsigned seed = 12345;
	bfs_badset *b;

	assert_int_equal(bfs_badset_create(N, &b), 0);
	for (int k = 0; k < OPS; k++) {
		uint64_t i = (uint64_t)rand_r(&seed) % N;
		int op = rand_r(&seed) % 8;

		/* mostly runs: bad samples come in stretches of a shard */
		if (op < 3 && st[i] != BFS_SAMPLE_BAD) {
			for (uint64_t r = i; r < i + 20 && r < N; r++)
				if (st[r] != BFS_SAMPLE_BAD) {
					assert_int_equal(bfs_badset_mark_bad(b, r, -2), 1);
					st[r] = BFS_SAMPLE_BAD;
					bad++;
				}
		} else if (op == 3) {
			int rc = bfs_badset_claim(b, i);

			assert_int_equal(rc, st[i] == BFS_SAMPLE_UNKNOWN ? 0 : -EEXIST);
			if (!rc)
				st[i] = BFS_SAMPLE_PENDING;
		} else if (op == 4) {
			bfs_badset_unclaim(b, i);
			if (st[i] == BFS_SAMPLE_PENDING)
				st[i] = BFS_SAMPLE_UNKNOWN;
		} else {
			assert_int_equal(bfs_badset_next(b, i), model_next(st, N, i));
		}
		if (k % 997 == 0)
			for (uint64_t t = 0; t < N; t++)
				assert_int_equal(bfs_badset_state(b, t, NULL), st[t]);
	}
	assert_int_equal(bfs_badset_count(b), bad);
	bfs_badset_destroy(b);
	free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_badset_knows_nothing_at_first),
		cmocka_unit_test(test_badset_refuses_an_empty_source),
		cmocka_unit_test(test_badset_keeps_the_first_code_of_a_bad_sample),
		cmocka_unit_test(test_badset_claim_then_unclaim_or_mark),
		cmocka_unit_test(test_badset_next_passes_a_run_and_stops_at_pending),
		cmocka_unit_test(test_badset_next_wraps_and_says_when_all_others_are_bad),
		cmocka_unit_test(test_badset_agrees_with_a_model_over_random_operations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
