/*
 * test_example.c - engine/formats/example: builder output equals TensorFlow's,
 * lookups of bytes and packed/unpacked int64 features, unknown fields
 * skipped, clear messages for missing keys, and no out-of-bounds read on
 * any truncation or corruption.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/formats/example.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * tf.train.Example(...).SerializeToString(deterministic=True) from
 * TensorFlow 2.21, generated once, with the features
 *   image/class/label      int64_list [-3, 300]
 *   image/encoded          bytes_list [b'\xff\xd8\xff\xe0fakejpeg']
 *   image/format           bytes_list [b'JPEG']
 *   image/object/bbox/xmin float_list [0.25]
 */
static const uint8_t tf_example[139] =
	"\x0a\x88\x01\x0a\x25\x0a\x11\x69\x6d\x61\x67\x65\x2f\x63\x6c\x61"
	"\x73\x73\x2f\x6c\x61\x62\x65\x6c\x12\x10\x1a\x0e\x0a\x0c\xfd\xff"
	"\xff\xff\xff\xff\xff\xff\xff\x01\xac\x02\x0a\x21\x0a\x0d\x69\x6d"
	"\x61\x67\x65\x2f\x65\x6e\x63\x6f\x64\x65\x64\x12\x10\x0a\x0e\x0a"
	"\x0c\xff\xd8\xff\xe0\x66\x61\x6b\x65\x6a\x70\x65\x67\x0a\x18\x0a"
	"\x0c\x69\x6d\x61\x67\x65\x2f\x66\x6f\x72\x6d\x61\x74\x12\x08\x0a"
	"\x06\x0a\x04\x4a\x50\x45\x47\x0a\x22\x0a\x16\x69\x6d\x61\x67\x65"
	"\x2f\x6f\x62\x6a\x65\x63\x74\x2f\x62\x62\x6f\x78\x2f\x78\x6d\x69"
	"\x6e\x12\x08\x12\x06\x0a\x04\x00\x00\x80\x3e";

static const char fake_jpeg[] = "\xff\xd8\xff\xe0" "fakejpeg";

static bfs_example_builder *new_builder(void)
{
	bfs_example_builder *b;

	assert_int_equal(bfs_example_builder_create(&b), 0);
	assert_non_null(b);
	return b;
}

static void test_example_builder_writes_the_bytes_tensorflow_writes(void **state)
{
	bfs_example_builder *b = new_builder();
	const int64_t labels[2] = {-3, 300};
	const uint8_t *data;
	size_t len;

	assert_int_equal(bfs_example_builder_add_int64s(b, "image/class/label",
							labels, 2, 1), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded",
						       fake_jpeg, 12), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/format", "JPEG",
						       4), 0);
	assert_int_equal(bfs_example_builder_add_float(b, "image/object/bbox/xmin",
						       0.25f), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(len, sizeof(tf_example));
	assert_memory_equal(data, tf_example, len);
	bfs_example_builder_destroy(b);
}

static void test_example_find_reads_a_tensorflow_example(void **state)
{
	const uint8_t *img = NULL;
	size_t img_len = 0;
	int64_t label = 0;

	/* (its label feature holds two values: see the test after this) */
	assert_int_equal(bfs_example_find(tf_example, sizeof(tf_example),
					  "image/encoded", NULL, &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(img_len, 12);
	assert_memory_equal(img, fake_jpeg, 12);
	assert_true(img > tf_example && img < tf_example + sizeof(tf_example));
	assert_int_equal(label, 0);
}

/* An Example whose features are "img" (bytes "J") and "lab", the Feature
 * message feat[0..n) as given; returns its length in out. */
static size_t example_with_label_feature(const char *feat, size_t n,
					 uint8_t *out)
{
	uint8_t entries[256];
	size_t e = 0, o = 0;

	assert_true(n < 100);
	memcpy(entries, "\x0a\x0c\x0a\x03img\x12\x05\x0a\x03\x0a\x01J", 14);
	e = 14;
	entries[e++] = 0x0a;                 /* Features.feature */
	entries[e++] = (uint8_t)(5 + 2 + n);
	memcpy(entries + e, "\x0a\x03lab", 5), e += 5;
	entries[e++] = 0x12;
	entries[e++] = (uint8_t)n;
	memcpy(entries + e, feat, n), e += n;
	out[o++] = 0x0a;                     /* Example.features */
	out[o++] = (uint8_t)e;
	memcpy(out + o, entries, e);
	return o + e;
}

static void test_example_find_refuses_a_label_of_two_values_as_tensorflow_does(void **state)
{
	/* Feature messages of the label: how many values they hold, after
	 * protobuf's merge rules */
	static const struct { const char *feat; size_t n; int count; } cases[] = {
		{ "\x1a\x02\x08\x05", 4, 1 },                   /* [5] unpacked */
		{ "\x1a\x04\x08\x05\x08\x06", 6, 2 },           /* [5, 6] unpacked */
		{ "\x1a\x04\x0a\x02\x05\x06", 6, 2 },           /* [5, 6] packed */
		{ "\x1a\x05\x0a\x01\x05\x08\x06", 7, 2 },       /* packed + unpacked */
		{ "\x1a\x02\x08\x05\x1a\x02\x08\x06", 8, 2 },   /* two lists merge */
		{ "\x1a\x02\x08\x05\x0a\x00\x1a\x02\x08\x06", 10, 1 }, /* kind changed */
		{ "\x1a\x06\x0a\x04\x01\x02\x03\x04", 8, 4 },
	};
	char err[BFS_ERRMSG_MAX];
	uint8_t ex[256];
	const uint8_t *img = NULL;
	size_t n, img_len = 0;
	int64_t label = -1;

	/* TensorFlow's own bytes: image/class/label is int64_list [-3, 300] */
	assert_int_equal(bfs_example_find(tf_example, sizeof(tf_example),
					  "image/encoded", "image/class/label",
					  &img, &img_len, &label, err),
			 BFS_E_FORMAT);
	assert_string_equal(err, "feature 'image/class/label' holds 2 int64 "
			    "values, expected 1 (one label per record, as "
			    "TensorFlow's FixedLenFeature([], tf.int64) "
			    "requires)");
	assert_int_equal(label, -1);     /* untouched: never the first value */
	assert_null(img);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char want[64];
		int r;

		n = example_with_label_feature(cases[i].feat, cases[i].n, ex);
		label = -1;
		err[0] = '\0';
		r = bfs_example_find(ex, n, "img", "lab", &img, &img_len, &label,
				     err);
		if (cases[i].count == 1) {
			if (r != 0)
				fail_msg("case %zu: %d (%s)", i, r, err);
			assert_true(label == 5 || label == 6);
			continue;
		}
		assert_int_equal(r, BFS_E_FORMAT);
		assert_int_equal(label, -1);
		snprintf(want, sizeof(want), "'lab' holds %d int64 values",
			 cases[i].count);
		if (!strstr(err, want))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, want);
	}
}

static void test_example_find_counts_only_the_last_entry_of_a_repeated_label(void **state)
{
	bfs_example_builder *b = new_builder();
	const int64_t two[2] = { 1, 2 };
	const uint8_t *data, *img;
	size_t len, img_len;
	int64_t label = -1;

	assert_int_equal(bfs_example_builder_add_bytes(b, "img", "j", 1), 0);
	assert_int_equal(bfs_example_builder_add_int64s(b, "lab", two, 2, 1), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "lab", 3), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(bfs_example_find(data, len, "img", "lab", &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(label, 3);
	bfs_example_builder_reset(b);
	assert_int_equal(bfs_example_builder_add_bytes(b, "img", "j", 1), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "lab", 3), 0);
	assert_int_equal(bfs_example_builder_add_int64s(b, "lab", two, 2, 0), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	label = -1;
	assert_int_equal(bfs_example_find(data, len, "img", "lab", &img, &img_len,
					  &label, NULL), BFS_E_FORMAT);
	assert_int_equal(label, -1);
	bfs_example_builder_destroy(b);
}

static void test_example_find_refuses_an_image_of_two_values_as_tensorflow_does(void **state)
{
	bfs_example_builder *b = new_builder();
	const void *vals[3] = { fake_jpeg, "second", "third" };
	const size_t lens[3] = { 12, 6, 5 };
	char err[BFS_ERRMSG_MAX];
	const uint8_t *data, *img = NULL;
	size_t len, img_len = 0;
	int64_t label = -1;

	for (size_t n = 0; n <= 3; n++) {
		int r;

		bfs_example_builder_reset(b);
		assert_int_equal(bfs_example_builder_add_bytes_list(
					 b, "image/encoded", vals, lens, n), 0);
		assert_int_equal(bfs_example_builder_add_int64(b, "l", 4), 0);
		assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
		img = NULL;
		label = -1;
		r = bfs_example_find(data, len, "image/encoded", "l", &img,
				     &img_len, &label, err);
		if (n == 1) {
			assert_int_equal(r, 0);
			assert_int_equal(img_len, 12);
			assert_memory_equal(img, fake_jpeg, 12);
			assert_int_equal(label, 4);
		} else if (n == 0) {
			assert_int_equal(r, BFS_E_NOKEY);
			assert_string_equal(err, "feature 'image/encoded' holds "
					    "no bytes value");
		} else {
			char want[80];

			assert_int_equal(r, BFS_E_FORMAT);
			snprintf(want, sizeof(want), "feature 'image/encoded' "
				 "holds %zu bytes values, expected 1", n);
			if (strncmp(err, want, strlen(want)))
				fail_msg("n %zu: '%s' is not '%s...'", n, err,
					 want);
			assert_null(img);
			assert_int_equal(label, -1);
		}
	}
	bfs_example_builder_destroy(b);
}

static void test_example_find_reads_unpacked_int64_labels(void **state)
{
	bfs_example_builder *b = new_builder();
	const int64_t v[1] = {INT64_MIN};
	const uint8_t *data, *img;
	size_t len, img_len;
	int64_t label = 0;

	assert_int_equal(bfs_example_builder_add_int64s(b, "y", v, 1, 0), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "x", "abc", 3), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(bfs_example_find(data, len, "x", "y", &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(label, INT64_MIN);
	assert_int_equal(img_len, 3);
	assert_memory_equal(img, "abc", 3);
	bfs_example_builder_destroy(b);
}

static void test_example_find_names_the_keys_present_when_one_is_missing(void **state)
{
	char err[BFS_ERRMSG_MAX];
	const uint8_t *img;
	size_t img_len;
	int64_t label;

	assert_int_equal(bfs_example_find(tf_example, sizeof(tf_example),
					  "image/jpeg", NULL, &img, &img_len,
					  &label, err), BFS_E_NOKEY);
	assert_string_equal(err,
			    "no feature 'image/jpeg'; keys present: "
			    "'image/class/label', 'image/encoded', "
			    "'image/format', 'image/object/bbox/xmin'");
	assert_int_equal(bfs_example_find((const uint8_t *)"", 0, "image/jpeg",
					  NULL, &img, &img_len, &label, err),
			 BFS_E_NOKEY);
	assert_string_equal(err, "no feature 'image/jpeg'; keys present: (none)");
}

static void test_example_find_shortens_a_long_key_list(void **state)
{
	bfs_example_builder *b = new_builder();
	char err[BFS_ERRMSG_MAX], key[64];
	const uint8_t *data, *img;
	size_t len, img_len;
	int64_t label;

	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "some/rather/long/feature/name/%02d", i);
		assert_int_equal(bfs_example_builder_add_int64(b, key, i), 0);
	}
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(bfs_example_find(data, len, "image/encoded", NULL, &img,
					  &img_len, &label, err), BFS_E_NOKEY);
	assert_non_null(strstr(err, "'some/rather/long/feature/name/00', "));
	assert_non_null(strstr(err, ", ..."));
	assert_true(strlen(err) < BFS_ERRMSG_MAX - 1);
	bfs_example_builder_destroy(b);
}

static void test_example_find_leaves_the_label_alone_when_absent_or_empty(void **state)
{
	bfs_example_builder *b = new_builder();
	const uint8_t *data, *img;
	size_t len, img_len;
	int64_t label = -1;

	assert_int_equal(bfs_example_builder_add_bytes(b, "img", "j", 1), 0);
	assert_int_equal(bfs_example_builder_add_int64s(b, "empty", NULL, 0, 1), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "lab", 9), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(bfs_example_find(data, len, "img", "nolabel", &img,
					  &img_len, &label, NULL), 0);
	assert_int_equal(label, -1);
	assert_int_equal(bfs_example_find(data, len, "img", "empty", &img,
					  &img_len, &label, NULL), 0);
	assert_int_equal(label, -1);
	assert_int_equal(bfs_example_find(data, len, "img", NULL, &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(label, -1);
	assert_int_equal(bfs_example_find(data, len, "img", "lab", &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(label, 9);
	bfs_example_builder_destroy(b);
}

static void test_example_find_rejects_features_of_the_wrong_kind(void **state)
{
	char err[BFS_ERRMSG_MAX];
	const uint8_t *img;
	size_t img_len;
	int64_t label;

	assert_int_equal(bfs_example_find(tf_example, sizeof(tf_example),
					  "image/class/label", NULL, &img,
					  &img_len, &label, err), BFS_E_FORMAT);
	assert_string_equal(err, "feature 'image/class/label' is a int64_list, "
			    "expected a bytes_list");
	assert_int_equal(bfs_example_find(tf_example, sizeof(tf_example),
					  "image/encoded", "image/object/bbox/xmin",
					  &img, &img_len, &label, err),
			 BFS_E_FORMAT);
	assert_non_null(strstr(err, "float_list"));
}

static void test_example_find_takes_the_last_entry_for_a_repeated_key(void **state)
{
	bfs_example_builder *b = new_builder();
	const uint8_t *data, *img;
	size_t len, img_len;
	int64_t label = 0;

	assert_int_equal(bfs_example_builder_add_bytes(b, "k", "first", 5), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "l", 1), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "k", "second", 6), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "l", 2), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(bfs_example_find(data, len, "k", "l", &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(img_len, 6);
	assert_memory_equal(img, "second", 6);
	assert_int_equal(label, 2);
	bfs_example_builder_destroy(b);
}

static void test_example_builder_reset_starts_a_new_record(void **state)
{
	bfs_example_builder *b = new_builder();
	static uint8_t big[100000];
	const uint8_t *data, *img;
	size_t len, img_len;
	int64_t label;

	memset(big, 7, sizeof(big));
	assert_int_equal(bfs_example_builder_add_bytes(b, "k", big, sizeof(big)), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(bfs_example_find(data, len, "k", NULL, &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(img_len, sizeof(big));
	assert_memory_equal(img, big, sizeof(big));
	bfs_example_builder_reset(b);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	assert_int_equal(len, 2); /* an Example with empty Features */
	assert_int_equal(bfs_example_find(data, len, "k", NULL, &img, &img_len,
					  &label, NULL), BFS_E_NOKEY);
	bfs_example_builder_destroy(b);
	bfs_example_builder_destroy(NULL);
}

/* Hand-written protobuf with unknown fields of every skippable wire type at
 * every level: varint (field 9, 0x48), fixed64 (0x49), length-delimited
 * (0x4a), fixed32 (0x4d). */
#define UNKNOWN "\x48\x96\x01" "\x49\1\2\3\4\5\6\7\x08" "\x4a\x02zz" "\x4d\1\2\3\4"
#define UNK_LEN (sizeof(UNKNOWN) - 1)

static void test_example_find_skips_unknown_fields_of_every_wire_type(void **state)
{
	/* BytesList { unknown, value "JPG" } */
	static const uint8_t bl[] = UNKNOWN "\x0a\x03JPG";
	/* Feature { unknown, bytes_list } */
	uint8_t feat[64], entry[96], feats[128], ex[160];
	size_t nf = 0, ne = 0, nfs = 0, nx = 0;
	const uint8_t *img;
	size_t img_len;
	int64_t label;

	memcpy(feat, UNKNOWN, UNK_LEN), nf = UNK_LEN;
	feat[nf++] = 0x0a, feat[nf++] = (uint8_t)(sizeof(bl) - 1);
	memcpy(feat + nf, bl, sizeof(bl) - 1), nf += sizeof(bl) - 1;

	memcpy(entry, UNKNOWN, UNK_LEN), ne = UNK_LEN;
	entry[ne++] = 0x12, entry[ne++] = (uint8_t)nf; /* value before key */
	memcpy(entry + ne, feat, nf), ne += nf;
	memcpy(entry + ne, "\x0a\x03img", 5), ne += 5;

	memcpy(feats, UNKNOWN, UNK_LEN), nfs = UNK_LEN;
	feats[nfs++] = 0x0a, feats[nfs++] = (uint8_t)ne;
	memcpy(feats + nfs, entry, ne), nfs += ne;

	memcpy(ex, UNKNOWN, UNK_LEN), nx = UNK_LEN;
	ex[nx++] = 0x0a, ex[nx++] = (uint8_t)nfs;
	memcpy(ex + nx, feats, nfs), nx += nfs;
	memcpy(ex + nx, UNKNOWN, UNK_LEN), nx += UNK_LEN;

	assert_int_equal(bfs_example_find(ex, nx, "img", NULL, &img, &img_len,
					  &label, NULL), 0);
	assert_int_equal(img_len, 3);
	assert_memory_equal(img, "JPG", 3);
}

static void test_example_find_reports_malformed_protobuf_with_an_offset(void **state)
{
	static const struct {
		const char *bytes;
		size_t len;
		const char *msg;
	} bad[] = {
		{ "\x0a\x05\x0a\x03", 4, "at byte 0: length runs past" },
		{ "\x0b", 1, "at byte 0: groups are not supported" },
		{ "\x0e\x00", 2, "at byte 0: invalid wire type" },
		{ "\x02\x00", 2, "at byte 0: invalid field number" },
		{ "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, "overlong varint" },
		{ "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11, "overlong varint" },
		{ "\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10, "length runs past" },
		{ "\x08", 1, "truncated or overlong varint" },
		{ "\x10\x01\x08\x01", 4, "at byte 2: Example.features is not" },
		{ "\x0a\x02\x0a\x00\x0a\x02\x08\x01", 8, "at byte 6: Features.feature" },
		{ "\x0a\x04\x0a\x02\x08\x01", 6, "at byte 4: map entry field" },
	};
	char err[BFS_ERRMSG_MAX];
	const uint8_t *img;
	size_t img_len;
	int64_t label;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(bfs_example_find((const uint8_t *)bad[i].bytes,
						  bad[i].len, "k", NULL, &img,
						  &img_len, &label, err),
				 BFS_E_CORRUPT);
		if (!strstr(err, bad[i].msg))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i].msg);
	}
}

/* Each prefix in its own exact-size heap block, so ASan catches any read
 * past the end. */
static void test_example_find_fails_cleanly_at_every_cut_point(void **state)
{
	const uint8_t *img;
	size_t img_len;
	int64_t label;

	for (size_t cut = 0; cut < sizeof(tf_example); cut++) {
		uint8_t *copy = malloc(cut ? cut : 1);
		int r;

		memcpy(copy, tf_example, cut);
		r = bfs_example_find(copy, cut, "image/encoded", "image/class/label",
				     &img, &img_len, &label, NULL);
		assert_true(r == BFS_E_CORRUPT || r == BFS_E_NOKEY);
		free(copy);
	}
}

static void test_example_find_survives_random_corruption(void **state)
{
	uint8_t *copy = malloc(sizeof(tf_example));
	unsigned seed = 1;
	char err[BFS_ERRMSG_MAX];
	const uint8_t *img;
	size_t img_len;
	int64_t label;
	int ok = 0;

	for (int i = 0; i < 200000; i++) {
		int r;

		memcpy(copy, tf_example, sizeof(tf_example));
		for (int k = 0; k < 1 + i % 4; k++) {
			seed = seed * 1103515245u + 12345u;
			copy[(seed >> 8) % sizeof(tf_example)] = (uint8_t)(seed >> 20);
		}
		r = bfs_example_find(copy, sizeof(tf_example), "image/encoded",
				     "image/class/label", &img, &img_len, &label,
				     err);
		if (r == 0) {
			assert_true(img >= copy &&
				    img + img_len <= copy + sizeof(tf_example));
			ok++;
		} else {
			assert_true(r == BFS_E_CORRUPT || r == BFS_E_NOKEY ||
				    r == BFS_E_FORMAT);
		}
	}
	assert_true(ok > 0);
	free(copy);
}

/* ---- bfs_example_skim ---------------------------------------------- */

struct rec {
	const uint8_t *buf;
	size_t len;
	size_t bytes_read;   /* through the read function */
	int calls;
};

static int rec_read(void *ctx, size_t off, void *buf, size_t len)
{
	struct rec *r = ctx;

	assert_true(off + len <= r->len);
	memcpy(buf, r->buf + off, len);
	r->bytes_read += len;
	r->calls++;
	return 0;
}

static const char *const class_keys[] = { "image/class/label",
					  "image/class/synset", NULL };

/* find(synset, label) on the whole record and on its skim (the first
 * head bytes given) must agree: same code, same name, same label. */
static void expect_skim_agrees(const uint8_t *buf, size_t len, size_t head)
{
	struct rec r = { buf, len, 0, 0 };
	uint8_t out[16384];
	size_t out_len;
	char e1[BFS_ERRMSG_MAX] = "", e2[BFS_ERRMSG_MAX] = "";
	const uint8_t *n1 = NULL, *n2 = NULL;
	size_t l1 = 0, l2 = 0;
	int64_t lab1 = 77, lab2 = 77;
	int r1, r2, rs;

	if (head > len)
		head = len;
	r1 = bfs_example_find(buf, len, "image/class/synset", "image/class/label",
			      &n1, &l1, &lab1, e1);
	rs = bfs_example_skim(buf, head, len, rec_read, &r, class_keys, out,
			      sizeof(out), &out_len, e2);
	if (rs) {
		/* the skim fails only where find does, with its message */
		assert_int_equal(rs, BFS_E_CORRUPT);
		assert_int_equal(r1, BFS_E_CORRUPT);
		assert_string_equal(e1, e2);
		return;
	}
	r2 = bfs_example_find(out, out_len, "image/class/synset",
			      "image/class/label", &n2, &l2, &lab2, NULL);
	if (r1 != r2)
		fail_msg("find %d on the record, %d on its skim (%s)", r1, r2, e1);
	assert_true(lab1 == lab2);
	if (r1 == 0) {
		assert_int_equal(l1, l2);
		assert_memory_equal(n1, n2, l1);
	}
}

static void test_example_skim_reads_the_small_entries_and_skips_the_image(void **state)
{
	static uint8_t jpeg[200000];
	bfs_example_builder *b = new_builder();
	const uint8_t *data, *name;
	uint8_t out[16384];
	size_t len, out_len, nlen;
	int64_t label = -1;
	struct rec r;

	/* TensorFlow's order: the image before the label and the synset */
	memset(jpeg, 0xab, sizeof(jpeg));
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/class/text", "tench", 5), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/encoded", jpeg,
						       sizeof(jpeg)), 0);
	assert_int_equal(bfs_example_builder_add_int64(b, "image/class/label", 5), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/class/synset",
						       "n01440764", 9), 0);
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/filename", "x.JPEG", 6), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	for (size_t head = 0; head <= 4096; head += 4096) {
		r = (struct rec){ data, len, 0, 0 };
		assert_int_equal(bfs_example_skim(data, head, len, rec_read, &r,
						  class_keys, out, sizeof(out),
						  &out_len, NULL), 0);
		/* a few windows, never the image's 200 KB */
		assert_true(r.bytes_read < 3 * 4096);
		assert_true(out_len < 100);
		assert_int_equal(bfs_example_find(out, out_len, "image/class/synset",
						  "image/class/label", &name, &nlen,
						  &label, NULL), 0);
		assert_int_equal(nlen, 9);
		assert_memory_equal(name, "n01440764", 9);
		assert_int_equal(label, 5);
		/* what was not asked for is not there */
		assert_int_equal(bfs_example_find(out, out_len, "image/encoded", NULL,
						  &name, &nlen, &label, NULL),
				 BFS_E_NOKEY);
	}
	/* all of it in hand: nothing is read */
	r = (struct rec){ data, len, 0, 0 };
	assert_int_equal(bfs_example_skim(data, len, len, rec_read, &r, class_keys,
					  out, sizeof(out), &out_len, NULL), 0);
	assert_int_equal(r.calls, 0);
	bfs_example_builder_destroy(b);
}

static void test_example_skim_refuses_a_wanted_entry_too_big_to_be_a_name(void **state)
{
	static char big[5000];
	bfs_example_builder *b = new_builder();
	const uint8_t *data;
	uint8_t out[16384];
	size_t len, out_len;
	char err[BFS_ERRMSG_MAX];
	struct rec r;

	memset(big, 'n', sizeof(big));
	assert_int_equal(bfs_example_builder_add_bytes(b, "image/class/synset", big,
						       sizeof(big)), 0);
	assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
	r = (struct rec){ data, len, 0, 0 };
	assert_int_equal(bfs_example_skim(data, 0, len, rec_read, &r, class_keys,
					  out, sizeof(out), &out_len, err),
			 BFS_E_TOOBIG);
	assert_non_null(strstr(err, "more than 4096"));
	bfs_example_builder_destroy(b);
}

static void test_example_skim_agrees_with_find_on_random_records(void **state)
{
	static const char *const keys[] = { "image/class/label",
					     "image/class/synset", "image/encoded",
					     "image/class/text", "x" };
	static uint8_t blob[9000];
	bfs_example_builder *b = new_builder();
	unsigned seed = 7;

	memset(blob, 'v', sizeof(blob));
	for (int n = 0; n < 3000; n++) {
		const uint8_t *data;
		size_t len;
		int nf;

		bfs_example_builder_reset(b);
		seed = seed * 1103515245u + 12345u;
		nf = (int)(seed >> 16) % 7;
		for (int f = 0; f < nf; f++) {
			const char *k;
			int kind;
			size_t sz;

			seed = seed * 1103515245u + 12345u;
			k = keys[(seed >> 8) % 5];
			kind = (int)(seed >> 12) % 4;
			/* unwanted values may be large; any may be empty */
			sz = (seed >> 16) % 4 == 0 ? (seed >> 4) % sizeof(blob)
						    : (seed >> 4) % 40;
			if (kind == 0) {
				assert_int_equal(bfs_example_builder_add_bytes(b, k, blob,
						  strcmp(k, "image/encoded") ? sz % 300 : sz), 0);
			} else if (kind == 1) {
				int64_t v[3] = { (int64_t)(seed % 1000), 2, 3 };

				assert_int_equal(bfs_example_builder_add_int64s(b, k, v,
						  (seed >> 3) % 3, (seed >> 5) & 1), 0);
			} else if (kind == 2) {
				assert_int_equal(bfs_example_builder_add_float(b, k, 0.5f), 0);
			} else {
				const void *d[2] = { "n1", "n2" };
				size_t l[2] = { 2, 2 };

				assert_int_equal(bfs_example_builder_add_bytes_list(b, k, d, l,
						  (seed >> 7) % 3), 0);
			}
		}
		assert_int_equal(bfs_example_builder_finish(b, &data, &len), 0);
		seed = seed * 1103515245u + 12345u;
		expect_skim_agrees(data, len, (seed >> 8) % (len + 1));
		expect_skim_agrees(data, len, 0);
		/* and every cut of small ones, where find says corrupt */
		if (len < 200)
			for (size_t cut = 0; cut < len; cut++)
				expect_skim_agrees(data, cut, cut / 2);
	}
	bfs_example_builder_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_example_builder_writes_the_bytes_tensorflow_writes),
		cmocka_unit_test(test_example_find_reads_a_tensorflow_example),
		cmocka_unit_test(test_example_find_refuses_a_label_of_two_values_as_tensorflow_does),
		cmocka_unit_test(test_example_find_counts_only_the_last_entry_of_a_repeated_label),
		cmocka_unit_test(test_example_find_refuses_an_image_of_two_values_as_tensorflow_does),
		cmocka_unit_test(test_example_find_reads_unpacked_int64_labels),
		cmocka_unit_test(test_example_find_names_the_keys_present_when_one_is_missing),
		cmocka_unit_test(test_example_find_shortens_a_long_key_list),
		cmocka_unit_test(test_example_find_leaves_the_label_alone_when_absent_or_empty),
		cmocka_unit_test(test_example_find_rejects_features_of_the_wrong_kind),
		cmocka_unit_test(test_example_find_takes_the_last_entry_for_a_repeated_key),
		cmocka_unit_test(test_example_builder_reset_starts_a_new_record),
		cmocka_unit_test(test_example_find_skips_unknown_fields_of_every_wire_type),
		cmocka_unit_test(test_example_find_reports_malformed_protobuf_with_an_offset),
		cmocka_unit_test(test_example_find_fails_cleanly_at_every_cut_point),
		cmocka_unit_test(test_example_find_survives_random_corruption),
		cmocka_unit_test(test_example_skim_reads_the_small_entries_and_skips_the_image),
		cmocka_unit_test(test_example_skim_refuses_a_wanted_entry_too_big_to_be_a_name),
		cmocka_unit_test(test_example_skim_agrees_with_find_on_random_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
