/*
 * types.h - small value types shared by the engine, the cache and fs/.
 */
#ifndef BFS_TYPES_H
#define BFS_TYPES_H

#include <stddef.h>

typedef enum {
	BFS_DTYPE_FLOAT32 = 0, /* resized value / 255, as the seed pipeline */
	BFS_DTYPE_UINT8 = 1,   /* resized value rounded to nearest */
	BFS_DTYPE_FLOAT16 = 2, /* IEEE half, from the float32 value */
} bfs_dtype;

static inline size_t bfs_dtype_size(bfs_dtype t)
{
	return t == BFS_DTYPE_UINT8 ? 1 : t == BFS_DTYPE_FLOAT16 ? 2 : 4;
}

/* NumPy descr string for a dtype ("<f4", "|u1", "<f2"). */
static inline const char *bfs_dtype_descr(bfs_dtype t)
{
	return t == BFS_DTYPE_UINT8 ? "|u1"
	       : t == BFS_DTYPE_FLOAT16 ? "<f2" : "<f4";
}

static inline const char *bfs_dtype_name(bfs_dtype t)
{
	return t == BFS_DTYPE_UINT8 ? "uint8"
	       : t == BFS_DTYPE_FLOAT16 ? "float16" : "float32";
}

#endif
