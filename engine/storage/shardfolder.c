/*
 * shardfolder.c - a source's folder of the node-local shard cache (see
 * shardfolder.h): the layout, the trailer that proves an object whole,
 * the ledger and its lock, the per-object locks, and the recount that
 * makes the ledger true again after a crash.
 *
 * DESIGN: every change of room (a reservation, a commit that replaces a
 * stale file, an eviction, an abandoned fetch, a recount) happens with the
 * ledger's lock held, in this process (f->mutex) and across the node (the
 * OFD lock on byte 0 of `lock`), and makes the file change and the ledger
 * change together; so a recount, which walks data/ and tmp/ under the same
 * lock, always sees the files the ledger counts.  The system calls under
 * it are local and short (create, fallocate, rename, unlink); nothing
 * waits on the network or on another lock while holding it.
 */
#include "engine/storage/shardfolder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/storage/sigv4.h"

#define MAGIC "BFSSHRD1"
#define FOOTER 24          /* u64 size, u32 etag length, u32 CRC, magic */
#define LEDGER_WIDTH 21    /* "%020llu\n" */

struct bfs_shardfolder {
	char *path;            /* DIR/ID */
	uint64_t limit;
	unsigned lock_wait_ms;
	int lockfd;            /* `lock`: the OFD record locks */
	int spacefd;           /* `space`: the ledger */
	pthread_mutex_t mutex; /* the ledger in this process (OFD locks of
				* one descriptor do not exclude threads) */
	_Atomic uint64_t used; /* the ledger as last read or written */
	_Atomic uint64_t seq;  /* tmp/ names: f<pid>-<nonce>-<seq> */
	uint64_t nonce;        /* random at open: neither a second folder of
				* this process nor a dead process of the
				* same pid (a container's daemon is pid 7
				* every time) left that name */
};

/* What a file of n bytes takes on disk: its 4 KiB blocks, and one more
 * for what the file system keeps of it besides (ext4 counts an extent
 * tree's block in the file's blocks once it has more than four extents),
 * so that the blocks on disk never pass what the ledger counts. */
static uint64_t file_cost(uint64_t n)
{
	return (n + 4095) / 4096 * 4096 + 4096;
}

uint64_t bfs_shardfolder_cost(uint64_t size, size_t etag_len)
{
	return file_cost(size + etag_len + FOOTER);
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* mkdir -p of the folders above path (not path itself). */
static int mkparents(const char *path)
{
	char p[PATH_MAX];
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

/* ---- locks ---------------------------------------------------------------- */

static int ofd(int fd, int cmd, short type, off_t at)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = at,
			    .l_len = 1 };

	return fcntl(fd, cmd, &fl);
}

static off_t name_byte(const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
		h ^= *c;
		h *= 0x100000001b3ull;
	}
	return (off_t)(1 + (h & ((1ull << 40) - 1)));
}

/* The ledger's lock, in this process and on the node, with the deadline:
 * 0 and the ledger read into f->used, or -ETIMEDOUT. */
static int ledger_lock(bfs_shardfolder *f)
{
	double until = now_ms() + f->lock_wait_ms;
	char buf[LEDGER_WIDTH + 1];
	ssize_t k;

	pthread_mutex_lock(&f->mutex);
	while (ofd(f->lockfd, F_OFD_SETLK, F_WRLCK, 0)) {
		if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
			int err = -errno;

			pthread_mutex_unlock(&f->mutex);
			return err;
		}
		if (now_ms() >= until) {
			pthread_mutex_unlock(&f->mutex);
			return -ETIMEDOUT;
		}
		usleep(2000);
	}
	k = pread(f->spacefd, buf, LEDGER_WIDTH, 0);
	buf[k > 0 ? k : 0] = '\0';
	atomic_store(&f->used, strtoull(buf, NULL, 10));
	return 0;
}

static void ledger_unlock(bfs_shardfolder *f, uint64_t used)
{
	char buf[LEDGER_WIDTH + 1];

	snprintf(buf, sizeof(buf), "%020llu\n", (unsigned long long)used);
	(void)!pwrite(f->spacefd, buf, LEDGER_WIDTH, 0);
	atomic_store(&f->used, used);
	ofd(f->lockfd, F_OFD_SETLK, F_UNLCK, 0);
	pthread_mutex_unlock(&f->mutex);
}

int bfs_shardfolder_lock(bfs_shardfolder *f, const char *name)
{
	if (ofd(f->lockfd, F_OFD_SETLK, F_WRLCK, name_byte(name)) == 0)
		return 1;
	return errno == EAGAIN || errno == EACCES ? 0 : -errno;
}

void bfs_shardfolder_unlock(bfs_shardfolder *f, const char *name)
{
	ofd(f->lockfd, F_OFD_SETLK, F_UNLCK, name_byte(name));
}

int bfs_shardfolder_busy(bfs_shardfolder *f, const char *name)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = name_byte(name), .l_len = 1 };

	/* our own locks never conflict with our own descriptor: F_UNLCK
	 * back means nobody else has it */
	if (fcntl(f->lockfd, F_OFD_GETLK, &fl))
		return -errno;
	return fl.l_type != F_UNLCK;
}

/* ---- open and close ------------------------------------------------------- */

void bfs_shardfolder_id(const char *root, char id[17])
{
	char hash[65];

	bfs_sigv4_sha256_hex(root, strlen(root), hash);
	memcpy(id, hash, 16);
	id[16] = '\0';
}

int bfs_shardfolder_open(const char *dir, const char *root, uint64_t limit,
			 unsigned lock_wait_ms, bfs_shardfolder **out,
			 char *errmsg)
{
	bfs_shardfolder *f = calloc(1, sizeof(*f));
	char hash[17], p[PATH_MAX];
	FILE *sf;
	int err;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->lockfd = f->spacefd = -1;
	f->limit = limit;
	if (getrandom(&f->nonce, sizeof(f->nonce), 0) != sizeof(f->nonce))
		f->nonce = (uint64_t)(now_ms() * 1e3) ^ (uint64_t)(uintptr_t)f;
	f->lock_wait_ms = lock_wait_ms ? lock_wait_ms : 30000;
	pthread_mutex_init(&f->mutex, NULL);
	bfs_shardfolder_id(root, hash);
	if (asprintf(&f->path, "%s/%s", dir, hash) < 0) {
		f->path = NULL;
		err = -ENOMEM;
		goto fail;
	}
	snprintf(p, sizeof(p), "%s/data/x", f->path);
	if ((err = mkparents(p)))
		goto fail;
	snprintf(p, sizeof(p), "%s/tmp/x", f->path);
	if ((err = mkparents(p)))
		goto fail;
	snprintf(p, sizeof(p), "%s/lock", f->path);
	if ((f->lockfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		err = -errno;
		goto fail;
	}
	snprintf(p, sizeof(p), "%s/space", f->path);
	if ((f->spacefd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		err = -errno;
		goto fail;
	}
	snprintf(p, sizeof(p), "%s/source", f->path);
	if ((sf = fopen(p, "we"))) {
		fprintf(sf, "%s\n", root);
		fclose(sf);
	}
	*out = f;
	return 0;
fail:
	bfs_seterr(errmsg, "shard cache %s: %s", f->path ? f->path : dir,
		   strerror(-err));
	bfs_shardfolder_close(f);
	return err;
}

void bfs_shardfolder_close(bfs_shardfolder *f)
{
	if (!f)
		return;
	if (f->lockfd >= 0)
		close(f->lockfd);
	if (f->spacefd >= 0)
		close(f->spacefd);
	pthread_mutex_destroy(&f->mutex);
	free(f->path);
	free(f);
}

const char *bfs_shardfolder_path(const bfs_shardfolder *f) { return f->path; }
uint64_t bfs_shardfolder_limit(const bfs_shardfolder *f) { return f->limit; }
void bfs_shardfolder_set_limit(bfs_shardfolder *f, uint64_t limit) { f->limit = limit; }

uint64_t bfs_shardfolder_used(const bfs_shardfolder *f)
{
	return atomic_load(&((bfs_shardfolder *)f)->used);
}

/* ---- the trailer ------------------------------------------------------------ */

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t trailer_crc(uint64_t size, const char *etag, size_t len)
{
	uint8_t h[12];

	put_le(h, size, 8);
	put_le(h + 8, len, 4);
	return bfs_crc32c(bfs_crc32c(0, h, sizeof(h)), etag, len);
}

/* Is the file on fd (of st_size bytes) a whole object of size `size` and
 * ETag `etag`?  With etag NULL: a whole object of any identity, whose size
 * goes to *size_out. */
static int trailer_ok(int fd, uint64_t st_size, uint64_t size, const char *etag,
		      uint64_t *size_out)
{
	uint8_t foot[FOOTER];
	char tag[128];
	uint64_t got_size;
	uint32_t len;

	if (st_size < FOOTER ||
	    pread(fd, foot, FOOTER, (off_t)(st_size - FOOTER)) != FOOTER ||
	    memcmp(foot + 16, MAGIC, 8))
		return 0;
	got_size = get_le(foot, 8);
	len = (uint32_t)get_le(foot + 8, 4);
	if (len >= sizeof(tag) || got_size + len + FOOTER != st_size ||
	    pread(fd, tag, len, (off_t)got_size) != (ssize_t)len ||
	    trailer_crc(got_size, tag, len) != (uint32_t)get_le(foot + 12, 4))
		return 0;
	tag[len] = '\0';
	if (size_out)
		*size_out = got_size;
	return !etag || (got_size == size && !strcmp(tag, etag));
}

/* ---- objects ---------------------------------------------------------------- */

static int data_path(const bfs_shardfolder *f, const char *name, char *out)
{
	return snprintf(out, PATH_MAX, "%s/data/%s", f->path, name) >= PATH_MAX
		? -ENAMETOOLONG : 0;
}

int bfs_shardfolder_open_object(bfs_shardfolder *f, const bfs_storage_object *o)
{
	char path[PATH_MAX];
	struct stat sb;
	int fd, err;

	if ((err = data_path(f, o->name, path)))
		return err;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno;
	/* LOCK_SH fails while an evictor holds LOCK_EX; an object unlinked
	 * between our open and our lock has no link left */
	if (flock(fd, LOCK_SH | LOCK_NB) || fstat(fd, &sb) || !sb.st_nlink ||
	    !trailer_ok(fd, (uint64_t)sb.st_size, o->size, o->etag, NULL)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

int bfs_shardfolder_reserve(bfs_shardfolder *f, const bfs_storage_object *o,
			    bfs_shardfolder_tmp *t, char *errmsg)
{
	uint64_t cost = bfs_shardfolder_cost(o->size, strlen(o->etag)), used;
	int err;

	t->fd = -1;
	t->cost = cost;
	snprintf(t->path, sizeof(t->path), "%s/tmp/f%ld-%016llx-%llu", f->path,
		 (long)getpid(), (unsigned long long)f->nonce,
		 (unsigned long long)atomic_fetch_add(&f->seq, 1));
	if ((err = ledger_lock(f))) {
		bfs_seterr(errmsg, "shard cache %s: its ledger has been locked "
			   "for %u s (another process stopped while holding it?)",
			   f->path, f->lock_wait_ms / 1000);
		return err;
	}
	used = atomic_load(&f->used);
	if (used + cost > f->limit) {
		ledger_unlock(f, used);
		return -ENOSPC;
	}
	t->fd = open(t->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (t->fd < 0 || flock(t->fd, LOCK_EX | LOCK_NB)) {
		err = -errno;
		goto fail;
	}
	/* its blocks now: a full disk fails here, not in the middle */
	if (fallocate(t->fd, 0, 0, (off_t)(o->size + strlen(o->etag) + FOOTER))) {
		if (errno != EOPNOTSUPP ||
		    ftruncate(t->fd, (off_t)(o->size + strlen(o->etag) + FOOTER))) {
			err = -errno;
			goto fail;
		}
	}
	ledger_unlock(f, used + cost);
	return 0;
fail:
	if (t->fd >= 0) {
		close(t->fd);
		unlink(t->path);
		t->fd = -1;
	}
	ledger_unlock(f, used);
	bfs_seterr(errmsg, "shard cache %s: %s", t->path, strerror(-err));
	return err;
}

void bfs_shardfolder_abandon(bfs_shardfolder *f, bfs_shardfolder_tmp *t)
{
	int locked = ledger_lock(f) == 0;

	if (t->fd >= 0) {
		unlink(t->path);
		close(t->fd);
		t->fd = -1;
	}
	/* without the lock the ledger keeps the room until a recount:
	 * too much, never too little */
	if (locked) {
		uint64_t used = atomic_load(&f->used);

		ledger_unlock(f, used > t->cost ? used - t->cost : 0);
	}
}

int bfs_shardfolder_commit(bfs_shardfolder *f, const bfs_storage_object *o,
			   bfs_shardfolder_tmp *t, char *errmsg)
{
	uint8_t foot[FOOTER];
	size_t len = strlen(o->etag);
	char path[PATH_MAX];
	struct stat sb;
	uint64_t used, old = 0;
	int err;

	put_le(foot, o->size, 8);
	put_le(foot + 8, len, 4);
	put_le(foot + 12, trailer_crc(o->size, o->etag, len), 4);
	memcpy(foot + 16, MAGIC, 8);
	if ((err = data_path(f, o->name, path)) || (err = mkparents(path)))
		goto fail;
	if (pwrite(t->fd, o->etag, len, (off_t)o->size) != (ssize_t)len ||
	    pwrite(t->fd, foot, FOOTER, (off_t)(o->size + len)) != FOOTER ||
	    fsync(t->fd)) {
		err = errno ? -errno : -EIO;
		goto fail;
	}
	if ((err = ledger_lock(f)))
		goto fail;
	used = atomic_load(&f->used);
	/* a stale file of this name (another identity) goes, and its room
	 * with it */
	if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
		old = file_cost((uint64_t)sb.st_size);
	if (rename(t->path, path)) {
		err = -errno;
		ledger_unlock(f, used);
		goto fail;
	}
	/* still LOCK_EX, and o's lock is the caller's: nobody evicts it
	 * while the lock turns shared */
	flock(t->fd, LOCK_SH);
	ledger_unlock(f, used > old ? used - old : 0);
	return 0;
fail:
	bfs_seterr(errmsg, "shard cache %s: keeping %s: %s", f->path, o->name,
		   strerror(-err));
	bfs_shardfolder_abandon(f, t);
	return err;
}

int bfs_shardfolder_evict(bfs_shardfolder *f, const bfs_storage_object *o)
{
	char path[PATH_MAX];
	struct stat sb;
	int fd, err, rc;

	if ((err = data_path(f, o->name, path)))
		return err;
	if ((rc = bfs_shardfolder_lock(f, o->name)) <= 0)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = errno == ENOENT ? -ENOENT : -errno;
		goto out;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) || fstat(fd, &sb)) {
		err = errno == EWOULDBLOCK ? 0 : -errno;
		goto out;
	}
	if ((err = ledger_lock(f)))
		goto out;
	if (unlink(path)) {
		err = -errno;
		ledger_unlock(f, atomic_load(&f->used));
		goto out;
	}
	{
		uint64_t used = atomic_load(&f->used);
		uint64_t cost = file_cost((uint64_t)sb.st_size);

		ledger_unlock(f, used > cost ? used - cost : 0);
	}
	err = 1;
out:
	if (fd >= 0)
		close(fd);
	bfs_shardfolder_unlock(f, o->name);
	return err;
}

/* ---- the recount ------------------------------------------------------------ */

typedef struct {
	bfs_shardfolder *f;
	const bfs_storage_object *objs;
	size_t n;
	uint8_t *present;
	uint64_t used, removed;
} recount;

static int cmp_key(const void *k, const void *o)
{
	return strcmp(k, ((const bfs_storage_object *)o)->name);
}

/* Remove the file at path when nobody holds it: 1 removed, 0 held. */
static int remove_unheld(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), gone = 0;

	if (fd < 0)
		return errno == ENOENT;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		gone = unlink(path) == 0;
	close(fd);
	return gone;
}

/* Count (or remove) what lies under data/ + rel. */
static void walk_data(recount *r, const char *rel, unsigned depth)
{
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/data/%s", r->f->path, rel);
	if (depth > 64 || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		char name[PATH_MAX], path[PATH_MAX];
		const bfs_storage_object *o;
		struct stat sb;
		int fd, ok = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(name, sizeof(name), "%s%s", rel, de->d_name) >= (int)sizeof(name) ||
		    snprintf(path, sizeof(path), "%s/data/%s", r->f->path, name) >= (int)sizeof(path) ||
		    lstat(path, &sb))
			continue;
		if (S_ISDIR(sb.st_mode)) {
			strcat(name, "/");
			walk_data(r, name, depth + 1);
			rmdir(path); /* only when it is empty */
			continue;
		}
		o = bsearch(name, r->objs, r->n, sizeof(*r->objs), cmp_key);
		if (o && S_ISREG(sb.st_mode) && (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
			ok = trailer_ok(fd, (uint64_t)sb.st_size, o->size, o->etag, NULL);
			close(fd);
		}
		if (ok) {
			if (r->present)
				r->present[o - r->objs] = 1;
		} else if (remove_unheld(path)) {
			r->removed++;
			continue;
		}
		r->used += file_cost((uint64_t)sb.st_size);
	}
	closedir(d);
}

static void remove_tree(const char *path, unsigned depth)
{
	struct dirent *de;
	DIR *d;

	if (depth > 64 || !(d = opendir(path)))
		return;
	while ((de = readdir(d))) {
		char p[PATH_MAX];
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
		if (lstat(p, &sb))
			continue;
		if (S_ISDIR(sb.st_mode))
			remove_tree(p, depth + 1);
		else
			unlink(p);
	}
	closedir(d);
	rmdir(path);
}

int bfs_shardfolder_recount(bfs_shardfolder *f, const bfs_storage_object *objs,
			    size_t n, uint8_t *present, uint64_t *removed,
			    char *errmsg)
{
	recount r = { f, objs, n, present, 0, 0 };
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int err;

	if (present)
		memset(present, 0, n);
	if ((err = ledger_lock(f))) {
		bfs_seterr(errmsg, "shard cache %s: its ledger has been locked "
			   "for %u s (another process stopped while holding it?)",
			   f->path, f->lock_wait_ms / 1000);
		return err;
	}
	snprintf(path, sizeof(path), "%s/meta", f->path);
	remove_tree(path, 0); /* the layout before trailers */
	walk_data(&r, "", 0);
	snprintf(path, sizeof(path), "%s/tmp", f->path);
	if ((d = opendir(path))) {
		while ((de = readdir(d))) {
			char p[PATH_MAX];
			struct stat sb;

			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/tmp/%s", f->path, de->d_name);
			if (remove_unheld(p)) {
				r.removed++;
				continue;
			}
			if (stat(p, &sb) == 0)
				r.used += file_cost((uint64_t)sb.st_size);
		}
		closedir(d);
	}
	ledger_unlock(f, r.used);
	if (removed)
		*removed = r.removed;
	return 0;
}
