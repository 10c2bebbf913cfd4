/*
 * types.h - small value types shared by the engine, the cache and fs/.
 */
#ifndef BFS_TYPES_H
#define BFS_TYPES_H

#include <stddef.h>

typedef enum {
	BFS_DTYPE_FLOAT32 = 0, /* resized value / 255, as the seed pipeline */
	BFS_DTYPE_UINT8 = 1,   /* resized value rounded to nearest */
} bfs_dtype;

static inline size_t bfs_dtype_size(bfs_dtype t)
{
	return t == BFS_DTYPE_UINT8 ? 1 : 4;
}

/* NumPy descr string for a dtype ("<f4", "|u1"). */
static inline const char *bfs_dtype_descr(bfs_dtype t)
{
	return t == BFS_DTYPE_UINT8 ? "|u1" : "<f4";
}

static inline const char *bfs_dtype_name(bfs_dtype t)
{
	return t == BFS_DTYPE_UINT8 ? "uint8" : "float32";
}

#endif
