/*
 * test_layout.c - epoch layouts (engine/layout.h): the global shuffle
 * unchanged, block orders, the samples and shards splits, and resumed
 * epochs, as properties checked over many (world, ranks per node, shards
 * of uneven sizes, block, seed, epoch) combinations.
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
#include "engine/layout.h"

/* ---- helpers ---------------------------------------------------------- */

/* A shard table of `shards` shards with 0..max samples each (an empty
 * one now and then, as a shard with nothing readable), drawn from seed;
 * *n gets the total.  The caller frees it. */
static uint64_t *shard_table(size_t shards, unsigned max, uint64_t seed, uint64_t *n)
{
	uint64_t *first = malloc((shards + 1) * sizeof(*first)), x = seed * 2654435761u + 1;

	assert_non_null(first);
	first[0] = 0;
	for (size_t k = 0; k < shards; k++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		first[k + 1] = first[k] + (x >> 33) % (max + 1);
	}
	if (first[shards] == 0) /* never an empty source */
		for (size_t k = 1; k <= shards; k++)
			first[k] += k;
	*n = first[shards];
	return first;
}

static bfs_layout *make(const bfs_layout_opts *o)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_layout *l = NULL;
	int err = bfs_layout_create(o, &l, msg);

	if (err)
		fail_msg("bfs_layout_create: %d %s", err, msg);
	return l;
}

/* Epoch `epoch` of l with a table of its own; free with drop(). */
static bfs_layout_epoch *epoch_of(const bfs_layout *l, uint64_t epoch)
{
	size_t tl = bfs_layout_table_len(l);
	bfs_layout_epoch *ep = malloc(sizeof(*ep) + (tl ? tl : 1) * sizeof(uint64_t));

	assert_non_null(ep);
	bfs_layout_epoch_init(ep, l, epoch, tl ? (uint64_t *)(ep + 1) : NULL);
	return ep;
}

static void drop(bfs_layout_epoch *ep) { free(ep); }

/* Count into seen[] (n entries) every sample each rank of l serves in
 * epoch `epoch`, its first `upto` samples (all when upto exceeds them);
 * fail on a sample out of range.  Returns how many were counted. */
static uint64_t serve(const bfs_layout *l, uint64_t epoch, uint64_t upto, uint8_t *seen)
{
	const bfs_layout_opts *o = bfs_layout_options(l);
	bfs_layout_epoch *ep = epoch_of(l, epoch);
	uint64_t counted = 0;

	for (unsigned r = 0; r < o->world; r++)
		for (uint64_t k = 0; k < ep->per_rank && k < upto; k++) {
			uint64_t s = bfs_layout_sample(ep, r, k);

			if (s >= o->n)
				fail_msg("rank %u sample %llu: %llu out of [0, %llu)", r,
					 (unsigned long long)k, (unsigned long long)s,
					 (unsigned long long)o->n);
			seen[s]++;
			counted++;
		}
	drop(ep);
	return counted;
}

static unsigned most(const uint8_t *seen, uint64_t n)
{
	unsigned m = 0;

	for (uint64_t i = 0; i < n; i++)
		if (seen[i] > m)
			m = seen[i];
	return m;
}

/* The shard that holds sample s. */
static size_t shard_of(const uint64_t *first, size_t shards, uint64_t s)
{
	size_t lo = 0, hi = shards;

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (first[mid] <= s)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* ---- the global shuffle, file order ----------------------------------- */

static void test_layout_global_shuffle_split_by_samples_is_bfs_order_bit_for_bit(void **state)
{
	static const uint64_t ns[] = { 1, 7, 100, 1000, 12345 };

	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++)
		for (unsigned world = 1; world <= 5; world++) {
			if (ns[t] < world)
				continue;
			for (int shuffle = 0; shuffle <= 1; shuffle++)
				for (uint64_t epoch = 0; epoch < 3; epoch++) {
					bfs_layout_opts o = { .n = ns[t], .shuffle = shuffle,
							      .seed = 77 + t, .world = world };
					bfs_layout *l = make(&o);
					bfs_layout_epoch *ep = epoch_of(l, epoch);
					bfs_order ord;

					assert_int_equal(bfs_layout_table_len(l), 0);
					assert_int_equal(bfs_order_init(&ord, ns[t], shuffle, 77 + t,
									epoch, 0, world), 0);
					assert_true(ep->per_rank == ord.per_rank);
					for (unsigned r = 0; r < world; r++)
						for (uint64_t k = 0; k <= ord.per_rank; k++)
							assert_true(bfs_layout_sample(ep, r, k) ==
								    bfs_order_sample_rank(&ord, r, k));
					drop(ep);
					bfs_layout_destroy(l);
				}
		}
}

/* ---- block orders ----------------------------------------------------- */

/* The block order as layout.h defines it, built whole: the shards in
 * their permutation's order, N at a time, each block's samples
 * permuted by (seed, epoch, block). */
static void block_reference(const uint64_t *first, size_t shards, uint64_t block,
			    uint64_t seed, uint64_t epoch, uint64_t *out)
{
	bfs_perm sp, bp;
	uint64_t n = first[shards], *cat = malloc((n ? n : 1) * sizeof(*cat)), c = 0;

	assert_non_null(cat);
	bfs_perm_init_part(&sp, shards, seed, epoch, 1, 0);
	for (size_t j0 = 0, b = 0; j0 < shards; j0 += block, b++) {
		uint64_t start = c;

		for (size_t j = j0; j < j0 + block && j < shards; j++) {
			uint64_t s = bfs_perm_apply(&sp, j);

			for (uint64_t i = first[s]; i < first[s + 1]; i++)
				cat[c++] = i;
		}
		bfs_perm_init_part(&bp, c - start, seed, epoch, 2, b);
		for (uint64_t q = start; q < c; q++)
			out[q] = cat[start + bfs_perm_apply(&bp, q - start)];
	}
	free(cat);
}

static void test_layout_block_order_is_its_documented_definition(void **state)
{
	static const uint64_t blocks[] = { 1, 2, 3, 7, 64 };

	for (uint64_t seed = 1; seed <= 3; seed++)
		for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
			uint64_t n, *first = shard_table(40, 9, seed, &n);
			uint64_t *ref = malloc(n * sizeof(*ref));
			bfs_layout_opts o = { .n = n, .first = first, .nshards = 40, .shuffle = 1,
					      .seed = seed, .block = blocks[b] };
			bfs_layout *l = make(&o);

			assert_non_null(ref);
			assert_int_equal(bfs_layout_table_len(l), 41);
			for (uint64_t epoch = 0; epoch < 4; epoch++) {
				bfs_layout_epoch *ep = epoch_of(l, epoch);

				block_reference(first, 40, blocks[b], seed, epoch, ref);
				for (uint64_t p = 0; p < n; p++)
					if (bfs_layout_seq(ep, p) != ref[p])
						fail_msg("seed %llu block %llu epoch %llu place %llu",
							 (unsigned long long)seed,
							 (unsigned long long)blocks[b],
							 (unsigned long long)epoch, (unsigned long long)p);
				drop(ep);
			}
			bfs_layout_destroy(l);
			free(ref);
			free(first);
		}
}

static void test_layout_shards_of_one_size_need_no_table_and_give_the_same_order(void **state)
{
	/* 30 shards of 5: the arithmetic path against the definition */
	uint64_t first[31], ref[150];
	bfs_layout_opts o = { .n = 150, .first = first, .nshards = 30, .shuffle = 1,
			      .seed = 4, .block = 4 };
	bfs_layout *l;

	for (int k = 0; k <= 30; k++)
		first[k] = (uint64_t)k * 5;
	l = make(&o);
	assert_int_equal(bfs_layout_table_len(l), 0);
	for (uint64_t epoch = 0; epoch < 3; epoch++) {
		bfs_layout_epoch ep;

		bfs_layout_epoch_init(&ep, l, epoch, NULL);
		block_reference(first, 30, 4, 4, epoch, ref);
		for (uint64_t p = 0; p < 150; p++)
			assert_true(bfs_layout_seq(&ep, p) == ref[p]);
	}
	bfs_layout_destroy(l);
}

static void test_layout_block_keeps_its_shards_samples_together(void **state)
{
	uint64_t n, *first = shard_table(50, 12, 9, &n);
	bfs_layout_opts o = { .n = n, .first = first, .nshards = 50, .shuffle = 1,
			      .seed = 5, .block = 6 };
	bfs_layout *l = make(&o);
	bfs_layout_epoch *ep = epoch_of(l, 3);
	bfs_perm sp;
	uint64_t p = 0;

	bfs_perm_init_part(&sp, 50, 5, 3, 1, 0);
	for (size_t j0 = 0; j0 < 50; j0 += 6) {
		uint64_t size = 0;

		for (size_t j = j0; j < j0 + 6 && j < 50; j++) {
			uint64_t s = bfs_perm_apply(&sp, j);

			size += first[s + 1] - first[s];
		}
		/* the block's places hold its shards' samples and no other */
		for (uint64_t q = p; q < p + size; q++) {
			size_t sh = shard_of(first, 50, bfs_layout_seq(ep, q)), j;

			for (j = j0; j < j0 + 6 && j < 50; j++)
				if (bfs_perm_apply(&sp, j) == sh)
					break;
			assert_true(j < j0 + 6 && j < 50);
		}
		p += size;
	}
	assert_true(p == n);
	drop(ep);
	bfs_layout_destroy(l);
	free(first);
}

static void test_layout_block_order_depends_on_seed_and_epoch_only(void **state)
{
	uint64_t n, *first = shard_table(64, 10, 2, &n);
	bfs_layout_opts o = { .n = n, .first = first, .nshards = 64, .shuffle = 1,
			      .seed = 11, .block = 8 };
	bfs_layout *a = make(&o), *b;
	bfs_layout_epoch *e1, *e2, *e3;
	uint64_t same_epoch = 0, other_epoch = 0, other_seed = 0;

	o.seed = 12;
	b = make(&o);
	e1 = epoch_of(a, 2);
	e2 = epoch_of(a, 3);
	e3 = epoch_of(b, 2);
	for (uint64_t p = 0; p < n; p++) {
		bfs_layout_epoch *again = NULL;

		if (p % 97 == 0) { /* a fresh epoch of the same layout agrees */
			again = epoch_of(a, 2);
			same_epoch += bfs_layout_seq(again, p) == bfs_layout_seq(e1, p);
			drop(again);
		}
		other_epoch += bfs_layout_seq(e1, p) == bfs_layout_seq(e2, p);
		other_seed += bfs_layout_seq(e1, p) == bfs_layout_seq(e3, p);
	}
	assert_true(same_epoch == (n + 96) / 97);
	assert_true(other_epoch < n / 20 && other_seed < n / 20);
	drop(e1);
	drop(e2);
	drop(e3);
	bfs_layout_destroy(a);
	bfs_layout_destroy(b);
	free(first);
}

/* ---- splits ----------------------------------------------------------- */

/* Every sample once at most, world * per_rank of them, per_rank =
 * floor(n / world) for each rank; and the same with a layout made anew
 * (determinism). */
static void check_epoch(const bfs_layout_opts *o, uint64_t epoch)
{
	bfs_layout *l = make(o), *again = make(o);
	uint8_t *seen = calloc(o->n, 1);
	bfs_layout_epoch *ep = epoch_of(l, epoch), *ep2 = epoch_of(again, epoch);
	unsigned world = o->world ? o->world : 1;

	assert_non_null(seen);
	assert_true(ep->per_rank == o->n / world);
	assert_true(serve(l, epoch, UINT64_MAX, seen) == (uint64_t)world * (o->n / world));
	if (most(seen, o->n) > 1)
		fail_msg("a sample served twice: n %llu world %u K %u block %llu split %d epoch %llu",
			 (unsigned long long)o->n, world, o->node_ranks,
			 (unsigned long long)o->block, (int)o->split, (unsigned long long)epoch);
	for (unsigned r = 0; r < world; r++)
		for (uint64_t k = 0; k < ep->per_rank; k += 3)
			assert_true(bfs_layout_sample(ep, r, k) == bfs_layout_sample(ep2, r, k));
	assert_true(bfs_layout_sample(ep, 0, ep->per_rank) == BFS_ORDER_NONE);
	assert_true(bfs_layout_sample(ep, world, 0) == BFS_ORDER_NONE);
	free(seen);
	drop(ep);
	drop(ep2);
	bfs_layout_destroy(l);
	bfs_layout_destroy(again);
}

static void test_layout_every_sample_once_equal_shares_over_many_combinations(void **state)
{
	static const uint64_t blocks[] = { 0, 1, 2, 5, 1000 };

	for (uint64_t seed = 0; seed < 3; seed++) {
		uint64_t n, *first = shard_table(23 + 7 * seed, 11, seed + 20, &n);
		size_t shards = 23 + 7 * seed;

		for (unsigned world = 1; world <= 8; world++)
			for (unsigned k = 1; k <= world; k++) {
				if (world % k)
					continue;
				for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++)
					for (int split = 0; split <= 1; split++)
						for (int shuffle = 0; shuffle <= 1; shuffle++) {
							bfs_layout_opts o = {
								.n = n, .first = first, .nshards = shards,
								.shuffle = shuffle, .seed = seed,
								.block = shuffle ? blocks[b] : 0,
								.split = split ? BFS_SPLIT_SHARDS
									       : BFS_SPLIT_SAMPLES,
								.world = world, .node_ranks = split ? k : 1 };

							if (split && shuffle && !o.block)
								continue; /* refused: below */
							if (!split && k > 1)
								continue;
							for (uint64_t e = 0; e < 3; e++)
								check_epoch(&o, e);
						}
			}
		free(first);
	}
}

/* The shards node `node` reads in epoch `epoch`: marks in touched[]. */
static void node_shards(const bfs_layout *l, const uint64_t *first, size_t shards,
			uint64_t epoch, unsigned node, uint8_t *touched)
{
	const bfs_layout_opts *o = bfs_layout_options(l);
	bfs_layout_epoch *ep = epoch_of(l, epoch);

	for (unsigned r = node * o->node_ranks; r < (node + 1) * o->node_ranks; r++) {
		assert_int_equal(bfs_layout_node_of(l, r), node);
		for (uint64_t k = 0; k < ep->per_rank; k++)
			touched[shard_of(first, shards, bfs_layout_sample(ep, r, k))] = 1;
	}
	drop(ep);
}

static void test_layout_shards_split_gives_each_node_about_its_share_of_the_shards(void **state)
{
	uint64_t n, first[121];

	first[0] = 0; /* 8 to 12 samples a shard */
	for (int k = 0; k < 120; k++)
		first[k + 1] = first[k] + 8 + (uint64_t)(k * 7) % 5;
	n = first[120];

	for (unsigned nodes = 1; nodes <= 4; nodes++)
		for (uint64_t block = 1; block <= 8; block *= 2) {
			bfs_layout_opts o = { .n = n, .first = first, .nshards = 120, .shuffle = 1,
					      .seed = 3, .block = block, .split = BFS_SPLIT_SHARDS,
					      .world = 2 * nodes, .node_ranks = 2 };
			bfs_layout *l = make(&o);

			assert_int_equal(bfs_layout_nodes(l), nodes);
			for (uint64_t e = 0; e < 3; e++)
				for (unsigned i = 0; i < nodes; i++) {
					uint8_t touched[120] = { 0 };
					unsigned t = 0;

					node_shards(l, first, 120, e, i, touched);
					for (int s = 0; s < 120; s++)
						t += touched[s];
					/* its span's blocks, and the two it shares
					 * at the span's ends */
					if (t > 120 / nodes + 2 * block + 2)
						fail_msg("%u nodes, block %llu: node %u reads %u of 120 shards",
							 nodes, (unsigned long long)block, i, t);
				}
			bfs_layout_destroy(l);
		}
}

static void test_layout_shards_split_turns_so_every_node_sees_every_shard(void **state)
{
	uint64_t n, *first = shard_table(48, 10, 8, &n);

	for (int shuffle = 0; shuffle <= 1; shuffle++) {
		bfs_layout_opts o = { .n = n, .first = first, .nshards = 48, .shuffle = shuffle,
				      .seed = 6, .block = shuffle ? 4 : 0,
				      .split = BFS_SPLIT_SHARDS, .world = 6, .node_ranks = 2 };
		bfs_layout *l = make(&o);
		/* file order: the spans turn, one node further each epoch, so
		 * 3 epochs cover everything served; shuffled, the deal is
		 * redrawn each epoch (a node misses a shard 40 times in a row
		 * with odds (2/3)^40) */
		uint64_t epochs = shuffle ? 40 : 3, served = 6 * (n / 6);

		for (unsigned i = 0; i < 3; i++) {
			uint8_t touched[48] = { 0 }, first_epoch[48] = { 0 };
			size_t t = 0;

			for (uint64_t e = 0; e < epochs; e++)
				node_shards(l, first, 48, e, i, touched);
			node_shards(l, first, 48, 0, i, first_epoch);
			for (int s = 0; s < 48; s++)
				if (first[s + 1] > first[s] && (shuffle || first[s] < served))
					t += !touched[s];
			assert_true(t == 0);
			/* and one epoch alone is not all of them */
			t = 0;
			for (int s = 0; s < 48; s++)
				t += first_epoch[s];
			assert_true(t < 48);
		}
		bfs_layout_destroy(l);
	}
	free(first);
}

/* ---- resume ----------------------------------------------------------- */

/*
 * A job of world w0 (node ranks k0, split s0) ran `chain` (earlier runs
 * of epoch e, may be empty) and consumed c samples a rank; a job of world
 * w1 resumes.  Over the runs and the resumed one every sample is served
 * once, but the last (left mod w1) of what was left.
 */
static void check_resume(uint64_t n, const uint64_t *first, size_t shards, uint64_t block,
			 const bfs_layout_resume *chain, unsigned w0, unsigned k0, int s0,
			 uint64_t c, unsigned w1, unsigned k1, int s1, uint64_t e)
{
	bfs_layout_opts o = { .n = n, .first = first, .nshards = shards, .shuffle = 1,
			      .seed = 42, .block = block };
	uint8_t *seen = calloc(n, 1);
	bfs_layout *before, *after;
	uint64_t served, left;

	assert_non_null(seen);
	o.world = w0;
	o.node_ranks = k0;
	o.split = s0;
	if (chain)
		o.resume = *chain;
	before = make(&o);
	/* what the earlier runs consumed: the chain of each prefix */
	served = 0;
	for (unsigned i = 0; chain && i < chain->nruns; i++) {
		bfs_layout_opts p = o;
		bfs_layout *run;

		p.world = chain->runs[i].world;
		p.node_ranks = chain->runs[i].node_ranks ? chain->runs[i].node_ranks : 1;
		p.split = chain->runs[i].node_ranks ? BFS_SPLIT_SHARDS : BFS_SPLIT_SAMPLES;
		p.resume.nruns = i;
		p.resume.on = i > 0;
		run = make(&p);
		served += serve(run, e, chain->runs[i].consumed / chain->runs[i].world, seen);
		bfs_layout_destroy(run);
	}
	served += serve(before, e, c, seen);
	bfs_layout_destroy(before);
	/* the resumed job */
	o.world = w1;
	o.node_ranks = k1;
	o.split = s1;
	if (!chain) {
		o.resume.on = 1;
		o.resume.epoch = (unsigned)e;
		o.resume.nruns = 0;
	}
	o.resume.runs[o.resume.nruns++] = (bfs_layout_run){
		(uint64_t)w0 * c, w0, s0 == BFS_SPLIT_SHARDS ? k0 : 0 };
	if (n - served < w1) { /* fewer left than ranks: refused */
		char msg[BFS_ERRMSG_MAX];

		assert_int_equal(bfs_layout_create(&o, &after, msg), -EINVAL);
		assert_non_null(strstr(msg, "fewer than the"));
		free(seen);
		return;
	}
	after = make(&o);
	left = bfs_layout_resumed_left(after);
	assert_true(left == n - served);
	assert_true(bfs_layout_resumed_before(after) == served);
	served += serve(after, e, UINT64_MAX, seen);
	if (most(seen, n) > 1 || served != n - left % w1)
		fail_msg("n %llu block %llu: %u/%u/%d consumed %llu a rank, then %u/%u/%d: "
			 "%llu served (%s), %llu left",
			 (unsigned long long)n, (unsigned long long)block, w0, k0, s0,
			 (unsigned long long)c, w1, k1, s1, (unsigned long long)served,
			 most(seen, n) > 1 ? "a sample twice" : "some skipped",
			 (unsigned long long)left);
	/* the epochs after it are whole again */
	assert_true(bfs_layout_per_rank(after, e + 1) == n / w1);
	bfs_layout_destroy(after);
	free(seen);
}

static void test_layout_resume_from_every_world_to_every_other_serves_the_epoch_once(void **state)
{
	uint64_t n, *first = shard_table(37, 13, 77, &n);

	for (unsigned w0 = 1; w0 <= 8; w0++)
		for (unsigned w1 = 1; w1 <= 8; w1++)
			for (int s0 = 0; s0 <= 1; s0++)
				for (int s1 = 0; s1 <= 1; s1++) {
					/* two ranks a node where the world has them */
					unsigned k0 = s0 && w0 % 2 == 0 ? 2 : 1;
					unsigned k1 = s1 && w1 % 2 == 0 ? 2 : 1;
					uint64_t per = n / w0;
					const uint64_t at[] = { 0, 1, per / 3, per / 2 + 1, per - 1, per };

					for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
						check_resume(n, first, 37, 3, NULL, w0, k0, s0,
							     at[i], w1, k1, s1, 2);
				}
	free(first);
}

static void test_layout_resume_holds_for_file_order_and_other_blocks(void **state)
{
	uint64_t n, *first = shard_table(19, 30, 5, &n);
	uint64_t blocks[] = { 1, 4, 100 };

	for (size_t b = 0; b < 3; b++)
		for (unsigned w0 = 2; w0 <= 6; w0 += 2)
			check_resume(n, first, 19, blocks[b], NULL, w0, 2, BFS_SPLIT_SHARDS,
				     n / w0 / 2, 3, 1, BFS_SPLIT_SHARDS, 0);
	free(first);
}

static void test_layout_resume_chains_a_resumed_run_killed_again(void **state)
{
	uint64_t n, *first = shard_table(41, 17, 3, &n);

	/* world 8 (shards, 2 a node) -> 6 (samples) -> 4 (shards, 2) -> 3 */
	for (uint64_t c1 = 1; c1 < n / 8; c1 += 7) {
		bfs_layout_resume chain = { .on = 1, .epoch = 1, .nruns = 1,
					    .runs = { { 8 * c1, 8, 2 } } };
		uint64_t left = n - 8 * c1;

		check_resume(n, first, 41, 2, &chain, 6, 1, BFS_SPLIT_SAMPLES,
			     left / 6 / 2, 4, 2, BFS_SPLIT_SHARDS, 1);
		chain.runs[1] = (bfs_layout_run){ 6 * (left / 6 / 2), 6, 0 };
		chain.nruns = 2;
		left -= 6 * (left / 6 / 2);
		check_resume(n, first, 41, 2, &chain, 4, 2, BFS_SPLIT_SHARDS,
			     left / 4 / 3, 3, 1, BFS_SPLIT_SAMPLES, 1);
	}
	free(first);
}

static void test_layout_resume_on_the_same_world_serves_what_would_have_come_next(void **state)
{
	uint64_t n, *first = shard_table(30, 15, 12, &n);

	for (int split = 0; split <= 1; split++) {
		bfs_layout_opts o = { .n = n, .first = first, .nshards = 30, .shuffle = 1,
				      .seed = 8, .block = 3, .split = split, .world = 4,
				      .node_ranks = split ? 2 : 1 };
		bfs_layout *whole = make(&o), *rest;
		bfs_layout_epoch *a, *b;
		uint64_t c = n / 4 / 3;

		o.resume = (bfs_layout_resume){ .on = 1, .epoch = 5, .nruns = 1,
						.runs = { { 4 * c, 4, split ? 2 : 0 } } };
		rest = make(&o);
		a = epoch_of(whole, 5);
		b = epoch_of(rest, 5);
		assert_true(b->per_rank == a->per_rank - c);
		for (unsigned r = 0; r < 4; r++)
			for (uint64_t k = 0; k < b->per_rank; k++)
				assert_true(bfs_layout_sample(b, r, k) ==
					    bfs_layout_sample(a, r, c + k));
		drop(a);
		drop(b);
		/* other epochs are untouched */
		a = epoch_of(whole, 4);
		b = epoch_of(rest, 4);
		for (unsigned r = 0; r < 4; r++)
			for (uint64_t k = 0; k < a->per_rank; k++)
				assert_true(bfs_layout_sample(b, r, k) == bfs_layout_sample(a, r, k));
		drop(a);
		drop(b);
		bfs_layout_destroy(whole);
		bfs_layout_destroy(rest);
	}
	free(first);
}

/* ---- refusals and the default ----------------------------------------- */

static void refused(const bfs_layout_opts *o, const char *words)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_layout *l = NULL;

	assert_int_equal(bfs_layout_create(o, &l, msg), -EINVAL);
	assert_null(l);
	if (!strstr(msg, words))
		fail_msg("message '%s' lacks '%s'", msg, words);
}

static void test_layout_refuses_what_cannot_work_and_says_why(void **state)
{
	uint64_t first[] = { 0, 4, 4, 9, 20 };
	bfs_layout_opts ok = { .n = 20, .first = first, .nshards = 4, .shuffle = 1, .seed = 1,
			       .block = 2, .split = BFS_SPLIT_SHARDS, .world = 4, .node_ranks = 2 };
	bfs_layout_opts o;
	bfs_layout *l = make(&ok);

	bfs_layout_destroy(l);
	o = ok, o.shuffle = 0;
	refused(&o, "--shuffle-block needs --shuffle");
	o = ok, o.block = 0;
	refused(&o, "not a global shuffle");
	o = ok, o.node_ranks = 3;
	refused(&o, "--world 4 is not a whole number of nodes of 3 ranks");
	o = ok, o.n = 21;
	refused(&o, "shards' sample counts");
	o = ok, o.world = 40, o.node_ranks = 1;
	refused(&o, "fewer than the 40 ranks");
	o = ok, o.resume = (bfs_layout_resume){ .on = 1, .epoch = 2, .nruns = 1,
						.runs = { { 6, 4, 0 } } };
	refused(&o, "6 samples consumed is not a multiple of its world 4");
	o.resume.runs[0] = (bfs_layout_run){ 24, 4, 0 };
	refused(&o, "had 20 (5 a rank) to serve");
	o.resume.runs[0] = (bfs_layout_run){ 8, 4, 3 };
	refused(&o, "world 4 is not a whole number of nodes of 3 ranks");
	o.resume.runs[0] = (bfs_layout_run){ 20, 4, 0 };
	refused(&o, "has 0 samples left, fewer than the 4 ranks of this world: start at epoch 3");
	o.resume.nruns = 0;
	refused(&o, "1 to 16 runs");
}

static void test_layout_default_block_is_global_for_local_and_folders_and_a_share_of_the_shards_else(void **state)
{
	/* local, split by samples: the global shuffle, whatever the shards */
	assert_true(bfs_layout_default_block(0, 0, BFS_SPLIT_SAMPLES, 1024, 1) == 0);
	/* a folder's images are objects of their own */
	assert_true(bfs_layout_default_block(1, 1, BFS_SPLIT_SAMPLES, 50000, 1) == 0);
	/* remote: 1/32 of the shards, 1 .. 64 */
	assert_true(bfs_layout_default_block(1, 0, BFS_SPLIT_SAMPLES, 1024, 1) == 32);
	assert_true(bfs_layout_default_block(1, 0, BFS_SPLIT_SAMPLES, 147, 1) == 4);
	assert_true(bfs_layout_default_block(1, 0, BFS_SPLIT_SAMPLES, 10, 1) == 1);
	assert_true(bfs_layout_default_block(1, 0, BFS_SPLIT_SAMPLES, 100000, 1) == 64);
	/* split by shards, local or remote: two blocks a node at least */
	assert_true(bfs_layout_default_block(0, 0, BFS_SPLIT_SHARDS, 1024, 4) == 32);
	assert_true(bfs_layout_default_block(1, 0, BFS_SPLIT_SHARDS, 1024, 64) == 8);
	assert_true(bfs_layout_default_block(0, 1, BFS_SPLIT_SHARDS, 6, 8) == 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_global_shuffle_split_by_samples_is_bfs_order_bit_for_bit),
		cmocka_unit_test(test_layout_block_order_is_its_documented_definition),
		cmocka_unit_test(test_layout_shards_of_one_size_need_no_table_and_give_the_same_order),
		cmocka_unit_test(test_layout_block_keeps_its_shards_samples_together),
		cmocka_unit_test(test_layout_block_order_depends_on_seed_and_epoch_only),
		cmocka_unit_test(test_layout_every_sample_once_equal_shares_over_many_combinations),
		cmocka_unit_test(test_layout_shards_split_gives_each_node_about_its_share_of_the_shards),
		cmocka_unit_test(test_layout_shards_split_turns_so_every_node_sees_every_shard),
		cmocka_unit_test(test_layout_resume_from_every_world_to_every_other_serves_the_epoch_once),
		cmocka_unit_test(test_layout_resume_holds_for_file_order_and_other_blocks),
		cmocka_unit_test(test_layout_resume_chains_a_resumed_run_killed_again),
		cmocka_unit_test(test_layout_resume_on_the_same_world_serves_what_would_have_come_next),
		cmocka_unit_test(test_layout_refuses_what_cannot_work_and_says_why),
		cmocka_unit_test(test_layout_default_block_is_global_for_local_and_folders_and_a_share_of_the_shards_else),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
