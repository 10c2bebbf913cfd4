/*
 * optparse.c - the command line's numbers read whole, with sign and
 * overflow checks (see optparse.h).
 */
#include "fs/optparse.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* strtoull of s in base, s starting with a digit; *end past the number. */
static int digits(const char *s, int base, uint64_t *v, const char **end)
{
	char *e;
	unsigned long long x;

	if (!s || !is_digit(s[0]))
		return -EINVAL; /* no sign, no space: strtoull would take both */
	errno = 0;
	x = strtoull(s, &e, base);
	if (e == s)
		return -EINVAL;
	if (errno == ERANGE)
		return -ERANGE;
	*v = x;
	*end = e;
	return 0;
}

int bfs_opt_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int err;

	if ((err = digits(s, 10, &v, &end)))
		return err;
	if (*end)
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int bfs_opt_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	uint64_t v;
	int err;

	if ((err = bfs_opt_u64(s, min, max, &v)))
		return err;
	*out = (unsigned)v;
	return 0;
}

int bfs_opt_seed(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int err;

	if ((err = digits(s, 0, &v, &end)))
		return err;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

int bfs_opt_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	int neg = s && s[0] == '-';
	const char *end;
	uint64_t mag;
	int64_t v;
	int err;

	if (s && (s[0] == '-' || s[0] == '+'))
		s++;
	if ((err = digits(s, 10, &mag, &end)))
		return err;
	if (*end)
		return -EINVAL;
	if (neg) {
		if (mag > (uint64_t)INT64_MAX + 1)
			return -ERANGE;
		v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
	} else {
		if (mag > (uint64_t)INT64_MAX)
			return -ERANGE;
		v = (int64_t)mag;
	}
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int bfs_opt_size(const char *s, uint64_t min, uint64_t *out)
{
	const char *end;
	uint64_t v, mul = 1;
	int err;

	if ((err = digits(s, 10, &v, &end)))
		return err;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	case 't': case 'T': mul = 1ull << 40; end++; break;
	}
	if (mul > 1 && *end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	if (v && mul > UINT64_MAX / v)
		return -ERANGE;
	if (v * mul < min)
		return -ERANGE;
	*out = v * mul;
	return 0;
}

int bfs_opt_hw(const char *s, int max_side, int *h, int *w)
{
	const char *end;
	uint64_t a, b;
	int err;

	if ((err = digits(s, 10, &a, &end)))
		return err;
	if (*end == 'x' || *end == 'X') {
		if ((err = digits(end + 1, 10, &b, &end)))
			return err;
	} else {
		b = a;
	}
	if (*end)
		return -EINVAL;
	if (a < 1 || b < 1 || a > (uint64_t)max_side || b > (uint64_t)max_side)
		return -ERANGE;
	*h = (int)a;
	*w = (int)b;
	return 0;
}

int bfs_opt_doubles(const char *s, double *v, int n)
{
	double tmp[16];

	if (!s || n < 1 || n > 16)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		char *end;

		/* strtod skips leading spaces: a number starts here or not at all */
		if (!(is_digit(*s) || *s == '-' || *s == '+' || *s == '.' ||
		      *s == 'n' || *s == 'N' || *s == 'i' || *s == 'I'))
			return -EINVAL;
		errno = 0;
		tmp[i] = strtod(s, &end);
		if (end == s)
			return -EINVAL;
		if (errno == ERANGE || !isfinite(tmp[i]))
			return -ERANGE;
		if (*end != (i + 1 < n ? ',' : '\0'))
			return -EINVAL;
		s = end + 1;
	}
	for (int i = 0; i < n; i++)
		v[i] = tmp[i];
	return 0;
}

/* The digits of s up to the first of stop (or its end), read by
 * bfs_opt_u64 within [min, max]; *next after them (and the stop). */
static int field(const char *s, const char *stop, uint64_t min, uint64_t max,
		 uint64_t *out, const char **next)
{
	size_t n = strcspn(s, stop);
	char buf[24];

	if (n == 0 || n >= sizeof(buf))
		return n ? -ERANGE : -EINVAL;
	memcpy(buf, s, n);
	buf[n] = '\0';
	*next = s + n;
	return bfs_opt_u64(buf, min, max, out);
}

int bfs_opt_resume(const char *s, bfs_layout_resume *out)
{
	bfs_layout_resume r = { .on = 1 };
	const char *p;
	uint64_t v;
	int err;

	if (!s)
		return -EINVAL;
	if ((err = field(s, ":", 0, 99999, &v, &p)))
		return err;
	if (*p != ':')
		return -EINVAL;
	r.epoch = (unsigned)v;
	p++;
	for (;;) {
		bfs_layout_run *u;

		if (r.nruns == BFS_LAYOUT_MAX_RUNS)
			return -ERANGE;
		u = &r.runs[r.nruns++];
		if ((err = field(p, "@", 0, UINT64_MAX, &u->consumed, &p)))
			return err;
		if (*p++ != '@')
			return -EINVAL;
		if ((err = field(p, "/+", 1, 1u << 20, &v, &p)))
			return err;
		u->world = (unsigned)v;
		if (*p == '/') {
			if ((err = field(p + 1, "+", 1, 1u << 20, &v, &p)))
				return err;
			u->node_ranks = (unsigned)v;
		}
		if (!*p)
			break;
		if (*p++ != '+')
			return -EINVAL;
	}
	*out = r;
	return 0;
}

int bfs_opt_resume_format(const bfs_layout_resume *r, char *buf, size_t cap)
{
	size_t n;
	int k;

	k = snprintf(buf, cap, "%u:", r->epoch);
	if (k < 0 || (size_t)k >= cap)
		return -ENOSPC;
	n = (size_t)k;
	for (unsigned i = 0; i < r->nruns; i++) {
		const bfs_layout_run *u = &r->runs[i];

		if (u->node_ranks)
			k = snprintf(buf + n, cap - n, "%s%llu@%u/%u", i ? "+" : "",
				     (unsigned long long)u->consumed, u->world, u->node_ranks);
		else
			k = snprintf(buf + n, cap - n, "%s%llu@%u", i ? "+" : "",
				     (unsigned long long)u->consumed, u->world);
		if (k < 0 || (size_t)k >= cap - n)
			return -ENOSPC;
		n += (size_t)k;
	}
	return (int)n;
}
