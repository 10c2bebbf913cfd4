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
