/*
 * fuzz_sidecar.c - the sidecar index, and the stored shard indexes it
 * carries, from any bytes.  Byte 0 is a mode:
 *
 *   even: the rest is a sidecar file.  bfs_sidecar_open returns a
 *         documented code; one that opens gives, for each entry looked up
 *         with its own identity, its blob or a documented code; the blobs
 *         it gives, written again through a writer, read back the same.
 *   odd:  a stored shard index handed to a source over a small real shard
 *         directory (bits 1-2: plain TFRecord, GZIP TFRecord, tar, .tar.gz),
 *         as a sidecar entry or a cache would hand it; with bit 3 the rest
 *         replaces the index the source stored for the shard, without it
 *         the rest edits that real index (triples: u16 offset, u8 xor).
 *         bfs_source_open must succeed (an index it cannot use is scanned
 *         again), and every sample must read back, or fail with a
 *         documented code and a terminated message: never a crash, never
 *         a read outside the shard.
 *
 * The shard directories are made once per process under /tmp and removed
 * at exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/formats/sidecar.h"
#include "engine/formats/tfrecord.h"
#include "engine/source.h"
#include "tests/fuzz/fuzz.h"

static char root[64];
static char dirs[4][96];
static void *real_blob[4];
static size_t real_len[4];

static void cleanup(void)
{
	char cmd[128];

	if (root[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			fprintf(stderr, "fuzz_sidecar: could not remove %s\n", root);
	}
}

static void put_file(const char *path, const void *d, size_t n, int gz)
{
	if (gz) {
		gzFile f = gzopen(path, "wb");

		CHECK(f && gzwrite(f, d, (unsigned)n) == (int)n && gzclose(f) == Z_OK, "gz %s", path);
		return;
	}
	{
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		CHECK(fd >= 0 && write(fd, d, n) == (ssize_t)n && close(fd) == 0, "write %s", path);
	}
}

/* Three TFRecord records (two named classes, one bad image). */
static size_t tfrecords(uint8_t *out, size_t cap)
{
	size_t at = 0;
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/tmp.tfrecord", root);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "open");
	for (int i = 0; i < 3; i++) {
		bfs_example_builder *b;
		const uint8_t *ex;
		size_t len;
		uint8_t img[40];

		memset(img, 'a' + i, sizeof(img));
		CHECK(bfs_example_builder_create(&b) == 0, "builder");
		bfs_example_builder_add_bytes(b, "image/encoded", img, 10 + 10 * (size_t)i);
		bfs_example_builder_add_int64(b, "image/class/label", i);
		bfs_example_builder_add_bytes(b, "image/class/synset", i ? "n1" : "n0", 2);
		CHECK(bfs_example_builder_finish(b, &ex, &len) == 0, "finish");
		CHECK(bfs_tfrecord_write(fd, ex, len) == 0, "tfrecord");
		bfs_example_builder_destroy(b);
	}
	at = (size_t)pread(fd, out, cap, 0);
	close(fd);
	unlink(path);
	return at;
}

/* A tar of three samples: labeled, unlabeled, labeled by .txt. */
static void tar_member(uint8_t *t, size_t *at, const char *name, const char *d, size_t n)
{
	uint8_t *h = t + *at;
	unsigned sum = 0;

	memset(h, 0, 512);
	memcpy(h, name, strlen(name));
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)n);
	memcpy(h + 136, "14700000000", 12);
	h[156] = '0';
	memcpy(h + 257, "ustar\0" "00", 8);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
	*at += 512;
	memset(t + *at, 0, (n + 511) / 512 * 512);
	memcpy(t + *at, d, n);
	*at += (n + 511) / 512 * 512;
}

static size_t tar(uint8_t *t)
{
	size_t at = 0;

	tar_member(t, &at, "a.jpg", "imageA", 6);
	tar_member(t, &at, "a.cls", "1", 1);
	tar_member(t, &at, "b.jpg", "imageBB", 7);
	tar_member(t, &at, "c.png", "imageCCC", 8);
	tar_member(t, &at, "c.txt", " 2\n", 3);
	memset(t + at, 0, 1024);
	return at + 1024;
}

struct grab {
	void *blob;
	size_t len;
	const void *give;   /* what index_get hands out */
	size_t give_len;
};

static int grab_put(void *ctx, const char *dir, const char *shard,
		    const bfs_shard_stamp *st, const void *blob, size_t len)
{
	struct grab *g = ctx;

	if (!g->blob) {
		g->blob = malloc(len ? len : 1);
		CHECK(g->blob, "malloc");
		memcpy(g->blob, blob, len);
		g->len = len;
	}
	return 0;
}

static int give_get(void *ctx, const char *dir, const char *shard,
		    const bfs_shard_stamp *st, void **blob, size_t *len)
{
	struct grab *g = ctx;

	if (!g->give)
		return -ENOENT;
	*blob = malloc(g->give_len ? g->give_len : 1);
	CHECK(*blob, "malloc");
	memcpy(*blob, g->give, g->give_len);
	*len = g->give_len;
	return 0;
}

static void setup(void)
{
	static const char *const names[4] = { "a.tfrecord", "a.tfrecord.gz", "a.tar", "a.tar.gz" };
	static uint8_t buf[16384];

	if (root[0])
		return;
	strcpy(root, "/tmp/bfs-fuzz-sidecar-XXXXXX");
	CHECK(mkdtemp(root), "mkdtemp");
	atexit(cleanup);
	for (int k = 0; k < 4; k++) {
		char path[160];
		size_t n = k < 2 ? tfrecords(buf, sizeof(buf)) : tar(buf);
		struct grab g = { 0 };
		bfs_source_opts o = { .dir = dirs[k], .index_put = grab_put, .index_ctx = &g };
		bfs_source *s;

		snprintf(dirs[k], sizeof(dirs[k]), "%s/%d", root, k);
		CHECK(mkdir(dirs[k], 0755) == 0, "mkdir");
		snprintf(path, sizeof(path), "%s/%s", dirs[k], names[k]);
		put_file(path, buf, n, k & 1);
		CHECK(bfs_source_open(&o, &s, NULL) == 0, "the real shard %d does not open", k);
		bfs_source_close(s);
		CHECK(g.blob, "shard %d stored no index", k);
		real_blob[k] = g.blob;
		real_len[k] = g.len;
	}
}

static void blob_mode(const uint8_t *data, size_t size)
{
	int k = (data[0] >> 1) & 3;
	struct grab g = { 0 };
	bfs_source_opts o = { .dir = NULL, .index_get = give_get, .index_ctx = &g };
	uint8_t *edited = NULL;
	char msg[BFS_ERRMSG_MAX];
	bfs_buf buf = { 0 };
	bfs_source *s;
	int err;

	setup();
	o.dir = dirs[k];
	if (data[0] & 8) {
		g.give = data + 1;
		g.give_len = size - 1;
	} else {
		edited = malloc(real_len[k]);
		CHECK(edited, "malloc");
		memcpy(edited, real_blob[k], real_len[k]);
		for (size_t i = 1; i + 3 <= size; i += 3) {
			size_t at = (size_t)(data[i] | data[i + 1] << 8);

			if (at < real_len[k])
				edited[at] ^= data[i + 2];
		}
		g.give = edited;
		g.give_len = real_len[k];
	}
	msg[0] = '\0';
	err = bfs_source_open(&o, &s, msg);
	CHECK_MSG(msg);
	CHECK(err == 0 || err == BFS_E_EMPTY || err == -ENOMEM,
	      "open with a fuzzed index returned %d: %s", err, msg);
	for (uint64_t i = 0; err == 0 && i < bfs_source_count(s) && i < 4096; i++) {
		const uint8_t *jpeg;
		size_t len;
		int64_t label;
		int r;

		msg[0] = '\0';
		r = bfs_source_read(s, i, &buf, &jpeg, &len, &label, msg);
		CHECK_MSG(msg);
		CHECK(r <= 0, "read %llu returned %d", (unsigned long long)i, r);
		CHECK(r != 0 || len == 0 || (jpeg >= buf.data && jpeg + len <= buf.data + buf.cap),
		      "read %llu: image outside the buffer", (unsigned long long)i);
	}
	if (err == 0)
		bfs_source_close(s);
	bfs_buf_free(&buf);
	free(edited);
}

static void sidecar_mode(const uint8_t *data, size_t size)
{
	bfs_sidecar *sc, *back;
	bfs_sidecar_writer *w;
	char msg[BFS_ERRMSG_MAX];
	bfs_sidecar_info info;
	void *out;
	size_t out_len, n;
	int r;

	msg[0] = '\0';
	r = bfs_sidecar_open(data, size, &sc, msg);
	CHECK_MSG(msg);
	CHECK(r == 0 || r == BFS_E_FORMAT || r == BFS_E_CRC || r == BFS_E_CORRUPT ||
	      r == -ENOMEM, "open returned %d", r);
	if (r)
		return;
	CHECK(bfs_sidecar_writer_create(&w) == 0, "writer");
	n = bfs_sidecar_count(sc);
	for (size_t i = 0; i < n; i++) {
		const char *name;
		bfs_sidecar_id id;
		void *blob;
		size_t len;

		CHECK(bfs_sidecar_entry(sc, i, &name, &id) == 0, "entry %zu", i);
		r = bfs_sidecar_lookup(sc, name, &id, &blob, &len);
		CHECK(r == 0 || r == BFS_E_CRC || r == BFS_E_CORRUPT || r == -ENOMEM,
		      "lookup %zu returned %d", i, r);
		if (r == 0) {
			CHECK(len > 0 && len <= BFS_SIDECAR_BLOB_MAX, "blob of %zu", len);
			CHECK(bfs_sidecar_writer_add(w, name, &id, blob, len) == 0,
			      "an entry that read does not write again");
			free(blob);
		}
	}
	bfs_sidecar_get_info(sc, &info);
	if (bfs_sidecar_writer_finish(w, &info, &out, &out_len) == 0) {
		CHECK(bfs_sidecar_open(out, out_len, &back, msg) == 0,
		      "what was written again does not open: %s", msg);
		for (size_t i = 0; i < bfs_sidecar_count(back); i++) {
			const char *name;
			bfs_sidecar_id id;
			void *a, *b;
			size_t la, lb;

			CHECK(bfs_sidecar_entry(back, i, &name, &id) == 0, "entry");
			CHECK(bfs_sidecar_lookup(back, name, &id, &b, &lb) == 0, "re-read");
			CHECK(bfs_sidecar_lookup(sc, name, &id, &a, &la) == 0, "original");
			CHECK(la == lb && !memcmp(a, b, la), "blob %s changed on the way", name);
			free(a);
			free(b);
		}
		bfs_sidecar_close(back);
		free(out);
	}
	bfs_sidecar_writer_destroy(w);
	bfs_sidecar_close(sc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		blob_mode(data, size);
	else
		sidecar_mode(data + 1, size - 1);
	return 0;
}
