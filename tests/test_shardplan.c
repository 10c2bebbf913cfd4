/*
 * test_shardplan.c - the shard cache's plan (engine/storage/shardplan.h):
 * next use, Belady's eviction over the known order, which spans are kept
 * whole, what to fetch next; and whole epochs simulated through a small
 * cache, counting what is fetched.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/storage/shardplan.h"

static bfs_shardplan *plan_of(size_t n, uint64_t each)
{
	uint64_t *cost = malloc(n * sizeof(*cost));
	bfs_shardplan *p;

	for (size_t i = 0; i < n; i++)
		cost[i] = each;
	assert_int_equal(bfs_shardplan_create(n, cost, &p), 0);
	free(cost);
	return p;
}

static void test_shardplan_next_use_is_zero_inside_a_span_and_the_distance_before(void **state)
{
	bfs_shardplan *p = plan_of(3, 10);
	bfs_span s[] = {
		{ 0, 100, 199, 1000 },
		{ 0, 1000, 1099, 1000 }, /* the next epoch */
		{ 1, 200, 299, 1000 },
	};

	(void)state;
	assert_int_equal(bfs_shardplan_next(p, 0, 0), UINT64_MAX); /* no plan yet */
	assert_int_equal(bfs_shardplan_set(p, s, 3, 100, 1000), 0);
	assert_int_equal(bfs_shardplan_next(p, 0, 40), 60);
	assert_int_equal(bfs_shardplan_next(p, 0, 100), 0);
	assert_int_equal(bfs_shardplan_next(p, 0, 199), 0);
	assert_int_equal(bfs_shardplan_next(p, 0, 200), 800); /* its next span */
	assert_int_equal(bfs_shardplan_next(p, 0, 1100), UINT64_MAX);
	assert_int_equal(bfs_shardplan_next(p, 1, 250), 0);
	assert_int_equal(bfs_shardplan_next(p, 1, 300), UINT64_MAX);
	assert_int_equal(bfs_shardplan_next(p, 2, 0), UINT64_MAX); /* never named */
	/* what is left of a span's bytes */
	assert_int_equal(bfs_shardplan_bytes_ahead(p, 1, 0), 1000);
	assert_int_equal(bfs_shardplan_bytes_ahead(p, 1, 250), 500);
	assert_int_equal(bfs_shardplan_bytes_ahead(p, 1, 300), 0);
	bfs_shardplan_destroy(p);
}

static void test_shardplan_refuses_spans_it_cannot_place(void **state)
{
	bfs_shardplan *p = plan_of(2, 10);
	bfs_span bad_obj = { 2, 0, 1, 1 }, backwards = { 0, 5, 4, 1 }, good = { 1, 0, 9, 1 };

	(void)state;
	assert_int_equal(bfs_shardplan_set(p, &good, 1, 100, 100), 0);
	assert_int_equal(bfs_shardplan_set(p, &bad_obj, 1, 100, 100), -EINVAL);
	assert_int_equal(bfs_shardplan_set(p, &backwards, 1, 100, 100), -EINVAL);
	/* the plan before stands */
	assert_int_equal(bfs_shardplan_next(p, 1, 3), 0);
	bfs_shardplan_destroy(p);
}

static void test_shardplan_evicts_what_is_needed_furthest_and_never_what_is_needed_sooner(void **state)
{
	bfs_shardplan *p = plan_of(5, 10);
	bfs_span s[] = {
		{ 0, 0, 9, 1 }, { 1, 10, 19, 1 }, { 2, 20, 29, 1 }, { 3, 30, 39, 1 },
	};
	uint8_t ok[5] = { 1, 1, 1, 1, 1 };

	(void)state;
	assert_int_equal(bfs_shardplan_set(p, s, 4, 1000, 1000), 0);
	/* 4 is never needed: it goes first, then the furthest (3) */
	assert_int_equal(bfs_shardplan_victim(p, 5, ok, 0), 4);
	ok[4] = 0;
	assert_int_equal(bfs_shardplan_victim(p, 5, ok, 0), 3);
	/* fetching what is needed at 30 (distance 25) may not evict 1 or 2 */
	ok[3] = 0;
	assert_int_equal(bfs_shardplan_victim(p, 5, ok, 25), -1);
	/* object 0 is in use at 5: never a victim for what is needed now */
	memset(ok, 0, sizeof(ok));
	ok[0] = 1;
	assert_int_equal(bfs_shardplan_victim(p, 5, ok, 0), -1);
	/* spent spans are never needed again: ties go to the higher index */
	ok[0] = ok[1] = 1;
	assert_int_equal(bfs_shardplan_victim(p, 25, ok, 0), 1);
	bfs_shardplan_destroy(p);
}

static void test_shardplan_fetches_next_the_whole_object_needed_soonest(void **state)
{
	bfs_shardplan *p = plan_of(4, 10);
	bfs_span s[] = { { 0, 50, 59, 1 }, { 1, 10, 19, 1 }, { 2, 30, 39, 1 } };
	uint8_t want[4] = { 1, 1, 1, 1 };

	(void)state;
	assert_int_equal(bfs_shardplan_set(p, s, 3, 1000, 1000), 0);
	assert_int_equal(bfs_shardplan_next_fetch(p, 0, want), 1);
	want[1] = 0; /* local now */
	assert_int_equal(bfs_shardplan_next_fetch(p, 0, want), 2);
	want[2] = 0;
	assert_int_equal(bfs_shardplan_next_fetch(p, 0, want), 0);
	want[0] = 0;
	assert_int_equal(bfs_shardplan_next_fetch(p, 0, want), -1); /* 3: no span */
	bfs_shardplan_destroy(p);
}

static void test_shardplan_keeps_everything_whole_when_it_fits_the_limit(void **state)
{
	enum { N = 8 };
	bfs_shardplan *p = plan_of(N, 10);
	bfs_span s[N];

	(void)state;
	/* a global shuffle: every object needed over the whole epoch */
	for (int k = 0; k < N; k++)
		s[k] = (bfs_span){ (uint32_t)k, (uint64_t)k, 1000 - (uint64_t)k, 100 };
	assert_int_equal(bfs_shardplan_set(p, s, N, 40, 80), 0);
	for (int k = 0; k < N; k++)
		assert_true(bfs_shardplan_whole(p, (size_t)k, 0));
	bfs_shardplan_destroy(p);
}

static void test_shardplan_reads_by_range_what_a_long_span_cannot_keep_whole(void **state)
{
	enum { N = 8 };
	bfs_shardplan *p = plan_of(N, 10);
	bfs_span s[N];
	int whole = 0;

	(void)state;
	for (int k = 0; k < N; k++)
		s[k] = (bfs_span){ (uint32_t)k, (uint64_t)k, 1000 - (uint64_t)k, 100 };
	/* room for 3 objects of 10 bytes, the limit short of all 8 */
	assert_int_equal(bfs_shardplan_set(p, s, N, 30, 40), 0);
	for (int k = 0; k < N; k++)
		whole += bfs_shardplan_whole(p, (size_t)k, 500);
	assert_int_equal(whole, 3);
	/* the first ones needed are the ones kept */
	assert_true(bfs_shardplan_whole(p, 0, 0));
	assert_false(bfs_shardplan_whole(p, 7, 0));
	bfs_shardplan_destroy(p);
}

/*
 * A cache of `cap` objects (cost 1 each) over `epochs` passes of a plan,
 * the reader one position at a time: at each position, fetch ahead while
 * the plan says what and room can be made by Belady's rule, then check
 * that what the reader needs now is local.  Returns the fetches; *missed
 * counts positions whose object was not local.
 */
static unsigned simulate(bfs_shardplan *p, size_t n, uint64_t positions,
			 const size_t *obj_at, unsigned cap, unsigned *missed)
{
	uint8_t *local = calloc(n, 1), *want = malloc(n), *ok = malloc(n);
	unsigned used = 0, fetches = 0;

	*missed = 0;
	for (uint64_t pos = 0; pos < positions; pos++) {
		for (;;) {
			ssize_t k, v;

			for (size_t i = 0; i < n; i++) {
				want[i] = !local[i];
				ok[i] = local[i];
			}
			if ((k = bfs_shardplan_next_fetch(p, pos, want)) < 0)
				break;
			if (used == cap) {
				v = bfs_shardplan_victim(p, pos, ok,
							 bfs_shardplan_next(p, (size_t)k, pos));
				if (v < 0)
					break;
				local[v] = 0;
				used--;
			}
			local[k] = 1;
			used++;
			fetches++;
		}
		if (!local[obj_at[pos]])
			(*missed)++;
	}
	free(local);
	free(want);
	free(ok);
	return fetches;
}

static void test_shardplan_file_order_through_a_quarter_cache_fetches_each_object_once_an_epoch(void **state)
{
	enum { N = 40, R = 10, E = 3 };
	bfs_shardplan *p = plan_of(N, 1);
	bfs_span s[N * E];
	size_t obj_at[N * R * E];
	unsigned missed;

	(void)state;
	for (int e = 0; e < E; e++)
		for (int k = 0; k < N; k++) {
			uint64_t first = (uint64_t)(e * N + k) * R;

			s[e * N + k] = (bfs_span){ (uint32_t)k, first, first + R - 1, R };
			for (int r = 0; r < R; r++)
				obj_at[first + (uint64_t)r] = (size_t)k;
		}
	assert_int_equal(bfs_shardplan_set(p, s, N * E, N / 4 / 2, N / 4), 0);
	assert_int_equal(simulate(p, N, N * R * E, obj_at, N / 4, &missed), N * E);
	assert_int_equal(missed, 0);
	bfs_shardplan_destroy(p);
}

static void test_shardplan_block_order_through_two_blocks_of_cache_fetches_each_object_once(void **state)
{
	enum { N = 24, B = 3, R = 4 };
	bfs_shardplan *p = plan_of(N, 1);
	bfs_span s[N];
	size_t obj_at[N * R];
	unsigned missed;

	(void)state;
	/* blocks of B objects whose records interleave within the block */
	for (int b = 0; b < N / B; b++)
		for (int i = 0; i < B; i++) {
			int k = b * B + i;
			uint64_t base = (uint64_t)b * B * R;

			s[k] = (bfs_span){ (uint32_t)k, base + (uint64_t)i,
					   base + (uint64_t)(B * (R - 1) + i), R };
			for (int r = 0; r < R; r++)
				obj_at[base + (uint64_t)(r * B + i)] = (size_t)k;
		}
	assert_int_equal(bfs_shardplan_set(p, s, N, B, 2 * B), 0);
	assert_int_equal(simulate(p, N, N * R, obj_at, 2 * B, &missed), N);
	assert_int_equal(missed, 0);
	bfs_shardplan_destroy(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shardplan_next_use_is_zero_inside_a_span_and_the_distance_before),
		cmocka_unit_test(test_shardplan_refuses_spans_it_cannot_place),
		cmocka_unit_test(test_shardplan_evicts_what_is_needed_furthest_and_never_what_is_needed_sooner),
		cmocka_unit_test(test_shardplan_fetches_next_the_whole_object_needed_soonest),
		cmocka_unit_test(test_shardplan_keeps_everything_whole_when_it_fits_the_limit),
		cmocka_unit_test(test_shardplan_reads_by_range_what_a_long_span_cannot_keep_whole),
		cmocka_unit_test(test_shardplan_file_order_through_a_quarter_cache_fetches_each_object_once_an_epoch),
		cmocka_unit_test(test_shardplan_block_order_through_two_blocks_of_cache_fetches_each_object_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
