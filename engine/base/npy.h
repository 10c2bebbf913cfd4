/*
 * npy.h - NumPy .npy headers: write the v1.0 header np.save would write for
 * a C-order array, and parse/validate any v1.0, v2.0 or v3.0 header.
 *
 * Pure functions over caller-owned buffers: no allocation, no I/O, no global
 * state, so every function here may be called from any thread.
 */
#ifndef BFS_NPY_H
#define BFS_NPY_H

#include <stddef.h>
#include <stdint.h>

#define BFS_NPY_MAX_NDIM 8

typedef struct {
	char descr[8];        /* NUL-terminated dtype string, e.g. "<f4", "|u1" */
	int fortran_order;    /* 1 when the header says 'fortran_order': True */
	int ndim;             /* 0..BFS_NPY_MAX_NDIM; 0 is a scalar array */
	uint64_t shape[8];    /* shape[0..ndim-1]; the rest are 0 */
	size_t header_len;    /* bytes before the data: magic..'\n' inclusive */
	size_t data_len;      /* product(shape) * itemsize */
} bfs_npy_info;

/*
 * Write the NPY v1.0 header for a C-order array of `ndim` dimensions
 * (0..BFS_NPY_MAX_NDIM) with element type `descr` (e.g. "<f4", "|u1";
 * at most 7 characters, printed verbatim) into out[0..cap).
 *
 * The bytes are exactly what numpy's np.save writes (numpy >= 1.23, which
 * adds 21 - len(str(shape[0])) spaces of growth room): magic "\x93NUMPY",
 * version 1.0, little-endian u16 header length, then
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (32, 224, 224, 3), }
 * padded with spaces and ended by '\n' so that the total is a multiple of
 * 64.  A 1-D shape prints as "(32,)", a 0-D one as "()".
 *
 * Nothing is NUL-terminated.  Returns the header length (> 0, a multiple of
 * 64), -ENOSPC when cap is smaller than that (out is then untouched), or
 * -EINVAL for a NULL/over-long descr, a descr containing a quote or
 * backslash, or ndim outside 0..8.
 */
int bfs_npy_header(char *out, size_t cap, const char *descr,
		   const uint64_t *shape, int ndim);

/*
 * The exact length bfs_npy_header() would return for these parameters,
 * without writing anything (for stat sizes).  0 for invalid parameters.
 */
size_t bfs_npy_header_len(const char *descr, const uint64_t *shape, int ndim);

/*
 * Parse and validate an NPY header (v1.0, v2.0 or v3.0) at the start of
 * buf.  `len` is the number of bytes available; it may be just the header
 * or the whole file.  Every length is checked before use, so any bytes are
 * safe input.  The data themselves are not looked at and need not be in
 * buf: callers compare info->header_len + info->data_len with the file size.
 *
 * The dict may list its keys in any order with any whitespace, as long as it
 * has exactly 'descr', 'fortran_order' and 'shape'.  descr must be a simple
 * dtype string of at most 7 characters: byte order '<', '>', '|' or '=',
 * a kind from "biufcSUVmM?" and an item size ("<f4", "|u1", "<U10",
 * "<M8[ns]"); structured (list) dtypes are refused.
 *
 * On success fills *info (data_len = product(shape) * itemsize, checked for
 * overflow) and returns 0.  Errors: BFS_E_FORMAT with a one-line reason in
 * errmsg (BFS_ERRMSG_MAX bytes, may be NULL) -- bad magic, unknown version,
 * header longer than len, malformed dict, unsupported dtype, more than 8
 * dimensions, size overflow.
 */
int bfs_npy_parse(const void *buf, size_t len, bfs_npy_info *info,
		  char *errmsg);

/*
 * Size in bytes of one element of a simple descr as accepted by
 * bfs_npy_parse ("<f4" -> 4, "<U10" -> 40, "|b1" -> 1).  0 if not understood.
 */
size_t bfs_npy_itemsize(const char *descr);

#endif
