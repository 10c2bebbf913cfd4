/*
 * plot.c - a mount's history as three charts, then PNG (see plot.h).
 */
#include "fs/plot.h"

#include <errno.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/pixels/preview.h"

#define S        2     /* font scale */
#define ADV      ((BFS_PREVIEW_GLYPH_W + 1) * S)
#define TEXT_H   (BFS_PREVIEW_GLYPH_H * S)
#define HEADER   36    /* the top line */
#define FOOTER   8
#define LEFT     96    /* room for the y tick labels */
#define RIGHT    24
#define P_TITLE  28    /* a panel's title strip, above its plot area */
#define P_XLAB   30    /* its time labels, below */

typedef struct { uint8_t r, g, b; } rgb_t;

#define RGB(c) { (uint8_t)((c) >> 16), (uint8_t)((c) >> 8), (uint8_t)(c) }

static const rgb_t BG = RGB(BFS_PLOT_BG), INK = { 30, 30, 30 },
	AXIS = { 70, 70, 70 }, GRID = { 228, 228, 228 },
	SERVED = RGB(BFS_PLOT_SERVED), SERVED_TINT = { 206, 225, 241 },
	DECODED = RGB(BFS_PLOT_DECODED),
	WAIT = RGB(BFS_PLOT_WAIT), WAIT_TINT = { 246, 207, 207 },
	HIT = RGB(BFS_PLOT_HIT), HIT_TINT = { 205, 236, 199 },
	NOTE = { 140, 140, 140 };

typedef struct {
	uint8_t *px;
	int w, h;
} canvas;

static void put(canvas *c, int x, int y, rgb_t col)
{
	uint8_t *p;

	if (x < 0 || y < 0 || x >= c->w || y >= c->h)
		return;
	p = c->px + 3 * ((size_t)y * (size_t)c->w + (size_t)x);
	p[0] = col.r;
	p[1] = col.g;
	p[2] = col.b;
}

static void rect(canvas *c, int x0, int y0, int x1, int y1, rgb_t col)
{
	if (x0 > x1) { int t = x0; x0 = x1; x1 = t; }
	if (y0 > y1) { int t = y0; y0 = y1; y1 = t; }
	for (int y = y0; y <= y1; y++)
		for (int x = x0; x <= x1; x++)
			put(c, x, y, col);
}

static int text_w(const char *s)
{
	size_t n = strlen(s);

	return n ? (int)n * ADV - S : 0;
}

static void text(canvas *c, int x, int y, const char *s, rgb_t col)
{
	for (; *s; s++, x += ADV) {
		const uint8_t *g = bfs_preview_glyph((unsigned char)*s);

		for (int r = 0; r < BFS_PREVIEW_GLYPH_H; r++)
			for (int k = 0; k < BFS_PREVIEW_GLYPH_W; k++)
				if (g[r] & (0x10 >> k))
					rect(c, x + k * S, y + r * S,
					     x + k * S + S - 1, y + r * S + S - 1, col);
	}
}

/* ---- the numbers -------------------------------------------------------- */

size_t bfs_plot_rates(const bfs_history_point *p, size_t n, bfs_plot_rate *out)
{
	size_t k = 0, prev = 0;

	while (prev < n && !isfinite(p[prev].t))
		prev++;
	for (size_t i = prev + 1; i < n; i++) {
		const bfs_history_point *a = &p[prev], *b = &p[i];
		double dt = b->t - a->t;
		uint64_t dh, dm;

		if (!(dt > 0) || !isfinite(dt) || !isfinite(b->wait_s))
			continue; /* not after the one before: passed over */
		dh = b->hits > a->hits ? b->hits - a->hits : 0;
		dm = b->misses > a->misses ? b->misses - a->misses : 0;
		out[k].t0 = a->t;
		out[k].t1 = b->t;
		out[k].served = b->served > a->served ? (double)(b->served - a->served) / dt : 0;
		out[k].decoded = b->decoded > a->decoded ? (double)(b->decoded - a->decoded) / dt : 0;
		out[k].wait = b->wait_s > a->wait_s ? (b->wait_s - a->wait_s) / dt : 0;
		out[k].hit = dh + dm ? (double)dh / (double)(dh + dm) : NAN;
		k++;
		prev = i;
	}
	return k;
}

/* A round top for values up to v, and the tick step: 4 to 8 ticks of 1,
 * 2, 2.5 or 5 times a power of ten. */
static void axis(double v, double *top, double *step)
{
	static const double m[] = { 1, 2, 2.5, 5, 10 };
	double raw, p;

	if (!(v > 0) || !isfinite(v)) {
		*top = 1; /* nothing to show: 0 to 1 */
		*step = 0.25;
		return;
	}
	if (v > 1e300)
		v = 1e300; /* room for the 5 % below */
	v *= 1.05; /* a little room above the highest value */
	raw = v / 4;
	p = pow(10, floor(log10(raw)));
	for (size_t i = 0; i < sizeof(m) / sizeof(*m); i++)
		if (m[i] * p >= raw) {
			*step = m[i] * p;
			break;
		}
	*top = *step * ceil(v / *step - 1e-9);
}

/* The time tick step for an axis of tmax seconds: at most 8 ticks. */
static double time_step(double tmax)
{
	static const double s[] = { 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900,
				    1800, 3600, 7200, 10800, 21600, 43200, 86400 };
	double d = 86400;

	for (size_t i = 0; i < sizeof(s) / sizeof(*s); i++)
		if (tmax / s[i] <= 8)
			return s[i];
	while (tmax / d > 8)
		d *= 2;
	return d;
}

static void fmt_time(double t, char *buf, size_t cap)
{
	unsigned long long s;

	if (!(t >= 0) || t > 1e15) {
		snprintf(buf, cap, "%.3gs", t); /* not from a real mount */
		return;
	}
	s = (unsigned long long)llround(t);

	if (s >= 86400 && s % 86400 == 0)
		snprintf(buf, cap, "%llud", s / 86400);
	else if (s >= 3600 && s % 3600 == 0)
		snprintf(buf, cap, "%lluh", s / 3600);
	else if (s >= 3600)
		snprintf(buf, cap, "%lluh%02llum", s / 3600, s % 3600 / 60);
	else if (s >= 60 && s % 60 == 0)
		snprintf(buf, cap, "%llum", s / 60);
	else if (s >= 60)
		snprintf(buf, cap, "%llum%02llus", s / 60, s % 60);
	else
		snprintf(buf, cap, "%llus", s);
}

static void fmt_val(double v, double step, char *buf, size_t cap)
{
	int d = 0;

	if (step >= 1 && v >= 10000 && fmod(v, 1000) == 0) {
		snprintf(buf, cap, "%.0fk", v / 1000);
		return;
	}
	while (d < 4) {
		double x = step * pow(10, d);

		if (fabs(x - round(x)) < 1e-6)
			break;
		d++;
	}
	snprintf(buf, cap, "%.*f", d, v);
}

static int check_size(const bfs_plot_opts *o, int *w, int *h)
{
	*w = o->width ? o->width : BFS_PLOT_WIDTH;
	*h = o->height ? o->height : BFS_PLOT_HEIGHT;
	if (*w < BFS_PLOT_MIN_W || *h < BFS_PLOT_MIN_H ||
	    *w > BFS_PLOT_MAX_SIDE || *h > BFS_PLOT_MAX_SIDE)
		return -EINVAL;
	return 0;
}

/* Panel k's value of rate r: images/s served, wait, hit percent. */
static double value(int k, const bfs_plot_rate *r)
{
	return k == 0 ? r->served : k == 1 ? r->wait : r->hit * 100;
}

static int layout(const bfs_plot_opts *o, const bfs_plot_rate *r, size_t n,
		  int k, bfs_plot_box *b, double *ystep)
{
	int w, h, ph;
	double hi = 0;

	if (k < 0 || k >= BFS_PLOT_PANELS || check_size(o, &w, &h))
		return -EINVAL;
	ph = (h - HEADER - FOOTER) / BFS_PLOT_PANELS;
	b->x0 = LEFT;
	b->x1 = w - RIGHT;
	b->y0 = HEADER + k * ph + P_TITLE;
	b->y1 = HEADER + (k + 1) * ph - P_XLAB;
	b->tmax = n ? r[n - 1].t1 : 0;
	if (!(b->tmax > 0) || !isfinite(b->tmax))
		b->tmax = 60; /* nothing yet: a minute's axis */
	if (k == 2) {
		b->ymax = 100;
		*ystep = 25;
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		double v = value(k, &r[i]);

		if (k == 0 && r[i].decoded > v)
			v = r[i].decoded;
		if (v > hi)
			hi = v;
	}
	axis(hi, &b->ymax, ystep);
	return 0;
}

int bfs_plot_layout(const bfs_plot_opts *o, const bfs_plot_rate *r, size_t n,
		    int k, bfs_plot_box *box)
{
	double step;

	if (!o || !box || (n && !r))
		return -EINVAL;
	return layout(o, r, n, k, box, &step);
}

/* ---- drawing ------------------------------------------------------------ */

static int xof(const bfs_plot_box *b, double t)
{
	double x = b->x0 + t / b->tmax * (b->x1 - b->x0);

	return (int)lround(x < b->x0 ? b->x0 : x > b->x1 ? b->x1 : x);
}

static int yof(const bfs_plot_box *b, double v)
{
	double f = v / b->ymax;

	if (f > 1)
		f = 1;
	if (!(f > 0))
		f = 0;
	return b->y1 - (int)lround(f * (b->y1 - b->y0));
}

static void frame(canvas *c, const bfs_plot_box *b, double ystep,
		  const char *title)
{
	char lab[32];
	double ts = time_step(b->tmax);

	text(c, b->x0, b->y0 - P_TITLE + 4, title, INK);
	for (int i = 0; ; i++) {
		double v = i * ystep;
		int y;

		if (v > b->ymax + ystep * 1e-6)
			break;
		y = yof(b, v);
		if (i > 0)
			rect(c, b->x0, y, b->x1, y, GRID);
		rect(c, b->x0 - 5, y, b->x0 - 1, y, AXIS);
		fmt_val(v, ystep, lab, sizeof(lab));
		text(c, b->x0 - 10 - text_w(lab), y - TEXT_H / 2 + 1, lab, INK);
	}
	for (int i = 0; ; i++) {
		double t = i * ts;
		int x, lw;

		if (t > b->tmax + 1e-9)
			break;
		x = xof(b, t);
		if (i > 0)
			rect(c, x, b->y0, x, b->y1 - 1, GRID);
		rect(c, x, b->y1 + 1, x, b->y1 + 5, AXIS);
		fmt_time(t, lab, sizeof(lab));
		lw = text_w(lab);
		if (x + lw / 2 > c->w - 2)
			x = c->w - 2 - lw / 2;
		text(c, x - lw / 2, b->y1 + 10, lab, INK);
	}
	rect(c, b->x0, b->y0, b->x0, b->y1, AXIS);
	rect(c, b->x0, b->y1, b->x1, b->y1, AXIS);
}

/* One series as steps: flat across each interval, 2 pixels thick, joined
 * where intervals meet; the area under it tinted when tint is set. */
static void series(canvas *c, const bfs_plot_box *b, const bfs_plot_rate *r,
		   size_t n, int k, int decoded, rgb_t col, const rgb_t *tint)
{
	int have = 0, py = 0;
	double pt = 0;

	for (size_t i = 0; i < n; i++) {
		double v = decoded ? r[i].decoded : value(k, &r[i]);
		int xa, xb, y;

		if (isnan(v)) {
			have = 0;
			continue;
		}
		xa = xof(b, r[i].t0);
		xb = xof(b, r[i].t1);
		y = yof(b, v);
		if (tint && y + 1 <= b->y1 - 1)
			rect(c, xa, y + 1, xb, b->y1 - 1, *tint);
		rect(c, xa, y - 1, xb, y, col);
		if (have && pt == r[i].t0)
			rect(c, xa - 1, py, xa, y, col);
		have = 1;
		py = y;
		pt = r[i].t1;
	}
}

static void note(canvas *c, const bfs_plot_box *b, const char *s)
{
	text(c, (b->x0 + b->x1 - text_w(s)) / 2, (b->y0 + b->y1 - TEXT_H) / 2, s, NOTE);
}

int bfs_plot_render(const bfs_plot_opts *o, const bfs_history_point *p,
		    size_t n, uint8_t **rgb, int *w, int *h)
{
	static const char *titles[BFS_PLOT_PANELS] = {
		"images per second",
		"reader wait (seconds per second, all readers)",
		"cache hit rate (percent of lookups)",
	};
	bfs_plot_rate *r = NULL;
	size_t nr = 0;
	canvas c;
	int err;

	if (!o || !rgb || !w || !h || (n && !p))
		return -EINVAL;
	*rgb = NULL;
	if ((err = check_size(o, &c.w, &c.h)))
		return err;
	if (n > 1 && !(r = malloc((n - 1) * sizeof(*r))))
		return -ENOMEM;
	if (!(c.px = malloc((size_t)c.w * (size_t)c.h * 3))) {
		free(r);
		return -ENOMEM;
	}
	rect(&c, 0, 0, c.w - 1, c.h - 1, BG);
	if (r)
		nr = bfs_plot_rates(p, n, r);
	{
		char up[64], lab[96];
		int room;

		fmt_time(nr ? r[nr - 1].t1 : 0, up, sizeof(up));
		snprintf(lab, sizeof(lab), "up %s, %zu point%s", up, n, n == 1 ? "" : "s");
		text(&c, c.w - 12 - text_w(lab), 10, lab, NOTE);
		/* the title, its end kept when it is too long */
		room = (c.w - 36 - text_w(lab)) / ADV;
		if (o->title && room > 4) {
			size_t len = strlen(o->title);

			if (len <= (size_t)room) {
				text(&c, 12, 10, o->title, INK);
			} else {
				text(&c, 12, 10, "...", INK);
				text(&c, 12 + 3 * ADV, 10, o->title + len - (size_t)(room - 3), INK);
			}
		}
	}
	for (int k = 0; k < BFS_PLOT_PANELS; k++) {
		bfs_plot_box b;
		double ystep;

		layout(o, r, nr, k, &b, &ystep);
		frame(&c, &b, ystep, titles[k]);
		if (k == 2 && !o->cache) {
			note(&c, &b, "no sample cache on this mount");
			continue;
		}
		if (!nr) {
			note(&c, &b, "no history yet");
			continue;
		}
		if (k == 0) {
			/* the legend, right of the title */
			int x = b.x1 - text_w("served") - text_w("decoded") - 3 * 24;

			rect(&c, x, b.y0 - 16, x + 14, b.y0 - 13, SERVED);
			text(&c, x + 20, b.y0 - 22, "served", INK);
			x += 20 + text_w("served") + 24;
			rect(&c, x, b.y0 - 16, x + 14, b.y0 - 13, DECODED);
			text(&c, x + 20, b.y0 - 22, "decoded", INK);
			series(&c, &b, r, nr, k, 0, SERVED, &SERVED_TINT);
			series(&c, &b, r, nr, k, 1, DECODED, NULL);
			series(&c, &b, r, nr, k, 0, SERVED, NULL); /* on top */
		} else {
			series(&c, &b, r, nr, k, 0, k == 1 ? WAIT : HIT,
			       k == 1 ? &WAIT_TINT : &HIT_TINT);
		}
		/* the axes again, over the tints */
		rect(&c, b.x0, b.y0, b.x0, b.y1, AXIS);
		rect(&c, b.x0, b.y1, b.x1, b.y1, AXIS);
	}
	free(r);
	*rgb = c.px;
	*w = c.w;
	*h = c.h;
	return 0;
}

int bfs_plot_png(const uint8_t *rgb, int w, int h, void **png, size_t *len,
		 char *errmsg)
{
	struct spng_ihdr ihdr = { 0 };
	spng_ctx *ctx;
	void *out;
	size_t n = 0;
	int rc, err = 0;

	if (!rgb || !png || !len || w < 1 || h < 1 ||
	    w > BFS_PLOT_MAX_SIDE || h > BFS_PLOT_MAX_SIDE)
		return -EINVAL;
	*png = NULL;
	*len = 0;
	if (!(ctx = spng_ctx_new(SPNG_CTX_ENCODER)))
		return -ENOMEM;
	ihdr.width = (uint32_t)w;
	ihdr.height = (uint32_t)h;
	ihdr.bit_depth = 8;
	ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
	if ((rc = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1)) ||
	    (rc = spng_set_ihdr(ctx, &ihdr)) ||
	    (rc = spng_encode_image(ctx, rgb, (size_t)w * (size_t)h * 3,
				    SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE))) {
		bfs_seterr(errmsg, "PNG: %s", spng_strerror(rc));
		err = rc == SPNG_EMEM ? -ENOMEM : -EIO;
		goto out;
	}
	if (!(out = spng_get_png_buffer(ctx, &n, &rc))) {
		bfs_seterr(errmsg, "PNG: %s", spng_strerror(rc));
		err = rc == SPNG_EMEM ? -ENOMEM : -EIO;
		goto out;
	}
	*png = out;
	*len = n;
out:
	spng_ctx_free(ctx);
	return err;
}
