/*
 * jsonread.c - a small strict JSON reader (see jsonread.h): a recursive
 * descent over the text, building the tree as it goes.
 */
#include "fs/jsonread.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEPTH 64

typedef struct {
	const char *s;
	size_t len, pos;
	char *err;
	size_t cap;
	int oom;
} parser;

static int fail(parser *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(parser *p, const char *fmt, ...)
{
	int n;
	va_list ap;

	if (p->err && p->cap) {
		n = snprintf(p->err, p->cap, "offset %zu: ", p->pos);
		if (n >= 0 && (size_t)n < p->cap) {
			va_start(ap, fmt);
			vsnprintf(p->err + n, p->cap - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return -EINVAL;
}

static void skip_ws(parser *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
				   p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int literal(parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
		return fail(p, "unexpected '%c'", p->s[p->pos]);
	p->pos += n;
	return 0;
}

static int number(parser *p, bfs_jr *v)
{
	size_t start = p->pos, n;
	char buf[64], *end;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len)
		return fail(p, "a number ends too soon");
	if (p->s[p->pos] == '0') {
		p->pos++;
	} else if (p->s[p->pos] >= '1' && p->s[p->pos] <= '9') {
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	} else {
		return fail(p, "bad number");
	}
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return fail(p, "a digit must follow '.'");
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return fail(p, "a digit must follow the exponent");
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	n = p->pos - start;
	if (n >= sizeof(buf))
		return fail(p, "number too long");
	memcpy(buf, p->s + start, n);
	buf[n] = '\0';
	v->type = BFS_JR_NUMBER;
	v->number = strtod(buf, &end);
	return 0;
}

static int hex4(parser *p, unsigned *out)
{
	unsigned v = 0;

	if (p->len - p->pos < 4)
		return fail(p, "\\u needs four hex digits");
	for (int i = 0; i < 4; i++) {
		char c = p->s[p->pos + i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return fail(p, "\\u needs four hex digits");
	}
	p->pos += 4;
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string at p->pos (at its '"'): decoded into a malloc'd *out. */
static int string(parser *p, char **out, size_t *out_len)
{
	size_t start, end, o = 0;
	char *buf;

	p->pos++; /* the opening quote */
	start = p->pos;
	/* find the end first: the decoded text is never longer */
	for (end = start; end < p->len && p->s[end] != '"'; end++) {
		if ((unsigned char)p->s[end] < 0x20) {
			p->pos = end;
			return fail(p, "a control character inside a string");
		}
		if (p->s[end] == '\\')
			end++;
	}
	if (end >= p->len)
		return fail(p, "a string is not closed");
	if (!(buf = malloc(end - start + 1))) {
		p->oom = 1;
		return -ENOMEM;
	}
	while (p->pos < end) {
		char c = p->s[p->pos++];
		unsigned u, lo;

		if (c != '\\') {
			buf[o++] = c;
			continue;
		}
		c = p->s[p->pos++];
		switch (c) {
		case '"': case '\\': case '/':
			buf[o++] = c;
			break;
		case 'b': buf[o++] = '\b'; break;
		case 'f': buf[o++] = '\f'; break;
		case 'n': buf[o++] = '\n'; break;
		case 'r': buf[o++] = '\r'; break;
		case 't': buf[o++] = '\t'; break;
		case 'u':
			if (hex4(p, &u)) {
				free(buf);
				return -EINVAL;
			}
			if (u >= 0xd800 && u < 0xdc00 && end - p->pos >= 6 &&
			    p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
				size_t save = p->pos;

				p->pos += 2;
				if (hex4(p, &lo)) {
					free(buf);
					return -EINVAL;
				}
				if (lo >= 0xdc00 && lo < 0xe000) {
					o += put_utf8(buf + o, 0x10000 + ((u - 0xd800) << 10) +
							       (lo - 0xdc00));
					break;
				}
				p->pos = save; /* a lone high surrogate */
			}
			if (u >= 0xdc80 && u <= 0xdcff)
				buf[o++] = (char)(u - 0xdc00); /* surrogateescape */
			else if (u >= 0xd800 && u < 0xe000)
				o += put_utf8(buf + o, 0xfffd);
			else
				o += put_utf8(buf + o, u);
			break;
		default:
			p->pos--;
			free(buf);
			return fail(p, "bad escape '\\%c'", c);
		}
	}
	p->pos = end + 1;
	buf[o] = '\0';
	*out = buf;
	*out_len = o;
	return 0;
}

static void free_value(bfs_jr *v)
{
	for (size_t i = 0; i < v->n; i++)
		free_value(&v->items[i]);
	free(v->items);
	free(v->str);
	free(v->key);
}

static int value(parser *p, bfs_jr *v, int depth);

/* The elements of an array or the members of an object (at '[' or '{'). */
static int items(parser *p, bfs_jr *v, int depth, char close)
{
	size_t cap = 0;
	int err;

	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		return 0;
	}
	for (;;) {
		bfs_jr *it;
		char *key = NULL;
		size_t klen;

		skip_ws(p);
		if (close == '}') {
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return fail(p, "expected a member name");
			if ((err = string(p, &key, &klen)))
				return err;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':') {
				free(key);
				return fail(p, "expected ':'");
			}
			p->pos++;
		}
		if (v->n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			bfs_jr *ni = realloc(v->items, ncap * sizeof(*ni));

			if (!ni) {
				free(key);
				p->oom = 1;
				return -ENOMEM;
			}
			v->items = ni;
			cap = ncap;
		}
		it = &v->items[v->n++];
		memset(it, 0, sizeof(*it));
		it->key = key;
		if ((err = value(p, it, depth + 1)))
			return err;
		skip_ws(p);
		if (p->pos < p->len && p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->pos < p->len && p->s[p->pos] == close) {
			p->pos++;
			return 0;
		}
		return fail(p, "expected ',' or '%c'", close);
	}
}

static int value(parser *p, bfs_jr *v, int depth)
{
	skip_ws(p);
	if (depth > MAX_DEPTH)
		return fail(p, "nested deeper than %d", MAX_DEPTH);
	if (p->pos >= p->len)
		return fail(p, "a value is missing");
	switch (p->s[p->pos]) {
	case '{':
		v->type = BFS_JR_OBJECT;
		return items(p, v, depth, '}');
	case '[':
		v->type = BFS_JR_ARRAY;
		return items(p, v, depth, ']');
	case '"':
		v->type = BFS_JR_STRING;
		return string(p, &v->str, &v->len);
	case 't':
		v->type = BFS_JR_BOOL;
		v->boolean = 1;
		return literal(p, "true");
	case 'f':
		v->type = BFS_JR_BOOL;
		return literal(p, "false");
	case 'n':
		v->type = BFS_JR_NULL;
		return literal(p, "null");
	default:
		return number(p, v);
	}
}

int bfs_jr_parse(const char *text, size_t len, bfs_jr **out, char *err,
		 size_t cap)
{
	parser p = { .s = text, .len = len, .err = err, .cap = cap };
	bfs_jr *v = calloc(1, sizeof(*v));
	int rc;

	*out = NULL;
	if (err && cap)
		err[0] = '\0';
	if (!v)
		return -ENOMEM;
	rc = value(&p, v, 0);
	if (!rc) {
		skip_ws(&p);
		if (p.pos != p.len)
			rc = fail(&p, "text after the value");
	}
	if (rc) {
		if (p.oom && err && cap)
			snprintf(err, cap, "out of memory");
		bfs_jr_free(v);
		return p.oom ? -ENOMEM : rc;
	}
	*out = v;
	return 0;
}

void bfs_jr_free(bfs_jr *v)
{
	if (!v)
		return;
	free_value(v);
	free(v);
}

const bfs_jr *bfs_jr_get(const bfs_jr *v, const char *key)
{
	if (!v || v->type != BFS_JR_OBJECT)
		return NULL;
	for (size_t i = v->n; i-- > 0;)
		if (!strcmp(v->items[i].key, key))
			return &v->items[i];
	return NULL;
}

const bfs_jr *bfs_jr_at(const bfs_jr *v, size_t i)
{
	if (!v || v->type != BFS_JR_ARRAY || i >= v->n)
		return NULL;
	return &v->items[i];
}

double bfs_jr_num(const bfs_jr *v, double dflt)
{
	return v && v->type == BFS_JR_NUMBER ? v->number : dflt;
}

const char *bfs_jr_str(const bfs_jr *v, const char *dflt)
{
	return v && v->type == BFS_JR_STRING ? v->str : dflt;
}

int bfs_jr_bool(const bfs_jr *v, int dflt)
{
	return v && v->type == BFS_JR_BOOL ? v->boolean : dflt;
}

int bfs_jr_read_file(const char *dir, const char *name, bfs_jr **out,
		     char *why, size_t cap)
{
	char path[PATH_MAX], err[256];
	char *buf = NULL;
	size_t len = 0, bcap = 0;
	int fd, rc = 0;

	*out = NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		rc = -errno;
		snprintf(why, cap, "%s: %s", path, strerror(errno));
		return rc;
	}
	for (;;) {
		ssize_t n;

		if (len + 4096 > bcap) {
			char *nb = realloc(buf, bcap = bcap ? bcap * 2 : 65536);

			if (!nb) {
				rc = -ENOMEM;
				snprintf(why, cap, "out of memory");
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, bcap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(why, cap, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if ((rc = bfs_jr_parse(buf, len, out, err, sizeof(err))))
		snprintf(why, cap, "%s: not batchfs's JSON (%s)", path, err);
out:
	close(fd);
	free(buf);
	return rc;
}
