/*
 * daemon.c - the mount daemon's life (see daemon.h): start-up handshake,
 * detaching, stop signals and their watcher, and an unmount that waits
 * for the daemon to exit.
 */
#include "fs/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fs/host.h"
#include "fs/log.h"

/* ---- start-up --------------------------------------------------------- */

int bfs_daemon_run(int foreground, int (*serve)(void *ctx, int notify_fd),
		   void *ctx)
{
	char buf[4096];
	size_t got = 0;
	int pfd[2];
	pid_t pid;

	if (foreground)
		return serve(ctx, -1);
	if (pipe2(pfd, O_CLOEXEC) != 0) {
		perror("batchfs: pipe");
		return 1;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		perror("batchfs: fork");
		return 1;
	}
	if (pid == 0) {
		close(pfd[0]);
		setsid();
		signal(SIGPIPE, SIG_IGN);
		_exit(serve(ctx, pfd[1]));
	}
	close(pfd[1]);
	for (;;) {
		ssize_t r = read(pfd[0], buf + got, sizeof(buf) - 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(buf) - 1)
			break;
	}
	close(pfd[0]);
	buf[got] = '\0';
	if (got == 0) {
		int wst = 0;

		waitpid(pid, &wst, 0);
		fprintf(stderr, "batchfs: the daemon exited during start-up (%s %d)\n",
			WIFSIGNALED(wst) ? "signal" : "status",
			WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
		return 1;
	}
	if (buf[0] == '0') {
		printf("%s\n", buf + 1);
		return 0;
	}
	waitpid(pid, NULL, 0);
	fprintf(stderr, "%s\n", buf + 1);
	return 1;
}

/* The parent reads "0message" (ready) or "1message". */
void bfs_daemon_notify(int fd, int ok, const char *raw)
{
	char buf[4096], msg[4000];
	int n;

	/* names from the shards reach a terminal here: no control bytes */
	bfs_log_escape(raw, msg, sizeof(msg));
	if (fd < 0) {
		fprintf(ok ? stdout : stderr, "%s\n", msg);
		fflush(NULL);
		return;
	}
	n = snprintf(buf, sizeof(buf), "%c%s", ok ? '0' : '1', msg);
	if (n > 0 && write(fd, buf, (size_t)n < sizeof(buf) ? (size_t)n
							    : sizeof(buf) - 1) < 0)
		return;
}

/* The mount itself; runs in the daemon (or in the foreground).  Reports to
 * notify_fd (-1 in the foreground) and returns the exit status. */
void bfs_daemon_detach(int notify_fd)
{
	int null;

	if (notify_fd < 0)
		return;
	close(notify_fd);
	if ((null = open("/dev/null", O_RDWR)) >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (null > 2)
			close(null);
	}
	if (chdir("/") != 0)
		bfs_log(BFS_LOG_WARN, "chdir /: %s", strerror(errno));
}

/* ---- stop signals ---------------------------------------------------- */

/* The handlers only write to a self-pipe: a stop may have to wait on the
 * session loop (a push's lookup, a page a pending read holds), so it must
 * not run in a handler, nor end the loop under it as libfuse's own
 * handlers would. */
static int stop_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (write(stop_pipe[1], &c, 1) < 0) {
		/* the pipe is full: a stop is already on its way */
	}
	errno = saved;
}

static void on_wake_signal(int sig)
{
	/* only interrupts the loop's sem_wait, so it sees the exit flag */
}

struct bfs_watch {
	void (*stop)(void *ctx);
	void *ctx;
	pthread_t main;
	pthread_t thread;
	int fired;               /* written by the watcher before it returns */
};

static void *watcher_main(void *arg)
{
	bfs_watch *w = arg;
	char c = 0;

	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	if (c == 0)
		return NULL; /* bfs_daemon_unwatch: no signal came */
	w->fired = 1;
	w->stop(w->ctx);
	pthread_kill(w->main, SIGUSR1);
	return NULL;
}

int bfs_daemon_watch(void (*stop)(void *ctx), void *ctx, bfs_watch **out)
{
	struct sigaction sa;
	bfs_watch *w;
	int err;

	*out = NULL;
	if (!(w = calloc(1, sizeof(*w))))
		return -ENOMEM;
	w->stop = stop;
	w->ctx = ctx;
	w->main = pthread_self();
	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
		err = -errno;
		free(w);
		return err;
	}
	fcntl(stop_pipe[0], F_SETFL, 0); /* the watcher blocks on it */
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = on_wake_signal;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	if ((err = pthread_create(&w->thread, NULL, watcher_main, w))) {
		close(stop_pipe[0]);
		close(stop_pipe[1]);
		stop_pipe[0] = stop_pipe[1] = -1;
		free(w);
		return -err;
	}
	*out = w;
	return 0;
}

void bfs_daemon_request_stop(bfs_watch *w)
{
	char c = (char)SIGTERM;

	if (!w)
		return;
	if (write(stop_pipe[1], &c, 1) < 0) {
		/* full: a stop is already on its way */
	}
}

void bfs_daemon_unwatch(bfs_watch *w)
{
	struct sigaction sa;
	char c = 0;

	if (!w)
		return;
	if (write(stop_pipe[1], &c, 1) < 0) {
		/* full: it has fired already */
	}
	pthread_join(w->thread, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	close(stop_pipe[0]);
	close(stop_pipe[1]);
	stop_pipe[0] = stop_pipe[1] = -1;
	free(w);
}

/* ---- unmount --------------------------------------------------------- */

/* The daemon's pid, asked of the mount itself (user.batchfs.pid on its
 * root), from a thread given 2 s: a daemon that does not answer is not
 * waited for.  0 when unknown (not a batchfs mount, or dead). */
struct pid_probe {
	char path[PATH_MAX];
	long pid;     /* written by the probe thread before it returns */
};

static void *pid_probe_main(void *arg)
{
	struct pid_probe *p = arg;
	char v[32];
	ssize_t n = getxattr(p->path, "user.batchfs.pid", v, sizeof(v) - 1);

	if (n > 0) {
		v[n] = '\0';
		p->pid = strtol(v, NULL, 10);
	}
	return NULL;
}

static pid_t daemon_pid(const char *mountpoint)
{
	struct pid_probe *p = calloc(1, sizeof(*p));
	struct timespec until;
	pthread_t t;
	pid_t pid = 0;

	if (!p)
		return 0;
	snprintf(p->path, sizeof(p->path), "%s", mountpoint);
	if (pthread_create(&t, NULL, pid_probe_main, p) != 0) {
		free(p);
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(t, NULL, &until) != 0) {
		pthread_detach(t); /* stuck on a hung daemon: p stays its */
		return 0;
	}
	pid = (pid_t)p->pid;
	free(p);
	return pid > 0 ? pid : 0;
}

/* A descriptor that becomes readable when process pid exits, or -1.  It
 * names the process itself, so a pid reused later is not mistaken for it;
 * taken before the unmount, while the daemon still serves. */
static int watch_pid(pid_t pid)
{
	char path[64], comm[64] = "";
	FILE *f;
	int fd;

	if (pid <= 0)
		return -1;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -1;
	/* Another pid namespace sees other numbers: only a batchfs daemon
	 * here is waited for. */
	snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
	if ((f = fopen(path, "re"))) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
	}
	if (strncmp(comm, "batchfs", 7) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int bfs_daemon_unmount(const char *path)
{
	char mountpoint[PATH_MAX];
	struct pollfd pf = { .fd = -1, .events = POLLIN };
	pid_t pid, daemon;
	int wst = 0, rc = 0, err;

	if ((err = bfs_host_resolve(path, mountpoint, sizeof(mountpoint))) ||
	    !bfs_host_is_mountpoint(mountpoint)) {
		fprintf(stderr, "batchfs: %s is not mounted\n", path);
		return 1;
	}
	daemon = daemon_pid(mountpoint);
	pf.fd = watch_pid(daemon);
	if (geteuid() == 0) {
		/* EBUSY for an instant is possible while the daemon looks up a
		 * batch it is about to push (push_file); a mount someone holds
		 * open stays busy and fails after the retries. */
		err = 0;
		for (int i = 0; i < 20; i++) {
			if (umount2(mountpoint, 0) == 0)
				goto wait;
			if ((err = errno) != EBUSY)
				break;
			usleep(50 * 1000);
		}
		if (err != EPERM) {
			fprintf(stderr, "batchfs: unmount %s: %s\n", mountpoint,
				strerror(err));
			rc = 1;
			goto out;
		}
	}
	pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", mountpoint,
		       (char *)NULL);
		perror("batchfs: fusermount3");
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &wst, 0) < 0 || !WIFEXITED(wst) ||
	    WEXITSTATUS(wst) != 0) {
		fprintf(stderr, "batchfs: unmount %s failed\n", mountpoint);
		rc = 1;
		goto out;
	}
wait:
	for (int i = 0; i < 100 && bfs_host_is_mountpoint(mountpoint); i++)
		usleep(50 * 1000);
	/* Return once the daemon is gone: its last batches are in the cache
	 * and the cache directory is closed (a remount or `batchfs cache`
	 * right after sees everything). */
	if (pf.fd >= 0) {
		int r = poll(&pf, 1, 2000);

		if (r == 0) {
			fprintf(stderr,
				"batchfs: waiting for the daemon (pid %ld) to finish writing its cache...\n",
				(long)daemon);
			r = poll(&pf, 1, 58000);
		}
		if (r == 0) {
			fprintf(stderr,
				"batchfs: %s is unmounted, but its daemon (pid %ld) is still running after 60 s\n",
				mountpoint, (long)daemon);
			rc = 1;
		}
	}
out:
	if (pf.fd >= 0)
		close(pf.fd);
	return rc;
}
