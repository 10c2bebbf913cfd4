/*
 * mkjpeg - deterministic synthetic JPEGs for tests, fixtures and the demo.
 *
 * Paints photo-like content (smooth gradients, a low-frequency ripple, hard-
 * edged shapes, pixel noise) with integer arithmetic only and a splitmix64
 * PRNG, then encodes with TurboJPEG.  Same arguments -> same bytes, on any
 * machine with the same libjpeg-turbo: nothing depends on libc rand or libm.
 *
 *   mkjpeg OUT_DIR [--classes C] [--per-class N] [--seed S] [--min-size 64]
 *          [--max-size 400] [--quality 90] [--gray-every K] [--cmyk-every K]
 *          [--progressive]
 *       writes ImageFolder layout OUT_DIR/class_XXX/img_XXXXX.jpg; width and
 *       height are drawn independently from [min-size, max-size]; chroma
 *       subsampling cycles through 4:2:0, 4:2:2, 4:4:4; every K-th image
 *       (K > 0) is grayscale / CMYK (Adobe inverted ink, stored as YCCK).
 *
 *   mkjpeg --one OUT.jpg WxH [--seed S] [--quality Q] [--gray | --cmyk]
 *          [--progressive] [--subsamp 420|422|444|440]
 *       writes one file (default 4:2:0).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <turbojpeg.h>

enum kind { KIND_RGB, KIND_GRAY, KIND_CMYK };

struct opts {
	const char *out;
	int one, w, h;
	int classes, per_class;
	uint64_t seed;
	int min_size, max_size, quality;
	int gray_every, cmyk_every;
	int progressive;
	int subsamp; /* -1: cycle (folder mode) */
	enum kind kind;
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static int rnd(uint64_t *s, int lo, int hi)
{
	return lo + (int)(splitmix64(s) % (uint64_t)(hi - lo + 1));
}

static int clamp255(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : v;
}

/* Triangle wave with period p (> 0), amplitude 0..256. */
static int tri(int64_t x, int p)
{
	int64_t m = x % p;

	if (m < 0)
		m += p;
	m = m * 512 / p;
	return (int)(m < 256 ? m : 512 - m);
}

/* Photo-like RGB content; `tint` biases the palette (one per class). */
static void paint(uint8_t *rgb, int w, int h, uint64_t *s, int tint)
{
	int c0[3], c1[3], amp[3];
	int dx = rnd(s, -256, 256), dy = rnd(s, -256, 256);
	int px = rnd(s, 16, 160), py = rnd(s, 16, 160);
	int64_t tmin, tmax;
	int nshapes, i, x, y, c;

	for (c = 0; c < 3; c++) {
		int bias = ((tint >> c) & 1) ? 60 : 0;
		c0[c] = clamp255(rnd(s, 0, 195) + bias);
		c1[c] = clamp255(rnd(s, 0, 195) + bias);
		amp[c] = rnd(s, 0, 40);
	}
	/* Range of the gradient coordinate over the four corners. */
	{
		int64_t a = 0, b = (int64_t)(w - 1) * dx, cc = (int64_t)(h - 1) * dy;
		int64_t d = b + cc;
		tmin = a; tmax = a;
		if (b < tmin) tmin = b;
		if (b > tmax) tmax = b;
		if (cc < tmin) tmin = cc;
		if (cc > tmax) tmax = cc;
		if (d < tmin) tmin = d;
		if (d > tmax) tmax = d;
		if (tmax == tmin)
			tmax = tmin + 1;
	}
	for (y = 0; y < h; y++) {
		for (x = 0; x < w; x++) {
			int64_t t = ((int64_t)x * dx + (int64_t)y * dy - tmin) * 256 / (tmax - tmin);
			int ripple = tri(x + tri(y, py) / 8, px) - 128;
			uint8_t *p = rgb + ((size_t)y * w + x) * 3;

			for (c = 0; c < 3; c++)
				p[c] = (uint8_t)clamp255(c0[c] + (int)((c1[c] - c0[c]) * t / 256) +
				                         ripple * amp[c] / 128);
		}
	}
	/* Hard-edged shapes, some with their own gradient. */
	nshapes = rnd(s, 3, 8);
	for (i = 0; i < nshapes; i++) {
		int ellipse = rnd(s, 0, 1), shaded = rnd(s, 0, 1);
		int cx = rnd(s, 0, w - 1), cy = rnd(s, 0, h - 1);
		int rx = rnd(s, 2, w / 3 + 2), ry = rnd(s, 2, h / 3 + 2);
		int col[3];
		int x0, x1, y0, y1;

		for (c = 0; c < 3; c++)
			col[c] = rnd(s, 0, 255);
		x0 = cx - rx < 0 ? 0 : cx - rx;
		x1 = cx + rx >= w ? w - 1 : cx + rx;
		y0 = cy - ry < 0 ? 0 : cy - ry;
		y1 = cy + ry >= h ? h - 1 : cy + ry;
		for (y = y0; y <= y1; y++) {
			for (x = x0; x <= x1; x++) {
				int64_t ex = x - cx, ey = y - cy;
				uint8_t *p = rgb + ((size_t)y * w + x) * 3;
				int shade = shaded ? (int)((ey + ry) * 80 / (2 * ry + 1)) - 40 : 0;

				if (ellipse && ex * ex * ry * ry + ey * ey * rx * rx >
				                       (int64_t)rx * rx * ry * ry)
					continue;
				for (c = 0; c < 3; c++)
					p[c] = (uint8_t)clamp255(col[c] + shade);
			}
		}
	}
	/* Sensor-like noise: luminance plus a little chroma. */
	{
		int namp = rnd(s, 2, 12);
		uint64_t ns = splitmix64(s);
		size_t n = (size_t)w * h;

		for (size_t k = 0; k < n; k++) {
			uint64_t r = splitmix64(&ns);
			int lum = (int)(r % (uint64_t)(2 * namp + 1)) - namp;

			for (c = 0; c < 3; c++) {
				int chroma = (int)((r >> (16 + 8 * c)) & 3) - 1;
				rgb[k * 3 + c] = (uint8_t)clamp255(rgb[k * 3 + c] + lum + chroma);
			}
		}
	}
}

static void to_gray(const uint8_t *rgb, uint8_t *gray, size_t n)
{
	for (size_t k = 0; k < n; k++)
		gray[k] = (uint8_t)((77 * rgb[k * 3] + 150 * rgb[k * 3 + 1] +
		                     29 * rgb[k * 3 + 2] + 128) >> 8);
}

/* Adobe inverted CMYK: K' = max(R,G,B), C' = R*255/K' so that R = C'*K'/255. */
static void to_cmyk(const uint8_t *rgb, uint8_t *cmyk, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const uint8_t *p = rgb + k * 3;
		int kk = p[0] > p[1] ? p[0] : p[1];

		kk = kk > p[2] ? kk : p[2];
		for (int c = 0; c < 3; c++)
			cmyk[k * 4 + c] = kk ? (uint8_t)((p[c] * 255 + kk / 2) / kk) : 0;
		cmyk[k * 4 + 3] = (uint8_t)kk;
	}
}

static int write_file(const char *path, const unsigned char *buf, unsigned long len)
{
	FILE *f = fopen(path, "wb");

	if (!f) {
		fprintf(stderr, "mkjpeg: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "mkjpeg: %s: write failed\n", path);
		return -1;
	}
	return 0;
}

static int make_one(tjhandle tj, const char *path, int w, int h, uint64_t seed,
                    int tint, enum kind kind, int subsamp, int quality, int progressive)
{
	size_t n = (size_t)w * h;
	uint8_t *rgb = malloc(n * 3), *pix = NULL;
	unsigned char *jpeg = NULL;
	unsigned long jlen = 0;
	uint64_t s = seed;
	int pf = TJPF_RGB, flags = progressive ? TJFLAG_PROGRESSIVE : 0, rc = -1;

	if (!rgb)
		goto out;
	paint(rgb, w, h, &s, tint);
	if (kind == KIND_GRAY) {
		pix = malloc(n);
		if (!pix)
			goto out;
		to_gray(rgb, pix, n);
		pf = TJPF_GRAY;
		subsamp = TJSAMP_GRAY;
	} else if (kind == KIND_CMYK) {
		pix = malloc(n * 4);
		if (!pix)
			goto out;
		to_cmyk(rgb, pix, n);
		pf = TJPF_CMYK;
	}
	if (tjCompress2(tj, pix ? pix : rgb, w, 0, h, pf, &jpeg, &jlen, subsamp,
	                quality, flags) != 0) {
		fprintf(stderr, "mkjpeg: %s: %s\n", path, tjGetErrorStr2(tj));
		goto out;
	}
	rc = write_file(path, jpeg, jlen);
out:
	if (!rgb)
		fprintf(stderr, "mkjpeg: out of memory\n");
	tjFree(jpeg);
	free(pix);
	free(rgb);
	return rc;
}

static int mkdir_p(const char *path)
{
	char buf[4096];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int make_folder(tjhandle tj, const struct opts *o)
{
	static const int cycle[3] = { TJSAMP_420, TJSAMP_422, TJSAMP_444 };
	char path[4096];
	int idx = 0;

	for (int c = 0; c < o->classes; c++) {
		snprintf(path, sizeof(path), "%s/class_%03d", o->out, c);
		if (mkdir_p(path) != 0) {
			fprintf(stderr, "mkjpeg: mkdir %s: %s\n", path, strerror(errno));
			return -1;
		}
		for (int i = 0; i < o->per_class; i++, idx++) {
			/* Each image has its own stream: independent of the others. */
			uint64_t s = o->seed ^ ((uint64_t)c << 32 | (uint64_t)i);
			uint64_t img_seed = splitmix64(&s);
			int w = rnd(&s, o->min_size, o->max_size);
			int h = rnd(&s, o->min_size, o->max_size);
			enum kind kind = KIND_RGB;

			if (o->gray_every > 0 && idx % o->gray_every == o->gray_every - 1)
				kind = KIND_GRAY;
			else if (o->cmyk_every > 0 && idx % o->cmyk_every == o->cmyk_every - 1)
				kind = KIND_CMYK;
			snprintf(path, sizeof(path), "%s/class_%03d/img_%05d.jpg", o->out, c, i);
			if (make_one(tj, path, w, h, img_seed, c, kind, cycle[idx % 3],
			             o->quality, o->progressive) != 0)
				return -1;
		}
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
	        "usage: mkjpeg OUT_DIR [--classes C] [--per-class N] [--seed S]\n"
	        "              [--min-size 64] [--max-size 400] [--quality 90]\n"
	        "              [--gray-every K] [--cmyk-every K] [--progressive]\n"
	        "       mkjpeg --one OUT.jpg WxH [--seed S] [--quality Q]\n"
	        "              [--gray | --cmyk] [--progressive] [--subsamp 420|422|444|440]\n");
	exit(2);
}

static long num(const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "mkjpeg: bad number '%s' (want %ld..%ld)\n", s, lo, hi);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.classes = 4, .per_class = 8, .seed = 1, .min_size = 64,
		.max_size = 400, .quality = 90, .subsamp = -1, .kind = KIND_RGB,
	};
	tjhandle tj;
	int i = 1, rc;

	if (argc < 2)
		usage();
	if (strcmp(argv[1], "--one") == 0) {
		if (argc < 4 || sscanf(argv[3], "%dx%d", &o.w, &o.h) != 2 ||
		    o.w < 1 || o.h < 1 || o.w > 65500 || o.h > 65500)
			usage();
		o.one = 1;
		o.out = argv[2];
		i = 4;
	} else {
		o.out = argv[1];
		i = 2;
	}
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--progressive")) { o.progressive = 1; continue; }
		if (!strcmp(a, "--gray")) { o.kind = KIND_GRAY; continue; }
		if (!strcmp(a, "--cmyk")) { o.kind = KIND_CMYK; continue; }
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--seed")) {
			char *end;
			errno = 0;
			o.seed = strtoull(v, &end, 0);
			if (errno || *end)
				usage();
		} else if (!strcmp(a, "--quality")) o.quality = (int)num(v, 1, 100);
		else if (!strcmp(a, "--classes")) o.classes = (int)num(v, 1, 1000);
		else if (!strcmp(a, "--per-class")) o.per_class = (int)num(v, 0, 99999);
		else if (!strcmp(a, "--min-size")) o.min_size = (int)num(v, 1, 65500);
		else if (!strcmp(a, "--max-size")) o.max_size = (int)num(v, 1, 65500);
		else if (!strcmp(a, "--gray-every")) o.gray_every = (int)num(v, 0, 1 << 30);
		else if (!strcmp(a, "--cmyk-every")) o.cmyk_every = (int)num(v, 0, 1 << 30);
		else if (!strcmp(a, "--subsamp")) {
			long ss = num(v, 0, 999);
			o.subsamp = ss == 444 ? TJSAMP_444 : ss == 422 ? TJSAMP_422 :
			            ss == 420 ? TJSAMP_420 : ss == 440 ? TJSAMP_440 : -1;
			if (o.subsamp < 0)
				usage();
		} else
			usage();
	}
	if (o.min_size > o.max_size) {
		fprintf(stderr, "mkjpeg: --min-size > --max-size\n");
		return 2;
	}
	tj = tjInitCompress();
	if (!tj) {
		fprintf(stderr, "mkjpeg: %s\n", tjGetErrorStr2(NULL));
		return 1;
	}
	if (o.one)
		rc = make_one(tj, o.out, o.w, o.h, o.seed, 0, o.kind,
		              o.subsamp < 0 ? TJSAMP_420 : o.subsamp, o.quality, o.progressive);
	else
		rc = make_folder(tj, &o);
	tjDestroy(tj);
	return rc == 0 ? 0 : 1;
}
