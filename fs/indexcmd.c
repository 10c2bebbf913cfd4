/*
 * indexcmd.c - `batchfs index SOURCE` (see indexcmd.h): the source opened
 * as a mount opens it, with the earlier sidecar in front of the scan and
 * every index it ends with captured, then the new sidecar written whole.
 */
#include "fs/indexcmd.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/formats/sidecar.h"
#include "engine/source.h"
#include "engine/storage/s3.h"
#include "engine/storage/shardcache.h"
#include "engine/storage/storage.h"
#include "engine/version.h"
#include "fs/host.h"
#include "fs/indexes.h"
#include "fs/optparse.h"
#include "fs/wids.h"

static const char usage[] =
	"usage: batchfs index SOURCE [options]\n"
	"\n"
	"Writes the sidecar index SOURCE/.batchfs-index: each shard's name, size,\n"
	"identity and index, so that a mount on any node reads it instead of\n"
	"scanning the shards (docs/SIDECAR_INDEX.md).  SOURCE is a directory of\n"
	"TFRecord or tar shards, s3://BUCKET/PREFIX (written with one PUT), or\n"
	"an http(s) brace pattern or wids index (read-only: give --out FILE and\n"
	"publish FILE as .batchfs-index in the shards' folder).  A remote\n"
	"source's shards are streamed through a shard cache as a mount's are,\n"
	"and only those that neither the earlier sidecar nor --cache indexes.\n"
	"Entries of an earlier sidecar that still fit their shards are kept, so\n"
	"a rerun reads only what changed.  A mount uses an entry only while the\n"
	"shard is the one it was written for (its size and ETag, or for a local\n"
	"file its size, mtime, inode and ctime).\n"
	"\n"
	"options (the index depends on them: give what the mounts give):\n"
	"  --format F           auto, tfrecord or tar (auto)\n"
	"  --label-key KEY      as batchfs mount takes it, or none\n"
	"  --max-inflate-ratio N  as batchfs mount takes it (100; 0: no limit)\n"
	"where it goes, and what it may reuse:\n"
	"  --out FILE           write the sidecar to FILE instead of beside the\n"
	"                       shards (required for http(s) sources)\n"
	"  --cache DIR          a sample cache whose stored shard indexes (a\n"
	"                       mount's on this node) are used before a scan\n"
	"remote sources (as batchfs mount takes them):\n"
	"  --shard-cache DIR    (default $XDG_CACHE_HOME/batchfs-shards)\n"
	"  --shard-cache-size N, --s3-connections N, --s3-timeout S,\n"
	"  --s3-giveup S, --s3-anonymous, --s3-addressing M, --s3-endpoint URL,\n"
	"  --s3-region R, --no-verify-tls\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           this help\n";

struct opts {
	const char *source;
	bfs_source_opts so;
	int quiet;
	const char *out;           /* --out FILE, or NULL */
	const char *cache;         /* --cache DIR, or NULL */
	const char *shard_cache;   /* --shard-cache DIR, or NULL: the default */
	uint64_t shard_cache_size; /* 0: the default */
	bfs_storage_opts storage;
};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Progress on a terminal, like a mount's. */
struct progress {
	int tty;
	double last;
};

static void on_progress(void *ctx, const bfs_source_progress *p)
{
	struct progress *pr = ctx;
	double now = now_s();

	if (!pr->tty || (!p->finished && now - pr->last < 0.1))
		return;
	fprintf(stderr, "\rbatchfs index: %s %zu/%zu shards, %llu records%s",
		p->finished ? "indexed" : "indexing", p->done, p->total,
		(unsigned long long)p->records, p->finished ? "\n" : "");
	pr->last = now;
}

/* Write data whole to path: a temporary name in its directory, synced,
 * renamed over it, the directory synced.  0 or -errno with why. */
static int write_file(const char *path, const void *data, size_t len,
		      char *why, size_t cap)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t done = 0;
	int fd, dfd, err = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid()) >=
	    (int)sizeof(tmp)) {
		snprintf(why, cap, "cannot write %s: %s", path, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		err = -errno;
		snprintf(why, cap, "cannot write %s: %s", path, strerror(errno));
		return err;
	}
	while (done < len) {
		ssize_t w = write(fd, (const char *)data + done, len - done);

		if (w < 0) {
			err = -errno;
			break;
		}
		done += (size_t)w;
	}
	if (!err && fsync(fd) != 0)
		err = -errno;
	if (close(fd) != 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) != 0)
		err = -errno;
	if (err) {
		snprintf(why, cap, "cannot write %s: %s", path, strerror(-err));
		unlink(tmp);
		return err;
	}
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(dfd); /* the rename itself on disk */
		close(dfd);
	}
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	enum { O_FORMAT = 256, O_LKEY, O_MAX_INFLATE, O_OUT, O_CACHE, O_SHARD_CACHE,
	       O_SHARD_CACHE_SIZE, O_S3_CONN, O_S3_TIMEOUT, O_S3_GIVEUP, O_S3_ANON,
	       O_S3_ADDR, O_S3_ENDPOINT, O_S3_REGION, O_INSECURE };
	static const struct option lo[] = {
		{ "format", required_argument, 0, O_FORMAT },
		{ "label-key", required_argument, 0, O_LKEY },
		{ "max-inflate-ratio", required_argument, 0, O_MAX_INFLATE },
		{ "out", required_argument, 0, O_OUT },
		{ "cache", required_argument, 0, O_CACHE },
		{ "shard-cache", required_argument, 0, O_SHARD_CACHE },
		{ "shard-cache-size", required_argument, 0, O_SHARD_CACHE_SIZE },
		{ "s3-connections", required_argument, 0, O_S3_CONN },
		{ "s3-timeout", required_argument, 0, O_S3_TIMEOUT },
		{ "s3-giveup", required_argument, 0, O_S3_GIVEUP },
		{ "s3-anonymous", no_argument, 0, O_S3_ANON },
		{ "s3-addressing", required_argument, 0, O_S3_ADDR },
		{ "s3-endpoint", required_argument, 0, O_S3_ENDPOINT },
		{ "s3-region", required_argument, 0, O_S3_REGION },
		{ "no-verify-tls", no_argument, 0, O_INSECURE },
		{ "quiet", no_argument, 0, 'q' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	const char *what = NULL, *want = NULL;
	unsigned u;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":qh", lo, NULL)) != -1) {
		switch (c) {
		case O_FORMAT:
			if (!strcmp(optarg, "auto"))
				o->so.format = BFS_FORMAT_AUTO;
			else if (!strcmp(optarg, "tfrecord"))
				o->so.format = BFS_FORMAT_TFRECORD;
			else if (!strcmp(optarg, "tar"))
				o->so.format = BFS_FORMAT_TAR;
			else {
				fprintf(stderr, "batchfs index: bad value '%s' for --format "
					"(auto, tfrecord or tar)\n", optarg);
				return 2;
			}
			break;
		case O_LKEY:
			o->so.label_key = optarg;
			break;
		case O_MAX_INFLATE: {
			unsigned r;

			if (bfs_opt_uint(optarg, 0, 1000000, &r)) {
				fprintf(stderr, "batchfs index: bad value '%s' for "
					"--max-inflate-ratio (a ratio such as 100, or 0 for "
					"no limit)\n", optarg);
				return 2;
			}
			o->so.max_inflate_ratio = r ? r : BFS_INFLATE_RATIO_NONE;
			break;
		}
		case O_OUT:
			o->out = optarg;
			break;
		case O_CACHE:
			o->cache = optarg;
			break;
		case O_SHARD_CACHE:
			o->shard_cache = optarg;
			break;
		case O_SHARD_CACHE_SIZE:
			if (bfs_opt_size(optarg, 1u << 20, &o->shard_cache_size)) {
				what = "--shard-cache-size";
				want = "a size of at least 1M, such as 200G";
			}
			break;
		case O_S3_CONN:
			if (bfs_opt_uint(optarg, 1, 256, &o->storage.http.connections)) {
				what = "--s3-connections";
				want = "1 to 256";
			}
			break;
		case O_S3_TIMEOUT:
			if (bfs_opt_uint(optarg, 1, 3600, &u)) {
				what = "--s3-timeout";
				want = "seconds, 1 to 3600";
			}
			o->storage.http.stall_ms = u * 1000;
			break;
		case O_S3_GIVEUP:
			if (bfs_opt_uint(optarg, 1, 86400, &u)) {
				what = "--s3-giveup";
				want = "seconds, 1 to 86400";
			}
			o->storage.http.giveup_ms = u * 1000;
			break;
		case O_S3_ANON:
			o->storage.anonymous = 1;
			break;
		case O_S3_ADDR:
			if (!strcmp(optarg, "path"))
				o->storage.addressing = BFS_S3_PATH;
			else if (!strcmp(optarg, "virtual"))
				o->storage.addressing = BFS_S3_VIRTUAL;
			else if (!strcmp(optarg, "auto"))
				o->storage.addressing = BFS_S3_AUTO;
			else {
				what = "--s3-addressing";
				want = "path, virtual or auto";
			}
			break;
		case O_S3_ENDPOINT:
			o->storage.endpoint = optarg;
			break;
		case O_S3_REGION:
			o->storage.region = optarg;
			break;
		case O_INSECURE:
			o->storage.http.insecure = 1;
			break;
		case 'q':
			o->quiet = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 1;
		case ':':
			fprintf(stderr, "batchfs index: %s needs a value\n\n%s",
				argv[optind - 1], usage);
			return 2;
		default: {
			char hint[96];

			fprintf(stderr, "batchfs index: unknown option '%s'%s\n\n%s",
				argv[optind - 1],
				bfs_opt_hint(argv[optind - 1], lo, hint, sizeof(hint)), usage);
		}
			return 2;
		}
		if (what) {
			fprintf(stderr, "batchfs index: bad value '%s' for %s (%s)\n",
				optarg, what, want);
			return 2;
		}
	}
	if (argc - optind != 1) {
		fprintf(stderr, "batchfs index: %s\n\n%s",
			argc - optind < 1 ? "needs SOURCE" : "takes one SOURCE", usage);
		return 2;
	}
	o->source = argv[optind];
	return 0;
}

/* A remote source, as a mount opens it: its storage (over a wids index's
 * shards when SOURCE is one) and a shard cache over it.  0, or 1 with the
 * error said. */
static int open_remote(struct opts *o, bfs_storage **st, bfs_shardcache **sc,
		       bfs_wids **wids)
{
	char errmsg[BFS_ERRMSG_MAX] = "", dir[PATH_MAX];
	bfs_shardcache_opts co = { 0 };
	bfs_storage_opts so = o->storage;
	unsigned fetchers = so.http.connections ? so.http.connections : 8;
	const char **urls = NULL;
	int64_t *sizes = NULL;
	int err;

	so.http.connections = fetchers + 1; /* the fetchers, and HEADs */
	if (bfs_wids_is_index_url(o->source)) {
		if ((err = bfs_wids_fetch(o->source, &so, wids, errmsg)))
			goto fail;
		urls = calloc((*wids)->n, sizeof(*urls));
		sizes = calloc((*wids)->n, sizeof(*sizes));
		if (!urls || !sizes) {
			err = -ENOMEM;
			goto fail;
		}
		for (size_t i = 0; i < (*wids)->n; i++) {
			urls[i] = (*wids)->v[i].url;
			sizes[i] = (*wids)->v[i].filesize;
		}
		so.urls = urls;
		so.sizes = sizes;
		so.nurls = (*wids)->n;
	}
	if ((err = bfs_storage_open(o->source, &so, st, errmsg)))
		goto fail;
	if (o->shard_cache)
		snprintf(dir, sizeof(dir), "%s", o->shard_cache);
	else if (bfs_host_default_shard_cache(dir, sizeof(dir))) {
		fprintf(stderr, "batchfs index: no shard cache directory: set "
			"XDG_CACHE_HOME or HOME, or give --shard-cache DIR\n");
		free(urls);
		free(sizes);
		return 1;
	}
	co.dir = dir;
	co.max_bytes = o->shard_cache_size;
	co.fetchers = fetchers;
	err = bfs_shardcache_open(*st, &co, sc, errmsg);
fail:
	free(urls);
	free(sizes);
	if (!err)
		return 0;
	fprintf(stderr, "batchfs index: %s: %s%s\n", o->source,
		errmsg[0] ? errmsg : bfs_strerror(err),
		err == -EACCES ? " (check the credentials, the endpoint's region and "
				 "the clock: a signature is refused when they are wrong)" : "");
	return 1;
}

int bfs_indexcmd_main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct progress pr = { 0 };
	char errmsg[BFS_ERRMSG_MAX] = "", why[PATH_MAX + 256] = "", dir[PATH_MAX];
	char where[PATH_MAX + 64];
	bfs_sidecar_writer *w = NULL;
	bfs_sidecar *old = NULL;
	bfs_indexes *x = NULL;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats xs;
	bfs_source *src = NULL;
	bfs_storage *st = NULL;
	bfs_shardcache *sc = NULL;
	bfs_wids *wids = NULL;
	bfs_cache *cache = NULL;
	void *old_data = NULL, *out = NULL;
	size_t old_len = 0, out_len = 0;
	struct timespec wall;
	int r, err, status = 1, remote;

	if ((r = parse(argc, argv, &o)))
		return r == 1 ? 0 : r;
	remote = bfs_storage_is_url(o.source);
	if (remote && strncmp(o.source, "s3://", 5) && !o.out) {
		fprintf(stderr, "batchfs index: %s is read-only over http(s): give --out "
			"FILE, then publish FILE as %s in the folder of the shards "
			"(where a mount looks for it: %s)\n", o.source, BFS_SIDECAR_NAME,
			bfs_wids_is_index_url(o.source) ? "the folder the index's shards share"
			: "the folder of the pattern's first brace");
		return 1;
	}
	if (remote) {
		if (open_remote(&o, &st, &sc, &wids))
			goto out;
		snprintf(dir, sizeof(dir), "%s", bfs_storage_root(st));
		snprintf(where, sizeof(where), "%s%s", dir, BFS_SIDECAR_NAME);
	} else {
		if (!realpath(o.source, dir)) {
			fprintf(stderr, "batchfs index: %s: %s\n", o.source, strerror(errno));
			return 1;
		}
		snprintf(where, sizeof(where), "%s/%s", dir, BFS_SIDECAR_NAME);
	}
	if (o.cache) {
		bfs_cache_opts co = { .dir = o.cache, .admin = 1 };

		if ((err = bfs_cache_open(&co, &cache, errmsg))) {
			fprintf(stderr, "batchfs index: --cache %s: %s\n", o.cache,
				errmsg[0] ? errmsg : bfs_strerror(err));
			goto out;
		}
	}
	/* the earlier sidecar, if it fits: its entries spare their scans */
	err = remote ? bfs_indexes_read_remote(sc, &old_data, &old_len, why, sizeof(why))
		     : bfs_indexes_read_local(dir, &old_data, &old_len, why, sizeof(why));
	if (err && err != -ENOENT && !o.quiet)
		printf("the earlier sidecar is not used (%s): every shard is indexed anew\n", why);
	if (!err) {
		err = bfs_sidecar_open(old_data, old_len, &old, errmsg);
		if (!err && bfs_indexes_sidecar_mismatch(old, o.so.format, o.so.label_key,
							 1, why, sizeof(why))) {
			bfs_sidecar_close(old);
			old = NULL;
			err = -EINVAL;
			snprintf(errmsg, sizeof(errmsg), "%s", why);
		}
		if (err && !o.quiet)
			printf("the earlier sidecar is not used (%s): every shard is indexed anew\n",
			       errmsg[0] ? errmsg : bfs_strerror(err));
	}
	if ((err = bfs_sidecar_writer_create(&w)))
		goto oom;
	xo.cache = cache;
	xo.sidecar = old;
	xo.capture = w;
	if (remote) {
		xo.identity = bfs_indexes_remote_identity;
		xo.identity_ctx = sc;
	}
	if ((err = bfs_indexes_create(&xo, &x)))
		goto oom;
	o.so.dir = dir;
	o.so.shards = sc;
	o.so.skip_dali = 1;
	bfs_indexes_wire(x, &o.so);
	pr.tty = !o.quiet && isatty(STDERR_FILENO);
	o.so.progress = on_progress;
	o.so.progress_ctx = &pr;
	if ((err = bfs_source_open(&o.so, &src, errmsg))) {
		fprintf(stderr, "batchfs index: cannot index %s: %s\n", remote ? o.source : dir,
			errmsg[0] ? errmsg : bfs_strerror(err));
		goto out;
	}
	if (bfs_source_format(src) == BFS_FORMAT_FOLDER) {
		fprintf(stderr, "batchfs index: %s is a folder of images: it has no shard "
			"indexes (batchfs index is for TFRecord and tar shards)\n",
			remote ? o.source : dir);
		goto out;
	}
	bfs_indexes_get_stats(x, &xs);
	if (xs.capture_failed) {
		err = -ENOMEM;
		goto oom;
	}
	{
		bfs_sidecar_info info = {
			.format = bfs_source_format(src) == BFS_FORMAT_TAR
				? BFS_SIDECAR_TAR : BFS_SIDECAR_TFRECORD,
			.label_key = o.so.label_key, .source = remote ? o.source : dir,
			.writer = "batchfs " BFS_VERSION,
		};

		clock_gettime(CLOCK_REALTIME, &wall);
		info.created_ns = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec;
		if ((err = bfs_sidecar_writer_finish(w, &info, &out, &out_len)))
			goto oom;
	}
	if (o.out) {
		snprintf(where, sizeof(where), "%s", o.out);
		if (write_file(o.out, out, out_len, why, sizeof(why))) {
			fprintf(stderr, "batchfs index: %s\n", why);
			goto out;
		}
	} else if (remote) {
		if ((err = bfs_storage_put(st, BFS_SIDECAR_NAME, out, out_len, errmsg))) {
			fprintf(stderr, "batchfs index: cannot write %s: %s%s\n", where,
				errmsg[0] ? errmsg : bfs_strerror(err),
				err == -EACCES ? " (the credentials may read but not write "
				"this bucket: run it where they may, or give --out FILE)" : "");
			goto out;
		}
	} else if (write_file(where, out, out_len, why, sizeof(why))) {
		fprintf(stderr, "batchfs index: %s\n", why);
		goto out;
	}
	if (!o.quiet) {
		size_t n = bfs_source_nshards(src), kept = xs.from_sidecar;
		size_t count = bfs_sidecar_writer_count(w);

		char cached[64] = "";

		if (xs.from_store)
			snprintf(cached, sizeof(cached), "%llu from the cache, ",
				 (unsigned long long)xs.from_store);
		printf("wrote %s: %zu of %zu shards (%zu kept from the earlier "
		       "sidecar, %s%llu scanned), %llu samples, %.1f kB\n",
		       where, count, n, kept, cached,
		       (unsigned long long)(count - kept - xs.from_store),
		       (unsigned long long)bfs_source_count(src), out_len / 1e3);
		if (sc) {
			bfs_shardcache_stats ss;

			bfs_shardcache_get_stats(sc, &ss);
			printf("fetched %llu shards to scan them (%.1f MB), %llu found whole "
			       "in the shard cache %s\n", (unsigned long long)ss.fetched,
			       ss.bytes_fetched / 1e6, (unsigned long long)ss.found,
			       bfs_shardcache_path(sc));
		}
		if (xs.unproven)
			printf("%llu shard(s) have no strong ETag in the listing and no entry: "
			       "a mount cannot prove an entry fits them, and scans them\n",
			       (unsigned long long)xs.unproven);
		else if (count < n)
			printf("%zu shard(s) could not be read and have no entry: a mount "
			       "scans them\n", n - count);
		if (bfs_source_nscan_errors(src))
			printf("%zu shard(s) have index errors, kept with their entries "
			       "(a mount lists them in stats.json); the first: %s: %s\n",
			       bfs_source_nscan_errors(src), bfs_source_scan_error_shard(src, 0),
			       bfs_source_scan_error(src, 0));
		if (wids) {
			const char **names = calloc(n ? n : 1, sizeof(*names));
			uint64_t *counts = calloc(n ? n : 1, sizeof(*counts));
			char note[512];

			if (names && counts) {
				for (size_t i = 0; i < n; i++) {
					names[i] = bfs_source_shard_name(src, i);
					counts[i] = bfs_source_shard_samples(src, i);
				}
				if (bfs_wids_check(wids, names, counts, n, note, sizeof(note)))
					printf("the wids index disagrees with the shards: %s\n", note);
			}
			free(names);
			free(counts);
		}
	}
	status = 0;
	goto out;
oom:
	fprintf(stderr, "batchfs index: %s: %s\n", remote ? o.source : dir, bfs_strerror(err));
out:
	bfs_source_close(src);
	bfs_indexes_destroy(x);
	bfs_sidecar_writer_destroy(w);
	bfs_sidecar_close(old);
	bfs_cache_close(cache);
	bfs_shardcache_close(sc);
	bfs_storage_close(st);
	bfs_wids_free(wids);
	free(old_data);
	free(out);
	return status;
}
