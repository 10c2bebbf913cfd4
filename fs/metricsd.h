/*
 * metricsd.h - where a mount's Prometheus text goes while it runs: a file
 * rewritten every few seconds (--metrics-file, for node_exporter's
 * textfile collector) and an HTTP page (--metrics-port, GET /metrics).
 *
 * DESIGN
 * One thread does both.  It waits in poll(2) on the listening socket (if
 * any) and a wake-up pipe, with a timeout that is the time left to the
 * next file write; the text is made by the caller's render function each
 * time, so every write and every scrape is one fresh stats.json snapshot.
 * HTTP is the least that Prometheus needs: HTTP/1.0, one request per
 * connection, answered in turn on this thread.  A request is read for at
 * most 2 s and 8 KiB (408/431 past that), only GET (and HEAD) is taken
 * (405 otherwise), only /metrics (and /) served (404 otherwise); the
 * answer is written with a 5 s deadline.  So a slow or hostile client
 * delays the next scrape by seconds at most and can never touch the
 * mount: the thread only reads the engine's counters.
 *
 * The file is written to a temporary name beside it (PATH.tmp.XXXXXX,
 * which the collector does not read: it reads *.prom) and renamed over
 * PATH, so a reader never sees half a file.  It is removed when the mount
 * stops, so a dead mount does not look alive.
 *
 * Binding: the address is 127.0.0.1 unless one is given; an address (or
 * host name, resolved once) that is not loopback is refused unless
 * public is set.  Binding happens in bfs_metricsd_start, so the mount can
 * fail with the reason before it says it is ready.
 */
#ifndef BFS_FS_METRICSD_H
#define BFS_FS_METRICSD_H

#include <stddef.h>

/* Makes the text: 0 and a malloc()ed *buf of *len bytes (freed by the
 * caller), or a negative errno.  Called on the exporter's thread only. */
typedef int (*bfs_metricsd_render)(void *ctx, char **buf, size_t *len);

typedef struct {
	const char *file;      /* absolute path, or NULL: no file */
	unsigned interval_s;   /* between file writes; 0: 15 */
	int port;              /* TCP port, 0..65535 (0: any free one, see
				* bfs_metricsd_port); -1: no HTTP */
	const char *addr;      /* numeric address or host name to bind;
				* NULL: 127.0.0.1 */
	int public;            /* allow an address that is not loopback */
	bfs_metricsd_render render;
	void *ctx;
} bfs_metricsd_opts;

typedef struct bfs_metricsd bfs_metricsd;

/* Bind (if port >= 0), write the file once (if file) and start the
 * thread.  0 and *out, or: -EPERM (addr is not loopback and public is
 * not set), -EINVAL (addr does not resolve, or neither a file nor a port
 * asked for), a bind/listen errno (-EADDRINUSE, ...), the first file
 * write's errno, -ENOMEM, -EAGAIN; errmsg (BFS_ERRMSG_MAX bytes) then
 * says which and why.  The strings must outlive the exporter. */
int bfs_metricsd_start(const bfs_metricsd_opts *o, bfs_metricsd **out,
		       char *errmsg);

/* The port bound (useful with port 0), or -1 without HTTP. */
int bfs_metricsd_port(const bfs_metricsd *m);

/* Stop the thread, close the socket, remove the file.  NULL ok.  Not from
 * the exporter's thread (that is, not from render). */
void bfs_metricsd_stop(bfs_metricsd *m);

/* What an HTTP request (its head, up to the blank line) asks for: 200
 * (GET or HEAD of /metrics or /; *head set for HEAD), 400 (not a request
 * line), 404 (another path), 405 (another method), 505 (not HTTP/1.x).
 * Pure, for the tests. */
int bfs_metricsd_route(const char *req, size_t len, int *head);

/* Whether the numeric address text names a loopback address (127.0.0.0/8,
 * ::1, ::ffff:127.x.y.z): 1, 0, or -EINVAL when it is not an address.
 * Pure, for the tests. */
int bfs_metricsd_is_loopback(const char *numeric);

#endif
