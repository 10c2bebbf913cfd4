/*
 * inspect.c - `batchfs inspect`: describe .npy files (see inspect.h).
 *
 * Each file is read (pread, never mapped: a page fault on a mount's file
 * that fails its read, a batch holding a bad sample, is SIGBUS, while a
 * read says EIO, and then the batch's index.json says why), then walked
 * front to back in blocks of 4096
 * elements: a block is converted to doubles, then folded into running
 * min/max and (Chan et al.) mean/M2, which stays accurate for long arrays.
 * 1-D integer arrays additionally get a label summary from a sorted copy.
 */
#include "fs/inspect.h"

#include "engine/base/error.h"
#include "fs/jsonread.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 4096
#define TOP 5

static const char usage_text[] =
	"usage: batchfs inspect [--help] FILE.npy...\n"
	"\n"
	"For each .npy file (format v1/v2/v3, any byte order, C or Fortran\n"
	"order) print its shape, dtype and size, then min/max/mean/std of the\n"
	"values (NaNs counted apart), and for 1-D integer arrays (label files)\n"
	"a label summary: count, distinct labels, min/max, the most common.\n"
	"Exit status: 0 when every file was read, 1 otherwise, 2 usage.\n";

typedef enum { K_NONE, K_BOOL, K_INT, K_UINT, K_FLOAT } kind;

typedef struct {
	kind k;
	size_t size;
	int swap; /* stored big-endian */
} dtype;

static dtype dtype_of(const char *descr)
{
	dtype d = { K_NONE, 0, 0 };
	char *end;
	long n;

	if (strlen(descr) < 3 || !strchr("<>|=", descr[0]))
		return d;
	n = strtol(descr + 2, &end, 10);
	if (*end)
		return d;
	switch (descr[1]) {
	case 'b': d.k = n == 1 ? K_BOOL : K_NONE; break;
	case 'i': d.k = K_INT; break;
	case 'u': d.k = K_UINT; break;
	case 'f': d.k = K_FLOAT; break;
	default: return d;
	}
	if (d.k == K_FLOAT ? n != 2 && n != 4 && n != 8
			   : n != 1 && n != 2 && n != 4 && n != 8)
		d.k = K_NONE;
	d.size = (size_t)n;
	d.swap = descr[0] == '>';
	return d;
}

static const char *dtype_name(const char *descr)
{
	static const char *const names[][2] = {
		{"b1", "bool"}, {"i1", "int8"}, {"i2", "int16"}, {"i4", "int32"},
		{"i8", "int64"}, {"u1", "uint8"}, {"u2", "uint16"},
		{"u4", "uint32"}, {"u8", "uint64"}, {"f2", "float16"},
		{"f4", "float32"}, {"f8", "float64"}, {"c8", "complex64"},
		{"c16", "complex128"},
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(descr + 1, names[i][0]))
			return names[i][1];
	return NULL;
}

/* Raw element bits, in host order. */
static uint64_t load(const uint8_t *p, size_t size, int swap)
{
	uint64_t v = 0;

	if (swap)
		for (size_t i = 0; i < size; i++)
			v = v << 8 | p[i];
	else
		for (size_t i = size; i-- > 0;)
			v = v << 8 | p[i];
	return v;
}

static double half_to_double(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(m + 1024, e - 25);
	return h & 0x8000 ? -v : v;
}

static double to_double(uint64_t bits, dtype d)
{
	switch (d.k) {
	case K_BOOL:
		return bits != 0;
	case K_UINT:
		return (double)bits;
	case K_INT: {
		int shift = 64 - 8 * (int)d.size;

		/* sign-extend the low size bytes */
		return (double)((int64_t)(bits << shift) >> shift);
	}
	case K_FLOAT:
		if (d.size == 2)
			return half_to_double((uint16_t)bits);
		if (d.size == 4) {
			uint32_t b = (uint32_t)bits;
			float f;

			memcpy(&f, &b, 4);
			return f;
		} else {
			double f;

			memcpy(&f, &bits, 8);
			return f;
		}
	default:
		return 0;
	}
}

void bfs_inspect_compute(const void *data, const bfs_npy_info *info,
			 bfs_inspect_stats *out)
{
	const uint8_t *p = data;
	dtype d = dtype_of(info->descr);
	uint64_t n = 0, total;
	double mean = 0, m2 = 0, v[BLOCK];

	memset(out, 0, sizeof(*out));
	if (d.k == K_NONE)
		return;
	out->supported = 1;
	total = info->data_len / d.size;
	out->min = INFINITY;
	out->max = -INFINITY;
	for (uint64_t i = 0; i < total;) {
		size_t nb = 0, m = total - i < BLOCK ? (size_t)(total - i) : BLOCK;
		double bsum = 0, bmean, bm2 = 0, delta;

		for (size_t k = 0; k < m; k++, p += d.size) {
			double x = to_double(load(p, d.size, d.swap), d);

			if (isnan(x)) {
				out->nan++;
				continue;
			}
			if (x < out->min)
				out->min = x;
			if (x > out->max)
				out->max = x;
			bsum += x;
			v[nb++] = x;
		}
		i += m;
		if (!nb)
			continue;
		bmean = bsum / (double)nb;
		for (size_t k = 0; k < nb; k++)
			bm2 += (v[k] - bmean) * (v[k] - bmean);
		/* Chan et al.: merge (n, mean, m2) with the block's. */
		delta = bmean - mean;
		mean += delta * (double)nb / (double)(n + nb);
		m2 += bm2 + delta * delta * (double)n * (double)nb / (double)(n + nb);
		n += nb;
	}
	out->count = total;
	if (n == 0) {
		out->min = out->max = 0;
		return;
	}
	out->mean = mean;
	out->std = sqrt(m2 / (double)n);
}

/* ---- label summary ------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void print_label(uint64_t v, int is_unsigned)
{
	if (is_unsigned)
		printf("%llu", (unsigned long long)v);
	else
		printf("%lld", (long long)(int64_t)v);
}

static int label_summary(const uint8_t *p, uint64_t n, dtype d)
{
	uint64_t *v, distinct = 0, top_v[TOP], top_c[TOP];
	int ntop = 0, uns = d.k == K_UINT;

	if (n == 0)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v) {
		fprintf(stderr, "batchfs inspect: no memory for the label summary\n");
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++, p += d.size) {
		uint64_t bits = load(p, d.size, d.swap);
		int shift = 64 - 8 * (int)d.size;

		v[i] = uns ? bits : (uint64_t)((int64_t)(bits << shift) >> shift);
	}
	qsort(v, n, sizeof(*v), uns ? cmp_u64 : cmp_i64);
	for (uint64_t i = 0; i < n;) {
		uint64_t j = i + 1, c;
		int k;

		while (j < n && v[j] == v[i])
			j++;
		c = j - i;
		distinct++;
		/* keep the TOP largest counts; ties keep the smaller label */
		for (k = ntop; k > 0 && top_c[k - 1] < c; k--)
			;
		if (k < TOP) {
			int last = ntop < TOP ? ntop : TOP - 1;

			memmove(top_v + k + 1, top_v + k, (size_t)(last - k) * sizeof(*top_v));
			memmove(top_c + k + 1, top_c + k, (size_t)(last - k) * sizeof(*top_c));
			top_v[k] = v[i];
			top_c[k] = c;
			if (ntop < TOP)
				ntop++;
		}
		i = j;
	}
	printf("  labels  %llu values, %llu distinct, min ",
	       (unsigned long long)n, (unsigned long long)distinct);
	print_label(v[0], uns);
	printf(", max ");
	print_label(v[n - 1], uns);
	printf("\n  top     ");
	for (int k = 0; k < ntop; k++) {
		if (k)
			printf(", ");
		print_label(top_v[k], uns);
		printf(" (x%llu)", (unsigned long long)top_c[k]);
	}
	printf("\n");
	free(v);
	return 0;
}

/* ---- one file ----------------------------------------------------------- */

/* Read fd's len bytes from offset 0 into buf.  0, or -errno with *at the
 * offset of the read that failed, or 1 when the file ends at *at. */
static int read_all(int fd, uint8_t *buf, size_t len, size_t *at)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*at = got;
			return n < 0 ? -errno : 1;
		}
		got += (size_t)n;
	}
	return 0;
}

/* For a batch file of a mount (DIR/batch-NNNNNN.npy or .labels.npy) whose
 * read failed: what the mount says of the batch, from its index.json
 * ("error": the bad sample's shard, record and reason), into err.  0, or
 * -1 when there is no such file or it says nothing. */
static int mount_says(const char *path, char *err, size_t cap)
{
	size_t n = strlen(path), tail = 0, got = 0;
	char ipath[4096], text[1 << 16], why[128];
	const bfs_jr *e;
	bfs_jr *v = NULL;
	int fd, r = -1;

	if (n > 11 && !strcmp(path + n - 11, ".labels.npy"))
		tail = 11;
	else if (n > 4 && !strcmp(path + n - 4, ".npy"))
		tail = 4;
	if (!tail || n - tail + 12 > sizeof(ipath))
		return -1;
	memcpy(ipath, path, n - tail);
	strcpy(ipath + n - tail, ".index.json");
	if ((fd = open(ipath, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	while (got < sizeof(text)) {
		ssize_t k = read(fd, text + got, sizeof(text) - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	if (bfs_jr_parse(text, got, &v, why, sizeof(why)) == 0 &&
	    (e = bfs_jr_get(v, "error")) && e->type == BFS_JR_STRING) {
		snprintf(err, cap, "%s", e->str);
		r = 0;
	}
	bfs_jr_free(v);
	return r;
}

static int inspect_file(const char *path, int *first)
{
	char err[BFS_ERRMSG_MAX];
	bfs_npy_info info;
	bfs_inspect_stats s;
	struct stat st;
	uint8_t *map = NULL;
	size_t size, at = 0;
	dtype d;
	int fd, r = 1, rerr;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		fprintf(stderr, "batchfs inspect: %s: %s\n", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "batchfs inspect: %s: not a regular file\n", path);
		goto out;
	}
	size = (size_t)st.st_size;
	if (size > 0) {
		if (!(map = malloc(size))) {
			fprintf(stderr, "batchfs inspect: %s: %zu bytes: %s\n", path,
				size, strerror(ENOMEM));
			goto out;
		}
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		if ((rerr = read_all(fd, map, size, &at))) {
			char says[BFS_ERRMSG_MAX];

			if (rerr > 0)
				fprintf(stderr, "batchfs inspect: %s: the file ends at byte %zu, before its size %zu\n",
					path, at, size);
			else
				fprintf(stderr, "batchfs inspect: %s: read at byte %zu: %s\n",
					path, at, strerror(-rerr));
			if (mount_says(path, says, sizeof(says)) == 0)
				fprintf(stderr, "batchfs inspect: %s: the mount failed this batch: %s\n",
					path, says);
			goto out;
		}
	}
	if (bfs_npy_parse(map, size, &info, err)) {
		fprintf(stderr, "batchfs inspect: %s: %s\n", path, err);
		goto out;
	}
	if (size - info.header_len < info.data_len) {
		fprintf(stderr,
			"batchfs inspect: %s: truncated: the header promises %zu "
			"data bytes but only %zu follow the %zu-byte header\n",
			path, info.data_len, size - info.header_len,
			info.header_len);
		goto out;
	}

	if (!*first)
		printf("\n");
	*first = 0;
	printf("%s\n  shape   (", path);
	for (int i = 0; i < info.ndim; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)info.shape[i]);
	printf("%s)\n", info.ndim == 1 ? "," : "");
	printf("  dtype   %s", info.descr);
	if (dtype_name(info.descr))
		printf(" (%s%s)", info.descr[0] == '>' ? "big-endian " : "",
		       dtype_name(info.descr));
	printf(", %s order\n", info.fortran_order ? "Fortran" : "C");
	printf("  bytes   %zu data + %zu header = %zu", info.data_len,
	       info.header_len, info.data_len + info.header_len);
	if (size > info.header_len + info.data_len)
		printf(" (+%zu unexpected trailing bytes)",
		       size - info.header_len - info.data_len);
	printf("\n");

	bfs_inspect_compute((const uint8_t *)map + info.header_len, &info, &s);
	if (!s.supported)
		printf("  values  (no statistics for dtype %s)\n", info.descr);
	else if (s.count == 0)
		printf("  values  (empty)\n");
	else if (s.nan == s.count)
		printf("  values  all %llu are NaN\n", (unsigned long long)s.nan);
	else {
		printf("  values  min %.6g  max %.6g  mean %.6g  std %.6g",
		       s.min, s.max, s.mean, s.std);
		if (s.nan)
			printf("  (%llu NaN left out)", (unsigned long long)s.nan);
		printf("\n");
	}
	d = dtype_of(info.descr);
	if (info.ndim == 1 && (d.k == K_INT || d.k == K_UINT) &&
	    label_summary((const uint8_t *)map + info.header_len, info.shape[0], d))
		goto out;
	r = 0;
out:
	fflush(stdout);
	free(map);
	if (fd >= 0)
		close(fd);
	return r;
}

int bfs_inspect_main(int argc, char **argv)
{
	int nfiles = 0, failed = 0, opts_done = 0, first = 1;

	for (int i = 1; i < argc; i++) {
		if (opts_done || argv[i][0] != '-' || argv[i][1] == '\0') {
			nfiles++;
			continue;
		}
		if (!strcmp(argv[i], "--")) {
			opts_done = 1;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return 0;
		} else {
			fprintf(stderr, "batchfs inspect: unknown option '%s' "
				"(try --help)\n", argv[i]);
			return 2;
		}
	}
	if (nfiles == 0) {
		fputs(usage_text, stderr);
		return 2;
	}
	opts_done = 0;
	for (int i = 1; i < argc; i++) {
		if (!opts_done && !strcmp(argv[i], "--")) {
			opts_done = 1;
			continue;
		}
		if (!opts_done && argv[i][0] == '-' && argv[i][1] != '\0')
			continue;
		failed |= inspect_file(argv[i], &first);
	}
	return failed ? 1 : 0;
}
