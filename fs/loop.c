/*
 * loop.c - the threads that serve a FUSE session (loop.h).
 *
 * DESIGN: the caller's thread is worker 0.  A worker counts as idle while
 * it waits in fuse_session_receive_buf; one that takes a request when no
 * other is idle starts another (up to max), so a request never waits for
 * a thread that is blocked in a long read.  libfuse allocates a worker's
 * request buffer in its first receive, before it reads: -ENOMEM there
 * means nothing was taken.  An extra worker then ends (the others serve
 * on); worker 0 waits 100 ms and tries again, so the mount lives through
 * a moment's shortage.  Nothing but a stop calls fuse_session_exit, and
 * no worker is cancelled: a request read is always answered (after a
 * stop, libfuse's receive itself drops what it reads).  At the stop,
 * worker 0 signals the others out of their reads (never out of a request
 * they are answering: a reply's write must not see EINTR) until they are
 * gone, then joins them.  l->lock guards the counts and the table.
 */
#define FUSE_USE_VERSION 312
#include "fs/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "fs/log.h"

#define MAX_WORKERS 64      /* a bound on max_threads */
#define RETRY_US 100000     /* worker 0 without a buffer waits this long */
#define SPARE_S 1.0         /* and no other starts for this long after
			     * one could not get its buffer */
#define FORGET 2            /* the kernel's FUSE_FORGET and FUSE_BATCH_FORGET */
#define BATCH_FORGET 42     /* (linux/fuse.h): no reply, over at once */

struct worker {
	pthread_t tid;
	int used;     /* tid is a thread not joined yet */
	int done;     /* it has returned */
	int reading;  /* it waits for a request (or is about to): a stop
		       * signals it out of that read, never out of a request
		       * it is answering */
};

struct loop {
	struct fuse_session *se;
	pthread_mutex_t lock;
	pthread_cond_t gone;         /* a worker returned */
	unsigned max;
	unsigned running;            /* workers serving, worker 0 included */
	unsigned idle;               /* of them, waiting for a request */
	int err;                     /* how reading the device failed */
	double said;                 /* when a shortage was last logged */
	double spare_after;          /* no worker starts before (one could
				      * not get its buffer: not one a request) */
	struct worker w[MAX_WORKERS];/* w[0]: the caller, never joined */
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Say a shortage in the log, at most once a minute, with the threads
 * that serve meanwhile.  Lock held. */
static void say_short_locked(struct loop *l, const char *what, unsigned serving)
{
	if (l->said && mono_s() - l->said < 60)
		return;
	l->said = mono_s();
	bfs_log(BFS_LOG_WARN, "out of memory for %s: %u thread%s serve%s meanwhile; "
		"trying again", what, serving, serving == 1 ? "" : "s",
		serving == 1 ? "s" : "");
}

struct start {
	struct loop *l;
	unsigned idx;
};

static void *worker_main(void *arg);

/* Start one more worker, when there is room in the table.  Lock held. */
static void start_one_locked(struct loop *l)
{
	sigset_t stops, old;
	struct start *st;
	unsigned i;

	for (i = 1; i < l->max; i++) {
		if (l->w[i].used && l->w[i].done) {
			pthread_join(l->w[i].tid, NULL); /* returned: at once */
			l->w[i].used = 0;
		}
		if (!l->w[i].used)
			break;
	}
	if (i >= l->max || mono_s() < l->spare_after)
		return;
	/* a stop signal goes to a thread that does not serve */
	sigemptyset(&stops);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGHUP);
	sigaddset(&stops, SIGQUIT);
	pthread_sigmask(SIG_BLOCK, &stops, &old);
	l->w[i].done = 0;
	l->w[i].reading = 1;
	if ((st = malloc(sizeof(*st)))) {
		st->l = l;
		st->idx = i;
	}
	if (st && pthread_create(&l->w[i].tid, NULL, worker_main, st) == 0) {
		l->w[i].used = 1;
		l->running++;
		l->idle++; /* until it has read its first request */
	} else {
		free(st);
		say_short_locked(l, "a FUSE thread", l->running);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static int is_forget(const struct fuse_buf *buf)
{
	uint32_t op;

	if ((buf->flags & FUSE_BUF_IS_FD) || buf->size < 8)
		return 0;
	memcpy(&op, (const char *)buf->mem + 4, sizeof(op));
	return op == FORGET || op == BATCH_FORGET;
}

/* Serve until the session exits, as worker idx (0: the caller's
 * thread).  Counted in running and idle by whoever started it. */
static void serve(struct loop *l, unsigned idx)
{
	struct fuse_buf buf;
	int res;

	memset(&buf, 0, sizeof(buf));
	pthread_mutex_lock(&l->lock);
	for (;;) {
		l->w[idx].reading = 1;
		pthread_mutex_unlock(&l->lock);
		if (fuse_session_exited(l->se)) {
			pthread_mutex_lock(&l->lock);
			l->idle--;
			break;
		}
		res = fuse_session_receive_buf(l->se, &buf);
		pthread_mutex_lock(&l->lock);
		l->w[idx].reading = 0;
		l->idle--;
		if (res == -EINTR || res == -EAGAIN ||
		    (res == 0 && !fuse_session_exited(l->se))) {
			l->idle++;
			continue;
		}
		if (res == -ENOMEM && !buf.mem) {
			/* no buffer, and nothing read */
			say_short_locked(l, "a FUSE request buffer", l->running - 1);
			if (idx) {
				l->spare_after = mono_s() + SPARE_S;
				break;
			}
			l->idle++;
			pthread_mutex_unlock(&l->lock);
			usleep(RETRY_US);
			pthread_mutex_lock(&l->lock);
			continue;
		}
		if (res < 0) {
			l->err = l->err ? l->err : res;
			pthread_mutex_unlock(&l->lock);
			fuse_session_exit(l->se);
			pthread_mutex_lock(&l->lock);
			break;
		}
		if (res == 0) /* the session exited: unmounted, or a stop */
			break;
		if (!l->idle && !is_forget(&buf) && l->running < l->max)
			start_one_locked(l);
		pthread_mutex_unlock(&l->lock);
		fuse_session_process_buf(l->se, &buf);
		pthread_mutex_lock(&l->lock);
		l->idle++;
	}
	l->w[idx].reading = 0;
	l->running--;
	if (idx)
		l->w[idx].done = 1;
	pthread_cond_broadcast(&l->gone);
	pthread_mutex_unlock(&l->lock);
	free(buf.mem);
}

static void *worker_main(void *arg)
{
	struct start st = *(struct start *)arg;

	free(arg);
	serve(st.l, st.idx);
	return NULL;
}

int bfs_loop_run(struct fuse_session *se, unsigned max_threads)
{
	struct loop *l = calloc(1, sizeof(*l));
	int err;

	if (!l)
		return -ENOMEM;
	l->se = se;
	l->max = max_threads < 1 ? 1 : max_threads > MAX_WORKERS ? MAX_WORKERS
									: max_threads;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->gone, NULL);
	l->running = l->idle = 1;
	serve(l, 0);
	/* the others: out of their reads (a signal, again and again, since
	 * one may come just before a read begins), then joined once they
	 * have answered what they hold */
	pthread_mutex_lock(&l->lock);
	while (l->running) {
		struct timespec until;

		for (unsigned i = 1; i < l->max; i++)
			if (l->w[i].used && !l->w[i].done && l->w[i].reading)
				pthread_kill(l->w[i].tid, SIGUSR1);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 20000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&l->gone, &l->lock, &until);
	}
	pthread_mutex_unlock(&l->lock);
	for (unsigned i = 1; i < l->max; i++)
		if (l->w[i].used)
			pthread_join(l->w[i].tid, NULL);
	err = l->err;
	pthread_cond_destroy(&l->gone);
	pthread_mutex_destroy(&l->lock);
	free(l);
	fuse_session_reset(se);
	return err;
}
