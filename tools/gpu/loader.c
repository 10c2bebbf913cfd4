/*
 * loader.c - the GPU batch loader of batchfs_gpu.h: a ring of pinned host
 * buffers and device buffers, reader threads that fill it, and the
 * consumer-side next/release.
 *
 * DESIGN.  Batches are numbered by a sequence q = 0, 1, 2, ... across
 * passes; batch q uses ring slot q % depth and is read by reader thread
 * q % readers, so the readers never contend for a batch.  For each q the
 * reader
 *   1. waits (host, condition variable) until slot s is free for q, i.e.
 *      the consumer released batch q - depth (slot->free_for == q);
 *   2. waits (host, cudaEventSynchronize on slot->ready) until the previous
 *      upload out of the slot's pinned memory has finished: only the reader
 *      thread ever blocks on the GPU;
 *   3. pread()s the images and labels files straight into the slot's pinned
 *      buffer (or, with BFS_GPU_IO_MMAP, maps and registers the images file);
 *   4. on its own non-blocking stream: waits (GPU side) on slot->released,
 *      the event the consumer recorded on its stream at release, copies,
 *      normalizes if asked, and records slot->ready;
 *   5. publishes the batch (slot->filled == q) and signals the consumer.
 * bfs_gpu_next waits (host) only for step 5 of its batch, then makes the
 * consumer stream wait on slot->ready.  bfs_gpu_release records
 * slot->released on the consumer stream and sets slot->free_for = q + depth.
 *
 * Locking: ld->lock guards the fields marked so in struct slot and
 * ld->stop; ld->cond is broadcast on every change of them.  The reader of
 * slot s between steps 1 and 5 owns the slot's pinned memory, its mapping
 * and its `ready`/`copy_start` events; the consumer owns `released` and the
 * fields marked consumer.
 */
#include "tools/gpu/batchfs_gpu.h"

#include "engine/base/error.h"
#include "tools/gpu/batchdir.h"
#include "tools/gpu/convert.h"

#include <cuda_runtime_api.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

struct slot {
	unsigned char *pinned;  /* cudaHostAlloc: images file, labels file */
	void *dev_raw;          /* images as uploaded */
	float *dev_norm;        /* NORMALIZE output; NULL otherwise */
	int64_t *dev_labels;
	cudaEvent_t ready;      /* recorded by the reader after the upload */
	cudaEvent_t copy_start; /* with TIMING; reader */
	cudaEvent_t copy_end;   /* with TIMING; reader */
	cudaEvent_t released;   /* recorded by the consumer at release */

	void *map;              /* MMAP: registered mapping in use; reader */
	size_t map_len;         /* reader */

	/* protected by ld->lock */
	int64_t free_for;       /* the reader may fill this sequence */
	int64_t filled;         /* sequence whose upload is queued, or -1 */
	int released_once;      /* `released` has been recorded at least once */
	int held;               /* handed out by next, not yet released */
	int err;                /* reader error for sequence `filled` */
	bfs_gpu_batch batch;    /* description of sequence `filled` */
	char errmsg[BFS_GPU_ERRMSG_MAX];
};

struct reader {
	bfs_gpu_loader *ld;
	int id;
	pthread_t thread;
	int started;
	cudaStream_t stream;    /* non-blocking; this reader's uploads */
	char errmsg[BFS_GPU_ERRMSG_MAX];
};

struct bfs_gpu_loader {
	bfs_gpu_opts o;
	bfs__gpu_dir dir;
	int64_t total;          /* sequences to deliver, -1 forever */
	size_t labels_off;      /* labels file offset in a pinned slot */
	size_t pinned_len;
	size_t raw_len;         /* device raw images capacity */
	cudaStream_t consumer;  /* o.stream */
	int can_ro_register;    /* device supports cudaHostRegisterReadOnly */

	struct slot *slots;     /* o.depth */
	struct reader *readers; /* o.readers */

	pthread_mutex_t lock;
	pthread_cond_t cond;
	int sync_ready;         /* lock and cond initialised */
	int stop;               /* protected by lock */

	/* consumer */
	int64_t next_seq;
	int final_err;
	char errmsg[BFS_GPU_ERRMSG_MAX];
};

/* ---- errors ---------------------------------------------------------- */

static int cuda_code(cudaError_t e)
{
	switch (e) {
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		return BFS_GPU_E_NODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	default:
		return BFS_GPU_E_CUDA;
	}
}

/* Turn a failed CUDA call into our code, with "what: CUDA's text". */
static int cuda_fail(cudaError_t e, char *errmsg, const char *what)
{
	bfs_seterr(errmsg, "%s: %s (%s)", what, cudaGetErrorString(e),
		   cudaGetErrorName(e));
	return cuda_code(e);
}

#define CU(call, errmsg)                                                   \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		if (e_ != cudaSuccess) {                                   \
			err = cuda_fail(e_, errmsg, #call);                \
			goto out;                                          \
		}                                                          \
	} while (0)

void bfs_gpu_opts_init(bfs_gpu_opts *o)
{
	int i;

	memset(o, 0, sizeof(*o));
	o->depth = 3;
	o->readers = 0;  /* min(depth, 4) */
	o->passes = 1;
	o->io = BFS_GPU_IO_PREAD;
	for (i = 0; i < BFS_GPU_MAX_CHANNELS; i++)
		o->std[i] = 1.0f;
}

int bfs_gpu_device_count(int *n, char *errmsg)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (n)
		*n = e == cudaSuccess ? count : 0;
	if (e != cudaSuccess) {
		bfs_seterr(errmsg, "%s", cudaGetErrorString(e));
		return BFS_GPU_E_NODEV;
	}
	if (count == 0) {
		bfs_seterr(errmsg, "the CUDA runtime sees no device");
		return BFS_GPU_E_NODEV;
	}
	return 0;
}

int bfs_gpu_stream_wait(void *stream, void *event)
{
	cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream,
					    (cudaEvent_t)event, 0);

	return e == cudaSuccess ? 0 : cuda_code(e);
}

/* Switch the calling thread to `dev` and remember its device in *prev. */
static int enter_device(int dev, int *prev)
{
	cudaError_t e = cudaGetDevice(prev);

	if (e != cudaSuccess)
		return cuda_code(e);
	if (*prev != dev && (e = cudaSetDevice(dev)) != cudaSuccess)
		return cuda_code(e);
	return 0;
}

static void leave_device(int dev, int prev)
{
	if (prev != dev)
		cudaSetDevice(prev);
}

/* ---- reader ---------------------------------------------------------- */

static void unmap_slot(struct slot *s)
{
	if (!s->map)
		return;
	cudaHostUnregister(s->map);
	munmap(s->map, s->map_len);
	s->map = NULL;
	s->map_len = 0;
}

/* Read batch file `idx` into slot `s` (steps 3 and 4); fills *b. */
static int fill_slot(struct reader *r, struct slot *s, int64_t seq,
		     int64_t idx, bfs_gpu_batch *b, int first_use)
{
	bfs_gpu_loader *ld = r->ld;
	char *errmsg = r->errmsg;
	const char *ipath = ld->dir.images[idx], *lpath = ld->dir.labels[idx];
	const unsigned char *img;
	bfs__gpu_hdr ih, lh;
	bfs__gpu_plan plan;
	struct stat st;
	int fd = -1, err = 0;
	uint64_t isize;

	/* Step 2: the previous upload out of this slot has finished. */
	if (!first_use)
		CU(cudaEventSynchronize(s->ready), errmsg);
	unmap_slot(s);

	fd = open(ipath, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", ipath, strerror(errno));
		goto out;
	}
	isize = (uint64_t)st.st_size;
	if (ld->o.io == BFS_GPU_IO_MMAP) {
		unsigned int flags = cudaHostRegisterDefault;

		if (isize == 0) {
			err = BFS_E_TRUNCATED;
			bfs_seterr(errmsg, "%s: empty file", ipath);
			goto out;
		}
		/* A batch the mount failed (a bad sample) reads as EIO, but a
		 * page fault in a mapping of it is SIGBUS, which would end the
		 * process in cudaHostRegister or the copy.  Read its first
		 * bytes first: a batchfs read returns only once the batch is
		 * whole, so past this the mapping's pages read as they did. */
		{
			unsigned char probe[4096];
			ssize_t n;

			do
				n = pread(fd, probe, sizeof(probe), 0);
			while (n < 0 && errno == EINTR);
			if (n < 0) {
				err = -errno;
				bfs_seterr(errmsg, "%s: read: %s%s", ipath, strerror(errno),
					   errno == EIO ? " (a batchfs mount fails a batch that holds a bad sample: its .index.json and stats.json say which)" : "");
				goto out;
			}
		}
		if (ld->can_ro_register) {
			s->map = mmap(NULL, isize, PROT_READ, MAP_SHARED, fd, 0);
			flags = cudaHostRegisterReadOnly;
		} else {
			s->map = mmap(NULL, isize, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE, fd, 0);
		}
		if (s->map == MAP_FAILED) {
			s->map = NULL;
			err = -errno;
			bfs_seterr(errmsg, "%s: mmap: %s", ipath, strerror(errno));
			goto out;
		}
		s->map_len = isize;
		madvise(s->map, isize, MADV_SEQUENTIAL | MADV_WILLNEED);
		{
			cudaError_t e = cudaHostRegister(s->map, isize, flags);

			if (e != cudaSuccess && flags == cudaHostRegisterReadOnly) {
				/* Some drivers refuse read-only registration of
				 * file pages: fall back to a private writable
				 * mapping (its pages are copied when pinned). */
				(void)cudaGetLastError();
				munmap(s->map, isize);
				s->map = mmap(NULL, isize, PROT_READ | PROT_WRITE,
					      MAP_PRIVATE, fd, 0);
				if (s->map == MAP_FAILED) {
					s->map = NULL;
					err = -errno;
					bfs_seterr(errmsg, "%s: mmap: %s", ipath,
						   strerror(errno));
					goto out;
				}
				e = cudaHostRegister(s->map, isize,
						     cudaHostRegisterDefault);
			}
			if (e != cudaSuccess) {
				munmap(s->map, isize);
				s->map = NULL;
				err = cuda_fail(e, errmsg, "cudaHostRegister");
				goto out;
			}
		}
		img = s->map;
	} else {
		if (isize > ld->dir.max_images) {
			err = -EFBIG;
			bfs_seterr(errmsg, "%s: grew to %llu bytes since open",
				   ipath, (unsigned long long)isize);
			goto out;
		}
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		err = bfs__gpu_read_full(fd, s->pinned, isize);
		if (err) {
			bfs_seterr(errmsg, "%s: read: %s", ipath,
				   bfs_strerror(err));
			goto out;
		}
		img = s->pinned;
	}
	close(fd);
	fd = -1;
	err = bfs__gpu_check_images_in(img, isize, isize, ld->o.flags &
				       (BFS_GPU_FILES_NHWC | BFS_GPU_FILES_NCHW),
				       &ih, errmsg);
	if (err)
		goto prefix;
	if (ih.data_len > ld->raw_len) {
		err = -EFBIG;
		bfs_seterr(errmsg, "%s: %zu data bytes, slots hold %zu", ipath,
			   ih.data_len, ld->raw_len);
		goto out;
	}

	fd = open(lpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", lpath, strerror(errno));
		goto out;
	}
	if ((uint64_t)st.st_size > ld->dir.max_labels) {
		err = -EFBIG;
		bfs_seterr(errmsg, "%s: grew to %llu bytes since open", lpath,
			   (unsigned long long)st.st_size);
		goto out;
	}
	err = bfs__gpu_read_full(fd, s->pinned + ld->labels_off,
				 (size_t)st.st_size);
	if (err) {
		bfs_seterr(errmsg, "%s: read: %s", lpath, bfs_strerror(err));
		goto out;
	}
	close(fd);
	fd = -1;
	err = bfs__gpu_check_labels(s->pinned + ld->labels_off,
				    (size_t)st.st_size, (uint64_t)st.st_size,
				    ih.shape[0], &lh, errmsg);
	if (err) {
		ipath = lpath;
		goto prefix;
	}

	/* Step 4, all on this reader's stream. */
	if (!first_use)
		CU(cudaStreamWaitEvent(r->stream, s->released, 0), errmsg);
	if (s->copy_start)
		CU(cudaEventRecord(s->copy_start, r->stream), errmsg);
	CU(cudaMemcpyAsync(s->dev_raw, img + ih.header_len, ih.data_len,
			   cudaMemcpyHostToDevice, r->stream), errmsg);
	CU(cudaMemcpyAsync(s->dev_labels,
			   s->pinned + ld->labels_off + lh.header_len,
			   lh.data_len, cudaMemcpyHostToDevice, r->stream),
	   errmsg);
	if (s->copy_end)
		CU(cudaEventRecord(s->copy_end, r->stream), errmsg);

	memset(b, 0, sizeof(*b));
	b->seq = seq;
	b->index = idx;
	b->labels = s->dev_labels;
	b->labels_len = ih.shape[0];
	b->labels_bytes = lh.data_len;
	b->upload_bytes = ih.data_len;
	b->ndim = 4;
	b->path = ipath;
	b->slot = (int32_t)(s - ld->slots);
	b->ready = s->ready;
	b->copy_start = s->copy_start;
	b->copy_end = s->copy_end;
	bfs__gpu_plan_batch(&ih, ld->o.flags, &plan);
	memcpy(b->shape, plan.shape, sizeof(b->shape));
	b->dtype = plan.dtype;
	b->nchw = plan.nchw;
	b->images_bytes = plan.bytes;
	if (plan.normalize) {
		err = bfs_gpu_normalize(s->dev_raw, ih.dtype, s->dev_norm,
					ih.n, ih.h, ih.w, ih.c, ld->o.mean,
					ld->o.std, plan.layout, r->stream);
		if (err) {
			bfs_seterr(errmsg, "%s: normalize kernel: %s", ipath,
				   bfs_gpu_strerror(err));
			goto out;
		}
		b->images = s->dev_norm;
	} else {
		b->images = s->dev_raw;
	}
	CU(cudaEventRecord(s->ready, r->stream), errmsg);
	return 0;

prefix:
	/* errmsg holds "images: ..." from the checker; name the file. */
	{
		char tmp[BFS_GPU_ERRMSG_MAX];

		snprintf(tmp, sizeof(tmp), "%s", errmsg);
		bfs_seterr(errmsg, "%s: %s", ipath, tmp);
	}
out:
	if (fd >= 0)
		close(fd);
	return err;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	bfs_gpu_loader *ld = r->ld;
	int64_t n = ld->dir.n, q;
	int err = 0;
	cudaError_t e;

	e = cudaSetDevice(ld->o.device);
	for (q = r->id; ld->total < 0 || q < ld->total;
	     q += ld->o.readers) {
		struct slot *s = &ld->slots[q % ld->o.depth];
		bfs_gpu_batch b;
		int first, stop;

		pthread_mutex_lock(&ld->lock);
		while (!ld->stop && s->free_for != q)
			pthread_cond_wait(&ld->cond, &ld->lock);
		first = !s->released_once;
		stop = ld->stop;
		pthread_mutex_unlock(&ld->lock);
		if (stop)
			break;

		if (e != cudaSuccess)
			err = cuda_fail(e, r->errmsg, "cudaSetDevice");
		else
			err = fill_slot(r, s, q, q % n, &b, first);

		pthread_mutex_lock(&ld->lock);
		s->filled = q;
		s->err = err;
		if (err)
			memcpy(s->errmsg, r->errmsg, sizeof(s->errmsg));
		else
			s->batch = b;
		pthread_cond_broadcast(&ld->cond);
		pthread_mutex_unlock(&ld->lock);
		if (err)
			break;
	}
	return NULL;
}

/* ---- consumer -------------------------------------------------------- */

int64_t bfs_gpu_count(const bfs_gpu_loader *ld)
{
	return ld ? ld->dir.n : 0;
}

int bfs_gpu_max_bytes(const bfs_gpu_loader *ld, uint64_t *images,
		      uint64_t *labels)
{
	if (!ld)
		return -EINVAL;
	if (images)
		*images = ld->dir.max_images;
	if (labels)
		*labels = ld->dir.max_labels;
	return 0;
}

const char *bfs_gpu_errmsg(const bfs_gpu_loader *ld)
{
	return ld ? ld->errmsg : "";
}

void bfs_gpu_close(bfs_gpu_loader *ld)
{
	int i, prev = 0, entered;

	if (!ld)
		return;
	if (ld->sync_ready) {
		pthread_mutex_lock(&ld->lock);
		ld->stop = 1;
		pthread_cond_broadcast(&ld->cond);
		pthread_mutex_unlock(&ld->lock);
	}
	for (i = 0; ld->readers && i < ld->o.readers; i++)
		if (ld->readers[i].started)
			pthread_join(ld->readers[i].thread, NULL);

	entered = enter_device(ld->o.device, &prev) == 0;
	if (ld->slots)  /* consumer work on held batches must finish first */
		cudaStreamSynchronize(ld->consumer);
	for (i = 0; ld->readers && i < ld->o.readers; i++) {
		if (ld->readers[i].stream) {
			cudaStreamSynchronize(ld->readers[i].stream);
			cudaStreamDestroy(ld->readers[i].stream);
		}
	}
	for (i = 0; ld->slots && i < ld->o.depth; i++) {
		struct slot *s = &ld->slots[i];

		unmap_slot(s);
		if (s->pinned)
			cudaFreeHost(s->pinned);
		if (s->dev_raw)
			cudaFree(s->dev_raw);
		if (s->dev_norm)
			cudaFree(s->dev_norm);
		if (s->dev_labels)
			cudaFree(s->dev_labels);
		if (s->ready)
			cudaEventDestroy(s->ready);
		if (s->copy_start)
			cudaEventDestroy(s->copy_start);
		if (s->copy_end)
			cudaEventDestroy(s->copy_end);
		if (s->released)
			cudaEventDestroy(s->released);
	}
	if (entered)
		leave_device(ld->o.device, prev);
	if (ld->sync_ready) {
		pthread_cond_destroy(&ld->cond);
		pthread_mutex_destroy(&ld->lock);
	}
	free(ld->slots);
	free(ld->readers);
	bfs__gpu_dir_free(&ld->dir);
	free(ld);
}

static int check_opts(const bfs_gpu_opts *o, char *errmsg)
{
	int i;

	if (o->depth < 1 || o->depth > BFS_GPU_MAX_DEPTH) {
		bfs_seterr(errmsg, "depth %d: want 1..%d", o->depth,
			   BFS_GPU_MAX_DEPTH);
		return -EINVAL;
	}
	if (o->readers < 1 || o->readers > BFS_GPU_MAX_READERS ||
	    o->readers > o->depth) {
		bfs_seterr(errmsg, "readers %d: want 1..min(depth, %d)",
			   o->readers, BFS_GPU_MAX_READERS);
		return -EINVAL;
	}
	if (o->passes < -1 || o->passes == 0) {
		bfs_seterr(errmsg, "passes %d: want >= 1 or -1", o->passes);
		return -EINVAL;
	}
	if (o->io != BFS_GPU_IO_PREAD && o->io != BFS_GPU_IO_MMAP) {
		bfs_seterr(errmsg, "io %d: want pread (0) or mmap (1)", o->io);
		return -EINVAL;
	}
	if (o->flags & ~(BFS_GPU_NORMALIZE | BFS_GPU_NCHW | BFS_GPU_TIMING |
			 BFS_GPU_NHWC | BFS_GPU_FILES_NHWC |
			 BFS_GPU_FILES_NCHW)) {
		bfs_seterr(errmsg, "unknown flags 0x%x", o->flags);
		return -EINVAL;
	}
	if ((o->flags & (BFS_GPU_NCHW | BFS_GPU_NHWC)) &&
	    !(o->flags & BFS_GPU_NORMALIZE)) {
		bfs_seterr(errmsg, "%s needs NORMALIZE (without it batches come "
			   "in the files' layout)",
			   (o->flags & BFS_GPU_NCHW) ? "NCHW" : "NHWC");
		return -EINVAL;
	}
	if ((o->flags & BFS_GPU_NCHW) && (o->flags & BFS_GPU_NHWC)) {
		bfs_seterr(errmsg, "NCHW and NHWC: give one output layout");
		return -EINVAL;
	}
	if ((o->flags & BFS_GPU_FILES_NHWC) && (o->flags & BFS_GPU_FILES_NCHW)) {
		bfs_seterr(errmsg, "FILES_NHWC and FILES_NCHW: give one file "
			   "layout");
		return -EINVAL;
	}
	for (i = 0; (o->flags & BFS_GPU_NORMALIZE) &&
		    i < BFS_GPU_MAX_CHANNELS; i++) {
		if (o->std[i] == 0.0f) {
			bfs_seterr(errmsg, "std[%d] is 0", i);
			return -EINVAL;
		}
	}
	return 0;
}

int bfs_gpu_open(const char *dir, const bfs_gpu_opts *o,
		 bfs_gpu_loader **out, char *errmsg)
{
	bfs_gpu_loader *ld = NULL;
	int err = 0, i, ndev = 0, prev = 0, entered = 0;
	unsigned int evflags;

	if (out)
		*out = NULL;
	if (!dir || !out) {
		bfs_seterr(errmsg, "NULL folder or output");
		return -EINVAL;
	}
	ld = calloc(1, sizeof(*ld));
	if (!ld) {
		bfs_seterr(errmsg, "out of memory");
		return -ENOMEM;
	}
	if (o)
		ld->o = *o;
	else
		bfs_gpu_opts_init(&ld->o);
	if (ld->o.readers == 0)
		ld->o.readers = ld->o.depth < 4 ? ld->o.depth : 4;
	err = check_opts(&ld->o, errmsg);
	if (err)
		goto out;

	/* The folder first: its errors do not need a GPU. */
	err = bfs__gpu_dir_scan(dir, &ld->dir, errmsg);
	if (err)
		goto out;
	ld->total = ld->o.passes < 0 ? -1 : ld->dir.n * ld->o.passes;
	ld->labels_off = ALIGN_UP((size_t)ld->dir.max_images, 4096);
	ld->pinned_len = ld->labels_off +
			 ALIGN_UP((size_t)ld->dir.max_labels, 4096);
	ld->raw_len = ALIGN_UP((size_t)ld->dir.max_images, 256);
	ld->consumer = (cudaStream_t)ld->o.stream;

	err = bfs_gpu_device_count(&ndev, errmsg);
	if (err)
		goto out;
	if (ld->o.device < 0 || ld->o.device >= ndev) {
		bfs_seterr(errmsg, "device %d: this machine has %d CUDA "
			   "device(s)", ld->o.device, ndev);
		err = BFS_GPU_E_NODEV;
		goto out;
	}
	err = enter_device(ld->o.device, &prev);
	if (err) {
		bfs_seterr(errmsg, "cannot select device %d", ld->o.device);
		goto out;
	}
	entered = 1;
	if (ld->o.io == BFS_GPU_IO_MMAP) {
		int v = 0;

		if (cudaDeviceGetAttribute(&v,
			cudaDevAttrHostRegisterReadOnlySupported,
			ld->o.device) == cudaSuccess)
			ld->can_ro_register = v;
	}

	ld->slots = calloc((size_t)ld->o.depth, sizeof(*ld->slots));
	ld->readers = calloc((size_t)ld->o.readers, sizeof(*ld->readers));
	if (!ld->slots || !ld->readers) {
		err = -ENOMEM;
		bfs_seterr(errmsg, "out of memory");
		goto out;
	}
	evflags = (ld->o.flags & BFS_GPU_TIMING) ? cudaEventDefault
						 : cudaEventDisableTiming;
	if (ld->o.io == BFS_GPU_IO_MMAP)  /* pinned memory: labels only */
		ld->labels_off = 0;
	for (i = 0; i < ld->o.depth; i++) {
		struct slot *s = &ld->slots[i];

		s->free_for = i;
		s->filled = -1;
		CU(cudaHostAlloc((void **)&s->pinned,
				 ld->o.io == BFS_GPU_IO_MMAP
					 ? ALIGN_UP((size_t)ld->dir.max_labels, 4096)
					 : ld->pinned_len,
				 cudaHostAllocDefault), errmsg);
		CU(cudaMalloc(&s->dev_raw, ld->raw_len), errmsg);
		CU(cudaMalloc((void **)&s->dev_labels,
			      ALIGN_UP((size_t)ld->dir.max_labels, 256)),
		   errmsg);
		if (ld->o.flags & BFS_GPU_NORMALIZE)
			CU(cudaMalloc((void **)&s->dev_norm, 4 * ld->raw_len),
			   errmsg);
		CU(cudaEventCreateWithFlags(&s->ready, evflags), errmsg);
		CU(cudaEventCreateWithFlags(&s->released,
					    cudaEventDisableTiming), errmsg);
		if (ld->o.flags & BFS_GPU_TIMING) {
			CU(cudaEventCreate(&s->copy_start), errmsg);
			CU(cudaEventCreate(&s->copy_end), errmsg);
		}
	}
	for (i = 0; i < ld->o.readers; i++) {
		ld->readers[i].ld = ld;
		ld->readers[i].id = i;
		CU(cudaStreamCreateWithFlags(&ld->readers[i].stream,
					     cudaStreamNonBlocking), errmsg);
	}

	if (pthread_mutex_init(&ld->lock, NULL) != 0 ||
	    pthread_cond_init(&ld->cond, NULL) != 0) {
		err = -ENOMEM;
		bfs_seterr(errmsg, "cannot create a mutex");
		goto out;
	}
	ld->sync_ready = 1;
	for (i = 0; i < ld->o.readers; i++) {
		int rc = pthread_create(&ld->readers[i].thread, NULL,
					reader_main, &ld->readers[i]);

		if (rc) {
			err = -rc;
			bfs_seterr(errmsg, "pthread_create: %s", strerror(rc));
			goto out;
		}
		ld->readers[i].started = 1;
	}
out:
	if (entered)
		leave_device(ld->o.device, prev);
	if (err) {
		bfs_gpu_close(ld);
		return err;
	}
	*out = ld;
	return 0;
}

int bfs_gpu_next(bfs_gpu_loader *ld, bfs_gpu_batch *out)
{
	struct slot *s;
	int64_t q;
	int err = 0, prev = 0;
	cudaError_t e;

	if (!ld || !out)
		return -EINVAL;
	ld->errmsg[0] = '\0';
	if (ld->final_err) {
		bfs_seterr(ld->errmsg, "%s", ld->slots[ld->next_seq %
				ld->o.depth].errmsg);
		return ld->final_err;
	}
	q = ld->next_seq;
	if (ld->total >= 0 && q >= ld->total)
		return BFS_GPU_E_END;
	s = &ld->slots[q % ld->o.depth];

	pthread_mutex_lock(&ld->lock);
	if (s->held) {
		pthread_mutex_unlock(&ld->lock);
		bfs_seterr(ld->errmsg, "all %d slots are held: release a "
			   "batch before asking for the next", ld->o.depth);
		return -EBUSY;
	}
	while (s->filled != q)
		pthread_cond_wait(&ld->cond, &ld->lock);
	if (s->err) {
		err = s->err;
		bfs_seterr(ld->errmsg, "%s", s->errmsg);
	} else {
		*out = s->batch;
		s->held = 1;
	}
	pthread_mutex_unlock(&ld->lock);
	if (err) {
		ld->final_err = err;
		return err;
	}

	err = enter_device(ld->o.device, &prev);
	if (err)
		return err;
	e = cudaStreamWaitEvent(ld->consumer, s->ready, 0);
	leave_device(ld->o.device, prev);
	if (e != cudaSuccess) {
		/* The batch stays held; the caller may release it. */
		ld->next_seq++;
		return cuda_fail(e, ld->errmsg, "cudaStreamWaitEvent");
	}
	ld->next_seq++;
	return 0;
}

int bfs_gpu_release(bfs_gpu_loader *ld, const bfs_gpu_batch *b)
{
	struct slot *s;
	int ok, err, prev = 0;
	cudaError_t e;

	if (!ld || !b || b->slot < 0 || b->slot >= ld->o.depth)
		return -EINVAL;
	s = &ld->slots[b->slot];
	pthread_mutex_lock(&ld->lock);
	ok = s->held && s->filled == b->seq && s->batch.images == b->images;
	pthread_mutex_unlock(&ld->lock);
	if (!ok) {
		bfs_seterr(ld->errmsg, "batch %lld is not held",
			   (long long)b->seq);
		return -EINVAL;
	}
	err = enter_device(ld->o.device, &prev);
	if (err)
		return err;
	e = cudaEventRecord(s->released, ld->consumer);
	leave_device(ld->o.device, prev);
	if (e != cudaSuccess)
		return cuda_fail(e, ld->errmsg, "cudaEventRecord");

	pthread_mutex_lock(&ld->lock);
	s->held = 0;
	s->released_once = 1;
	s->free_for = b->seq + ld->o.depth;
	pthread_cond_broadcast(&ld->cond);
	pthread_mutex_unlock(&ld->lock);
	return 0;
}
