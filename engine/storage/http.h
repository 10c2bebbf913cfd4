/*
 * http.h - HTTP(S) requests over libcurl with one retry policy: a pool of
 * keep-alive connections, a deadline on every request, capped exponential
 * backoff with full jitter, Retry-After honoured, and a total give-up time.
 * Every request of the storage layer goes through bfs_http_do; no caller
 * loops on its own.
 *
 * DESIGN: a bfs_http holds up to opts.connections curl easy handles, each
 * one keeping its connection alive between requests; a request takes a free
 * handle (waiting on http->cond when all are busy) and gives it back when
 * it ends.  The handles share one DNS and TLS session cache (CURLSH, locked
 * by http->share_lock).  Counters are atomics, read by bfs_http_stats.
 * Threads: any, concurrently, after create and before destroy.
 *
 * What a request sends is built by the caller's `prepare` hook before each
 * attempt, so that a signature (whose date and Range change between
 * attempts) is made afresh every time and a resumed body asks only for what
 * is still missing.  URLs and header values handed in must hold no secret
 * except in the headers the hook marks as such: error messages quote the
 * URL and the status, never a header.
 */
#ifndef BFS_HTTP_H
#define BFS_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_http bfs_http;

typedef struct {
	unsigned connections;    /* handles kept (and transfers at once); 16 */
	unsigned connect_ms;     /* to connect, TLS included; 10000 */
	unsigned stall_ms;       /* no byte for this long aborts an attempt
				  * (whole seconds, at least 1); 30000 */
	unsigned giveup_ms;      /* a request's attempts end after this long
				  * in all; 120000 */
	unsigned backoff_ms;     /* first backoff's cap; 100 */
	unsigned backoff_max_ms; /* the cap never grows past this; 10000 */
	const char *ca_bundle;   /* AWS_CA_BUNDLE; NULL: the system's */
	int insecure;            /* 1: TLS peers are not verified (an option
				  * named for what it does turns it on) */
} bfs_http_opts;

/* The defaults above; fields left 0 in opts get them at create. */
void bfs_http_opts_default(bfs_http_opts *o);

/* Why an attempt was retried: the counters of bfs_http_stats. */
enum {
	BFS_HTTP_RETRY_RESET,    /* connection refused, reset, or closed before
				  * the body its Content-Length promised */
	BFS_HTTP_RETRY_TIMEOUT,  /* connect or stall deadline */
	BFS_HTTP_RETRY_5XX,      /* 500, 502, 504, InternalError */
	BFS_HTTP_RETRY_THROTTLE, /* 503, 429, SlowDown */
	BFS_HTTP_RETRY_SHORT,    /* an answer that ended well but with fewer
				  * bytes than the range asked for */
	BFS_HTTP_RETRY_CAUSES
};

typedef struct {
	uint64_t requests;  /* attempts sent */
	uint64_t bytes;     /* body bytes received */
	uint64_t retries[BFS_HTTP_RETRY_CAUSES];
	uint64_t in_flight; /* attempts under way now */
	uint64_t failed;    /* requests that gave up or were refused */
} bfs_http_stats;

#define BFS_HTTP_MAX_HEADERS 16
#define BFS_HTTP_HEADER_MAX 1200

/* What one attempt sends, filled by the prepare hook. */
typedef struct {
	char url[2048];
	char headers[BFS_HTTP_MAX_HEADERS][BFS_HTTP_HEADER_MAX]; /* "Name: v" */
	unsigned nheaders;
} bfs_http_attempt;

typedef struct {
	const char *method; /* "GET", "HEAD", "PUT", "POST" */
	/* Fill a for an attempt that asks for body bytes [off, off + len) of
	 * the resource (len 0: all of it, no Range).  Returns 0 or a negative
	 * code, which ends the request with that code. */
	int (*prepare)(void *ctx, uint64_t off, uint64_t len,
		       bfs_http_attempt *a);
	void *ctx;
	const char *what;   /* the resource for messages: "s3://b/k" */
	const void *body;   /* for PUT/POST; NULL */
	size_t body_len;
	/* The body goes to buf: exactly `want` bytes when want > 0 (a ranged
	 * read, resumed from where it broke), else up to buf_max (a listing,
	 * an error), growing *dyn when dyn is set. */
	void *buf;
	uint64_t want;
	size_t buf_max;
	char **dyn;         /* when set: the body in a malloc'd NUL-terminated
			     * string (caller frees), up to buf_max bytes */
	uint64_t range_off; /* with want: the resource's first byte wanted */
	/* With want, instead of buf: each piece of the body as it arrives,
	 * with the resource offset of its first byte (pieces come in order,
	 * and a resumed attempt goes on at the first byte not yet handed
	 * over, so every byte is handed over exactly once).  Returns 0, or a
	 * negative code that ends the request with it (no retry).  Called
	 * from the requesting thread, inside libcurl: it must not call into
	 * this client.  So a body of any size passes through curl's own
	 * buffer only (a file written as it comes). */
	int (*sink)(void *ctx, uint64_t off, const void *p, size_t n);
	void *sink_ctx;
} bfs_http_req;

typedef struct {
	long status;          /* the last attempt's HTTP status, 0 if none */
	uint64_t length;      /* body bytes delivered */
	uint64_t total;       /* the resource's size (Content-Range's total or
			       * Content-Length), 0 if unknown */
	char etag[128];       /* ETag as sent, quotes kept; "" if none */
	char code[64];        /* an S3 error body's <Code>, "" if none */
	unsigned attempts;
} bfs_http_resp;

/* Create a client.  Returns 0 with *out set, -ENOMEM, or -EIO when curl
 * cannot start (errmsg says why).  Destroy with bfs_http_destroy. */
int bfs_http_create(const bfs_http_opts *o, bfs_http **out, char *errmsg);

/* NULL is fine.  No request may be under way. */
void bfs_http_destroy(bfs_http *h);

/*
 * Run req under the retry policy.  Returns 0 when a 2xx answer delivered
 * its whole body (exactly req->want bytes for a ranged read); else:
 *   -EACCES   401 or 403 (refused at once: credentials, signature, clock)
 *   -ENOENT   404 (no such bucket or key)
 *   -ESTALE   412 (If-Match failed: the object was replaced)
 *   -ERANGE   416, or a body that does not fit buf
 *   -ETIMEDOUT / -EIO  the give-up time passed (errmsg names the resource,
 *             the attempts, the last status and cause)
 *   -EPROTO   another 4xx (errmsg has the status and the S3 code); a TLS
 *             certificate that is not trusted, a malformed URL
 *   -ENOMEM, or the prepare hook's code
 * resp (may be NULL) is filled either way.  Any thread.
 */
int bfs_http_do(bfs_http *h, const bfs_http_req *req, bfs_http_resp *resp,
		char *errmsg);

/* A snapshot of the counters.  Any thread. */
void bfs_http_stats_get(bfs_http *h, bfs_http_stats *out);

/* End every request now under way, and any made after, with -ECANCELED
 * (within ~50 ms, or as soon as a stalled connection's data moves; curl
 * asks its progress hook at least once a second): for a mount that ends
 * while its readers and fetchers wait on the network.  Any thread. */
void bfs_http_cancel(bfs_http *h);

/* The delay before attempt `attempt` (1 = the first retry): a uniform draw
 * from [0, min(backoff_max_ms, backoff_ms << (attempt - 1))] made from
 * *seed, or retry_after_ms when that is larger.  Pure but for *seed. */
unsigned bfs_http_backoff_ms(const bfs_http_opts *o, unsigned attempt,
			     unsigned retry_after_ms, uint64_t *seed);

#endif
