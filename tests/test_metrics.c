/*
 * test_metrics.c - fs/metrics and fs/metricsd: stats.json as Prometheus
 * text (names, types, values, labels, histograms), the rank label, the
 * HTTP routing, the loopback rule, and the exporter serving a page and
 * writing its file.  The engine's histogram buckets (bfs_hist) too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "engine/base/error.h"
#include "fs/jsonread.h"
#include "fs/metrics.h"
#include "fs/metricsd.h"

static const char stats_json[] =
	"{\"timestamp\": 1796168589.787, \"uptime_seconds\": 12.5, "
	"\"batches_served\": 40, \"samples_served\": 1280, \"batches_produced\": 44, "
	"\"batches_pushed\": 3, \"bytes_pushed\": 9007199254740992, \"passthrough\": true, "
	"\"samples_decoded\": 900, \"decode_attempts\": 901, \"bytes_read\": 123456789, "
	"\"threads\": 8, \"samples_per_second\": 1234.56, \"worker_idle_share\": 0.25, "
	"\"memory_bytes\": 104857600, \"memory_budget\": 1073741824, "
	"\"memory\": {\"batch_slots\": 94371840, \"decoder_scratch\": 10485760, "
	"\"held_files\": 0, \"held_file_count\": 0}, "
	"\"slots\": {\"total\": 50, \"ready\": 4, \"filling\": 2}, "
	"\"reader_waits\": 3, \"reader_wait_seconds\": 0.7, "
	"\"histograms\": {\"reader_wait_seconds\": {\"le\": [0.001, 0.01, 1], "
	"\"counts\": [1, 0, 1, 1], \"count\": 3, \"sum\": 0.700000001}, "
	"\"decode_seconds\": {\"le\": [0.001, 0.01, 1], \"counts\": [0, 900, 0, 0], "
	"\"count\": 900, \"sum\": 2.25}}, "
	"\"cache\": {\"dir\": \"/c\", \"hits\": 380, \"misses\": 900, \"hit_rate\": 0.296875, "
	"\"dropped_queue\": 2, \"dropped_full\": 5, \"crc_errors\": 1, \"damaged\": 0, "
	"\"write_errors\": 0, \"full\": false}, "
	"\"readers\": [{\"pid\": 4242, \"epoch\": 1, \"batch\": 7, \"depth\": 3, "
	"\"batches_per_second\": 2.5, \"batches\": 17, \"waits\": 3, \"wait_seconds\": 0.7}], "
	"\"errors_total\": 4, \"errors_left_out\": 0, \"bad_shards\": [\"a\"], "
	"\"errors\": [{\"kind\": \"index\", \"shard\": \"a\", \"message\": \"m\"}, "
	"{\"kind\": \"sample\", \"shard\": \"b\", \"record\": 1, \"sample\": 1, "
	"\"error\": \"x\", \"message\": \"m\"}]}";

static char *render(const char *mnt, const char *rank, const char *json)
{
	bfs_jr *st;
	char err[128], *out;
	size_t len;

	assert_int_equal(bfs_jr_parse(json, strlen(json), &st, err, sizeof(err)), 0);
	assert_int_equal(bfs_metrics_render(mnt, rank, st, &out, &len), 0);
	assert_int_equal(strlen(out), len);
	bfs_jr_free(st);
	return out;
}

/* The line of sample `name{labels}` (its labels written out whole). */
static void assert_line(const char *text, const char *line)
{
	char *want;
	const char *p;

	assert_true(asprintf(&want, "\n%s\n", line) > 0);
	p = strstr(text, want);
	if (!p)
		fail_msg("no line '%s' in:\n%s", line, text);
	free(want);
}

#define L "mount=\"/mnt/b\",rank=\"0\""

static void test_metrics_counters_are_named_total_with_stats_json_values(void **state)
{
	char *t = render("/mnt/b", "0", stats_json);

	assert_line(t, "# TYPE batchfs_batches_served_total counter");
	assert_line(t, "batchfs_batches_served_total{" L "} 40");
	assert_line(t, "batchfs_samples_decoded_total{" L "} 900");
	assert_line(t, "batchfs_shard_read_bytes_total{" L "} 123456789");
	/* 2^53 stays exact */
	assert_line(t, "batchfs_pushed_bytes_total{" L "} 9007199254740992");
	assert_line(t, "# TYPE batchfs_uptime_seconds gauge");
	assert_line(t, "batchfs_uptime_seconds{" L "} 12.5");
	assert_line(t, "batchfs_passthrough{" L "} 1");
	assert_line(t, "batchfs_samples_per_second{" L "} 1234.56");
	assert_line(t, "batchfs_worker_idle_ratio{" L "} 0.25");
	assert_line(t, "batchfs_cache_hit_ratio{" L "} 0.296875");
	assert_line(t, "batchfs_cache_full{" L "} 0");
	assert_line(t, "batchfs_slots_ready{" L "} 4");
	free(t);
}

static void test_metrics_causes_and_parts_are_labels(void **state)
{
	char *t = render("/mnt/b", "0", stats_json);

	assert_line(t, "batchfs_cache_dropped_total{" L ",cause=\"queue\"} 2");
	assert_line(t, "batchfs_cache_dropped_total{" L ",cause=\"full\"} 5");
	assert_line(t, "batchfs_cache_errors_total{" L ",cause=\"crc\"} 1");
	assert_line(t, "batchfs_memory_part_bytes{" L ",part=\"decoder_scratch\"} 10485760");
	/* errors_total 4: the one index error listed, the rest samples */
	assert_line(t, "batchfs_errors_total{" L ",kind=\"index\"} 1");
	assert_line(t, "batchfs_errors_total{" L ",kind=\"sample\"} 3");
	assert_line(t, "batchfs_reader_batches_total{" L ",pid=\"4242\"} 17");
	assert_line(t, "batchfs_reader_wait_seconds_total{" L ",pid=\"4242\"} 0.7");
	assert_line(t, "batchfs_reader_epoch{" L ",pid=\"4242\"} 1");
	free(t);
}

static void test_metrics_histograms_are_cumulative_with_inf_sum_and_count(void **state)
{
	char *t = render("/mnt/b", "0", stats_json);

	assert_line(t, "# TYPE batchfs_batch_wait_seconds histogram");
	assert_line(t, "batchfs_batch_wait_seconds_bucket{" L ",le=\"0.001\"} 1");
	assert_line(t, "batchfs_batch_wait_seconds_bucket{" L ",le=\"0.01\"} 1");
	assert_line(t, "batchfs_batch_wait_seconds_bucket{" L ",le=\"1\"} 2");
	assert_line(t, "batchfs_batch_wait_seconds_bucket{" L ",le=\"+Inf\"} 3");
	assert_line(t, "batchfs_batch_wait_seconds_sum{" L "} 0.700000001");
	assert_line(t, "batchfs_batch_wait_seconds_count{" L "} 3");
	assert_line(t, "batchfs_decode_seconds_bucket{" L ",le=\"0.01\"} 900");
	assert_line(t, "batchfs_decode_seconds_count{" L "} 900");
	free(t);
}

static void test_metrics_without_a_cache_leave_the_cache_out(void **state)
{
	char *t = render("/m", "0", "{\"uptime_seconds\": 1, \"cache\": null, "
			 "\"batches_served\": 0}");

	assert_null(strstr(t, "batchfs_cache_"));
	assert_non_null(strstr(t, "batchfs_batches_served_total{mount=\"/m\",rank=\"0\"} 0\n"));
	free(t);
}

static void test_metrics_a_remote_source_gets_its_requests_and_shard_cache(void **state)
{
	char *t = render("/m", "0", "{\"uptime_seconds\": 1, \"remote\": {"
			 "\"requests\": 120, \"bytes\": 52428800, \"in_flight\": 3, "
			 "\"failed\": 1, \"retries\": {\"reset\": 4, \"timeout\": 1, "
			 "\"server_error\": 0, \"throttled\": 2, \"short_body\": 0}, "
			 "\"link_bytes_per_second\": 104857600, \"hits\": 900, "
			 "\"misses\": 30, \"range_reads\": 12, \"range_bytes\": 1200000, "
			 "\"waits\": 18, \"wait_seconds\": 0.5, \"fetched\": 40, "
			 "\"bytes_fetched\": 41943040, \"found\": 2, \"evictions\": 30, "
			 "\"evicted_bytes\": 31457280, \"failures\": 0, "
			 "\"bytes_on_disk\": 10485760, \"limit\": 12582912, \"objects\": 64, "
			 "\"held\": 9, \"fetching\": 2}}");

	assert_line(t, "# TYPE batchfs_remote_requests_total counter");
	assert_line(t, "batchfs_remote_requests_total{mount=\"/m\",rank=\"0\"} 120");
	assert_line(t, "batchfs_remote_received_bytes_total{mount=\"/m\",rank=\"0\"} 52428800");
	assert_line(t, "batchfs_remote_requests_in_flight{mount=\"/m\",rank=\"0\"} 3");
	assert_line(t, "batchfs_remote_retries_total{mount=\"/m\",rank=\"0\",cause=\"reset\"} 4");
	assert_line(t, "batchfs_remote_retries_total{mount=\"/m\",rank=\"0\",cause=\"short_body\"} 0");
	assert_line(t, "batchfs_remote_link_bytes_per_second{mount=\"/m\",rank=\"0\"} 104857600");
	assert_line(t, "batchfs_shard_cache_hits_total{mount=\"/m\",rank=\"0\"} 900");
	assert_line(t, "batchfs_shard_cache_range_reads_total{mount=\"/m\",rank=\"0\"} 12");
	assert_line(t, "batchfs_shard_cache_wait_seconds_total{mount=\"/m\",rank=\"0\"} 0.5");
	assert_line(t, "batchfs_shard_cache_evictions_total{mount=\"/m\",rank=\"0\"} 30");
	assert_line(t, "# TYPE batchfs_shard_cache_bytes gauge");
	assert_line(t, "batchfs_shard_cache_bytes{mount=\"/m\",rank=\"0\"} 10485760");
	assert_line(t, "batchfs_shard_cache_size_limit_bytes{mount=\"/m\",rank=\"0\"} 12582912");
	free(t);
	/* a local source: none of them */
	t = render("/m", "0", stats_json);
	assert_null(strstr(t, "batchfs_remote_"));
	assert_null(strstr(t, "batchfs_shard_cache_"));
	free(t);
}

static void test_metrics_label_values_are_escaped_and_made_utf8(void **state)
{
	char *t = render("/m\"n\\o\np\xff", "2-5", "{\"uptime_seconds\": 1}");

	assert_non_null(strstr(t,
		"batchfs_uptime_seconds{mount=\"/m\\\"n\\\\o\\np\xef\xbf\xbd\",rank=\"2-5\"} 1\n"));
	free(t);
}

static void test_metrics_refuse_what_is_not_stats_json(void **state)
{
	bfs_jr *v;
	char err[64], *out = (char *)1;
	size_t len;

	assert_int_equal(bfs_jr_parse("[1]", 3, &v, err, sizeof(err)), 0);
	assert_int_equal(bfs_metrics_render("/m", "0", v, &out, &len), -EINVAL);
	assert_null(out);
	bfs_jr_free(v);
	assert_int_equal(bfs_metrics_render("/m", "0", NULL, &out, &len), -EINVAL);
}

static void test_metrics_rank_label_is_the_rank_or_the_range(void **state)
{
	const char *cases[][2] = {
		{ "{\"rank\": 3}", "3" },
		{ "{\"ranks\": [4, 5, 6, 7]}", "4-7" },
		{ "{\"ranks\": [2]}", "2" },
		{ "{}", "0" },
	};
	char buf[32], err[64];

	for (size_t i = 0; i < 4; i++) {
		bfs_jr *v;

		assert_int_equal(bfs_jr_parse(cases[i][0], strlen(cases[i][0]), &v,
					      err, sizeof(err)), 0);
		bfs_metrics_rank_label(v, buf, sizeof(buf));
		assert_string_equal(buf, cases[i][1]);
		bfs_jr_free(v);
	}
	bfs_metrics_rank_label(NULL, buf, sizeof(buf));
	assert_string_equal(buf, "0");
}

static void test_metricsd_routes_only_get_and_head_of_metrics(void **state)
{
	struct { const char *req; int code, head; } c[] = {
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200, 0 },
		{ "GET /metrics?x=1 HTTP/1.0\r\n\r\n", 200, 0 },
		{ "GET / HTTP/1.0\r\n\r\n", 200, 0 },
		{ "HEAD /metrics HTTP/1.0\r\n\r\n", 200, 1 },
		{ "POST /metrics HTTP/1.0\r\n\r\n", 405, 0 },
		{ "DELETE /metrics HTTP/1.1\r\n\r\n", 405, 0 },
		{ "GET /stats.json HTTP/1.0\r\n\r\n", 404, 0 },
		{ "GET /metrics HTTP/2.0\r\n\r\n", 505, 0 },
		{ "GET /metrics\r\n\r\n", 400, 0 },
		{ "hello\r\n\r\n", 400, 0 },
		{ " / HTTP/1.0\r\n\r\n", 400, 0 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int head = -1;

		assert_int_equal(bfs_metricsd_route(c[i].req, strlen(c[i].req), &head),
				 c[i].code);
		if (c[i].code == 200)
			assert_int_equal(head, c[i].head);
	}
}

static void test_metricsd_knows_loopback_addresses(void **state)
{
	assert_int_equal(bfs_metricsd_is_loopback("127.0.0.1"), 1);
	assert_int_equal(bfs_metricsd_is_loopback("127.8.9.10"), 1);
	assert_int_equal(bfs_metricsd_is_loopback("::1"), 1);
	assert_int_equal(bfs_metricsd_is_loopback("::ffff:127.0.0.1"), 1);
	assert_int_equal(bfs_metricsd_is_loopback("0.0.0.0"), 0);
	assert_int_equal(bfs_metricsd_is_loopback("10.1.2.3"), 0);
	assert_int_equal(bfs_metricsd_is_loopback("::"), 0);
	assert_int_equal(bfs_metricsd_is_loopback("::ffff:10.0.0.1"), 0);
	assert_int_equal(bfs_metricsd_is_loopback("localhost"), -EINVAL);
}

static int renders;

static int fixed_text(void *ctx, char **buf, size_t *len)
{
	renders++;
	*buf = strdup((const char *)ctx);
	*len = strlen(*buf);
	return *buf ? 0 : -ENOMEM;
}

static void test_metricsd_refuses_a_public_address_unless_asked(void **state)
{
	bfs_metricsd_opts o = { .port = 0, .addr = "0.0.0.0", .render = fixed_text,
				.ctx = "x 1\n" };
	bfs_metricsd *m = (bfs_metricsd *)1;
	char err[BFS_ERRMSG_MAX] = "";

	assert_int_equal(bfs_metricsd_start(&o, &m, err), -EPERM);
	assert_null(m);
	assert_non_null(strstr(err, "--metrics-public"));
	o.public = 1;
	assert_int_equal(bfs_metricsd_start(&o, &m, err), 0);
	assert_true(bfs_metricsd_port(m) > 0);
	bfs_metricsd_stop(m);
	o.public = 0;
	o.addr = "localhost"; /* a name: what it resolves to decides */
	assert_int_equal(bfs_metricsd_start(&o, &m, err), 0);
	bfs_metricsd_stop(m);
}

/* A whole HTTP exchange on the exporter's port: the request sent, the
 * answer read to the end. */
static char *exchange(int port, const char *req)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	static char buf[65536];
	size_t len = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, req, strlen(req), 0), (ssize_t)strlen(req));
	while ((n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(fd);
	return buf;
}

static void test_metricsd_serves_the_text_and_writes_the_file(void **state)
{
	char dir[] = "/tmp/test_metrics.XXXXXX", path[64], err[BFS_ERRMSG_MAX];
	bfs_metricsd_opts o = { .port = 0, .render = fixed_text,
				.ctx = "batchfs_up 1\n", .interval_s = 3600 };
	bfs_metricsd *m;
	const char *r;
	struct stat st;
	FILE *f;
	char got[64] = "";

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/batchfs.prom", dir);
	o.file = path;
	renders = 0;
	assert_int_equal(bfs_metricsd_start(&o, &m, err), 0);
	/* the file is there, whole, before start returns */
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	assert_non_null(f = fopen(path, "r"));
	assert_non_null(fgets(got, sizeof(got), f));
	fclose(f);
	assert_string_equal(got, "batchfs_up 1\n");
	r = exchange(bfs_metricsd_port(m), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.0 200 OK\r\n"));
	assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
	assert_non_null(strstr(r, "\r\n\r\nbatchfs_up 1\n"));
	r = exchange(bfs_metricsd_port(m), "PUT /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.0 405 "));
	assert_non_null(strstr(r, "Allow: GET, HEAD\r\n"));
	r = exchange(bfs_metricsd_port(m), "GET /etc/passwd HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.0 404 "));
	assert_int_equal(renders, 2); /* the file and the one GET */
	bfs_metricsd_stop(m);
	/* a stopped mount leaves no file that looks alive, and no temp file */
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(rmdir(dir), 0);
}

static void test_metricsd_bounds_the_request_it_reads(void **state)
{
	bfs_metricsd_opts o = { .port = 0, .render = fixed_text, .ctx = "x 1\n" };
	bfs_metricsd *m;
	char err[BFS_ERRMSG_MAX], *big = malloc(20000);
	const char *r;

	assert_int_equal(bfs_metricsd_start(&o, &m, err), 0);
	memcpy(big, "GET /metrics HTTP/1.0\r\nX: ", 26);
	memset(big + 26, 'a', 20000 - 27);
	big[19999] = '\0';
	r = exchange(bfs_metricsd_port(m), big);
	assert_non_null(strstr(r, "HTTP/1.0 431 "));
	/* and it still answers the next one */
	r = exchange(bfs_metricsd_port(m), "GET /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.0 200 OK"));
	bfs_metricsd_stop(m);
	free(big);
}

static void test_hist_buckets_run_from_100us_to_10s(void **state)
{
	bfs_hist h;

	memset(&h, 0, sizeof(h));
	assert_int_equal(bfs_hist_bound_ns(0), 100000);
	assert_int_equal(bfs_hist_bound_ns(1), 250000);
	assert_int_equal(bfs_hist_bound_ns(2), 500000);
	assert_int_equal(bfs_hist_bound_ns(3), 1000000);
	assert_int_equal(bfs_hist_bound_ns(BFS_HIST_BUCKETS - 2), 10000000000ull);
	assert_true(bfs_hist_bound_ns(BFS_HIST_BUCKETS - 1) == UINT64_MAX);
	bfs_hist_add(&h, 100000);        /* on a bound: that bucket */
	bfs_hist_add(&h, 100001);
	bfs_hist_add(&h, 0);
	bfs_hist_add(&h, 20000000000ull); /* past the last bound */
	assert_int_equal(h.count[0], 2);
	assert_int_equal(h.count[1], 1);
	assert_int_equal(h.count[BFS_HIST_BUCKETS - 1], 1);
	assert_int_equal(h.n, 4);
	assert_true(h.sum_ns == 20000200001ull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_counters_are_named_total_with_stats_json_values),
		cmocka_unit_test(test_metrics_causes_and_parts_are_labels),
		cmocka_unit_test(test_metrics_histograms_are_cumulative_with_inf_sum_and_count),
		cmocka_unit_test(test_metrics_without_a_cache_leave_the_cache_out),
		cmocka_unit_test(test_metrics_a_remote_source_gets_its_requests_and_shard_cache),
		cmocka_unit_test(test_metrics_label_values_are_escaped_and_made_utf8),
		cmocka_unit_test(test_metrics_refuse_what_is_not_stats_json),
		cmocka_unit_test(test_metrics_rank_label_is_the_rank_or_the_range),
		cmocka_unit_test(test_metricsd_routes_only_get_and_head_of_metrics),
		cmocka_unit_test(test_metricsd_knows_loopback_addresses),
		cmocka_unit_test(test_metricsd_refuses_a_public_address_unless_asked),
		cmocka_unit_test(test_metricsd_serves_the_text_and_writes_the_file),
		cmocka_unit_test(test_metricsd_bounds_the_request_it_reads),
		cmocka_unit_test(test_hist_buckets_run_from_100us_to_10s),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
