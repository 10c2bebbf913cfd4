/*
 * sigv4.h - AWS Signature Version 4 for one HTTP request: the canonical
 * request, the string to sign, the signing key and the Authorization
 * header, with OpenSSL's HMAC-SHA256.
 *
 * Pure functions of their arguments (the time is handed in), so the AWS
 * test suite's published vectors check them exactly (tests/test_sigv4.c).
 * The secret key is read, never copied into any output: what comes out is
 * the Authorization value, which holds the access key id and a signature.
 * Any thread; nothing is allocated that outlives a call.
 */
#ifndef BFS_SIGV4_H
#define BFS_SIGV4_H

#include <stddef.h>

/* One request header, as the request will send it.  Names are matched
 * case-insensitively; values are trimmed and their inner runs of spaces
 * folded to one for signing (the request itself sends them as they are). */
typedef struct {
	const char *name;
	const char *value;
} bfs_sigv4_header;

/* One query parameter, raw (not yet percent-encoded).  value may be "". */
typedef struct {
	const char *name;
	const char *value;
} bfs_sigv4_param;

/* What a signature needs besides the request. */
typedef struct {
	const char *access_key; /* AKID... */
	const char *secret_key; /* never written anywhere by this module */
	const char *region;     /* "us-east-1" */
	const char *service;    /* "s3" */
} bfs_sigv4_key;

/* The request to sign. */
typedef struct {
	const char *method;            /* "GET" */
	const char *path;              /* raw path, "/bucket/a b+c", "/" at least;
					* encoded once, '/' kept (S3's rule) */
	const bfs_sigv4_param *params; /* raw query parameters, any order */
	size_t nparams;
	const bfs_sigv4_header *headers; /* every header to sign, Host and
					  * X-Amz-Date included */
	size_t nheaders;
	const char *payload_sha256;    /* 64 lowercase hex digits of the body's
					* SHA-256, or "UNSIGNED-PAYLOAD" */
	const char *amz_date;          /* "20150830T123600Z", the X-Amz-Date */
} bfs_sigv4_request;

#define BFS_SIGV4_AUTH_MAX 1024

/*
 * Sign req with key.  Writes the Authorization header's value ("AWS4-HMAC-
 * SHA256 Credential=..., SignedHeaders=..., Signature=...") into authz
 * (BFS_SIGV4_AUTH_MAX bytes).  When creq is not NULL, the canonical request
 * is also written there (creq_max bytes), for tests and for a person
 * debugging a 403: it holds no secret.
 * Returns 0, -EINVAL (a field missing, amz_date malformed, more than 64
 * headers), -ENAMETOOLONG (an output does not fit) or -ENOMEM.
 */
int bfs_sigv4_sign(const bfs_sigv4_key *key, const bfs_sigv4_request *req,
		   char *authz, char *creq, size_t creq_max);

/* hex (65 bytes) = lowercase hex SHA-256 of buf[0..n).  buf may be NULL
 * when n is 0. */
void bfs_sigv4_sha256_hex(const void *buf, size_t n, char hex[65]);

/*
 * Percent-encode s[0..n) as SigV4 wants: A-Z a-z 0-9 - . _ ~ kept, '/'
 * kept when keep_slash, every other byte as %XX (upper case).  Writes at
 * most out_max bytes with the NUL; returns the length, or -ENAMETOOLONG.
 */
int bfs_sigv4_uri_encode(const char *s, size_t n, int keep_slash, char *out,
			 size_t out_max);

#endif
