/*
 * test_permute.c - bfs_perm (bijection, inverse, determinism, spread) and
 * bfs_order (PyTorch DistributedSampler(drop_last=True) rank slices).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/permute.h"

/* Every position of [0, n) maps into [0, n), no sample twice, and
 * invert undoes apply. */
static void check_every_position(uint64_t n, uint64_t seed, uint64_t epoch)
{
	uint8_t *seen = calloc(n, 1);
	bfs_perm p;

	assert_non_null(seen);
	bfs_perm_init(&p, n, seed, epoch);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t s = bfs_perm_apply(&p, i);

		if (s >= n || seen[s])
			fail_msg("n=%llu: position %llu -> %llu (%s)", (unsigned long long)n,
			         (unsigned long long)i, (unsigned long long)s,
			         s >= n ? "out of range" : "seen twice");
		seen[s] = 1;
		if (bfs_perm_invert(&p, s) != i)
			fail_msg("n=%llu: invert(apply(%llu)) != itself", (unsigned long long)n,
			         (unsigned long long)i);
	}
	free(seen);
}

static void test_perm_is_a_bijection_at_every_position_of_small_n(void **state)
{
	static const uint64_t ns[] = { 1, 2, 3, 4, 7, 127, 128, 129, 255, 256, 257, 1000,
		                       1 << 16, (1 << 16) + 1, 1000003 };

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		check_every_position(ns[i], 0, 0);
		check_every_position(ns[i], 12345, 7);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_perm_is_a_bijection_on_a_sample_of_huge_n(void **state)
{
	static const uint64_t ns[] = { (1ULL << 40), (1ULL << 40) + 12345, (1ULL << 63) + 5,
		                       UINT64_MAX };
	enum { K = 100000 };
	uint64_t *out = malloc(K * sizeof(*out));

	assert_non_null(out);
	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
		uint64_t n = ns[t], pos = 0x1234567;
		bfs_perm p;

		bfs_perm_init(&p, n, 99, 3);
		for (int i = 0; i < K; i++) {
			pos = (pos * 6364136223846793005ULL + 1442695040888963407ULL) % n;
			/* distinct positions: a run of consecutive ones and spread ones */
			uint64_t x = i < K / 2 ? (uint64_t)i : pos;

			out[i] = bfs_perm_apply(&p, x);
			assert_true(out[i] < n);
			assert_true(bfs_perm_invert(&p, out[i]) == x);
		}
		/* the two halves are disjoint position sets unless pos hit [0, K/2),
		 * which at these n has probability ~1e-7; check images distinct */
		qsort(out, K, sizeof(*out), cmp_u64);
		for (int i = 1; i < K; i++)
			assert_true(out[i] != out[i - 1]);
	}
	free(out);
}

static void test_perm_leaves_positions_outside_the_domain_alone(void **state)
{
	bfs_perm p;

	bfs_perm_init(&p, 10, 1, 1);
	assert_true(bfs_perm_apply(&p, 10) == 10);
	assert_true(bfs_perm_invert(&p, 1000) == 1000);
	bfs_perm_init(&p, 0, 1, 1); /* treated as n = 1 */
	assert_true(bfs_perm_apply(&p, 0) == 0);
}

static void test_perm_same_seed_and_epoch_give_the_same_order(void **state)
{
	bfs_perm a, b;

	bfs_perm_init(&a, 100003, 42, 5);
	bfs_perm_init(&b, 100003, 42, 5);
	assert_memory_equal(&a, &b, sizeof(a));
	for (uint64_t i = 0; i < 100003; i += 7)
		assert_true(bfs_perm_apply(&a, i) == bfs_perm_apply(&b, i));
}

/* Positions where two orders of [0, n) agree; about 1 for unrelated ones. */
static int agreements(uint64_t n, uint64_t s1, uint64_t e1, uint64_t s2, uint64_t e2)
{
	bfs_perm a, b;
	int same = 0;

	bfs_perm_init(&a, n, s1, e1);
	bfs_perm_init(&b, n, s2, e2);
	for (uint64_t i = 0; i < n; i++)
		same += bfs_perm_apply(&a, i) == bfs_perm_apply(&b, i);
	return same;
}

static void test_perm_different_epochs_and_seeds_give_different_orders(void **state)
{
	for (uint64_t e = 0; e < 20; e++) {
		assert_true(agreements(1000, 42, e, 42, e + 1) < 12);
		assert_true(agreements(1000, e, 0, e + 1, 0) < 12);
		/* seed + epoch is not the key (PyTorch seeds randperm that way) */
		assert_true(agreements(1000, 42 + e + 1, 0, 42, e + 1) < 12);
	}
	assert_int_equal(agreements(1000, 42, 3, 42, 3), 1000);
}

static void test_perm_spreads_sample_zero_uniformly_across_epochs(void **state)
{
	/* 2000 epochs of n = 1000: the position of sample 0, in 10 bins of
	 * expected 200 each; chi-square with 9 df, p = 0.001 at 27.88. */
	enum { EPOCHS = 2000, BINS = 10 };
	int bin[BINS] = { 0 };
	double chi = 0;

	for (uint64_t e = 0; e < EPOCHS; e++) {
		bfs_perm p;

		bfs_perm_init(&p, 1000, 2024, e);
		bin[bfs_perm_invert(&p, 0) / 100]++;
	}
	for (int i = 0; i < BINS; i++)
		chi += (bin[i] - 200.0) * (bin[i] - 200.0) / 200.0;
	if (chi > 27.88)
		fail_msg("chi-square %.2f over 10 bins", chi);
}

static void test_perm_gives_tiny_n_every_order_about_equally_often(void **state)
{
	/* n = 4 has 24 orders; 24000 epochs, chi-square with 23 df, p = 0.001
	 * at 49.73.  Small Feistel halves fail this; see permute.h. */
	enum { EPOCHS = 24000 };
	int count[24] = { 0 };
	double chi = 0;

	for (uint64_t e = 0; e < EPOCHS; e++) {
		bfs_perm p;
		int used[4] = { 0 }, code = 0;

		bfs_perm_init(&p, 4, 77, e);
		for (int i = 0; i < 4; i++) {
			int v = (int)bfs_perm_apply(&p, (uint64_t)i), r = 0;

			for (int j = 0; j < v; j++)
				r += !used[j];
			used[v] = 1;
			code = code * (4 - i) + r; /* Lehmer code, 0..23 */
		}
		count[code]++;
	}
	for (int i = 0; i < 24; i++)
		chi += (count[i] - 1000.0) * (count[i] - 1000.0) / 1000.0;
	if (chi > 49.73)
		fail_msg("chi-square %.2f over the 24 orders of 4", chi);
}

static void test_order_per_rank_follows_the_pytorch_drop_last_formula(void **state)
{
	for (uint64_t n = 1; n < 60; n++) {
		for (unsigned w = 1; w <= n && w < 9; w++) {
			/* math.ceil((n - w) / w) if n % w else n / w */
			uint64_t want = n % w ? (n - w + w - 1) / w : n / w;
			bfs_order o;

			assert_int_equal(bfs_order_init(&o, n, 1, 5, 0, w - 1, w), 0);
			assert_true(o.per_rank == want);
			assert_true(o.per_rank == n / w);
		}
	}
}

static void test_order_ranks_are_disjoint_equal_and_cover_world_times_per_rank(void **state)
{
	static const struct { uint64_t n; unsigned world; } cases[] = {
		{ 1000, 3 }, { 1000, 8 }, { 1000003, 7 }, { 10, 10 }, { 11, 10 }, { 257, 1 },
	};

	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
		uint64_t n = cases[t].n, total = 0;
		unsigned w = cases[t].world;
		uint8_t *seen = calloc(n, 1);

		assert_non_null(seen);
		for (unsigned r = 0; r < w; r++) {
			bfs_order o;

			assert_int_equal(bfs_order_init(&o, n, 1, 31337, 2, r, w), 0);
			assert_true(o.per_rank == n / w);
			for (uint64_t k = 0; k < o.per_rank; k++) {
				uint64_t s = bfs_order_sample(&o, k);

				assert_true(s < n);
				assert_int_equal(seen[s], 0);
				seen[s] = 1;
				total++;
			}
			assert_true(bfs_order_sample(&o, o.per_rank) == BFS_ORDER_NONE);
		}
		assert_true(total == w * (n / w));
		free(seen);
	}
}

static void test_order_strides_the_epoch_order_across_ranks(void **state)
{
	bfs_order o;
	bfs_perm p;

	bfs_perm_init(&p, 103, 9, 4);
	for (unsigned r = 0; r < 4; r++) {
		assert_int_equal(bfs_order_init(&o, 103, 1, 9, 4, r, 4), 0);
		for (uint64_t k = 0; k < o.per_rank; k++)
			assert_true(bfs_order_sample(&o, k) == bfs_perm_apply(&p, r + k * 4));
	}
}

/* One epoch's order answers for every rank: bfs_order_sample_rank is what
 * the order made for that rank gives, shuffled or not. */
static void test_order_of_one_rank_answers_for_every_rank(void **state)
{
	bfs_order base, own;

	for (int sh = 0; sh < 2; sh++) {
		assert_int_equal(bfs_order_init(&base, 103, sh, 9, 4, 1, 4), 0);
		for (unsigned r = 0; r < 4; r++) {
			assert_int_equal(bfs_order_init(&own, 103, sh, 9, 4, r, 4), 0);
			for (uint64_t k = 0; k <= own.per_rank; k++)
				assert_true(bfs_order_sample_rank(&base, r, k) ==
					    bfs_order_sample(&own, k));
		}
		assert_true(bfs_order_sample_rank(&base, 4, 0) == BFS_ORDER_NONE);
	}
}

static void test_order_without_shuffle_is_file_order(void **state)
{
	bfs_order o;

	assert_int_equal(bfs_order_init(&o, 10, 0, 1, 1, 0, 1), 0);
	for (uint64_t k = 0; k < 10; k++)
		assert_true(bfs_order_sample(&o, k) == k);
	/* rank 2 of 3 over 11: positions 2, 5, 8 (9 and 10 dropped) */
	assert_int_equal(bfs_order_init(&o, 11, 0, 1, 1, 2, 3), 0);
	assert_true(o.per_rank == 3);
	assert_true(bfs_order_sample(&o, 0) == 2);
	assert_true(bfs_order_sample(&o, 1) == 5);
	assert_true(bfs_order_sample(&o, 2) == 8);
	assert_true(bfs_order_sample(&o, 3) == BFS_ORDER_NONE);
	/* and the same for every epoch */
	assert_int_equal(bfs_order_init(&o, 11, 0, 1, 9, 2, 3), 0);
	assert_true(bfs_order_sample(&o, 1) == 5);
}

static void test_order_rejects_empty_worlds_bad_ranks_and_too_few_samples(void **state)
{
	bfs_order o;

	assert_int_equal(bfs_order_init(&o, 10, 1, 0, 0, 0, 0), -EINVAL);
	assert_int_equal(bfs_order_init(&o, 10, 1, 0, 0, 3, 3), -EINVAL);
	assert_int_equal(bfs_order_init(&o, 2, 1, 0, 0, 0, 3), -EINVAL);
	assert_true(o.per_rank == 0);
	assert_true(bfs_order_sample(&o, 0) == BFS_ORDER_NONE);
	assert_int_equal(bfs_order_init(&o, 3, 1, 0, 0, 2, 3), 0);
	assert_true(o.per_rank == 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_perm_is_a_bijection_at_every_position_of_small_n),
		cmocka_unit_test(test_perm_is_a_bijection_on_a_sample_of_huge_n),
		cmocka_unit_test(test_perm_leaves_positions_outside_the_domain_alone),
		cmocka_unit_test(test_perm_same_seed_and_epoch_give_the_same_order),
		cmocka_unit_test(test_perm_different_epochs_and_seeds_give_different_orders),
		cmocka_unit_test(test_perm_spreads_sample_zero_uniformly_across_epochs),
		cmocka_unit_test(test_perm_gives_tiny_n_every_order_about_equally_often),
		cmocka_unit_test(test_order_per_rank_follows_the_pytorch_drop_last_formula),
		cmocka_unit_test(test_order_ranks_are_disjoint_equal_and_cover_world_times_per_rank),
		cmocka_unit_test(test_order_strides_the_epoch_order_across_ranks),
		cmocka_unit_test(test_order_of_one_rank_answers_for_every_rank),
		cmocka_unit_test(test_order_without_shuffle_is_file_order),
		cmocka_unit_test(test_order_rejects_empty_worlds_bad_ranks_and_too_few_samples),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
