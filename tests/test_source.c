/*
 * test_source.c - how the source identifies a shard (engine/source.h): the
 * stamp that sample identities, the index store and every read carry, and
 * a shard rewritten at the same size with its mtime set back (touch -d,
 * rsync -t) known as changed all the same.
 *
 * Every test makes its own directory under /tmp and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/error.h"
#include "engine/example.h"
#include "engine/source.h"
#include "engine/tfrecord.h"

#define NREC 3

static int64_t ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* dir/a.tfrecord: NREC records whose image bytes are "img-K" padded to
 * 40 + 10 K bytes, label K, in the order order[0..NREC). */
static void write_shard(const char *dir, const int order[NREC])
{
	char path[256];
	bfs_example_builder *b;
	int fd;

	snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0644); /* in place: same inode */
	assert_true(fd >= 0);
	assert_int_equal(bfs_example_builder_create(&b), 0);
	for (int i = 0; i < NREC; i++) {
		uint8_t img[64] = { 0 };
		const uint8_t *ex;
		size_t len;

		snprintf((char *)img, sizeof(img), "img-%d", order[i]);
		bfs_example_builder_reset(b);
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", img, 40 + 10 * (size_t)order[i]), 0);
		assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label", order[i]), 0);
		assert_int_equal(bfs_example_builder_finish(b, &ex, &len), 0);
		assert_int_equal(bfs_tfrecord_write(fd, ex, len), 0);
	}
	bfs_example_builder_destroy(b);
	assert_int_equal(close(fd), 0);
}

static void stat_shard(const char *dir, struct stat *st)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
	assert_int_equal(stat(path, st), 0);
}

/* Rewrite the shard in place with its records in another order (the same
 * size, other bytes at every offset) and set its mtime back, as touch -d
 * or rsync -t does.  First wait (deadline 5 s) until the clock the kernel
 * stamps files with has moved past the shard's ctime: within one tick a
 * rewrite gets the same ctime, which no stamp can tell apart. */
static void rewrite_with_mtime_restored(const char *dir)
{
	static const int reversed[NREC] = { 2, 1, 0 };
	struct stat before, after;
	struct timespec now, times[2];
	char path[256];

	stat_shard(dir, &before);
	for (int i = 0; i < 5000; i++) {
		clock_gettime(CLOCK_REALTIME_COARSE, &now);
		if (ns(now) > ns(before.st_ctim))
			break;
		usleep(1000);
	}
	write_shard(dir, reversed);
	times[0] = before.st_atim;
	times[1] = before.st_mtim;
	snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
	assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
	stat_shard(dir, &after);
	assert_int_equal(after.st_size, before.st_size);
	assert_int_equal(ns(after.st_mtim), ns(before.st_mtim));
	assert_int_equal(after.st_ino, before.st_ino);
	assert_true(ns(after.st_ctim) != ns(before.st_ctim));
}

static void make_source_dir(char *dir)
{
	static const int order[NREC] = { 0, 1, 2 };

	strcpy(dir, "/tmp/bfs-source-XXXXXX");
	assert_non_null(mkdtemp(dir));
	write_shard(dir, order);
}

static void remove_source_dir(const char *dir)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
	unlink(path);
	assert_int_equal(rmdir(dir), 0);
}

static bfs_source *open_source(const bfs_source_opts *o)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_source *s = NULL;
	int err = bfs_source_open(o, &s, msg);

	if (err)
		fail_msg("bfs_source_open: %s: %s", bfs_strerror(err), msg);
	return s;
}

static void test_source_identity_names_the_shard_by_size_mtime_inode_and_ctime(void **state)
{
	char dir[64];
	bfs_source_opts o = { 0 };
	bfs_sample_identity id;
	struct stat st;
	bfs_source *s;

	make_source_dir(dir);
	stat_shard(dir, &st);
	o.dir = dir;
	s = open_source(&o);
	assert_int_equal(bfs_source_count(s), NREC);
	assert_int_equal(bfs_source_identity(s, 1, &id), 0);
	assert_string_equal(id.shard, "a.tfrecord");
	assert_int_equal(id.shard_size, (uint64_t)st.st_size);
	assert_int_equal(id.shard_mtime_ns, ns(st.st_mtim));
	assert_int_equal(id.shard_ino, (uint64_t)st.st_ino);
	assert_int_equal(id.shard_ctime_ns, ns(st.st_ctim));
	assert_int_equal(bfs_source_identity(s, NREC, &id), -EINVAL);
	bfs_source_close(s);
	remove_source_dir(dir);
}

static void test_source_read_refuses_a_shard_rewritten_at_the_same_size_with_its_mtime_restored(void **state)
{
	char dir[64], msg[BFS_ERRMSG_MAX] = "";
	bfs_source_opts o = { 0 };
	bfs_buf buf = { 0 };
	const uint8_t *jpeg;
	size_t len;
	int64_t label;
	bfs_source *s;

	make_source_dir(dir);
	o.dir = dir;
	s = open_source(&o);
	assert_int_equal(bfs_source_read(s, 0, &buf, &jpeg, &len, &label, msg), 0);
	assert_int_equal(label, 0);
	assert_int_equal(len, 40);
	rewrite_with_mtime_restored(dir);
	/* offset 0 now holds record 2: it must not be read as record 0 */
	assert_int_equal(bfs_source_read(s, 0, &buf, &jpeg, &len, &label, msg), -EIO);
	assert_non_null(strstr(msg, "shard changed"));
	bfs_source_close(s);
	s = open_source(&o); /* a remount re-indexes */
	assert_int_equal(bfs_source_read(s, 0, &buf, &jpeg, &len, &label, msg), 0);
	assert_int_equal(label, 2);
	assert_int_equal(len, 60);
	bfs_source_close(s);
	bfs_buf_free(&buf);
	remove_source_dir(dir);
}

/* An index store that, like the sample cache, keys a shard's index by
 * (shard, stamp) and hands it back only for an equal stamp. */
struct store {
	bfs_shard_stamp st;
	void *blob;
	size_t len;
	int gets, hits, puts;
};

static int store_get(void *ctx, const char *dir, const char *shard,
		     const bfs_shard_stamp *st, void **blob, size_t *len)
{
	struct store *m = ctx;

	m->gets++;
	if (!m->blob || memcmp(st, &m->st, sizeof(*st)))
		return -ENOENT;
	m->hits++;
	*blob = malloc(m->len);
	memcpy(*blob, m->blob, m->len);
	*len = m->len;
	return 0;
}

static int store_put(void *ctx, const char *dir, const char *shard,
		     const bfs_shard_stamp *st, const void *blob, size_t len)
{
	struct store *m = ctx;

	m->puts++;
	free(m->blob);
	m->st = *st;
	m->blob = malloc(len);
	memcpy(m->blob, blob, len);
	m->len = len;
	return 0;
}

static void test_source_keys_the_index_store_by_the_whole_stamp(void **state)
{
	char dir[64], msg[BFS_ERRMSG_MAX] = "";
	struct store m = { .gets = 0 };
	bfs_source_opts o = { 0 };
	bfs_sample_identity id0, id1;
	bfs_buf buf = { 0 };
	const uint8_t *jpeg;
	size_t len;
	int64_t label;
	struct stat st;
	bfs_source *s;

	make_source_dir(dir);
	o.dir = dir;
	o.index_get = store_get;
	o.index_put = store_put;
	o.index_ctx = &m;
	s = open_source(&o);
	stat_shard(dir, &st);
	assert_int_equal(m.puts, 1);
	assert_int_equal(m.st.size, (uint64_t)st.st_size);
	assert_int_equal(m.st.mtime_ns, ns(st.st_mtim));
	assert_int_equal(m.st.ino, (uint64_t)st.st_ino);
	assert_int_equal(m.st.ctime_ns, ns(st.st_ctim));
	assert_int_equal(bfs_source_identity(s, 0, &id0), 0);
	bfs_source_close(s);

	s = open_source(&o); /* unchanged: the stored index is used */
	assert_int_equal(bfs_source_nindex_hits(s), 1);
	bfs_source_close(s);

	rewrite_with_mtime_restored(dir);
	s = open_source(&o); /* the same size and mtime: scanned again */
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	assert_int_equal(m.hits, 1);
	assert_int_equal(m.puts, 2);
	assert_int_equal(bfs_source_identity(s, 0, &id1), 0);
	assert_int_equal(id1.shard_size, id0.shard_size);
	assert_int_equal(id1.shard_mtime_ns, id0.shard_mtime_ns);
	assert_true(id1.shard_ctime_ns != id0.shard_ctime_ns);
	assert_int_equal(bfs_source_read(s, 0, &buf, &jpeg, &len, &label, msg), 0);
	assert_int_equal(label, 2);
	bfs_source_close(s);
	bfs_buf_free(&buf);
	free(m.blob);
	remove_source_dir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_source_identity_names_the_shard_by_size_mtime_inode_and_ctime),
		cmocka_unit_test(test_source_read_refuses_a_shard_rewritten_at_the_same_size_with_its_mtime_restored),
		cmocka_unit_test(test_source_keys_the_index_store_by_the_whole_stamp),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
