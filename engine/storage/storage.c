/*
 * storage.c - the storage interface (see storage.h) over its two remote
 * kinds: an S3 prefix (s3.h) and a list of http(s) URLs in brace notation,
 * each read with ranged GETs under http.h's retry policy.
 */
#include "engine/storage/storage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/base/error.h"
#include "engine/storage/creds.h"
#include "engine/storage/s3.h"

#define MAX_URLS 1000000

enum { KIND_S3, KIND_HTTP };

struct bfs_storage {
	int kind;
	char *url;
	char *root;            /* bfs_storage_root */
	bfs_http *http;
	/* s3 */
	bfs_creds *creds;
	bfs_s3 *s3;
	char *bucket, *prefix; /* prefix "" or ending in '/' */
	/* http */
	char **urls;
	size_t nurls;
	size_t root_len;       /* names are urls[i] + root_len */
};

int bfs_storage_is_url(const char *s)
{
	return !strncmp(s, "s3://", 5) || !strncasecmp(s, "http://", 7) ||
	       !strncasecmp(s, "https://", 8);
}

/* ---- braces ------------------------------------------------------------ */

typedef struct {
	char **v;
	size_t n, max;
	int err;
} strv;

static void push(strv *sv, char *s)
{
	if (sv->err) {
		free(s);
		return;
	}
	if (sv->n == sv->max) {
		free(s);
		sv->err = -EINVAL;
		return;
	}
	sv->v[sv->n++] = s;
}

static void expand(const char *prefix, const char *rest, strv *sv)
{
	const char *open = strchr(rest, '{'), *close;
	char *alt, *tok, *save = NULL;
	size_t plen = strlen(prefix);

	if (sv->err)
		return;
	if (!open) {
		char *s = malloc(plen + strlen(rest) + 1);

		if (!s) {
			sv->err = -ENOMEM;
			return;
		}
		memcpy(s, prefix, plen);
		strcpy(s + plen, rest);
		push(sv, s);
		return;
	}
	close = strchr(open, '}');
	if (!close || close == open + 1 || memchr(open + 1, '{', (size_t)(close - open - 1))) {
		sv->err = -EINVAL;
		return;
	}
	alt = strndup(open + 1, (size_t)(close - open - 1));
	if (!alt) {
		sv->err = -ENOMEM;
		return;
	}
	{
		size_t head = (size_t)(open - rest);
		char *np = malloc(plen + head + 32 + strlen(alt) + 1);
		char *dots = strstr(alt, "..");

		if (!np) {
			free(alt);
			sv->err = -ENOMEM;
			return;
		}
		memcpy(np, prefix, plen);
		memcpy(np + plen, rest, head);
		if (dots && !strchr(alt, ',')) {
			char *end;
			unsigned long long a, b;
			int width = (int)(dots - alt);

			errno = 0;
			a = strtoull(alt, &end, 10);
			if (end != dots || alt[0] == '-' || alt[0] == '+')
				goto bad;
			b = strtoull(dots + 2, &end, 10);
			if (*end || errno || dots[2] == '-' || dots[2] == '+' ||
			    !dots[2] || b < a || b - a >= MAX_URLS)
				goto bad;
			for (unsigned long long i = a; i <= b && !sv->err; i++) {
				snprintf(np + plen + head, 32, "%0*llu", width, i);
				expand(np, close + 1, sv);
			}
		} else {
			for (tok = strtok_r(alt, ",", &save); tok && !sv->err;
			     tok = strtok_r(NULL, ",", &save)) {
				strcpy(np + plen + head, tok);
				expand(np, close + 1, sv);
			}
		}
		free(np);
		free(alt);
		return;
	bad:
		free(np);
		free(alt);
		sv->err = -EINVAL;
	}
}

int bfs_storage_expand_braces(const char *pattern, char ***out, size_t max_out)
{
	strv sv = { calloc(max_out ? max_out : 1, sizeof(char *)), 0, max_out, 0 };

	*out = NULL;
	if (!sv.v)
		return -ENOMEM;
	expand("", pattern, &sv);
	if (sv.err) {
		for (size_t i = 0; i < sv.n; i++)
			free(sv.v[i]);
		free(sv.v);
		return sv.err;
	}
	*out = sv.v;
	return (int)sv.n;
}

/* ---- open and close ---------------------------------------------------- */

static int open_s3(bfs_storage *st, const bfs_storage_opts *o, char *errmsg)
{
	const char *b = st->url + 5, *slash = strchr(b, '/');
	size_t bl = slash ? (size_t)(slash - b) : strlen(b);
	const char *p = slash ? slash + 1 : "";
	bfs_creds_opts co = { .anonymous = o->anonymous };
	bfs_s3_opts so = { .endpoint = o->endpoint, .region = o->region,
			   .addressing = o->addressing, .http = st->http };
	int err;

	if (!bl || memchr(b, '@', bl) || memchr(b, ':', bl)) {
		bfs_seterr(errmsg, "%s: not s3://BUCKET/PREFIX", st->url);
		return -EINVAL;
	}
	st->bucket = strndup(b, bl);
	st->prefix = malloc(strlen(p) + 2);
	if (!st->bucket || !st->prefix)
		return -ENOMEM;
	strcpy(st->prefix, p);
	if (*p && p[strlen(p) - 1] != '/')
		strcat(st->prefix, "/");
	if (asprintf(&st->root, "s3://%s/%s", st->bucket, st->prefix) < 0) {
		st->root = NULL;
		return -ENOMEM;
	}
	if ((err = bfs_creds_open(&co, &st->creds, errmsg)))
		return err;
	so.creds = st->creds;
	return bfs_s3_create(&so, &st->s3, errmsg);
}

static int open_http(bfs_storage *st, char *errmsg)
{
	const char *brace = strchr(st->url, '{'), *host, *cut;
	int n;

	host = strstr(st->url, "://") + 3;
	cut = strchr(host, '/');
	if (!cut || memchr(host, '@', (size_t)(cut - host))) {
		bfs_seterr(errmsg, "%s: not http(s)://HOST/PATH (and batchfs "
			   "takes no credentials from a URL)", st->url);
		return -EINVAL;
	}
	n = bfs_storage_expand_braces(st->url, &st->urls, MAX_URLS);
	if (n < 0) {
		if (n == -EINVAL)
			bfs_seterr(errmsg, "%s: a brace pattern must be {A..B} "
				   "(A <= B, zero-padded as written) or {x,y,...}, "
				   "with at most %d URLs", st->url, MAX_URLS);
		return n;
	}
	st->nurls = (size_t)n;
	/* Names are relative to the folder of the first brace (or of the
	 * one URL), so shards keep their file names. */
	{
		size_t end = brace ? (size_t)(brace - st->url) : strlen(st->url);

		while (end && st->url[end - 1] != '/')
			end--;
		st->root_len = end;
	}
	if (!(st->root = strndup(st->url, st->root_len)))
		return -ENOMEM;
	return 0;
}

int bfs_storage_open(const char *url, const bfs_storage_opts *o,
		     bfs_storage **out, char *errmsg)
{
	bfs_storage *st;
	bfs_http_opts ho;
	int err;

	*out = NULL;
	if (!bfs_storage_is_url(url)) {
		bfs_seterr(errmsg, "%s: not an s3://, http:// or https:// URL", url);
		return -EINVAL;
	}
	st = calloc(1, sizeof(*st));
	if (!st || !(st->url = strdup(url))) {
		free(st);
		return -ENOMEM;
	}
	st->kind = !strncmp(url, "s3://", 5) ? KIND_S3 : KIND_HTTP;
	ho = o->http;
	if (!ho.ca_bundle && getenv("AWS_CA_BUNDLE") && *getenv("AWS_CA_BUNDLE"))
		ho.ca_bundle = getenv("AWS_CA_BUNDLE");
	if ((err = bfs_http_create(&ho, &st->http, errmsg)))
		goto fail;
	err = st->kind == KIND_S3 ? open_s3(st, o, errmsg) : open_http(st, errmsg);
	if (err)
		goto fail;
	*out = st;
	return 0;
fail:
	bfs_storage_close(st);
	return err;
}

void bfs_storage_close(bfs_storage *st)
{
	if (!st)
		return;
	bfs_s3_destroy(st->s3);
	bfs_creds_close(st->creds);
	bfs_http_destroy(st->http);
	for (size_t i = 0; i < st->nurls; i++)
		free(st->urls[i]);
	free(st->urls);
	free(st->bucket);
	free(st->prefix);
	free(st->root);
	free(st->url);
	free(st);
}

const char *bfs_storage_url(bfs_storage *st) { return st->url; }
const char *bfs_storage_root(bfs_storage *st) { return st->root; }

void bfs_storage_describe(bfs_storage *st, char *buf, size_t n)
{
	if (st->kind == KIND_S3) {
		char who[512];

		bfs_creds_describe(st->creds, who, sizeof(who));
		snprintf(buf, n, "endpoint %s, credentials from %s",
			 bfs_s3_describe(st->s3), who);
	} else {
		snprintf(buf, n, "%zu URL%s", st->nurls, st->nurls == 1 ? "" : "s");
	}
}

void bfs_storage_stats(bfs_storage *st, bfs_http_stats *out)
{
	bfs_http_stats_get(st->http, out);
}

void bfs_storage_objects_free(bfs_storage_object *objs, size_t n)
{
	for (size_t i = 0; objs && i < n; i++)
		free(objs[i].name);
	free(objs);
}

/* ---- list --------------------------------------------------------------- */

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const bfs_storage_object *)a)->name,
		      ((const bfs_storage_object *)b)->name);
}

typedef struct {
	const char *url;
	uint64_t off, len;
	const char *etag;
	int ranged;
} http_req;

static int http_prepare(void *ctx, uint64_t off, uint64_t len,
			bfs_http_attempt *a)
{
	http_req *r = ctx;

	if (snprintf(a->url, sizeof(a->url), "%s", r->url) >= (int)sizeof(a->url))
		return -ENAMETOOLONG;
	if (r->ranged && len)
		snprintf(a->headers[a->nheaders++], BFS_HTTP_HEADER_MAX,
			 "Range: bytes=%llu-%llu", (unsigned long long)off,
			 (unsigned long long)(off + len - 1));
	if (r->etag && r->etag[0] && r->etag[0] != 'W')
		snprintf(a->headers[a->nheaders++], BFS_HTTP_HEADER_MAX,
			 "If-Match: %s", r->etag);
	return 0;
}

static int list_http(bfs_storage *st, bfs_storage_object **objs, size_t *n,
		     char *errmsg)
{
	bfs_storage_object *v = calloc(st->nurls ? st->nurls : 1, sizeof(*v));
	int err = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < st->nurls; i++) {
		http_req q = { st->urls[i], 0, 0, NULL, 0 };
		bfs_http_req r = { .method = "HEAD", .prepare = http_prepare,
				   .ctx = &q, .what = st->urls[i] };
		bfs_http_resp resp;

		err = bfs_http_do(st->http, &r, &resp, errmsg);
		if (err)
			break;
		v[i].name = strdup(st->urls[i] + st->root_len);
		if (!v[i].name) {
			err = -ENOMEM;
			break;
		}
		v[i].size = resp.total;
		snprintf(v[i].etag, sizeof(v[i].etag), "%s", resp.etag);
	}
	if (err) {
		bfs_storage_objects_free(v, st->nurls);
		return err;
	}
	qsort(v, st->nurls, sizeof(*v), cmp_name);
	*objs = v;
	*n = st->nurls;
	return 0;
}

int bfs_storage_list(bfs_storage *st, bfs_storage_object **objs, size_t *n,
		     char *errmsg)
{
	bfs_s3_object *so;
	size_t sn, plen;
	int err;

	*objs = NULL;
	*n = 0;
	if (st->kind == KIND_HTTP)
		return list_http(st, objs, n, errmsg);
	err = bfs_s3_list(st->s3, st->bucket, st->prefix, &so, &sn, errmsg);
	if (err)
		return err;
	if (!sn) {
		bfs_s3_objects_free(so, sn);
		bfs_seterr(errmsg, "%s: no objects under this prefix (bucket %s, "
			   "prefix \"%s\")", st->url, st->bucket, st->prefix);
		return -ENOENT;
	}
	/* The objects become the storage's: names relative to the prefix. */
	*objs = calloc(sn, sizeof(**objs));
	if (!*objs) {
		bfs_s3_objects_free(so, sn);
		return -ENOMEM;
	}
	plen = strlen(st->prefix);
	for (size_t i = 0; i < sn; i++) {
		(*objs)[i].name = strdup(so[i].key + plen);
		(*objs)[i].size = so[i].size;
		memcpy((*objs)[i].etag, so[i].etag, sizeof((*objs)[i].etag));
		if (!(*objs)[i].name) {
			bfs_storage_objects_free(*objs, sn);
			bfs_s3_objects_free(so, sn);
			*objs = NULL;
			return -ENOMEM;
		}
	}
	bfs_s3_objects_free(so, sn);
	*n = sn;
	return 0;
}

/* prefix + name in a fresh string (freed by the caller), or NULL. */
static char *s3_key(const bfs_storage *st, const char *name)
{
	char *key = malloc(strlen(st->prefix) + strlen(name) + 1);

	if (key) {
		strcpy(key, st->prefix);
		strcat(key, name);
	}
	return key;
}

int bfs_storage_read(bfs_storage *st, const bfs_storage_object *obj,
		     uint64_t off, void *buf, size_t len, char *errmsg)
{
	if (st->kind == KIND_S3) {
		char *key = s3_key(st, obj->name);
		int err;

		if (!key)
			return -ENOMEM;
		err = bfs_s3_get(st->s3, st->bucket, key, obj->etag, off, buf, len,
				 errmsg);
		free(key);
		return err;
	} else {
		char url[2048];
		http_req q = { url, off, len, obj->etag, 1 };
		bfs_http_req r = { .method = "GET", .prepare = http_prepare,
				   .ctx = &q, .what = url, .buf = buf,
				   .want = len, .range_off = off };

		if (!len)
			return 0;
		snprintf(url, sizeof(url), "%.*s%s", (int)st->root_len, st->url,
			 obj->name);
		return bfs_http_do(st->http, &r, NULL, errmsg);
	}
}

int bfs_storage_put(bfs_storage *st, const char *name, const void *data,
		    size_t len, char *errmsg)
{
	char *key;
	int err;

	if (st->kind != KIND_S3) {
		bfs_seterr(errmsg, "%s: only s3:// sources can be written", st->url);
		return -EOPNOTSUPP;
	}
	if (!(key = s3_key(st, name)))
		return -ENOMEM;
	err = bfs_s3_put(st->s3, st->bucket, key, data, len, errmsg);
	free(key);
	return err;
}

int bfs_storage_delete(bfs_storage *st, const char *name, char *errmsg)
{
	char *key;
	int err;

	if (st->kind != KIND_S3) {
		bfs_seterr(errmsg, "%s: only s3:// sources can be written", st->url);
		return -EOPNOTSUPP;
	}
	if (!(key = s3_key(st, name)))
		return -ENOMEM;
	err = bfs_s3_delete(st->s3, st->bucket, key, errmsg);
	free(key);
	return err;
}
