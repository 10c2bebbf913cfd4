/*
 * daemon.c - the mount daemon's life (see daemon.h): start-up handshake,
 * detaching, stop signals and their watcher, and an unmount that waits
 * for the daemon to exit.
 */
#include "fs/daemon.h"

#include <dirent.h>
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

/* Progress shown on this process's terminal without its newline yet (a
 * line that the next one overwrites).  Only the thread that starts the
 * mount shows progress and the start's result. */
static int progress_open;

/* A progress line on stderr: on a terminal, overwriting the last one
 * ("\r", erase to the end); elsewhere a line of its own. */
static void show_progress(const char *text)
{
	if (isatty(STDERR_FILENO)) {
		fprintf(stderr, "\r%s\033[K", text);
		progress_open = 1;
	} else {
		fprintf(stderr, "%s\n", text);
	}
	fflush(stderr);
}

/* End a progress line left open, before anything else is printed. */
static void end_progress(void)
{
	if (progress_open)
		fputc('\n', stderr);
	progress_open = 0;
}

/* The parent's side of the handshake: lines "P<progress>", then one
 * "0<message>" (ready) or "1<message>" (failed).  Progress is shown only
 * on a terminal: a script or mount(8) that reads stderr gets the result
 * alone. */
int bfs_daemon_run(int foreground, int (*serve)(void *ctx, int notify_fd),
		   void *ctx)
{
	char buf[8192];
	size_t got = 0;
	int pfd[2], tty = isatty(STDERR_FILENO), wst = 0;
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
		char *nl;
		ssize_t r;

		/* every complete line: progress is shown, a result ends it */
		while ((nl = memchr(buf, '\n', got))) {
			*nl = '\0';
			if (buf[0] == '0' || buf[0] == '1')
				goto result;
			if (buf[0] == 'P' && tty)
				show_progress(buf + 1);
			got -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, got);
		}
		if (got == sizeof(buf) - 1) {
			buf[got] = '\0'; /* an overlong line: keep what came */
			break;
		}
		r = read(pfd[0], buf + got, sizeof(buf) - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			buf[got] = '\0';
			break;
		}
		got += (size_t)r;
	}
	if (got == 0 || (buf[0] != '0' && buf[0] != '1')) {
		close(pfd[0]);
		end_progress();
		waitpid(pid, &wst, 0);
		fprintf(stderr, "batchfs: the daemon exited during start-up (%s %d)\n",
			WIFSIGNALED(wst) ? "signal" : "status",
			WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
		return 1;
	}
result:
	close(pfd[0]);
	end_progress();
	if (buf[0] == '0') {
		printf("%s\n", buf + 1);
		return 0;
	}
	waitpid(pid, NULL, 0);
	fprintf(stderr, "%s\n", buf + 1);
	return 1;
}

/* The parent reads "0message\n" (ready) or "1message\n"; the message
 * holds no newline (escaped). */
void bfs_daemon_notify(int fd, int ok, const char *raw)
{
	char buf[4096], msg[4000];
	int n;

	/* names from the shards reach a terminal here: no control bytes */
	bfs_log_escape(raw, msg, sizeof(msg));
	if (fd < 0) {
		end_progress();
		fprintf(ok ? stdout : stderr, "%s\n", msg);
		fflush(NULL);
		return;
	}
	n = snprintf(buf, sizeof(buf), "%c%s\n", ok ? '0' : '1', msg);
	if (n >= (int)sizeof(buf)) {
		n = (int)sizeof(buf) - 1;
		buf[n - 1] = '\n';
	}
	if (n > 0 && write(fd, buf, (size_t)n) < 0)
		return;
}

void bfs_daemon_progress(int fd, const char *raw)
{
	char buf[512], msg[480];
	int n;

	bfs_log_escape(raw, msg, sizeof(msg));
	if (fd < 0) {
		show_progress(msg);
		return;
	}
	n = snprintf(buf, sizeof(buf), "P%s\n", msg);
	if (n > 0 && (size_t)n < sizeof(buf) && write(fd, buf, (size_t)n) < 0)
		return; /* the parent is gone: nobody to show it to */
}

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

/* ---- who holds a mount ---------------------------------------------- */

/* Does the mapping line of /proc/PID/maps lie on device devno ("MAJ:MIN",
 * decimal as mountinfo writes it; maps writes hex)? */
static int maps_on_dev(const char *line, unsigned maj, unsigned min)
{
	unsigned a, b;

	/* address perms offset dev inode path */
	return sscanf(line, "%*s %*s %*s %x:%x", &a, &b) == 2 && a == maj &&
	       b == min;
}

/* Is link (a readlink of /proc/PID/cwd or root) mountpoint or below it? */
static int path_under(const char *link, const char *mountpoint)
{
	size_t n = strlen(mountpoint);

	return strncmp(link, mountpoint, n) == 0 &&
	       (link[n] == '\0' || link[n] == '/');
}

/* What process pid holds of the mount (mount ID mnt_id, device maj:min,
 * at mountpoint), as a phrase, or NULL.  Only /proc is read: readlink of
 * its cwd and root, the mnt_id of each open file in fdinfo, the devices
 * of its mappings; nothing on the mount itself is touched, so a daemon
 * that does not answer cannot hang the search. */
static const char *what_holds(long pid, int mnt_id, unsigned maj,
			      unsigned min, const char *mountpoint)
{
	char path[64], link[PATH_MAX], line[PATH_MAX + 128];
	struct dirent *de;
	const char *what = NULL;
	ssize_t n;
	DIR *d;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/fdinfo", pid);
	if (mnt_id >= 0 && (d = opendir(path))) {
		while (!what && (de = readdir(d))) {
			char info[96];

			if (de->d_name[0] == '.')
				continue;
			snprintf(info, sizeof(info), "/proc/%ld/fdinfo/%s", pid,
				 de->d_name);
			if (!(f = fopen(info, "re")))
				continue;
			while (fgets(line, sizeof(line), f)) {
				int id;

				if (sscanf(line, "mnt_id: %d", &id) == 1) {
					if (id == mnt_id)
						what = "an open file";
					break;
				}
			}
			fclose(f);
		}
		closedir(d);
	}
	if (what)
		return what;
	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	if ((f = fopen(path, "re"))) {
		while (!what && fgets(line, sizeof(line), f))
			if (maps_on_dev(line, maj, min))
				what = "a mapped file";
		fclose(f);
	}
	if (what)
		return what;
	snprintf(path, sizeof(path), "/proc/%ld/cwd", pid);
	if ((n = readlink(path, link, sizeof(link) - 1)) > 0) {
		link[n] = '\0';
		if (path_under(link, mountpoint))
			return "its working directory";
	}
	snprintf(path, sizeof(path), "/proc/%ld/root", pid);
	if ((n = readlink(path, link, sizeof(link) - 1)) > 0) {
		link[n] = '\0';
		if (path_under(link, mountpoint))
			return "its root directory";
	}
	return NULL;
}

int bfs_daemon_holders(const char *mountpoint, long skip, char *out,
		       size_t cap)
{
	char devno[64] = "";
	unsigned maj = ~0u, min = ~0u;
	int mnt_id, found = 0;
	size_t len = 0;
	struct dirent *de;
	DIR *d;

	out[0] = '\0';
	if (!bfs_host_find_mount(mountpoint, devno, sizeof(devno)))
		return 0;
	mnt_id = bfs_host_mount_id(mountpoint);
	if (sscanf(devno, "%u:%u", &maj, &min) != 2)
		maj = min = ~0u;
	if (!(d = opendir("/proc")))
		return 0;
	while ((de = readdir(d))) {
		char path[64], comm[64] = "?", esc[256];
		const char *what;
		long pid;
		FILE *f;
		char *end;

		pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid() || pid == skip)
			continue;
		if (!(what = what_holds(pid, mnt_id, maj, min, mountpoint)))
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
		if ((f = fopen(path, "re"))) {
			if (fgets(comm, sizeof(comm), f))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
		found++;
		if (found <= 8 && len < cap) {
			/* a process name is anyone's choice: no control bytes */
			int w = snprintf(out + len, cap - len, "%s%s (pid %ld: %s)",
					 len ? ", " : "",
					 bfs_log_escape(comm, esc, sizeof(esc)),
					 pid, what);

			len += w > 0 ? (size_t)w : 0;
		}
	}
	closedir(d);
	if (found > 8 && len < cap)
		snprintf(out + len, cap - len, " and %d more", found - 8);
	return found;
}

/* ---- unmount --------------------------------------------------------- */

/* The unmount failed with EBUSY: say who holds it. */
static void say_busy(const char *mountpoint, pid_t daemon)
{
	char who[2048];

	if (bfs_daemon_holders(mountpoint, (long)daemon, who, sizeof(who)))
		fprintf(stderr,
			"batchfs: %s is busy: held by %s; end or move them, or detach it now with 'batchfs unmount --lazy %s'\n",
			mountpoint, who, mountpoint);
	else
		fprintf(stderr,
			"batchfs: %s is busy (no process of this user is seen holding it; as root, 'batchfs unmount' names them); 'batchfs unmount --lazy %s' detaches it now\n",
			mountpoint, mountpoint);
}

int bfs_daemon_unmount(const char *path, int lazy)
{
	char mountpoint[PATH_MAX], who[2048] = "";
	struct pollfd pf = { .fd = -1, .events = POLLIN };
	pid_t pid, daemon;
	int wst = 0, rc = 0, err, held = 0;

	if ((err = bfs_host_resolve(path, mountpoint, sizeof(mountpoint))) ||
	    !bfs_host_is_mountpoint(mountpoint)) {
		fprintf(stderr, "batchfs: %s is not mounted\n", path);
		return 1;
	}
	daemon = daemon_pid(mountpoint);
	pf.fd = watch_pid(daemon);
	/* after a lazy unmount the holders are no longer found by path */
	if (lazy)
		held = bfs_daemon_holders(mountpoint, (long)daemon, who,
					  sizeof(who));
	if (geteuid() == 0) {
		/* EBUSY for an instant is possible while the daemon looks up a
		 * batch it is about to push (push_file); a mount someone holds
		 * open stays busy and fails after the retries. */
		err = 0;
		for (int i = 0; i < 20; i++) {
			if (umount2(mountpoint, lazy ? MNT_DETACH : 0) == 0)
				goto wait;
			if ((err = errno) != EBUSY)
				break;
			usleep(50 * 1000);
		}
		if (err == EBUSY) {
			say_busy(mountpoint, daemon);
			rc = 1;
			goto out;
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
		if (lazy)
			execlp("fusermount3", "fusermount3", "-u", "-z", mountpoint,
			       (char *)NULL);
		else
			execlp("fusermount3", "fusermount3", "-u", mountpoint,
			       (char *)NULL);
		perror("batchfs: fusermount3");
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &wst, 0) < 0 || !WIFEXITED(wst) ||
	    WEXITSTATUS(wst) != 0) {
		if (!lazy && bfs_host_is_mountpoint(mountpoint) &&
		    bfs_daemon_holders(mountpoint, (long)daemon, who, sizeof(who)))
			say_busy(mountpoint, daemon);
		else
			fprintf(stderr, "batchfs: unmount %s failed\n", mountpoint);
		rc = 1;
		goto out;
	}
wait:
	if (lazy) {
		/* Detached: the daemon ends when the last holder lets go,
		 * which may be never; wait only briefly. */
		if (pf.fd >= 0 && poll(&pf, 1, held ? 500 : 2000) == 0)
			printf("batchfs: %s is detached; its daemon (pid %ld) exits once %s let%s go\n",
			       mountpoint, (long)daemon,
			       held ? who : "the processes that hold it",
			       held == 1 ? "s" : "");
		goto out;
	}
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
