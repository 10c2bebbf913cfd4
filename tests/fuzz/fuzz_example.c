/*
 * fuzz_example.c - tf.train.Example decoding (bfs_example_find) from any
 * bytes, and a differential round trip through the builder.
 *
 * Input byte 0 picks the mode:
 *   even: the rest is a serialized Example; find "image/encoded" and
 *         "image/class/label" (and once with no label key).  Properties: a
 *         documented result; on success the image lies inside the buffer;
 *         errmsg terminated; the label is untouched unless success.
 *         Then the same Example skimmed (bfs_example_skim, the first
 *         byte's bits 1-7 choosing how much of it is "in hand"): find on
 *         the skim must answer as on the whole (code, image bytes, label),
 *         and a skim that fails for corruption fails where find does.
 *   odd:  the rest is a little program of builder calls (add bytes lists
 *         of 0, 1 or 2 values / int64s packed or not / float, under one of
 *         four keys).  A model of the protobuf rules (the last map entry of
 *         a key wins) and of TensorFlow's FixedLenFeature([]) rule (the
 *         image and the label hold exactly one value) predicts what
 *         bfs_example_find must return; it must agree exactly.
 */
#include <errno.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "tests/fuzz/fuzz.h"

static const char *const keys[4] = { "image/encoded", "image/class/label",
				     "image/encoded/x", "" };

enum { K_NONE, K_BYTES, K_INT64, K_FLOAT };

typedef struct {
	int kind;            /* of the last entry with this key */
	const uint8_t *data; /* K_BYTES: the first value, into the input */
	size_t len;
	size_t nvals;        /* K_BYTES, K_INT64 */
	int64_t first;
} model;

static void raw(const uint8_t *d, size_t n)
{
	char msg[BFS_ERRMSG_MAX];
	const uint8_t *img = NULL;
	size_t img_len = 0;
	int64_t label = 12345;
	int r;

	memset(msg, 'x', sizeof(msg));
	msg[sizeof(msg) - 1] = 0;
	r = bfs_example_find(d, n, "image/encoded", "image/class/label", &img,
			     &img_len, &label, msg);
	CHECK(r == 0 || r == BFS_E_NOKEY || r == BFS_E_FORMAT ||
	      r == BFS_E_CORRUPT, "find returned %d", r);
	CHECK_MSG(msg);
	if (r == 0) {
		CHECK(img_len <= n && img >= d && (size_t)(img - d) <= n - img_len,
		      "image [%p+%zu] outside [%p+%zu]", (void *)img, img_len,
		      (void *)d, n);
	} else {
		CHECK(label == 12345, "label changed on failure");
		CHECK(msg[0], "error without a message");
	}
	r = bfs_example_find(d, n, "image/encoded", NULL, &img, &img_len,
			     &label, NULL);
	CHECK(r == 0 || r == BFS_E_NOKEY || r == BFS_E_FORMAT ||
	      r == BFS_E_CORRUPT, "find (no label) returned %d", r);
}

struct piece {
	const uint8_t *d;
	size_t n;
};

static int piece_read(void *ctx, size_t off, void *buf, size_t len)
{
	const struct piece *p = ctx;

	CHECK(off <= p->n && len <= p->n - off, "skim read [%zu+%zu] of %zu", off,
	      len, p->n);
	memcpy(buf, p->d + off, len);
	return 0;
}

static void skim(const uint8_t *d, size_t n, unsigned share)
{
	static const char *const want[] = { "image/encoded", "image/class/label", NULL };
	static uint8_t out[16384];
	char m1[BFS_ERRMSG_MAX] = "", m2[BFS_ERRMSG_MAX] = "";
	struct piece p = { d, n };
	const uint8_t *i1 = NULL, *i2 = NULL;
	size_t l1 = 0, l2 = 0, out_len = 0, head = n * share / 127;
	int64_t lab1 = 99, lab2 = 99;
	int r1, r2, rs;

	r1 = bfs_example_find(d, n, want[0], want[1], &i1, &l1, &lab1, m1);
	rs = bfs_example_skim(d, head, n, piece_read, &p, want, out, sizeof(out),
			      &out_len, m2);
	CHECK_MSG(m2);
	if (rs == BFS_E_TOOBIG)
		return; /* a wanted entry over 4 KiB: not skimmed, as documented */
	if (rs) {
		CHECK(rs == BFS_E_CORRUPT, "skim returned %d", rs);
		CHECK(r1 == BFS_E_CORRUPT && !strcmp(m1, m2),
		      "skim: '%s', find %d: '%s'", m2, r1, m1);
		return;
	}
	CHECK(out_len <= sizeof(out), "skim wrote %zu bytes", out_len);
	r2 = bfs_example_find(out, out_len, want[0], want[1], &i2, &l2, &lab2, NULL);
	CHECK(r1 == r2, "find %d on the whole, %d on the skim", r1, r2);
	CHECK(lab1 == lab2, "label %lld vs %lld", (long long)lab1, (long long)lab2);
	if (r1 == 0)
		CHECK(l1 == l2 && !memcmp(i1, i2, l1), "image bytes differ");
}

static void round_trip(const uint8_t *d, size_t n)
{
	static bfs_example_builder *b;
	model m[4] = { { 0 } };
	int64_t vals[16];
	size_t p = 0;
	const uint8_t *ex, *img = NULL;
	size_t ex_len, img_len = 0;
	int64_t label = -7;
	int r, want;

	if (!b)
		CHECK(bfs_example_builder_create(&b) == 0, "builder");
	bfs_example_builder_reset(b);
	while (p + 2 <= n) {
		uint8_t op = d[p], arg = d[p + 1];
		int k = op & 3;

		p += 2;
		switch ((op >> 2) & 3) {
		case 0: { /* bytes: arg bytes of data follow */
			size_t len = arg < n - p ? arg : n - p;

			if (op & 0x30) {
				/* bit 4: two values, the data cut in half;
				 * bit 5 alone: an empty list */
				size_t nv = (op & 0x10) ? 2 : 0;
				const void *v[2] = { d + p, d + p + len / 2 };
				size_t l[2] = { len / 2, len - len / 2 };

				CHECK(bfs_example_builder_add_bytes_list(b, keys[k], v,
									 l, nv) == 0,
				      "add_bytes_list");
				m[k] = (model){ K_BYTES, d + p, len / 2, nv, 0 };
			} else {
				CHECK(bfs_example_builder_add_bytes(b, keys[k], d + p,
								    len) == 0,
				      "add_bytes");
				m[k] = (model){ K_BYTES, d + p, len, 1, 0 };
			}
			p += len;
			break;
		}
		case 1:   /* int64s, packed */
		case 2: { /* int64s, unpacked */
			size_t cnt = arg % 17;

			for (size_t i = 0; i < cnt; i++) {
				uint64_t v = 0;

				for (int j = 0; j < 8; j++)
					v = v << 8 | (p < n ? d[p++] : 0x5a);
				vals[i % 16] = (int64_t)v;
			}
			cnt = cnt > 16 ? 16 : cnt;
			CHECK(bfs_example_builder_add_int64s(b, keys[k], vals, cnt,
							     ((op >> 2) & 3) == 1) == 0,
			      "add_int64s");
			m[k] = (model){ K_INT64, NULL, 0, cnt, cnt ? vals[0] : 0 };
			break;
		}
		default: /* float */
			CHECK(bfs_example_builder_add_float(b, keys[k], (float)arg) == 0,
			      "add_float");
			m[k] = (model){ K_FLOAT, NULL, 0, 0, 0 };
			break;
		}
	}
	CHECK(bfs_example_builder_finish(b, &ex, &ex_len) == 0, "finish");
	r = bfs_example_find(ex, ex_len, keys[0], keys[1], &img, &img_len, &label,
			     NULL);

	/* The model: image first (its kind, then its count), then the label
	 * (kind, count; an empty label list is no label). */
	if (m[0].kind == K_NONE)
		want = BFS_E_NOKEY;
	else if (m[0].kind != K_BYTES)
		want = BFS_E_FORMAT;
	else if (m[0].nvals == 0)
		want = BFS_E_NOKEY;
	else if (m[0].nvals > 1)
		want = BFS_E_FORMAT;
	else if (m[1].kind == K_BYTES || m[1].kind == K_FLOAT)
		want = BFS_E_FORMAT;
	else if (m[1].kind == K_INT64 && m[1].nvals > 1)
		want = BFS_E_FORMAT;
	else
		want = 0;
	CHECK(r == want, "find returned %d, the model says %d", r, want);
	if (r) {
		CHECK(label == -7, "label changed on failure");
		return;
	}
	CHECK(img_len == m[0].len && memcmp(img, m[0].data, img_len) == 0,
	      "image bytes differ (%zu vs %zu)", img_len, m[0].len);
	if (m[1].kind == K_INT64 && m[1].nvals == 1)
		CHECK(label == m[1].first, "label %lld, expected %lld",
		      (long long)label, (long long)m[1].first);
	else
		CHECK(label == -7, "label set without a value");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1) {
		round_trip(data + 1, size - 1);
	} else {
		raw(data + 1, size - 1);
		skim(data + 1, size - 1, data[0] >> 1);
	}
	return 0;
}
