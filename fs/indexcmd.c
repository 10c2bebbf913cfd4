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
#include "engine/storage/storage.h"
#include "engine/version.h"
#include "fs/indexes.h"
#include "fs/optparse.h"

static const char usage[] =
	"usage: batchfs index SOURCE [options]\n"
	"\n"
	"Writes the sidecar index SOURCE/.batchfs-index: each shard's name, size,\n"
	"identity and index, so that a mount on any node reads it instead of\n"
	"scanning the shards (docs/SIDECAR_INDEX.md).  SOURCE is a directory of\n"
	"TFRecord or tar shards, or s3://BUCKET/PREFIX; http(s) sources are\n"
	"read-only.  Entries of an earlier sidecar that still fit their shards\n"
	"are kept, so a rerun scans only what changed.  A mount uses an entry\n"
	"only while the shard is the one it was written for (its size and ETag,\n"
	"or for a local file its size, mtime, inode and ctime).\n"
	"\n"
	"options (the index depends on them: give what the mounts give):\n"
	"  --format F           auto, tfrecord or tar (auto)\n"
	"  --label-key KEY      as batchfs mount takes it, or none\n"
	"  --max-inflate-ratio N  as batchfs mount takes it (100; 0: no limit)\n"
	"  -q, --quiet          print nothing but errors\n"
	"  -h, --help           this help\n";

struct opts {
	const char *source;
	bfs_source_opts so;
	int quiet;
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

/* Write data whole to dir/BFS_SIDECAR_NAME: a temporary name in dir,
 * synced, renamed over it, the directory synced.  0 or -errno with why. */
static int write_local(const char *dir, const void *data, size_t len,
		       char *why, size_t cap)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	size_t done = 0;
	int fd, dfd, err = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, BFS_SIDECAR_NAME);
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp-%ld", dir, BFS_SIDECAR_NAME,
		 (long)getpid());
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
	enum { O_FORMAT = 256, O_LKEY, O_MAX_INFLATE };
	static const struct option lo[] = {
		{ "format", required_argument, 0, O_FORMAT },
		{ "label-key", required_argument, 0, O_LKEY },
		{ "max-inflate-ratio", required_argument, 0, O_MAX_INFLATE },
		{ "quiet", no_argument, 0, 'q' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
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
	}
	if (argc - optind != 1) {
		fprintf(stderr, "batchfs index: %s\n\n%s",
			argc - optind < 1 ? "needs SOURCE" : "takes one SOURCE", usage);
		return 2;
	}
	o->source = argv[optind];
	return 0;
}

int bfs_indexcmd_main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct progress pr = { 0 };
	char errmsg[BFS_ERRMSG_MAX] = "", why[PATH_MAX + 256] = "", dir[PATH_MAX];
	bfs_sidecar_writer *w = NULL;
	bfs_sidecar *old = NULL;
	bfs_indexes *x = NULL;
	bfs_indexes_opts xo = { 0 };
	bfs_indexes_stats xs;
	bfs_source *src = NULL;
	void *old_data = NULL, *out = NULL;
	size_t old_len = 0, out_len = 0;
	struct timespec wall;
	int r, err, status = 1;

	if ((r = parse(argc, argv, &o)))
		return r == 1 ? 0 : r;
	if (bfs_storage_is_url(o.source)) {
		if (strncmp(o.source, "s3://", 5)) {
			fprintf(stderr, "batchfs index: %s is read-only over http(s): run "
				"batchfs index where the shards can be written (their "
				"s3:// prefix, or the directory that serves them) and "
				"publish .batchfs-index beside them\n", o.source);
			return 1;
		}
		fprintf(stderr, "batchfs index: %s: s3:// sources are not indexed by "
			"this build yet\n", o.source);
		return 1;
	}
	if (!realpath(o.source, dir)) {
		fprintf(stderr, "batchfs index: %s: %s\n", o.source, strerror(errno));
		return 1;
	}
	/* the earlier sidecar, if it fits: its entries spare their scans */
	err = bfs_indexes_read_local(dir, &old_data, &old_len, why, sizeof(why));
	if (err && err != -ENOENT && !o.quiet)
		printf("the earlier sidecar is not used (%s): every shard is scanned\n", why);
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
			printf("the earlier sidecar is not used (%s): every shard is scanned\n",
			       errmsg[0] ? errmsg : bfs_strerror(err));
	}
	if ((err = bfs_sidecar_writer_create(&w)))
		goto oom;
	xo.sidecar = old;
	xo.capture = w;
	if ((err = bfs_indexes_create(&xo, &x)))
		goto oom;
	o.so.dir = dir;
	o.so.skip_dali = 1;
	bfs_indexes_wire(x, &o.so);
	pr.tty = !o.quiet && isatty(STDERR_FILENO);
	o.so.progress = on_progress;
	o.so.progress_ctx = &pr;
	if ((err = bfs_source_open(&o.so, &src, errmsg))) {
		fprintf(stderr, "batchfs index: cannot index %s: %s\n", dir,
			errmsg[0] ? errmsg : bfs_strerror(err));
		goto out;
	}
	if (bfs_source_format(src) == BFS_FORMAT_FOLDER) {
		fprintf(stderr, "batchfs index: %s is a folder of images: it has no shard "
			"indexes (batchfs index is for TFRecord and tar shards)\n", dir);
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
			.label_key = o.so.label_key, .source = dir,
			.writer = "batchfs " BFS_VERSION,
		};

		clock_gettime(CLOCK_REALTIME, &wall);
		info.created_ns = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec;
		if ((err = bfs_sidecar_writer_finish(w, &info, &out, &out_len)))
			goto oom;
	}
	if (write_local(dir, out, out_len, why, sizeof(why))) {
		fprintf(stderr, "batchfs index: %s\n", why);
		goto out;
	}
	if (!o.quiet) {
		size_t n = bfs_source_nshards(src), kept = xs.from_sidecar;

		printf("wrote %s/%s: %zu of %zu shards (%zu kept from the earlier "
		       "sidecar, %zu scanned), %llu samples, %.1f kB\n", dir,
		       BFS_SIDECAR_NAME, bfs_sidecar_writer_count(w), n, kept,
		       bfs_sidecar_writer_count(w) - kept,
		       (unsigned long long)bfs_source_count(src), out_len / 1e3);
		if (bfs_sidecar_writer_count(w) < n)
			printf("%zu shard(s) could not be read and have no entry: a mount "
			       "scans them\n", n - bfs_sidecar_writer_count(w));
		if (bfs_source_nscan_errors(src))
			printf("%zu shard(s) have index errors, kept with their entries "
			       "(a mount lists them in stats.json); the first: %s: %s\n",
			       bfs_source_nscan_errors(src), bfs_source_scan_error_shard(src, 0),
			       bfs_source_scan_error(src, 0));
	}
	status = 0;
	goto out;
oom:
	fprintf(stderr, "batchfs index: %s: %s\n", dir, bfs_strerror(err));
out:
	bfs_source_close(src);
	bfs_indexes_destroy(x);
	bfs_sidecar_writer_destroy(w);
	bfs_sidecar_close(old);
	free(old_data);
	free(out);
	return status;
}
