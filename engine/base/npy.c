/*
 * npy.c - NumPy .npy header writer and parser (see npy.h).
 *
 * The writer mirrors numpy/lib/_format_impl.py (_write_array_header and
 * _wrap_header); the parser is a small recursive-descent reader for the one
 * Python dict literal an .npy header holds.
 */
#include "engine/base/npy.h"

#include "engine/base/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
#define NPY_GROWTH_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS */
/* Longest dict: fixed text ~60 + descr 7 + 8 dims * 22 + growth 21. */
#define NPY_DICT_MAX 320

static int descr_ok_for_write(const char *descr)
{
	size_t n;

	if (!descr)
		return 0;
	n = strlen(descr);
	if (n == 0 || n >= sizeof(((bfs_npy_info *)0)->descr))
		return 0;
	return strpbrk(descr, "'\\\n") == NULL;
}

/* Format the dict text (without padding or '\n') into d; returns length. */
static size_t format_dict(char d[NPY_DICT_MAX], const char *descr,
			  const uint64_t *shape, int ndim)
{
	size_t n = 0;
	char first[24];
	int i, w;

	n += (size_t)snprintf(d + n, NPY_DICT_MAX - n,
			      "{'descr': '%s', 'fortran_order': False, 'shape': (",
			      descr);
	for (i = 0; i < ndim; i++)
		n += (size_t)snprintf(d + n, NPY_DICT_MAX - n, "%s%llu",
				      i ? ", " : "",
				      (unsigned long long)shape[i]);
	n += (size_t)snprintf(d + n, NPY_DICT_MAX - n, "%s), }",
			      ndim == 1 ? "," : "");
	if (ndim > 0) {
		/* numpy leaves room for the first axis to grow in place. */
		w = snprintf(first, sizeof(first), "%llu",
			     (unsigned long long)shape[0]);
		for (i = w; i < NPY_GROWTH_DIGITS; i++)
			d[n++] = ' ';
	}
	return n;
}

/* Total header length for a dict of dict_len bytes (numpy's _wrap_header:
 * note that an already aligned length still gets a full 64 bytes of pad). */
static size_t wrapped_len(size_t dict_len)
{
	size_t hlen = dict_len + 1; /* + '\n' */
	size_t padlen = NPY_ALIGN - ((NPY_MAGIC_LEN + 4 + hlen) % NPY_ALIGN);

	return NPY_MAGIC_LEN + 4 + hlen + padlen;
}

size_t bfs_npy_header_len(const char *descr, const uint64_t *shape, int ndim)
{
	char d[NPY_DICT_MAX];

	if (!descr_ok_for_write(descr) || ndim < 0 || ndim > BFS_NPY_MAX_NDIM ||
	    (ndim > 0 && !shape))
		return 0;
	return wrapped_len(format_dict(d, descr, shape, ndim));
}

int bfs_npy_header(char *out, size_t cap, const char *descr,
		   const uint64_t *shape, int ndim)
{
	char d[NPY_DICT_MAX];
	size_t dlen, total, hl;

	if (!descr_ok_for_write(descr) || ndim < 0 || ndim > BFS_NPY_MAX_NDIM ||
	    (ndim > 0 && !shape))
		return -EINVAL;
	dlen = format_dict(d, descr, shape, ndim);
	total = wrapped_len(dlen);
	if (!out || cap < total)
		return -ENOSPC;
	hl = total - NPY_MAGIC_LEN - 4;
	memcpy(out, NPY_MAGIC, NPY_MAGIC_LEN);
	out[6] = 1;
	out[7] = 0;
	out[8] = (char)(hl & 0xff);
	out[9] = (char)(hl >> 8);
	memcpy(out + 10, d, dlen);
	memset(out + 10 + dlen, ' ', total - 10 - dlen - 1);
	out[total - 1] = '\n';
	return (int)total;
}

size_t bfs_npy_itemsize(const char *descr)
{
	const char *p = descr;
	size_t size = 0;
	char kind;

	if (!p || !strchr("<>|=", *p) || *p == '\0')
		return 0;
	kind = *++p;
	if (kind == '\0' || !strchr("biufcSUVmM?", kind))
		return 0;
	p++;
	if (*p < '0' || *p > '9')
		return 0;
	while (*p >= '0' && *p <= '9') {
		size = size * 10 + (size_t)(*p - '0');
		if (size > (1u << 20))
			return 0;
		p++;
	}
	if ((kind == 'm' || kind == 'M') && *p == '[') {
		p = strchr(p, ']');
		if (!p)
			return 0;
		p++;
	}
	if (*p != '\0' || size == 0)
		return 0;
	return kind == 'U' ? size * 4 : size;
}

/* ---- parser ------------------------------------------------------------ */

typedef struct {
	const char *p, *end, *start;
	char *errmsg;
	size_t base; /* file offset of start, for messages */
} cursor;

static int fail(cursor *c, const char *what)
{
	bfs_seterr(c->errmsg, "npy header: %s at byte %zu", what,
		   c->base + (size_t)(c->p - c->start));
	return BFS_E_FORMAT;
}

static void skip_ws(cursor *c)
{
	while (c->p < c->end &&
	       (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static int expect(cursor *c, char ch)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p != ch) {
		char what[32];

		snprintf(what, sizeof(what), "expected '%c'", ch);
		return fail(c, what);
	}
	c->p++;
	return 0;
}

/* A quoted string without escapes into out[cap]. */
static int parse_str(cursor *c, char *out, size_t cap)
{
	char q;
	size_t n = 0;

	skip_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return fail(c, "expected a string");
	q = *c->p++;
	while (c->p < c->end && *c->p != q) {
		if (*c->p == '\\' || *c->p == '\n')
			return fail(c, "unsupported character in string");
		if (n + 1 >= cap)
			return fail(c, "string too long");
		out[n++] = *c->p++;
	}
	if (c->p >= c->end)
		return fail(c, "unterminated string");
	c->p++;
	out[n] = '\0';
	return 0;
}

static int parse_bool(cursor *c, int *v)
{
	skip_ws(c);
	if (c->end - c->p >= 4 && memcmp(c->p, "True", 4) == 0) {
		c->p += 4;
		*v = 1;
	} else if (c->end - c->p >= 5 && memcmp(c->p, "False", 5) == 0) {
		c->p += 5;
		*v = 0;
	} else {
		return fail(c, "expected True or False");
	}
	return 0;
}

static int parse_uint(cursor *c, uint64_t *v)
{
	uint64_t x = 0;
	const char *s;

	skip_ws(c);
	s = c->p;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		unsigned d = (unsigned)(*c->p - '0');

		if (x > (UINT64_MAX - d) / 10)
			return fail(c, "dimension too large");
		x = x * 10 + d;
		c->p++;
	}
	if (c->p == s)
		return fail(c, "expected a dimension");
	if (c->p < c->end && *c->p == 'L') /* Python 2 long suffix */
		c->p++;
	*v = x;
	return 0;
}

static int parse_shape(cursor *c, uint64_t shape[8], int *ndim)
{
	int n = 0, r, comma = 0;

	/* A repeated 'shape' key (Python: the last one wins) must not leave
	 * dimensions of an earlier, longer tuple behind. */
	memset(shape, 0, BFS_NPY_MAX_NDIM * sizeof(shape[0]));
	*ndim = 0;
	if ((r = expect(c, '(')))
		return r;
	for (;;) {
		skip_ws(c);
		if (c->p < c->end && *c->p == ')')
			break;
		if (n == BFS_NPY_MAX_NDIM)
			return fail(c, "more than 8 dimensions");
		if ((r = parse_uint(c, &shape[n++])))
			return r;
		skip_ws(c);
		if (c->p < c->end && *c->p == ',') {
			c->p++;
			comma = 1;
			continue;
		}
		comma = 0;
		skip_ws(c);
		if (c->p >= c->end || *c->p != ')')
			return fail(c, "expected ',' or ')' in shape");
		break;
	}
	c->p++; /* ')' */
	if (n == 1 && !comma)
		return fail(c, "1-D shape without trailing comma is not a tuple");
	*ndim = n;
	return 0;
}

int bfs_npy_parse(const void *buf, size_t len, bfs_npy_info *info,
		  char *errmsg)
{
	const unsigned char *b = buf;
	size_t pre, hl, itemsize, i;
	uint64_t count = 1;
	char key[32];
	unsigned seen = 0;
	cursor c;
	int r;

	memset(info, 0, sizeof(*info));
	if (!b || len < 10) {
		bfs_seterr(errmsg, "npy: %zu bytes is too short for a header", len);
		return BFS_E_FORMAT;
	}
	if (memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
		bfs_seterr(errmsg, "npy: bad magic (not a .npy file)");
		return BFS_E_FORMAT;
	}
	if (b[6] == 1 && b[7] == 0) {
		pre = 10;
		hl = (size_t)b[8] | (size_t)b[9] << 8;
	} else if ((b[6] == 2 || b[6] == 3) && b[7] == 0) {
		pre = 12;
		if (len < pre) {
			bfs_seterr(errmsg, "npy: %zu bytes is too short for a v%d header",
				   len, b[6]);
			return BFS_E_FORMAT;
		}
		hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
		     (size_t)b[11] << 24;
	} else {
		bfs_seterr(errmsg, "npy: unsupported version %d.%d", b[6], b[7]);
		return BFS_E_FORMAT;
	}
	if (hl > len - pre) {
		bfs_seterr(errmsg,
			   "npy: header of %zu bytes is truncated (%zu available)",
			   pre + hl, len);
		return BFS_E_FORMAT;
	}

	c.start = c.p = (const char *)b + pre;
	c.end = c.p + hl;
	c.errmsg = errmsg;
	c.base = pre;
	if ((r = expect(&c, '{')))
		return r;
	for (;;) {
		skip_ws(&c);
		if (c.p < c.end && *c.p == '}')
			break;
		if ((r = parse_str(&c, key, sizeof(key))))
			return r;
		if ((r = expect(&c, ':')))
			return r;
		if (strcmp(key, "descr") == 0) {
			skip_ws(&c);
			if (c.p < c.end && *c.p == '[')
				return fail(&c, "structured dtypes are not supported");
			if ((r = parse_str(&c, info->descr, sizeof(info->descr))))
				return r;
			seen |= 1;
		} else if (strcmp(key, "fortran_order") == 0) {
			if ((r = parse_bool(&c, &info->fortran_order)))
				return r;
			seen |= 2;
		} else if (strcmp(key, "shape") == 0) {
			if ((r = parse_shape(&c, info->shape, &info->ndim)))
				return r;
			seen |= 4;
		} else {
			return fail(&c, "unexpected key");
		}
		skip_ws(&c);
		if (c.p < c.end && *c.p == ',') {
			c.p++;
			continue;
		}
		skip_ws(&c);
		if (c.p >= c.end || *c.p != '}')
			return fail(&c, "expected ',' or '}'");
		break;
	}
	c.p++; /* '}' */
	skip_ws(&c);
	if (c.p != c.end)
		return fail(&c, "trailing bytes after the dict");
	if (seen != 7) {
		bfs_seterr(errmsg, "npy header: missing key '%s'",
			   !(seen & 1) ? "descr" :
			   !(seen & 2) ? "fortran_order" : "shape");
		return BFS_E_FORMAT;
	}
	itemsize = bfs_npy_itemsize(info->descr);
	if (!itemsize) {
		bfs_seterr(errmsg, "npy header: unsupported dtype '%s'",
			   info->descr);
		return BFS_E_FORMAT;
	}
	for (i = 0; i < (size_t)info->ndim; i++)
		if (info->shape[i] == 0)
			count = 0;
	for (i = 0; count && i < (size_t)info->ndim; i++) {
		if (count > UINT64_MAX / info->shape[i]) {
			count = UINT64_MAX;
			break;
		}
		count *= info->shape[i];
	}
	if (count > (uint64_t)(SIZE_MAX - pre - hl) / itemsize) {
		bfs_seterr(errmsg, "npy header: array size overflows");
		return BFS_E_FORMAT;
	}
	info->header_len = pre + hl;
	info->data_len = (size_t)count * itemsize;
	return 0;
}
