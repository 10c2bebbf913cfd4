/*
 * test_namespace.c - canonical names of the mount and nothing else.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fs/namespace.h"

static const bfs_ns_shape shape = { .epochs = 1, .batches = 16 };

static void test_namespace_parses_root_and_json_files(void **state)
{
	bfs_node n;

	assert_int_equal(bfs_ns_parse(&shape, "/", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_ROOT);
	assert_int_equal(bfs_ns_parse(&shape, "/dataset.json", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_DATASET_JSON);
	assert_int_equal(bfs_ns_parse(&shape, "/stats.json", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_STATS_JSON);
}

static void test_namespace_parses_batch_and_label_files(void **state)
{
	bfs_node n;

	assert_int_equal(bfs_ns_parse(&shape, "/epoch-0000", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_EPOCH);
	assert_int_equal(bfs_ns_parse(&shape, "/epoch-0000/batch-000015.npy", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_BATCH);
	assert_int_equal(n.batch, 15);
	assert_int_equal(bfs_ns_parse(&shape, "/epoch-0000/batch-000003.labels.npy", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_LABELS);
	assert_int_equal(n.batch, 3);
}

static void test_namespace_rejects_names_that_are_not_canonical(void **state)
{
	static const char *bad[] = {
		"", "dataset.json", "/dataset.json/x", "/Dataset.json",
		"/epoch-0001", "/epoch-000", "/epoch-00000", "/epoch-+000",
		"/epoch-0000/batch-000016.npy", "/epoch-0000/batch-00001.npy",
		"/epoch-0000/batch-0000001.npy", "/epoch-0000/batch-+00001.npy",
		"/epoch-0000/batch- 00001.npy", "/epoch-0000/batch-000001.NPY",
		"/epoch-0000/batch-000001.npy.bak", "/epoch-0000/batch-000001",
		"/epoch-0000/batch-.npy", "/epoch-0000/batch-000001.labels",
		"/epoch-0000/batch-000001.npy/x", "/epoch-0000/..",
		"/epoch-0000/../dataset.json", "/..", "/.", "/etc/passwd",
		"/epoch-0000/batch-00000\xff.npy", "/epoch-0000/batch-000001\n.npy",
		"/epoch-0000/dataset.json",
		"/epoch-0000/batch-18446744073709551616.npy",
	};
	bfs_node n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = bfs_ns_parse(&shape, bad[i], &n);

		if (err != -ENOENT)
			fail_msg("'%s' parsed (%d)", bad[i], err);
	}
}

static void test_namespace_rejects_overlong_components(void **state)
{
	char path[600] = "/";
	bfs_node n;

	memset(path + 1, 'a', 300);
	path[301] = '\0';
	assert_int_equal(bfs_ns_parse(&shape, path, &n), -ENAMETOOLONG);
}

static void test_namespace_names_round_trip(void **state)
{
	bfs_ns_shape big = { .epochs = 12000, .batches = 31250 };
	char name[64], path[160];
	bfs_node n = { .kind = BFS_NODE_LABELS, .epoch = 11999, .batch = 31249 }, p;

	assert_int_equal(bfs_ns_name(&big, &n, name, sizeof(name)),
			 (int)strlen("batch-031249.labels.npy"));
	assert_string_equal(name, "batch-031249.labels.npy");
	snprintf(path, sizeof(path), "/epoch-11999/%s", name);
	assert_int_equal(bfs_ns_parse(&big, path, &p), 0);
	assert_int_equal(p.kind, BFS_NODE_LABELS);
	assert_int_equal(p.epoch, 11999);
	assert_int_equal(p.batch, 31249);
	/* epochs need 5 digits here, so the 4-digit form is not canonical */
	assert_int_equal(bfs_ns_parse(&big, "/epoch-0001", &p), -ENOENT);
	assert_int_equal(bfs_ns_parse(&big, "/epoch-00001", &p), 0);
}

static void test_namespace_widens_batch_numbers_past_a_million(void **state)
{
	bfs_ns_shape s = { .epochs = 1, .batches = 1234567 };
	bfs_node n = { .kind = BFS_NODE_BATCH, .batch = 5 }, p;
	char name[64];

	bfs_ns_name(&s, &n, name, sizeof(name));
	assert_string_equal(name, "batch-0000005.npy");
	assert_int_equal(bfs_ns_parse(&s, "/epoch-0000/batch-1234566.npy", &p), 0);
	assert_int_equal(bfs_ns_parse(&s, "/epoch-0000/batch-000005.npy", &p), -ENOENT);
}

static void test_namespace_name_reports_small_buffers(void **state)
{
	bfs_node n = { .kind = BFS_NODE_BATCH, .batch = 1 };
	char tiny[8];

	assert_int_equal(bfs_ns_name(&shape, &n, tiny, sizeof(tiny)), -ENOSPC);
}

static void assert_same_node(const bfs_node *a, const bfs_node *b)
{
	assert_int_equal(a->kind, b->kind);
	assert_int_equal(a->epoch, b->epoch);
	assert_int_equal(a->batch, b->batch);
}

static void test_namespace_child_matches_path_parse(void **state)
{
	static const char *names[] = {
		"dataset.json", "stats.json", "epoch-0000", "epoch-0001",
		"epoch-1", "..", ".", "", "batch-000001.npy",
	};
	bfs_ns_shape s = { .epochs = 2, .batches = 16 };
	bfs_node root = { .kind = BFS_NODE_ROOT }, ep, n, p;
	char path[300];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "/%s", names[i]);
		int want = names[i][0] && strcmp(names[i], ".") != 0
				   ? bfs_ns_parse(&s, path, &p) : -ENOENT;

		assert_int_equal(bfs_ns_child(&s, &root, names[i], &n), want);
		if (want == 0)
			assert_same_node(&n, &p);
	}
	assert_int_equal(bfs_ns_child(&s, &root, "epoch-0001", &ep), 0);
	assert_int_equal(bfs_ns_child(&s, &ep, "batch-000015.labels.npy", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_LABELS);
	assert_int_equal(n.epoch, 1);
	assert_int_equal(n.batch, 15);
	assert_int_equal(bfs_ns_child(&s, &ep, "batch-000016.npy", &n), -ENOENT);
	assert_int_equal(bfs_ns_child(&s, &ep, "epoch-0000", &n), -ENOENT);
	assert_int_equal(bfs_ns_child(&s, &n, "x", &p), -ENOTDIR);
}

/* Every node gets its own number, and the number gives the node back. */
static void test_namespace_inode_numbers_round_trip(void **state)
{
	bfs_ns_shape s = { .epochs = 3, .batches = 5 };
	uint64_t seen[4 + 3 + 3 * 5 * 4] = { 0 }, ino;
	size_t count = 0;
	bfs_node n, back;

	for (int k = BFS_NODE_ROOT; k <= BFS_NODE_PREVIEW; k++)
		for (uint32_t e = 0; e < s.epochs; e++)
			for (uint64_t b = 0; b < s.batches; b++) {
				memset(&n, 0, sizeof(n));
				n.kind = (bfs_node_kind)k;
				if (k >= BFS_NODE_EPOCH)
					n.epoch = e;
				if (k >= BFS_NODE_BATCH)
					n.batch = b;
				else if (b)
					continue;
				if (k < BFS_NODE_EPOCH && e)
					continue;
				ino = bfs_ns_ino(&s, &n);
				assert_true(ino >= 1);
				for (size_t i = 0; i < count; i++)
					assert_true(seen[i] != ino);
				seen[count++] = ino;
				assert_int_equal(bfs_ns_from_ino(&s, ino, &back), 0);
				assert_same_node(&back, &n);
			}
	assert_int_equal(count, 3 + 3 + 3 * 5 * 4);
	assert_int_equal(bfs_ns_ino(&s, &(bfs_node){ .kind = BFS_NODE_ROOT }), 1);
	assert_int_equal(bfs_ns_from_ino(&s, 0, &back), -ENOENT);
	/* one past the last preview, and far out */
	assert_int_equal(bfs_ns_from_ino(&s, 4 + 3 + 3 * 5 * 4, &back), -ENOENT);
	assert_int_equal(bfs_ns_from_ino(&s, UINT64_MAX, &back), -ENOENT);
}

static const bfs_ns_shape ranked = { .epochs = 2, .batches = 16, .ranks = 3,
				     .rank0 = 4, .hold = 1 };

/* --ranks 4-6: rank-4/ .. rank-6/ in the root, the epochs inside each. */
static void test_namespace_parses_rank_directories(void **state)
{
	char buf[128];
	bfs_node n;

	assert_int_equal(bfs_ns_parse(&ranked, "/rank-5", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_RANK);
	assert_int_equal(n.rank, 5);
	assert_int_equal(bfs_ns_parse(&ranked, "/rank-6/epoch-0001/batch-000015.labels.npy", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_LABELS);
	assert_int_equal(n.rank, 6);
	assert_int_equal(n.epoch, 1);
	assert_int_equal(n.batch, 15);
	assert_int_equal(bfs_ns_path(&ranked, &n, buf, sizeof(buf)),
			 (int)strlen("rank-6/epoch-0001/batch-000015.labels.npy"));
	assert_string_equal(buf, "rank-6/epoch-0001/batch-000015.labels.npy");
	assert_int_equal(bfs_ns_path(&ranked, &n, buf, 20), -ENOSPC);
	assert_int_equal(bfs_ns_parse(&ranked, "/hold", &n), 0);
	assert_int_equal(n.kind, BFS_NODE_HOLD);
	assert_int_equal(bfs_ns_path(&ranked, &n, buf, sizeof(buf)), 4);
	assert_string_equal(buf, "hold");
	assert_int_equal(bfs_ns_parse(&ranked, "/dataset.json", &n), 0);
	/* and the same without ranks */
	assert_int_equal(bfs_ns_parse(&shape, "/epoch-0000/batch-000002.npy", &n), 0);
	assert_int_equal(bfs_ns_path(&shape, &n, buf, sizeof(buf)),
			 (int)strlen("epoch-0000/batch-000002.npy"));
	assert_string_equal(buf, "epoch-0000/batch-000002.npy");
}

static void test_namespace_rejects_ranks_it_does_not_serve(void **state)
{
	static const char *bad[] = {
		"/rank-3", "/rank-7", "/rank-04", "/rank-+4", "/rank-", "/rank-4x",
		"/epoch-0000", "/epoch-0000/batch-000000.npy", "/rank-4/hold",
		"/rank-4/dataset.json", "/rank-4/rank-4", "/rank-4/epoch-0002",
		"/rank-4/epoch-0000/epoch-0000", "/rank-4/epoch-0000/batch-000016.npy",
		"/rank-4294967300",
	};
	bfs_node n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = bfs_ns_parse(&ranked, bad[i], &n);

		if (err != -ENOENT)
			fail_msg("'%s' parsed (%d)", bad[i], err);
	}
	/* without ranks (and without --hold) neither rank-N nor hold exists */
	assert_int_equal(bfs_ns_parse(&shape, "/rank-0", &n), -ENOENT);
	assert_int_equal(bfs_ns_parse(&shape, "/hold", &n), -ENOENT);
	n.kind = BFS_NODE_HOLD;
	assert_int_equal(bfs_ns_child(&ranked, &n, "x", &n), -ENOTDIR);
}

/* Every node of a shape, for the inode checks below. */
static size_t all_nodes(const bfs_ns_shape *s, bfs_node *out, size_t cap)
{
	size_t n = 0;
	unsigned nr = s->ranks ? s->ranks : 1;

#define PUT(...) do { if (n < cap) out[n] = (bfs_node){ __VA_ARGS__ }; n++; } while (0)
	PUT(.kind = BFS_NODE_ROOT);
	PUT(.kind = BFS_NODE_DATASET_JSON);
	PUT(.kind = BFS_NODE_STATS_JSON);
	if (s->hold)
		PUT(.kind = BFS_NODE_HOLD);
	for (unsigned r = 0; r < nr; r++) {
		uint32_t rank = s->ranks ? s->rank0 + r : 0;

		if (s->ranks)
			PUT(.kind = BFS_NODE_RANK, .rank = rank);
		for (uint32_t e = 0; e < s->epochs; e++) {
			PUT(.kind = BFS_NODE_EPOCH, .rank = rank, .epoch = e);
			for (uint64_t b = 0; b < s->batches; b++)
				for (int k = BFS_NODE_BATCH; k <= BFS_NODE_PREVIEW; k++)
					PUT(.kind = (bfs_node_kind)k, .rank = rank,
					    .epoch = e, .batch = b);
		}
	}
#undef PUT
	return n;
}

/* With a rank level (and with /hold) every node still has a number of its
 * own, it maps back to the node, and no other number maps to anything;
 * batch ids are the engine's (r * E + e) * B + b. */
static void test_namespace_inode_numbers_stay_unique_with_ranks(void **state)
{
	static bfs_node nodes[4096];

	for (uint32_t ranks = 0; ranks <= 3; ranks++)
		for (uint32_t epochs = 1; epochs <= 3; epochs++)
			for (uint64_t batches = 1; batches <= 4; batches++)
				for (int hold = 0; hold <= 1; hold++) {
					bfs_ns_shape s = { .epochs = epochs, .batches = batches,
							   .ranks = ranks, .rank0 = ranks ? 5 : 0,
							   .hold = hold };
					size_t n = all_nodes(&s, nodes, 4096);
					uint64_t max = 0, id = 0;

					assert_true(n <= 4096);
					for (size_t i = 0; i < n; i++) {
						uint64_t ino = bfs_ns_ino(&s, &nodes[i]);
						bfs_node back;
						char path[128], p2[130];

						assert_true(ino != 0);
						if (ino > max)
							max = ino;
						assert_int_equal(bfs_ns_from_ino(&s, ino, &back), 0);
						assert_int_equal(back.kind, nodes[i].kind);
						assert_int_equal(back.rank, nodes[i].rank);
						if (back.kind != BFS_NODE_ROOT &&
						    back.kind != BFS_NODE_RANK && back.kind != BFS_NODE_DATASET_JSON &&
						    back.kind != BFS_NODE_STATS_JSON && back.kind != BFS_NODE_HOLD)
							assert_int_equal(back.epoch, nodes[i].epoch);
						if (back.kind >= BFS_NODE_BATCH && back.kind <= BFS_NODE_PREVIEW) {
							assert_true(back.batch == nodes[i].batch);
							if (back.kind == BFS_NODE_BATCH) {
								bfs_node bn;

								assert_true(bfs_ns_batch_id(&s, &back) == id);
								bfs_ns_batch_node(&s, id, &bn);
								assert_true(bfs_ns_ino(&s, &bn) == ino);
								id++;
							}
						}
						/* the path names the same node */
						assert_true(bfs_ns_path(&s, &nodes[i], path, sizeof(path)) >= 0);
						snprintf(p2, sizeof(p2), "/%s", path);
						assert_int_equal(bfs_ns_parse(&s, p2, &back), 0);
						assert_true(bfs_ns_ino(&s, &back) == ino);
					}
					/* n distinct numbers in 1..max, and nothing else */
					assert_true(max == n);
					assert_int_equal(bfs_ns_from_ino(&s, max + 1, &nodes[0]), -ENOENT);
					assert_int_equal(bfs_ns_from_ino(&s, 0, &nodes[0]), -ENOENT);
				}
}

/* Without a rank level the numbers are exactly those before ranks
 * existed: 4 + e for epochs, 4 + E + 4 * (e * B + b) + k for files. */
static void test_namespace_inode_numbers_without_ranks_are_unchanged(void **state)
{
	bfs_ns_shape s = { .epochs = 3, .batches = 7, .rank0 = 9 };
	bfs_node n = { .kind = BFS_NODE_EPOCH, .epoch = 2 };

	assert_true(bfs_ns_ino(&s, &n) == 4 + 2);
	n = (bfs_node){ .kind = BFS_NODE_LABELS, .epoch = 1, .batch = 5 };
	assert_true(bfs_ns_ino(&s, &n) == 4 + 3 + 4 * (1 * 7 + 5) + 1);
}

/* A resumed epoch's batches past its own count do not exist, by name or
 * by number, in every rank; the others keep theirs and their numbers. */
static void test_namespace_resumed_epoch_has_only_its_batches(void **state)
{
	bfs_ns_shape s = { .epochs = 3, .batches = 10, .ranks = 2, .rank0 = 4,
			   .partial = 1, .partial_epoch = 1, .partial_batches = 4 };
	bfs_ns_shape whole = s;
	bfs_node n;

	whole.partial = 0;
	assert_true(bfs_ns_epoch_batches(&s, 1) == 4);
	assert_true(bfs_ns_epoch_batches(&s, 0) == 10 && bfs_ns_epoch_batches(&s, 2) == 10);
	assert_int_equal(bfs_ns_parse(&s, "/rank-5/epoch-0001/batch-000003.npy", &n), 0);
	assert_int_equal(bfs_ns_parse(&s, "/rank-5/epoch-0001/batch-000004.npy", &n), -ENOENT);
	assert_int_equal(bfs_ns_parse(&s, "/rank-4/epoch-0001/batch-000009.index.json", &n), -ENOENT);
	assert_int_equal(bfs_ns_parse(&s, "/rank-4/epoch-0002/batch-000009.npy", &n), 0);
	for (uint32_t r = 4; r < 6; r++)
		for (uint32_t e = 0; e < 3; e++)
			for (uint64_t b = 0; b < 10; b++)
				for (int k = 0; k < 4; k++) {
					bfs_node x = { .kind = (bfs_node_kind)(BFS_NODE_BATCH + k),
						       .rank = r, .epoch = e, .batch = b }, y;
					uint64_t ino = bfs_ns_ino(&whole, &x);

					/* the same numbers as without the resume */
					assert_true(bfs_ns_ino(&s, &x) == ino);
					if (e == 1 && b >= 4) {
						assert_int_equal(bfs_ns_from_ino(&s, ino, &y), -ENOENT);
					} else {
						assert_int_equal(bfs_ns_from_ino(&s, ino, &y), 0);
						assert_true(y.batch == b && y.epoch == e && y.rank == r);
					}
				}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_namespace_parses_rank_directories),
		cmocka_unit_test(test_namespace_rejects_ranks_it_does_not_serve),
		cmocka_unit_test(test_namespace_inode_numbers_stay_unique_with_ranks),
		cmocka_unit_test(test_namespace_inode_numbers_without_ranks_are_unchanged),
		cmocka_unit_test(test_namespace_resumed_epoch_has_only_its_batches),
		cmocka_unit_test(test_namespace_parses_root_and_json_files),
		cmocka_unit_test(test_namespace_parses_batch_and_label_files),
		cmocka_unit_test(test_namespace_rejects_names_that_are_not_canonical),
		cmocka_unit_test(test_namespace_rejects_overlong_components),
		cmocka_unit_test(test_namespace_names_round_trip),
		cmocka_unit_test(test_namespace_widens_batch_numbers_past_a_million),
		cmocka_unit_test(test_namespace_name_reports_small_buffers),
		cmocka_unit_test(test_namespace_child_matches_path_parse),
		cmocka_unit_test(test_namespace_inode_numbers_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
