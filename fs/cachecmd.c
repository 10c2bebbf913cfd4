/*
 * cachecmd.c - `batchfs cache stats|verify|clear` (see cachecmd.h): a thin
 * command line over the cache's admin functions.
 */
#include "fs/cachecmd.h"

#include <errno.h>
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/cache.h"
#include "engine/storage/shardfolder.h"
#include "engine/storage/storage.h"
#include "fs/host.h"
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
	"                 (--source SRC: one source's entries, and for a URL\n"
	"                 its shard cache folder)\n"
	"  verify [DIR]   check the CRC32C of every entry\n"
	"  clear [DIR]    remove every entry (or one fingerprint's, or one\n"
	"                 source's: --source SRC)\n"
	"\n"
	"Run 'batchfs cache COMMAND --help' for a command's options.\n";

static const char usage_stats[] =
	"usage: batchfs cache stats [DIR] [--fingerprint FP] [--source SRC]\n"
	"                           [--shard-cache SDIR]\n"
	"\n"
	"Shows data.mdb's size on disk and the size limit, the bytes in use,\n"
	"the number of cached samples and shard indexes, the hit rate of every\n"
	"mount since the cache was created or cleared, and each settings\n"
	"fingerprint present with its entries, bytes and last use.\n"
	"\n"
	"options:\n"
	"  --fingerprint FP   show only this fingerprint (16 hex digits)\n"
	"  --source SRC       also the entries of one source (a shard directory,\n"
	"                     or an s3:// or http(s):// source as mounted): its\n"
	"                     shard indexes and the samples of those shards; for\n"
	"                     a URL also its folder in the shard cache (objects,\n"
	"                     bytes on disk)\n"
	"  --shard-cache SDIR the shard cache a URL's mounts use (default\n"
	"                     $XDG_CACHE_HOME/batchfs-shards, as batchfs mount)\n"
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
	"                           [--shard-cache SDIR]\n"
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
	"                     images keeps its samples: clear by fingerprint);\n"
	"                     for an s3:// or http(s):// source also the\n"
	"                     objects its shard cache folder keeps that no\n"
	"                     mount holds (a mount's own are kept, and said)\n"
	"  --shard-cache SDIR the shard cache a URL's mounts use (default\n"
	"                     $XDG_CACHE_HOME/batchfs-shards, as batchfs mount)\n"
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
/* The root that names src's entries in the cache: a shard directory's
 * absolute path, or a remote source's root URL (bfs_storage_root: opened
 * without credentials, since nothing is sent). */
static int source_root(const char *cmd, const char *src, char *root, size_t cap)
{
	char real[PATH_MAX], errmsg[BFS_ERRMSG_MAX] = "";

	if (bfs_storage_is_url(src)) {
		bfs_storage_opts so = { .anonymous = 1 };
		bfs_storage *st = NULL;
		int err;

		bfs_http_opts_default(&so.http);
		if ((err = bfs_storage_open(src, &so, &st, errmsg))) {
			fprintf(stderr, "batchfs cache %s: --source %s: %s\n", cmd, src,
				errmsg[0] ? errmsg : bfs_strerror(err));
			return 2;
		}
		snprintf(root, cap, "%s", bfs_storage_root(st));
		bfs_storage_close(st);
		return 0;
	}
	if (!realpath(src, real)) {
		fprintf(stderr, "batchfs cache %s: --source %s: %s\n", cmd, src,
			strerror(errno));
		return 2;
	}
	snprintf(root, cap, "%s", real);
	return 0;
}

/* A URL source's folder in the shard cache sdir (or the default one):
 * sdir/ID, as shardfolder.h names it.  0, or 2 with a message. */
static int shard_folder(const char *cmd, const char *sdir, const char *root,
			char *out, size_t cap, char *used, size_t used_cap)
{
	char def[PATH_MAX], id[17];

	if (!sdir) {
		if (bfs_host_default_shard_cache(def, sizeof(def))) {
			fprintf(stderr, "batchfs cache %s: no default shard cache "
				"(set XDG_CACHE_HOME or HOME, or give --shard-cache)\n", cmd);
			return 2;
		}
		sdir = def;
	}
	snprintf(used, used_cap, "%s", sdir);
	bfs_shardfolder_id(root, id);
	if (snprintf(out, cap, "%s/%s", sdir, id) >= (int)cap) {
		fprintf(stderr, "batchfs cache %s: --shard-cache %s: too long\n", cmd, sdir);
		return 2;
	}
	return 0;
}

/* The whole objects under path (data/ of a shard cache folder), and their
 * bytes on disk. */
static void count_objects(const char *path, unsigned depth, uint64_t *n,
			  uint64_t *bytes)
{
	DIR *d = depth < 64 ? opendir(path) : NULL;
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char p[PATH_MAX];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(p, sizeof(p), "%s/%s", path, de->d_name) >= (int)sizeof(p) ||
		    lstat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			count_objects(p, depth + 1, n, bytes);
		} else if (S_ISREG(st.st_mode)) {
			(*n)++;
			*bytes += (uint64_t)st.st_blocks * 512;
		}
	}
	closedir(d);
}

/* stats --source URL: what its shard cache folder keeps. */
static void print_shard_folder(const char *folder, const char *verb)
{
	char data[PATH_MAX], a[32];
	uint64_t n = 0, bytes = 0;
	struct stat st;

	if (stat(folder, &st) != 0) {
		printf("shard cache   %s: none (no mount of it has used this shard cache)\n",
		       folder);
		return;
	}
	snprintf(data, sizeof(data), "%s/data", folder);
	count_objects(data, 0, &n, &bytes);
	human(bytes, a, sizeof(a));
	printf("shard cache   %s: %s%llu objects, %s on disk\n", folder, verb,
	       (unsigned long long)n, a);
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

static int cmd_stats(const char *dir, const char *fp, const char *src,
		     const char *sdir)
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
		if (bfs_storage_is_url(src)) {
			char folder[PATH_MAX], used[PATH_MAX];

			if (!shard_folder("stats", sdir, root, folder, sizeof(folder),
					  used, sizeof(used)))
				print_shard_folder(folder, "");
		}
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

/* clear --source URL: the objects of its shard cache folder that no
 * mount holds (the folder's own recount, as a mount's, with no object
 * kept: shardfolder.h), saying what stays. */
static int clear_shard_folder(const char *folder, const char *sdir,
			      const char *root)
{
	char errmsg[BFS_ERRMSG_MAX] = "", data[PATH_MAX];
	bfs_shardfolder *f = NULL;
	uint64_t removed = 0, kept = 0, bytes = 0;
	struct stat st;
	static const bfs_storage_object none[1];
	int err;

	if (stat(folder, &st) != 0) {
		printf("shard cache   %s: none (no mount of it has used this shard cache)\n",
		       folder);
		return 0;
	}
	err = bfs_shardfolder_open(sdir, root, UINT64_MAX, 0, &f, errmsg);
	if (!err) /* no object is listed: every one nobody holds goes */
		err = bfs_shardfolder_recount(f, none, 0, NULL, &removed, errmsg);
	bfs_shardfolder_close(f);
	if (err) {
		fprintf(stderr, "batchfs cache clear: %s: %s\n", folder,
			errmsg[0] ? errmsg : bfs_strerror(err));
		return 1;
	}
	snprintf(data, sizeof(data), "%s/data", folder);
	count_objects(data, 0, &kept, &bytes);
	printf("shard cache   %s: removed %llu files", folder,
	       (unsigned long long)removed);
	if (kept)
		printf("; %llu objects kept: a mount holds them (unmount it to "
		       "remove them)", (unsigned long long)kept);
	printf("\n");
	return 0;
}

/* clear --source: one source's shard indexes and samples, and for a URL
 * what its shard cache folder keeps. */
static int clear_source(const char *dir, const char *src, const char *sdir)
{
	char root[PATH_MAX], path[PATH_MAX], folder[PATH_MAX], used[PATH_MAX];
	bfs_cache_source_info in;
	struct stat st;
	bfs_cache *c;
	int err, url = bfs_storage_is_url(src);

	if (source_root("clear", src, root, sizeof(root)))
		return 1;
	if (url && shard_folder("clear", sdir, root, folder, sizeof(folder),
				used, sizeof(used)))
		return 1;
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (stat(path, &st) != 0) {
		printf("no cache in %s: no entries to clear\n", dir);
	} else {
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
	}
	return url ? clear_shard_folder(folder, used, root) : 0;
}

static int cmd_clear(const char *dir, const char *fp, const char *src,
		     const char *sdir)
{
	bfs_cache *c;
	char path[PATH_MAX], a[32];
	struct stat st;
	uint64_t removed = 0;
	int err;

	if (src)
		return clear_source(dir, src, sdir);
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (stat(path, &st) != 0) {
		printf("no cache in %s: nothing to clear\n", dir);
		return 0;
	}
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
	enum { O_FP = 256, O_DELETE, O_SOURCE, O_SHARDS };
	static const struct option lo[] = {
		{ "fingerprint", required_argument, 0, O_FP },
		{ "delete", no_argument, 0, O_DELETE },
		{ "source", required_argument, 0, O_SOURCE },
		{ "shard-cache", required_argument, 0, O_SHARDS },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	const char *sub = argc > 1 ? argv[1] : NULL, *usage, *fp = NULL, *src = NULL,
		   *sdir = NULL;
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
		case O_SHARDS:
			if (usage == usage_verify) {
				fputs(usage, stderr);
				return 2;
			}
			sdir = optarg;
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
		return cmd_stats(dir, fp, src, sdir);
	if (usage == usage_verify)
		return cmd_verify(dir, fp, del);
	return cmd_clear(dir, fp, src, sdir);
}
