/*
 * sigv4.c - AWS Signature Version 4 (see sigv4.h): canonical request,
 * string to sign, signing key, Authorization value.  HMAC and SHA-256 are
 * OpenSSL's; the canonical forms are built here, because the ones in curl
 * 7.88 (CURLOPT_AWS_SIGV4) sign keys holding '+' and two-parameter queries
 * wrongly.
 */
#include "engine/storage/sigv4.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#define MAX_HEADERS 64

/* A growing string; on failure it remembers -ENOMEM and stops growing. */
typedef struct {
	char *p;
	size_t len, cap;
	int err;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (b->len + n + 1 > cap)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->err = -ENOMEM;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static int unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

int bfs_sigv4_uri_encode(const char *s, size_t n, int keep_slash, char *out,
			 size_t out_max)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (unreserved(c) || (keep_slash && c == '/')) {
			if (o + 2 > out_max)
				return -ENAMETOOLONG;
			out[o++] = (char)c;
		} else {
			if (o + 4 > out_max)
				return -ENAMETOOLONG;
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (o + 1 > out_max)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return (int)o;
}

/* s encoded into a fresh string (freed by the caller), or NULL. */
static char *encode_dup(const char *s, int keep_slash)
{
	size_t n = strlen(s), max = 3 * n + 1;
	char *out = malloc(max);

	if (out && bfs_sigv4_uri_encode(s, n, keep_slash, out, max) < 0) {
		free(out);
		out = NULL;
	}
	return out;
}

void bfs_sigv4_sha256_hex(const void *buf, size_t n, char hex[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;

	EVP_Digest(n ? buf : "", n, md, &mdlen, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void hmac(const void *key, size_t klen, const char *msg,
		 unsigned char out[32])
{
	unsigned int len = 32;

	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg,
	     strlen(msg), out, &len);
}

typedef struct {
	char *name; /* lower case */
	const char *value;
	size_t order; /* position in the request: duplicates keep it */
} hdr;

typedef struct {
	char *name, *value; /* encoded */
} qp;

static int cmp_hdr(const void *a, const void *b)
{
	const hdr *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int cmp_qp(const void *a, const void *b)
{
	const qp *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

/* A header value for signing: trimmed, inner runs of blanks folded. */
static void add_value(sbuf *b, const char *v)
{
	int space = 0, any = 0;

	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = any;
			continue;
		}
		if (space)
			sb_add(b, " ", 1);
		sb_add(b, v, 1);
		space = 0;
		any = 1;
	}
}

static int amz_date_ok(const char *d)
{
	if (!d || strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
		return 0;
	for (int i = 0; i < 15; i++)
		if (i != 8 && !isdigit((unsigned char)d[i]))
			return 0;
	return 1;
}

int bfs_sigv4_sign(const bfs_sigv4_key *key, const bfs_sigv4_request *req,
		   char *authz, char *creq, size_t creq_max)
{
	hdr h[MAX_HEADERS];
	qp *q = NULL;
	sbuf c = { 0 }, sh = { 0 }, sts = { 0 }, k = { 0 };
	char *path = NULL, date[9], hash[65], sig[65];
	unsigned char kd[32], kr[32], ks[32], kk[32], sg[32];
	size_t nh = 0, nq = 0;
	int err = -EINVAL;

	if (!key || !req || !authz || !key->access_key || !key->secret_key ||
	    !key->region || !key->service || !req->method || !req->path ||
	    !req->payload_sha256 || !amz_date_ok(req->amz_date) ||
	    req->nheaders > MAX_HEADERS || (req->nparams && !req->params) ||
	    (req->nheaders && !req->headers))
		return -EINVAL;
	memcpy(date, req->amz_date, 8);
	date[8] = '\0';

	err = -ENOMEM;
	for (nh = 0; nh < req->nheaders; nh++) {
		const char *n = req->headers[nh].name;

		if (!n || !req->headers[nh].value)
			goto einval;
		h[nh].name = strdup(n);
		if (!h[nh].name)
			goto out;
		for (char *p = h[nh].name; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		h[nh].value = req->headers[nh].value;
		h[nh].order = nh;
	}
	qsort(h, nh, sizeof(*h), cmp_hdr);

	if (req->nparams) {
		q = calloc(req->nparams, sizeof(*q));
		if (!q)
			goto out;
	}
	for (nq = 0; nq < req->nparams; nq++) {
		if (!req->params[nq].name || !req->params[nq].value)
			goto einval;
		q[nq].name = encode_dup(req->params[nq].name, 0);
		q[nq].value = encode_dup(req->params[nq].value, 0);
		if (!q[nq].name || !q[nq].value) {
			nq++;
			goto out;
		}
	}
	if (nq)
		qsort(q, nq, sizeof(*q), cmp_qp);

	path = encode_dup(req->path, 1);
	if (!path)
		goto out;

	/* The canonical request. */
	sb_str(&c, req->method);
	sb_str(&c, "\n");
	sb_str(&c, path[0] ? path : "/");
	sb_str(&c, "\n");
	for (size_t i = 0; i < nq; i++) {
		if (i)
			sb_str(&c, "&");
		sb_str(&c, q[i].name);
		sb_str(&c, "=");
		sb_str(&c, q[i].value);
	}
	sb_str(&c, "\n");
	for (size_t i = 0; i < nh; i++) {
		if (i && !strcmp(h[i].name, h[i - 1].name)) {
			sb_str(&c, ",");
		} else {
			if (i)
				sb_str(&c, "\n");
			sb_str(&c, h[i].name);
			sb_str(&c, ":");
			if (sh.len)
				sb_str(&sh, ";");
			sb_str(&sh, h[i].name);
		}
		add_value(&c, h[i].value);
	}
	sb_str(&c, "\n\n");
	sb_str(&c, sh.p ? sh.p : "");
	sb_str(&c, "\n");
	sb_str(&c, req->payload_sha256);
	if ((err = c.err ? c.err : sh.err))
		goto out;

	/* The string to sign, and the signature. */
	bfs_sigv4_sha256_hex(c.p, c.len, hash);
	sb_str(&sts, "AWS4-HMAC-SHA256\n");
	sb_str(&sts, req->amz_date);
	sb_str(&sts, "\n");
	sb_str(&sts, date);
	sb_str(&sts, "/");
	sb_str(&sts, key->region);
	sb_str(&sts, "/");
	sb_str(&sts, key->service);
	sb_str(&sts, "/aws4_request\n");
	sb_str(&sts, hash);
	sb_str(&k, "AWS4");
	sb_str(&k, key->secret_key);
	if ((err = sts.err ? sts.err : k.err))
		goto out;
	hmac(k.p, k.len, date, kd);
	hmac(kd, 32, key->region, kr);
	hmac(kr, 32, key->service, ks);
	hmac(ks, 32, "aws4_request", kk);
	hmac(kk, 32, sts.p, sg);
	for (int i = 0; i < 32; i++)
		snprintf(sig + 2 * i, 3, "%02x", sg[i]);

	err = -ENAMETOOLONG;
	if (snprintf(authz, BFS_SIGV4_AUTH_MAX,
		     "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, "
		     "SignedHeaders=%s, Signature=%s",
		     key->access_key, date, key->region, key->service,
		     sh.p ? sh.p : "", sig) >= BFS_SIGV4_AUTH_MAX)
		goto out;
	if (creq && snprintf(creq, creq_max, "%s", c.p) >= (int)creq_max)
		goto out;
	err = 0;
	goto out;
einval:
	err = -EINVAL;
out:
	/* The derived keys are secrets too: cleared before they go. */
	OPENSSL_cleanse(kd, sizeof(kd));
	OPENSSL_cleanse(kr, sizeof(kr));
	OPENSSL_cleanse(ks, sizeof(ks));
	OPENSSL_cleanse(kk, sizeof(kk));
	if (k.p)
		OPENSSL_cleanse(k.p, k.cap);
	free(k.p);
	free(sts.p);
	free(sh.p);
	free(c.p);
	free(path);
	for (size_t i = 0; i < nq; i++) {
		free(q[i].name);
		free(q[i].value);
	}
	free(q);
	for (size_t i = 0; i < nh; i++)
		free(h[i].name);
	return err;
}
