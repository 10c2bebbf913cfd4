/*
 * test_status.c - fs/status: what `batchfs status` shows from a mount's
 * dataset.json and two stats.json snapshots, as text and as JSON.
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

#include "fs/jsonread.h"
#include "fs/status.h"

static const char dataset[] =
	"{\"batchfs_version\": \"0.1.0\", \"source\": \"/data/train\", "
	"\"format\": \"tfrecord\", \"epochs\": 4, \"batches_per_epoch\": 10}";

/* A stats.json as the mount writes it, with the counters given. */
static char *stats(double uptime, int served, int decoded, int hits,
		   const char *readers, const char *errors, int errors_total)
{
	char *s;

	assert_true(asprintf(&s,
		"{\"timestamp\": 1796168589.787, \"uptime_seconds\": %.3f, "
		"\"samples_served\": %d, \"samples_decoded\": %d, "
		"\"prefetch_depth\": 3, \"prefetch_mode\": \"auto\", "
		"\"memory_bytes\": 104857600, \"memory_budget\": 1073741824, "
		"\"memory\": {\"batch_slots\": 94371840, \"decoder_scratch\": 10485760, "
		"\"held_files\": 0}, \"reader_waits\": 7, \"reader_wait_seconds\": 1.5, "
		"\"cache\": {\"dir\": \"/local/cache\", \"hits\": %d, \"misses\": 10, "
		"\"hit_rate\": 0.5, \"bytes_used\": 1073741824, "
		"\"size_limit\": 4294967296, \"full\": false}, "
		"\"readers\": [%s], \"errors_total\": %d, \"errors_left_out\": 0, "
		"\"errors\": [%s]}",
		uptime, served, decoded, hits, readers, errors_total, errors) > 0);
	return s;
}

static bfs_jr *parse(const char *text)
{
	char err[128];
	bfs_jr *v;

	if (bfs_jr_parse(text, strlen(text), &v, err, sizeof(err)))
		fail_msg("%s: %s", err, text);
	return v;
}

struct views {
	bfs_jr *ds, *prev, *now, *json;
	char *text, *jtext;
};

static void render(struct views *v, const char *prev, const char *now)
{
	v->ds = parse(dataset);
	v->prev = prev ? parse(prev) : NULL;
	v->now = parse(now);
	assert_int_equal(bfs_status_render("/mnt/train", v->ds, v->prev, v->now, 0,
					   &v->text), 0);
	assert_int_equal(bfs_status_render("/mnt/train", v->ds, v->prev, v->now, 1,
					   &v->jtext), 0);
	/* one object on one line */
	assert_ptr_equal(strchr(v->jtext, '\n'), v->jtext + strlen(v->jtext) - 1);
	v->json = parse(v->jtext);
}

static void views_free(struct views *v)
{
	bfs_jr_free(v->ds);
	bfs_jr_free(v->prev);
	bfs_jr_free(v->now);
	bfs_jr_free(v->json);
	free(v->text);
	free(v->jtext);
}

static void expect_text(const struct views *v, const char *want)
{
	if (!strstr(v->text, want))
		fail_msg("the text view lacks '%s':\n%s", want, v->text);
}

static double rate(const struct views *v, const char *key)
{
	return bfs_jr_num(bfs_jr_get(bfs_jr_get(v->json, "samples_per_second"), key), -1);
}

static void test_status_rates_are_the_change_between_two_looks(void **state)
{
	char *a = stats(10.0, 100, 50, 20, "", "", 0);
	char *b = stats(12.0, 300, 150, 60, "", "", 0);
	struct views v;

	render(&v, a, b);
	assert_true(rate(&v, "served") == 100);
	assert_true(rate(&v, "decoded") == 50);
	assert_true(rate(&v, "from_cache") == 20);
	assert_true(bfs_jr_num(bfs_jr_get(v.json, "interval_seconds"), 0) == 2);
	expect_text(&v, "samples/s    100 served, 50 decoded, 20 from the cache\n");
	expect_text(&v, "readers      none reading now");
	views_free(&v);
	free(a);
	free(b);
}

static void test_status_without_an_earlier_look_averages_since_the_mount(void **state)
{
	char *b = stats(10.0, 300, 150, 60, "", "", 0);
	struct views v;

	render(&v, NULL, b);
	assert_true(rate(&v, "served") == 30);
	expect_text(&v, "30 served, 15 decoded, 6 from the cache (average since the mount started)");
	views_free(&v);
	free(b);
}

static void test_status_says_where_each_reader_is_as_k_of_n(void **state)
{
	char *a = stats(1, 0, 0, 0, "", "", 0);
	char *b = stats(2, 0, 0, 0,
			"{\"pid\": 4242, \"epoch\": 2, \"batch\": 5, \"depth\": 4, "
			"\"batches_per_second\": 12.5, \"batches\": 25, \"waits\": 3, "
			"\"wait_seconds\": 0.25}, "
			"{\"pid\": 77, \"epoch\": null, \"batch\": null, \"depth\": 2, "
			"\"batches_per_second\": 0, \"batches\": 0, \"waits\": 0, "
			"\"wait_seconds\": 0}", "", 0);
	const bfs_jr *r;
	struct views v;

	render(&v, a, b);
	expect_text(&v, "readers      pid 4242: epoch-0002/batch-000005 (epoch 3 of 4, "
			"batch 6 of 10), 12.5 batches/s, read-ahead 4, 3 waits (0.2 s)\n");
	expect_text(&v, "             pid 77, 0.0 batches/s");
	r = bfs_jr_at(bfs_jr_get(v.json, "readers"), 0);
	assert_true(bfs_jr_num(bfs_jr_get(r, "pid"), 0) == 4242);
	assert_true(bfs_jr_num(bfs_jr_get(r, "epoch"), 0) == 2);
	assert_true(bfs_jr_num(bfs_jr_get(r, "batch"), 0) == 5);
	assert_true(bfs_jr_num(bfs_jr_get(r, "depth"), 0) == 4);
	assert_true(bfs_jr_num(bfs_jr_get(r, "waits"), 0) == 3);
	r = bfs_jr_at(bfs_jr_get(v.json, "readers"), 1);
	assert_int_equal(bfs_jr_get(r, "epoch")->type, BFS_JR_NULL);
	assert_true(bfs_jr_num(bfs_jr_get(v.json, "batches_per_epoch"), 0) == 10);
	assert_true(bfs_jr_num(bfs_jr_get(v.json, "epochs"), 0) == 4);
	views_free(&v);
	free(a);
	free(b);
}

static void test_status_shows_cache_memory_and_read_ahead(void **state)
{
	char *a = stats(1, 0, 0, 0, "", "", 0);
	struct views v;
	const bfs_jr *m;

	render(&v, a, a);
	expect_text(&v, "read-ahead   auto, deepest 3; reader waits 7 (1.5 s in all)");
	expect_text(&v, "cache        0 hits, 10 misses (50.0% hits); 1.0 of 4.0 GiB used; /local/cache");
	expect_text(&v, "memory       100 of 1024 MiB (--mem): batches 90, decoder scratch 10, held files 0");
	expect_text(&v, "errors       none");
	m = bfs_jr_get(v.json, "memory");
	assert_true(bfs_jr_num(bfs_jr_get(m, "bytes"), 0) == 104857600);
	assert_true(bfs_jr_num(bfs_jr_get(m, "budget"), 0) == 1073741824);
	assert_string_equal(bfs_jr_str(bfs_jr_get(bfs_jr_get(v.json, "cache"), "dir"), ""),
			    "/local/cache");
	assert_true(bfs_jr_num(bfs_jr_get(v.json, "prefetch_depth"), 0) == 3);
	views_free(&v);
	free(a);
}

static void test_status_shows_the_last_errors_made_safe_for_a_terminal(void **state)
{
	char errs[4096] = "";
	char *a;
	struct views v;
	const bfs_jr *last;

	for (int i = 0; i < 7; i++) {
		char one[256];

		snprintf(one, sizeof(one),
			 "%s{\"kind\": \"sample\", \"shard\": \"s%d\\u001b[31m.tfrecord\", "
			 "\"record\": %d, \"message\": \"not a JPEG\"}", i ? ", " : "", i, i);
		strcat(errs, one);
	}
	a = stats(1, 0, 0, 0, "", errs, 7);
	render(&v, a, a);
	expect_text(&v, "errors       7; the last listed:\n");
	expect_text(&v, "             s6\\x1b[31m.tfrecord record 6: not a JPEG\n");
	assert_null(strstr(v.text, "s1\\x1b")); /* only the last 5 */
	assert_non_null(strstr(v.text, "s2\\x1b"));
	assert_null(strchr(v.text, '\x1b'));
	last = bfs_jr_get(v.json, "last_errors");
	assert_int_equal(last->n, 5);
	/* JSON keeps the name's bytes */
	assert_string_equal(bfs_jr_str(bfs_jr_get(bfs_jr_at(last, 4), "shard"), ""),
			    "s6\x1b[31m.tfrecord");
	assert_true(bfs_jr_num(bfs_jr_get(bfs_jr_at(last, 4), "record"), 0) == 6);
	assert_true(bfs_jr_num(bfs_jr_get(v.json, "errors_total"), 0) == 7);
	views_free(&v);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_rates_are_the_change_between_two_looks),
		cmocka_unit_test(test_status_without_an_earlier_look_averages_since_the_mount),
		cmocka_unit_test(test_status_says_where_each_reader_is_as_k_of_n),
		cmocka_unit_test(test_status_shows_cache_memory_and_read_ahead),
		cmocka_unit_test(test_status_shows_the_last_errors_made_safe_for_a_terminal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
