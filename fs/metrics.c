/*
 * metrics.c - stats.json as Prometheus text (see metrics.h), and
 * `batchfs metrics MOUNTPOINT`, which reads it through the mount.
 */
#include "fs/metrics.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/utf8.h"

/* ---- the text ---------------------------------------------------------- */

/* One sample's value: integers as integers, others in the fewest digits
 * that read back as the same double. */
static void fmt_num(double v, char *buf, size_t cap)
{
	if (isnan(v))
		snprintf(buf, cap, "NaN");
	else if (isinf(v))
		snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) < 1e17)
		snprintf(buf, cap, "%.0f", v);
	else {
		snprintf(buf, cap, "%.15g", v);
		if (strtod(buf, NULL) != v)
			snprintf(buf, cap, "%.17g", v);
	}
}

/* A label value as the format wants it: \ " and newline escaped, bytes
 * that are not UTF-8 as U+FFFD. */
static void put_label_value(FILE *o, const char *s)
{
	size_t n = strlen(s);

	while (n) {
		uint32_t cp;
		size_t k = bfs_utf8_next((const unsigned char *)s, n, &cp);

		if (k == 0) {
			fputs("\xef\xbf\xbd", o);
			k = 1;
		} else if (*s == '\\') {
			fputs("\\\\", o);
		} else if (*s == '"') {
			fputs("\\\"", o);
		} else if (*s == '\n') {
			fputs("\\n", o);
		} else {
			fwrite(s, 1, k, o);
		}
		s += k;
		n -= k;
	}
}

struct out {
	FILE *f;
	const char *mount, *rank;
};

static void family(struct out *o, const char *name, const char *type,
		   const char *help)
{
	fprintf(o->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{mount=..,rank=..[,k=v]} value; k may be NULL. */
static void sample(struct out *o, const char *name, const char *k,
		   const char *v, double value)
{
	char num[40];

	fmt_num(value, num, sizeof(num));
	fprintf(o->f, "%s{mount=\"", name);
	put_label_value(o->f, o->mount);
	fprintf(o->f, "\",rank=\"");
	put_label_value(o->f, o->rank);
	if (k) {
		fprintf(o->f, "\",%s=\"", k);
		put_label_value(o->f, v);
	}
	fprintf(o->f, "\"} %s\n", num);
}

/* v's value as a number: a number, or a boolean as 0/1; NAN otherwise. */
static double value_of(const bfs_jr *v)
{
	if (v && v->type == BFS_JR_NUMBER)
		return v->number;
	if (v && v->type == BFS_JR_BOOL)
		return v->boolean;
	return NAN;
}

/* The member at "a", "a.b" or "a.b.c" of stats. */
static const bfs_jr *at(const bfs_jr *stats, const char *path)
{
	const char *dot = strchr(path, '.');
	char head[64];

	if (!dot)
		return bfs_jr_get(stats, path);
	snprintf(head, sizeof(head), "%.*s", (int)(dot - path), path);
	return at(bfs_jr_get(stats, head), dot + 1);
}

/* A metric of one sample from one member of stats.json; left out when the
 * member is missing (the cache's, with --cache none). */
struct one {
	const char *name, *type, *from, *help;
};

static const struct one ones[] = {
	{ "batchfs_uptime_seconds", "gauge", "uptime_seconds",
	  "Seconds since the mount started." },
	{ "batchfs_batches_served_total", "counter", "batches_served",
	  "Batches read by readers (each production of a batch once)." },
	{ "batchfs_samples_served_total", "counter", "samples_served",
	  "Samples in the batches read." },
	{ "batchfs_batches_produced_total", "counter", "batches_produced",
	  "Batches the workers finished." },
	{ "batchfs_batches_pushed_total", "counter", "batches_pushed",
	  "Batches copied into the page cache ahead of their reader." },
	{ "batchfs_pushed_bytes_total", "counter", "bytes_pushed",
	  "Bytes copied into the page cache ahead of their reader." },
	{ "batchfs_passthrough", "gauge", "passthrough",
	  "1 while the kernel reads batch files directly (FUSE passthrough)." },
	{ "batchfs_passthrough_opens_total", "counter", "passthrough_opens",
	  "Opens of batch files served by passthrough." },
	{ "batchfs_passthrough_declined_total", "counter", "passthrough_declined",
	  "Passthrough opens refused because the memory budget was spent." },
	{ "batchfs_slot_files_replaced_total", "counter", "slot_files_replaced",
	  "Slot files replaced because a reader still held the old one." },
	{ "batchfs_slot_files_passed_over_total", "counter", "slot_files_passed_over",
	  "Slots passed over for reuse because a reader held their file." },
	{ "batchfs_slot_file_errors_total", "counter", "slot_file_errors",
	  "Slot files that could not be had (full tmpfs): plain memory used." },
	{ "batchfs_samples_decoded_total", "counter", "samples_decoded",
	  "Images read from shards and decoded (cache misses)." },
	{ "batchfs_decode_attempts_total", "counter", "decode_attempts",
	  "Samples read from a shard to be decoded, whether they decoded or not." },
	{ "batchfs_boxes_stopped_early_total", "counter", "boxes_stopped_early",
	  "RandomResizedCrop box decodes that stopped after the box." },
	{ "batchfs_shard_read_bytes_total", "counter", "bytes_read",
	  "Encoded bytes read from shards." },
	{ "batchfs_threads", "gauge", "threads", "Decode worker threads." },
	{ "batchfs_samples_per_second", "gauge", "samples_per_second",
	  "Production rate of all workers while busy (samples per second)." },
	{ "batchfs_worker_idle_ratio", "gauge", "worker_idle_share",
	  "Share of worker time spent idle since the mount started (0..1)." },
	{ "batchfs_prefetch_depth", "gauge", "prefetch_depth",
	  "Read-ahead depth in batches (the deepest reader's when autotuned)." },
	{ "batchfs_prefetch_max", "gauge", "prefetch_max",
	  "Autotuned read-ahead, all readers together, at most (batches): the slots, and for s3:// or https:// what half the shard cache holds." },
	{ "batchfs_memory_bytes", "gauge", "memory_bytes",
	  "Memory the budget counts now." },
	{ "batchfs_memory_budget_bytes", "gauge", "memory_budget",
	  "The memory budget (--mem)." },
	{ "batchfs_held_files", "gauge", "memory.held_file_count",
	  "Slot files readers still hold after their slot moved on." },
	{ "batchfs_slots", "gauge", "slots.total", "Batch slots." },
	{ "batchfs_slots_ready", "gauge", "slots.ready",
	  "Batch slots holding a finished batch." },
	{ "batchfs_slots_filling", "gauge", "slots.filling",
	  "Batch slots being decoded into." },
	{ "batchfs_cache_hits_total", "counter", "cache.hits",
	  "Samples served from the sample cache." },
	{ "batchfs_cache_misses_total", "counter", "cache.misses",
	  "Samples looked up in the cache and not found." },
	{ "batchfs_cache_hit_ratio", "gauge", "cache.hit_rate",
	  "Cache hits over lookups since the mount started (0..1)." },
	{ "batchfs_cache_inserts_total", "counter", "cache.inserts",
	  "Samples written to the cache." },
	{ "batchfs_cache_evictions_total", "counter", "cache.evictions",
	  "Samples evicted from the cache." },
	{ "batchfs_cache_entries", "gauge", "cache.entries",
	  "Samples in the cache." },
	{ "batchfs_cache_used_bytes", "gauge", "cache.bytes_used",
	  "Bytes the cache's entries take." },
	{ "batchfs_cache_file_bytes", "gauge", "cache.file_bytes",
	  "Size of the cache's file on disk." },
	{ "batchfs_cache_size_limit_bytes", "gauge", "cache.size_limit",
	  "The cache's size limit (--cache-size)." },
	{ "batchfs_cache_full", "gauge", "cache.full",
	  "1 once the cache is full: new samples are no longer kept." },
	{ "batchfs_cache_index_hits_total", "counter", "cache.index_hits",
	  "Shard indexes read from the cache at start." },
	{ "batchfs_cache_index_misses_total", "counter", "cache.index_misses",
	  "Shard indexes built because the cache had none." },
	/* a remote source (s3://, https://): its requests and shard cache */
	{ "batchfs_remote_requests_total", "counter", "remote.requests",
	  "Requests sent to the object store (every attempt)." },
	{ "batchfs_remote_received_bytes_total", "counter", "remote.bytes",
	  "Body bytes received from the object store." },
	{ "batchfs_remote_requests_in_flight", "gauge", "remote.in_flight",
	  "Requests under way now." },
	{ "batchfs_remote_failed_total", "counter", "remote.failed",
	  "Requests that gave up or were refused." },
	{ "batchfs_remote_link_bytes_per_second", "gauge", "remote.link_bytes_per_second",
	  "Bytes received per second over the last second or more." },
	{ "batchfs_shard_cache_hits_total", "counter", "remote.hits",
	  "Record reads served from a local copy of their shard." },
	{ "batchfs_shard_cache_misses_total", "counter", "remote.misses",
	  "Record reads whose shard was not local (read by range, or waited for)." },
	{ "batchfs_shard_cache_range_reads_total", "counter", "remote.range_reads",
	  "Records read alone, by a ranged GET." },
	{ "batchfs_shard_cache_range_read_bytes_total", "counter", "remote.range_bytes",
	  "Bytes of the records read by ranged GETs." },
	{ "batchfs_shard_cache_waits_total", "counter", "remote.waits",
	  "Reads that waited for a shard's fetch." },
	{ "batchfs_shard_cache_wait_seconds_total", "counter", "remote.wait_seconds",
	  "Seconds reads waited for shards' fetches." },
	{ "batchfs_shard_cache_fetches_total", "counter", "remote.fetched",
	  "Shards fetched whole into the shard cache." },
	{ "batchfs_shard_cache_fetched_bytes_total", "counter", "remote.bytes_fetched",
	  "Bytes of the shards fetched whole." },
	{ "batchfs_shard_cache_found_total", "counter", "remote.found",
	  "Shards found whole in the shard cache (kept earlier, or fetched by another mount)." },
	{ "batchfs_shard_cache_evictions_total", "counter", "remote.evictions",
	  "Shards this mount evicted from the shard cache." },
	{ "batchfs_shard_cache_evicted_bytes_total", "counter", "remote.evicted_bytes",
	  "Bytes of the shards this mount evicted." },
	{ "batchfs_shard_cache_fetch_failures_total", "counter", "remote.failures",
	  "Shard fetches that failed (the network past --s3-giveup, an object replaced)." },
	{ "batchfs_shard_cache_bytes", "gauge", "remote.bytes_on_disk",
	  "Bytes the shard cache's folder of this source takes on disk." },
	{ "batchfs_shard_cache_size_limit_bytes", "gauge", "remote.limit",
	  "The shard cache's limit (--shard-cache-size)." },
	{ "batchfs_shard_cache_objects", "gauge", "remote.objects",
	  "Objects the source lists." },
	{ "batchfs_shard_cache_held", "gauge", "remote.held",
	  "Shards this mount holds open in the shard cache." },
	{ "batchfs_shard_cache_fetching", "gauge", "remote.fetching",
	  "Shards being fetched now." },
};

/* A family whose samples differ by one label, each from a member. */
struct many {
	const char *name, *type, *label, *help;
	struct { const char *value, *from; } v[6];
};

static const struct many manys[] = {
	{ "batchfs_memory_part_bytes", "gauge", "part",
	  "Memory the budget counts, by what holds it.",
	  { { "batch_slots", "memory.batch_slots" },
	    { "decoder_scratch", "memory.decoder_scratch" },
	    { "held_files", "memory.held_files" } } },
	{ "batchfs_cache_dropped_total", "counter", "cause",
	  "Decoded samples not written to the cache, by cause.",
	  { { "queue", "cache.dropped_queue" }, { "full", "cache.dropped_full" } } },
	{ "batchfs_shard_indexes", "gauge", "from",
	  "Shards by where their index came from when the mount began.",
	  { { "cache", "index.from_cache" }, { "sidecar", "index.from_sidecar" },
	    { "dali", "index.from_dali" }, { "scan", "index.scanned" } } },
	{ "batchfs_cache_errors_total", "counter", "cause",
	  "Cache entries found bad or not written, by cause.",
	  { { "crc", "cache.crc_errors" }, { "damaged", "cache.damaged" },
	    { "write", "cache.write_errors" } } },
	{ "batchfs_remote_retries_total", "counter", "cause",
	  "Requests to the object store retried, by cause.",
	  { { "reset", "remote.retries.reset" }, { "timeout", "remote.retries.timeout" },
	    { "server_error", "remote.retries.server_error" },
	    { "throttled", "remote.retries.throttled" },
	    { "short_body", "remote.retries.short_body" } } },
};

static void put_many(struct out *o, const bfs_jr *stats, const struct many *m)
{
	int any = 0;

	for (size_t i = 0; i < sizeof(m->v) / sizeof(m->v[0]) && m->v[i].value; i++) {
		double x = value_of(at(stats, m->v[i].from));

		if (isnan(x))
			continue;
		if (!any++)
			family(o, m->name, m->type, m->help);
		sample(o, m->name, m->label, m->v[i].value, x);
	}
}

/* A histogram from stats.json's form (le, counts, count, sum); left out
 * when it is not there or not of that form. */
static void put_histogram(struct out *o, const bfs_jr *h, const char *name,
			  const char *help)
{
	const bfs_jr *le = bfs_jr_get(h, "le"), *counts = bfs_jr_get(h, "counts");
	char key[128], num[40];
	double cum = 0;

	if (!le || le->type != BFS_JR_ARRAY || !counts ||
	    counts->type != BFS_JR_ARRAY || counts->n != le->n + 1 ||
	    isnan(value_of(bfs_jr_get(h, "count"))) ||
	    isnan(value_of(bfs_jr_get(h, "sum"))))
		return;
	family(o, name, "histogram", help);
	snprintf(key, sizeof(key), "%s_bucket", name);
	for (size_t i = 0; i < counts->n; i++) {
		cum += bfs_jr_num(&counts->items[i], 0);
		if (i < le->n)
			fmt_num(bfs_jr_num(&le->items[i], 0), num, sizeof(num));
		else
			snprintf(num, sizeof(num), "+Inf");
		sample(o, key, "le", num, cum);
	}
	snprintf(key, sizeof(key), "%s_sum", name);
	sample(o, key, NULL, NULL, value_of(bfs_jr_get(h, "sum")));
	snprintf(key, sizeof(key), "%s_count", name);
	sample(o, key, NULL, NULL, value_of(bfs_jr_get(h, "count")));
}

/* The readers' families: one sample per reader (its pid) in each. */
static void put_readers(struct out *o, const bfs_jr *readers)
{
	static const struct one per[] = {
		{ "batchfs_reader_batches_total", "counter", "batches",
		  "New batches this reader asked for." },
		{ "batchfs_reader_waits_total", "counter", "waits",
		  "Times this reader found its batch not ready." },
		{ "batchfs_reader_wait_seconds_total", "counter", "wait_seconds",
		  "Seconds this reader waited for batches." },
		{ "batchfs_reader_batches_per_second", "gauge", "batches_per_second",
		  "Rate at which this reader moves to new batches." },
		{ "batchfs_reader_prefetch_depth", "gauge", "depth",
		  "This reader's read-ahead depth in batches." },
		{ "batchfs_reader_epoch", "gauge", "epoch",
		  "The epoch of the batch this reader moved to last." },
		{ "batchfs_reader_batch", "gauge", "batch",
		  "The batch (within its epoch) this reader moved to last." },
	};

	if (!readers || readers->type != BFS_JR_ARRAY || readers->n == 0)
		return;
	for (size_t k = 0; k < sizeof(per) / sizeof(per[0]); k++) {
		int any = 0;

		for (size_t i = 0; i < readers->n; i++) {
			const bfs_jr *r = &readers->items[i];
			double x = value_of(bfs_jr_get(r, per[k].from));
			char pid[32];

			if (isnan(x))
				continue;
			if (!any++)
				family(o, per[k].name, per[k].type, per[k].help);
			fmt_num(bfs_jr_num(bfs_jr_get(r, "pid"), 0), pid, sizeof(pid));
			sample(o, per[k].name, "pid", pid, x);
		}
	}
}

int bfs_metrics_render(const char *mountpoint, const char *rank,
		       const bfs_jr *stats, char **out, size_t *len)
{
	struct out o = { NULL, mountpoint, rank };
	const bfs_jr *errs, *hist;
	char *buf = NULL;
	size_t n = 0;

	*out = NULL;
	*len = 0;
	if (!stats || stats->type != BFS_JR_OBJECT ||
	    isnan(value_of(bfs_jr_get(stats, "uptime_seconds"))))
		return -EINVAL;
	if (!(o.f = open_memstream(&buf, &n)))
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(ones) / sizeof(ones[0]); i++) {
		double x = value_of(at(stats, ones[i].from));

		if (isnan(x))
			continue;
		family(&o, ones[i].name, ones[i].type, ones[i].help);
		sample(&o, ones[i].name, NULL, NULL, x);
	}
	for (size_t i = 0; i < sizeof(manys) / sizeof(manys[0]); i++)
		put_many(&o, stats, &manys[i]);
	if (!isnan(value_of(bfs_jr_get(stats, "errors_total")))) {
		/* every index error is listed; sample errors past the
		 * list's first ones are only counted */
		double total = value_of(bfs_jr_get(stats, "errors_total"));
		double index = 0;

		errs = bfs_jr_get(stats, "errors");
		for (size_t i = 0; errs && errs->type == BFS_JR_ARRAY && i < errs->n; i++) {
			const char *kind = bfs_jr_str(bfs_jr_get(&errs->items[i], "kind"), "");

			index += !strcmp(kind, "index");
		}
		family(&o, "batchfs_errors_total", "counter",
		       "Bad shards (kind index: not indexed) and bad samples (kind sample: not decoded), each once.");
		sample(&o, "batchfs_errors_total", "kind", "index", index);
		sample(&o, "batchfs_errors_total", "kind", "sample",
		       total > index ? total - index : 0);
	}
	hist = bfs_jr_get(stats, "histograms");
	put_histogram(&o, bfs_jr_get(hist, "reader_wait_seconds"),
		      "batchfs_batch_wait_seconds",
		      "Each wait of a reader for a batch that was not ready yet.");
	put_histogram(&o, bfs_jr_get(hist, "decode_seconds"),
		      "batchfs_decode_seconds",
		      "Time to read, decode and resize one image that was not in the cache.");
	put_readers(&o, bfs_jr_get(stats, "readers"));
	if (ferror(o.f)) {
		fclose(o.f);
		free(buf);
		return -ENOMEM;
	}
	if (fclose(o.f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	*len = n;
	return 0;
}

void bfs_metrics_rank_label(const bfs_jr *dataset, char *buf, size_t cap)
{
	const bfs_jr *ranks = bfs_jr_get(dataset, "ranks");

	if (ranks && ranks->type == BFS_JR_ARRAY && ranks->n > 1)
		snprintf(buf, cap, "%.0f-%.0f", bfs_jr_num(&ranks->items[0], 0),
			 bfs_jr_num(&ranks->items[ranks->n - 1], 0));
	else if (ranks && ranks->type == BFS_JR_ARRAY && ranks->n == 1)
		snprintf(buf, cap, "%.0f", bfs_jr_num(&ranks->items[0], 0));
	else
		snprintf(buf, cap, "%.0f", bfs_jr_num(bfs_jr_get(dataset, "rank"), 0));
}

/* ---- batchfs metrics ---------------------------------------------------- */

static const char usage_text[] =
	"usage: batchfs metrics MOUNTPOINT\n"
	"\n"
	"Print the mount's counters in the Prometheus text format, from one\n"
	"read of MOUNTPOINT/stats.json (the same values).  A mount can also\n"
	"write them to a file (--metrics-file) or serve them over HTTP\n"
	"(--metrics-port).\n";

int bfs_metrics_main(int argc, char **argv)
{
	const char *mnt = NULL;
	char abs[PATH_MAX];
	bfs_jr *ds = NULL, *st = NULL;
	char why[512], rank[64], *text = NULL;
	size_t len;
	int rc = 1, err;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (argv[i][0] == '-' || mnt) {
			fprintf(stderr, "batchfs metrics: %s '%s'\n%s",
				argv[i][0] == '-' ? "unknown option" : "one mount point, not also",
				argv[i], usage_text);
			return 2;
		}
		mnt = argv[i];
	}
	if (!mnt) {
		fprintf(stderr, "batchfs metrics: no mount point given\n%s", usage_text);
		return 2;
	}
	if (bfs_jr_read_file(mnt, "dataset.json", &ds, why, sizeof(why)) ||
	    bfs_jr_read_file(mnt, "stats.json", &st, why, sizeof(why))) {
		fprintf(stderr, "batchfs metrics: %s (is %s a batchfs mount?)\n",
			why, mnt);
		goto out;
	}
	bfs_metrics_rank_label(ds, rank, sizeof(rank));
	/* the label the mount's own --metrics-file and port give it */
	if (realpath(mnt, abs))
		mnt = abs;
	if ((err = bfs_metrics_render(mnt, rank, st, &text, &len))) {
		fprintf(stderr, "batchfs metrics: %s/stats.json: %s\n", mnt,
			err == -EINVAL ? "not a batchfs stats.json" : strerror(-err));
		goto out;
	}
	if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
		fprintf(stderr, "batchfs metrics: writing: %s\n", strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(text);
	bfs_jr_free(ds);
	bfs_jr_free(st);
	return rc;
}
