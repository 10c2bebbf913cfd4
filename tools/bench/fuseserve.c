/*
 * fuseserve.c - build/bench_fuseserve: a FUSE server of N identical
 * in-memory files, to measure how fast FUSE hands batch-sized files to a
 * reader under different serving choices, with no decoding in the way.
 * Used by the "serve" stage of tools/bench.py; not part of batchfs.
 *
 *   bench_fuseserve MOUNTPOINT [--files N] [--size BYTES] [--copy]
 *                   [--direct-io] [--no-keep-cache] [--max-readahead N]
 *                   [--splice] [--mt] [--push]
 *
 *   --copy           memcpy into a per-request buffer, then fuse_reply_buf
 *                    (what batchfs's high-level read() does today); the
 *                    default replies with fuse_reply_data straight from
 *                    the file's memory (no user-space copy)
 *   --direct-io      FOPEN_DIRECT_IO: no page cache, the request size is
 *                    the reader's up to max_read
 *   --no-keep-cache  drop the page cache at every open (default keeps it)
 *   --max-readahead  conn->max_readahead (default: the kernel's offer)
 *   --splice         FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE
 *   --mt             fuse_session_loop_mt instead of the single loop
 *   --push           when file 0 is opened, push files 1..N-1 into the
 *                    page cache with fuse_lowlevel_notify_store (what a
 *                    daemon could do as soon as a batch is decoded); they
 *                    must have been looked up before (stat them first)
 *
 * Runs in the foreground until unmounted; prints one line on stderr when a
 * push finished ("push: N bytes in S s").  Exit status 0, 1 on failure,
 * 2 usage.
 *
 * DESIGN: one read-only buffer (`data`) serves every file; the push runs
 * on its own thread, started at most once (`pushed`, atomic).
 */
#define FUSE_USE_VERSION 312 /* fuse_loop_cfg_* (3.12); 3.14 is installed */
#include <fuse_lowlevel.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct srv {
	unsigned nfiles;
	size_t size;
	int copy, direct_io, keep_cache, splice, mt, push;
	unsigned max_readahead;
	uint8_t *data;               /* read-only after start */
	struct fuse_session *se;
	int pushed;                  /* atomic */
	pthread_t pusher;
};

static struct srv S = { .nfiles = 8, .size = 19267712, .keep_cache = 1 };

/* ino 1 is the root; file k is ino k + 2, named "fK". */
static int file_of(fuse_ino_t ino)
{
	return ino >= 2 && ino < 2 + S.nfiles ? (int)(ino - 2) : -1;
}

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == 1) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)S.size;
	}
}

static void op_init(void *ud, struct fuse_conn_info *conn)
{
	if (S.max_readahead)
		conn->max_readahead = S.max_readahead;
	if (S.splice)
		conn->want |= (FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE) &
			      conn->capable;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	char *end;
	unsigned long k;

	if (parent != 1 || name[0] != 'f')
		goto none;
	k = strtoul(name + 1, &end, 10);
	if (*end || end == name + 1 || k >= S.nfiles)
		goto none;
	memset(&e, 0, sizeof(e));
	e.ino = k + 2;
	e.attr_timeout = e.entry_timeout = 3600;
	fill_stat(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
	return;
none:
	fuse_reply_err(req, ENOENT);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	if (ino != 1 && file_of(ino) < 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_stat(ino, &st);
	fuse_reply_attr(req, &st, 3600);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	char buf[4096], name[32];
	size_t cap = size < sizeof(buf) ? size : sizeof(buf), used = 0;

	if (ino != 1) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	for (off_t k = off; k < (off_t)S.nfiles; k++) {
		struct stat st;
		size_t n;

		fill_stat((fuse_ino_t)k + 2, &st);
		snprintf(name, sizeof(name), "f%lld", (long long)k);
		n = fuse_add_direntry(req, buf + used, cap - used, name, &st, k + 1);
		if (n > cap - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Push files 1..N-1 into the kernel's page cache, 1 MiB at a time. */
static void *pusher_main(void *arg)
{
	uint64_t t0 = now_ns(), bytes = 0;
	int err = 0;

	for (unsigned k = 1; k < S.nfiles && !err; k++)
		for (size_t off = 0; off < S.size && !err; off += 1u << 20) {
			size_t n = S.size - off < (1u << 20) ? S.size - off : 1u << 20;
			struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);

			bv.buf[0].mem = S.data + off;
			err = fuse_lowlevel_notify_store(S.se, k + 2, (off_t)off, &bv, 0);
			if (!err)
				bytes += n;
		}
	fprintf(stderr, "push: %llu bytes in %.4f s%s%s\n", (unsigned long long)bytes,
		(double)(now_ns() - t0) / 1e9, err ? ", failed: " : "",
		err ? strerror(-err) : "");
	return NULL;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int k = file_of(ino);

	if (k < 0) {
		fuse_reply_err(req, ino == 1 ? EISDIR : ENOENT);
		return;
	}
	fi->keep_cache = S.keep_cache;
	fi->direct_io = S.direct_io;
	fuse_reply_open(req, fi);
	if (k == 0 && S.push && !__atomic_exchange_n(&S.pushed, 1, __ATOMIC_ACQ_REL))
		if (pthread_create(&S.pusher, NULL, pusher_main, NULL))
			__atomic_store_n(&S.pushed, 0, __ATOMIC_RELEASE);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	if (file_of(ino) < 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((size_t)off >= S.size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > S.size - (size_t)off)
		size = S.size - (size_t)off;
	if (S.copy) {
		char *b = malloc(size);

		if (!b) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		memcpy(b, S.data + off, size);
		fuse_reply_buf(req, b, size);
		free(b);
	} else {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);

		bv.buf[0].mem = S.data + off;
		fuse_reply_data(req, &bv, S.splice ? FUSE_BUF_SPLICE_MOVE : 0);
	}
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.open = op_open,
	.read = op_read,
};

static int usage(void)
{
	fprintf(stderr, "usage: bench_fuseserve MOUNTPOINT [--files N] [--size BYTES] "
		"[--copy] [--direct-io]\n       [--no-keep-cache] [--max-readahead N] "
		"[--splice] [--mt] [--push]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg = NULL;
	const char *mnt = NULL;
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--copy"))
			S.copy = 1;
		else if (!strcmp(a, "--direct-io"))
			S.direct_io = 1;
		else if (!strcmp(a, "--no-keep-cache"))
			S.keep_cache = 0;
		else if (!strcmp(a, "--splice"))
			S.splice = 1;
		else if (!strcmp(a, "--mt"))
			S.mt = 1;
		else if (!strcmp(a, "--push"))
			S.push = 1;
		else if (i + 1 < argc && !strcmp(a, "--files"))
			S.nfiles = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(a, "--size"))
			S.size = (size_t)strtoull(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(a, "--max-readahead"))
			S.max_readahead = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (a[0] != '-' && !mnt)
			mnt = a;
		else
			return usage();
	}
	if (!mnt || S.nfiles < 1 || S.nfiles > 4096 || S.size < 1)
		return usage();
	if (posix_memalign((void **)&S.data, 2u << 20, S.size)) {
		fprintf(stderr, "bench_fuseserve: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < S.size; i++)
		S.data[i] = (uint8_t)(i * 2654435761u >> 24);
	if (fuse_opt_add_arg(&args, "bench_fuseserve") ||
	    fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, "ro,fsname=bench_fuseserve,default_permissions"))
		goto out;
	if (!(S.se = fuse_session_new(&args, &ops, sizeof(ops), NULL)))
		goto out;
	if (fuse_set_signal_handlers(S.se))
		goto out_session;
	if (fuse_session_mount(S.se, mnt))
		goto out_signals;
	if (S.mt) {
		cfg = fuse_loop_cfg_create();
		if (!cfg)
			goto out_unmount;
		fuse_loop_cfg_set_max_threads(cfg, 16);
		rc = fuse_session_loop_mt(S.se, cfg) ? 1 : 0;
		fuse_loop_cfg_destroy(cfg);
	} else {
		rc = fuse_session_loop(S.se) ? 1 : 0;
	}
	if (__atomic_load_n(&S.pushed, __ATOMIC_ACQUIRE))
		pthread_join(S.pusher, NULL);
out_unmount:
	fuse_session_unmount(S.se);
out_signals:
	fuse_remove_signal_handlers(S.se);
out_session:
	fuse_session_destroy(S.se);
out:
	fuse_opt_free_args(&args);
	free(S.data);
	return rc;
}
