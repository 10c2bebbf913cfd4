/*
 * error.c - text for batchfs error codes (see error.h).
 */
#include "engine/base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *bfs_strerror(int err)
{
	switch (err) {
	case 0:               return "success";
	case BFS_E_CORRUPT:   return "corrupt record framing";
	case BFS_E_CRC:       return "CRC32C mismatch";
	case BFS_E_TRUNCATED: return "truncated data";
	case BFS_E_DECODE:    return "JPEG decode failed";
	case BFS_E_TOOBIG:    return "image exceeds --max-pixels";
	case BFS_E_NOKEY:     return "required feature key missing";
	case BFS_E_FORMAT:    return "unrecognized format";
	case BFS_E_EMPTY:     return "no samples found";
	case BFS_E_MEMORY:    return "sample needs more memory than --mem allows";
	case BFS_E_REMOTE:    return "remote storage failed";
	}
	if (err < 0 && err > BFS_E_FIRST)
		return strerror(-err);
	return "unknown error";
}

void bfs_seterr(char *errmsg, const char *fmt, ...)
{
	va_list ap;

	if (!errmsg)
		return;
	va_start(ap, fmt);
	vsnprintf(errmsg, BFS_ERRMSG_MAX, fmt, ap);
	va_end(ap);
}
