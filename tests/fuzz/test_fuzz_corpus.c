/*
 * test_fuzz_corpus.c - replays the committed fuzz corpora
 * (tests/fuzz/corpus/<target>/) through every fuzz target, compiled with
 * the ordinary compiler and SAN flags, as a unit test of `make test`.  The
 * corpora hold the seeds and every input that once broke a target, so a
 * fixed bug stays fixed without clang or libFuzzer.  A broken property
 * aborts (see fuzz.h).  Run from the repository root, as tests/run.sh does.
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

int fuzz_tfrecord_one(const uint8_t *data, size_t size);
int fuzz_example_one(const uint8_t *data, size_t size);
int fuzz_npy_one(const uint8_t *data, size_t size);
int fuzz_decode_one(const uint8_t *data, size_t size);
int fuzz_namespace_one(const uint8_t *data, size_t size);
int fuzz_tar_one(const uint8_t *data, size_t size);

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tfrecord_corpus_replays_cleanly),
		cmocka_unit_test(test_example_corpus_replays_cleanly),
		cmocka_unit_test(test_npy_corpus_replays_cleanly),
		cmocka_unit_test(test_decode_corpus_replays_cleanly),
		cmocka_unit_test(test_namespace_corpus_replays_cleanly),
		cmocka_unit_test(test_tar_corpus_replays_cleanly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
