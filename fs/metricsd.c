/*
 * metricsd.c - the mount's metrics file and /metrics page (see
 * metricsd.h): one thread, poll(2) on the socket and a wake-up pipe.
 */
#include "fs/metricsd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"

#define REQ_MAX     8192   /* bytes of a request head */
#define REQ_TIME_MS 2000   /* to send it */
#define SEND_TIME_S 5      /* to take the answer */

struct bfs_metricsd {
	bfs_metricsd_opts o;
	int lfd;               /* listening socket, or -1 */
	int port;
	int wake[2];           /* a byte on wake[1]: stop */
	pthread_t thread;
	int running;
};

/* ---- pure parts --------------------------------------------------------- */

int bfs_metricsd_is_loopback(const char *s)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, s, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, s, &a6) == 1) {
		if (IN6_IS_ADDR_LOOPBACK(&a6))
			return 1;
		if (IN6_IS_ADDR_V4MAPPED(&a6))
			return a6.s6_addr[12] == 127;
		return 0;
	}
	return -EINVAL;
}

int bfs_metricsd_route(const char *req, size_t len, int *head)
{
	const char *sp1, *sp2, *eol;
	size_t mlen, plen;

	*head = 0;
	eol = memchr(req, '\n', len);
	if (!eol)
		eol = req + len;
	sp1 = memchr(req, ' ', (size_t)(eol - req));
	if (!sp1 || sp1 == req)
		return 400;
	sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1)
		return 400;
	mlen = (size_t)(sp1 - req);
	plen = (size_t)(sp2 - sp1 - 1);
	if ((size_t)(eol - sp2 - 1) < 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0)
		return (size_t)(eol - sp2 - 1) >= 5 && !memcmp(sp2 + 1, "HTTP/", 5)
			? 505 : 400;
	if (!(mlen == 3 && !memcmp(req, "GET", 3)) &&
	    !(mlen == 4 && !memcmp(req, "HEAD", 4)))
		return 405;
	*head = mlen == 4;
	{
		/* the path without a query */
		const char *q = memchr(sp1 + 1, '?', plen);

		if (q)
			plen = (size_t)(q - sp1 - 1);
	}
	if ((plen == 8 && !memcmp(sp1 + 1, "/metrics", 8)) ||
	    (plen == 1 && sp1[1] == '/'))
		return 200;
	return 404;
}

/* ---- the file ----------------------------------------------------------- */

static int write_file(bfs_metricsd *m, char *errmsg)
{
	char tmp[PATH_MAX], *buf = NULL;
	size_t len = 0, off = 0;
	int fd, err;

	if ((err = m->o.render(m->o.ctx, &buf, &len))) {
		bfs_seterr(errmsg, "metrics: %s", strerror(-err));
		return err;
	}
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", m->o.file) >= (int)sizeof(tmp)) {
		free(buf);
		bfs_seterr(errmsg, "--metrics-file %s: name too long", m->o.file);
		return -ENAMETOOLONG;
	}
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		err = -errno;
		bfs_seterr(errmsg, "--metrics-file %s: cannot create %s: %s",
			   m->o.file, tmp, strerror(errno));
		free(buf);
		return err;
	}
	(void)fchmod(fd, 0644); /* node_exporter may run as another user */
	while (off < len) {
		ssize_t n = write(fd, buf + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			bfs_seterr(errmsg, "--metrics-file %s: writing %s: %s",
				   m->o.file, tmp, strerror(errno));
			goto fail;
		}
		off += (size_t)n;
	}
	if (close(fd) != 0) {
		fd = -1;
		err = -errno;
		bfs_seterr(errmsg, "--metrics-file %s: writing %s: %s", m->o.file,
			   tmp, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, m->o.file) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "--metrics-file %s: rename: %s", m->o.file,
			   strerror(errno));
		goto fail;
	}
	free(buf);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	free(buf);
	return err;
}

/* ---- HTTP ------------------------------------------------------------- */

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return; /* gone, or past its deadline: nothing to tell */
		p += k;
		n -= (size_t)k;
	}
}

static void reply(int fd, int code, const char *type, const char *body,
		  size_t blen, int head)
{
	const char *why = code == 200 ? "OK" : code == 400 ? "Bad Request"
		: code == 404 ? "Not Found" : code == 405 ? "Method Not Allowed"
		: code == 408 ? "Request Timeout"
		: code == 431 ? "Request Header Fields Too Large"
		: code == 505 ? "HTTP Version Not Supported"
		: "Internal Server Error";
	char hdr[256];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 code, why, type, blen, code == 405 ? "Allow: GET, HEAD\r\n" : "");

	send_all(fd, hdr, (size_t)n);
	if (!head)
		send_all(fd, body, blen);
}

/* Read the head of one request (to the blank line) within the limits and
 * answer it. */
static void serve_one(bfs_metricsd *m, int fd)
{
	char req[REQ_MAX + 1];
	size_t len = 0;
	struct timespec t0, now;
	struct timeval tv = { SEND_TIME_S, 0 };
	int code = 0, head = 0;

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		long left;
		ssize_t n;

		req[len] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
		if (len == REQ_MAX) {
			code = 431;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = REQ_TIME_MS - ((now.tv_sec - t0.tv_sec) * 1000 +
				      (now.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0 || poll(&p, 1, (int)left) == 0) {
			code = 408;
			break;
		}
		n = recv(fd, req + len, REQ_MAX - len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return; /* closed before a whole request: no answer */
		len += (size_t)n;
	}
	if (!code)
		code = bfs_metricsd_route(req, len, &head);
	if (code == 200) {
		char *buf = NULL;
		size_t blen = 0;

		if (m->o.render(m->o.ctx, &buf, &blen) == 0)
			reply(fd, 200, "text/plain; version=0.0.4; charset=utf-8",
			      buf, blen, head);
		else
			reply(fd, 500, "text/plain", "no metrics\n", 11, head);
		free(buf);
	} else {
		char body[64];
		int n = snprintf(body, sizeof(body), "%d\n", code);

		reply(fd, code, "text/plain", body, (size_t)n, 0);
	}
}

/* ---- the thread --------------------------------------------------------- */

static double mono_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *metricsd_main(void *arg)
{
	bfs_metricsd *m = arg;
	unsigned every = m->o.interval_s ? m->o.interval_s : 15;
	double next = mono_s() + every;

	for (;;) {
		struct pollfd p[2] = { { m->wake[0], POLLIN, 0 }, { m->lfd, POLLIN, 0 } };
		int timeout = -1, n;

		if (m->o.file) {
			double left = next - mono_s();

			timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
		}
		n = poll(p, m->lfd >= 0 ? 2 : 1, timeout);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && p[0].revents)
			break;
		if (n > 0 && m->lfd >= 0 && (p[1].revents & POLLIN)) {
			int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);

			if (fd >= 0) {
				serve_one(m, fd);
				close(fd);
			}
		}
		if (m->o.file && mono_s() >= next) {
			/* a failed write (full disk) is tried again next time;
			 * the collector reads the last whole file meanwhile */
			write_file(m, NULL);
			next = mono_s() + every;
		}
	}
	return NULL;
}

/* ---- start and stop ----------------------------------------------------- */

static int bind_port(bfs_metricsd *m, char *errmsg)
{
	const char *addr = m->o.addr ? m->o.addr : "127.0.0.1";
	struct addrinfo hints = { 0 }, *res = NULL, *ai;
	char port[16], host[NI_MAXHOST];
	int err, one = 1, fd = -1;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%d", m->o.port);
	if ((err = getaddrinfo(addr, port, &hints, &res)) != 0) {
		bfs_seterr(errmsg, "--metrics-addr %s: %s", addr, gai_strerror(err));
		return -EINVAL;
	}
	/* every address the name gives must be loopback unless asked */
	for (ai = res; ai; ai = ai->ai_next) {
		if (getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof(host),
				NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		if (!m->o.public && bfs_metricsd_is_loopback(host) != 1) {
			bfs_seterr(errmsg,
				   "--metrics-addr %s: %s is not a loopback address: the metrics page would be open to the network (add --metrics-public to allow that)",
				   addr, host);
			freeaddrinfo(res);
			return -EPERM;
		}
	}
	err = -EADDRNOTAVAIL;
	for (ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
			err = -errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		bfs_seterr(errmsg, "--metrics-port %d on %s: %s", m->o.port, addr,
			   strerror(-err));
		return err;
	}
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		m->port = m->o.port;
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
			m->port = ntohs(ss.ss_family == AF_INET6
				? ((struct sockaddr_in6 *)&ss)->sin6_port
				: ((struct sockaddr_in *)&ss)->sin_port);
	}
	m->lfd = fd;
	return 0;
}

int bfs_metricsd_start(const bfs_metricsd_opts *o, bfs_metricsd **out,
		       char *errmsg)
{
	bfs_metricsd *m;
	int err;

	*out = NULL;
	if ((!o->file && o->port < 0) || !o->render || o->port > 65535) {
		bfs_seterr(errmsg, "metrics: nothing to export to");
		return -EINVAL;
	}
	if (!(m = calloc(1, sizeof(*m))))
		return -ENOMEM;
	m->o = *o;
	m->lfd = -1;
	m->port = -1;
	m->wake[0] = m->wake[1] = -1;
	if (pipe2(m->wake, O_CLOEXEC) != 0) {
		err = -errno;
		goto fail;
	}
	if (o->port >= 0 && (err = bind_port(m, errmsg)))
		goto fail;
	if (o->file && (err = write_file(m, errmsg)))
		goto fail;
	if ((err = -pthread_create(&m->thread, NULL, metricsd_main, m))) {
		bfs_seterr(errmsg, "metrics: cannot start its thread");
		goto fail;
	}
	m->running = 1;
	*out = m;
	return 0;
fail:
	bfs_metricsd_stop(m);
	return err;
}

int bfs_metricsd_port(const bfs_metricsd *m)
{
	return m ? m->port : -1;
}

void bfs_metricsd_stop(bfs_metricsd *m)
{
	if (!m)
		return;
	if (m->running) {
		char c = 1;

		if (write(m->wake[1], &c, 1) < 0) {
			/* the pipe is empty and ours: cannot fail */
		}
		pthread_join(m->thread, NULL);
		if (m->o.file)
			unlink(m->o.file);
	}
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->wake[0] >= 0)
		close(m->wake[0]);
	if (m->wake[1] >= 0)
		close(m->wake[1]);
	free(m);
}
