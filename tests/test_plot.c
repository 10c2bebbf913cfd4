/*
 * test_plot.c - fs/history (the bounded ring, its thinning, its JSON and
 * its sampler), the points `batchfs status --plot` takes from stats.json,
 * and fs/plot (the rates, the picture's size and what it draws where, and
 * its PNG).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/pixels/png.h"
#include "fs/history.h"
#include "fs/json.h"
#include "fs/jsonread.h"
#include "fs/plot.h"
#include "fs/status.h"

static bfs_history_point pt(double t, uint64_t served, uint64_t decoded,
			    double wait, uint64_t hits, uint64_t misses)
{
	bfs_history_point p = { t, served, decoded, wait, hits, misses };

	return p;
}

/* ---- the ring ----------------------------------------------------------- */

static void test_history_keeps_every_tick_until_full(void **state)
{
	bfs_history *h;
	bfs_history_point out[BFS_HISTORY_CAP];
	double step;

	assert_int_equal(bfs_history_create(10, &h), 0);
	for (uint64_t k = 0; k < BFS_HISTORY_CAP; k++) {
		bfs_history_point p = pt(10.0 * k, k, k, 0, 0, 0);

		assert_int_equal(bfs_history_add(h, k, &p), 1);
	}
	assert_int_equal(bfs_history_copy(h, out, BFS_HISTORY_CAP, &step),
			 BFS_HISTORY_CAP);
	assert_true(step == 10.0);
	for (size_t i = 0; i < BFS_HISTORY_CAP; i++)
		assert_int_equal(out[i].served, i);
	/* a tick not after the last one is refused */
	{
		bfs_history_point p = pt(0, 0, 0, 0, 0, 0);

		assert_int_equal(bfs_history_add(h, BFS_HISTORY_CAP - 1, &p), 0);
	}
	bfs_history_free(h);
}

static void test_history_halves_its_resolution_and_keeps_the_whole_life(void **state)
{
	bfs_history *h;
	bfs_history_point out[BFS_HISTORY_CAP];
	uint64_t ticks = 100000, kept = 0;
	double step;
	size_t n;

	assert_int_equal(bfs_history_create(10, &h), 0);
	for (uint64_t k = 0; k < ticks; k++) {
		bfs_history_point p = pt(10.0 * k, 5 * k, k, 0.5 * k, k, k);

		kept += (uint64_t)bfs_history_add(h, k, &p);
		n = bfs_history_copy(h, out, BFS_HISTORY_CAP, NULL);
		assert_true(n <= BFS_HISTORY_CAP);
	}
	n = bfs_history_copy(h, out, BFS_HISTORY_CAP, &step);
	/* between half and all of the ring, evenly spaced, from tick 0 */
	assert_true(n >= BFS_HISTORY_CAP / 2 && n <= BFS_HISTORY_CAP);
	assert_true(out[0].t == 0.0);
	for (size_t i = 1; i < n; i++)
		assert_true(out[i].t - out[i - 1].t == step);
	/* the stride is a power of two, and the newest point is within one
	 * stride of the last tick */
	assert_true(step >= 10.0 * ticks / BFS_HISTORY_CAP);
	assert_true(out[n - 1].t > 10.0 * (ticks - 1) - step);
	assert_true(kept > n); /* points were kept, then thinned */
	/* a tick off the stride now is not kept */
	{
		bfs_history_point p = pt(0, 0, 0, 0, 0, 0);
		uint64_t s = (uint64_t)(step / 10);

		assert_int_equal(bfs_history_add(h, (ticks / s + 1) * s + 1, &p), 0);
		assert_int_equal(bfs_history_add(h, (ticks / s + 1) * s, &p), 1);
	}
	bfs_history_free(h);
}

static void test_history_json_round_trips_through_status(void **state)
{
	bfs_history *h;
	bfs_json j;
	bfs_jr *jr;
	char *buf, err[128];
	size_t len;
	bfs_history_point got[BFS_HISTORY_CAP + 1];
	int n;

	assert_int_equal(bfs_history_create(10, &h), 0);
	for (uint64_t k = 0; k < 3; k++) {
		bfs_history_point p = pt(10.0 * k, 100 * k, 40 * k, 0.25 * k, 60 * k, 40 * k);

		bfs_history_add(h, k, &p);
	}
	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_json_fixed(&j, "uptime_seconds", 25.0, 3);
	bfs_json_u64(&j, "samples_served", 250);
	bfs_json_u64(&j, "samples_decoded", 100);
	bfs_json_f64(&j, "reader_wait_seconds", 0.625);
	bfs_json_open(&j, "cache", '{');
	bfs_json_u64(&j, "hits", 150);
	bfs_json_u64(&j, "misses", 100);
	bfs_json_close(&j, '}');
	bfs_history_json(h, &j);
	bfs_json_close(&j, '}');
	assert_int_equal(bfs_json_take(&j, &buf, &len), 0);
	/* one line a point */
	assert_non_null(strstr(buf, "[10.000, 100, 40, 0.250000, 60, 40]"));
	assert_int_equal(bfs_jr_parse(buf, len, &jr, err, sizeof(err)), 0);
	assert_int_equal(bfs_jr_num(bfs_jr_get(bfs_jr_get(jr, "history"),
					       "interval_seconds"), 0), 10);
	assert_int_equal(bfs_jr_get(bfs_jr_get(jr, "history"), "fields")->n, 6);
	n = bfs_status_history(jr, got, BFS_HISTORY_CAP + 1);
	assert_int_equal(n, 4); /* three kept and the point of now */
	assert_true(got[2].t == 20.0 && got[2].served == 200 && got[2].decoded == 80);
	assert_true(got[2].wait_s == 0.5 && got[2].hits == 120 && got[2].misses == 80);
	assert_true(got[3].t == 25.0 && got[3].served == 250 && got[3].hits == 150);
	/* no room: still the point of now */
	assert_int_equal(bfs_status_history(jr, got, 1), 1);
	assert_true(got[0].t == 25.0);
	bfs_jr_free(jr);
	free(buf);
	/* stats.json without a history (an older daemon): the point of now */
	assert_int_equal(bfs_jr_parse("{\"uptime_seconds\": 3, \"samples_served\": 7, \"history\": {\"points\": [1, [2], \"x\"]}}",
				      strlen("{\"uptime_seconds\": 3, \"samples_served\": 7, \"history\": {\"points\": [1, [2], \"x\"]}}"),
				      &jr, err, sizeof(err)), 0);
	assert_int_equal(bfs_status_history(jr, got, 8), 1);
	assert_true(got[0].t == 3 && got[0].served == 7);
	bfs_jr_free(jr);
	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_history_json(NULL, &j); /* none: nothing written */
	bfs_json_close(&j, '}');
	assert_string_equal(j.buf, "{}");
	bfs_json_free(&j);
	bfs_history_free(h);
}

static int samples;

static void sample(void *ctx, bfs_history_point *p)
{
	p->served = (uint64_t)++samples * 10;
}

static void test_history_sampler_takes_a_point_at_once_and_stops_at_once(void **state)
{
	bfs_history *h;
	bfs_history_point out[4];
	struct timespec nap = { 0, 10 * 1000 * 1000 };

	/* a day between ticks: the first point comes at once, and stop
	 * does not wait for the next */
	assert_int_equal(bfs_history_create(86400, &h), 0);
	assert_int_equal(bfs_history_start(h, sample, NULL), 0);
	assert_int_equal(bfs_history_start(h, sample, NULL), -EINVAL);
	for (int i = 0; i < 3000 && bfs_history_copy(h, out, 4, NULL) == 0; i++)
		nanosleep(&nap, NULL);
	assert_int_equal(bfs_history_copy(h, out, 4, NULL), 1);
	assert_int_equal(out[0].served, 10);
	assert_true(out[0].t >= 0 && out[0].t < 86400);
	bfs_history_stop(h);
	assert_int_equal(samples, 1);
	bfs_history_stop(h); /* twice: nothing */
	bfs_history_free(h);
	assert_int_equal(bfs_history_create(86401, &h), -EINVAL);
	bfs_history_free(NULL);
}

/* ---- the rates ---------------------------------------------------------- */

static void test_plot_rates_are_the_change_over_the_seconds(void **state)
{
	bfs_history_point p[] = {
		pt(0, 0, 0, 0, 0, 0),
		pt(10, 1000, 400, 5, 60, 40),
		pt(10, 1000, 400, 5, 60, 40),   /* not after: passed over */
		pt(20, 3000, 400, 5, 60, 40),   /* no lookups: no hit rate */
		pt(40, 2000, 500, 4, 160, 40),  /* served went down: 0 */
	};
	bfs_plot_rate r[4];

	assert_int_equal(bfs_plot_rates(p, 0, r), 0);
	assert_int_equal(bfs_plot_rates(p, 1, r), 0);
	assert_int_equal(bfs_plot_rates(p, 5, r), 3);
	assert_true(r[0].t0 == 0 && r[0].t1 == 10);
	assert_true(r[0].served == 100 && r[0].decoded == 40);
	assert_true(r[0].wait == 0.5 && r[0].hit == 0.6);
	assert_true(r[1].t0 == 10 && r[1].t1 == 20 && r[1].served == 200);
	assert_true(r[1].decoded == 0 && r[1].wait == 0 && isnan(r[1].hit));
	assert_true(r[2].served == 0 && r[2].decoded == 5 && r[2].wait == 0);
	assert_true(r[2].hit == 1.0);
}

/* ---- the picture -------------------------------------------------------- */

static int is(const uint8_t *rgb, int w, int x, int y, unsigned col)
{
	const uint8_t *p = rgb + 3 * ((size_t)y * (size_t)w + (size_t)x);

	return p[0] == (uint8_t)(col >> 16) && p[1] == (uint8_t)(col >> 8) &&
	       p[2] == (uint8_t)col;
}

static int yof(const bfs_plot_box *b, double v)
{
	return b->y1 - (int)lround(v / b->ymax * (b->y1 - b->y0));
}

static void test_plot_has_the_size_asked_for(void **state)
{
	bfs_history_point p[] = { pt(0, 0, 0, 0, 0, 0), pt(10, 10, 10, 0, 0, 10) };
	bfs_plot_opts o = { 0 };
	uint8_t *rgb;
	int w, h;

	assert_int_equal(bfs_plot_render(&o, p, 2, &rgb, &w, &h), 0);
	assert_int_equal(w, BFS_PLOT_WIDTH);
	assert_int_equal(h, BFS_PLOT_HEIGHT);
	free(rgb);
	o.width = 640;
	o.height = 480;
	assert_int_equal(bfs_plot_render(&o, p, 2, &rgb, &w, &h), 0);
	assert_int_equal(w, 640);
	assert_int_equal(h, 480);
	free(rgb);
	o.width = BFS_PLOT_MIN_W - 1;
	assert_int_equal(bfs_plot_render(&o, p, 2, &rgb, &w, &h), -EINVAL);
	assert_null(rgb);
	o.width = BFS_PLOT_MAX_SIDE + 1;
	assert_int_equal(bfs_plot_render(&o, p, 2, &rgb, &w, &h), -EINVAL);
	assert_int_equal(bfs_plot_render(NULL, p, 2, &rgb, &w, &h), -EINVAL);
	o.width = 0;
	assert_int_equal(bfs_plot_render(&o, NULL, 2, &rgb, &w, &h), -EINVAL);
}

static void test_plot_draws_a_known_series_where_expected(void **state)
{
	/* 100 images/s served, 25 decoded, readers waiting half the time,
	 * 3 of 4 lookups hits, for 60 s */
	bfs_history_point p[7];
	bfs_plot_rate r[6];
	bfs_plot_opts o = { .title = "batchfs /mnt/x", .cache = 1 };
	bfs_plot_box b[3];
	uint8_t *rgb;
	int w, h, xm;
	size_t nr;

	for (int i = 0; i < 7; i++)
		p[i] = pt(10.0 * i, 1000u * i, 250u * i, 5.0 * i, 750u * i, 250u * i);
	nr = bfs_plot_rates(p, 7, r);
	assert_int_equal(nr, 6);
	for (int k = 0; k < 3; k++)
		assert_int_equal(bfs_plot_layout(&o, r, nr, k, &b[k]), 0);
	assert_int_equal(bfs_plot_layout(&o, r, nr, 3, &b[0]), -EINVAL);
	/* stacked, not overlapping, inside the picture; the axes fit */
	assert_true(b[0].y1 < b[1].y0 && b[1].y1 < b[2].y0 && b[2].y1 < BFS_PLOT_HEIGHT);
	assert_true(b[0].tmax == 60.0 && b[2].ymax == 100.0);
	assert_true(b[0].ymax >= 100.0 && b[0].ymax < 200.0);
	assert_true(b[1].ymax >= 0.5 && b[1].ymax < 1.0);
	assert_int_equal(bfs_plot_render(&o, p, 7, &rgb, &w, &h), 0);
	for (int k = 0; k < 3; k++) {
		double v = k == 0 ? 100 : k == 1 ? 0.5 : 75;
		unsigned col = k == 0 ? BFS_PLOT_SERVED : k == 1 ? BFS_PLOT_WAIT : BFS_PLOT_HIT;
		int y = yof(&b[k], v);

		xm = (b[k].x0 + b[k].x1) / 2;
		/* the line, on its two rows, across the whole time axis */
		assert_true(is(rgb, w, xm, y, col));
		assert_true(is(rgb, w, xm, y - 1, col));
		assert_true(is(rgb, w, b[k].x0 + 5, y, col));
		assert_true(is(rgb, w, b[k].x1 - 5, y, col));
		/* nothing of the series above it; a tint (not the background,
		 * not the line) below it */
		assert_true(is(rgb, w, xm + 3, y - 6, BFS_PLOT_BG));
		assert_false(is(rgb, w, xm + 3, y + 6, BFS_PLOT_BG));
		assert_false(is(rgb, w, xm + 3, y + 6, col));
	}
	/* decoded: 25 images/s, in its own colour, under served */
	assert_true(is(rgb, w, (b[0].x0 + b[0].x1) / 2 + 3, yof(&b[0], 25), BFS_PLOT_DECODED));
	free(rgb);
}

static void test_plot_leaves_a_gap_where_no_lookup_was_made(void **state)
{
	bfs_history_point p[] = {
		pt(0, 0, 0, 0, 0, 0), pt(30, 300, 300, 0, 30, 30),
		pt(60, 600, 600, 0, 30, 30), pt(90, 900, 900, 0, 60, 60),
	};
	bfs_plot_rate r[3];
	bfs_plot_opts o = { .cache = 1 };
	bfs_plot_box b;
	uint8_t *rgb;
	int w, h, y;

	assert_int_equal(bfs_plot_rates(p, 4, r), 3);
	assert_int_equal(bfs_plot_layout(&o, r, 3, 2, &b), 0);
	assert_int_equal(bfs_plot_render(&o, p, 4, &rgb, &w, &h), 0);
	y = yof(&b, 50);
	/* 50 % in the first and last thirds, nothing in the middle one */
	assert_true(is(rgb, w, b.x0 + (b.x1 - b.x0) / 6, y, BFS_PLOT_HIT));
	assert_true(is(rgb, w, b.x0 + 5 * (b.x1 - b.x0) / 6, y, BFS_PLOT_HIT));
	assert_false(is(rgb, w, b.x0 + (b.x1 - b.x0) / 2 + 3, y, BFS_PLOT_HIT));
	free(rgb);
}

/* No series colour in a plot area. */
static int series_free(const uint8_t *rgb, int w, const bfs_plot_box *b)
{
	for (int y = b->y0; y < b->y1; y++)
		for (int x = b->x0 + 1; x <= b->x1; x++)
			if (is(rgb, w, x, y, BFS_PLOT_SERVED) || is(rgb, w, x, y, BFS_PLOT_WAIT) ||
			    is(rgb, w, x, y, BFS_PLOT_HIT) || is(rgb, w, x, y, BFS_PLOT_DECODED))
				return 0;
	return 1;
}

static void test_plot_of_no_or_one_point_draws_the_axes_alone(void **state)
{
	bfs_history_point one = pt(0, 0, 0, 0, 0, 0);
	bfs_plot_opts o = { .title = "t", .cache = 0 };
	uint8_t *rgb;
	int w, h;

	for (size_t n = 0; n < 2; n++) {
		assert_int_equal(bfs_plot_render(&o, n ? &one : NULL, n, &rgb, &w, &h), 0);
		for (int k = 0; k < 3; k++) {
			bfs_plot_box b;

			assert_int_equal(bfs_plot_layout(&o, NULL, 0, k, &b), 0);
			assert_true(b.tmax > 0 && b.ymax > 0);
			assert_true(series_free(rgb, w, &b));
			/* the axes are there: the bottom-left corner is drawn */
			assert_false(is(rgb, w, b.x0, b.y1, BFS_PLOT_BG));
		}
		free(rgb);
	}
	/* all zeros for a minute: a flat line at 0, no crash, no NaN axis */
	{
		bfs_history_point z[] = { pt(0, 0, 0, 0, 0, 0), pt(60, 0, 0, 0, 0, 0) };

		assert_int_equal(bfs_plot_render(&o, z, 2, &rgb, &w, &h), 0);
		free(rgb);
	}
}

/* stats.json is read through a mount, but any file can sit at a path:
 * numbers out of range, out of order or absurd are held or passed over. */
static void test_plot_takes_a_hostile_history_without_harm(void **state)
{
	static const char text[] =
		"{\"uptime_seconds\": 1e300, \"samples_served\": -5, "
		"\"reader_wait_seconds\": 1e308, \"cache\": {\"hits\": 1e30, \"misses\": \"x\"}, "
		"\"history\": {\"points\": [[0, 1e300, -1, -7, 3, 3], [-50, 0, 0, 0, 0, 0], "
		"[5, 18446744073709551615, 2, 1e308, 0, 0], [6, 1, 1, 0.5, 1, 1, 99], []]}}";
	bfs_history_point got[16];
	bfs_plot_opts o = { .title = "a title far longer than the picture is wide, "
				     "so that only its end is shown beside the uptime on the right",
			    .cache = 1 };
	char err[128];
	bfs_jr *jr;
	uint8_t *rgb;
	int n, w, h;

	assert_int_equal(bfs_jr_parse(text, strlen(text), &jr, err, sizeof(err)), 0);
	n = bfs_status_history(jr, got, 16);
	assert_int_equal(n, 5);
	assert_true(got[0].served == UINT64_MAX && got[0].decoded == 0);
	assert_true(got[2].served == UINT64_MAX);
	assert_true(got[4].t == 1e300 && got[4].served == 0 && got[4].hits == UINT64_MAX);
	assert_int_equal(bfs_plot_render(&o, got, (size_t)n, &rgb, &w, &h), 0);
	free(rgb);
	/* not a number at all */
	got[1].t = NAN;
	got[0].t = INFINITY;
	assert_int_equal(bfs_plot_render(&o, got, (size_t)n, &rgb, &w, &h), 0);
	free(rgb);
	bfs_jr_free(jr);
}

static void test_plot_png_is_the_picture(void **state)
{
	bfs_history_point p[] = { pt(0, 0, 0, 0, 0, 0), pt(10, 500, 100, 1, 4, 1),
				  pt(20, 900, 200, 3, 8, 2) };
	bfs_plot_opts o = { .width = 500, .height = 400, .cache = 1 };
	bfs_png_info info;
	uint8_t *rgb, *back;
	void *png;
	size_t len;
	int w, h;

	assert_int_equal(bfs_plot_render(&o, p, 3, &rgb, &w, &h), 0);
	assert_int_equal(bfs_plot_png(rgb, w, h, &png, &len, NULL), 0);
	assert_true(len > 8 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8));
	assert_int_equal(bfs_png_header(png, len, &info, NULL), 0);
	assert_int_equal(info.width, 500);
	assert_int_equal(info.height, 400);
	assert_int_equal(info.color_type, 2);
	back = malloc((size_t)w * h * 3);
	assert_non_null(back);
	assert_int_equal(bfs_png_decode(png, len, &info, back, (size_t)w * h * 3,
					info.work_bytes, NULL), 0);
	assert_memory_equal(back, rgb, (size_t)w * h * 3);
	free(back);
	free(png);
	free(rgb);
	assert_int_equal(bfs_plot_png(NULL, 10, 10, &png, &len, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_history_keeps_every_tick_until_full),
		cmocka_unit_test(test_history_halves_its_resolution_and_keeps_the_whole_life),
		cmocka_unit_test(test_history_json_round_trips_through_status),
		cmocka_unit_test(test_history_sampler_takes_a_point_at_once_and_stops_at_once),
		cmocka_unit_test(test_plot_rates_are_the_change_over_the_seconds),
		cmocka_unit_test(test_plot_has_the_size_asked_for),
		cmocka_unit_test(test_plot_draws_a_known_series_where_expected),
		cmocka_unit_test(test_plot_leaves_a_gap_where_no_lookup_was_made),
		cmocka_unit_test(test_plot_of_no_or_one_point_draws_the_axes_alone),
		cmocka_unit_test(test_plot_takes_a_hostile_history_without_harm),
		cmocka_unit_test(test_plot_png_is_the_picture),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
