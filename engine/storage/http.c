/*
 * http.c - requests over libcurl under one retry policy (see http.h): the
 * handle pool, one attempt, the classification of what came back, the
 * backoff, and the counters.
 */
#include "engine/storage/http.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <expat.h>

#include "engine/base/error.h"

#define ERRBODY_MAX 8192

struct bfs_http {
	bfs_http_opts o;
	CURLSH *share;
	pthread_mutex_t share_lock; /* guards the share's DNS and TLS data */
	pthread_mutex_t lock;       /* guards free[] and nfree */
	pthread_cond_t cond;        /* signalled when a handle is given back */
	CURL **all;                 /* every handle, for destroy */
	CURL **free;                /* protected by lock */
	unsigned nfree;             /* protected by lock */
	_Atomic uint64_t requests, bytes, in_flight, failed; /* atomic */
	_Atomic uint64_t retries[BFS_HTTP_RETRY_CAUSES];      /* atomic */
	_Atomic uint64_t seed;      /* atomic: jitter draws */
	_Atomic int cancelled;      /* atomic: bfs_http_cancel was called */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_ALL); }

void bfs_http_opts_default(bfs_http_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->connections = 16;
	o->connect_ms = 10000;
	o->stall_ms = 30000;
	o->giveup_ms = 120000;
	o->backoff_ms = 100;
	o->backoff_max_ms = 10000;
}

static void share_lock(CURL *c, curl_lock_data d, curl_lock_access a, void *u)
{
	(void)c, (void)d, (void)a;
	pthread_mutex_lock(&((bfs_http *)u)->share_lock);
}

static void share_unlock(CURL *c, curl_lock_data d, void *u)
{
	(void)c, (void)d;
	pthread_mutex_unlock(&((bfs_http *)u)->share_lock);
}

int bfs_http_create(const bfs_http_opts *o, bfs_http **out, char *errmsg)
{
	bfs_http_opts d;
	bfs_http *h;

	*out = NULL;
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK) {
		bfs_seterr(errmsg, "libcurl: %s", curl_easy_strerror(global_rc));
		return -EIO;
	}
	bfs_http_opts_default(&d);
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->o = *o;
#define DEF(f) if (!h->o.f) h->o.f = d.f
	DEF(connections); DEF(connect_ms); DEF(stall_ms); DEF(giveup_ms);
	DEF(backoff_ms); DEF(backoff_max_ms);
#undef DEF
	pthread_mutex_init(&h->share_lock, NULL);
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	atomic_store(&h->seed, (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)h);
	h->all = calloc(h->o.connections, sizeof(CURL *));
	h->free = calloc(h->o.connections, sizeof(CURL *));
	h->share = curl_share_init();
	if (!h->all || !h->free || !h->share)
		goto nomem;
	curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(h->share, CURLSHOPT_USERDATA, h);
	curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	for (unsigned i = 0; i < h->o.connections; i++) {
		h->all[i] = curl_easy_init();
		if (!h->all[i])
			goto nomem;
		h->free[h->nfree++] = h->all[i];
	}
	*out = h;
	return 0;
nomem:
	bfs_http_destroy(h);
	return -ENOMEM;
}

void bfs_http_destroy(bfs_http *h)
{
	if (!h)
		return;
	for (unsigned i = 0; h->all && i < h->o.connections; i++)
		if (h->all[i])
			curl_easy_cleanup(h->all[i]);
	if (h->share)
		curl_share_cleanup(h->share);
	free(h->all);
	free(h->free);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	pthread_mutex_destroy(&h->share_lock);
	free(h);
}

static CURL *take(bfs_http *h)
{
	CURL *c;

	pthread_mutex_lock(&h->lock);
	while (!h->nfree)
		pthread_cond_wait(&h->cond, &h->lock);
	c = h->free[--h->nfree];
	pthread_mutex_unlock(&h->lock);
	return c;
}

static void give(bfs_http *h, CURL *c)
{
	pthread_mutex_lock(&h->lock);
	h->free[h->nfree++] = c;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

void bfs_http_stats_get(bfs_http *h, bfs_http_stats *s)
{
	s->requests = atomic_load(&h->requests);
	s->bytes = atomic_load(&h->bytes);
	s->in_flight = atomic_load(&h->in_flight);
	s->failed = atomic_load(&h->failed);
	for (int i = 0; i < BFS_HTTP_RETRY_CAUSES; i++)
		s->retries[i] = atomic_load(&h->retries[i]);
}

static uint64_t next_rand(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

unsigned bfs_http_backoff_ms(const bfs_http_opts *o, unsigned attempt,
			     unsigned retry_after_ms, uint64_t *seed)
{
	uint64_t cap = o->backoff_ms;
	unsigned ms;

	for (unsigned i = 1; i < attempt && cap < o->backoff_max_ms; i++)
		cap *= 2;
	if (cap > o->backoff_max_ms)
		cap = o->backoff_max_ms;
	ms = (unsigned)(next_rand(seed) % (cap + 1));
	return retry_after_ms > ms ? retry_after_ms : ms;
}

/* ---- one attempt ------------------------------------------------------ */

typedef struct {
	const bfs_http_req *req;
	long status;              /* from the last status line */
	uint64_t got;             /* body bytes kept in req->buf so far */
	size_t dyn_len, dyn_cap;
	char err[ERRBODY_MAX];    /* an error answer's body, cut */
	size_t errlen;
	int overflow;             /* more body than fits */
	uint64_t content_length;  /* of this answer, 0 unknown */
	uint64_t total;           /* Content-Range's total, 0 unknown */
	unsigned retry_after_ms;
	char etag[128];
	uint64_t range_start;     /* the first byte this attempt asked for */
	int ignored_range;        /* a 200 to a Range that began past 0 */
	int sink_err;             /* what req->sink refused the body with */
	bfs_http *h;
} attempt;

static size_t on_header(char *p, size_t sz, size_t n, void *u)
{
	attempt *a = u;
	size_t len = sz * n;
	char line[512];
	size_t k = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
	char *v;

	memcpy(line, p, k);
	line[k] = '\0';
	while (k && (line[k - 1] == '\r' || line[k - 1] == '\n'))
		line[--k] = '\0';
	if (!strncmp(line, "HTTP/", 5)) {
		v = strchr(line, ' ');
		a->status = v ? strtol(v + 1, NULL, 10) : 0;
		a->content_length = a->total = 0;
		a->etag[0] = '\0';
		a->retry_after_ms = 0;
		return len;
	}
	v = strchr(line, ':');
	if (!v)
		return len;
	*v++ = '\0';
	while (*v == ' ' || *v == '\t')
		v++;
	if (!strcasecmp(line, "content-length")) {
		a->content_length = strtoull(v, NULL, 10);
	} else if (!strcasecmp(line, "content-range")) {
		char *slash = strchr(v, '/');

		if (slash && slash[1] != '*')
			a->total = strtoull(slash + 1, NULL, 10);
	} else if (!strcasecmp(line, "etag")) {
		snprintf(a->etag, sizeof(a->etag), "%s", v);
	} else if (!strcasecmp(line, "retry-after")) {
		unsigned long s = strtoul(v, NULL, 10);

		a->retry_after_ms = s > 3600 ? 3600000u : (unsigned)s * 1000u;
	}
	return len;
}

static size_t on_body(char *p, size_t sz, size_t n, void *u)
{
	attempt *a = u;
	const bfs_http_req *r = a->req;
	size_t len = sz * n;

	atomic_fetch_add(&a->h->bytes, len);
	if (a->status < 200 || a->status >= 300) {
		size_t k = sizeof(a->err) - 1 - a->errlen;

		if (k > len)
			k = len;
		memcpy(a->err + a->errlen, p, k);
		a->errlen += k;
		a->err[a->errlen] = '\0';
		return len;
	}
	if (r->dyn) {
		if (a->dyn_len + len > r->buf_max) {
			a->overflow = 1;
			return 0;
		}
		if (a->dyn_len + len + 1 > a->dyn_cap) {
			size_t cap = a->dyn_cap ? a->dyn_cap : 16384;
			char *q;

			while (a->dyn_len + len + 1 > cap)
				cap *= 2;
			q = realloc(*r->dyn, cap);
			if (!q)
				return 0;
			*r->dyn = q;
			a->dyn_cap = cap;
		}
		memcpy(*r->dyn + a->dyn_len, p, len);
		a->dyn_len += len;
		(*r->dyn)[a->dyn_len] = '\0';
		return len;
	}
	if (r->want) {
		if (a->status == 200 && a->range_start) {
			a->ignored_range = 1;
			return 0;
		}
		if (a->got + len > r->want) {
			a->overflow = 1;
			return 0;
		}
		if (r->sink) {
			int err = r->sink(r->sink_ctx, r->range_off + a->got, p, len);

			if (err) {
				a->sink_err = err;
				return 0;
			}
			a->got += len;
			return len;
		}
	} else if (a->got + len > r->buf_max) {
		a->overflow = 1;
		return 0;
	}
	memcpy((char *)r->buf + a->got, p, len);
	a->got += len;
	return len;
}

typedef struct {
	const char *p;
	size_t left;
} upload;

static size_t on_read(char *buf, size_t sz, size_t n, void *u)
{
	upload *up = u;
	size_t k = sz * n < up->left ? sz * n : up->left;

	memcpy(buf, up->p, k);
	up->p += k;
	up->left -= k;
	return k;
}

/* The <Code> and <Message> of an S3 error body, with expat. */
typedef struct {
	int depth, in;  /* in: 1 Code, 2 Message */
	char code[64];
	char msg[256];
} errxml;

static void x_start(void *u, const XML_Char *name, const XML_Char **attr)
{
	errxml *e = u;

	(void)attr;
	e->depth++;
	e->in = e->depth == 2 && !strcmp(name, "Code")      ? 1
	      : e->depth == 2 && !strcmp(name, "Message") ? 2 : 0;
}

static void x_end(void *u, const XML_Char *name)
{
	errxml *e = u;

	(void)name;
	e->depth--;
	e->in = 0;
}

static void x_text(void *u, const XML_Char *s, int len)
{
	errxml *e = u;
	char *dst = e->in == 1 ? e->code : e->in == 2 ? e->msg : NULL;
	size_t cap = e->in == 1 ? sizeof(e->code) : sizeof(e->msg), have;

	if (!dst)
		return;
	have = strlen(dst);
	if (have + (size_t)len >= cap)
		len = (int)(cap - 1 - have);
	memcpy(dst + have, s, (size_t)len);
	dst[have + (size_t)len] = '\0';
}

static void parse_error_body(const char *body, size_t len, errxml *e)
{
	XML_Parser p;

	memset(e, 0, sizeof(*e));
	if (!len || !(p = XML_ParserCreate(NULL)))
		return;
	XML_SetUserData(p, e);
	XML_SetElementHandler(p, x_start, x_end);
	XML_SetCharacterDataHandler(p, x_text);
	XML_Parse(p, body, (int)len, 1);
	XML_ParserFree(p);
	/* Control bytes from a hostile server never reach a message. */
	for (char *c = e->msg; *c; c++)
		if ((unsigned char)*c < 0x20)
			*c = ' ';
	for (char *c = e->code; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == ' ')
			*c = '?';
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Sleep ms, in steps of 50 ms so that a cancel ends it soon. */
static void sleep_ms(bfs_http *h, unsigned ms)
{
	while (ms && !atomic_load(&h->cancelled)) {
		unsigned step = ms < 50 ? ms : 50;
		struct timespec t = { 0, (long)step * 1000000L };

		while (nanosleep(&t, &t) && errno == EINTR)
			;
		ms -= step;
	}
}

/* curl's progress hook: a cancelled client ends its transfers. */
static int on_progress(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut,
		       curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	return atomic_load(&((bfs_http *)u)->cancelled) ? 1 : 0;
}

void bfs_http_cancel(bfs_http *h)
{
	atomic_store(&h->cancelled, 1);
}

static const char *cause_name(int c)
{
	static const char *n[] = { "connection reset or refused", "timed out",
				   "server error", "throttled", "short body" };

	return c >= 0 && c < BFS_HTTP_RETRY_CAUSES ? n[c] : "?";
}

int bfs_http_do(bfs_http *h, const bfs_http_req *req, bfs_http_resp *resp,
		char *errmsg)
{
	bfs_http_resp local;
	double start = now_ms();
	uint64_t seed = atomic_fetch_add(&h->seed, 0x9e3779b97f4a7c15ull);
	attempt *a;
	char last[256] = "";
	int err = 0;

	if (!resp)
		resp = &local;
	memset(resp, 0, sizeof(*resp));
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->h = h;
	a->req = req;
	if (req->dyn)
		*req->dyn = NULL;

	for (unsigned n = 1;; n++) {
		bfs_http_attempt at;
		struct curl_slist *hl = NULL;
		CURL *c;
		CURLcode rc;
		errxml ex;
		int cause = -1;
		double left = h->o.giveup_ms - (now_ms() - start);
		upload up = { req->body, req->body_len };

		if (atomic_load(&h->cancelled)) {
			err = -ECANCELED;
			bfs_seterr(errmsg, "%s: %s: cancelled (the mount is ending)",
				   req->what, req->method);
			break;
		}
		memset(&at, 0, sizeof(at));
		err = req->prepare(req->ctx, req->range_off + a->got,
				   req->want ? req->want - a->got : 0, &at);
		if (err)
			break;
		for (unsigned i = 0; i < at.nheaders; i++) {
			struct curl_slist *t = curl_slist_append(hl, at.headers[i]);

			if (!t) {
				curl_slist_free_all(hl);
				err = -ENOMEM;
				goto done;
			}
			hl = t;
		}
		/* A dynamic body is whole or nothing: a retry starts again. */
		a->dyn_len = 0;
		a->errlen = 0;
		a->err[0] = '\0';
		a->overflow = 0;
		a->ignored_range = 0;
		a->sink_err = 0;
		a->status = 0;
		a->range_start = req->range_off + a->got;
		if (!req->want && !req->dyn)
			a->got = 0;

		c = take(h);
		curl_easy_reset(c);
		curl_easy_setopt(c, CURLOPT_SHARE, h->share);
		curl_easy_setopt(c, CURLOPT_URL, at.url);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)h->o.connect_ms);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
				 (long)(h->o.stall_ms + 999) / 1000);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(left > 1000 ? left : 1000));
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
		curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
		/* bodies stream through this buffer (the shard cache writes
		 * them to disk as they come): larger than the 16 KiB default,
		 * for fewer calls at a fast link's speed */
		curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 128L * 1024);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
		if (h->o.ca_bundle)
			curl_easy_setopt(c, CURLOPT_CAINFO, h->o.ca_bundle);
		if (h->o.insecure) {
			curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
			curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
		}
		if (!strcmp(req->method, "HEAD")) {
			curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		} else if (!strcmp(req->method, "PUT")) {
			curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
			curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
			curl_easy_setopt(c, CURLOPT_READDATA, &up);
			curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
					 (curl_off_t)req->body_len);
		} else if (!strcmp(req->method, "POST")) {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
					 (curl_off_t)req->body_len);
		} else if (strcmp(req->method, "GET")) {
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
		}
		atomic_fetch_add(&h->requests, 1);
		atomic_fetch_add(&h->in_flight, 1);
		rc = curl_easy_perform(c);
		atomic_fetch_sub(&h->in_flight, 1);
		give(h, c);
		curl_slist_free_all(hl);
		resp->attempts = n;
		resp->status = a->status;

		if (a->status >= 300 || (rc == CURLE_OK && a->status < 200)) {
			parse_error_body(a->err, a->errlen, &ex);
			snprintf(resp->code, sizeof(resp->code), "%s", ex.code);
		} else {
			memset(&ex, 0, sizeof(ex));
		}

		if (rc == CURLE_ABORTED_BY_CALLBACK || atomic_load(&h->cancelled)) {
			err = -ECANCELED;
			bfs_seterr(errmsg, "%s: %s: cancelled (the mount is ending)",
				   req->what, req->method);
			break;
		}
		if (a->sink_err) {
			err = a->sink_err;
			bfs_seterr(errmsg, "%s: %s: the body could not be kept: %s",
				   req->what, req->method, bfs_strerror(err));
			break;
		}
		if (a->ignored_range) {
			err = -EPROTO;
			bfs_seterr(errmsg, "%s: the server ignored the Range "
				   "header (200, not 206)", req->what);
			break;
		}
		if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && a->overflow)) {
			/* Nothing, or not all, came: the network's fault. */
			cause = rc == CURLE_OPERATION_TIMEDOUT ? BFS_HTTP_RETRY_TIMEOUT
							       : BFS_HTTP_RETRY_RESET;
			if (rc == CURLE_WRITE_ERROR) {
				err = -ENOMEM;
				break;
			}
			if (rc == CURLE_PEER_FAILED_VERIFICATION ||
			    rc == CURLE_SSL_CACERT_BADFILE ||
			    rc == CURLE_SSL_CERTPROBLEM ||
			    rc == CURLE_UNSUPPORTED_PROTOCOL ||
			    rc == CURLE_URL_MALFORMAT) {
				/* Retrying will not change these. */
				err = -EPROTO;
				bfs_seterr(errmsg, "%s: %s: %s%s", req->what, req->method,
					   curl_easy_strerror(rc),
					   rc == CURLE_PEER_FAILED_VERIFICATION ||
					   rc == CURLE_SSL_CACERT_BADFILE
					   ? " (the server's TLS certificate is not trusted: "
					     "AWS_CA_BUNDLE names the CA file that signed it; "
					     "--no-verify-tls turns the check off)" : "");
				break;
			}
			snprintf(last, sizeof(last), "%s (%s)%s", cause_name(cause),
				 curl_easy_strerror(rc),
				 a->status ? "" : ", no answer");
		} else if (a->overflow) {
			err = -ERANGE;
			bfs_seterr(errmsg, "%s: %s: the answer is larger than asked "
				   "for (%s)", req->what, req->method,
				   req->want ? "more bytes than the range" : "a limit");
			break;
		} else if (a->status >= 200 && a->status < 300) {
			if (req->want && a->got < req->want) {
				cause = BFS_HTTP_RETRY_SHORT;
				snprintf(last, sizeof(last), "short body (%llu of %llu "
					 "bytes)", (unsigned long long)a->got,
					 (unsigned long long)req->want);
			} else {
				err = 0;
				break;
			}
		} else if (a->status == 429 || a->status == 503 ||
			   !strcmp(ex.code, "SlowDown") ||
			   !strcmp(ex.code, "Throttling") ||
			   !strcmp(ex.code, "RequestLimitExceeded")) {
			cause = BFS_HTTP_RETRY_THROTTLE;
		} else if (a->status >= 500 || !strcmp(ex.code, "RequestTimeout") ||
			   !strcmp(ex.code, "InternalError")) {
			cause = a->status >= 500 ? BFS_HTTP_RETRY_5XX
						 : BFS_HTTP_RETRY_TIMEOUT;
		} else {
			/* An answer that retrying will not change. */
			err = a->status == 401 || a->status == 403 ? -EACCES
			    : a->status == 404 ? -ENOENT
			    : a->status == 412 ? -ESTALE
			    : a->status == 416 ? -ERANGE : -EPROTO;
			bfs_seterr(errmsg, "%s: %s: HTTP %ld%s%s%s%s", req->what,
				   req->method, a->status, ex.code[0] ? " " : "",
				   ex.code, ex.msg[0] ? ": " : "", ex.msg);
			break;
		}
		if (cause >= 0 && a->status >= 300)
			snprintf(last, sizeof(last), "HTTP %ld%s%s (%s)", a->status,
				 ex.code[0] ? " " : "", ex.code, cause_name(cause));
		atomic_fetch_add(&h->retries[cause], 1);

		/* Retry, if the give-up time allows the wait. */
		{
			unsigned ms = bfs_http_backoff_ms(&h->o, n, a->retry_after_ms,
							  &seed);
			double spent = now_ms() - start;

			if (spent + ms >= h->o.giveup_ms) {
				err = cause == BFS_HTTP_RETRY_TIMEOUT ? -ETIMEDOUT : -EIO;
				bfs_seterr(errmsg, "%s: %s: gave up after %u attempts "
					   "in %.1f s (--s3-giveup %u s); last: %s",
					   req->what, req->method, n, spent / 1e3,
					   h->o.giveup_ms / 1000, last);
				break;
			}
			sleep_ms(h, ms);
		}
	}
done:
	resp->length = req->dyn ? a->dyn_len : a->got;
	resp->total = a->total ? a->total : a->content_length;
	snprintf(resp->etag, sizeof(resp->etag), "%s", a->etag);
	if (err) {
		atomic_fetch_add(&h->failed, 1);
		if (req->dyn) {
			free(*req->dyn);
			*req->dyn = NULL;
		}
	}
	free(a);
	return err;
}
