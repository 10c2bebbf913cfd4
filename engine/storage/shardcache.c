/*
 * shardcache.c - the node-local shard cache (see shardcache.h): the
 * objects' states in this process, the fetchers, the choice of what to
 * fetch and evict (shardplan.h) over the shared folder (shardfolder.h),
 * and how a read or a pin is served.
 *
 * DESIGN
 * One lock, c->lock, guards every object's state, the plan and its
 * position, the fetches under way and the counters.  It is never held
 * across a request, a file operation or a wait: a fetcher takes a part
 * under it, drops it for the GET (bfs_storage_read_to, whose sink gathers
 * the body in the fetcher's buffer and pwrites it into the object's file
 * in tmp/ a WRITE_CHUNK at a time), and takes it again to mark the part
 * done; a reader takes its object's descriptor (pins++) under it and
 * preads without it.  Two conditions: c->work (a fetcher may have work:
 * a plan, a pin, a part, room) and c->done (a part or a fetch ended, a
 * pin was let go of: readers and pins waiting look again).
 *
 * An object's life in this process:
 *   ABSENT    not held here; `present` says data/ had it whole when last
 *             looked at (another process's, or let go of by this one)
 *   FETCHING  this process fetches it: its parts go to tmp/, fx says
 *             which are done; reads of done parts pread the tmp file
 *   HELD      its file is open here (fd, LOCK_SH): read with pread; only
 *             an unpinned one is closed (let go of, or evicted)
 * A fetch starts only with the object's node-wide lock (shardfolder.h),
 * after looking in data/ once more, and once its room is reserved; the
 * thread that finishes its last part commits it and it becomes HELD with
 * the same descriptor.  A fetch that fails ends ABSENT with gen moved on
 * and err set, which is what the reads waiting on it return.
 */
#include "engine/storage/shardcache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/storage/shardfolder.h"

enum { ABSENT, FETCHING, HELD };

#define MAX_FETCHERS 256
#define RECOUNT_EVERY_S 5.0  /* the folder is counted again, when its
			      * ledger is full with nothing to evict, at
			      * most this often (a crashed process's
			      * reservation is then given back) */
#define LOOK_AGAIN_S 1.0     /* data/ is looked at again for an object
			      * not known to be there at most this often */
#define SKIP_S 0.25          /* an object another process fetches or
			      * holds is passed over this long */
#define FAILED_S 1.0         /* and one whose fetch failed */
#define START_WAIT_S 0.25    /* a read waits this long at most for a fetch
			      * it asked for to start (room made) */
#define WRITE_CHUNK (1u << 18) /* a fetcher writes a part's body in pieces
			      * of this size, not the 16-32 KiB that curl
			      * hands over: on the bench's loopback epoch
			      * (Linux 6.18, ext4) 1 MiB writes halved
			      * the fetchers' CPU; 256 KiB did as well
			      * and its buffer stays in a core's L2 beside
			      * the decoder's (with 1 MiB the pinned
			      * epoch varied from 0.86 to 0.95 of local in
			      * make bench); 2 and 4 MiB cost more */
#define PLAN_WAIT_S 5.0      /* and for the first plan, when one is due */

struct fetch {
	bfs_shardfolder_tmp tmp;
	uint64_t part;            /* bytes of its parts (part_of) */
	uint32_t nparts;
	uint32_t done, running;   /* parts done, under way */
	uint8_t *state;           /* per part: 0 queued, 1 under way, 2 done */
	_Atomic uint64_t *got;    /* per part: bytes written so far (atomic:
				   * the sink adds, readers estimate) */
	int err;                  /* the first failure: no part after it */
	char errmsg[BFS_ERRMSG_MAX];
	unsigned readers;         /* reads preading tmp.fd now */
	int ending;               /* end_fetch_locked has begun: no read
				   * starts in it (the lock is dropped while
				   * it commits; then fx is freed) */
	double started;
	int64_t epoch;            /* what its bytes count towards: the epoch
				   * of the span it was started for */
};

struct obj {
	uint8_t state;            /* ABSENT, FETCHING, HELD */
	uint8_t present;          /* ABSENT: data/ had it whole when last seen */
	uint32_t urgent;          /* reads waiting for its fetch */
	uint32_t must;            /* pins waiting for it */
	int fd;                   /* HELD: its open file */
	uint32_t pins;            /* HELD: reads and pins using fd now */
	uint32_t gen;             /* fetches of it that ended */
	int err;                  /* how the last one ended */
	uint8_t gave_up;          /* ...and it was the request's error (the
				   * server did not answer within --s3-giveup,
				   * the object was replaced, access refused),
				   * not this node's folder */
	char *errmsg;             /* its message (malloc'd), or NULL */
	double skip_until;        /* another process fetches or holds it */
	double looked;            /* when data/ was last looked at for it */
	struct fetch *fx;         /* FETCHING */
};

/* All protected by c->lock, except what is set at open and read-only
 * after (st, folder, objs, n, opts, cost), and the atomics. */
struct bfs_shardcache {
	bfs_storage *st;
	bfs_shardfolder *folder;
	bfs_storage_object *objs;
	size_t n;
	uint64_t *cost;           /* each object's bytes on disk */
	bfs_shardcache_opts o;
	uint64_t part;
	uint64_t limit;
	uint64_t room;            /* what shards kept whole may take at once:
				   * the limit less the largest shard (room to
				   * fetch the next one while they are read),
				   * at least the largest */
	size_t max_held;          /* descriptors this process keeps at most */

	pthread_mutex_t lock;
	pthread_cond_t work, done;
	int stop;
	struct obj *ob;
	uint8_t *flags;           /* scratch for the plan's choices */
	bfs_shardplan *plan;
	uint64_t pos;             /* where the plan's reader is */
	uint64_t window_end;      /* positions [pos, window_end) are being read
				   * now (bfs_shardcache_window) */
	int64_t epoch;            /* the reader's epoch: what range reads, and
				   * fetches no span asked for, count towards */
	uint64_t epoch_len;       /* positions an epoch (0: not known) */
	int planned;              /* a plan of an epoch has come */
	int expect_plan;          /* one will (bfs_shardcache_expect_plan) */
	size_t *active;           /* objects FETCHING here */
	size_t nactive;
	size_t nheld;
	int stalled;              /* no room for the next fetch: wait for the
				   * plan, a position or an unpin to change */
	int starting;             /* a fetcher is starting a fetch (making its
				   * room): one at a time, so that the room one
				   * evicts for goes to what it evicted for,
				   * and what is needed soonest starts first */
	double last_recount;
	double t0;

	pthread_t tids[MAX_FETCHERS];
	unsigned nthreads;

	bfs_shardcache_stats s;   /* counters (the rest filled on demand) */
	double wait_s;
	uint64_t link_bytes0;     /* the link's rate: bytes and time at the */
	double link_t0;           /* last snapshot */
	double link_mb_s;
};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
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

/* A name with a part starting with '.' (".batchfs-index"): beside the
 * shards, never one of them (a source passes hidden names over). */
static int hidden(const char *n)
{
	return n[0] == '.' || strstr(n, "/.") != NULL;
}

uint64_t bfs_shardcache_default_limit(const char *dir, uint64_t ours)
{
	struct statvfs v;
	uint64_t lim;

	if (statvfs(dir, &v))
		return 0;
	lim = ((uint64_t)v.f_bavail * v.f_frsize + ours) / BFS_SHARDCACHE_SHARE_DEFAULT;
	return lim < BFS_SHARDCACHE_MAX_DEFAULT ? lim : BFS_SHARDCACHE_MAX_DEFAULT;
}

/* ---- counters --------------------------------------------------------------- */

/* Epoch e's slot of the per-epoch counters, opened (emptied: it may hold
 * one 64 epochs old) when e is past the last one; -1 when e is before the
 * first kept.  Lock held. */
static int64_t epoch_slot_locked(bfs_shardcache *c, int64_t e)
{
	if (e > c->s.epoch_last) {
		for (int64_t x = c->s.epoch_last + 1; x <= e; x++)
			c->s.epoch_bytes[x % BFS_SHARDCACHE_EPOCHS] = 0;
		c->s.epoch_last = e;
		if (c->s.epoch_first < 0)
			c->s.epoch_first = e;
		if (c->s.epoch_last - c->s.epoch_first >= BFS_SHARDCACHE_EPOCHS)
			c->s.epoch_first = c->s.epoch_last - BFS_SHARDCACHE_EPOCHS + 1;
	}
	return e < c->s.epoch_first ? -1 : e % BFS_SHARDCACHE_EPOCHS;
}

/* n bytes fetched for epoch e (-1: none known: nothing is counted). */
static void count_bytes_locked(bfs_shardcache *c, int64_t e, uint64_t n)
{
	int64_t slot;

	if (e < 0 || (slot = epoch_slot_locked(c, e)) < 0)
		return;
	c->s.epoch_bytes[slot] += n;
}

static void ewma(double *v, double x)
{
	*v = *v > 0 ? 0.8 * *v + 0.2 * x : x;
}

/* ---- objects held ------------------------------------------------------------ */

static void set_error_locked(struct obj *ob, int err, const char *msg)
{
	ob->err = err;
	free(ob->errmsg);
	ob->errmsg = err && msg && msg[0] ? strdup(msg) : NULL;
}

/* Let go of held object k (unpinned): its descriptor goes into *fd for
 * the caller to close without the lock; it stays in data/. */
static void let_go_locked(bfs_shardcache *c, size_t k, int *fd)
{
	struct obj *ob = &c->ob[k];

	*fd = ob->fd;
	ob->fd = -1;
	ob->state = ABSENT;
	ob->present = 1;
	c->nheld--;
}

/* Look in data/ for object k (another process may have fetched it): held
 * now (1), not there (0).  Called without the lock; takes it. */
static int look_in_folder(bfs_shardcache *c, size_t k)
{
	int fd = bfs_shardfolder_open_object(c->folder, &c->objs[k]);
	struct obj *ob = &c->ob[k];

	pthread_mutex_lock(&c->lock);
	ob->looked = now_s();
	if (fd < 0) {
		ob->present = 0;
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	if (ob->state != ABSENT) { /* another thread of ours got it first */
		pthread_mutex_unlock(&c->lock);
		close(fd);
		return 1;
	}
	ob->state = HELD;
	ob->fd = fd;
	ob->present = 0;
	c->nheld++;
	c->s.found++;
	pthread_cond_broadcast(&c->done);
	pthread_mutex_unlock(&c->lock);
	return 1;
}

/* ---- fetching ---------------------------------------------------------------- */

/* A part's body on its way to the object's file: what the sink was given
 * and has not written yet is buf[0, len), for file offset off. */
struct part_ctx {
	bfs_shardcache *c;
	struct fetch *fx;
	uint32_t p;
	uint8_t *buf;  /* the fetcher's WRITE_CHUNK bytes, or NULL: write
			* each piece as it comes */
	size_t len;
	uint64_t off;
};

static int write_at(struct part_ctx *pc, uint64_t off, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t k = pwrite(pc->fx->tmp.fd, b, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		b += k;
		off += (uint64_t)k;
		n -= (size_t)k;
		atomic_fetch_add(&pc->fx->got[pc->p], (uint64_t)k);
	}
	return 0;
}

static int flush_part(struct part_ctx *pc)
{
	int err = write_at(pc, pc->off, pc->buf, pc->len);

	pc->off += pc->len;
	pc->len = 0;
	return err;
}

/* The storage layer's sink: bytes [off, off + n) of the part, in order
 * (a retry goes on from where the body broke; a jump is written out
 * first all the same). */
static int part_sink(void *ctx, uint64_t off, const void *buf, size_t n)
{
	struct part_ctx *pc = ctx;
	const uint8_t *b = buf;
	int err;

	if (!pc->buf)
		return write_at(pc, off, b, n);
	if (pc->len && off != pc->off + pc->len && (err = flush_part(pc)))
		return err;
	if (!pc->len)
		pc->off = off;
	while (n) {
		size_t k = WRITE_CHUNK - pc->len < n ? WRITE_CHUNK - pc->len : n;

		memcpy(pc->buf + pc->len, b, k);
		pc->len += k;
		b += k;
		n -= k;
		if (pc->len == WRITE_CHUNK && (err = flush_part(pc)))
			return err;
	}
	return 0;
}

/* The part size for an object of `size` bytes.  Spread (an object a
 * reader waits for, or the only fetch): over every fetcher, down to 1 MiB
 * in 64 KiB steps, so that it comes in a few round trips over several
 * connections, not in one connection's slow start.  Otherwise, with other
 * objects under way beside it: equal parts of at most opts.part_bytes,
 * since each request costs the server more than its bytes do (SeaweedFS
 * spent twice the CPU on 1.4 MiB parts as on whole 11 MB objects). */
static uint64_t part_of(const bfs_shardcache *c, uint64_t size, int spread)
{
	uint64_t p, n;

	if (spread) {
		p = (size + c->o.fetchers - 1) / c->o.fetchers;
		if (p < (1u << 20))
			p = 1u << 20;
	} else {
		n = (size + c->part - 1) / c->part;
		p = n ? (size + n - 1) / n : c->part;
	}
	p = (p + 65535) / 65536 * 65536;
	return p < c->part ? p : c->part;
}

/* The plan's next use of object k now (those waited for first). */
static uint64_t need_of_locked(const bfs_shardcache *c, size_t k)
{
	return c->ob[k].urgent || c->ob[k].must ? 0
	     : bfs_shardplan_next(c->plan, k, c->pos);
}

/* The next part to fetch: of the object under way needed soonest (a pin
 * first), its first queued part.  1 with *k and *p, else 0. */
static int next_part_locked(bfs_shardcache *c, size_t *k, uint32_t *p)
{
	uint64_t best = UINT64_MAX;
	int found = 0;

	for (size_t a = 0; a < c->nactive; a++) {
		size_t i = c->active[a];
		struct fetch *fx = c->ob[i].fx;
		uint64_t need;

		if (!fx || fx->err || fx->done + fx->running == fx->nparts)
			continue; /* still starting, failed, or all handed out */
		need = need_of_locked(c, i);
		if (!found || need < best) {
			found = 1;
			best = need;
			*k = i;
		}
	}
	if (!found)
		return 0;
	for (uint32_t q = 0; q < c->ob[*k].fx->nparts; q++)
		if (c->ob[*k].fx->state[q] == 0) {
			*p = q;
			return 1;
		}
	return 0;
}

static void free_fetch(struct fetch *fx)
{
	if (!fx)
		return;
	free(fx->state);
	free((void *)fx->got);
	free(fx);
}

static void drop_active_locked(bfs_shardcache *c, size_t k)
{
	for (size_t a = 0; a < c->nactive; a++)
		if (c->active[a] == k) {
			c->active[a] = c->active[--c->nactive];
			return;
		}
}

/* A fetch is over (every part done, or failed with none under way):
 * commit it or give it up.  Lock held; dropped inside. */
static void end_fetch_locked(bfs_shardcache *c, size_t k)
{
	struct obj *ob = &c->ob[k];
	struct fetch *fx = ob->fx;
	const bfs_storage_object *o = &c->objs[k];
	char errmsg[BFS_ERRMSG_MAX] = "";
	int err = fx->err;

	/* no reader may be in fx when it goes (nor in the file when it is
	 * given up), and none may start once the lock is dropped below:
	 * they wait for the object to be held (parts_due_locked) */
	fx->ending = 1;
	while (fx->readers)
		pthread_cond_wait(&c->done, &c->lock);
	drop_active_locked(c, k);
	pthread_mutex_unlock(&c->lock);
	if (!err)
		err = bfs_shardfolder_commit(c->folder, o, &fx->tmp, errmsg);
	else
		bfs_shardfolder_abandon(c->folder, &fx->tmp);
	bfs_shardfolder_unlock(c->folder, o->name);
	pthread_mutex_lock(&c->lock);
	ob->gen++;
	ob->fx = NULL;
	if (!err) {
		ob->state = HELD;
		ob->fd = fx->tmp.fd;
		c->nheld++;
		c->s.fetched++;
		set_error_locked(ob, 0, NULL);
	} else {
		ob->state = ABSENT;
		ob->present = 0;
		c->s.failures++;
		set_error_locked(ob, err, fx->err ? fx->errmsg : errmsg);
		ob->gave_up = fx->err != 0;
		/* not again at once: the request had its retries already */
		ob->skip_until = now_s() + FAILED_S;
	}
	free_fetch(fx);
	c->stalled = 0;
	pthread_cond_broadcast(&c->done);
	pthread_cond_broadcast(&c->work);
}

/* Fetch part p of object k (claimed under way) through buf (the
 * fetcher's WRITE_CHUNK bytes, or NULL).  Lock held; dropped for the
 * request. */
static void run_part_locked(bfs_shardcache *c, size_t k, uint32_t p, uint8_t *buf)
{
	struct obj *ob = &c->ob[k];
	struct fetch *fx = ob->fx;
	const bfs_storage_object *o = &c->objs[k];
	uint64_t off = (uint64_t)p * fx->part;
	uint64_t len = o->size - off < fx->part ? o->size - off : fx->part;
	struct part_ctx pc = { c, fx, p, buf, 0, 0 };
	char errmsg[BFS_ERRMSG_MAX] = "";
	double t;
	int err;

	fx->state[p] = 1;
	fx->running++;
	pthread_mutex_unlock(&c->lock);
	t = now_s();
	err = bfs_storage_read_to(c->st, o, off, len, part_sink, &pc, errmsg);
	if (!err && pc.len)
		err = flush_part(&pc);
	t = now_s() - t;
	pthread_mutex_lock(&c->lock);
	fx->running--;
	if (!err) {
		fx->state[p] = 2;
		fx->done++;
		c->s.bytes_fetched += len;
		count_bytes_locked(c, fx->epoch, len);
		if (len >= (1u << 20) && t > 0)
			ewma(&c->s.part_mb_s, (double)len / t / 1e6);
	} else {
		fx->state[p] = 0;
		if (!fx->err) {
			fx->err = err;
			snprintf(fx->errmsg, sizeof(fx->errmsg), "%s",
				 errmsg[0] ? errmsg : bfs_strerror(err));
		}
	}
	pthread_cond_broadcast(&c->done);
	if (fx->done == fx->nparts || (fx->err && !fx->running))
		end_fetch_locked(c, k);
}

/* Make room for `cost` bytes to fetch object k, needed at distance need:
 * evict what the plan needs later than that and later than the window
 * being read now (what the decode threads read at once is all in use: a
 * read that waits may not take another's shard, or two would take turns
 * fetching each other's); for a pin, anything not in use.  1 when an
 * eviction was made (try the reservation again), 0 when nothing can go.
 * Lock held; dropped inside. */
static int evict_one_locked(bfs_shardcache *c, size_t k, uint64_t need)
{
	double now = now_s();
	uint64_t window = c->window_end > c->pos ? c->window_end - c->pos : 0;
	ssize_t v;
	int fd = -1, rc;

	if (!c->ob[k].must && window > need)
		need = window;
	for (size_t i = 0; i < c->n; i++) {
		const struct obj *ob = &c->ob[i];

		c->flags[i] = i != k && now >= ob->skip_until && !ob->urgent &&
			      !ob->must &&
			      ((ob->state == HELD && !ob->pins) ||
			       (ob->state == ABSENT && ob->present));
	}
	v = bfs_shardplan_victim(c->plan, c->pos, c->flags, need);
	if (v < 0)
		return 0;
	if (c->ob[v].state == HELD)
		let_go_locked(c, (size_t)v, &fd);
	pthread_mutex_unlock(&c->lock);
	if (fd >= 0)
		close(fd);
	rc = bfs_shardfolder_evict(c->folder, &c->objs[v]);
	pthread_mutex_lock(&c->lock);
	if (rc == 1) {
		c->s.evictions++;
		c->s.evicted_bytes += c->objs[v].size;
		c->ob[v].present = 0;
	} else if (rc == -ENOENT) {
		c->ob[v].present = 0;
	} else {
		/* another process holds or fetches it: not ours to evict */
		c->ob[v].skip_until = now + SKIP_S;
	}
	return 1;
}

/* Count the folder again (a crashed process's room comes back), at most
 * every RECOUNT_EVERY_S.  1 if it was counted.  Lock held; dropped inside. */
static int recount_locked(bfs_shardcache *c)
{
	uint8_t *present;
	uint64_t removed = 0;
	int err;

	if (now_s() - c->last_recount < RECOUNT_EVERY_S)
		return 0;
	c->last_recount = now_s();
	if (!(present = calloc(c->n ? c->n : 1, 1)))
		return 0;
	pthread_mutex_unlock(&c->lock);
	err = bfs_shardfolder_recount(c->folder, c->objs, c->n, present, &removed, NULL);
	pthread_mutex_lock(&c->lock);
	if (!err) {
		for (size_t i = 0; i < c->n; i++)
			if (c->ob[i].state == ABSENT)
				c->ob[i].present = present[i];
		c->s.removed += removed;
	}
	free(present);
	return !err;
}

/* Start the next fetch: an object a pin waits for, else the plan's next
 * whole object.  1 when something was done (a fetch started, an object
 * found in data/, one passed over), 0 when there is nothing to start or
 * no room.  Lock held; dropped inside. */
static int start_next_locked(bfs_shardcache *c)
{
	double now = now_s();
	ssize_t k = -1;
	struct obj *ob;
	struct fetch *fx;
	bfs_shardfolder_tmp tmp;
	char errmsg[BFS_ERRMSG_MAX] = "";
	uint64_t need;
	int rc, err, spread;

	if (c->nactive >= c->o.fetchers || c->starting)
		return 0;
	/* a pin first, then a read that waits, then the plan */
	for (size_t i = 0; i < c->n && k < 0; i++)
		if (c->ob[i].must && c->ob[i].state == ABSENT && now >= c->ob[i].skip_until)
			k = (ssize_t)i;
	for (size_t i = 0; i < c->n && k < 0; i++)
		if (c->ob[i].urgent && c->ob[i].state == ABSENT && now >= c->ob[i].skip_until)
			k = (ssize_t)i;
	if (k < 0) {
		if (c->stalled)
			return 0;
		for (size_t i = 0; i < c->n; i++)
			c->flags[i] = c->ob[i].state == ABSENT && now >= c->ob[i].skip_until;
		if ((k = bfs_shardplan_next_fetch(c->plan, c->pos, c->flags)) < 0)
			return 0;
	}
	ob = &c->ob[k];
	need = need_of_locked(c, (size_t)k);
	spread = !need || !c->nactive;
	ob->state = FETCHING; /* claimed: no other thread of ours starts it */
	ob->fx = NULL;
	c->active[c->nactive++] = (size_t)k;
	c->starting = 1;
	pthread_mutex_unlock(&c->lock);

	rc = bfs_shardfolder_lock(c->folder, c->objs[k].name);
	if (rc == 1) {
		int fd = bfs_shardfolder_open_object(c->folder, &c->objs[k]);

		if (fd >= 0) { /* it came while we looked */
			bfs_shardfolder_unlock(c->folder, c->objs[k].name);
			pthread_mutex_lock(&c->lock);
			c->starting = 0;
			pthread_cond_broadcast(&c->work);
			drop_active_locked(c, (size_t)k);
			ob->state = HELD;
			ob->fd = fd;
			ob->present = 0;
			c->nheld++;
			c->s.found++;
			pthread_cond_broadcast(&c->done);
			return 1;
		}
		err = bfs_shardfolder_reserve(c->folder, &c->objs[k], &tmp, errmsg);
		while (err == -ENOSPC) {
			pthread_mutex_lock(&c->lock);
			if (!evict_one_locked(c, (size_t)k, need) && !recount_locked(c)) {
				pthread_mutex_unlock(&c->lock);
				break;
			}
			pthread_mutex_unlock(&c->lock);
			err = bfs_shardfolder_reserve(c->folder, &c->objs[k], &tmp, errmsg);
		}
		if (err)
			bfs_shardfolder_unlock(c->folder, c->objs[k].name);
	} else {
		err = rc == 0 ? -EBUSY : rc; /* another process fetches it */
	}
	pthread_mutex_lock(&c->lock);
	c->starting = 0;
	pthread_cond_broadcast(&c->work);
	fx = err ? NULL : calloc(1, sizeof(*fx));
	if (!err && !fx) {
		bfs_shardfolder_abandon(c->folder, &tmp);
		bfs_shardfolder_unlock(c->folder, c->objs[k].name);
		err = -ENOMEM;
	}
	if (err) {
		drop_active_locked(c, (size_t)k);
		ob->state = ABSENT;
		if (err == -ENOSPC) {
			c->stalled = 1; /* until the plan, the position or a pin moves */
			return 0;
		}
		ob->skip_until = now_s() + SKIP_S;
		if (err != -EBUSY) { /* the folder failed: say so to its readers */
			ob->gen++;
			set_error_locked(ob, err, errmsg);
			ob->gave_up = 0; /* its records may still be read by range */
			c->s.failures++;
			pthread_cond_broadcast(&c->done);
		}
		return 1;
	}
	fx->tmp = tmp;
	fx->part = part_of(c, c->objs[k].size, spread);
	fx->nparts = c->objs[k].size ? (uint32_t)((c->objs[k].size + fx->part - 1) / fx->part) : 0;
	fx->state = calloc(fx->nparts ? fx->nparts : 1, 1);
	fx->got = calloc(fx->nparts ? fx->nparts : 1, sizeof(*fx->got));
	fx->started = now_s();
	/* its bytes count towards the epoch of the span it is fetched for
	 * (the next one of its ahead: fetched early for the next epoch, they
	 * are that epoch's), else the reader's */
	fx->epoch = c->epoch;
	if (c->epoch_len && c->epoch >= 0) {
		uint64_t nu = bfs_shardplan_next(c->plan, (size_t)k, c->pos);

		if (nu != UINT64_MAX && c->pos + nu >= c->pos)
			fx->epoch = (int64_t)((c->pos + nu) / c->epoch_len);
	}
	ob->fx = fx;
	if (!fx->state || !fx->got) {
		fx->err = -ENOMEM;
		snprintf(fx->errmsg, sizeof(fx->errmsg), "out of memory");
	}
	if (!fx->nparts || fx->err)
		end_fetch_locked(c, (size_t)k); /* an empty object, or none */
	pthread_cond_broadcast(&c->work);
	return 1;
}

static void *fetcher_main(void *arg)
{
	bfs_shardcache *c = arg;
	uint8_t *buf = malloc(WRITE_CHUNK); /* NULL: write as it comes */

	pthread_setname_np(pthread_self(), "bfs-fetch"); /* top -H, perf, gdb */
	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		struct timespec until;
		size_t k;
		uint32_t p;

		if (next_part_locked(c, &k, &p)) {
			run_part_locked(c, k, p, buf);
			continue;
		}
		if (start_next_locked(c))
			continue;
		/* nothing now: a plan, a pin or room wakes us; another
		 * process's fetch is looked at again in a while */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 100000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&c->work, &c->lock, &until);
	}
	pthread_mutex_unlock(&c->lock);
	free(buf);
	return NULL;
}

/* ---- open and close ---------------------------------------------------------- */

/* Raise the soft limit of open files to the hard one: held objects are
 * open files.  What this process may hold: half of it. */
static size_t files_we_may_hold(void)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r))
		return 256;
	if (r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
		getrlimit(RLIMIT_NOFILE, &r);
	}
	if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur > 131072)
		return 65536;
	return r.rlim_cur / 2 > 64 ? (size_t)(r.rlim_cur / 2) : 64;
}

int bfs_shardcache_open(bfs_storage *st, const bfs_shardcache_opts *o,
			bfs_shardcache **out, char *errmsg)
{
	bfs_shardcache *c = calloc(1, sizeof(*c));
	uint8_t *present = NULL;
	uint64_t largest = 0, total = 0;
	size_t big = 0;
	int err;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->st = st;
	c->o = *o;
	if (!c->o.fetchers)
		c->o.fetchers = 8;
	if (c->o.fetchers > MAX_FETCHERS)
		c->o.fetchers = MAX_FETCHERS;
	if (!c->o.lock_wait_s)
		c->o.lock_wait_s = 30;
	if (!c->o.wait_percent)
		c->o.wait_percent = 10;
	c->part = c->o.part_bytes ? c->o.part_bytes : BFS_SHARDCACHE_PART_DEFAULT;
	c->epoch = -1;
	c->s.epoch_first = c->s.epoch_last = -1;
	c->t0 = c->link_t0 = now_s();
	c->max_held = files_we_may_hold();
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->done, NULL);

	if ((err = bfs_storage_list(st, &c->objs, &c->n, errmsg)))
		goto fail;
	for (size_t i = 0; i < c->n; i++) {
		if (!name_ok(c->objs[i].name)) {
			err = -EINVAL;
			bfs_seterr(errmsg, "%s: object \"%.300s\" has a name that is "
				   "no safe relative path (empty, '.' or '..' parts); "
				   "rename it", bfs_storage_url(st), c->objs[i].name);
			goto fail;
		}
		total += c->objs[i].size;
	}
	c->ob = calloc(c->n ? c->n : 1, sizeof(*c->ob));
	c->cost = calloc(c->n ? c->n : 1, sizeof(*c->cost));
	c->flags = calloc(c->n ? c->n : 1, 1);
	c->active = calloc(c->o.fetchers, sizeof(*c->active));
	present = calloc(c->n ? c->n : 1, 1);
	if (!c->ob || !c->cost || !c->flags || !c->active || !present) {
		err = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < c->n; i++) {
		c->ob[i].fd = -1;
		c->cost[i] = bfs_shardfolder_cost(c->objs[i].size, strlen(c->objs[i].etag));
		/* the limit must hold the largest shard: a sidecar index
		 * larger than every shard is read into memory, not cached */
		if (c->cost[i] > largest && !hidden(c->objs[i].name)) {
			largest = c->cost[i];
			big = i;
		}
	}
	if ((err = bfs_shardplan_create(c->n, c->cost, &c->plan)))
		goto fail;
	if ((err = bfs_shardfolder_open(o->dir, bfs_storage_root(st),
					o->max_bytes ? o->max_bytes : UINT64_MAX,
					c->o.lock_wait_s * 1000, &c->folder, errmsg)))
		goto fail;
	if ((err = bfs_shardfolder_recount(c->folder, c->objs, c->n, present,
					   &c->s.removed, errmsg)))
		goto fail;
	c->last_recount = now_s();
	c->limit = o->max_bytes ? o->max_bytes
		 : bfs_shardcache_default_limit(o->dir, bfs_shardfolder_used(c->folder));
	bfs_shardfolder_set_limit(c->folder, c->limit);
	if (largest > c->limit) {
		err = -ENOSPC;
		bfs_seterr(errmsg, "the shard cache's limit, %.1f MiB%s, cannot hold "
			   "the largest object of %s, %s (%.1f MiB): give a larger "
			   "--shard-cache-size (or split the shards smaller)",
			   c->limit / 1048576.0, o->max_bytes ? "" : " (the default: "
			   "a quarter of the free space)", bfs_storage_url(st),
			   c->objs[big].name, largest / 1048576.0);
		goto fail;
	}
	c->room = c->limit - largest > largest ? c->limit - largest : largest;
	for (size_t i = 0; i < c->n; i++)
		c->ob[i].present = present[i];
	c->s.objects = c->n;
	c->s.bytes_total = total;
	for (; c->nthreads < c->o.fetchers; c->nthreads++)
		if (pthread_create(&c->tids[c->nthreads], NULL, fetcher_main, c))
			break;
	if (!c->nthreads) {
		err = -EAGAIN;
		bfs_seterr(errmsg, "shard cache: cannot start a fetcher thread");
		goto fail;
	}
	free(present);
	*out = c;
	return 0;
fail:
	free(present);
	bfs_shardcache_close(c);
	return err;
}

void bfs_shardcache_cancel(bfs_shardcache *c)
{
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_cond_broadcast(&c->work);
	pthread_cond_broadcast(&c->done);
	pthread_mutex_unlock(&c->lock);
	/* a request under way ends at once */
	bfs_storage_cancel(c->st);
}

void bfs_shardcache_close(bfs_shardcache *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_cond_broadcast(&c->work);
	pthread_cond_broadcast(&c->done);
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < c->nthreads; i++)
		pthread_join(c->tids[i], NULL);
	for (size_t i = 0; c->ob && i < c->n; i++) {
		struct obj *ob = &c->ob[i];

		if (ob->fd >= 0)
			close(ob->fd);
		if (ob->fx) { /* started but never run: the threads are gone */
			bfs_shardfolder_abandon(c->folder, &ob->fx->tmp);
			bfs_shardfolder_unlock(c->folder, c->objs[i].name);
			free_fetch(ob->fx);
		}
		free(ob->errmsg);
	}
	bfs_shardfolder_close(c->folder);
	bfs_shardplan_destroy(c->plan);
	bfs_storage_objects_free(c->objs, c->n);
	free(c->ob);
	free(c->cost);
	free(c->flags);
	free(c->active);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->done);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

size_t bfs_shardcache_count(const bfs_shardcache *c) { return c->n; }

const bfs_storage_object *bfs_shardcache_object(const bfs_shardcache *c, size_t k)
{
	return k < c->n ? &c->objs[k] : NULL;
}

static int cmp_name(const void *k, const void *o)
{
	return strcmp(k, ((const bfs_storage_object *)o)->name);
}

ssize_t bfs_shardcache_find(const bfs_shardcache *c, const char *name)
{
	const bfs_storage_object *o = bsearch(name, c->objs, c->n, sizeof(*c->objs),
					      cmp_name);

	return o ? o - c->objs : -1;
}

const char *bfs_shardcache_path(const bfs_shardcache *c)
{
	return bfs_shardfolder_path(c->folder);
}

bfs_storage *bfs_shardcache_storage(bfs_shardcache *c) { return c->st; }

/* ---- the plan ------------------------------------------------------------------ */

static void set_epoch_locked(bfs_shardcache *c, int64_t epoch)
{
	if (epoch < 0 || epoch == c->epoch)
		return;
	epoch_slot_locked(c, epoch); /* listed, even with nothing fetched */
	c->epoch = epoch;
}

/* Let go of held objects the plan no longer needs, and of the furthest
 * needed past max_held, so that other processes may evict them.  Lock
 * held; dropped inside. */
static void let_go_unneeded_locked(bfs_shardcache *c)
{
	int *fds = NULL;
	size_t nf = 0;

	for (size_t i = 0; i < c->n; i++) {
		struct obj *ob = &c->ob[i];

		if (ob->state != HELD || ob->pins || ob->urgent || ob->must ||
		    bfs_shardplan_next(c->plan, i, c->pos) != UINT64_MAX)
			continue;
		if (!fds && !(fds = malloc(c->nheld * sizeof(*fds))))
			return;
		let_go_locked(c, i, &fds[nf++]);
	}
	while (c->nheld > c->max_held) {
		ssize_t v;

		for (size_t i = 0; i < c->n; i++)
			c->flags[i] = c->ob[i].state == HELD && !c->ob[i].pins &&
				      !c->ob[i].urgent && !c->ob[i].must;
		if ((v = bfs_shardplan_victim(c->plan, c->pos, c->flags, 0)) < 0)
			break;
		if (!fds && !(fds = malloc(c->nheld * sizeof(*fds))))
			return;
		let_go_locked(c, (size_t)v, &fds[nf++]);
	}
	if (!nf) {
		free(fds);
		return;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < nf; i++)
		close(fds[i]);
	free(fds);
	pthread_mutex_lock(&c->lock);
}

int bfs_shardcache_plan(bfs_shardcache *c, const bfs_span *spans, size_t n,
			uint64_t pos, int64_t epoch)
{
	int err;

	pthread_mutex_lock(&c->lock);
	err = bfs_shardplan_set(c->plan, spans, n, c->room, c->limit);
	if (!err) {
		c->pos = pos;
		set_epoch_locked(c, epoch);
		c->planned |= epoch >= 0;
		c->stalled = 0;
		let_go_unneeded_locked(c);
		pthread_cond_broadcast(&c->work);
		pthread_cond_broadcast(&c->done);
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

void bfs_shardcache_epoch_positions(bfs_shardcache *c, uint64_t n)
{
	pthread_mutex_lock(&c->lock);
	c->epoch_len = n;
	pthread_mutex_unlock(&c->lock);
}

void bfs_shardcache_window(bfs_shardcache *c, uint64_t end)
{
	pthread_mutex_lock(&c->lock);
	c->window_end = end;
	pthread_mutex_unlock(&c->lock);
}

void bfs_shardcache_expect_plan(bfs_shardcache *c)
{
	pthread_mutex_lock(&c->lock);
	c->expect_plan = 1;
	pthread_mutex_unlock(&c->lock);
}

void bfs_shardcache_advance(bfs_shardcache *c, uint64_t pos, int64_t epoch)
{
	pthread_mutex_lock(&c->lock);
	if (pos != c->pos || epoch != c->epoch) {
		c->pos = pos;
		set_epoch_locked(c, epoch);
		c->stalled = 0;
		/* one idle fetcher looks; one that starts a fetch wakes the
		 * rest for its parts (start_next_locked) */
		pthread_cond_signal(&c->work);
	}
	pthread_mutex_unlock(&c->lock);
}

/* ---- reading ----------------------------------------------------------------- */

/* A pin let go of object k.  When it was the last, and a fetch waits for
 * room (stalled), k may be evicted now: one fetcher tries again.
 * Otherwise nobody waits for it, and the fetchers sleep on.  A record
 * read lets go of its object too, but wakes nobody: a stalled fetch
 * tries again when the reader's position moves (bfs_shardcache_advance),
 * which is when an object's use ends; a wake-up per record read kept
 * eight fetchers busy taking the lock for nothing. */
static void unstall_locked(bfs_shardcache *c, const struct obj *ob)
{
	if (ob->pins || !c->stalled)
		return;
	c->stalled = 0;
	pthread_cond_signal(&c->work);
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t k = pread(fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		got += (size_t)k;
	}
	return 0;
}

/* The error of object k's last fetch, for a reader that waited on it. */
static int fetch_error_locked(bfs_shardcache *c, size_t k, char *errmsg)
{
	const struct obj *ob = &c->ob[k];

	bfs_seterr(errmsg, "%s", ob->errmsg ? ob->errmsg : bfs_strerror(ob->err));
	return ob->err;
}

/* A record of object k read by range.  Lock held; dropped for the GET. */
static int range_read_locked(bfs_shardcache *c, size_t k, uint64_t off,
			     void *buf, size_t len, char *errmsg)
{
	double t;
	int err;

	/* a kept-whole object not under way starts now (it is due) */
	if (c->ob[k].state == ABSENT &&
	    bfs_shardplan_whole(c->plan, k, c->pos))
		pthread_cond_signal(&c->work);
	c->s.misses++;
	pthread_mutex_unlock(&c->lock);
	t = now_s();
	err = bfs_storage_read(c->st, &c->objs[k], off, buf, len, errmsg);
	t = now_s() - t;
	pthread_mutex_lock(&c->lock);
	if (!err) {
		c->s.range_reads++;
		c->s.range_bytes += len;
		count_bytes_locked(c, c->epoch, len);
		ewma(&c->s.range_ms, t * 1e3);
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

/* Is waiting for the parts holding [off, off + len) of object k (under
 * way here) due sooner than a range read?  2: they are done; 1: wait;
 * 0: read by range. */
static int parts_due_locked(const bfs_shardcache *c, size_t k, uint64_t off,
			    size_t len)
{
	const struct fetch *fx = c->ob[k].fx;
	uint32_t p0, p1;
	uint64_t left = 0;
	int done = 1;

	if (!fx || fx->err)
		return 0;
	if (fx->ending) /* being committed: held in a moment */
		return 1;
	p0 = (uint32_t)(off / fx->part);
	p1 = (uint32_t)((off + len - 1) / fx->part);
	for (uint32_t p = p0; p <= p1 && p < fx->nparts; p++) {
		uint64_t plen = c->objs[k].size - (uint64_t)p * fx->part;

		if (plen > fx->part)
			plen = fx->part;
		if (fx->state[p] == 2)
			continue;
		done = 0;
		if (fx->state[p] == 0)
			return 0; /* not even started: a range read is sooner */
		left += plen - atomic_load(&fx->got[p]);
	}
	if (done)
		return 2;
	/* unmeasured yet: wait for what is under way */
	if (c->s.part_mb_s <= 0 || c->s.range_ms <= 0)
		return 1;
	return (double)left / (c->s.part_mb_s * 1e6) * 1e3 <= c->s.range_ms ? 1 : 0;
}

static void wait_done_locked(bfs_shardcache *c, double seconds)
{
	struct timespec until;
	long ns = (long)(seconds * 1e9);

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ns / 1000000000L;
	until.tv_nsec += ns % 1000000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&c->done, &c->lock, &until);
}

/* Is object k worth waiting for whole, rather than reading its records by
 * range: the plan keeps its span whole, and what the span still needs of
 * it is at least opts.wait_percent of the object (a whole fetch then
 * costs fewer bytes and requests than the range reads, and brings the
 * rest of its records at once). */
static int wants_whole_locked(const bfs_shardcache *c, size_t k)
{
	return bfs_shardplan_whole(c->plan, k, c->pos) &&
	       bfs_shardplan_bytes_ahead(c->plan, k, c->pos) * 100 >=
	       c->objs[k].size * c->o.wait_percent;
}

int bfs_shardcache_read(bfs_shardcache *c, size_t k, uint64_t off, void *buf,
			size_t len, char *errmsg)
{
	const bfs_storage_object *o;
	struct obj *ob;
	double since = 0, deadline = 0;
	int err = 0, urgent = 0;
	uint32_t gen;

	if (k >= c->n)
		return -EINVAL;
	o = &c->objs[k];
	ob = &c->ob[k];
	if (off > o->size || len > o->size - off) {
		bfs_seterr(errmsg, "%s%s: bytes %llu..%llu are past its end (%llu)",
			   bfs_storage_root(c->st), o->name, (unsigned long long)off,
			   (unsigned long long)(off + len), (unsigned long long)o->size);
		return -ERANGE;
	}
	if (!len)
		return 0;
	pthread_mutex_lock(&c->lock);
	gen = ob->gen;
	for (;;) {
		int due;

		if (c->stop) {
			err = -ECANCELED;
			bfs_seterr(errmsg, "%s%s: the mount is ending",
				   bfs_storage_root(c->st), o->name);
			break;
		}
		if (ob->state == HELD) {
			int fd = ob->fd;

			ob->pins++;
			if (since)
				c->s.misses++;
			else
				c->s.hits++;
			pthread_mutex_unlock(&c->lock);
			err = pread_all(fd, buf, len, off);
			pthread_mutex_lock(&c->lock);
			ob->pins--; /* wakes no fetcher: see unstall_locked */
			if (err)
				bfs_seterr(errmsg, "shard cache %s: reading %s: %s",
					   bfs_shardcache_path(c), o->name, strerror(-err));
			break;
		}
		/* a fetch this read waited for gave up: its error, not a
		 * range read that would wait as long again (--s3-giveup
		 * bounds the wait; the batch is started again by its next
		 * read) */
		if (ob->state == ABSENT && ob->gen != gen && ob->err && ob->gave_up) {
			err = fetch_error_locked(c, k, errmsg);
			break;
		}
		if (ob->state == ABSENT &&
		    (ob->present || now_s() - ob->looked >= LOOK_AGAIN_S)) {
			pthread_mutex_unlock(&c->lock);
			look_in_folder(c, k);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (!since)
			since = now_s();
		if (c->expect_plan && !c->planned && now_s() < since + PLAN_WAIT_S) {
			wait_done_locked(c, 0.01); /* the plan first */
			continue;
		}
		if (ob->state == FETCHING) {
			due = parts_due_locked(c, k, off, len);
			if (due == 2) { /* its parts are written: read them there */
				struct fetch *fx = ob->fx;
				int fd = fx->tmp.fd;

				fx->readers++;
				c->s.misses++;
				pthread_mutex_unlock(&c->lock);
				err = pread_all(fd, buf, len, off);
				pthread_mutex_lock(&c->lock);
				fx->readers--;
				pthread_cond_broadcast(&c->done);
				if (err)
					bfs_seterr(errmsg, "shard cache %s: reading %s: %s",
						   bfs_shardcache_path(c), o->name,
						   strerror(-err));
				break;
			}
			/* the part is due sooner than a range read, or the rest
			 * of the object is worth waiting for: its parts first */
			if (due == 1 || !ob->fx || /* starting: parts soon */
			    (!ob->fx->err && wants_whole_locked(c, k))) {
				if (!urgent) {
					ob->urgent++;
					urgent = 1;
				}
				wait_done_locked(c, 0.05);
				continue;
			}
		} else if (wants_whole_locked(c, k)) {
			/* due now and worth its whole: its fetch first of all,
			 * and wait for it -- unless it cannot start (no room, a
			 * fetch that just failed).  Another process's fetch: wait
			 * for its commit (up to lock_wait_s), so that the node
			 * fetches no byte twice. */
			if (!deadline)
				deadline = since + (bfs_shardfolder_busy(c->folder, o->name) == 1
						    ? c->o.lock_wait_s : START_WAIT_S);
			if (now_s() < deadline && !(ob->err && now_s() < ob->skip_until)) {
				if (!urgent) {
					ob->urgent++;
					urgent = 1;
					pthread_cond_broadcast(&c->work);
				}
				ob->looked = 0; /* look in data/ next time */
				wait_done_locked(c, 0.02);
				continue;
			}
		}
		/* read the record alone */
		if (urgent) {
			ob->urgent--;
			urgent = 0;
		}
		c->s.waits += now_s() - since > 0.001;
		c->wait_s += now_s() - since;
		return range_read_locked(c, k, off, buf, len, errmsg);
	}
	if (urgent)
		ob->urgent--;
	if (since) {
		c->s.waits++;
		c->wait_s += now_s() - since;
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

int bfs_shardcache_pin(bfs_shardcache *c, size_t k, int *fd, char *errmsg)
{
	struct obj *ob;
	uint32_t gen;
	double since = 0, deadline = 0;
	int err = 0;

	*fd = -1;
	if (k >= c->n)
		return -EINVAL;
	ob = &c->ob[k];
	pthread_mutex_lock(&c->lock);
	ob->must++;
	gen = ob->gen;
	pthread_cond_broadcast(&c->work);
	for (;;) {
		if (c->stop) {
			err = -ECANCELED;
			bfs_seterr(errmsg, "%s%s: the mount is ending",
				   bfs_storage_root(c->st), c->objs[k].name);
			break;
		}
		if (ob->state == HELD) {
			ob->pins++;
			*fd = ob->fd;
			break;
		}
		/* a fetch that ended since the pin began, and failed: its
		 * error (another may have started since) */
		if (ob->gen != gen && ob->err && ob->state != HELD) {
			err = fetch_error_locked(c, k, errmsg);
			break;
		}
		if (ob->state == ABSENT &&
		    (ob->present || now_s() - ob->looked >= LOOK_AGAIN_S)) {
			pthread_mutex_unlock(&c->lock);
			look_in_folder(c, k);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (!since) {
			since = now_s();
			deadline = since + c->o.lock_wait_s;
		}
		/* a pin with no room anywhere (every local object pinned,
		 * or held by other processes) gives up in the end */
		if (ob->state == ABSENT && c->stalled && now_s() >= deadline) {
			err = -ENOSPC;
			bfs_seterr(errmsg, "shard cache %s: no room for %s within "
				   "its limit (%.1f MiB): every object there is in "
				   "use", bfs_shardcache_path(c), c->objs[k].name,
				   c->limit / 1048576.0);
			break;
		}
		if (ob->state == ABSENT) {
			ob->looked = 0; /* another process may commit it */
			pthread_cond_signal(&c->work);
		}
		wait_done_locked(c, 0.05);
	}
	ob->must--;
	if (since) {
		c->s.waits++;
		c->wait_s += now_s() - since;
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

void bfs_shardcache_unpin(bfs_shardcache *c, size_t k)
{
	pthread_mutex_lock(&c->lock);
	if (k < c->n && c->ob[k].pins) {
		c->ob[k].pins--;
		unstall_locked(c, &c->ob[k]);
	}
	pthread_mutex_unlock(&c->lock);
}

void bfs_shardcache_get_stats(bfs_shardcache *c, bfs_shardcache_stats *out)
{
	bfs_http_stats hs;
	double now = now_s();

	bfs_storage_stats(c->st, &hs);
	pthread_mutex_lock(&c->lock);
	*out = c->s;
	out->limit = c->limit;
	out->bytes_on_disk = bfs_shardfolder_used(c->folder);
	out->held = c->nheld;
	out->fetching = c->nactive;
	out->wait_seconds = c->wait_s;
	/* the link's rate over the last second or more */
	if (now - c->link_t0 >= 1.0) {
		c->link_mb_s = (double)(hs.bytes - c->link_bytes0) / (now - c->link_t0) / 1e6;
		c->link_bytes0 = hs.bytes;
		c->link_t0 = now;
	}
	out->link_mb_s = c->link_mb_s;
	pthread_mutex_unlock(&c->lock);
}
