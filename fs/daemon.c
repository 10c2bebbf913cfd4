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

/* ---- asking a mount's daemon, with a deadline ------------------------ */

/* A job run on a thread of its own that the caller waits for at most a
 * deadline.  The caller owns it until it gives up; then the thread does,
 * and frees it (and its argument, with free_arg) once fn returns, which
 * for a request to a stopped daemon may be never: the process's exit
 * ends it (a FUSE request waits killably).  lock guards done and
 * abandoned. */
struct deadline_job {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int done;                 /* protected by lock */
	int abandoned;            /* protected by lock */
	void (*fn)(void *arg);
	void (*free_arg)(void *arg);
	void *arg;
};

static void job_free(struct deadline_job *j)
{
	pthread_mutex_destroy(&j->lock);
	pthread_cond_destroy(&j->cv);
	free(j);
}

static void *deadline_main(void *p)
{
	struct deadline_job *j = p;
	int abandoned;

	j->fn(j->arg);
	pthread_mutex_lock(&j->lock);
	j->done = 1;
	abandoned = j->abandoned;
	pthread_cond_signal(&j->cv);
	pthread_mutex_unlock(&j->lock);
	/* not abandoned: j is the waiter's from here on, never touched */
	if (abandoned) {
		j->free_arg(j->arg);
		job_free(j);
	}
	return NULL;
}

/* Run fn(arg) on its own thread and wait for it at most timeout_ms.  0:
 * it returned (arg is the caller's again); -ETIMEDOUT: it has not, and
 * arg is now the thread's (free_arg frees it); -errno when no thread
 * could be had (fn not run). */
static int run_with_deadline(void (*fn)(void *), void *arg,
			     void (*free_arg)(void *), int timeout_ms)
{
	struct deadline_job *j = calloc(1, sizeof(*j));
	pthread_condattr_t ca;
	pthread_attr_t ta;
	struct timespec until;
	pthread_t t;
	int err = 0;

	if (!j)
		return -ENOMEM;
	pthread_mutex_init(&j->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->cv, &ca);
	pthread_condattr_destroy(&ca);
	j->fn = fn;
	j->free_arg = free_arg;
	j->arg = arg;
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&t, &ta, deadline_main, j);
	pthread_attr_destroy(&ta);
	if (err) {
		job_free(j);
		return -err;
	}
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&j->lock);
	while (!j->done)
		if (pthread_cond_timedwait(&j->cv, &j->lock, &until) == ETIMEDOUT)
			break;
	if (!j->done) {
		j->abandoned = 1;
		pthread_mutex_unlock(&j->lock);
		return -ETIMEDOUT;
	}
	pthread_mutex_unlock(&j->lock);
	job_free(j);
	return 0;
}

/* user.batchfs.pid of a mount root (fs/view.c answers it on the root). */
struct pid_ask {
	char path[PATH_MAX];
	long pid;     /* > 0 when it answered */
	int err;      /* else the errno of getxattr */
};

static void pid_ask_main(void *arg)
{
	struct pid_ask *p = arg;
	char v[32];
	ssize_t n = getxattr(p->path, "user.batchfs.pid", v, sizeof(v) - 1);

	if (n > 0) {
		v[n] = '\0';
		p->pid = strtol(v, NULL, 10);
		if (p->pid <= 0)
			p->err = EINVAL;
	} else {
		p->err = n == 0 ? EINVAL : errno;
	}
}

/* A file read whole. */
struct file_read {
	char path[PATH_MAX];
	char *buf;    /* malloc'd */
	size_t len;
	int err;      /* 0, or an errno */
};

static void file_read_main(void *arg)
{
	struct file_read *r = arg;
	size_t cap = 0;
	int fd = open(r->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		r->err = errno;
		return;
	}
	for (;;) {
		ssize_t n;

		if (r->len + 4096 > cap) {
			char *nb = realloc(r->buf, cap = cap ? cap * 2 : 65536);

			if (!nb) {
				r->err = ENOMEM;
				break;
			}
			r->buf = nb;
		}
		n = read(fd, r->buf + r->len, cap - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r->err = errno;
			break;
		}
		if (n == 0)
			break;
		r->len += (size_t)n;
	}
	close(fd);
}

static void file_read_free(void *arg)
{
	struct file_read *r = arg;

	free(r->buf);
	free(r);
}

int bfs_daemon_read_file(const char *path, int timeout_ms, char **out,
			 size_t *len)
{
	struct file_read *r = calloc(1, sizeof(*r));
	int err;

	*out = NULL;
	*len = 0;
	if (!r)
		return -ENOMEM;
	if (snprintf(r->path, sizeof(r->path), "%s", path) >= (int)sizeof(r->path)) {
		free(r);
		return -ENAMETOOLONG;
	}
	if ((err = run_with_deadline(file_read_main, r, file_read_free,
				     timeout_ms))) {
		if (err != -ETIMEDOUT)
			free(r);
		return err;
	}
	if (r->err) {
		err = -r->err;
		file_read_free(r);
		return err;
	}
	*out = r->buf;
	*len = r->len;
	free(r);
	return 0;
}

/* ---- finding a mount's daemon without touching the mount -------------- */

int bfs_daemon_mark(const char *mountpoint)
{
	return open(mountpoint, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* The mnt_id of descriptor fd of process pid, or -1. */
static int fd_mnt_id(long pid, const char *fd)
{
	char path[96], line[256];
	FILE *f;
	int id = -1;

	snprintf(path, sizeof(path), "/proc/%ld/fdinfo/%s", pid, fd);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "mnt_id: %d", &id) == 1)
			break;
	fclose(f);
	return id;
}

/* Does process pid look like the daemon of mount mi on mountpoint: it has
 * /dev/fuse open, and the mark (bfs_daemon_mark): a descriptor of the
 * mount point directory beneath the mount (its path, on the mount that
 * mi sits on)? */
static int is_daemon_of(long pid, const bfs_host_mount *mi,
			const char *mountpoint)
{
	char path[64], fdpath[96], link[PATH_MAX];
	int fuse = 0, mark = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
	if (!(d = opendir(path)))
		return 0;
	while ((!fuse || !mark) && (de = readdir(d))) {
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
		if ((n = readlink(fdpath, link, sizeof(link) - 1)) <= 0)
			continue;
		link[n] = '\0';
		if (!strcmp(link, "/dev/fuse"))
			fuse = 1;
		else if (!strcmp(link, mountpoint) &&
			 fd_mnt_id(pid, de->d_name) == mi->parent_id)
			mark = 1;
	}
	closedir(d);
	return fuse && mark;
}

/* The state letter of process pid ("R", "S", "T" stopped, "t" traced,
 * "Z"), or 0 when it is gone. */
static char proc_state(long pid)
{
	char path[64], buf[512], *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (!(f = fopen(path, "re")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "pid (comm) S ...": comm may hold anything, the state follows the
	 * last ')' */
	if (!(p = strrchr(buf, ')')) || p[1] != ' ' || !p[2])
		return 0;
	return p[2];
}

/* The processes that look like mi's daemon (is_daemon_of): the first in
 * *pid, how many there are returned.  Only /proc is read; processes of
 * other users are seen only by root. */
static int find_daemon(const bfs_host_mount *mi, const char *mountpoint,
		       long *pid)
{
	struct dirent *de;
	int found = 0;
	DIR *d;

	*pid = 0;
	if (!(d = opendir("/proc")))
		return 0;
	while ((de = readdir(d))) {
		char *end;
		long p = strtol(de->d_name, &end, 10);

		if (*end || p <= 0 || p == (long)getpid())
			continue;
		if (!is_daemon_of(p, mi, mountpoint))
			continue;
		if (!found++)
			*pid = p;
	}
	closedir(d);
	return found;
}

int bfs_daemon_probe(const char *path, int timeout_ms,
		     bfs_daemon_probe_result *out)
{
	char mountpoint[PATH_MAX];
	bfs_host_mount *mi = malloc(sizeof(*mi));
	struct pid_ask *ask = NULL;
	long found_pid = 0;
	int n, err;

	memset(out, 0, sizeof(*out));
	out->state = BFS_DAEMON_NOT_MOUNTED;
	if (!mi)
		return -ENOMEM;
	if ((err = bfs_host_resolve(path, mountpoint, sizeof(mountpoint))) ||
	    !bfs_host_mount_info(mountpoint, mi))
		goto out;
	snprintf(out->fstype, sizeof(out->fstype), "%s", mi->fstype);
	if (strcmp(mi->fstype, "fuse.batchfs") != 0) {
		out->state = BFS_DAEMON_OTHER_FS;
		goto out;
	}
	/* A stopped daemon is seen in /proc before anything is asked of the
	 * mount (which would wait until it is continued). */
	n = find_daemon(mi, mountpoint, &found_pid);
	if (n == 1) {
		out->pid = found_pid;
		out->proc_state = proc_state(found_pid);
		if (out->proc_state == 'T' || out->proc_state == 't') {
			out->state = BFS_DAEMON_STOPPED;
			goto out;
		}
	}
	if (!(ask = calloc(1, sizeof(*ask)))) {
		err = -ENOMEM;
		goto out;
	}
	snprintf(ask->path, sizeof(ask->path), "%s", mountpoint);
	err = run_with_deadline(pid_ask_main, ask, free, timeout_ms);
	if (err == -ETIMEDOUT) {
		ask = NULL; /* the thread's now */
		err = 0;
		out->state = BFS_DAEMON_SILENT;
		/* stopped since, or one of several that look like it */
		if (out->pid && (out->proc_state = proc_state(out->pid)) &&
		    (out->proc_state == 'T' || out->proc_state == 't'))
			out->state = BFS_DAEMON_STOPPED;
		goto out;
	}
	if (err)
		goto out;
	if (ask->pid > 0) {
		out->state = BFS_DAEMON_SERVING;
		out->pid = ask->pid;
		out->proc_state = proc_state(ask->pid);
	} else if (ask->err == ENOTCONN || ask->err == ECONNABORTED) {
		/* ECONNABORTED: the ask raced the end of the connection of a
		 * daemon that just died (seen under load after a kill -9) */
		out->state = BFS_DAEMON_DEAD;
		out->pid = 0;
	} else {
		out->state = BFS_DAEMON_FOREIGN;
		out->err = ask->err;
	}
out:
	free(ask);
	free(mi);
	return err;
}

void bfs_daemon_describe(const char *mountpoint,
			 const bfs_daemon_probe_result *r, int timeout_ms,
			 char *out, size_t cap)
{
	char esc[PATH_MAX * 4 + 16];
	const char *m = bfs_log_escape(mountpoint, esc, sizeof(esc));

	switch (r->state) {
	case BFS_DAEMON_NOT_MOUNTED:
		snprintf(out, cap, "%s is not mounted", m);
		break;
	case BFS_DAEMON_OTHER_FS:
		snprintf(out, cap, "%s is a%s %s mount, not batchfs", m,
			 strchr("aeiou", r->fstype[0]) && r->fstype[0] ? "n" : "",
			 r->fstype[0] ? r->fstype : "unknown");
		break;
	case BFS_DAEMON_DEAD:
		snprintf(out, cap, "%s is a dead batchfs mount: its daemon is gone", m);
		break;
	case BFS_DAEMON_STOPPED:
		snprintf(out, cap, "%s: its daemon %ld is stopped (state %c); 'kill -CONT %ld' resumes it",
			 m, r->pid, r->proc_state, r->pid);
		break;
	case BFS_DAEMON_SILENT:
		if (r->pid)
			snprintf(out, cap, "%s: its daemon %ld (state %c) does not answer within %.1f s",
				 m, r->pid, r->proc_state ? r->proc_state : '?',
				 timeout_ms / 1000.0);
		else
			snprintf(out, cap, "%s: its daemon does not answer within %.1f s",
				 m, timeout_ms / 1000.0);
		break;
	case BFS_DAEMON_FOREIGN:
		snprintf(out, cap, "%s is a fuse.batchfs mount that does not answer as batchfs (user.batchfs.pid: %s)",
			 m, strerror(r->err));
		break;
	case BFS_DAEMON_SERVING:
		snprintf(out, cap, "%s is served by batchfs daemon %ld", m, r->pid);
		break;
	}
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
	if (strncmp(comm, "batchfs", 7) != 0 &&
	    strncmp(comm, "mount.batchfs", 13) != 0 &&
	    strncmp(comm, "mount.fuse.batc", 15) != 0) {
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
	char mountpoint[PATH_MAX], who[2048] = "", why[PATH_MAX * 4 + 256];
	struct pollfd pf = { .fd = -1, .events = POLLIN };
	bfs_daemon_probe_result pr;
	pid_t pid, daemon;
	int wst = 0, rc = 0, err, held = 0;

	if ((err = bfs_host_resolve(path, mountpoint, sizeof(mountpoint))) ||
	    !bfs_host_is_mountpoint(mountpoint)) {
		fprintf(stderr, "batchfs: %s is not mounted\n", path);
		return 1;
	}
	/* Only a batchfs mount is unmounted, and one whose daemon answers as
	 * batchfs (user.batchfs.pid), or a dead one (its daemon gone). */
	bfs_daemon_probe(mountpoint, BFS_DAEMON_PROBE_MS, &pr);
	bfs_daemon_describe(path, &pr, BFS_DAEMON_PROBE_MS, why, sizeof(why));
	switch (pr.state) {
	case BFS_DAEMON_NOT_MOUNTED:
		fprintf(stderr, "batchfs: %s is not mounted\n", path);
		return 1;
	case BFS_DAEMON_OTHER_FS:
	case BFS_DAEMON_FOREIGN:
		fprintf(stderr, "batchfs: %s; nothing was unmounted\n", why);
		return 1;
	case BFS_DAEMON_STOPPED:
	case BFS_DAEMON_SILENT:
		/* a request stuck in a daemon keeps the mount busy: only a
		 * lazy unmount can detach it */
		if (!lazy) {
			fprintf(stderr,
				"batchfs: %s; nothing was unmounted ('batchfs unmount --lazy %s' detaches it now)\n",
				why, path);
			return 1;
		}
		break;
	case BFS_DAEMON_DEAD:
	case BFS_DAEMON_SERVING:
		break;
	}
	daemon = pr.pid;
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
		if (pr.state == BFS_DAEMON_STOPPED)
			printf("batchfs: %s is detached; its daemon (pid %ld) is stopped (state %c): it exits once continued ('kill -CONT %ld')%s%s%s\n",
			       mountpoint, (long)daemon, pr.proc_state,
			       (long)daemon, held ? " and " : "",
			       held ? who : "", held ? (held == 1 ? " lets go" : " let go") : "");
		else if (pf.fd >= 0 && poll(&pf, 1, held ? 500 : 2000) == 0)
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
