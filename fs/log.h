/*
 * log.h - the one levelled log of the batchfs program (fs/ and main only;
 * library code never prints).
 */
#ifndef BFS_LOG_H
#define BFS_LOG_H

#include <stddef.h>
#include <stdio.h>

enum { BFS_LOG_ERROR, BFS_LOG_WARN, BFS_LOG_INFO, BFS_LOG_DEBUG };

/* Send log lines to f (default stderr) and drop those above max_level.
 * Call before starting threads. */
void bfs_log_init(FILE *f, int max_level);

/* One line "batchfs[pid] LEVEL: message".  Thread-safe. */
void bfs_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Copy s into out (cap bytes, always terminated), escaping every byte that
 * is not printable ASCII as \xNN, so bytes that came from a shard can never
 * forge log lines or terminal escapes.  Returns out. */
char *bfs_log_escape(const char *s, char *out, size_t cap);

#endif
