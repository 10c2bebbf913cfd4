/*
 * shardcache.c - the node-local shard cache (see shardcache.h): the lock,
 * what is already whole, the parallel fetch of the rest, the commit order
 * (data, then its meta), and the removal of what is no longer listed.
 *
 * DESIGN: the syncing thread lists, decides, then hands parts (object,
 * offset, length) to `parallel` fetch threads through f->lock; each thread
 * reads its part into its own buffer and pwrites it into the object's tmp
 * file.  The thread that writes an object's last part commits it.  The
 * syncing thread waits on f->cond, reporting progress, until all parts are
 * done or one failed (then no new part is handed out).
 */
#include "engine/storage/shardcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/storage/sigv4.h"

typedef struct {
	const bfs_storage_object *o;
	int fd;
	uint64_t parts_left; /* protected by fetch.lock */
} want;

typedef struct {
	bfs_storage *st;
	const char *base;      /* the source's folder */
	want *w;
	size_t nw, next_w;     /* protected by lock */
	uint64_t next_off;     /* protected by lock */
	uint64_t part;
	pthread_mutex_t lock;
	pthread_cond_t cond;   /* a part ended */
	unsigned running;      /* protected by lock */
	int err;               /* protected by lock: the first failure */
	char errmsg[BFS_ERRMSG_MAX]; /* protected by lock */
	bfs_shardcache_stats *stats; /* fetched, bytes_fetched: under lock */
	uint64_t bytes_total;
} fetch;

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* mkdir -p of the folders above path (not path itself). */
static int mkparents(const char *path)
{
	char p[4096];
	size_t n = strlen(path);

	if (n >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, path, n + 1);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

/* A listed name is safe to use as a path below data/. */
static int name_ok(const char *n)
{
	const char *s = n;

	if (!*n || *n == '/' || strlen(n) > 1024)
		return 0;
	while (*s) {
		const char *e = strchr(s, '/');
		size_t len = e ? (size_t)(e - s) : strlen(s);

		if (!len || (len == 1 && s[0] == '.') ||
		    (len == 2 && s[0] == '.' && s[1] == '.'))
			return 0;
		if (!e)
			break;
		s = e + 1;
		if (!*s)
			return 0;
	}
	return 1;
}

/* 1 when data/NAME is whole and of o's identity (meta/NAME says so and
 * the size matches), else 0. */
static int is_whole(const char *base, const bfs_storage_object *o)
{
	char path[4096], line[300], want_line[300];
	struct stat st;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof(path), "%s/data/%s", base, o->name);
	if (stat(path, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != o->size)
		return 0;
	snprintf(path, sizeof(path), "%s/meta/%s", base, o->name);
	f = fopen(path, "r");
	if (!f)
		return 0;
	snprintf(want_line, sizeof(want_line), "%llu %s\n",
		 (unsigned long long)o->size, o->etag);
	if (fgets(line, sizeof(line), f) && !strcmp(line, want_line))
		ok = 1;
	fclose(f);
	return ok;
}

/* The commit of a fetched object: data first, then the meta that vouches
 * for it; the old meta goes before anything else moves. */
static int commit(fetch *f, want *w, char *errmsg)
{
	char tmp[4096], data[4096], meta[4096], mtmp[4096];
	size_t idx = (size_t)(w - f->w);
	int fd, err = 0;
	FILE *m;

	snprintf(tmp, sizeof(tmp), "%s/tmp/%zu", f->base, idx);
	snprintf(data, sizeof(data), "%s/data/%s", f->base, w->o->name);
	snprintf(meta, sizeof(meta), "%s/meta/%s", f->base, w->o->name);
	snprintf(mtmp, sizeof(mtmp), "%s/tmp/%zu.meta", f->base, idx);
	if (fsync(w->fd))
		err = -errno;
	close(w->fd);
	w->fd = -1;
	if (err)
		goto fail;
	if (unlink(meta) && errno != ENOENT) {
		err = -errno;
		goto fail;
	}
	if ((err = mkparents(data)) || (err = mkparents(meta)))
		goto fail;
	if (rename(tmp, data)) {
		err = -errno;
		goto fail;
	}
	fd = open(mtmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || !(m = fdopen(fd, "w"))) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		goto fail;
	}
	fprintf(m, "%llu %s\n", (unsigned long long)w->o->size, w->o->etag);
	if (fflush(m) || fsync(fileno(m)))
		err = -errno;
	fclose(m);
	if (!err && rename(mtmp, meta))
		err = -errno;
	if (!err)
		return 0;
fail:
	bfs_seterr(errmsg, "shard cache %s: %s: %s", f->base, w->o->name,
		   strerror(-err));
	return err;
}

static void *fetch_main(void *arg)
{
	fetch *f = arg;
	char *buf = malloc(f->part);
	char errmsg[BFS_ERRMSG_MAX];

	pthread_mutex_lock(&f->lock);
	if (!buf && !f->err)
		f->err = -ENOMEM;
	for (;;) {
		want *w;
		uint64_t off, len;
		int err;

		/* The next part: [next_off, +part) of w[next_w]; an empty
		 * object is one part of no bytes (next_off 1 once handed). */
		while (f->next_w < f->nw) {
			uint64_t size = f->w[f->next_w].o->size;

			if (f->next_off < size || (!size && !f->next_off))
				break;
			f->next_w++;
			f->next_off = 0;
		}
		if (f->err || f->next_w >= f->nw)
			break;
		w = &f->w[f->next_w];
		off = f->next_off;
		len = w->o->size - off < f->part ? w->o->size - off : f->part;
		f->next_off = w->o->size ? off + len : 1;
		pthread_mutex_unlock(&f->lock);

		errmsg[0] = '\0';
		err = len ? bfs_storage_read(f->st, w->o, off, buf, (size_t)len, errmsg)
			  : 0;
		if (!err && len) {
			for (uint64_t done = 0; done < len;) {
				ssize_t k = pwrite(w->fd, buf + done, len - done,
						   (off_t)(off + done));

				if (k < 0 && errno == EINTR)
					continue;
				if (k <= 0) {
					err = k < 0 ? -errno : -EIO;
					bfs_seterr(errmsg, "shard cache %s: writing %s: %s",
						   f->base, w->o->name, strerror(-err));
					break;
				}
				done += (uint64_t)k;
			}
		}
		pthread_mutex_lock(&f->lock);
		if (!err) {
			f->stats->bytes_fetched += len;
			w->parts_left--;
			if (!w->parts_left) {
				pthread_mutex_unlock(&f->lock);
				err = commit(f, w, errmsg);
				pthread_mutex_lock(&f->lock);
				if (!err)
					f->stats->fetched++;
			}
		}
		if (err && !f->err) {
			f->err = err;
			snprintf(f->errmsg, sizeof(f->errmsg), "%s", errmsg);
		}
		pthread_cond_broadcast(&f->cond);
	}
	f->running--;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	free(buf);
	return NULL;
}

/* ---- the lock ----------------------------------------------------------- */

static int take_lock(const char *base, unsigned wait_s, int *out, char *errmsg)
{
	char path[4096], pidtxt[32];
	double until = now_s() + wait_s;
	int fd;

	snprintf(path, sizeof(path), "%s/lock", base);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX | LOCK_NB)) {
		if (errno != EWOULDBLOCK && errno != EINTR) {
			int err = -errno;

			close(fd);
			return err;
		}
		if (now_s() >= until) {
			char stat_path[64], st[512] = "", state = '?';
			ssize_t k = pread(fd, pidtxt, sizeof(pidtxt) - 1, 0);
			long pid = k > 0 ? (pidtxt[k] = '\0', strtol(pidtxt, NULL, 10)) : 0;
			FILE *sf;

			snprintf(stat_path, sizeof(stat_path), "/proc/%ld/stat", pid);
			if (pid > 0 && (sf = fopen(stat_path, "r"))) {
				if (fgets(st, sizeof(st), sf)) {
					char *rp = strrchr(st, ')');

					if (rp && rp[1] == ' ')
						state = rp[2];
				}
				fclose(sf);
			}
			bfs_seterr(errmsg, "shard cache %s is being filled by process "
				   "%ld%s, which held it for more than %u s; try again "
				   "when it has finished, or use another --shard-cache",
				   base, pid, state == 'T' || state == 't'
				   ? " (stopped: state T; kill -CONT it)" : "", wait_s);
			close(fd);
			return -EWOULDBLOCK;
		}
		usleep(100000);
	}
	snprintf(pidtxt, sizeof(pidtxt), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) == 0)
		(void)!pwrite(fd, pidtxt, strlen(pidtxt), 0);
	*out = fd;
	return 0;
}

/* ---- what is no longer listed ------------------------------------------ */

static const bfs_storage_object *g_objs; /* for the nftw callbacks below: */
static size_t g_nobjs;                   /* one sync at a time per process */
static size_t g_rootlen;
static uint64_t g_removed;

static int cmp_key(const void *k, const void *o)
{
	return strcmp(k, ((const bfs_storage_object *)o)->name);
}

static int sweep_one(const char *path, const struct stat *sb, int flag,
		     struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (flag == FTW_F && strlen(path) > g_rootlen &&
	    !bsearch(path + g_rootlen, g_objs, g_nobjs, sizeof(*g_objs), cmp_key)) {
		if (unlink(path) == 0)
			g_removed++;
	} else if (flag == FTW_DP && strlen(path) > g_rootlen) {
		rmdir(path); /* only when empty */
	}
	return 0;
}

static void sweep(const char *dir, const bfs_storage_object *objs, size_t n,
		  uint64_t *removed)
{
	g_objs = objs;
	g_nobjs = n;
	g_rootlen = strlen(dir) + 1;
	g_removed = 0;
	nftw(dir, sweep_one, 16, FTW_PHYS | FTW_DEPTH);
	if (removed)
		*removed += g_removed;
}

static void empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[4096];

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	closedir(d);
}

/* ---- sync --------------------------------------------------------------- */

int bfs_shardcache_sync(bfs_storage *st, const bfs_shardcache_opts *o,
			char *root, size_t root_max, bfs_shardcache_stats *stats,
			char *errmsg)
{
	bfs_shardcache_stats local;
	bfs_storage_object *objs = NULL;
	char base[4096], path[4096], hash[65];
	size_t n = 0;
	uint64_t total = 0, need = 0, ours = 0, limit;
	unsigned parallel = o->parallel ? o->parallel : 8;
	fetch f;
	pthread_t *tids = NULL;
	unsigned started = 0;
	double t0 = now_s();
	int lockfd = -1, err;
	FILE *sf;

	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof(*stats));
	memset(&f, 0, sizeof(f));
	bfs_sigv4_sha256_hex(bfs_storage_url(st), strlen(bfs_storage_url(st)), hash);
	hash[16] = '\0';
	if (snprintf(base, sizeof(base), "%s/%s", o->dir, hash) >= (int)sizeof(base))
		return -ENAMETOOLONG;
	snprintf(path, sizeof(path), "%s/tmp/x", base);
	if ((err = mkparents(path)))
		goto dir_fail;
	snprintf(path, sizeof(path), "%s/data/x", base);
	if ((err = mkparents(path)))
		goto dir_fail;
	snprintf(path, sizeof(path), "%s/meta/x", base);
	if ((err = mkparents(path)))
		goto dir_fail;
	snprintf(path, sizeof(path), "%s/source", base);
	if ((sf = fopen(path, "w"))) {
		fprintf(sf, "%s\n", bfs_storage_url(st));
		fclose(sf);
	}
	if ((err = take_lock(base, o->lock_wait_s ? o->lock_wait_s : 600, &lockfd,
			     errmsg)))
		return err;

	if ((err = bfs_storage_list(st, &objs, &n, errmsg)))
		goto out;
	stats->objects = n;
	f.w = calloc(n ? n : 1, sizeof(*f.w));
	if (!f.w) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (!name_ok(objs[i].name)) {
			err = -EINVAL;
			bfs_seterr(errmsg, "%s: object \"%.300s\" has a name that is "
				   "no safe relative path (empty, '.' or '..' parts); "
				   "rename it", bfs_storage_url(st), objs[i].name);
			goto out;
		}
		total += objs[i].size;
		if (is_whole(base, &objs[i])) {
			stats->hits++;
			ours += objs[i].size;
		} else {
			f.w[f.nw].o = &objs[i];
			f.w[f.nw].fd = -1;
			f.nw++;
			need += objs[i].size;
		}
	}
	{
		struct statvfs vfs;
		uint64_t avail = statvfs(base, &vfs) ? 0
			       : (uint64_t)vfs.f_bavail * vfs.f_frsize;

		limit = o->max_bytes ? o->max_bytes : (avail / 10 * 9 + ours);
		if (total > limit || need > avail) {
			err = -ENOSPC;
			bfs_seterr(errmsg, "%s holds %.1f MiB in %zu objects, more than "
				   "the shard cache %s can take (%s %.1f MiB, %.1f MiB "
				   "free on its file system); give --shard-cache-size "
				   "or another --shard-cache (streaming through a cache "
				   "smaller than the dataset is not supported yet)",
				   bfs_storage_url(st), total / 1048576.0, n, o->dir,
				   o->max_bytes ? "--shard-cache-size" : "limit",
				   limit / 1048576.0, avail / 1048576.0);
			goto out;
		}
	}

	/* Objects no longer listed, and a crashed sync's leftovers, go. */
	snprintf(path, sizeof(path), "%s/data", base);
	sweep(path, objs, n, &stats->removed);
	snprintf(path, sizeof(path), "%s/meta", base);
	sweep(path, objs, n, NULL);
	snprintf(path, sizeof(path), "%s/tmp", base);
	empty_dir(path);

	if (f.nw) {
		pthread_mutex_init(&f.lock, NULL);
		pthread_cond_init(&f.cond, NULL);
		f.st = st;
		f.base = base;
		f.part = o->part_bytes ? o->part_bytes : (4u << 20);
		f.stats = stats;
		f.bytes_total = need;
		for (size_t i = 0; i < f.nw; i++) {
			want *w = &f.w[i];

			snprintf(path, sizeof(path), "%s/tmp/%zu", base, i);
			w->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (w->fd < 0 || ftruncate(w->fd, (off_t)w->o->size)) {
				err = -errno;
				bfs_seterr(errmsg, "shard cache %s: %s", path,
					   strerror(errno));
				goto join;
			}
			w->parts_left = w->o->size ? (w->o->size + f.part - 1) / f.part
						   : 1;
		}
		tids = calloc(parallel, sizeof(*tids));
		if (!tids) {
			err = -ENOMEM;
			goto join;
		}
		pthread_mutex_lock(&f.lock);
		for (; started < parallel && started < need / f.part + f.nw; started++) {
			if (pthread_create(&tids[started], NULL, fetch_main, &f))
				break;
			f.running++;
		}
		while (f.running) {
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 100000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&f.cond, &f.lock, &until);
			if (o->progress) {
				bfs_shardcache_stats snap = *stats;

				pthread_mutex_unlock(&f.lock);
				o->progress(o->ctx, &snap, need);
				pthread_mutex_lock(&f.lock);
			}
		}
		err = f.err;
		if (err)
			bfs_seterr(errmsg, "%s", f.errmsg);
		pthread_mutex_unlock(&f.lock);
	join:
		for (unsigned i = 0; i < started; i++)
			pthread_join(tids[i], NULL);
		free(tids);
		for (size_t i = 0; i < f.nw; i++)
			if (f.w[i].fd >= 0)
				close(f.w[i].fd);
		snprintf(path, sizeof(path), "%s/tmp", base);
		empty_dir(path);
		pthread_cond_destroy(&f.cond);
		pthread_mutex_destroy(&f.lock);
		if (err)
			goto out;
	}
	stats->bytes_on_disk = total;
	if (snprintf(root, root_max, "%s/data", base) >= (int)root_max)
		err = -ENAMETOOLONG;
out:
	stats->seconds = now_s() - t0;
	if (o->progress && !err)
		o->progress(o->ctx, stats, need);
	free(f.w);
	bfs_storage_objects_free(objs, n);
	if (lockfd >= 0)
		close(lockfd);
	return err;
dir_fail:
	bfs_seterr(errmsg, "shard cache %s: %s", o->dir, strerror(-err));
	return err;
}
