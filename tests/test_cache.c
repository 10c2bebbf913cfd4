/*
 * test_cache.c - the LMDB sample cache without FUSE: round trips, misses
 * for other settings and changed shards, persistence, sharing between
 * handles and processes, CRC detection and replacement, the size limit
 * under pressure, a full file system, kill -9 during writes, the index
 * cache, the queue, clear/verify/listing, and read speed.
 *
 * Every test makes its own directory under /tmp and removes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <lmdb.h>

#include "cache/cache.h"
#include "cache/cache_internal.h" /* bfs__run_isolated */

#define FP_A "0123456789abcdef"
#define FP_B "fedcba9876543210"
#define SRC "/data/shards"
#define SMALL 12288           /* a 64x64x3 float32 sample */
#define SHARD_INO 4242        /* the inode number and ctime of every shard */
#define SHARD_CTIME 1700000000123456789ll
/* A shard stamp: size and mtime as given, inode and ctime as above. */
#define ST(size, mtime) (&(bfs_shard_stamp){ (size), (mtime), SHARD_INO, SHARD_CTIME })
#define BIG 602112            /* a 224x224x3 float32 sample */

/* ---- helpers ------------------------------------------------------------ */

static void make_dir(char *dir)
{
	strcpy(dir, "/tmp/bfs-cache-XXXXXX");
	assert_non_null(mkdtemp(dir));
}

/* A damaged data.mdb moved aside by an open: its name, or "" if none. */
static void damaged_copy(const char *dir, char *name, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	name[0] = '\0';
	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, "data.mdb.damaged-", 17))
			snprintf(name, cap, "%s", de->d_name);
	if (d)
		closedir(d);
}

static void remove_dir(const char *dir)
{
	static const char *const files[] = { "data.mdb", "lock.mdb",
					     "users.lock", "writer.lock",
					     "damaged" };
	char p[512], name[256];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		unlink(p);
	}
	damaged_copy(dir, name, sizeof(name));
	if (name[0]) {
		snprintf(p, sizeof(p), "%s/%s", dir, name);
		unlink(p);
	}
	assert_int_equal(rmdir(dir), 0);
}

static bfs_cache *open_cache(const char *dir, const char *fp,
			     uint64_t max_bytes)
{
	bfs_cache_opts o = { 0 };
	bfs_cache *c = NULL;
	char msg[BFS_ERRMSG_MAX] = "";
	int err;

	o.dir = dir;
	o.fingerprint = fp;
	o.max_bytes = max_bytes ? max_bytes : 64ull << 20;
	err = bfs_cache_open(&o, &c, msg);
	if (err)
		fail_msg("bfs_cache_open(%s): %s: %s", dir, bfs_strerror(err), msg);
	return c;
}

static bfs_cache_key key_for(const char *fp, const char *shard,
			     int64_t mtime, uint64_t offset)
{
	bfs_sample_identity id = { shard, 1000000, mtime, offset, 5000, SHARD_INO, SHARD_CTIME };
	bfs_cache_key k;

	assert_int_equal(bfs_cache_key_make(&k, fp, SRC, &id), 0);
	return k;
}

/* Bytes that depend on seed everywhere. */
static void pattern(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (uint8_t)(x >> ((i & 7) * 8));
	}
}

static void count_done(void *ctx)
{
	__atomic_add_fetch((int *)ctx, 1, __ATOMIC_SEQ_CST);
}

/* Insert items keyed FP/shard/mtime 1/offset i for i in [from, to), data
 * pattern(i), label i, `per` per submission, waiting for each. */
static void put_range(bfs_cache *c, const char *fp, const char *shard,
		      int from, int to, size_t len, int per)
{
	bfs_cache_item *items = calloc((size_t)per, sizeof(*items));
	uint8_t *data = malloc(len * (size_t)per);

	for (int i = from; i < to; i += per) {
		int n = to - i < per ? to - i : per, done = 0;

		for (int j = 0; j < n; j++) {
			items[j].key = key_for(fp, shard, 1, (uint64_t)(i + j));
			items[j].label = i + j;
			items[j].data = data + (size_t)j * len;
			items[j].len = len;
			pattern(data + (size_t)j * len, len, (uint64_t)(i + j));
		}
		bfs_cache_submit(c, items, (size_t)n, count_done, &done);
		bfs_cache_flush(c);
		assert_int_equal(done, 1);
	}
	free(items);
	free(data);
}

/* get offset i and compare with pattern(i): 0 hit and equal, else code */
static int get_check(bfs_cache_reader *r, const char *fp, const char *shard,
		     uint64_t i, size_t len)
{
	bfs_cache_key k = key_for(fp, shard, 1, i);
	uint8_t *got = malloc(len), *want = malloc(len);
	int64_t label = -1;
	int err = bfs_cache_get(r, &k, got, len, &label);

	if (err == 0) {
		pattern(want, len, i);
		assert_memory_equal(got, want, len);
		assert_int_equal(label, (int64_t)i);
	}
	free(got);
	free(want);
	return err;
}

static uint64_t file_size(const char *dir, const char *name)
{
	char p[256];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- round trips and keys ----------------------------------------------------- */

static void test_cache_get_returns_the_bytes_and_label_that_were_put(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a.tfrecord", 0, 10, SMALL, 4);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(get_check(r, FP_A, "a.tfrecord", (uint64_t)i, SMALL), 0);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.hits, 10);
	assert_int_equal(st.inserts, 10);
	assert_int_equal(st.entries, 10);
	assert_true(st.file_bytes <= st.map_bytes);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_get_of_an_unknown_key_is_a_counted_miss(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_key k = key_for(FP_A, "a.tfrecord", 1, 42);
	bfs_cache_stats st;
	uint8_t buf[16];
	int64_t label = 7;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, sizeof(buf), &label), -ENOENT);
	assert_int_equal(label, 7);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.hits, 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_has_says_what_is_stored_without_counting(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	bfs_cache_key in, out;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a.tfrecord", 0, 3, SMALL, 4);
	in = key_for(FP_A, "a.tfrecord", 1, 2);
	out = key_for(FP_A, "a.tfrecord", 1, 99);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(bfs_cache_has(r, &in), 1);
	assert_int_equal(bfs_cache_has(r, &out), 0);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.misses, 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_misses_for_another_fingerprint_mtime_size_or_path(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	uint8_t buf[SMALL];
	int64_t label;
	bfs_sample_identity id = { "a.tfrecord", 1000000, 1, 3, 5000, SHARD_INO, SHARD_CTIME };
	bfs_cache_key k;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a.tfrecord", 0, 5, SMALL, 5);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	k = key_for(FP_A, "a.tfrecord", 1, 3);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), 0);
	k = key_for(FP_B, "a.tfrecord", 1, 3);          /* other settings */
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	k = key_for(FP_A, "a.tfrecord", 2, 3);          /* shard touched */
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	id.shard_size = 1000001;                        /* shard grew */
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	id.shard_size = 1000000;                        /* another directory */
	assert_int_equal(bfs_cache_key_make(&k, FP_A, "/data/other", &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC "/", &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), 0);
	/* a different record length at the same offset: check differs */
	id.length = 5001;
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* A shard rewritten at the same size with its mtime set back (touch -d,
 * rsync -t) keeps size and mtime: its ctime, or the inode number of a
 * replacement, must still give its samples new keys. */
static void test_cache_misses_for_another_inode_or_ctime(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	uint8_t buf[SMALL];
	int64_t label;
	bfs_sample_identity id = { "a.tfrecord", 1000000, 1, 3, 5000,
				   SHARD_INO, SHARD_CTIME };
	bfs_cache_key k;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a.tfrecord", 0, 5, SMALL, 5);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), 0);
	id.shard_ctime_ns = SHARD_CTIME + 1;            /* rewritten in place */
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	id.shard_ctime_ns = SHARD_CTIME;
	id.shard_ino = SHARD_INO + 1;                   /* replaced by a copy */
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	id.shard_ino = SHARD_INO;
	assert_int_equal(bfs_cache_key_make(&k, FP_A, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_get_with_a_wrong_length_is_einval(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_key k = key_for(FP_A, "a", 1, 0);
	uint8_t buf[SMALL * 2];
	int64_t label;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a", 0, 1, SMALL, 1);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL * 2, &label), -EINVAL);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* Samples of their own sizes (RandomResizedCrop's reduced copies): the
 * shape comes back with the bytes, and a buffer too small is told how
 * large the sample is. */
static void test_cache_shaped_get_gives_back_length_and_shape(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_item it[3];
	bfs_store_shape shape;
	uint8_t *data[3], *got = malloc(3000);
	size_t lens[3] = { 1200, 3000, 7 }, len = 0;
	int64_t label = -1;
	int done = 0;

	assert_non_null(got);
	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	for (int i = 0; i < 3; i++) {
		data[i] = malloc(lens[i]);
		assert_non_null(data[i]);
		pattern(data[i], lens[i], (uint64_t)i + 50);
		it[i] = (bfs_cache_item){ .key = key_for(FP_A, "v", 1, (uint64_t)i),
					  .label = 10 + i, .data = data[i], .len = lens[i],
					  .shape = { (uint32_t)(20 + i), (uint32_t)(30 + i),
						     (uint32_t)(200 + i), (uint32_t)(300 + i) } };
	}
	assert_int_equal(bfs_cache_submit(c, it, 3, count_done, &done), 0);
	bfs_cache_flush(c);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 3; i++) {
		bfs_cache_key k = key_for(FP_A, "v", 1, (uint64_t)i);

		/* too small: says how large, copies nothing */
		memset(got, 0xAA, 3000);
		len = 0;
		assert_int_equal(bfs_cache_get_shaped(r, &k, got, lens[i] - 1, &len, &shape, &label),
				 -ENOBUFS);
		assert_int_equal(len, lens[i]);
		assert_int_equal(got[0], 0xAA);
		/* with room: bytes, length, shape and label */
		assert_int_equal(bfs_cache_get_shaped(r, &k, got, 3000, &len, &shape, &label), 0);
		assert_int_equal(len, lens[i]);
		assert_memory_equal(got, data[i], lens[i]);
		assert_int_equal(label, 10 + i);
		assert_int_equal(shape.h, 20 + i);
		assert_int_equal(shape.w, 30 + i);
		assert_int_equal(shape.src_h, 200 + i);
		assert_int_equal(shape.src_w, 300 + i);
		/* the exact get still wants the exact length */
		assert_int_equal(bfs_cache_get(r, &k, got, 3000, &label), lens[i] == 3000 ? 0 : -EINVAL);
	}
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
	for (int i = 0; i < 3; i++)
		free(data[i]);
	free(got);
}

/* A cache written by another batchfs cache format (3: values without a
 * shape) is not read: the open replaces it with an empty one. */
static void test_cache_of_an_older_format_is_replaced_at_open(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi meta;
	uint32_t old = 3;
	MDB_val k = { 6, "format" }, v = { 4, &old };

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "o", 0, 4, SMALL, 4);
	bfs_cache_close(c);
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
	assert_int_equal(mdb_env_set_mapsize(env, 64ull << 20), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
	assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);

	c = open_cache(dir, FP_A, 0);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "o", 1, SMALL), -ENOENT);
	put_range(c, FP_A, "o", 0, 1, SMALL, 1);
	assert_int_equal(get_check(r, FP_A, "o", 0, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_key_and_options_reject_bad_input(void **s)
{
	bfs_sample_identity id = { "a", 1, 1, 0, 1, SHARD_INO, SHARD_CTIME };
	bfs_cache_key k;
	bfs_cache_opts o = { 0 };
	bfs_cache *c = (bfs_cache *)1;
	char dir[64], msg[BFS_ERRMSG_MAX];

	assert_int_equal(bfs_cache_key_make(&k, "0123", SRC, &id), -EINVAL);
	assert_int_equal(bfs_cache_key_make(&k, "0123456789abcdeg", SRC, &id), -EINVAL);
	assert_int_equal(bfs_cache_key_make(&k, FP_A, NULL, &id), -EINVAL);
	assert_int_equal(bfs_cache_key_make(&k, "0123456789ABCDEF", SRC, &id), 0);
	make_dir(dir);
	o.dir = dir;
	assert_int_equal(bfs_cache_open(&o, &c, msg), -EINVAL); /* no fp */
	assert_null(c);
	o.fingerprint = FP_A;
	o.max_bytes = 4096;
	assert_int_equal(bfs_cache_open(&o, &c, msg), -EINVAL); /* too small */
	o.max_bytes = 0;
	o.admin = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), -ENOENT); /* no cache */
	bfs_cache_close(NULL);
	bfs_cache_reader_destroy(NULL);
	rmdir(dir);
}

static void test_cache_fingerprint_folds_in_source_settings(void **s)
{
	char a[17], b[17], c[17];

	assert_int_equal(bfs_cache_fingerprint(a, FP_A, "image_key=image/encoded;label_key=image/class/label"), 0);
	assert_int_equal(bfs_cache_fingerprint(b, FP_A, "image_key=image/thumb;label_key=image/class/label"), 0);
	assert_int_equal(bfs_cache_fingerprint(c, FP_B, "image_key=image/encoded;label_key=image/class/label"), 0);
	assert_int_equal(strlen(a), 16);
	assert_string_not_equal(a, b);
	assert_string_not_equal(a, c);
	assert_int_equal(bfs_cache_fingerprint(b, "0123456789ABCDEF", "image_key=image/encoded;label_key=image/class/label"), 0);
	assert_string_equal(a, b); /* hex case does not matter */
	assert_int_equal(bfs_cache_fingerprint(a, "xyz", ""), -EINVAL);
}

static void test_cache_default_dir_follows_xdg_then_home(void **s)
{
	char buf[256], *old_x = getenv("XDG_CACHE_HOME"), *old_h = getenv("HOME");
	char sx[256] = "", sh[256] = "";

	if (old_x)
		snprintf(sx, sizeof(sx), "%s", old_x);
	if (old_h)
		snprintf(sh, sizeof(sh), "%s", old_h);
	setenv("XDG_CACHE_HOME", "/x/cache", 1);
	assert_int_equal(bfs_cache_default_dir(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/x/cache/batchfs");
	setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, per XDG */
	setenv("HOME", "/home/u", 1);
	assert_int_equal(bfs_cache_default_dir(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/home/u/.cache/batchfs");
	assert_int_equal(bfs_cache_default_dir(buf, 8), -ENAMETOOLONG);
	if (old_x)
		setenv("XDG_CACHE_HOME", sx, 1);
	else
		unsetenv("XDG_CACHE_HOME");
	if (old_h)
		setenv("HOME", sh, 1);
	else
		unsetenv("HOME");
	/* the default size is bounded whatever the disk */
	uint64_t d = bfs_cache_default_size("/tmp/no/such/dir");
	assert_true(d >= BFS_CACHE_DEFAULT_MIN && d <= BFS_CACHE_DEFAULT_MAX);
}

/* ---- persistence and sharing ------------------------------------------------- */

static void test_cache_entries_and_counters_persist_across_reopen(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a", 0, 6, SMALL, 3);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "a", 0, SMALL), 0);
	assert_int_equal(get_check(r, FP_A, "a", 99, SMALL), -ENOENT);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);

	c = open_cache(dir, FP_A, 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(get_check(r, FP_A, "a", (uint64_t)i, SMALL), 0);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 6);
	assert_int_equal(st.total_hits, 1 + 6);  /* persisted + this handle */
	assert_int_equal(st.total_misses, 1);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_two_handles_in_one_process_share_one_env(void **s)
{
	char dir[64];
	bfs_cache *a, *b;
	bfs_cache_reader *rb;

	make_dir(dir);
	a = open_cache(dir, FP_A, 0);
	b = open_cache(dir, FP_A, 0);
	assert_int_equal(bfs_cache_reader_create(b, &rb), 0);
	assert_int_equal(get_check(rb, FP_A, "s", 1, SMALL), -ENOENT);
	put_range(a, FP_A, "s", 0, 4, SMALL, 4);
	/* b's next get renews its snapshot and sees a's commit */
	assert_int_equal(get_check(rb, FP_A, "s", 1, SMALL), 0);
	bfs_cache_close(a);                   /* b keeps the env open */
	assert_int_equal(get_check(rb, FP_A, "s", 2, SMALL), 0);
	put_range(b, FP_A, "s", 4, 6, SMALL, 2);
	assert_int_equal(get_check(rb, FP_A, "s", 5, SMALL), 0);
	bfs_cache_reader_destroy(rb);
	bfs_cache_close(b);
	remove_dir(dir);
}

/* The parent maps 4 MiB; the child, with a larger limit, grows the file
 * past it, so the parent also adopts a map grown by another process.
 * The child is forked before the parent's cache starts its writer thread
 * and waits for it on a pipe: a fork while another thread may hold a lock
 * of the allocator's (ASan's has no fork handler here) can leave the
 * child's first thread waiting on it for ever. */
static void test_cache_child_process_writes_while_parent_reads(void **s)
{
	char dir[64], ch;
	bfs_cache *c;
	bfs_cache_reader *r;
	const int n = 16;
	int status, seen = 0, go[2];
	double deadline;
	pid_t pid;

	make_dir(dir);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bfs_cache *cc;

		close(go[1]);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
		if (read(go[0], &ch, 1) != 1)
			_exit(2);
		cc = open_cache(dir, FP_A, 64ull << 20);
		put_range(cc, FP_A, "p", 0, n, BIG, 2);
		bfs_cache_close(cc);
		_exit(0);
	}
	close(go[0]);
	c = open_cache(dir, FP_A, 4ull << 20);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	deadline = now_s() + 30;
	while (seen < n && now_s() < deadline) {
		seen = 0;
		for (int i = 0; i < n; i++) {
			int err = get_check(r, FP_A, "p", (uint64_t)i, BIG);

			assert_true(err == 0 || err == -ENOENT);
			seen += err == 0;
		}
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(seen, n);
	assert_true(file_size(dir, "data.mdb") > (4ull << 20));
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

struct rthread {
	bfs_cache *c;
	int n, stop, bad, hits;
};

static void *reader_thread(void *arg)
{
	struct rthread *t = arg;
	bfs_cache_reader *r;
	unsigned seed = 1;

	if (bfs_cache_reader_create(t->c, &r)) {
		t->bad = 1;
		return NULL;
	}
	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		uint64_t i = (uint64_t)(rand_r(&seed) % t->n);
		bfs_cache_key k = key_for(FP_A, "t", 1, i);
		uint8_t got[SMALL], want[SMALL];
		int64_t label;
		int err = bfs_cache_get(r, &k, got, SMALL, &label);

		if (err == 0) {
			pattern(want, SMALL, i);
			if (memcmp(got, want, SMALL) || label != (int64_t)i)
				t->bad = 1;
			__atomic_add_fetch(&t->hits, 1, __ATOMIC_RELAXED);
		} else if (err != -ENOENT) {
			t->bad = 1;
		}
	}
	bfs_cache_reader_destroy(r);
	return NULL;
}

static void test_cache_readers_see_only_whole_values_while_the_writer_runs(void **s)
{
	char dir[64];
	pthread_t th[3];
	struct rthread t = { 0 };

	make_dir(dir);
	t.c = open_cache(dir, FP_A, 0);
	t.n = 300;
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, reader_thread, &t);
	put_range(t.c, FP_A, "t", 0, t.n, SMALL, 7);
	__atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(t.bad, 0);
	assert_true(t.hits > 0);
	bfs_cache_close(t.c);
	remove_dir(dir);
}

/* ---- integrity ---------------------------------------------------------------- */

/* Flip one byte of the stored payload of offset `which`, found by its
 * bytes in data.mdb. */
static void corrupt_payload(const char *dir, uint64_t which, size_t len)
{
	char p[256];
	uint8_t *want = malloc(len), *file;
	int fd;
	struct stat st;
	off_t at = -1;

	pattern(want, len, which);
	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	file = malloc((size_t)st.st_size);
	assert_int_equal(pread(fd, file, (size_t)st.st_size, 0), st.st_size);
	for (off_t o = 0; o + 64 <= st.st_size; o++)
		if (!memcmp(file + o, want, 64)) {
			at = o;
			break;
		}
	assert_true(at >= 0);
	file[at + 100] ^= 0x5a;
	assert_int_equal(pwrite(fd, file + at + 100, 1, at + 100), 1);
	close(fd);
	free(file);
	free(want);
}

static void test_cache_corrupt_value_is_a_crc_error_then_gone_then_replaced(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "c", 0, 3, SMALL, 3);
	bfs_cache_close(c);
	corrupt_payload(dir, 1, SMALL);

	c = open_cache(dir, FP_A, 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "c", 0, SMALL), 0);
	assert_int_equal(get_check(r, FP_A, "c", 1, SMALL), BFS_E_CRC);
	bfs_cache_flush(c); /* the writer deletes it */
	assert_int_equal(get_check(r, FP_A, "c", 1, SMALL), -ENOENT);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.crc_errors, 1);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(st.entries, 2);
	/* the caller decodes again and submits: replaced */
	put_range(c, FP_A, "c", 1, 2, SMALL, 1);
	assert_int_equal(get_check(r, FP_A, "c", 1, SMALL), 0);
	assert_int_equal(get_check(r, FP_A, "c", 2, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* ---- references into the map (bfs_cache_get_ref) -------------------------------- */

/* get_ref offset i: 0 with *p, *len, *label, or the code. */
static int get_ref_of(bfs_cache_reader *r, const char *fp, const char *shard, uint64_t i,
		      const uint8_t **p, size_t *len, int64_t *label)
{
	bfs_cache_key k = key_for(fp, shard, 1, i);
	bfs_store_shape shape;
	const void *d = NULL;
	int err = bfs_cache_get_ref(r, &k, &d, len, &shape, label);

	*p = d;
	return err;
}

static void test_cache_get_ref_lends_the_checked_bytes_in_place_until_put_ref(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	bfs_cache_item it = { .label = 9, .len = BIG, .shape = { 10, 20, 30, 40 } };
	bfs_store_shape shape = { 0 };
	uint8_t *data = malloc(BIG), *copy = malloc(BIG);
	const void *p = NULL, *q = NULL;
	size_t len = 0;
	int64_t label = -1;
	int done = 0;

	assert_non_null(data);
	assert_non_null(copy);
	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	pattern(data, BIG, 77);
	it.key = key_for(FP_A, "ref", 1, 0);
	it.data = data;
	assert_int_equal(bfs_cache_submit(c, &it, 1, count_done, &done), 0);
	bfs_cache_flush(c);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(bfs_cache_get_ref(r, &it.key, &p, &len, &shape, &label), 0);
	assert_non_null(p);
	assert_true(p != (const void *)data);
	assert_int_equal(len, BIG);
	assert_memory_equal(p, data, BIG);
	assert_int_equal(label, 9);
	assert_int_equal(shape.h, 10);
	assert_int_equal(shape.w, 20);
	assert_int_equal(shape.src_h, 30);
	assert_int_equal(shape.src_w, 40);
	/* the same bytes a copying get gives */
	assert_int_equal(bfs_cache_get_shaped(r, &it.key, copy, BIG, &len, &shape, &label), 0);
	assert_memory_equal(copy, data, BIG);
	/* asking again gives the first back and lends anew; a miss lends
	 * nothing and leaves *data alone */
	assert_int_equal(bfs_cache_get_ref(r, &it.key, &q, &len, &shape, &label), 0);
	assert_memory_equal(q, data, BIG);
	{
		bfs_cache_key miss = key_for(FP_A, "ref", 1, 1);
		const void *none = (const void *)1;

		assert_int_equal(bfs_cache_get_ref(r, &miss, &none, &len, &shape, &label),
				 -ENOENT);
		assert_true(none == (const void *)1);
	}
	bfs_cache_put_ref(r);
	bfs_cache_put_ref(r); /* nothing lent: a no-op */
	bfs_cache_put_ref(NULL);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.hits, 3);
	assert_int_equal(st.misses, 1);
	/* destroying a reader that lends gives it back (the next open's
	 * writer would otherwise wait on the map lock at close) */
	assert_int_equal(bfs_cache_get_ref(r, &it.key, &q, &len, &shape, &label), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
	free(data);
	free(copy);
}

static void test_cache_get_ref_of_a_damaged_value_is_a_counted_crc_error_lending_nothing(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	const uint8_t *p = (const uint8_t *)1;
	size_t len = 0;
	int64_t label = -1;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "c", 0, 3, SMALL, 3);
	bfs_cache_close(c);
	corrupt_payload(dir, 1, SMALL);

	c = open_cache(dir, FP_A, 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_ref_of(r, FP_A, "c", 1, &p, &len, &label), BFS_E_CRC);
	assert_int_equal(label, -1);
	/* nothing is lent: a writer's commit and a check in this thread
	 * run (a lent transaction would keep the map lock read-held) */
	bfs_cache_flush(c); /* the writer deletes it */
	assert_int_equal(get_ref_of(r, FP_A, "c", 1, &p, &len, &label), -ENOENT);
	assert_int_equal(get_ref_of(r, FP_A, "c", 2, &p, &len, &label), 0);
	{
		uint8_t *want = malloc(SMALL);

		pattern(want, SMALL, 2);
		assert_int_equal(len, SMALL);
		assert_memory_equal(p, want, SMALL);
		assert_int_equal(label, 2);
		free(want);
	}
	bfs_cache_put_ref(r);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.crc_errors, 1);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(st.entries, 2);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

struct clear_and_refill {
	bfs_cache *c;
	uint64_t removed;
	int err;
};

/* Another thread: clear the cache, then store other bytes under key 0. */
static void *clear_and_refill_main(void *arg)
{
	struct clear_and_refill *t = arg;
	uint8_t *other = malloc(BIG);
	bfs_cache_item it = { .label = 5, .len = BIG, .shape = { 1, BIG / 3, 1, BIG / 3 } };
	int done = 0;

	pattern(other, BIG, 999);
	t->err = bfs_cache_clear(t->c, NULL, &t->removed);
	it.key = key_for(FP_A, "snap", 1, 0);
	it.data = other;
	if (!t->err)
		t->err = bfs_cache_submit(t->c, &it, 1, count_done, &done);
	bfs_cache_flush(t->c);
	free(other);
	return NULL;
}

static void test_cache_get_ref_keeps_its_snapshot_while_the_cache_is_cleared_and_refilled(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	uint8_t *want = malloc(BIG), *other = malloc(BIG);
	const uint8_t *p = NULL;
	size_t len = 0;
	int64_t label = -1;
	struct clear_and_refill t = { 0 };
	pthread_t th;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "snap", 0, 4, BIG, 4);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	pattern(want, BIG, 0);
	pattern(other, BIG, 999);
	assert_int_equal(get_ref_of(r, FP_A, "snap", 0, &p, &len, &label), 0);
	/* while it is lent another thread clears the cache, and the writer
	 * reuses free pages for other bytes under the same key */
	t.c = c;
	assert_int_equal(pthread_create(&th, NULL, clear_and_refill_main, &t), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(t.err, 0);
	assert_int_equal(t.removed, 4);
	assert_memory_equal(p, want, BIG); /* the snapshot's bytes */
	assert_int_equal(label, 0);
	bfs_cache_put_ref(r);
	/* asked again: the new bytes */
	assert_int_equal(get_ref_of(r, FP_A, "snap", 0, &p, &len, &label), 0);
	assert_memory_equal(p, other, BIG);
	assert_int_equal(label, 5);
	assert_int_equal(get_ref_of(r, FP_A, "snap", 1, &p, &len, &label), -ENOENT);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
	free(want);
	free(other);
}

static void note_bad(void *ctx, const bfs_cache_entry_info *e)
{
	bfs_cache_entry_info *out = ctx;

	*out = *e;
}

static void test_cache_verify_finds_and_removes_a_corrupt_entry(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_opts o = { 0 };
	bfs_cache_entry_info info = { .code = 0 };
	uint64_t checked, nbad;
	char msg[BFS_ERRMSG_MAX];

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "v", 0, 5, SMALL, 5);
	bfs_cache_close(c);
	c = open_cache(dir, FP_B, 0);
	put_range(c, FP_B, "v", 0, 3, SMALL, 3);
	bfs_cache_close(c);
	corrupt_payload(dir, 3, SMALL); /* the first copy found: FP_A's */

	o.dir = dir;
	o.admin = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	assert_int_equal(bfs_cache_verify(c, FP_B, 0, NULL, NULL, &checked, &nbad), 0);
	assert_int_equal(checked, 3);
	assert_int_equal(nbad, 0);
	assert_int_equal(bfs_cache_verify(c, NULL, 0, note_bad, &info, &checked, &nbad), 0);
	assert_int_equal(checked, 8);
	assert_int_equal(nbad, 1);
	assert_string_equal(info.fingerprint, FP_A);
	assert_int_equal(info.offset, 3);
	assert_int_equal(info.code, BFS_E_CRC);
	assert_int_equal(bfs_cache_verify(c, NULL, 1, NULL, NULL, &checked, &nbad), 0);
	assert_int_equal(nbad, 1);
	assert_int_equal(bfs_cache_verify(c, NULL, 0, NULL, NULL, &checked, &nbad), 0);
	assert_int_equal(checked, 7);
	assert_int_equal(nbad, 0);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* verify reads samples 256 to a transaction: a cache of exactly one or two
 * such chunks is healthy, and its indexes and counters are checked too. */
static void test_cache_verify_of_a_multiple_of_256_entries_is_healthy(void **s)
{
	static const int counts[] = { 255, 256, 257, 512 };
	char dir[64];
	bfs_cache *c;
	bfs_cache_opts o = { 0 };
	uint64_t checked, nbad;
	char msg[BFS_ERRMSG_MAX];

	for (size_t t = 0; t < sizeof(counts) / sizeof(counts[0]); t++) {
		make_dir(dir);
		c = open_cache(dir, FP_A, 0);
		put_range(c, FP_A, "m", 0, counts[t], 256, 64);
		bfs_cache_close(c);
		o.dir = dir;
		o.admin = 1;
		assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
		checked = nbad = 99;
		assert_int_equal(bfs_cache_verify(c, NULL, 0, NULL, NULL, &checked, &nbad), 0);
		assert_int_equal(checked, (uint64_t)counts[t]);
		assert_int_equal(nbad, 0);
		assert_int_equal(bfs_cache_verify(c, FP_A, 1, NULL, NULL, &checked, &nbad), 0);
		assert_int_equal(checked, (uint64_t)counts[t]);
		bfs_cache_close(c);
		remove_dir(dir);
	}
}

/* A child inserts 602,112-byte samples in a loop and is killed at some
 * moment; the environment opens and every entry verifies and reads
 * back correct.  Several rounds, both sync modes. */
static void test_cache_kill_9_during_writes_leaves_only_good_entries(void **s)
{
	char dir[64];
	int next = 0;

	make_dir(dir);
	const char *kr = getenv("BFS_CACHE_KILL_ROUNDS");
	int rounds = kr ? atoi(kr) : 6;

	for (int round = 0; round < rounds; round++) {
		int pfd[2], status;
		pid_t pid;
		char ch;
		bfs_cache *c;
		bfs_cache_reader *r;
		uint64_t checked, nbad;
		int hits = 0;

		assert_int_equal(pipe(pfd), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			bfs_cache_opts o = { 0 };
			bfs_cache *cc;

			close(pfd[0]);
			o.dir = dir;
			o.fingerprint = FP_A;
			o.max_bytes = 256ull << 20;
			o.sync = round & 1 ? BFS_CACHE_SYNC_NONE : BFS_CACHE_SYNC_DATA;
			if (bfs_cache_open(&o, &cc, NULL))
				_exit(1);
			for (int i = next;; i += 4) {
				put_range(cc, FP_A, "k", i, i + 4, BIG, 4);
				if (i == next && write(pfd[1], "x", 1) != 1)
					_exit(1);
			}
		}
		close(pfd[1]);
		assert_int_equal(read(pfd[0], &ch, 1), 1);
		close(pfd[0]);
		usleep(5000 + (useconds_t)round * 9000);
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));

		c = open_cache(dir, FP_A, 256ull << 20);
		assert_int_equal(bfs_cache_verify(c, NULL, 0, NULL, NULL, &checked, &nbad), 0);
		assert_int_equal(nbad, 0);
		assert_true(checked >= 4);
		assert_int_equal(bfs_cache_reader_create(c, &r), 0);
		for (int i = next; i < (int)checked + next + 64; i++) {
			int err = get_check(r, FP_A, "k", (uint64_t)i, BIG);

			assert_true(err == 0 || err == -ENOENT);
			hits += err == 0;
		}
		assert_int_equal((uint64_t)hits, checked);
		print_message("  kill -9 round %d (%s): %llu entries survived, all verify\n",
			      round, round & 1 ? "nosync" : "sync data",
			      (unsigned long long)checked);
		/* the write lock the child died with is usable again */
		put_range(c, FP_A, "after", 0, 1, SMALL, 1);
		assert_int_equal(get_check(r, FP_A, "after", 0, SMALL), 0);
		bfs_cache_reader_destroy(r);
		bfs_cache_clear(c, NULL, NULL);
		bfs_cache_close(c);
		next += 1000;
	}
	remove_dir(dir);
}

/* One buffer of the grouped-writes child: free again once its done ran. */
struct ring_buf {
	uint8_t *data;
	int busy; /* atomic */
};

/* done of a grouped submission: the caller takes its memory back at once
 * and writes over it, as the engine reuses a slot, so any byte the cache
 * still read from it would reach the disk wrong. */
static void scribble_done(void *ctx)
{
	struct ring_buf *b = ctx;

	memset(b->data, 0xEE, 4 * (size_t)BIG);
	__atomic_store_n(&b->busy, 0, __ATOMIC_SEQ_CST);
}

/* The writer commits many queued submissions in one transaction and lets
 * their memory go before the commit's fdatasync.  A child submits batches
 * without waiting (so they queue up and are grouped), reports what a
 * flush has confirmed committed, and is killed at some moment: every
 * entry it reported survives, every entry verifies and holds its own
 * bytes (never the ones written over after done), in both sync modes. */
static void test_cache_kill_9_during_grouped_commits_keeps_what_was_committed(void **s)
{
	char dir[64];
	int next = 0;
	const char *kr = getenv("BFS_CACHE_KILL_ROUNDS");
	int rounds = kr ? atoi(kr) : 6;

	make_dir(dir);
	for (int round = 0; round < rounds; round++) {
		int pfd[2], status, reported = -1, got;
		pid_t pid;
		bfs_cache *c;
		bfs_cache_reader *r;
		uint64_t checked, nbad;
		int hits = 0, seen = 0;

		assert_int_equal(pipe(pfd), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			bfs_cache_opts o = { 0 };
			struct ring_buf ring[8];
			bfs_cache *cc;

			close(pfd[0]);
			o.dir = dir;
			o.fingerprint = FP_A;
			o.max_bytes = 512ull << 20;
			o.sync = round & 1 ? BFS_CACHE_SYNC_NONE : BFS_CACHE_SYNC_DATA;
			if (bfs_cache_open(&o, &cc, NULL))
				_exit(1);
			for (int b = 0; b < 8; b++) {
				ring[b].data = malloc(4 * (size_t)BIG);
				ring[b].busy = 0;
				if (!ring[b].data)
					_exit(1);
			}
			for (int i = next, k = 0;; i += 4, k++) {
				struct ring_buf *b = &ring[k % 8];
				bfs_cache_item items[4];

				while (__atomic_load_n(&b->busy, __ATOMIC_SEQ_CST))
					usleep(100);
				for (int j = 0; j < 4; j++) {
					pattern(b->data + (size_t)j * BIG, BIG, (uint64_t)(i + j));
					items[j] = (bfs_cache_item){
						.key = key_for(FP_A, "g", 1, (uint64_t)(i + j)),
						.label = i + j, .data = b->data + (size_t)j * BIG,
						.len = BIG };
				}
				b->busy = 1;
				if (bfs_cache_submit(cc, items, 4, scribble_done, b) != 0)
					_exit(1);
				if (k % 6 == 5) { /* everything so far is committed */
					int last = i + 3;

					bfs_cache_flush(cc);
					if (write(pfd[1], &last, sizeof(last)) != sizeof(last))
						_exit(1);
				}
			}
		}
		close(pfd[1]);
		/* let it run for a number of reports, then kill it at once */
		while (seen < 1 + round % 3 && read(pfd[0], &got, sizeof(got)) == sizeof(got)) {
			reported = got;
			seen++;
		}
		usleep((useconds_t)(round * 7000));
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		while (read(pfd[0], &got, sizeof(got)) == sizeof(got))
			reported = got; /* written before the kill */
		close(pfd[0]);
		assert_true(reported >= next + 23);

		c = open_cache(dir, FP_A, 512ull << 20);
		assert_int_equal(bfs_cache_verify(c, NULL, 0, NULL, NULL, &checked, &nbad), 0);
		assert_int_equal(nbad, 0);
		assert_int_equal(bfs_cache_reader_create(c, &r), 0);
		for (int i = next; i < (int)checked + next + 256; i++) {
			int err = get_check(r, FP_A, "g", (uint64_t)i, BIG);

			if (i <= reported && err != 0)
				fail_msg("round %d: entry %d was committed (flushed) but is gone (%d)",
					 round, i, err);
			assert_true(err == 0 || err == -ENOENT);
			hits += err == 0;
		}
		assert_int_equal((uint64_t)hits, checked);
		print_message("  kill -9 round %d (%s): %d entries committed before, %llu survived, all verify\n",
			      round, round & 1 ? "nosync" : "sync data", reported - next + 1,
			      (unsigned long long)checked);
		bfs_cache_reader_destroy(r);
		bfs_cache_clear(c, NULL, NULL);
		bfs_cache_close(c);
		next += 100000;
	}
	remove_dir(dir);
}

/* ---- size limit and eviction ---------------------------------------------------- */

static void test_cache_size_limit_holds_and_keeps_the_first_entries(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	const uint64_t limit = 8ull << 20;
	int present = 0, prefix = 0;

	make_dir(dir);
	c = open_cache(dir, FP_A, limit);
	put_range(c, FP_A, "big", 0, 60, BIG, 4); /* 36 MB into 8 MiB */
	bfs_cache_get_stats(c, &st);
	assert_true(file_size(dir, "data.mdb") <= limit);
	assert_true(st.map_bytes <= limit);
	assert_true(st.inserts >= 8 && st.inserts <= 13);
	assert_int_equal(st.inserts + st.dropped_full, 60);
	assert_int_equal(st.full, 1);
	assert_int_equal(st.entries, st.inserts);
	assert_true(st.bytes_used <= limit);
	/* fill, then keep: the entries are the first ones inserted, and a
	 * later epoch hits on all of them */
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 60; i++) {
		int err = get_check(r, FP_A, "big", (uint64_t)i, BIG);

		assert_true(err == 0 || err == -ENOENT);
		present += err == 0;
		if (err == 0 && prefix == i)
			prefix++;
	}
	assert_int_equal((uint64_t)present, st.inserts);
	assert_int_equal(prefix, present);
	print_message("  8 MiB limit: %llu of 60 kept (the first ones), data.mdb %llu bytes\n",
		      (unsigned long long)st.inserts,
		      (unsigned long long)file_size(dir, "data.mdb"));
	/* while paused, submit drops at once and says why */
	{
		bfs_cache_item it = { .key = key_for(FP_A, "big", 1, 99), .len = BIG };
		uint8_t *buf = calloc(1, BIG);
		int done = 0;

		it.data = buf;
		assert_int_equal(bfs_cache_submit(c, &it, 1, count_done, &done), -ENOSPC);
		assert_int_equal(done, 1);
		free(buf);
	}
	/* clearing lifts the pause and frees the space for reuse */
	assert_int_equal(bfs_cache_clear(c, FP_A, NULL), 0);
	put_range(c, FP_A, "big", 100, 104, BIG, 4);
	assert_int_equal(get_check(r, FP_A, "big", 101, BIG), 0);
	assert_true(file_size(dir, "data.mdb") <= limit);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void fill_with(const char *dir, const char *fp, int idle_s, int n)
{
	bfs_cache_opts o = { 0 };
	bfs_cache *c;
	char msg[BFS_ERRMSG_MAX];

	o.dir = dir;
	o.fingerprint = fp;
	o.max_bytes = 8ull << 20;
	o.foreign_idle_s = idle_s;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	put_range(c, fp, "f", 0, n, BIG, 2);
	bfs_cache_close(c);
}

static void test_cache_idle_foreign_fingerprint_makes_room_when_full(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_fp_info *fps;
	size_t n;
	bfs_cache_opts o = { 0 };
	bfs_cache_stats st;
	bfs_cache_reader *r;
	char msg[BFS_ERRMSG_MAX];

	make_dir(dir);
	fill_with(dir, FP_A, 1, 20); /* A fills the cache */
	sleep(2);                    /* and is idle for 1 s */
	o.dir = dir;
	o.fingerprint = FP_B;
	o.max_bytes = 8ull << 20;
	o.foreign_idle_s = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	put_range(c, FP_B, "f", 0, 4, BIG, 2);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.inserts, 4);
	assert_true(st.evictions >= 4);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(get_check(r, FP_B, "f", (uint64_t)i, BIG), 0);
	bfs_cache_reader_destroy(r);
	assert_int_equal(bfs_cache_fingerprints(c, &fps, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(fps[0].fingerprint, FP_A);
	assert_string_equal(fps[1].fingerprint, FP_B);
	assert_int_equal(fps[1].entries, 4);
	assert_true(fps[0].entries < 13);
	assert_true(fps[1].last_active_ns > 0);
	free(fps);
	bfs_cache_close(c);
	assert_true(file_size(dir, "data.mdb") <= (8ull << 20));
	remove_dir(dir);
}

static void test_cache_foreign_entries_stay_when_eviction_is_off(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_opts o = { 0 };
	bfs_cache_stats st;
	char msg[BFS_ERRMSG_MAX];

	make_dir(dir);
	fill_with(dir, FP_A, -1, 20);
	o.dir = dir;
	o.fingerprint = FP_B;
	o.max_bytes = 8ull << 20;
	o.foreign_idle_s = -1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	put_range(c, FP_B, "f", 0, 2, BIG, 2);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.inserts, 0);
	assert_int_equal(st.dropped_full, 2);
	assert_int_equal(st.evictions, 0);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* Run fn(arg) in a child with a deadline: its exit status (0 = passed);
 * a child that hangs past `secs` is killed (SIGALRM) and fails. */
static int in_child(int (*fn)(void *), void *arg, unsigned secs)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(secs);
		_exit(fn(arg));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		print_message("  child killed by signal %d\n", WTERMSIG(status));
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct small_opener {
	const char *dir;
	uint64_t limit;
	uint64_t used_before;   /* the used end the parent left */
};

/* A process with a 2 MiB limit on a cache that a 64 MiB one fills. */
static int open_small_and_put(void *arg)
{
	struct small_opener *so = arg;
	bfs_cache *c = open_cache(so->dir, FP_B, so->limit);
	bfs_cache_stats st;
	MDB_envinfo info;

	put_range(c, FP_B, "b", 0, 200, SMALL, 20);
	bfs_cache_get_stats(c, &st);
	if (st.map_bytes != so->limit)
		return 10;
	/* its own limit holds: no growth past max(limit, what was used) */
	if (mdb_env_info(c->e->env, &info) != 0 ||
	    ((uint64_t)info.me_last_pgno + 1) * c->e->psize >
		    so->used_before + (1u << 20))
		return 11;
	if (st.dropped_full == 0)
		return 12;
	bfs_cache_close(c);
	return 0;
}

/* Issue 23, 1: a mount with a smaller --cache-size opened data.mdb with a
 * smaller map, and LMDB (MDB_WRITEMAP) cut the file to it, under the map
 * of a running mount with a larger one: a SIGBUS there, or pages of its
 * open transaction lost.  Now every opener maps at least the file's
 * length, and each keeps to its own limit as its writer's policy. */
static void test_cache_a_smaller_limit_never_cuts_the_file_under_a_larger_one(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	struct small_opener so;
	MDB_envinfo info;
	uint64_t len;

	make_dir(dir);
	c = open_cache(dir, FP_A, 64ull << 20);
	put_range(c, FP_A, "a", 0, 300, SMALL, 30);
	len = file_size(dir, "data.mdb");
	assert_true(mdb_env_info(c->e->env, &info) == 0);
	so.dir = dir;
	so.limit = 2ull << 20;
	so.used_before = ((uint64_t)info.me_last_pgno + 1) * c->e->psize;
	assert_true(so.used_before > so.limit);
	for (int round = 0; round < 3; round++) {
		assert_true(mdb_env_info(c->e->env, &info) == 0);
		so.used_before = ((uint64_t)info.me_last_pgno + 1) * c->e->psize;
		assert_int_equal(in_child(open_small_and_put, &so, 60), 0);
		/* never shorter than this process maps */
		assert_true(file_size(dir, "data.mdb") >= len);
		put_range(c, FP_A, "a", 300 + round * 100, 400 + round * 100,
			  SMALL, 25);
	}
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 600; i++)
		assert_int_equal(get_check(r, FP_A, "a", (uint64_t)i, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	assert_int_equal(bfs_cache_check(dir, NULL, NULL), 0);
	remove_dir(dir);
}

/* The other way round: the small mount runs, a larger one fills past its
 * map; the small one adopts the larger map (reads everything) and still
 * adds nothing past its own limit. */
static int open_big_and_fill(void *arg)
{
	bfs_cache *c = open_cache(arg, FP_A, 64ull << 20);

	put_range(c, FP_A, "a", 0, 400, SMALL, 40);
	bfs_cache_close(c);
	return 0;
}

static void test_cache_a_smaller_limit_adopts_a_larger_map_and_keeps_its_own_limit(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	MDB_envinfo info;
	uint64_t used;

	make_dir(dir);
	c = open_cache(dir, FP_B, 2ull << 20);
	put_range(c, FP_B, "b", 0, 20, SMALL, 20);
	assert_int_equal(in_child(open_big_and_fill, dir, 60), 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	for (int i = 0; i < 400; i++)
		assert_int_equal(get_check(r, FP_A, "a", (uint64_t)i, SMALL), 0);
	assert_true(mdb_env_info(c->e->env, &info) == 0);
	used = ((uint64_t)info.me_last_pgno + 1) * c->e->psize;
	put_range(c, FP_B, "b", 20, 400, SMALL, 20);
	assert_true(mdb_env_info(c->e->env, &info) == 0);
	assert_true(((uint64_t)info.me_last_pgno + 1) * c->e->psize <=
		    used + (1u << 20));
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.map_bytes, 2ull << 20);
	assert_true(st.dropped_full > 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(get_check(r, FP_B, "b", (uint64_t)i, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* ---- a stopped writer --------------------------------------------------- */

/* A child that opens dir, begins a write transaction (the writer lock and
 * LMDB's writer mutex held, as a mount's writer mid-put) and stops
 * itself; it ends the transaction when continued.  Its pid, once it is
 * stopped. */
static pid_t stopped_writer(const char *dir)
{
	int fds[2];
	pid_t pid;
	char b;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bfs_cache *c = open_cache(dir, FP_B, 0);
		MDB_txn *txn;

		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (bfs__txn_begin(c->e, 0, &txn) != 0)
			_exit(3);
		if (write(fds[1], "x", 1) != 1)
			_exit(4);
		raise(SIGSTOP);
		bfs__txn_end(c->e, txn, 0);
		bfs_cache_close(c);
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &b, 1), 1);
	close(fds[0]);
	for (int i = 0; i < 2000; i++) { /* until it is stopped */
		char path[64], st[256];
		FILE *f;
		int stopped = 0;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		f = fopen(path, "r");
		if (f && fgets(st, sizeof(st), f))
			stopped = strstr(st, ") T ") != NULL;
		if (f)
			fclose(f);
		if (stopped)
			return pid;
		usleep(5000);
	}
	fail_msg("the writer child did not stop");
	return 0;
}

static void end_stopped_writer(pid_t pid)
{
	int status;

	kill(pid, SIGCONT);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

struct stopped_case {
	const char *dir;
	pid_t pid;
};

static int names_it(const char *msg, pid_t pid)
{
	char want[32];

	snprintf(want, sizeof(want), "pid %d", (int)pid);
	if (!strstr(msg, want) || !strstr(msg, "stopped")) {
		fprintf(stderr, "  message does not name the stopped pid %d: %s\n",
			(int)pid, msg);
		return 0;
	}
	return 1;
}

/* What the tools see: clear and the probe give up, naming the holder. */
static int admin_meets_a_stopped_writer(void *arg)
{
	struct stopped_case *sc = arg;
	bfs_cache_opts o = { .dir = sc->dir, .admin = 1 };
	bfs_cache *c;
	char msg[BFS_ERRMSG_MAX] = "";
	uint64_t removed, checked, nbad;

	if (bfs_cache_open(&o, &c, msg) != 0)
		return 20;
	if (bfs_cache_writer_probe(c, msg) != -ETIMEDOUT || !names_it(msg, sc->pid))
		return 21;
	if (bfs_cache_clear(c, NULL, &removed) != -ETIMEDOUT)
		return 22;
	/* reading goes on */
	if (bfs_cache_verify(c, NULL, 0, NULL, NULL, &checked, &nbad) != 0 ||
	    checked != 5 || nbad != 0)
		return 23;
	bfs_cache_close(c);
	return 0;
}

/* What a new mount sees: it opens, reads, adds nothing, and says why. */
static int mount_meets_a_stopped_writer(void *arg)
{
	struct stopped_case *sc = arg;
	bfs_cache *c = open_cache(sc->dir, FP_A, 0);
	bfs_cache_reader *r;
	bfs_cache_stats st;

	if (!bfs_cache_notice(c) || !names_it(bfs_cache_notice(c), sc->pid))
		return 30;
	if (bfs_cache_inserting(c))
		return 31;
	put_range(c, FP_A, "w", 100, 103, SMALL, 3);
	bfs_cache_get_stats(c, &st);
	if (st.dropped_locked != 3 || st.inserts != 0 || !st.nowrite)
		return 32;
	if (bfs_cache_reader_create(c, &r) != 0)
		return 33;
	for (int i = 0; i < 5; i++)
		if (get_check(r, FP_A, "w", (uint64_t)i, SMALL) != 0)
			return 34;
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	return 0;
}

/* Issue 23, 4: a process stopped (SIGSTOP, a suspended job) in a cache
 * write held LMDB's writer mutex, and every `batchfs cache clear` and
 * every new mount on that cache waited for it forever.  Now the waits
 * have a deadline (BATCHFS_CACHE_LOCK_WAIT_MS here). */
static void test_cache_a_stopped_writer_blocks_nobody_past_the_lock_wait(void **s)
{
	char dir[64];
	bfs_cache *c;
	struct stopped_case sc;
	uint64_t removed;

	setenv("BATCHFS_CACHE_LOCK_WAIT_MS", "300", 1);
	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "w", 0, 5, SMALL, 5);
	bfs_cache_close(c);
	sc.dir = dir;
	sc.pid = stopped_writer(dir);
	assert_int_equal(in_child(admin_meets_a_stopped_writer, &sc, 30), 0);
	assert_int_equal(in_child(mount_meets_a_stopped_writer, &sc, 30), 0);
	end_stopped_writer(sc.pid);
	/* and once it has gone on, everything writes again */
	c = open_cache(dir, FP_A, 0);
	assert_null(bfs_cache_notice(c));
	assert_int_equal(bfs_cache_clear(c, NULL, &removed), 0);
	assert_int_equal(removed, 5);
	bfs_cache_close(c);
	unsetenv("BATCHFS_CACHE_LOCK_WAIT_MS");
	remove_dir(dir);
}

/* users.lock held exclusively by a process stopped while it opened the
 * cache (checking its files): an open gives up after the wait and names
 * it, instead of waiting for it forever. */
static int open_meets_a_stopped_opener(void *arg)
{
	struct stopped_case *sc = arg;
	bfs_cache_opts o = { .dir = sc->dir, .fingerprint = FP_A };
	bfs_cache *c = NULL;
	char msg[BFS_ERRMSG_MAX] = "";

	if (bfs_cache_open(&o, &c, msg) != -ETIMEDOUT)
		return 40;
	if (!names_it(msg, sc->pid) || !strstr(msg, "users.lock"))
		return 41;
	o.admin = 1; /* the tools too */
	if (bfs_cache_open(&o, &c, msg) != -ETIMEDOUT || !names_it(msg, sc->pid))
		return 42;
	return 0;
}

static void test_cache_an_opener_stopped_with_users_lock_blocks_nobody_past_the_wait(void **s)
{
	char dir[64], path[128];
	struct stopped_case sc;
	bfs_cache *c;
	int fds[2], status;
	char b;

	setenv("BATCHFS_CACHE_LOCK_WAIT_MS", "300", 1);
	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "u", 0, 2, SMALL, 2);
	bfs_cache_close(c);
	snprintf(path, sizeof(path), "%s/users.lock", dir);
	assert_int_equal(pipe(fds), 0);
	sc.dir = dir;
	sc.pid = fork();
	assert_true(sc.pid >= 0);
	if (sc.pid == 0) {
		int fd = open(path, O_RDWR);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0 || flock(fd, LOCK_EX) != 0 || write(fds[1], "x", 1) != 1)
			_exit(3);
		raise(SIGSTOP);
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &b, 1), 1);
	close(fds[0]);
	for (int i = 0; i < 2000; i++) {
		char sp[64], st[256] = "";
		FILE *f;

		snprintf(sp, sizeof(sp), "/proc/%d/stat", (int)sc.pid);
		if ((f = fopen(sp, "r"))) {
			if (!fgets(st, sizeof(st), f))
				st[0] = '\0';
			fclose(f);
		}
		if (strstr(st, ") T "))
			break;
		usleep(5000);
	}
	assert_int_equal(in_child(open_meets_a_stopped_opener, &sc, 30), 0);
	kill(sc.pid, SIGCONT);
	assert_int_equal(waitpid(sc.pid, &status, 0), sc.pid);
	c = open_cache(dir, FP_A, 0);
	bfs_cache_close(c);
	unsetenv("BATCHFS_CACHE_LOCK_WAIT_MS");
	remove_dir(dir);
}

struct said {
	pthread_mutex_t lock;
	char lines[8][512];
	int n;
};

static void note_line(void *ctx, int warn, const char *line)
{
	struct said *sd = ctx;

	pthread_mutex_lock(&sd->lock);
	if (sd->n < 8)
		snprintf(sd->lines[sd->n++], sizeof(sd->lines[0]), "%c %s",
			 warn ? 'W' : 'I', line);
	pthread_mutex_unlock(&sd->lock);
}

/* A mount already running when another process stops holding the writer
 * lock: its writer gives up after the wait, drops (counted) instead of
 * holding decoding back, says so once through the log hook, and stores
 * again once the holder has gone on. */
static void test_cache_a_running_writer_pauses_and_says_so_while_the_lock_is_held(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_opts o = { 0 };
	bfs_cache_stats st;
	struct said sd = { .n = 0 };
	char msg[BFS_ERRMSG_MAX] = "";
	pid_t pid;

	pthread_mutex_init(&sd.lock, NULL);
	setenv("BATCHFS_CACHE_LOCK_WAIT_MS", "300", 1);
	make_dir(dir);
	o.dir = dir;
	o.fingerprint = FP_A;
	o.max_bytes = 64ull << 20;
	o.log = note_line;
	o.log_ctx = &sd;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	pid = stopped_writer(dir);
	put_range(c, FP_A, "r", 0, 4, SMALL, 2);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.inserts, 0);
	assert_int_equal(st.dropped_locked, 4);
	pthread_mutex_lock(&sd.lock);
	assert_int_equal(sd.n, 1);
	assert_true(sd.lines[0][0] == 'W' && names_it(sd.lines[0], pid));
	pthread_mutex_unlock(&sd.lock);
	end_stopped_writer(pid);
	/* after the pause, it stores again */
	for (int i = 0; i < 200 && !bfs_cache_inserting(c); i++)
		usleep(50000);
	assert_true(bfs_cache_inserting(c));
	put_range(c, FP_A, "r", 10, 12, SMALL, 2);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.inserts, 2);
	pthread_mutex_lock(&sd.lock);
	assert_int_equal(sd.n, 2);
	assert_true(sd.lines[1][0] == 'I');
	pthread_mutex_unlock(&sd.lock);
	bfs_cache_close(c);
	unsetenv("BATCHFS_CACHE_LOCK_WAIT_MS");
	pthread_mutex_destroy(&sd.lock);
	remove_dir(dir);
}

/* A cache on a 2 MiB tmpfs with a 64 MiB limit: the disk fills first. */
static void test_cache_full_filesystem_never_crashes_and_keeps_serving(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	int present = 0;

	make_dir(dir);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=2m") != 0) {
		int e = errno;

		rmdir(dir);
		print_message("skip: cannot mount a tmpfs here (%s): needs root\n",
			      strerror(e));
		skip();
	}
	c = open_cache(dir, FP_A, 64ull << 20);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	put_range(c, FP_A, "t", 0, 10, BIG, 1);
	bfs_cache_get_stats(c, &st);
	assert_true(st.dropped_full > 0);
	assert_true(st.inserts >= 1);
	for (int i = 0; i < 10; i++) {
		int err = get_check(r, FP_A, "t", (uint64_t)i, BIG);

		assert_true(err == 0 || err == -ENOENT);
		present += err == 0;
	}
	assert_int_equal((uint64_t)present, st.inserts);
	print_message("  2 MiB tmpfs: %llu inserted, %llu dropped (disk full), data.mdb %llu bytes\n",
		      (unsigned long long)st.inserts,
		      (unsigned long long)st.dropped_full,
		      (unsigned long long)file_size(dir, "data.mdb"));
	/* new readers still get a slot on the full disk */
	bfs_cache_reader_destroy(r);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "t", 0, BIG), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	/* and it reopens */
	c = open_cache(dir, FP_A, 64ull << 20);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "t", 0, BIG), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	assert_int_equal(umount2(dir, MNT_DETACH), 0);
	assert_int_equal(rmdir(dir), 0);
}

/* Fill the file system holding dir to its last block (a file "filler"). */
static void fill_file_system(const char *dir)
{
	char path[128], buf[4096];
	int fd;

	memset(buf, 0x5a, sizeof(buf));
	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	while (write(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf))
		;
	while (write(fd, buf, 1) == 1)
		;
	close(fd);
}

/* The writer puts its pages straight into a shared map of data.mdb
 * (MDB_WRITEMAP): touching one that has no block on a file system with
 * none left would kill the process (SIGBUS).  On a tmpfs filled to its
 * last block, a thousand small values in one submission (their leaves
 * split into new pages) are refused as "disk full" instead, and what was
 * cached before still reads back. */
static void test_cache_puts_on_a_file_system_with_no_block_left_never_fault(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	pid_t pid;
	int status;

	make_dir(dir);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=4m") != 0) {
		int e = errno;

		rmdir(dir);
		print_message("skip: cannot mount a tmpfs here (%s): needs root\n",
			      strerror(e));
		skip();
	}
	/* in a child, so that a fault is a verdict, not the test's end */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGBUS, SIG_DFL); /* not cmocka's handler: die of it */
		c = open_cache(dir, FP_A, 64ull << 20);
		put_range(c, FP_A, "a", 0, 4, SMALL, 4);
		fill_file_system(dir);
		put_range(c, FP_A, "b", 0, 1000, 200, 1000);
		bfs_cache_get_stats(c, &st);
		if (st.inserts != 4 || st.dropped_full < 1000)
			_exit(3);
		if (bfs_cache_reader_create(c, &r))
			_exit(4);
		for (int i = 0; i < 4; i++)
			if (get_check(r, FP_A, "a", (uint64_t)i, SMALL))
				_exit(5);
		bfs_cache_reader_destroy(r);
		bfs_cache_close(c);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		print_message("  the child died of signal %d\n", WTERMSIG(status));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* and, with room again, it opens and serves */
	{
		char path[128];

		snprintf(path, sizeof(path), "%s/filler", dir);
		assert_int_equal(unlink(path), 0);
	}
	c = open_cache(dir, FP_A, 64ull << 20);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "a", 3, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	assert_int_equal(umount2(dir, MNT_DETACH), 0);
	assert_int_equal(rmdir(dir), 0);
}

/* ---- queue ---------------------------------------------------------------------- */

static void slow_done(void *ctx)
{
	usleep(20000);
	count_done(ctx);
}

static void test_cache_full_queue_drops_and_every_done_runs_once(void **s)
{
	char dir[64];
	bfs_cache_opts o = { 0 };
	bfs_cache *c;
	bfs_cache_stats st;
	static uint8_t buf[SMALL];
	int done = 0, queued = 0, dropped = 0;
	char msg[BFS_ERRMSG_MAX];

	make_dir(dir);
	o.dir = dir;
	o.fingerprint = FP_A;
	o.max_bytes = 64ull << 20;
	o.queue_max = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	for (int i = 0; i < 20; i++) {
		bfs_cache_item it = { .key = key_for(FP_A, "q", 1, (uint64_t)i), .label = i,
				      .data = buf, .len = SMALL };
		int err = bfs_cache_submit(c, &it, 1, slow_done, &done);

		assert_true(err == 0 || err == -EAGAIN);
		queued += err == 0;
		dropped += err == -EAGAIN;
	}
	assert_true(dropped > 0);
	bfs_cache_flush(c);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_SEQ_CST), 20);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.dropped_queue, (uint64_t)dropped);
	assert_int_equal(st.inserts, (uint64_t)queued);
	/* bad items are refused, done still runs */
	{
		bfs_cache_item it = { .key = key_for(FP_A, "q", 1, 0), .len = SMALL };

		assert_int_equal(bfs_cache_submit(c, &it, 1, count_done, &done), -EINVAL);
		assert_int_equal(bfs_cache_submit(c, NULL, 0, count_done, &done), 0);
		assert_int_equal(done, 22);
	}
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_a_second_submission_of_a_key_is_a_duplicate(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_stats st;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "d", 0, 4, SMALL, 4);
	put_range(c, FP_A, "d", 2, 6, SMALL, 4);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.inserts, 6);
	assert_int_equal(st.duplicates, 2);
	assert_int_equal(st.entries, 6);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* The same sample offered twice before the first copy is committed (two
 * epochs' workers both missed it) meets that copy inside the writer's own
 * transaction: a duplicate, never "damaged" (with MDB_WRITEMAP the copy's
 * pages lie in the shared map, flagged dirty by LMDB until the commit).
 * Counted as damage, the mount left the marker that makes the next open
 * move the whole cache aside. */
static void test_cache_a_key_offered_twice_in_one_commit_is_a_duplicate_not_damage(void **s)
{
	char dir[64], marker[96];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	bfs_cache_item items[4];
	uint8_t *data = malloc(BIG);
	int done = 0;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	pattern(data, BIG, 7);
	for (int j = 0; j < 4; j++) {
		/* keys 7, 8, 7 in one submission (one transaction), then 7
		 * again (the same transaction or the next) */
		items[j].key = key_for(FP_A, "d", 1, j == 1 ? 8 : 7);
		items[j].label = j == 1 ? 8 : 7;
		items[j].data = data;
		items[j].len = BIG;
	}
	assert_int_equal(bfs_cache_submit(c, items, 3, count_done, &done), 0);
	assert_int_equal(bfs_cache_submit(c, items + 3, 1, count_done, &done), 0);
	bfs_cache_flush(c);
	assert_int_equal(done, 2);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.damaged, 0);
	assert_int_equal(st.write_errors, 0);
	assert_int_equal(st.inserts, 2);
	assert_int_equal(st.duplicates, 2);
	bfs_cache_close(c);
	snprintf(marker, sizeof(marker), "%s/damaged", dir);
	assert_int_not_equal(access(marker, F_OK), 0);

	/* the reopen keeps the file and serves the value */
	c = open_cache(dir, FP_A, 0);
	assert_null(bfs_cache_notice(c));
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "d", 7, BIG), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.damaged, 0);
	bfs_cache_close(c);
	free(data);
	remove_dir(dir);
}

/* ---- index cache ---------------------------------------------------------------- */

/* A submission whose done() (called on the writer thread) holds the
 * writer until the test opens the gate: what is queued meanwhile is taken
 * together.  Waits at most 60 s, then lets go (the test's checks decide). */
struct gate {
	int open;
	int done;
};

static void gate_done(void *ctx)
{
	struct gate *g = ctx;

	for (int i = 0; i < 60000 && !__atomic_load_n(&g->open, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	__atomic_store_n(&g->done, 1, __ATOMIC_SEQ_CST);
}



static void test_cache_index_round_trips_and_misses_on_another_identity(void **s)
{
	char dir[64];
	bfs_cache *c;
	void *blob;
	size_t len;
	uint8_t idx[5000];
	bfs_cache_stats st;

	make_dir(dir);
	pattern(idx, sizeof(idx), 77);
	c = open_cache(dir, FP_A, 0);
	assert_int_equal(bfs_cache_index_get(c, SRC, "x.tfrecord", ST(10, 20), &blob, &len), -ENOENT);
	assert_int_equal(bfs_cache_index_put(c, SRC, "x.tfrecord", ST(10, 20), idx, sizeof(idx)), 0);
	assert_int_equal(bfs_cache_index_put(c, SRC, "empty.tfrecord", ST(0, 20), NULL, 0), 0);
	bfs_cache_flush(c);
	bfs_cache_close(c);

	c = open_cache(dir, FP_B, 0); /* indexes do not depend on settings */
	assert_int_equal(bfs_cache_index_get(c, SRC "/", "x.tfrecord", ST(10, 20), &blob, &len), 0);
	assert_int_equal(len, sizeof(idx));
	assert_memory_equal(blob, idx, sizeof(idx));
	free(blob);
	assert_int_equal(bfs_cache_index_get(c, SRC, "empty.tfrecord", ST(0, 20), &blob, &len), 0);
	assert_int_equal(len, 0);
	free(blob);
	assert_int_equal(bfs_cache_index_get(c, SRC, "x.tfrecord", ST(11, 20), &blob, &len), -ENOENT);
	assert_int_equal(bfs_cache_index_get(c, SRC, "x.tfrecord", ST(10, 21), &blob, &len), -ENOENT);
	assert_null(blob);
	/* the same size and mtime: rewritten in place, or replaced */
	assert_int_equal(bfs_cache_index_get(c, SRC, "x.tfrecord", &(bfs_shard_stamp){ 10, 20, SHARD_INO, SHARD_CTIME + 1 }, &blob, &len), -ENOENT);
	assert_int_equal(bfs_cache_index_get(c, SRC, "x.tfrecord", &(bfs_shard_stamp){ 10, 20, SHARD_INO + 1, SHARD_CTIME }, &blob, &len), -ENOENT);
	assert_int_equal(bfs_cache_index_get(c, "/elsewhere", "x.tfrecord", ST(10, 20), &blob, &len), -ENOENT);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.index_hits, 2);
	assert_int_equal(st.index_misses, 5);
	assert_int_equal(st.index_entries, 2);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* One source's entries: its shard indexes (by path under the root) and,
 * through their identities, its samples of every fingerprint; counted,
 * then removed, and nothing of another source touched (not even one whose
 * path starts with the same letters). */
static void test_cache_source_counts_and_removes_one_sources_entries(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_source_info in;
	bfs_cache_reader *r;
	uint8_t idx[100];
	void *blob;
	size_t len;

	make_dir(dir);
	pattern(idx, sizeof(idx), 5);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "a/x", 0, 4, SMALL, 2);
	put_range(c, FP_B, "a/x", 0, 2, SMALL, 2);
	put_range(c, FP_A, "b/y", 0, 3, SMALL, 3);
	put_range(c, FP_A, "ab/z", 0, 1, SMALL, 1);
	assert_int_equal(bfs_cache_index_put(c, SRC, "a/x", ST(1000000, 1), idx, sizeof(idx)), 0);
	assert_int_equal(bfs_cache_index_put(c, SRC "/", "b/y", ST(1000000, 1), idx, sizeof(idx)), 0);
	assert_int_equal(bfs_cache_index_put(c, SRC, "ab/z", ST(1000000, 1), idx, sizeof(idx)), 0);
	bfs_cache_flush(c);

	assert_int_equal(bfs_cache_source(c, SRC "/a", 0, &in), 0);
	assert_int_equal(in.shards, 1);
	assert_int_equal(in.samples, 6);
	assert_true(in.sample_bytes >= 6 * SMALL);
	assert_true(in.index_bytes >= sizeof(idx));
	assert_int_equal(bfs_cache_source(c, SRC, 0, &in), 0);
	assert_int_equal(in.shards, 3);
	assert_int_equal(in.samples, 10);

	assert_int_equal(bfs_cache_source(c, SRC "/a/", 1, &in), 0);
	assert_int_equal(in.shards, 1);
	assert_int_equal(in.samples, 6);
	assert_int_equal(bfs_cache_source(c, SRC "/a", 0, &in), 0);
	assert_int_equal(in.shards + in.samples, 0);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "a/x", 0, SMALL), -ENOENT);
	assert_int_equal(get_check(r, FP_B, "a/x", 1, SMALL), -ENOENT);
	assert_int_equal(get_check(r, FP_A, "b/y", 2, SMALL), 0);
	assert_int_equal(get_check(r, FP_A, "ab/z", 0, SMALL), 0);
	bfs_cache_reader_destroy(r);
	assert_int_equal(bfs_cache_index_get(c, SRC, "a/x", ST(1000000, 1), &blob, &len), -ENOENT);
	assert_int_equal(bfs_cache_index_get(c, SRC, "ab/z", ST(1000000, 1), &blob, &len), 0);
	free(blob);
	assert_int_equal(bfs_cache_source(c, "", 0, &in), -EINVAL);
	assert_int_equal(bfs_cache_source(c, "/", 0, &in), -EINVAL);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* The same shard indexed twice in one run of index puts (scanned again,
 * changed in between) meets its first index inside the writer's own
 * transaction: replaced, the old identity's samples dropped, and neither a
 * write error nor "damaged" (with MDB_WRITEMAP that index's pages lie in
 * the shared map, flagged dirty by LMDB until the commit). */
static void test_cache_a_shard_indexed_twice_in_one_run_is_replaced_not_damage(void **s)
{
	char dir[64], marker[96];
	bfs_cache *c;
	bfs_cache_stats st;
	bfs_cache_item it;
	struct gate g = { 0, 0 };
	uint8_t *idx = malloc(3 * 5000), *data = malloc(SMALL);
	void *blob;
	size_t len;

	make_dir(dir);
	pattern(idx, 3 * 5000, 78); /* 5000 bytes each: overflow pages */
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "x.tfrecord", 0, 3, SMALL, 3); /* mtime 1 */
	it.key = key_for(FP_A, "y", 1, 0);
	it.label = 0;
	it.data = data;
	it.len = SMALL;
	pattern(data, SMALL, 0);
	assert_int_equal(bfs_cache_submit(c, &it, 1, gate_done, &g), 0);
	/* queued while the writer waits in gate_done: one run */
	assert_int_equal(bfs_cache_index_put(c, SRC, "x.tfrecord", ST(1000000, 1), idx, 5000), 0);
	assert_int_equal(bfs_cache_index_put(c, SRC, "x.tfrecord", ST(1000000, 2), idx + 5000, 5000), 0);
	assert_int_equal(bfs_cache_index_put(c, SRC, "x.tfrecord", ST(1000000, 2), idx + 10000, 5000), 0);
	__atomic_store_n(&g.open, 1, __ATOMIC_SEQ_CST);
	bfs_cache_flush(c);
	assert_true(__atomic_load_n(&g.done, __ATOMIC_SEQ_CST));
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.damaged, 0);
	assert_int_equal(st.write_errors, 0);
	assert_int_equal(st.evictions, 3);   /* the samples of mtime 1 */
	assert_int_equal(st.entries, 1);     /* "y" */
	assert_int_equal(st.index_entries, 1);
	bfs_cache_close(c);
	snprintf(marker, sizeof(marker), "%s/damaged", dir);
	assert_int_not_equal(access(marker, F_OK), 0);

	c = open_cache(dir, FP_A, 0);
	assert_null(bfs_cache_notice(c));
	assert_int_equal(bfs_cache_index_get(c, SRC, "x.tfrecord", ST(1000000, 2), &blob, &len), 0);
	assert_int_equal(len, 5000);
	assert_memory_equal(blob, idx + 10000, 5000);
	free(blob);
	bfs_cache_close(c);
	free(idx);
	free(data);
	remove_dir(dir);
}

static void test_cache_index_of_a_changed_shard_drops_its_old_samples(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	uint8_t buf[SMALL];
	int64_t label;
	bfs_sample_identity id = { "m.tfrecord", 1000000, 1, 0, 5000, SHARD_INO, SHARD_CTIME };
	bfs_cache_key k;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "m.tfrecord", 0, 5, SMALL, 5); /* mtime 1 */
	put_range(c, FP_A, "other", 0, 3, SMALL, 3);
	assert_int_equal(bfs_cache_index_put(c, SRC, "m.tfrecord", ST(1000000, 1), "i1", 2), 0);
	bfs_cache_flush(c);
	bfs_cache_close(c);
	c = open_cache(dir, FP_B, 0);
	put_range(c, FP_B, "m.tfrecord", 0, 2, SMALL, 2); /* other settings */
	/* the shard changed (mtime 2): a remount rescans and stores again */
	assert_int_equal(bfs_cache_index_put(c, SRC, "m.tfrecord", ST(1000000, 2), "i2", 2), 0);
	bfs_cache_flush(c);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 7);   /* 5 of FP_A, 2 of FP_B */
	assert_int_equal(st.entries, 3);     /* "other" is untouched */
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(bfs_cache_key_make(&k, FP_B, SRC, &id), 0);
	assert_int_equal(bfs_cache_get(r, &k, buf, SMALL, &label), -ENOENT);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* The shard's mtime was set back after a rewrite: only its ctime tells. */
static void test_cache_index_of_a_shard_with_its_mtime_set_back_drops_its_old_samples(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_stats st;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "m.tfrecord", 0, 4, SMALL, 4);
	assert_int_equal(bfs_cache_index_put(c, SRC, "m.tfrecord", ST(1000000, 1), "i1", 2), 0);
	bfs_cache_flush(c);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 0);
	assert_int_equal(bfs_cache_index_put(c, SRC, "m.tfrecord", &(bfs_shard_stamp){ 1000000, 1, SHARD_INO, SHARD_CTIME + 1 }, "i2", 2), 0);
	bfs_cache_flush(c);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 4);
	assert_int_equal(st.entries, 0);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_index_put_makes_room_in_a_full_cache(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_stats st;
	static uint8_t idx[1 << 20];
	void *blob;
	size_t len;

	make_dir(dir);
	c = open_cache(dir, FP_A, 8ull << 20);
	put_range(c, FP_A, "full", 0, 30, BIG, 2);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.full, 1);
	pattern(idx, sizeof(idx), 3);
	assert_int_equal(bfs_cache_index_put(c, SRC, "new.tfrecord", ST(5, 6), idx, sizeof(idx)), 0);
	bfs_cache_flush(c);
	assert_int_equal(bfs_cache_index_get(c, SRC, "new.tfrecord", ST(5, 6), &blob, &len), 0);
	assert_int_equal(len, sizeof(idx));
	assert_memory_equal(blob, idx, len);
	free(blob);
	bfs_cache_get_stats(c, &st);
	assert_true(st.evictions >= 1);   /* a sample or two made way */
	assert_int_equal(st.write_errors, 0);
	assert_true(file_size(dir, "data.mdb") <= (8ull << 20));
	bfs_cache_close(c);
	remove_dir(dir);
}

/* The remount goal: 1,000 shard indexes (ImageNet-sized: 1,252 records
 * of 24 bytes each) read back in well under a second. */
static void test_cache_thousand_shard_indexes_read_back(void **s)
{
	char dir[64], name[64];
	bfs_cache *c;
	static uint8_t idx[1252 * 24];
	void *blob;
	size_t len;
	double t0, dt;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "train-%05d-of-01000", i);
		pattern(idx, sizeof(idx), (uint64_t)i);
		assert_int_equal(bfs_cache_index_put(c, SRC, name, ST(140000000, i), idx, sizeof(idx)), 0);
	}
	bfs_cache_flush(c);
	bfs_cache_close(c);
	c = open_cache(dir, FP_A, 0);
	t0 = now_s();
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "train-%05d-of-01000", i);
		assert_int_equal(bfs_cache_index_get(c, SRC, name, ST(140000000, i), &blob, &len), 0);
		assert_int_equal(len, sizeof(idx));
		free(blob);
	}
	dt = now_s() - t0;
	/* printed, never asserted: timing belongs to make bench (the
	 * remount row), not to unit tests on shared machines */
	print_message("  1000 shard indexes of %zu bytes: read back in %.1f ms\n",
		      sizeof(idx), dt * 1e3);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* ---- clear and tools -------------------------------------------------------------- */

static void test_cache_clear_one_fingerprint_then_all_then_remove_files(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_stats st;
	uint64_t removed;
	bfs_cache_fp_info *fps;
	size_t n;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "c", 0, 5, SMALL, 5);
	put_range(c, FP_B, "c", 0, 3, SMALL, 3);
	assert_int_equal(bfs_cache_index_put(c, SRC, "c", ST(1, 1), "i", 1), 0);
	bfs_cache_flush(c);
	assert_int_equal(bfs_cache_clear(c, FP_B, &removed), 0);
	assert_int_equal(removed, 3);
	assert_int_equal(bfs_cache_fingerprints(c, &fps, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(fps[0].fingerprint, FP_A);
	assert_int_equal(fps[0].entries, 5);
	assert_int_equal(fps[0].bytes, 5 * (SMALL + 64)); /* the value header */
	free(fps);
	assert_int_equal(bfs_cache_remove_files(dir), -EBUSY); /* open here */
	assert_int_equal(bfs_cache_clear(c, NULL, &removed), 0);
	assert_int_equal(removed, 5);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.index_entries, 0);
	bfs_cache_close(c);
	assert_int_equal(bfs_cache_remove_files(dir), 0);
	assert_int_equal(file_size(dir, "data.mdb"), 0);
	c = open_cache(dir, FP_A, 0); /* a fresh one */
	bfs_cache_close(c);
	remove_dir(dir);
}

static void test_cache_open_replaces_unusable_files_only_when_unused(void **s)
{
	char dir[64], p[128], msg[BFS_ERRMSG_MAX];
	uint8_t junk[65536];
	bfs_cache *c = NULL;
	bfs_cache_opts o = { 0 };
	bfs_cache_reader *r;
	int fd, lk;

	make_dir(dir);
	pattern(junk, sizeof(junk), 5);
	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	/* a tool never deletes: it reports */
	o.dir = dir;
	o.admin = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), BFS_E_CORRUPT);
	/* someone else has it open: a mount reports too */
	snprintf(p, sizeof(p), "%s/users.lock", dir);
	lk = open(p, O_RDWR | O_CREAT, 0600);
	assert_int_equal(flock(lk, LOCK_SH), 0);
	o.admin = 0;
	o.fingerprint = FP_A;
	o.max_bytes = 16ull << 20;
	assert_int_equal(bfs_cache_open(&o, &c, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "in use"));
	close(lk);
	/* nobody else: the mount replaces it with an empty cache */
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	put_range(c, FP_A, "r", 0, 2, SMALL, 2);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "r", 1, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* ---- the structural check of data.mdb ------------------------------------------- */

/* Enough of LMDB's file format (64-bit, LMDB 0.9) to find what to damage:
 * pages of psize bytes, each with a 16-byte header (pgno 8, pad 2, flags
 * 2, lower 2, upper 2), node offsets from byte 16 to lower; a node is lo,
 * hi, flags, key size (2 bytes each), then the key, then the data or (flag
 * 1) its overflow page number.  Meta pages 0 and 1 hold from byte 16:
 * magic 4, version 4, address 8, map size 8, the free and the main
 * database records (48 bytes: pad 4, flags 2, depth 2, branch, leaf and
 * overflow pages, entries, root: 8 each), the last page, the txn id. */
typedef struct {
	uint8_t *m;
	size_t len, psize;
} db_image;

static uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static uint16_t ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

static void st16(uint8_t *p, uint16_t v)
{
	memcpy(p, &v, 2);
}

static void st64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static db_image image_read(const char *dir)
{
	char p[256];
	struct stat st;
	db_image im;
	int fd;

	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	im.len = (size_t)st.st_size;
	im.m = malloc(im.len);
	assert_int_equal(pread(fd, im.m, im.len, 0), (ssize_t)im.len);
	close(fd);
	memcpy(&im.psize, im.m + 16 + 24, 4);
	im.psize &= 0xffffffffu;
	return im;
}

static db_image image_copy(const db_image *im)
{
	db_image c = *im;

	c.m = malloc(im->len);
	memcpy(c.m, im->m, im->len);
	return c;
}

static void image_write(const char *dir, const db_image *im)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, im->m, im->len), (ssize_t)im->len);
	close(fd);
}

static uint8_t *im_page(const db_image *im, uint64_t pgno)
{
	assert_true((pgno + 1) * im->psize <= im->len);
	return im->m + pgno * im->psize;
}

static unsigned im_nkeys(const uint8_t *pg)
{
	return (ld16(pg + 12) - 16u) / 2;
}

static uint8_t *im_node(uint8_t *pg, unsigned i)
{
	return pg + ld16(pg + 16 + 2 * i);
}

static uint64_t im_child(const uint8_t *node)
{
	return ld16(node) | (uint64_t)ld16(node + 2) << 16 |
	       (uint64_t)ld16(node + 4) << 32;
}

/* The newest meta page's MDB_meta. */
static uint8_t *im_meta(const db_image *im)
{
	uint8_t *a = im->m + 16, *b = im->m + im->psize + 16;

	return ld64(a + 128) < ld64(b + 128) ? b : a;
}

/* The 48-byte record of a named database, in the main database's leaf. */
static uint8_t *im_dbrec(const db_image *im, const char *name)
{
	uint8_t *pg = im_page(im, ld64(im_meta(im) + 24 + 48 + 40));

	assert_int_equal(ld16(pg + 10), 0x02);
	for (unsigned i = 0; i < im_nkeys(pg); i++) {
		uint8_t *nd = im_node(pg, i);

		if (ld16(nd + 6) == strlen(name) && !memcmp(nd + 8, name, strlen(name)))
			return nd + 8 + ld16(nd + 6);
	}
	fail_msg("no database %s", name);
	return NULL;
}

/* The leftmost leaf below page pgno. */
static uint8_t *im_first_leaf(const db_image *im, uint64_t pgno)
{
	uint8_t *pg = im_page(im, pgno);

	while (ld16(pg + 10) == 0x01)
		pg = im_page(im, im_child(im_node(pg, 0)));
	assert_int_equal(ld16(pg + 10), 0x02);
	return pg;
}

static void expect_damage(const db_image *im, const char *what)
{
	char msg[BFS_ERRMSG_MAX] = "";
	int err = bfs_cache_check_image(im->m, im->len, NULL, msg);

	if (err != BFS_E_CORRUPT || !strstr(msg, what))
		fail_msg("expected BFS_E_CORRUPT with '%s', got %d: %s", what,
			 err, msg);
	free(im->m);
}

/* A cache whose samples database has a branch page over several leaves
 * of overflow values, index entries, and free pages (a fingerprint
 * cleared). */
static db_image damage_fixture(char *dir)
{
	bfs_cache *c;
	uint64_t removed;
	db_image im;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "f", 0, 300, SMALL, 50);
	put_range(c, FP_B, "f", 0, 20, SMALL, 20);
	assert_int_equal(bfs_cache_index_put(c, SRC, "f", ST(9, 9), "idx", 3), 0);
	bfs_cache_flush(c);
	assert_int_equal(bfs_cache_clear(c, FP_B, &removed), 0);
	assert_int_equal(removed, 20);
	bfs_cache_close(c);
	im = image_read(dir);
	assert_int_equal(bfs_cache_check_image(im.m, im.len, NULL, NULL), 0);
	return im;
}

static void test_cache_check_finds_hand_made_damage(void **s)
{
	char dir[64];
	db_image im = damage_fixture(dir), d;
	uint64_t sroot = ld64(im_dbrec(&im, "samples") + 40), fpg;
	uint8_t *pg, *nd, *idl;
	unsigned hi = 0;

	/* the samples root is a branch page over leaves */
	assert_int_equal(ld16(im_page(&im, sroot) + 10), 0x01);
	assert_true(im_nkeys(im_page(&im, sroot)) >= 2);

	d = image_copy(&im); /* bad page flags: a page marked dirty */
	st16(im_page(&d, sroot) + 10, 0x11);
	expect_damage(&d, "flags 0x11");

	d = image_copy(&im); /* a node offset outside the page */
	st16(im_first_leaf(&d, sroot) + 16, (uint16_t)(d.psize - 4));
	expect_damage(&d, "outside the node area");

	d = image_copy(&im); /* a key size that runs past the page */
	pg = im_first_leaf(&d, sroot);
	for (unsigned i = 1; i < im_nkeys(pg); i++)
		if (ld16(pg + 16 + 2 * i) > ld16(pg + 16 + 2 * hi))
			hi = i;
	st16(im_node(pg, hi) + 6, 500);
	expect_damage(&d, "past the end of the page");

	d = image_copy(&im); /* an overflow page number past the file */
	nd = im_node(im_first_leaf(&d, sroot), 0);
	assert_int_equal(ld16(nd + 4), 0x01); /* F_BIGDATA */
	st64(nd + 8 + 24, d.len / d.psize + 10);
	expect_damage(&d, "outside the file");

	d = image_copy(&im); /* a loop: a child that is its own parent */
	st16(im_node(im_page(&d, sroot), 1), (uint16_t)sroot);
	st16(im_node(im_page(&d, sroot), 1) + 2, (uint16_t)(sroot >> 16));
	expect_damage(&d, "reached twice");

	d = image_copy(&im); /* keys out of order */
	pg = im_first_leaf(&d, sroot);
	memcpy(im_node(pg, 1) + 8, im_node(pg, 0) + 8, 24);
	expect_damage(&d, "out of order");

	d = image_copy(&im); /* a free page that is in use */
	fpg = ld64(im_meta(&d) + 24 + 40);
	nd = im_node(im_first_leaf(&d, fpg), 0);
	idl = ld16(nd + 4) & 1 ? im_page(&d, ld64(nd + 8 + 8)) + 16 : nd + 8 + 8;
	assert_true(ld64(idl) >= 1);
	st64(idl, 1);
	st64(idl + 8, sroot);
	expect_damage(&d, "reached twice");

	d = image_copy(&im); /* a count the tree does not have */
	st64(im_dbrec(&d, "samples") + 32, 301);
	expect_damage(&d, "its record says");

	d = image_copy(&im); /* the newest meta page on the wrong side */
	st64(im_meta(&d) + 128, ld64(im_meta(&d) + 128) + 1);
	expect_damage(&d, "meta page");

	d = image_copy(&im); /* a database a batchfs cache does not have */
	nd = im_dbrec(&d, "samples") - 7;
	memcpy(nd, "sampler", 7);
	expect_damage(&d, "does not have");

	/* the same through a file and a child process */
	d = image_copy(&im);
	st16(im_page(&d, sroot) + 10, 0x02);
	image_write(dir, &d);
	free(d.m);
	{
		char msg[BFS_ERRMSG_MAX] = "";
		bfs_cache_check_info info;

		assert_int_equal(bfs_cache_check(dir, &info, msg), BFS_E_CORRUPT);
		assert_non_null(strstr(msg, "page"));
		image_write(dir, &im);
		assert_int_equal(bfs_cache_check(dir, &info, msg), 0);
		assert_int_equal(info.samples, 300);
		assert_int_equal(info.indexes, 1);
		assert_true(info.free_pages > 0);
		assert_int_equal(info.overflow_pages, 300 * 4);
		/* the pages in use, as the meta page says: the file may be
		 * longer (LMDB sizes it to the map with MDB_WRITEMAP) */
		assert_int_equal(info.pages, ld64(im_meta(&im) + 120) + 1);
		assert_true(info.pages * info.psize <= im.len);
	}
	free(im.m);
	remove_dir(dir);
}

static int die_by_signal(void *arg, bfs_cache_check_info *info, char *errmsg)
{
	raise(SIGKILL);
	return 0;
}

static int exit_early(void *arg, bfs_cache_check_info *info, char *errmsg)
{
	_exit(3);
}

static int answer(void *arg, bfs_cache_check_info *info, char *errmsg)
{
	info->samples = 7;
	bfs_seterr(errmsg, "fine");
	return 0;
}

static void test_cache_check_that_dies_is_a_verdict_not_a_crash(void **s)
{
	bfs_cache_check_info info = { 0 };
	char msg[BFS_ERRMSG_MAX] = "";

	assert_int_equal(bfs__run_isolated(die_by_signal, NULL, &info, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "signal 9"));
	assert_int_equal(bfs__run_isolated(exit_early, NULL, &info, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "before it finished"));
	assert_int_equal(bfs__run_isolated(answer, NULL, &info, msg), 0);
	assert_int_equal(info.samples, 7);
	assert_string_equal(msg, "fine");
}

static void test_cache_open_moves_a_damaged_file_aside_and_starts_afresh(void **s)
{
	char dir[64], msg[BFS_ERRMSG_MAX], name[256], p[512];
	db_image im = damage_fixture(dir);
	uint64_t sroot = ld64(im_dbrec(&im, "samples") + 40);
	bfs_cache_opts o = { 0 };
	bfs_cache *c = NULL;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	int lk;

	st16(im_node(im_page(&im, sroot), 1), (uint16_t)sroot); /* a loop */
	image_write(dir, &im);

	/* a tool reports and leaves it */
	o.dir = dir;
	o.admin = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "damaged"));
	assert_non_null(strstr(msg, "reached twice"));
	/* another process uses it: kept for it, this mount runs without */
	snprintf(p, sizeof(p), "%s/users.lock", dir);
	lk = open(p, O_RDWR | O_CREAT, 0600);
	assert_int_equal(flock(lk, LOCK_SH), 0);
	o.admin = 0;
	o.fingerprint = FP_A;
	o.max_bytes = 64ull << 20;
	assert_int_equal(bfs_cache_open(&o, &c, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "damaged"));
	assert_non_null(strstr(msg, "in use"));
	close(lk);
	damaged_copy(dir, name, sizeof(name));
	assert_string_equal(name, "");
	assert_int_equal(file_size(dir, "data.mdb"), im.len);

	/* alone: moved aside, a fresh cache, and the notice says so */
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	assert_non_null(bfs_cache_notice(c));
	assert_non_null(strstr(bfs_cache_notice(c), "damaged"));
	damaged_copy(dir, name, sizeof(name));
	assert_non_null(strstr(bfs_cache_notice(c), name));
	assert_int_equal(file_size(dir, name), im.len);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 0);
	put_range(c, FP_A, "g", 0, 2, SMALL, 2);
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "g", 1, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);
	/* a sound cache: no notice */
	c = open_cache(dir, FP_A, 0);
	assert_null(bfs_cache_notice(c));
	bfs_cache_close(c);
	/* clear removes the damaged copy too */
	assert_int_equal(bfs_cache_remove_files(dir), 0);
	damaged_copy(dir, name, sizeof(name));
	assert_string_equal(name, "");
	free(im.m);
	remove_dir(dir);
}

/* The LMDB page header in front of an overflow value is not read at open
 * (that would be a random read per sample): every get, overwrite and
 * delete checks it, since LMDB frees a value's pages by what it says. */
static void test_cache_damaged_overflow_header_is_never_served_deleted_or_overwritten(void **s)
{
	char dir[64], p[256], msg[BFS_ERRMSG_MAX], name[256];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_stats st;
	bfs_cache_entry_info info = { .code = 0 };
	bfs_cache_opts o = { 0 };
	uint64_t checked, nbad, removed;
	db_image im;
	uint8_t *pg, *nd = NULL;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "o", 0, 5, SMALL, 5);
	bfs_cache_close(c);
	im = image_read(dir);
	pg = im_first_leaf(&im, ld64(im_dbrec(&im, "samples") + 40));
	for (unsigned i = 0; i < im_nkeys(pg); i++)
		if (ld64(im_node(pg, i) + 8 + 16) == __builtin_bswap64(2))
			nd = im_node(pg, i);
	assert_non_null(nd);
	/* entry 2's value takes 4 pages; its header says 1 */
	pg = im_page(&im, ld64(nd + 8 + 24));
	assert_int_equal(ld16(pg + 10), 0x04);
	pg[12] = 1;
	pg[13] = pg[14] = pg[15] = 0;
	image_write(dir, &im);
	free(im.m);

	c = open_cache(dir, FP_A, 0); /* the tree is sound: no notice */
	assert_null(bfs_cache_notice(c));
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "o", 1, SMALL), 0);
	assert_int_equal(get_check(r, FP_A, "o", 2, SMALL), BFS_E_CORRUPT);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.damaged, 1);
	assert_int_equal(st.crc_errors, 0);
	snprintf(p, sizeof(p), "%s/damaged", dir);
	assert_int_equal(access(p, F_OK), 0);
	/* a new copy of the sample does not replace it */
	put_range(c, FP_A, "o", 2, 3, SMALL, 1);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.damaged, 2);
	assert_int_equal(st.inserts, 0);
	assert_int_equal(get_check(r, FP_A, "o", 2, SMALL), BFS_E_CORRUPT);
	/* verify reports it, and --delete leaves it */
	assert_int_equal(bfs_cache_verify(c, NULL, 1, note_bad, &info, &checked, &nbad), 0);
	assert_int_equal(nbad, 1);
	assert_int_equal(info.code, BFS_E_CORRUPT);
	assert_int_equal(info.offset, 2);
	assert_string_equal(info.db, "samples");
	/* clear stops at it instead of freeing the wrong pages (its
	 * transaction, which had deleted 0 and 1, is aborted) */
	assert_int_equal(bfs_cache_clear(c, FP_A, &removed), BFS_E_CORRUPT);
	assert_int_equal(removed, 0);
	assert_int_equal(get_check(r, FP_A, "o", 1, SMALL), 0);
	assert_int_equal(get_check(r, FP_A, "o", 3, SMALL), 0);
	bfs_cache_reader_destroy(r);
	bfs_cache_close(c);

	/* the next open that has the directory to itself rebuilds */
	o.dir = dir;
	o.admin = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "overflow page header"));
	c = open_cache(dir, FP_A, 0);
	assert_non_null(bfs_cache_notice(c));
	assert_non_null(strstr(bfs_cache_notice(c), "overflow page header"));
	damaged_copy(dir, name, sizeof(name));
	assert_true(name[0]);
	assert_int_equal(access(p, F_OK), -1);
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 0);
	bfs_cache_close(c);
	remove_dir(dir);
}

/* A key byte changed on disk in a way that keeps the tree in order is
 * structurally sound; the value's CRC covers its key, so verify finds it. */
static void test_cache_value_crc_covers_the_key(void **s)
{
	char dir[64];
	bfs_cache *c;
	bfs_cache_reader *r;
	bfs_cache_entry_info info = { .code = 0 };
	uint64_t checked, nbad;
	db_image im;
	uint8_t *pg;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "k", 0, 5, SMALL, 5);
	bfs_cache_close(c);
	im = image_read(dir);
	pg = im_first_leaf(&im, ld64(im_dbrec(&im, "samples") + 40));
	assert_int_equal(im_nkeys(pg), 5);
	im_node(pg, 4)[8 + 23] ^= 0x40; /* the last key's offset: 4 -> 68 */
	assert_int_equal(bfs_cache_check_image(im.m, im.len, NULL, NULL), 0);
	image_write(dir, &im);
	free(im.m);
	c = open_cache(dir, FP_A, 0);
	assert_null(bfs_cache_notice(c));
	assert_int_equal(bfs_cache_reader_create(c, &r), 0);
	assert_int_equal(get_check(r, FP_A, "k", 4, SMALL), -ENOENT);
	bfs_cache_reader_destroy(r);
	assert_int_equal(bfs_cache_verify(c, NULL, 0, note_bad, &info, &checked, &nbad), 0);
	assert_int_equal(checked, 5);
	assert_int_equal(nbad, 1);
	assert_int_equal(info.offset, 68);
	assert_int_equal(info.code, BFS_E_CRC);
	bfs_cache_close(c);
	remove_dir(dir);
}

static void count_bad_db(void *ctx, const bfs_cache_entry_info *e)
{
	char *seen = ctx;

	strncat(seen, e->db, 63 - strlen(seen));
	strncat(seen, " ", 63 - strlen(seen));
}

/* Verify covers the shard indexes (a key that is not its path's hash)
 * and the meta records (CRC32C over key and value), not only samples. */
static void test_cache_verify_checks_indexes_and_counters(void **s)
{
	char dir[64], seen[64] = "", msg[BFS_ERRMSG_MAX];
	bfs_cache_opts o = { 0 };
	bfs_cache *c;
	uint64_t checked, nbad;
	db_image im;
	uint8_t *pg, *nd = NULL;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "x", 0, 3, SMALL, 3);
	assert_int_equal(bfs_cache_index_put(c, SRC, "x", ST(1, 1), "idx", 3), 0);
	bfs_cache_flush(c);
	bfs_cache_close(c);
	im = image_read(dir);
	/* the shard index's key: still in order, no longer its path's */
	pg = im_first_leaf(&im, ld64(im_dbrec(&im, "index") + 40));
	assert_int_equal(im_nkeys(pg), 1);
	im_node(pg, 0)[8 + 15] ^= 0x01;
	/* the fingerprint record's last-use time */
	pg = im_first_leaf(&im, ld64(im_dbrec(&im, "meta") + 40));
	for (unsigned i = 0; i < im_nkeys(pg); i++)
		if (ld16(im_node(pg, i) + 6) == 10)
			nd = im_node(pg, i);
	assert_non_null(nd);
	nd[8 + 10 + 1] ^= 0x01;
	assert_int_equal(bfs_cache_check_image(im.m, im.len, NULL, NULL), 0);
	image_write(dir, &im);
	free(im.m);
	o.dir = dir; /* a tool: no writer to rewrite the record first */
	o.admin = 1;
	assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
	assert_int_equal(bfs_cache_verify(c, FP_A, 0, count_bad_db, seen, &checked, &nbad), 0);
	assert_int_equal(nbad, 0); /* one fingerprint's samples only */
	assert_int_equal(bfs_cache_verify(c, NULL, 0, count_bad_db, seen, &checked, &nbad), 0);
	assert_int_equal(checked, 3);
	assert_int_equal(nbad, 2);
	assert_string_equal(seen, "index meta ");
	bfs_cache_close(c);
	remove_dir(dir);
}

static void check_sound(const char *dir, const char *when)
{
	char msg[BFS_ERRMSG_MAX] = "";
	db_image im = image_read(dir);
	int err = bfs_cache_check_image(im.m, im.len, NULL, msg);

	free(im.m);
	if (err)
		fail_msg("%s: the image check says %d: %s", when, err, msg);
	err = bfs_cache_check(dir, NULL, msg);
	if (err)
		fail_msg("%s: the check says %d: %s", when, err, msg);
}

/* No false alarm: every state a cache goes through -- values inside leaf
 * pages, on one overflow page and on many, a deep tree, index puts that
 * replace and purge, a cleared fingerprint, eviction when full -- checks
 * sound, with the handle open (a pinned snapshot) and from the file. */
static void test_cache_check_finds_every_healthy_state_sound(void **s)
{
	char dir[64], name[32];
	bfs_cache *c;
	bfs_cache_stats st;
	uint64_t removed, checked, nbad;
	static uint8_t idx[40000];

	make_dir(dir);
	c = open_cache(dir, FP_A, 24ull << 20);
	check_sound(dir, "new");
	put_range(c, FP_A, "inline", 0, 3000, 100, 250);
	check_sound(dir, "3000 values inside leaf pages");
	put_range(c, FP_B, "one-page", 0, 300, 3000, 60);
	put_range(c, FP_A, "many-pages", 0, 10, SMALL, 5);
	check_sound(dir, "overflow values");
	for (int i = 0; i < 50; i++) {
		snprintf(name, sizeof(name), "s%03d", i);
		pattern(idx, sizeof(idx), (uint64_t)i);
		assert_int_equal(bfs_cache_index_put(c, SRC, name, ST(1, 1), idx, i & 1 ? sizeof(idx) : 500), 0);
	}
	bfs_cache_flush(c);
	check_sound(dir, "index puts");
	for (int i = 0; i < 50; i += 3) { /* changed shards: purges */
		snprintf(name, sizeof(name), "s%03d", i);
		assert_int_equal(bfs_cache_index_put(c, SRC, name, ST(1, 2), idx, 700), 0);
	}
	bfs_cache_flush(c);
	check_sound(dir, "replaced indexes");
	assert_int_equal(bfs_cache_clear(c, FP_B, &removed), 0);
	assert_int_equal(removed, 300);
	check_sound(dir, "a cleared fingerprint");
	put_range(c, FP_A, "full", 0, 40, BIG, 4); /* fills the 24 MiB */
	bfs_cache_get_stats(c, &st);
	assert_int_equal(st.full, 1);
	check_sound(dir, "full");
	assert_int_equal(bfs_cache_verify(c, NULL, 0, NULL, NULL, &checked, &nbad), 0);
	assert_int_equal(nbad, 0);
	bfs_cache_close(c);
	check_sound(dir, "closed");
	remove_dir(dir);
}

/* Another process commits while the check walks: the check pins its
 * snapshot with a read transaction, so it never sees a half-made tree. */
static void test_cache_check_of_a_cache_in_use_pins_its_snapshot(void **s)
{
	char dir[64], msg[BFS_ERRMSG_MAX], why[BFS_ERRMSG_MAX + 64] = "";
	int pfd[2], status, sound = 0;
	bfs_cache *c;
	pid_t pid;
	char ch;

	make_dir(dir);
	c = open_cache(dir, FP_A, 0);
	put_range(c, FP_A, "w", 0, 50, 100, 50);
	bfs_cache_close(c);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bfs_cache_opts o = { 0 };
		bfs_cache *cc;
		uint64_t removed;

		close(pfd[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
		o.dir = dir;
		o.fingerprint = FP_B;
		o.max_bytes = 64ull << 20;
		o.sync = BFS_CACHE_SYNC_NONE;
		if (bfs_cache_open(&o, &cc, NULL) || write(pfd[1], "x", 1) != 1)
			_exit(1);
		for (int round = 0;; round++) {
			put_range(cc, FP_B, "w", 0, 400, 100, 40);
			bfs_cache_clear(cc, FP_B, &removed);
		}
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &ch, 1), 1);
	close(pfd[0]);
	for (int i = 0; i < 30 && !why[0]; i++) {
		int err = bfs_cache_check(dir, NULL, msg);

		if (err != 0 && err != -EAGAIN)
			snprintf(why, sizeof(why), "check %d while another process writes: %d: %s",
				 i, err, msg);
		sound += err == 0;
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (why[0])
		fail_msg("%s", why);
	assert_true(sound > 0);
	print_message("  %d of 30 checks of a cache being written found it sound (the rest: changed too fast)\n", sound);
	remove_dir(dir);
}

/* ---- speed ----------------------------------------------------------------------- */

struct bench {
	bfs_cache *c;
	int nkeys;
	double secs;
	uint64_t bytes;
	int err;
};

static void *bench_thread(void *arg)
{
	struct bench *b = arg;
	bfs_cache_reader *r;
	uint8_t *dst = aligned_alloc(64, BIG);
	unsigned seed = (unsigned)(uintptr_t)arg;
	double t0 = now_s();
	int64_t label;

	if (bfs_cache_reader_create(b->c, &r)) {
		b->err = 1;
		return NULL;
	}
	b->bytes = 0;
	while (now_s() - t0 < b->secs) {
		for (int i = 0; i < 32; i++) {
			bfs_cache_key k = key_for(FP_A, "bench", 1,
				(uint64_t)(rand_r(&seed) % b->nkeys));

			if (bfs_cache_get(r, &k, dst, BIG, &label))
				b->err = 1;
			b->bytes += BIG;
		}
	}
	b->secs = now_s() - t0;
	bfs_cache_reader_destroy(r);
	free(dst);
	return NULL;
}

static double run_bench(bfs_cache *c, int nkeys, int threads, double secs)
{
	pthread_t th[16];
	struct bench b[16];
	double gbps = 0;

	for (int t = 0; t < threads; t++) {
		b[t] = (struct bench){ c, nkeys, secs, 0, 0 };
		pthread_create(&th[t], NULL, bench_thread, &b[t]);
	}
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(b[t].err, 0);
		gbps += b[t].bytes / b[t].secs / 1e9;
	}
	return gbps;
}

struct mbench {
	const uint8_t *pool;
	int n;
	double secs;
	double gbps;
};

static void *memcpy_thread(void *arg)
{
	struct mbench *m = arg;
	uint8_t *dst = aligned_alloc(64, BIG);
	unsigned seed = 7;
	uint64_t bytes = 0;
	double t0 = now_s(), dt;

	while ((dt = now_s() - t0) < m->secs)
		for (int i = 0; i < 32; i++) {
			memcpy(dst, m->pool + (size_t)(rand_r(&seed) % m->n) * BIG, BIG);
			bytes += BIG;
		}
	m->gbps = bytes / dt / 1e9;
	free(dst);
	return NULL;
}

static double run_memcpy(const uint8_t *pool, int n, int threads, double secs)
{
	pthread_t th[16];
	struct mbench m[16];
	double g = 0;

	for (int t = 0; t < threads; t++) {
		m[t] = (struct mbench){ pool, n, secs, 0 };
		pthread_create(&th[t], NULL, memcpy_thread, &m[t]);
	}
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		g += m[t].gbps;
	}
	return g;
}

/* Random gets of 602,112-byte values (one 224x224x3 float32 sample) from
 * a warm environment, against plain memcpy of the same size from a pool
 * of the same total size.  BFS_CACHE_BENCH_MB sets the data size
 * (default 96 MiB), BFS_CACHE_BENCH_S the seconds per figure (0.4). */
static void test_cache_get_speed_is_reported(void **s)
{
	char dir[64];
	const char *mb = getenv("BFS_CACHE_BENCH_MB");
	const char *sec = getenv("BFS_CACHE_BENCH_S");
	int nkeys = (int)((mb ? atof(mb) : 96) * 1048576 / BIG);
	double secs = sec ? atof(sec) : 0.4;
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu > 16 ? 16 : ncpu;
	bfs_cache *c, *raw;
	bfs_cache_opts o = { 0 };
	uint8_t *pool;
	char msg[BFS_ERRMSG_MAX];
	double t0, per_call, wr[2];

	if (nkeys < 4)
		nkeys = 4;
	pool = malloc((size_t)nkeys * BIG);
	for (int i = 0; i < nkeys; i++)
		pattern(pool + (size_t)i * BIG, BIG, (uint64_t)i);
	/* the writer alone: batches of 32 samples from memory, one
	 * transaction each, the queue kept full as the engine would */
	for (int mode = 1; mode >= 0; mode--) {
		char d2[64];
		bfs_cache_item items[32];
		int done = 0;

		make_dir(d2);
		o.dir = d2;
		o.fingerprint = FP_A;
		o.max_bytes = (uint64_t)nkeys * (BIG + 8192) + (64ull << 20);
		o.sync = mode ? BFS_CACHE_SYNC_NONE : BFS_CACHE_SYNC_DATA;
		assert_int_equal(bfs_cache_open(&o, &c, msg), 0);
		t0 = now_s();
		for (int i = 0; i < nkeys; i += 32) {
			int n = nkeys - i < 32 ? nkeys - i : 32;

			for (int j = 0; j < n; j++) {
				items[j].key = key_for(FP_A, "bench", 1, (uint64_t)(i + j));
				items[j].label = i + j;
				items[j].data = pool + (size_t)(i + j) * BIG;
				items[j].len = BIG;
			}
			while (bfs_cache_submit(c, items, (size_t)n, count_done, &done) == -EAGAIN)
				bfs_cache_flush(c);
		}
		bfs_cache_flush(c);
		wr[mode] = (double)nkeys * BIG / (now_s() - t0) / 1e9;
		if (mode) {
			bfs_cache_close(c);
			remove_dir(d2);
		} else {
			strcpy(dir, d2);
		}
	}
	memset(&o, 0, sizeof(o));
	o.dir = dir;
	o.fingerprint = FP_A;
	o.skip_crc = 1;
	assert_int_equal(bfs_cache_open(&o, &raw, msg), 0);

	/* the fixed cost of a get: renew + lookup + reset, on a miss */
	{
		bfs_cache_reader *r;
		bfs_cache_key k = key_for(FP_A, "absent", 1, 0);
		uint8_t b[16];
		int64_t l;
		const int n = 200000;

		assert_int_equal(bfs_cache_reader_create(c, &r), 0);
		t0 = now_s();
		for (int i = 0; i < n; i++)
			bfs_cache_get(r, &k, b, sizeof(b), &l);
		per_call = (now_s() - t0) / n * 1e9;
		bfs_cache_reader_destroy(r);
	}
	print_message("cache speed: %d values of %d bytes (%.0f MiB), random order\n",
		      nkeys, BIG, (double)nkeys * BIG / 1048576);
	print_message("  get, CRC checked   1 thread: %6.2f GB/s   %d threads: %6.2f GB/s\n",
		      run_bench(c, nkeys, 1, secs), threads,
		      run_bench(c, nkeys, threads, secs));
	print_message("  get, no CRC        1 thread: %6.2f GB/s   %d threads: %6.2f GB/s\n",
		      run_bench(raw, nkeys, 1, secs), threads,
		      run_bench(raw, nkeys, threads, secs));
	print_message("  memcpy             1 thread: %6.2f GB/s   %d threads: %6.2f GB/s\n",
		      run_memcpy(pool, nkeys, 1, secs), threads,
		      run_memcpy(pool, nkeys, threads, secs));
	print_message("  per-get fixed cost (txn renew + lookup + reset, a miss): %.0f ns\n",
		      per_call);
	print_message("  insert (writer, 32 per transaction): %.2f GB/s sync data (default), %.2f GB/s nosync\n",
		      wr[0], wr[1]);
	free(pool);
	bfs_cache_close(raw);
	bfs_cache_close(c);
	remove_dir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cache_get_returns_the_bytes_and_label_that_were_put),
		cmocka_unit_test(test_cache_get_of_an_unknown_key_is_a_counted_miss),
		cmocka_unit_test(test_cache_has_says_what_is_stored_without_counting),
		cmocka_unit_test(test_cache_misses_for_another_fingerprint_mtime_size_or_path),
		cmocka_unit_test(test_cache_misses_for_another_inode_or_ctime),
		cmocka_unit_test(test_cache_get_with_a_wrong_length_is_einval),
		cmocka_unit_test(test_cache_shaped_get_gives_back_length_and_shape),
		cmocka_unit_test(test_cache_get_ref_lends_the_checked_bytes_in_place_until_put_ref),
		cmocka_unit_test(test_cache_get_ref_of_a_damaged_value_is_a_counted_crc_error_lending_nothing),
		cmocka_unit_test(test_cache_get_ref_keeps_its_snapshot_while_the_cache_is_cleared_and_refilled),
		cmocka_unit_test(test_cache_of_an_older_format_is_replaced_at_open),
		cmocka_unit_test(test_cache_key_and_options_reject_bad_input),
		cmocka_unit_test(test_cache_fingerprint_folds_in_source_settings),
		cmocka_unit_test(test_cache_default_dir_follows_xdg_then_home),
		cmocka_unit_test(test_cache_entries_and_counters_persist_across_reopen),
		cmocka_unit_test(test_cache_two_handles_in_one_process_share_one_env),
		cmocka_unit_test(test_cache_child_process_writes_while_parent_reads),
		cmocka_unit_test(test_cache_readers_see_only_whole_values_while_the_writer_runs),
		cmocka_unit_test(test_cache_corrupt_value_is_a_crc_error_then_gone_then_replaced),
		cmocka_unit_test(test_cache_verify_finds_and_removes_a_corrupt_entry),
		cmocka_unit_test(test_cache_verify_of_a_multiple_of_256_entries_is_healthy),
		cmocka_unit_test(test_cache_kill_9_during_writes_leaves_only_good_entries),
		cmocka_unit_test(test_cache_kill_9_during_grouped_commits_keeps_what_was_committed),
		cmocka_unit_test(test_cache_size_limit_holds_and_keeps_the_first_entries),
		cmocka_unit_test(test_cache_idle_foreign_fingerprint_makes_room_when_full),
		cmocka_unit_test(test_cache_foreign_entries_stay_when_eviction_is_off),
		cmocka_unit_test(test_cache_a_smaller_limit_never_cuts_the_file_under_a_larger_one),
		cmocka_unit_test(test_cache_a_smaller_limit_adopts_a_larger_map_and_keeps_its_own_limit),
		cmocka_unit_test(test_cache_a_stopped_writer_blocks_nobody_past_the_lock_wait),
		cmocka_unit_test(test_cache_a_running_writer_pauses_and_says_so_while_the_lock_is_held),
		cmocka_unit_test(test_cache_an_opener_stopped_with_users_lock_blocks_nobody_past_the_wait),
		cmocka_unit_test(test_cache_full_filesystem_never_crashes_and_keeps_serving),
		cmocka_unit_test(test_cache_puts_on_a_file_system_with_no_block_left_never_fault),
		cmocka_unit_test(test_cache_full_queue_drops_and_every_done_runs_once),
		cmocka_unit_test(test_cache_a_second_submission_of_a_key_is_a_duplicate),
		cmocka_unit_test(test_cache_a_key_offered_twice_in_one_commit_is_a_duplicate_not_damage),
		cmocka_unit_test(test_cache_index_round_trips_and_misses_on_another_identity),
		cmocka_unit_test(test_cache_index_of_a_changed_shard_drops_its_old_samples),
		cmocka_unit_test(test_cache_source_counts_and_removes_one_sources_entries),
		cmocka_unit_test(test_cache_a_shard_indexed_twice_in_one_run_is_replaced_not_damage),
		cmocka_unit_test(test_cache_index_of_a_shard_with_its_mtime_set_back_drops_its_old_samples),
		cmocka_unit_test(test_cache_index_put_makes_room_in_a_full_cache),
		cmocka_unit_test(test_cache_thousand_shard_indexes_read_back),
		cmocka_unit_test(test_cache_clear_one_fingerprint_then_all_then_remove_files),
		cmocka_unit_test(test_cache_open_replaces_unusable_files_only_when_unused),
		cmocka_unit_test(test_cache_check_finds_hand_made_damage),
		cmocka_unit_test(test_cache_check_that_dies_is_a_verdict_not_a_crash),
		cmocka_unit_test(test_cache_open_moves_a_damaged_file_aside_and_starts_afresh),
		cmocka_unit_test(test_cache_damaged_overflow_header_is_never_served_deleted_or_overwritten),
		cmocka_unit_test(test_cache_value_crc_covers_the_key),
		cmocka_unit_test(test_cache_verify_checks_indexes_and_counters),
		cmocka_unit_test(test_cache_check_finds_every_healthy_state_sound),
		cmocka_unit_test(test_cache_check_of_a_cache_in_use_pins_its_snapshot),
		cmocka_unit_test(test_cache_get_speed_is_reported),
	};

	/* BFS_TEST_FILTER=pattern runs only the tests whose names match */
	if (getenv("BFS_TEST_FILTER"))
		cmocka_set_test_filter(getenv("BFS_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
