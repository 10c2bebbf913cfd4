/*
 * log.c - levelled, line-at-a-time logging (see log.h).
 */
#include "fs/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

static FILE *log_file;
static int log_max = BFS_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void bfs_log_init(FILE *f, int max_level)
{
	log_file = f;
	log_max = max_level;
}

void bfs_log(int level, const char *fmt, ...)
{
	static const char *names[] = { "error", "warning", "info", "debug" };
	FILE *f = log_file ? log_file : stderr;
	char stamp[32];
	struct tm tm;
	time_t t;
	va_list ap;

	if (level > log_max)
		return;
	t = time(NULL);
	localtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	pthread_mutex_lock(&log_lock);
	fprintf(f, "%s batchfs[%d] %s: ", stamp, (int)getpid(), names[level]);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fflush(f);
	pthread_mutex_unlock(&log_lock);
}

char *bfs_log_escape(const char *s, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (!cap)
		return out;
	for (; *s && o + 1 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c < 0x7f && c != '\\') {
			out[o++] = (char)c;
		} else if (o + 4 < cap) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		} else {
			break;
		}
	}
	out[o] = '\0';
	return out;
}
