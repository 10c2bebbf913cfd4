/*
 * example.h - tf.train.Example protobufs, decoded and encoded by hand (no
 * protobuf library): find the image bytes and the label of one record, and
 * build records for mkshards and the tests.
 *
 * The message shapes (tensorflow/core/example/{example,feature}.proto):
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }
 *   Feature  { oneof kind { BytesList bytes_list = 1;
 *                           FloatList float_list = 2;
 *                           Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }
 *   FloatList { repeated float value = 1 [packed = true]; }
 *   Int64List { repeated int64 value = 1 [packed = true]; }
 */
#ifndef BFS_EXAMPLE_H
#define BFS_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Find the bytes value of feature `image_key` and the int64 of feature
 * `label_key` in the serialized Example buf[0..len).  Each must hold
 * exactly one value, as TensorFlow's parsing with FixedLenFeature([],
 * tf.string) / FixedLenFeature([], tf.int64) requires ("Number of int64
 * values != expected.  Values size: 2 but output shape: []"): a list of two
 * or more is refused, never read as its first value.
 *
 * The whole message is walked and fully bounds-checked, so any bytes are
 * safe input.  Unknown fields of wire type varint, fixed64,
 * length-delimited and fixed32 are skipped; groups (wire types 3/4) are
 * refused as corrupt.  Protobuf merge rules apply: when a key appears in
 * several map entries the last one wins; a Feature's last-set kind wins.
 * Int64 values may be packed or unpacked.  The values of features other
 * than the two asked for are not examined.
 *
 * label_key may be NULL; *label is then never touched.  A label feature
 * that is absent or holds an empty Int64List is not an error here: *label
 * keeps whatever the caller put there (callers preset it, e.g. to -1, or
 * to a value that says "missing" and refuse it themselves).
 *
 * On success returns 0 and sets *image / *image_len (pointing into buf, so
 * valid as long as buf is; the value may be empty) and possibly *label.
 * On failure neither *image nor *label is touched.
 * Errors, each with errmsg (BFS_ERRMSG_MAX bytes, may be NULL):
 *   BFS_E_NOKEY   no feature image_key, or it holds no bytes value:
 *                 "no feature 'image/encoded'; keys present: 'a', 'b'";
 *   BFS_E_FORMAT  image_key is not a BytesList, or label_key holds a
 *                 BytesList or FloatList; or either holds two or more
 *                 values: "feature 'image/class/label' holds 2 int64
 *                 values, expected 1 (...)" (the count of the list that
 *                 wins the merge rules above, packed and unpacked values
 *                 alike);
 *   BFS_E_CORRUPT malformed protobuf, naming the byte offset.
 * Pure function: any thread.
 */
int bfs_example_find(const uint8_t *buf, size_t len, const char *image_key,
		     const char *label_key, const uint8_t **image,
		     size_t *image_len, int64_t *label, char *errmsg);

/*
 * Reads len bytes at byte off of the record into buf (off + len never
 * passes the record's end): 0 or a negative errno.
 */
typedef int (*bfs_example_read_fn)(void *ctx, size_t off, void *buf,
				   size_t len);

/*
 * Skim a serialized Example of `total` bytes for the map entries of the
 * features named in keys (a NULL-terminated list of keys of at most 255
 * bytes), reading only what that needs: head[0..head_len) is what the
 * caller already holds of the record's start; the rest is read through
 * read(ctx, ...) in windows of 4 KiB, and of every other entry only its
 * field tags, lengths and key are read, never its value (a JPEG is
 * skipped, not read).  The structure is checked as bfs_example_find
 * checks it, with the same messages.
 *
 * On success out[0..*out_len) is a serialized Example that holds exactly
 * the wanted entries, in their order, so bfs_example_find on it answers
 * for those keys as on the whole record (protobuf's last-entry-wins rule
 * included).  Errors (errmsg, BFS_ERRMSG_MAX bytes, may be NULL):
 * BFS_E_CORRUPT (malformed, naming the byte offset), BFS_E_TOOBIG (a
 * wanted entry is over 4 KiB or does not fit in cap), -EINVAL (cap < 6),
 * or read's error.  No allocation (4 KiB of stack).  Any thread.
 */
int bfs_example_skim(const uint8_t *head, size_t head_len, size_t total,
		     bfs_example_read_fn read, void *ctx,
		     const char *const *keys, uint8_t *out, size_t cap,
		     size_t *out_len, char *errmsg);

/*
 * Builder: accumulates features, then serializes one Example.  Features
 * come out in the order they were added.  One builder per thread; reuse it
 * across records with bfs_example_builder_reset().
 */
typedef struct bfs_example_builder bfs_example_builder;

/* Returns 0 and *out, or -ENOMEM.  Free with bfs_example_builder_destroy. */
int bfs_example_builder_create(bfs_example_builder **out);

/* Accepts NULL. */
void bfs_example_builder_destroy(bfs_example_builder *b);

/* Forget all features, keeping the memory for the next record. */
void bfs_example_builder_reset(bfs_example_builder *b);

/*
 * Add a feature named key (a NUL-terminated string).  The data are copied;
 * data may be NULL when len is 0.  Adding a key twice writes two map
 * entries (readers keep the last).  Each returns 0 or -ENOMEM.
 */
int bfs_example_builder_add_bytes(bfs_example_builder *b, const char *key,
				  const void *data, size_t len);
int bfs_example_builder_add_int64(bfs_example_builder *b, const char *key,
				  int64_t v);
int bfs_example_builder_add_float(bfs_example_builder *b, const char *key,
				  float v);
/* n values (n may be 0), packed as TensorFlow writes them, or unpacked
 * (one tag per value) when packed is 0. */
int bfs_example_builder_add_int64s(bfs_example_builder *b, const char *key,
				   const int64_t *v, size_t n, int packed);
/* A BytesList of n values (n may be 0): value i is data[i][0..len[i]);
 * data[i] may be NULL when len[i] is 0. */
int bfs_example_builder_add_bytes_list(bfs_example_builder *b,
				       const char *key,
				       const void *const *data,
				       const size_t *len, size_t n);

/*
 * Serialize the Example built so far.  *data points into the builder and
 * stays valid until the next add, reset or destroy on it.  Returns 0 or
 * -ENOMEM.  Calling it again without adding returns the same bytes.
 */
int bfs_example_builder_finish(bfs_example_builder *b, const uint8_t **data,
			       size_t *len);

#endif
