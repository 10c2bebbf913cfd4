/*
 * known_bugs.c - reproducers of bugs found in files this suite does not
 * own, kept out of `make test` until their owners fix them (see
 * docs/RELIABILITY.md).  Exit status 1 while any still reproduces.
 *
 *   make known-bugs            (runs $(BUILD)/tests/known_bugs)
 *
 * 1. engine/source.c load_index(): a shard index read back from the cache
 *    is bounds-checked with `(len - sizeof(h) - h.errlen)`, which wraps
 *    when errlen is larger than what follows the header; a 24-byte blob
 *    with errlen 16 and count 2^60 - 1 passes every check, and the loop
 *    reads entries far past the blob (ASan: heap-buffer-overflow at
 *    source.c:341).  Run here in a child with a 2 GiB address-space limit.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/source.h"
#include "engine/formats/tfrecord.h"

/* What load_index() reads: header, error text, packed entries. */
struct index_hdr {
	char magic[8];
	uint64_t count;
	uint32_t errlen;
	uint32_t pad;
};

static int crafted_index(void *ctx, const char *dir, const char *shard,
			 const bfs_shard_stamp *st, void **blob, size_t *len)
{
	struct index_hdr h = { "BFSIDX02", (1ull << 60) - 1, 16, 0 };

	*blob = malloc(sizeof(h));
	memcpy(*blob, &h, sizeof(h));
	*len = sizeof(h); /* no room for the 16 error bytes, nor any entry */
	return 0;
}

/* 1 when a crafted cached index is not refused (the source must fall back
 * to scanning the shard, which holds one record). */
static int cached_index_overflows(void)
{
	char dir[] = "/tmp/batchfs-known.XXXXXX", path[64], msg[BFS_ERRMSG_MAX];
	bfs_example_builder *b;
	const uint8_t *ex;
	size_t len;
	int fd, status;
	pid_t pid;

	if (!mkdtemp(dir))
		exit(2);
	snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	bfs_example_builder_create(&b);
	bfs_example_builder_add_bytes(b, "image/encoded", "\xff\xd8", 2);
	bfs_example_builder_finish(b, &ex, &len);
	if (fd < 0 || bfs_tfrecord_write(fd, ex, len))
		exit(2);
	close(fd);
	bfs_example_builder_destroy(b);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 2ull << 30, 2ull << 30 };
		bfs_source_opts o = { .dir = dir, .index_get = crafted_index };
		bfs_source *s;

		setrlimit(RLIMIT_AS, &rl);
		if (bfs_source_open(&o, &s, msg) != 0)
			_exit(4);
		_exit(bfs_source_count(s) == 1 ? 0 : 3);
	}
	waitpid(pid, &status, 0);
	unlink(path);
	rmdir(dir);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("fixed      a cached index with a wrapped length check is refused\n");
		return 0;
	}
	printf("REPRODUCES a 24-byte cached index claiming 2^60 - 1 records: %s %d\n",
	       WIFSIGNALED(status) ? "the source died by signal" : "open returned",
	       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	return 1;
}

int main(void)
{
	int bad = 0;

	bad |= cached_index_overflows();
	return bad;
}
