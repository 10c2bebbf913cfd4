/*
 * test_indexes.c - the shard indexes in front of the scan (fs/indexes.h):
 * what a capture writes serves a later open from the sidecar alone; an
 * entry is used only for the shard it was written for and never gives
 * other bytes; the cache comes first and keeps what the sidecar gave; an
 * index the source turns down is counted as scanned; a sidecar for other
 * options is told apart; a remote source's sidecar is matched by the
 * listing's ETag and spares every fetch.  Real TFRecord shards, a real
 * LMDB cache, a shard cache over the storage layer's folder kind.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "cache/cache.h"
#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/formats/sidecar.h"
#include "engine/formats/tfrecord.h"
#include "engine/source.h"
#include "engine/storage/shardcache.h"
#include "engine/storage/storage.h"
#include "fs/indexes.h"

#define NSHARDS 3
#define PER 4

/* dir/sK.tfrecord: PER records, label 10 K + i, image bytes by seed. */
static void put_shard(const char *dir, int k, int seed)
{
	char path[256];
	bfs_example_builder *b;
	int fd;

	snprintf(path, sizeof(path), "%s/s%d.tfrecord", dir, k);
	unlink(path); /* a new file: another inode */
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(bfs_example_builder_create(&b), 0);
	for (int i = 0; i < PER; i++) {
		uint8_t img[100];
		const uint8_t *ex;
		size_t len;

		memset(img, seed * 7 + i, sizeof(img));
		bfs_example_builder_reset(b);
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", img,
							       20 + (size_t)((i + seed) % 5) * 10), 0);
		assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label",
							       10 * k + i), 0);
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/class/synset", "n", 1), 0);
		assert_int_equal(bfs_example_builder_finish(b, &ex, &len), 0);
		assert_int_equal(bfs_tfrecord_write(fd, ex, len), 0);
	}
	bfs_example_builder_destroy(b);
	assert_int_equal(close(fd), 0);
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static int setup(void **state)
{
	char *dir = malloc(64);

	strcpy(dir, "/tmp/bfs-indexes-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	for (int k = 0; k < NSHARDS; k++)
		put_shard(dir, k, k);
	*state = dir;
	return 0;
}

static int teardown(void **state)
{
	int err = nftw(*state, remove_one, 16, FTW_DEPTH | FTW_PHYS);

	free(*state);
	return err;
}

/* Open dir's source through x; its counts in *st. */
static bfs_source *open_through(const char *dir, const bfs_indexes_opts *xo,
				const char *label_key, bfs_indexes_stats *st)
{
	bfs_source_opts so = { .dir = dir, .label_key = label_key, .skip_dali = 1 };
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_indexes *x;
	bfs_source *s = NULL;
	int err;

	assert_int_equal(bfs_indexes_create(xo, &x), 0);
	bfs_indexes_wire(x, &so);
	if ((err = bfs_source_open(&so, &s, msg)))
		fail_msg("bfs_source_open: %s: %s", bfs_strerror(err), msg);
	bfs_indexes_get_stats(x, st);
	bfs_indexes_destroy(x);
	return s;
}

/* The sidecar a capture of dir writes (with label_key), in *data. */
static bfs_sidecar *capture(const char *dir, const char *label_key, void **data)
{
	bfs_sidecar_writer *w;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats st;
	bfs_sidecar_info info = { .format = BFS_SIDECAR_TFRECORD, .label_key = label_key };
	bfs_sidecar *sc;
	size_t len;

	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	xo.capture = w;
	bfs_source_close(open_through(dir, &xo, label_key, &st));
	assert_int_equal(st.captured, NSHARDS);
	assert_int_equal(bfs_sidecar_writer_finish(w, &info, data, &len), 0);
	bfs_sidecar_writer_destroy(w);
	assert_int_equal(bfs_sidecar_open(*data, len, &sc, NULL), 0);
	assert_int_equal(bfs_sidecar_count(sc), NSHARDS);
	return sc;
}

/* Every sample of a and b: the same label and bytes. */
static void same_samples(bfs_source *a, bfs_source *b)
{
	assert_int_equal(bfs_source_count(a), bfs_source_count(b));
	for (uint64_t i = 0; i < bfs_source_count(a); i++) {
		char msg[BFS_ERRMSG_MAX];
		bfs_buf ba = { 0 }, bb = { 0 };
		const uint8_t *ja, *jb;
		size_t la, lb;
		int64_t xa, xb;

		assert_int_equal(bfs_source_read(a, i, &ba, &ja, &la, &xa, msg), 0);
		assert_int_equal(bfs_source_read(b, i, &bb, &jb, &lb, &xb, msg), 0);
		assert_int_equal(xa, xb);
		assert_int_equal(la, lb);
		assert_memory_equal(ja, jb, la);
		bfs_buf_free(&ba);
		bfs_buf_free(&bb);
	}
}

static void test_indexes_a_captured_sidecar_serves_every_shard_without_a_scan(void **state)
{
	const char *dir = *state;
	bfs_indexes_opts none = { 0 }, xo = { 0 };
	bfs_indexes_stats st;
	void *data;
	bfs_sidecar *sc = capture(dir, NULL, &data);
	bfs_source *scanned = open_through(dir, &none, NULL, &st), *s;

	xo.sidecar = sc;
	s = open_through(dir, &xo, NULL, &st);
	assert_int_equal(st.from_sidecar, NSHARDS);
	assert_int_equal(st.from_store + st.sidecar_stale + st.sidecar_missing + st.refused, 0);
	assert_int_equal(bfs_source_nindex_hits(s), NSHARDS);
	assert_int_equal(bfs_source_nclasses(s), 10 * (NSHARDS - 1) + PER);
	same_samples(scanned, s);
	bfs_source_close(s);
	bfs_source_close(scanned);
	bfs_sidecar_close(sc);
	free(data);
}

static void test_indexes_a_shard_replaced_since_the_sidecar_is_scanned(void **state)
{
	const char *dir = *state;
	bfs_indexes_opts none = { 0 }, xo = { 0 };
	bfs_indexes_stats st;
	void *data;
	bfs_sidecar *sc = capture(dir, NULL, &data);
	bfs_source *scanned, *s;

	put_shard(dir, 1, 9); /* other records at other offsets */
	scanned = open_through(dir, &none, NULL, &st);
	xo.sidecar = sc;
	s = open_through(dir, &xo, NULL, &st);
	assert_int_equal(st.from_sidecar, NSHARDS - 1);
	assert_int_equal(st.sidecar_stale, 1);
	assert_int_equal(bfs_source_nindex_hits(s), NSHARDS - 1);
	same_samples(scanned, s);
	bfs_source_close(s);
	bfs_source_close(scanned);
	bfs_sidecar_close(sc);
	free(data);
}

static void test_indexes_a_new_shard_is_missing_from_the_sidecar(void **state)
{
	const char *dir = *state;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats st;
	void *data;
	bfs_sidecar *sc = capture(dir, NULL, &data);

	put_shard(dir, NSHARDS, 3);
	xo.sidecar = sc;
	bfs_source_close(open_through(dir, &xo, NULL, &st));
	assert_int_equal(st.from_sidecar, NSHARDS);
	assert_int_equal(st.sidecar_missing, 1);
	bfs_sidecar_close(sc);
	free(data);
}

/* Entries read for another label key: the source turns each down and
 * scans; they count as scanned, not as used. */
static void test_indexes_an_entry_the_source_turns_down_counts_as_scanned(void **state)
{
	const char *dir = *state;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats st;
	void *data;
	bfs_sidecar *sc = capture(dir, "none", &data);
	bfs_source *s;

	xo.sidecar = sc;
	s = open_through(dir, &xo, NULL, &st);
	assert_int_equal(st.from_sidecar, 0);
	assert_int_equal(st.refused, NSHARDS);
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	bfs_source_close(s);
	bfs_sidecar_close(sc);
	free(data);
}

/* The cache is asked first; what the sidecar gives goes into it, so the
 * node's next open needs no sidecar. */
static void test_indexes_the_cache_comes_first_and_keeps_what_the_sidecar_gave(void **state)
{
	const char *dir = *state;
	char cdir[300], msg[BFS_ERRMSG_MAX];
	bfs_cache_opts co = { 0 };
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats st;
	bfs_cache *c;
	void *data;
	bfs_sidecar *sc = capture(dir, NULL, &data);

	snprintf(cdir, sizeof(cdir), "%s/cache", dir);
	co.dir = cdir;
	co.fingerprint = "0123456789abcdef";
	co.max_bytes = 64ull << 20;
	assert_int_equal(bfs_cache_open(&co, &c, msg), 0);
	xo.cache = c;
	xo.sidecar = sc;
	bfs_source_close(open_through(dir, &xo, NULL, &st));
	assert_int_equal(st.from_sidecar, NSHARDS);
	assert_int_equal(bfs_cache_flush(c), 0);
	xo.sidecar = NULL;
	bfs_source_close(open_through(dir, &xo, NULL, &st));
	assert_int_equal(st.from_store, NSHARDS);
	xo.sidecar = sc;
	bfs_source_close(open_through(dir, &xo, NULL, &st));
	assert_int_equal(st.from_store, NSHARDS);
	assert_int_equal(st.from_sidecar, 0);
	bfs_cache_close(c);
	bfs_sidecar_close(sc);
	free(data);
}

/* A capture over a sidecar keeps its fitting entries (a rerun of
 * batchfs index) and replaces one the source turned down. */
static void test_indexes_a_capture_over_a_sidecar_keeps_what_fits(void **state)
{
	const char *dir = *state;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats st;
	bfs_sidecar_writer *w;
	void *data;
	bfs_sidecar *sc = capture(dir, NULL, &data);

	put_shard(dir, 2, 7);
	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	xo.sidecar = sc;
	xo.capture = w;
	bfs_source_close(open_through(dir, &xo, NULL, &st));
	assert_int_equal(st.from_sidecar, NSHARDS - 1);
	assert_int_equal(st.sidecar_stale, 1);
	assert_int_equal(st.captured, NSHARDS);
	assert_int_equal(bfs_sidecar_writer_count(w), NSHARDS);
	bfs_sidecar_writer_destroy(w);
	bfs_sidecar_close(sc);
	free(data);
}

/* A source may ask twice for one shard (a remote source first asks which
 * shards it need not fetch): each shard counts once, by its first answer. */
static void test_indexes_a_shard_asked_for_twice_counts_once(void **state)
{
	const char *dir = *state;
	bfs_indexes_opts xo = { 0 };
	bfs_source_opts so = { 0 };
	bfs_indexes_stats st;
	bfs_indexes *x;
	bfs_shard_stamp stamp;
	struct stat sb;
	char path[300];
	void *data, *blob;
	size_t len;
	bfs_sidecar *sc = capture(dir, NULL, &data);

	snprintf(path, sizeof(path), "%s/s0.tfrecord", dir);
	assert_int_equal(stat(path, &sb), 0);
	stamp.size = (uint64_t)sb.st_size;
	stamp.mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	stamp.ino = sb.st_ino;
	stamp.ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec;
	xo.sidecar = sc;
	assert_int_equal(bfs_indexes_create(&xo, &x), 0);
	bfs_indexes_wire(x, &so);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(so.index_get(so.index_ctx, dir, "s0.tfrecord", &stamp, &blob, &len), 0);
		free(blob);
		assert_int_equal(so.index_get(so.index_ctx, dir, "new.tfrecord", &stamp, &blob, &len), -ENOENT);
	}
	bfs_indexes_get_stats(x, &st);
	assert_int_equal(st.from_sidecar, 1);
	assert_int_equal(st.sidecar_missing, 1);
	bfs_indexes_destroy(x);
	bfs_sidecar_close(sc);
	free(data);
}

static void test_indexes_reads_a_local_sidecar_or_says_why_not(void **state)
{
	const char *dir = *state;
	char why[512] = "", path[300];
	void *data;
	size_t len;

	assert_int_equal(bfs_indexes_read_local(dir, &data, &len, why, sizeof(why)), -ENOENT);
	assert_string_equal(why, "");
	snprintf(path, sizeof(path), "%s/%s", dir, BFS_SIDECAR_NAME);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_true(bfs_indexes_read_local(dir, &data, &len, why, sizeof(why)) < 0);
	assert_non_null(strstr(why, BFS_SIDECAR_NAME));
	assert_int_equal(rmdir(path), 0);
}

static void test_indexes_tells_a_sidecar_for_other_options(void **state)
{
	const char *dir = *state;
	char why[256];
	void *data;
	bfs_sidecar *sc = capture(dir, NULL, &data);

	assert_int_equal(bfs_indexes_sidecar_mismatch(sc, BFS_FORMAT_AUTO, NULL, 1, why, sizeof(why)), 0);
	assert_int_equal(bfs_indexes_sidecar_mismatch(sc, BFS_FORMAT_TFRECORD,
						      "image/class/label", 1, why, sizeof(why)), 0);
	assert_int_equal(bfs_indexes_sidecar_mismatch(sc, BFS_FORMAT_TAR, NULL, 0, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "TFRecord"));
	assert_int_equal(bfs_indexes_sidecar_mismatch(sc, BFS_FORMAT_AUTO, "other", 0, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "--label-key (the default), not other"));
	/* none reads no class names: any key's index serves it, but a new
	 * sidecar written with none must not claim another key's entries */
	assert_int_equal(bfs_indexes_sidecar_mismatch(sc, BFS_FORMAT_AUTO, "none", 0, why, sizeof(why)), 0);
	assert_int_equal(bfs_indexes_sidecar_mismatch(sc, BFS_FORMAT_AUTO, "none", 1, why, sizeof(why)), 1);
	bfs_sidecar_close(sc);
	free(data);
}

/* ---- a remote source: the storage layer over the test's folder ---- */

struct remote {
	bfs_storage *st;
	bfs_shardcache *sc;
};

/* The folder as a remote source would list it, with a fresh shard cache
 * in dir/.sc-N (hidden: not one of the folder's objects). */
static void remote_open(struct remote *r, const char *dir, int n)
{
	bfs_storage_opts so = { 0 };
	bfs_shardcache_opts co = { .fetchers = 2, .max_bytes = 64ull << 20 };
	char msg[BFS_ERRMSG_MAX] = "", sc[300];

	snprintf(sc, sizeof(sc), "%s/.sc-%d", dir, n);
	co.dir = sc;
	assert_int_equal(bfs_storage_open(dir, &so, &r->st, msg), 0);
	if (bfs_shardcache_open(r->st, &co, &r->sc, msg))
		fail_msg("shard cache: %s", msg);
}

static void remote_close(struct remote *r)
{
	bfs_shardcache_close(r->sc);
	bfs_storage_close(r->st);
}

/* The remote source through indexes over xo (its identity the listing's
 * ETag); counts in *st. */
static bfs_source *open_remote(struct remote *r, bfs_indexes_opts xo,
			       bfs_indexes_stats *st)
{
	bfs_source_opts so = { .shards = r->sc, .skip_dali = 1 };
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_indexes *x;
	bfs_source *s = NULL;
	int err;

	xo.identity = bfs_indexes_remote_identity;
	xo.identity_ctx = r->sc;
	assert_int_equal(bfs_indexes_create(&xo, &x), 0);
	bfs_indexes_wire(x, &so);
	if ((err = bfs_source_open(&so, &s, msg)))
		fail_msg("bfs_source_open: %s: %s", bfs_strerror(err), msg);
	bfs_indexes_get_stats(x, st);
	bfs_indexes_destroy(x);
	return s;
}

static void test_indexes_a_remote_sidecar_is_matched_by_etag_and_spares_every_fetch(void **state)
{
	const char *dir = *state;
	struct remote r1, r2, r3;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats st;
	bfs_shardcache_stats ss;
	bfs_sidecar_info info = { .format = BFS_SIDECAR_TFRECORD };
	bfs_sidecar_writer *w;
	bfs_sidecar_id id;
	bfs_sidecar *sc;
	bfs_source *a, *b, *local;
	const char *name;
	void *data;
	size_t len;

	/* batchfs index of the remote source: every shard fetched, scanned,
	 * its entry made of the listing's ETag */
	remote_open(&r1, dir, 1);
	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	xo.capture = w;
	a = open_remote(&r1, xo, &st);
	assert_int_equal(st.captured, NSHARDS);
	assert_int_equal(bfs_sidecar_writer_finish(w, &info, &data, &len), 0);
	bfs_sidecar_writer_destroy(w);
	assert_int_equal(bfs_sidecar_open(data, len, &sc, NULL), 0);
	assert_int_equal(bfs_sidecar_entry(sc, 0, &name, &id), 0);
	assert_string_equal(name, "s0.tfrecord");
	assert_int_equal(id.kind, BFS_SIDECAR_ID_ETAG);
	assert_int_equal(id.etag[0], '"');
	bfs_shardcache_get_stats(r1.sc, &ss);
	assert_int_equal(ss.fetched, NSHARDS);

	/* a mount with an empty shard cache: every index from the sidecar,
	 * no shard fetched, the bytes a local open reads */
	remote_open(&r2, dir, 2);
	memset(&xo, 0, sizeof(xo));
	xo.sidecar = sc;
	b = open_remote(&r2, xo, &st);
	assert_int_equal(st.from_sidecar, NSHARDS);
	assert_int_equal(st.sidecar_stale + st.sidecar_missing + st.unproven, 0);
	bfs_shardcache_get_stats(r2.sc, &ss);
	assert_int_equal(ss.fetched + ss.range_reads, 0);
	memset(&xo, 0, sizeof(xo));
	local = open_through(dir, &xo, NULL, &st);
	same_samples(local, b);
	bfs_source_close(local);
	bfs_source_close(b);
	bfs_source_close(a);

	/* a shard replaced since: its ETag no longer the entry's, it alone
	 * is fetched and scanned, and its new bytes are served */
	put_shard(dir, 1, 9);
	remote_open(&r3, dir, 3);
	xo.sidecar = sc;
	b = open_remote(&r3, xo, &st);
	assert_int_equal(st.from_sidecar, NSHARDS - 1);
	assert_int_equal(st.sidecar_stale, 1);
	bfs_shardcache_get_stats(r3.sc, &ss);
	assert_int_equal(ss.fetched, 1);
	memset(&xo, 0, sizeof(xo));
	local = open_through(dir, &xo, NULL, &st);
	same_samples(local, b);
	bfs_source_close(local);
	bfs_source_close(b);
	remote_close(&r1);
	remote_close(&r2);
	remote_close(&r3);
	bfs_sidecar_close(sc);
	free(data);
}

static void test_indexes_a_remote_identity_is_the_listing_s_size_and_etag(void **state)
{
	const char *dir = *state;
	struct remote r;
	bfs_sidecar_id id;
	const bfs_storage_object *o;
	bfs_shard_stamp stamp = { 0 };

	remote_open(&r, dir, 1);
	o = bfs_shardcache_object(r.sc, (size_t)bfs_shardcache_find(r.sc, "s2.tfrecord"));
	assert_int_equal(bfs_indexes_remote_identity(r.sc, "s2.tfrecord", &stamp, &id), 0);
	assert_int_equal(id.kind, BFS_SIDECAR_ID_ETAG);
	assert_int_equal(id.size, o->size);
	assert_string_equal(id.etag, o->etag);
	assert_int_equal(bfs_indexes_remote_identity(r.sc, "nothing.tfrecord", &stamp, &id),
			 -ENOENT);
	remote_close(&r);
}

/* A remote source's sidecar: the listing's object when it lists it, else
 * asked for by name (the folder kind: stat), none when absent. */
static void test_indexes_reads_a_remote_sidecar_or_says_there_is_none(void **state)
{
	const char *dir = *state;
	char why[512] = "", path[300];
	struct remote r;
	void *data;
	size_t len;
	FILE *f;

	remote_open(&r, dir, 1);
	assert_int_equal(bfs_indexes_read_remote(r.sc, &data, &len, why, sizeof(why)), -ENOENT);
	assert_string_equal(why, "");
	snprintf(path, sizeof(path), "%s/%s", dir, BFS_SIDECAR_NAME);
	assert_non_null(f = fopen(path, "wb"));
	assert_int_equal(fwrite("BFSSIDEC", 1, 8, f), 8);
	fclose(f);
	assert_int_equal(bfs_indexes_read_remote(r.sc, &data, &len, why, sizeof(why)), 0);
	assert_int_equal(len, 8);
	assert_memory_equal(data, "BFSSIDEC", 8);
	free(data);
	remote_close(&r);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_indexes_a_captured_sidecar_serves_every_shard_without_a_scan),
		T(test_indexes_a_shard_replaced_since_the_sidecar_is_scanned),
		T(test_indexes_a_new_shard_is_missing_from_the_sidecar),
		T(test_indexes_an_entry_the_source_turns_down_counts_as_scanned),
		T(test_indexes_the_cache_comes_first_and_keeps_what_the_sidecar_gave),
		T(test_indexes_a_capture_over_a_sidecar_keeps_what_fits),
		T(test_indexes_a_shard_asked_for_twice_counts_once),
		T(test_indexes_reads_a_local_sidecar_or_says_why_not),
		T(test_indexes_tells_a_sidecar_for_other_options),
		T(test_indexes_a_remote_sidecar_is_matched_by_etag_and_spares_every_fetch),
		T(test_indexes_a_remote_identity_is_the_listing_s_size_and_etag),
		T(test_indexes_reads_a_remote_sidecar_or_says_there_is_none),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
