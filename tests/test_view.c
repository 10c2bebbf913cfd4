/*
 * test_view.c - the mount as readers see it, without mounting: nodes,
 * attributes and listings, opens and their snapshots, reads of batch and
 * label files against the engine's own bytes, the generated files,
 * extended attributes and the push plan.
 *
 * Test data is made here: 10 JPEGs (TurboJPEG) in one TFRecord shard
 * written with the project's own writer; batches of 4 (the last of 2).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <turbojpeg.h>

#include "engine/engine.h"
#include "engine/formats/example.h"
#include "engine/formats/tfrecord.h"
#include "fs/jsonread.h"
#include "fs/view.h"

#define NSAMPLES 10

static char dir[64];

struct fixture {
	bfs_source *src;
	bfs_engine *eng;
	bfs_view *view;
	int warned;
	char last_warning[1024];
	bfs_view_io io;
	int released;       /* on_released calls */
};

static unsigned char *make_jpeg(int w, int h, int seed, unsigned long *len)
{
	unsigned char *px = malloc((size_t)w * h * 3), *jpeg = NULL;
	tjhandle tj = tjInitCompress();

	for (int i = 0; i < w * h * 3; i++)
		px[i] = (unsigned char)(i * 7 + seed * 31);
	*len = 0;
	if (tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, len, TJSAMP_420, 90, 0))
		fail_msg("tjCompress2: %s", tjGetErrorStr2(tj));
	tjDestroy(tj);
	free(px);
	return jpeg;
}

static int setup_dir(void **state)
{
	bfs_example_builder *b;
	char path[128];
	int fd;

	snprintf(dir, sizeof(dir), "/tmp/bfs-test-view-%d", getpid());
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(bfs_example_builder_create(&b), 0);
	for (int i = 0; i < NSAMPLES; i++) {
		unsigned long len;
		unsigned char *jpeg = make_jpeg(30 + i, 20 + i, i, &len);
		const uint8_t *rec;
		size_t rlen;

		bfs_example_builder_reset(b);
		/* sample 7 is cut short: its batch (1) fails */
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", jpeg,
							       i == 7 ? len / 2 : len), 0);
		assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label", i), 0);
		assert_int_equal(bfs_example_builder_finish(b, &rec, &rlen), 0);
		assert_int_equal(bfs_tfrecord_write(fd, rec, rlen), 0);
		tjFree(jpeg);
	}
	close(fd);
	bfs_example_builder_destroy(b);
	return 0;
}

static int teardown_dir(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void on_warn(void *ctx, const char *msg)
{
	struct fixture *f = ctx;

	f->warned++;
	snprintf(f->last_warning, sizeof(f->last_warning), "%s", msg);
}

static void on_io(void *ctx, bfs_view_io *io)
{
	*io = ((struct fixture *)ctx)->io;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	bfs_source_opts so = { .dir = dir };
	bfs_engine_opts eo = { .batch = 4, .height = 16, .width = 24,
			       .threads = 2, .epochs = 2 };
	bfs_view_opts vo = { 0 };
	char msg[BFS_ERRMSG_MAX];

	if (bfs_source_open(&so, &f->src, msg))
		fail_msg("source: %s", msg);
	if (bfs_engine_create(f->src, &eo, &f->eng, msg))
		fail_msg("engine: %s", msg);
	vo.src = f->src;
	vo.eng = f->eng;
	vo.cache_fp = "0123456789abcdef";
	vo.uid = 1234;
	vo.gid = 5678;
	vo.mounted.tv_sec = 1700000000;
	vo.io = on_io;
	vo.warn = on_warn;
	vo.ctx = f;
	assert_int_equal(bfs_view_create(&vo, &f->view), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	bfs_view_destroy(f->view);
	bfs_engine_destroy(f->eng);
	bfs_source_close(f->src);
	free(f);
	return 0;
}

static bfs_node node(struct fixture *f, const char *path)
{
	bfs_node n;

	if (bfs_ns_parse(bfs_view_shape(f->view), path, &n))
		fail_msg("no node %s", path);
	return n;
}

/* The whole file n through bfs_view_read, 1000 bytes at a time. */
static size_t read_all(struct fixture *f, const bfs_node *n, uint64_t fh,
		       char *out, size_t cap, int *err)
{
	size_t got = 0;

	*err = 0;
	for (;;) {
		struct iovec iov[2];
		bfs_view_pin pin;
		int niov;
		size_t chunk = 0;

		*err = bfs_view_read(f->view, 7, n, fh, 1000, (off_t)got, iov,
				     &niov, &pin);
		for (int k = 0; !*err && k < niov; k++) {
			assert_true(got + chunk + iov[k].iov_len <= cap);
			memcpy(out + got + chunk, iov[k].iov_base, iov[k].iov_len);
			chunk += iov[k].iov_len;
		}
		bfs_view_done(f->view, &pin);
		if (*err || chunk == 0)
			return got;
		got += chunk;
	}
}

static void test_view_sizes_are_exact_before_anything_is_decoded(void **state)
{
	struct fixture *f = *state;
	bfs_node n = node(f, "/epoch-0000/batch-000002.npy");
	bfs_engine_stats es;
	struct stat st;
	double timeout;
	char hdr[256];

	assert_int_equal(bfs_view_getattr(f->view, 1, &n, &st, &timeout), 0);
	/* the last batch holds 2 samples of 16 x 24 x 3 float32 */
	assert_int_equal(st.st_size,
			 (off_t)bfs_engine_npy_header(f->eng, 2, hdr, sizeof(hdr)) +
			 2 * 16 * 24 * 3 * 4);
	assert_int_equal(st.st_mode, S_IFREG | 0444);
	assert_int_equal(st.st_uid, 1234);
	assert_int_equal(st.st_gid, 5678);
	assert_int_equal(st.st_mtim.tv_sec, 1700000000);
	assert_true(timeout > 0);
	n = node(f, "/epoch-0001/batch-000000.labels.npy");
	assert_int_equal(bfs_view_getattr(f->view, 1, &n, &st, &timeout), 0);
	assert_int_equal(st.st_size, 128 + 4 * 8);
	bfs_engine_get_stats(f->eng, &es);
	assert_int_equal(es.batches_produced, 0);
	assert_int_equal(es.samples_decoded, 0);
}

static void test_view_stats_json_is_never_cached_and_sized_fresh(void **state)
{
	struct fixture *f = *state;
	bfs_node n = node(f, "/stats.json");
	struct stat st;
	double timeout;

	assert_int_equal(bfs_view_getattr(f->view, 1, &n, &st, &timeout), 0);
	assert_true(timeout == 0.0);
	assert_true(st.st_size > 100);
	assert_true(st.st_mtim.tv_sec > 1700000000);
}

static void test_view_lookup_finds_canonical_names_only(void **state)
{
	struct fixture *f = *state;
	bfs_node root = node(f, "/"), ep = node(f, "/epoch-0001"), n;
	struct stat st;
	double timeout;

	assert_int_equal(bfs_view_lookup(f->view, 1, &root, "epoch-0001", &n, &st,
					 &timeout), 0);
	assert_int_equal(n.kind, BFS_NODE_EPOCH);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_ino, bfs_view_ino(f->view, &n));
	assert_int_equal(bfs_view_lookup(f->view, 1, &root, "epoch-1", &n, &st,
					 &timeout), -ENOENT);
	assert_true(timeout > 0); /* a miss may be kept */
	assert_int_equal(bfs_view_lookup(f->view, 1, &ep, "batch-000003.npy", &n,
					 &st, &timeout), -ENOENT);
	assert_int_equal(bfs_view_lookup(f->view, 1, &ep, "batch-000002.labels.npy",
					 &n, &st, &timeout), 0);
	assert_int_equal(n.kind, BFS_NODE_LABELS);
	n = node(f, "/dataset.json");
	assert_int_equal(bfs_view_lookup(f->view, 1, &n, "x", &n, &st, &timeout),
			 -ENOTDIR);
}

static void test_view_lists_json_files_epochs_and_batch_pairs(void **state)
{
	struct fixture *f = *state;
	bfs_node root = node(f, "/"), ep = node(f, "/epoch-0000"),
		 file = node(f, "/dataset.json");
	const char *want_root[] = { ".", "..", "dataset.json", "stats.json",
				    "epoch-0000", "epoch-0001" };
	const char *want_ep[] = { ".", "..", "batch-000000.npy",
				  "batch-000000.labels.npy", "batch-000001.npy",
				  "batch-000001.labels.npy", "batch-000002.npy",
				  "batch-000002.labels.npy" };
	char name[64];
	struct stat st;
	uint64_t k;

	for (k = 0; bfs_view_dirent(f->view, &root, k, name, sizeof(name), &st) == 0; k++) {
		assert_true(k < 6);
		assert_string_equal(name, want_root[k]);
	}
	assert_int_equal(k, 6);
	for (k = 0; bfs_view_dirent(f->view, &ep, k, name, sizeof(name), &st) == 0; k++) {
		assert_true(k < 8);
		assert_string_equal(name, want_ep[k]);
		if (k >= 2)
			assert_true(S_ISREG(st.st_mode));
	}
	assert_int_equal(k, 8);
	assert_int_equal(bfs_view_dirent(f->view, &file, 0, name, sizeof(name), &st),
			 -ENOTDIR);
	assert_int_equal(bfs_view_opendir(f->view, &file), -ENOTDIR);
	assert_int_equal(bfs_view_opendir(f->view, &ep), 0);
}

static void test_view_open_refuses_writes_and_directories(void **state)
{
	struct fixture *f = *state;
	bfs_node b = node(f, "/epoch-0000/batch-000000.npy"), root = node(f, "/");
	bfs_view_open_info oi;

	assert_int_equal(bfs_view_open(f->view, 1, &b, O_WRONLY, 0, &oi), -EROFS);
	assert_int_equal(bfs_view_open(f->view, 1, &b, O_RDWR, 0, &oi), -EROFS);
	assert_int_equal(bfs_view_open(f->view, 1, &b, O_RDONLY | O_TRUNC, 0, &oi), -EROFS);
	assert_int_equal(bfs_view_open(f->view, 1, &root, O_RDONLY, 0, &oi), -EISDIR);
	assert_int_equal(bfs_view_access(f->view, &b, W_OK), -EROFS);
	assert_int_equal(bfs_view_access(f->view, &b, R_OK), 0);
	assert_int_equal(bfs_view_open(f->view, 1, &b, O_RDONLY, 1, &oi), 0);
	assert_true(oi.keep_cache && oi.hint && oi.lend);
	assert_int_equal(oi.fh, 0);
	assert_int_equal(bfs_view_open(f->view, 1, &b, O_RDONLY, 0, &oi), 0);
	assert_false(oi.lend);
}

static void test_view_reads_batch_files_as_the_engine_made_them(void **state)
{
	struct fixture *f = *state;
	bfs_node b = node(f, "/epoch-0001/batch-000000.npy"),
		 l = node(f, "/epoch-0001/batch-000000.labels.npy");
	static char got[65536], want[65536];
	char msg[BFS_ERRMSG_MAX], hdr[256];
	size_t hlen = bfs_engine_npy_header(f->eng, 3, hdr, sizeof(hdr)), n;
	size_t sb = bfs_engine_sample_bytes(f->eng);
	bfs_batch *batch;
	int err;

	n = read_all(f, &b, 0, got, sizeof(got), &err);
	assert_int_equal(err, 0);
	assert_int_equal(n, hlen + 4 * sb);
	assert_int_equal(bfs_engine_get(f->eng, 1, 3, &batch, msg), 0);
	memcpy(want, hdr, hlen);
	memcpy(want + hlen, bfs_batch_images(batch), 4 * sb);
	assert_memory_equal(got, want, n);
	n = read_all(f, &l, 0, got, sizeof(got), &err);
	assert_int_equal(err, 0);
	assert_int_equal(n, 128 + 4 * 8);
	assert_memory_equal(got + 128, bfs_batch_labels(batch), 32);
	bfs_engine_put(f->eng, batch);
}

static void test_view_failed_batch_reads_fail_with_eio_and_warn_once(void **state)
{
	struct fixture *f = *state;
	bfs_node b = node(f, "/epoch-0000/batch-000001.npy");
	static char got[8192];
	struct iovec iov[2];
	bfs_view_pin pin;
	int err, niov;

	/* the header alone never waits for (or needs) the batch */
	assert_int_equal(bfs_view_read(f->view, 1, &b, 0, 64, 0, iov, &niov, &pin), 0);
	assert_int_equal(niov, 1);
	bfs_view_done(f->view, &pin);
	f->warned = 0;
	read_all(f, &b, 0, got, sizeof(got), &err);
	assert_int_equal(err, -EIO);
	read_all(f, &b, 0, got, sizeof(got), &err);
	assert_int_equal(err, -EIO);
	assert_int_equal(f->warned, 1);
	assert_non_null(strstr(f->last_warning, "epoch 0 batch 1 fails with EIO"));
	assert_non_null(strstr(f->last_warning, "a.tfrecord record 7"));
}

static void test_view_snapshots_outlive_nothing_but_their_open(void **state)
{
	struct fixture *f = *state;
	bfs_node s = node(f, "/stats.json");
	bfs_view_open_info oi;
	static char got[65536];
	int err;
	size_t n;

	f->io.passthrough = 1;
	f->io.passthrough_opens = 42;
	assert_int_equal(bfs_view_open(f->view, 1, &s, O_RDONLY, 0, &oi), 0);
	assert_true(oi.fh != 0 && oi.direct_io);
	n = read_all(f, &s, oi.fh, got, sizeof(got) - 1, &err);
	assert_int_equal(err, 0);
	got[n] = '\0';
	assert_non_null(strstr(got, "\"passthrough\": true"));
	assert_non_null(strstr(got, "\"passthrough_opens\": 42"));
	bfs_view_release(f->view, &s, oi.fh);
	read_all(f, &s, oi.fh, got, sizeof(got), &err);
	assert_int_equal(err, -EBADF); /* a read racing its release */
}

static void test_view_dataset_json_holds_the_settings(void **state)
{
	struct fixture *f = *state;
	bfs_node d = node(f, "/dataset.json");
	static char got[16384];
	struct stat st;
	double timeout;
	int err;
	size_t n = read_all(f, &d, 0, got, sizeof(got) - 1, &err);

	assert_int_equal(err, 0);
	got[n] = '\0';
	assert_int_equal(bfs_view_getattr(f->view, 1, &d, &st, &timeout), 0);
	assert_int_equal(st.st_size, (off_t)n);
	assert_non_null(strstr(got, "\"samples\": 10"));
	assert_non_null(strstr(got, "\"batches_per_epoch\": 3"));
	assert_non_null(strstr(got, "\"batch_size\": 4"));
	assert_non_null(strstr(got, "\"dtype\": \"float32\""));
	assert_non_null(strstr(got, "\"cache\": \"none\""));
}

/* stats.json as a reader sees it, parsed. */
static bfs_jr *stats_now(struct fixture *f)
{
	bfs_node s = node(f, "/stats.json");
	bfs_view_open_info oi;
	static char got[65536];
	char err[128];
	bfs_jr *v;
	int rc;
	size_t n;

	assert_int_equal(bfs_view_open(f->view, 1, &s, O_RDONLY, 0, &oi), 0);
	n = read_all(f, &s, oi.fh, got, sizeof(got) - 1, &rc);
	assert_int_equal(rc, 0);
	bfs_view_release(f->view, &s, oi.fh);
	if (bfs_jr_parse(got, n, &v, err, sizeof(err)))
		fail_msg("stats.json: %s", err);
	return v;
}

static const bfs_jr *reader_of(const bfs_jr *st, uint64_t pid)
{
	const bfs_jr *rs = bfs_jr_get(st, "readers");

	for (size_t i = 0; rs && i < rs->n; i++)
		if (bfs_jr_num(bfs_jr_get(&rs->items[i], "pid"), -1) == (double)pid)
			return &rs->items[i];
	return NULL;
}

static void test_view_stats_json_says_when_where_each_reader_is_and_drops_gone_ones(void **state)
{
	struct fixture *f = *state;
	char msg[BFS_ERRMSG_MAX];
	bfs_batch *b;
	pid_t zombie, reaped;
	struct timespec now;
	const bfs_jr *r;
	bfs_jr *st;

	/* a process that has exited (reaped), and one nobody reaped yet */
	if ((reaped = fork()) == 0)
		_exit(0);
	assert_int_equal(waitpid(reaped, NULL, 0), reaped);
	if ((zombie = fork()) == 0)
		_exit(0);
	/* each reads a batch; so does this process: epoch 1, batch 2 (the
	 * last, of 2 samples; batch 1 holds the bad sample 7) */
	bfs_engine_hint(f->eng, (uint64_t)reaped, 0);
	bfs_engine_hint(f->eng, (uint64_t)zombie, 0);
	bfs_engine_hint(f->eng, (uint64_t)getpid(), 5);
	assert_int_equal(bfs_engine_get(f->eng, (uint64_t)getpid(), 5, &b, msg), 0);
	bfs_engine_put(f->eng, b);
	for (int i = 0; i < 500; i++) { /* until the zombie is one */
		char path[64], buf[256] = "";
		FILE *p;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)zombie);
		if ((p = fopen(path, "r"))) {
			if (!fgets(buf, sizeof(buf), p))
				buf[0] = '\0';
			fclose(p);
		}
		if (strstr(buf, ") Z "))
			break;
		usleep(10000);
	}
	st = stats_now(f);
	clock_gettime(CLOCK_REALTIME, &now);
	assert_true(fabs(bfs_jr_num(bfs_jr_get(st, "timestamp"), 0) - (double)now.tv_sec) < 60);
	assert_true(bfs_jr_num(bfs_jr_get(st, "uptime_seconds"), -1) >= 0);
	assert_true(bfs_jr_num(bfs_jr_get(st, "uptime_seconds"), -1) < 3600);
	assert_true(bfs_jr_num(bfs_jr_get(st, "samples_served"), 0) == 2);
	assert_non_null(r = reader_of(st, (uint64_t)getpid()));
	assert_true(bfs_jr_num(bfs_jr_get(r, "epoch"), -1) == 1);
	assert_true(bfs_jr_num(bfs_jr_get(r, "batch"), -1) == 2);
	assert_null(reader_of(st, (uint64_t)reaped));
	assert_null(reader_of(st, (uint64_t)zombie));
	bfs_jr_free(st);
	waitpid(zombie, NULL, 0);
}

static void test_view_dataset_json_has_stable_types_for_scripts(void **state)
{
	struct fixture *f = *state;
	bfs_node d = node(f, "/dataset.json");
	static char got[16384];
	char err[128];
	bfs_jr *v;
	int rc;
	size_t n = read_all(f, &d, 0, got, sizeof(got) - 1, &rc);

	assert_int_equal(rc, 0);
	assert_int_equal(bfs_jr_parse(got, n, &v, err, sizeof(err)), 0);
	assert_int_equal(bfs_jr_get(v, "shuffle")->type, BFS_JR_BOOL);
	assert_false(bfs_jr_bool(bfs_jr_get(v, "shuffle"), 1));
	assert_int_equal(bfs_jr_get(v, "seed")->type, BFS_JR_NULL);
	/* the records of this shard name no class: the list is empty and
	 * says why */
	assert_int_equal(bfs_jr_get(v, "classes")->n, 0);
	assert_int_equal(bfs_jr_get(v, "classes_from")->type, BFS_JR_NULL);
	assert_non_null(strstr(bfs_jr_str(bfs_jr_get(v, "classes_note"), ""),
			       "no image/class/synset"));
	bfs_jr_free(v);
}

static void test_view_index_and_preview_are_built_once_and_sized(void **state)
{
	struct fixture *f = *state;
	bfs_node ix = node(f, "/epoch-0000/batch-000002.index.json"),
		 pv = node(f, "/epoch-0000/batch-000000.preview.jpg"),
		 bad = node(f, "/epoch-0000/batch-000001.preview.jpg");
	bfs_view_open_info oi;
	static char got[1 << 20];
	struct stat st;
	double timeout;
	int err;
	size_t n;

	assert_int_equal(bfs_view_getattr(f->view, 1, &ix, &st, &timeout), 0);
	assert_int_equal(bfs_view_open(f->view, 1, &ix, O_RDONLY, 0, &oi), 0);
	n = read_all(f, &ix, oi.fh, got, sizeof(got) - 1, &err);
	assert_int_equal(err, 0);
	assert_int_equal(n, (size_t)st.st_size);
	got[n] = '\0';
	assert_non_null(strstr(got, "\"sample\": 9"));
	assert_non_null(strstr(got, "\"shard\": \"a.tfrecord\""));
	assert_non_null(strstr(got, "\"label\": 8"));
	bfs_view_release(f->view, &ix, oi.fh);

	assert_int_equal(bfs_view_getattr(f->view, 1, &pv, &st, &timeout), 0);
	assert_int_equal(bfs_view_open(f->view, 1, &pv, O_RDONLY, 0, &oi), 0);
	n = read_all(f, &pv, oi.fh, got, sizeof(got), &err);
	assert_int_equal(err, 0);
	assert_int_equal(n, (size_t)st.st_size);
	assert_true((unsigned char)got[0] == 0xff && (unsigned char)got[1] == 0xd8);
	bfs_view_release(f->view, &pv, oi.fh);
	/* a failed batch has no preview */
	assert_int_equal(bfs_view_getattr(f->view, 1, &bad, &st, &timeout), -EIO);
}

/* Many threads want index.json of the same three batches at once: each
 * file is built once (its bytes are the same for all), and nobody
 * deadlocks on the builder. */
struct idx_job {
	struct fixture *f;
	int k;
	size_t len;
};

static void *idx_main(void *arg)
{
	struct idx_job *j = arg;
	char path[64];
	bfs_node n;
	struct stat st;
	double timeout;

	snprintf(path, sizeof(path), "/epoch-0001/batch-%06d.index.json", j->k % 3);
	bfs_ns_parse(bfs_view_shape(j->f->view), path, &n);
	if (bfs_view_getattr(j->f->view, (uint64_t)j->k, &n, &st, &timeout) == 0)
		j->len = (size_t)st.st_size;
	return NULL;
}

static void test_view_builds_index_files_for_many_threads_at_once(void **state)
{
	struct fixture *f = *state;
	struct idx_job jobs[12];
	pthread_t t[12];

	for (int k = 0; k < 12; k++) {
		jobs[k] = (struct idx_job){ .f = f, .k = k };
		assert_int_equal(pthread_create(&t[k], NULL, idx_main, &jobs[k]), 0);
	}
	for (int k = 0; k < 12; k++)
		pthread_join(t[k], NULL);
	for (int k = 3; k < 12; k++)
		assert_int_equal(jobs[k].len, jobs[k % 3].len);
	assert_true(jobs[0].len > 0 && jobs[2].len > 0);
}

static void test_view_xattrs_name_shape_dtype_and_pid(void **state)
{
	struct fixture *f = *state;
	bfs_node b = node(f, "/epoch-0000/batch-000002.npy"),
		 l = node(f, "/epoch-0000/batch-000002.labels.npy"),
		 root = node(f, "/"), d = node(f, "/dataset.json");
	const char *names;
	char val[128], pid[32];

	assert_int_equal(bfs_view_getxattr(f->view, &b, "user.batchfs.shape", val,
					   sizeof(val)), 14);
	assert_memory_equal(val, "(2, 16, 24, 3)", 14);
	assert_int_equal(bfs_view_getxattr(f->view, &l, "user.batchfs.dtype", val,
					   sizeof(val)), 5);
	assert_memory_equal(val, "int64", 5);
	assert_int_equal(bfs_view_getxattr(f->view, &b, "user.other", val,
					   sizeof(val)), -ENODATA);
	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	assert_int_equal(bfs_view_getxattr(f->view, &root, "user.batchfs.pid", val,
					   sizeof(val)), (int)strlen(pid));
	assert_memory_equal(val, pid, strlen(pid));
	assert_int_equal(bfs_view_listxattr(f->view, &b, &names),
			 (int)sizeof("user.batchfs.shape\0user.batchfs.dtype"));
	assert_int_equal(bfs_view_listxattr(f->view, &d, &names), 0);
}

static void test_view_push_plan_follows_passthrough(void **state)
{
	struct fixture *f = *state;
	bfs_view_push plan;
	char msg[BFS_ERRMSG_MAX];
	bfs_batch *batch;

	assert_int_equal(bfs_engine_get(f->eng, 1, 5, &batch, msg), 0);
	/* without passthrough both files go into the page cache */
	bfs_view_push_plan(f->view, 5, batch, 0, &plan);
	assert_int_equal(plan.nfiles, 2);
	assert_true(plan.counts);
	assert_int_equal(plan.files[0].node.kind, BFS_NODE_BATCH);
	assert_int_equal(plan.files[0].node.epoch, 1);
	assert_int_equal(plan.files[0].node.batch, 2);
	assert_int_equal(plan.files[0].data_len, 2 * bfs_engine_sample_bytes(f->eng));
	assert_ptr_equal(plan.files[0].data, bfs_batch_images(batch));
	assert_int_equal(plan.files[1].node.kind, BFS_NODE_LABELS);
	assert_int_equal(plan.files[1].data_len, 16);
	/* with it the kernel reads the batch file itself: labels only */
	bfs_view_push_plan(f->view, 5, batch, 1, &plan);
	assert_int_equal(plan.nfiles, 1);
	assert_false(plan.counts);
	assert_true(plan.lookup);
	assert_int_equal(plan.batch.kind, BFS_NODE_BATCH);
	assert_int_equal(plan.files[0].node.kind, BFS_NODE_LABELS);
	bfs_engine_put(f->eng, batch);
}

static void test_view_lends_no_file_from_plain_memory(void **state)
{
	struct fixture *f = *state;
	bfs_node b = node(f, "/epoch-0000/batch-000000.npy"),
		 bad = node(f, "/epoch-0000/batch-000001.npy");
	bfs_view_pin pin;
	size_t len;

	/* the fixture's engine has no slot directory: nothing to lend */
	assert_int_equal(bfs_view_lend(f->view, 1, &b, &len, &pin), -1);
	assert_non_null(pin.batch); /* but the batch was waited for */
	bfs_view_done(f->view, &pin);
	assert_int_equal(bfs_view_lend(f->view, 1, &bad, &len, &pin), -1);
	assert_null(pin.batch);
	bfs_view_done(f->view, &pin);
}

static void test_view_statfs_is_read_only(void **state)
{
	struct fixture *f = *state;
	struct statvfs sv;

	bfs_view_statfs(f->view, &sv);
	assert_true(sv.f_flag & ST_RDONLY);
	assert_int_equal(sv.f_files, 2 + 2 * (1 + 2 * 3));
	assert_int_equal(sv.f_namemax, 255);
}

static void on_released(void *ctx)
{
	((struct fixture *)ctx)->released++;
}

/* --ranks 0-1 --world 2 --hold: 5 samples per rank (rank 0 has samples
 * 0, 2, 4, 6, 8, rank 1 the odd ones), batches of 4 and 1, 2 epochs. */
static int setup_ranked(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	bfs_source_opts so = { .dir = dir };
	bfs_engine_opts eo = { .batch = 4, .height = 16, .width = 24,
			       .threads = 2, .epochs = 2, .world = 2,
			       .ranks = 2 };
	bfs_view_opts vo = { 0 };
	char msg[BFS_ERRMSG_MAX];

	if (bfs_source_open(&so, &f->src, msg))
		fail_msg("source: %s", msg);
	if (bfs_engine_create(f->src, &eo, &f->eng, msg))
		fail_msg("engine: %s", msg);
	vo.src = f->src;
	vo.eng = f->eng;
	vo.cache_fp = "0123456789abcdef";
	vo.hold = 1;
	vo.on_released = on_released;
	vo.warn = on_warn;
	vo.ctx = f;
	assert_int_equal(bfs_view_create(&vo, &f->view), 0);
	*state = f;
	return 0;
}

/* Each rank has its own directory with its own epochs; its files are the
 * engine's batches of that rank. */
static void test_view_serves_each_rank_in_its_own_directory(void **state)
{
	struct fixture *f = *state;
	bfs_node root = node(f, "/"), r1 = node(f, "/rank-1"),
		 ep = node(f, "/rank-1/epoch-0001"),
		 l = node(f, "/rank-1/epoch-0001/batch-000001.labels.npy"),
		 l0 = node(f, "/rank-0/epoch-0000/batch-000000.labels.npy");
	const char *want_root[] = { ".", "..", "dataset.json", "stats.json",
				    "hold", "rank-0", "rank-1" };
	const char *want_r1[] = { ".", "..", "epoch-0000", "epoch-0001" };
	static char got[4096];
	char name[64], *buf;
	struct stat st;
	bfs_view_open_info oi;
	bfs_view_push plan;
	double timeout;
	bfs_batch *batch;
	size_t len;
	uint64_t k;
	int err;

	for (k = 0; bfs_view_dirent(f->view, &root, k, name, sizeof(name), &st) == 0; k++) {
		assert_true(k < 7);
		assert_string_equal(name, want_root[k]);
		assert_true(k < 5 || S_ISDIR(st.st_mode));
	}
	assert_int_equal(k, 7);
	for (k = 0; bfs_view_dirent(f->view, &r1, k, name, sizeof(name), &st) == 0; k++) {
		assert_true(k < 4);
		assert_string_equal(name, want_r1[k]);
	}
	assert_int_equal(k, 4);
	/* an epoch's ".." is its rank directory */
	assert_int_equal(bfs_view_dirent(f->view, &ep, 1, name, sizeof(name), &st), 0);
	assert_true(st.st_ino == bfs_view_ino(f->view, &r1));
	assert_int_equal(bfs_view_getattr(f->view, 1, &root, &st, &timeout), 0);
	assert_int_equal(st.st_nlink, 4);
	assert_int_equal(bfs_view_getattr(f->view, 1, &r1, &st, &timeout), 0);
	assert_true(S_ISDIR(st.st_mode) && st.st_nlink == 4);
	assert_int_equal(bfs_view_opendir(f->view, &r1), 0);
	assert_int_equal(bfs_view_open(f->view, 1, &r1, O_RDONLY, 0, &oi), -EISDIR);
	/* rank 1, epoch 1, batch 1: sample 9 alone; rank 0's first batch */
	assert_true(bfs_view_batch_id(f->view, &l) == (1 * 2 + 1) * 2 + 1);
	assert_int_equal(read_all(f, &l, 0, got, sizeof(got), &err), 128 + 8);
	assert_int_equal(err, 0);
	assert_int_equal(((int64_t *)(got + 128))[0], 9);
	assert_int_equal(read_all(f, &l0, 0, got, sizeof(got), &err), 128 + 32);
	for (int j = 0; j < 4; j++)
		assert_int_equal(((int64_t *)(got + 128))[j], 2 * j);
	/* dataset.json names the ranks; index.json its batch's */
	assert_int_equal(bfs_files_dataset_json(&(bfs_files){
		.shape = bfs_view_shape(f->view), .src = f->src, .eng = f->eng,
		.fingerprint = "x" }, &buf, &len), 0);
	{ /* without the writer's whitespace */
		size_t o = 0;

		for (size_t i = 0; buf[i]; i++)
			if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\t')
				buf[o++] = buf[i];
		buf[o] = '\0';
	}
	assert_non_null(strstr(buf, "\"ranks\":[0,1]"));
	assert_null(strstr(buf, "\"rank\":"));
	assert_non_null(strstr(buf, "rank-R/epoch-NNNN/batch-NNNNNN.npy"));
	free(buf);
	{
		bfs_node ix = node(f, "/rank-1/epoch-0001/batch-000001.index.json");

		assert_int_equal(bfs_view_open(f->view, 1, &ix, O_RDONLY, 0, &oi), 0);
		len = read_all(f, &ix, oi.fh, got, sizeof(got) - 1, &err);
		got[len] = '\0';
		assert_non_null(strstr(got, "\"rank\": 1,"));
		assert_non_null(strstr(got, "\"sample\": 9,"));
		bfs_view_release(f->view, &ix, oi.fh);
	}
	/* the push plan of a batch id names its rank's file */
	assert_int_equal(bfs_engine_get(f->eng, 1, 7, &batch, name), 0);
	bfs_view_push_plan(f->view, 7, batch, 0, &plan);
	assert_int_equal(plan.files[0].node.rank, 1);
	assert_int_equal(plan.files[0].node.epoch, 1);
	assert_int_equal(plan.files[0].node.batch, 1);
	bfs_engine_put(f->eng, batch);
}

/* /hold counts its opens; the last release of it (whoever closes it, the
 * kernel included) calls on_released, each time the count falls to 0. */
static void test_view_hold_says_when_its_last_open_is_closed(void **state)
{
	struct fixture *f = *state;
	bfs_node h = node(f, "/hold");
	bfs_view_open_info oi;
	struct stat st;
	double timeout;
	char val[32];
	uint64_t now, ever;

	assert_int_equal(bfs_view_getattr(f->view, 1, &h, &st, &timeout), 0);
	assert_true(S_ISREG(st.st_mode) && st.st_size == 0);
	assert_int_equal(bfs_view_open(f->view, 1, &h, O_RDONLY, 0, &oi), 0);
	assert_int_equal(bfs_view_open(f->view, 2, &h, O_RDONLY, 0, &oi), 0);
	bfs_view_holders(f->view, &now, &ever);
	assert_true(now == 2 && ever == 2);
	assert_int_equal(bfs_view_getxattr(f->view, &h, "user.batchfs.holders", val,
					   sizeof(val)), 1);
	assert_memory_equal(val, "2", 1);
	bfs_view_release(f->view, &h, oi.fh);
	assert_int_equal(f->released, 0);
	assert_int_equal(bfs_view_getxattr(f->view, &h, "user.batchfs.holders", val,
					   sizeof(val)), 1);
	assert_memory_equal(val, "1", 1);
	bfs_view_release(f->view, &h, oi.fh);
	assert_int_equal(f->released, 1);
	assert_int_equal(bfs_view_open(f->view, 3, &h, O_RDONLY, 0, &oi), 0);
	assert_int_equal(bfs_view_getxattr(f->view, &h, "user.batchfs.holds", val,
					   sizeof(val)), 1);
	assert_memory_equal(val, "3", 1);
	bfs_view_release(f->view, &h, oi.fh);
	assert_int_equal(f->released, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_view_sizes_are_exact_before_anything_is_decoded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_stats_json_is_never_cached_and_sized_fresh, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_lookup_finds_canonical_names_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_lists_json_files_epochs_and_batch_pairs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_open_refuses_writes_and_directories, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_reads_batch_files_as_the_engine_made_them, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_failed_batch_reads_fail_with_eio_and_warn_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_snapshots_outlive_nothing_but_their_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_dataset_json_holds_the_settings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_dataset_json_has_stable_types_for_scripts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_stats_json_says_when_where_each_reader_is_and_drops_gone_ones, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_index_and_preview_are_built_once_and_sized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_builds_index_files_for_many_threads_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_xattrs_name_shape_dtype_and_pid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_push_plan_follows_passthrough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_lends_no_file_from_plain_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_statfs_is_read_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_view_serves_each_rank_in_its_own_directory, setup_ranked, teardown),
		cmocka_unit_test_setup_teardown(test_view_hold_says_when_its_last_open_is_closed, setup_ranked, teardown),
	};

	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
