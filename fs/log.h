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

/* Send log lines to syslog(3) instead (facility daemon, ident batchfs,
 * with the pid), for a daemon whose log file cannot be opened.  0, or -1
 * (nothing changed) when nothing listens on /dev/log.  Call before
 * starting threads. */
int bfs_log_init_syslog(int max_level);

/* 1 when the log file stopped taking lines (a write failed: its file
 * system is full, say), with the reason in why (n bytes; may be NULL);
 * from then on lines go to syslog when something listens there, else
 * nowhere.  0 while the file takes them.  Any thread. */
int bfs_log_failed(char *why, size_t n);

/* One line "batchfs[pid] LEVEL: message" (syslog adds its own stamp and
 * pid).  Thread-safe. */
void bfs_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Copy s into out (cap bytes, always terminated) so that bytes that came
 * from a shard can never forge log lines or terminal escapes, while names
 * stay readable: printable ASCII and valid UTF-8 (fs/utf8.h) are copied,
 * "猫/x.jpg" stays "猫/x.jpg"; every other byte becomes \xNN: control
 * characters, DEL, '\\' (so that \x always means an escape), each byte of
 * a C1 control (U+0080..U+009F), of U+2028/U+2029 and of a bidi control
 * (U+061C, U+200E/F, U+202A..U+202E, U+2066..U+2069), and each byte that is
 * not part of valid UTF-8.  A character or escape that does not fit is left
 * out whole, with everything after it.  Returns out.  Any thread. */
char *bfs_log_escape(const char *s, char *out, size_t cap);

#endif
