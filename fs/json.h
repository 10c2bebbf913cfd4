/*
 * json.h - a tiny append-only JSON writer for dataset.json, stats.json and
 * index.json.
 *
 * Strings (values and keys) are C strings of bytes, usually names from the
 * shard directory, which on Linux need not be UTF-8.  They are written so
 * that the output is always valid UTF-8 JSON (RFC 8259) and every name can
 * be had back exactly:
 *   - valid UTF-8 (see fs/utf8.h: shortest forms, no surrogates, at most
 *     U+10FFFF) goes out unchanged: "猫", "données.tfrecord";
 *   - '"' and '\' as \" and \\; control characters U+0001..U+001F,
 *     DEL and U+0080..U+009F, and U+2028/U+2029, as \uXXXX;
 *   - every byte that is not part of valid UTF-8 (a lone continuation
 *     byte, a cut sequence, an overlong form, a surrogate, a code point
 *     over U+10FFFF, F5..FF), each on its own, as \udcXX with XX its
 *     value: the lone low surrogate that Python's "surrogateescape" error
 *     handler makes of it.  So in Python
 *     os.fsencode(json.loads(text)["classes"][i]) gives the name's exact
 *     bytes; a parser that refuses lone surrogates (they are legal JSON
 *     syntax, but RFC 8259 leaves their meaning open) sees them only in a
 *     name that is not UTF-8.
 *
 * Threads: one bfs_json per thread; no global state.
 */
#ifndef BFS_JSON_H
#define BFS_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	char *buf;     /* NUL-terminated; owned, free with bfs_json_free() */
	size_t len, cap;
	int oom;       /* an allocation failed; buf is then unusable */
	int first;     /* no member written yet at this level */
	int depth;
	int compact;   /* set after init: all on one line (JSON lines) */
} bfs_json;

void bfs_json_init(bfs_json *j);
void bfs_json_free(bfs_json *j);

/* Containers.  key may be NULL inside arrays and at the top level. */
void bfs_json_open(bfs_json *j, const char *key, char bracket);
void bfs_json_close(bfs_json *j, char bracket);

/* A string member (escaped as above); v NULL writes null.  Allocation
 * failures are sticky: see oom and bfs_json_end(). */
void bfs_json_str(bfs_json *j, const char *key, const char *v);
void bfs_json_u64(bfs_json *j, const char *key, uint64_t v);
void bfs_json_i64(bfs_json *j, const char *key, int64_t v);
void bfs_json_f64(bfs_json *j, const char *key, double v);  /* %.6g */
/* v with exactly `decimals` digits after the point (a timestamp); NaN and
 * infinities as null. */
void bfs_json_fixed(bfs_json *j, const char *key, double v, int decimals);
void bfs_json_bool(bfs_json *j, const char *key, int v);
void bfs_json_null(bfs_json *j, const char *key);

/* Finish with a newline; returns 0 or -ENOMEM. */
int bfs_json_end(bfs_json *j);

/* Finish and hand the text over: on 0, *buf (free() it) and *len; on
 * -ENOMEM everything is freed.  j is empty afterwards either way. */
int bfs_json_take(bfs_json *j, char **buf, size_t *len);

#endif
