/*
 * test_decode.c - bfs_decode_*: TensorFlow goldens (decode + resize against
 * tests/data/golden/, made by tools/make_golden.py), grayscale and CMYK
 * conversion, every way a JPEG can be refused, and bfs_decode_box (a box
 * decoded alone equals the same box of a full decode, for every
 * subsampling, progressive and restart-interval images, gray and CMYK; it
 * refuses what the full decode refuses).  Run from the repo root.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jpeglib.h>
#include <turbojpeg.h>

#include "engine/pixels/decode.h"
#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "engine/pixels/resize.h"

#define GOLDEN_DIR "tests/data/golden/"

struct buf {
	uint8_t *p;
	size_t len;
};

static struct buf read_file(const char *path)
{
	struct buf b = { NULL, 0 };
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		fail_msg("cannot open %s (tests run from the repository root)", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	b.len = (size_t)n;
	b.p = malloc(b.len ? b.len : 1);
	assert_non_null(b.p);
	assert_int_equal(fread(b.p, 1, b.len, f), b.len);
	fclose(f);
	return b;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Smooth gradients plus a little noise: compresses well, stays close. */
static uint8_t *gradient_rgb(int w, int h, uint64_t seed)
{
	uint8_t *p = malloc((size_t)w * h * 3);

	assert_non_null(p);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			uint8_t *q = p + ((size_t)y * w + x) * 3;
			int n = (int)(splitmix64(&seed) % 5) - 2;

			q[0] = (uint8_t)(20 + x * 200 / w + n);
			q[1] = (uint8_t)(30 + y * 180 / h + n);
			q[2] = (uint8_t)(220 - (x + y) * 150 / (w + h) + n);
		}
	return p;
}

static struct buf encode(const uint8_t *pix, int w, int h, int pf, int subsamp, int quality)
{
	tjhandle tj = tjInitCompress();
	unsigned char *jpeg = NULL;
	unsigned long len = 0;
	struct buf b;

	assert_non_null(tj);
	if (tjCompress2(tj, pix, w, 0, h, pf, &jpeg, &len, subsamp, quality, 0) != 0)
		fail_msg("tjCompress2: %s", tjGetErrorStr2(tj));
	b.len = len;
	b.p = malloc(len);
	assert_non_null(b.p);
	memcpy(b.p, jpeg, len);
	tjFree(jpeg);
	tjDestroy(tj);
	return b;
}

/* Offset of the first marker `m` (0xFF m) before SOS, or 0. */
static size_t find_marker(const struct buf *b, uint8_t m)
{
	size_t i = 2;

	while (i + 4 <= b->len && b->p[i] == 0xFF) {
		if (b->p[i + 1] == m)
			return i;
		if (b->p[i + 1] == 0xDA)
			break;
		i += 2 + ((size_t)b->p[i + 2] << 8 | b->p[i + 3]);
	}
	return 0;
}

static struct golden {
	char jpg[128], npy[128];
	int h, w;
} goldens[32];
static int ngoldens;

static int load_manifest(void **state)
{
	FILE *f = fopen(GOLDEN_DIR "manifest.txt", "r");
	char line[512];

	if (!f) {
		fprintf(stderr, "cannot open " GOLDEN_DIR "manifest.txt (run from the repo root)\n");
		return -1;
	}
	ngoldens = 0;
	while (fgets(line, sizeof(line), f)) {
		struct golden *g = &goldens[ngoldens];

		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (ngoldens == 32 ||
		    sscanf(line, "%127s %d %d %127s", g->jpg, &g->h, &g->w, g->npy) != 4) {
			fclose(f);
			return -1;
		}
		ngoldens++;
	}
	fclose(f);
	return ngoldens > 0 ? 0 : -1;
}

static struct buf read_fixture(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), GOLDEN_DIR "%.200s", name);
	return read_file(path);
}

static const struct golden *golden_named(const char *prefix)
{
	for (int i = 0; i < ngoldens; i++)
		if (!strncmp(goldens[i].jpg, prefix, strlen(prefix)))
			return &goldens[i];
	fail_msg("no golden fixture starting with %s", prefix);
	return NULL;
}

static void test_decode_decodes_every_golden_fixture(void **state)
{
	bfs_decoder *d;

	assert_int_equal(bfs_decoder_create(&d), 0);
	for (int i = 0; i < ngoldens; i++) {
		struct buf b = read_fixture(goldens[i].jpg);
		char msg[BFS_ERRMSG_MAX] = "";
		const uint8_t *rgb = NULL;
		int w = 0, h = 0, hw = 0, hh = 0, rc;

		rc = bfs_decode_header(d, b.p, b.len, &hw, &hh, msg);
		if (rc != 0)
			fail_msg("%s: header: %s", goldens[i].jpg, msg);
		rc = bfs_decode_rgb(d, b.p, b.len, 0, &rgb, &w, &h, msg);
		if (rc != 0)
			fail_msg("%s: %s: %s", goldens[i].jpg, bfs_strerror(rc), msg);
		assert_non_null(rgb);
		assert_int_equal(w, hw);
		assert_int_equal(h, hh);
		free(b.p);
	}
	bfs_decoder_destroy(d);
}

static void test_decode_then_resize_matches_tensorflow_goldens(void **state)
{
	bfs_decoder *d;
	float worst = 0;

	assert_int_equal(bfs_decoder_create(&d), 0);
	for (int i = 0; i < ngoldens; i++) {
		const struct golden *g = &goldens[i];
		char path[256], msg[BFS_ERRMSG_MAX] = "";
		struct buf jpg = read_fixture(g->jpg), npy;
		const uint8_t *rgb;
		bfs_npy_info info;
		float *out, maxdiff = 0;
		void *scratch;
		size_t n = (size_t)g->h * g->w * 3;
		int w, h;

		snprintf(path, sizeof(path), GOLDEN_DIR "%.200s", g->npy);
		npy = read_file(path);
		if (bfs_npy_parse(npy.p, npy.len, &info, msg) != 0)
			fail_msg("%s: %s", g->npy, msg);
		assert_string_equal(info.descr, "<f4");
		assert_int_equal(info.fortran_order, 0);
		assert_int_equal(info.ndim, 3);
		assert_int_equal(info.shape[0], g->h);
		assert_int_equal(info.shape[1], g->w);
		assert_int_equal(info.shape[2], 3);
		assert_int_equal(info.header_len + info.data_len, npy.len);

		assert_int_equal(bfs_decode_rgb(d, jpg.p, jpg.len, 0, &rgb, &w, &h, msg), 0);
		scratch = malloc(bfs_resize_scratch_size(w, h, g->w, g->h));
		out = malloc(n * sizeof(float));
		assert_non_null(scratch);
		assert_non_null(out);
		assert_int_equal(bfs_resize_rgb(rgb, w, h, (size_t)w * 3, out, g->w, g->h,
		                                BFS_DTYPE_FLOAT32, scratch), 0);
		for (size_t k = 0; k < n; k++) {
			float want;

			memcpy(&want, npy.p + info.header_len + k * sizeof(float), sizeof(want));
			if (fabsf(out[k] - want) > maxdiff)
				maxdiff = fabsf(out[k] - want);
		}
		print_message("  %-28s %dx%d -> %3dx%-3d max abs diff %g\n", g->jpg, w, h,
		              g->h, g->w, (double)maxdiff);
		if (maxdiff > 1e-5f)
			fail_msg("%s: max abs diff %g > 1e-5", g->jpg, (double)maxdiff);
		worst = maxdiff > worst ? maxdiff : worst;
		free(out);
		free(scratch);
		free(npy.p);
		free(jpg.p);
	}
	print_message("  worst max abs diff over %d goldens: %g\n", ngoldens, (double)worst);
	bfs_decoder_destroy(d);
}

static void test_decode_expands_grayscale_to_three_equal_channels(void **state)
{
	struct buf b = read_fixture(golden_named("gray_")->jpg);
	bfs_decoder *d;
	const uint8_t *rgb;
	int w, h, distinct = 0;

	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decode_rgb(d, b.p, b.len, 0, &rgb, &w, &h, NULL), 0);
	for (size_t i = 0; i < (size_t)w * h; i++) {
		assert_int_equal(rgb[3 * i], rgb[3 * i + 1]);
		assert_int_equal(rgb[3 * i], rgb[3 * i + 2]);
		distinct += i > 0 && rgb[3 * i] != rgb[0];
	}
	assert_true(distinct > 0); /* not a flat image */
	bfs_decoder_destroy(d);
	free(b.p);
}

/* Adobe inverted ink: K' = max(R,G,B), C' = R * 255 / K' (R = C' K' / 255). */
static uint8_t *rgb_to_inverted_cmyk(const uint8_t *rgb, size_t npix)
{
	uint8_t *p = malloc(npix * 4);

	assert_non_null(p);
	for (size_t i = 0; i < npix; i++) {
		const uint8_t *s = rgb + 3 * i;
		int k = s[0] > s[1] ? s[0] : s[1];

		k = k > s[2] ? k : s[2];
		for (int c = 0; c < 3; c++)
			p[4 * i + c] = k ? (uint8_t)((s[c] * 255 + k / 2) / k) : 0;
		p[4 * i + 3] = (uint8_t)k;
	}
	return p;
}

static void test_decode_converts_cmyk_close_to_the_rgb_original(void **state)
{
	int w = 96, h = 64, ow, oh;
	uint8_t *rgb0 = gradient_rgb(w, h, 7), *cmyk = rgb_to_inverted_cmyk(rgb0, (size_t)w * h);
	struct buf b = encode(cmyk, w, h, TJPF_CMYK, TJSAMP_444, 95);
	bfs_decoder *d;
	const uint8_t *rgb;
	char msg[BFS_ERRMSG_MAX] = "";
	double err = 0;

	assert_int_equal(bfs_decoder_create(&d), 0);
	if (bfs_decode_rgb(d, b.p, b.len, 0, &rgb, &ow, &oh, msg) != 0)
		fail_msg("CMYK decode: %s", msg);
	assert_int_equal(ow, w);
	assert_int_equal(oh, h);
	for (size_t i = 0; i < (size_t)w * h * 3; i++)
		err += abs((int)rgb[i] - (int)rgb0[i]);
	err /= (double)w * h * 3;
	print_message("  CMYK round trip: mean abs error %.3f\n", err);
	assert_true(err < 3.0);
	bfs_decoder_destroy(d);
	free(b.p);
	free(cmyk);
	free(rgb0);
}

/* TF's jpeg_mem.cc: with an Adobe marker R = K*C/255, else
 * R = (255-K)*(255-C)/255, integer and truncating. */
static void test_decode_converts_cmyk_with_tensorflow_formula(void **state)
{
	int w = 40, h = 24, ow, oh;
	uint8_t *rgb0 = gradient_rgb(w, h, 8), *cmyk0 = rgb_to_inverted_cmyk(rgb0, (size_t)w * h);
	struct buf b = encode(cmyk0, w, h, TJPF_CMYK, TJSAMP_420, 90);
	uint8_t *cmyk = malloc((size_t)w * h * 4);
	tjhandle tj = tjInitDecompress();
	bfs_decoder *d;
	const uint8_t *rgb;
	size_t app14;

	assert_non_null(cmyk);
	assert_non_null(tj);
	assert_int_equal(bfs_decoder_create(&d), 0);
	for (int adobe = 1; adobe >= 0; adobe--) {
		if (!adobe) { /* blank out the Adobe APP14 marker's name */
			app14 = find_marker(&b, 0xEE);
			assert_true(app14 > 0);
			memcpy(b.p + app14 + 4, "Xdobe", 5);
		}
		assert_int_equal(tjDecompress2(tj, b.p, b.len, cmyk, w, 0, h, TJPF_CMYK,
		                               TJFLAG_FASTDCT), 0);
		assert_int_equal(bfs_decode_rgb(d, b.p, b.len, 0, &rgb, &ow, &oh, NULL), 0);
		for (size_t i = 0; i < (size_t)w * h; i++) {
			unsigned k = cmyk[4 * i + 3];

			for (int c = 0; c < 3; c++) {
				unsigned v = cmyk[4 * i + c];
				unsigned want = adobe ? k * v / 255 : (255 - k) * (255 - v) / 255;

				assert_int_equal(rgb[3 * i + c], want);
			}
		}
	}
	bfs_decoder_destroy(d);
	tjDestroy(tj);
	free(cmyk);
	free(b.p);
	free(cmyk0);
	free(rgb0);
}

static void expect_decode_error_max(bfs_decoder *d, const uint8_t *p, size_t len,
                                    uint64_t max_pixels, int want, const char *needle)
{
	char msg[BFS_ERRMSG_MAX] = "";
	const uint8_t *rgb = (const uint8_t *)"untouched";
	int w = -7, h = -7;
	int rc = bfs_decode_rgb(d, p, len, max_pixels, &rgb, &w, &h, msg);

	print_message("  -> %s: %s\n", bfs_strerror(rc), msg);
	assert_int_equal(rc, want);
	assert_true(msg[0] != '\0');
	if (needle && !strstr(msg, needle))
		fail_msg("message '%s' does not mention '%s'", msg, needle);
	/* outputs untouched on failure */
	assert_int_equal(w, -7);
	assert_int_equal(h, -7);
	assert_string_equal((const char *)rgb, "untouched");
}

static void expect_decode_error(bfs_decoder *d, const uint8_t *p, size_t len, int want,
                                const char *needle)
{
	expect_decode_error_max(d, p, len, 0, want, needle);
}

static void test_decode_rejects_a_truncated_jpeg_with_a_message(void **state)
{
	struct buf b = read_fixture(golden_named("photo_160x120")->jpg);
	bfs_decoder *d;

	assert_int_equal(bfs_decoder_create(&d), 0);
	expect_decode_error(d, b.p, b.len / 2, BFS_E_DECODE, "Premature end");
	expect_decode_error(d, b.p, b.len - 2, BFS_E_DECODE, NULL); /* just the EOI gone */
	expect_decode_error(d, b.p, 40, BFS_E_DECODE, NULL);        /* inside the header */
	expect_decode_error(d, b.p, 2, BFS_E_DECODE, NULL);         /* SOI only */
	bfs_decoder_destroy(d);
	free(b.p);
}

static void test_decode_rejects_corrupt_bytes(void **state)
{
	struct buf b = read_fixture(golden_named("photo_160x120")->jpg);
	bfs_decoder *d;
	size_t sof;

	assert_int_equal(bfs_decoder_create(&d), 0);
	/* A marker in the middle of the entropy-coded data: libjpeg stops the
	 * scan there and warns ("premature end of data segment"). */
	b.p[b.len / 2] = 0xFF;
	b.p[b.len / 2 + 1] = 0xD9;
	expect_decode_error(d, b.p, b.len, BFS_E_DECODE, "Corrupt JPEG data");
	free(b.p);

	/* Garbage over a stretch of entropy-coded data.  (Not every flipped
	 * bit is detectable - Huffman data has no checksum - but this is.) */
	b = read_fixture(golden_named("photo_160x120")->jpg);
	for (size_t i = b.len / 3; i < b.len / 3 + 64; i++)
		b.p[i] ^= 0x5A;
	expect_decode_error(d, b.p, b.len, BFS_E_DECODE, "Corrupt JPEG data");
	free(b.p);

	/* A frame header claiming zero width. */
	b = read_fixture(golden_named("photo_160x120")->jpg);
	sof = find_marker(&b, 0xC0);
	assert_true(sof > 0);
	b.p[sof + 7] = 0;
	b.p[sof + 8] = 0;
	expect_decode_error(d, b.p, b.len, BFS_E_DECODE, NULL);
	bfs_decoder_destroy(d);
	free(b.p);
}

static void test_decode_names_a_png_signature(void **state)
{
	static const uint8_t png[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
	                               0, 0, 0, 13, 'I', 'H', 'D', 'R' };
	int w, h;
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_decoder *d;

	assert_int_equal(bfs_decoder_create(&d), 0);
	expect_decode_error(d, png, sizeof(png), BFS_E_DECODE, "PNG");
	assert_int_equal(bfs_decode_header(d, png, sizeof(png), &w, &h, msg), BFS_E_DECODE);
	assert_non_null(strstr(msg, "PNG"));
	expect_decode_error(d, (const uint8_t *)"GIF89a......", 12, BFS_E_DECODE, "GIF");
	expect_decode_error(d, (const uint8_t *)"hello", 5, BFS_E_DECODE, "not a JPEG");
	bfs_decoder_destroy(d);
}

static void test_decode_names_what_a_non_jpeg_looks_like_without_quoting_it(void **state)
{
	static const char secret[] = "SECRET-TOKEN-1234 root:$6$salt$hash";
	static const uint8_t gz[] = { 0x1f, 0x8b, 0x08, 0x00, 1, 2, 3, 4 };
	char msg[BFS_ERRMSG_MAX];
	const uint8_t *rgb;
	int w, h;
	bfs_decoder *d;

	assert_int_equal(bfs_decoder_create(&d), 0);
	/* it used to add "(starts 53 45 43 52)": the first four bytes */
	assert_int_equal(bfs_decode_rgb(d, (const uint8_t *)secret, sizeof(secret) - 1,
	                                0, &rgb, &w, &h, msg), BFS_E_DECODE);
	assert_string_equal(msg, "not a JPEG: no JPEG SOI marker");
	assert_int_equal(bfs_decode_header(d, (const uint8_t *)secret, sizeof(secret) - 1,
	                                   &w, &h, msg), BFS_E_DECODE);
	assert_string_equal(msg, "not a JPEG: no JPEG SOI marker");
	assert_int_equal(bfs_decode_rgb(d, gz, sizeof(gz), 0, &rgb, &w, &h, msg),
	                 BFS_E_DECODE);
	assert_string_equal(msg, "not a JPEG: looks like gzip data");
	assert_int_equal(bfs_decode_rgb(d, (const uint8_t *)"GIF89a......", 12, 0, &rgb,
	                                &w, &h, msg), BFS_E_DECODE);
	assert_string_equal(msg, "not a JPEG: looks like a GIF image");
	bfs_decoder_destroy(d);
}

static void test_decode_rejects_empty_input(void **state)
{
	bfs_decoder *d;
	uint8_t one = 0xFF;

	assert_int_equal(bfs_decoder_create(&d), 0);
	expect_decode_error(d, &one, 0, BFS_E_DECODE, "empty");
	expect_decode_error(d, NULL, 0, BFS_E_DECODE, "empty");
	expect_decode_error(d, &one, 1, BFS_E_DECODE, NULL);
	bfs_decoder_destroy(d);
}

static size_t heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
#else
	return 0;
#endif
}

static void test_decode_refuses_too_many_pixels_before_allocating(void **state)
{
	/* A real 16x16 JPEG whose SOF now claims 30000x30000, cut off just
	 * after the scan header: a few hundred bytes promising 2.7 GB. */
	uint8_t *pix = gradient_rgb(16, 16, 9);
	struct buf b = encode(pix, 16, 16, TJPF_RGB, TJSAMP_420, 90);
	size_t sof = find_marker(&b, 0xC0), sos = find_marker(&b, 0xDA), before;
	bfs_decoder *d;
	int w = 0, h = 0;

	assert_true(sof > 0 && sos > 0);
	b.p[sof + 5] = 30000 >> 8;
	b.p[sof + 6] = 30000 & 0xFF;
	b.p[sof + 7] = 30000 >> 8;
	b.p[sof + 8] = 30000 & 0xFF;
	b.len = sos + 2 + ((size_t)b.p[sos + 2] << 8 | b.p[sos + 3]) + 8;
	print_message("  crafted %zu-byte JPEG claiming 30000x30000\n", b.len);

	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decode_header(d, b.p, b.len, &w, &h, NULL), 0);
	assert_int_equal(w, 30000);
	assert_int_equal(h, 30000);
	before = heap_in_use();
	expect_decode_error_max(d, b.p, b.len, 1u << 26, BFS_E_TOOBIG, "30000x30000");
	/* Not even 1 MB more heap (glibc's count; 0 under sanitizers). */
	assert_true(heap_in_use() < before + (1u << 20));
	bfs_decoder_destroy(d);
	free(b.p);
	free(pix);
}

static void test_decode_too_big_leaves_the_decoder_usable(void **state)
{
	int W = 640, H = 480;
	uint8_t *pix = gradient_rgb(W, H, 10);
	struct buf b = encode(pix, W, H, TJPF_RGB, TJSAMP_420, 90);
	bfs_decoder *d;
	const uint8_t *rgb;
	char msg[BFS_ERRMSG_MAX] = "";
	size_t before;
	int w, h;

	assert_int_equal(bfs_decoder_create(&d), 0);
	before = heap_in_use();
	assert_int_equal(bfs_decode_rgb(d, b.p, b.len, (uint64_t)W * H - 1, &rgb, &w, &h, msg),
	                 BFS_E_TOOBIG);
	/* No scratch was sized for the image (glibc's count; 0 under sanitizers). */
	assert_true(heap_in_use() < before + (size_t)W * H);
	assert_non_null(strstr(msg, "640x480"));
	assert_int_equal(bfs_decode_rgb(d, b.p, b.len, (uint64_t)W * H, &rgb, &w, &h, msg), 0);
	assert_int_equal(w, W);
	assert_int_equal(h, H);
	assert_true(heap_in_use() >= before + (size_t)W * H * 3 || heap_in_use() == 0);
	bfs_decoder_destroy(d);
	free(b.p);
	free(pix);
}

static void test_decode_reuses_its_decoder_across_sizes(void **state)
{
	/* big, small, big, small, ... on one decoder == a fresh decoder each. */
	static const char *order[] = { "photo_500x375", "small_20x15", "cmyk_", "photo_500x375",
	                               "gray_", "odd_37x23", "progressive_", "small_20x15" };
	bfs_decoder *shared;

	assert_int_equal(bfs_decoder_create(&shared), 0);
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		struct buf b = read_fixture(golden_named(order[i])->jpg);
		bfs_decoder *fresh;
		const uint8_t *a, *c;
		int aw, ah, cw, ch;

		assert_int_equal(bfs_decoder_create(&fresh), 0);
		assert_int_equal(bfs_decode_rgb(shared, b.p, b.len, 0, &a, &aw, &ah, NULL), 0);
		assert_int_equal(bfs_decode_rgb(fresh, b.p, b.len, 0, &c, &cw, &ch, NULL), 0);
		assert_int_equal(aw, cw);
		assert_int_equal(ah, ch);
		assert_memory_equal(a, c, (size_t)aw * ah * 3);
		bfs_decoder_destroy(fresh);
		free(b.p);
	}
	bfs_decoder_destroy(shared);
}

static void test_decode_recovers_from_every_kind_of_error(void **state)
{
	/* After each failure (from decode or header-only), the same decoder
	 * must read the next header and pixels exactly as a fresh one. */
	struct buf good = read_fixture(golden_named("photo_151x101")->jpg);
	struct buf bad = read_fixture(golden_named("photo_160x120")->jpg);
	size_t cuts[] = { 2, 3, 10, 21, 22, 23, 40, 100, 300, bad.len / 2, bad.len - 2 };
	bfs_decoder *d, *fresh;
	const uint8_t *want, *got;
	int ww, wh, w, h;
	uint8_t *ref;

	assert_int_equal(bfs_decoder_create(&fresh), 0);
	assert_int_equal(bfs_decode_rgb(fresh, good.p, good.len, 0, &want, &ww, &wh, NULL), 0);
	ref = malloc((size_t)ww * wh * 3);
	assert_non_null(ref);
	memcpy(ref, want, (size_t)ww * wh * 3);
	bfs_decoder_destroy(fresh);

	assert_int_equal(bfs_decoder_create(&d), 0);
	for (size_t i = 0; i < 2 * sizeof(cuts) / sizeof(cuts[0]); i++) {
		size_t cut = cuts[i / 2];

		if (i % 2 == 0)
			assert_int_not_equal(bfs_decode_rgb(d, bad.p, cut, 0, &got, &w, &h, NULL), 0);
		else
			(void)bfs_decode_header(d, bad.p, cut, &w, &h, NULL); /* may pass */
		w = h = 0;
		if (bfs_decode_header(d, good.p, good.len, &w, &h, NULL) != 0 || w != ww || h != wh)
			fail_msg("header after a %zu-byte cut: %dx%d", cut, w, h);
		assert_int_equal(bfs_decode_rgb(d, good.p, good.len, 0, &got, &w, &h, NULL), 0);
		assert_memory_equal(got, ref, (size_t)ww * wh * 3);
	}
	bfs_decoder_destroy(d);
	free(ref);
	free(bad.p);
	free(good.p);
}

static void test_decode_header_reads_sizes_turbojpeg_cannot_classify(void **state)
{
	/* 4:4:4 with the luma sampling factors changed to 3x1: libjpeg (and TF)
	 * accept such headers; TurboJPEG 2.x's tjDecompressHeader3 does not. */
	uint8_t *pix = gradient_rgb(37, 21, 11);
	struct buf b = encode(pix, 37, 21, TJPF_RGB, TJSAMP_444, 90);
	size_t sof = find_marker(&b, 0xC0);
	bfs_decoder *d;
	int w = 0, h = 0;
	char msg[BFS_ERRMSG_MAX] = "";

	assert_true(sof > 0);
	assert_int_equal(b.p[sof + 11], 0x11); /* component 1 sampling factors */
	b.p[sof + 11] = 0x31;
	assert_int_equal(bfs_decoder_create(&d), 0);
	if (bfs_decode_header(d, b.p, b.len, &w, &h, msg) != 0)
		fail_msg("header: %s", msg);
	assert_int_equal(w, 37);
	assert_int_equal(h, 21);
	bfs_decoder_destroy(d);
	free(b.p);
	free(pix);
}

static void test_decode_rejects_null_arguments(void **state)
{
	bfs_decoder *d;
	const uint8_t *rgb;
	int w, h;
	uint8_t x = 0xFF;

	assert_int_equal(bfs_decoder_create(NULL), -EINVAL);
	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decode_rgb(NULL, &x, 1, 0, &rgb, &w, &h, NULL), -EINVAL);
	assert_int_equal(bfs_decode_rgb(d, NULL, 1, 0, &rgb, &w, &h, NULL), -EINVAL);
	assert_int_equal(bfs_decode_rgb(d, &x, 1, 0, NULL, &w, &h, NULL), -EINVAL);
	assert_int_equal(bfs_decode_header(d, &x, 1, NULL, &h, NULL), -EINVAL);
	bfs_decoder_destroy(d);
	bfs_decoder_destroy(NULL);
}

/* ---- bfs_decode_box ------------------------------------------------------- */

/* How a test image is encoded through libjpeg (TurboJPEG's encoder has no
 * restart intervals, odd sampling factors or plain CMYK). */
struct lj_kind {
	const char *name;
	int ncomp;         /* 1 gray, 3 YCbCr, 4 CMYK (YCCK unless cmyk_plain) */
	int hs, vs;        /* luma (and K) sampling factors; chroma 1x1 */
	int progressive;
	int restart;       /* restart interval in MCUs, 0: none */
	int cmyk_plain;    /* 4 components stored as CMYK, no Adobe marker */
};

static const struct lj_kind lj_kinds[] = {
	{ "4:2:0", 3, 2, 2, 0, 0, 0 },
	{ "4:2:2", 3, 2, 1, 0, 0, 0 },
	{ "4:4:0", 3, 1, 2, 0, 0, 0 },
	{ "4:4:4", 3, 1, 1, 0, 0, 0 },
	{ "4:1:1", 3, 4, 1, 0, 0, 0 },
	{ "4:2:0 progressive", 3, 2, 2, 1, 0, 0 },
	{ "4:2:2 progressive", 3, 2, 1, 1, 0, 0 },
	{ "4:4:0 progressive", 3, 1, 2, 1, 0, 0 },
	{ "4:4:4 progressive", 3, 1, 1, 1, 0, 0 },
	{ "4:2:0 restart 3", 3, 2, 2, 0, 3, 0 },
	{ "4:2:2 restart 1", 3, 2, 1, 0, 1, 0 },
	{ "4:2:0 progressive restart 2", 3, 2, 2, 1, 2, 0 },
	{ "gray", 1, 1, 1, 0, 0, 0 },
	{ "gray progressive", 1, 1, 1, 1, 0, 0 },
	{ "gray restart 5", 1, 1, 1, 0, 5, 0 },
	{ "YCCK (Adobe) 4:4:4", 4, 1, 1, 0, 0, 0 },
	{ "YCCK (Adobe) 4:2:0", 4, 2, 2, 0, 0, 0 },
	{ "CMYK, no Adobe marker", 4, 1, 1, 0, 0, 1 },
};

/* Photo-like pixels with fine detail in every channel (so chroma differs
 * from pixel to pixel and upsampling has something to get wrong). */
static uint8_t *busy_pixels(int w, int h, int nc, uint64_t seed)
{
	uint8_t *p = malloc((size_t)w * h * nc);

	assert_non_null(p);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < nc; c++) {
				int n = (int)(splitmix64(&seed) % 48);

				p[((size_t)y * w + x) * nc + c] = (uint8_t)(
					(x * (c + 3) + y * (7 - c) + ((x / 5 + y / 3) % 7) * 20 + n) & 255);
			}
	return p;
}

static struct buf encode_lj(const struct lj_kind *k, int w, int h, uint64_t seed)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr je;
	unsigned char *out = NULL;
	unsigned long len = 0;
	uint8_t *pix = busy_pixels(w, h, k->ncomp, seed);
	struct buf b;

	c.err = jpeg_std_error(&je);
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &out, &len);
	c.image_width = (JDIMENSION)w;
	c.image_height = (JDIMENSION)h;
	c.input_components = k->ncomp;
	c.in_color_space = k->ncomp == 1 ? JCS_GRAYSCALE : k->ncomp == 3 ? JCS_RGB : JCS_CMYK;
	jpeg_set_defaults(&c);
	if (k->ncomp == 4) {
		jpeg_set_colorspace(&c, k->cmyk_plain ? JCS_CMYK : JCS_YCCK);
		if (k->cmyk_plain)
			c.write_Adobe_marker = FALSE;
	}
	jpeg_set_quality(&c, 90, TRUE);
	if (k->ncomp >= 3) {
		for (int i = 0; i < k->ncomp; i++)
			c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
		c.comp_info[0].h_samp_factor = k->hs;
		c.comp_info[0].v_samp_factor = k->vs;
		if (k->ncomp == 4) {
			c.comp_info[3].h_samp_factor = k->hs;
			c.comp_info[3].v_samp_factor = k->vs;
		}
	}
	if (k->progressive)
		jpeg_simple_progression(&c);
	c.restart_interval = (unsigned)k->restart;
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < c.image_height) {
		JSAMPROW row = pix + (size_t)c.next_scanline * w * k->ncomp;

		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	b.len = len;
	b.p = malloc(len);
	assert_non_null(b.p);
	memcpy(b.p, out, len);
	free(out);
	free(pix);
	return b;
}

/* Decode box bx of b with bfs_decode_box, and again stopping after the
 * box (BFS_DECODE_BOX_STOP), and compare both with ref (the full decode,
 * w x h); 0 when equal, else the number of differing values. */
static long box_diff(bfs_decoder *d, const struct buf *b, const uint8_t *ref, int w, int h,
		     bfs_box bx)
{
	long diff = 0;

	for (unsigned flags = 0; flags <= BFS_DECODE_BOX_STOP; flags += BFS_DECODE_BOX_STOP) {
		bfs_decoded_box out;
		char msg[BFS_ERRMSG_MAX] = "";

		if (bfs_decode_box_flags(d, b->p, b->len, 0, &bx, 1, flags, &out, msg) != 0)
			fail_msg("box %dx%d at (%d, %d) of %dx%d (flags %u): %s", bx.w, bx.h, bx.x, bx.y,
				 w, h, flags, msg);
		assert_int_equal(out.box.x, bx.x);
		assert_int_equal(out.box.y, bx.y);
		assert_int_equal(out.box.w, bx.w);
		assert_int_equal(out.box.h, bx.h);
		assert_int_equal(out.width, w);
		assert_int_equal(out.height, h);
		assert_int_equal(out.scale, 1);
		assert_true(out.stride * (size_t)bx.h <= bfs_decode_box_scratch(w, h, &bx, 1));
		for (int y = 0; y < bx.h; y++)
			for (int x = 0; x < bx.w * 3; x++)
				diff += out.rgb[(size_t)y * out.stride + x] !=
					ref[((size_t)(bx.y + y) * w + bx.x) * 3 + x];
	}
	return diff;
}

static void test_decode_box_equals_that_box_of_a_full_decode(void **state)
{
	static const int sizes[][2] = { { 64, 48 }, { 97, 61 }, { 33, 130 }, { 17, 9 },
					{ 250, 17 }, { 1, 40 } };
	bfs_decoder *d, *full;
	uint64_t seed = 99;
	long boxes = 0;

	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decoder_create(&full), 0);
	for (size_t k = 0; k < sizeof(lj_kinds) / sizeof(lj_kinds[0]); k++) {
		long bad = 0, kboxes = 0;

		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			int w = sizes[s][0], h = sizes[s][1], fw, fh;
			struct buf b = encode_lj(&lj_kinds[k], w, h, k * 100 + s);
			const uint8_t *rgb;
			uint8_t *ref;
			bfs_box edges[] = { { 0, 0, w, h }, { 0, 0, 1, 1 }, { w - 1, h - 1, 1, 1 },
					    { 0, h - 1, w, 1 }, { w - 1, 0, 1, h },
					    { w / 2, 0, (w + 1) / 2, h }, { 0, h / 3, w, h - h / 3 } };

			assert_int_equal(bfs_decode_rgb(full, b.p, b.len, 0, &rgb, &fw, &fh, NULL), 0);
			ref = malloc((size_t)w * h * 3);
			assert_non_null(ref);
			memcpy(ref, rgb, (size_t)w * h * 3);
			for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); e++, kboxes++)
				bad += box_diff(d, &b, ref, w, h, edges[e]) != 0;
			for (int i = 0; i < 120; i++, kboxes++) {
				bfs_box bx;

				bx.w = 1 + (int)(splitmix64(&seed) % (uint64_t)w);
				bx.h = 1 + (int)(splitmix64(&seed) % (uint64_t)h);
				bx.x = (int)(splitmix64(&seed) % (uint64_t)(w - bx.w + 1));
				bx.y = (int)(splitmix64(&seed) % (uint64_t)(h - bx.h + 1));
				bad += box_diff(d, &b, ref, w, h, bx) != 0;
			}
			free(ref);
			free(b.p);
		}
		print_message("  %-28s %ld boxes, %ld differ\n", lj_kinds[k].name, kboxes, bad);
		assert_int_equal(bad, 0);
		boxes += kboxes;
	}
	print_message("  %ld boxes in all, decoded to the end of the stream and stopped after\n"
		      "  the box, equal the full decode's pixels\n", boxes);
	bfs_decoder_destroy(full);
	bfs_decoder_destroy(d);
}

static void test_decode_box_equals_the_full_decode_of_every_golden_fixture(void **state)
{
	bfs_decoder *d, *full;
	uint64_t seed = 5;

	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decoder_create(&full), 0);
	for (int i = 0; i < ngoldens; i++) {
		struct buf b = read_fixture(goldens[i].jpg);
		const uint8_t *rgb;
		uint8_t *ref;
		int w, h;

		assert_int_equal(bfs_decode_rgb(full, b.p, b.len, 0, &rgb, &w, &h, NULL), 0);
		ref = malloc((size_t)w * h * 3);
		assert_non_null(ref);
		memcpy(ref, rgb, (size_t)w * h * 3);
		for (int k = 0; k < 50; k++) {
			bfs_box bx;

			bx.w = 1 + (int)(splitmix64(&seed) % (uint64_t)w);
			bx.h = 1 + (int)(splitmix64(&seed) % (uint64_t)h);
			bx.x = (int)(splitmix64(&seed) % (uint64_t)(w - bx.w + 1));
			bx.y = (int)(splitmix64(&seed) % (uint64_t)(h - bx.h + 1));
			if (box_diff(d, &b, ref, w, h, bx) != 0)
				fail_msg("%s: box %dx%d at (%d, %d) differs", goldens[i].jpg, bx.w,
					 bx.h, bx.x, bx.y);
		}
		free(ref);
		free(b.p);
	}
	bfs_decoder_destroy(full);
	bfs_decoder_destroy(d);
}

/* Without the iMCU margin the box's edge columns come out of a crop whose
 * chroma edge is replicated: this shows the test above can fail. */
static void test_decode_box_a_crop_without_margin_would_differ(void **state)
{
	struct buf b = encode_lj(&lj_kinds[0], 97, 61, 3);
	struct jpeg_decompress_struct c;
	struct jpeg_error_mgr je;
	bfs_decoder *full;
	const uint8_t *ref;
	uint8_t *row;
	JDIMENSION xoff = 16, cw = 16;
	int w, h;
	long diff = 0;

	assert_int_equal(bfs_decoder_create(&full), 0);
	assert_int_equal(bfs_decode_rgb(full, b.p, b.len, 0, &ref, &w, &h, NULL), 0);
	c.err = jpeg_std_error(&je);
	jpeg_create_decompress(&c);
	jpeg_mem_src(&c, b.p, b.len);
	jpeg_read_header(&c, TRUE);
	c.out_color_space = JCS_EXT_RGB;
	c.dct_method = JDCT_IFAST;
	c.do_fancy_upsampling = TRUE;
	jpeg_start_decompress(&c);
	jpeg_crop_scanline(&c, &xoff, &cw);
	row = malloc((size_t)cw * 3);
	assert_non_null(row);
	while (c.output_scanline < c.output_height) {
		JDIMENSION y = c.output_scanline;

		jpeg_read_scanlines(&c, &row, 1);
		for (JDIMENSION x = 0; x < cw * 3; x++)
			diff += row[x] != ref[((size_t)y * w + xoff) * 3 + x];
	}
	jpeg_finish_decompress(&c);
	jpeg_destroy_decompress(&c);
	print_message("  4:2:0 columns 16..31 cropped with no margin: %ld values differ\n", diff);
	assert_true(diff > 0);
	free(row);
	bfs_decoder_destroy(full);
	free(b.p);
}

static void test_decode_box_refuses_what_the_full_decode_refuses(void **state)
{
	/* Damage below a box at the top: a decode that stopped at the box
	 * would serve it; the whole stream is checked instead. */
	struct buf good = encode_lj(&lj_kinds[0], 120, 96, 21);
	struct buf prog = encode_lj(&lj_kinds[5], 120, 96, 22);
	const struct buf *srcs[] = { &good, &prog };
	bfs_decoder *d, *full;
	bfs_box top = { 0, 0, 40, 8 };
	uint64_t seed = 17;
	int agree = 0, refused = 0;

	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decoder_create(&full), 0);
	for (int s = 0; s < 2; s++) {
		const struct buf *src = srcs[s];

		for (int i = 0; i < 80; i++) {
			struct buf b = { malloc(src->len), src->len };
			const uint8_t *rgb;
			bfs_decoded_box out;
			char m1[BFS_ERRMSG_MAX] = "", m2[BFS_ERRMSG_MAX] = "";
			int w, h, r1, r2;

			assert_non_null(b.p);
			memcpy(b.p, src->p, src->len);
			if (i < 40) { /* cut the stream somewhere past the headers */
				b.len = src->len / 3 + (size_t)i * (src->len / 60);
			} else { /* flip bytes in the second half of the scan data */
				for (int k = 0; k < 3; k++)
					b.p[src->len / 2 + splitmix64(&seed) % (src->len / 2 - 2)] ^=
						(uint8_t)(1 + splitmix64(&seed) % 255);
			}
			r1 = bfs_decode_rgb(full, b.p, b.len, 0, &rgb, &w, &h, m1);
			r2 = bfs_decode_box(d, b.p, b.len, 0, &top, 1, &out, m2);
			if ((r1 == 0) != (r2 == 0))
				fail_msg("case %d/%d: full decode %d (%s), box %d (%s)", s, i, r1, m1,
					 r2, m2);
			if (r1 != 0) {
				assert_int_equal(r2, BFS_E_DECODE);
				assert_string_equal(m1, m2);
				refused++;
			}
			agree++;
			free(b.p);
		}
	}
	print_message("  %d damaged streams: %d refused by both, the rest decoded by both\n",
		      agree, refused);
	assert_true(refused >= 40);
	bfs_decoder_destroy(full);
	bfs_decoder_destroy(d);
	free(prog.p);
	free(good.p);
}

/* Stopping after the box is what lets a JPEG damaged below it decode:
 * so the engine stops early only for JPEGs whose whole stream decoded
 * before.  A baseline stream cut or flipped below the top box: refused
 * whole, its top box decoded (the same pixels as the intact stream's)
 * with BFS_DECODE_BOX_STOP.  A progressive one reads every scan first:
 * refused either way. */
static void test_decode_box_stop_serves_a_box_above_damage_the_whole_check_refuses(void **state)
{
	struct buf good = encode_lj(&lj_kinds[0], 120, 96, 21);
	struct buf prog = encode_lj(&lj_kinds[5], 120, 96, 22);
	bfs_decoder *d, *full;
	bfs_box top = { 0, 0, 40, 8 };
	bfs_decoded_box out;
	uint8_t *ref = malloc((size_t)top.w * top.h * 3);
	uint64_t seed = 17;
	int served = 0, refused = 0;

	assert_non_null(ref);
	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decoder_create(&full), 0);
	assert_int_equal(bfs_decode_box_flags(d, good.p, good.len, 0, &top, 1, BFS_DECODE_BOX_STOP,
					      &out, NULL), 0);
	for (int y = 0; y < top.h; y++)
		memcpy(ref + (size_t)y * top.w * 3, out.rgb + (size_t)y * out.stride,
		       (size_t)top.w * 3);
	for (int s = 0; s < 2; s++) {
		const struct buf *src = s ? &prog : &good;

		for (int i = 0; i < 80; i++) {
			struct buf b = { malloc(src->len), src->len };
			const uint8_t *rgb;
			char m1[BFS_ERRMSG_MAX] = "", m2[BFS_ERRMSG_MAX] = "";
			int w, h, r1, r2;

			assert_non_null(b.p);
			memcpy(b.p, src->p, src->len);
			if (i < 40) {
				b.len = src->len / 3 + (size_t)i * (src->len / 60);
			} else {
				for (int k = 0; k < 3; k++)
					b.p[src->len / 2 + splitmix64(&seed) % (src->len / 2 - 2)] ^=
						(uint8_t)(1 + splitmix64(&seed) % 255);
			}
			r1 = bfs_decode_rgb(full, b.p, b.len, 0, &rgb, &w, &h, m1);
			r2 = bfs_decode_box_flags(d, b.p, b.len, 0, &top, 1, BFS_DECODE_BOX_STOP,
						  &out, m2);
			if (r1 != 0 && s == 0) { /* damage below the box: served */
				if (r2 != 0)
					fail_msg("case %d: stopped box decode %d (%s)", i, r2, m2);
				for (int y = 0; y < top.h; y++)
					assert_memory_equal(out.rgb + (size_t)y * out.stride,
							    ref + (size_t)y * top.w * 3,
							    (size_t)top.w * 3);
				served++;
			} else if (r1 != 0) { /* progressive: every scan was read */
				assert_int_equal(r2, BFS_E_DECODE);
				assert_string_equal(m1, m2);
				refused++;
			}
			free(b.p);
		}
	}
	print_message("  stopping after the box: %d damaged baseline streams served their box, "
		      "%d damaged progressive ones refused\n", served, refused);
	assert_true(served >= 30);
	assert_true(refused >= 30);
	assert_int_equal(bfs_decode_box_flags(d, good.p, good.len, 0, &top, 1, 2, &out, NULL),
			 -EINVAL);
	bfs_decoder_destroy(full);
	bfs_decoder_destroy(d);
	free(ref);
	free(prog.p);
	free(good.p);
}

static void test_decode_box_scales_the_idct_down(void **state)
{
	struct buf b = encode_lj(&lj_kinds[0], 203, 150, 31);
	bfs_decoder *d, *full;
	const uint8_t *ref;
	int w, h;

	assert_int_equal(bfs_decoder_create(&d), 0);
	assert_int_equal(bfs_decoder_create(&full), 0);
	assert_int_equal(bfs_decode_rgb(full, b.p, b.len, 0, &ref, &w, &h, NULL), 0);
	for (int scale = 2; scale <= 8; scale *= 2) {
		bfs_box bx = { 37, 21, 120, 101 };
		bfs_decoded_box out;
		double err = 0;
		int n = 0;

		assert_int_equal(bfs_decode_box(d, b.p, b.len, 0, &bx, scale, &out, NULL), 0);
		assert_int_equal(out.scale, scale);
		assert_int_equal(out.scaled_width, (203 + scale - 1) / scale);
		assert_int_equal(out.scaled_height, (150 + scale - 1) / scale);
		assert_int_equal(out.box.x, 37 / scale);
		assert_int_equal(out.box.y, 21 / scale);
		assert_int_equal(out.box.x + out.box.w, (37 + 120 + scale - 1) / scale);
		assert_int_equal(out.box.y + out.box.h, (21 + 101 + scale - 1) / scale);
		/* each scaled pixel is near the mean of the block it stands for */
		for (int y = 0; y + 1 < out.box.h; y++)
			for (int x = 0; x + 1 < out.box.w; x++) {
				int sy = (out.box.y + y) * scale, sx = (out.box.x + x) * scale;
				double mean = 0;

				for (int yy = 0; yy < scale; yy++)
					for (int xx = 0; xx < scale; xx++)
						mean += ref[((size_t)(sy + yy) * w + sx + xx) * 3];
				mean /= scale * scale;
				err += fabs(out.rgb[(size_t)y * out.stride + 3 * x] - mean);
				n++;
			}
		err /= n;
		print_message("  1/%d: %dx%d box, mean abs diff from block means %.2f\n", scale,
			      out.box.w, out.box.h, err);
		assert_true(err < 12.0);
	}
	bfs_decoder_destroy(full);
	bfs_decoder_destroy(d);
	free(b.p);
}

static void test_decode_box_rejects_boxes_outside_the_image(void **state)
{
	struct buf b = encode_lj(&lj_kinds[3], 40, 30, 1);
	bfs_box bad[] = { { -1, 0, 10, 10 }, { 0, -1, 10, 10 }, { 31, 0, 10, 10 },
			  { 0, 21, 10, 10 }, { 0, 0, 0, 5 }, { 0, 0, 5, 0 }, { 0, 0, 41, 30 } };
	bfs_box ok = { 0, 0, 40, 30 };
	bfs_decoded_box out;
	bfs_decoder *d;
	char msg[BFS_ERRMSG_MAX];

	assert_int_equal(bfs_decoder_create(&d), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(bfs_decode_box(d, b.p, b.len, 0, &bad[i], 1, &out, msg), -EINVAL);
		assert_non_null(strstr(msg, "not inside the 40x30 image"));
		assert_int_equal(bfs_decode_box_scratch(40, 30, &bad[i], 1), 0);
	}
	assert_int_equal(bfs_decode_box(d, b.p, b.len, 0, &ok, 3, &out, msg), -EINVAL);
	assert_int_equal(bfs_decode_box(d, b.p, b.len, 1000, &ok, 1, &out, msg), BFS_E_TOOBIG);
	assert_int_equal(bfs_decode_box(d, b.p, b.len, 0, &ok, 1, &out, msg), 0);
	assert_int_equal(bfs_decode_box(NULL, b.p, b.len, 0, &ok, 1, &out, msg), -EINVAL);
	assert_int_equal(bfs_decode_box(d, b.p, b.len, 0, NULL, 1, &out, msg), -EINVAL);
	bfs_decoder_destroy(d);
	free(b.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_decodes_every_golden_fixture),
		cmocka_unit_test(test_decode_then_resize_matches_tensorflow_goldens),
		cmocka_unit_test(test_decode_expands_grayscale_to_three_equal_channels),
		cmocka_unit_test(test_decode_converts_cmyk_close_to_the_rgb_original),
		cmocka_unit_test(test_decode_converts_cmyk_with_tensorflow_formula),
		cmocka_unit_test(test_decode_rejects_a_truncated_jpeg_with_a_message),
		cmocka_unit_test(test_decode_rejects_corrupt_bytes),
		cmocka_unit_test(test_decode_names_a_png_signature),
		cmocka_unit_test(test_decode_names_what_a_non_jpeg_looks_like_without_quoting_it),
		cmocka_unit_test(test_decode_rejects_empty_input),
		cmocka_unit_test(test_decode_refuses_too_many_pixels_before_allocating),
		cmocka_unit_test(test_decode_too_big_leaves_the_decoder_usable),
		cmocka_unit_test(test_decode_reuses_its_decoder_across_sizes),
		cmocka_unit_test(test_decode_recovers_from_every_kind_of_error),
		cmocka_unit_test(test_decode_header_reads_sizes_turbojpeg_cannot_classify),
		cmocka_unit_test(test_decode_rejects_null_arguments),
		cmocka_unit_test(test_decode_box_equals_that_box_of_a_full_decode),
		cmocka_unit_test(test_decode_box_equals_the_full_decode_of_every_golden_fixture),
		cmocka_unit_test(test_decode_box_a_crop_without_margin_would_differ),
		cmocka_unit_test(test_decode_box_refuses_what_the_full_decode_refuses),
		cmocka_unit_test(test_decode_box_stop_serves_a_box_above_damage_the_whole_check_refuses),
		cmocka_unit_test(test_decode_box_scales_the_idct_down),
		cmocka_unit_test(test_decode_box_rejects_boxes_outside_the_image),
	};

	return cmocka_run_group_tests(tests, load_manifest, NULL);
}
