/*
 * json.h - a tiny append-only JSON writer for dataset.json and stats.json.
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
} bfs_json;

void bfs_json_init(bfs_json *j);
void bfs_json_free(bfs_json *j);

/* Containers.  key may be NULL inside arrays and at the top level. */
void bfs_json_open(bfs_json *j, const char *key, char bracket);
void bfs_json_close(bfs_json *j, char bracket);

void bfs_json_str(bfs_json *j, const char *key, const char *v);
void bfs_json_u64(bfs_json *j, const char *key, uint64_t v);
void bfs_json_i64(bfs_json *j, const char *key, int64_t v);
void bfs_json_f64(bfs_json *j, const char *key, double v);
void bfs_json_bool(bfs_json *j, const char *key, int v);
void bfs_json_null(bfs_json *j, const char *key);

/* Finish with a newline; returns 0 or -ENOMEM. */
int bfs_json_end(bfs_json *j);

/* Finish and hand the text over: on 0, *buf (free() it) and *len; on
 * -ENOMEM everything is freed.  j is empty afterwards either way. */
int bfs_json_take(bfs_json *j, char **buf, size_t *len);

#endif
