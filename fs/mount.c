/*
 * mount.c - one mount put together and taken apart (see mount.h): the
 * cache, the source index, the engine, the view and the FUSE session,
 * wired to each other, served until the mount ends, and stopped in the
 * order that lets nothing wait on what is gone.
 *
 * DESIGN
 * Who serves what: fs/ll.c answers FUSE requests over fs/view.c, which
 * holds the files' contents and asks the engine for batches; the engine
 * looks samples up in, and offers decoded ones to, the cache.  This file
 * owns them all (struct mnt) and decides what a person sees: the mount
 * message, and the log lines for bad samples and failed reads.
 * The orderly stop: a signal (fs/daemon.c's watcher) first stops pushes
 * while the loop still answers their lookups, then ends the loop; an
 * unmount ends it from the kernel side.  Then the mount is unmounted (if
 * it is still ours), the engine destroyed (its workers joined, what it
 * gave the cache flushed), and only then the session, so that no worker
 * can push into a freed session.
 * With --hold the mount asks for that same stop itself (through the
 * watcher) when the last open of MNT/hold is released, or when nobody has
 * opened it within --hold SECONDS (a timer thread, joined after the loop).
 */
#define FUSE_USE_VERSION 312
#include "fs/mount.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/storage/shardcache.h"
#include "engine/version.h"
#include "fs/daemon.h"
#include "fs/host.h"
#include "fs/ll.h"
#include "fs/jsonread.h"
#include "fs/log.h"
#include "fs/loop.h"
#include "fs/metrics.h"
#include "fs/history.h"
#include "fs/indexes.h"
#include "fs/metricsd.h"
#include "fs/passthrough.h"
#include "fs/peek.h"
#include "fs/view.h"
#include "fs/wids.h"

struct mnt {
	const bfs_mount_opts *o;
	bfs_source *src;
	bfs_engine *eng;
	bfs_cache *cache;         /* NULL with --cache none or if it failed */
	char cache_fp[17];
	bfs_store store;          /* the engine's view of the cache */
	bfs_view *view;
	bfs_ll *ll;
	struct fuse_session *se;
	bfs_pt *pt;               /* NULL: no passthrough asked for */
	char devno[64];           /* our mount's MAJ:MIN in mountinfo */
	int notify_fd;            /* the start-up handshake; -1: foreground */
	int show_progress;        /* someone sees the indexing progress */
	double prog_t0, prog_last;/* when indexing began, when last shown */
	bfs_indexes *indexes;     /* the store and sidecar in front of the scan */
	bfs_peek *peek;           /* looks names up for a push (fs/peek.h) */
	bfs_indexes_stats ixs;    /* where the shard indexes came from */
	int sidecar;              /* 1: a sidecar index was read and used */
	char sidecar_note[BFS_ERRMSG_MAX + PATH_MAX]; /* why none was, or "" */
	bfs_storage *storage;     /* a remote source; NULL for a local one */
	bfs_shardcache *sc;       /* its shard cache */
	bfs_wids *wids;           /* a wids index named its shards, or NULL */
	size_t wids_bad;          /* shards whose counts the index disagrees with */
	char wids_note[512];      /* the first of them, and how many */
	int prog_shown;
	uint64_t bad_logged;      /* atomic: bad samples told to the log */
	uint64_t eio_logged;      /* atomic: failed batch reads told to it */
	bfs_watch *watch;         /* set before the loop runs */
	/* --hold: the wait for a first holder (hold_wait seconds) */
	pthread_t hold_timer;
	int hold_timer_on;
	pthread_mutex_t hold_lock;
	pthread_cond_t hold_cv;
	int hold_done;            /* protected by hold_lock: the loop ended */
	/* --metrics-file, --metrics-port: the exporter's thread renders
	 * stats.json as Prometheus text with these labels */
	bfs_metricsd *metrics;
	char metrics_rank[64];
	bfs_history *history;     /* stats.json's history, and its sampler */
};

/* ---- what a person sees ------------------------------------------------ */

/* The log names the first LOG_EACH bad samples (and failed batch reads)
 * one by one, then only says how many there are at each power of two: a
 * shard of a million bad records must not fill the disk with log lines.
 * stats.json keeps the first records and counts them all.  Returns 1 when
 * the n-th event gets a line of its own. */
#define LOG_EACH 64

static int log_one_more(uint64_t *counter, const char *what)
{
	uint64_t n = __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);

	if (n <= LOG_EACH)
		return 1;
	if ((n & (n - 1)) == 0)
		bfs_log(BFS_LOG_WARN,
			"%llu %s so far; the log names the first %d (stats.json has the counts)",
			(unsigned long long)n, what, LOG_EACH);
	return 0;
}

static void on_sample_error(void *ctx, const bfs_sample_error *e)
{
	struct mnt *m = ctx;
	char shard[256], msg[2 * BFS_ERRMSG_MAX];

	if (!log_one_more(&m->bad_logged, "bad samples"))
		return;
	bfs_log_escape(e->shard, shard, sizeof(shard));
	bfs_log_escape(e->msg, msg, sizeof(msg));
	bfs_log(BFS_LOG_WARN, "bad sample %llu (%s record %llu): %s%s",
		(unsigned long long)e->sample, shard,
		(unsigned long long)e->record, msg,
		m->o->engine.on_error == BFS_ON_ERROR_SKIP
			? "; skipped (the next good sample takes its place; stats.json says which)"
			: "");
}

/* The view's warn: failed batch reads (one line per batch in a row, the
 * first LOG_EACH, then counted) and previews that could not be drawn. */
static void on_view_warn(void *ctx, const char *text)
{
	struct mnt *m = ctx;
	char esc[4 * BFS_ERRMSG_MAX];

	if (strncmp(text, "read of ", 8) == 0 &&
	    !log_one_more(&m->eio_logged, "failed batch reads"))
		return;
	bfs_log(BFS_LOG_WARN, "%s", bfs_log_escape(text, esc, sizeof(esc)));
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A wids shard index as the source: fetched and read, and its shards'
 * URLs (with the sizes it gives, for a server whose HEAD gives none) put
 * into so (malloc()ed arrays the caller frees; the URLs are m->wids'). */
static int open_wids(struct mnt *m, bfs_storage_opts *so, char *msg, size_t cap)
{
	char errmsg[BFS_ERRMSG_MAX] = "";
	const char **urls;
	int64_t *sizes;
	int err;

	if ((err = bfs_wids_fetch(m->o->shard_dir, so, &m->wids, errmsg))) {
		snprintf(msg, cap, "batchfs: %s: %s", m->o->shard_dir,
			 errmsg[0] ? errmsg : bfs_strerror(err));
		return err;
	}
	urls = calloc(m->wids->n, sizeof(*urls));
	sizes = calloc(m->wids->n, sizeof(*sizes));
	if (!urls || !sizes) {
		free(urls);
		free(sizes);
		snprintf(msg, cap, "batchfs: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->wids->n; i++) {
		urls[i] = m->wids->v[i].url;
		sizes[i] = m->wids->v[i].filesize;
	}
	so->urls = urls;
	so->sizes = sizes;
	so->nurls = m->wids->n;
	return 0;
}

/* After indexing: the shards whose sample counts the wids index
 * disagrees with (a warning, said in the log and the mount message). */
static void check_wids(struct mnt *m)
{
	size_t n = bfs_source_nshards(m->src);
	const char **names = calloc(n ? n : 1, sizeof(*names));
	uint64_t *counts = calloc(n ? n : 1, sizeof(*counts));

	if (names && counts) {
		for (size_t i = 0; i < n; i++) {
			names[i] = bfs_source_shard_name(m->src, i);
			counts[i] = bfs_source_shard_samples(m->src, i);
		}
		m->wids_bad = bfs_wids_check(m->wids, names, counts, n, m->wids_note,
					     sizeof(m->wids_note));
	}
	free(names);
	free(counts);
}

/* A remote source: its storage opened and listed, and its shard cache
 * opened over it (nothing fetched yet: indexing and the engine's plan
 * ask for what they need).  A wids index's URL (fs/wids.h) is fetched
 * first and names the shards. */
static int open_remote(struct mnt *m, char *msg, size_t cap)
{
	const bfs_mount_opts *o = m->o;
	bfs_shardcache_opts sc = { 0 };
	bfs_storage_opts so = o->storage;
	char errmsg[BFS_ERRMSG_MAX] = "", dir[PATH_MAX];
	unsigned cores = bfs_engine_cores();
	unsigned fetchers = so.http.connections ? so.http.connections : 8;
	int err;

	/* a connection for each fetcher, and one for each decode thread's
	 * range reads (a record needed before its shard is local) */
	so.http.connections = fetchers + (o->engine.threads ? o->engine.threads
				: cores);
	if (bfs_wids_is_index_url(o->shard_dir) &&
	    (err = open_wids(m, &so, msg, cap)))
		return err;
	err = bfs_storage_open(o->shard_dir, &so, &m->storage, errmsg);
	free((void *)so.urls);
	free((void *)so.sizes);
	if (err) {
		snprintf(msg, cap, "batchfs: %s: %s", o->shard_dir,
			 errmsg[0] ? errmsg : bfs_strerror(err));
		return err;
	}
	if (o->shard_cache)
		snprintf(dir, sizeof(dir), "%s", o->shard_cache);
	else if (bfs_host_default_shard_cache(dir, sizeof(dir))) {
		snprintf(msg, cap, "batchfs: no shard cache directory: set "
			 "XDG_CACHE_HOME or HOME, or give --shard-cache DIR");
		return -ENOENT;
	}
	sc.dir = dir;
	sc.max_bytes = o->shard_cache_size;
	sc.fetchers = fetchers;
	err = bfs_shardcache_open(m->storage, &sc, &m->sc, errmsg);
	if (err) {
		const char *hint = err == -EACCES
			? " (check the credentials, the endpoint's region and "
			  "the clock: a signature is refused when they are wrong)"
			: "";

		snprintf(msg, cap, "batchfs: %s: %s%s", o->shard_dir,
			 errmsg[0] ? errmsg : bfs_strerror(err), hint);
		return err;
	}
	return 0;
}

/* The source's progress hook while it indexes: a line like mkshards',
 * once indexing has taken a while: every 0.1 s on a terminal (each
 * overwriting the last), every 5 s elsewhere, and a last one when it is
 * done.  Only numbers: nothing read from the shards. */
static void on_index_progress(void *ctx, const bfs_source_progress *p)
{
	struct mnt *m = ctx;
	int tty = isatty(STDERR_FILENO);
	double now = now_s(), el = now - m->prog_t0;
	char text[256];

	if (!m->show_progress)
		return;
	if (p->finished ? !m->prog_shown
			: el < (tty ? 0.5 : 5.0) ||
			  now - m->prog_last < (tty ? 0.1 : 5.0))
		return;
	snprintf(text, sizeof(text),
		 "batchfs: %s %zu/%zu %s, %llu %s, %.1f MB/s",
		 p->finished ? "indexed" : "indexing", p->done, p->total,
		 p->format == BFS_FORMAT_FOLDER ? "class folders" : "shards",
		 (unsigned long long)p->records,
		 p->format == BFS_FORMAT_FOLDER ? "images" : "records",
		 el > 0 ? (double)p->bytes / el / 1e6 : 0.0);
	bfs_daemon_progress(m->notify_fd, text);
	m->prog_shown = 1;
	m->prog_last = now;
}

/* ---- --hold ---------------------------------------------------------- */

/* The view's on_released: the last open of MNT/hold was closed (its
 * process let go, or died and the kernel closed its files).  The mount
 * ends itself, by the same orderly stop as SIGTERM. */
static void on_hold_released(void *ctx)
{
	struct mnt *m = ctx;

	bfs_log(BFS_LOG_INFO, "the last holder of %s/hold closed it: unmounting",
		m->o->mountpoint);
	bfs_daemon_request_stop(m->watch);
}

/* The threads that answer FUSE requests at most (fs/loop.h): one per
 * reader blocked on a batch, and the rest for everything else; each holds
 * a 1 MiB request buffer. */
#define SERVE_THREADS 16

/* --hold SECONDS: a mount that nobody has held by then (its starter died
 * before it could open MNT/hold) ends itself too. */
static void *hold_timer_main(void *arg)
{
	struct mnt *m = arg;
	struct timespec until;
	uint64_t now, ever;
	int done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += m->o->hold_wait;
	pthread_mutex_lock(&m->hold_lock);
	while (!m->hold_done &&
	       pthread_cond_timedwait(&m->hold_cv, &m->hold_lock, &until) == 0)
		;
	done = m->hold_done;
	pthread_mutex_unlock(&m->hold_lock);
	if (done)
		return NULL;
	bfs_view_holders(m->view, &now, &ever);
	if (ever == 0) {
		bfs_log(BFS_LOG_INFO,
			"nobody opened %s/hold within %u s: unmounting",
			m->o->mountpoint, m->o->hold_wait);
		bfs_daemon_request_stop(m->watch);
	}
	return NULL;
}

static void hold_timer_stop(struct mnt *m)
{
	if (!m->hold_timer_on)
		return;
	pthread_mutex_lock(&m->hold_lock);
	m->hold_done = 1;
	pthread_cond_broadcast(&m->hold_cv);
	pthread_mutex_unlock(&m->hold_lock);
	pthread_join(m->hold_timer, NULL);
	m->hold_timer_on = 0;
}

/* ---- putting the mount together -------------------------------------- */

/* The sidecar index beside the source's shards, when there is one that
 * fits this mount: *data (freed by the caller) and *sc.  A local source's
 * is the file in its directory; a remote one's is read before any shard
 * byte (bfs_indexes_read_remote: the object under the S3 prefix, or the
 * brace pattern's folder's, a 404 meaning none).  Why there is none that
 * fits goes to m->sidecar_note (nothing when there is none at all). */
static void open_sidecar(struct mnt *m, const char *dir, void **data,
			 bfs_sidecar **sc)
{
	char why[PATH_MAX + 256] = "", errmsg[BFS_ERRMSG_MAX] = "", where[PATH_MAX + 32];
	size_t len = 0;
	int err;

	*sc = NULL;
	if (m->sc) {
		snprintf(where, sizeof(where), "%s%s",
			 bfs_storage_root(m->storage), BFS_SIDECAR_NAME);
		err = bfs_indexes_read_remote(m->sc, data, &len, why, sizeof(why));
	} else {
		snprintf(where, sizeof(where), "%s/%s", dir, BFS_SIDECAR_NAME);
		err = bfs_indexes_read_local(dir, data, &len, why, sizeof(why));
	}
	if (err) {
		if (err != -ENOENT)
			snprintf(m->sidecar_note, sizeof(m->sidecar_note),
				 "the sidecar index could not be read (%s): every "
				 "shard is indexed without it", why);
		return;
	}
	if ((err = bfs_sidecar_open(*data, len, sc, errmsg))) {
		snprintf(m->sidecar_note, sizeof(m->sidecar_note), "%s is damaged "
			 "or not one (%s): every shard is indexed without it",
			 where, errmsg[0] ? errmsg : bfs_strerror(err));
		return;
	}
	if (bfs_indexes_sidecar_mismatch(*sc, m->o->source.format,
					 m->o->source.label_key, 0, why, sizeof(why))) {
		snprintf(m->sidecar_note, sizeof(m->sidecar_note), "%s is not used: %s",
			 where, why);
		bfs_sidecar_close(*sc);
		*sc = NULL;
	}
}

/* The cache's lines for a person (a full cache, a stopped writer). */
static void cache_log(void *ctx, int warn, const char *line)
{
	bfs_log(warn ? BFS_LOG_WARN : BFS_LOG_INFO, "%s", line);
}

/* Open the sample cache for this mount's settings.  A cache that cannot
 * be opened is not fatal: the mount decodes everything and says why. */
static void open_cache(struct mnt *m, char *why, size_t cap)
{
	const bfs_mount_opts *o = m->o;
	char efp[17], settings[1024], errmsg[BFS_ERRMSG_MAX] = "";
	bfs_cache_opts co = { 0 };
	int err;

	if (o->cache && strcmp(o->cache, "none") == 0)
		return;
	if (o->engine.decode_scale_auto) {
		snprintf(why, cap, "not used with --decode-scale auto, which decodes every epoch's boxes anew");
		return;
	}
	bfs_engine_fingerprint(&o->engine, efp);
	snprintf(settings, sizeof(settings), "image_key=%s;label_key=%s",
		 o->source.image_key ? o->source.image_key : "image/encoded",
		 o->source.label_key ? o->source.label_key : "image/class/label");
	bfs_cache_fingerprint(m->cache_fp, efp, settings);
	co.dir = o->cache;
	co.max_bytes = o->cache_size;
	co.fingerprint = m->cache_fp;
	co.log = cache_log;
	err = bfs_cache_open(&co, &m->cache, errmsg);
	if (err) {
		m->cache = NULL;
		snprintf(why, cap, "cache disabled: %s",
			 errmsg[0] ? errmsg : bfs_strerror(err));
	} else if (bfs_cache_notice(m->cache)) {
		snprintf(why, cap, "%s", bfs_cache_notice(m->cache));
	}
}

/* The engine's deliver_ahead: the adapter pushes (fs/ll.c). */
static int deliver_ahead(void *ctx, uint64_t id, const bfs_batch *b)
{
	struct mnt *m = ctx;

	return bfs_ll_push(m->ll, id, b);
}

/* The view's io: what the adapter counts. */
static void on_view_io(void *ctx, bfs_view_io *io)
{
	struct mnt *m = ctx;

	bfs_ll_io(m->ll, io);
	io->indexes = m->ixs;
	io->sidecar = m->sidecar;
	io->index_dali = bfs_source_nindex_dali(m->src);
	io->index_total = bfs_source_nshards(m->src);
	if (m->storage) {
		io->remote = 1;
		bfs_storage_stats(m->storage, &io->net);
		bfs_shardcache_get_stats(m->sc, &io->shards);
		io->shard_cache = bfs_shardcache_path(m->sc);
	}
}

/* Unmount the session's mount, but only while it is the file system that
 * a lookup of the mount point reaches.  After an unmount from the kernel
 * side it is gone and libfuse does nothing; a file system mounted over it
 * since is someone else's, and libfuse's lazy unmount of the path would
 * detach that one. */
static void unmount_ours(const struct mnt *m, const char *mountpoint)
{
	char devno[64];

	if (m->devno[0] && bfs_host_find_mount(mountpoint, devno, sizeof(devno)) &&
	    strcmp(devno, m->devno) != 0) {
		bfs_log(BFS_LOG_WARN,
			"not unmounting %s: another file system (device %s) is mounted over it",
			mountpoint, devno);
		return;
	}
	fuse_session_unmount(m->se);
}

/* The watcher's stop, on SIGTERM, SIGINT or SIGHUP: pushes in flight may
 * wait on the loop, so they finish while it still answers; then the loop
 * ends. */
static void stop_mount(void *ctx)
{
	struct mnt *m = ctx;

	if (bfs_ll_stop_pushes(m->ll))
		bfs_log(BFS_LOG_WARN, "a page-cache push is still running at exit");
	fuse_session_exit(m->se);
}

/* The FUSE session with this mount's options, or NULL with msg. */
static struct fuse_session *new_session(struct mnt *m, struct fuse_args *args,
					char *msg, size_t cap)
{
	const bfs_mount_opts *o = m->o;
	const struct fuse_lowlevel_ops *ops;
	struct fuse_session *se;
	char optstr[3 * PATH_MAX + 1024], fsname[2 * PATH_MAX];
	size_t size, n = 0;

	/* fsname: the source, so df and findmnt show what is mounted; in a
	 * FUSE option string a comma or a backslash is escaped with '\\' */
	for (const char *c = o->shard_dir; *c && n + 2 < sizeof(fsname); c++) {
		if (*c == ',' || *c == '\\')
			fsname[n++] = '\\';
		fsname[n++] = *c;
	}
	fsname[n] = '\0';
	snprintf(optstr, sizeof(optstr),
		 "ro,fsname=%s,subtype=batchfs,default_permissions%s%s%s",
		 fsname, o->allow_other ? ",allow_other" : "",
		 o->fuse_opts ? "," : "", o->fuse_opts ? o->fuse_opts : "");
	if (fuse_opt_add_arg(args, "batchfs") ||
	    fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, optstr) ||
	    (o->debug && fuse_opt_add_arg(args, "-d"))) {
		snprintf(msg, cap, "batchfs: out of memory");
		return NULL;
	}
	ops = bfs_ll_ops(&size);
	if (!(se = fuse_session_new(args, ops, size, m->ll)))
		snprintf(msg, cap, "batchfs: bad FUSE options '%s' (see above)",
			 optstr);
	return se;
}

/* The exporter's text: the view's stats.json now, as `batchfs metrics`
 * would render it (fs/metrics.h). */
static int render_metrics(void *ctx, char **buf, size_t *len)
{
	struct mnt *m = ctx;
	char *json = NULL, err[128];
	size_t jlen = 0;
	bfs_jr *st = NULL;
	int rc;

	if ((rc = bfs_view_stats_json(m->view, &json, &jlen)))
		return rc;
	rc = bfs_jr_parse(json, jlen, &st, err, sizeof(err));
	free(json);
	if (rc)
		return rc;
	rc = bfs_metrics_render(m->o->mountpoint, m->metrics_rank, st, buf, len);
	bfs_jr_free(st);
	return rc;
}

/* The history's sampler: the counters stats.json shows, now. */
static void sample_history(void *ctx, bfs_history_point *p)
{
	struct mnt *m = ctx;
	bfs_engine_stats st;

	bfs_engine_get_stats(m->eng, &st);
	p->served = st.samples_served;
	p->decoded = st.samples_decoded;
	p->wait_s = (double)st.reader_wait_ns / 1e9;
	if (m->cache) {
		bfs_cache_stats cs;

		bfs_cache_get_stats(m->cache, &cs);
		p->hits = cs.hits;
		p->misses = cs.misses;
	}
}

/* --metrics-file and --metrics-port: started before the mount says it is
 * ready, so a port that cannot be had fails the mount with the reason.
 * 0, or -1 with msg. */
static int start_metrics(struct mnt *m, char *msg, size_t cap)
{
	const bfs_mount_opts *o = m->o;
	bfs_metricsd_opts mo = { 0 };
	char errmsg[BFS_ERRMSG_MAX] = "", jerr[128];
	const char *ds;
	size_t dlen;
	bfs_jr *dj = NULL;
	int err;

	if (!o->metrics_file && !o->metrics_http)
		return 0;
	ds = bfs_view_dataset_json(m->view, &dlen);
	if (bfs_jr_parse(ds, dlen, &dj, jerr, sizeof(jerr)) == 0)
		bfs_metrics_rank_label(dj, m->metrics_rank, sizeof(m->metrics_rank));
	else
		snprintf(m->metrics_rank, sizeof(m->metrics_rank), "%u",
			 bfs_engine_options(m->eng)->rank);
	bfs_jr_free(dj);
	mo.file = o->metrics_file;
	mo.interval_s = o->metrics_interval;
	mo.port = o->metrics_http ? (int)o->metrics_port : -1;
	mo.addr = o->metrics_addr;
	mo.public = o->metrics_public;
	mo.render = render_metrics;
	mo.ctx = m;
	if ((err = bfs_metricsd_start(&mo, &m->metrics, errmsg))) {
		snprintf(msg, cap, "batchfs: %s",
			 errmsg[0] ? errmsg : bfs_strerror(err));
		return -1;
	}
	return 0;
}

/* The mount itself; runs in the daemon (or in the foreground).  Reports to
 * notify_fd (-1 in the foreground) and returns the exit status. */
/* The mount message's words on the epoch order, when it is not plain:
 * the block shuffle (and whose default it is), the shards split and
 * this mount's node, a resumed epoch. */
static void order_words(const struct mnt *m, const bfs_mount_opts *o, char *msg, size_t cap)
{
	const bfs_engine_opts *e = bfs_engine_options(m->eng);
	const bfs_layout *l = bfs_engine_layout(m->eng);
	size_t n = strlen(msg);

	if (e->shuffle && e->shuffle_block && n < cap) {
		snprintf(msg + n, cap - n, "; shuffled in blocks of %llu shard%s%s",
			 (unsigned long long)e->shuffle_block, e->shuffle_block > 1 ? "s" : "",
			 o->shuffle_block_given ? ""
			 : e->split == BFS_SPLIT_SHARDS ? " (--split shards' default)"
							: " (a remote source's default)");
		n = strlen(msg);
	}
	if (e->split == BFS_SPLIT_SHARDS && n < cap) {
		snprintf(msg + n, cap - n, "; split by shards: node %u of %u (%u rank%s a node)",
			 bfs_layout_node_of(l, e->rank), bfs_layout_nodes(l), e->node_ranks,
			 e->node_ranks == 1 ? "" : "s");
		n = strlen(msg);
	}
	if (e->resume.on && n < cap)
		snprintf(msg + n, cap - n,
			 "; epoch %u resumes: %llu of %llu samples were served before, the other %llu go to this world: %llu a rank in %llu batches",
			 e->resume.epoch, (unsigned long long)bfs_layout_resumed_before(l),
			 (unsigned long long)bfs_source_count(m->src),
			 (unsigned long long)bfs_layout_resumed_left(l),
			 (unsigned long long)bfs_engine_epoch_samples_of(m->eng, e->resume.epoch),
			 (unsigned long long)bfs_engine_epoch_batches(m->eng, e->resume.epoch));
}

static int serve(void *ctx, int notify_fd)
{
	const bfs_mount_opts *o = ctx;
	struct mnt m = { .o = o, .hold_lock = PTHREAD_MUTEX_INITIALIZER,
			 .hold_cv = PTHREAD_COND_INITIALIZER };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	bfs_watch *watch = NULL;
	char msg[BFS_ERRMSG_MAX + PATH_MAX] = "", errmsg[BFS_ERRMSG_MAX] = "";
	char logpath[PATH_MAX] = "", log_why[PATH_MAX + 64] = "";
	FILE *logf = NULL, *dead_log = NULL;
	bfs_engine_opts eo = o->engine;
	bfs_source_opts so = o->source;
	bfs_view_opts vo = { 0 };
	char cache_why[BFS_ERRMSG_MAX + 32] = "", pt_why[256] = "";
	int err, status = 1, mounted = 0, mark_fd = -1;

	/* The engine holds a file lease for an instant (slot files); a lease
	 * break would raise SIGIO, whose default action ends the process. */
	signal(SIGIO, SIG_IGN);
	/* while this process is one thread holding nothing: see peek.h */
	if (!o->no_push && (err = bfs_peek_start(o->mountpoint, &m.peek)))
		bfs_log(BFS_LOG_WARN, "no look-up process (%s): a push looks names "
			"up itself, and a SIGKILL during one can leave the mount "
			"wedged until its reader is killed", strerror(-err));
	m.notify_fd = notify_fd;
	/* the daemon's stderr is still the one `batchfs mount` shows */
	m.show_progress = notify_fd < 0 || isatty(STDERR_FILENO);
	m.prog_t0 = now_s();
	open_cache(&m, cache_why, sizeof(cache_why));
	so.progress = on_index_progress;
	so.progress_ctx = &m;
	if (bfs_storage_is_url(o->shard_dir)) {
		if (open_remote(&m, msg, sizeof(msg)))
			goto fail;
		so.shards = m.sc;
		m.prog_t0 = now_s();
		m.prog_shown = 0;
	}
	{
		/* the store, then the sidecar, in front of the scan */
		bfs_indexes_opts xo = { .cache = m.cache };
		bfs_sidecar *sc = NULL;
		void *sc_data = NULL;

		open_sidecar(&m, so.dir, &sc_data, &sc);
		xo.sidecar = sc;
		if (m.sc) { /* a remote shard's identity: the listing's ETag */
			xo.identity = bfs_indexes_remote_identity;
			xo.identity_ctx = m.sc;
		}
		if ((err = bfs_indexes_create(&xo, &m.indexes))) {
			bfs_sidecar_close(sc);
			free(sc_data);
			snprintf(msg, sizeof(msg), "batchfs: out of memory");
			goto fail;
		}
		bfs_indexes_wire(m.indexes, &so);
		err = bfs_source_open(&so, &m.src, errmsg);
		bfs_indexes_get_stats(m.indexes, &m.ixs);
		m.sidecar = sc != NULL;
		bfs_sidecar_close(sc); /* used only while indexing */
		free(sc_data);
	}
	if (!err && m.wids)
		check_wids(&m);
	if (err) {
		snprintf(msg, sizeof(msg), "batchfs: cannot index %s: %s%s",
			 o->shard_dir, errmsg[0] ? errmsg : bfs_strerror(err),
			 !m.sc ? ""
			 : err == -EACCES
			 ? " (check the credentials, the endpoint's region and "
			   "the clock: a signature is refused when they are wrong)"
			 : err == -ESTALE
			 ? " (the object was replaced while it was fetched: nothing "
			   "of it is used; mount again to index the new one)" : "");
		goto fail;
	}
	/* the engine checks the directory's room against the budget it
	 * settles on (a default one grows for big batches), and leaves the
	 * slot files out when it has none (bfs_engine_lend_note) */
	if (!o->no_passthrough)
		eo.lend_dir = bfs_host_slot_dir(o->slot_dir ? o->slot_dir : "/dev/shm",
						0, pt_why, sizeof(pt_why));
	if ((err = bfs_ll_create(&m.ll))) {
		snprintf(msg, sizeof(msg), "batchfs: out of memory");
		goto fail;
	}
	if (!o->shuffle_block_given) { /* the source's default (layout.h) */
		unsigned w = eo.world ? eo.world : 1;
		unsigned k = eo.node_ranks ? eo.node_ranks : eo.ranks ? eo.ranks : 1;

		eo.shuffle_block = eo.shuffle
			? bfs_layout_default_block(m.storage != NULL,
						   bfs_source_format(m.src) == BFS_FORMAT_FOLDER,
						   eo.split, bfs_source_nshards(m.src),
						   w >= k ? w / k : 1)
			: 0;
	}
	eo.on_sample_error = on_sample_error;
	if (!o->no_push)
		eo.deliver_ahead = deliver_ahead;
	eo.ctx = &m;
	if (m.cache && bfs_cache_store_open(m.cache, m.cache_fp,
					    bfs_source_dir(m.src), &m.store) == 0)
		eo.store = &m.store;
	if ((err = bfs_engine_create(m.src, &eo, &m.eng, errmsg))) {
		snprintf(msg, sizeof(msg), "batchfs: %s",
			 errmsg[0] ? errmsg : bfs_strerror(err));
		goto fail;
	}
	if (eo.lend_dir && !bfs_engine_options(m.eng)->lend_dir) {
		snprintf(pt_why, sizeof(pt_why), "%s", bfs_engine_lend_note(m.eng));
		eo.lend_dir = NULL;
	}
	vo.src = m.src;
	vo.origin = m.storage ? o->shard_dir : NULL;
	vo.shard_cache = m.sc ? bfs_shardcache_path(m.sc) : NULL;
	vo.eng = m.eng;
	vo.cache = m.cache;
	vo.cache_fp = m.cache_fp;
	vo.image_key = o->source.image_key;
	vo.label_key = o->source.label_key;
	clock_gettime(CLOCK_REALTIME, &vo.mounted);
	vo.uid = getuid();
	vo.gid = getgid();
	vo.io = on_view_io;
	vo.warn = on_view_warn;
	vo.hold = o->hold;
	vo.on_released = on_hold_released;
	vo.ctx = &m;
	if (bfs_history_create(o->history_interval, &m.history) == 0)
		vo.history = m.history; /* without it, stats.json has none */
	if (bfs_view_create(&vo, &m.view)) {
		snprintf(msg, sizeof(msg), "batchfs: out of memory");
		goto fail;
	}
	bfs_ll_set_view(m.ll, m.view);
	/* its clock starts after the view's: no point past uptime_seconds */
	if (m.history && bfs_history_start(m.history, sample_history, &m))
		bfs_log(BFS_LOG_WARN, "no history for --plot: cannot start its thread");
	/* before the mount appears: a port it cannot have fails it first */
	if (start_metrics(&m, msg, sizeof(msg)))
		goto fail;

	if (!(m.se = new_session(&m, &args, msg, sizeof(msg))))
		goto fail;
	/* how `batchfs unmount` and `status` find this daemon without
	 * asking the mount (bfs_daemon_probe) */
	mark_fd = bfs_daemon_mark(o->mountpoint);
	if (fuse_session_mount(m.se, o->mountpoint) != 0) {
		snprintf(msg, sizeof(msg),
			 "batchfs: cannot mount on %s (is /dev/fuse usable, and fusermount3 installed?)",
			 o->mountpoint);
		goto fail;
	}
	mounted = 1;
	bfs_host_find_mount(o->mountpoint, m.devno, sizeof(m.devno));
	if (eo.lend_dir && bfs_pt_attach(m.se, 1, &m.pt) != 0)
		snprintf(pt_why, sizeof(pt_why), "libfuse refused custom I/O");
	bfs_ll_set_session(m.ll, m.se, m.pt, o->mountpoint, m.peek);
	bfs_host_raise_readahead(o->mountpoint);
	if (bfs_daemon_watch(stop_mount, &m, &watch) != 0) {
		snprintf(msg, sizeof(msg), "batchfs: cannot install signal handlers");
		goto fail;
	}
	m.watch = watch;

	if (notify_fd >= 0) {
		logf = bfs_host_open_log(o->log_path, logpath, sizeof(logpath),
					 log_why, sizeof(log_why));
		if (logf) {
			char why[256];

			bfs_log_init(logf, BFS_LOG_INFO);
			/* A first line proves the file takes lines: a log on a
			 * full file system opens, then writes nothing. */
			bfs_log(BFS_LOG_INFO, "batchfs %s: %s on %s", BFS_VERSION,
				o->shard_dir, o->mountpoint);
			if (bfs_log_failed(why, sizeof(why))) {
				snprintf(log_why, sizeof(log_why), "cannot write %s: %s",
					 logpath, why);
				dead_log = logf; /* closed once the logger has let go */
				logf = NULL;
			}
		}
		if (!logf) {
			/* the daemon's stderr is about to be /dev/null */
			size_t n = strlen(log_why);
			int sys = bfs_log_init_syslog(BFS_LOG_INFO) == 0;

			snprintf(log_why + n, sizeof(log_why) - n, "; %s",
				 sys ? "logging to syslog"
				     : "no syslog either (nothing listens on /dev/log): nothing is logged");
			if (!sys) /* not on the terminal `mount` shows */
				bfs_log_init(fopen("/dev/null", "we"), BFS_LOG_INFO);
			if (dead_log)
				fclose(dead_log);
		}
	}
	{
		const bfs_engine_opts *e = bfs_engine_options(m.eng);

		char samples[128];

		if (bfs_engine_ranks(m.eng) > 1)
			snprintf(samples, sizeof(samples),
				 "ranks %u-%u of %u: %llu of %llu samples each",
				 e->rank, e->rank + bfs_engine_ranks(m.eng) - 1,
				 e->world,
				 (unsigned long long)bfs_engine_epoch_samples(m.eng),
				 (unsigned long long)bfs_source_count(m.src));
		else if (e->world > 1)
			snprintf(samples, sizeof(samples),
				 "rank %u of %u: %llu of %llu samples", e->rank,
				 e->world,
				 (unsigned long long)bfs_engine_epoch_samples(m.eng),
				 (unsigned long long)bfs_source_count(m.src));
		else
			snprintf(samples, sizeof(samples), "%llu samples",
				 (unsigned long long)bfs_source_count(m.src));
		snprintf(msg, sizeof(msg),
			 "batchfs: mounted %s on %s: %s, %llu batches of %u, %s %dx%d, memory %llu MiB%s, cache %s%s%s%s, passthrough %s%s%s%s%s%s%s%s%s",
			 m.storage ? o->shard_dir : bfs_source_dir(m.src),
			 o->mountpoint, samples,
			 (unsigned long long)bfs_view_shape(m.view)->batches,
			 e->batch, bfs_dtype_name(e->dtype), e->height, e->width,
			 (unsigned long long)(e->mem_bytes >> 20),
			 eo.mem_bytes ? " (--mem)" : " (default)",
			 m.cache ? bfs_cache_dir(m.cache) : "none",
			 cache_why[0] ? " (" : "", cache_why, cache_why[0] ? ")" : "",
			 m.pt ? "where the kernel offers it" : "off",
			 pt_why[0] ? " (" : "", pt_why, pt_why[0] ? ")" : "",
			 logpath[0] && logf ? "; log: " : "", logf ? logpath : "",
			 log_why[0] ? "; no log: " : "", log_why,
			 bfs_source_nscan_errors(m.src) ? "; index errors: see stats.json" : "");
		if (e->nsizes) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n, "; size by epoch:");
			for (unsigned k = 0; k < e->nsizes; k++) {
				n = strlen(msg);
				snprintf(msg + n, sizeof(msg) - n, " %dx%d from %u", e->sizes[k].h,
					 e->sizes[k].w, e->sizes[k].from);
			}
		}
		if (e->max_pixels < eo.max_pixels) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n,
				 "; --max-pixels %llu, the most --mem %llu MiB decodes with %u threads",
				 (unsigned long long)e->max_pixels,
				 (unsigned long long)(e->mem_bytes >> 20), e->threads);
		}
		if (e->ranks) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n, "; each rank in rank-R/");
		}
		order_words(&m, o, msg, sizeof(msg));
		if (bfs_source_format(m.src) == BFS_FORMAT_FOLDER &&
		    !bfs_source_nclasses(m.src) && bfs_source_classes_note(m.src)) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n, "; %s",
				 bfs_source_classes_note(m.src));
		}
		if (m.metrics) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n, "; metrics:%s%s",
				 o->metrics_file ? " " : "",
				 o->metrics_file ? o->metrics_file : "");
			if (bfs_metricsd_port(m.metrics) >= 0) {
				n = strlen(msg);
				snprintf(msg + n, sizeof(msg) - n, " http://%s%s%s:%d/metrics",
					 o->metrics_addr && strchr(o->metrics_addr, ':') ? "[" : "",
					 o->metrics_addr ? o->metrics_addr : "127.0.0.1",
					 o->metrics_addr && strchr(o->metrics_addr, ':') ? "]" : "",
					 bfs_metricsd_port(m.metrics));
			}
		}
		if (m.storage) {
			size_t n = strlen(msg);
			char where[1024];

			bfs_shardcache_stats ss;

			bfs_storage_describe(m.storage, where, sizeof(where));
			bfs_shardcache_get_stats(m.sc, &ss);
			snprintf(msg + n, sizeof(msg) - n,
				 "; %s; shard cache %s (limit %.1f MB): %llu objects of "
				 "%.1f MB, %zu of %zu shard indexes stored, %llu objects "
				 "fetched to index them (%.1f MB), %llu found whole",
				 where, bfs_shardcache_path(m.sc), ss.limit / 1e6,
				 (unsigned long long)ss.objects, ss.bytes_total / 1e6,
				 bfs_source_nindex_hits(m.src), bfs_source_nshards(m.src),
				 (unsigned long long)ss.fetched, ss.bytes_fetched / 1e6,
				 (unsigned long long)ss.found);
		}
		if (m.sidecar || m.sidecar_note[0] || bfs_source_nindex_dali(m.src)) {
			size_t n = strlen(msg);

			if (m.sidecar)
				snprintf(msg + n, sizeof(msg) - n,
					 "; sidecar index: %llu of %zu shards from it",
					 (unsigned long long)m.ixs.from_sidecar,
					 bfs_source_nshards(m.src));
			else if (m.sidecar_note[0])
				snprintf(msg + n, sizeof(msg) - n, "; no sidecar index (see the log)");
			n = strlen(msg);
			if (m.sidecar && m.ixs.from_store)
				snprintf(msg + n, sizeof(msg) - n, ", %llu from the cache",
					 (unsigned long long)m.ixs.from_store);
			n = strlen(msg);
			if (m.sidecar && m.ixs.unproven)
				snprintf(msg + n, sizeof(msg) - n,
					 ", %llu whose listing gives no strong ETag to "
					 "prove an entry by: scanned",
					 (unsigned long long)m.ixs.unproven);
			n = strlen(msg);
			if (m.ixs.sidecar_stale + m.ixs.sidecar_bad + m.ixs.sidecar_missing)
				snprintf(msg + n, sizeof(msg) - n,
					 ", %llu changed since it was written, %llu not in it, "
					 "%llu damaged: scanned",
					 (unsigned long long)m.ixs.sidecar_stale,
					 (unsigned long long)m.ixs.sidecar_missing,
					 (unsigned long long)m.ixs.sidecar_bad);
			n = strlen(msg);
			if (bfs_source_nindex_dali(m.src))
				snprintf(msg + n, sizeof(msg) - n,
					 "; %zu shards indexed from DALI .idx files",
					 bfs_source_nindex_dali(m.src));
		}
		if (m.wids) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n, "; wids index: %zu shards%s%s",
				 m.wids->n, m.wids_bad ? ", which disagrees: " : ", every "
				 "sample count as it says", m.wids_note);
		}
		if (o->hold) {
			size_t n = strlen(msg);

			snprintf(msg + n, sizeof(msg) - n,
				 "; unmounts itself when the last open of %s/hold is closed",
				 o->mountpoint);
		}
	}
	if (notify_fd >= 0)
		bfs_log(BFS_LOG_INFO, "%s", msg + strlen("batchfs: "));
	if (m.sidecar_note[0]) {
		char esc[2 * sizeof(m.sidecar_note)];

		bfs_log(BFS_LOG_WARN, "%s", bfs_log_escape(m.sidecar_note, esc, sizeof(esc)));
	}
	if (m.wids_bad) {
		char esc[2 * sizeof(m.wids_note)];

		bfs_log(BFS_LOG_WARN, "wids index %s disagrees with the shards: %s "
			"(batchfs serves what the shards hold)", o->shard_dir,
			bfs_log_escape(m.wids_note, esc, sizeof(esc)));
	}
	if (m.ixs.sidecar_bad) {
		char esc[512];

		bfs_log(BFS_LOG_WARN, "sidecar index: %llu entries are damaged (the first: "
			"%s): those shards were scanned; run batchfs index again",
			(unsigned long long)m.ixs.sidecar_bad,
			bfs_log_escape(m.ixs.first_bad, esc, sizeof(esc)));
	}
	if (bfs_source_dali_note(m.src)) {
		char esc[2 * BFS_ERRMSG_MAX];

		bfs_log(BFS_LOG_WARN, "DALI index: %s",
			bfs_log_escape(bfs_source_dali_note(m.src), esc, sizeof(esc)));
	}
	for (size_t i = 0; i < bfs_source_nscan_errors(m.src); i++) {
		char a[256], b[512];

		bfs_log(BFS_LOG_WARN, "shard %s: %s",
			bfs_log_escape(bfs_source_scan_error_shard(m.src, i), a, sizeof(a)),
			bfs_log_escape(bfs_source_scan_error(m.src, i), b, sizeof(b)));
	}
	bfs_daemon_notify(notify_fd, 1, msg);
	bfs_daemon_detach(notify_fd);

	bfs_ll_start_pushes(m.ll);
	if (o->hold && o->hold_wait &&
	    pthread_create(&m.hold_timer, NULL, hold_timer_main, &m) == 0)
		m.hold_timer_on = 1;
	err = bfs_loop_run(m.se, SERVE_THREADS);
	hold_timer_stop(&m);
	status = err == 0 ? 0 : 1;
	bfs_ll_stop_pushes(m.ll); /* after an unmount: none can be waiting */
	bfs_log(BFS_LOG_INFO, "unmounting %s", o->mountpoint);
	goto out;
fail:
	bfs_daemon_notify(notify_fd, 0, msg);
out:
	bfs_daemon_unwatch(watch);
	bfs_metricsd_stop(m.metrics); /* before the view it reads */
	bfs_history_stop(m.history);  /* before the engine it samples */
	if (mounted)
		unmount_ours(&m, o->mountpoint);
	/* workers waiting on the network let go at once */
	if (m.sc)
		bfs_shardcache_cancel(m.sc);
	/* before the session: no worker may push into a freed session */
	bfs_engine_destroy(m.eng);   /* flushes what it gave the cache */
	bfs_view_destroy(m.view);
	bfs_history_free(m.history);  /* after the view that shows it */
	if (m.se)
		fuse_session_destroy(m.se);
	bfs_pt_destroy(m.pt);
	bfs_ll_destroy(m.ll);
	bfs_peek_stop(m.peek); /* no push is left to ask it */
	fuse_opt_free_args(&args);
	bfs_source_close(m.src);
	bfs_indexes_destroy(m.indexes);
	bfs_shardcache_close(m.sc);
	bfs_storage_close(m.storage);
	bfs_wids_free(m.wids);
	bfs_cache_store_close(&m.store);
	bfs_cache_close(m.cache);
	if (logf)
		fclose(logf);
	if (mark_fd >= 0)
		close(mark_fd);
	return status;
}

/* Paths as the daemon keeps them: made absolute before anything else,
 * since the daemon works from / once it is detached (a relative mount
 * point unmounted from there would be another file system). */
struct abs_paths {
	char shard_dir[PATH_MAX];
	char mountpoint[PATH_MAX];
	char log_path[PATH_MAX];
	char cache[PATH_MAX];
	char slot_dir[PATH_MAX];
	char metrics_file[PATH_MAX];
	char dali_dir[PATH_MAX];
	char shard_cache[PATH_MAX];
};

static int make_absolute(bfs_mount_opts *o, struct abs_paths *p)
{
	int err;

	if (bfs_storage_is_url(o->shard_dir)) {
		snprintf(p->shard_dir, sizeof(p->shard_dir), "%s", o->shard_dir);
	} else if (!realpath(o->shard_dir, p->shard_dir)) {
		fprintf(stderr, "batchfs: %s: %s\n", o->shard_dir, strerror(errno));
		return -1;
	}
	if ((err = bfs_host_resolve(o->mountpoint, p->mountpoint,
				sizeof(p->mountpoint)))) {
		fprintf(stderr, "batchfs: mount point %s: %s\n", o->mountpoint,
			strerror(-err));
		return -1;
	}
	o->shard_dir = o->source.dir = p->shard_dir;
	o->mountpoint = p->mountpoint;
	if (o->log_path) {
		if (bfs_host_absolute(o->log_path, p->log_path, sizeof(p->log_path)))
			goto too_long;
		o->log_path = p->log_path;
	}
	if (o->cache && strcmp(o->cache, "none") != 0) {
		if (bfs_host_absolute(o->cache, p->cache, sizeof(p->cache)))
			goto too_long;
		o->cache = p->cache;
	}
	if (o->shard_cache) {
		if (bfs_host_absolute(o->shard_cache, p->shard_cache,
				      sizeof(p->shard_cache)))
			goto too_long;
		o->shard_cache = p->shard_cache;
	}
	if (o->slot_dir) {
		if (bfs_host_absolute(o->slot_dir, p->slot_dir, sizeof(p->slot_dir)))
			goto too_long;
		o->slot_dir = p->slot_dir;
	}
	if (o->source.dali_dir) {
		if (bfs_host_absolute(o->source.dali_dir, p->dali_dir, sizeof(p->dali_dir)))
			goto too_long;
		o->source.dali_dir = p->dali_dir;
	}
	if (o->metrics_file) {
		if (bfs_host_absolute(o->metrics_file, p->metrics_file,
				      sizeof(p->metrics_file)))
			goto too_long;
		o->metrics_file = p->metrics_file;
	}
	return 0;
too_long:
	fprintf(stderr, "batchfs: a path is too long (or the current directory is gone)\n");
	return -1;
}

/* What a mount's paths and FUSE options may be, checked before the
 * daemon starts (0, or -1 with the message printed): the cache directory
 * (explicit or the default) new, empty or a batchfs cache's own; a
 * --dali-index that is a directory; a log path that is not a directory; a --slot-dir on a tmpfs; and no
 * subtype= in -o (a batchfs mount is always of type fuse.batchfs). */
static int check_paths(const bfs_mount_opts *o)
{
	char why[PATH_MAX + 512], dir[PATH_MAX];
	const char *opts = o->fuse_opts;
	struct stat st;

	if (!o->cache || strcmp(o->cache, "none") != 0) {
		const char *c = o->cache;

		if (!c && bfs_cache_default_dir(dir, sizeof(dir)) == 0)
			c = dir;
		if (c && bfs_host_check_cache_dir(c, why, sizeof(why))) {
			fprintf(stderr, "batchfs: %s\n", why);
			return -1;
		}
	}
	if (o->source.dali_dir &&
	    (stat(o->source.dali_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
		int e = stat(o->source.dali_dir, &st) != 0 ? errno : 0;

		fprintf(stderr, "batchfs: --dali-index %s: %s\n", o->source.dali_dir,
			e ? strerror(e) : "not a directory");
		return -1;
	}
	if (o->log_path && bfs_host_check_log_path(o->log_path, why, sizeof(why))) {
		fprintf(stderr, "batchfs: %s\n", why);
		return -1;
	}
	if (o->slot_dir && !o->no_passthrough &&
	    bfs_host_check_slot_dir(o->slot_dir, why, sizeof(why))) {
		fprintf(stderr, "batchfs: %s\n", why);
		return -1;
	}
	for (const char *p = opts; p; p = strchr(p, ',')) {
		if (*p == ',')
			p++;
		if (!strncmp(p, "subtype=", 8)) {
			fprintf(stderr, "batchfs: -o subtype= is not an option: a batchfs mount is of type fuse.batchfs\n");
			return -1;
		}
	}
	return 0;
}

int bfs_mount_main(const bfs_mount_opts *opts)
{
	bfs_mount_opts ao = *opts, *o = &ao;
	struct abs_paths paths;
	struct stat st;

	if (bfs_storage_is_url(o->shard_dir)) {
		/* checked when the daemon lists it */
	} else if (stat(o->shard_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "batchfs: %s: %s\n", o->shard_dir,
			errno && !S_ISDIR(st.st_mode) && stat(o->shard_dir, &st) != 0
				? strerror(errno) : "not a directory");
		return 1;
	}
	if (!bfs_storage_is_url(o->shard_dir) &&
	    access(o->shard_dir, R_OK | X_OK) != 0) {
		fprintf(stderr, "batchfs: %s: %s\n", o->shard_dir,
			strerror(errno));
		return 1;
	}
	if (stat(o->mountpoint, &st) != 0 || !S_ISDIR(st.st_mode)) {
		int missing = stat(o->mountpoint, &st) != 0 && errno == ENOENT;

		fprintf(stderr, "batchfs: mount point %s: %s%s%s%s\n", o->mountpoint,
			stat(o->mountpoint, &st) != 0 ? strerror(errno)
						      : "not a directory",
			missing ? " (create it first: mkdir -p " : "",
			missing ? o->mountpoint : "", missing ? ")" : "");
		return 1;
	}
	if (bfs_host_is_mountpoint(o->mountpoint)) {
		fprintf(stderr,
			"batchfs: mount point %s is busy: something is already mounted there (batchfs unmount %s)\n",
			o->mountpoint, o->mountpoint);
		return 1;
	}
	if (make_absolute(o, &paths) || check_paths(o))
		return 1;
	return bfs_daemon_run(o->foreground || o->debug, serve, o);
}
