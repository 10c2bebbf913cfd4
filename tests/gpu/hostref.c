/*
 * hostref.c - build/tests/gpu/hostref: what libbatchfs_gpu would deliver for
 * each batch of a folder, computed on the CPU with the library's own
 * CUDA-free code: the folder scan and header checks (batchdir.c), the
 * delivery rules (bfs__gpu_plan_batch) and the host reference of the
 * normalize kernel (bfs__gpu_normalize_host, which the device test holds the
 * kernel to).  tests/gpu/check_cpu.py and test_gpu_mount.sh compare its
 * output with np.load and with GpuLoader(device="cpu").
 *
 *   hostref [--normalize] [--nchw|--nhwc] [--files-nhwc|--files-nchw]
 *           [--mean R,G,B --std R,G,B] DIR OUT
 *
 * Writes OUT/batch-NNNNNN.npy (the images as delivered) and
 * OUT/batch-NNNNNN.labels.npy, and prints one line per batch:
 *   batch-000000.npy (4,3,32,32) float16 NCHW -> (4,3,32,32) float16 NCHW
 * On a bad folder or file prints "hostref: TEXT: DETAIL" and exits 1.
 */
#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "tools/gpu/batchdir.h"
#include "tools/gpu/batchfs_gpu.h"
#include "tools/gpu/convert.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dtype_name(int d)
{
	return d == BFS_GPU_UINT8 ? "uint8" : d == BFS_GPU_FLOAT16 ? "float16"
	       : d == BFS_GPU_FLOAT32 ? "float32" : "int64";
}

static const char *descr(int d)
{
	return d == BFS_GPU_UINT8 ? "|u1" : d == BFS_GPU_FLOAT16 ? "<f2"
	       : d == BFS_GPU_FLOAT32 ? "<f4" : "<i8";
}

/* Read the whole file at path into a fresh buffer (*buf, *len). */
static int slurp(const char *path, unsigned char **buf, size_t *len,
		 char *errmsg)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC), err;

	*buf = NULL;
	if (fd < 0 || fstat(fd, &st) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return err;
	}
	*len = (size_t)st.st_size;
	*buf = malloc(*len ? *len : 1);
	if (!*buf) {
		close(fd);
		bfs_seterr(errmsg, "%s: out of memory", path);
		return -ENOMEM;
	}
	err = bfs__gpu_read_full(fd, *buf, *len);
	close(fd);
	if (err)
		bfs_seterr(errmsg, "%s: read: %s", path, bfs_strerror(err));
	return err;
}

static int write_npy(const char *path, int dtype, const int64_t *shape,
		     int ndim, const void *data, size_t len, char *errmsg)
{
	char hdr[256];
	uint64_t s[4];
	int i, n;
	FILE *f;

	for (i = 0; i < ndim; i++)
		s[i] = (uint64_t)shape[i];
	n = bfs_npy_header(hdr, sizeof(hdr), descr(dtype), s, ndim);
	f = fopen(path, "wb");
	if (n <= 0 || !f || fwrite(hdr, 1, (size_t)n, f) != (size_t)n ||
	    fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		bfs_seterr(errmsg, "%s: cannot write", path);
		return -EIO;
	}
	return 0;
}

static int parse_floats(const char *s, float *v)
{
	int n = 0;
	char *end;

	while (n < BFS_GPU_MAX_CHANNELS) {
		v[n++] = strtof(s, &end);
		if (end == s)
			return -1;
		if (*end == '\0')
			return 0;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
	return -1;
}

/* One batch: check, plan, convert, write.  Names the file in errmsg. */
static int one(const bfs__gpu_dir *d, int64_t i, int flags, const float *mean,
	       const float *std, const char *out, char *errmsg)
{
	unsigned char *img = NULL, *lbl = NULL;
	size_t ilen = 0, llen = 0;
	bfs__gpu_hdr ih, lh;
	bfs__gpu_plan p;
	char msg[BFS_GPU_ERRMSG_MAX], path[4096];
	const char *name = strrchr(d->images[i], '/') + 1;
	const char *bad = d->images[i];
	void *dst = NULL;
	int err;

	err = slurp(d->images[i], &img, &ilen, errmsg);
	if (err)
		goto out;
	err = bfs__gpu_check_images_in(img, ilen, ilen, flags &
				       (BFS_GPU_FILES_NHWC | BFS_GPU_FILES_NCHW),
				       &ih, msg);
	if (err)
		goto named;
	err = slurp(d->labels[i], &lbl, &llen, errmsg);
	if (err)
		goto out;
	err = bfs__gpu_check_labels(lbl, llen, llen, ih.n, &lh, msg);
	if (err) {
		bad = d->labels[i];
		goto named;
	}
	bfs__gpu_plan_batch(&ih, flags, &p);
	if (p.normalize) {
		dst = malloc(p.bytes ? p.bytes : 1);
		if (!dst) {
			err = -ENOMEM;
			bfs_seterr(errmsg, "out of memory");
			goto out;
		}
		err = bfs__gpu_normalize_host(img + ih.header_len, ih.dtype, dst,
					      ih.n, ih.h, ih.w, ih.c, mean, std,
					      p.layout);
		if (err) {
			bfs_seterr(errmsg, "%s: normalize", name);
			goto out;
		}
	}
	snprintf(path, sizeof(path), "%s/%s", out, name);
	err = write_npy(path, p.dtype, p.shape, 4,
			p.normalize ? dst : img + ih.header_len, p.bytes,
			errmsg);
	if (err)
		goto out;
	snprintf(path, sizeof(path), "%s/%s", out,
		 strrchr(d->labels[i], '/') + 1);
	err = write_npy(path, BFS_GPU_INT64, lh.shape, 1, lbl + lh.header_len,
			lh.data_len, errmsg);
	if (err)
		goto out;
	printf("%s (%lld,%lld,%lld,%lld) %s %s -> (%lld,%lld,%lld,%lld) %s %s\n",
	       name, (long long)ih.shape[0], (long long)ih.shape[1],
	       (long long)ih.shape[2], (long long)ih.shape[3],
	       dtype_name(ih.dtype), ih.nchw ? "NCHW" : "NHWC",
	       (long long)p.shape[0], (long long)p.shape[1],
	       (long long)p.shape[2], (long long)p.shape[3],
	       dtype_name(p.dtype), p.nchw ? "NCHW" : "NHWC");
	goto out;
named:
	/* as the loader does: the checker's "images: ..." after the path */
	bfs_seterr(errmsg, "%s: %s", bad, msg);
out:
	free(dst);
	free(img);
	free(lbl);
	return err;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *out = NULL;
	float mean[BFS_GPU_MAX_CHANNELS] = {0}, std[BFS_GPU_MAX_CHANNELS];
	char errmsg[BFS_GPU_ERRMSG_MAX] = "";
	bfs__gpu_dir d;
	int flags = 0, i, err = 0;
	int64_t k;

	for (i = 0; i < BFS_GPU_MAX_CHANNELS; i++)
		std[i] = 1.0f;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--normalize"))
			flags |= BFS_GPU_NORMALIZE;
		else if (!strcmp(a, "--nchw"))
			flags |= BFS_GPU_NCHW;
		else if (!strcmp(a, "--nhwc"))
			flags |= BFS_GPU_NHWC;
		else if (!strcmp(a, "--files-nhwc"))
			flags |= BFS_GPU_FILES_NHWC;
		else if (!strcmp(a, "--files-nchw"))
			flags |= BFS_GPU_FILES_NCHW;
		else if ((!strcmp(a, "--mean") || !strcmp(a, "--std")) &&
			 i + 1 < argc) {
			if (parse_floats(argv[++i], a[2] == 'm' ? mean : std))
				goto usage;
		} else if (a[0] != '-' && !dir)
			dir = a;
		else if (a[0] != '-' && !out)
			out = a;
		else
			goto usage;
	}
	if (!dir || !out)
		goto usage;
	/* the loader's rules for flags (check_opts in loader.c) */
	if (((flags & (BFS_GPU_NCHW | BFS_GPU_NHWC)) &&
	     !(flags & BFS_GPU_NORMALIZE)) ||
	    (flags & BFS_GPU_NCHW && flags & BFS_GPU_NHWC) ||
	    (flags & BFS_GPU_FILES_NHWC && flags & BFS_GPU_FILES_NCHW))
		goto usage;
	for (i = 0; i < BFS_GPU_MAX_CHANNELS; i++)
		if (std[i] == 0.0f)
			goto usage;

	err = bfs__gpu_dir_scan(dir, &d, errmsg);
	for (k = 0; !err && k < d.n; k++)
		err = one(&d, k, flags, mean, std, out, errmsg);
	bfs__gpu_dir_free(&d);
	if (err) {
		fprintf(stderr, "hostref: %s: %s\n", bfs_gpu_strerror(err),
			errmsg);
		return 1;
	}
	return 0;
usage:
	fprintf(stderr, "usage: hostref [--normalize] [--nchw|--nhwc] "
		"[--files-nhwc|--files-nchw] [--mean R,G,B --std R,G,B] "
		"DIR OUT\n");
	return 2;
}
