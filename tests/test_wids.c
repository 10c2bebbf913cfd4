/*
 * test_wids.c - wids shard indexes (fs/wids.h): the shards' URLs resolved
 * as wids resolves them, named past the folder they share, with their
 * sample counts and sizes; an index that is not one, or names what batchfs
 * cannot read, refused with why.
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
#include "fs/wids.h"

#define INDEX "https://data.example/sets/train/index.json"

static bfs_wids *parse(const char *text)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_wids *w = NULL;
	int rc = bfs_wids_parse(text, strlen(text), INDEX, &w, msg);

	if (rc)
		fail_msg("refused (%d): %s", rc, msg);
	return w;
}

static void refused(const char *text, const char *says)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_wids *w = (void *)1;

	assert_int_equal(bfs_wids_parse(text, strlen(text), INDEX, &w, msg), -EINVAL);
	assert_null(w);
	if (!strstr(msg, says))
		fail_msg("message \"%s\" does not say \"%s\"", msg, says);
}

static void test_wids_index_as_widsindex_writes_it(void **state)
{
	bfs_wids *w = parse(
		"{\"__kind__\": \"wids-shard-index-v1\", \"wids_version\": 1,\n"
		" \"name\": \"train\", \"shardlist\": [\n"
		"  {\"url\": \"shard-000000.tar\", \"nsamples\": 10, \"filesize\": 20480,"
		"   \"md5sum\": \"0f\"},\n"
		"  {\"url\": \"shard-000001.tar\", \"nsamples\": 7}]}");

	assert_int_equal(w->n, 2);
	assert_string_equal(w->root, "https://data.example/sets/train/");
	assert_string_equal(w->v[0].url, "https://data.example/sets/train/shard-000000.tar");
	assert_string_equal(w->v[0].name, "shard-000000.tar");
	assert_int_equal(w->v[0].nsamples, 10);
	assert_int_equal(w->v[0].filesize, 20480);
	assert_int_equal(w->v[1].filesize, -1);
	assert_string_equal(w->name, "train");
	assert_ptr_equal(bfs_wids_find(w, "shard-000001.tar"), &w->v[1]);
	assert_null(bfs_wids_find(w, "shard-000002.tar"));
	bfs_wids_free(w);
}

static void test_wids_urls_resolve_as_wids_resolves_them(void **state)
{
	bfs_wids *w = parse(
		"{\"wids_version\": 1, \"shardlist\": ["
		"{\"url\": \"./a/../b/./x.tar\", \"nsamples\": 1},"
		"{\"url\": \"../../sets/train/y.tar?sig=1\", \"nsamples\": 2},"
		"{\"url\": \"/sets/train//b/z.tar\", \"nsamples\": 3},"
		"{\"url\": \"https://data.example/sets/train/w.tar\", \"nsamples\": 4}]}");

	assert_string_equal(w->v[0].url, "https://data.example/sets/train/b/x.tar");
	assert_string_equal(w->v[1].url, "https://data.example/sets/train/y.tar?sig=1");
	assert_string_equal(w->v[2].url, "https://data.example/sets/train/b/z.tar");
	assert_string_equal(w->v[3].url, "https://data.example/sets/train/w.tar");
	assert_string_equal(w->root, "https://data.example/sets/train/");
	assert_string_equal(w->v[0].name, "b/x.tar");
	assert_string_equal(w->v[1].name, "y.tar?sig=1");
	bfs_wids_free(w);
}

static void test_wids_base_and_datasets_are_followed(void **state)
{
	bfs_wids *w = parse(
		"{\"wids_version\": 1, \"base\": \"/mirror/\","
		" \"shardlist\": [{\"url\": \"p.tar\", \"nsamples\": 1}],"
		" \"datasets\": [{\"base\": \"sub\", \"shardlist\": [{\"url\": \"q.tar\", \"nsamples\": 2}]},"
		"               {\"shardlist\": [{\"url\": \"r.tar\", \"nsamples\": 3}]}]}");

	assert_int_equal(w->n, 3);
	assert_string_equal(w->v[0].url, "https://data.example/mirror/p.tar");
	assert_string_equal(w->v[1].url, "https://data.example/mirror/sub/q.tar");
	assert_string_equal(w->v[2].url, "https://data.example/mirror/r.tar");
	assert_string_equal(w->root, "https://data.example/mirror/");
	assert_string_equal(w->v[1].name, "sub/q.tar");
	bfs_wids_free(w);
}

static void test_wids_refuses_what_batchfs_cannot_read(void **state)
{
	refused("[1, 2]", "not a JSON object");
	refused("{\"wids_version\": 1, \"shardlist\": [", "not JSON");
	refused("{\"__kind__\": \"other\", \"wids_version\": 1, \"shardlist\": []}",
		"\"__kind__\" is other");
	refused("{\"shardlist\": [{\"url\": \"a.tar\", \"nsamples\": 1}]}",
		"\"wids_version\" is missing");
	refused("{\"wids_version\": 2, \"shardlist\": []}", "not 1");
	refused("{\"wids_version\": 1, \"shardlist\": []}", "no shards");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"nsamples\": 1}]}", "no \"url\"");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"url\": \"a\", \"nsamples\": 1.5}]}",
		"\"nsamples\"");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"url\": \"a\", \"nsamples\": -1}]}",
		"\"nsamples\"");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"url\": \"a\", \"nsamples\": 1, \"filesize\": \"9\"}]}",
		"\"filesize\"");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"url\": \"s3://b/a.tar\", \"nsamples\": 1}]}",
		"not http:// or https://");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"url\": \"a.tar\", \"nsamples\": 1},"
		"{\"url\": \"./a.tar\", \"nsamples\": 1}]}", "listed twice");
	refused("{\"wids_version\": 1, \"shardlist\": [{\"url\": \"a.tar\", \"nsamples\": 1},"
		"{\"url\": \"https://other.example/a.tar\", \"nsamples\": 1}]}", "more than one host");
	refused("{\"wids_version\": 1, \"datasets\": [{\"source_url\": \"x.json\"}]}",
		"does not fetch");
	refused("{\"wids_version\": 1, \"shardlist\": {\"url\": \"a\"}}", "not a list");
}

static void test_wids_index_urls_are_told_by_their_look(void **state)
{
	assert_true(bfs_wids_is_index_url("https://h/p/index.json"));
	assert_true(bfs_wids_is_index_url("http://h/p/Index.JSON?x=1"));
	assert_false(bfs_wids_is_index_url("https://h/p/shard-{0..3}.json"));
	assert_false(bfs_wids_is_index_url("s3://b/p/index.json"));
	assert_false(bfs_wids_is_index_url("https://h/p/shard.tar"));
	assert_false(bfs_wids_is_index_url("/local/index.json"));
}

static void test_wids_check_names_the_shards_whose_counts_disagree(void **state)
{
	bfs_wids *w = parse(
		"{\"wids_version\": 1, \"shardlist\": ["
		"{\"url\": \"a.tar\", \"nsamples\": 3}, {\"url\": \"b.tar\", \"nsamples\": 4},"
		"{\"url\": \"c.tar\", \"nsamples\": 5}]}");
	const char *names[] = { "a.tar", "b.tar", "c.tar" };
	uint64_t good[] = { 3, 4, 5 }, off[] = { 3, 9, 5 };
	char note[256];

	assert_int_equal(bfs_wids_check(w, names, good, 3, note, sizeof(note)), 0);
	assert_string_equal(note, "");
	assert_int_equal(bfs_wids_check(w, names, off, 3, note, sizeof(note)), 1);
	assert_string_equal(note, "b.tar holds 9 samples, the wids index says 4");
	/* a shard the source does not have holds nothing */
	assert_int_equal(bfs_wids_check(w, names, off, 2, note, sizeof(note)), 2);
	assert_non_null(strstr(note, "; 2 shards disagree"));
	bfs_wids_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wids_index_as_widsindex_writes_it),
		cmocka_unit_test(test_wids_urls_resolve_as_wids_resolves_them),
		cmocka_unit_test(test_wids_base_and_datasets_are_followed),
		cmocka_unit_test(test_wids_refuses_what_batchfs_cannot_read),
		cmocka_unit_test(test_wids_index_urls_are_told_by_their_look),
		cmocka_unit_test(test_wids_check_names_the_shards_whose_counts_disagree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
