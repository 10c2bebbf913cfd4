/*
 * s3.c - the S3 client (see s3.h): endpoints and addressing, one signed
 * request made afresh for every attempt, ListObjectsV2 pages parsed with
 * expat, HEAD, ranged GET with If-Match, PUT.
 */
#include "engine/storage/s3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <expat.h>

#include "engine/base/error.h"
#include "engine/storage/sigv4.h"

#define EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define MAX_PAGES 100000 /* 100 million keys: a bound on the listing loop */

struct bfs_s3 {
	char scheme[8];     /* "http" or "https" */
	char host[512];     /* host[:port] */
	char base[512];     /* a path the endpoint itself has, "" or "/x" */
	char region[64];
	int virtual_host;
	int aws;            /* AWS's own endpoint */
	char desc[768];
	bfs_creds *creds;
	bfs_http *http;
};

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int bfs_s3_create(const bfs_s3_opts *o, bfs_s3 **out, char *errmsg)
{
	const char *ep = o->endpoint, *r = o->region, *p, *slash;
	bfs_s3 *s;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->creds = o->creds;
	s->http = o->http;
	if (!r)
		r = env("AWS_REGION");
	if (!r)
		r = env("AWS_DEFAULT_REGION");
	snprintf(s->region, sizeof(s->region), "%s", r ? r : "us-east-1");
	if (!ep)
		ep = env("AWS_ENDPOINT_URL_S3");
	if (!ep)
		ep = env("AWS_ENDPOINT_URL");
	if (!ep) {
		s->aws = 1;
		snprintf(s->scheme, sizeof(s->scheme), "https");
		snprintf(s->host, sizeof(s->host), "s3.%s.amazonaws.com", s->region);
	} else {
		if (!strncasecmp(ep, "https://", 8)) {
			snprintf(s->scheme, sizeof(s->scheme), "https");
			p = ep + 8;
		} else if (!strncasecmp(ep, "http://", 7)) {
			snprintf(s->scheme, sizeof(s->scheme), "http");
			p = ep + 7;
		} else {
			bfs_seterr(errmsg, "S3 endpoint \"%.200s\" is not an http:// "
				   "or https:// URL", ep);
			free(s);
			return -EINVAL;
		}
		slash = strchr(p, '/');
		snprintf(s->host, sizeof(s->host), "%.*s",
			 (int)(slash ? (size_t)(slash - p) : strlen(p)), p);
		if (slash && strcmp(slash, "/"))
			snprintf(s->base, sizeof(s->base), "%s", slash);
		while (s->base[0] && s->base[strlen(s->base) - 1] == '/')
			s->base[strlen(s->base) - 1] = '\0';
		if (!s->host[0] || strchr(s->host, '@')) {
			bfs_seterr(errmsg, "S3 endpoint \"%.200s\" has no host (or "
				   "has credentials in it, which batchfs never "
				   "takes from a URL)", ep);
			free(s);
			return -EINVAL;
		}
	}
	s->virtual_host = o->addressing == BFS_S3_VIRTUAL ||
			  (o->addressing == BFS_S3_AUTO && s->aws);
	snprintf(s->desc, sizeof(s->desc), "%s://%s%s (%s, region %s)", s->scheme,
		 s->host, s->base, s->virtual_host ? "virtual-hosted" : "path-style",
		 s->region);
	*out = s;
	return 0;
}

void bfs_s3_destroy(bfs_s3 *s) { free(s); }

const char *bfs_s3_describe(bfs_s3 *s) { return s->desc; }

void bfs_s3_objects_free(bfs_s3_object *objs, size_t n)
{
	for (size_t i = 0; objs && i < n; i++)
		free(objs[i].key);
	free(objs);
}

/* ---- one request -------------------------------------------------------- */

typedef struct {
	bfs_s3 *s;
	const char *method, *bucket, *key; /* key NULL: the bucket itself */
	const bfs_sigv4_param *params;
	size_t nparams;
	const char *payload_sha256;
	const char *etag;  /* If-Match, or NULL */
	int ranged;        /* send Range for [off, off + len) */
} s3_req;

static int add_header(bfs_http_attempt *a, const char *name, const char *v)
{
	if (a->nheaders >= BFS_HTTP_MAX_HEADERS ||
	    snprintf(a->headers[a->nheaders], BFS_HTTP_HEADER_MAX, "%s: %s", name,
		     v) >= BFS_HTTP_HEADER_MAX)
		return -ENAMETOOLONG;
	a->nheaders++;
	return 0;
}

static int s3_prepare(void *ctx, uint64_t off, uint64_t len, bfs_http_attempt *a)
{
	s3_req *q = ctx;
	bfs_s3 *s = q->s;
	char host[600], path[1800], enc[1800 * 3], date[17], range[64];
	char authz[BFS_SIGV4_AUTH_MAX], errmsg[BFS_ERRMSG_MAX];
	bfs_sigv4_header h[8];
	bfs_creds_set cs;
	size_t nh = 0, u;
	time_t now = time(NULL);
	struct tm tm;
	int err, k;

	if (s->virtual_host)
		snprintf(host, sizeof(host), "%s.%s", q->bucket, s->host);
	else
		snprintf(host, sizeof(host), "%s", s->host);
	if (s->virtual_host)
		k = snprintf(path, sizeof(path), "%s/%s", s->base, q->key ? q->key : "");
	else
		k = snprintf(path, sizeof(path), "%s/%s%s%s", s->base, q->bucket,
			     q->key ? "/" : "", q->key ? q->key : "");
	if (k >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if (bfs_sigv4_uri_encode(path, strlen(path), 1, enc, sizeof(enc)) < 0)
		return -ENAMETOOLONG;
	u = (size_t)snprintf(a->url, sizeof(a->url), "%s://%s%s", s->scheme, host,
			     enc);
	for (size_t i = 0; i < q->nparams && u < sizeof(a->url); i++) {
		char n[512], v[1536];

		if (bfs_sigv4_uri_encode(q->params[i].name, strlen(q->params[i].name),
					 0, n, sizeof(n)) < 0 ||
		    bfs_sigv4_uri_encode(q->params[i].value,
					 strlen(q->params[i].value), 0, v,
					 sizeof(v)) < 0)
			return -ENAMETOOLONG;
		u += (size_t)snprintf(a->url + u, sizeof(a->url) - u, "%c%s=%s",
				      i ? '&' : '?', n, v);
	}
	if (u >= sizeof(a->url))
		return -ENAMETOOLONG;

	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", &tm);
	h[nh++] = (bfs_sigv4_header){ "Host", host };
	h[nh++] = (bfs_sigv4_header){ "x-amz-date", date };
	h[nh++] = (bfs_sigv4_header){ "x-amz-content-sha256", q->payload_sha256 };
	if (q->ranged && len) {
		snprintf(range, sizeof(range), "bytes=%llu-%llu",
			 (unsigned long long)off, (unsigned long long)(off + len - 1));
		h[nh++] = (bfs_sigv4_header){ "Range", range };
	}
	if (q->etag && q->etag[0])
		h[nh++] = (bfs_sigv4_header){ "If-Match", q->etag };

	err = bfs_creds_get(s->creds, &cs, errmsg);
	if (err)
		return err;
	if (!cs.anonymous && cs.token[0])
		h[nh++] = (bfs_sigv4_header){ "x-amz-security-token", cs.token };
	if (!cs.anonymous) {
		bfs_sigv4_key key = { cs.access_key, cs.secret_key, s->region, "s3" };
		bfs_sigv4_request r = {
			.method = q->method, .path = path, .params = q->params,
			.nparams = q->nparams, .headers = h, .nheaders = nh,
			.payload_sha256 = q->payload_sha256, .amz_date = date,
		};

		err = bfs_sigv4_sign(&key, &r, authz, NULL, 0);
		if (err) {
			bfs_creds_set_wipe(&cs);
			return err;
		}
	}
	/* Host is curl's to send (it must match the URL's). */
	for (size_t i = 1; i < nh && !err; i++)
		err = add_header(a, h[i].name, h[i].value);
	if (!err && !cs.anonymous)
		err = add_header(a, "Authorization", authz);
	if (!err)
		err = add_header(a, "Expect", ""); /* no 100-continue round trip */
	/* "Expect: " with nothing after it tells curl not to send one. */
	if (!err)
		a->headers[a->nheaders - 1][7] = '\0';
	bfs_creds_set_wipe(&cs);
	return err;
}

/* ---- listing ------------------------------------------------------------ */

typedef struct {
	int depth;
	int field;         /* 1 Key, 2 Size, 3 ETag, 4 IsTruncated, 5 NextToken */
	int in_contents;
	char text[2048];
	size_t tlen;
	int too_long;
	bfs_s3_object cur;
	bfs_s3_object *objs;
	size_t n, cap;
	int truncated;
	char token[2048];
	int err;
} listx;

static void l_start(void *u, const XML_Char *name, const XML_Char **attr)
{
	listx *x = u;

	(void)attr;
	x->depth++;
	x->tlen = 0;
	x->text[0] = '\0';
	x->too_long = 0;
	x->field = 0;
	if (x->depth == 2 && !strcmp(name, "Contents")) {
		x->in_contents = 1;
		memset(&x->cur, 0, sizeof(x->cur));
	} else if (x->depth == 3 && x->in_contents) {
		x->field = !strcmp(name, "Key") ? 1 : !strcmp(name, "Size") ? 2
			 : !strcmp(name, "ETag") ? 3 : 0;
	} else if (x->depth == 2) {
		x->field = !strcmp(name, "IsTruncated")           ? 4
			 : !strcmp(name, "NextContinuationToken") ? 5 : 0;
	}
}

static void l_text(void *u, const XML_Char *s, int len)
{
	listx *x = u;

	if (!x->field)
		return;
	if (x->tlen + (size_t)len >= sizeof(x->text)) {
		x->too_long = 1;
		return;
	}
	memcpy(x->text + x->tlen, s, (size_t)len);
	x->tlen += (size_t)len;
	x->text[x->tlen] = '\0';
}

static void l_end(void *u, const XML_Char *name)
{
	listx *x = u;

	if (x->field && x->too_long && !x->err)
		x->err = -ENAMETOOLONG;
	switch (x->field) {
	case 1:
		free(x->cur.key);
		x->cur.key = strdup(x->text);
		if (!x->cur.key)
			x->err = -ENOMEM;
		break;
	case 2:
		x->cur.size = strtoull(x->text, NULL, 10);
		break;
	case 3:
		snprintf(x->cur.etag, sizeof(x->cur.etag), "%s", x->text);
		break;
	case 4:
		x->truncated = !strcmp(x->text, "true");
		break;
	case 5:
		snprintf(x->token, sizeof(x->token), "%s", x->text);
		break;
	}
	x->field = 0;
	if (x->depth == 2 && x->in_contents && !strcmp(name, "Contents")) {
		x->in_contents = 0;
		if (!x->cur.key) {
			x->err = x->err ? x->err : -EPROTO;
		} else if (x->cur.key[strlen(x->cur.key) - 1] == '/' ||
			   !x->cur.key[0]) {
			free(x->cur.key); /* a folder marker */
		} else {
			if (x->n == x->cap) {
				size_t cap = x->cap ? 2 * x->cap : 256;
				bfs_s3_object *p = realloc(x->objs, cap * sizeof(*p));

				if (!p) {
					free(x->cur.key);
					x->err = -ENOMEM;
					goto out;
				}
				x->objs = p;
				x->cap = cap;
			}
			x->objs[x->n++] = x->cur;
		}
		x->cur.key = NULL;
	}
out:
	x->depth--;
}

static int cmp_obj(const void *a, const void *b)
{
	return strcmp(((const bfs_s3_object *)a)->key,
		      ((const bfs_s3_object *)b)->key);
}

int bfs_s3_list(bfs_s3 *s, const char *bucket, const char *prefix,
		bfs_s3_object **objs, size_t *n, char *errmsg)
{
	listx x;
	char what[1200];
	int err = 0;

	*objs = NULL;
	*n = 0;
	memset(&x, 0, sizeof(x));
	snprintf(what, sizeof(what), "s3://%s/%s", bucket, prefix);
	for (unsigned page = 0;; page++) {
		bfs_sigv4_param p[4];
		size_t np = 0;
		char *body = NULL, tok[2048];
		s3_req q = { s, "GET", bucket, NULL, p, 0, EMPTY_SHA256, NULL, 0 };
		bfs_http_req r = {
			.method = "GET", .prepare = s3_prepare, .ctx = &q,
			.what = what, .buf_max = 64u << 20, .dyn = &body,
		};
		XML_Parser xp;

		if (page == MAX_PAGES) {
			err = -EPROTO;
			bfs_seterr(errmsg, "%s: the listing goes on past %u pages",
				   what, MAX_PAGES);
			break;
		}
		snprintf(tok, sizeof(tok), "%s", x.token);
		p[np++] = (bfs_sigv4_param){ "list-type", "2" };
		p[np++] = (bfs_sigv4_param){ "prefix", prefix };
		if (page)
			p[np++] = (bfs_sigv4_param){ "continuation-token", tok };
		q.nparams = np;
		err = bfs_http_do(s->http, &r, NULL, errmsg);
		if (err)
			break;
		xp = XML_ParserCreate(NULL);
		if (!xp) {
			free(body);
			err = -ENOMEM;
			break;
		}
		x.truncated = 0;
		x.token[0] = '\0';
		x.depth = 0;
		XML_SetUserData(xp, &x);
		XML_SetElementHandler(xp, l_start, l_end);
		XML_SetCharacterDataHandler(xp, l_text);
		if (XML_Parse(xp, body, (int)strlen(body), 1) == XML_STATUS_ERROR &&
		    !x.err) {
			x.err = -EPROTO;
			bfs_seterr(errmsg, "%s: page %u of the listing is not XML "
				   "(%s at line %lu)", what, page + 1,
				   XML_ErrorString(XML_GetErrorCode(xp)),
				   (unsigned long)XML_GetCurrentLineNumber(xp));
		}
		XML_ParserFree(xp);
		free(body);
		free(x.cur.key);
		x.cur.key = NULL;
		if ((err = x.err)) {
			if (err == -ENAMETOOLONG)
				bfs_seterr(errmsg, "%s: a key or token of the listing "
					   "is longer than 2047 bytes", what);
			else if (err == -EPROTO && !errmsg[0])
				bfs_seterr(errmsg, "%s: a <Contents> without a <Key>",
					   what);
			break;
		}
		if (!x.truncated)
			break;
		if (!x.token[0] || !strcmp(x.token, tok)) {
			err = -EPROTO;
			bfs_seterr(errmsg, "%s: page %u of the listing says it is "
				   "truncated but gives no new continuation token",
				   what, page + 1);
			break;
		}
	}
	if (err) {
		bfs_s3_objects_free(x.objs, x.n);
		return err;
	}
	if (x.n)
		qsort(x.objs, x.n, sizeof(*x.objs), cmp_obj);
	*objs = x.objs;
	*n = x.n;
	return 0;
}

/* ---- objects ------------------------------------------------------------ */

int bfs_s3_head(bfs_s3 *s, const char *bucket, const char *key,
		uint64_t *size, char etag[128], char *errmsg)
{
	s3_req q = { s, "HEAD", bucket, key, NULL, 0, EMPTY_SHA256, NULL, 0 };
	char what[1200];
	bfs_http_req r = {
		.method = "HEAD", .prepare = s3_prepare, .ctx = &q, .what = what,
	};
	bfs_http_resp resp;
	int err;

	snprintf(what, sizeof(what), "s3://%s/%s", bucket, key);
	err = bfs_http_do(s->http, &r, &resp, errmsg);
	if (err)
		return err;
	*size = resp.total;
	snprintf(etag, 128, "%s", resp.etag);
	return 0;
}

int bfs_s3_get(bfs_s3 *s, const char *bucket, const char *key,
	       const char *etag, uint64_t off, void *buf, size_t len,
	       char *errmsg)
{
	s3_req q = { s, "GET", bucket, key, NULL, 0, EMPTY_SHA256, etag, 1 };
	char what[1200];
	bfs_http_req r = {
		.method = "GET", .prepare = s3_prepare, .ctx = &q, .what = what,
		.buf = buf, .want = len, .range_off = off,
	};

	if (!len)
		return 0;
	snprintf(what, sizeof(what), "s3://%s/%s", bucket, key);
	return bfs_http_do(s->http, &r, NULL, errmsg);
}

int bfs_s3_get_to(bfs_s3 *s, const char *bucket, const char *key,
		  const char *etag, uint64_t off, uint64_t len,
		  int (*sink)(void *ctx, uint64_t off, const void *p, size_t n),
		  void *sink_ctx, char *errmsg)
{
	s3_req q = { s, "GET", bucket, key, NULL, 0, EMPTY_SHA256, etag, 1 };
	char what[1200];
	bfs_http_req r = {
		.method = "GET", .prepare = s3_prepare, .ctx = &q, .what = what,
		.want = len, .range_off = off, .sink = sink, .sink_ctx = sink_ctx,
	};

	if (!len)
		return 0;
	snprintf(what, sizeof(what), "s3://%s/%s", bucket, key);
	return bfs_http_do(s->http, &r, NULL, errmsg);
}

int bfs_s3_put(bfs_s3 *s, const char *bucket, const char *key,
	       const void *data, size_t len, char *errmsg)
{
	char sha[65], what[1200];
	s3_req q = { s, "PUT", bucket, key, NULL, 0, sha, NULL, 0 };
	char sink[4096];
	bfs_http_req r = {
		.method = "PUT", .prepare = s3_prepare, .ctx = &q, .what = what,
		.body = data, .body_len = len, .buf = sink, .buf_max = sizeof(sink),
	};

	snprintf(what, sizeof(what), "s3://%s/%s", bucket, key);
	bfs_sigv4_sha256_hex(data, len, sha);
	return bfs_http_do(s->http, &r, NULL, errmsg);
}

int bfs_s3_delete(bfs_s3 *s, const char *bucket, const char *key,
		  char *errmsg)
{
	char what[1200], sink[4096];
	s3_req q = { s, "DELETE", bucket, key, NULL, 0, EMPTY_SHA256, NULL, 0 };
	bfs_http_req r = {
		.method = "DELETE", .prepare = s3_prepare, .ctx = &q, .what = what,
		.buf = sink, .buf_max = sizeof(sink),
	};
	int err;

	snprintf(what, sizeof(what), "s3://%s/%s", bucket, key);
	err = bfs_http_do(s->http, &r, NULL, errmsg);
	return err == -ENOENT ? 0 : err;
}
