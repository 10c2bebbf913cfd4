/*
 * test_engine.c - the source index and the batch engine without FUSE:
 * bytes independent of threads and read order, bad samples in fail and
 * skip mode, partial batches, many readers sharing few slots, and
 * RandomResizedCrop with a store (one copy a sample, offered with its
 * shape; warm bytes equal cold ones) and with a size schedule.
 *
 * Test data is made here: JPEGs encoded with TurboJPEG, packed into a
 * TFRecord shard with the project's own writer.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <turbojpeg.h>

#include "engine/engine.h"
#include "engine/formats/example.h"
#include "engine/source.h"
#include "engine/formats/tfrecord.h"
#include "engine/storage/shardcache.h"
#include "engine/storage/storage.h"

#define NSAMPLES 21
#define BAD_SAMPLE 9 /* a truncated JPEG in the "bad" shard set */

static char dir_good[64], dir_bad[64];

/* A w x h RGB JPEG whose content depends on seed. */
static unsigned char *make_jpeg(int w, int h, int seed, unsigned long *len)
{
	unsigned char *px = malloc((size_t)w * h * 3), *jpeg = NULL;
	tjhandle tj = tjInitCompress();

	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			unsigned char *p = px + ((size_t)y * w + x) * 3;
			p[0] = (unsigned char)(x * 255 / w + seed * 37);
			p[1] = (unsigned char)(y * 255 / h + seed * 11);
			p[2] = (unsigned char)(((x / 8 + y / 8 + seed) & 1) * 200);
		}
	*len = 0;
	if (tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, len, TJSAMP_420, 85,
			0) != 0)
		fail_msg("tjCompress2: %s", tjGetErrorStr2(tj));
	tjDestroy(tj);
	free(px);
	return jpeg;
}

static void write_shards(const char *dir, int with_bad)
{
	bfs_example_builder *b;
	char path[128];
	int fd = -1;

	assert_int_equal(bfs_example_builder_create(&b), 0);
	for (int i = 0; i < NSAMPLES; i++) {
		unsigned long len;
		unsigned char *jpeg = make_jpeg(40 + i * 7, 30 + (i * 13) % 50, i,
					       &len);
		const uint8_t *rec;
		size_t rlen;

		if (i % 8 == 0) { /* three shards: 0-7, 8-15, 16-20 */
			if (fd >= 0)
				close(fd);
			snprintf(path, sizeof(path), "%s/part-%05d.tfrecord", dir,
				 i / 8);
			fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			assert_true(fd >= 0);
		}
		if (with_bad && i == BAD_SAMPLE)
			len /= 2;
		bfs_example_builder_reset(b);
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", jpeg, len), 0);
		assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label", 100 + i), 0);
		assert_int_equal(bfs_example_builder_finish(b, &rec, &rlen), 0);
		assert_int_equal(bfs_tfrecord_write(fd, rec, rlen), 0);
		tjFree(jpeg);
	}
	close(fd);
	bfs_example_builder_destroy(b);
}

static int setup(void **state)
{
	snprintf(dir_good, sizeof(dir_good), "/tmp/bfs-test-engine-%d-good", getpid());
	snprintf(dir_bad, sizeof(dir_bad), "/tmp/bfs-test-engine-%d-bad", getpid());
	mkdir(dir_good, 0755);
	mkdir(dir_bad, 0755);
	write_shards(dir_good, 0);
	write_shards(dir_bad, 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir_good, dir_bad);
	return system(cmd) == 0 ? 0 : -1;
}

static bfs_source *open_source(const char *dir)
{
	bfs_source_opts so = { .dir = dir };
	char msg[BFS_ERRMSG_MAX];
	bfs_source *src = NULL;

	if (bfs_source_open(&so, &src, msg))
		fail_msg("open %s: %s", dir, msg);
	return src;
}

static bfs_engine *open_engine(bfs_source *src, unsigned threads,
			       bfs_on_error on_error, unsigned prefetch,
			       unsigned slots)
{
	bfs_engine_opts o = { .batch = 4, .height = 24, .width = 32,
			      .threads = threads, .on_error = on_error,
			      .prefetch = prefetch, .slots = slots };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;

	if (bfs_engine_create(src, &o, &e, msg))
		fail_msg("engine: %s", msg);
	return e;
}

/* Copy all batches (in the given order) into one buffer in batch order. */
static uint8_t *read_all(bfs_engine *e, int reverse, int64_t *labels)
{
	uint64_t nb = bfs_engine_batches_per_epoch(e);
	size_t sb = bfs_engine_sample_bytes(e);
	uint8_t *all = calloc(NSAMPLES, sb);

	for (uint64_t i = 0; i < nb; i++) {
		uint64_t k = reverse ? nb - 1 - i : i;
		char msg[BFS_ERRMSG_MAX];
		bfs_batch *b;

		bfs_engine_hint(e, 1, k);
		if (bfs_engine_get(e, 1, k, &b, msg))
			fail_msg("batch %llu: %s", (unsigned long long)k, msg);
		memcpy(all + k * 4 * sb, bfs_batch_images(b), bfs_batch_count(b) * sb);
		if (labels)
			memcpy(labels + k * 4, bfs_batch_labels(b),
			       bfs_batch_count(b) * sizeof(int64_t));
		bfs_engine_put(e, b);
	}
	return all;
}

static void test_source_indexes_shards_in_name_order(void **state)
{
	bfs_source *src = open_source(dir_good);
	uint64_t rec;

	assert_int_equal(bfs_source_count(src), NSAMPLES);
	assert_int_equal(bfs_source_format(src), BFS_FORMAT_TFRECORD);
	assert_int_equal(bfs_source_nshards(src), 3);
	assert_string_equal(bfs_source_sample_shard(src, 17, &rec), "part-00002.tfrecord");
	assert_int_equal(rec, 1);
	bfs_source_close(src);
}

static void test_source_refuses_an_empty_directory(void **state)
{
	char dir[64], msg[BFS_ERRMSG_MAX] = "";
	bfs_source_opts so = { .dir = dir };
	bfs_source *src = NULL;

	snprintf(dir, sizeof(dir), "/tmp/bfs-test-engine-%d-empty", getpid());
	mkdir(dir, 0755);
	assert_int_equal(bfs_source_open(&so, &src, msg), BFS_E_EMPTY);
	assert_null(src);
	assert_non_null(strstr(msg, dir));
	rmdir(dir);
}

static void test_engine_bytes_do_not_depend_on_threads_or_order(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine *e1 = open_engine(src, 1, BFS_ON_ERROR_FAIL, 1, 0);
	bfs_engine *e3 = open_engine(src, 3, BFS_ON_ERROR_FAIL, 3, 0);
	int64_t l1[NSAMPLES], l3[NSAMPLES];
	uint8_t *a = read_all(e1, 0, l1), *b = read_all(e3, 1, l3);

	assert_memory_equal(a, b, NSAMPLES * bfs_engine_sample_bytes(e1));
	assert_memory_equal(l1, l3, sizeof(l1));
	for (int i = 0; i < NSAMPLES; i++)
		assert_int_equal(l1[i], 100 + i);
	free(a);
	free(b);
	bfs_engine_destroy(e1);
	bfs_engine_destroy(e3);
	bfs_source_close(src);
}

/* threads 0 is a worker per core the process may run on: its affinity
 * (taskset, a cpuset, Slurm's binding), not every core of the machine. */
static void test_engine_threads_follow_the_cpu_affinity(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine_opts o = { .batch = 4, .height = 8, .width = 8 };
	bfs_engine *e = NULL;
	bfs_engine_stats st;
	cpu_set_t all, one;
	int cpu = -1;

	assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
	assert_int_equal(bfs_engine_cores(), (unsigned)CPU_COUNT(&all));
	for (int i = 0; i < CPU_SETSIZE && cpu < 0; i++)
		if (CPU_ISSET(i, &all))
			cpu = i;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	assert_int_equal(bfs_engine_cores(), 1);
	assert_int_equal(bfs_engine_create(src, &o, &e, NULL), 0);
	assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.threads, 1);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

static void test_engine_last_batch_is_partial_unless_dropped(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine_opts o = { .batch = 4, .height = 8, .width = 8, .threads = 2,
			      .drop_remainder = 1 };
	bfs_engine *e = open_engine(src, 2, BFS_ON_ERROR_FAIL, 1, 0), *d = NULL;

	assert_int_equal(bfs_engine_batches_per_epoch(e), 6);
	assert_int_equal(bfs_engine_batch_count(e, 5), 1);
	assert_int_equal(bfs_engine_create(src, &o, &d, NULL), 0);
	assert_int_equal(bfs_engine_batches_per_epoch(d), 5);
	assert_int_equal(bfs_engine_batch_count(d, 4), 4);
	bfs_engine_destroy(d);
	o.batch = 64;
	assert_int_equal(bfs_engine_create(src, &o, &d, NULL), BFS_E_EMPTY);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

static void test_engine_fails_only_the_batch_with_a_bad_sample(void **state)
{
	bfs_source *src = open_source(dir_bad);
	bfs_engine *e = open_engine(src, 2, BFS_ON_ERROR_FAIL, 2, 0);
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_sample_error errs[4];
	bfs_batch *b;

	for (uint64_t k = 0; k < 6; k++) {
		int err = bfs_engine_get(e, 1, k, &b, msg);

		if (k == BAD_SAMPLE / 4) {
			assert_int_equal(err, BFS_E_DECODE);
			assert_null(b);
			assert_non_null(strstr(msg, "part-00001.tfrecord record 1"));
		} else {
			assert_int_equal(err, 0);
			bfs_engine_put(e, b);
		}
	}
	assert_int_equal(bfs_engine_errors(e, errs, 4), 1);
	assert_int_equal(errs[0].sample, BAD_SAMPLE);
	assert_int_equal(errs[0].record, 1);
	assert_string_equal(errs[0].shard, "part-00001.tfrecord");
	assert_false(errs[0].replaced);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

static void test_engine_skip_replaces_a_bad_sample_with_the_next(void **state)
{
	bfs_source *good = open_source(dir_good), *bad = open_source(dir_bad);
	bfs_engine *eg = open_engine(good, 2, BFS_ON_ERROR_FAIL, 2, 0);
	bfs_engine *eb = open_engine(bad, 2, BFS_ON_ERROR_SKIP, 2, 0);
	size_t sb = bfs_engine_sample_bytes(eg);
	int64_t lg[NSAMPLES], lb[NSAMPLES];
	uint8_t *g = read_all(eg, 0, lg), *b = read_all(eb, 1, lb);
	bfs_sample_error errs[4];

	for (int i = 0; i < NSAMPLES; i++) {
		int src = i == BAD_SAMPLE ? BAD_SAMPLE + 1 : i;

		assert_memory_equal(b + i * sb, g + src * sb, sb);
		assert_int_equal(lb[i], lg[src]);
	}
	assert_int_equal(bfs_engine_errors(eb, errs, 4), 1);
	assert_true(errs[0].replaced);
	assert_int_equal(errs[0].replacement, BAD_SAMPLE + 1);
	free(g);
	free(b);
	bfs_engine_destroy(eg);
	bfs_engine_destroy(eb);
	bfs_source_close(good);
	bfs_source_close(bad);
}

struct reader {
	bfs_engine *e;
	const uint8_t *want;
	unsigned seed;
	int mismatches;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	size_t sb = bfs_engine_sample_bytes(r->e);
	uint64_t nb = bfs_engine_batches_per_epoch(r->e);

	for (int n = 0; n < 40; n++) {
		uint64_t k = rand_r(&r->seed) % nb;
		bfs_batch *b;

		bfs_engine_hint(r->e, r->seed, k);
		if (bfs_engine_get(r->e, r->seed, k, &b, NULL)) {
			r->mismatches++;
			continue;
		}
		if (memcmp(bfs_batch_images(b), r->want + k * 4 * sb,
			   bfs_batch_count(b) * sb))
			r->mismatches++;
		bfs_engine_put(r->e, b);
	}
	return NULL;
}

static void test_engine_many_readers_on_few_slots_see_the_same_bytes(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine *ref = open_engine(src, 1, BFS_ON_ERROR_FAIL, 1, 0);
	/* 2 slots for 6 batches and 6 readers: constant eviction and waiting */
	bfs_engine *e = open_engine(src, 2, BFS_ON_ERROR_FAIL, 1, 2);
	uint8_t *want = read_all(ref, 0, NULL);
	struct reader r[6];
	pthread_t t[6];

	alarm(120); /* a deadlock fails the test instead of hanging CI */
	for (int i = 0; i < 6; i++) {
		r[i] = (struct reader){ .e = e, .want = want, .seed = 17u * i + 1 };
		pthread_create(&t[i], NULL, reader_main, &r[i]);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(r[i].mismatches, 0);
	}
	alarm(0);
	free(want);
	bfs_engine_destroy(ref);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

static void test_engine_rejects_ids_out_of_range(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine *e = open_engine(src, 1, BFS_ON_ERROR_FAIL, 1, 0);
	bfs_batch *b;

	assert_int_equal(bfs_engine_get(e, 1, 6, &b, NULL), -EINVAL);
	bfs_engine_hint(e, 1, 1000); /* ignored, must not crash */
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* deliver_ahead: keep a copy of every batch handed on. */
struct handed {
	pthread_mutex_t lock;
	size_t sample_bytes;
	unsigned times[NSAMPLES];
	uint8_t *bytes;           /* NSAMPLES samples, in batch order */
};

static int record_batch(void *ctx, uint64_t id, const bfs_batch *b)
{
	struct handed *h = ctx;

	pthread_mutex_lock(&h->lock);
	h->times[id]++;
	memcpy(h->bytes + id * 4 * h->sample_bytes, bfs_batch_images(b),
	       bfs_batch_count(b) * h->sample_bytes);
	pthread_mutex_unlock(&h->lock);
	return 1;
}

static void wait_pushed(bfs_engine *e, uint64_t n)
{
	bfs_engine_stats st;

	for (int i = 0; i < 5000; i++) {
		bfs_engine_get_stats(e, &st);
		if (st.batches_delivered >= n)
			return;
		usleep(1000);
	}
	fail_msg("only %llu batches handed on, want %llu",
		 (unsigned long long)st.batches_delivered, (unsigned long long)n);
}

/* Read-ahead that becomes ready while the pool has nothing else queued is
 * handed on, with the bytes a reader gets; a batch a reader asked for, and
 * read-ahead finishing while more work waits, are not (their copy would
 * take CPU from decoding that a reader waits for). */
static void test_engine_hands_on_idle_read_ahead_only(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct handed h = { .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_engine_opts o = { .batch = 4, .height = 24, .width = 32,
			      .threads = 1, .prefetch = 2,
			      .deliver_ahead = record_batch, .ctx = &h };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine_stats st;
	bfs_engine *e = NULL;
	bfs_batch *b;

	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	h.sample_bytes = bfs_engine_sample_bytes(e);
	h.bytes = calloc(NSAMPLES, h.sample_bytes);
	/* one worker: 0 (asked for) first, then read-ahead 1 (2 still
	 * queued), then 2 (nothing queued) */
	bfs_engine_hint(e, 1, 0);
	wait_pushed(e, 1);
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.batches_produced, 3);
	assert_int_equal(h.times[0], 0);
	assert_int_equal(h.times[1], 0);
	assert_int_equal(h.times[2], 1);
	assert_int_equal(bfs_engine_get(e, 1, 2, &b, msg), 0);
	assert_memory_equal(h.bytes + 2 * 4 * h.sample_bytes, bfs_batch_images(b),
			    4 * h.sample_bytes);
	bfs_engine_put(e, b);
	free(h.bytes);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* deliver_ahead that waits, as the mount's may (its look-up through the
 * mount waits on a loop thread, and every loop thread may be in a READ
 * waiting on the engine), until a reader has got another batch. */
struct blocking_hand {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int entered;           /* the call began */
	int reader_got;        /* the reader's get returned meanwhile */
	int saw_reader;        /* the call ended after the reader's get */
};

static int wait_for_reader(void *ctx, uint64_t id, const bfs_batch *b)
{
	struct blocking_hand *h = ctx;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20; /* only so that a deadlock fails, not hangs */
	pthread_mutex_lock(&h->lock);
	if (!h->entered++)
		pthread_cond_broadcast(&h->cv);
	while (!h->reader_got &&
	       pthread_cond_timedwait(&h->cv, &h->lock, &until) == 0)
		;
	h->saw_reader |= h->reader_got;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* A delivery that waits on a reader does not stop the pool: with one
 * worker, a batch that no one has started yet is produced while the
 * delivery waits.  (A worker that delivered itself once hung a
 * --threads 1 mount: its look-up waited on loop threads that waited on
 * that worker.) */
static void test_engine_decodes_while_a_delivery_waits_on_a_reader(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct blocking_hand h = { .lock = PTHREAD_MUTEX_INITIALIZER,
				   .cv = PTHREAD_COND_INITIALIZER };
	bfs_engine_opts o = { .batch = 4, .height = 24, .width = 32,
			      .threads = 1, .prefetch = 1,
			      .deliver_ahead = wait_for_reader, .ctx = &h };
	char msg[BFS_ERRMSG_MAX];
	struct timespec until;
	bfs_engine *e = NULL;
	bfs_batch *b;

	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	/* 0 asked for, then read-ahead 1 with nothing queued: handed on */
	bfs_engine_hint(e, 1, 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&h.lock);
	while (!h.entered &&
	       pthread_cond_timedwait(&h.cv, &h.lock, &until) == 0)
		;
	assert_int_equal(h.entered, 1);
	pthread_mutex_unlock(&h.lock);
	/* batch 4: no one has started it, and the delivery still waits */
	assert_int_equal(bfs_engine_get(e, 2, 4, &b, msg), 0);
	assert_int_equal(bfs_batch_count(b), 4);
	bfs_engine_put(e, b);
	pthread_mutex_lock(&h.lock);
	h.reader_got = 1;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.lock);
	bfs_engine_destroy(e); /* joins the courier */
	assert_int_equal(h.saw_reader, 1);
	bfs_source_close(src);
}

/* BFS_GET_ALONE: the get produces batch id and starts nothing
 * else (the mount replies first, then hints); the hint then reads ahead. */
static void test_engine_get_without_readahead_starts_only_its_batch(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine *e = open_engine(src, 1, BFS_ON_ERROR_FAIL, 2, 0);
	char msg[BFS_ERRMSG_MAX];
	bfs_engine_stats st;
	bfs_batch *b;

	assert_int_equal(bfs_engine_get_flags(e, 1, 0, BFS_GET_ALONE,
					      &b, msg), 0);
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.slots_filling, 0);
	assert_int_equal(st.batches_produced, 1);
	bfs_engine_put(e, b);
	bfs_engine_hint(e, 1, 0);
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.slots_filling + st.batches_produced, 3);
	/* a plain get reads ahead by itself */
	assert_int_equal(bfs_engine_get(e, 1, 3, &b, msg), 0);
	bfs_engine_get_stats(e, &st);
	assert_true(st.slots_filling + st.batches_produced >= 5);
	bfs_engine_put(e, b);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* Every batch's images, in order, from an engine without slot files: what
 * an engine with them must hand out. */
static uint8_t *plain_bytes(bfs_source *src)
{
	bfs_engine *plain = open_engine(src, 1, BFS_ON_ERROR_FAIL, 2, 0);
	uint8_t *want = read_all(plain, 0, NULL);

	bfs_engine_destroy(plain);
	return want;
}

/* Can slot files live in /dev/shm here (a tmpfs that grants leases)? */
static int slot_files_here(void)
{
	int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int ok = fd >= 0 && fcntl(fd, F_SETLEASE, F_WRLCK) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

static void read_file_at(int fd, void *buf, size_t len)
{
	assert_int_equal(pread(fd, buf, len, 0), (ssize_t)len);
}

/* With slot_dir each batch is a whole .npy file (header, then the images
 * the engine hands out).  A file a reader still holds (here: a read-only
 * open, as the mount hands the kernel) keeps its bytes while the slot is
 * reused: the slot moves to a new file.  A file nobody holds is reused in
 * place. */
static void test_engine_slot_files_keep_what_readers_hold(void **state)
{
	bfs_source *src;
	bfs_engine *e;
	bfs_engine_opts o = { .batch = 4, .height = 24, .width = 32,
			      .threads = 1, .prefetch = 1, .slots = 2,
			      .lend_dir = "/dev/shm" };
	char msg[BFS_ERRMSG_MAX], hdr[256], path[64];
	uint8_t *want, *got;
	bfs_engine_stats st;
	bfs_batch *b;
	size_t sb, len, hlen;
	int fd, held;

	if (!slot_files_here())
		skip();
	src = open_source(dir_good);
	want = plain_bytes(src);
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	sb = bfs_engine_sample_bytes(e);
	hlen = bfs_engine_npy_header(e, 0, hdr, sizeof(hdr));
	assert_true(hlen > 0);
	got = malloc(hlen + 4 * sb);

	assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), 0);
	fd = bfs_batch_file(b, &len);
	assert_true(fd >= 0);
	assert_int_equal(len, hlen + 4 * sb);
	read_file_at(fd, got, len);
	assert_memory_equal(got, hdr, hlen);
	assert_memory_equal(got + hlen, want, 4 * sb);
	assert_memory_equal(bfs_batch_images(b), want, 4 * sb);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	held = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(held >= 0);
	bfs_engine_lend(e, b, &len);
	bfs_engine_put(e, b);

	/* batches 1..5 through two slots: batch 0's slot is reused */
	for (uint64_t k = 1; k < 6; k++) {
		unsigned n;

		bfs_engine_hint(e, 1, k);
		assert_int_equal(bfs_engine_get(e, 1, k, &b, msg), 0);
		n = bfs_batch_count(b);
		fd = bfs_batch_file(b, &len);
		assert_true(fd >= 0);
		assert_int_equal(len, hlen + n * sb); /* the last: 1 sample */
		read_file_at(fd, got, len);
		assert_memory_equal(got + hlen, want + k * 4 * sb, n * sb);
		bfs_engine_put(e, b);
	}
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.slot_files_replaced, 1);
	assert_int_equal(st.slot_file_errors, 0);
	read_file_at(held, got, hlen + 4 * sb);
	assert_memory_equal(got + hlen, want, 4 * sb);
	close(held);

	/* exposed but let go: reused in place */
	assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), 0);
	bfs_engine_lend(e, b, &len);
	bfs_engine_put(e, b);
	for (uint64_t k = 1; k < 4; k++) {
		assert_int_equal(bfs_engine_get(e, 1, k, &b, msg), 0);
		bfs_engine_put(e, b);
	}
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.slot_files_replaced, 1);

	free(got);
	free(want);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* A slot file a reader holds is passed over while another slot will do,
 * as when a reader keeps its last batch mapped while it opens the next:
 * with room for one more slot, reading on moves no slot to a new file. */
static void test_engine_passes_over_a_held_slot_file(void **state)
{
	bfs_engine_opts o = { .batch = 4, .height = 24, .width = 32,
			      .threads = 1, .prefetch = 1, .slots = 3,
			      .lend_dir = "/dev/shm" };
	char msg[BFS_ERRMSG_MAX], path[64];
	bfs_source *src;
	bfs_engine *e;
	bfs_engine_stats st;
	bfs_batch *b;
	size_t len;
	int held = -1;

	if (!slot_files_here())
		skip();
	src = open_source(dir_good);
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	for (uint64_t k = 0; k < 6; k++) {
		int fd;

		bfs_engine_hint(e, 1, k);
		assert_int_equal(bfs_engine_get(e, 1, k, &b, msg), 0);
		fd = bfs_batch_file(b, &len);
		assert_true(fd >= 0);
		if (held >= 0)
			close(held); /* let go of the batch before */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		held = open(path, O_RDONLY | O_CLOEXEC);
		assert_true(held >= 0);
		bfs_engine_lend(e, b, &len);
		bfs_engine_put(e, b);
	}
	close(held);
	bfs_engine_get_stats(e, &st);
	assert_int_equal(st.slot_files_replaced, 0);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* A tmpfs too small for every slot file (ENOSPC at posix_fallocate): the
 * slots that get no file use plain memory, every batch is still served
 * with the same bytes, and the errors are counted.  Needs root (mount).
 * The engine is told the directory has room (as when others fill it
 * after create looked), or it would leave the directory out. */
static void test_engine_slot_files_fall_back_when_tmpfs_is_full(void **state)
{
	char dir[64], msg[BFS_ERRMSG_MAX];
	bfs_mem_room room;
	bfs_engine_opts o = { .batch = 4, .height = 24, .width = 32,
			      .threads = 1, .prefetch = 2, .slots = 4,
			      .lend_dir = dir, .room = &room };
	bfs_source *src;
	bfs_engine *e;
	bfs_engine_stats st;
	uint8_t *want, *got;
	int files = 0, mem = 0;

	snprintf(dir, sizeof(dir), "/tmp/bfs-test-engine-%d-shm", getpid());
	mkdir(dir, 0700);
	/* 48 KiB: one slot file (128 + 4 x 9216 bytes, 10 pages) fits */
	if (mount("tmpfs", dir, "tmpfs", 0, "size=48k") != 0) {
		rmdir(dir);
		skip();
	}
	bfs_engine_mem_room(NULL, &room);
	room.dir_free = 1ull << 40;
	src = open_source(dir_good);
	want = plain_bytes(src);
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	for (uint64_t k = 0; k < 4; k++) { /* four batches, four slots */
		bfs_batch *b;
		size_t len;

		assert_int_equal(bfs_engine_get(e, 1, k, &b, msg), 0);
		if (bfs_batch_file(b, &len) >= 0)
			files++;
		else
			mem++;
		bfs_engine_put(e, b);
	}
	got = read_all(e, 1, NULL);
	assert_memory_equal(got, want, NSAMPLES * bfs_engine_sample_bytes(e));
	bfs_engine_get_stats(e, &st);
	assert_true(files >= 1);
	assert_true(mem >= 1);
	assert_true(st.slot_file_errors >= 1);
	free(got);
	free(want);
	bfs_engine_destroy(e);
	bfs_source_close(src);
	assert_int_equal(umount(dir), 0);
	rmdir(dir);
}

/* A shard dir of `n` JPEGs of w x h each (labels 0..n-1). */
static void write_big_shard(const char *dir, int n, int w, int h)
{
	bfs_example_builder *b;
	char path[160];
	int fd;

	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/big.tfrecord", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(bfs_example_builder_create(&b), 0);
	for (int i = 0; i < n; i++) {
		unsigned long len;
		unsigned char *jpeg = make_jpeg(w, h, i, &len);
		const uint8_t *rec;
		size_t rlen;

		bfs_example_builder_reset(b);
		assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", jpeg, len), 0);
		assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label", i), 0);
		assert_int_equal(bfs_example_builder_finish(b, &rec, &rlen), 0);
		assert_int_equal(bfs_tfrecord_write(fd, rec, rlen), 0);
		tjFree(jpeg);
	}
	close(fd);
	bfs_example_builder_destroy(b);
}

/* Four threads in a 64 MiB budget: the scratch pool is 32 MiB, and each
 * worker keeps 8 MiB of it, so before borrowing a 2000x1500 image (12
 * MiB of pixels) failed as "more than --mem allows one worker".  Now it
 * borrows from the slots' share and decodes; one that cannot fit in the
 * whole budget fails with BFS_E_MEMORY and the --mem that would do. */
static void test_engine_big_image_borrows_from_the_budget(void **state)
{
	char dir[96], msg[BFS_ERRMSG_MAX] = "";
	bfs_engine_opts o = { .batch = 2, .height = 24, .width = 32,
			      .threads = 4, .mem_bytes = 64u << 20 };
	bfs_engine_stats st;
	bfs_source *src;
	bfs_engine *e;
	bfs_batch *b;

	snprintf(dir, sizeof(dir), "/tmp/bfs-test-engine-%d-big", getpid());
	write_big_shard(dir, 4, 2000, 1500);
	src = open_source(dir);
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	for (uint64_t k = 0; k < 2; k++) {
		assert_int_equal(bfs_engine_get(e, 1, k, &b, msg), 0);
		bfs_engine_put(e, b);
	}
	bfs_engine_get_stats(e, &st);
	assert_true(st.mem_bytes <= st.mem_budget);
	bfs_engine_destroy(e);
	bfs_source_close(src);

	write_big_shard(dir, 2, 4000, 3000); /* 48 MiB of pixels each */
	src = open_source(dir);
	o.mem_bytes = 48u << 20;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), BFS_E_MEMORY);
	assert_non_null(strstr(msg, "more than --mem 48 MiB leaves for one image"));
	assert_non_null(strstr(msg, "use --mem "));
	assert_non_null(strstr(msg, "big.tfrecord record 0"));
	bfs_engine_destroy(e);
	bfs_source_close(src);

	/* with --max-pixels the budget is checked at create: a default
	 * --max-pixels shrinks to fit, an asked-for one is refused */
	src = open_source(dir);
	o.max_pixels = 64ull << 20;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "cannot decode an image of --max-pixels 67108864"));
	o.max_pixels_auto = 1;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_true(bfs_engine_options(e)->max_pixels < 12000000);
	assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), BFS_E_TOOBIG);
	bfs_engine_destroy(e);
	o.mem_bytes = 0; /* the default budget grows to fit instead */
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_int_equal(bfs_engine_options(e)->max_pixels, 64ull << 20);
	assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), 0);
	bfs_engine_put(e, b);
	bfs_engine_destroy(e);
	bfs_source_close(src);
	snprintf(msg, sizeof(msg), "rm -rf '%s'", dir);
	assert_int_equal(system(msg), 0);
}

/* The budget's room, as pure functions: the cap is half of the RAM and
 * half of what is available; the default 1/8 of the RAM (256 MiB..1 GiB)
 * never above it; an explicit --mem at most what is available. */
static void test_engine_mem_cap_is_a_share_of_ram_and_of_what_is_available(void **state)
{
	const uint64_t M = 1ull << 20, G = 1ull << 30;
	static const struct {
		bfs_mem_room r;
		uint64_t cap, dflt, max;
	} cases[] = {
		{ { 24 * (1ull << 30), 20 * (1ull << 30), 0 }, 10ull << 30, 1ull << 30, 20ull << 30 },
		{ { 24 * (1ull << 30), 1ull << 30, 0 }, 512ull << 20, 512ull << 20, 1ull << 30 },
		{ { 1ull << 30, 1ull << 30, 0 }, 512ull << 20, 256ull << 20, 1ull << 30 },
		{ { 4ull << 30, 0, 0 }, 2ull << 30, 512ull << 20, 4ull << 30 },
		{ { 0, 6ull << 30, 0 }, 3ull << 30, 1ull << 30, 6ull << 30 },
		{ { 0, 0, 0 }, 1ull << 30, 1ull << 30, 0 },
		{ { 256ull << 20, 100ull << 20, 0 }, 50ull << 20, 50ull << 20, 100ull << 20 },
		{ { 1ull << 40, 1ull << 40, 0 }, 1ull << 39, 1ull << 30, 1ull << 40 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const bfs_mem_room *r = &cases[i].r;

		assert_true(bfs_engine_mem_cap(r) == cases[i].cap);
		assert_true(bfs_engine_default_mem_for(r) == cases[i].dflt);
		assert_true(bfs_engine_mem_max(r) == cases[i].max);
		assert_true(bfs_engine_default_mem_for(r) <= bfs_engine_mem_cap(r));
		if (r->ram_total)
			assert_true(bfs_engine_mem_cap(r) <= r->ram_total / 2);
	}
	/* a quarter of the slot directory stays free */
	assert_true(bfs_engine_dir_fits(&(bfs_mem_room){ 0, 0, 4 * G }, 3 * G));
	assert_false(bfs_engine_dir_fits(&(bfs_mem_room){ 0, 0, 4 * G }, 3 * G + M));
	assert_false(bfs_engine_dir_fits(&(bfs_mem_room){ 0, 0, 0 }, M));
	/* this machine, measured: within its RAM */
	{
		bfs_mem_room r;

		bfs_engine_mem_room("/tmp", &r);
		assert_true(r.ram_total > 0);
		assert_true(r.dir_free > 0);
		assert_true(bfs_engine_default_mem() <= r.ram_total / 2);
	}
}

/* A default budget grows for big batches (to four of them), but never
 * past the machine's cap: before, --size-schedule 10000x10000 with
 * --batch 16 made a 73 GiB budget on a 23 GiB machine, and /dev/shm grew
 * until the OOM killer ended other processes.  What does not fit in the
 * cap is refused, naming the batch and the room; an explicit --mem above
 * what is available is refused; and a slot directory without room for
 * the budget is left out, saying why.  Nothing big is allocated: slots
 * get their memory when a batch first needs it. */
static void test_engine_default_budget_never_grows_past_the_machine(void **state)
{
	const uint64_t M = 1ull << 20, G = 1ull << 30;
	bfs_mem_room room = { 4 * G, 3 * G, 0 }; /* cap 1.5 GiB */
	bfs_source *src = open_source(dir_good);
	/* one batch: 32 x 1024 x 1024 x 3 float32 = 384 MiB */
	bfs_engine_opts o = { .batch = 32, .height = 1024, .width = 1024,
			      .threads = 2, .room = &room };
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_engine_stats st;
	bfs_engine *e = NULL;

	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	bfs_engine_get_stats(e, &st);
	/* four batches and scratch would be 1.55 GiB: the cap holds it */
	assert_true(st.mem_budget <= 3 * G / 2);
	assert_true(st.mem_cap == 3 * G / 2);
	assert_true(st.slots >= 2);
	assert_true(bfs_engine_options(e)->mem_bytes == st.mem_budget);
	bfs_engine_destroy(e);

	/* the size schedule's largest size counts */
	o.batch = 16;
	o.height = o.width = 64;
	o.augment_rrc = 1;
	o.nsizes = 2;
	o.sizes[0].from = 0;
	o.sizes[0].h = o.sizes[0].w = 64;
	o.sizes[1].from = 1;
	o.sizes[1].h = o.sizes[1].w = 10000;
	o.epochs = 2;
	msg[0] = '\0';
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_null(e);
	assert_non_null(strstr(msg, "one batch takes 18311 MiB"));
	assert_non_null(strstr(msg, "--batch 16 of 10000x10000 float32, the size schedule's largest"));
	assert_non_null(strstr(msg, "the default --mem (1536 MiB: half of the RAM 4096 MiB and of the 3072 MiB available)"));
	assert_non_null(strstr(msg, "use a smaller --batch or size"));

	/* an explicit --mem: at most what is available */
	o.augment_rrc = 0;
	o.nsizes = 0;
	o.epochs = 1;
	o.mem_bytes = 3 * G + M;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "--mem 3073 MiB is more than this machine has: 3072 MiB available of 4096 MiB of RAM"));
	o.mem_bytes = 64 * M;
	o.lend_dir = "/tmp"; /* a slot directory with 40 MiB free: left out */
	room.dir_free = 40 * M;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_null(bfs_engine_options(e)->lend_dir);
	assert_string_equal(bfs_engine_lend_note(e),
			    "/tmp has 40 MiB free, less than --mem 64 MiB and a quarter to spare; see --slot-dir");
	bfs_engine_destroy(e);
	room.dir_free = 100 * M; /* room: used */
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_string_equal(bfs_engine_options(e)->lend_dir, "/tmp");
	assert_string_equal(bfs_engine_lend_note(e), "");
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* One engine for ranks A..B of W (the local ranks of a node): each rank's
 * batches, labels, sample indices and augmentation draws are those of an
 * engine made for that rank alone, in every epoch. */
static void test_engine_serves_several_ranks_as_engines_of_their_own(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine_opts o = { .batch = 2, .height = 24, .width = 32,
			      .threads = 2, .epochs = 3, .shuffle = 1, .seed = 7,
			      .augment_flip = 1, .world = 4 };
	static const unsigned first[] = { 0, 1 }, count[] = { 4, 2 };
	char msg[BFS_ERRMSG_MAX];

	for (int c = 0; c < 2; c++) {
		bfs_engine_opts mo = o;
		bfs_engine *many = NULL;
		uint64_t nb;

		mo.rank = first[c];
		mo.ranks = count[c];
		assert_int_equal(bfs_engine_create(src, &mo, &many, msg), 0);
		assert_int_equal(bfs_engine_ranks(many), count[c]);
		nb = bfs_engine_batches_per_epoch(many);
		assert_int_equal(nb, 3); /* 21 / 4 = 5 samples: 2 + 2 + 1 */
		for (unsigned r = 0; r < count[c]; r++) {
			bfs_engine_opts so = o;
			bfs_engine *one = NULL;

			so.rank = first[c] + r;
			assert_int_equal(bfs_engine_create(src, &so, &one, msg), 0);
			assert_int_equal(bfs_engine_batches_per_epoch(one), nb);
			for (unsigned ep = 0; ep < 3; ep++)
				for (uint64_t k = 0; k < nb; k++) {
					uint64_t id1 = ep * nb + k;
					uint64_t idm = (r * 3 + ep) * nb + k;
					bfs_batch *a, *b;
					unsigned n = bfs_engine_batch_count(one, id1);

					assert_int_equal(bfs_engine_batch_count(many, idm), n);
					for (unsigned j = 0; j < n; j++) {
						int f1, x1, y1, f2, x2, y2;

						assert_true(bfs_engine_sample_index(one, id1, j) ==
							    bfs_engine_sample_index(many, idm, j));
						assert_int_equal(bfs_engine_sample_aug(one, id1, j, &f1, &x1, &y1), 0);
						assert_int_equal(bfs_engine_sample_aug(many, idm, j, &f2, &x2, &y2), 0);
						assert_int_equal(f1, f2);
					}
					assert_int_equal(bfs_engine_get(one, 1, id1, &a, msg), 0);
					assert_int_equal(bfs_engine_get(many, 1, idm, &b, msg), 0);
					assert_int_equal(bfs_batch_count(a), n);
					assert_memory_equal(bfs_batch_images(a), bfs_batch_images(b),
							    n * bfs_engine_sample_bytes(one));
					assert_memory_equal(bfs_batch_labels(a), bfs_batch_labels(b),
							    n * sizeof(int64_t));
					bfs_engine_put(one, a);
					bfs_engine_put(many, b);
				}
			bfs_engine_destroy(one);
		}
		/* past the last rank's last batch nothing exists */
		assert_int_equal(bfs_engine_batch_count(many, count[c] * 3 * nb), 0);
		bfs_engine_destroy(many);
	}
	/* ranks past the world are refused, naming both */
	o.rank = 2;
	o.ranks = 3;
	{
		bfs_engine *e = NULL;

		assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
		assert_non_null(strstr(msg, "--ranks 2-4 --world 4"));
	}
	bfs_source_close(src);
}

/* deliver_ahead that only records which batch ids were handed on. */
static int record_id(void *ctx, uint64_t id, const bfs_batch *b)
{
	uint64_t *last = ctx;

	__atomic_store_n(last, id + 1, __ATOMIC_RELEASE);
	return 1;
}

/* Read-ahead past a rank's last batch goes on with that rank's first
 * epoch, never into the next rank's batches. */
static void test_engine_reads_ahead_within_the_reader_s_rank(void **state)
{
	bfs_source *src = open_source(dir_good);
	uint64_t handed = 0;
	bfs_engine_opts o = { .batch = 2, .height = 24, .width = 32,
			      .threads = 1, .prefetch = 2, .epochs = 2,
			      .world = 2, .ranks = 2,
			      .deliver_ahead = record_id, .ctx = &handed };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;
	uint64_t nb, last;

	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	nb = bfs_engine_batches_per_epoch(e); /* 10 samples: 5 batches */
	last = 2 * nb - 1;                     /* rank 0, epoch 1, last */
	/* one worker: `last` (asked for), then read-ahead d=1 while d=2 is
	 * queued, then d=2 with nothing queued: handed on */
	bfs_engine_hint(e, 1, last);
	wait_pushed(e, 1);
	assert_int_equal(__atomic_load_n(&handed, __ATOMIC_ACQUIRE), 1 + 1);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* ---- epoch layouts --------------------------------------------------------- */

/* The shard table of dir_good: 8, 8 and 5 samples. */
static const uint64_t good_first[] = { 0, 8, 16, 21 };

/* bfs_layout_sample of a layout built from o alone, for rank r, epoch ep. */
static uint64_t layout_sample(const bfs_layout_opts *lo, uint64_t ep, unsigned r, uint64_t k)
{
	char msg[BFS_ERRMSG_MAX];
	bfs_layout *l = NULL;
	bfs_layout_epoch e;
	uint64_t table[4], s;

	if (bfs_layout_create(lo, &l, msg))
		fail_msg("layout: %s", msg);
	bfs_layout_epoch_init(&e, l, ep, bfs_layout_table_len(l) ? table : NULL);
	s = bfs_layout_sample(&e, r, k);
	bfs_layout_destroy(l);
	return s;
}

static void test_engine_serves_the_layout_of_a_block_order_and_a_shards_split(void **state)
{
	bfs_source *src = open_source(dir_good);
	static const struct { bfs_split split; unsigned rank, ranks, world, node_ranks; } c[] = {
		{ BFS_SPLIT_SAMPLES, 1, 2, 3, 0 },
		{ BFS_SPLIT_SHARDS, 2, 2, 4, 0 },  /* node 1 of 2: node_ranks from --ranks */
		{ BFS_SPLIT_SHARDS, 3, 0, 6, 3 },  /* one rank, on node 1 of 2 */
	};
	char msg[BFS_ERRMSG_MAX];

	for (size_t t = 0; t < sizeof(c) / sizeof(c[0]); t++) {
		bfs_engine_opts o = { .batch = 2, .height = 24, .width = 32, .threads = 2,
				      .epochs = 3, .shuffle = 1, .seed = 5, .shuffle_block = 2,
				      .split = c[t].split, .rank = c[t].rank, .ranks = c[t].ranks,
				      .world = c[t].world, .node_ranks = c[t].node_ranks };
		unsigned nr = c[t].ranks ? c[t].ranks : 1;
		bfs_layout_opts lo = { .n = 21, .first = good_first, .nshards = 3, .shuffle = 1,
				       .seed = 5, .block = 2, .split = c[t].split,
				       .world = c[t].world, .node_ranks = c[t].node_ranks
				       ? c[t].node_ranks : nr };
		bfs_engine *e = NULL;
		uint64_t nb;

		assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
		assert_int_equal(bfs_engine_options(e)->node_ranks,
				 c[t].split == BFS_SPLIT_SHARDS ? lo.node_ranks : c[t].node_ranks);
		nb = bfs_engine_batches_per_epoch(e);
		for (unsigned r = 0; r < nr; r++)
			for (unsigned ep = 0; ep < 3; ep++)
				for (uint64_t b = 0; b < nb; b++) {
					uint64_t id = ((uint64_t)r * 3 + ep) * nb + b;
					unsigned n = bfs_engine_batch_count(e, id);
					bfs_batch *bt;

					assert_true(n > 0);
					assert_int_equal(bfs_engine_get(e, 1, id, &bt, msg), 0);
					for (unsigned j = 0; j < n; j++) {
						uint64_t want = layout_sample(&lo, ep, c[t].rank + r,
									      b * 2 + j);

						assert_true(bfs_engine_sample_index(e, id, j) == want);
						/* the label says which sample it holds */
						assert_true(bfs_batch_labels(bt)[j] == 100 + (int64_t)want);
					}
					bfs_engine_put(e, bt);
				}
		bfs_engine_destroy(e);
	}
	bfs_source_close(src);
}

struct lookups {
	bfs_engine *e;
	const uint64_t *want;
	uint64_t ids;
	unsigned stride, start;
	int bad;
};

static void *lookup_thread(void *arg)
{
	struct lookups *lk = arg;

	for (uint64_t i = 0; i < lk->ids; i++) {
		uint64_t id = (lk->start + i * lk->stride) % lk->ids;

		for (unsigned j = 0; j < 2; j++)
			if (bfs_engine_sample_index(lk->e, id, j) != lk->want[id * 2 + j])
				lk->bad++;
	}
	return NULL;
}

/* 100,000 epochs of a block order: tables only for the epochs in use;
 * threads that look up far apart epochs at once agree with one that
 * looked them up alone. */
static void test_engine_block_order_lookups_from_many_threads_and_epochs_agree(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine_opts o = { .batch = 2, .height = 8, .width = 8, .threads = 1,
			      .epochs = 100000, .shuffle = 1, .seed = 9, .shuffle_block = 1,
			      .drop_remainder = 1 };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;
	struct lookups lk[6];
	pthread_t th[6];
	uint64_t ids = 10 * 200, *want; /* the first 200 epochs */

	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_int_equal(bfs_engine_batches_per_epoch(e), 10);
	want = malloc(ids * 2 * sizeof(*want));
	assert_non_null(want);
	for (uint64_t id = 0; id < ids; id++)
		for (unsigned j = 0; j < 2; j++)
			want[id * 2 + j] = bfs_engine_sample_index(e, id, j);
	/* the last epoch too */
	assert_true(bfs_engine_sample_index(e, 99999ull * 10 + 9, 1) < 21);
	for (int t = 0; t < 6; t++) {
		lk[t] = (struct lookups){ e, want, ids, 7 + 10 * (unsigned)t, (unsigned)t * 333, 0 };
		assert_int_equal(pthread_create(&th[t], NULL, lookup_thread, &lk[t]), 0);
	}
	for (int t = 0; t < 6; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(lk[t].bad, 0);
	}
	free(want);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

/* Epoch 1 resumes after a world of 3 consumed 2 samples a rank: this
 * world of 2 serves the other 15, 7 a rank (one left over), in 4 batches
 * of 2 (the last of 1) where the other epochs have 5. */
static void test_engine_resumed_epoch_has_fewer_batches_and_no_more(void **state)
{
	bfs_source *src = open_source(dir_good);
	uint64_t handed = 0;
	bfs_engine_opts o = { .batch = 2, .height = 24, .width = 32, .threads = 1,
			      .prefetch = 2, .epochs = 3, .shuffle = 1, .seed = 2, .world = 2,
			      .ranks = 2, .deliver_ahead = record_id, .ctx = &handed };
	bfs_layout_opts lo = { .n = 21, .shuffle = 1, .seed = 2, .world = 2 };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;
	bfs_batch *b;
	uint64_t nb;

	o.resume = (bfs_layout_resume){ .on = 1, .epoch = 1, .nruns = 1,
					.runs = { { 6, 3, 0 } } };
	lo.resume = o.resume;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	nb = bfs_engine_batches_per_epoch(e);
	assert_int_equal(nb, 5);
	assert_int_equal(bfs_engine_epoch_batches(e, 0), 5);
	assert_int_equal(bfs_engine_epoch_batches(e, 1), 4);
	assert_int_equal(bfs_engine_epoch_samples_of(e, 1), 7);
	assert_int_equal(bfs_engine_epoch_samples_of(e, 2), 10);
	assert_int_equal(bfs_engine_batch_count(e, nb + 3), 1);
	/* the resumed epoch's ids past its batches do not exist, for either rank */
	for (unsigned r = 0; r < 2; r++) {
		uint64_t hole = (r * 3 + 1) * nb + 4;

		assert_int_equal(bfs_engine_batch_count(e, hole), 0);
		assert_true(bfs_engine_sample_index(e, hole, 0) == UINT64_MAX);
		assert_int_equal(bfs_engine_get(e, 1, hole, &b, msg), -EINVAL);
		bfs_engine_hint(e, 1, hole); /* nothing */
		for (uint64_t k = 0; k < 7; k++)
			assert_true(bfs_engine_sample_index(e, (r * 3 + 1) * nb + k / 2, k % 2) ==
				    layout_sample(&lo, 1, r, k));
	}
	/* read-ahead from the resumed epoch's last batch passes over its
	 * holes: d=1 is epoch 2's batch 0, d=2 (handed on) its batch 1 */
	bfs_engine_hint(e, 1, nb + 3);
	wait_pushed(e, 1);
	assert_int_equal(__atomic_load_n(&handed, __ATOMIC_ACQUIRE), 2 * nb + 1 + 1);
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

static void test_engine_refuses_layouts_that_cannot_work(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine_opts base = { .batch = 2, .height = 8, .width = 8, .threads = 1, .epochs = 2,
				 .shuffle = 1, .seed = 1, .shuffle_block = 1,
				 .split = BFS_SPLIT_SHARDS, .world = 4 };
	bfs_engine_opts o;
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;

	o = base, o.rank = 1, o.ranks = 2;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "start at a multiple of its 2 ranks, not at 1"));
	o = base, o.rank = 0, o.ranks = 2, o.node_ranks = 4;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "one node of 2 ranks, not --node-ranks 4"));
	o = base, o.split = BFS_SPLIT_SAMPLES, o.node_ranks = 2;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "only --split shards"));
	o = base, o.resume = (bfs_layout_resume){ .on = 1, .epoch = 2, .nruns = 1,
						  .runs = { { 4, 4, 0 } } };
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "epoch 2 is past the mount's 2 epochs"));
	o = base, o.shuffle_block = 0;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "needs --shuffle-block N"));
	assert_null(e);
	bfs_source_close(src);
}

/* ---- RandomResizedCrop and the store -------------------------------------- */

/* An in-memory store: one copy per (shard, offset), kept as offered. */
struct mem_entry {
	const char *shard;
	uint64_t offset;
	int64_t label;
	uint8_t *data;
	size_t len;
	bfs_store_shape shape;
	int damaged;           /* answered BFS_E_CRC once, then dropped */
};

struct mem_store {
	pthread_mutex_t lock;
	struct mem_entry e[64];
	int n;
	int offers, offered_items, gets, hits;
	int full;              /* wants() says 0 */
	/* the store with views (msv_*): */
	int copies;            /* gets that copied (get, not get_view) */
	int views, puts;       /* views lent, put_views of a lent one */
	int crc_errors;        /* damaged entries answered (then dropped) */
	int lent_at_destroy;   /* readers destroyed with a view lent */
};

static int ms_reader_create(void *ctx, void **r)
{
	*r = ctx;
	return 0;
}

static void ms_reader_destroy(void *r)
{
	(void)r;
}

static struct mem_entry *ms_find(struct mem_store *m, const bfs_sample_identity *id)
{
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->e[i].shard, id->shard) && m->e[i].offset == id->offset)
			return &m->e[i];
	return NULL;
}

static int ms_get(void *r, const bfs_sample_identity *id, void *dst, size_t cap, size_t *len,
		  bfs_store_shape *shape, int64_t *label)
{
	struct mem_store *m = r;
	struct mem_entry *x;
	int err = -ENOENT;

	pthread_mutex_lock(&m->lock);
	m->gets++;
	if ((x = ms_find(m, id))) {
		*len = x->len;
		if (x->len > cap) {
			err = -ENOBUFS;
		} else {
			memcpy(dst, x->data, x->len);
			*shape = x->shape;
			*label = x->label;
			m->hits++;
			err = 0;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return err;
}

static void ms_offer(void *ctx, const bfs_store_item *items, size_t n, void (*done)(void *),
		     void *arg)
{
	struct mem_store *m = ctx;

	pthread_mutex_lock(&m->lock);
	m->offers++;
	for (size_t i = 0; i < n; i++) {
		struct mem_entry *x;

		m->offered_items++;
		if (ms_find(m, &items[i].id) || m->n == 64)
			continue;
		x = &m->e[m->n++];
		x->shard = items[i].id.shard;
		x->offset = items[i].id.offset;
		x->label = items[i].label;
		x->len = items[i].len;
		x->shape = items[i].shape;
		x->data = malloc(items[i].len);
		assert_non_null(x->data);
		memcpy(x->data, items[i].data, items[i].len);
	}
	pthread_mutex_unlock(&m->lock);
	done(arg);
}

static int ms_wants(void *ctx)
{
	return !((struct mem_store *)ctx)->full;
}

static void ms_flush(void *ctx)
{
	(void)ctx;
}

static void ms_free(struct mem_store *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->e[i].data);
	pthread_mutex_destroy(&m->lock);
}

/* The store above: get copies, no views. */
static bfs_store copy_store(struct mem_store *m)
{
	return (bfs_store){ m, ms_reader_create, ms_reader_destroy, ms_get, ms_offer, ms_wants,
			    ms_flush, NULL, NULL, NULL };
}

/* The same store lending views (get_view/put_view): each reader lends its
 * own copy of an entry and poisons it at put_view, so bytes read after
 * put_view, or a view never given back, show. */
struct msv_reader {
	struct mem_store *m;
	uint8_t *buf;
	size_t cap;
	int lent;
};

static int msv_reader_create(void *ctx, void **r)
{
	struct msv_reader *x = calloc(1, sizeof(*x));

	assert_non_null(x);
	x->m = ctx;
	*r = x;
	return 0;
}

static void msv_put_view(void *r)
{
	struct msv_reader *x = r;

	if (!x->lent)
		return;
	x->lent = 0;
	memset(x->buf, 0xA5, x->cap);
	pthread_mutex_lock(&x->m->lock);
	x->m->puts++;
	pthread_mutex_unlock(&x->m->lock);
}

static void msv_reader_destroy(void *r)
{
	struct msv_reader *x = r;

	if (!x)
		return;
	pthread_mutex_lock(&x->m->lock);
	x->m->lent_at_destroy += x->lent;
	pthread_mutex_unlock(&x->m->lock);
	free(x->buf);
	free(x);
}

/* A damaged entry: answered BFS_E_CRC and dropped, as the cache does.
 * Lock held. */
static int ms_damaged_locked(struct mem_store *m, struct mem_entry *x)
{
	m->crc_errors++;
	free(x->data);
	*x = m->e[--m->n];
	return BFS_E_CRC;
}

static int msv_get(void *r, const bfs_sample_identity *id, void *dst, size_t cap, size_t *len,
		   bfs_store_shape *shape, int64_t *label)
{
	struct msv_reader *x = r;
	struct mem_entry *e;

	msv_put_view(r); /* asking again */
	pthread_mutex_lock(&x->m->lock);
	x->m->copies++;
	e = ms_find(x->m, id);
	if (e && e->damaged) {
		int err = ms_damaged_locked(x->m, e);

		pthread_mutex_unlock(&x->m->lock);
		return err;
	}
	pthread_mutex_unlock(&x->m->lock);
	return ms_get(x->m, id, dst, cap, len, shape, label);
}

static int msv_get_view(void *r, const bfs_sample_identity *id, const void **data, size_t *len,
			bfs_store_shape *shape, int64_t *label)
{
	struct msv_reader *x = r;
	struct mem_store *m = x->m;
	struct mem_entry *e;
	int err = -ENOENT;

	msv_put_view(r); /* asking again */
	pthread_mutex_lock(&m->lock);
	m->gets++;
	if ((e = ms_find(m, id)) && e->damaged) {
		err = ms_damaged_locked(m, e);
	} else if (e) {
		if (e->len > x->cap) {
			free(x->buf);
			x->buf = malloc(e->len);
			assert_non_null(x->buf);
			x->cap = e->len;
		}
		memcpy(x->buf, e->data, e->len);
		*data = x->buf;
		*len = e->len;
		*shape = e->shape;
		*label = e->label;
		x->lent = 1;
		m->hits++;
		m->views++;
		err = 0;
	}
	pthread_mutex_unlock(&m->lock);
	return err;
}

static bfs_store view_store(struct mem_store *m)
{
	return (bfs_store){ m, msv_reader_create, msv_reader_destroy, msv_get, ms_offer, ms_wants,
			    ms_flush, msv_get_view, msv_put_view, NULL };
}

static bfs_engine *open_rrc(bfs_source *src, unsigned threads, const bfs_store *st,
			    int cache_res, unsigned epochs)
{
	bfs_engine_opts o = { .batch = 4, .height = 20, .width = 28, .threads = threads,
			      .augment_rrc = 1, .augment_flip = 1, .shuffle = 1, .seed = 77,
			      .epochs = epochs, .store = st, .cache_res = cache_res };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;

	if (bfs_engine_create(src, &o, &e, msg))
		fail_msg("engine: %s", msg);
	return e;
}

/* Every batch of every epoch, in one buffer, with each position's box. */
static uint8_t *read_epochs(bfs_engine *e, bfs_rrc_box *boxes)
{
	uint64_t total = bfs_engine_batches_per_epoch(e) * bfs_engine_epochs(e);
	size_t sb = bfs_engine_sample_bytes(e), at = 0;
	uint8_t *all = calloc((size_t)total * 4, sb);

	assert_non_null(all);
	for (uint64_t k = 0; k < total; k++) {
		char msg[BFS_ERRMSG_MAX];
		bfs_batch *b;

		if (bfs_engine_get(e, 1, k, &b, msg))
			fail_msg("batch %llu: %s", (unsigned long long)k, msg);
		memcpy(all + at * sb, bfs_batch_images(b), bfs_batch_count(b) * sb);
		for (unsigned j = 0; j < bfs_batch_count(b); j++) {
			int flip, iw, ih;

			assert_int_equal(bfs_batch_rrc(b, j, &boxes[at + j], &flip, &iw, &ih), 0);
			assert_true(boxes[at + j].x + boxes[at + j].w <= iw);
			assert_true(boxes[at + j].y + boxes[at + j].h <= ih);
		}
		at += bfs_batch_count(b);
		bfs_engine_put(e, b);
	}
	return all;
}

static void test_engine_rrc_caches_one_copy_a_sample_and_warm_equals_cold(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct mem_store m = { .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_store st = copy_store(&m);
	bfs_rrc_box b0[3 * NSAMPLES], b1[3 * NSAMPLES], b2[3 * NSAMPLES];
	bfs_engine *none = open_rrc(src, 1, NULL, 64, 3);
	uint8_t *ref = read_epochs(none, b0), *cold, *warm;
	size_t bytes = 3 * NSAMPLES * bfs_engine_sample_bytes(none);
	bfs_engine *e;
	bfs_engine_stats es;
	int reduced = 0;

	bfs_engine_destroy(none);
	/* cold: the first epoch offers every copy, once */
	e = open_rrc(src, 2, &st, 64, 3);
	cold = read_epochs(e, b1);
	bfs_engine_destroy(e);
	assert_memory_equal(cold, ref, bytes);
	assert_memory_equal(b1, b0, sizeof(b0));
	assert_int_equal(m.n, NSAMPLES);
	for (int i = 0; i < m.n; i++) { /* images of 40..180 x 30..79: some reduced */
		assert_int_equal(m.e[i].len, (size_t)m.e[i].shape.h * m.e[i].shape.w * 3);
		assert_true(m.e[i].shape.src_w >= m.e[i].shape.w);
		assert_true(m.e[i].shape.h <= 64 || m.e[i].shape.w <= 64);
		reduced += m.e[i].shape.w < m.e[i].shape.src_w;
	}
	assert_true(reduced >= 3);
	/* warm: nothing decoded, same bytes and boxes */
	e = open_rrc(src, 3, &st, 64, 3);
	warm = read_epochs(e, b2);
	bfs_engine_get_stats(e, &es);
	assert_int_equal(es.samples_decoded, 0);
	assert_true(es.cache_hits >= 3 * NSAMPLES); /* a batch read again is made again */
	bfs_engine_destroy(e);
	assert_memory_equal(warm, ref, bytes);
	assert_memory_equal(b2, b0, sizeof(b0));
	free(ref);
	free(cold);
	free(warm);
	ms_free(&m);
	bfs_source_close(src);
}

/* Without a cache every epoch decodes boxes; a sample's JPEG that has
 * decoded whole once (here in epoch 0) is decoded only down to its box's
 * last row afterwards, and every byte stays a whole decode's. */
static void test_engine_rrc_stops_after_the_box_once_a_jpeg_decoded_whole(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_rrc_box b0[3 * NSAMPLES], b1[3 * NSAMPLES];
	bfs_engine_opts o = { .batch = 4, .height = 20, .width = 28, .threads = 1,
			      .augment_rrc = 1, .augment_flip = 1, .shuffle = 1, .seed = 77,
			      .epochs = 3, .cache_res = 4096, .decode_whole = 1 };
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;
	bfs_engine_stats es;
	uint8_t *ref, *got;
	size_t bytes;

	if (bfs_engine_create(src, &o, &e, msg))
		fail_msg("engine: %s", msg);
	ref = read_epochs(e, b0);
	bytes = 3 * NSAMPLES * bfs_engine_sample_bytes(e);
	bfs_engine_get_stats(e, &es);
	assert_int_equal(es.boxes_stopped_early, 0); /* whole decodes only */
	bfs_engine_destroy(e);
	for (unsigned threads = 1; threads <= 2; threads++) {
		e = open_rrc(src, threads, NULL, 4096, 3);
		got = read_epochs(e, b1);
		bfs_engine_get_stats(e, &es);
		bfs_engine_destroy(e);
		assert_memory_equal(got, ref, bytes);
		assert_memory_equal(b1, b0, sizeof(b0));
		/* epochs 1 and 2 at least; never a sample's first decode */
		assert_true(es.boxes_stopped_early >= 2 * NSAMPLES);
		assert_true(es.boxes_stopped_early <= es.samples_decoded - NSAMPLES);
		free(got);
	}
	free(ref);
	bfs_source_close(src);
}

static void test_engine_rrc_decodes_only_boxes_while_the_store_is_full(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct mem_store m = { .lock = PTHREAD_MUTEX_INITIALIZER, .full = 1 };
	bfs_store st = copy_store(&m);
	bfs_rrc_box b0[NSAMPLES], b1[NSAMPLES];
	bfs_engine *none = open_rrc(src, 2, NULL, -1, 1), *e;
	uint8_t *ref = read_epochs(none, b0), *got;

	/* with the store full nothing whole is decoded for it: no copy is
	 * offered, and the bytes are those of a mount without a store */
	e = open_rrc(src, 2, &st, -1, 1);
	got = read_epochs(e, b1);
	assert_memory_equal(got, ref, NSAMPLES * bfs_engine_sample_bytes(e));
	assert_int_equal(m.offered_items, 0);
	assert_int_equal(m.n, 0);
	bfs_engine_destroy(e);
	bfs_engine_destroy(none);
	free(ref);
	free(got);
	ms_free(&m);
	bfs_source_close(src);
}

/* A stored copy whose shape its bytes do not fill is decoded again, from
 * a store that copies (views 0) or lends views (1). */
static void shape_does_not_add_up(int views)
{
	bfs_source *src = open_source(dir_good);
	struct mem_store m = { .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_store st = views ? view_store(&m) : copy_store(&m);
	bfs_rrc_box b0[NSAMPLES], b1[3 * NSAMPLES];
	bfs_engine *none = open_rrc(src, 1, NULL, 64, 1), *e;
	uint8_t *ref = read_epochs(none, b0), *got;
	size_t bytes = NSAMPLES * bfs_engine_sample_bytes(none);
	bfs_engine_stats es;

	bfs_engine_destroy(none);
	e = open_rrc(src, 2, &st, 64, 3); /* fills the store (a copy without
					   * room in its batch comes later) */
	free(read_epochs(e, b1));
	bfs_engine_destroy(e);
	assert_int_equal(m.n, NSAMPLES);
	/* a store that answers with a shape its bytes do not fill (one row
	 * too many), or a copy larger than its source: cropping by that
	 * shape would read past the copy or map the box wrongly */
	for (int i = 0; i < m.n; i++)
		if (i % 2)
			m.e[i].shape.h++;
		else
			m.e[i].shape.src_w = m.e[i].shape.w - 1;
	m.hits = 0;
	e = open_rrc(src, 2, &st, 64, 1);
	got = read_epochs(e, b1);
	bfs_engine_get_stats(e, &es);
	bfs_engine_destroy(e);
	assert_true(m.hits >= NSAMPLES); /* it answered every one */
	assert_int_equal(es.cache_hits, 0);
	assert_true(es.samples_decoded >= NSAMPLES);
	assert_memory_equal(got, ref, bytes);
	assert_memory_equal(b1, b0, sizeof(b0));
	if (views) { /* every view lent was given back, none copied */
		assert_true(m.views >= NSAMPLES);
		assert_int_equal(m.puts, m.views);
		assert_int_equal(m.lent_at_destroy, 0);
	}
	free(ref);
	free(got);
	ms_free(&m);
	bfs_source_close(src);
}

static void test_engine_rrc_decodes_again_a_stored_copy_whose_shape_does_not_add_up(void **state)
{
	shape_does_not_add_up(0);
}

static void test_engine_rrc_decodes_again_a_viewed_copy_whose_shape_does_not_add_up(void **state)
{
	shape_does_not_add_up(1);
}

static void test_engine_rrc_warm_epochs_crop_from_views_give_each_back_and_equal_cold(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct mem_store m = { .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_store st = view_store(&m);
	bfs_rrc_box b0[3 * NSAMPLES], b1[3 * NSAMPLES];
	bfs_engine *none = open_rrc(src, 1, NULL, 64, 3), *e;
	uint8_t *ref = read_epochs(none, b0), *got;
	size_t bytes = 3 * NSAMPLES * bfs_engine_sample_bytes(none);
	bfs_engine_stats es;

	bfs_engine_destroy(none);
	e = open_rrc(src, 2, &st, 64, 3); /* fills the store */
	free(read_epochs(e, b1));
	bfs_engine_destroy(e);
	assert_int_equal(m.n, NSAMPLES);
	m.copies = m.views = m.puts = 0;
	/* warm, 3 threads: every sample cropped and resized from a view (a
	 * copy poisoned at put_view: bytes read after it would differ), no
	 * copy asked for, every view given back, the bytes of no store */
	e = open_rrc(src, 3, &st, 64, 3);
	got = read_epochs(e, b1);
	bfs_engine_get_stats(e, &es);
	bfs_engine_destroy(e);
	assert_int_equal(es.samples_decoded, 0);
	assert_true(es.cache_hits >= 3 * NSAMPLES);
	assert_int_equal(m.copies, 0);
	/* a resize that would wait for memory gives its view back and
	 * looks again: a hit may take more than one view */
	assert_true(m.views >= (int)es.cache_hits);
	assert_int_equal(m.puts, m.views);
	assert_int_equal(m.lent_at_destroy, 0);
	assert_memory_equal(got, ref, bytes);
	assert_memory_equal(b1, b0, sizeof(b0));
	free(ref);
	free(got);
	ms_free(&m);
	bfs_source_close(src);
}

static void test_engine_rrc_a_damaged_view_is_counted_decoded_again_and_offered_again(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct mem_store m = { .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_store st = view_store(&m);
	bfs_rrc_box b0[NSAMPLES], b1[3 * NSAMPLES];
	bfs_engine *none = open_rrc(src, 1, NULL, 64, 1), *e;
	uint8_t *ref = read_epochs(none, b0), *got;
	size_t bytes = NSAMPLES * bfs_engine_sample_bytes(none);
	bfs_engine_stats es;
	int damaged = 0;

	bfs_engine_destroy(none);
	e = open_rrc(src, 2, &st, 64, 3);
	free(read_epochs(e, b1));
	bfs_engine_destroy(e);
	assert_int_equal(m.n, NSAMPLES);
	for (int i = 0; i < m.n; i += 3, damaged++)
		m.e[i].damaged = 1;
	m.views = m.puts = 0;
	e = open_rrc(src, 2, &st, 64, 1);
	got = read_epochs(e, b1);
	bfs_engine_get_stats(e, &es);
	bfs_engine_destroy(e);
	/* each damaged copy is found; one looked up twice before its fresh
	 * copy replaced it (a batch started again after its memory was
	 * lent) counts twice, in the engine as in the store */
	assert_true(m.crc_errors >= damaged);
	assert_int_equal((int)es.cache_crc_errors, m.crc_errors);
	assert_true(es.samples_decoded >= (uint64_t)damaged);
	assert_true(m.views >= NSAMPLES - damaged);
	assert_int_equal(m.puts, m.views);
	assert_int_equal(m.copies, 0);
	/* decoded whole again and offered again (an offer is best-effort: a
	 * slot's arena may be full, then the copy waits for another epoch) */
	assert_true(m.n > NSAMPLES - damaged);
	assert_memory_equal(got, ref, bytes);
	assert_memory_equal(b1, b0, sizeof(b0));
	free(ref);
	free(got);
	ms_free(&m);
	bfs_source_close(src);
}

static void test_engine_size_schedule_gives_each_epoch_its_shape(void **state)
{
	bfs_source *src = open_source(dir_good);
	bfs_engine_opts o = { .batch = 4, .height = 16, .width = 16, .threads = 2,
			      .augment_rrc = 1, .epochs = 4, .nsizes = 2,
			      .sizes = { { 1, 24, 20 }, { 3, 8, 12 } } };
	char msg[BFS_ERRMSG_MAX], hdr[256];
	bfs_engine *e = NULL;
	int h, w;

	assert_int_equal(bfs_engine_create(src, &o, &e, msg), 0);
	assert_int_equal(bfs_engine_sample_bytes(e), 24 * 20 * 3 * 4); /* the largest */
	for (unsigned ep = 0; ep < 4; ep++) {
		static const int want[4][2] = { { 16, 16 }, { 24, 20 }, { 24, 20 }, { 8, 12 } };
		uint64_t id = ep * bfs_engine_batches_per_epoch(e);
		bfs_batch *b;

		bfs_engine_epoch_shape(e, ep, &h, &w);
		assert_int_equal(h, want[ep][0]);
		assert_int_equal(w, want[ep][1]);
		assert_int_equal(bfs_engine_batch_sample_bytes(e, id), (size_t)h * w * 12);
		memset(hdr, 0, sizeof(hdr));
		assert_true(bfs_engine_npy_header(e, id, hdr, sizeof(hdr) - 1) > 0);
		snprintf(msg, sizeof(msg), "'shape': (4, %d, %d, 3)", h, w);
		assert_non_null(strstr(hdr + 10, msg)); /* past the magic and length */
		assert_int_equal(bfs_engine_get(e, 1, id, &b, msg), 0);
		bfs_engine_put(e, b);
	}
	bfs_engine_destroy(e);
	bfs_source_close(src);
}

static void test_engine_rrc_refuses_conflicting_options(void **state)
{
	bfs_source *src = open_source(dir_good);
	struct mem_store m = { .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_store st = copy_store(&m);
	bfs_engine_opts base = { .batch = 4, .height = 16, .width = 16, .threads = 1 };
	bfs_engine_opts o;
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e = NULL;

	o = base; o.augment_rrc = 1; o.augment_crop = 1;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "crops by itself"));
	o = base; o.nsizes = 1; o.sizes[0].from = 1; o.sizes[0].h = o.sizes[0].w = 8;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "needs --augment rrc"));
	o = base; o.augment_rrc = 1; o.decode_scale_auto = 1; o.store = &st;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_non_null(strstr(msg, "--cache none"));
	o = base; o.augment_rrc = 1; o.rrc.scale[0] = 0.5; o.rrc.scale[1] = 0.2;
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	o = base; o.augment_rrc = 1; o.nsizes = 2;
	o.sizes[0] = (typeof(o.sizes[0])){ 2, 8, 8 };
	o.sizes[1] = (typeof(o.sizes[1])){ 2, 9, 9 };
	assert_int_equal(bfs_engine_create(src, &o, &e, msg), -EINVAL);
	assert_null(e);
	ms_free(&m);
	bfs_source_close(src);
}

/* ---- a remote source: the planner and the shard cache -------------------- */

/* An index store in memory: one blob per shard name, any stamp (the test
 * says which stamp it wants by what it stores). */
struct mstore {
	char name[8][64];
	bfs_shard_stamp st[8];
	void *blob[8];
	size_t len[8];
	int n;
};

static int ms_index_get(void *ctx, const char *dir, const char *shard,
			const bfs_shard_stamp *st, void **blob, size_t *len)
{
	struct mstore *m = ctx;

	(void)dir;
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->name[i], shard) && !memcmp(&m->st[i], st, sizeof(*st))) {
			*blob = malloc(m->len[i]);
			memcpy(*blob, m->blob[i], m->len[i]);
			*len = m->len[i];
			return 0;
		}
	return -ENOENT;
}

static int ms_index_put(void *ctx, const char *dir, const char *shard,
			const bfs_shard_stamp *st, const void *blob, size_t len)
{
	struct mstore *m = ctx;

	(void)dir;
	assert_true(m->n < 8);
	snprintf(m->name[m->n], sizeof(m->name[0]), "%s", shard);
	m->st[m->n] = *st;
	m->blob[m->n] = malloc(len);
	memcpy(m->blob[m->n], blob, len);
	m->len[m->n++] = len;
	return 0;
}

struct remote {
	char cache[96];
	bfs_storage *st;
	bfs_shardcache *sc;
	bfs_source *src;
};

static void remote_open(struct remote *r, const char *dir, uint64_t limit,
			struct mstore *m)
{
	bfs_storage_opts so = { 0 };
	bfs_shardcache_opts co = { .max_bytes = limit, .fetchers = 2 };
	bfs_source_opts o = { .index_get = ms_index_get, .index_put = ms_index_put,
			      .index_ctx = m };
	char msg[BFS_ERRMSG_MAX] = "";

	snprintf(r->cache, sizeof(r->cache), "/tmp/bfs-test-engine-%d-sc", getpid());
	co.dir = r->cache;
	assert_int_equal(bfs_storage_open(dir, &so, &r->st, msg), 0);
	if (bfs_shardcache_open(r->st, &co, &r->sc, msg))
		fail_msg("shard cache: %s", msg);
	o.shards = r->sc;
	if (bfs_source_open(&o, &r->src, msg))
		fail_msg("remote source: %s", msg);
}

static void remote_close(struct remote *r)
{
	char cmd[128];

	bfs_source_close(r->src);
	bfs_shardcache_close(r->sc);
	bfs_storage_close(r->st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->cache);
	assert_int_equal(system(cmd), 0);
}

static void test_engine_plans_a_remote_source_and_serves_the_local_bytes(void **state)
{
	struct mstore m = { .n = 0 };
	struct remote r;
	bfs_source *local = open_source(dir_good);
	bfs_engine *el, *er;
	bfs_shardcache_stats s;
	uint8_t *a, *b;

	(void)state;
	/* the indexes stored by a first mount; a second one fetches nothing
	 * until a batch is asked for */
	remote_open(&r, dir_good, 0, &m);
	remote_close(&r);
	remote_open(&r, dir_good, 0, &m);
	er = open_engine(r.src, 2, BFS_ON_ERROR_FAIL, 2, 0);
	usleep(100000);
	bfs_shardcache_get_stats(r.sc, &s);
	assert_int_equal(s.fetched + s.range_reads, 0);
	assert_int_equal(s.epoch_last, -1); /* no plan without a reader */
	el = open_engine(local, 2, BFS_ON_ERROR_FAIL, 2, 0);
	a = read_all(el, 0, NULL);
	b = read_all(er, 0, NULL);
	assert_memory_equal(a, b, NSAMPLES * bfs_engine_sample_bytes(el));
	/* the reader's epoch reached the cache as a plan; every shard came
	 * whole, once */
	for (int i = 0; i < 200 && s.epoch_last < 0; i++) {
		usleep(10000);
		bfs_shardcache_get_stats(r.sc, &s);
	}
	assert_int_equal(s.epoch_last, 0);
	assert_true(s.fetched <= 3);
	/* (what the first reads took before the plan came counts in none) */
	assert_true(s.epoch_bytes[0] <= s.bytes_fetched + s.range_bytes);
	free(a);
	free(b);
	bfs_engine_destroy(el);
	bfs_engine_destroy(er);
	remote_close(&r);
	bfs_source_close(local);
	for (int i = 0; i < m.n; i++)
		free(m.blob[i]);
}

/* An open that lends a batch's file asks for it with a get before any
 * hint: the batch it waits for is the reader's place, and the plan comes
 * at once -- no read waits for it and falls back to a range read. */
static void test_engine_plans_for_a_reader_that_asks_without_a_hint(void **state)
{
	struct mstore m = { .n = 0 };
	struct remote r;
	bfs_shardcache_stats s;
	char msg[BFS_ERRMSG_MAX];
	bfs_engine *e;
	bfs_batch *b;

	(void)state;
	remote_open(&r, dir_good, 0, &m);
	remote_close(&r);
	remote_open(&r, dir_good, 0, &m); /* indexes stored: nothing local */
	e = open_engine(r.src, 2, BFS_ON_ERROR_FAIL, 1, 0);
	assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), 0);
	bfs_engine_put(e, b);
	bfs_shardcache_get_stats(r.sc, &s);
	assert_int_equal(s.epoch_last, 0);
	assert_int_equal(s.range_reads, 0);
	/* its records may be read from the fetch's parts before the fetch
	 * commits: the count comes with the commit (at most 10 s) */
	for (int i = 0; i < 1000 && s.fetched == 0; i++) {
		usleep(10000);
		bfs_shardcache_get_stats(r.sc, &s);
	}
	assert_true(s.fetched >= 1);
	bfs_engine_destroy(e);
	remote_close(&r);
	for (int i = 0; i < m.n; i++)
		free(m.blob[i]);
}

static void test_engine_fails_a_batch_whose_remote_shard_changed_without_marking_samples_bad(void **state)
{
	struct mstore m = { .n = 0 };
	struct remote r;
	char dir[80], cmd[256], path[160], msg[BFS_ERRMSG_MAX];
	bfs_engine *e;
	bfs_batch *b;
	int fd;

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/bfs-test-engine-%d-moving", getpid());
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s' '%s'", dir, dir_good, dir);
	assert_int_equal(system(cmd), 0);
	remote_open(&r, dir, 0, &m);
	remote_close(&r);
	/* listed, indexed from the store (not fetched), then rewritten: its
	 * ETag no longer holds when it is read */
	remote_open(&r, dir, 0, &m);
	usleep(20000);
	snprintf(path, sizeof(path), "%s/part-00000.tfrecord", dir);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	e = open_engine(r.src, 2, BFS_ON_ERROR_FAIL, 1, 0);
	for (int round = 0; round < 2; round++) {
		/* each get tries again: the failure is of the moment, not the
		 * sample's */
		bfs_engine_hint(e, 1, 0);
		assert_int_equal(bfs_engine_get(e, 1, 0, &b, msg), BFS_E_REMOTE);
		assert_non_null(strstr(msg, "part-00000.tfrecord"));
		assert_non_null(strstr(msg, "changed since it was listed"));
	}
	assert_int_equal(bfs_engine_errors(e, NULL, 0), 0);
	/* a batch of the other shards is served */
	bfs_engine_hint(e, 1, 3);
	assert_int_equal(bfs_engine_get(e, 1, 3, &b, msg), 0);
	bfs_engine_put(e, b);
	bfs_engine_destroy(e);
	remote_close(&r);
	for (int i = 0; i < m.n; i++)
		free(m.blob[i]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_source_indexes_shards_in_name_order),
		cmocka_unit_test(test_source_refuses_an_empty_directory),
		cmocka_unit_test(test_engine_bytes_do_not_depend_on_threads_or_order),
		cmocka_unit_test(test_engine_threads_follow_the_cpu_affinity),
		cmocka_unit_test(test_engine_plans_a_remote_source_and_serves_the_local_bytes),
		cmocka_unit_test(test_engine_plans_for_a_reader_that_asks_without_a_hint),
		cmocka_unit_test(test_engine_fails_a_batch_whose_remote_shard_changed_without_marking_samples_bad),
		cmocka_unit_test(test_engine_last_batch_is_partial_unless_dropped),
		cmocka_unit_test(test_engine_fails_only_the_batch_with_a_bad_sample),
		cmocka_unit_test(test_engine_skip_replaces_a_bad_sample_with_the_next),
		cmocka_unit_test(test_engine_many_readers_on_few_slots_see_the_same_bytes),
		cmocka_unit_test(test_engine_rejects_ids_out_of_range),
		cmocka_unit_test(test_engine_hands_on_idle_read_ahead_only),
		cmocka_unit_test(test_engine_decodes_while_a_delivery_waits_on_a_reader),
		cmocka_unit_test(test_engine_get_without_readahead_starts_only_its_batch),
		cmocka_unit_test(test_engine_slot_files_keep_what_readers_hold),
		cmocka_unit_test(test_engine_slot_files_fall_back_when_tmpfs_is_full),
		cmocka_unit_test(test_engine_passes_over_a_held_slot_file),
		cmocka_unit_test(test_engine_big_image_borrows_from_the_budget),
		cmocka_unit_test(test_engine_serves_several_ranks_as_engines_of_their_own),
		cmocka_unit_test(test_engine_reads_ahead_within_the_reader_s_rank),
		cmocka_unit_test(test_engine_serves_the_layout_of_a_block_order_and_a_shards_split),
		cmocka_unit_test(test_engine_block_order_lookups_from_many_threads_and_epochs_agree),
		cmocka_unit_test(test_engine_resumed_epoch_has_fewer_batches_and_no_more),
		cmocka_unit_test(test_engine_refuses_layouts_that_cannot_work),
		cmocka_unit_test(test_engine_rrc_caches_one_copy_a_sample_and_warm_equals_cold),
		cmocka_unit_test(test_engine_rrc_stops_after_the_box_once_a_jpeg_decoded_whole),
		cmocka_unit_test(test_engine_rrc_decodes_only_boxes_while_the_store_is_full),
		cmocka_unit_test(test_engine_rrc_decodes_again_a_stored_copy_whose_shape_does_not_add_up),
		cmocka_unit_test(test_engine_rrc_decodes_again_a_viewed_copy_whose_shape_does_not_add_up),
		cmocka_unit_test(test_engine_rrc_warm_epochs_crop_from_views_give_each_back_and_equal_cold),
		cmocka_unit_test(test_engine_rrc_a_damaged_view_is_counted_decoded_again_and_offered_again),
		cmocka_unit_test(test_engine_size_schedule_gives_each_epoch_its_shape),
		cmocka_unit_test(test_engine_rrc_refuses_conflicting_options),
		cmocka_unit_test(test_engine_mem_cap_is_a_share_of_ram_and_of_what_is_available),
		cmocka_unit_test(test_engine_default_budget_never_grows_past_the_machine),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
