/*
 * batchdir.c - list a folder of batch files and validate batch headers for
 * the GPU companion (see batchdir.h).  Parsing is engine/base/npy.c's.
 */
#include "tools/gpu/batchdir.h"

#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "tools/gpu/batchfs_gpu.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Our errmsg buffers are handed to bfs_seterr and bfs_npy_parse, which
 * write up to BFS_ERRMSG_MAX bytes. */
_Static_assert(BFS_GPU_ERRMSG_MAX >= BFS_ERRMSG_MAX,
	       "BFS_GPU_ERRMSG_MAX must cover BFS_ERRMSG_MAX");

#define PREFIX "batch-"
#define SUFFIX ".npy"
#define LSUFFIX ".labels.npy"

static int has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n >= m && memcmp(s + n - m, suf, m) == 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);

	if (!p)
		return NULL;
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	return p;
}

void bfs__gpu_dir_free(bfs__gpu_dir *d)
{
	int64_t i;

	if (!d)
		return;
	for (i = 0; i < d->n; i++) {
		if (d->images)
			free(d->images[i]);
		if (d->labels)
			free(d->labels[i]);
	}
	free(d->images);
	free(d->labels);
	memset(d, 0, sizeof(*d));
}

int bfs__gpu_dir_scan(const char *dir, bfs__gpu_dir *d, char *errmsg)
{
	DIR *dp;
	struct dirent *de;
	char **names = NULL, **grown;
	size_t n = 0, cap = 0, i;
	int err = 0;

	memset(d, 0, sizeof(*d));
	dp = opendir(dir);
	if (!dp) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", dir, strerror(errno));
		return err;
	}
	while ((errno = 0, de = readdir(dp))) {
		const char *nm = de->d_name;

		if (strncmp(nm, PREFIX, strlen(PREFIX)) != 0 ||
		    !has_suffix(nm, SUFFIX) || has_suffix(nm, LSUFFIX))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			grown = realloc(names, cap * sizeof(*names));
			if (!grown) {
				err = -ENOMEM;
				goto out;
			}
			names = grown;
		}
		names[n] = strdup(nm);
		if (!names[n]) {
			err = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (errno) {
		err = -errno;
		bfs_seterr(errmsg, "%s: readdir: %s", dir, strerror(errno));
		goto out;
	}
	if (n == 0) {
		err = BFS_E_EMPTY;
		bfs_seterr(errmsg, "%s: no batch-*.npy files", dir);
		goto out;
	}
	qsort(names, n, sizeof(*names), cmp_str);

	d->images = calloc(n, sizeof(char *));
	d->labels = calloc(n, sizeof(char *));
	if (!d->images || !d->labels) {
		err = -ENOMEM;
		goto out;
	}
	d->n = (int64_t)n;
	for (i = 0; i < n; i++) {
		size_t len = strlen(names[i]);
		struct stat st;
		char *lname;

		d->images[i] = join(dir, names[i]);
		/* batch-X.npy -> batch-X.labels.npy */
		lname = malloc(len + strlen(LSUFFIX) + 1);
		if (!d->images[i] || !lname) {
			free(lname);
			err = -ENOMEM;
			goto out;
		}
		memcpy(lname, names[i], len - strlen(SUFFIX));
		strcpy(lname + len - strlen(SUFFIX), LSUFFIX);
		d->labels[i] = join(dir, lname);
		free(lname);
		if (!d->labels[i]) {
			err = -ENOMEM;
			goto out;
		}
		if (stat(d->images[i], &st) != 0) {
			err = -errno;
			bfs_seterr(errmsg, "%s: %s", d->images[i], strerror(errno));
			goto out;
		}
		if (!S_ISREG(st.st_mode)) {
			err = BFS_E_FORMAT;
			bfs_seterr(errmsg, "%s: not a regular file", d->images[i]);
			goto out;
		}
		if ((uint64_t)st.st_size > d->max_images)
			d->max_images = (uint64_t)st.st_size;
		if (stat(d->labels[i], &st) != 0) {
			err = -errno;
			bfs_seterr(errmsg, "%s: %s (every batch needs its labels file)",
				   d->labels[i], strerror(errno));
			goto out;
		}
		if ((uint64_t)st.st_size > d->max_labels)
			d->max_labels = (uint64_t)st.st_size;
	}
out:
	closedir(dp);
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (err) {
		if (err == -ENOMEM)
			bfs_seterr(errmsg, "%s: out of memory", dir);
		bfs__gpu_dir_free(d);
	}
	return err;
}

static int check_common(const void *buf, size_t len, uint64_t file_size,
			bfs_npy_info *info, const char *what, char *errmsg)
{
	int err = bfs_npy_parse(buf, len, info, errmsg);

	if (err)
		return err;
	if (info->fortran_order) {
		bfs_seterr(errmsg, "%s: fortran_order arrays are not served", what);
		return BFS_E_FORMAT;
	}
	if ((uint64_t)info->header_len + info->data_len > file_size) {
		bfs_seterr(errmsg, "%s: file has %llu bytes, header says %llu",
			   what, (unsigned long long)file_size,
			   (unsigned long long)(info->header_len + info->data_len));
		return BFS_E_TRUNCATED;
	}
	if ((uint64_t)info->header_len + info->data_len < file_size) {
		bfs_seterr(errmsg, "%s: %llu bytes after the array data", what,
			   (unsigned long long)(file_size - info->header_len -
						info->data_len));
		return BFS_E_FORMAT;
	}
	return 0;
}

int bfs__gpu_check_images_in(const void *buf, size_t len, uint64_t file_size,
			     int files, bfs__gpu_hdr *h, char *errmsg)
{
	bfs_npy_info info;
	int err, i, nchw;

	err = check_common(buf, len, file_size, &info, "images", errmsg);
	if (err)
		return err;
	if (strcmp(info.descr, "|u1") == 0 || strcmp(info.descr, "<u1") == 0)
		h->dtype = BFS_GPU_UINT8;
	else if (strcmp(info.descr, "<f2") == 0)
		h->dtype = BFS_GPU_FLOAT16;
	else if (strcmp(info.descr, "<f4") == 0)
		h->dtype = BFS_GPU_FLOAT32;
	else {
		bfs_seterr(errmsg, "images: dtype '%s', want '|u1', '<f2' or "
			   "'<f4'", info.descr);
		return BFS_E_FORMAT;
	}
	if (info.ndim != 4) {
		bfs_seterr(errmsg, "images: %d dimensions, want (B,H,W,C) or "
			   "(B,C,H,W)", info.ndim);
		return BFS_E_FORMAT;
	}
#define IS_C(x) ((x) >= 1 && (x) <= BFS_GPU_MAX_CHANNELS)
	if (files == BFS_GPU_FILES_NHWC)
		nchw = 0;
	else if (files == BFS_GPU_FILES_NCHW)
		nchw = 1;
	else
		nchw = !IS_C(info.shape[3]) && IS_C(info.shape[1]);
	if (info.shape[0] < 1 || !IS_C(info.shape[nchw ? 1 : 3])) {
		bfs_seterr(errmsg, "images: shape (%llu,%llu,%llu,%llu): want "
			   "B >= 1 and 1..%d channels (%s)",
			   (unsigned long long)info.shape[0],
			   (unsigned long long)info.shape[1],
			   (unsigned long long)info.shape[2],
			   (unsigned long long)info.shape[3],
			   BFS_GPU_MAX_CHANNELS,
			   files == BFS_GPU_FILES_NHWC ? "the files are NHWC"
			   : files == BFS_GPU_FILES_NCHW ? "the files are NCHW"
			   : "NHWC or NCHW");
		return BFS_E_FORMAT;
	}
#undef IS_C
	for (i = 0; i < 4; i++)
		h->shape[i] = (int64_t)info.shape[i];
	h->nchw = nchw;
	h->n = h->shape[0];
	h->c = h->shape[nchw ? 1 : 3];
	h->h = h->shape[nchw ? 2 : 1];
	h->w = h->shape[nchw ? 3 : 2];
	h->header_len = info.header_len;
	h->data_len = info.data_len;
	return 0;
}

int bfs__gpu_check_images(const void *buf, size_t len, uint64_t file_size,
			  bfs__gpu_hdr *h, char *errmsg)
{
	return bfs__gpu_check_images_in(buf, len, file_size, BFS_GPU_FILES_NHWC,
					h, errmsg);
}

int bfs__gpu_check_labels(const void *buf, size_t len, uint64_t file_size,
			  int64_t batch, bfs__gpu_hdr *h, char *errmsg)
{
	bfs_npy_info info;
	int err;

	err = check_common(buf, len, file_size, &info, "labels", errmsg);
	if (err)
		return err;
	if (strcmp(info.descr, "<i8") != 0) {
		bfs_seterr(errmsg, "labels: dtype '%s', want '<i8'", info.descr);
		return BFS_E_FORMAT;
	}
	if (info.ndim != 1 || (int64_t)info.shape[0] != batch) {
		bfs_seterr(errmsg, "labels: want shape (%lld,), the images' batch",
			   (long long)batch);
		return BFS_E_FORMAT;
	}
	memset(h, 0, sizeof(*h));
	h->shape[0] = batch;
	h->dtype = BFS_GPU_INT64;
	h->header_len = info.header_len;
	h->data_len = info.data_len;
	return 0;
}

int bfs__gpu_read_full(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, (char *)buf + done, len - done,
				  (off_t)done);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return BFS_E_TRUNCATED;
		done += (size_t)r;
	}
	return 0;
}
