/*
 * cache_env.c - an open LMDB environment as every other cache file uses it
 * (see cache.h): the writer lock; transactions, which hold the process's
 * map lock; adopting a map another process grew; where a put value's pages
 * end (the size limit); the check of a value's overflow page header; the
 * marker left when damage is met at run time; LMDB's codes as ours; the
 * clocks.  Opening and sharing an environment is cache_open.c's.
 *
 * DESIGN
 *   Every transaction of the process read-holds env->maplock; the rare
 *   thread that must adopt a map grown by another process
 *   (MDB_MAP_RESIZED) write-holds it, so no transaction touches the map
 *   while it is replaced.  Every write transaction, and every adoption
 *   (which may set data.mdb's length), first takes the writer lock
 *   (bfs__wlock: env->wmutex between the process's threads, then a POSIX
 *   write lock on DIR/writer.lock between processes, each waited for
 *   until a deadline), so a stopped holder costs others a bounded wait,
 *   never LMDB's unbounded one.  Lock order: writer lock, then maplock.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ---------------------------------------------------- */

int64_t bfs__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int64_t bfs__wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int bfs__map_err(int rc)
{
	if (rc == 0)
		return 0;
	if (rc > 0)
		return -rc;
	switch (rc) {
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
		return -ENOSPC;
	case MDB_READERS_FULL:
		return -EAGAIN;
	case MDB_TXN_FULL:
	case MDB_BAD_VALSIZE:
		return -E2BIG;
	case MDB_PANIC:
	case MDB_CORRUPTED:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_PAGE_NOTFOUND:
		return BFS_E_CORRUPT;
	default:
		return -EIO;
	}
}

/* ---- the map and transactions ------------------------------------------ */

/* e->map and e->mapsize: where LMDB mapped data.mdb (maplock write-held,
 * or e not yet shared).  LMDB 0.9 does not say (mdb_env_info gives only a
 * MDB_FIXEDMAP address), so the base is worked out from the page that
 * holds the main database's first key: a leaf whose header, checked at
 * open, names its page number.  The map starts on an OS page boundary, so
 * when LMDB's pages divide OS pages, a key's page starts at its address
 * rounded down to psize.  Otherwise map stays NULL and bfs__check_ovhdr
 * passes every value. */
void bfs__note_map(struct bfs__env *e)
{
	long os = sysconf(_SC_PAGESIZE);
	MDB_envinfo info;
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_dbi main;
	MDB_val k, v;

	e->map = NULL;
	if (mdb_env_info(e->env, &info) != 0 || !e->psize || os <= 0 ||
	    (unsigned long)os % e->psize)
		return;
	e->mapsize = info.me_mapsize;
	if (mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn) != 0)
		return;
	if (mdb_dbi_open(txn, NULL, 0, &main) == 0 &&
	    mdb_cursor_open(txn, main, &cur) == 0) {
		if (mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0) {
			uintptr_t pg = (uintptr_t)k.mv_data &
				       ~(uintptr_t)(e->psize - 1);
			uint64_t pgno;
			uint16_t flags;

			memcpy(&pgno, (const void *)pg, 8);
			memcpy(&flags, (const uint8_t *)pg + 10, 2);
			if (flags == 0x02 /* P_LEAF */ &&
			    pgno <= (uint64_t)info.me_last_pgno &&
			    pgno * e->psize <= pg)
				e->map = (const uint8_t *)(pg - pgno * e->psize);
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
}

/* ---- the writer lock ---------------------------------------------------- */

int64_t bfs__lock_wait_ns(void)
{
	const char *v = getenv("BATCHFS_CACHE_LOCK_WAIT_MS");
	char *end;
	long long ms;

	if (v && *v) {
		errno = 0;
		ms = strtoll(v, &end, 10);
		if (!errno && !*end && ms > 0 && ms < 86400000ll)
			return ms * 1000000ll;
	}
	return (int64_t)BFS_CACHE_LOCK_WAIT_MS * 1000000ll;
}

pid_t bfs__lock_holder(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	if (fd < 0 || fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK)
		return 0;
	return fl.l_pid > 0 ? fl.l_pid : 0;
}

/* The state letter of pid (/proc/PID/stat: R, S, D, T, t, ...) and its
 * command name (comm[32]); 0 when it cannot be read. */
static char pid_state(pid_t pid, char comm[32])
{
	char path[64], st[512], state = 0;
	ssize_t n;
	int fd;

	snprintf(comm, 32, "?");
	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, st, sizeof(st) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n > 0) {
		/* "pid (comm) S ...": comm may hold spaces and parens */
		char *l = memchr(st, '(', (size_t)n), *r;

		st[n] = '\0';
		r = strrchr(st, ')');
		if (l && r && r > l) {
			size_t len = (size_t)(r - l - 1);

			if (len >= 32)
				len = 31;
			memcpy(comm, l + 1, len);
			comm[len] = '\0';
			if (r[1] == ' ' && r[2])
				state = r[2];
		}
	}
	for (char *q = comm; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
			*q = '?';
	return state;
}

void bfs__describe_pid(pid_t pid, char *buf, size_t cap)
{
	char comm[32];
	char state = pid_state(pid, comm);

	if (pid <= 0)
		snprintf(buf, cap, "another process");
	else if (state == 'T' || state == 't')
		snprintf(buf, cap, "pid %d (%s), which is stopped (state %c)",
			 (int)pid, comm, state);
	else if (state)
		snprintf(buf, cap, "pid %d (%s, state %c)", (int)pid, comm,
			 state);
	else
		snprintf(buf, cap, "pid %d", (int)pid);
}

int bfs__wlock(struct bfs__env *e, pid_t *holder)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	int stuck = atomic_load(&e->lock_stuck);
	int64_t deadline = bfs__now_ns() + (stuck ? 0 : e->lock_wait_ns);
	struct timespec ts;
	long pause_us = 1000;
	int rc;

	if (holder)
		*holder = 0;
	ts.tv_sec = deadline / 1000000000ll;
	ts.tv_nsec = deadline % 1000000000ll;
	/* another thread of this process holds it, or waits for it */
	rc = pthread_mutex_clocklock(&e->wmutex, CLOCK_MONOTONIC, &ts);
	if (rc == ETIMEDOUT) {
		if (holder)
			*holder = getpid();
		return ETIMEDOUT;
	}
	if (rc)
		return rc;
	if (e->wlock_fd < 0)
		return 0; /* no lock file (admin on a read-only directory) */
	for (;;) {
		int64_t now;

		if (fcntl(e->wlock_fd, F_SETLK, &fl) == 0) {
			atomic_store(&e->lock_stuck, 0);
			return 0;
		}
		if (errno != EACCES && errno != EAGAIN && errno != EINTR) {
			rc = errno;
			break;
		}
		now = bfs__now_ns();
		if (now >= deadline) {
			pid_t who = bfs__lock_holder(e->wlock_fd);
			char comm[32], state = pid_state(who, comm);

			rc = ETIMEDOUT;
			/* a stopped holder stays stopped for a while: until
			 * the lock is had, take it only if free; a busy one
			 * (a long commit on a slow disk) gets the whole wait
			 * again next time */
			atomic_store(&e->lock_stuck, state == 'T' || state == 't');
			if (holder)
				*holder = who;
			break;
		}
		/* polled, not F_SETLKW: a wait that can end */
		if ((int64_t)pause_us * 1000 > deadline - now)
			pause_us = (long)((deadline - now) / 1000) + 1;
		usleep((useconds_t)pause_us);
		if (pause_us < 50000)
			pause_us *= 2;
	}
	pthread_mutex_unlock(&e->wmutex);
	return rc;
}

void bfs__wunlock(struct bfs__env *e)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET };

	if (e->wlock_fd >= 0)
		(void)fcntl(e->wlock_fd, F_SETLK, &fl);
	pthread_mutex_unlock(&e->wmutex);
}

/* ---- adopting a grown map ------------------------------------------------ */

/* Another process committed past the end of this process's map: map what
 * it uses.  The new size is at least data.mdb's length -- with
 * MDB_WRITEMAP LMDB ftruncate()s the file to the map, so a smaller map
 * would cut off pages another process maps (a SIGBUS in it) --, and only
 * with the writer lock held (have_wlock: the caller has it), so that no
 * other process changes the length between the look and the cut.  0 or
 * an errno (the caller's transaction then fails). */
static int adopt_map(struct bfs__env *e, int have_wlock)
{
	struct stat st;
	size_t size;
	int rc, fd;

	if (!have_wlock && (rc = bfs__wlock(e, NULL)) != 0)
		return rc;
	pthread_rwlock_wrlock(&e->maplock);
	/* no transaction of this process is open */
	size = e->mapsize;
	if (mdb_env_get_fd(e->env, &fd) == 0 && fstat(fd, &st) == 0 &&
	    (uint64_t)st.st_size > size)
		size = (size_t)st.st_size;
	/* LMDB raises it to what the last commit uses, if more */
	rc = mdb_env_set_mapsize(e->env, size);
	bfs__note_map(e);
	pthread_rwlock_unlock(&e->maplock);
	if (!have_wlock)
		bfs__wunlock(e);
	return rc;
}

int bfs__txn_begin(struct bfs__env *e, int rdonly, MDB_txn **txn)
{
	int rc;

	if (!rdonly && (rc = bfs__wlock(e, NULL)) != 0)
		return rc;
	pthread_rwlock_rdlock(&e->maplock);
	rc = mdb_txn_begin(e->env, NULL, rdonly ? MDB_RDONLY : 0, txn);
	if (rc == MDB_MAP_RESIZED) {
		pthread_rwlock_unlock(&e->maplock);
		rc = adopt_map(e, !rdonly);
		pthread_rwlock_rdlock(&e->maplock);
		if (rc == 0)
			rc = mdb_txn_begin(e->env, NULL,
					   rdonly ? MDB_RDONLY : 0, txn);
	}
	if (rc == 0 && !rdonly && (rc = bfs__reserve(e, 0)) != 0)
		mdb_txn_abort(*txn);
	if (rc) {
		pthread_rwlock_unlock(&e->maplock);
		if (!rdonly)
			bfs__wunlock(e);
	} else if (!rdonly) {
		atomic_store(&e->wtxn, *txn); /* wmutex held */
	}
	return rc;
}

/* Before a transaction ends (while txn is alive, so no other
 * transaction has its address): whether it holds the writer lock. */
static int txn_is_writer(struct bfs__env *e, MDB_txn *txn)
{
	if (!txn || atomic_load(&e->wtxn) != txn)
		return 0;
	atomic_store(&e->wtxn, NULL); /* only its own thread gets here */
	return 1;
}

/* Slack past what the caller says a transaction puts (its values, and
 * the tree pages of each, which the caller counts): LMDB's free list,
 * which can need 8 bytes for every page of the file, so 1/256 of the
 * committed size, plus 64 KiB for the meta database and the tree tops.
 * Extended a chunk at a time so most transactions make no system call
 * beyond fstat. */
#define RESERVE_SLACK (64ull << 10)
#define RESERVE_CHUNK (64ull << 20)
/* bfs__txn_end_drop: values at most this many pages apart are dropped
 * by one call */
#define DROP_GAP 64

/* The map past `used` (the committed end) MADV_RANDOM, before it
 * MADV_NORMAL (readers read ahead), at most two areas of the map. */
static void no_readahead_past(struct bfs__env *e, uint64_t used)
{
	long os = sysconf(_SC_PAGESIZE);
	uint64_t at;

	if (!e->map || os <= 0 ||
	    (e->random_map == e->map && e->random_from == used))
		return;
	at = used / (uint64_t)os * (uint64_t)os;
	if (at > e->mapsize)
		return;
	if (at > 0)
		(void)madvise((void *)e->map, at, MADV_NORMAL);
	if (at < e->mapsize)
		(void)madvise((void *)(e->map + at), e->mapsize - at,
			      MADV_RANDOM);
	e->random_map = e->map;
	e->random_from = used;
}

int bfs__reserve(struct bfs__env *e, uint64_t bytes)
{
	MDB_envinfo info;
	struct stat st;
	uint64_t used, need, to;
	int fd;

	if (!e->writemap)
		return 0;
	if (mdb_env_info(e->env, &info) != 0 ||
	    mdb_env_get_fd(e->env, &fd) != 0)
		return EIO;
	used = ((uint64_t)info.me_last_pgno + 1) * e->psize;
	no_readahead_past(e, used);
	need = used + bytes + RESERVE_SLACK + used / 256;
	if (need > info.me_mapsize)
		need = info.me_mapsize; /* LMDB stops at the map: MDB_MAP_FULL */
	/* another process may have cut the file (it opened with a smaller
	 * map): what is past its end has no blocks any more */
	if (fstat(fd, &st) != 0)
		return errno;
	if ((uint64_t)st.st_size < e->reserved)
		e->reserved = (uint64_t)st.st_size;
	if (need <= e->reserved)
		return 0;
	/* a chunk ahead, but not past the handles' limit (the map may be
	 * larger: another process's) */
	to = need + RESERVE_CHUNK;
	if (to > atomic_load(&e->limit) && need <= atomic_load(&e->limit))
		to = atomic_load(&e->limit);
	if (to < need)
		to = need;
	if (to > info.me_mapsize)
		to = info.me_mapsize;
	if (fallocate(fd, 0, (off_t)used, (off_t)(to - used)) != 0) {
		/* the chunk does not fit: try for just what is needed */
		if (need <= used ||
		    fallocate(fd, 0, (off_t)used, (off_t)(need - used)) != 0)
			return errno ? errno : ENOSPC;
		to = need;
	}
	e->reserved = to;
	return 0;
}

void bfs__drop_range(struct bfs__env *e, const void *from, size_t len)
{
	long os = sysconf(_SC_PAGESIZE);
	uintptr_t base = (uintptr_t)e->map, end = base + e->mapsize;
	uintptr_t a = (uintptr_t)from, b = a + len;

	if (!e->map || os <= 0 || !a || a < base || b > end || b <= a)
		return;
	a &= ~(uintptr_t)(os - 1);
	b = (b + (uintptr_t)os - 1) & ~(uintptr_t)(os - 1);
	(void)madvise((void *)a, b - a, MADV_DONTNEED);
}

int bfs__txn_end_drop(struct bfs__env *e, MDB_txn *txn, int commit,
		      const MDB_val *vals, size_t n)
{
	long os = sysconf(_SC_PAGESIZE);
	int rc = 0, w = txn_is_writer(e, txn);

	if (commit)
		rc = mdb_txn_commit(txn);
	else
		mdb_txn_abort(txn);
	/* Only pages of our own map (maplock still held: it cannot move).
	 * Values put one after the other lie side by side: one call for
	 * each run of them (each call costs the other threads a TLB
	 * flush), pages between two values of a run included -- dropping a
	 * mapping is harmless, the page is read again from the cache. */
	for (size_t i = 0; e->writemap && e->map && os > 0 && i < n;) {
		uintptr_t a = (uintptr_t)vals[i].mv_data;
		uintptr_t b = a + vals[i].mv_size;

		for (i++; i < n; i++) {
			uintptr_t a2 = (uintptr_t)vals[i].mv_data;
			uintptr_t b2 = a2 + vals[i].mv_size;

			if (a2 < b || a2 - b > DROP_GAP * (uintptr_t)os)
				break;
			b = b2;
		}
		bfs__drop_range(e, (const void *)a, b - a);
	}
	pthread_rwlock_unlock(&e->maplock);
	if (w)
		bfs__wunlock(e);
	return rc;
}

int bfs__txn_end(struct bfs__env *e, MDB_txn *txn, int commit)
{
	int rc = 0, w = txn_is_writer(e, txn);

	if (commit)
		rc = mdb_txn_commit(txn);
	else
		mdb_txn_abort(txn);
	pthread_rwlock_unlock(&e->maplock);
	if (w)
		bfs__wunlock(e);
	return rc;
}

int bfs__txn_renew(struct bfs__env *e, MDB_txn *txn)
{
	int rc;

	pthread_rwlock_rdlock(&e->maplock);
	rc = mdb_txn_renew(txn);
	if (rc == MDB_MAP_RESIZED) {
		pthread_rwlock_unlock(&e->maplock);
		rc = adopt_map(e, 0);
		pthread_rwlock_rdlock(&e->maplock);
		if (rc == 0)
			rc = mdb_txn_renew(txn);
	}
	if (rc)
		pthread_rwlock_unlock(&e->maplock);
	return rc;
}

void bfs__txn_reset(struct bfs__env *e, MDB_txn *txn)
{
	mdb_txn_reset(txn);
	pthread_rwlock_unlock(&e->maplock);
}

uint64_t bfs__value_end(const struct bfs__env *e, size_t ksize,
			const MDB_val *v)
{
	/* LMDB puts a value on overflow pages of its own when its node
	 * (8-byte header, key, data) exceeds me_nodemax: half a page's room
	 * less an index slot, as mdb_env_setup computes it */
	uint64_t nodemax = (((e->psize - 16) / 2) & ~1u) - 2;
	const uint8_t *h;
	uint64_t pgno;
	uint32_t pages;
	uint16_t flags;

	if (!e->psize || !v->mv_data || 8 + ksize + v->mv_size <= nodemax)
		return 0;
	/* its first page's header: LMDB's own, in the map (MDB_WRITEMAP)
	 * or in the malloc()ed dirty page */
	h = (const uint8_t *)v->mv_data - 16;
	memcpy(&pgno, h, 8);
	memcpy(&flags, h + 10, 2);
	memcpy(&pages, h + 12, 4);
	if (!(flags & 0x04 /* P_OVERFLOW */))
		return 0;
	return (pgno + pages) * (uint64_t)e->psize;
}

/* ---- damage ------------------------------------------------------------ */

int bfs__check_ovhdr(const struct bfs__env *e, const MDB_val *v)
{
	uintptr_t base = (uintptr_t)e->map, at = (uintptr_t)v->mv_data;
	const uint8_t *h;
	uint64_t off, pgno, hpgno, need;
	uint32_t pages;
	uint16_t flags;
	MDB_envinfo info;

	if (!e->map || at < base || at - base >= e->mapsize)
		return 0; /* a page of the caller's own write transaction */
	off = at - base;
	/* an overflow value starts right after its page's 16-byte header;
	 * a value inside a leaf page never does (nodes start at 16) */
	if (off % e->psize != 16)
		return 0;
	h = (const uint8_t *)v->mv_data - 16;
	pgno = (off - 16) / e->psize;
	memcpy(&hpgno, h, 8);
	memcpy(&flags, h + 10, 2);
	memcpy(&pages, h + 12, 4);
	need = (15 + (uint64_t)v->mv_size) / e->psize + 1;
	if (mdb_env_info(e->env, &info) != 0)
		return 0;
	if (hpgno != pgno || flags != 0x04 /* P_OVERFLOW */ || pages < need ||
	    pgno + pages > (uint64_t)info.me_last_pgno + 1)
		return BFS_E_CORRUPT;
	return 0;
}

void bfs__note_damage(bfs_cache *c, const char *why)
{
	char path[PATH_MAX];
	int fd, zero = 0;

	if (c->o.admin ||
	    !atomic_compare_exchange_strong(&c->e->damaged, &zero, 1))
		return;
	snprintf(path, sizeof(path), "%s/damaged", c->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, why, strlen(why)) < 0) {
		/* the marker is a hint; without it the damage is met again */
	}
	close(fd);
}
