/*
 * status.c - `batchfs status` (see status.h): read a mount's stats.json
 * twice, an interval apart, and show what it is doing.
 */
#include "fs/status.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"

#include "fs/daemon.h"
#include "fs/history.h"
#include "fs/json.h"
#include "fs/log.h"
#include "fs/optparse.h"
#include "fs/plot.h"

#define LAST_ERRORS 5   /* errors shown: the last ones stats.json lists */

static const char usage_text[] =
	"usage: batchfs status MOUNTPOINT [--watch] [--json] [--interval S]\n"
	"       batchfs status MOUNTPOINT --plot OUT.png\n"
	"\n"
	"What a batchfs mount is doing: samples per second served, decoded\n"
	"and taken from the cache; where each reader is (epoch and batch) with\n"
	"its read-ahead depth and waits; cache hits; memory against --mem; the\n"
	"last errors.  Rates are measured over S seconds (1).\n"
	"\n"
	"  -w, --watch         refresh every S seconds until interrupted (or the\n"
	"                      mount goes away)\n"
	"  -j, --json          one JSON object (with --watch, one per line)\n"
	"  -i, --interval S    seconds between the two looks (0.1..3600; 1)\n"
	"  -p, --plot OUT.png  draw images/s, reader wait and cache hit rate\n"
	"                      over the mount's life (stats.json's history) as\n"
	"                      a PNG, written atomically, and say where\n"
	"  -h, --help          this help\n"
	"\n"
	"Exit status: 0, 1 when the mount cannot be read, 2 for a usage error.\n";

/* ---- rendering ---------------------------------------------------------- */

static double num(const bfs_jr *v, const char *key)
{
	return bfs_jr_num(bfs_jr_get(v, key), 0);
}

/* The change of counter path (key, or "obj.key") per second from prev to
 * now; without prev, since the mount started. */
static double rate(const bfs_jr *prev, const bfs_jr *now, const char *obj,
		   const char *key)
{
	const bfs_jr *a = prev, *b = now;
	double dt, d;

	if (obj) {
		a = bfs_jr_get(prev, obj);
		b = bfs_jr_get(now, obj);
	}
	dt = num(now, "uptime_seconds") - (prev ? num(prev, "uptime_seconds") : 0);
	if (dt <= 0)
		return 0;
	d = bfs_jr_num(bfs_jr_get(b, key), 0) - (prev ? bfs_jr_num(bfs_jr_get(a, key), 0) : 0);
	return d > 0 ? d / dt : 0;
}

/* A string from the mount, made safe for a terminal. */
static const char *esc(const char *s, char *buf, size_t cap)
{
	return bfs_log_escape(s ? s : "", buf, cap);
}

static void human_duration(double s, char *out, size_t cap)
{
	unsigned long t = s > 0 ? (unsigned long)s : 0;

	if (t >= 86400)
		snprintf(out, cap, "%lud %02lu:%02lu:%02lu", t / 86400,
			 t / 3600 % 24, t / 60 % 60, t % 60);
	else
		snprintf(out, cap, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60,
			 t % 60);
}

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

static void text_view(FILE *o, const char *mountpoint, const bfs_jr *ds,
		      const bfs_jr *prev, const bfs_jr *now)
{
	const bfs_jr *readers = bfs_jr_get(now, "readers");
	const bfs_jr *cache = bfs_jr_get(now, "cache");
	const bfs_jr *mem = bfs_jr_get(now, "memory");
	const bfs_jr *errors = bfs_jr_get(now, "errors");
	const bfs_jr *remote = bfs_jr_get(now, "remote");
	double epochs = num(ds, "epochs"), per = num(ds, "batches_per_epoch");
	char a[1024], b[1024], up[64];
	size_t nerr = errors && errors->type == BFS_JR_ARRAY ? errors->n : 0;

	human_duration(num(now, "uptime_seconds"), up, sizeof(up));
	fprintf(o, "%s: %s (%s), up %s\n", esc(mountpoint, a, sizeof(a)),
		esc(bfs_jr_str(bfs_jr_get(ds, "source"), "?"), b, sizeof(b)),
		bfs_jr_str(bfs_jr_get(ds, "format"), "?"), up);
	fprintf(o, "samples/s    %.0f served, %.0f decoded, %.0f from the cache%s\n",
		rate(prev, now, NULL, "samples_served"),
		rate(prev, now, NULL, "samples_decoded"),
		cache && cache->type == BFS_JR_OBJECT ? rate(prev, now, "cache", "hits") : 0,
		prev ? "" : " (average since the mount started)");
	if (!readers || readers->type != BFS_JR_ARRAY || readers->n == 0)
		fprintf(o, "readers      none reading now\n");
	for (size_t i = 0; readers && i < readers->n; i++) {
		const bfs_jr *r = &readers->items[i];
		const bfs_jr *ep = bfs_jr_get(r, "epoch"), *bt = bfs_jr_get(r, "batch");

		fprintf(o, "%s pid %.0f", i ? "            " : "readers     ",
			num(r, "pid"));
		if (ep && ep->type == BFS_JR_NUMBER && bt && bt->type == BFS_JR_NUMBER)
			fprintf(o, ": epoch-%04.0f/batch-%06.0f (epoch %.0f of %.0f, batch %.0f of %.0f)",
				ep->number, bt->number, ep->number + 1, epochs,
				bt->number + 1, per);
		fprintf(o, ", %.1f batches/s, read-ahead %.0f, %.0f waits (%.1f s)\n",
			num(r, "batches_per_second"), num(r, "depth"),
			num(r, "waits"), num(r, "wait_seconds"));
	}
	fprintf(o, "read-ahead   %s, %s %.0f; reader waits %.0f (%.1f s in all)\n",
		bfs_jr_str(bfs_jr_get(now, "prefetch_mode"), "?"),
		!strcmp(bfs_jr_str(bfs_jr_get(now, "prefetch_mode"), ""), "auto")
			? "deepest" : "depth",
		num(now, "prefetch_depth"), num(now, "reader_waits"),
		num(now, "reader_wait_seconds"));
	if (cache && cache->type == BFS_JR_OBJECT)
		fprintf(o, "cache        %.0f hits, %.0f misses (%.1f%% hits); %.1f of %.1f GiB used; %s%s\n",
			num(cache, "hits"), num(cache, "misses"),
			100.0 * num(cache, "hit_rate"),
			mib(num(cache, "bytes_used")) / 1024.0,
			mib(num(cache, "size_limit")) / 1024.0,
			esc(bfs_jr_str(bfs_jr_get(cache, "dir"), "?"), a, sizeof(a)),
			bfs_jr_bool(bfs_jr_get(cache, "full"), 0) ? " (full: no more inserts)" : "");
	else
		fprintf(o, "cache        none\n");
	/* samples the cache could not take, and why */
	if (cache && cache->type == BFS_JR_OBJECT && num(cache, "dropped_full") > 0)
		fprintf(o, "             %.0f samples not stored: %s\n",
			num(cache, "dropped_full"),
			bfs_jr_bool(bfs_jr_get(cache, "fs_full"), 0)
				? "the cache's file system is full"
				: "the cache is at its size limit");
	if (cache && cache->type == BFS_JR_OBJECT &&
	    (num(cache, "dropped_locked") > 0 ||
	     bfs_jr_bool(bfs_jr_get(cache, "read_only"), 0)))
		fprintf(o, "             %.0f samples not stored: %s (see the log)\n",
			num(cache, "dropped_locked"),
			bfs_jr_bool(bfs_jr_get(cache, "read_only"), 0)
				? "another process held the cache's writer lock at mount: read-only"
				: "another process holds the cache's writer lock");
	if (remote && remote->type == BFS_JR_OBJECT) {
		const bfs_jr *rt = bfs_jr_get(remote, "retries");

		const bfs_jr *ep = bfs_jr_get(remote, "bytes_by_epoch");

		fprintf(o, "remote       %.0f requests, %.1f MB, %.0f in flight, %.0f failed, link %.1f MB/s; retries: %.0f reset, %.0f timeout, %.0f server error, %.0f throttled, %.0f short body\n",
			num(remote, "requests"), num(remote, "bytes") / 1e6,
			num(remote, "in_flight"), num(remote, "failed"),
			prev ? rate(prev, now, "remote", "bytes") / 1e6
			     : num(remote, "link_mb_per_second"),
			num(rt, "reset"), num(rt, "timeout"), num(rt, "server_error"),
			num(rt, "throttled"), num(rt, "short_body"));
		fprintf(o, "shard cache  %.0f objects (%.1f MB); %.1f of %.1f MB on disk, %.0f held here, %.0f being fetched; in %s\n",
			num(remote, "objects"), num(remote, "bytes_total") / 1e6,
			num(remote, "bytes_on_disk") / 1e6, num(remote, "limit") / 1e6,
			num(remote, "held"), num(remote, "fetching"),
			esc(bfs_jr_str(bfs_jr_get(remote, "shard_cache"), "?"), a, sizeof(a)));
		fprintf(o, "             reads: %.0f hits, %.0f misses (%.0f by range, %.1f MB; %.0f waited %.1f s); %.0f fetched (%.1f MB), %.0f found, %.0f evicted, %.0f failed\n",
			num(remote, "hits"), num(remote, "misses"),
			num(remote, "range_reads"), num(remote, "range_bytes") / 1e6,
			num(remote, "waits"), num(remote, "wait_seconds"),
			num(remote, "fetched"), num(remote, "bytes_fetched") / 1e6,
			num(remote, "found"), num(remote, "evictions"),
			num(remote, "failures"));
		if (ep && ep->type == BFS_JR_ARRAY && ep->n) {
			fprintf(o, "             fetched by epoch:");
			for (size_t i = ep->n > 4 ? ep->n - 4 : 0; i < ep->n; i++)
				fprintf(o, " %.0f: %.1f MB%s", num(&ep->items[i], "epoch"),
					num(&ep->items[i], "bytes") / 1e6,
					i + 1 < ep->n ? "," : "");
			fprintf(o, "\n");
		}
	}
	{
		const bfs_jr *ix = bfs_jr_get(now, "index");

		if (ix && ix->type == BFS_JR_OBJECT)
			fprintf(o, "index        %.0f shards: %.0f from the cache, %.0f from the sidecar index%s, %.0f from DALI .idx files, %.0f scanned\n",
				num(ix, "shards"), num(ix, "from_cache"), num(ix, "from_sidecar"),
				bfs_jr_bool(bfs_jr_get(ix, "sidecar"), 0) ? "" : " (none)",
				num(ix, "from_dali"), num(ix, "scanned"));
	}
	fprintf(o, "memory       %.0f of %.0f MiB (--mem): batches %.0f, decoder scratch %.0f, held files %.0f\n",
		mib(num(now, "memory_bytes")), mib(num(now, "memory_budget")),
		mib(num(mem, "batch_slots")), mib(num(mem, "decoder_scratch")),
		mib(num(mem, "held_files")));
	if (num(now, "errors_total") == 0) {
		fprintf(o, "errors       none\n");
		return;
	}
	fprintf(o, "errors       %.0f", num(now, "errors_total"));
	if (num(now, "errors_left_out") > 0)
		fprintf(o, " (stats.json lists the first %zu)", nerr);
	fprintf(o, "; the last %s:\n", nerr > LAST_ERRORS ? "listed" : "ones");
	for (size_t i = nerr > LAST_ERRORS ? nerr - LAST_ERRORS : 0; i < nerr; i++) {
		const bfs_jr *e = &errors->items[i];
		const bfs_jr *rec = bfs_jr_get(e, "record");

		fprintf(o, "             %s", esc(bfs_jr_str(bfs_jr_get(e, "shard"), "?"),
						  a, sizeof(a)));
		if (rec && rec->type == BFS_JR_NUMBER)
			fprintf(o, " record %.0f", rec->number);
		fprintf(o, ": %s\n", esc(bfs_jr_str(bfs_jr_get(e, "message"), "?"),
					 b, sizeof(b)));
	}
}

static void json_view(bfs_json *j, const char *mountpoint, const bfs_jr *ds,
		      const bfs_jr *prev, const bfs_jr *now)
{
	const bfs_jr *readers = bfs_jr_get(now, "readers");
	const bfs_jr *cache = bfs_jr_get(now, "cache");
	const bfs_jr *mem = bfs_jr_get(now, "memory");
	const bfs_jr *errors = bfs_jr_get(now, "errors");
	size_t nerr = errors && errors->type == BFS_JR_ARRAY ? errors->n : 0;
	double dt = num(now, "uptime_seconds") -
		    (prev ? num(prev, "uptime_seconds") : 0);

	bfs_json_open(j, NULL, '{');
	bfs_json_str(j, "mount", mountpoint);
	bfs_json_str(j, "source", bfs_jr_str(bfs_jr_get(ds, "source"), ""));
	bfs_json_fixed(j, "timestamp", num(now, "timestamp"), 3);
	bfs_json_fixed(j, "uptime_seconds", num(now, "uptime_seconds"), 3);
	/* what the rates below are measured over */
	bfs_json_fixed(j, "interval_seconds", dt > 0 ? dt : 0, 3);
	bfs_json_open(j, "samples_per_second", '{');
	bfs_json_f64(j, "served", rate(prev, now, NULL, "samples_served"));
	bfs_json_f64(j, "decoded", rate(prev, now, NULL, "samples_decoded"));
	bfs_json_f64(j, "from_cache", cache && cache->type == BFS_JR_OBJECT
		     ? rate(prev, now, "cache", "hits") : 0);
	bfs_json_close(j, '}');
	bfs_json_u64(j, "epochs", (uint64_t)num(ds, "epochs"));
	bfs_json_u64(j, "batches_per_epoch", (uint64_t)num(ds, "batches_per_epoch"));
	bfs_json_open(j, "readers", '[');
	for (size_t i = 0; readers && readers->type == BFS_JR_ARRAY && i < readers->n; i++) {
		const bfs_jr *r = &readers->items[i];
		const bfs_jr *ep = bfs_jr_get(r, "epoch"), *bt = bfs_jr_get(r, "batch");

		bfs_json_open(j, NULL, '{');
		bfs_json_u64(j, "pid", (uint64_t)num(r, "pid"));
		if (ep && ep->type == BFS_JR_NUMBER && bt && bt->type == BFS_JR_NUMBER) {
			bfs_json_u64(j, "epoch", (uint64_t)ep->number);
			bfs_json_u64(j, "batch", (uint64_t)bt->number);
		} else {
			bfs_json_null(j, "epoch");
			bfs_json_null(j, "batch");
		}
		bfs_json_u64(j, "depth", (uint64_t)num(r, "depth"));
		bfs_json_f64(j, "batches_per_second", num(r, "batches_per_second"));
		bfs_json_u64(j, "waits", (uint64_t)num(r, "waits"));
		bfs_json_f64(j, "wait_seconds", num(r, "wait_seconds"));
		bfs_json_close(j, '}');
	}
	bfs_json_close(j, ']');
	bfs_json_str(j, "prefetch_mode", bfs_jr_str(bfs_jr_get(now, "prefetch_mode"), ""));
	bfs_json_u64(j, "prefetch_depth", (uint64_t)num(now, "prefetch_depth"));
	bfs_json_u64(j, "reader_waits", (uint64_t)num(now, "reader_waits"));
	bfs_json_f64(j, "reader_wait_seconds", num(now, "reader_wait_seconds"));
	if (cache && cache->type == BFS_JR_OBJECT) {
		bfs_json_open(j, "cache", '{');
		bfs_json_str(j, "dir", bfs_jr_str(bfs_jr_get(cache, "dir"), ""));
		bfs_json_u64(j, "hits", (uint64_t)num(cache, "hits"));
		bfs_json_u64(j, "misses", (uint64_t)num(cache, "misses"));
		bfs_json_f64(j, "hit_rate", num(cache, "hit_rate"));
		bfs_json_u64(j, "bytes_used", (uint64_t)num(cache, "bytes_used"));
		bfs_json_u64(j, "size_limit", (uint64_t)num(cache, "size_limit"));
		bfs_json_bool(j, "full", bfs_jr_bool(bfs_jr_get(cache, "full"), 0));
		bfs_json_u64(j, "dropped_full", (uint64_t)num(cache, "dropped_full"));
		bfs_json_u64(j, "dropped_locked", (uint64_t)num(cache, "dropped_locked"));
		bfs_json_close(j, '}');
	} else {
		bfs_json_null(j, "cache");
	}
	{
		const bfs_jr *remote = bfs_jr_get(now, "remote");

		if (remote && remote->type == BFS_JR_OBJECT) {
			static const char *f[] = { "requests", "bytes", "in_flight",
				"failed", "objects", "bytes_total", "limit",
				"bytes_on_disk", "held", "fetching", "hits", "misses",
				"range_reads", "range_bytes", "waits", "fetched",
				"bytes_fetched", "found", "evictions", "evicted_bytes",
				"removed", "failures" };
			static const char *r[] = { "reset", "timeout", "server_error",
				"throttled", "short_body" };
			const bfs_jr *rt = bfs_jr_get(remote, "retries");

			bfs_json_open(j, "remote", '{');
			for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
				bfs_json_u64(j, f[i], (uint64_t)num(remote, f[i]));
			bfs_json_open(j, "retries", '{');
			for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
				bfs_json_u64(j, r[i], (uint64_t)num(rt, r[i]));
			bfs_json_close(j, '}');
			bfs_json_f64(j, "link_mb_per_second",
				     num(remote, "link_mb_per_second"));
			bfs_json_f64(j, "wait_seconds", num(remote, "wait_seconds"));
			bfs_json_str(j, "shard_cache",
				     bfs_jr_str(bfs_jr_get(remote, "shard_cache"), ""));
			bfs_json_close(j, '}');
		}
	}
	{
		const bfs_jr *ix = bfs_jr_get(now, "index");

		if (ix && ix->type == BFS_JR_OBJECT) {
			static const char *f[] = { "shards", "from_cache", "from_sidecar",
				"from_dali", "scanned", "sidecar_changed", "sidecar_missing",
				"sidecar_damaged" };

			bfs_json_open(j, "index", '{');
			for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
				bfs_json_u64(j, f[i], (uint64_t)num(ix, f[i]));
			bfs_json_bool(j, "sidecar", bfs_jr_bool(bfs_jr_get(ix, "sidecar"), 0));
			bfs_json_close(j, '}');
		}
	}
	bfs_json_open(j, "memory", '{');
	bfs_json_u64(j, "bytes", (uint64_t)num(now, "memory_bytes"));
	bfs_json_u64(j, "budget", (uint64_t)num(now, "memory_budget"));
	bfs_json_u64(j, "batch_slots", (uint64_t)num(mem, "batch_slots"));
	bfs_json_u64(j, "decoder_scratch", (uint64_t)num(mem, "decoder_scratch"));
	bfs_json_u64(j, "held_files", (uint64_t)num(mem, "held_files"));
	bfs_json_close(j, '}');
	bfs_json_u64(j, "errors_total", (uint64_t)num(now, "errors_total"));
	bfs_json_u64(j, "errors_listed", nerr);
	bfs_json_open(j, "last_errors", '[');
	for (size_t i = nerr > LAST_ERRORS ? nerr - LAST_ERRORS : 0; i < nerr; i++) {
		const bfs_jr *e = &errors->items[i];
		const bfs_jr *rec = bfs_jr_get(e, "record");

		bfs_json_open(j, NULL, '{');
		bfs_json_str(j, "kind", bfs_jr_str(bfs_jr_get(e, "kind"), ""));
		bfs_json_str(j, "shard", bfs_jr_str(bfs_jr_get(e, "shard"), ""));
		if (rec && rec->type == BFS_JR_NUMBER)
			bfs_json_u64(j, "record", (uint64_t)rec->number);
		bfs_json_str(j, "message", bfs_jr_str(bfs_jr_get(e, "message"), ""));
		bfs_json_close(j, '}');
	}
	bfs_json_close(j, ']');
	bfs_json_close(j, '}');
}

int bfs_status_render(const char *mountpoint, const bfs_jr *dataset,
		      const bfs_jr *prev, const bfs_jr *now, int json,
		      char **out)
{
	*out = NULL;
	if (json) {
		bfs_json j;
		size_t len;

		bfs_json_init(&j);
		j.compact = 1; /* one line: --watch --json is JSON lines */
		json_view(&j, mountpoint, dataset, prev, now);
		return bfs_json_take(&j, out, &len);
	} else {
		size_t len = 0;
		FILE *o = open_memstream(out, &len);

		if (!o)
			return -ENOMEM;
		text_view(o, mountpoint, dataset, prev, now);
		if (fclose(o) != 0 || !*out) {
			free(*out);
			*out = NULL;
			return -ENOMEM;
		}
		return 0;
	}
}

/* ---- reading the mount -------------------------------------------------- */

/* MOUNTPOINT/name parsed; 0, or -errno / -EINVAL with why (cap bytes).
 * The read has a deadline (a stopped or hung daemon never answers it):
 * -ETIMEDOUT with why saying what became of the daemon. */
static int read_json(const char *mountpoint, const char *name, bfs_jr **out,
		     char *why, size_t cap)
{
	char path[PATH_MAX], err[256];
	char *buf = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	snprintf(path, sizeof(path), "%s/%s", mountpoint, name);
	rc = bfs_daemon_read_file(path, BFS_DAEMON_PROBE_MS, &buf, &len);
	if (rc == -ETIMEDOUT) {
		bfs_daemon_probe_result pr;

		bfs_daemon_probe(mountpoint, BFS_DAEMON_PROBE_MS, &pr);
		if (pr.state != BFS_DAEMON_STOPPED && pr.state != BFS_DAEMON_SILENT) {
			pr.state = BFS_DAEMON_SILENT; /* it did not answer the read */
			pr.pid = 0;
		}
		bfs_daemon_describe(mountpoint, &pr, BFS_DAEMON_PROBE_MS, why, cap);
		return rc;
	}
	if (rc) {
		snprintf(why, cap, "%s: %s", path, strerror(-rc));
		return rc;
	}
	if ((rc = bfs_jr_parse(buf, len, out, err, sizeof(err))))
		snprintf(why, cap, "%s: not batchfs's JSON (%s)", path, err);
	free(buf);
	return rc;
}

/* 0 when mountpoint is a batchfs mount whose daemon answers; else 1 with
 * what it is instead on stderr (a stopped daemon, a dead mount, another
 * file system), asking nothing of a mount whose daemon is stopped. */
static int check_mount(const char *mountpoint)
{
	bfs_daemon_probe_result pr;
	char why[PATH_MAX * 4 + 256];

	bfs_daemon_probe(mountpoint, BFS_DAEMON_PROBE_MS, &pr);
	bfs_daemon_describe(mountpoint, &pr, BFS_DAEMON_PROBE_MS, why, sizeof(why));
	switch (pr.state) {
	case BFS_DAEMON_SERVING:
		return 0;
	case BFS_DAEMON_NOT_MOUNTED:
		/* a folder, maybe: its dataset.json is read and judged */
		return 0;
	case BFS_DAEMON_OTHER_FS:
		fprintf(stderr, "batchfs status: %s is not a batchfs mount (it is a%s %s mount)\n",
			mountpoint, strchr("aeiou", pr.fstype[0]) && pr.fstype[0] ? "n" : "",
			pr.fstype);
		return 1;
	case BFS_DAEMON_DEAD:
		fprintf(stderr, "batchfs status: %s ('batchfs unmount %s' cleans it)\n",
			why, mountpoint);
		return 1;
	default:
		fprintf(stderr, "batchfs status: %s\n", why);
		return 1;
	}
}

/* A counter from JSON: negative, NaN and past 2^64 held to the range. */
static uint64_t counter(const bfs_jr *v)
{
	double d = bfs_jr_num(v, 0);

	if (!(d > 0))
		return 0;
	return d >= 18446744073709549568.0 ? UINT64_MAX : (uint64_t)d;
}

int bfs_status_history(const bfs_jr *stats, bfs_history_point *out,
		       size_t cap)
{
	const bfs_jr *pts = bfs_jr_get(bfs_jr_get(stats, "history"), "points");
	const bfs_jr *cache = bfs_jr_get(stats, "cache");
	size_t n = 0;

	if (!cap)
		return 0;
	for (size_t i = 0; pts && pts->type == BFS_JR_ARRAY && i < pts->n; i++) {
		const bfs_jr *q = &pts->items[i];
		bfs_history_point p;

		if (q->type != BFS_JR_ARRAY || q->n < 6)
			continue; /* not a point: passed over */
		if (n + 1 >= cap)
			break;    /* room for the point of now */
		p.t = bfs_jr_num(&q->items[0], 0);
		p.served = counter(&q->items[1]);
		p.decoded = counter(&q->items[2]);
		p.wait_s = bfs_jr_num(&q->items[3], 0);
		p.hits = counter(&q->items[4]);
		p.misses = counter(&q->items[5]);
		out[n++] = p;
	}
	{
		/* now: the counters beside the history, in the same snapshot */
		bfs_history_point p = {
			.t = num(stats, "uptime_seconds"),
			.served = counter(bfs_jr_get(stats, "samples_served")),
			.decoded = counter(bfs_jr_get(stats, "samples_decoded")),
			.wait_s = num(stats, "reader_wait_seconds"),
			.hits = counter(bfs_jr_get(cache, "hits")),
			.misses = counter(bfs_jr_get(cache, "misses")),
		};

		if (!n || p.t > out[n - 1].t)
			out[n++] = p;
	}
	return (int)n;
}

/* buf to path through a temporary name beside it, so that nobody sees
 * half a picture.  0, or -errno with why. */
static int write_atomic(const char *path, const void *buf, size_t len,
			char *why, size_t cap)
{
	char tmp[PATH_MAX];
	size_t off = 0;
	int fd, err;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
		snprintf(why, cap, "--plot %s: name too long", path);
		return -ENAMETOOLONG;
	}
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		err = -errno;
		snprintf(why, cap, "--plot %s: cannot create %s: %s", path, tmp,
			 strerror(errno));
		return err;
	}
	(void)fchmod(fd, 0644);
	while (off < len) {
		ssize_t k = write(fd, (const char *)buf + off, len - off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			goto fail;
		off += (size_t)k;
	}
	if (close(fd) != 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) != 0)
		goto fail;
	return 0;
fail:
	err = -errno;
	snprintf(why, cap, "--plot %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return err;
}

/* --plot: the picture of stats.json's history and the point of now. */
static int plot(const char *mountpoint, const bfs_jr *stats, const char *out)
{
	enum { MAXP = BFS_HISTORY_CAP + 1 };
	bfs_history_point *pts = calloc(MAXP, sizeof(*pts));
	bfs_plot_opts po = { 0 };
	char title[PATH_MAX + 16], why[PATH_MAX + 256], errmsg[BFS_ERRMSG_MAX] = "";
	uint8_t *rgb = NULL;
	void *png = NULL;
	size_t len = 0;
	int n, w, h, err, rc = 1;

	if (!pts) {
		fprintf(stderr, "batchfs status: out of memory\n");
		return 1;
	}
	n = bfs_status_history(stats, pts, MAXP);
	snprintf(title, sizeof(title), "batchfs %s", mountpoint);
	po.title = title;
	po.cache = bfs_jr_get(stats, "cache") &&
		   bfs_jr_get(stats, "cache")->type == BFS_JR_OBJECT;
	if ((err = bfs_plot_render(&po, pts, (size_t)n, &rgb, &w, &h)) ||
	    (err = bfs_plot_png(rgb, w, h, &png, &len, errmsg))) {
		fprintf(stderr, "batchfs status: --plot: %s\n",
			errmsg[0] ? errmsg : strerror(-err));
		goto out;
	}
	if (write_atomic(out, png, len, why, sizeof(why))) {
		fprintf(stderr, "batchfs status: %s\n", why);
		goto out;
	}
	printf("batchfs status: wrote %s (%dx%d PNG: %d points over %.0f s%s)\n",
	       out, w, h, n, n ? pts[n - 1].t : 0.0,
	       bfs_jr_get(stats, "history") ? "" : "; this mount keeps no history");
	rc = 0;
out:
	free(png);
	free(rgb);
	free(pts);
	return rc;
}

static void sleep_s(double s)
{
	struct timespec t = { (time_t)s, (long)((s - floor(s)) * 1e9) };

	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

int bfs_status_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "watch", no_argument, 0, 'w' },
		{ "json", no_argument, 0, 'j' },
		{ "interval", required_argument, 0, 'i' },
		{ "plot", required_argument, 0, 'p' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	bfs_jr *ds = NULL, *prev = NULL, *now = NULL;
	char why[PATH_MAX + 256], *text;
	const char *mountpoint, *plot_to = NULL;
	double interval = 1.0;
	int c, watch = 0, json = 0, rc = 1, tty = isatty(STDOUT_FILENO);

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":wji:p:h", lo, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'w':
			watch = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 'i':
			interval = strtod(optarg, &end);
			if (end == optarg || *end || !(interval >= 0.1 && interval <= 3600)) {
				fprintf(stderr, "batchfs status: bad value '%s' for --interval (0.1..3600 seconds); see 'batchfs status --help'\n",
					optarg);
				return 2;
			}
			break;
		case 'p':
			if (!*optarg) {
				fprintf(stderr, "batchfs status: --plot needs a file name; see 'batchfs status --help'\n");
				return 2;
			}
			plot_to = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case ':':
			fprintf(stderr, "batchfs status: %s needs a value; see 'batchfs status --help'\n",
				argv[optind - 1]);
			return 2;
		default: {
			char hint[96];

			fprintf(stderr, "batchfs status: unknown option '%s'%s; see 'batchfs status --help'\n",
				argv[optind - 1],
				bfs_opt_hint(argv[optind - 1], lo, hint, sizeof(hint)));
		}
			return 2;
		}
	}
	if (argc - optind != 1) {
		fprintf(stderr, "batchfs status: %s; see 'batchfs status --help'\n",
			argc - optind < 1 ? "needs MOUNTPOINT" : "too many arguments");
		return 2;
	}
	if (plot_to && (watch || json)) {
		fprintf(stderr, "batchfs status: --plot draws one picture; it does not go with --%s; see 'batchfs status --help'\n",
			watch ? "watch" : "json");
		return 2;
	}
	mountpoint = argv[optind];
	if (check_mount(mountpoint))
		goto out;
	if (read_json(mountpoint, "dataset.json", &ds, why, sizeof(why)) ||
	    !bfs_jr_get(ds, "batchfs_version")) {
		fprintf(stderr, "batchfs status: %s is not a batchfs mount%s%s%s\n",
			mountpoint, ds ? "" : " (", ds ? "" : why, ds ? "" : ")");
		goto out;
	}
	if (read_json(mountpoint, "stats.json", &now, why, sizeof(why)))
		goto gone;
	if (plot_to) {
		rc = plot(mountpoint, now, plot_to);
		goto out;
	}
	for (;;) {
		sleep_s(interval);
		bfs_jr_free(prev);
		prev = now;
		if (read_json(mountpoint, "stats.json", &now, why, sizeof(why)))
			goto gone;
		if (bfs_status_render(mountpoint, ds, prev, now, json, &text)) {
			fprintf(stderr, "batchfs status: out of memory\n");
			goto out;
		}
		if (watch && !json && tty)
			fputs("\033[H\033[J", stdout); /* a screen that refreshes */
		fputs(text, stdout);
		if (!json && watch && !tty)
			fputc('\n', stdout); /* a blank line between looks */
		fflush(stdout);
		free(text);
		if (!watch)
			break;
	}
	rc = 0;
	goto out;
gone:
	fprintf(stderr, "batchfs status: %s\n", why);
out:
	bfs_jr_free(ds);
	bfs_jr_free(prev);
	bfs_jr_free(now);
	return rc;
}
