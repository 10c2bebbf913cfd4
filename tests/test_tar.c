/*
 * test_tar.c - engine/formats/tar: WebDataset samples from tars built here byte by
 * byte (ustar, GNU, pax, v7), labels and bad labels, WebDataset's KEY rule,
 * damaged headers, cuts at every byte, absurd sizes, random corruption, and
 * a cross-check against tars written by Python's tarfile (skipped without
 * python3).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/base/error.h"
#include "engine/formats/tar.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Building tars                                                       */

enum { V7, USTAR, GNU };

typedef struct {
	uint8_t *p;
	size_t len, cap;
} tb;

static void tb_put(tb *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;

		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		assert_non_null(b->p);
		b->cap = cap;
	}
	if (d)
		memcpy(b->p + b->len, d, n);
	else
		memset(b->p + b->len, 0, n);
	b->len += n;
}

static void tb_pad(tb *b)
{
	if (b->len % 512)
		tb_put(b, NULL, 512 - b->len % 512);
}

static void tb_end(tb *b)
{
	tb_put(b, NULL, 1024);
}

static void set_checksum(uint8_t *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

/* Append a header; returns its offset.  Names over 100 bytes are split
 * into prefix/name for USTAR (the caller makes sure that works). */
static size_t tb_header(tb *b, const char *name, char type, uint64_t size,
			int fmt)
{
	size_t at = b->len, n = strlen(name);
	uint8_t *h;

	tb_put(b, NULL, 512);
	h = b->p + at;
	if (n > 100) {
		const char *slash = name + n - 101;

		assert_int_equal(fmt, USTAR);
		slash = strchr(slash, '/');
		assert_non_null(slash);
		assert_true((size_t)(slash - name) <= 155);
		memcpy(h + 345, name, (size_t)(slash - name));
		memcpy(h, slash + 1, strlen(slash + 1));
	} else {
		memcpy(h, name, n);
	}
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0001750", 8);
	memcpy(h + 116, "0001750", 8);
	if (size < 077777777777ull) {
		snprintf((char *)h + 124, 12, "%011llo",
			 (unsigned long long)size);
	} else { /* GNU base-256 */
		h[124] = 0x80;
		for (int i = 11; i >= 1; i--, size >>= 8)
			h[124 + i] = (uint8_t)size;
	}
	memcpy(h + 136, "14700000000", 12);
	h[156] = (uint8_t)type;
	if (fmt == USTAR) {
		memcpy(h + 257, "ustar\0" "00", 8);
	} else if (fmt == GNU) {
		memcpy(h + 257, "ustar  \0", 8);
	}
	if (fmt != V7) {
		memcpy(h + 265, "user", 4);
		memcpy(h + 297, "group", 5);
	}
	set_checksum(h);
	return at;
}

/* A regular member; returns the offset of its data. */
static size_t tb_file_fmt(tb *b, const char *name, const void *d, size_t n,
			  int fmt)
{
	size_t at;

	tb_header(b, name, '0', n, fmt);
	at = b->len;
	tb_put(b, d, n);
	tb_pad(b);
	return at;
}

static size_t tb_file(tb *b, const char *name, const void *d, size_t n)
{
	return tb_file_fmt(b, name, d, n, USTAR);
}

static size_t tb_text(tb *b, const char *name, const char *text)
{
	return tb_file(b, name, text, strlen(text));
}

/* A hard link ('1', no data) named name to target (at most 100 bytes, in
 * the header's linkname field); returns its header's offset. */
static size_t tb_link(tb *b, const char *name, const char *target, int fmt)
{
	size_t at = tb_header(b, name, '1', 0, fmt);

	assert_true(strlen(target) <= 100);
	memcpy(b->p + at + 157, target, strlen(target));
	set_checksum(b->p + at);
	return at;
}

static void tb_gnu_longname(tb *b, const char *name)
{
	size_t n = strlen(name) + 1;

	tb_header(b, "././@LongLink", 'L', n, GNU);
	tb_put(b, name, n);
	tb_pad(b);
}

/* A pax header ('x' or 'g') from "key=value" strings (NULL-terminated). */
static void tb_pax_type(tb *b, const char *const *kv, char type)
{
	char rec[4096];
	tb body = { 0 };

	for (; *kv; kv++) {
		size_t n = strlen(*kv) + 2, len; /* " " and "\n" */

		/* LEN counts its own digits. */
		for (len = n + 1;; len++) {
			int d = snprintf(NULL, 0, "%zu", len);

			if ((size_t)d + n == len)
				break;
		}
		snprintf(rec, sizeof(rec), "%zu %s\n", len, *kv);
		tb_put(&body, rec, strlen(rec));
	}
	tb_header(b, "PaxHeaders/x", type, body.len, USTAR);
	tb_put(b, body.p, body.len);
	tb_pad(b);
	free(body.p);
}

static void tb_pax(tb *b, const char *const *kv)
{
	tb_pax_type(b, kv, 'x');
}

/* Image-like bytes, distinct per seed. */
static uint8_t *fake_jpeg(size_t n, unsigned seed)
{
	uint8_t *p = malloc(n ? n : 1);

	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
	if (n >= 2) {
		p[0] = 0xff;
		p[1] = 0xd8;
	}
	return p;
}

/* ------------------------------------------------------------------ */
/* Scanning                                                            */

#define MAXS 600

typedef struct {
	uint64_t offset, length, member, header_offset;
	int64_t label;
	int status;
	char key[512], name[512], msg[BFS_ERRMSG_MAX];
} got;

typedef struct {
	got s[MAXS];
	size_t n;
	int stop_at; /* return 42 from this callback index; -1 never */
	uint64_t size;
} coll;

static int collect(void *ctx, const bfs_tar_sample *s)
{
	coll *c = ctx;
	got *g;

	if ((int)c->n == c->stop_at)
		return 42;
	assert_true(c->n < MAXS);
	/* Whatever the archive says, a sample lies inside the file. */
	assert_true(s->offset <= c->size && s->length <= c->size - s->offset);
	/* The data follow the header, or, for a hard link, the target's data
	 * came before it. */
	assert_true(s->header_offset < s->offset ||
		    s->offset + s->length <= s->header_offset);
	assert_non_null(s->key);
	assert_non_null(s->name);
	assert_non_null(s->msg);
	assert_true(s->status == 0 ? s->msg[0] == '\0' : s->msg[0] != '\0');
	assert_true(s->status == 0 || s->label == -1);
	g = &c->s[c->n++];
	g->offset = s->offset;
	g->length = s->length;
	g->member = s->member;
	g->header_offset = s->header_offset;
	g->label = s->label;
	g->status = s->status;
	snprintf(g->key, sizeof(g->key), "%s", s->key);
	snprintf(g->name, sizeof(g->name), "%s", s->name);
	snprintf(g->msg, sizeof(g->msg), "%s", s->msg);
	return 0;
}

static coll *new_coll(void)
{
	coll *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->stop_at = -1;
	return c;
}

/* An unlinked temp file; closing the fd deletes it. */
static int temp_fd(const void *p, size_t n)
{
	FILE *f = tmpfile();
	int fd;

	assert_non_null(f);
	fd = dup(fileno(f));
	fclose(f);
	assert_true(fd >= 0);
	if (n)
		assert_int_equal(pwrite(fd, p, n, 0), (ssize_t)n);
	return fd;
}

/* Scan the first len bytes of b into a fresh c. */
static int scan_len(const tb *b, size_t len, coll *c, char *errmsg)
{
	int fd = temp_fd(b->p, len), rc;

	c->n = 0;
	c->size = len;
	if (errmsg)
		errmsg[0] = '\0';
	rc = bfs_tar_scan(fd, len, collect, c, errmsg);
	close(fd);
	return rc;
}

static int scan_tb(const tb *b, coll *c, char *errmsg)
{
	return scan_len(b, b->len, c, errmsg);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static void test_tar_lists_samples_in_order_with_their_offsets_and_labels(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	size_t off[8], len[8];
	uint8_t *img[8];
	char name[64], cls[32], err[BFS_ERRMSG_MAX];
	int fd;

	for (int i = 0; i < 8; i++) {
		/* Sizes around the 16 KiB small-read mark and a block
		 * multiple; .cls before the image on odd samples. */
		len[i] = i == 3 ? 40000 : i == 5 ? 1024 : 700 + 3000 * (size_t)i;
		img[i] = fake_jpeg(len[i], (unsigned)i);
		snprintf(cls, sizeof(cls), "%d\n", 100 + i);
		snprintf(name, sizeof(name), "n0144_%d.cls", i);
		if (i % 2)
			tb_text(&b, name, cls);
		snprintf(name, sizeof(name), "n0144_%d.%s", i,
			 i == 2 ? "JPEG" : i == 4 ? "jpeg" : "jpg");
		off[i] = tb_file(&b, name, img[i], len[i]);
		snprintf(name, sizeof(name), "n0144_%d.txt", i);
		tb_text(&b, name, "a caption");
		snprintf(name, sizeof(name), "n0144_%d.cls", i);
		if (!(i % 2))
			tb_text(&b, name, cls);
	}
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, err), 0);
	assert_int_equal(c->n, 8);
	fd = temp_fd(b.p, b.len);
	for (int i = 0; i < 8; i++) {
		uint8_t *back = malloc(len[i]);
		char key[32];

		snprintf(key, sizeof(key), "n0144_%d", i);
		assert_string_equal(c->s[i].key, key);
		assert_int_equal(c->s[i].status, 0);
		assert_string_equal(c->s[i].msg, "");
		assert_int_equal(c->s[i].label, 100 + i);
		assert_int_equal(c->s[i].offset, off[i]);
		assert_int_equal(c->s[i].length, len[i]);
		assert_int_equal(c->s[i].header_offset, off[i] - 512);
		/* three members per sample, image first or second */
		assert_int_equal(c->s[i].member, 3 * (size_t)i + (i % 2));
		assert_int_equal(pread(fd, back, len[i], (off_t)off[i]),
				 (ssize_t)len[i]);
		assert_memory_equal(back, img[i], len[i]);
		free(back);
		free(img[i]);
	}
	assert_string_equal(c->s[2].name, "n0144_2.JPEG");
	close(fd);
	free(b.p);
	free(c);
}

static void test_tar_of_zero_bytes_or_only_zero_blocks_has_no_samples(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 0);
	tb_put(&b, NULL, 10240); /* what tar writes for an empty archive */
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 0);
	/* A cut end marker: zero bytes short of a block are still an end. */
	assert_int_equal(scan_len(&b, 700, c, NULL), 0);
	free(b.p);
	free(c);
}

static void test_tar_marks_an_image_without_cls_as_a_nokey_sample(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	tb_text(&b, "a.jpg", "JPEGDATA");
	tb_text(&b, "a.cls", "1");
	tb_text(&b, "n01440764_1.jpg", "JPEGDATA");
	tb_text(&b, "n01440764_1.json", "{\"label\": 4}");
	tb_text(&b, "c.cls", "3");
	tb_text(&b, "c.jpg", "JPEGDATA");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 3);
	assert_int_equal(c->s[0].status, 0);
	assert_int_equal(c->s[1].status, BFS_E_NOKEY);
	assert_int_equal(c->s[1].label, -1);
	/* a .json holds a label only when --label-key names its key */
	assert_string_equal(c->s[1].msg, "member n01440764_1.jpg has no .cls or "
			    ".txt (for a label in its .json, name its key with "
			    "--label-key)");
	assert_int_equal(c->s[2].status, 0);
	assert_int_equal(c->s[2].label, 3);
	free(b.p);
	free(c);
}

static void test_tar_reads_cls_as_webdataset_does_and_marks_bad_ones_corrupt(void **state)
{
	static const struct {
		const char *text;
		int ok;
		int64_t label;
	} cases[] = {
		{ "0", 1, 0 },
		{ "7\n", 1, 7 },
		{ "  42 \r\n", 1, 42 },
		{ "+3", 1, 3 },
		{ "-1", 1, -1 },
		{ "9223372036854775807", 1, INT64_MAX },
		{ "-9223372036854775808", 1, INT64_MIN },
		{ "9223372036854775808", 0, 0 },
		{ "99999999999999999999999", 0, 0 },
		{ "", 0, 0 },
		{ " \n", 0, 0 },
		{ "abc", 0, 0 },
		{ "12a", 0, 0 },
		{ "1 2", 0, 0 },
		{ "-", 0, 0 },
		{ "3.0", 0, 0 },
	};
	size_t ncase = sizeof(cases) / sizeof(cases[0]);
	tb b = { 0 };
	coll *c = new_coll();
	char name[32], big[400];

	for (size_t i = 0; i < ncase; i++) {
		snprintf(name, sizeof(name), "k%02zu.jpg", i);
		tb_text(&b, name, "JPEG");
		snprintf(name, sizeof(name), "k%02zu.cls", i);
		tb_text(&b, name, cases[i].text);
	}
	/* A .cls too long to be a label, even if it is only digits. */
	memset(big, '1', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	tb_text(&b, "long.jpg", "JPEG");
	tb_text(&b, "long.cls", big);
	/* The label member's extension is matched in any case. */
	tb_text(&b, "upper.jpg", "JPEG");
	tb_text(&b, "upper.CLS", "5");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, ncase + 2);
	for (size_t i = 0; i < ncase; i++) {
		if (cases[i].ok) {
			assert_int_equal(c->s[i].status, 0);
			assert_true(c->s[i].label == cases[i].label);
		} else {
			assert_int_equal(c->s[i].status, BFS_E_CORRUPT);
			assert_non_null(strstr(c->s[i].msg, ".cls is not a decimal"));
		}
	}
	assert_int_equal(c->s[ncase].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[ncase].msg, "399 bytes"));
	assert_int_equal(c->s[ncase + 1].status, 0);
	assert_int_equal(c->s[ncase + 1].label, 5);
	free(b.p);
	free(c);
}

static void test_tar_groups_members_by_webdataset_keys(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	/* KEY ends at the first '.' of the last component. */
	tb_text(&b, "train.v1/shard0/img.001.jpg", "ignored: ext is 001.jpg");
	tb_text(&b, "train.v1/shard0/img.cls", "1");
	tb_text(&b, "train.v1/shard0/img.jpg", "JPEG1");
	/* No extension, or WebDataset's __meta__ files: ignored. */
	tb_text(&b, "README", "hello");
	tb_text(&b, "__info.json__", "{}");
	/* A last component that starts with '.' reaches back over '/'. */
	tb_text(&b, "dir/.jpg", "JPEG2");
	tb_text(&b, "dir/.cls", "2");
	/* ... unless the component before has a dot: no key. */
	tb_text(&b, "d.x/.jpg", "ignored");
	tb_text(&b, ".jpg", "ignored");
	/* A KEY that comes back later is a new sample. */
	tb_text(&b, "k.jpg", "JPEG3");
	tb_text(&b, "k.cls", "3");
	tb_text(&b, "other.txt", "breaks the group");
	tb_text(&b, "k.cls", "4");
	tb_text(&b, "k.jpg", "JPEG4");
	/* Only .cls: not a sample. */
	tb_text(&b, "only.cls", "9");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 4);
	assert_string_equal(c->s[0].key, "train.v1/shard0/img");
	assert_string_equal(c->s[0].name, "train.v1/shard0/img.jpg");
	assert_int_equal(c->s[0].label, 1);
	assert_int_equal(c->s[0].length, 5);
	assert_string_equal(c->s[1].key, "dir/");
	assert_int_equal(c->s[1].label, 2);
	assert_string_equal(c->s[2].key, "k");
	assert_int_equal(c->s[2].label, 3);
	assert_string_equal(c->s[3].key, "k");
	assert_int_equal(c->s[3].label, 4);
	free(b.p);
	free(c);
}

static void test_tar_marks_a_key_with_two_images_or_two_labels_as_corrupt(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	tb_text(&b, "a.jpg", "JPEG");
	tb_text(&b, "a.jpeg", "JPEG");
	tb_text(&b, "a.cls", "1");
	tb_text(&b, "b.jpg", "JPEG");
	tb_text(&b, "b.cls", "1");
	tb_text(&b, "b.cls", "2");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 2);
	assert_int_equal(c->s[0].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[0].msg, "2 image members"));
	assert_string_equal(c->s[0].name, "a.jpg");
	assert_int_equal(c->s[1].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[1].msg, "2 .cls members"));
	free(b.p);
	free(c);
}

static void test_tar_skips_directories_symlinks_and_other_members(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	size_t off;

	tb_header(&b, "train/", '5', 0, USTAR);
	tb_header(&b, "train/x.jpg", '2', 0, USTAR);      /* symlink */
	tb_header(&b, "train/y.jpg", '3', 0, USTAR);      /* char device */
	tb_header(&b, "train/fifo.jpg", '6', 0, USTAR);
	tb_header(&b, "old/", '\0', 0, V7);              /* v7 directory */
	/* A type tar does not know: its data is skipped, not a sample. */
	tb_header(&b, "vendor.jpg", 'Q', 600, USTAR);
	tb_put(&b, NULL, 1024);
	tb_text(&b, "train/z.json", "{}");
	off = tb_file(&b, "train/z.jpg", "JPEGZ", 5);
	tb_text(&b, "train/z.cls", "12");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 1);
	assert_string_equal(c->s[0].key, "train/z");
	assert_int_equal(c->s[0].offset, off);
	assert_int_equal(c->s[0].label, 12);
	assert_int_equal(c->s[0].member, 7);
	free(b.p);
	free(c);
}

static void test_tar_serves_a_hard_link_as_the_data_of_its_target(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	size_t a_off, a_len = 700, link_hdr, c_off;
	uint8_t *a = fake_jpeg(a_len, 1), *z = fake_jpeg(300, 2);

	/* What GNU tar writes for a directory where b.jpg and b.cls are
	 * hard links to a.jpg and a.cls: the second name of each is a '1'
	 * member with size 0 naming the first. */
	tb_text(&b, "d/0.jpg", "JPEG0");
	tb_text(&b, "d/0.cls", "0");
	a_off = tb_file_fmt(&b, "d/a.jpg", a, a_len, GNU);
	tb_text(&b, "d/a.cls", "7");
	link_hdr = tb_link(&b, "d/b.jpg", "d/a.jpg", GNU);
	tb_link(&b, "d/b.cls", "d/a.cls", GNU);
	c_off = tb_file(&b, "d/c.jpg", z, 300);
	tb_text(&b, "d/c.cls", "9");
	/* a link to a link resolves to the first member too */
	tb_link(&b, "d/e.jpg", "d/b.jpg", GNU);
	tb_text(&b, "d/e.cls", "4");
	tb_end(&b);

	assert_int_equal(scan_tb(&b, c, NULL), 0);
	/* every sample once, in member order: the scan starts over at the
	 * first link and passes over the two it already reported */
	assert_int_equal(c->n, 5);
	assert_string_equal(c->s[0].key, "d/0");
	assert_string_equal(c->s[1].key, "d/a");
	assert_string_equal(c->s[2].key, "d/b");
	assert_string_equal(c->s[3].key, "d/c");
	assert_string_equal(c->s[4].key, "d/e");
	assert_int_equal(c->s[1].offset, a_off);
	assert_int_equal(c->s[2].status, 0);
	assert_string_equal(c->s[2].name, "d/b.jpg");
	assert_int_equal(c->s[2].offset, a_off);
	assert_int_equal(c->s[2].length, a_len);
	assert_int_equal(c->s[2].label, 7);        /* b.cls -> a.cls */
	assert_int_equal(c->s[2].member, 4);
	assert_int_equal(c->s[2].header_offset, link_hdr);
	assert_int_equal(c->s[3].offset, c_off);
	assert_int_equal(c->s[3].label, 9);
	assert_int_equal(c->s[4].offset, a_off);
	assert_int_equal(c->s[4].length, a_len);
	assert_int_equal(c->s[4].label, 4);
	for (size_t i = 1; i < c->n; i++)
		assert_true(c->s[i].member > c->s[i - 1].member);

	/* A callback that stops the scan still stops it, before and after
	 * the scan starts over. */
	for (int stop = 0; stop < 5; stop++) {
		int fd = temp_fd(b.p, b.len);

		c->n = 0;
		c->stop_at = stop;
		assert_int_equal(bfs_tar_scan(fd, b.len, collect, c, NULL), 42);
		assert_int_equal(c->n, (size_t)stop);
		close(fd);
	}
	free(a);
	free(z);
	free(b.p);
	free(c);
}

/* A GNU member with a long name and the given text. */
static void tb_long_text(tb *b, const char *name, const char *text)
{
	tb_gnu_longname(b, name);
	tb_header(b, "cut-by-gnu-tar", '0', strlen(text), GNU);
	tb_put(b, text, strlen(text));
	tb_pad(b);
}

static void test_tar_reads_long_hard_link_targets_from_gnu_and_pax_headers(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char dir[200], name[300], target[300], rec[350];
	const char *kv[2];
	size_t off, n;

	memset(dir, 'q', sizeof(dir) - 1);
	dir[sizeof(dir) - 1] = '\0';
	snprintf(target, sizeof(target), "%s/a.jpg", dir);
	tb_gnu_longname(&b, target);
	tb_header(&b, "cut-a", '0', 5, GNU);
	off = b.len;
	tb_put(&b, "JPEGA", 5);
	tb_pad(&b);
	snprintf(name, sizeof(name), "%s/a.cls", dir);
	tb_long_text(&b, name, "1");
	/* GNU: 'K' holds the long link name, 'L' the long name */
	n = strlen(target) + 1;
	tb_header(&b, "././@LongLink", 'K', n, GNU);
	tb_put(&b, target, n);
	tb_pad(&b);
	snprintf(name, sizeof(name), "%s/b.jpg", dir);
	tb_gnu_longname(&b, name);
	tb_link(&b, "cut-b", "cut-a", GNU);
	snprintf(name, sizeof(name), "%s/b.cls", dir);
	tb_long_text(&b, name, "2");
	/* pax: linkpath= */
	snprintf(rec, sizeof(rec), "linkpath=%s", target);
	kv[0] = rec;
	kv[1] = NULL;
	tb_pax(&b, kv);
	tb_link(&b, "z/c.jpg", "wrong", USTAR);
	tb_text(&b, "z/c.cls", "3");
	tb_end(&b);

	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(c->s[i].status, 0);
		assert_int_equal(c->s[i].offset, off);
		assert_int_equal(c->s[i].length, 5);
		assert_int_equal(c->s[i].label, (int64_t)i + 1);
	}
	snprintf(name, sizeof(name), "%s/b.jpg", dir);
	assert_string_equal(c->s[1].name, name);
	assert_string_equal(c->s[2].name, "z/c.jpg");
	free(b.p);
	free(c);
}

static void test_tar_marks_a_hard_link_to_no_earlier_member_as_corrupt(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	tb_text(&b, "a.jpg", "JPEGA");
	tb_text(&b, "a.cls", "1");
	tb_link(&b, "b.jpg", "gone.jpg", GNU);     /* never in the archive */
	tb_text(&b, "b.cls", "2");
	tb_link(&b, "c.jpg", "d.jpg", GNU);        /* a later member */
	tb_text(&b, "c.cls", "3");
	tb_text(&b, "d.jpg", "JPEGD");
	tb_text(&b, "d.cls", "4");
	tb_text(&b, "e.jpg", "JPEGE");
	tb_link(&b, "e.cls", "nope.cls", GNU);     /* the label is a link */
	tb_end(&b);

	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 5);
	assert_int_equal(c->s[0].status, 0);
	assert_int_equal(c->s[1].status, BFS_E_CORRUPT);
	assert_int_equal(c->s[1].label, -1);
	assert_string_equal(c->s[1].msg, "member b.jpg is a hard link to "
			    "gone.jpg, which is not an earlier member of the "
			    "archive");
	assert_int_equal(c->s[2].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[2].msg, "c.jpg is a hard link to d.jpg"));
	assert_int_equal(c->s[3].status, 0);
	assert_int_equal(c->s[3].label, 4);
	assert_int_equal(c->s[4].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[4].msg, "e.cls is a hard link to nope.cls"));
	free(b.p);
	free(c);
}

static void test_tar_reads_gnu_long_names(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char longdir[300], name[400];
	size_t off;

	memset(longdir, 'd', sizeof(longdir) - 1);
	longdir[sizeof(longdir) - 1] = '\0';
	snprintf(name, sizeof(name), "%s/n01440764_10026.JPEG", longdir);
	tb_gnu_longname(&b, name);
	tb_header(&b, "truncated-by-gnu-tar", '0', 4, GNU);
	off = b.len;
	tb_put(&b, "JPEG", 4);
	tb_pad(&b);
	snprintf(name, sizeof(name), "%s/n01440764_10026.cls", longdir);
	tb_gnu_longname(&b, name);
	tb_header(&b, "truncated-too", '0', 2, GNU);
	tb_put(&b, "17", 2);
	tb_pad(&b);
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 1);
	snprintf(name, sizeof(name), "%s/n01440764_10026", longdir);
	assert_string_equal(c->s[0].key, name);
	assert_int_equal(c->s[0].label, 17);
	assert_int_equal(c->s[0].offset, off);
	assert_int_equal(c->s[0].header_offset, 0); /* the 'L' header */
	assert_int_equal(c->s[0].member, 0);
	free(b.p);
	free(c);
}

static void test_tar_reads_pax_paths_and_sizes(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char key[400], rec[450], rec2[450];
	const char *kv[4];
	size_t off, hdr;

	/* A non-ASCII key past 255 bytes, as pax writes it. */
	memset(key, 'p', 300);
	snprintf(key + 300, sizeof(key) - 300, "/s\xc3\xa9");
	snprintf(rec, sizeof(rec), "path=%s.jpg", key);
	snprintf(rec2, sizeof(rec2), "path=%s.cls", key);
	/* Global headers are skipped, path= and all. */
	kv[0] = "path=global.jpg";
	kv[1] = NULL;
	tb_pax_type(&b, kv, 'g');
	hdr = b.len;
	kv[0] = "mtime=1700000000.5";
	kv[1] = rec;
	kv[2] = "size=6"; /* overrides the header's 0 */
	kv[3] = NULL;
	tb_pax(&b, kv);
	tb_header(&b, "short.jpg", '0', 0, USTAR);
	off = b.len;
	tb_put(&b, "JPEG!!", 6);
	tb_pad(&b);
	kv[0] = rec2;
	kv[1] = NULL;
	tb_pax(&b, kv);
	tb_text(&b, "short.cls", "8");
	/* A later empty path= takes the header's name back. */
	kv[0] = "path=elsewhere/x.jpg";
	kv[1] = "path=";
	kv[2] = NULL;
	tb_pax(&b, kv);
	tb_text(&b, "e.jpg", "JPEG");
	tb_text(&b, "e.cls", "3");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 2);
	assert_string_equal(c->s[0].key, key);
	assert_int_equal(c->s[0].offset, off);
	assert_int_equal(c->s[0].length, 6);
	assert_int_equal(c->s[0].header_offset, hdr);
	assert_int_equal(c->s[0].member, 0);
	assert_int_equal(c->s[0].label, 8);
	assert_string_equal(c->s[1].key, "e");
	assert_int_equal(c->s[1].label, 3);
	free(b.p);
	free(c);
}

static void test_tar_joins_the_ustar_prefix_and_name(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char dir[200], name[300];

	memset(dir, 'u', 150);
	dir[150] = '\0';
	snprintf(name, sizeof(name), "%s/n015_%s.jpg", dir,
		 "0123456789012345678901234567890123456789012345678901234567890123456789");
	tb_text(&b, name, "JPEG");
	snprintf(name, sizeof(name), "%s/n015_%s.cls", dir,
		 "0123456789012345678901234567890123456789012345678901234567890123456789");
	tb_text(&b, name, "4");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 1);
	name[strlen(name) - 4] = '\0';
	assert_string_equal(c->s[0].key, name);
	assert_int_equal(c->s[0].label, 4);
	free(b.p);
	free(c);
}

static void test_tar_reads_v7_and_gnu_headers_and_base256_sizes(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	size_t off1, off2, h;

	off1 = tb_file_fmt(&b, "v7.jpg", "JPEGv7", 6, V7);
	tb_file_fmt(&b, "v7.cls", "1", 1, V7);
	h = tb_header(&b, "gnu.jpg", '0', 0, GNU);
	/* base-256 size 9 */
	memset(b.p + h + 124, 0, 12);
	b.p[h + 124] = 0x80;
	b.p[h + 135] = 9;
	set_checksum(b.p + h);
	off2 = b.len;
	tb_put(&b, "JPEGgnu!!", 9);
	tb_pad(&b);
	tb_file_fmt(&b, "gnu.cls", "2", 1, GNU);
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 2);
	assert_int_equal(c->s[0].offset, off1);
	assert_int_equal(c->s[0].label, 1);
	assert_int_equal(c->s[1].offset, off2);
	assert_int_equal(c->s[1].length, 9);
	assert_int_equal(c->s[1].label, 2);
	free(b.p);
	free(c);
}

static void test_tar_accepts_a_signed_checksum_and_number_fields_ended_by_space(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	unsigned usum = 0;
	int ssum = 0;
	size_t h;

	h = tb_header(&b, "x\xe9\xe9.jpg", '0', 4, USTAR);
	/* old style: "    4 " size, checksum as the signed byte sum */
	memcpy(b.p + h + 124, "          4 ", 12);
	memset(b.p + h + 148, ' ', 8);
	for (int i = 0; i < 512; i++) {
		usum += b.p[h + i];
		ssum += (int8_t)b.p[h + i];
	}
	assert_true((unsigned)ssum != usum);
	snprintf((char *)b.p + h + 148, 8, "%06o", (unsigned)ssum);
	tb_put(&b, "JPEG", 4);
	tb_pad(&b);
	tb_text(&b, "x\xe9\xe9.cls", "6");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 1);
	assert_int_equal(c->s[0].length, 4);
	assert_int_equal(c->s[0].label, 6);
	assert_true(bfs_tar_probe(b.p, 512));
	free(b.p);
	free(c);
}

/* Four whole samples, then whatever the test appends. */
static void four_samples(tb *b)
{
	char name[32], cls[8];

	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "s%d.jpg", i);
		tb_text(b, name, "JPEGJPEG");
		snprintf(name, sizeof(name), "s%d.cls", i);
		snprintf(cls, sizeof(cls), "%d", i);
		tb_text(b, name, cls);
	}
}

static void test_tar_reports_samples_before_a_bad_checksum_then_fails(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX];
	size_t h;

	four_samples(&b);
	h = tb_header(&b, "s4.jpg", '0', 4, USTAR);
	tb_put(&b, "JPEG", 4);
	tb_pad(&b);
	tb_text(&b, "s4.cls", "4");
	tb_end(&b);
	b.p[h + 10] ^= 0x01; /* the name changes, the checksum does not */
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_int_equal(c->n, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(c->s[i].status, 0);
	assert_non_null(strstr(err, "member 8 at offset 8192"));
	assert_non_null(strstr(err, "checksum"));
	/* A checksum field that is not a number at all. */
	b.p[h + 10] ^= 0x01;
	memcpy(b.p + h + 148, "zzzzzzzz", 8);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_int_equal(c->n, 4);
	assert_non_null(strstr(err, "not a tar header"));
	free(b.p);
	free(c);
}

static void test_tar_names_a_file_that_is_not_a_tar_without_quoting_it(void **state)
{
	static const char line[] = "SECRET-TOKEN-1234 root:$6$salt$hash:19000:0:99999:7:::\n";
	tb b = { 0 }, z = { 0 }, d = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX];

	/* 1 KiB of secret text: it used to be "member 0 at offset 0: header
	 * checksum 0o... does not match the computed 0o...", its digits and
	 * the sum of its first 512 bytes */
	while (b.len < 1024)
		tb_put(&b, line, sizeof(line) - 1);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_string_equal(err, "not a TFRecord, tar or JPEG file: its first "
			    "512 bytes are not a tar header");
	memcpy(b.p + 148, "0000644", 7); /* a number where the checksum goes */
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_string_equal(err, "not a TFRecord, tar or JPEG file: its first "
			    "512 bytes are not a tar header");
	/* gzip data, as a .tar.gz renamed .tar */
	tb_put(&z, "\x1f\x8b\x08\x00", 4);
	tb_put(&z, NULL, 1020);
	assert_int_equal(scan_tb(&z, c, err), BFS_E_CORRUPT);
	assert_string_equal(err, "not a tar file: its first 512 bytes are not a "
			    "tar header; it looks like gzip data");
	/* a tar whose first header is damaged is still called one */
	four_samples(&d);
	tb_end(&d);
	d.p[10] ^= 1;
	assert_int_equal(scan_tb(&d, c, err), BFS_E_CORRUPT);
	assert_string_equal(err, "member 0 at offset 0: header checksum does not "
			    "match (a damaged tar archive)");
	free(b.p);
	free(z.p);
	free(d.p);
	free(c);
}

static void test_tar_keeps_the_sample_in_progress_when_its_cls_is_lost(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX];
	size_t h;

	four_samples(&b);
	tb_text(&b, "s4.jpg", "JPEG");
	h = tb_header(&b, "s4.cls", '0', 1, USTAR);
	tb_put(&b, "4", 1);
	tb_pad(&b);
	tb_end(&b);
	b.p[h + 148] = '9'; /* checksum digit */
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_int_equal(c->n, 5);
	assert_int_equal(c->s[4].status, BFS_E_NOKEY);
	assert_non_null(strstr(c->s[4].msg, "before the damaged part"));
	free(b.p);
	free(c);
}

static void test_tar_reports_a_file_cut_mid_member_and_mid_header(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX];
	size_t data;

	four_samples(&b);
	tb_header(&b, "s4.jpg", '0', 3000, USTAR);
	data = b.len;
	tb_put(&b, NULL, 3000);
	tb_pad(&b);
	tb_text(&b, "s4.cls", "4");
	tb_end(&b);

	/* mid-member */
	assert_int_equal(scan_len(&b, data + 1000, c, err), BFS_E_TRUNCATED);
	assert_int_equal(c->n, 4);
	assert_non_null(strstr(err, "member 8 (s4.jpg) at offset 8192"));
	assert_non_null(strstr(err, "runs past end of file"));
	/* mid-header */
	assert_int_equal(scan_len(&b, data - 200, c, err), BFS_E_TRUNCATED);
	assert_int_equal(c->n, 4);
	assert_non_null(strstr(err, "member 8 at offset 8192: file ends inside "
				    "the 512-byte header (312 bytes left)"));
	/* Cut in the .cls header after a whole image: the image is kept. */
	assert_int_equal(scan_len(&b, data + 3072 + 100, c, err),
			 BFS_E_TRUNCATED);
	assert_int_equal(c->n, 5);
	assert_int_equal(c->s[4].status, BFS_E_NOKEY);
	/* Cut right after the last member's data, or between members:
	 * whole samples are all there, but the end marker is not. */
	assert_int_equal(scan_len(&b, b.len - 1024 - 511, c, err),
			 BFS_E_TRUNCATED);
	assert_int_equal(c->n, 5);
	assert_int_equal(c->s[4].label, 4);
	assert_non_null(strstr(err, "without the end-of-archive blocks"));
	assert_int_equal(scan_len(&b, b.len - 1024, c, err), BFS_E_TRUNCATED);
	assert_int_equal(c->n, 5);
	assert_int_equal(c->s[4].label, 4);
	assert_int_equal(scan_len(&b, 4096, c, err), BFS_E_TRUNCATED);
	assert_int_equal(c->n, 2);
	/* A cut inside the end marker loses nothing. */
	assert_int_equal(scan_len(&b, b.len - 1024 + 1, c, err), 0);
	assert_int_equal(c->n, 5);
	free(b.p);
	free(c);
}

static void test_tar_survives_a_cut_at_every_byte(void **state)
{
	tb b = { 0 };
	coll *c = new_coll(), *full = new_coll();
	char err[BFS_ERRMSG_MAX];
	const char *kv[] = { "path=pax/long.jpg", NULL };

	four_samples(&b);
	tb_gnu_longname(&b, "gnu/long.jpg");
	tb_header(&b, "x", '0', 700, GNU);
	tb_put(&b, NULL, 700);
	tb_pad(&b);
	tb_text(&b, "gnu/long.cls", "5");
	tb_pax(&b, kv);
	tb_text(&b, "ignored", "JPEG");
	tb_text(&b, "pax/long.cls", "6");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, full, NULL), 0);
	assert_int_equal(full->n, 6);
	for (size_t len = 0; len < b.len; len++) {
		int rc = scan_len(&b, len, c, err);

		assert_true(rc == 0 || rc == BFS_E_TRUNCATED);
		assert_true(c->n <= full->n);
		for (size_t i = 0; i < c->n; i++) {
			assert_string_equal(c->s[i].key, full->s[i].key);
			assert_int_equal(c->s[i].offset, full->s[i].offset);
			/* Only the last reported sample may have lost its
			 * .cls to the cut. */
			if (i + 1 < c->n || c->s[i].status == 0)
				assert_int_equal(c->s[i].label,
						 full->s[i].label);
		}
		if (len == 0 || len > b.len - 1024) {
			/* nothing, or a cut inside the end marker */
			assert_int_equal(rc, 0);
			assert_int_equal(c->n, len ? full->n : 0);
		} else {
			assert_int_equal(rc, BFS_E_TRUNCATED);
			assert_non_null(strstr(err, "member "));
		}
	}
	free(b.p);
	free(c);
	free(full);
}

static void test_tar_refuses_absurd_sizes_without_allocating(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX];
	size_t h;

	four_samples(&b);
	/* 8 GiB - 1 in octal in a file of a few KiB */
	h = tb_header(&b, "huge.jpg", '0', 077777777777ull, USTAR);
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_TRUNCATED);
	assert_int_equal(c->n, 4);
	assert_non_null(strstr(err, "data of 8589934591 bytes runs past end"));
	/* base-256: 2^62, then 2^64 and more, then negative */
	memset(b.p + h + 124, 0, 12);
	b.p[h + 124] = 0x80;
	b.p[h + 128] = 0x40;
	set_checksum(b.p + h);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_TRUNCATED);
	b.p[h + 127] = 0x01;
	set_checksum(b.p + h);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_non_null(strstr(err, "size field"));
	memset(b.p + h + 124, 0xff, 12);
	set_checksum(b.p + h);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	/* not a number */
	memcpy(b.p + h + 124, "0000000009x\0", 12);
	set_checksum(b.p + h);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_int_equal(c->n, 4);
	/* a huge pax size and a huge long-name header */
	b.len = h;
	{
		const char *kv[] = { "size=18446744073709551615", NULL };

		tb_pax(&b, kv);
		tb_text(&b, "x.jpg", "JPEG");
		tb_end(&b);
		assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
		assert_non_null(strstr(err, "bad pax header"));
	}
	b.len = h;
	tb_header(&b, "././@LongLink", 'L', (1u << 20) + 1, GNU);
	tb_put(&b, NULL, (1u << 20) + 512);
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_non_null(strstr(err, "over the 1048576-byte limit"));
	assert_int_equal(c->n, 4);
	free(b.p);
	free(c);
}

static void test_tar_rejects_malformed_pax_records(void **state)
{
	static const char *const bodies[] = {
		"x path=a\n",         /* no length */
		"99 path=a\n",        /* length past the header */
		"3 p\n",              /* too short */
		"10 patha.jp\n",      /* no '=' */
		"11 path=a.jpX",      /* no newline */
		"20 size=12a45678901\n",
	};
	tb b = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX];

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		b.len = 0;
		four_samples(&b);
		tb_header(&b, "PaxHeaders/x", 'x', strlen(bodies[i]), USTAR);
		tb_put(&b, bodies[i], strlen(bodies[i]));
		tb_pad(&b);
		tb_text(&b, "x.jpg", "JPEG");
		tb_end(&b);
		assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
		assert_int_equal(c->n, 4);
		assert_non_null(strstr(err, "member 8 at offset 8192: bad pax"));
	}
	/* An extension header with no member after it. */
	b.len = 0;
	four_samples(&b);
	tb_gnu_longname(&b, "dangling.jpg");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, err), BFS_E_CORRUPT);
	assert_non_null(strstr(err, "after an extension header"));
	b.len -= 1024;
	assert_int_equal(scan_tb(&b, c, err), BFS_E_TRUNCATED);
	assert_int_equal(c->n, 4);
	free(b.p);
	free(c);
}

static void test_tar_marks_sparse_images_as_unsupported(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	size_t h;

	/* Old GNU sparse with one extension block of sparse maps. */
	h = tb_header(&b, "sp.jpg", 'S', 4, GNU);
	b.p[h + 482] = 1;
	set_checksum(b.p + h);
	tb_put(&b, NULL, 512); /* the extension block, isextended = 0 */
	tb_put(&b, "JPEG", 4);
	tb_pad(&b);
	tb_text(&b, "sp.cls", "1");
	{
		const char *kv[] = { "GNU.sparse.major=1", "GNU.sparse.minor=0",
				     "GNU.sparse.name=sp2.jpg",
				     "GNU.sparse.realsize=100", NULL };

		tb_pax(&b, kv);
		tb_text(&b, "GNUSparseFile.0/sp2.jpg", "JPEG");
	}
	tb_text(&b, "sp2.cls", "2");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 2);
	assert_int_equal(c->s[0].status, BFS_E_FORMAT);
	assert_int_equal(c->s[0].offset, h + 1024);
	assert_int_equal(c->s[1].status, BFS_E_FORMAT);
	assert_string_equal(c->s[1].key, "sp2");
	assert_non_null(strstr(c->s[1].msg, "sparse"));
	free(b.p);
	free(c);
}

static void test_tar_scan_returns_the_callbacks_nonzero_value(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	four_samples(&b);
	tb_end(&b);
	c->stop_at = 2;
	assert_int_equal(scan_tb(&b, c, NULL), 42);
	assert_int_equal(c->n, 2);
	c->stop_at = 3; /* the last sample is reported at the end marker */
	assert_int_equal(scan_tb(&b, c, NULL), 42);
	assert_int_equal(c->n, 3);
	free(b.p);
	free(c);
}

static void test_tar_reports_eio_when_the_file_is_shorter_than_said(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	char err[BFS_ERRMSG_MAX] = "";
	int fd;

	four_samples(&b);
	tb_end(&b);
	fd = temp_fd(b.p, b.len - 2048);
	c->size = b.len;
	assert_int_equal(bfs_tar_scan(fd, b.len, collect, c, NULL), -EIO);
	close(fd);
	/* with a message naming where (the first 64 KiB read already
	 * comes back short here, so no sample is reported) */
	c->n = 0;
	fd = temp_fd(b.p, b.len - 2048);
	assert_int_equal(bfs_tar_scan(fd, b.len, collect, c, err), -EIO);
	close(fd);
	assert_non_null(strstr(err, "member 0 at offset 0: the file is shorter"));
	assert_int_equal(c->n, 0);
	free(b.p);
	free(c);
}

static void test_tar_probe_recognizes_a_header_by_its_checksum(void **state)
{
	tb b = { 0 };
	uint8_t zero[512] = { 0 }, jpeg[512];

	tb_text(&b, "a.jpg", "JPEG");
	assert_int_equal(bfs_tar_probe(b.p, b.len), 1);
	assert_int_equal(bfs_tar_probe(b.p, 511), 0);
	assert_int_equal(bfs_tar_probe(NULL, 512), 0);
	assert_int_equal(bfs_tar_probe(zero, 512), 0);
	memcpy(jpeg, b.p, 512);
	jpeg[0] ^= 0x20;
	assert_int_equal(bfs_tar_probe(jpeg, 512), 0);
	memset(jpeg, 0, sizeof(jpeg));
	jpeg[0] = 0xff; jpeg[1] = 0xd8; jpeg[2] = 0xff; jpeg[3] = 0xe0;
	assert_int_equal(bfs_tar_probe(jpeg, 512), 0);
	free(b.p);
}

static void test_tar_survives_random_corruption(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	const char *kv[] = { "path=pax/p.jpg", "size=700", NULL };
	uint8_t *orig;
	unsigned seed = 12345;

	four_samples(&b);
	tb_gnu_longname(&b, "gnu/long.jpg");
	tb_header(&b, "x", '0', 700, GNU);
	tb_put(&b, NULL, 700);
	tb_pad(&b);
	tb_pax(&b, kv);
	tb_header(&b, "x", '0', 0, USTAR);
	tb_put(&b, NULL, 700);
	tb_pad(&b);
	tb_end(&b);
	orig = malloc(b.len);
	memcpy(orig, b.p, b.len);
	for (int iter = 0; iter < 3000; iter++) {
		int rc;

		memcpy(b.p, orig, b.len);
		for (int k = 0; k < 1 + iter % 4; k++) {
			size_t at;

			seed = seed * 1103515245u + 12345u;
			at = (seed >> 8) % b.len;
			seed = seed * 1103515245u + 12345u;
			b.p[at] = (uint8_t)(seed >> 16);
			/* Keep the headers' checksums valid half the time,
			 * so the damage reaches the fields behind them. */
			if (iter % 2)
				for (size_t h = 0; h + 512 <= b.len; h += 512)
					if (bfs_tar_probe(orig + h, 512) &&
					    at >= h && at < h + 512)
						set_checksum(b.p + h);
		}
		rc = scan_tb(&b, c, NULL);
		assert_true(rc == 0 || rc == BFS_E_CORRUPT ||
			    rc == BFS_E_TRUNCATED);
	}
	free(orig);
	free(b.p);
	free(c);
}

/*
 * Cross-check with Python's tarfile: three formats, long names, a member
 * over 16 KiB; the manifest python writes gives each image member's data
 * offset (TarInfo.offset_data), size and label.
 */
static const char py_writer[] =
	"import io, sys, tarfile\n"
	"out, manifest = sys.argv[1], open(sys.argv[2], 'w')\n"
	"fmt = {'gnu': tarfile.GNU_FORMAT, 'pax': tarfile.PAX_FORMAT,\n"
	"       'ustar': tarfile.USTAR_FORMAT}[sys.argv[3]]\n"
	"def add(t, name, data):\n"
	"    ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 1700000000\n"
	"    t.addfile(ti, io.BytesIO(data))\n"
	"with tarfile.open(out, 'w', format=fmt) as t:\n"
	"    d = tarfile.TarInfo('train'); d.type = tarfile.DIRTYPE; t.addfile(d)\n"
	"    for i in range(40):\n"
	"        deep = 'x' * (60 + 3 * i) if sys.argv[3] != 'ustar' else 'x' * 60\n"
	"        key = 'train/%s/n%08d_%d' % (deep, i * 7, i)\n"
	"        img = bytes([0xff, 0xd8]) + bytes((i * 31 + k) & 255 for k in range(100 + 997 * i))\n"
	"        add(t, key + ('.jpg' if i % 3 else '.JPEG'), img)\n"
	"        add(t, key + '.cls', b'%d\\n' % (i * 11))\n"
	"        add(t, key + '.json', b'{}')\n"
	"with tarfile.open(out) as t:\n"
	"    for m in t.getmembers():\n"
	"        if m.name.lower().endswith(('.jpg', '.jpeg')):\n"
	"            manifest.write('%s %d %d %d\\n' % (m.name.rsplit('.', 1)[0],\n"
	"                           m.offset_data, m.size, int(m.name.split('_')[-1].split('.')[0]) * 11))\n";

static void test_tar_reads_what_python_tarfile_writes(void **state)
{
	static const char *const formats[] = { "gnu", "pax", "ustar" };
	char dir[] = "/tmp/bfs_test_tar_XXXXXX", cmd[512], tarp[256], manp[256];
	char line[1024];
	coll *c = new_coll();
	FILE *p;

	if (system("python3 -c 'import tarfile' >/dev/null 2>&1") != 0) {
		print_message("skip: python3 with tarfile is not available\n");
		skip();
	}
	assert_non_null(mkdtemp(dir));
	snprintf(tarp, sizeof(tarp), "%s/shard.tar", dir);
	snprintf(manp, sizeof(manp), "%s/manifest", dir);
	for (size_t f = 0; f < 3; f++) {
		struct stat st;
		FILE *m;
		size_t i = 0;
		int fd;

		snprintf(cmd, sizeof(cmd), "python3 - %s %s %s", tarp, manp,
			 formats[f]);
		p = popen(cmd, "w");
		assert_non_null(p);
		fputs(py_writer, p);
		assert_int_equal(pclose(p), 0);
		fd = open(tarp, O_RDONLY);
		assert_true(fd >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		c->n = 0;
		c->size = (uint64_t)st.st_size;
		assert_int_equal(bfs_tar_scan(fd, (uint64_t)st.st_size,
					      collect, c, NULL), 0);
		close(fd);
		m = fopen(manp, "r");
		assert_non_null(m);
		while (fgets(line, sizeof(line), m)) {
			char key[1024];
			unsigned long long off, size;
			long long label;

			assert_int_equal(sscanf(line, "%1023s %llu %llu %lld",
						key, &off, &size, &label), 4);
			assert_true(i < c->n);
			assert_string_equal(c->s[i].key, key);
			assert_int_equal(c->s[i].offset, off);
			assert_int_equal(c->s[i].length, size);
			assert_int_equal(c->s[i].label, label);
			assert_int_equal(c->s[i].status, 0);
			i++;
		}
		fclose(m);
		assert_int_equal(i, 40);
		assert_int_equal(c->n, 40);
		unlink(tarp);
		unlink(manp);
	}
	rmdir(dir);
	free(c);
}


/* Scan with label options (opts may be NULL). */
static int scan_opts(const tb *b, coll *c, const bfs_tar_opts *o, char *errmsg)
{
	int fd = temp_fd(b->p, b->len), rc;
	bfs_reader r = bfs_reader_fd(fd);

	c->n = 0;
	c->size = b->len;
	if (errmsg)
		errmsg[0] = '\0';
	rc = bfs_tar_scan_reader(&r, b->len, o, collect, c, errmsg);
	close(fd);
	return rc;
}

static void test_tar_takes_the_label_from_txt_when_a_sample_has_no_cls(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();

	tb_text(&b, "a.jpg", "JPEGDATA");
	tb_text(&b, "a.txt", " 17\n");
	tb_text(&b, "b.txt", "5");
	tb_text(&b, "b.cls", "6");   /* .cls wins over .txt */
	tb_text(&b, "b.jpg", "JPEGDATA");
	tb_text(&b, "c.jpg", "JPEGDATA");
	tb_text(&b, "c.txt", "a photo of a cat");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 3);
	assert_int_equal(c->s[0].status, 0);
	assert_int_equal(c->s[0].label, 17);
	assert_int_equal(c->s[1].status, 0);
	assert_int_equal(c->s[1].label, 6);
	assert_int_equal(c->s[2].status, BFS_E_CORRUPT);
	assert_string_equal(c->s[2].msg, "c.txt is not a decimal class label");
	free(b.p);
	free(c);
}

static void test_tar_takes_the_label_from_the_json_key_label_key_names(void **state)
{
	bfs_tar_opts o = { .json_key = "label" };
	tb b = { 0 };
	coll *c = new_coll();

	tb_text(&b, "a.jpg", "JPEGDATA");
	tb_text(&b, "a.json", "{\"caption\": \"x\", \"meta\": {\"label\": 9}, \"label\": 12}");
	tb_text(&b, "a.cls", "3");           /* not used with a json key */
	tb_text(&b, "b.jpg", "JPEGDATA");
	tb_text(&b, "b.json", "{\"lab\\u0065l\": -2, \"label\": 7}"); /* the last one */
	tb_text(&b, "c.jpg", "JPEGDATA");
	tb_text(&b, "c.json", "{\"label\": 3.0}");
	tb_text(&b, "d.jpg", "JPEGDATA");
	tb_text(&b, "d.json", "{\"other\": 1}");
	tb_text(&b, "e.jpg", "JPEGDATA");
	tb_text(&b, "e.json", "{\"label\": 1} trailing");
	tb_text(&b, "f.jpg", "JPEGDATA");
	tb_text(&b, "f.cls", "1");
	tb_end(&b);
	assert_int_equal(scan_opts(&b, c, &o, NULL), 0);
	assert_int_equal(c->n, 6);
	assert_int_equal(c->s[0].status, 0);
	assert_int_equal(c->s[0].label, 12);
	assert_int_equal(c->s[1].status, 0);
	assert_int_equal(c->s[1].label, 7);
	assert_int_equal(c->s[2].status, BFS_E_CORRUPT);
	assert_string_equal(c->s[2].msg, "c.json member \"label\" is not an integer");
	assert_int_equal(c->s[3].status, BFS_E_NOKEY);
	assert_string_equal(c->s[3].msg, "d.json has no member \"label\"");
	assert_int_equal(c->s[4].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[4].msg, "e.json is not JSON"));
	assert_int_equal(c->s[5].status, BFS_E_NOKEY);
	assert_non_null(strstr(c->s[5].msg, "f.jpg has no .json"));
	free(b.p);
	free(c);
}

static void test_tar_refuses_a_json_label_member_over_its_limit(void **state)
{
	bfs_tar_opts o = { .json_key = "label" };
	tb b = { 0 };
	coll *c = new_coll();
	size_t n = BFS_TAR_MAX_JSON + 1;
	char *big = malloc(n + 1);

	memset(big, ' ', n);
	memcpy(big, "{\"label\": 1}", 12);
	big[n] = '\0';
	tb_text(&b, "a.jpg", "JPEGDATA");
	tb_text(&b, "a.json", big);
	tb_end(&b);
	assert_int_equal(scan_opts(&b, c, &o, NULL), 0);
	assert_int_equal(c->n, 1);
	assert_int_equal(c->s[0].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[0].msg, "a.json is 65537 bytes"));
	free(big);
	free(b.p);
	free(c);
}

static void test_tar_takes_png_webp_and_jpeg_members_as_images(void **state)
{
	tb b = { 0 };
	coll *c = new_coll();
	const char *names[] = { "a.png", "b.webp", "c.JPEG", "d.jpg", "e.gif" };

	for (int i = 0; i < 5; i++) {
		char cls[16];

		tb_text(&b, names[i], "IMAGEDATA");
		snprintf(cls, sizeof(cls), "%d", i);
		tb_text(&b, (char[]){ (char)('a' + i), '.', 'c', 'l', 's', 0 }, cls);
	}
	tb_text(&b, "f.bmp", "BMPDATA");       /* not an image member */
	tb_text(&b, "f.cls", "5");
	tb_text(&b, "g.png", "IMAGEDATA");
	tb_text(&b, "g.webp", "IMAGEDATA");    /* two images: refused */
	tb_text(&b, "g.cls", "6");
	tb_end(&b);
	assert_int_equal(scan_tb(&b, c, NULL), 0);
	assert_int_equal(c->n, 6);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(c->s[i].status, 0);
		assert_int_equal(c->s[i].label, i);
		assert_string_equal(c->s[i].name, names[i]);
	}
	assert_int_equal(c->s[5].status, BFS_E_CORRUPT);
	assert_non_null(strstr(c->s[5].msg, "2 image members"));
	free(b.p);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tar_lists_samples_in_order_with_their_offsets_and_labels),
		cmocka_unit_test(test_tar_of_zero_bytes_or_only_zero_blocks_has_no_samples),
		cmocka_unit_test(test_tar_marks_an_image_without_cls_as_a_nokey_sample),
		cmocka_unit_test(test_tar_takes_the_label_from_txt_when_a_sample_has_no_cls),
		cmocka_unit_test(test_tar_takes_the_label_from_the_json_key_label_key_names),
		cmocka_unit_test(test_tar_refuses_a_json_label_member_over_its_limit),
		cmocka_unit_test(test_tar_takes_png_webp_and_jpeg_members_as_images),
		cmocka_unit_test(test_tar_reads_cls_as_webdataset_does_and_marks_bad_ones_corrupt),
		cmocka_unit_test(test_tar_groups_members_by_webdataset_keys),
		cmocka_unit_test(test_tar_marks_a_key_with_two_images_or_two_labels_as_corrupt),
		cmocka_unit_test(test_tar_skips_directories_symlinks_and_other_members),
		cmocka_unit_test(test_tar_serves_a_hard_link_as_the_data_of_its_target),
		cmocka_unit_test(test_tar_reads_long_hard_link_targets_from_gnu_and_pax_headers),
		cmocka_unit_test(test_tar_marks_a_hard_link_to_no_earlier_member_as_corrupt),
		cmocka_unit_test(test_tar_reads_gnu_long_names),
		cmocka_unit_test(test_tar_reads_pax_paths_and_sizes),
		cmocka_unit_test(test_tar_joins_the_ustar_prefix_and_name),
		cmocka_unit_test(test_tar_reads_v7_and_gnu_headers_and_base256_sizes),
		cmocka_unit_test(test_tar_accepts_a_signed_checksum_and_number_fields_ended_by_space),
		cmocka_unit_test(test_tar_reports_samples_before_a_bad_checksum_then_fails),
		cmocka_unit_test(test_tar_names_a_file_that_is_not_a_tar_without_quoting_it),
		cmocka_unit_test(test_tar_keeps_the_sample_in_progress_when_its_cls_is_lost),
		cmocka_unit_test(test_tar_reports_a_file_cut_mid_member_and_mid_header),
		cmocka_unit_test(test_tar_survives_a_cut_at_every_byte),
		cmocka_unit_test(test_tar_refuses_absurd_sizes_without_allocating),
		cmocka_unit_test(test_tar_rejects_malformed_pax_records),
		cmocka_unit_test(test_tar_marks_sparse_images_as_unsupported),
		cmocka_unit_test(test_tar_scan_returns_the_callbacks_nonzero_value),
		cmocka_unit_test(test_tar_reports_eio_when_the_file_is_shorter_than_said),
		cmocka_unit_test(test_tar_probe_recognizes_a_header_by_its_checksum),
		cmocka_unit_test(test_tar_survives_random_corruption),
		cmocka_unit_test(test_tar_reads_what_python_tarfile_writes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
