/*
 * log.c - levelled, line-at-a-time logging (see log.h).
 */
#include "fs/log.h"

#include "fs/utf8.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static FILE *log_file;
static int log_syslog;       /* lines go to syslog(3) instead */
static char log_failed[256]; /* why the file stopped taking lines; "" */
static int log_max = BFS_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void bfs_log_init(FILE *f, int max_level)
{
	log_failed[0] = '\0';
	log_file = f;
	log_syslog = 0;
	log_max = max_level;
}

/* Is there a syslog daemon to hear us: a socket at /dev/log that accepts
 * a datagram connection?  (Without one glibc drops every line.) */
static int syslog_listens(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "/dev/log" };
	struct stat st;
	int fd, ok;

	if (stat(a.sun_path, &st) != 0 || !S_ISSOCK(st.st_mode))
		return 0;
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return 0;
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

int bfs_log_init_syslog(int max_level)
{
	if (!syslog_listens())
		return -1;
	openlog("batchfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_file = NULL;
	log_syslog = 1;
	log_max = max_level;
	return 0;
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
	if (level < BFS_LOG_ERROR)
		level = BFS_LOG_ERROR; /* names[] and prio[] have no other */
	if (!fmt)
		return;
	if (log_syslog) {
		static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO,
					    LOG_DEBUG };

		va_start(ap, fmt);
		vsyslog(prio[level], fmt, ap);
		va_end(ap);
		return;
	}
	t = time(NULL);
	localtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	pthread_mutex_lock(&log_lock);
	fprintf(f, "%s batchfs[%d] %s: ", stamp, (int)getpid(), names[level]);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	if ((fflush(f) != 0 || ferror(f)) && f == log_file && !log_failed[0]) {
		/* The file takes no more lines (its file system is full, say):
		 * say so once, on syslog when something listens there. */
		int e = errno;

		snprintf(log_failed, sizeof(log_failed), "%s", strerror(e));
		clearerr(f);
		pthread_mutex_unlock(&log_lock);
		if (bfs_log_init_syslog(log_max) == 0)
			syslog(LOG_WARNING, "the log file takes no more lines (%s): "
			       "logging here from now on", log_failed);
		return;
	}
	pthread_mutex_unlock(&log_lock);
}

int bfs_log_failed(char *why, size_t n)
{
	int failed;

	pthread_mutex_lock(&log_lock);
	failed = log_failed[0] != '\0';
	if (failed && why && n)
		snprintf(why, n, "%s", log_failed);
	pthread_mutex_unlock(&log_lock);
	return failed;
}

/* Code points that are valid UTF-8 but still escaped: C1 controls (a
 * terminal may act on them, U+009B is CSI), and the line breaks and bidi
 * controls that would make a line read other than its bytes. */
static int hidden(uint32_t cp)
{
	return (cp >= 0x80 && cp < 0xa0) || cp == 0x061c || cp == 0x200e ||
	       cp == 0x200f || cp == 0x2028 || cp == 0x2029 ||
	       (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

char *bfs_log_escape(const char *str, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str), o = 0;

	if (!cap)
		return out;
	while (n) {
		uint32_t cp = 0;
		size_t k = bfs_utf8_next(s, n, &cp);

		if (k == 1 && cp >= 0x20 && cp < 0x7f && cp != '\\') {
			if (o + 1 >= cap)
				break;
			out[o++] = (char)cp;
		} else if (k > 1 && !hidden(cp)) {
			if (o + k >= cap)
				break; /* never half a character */
			memcpy(out + o, s, k);
			o += k;
		} else {
			/* a control, a backslash, a hidden code point (each
			 * of its bytes), or a byte that is not UTF-8 */
			if (k == 0)
				k = 1;
			if (o + 4 * k >= cap)
				break;
			for (size_t i = 0; i < k; i++) {
				out[o++] = '\\';
				out[o++] = 'x';
				out[o++] = hex[s[i] >> 4];
				out[o++] = hex[s[i] & 15];
			}
		}
		s += k;
		n -= k;
	}
	out[o] = '\0';
	return out;
}
