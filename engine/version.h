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
/* 2: PNG and WebP samples; WebDataset labels from .txt and .json (an older
 * cache could hold a tar sample labelled from its .cls where --label-key
 * now reads its .json) */
#define BFS_FORMAT_VERSION 2

#endif
