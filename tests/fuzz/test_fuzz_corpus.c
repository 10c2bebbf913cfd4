/*
 * test_fuzz_corpus.c - replays the committed fuzz corpora
 * (tests/fuzz/corpus/<target>/) through every fuzz target, compiled with
 * the ordinary compiler and SAN flags, as a unit test of `make test`.  The
 * corpora hold the seeds and every input that once broke a target, so a
 * fixed bug stays fixed without clang or libFuzzer.  A broken property
 * aborts (see fuzz.h).  Also the decoder-history bug fuzz_decode found,
 * which needs a particular image before the bad one.  Run from the
 * repository root, as tests/run.sh does.
 */
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/pixels/decode.h"
#include "engine/base/error.h"

int fuzz_tfrecord_one(const uint8_t *data, size_t size);
int fuzz_example_one(const uint8_t *data, size_t size);
int fuzz_npy_one(const uint8_t *data, size_t size);
int fuzz_decode_one(const uint8_t *data, size_t size);
int fuzz_namespace_one(const uint8_t *data, size_t size);
int fuzz_tar_one(const uint8_t *data, size_t size);
int fuzz_image_one(const uint8_t *data, size_t size);
int fuzz_gzindex_one(const uint8_t *data, size_t size);
int fuzz_sidecar_one(const uint8_t *data, size_t size);

typedef int (*target_fn)(const uint8_t *, size_t);

/* Feed every file of tests/fuzz/corpus/NAME to fn; returns how many. */
static int replay(const char *name, target_fn fn)
{
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", name);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		uint8_t *buf;
		long len;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		assert_non_null(f);
		assert_int_equal(fseek(f, 0, SEEK_END), 0);
		len = ftell(f);
		rewind(f);
		/* An exact-size heap copy, so ASan sees reads past the end. */
		buf = malloc(len ? (size_t)len : 1);
		assert_non_null(buf);
		assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
		fclose(f);
		fn(buf, (size_t)len);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

static void test_tfrecord_corpus_replays_cleanly(void **state)
{
	assert_true(replay("tfrecord", fuzz_tfrecord_one) > 0);
}

static void test_example_corpus_replays_cleanly(void **state)
{
	assert_true(replay("example", fuzz_example_one) > 0);
}

static void test_npy_corpus_replays_cleanly(void **state)
{
	assert_true(replay("npy", fuzz_npy_one) > 0);
}

static void test_decode_corpus_replays_cleanly(void **state)
{
	assert_true(replay("decode", fuzz_decode_one) > 0);
}

static void test_namespace_corpus_replays_cleanly(void **state)
{
	assert_true(replay("namespace", fuzz_namespace_one) > 0);
}

static void test_tar_corpus_replays_cleanly(void **state)
{
	assert_true(replay("tar", fuzz_tar_one) > 0);
}

static void test_image_corpus_replays_cleanly(void **state)
{
	assert_true(replay("image", fuzz_image_one) > 0);
}

static void test_gzindex_corpus_replays_cleanly(void **state)
{
	assert_true(replay("gzindex", fuzz_gzindex_one) > 0);
}

static void test_sidecar_corpus_replays_cleanly(void **state)
{
	assert_true(replay("sidecar", fuzz_sidecar_one) > 0);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	*n = (size_t)ftell(f);
	rewind(f);
	b = malloc(*n ? *n : 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

/*
 * A JPEG that uses a table it does not define (no DQT; no DHT) gives the
 * same result on a decoder that decoded another image first as on a fresh
 * one: libjpeg keeps tables in its handle, so decode.c must not reuse one
 * across images (fuzz_decode found it; fixed in 96050e5).
 */
static void test_decoder_result_does_not_depend_on_the_previous_image(void **state)
{
	static const char *const pairs[][2] = {
		{ "tests/data/golden/photo_500x375_420.jpg", "history-no-dqt.jpg" },
		{ "tests/data/golden/tfenc_90x67_420.jpg", "history-no-dqt.jpg" },
		{ "tests/data/golden/progressive_133x97_420.jpg", "history-no-dht.jpg" },
		{ "tests/data/golden/small_20x15_420.jpg",
		  "history-crash-848419419362cda71d9d333bbef26e7b9f64c38f" },
	};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		char path[PATH_MAX], msg[BFS_ERRMSG_MAX];
		size_t pn, tn;
		uint8_t *p = slurp(pairs[i][0], &pn), *t, *copy = NULL;
		const uint8_t *a, *b;
		int wa = 0, ha = 0, wb = 0, hb = 0, ra, rb;
		bfs_decoder *fresh, *used;

		snprintf(path, sizeof(path), "tests/fuzz/corpus/decode/%s", pairs[i][1]);
		t = slurp(path, &tn);
		assert_int_equal(bfs_decoder_create(&fresh), 0);
		assert_int_equal(bfs_decoder_create(&used), 0);
		ra = bfs_decode_rgb(fresh, t, tn, 0, &a, &wa, &ha, msg);
		if (ra == 0) {
			copy = malloc((size_t)wa * ha * 3);
			assert_non_null(copy);
			memcpy(copy, a, (size_t)wa * ha * 3);
		}
		assert_int_equal(bfs_decode_rgb(used, p, pn, 0, &b, &wb, &hb, msg), 0);
		rb = bfs_decode_rgb(used, t, tn, 0, &b, &wb, &hb, msg);
		assert_int_equal(ra, rb);
		if (ra == 0) {
			assert_int_equal(wa, wb);
			assert_int_equal(ha, hb);
			assert_memory_equal(copy, b, (size_t)wa * ha * 3);
		}
		bfs_decoder_destroy(fresh);
		bfs_decoder_destroy(used);
		free(copy);
		free(p);
		free(t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tfrecord_corpus_replays_cleanly),
		cmocka_unit_test(test_example_corpus_replays_cleanly),
		cmocka_unit_test(test_npy_corpus_replays_cleanly),
		cmocka_unit_test(test_decode_corpus_replays_cleanly),
		cmocka_unit_test(test_namespace_corpus_replays_cleanly),
		cmocka_unit_test(test_tar_corpus_replays_cleanly),
		cmocka_unit_test(test_image_corpus_replays_cleanly),
		cmocka_unit_test(test_gzindex_corpus_replays_cleanly),
		cmocka_unit_test(test_sidecar_corpus_replays_cleanly),
		cmocka_unit_test(test_decoder_result_does_not_depend_on_the_previous_image),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
