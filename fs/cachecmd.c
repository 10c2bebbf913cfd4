/*
 * cachecmd.c - `batchfs cache stats|verify|clear` (see cachecmd.h): a thin
 * command line over the cache's admin functions.
 */
#include "fs/cachecmd.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/cache.h"
#include "fs/optparse.h"

static const char usage_top[] =
	"usage: batchfs cache COMMAND [DIR] [options]\n"
	"\n"
	"Look at and manage the preprocessed-sample cache that mounts with\n"
	"--cache share.  DIR defaults to $XDG_CACHE_HOME/batchfs, else\n"
	"~/.cache/batchfs.  Safe next to running mounts.\n"
	"\n"
	"commands:\n"
	"  stats [DIR]    size, limit, entries, hit rate and fingerprints\n"
	"                 (--source SRC: one source's entries)\n"
	"  verify [DIR]   check the CRC32C of every entry\n"
	"  clear [DIR]    remove every entry (or one fingerprint's, or one\n"
	"                 source's: --source SRC)\n"
	"\n"
	"Run 'batchfs cache COMMAND --help' for a command's options.\n";

static const char usage_stats[] =
	"usage: batchfs cache stats [DIR] [--fingerprint FP] [--source SRC]\n"
	"\n"
	"Shows data.mdb's size on disk and the size limit, the bytes in use,\n"
	"the number of cached samples and shard indexes, the hit rate of every\n"
	"mount since the cache was created or cleared, and each settings\n"
	"fingerprint present with its entries, bytes and last use.\n"
	"\n"
	"options:\n"
	"  --fingerprint FP   show only this fingerprint (16 hex digits)\n"
	"  --source SRC       also the entries of one source (a shard directory):\n"
	"                     its shard indexes and the samples of those shards\n"
	"  -h, --help         this help\n";

static const char usage_verify[] =
	"usage: batchfs cache verify [DIR] [--fingerprint FP] [--delete]\n"
	"\n"
	"Checks the structure of data.mdb (every B-tree page LMDB would\n"
	"follow), then reads every cached sample, shard index and counter and\n"
	"checks its CRC32C, header and key; lists each bad entry (fingerprint,\n"
	"shard hash, record offset).  Mounts already drop a bad entry when they\n"
	"read it and decode the sample again, and move a damaged data.mdb aside\n"
	"when they open it, so this is a health check.  Exit status 1 if the\n"
	"file is damaged or any entry is bad.\n"
	"\n"
	"options:\n"
	"  --fingerprint FP   check only this fingerprint's entries\n"
	"  --delete           remove the bad entries\n"
	"  -h, --help         this help\n";

static const char usage_clear[] =
	"usage: batchfs cache clear [DIR] [--fingerprint FP | --source SRC]\n"
	"\n"
	"Removes every cached sample, shard index and counter.  When no mount\n"
	"uses the cache its files are deleted and the space goes back to the\n"
	"file system; otherwise the entries are deleted and the space is\n"
	"reused by later inserts (data.mdb keeps its size).  Also removes a\n"
	"cache that LMDB cannot open.\n"
	"\n"
	"options:\n"
	"  --fingerprint FP   remove only the entries of these settings\n"
	"  --source SRC       remove only one source's entries (a shard\n"
	"                     directory): its shard indexes and the samples of\n"
	"                     those shards, of every fingerprint (a folder of\n"
	"                     images keeps its samples: clear by fingerprint)\n"
	"  -h, --help         this help\n";

static void human(uint64_t v, char *out, size_t cap)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, cap, "%llu B", (unsigned long long)v);
	else
		snprintf(out, cap, "%.1f %s", d, unit[u]);
}

static void when(int64_t ns, char *out, size_t cap)
{
	time_t t = (time_t)(ns / 1000000000ll);
	struct tm tm;

	if (ns <= 0 || !localtime_r(&t, &tm) ||
	    !strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(out, cap, "never");
}

static int open_admin(const char *cmd, const char *dir, bfs_cache **c)
{
	bfs_cache_opts o = { 0 };
	char msg[BFS_ERRMSG_MAX] = "";
	int err;

	o.dir = dir;
	o.admin = 1;
	err = bfs_cache_open(&o, c, msg);
	if (err) {
		fprintf(stderr, "batchfs cache %s: %s\n", cmd,
			msg[0] ? msg : bfs_strerror(err));
		if (err == BFS_E_CORRUPT)
			fprintf(stderr, "batchfs cache %s: 'batchfs cache clear %s' removes it\n",
				cmd, dir);
	}
	return err;
}

/* A writer that does not let go of the cache (a stopped mount): say who,
 * instead of waiting for it.  0: the lock could be had. */
static int probe_writer(const char *cmd, bfs_cache *c)
{
	char msg[BFS_ERRMSG_MAX] = "";
	int err = bfs_cache_writer_probe(c, msg);

	if (err)
		fprintf(stderr, "batchfs cache %s: %s%s\n", cmd,
			msg[0] ? msg : bfs_strerror(err),
			err == -ETIMEDOUT ? "; not done (continue or end that process first)" : "");
	return err;
}

/* The root a source's entries are stored under: a shard directory's
 * absolute path.  0, or 2 (usage) with the message printed. */
static int source_root(const char *cmd, const char *src, char *root, size_t cap)
{
	char real[PATH_MAX];

	if (!realpath(src, real)) {
		fprintf(stderr, "batchfs cache %s: --source %s: %s\n", cmd, src,
			strerror(errno));
		return 2;
	}
	snprintf(root, cap, "%s", real);
	return 0;
}

static void print_source(const char *src, const bfs_cache_source_info *in,
			 const char *verb)
{
	char a[32], b[32];

	human(in->index_bytes, a, sizeof(a));
	human(in->sample_bytes, b, sizeof(b));
	printf("source        %s: %s%llu shard indexes (%s), %llu samples (%s)\n", src,
	       verb, (unsigned long long)in->shards, a,
	       (unsigned long long)in->samples, b);
}

static int cmd_stats(const char *dir, const char *fp, const char *src)
{
	bfs_cache *c;
	bfs_cache_stats st;
	bfs_cache_fp_info *fps = NULL;
	size_t n = 0, shown = 0;
	uint64_t tot;
	char a[32], b[32], d[32];
	int err;

	if (open_admin("stats", dir, &c))
		return 1;
	bfs_cache_get_stats(c, &st);
	err = bfs_cache_fingerprints(c, &fps, &n);
	if (err) {
		fprintf(stderr, "batchfs cache stats: %s\n", bfs_strerror(err));
		bfs_cache_close(c);
		return 1;
	}
	human(st.file_bytes, a, sizeof(a));
	human(st.map_bytes, b, sizeof(b));
	human(st.bytes_used, d, sizeof(d));
	printf("cache         %s\n", dir);
	printf("data.mdb      %s on disk, limit %s, %s in use\n", a, b, d);
	printf("samples       %llu\n", (unsigned long long)st.entries);
	printf("shard indexes %llu\n", (unsigned long long)st.index_entries);
	tot = st.total_hits + st.total_misses;
	if (tot)
		printf("hit rate      %.1f%% (%llu hits, %llu misses, all mounts since created or cleared)\n",
		       100.0 * (double)st.total_hits / (double)tot,
		       (unsigned long long)st.total_hits,
		       (unsigned long long)st.total_misses);
	else
		printf("hit rate      - (no reads recorded yet)\n");
	printf("fingerprints  %zu\n", n);
	for (size_t i = 0; i < n; i++) {
		if (fp && strcasecmp(fp, fps[i].fingerprint))
			continue;
		human(fps[i].bytes, a, sizeof(a));
		when(fps[i].last_active_ns, b, sizeof(b));
		printf("  %s  %10llu entries  %10s  last used %s\n",
		       fps[i].fingerprint,
		       (unsigned long long)fps[i].entries, a, b);
		shown++;
	}
	if (fp && !shown)
		printf("  %s: no entries\n", fp);
	free(fps);
	if (src) {
		char root[PATH_MAX];
		bfs_cache_source_info in;

		if (source_root("stats", src, root, sizeof(root))) {
			bfs_cache_close(c);
			return 1;
		}
		if ((err = bfs_cache_source(c, root, 0, &in))) {
			fprintf(stderr, "batchfs cache stats: %s: %s\n", src, bfs_strerror(err));
			bfs_cache_close(c);
			return 1;
		}
		print_source(src, &in, "");
	}
	bfs_cache_close(c);
	return 0;
}

static void print_bad(void *ctx, const bfs_cache_entry_info *e)
{
	const char *why = e->code == BFS_E_CRC ? "CRC32C, header or key mismatch"
			: e->code == BFS_E_CORRUPT ? "damaged LMDB page or unknown key"
						   : bfs_strerror(e->code);

	if (!strcmp(e->db, "samples"))
		printf("bad  %s  shard %016llx  offset %llu  %llu bytes: %s\n",
		       e->fingerprint, (unsigned long long)e->shard_hash,
		       (unsigned long long)e->offset,
		       (unsigned long long)e->len, why);
	else
		printf("bad  %s entry  %llu bytes: %s\n", e->db,
		       (unsigned long long)e->len, why);
}

static int cmd_verify(const char *dir, const char *fp, int del)
{
	bfs_cache *c;
	uint64_t checked = 0, nbad = 0;
	int err;

	if (open_admin("verify", dir, &c))
		return 1;
	if (probe_writer("verify", c)) {
		bfs_cache_close(c);
		return 1;
	}
	err = bfs_cache_verify(c, fp, del, print_bad, NULL, &checked, &nbad);
	bfs_cache_close(c);
	if (err) {
		fprintf(stderr, "batchfs cache verify: %s (after %llu entries)\n",
			bfs_strerror(err), (unsigned long long)checked);
		return 1;
	}
	printf("verified %llu entries, the shard indexes and the counters: %llu bad%s\n",
	       (unsigned long long)checked, (unsigned long long)nbad,
	       nbad && del ? " (removed)" : "");
	return nbad ? 1 : 0;
}

/* clear --source: one source's shard indexes and samples. */
static int clear_source(const char *dir, const char *src)
{
	char root[PATH_MAX];
	bfs_cache_source_info in;
	bfs_cache *c;
	int err;

	if (source_root("clear", src, root, sizeof(root)))
		return 1;
	if (open_admin("clear", dir, &c))
		return 1;
	if (probe_writer("clear", c)) {
		bfs_cache_close(c);
		return 1;
	}
	err = bfs_cache_source(c, root, 1, &in);
	bfs_cache_close(c);
	if (err) {
		fprintf(stderr, "batchfs cache clear: %s: %s\n", src, bfs_strerror(err));
		return 1;
	}
	print_source(src, &in, "removed ");
	return 0;
}

static int cmd_clear(const char *dir, const char *fp, const char *src)
{
	bfs_cache *c;
	char path[PATH_MAX], a[32];
	struct stat st;
	uint64_t removed = 0;
	int err;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (stat(path, &st) != 0) {
		printf("no cache in %s: nothing to clear\n", dir);
		return 0;
	}
	if (src)
		return clear_source(dir, src);
	if (!fp) {
		err = bfs_cache_remove_files(dir);
		if (err == 0) {
			human((uint64_t)st.st_size, a, sizeof(a));
			printf("removed the cache in %s (%s freed)\n", dir, a);
			return 0;
		}
		if (err != -EBUSY) {
			fprintf(stderr, "batchfs cache clear: %s: %s\n", dir,
				bfs_strerror(err));
			return 1;
		}
	}
	if (open_admin("clear", dir, &c))
		return 1;
	if (probe_writer("clear", c)) {
		bfs_cache_close(c);
		return 1;
	}
	err = bfs_cache_clear(c, fp, &removed);
	bfs_cache_close(c);
	if (err) {
		fprintf(stderr, "batchfs cache clear: %s\n", bfs_strerror(err));
		return 1;
	}
	if (fp)
		printf("removed %llu entries of %s\n",
		       (unsigned long long)removed, fp);
	else
		printf("removed %llu entries; a mount is using the cache, so data.mdb keeps its size and the space is reused\n",
		       (unsigned long long)removed);
	return 0;
}

static int valid_fp(const char *s)
{
	if (strlen(s) != 16)
		return 0;
	for (int i = 0; i < 16; i++)
		if (!strchr("0123456789abcdefABCDEF", s[i]))
			return 0;
	return 1;
}

int bfs_cachecmd_main(int argc, char **argv)
{
	enum { O_FP = 256, O_DELETE, O_SOURCE };
	static const struct option lo[] = {
		{ "fingerprint", required_argument, 0, O_FP },
		{ "delete", no_argument, 0, O_DELETE },
		{ "source", required_argument, 0, O_SOURCE },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	const char *sub = argc > 1 ? argv[1] : NULL, *usage, *fp = NULL, *src = NULL;
	char dir[PATH_MAX];
	int c, del = 0;

	if (!sub) {
		fputs(usage_top, stderr);
		return 2;
	}
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
		fputs(usage_top, stdout);
		return 0;
	}
	if (!strcmp(sub, "stats"))
		usage = usage_stats;
	else if (!strcmp(sub, "verify"))
		usage = usage_verify;
	else if (!strcmp(sub, "clear"))
		usage = usage_clear;
	else {
		fprintf(stderr, "batchfs cache: unknown command '%s'\n\n%s", sub,
			usage_top);
		return 2;
	}
	argc--;
	argv++;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case O_FP:
			if (!valid_fp(optarg)) {
				fprintf(stderr, "batchfs cache %s: bad value '%s' for --fingerprint (16 hex digits)\n",
					sub, optarg);
				return 2;
			}
			fp = optarg;
			break;
		case O_SOURCE:
			if (usage == usage_verify) {
				fputs(usage, stderr);
				return 2;
			}
			src = optarg;
			break;
		case O_DELETE:
			if (usage != usage_verify) {
				fputs(usage, stderr);
				return 2;
			}
			del = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default: {
			char hint[96];

			fprintf(stderr, "batchfs cache %s: %s '%s'%s\n\n", sub,
				c == ':' ? "a value is needed after" : "unknown option",
				argv[optind - 1], c == ':' ? ""
				: bfs_opt_hint(argv[optind - 1], lo, hint, sizeof(hint)));
			fputs(usage, stderr);
			return 2;
		}
		}
	}
	if (argc - optind > 1) {
		fputs(usage, stderr);
		return 2;
	}
	if (argc - optind == 1) {
		snprintf(dir, sizeof(dir), "%s", argv[optind]);
	} else if (bfs_cache_default_dir(dir, sizeof(dir)) != 0) {
		fprintf(stderr, "batchfs cache %s: no default cache directory (set XDG_CACHE_HOME or HOME, or give DIR)\n",
			sub);
		return 2;
	}
	if (src && fp && usage == usage_clear) {
		fprintf(stderr, "batchfs cache clear: --fingerprint or --source, not both\n");
		return 2;
	}
	if (usage == usage_stats)
		return cmd_stats(dir, fp, src);
	if (usage == usage_verify)
		return cmd_verify(dir, fp, del);
	return cmd_clear(dir, fp, src);
}
