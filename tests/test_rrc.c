/*
 * test_rrc.c - engine/pixels/rrc: RandomResizedCrop's boxes against real
 * torchvision's (tests/data/golden/rrc_torchvision.*, made by
 * tools/rrc_golden.py; no torch needed here) by two-sample
 * Kolmogorov-Smirnov tests with fixed seeds, the fallback box exactly,
 * a wrong sampler told apart by the same tests, and the reduced copy's
 * geometry.  Run from the repository root.
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

#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "engine/pixels/rrc.h"

#define GOLDEN "tests/data/golden/rrc_torchvision"
#define MAX_CASES 16
/* Kolmogorov's c(alpha) for alpha = 0.001: sqrt(-ln(alpha / 2) / 2).  With
 * fixed seeds a test either always passes or always fails. */
#define KS_C 1.9495

struct tv_case {
	int h, w;
	bfs_rrc_opts o;
	size_t first, count;
};

static struct tv_case cases[MAX_CASES];
static int ncases;
static int16_t *boxes; /* (top, left, height, width) per draw */
static size_t nboxes;

static int load_golden(void **state)
{
	FILE *f = fopen(GOLDEN ".txt", "r");
	char line[512];
	uint8_t *buf;
	long n;
	bfs_npy_info info;
	char msg[BFS_ERRMSG_MAX];

	if (!f) {
		fprintf(stderr, "cannot open " GOLDEN ".txt (run from the repo root)\n");
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		struct tv_case *c = &cases[ncases];

		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (ncases == MAX_CASES ||
		    sscanf(line, "%d %d %lf %lf %lf %lf %zu %zu", &c->h, &c->w, &c->o.scale[0],
			   &c->o.scale[1], &c->o.ratio[0], &c->o.ratio[1], &c->first,
			   &c->count) != 8) {
			fclose(f);
			return -1;
		}
		ncases++;
	}
	fclose(f);
	if (!(f = fopen(GOLDEN ".npy", "rb")) || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) || !(buf = malloc((size_t)n)) ||
	    fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "cannot read " GOLDEN ".npy\n");
		return -1;
	}
	fclose(f);
	if (bfs_npy_parse(buf, (size_t)n, &info, msg) || strcmp(info.descr, "<i2") ||
	    info.ndim != 2 || info.shape[1] != 4) {
		fprintf(stderr, GOLDEN ".npy: not an int16 (N, 4) array\n");
		return -1;
	}
	nboxes = (size_t)info.shape[0];
	boxes = malloc(nboxes * 4 * sizeof(int16_t));
	if (!boxes)
		return -1;
	memcpy(boxes, buf + info.header_len, nboxes * 4 * sizeof(int16_t));
	free(buf);
	for (int i = 0; i < ncases; i++)
		if (cases[i].first + cases[i].count > nboxes)
			return -1;
	return 0;
}

static int free_golden(void **state)
{
	free(boxes);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The two-sample Kolmogorov-Smirnov statistic: the largest distance
 * between the two empirical distribution functions.  Sorts a and b. */
static double ks_statistic(double *a, size_t n, double *b, size_t m)
{
	size_t i = 0, j = 0;
	double d = 0;

	qsort(a, n, sizeof(*a), cmp_double);
	qsort(b, m, sizeof(*b), cmp_double);
	while (i < n && j < m) {
		double x = a[i] < b[j] ? a[i] : b[j], gap;

		while (i < n && a[i] <= x)
			i++;
		while (j < m && b[j] <= x)
			j++;
		gap = fabs((double)i / (double)n - (double)j / (double)m);
		if (gap > d)
			d = gap;
	}
	return d;
}

static double ks_critical(size_t n, size_t m)
{
	return KS_C * sqrt((double)(n + m) / ((double)n * (double)m));
}

/* What is compared: the area share, log(w / h), and where the box sits
 * in the room left around it (0 when it fills that side). */
enum { AREA, LOG_RATIO, TOP, LEFT, NMEASURES };
static const char *measure_name[NMEASURES] = { "area share", "log(w/h)", "top share",
					       "left share" };

static double measure(int what, int H, int W, int y, int x, int h, int w)
{
	switch (what) {
	case AREA:
		return (double)h * w / ((double)H * W);
	case LOG_RATIO:
		return log((double)w / (double)h);
	case TOP:
		return H > h ? (double)y / (H - h) : 0;
	default:
		return W > w ? (double)x / (W - w) : 0;
	}
}

typedef void (*sampler)(uint64_t k, const struct tv_case *c, bfs_rrc_box *out);

static void ours(uint64_t k, const struct tv_case *c, bfs_rrc_box *out)
{
	bfs_rrc_draw(0x5eed, 3, k, c->w, c->h, &c->o, out);
}

/* KS statistics of sampler s against torchvision's boxes of case c, for
 * each measure; how many measures passed. */
static int ks_case(sampler s, const struct tv_case *c, int quiet, const char *label)
{
	size_t n = c->count;
	double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
	double crit = ks_critical(n, n);
	int passed = 0;

	assert_non_null(a);
	assert_non_null(b);
	for (int what = 0; what < NMEASURES; what++) {
		double d;

		for (size_t k = 0; k < n; k++) {
			const int16_t *g = boxes + 4 * (c->first + k);
			bfs_rrc_box r;

			s(k, c, &r);
			assert_true(r.y >= 0 && r.x >= 0 && r.h >= 1 && r.w >= 1 &&
				    r.y + r.h <= c->h && r.x + r.w <= c->w);
			a[k] = measure(what, c->h, c->w, r.y, r.x, r.h, r.w);
			b[k] = measure(what, c->h, c->w, g[0], g[1], g[2], g[3]);
		}
		d = ks_statistic(a, n, b, n);
		if (!quiet)
			print_message("  %s %4dx%-4d n=%-5zu %-10s D = %.4f (critical %.4f)\n", label,
				      c->w, c->h, n, measure_name[what], d, crit);
		passed += d < crit;
	}
	free(a);
	free(b);
	return passed;
}

static void test_rrc_boxes_match_torchvision_by_kolmogorov_smirnov(void **state)
{
	size_t draws = 0;

	for (int i = 0; i < ncases; i++) {
		if (cases[i].count < 1000)
			continue; /* the fallback cases, below */
		assert_int_equal(ks_case(ours, &cases[i], 0, "batchfs"), NMEASURES);
		draws += cases[i].count;
	}
	print_message("  %zu draws against torchvision's, every test passed\n", draws);
	assert_true(draws >= 10000);
}

static void test_rrc_fallback_is_torchvisions_center_crop(void **state)
{
	int seen = 0;

	for (int i = 0; i < ncases; i++) {
		const struct tv_case *c = &cases[i];

		if (c->count >= 1000)
			continue;
		for (size_t k = 0; k < c->count; k++) {
			const int16_t *g = boxes + 4 * (c->first + k);
			bfs_rrc_box r;

			ours(k, c, &r);
			if (r.y != g[0] || r.x != g[1] || r.h != g[2] || r.w != g[3])
				fail_msg("%dx%d ratio %g..%g: box (%d, %d, %d, %d), torchvision (%d, %d, %d, %d)",
					 c->w, c->h, c->o.ratio[0], c->o.ratio[1], r.y, r.x, r.h, r.w,
					 g[0], g[1], g[2], g[3]);
			assert_int_equal(r.fallback, 1);
		}
		print_message("  %4dx%-4d ratio %.2f..%.2f: (y, x, h, w) = (%d, %d, %d, %d) as torchvision\n",
			      c->w, c->h, c->o.ratio[0], c->o.ratio[1], boxes[4 * c->first],
			      boxes[4 * c->first + 1], boxes[4 * c->first + 2],
			      boxes[4 * c->first + 3]);
		seen++;
	}
	assert_true(seen >= 2);
}

/* Wrong samplers, for the tests' power: the ratio drawn uniformly instead
 * of log-uniformly, and the scale taken for the side instead of the area. */
static uint64_t sm(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
	return (double)(sm(s) >> 11) * 0x1p-53;
}

static void wrong(uint64_t k, const struct tv_case *c, bfs_rrc_box *out, int kind)
{
	uint64_t s = k * 7919 + 1;

	for (int t = 0; t < 10; t++) {
		double u = unit(&s), v = unit(&s), target, aspect;
		long w, h;

		if (kind == 0) {
			target = (double)c->w * c->h * (c->o.scale[0] + u * (c->o.scale[1] - c->o.scale[0]));
			aspect = c->o.ratio[0] + v * (c->o.ratio[1] - c->o.ratio[0]);
		} else {
			double side = c->o.scale[0] + u * (c->o.scale[1] - c->o.scale[0]);

			target = (double)c->w * c->h * side * side;
			aspect = exp(log(c->o.ratio[0]) + v * (log(c->o.ratio[1]) - log(c->o.ratio[0])));
		}
		w = lround(sqrt(target * aspect));
		h = lround(sqrt(target / aspect));
		if (w > 0 && w <= c->w && h > 0 && h <= c->h) {
			out->w = (int)w;
			out->h = (int)h;
			out->y = (int)(sm(&s) % (uint64_t)(c->h - h + 1));
			out->x = (int)(sm(&s) % (uint64_t)(c->w - w + 1));
			return;
		}
	}
	out->y = out->x = 0;
	out->w = c->w;
	out->h = c->h;
}

static void uniform_ratio(uint64_t k, const struct tv_case *c, bfs_rrc_box *out)
{
	wrong(k, c, out, 0);
}

static void scale_as_side(uint64_t k, const struct tv_case *c, bfs_rrc_box *out)
{
	wrong(k, c, out, 1);
}

static void test_rrc_the_ks_tests_tell_a_wrong_sampler_apart(void **state)
{
	const struct tv_case *main_case = &cases[0];

	assert_true(main_case->count >= 10000);
	/* a linear ratio shifts log(w/h); a side-scale shifts the area */
	assert_true(ks_case(uniform_ratio, main_case, 0, "lin-ratio") < NMEASURES);
	assert_true(ks_case(scale_as_side, main_case, 0, "side-scale") < NMEASURES);
}

static void test_rrc_draw_depends_on_seed_epoch_and_sample_alone(void **state)
{
	bfs_rrc_opts o = { { 0.08, 1.0 }, { 3.0 / 4.0, 4.0 / 3.0 } };
	bfs_rrc_box a, b;
	int differ_epoch = 0, differ_seed = 0, differ_sample = 0;

	for (uint64_t k = 0; k < 200; k++) {
		bfs_rrc_draw(1, 0, k, 500, 375, &o, &a);
		bfs_rrc_draw(1, 0, k, 500, 375, &o, &b);
		assert_memory_equal(&a, &b, sizeof(a));
		bfs_rrc_draw(1, 1, k, 500, 375, &o, &b);
		differ_epoch += memcmp(&a, &b, sizeof(a)) != 0;
		bfs_rrc_draw(2, 0, k, 500, 375, &o, &b);
		differ_seed += memcmp(&a, &b, sizeof(a)) != 0;
		bfs_rrc_draw(1, 0, k + 1000, 500, 375, &o, &b);
		differ_sample += memcmp(&a, &b, sizeof(a)) != 0;
	}
	assert_true(differ_epoch >= 195);
	assert_true(differ_seed >= 195);
	assert_true(differ_sample >= 195);
}

static void test_rrc_box_lies_inside_every_image(void **state)
{
	static const int sizes[][2] = { { 1, 1 }, { 1, 500 }, { 500, 1 }, { 2, 3 },
					{ 7, 5 }, { 65500, 3 }, { 3, 65500 }, { 224, 224 } };
	bfs_rrc_opts opts[] = { { { 0.08, 1.0 }, { 3.0 / 4.0, 4.0 / 3.0 } },
				{ { 1.0, 1.0 }, { 1.0, 1.0 } },
				{ { 0.01, 0.02 }, { 0.1, 10.0 } } };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++)
			for (uint64_t i = 0; i < 300; i++) {
				bfs_rrc_box r;
				int w = sizes[s][0], h = sizes[s][1];

				bfs_rrc_draw(9, i % 3, i, w, h, &opts[k], &r);
				if (r.y < 0 || r.x < 0 || r.h < 1 || r.w < 1 || r.y + r.h > h ||
				    r.x + r.w > w)
					fail_msg("%dx%d: box (%d, %d, %d, %d)", w, h, r.y, r.x, r.h, r.w);
			}
}

static void test_rrc_check_refuses_empty_or_reversed_ranges(void **state)
{
	bfs_rrc_opts good = { { 0.08, 1.0 }, { 0.75, 4.0 / 3.0 } };
	bfs_rrc_opts bad[] = { { { 0.0, 1.0 }, { 0.75, 1.33 } }, { { 0.5, 0.4 }, { 0.75, 1.33 } },
			       { { 0.08, 1.5 }, { 0.75, 1.33 } }, { { 0.08, 1.0 }, { 0.0, 1.33 } },
			       { { 0.08, 1.0 }, { 2.0, 1.0 } }, { { NAN, 1.0 }, { 0.75, 1.33 } },
			       { { 0.08, 1.0 }, { 0.75, INFINITY } } };
	char msg[BFS_ERRMSG_MAX];

	assert_int_equal(bfs_rrc_check(&good, msg), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(bfs_rrc_check(&bad[i], msg), -EINVAL);
	assert_int_equal(bfs_rrc_check(NULL, msg), -EINVAL);
}

static void test_rrc_reduced_size_bounds_the_shorter_side(void **state)
{
	int w, h;

	bfs_rrc_reduced_size(500, 375, 512, &w, &h);
	assert_int_equal(w, 500);
	assert_int_equal(h, 375);
	bfs_rrc_reduced_size(1000, 800, 512, &w, &h);
	assert_int_equal(w, 640);
	assert_int_equal(h, 512);
	bfs_rrc_reduced_size(801, 1000, 400, &w, &h);
	assert_int_equal(w, 400);
	assert_int_equal(h, 499); /* floor(400 * 1000 / 801) */
	bfs_rrc_reduced_size(900, 900, 256, &w, &h);
	assert_int_equal(w, 256);
	assert_int_equal(h, 256);
	bfs_rrc_reduced_size(4000, 3000, 0, &w, &h);
	assert_int_equal(w, 4000);
	assert_int_equal(h, 3000);
}

static void test_rrc_map_box_scales_edges_into_the_copy(void **state)
{
	bfs_rrc_box b = { 100, 200, 300, 400, 0 }, r;

	bfs_rrc_map_box(&b, 1000, 800, 1000, 800, &r); /* same size: unchanged */
	assert_memory_equal(&b, &r, sizeof(b));
	bfs_rrc_map_box(&b, 1000, 800, 500, 400, &r); /* half: exact halves */
	assert_int_equal(r.y, 50);
	assert_int_equal(r.x, 100);
	assert_int_equal(r.h, 150);
	assert_int_equal(r.w, 200);
	/* a 1-pixel box at the far corner stays one pixel, inside */
	b = (bfs_rrc_box){ 799, 999, 1, 1, 0 };
	bfs_rrc_map_box(&b, 1000, 800, 100, 80, &r);
	assert_int_equal(r.h, 1);
	assert_int_equal(r.w, 1);
	assert_int_equal(r.y, 79);
	assert_int_equal(r.x, 99);
	/* the whole image maps to the whole copy */
	b = (bfs_rrc_box){ 0, 0, 3000, 4000, 0 };
	bfs_rrc_map_box(&b, 4000, 3000, 682, 512, &r);
	assert_int_equal(r.y, 0);
	assert_int_equal(r.x, 0);
	assert_int_equal(r.h, 512);
	assert_int_equal(r.w, 682);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rrc_boxes_match_torchvision_by_kolmogorov_smirnov),
		cmocka_unit_test(test_rrc_fallback_is_torchvisions_center_crop),
		cmocka_unit_test(test_rrc_the_ks_tests_tell_a_wrong_sampler_apart),
		cmocka_unit_test(test_rrc_draw_depends_on_seed_epoch_and_sample_alone),
		cmocka_unit_test(test_rrc_box_lies_inside_every_image),
		cmocka_unit_test(test_rrc_check_refuses_empty_or_reversed_ranges),
		cmocka_unit_test(test_rrc_reduced_size_bounds_the_shorter_side),
		cmocka_unit_test(test_rrc_map_box_scales_edges_into_the_copy),
	};

	return cmocka_run_group_tests(tests, load_golden, free_golden);
}
