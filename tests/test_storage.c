/*
 * test_storage.c - the pure parts of the storage layer: WebDataset's brace
 * notation, the retry policy's backoff, and what a URL is.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/storage/http.h"
#include "engine/storage/storage.h"

static void free_all(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void test_storage_braces_expand_zero_padded_ranges(void **state)
{
	char **v;
	int n;

	(void)state;
	n = bfs_storage_expand_braces("https://h/d/shard-{000008..000011}.tar", &v, 100);
	assert_int_equal(n, 4);
	assert_string_equal(v[0], "https://h/d/shard-000008.tar");
	assert_string_equal(v[3], "https://h/d/shard-000011.tar");
	free_all(v, n);
	n = bfs_storage_expand_braces("x{9..10}", &v, 100);
	assert_int_equal(n, 2);
	assert_string_equal(v[0], "x9");
	assert_string_equal(v[1], "x10");
	free_all(v, n);
}

static void test_storage_braces_expand_lists_and_multiply(void **state)
{
	char **v;
	int n;

	(void)state;
	n = bfs_storage_expand_braces("{train,val}-{0..2}.tar", &v, 100);
	assert_int_equal(n, 6);
	assert_string_equal(v[0], "train-0.tar");
	assert_string_equal(v[2], "train-2.tar");
	assert_string_equal(v[5], "val-2.tar");
	free_all(v, n);
	n = bfs_storage_expand_braces("plain.tar", &v, 100);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], "plain.tar");
	free_all(v, n);
}

static void test_storage_braces_refuse_what_is_malformed(void **state)
{
	char **v;

	(void)state;
	assert_int_equal(bfs_storage_expand_braces("a{3..1}", &v, 100), -EINVAL);
	assert_int_equal(bfs_storage_expand_braces("a{1..3", &v, 100), -EINVAL);
	assert_int_equal(bfs_storage_expand_braces("a{}", &v, 100), -EINVAL);
	assert_int_equal(bfs_storage_expand_braces("a{-1..3}", &v, 100), -EINVAL);
	assert_int_equal(bfs_storage_expand_braces("a{1..x}", &v, 100), -EINVAL);
	assert_int_equal(bfs_storage_expand_braces("a{{1..2}}", &v, 100), -EINVAL);
	/* more URLs than allowed: refused, not cut */
	assert_int_equal(bfs_storage_expand_braces("a{0..99}", &v, 10), -EINVAL);
}

static void test_storage_backoff_is_capped_jittered_and_honours_retry_after(void **state)
{
	bfs_http_opts o;
	uint64_t seed = 42;
	unsigned seen_below_half = 0;

	(void)state;
	bfs_http_opts_default(&o);
	o.backoff_ms = 100;
	o.backoff_max_ms = 1000;
	for (unsigned attempt = 1; attempt <= 12; attempt++) {
		uint64_t cap = 100ull << (attempt - 1);

		if (cap > 1000)
			cap = 1000;
		for (int k = 0; k < 200; k++) {
			unsigned ms = bfs_http_backoff_ms(&o, attempt, 0, &seed);

			assert_true(ms <= cap);
			seen_below_half += ms < cap / 2;
		}
	}
	/* full jitter: draws spread over [0, cap], not all at the cap */
	assert_true(seen_below_half > 12 * 200 / 4);
	/* Retry-After wins when it asks for longer */
	assert_int_equal(bfs_http_backoff_ms(&o, 1, 3000, &seed), 3000);
	/* the cap never overflows however many attempts */
	assert_true(bfs_http_backoff_ms(&o, 4000, 0, &seed) <= 1000);
}

static void test_storage_knows_a_url_from_a_directory(void **state)
{
	(void)state;
	assert_true(bfs_storage_is_url("s3://b/p"));
	assert_true(bfs_storage_is_url("https://h/x.tar"));
	assert_true(bfs_storage_is_url("HTTP://h/x.tar"));
	assert_false(bfs_storage_is_url("/data/shards"));
	assert_false(bfs_storage_is_url("s3:/b"));
	assert_false(bfs_storage_is_url("relative/s3://x"));
}

static void test_storage_refuses_credentials_in_a_url(void **state)
{
	bfs_storage_opts o = { 0 };
	bfs_storage *st = NULL;
	char err[512] = "";

	(void)state;
	bfs_http_opts_default(&o.http);
	assert_int_equal(bfs_storage_open("https://user:pw@h/x-{0..1}.tar", &o, &st, err), -EINVAL);
	assert_null(st);
	assert_non_null(strstr(err, "no credentials from a URL"));
	assert_int_equal(bfs_storage_open("s3://user:pw@bucket/p", &o, &st, err), -EINVAL);
	assert_int_equal(bfs_storage_open("https://h/x-{2..1}.tar", &o, &st, err), -EINVAL);
	assert_non_null(strstr(err, "brace pattern"));
}

static void test_storage_root_is_the_url_every_name_is_relative_to(void **state)
{
	static const char *cases[][2] = {
		{ "s3://bucket/set/tfr", "s3://bucket/set/tfr/" },
		{ "s3://bucket/set/tfr/", "s3://bucket/set/tfr/" },
		{ "s3://bucket", "s3://bucket/" },
		{ "https://h:8443/wds/train-{000..002}.tar", "https://h:8443/wds/" },
		{ "http://h/a/b/one.tar", "http://h/a/b/" },
	};
	bfs_storage_opts o = { .anonymous = 1 };
	char err[512] = "";

	(void)state;
	bfs_http_opts_default(&o.http);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bfs_storage *st = NULL;

		assert_int_equal(bfs_storage_open(cases[i][0], &o, &st, err), 0);
		assert_string_equal(bfs_storage_root(st), cases[i][1]);
		bfs_storage_close(st);
	}
}

/* A source given URL by URL (a wids index's shards): named by the URL
 * opened, its root the longest folder the URLs share. */
static void test_storage_a_list_of_urls_is_rooted_at_the_folder_they_share(void **state)
{
	const char *urls[] = { "https://h:8443/data/wds/a/shard-0.tar",
			       "https://h:8443/data/wds/b/shard-1.tar",
			       "https://h:8443/data/wds/shard-2.tar" };
	const char *hosts[] = { "https://h/a/x.tar", "https://g/a/y.tar" };
	const char *folder[] = { "https://h/a/x.tar", "https://h/a/" };
	bfs_storage_opts o = { .urls = urls, .nurls = 3 };
	bfs_storage *st = NULL;
	char err[512] = "";

	(void)state;
	bfs_http_opts_default(&o.http);
	assert_int_equal(bfs_storage_open("https://h:8443/data/index.json", &o, &st, err), 0);
	assert_string_equal(bfs_storage_root(st), "https://h:8443/data/wds/");
	assert_string_equal(bfs_storage_url(st), "https://h:8443/data/index.json");
	bfs_storage_close(st);
	o.urls = hosts;
	o.nurls = 2;
	assert_int_equal(bfs_storage_open("https://h/i.json", &o, &st, err), -EINVAL);
	assert_non_null(strstr(err, "more than one host"));
	o.urls = folder;
	assert_int_equal(bfs_storage_open("https://h/i.json", &o, &st, err), -EINVAL);
	assert_non_null(strstr(err, "names a folder"));
	o.urls = urls;
	o.nurls = 0;
	assert_int_equal(bfs_storage_open("https://h/i.json", &o, &st, err), -EINVAL);
}

/* ---- a local folder ---- */

static char tmp[256];

static int tmp_setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/bfs_storage_XXXXXX");
	return mkdtemp(tmp) ? 0 : -1;
}

static int tmp_teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

static void put_file(const char *rel, const char *data, size_t n)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	fclose(f);
}

static bfs_storage *open_tmp(void)
{
	bfs_storage_opts o = { 0 };
	bfs_storage *st = NULL;
	char err[512] = "";

	assert_int_equal(bfs_storage_open(tmp, &o, &st, err), 0);
	return st;
}

static void test_storage_lists_a_folder_every_level_down_sorted_without_hidden_names(void **state)
{
	char path[512];
	bfs_storage_object *v;
	bfs_storage *st;
	size_t n;
	char err[512];

	(void)state;
	snprintf(path, sizeof(path), "%s/cls", tmp);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.hidden", tmp);
	mkdir(path, 0755);
	put_file("b.tar", "bbbb", 4);
	put_file("a.tar", "a", 1);
	put_file("cls/x.jpg", "xyz", 3);
	put_file(".dot", "no", 2);
	put_file(".hidden/y.jpg", "no", 2);
	st = open_tmp();
	assert_non_null(strstr(bfs_storage_root(st), "/bfs_storage_"));
	assert_int_equal(bfs_storage_root(st)[strlen(bfs_storage_root(st)) - 1], '/');
	assert_int_equal(bfs_storage_list(st, &v, &n, err), 0);
	assert_int_equal(n, 3);
	assert_string_equal(v[0].name, "a.tar");
	assert_string_equal(v[1].name, "b.tar");
	assert_string_equal(v[2].name, "cls/x.jpg");
	assert_int_equal(v[1].size, 4);
	assert_int_equal(v[1].etag[0], '"');
	assert_string_not_equal(v[0].etag, v[1].etag);
	bfs_storage_objects_free(v, n);
	bfs_storage_close(st);
}

static void test_storage_reads_a_folder_file_exactly_and_refuses_one_rewritten(void **state)
{
	bfs_storage_object *v;
	bfs_storage *st;
	bfs_http_stats hs;
	char buf[16], err[512] = "";
	size_t n;

	(void)state;
	put_file("s.tfrecord", "0123456789", 10);
	st = open_tmp();
	assert_int_equal(bfs_storage_list(st, &v, &n, err), 0);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(bfs_storage_read(st, &v[0], 3, buf, 4, err), 0);
	assert_memory_equal(buf, "3456", 4);
	assert_int_equal(bfs_storage_read(st, &v[0], 8, buf, 4, err), -ERANGE);
	assert_non_null(strstr(err, "past its end"));
	bfs_storage_stats(st, &hs);
	assert_int_equal(hs.requests, 2);
	assert_int_equal(hs.bytes, 4);
	/* rewritten at the same size: its identity changed (a new ctime) */
	usleep(20000);
	put_file("s.tfrecord", "abcdefghij", 10);
	assert_int_equal(bfs_storage_read(st, &v[0], 0, buf, 4, err), -ESTALE);
	assert_non_null(strstr(err, "changed since it was listed"));
	bfs_storage_objects_free(v, n);
	bfs_storage_close(st);
}

struct pieces {
	char got[64];
	uint64_t next;
	int calls;
};

static int take_piece(void *ctx, uint64_t off, const void *p, size_t n)
{
	struct pieces *pc = ctx;

	assert_int_equal(off, pc->next); /* in order, each byte once */
	memcpy(pc->got + off - 2, p, n);
	pc->next += n;
	pc->calls++;
	return 0;
}

static int refuse_piece(void *ctx, uint64_t off, const void *p, size_t n)
{
	(void)ctx, (void)off, (void)p, (void)n;
	return -ENOSPC;
}

static void test_storage_hands_a_read_to_a_sink_in_order(void **state)
{
	struct pieces pc = { .next = 2 };
	bfs_storage_object *v;
	bfs_storage *st;
	char err[512] = "";
	size_t n;

	(void)state;
	put_file("s.tar", "0123456789", 10);
	st = open_tmp();
	assert_int_equal(bfs_storage_list(st, &v, &n, err), 0);
	assert_int_equal(bfs_storage_read_to(st, &v[0], 2, 7, take_piece, &pc, err), 0);
	assert_int_equal(pc.next, 9);
	assert_memory_equal(pc.got, "2345678", 7);
	/* the sink's error ends the read with it */
	assert_int_equal(bfs_storage_read_to(st, &v[0], 0, 4, refuse_piece, NULL, err), -ENOSPC);
	bfs_storage_objects_free(v, n);
	bfs_storage_close(st);
}

static void test_storage_stat_names_an_object_the_listing_leaves_out(void **state)
{
	bfs_storage_object o, *v;
	bfs_storage *st;
	char err[512] = "", buf[8];
	size_t n;

	(void)state;
	put_file("s.tar", "0123", 4);
	put_file(".batchfs-index", "sidecar", 7);
	st = open_tmp();
	assert_int_equal(bfs_storage_list(st, &v, &n, err), 0);
	assert_int_equal(n, 1); /* hidden: not one of the objects */
	bfs_storage_objects_free(v, n);
	assert_int_equal(bfs_storage_stat(st, ".batchfs-index", &o, err), 0);
	assert_string_equal(o.name, ".batchfs-index");
	assert_int_equal(o.size, 7);
	assert_int_equal(bfs_storage_read(st, &o, 0, buf, 7, err), 0);
	assert_memory_equal(buf, "sidecar", 7);
	free(o.name);
	assert_int_equal(bfs_storage_stat(st, "none", &o, err), -ENOENT);
	bfs_storage_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_storage_braces_expand_zero_padded_ranges),
		cmocka_unit_test(test_storage_braces_expand_lists_and_multiply),
		cmocka_unit_test(test_storage_braces_refuse_what_is_malformed),
		cmocka_unit_test(test_storage_backoff_is_capped_jittered_and_honours_retry_after),
		cmocka_unit_test(test_storage_knows_a_url_from_a_directory),
		cmocka_unit_test(test_storage_root_is_the_url_every_name_is_relative_to),
		cmocka_unit_test_setup_teardown(test_storage_lists_a_folder_every_level_down_sorted_without_hidden_names, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_storage_reads_a_folder_file_exactly_and_refuses_one_rewritten, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_storage_hands_a_read_to_a_sink_in_order, tmp_setup, tmp_teardown),
		cmocka_unit_test(test_storage_refuses_credentials_in_a_url),
		cmocka_unit_test(test_storage_a_list_of_urls_is_rooted_at_the_folder_they_share),
		cmocka_unit_test_setup_teardown(test_storage_stat_names_an_object_the_listing_leaves_out, tmp_setup, tmp_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
