/*
 * peek.c - the look-up child (see peek.h).
 *
 * DESIGN: a SOCK_SEQPACKET pair; a request is the relative name, the
 * answer a struct answer.  The child is forked while the daemon is still
 * one thread and holds nothing but stdio, and keeps only its end of the
 * pair: not /dev/fuse (not open yet), not a lock another process could
 * wait on.  It stats through a private clone of the mount (open_tree, as
 * root) so that a walk waiting on a LOOKUP holds no reference on the mount
 * the user sees and an umount at that instant does not fail with EBUSY;
 * without CAP_SYS_ADMIN, through the path.  One request at a time: the
 * look-ups are rare (a push whose file the kernel does not know yet).
 */
#include "fs/peek.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct bfs_peek {
	int sock;
	pid_t pid;
	pthread_mutex_t lock; /* one request on the socket at a time */
};

struct answer {
	int32_t err; /* 0 or -errno */
	uint64_t ino;
};

int bfs_peek_stat_here(const char *root, const char *rel, uint64_t *ino)
{
	char path[2 * PATH_MAX + 2];
	size_t a = strlen(root), b = strlen(rel);
	struct stat st;
	int tree, rc;

	tree = open_tree(AT_FDCWD, root, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree >= 0) {
		rc = fstatat(tree, rel, &st, 0) != 0 ? -errno : 0;
		close(tree);
	} else {
		if (a + 1 + b + 1 > sizeof(path))
			return -ENAMETOOLONG;
		memcpy(path, root, a);
		path[a] = '/';
		memcpy(path + a + 1, rel, b + 1);
		rc = stat(path, &st) != 0 ? -errno : 0;
	}
	if (!rc)
		*ino = (uint64_t)st.st_ino;
	return rc;
}

static void peek_main(int sock, const char *root, pid_t parent)
{
	char rel[PATH_MAX + 1];

	prctl(PR_SET_NAME, "bfs-peek");
	/* gone with the daemon, even if it could not close the socket */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	/* nothing of the daemon's: no lock outlives it through this child */
	if (sock > 0)
		close_range(0, (unsigned)sock - 1, 0);
	close_range((unsigned)sock + 1, ~0u, 0);
	for (;;) {
		struct answer a = { 0, 0 };
		ssize_t n = recv(sock, rel, sizeof(rel) - 1, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(0);
		rel[n] = '\0';
		a.err = bfs_peek_stat_here(root, rel, &a.ino);
		if (send(sock, &a, sizeof(a), MSG_NOSIGNAL) != (ssize_t)sizeof(a))
			_exit(0);
	}
}

int bfs_peek_start(const char *root, bfs_peek **out)
{
	bfs_peek *p = calloc(1, sizeof(*p));
	pid_t parent = getpid();
	int sv[2];

	*out = NULL;
	if (!p)
		return -ENOMEM;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		free(p);
		return -errno;
	}
	p->pid = fork();
	if (p->pid < 0) {
		int err = -errno;

		close(sv[0]);
		close(sv[1]);
		free(p);
		return err;
	}
	if (p->pid == 0) {
		close(sv[0]);
		peek_main(sv[1], root, parent);
	}
	close(sv[1]);
	p->sock = sv[0];
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

int bfs_peek_stat(bfs_peek *p, const char *rel, uint64_t *ino)
{
	struct answer a;
	size_t len = strlen(rel);
	ssize_t n;
	int err;

	if (len > PATH_MAX)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&p->lock);
	while ((n = send(p->sock, rel, len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)len) {
		err = n < 0 ? -errno : -EIO;
		goto out;
	}
	while ((n = recv(p->sock, &a, sizeof(a), 0)) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(a)) {
		err = n < 0 ? -errno : -EPIPE; /* 0: the child is gone */
		goto out;
	}
	err = a.err;
	if (!err)
		*ino = a.ino;
out:
	pthread_mutex_unlock(&p->lock);
	return err;
}

void bfs_peek_stop(bfs_peek *p)
{
	if (!p)
		return;
	close(p->sock); /* it sees the end and exits */
	if (p->pid > 0) {
		kill(p->pid, SIGKILL); /* should it be in a stat still */
		while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int bfs_peek_pid(const bfs_peek *p)
{
	return p ? (int)p->pid : 0;
}
