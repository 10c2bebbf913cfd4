/*
 * rrc.c - RandomResizedCrop's box per (seed, epoch, sample) with
 * torchvision's semantics, the reduced copy's size and a box mapped into
 * it (see rrc.h).  Pure functions; no state.
 */
#include "engine/pixels/rrc.h"

#include <errno.h>
#include <math.h>

#include "engine/base/error.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define DOMAIN_RRC 0x7272632d626f7821ULL /* "rrc-box!": unrelated to augment's keys */
#define TRIES 10

/* Draw streams: which counter range each decision reads. */
enum { STREAM_AREA = 0, STREAM_RATIO = 1, STREAM_Y = 2, STREAM_X = 3 };

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The i-th 64-bit word of a stream of a sample's key. */
static uint64_t word(uint64_t key, unsigned stream, uint32_t i)
{
	return mix64(key + GOLDEN * (1 + ((uint64_t)stream << 32) + i));
}

/* a + (b - a) * u, u uniform on the multiples of 2^-53 in [0, 1). */
static double uniform_real(uint64_t key, unsigned stream, uint32_t i, double a, double b)
{
	double u = (double)(word(key, stream, i) >> 11) * 0x1p-53;

	return a + (b - a) * u;
}

/* Uniform on [0, range), range >= 1: Lemire's multiply-shift, rejecting
 * the words whose low product falls under 2^64 mod range. */
static uint64_t uniform_int(uint64_t key, unsigned stream, uint64_t range)
{
	uint64_t threshold = (0 - range) % range;

	for (uint32_t i = 0;; i++) {
		unsigned __int128 m = (unsigned __int128)word(key, stream, i) * range;

		if ((uint64_t)m >= threshold)
			return (uint64_t)(m >> 64);
	}
}

/* Python's int(round(v)) for 0 <= v < 2^31: halves to even. */
static long round_even(double v)
{
	return (long)nearbyint(v);
}

int bfs_rrc_check(const bfs_rrc_opts *o, char *errmsg)
{
	if (!o || !isfinite(o->scale[0]) || !isfinite(o->scale[1]) ||
	    !isfinite(o->ratio[0]) || !isfinite(o->ratio[1])) {
		bfs_seterr(errmsg, "RandomResizedCrop scale and ratio must be finite numbers");
		return -EINVAL;
	}
	if (!(o->scale[0] > 0) || o->scale[0] > o->scale[1] || o->scale[1] > 1) {
		bfs_seterr(errmsg, "--rrc-scale %g,%g: need 0 < min <= max <= 1",
			   o->scale[0], o->scale[1]);
		return -EINVAL;
	}
	if (!(o->ratio[0] > 0) || o->ratio[0] > o->ratio[1]) {
		bfs_seterr(errmsg, "--rrc-ratio %g,%g: need 0 < min <= max",
			   o->ratio[0], o->ratio[1]);
		return -EINVAL;
	}
	return 0;
}

void bfs_rrc_draw(uint64_t seed, uint64_t epoch, uint64_t sample, int width, int height,
                  const bfs_rrc_opts *o, bfs_rrc_box *out)
{
	uint64_t key = mix64(mix64(mix64(seed ^ DOMAIN_RRC) ^ epoch) ^ sample);
	double area = (double)width * (double)height;
	double lr0 = log(o->ratio[0]), lr1 = log(o->ratio[1]), in_ratio;

	for (uint32_t t = 0; t < TRIES; t++) {
		double target = area * uniform_real(key, STREAM_AREA, t, o->scale[0], o->scale[1]);
		double aspect = exp(uniform_real(key, STREAM_RATIO, t, lr0, lr1));
		long w = round_even(sqrt(target * aspect)), h = round_even(sqrt(target / aspect));

		if (w > 0 && w <= width && h > 0 && h <= height) {
			/* only the try that fits draws a position */
			out->h = (int)h;
			out->w = (int)w;
			out->y = (int)uniform_int(key, STREAM_Y, (uint64_t)(height - h) + 1);
			out->x = (int)uniform_int(key, STREAM_X, (uint64_t)(width - w) + 1);
			out->fallback = 0;
			return;
		}
	}
	in_ratio = (double)width / (double)height;
	if (in_ratio < o->ratio[0]) {
		out->w = width;
		out->h = (int)round_even((double)width / o->ratio[0]);
	} else if (in_ratio > o->ratio[1]) {
		out->h = height;
		out->w = (int)round_even((double)height * o->ratio[1]);
	} else {
		out->w = width;
		out->h = height;
	}
	/* rounding can step one pixel past the side (torchvision would
	 * then crop past the edge, which it pads); stay inside */
	if (out->h > height)
		out->h = height;
	if (out->w > width)
		out->w = width;
	if (out->h < 1)
		out->h = 1;
	if (out->w < 1)
		out->w = 1;
	out->y = (height - out->h) / 2;
	out->x = (width - out->w) / 2;
	out->fallback = 1;
}

void bfs_rrc_reduced_size(int width, int height, int res, int *rw, int *rh)
{
	int shorter = width <= height ? width : height;

	if (res <= 0 || shorter <= res) {
		*rw = width;
		*rh = height;
	} else if (width <= height) {
		*rw = res;
		*rh = (int)((int64_t)res * height / width);
	} else {
		*rh = res;
		*rw = (int)((int64_t)res * width / height);
	}
}

/* One axis of bfs_rrc_map_box: [a, a + n) of size `from` into size `to`. */
static void map_axis(int a, int n, int from, int to, int *oa, int *on)
{
	int64_t lo = ((int64_t)2 * a * to + from) / (2 * (int64_t)from);
	int64_t hi = ((int64_t)2 * (a + n) * to + from) / (2 * (int64_t)from);

	if (hi - lo < 1)
		hi = lo + 1;
	if (hi > to) {
		lo -= hi - to;
		hi = to;
	}
	if (lo < 0)
		lo = 0;
	*oa = (int)lo;
	*on = (int)(hi - lo);
}

void bfs_rrc_map_box(const bfs_rrc_box *b, int width, int height, int rw, int rh,
                     bfs_rrc_box *out)
{
	bfs_rrc_box r = *b;

	if (rw != width)
		map_axis(b->x, b->w, width, rw, &r.x, &r.w);
	if (rh != height)
		map_axis(b->y, b->h, height, rh, &r.y, &r.h);
	*out = r;
}
