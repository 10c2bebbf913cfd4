/*
 * label.c - --label-offset, with the overflow check, and labels read from
 * the text of WebDataset members: decimals and JSON objects (see label.h).
 */
#include "engine/formats/label.h"

#include <errno.h>
#include <string.h>

#include "engine/base/error.h"

int bfs_label_add_offset(int64_t *label, int64_t offset, char *errmsg)
{
	int64_t sum;

	if (__builtin_add_overflow(*label, offset, &sum)) {
		bfs_seterr(errmsg, "label %lld + --label-offset %lld overflows "
			   "int64", (long long)*label, (long long)offset);
		return -ERANGE;
	}
	*label = sum;
	return 0;
}

/* ---- labels in WebDataset members ------------------------------------- */

static int is_space(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

int bfs_label_parse_decimal(const uint8_t *p, size_t n, int64_t *out)
{
	size_t i = 0;
	int neg = 0, digits = 0;
	uint64_t v = 0, lim;

	while (i < n && is_space(p[i]))
		i++;
	if (i < n && (p[i] == '+' || p[i] == '-'))
		neg = p[i++] == '-';
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
		uint64_t d = (uint64_t)(p[i] - '0');

		if (v > (lim - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	while (i < n && is_space(p[i]))
		i++;
	if (!digits || i != n)
		return -1;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

/* A JSON text being read: p[0..n), at i. */
typedef struct {
	const uint8_t *p;
	size_t n, i;
	const char *key;   /* the member wanted at the top level */
	size_t key_len;
	int found;         /* 0 none yet, 1 an integer, -1 not an integer */
	int64_t value;
} jreader;

static void jws(jreader *j)
{
	while (j->i < j->n && (j->p[j->i] == ' ' || j->p[j->i] == '\t' ||
			       j->p[j->i] == '\n' || j->p[j->i] == '\r'))
		j->i++;
}

static int jhex(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Compare one decoded byte of a key with the wanted key (*pos so far). */
static void jkey_byte(jreader *j, uint8_t b, size_t *pos, int *match)
{
	if (*match && *pos < j->key_len && (uint8_t)j->key[*pos] == b)
		(*pos)++;
	else
		*match = 0;
}

/* A string at j->i (its opening quote).  With match != NULL, whether its
 * decoded bytes equal j->key.  0, or -1 when it is malformed. */
static int jstring(jreader *j, int *match)
{
	size_t pos = 0;
	int m = 1;

	if (j->i >= j->n || j->p[j->i] != '"')
		return -1;
	j->i++;
	while (j->i < j->n) {
		uint8_t c = j->p[j->i++];

		if (c == '"') {
			if (match)
				*match = m && pos == j->key_len;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c != '\\') {
			if (match)
				jkey_byte(j, c, &pos, &m);
			continue;
		}
		if (j->i >= j->n)
			return -1;
		c = j->p[j->i++];
		if (c == 'u') {
			uint32_t cp = 0;

			for (int k = 0; k < 4; k++) {
				int h = j->i < j->n ? jhex(j->p[j->i++]) : -1;

				if (h < 0)
					return -1;
				cp = cp << 4 | (uint32_t)h;
			}
			if (cp >= 0xD800 && cp <= 0xDBFF && j->i + 6 <= j->n &&
			    j->p[j->i] == '\\' && j->p[j->i + 1] == 'u') {
				uint32_t lo = 0;
				int ok = 1;

				for (int k = 0; k < 4; k++) {
					int h = jhex(j->p[j->i + 2 + k]);

					if (h < 0)
						ok = 0;
					lo = lo << 4 | (uint32_t)(h < 0 ? 0 : h);
				}
				if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
					cp = 0x10000 + ((cp - 0xD800) << 10) +
					     (lo - 0xDC00);
					j->i += 6;
				}
			}
			if (match) { /* as UTF-8 (a lone surrogate too) */
				uint8_t u[4];
				int len;

				if (cp < 0x80) {
					u[0] = (uint8_t)cp;
					len = 1;
				} else if (cp < 0x800) {
					u[0] = (uint8_t)(0xC0 | cp >> 6);
					u[1] = (uint8_t)(0x80 | (cp & 0x3F));
					len = 2;
				} else if (cp < 0x10000) {
					u[0] = (uint8_t)(0xE0 | cp >> 12);
					u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
					u[2] = (uint8_t)(0x80 | (cp & 0x3F));
					len = 3;
				} else {
					u[0] = (uint8_t)(0xF0 | cp >> 18);
					u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
					u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
					u[3] = (uint8_t)(0x80 | (cp & 0x3F));
					len = 4;
				}
				for (int k = 0; k < len; k++)
					jkey_byte(j, u[k], &pos, &m);
			}
			continue;
		}
		switch (c) {
		case '"': case '\\': case '/':
			break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		default:
			return -1;
		}
		if (match)
			jkey_byte(j, c, &pos, &m);
	}
	return -1;
}

/* A number at j->i.  *is_int: no fraction or exponent, and within int64
 * (then *v holds it).  0, or -1 when it is malformed. */
static int jnumber(jreader *j, int *is_int, int64_t *v)
{
	int neg = 0, over = 0;
	uint64_t acc = 0, lim;
	size_t start;

	*is_int = 1;
	if (j->i < j->n && j->p[j->i] == '-') {
		neg = 1;
		j->i++;
	}
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	start = j->i;
	if (j->i >= j->n || j->p[j->i] < '0' || j->p[j->i] > '9')
		return -1;
	if (j->p[j->i] == '0') {
		j->i++;
	} else {
		while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9') {
			uint64_t d = (uint64_t)(j->p[j->i++] - '0');

			if (acc > (lim - d) / 10)
				over = 1;
			else
				acc = acc * 10 + d;
		}
	}
	(void)start;
	if (j->i < j->n && j->p[j->i] == '.') {
		*is_int = 0;
		j->i++;
		if (j->i >= j->n || j->p[j->i] < '0' || j->p[j->i] > '9')
			return -1;
		while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9')
			j->i++;
	}
	if (j->i < j->n && (j->p[j->i] == 'e' || j->p[j->i] == 'E')) {
		*is_int = 0;
		j->i++;
		if (j->i < j->n && (j->p[j->i] == '+' || j->p[j->i] == '-'))
			j->i++;
		if (j->i >= j->n || j->p[j->i] < '0' || j->p[j->i] > '9')
			return -1;
		while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9')
			j->i++;
	}
	if (over)
		*is_int = 0;
	if (*is_int)
		*v = neg ? (int64_t)(0 - acc) : (int64_t)acc;
	return 0;
}

static int jliteral(jreader *j, const char *lit)
{
	size_t len = strlen(lit);

	if (j->n - j->i < len || memcmp(j->p + j->i, lit, len))
		return -1;
	j->i += len;
	return 0;
}

/* A value at j->i (after whitespace).  top: the top-level object, whose
 * member j->key is looked for.  wanted: this value is that member's. */
static int jvalue(jreader *j, int depth, int top, int wanted)
{
	int is_int = 0;
	int64_t v = 0;

	jws(j);
	if (j->i >= j->n)
		return -1;
	if (depth > BFS_LABEL_JSON_DEPTH)
		return -1;
	switch (j->p[j->i]) {
	case '{':
		j->i++;
		jws(j);
		if (j->i < j->n && j->p[j->i] == '}') {
			j->i++;
			break;
		}
		for (;;) {
			int match = 0;

			jws(j);
			if (jstring(j, top ? &match : NULL))
				return -1;
			jws(j);
			if (j->i >= j->n || j->p[j->i++] != ':')
				return -1;
			if (jvalue(j, depth + 1, 0, top && match))
				return -1;
			jws(j);
			if (j->i < j->n && j->p[j->i] == ',') {
				j->i++;
				continue;
			}
			if (j->i < j->n && j->p[j->i] == '}') {
				j->i++;
				break;
			}
			return -1;
		}
		if (wanted)
			j->found = -1;
		return 0;
	case '[':
		j->i++;
		jws(j);
		if (j->i < j->n && j->p[j->i] == ']') {
			j->i++;
			break;
		}
		for (;;) {
			if (jvalue(j, depth + 1, 0, 0))
				return -1;
			jws(j);
			if (j->i < j->n && j->p[j->i] == ',') {
				j->i++;
				continue;
			}
			if (j->i < j->n && j->p[j->i] == ']') {
				j->i++;
				break;
			}
			return -1;
		}
		break;
	case '"':
		if (jstring(j, NULL))
			return -1;
		break;
	case 't':
		if (jliteral(j, "true"))
			return -1;
		break;
	case 'f':
		if (jliteral(j, "false"))
			return -1;
		break;
	case 'n':
		if (jliteral(j, "null"))
			return -1;
		break;
	default:
		if (jnumber(j, &is_int, &v))
			return -1;
		if (wanted) {
			j->found = is_int ? 1 : -1;
			j->value = v;
		}
		return 0;
	}
	if (wanted)
		j->found = -1;
	return 0;
}

int bfs_label_json(const uint8_t *json, size_t n, const char *key,
		   int64_t *label, char *errmsg)
{
	jreader j = { .p = json, .n = n };

	if ((!json && n) || !key || !label)
		return -EINVAL;
	j.key = key;
	j.key_len = strlen(key);
	jws(&j);
	if (j.i >= j.n || j.p[j.i] != '{') {
		bfs_seterr(errmsg, "is not a JSON object");
		return BFS_E_CORRUPT;
	}
	if (jvalue(&j, 1, 1, 0)) {
		bfs_seterr(errmsg, "is not JSON (byte %zu)", j.i);
		return BFS_E_CORRUPT;
	}
	jws(&j);
	if (j.i != j.n) {
		bfs_seterr(errmsg, "is not JSON (more after the object, byte %zu)",
			   j.i);
		return BFS_E_CORRUPT;
	}
	if (j.found == 0) {
		bfs_seterr(errmsg, "has no member \"%.200s\"", key);
		return BFS_E_NOKEY;
	}
	if (j.found < 0) {
		bfs_seterr(errmsg, "member \"%.200s\" is not an integer", key);
		return BFS_E_CORRUPT;
	}
	*label = j.value;
	return 0;
}
