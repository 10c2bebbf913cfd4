/*
 * json.c - append-only JSON writer (see json.h).  Strings are escaped per
 * RFC 8259: valid UTF-8 goes out as it is (but for control characters and
 * U+2028/U+2029), and each byte that is not part of valid UTF-8 becomes
 * \udcXX, so the output is always valid UTF-8 JSON whatever a name holds.
 */
#include "fs/json.h"

#include "fs/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bfs_json_init(bfs_json *j)
{
	memset(j, 0, sizeof(*j));
	j->first = 1;
}

void bfs_json_free(bfs_json *j)
{
	free(j->buf);
	bfs_json_init(j);
}

static void put(bfs_json *j, const char *s, size_t n)
{
	if (j->oom)
		return;
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 1024;
		char *nb;

		while (j->len + n + 1 > cap)
			cap *= 2;
		if (!(nb = realloc(j->buf, cap))) {
			j->oom = 1;
			return;
		}
		j->buf = nb;
		j->cap = cap;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void putf(bfs_json *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void putf(bfs_json *j, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		put(j, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void indent(bfs_json *j)
{
	if (j->compact)
		return;
	put(j, "\n", 1);
	for (int i = 0; i < j->depth; i++)
		put(j, "  ", 2);
}

static void quoted(bfs_json *j, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str);

	put(j, "\"", 1);
	while (n) {
		uint32_t cp;
		size_t k = bfs_utf8_next(s, n, &cp);

		if (k == 0) {
			/* Not UTF-8: Python's surrogateescape code for the
			 * byte, which os.fsencode() turns back into it. */
			putf(j, "\\udc%02x", s[0]);
			k = 1;
		} else if (cp == '"' || cp == '\\') {
			char e[2] = { '\\', (char)cp };

			put(j, e, 2);
		} else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0) ||
			   cp == 0x2028 || cp == 0x2029) {
			/* C0 and C1 controls, DEL, and the two line breaks
			 * JavaScript source does not allow in a string. */
			putf(j, "\\u%04x", (unsigned)cp);
		} else {
			put(j, (const char *)s, k);
		}
		s += k;
		n -= k;
	}
	put(j, "\"", 1);
}

static void member(bfs_json *j, const char *key)
{
	if (j->depth > 0) {
		if (!j->first)
			put(j, j->compact ? ", " : ",", j->compact ? 2 : 1);
		indent(j);
	}
	j->first = 0;
	if (key) {
		quoted(j, key);
		put(j, ": ", 2);
	}
}

void bfs_json_open(bfs_json *j, const char *key, char bracket)
{
	member(j, key);
	put(j, &bracket, 1);
	j->depth++;
	j->first = 1;
}

void bfs_json_close(bfs_json *j, char bracket)
{
	j->depth--;
	if (!j->first)
		indent(j);
	put(j, &bracket, 1);
	j->first = 0;
}

void bfs_json_str(bfs_json *j, const char *key, const char *v)
{
	member(j, key);
	if (v)
		quoted(j, v);
	else
		put(j, "null", 4);
}

void bfs_json_u64(bfs_json *j, const char *key, uint64_t v)
{
	member(j, key);
	putf(j, "%" PRIu64, v);
}

void bfs_json_i64(bfs_json *j, const char *key, int64_t v)
{
	member(j, key);
	putf(j, "%" PRId64, v);
}

void bfs_json_f64(bfs_json *j, const char *key, double v)
{
	member(j, key);
	if (v != v || v > 1e300 || v < -1e300)
		put(j, "null", 4);
	else
		putf(j, "%.6g", v);
}

void bfs_json_fixed(bfs_json *j, const char *key, double v, int decimals)
{
	member(j, key);
	if (v != v || v > 1e300 || v < -1e300)
		put(j, "null", 4);
	else
		putf(j, "%.*f", decimals, v);
}

void bfs_json_bool(bfs_json *j, const char *key, int v)
{
	member(j, key);
	put(j, v ? "true" : "false", v ? 4 : 5);
}

void bfs_json_null(bfs_json *j, const char *key)
{
	member(j, key);
	put(j, "null", 4);
}

int bfs_json_end(bfs_json *j)
{
	put(j, "\n", 1);
	return j->oom ? -ENOMEM : 0;
}

int bfs_json_take(bfs_json *j, char **buf, size_t *len)
{
	if (bfs_json_end(j)) {
		bfs_json_free(j);
		return -ENOMEM;
	}
	*buf = j->buf;
	*len = j->len;
	bfs_json_init(j);
	return 0;
}
