/*
 * test_daemon.c - fs/daemon's start-up handshake: progress lines before
 * the result, shown only on a terminal, never mixed into the result; a
 * failed start and a daemon that dies while starting.
 *
 * Each case runs bfs_daemon_run in a child whose stdout is a pipe and
 * whose stderr is a pipe or a pseudo-terminal, and looks at what it wrote.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fs/daemon.h"

struct result {
	int status;          /* of the `batchfs mount` side */
	char out[4096];      /* its stdout */
	char err[4096];      /* its stderr */
};

static void drain(int fd, char *buf, size_t cap, size_t *len)
{
	ssize_t n;

	while (*len + 1 < cap && (n = read(fd, buf + *len, cap - 1 - *len)) > 0)
		*len += (size_t)n;
	buf[*len] = '\0';
}

/* Run bfs_daemon_run(serve) as `batchfs mount` would, in a child;
 * stderr a terminal when tty. */
static void run_start(int (*serve)(void *, int), int tty, struct result *r)
{
	int out[2], err[2], master = -1, wst;
	size_t olen = 0, elen = 0;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	assert_int_equal(pipe(out), 0);
	if (tty) {
		assert_int_equal(openpty(&master, &err[1], NULL, NULL, NULL), 0);
		err[0] = master;
	} else {
		assert_int_equal(pipe(err), 0);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		close(out[0]);
		close(err[0]);
		int rc = bfs_daemon_run(0, serve, NULL);

		fflush(NULL); /* as main's return would */
		_exit(rc);
	}
	close(out[1]);
	close(err[1]);
	assert_int_equal(waitpid(pid, &wst, 0), pid);
	r->status = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128;
	drain(out[0], r->out, sizeof(r->out), &olen);
	/* a pty's master reads EIO once the slave is closed: fine */
	fcntl(err[0], F_SETFL, O_NONBLOCK);
	drain(err[0], r->err, sizeof(r->err), &elen);
	close(out[0]);
	close(err[0]);
}

static int serve_ready(void *ctx, int fd)
{
	bfs_daemon_progress(fd, "batchfs: indexing 1/2 shards, 10 records");
	bfs_daemon_progress(fd, "batchfs: indexed 2/2 shards, 20 records \x1b[2J");
	bfs_daemon_notify(fd, 1, "batchfs: mounted /d on /m");
	bfs_daemon_detach(fd);
	return 0;
}

static int serve_fails(void *ctx, int fd)
{
	bfs_daemon_progress(fd, "batchfs: indexing 1/2 shards, 10 records");
	bfs_daemon_notify(fd, 0, "batchfs: cannot index /d: no shards");
	return 1;
}

static int serve_dies(void *ctx, int fd)
{
	bfs_daemon_progress(fd, "batchfs: indexing 1/2 shards, 10 records");
	_exit(3);
}

static void test_daemon_start_shows_no_progress_where_stderr_is_not_a_terminal(void **state)
{
	struct result r;

	run_start(serve_ready, 0, &r);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "batchfs: mounted /d on /m\n");
	assert_string_equal(r.err, "");
}

static void test_daemon_start_shows_progress_on_a_terminal_then_the_result(void **state)
{
	struct result r;

	run_start(serve_ready, 1, &r);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "batchfs: mounted /d on /m\n");
	/* each line overwrites the last; the last is ended before the result;
	 * a control byte in the text is escaped */
	assert_non_null(strstr(r.err, "\rbatchfs: indexing 1/2 shards, 10 records\033[K"));
	assert_non_null(strstr(r.err, "\rbatchfs: indexed 2/2 shards, 20 records \\x1b[2J\033[K"));
	assert_int_equal(r.err[strlen(r.err) - 1], '\n');
}

static void test_daemon_start_that_fails_after_progress_says_why(void **state)
{
	struct result r;
	const char *msg = "batchfs: cannot index /d: no shards";

	run_start(serve_fails, 0, &r);
	assert_int_equal(r.status, 1);
	assert_string_equal(r.out, "");
	assert_string_equal(r.err, "batchfs: cannot index /d: no shards\n");
	run_start(serve_fails, 1, &r);
	assert_int_equal(r.status, 1);
	/* the progress line is ended, then the message has a line of its own */
	assert_non_null(strstr(r.err, "10 records\033[K\r\n"));
	assert_non_null(strstr(r.err, msg));
}

static void test_daemon_that_dies_while_starting_is_reported(void **state)
{
	struct result r;

	run_start(serve_dies, 0, &r);
	assert_int_equal(r.status, 1);
	assert_string_equal(r.err,
			    "batchfs: the daemon exited during start-up (status 3)\n");
}

/* ---- asking a daemon, with a deadline ---- */

/* A read that never returns (a FIFO nobody writes: its open waits, as a
 * read through a stopped daemon's mount does) comes back -ETIMEDOUT; the
 * thread left waiting finishes and frees its part once it can. */
static void test_daemon_read_file_gives_up_at_its_deadline(void **state)
{
	char dir[] = "/tmp/test_daemon.XXXXXX", fifo[64], *buf = NULL;
	size_t len = 1;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(bfs_daemon_read_file(fifo, 100, &buf, &len), -ETIMEDOUT);
	assert_null(buf);
	assert_int_equal(len, 0);
	/* let the abandoned reader go: it sees an empty file, then EOF */
	fd = open(fifo, O_WRONLY);
	assert_true(fd >= 0);
	close(fd);
	usleep(100 * 1000); /* its exit is not waited for; only to free */
	unlink(fifo);
	rmdir(dir);
}

static void test_daemon_read_file_reads_a_file_whole(void **state)
{
	char path[] = "/tmp/test_daemon_file.XXXXXX", *buf = NULL;
	static char big[200000];
	size_t len = 0;
	int fd;

	(void)state;
	memset(big, 'x', sizeof(big));
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
	close(fd);
	assert_int_equal(bfs_daemon_read_file(path, 5000, &buf, &len), 0);
	assert_int_equal(len, sizeof(big));
	assert_memory_equal(buf, big, sizeof(big));
	free(buf);
	assert_int_equal(bfs_daemon_read_file("/nonexistent/x", 5000, &buf, &len),
			 -ENOENT);
	assert_null(buf);
	unlink(path);
}

/* Another file system is named by its type, and nothing is asked of it. */
static void test_daemon_probe_names_another_file_system(void **state)
{
	bfs_daemon_probe_result r;
	char why[512];

	(void)state;
	assert_int_equal(bfs_daemon_probe("/proc", 1000, &r), 0);
	assert_int_equal(r.state, BFS_DAEMON_OTHER_FS);
	assert_string_equal(r.fstype, "proc");
	bfs_daemon_describe("/proc", &r, 1000, why, sizeof(why));
	assert_string_equal(why, "/proc is a proc mount, not batchfs");
}

static void test_daemon_probe_of_a_plain_directory_finds_nothing_mounted(void **state)
{
	char dir[] = "/tmp/test_daemon_dir.XXXXXX", why[512];
	bfs_daemon_probe_result r;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(bfs_daemon_probe(dir, 1000, &r), 0);
	assert_int_equal(r.state, BFS_DAEMON_NOT_MOUNTED);
	assert_int_equal(r.pid, 0);
	bfs_daemon_describe(dir, &r, 1000, why, sizeof(why));
	assert_non_null(strstr(why, "is not mounted"));
	rmdir(dir);
}

/* The sentences status and unmount print, for each state. */
static void test_daemon_describe_says_what_became_of_the_daemon(void **state)
{
	bfs_daemon_probe_result r = { 0 };
	char why[512];

	(void)state;
	r.state = BFS_DAEMON_STOPPED;
	r.pid = 42;
	r.proc_state = 'T';
	bfs_daemon_describe("/m", &r, 3000, why, sizeof(why));
	assert_string_equal(why, "/m: its daemon 42 is stopped (state T); 'kill -CONT 42' resumes it");
	r.state = BFS_DAEMON_SILENT;
	r.proc_state = 'S';
	bfs_daemon_describe("/m", &r, 3000, why, sizeof(why));
	assert_string_equal(why, "/m: its daemon 42 (state S) does not answer within 3.0 s");
	r.state = BFS_DAEMON_OTHER_FS;
	snprintf(r.fstype, sizeof(r.fstype), "ext4");
	bfs_daemon_describe("t1", &r, 3000, why, sizeof(why));
	assert_string_equal(why, "t1 is an ext4 mount, not batchfs");
	r.state = BFS_DAEMON_DEAD;
	bfs_daemon_describe("/m", &r, 3000, why, sizeof(why));
	assert_string_equal(why, "/m is a dead batchfs mount: its daemon is gone");
	r.state = BFS_DAEMON_FOREIGN;
	r.err = ENODATA;
	bfs_daemon_describe("/m\033[2J", &r, 3000, why, sizeof(why));
	assert_null(strchr(why, '\033')); /* a path may hold anything */
	assert_non_null(strstr(why, "does not answer as batchfs"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daemon_start_shows_no_progress_where_stderr_is_not_a_terminal),
		cmocka_unit_test(test_daemon_start_shows_progress_on_a_terminal_then_the_result),
		cmocka_unit_test(test_daemon_start_that_fails_after_progress_says_why),
		cmocka_unit_test(test_daemon_that_dies_while_starting_is_reported),
		cmocka_unit_test(test_daemon_read_file_gives_up_at_its_deadline),
		cmocka_unit_test(test_daemon_read_file_reads_a_file_whole),
		cmocka_unit_test(test_daemon_probe_names_another_file_system),
		cmocka_unit_test(test_daemon_probe_of_a_plain_directory_finds_nothing_mounted),
		cmocka_unit_test(test_daemon_describe_says_what_became_of_the_daemon),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
