/*
 * test_webp.c - bfs_webp_*: lossy, lossy with alpha and lossless WebPs
 * encoded here with libwebp's encoder decode to exactly libwebp's RGB
 * output, both as the library gives it (WebPDecodeRGB) and as its own
 * tool writes it (dwebp -ppm); headers allocate nothing; the work-memory
 * estimate covers what libwebp allocates (counted by wrapping malloc,
 * outside sanitizer builds); cut and damaged files are refused.
 */
#include <errno.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include "engine/base/error.h"
#include "engine/pixels/webp.h"

#if defined(__SANITIZE_ADDRESS__)
#define COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COUNTING 0
#endif
#endif
#ifndef COUNTING
#define COUNTING 1
#endif

/* Count what is allocated while `counting` is set (this thread only). */
static __thread int counting;
static __thread size_t cur, peak;
#if COUNTING
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static void count_add(void *p)
{
	if (counting && p) {
		cur += malloc_usable_size(p);
		if (cur > peak)
			peak = cur;
	}
}
void *malloc(size_t n)
{
	void *p = __libc_malloc(n);

	count_add(p);
	return p;
}
void *calloc(size_t a, size_t b)
{
	void *p = __libc_calloc(a, b);

	count_add(p);
	return p;
}
void *realloc(void *p, size_t n)
{
	void *q;

	if (counting && p)
		cur -= malloc_usable_size(p);
	q = __libc_realloc(p, n);
	count_add(q);
	return q;
}
void free(void *p)
{
	if (counting && p)
		cur -= malloc_usable_size(p);
	__libc_free(p);
}
#endif

enum { LOSSY, LOSSY_ALPHA, LOSSLESS };

/* A w x h RGBA picture: gradients, an edge, noise, varying alpha. */
static uint8_t *picture(int w, int h, unsigned seed)
{
	uint8_t *p = malloc((size_t)w * h * 4);
	uint32_t r = seed * 2654435761u + 1;

	assert_non_null(p);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			uint8_t *q = p + ((size_t)y * w + x) * 4;

			r = r * 1103515245u + 12345u;
			q[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1) + (r >> 28));
			q[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1) ^ ((x > w / 2) ? 0x40 : 0));
			q[2] = (uint8_t)((x + y) * 3 + (r >> 26));
			q[3] = (uint8_t)(128 + x - y);
		}
	return p;
}

static size_t encode(int kind, const uint8_t *rgba, int w, int h, uint8_t **out)
{
	size_t n;

	if (kind == LOSSLESS)
		n = WebPEncodeLosslessRGBA(rgba, w, h, w * 4, out);
	else if (kind == LOSSY_ALPHA)
		n = WebPEncodeRGBA(rgba, w, h, w * 4, 80, out);
	else {
		uint8_t *rgb = malloc((size_t)w * h * 3);

		for (size_t i = 0; i < (size_t)w * h; i++)
			memcpy(rgb + 3 * i, rgba + 4 * i, 3);
		n = WebPEncodeRGB(rgb, w, h, w * 3, 80, out);
		free(rgb);
	}
	assert_true(n > 0);
	return n;
}

static int decode(const uint8_t *p, size_t n, uint8_t **out, bfs_webp_info *info, char *msg)
{
	int rc = bfs_webp_header(p, n, info, msg);

	*out = NULL;
	if (rc)
		return rc;
	*out = malloc((size_t)info->width * info->height * 3);
	assert_non_null(*out);
	return bfs_webp_decode(p, n, info, *out, (size_t)info->width * info->height * 3, msg);
}

static void test_webp_equals_libwebps_own_rgb_decode(void **state)
{
	static const int sizes[][2] = { { 1, 1 }, { 37, 23 }, { 160, 120 }, { 333, 17 } };

	(void)state;
	for (int s = 0; s < 4; s++)
		for (int kind = LOSSY; kind <= LOSSLESS; kind++) {
			int w = sizes[s][0], h = sizes[s][1], rw, rh;
			uint8_t *rgba = picture(w, h, (unsigned)(s * 3 + kind)), *enc, *out, *ref;
			size_t n = encode(kind, rgba, w, h, &enc);
			bfs_webp_info info;
			char msg[BFS_ERRMSG_MAX];

			if (decode(enc, n, &out, &info, msg))
				fail_msg("%dx%d kind %d: %s", w, h, kind, msg);
			assert_int_equal(info.width, w);
			assert_int_equal(info.height, h);
			assert_int_equal(info.lossless, kind == LOSSLESS);
			ref = WebPDecodeRGB(enc, n, &rw, &rh);
			assert_non_null(ref);
			assert_memory_equal(out, ref, (size_t)w * h * 3);
			WebPFree(ref);
			WebPFree(enc);
			free(out);
			free(rgba);
		}
}

/* dwebp FILE -ppm -o OUT: libwebp's own tool, whose RGB output is what
 * "libwebp's RGB output" means to a person. */
static void test_webp_equals_what_dwebp_writes(void **state)
{
	char dir[] = "/tmp/test_webp.XXXXXX";

	(void)state;
	assert_non_null(mkdtemp(dir));
	if (system("command -v dwebp >/dev/null 2>&1") != 0)
		fail_msg("dwebp not found: `make deps` installs it (Debian package webp)");
	for (int kind = LOSSY; kind <= LOSSLESS; kind++) {
		int w = 61, h = 45;
		uint8_t *rgba = picture(w, h, 90u + (unsigned)kind), *enc, *out;
		size_t n = encode(kind, rgba, w, h, &enc), got;
		char in[64], ppm[64], cmd[256], hdr[32];
		bfs_webp_info info;
		char msg[BFS_ERRMSG_MAX];
		uint8_t *img = malloc((size_t)w * h * 3);
		FILE *f;
		int pw, ph, maxv;

		snprintf(in, sizeof(in), "%s/k%d.webp", dir, kind);
		snprintf(ppm, sizeof(ppm), "%s/k%d.ppm", dir, kind);
		f = fopen(in, "wb");
		assert_int_equal(fwrite(enc, 1, n, f), n);
		fclose(f);
		snprintf(cmd, sizeof(cmd), "dwebp -quiet '%s' -ppm -o '%s'", in, ppm);
		assert_int_equal(system(cmd), 0);
		f = fopen(ppm, "rb");
		assert_non_null(f);
		assert_int_equal(fscanf(f, "%2s %d %d %d", hdr, &pw, &ph, &maxv), 4);
		assert_string_equal(hdr, "P6");
		fgetc(f);
		got = fread(img, 1, (size_t)w * h * 3, f);
		fclose(f);
		assert_int_equal(pw, w);
		assert_int_equal(ph, h);
		assert_int_equal(got, (size_t)w * h * 3);
		assert_int_equal(decode(enc, n, &out, &info, msg), 0);
		assert_memory_equal(out, img, (size_t)w * h * 3);
		unlink(in);
		unlink(ppm);
		free(img);
		free(out);
		WebPFree(enc);
		free(rgba);
	}
	rmdir(dir);
}

static void test_webp_work_estimate_covers_what_libwebp_allocates(void **state)
{
	static const int sizes[][2] = { { 64, 64 }, { 640, 480 }, { 4000, 30 },
					{ 30, 4000 }, { 1500, 1000 } };

	(void)state;
	if (!COUNTING)
		skip(); /* a sanitizer owns malloc */
	for (int s = 0; s < 5; s++)
		for (int kind = LOSSY; kind <= LOSSLESS; kind++) {
			int w = sizes[s][0], h = sizes[s][1];
			uint8_t *rgba = picture(w, h, 7u + (unsigned)s), *enc;
			size_t n = encode(kind, rgba, w, h, &enc);
			uint8_t *out = malloc((size_t)w * h * 3);
			bfs_webp_info info;
			char msg[BFS_ERRMSG_MAX];

			cur = peak = 0;
			counting = 1;
			assert_int_equal(bfs_webp_header(enc, n, &info, msg), 0);
			assert_int_equal(peak, 0); /* the header allocates nothing */
			assert_int_equal(bfs_webp_decode(enc, n, &info, out, (size_t)w * h * 3, msg), 0);
			counting = 0;
			if (peak > info.work_bytes)
				fail_msg("%dx%d kind %d: libwebp took %zu bytes, estimate %zu",
					 w, h, kind, peak, info.work_bytes);
			print_message("  %4dx%-4d %-11s libwebp %8zu bytes, estimate %8zu\n", w, h,
				      kind == LOSSY ? "lossy" : kind == LOSSLESS ? "lossless" : "lossy+alpha",
				      peak, info.work_bytes);
			free(out);
			WebPFree(enc);
			free(rgba);
		}
}

static void test_webp_refuses_cut_and_damaged_files(void **state)
{
	uint8_t *rgba = picture(80, 60, 5), *enc, *out;
	size_t n = encode(LOSSY, rgba, 80, 60, &enc);
	bfs_webp_info info;
	char msg[BFS_ERRMSG_MAX];

	(void)state;
	for (size_t cut = n - 1; cut >= 8; cut -= cut > 60 ? 29 : 1) {
		if (decode(enc, cut, &out, &info, msg) == 0)
			fail_msg("a WebP cut at %zu of %zu bytes decoded", cut, n);
		free(out);
	}
	assert_int_equal(bfs_webp_header((const uint8_t *)"RIFF\0\0\0\0WEBX", 12, &info, msg),
			 BFS_E_DECODE);
	assert_non_null(strstr(msg, "not a WebP"));
	WebPFree(enc);
	free(rgba);
}

static void test_webp_rejects_null_arguments_and_a_short_buffer(void **state)
{
	uint8_t *rgba = picture(8, 8, 1), *enc, out[8 * 8 * 3];
	size_t n = encode(LOSSLESS, rgba, 8, 8, &enc);
	bfs_webp_info info;

	(void)state;
	assert_int_equal(bfs_webp_header(NULL, 4, &info, NULL), -EINVAL);
	assert_int_equal(bfs_webp_header(enc, n, NULL, NULL), -EINVAL);
	assert_int_equal(bfs_webp_header(enc, n, &info, NULL), 0);
	assert_int_equal(bfs_webp_decode(enc, n, &info, out, sizeof(out) - 1, NULL), -EINVAL);
	assert_int_equal(bfs_webp_decode(enc, n, &info, NULL, sizeof(out), NULL), -EINVAL);
	assert_int_equal(bfs_webp_decode(enc, n, &info, out, sizeof(out), NULL), 0);
	WebPFree(enc);
	free(rgba);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_webp_equals_libwebps_own_rgb_decode),
		cmocka_unit_test(test_webp_equals_what_dwebp_writes),
		cmocka_unit_test(test_webp_work_estimate_covers_what_libwebp_allocates),
		cmocka_unit_test(test_webp_refuses_cut_and_damaged_files),
		cmocka_unit_test(test_webp_rejects_null_arguments_and_a_short_buffer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
