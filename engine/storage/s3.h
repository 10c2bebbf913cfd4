/*
 * s3.h - an S3 client for what a mount needs: list a prefix
 * (ListObjectsV2, every page), an object's identity (size, ETag), a range
 * of it (with If-Match), and a whole object written (PUT).  Signed with
 * Signature Version 4 (sigv4.h) from the credentials of creds.h; every
 * request through http.h's retry policy.
 *
 * Endpoints the way the AWS tools choose them: opts.endpoint, else
 * AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's own
 * https://s3.REGION.amazonaws.com.  Region: opts.region, AWS_REGION,
 * AWS_DEFAULT_REGION, "us-east-1".  Addressing: virtual-hosted for AWS's
 * endpoint, path-style for any other (MinIO, Ceph, SeaweedFS, R2 and GCS
 * all take it), unless opts.addressing says otherwise.
 *
 * Threads: any, concurrently, between create and destroy.
 */
#ifndef BFS_S3_H
#define BFS_S3_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/creds.h"
#include "engine/storage/http.h"

typedef struct bfs_s3 bfs_s3;

enum { BFS_S3_AUTO, BFS_S3_PATH, BFS_S3_VIRTUAL };

typedef struct {
	const char *endpoint;  /* "http://127.0.0.1:8333"; NULL: see above */
	const char *region;
	int addressing;        /* BFS_S3_* */
	bfs_creds *creds;      /* borrowed; outlives the client */
	bfs_http *http;        /* borrowed; outlives the client */
} bfs_s3_opts;

typedef struct {
	char *key;         /* the whole key, bytes as S3 gave them */
	uint64_t size;
	char etag[128];    /* quotes kept: what If-Match sends back */
} bfs_s3_object;

/* Returns 0, -EINVAL (an endpoint that is no http(s) URL; errmsg says
 * which), or -ENOMEM. */
int bfs_s3_create(const bfs_s3_opts *o, bfs_s3 **out, char *errmsg);
void bfs_s3_destroy(bfs_s3 *s);

/* "http://127.0.0.1:8333 (path-style, region us-east-1)": for messages. */
const char *bfs_s3_describe(bfs_s3 *s);

/*
 * Every object under prefix in bucket, sorted bytewise by key, in a
 * malloc'd array (*objs, *n) freed with bfs_s3_objects_free.  Keys ending
 * in '/' (folder markers) are left out.  Errors are http.h's:
 * -EACCES, -ENOENT (no such bucket), -EIO/-ETIMEDOUT, -EPROTO (a listing
 * that does not parse), -ENOMEM.
 */
int bfs_s3_list(bfs_s3 *s, const char *bucket, const char *prefix,
		bfs_s3_object **objs, size_t *n, char *errmsg);
void bfs_s3_objects_free(bfs_s3_object *objs, size_t n);

/* An object's size and ETag (HEAD).  -ENOENT when there is none. */
int bfs_s3_head(bfs_s3 *s, const char *bucket, const char *key,
		uint64_t *size, char etag[128], char *errmsg);

/*
 * Bytes [off, off + len) of the object into buf, exactly, with If-Match
 * etag (when not NULL or ""): -ESTALE when the object was replaced.
 */
int bfs_s3_get(bfs_s3 *s, const char *bucket, const char *key,
	       const char *etag, uint64_t off, void *buf, size_t len,
	       char *errmsg);
/* The same range handed to sink as it arrives (http.h's bfs_http_req
 * sink), instead of into a buffer. */
int bfs_s3_get_to(bfs_s3 *s, const char *bucket, const char *key,
		  const char *etag, uint64_t off, uint64_t len,
		  int (*sink)(void *ctx, uint64_t off, const void *p, size_t n),
		  void *sink_ctx, char *errmsg);

/* Write an object whole (one PUT, up to 5 GiB). */
int bfs_s3_put(bfs_s3 *s, const char *bucket, const char *key,
	       const void *data, size_t len, char *errmsg);

/* Remove an object (DELETE; one that is not there is no error). */
int bfs_s3_delete(bfs_s3 *s, const char *bucket, const char *key,
		  char *errmsg);

#endif
