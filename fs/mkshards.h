/*
 * mkshards.h - `batchfs mkshards`: pack an ImageFolder tree of JPEGs into
 * TFRecord shards of tf.train.Example records with the ImageNet keys.
 */
#ifndef BFS_TOOLS_MKSHARDS_H
#define BFS_TOOLS_MKSHARDS_H

/*
 * batchfs mkshards JPEG_DIR OUT_DIR [--per-shard N] [--prefix P] [--quiet]
 *
 * argv[0] is "mkshards".  Class sub-folders of JPEG_DIR are sorted bytewise
 * and numbered from 0 (the label); files in each are sorted bytewise.  When
 * JPEG_DIR has no sub-folders its files are one class 0.  Files ending in
 * .jpg or .jpeg (any case) are taken; hidden files are ignored.  Each
 * record has image/encoded, image/format ("JPEG"), image/class/label,
 * image/class/synset (folder name), image/filename, image/height and
 * image/width (from the JPEG header).  A file TurboJPEG cannot read the
 * header of is reported on stderr and skipped.
 *
 * Shards are named P-00000-of-0000N.tfrecord (N = shard count), N records
 * each but the last, and appear in OUT_DIR (created if missing) only when
 * complete: each is written to a hidden temp file, fsync'ed and renamed.
 *
 * Prints progress on stderr (a bar on a terminal, else a line every few
 * seconds) unless --quiet, and a summary line on stdout.  Returns the exit
 * status: 0 done, 1 failure (I/O error, no JPEG found), 2 usage.  Not
 * thread-safe (uses stdio and the process's working state); call it from
 * main only.
 */
int bfs_mkshards_main(int argc, char **argv);

#endif
