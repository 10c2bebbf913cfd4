/*
 * test_source.c - the source layer (engine/source.h): how it identifies a
 * shard (the stamp that sample identities, the index store and every read
 * carry, and a shard rewritten at the same size with its mtime set back
 * known as changed all the same); the TFRecord, ImageFolder and WebDataset
 * tar layouts and how --format auto tells them apart; sort order; labels;
 * the bytes read back; problems found while indexing; and the index store
 * hooks.
 *
 * Test data is made here: JPEGs encoded with TurboJPEG, TFRecords written
 * with the project's own writer, tars built byte by byte.  Every test makes
 * its own directory under /tmp and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/source.h"
#include "engine/formats/tfrecord.h"
#include "engine/storage/shardcache.h"
#include "engine/storage/storage.h"

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

/* ==================================================================== */
/* Beyond identity: formats and their detection, sort order, labels,    */
/* reading, problems found while indexing, and the index store hooks.   */

/* ---- test data ------------------------------------------------------ */

/* Each test below runs in a fresh directory of its own, *state, made
 * before it and removed after it, even when it fails. */
static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	return remove(path);
}

static int tmp_dir_setup(void **state)
{
	char *dir = malloc(64);

	if (!dir)
		return -1;
	strcpy(dir, "/tmp/bfs-source-XXXXXX");
	if (!mkdtemp(dir)) {
		free(dir);
		return -1;
	}
	*state = dir;
	return 0;
}

static int tmp_dir_teardown(void **state)
{
	int err = nftw(*state, remove_one, 16, FTW_DEPTH | FTW_PHYS);

	free(*state);
	return err;
}

static void path_of(char *out, size_t cap, const char *dir, const char *rel)
{
	assert_true(snprintf(out, cap, "%s/%s", dir, rel) < (int)cap);
}

static void subdir_put(const char *dir, const char *rel)
{
	char path[256];

	path_of(path, sizeof(path), dir, rel);
	assert_int_equal(mkdir(path, 0755), 0);
}

static void file_put(const char *dir, const char *rel, const void *data,
		     size_t len)
{
	char path[256];
	int fd;

	path_of(path, sizeof(path), dir, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

static void file_chmod(const char *dir, const char *rel, mode_t mode)
{
	char path[256];

	path_of(path, sizeof(path), dir, rel);
	assert_int_equal(chmod(path, mode), 0);
}

static off_t file_size(const char *dir, const char *rel)
{
	char path[256];
	struct stat st;

	path_of(path, sizeof(path), dir, rel);
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static void file_truncate(const char *dir, const char *rel, off_t size)
{
	char path[256];

	path_of(path, sizeof(path), dir, rel);
	assert_int_equal(truncate(path, size), 0);
}

/* XOR one byte of a file with x. */
static void file_flip(const char *dir, const char *rel, off_t at, uint8_t x)
{
	char path[256];
	uint8_t c;
	int fd;

	path_of(path, sizeof(path), dir, rel);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, at), 1);
	c ^= x;
	assert_int_equal(pwrite(fd, &c, 1, at), 1);
	assert_int_equal(close(fd), 0);
}

/* A 16 x 8 RGB JPEG whose pixels depend on seed, malloc()ed. */
static uint8_t *jpeg_new(int seed, size_t *len)
{
	enum { W = 16, H = 8 };
	unsigned char px[W * H * 3], *tjbuf = NULL;
	unsigned long tjlen = 0;
	tjhandle tj = tjInitCompress();
	uint8_t *out;

	assert_non_null(tj);
	for (int i = 0; i < W * H; i++) {
		px[3 * i] = (unsigned char)(i * 7 + seed * 31);
		px[3 * i + 1] = (unsigned char)(i * 3 + seed * 17);
		px[3 * i + 2] = (unsigned char)(seed * 53);
	}
	if (tjCompress2(tj, px, W, 0, H, TJPF_RGB, &tjbuf, &tjlen, TJSAMP_444,
			90, 0) != 0)
		fail_msg("tjCompress2: %s", tjGetErrorStr2(tj));
	tjDestroy(tj);
	out = malloc(tjlen);
	assert_non_null(out);
	memcpy(out, tjbuf, tjlen);
	tjFree(tjbuf);
	*len = tjlen;
	return out;
}

/* A JPEG file at dir/rel made from seed; its bytes, malloc()ed, in *jpeg
 * when jpeg is not NULL. */
static void jpeg_put(const char *dir, const char *rel, int seed,
		     uint8_t **jpeg, size_t *len)
{
	size_t n;
	uint8_t *j = jpeg_new(seed, &n);

	file_put(dir, rel, j, n);
	if (jpeg) {
		*jpeg = j;
		*len = n;
	} else {
		free(j);
	}
}

/* An empty TFRecord shard dir/rel, open for appending records. */
static int tfr_create(const char *dir, const char *rel)
{
	char path[256];
	int fd;

	path_of(path, sizeof(path), dir, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	assert_true(fd >= 0);
	return fd;
}

/* Append one Example holding bytes feature image_key and (unless
 * label_key is NULL) int64 feature label_key. */
static void tfr_append(int fd, const char *image_key, const void *img,
		       size_t img_len, const char *label_key, int64_t label)
{
	bfs_example_builder *b;
	const uint8_t *ex;
	size_t len;

	assert_int_equal(bfs_example_builder_create(&b), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, image_key, img, img_len), 0);
	if (label_key)
		assert_int_equal(bfs_example_builder_add_int64(b, label_key, label), 0);
	assert_int_equal(bfs_example_builder_finish(b, &ex, &len), 0);
	assert_int_equal(bfs_tfrecord_write(fd, ex, len), 0);
	bfs_example_builder_destroy(b);
}

/* dir/rel with n records labeled labels[0..n), each holding the image
 * bytes "REL:K" (not a JPEG: the source never decodes). */
static void tfr_put(const char *dir, const char *rel, const int64_t *labels,
		    int n)
{
	int fd = tfr_create(dir, rel);

	for (int k = 0; k < n; k++) {
		char img[128];

		snprintf(img, sizeof(img), "%s:%d", rel, k);
		tfr_append(fd, "image/encoded", img, strlen(img),
			   "image/class/label", labels[k]);
	}
	assert_int_equal(close(fd), 0);
}

/* File offset of the header of record k of dir/rel. */
static off_t tfr_record_at(const char *dir, const char *rel, int k)
{
	char path[256];
	uint64_t len;
	off_t at = 0;
	int fd;

	path_of(path, sizeof(path), dir, rel);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	for (int i = 0; i < k; i++) {
		/* the u64 length field, little-endian like this host */
		assert_int_equal(pread(fd, &len, 8, at), 8);
		at += BFS_TFRECORD_HEADER + (off_t)len + BFS_TFRECORD_FOOTER;
	}
	assert_int_equal(close(fd), 0);
	return at;
}

/* A tar archive being built in memory: ustar members, then written out. */
typedef struct {
	uint8_t *p;
	size_t len;
} tar_buf;

static void tar_bytes(tar_buf *t, const void *d, size_t n)
{
	t->p = realloc(t->p, t->len + n + 1);
	assert_non_null(t->p);
	if (d)
		memcpy(t->p + t->len, d, n);
	else
		memset(t->p + t->len, 0, n);
	t->len += n;
}

static void tar_member(tar_buf *t, const char *name, const void *d, size_t n)
{
	uint8_t h[512] = { 0 };
	unsigned sum = 0;

	assert_true(strlen(name) < 100);
	memcpy(h, name, strlen(name));
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)n);
	memcpy(h + 136, "14700000000", 12);
	h[156] = '0';
	memcpy(h + 257, "ustar\0" "00", 8);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
	tar_bytes(t, h, sizeof(h));
	tar_bytes(t, d, n);
	if (n % 512)
		tar_bytes(t, NULL, 512 - n % 512);
}

static void tar_text(tar_buf *t, const char *name, const char *text)
{
	tar_member(t, name, text, strlen(text));
}

/* End the archive, write it to dir/rel and free it. */
static void tar_put(tar_buf *t, const char *dir, const char *rel)
{
	tar_bytes(t, NULL, 1024);
	file_put(dir, rel, t->p, t->len);
	free(t->p);
	t->p = NULL;
	t->len = 0;
}

/* ---- opening and reading ------------------------------------------- */

static bfs_source *open_dir(const char *dir, bfs_format format)
{
	bfs_source_opts o = { .dir = dir, .format = format };

	return open_source(&o);
}

/* bfs_source_open that must fail: its error; msg gets the message. */
static int open_error(const bfs_source_opts *o, char *msg)
{
	bfs_source *s = (bfs_source *)&s; /* must come back NULL */
	int err;

	msg[0] = '\0';
	err = bfs_source_open(o, &s, msg);
	assert_null(s);
	return err;
}

static int open_dir_error(const char *dir, bfs_format format, char *msg)
{
	bfs_source_opts o = { .dir = dir, .format = format };

	return open_error(&o, msg);
}

/* The label of sample i, which must read. */
static int64_t label_of(bfs_source *s, uint64_t i)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_buf buf = { 0 };
	const uint8_t *jpeg;
	size_t len;
	int64_t label = INT64_MIN;
	int err = bfs_source_read(s, i, &buf, &jpeg, &len, &label, msg);

	bfs_buf_free(&buf);
	if (err)
		fail_msg("read %llu: %s: %s", (unsigned long long)i,
			 bfs_strerror(err), msg);
	return label;
}

/* Read sample i and compare its bytes with want[0..want_len). */
static void assert_sample_bytes(bfs_source *s, uint64_t i, const void *want,
				size_t want_len)
{
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_buf buf = { 0 };
	const uint8_t *jpeg;
	size_t len;
	int64_t label;
	int err = bfs_source_read(s, i, &buf, &jpeg, &len, &label, msg);

	if (err)
		fail_msg("read %llu: %s: %s", (unsigned long long)i,
			 bfs_strerror(err), msg);
	assert_int_equal(len, want_len);
	assert_non_null(jpeg);
	assert_memory_equal(jpeg, want, want_len);
	bfs_buf_free(&buf);
}

/* Read sample i, which must fail: the error; msg gets the message.  (What
 * a failed read leaves in *jpeg is not part of the contract.) */
static int read_error(bfs_source *s, uint64_t i, char *msg)
{
	bfs_buf buf = { 0 };
	const uint8_t *jpeg;
	size_t len;
	int64_t label;
	int err;

	msg[0] = '\0';
	err = bfs_source_read(s, i, &buf, &jpeg, &len, &label, msg);
	bfs_buf_free(&buf);
	assert_int_not_equal(err, 0);
	return err;
}

/* Does the scan error list hold one for shard, with text holding what? */
static int has_scan_error(const bfs_source *s, const char *shard,
			  const char *what)
{
	for (size_t i = 0; i < bfs_source_nscan_errors(s); i++)
		if (!strcmp(bfs_source_scan_error_shard(s, i), shard) &&
		    strstr(bfs_source_scan_error(s, i), what))
			return 1;
	return 0;
}

/* ---- class names of TFRecord shards --------------------------------- */

/* Append a record with label (unless label_key is NULL), a name under
 * name_key (unless NULL) and an image of img_len bytes written first, as
 * TensorFlow's ImageNet records have it, or last. */
static void tfr_append_named(int fd, const char *label_key, int64_t label,
			     const char *name_key, const char *name,
			     size_t img_len, int image_first)
{
	static uint8_t img[65536];
	bfs_example_builder *b;
	const uint8_t *ex;
	size_t len;

	assert_true(img_len <= sizeof(img));
	memset(img, 0xab, img_len);
	assert_int_equal(bfs_example_builder_create(&b), 0);
	if (image_first)
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", img, img_len), 0);
	if (name_key)
		assert_int_equal(bfs_example_builder_add_bytes(b, name_key, name,
							       strlen(name)), 0);
	if (label_key)
		assert_int_equal(bfs_example_builder_add_int64(b, label_key, label), 0);
	if (!image_first)
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", img, img_len), 0);
	assert_int_equal(bfs_example_builder_finish(b, &ex, &len), 0);
	assert_int_equal(bfs_tfrecord_write(fd, ex, len), 0);
	bfs_example_builder_destroy(b);
}

static void put_named(const char *dir, const char *rel, const char *name_key,
		      const int64_t *labels, const char *const *names, int n)
{
	int fd = tfr_create(dir, rel);

	for (int k = 0; k < n; k++)
		tfr_append_named(fd, "image/class/label", labels[k], name_key,
				 names[k], k % 2 ? 30000 : 100, k % 2);
	assert_int_equal(close(fd), 0);
}

static void test_source_names_tfrecord_classes_from_the_synsets_of_the_records(void **state)
{
	static const int64_t la[] = { 0, 3, 0 }, lb[] = { 1, 3 };
	static const char *const na[] = { "n0", "n3", "n0" }, *const nb[] = { "n1", "n3" };
	const char *dir = *state;
	bfs_source *s;

	put_named(dir, "a.tfrecord", "image/class/synset", la, na, 3);
	put_named(dir, "b.tfrecord", "image/class/synset", lb, nb, 2);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nclasses(s), 4);
	assert_string_equal(bfs_source_class_name(s, 0), "n0");
	assert_string_equal(bfs_source_class_name(s, 1), "n1");
	assert_null(bfs_source_class_name(s, 2)); /* no record has label 2 */
	assert_string_equal(bfs_source_class_name(s, 3), "n3");
	assert_string_equal(bfs_source_classes_from(s), "image/class/synset");
	assert_null(bfs_source_classes_note(s));
	bfs_source_close(s);
}

/* ---- DALI's .idx files ------------------------------------------------ */

/* Write dir/idx as tfrecord2idx does for dir/shard ("OFFSET SIZE" per
 * record); with swap, the sizes of the first two records exchanged (the
 * records still tile the shard, but the offsets are wrong). */
static void dali_put(const char *dir, const char *shard, const char *idx, int swap)
{
	char path[256], text[4096];
	uint64_t off = 0, size = (uint64_t)file_size(dir, shard), sizes[64];
	size_t n = 0, at = 0;
	int fd;

	path_of(path, sizeof(path), dir, shard);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	while (off < size) {
		uint64_t len;

		assert_int_equal(pread(fd, &len, 8, (off_t)off), 8);
		assert_true(n < 64);
		sizes[n++] = len + 16;
		off += len + 16;
	}
	close(fd);
	if (swap) {
		uint64_t t = sizes[0];

		sizes[0] = sizes[1];
		sizes[1] = t;
	}
	off = 0;
	for (size_t i = 0; i < n; i++) {
		at += (size_t)snprintf(text + at, sizeof(text) - at, "%llu %llu\n",
				       (unsigned long long)off, (unsigned long long)sizes[i]);
		off += sizes[i];
	}
	file_put(dir, idx, text, at);
}

static void test_source_indexes_a_tfrecord_shard_from_dalis_idx_beside_it(void **state)
{
	static const int64_t la[] = { 0, 1, 2 };
	static const char *const na[] = { "n0", "n1", "n2" };
	const char *dir = *state;
	struct store m = { .gets = 0 };
	bfs_source_opts o = { .dir = dir, .index_get = store_get, .index_put = store_put,
			      .index_ctx = &m };
	bfs_source *s;

	/* a -of- name, whose .idx would otherwise look like a shard by name */
	put_named(dir, "train-00000-of-00002", "image/class/synset", la, na, 3);
	put_named(dir, "train-00001-of-00002", "image/class/synset", la, na, 3);
	dali_put(dir, "train-00000-of-00002", "train-00000-of-00002.idx", 0);
	s = open_source(&o);
	assert_int_equal(bfs_source_nshards(s), 2); /* the .idx is no shard */
	assert_int_equal(bfs_source_nindex_dali(s), 1);
	assert_null(bfs_source_dali_note(s));
	assert_int_equal(bfs_source_count(s), 6);
	for (uint64_t i = 0; i < 6; i++)
		assert_int_equal(label_of(s, i), (int64_t)(i % 3));
	/* its index is not stored (DALI's file is read again next time); the
	 * scanned shard's is */
	assert_int_equal(m.puts, 1);
	/* no class names: one shard's records were never read */
	assert_int_equal(bfs_source_nclasses(s), 0);
	assert_non_null(strstr(bfs_source_classes_note(s), "DALI's train-00000-of-00002.idx"));
	bfs_source_close(s);
	free(m.blob);
}

static void test_source_finds_dalis_idx_named_after_the_shards_stem(void **state)
{
	static const int64_t la[] = { 4, 5 };
	static const char *const na[] = { "a", "b" };
	const char *dir = *state;
	bfs_source *s;

	put_named(dir, "a.tfrecord", NULL, la, na, 2);
	dali_put(dir, "a.tfrecord", "a.idx", 0);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nindex_dali(s), 1);
	assert_int_equal(label_of(s, 1), 5);
	bfs_source_close(s);
}

static void test_source_finds_dalis_idx_in_another_folder_first(void **state)
{
	static const int64_t la[] = { 4, 5 };
	static const char *const na[] = { "a", "b" };
	const char *dir = *state;
	char shards[256], idx[256];
	bfs_source_opts o = { 0 };
	bfs_source *s;

	subdir_put(dir, "shards");
	subdir_put(dir, "idx");
	put_named(dir, "shards/train-0.tfrecord", NULL, la, na, 2);
	dali_put(dir, "shards/train-0.tfrecord", "idx/train-0.idx", 0);
	file_put(dir, "shards/train-0.tfrecord.idx", "0 1\n", 4); /* beside: not asked */
	path_of(shards, sizeof(shards), dir, "shards");
	path_of(idx, sizeof(idx), dir, "idx");
	o.dir = shards;
	o.dali_dir = idx;
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_dali(s), 1);
	assert_null(bfs_source_dali_note(s));
	assert_int_equal(label_of(s, 0), 4);
	assert_int_equal(label_of(s, 1), 5);
	bfs_source_close(s);
}

static void test_source_scans_a_shard_whose_dali_idx_does_not_describe_it(void **state)
{
	static const int64_t la[] = { 0, 1, 2 };
	static const char *const na[] = { "n0", "n1", "n2" };
	const char *dir = *state;
	bfs_source *s;

	put_named(dir, "a.tfrecord", "image/class/synset", la, na, 3);
	file_put(dir, "a.tfrecord.idx", "0 116\n", 6);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nindex_dali(s), 0);
	assert_non_null(bfs_source_dali_note(s));
	assert_non_null(strstr(bfs_source_dali_note(s), "a.tfrecord.idx does not describe a.tfrecord"));
	assert_non_null(strstr(bfs_source_dali_note(s), "was scanned"));
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(bfs_source_nclasses(s), 3); /* scanned: named */
	assert_int_equal(label_of(s, 2), 2);
	bfs_source_close(s);
}

/* An index whose records tile the shard but start at the wrong places:
 * each wrong record fails its payload CRC, naming the .idx, and never
 * gives other bytes. */
static void test_source_read_through_a_wrong_dali_idx_fails_naming_it(void **state)
{
	static const int64_t la[] = { 0, 1, 2 };
	static const char *const na[] = { "n0", "n1", "n2" };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	put_named(dir, "a.tfrecord", "image/class/synset", la, na, 3);
	dali_put(dir, "a.tfrecord", "a.tfrecord.idx", 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nindex_dali(s), 1);
	for (uint64_t i = 0; i < 2; i++) {
		assert_int_equal(read_error(s, i, msg), BFS_E_CRC);
		assert_non_null(strstr(msg, "came from DALI's a.tfrecord.idx"));
	}
	assert_int_equal(label_of(s, 2), 2); /* the third record is where it says */
	bfs_source_close(s);
}

static void test_source_names_tfrecord_classes_from_text_labels_without_synsets(void **state)
{
	static const int64_t l[] = { 1, 0 };
	static const char *const n[] = { "goldfish", "tench, Tinca tinca" };
	const char *dir = *state;
	bfs_source *s;

	put_named(dir, "a.tfrecord", "image/class/text", l, n, 2);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nclasses(s), 2);
	assert_string_equal(bfs_source_class_name(s, 0), "tench, Tinca tinca");
	assert_string_equal(bfs_source_class_name(s, 1), "goldfish");
	assert_string_equal(bfs_source_classes_from(s), "image/class/text");
	bfs_source_close(s);
}

/* Classes that cannot be trusted are not given: the note says why. */
static void expect_no_classes(const char *dir, const char *why)
{
	bfs_source *s = open_dir(dir, BFS_FORMAT_AUTO);

	assert_int_equal(bfs_source_nclasses(s), 0);
	assert_null(bfs_source_classes_from(s));
	assert_non_null(bfs_source_classes_note(s));
	if (!strstr(bfs_source_classes_note(s), why))
		fail_msg("note '%s' does not say '%s'", bfs_source_classes_note(s), why);
	bfs_source_close(s);
}

static void test_source_gives_no_classes_it_cannot_trust_and_says_why(void **state)
{
	static const int64_t two[] = { 4, 4 }, big[] = { 1 << 21 };
	static const char *const names2[] = { "n4", "other" }, *const one[] = { "x" };
	const char *dir = *state;
	char path[256];
	int fd;

	put_named(dir, "a.tfrecord", "image/class/synset", two, names2, 2);
	expect_no_classes(dir, "label 4 has two names in image/class/synset");
	put_named(dir, "a.tfrecord", "image/class/synset", big, one, 1);
	expect_no_classes(dir, "too large for a class list");
	/* a labeled record without a name */
	fd = tfr_create(dir, "a.tfrecord");
	tfr_append_named(fd, "image/class/label", 0, "image/class/synset", "n0", 10, 0);
	tfr_append_named(fd, "image/class/label", 1, NULL, NULL, 10, 0);
	assert_int_equal(close(fd), 0);
	expect_no_classes(dir, "1 of 2 labeled records have no image/class/synset");
	/* one named by synset, one by text */
	fd = tfr_create(dir, "a.tfrecord");
	tfr_append_named(fd, "image/class/label", 0, "image/class/synset", "n0", 10, 0);
	tfr_append_named(fd, "image/class/label", 1, "image/class/text", "fish", 10, 0);
	assert_int_equal(close(fd), 0);
	expect_no_classes(dir, "some records name their class by image/class/synset, others by image/class/text");
	/* no names at all */
	tfr_put(dir, "a.tfrecord", two, 2);
	expect_no_classes(dir, "the records have no image/class/synset or image/class/text");
	path_of(path, sizeof(path), dir, "a.tfrecord");
	unlink(path);
}

static void test_source_reads_no_classes_with_label_key_none_or_for_unlabeled_records(void **state)
{
	static const int64_t l[] = { 0 };
	static const char *const n[] = { "n0" };
	const char *dir = *state;
	bfs_source_opts o = { .label_key = "none" };
	bfs_source *s;
	int fd;

	put_named(dir, "a.tfrecord", "image/class/synset", l, n, 1);
	o.dir = dir;
	s = open_source(&o);
	assert_int_equal(bfs_source_nclasses(s), 0);
	assert_null(bfs_source_classes_note(s));
	bfs_source_close(s);
	/* a record without a label is not a member of any class */
	fd = tfr_create(dir, "b.tfrecord");
	tfr_append_named(fd, NULL, 0, "image/class/synset", "stray", 10, 0);
	assert_int_equal(close(fd), 0);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nclasses(s), 1);
	assert_string_equal(bfs_source_class_name(s, 0), "n0");
	bfs_source_close(s);
}

/* ---- indexing progress ---------------------------------------------- */

struct prog {
	int calls, finished;
	size_t last_done, total;
	uint64_t records, bytes;
	int backwards;
};

static void on_progress(void *ctx, const bfs_source_progress *p)
{
	struct prog *g = ctx;

	g->calls++;
	if (p->done < g->last_done || p->records < g->records)
		g->backwards = 1;
	g->last_done = p->done;
	g->total = p->total;
	g->records = p->records;
	g->bytes = p->bytes;
	g->finished += p->finished;
	assert_int_equal(p->format, BFS_FORMAT_TFRECORD);
}

static void test_source_tells_the_progress_hook_how_far_indexing_has_come(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	char name[32];
	struct prog g = { 0 };
	bfs_source_opts o = { .progress = on_progress, .progress_ctx = &g };
	uint64_t bytes = 0;
	bfs_source *s;

	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "s%d.tfrecord", i);
		tfr_put(dir, name, l, 3);
		bytes += (uint64_t)file_size(dir, name);
	}
	o.dir = dir;
	s = open_source(&o);
	assert_true(g.calls >= 6); /* after each shard, and at the end */
	assert_int_equal(g.finished, 1);
	assert_false(g.backwards);
	assert_int_equal(g.last_done, 5);
	assert_int_equal(g.total, 5);
	assert_int_equal(g.records, 15);
	assert_int_equal(g.bytes, bytes);
	bfs_source_close(s);
}

/* ---- compressed files ----------------------------------------------- */

static void test_source_says_a_compressed_shard_is_compressed_and_what_to_do(void **state)
{
	static const int64_t l[] = { 1 };
	/* the first bytes of TensorFlow's ZLIB and GZIP TFRecord files */
	static const char zlib[] = "\x78\x9c\xed\xd7\x31\x0e\x80\x20\x0c\x05\xd0\x2a\x8b";
	static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x4b\x4c\x4a";
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "good.tfrecord", l, 1);
	file_put(dir, "z-00000-of-00002", zlib, sizeof(zlib) - 1);
	file_put(dir, "g-00001-of-00002", gz, sizeof(gz) - 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 1);
	assert_true(has_scan_error(s, "z-00000-of-00002",
				   "it looks like zlib data: a ZLIB-compressed TFRecord "
				   "(TFRecordDataset's compression_type \"ZLIB\"), which "
				   "batchfs does not read: decompress it first (python3 -c"));
	/* a cut GZIP TFRecord is read as one (gzindex), and its error says so */
	assert_true(has_scan_error(s, "g-00001-of-00002", "gzip"));
	assert_false(has_scan_error(s, "g-00001-of-00002", "which batchfs does not read"));
	bfs_source_close(s);
}

static void test_source_names_compressed_files_it_passed_over_when_it_finds_no_shard(void **state)
{
	static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x4b\x4c\x4a";
	static const char xz[] = "\xfd" "7zXZ\0\0\x04";
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];

	file_put(dir, "val.tar.xz", xz, sizeof(xz) - 1);
	file_put(dir, "README", "text", 4);
	assert_int_equal(open_dir_error(dir, BFS_FORMAT_AUTO, msg), BFS_E_EMPTY);
	assert_non_null(strstr(msg, "no TFRecord shards, class folders or image files found; "
			       "1 compressed file passed over: val.tar.xz looks like xz data: "
			       "a compressed file, which batchfs does not read: decompress it "
			       "first (xz -dc"));
	/* a .tar.gz is a tar shard now, not passed over */
	file_put(dir, "train.tar.gz", gz, sizeof(gz) - 1);
	assert_int_not_equal(open_dir_error(dir, BFS_FORMAT_AUTO, msg), 0);
	assert_non_null(strstr(msg, "no readable samples (train.tar.gz: in its "
			       "gzip-compressed data: member 0 at offset 0"));
	assert_null(strstr(msg, "train.tar.gz looks like"));
}

/* ---- running where a mode 000 file cannot be read ------------------- */

/* What a scenario run by as_unprivileged() saw. */
struct seen {
	int err;
	uint64_t count;
	size_t nerrs;
	char shard[256];
	char msg[BFS_ERRMSG_MAX];
};

/* Run fn in a child process that mode bits bind: as root, one that has
 * dropped to uid and gid 65534 (nobody).  The child makes sure that
 * `unreadable` (a path) cannot be opened, then runs fn, which fills *seen
 * (no cmocka calls there: they belong to this process).  Returns 0, or -1
 * after saying why when no such child can be had: the caller skips. */
static int as_unprivileged(const char *unreadable,
			   void (*fn)(void *arg, struct seen *seen),
			   void *arg, struct seen *seen)
{
	struct seen *shared = mmap(NULL, sizeof(*shared),
				   PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int status;
	pid_t pid;

	assert_true(shared != MAP_FAILED);
	memset(shared, 0, sizeof(*shared));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd;

		if (geteuid() == 0 &&
		    (setgroups(0, NULL) != 0 ||
		     setresgid(65534, 65534, 65534) != 0 ||
		     setresuid(65534, 65534, 65534) != 0))
			_exit(77);
		fd = open(unreadable, O_RDONLY);
		if (fd >= 0 || errno != EACCES)
			_exit(78);
		fn(arg, shared);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*seen = *shared;
	munmap(shared, sizeof(*shared));
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78) {
		print_message("skip: %s\n", WEXITSTATUS(status) == 77
			      ? "cannot drop root privileges to uid 65534"
			      : "a mode 000 file is readable here even without root");
		return -1;
	}
	assert_int_equal(WEXITSTATUS(status), 0);
	return 0;
}

/* ---- formats and their detection ------------------------------------ */

static void test_source_indexes_a_directory_of_tfrecord_shards(void **state)
{
	static const int64_t la[] = { 1, 2, 3 }, lb[] = { 4, 5 };
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", la, 3);
	tfr_put(dir, "b.tfrecord", lb, 2);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TFRECORD);
	assert_int_equal(bfs_source_count(s), 5);
	assert_int_equal(bfs_source_nshards(s), 2);
	assert_int_equal(bfs_source_nclasses(s), 0);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	bfs_source_close(s);
}

static void test_source_indexes_an_imagefolder_tree_one_image_per_shard(void **state)
{
	const char *dir = *state;
	bfs_source *s;

	subdir_put(dir, "cat");
	subdir_put(dir, "dog");
	jpeg_put(dir, "cat/1.jpg", 1, NULL, NULL);
	jpeg_put(dir, "cat/2.jpg", 2, NULL, NULL);
	jpeg_put(dir, "dog/1.jpg", 3, NULL, NULL);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_FOLDER);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(bfs_source_nshards(s), 3);
	assert_int_equal(bfs_source_nclasses(s), 2);
	assert_string_equal(bfs_source_class_name(s, 0), "cat");
	assert_string_equal(bfs_source_class_name(s, 1), "dog");
	assert_null(bfs_source_class_name(s, 2));
	assert_string_equal(bfs_source_shard_name(s, 2), "dog/1.jpg");
	bfs_source_close(s);
}

static void test_source_indexes_a_flat_folder_of_jpegs_as_one_class_labeled_0(void **state)
{
	const char *dir = *state;
	bfs_source *s;

	jpeg_put(dir, "x.jpg", 1, NULL, NULL);
	jpeg_put(dir, "y.jpeg", 2, NULL, NULL);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_FOLDER);
	assert_int_equal(bfs_source_count(s), 2);
	assert_string_equal(bfs_source_shard_name(s, 0), "x.jpg");
	assert_string_equal(bfs_source_shard_name(s, 1), "y.jpeg");
	assert_int_equal(label_of(s, 0), 0);
	assert_int_equal(label_of(s, 1), 0);
	/* and says so: no class names, every label 0 */
	assert_int_equal(bfs_source_nclasses(s), 0);
	assert_null(bfs_source_classes_from(s));
	assert_non_null(bfs_source_classes_note(s));
	assert_non_null(strstr(bfs_source_classes_note(s), "flat folder"));
	assert_non_null(strstr(bfs_source_classes_note(s), "label 0"));
	bfs_source_close(s);
}

static void test_source_indexes_a_directory_of_webdataset_tars(void **state)
{
	const char *dir = *state;
	tar_buf t = { 0 };
	bfs_source *s;

	tar_member(&t, "k1.jpg", "img1", 4);
	tar_text(&t, "k1.cls", "7");
	tar_member(&t, "k2.jpg", "img2", 4);
	tar_text(&t, "k2.cls", "8");
	tar_put(&t, dir, "shard-0.tar");
	tar_member(&t, "k3.jpg", "img3", 4);
	tar_text(&t, "k3.cls", "9");
	tar_put(&t, dir, "shard-1.tar");
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TAR);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(bfs_source_nshards(s), 2);
	assert_string_equal(bfs_source_shard_name(s, 1), "shard-1.tar");
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	bfs_source_close(s);
}

static void test_source_auto_finds_tfrecord_shards_by_content_whatever_their_names(void **state)
{
	static const int64_t l[] = { 1, 2 };
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "data-0", l, 2);
	tfr_put(dir, "data-1.bin", l, 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TFRECORD);
	assert_int_equal(bfs_source_nshards(s), 2);
	assert_int_equal(bfs_source_count(s), 3);
	bfs_source_close(s);
}

static void test_source_auto_finds_tar_shards_by_content_whatever_their_names(void **state)
{
	const char *dir = *state;
	tar_buf t = { 0 };
	bfs_source *s;

	tar_member(&t, "k1.jpg", "img1", 4);
	tar_text(&t, "k1.cls", "1");
	tar_put(&t, dir, "shard-0");
	tar_member(&t, "k2.jpg", "img2", 4);
	tar_text(&t, "k2.cls", "2");
	tar_put(&t, dir, "shard-1.tfrecord"); /* the name says otherwise */
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TAR);
	assert_int_equal(bfs_source_nshards(s), 2);
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	bfs_source_close(s);
}

static void test_source_auto_passes_over_files_that_are_not_shards(void **state)
{
	static const int64_t l[] = { 1, 2 };
	static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03";
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 2);
	file_put(dir, "README", "how these shards were made\n", 27);
	file_put(dir, "labels.gz", gz, sizeof(gz) - 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TFRECORD);
	assert_int_equal(bfs_source_nshards(s), 1);
	assert_string_equal(bfs_source_shard_name(s, 0), "a.tfrecord");
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	bfs_source_close(s);
}

static void test_source_auto_refuses_tfrecord_and_tar_shards_in_one_directory(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	tar_buf t = { 0 };

	tfr_put(dir, "a.tfrecord", l, 1);
	tar_member(&t, "k.jpg", "img", 3);
	tar_text(&t, "k.cls", "1");
	tar_put(&t, dir, "b.tar");
	assert_int_equal(open_dir_error(dir, BFS_FORMAT_AUTO, msg), BFS_E_FORMAT);
	assert_non_null(strstr(msg, dir));
	assert_non_null(strstr(msg, "--format"));
}

/* The header promises BFS_E_FORMAT here; what is checked is what the code
 * and the header agree on: the open fails and says which directory. */
static void test_source_open_with_a_format_that_does_not_fit_fails_naming_the_dir(void **state)
{
	static const int64_t l[] = { 1, 2 };
	static const struct {
		const char *layout;
		bfs_format wrong;
	} cases[] = {
		{ "tfrecord", BFS_FORMAT_FOLDER }, { "tfrecord", BFS_FORMAT_TAR },
		{ "folder", BFS_FORMAT_TFRECORD }, { "folder", BFS_FORMAT_TAR },
		{ "tar", BFS_FORMAT_TFRECORD },    { "tar", BFS_FORMAT_FOLDER },
	};
	const char *dir = *state;
	char path[128], msg[BFS_ERRMSG_MAX];
	tar_buf t = { 0 };

	subdir_put(dir, "tfrecord");
	tfr_put(dir, "tfrecord/a.tfrecord", l, 2);
	subdir_put(dir, "folder");
	subdir_put(dir, "folder/cls");
	jpeg_put(dir, "folder/cls/1.jpg", 1, NULL, NULL);
	subdir_put(dir, "tar");
	tar_member(&t, "k.jpg", "img", 3);
	tar_text(&t, "k.cls", "1");
	tar_put(&t, dir, "tar/a.tar");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		path_of(path, sizeof(path), dir, cases[i].layout);
		assert_true(open_dir_error(path, cases[i].wrong, msg) < 0);
		assert_non_null(strstr(msg, path));
	}
}

static void test_source_refuses_an_empty_directory_as_empty(void **state)
{
	static const bfs_format fmts[] = { BFS_FORMAT_AUTO, BFS_FORMAT_TFRECORD,
					   BFS_FORMAT_FOLDER, BFS_FORMAT_TAR };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];

	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		assert_int_equal(open_dir_error(dir, fmts[i], msg), BFS_E_EMPTY);
		assert_non_null(strstr(msg, dir));
	}
}

static void test_source_refuses_shards_that_hold_no_records_as_empty(void **state)
{
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];

	file_put(dir, "a.tfrecord", "", 0);
	file_put(dir, "b.tfrecord", "", 0);
	assert_int_equal(open_dir_error(dir, BFS_FORMAT_AUTO, msg), BFS_E_EMPTY);
	assert_non_null(strstr(msg, dir));
}

static void test_source_refuses_class_folders_without_jpegs_as_empty(void **state)
{
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];

	subdir_put(dir, "cat");
	subdir_put(dir, "dog");
	file_put(dir, "cat/notes.txt", "none yet\n", 9);
	assert_int_equal(open_dir_error(dir, BFS_FORMAT_AUTO, msg), BFS_E_EMPTY);
	assert_non_null(strstr(msg, dir));
}

static void test_source_refuses_a_missing_directory_with_enoent(void **state)
{
	const char *dir = *state;
	char path[128], msg[BFS_ERRMSG_MAX];

	path_of(path, sizeof(path), dir, "gone");
	assert_int_equal(open_dir_error(path, BFS_FORMAT_AUTO, msg), -ENOENT);
	assert_non_null(strstr(msg, path));
}

static void test_source_refuses_a_file_in_place_of_the_directory_with_enotdir(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char path[128], msg[BFS_ERRMSG_MAX];

	tfr_put(dir, "a.tfrecord", l, 1);
	path_of(path, sizeof(path), dir, "a.tfrecord");
	assert_int_equal(open_dir_error(path, BFS_FORMAT_AUTO, msg), -ENOTDIR);
	assert_non_null(strstr(msg, path));
}

static void open_as_seen(void *arg, struct seen *seen)
{
	bfs_source_opts o = { .dir = arg };
	bfs_source *s = NULL;

	seen->err = bfs_source_open(&o, &s, seen->msg);
	if (s) {
		seen->count = bfs_source_count(s);
		seen->nerrs = bfs_source_nscan_errors(s);
		if (seen->nerrs) {
			snprintf(seen->shard, sizeof(seen->shard), "%s",
				 bfs_source_scan_error_shard(s, 0));
			snprintf(seen->msg, sizeof(seen->msg), "%s",
				 bfs_source_scan_error(s, 0));
		}
	}
	bfs_source_close(s);
}

static void test_source_refuses_an_unreadable_directory_with_eacces(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char path[128];
	struct seen seen;
	int ran;

	assert_int_equal(chmod(dir, 0755), 0);
	subdir_put(dir, "shards");
	tfr_put(dir, "shards/a.tfrecord", l, 1);
	path_of(path, sizeof(path), dir, "shards");
	assert_int_equal(chmod(path, 0), 0);
	ran = as_unprivileged(path, open_as_seen, path, &seen);
	assert_int_equal(chmod(path, 0755), 0);
	if (ran != 0)
		skip();
	assert_int_equal(seen.err, -EACCES);
	assert_non_null(strstr(seen.msg, path));
}

static void test_format_name_names_each_format(void **state)
{
	assert_string_equal(bfs_format_name(BFS_FORMAT_AUTO), "auto");
	assert_string_equal(bfs_format_name(BFS_FORMAT_TFRECORD), "tfrecord");
	assert_string_equal(bfs_format_name(BFS_FORMAT_FOLDER), "folder");
	assert_string_equal(bfs_format_name(BFS_FORMAT_TAR), "tar");
}

static void test_source_dir_is_the_absolute_path_with_links_resolved(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char real[128], link[128], via[160];
	bfs_source *s;

	subdir_put(dir, "real");
	tfr_put(dir, "real/a.tfrecord", l, 1);
	path_of(real, sizeof(real), dir, "real");
	path_of(link, sizeof(link), dir, "link");
	assert_int_equal(symlink("real", link), 0);
	snprintf(via, sizeof(via), "%s/./", link);
	s = open_dir(via, BFS_FORMAT_AUTO);
	assert_non_null(realpath(real, via));
	assert_string_equal(bfs_source_dir(s), via);
	bfs_source_close(s);
}

/* ---- sort order ----------------------------------------------------- */

static void test_source_sorts_shards_bytewise_by_name(void **state)
{
	/* made in another order; a locale or natural sort would give
	 * a, a2, a10, B */
	static const char *const made[] = { "a2.tfrecord", "a.tfrecord",
					    "B.tfrecord", "a10.tfrecord" };
	static const char *const sorted[] = { "B.tfrecord", "a.tfrecord",
					      "a10.tfrecord", "a2.tfrecord" };
	const char *dir = *state;
	bfs_source *s;

	for (int i = 0; i < 4; i++) {
		int64_t l[2];

		for (int j = 0; j < 4; j++)
			if (!strcmp(made[i], sorted[j]))
				l[0] = 10 * j, l[1] = 10 * j + 1;
		tfr_put(dir, made[i], l, 2);
	}
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nshards(s), 4);
	for (int j = 0; j < 4; j++) {
		assert_string_equal(bfs_source_shard_name(s, (size_t)j), sorted[j]);
		assert_int_equal(label_of(s, 2 * (uint64_t)j), 10 * j);
		assert_int_equal(label_of(s, 2 * (uint64_t)j + 1), 10 * j + 1);
	}
	assert_null(bfs_source_shard_name(s, 4));
	bfs_source_close(s);
}

static void test_source_keeps_the_records_of_a_shard_in_file_order(void **state)
{
	static const int64_t l[] = { 7, 3, 9, 1, 5 };
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 5);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 5);
	for (uint64_t i = 0; i < 5; i++) {
		uint64_t rec = 99;
		bfs_sample_identity id;

		assert_int_equal(label_of(s, i), l[i]);
		assert_string_equal(bfs_source_sample_shard(s, i, &rec), "a.tfrecord");
		assert_int_equal(rec, i);
		assert_int_equal(bfs_source_identity(s, i, &id), 0);
		assert_int_equal(id.offset,
				 tfr_record_at(dir, "a.tfrecord", (int)i) +
					 BFS_TFRECORD_HEADER);
	}
	bfs_source_close(s);
}

static void test_source_numbers_classes_from_0_in_bytewise_name_order(void **state)
{
	static const char *const made[] = { "b2", "ant", "b10", "Zebra" };
	static const char *const sorted[] = { "Zebra", "ant", "b10", "b2" };
	const char *dir = *state;
	bfs_source *s;

	for (int i = 0; i < 4; i++) {
		char rel[64];

		subdir_put(dir, made[i]);
		snprintf(rel, sizeof(rel), "%s/img.jpg", made[i]);
		jpeg_put(dir, rel, i, NULL, NULL);
	}
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_nclasses(s), 4);
	assert_int_equal(bfs_source_count(s), 4);
	for (int j = 0; j < 4; j++) {
		char rel[64];

		snprintf(rel, sizeof(rel), "%s/img.jpg", sorted[j]);
		assert_string_equal(bfs_source_class_name(s, (size_t)j), sorted[j]);
		assert_string_equal(bfs_source_shard_name(s, (size_t)j), rel);
		assert_int_equal(label_of(s, (uint64_t)j), j);
	}
	bfs_source_close(s);
}

static void test_source_sorts_the_images_of_a_class_bytewise_by_name(void **state)
{
	static const char *const made[] = { "cls/img2.jpg", "cls/img10.jpg",
					    "cls/Img3.jpg" };
	static const char *const sorted[] = { "cls/Img3.jpg", "cls/img10.jpg",
					      "cls/img2.jpg" };
	const char *dir = *state;
	uint8_t *jpeg[3];
	size_t len[3];
	bfs_source *s;

	subdir_put(dir, "cls");
	for (int i = 0; i < 3; i++)
		jpeg_put(dir, made[i], i, &jpeg[i], &len[i]);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 3);
	for (int j = 0; j < 3; j++) {
		int i = j == 0 ? 2 : j == 1 ? 1 : 0; /* made[i] == sorted[j] */

		assert_string_equal(bfs_source_shard_name(s, (size_t)j), sorted[j]);
		assert_sample_bytes(s, (uint64_t)j, jpeg[i], len[i]);
	}
	for (int i = 0; i < 3; i++)
		free(jpeg[i]);
	bfs_source_close(s);
}

static void test_source_keeps_tar_samples_in_member_order(void **state)
{
	static const char *const keys[] = { "zz", "b", "a10", "a2" };
	const char *dir = *state;
	tar_buf t = { 0 };
	bfs_source *s;

	for (int i = 0; i < 4; i++) {
		char name[32], cls[8];

		snprintf(name, sizeof(name), "%s.jpg", keys[i]);
		tar_member(&t, name, keys[i], strlen(keys[i]));
		snprintf(name, sizeof(name), "%s.cls", keys[i]);
		snprintf(cls, sizeof(cls), "%d", i);
		tar_text(&t, name, cls);
	}
	tar_put(&t, dir, "a.tar");
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 4);
	for (int i = 0; i < 4; i++) {
		char name[32];

		snprintf(name, sizeof(name), "%s.jpg", keys[i]);
		assert_string_equal(bfs_source_member_name(s, (uint64_t)i), name);
		assert_int_equal(label_of(s, (uint64_t)i), i);
	}
	bfs_source_close(s);
}

/* ---- labels --------------------------------------------------------- */

static void test_source_reads_a_tfrecord_label_from_image_class_label_as_int64(void **state)
{
	static const int64_t l[] = { 0, 41, -2, 5000000000LL, INT64_MAX };
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 5);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	for (uint64_t i = 0; i < 5; i++)
		assert_int_equal(label_of(s, i), l[i]);
	bfs_source_close(s);
}

static void test_source_reads_the_image_key_and_label_key_it_is_given(void **state)
{
	const char *dir = *state;
	bfs_source_opts o = { 0 };
	bfs_example_builder *b;
	const uint8_t *ex;
	size_t len;
	bfs_source *s;
	int fd;

	/* the default keys hold decoys */
	fd = tfr_create(dir, "a.tfrecord");
	assert_int_equal(bfs_example_builder_create(&b), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", "decoy", 5), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label", 99), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "jpeg", "the-image", 9), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "cls", 12), 0);
	assert_int_equal(bfs_example_builder_finish(b, &ex, &len), 0);
	assert_int_equal(bfs_tfrecord_write(fd, ex, len), 0);
	bfs_example_builder_destroy(b);
	assert_int_equal(close(fd), 0);
	o.dir = dir;
	o.image_key = "jpeg";
	o.label_key = "cls";
	s = open_source(&o);
	assert_sample_bytes(s, 0, "the-image", 9);
	assert_int_equal(label_of(s, 0), 12);
	bfs_source_close(s);
}

static void test_source_reads_label_minus_1_with_label_key_none(void **state)
{
	const char *dir = *state;
	bfs_source_opts o = { .label_key = "none" };
	bfs_source *s;
	int fd;

	fd = tfr_create(dir, "a.tfrecord");
	tfr_append(fd, "image/encoded", "unlabeled-0", 11, NULL, 0);
	tfr_append(fd, "image/encoded", "unlabeled-1", 11, NULL, 0);
	assert_int_equal(close(fd), 0);
	o.dir = dir;
	s = open_source(&o);
	assert_sample_bytes(s, 1, "unlabeled-1", 11);
	assert_int_equal(label_of(s, 0), -1);
	assert_int_equal(label_of(s, 1), -1);
	bfs_source_close(s);
}

static void test_source_refuses_a_record_without_the_label_key_naming_it(void **state)
{
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_source_opts o = { .label_key = "label" };
	bfs_source *s;
	int fd;

	fd = tfr_create(dir, "a.tfrecord");
	tfr_append(fd, "image/encoded", "img", 3, "label", 1);
	tfr_append(fd, "image/encoded", "img", 3, "class", 2);
	assert_int_equal(close(fd), 0);
	o.dir = dir;
	s = open_source(&o);
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(label_of(s, 0), 1);
	assert_int_equal(read_error(s, 1, msg), BFS_E_NOKEY);
	assert_non_null(strstr(msg, "'label'"));
	bfs_source_close(s);
}

static void test_source_refuses_a_record_without_the_image_key_listing_the_keys_present(void **state)
{
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;
	int fd;

	fd = tfr_create(dir, "a.tfrecord");
	tfr_append(fd, "image/jpeg", "img", 3, "image/class/label", 1);
	assert_int_equal(close(fd), 0);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(read_error(s, 0, msg), BFS_E_NOKEY);
	assert_non_null(strstr(msg, "'image/encoded'"));
	assert_non_null(strstr(msg, "'image/jpeg'"));
	assert_non_null(strstr(msg, "'image/class/label'"));
	bfs_source_close(s);
}

static void test_source_reads_a_tar_label_from_the_keys_cls_member(void **state)
{
	const char *dir = *state;
	tar_buf t = { 0 };
	bfs_source *s;

	tar_member(&t, "k1.jpg", "img1", 4);
	tar_text(&t, "k1.cls", "3");
	tar_text(&t, "k2.cls", " 12\n"); /* .cls first, whitespace around */
	tar_member(&t, "k2.jpg", "img2", 4);
	tar_member(&t, "k3.jpeg", "img3", 4);
	tar_text(&t, "k3.txt", "a caption");
	tar_text(&t, "k3.cls", "0");
	tar_put(&t, dir, "a.tar");
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(label_of(s, 0), 3);
	assert_int_equal(label_of(s, 1), 12);
	assert_int_equal(label_of(s, 2), 0);
	bfs_source_close(s);
}

static void test_source_refuses_a_tar_sample_without_cls_as_nokey(void **state)
{
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	tar_buf t = { 0 };
	bfs_source *s;

	tar_member(&t, "k1.jpg", "img1", 4);
	tar_member(&t, "k2.jpg", "img2", 4);
	tar_text(&t, "k2.cls", "5");
	tar_put(&t, dir, "a.tar");
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(read_error(s, 0, msg), BFS_E_NOKEY);
	assert_non_null(strstr(msg, "k1.jpg"));
	assert_int_equal(label_of(s, 1), 5);
	bfs_source_close(s);
}

static void test_source_reads_a_tar_sample_without_cls_as_minus_1_with_label_key_none(void **state)
{
	const char *dir = *state;
	bfs_source_opts o = { .label_key = "none" };
	tar_buf t = { 0 };
	bfs_source *s;

	tar_member(&t, "k1.jpg", "img1", 4);
	tar_put(&t, dir, "a.tar");
	o.dir = dir;
	s = open_source(&o);
	assert_sample_bytes(s, 0, "img1", 4);
	assert_int_equal(label_of(s, 0), -1);
	bfs_source_close(s);
}

/* ---- reading -------------------------------------------------------- */

static void test_source_reads_back_the_jpeg_bytes_of_tfrecord_samples(void **state)
{
	const char *dir = *state;
	uint8_t *jpeg[4];
	size_t len[4];
	bfs_source *s;

	for (int k = 0; k < 2; k++) {
		int fd = tfr_create(dir, k ? "b.tfrecord" : "a.tfrecord");

		for (int i = 2 * k; i < 2 * k + 2; i++) {
			jpeg[i] = jpeg_new(i, &len[i]);
			tfr_append(fd, "image/encoded", jpeg[i], len[i],
				   "image/class/label", i);
		}
		assert_int_equal(close(fd), 0);
	}
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 4);
	for (int i = 3; i >= 0; i--) /* any order */
		assert_sample_bytes(s, (uint64_t)i, jpeg[i], len[i]);
	for (int i = 0; i < 4; i++)
		free(jpeg[i]);
	bfs_source_close(s);
}

static void test_source_reads_back_the_jpeg_bytes_of_folder_images(void **state)
{
	const char *dir = *state;
	uint8_t *jpeg[3];
	size_t len[3];
	bfs_source *s;

	subdir_put(dir, "a");
	subdir_put(dir, "b");
	jpeg_put(dir, "a/1.jpg", 1, &jpeg[0], &len[0]);
	jpeg_put(dir, "a/2.jpg", 2, &jpeg[1], &len[1]);
	jpeg_put(dir, "b/1.jpg", 3, &jpeg[2], &len[2]);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	for (int i = 2; i >= 0; i--)
		assert_sample_bytes(s, (uint64_t)i, jpeg[i], len[i]);
	for (int i = 0; i < 3; i++)
		free(jpeg[i]);
	bfs_source_close(s);
}

static void test_source_reads_back_the_jpeg_bytes_of_tar_members(void **state)
{
	const char *dir = *state;
	uint8_t *jpeg[3];
	size_t len[3];
	tar_buf t = { 0 };
	bfs_source *s;

	for (int i = 0; i < 3; i++) {
		char name[16];

		jpeg[i] = jpeg_new(i, &len[i]);
		snprintf(name, sizeof(name), "k%d.jpg", i);
		tar_member(&t, name, jpeg[i], len[i]);
		snprintf(name, sizeof(name), "k%d.cls", i);
		tar_text(&t, name, "1");
	}
	tar_put(&t, dir, "a.tar");
	s = open_dir(dir, BFS_FORMAT_AUTO);
	for (int i = 2; i >= 0; i--)
		assert_sample_bytes(s, (uint64_t)i, jpeg[i], len[i]);
	for (int i = 0; i < 3; i++)
		free(jpeg[i]);
	bfs_source_close(s);
}

static void test_source_says_which_shard_record_and_offset_hold_a_tfrecord_sample(void **state)
{
	static const int64_t la[] = { 1, 2 }, lb[] = { 3, 4, 5 };
	const char *dir = *state;
	char want[128], got[128];
	uint64_t rec = 99;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", la, 2);
	tfr_put(dir, "b.tfrecord", lb, 3);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_string_equal(bfs_source_sample_shard(s, 4, &rec), "b.tfrecord");
	assert_int_equal(rec, 2);
	snprintf(want, sizeof(want), "b.tfrecord record 2 (offset %llu)",
		 (unsigned long long)(tfr_record_at(dir, "b.tfrecord", 2) +
				      BFS_TFRECORD_HEADER));
	bfs_source_describe(s, 4, got, sizeof(got));
	assert_string_equal(got, want);
	assert_null(bfs_source_member_name(s, 4));
	bfs_source_close(s);
}

static void test_source_says_which_tar_and_member_hold_a_tar_sample(void **state)
{
	const char *dir = *state;
	tar_buf t = { 0 };
	char got[128];
	uint64_t rec = 99;
	bfs_source *s;

	tar_member(&t, "k1.jpg", "img1", 4);
	tar_text(&t, "k1.cls", "1");
	tar_put(&t, dir, "a.tar");
	tar_member(&t, "train/k2.jpg", "img2", 4);
	tar_text(&t, "train/k2.cls", "2");
	tar_member(&t, "train/k3.jpeg", "img3", 4);
	tar_text(&t, "train/k3.cls", "3");
	tar_put(&t, dir, "b.tar");
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_string_equal(bfs_source_member_name(s, 2), "train/k3.jpeg");
	assert_string_equal(bfs_source_sample_shard(s, 2, &rec), "b.tar");
	assert_int_equal(rec, 1);
	bfs_source_describe(s, 2, got, sizeof(got));
	assert_string_equal(got, "b.tar member train/k3.jpeg");
	bfs_source_close(s);
}

static void test_source_says_which_image_file_holds_a_folder_sample(void **state)
{
	const char *dir = *state;
	char got[128];
	uint64_t rec = 99;
	bfs_source *s;

	subdir_put(dir, "cls");
	jpeg_put(dir, "cls/a.jpg", 1, NULL, NULL);
	jpeg_put(dir, "cls/b.jpg", 2, NULL, NULL);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_string_equal(bfs_source_sample_shard(s, 1, &rec), "cls/b.jpg");
	assert_int_equal(rec, 0);
	bfs_source_describe(s, 1, got, sizeof(got));
	assert_string_equal(got, "cls/b.jpg");
	assert_null(bfs_source_member_name(s, 1));
	bfs_source_close(s);
}

static void test_source_refuses_a_sample_past_the_end(void **state)
{
	static const int64_t l[] = { 1, 2 };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX], got[128];
	uint64_t rec = 99;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 2);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(read_error(s, 2, msg), -EINVAL);
	assert_null(bfs_source_sample_shard(s, 2, &rec));
	assert_int_equal(rec, 99);
	bfs_source_describe(s, 2, got, sizeof(got));
	assert_string_equal(got, "sample 2 (out of range)");
	bfs_source_close(s);
}

static void test_source_read_checks_the_payload_crc(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 3);
	/* one byte of record 1's payload */
	file_flip(dir, "a.tfrecord", tfr_record_at(dir, "a.tfrecord", 1) +
				      BFS_TFRECORD_HEADER + 4, 0x20);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(read_error(s, 1, msg), BFS_E_CRC);
	assert_non_null(strstr(msg, "CRC"));
	assert_int_equal(label_of(s, 0), 1);
	assert_int_equal(label_of(s, 2), 3);
	bfs_source_close(s);
}

static void test_source_keeps_the_slot_of_a_record_whose_length_crc_alone_fails(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 3);
	/* record 1's length CRC; its length still holds */
	file_flip(dir, "a.tfrecord", tfr_record_at(dir, "a.tfrecord", 1) + 8, 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(read_error(s, 1, msg), BFS_E_CRC);
	assert_non_null(strstr(msg, "length CRC"));
	assert_int_equal(label_of(s, 0), 1);
	assert_int_equal(label_of(s, 2), 3);
	bfs_source_close(s);
}

/* ---- problems found while indexing, and shards that change ---------- */

static void test_source_keeps_the_records_before_a_cut_and_lists_the_cut(void **state)
{
	static const int64_t la[] = { 1, 2, 3 }, lb[] = { 4 };
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", la, 3);
	tfr_put(dir, "b.tfrecord", lb, 1);
	file_truncate(dir, "a.tfrecord", file_size(dir, "a.tfrecord") - 6);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(label_of(s, 0), 1);
	assert_int_equal(label_of(s, 1), 2);
	assert_int_equal(label_of(s, 2), 4);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	assert_string_equal(bfs_source_scan_error_shard(s, 0), "a.tfrecord");
	assert_non_null(strstr(bfs_source_scan_error(s, 0), "record 2"));
	assert_null(bfs_source_scan_error(s, 1));
	assert_null(bfs_source_scan_error_shard(s, 1));
	bfs_source_close(s);
}

static void test_source_keeps_the_records_before_a_bad_length_and_lists_it(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 3);
	/* record 1's length field: neither it nor its CRC holds */
	file_flip(dir, "a.tfrecord", tfr_record_at(dir, "a.tfrecord", 1) + 5, 0x40);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_count(s), 1);
	assert_int_equal(label_of(s, 0), 1);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	assert_true(has_scan_error(s, "a.tfrecord", "record 1"));
	assert_true(has_scan_error(s, "a.tfrecord", "length CRC"));
	bfs_source_close(s);
}

static void test_source_fails_as_empty_when_no_shard_has_a_whole_record(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];

	tfr_put(dir, "a.tfrecord", l, 1);
	file_truncate(dir, "a.tfrecord", 20);
	assert_int_equal(open_dir_error(dir, BFS_FORMAT_AUTO, msg), BFS_E_EMPTY);
	assert_non_null(strstr(msg, dir));
	assert_non_null(strstr(msg, "a.tfrecord"));
	assert_non_null(strstr(msg, "record 0"));
}

static void test_source_names_files_that_are_not_shards_by_kind_without_quoting_them(void **state)
{
	static const int64_t l[] = { 1, 2 };
	static const char secret[] = "SECRET-TOKEN-1234 root:$6$salt$hash:19000\n";
	static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
				 "SECRET-TOKEN-1234";
	const char *dir = *state;
	bfs_source *s;

	tfr_put(dir, "good.tfrecord", l, 2);
	file_put(dir, "README", secret, sizeof(secret) - 1);
	file_put(dir, "data.gz", gz, sizeof(gz) - 1);
	s = open_dir(dir, BFS_FORMAT_TFRECORD); /* so that they are shards */
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(bfs_source_nscan_errors(s), 2);
	assert_true(has_scan_error(s, "README", "not a TFRecord"));
	/* gzip is read now: its damage is named, never its bytes */
	assert_true(has_scan_error(s, "data.gz", "gzip: damaged deflate data"));
	for (size_t i = 0; i < 2; i++) {
		const char *e = bfs_source_scan_error(s, i);

		assert_null(strstr(e, "SECRET"));
		assert_null(strstr(e, "root"));
		assert_null(strstr(e, "0x")); /* no stored or computed CRC */
	}
	bfs_source_close(s);
}

static void test_source_names_a_gzip_file_called_tar_by_kind(void **state)
{
	static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03";
	const char *dir = *state;
	uint8_t data[2048] = { 0 };
	tar_buf t = { 0 };
	bfs_source *s;

	tar_member(&t, "k.jpg", "img", 3);
	tar_text(&t, "k.cls", "1");
	tar_put(&t, dir, "a.tar");
	memcpy(data, gz, sizeof(gz) - 1);
	file_put(dir, "b.tar", data, sizeof(data)); /* a .tar.gz renamed */
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TAR);
	assert_int_equal(bfs_source_count(s), 1);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	/* a .tar.gz renamed is read as one; this one is damaged */
	assert_true(has_scan_error(s, "b.tar", "gzip: damaged deflate data"));
	bfs_source_close(s);
}

static void test_source_lists_an_unreadable_shard_and_keeps_the_others(void **state)
{
	static const int64_t l[] = { 1, 2 };
	const char *dir = *state;
	char path[128];
	struct seen seen;

	assert_int_equal(chmod(dir, 0755), 0);
	tfr_put(dir, "a.tfrecord", l, 2);
	tfr_put(dir, "b.tfrecord", l, 1);
	file_chmod(dir, "b.tfrecord", 0);
	path_of(path, sizeof(path), dir, "b.tfrecord");
	if (as_unprivileged(path, open_as_seen, (void *)dir, &seen) != 0)
		skip();
	assert_int_equal(seen.err, 0);
	assert_int_equal(seen.count, 2);
	assert_int_equal(seen.nerrs, 1);
	assert_string_equal(seen.shard, "b.tfrecord");
	assert_non_null(strstr(seen.msg, strerror(EACCES)));
}

static void test_source_read_refuses_a_shard_that_shrank(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 3);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	file_truncate(dir, "a.tfrecord", tfr_record_at(dir, "a.tfrecord", 2));
	/* record 0 is still whole, but the shard is not the one indexed */
	assert_int_equal(read_error(s, 0, msg), -EIO);
	assert_non_null(strstr(msg, "changed"));
	bfs_source_close(s);
}

static void test_source_read_refuses_a_folder_image_replaced_by_another(void **state)
{
	const char *dir = *state;
	char from[128], to[128], msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	subdir_put(dir, "cls");
	jpeg_put(dir, "cls/a.jpg", 1, NULL, NULL);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	jpeg_put(dir, "new.jpg", 1, NULL, NULL); /* the same bytes */
	path_of(from, sizeof(from), dir, "new.jpg");
	path_of(to, sizeof(to), dir, "cls/a.jpg");
	assert_int_equal(rename(from, to), 0);
	assert_int_equal(read_error(s, 0, msg), -EIO);
	bfs_source_close(s);
}

static void test_source_read_of_a_deleted_shard_is_enoent(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char path[128], msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	path_of(path, sizeof(path), dir, "a.tfrecord");
	assert_int_equal(unlink(path), 0);
	assert_int_equal(read_error(s, 0, msg), -ENOENT);
	bfs_source_close(s);
}

static void read_as_seen(void *arg, struct seen *seen)
{
	bfs_buf buf = { 0 };
	const uint8_t *jpeg;
	size_t len;
	int64_t label;

	seen->err = bfs_source_read(arg, 0, &buf, &jpeg, &len, &label,
				    seen->msg);
	bfs_buf_free(&buf);
}

static void test_source_read_of_a_shard_become_unreadable_is_eacces(void **state)
{
	static const int64_t l[] = { 1 };
	const char *dir = *state;
	char path[128];
	struct seen seen;
	bfs_source *s;
	int ran;

	assert_int_equal(chmod(dir, 0755), 0);
	tfr_put(dir, "a.tfrecord", l, 1);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	file_chmod(dir, "a.tfrecord", 0);
	path_of(path, sizeof(path), dir, "a.tfrecord");
	ran = as_unprivileged(path, read_as_seen, s, &seen);
	bfs_source_close(s);
	if (ran != 0)
		skip();
	assert_int_equal(seen.err, -EACCES);
}

/* ---- the index store hooks ------------------------------------------ */

/* An index store for these tests: one stored index per shard name (up to
 * ISTORE_MAX), a log of every call, and ways to misbehave. */
#define ISTORE_MAX 4
struct istore {
	struct {
		char shard[64];
		bfs_shard_stamp st;
		void *blob;
		size_t len;
	} ent[ISTORE_MAX];
	int nent;
	int gets, puts;
	char get_dir[256], get_shard[ISTORE_MAX][64];
	bfs_shard_stamp get_st[ISTORE_MAX];
	int ignore_stamp;            /* answer whatever the stamp */
	void (*spoil)(void **blob, size_t *len); /* applied to what get returns */
};

static int istore_find(struct istore *m, const char *shard)
{
	for (int i = 0; i < m->nent; i++)
		if (!strcmp(m->ent[i].shard, shard))
			return i;
	return -1;
}

static int istore_get(void *ctx, const char *dir, const char *shard,
		      const bfs_shard_stamp *st, void **blob, size_t *len)
{
	struct istore *m = ctx;
	int i = istore_find(m, shard);

	if (m->gets < ISTORE_MAX) {
		snprintf(m->get_shard[m->gets], sizeof(m->get_shard[0]), "%s", shard);
		m->get_st[m->gets] = *st;
	}
	snprintf(m->get_dir, sizeof(m->get_dir), "%s", dir);
	m->gets++;
	if (i < 0 || (!m->ignore_stamp && memcmp(st, &m->ent[i].st, sizeof(*st))))
		return -ENOENT;
	*blob = malloc(m->ent[i].len ? m->ent[i].len : 1);
	assert_non_null(*blob);
	memcpy(*blob, m->ent[i].blob, m->ent[i].len);
	*len = m->ent[i].len;
	if (m->spoil)
		m->spoil(blob, len);
	return 0;
}

static int istore_put(void *ctx, const char *dir, const char *shard,
		      const bfs_shard_stamp *st, const void *blob, size_t len)
{
	struct istore *m = ctx;
	int i = istore_find(m, shard);

	m->puts++;
	if (i < 0) {
		assert_true(m->nent < ISTORE_MAX);
		i = m->nent++;
		snprintf(m->ent[i].shard, sizeof(m->ent[i].shard), "%s", shard);
	}
	free(m->ent[i].blob);
	m->ent[i].st = *st;
	m->ent[i].blob = malloc(len ? len : 1);
	assert_non_null(m->ent[i].blob);
	memcpy(m->ent[i].blob, blob, len);
	m->ent[i].len = len;
	return 0;
}

static void istore_free(struct istore *m)
{
	for (int i = 0; i < m->nent; i++)
		free(m->ent[i].blob);
}

static bfs_source_opts istore_opts(const char *dir, struct istore *m)
{
	bfs_source_opts o = { .dir = dir, .index_get = istore_get,
			      .index_put = istore_put, .index_ctx = m };

	return o;
}

static void stamp_of_file(const char *dir, const char *rel, bfs_shard_stamp *st)
{
	char path[256];
	struct stat sb;

	path_of(path, sizeof(path), dir, rel);
	assert_int_equal(stat(path, &sb), 0);
	st->size = (uint64_t)sb.st_size;
	st->mtime_ns = ns(sb.st_mtim);
	st->ino = (uint64_t)sb.st_ino;
	st->ctime_ns = ns(sb.st_ctim);
}

static void assert_stamp_equal(const bfs_shard_stamp *a, const bfs_shard_stamp *b)
{
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->mtime_ns, b->mtime_ns);
	assert_int_equal(a->ino, b->ino);
	assert_int_equal(a->ctime_ns, b->ctime_ns);
}

static void test_source_keeps_class_names_with_the_stored_index(void **state)
{
	static const int64_t la[] = { 2, 0 }, lb[] = { 1 };
	static const char *const na[] = { "n2", "n0" }, *const nb[] = { "n1" };
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	bfs_source_opts o = istore_opts(dir, &m);
	bfs_source *s;

	put_named(dir, "a.tfrecord", "image/class/synset", la, na, 2);
	put_named(dir, "b.tfrecord", "image/class/synset", lb, nb, 1);
	s = open_source(&o); /* scans, stores */
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	bfs_source_close(s);
	s = open_source(&o); /* from the store alone */
	assert_int_equal(bfs_source_nindex_hits(s), 2);
	assert_int_equal(bfs_source_nclasses(s), 3);
	assert_string_equal(bfs_source_class_name(s, 0), "n0");
	assert_string_equal(bfs_source_class_name(s, 1), "n1");
	assert_string_equal(bfs_source_class_name(s, 2), "n2");
	bfs_source_close(s);
	/* the names belong to the label key they were read with */
	o.label_key = "image/other";
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	bfs_source_close(s);
	istore_free(&m);
}

static void test_source_asks_the_index_store_for_each_shard_with_its_stamp(void **state)
{
	static const int64_t la[] = { 1, 2 }, lb[] = { 3 };
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	bfs_shard_stamp sa, sb;
	bfs_source_opts o;
	char real[PATH_MAX];
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", la, 2);
	tfr_put(dir, "b.tfrecord", lb, 1);
	stamp_of_file(dir, "a.tfrecord", &sa);
	stamp_of_file(dir, "b.tfrecord", &sb);
	o = istore_opts(dir, &m);
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	assert_int_equal(m.gets, 2);
	assert_non_null(realpath(dir, real));
	assert_string_equal(m.get_dir, real);
	assert_string_equal(m.get_shard[0], "a.tfrecord");
	assert_stamp_equal(&m.get_st[0], &sa);
	assert_string_equal(m.get_shard[1], "b.tfrecord");
	assert_stamp_equal(&m.get_st[1], &sb);
	/* each miss was scanned and stored under the same stamp */
	assert_int_equal(m.puts, 2);
	assert_int_equal(istore_find(&m, "a.tfrecord"), 0);
	assert_stamp_equal(&m.ent[0].st, &sa);
	assert_stamp_equal(&m.ent[1].st, &sb);
	bfs_source_close(s);
	istore_free(&m);
}

static void test_source_takes_a_stored_index_instead_of_scanning(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	struct istore m = { .ignore_stamp = 1 };
	bfs_source_opts o;
	char path[128];
	bfs_source *s;
	int fd;

	tfr_put(dir, "a.tfrecord", l, 3);
	o = istore_opts(dir, &m);
	s = open_source(&o);
	bfs_source_close(s);
	assert_int_equal(m.puts, 1);
	/* a fourth record that only a scan can see; this store answers
	 * with the old index all the same */
	path_of(path, sizeof(path), dir, "a.tfrecord");
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	tfr_append(fd, "image/encoded", "img", 3, "image/class/label", 4);
	assert_int_equal(close(fd), 0);
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 1);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(label_of(s, 2), 3);
	assert_int_equal(m.puts, 1); /* nothing new to store */
	bfs_source_close(s);
	istore_free(&m);
}

static void spoil_cut_last_byte(void **blob, size_t *len) { (*len)--; }
static void spoil_add_a_byte(void **blob, size_t *len)
{
	*blob = realloc(*blob, *len + 1);
	assert_non_null(*blob);
	((uint8_t *)*blob)[(*len)++] = 0;
}
static void spoil_first_byte(void **blob, size_t *len) { ((uint8_t *)*blob)[0] ^= 0xff; }
static void spoil_to_nothing(void **blob, size_t *len) { *len = 0; }
static void spoil_doubled(void **blob, size_t *len)
{
	*blob = realloc(*blob, 2 * *len);
	assert_non_null(*blob);
	memcpy((uint8_t *)*blob + *len, *blob, *len);
	*len *= 2;
}

static void test_source_rescans_a_shard_whose_stored_index_is_damaged(void **state)
{
	static void (*const spoils[])(void **, size_t *) = {
		spoil_cut_last_byte, spoil_add_a_byte, spoil_first_byte,
		spoil_to_nothing, spoil_doubled,
	};
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;

	tfr_put(dir, "a.tfrecord", l, 3);
	for (size_t i = 0; i < sizeof(spoils) / sizeof(spoils[0]); i++) {
		struct istore m = { .nent = 0 };
		bfs_source_opts o = istore_opts(dir, &m);
		bfs_source *s = open_source(&o);

		bfs_source_close(s);
		m.spoil = spoils[i];
		s = open_source(&o);
		assert_int_equal(m.gets, 2);
		assert_int_equal(bfs_source_nindex_hits(s), 0);
		assert_int_equal(bfs_source_count(s), 3);
		assert_int_equal(bfs_source_nscan_errors(s), 0);
		assert_int_equal(label_of(s, 2), 3);
		assert_int_equal(m.puts, 2); /* the new scan is stored */
		bfs_source_close(s);
		istore_free(&m);
	}
}

static void test_source_keeps_the_scan_error_of_a_cut_shard_in_its_stored_index(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	char err[BFS_ERRMSG_MAX];
	bfs_source_opts o;
	bfs_source *s;

	tfr_put(dir, "a.tfrecord", l, 3);
	file_truncate(dir, "a.tfrecord", file_size(dir, "a.tfrecord") - 6);
	o = istore_opts(dir, &m);
	s = open_source(&o);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	snprintf(err, sizeof(err), "%s", bfs_source_scan_error(s, 0));
	bfs_source_close(s);
	assert_int_equal(m.puts, 1);
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 1);
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	assert_string_equal(bfs_source_scan_error_shard(s, 0), "a.tfrecord");
	assert_string_equal(bfs_source_scan_error(s, 0), err);
	bfs_source_close(s);
	istore_free(&m);
}

static void test_source_keeps_folder_indexes_out_of_the_index_store(void **state)
{
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	bfs_source_opts o;
	bfs_source *s;

	jpeg_put(dir, "a.jpg", 1, NULL, NULL);
	o = istore_opts(dir, &m);
	s = open_source(&o);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_FOLDER);
	bfs_source_close(s);
	assert_int_equal(m.gets, 0);
	assert_int_equal(m.puts, 0);
}

/* Every sample of a tar source: member name, label (or error code and
 * message), bytes; the scan errors. */
static void tar_source_equal(bfs_source *a, bfs_source *b)
{
	assert_int_equal(bfs_source_count(a), bfs_source_count(b));
	assert_int_equal(bfs_source_nscan_errors(a), bfs_source_nscan_errors(b));
	for (size_t i = 0; i < bfs_source_nscan_errors(a); i++)
		assert_string_equal(bfs_source_scan_error(a, i), bfs_source_scan_error(b, i));
	for (uint64_t i = 0; i < bfs_source_count(a); i++) {
		char ma[BFS_ERRMSG_MAX] = "", mb[BFS_ERRMSG_MAX] = "";
		bfs_buf ba = { 0 }, bb = { 0 };
		const uint8_t *ja, *jb;
		size_t la, lb;
		int64_t xa = 0, xb = 0;
		int ea = bfs_source_read(a, i, &ba, &ja, &la, &xa, ma);
		int eb = bfs_source_read(b, i, &bb, &jb, &lb, &xb, mb);

		assert_string_equal(bfs_source_member_name(a, i), bfs_source_member_name(b, i));
		assert_int_equal(ea, eb);
		if (ea) {
			assert_string_equal(ma, mb);
		} else {
			assert_int_equal(xa, xb);
			assert_int_equal(la, lb);
			assert_memory_equal(ja, jb, la);
		}
		bfs_buf_free(&ba);
		bfs_buf_free(&bb);
	}
}

/* A tar shard's index is stored too (the tar scan reads one header per
 * member: a remote shard's every block), and a remount from it replays
 * the scan: names, labels, members that fail, a shard cut short. */
static void test_source_keeps_tar_indexes_in_the_store_and_replays_them(void **state)
{
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	tar_buf t = { 0 };
	bfs_source_opts o = istore_opts(dir, &m);
	bfs_source *scanned, *stored;

	tar_member(&t, "k0.jpg", "img0", 4);
	tar_text(&t, "k0.cls", "3");
	tar_member(&t, "k1.jpg", "img1!", 5);      /* no label: fails when read */
	tar_member(&t, "k2.png", "img2", 4);
	tar_text(&t, "k2.cls", "x");               /* a label that is no number */
	tar_put(&t, dir, "a.tar");
	tar_member(&t, "j.jpg", "imgj", 4);
	tar_text(&t, "j.cls", "7");
	tar_member(&t, "l.jpg", "a longer image than the shard holds", 36);
	tar_put(&t, dir, "b.tar");
	file_truncate(dir, "b.tar", 512 * 4 + 10); /* cut inside l.jpg */
	scanned = open_source(&o);
	assert_int_equal(m.puts, 2);
	assert_int_equal(bfs_source_nindex_hits(scanned), 0);
	assert_true(bfs_source_nscan_errors(scanned) > 0);
	stored = open_source(&o);
	assert_int_equal(m.puts, 2);
	assert_int_equal(bfs_source_nindex_hits(stored), 2);
	tar_source_equal(scanned, stored);
	bfs_source_close(stored);
	/* labels from a .json key instead: the stored index does not fit */
	o.label_key = "label";
	stored = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(stored), 0);
	bfs_source_close(stored);
	bfs_source_close(scanned);
	istore_free(&m);
}

static void spoil_tar_count(void **blob, size_t *len)
{
	((uint8_t *)*blob)[16]++; /* the entry count */
}

static void test_source_scans_a_tar_shard_whose_stored_index_does_not_hold(void **state)
{
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	tar_buf t = { 0 };
	bfs_source_opts o = istore_opts(dir, &m);
	bfs_source *s;

	tar_member(&t, "k0.jpg", "img0", 4);
	tar_text(&t, "k0.cls", "3");
	tar_put(&t, dir, "a.tar");
	bfs_source_close(open_source(&o));
	m.spoil = spoil_tar_count;
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	assert_int_equal(bfs_source_count(s), 1);
	assert_int_equal(label_of(s, 0), 3);
	bfs_source_close(s);
	istore_free(&m);
}

/* ---- gzip shards ----------------------------------------------------- */

/* The bytes of dir/rel (malloc()ed). */
static uint8_t *file_get(const char *dir, const char *rel, size_t *len)
{
	char path[256];
	FILE *f;
	uint8_t *p;
	long n;

	path_of(path, sizeof(path), dir, rel);
	f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	p = malloc(n ? (size_t)n : 1);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return p;
}

/* gzip p[0..n) into dir/rel as `members` gzip members, as gzip(1) or
 * tf.io.TFRecordWriter(options="GZIP") write them (zlib, level 6). */
static void gz_put(const char *dir, const char *rel, const uint8_t *p, size_t n,
		   int members)
{
	size_t cap = n + n / 8 + 1024 * (size_t)members, len = 0;
	uint8_t *o = malloc(cap);

	for (int m = 0; m < members; m++) {
		size_t a = n * (size_t)m / (size_t)members, b = n * (size_t)(m + 1) / (size_t)members;
		z_stream zs = { 0 };

		assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
		zs.next_in = (Bytef *)p + a;
		zs.avail_in = (uInt)(b - a);
		zs.next_out = o + len;
		zs.avail_out = (uInt)(cap - len);
		assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
		len = cap - zs.avail_out;
		deflateEnd(&zs);
	}
	file_put(dir, rel, o, len);
	free(o);
}

/* n records of ~size random bytes (labels 100 + k) into dir/rel. */
static void tfr_put_big(const char *dir, const char *rel, int n, size_t size)
{
	int fd = tfr_create(dir, rel);
	uint8_t *img = malloc(2 * size + 64);
	uint32_t r = 12345;

	for (int k = 0; k < n; k++) {
		size_t len = size / 2 + (size_t)(k * 7919) % size;

		for (size_t i = 0; i < len; i++) {
			r = r * 1103515245u + 12345u;
			img[i] = (i / 64) % 3 ? (uint8_t)(r >> 24) : (uint8_t)(k + i / 500);
		}
		tfr_append(fd, "image/encoded", img, len, "image/class/label", 100 + k);
	}
	free(img);
	assert_int_equal(close(fd), 0);
}

/* Every sample of a and b reads the same bytes and label. */
static void assert_same_samples(bfs_source *a, bfs_source *b)
{
	uint64_t n = bfs_source_count(a);
	bfs_buf ba = { 0 }, bb = { 0 };

	assert_int_equal(bfs_source_count(b), n);
	/* in order, then backwards (restart points, not the cursor) */
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t k = 0; k < n; k++) {
			uint64_t i = pass ? n - 1 - k : k;
			const uint8_t *pa, *pb;
			size_t la, lb;
			int64_t xa, xb;
			char msg[BFS_ERRMSG_MAX];

			if (bfs_source_read(a, i, &ba, &pa, &la, &xa, msg))
				fail_msg("a: %s", msg);
			if (bfs_source_read(b, i, &bb, &pb, &lb, &xb, msg))
				fail_msg("b, sample %llu: %s", (unsigned long long)i, msg);
			assert_int_equal(la, lb);
			assert_memory_equal(pa, pb, la);
			assert_int_equal(xa, xb);
		}
	bfs_buf_free(&ba);
	bfs_buf_free(&bb);
}

static void test_source_reads_gzip_tfrecords_as_the_same_records_uncompressed(void **state)
{
	const char *dir = *state;
	char plain[256], gzd[256];
	uint8_t *p;
	size_t n;
	bfs_source *a, *b;

	path_of(plain, sizeof(plain), dir, "plain");
	path_of(gzd, sizeof(gzd), dir, "gz");
	subdir_put(dir, "plain");
	subdir_put(dir, "gz");
	tfr_put_big(plain, "train-00000-of-00002", 60, 150000); /* ~9 MB: 3 points */
	tfr_put_big(plain, "train-00001-of-00002", 5, 1000);
	p = file_get(plain, "train-00000-of-00002", &n);
	gz_put(gzd, "train-00000-of-00002", p, n, 1); /* a GZIP shard, by content */
	free(p);
	p = file_get(plain, "train-00001-of-00002", &n);
	gz_put(gzd, "train-00001-of-00002", p, n, 3); /* concatenated members */
	free(p);
	a = open_dir(plain, BFS_FORMAT_AUTO);
	b = open_dir(gzd, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(b), BFS_FORMAT_TFRECORD);
	assert_int_equal(bfs_source_nscan_errors(b), 0);
	assert_same_samples(a, b);
	bfs_source_close(a);
	bfs_source_close(b);
}

/* A remote source over a local folder: its storage, and a shard cache
 * in cache (limit bytes) over it. */
struct remote {
	bfs_storage *st;
	bfs_shardcache *sc;
};

static void remote_open(struct remote *r, const char *src, const char *cache,
			uint64_t limit)
{
	bfs_storage_opts so = { 0 };
	bfs_shardcache_opts co = { .dir = cache, .max_bytes = limit, .fetchers = 2 };
	char err[BFS_ERRMSG_MAX] = "";

	assert_int_equal(bfs_storage_open(src, &so, &r->st, err), 0);
	if (bfs_shardcache_open(r->st, &co, &r->sc, err))
		fail_msg("shard cache: %s", err);
}

static void remote_close(struct remote *r)
{
	bfs_shardcache_close(r->sc);
	bfs_storage_close(r->st);
}

static void test_source_reads_a_remote_source_through_its_shard_cache_as_the_folder_itself(void **state)
{
	static const int64_t l[] = { 4, 5, 6 };
	const char *dir = *state;
	char src[256], cache[256], root[PATH_MAX + 2];
	struct istore m = { 0 };
	struct remote r;
	bfs_source_opts o;
	bfs_source *a, *b;
	bfs_sample_identity id;
	bfs_shard_stamp st;
	bfs_http_stats hs;
	uint8_t *p;
	size_t n;

	path_of(src, sizeof(src), dir, "src");
	path_of(cache, sizeof(cache), dir, "cache");
	subdir_put(dir, "src");
	tfr_put(src, "a.tfrecord", l, 3);
	tfr_put_big(src, "b.tfrecord", 7, 30000);
	p = file_get(src, "b.tfrecord", &n);
	gz_put(src, "c.tfrecord.gz", p, n, 2); /* a gzip shard: read whole */
	free(p);
	a = open_dir(src, BFS_FORMAT_AUTO);

	remote_open(&r, src, cache, 0);
	o = istore_opts(NULL, &m);
	o.shards = r.sc;
	b = open_source(&o);
	assert_same_samples(a, b);
	assert_int_equal(bfs_source_nshards(b), 3);
	assert_int_equal(bfs_source_is_remote(b), 1);
	assert_int_equal(bfs_source_is_remote(a), 0);
	/* named by its root, each shard by the object's size and ETag */
	assert_non_null(realpath(src, root));
	strcat(root, "/");
	assert_string_equal(bfs_source_dir(b), root);
	assert_string_equal(m.get_dir, root);
	assert_int_equal(bfs_source_identity(b, 0, &id), 0);
	assert_string_equal(id.shard, "a.tfrecord");
	bfs_shard_stamp_remote(bfs_shardcache_object(r.sc, 0)->size,
			       bfs_shardcache_object(r.sc, 0)->etag, &st);
	assert_int_equal(id.shard_size, st.size);
	assert_int_equal(id.shard_ino, st.ino);
	assert_int_equal(id.shard_ctime_ns, st.ctime_ns);
	assert_int_equal(id.shard_mtime_ns, 0);
	assert_int_equal(m.puts, 3);
	/* each shard asked for once: what the store lacks is not asked again */
	assert_int_equal(m.gets, 3);
	bfs_source_close(b);
	remote_close(&r);

	/* again, with every index stored: not a byte of a shard is read to
	 * index it, even through an empty cache */
	{
		char cmd[300];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
		assert_int_equal(system(cmd), 0);
	}
	remote_open(&r, src, cache, 0);
	o.shards = r.sc;
	m.gets = 0;
	b = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(b), 3);
	/* twice each, a gzip shard's too: which need no fetch, then the
	 * index itself, handed to each loader in turn */
	assert_int_equal(m.gets, 6);
	bfs_storage_stats(r.st, &hs);
	assert_int_equal(hs.requests, 0);
	assert_same_samples(a, b);
	bfs_source_close(b);
	remote_close(&r);
	istore_free(&m);
	bfs_source_close(a);
}

static void test_source_reads_a_remote_class_folder_tree_as_the_folder_itself(void **state)
{
	const char *dir = *state;
	char src[256], cache[256];
	struct remote r;
	bfs_source_opts o = { 0 };
	bfs_source *a, *b;

	path_of(src, sizeof(src), dir, "src");
	path_of(cache, sizeof(cache), dir, "cache");
	subdir_put(dir, "src");
	subdir_put(src, "dog");
	subdir_put(src, "cat");
	subdir_put(src, "cat/deeper");
	file_put(src, "dog/1.jpg", "dog one", 7);
	file_put(src, "dog/2.JPG", "dog two", 7);
	file_put(src, "cat/b.png", "cat b", 5);
	file_put(src, "cat/a.jpg", "cat a", 5);
	file_put(src, "cat/deeper/x.jpg", "never", 5); /* not a class's image */
	file_put(src, "cat/notes.txt", "no", 2);
	a = open_dir(src, BFS_FORMAT_AUTO);
	remote_open(&r, src, cache, 0);
	o.shards = r.sc;
	b = open_source(&o);
	assert_int_equal(bfs_source_format(b), BFS_FORMAT_FOLDER);
	assert_int_equal(bfs_source_nclasses(b), 2);
	assert_string_equal(bfs_source_class_name(b, 0), "cat");
	assert_same_samples(a, b);
	assert_string_equal(bfs_source_shard_name(b, 0), "cat/a.jpg");
	bfs_source_close(b);
	remote_close(&r);
	bfs_source_close(a);
}

static void test_source_names_classes_of_gzip_tfrecords_also_from_their_stored_index(void **state)
{
	static const int64_t la[] = { 2, 0 }, lb[] = { 1 };
	static const char *const na[] = { "n2", "n0" }, *const nb[] = { "n1" };
	const char *dir = *state;
	struct istore m = { .nent = 0 };
	bfs_source_opts o = istore_opts(dir, &m);
	bfs_source *s;
	uint8_t *p;
	size_t n;

	put_named(dir, "a.tfrecord", "image/class/synset", la, na, 2);
	put_named(dir, "x", "image/class/synset", lb, nb, 1);
	p = file_get(dir, "x", &n);
	gz_put(dir, "b.tfrecord.gz", p, n, 1);
	free(p);
	{
		char x[256];

		path_of(x, sizeof(x), dir, "x");
		assert_int_equal(unlink(x), 0);
	}
	for (int pass = 0; pass < 2; pass++) { /* scanned and stored, then stored */
		s = open_source(&o);
		assert_int_equal(bfs_source_nindex_hits(s), pass ? 2 : 0);
		assert_int_equal(bfs_source_count(s), 3);
		assert_int_equal(bfs_source_nclasses(s), 3);
		assert_string_equal(bfs_source_class_name(s, 0), "n0");
		assert_string_equal(bfs_source_class_name(s, 1), "n1");
		assert_string_equal(bfs_source_class_name(s, 2), "n2");
		bfs_source_close(s);
	}
	/* names read with another label key are not used: scanned again */
	o.label_key = "image/other";
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 0);
	bfs_source_close(s);
	istore_free(&m);
}

static void test_source_finds_gzip_shards_by_name_and_by_content(void **state)
{
	static const int64_t l[] = { 1, 2, 3 };
	const char *dir = *state;
	char sub[256];
	tar_buf t = { 0 };
	uint8_t *p;
	size_t n;
	bfs_source *s;

	tfr_put(dir, "x", l, 3);
	p = file_get(dir, "x", &n);
	gz_put(dir, "a.tfrecord.gz", p, n, 1);
	gz_put(dir, "data.bin", p, n, 1); /* by content */
	free(p);
	file_put(dir, "x", "", 0);
	unlink(strcat(strcpy(sub, dir), "/x"));
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TFRECORD);
	assert_int_equal(bfs_source_count(s), 6);
	assert_int_equal(label_of(s, 5), 3);
	bfs_source_close(s);

	path_of(sub, sizeof(sub), dir, "t");
	subdir_put(dir, "t");
	tar_member(&t, "k1.png", "PNGDATA", 7);
	tar_text(&t, "k1.cls", "4");
	tar_member(&t, "k2.webp", "WEBPDATA", 8);
	tar_text(&t, "k2.txt", "5");
	tar_put(&t, sub, "plain");
	p = file_get(sub, "plain", &n);
	gz_put(sub, "a.tar.gz", p, n, 1);
	gz_put(sub, "b.tgz", p, n, 2);
	gz_put(sub, "c", p, n, 1); /* by content */
	free(p);
	unlink(strcat(sub, "/plain"));
	path_of(sub, sizeof(sub), dir, "t");
	s = open_dir(sub, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TAR);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	assert_int_equal(bfs_source_count(s), 6);
	assert_int_equal(label_of(s, 0), 4);
	assert_int_equal(label_of(s, 5), 5);
	assert_sample_bytes(s, 3, "WEBPDATA", 8);
	assert_string_equal(bfs_source_member_name(s, 2), "k1.png");
	bfs_source_close(s);
}

static void test_source_keeps_a_gzip_shards_index_in_the_store(void **state)
{
	const char *dir = *state;
	struct istore m = { 0 };
	bfs_source_opts o;
	char sub[256];
	tar_buf t = { 0 };
	uint8_t *p;
	size_t n;
	bfs_source *a, *b;

	tfr_put_big(dir, "x", 30, 20000);
	p = file_get(dir, "x", &n);
	gz_put(dir, "a.tfrecord.gz", p, n, 1);
	free(p);
	path_of(sub, sizeof(sub), dir, "x");
	unlink(sub);
	o = istore_opts(dir, &m);
	a = open_source(&o);
	assert_int_equal(m.puts, 1);
	assert_int_equal(bfs_source_nindex_hits(a), 0);
	b = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(b), 1);
	assert_int_equal(m.puts, 1);
	assert_same_samples(a, b);
	bfs_source_close(a);
	bfs_source_close(b);
	istore_free(&m);

	/* a tar.gz's index holds its labels: another --label-key scans */
	memset(&m, 0, sizeof(m));
	path_of(sub, sizeof(sub), dir, "t");
	subdir_put(dir, "t");
	tar_member(&t, "k.jpg", "img", 3);
	tar_text(&t, "k.cls", "1");
	tar_text(&t, "k.json", "{\"y\": 7}");
	tar_put(&t, sub, "p");
	p = file_get(sub, "p", &n);
	gz_put(sub, "a.tar.gz", p, n, 1);
	free(p);
	strcat(sub, "/p");
	unlink(sub);
	path_of(sub, sizeof(sub), dir, "t");
	o = istore_opts(sub, &m);
	a = open_source(&o);
	assert_int_equal(label_of(a, 0), 1);
	bfs_source_close(a);
	o.label_key = "y";
	a = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(a), 0);
	assert_int_equal(label_of(a, 0), 7);
	bfs_source_close(a);
	a = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(a), 1);
	assert_int_equal(label_of(a, 0), 7);
	bfs_source_close(a);
	istore_free(&m);
}

static void test_source_serves_the_records_before_gzip_damage_and_names_it(void **state)
{
	const char *dir = *state;
	uint8_t *p, *z;
	size_t n, zn;
	bfs_source *s;
	char path[256];

	tfr_put_big(dir, "x", 40, 60000);
	p = file_get(dir, "x", &n);
	path_of(path, sizeof(path), dir, "x");
	unlink(path);
	gz_put(dir, "a.tfrecord.gz", p, n, 1);
	z = file_get(dir, "a.tfrecord.gz", &zn);
	file_put(dir, "a.tfrecord.gz", z, zn * 2 / 3); /* cut */
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_true(bfs_source_count(s) >= 20 && bfs_source_count(s) < 40);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	assert_true(has_scan_error(s, "a.tfrecord.gz", "gzip: the file ends inside member 0"));
	assert_int_equal(label_of(s, bfs_source_count(s) - 1), 100 + (int64_t)bfs_source_count(s) - 1);
	bfs_source_close(s);

	/* damaged in the middle: the records before it are served */
	z[zn / 2] ^= 0x55;
	z[zn / 2 + 1] ^= 0xaa;
	file_put(dir, "a.tfrecord.gz", z, zn);
	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_true(bfs_source_count(s) <= 40); /* a CRC-32 failure keeps them */
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	assert_true(has_scan_error(s, "a.tfrecord.gz", "gzip"));
	for (uint64_t i = 0; i + 1 < bfs_source_count(s) && i < 10; i++)
		assert_int_equal(label_of(s, i), 100 + (int64_t)i);
	bfs_source_close(s);
	free(z);
	free(p);
}

static void test_source_reads_a_gzip_tfrecord_tensorflow_wrote(void **state)
{
	/* tools/make_golden_gzip.py: the same 300 records through
	 * tf.io.TFRecordWriter, plain and with options="GZIP" */
	bfs_source *a = open_dir("tests/data/golden/gzip/plain", BFS_FORMAT_AUTO);
	bfs_source *b = open_dir("tests/data/golden/gzip/gz", BFS_FORMAT_AUTO);

	(void)state;
	assert_int_equal(bfs_source_count(a), 300);
	assert_int_equal(bfs_source_nscan_errors(b), 0);
	assert_same_samples(a, b);
	for (uint64_t i = 0; i < 300; i += 37)
		assert_int_equal(label_of(b, i), (int64_t)(i % 7));
	bfs_source_close(a);
	bfs_source_close(b);
}

/* ---- records and members over 4 GiB (sparse files: no disk) ---------- */

#define HUGE_LEN ((uint64_t)5 << 30) /* over the 4 GiB a sample may hold */

/* The bytes of dir/rel on disk, which must stay small: the holes of a
 * sparse file cost nothing. */
static void assert_small_on_disk(const char *dir, const char *rel)
{
	char path[256];
	struct stat st;

	path_of(path, sizeof(path), dir, rel);
	assert_int_equal(stat(path, &st), 0);
	assert_true((uint64_t)st.st_size > HUGE_LEN);
	assert_true((uint64_t)st.st_blocks * 512 < (4u << 20));
}

/* dir/rel: record 0 (label 10), record 1 whose CRC-valid length is
 * HUGE_LEN (its payload a hole), record 2 (label 12); *hdr1 is the offset
 * of record 1's header. */
static void tfr_put_huge(const char *dir, const char *rel, off_t *hdr1)
{
	uint8_t h[BFS_TFRECORD_HEADER];
	uint64_t len = HUGE_LEN;
	uint32_t crc;
	off_t at;
	int fd = tfr_create(dir, rel);

	tfr_append(fd, "image/encoded", "img0", 4, "image/class/label", 10);
	at = lseek(fd, 0, SEEK_END);
	memcpy(h, &len, 8); /* little-endian like this host */
	crc = bfs_crc32c_mask(bfs_crc32c(0, h, 8));
	memcpy(h + 8, &crc, 4);
	assert_int_equal(write(fd, h, sizeof(h)), (ssize_t)sizeof(h));
	assert_int_equal(ftruncate(fd, at + BFS_TFRECORD_HEADER + (off_t)len +
				   BFS_TFRECORD_FOOTER), 0);
	tfr_append(fd, "image/encoded", "img2", 4, "image/class/label", 12);
	assert_int_equal(close(fd), 0);
	*hdr1 = at;
}

/* The record over 4 GiB is a bad sample that names itself and the limit;
 * the records around it read. */
static void expect_huge_record(bfs_source *s, off_t hdr1)
{
	char msg[BFS_ERRMSG_MAX], want[64];

	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	assert_int_equal(label_of(s, 0), 10);
	assert_int_equal(label_of(s, 2), 12);
	assert_int_equal(read_error(s, 1, msg), BFS_E_CORRUPT);
	snprintf(want, sizeof(want), "record 1 at offset %lld", (long long)hdr1);
	if (!strstr(msg, want) || !strstr(msg, "5368709120") ||
	    !strstr(msg, "4294967295"))
		fail_msg("%s", msg);
}

static void test_source_keeps_the_records_after_one_over_4_gib_and_names_it(void **state)
{
	const char *dir = *state;
	struct istore m = { 0 };
	bfs_source_opts o = istore_opts(dir, &m);
	bfs_sample_identity id;
	bfs_source *s;
	off_t hdr1;

	tfr_put_huge(dir, "a.tfrecord", &hdr1);
	assert_small_on_disk(dir, "a.tfrecord");
	s = open_source(&o);
	expect_huge_record(s, hdr1);
	/* no memory is planned for it */
	assert_int_equal(bfs_source_identity(s, 1, &id), 0);
	assert_int_equal(id.length, 0);
	bfs_source_close(s);
	/* the same from the stored index */
	assert_int_equal(m.puts, 1);
	s = open_source(&o);
	assert_int_equal(bfs_source_nindex_hits(s), 1);
	expect_huge_record(s, hdr1);
	bfs_source_close(s);
	istore_free(&m);
}

static void test_source_keeps_the_samples_after_a_tar_member_over_4_gib_and_names_it(void **state)
{
	const char *dir = *state;
	tar_buf t = { 0 };
	char path[256], msg[BFS_ERRMSG_MAX], want[64];
	size_t head;
	bfs_source *s;
	int fd;

	/* a.jpg a.cls, then b.jpg of HUGE_LEN bytes (a hole), b.cls, c.jpg,
	 * c.cls: the archive written in two parts around the hole */
	tar_text(&t, "a.jpg", "jpeg-a");
	tar_text(&t, "a.cls", "1");
	tar_member(&t, "b.jpg", NULL, 0);
	snprintf((char *)t.p + t.len - 512 + 124, 12, "%011llo",
		 (unsigned long long)HUGE_LEN);
	{ /* the checksum again, for the new size */
		uint8_t *h = t.p + t.len - 512;
		unsigned sum = 0;

		memset(h + 148, ' ', 8);
		for (int i = 0; i < 512; i++)
			sum += h[i];
		snprintf((char *)h + 148, 8, "%06o", sum);
		h[155] = ' ';
	}
	head = t.len;
	tar_text(&t, "b.cls", "2");
	tar_text(&t, "c.jpg", "jpeg-c");
	tar_text(&t, "c.cls", "3");
	tar_bytes(&t, NULL, 1024);
	path_of(path, sizeof(path), dir, "x.tar");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, t.p, head, 0), (ssize_t)head);
	assert_int_equal(pwrite(fd, t.p + head, t.len - head,
				(off_t)(head + HUGE_LEN)), (ssize_t)(t.len - head));
	assert_int_equal(close(fd), 0);
	free(t.p);
	assert_small_on_disk(dir, "x.tar");

	s = open_dir(dir, BFS_FORMAT_AUTO);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TAR);
	assert_int_equal(bfs_source_count(s), 3);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	assert_int_equal(label_of(s, 0), 1);
	assert_int_equal(label_of(s, 2), 3);
	assert_int_equal(read_error(s, 1, msg), BFS_E_CORRUPT);
	snprintf(want, sizeof(want), "at offset %zu", (size_t)1024 + 1024);
	if (!strstr(msg, "member b.jpg") || !strstr(msg, want) ||
	    !strstr(msg, "5368709120") || !strstr(msg, "4294967295"))
		fail_msg("%s", msg);
	bfs_source_close(s);
}

/* ---- gzip bombs ------------------------------------------------------ */

/* dir/rel: gzip of dir/plain's bytes followed by n zero bytes (a gzip
 * bomb in small: zeros inflate over 1000 times); dir/plain is removed. */
static void gz_bomb_put(const char *dir, const char *plain, const char *rel,
			size_t n)
{
	static const uint8_t zero[1 << 20];
	size_t plen, cap = n / 500 + (1 << 20), len;
	uint8_t *p = file_get(dir, plain, &plen), *o = malloc(cap + plen);
	z_stream zs = { 0 };
	char path[256];

	assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_out = o;
	zs.avail_out = (uInt)(cap + plen);
	zs.next_in = p;
	zs.avail_in = (uInt)plen;
	assert_int_equal(deflate(&zs, Z_NO_FLUSH), Z_OK);
	for (size_t done = 0; done < n; done += sizeof(zero)) {
		zs.next_in = (Bytef *)zero;
		zs.avail_in = sizeof(zero);
		assert_int_equal(deflate(&zs, Z_NO_FLUSH), Z_OK);
	}
	assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
	len = cap + plen - zs.avail_out;
	deflateEnd(&zs);
	file_put(dir, rel, o, len);
	free(o);
	free(p);
	path_of(path, sizeof(path), dir, plain);
	assert_int_equal(unlink(path), 0);
}

static void assert_bomb_error(const char *msg, const char *shard)
{
	if (!strstr(msg, shard) || !strstr(msg, "more than 100 times") ||
	    !strstr(msg, "ratio ") || !strstr(msg, "--max-inflate-ratio"))
		fail_msg("%s", msg);
}

static void test_source_refuses_a_gzip_tfrecord_bomb_naming_shard_ratio_and_option(void **state)
{
	static const int64_t l[] = { 7, 8 };
	const char *dir = *state;
	struct istore m = { 0 };
	bfs_source_opts o = istore_opts(dir, &m);
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;
	size_t n;
	uint8_t *p;

	/* a.tfrecord.gz: one record and 64 MiB of zeros; alone, nothing is
	 * left to mount, and the error says which shard and why */
	tfr_put(dir, "a", l, 1);
	gz_bomb_put(dir, "a", "a.tfrecord.gz", 64u << 20);
	assert_int_equal(open_error(&o, msg), BFS_E_EMPTY);
	assert_bomb_error(msg, "a.tfrecord.gz");
	assert_int_equal(m.puts, 0);

	/* beside a good shard: that one is served, the bomb listed */
	tfr_put(dir, "b", l + 1, 1);
	p = file_get(dir, "b", &n);
	gz_put(dir, "b.tfrecord.gz", p, n, 1);
	free(p);
	{
		char path[256];

		path_of(path, sizeof(path), dir, "b");
		assert_int_equal(unlink(path), 0);
	}
	s = open_source(&o);
	assert_int_equal(bfs_source_count(s), 1);
	assert_int_equal(label_of(s, 0), 8);
	assert_int_equal(bfs_source_nscan_errors(s), 1);
	assert_string_equal(bfs_source_scan_error_shard(s, 0), "a.tfrecord.gz");
	assert_bomb_error(bfs_source_scan_error(s, 0), "");
	bfs_source_close(s);

	/* with no limit it is indexed (its zeros are no record), and that
	 * index, stored, is not taken by a mount with the limit */
	o.max_inflate_ratio = BFS_INFLATE_RATIO_NONE;
	s = open_source(&o);
	assert_int_equal(bfs_source_count(s), 2);
	assert_int_equal(label_of(s, 0), 7);
	assert_true(has_scan_error(s, "a.tfrecord.gz", "length CRC"));
	bfs_source_close(s);
	assert_int_equal(istore_find(&m, "a.tfrecord.gz") >= 0, 1);
	o.max_inflate_ratio = 0;
	s = open_source(&o);
	assert_int_equal(bfs_source_count(s), 1);
	assert_int_equal(bfs_source_nindex_hits(s), 1); /* b's only */
	assert_true(has_scan_error(s, "a.tfrecord.gz", "--max-inflate-ratio"));
	bfs_source_close(s);
	/* a limit of its own: 2000 lets these zeros through */
	o.max_inflate_ratio = 2000;
	s = open_source(&o);
	assert_int_equal(bfs_source_count(s), 2);
	bfs_source_close(s);
	istore_free(&m);
}

static void test_source_refuses_a_tar_gz_bomb_naming_shard_ratio_and_option(void **state)
{
	const char *dir = *state;
	bfs_source_opts o = { .dir = dir };
	tar_buf t = { 0 };
	char msg[BFS_ERRMSG_MAX];
	bfs_source *s;

	/* a tar ends at its zero blocks: 64 MiB more of them is still a
	 * valid archive of one sample, and a bomb */
	tar_text(&t, "k.jpg", "jpeg-k");
	tar_text(&t, "k.cls", "4");
	tar_put(&t, dir, "x");
	gz_bomb_put(dir, "x", "x.tar.gz", 64u << 20);
	assert_int_equal(open_error(&o, msg), BFS_E_EMPTY);
	assert_bomb_error(msg, "x.tar.gz");
	o.max_inflate_ratio = BFS_INFLATE_RATIO_NONE;
	s = open_source(&o);
	assert_int_equal(bfs_source_format(s), BFS_FORMAT_TAR);
	assert_int_equal(bfs_source_count(s), 1);
	assert_int_equal(bfs_source_nscan_errors(s), 0);
	assert_int_equal(label_of(s, 0), 4);
	bfs_source_close(s);
}

static void test_source_stamps_a_remote_shard_by_its_size_and_etag(void **state)
{
	bfs_shard_stamp a, b, c, d;

	(void)state;
	bfs_shard_stamp_remote(1234, "\"9b2cf535f27731c974343645a3985328\"", &a);
	bfs_shard_stamp_remote(1234, "\"9b2cf535f27731c974343645a3985328\"", &b);
	bfs_shard_stamp_remote(1234, "\"9b2cf535f27731c974343645a3985329\"", &c);
	bfs_shard_stamp_remote(1235, "\"9b2cf535f27731c974343645a3985328\"", &d);
	/* one object, one stamp, whatever file holds it */
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(a.size, 1234);
	assert_int_equal(a.mtime_ns, 0);
	/* another ETag or size is another shard */
	assert_true(a.ino != c.ino || a.ctime_ns != c.ctime_ns);
	assert_int_equal(d.size, 1235);
	assert_true(d.ino == a.ino && d.ctime_ns == a.ctime_ns);
	/* SHA-256("") starts e3b0c44298fc1c14 9afbf4c8996fb924 */
	bfs_shard_stamp_remote(7, "", &a);
	assert_true(a.ino == 0xe3b0c44298fc1c14ull);
	assert_true((uint64_t)a.ctime_ns == 0x9afbf4c8996fb924ull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_source_stamps_a_remote_shard_by_its_size_and_etag),
		cmocka_unit_test(test_source_identity_names_the_shard_by_size_mtime_inode_and_ctime),
		cmocka_unit_test(test_source_read_refuses_a_shard_rewritten_at_the_same_size_with_its_mtime_restored),
		cmocka_unit_test(test_source_keys_the_index_store_by_the_whole_stamp),
		cmocka_unit_test_setup_teardown(test_source_indexes_a_directory_of_tfrecord_shards, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_names_tfrecord_classes_from_the_synsets_of_the_records, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_indexes_a_tfrecord_shard_from_dalis_idx_beside_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_finds_dalis_idx_named_after_the_shards_stem, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_finds_dalis_idx_in_another_folder_first, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_scans_a_shard_whose_dali_idx_does_not_describe_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_read_through_a_wrong_dali_idx_fails_naming_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_names_tfrecord_classes_from_text_labels_without_synsets, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_gives_no_classes_it_cannot_trust_and_says_why, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_no_classes_with_label_key_none_or_for_unlabeled_records, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_class_names_with_the_stored_index, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_tells_the_progress_hook_how_far_indexing_has_come, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_says_a_compressed_shard_is_compressed_and_what_to_do, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_names_compressed_files_it_passed_over_when_it_finds_no_shard, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_indexes_an_imagefolder_tree_one_image_per_shard, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_indexes_a_flat_folder_of_jpegs_as_one_class_labeled_0, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_indexes_a_directory_of_webdataset_tars, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_auto_finds_tfrecord_shards_by_content_whatever_their_names, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_auto_finds_tar_shards_by_content_whatever_their_names, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_auto_passes_over_files_that_are_not_shards, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_auto_refuses_tfrecord_and_tar_shards_in_one_directory, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_open_with_a_format_that_does_not_fit_fails_naming_the_dir, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_an_empty_directory_as_empty, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_shards_that_hold_no_records_as_empty, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_class_folders_without_jpegs_as_empty, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_missing_directory_with_enoent, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_file_in_place_of_the_directory_with_enotdir, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_an_unreadable_directory_with_eacces, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test(test_format_name_names_each_format),
		cmocka_unit_test_setup_teardown(test_source_dir_is_the_absolute_path_with_links_resolved, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_sorts_shards_bytewise_by_name, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_records_of_a_shard_in_file_order, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_numbers_classes_from_0_in_bytewise_name_order, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_sorts_the_images_of_a_class_bytewise_by_name, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_tar_samples_in_member_order, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_a_tfrecord_label_from_image_class_label_as_int64, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_the_image_key_and_label_key_it_is_given, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_label_minus_1_with_label_key_none, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_record_without_the_label_key_naming_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_record_without_the_image_key_listing_the_keys_present, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_a_tar_label_from_the_keys_cls_member, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_tar_sample_without_cls_as_nokey, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_a_tar_sample_without_cls_as_minus_1_with_label_key_none, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_back_the_jpeg_bytes_of_tfrecord_samples, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_back_the_jpeg_bytes_of_folder_images, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_back_the_jpeg_bytes_of_tar_members, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_says_which_shard_record_and_offset_hold_a_tfrecord_sample, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_says_which_tar_and_member_hold_a_tar_sample, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_says_which_image_file_holds_a_folder_sample, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_sample_past_the_end, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_read_checks_the_payload_crc, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_slot_of_a_record_whose_length_crc_alone_fails, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_records_before_a_cut_and_lists_the_cut, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_records_before_a_bad_length_and_lists_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_fails_as_empty_when_no_shard_has_a_whole_record, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_names_files_that_are_not_shards_by_kind_without_quoting_them, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_names_a_gzip_file_called_tar_by_kind, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_lists_an_unreadable_shard_and_keeps_the_others, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_read_refuses_a_shard_that_shrank, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_read_refuses_a_folder_image_replaced_by_another, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_read_of_a_deleted_shard_is_enoent, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_read_of_a_shard_become_unreadable_is_eacces, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_asks_the_index_store_for_each_shard_with_its_stamp, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_takes_a_stored_index_instead_of_scanning, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_rescans_a_shard_whose_stored_index_is_damaged, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_scan_error_of_a_cut_shard_in_its_stored_index, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_folder_indexes_out_of_the_index_store, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_tar_indexes_in_the_store_and_replays_them, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_scans_a_tar_shard_whose_stored_index_does_not_hold, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_gzip_tfrecords_as_the_same_records_uncompressed, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_a_remote_source_through_its_shard_cache_as_the_folder_itself, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_reads_a_remote_class_folder_tree_as_the_folder_itself, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_names_classes_of_gzip_tfrecords_also_from_their_stored_index, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_finds_gzip_shards_by_name_and_by_content, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_a_gzip_shards_index_in_the_store, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_serves_the_records_before_gzip_damage_and_names_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test(test_source_reads_a_gzip_tfrecord_tensorflow_wrote),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_records_after_one_over_4_gib_and_names_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_keeps_the_samples_after_a_tar_member_over_4_gib_and_names_it, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_gzip_tfrecord_bomb_naming_shard_ratio_and_option, tmp_dir_setup, tmp_dir_teardown),
		cmocka_unit_test_setup_teardown(test_source_refuses_a_tar_gz_bomb_naming_shard_ratio_and_option, tmp_dir_setup, tmp_dir_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
