/*
 * error.h - the one error convention of batchfs.
 *
 * Every function returns 0 on success and a negative number on failure:
 * either a negated errno value (-ENOMEM, -EIO, ...) or one of the project's
 * own codes below, which live in a reserved range so they never collide with
 * errno.  bfs_strerror() turns either kind into text.
 *
 * Functions that can say more than a code (which shard, which record, what
 * the decoder said) take a `char *errmsg` buffer of BFS_ERRMSG_MAX bytes,
 * which may be NULL.  Library code fills it and never prints.
 */
#ifndef BFS_ERROR_H
#define BFS_ERROR_H

#define BFS_ERRMSG_MAX 512

/* BFS_E_* count up from -9999 and stay far below any errno.  The GPU
 * helper's BFS_GPU_E_* (tools/gpu/batchfs_gpu.h) own -10100..-10001,
 * counting down from -10099; nothing else may use that range. */
enum {
	BFS_E_FIRST = -10000,
	BFS_E_CORRUPT,   /* container framing is malformed */
	BFS_E_CRC,       /* a CRC32C check failed */
	BFS_E_TRUNCATED, /* data ends before the framing says it should */
	BFS_E_DECODE,    /* the JPEG decoder refused the image */
	BFS_E_TOOBIG,    /* the image has more pixels than --max-pixels */
	BFS_E_NOKEY,     /* a tf.train.Example lacks a required feature */
	BFS_E_FORMAT,    /* not a format batchfs understands */
	BFS_E_EMPTY,     /* no samples where some were expected */
	BFS_E_MEMORY,    /* decoding the sample needs more than --mem allows */
	BFS_E_REMOTE,    /* a remote shard's bytes could not be had now (the
			  * network past its give-up time, the object
			  * replaced): not the sample's fault, tried again
			  * by the next read that needs it */
	BFS_E_LAST
};

/* Text for a code from this header or a negated errno.  Returns a static
 * string; never NULL.  Any thread. */
const char *bfs_strerror(int err);

/* snprintf into errmsg (BFS_ERRMSG_MAX bytes) when errmsg is not NULL. */
void bfs_seterr(char *errmsg, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
