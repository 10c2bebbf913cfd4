/*
 * storage.h - the one interface to where shards are kept: list the objects
 * of a source, each with its identity (size, ETag), and read a range of
 * one.  s3:// (s3.h), http(s):// lists in WebDataset's brace notation (or
 * given URL by URL: opts.urls), and a local folder implement it; the shard cache (shardcache.h) reads
 * through it.
 *
 * A local folder's objects are its regular files, every level down (names
 * with '/'; hidden names left out); what stands in for a file's ETag is
 * made of its inode number, mtime and ctime (what bfs_shard_stamp checks),
 * so a read of a file rewritten since it was listed fails with -ESTALE, as
 * an S3 read of a replaced object does.
 *
 * A source URL is parsed once at open; what bfs_storage_url returns is the
 * URL as the user gave it, which never holds a credential (batchfs takes
 * none from URLs and refuses a URL with a user:password@ part).
 * Threads: any, concurrently, between open and close.
 */
#ifndef BFS_STORAGE_H
#define BFS_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/http.h"

typedef struct bfs_storage bfs_storage;

typedef struct {
	char *name;       /* '/'-separated, relative to the source's root */
	uint64_t size;
	char etag[128];   /* quotes kept; "" when the server sends none */
} bfs_storage_object;

typedef struct {
	bfs_http_opts http;  /* retries, deadlines, connections, TLS */
	const char *region;  /* NULL: AWS_REGION, AWS_DEFAULT_REGION */
	const char *endpoint;/* NULL: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL */
	int addressing;      /* BFS_S3_* of s3.h */
	int anonymous;       /* sign nothing */
	/* An http(s) source given as a list of URLs rather than a pattern (a
	 * wids shard index, fs/wids.h): nurls absolute http(s) URLs, given
	 * once each; the url opened only names the source.  sizes (or NULL):
	 * the size to take for urls[i] when its HEAD says none (-1: none
	 * known).  Read at open only (copied). */
	const char *const *urls;
	const int64_t *sizes;
	size_t nurls;
} bfs_storage_opts;

/* 1 when s names a remote source this interface opens (s3://, http://,
 * https://), else 0. */
int bfs_storage_is_url(const char *s);

/*
 * Open the source at url: an s3://, http:// or https:// URL, or else the
 * path of a local folder.  For s3, credentials are found (creds.h) and the
 * endpoint chosen, but nothing is sent yet.  Returns 0, -EINVAL (a
 * malformed URL or brace pattern; errmsg says what), -ENOENT (no
 * credentials; no such folder), -ENOTDIR, -ENOMEM.  Close with
 * bfs_storage_close.
 */
int bfs_storage_open(const char *url, const bfs_storage_opts *o,
		     bfs_storage **out, char *errmsg);
void bfs_storage_close(bfs_storage *st);

/* The URL as given (never a secret). */
const char *bfs_storage_url(bfs_storage *st);

/* The URL every object name is relative to, ending in '/': for s3://B/P
 * (or s3://B/P/) "s3://B/P/", for s3://B "s3://B/", for an http(s) list
 * the folder of its first brace ("https://h/wds/" for
 * https://h/wds/train-{000..146}.tar), for a list of URLs (opts.urls) the
 * longest folder they all share ("scheme://host/" at least).  Root + name is the object's URL.
 * It names remote shards in the caches (source.h, bfs_shard_stamp_remote):
 * two spellings of one source get one root.  Valid until close. */
const char *bfs_storage_root(bfs_storage *st);

/* The endpoint and the credentials' source, for the mount message: never
 * a secret. */
void bfs_storage_describe(bfs_storage *st, char *buf, size_t n);

/*
 * Every object of the source, sorted bytewise by name, in a malloc'd
 * array freed with bfs_storage_objects_free.  s3: the listing of the
 * prefix; http: every URL of the pattern, each asked for its size and
 * ETag (HEAD, opts.http.connections at once); a folder: its files.
 * Errors: -ENOENT (no such bucket, or no object: errmsg says which),
 * -EACCES, -EIO/-ETIMEDOUT, -EPROTO, -ENOMEM.
 */
int bfs_storage_list(bfs_storage *st, bfs_storage_object **objs, size_t *n,
		     char *errmsg);
void bfs_storage_objects_free(bfs_storage_object *objs, size_t n);

/*
 * The identity (size, ETag) of the object `name`, relative to the source's
 * root, whether or not the listing has it (a sidecar index beside a brace
 * pattern's shards): s3 and http(s) ask with HEAD, a folder with stat.
 * 0 with *obj filled (obj->name a malloc'd copy of name that the caller
 * frees with free()); -ENOENT when
 * there is none (404; no such file); the errors of http.h (errmsg says
 * which).
 */
int bfs_storage_stat(bfs_storage *st, const char *name, bfs_storage_object *obj,
		     char *errmsg);

/* Bytes [off, off + len) of obj, exactly, checked against its ETag:
 * -ESTALE when the object was replaced since it was listed; -ERANGE past
 * its end; the errors of http.h (errmsg names the object, the attempts,
 * the last status and cause). */
int bfs_storage_read(bfs_storage *st, const bfs_storage_object *obj,
		     uint64_t off, void *buf, size_t len, char *errmsg);

/* The same bytes handed to sink in pieces as they arrive, each with the
 * object offset of its first byte, in order, every byte once (a read
 * resumed after a reset goes on where it broke): a body of any size
 * through a bounded buffer.  sink returns 0, or an error that ends the
 * read with it.  sink runs in the calling thread and must not call into
 * st. */
int bfs_storage_read_to(bfs_storage *st, const bfs_storage_object *obj,
			uint64_t off, uint64_t len,
			int (*sink)(void *ctx, uint64_t off, const void *p, size_t n),
			void *ctx, char *errmsg);

/* Write the object NAME (relative to the source's root) whole, or remove
 * it.  s3:// only: -EOPNOTSUPP for http(s).  Errors as s3.h's. */
int bfs_storage_put(bfs_storage *st, const char *name, const void *data,
		    size_t len, char *errmsg);
int bfs_storage_delete(bfs_storage *st, const char *name, char *errmsg);

/* End every request under way and to come with -ECANCELED (http.h
 * bfs_http_cancel; a folder's reads are not cancelled: they do not wait
 * on a network).  For a mount that is ending.  Any thread. */
void bfs_storage_cancel(bfs_storage *st);

/* The counters of the requests made so far (a folder: its reads and
 * bytes, the rest 0). */
void bfs_storage_stats(bfs_storage *st, bfs_http_stats *out);

/*
 * Expand WebDataset's brace notation: "a-{000..002}.tar" gives a-000.tar,
 * a-001.tar, a-002.tar (zero-padded to the width written), "{x,y}" gives x
 * and y; several braces multiply.  At most max_out results (malloc'd
 * strings in *out, freed by the caller with free() each and the array).
 * Returns the count, or -EINVAL (an unbalanced or empty brace, a range
 * whose end is before its start, more than max_out) or -ENOMEM.
 */
int bfs_storage_expand_braces(const char *pattern, char ***out,
			      size_t max_out);

#endif
