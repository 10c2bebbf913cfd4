/*
 * version.h - release and output-format versions.
 *
 * BFS_FORMAT_VERSION changes whenever the bytes of a batch for the same
 * settings change (decoder flags, resize arithmetic, NPY layout), which
 * invalidates every fingerprint and so every cache entry made before.
 */
#ifndef BFS_VERSION_H
#define BFS_VERSION_H

#define BFS_VERSION "0.1.0"
#define BFS_FORMAT_VERSION 1

#endif
