/*
 * batchdir.h - internal to tools/gpu: list a folder of batch files and check
 * one batch's NPY headers.  No CUDA here, so tests/gpu/test_batchdir.c runs
 * these in CI (and under ASan).  Prefix bfs__gpu_: not part of the ABI.
 *
 * Pure functions over caller-owned memory, except bfs__gpu_dir_scan, which
 * allocates the lists it returns (freed by bfs__gpu_dir_free).  Any thread.
 */
#ifndef BFS_GPU_BATCHDIR_H
#define BFS_GPU_BATCHDIR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	int64_t n;            /* number of batches */
	char **images;        /* n paths "dir/batch-NNNNNN.npy", sorted */
	char **labels;        /* n paths "dir/batch-NNNNNN.labels.npy" */
	uint64_t max_images;  /* largest images file size, bytes */
	uint64_t max_labels;  /* largest labels file size, bytes */
} bfs__gpu_dir;

/*
 * List `dir`: every regular file named batch-*.npy that is not
 * *.labels.npy, sorted by name, each with its labels file, both stat'ed.
 * On success fills *d (free with bfs__gpu_dir_free) and returns 0.
 * Errors (d is left empty): -errno of opendir (-ENOENT, -ENOTDIR, -EACCES),
 * BFS_E_EMPTY (no batch file), -ENOENT (a labels file is missing),
 * -ENOMEM; a one-line reason in errmsg (BFS_ERRMSG_MAX bytes, may be NULL).
 */
int bfs__gpu_dir_scan(const char *dir, bfs__gpu_dir *d, char *errmsg);

/* Free what bfs__gpu_dir_scan allocated and zero *d.  Accepts NULL and a
 * zeroed struct. */
void bfs__gpu_dir_free(bfs__gpu_dir *d);

typedef struct {
	int64_t shape[4];     /* images: as stored, (B,H,W,C) or (B,C,H,W);
	                         labels: (B,0,0,0) */
	int dtype;            /* bfs_gpu_dtype */
	int nchw;             /* images: 1 when shape is (B,C,H,W) */
	int64_t n, c, h, w;   /* images: batch, channels, height, width */
	size_t header_len;    /* data start in the file */
	size_t data_len;      /* data bytes */
} bfs__gpu_hdr;

/*
 * Check the images file whose first `len` bytes are at buf and whose size is
 * file_size: NPY (any version), C order, 4 dimensions, dtype '|u1', '<f2' or
 * '<f4', B >= 1, and header_len + data_len == file_size.  `files` is
 * BFS_GPU_FILES_NHWC (shape (B,H,W,C)), BFS_GPU_FILES_NCHW ((B,C,H,W)) or 0:
 * NHWC when the last dimension is 1..BFS_GPU_MAX_CHANNELS, else NCHW when
 * the second one is (the rule of batchfs_gpu.h).  C must be
 * 1..BFS_GPU_MAX_CHANNELS.  Fills *h.
 * Errors: BFS_E_FORMAT (with the reason), BFS_E_TRUNCATED (file shorter
 * than its header says).
 */
int bfs__gpu_check_images_in(const void *buf, size_t len, uint64_t file_size,
			     int files, bfs__gpu_hdr *h, char *errmsg);

/* bfs__gpu_check_images_in with files = BFS_GPU_FILES_NHWC. */
int bfs__gpu_check_images(const void *buf, size_t len, uint64_t file_size,
			  bfs__gpu_hdr *h, char *errmsg);

/* The same for a labels file: '<i8', shape (batch,) exactly, size exact. */
int bfs__gpu_check_labels(const void *buf, size_t len, uint64_t file_size,
			  int64_t batch, bfs__gpu_hdr *h, char *errmsg);

/* pread() `len` bytes at offset 0 of fd into buf, looping over short reads
 * and EINTR.  Returns 0, BFS_E_TRUNCATED if the file ends first, or -errno. */
int bfs__gpu_read_full(int fd, void *buf, size_t len);

#endif
