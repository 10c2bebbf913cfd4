/*
 * cache_open.c - opening and closing a bfs_cache handle (see cache.h): the
 * default directory and size, users.lock, the process-wide registry that
 * shares one LMDB environment per directory, the structural check of
 * data.mdb before its first use in a process and moving a damaged file
 * aside, and starting and stopping the writer.  The environment is opened
 * under the writer lock, with a map of at least data.mdb's length (see
 * map_size); an open that cannot get the lock in time reads without
 * writing (c->nowrite) and says who holds it.
 *
 * DESIGN
 *   A process-wide registry (reg_lock, reg_head) holds one struct bfs__env
 *   per directory, refcounted by the bfs_cache handles on it, because LMDB
 *   must not open one environment twice in a process.  The check of a
 *   directory's files runs with reg_lock held: other opens in the process
 *   wait for it, and a second handle on the same directory then shares
 *   the environment checked.  How transactions use an open environment
 *   is cache_env.c's.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bfs__env *reg_head; /* protected by reg_lock */

/* ---- directories and defaults ----------------------------------------- */

int bfs_cache_default_dir(char *buf, size_t cap)
{
	const char *x = getenv("XDG_CACHE_HOME");
	const char *home;
	int n;

	if (x && x[0] == '/') {
		n = snprintf(buf, cap, "%s/batchfs", x);
	} else {
		home = getenv("HOME");
		if (!home || home[0] != '/') {
			struct passwd pw, *res = NULL;
			char tmp[4096];

			if (getpwuid_r(getuid(), &pw, tmp, sizeof(tmp), &res) ||
			    !res || !pw.pw_dir || pw.pw_dir[0] != '/')
				return -ENOENT;
			n = snprintf(buf, cap, "%s/.cache/batchfs", pw.pw_dir);
		} else {
			n = snprintf(buf, cap, "%s/.cache/batchfs", home);
		}
	}
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

uint64_t bfs_cache_default_size(const char *dir)
{
	char path[PATH_MAX];
	struct statvfs vfs;
	struct stat st;
	uint64_t v = 0, existing = 0;

	if (!dir || snprintf(path, sizeof(path), "%s/data.mdb", dir) >=
			    (int)sizeof(path))
		return BFS_CACHE_DEFAULT_MIN;
	/* what it holds on disk: with MDB_WRITEMAP the file is as long as
	 * its map, most of it a hole */
	if (stat(path, &st) == 0) {
		existing = (uint64_t)st.st_blocks * 512;
		if (existing > (uint64_t)st.st_size)
			existing = (uint64_t)st.st_size;
	}
	snprintf(path, sizeof(path), "%s", dir);
	for (;;) {
		char *slash;

		if (statvfs(path[0] ? path : "/", &vfs) == 0) {
			v = existing + (uint64_t)vfs.f_bavail * vfs.f_frsize / 10;
			break;
		}
		slash = strrchr(path, '/');
		if (!slash || errno != ENOENT)
			return BFS_CACHE_DEFAULT_MIN;
		*slash = '\0';
	}
	if (v > BFS_CACHE_DEFAULT_MAX)
		v = BFS_CACHE_DEFAULT_MAX;
	if (v < BFS_CACHE_DEFAULT_MIN)
		v = BFS_CACHE_DEFAULT_MIN;
	return v;
}

static int mkdir_p(const char *dir)
{
	char path[PATH_MAX];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		path[i] = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			return -errno;
		path[i] = dir[i];
	}
	return 0;
}

/* ---- a damaged data.mdb: found at open, moved aside --------------------- */

/* The text a mount left in DIR/damaged (bfs__note_damage), in why: 0, or
 * -errno (no marker). */
static int read_marker(const char *path, char *why, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, why, cap - 1);
	close(fd);
	why[n > 0 ? n : 0] = '\0';
	for (char *q = why; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
			*q = '?';
	if (!why[0])
		snprintf(why, cap, "a mount found it damaged");
	return 0;
}

/* data.mdb of c->dir is damaged (why) and no other process has the
 * directory open: rename it to data.mdb.damaged-TIME (the only such copy
 * kept), drop lock.mdb and the marker, and say so in c->notice.  0, or
 * BFS_E_CORRUPT when the file can be neither renamed nor removed. */
static int move_aside(bfs_cache *c, const char *why, char *errmsg)
{
	char from[PATH_MAX], to[PATH_MAX], name[64], when[32];
	struct tm tm;
	time_t now = time(NULL);
	int kept = 1, n;

	snprintf(from, sizeof(from), "%s/data.mdb", c->dir);
	if (!gmtime_r(&now, &tm) ||
	    !strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &tm))
		snprintf(when, sizeof(when), "%lld", (long long)now);
	snprintf(name, sizeof(name), BFS__DAMAGED_PREFIX "%s", when);
	snprintf(to, sizeof(to), "%s/%s", c->dir, name);
	bfs__remove_damaged_copies(c->dir);
	if (rename(from, to) != 0) {
		kept = 0;
		if (unlink(from) != 0) {
			bfs_seterr(errmsg, "%s is damaged (%s) and can be neither moved aside nor removed: %s",
				   from, why, strerror(errno));
			return BFS_E_CORRUPT;
		}
	}
	snprintf(from, sizeof(from), "%s/lock.mdb", c->dir);
	unlink(from);
	snprintf(from, sizeof(from), "%s/damaged", c->dir);
	unlink(from);
	n = asprintf(&c->notice, "data.mdb was damaged (%s); %s%s, and a new cache was started",
		     why, kept ? "moved it aside to " : "removed it",
		     kept ? name : "");
	if (n < 0)
		c->notice = NULL;
	return 0;
}

/* Before this process first uses c->dir's environment, check data.mdb
 * (bfs__check_dir, in a child).  excl: no other process has the directory
 * open, so no snapshot needs pinning, the marker a mount left is
 * believed, and a damaged file is moved aside.  Returns 0 (sound, new,
 * not checkable now -- then LMDB decides --, or moved aside: c->notice
 * says so) or BFS_E_CORRUPT (damaged and kept: an admin handle, or the
 * directory is in use elsewhere; errmsg says why). */
static int vet_files(bfs_cache *c, int excl, char *errmsg)
{
	char path[PATH_MAX], marker[PATH_MAX], why[BFS_ERRMSG_MAX] = "";
	bfs_cache_check_info info;
	struct stat st;
	int err;

	snprintf(path, sizeof(path), "%s/data.mdb", c->dir);
	snprintf(marker, sizeof(marker), "%s/damaged", c->dir);
	if (stat(path, &st) != 0 || st.st_size == 0) {
		if (excl && !c->o.admin)
			unlink(marker);
		return 0;
	}
	if ((excl || c->o.admin) && read_marker(marker, why, sizeof(why)) == 0)
		err = BFS_E_CORRUPT;
	else
		err = bfs__check_dir(c->dir, !excl, &info, why);
	if (err != BFS_E_CORRUPT)
		return 0;
	if (c->o.admin || !excl) {
		bfs_seterr(errmsg, "%s is damaged: %s", path, why);
		return BFS_E_CORRUPT;
	}
	return move_aside(c, why, errmsg);
}

/* ---- the environment registry ------------------------------------------ */

/*
 * Whether the writer may use MDB_WRITEMAP on dir's data.mdb: LMDB then
 * puts values straight into the shared map (no copy into its own pages,
 * none through write()), which is safe on a full disk only when each
 * page gets its blocks before it is touched (bfs__reserve).  So only
 * where fallocate() works: tried on the file, keeping its size (a new,
 * empty file stays one that LMDB initializes).  A full disk says no
 * here too, and the cache then writes as before.
 */
static int writemap_ok(const char *dir)
{
	char path[PATH_MAX];
	int fd, ok;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return 0;
	ok = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 65536) == 0;
	close(fd);
	return ok;
}

static void env_free(struct bfs__env *e)
{
	if (!e)
		return;
	if (e->env)
		mdb_env_close(e->env);
	/* only now: closing an fd of lock.mdb drops the process's fcntl
	 * locks on it, which LMDB relies on while the env is open */
	if (e->lock_fd >= 0)
		close(e->lock_fd);
	if (e->wlock_fd >= 0)
		close(e->wlock_fd);
	pthread_mutex_destroy(&e->wmutex);
	pthread_rwlock_destroy(&e->maplock);
	free(e);
}

/* The map size for an opener whose limit is `limit`: at least data.mdb's
 * length, which with MDB_WRITEMAP is the largest map another process has
 * (LMDB ftruncate()s the file to the map at open: a smaller one would cut
 * off pages that process maps, a SIGBUS in it, and damage what its open
 * write transaction put there).  Writer lock held, so that no other
 * opener changes the length meanwhile. */
static size_t map_size(const char *dir, uint64_t limit)
{
	char path[PATH_MAX];
	struct stat st;
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t sz = limit / (uint64_t)pg * (uint64_t)pg;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (stat(path, &st) == 0 && (uint64_t)st.st_size > sz)
		sz = ((uint64_t)st.st_size + (uint64_t)pg - 1) /
		     (uint64_t)pg * (uint64_t)pg;
	if (sz > (uint64_t)SIZE_MAX / 2)
		sz = (uint64_t)SIZE_MAX / 2;
	return (size_t)sz;
}

/* Open the databases; admin (or a handle that may not write): read-only,
 * they must exist.  Otherwise the writer lock is held. */
static int open_dbis(struct bfs__env *e, int admin, char *errmsg)
{
	MDB_txn *txn;
	MDB_val k = { 6, "format" }, v;
	unsigned flags = admin ? 0 : MDB_CREATE;
	uint32_t fmt = BFS__CACHE_FORMAT;
	int rc;

	rc = mdb_txn_begin(e->env, NULL, admin ? MDB_RDONLY : 0, &txn);
	if (rc)
		goto fail;
	if (!admin && (rc = bfs__reserve(e, 0)) != 0) {
		mdb_txn_abort(txn);
		goto fail;
	}
	if ((rc = mdb_dbi_open(txn, "samples", flags, &e->samples)) ||
	    (rc = mdb_dbi_open(txn, "index", flags, &e->index)) ||
	    (rc = mdb_dbi_open(txn, "meta", flags, &e->meta))) {
		mdb_txn_abort(txn);
		if (rc == MDB_NOTFOUND) {
			bfs_seterr(errmsg, "not a batchfs cache (no samples/index/meta databases)");
			return -ENOENT;
		}
		goto fail;
	}
	rc = mdb_get(txn, e->meta, &k, &v);
	if (rc == 0) {
		if (v.mv_size != 4 || (memcpy(&fmt, v.mv_data, 4), fmt) !=
					      BFS__CACHE_FORMAT) {
			mdb_txn_abort(txn);
			bfs_seterr(errmsg, "a cache of another batchfs format (%u, this is %d); 'batchfs cache clear' removes it",
				   (unsigned)fmt, BFS__CACHE_FORMAT);
			return BFS_E_CORRUPT;
		}
	} else if (rc == MDB_NOTFOUND && !admin) {
		v.mv_size = 4;
		v.mv_data = &fmt;
		rc = mdb_put(txn, e->meta, &k, &v, 0);
		if (rc) {
			mdb_txn_abort(txn);
			goto fail;
		}
	} else if (rc != MDB_NOTFOUND) {
		mdb_txn_abort(txn);
		goto fail;
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		goto fail;
	return 0;
fail:
	bfs_seterr(errmsg, "opening the cache databases: %s", mdb_strerror(rc));
	return bfs__map_err(rc);
}

/* Open or share the environment of dir.  Registry lock held inside.
 * excl: see vet_files. */
static int env_acquire(bfs_cache *c, int excl, char *errmsg)
{
	struct bfs__env *e;
	struct stat st;
	pthread_rwlockattr_t ra;
	MDB_stat ms;
	char path[PATH_MAX];
	unsigned flags;
	int dead, rc, err, wlocked = 0;
	pid_t me = getpid();

	if (stat(c->dir, &st) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", c->dir, strerror(errno));
		return err;
	}
	pthread_mutex_lock(&reg_lock);
	for (e = reg_head; e; e = e->next)
		if (e->dev == st.st_dev && e->ino == st.st_ino && e->pid == me) {
			if (!c->o.admin && c->o.max_bytes > atomic_load(&e->limit))
				atomic_store(&e->limit, c->o.max_bytes);
			e->refs++;
			c->e = e;
			pthread_mutex_unlock(&reg_lock);
			return 0;
		}
	err = vet_files(c, excl, errmsg);
	if (err) {
		pthread_mutex_unlock(&reg_lock);
		return err;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&reg_lock);
		return -ENOMEM;
	}
	e->lock_fd = -1;
	e->wlock_fd = -1;
	pthread_mutex_init(&e->wmutex, NULL);
	e->lock_wait_ns = bfs__lock_wait_ns();
	atomic_store(&e->limit, c->o.admin ? 0 : c->o.max_bytes);
	e->dev = st.st_dev;
	e->ino = st.st_ino;
	e->pid = me;
	e->refs = 1;
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra,
		PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&e->maplock, &ra);
	pthread_rwlockattr_destroy(&ra);

	/* The writer lock, first: every write transaction and every change
	 * of data.mdb's length (an open with MDB_WRITEMAP) happens under it */
	snprintf(path, sizeof(path), "%s/writer.lock", c->dir);
	e->wlock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (e->wlock_fd < 0 && !c->o.admin) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!c->o.admin) {
		pid_t holder = 0;
		char who[128];

		rc = bfs__wlock(e, &holder);
		if (rc == ETIMEDOUT) {
			/* a holder that does not let go (stopped: SIGSTOP,
			 * a suspended job): read what is there, add nothing */
			bfs__describe_pid(holder, who, sizeof(who));
			c->nowrite = 1;
			free(c->notice);
			if (asprintf(&c->notice, "the cache's writer lock (%s) is held by %s, for more than %.0f s: this mount reads the cache but adds nothing to it",
				     path, who, (double)e->lock_wait_ns / 1e9) < 0)
				c->notice = NULL;
		} else if (rc) {
			err = -rc;
			bfs_seterr(errmsg, "%s: %s", path, strerror(rc));
			goto fail;
		} else {
			wlocked = 1;
		}
	}
	rc = mdb_env_create(&e->env);
	if (rc)
		goto lmdb_fail;
	mdb_env_set_maxreaders(e->env, BFS__MAXREADERS);
	mdb_env_set_maxdbs(e->env, 4);
	if (!c->o.admin)
		mdb_env_set_mapsize(e->env, map_size(c->dir, c->o.max_bytes));
	flags = MDB_NOTLS;
	flags |= c->o.sync == BFS_CACHE_SYNC_NONE ? MDB_NOSYNC : MDB_NOMETASYNC;
	/* without the writer lock, no MDB_WRITEMAP: its open would set the
	 * file's length */
	if (wlocked && writemap_ok(c->dir)) {
		flags |= MDB_WRITEMAP;
		e->writemap = 1;
	}
	rc = mdb_env_open(e->env, c->dir, flags, 0600);
	if (rc) {
		mdb_env_close(e->env);
		e->env = NULL;
		goto lmdb_fail;
	}
	if (c->o.admin)
		mdb_env_set_mapsize(e->env, 0); /* adopt the stored size */
	mdb_reader_check(e->env, &dead);
	/* Give lock.mdb its blocks now: it is a shared mapping, and touching
	 * a page of a sparse file on a full file system (a small tmpfs)
	 * would be a SIGBUS.  Failure is harmless on normal disks. */
	snprintf(path, sizeof(path), "%s/lock.mdb", c->dir);
	e->lock_fd = open(path, O_RDWR | O_CLOEXEC);
	if (e->lock_fd >= 0 && fstat(e->lock_fd, &st) == 0 && st.st_size > 0)
		(void)posix_fallocate(e->lock_fd, 0, st.st_size);
	mdb_env_stat(e->env, &ms);
	e->psize = ms.ms_psize;
	err = open_dbis(e, c->o.admin || c->nowrite, errmsg);
	if (err)
		goto fail;
	bfs__note_map(e);
	if (wlocked)
		bfs__wunlock(e);
	e->next = reg_head;
	reg_head = e;
	c->e = e;
	pthread_mutex_unlock(&reg_lock);
	return 0;

lmdb_fail:
	bfs_seterr(errmsg, "%s: LMDB: %s", c->dir, mdb_strerror(rc));
	err = bfs__map_err(rc);
fail:
	if (wlocked)
		bfs__wunlock(e);
	if (c->nowrite && c->notice && errmsg) {
		/* read-only, and even that failed: say why it was read-only */
		char why[BFS_ERRMSG_MAX];

		snprintf(why, sizeof(why), "%s", errmsg);
		bfs_seterr(errmsg, "%s (opened read-only: %s)", why, c->notice);
	}
	env_free(e);
	pthread_mutex_unlock(&reg_lock);
	return err;
}

static void env_release(struct bfs__env *e)
{
	struct bfs__env **pp;

	if (!e)
		return;
	pthread_mutex_lock(&reg_lock);
	if (--e->refs > 0 || e->pid != getpid()) {
		pthread_mutex_unlock(&reg_lock);
		return;
	}
	for (pp = &reg_head; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	pthread_mutex_unlock(&reg_lock);
	env_free(e);
}

/* ---- open / close -------------------------------------------------------- */

/* The pid holding an flock() of fd's file exclusively, from /proc/locks
 * ("1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"); 0 if not found. */
static pid_t flock_holder(int fd)
{
	struct stat st;
	char line[256];
	FILE *f;
	pid_t found = 0;

	if (fstat(fd, &st) != 0 || !(f = fopen("/proc/locks", "re")))
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char kind[16], mode[16], rw[16];
		unsigned maj, min;
		unsigned long long ino;
		int pid;

		if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%llu", kind,
			   mode, rw, &pid, &maj, &min, &ino) == 7 &&
		    !strcmp(kind, "FLOCK") && !strcmp(rw, "WRITE") &&
		    ino == (unsigned long long)st.st_ino &&
		    maj == major(st.st_dev) && min == minor(st.st_dev))
			found = pid;
	}
	fclose(f);
	return found;
}

/* Add a line to c->notice ("; " between two). */
static void add_notice(bfs_cache *c, const char *line)
{
	char *n;

	if (asprintf(&n, "%s%s%s", c->notice ? c->notice : "",
		     c->notice ? "; " : "", line) < 0)
		return;
	free(c->notice);
	c->notice = n;
}

/* A limit the file system cannot hold: said at open, since the cache
 * itself only finds out when it is full (and then drops in silence but
 * for dropped_full and the log hook). */
static void check_room(bfs_cache *c)
{
	char path[PATH_MAX], line[256];
	struct statvfs vfs;
	struct stat st;
	uint64_t have = 0, room;

	if (statvfs(c->dir, &vfs) != 0)
		return;
	snprintf(path, sizeof(path), "%s/data.mdb", c->dir);
	if (stat(path, &st) == 0) {
		have = (uint64_t)st.st_blocks * 512;
		if (have > (uint64_t)st.st_size)
			have = (uint64_t)st.st_size;
	}
	room = have + (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (room >= c->limit)
		return;
	snprintf(line, sizeof(line), "its file system has room for %llu MiB of cache, less than the %llu MiB limit asked for: it stops there",
		 (unsigned long long)(room >> 20),
		 (unsigned long long)(c->limit >> 20));
	add_notice(c, line);
}

int bfs_cache_writer_probe(bfs_cache *c, char *errmsg)
{
	pid_t holder = 0;
	char who[128];
	int rc;

	if (!c)
		return -EINVAL;
	atomic_store(&c->e->lock_stuck, 0); /* a fresh, whole wait */
	rc = bfs__wlock(c->e, &holder);
	if (rc == 0) {
		bfs__wunlock(c->e);
		return 0;
	}
	if (rc == ETIMEDOUT) {
		bfs__describe_pid(holder, who, sizeof(who));
		bfs_seterr(errmsg, "the cache's writer lock (%s/writer.lock) is held by %s, for more than %.0f s",
			   c->dir, who, (double)c->e->lock_wait_ns / 1e9);
	} else {
		bfs_seterr(errmsg, "%s/writer.lock: %s", c->dir, strerror(rc));
	}
	return -rc;
}

/* users.lock: held shared while a handle is open; bfs_cache_remove_files
 * takes it exclusively.  An opener first tries to take it exclusively:
 * *excl = 1 says no other process has the directory open (so its files
 * can be checked without pinning a snapshot, and replaced); it is
 * downgraded to shared once the environment is open (unlock_excl).
 * Blocks only while another process holds it exclusively (a remove_files,
 * or another opener checking the files). */
static int lock_users(bfs_cache *c, int *excl, char *errmsg)
{
	char path[PATH_MAX];
	int64_t deadline;
	useconds_t pause_us = 1000;
	int err;

	*excl = 0;
	snprintf(path, sizeof(path), "%s/users.lock", c->dir);
	c->users_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->users_fd < 0 && c->o.admin)
		c->users_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c->users_fd < 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", path, strerror(errno));
		return err;
	}
	if (flock(c->users_fd, LOCK_EX | LOCK_NB) == 0) {
		*excl = 1;
		return 0;
	}
	/* Shared, polled until a deadline: an exclusive holder is an opener
	 * checking the files or a remove_files, both short -- unless that
	 * process is stopped. */
	deadline = bfs__now_ns() + bfs__lock_wait_ns();
	while (flock(c->users_fd, LOCK_SH | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK && errno != EINTR) {
			err = -errno;
			bfs_seterr(errmsg, "%s: flock: %s", path, strerror(errno));
			return err;
		}
		if (bfs__now_ns() >= deadline) {
			char who[128];

			bfs__describe_pid(flock_holder(c->users_fd), who,
					  sizeof(who));
			bfs_seterr(errmsg, "%s is held exclusively by %s (opening or removing the cache) for more than %.0f s",
				   path, who, (double)bfs__lock_wait_ns() / 1e9);
			return -ETIMEDOUT;
		}
		usleep(pause_us);
		if (pause_us < 50000)
			pause_us *= 2;
	}
	return 0;
}

/* Exclusive -> shared on users.lock (not atomic: flock drops the old lock
 * first, so a remove_files may get in between; env_acquire copes with
 * files that vanish). */
static void unlock_excl(bfs_cache *c)
{
	while (flock(c->users_fd, LOCK_SH) != 0 && errno == EINTR)
		;
}

int bfs_cache_open(const bfs_cache_opts *o, bfs_cache **out, char *errmsg)
{
	bfs_cache *c;
	pthread_condattr_t ca;
	char path[PATH_MAX];
	struct stat st;
	int err, excl;

	*out = NULL;
	if (!o)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *o;
	c->users_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &ca);
	pthread_cond_init(&c->progress, &ca);
	pthread_condattr_destroy(&ca);

	if (o->dir && o->dir[0]) {
		c->dir = strdup(o->dir);
	} else {
		err = bfs_cache_default_dir(path, sizeof(path));
		if (err) {
			bfs_seterr(errmsg, "no cache directory: set XDG_CACHE_HOME or HOME, or pass one");
			goto fail;
		}
		c->dir = strdup(path);
	}
	err = -ENOMEM;
	if (!c->dir)
		goto fail;
	c->o.dir = c->dir;
	if (o->fingerprint) {
		err = bfs__parse_fp(o->fingerprint, c->fp);
		if (err) {
			bfs_seterr(errmsg, "cache fingerprint '%s' is not 16 hex digits",
				   o->fingerprint);
			goto fail;
		}
		bfs__fp_hex(c->fp, c->fp_hex);
		c->has_fp = 1;
	}
	c->o.fingerprint = c->has_fp ? c->fp_hex : NULL;
	if (!o->admin && !c->has_fp) {
		err = -EINVAL;
		bfs_seterr(errmsg, "a cache opened for a mount needs the settings fingerprint");
		goto fail;
	}
	if (!o->admin) {
		if (!c->o.max_bytes)
			c->o.max_bytes = bfs_cache_default_size(c->dir);
		if (c->o.max_bytes < BFS_CACHE_MIN_BYTES) {
			err = -EINVAL;
			bfs_seterr(errmsg, "cache size %llu is below the minimum of 1 MiB",
				   (unsigned long long)c->o.max_bytes);
			goto fail;
		}
		if (c->o.max_bytes > (uint64_t)SIZE_MAX / 2)
			c->o.max_bytes = (uint64_t)SIZE_MAX / 2;
		c->limit = c->o.max_bytes / (uint64_t)sysconf(_SC_PAGESIZE) *
			   (uint64_t)sysconf(_SC_PAGESIZE);
		err = mkdir_p(c->dir);
		if (err) {
			bfs_seterr(errmsg, "creating %s: %s", c->dir, strerror(-err));
			goto fail;
		}
	} else {
		snprintf(path, sizeof(path), "%s/data.mdb", c->dir);
		if (stat(path, &st) != 0) {
			err = -errno;
			bfs_seterr(errmsg, "no cache in %s (%s)", c->dir,
				   strerror(errno));
			goto fail;
		}
	}
	if (!c->o.queue_max)
		c->o.queue_max = BFS_CACHE_QUEUE_MAX;
	if (!c->o.foreign_idle_s)
		c->o.foreign_idle_s = BFS_CACHE_FOREIGN_IDLE_S;

	err = lock_users(c, &excl, errmsg);
	if (err)
		goto fail;
	/* the files may have been removed while we waited: env_acquire
	 * creates them again (or fails for admin) */
	if (o->admin) {
		snprintf(path, sizeof(path), "%s/data.mdb", c->dir);
		if (stat(path, &st) != 0) {
			err = -ENOENT;
			bfs_seterr(errmsg, "no cache in %s", c->dir);
			goto fail;
		}
	}
	err = env_acquire(c, excl, errmsg);
	if (excl)
		unlock_excl(c);
	if (err == BFS_E_CORRUPT && !o->admin) {
		/* Not an LMDB file, a cache of another batchfs format, or a
		 * damaged one another process uses: it is only a cache, so
		 * replace it -- when nobody else uses it. */
		close(c->users_fd);
		c->users_fd = -1;
		if (bfs_cache_remove_files(c->dir) == 0) {
			err = lock_users(c, &excl, errmsg);
			if (!err) {
				err = env_acquire(c, excl, errmsg);
				if (excl)
					unlock_excl(c);
			}
		} else {
			size_t n = errmsg ? strlen(errmsg) : 0;

			if (errmsg && n + 1 < BFS_ERRMSG_MAX)
				snprintf(errmsg + n, BFS_ERRMSG_MAX - n,
					 " (in use by another process, so not replaced)");
		}
	}
	if (err)
		goto fail;
	if (!o->admin && !c->nowrite)
		check_room(c);
	if (!o->admin && !c->nowrite) {
		err = bfs__writer_start(c);
		if (err) {
			bfs_seterr(errmsg, "starting the cache writer: %s",
				   strerror(-err));
			goto fail;
		}
	}
	*out = c;
	return 0;
fail:
	bfs_cache_close(c);
	return err;
}

void bfs_cache_close(bfs_cache *c)
{
	if (!c)
		return;
	bfs__writer_stop(c);
	env_release(c->e);
	if (c->users_fd >= 0)
		close(c->users_fd);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->progress);
	pthread_mutex_destroy(&c->lock);
	free(c->notice);
	free(c->dir);
	free(c);
}

const char *bfs_cache_dir(const bfs_cache *c)
{
	return c->dir;
}

const char *bfs_cache_notice(const bfs_cache *c)
{
	return c->notice;
}
