/*
 * cachehold - for tests/integration/test_cache_shared.sh: open the cache in
 * DIR as a mount would, begin a write transaction (the writer lock and
 * LMDB's writer mutex held, as a mount's writer is in the middle of a
 * put), print "held PID" and stop itself with SIGSTOP, the way Slurm
 * suspends a job.  When continued it aborts the transaction, closes the
 * cache and exits 0.
 *
 *   cachehold DIR
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/cache_internal.h"

int main(int argc, char **argv)
{
	bfs_cache_opts o = { 0 };
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_cache *c;
	MDB_txn *txn;
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: cachehold DIR\n");
		return 2;
	}
	o.dir = argv[1];
	o.fingerprint = "0123456789abcdef";
	o.max_bytes = 64ull << 20;
	err = bfs_cache_open(&o, &c, msg);
	if (err) {
		fprintf(stderr, "cachehold: %s: %s\n", argv[1], msg);
		return 1;
	}
	err = bfs__txn_begin(c->e, 0, &txn);
	if (err) {
		fprintf(stderr, "cachehold: write transaction: %s\n",
			bfs_strerror(bfs__map_err(err)));
		bfs_cache_close(c);
		return 1;
	}
	printf("held %d\n", (int)getpid());
	fflush(stdout);
	raise(SIGSTOP);
	bfs__txn_end(c->e, txn, 0);
	bfs_cache_close(c);
	return 0;
}
