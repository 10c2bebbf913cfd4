/*
 * batchfs_gpu.h - the GPU companion of batchfs: upload the .npy batch files
 * of a folder (an epoch folder of a batchfs mount, or any folder of batch
 * files) into GPU memory through a ring of pinned host buffers, with
 * asynchronous copies, so that the GPU trains on batch N while N+1 travels.
 *
 * Library: build/libbatchfs_gpu.so, SONAME libbatchfs_gpu.so.N with N =
 * BFS_GPU_ABI_VERSION (`make install` puts it in $PREFIX/lib with this
 * header and batchfs_gpu.pc: cc prog.c $(pkg-config --cflags --libs
 * batchfs_gpu)).  It uses the CUDA runtime only (linked statically, its
 * symbols hidden), and exports only bfs_gpu_* symbols.  The
 * header itself needs no CUDA header: streams and events are passed as
 * `void *` and are cudaStream_t / cudaEvent_t values.
 *
 * Folder contract.  The loader serves every `batch-*.npy` file of the folder
 * that is not a `*.labels.npy`, sorted by name (batch-000000.npy,
 * batch-000001.npy, ...).  Each one is an NPY array, C order, of dtype
 * '|u1' (uint8), '<f2' (float16) or '<f4' (float32) and of shape
 * (B,H,W,C) (NHWC) or (B,C,H,W) (NCHW), 1 <= C <= BFS_GPU_MAX_CHANNELS:
 * everything `batchfs mount --dtype --layout` serves.  Each sits next to its
 * labels file batch-NNNNNN.labels.npy of dtype '<i8' and shape (B,).  B may
 * differ from file to file (the last batch of an epoch is usually smaller);
 * H, W, C, the dtype and the layout may too, within the largest file sizes
 * seen at open.
 *
 * Layout of a file.  BFS_GPU_FILES_NHWC or BFS_GPU_FILES_NCHW in
 * bfs_gpu_opts.flags says it; without either it is read from the shape:
 * NHWC when the last dimension is 1..BFS_GPU_MAX_CHANNELS, else NCHW when
 * the second one is.  (A batchfs mount has C = 3: only an NCHW mount of
 * width 1..4 needs the flag.)
 *
 * What a batch is delivered as (bfs_gpu_batch.dtype, .shape, .nchw):
 *
 *   file dtype    without NORMALIZE        with NORMALIZE
 *   uint8         uint8, as stored         float32 x/255, then (x-mean)/std
 *   float16       float16, as stored       float32 x (exact), then (x-mean)/std
 *   float32       float32, as stored       float32 x, then (x-mean)/std
 *
 * Without NORMALIZE the device holds the file's array bytes, in the file's
 * layout.  With NORMALIZE the layout is the file's too, unless BFS_GPU_NCHW
 * or BFS_GPU_NHWC asks for the other one (the kernel transposes while it
 * converts); an NCHW file needs no transpose for NCHW output.
 *
 * Errors.  Every function that can fail returns 0 or a negative code: a
 * negated errno (-ENOENT, -ENOMEM, ...), one of the core's BFS_E_* codes
 * from engine/base/error.h (BFS_E_FORMAT for a file that is not a batch we
 * understand, BFS_E_EMPTY for a folder with no batch file, BFS_E_TRUNCATED
 * for a file shorter than its header says), or one of the BFS_GPU_E_* codes
 * below.  bfs_gpu_strerror() gives the text of any of them, bfs_gpu_codes()
 * the name and value of every library code, so that bindings copy none.
 * Details (which file, what CUDA said) are kept in the loader
 * (bfs_gpu_errmsg) or written to the caller's errmsg buffer of
 * BFS_GPU_ERRMSG_MAX bytes.  The library never prints and never exits.
 *
 * Threads.  A loader is driven by one consumer thread at a time: open, next,
 * release, errmsg and close must not run concurrently on the same loader
 * (calls from different threads are fine if the caller orders them).  The
 * loader runs its own reader threads internally.  bfs_gpu_strerror,
 * bfs_gpu_codes, bfs_gpu_version, bfs_gpu_opts_init, bfs_gpu_abi and
 * bfs_gpu_device_count may be called from any thread; bfs_gpu_normalize and bfs_gpu_stream_wait from any thread that
 * may use the device.
 *
 * Ownership of the buffers (one owner at every hand-off):
 *   reader thread   pread()s file -> pinned slot, queues the copy on the
 *                   loader's own stream, records `ready`
 *   bfs_gpu_next    hands the slot's device buffers to the caller
 *   caller          queues its work after `ready` on its stream
 *   bfs_gpu_release hands the slot back; an event recorded on the caller's
 *                   stream keeps the next copy into it from starting on the
 *                   GPU before that work has completed.  The host does not
 *                   wait for either the copy or the caller's work.
 */
#ifndef BATCHFS_GPU_H
#define BATCHFS_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything else in the library is hidden (-fvisibility=hidden). */
#if defined(__GNUC__)
#define BFS_GPU_API __attribute__((visibility("default")))
#else
#define BFS_GPU_API
#endif

#define BFS_GPU_ABI_VERSION 2 /* 2: float16, NCHW files, bfs_gpu_codes */
#define BFS_GPU_ERRMSG_MAX 512 /* at least BFS_ERRMSG_MAX (engine/base/error.h) */
#define BFS_GPU_MAX_DEPTH 64
#define BFS_GPU_MAX_READERS 16
#define BFS_GPU_MAX_CHANNELS 4

/* Codes of the GPU companion, in their own range below the core's
 * BFS_E_FIRST (-10000) so that they never collide with it or with errno. */
enum {
	BFS_GPU_E_FIRST = -10100,
	BFS_GPU_E_NODEV,    /* no CUDA device (or no driver) on this machine */
	BFS_GPU_E_CUDA,     /* a CUDA runtime call failed; errmsg says which */
	BFS_GPU_E_END,      /* bfs_gpu_next: no more batches (not a failure) */
	BFS_GPU_E_LAST
};

/* Element types, as delivered in bfs_gpu_batch.dtype. */
typedef enum {
	BFS_GPU_FLOAT32 = 0, /* '<f4' */
	BFS_GPU_UINT8 = 1,   /* '|u1' */
	BFS_GPU_INT64 = 2,   /* '<i8' (labels) */
	BFS_GPU_FLOAT16 = 3, /* '<f2' (IEEE half) */
} bfs_gpu_dtype;

/* How a batch file gets into host memory the GPU can copy from. */
typedef enum {
	BFS_GPU_IO_PREAD = 0, /* pread() into a cudaHostAlloc'd ring slot */
	BFS_GPU_IO_MMAP = 1,  /* mmap() the file, cudaHostRegister the mapping */
} bfs_gpu_io;

/* bfs_gpu_opts.flags (see "What a batch is delivered as" above) */
#define BFS_GPU_NORMALIZE  0x1  /* deliver float32 (x*k - mean) / std,
                                   k = 1/255 for uint8 files, else 1     */
#define BFS_GPU_NCHW       0x2  /* with NORMALIZE: deliver (B,C,H,W)     */
#define BFS_GPU_TIMING     0x4  /* record timed events around uploads    */
#define BFS_GPU_NHWC       0x8  /* with NORMALIZE: deliver (B,H,W,C)     */
#define BFS_GPU_FILES_NHWC 0x10 /* the files are (B,H,W,C)               */
#define BFS_GPU_FILES_NCHW 0x20 /* the files are (B,C,H,W)               */

/* bfs_gpu_normalize's `layout` bits; 0 is NHWC in and out. */
#define BFS_GPU_NORM_DST_NCHW 0x1 /* dst is (n,c,h,w), else (n,h,w,c) */
#define BFS_GPU_NORM_SRC_NCHW 0x2 /* src is (n,c,h,w), else (n,h,w,c) */

typedef struct bfs_gpu_opts {
	int device;     /* CUDA device ordinal; default 0 */
	int depth;      /* ring slots, 1..BFS_GPU_MAX_DEPTH; default 3.  The
	                   caller may hold depth-1 batches at once while the
	                   loader fills the rest; holding all of them makes
	                   the next bfs_gpu_next fail with -EBUSY. */
	int readers;    /* reader threads, 1..BFS_GPU_MAX_READERS, at most
	                   depth; 0 (the default) means min(depth, 4).
	                   Reader t handles batches t, t+readers, ... so
	                   files are read in parallel: one pread() stream
	                   through FUSE reached 1.9 GB/s on an H200 host,
	                   four 13.8, eight 20.6 (docs/BENCHMARKS.md). */
	int passes;     /* passes over the folder before BFS_GPU_E_END;
	                   default 1; -1 repeats forever */
	int io;         /* bfs_gpu_io; default BFS_GPU_IO_PREAD, which won:
	                   mmap + cudaHostRegister is faster with one
	                   reader but does not scale with readers and
	                   slows the copies themselves (BENCHMARKS.md) */
	int flags;      /* BFS_GPU_NORMALIZE, at most one of BFS_GPU_NCHW and
	                   BFS_GPU_NHWC (both need NORMALIZE), BFS_GPU_TIMING,
	                   at most one of BFS_GPU_FILES_NHWC/_NCHW */
	void *stream;   /* cudaStream_t of the consumer, or NULL for the legacy
	                   default stream.  bfs_gpu_next makes it wait for each
	                   batch, bfs_gpu_release records on it, and
	                   bfs_gpu_close synchronizes it before freeing. */
	float mean[BFS_GPU_MAX_CHANNELS]; /* with NORMALIZE; default 0 */
	float std[BFS_GPU_MAX_CHANNELS];  /* with NORMALIZE; default 1 */
} bfs_gpu_opts;

/* One batch handed to the caller by bfs_gpu_next.  Plain data; the pointers
 * in it belong to the loader and stay valid until bfs_gpu_release of this
 * batch (the memory is reused after that) or bfs_gpu_close. */
typedef struct bfs_gpu_batch {
	int64_t seq;          /* 0, 1, 2, ... in delivery order, across passes */
	int64_t index;        /* position of the file in the sorted folder */
	void *images;         /* device pointer to the images */
	void *labels;         /* device pointer to `labels_len` int64 labels */
	int64_t shape[4];     /* images shape as delivered: (B,H,W,C), or
	                         (B,C,H,W) when nchw */
	int32_t ndim;         /* 4 */
	int32_t dtype;        /* bfs_gpu_dtype of the images as delivered:
	                         FLOAT32 with NORMALIZE, else the file's
	                         (UINT8, FLOAT16 or FLOAT32) */
	int64_t labels_len;   /* B */
	uint64_t images_bytes; /* bytes at `images` */
	uint64_t labels_bytes; /* bytes at `labels` (8 * B) */
	uint64_t upload_bytes; /* images bytes copied host to device: the
	                          file's array data (differs from
	                          images_bytes with NORMALIZE of uint8 or
	                          float16) */
	void *ready;          /* cudaEvent_t: completes when images and labels
	                         are on the device.  opts.stream already waits
	                         on it; another stream must cudaStreamWaitEvent
	                         on it (or call bfs_gpu_stream_wait) before use. */
	void *copy_start;     /* cudaEvent_t recorded just before the upload
	                         when BFS_GPU_TIMING, else NULL; with TIMING
	                         `ready` is timed too (cudaEventElapsedTime). */
	void *copy_end;       /* cudaEvent_t recorded right after the copies,
	                         before the NORMALIZE kernel, with TIMING;
	                         else NULL */
	const char *path;     /* path of the images file; owned by the loader,
	                         valid until bfs_gpu_close */
	int32_t slot;         /* ring slot, 0..depth-1 */
	int32_t nchw;         /* 1 when shape is (B,C,H,W): an NCHW file
	                         without NORMALIZE, or NORMALIZE's output
	                         layout (the file's, or NCHW/NHWC) */
} bfs_gpu_batch;

typedef struct bfs_gpu_loader bfs_gpu_loader;

/* Fill *o with the defaults above.  Any thread. */
BFS_GPU_API
void bfs_gpu_opts_init(bfs_gpu_opts *o);

/*
 * Open a loader on `dir` (in) with options `o` (in; NULL for defaults; only
 * read during the call) and store it in *out (out; NULL on failure).
 * Lists and stats the batch files, allocates `depth` pinned host buffers and
 * device buffers sized for the largest files, creates the loader's own
 * non-blocking stream(s) and starts the reader threads, which begin reading
 * at once.  The calling thread's current device is left as it was.
 *
 * Errors: -EINVAL (NULL dir/out, depth/readers/passes/io/flags out of
 * range), -ENOENT/-ENOTDIR/-EACCES (folder), BFS_E_EMPTY (no batch file),
 * -ENOENT (a labels file is missing; errmsg names it),
 * BFS_GPU_E_NODEV (no CUDA device, or `device` does not exist),
 * BFS_GPU_E_CUDA (allocation or stream creation failed), -ENOMEM, and
 * the errno of a failed pthread_create.  The folder is checked before CUDA
 * is touched, so folder errors come first even without a GPU.  A one-line
 * reason goes to errmsg (BFS_GPU_ERRMSG_MAX bytes, may be NULL).
 */
BFS_GPU_API
int bfs_gpu_open(const char *dir, const bfs_gpu_opts *o,
		 bfs_gpu_loader **out, char *errmsg);

/*
 * Hand the caller the next batch in *out (out).  Blocks the calling thread
 * only until the batch's upload has been *queued* (its file read into pinned
 * memory and its copy issued), never until the copy completes: the stream
 * given at open is made to wait on out->ready instead.
 *
 * Returns 0; BFS_GPU_E_END after the last batch of the last pass (again on
 * every later call); -EBUSY when the caller already holds depth batches
 * (release one first); or the error the reader met on this batch:
 * BFS_E_FORMAT (not a (B,H,W,C) or (B,C,H,W) '|u1'/'<f2'/'<f4' array,
 * or not of the layout FILES_NHWC/_NCHW says; labels not (B,) '<i8';
 * fortran order), BFS_E_TRUNCATED or -EFBIG (the file changed size since
 * open), an errno from open/pread/mmap, BFS_GPU_E_CUDA.  A reader error is
 * final: this and every later call return it; bfs_gpu_errmsg says which
 * file and why.  Batches before the failed one are delivered first.
 */
BFS_GPU_API
int bfs_gpu_next(bfs_gpu_loader *ld, bfs_gpu_batch *out);

/*
 * Give back a batch obtained from bfs_gpu_next, once the caller has queued
 * (not necessarily finished) its work on it on the stream given at open.
 * Records an event on that stream; the loader's next copy into this slot
 * waits on the GPU for it.  Never blocks.  Batches may be released in any
 * order.  After this call the batch's pointers must not be used by new work.
 *
 * Errors: -EINVAL (NULL, or a batch that is not currently held: already
 * released, or from another loader), BFS_GPU_E_CUDA (event record failed).
 */
BFS_GPU_API
int bfs_gpu_release(bfs_gpu_loader *ld, const bfs_gpu_batch *b);

/*
 * Stop the readers, wait for the loader's stream(s) and the consumer stream
 * given at open, and free everything.  Batches still held become invalid.
 * Accepts NULL and loaders that failed half-way through bfs_gpu_open.
 */
BFS_GPU_API
void bfs_gpu_close(bfs_gpu_loader *ld);

/* Number of batch files in the folder (one pass).  0 for NULL. */
BFS_GPU_API
int64_t bfs_gpu_count(const bfs_gpu_loader *ld);

/* Largest (images file, labels file) sizes in bytes; fills what is not
 * NULL.  Returns 0, or -EINVAL for a NULL loader. */
BFS_GPU_API
int bfs_gpu_max_bytes(const bfs_gpu_loader *ld, uint64_t *images,
		      uint64_t *labels);

/* The detail of the last error on this loader ("" if none).  The string
 * belongs to the loader and stays valid until its next call or close. */
BFS_GPU_API
const char *bfs_gpu_errmsg(const bfs_gpu_loader *ld);

/* Text for any code this library returns.  Static string, never NULL. */
BFS_GPU_API
const char *bfs_gpu_strerror(int err);

/* One of the library's own error codes: its value and its C name
 * ("BFS_E_FORMAT", "BFS_GPU_E_END"). */
typedef struct bfs_gpu_code {
	int code;
	const char *name;
} bfs_gpu_code;

/* Every code of engine/base/error.h (BFS_E_*) and of this header (BFS_GPU_E_*)
 * that the library can return, besides negated errno values: a static
 * table of *n (out, may be NULL) entries, ordered by value, never NULL.
 * Text via bfs_gpu_strerror.  Bindings read their codes from here instead
 * of copying them.  Any thread. */
BFS_GPU_API
const bfs_gpu_code *bfs_gpu_codes(size_t *n);

/* The batchfs release this library was built from (BFS_VERSION of
 * engine/version.h, e.g. "0.1.0").  Static string.  Any thread. */
BFS_GPU_API
const char *bfs_gpu_version(void);

/* Number of CUDA devices in *n (out, may be NULL).  Returns 0 when there is
 * at least one, BFS_GPU_E_NODEV (with the runtime's reason in errmsg) when
 * there is none or no driver. */
BFS_GPU_API
int bfs_gpu_device_count(int *n, char *errmsg);

/*
 * Queue on `stream` (cudaStream_t; NULL = legacy default) a kernel that
 * turns `src`, a device array of n images of h x w pixels of c channels of
 * dtype `src_dtype` (BFS_GPU_UINT8, BFS_GPU_FLOAT16 or BFS_GPU_FLOAT32),
 * into float32 at `dst`:
 *     dst = (x * k - mean[ch]) / std[ch],  k = 1/255 for uint8, else 1
 * computed as IEEE (x / 255.0f - mean) / std in float32, with the division by
 * 255 skipped for float input (float16 is widened exactly) and the mean/std
 * step skipped when mean and std are NULL.  `layout` says how src and dst
 * are laid out: BFS_GPU_NORM_SRC_NCHW for an (n,c,h,w) src, else
 * (n,h,w,c); BFS_GPU_NORM_DST_NCHW for an (n,c,h,w) dst, else (n,h,w,c).
 * (ABI 1 callers' nchw = 0 or 1 mean the same as before: NHWC src.)  mean
 * and std are host arrays of c floats (copied during the call) or both
 * NULL.  dst must not overlap src.  Does not wait for the kernel.
 * Errors: -EINVAL (NULL pointers, c outside 1..BFS_GPU_MAX_CHANNELS, a
 * negative dimension, a dtype other than the three, layout bits other than
 * the two, only one of mean/std, a std of 0), BFS_GPU_E_CUDA (launch
 * failed).
 */
BFS_GPU_API
int bfs_gpu_normalize(const void *src, int src_dtype, float *dst,
		      int64_t n, int64_t h, int64_t w, int64_t c,
		      const float *mean, const float *std, int layout,
		      void *stream);

/* cudaStreamWaitEvent(stream, event, 0) for callers without the CUDA
 * headers (the Python binding's __dlpack__).  Errors: BFS_GPU_E_CUDA. */
BFS_GPU_API
int bfs_gpu_stream_wait(void *stream, void *event);

/* For bindings: returns BFS_GPU_ABI_VERSION and stores sizeof(bfs_gpu_opts)
 * and sizeof(bfs_gpu_batch) where not NULL, so that a binding can check its
 * copies of the structs.  Any thread. */
BFS_GPU_API
int bfs_gpu_abi(size_t *opts_size, size_t *batch_size);

#ifdef __cplusplus
}
#endif

#endif
