/*
 * test_sidecar.c - the sidecar index file (engine/formats/sidecar.h): what
 * is written reads back (raw and deflated blobs, both kinds of identity,
 * the options), an entry is given only for the identity it was written
 * for, the writer refuses what a reader would, and a damaged file is
 * refused whole (header, directory) or per entry (a blob), never read
 * past its end: every byte flipped and every length cut.
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

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/formats/sidecar.h"

/* A blob that deflates well (an index's offsets) and one that does not. */
static uint8_t soft[4096], hard[777];

static void fill_blobs(void)
{
	uint64_t x = 88172645463325252ull;

	for (size_t i = 0; i < sizeof(soft); i += 16) {
		uint64_t off = 12 + i * 100, len = 5000 + i % 7;

		memcpy(soft + i, &off, 8);
		memcpy(soft + i + 8, &len, 8);
	}
	memcpy(soft, "BFSIDX03", 8);
	for (size_t i = 0; i < sizeof(hard); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		hard[i] = (uint8_t)x;
	}
}

static const bfs_sidecar_id etag_a = { .kind = BFS_SIDECAR_ID_ETAG, .size = 1000,
				       .etag = "\"0123456789abcdef\"" };
static const bfs_sidecar_id stamp_b = { .kind = BFS_SIDECAR_ID_STAMP, .size = 2000,
					.mtime_ns = 1700000000123456789ll, .ino = 77,
					.ctime_ns = 1700000001000000000ll };

/* A sidecar of three entries, added out of order: "b/two.tfrecord"
 * (stamp, the hard blob), "a.tfrecord" (ETag, the soft blob), "c" (ETag,
 * one byte). */
static void *make(size_t *len)
{
	bfs_sidecar_writer *w;
	bfs_sidecar_info info = { .format = BFS_SIDECAR_TFRECORD,
				  .label_key = "image/class/label",
				  .source = "s3://bucket/train", .writer = "batchfs test",
				  .created_ns = 42 };
	bfs_sidecar_id c = { .kind = BFS_SIDECAR_ID_ETAG, .size = 1, .etag = "\"c\"" };
	void *out;

	fill_blobs();
	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "b/two.tfrecord", &stamp_b, hard, sizeof(hard)), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "a.tfrecord", &etag_a, soft, sizeof(soft)), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "c", &c, "x", 1), 0);
	assert_int_equal(bfs_sidecar_writer_count(w), 3);
	assert_int_equal(bfs_sidecar_writer_finish(w, &info, &out, len), 0);
	bfs_sidecar_writer_destroy(w);
	return out;
}

/* The header's and directory's CRCs made right again after an edit. */
static void reseal(uint8_t *d)
{
	uint32_t str_len, crc;
	uint64_t dir_len;

	memcpy(&str_len, d + 28, 4);
	memcpy(&dir_len, d + 32, 8);
	crc = bfs_crc32c(0, d + 64, str_len + dir_len);
	memcpy(d + 56, &crc, 4);
	crc = bfs_crc32c(0, d, 60);
	memcpy(d + 60, &crc, 4);
}

static void test_sidecar_reads_back_what_was_written(void **state)
{
	size_t len, blen;
	void *data = make(&len), *blob;
	bfs_sidecar *sc;
	bfs_sidecar_info info;
	bfs_sidecar_id id;
	const char *name;
	char msg[BFS_ERRMSG_MAX];

	assert_int_equal(bfs_sidecar_open(data, len, &sc, msg), 0);
	assert_int_equal(bfs_sidecar_count(sc), 3);
	bfs_sidecar_get_info(sc, &info);
	assert_int_equal(info.format, BFS_SIDECAR_TFRECORD);
	assert_string_equal(info.label_key, "image/class/label");
	assert_string_equal(info.source, "s3://bucket/train");
	assert_string_equal(info.writer, "batchfs test");
	assert_int_equal(info.created_ns, 42);
	/* sorted by name, bytewise */
	assert_int_equal(bfs_sidecar_entry(sc, 0, &name, &id), 0);
	assert_string_equal(name, "a.tfrecord");
	assert_int_equal(id.kind, BFS_SIDECAR_ID_ETAG);
	assert_string_equal(id.etag, etag_a.etag);
	assert_int_equal(bfs_sidecar_entry(sc, 1, &name, &id), 0);
	assert_string_equal(name, "b/two.tfrecord");
	assert_int_equal(id.kind, BFS_SIDECAR_ID_STAMP);
	assert_int_equal(id.ino, 77);
	assert_int_equal(id.mtime_ns, stamp_b.mtime_ns);
	assert_string_equal(id.etag, "");
	assert_int_equal(bfs_sidecar_entry(sc, 2, &name, &id), 0);
	assert_string_equal(name, "c");
	assert_int_equal(bfs_sidecar_entry(sc, 3, &name, &id), -EINVAL);

	assert_int_equal(bfs_sidecar_lookup(sc, "a.tfrecord", &etag_a, &blob, &blen), 0);
	assert_int_equal(blen, sizeof(soft));
	assert_memory_equal(blob, soft, sizeof(soft));
	free(blob);
	assert_int_equal(bfs_sidecar_lookup(sc, "b/two.tfrecord", &stamp_b, &blob, &blen), 0);
	assert_int_equal(blen, sizeof(hard));
	assert_memory_equal(blob, hard, sizeof(hard));
	free(blob);
	bfs_sidecar_close(sc);
	free(data);
}

static void test_sidecar_deflates_an_index_that_shrinks(void **state)
{
	size_t len;
	void *data = make(&len);

	/* the soft blob went in deflated: the file is smaller than the blobs */
	assert_true(len < sizeof(soft) + sizeof(hard));
	assert_true(len > sizeof(hard));
	free(data);
}

static void test_sidecar_gives_an_entry_only_for_its_identity(void **state)
{
	size_t len, blen;
	void *data = make(&len), *blob;
	bfs_sidecar *sc;
	bfs_sidecar_id id;

	assert_int_equal(bfs_sidecar_open(data, len, &sc, NULL), 0);
	id = etag_a;
	id.etag = "\"0123456789abcdee\"";
	assert_int_equal(bfs_sidecar_lookup(sc, "a.tfrecord", &id, &blob, &blen), -ESTALE);
	assert_null(blob);
	id = etag_a;
	id.size++;
	assert_int_equal(bfs_sidecar_lookup(sc, "a.tfrecord", &id, &blob, &blen), -ESTALE);
	id = etag_a;
	id.etag = "0123456789abcdef"; /* the quotes are part of it */
	assert_int_equal(bfs_sidecar_lookup(sc, "a.tfrecord", &id, &blob, &blen), -ESTALE);
	id = etag_a;
	id.etag = "";
	assert_int_equal(bfs_sidecar_lookup(sc, "a.tfrecord", &id, &blob, &blen), -ESTALE);
	id = stamp_b;
	id.ctime_ns++;
	assert_int_equal(bfs_sidecar_lookup(sc, "b/two.tfrecord", &id, &blob, &blen), -ESTALE);
	id = stamp_b;
	id.ino++;
	assert_int_equal(bfs_sidecar_lookup(sc, "b/two.tfrecord", &id, &blob, &blen), -ESTALE);
	id = stamp_b;
	id.kind = BFS_SIDECAR_ID_ETAG;
	id.etag = "\"x\"";
	assert_int_equal(bfs_sidecar_lookup(sc, "b/two.tfrecord", &id, &blob, &blen), -ESTALE);
	assert_int_equal(bfs_sidecar_lookup(sc, "b", &stamp_b, &blob, &blen), -ENOENT);
	assert_int_equal(bfs_sidecar_find(sc, "b", &id), -ENOENT);
	assert_int_equal(bfs_sidecar_find(sc, "a.tfrecord", &id), 0);
	assert_int_equal(id.kind, BFS_SIDECAR_ID_ETAG);
	assert_int_equal(id.size, etag_a.size);
	assert_string_equal(id.etag, etag_a.etag);
	assert_int_equal(bfs_sidecar_lookup(sc, "zzz", &stamp_b, &blob, &blen), -ENOENT);
	bfs_sidecar_close(sc);
	free(data);
}

static void test_sidecar_never_trusts_a_weak_etag(void **state)
{
	bfs_sidecar_writer *w;
	bfs_sidecar_id weak = { .kind = BFS_SIDECAR_ID_ETAG, .size = 1, .etag = "W/\"abc\"" };

	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "a", &weak, "x", 1), -EINVAL);
	weak.etag = "";
	assert_int_equal(bfs_sidecar_writer_add(w, "a", &weak, "x", 1), -EINVAL);
	bfs_sidecar_writer_destroy(w);
}

static void test_sidecar_writer_refuses_names_a_reader_would(void **state)
{
	static const char *const bad[] = { "", "/abs", ".", "..", "a/../b", "a/./b",
					   "a/..", "./a" };
	bfs_sidecar_writer *w;
	char big[BFS_SIDECAR_NAME_MAX + 2];
	bfs_sidecar_id bogus = stamp_b;

	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		assert_int_equal(bfs_sidecar_writer_add(w, bad[i], &stamp_b, "x", 1), -EINVAL);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(bfs_sidecar_writer_add(w, big, &stamp_b, "x", 1), -EINVAL);
	big[BFS_SIDECAR_NAME_MAX] = '\0';
	assert_int_equal(bfs_sidecar_writer_add(w, big, &stamp_b, "x", 1), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "..a/b..", &stamp_b, "x", 1), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "e", &stamp_b, "x", 0), -EINVAL);
	bogus.kind = 9;
	assert_int_equal(bfs_sidecar_writer_add(w, "k", &bogus, "x", 1), -EINVAL);
	assert_int_equal(bfs_sidecar_writer_count(w), 2);
	bfs_sidecar_writer_destroy(w);
}

static void test_sidecar_name_added_again_replaces_its_entry(void **state)
{
	bfs_sidecar_writer *w;
	bfs_sidecar_info info = { .format = BFS_SIDECAR_TAR };
	bfs_sidecar *sc;
	void *out, *blob;
	size_t len, blen;

	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "a.tar", &stamp_b, "x", 1), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "b.tar", &stamp_b, "y", 1), 0);
	assert_int_equal(bfs_sidecar_writer_add(w, "a.tar", &etag_a, "z", 1), 0);
	info.format = 7;
	assert_int_equal(bfs_sidecar_writer_finish(w, &info, &out, &len), -EINVAL);
	info.format = BFS_SIDECAR_TAR;
	assert_int_equal(bfs_sidecar_writer_finish(w, &info, &out, &len), 0);
	assert_int_equal(bfs_sidecar_writer_count(w), 2);
	bfs_sidecar_writer_destroy(w);
	assert_int_equal(bfs_sidecar_open(out, len, &sc, NULL), 0);
	assert_int_equal(bfs_sidecar_count(sc), 2);
	assert_int_equal(bfs_sidecar_lookup(sc, "a.tar", &stamp_b, &blob, &blen), -ESTALE);
	assert_int_equal(bfs_sidecar_lookup(sc, "a.tar", &etag_a, &blob, &blen), 0);
	assert_memory_equal(blob, "z", 1);
	free(blob);
	bfs_sidecar_close(sc);
	free(out);
}

static void test_sidecar_with_no_entries_reads_back(void **state)
{
	bfs_sidecar_writer *w;
	bfs_sidecar_info info = { .format = BFS_SIDECAR_TAR, .label_key = "none" }, got;
	bfs_sidecar *sc;
	void *out, *blob;
	size_t len, blen;

	assert_int_equal(bfs_sidecar_writer_create(&w), 0);
	assert_int_equal(bfs_sidecar_writer_finish(w, &info, &out, &len), 0);
	bfs_sidecar_writer_destroy(w);
	assert_int_equal(len, 64 + 4 + 4);
	assert_int_equal(bfs_sidecar_open(out, len, &sc, NULL), 0);
	assert_int_equal(bfs_sidecar_count(sc), 0);
	bfs_sidecar_get_info(sc, &got);
	assert_int_equal(got.format, BFS_SIDECAR_TAR);
	assert_string_equal(got.label_key, "none");
	assert_string_equal(got.source, "");
	assert_int_equal(bfs_sidecar_lookup(sc, "a", &stamp_b, &blob, &blen), -ENOENT);
	bfs_sidecar_close(sc);
	free(out);
}

static void test_sidecar_refuses_another_file(void **state)
{
	static const char text[] = "0 100\n100 200\n";
	char msg[BFS_ERRMSG_MAX];
	bfs_sidecar *sc;

	assert_int_equal(bfs_sidecar_open(text, sizeof(text), &sc, msg), BFS_E_FORMAT);
	assert_null(sc);
	assert_non_null(strstr(msg, "not a batchfs sidecar index"));
	assert_int_equal(bfs_sidecar_open(text, 3, &sc, msg), BFS_E_FORMAT);
}

static void test_sidecar_of_another_version_is_refused_by_name(void **state)
{
	size_t len;
	uint8_t *d = make(&len);
	char msg[BFS_ERRMSG_MAX];
	bfs_sidecar *sc;

	d[8] = 2;
	reseal(d);
	assert_int_equal(bfs_sidecar_open(d, len, &sc, msg), BFS_E_FORMAT);
	assert_non_null(strstr(msg, "version 2"));
	d[8] = 1;
	d[16] = 1; /* a flag this version does not know */
	reseal(d);
	assert_int_equal(bfs_sidecar_open(d, len, &sc, msg), BFS_E_FORMAT);
	free(d);
}

/* Every single byte of the file changed: the header or directory is
 * refused whole (or, for a string a reader passes over, still reads);
 * a byte of a blob fails that entry's lookup only. */
static void test_sidecar_with_any_byte_flipped_is_refused_or_fails_that_entry(void **state)
{
	size_t len;
	uint8_t *d = make(&len);
	uint64_t dir_len, data_len;
	uint32_t str_len;

	memcpy(&str_len, d + 28, 4);
	memcpy(&dir_len, d + 32, 8);
	memcpy(&data_len, d + 40, 8);
	for (size_t i = 0; i < len; i++) {
		bfs_sidecar *sc;
		char msg[BFS_ERRMSG_MAX];
		int r;

		d[i] ^= 0x5a;
		r = bfs_sidecar_open(d, len, &sc, msg);
		if (i < 64 + str_len + dir_len) {
			assert_true(r == BFS_E_CRC || r == BFS_E_FORMAT);
			assert_null(sc);
		} else {
			static const char *const names[] = { "a.tfrecord", "b/two.tfrecord", "c" };
			const bfs_sidecar_id *ids[] = { &etag_a, &stamp_b, NULL };
			bfs_sidecar_id c = { .kind = BFS_SIDECAR_ID_ETAG, .size = 1, .etag = "\"c\"" };
			int bad = 0;

			ids[2] = &c;
			assert_int_equal(r, 0);
			for (int k = 0; k < 3; k++) {
				void *blob;
				size_t blen;

				r = bfs_sidecar_lookup(sc, names[k], ids[k], &blob, &blen);
				assert_true(r == 0 || r == BFS_E_CRC);
				bad += r != 0;
				free(blob);
			}
			assert_int_equal(bad, 1);
			bfs_sidecar_close(sc);
		}
		d[i] ^= 0x5a;
	}
	free(d);
}

/* Cut at every length, or one byte more: refused, never read past. */
static void test_sidecar_cut_short_or_longer_is_refused(void **state)
{
	size_t len;
	uint8_t *d = make(&len), *longer;
	bfs_sidecar *sc;

	for (size_t n = 0; n < len; n++) {
		uint8_t *cut = malloc(n ? n : 1); /* exact size: ASan sees overreads */

		memcpy(cut, d, n);
		assert_true(bfs_sidecar_open(cut, n, &sc, NULL) < 0);
		assert_null(sc);
		free(cut);
	}
	longer = malloc(len + 1);
	memcpy(longer, d, len);
	longer[len] = 0;
	assert_int_equal(bfs_sidecar_open(longer, len + 1, &sc, NULL), BFS_E_CORRUPT);
	free(longer);
	free(d);
}

/* Edits with the CRCs made right again (what a bug or a hostile writer
 * could produce): each is refused for what it is. */
static void test_sidecar_with_sound_crcs_but_broken_fields_is_refused(void **state)
{
	size_t len;
	uint8_t *d = make(&len), *e = malloc(len);
	uint32_t str_len;
	size_t ent0, ent1;
	char msg[BFS_ERRMSG_MAX];
	bfs_sidecar *sc;

	memcpy(&str_len, d + 28, 4);
	ent0 = 64 + str_len;                 /* "a.tfrecord": 64 + 10 + 18 */
	ent1 = ent0 + 64 + 10 + strlen(etag_a.etag);

	/* more entries than the directory can hold */
	memcpy(e, d, len);
	e[24] = 200;
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	/* fewer: the directory is not filled exactly */
	memcpy(e, d, len);
	e[24] = 2;
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	/* the second entry's blob not where the first one's ends */
	memcpy(e, d, len);
	e[ent1 + 32]++;
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "entry 1"));
	/* names out of order: "a.tfrecord" renamed "d.tfrecord" */
	memcpy(e, d, len);
	e[ent0 + 64] = 'd';
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	assert_non_null(strstr(msg, "sorted"));
	/* a ".." component */
	memcpy(e, d, len);
	memcpy(e + ent0 + 64, "../frecord", 10);
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	/* an unknown kind, encoding, and a reserved byte set */
	for (int k = 58; k <= 63; k++) {
		if (k == 59)
			continue; /* the ETag's length: cut or overrun, also refused */
		memcpy(e, d, len);
		e[ent0 + k] = 9;
		reseal(e);
		assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	}
	/* a raw blob whose length once inflated differs */
	memcpy(e, d, len);
	e[ent1 + 48]++;
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), BFS_E_CORRUPT);
	/* a deflated blob that says it inflates to one byte more */
	memcpy(e, d, len);
	e[ent0 + 48]++;
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), 0);
	{
		void *blob;
		size_t blen;

		assert_int_equal(bfs_sidecar_lookup(sc, "a.tfrecord", &etag_a, &blob, &blen),
				 BFS_E_CORRUPT);
		assert_null(blob);
	}
	bfs_sidecar_close(sc);
	/* an unknown string field is passed over (a later version's) */
	memcpy(e, d, len);
	e[64] = 99;
	reseal(e);
	assert_int_equal(bfs_sidecar_open(e, len, &sc, msg), 0);
	bfs_sidecar_close(sc);
	free(e);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sidecar_reads_back_what_was_written),
		cmocka_unit_test(test_sidecar_deflates_an_index_that_shrinks),
		cmocka_unit_test(test_sidecar_gives_an_entry_only_for_its_identity),
		cmocka_unit_test(test_sidecar_never_trusts_a_weak_etag),
		cmocka_unit_test(test_sidecar_writer_refuses_names_a_reader_would),
		cmocka_unit_test(test_sidecar_name_added_again_replaces_its_entry),
		cmocka_unit_test(test_sidecar_with_no_entries_reads_back),
		cmocka_unit_test(test_sidecar_refuses_another_file),
		cmocka_unit_test(test_sidecar_of_another_version_is_refused_by_name),
		cmocka_unit_test(test_sidecar_with_any_byte_flipped_is_refused_or_fails_that_entry),
		cmocka_unit_test(test_sidecar_cut_short_or_longer_is_refused),
		cmocka_unit_test(test_sidecar_with_sound_crcs_but_broken_fields_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
