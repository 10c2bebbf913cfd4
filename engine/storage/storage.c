/*
 * storage.c - the storage interface (see storage.h) over its three kinds:
 * an S3 prefix (s3.h) and a list of http(s) URLs in brace notation, each
 * read with ranged GETs under http.h's retry policy, and a local folder
 * read with pread.
 */
#include "engine/storage/storage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/storage/creds.h"
#include "engine/storage/s3.h"

#define MAX_URLS 1000000

enum { KIND_S3, KIND_HTTP, KIND_LOCAL };

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
	int64_t *sizes;        /* a list's sizes when HEAD gives none, or NULL */
	size_t root_len;       /* names are urls[i] + root_len */
	unsigned connections;  /* HEADs at once while listing */
	/* local: root is the folder's absolute path and a '/' */
	_Atomic uint64_t lreads, lbytes; /* atomic: what bfs_storage_stats
					  * counts for a folder */
};

static int kind_of(const char *url)
{
	return !strncmp(url, "s3://", 5) ? KIND_S3
	     : bfs_storage_is_url(url) ? KIND_HTTP : KIND_LOCAL;
}

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

/* Where the path of http(s) URL u starts (its "/" after the host), or 0
 * when u is not http(s)://HOST/... or its host part holds a '@'. */
static size_t http_path_start(const char *u)
{
	const char *host, *cut;

	if (strncasecmp(u, "http://", 7) && strncasecmp(u, "https://", 8))
		return 0;
	host = strstr(u, "://") + 3;
	cut = strchr(host, '/');
	if (!cut || cut == host || memchr(host, '@', (size_t)(cut - host)))
		return 0;
	return (size_t)(cut - u);
}

/* An http(s) source given as a list (opts.urls): the URLs copied, each
 * checked, and the root the longest folder they share. */
static int open_list(bfs_storage *st, const bfs_storage_opts *o, char *errmsg)
{
	size_t n;

	if (!o->nurls || o->nurls > MAX_URLS) {
		bfs_seterr(errmsg, "%s: %zu URLs (1 to %d)", st->url, o->nurls, MAX_URLS);
		return -EINVAL;
	}
	if (!(st->urls = calloc(o->nurls, sizeof(*st->urls))) ||
	    (o->sizes && !(st->sizes = calloc(o->nurls, sizeof(*st->sizes)))))
		return -ENOMEM;
	for (size_t i = 0; i < o->nurls; i++) {
		if (!http_path_start(o->urls[i]) || strchr(o->urls[i], '{')) {
			bfs_seterr(errmsg, "%.300s: not http(s)://HOST/PATH (and batchfs "
				   "takes no credentials from a URL)", o->urls[i]);
			return -EINVAL;
		}
		if (!(st->urls[i] = strdup(o->urls[i])))
			return -ENOMEM;
		st->nurls++;
		if (st->sizes)
			st->sizes[i] = o->sizes[i];
	}
	/* the longest folder every URL starts with, "scheme://host/" at least */
	n = strlen(st->urls[0]);
	for (size_t i = 1; i < st->nurls; i++) {
		size_t k = 0;

		while (k < n && st->urls[i][k] == st->urls[0][k])
			k++;
		n = k;
	}
	while (n && st->urls[0][n - 1] != '/')
		n--;
	if (n < http_path_start(st->urls[0]) + 1) {
		bfs_seterr(errmsg, "%s: its URLs are on more than one host (%.200s and "
			   "others)", st->url, st->urls[0]);
		return -EINVAL;
	}
	for (size_t i = 0; i < st->nurls; i++)
		if (!st->urls[i][n]) {
			bfs_seterr(errmsg, "%s: %.300s names a folder", st->url, st->urls[i]);
			return -EINVAL;
		}
	st->root_len = n;
	return (st->root = strndup(st->urls[0], n)) ? 0 : -ENOMEM;
}

static int open_http(bfs_storage *st, const bfs_storage_opts *o, char *errmsg)
{
	const char *brace = strchr(st->url, '{');
	int n;

	if (!http_path_start(st->url)) {
		bfs_seterr(errmsg, "%s: not http(s)://HOST/PATH (and batchfs "
			   "takes no credentials from a URL)", st->url);
		return -EINVAL;
	}
	if (o->urls)
		return open_list(st, o, errmsg);
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

static int open_local(bfs_storage *st, char *errmsg)
{
	char real[PATH_MAX];
	struct stat sb;

	if (!realpath(st->url, real) || stat(real, &sb)) {
		int err = -errno;

		bfs_seterr(errmsg, "%s: %s", st->url, strerror(errno));
		return err;
	}
	if (!S_ISDIR(sb.st_mode)) {
		bfs_seterr(errmsg, "%s: not a directory", st->url);
		return -ENOTDIR;
	}
	if (asprintf(&st->root, "%s%s", real, strcmp(real, "/") ? "/" : "") < 0) {
		st->root = NULL;
		return -ENOMEM;
	}
	return 0;
}

int bfs_storage_open(const char *url, const bfs_storage_opts *o,
		     bfs_storage **out, char *errmsg)
{
	bfs_storage *st;
	bfs_http_opts ho;
	int err;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st || !(st->url = strdup(url))) {
		free(st);
		return -ENOMEM;
	}
	st->kind = kind_of(url);
	if (st->kind == KIND_LOCAL) {
		if ((err = open_local(st, errmsg)))
			goto fail;
		*out = st;
		return 0;
	}
	ho = o->http;
	if (!ho.ca_bundle && getenv("AWS_CA_BUNDLE") && *getenv("AWS_CA_BUNDLE"))
		ho.ca_bundle = getenv("AWS_CA_BUNDLE");
	if ((err = bfs_http_create(&ho, &st->http, errmsg)))
		goto fail;
	st->connections = ho.connections ? ho.connections : 16;
	err = st->kind == KIND_S3 ? open_s3(st, o, errmsg) : open_http(st, o, errmsg);
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
	free(st->sizes);
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
	} else if (st->kind == KIND_LOCAL) {
		snprintf(buf, n, "a local folder");
	} else {
		snprintf(buf, n, "%zu URL%s", st->nurls, st->nurls == 1 ? "" : "s");
	}
}

void bfs_storage_cancel(bfs_storage *st)
{
	if (st->http)
		bfs_http_cancel(st->http);
}

void bfs_storage_stats(bfs_storage *st, bfs_http_stats *out)
{
	if (st->kind == KIND_LOCAL) {
		memset(out, 0, sizeof(*out));
		out->requests = atomic_load(&st->lreads);
		out->bytes = atomic_load(&st->lbytes);
		return;
	}
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

/* The HEADs of an http(s) list, asked `connections` at a time: a list of
 * a thousand URLs is not a thousand round trips in a row. */
typedef struct {
	bfs_storage *st;
	bfs_storage_object *v;
	pthread_mutex_t lock;
	size_t next;           /* protected by lock */
	int err;               /* protected by lock: the first failure */
	char errmsg[BFS_ERRMSG_MAX]; /* protected by lock */
} heads;

static void *head_main(void *arg)
{
	heads *hd = arg;
	bfs_storage *st = hd->st;
	char errmsg[BFS_ERRMSG_MAX];

	for (;;) {
		http_req q = { NULL, 0, 0, NULL, 0 };
		bfs_http_req r = { .method = "HEAD", .prepare = http_prepare, .ctx = &q };
		bfs_http_resp resp;
		size_t i;
		int err;

		pthread_mutex_lock(&hd->lock);
		i = hd->next++;
		if (hd->err || i >= st->nurls) {
			pthread_mutex_unlock(&hd->lock);
			return NULL;
		}
		pthread_mutex_unlock(&hd->lock);
		q.url = r.what = st->urls[i];
		errmsg[0] = '\0';
		err = bfs_http_do(st->http, &r, &resp, errmsg);
		if (!err && !(hd->v[i].name = strdup(st->urls[i] + st->root_len)))
			err = -ENOMEM;
		if (!err) {
			/* a server that gives no size to HEAD: the list's */
			hd->v[i].size = !resp.total && st->sizes && st->sizes[i] >= 0
				      ? (uint64_t)st->sizes[i] : resp.total;
			snprintf(hd->v[i].etag, sizeof(hd->v[i].etag), "%s", resp.etag);
			continue;
		}
		pthread_mutex_lock(&hd->lock);
		if (!hd->err) {
			hd->err = err;
			snprintf(hd->errmsg, sizeof(hd->errmsg), "%s", errmsg);
		}
		pthread_mutex_unlock(&hd->lock);
	}
}

static int list_http(bfs_storage *st, unsigned connections,
		     bfs_storage_object **objs, size_t *n, char *errmsg)
{
	heads hd = { .st = st, .lock = PTHREAD_MUTEX_INITIALIZER };
	unsigned nt = connections ? connections : 1, started = 0;
	pthread_t tids[64];

	if (nt > 64)
		nt = 64;
	if (nt > st->nurls)
		nt = (unsigned)st->nurls;
	if (!(hd.v = calloc(st->nurls ? st->nurls : 1, sizeof(*hd.v))))
		return -ENOMEM;
	for (; started + 1 < nt; started++)
		if (pthread_create(&tids[started], NULL, head_main, &hd))
			break;
	head_main(&hd); /* this thread is one of them */
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_destroy(&hd.lock);
	if (hd.err) {
		bfs_seterr(errmsg, "%s", hd.errmsg);
		bfs_storage_objects_free(hd.v, st->nurls);
		return hd.err;
	}
	qsort(hd.v, st->nurls, sizeof(*hd.v), cmp_name);
	*objs = hd.v;
	*n = st->nurls;
	return 0;
}

/* ---- a local folder ------------------------------------------------------ */

/* What stands in for an ETag in a folder: what changes whenever the
 * file's bytes can have (bfs_shard_stamp's inode number, mtime, ctime). */
static void local_etag(const struct stat *sb, char *out, size_t cap)
{
	snprintf(out, cap, "\"L%llx.%llx.%llx\"", (unsigned long long)sb->st_ino,
		 (unsigned long long)(sb->st_mtim.tv_sec * 1000000000ll + sb->st_mtim.tv_nsec),
		 (unsigned long long)(sb->st_ctim.tv_sec * 1000000000ll + sb->st_ctim.tv_nsec));
}

typedef struct {
	bfs_storage_object *v;
	size_t n, cap;
} objvec;

/* Every regular file under root + rel (rel "" or ending in '/'), hidden
 * names (a part starting with '.') left out, into ov.  0 or -errno. */
static int walk_local(const char *root, const char *rel, objvec *ov,
		      unsigned depth)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int err = 0;

	if (depth > 64)
		return 0; /* a loop of bind mounts: deep enough */
	if (snprintf(path, sizeof(path), "%s%s", root, rel) >= (int)sizeof(path))
		return 0;
	if (!(d = opendir(path)))
		return depth ? 0 : -errno;
	while (!err && (de = readdir(d))) {
		char name[PATH_MAX], full[PATH_MAX];
		struct stat sb;

		if (de->d_name[0] == '.')
			continue;
		if (snprintf(name, sizeof(name), "%s%s", rel, de->d_name) >= (int)sizeof(name) ||
		    snprintf(full, sizeof(full), "%s%s", root, name) >= (int)sizeof(full) ||
		    stat(full, &sb))
			continue;
		if (S_ISDIR(sb.st_mode)) {
			strcat(name, "/");
			err = walk_local(root, name, ov, depth + 1);
			continue;
		}
		if (!S_ISREG(sb.st_mode))
			continue;
		if (ov->n == ov->cap) {
			size_t cap = ov->cap ? ov->cap * 2 : 64;
			bfs_storage_object *nv = realloc(ov->v, cap * sizeof(*nv));

			if (!nv) {
				err = -ENOMEM;
				break;
			}
			ov->v = nv;
			ov->cap = cap;
		}
		memset(&ov->v[ov->n], 0, sizeof(ov->v[ov->n]));
		if (!(ov->v[ov->n].name = strdup(name))) {
			err = -ENOMEM;
			break;
		}
		ov->v[ov->n].size = (uint64_t)sb.st_size;
		local_etag(&sb, ov->v[ov->n].etag, sizeof(ov->v[ov->n].etag));
		ov->n++;
	}
	closedir(d);
	return err;
}

static int list_local(bfs_storage *st, bfs_storage_object **objs, size_t *n,
		      char *errmsg)
{
	objvec ov = { 0 };
	int err = walk_local(st->root, "", &ov, 0);

	if (!err && !ov.n) {
		err = -ENOENT;
		bfs_seterr(errmsg, "%s: no files in this folder", st->url);
	} else if (err) {
		bfs_seterr(errmsg, "%s: %s", st->url, strerror(-err));
	}
	if (err) {
		bfs_storage_objects_free(ov.v, ov.n);
		return err;
	}
	qsort(ov.v, ov.n, sizeof(*ov.v), cmp_name);
	*objs = ov.v;
	*n = ov.n;
	return 0;
}

/* Open obj in the folder, checked to be the file that was listed: its
 * descriptor, or -ENOENT/-ESTALE/-errno with errmsg. */
static int local_open(bfs_storage *st, const bfs_storage_object *obj,
		      char *errmsg)
{
	char path[PATH_MAX], etag[128];
	struct stat sb;
	int fd, err;

	if (snprintf(path, sizeof(path), "%s%s", st->root, obj->name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb)) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		bfs_seterr(errmsg, "%s: %s", path, strerror(-err));
		return err;
	}
	local_etag(&sb, etag, sizeof(etag));
	if ((uint64_t)sb.st_size != obj->size || strcmp(etag, obj->etag)) {
		close(fd);
		bfs_seterr(errmsg, "%s: changed since it was listed", path);
		return -ESTALE;
	}
	return fd;
}

/* Bytes [off, off + len) of the file on fd to buf, or (buf NULL) in
 * pieces to sink.  0, -EIO (the file ends first), -errno. */
static int local_copy(bfs_storage *st, int fd, uint64_t off, uint64_t len,
		      void *buf, int (*sink)(void *, uint64_t, const void *, size_t),
		      void *ctx)
{
	uint8_t piece[65536];
	uint64_t done = 0;

	while (done < len) {
		size_t want = buf ? (size_t)(len - done)
			    : (size_t)(len - done < sizeof(piece) ? len - done : sizeof(piece));
		ssize_t k = pread(fd, buf ? (uint8_t *)buf + done : piece, want,
				  (off_t)(off + done));
		int err;

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		if (!buf && (err = sink(ctx, off + done, piece, (size_t)k)))
			return err;
		done += (uint64_t)k;
		atomic_fetch_add(&st->lbytes, (uint64_t)k);
	}
	return 0;
}

static int read_local(bfs_storage *st, const bfs_storage_object *obj,
		      uint64_t off, uint64_t len, void *buf,
		      int (*sink)(void *, uint64_t, const void *, size_t),
		      void *ctx, char *errmsg)
{
	int fd, err;

	if (!len)
		return 0;
	atomic_fetch_add(&st->lreads, 1);
	if (off > obj->size || len > obj->size - off) {
		bfs_seterr(errmsg, "%s%s: bytes %llu..%llu are past its end (%llu)",
			   st->root, obj->name, (unsigned long long)off,
			   (unsigned long long)(off + len), (unsigned long long)obj->size);
		return -ERANGE;
	}
	if ((fd = local_open(st, obj, errmsg)) < 0)
		return fd;
	err = local_copy(st, fd, off, len, buf, sink, ctx);
	close(fd);
	if (err)
		bfs_seterr(errmsg, "%s%s: %s", st->root, obj->name,
			   err == -EIO ? "shorter than it was listed" : bfs_strerror(err));
	return err;
}

/* ---- list and read, whatever the kind ------------------------------------ */

int bfs_storage_list(bfs_storage *st, bfs_storage_object **objs, size_t *n,
		     char *errmsg)
{
	bfs_s3_object *so;
	size_t sn, plen;
	int err;

	*objs = NULL;
	*n = 0;
	if (st->kind == KIND_LOCAL)
		return list_local(st, objs, n, errmsg);
	if (st->kind == KIND_HTTP)
		return list_http(st, st->connections, objs, n, errmsg);
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

static int read_any(bfs_storage *st, const bfs_storage_object *obj,
		    uint64_t off, uint64_t len, void *buf,
		    int (*sink)(void *, uint64_t, const void *, size_t),
		    void *ctx, char *errmsg)
{
	if (st->kind == KIND_LOCAL)
		return read_local(st, obj, off, len, buf, sink, ctx, errmsg);
	if (st->kind == KIND_S3) {
		char *key = s3_key(st, obj->name);
		int err;

		if (!key)
			return -ENOMEM;
		err = buf ? bfs_s3_get(st->s3, st->bucket, key, obj->etag, off, buf,
				       (size_t)len, errmsg)
			  : bfs_s3_get_to(st->s3, st->bucket, key, obj->etag, off,
					  len, sink, ctx, errmsg);
		free(key);
		return err;
	} else {
		char url[2048];
		http_req q = { url, off, len, obj->etag, 1 };
		bfs_http_req r = { .method = "GET", .prepare = http_prepare,
				   .ctx = &q, .what = url, .buf = buf,
				   .want = len, .range_off = off,
				   .sink = buf ? NULL : sink, .sink_ctx = ctx };

		if (!len)
			return 0;
		if (snprintf(url, sizeof(url), "%s%s", st->root, obj->name) >=
		    (int)sizeof(url))
			return -ENAMETOOLONG;
		return bfs_http_do(st->http, &r, NULL, errmsg);
	}
}

int bfs_storage_stat(bfs_storage *st, const char *name, bfs_storage_object *obj,
		     char *errmsg)
{
	int err;

	memset(obj, 0, sizeof(*obj));
	if (st->kind == KIND_LOCAL) {
		char path[PATH_MAX];
		struct stat sb;

		if (snprintf(path, sizeof(path), "%s%s", st->root, name) >= (int)sizeof(path))
			return -ENAMETOOLONG;
		if (stat(path, &sb) != 0) {
			err = -errno;
			if (err != -ENOENT)
				bfs_seterr(errmsg, "%s: %s", path, strerror(-err));
			return err;
		}
		if (!S_ISREG(sb.st_mode)) {
			bfs_seterr(errmsg, "%s: not a regular file", path);
			return -EINVAL;
		}
		obj->size = (uint64_t)sb.st_size;
		local_etag(&sb, obj->etag, sizeof(obj->etag));
	} else if (st->kind == KIND_S3) {
		char *key = s3_key(st, name);

		if (!key)
			return -ENOMEM;
		err = bfs_s3_head(st->s3, st->bucket, key, &obj->size, obj->etag, errmsg);
		free(key);
		if (err)
			return err;
	} else {
		char url[2048];
		http_req q = { url, 0, 0, NULL, 0 };
		bfs_http_req r = { .method = "HEAD", .prepare = http_prepare, .ctx = &q,
				   .what = url };
		bfs_http_resp resp;

		if (snprintf(url, sizeof(url), "%s%s", st->root, name) >= (int)sizeof(url))
			return -ENAMETOOLONG;
		if ((err = bfs_http_do(st->http, &r, &resp, errmsg)))
			return err;
		obj->size = resp.total;
		snprintf(obj->etag, sizeof(obj->etag), "%s", resp.etag);
	}
	return (obj->name = strdup(name)) ? 0 : -ENOMEM;
}

int bfs_storage_read(bfs_storage *st, const bfs_storage_object *obj,
		     uint64_t off, void *buf, size_t len, char *errmsg)
{
	return read_any(st, obj, off, len, buf, NULL, NULL, errmsg);
}

int bfs_storage_read_to(bfs_storage *st, const bfs_storage_object *obj,
			uint64_t off, uint64_t len,
			int (*sink)(void *ctx, uint64_t off, const void *p, size_t n),
			void *ctx, char *errmsg)
{
	return read_any(st, obj, off, len, NULL, sink, ctx, errmsg);
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
