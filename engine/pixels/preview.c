/*
 * preview.c - batch contact sheets (see preview.h): undo normalization,
 * area-average each image into a tile, print labels with a built-in 5x7
 * font, encode with TurboJPEG.
 *
 * Per call: one RGB sheet, one float image and one float half-resized
 * image as scratch, one compressor.  Nothing is shared between calls.
 */
#include "engine/pixels/preview.h"

#include "engine/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#define MARGIN 4
#define DEFAULT_TILE 128
#define DEFAULT_QUALITY 90
#define GLYPH_W 5
#define GLYPH_H 8          /* 7 rows and a descender row */
#define ADVANCE 6         /* glyph plus one column of space */
#define TEXT_PAD 2        /* above and below the text in a label strip */
#define BIG_TEXT_TILE 200 /* tiles this wide get glyphs at 2x */
#define MAX_LABEL 256     /* bytes of label text considered */

static const uint8_t BG[3] = { 24, 24, 24 };
static const uint8_t FG[3] = { 240, 240, 240 };

/* 5x7 glyphs (g j p q y , reach into an 8th row), one byte per row, bit 4
 * the leftmost pixel.  A character with no rows set (other than ' ') is
 * drawn as '?'. */
static const uint8_t font[128][GLYPH_H] = {
	['-'] = { 0, 0, 0, 0x1f, 0, 0, 0 },
	['.'] = { 0, 0, 0, 0, 0, 0x0c, 0x0c },
	['_'] = { 0, 0, 0, 0, 0, 0, 0x1f },
	[':'] = { 0, 0x0c, 0x0c, 0, 0x0c, 0x0c, 0 },
	['/'] = { 0, 0x01, 0x02, 0x04, 0x08, 0x10, 0 },
	[','] = { 0, 0, 0, 0, 0, 0x0c, 0x04, 0x08 },
	['('] = { 0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02 },
	[')'] = { 0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08 },
	['+'] = { 0, 0x04, 0x04, 0x1f, 0x04, 0x04, 0 },
	['\''] = { 0x0c, 0x04, 0x08, 0, 0, 0, 0 },
	['?'] = { 0x0e, 0x11, 0x01, 0x02, 0x04, 0, 0x04 },
	['0'] = { 0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e },
	['1'] = { 0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e },
	['2'] = { 0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f },
	['3'] = { 0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e },
	['4'] = { 0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02 },
	['5'] = { 0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e },
	['6'] = { 0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e },
	['7'] = { 0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08 },
	['8'] = { 0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e },
	['9'] = { 0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c },
	['A'] = { 0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11 },
	['B'] = { 0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e },
	['C'] = { 0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e },
	['D'] = { 0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c },
	['E'] = { 0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f },
	['F'] = { 0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10 },
	['G'] = { 0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f },
	['H'] = { 0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11 },
	['I'] = { 0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e },
	['J'] = { 0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c },
	['K'] = { 0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11 },
	['L'] = { 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f },
	['M'] = { 0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11 },
	['N'] = { 0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11 },
	['O'] = { 0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e },
	['P'] = { 0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10 },
	['Q'] = { 0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d },
	['R'] = { 0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11 },
	['S'] = { 0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e },
	['T'] = { 0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04 },
	['U'] = { 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e },
	['V'] = { 0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04 },
	['W'] = { 0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a },
	['X'] = { 0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11 },
	['Y'] = { 0x11, 0x11, 0x11, 0x0a, 0x04, 0x04, 0x04 },
	['Z'] = { 0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f },
	['a'] = { 0, 0, 0x0e, 0x01, 0x0f, 0x11, 0x0f },
	['b'] = { 0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e },
	['c'] = { 0, 0, 0x0e, 0x10, 0x10, 0x11, 0x0e },
	['d'] = { 0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f },
	['e'] = { 0, 0, 0x0e, 0x11, 0x1f, 0x10, 0x0e },
	['f'] = { 0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08 },
	['g'] = { 0, 0, 0x0f, 0x11, 0x11, 0x0f, 0x01, 0x0e },
	['h'] = { 0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11 },
	['i'] = { 0x04, 0, 0x0c, 0x04, 0x04, 0x04, 0x0e },
	['j'] = { 0x02, 0, 0x06, 0x02, 0x02, 0x02, 0x12, 0x0c },
	['k'] = { 0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12 },
	['l'] = { 0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e },
	['m'] = { 0, 0, 0x1a, 0x15, 0x15, 0x11, 0x11 },
	['n'] = { 0, 0, 0x16, 0x19, 0x11, 0x11, 0x11 },
	['o'] = { 0, 0, 0x0e, 0x11, 0x11, 0x11, 0x0e },
	['p'] = { 0, 0, 0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10 },
	['q'] = { 0, 0, 0x0f, 0x11, 0x11, 0x0f, 0x01, 0x01 },
	['r'] = { 0, 0, 0x16, 0x19, 0x10, 0x10, 0x10 },
	['s'] = { 0, 0, 0x0e, 0x10, 0x0e, 0x01, 0x1e },
	['t'] = { 0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06 },
	['u'] = { 0, 0, 0x11, 0x11, 0x11, 0x13, 0x0d },
	['v'] = { 0, 0, 0x11, 0x11, 0x11, 0x0a, 0x04 },
	['w'] = { 0, 0, 0x11, 0x11, 0x15, 0x15, 0x0a },
	['x'] = { 0, 0, 0x11, 0x0a, 0x04, 0x0a, 0x11 },
	['y'] = { 0, 0, 0x11, 0x11, 0x11, 0x0f, 0x01, 0x0e },
	['z'] = { 0, 0, 0x1f, 0x02, 0x04, 0x08, 0x1f },
};

static const uint8_t *glyph(unsigned char c)
{
	static const uint8_t blank[GLYPH_H];

	if (c == ' ')
		return blank;
	if (c < 128)
		for (int r = 0; r < GLYPH_H; r++)
			if (font[c][r])
				return font[c];
	return font['?'];
}

const uint8_t *bfs_preview_glyph(unsigned char c)
{
	return glyph(c);
}

/* IEEE half to float, subnormals, infinities and NaN included. */
static float half_to_float(uint16_t h)
{
	unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float v;

	if (e == 0)
		v = ldexpf((float)m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexpf((float)(m | 0x400), (int)e - 25);
	return (h & 0x8000) ? -v : v;
}

/* ------------------------------------------------------------------ */
/* Geometry                                                            */

typedef struct {
	int tw, th;      /* tile */
	int scale;       /* glyph scale */
	int strip;       /* label strip height (0 without labels) */
	int cols, rows;
	int width, height;
} layout;

static int plan(const bfs_preview_opts *o, unsigned n, int labels,
		layout *l, char *errmsg)
{
	unsigned tile = o->tile ? o->tile : DEFAULT_TILE;
	uint64_t cols, rows, width, height;

	if (o->h < 1 || o->w < 1 || n == 0) {
		bfs_seterr(errmsg, "preview: %u images of %dx%d: nothing to "
			   "show", n, o->w, o->h);
		return -EINVAL;
	}
	if (tile > BFS_PREVIEW_MAX_SIDE)
		tile = BFS_PREVIEW_MAX_SIDE;
	if ((unsigned)o->w <= tile && (unsigned)o->h <= tile) {
		l->tw = o->w;
		l->th = o->h;
	} else {
		double s = (double)tile / (o->w > o->h ? o->w : o->h);

		l->tw = (int)lround(o->w * s);
		l->th = (int)lround(o->h * s);
		if (l->tw < 1)
			l->tw = 1;
		if (l->th < 1)
			l->th = 1;
	}
	l->scale = l->tw >= BIG_TEXT_TILE ? 2 : 1;
	l->strip = labels ? 2 * TEXT_PAD + GLYPH_H * l->scale : 0;
	for (cols = 1; cols * cols < n; cols++)
		;
	rows = (n + cols - 1) / cols;
	width = cols * (uint64_t)l->tw + (cols + 1) * MARGIN;
	height = rows * (uint64_t)(l->th + l->strip) + (rows + 1) * MARGIN;
	if (width > BFS_PREVIEW_MAX_SIDE || height > BFS_PREVIEW_MAX_SIDE) {
		bfs_seterr(errmsg, "preview: a sheet of %u tiles of %dx%d "
			   "would be %llux%llu, over the JPEG limit of %d; "
			   "use a smaller tile", n, l->tw, l->th,
			   (unsigned long long)width,
			   (unsigned long long)height, BFS_PREVIEW_MAX_SIDE);
		return -EINVAL;
	}
	l->cols = (int)cols;
	l->rows = (int)rows;
	l->width = (int)width;
	l->height = (int)height;
	return 0;
}

int bfs_preview_size(const bfs_preview_opts *o, unsigned n, int labels,
		     int *width, int *height)
{
	layout l;
	int err;

	if (!o || !width || !height)
		return -EINVAL;
	if ((err = plan(o, n, labels, &l, NULL)))
		return err;
	*width = l.width;
	*height = l.height;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Pixels                                                              */

/* Image i as display values in [0, 255], HWC floats. */
static void to_display(const bfs_preview_opts *o, const void *images,
		       size_t i, float *out)
{
	size_t hw = (size_t)o->h * (size_t)o->w, base = i * hw * 3;
	float mul[3], add[3];

	for (int c = 0; c < 3; c++) {
		float std = o->normalized ? o->std[c] : 1.0f;
		float mean = o->normalized ? o->mean[c] : 0.0f;

		if (o->dtype == BFS_DTYPE_UINT8)
			std /= 255.0f;
		mul[c] = std * 255.0f;
		add[c] = mean * 255.0f;
	}
	for (size_t p = 0; p < hw; p++) {
		for (int c = 0; c < 3; c++) {
			size_t at = base + (o->nchw ? (size_t)c * hw + p
						    : p * 3 + (size_t)c);
			float x, v;

			switch (o->dtype) {
			case BFS_DTYPE_UINT8:
				x = ((const uint8_t *)images)[at];
				break;
			case BFS_DTYPE_FLOAT16:
				x = half_to_float(((const uint16_t *)images)[at]);
				break;
			default:
				x = ((const float *)images)[at];
				break;
			}
			v = x * mul[c] + add[c];
			if (!(v > 0.0f))
				v = 0.0f; /* and NaN */
			else if (v > 255.0f)
				v = 255.0f;
			out[p * 3 + (size_t)c] = v;
		}
	}
}

/*
 * Area-average each of h rows of `in` RGB pixels down to `out` pixels:
 * output pixel o covers input [o * in / out, (o + 1) * in / out), partly
 * covered pixels weighted by their share.  Exact copy when in == out.
 */
static void shrink_rows(const float *src, int h, int in, float *dst, int out)
{
	double ratio = (double)in / out;

	for (size_t line = 0; line < (size_t)h; line++) {
		const float *s = src + line * (size_t)in * 3;
		float *d = dst + line * (size_t)out * 3;

		for (int o = 0; o < out; o++) {
			double x0 = o * ratio, x1 = (o + 1) * ratio;
			int i0 = (int)x0, i1 = (int)ceil(x1);
			double acc[3] = { 0, 0, 0 };

			if (i1 > in)
				i1 = in;
			for (int i = i0; i < i1; i++) {
				double lo = i > x0 ? i : x0;
				double hi = i + 1 < x1 ? i + 1 : x1;
				double wgt = hi - lo;

				for (int c = 0; c < 3; c++)
					acc[c] += wgt * s[(size_t)i * 3 + (size_t)c];
			}
			for (int c = 0; c < 3; c++)
				d[(size_t)o * 3 + (size_t)c] =
					(float)(acc[c] / (x1 - x0));
		}
	}
}

/* The same area average down the columns of h rows of tw RGB pixels to
 * th rows, rounded into dst (rows `pitch` bytes apart). */
static void shrink_cols(const float *src, int h, int tw, int th, uint8_t *dst,
			size_t pitch)
{
	double ratio = (double)h / th;
	size_t line = (size_t)tw * 3;

	for (int r = 0; r < th; r++) {
		double y0 = r * ratio, y1 = (r + 1) * ratio;
		int i0 = (int)y0, i1 = (int)ceil(y1);
		uint8_t *d = dst + (size_t)r * pitch;

		if (i1 > h)
			i1 = h;
		for (size_t c = 0; c < line; c++) {
			double acc = 0;

			for (int k = i0; k < i1; k++) {
				double lo = k > y0 ? k : y0;
				double hi = k + 1 < y1 ? k + 1 : y1;

				acc += (hi - lo) * src[(size_t)k * line + c];
			}
			acc /= y1 - y0;
			d[c] = (uint8_t)lrint(acc < 0 ? 0 : acc > 255 ? 255 : acc);
		}
	}
}

static void fill_rect(uint8_t *sheet, int width, int x, int y, int w, int h,
		      const uint8_t rgb[3])
{
	for (int r = 0; r < h; r++) {
		uint8_t *p = sheet + ((size_t)(y + r) * (size_t)width +
				      (size_t)x) * 3;

		for (int c = 0; c < w; c++, p += 3)
			memcpy(p, rgb, 3);
	}
}

/* The label text of a tile: printable characters, '?' for the rest. */
static size_t label_text(int64_t label, const char *const *names,
			 size_t nnames, char *out, size_t cap)
{
	const char *s;
	char num[24];
	size_t n = 0;

	if (names && label >= 0 && (uint64_t)label < nnames) {
		s = names[label];
	} else {
		snprintf(num, sizeof(num), "%lld", (long long)label);
		s = num;
	}
	for (; *s && n + 1 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x80 && c < 0xc0)
			continue; /* UTF-8 continuation: one '?' per sequence */
		out[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	out[n] = '\0';
	return n;
}

/* Draw text centred in [x, x + w) at row y; cut to fit, marked by '.'. */
static void draw_text(uint8_t *sheet, int width, int x, int y, int w,
		      int scale, char *text, size_t len)
{
	size_t fit = (size_t)((w + scale) / (ADVANCE * scale));
	int tx;

	if (len > fit) {
		len = fit;
		if (len)
			text[len - 1] = '.';
	}
	tx = x + (w - ((int)len * ADVANCE - 1) * scale) / 2;
	if (tx < x)
		tx = x;
	for (size_t k = 0; k < len; k++, tx += ADVANCE * scale) {
		const uint8_t *g = glyph((unsigned char)text[k]);

		for (int r = 0; r < GLYPH_H; r++)
			for (int c = 0; c < GLYPH_W; c++)
				if (g[r] & (0x10 >> c))
					fill_rect(sheet, width, tx + c * scale,
						  y + r * scale, scale, scale,
						  FG);
	}
}

int bfs_preview_render(const bfs_preview_opts *o, const void *images,
		       const int64_t *labels, const char *const *class_names,
		       unsigned n, unsigned char **jpeg,
		       unsigned long *jpeg_len, char *errmsg)
{
	layout l;
	uint8_t *sheet = NULL;
	float *img = NULL, *half = NULL;
	size_t nnames = 0, hw;
	tjhandle tj = NULL;
	int quality, err;

	if (jpeg)
		*jpeg = NULL;
	if (jpeg_len)
		*jpeg_len = 0;
	if (!o || !images || !jpeg || !jpeg_len) {
		bfs_seterr(errmsg, "preview: NULL argument");
		return -EINVAL;
	}
	if (o->dtype != BFS_DTYPE_FLOAT32 && o->dtype != BFS_DTYPE_FLOAT16 &&
	    o->dtype != BFS_DTYPE_UINT8) {
		bfs_seterr(errmsg, "preview: unknown dtype %d", (int)o->dtype);
		return -EINVAL;
	}
	if (o->quality < 0 || o->quality > 100) {
		bfs_seterr(errmsg, "preview: quality %d is not in 1..100",
			   o->quality);
		return -EINVAL;
	}
	quality = o->quality ? o->quality : DEFAULT_QUALITY;
	if ((err = plan(o, n, labels != NULL, &l, errmsg)))
		return err;
	hw = (size_t)o->h * (size_t)o->w;
	if (hw / (size_t)o->w != (size_t)o->h ||
	    hw > SIZE_MAX / 3 / sizeof(float) / n) {
		bfs_seterr(errmsg, "preview: %u images of %dx%d are too many "
			   "to address", n, o->w, o->h);
		return -EINVAL;
	}
	if (class_names)
		while (class_names[nnames])
			nnames++;

	sheet = malloc((size_t)l.width * (size_t)l.height * 3);
	img = malloc(hw * 3 * sizeof(float));
	half = malloc((size_t)o->h * (size_t)l.tw * 3 * sizeof(float));
	if (!sheet || !img || !half) {
		bfs_seterr(errmsg, "preview: out of memory for a %dx%d sheet",
			   l.width, l.height);
		err = -ENOMEM;
		goto out;
	}
	fill_rect(sheet, l.width, 0, 0, l.width, l.height, BG);

	for (unsigned i = 0; i < n; i++) {
		int col = (int)(i % (unsigned)l.cols);
		int row = (int)(i / (unsigned)l.cols);
		int x = MARGIN + col * (l.tw + MARGIN);
		int y = MARGIN + row * (l.th + l.strip + MARGIN);

		to_display(o, images, i, img);
		/* rows first (w -> tw), then columns (h -> th) */
		shrink_rows(img, o->h, o->w, half, l.tw);
		shrink_cols(half, o->h, l.tw, l.th,
			    sheet + ((size_t)y * (size_t)l.width + (size_t)x) * 3,
			    (size_t)l.width * 3);
		if (labels) {
			char text[MAX_LABEL];
			size_t len = label_text(labels[i], class_names, nnames,
						text, sizeof(text));

			draw_text(sheet, l.width, x, y + l.th + TEXT_PAD, l.tw,
				  l.scale, text, len);
		}
	}

	tj = tjInitCompress();
	if (!tj) {
		bfs_seterr(errmsg, "preview: TurboJPEG: %s",
			   tjGetErrorStr2(NULL));
		err = -EIO;
		goto out;
	}
	if (tjCompress2(tj, sheet, l.width, 0, l.height, TJPF_RGB, jpeg,
			jpeg_len, TJSAMP_420, quality, 0) != 0) {
		bfs_seterr(errmsg, "preview: TurboJPEG: %s",
			   tjGetErrorStr2(tj));
		tjFree(*jpeg);
		*jpeg = NULL;
		*jpeg_len = 0;
		err = -EIO;
		goto out;
	}
	err = 0;
out:
	if (tj)
		tjDestroy(tj);
	free(half);
	free(img);
	free(sheet);
	return err;
}
