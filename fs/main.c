/*
 * main.c - the batchfs command line: mount, unmount, status, inspect,
 * mkshards, index, cache; and mount(8)'s helper when called as mount.batchfs or
 * mount.fuse.batchfs (fs/mounthelper.c turns its arguments into a mount).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "engine/pixels/rrc.h"
#include "engine/version.h"
#include "fs/daemon.h"
#include "engine/storage/s3.h"
#include "fs/mount.h"
#include "fs/cachecmd.h"
#include "fs/indexcmd.h"
#include "fs/inspect.h"
#include "fs/mkshards.h"
#include "fs/mounthelper.h"
#include "fs/metrics.h"
#include "fs/optparse.h"
#include "fs/status.h"

static const char usage_top[] =
	"usage: batchfs COMMAND [options]\n"
	"\n"
	"Mount a directory of training shards and read preprocessed batches\n"
	"as NumPy .npy files.\n"
	"\n"
	"commands:\n"
	"  mount SHARD_DIR MOUNTPOINT   serve SHARD_DIR as batch files\n"
	"  unmount MOUNTPOINT           unmount (fusermount3 -u works too)\n"
	"  status MOUNTPOINT            what a mount is doing (--watch, --json)\n"
	"  metrics MOUNTPOINT           its counters for Prometheus\n"
	"  inspect FILE.npy...          shape, dtype, min/max/mean, labels\n"
	"  mkshards JPEG_DIR OUT_DIR    pack JPEG folders into TFRecord shards\n"
	"  index SOURCE                 write the sidecar index beside the shards,\n"
	"                               so that mounts need not scan them\n"
	"  cache stats|verify|clear     the preprocessed-sample cache\n"
	"  version, -V, --version       print the version\n"
	"\n"
	"Run 'batchfs COMMAND --help' for a command's options.\n";

static const char usage_mount[] =
	"usage: batchfs mount SHARD_DIR MOUNTPOINT [options]\n"
	"\n"
	"Mounts SHARD_DIR (TFRecord shards of tf.train.Example JPEG records, or\n"
	"an ImageFolder tree of JPEGs) read-only on MOUNTPOINT and returns once\n"
	"the mount is ready, leaving a daemon behind.  The mount shows\n"
	"dataset.json, stats.json and epoch-0000/batch-NNNNNN.npy (images,\n"
	"B x H x W x 3) with batch-NNNNNN.labels.npy (int64, B).\n"
	"\n"
	"options:\n"
	"  --batch N            samples per batch (32)\n"
	"  --size HxW           output height x width (224x224)\n"
	"  --dtype T            float32 (resized/255, the tf.data default),\n"
	"                       float16 (the same, rounded to half) or uint8\n"
	"                       (resized value rounded to nearest)\n"
	"  --resize MODE        stretch: to HxW as tf.image.resize (default);\n"
	"                       crop: shorter side to --crop-from (256), then\n"
	"                       the center HxW (ImageNet evaluation)\n"
	"  --resize-filter F    tf: decode and resize as TensorFlow (default);\n"
	"                       pil: as Pillow/torchvision on PIL images\n"
	"                       (Image.resize BILINEAR, antialiased; ISLOW)\n"
	"  --augment LIST       flip, crop or flip,crop: a random horizontal\n"
	"                       flip (p=1/2) and/or a random HxW crop from a\n"
	"                       sample cached 8/7 larger, drawn per (seed,\n"
	"                       epoch, sample); applied after the cache.\n"
	"                       rrc (or rrc,flip): RandomResizedCrop as\n"
	"                       torchvision's, a new box every epoch, from\n"
	"                       the decoded image the cache keeps\n"
	"  --rrc-scale MIN,MAX  share of the image's area (0.08,1)\n"
	"  --rrc-ratio MIN,MAX  box aspect ratio w/h, drawn log-uniform\n"
	"                       (0.75,1.3333)\n"
	"  --cache-res N|full   with rrc: the cache keeps each image with its\n"
	"                       shorter side reduced to N when larger, and\n"
	"                       every epoch crops from that copy (512)\n"
	"  --decode-scale exact|auto\n"
	"                       with rrc: auto decodes each box at 1/2, 1/4 or\n"
	"                       1/8 scale when it is that many times the\n"
	"                       output (faster, other pixels; no cache).\n"
	"                       exact (default) is bit for bit a full decode\n"
	"  --decode-whole       with rrc: decode every image whole, then crop,\n"
	"                       as the epoch that fills the cache does (same\n"
	"                       bytes; for comparison)\n"
	"  --size-schedule LIST with rrc: progressive resizing, e.g.\n"
	"                       160@0,192@40,224@80 (HxW@EPOCH also works):\n"
	"                       each epoch folder has its own size\n"
	"  --layout L           nhwc (default) or nchw\n"
	"  --mean R,G,B         normalize (x - mean) / std, in the 0..1 scale\n"
	"  --std R,G,B          (e.g. 0.485,0.456,0.406 and 0.229,0.224,0.225)\n"
	"  --label-offset K     add K to every label (-1 maps the 1..1000\n"
	"                       labels of TF's ImageNet scripts to 0..999)\n"
	"  --threads auto|N     decode threads (auto: one per core it may run on)\n"
	"  --prefetch auto|N    batches decoded ahead of each reader (auto:\n"
	"                       autotuned per reader, like tf.data AUTOTUNE)\n"
	"  --mem SIZE           memory budget for decoded batches and decoder\n"
	"                       scratch (default: 1/8 of RAM, 256M..1G; big\n"
	"                       batches grow it, to half of RAM and of what\n"
	"                       is available at most)\n"
	"  --cache DIR|none     LMDB cache of preprocessed samples, shared by\n"
	"                       mounts (default $XDG_CACHE_HOME/batchfs)\n"
	"  --cache-size SIZE    cache limit (default 10% of the free disk\n"
	"                       space, at most 64G)\n"
	"  --format F           auto, tfrecord, tar (WebDataset) or folder (auto)\n"
	"  --image-key KEY      Example feature with the JPEG (image/encoded)\n"
	"  --label-key KEY      int64 Example feature with the label, or none\n"
	"                       (image/class/label)\n"
	"  --on-error MODE      fail: a batch with a bad sample fails with EIO\n"
	"                       (default); skip: a bad sample is replaced by the\n"
	"                       next sample in order that decodes\n"
	"  --max-pixels N       refuse images with more pixels (64M)\n"
	"  --max-inflate-ratio N\n"
	"                       refuse a gzip shard (.tfrecord.gz, .tar.gz)\n"
	"                       that inflates to over N times its compressed\n"
	"                       bytes: a gzip bomb (100; 0: no limit)\n"
	"  --dali-index DIR     DALI's TFRecord index files (SHARD.idx or\n"
	"                       STEM.idx, as tfrecord2idx writes them) are in\n"
	"                       DIR too, not only beside the shards\n"
	"  --epochs N           epoch-0000 .. epoch-(N-1) folders (1)\n"
	"  --shuffle SEED       epoch e is a permutation of (SEED, e); without\n"
	"                       it every epoch is in file order\n"
	"  --shuffle-block N|global\n"
	"                       with --shuffle: permute the shards, take them N\n"
	"                       at a time and permute each block's samples, so\n"
	"                       one block at a time need be local (default:\n"
	"                       global for a local source; 1/32 of the shards,\n"
	"                       1..64, for s3:// and http(s):// ones and with\n"
	"                       --split shards)\n"
	"  --rank R --world W   this rank's slice, as PyTorch's\n"
	"                       DistributedSampler(drop_last=True)\n"
	"  --ranks A-B          with --world W: one mount for ranks A..B (a\n"
	"                       node's local ranks), each in MNT/rank-R/, the\n"
	"                       same bytes as --rank R; one set of threads,\n"
	"                       memory and cache for all of them\n"
	"  --split samples|shards\n"
	"                       samples: every rank a stride of the epoch\n"
	"                       (default); shards: each node a span of its\n"
	"                       block order, so it reads ~1/nodes of the shards\n"
	"  --node-ranks K       with --split shards and --rank: ranks a node\n"
	"                       (1; a --ranks A-B mount is one node)\n"
	"  --resume E:C@W[/K][+...]\n"
	"                       epoch E starts part way: a job of world W (K\n"
	"                       ranks a node if it split shards) consumed C\n"
	"                       samples of it; serve the rest over this world\n"
	"                       (see batchfs(1), RESUMING ON ANOTHER WORLD)\n"
	"  --hold SECONDS       MNT/hold exists; the mount unmounts itself once\n"
	"                       the last open of it is closed (a process that\n"
	"                       exits or is killed closes its files), or when\n"
	"                       nobody opened it within SECONDS (0: no limit)\n"
	"  --drop-remainder     leave out the last, partial batch\n"
	"  --log FILE           daemon log (default\n"
	"                       $XDG_STATE_HOME/batchfs/batchfs.log)\n"
	"  --allow-other        let other users read the mount\n"
	"  --slot-dir DIR       the tmpfs that holds decoded batches for\n"
	"                       passthrough (default /dev/shm; the budget must\n"
	"                       fit in 3/4 of its free space)\n"
	"  --no-passthrough     serve every read of a batch file through the\n"
	"                       daemon, instead of letting the kernel read\n"
	"                       the decoded batch directly (for comparison)\n"
	"  --no-push            serve batches only when read, instead of\n"
	"                       copying each finished batch into the page\n"
	"                       cache ahead of its reader (for comparison)\n"
	"  --metrics-file PATH  write the counters for Prometheus (as `batchfs\n"
	"                       metrics` prints them) to PATH, atomically, every\n"
	"                       --metrics-interval seconds (15): for\n"
	"                       node_exporter's textfile collector (PATH.prom)\n"
	"  --metrics-port PORT  serve them at http://127.0.0.1:PORT/metrics\n"
	"  --metrics-addr ADDR  ...on ADDR instead (an address or a name); one\n"
	"                       that is not loopback needs --metrics-public\n"
	"  --history-interval S seconds between the points of stats.json's\n"
	"                       history (10; coarser as the mount ages), which\n"
	"                       `batchfs status MNT --plot out.png` draws\n"
	"\n"
	"  SHARD_DIR may be s3://BUCKET/PREFIX, or http(s)://HOST/PATH with\n"
	"  WebDataset's braces (shard-{000000..000146}.tar): the shards stream\n"
	"  through a node-local shard cache, fetched ahead in the epoch order\n"
	"  and evicted in it; a record not local is read by range.\n"
	"  Credentials, region and endpoint as the AWS tools find them\n"
	"  (AWS_ACCESS_KEY_ID, ~/.aws, IMDSv2; AWS_REGION, AWS_ENDPOINT_URL).\n"
	"  --shard-cache DIR     where (default $XDG_CACHE_HOME/batchfs-shards)\n"
	"  --shard-cache-size N  its limit on disk (default a quarter of its\n"
	"                        free space, at most 256G)\n"
	"  --s3-connections N    shard fetches at once, in ranged GETs (8)\n"
	"  --s3-timeout S        a request with no byte for S seconds is\n"
	"                        retried (30)\n"
	"  --s3-giveup S         a request's retries end after S seconds (120)\n"
	"  --s3-anonymous        sign nothing (a public bucket)\n"
	"  --s3-addressing M     path, virtual or auto (auto: virtual-hosted\n"
	"                        for AWS, path-style for other endpoints)\n"
	"  --s3-endpoint URL     instead of AWS_ENDPOINT_URL(_S3)\n"
	"  --s3-region R         instead of AWS_REGION\n"
	"  --no-verify-tls       do not verify TLS certificates (AWS_CA_BUNDLE\n"
	"                        names a CA file instead)\n"
	"\n"
	"  -o OPT[,OPT...]      FUSE mount options, passed through\n"
	"  -f                   stay in the foreground, log to stderr\n"
	"  -d                   FUSE debug output (implies -f)\n"
	"  -h, --help           this help\n";

static const char usage_unmount[] =
	"usage: batchfs unmount [--lazy] MOUNTPOINT\n"
	"\n"
	"Unmounts a batchfs mount and waits until its daemon is gone.  A mount\n"
	"that processes still hold is not unmounted: they are named.\n"
	"\n"
	"  -l, --lazy   detach it now; the daemon exits once the last process\n"
	"               holding it lets go (not waited for)\n"
	"  -h, --help   this help\n";

/* A usage error of `batchfs CMD`: one line, and where the help is. */
static int usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "batchfs%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "; see 'batchfs%s%s --help'\n", cmd ? " " : "",
		cmd ? cmd : "");
	return 2;
}


/* getopt_long's '?' (unknown) or ':' (missing value), with opterr 0; an
 * unknown long option suggests the nearest of lo. */
static int bad_option(const char *cmd, int c, char **argv,
		      const struct option *lo)
{
	const char *arg = argv[optind - 1];
	char hint[96];

	if (c == ':')
		return usage_error(cmd, "%s needs a value", arg);
	if (optopt && optopt < 256 && arg[0] == '-' && arg[1] != '-')
		return usage_error(cmd, "unknown option '-%c'", optopt);
	return usage_error(cmd, "unknown option '%s'%s", arg,
			   bfs_opt_hint(arg, lo, hint, sizeof(hint)));
}

/* Was long option o just read from an abbreviation (getopt_long takes
 * any unique prefix: "--f" for --format, which then took the next word
 * as its value)?  Options are written whole, so that an option added
 * later never changes what an old command line means, and mount(8)'s -o
 * f is refused rather than guessed.  The word is argv[optind - 1], or the
 * one before when the value was a word of its own. */
static int abbreviated(char **argv, const struct option *o)
{
	const char *w = argv[optind - 1];
	size_t n;

	if (o->has_arg == required_argument && optarg == w && optind >= 2)
		w = argv[optind - 2];
	if (strncmp(w, "--", 2) != 0)
		return 0;
	w += 2;
	n = strcspn(w, "=");
	return n != strlen(o->name) || strncmp(w, o->name, n) != 0;
}

/* The numbers of the options, read whole by fs/optparse (a value that
 * would wrap, or has a sign it may not have, is refused, not bent). */

/* "64M", "1G", "1000": sizes and counts with binary suffixes. */
static int parse_size(const char *s, uint64_t *out)
{
	return bfs_opt_size(s, 0, out) ? -1 : 0;
}

static int parse_uint(const char *s, unsigned min, unsigned max,
		      unsigned *out)
{
	return bfs_opt_uint(s, min, max, out) ? -1 : 0;
}

/* "HxW" or "N" (NxN), each side 1..BFS_ENGINE_MAX_SIDE. */
static int parse_hw(const char *s, int *h, int *w)
{
	return bfs_opt_hw(s, BFS_ENGINE_MAX_SIDE, h, w) ? -1 : 0;
}

/* "A,B": two finite numbers (for --rrc-scale and --rrc-ratio). */
static int parse_pair(const char *s, double v[2])
{
	return bfs_opt_doubles(s, v, 2) ? -1 : 0;
}

/* "160@0,192@40,224x200@80": sizes from an epoch on, ascending epochs. */
static int parse_schedule(const char *s, bfs_engine_opts *o)
{
	char buf[512], *tok, *save = NULL;

	if (strlen(s) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", s);
	o->nsizes = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *at = strchr(tok, '@');
		unsigned from;
		int h, w;

		if (!at || o->nsizes == BFS_ENGINE_MAX_SIZES)
			return -1;
		*at = '\0';
		if (parse_hw(tok, &h, &w) || parse_uint(at + 1, 0, 100000, &from) ||
		    (o->nsizes && from <= o->sizes[o->nsizes - 1].from))
			return -1;
		o->sizes[o->nsizes].from = from;
		o->sizes[o->nsizes].h = h;
		o->sizes[o->nsizes].w = w;
		o->nsizes++;
	}
	if (!o->nsizes)
		return -1;
	if (o->sizes[0].from == 0) { /* epoch 0's size is the mount's size */
		o->height = o->sizes[0].h;
		o->width = o->sizes[0].w;
	}
	return 0;
}

static int bad(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, "batchfs mount: bad value '%s' for %s (%s)\n", val, opt,
		want);
	return 2;
}

static int cmd_mount(int argc, char **argv)
{
	enum { O_BATCH = 256, O_SIZE, O_DTYPE, O_THREADS, O_PREFETCH, O_CACHE,
	       O_FORMAT, O_IKEY, O_LKEY, O_ONERR, O_MAXPIX, O_DROP, O_LOG,
	       O_ALLOW, O_MEM, O_SHUFFLE, O_EPOCHS, O_RANK, O_WORLD,
	       O_LABEL_OFFSET, O_CACHE_SIZE, O_RESIZE, O_CROP_FROM, O_AUGMENT,
	       O_LAYOUT, O_MEAN, O_STD, O_NO_PUSH, O_NO_PT, O_SLOT_DIR,
	       O_RANKS, O_HOLD, O_RRC_SCALE, O_RRC_RATIO, O_CACHE_RES,
	       O_DECODE_SCALE, O_SCHEDULE, O_DECODE_WHOLE,
	       O_MAX_INFLATE, O_METRICS_FILE, O_METRICS_INTERVAL, O_METRICS_PORT,
	       O_METRICS_ADDR, O_METRICS_PUBLIC, O_HISTORY_INTERVAL,
	       O_SHARD_CACHE,
	       O_SHARD_CACHE_SIZE, O_S3_CONN, O_S3_TIMEOUT, O_S3_GIVEUP,
	       O_S3_ANON, O_S3_ADDR, O_S3_ENDPOINT, O_S3_REGION, O_INSECURE,
	       O_RESIZE_FILTER, O_SHUFFLE_BLOCK, O_SPLIT, O_NODE_RANKS, O_RESUME,
	       O_DALI_INDEX };
	static const struct option lo[] = {
		{ "batch", required_argument, 0, O_BATCH },
		{ "size", required_argument, 0, O_SIZE },
		{ "dtype", required_argument, 0, O_DTYPE },
		{ "threads", required_argument, 0, O_THREADS },
		{ "prefetch", required_argument, 0, O_PREFETCH },
		{ "cache", required_argument, 0, O_CACHE },
		{ "format", required_argument, 0, O_FORMAT },
		{ "image-key", required_argument, 0, O_IKEY },
		{ "label-key", required_argument, 0, O_LKEY },
		{ "on-error", required_argument, 0, O_ONERR },
		{ "max-pixels", required_argument, 0, O_MAXPIX },
		{ "max-inflate-ratio", required_argument, 0, O_MAX_INFLATE },
		{ "dali-index", required_argument, 0, O_DALI_INDEX },
		{ "drop-remainder", no_argument, 0, O_DROP },
		{ "log", required_argument, 0, O_LOG },
		{ "allow-other", no_argument, 0, O_ALLOW },
		{ "no-push", no_argument, 0, O_NO_PUSH },
		{ "no-passthrough", no_argument, 0, O_NO_PT },
		{ "slot-dir", required_argument, 0, O_SLOT_DIR },
		{ "mem", required_argument, 0, O_MEM },
		{ "shuffle", required_argument, 0, O_SHUFFLE },
		{ "shuffle-block", required_argument, 0, O_SHUFFLE_BLOCK },
		{ "split", required_argument, 0, O_SPLIT },
		{ "node-ranks", required_argument, 0, O_NODE_RANKS },
		{ "resume", required_argument, 0, O_RESUME },
		{ "epochs", required_argument, 0, O_EPOCHS },
		{ "rank", required_argument, 0, O_RANK },
		{ "world", required_argument, 0, O_WORLD },
		{ "ranks", required_argument, 0, O_RANKS },
		{ "hold", required_argument, 0, O_HOLD },
		{ "label-offset", required_argument, 0, O_LABEL_OFFSET },
		{ "cache-size", required_argument, 0, O_CACHE_SIZE },
		{ "resize", required_argument, 0, O_RESIZE },
		{ "crop-from", required_argument, 0, O_CROP_FROM },
		{ "resize-filter", required_argument, 0, O_RESIZE_FILTER },
		{ "augment", required_argument, 0, O_AUGMENT },
		{ "layout", required_argument, 0, O_LAYOUT },
		{ "mean", required_argument, 0, O_MEAN },
		{ "std", required_argument, 0, O_STD },
		{ "rrc-scale", required_argument, 0, O_RRC_SCALE },
		{ "rrc-ratio", required_argument, 0, O_RRC_RATIO },
		{ "cache-res", required_argument, 0, O_CACHE_RES },
		{ "decode-scale", required_argument, 0, O_DECODE_SCALE },
		{ "size-schedule", required_argument, 0, O_SCHEDULE },
		{ "decode-whole", no_argument, 0, O_DECODE_WHOLE },
		{ "metrics-file", required_argument, 0, O_METRICS_FILE },
		{ "metrics-interval", required_argument, 0, O_METRICS_INTERVAL },
		{ "metrics-port", required_argument, 0, O_METRICS_PORT },
		{ "metrics-addr", required_argument, 0, O_METRICS_ADDR },
		{ "metrics-public", no_argument, 0, O_METRICS_PUBLIC },
		{ "history-interval", required_argument, 0, O_HISTORY_INTERVAL },
		{ "shard-cache", required_argument, 0, O_SHARD_CACHE },
		{ "shard-cache-size", required_argument, 0, O_SHARD_CACHE_SIZE },
		{ "s3-connections", required_argument, 0, O_S3_CONN },
		{ "s3-timeout", required_argument, 0, O_S3_TIMEOUT },
		{ "s3-giveup", required_argument, 0, O_S3_GIVEUP },
		{ "s3-anonymous", no_argument, 0, O_S3_ANON },
		{ "s3-addressing", required_argument, 0, O_S3_ADDR },
		{ "s3-endpoint", required_argument, 0, O_S3_ENDPOINT },
		{ "s3-region", required_argument, 0, O_S3_REGION },
		{ "no-verify-tls", no_argument, 0, O_INSECURE },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	bfs_mount_opts o = { 0 };
	char *fuse_opts = NULL, *schedule = NULL;
	uint64_t v;
	unsigned u;
	int c, li, rc, rank_given = 0, mean_given = 0, std_given = 0;

	o.engine.batch = 32;
	o.engine.height = o.engine.width = 224;
	o.engine.dtype = BFS_DTYPE_FLOAT32;
	o.engine.max_pixels = 64ull << 20;
	o.engine.max_pixels_auto = 1; /* until --max-pixels asks for one */
	o.engine.std[0] = o.engine.std[1] = o.engine.std[2] = 1.0f;
	o.cache = NULL; /* the default directory */
	optind = 1;
	opterr = 0;
	while ((li = -1, c = getopt_long(argc, argv, ":hfdo:", lo, &li)) != -1) {
		if (li >= 0 && abbreviated(argv, &lo[li])) {
			free(fuse_opts);
			return usage_error("mount", "unknown option '%s' (options are written whole: --%s?)",
					   argv[optind - (optarg == argv[optind - 1] &&
							  lo[li].has_arg == required_argument ? 2 : 1)],
					   lo[li].name);
		}
		switch (c) {
		case O_BATCH:
			if (parse_uint(optarg, 1, 65536, &o.engine.batch))
				return bad("--batch", optarg, "1..65536");
			break;
		case O_SIZE:
			if (parse_hw(optarg, &o.engine.height, &o.engine.width))
				return bad("--size", optarg, "HxW or N, sides 1..16384, e.g. 224x224");
			break;
		case O_DTYPE:
			if (!strcmp(optarg, "float32"))
				o.engine.dtype = BFS_DTYPE_FLOAT32;
			else if (!strcmp(optarg, "uint8"))
				o.engine.dtype = BFS_DTYPE_UINT8;
			else if (!strcmp(optarg, "float16"))
				o.engine.dtype = BFS_DTYPE_FLOAT16;
			else
				return bad("--dtype", optarg, "float32, float16 or uint8");
			break;
		case O_THREADS:
			if (!strcmp(optarg, "auto"))
				o.engine.threads = 0;
			else if (parse_uint(optarg, 1, 1024, &o.engine.threads))
				return bad("--threads", optarg, "auto or 1..1024");
			break;
		case O_PREFETCH:
			if (!strcmp(optarg, "auto"))
				o.engine.prefetch = 0;
			else if (parse_uint(optarg, 1, 1023, &o.engine.prefetch))
				return bad("--prefetch", optarg, "auto or 1..1023");
			break;
		case O_SHUFFLE:
			if (bfs_opt_seed(optarg, &o.engine.seed))
				return bad("--shuffle", optarg, "a seed, 0..2^64-1");
			o.engine.shuffle = 1;
			break;
		case O_SHUFFLE_BLOCK:
			if (!strcmp(optarg, "global"))
				o.engine.shuffle_block = 0;
			else if (bfs_opt_u64(optarg, 1, UINT32_MAX, &o.engine.shuffle_block))
				return bad("--shuffle-block", optarg, "shards a block, 1 or more, or global");
			o.shuffle_block_given = 1;
			break;
		case O_SPLIT:
			if (!strcmp(optarg, "samples"))
				o.engine.split = BFS_SPLIT_SAMPLES;
			else if (!strcmp(optarg, "shards"))
				o.engine.split = BFS_SPLIT_SHARDS;
			else
				return bad("--split", optarg, "samples or shards");
			break;
		case O_NODE_RANKS:
			if (parse_uint(optarg, 1, 1u << 20, &o.engine.node_ranks))
				return bad("--node-ranks", optarg, "ranks a node, 1 or more");
			break;
		case O_RESUME:
			if (bfs_opt_resume(optarg, &o.engine.resume))
				return bad("--resume", optarg,
					   "EPOCH:CONSUMED@WORLD, with /K for a run that split shards "
					   "with K ranks a node, and +RUN for each later run, e.g. "
					   "3:1024@4/2+512@2");
			break;
		case O_RESIZE:
			if (!strcmp(optarg, "stretch"))
				o.engine.resize_crop = 0;
			else if (!strcmp(optarg, "crop"))
				o.engine.resize_crop = 1;
			else
				return bad("--resize", optarg, "stretch or crop");
			break;
		case O_RESIZE_FILTER:
			if (!strcmp(optarg, "tf"))
				o.engine.resize_filter = BFS_RESIZE_FILTER_TF;
			else if (!strcmp(optarg, "pil"))
				o.engine.resize_filter = BFS_RESIZE_FILTER_PIL;
			else
				return bad("--resize-filter", optarg, "tf or pil");
			break;
		case O_CROP_FROM: {
			unsigned cf;

			if (parse_uint(optarg, 1, 16384, &cf))
				return bad("--crop-from", optarg, "1..16384");
			o.engine.crop_from = (int)cf;
			break;
		}
		case O_AUGMENT: {
			char buf[64], *tok, *save = NULL;

			if (strlen(optarg) >= sizeof(buf))
				return bad("--augment", optarg,
					   "flip, crop, rrc, a comma-separated list of them, or none");
			snprintf(buf, sizeof(buf), "%s", optarg);
			for (tok = strtok_r(buf, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				if (!strcmp(tok, "flip"))
					o.engine.augment_flip = 1;
				else if (!strcmp(tok, "crop"))
					o.engine.augment_crop = 1;
				else if (!strcmp(tok, "rrc"))
					o.engine.augment_rrc = 1;
				else if (strcmp(tok, "none"))
					return bad("--augment", optarg,
						   "flip, crop, rrc, a comma-separated list of them, or none");
			}
			break;
		}
		case O_LAYOUT:
			if (!strcasecmp(optarg, "nhwc")) /* or NHWC, as dataset.json writes it */
				o.engine.nchw = 0;
			else if (!strcasecmp(optarg, "nchw"))
				o.engine.nchw = 1;
			else
				return bad("--layout", optarg, "nhwc or nchw, in either case");
			break;
		case O_MEAN:
		case O_STD: {
			float *v = c == O_MEAN ? o.engine.mean : o.engine.std;
			double d[3];
			int ok = bfs_opt_doubles(optarg, d, 3) == 0;

			for (int k = 0; ok && k < 3; k++) {
				v[k] = (float)d[k];
				ok = isfinite(v[k]) && (c == O_MEAN || v[k] > 0.0f);
			}
			if (!ok)
				return bad(c == O_MEAN ? "--mean" : "--std", optarg,
					   c == O_MEAN ? "three finite numbers R,G,B in the 0..1 scale"
						       : "three numbers R,G,B above 0, in the 0..1 scale");
			o.engine.normalize = 1;
			if (c == O_MEAN)
				mean_given = 1;
			else
				std_given = 1;
			break;
		}
		case O_RRC_SCALE:
			if (parse_pair(optarg, o.engine.rrc.scale) ||
			    bfs_rrc_check(&(bfs_rrc_opts){ { o.engine.rrc.scale[0],
							     o.engine.rrc.scale[1] },
							   { 0.75, 1.0 } }, NULL))
				return bad("--rrc-scale", optarg, "MIN,MAX with 0 < MIN <= MAX <= 1");
			break;
		case O_RRC_RATIO:
			if (parse_pair(optarg, o.engine.rrc.ratio) ||
			    bfs_rrc_check(&(bfs_rrc_opts){ { 0.5, 1.0 },
							   { o.engine.rrc.ratio[0],
							     o.engine.rrc.ratio[1] } }, NULL))
				return bad("--rrc-ratio", optarg, "MIN,MAX with 0 < MIN <= MAX");
			break;
		case O_CACHE_RES: {
			unsigned res;

			if (!strcmp(optarg, "full"))
				o.engine.cache_res = -1;
			else if (parse_uint(optarg, 1, 65535, &res))
				return bad("--cache-res", optarg, "a side in pixels, or full");
			else
				o.engine.cache_res = (int)res;
			break;
		}
		case O_DECODE_SCALE:
			if (!strcmp(optarg, "exact"))
				o.engine.decode_scale_auto = 0;
			else if (!strcmp(optarg, "auto"))
				o.engine.decode_scale_auto = 1;
			else
				return bad("--decode-scale", optarg, "exact or auto");
			break;
		case O_SCHEDULE:
			schedule = optarg;
			break;
		case O_DECODE_WHOLE:
			o.engine.decode_whole = 1;
			break;
		case O_CACHE_SIZE:
			if (parse_size(optarg, &v) || v < (1u << 20))
				return bad("--cache-size", optarg, "a size such as 20G");
			o.cache_size = v;
			break;
		case O_LABEL_OFFSET:
			if (bfs_opt_i64(optarg, INT64_MIN, INT64_MAX, &o.engine.label_offset))
				return bad("--label-offset", optarg,
					   "an integer, -2^63..2^63-1");
			break;
		case O_EPOCHS:
			if (parse_uint(optarg, 1, 100000, &o.engine.epochs))
				return bad("--epochs", optarg, "1..100000");
			break;
		case O_RANK:
			if (parse_uint(optarg, 0, 1u << 20, &o.engine.rank))
				return bad("--rank", optarg, "0..world-1");
			rank_given = 1;
			break;
		case O_RANKS: {
			const char *dash = strchr(optarg, '-');
			size_t la = dash ? (size_t)(dash - optarg) : strlen(optarg);
			unsigned lo, hi;
			char a[16];

			if (la == 0 || la >= sizeof(a))
				return bad("--ranks", optarg, "A-B with A <= B, or A");
			memcpy(a, optarg, la);
			a[la] = '\0';
			if (parse_uint(a, 0, 1u << 20, &lo) ||
			    parse_uint(dash ? dash + 1 : a, 0, 1u << 20, &hi) || hi < lo)
				return bad("--ranks", optarg, "A-B with A <= B, or A");
			o.engine.rank = lo;
			o.engine.ranks = hi - lo + 1;
			break;
		}
		case O_HOLD:
			if (parse_uint(optarg, 0, 1u << 30, &o.hold_wait))
				return bad("--hold", optarg, "seconds to wait for the first holder (0: no limit)");
			o.hold = 1;
			break;
		case O_WORLD:
			if (parse_uint(optarg, 1, 1u << 20, &o.engine.world))
				return bad("--world", optarg, "1 or more");
			break;
		case O_MEM:
			if (parse_size(optarg, &v) || v < (1u << 20))
				return bad("--mem", optarg, "a size such as 512M or 2G");
			o.engine.mem_bytes = v;
			break;
		case O_CACHE:
			o.cache = optarg;
			break;
		case O_FORMAT:
			if (!strcmp(optarg, "auto"))
				o.source.format = BFS_FORMAT_AUTO;
			else if (!strcmp(optarg, "tfrecord"))
				o.source.format = BFS_FORMAT_TFRECORD;
			else if (!strcmp(optarg, "folder"))
				o.source.format = BFS_FORMAT_FOLDER;
			else if (!strcmp(optarg, "tar"))
				o.source.format = BFS_FORMAT_TAR;
			else
				return bad("--format", optarg, "auto, tfrecord, tar or folder");
			break;
		case O_IKEY:
			o.source.image_key = optarg;
			break;
		case O_LKEY:
			o.source.label_key = optarg;
			break;
		case O_ONERR:
			if (!strcmp(optarg, "fail"))
				o.engine.on_error = BFS_ON_ERROR_FAIL;
			else if (!strcmp(optarg, "skip"))
				o.engine.on_error = BFS_ON_ERROR_SKIP;
			else
				return bad("--on-error", optarg, "fail or skip");
			break;
		case O_MAXPIX:
			if (parse_size(optarg, &v) || v == 0)
				return bad("--max-pixels", optarg, "a count such as 64M");
			o.engine.max_pixels = v;
			o.engine.max_pixels_auto = 0;
			break;
		case O_DALI_INDEX:
			o.source.dali_dir = optarg;
			break;
		case O_MAX_INFLATE: {
			unsigned r;

			if (parse_uint(optarg, 0, 1000000, &r))
				return bad("--max-inflate-ratio", optarg,
					   "a ratio such as 100, or 0 for no limit");
			o.source.max_inflate_ratio = r ? r : BFS_INFLATE_RATIO_NONE;
			break;
		}
		case O_DROP:
			o.engine.drop_remainder = 1;
			break;
		case O_LOG:
			o.log_path = optarg;
			break;
		case O_ALLOW:
			o.allow_other = 1;
			break;
		case O_NO_PUSH:
			o.no_push = 1;
			break;
		case O_NO_PT:
			o.no_passthrough = 1;
			break;
		case O_SLOT_DIR:
			o.slot_dir = optarg;
			break;
		case O_METRICS_FILE:
			o.metrics_file = optarg;
			break;
		case O_HISTORY_INTERVAL:
			if (parse_uint(optarg, 1, 86400, &o.history_interval))
				return bad("--history-interval", optarg, "seconds, 1 to 86400");
			break;
		case O_METRICS_INTERVAL:
			if (parse_uint(optarg, 1, 86400, &o.metrics_interval))
				return bad("--metrics-interval", optarg, "seconds, 1 to 86400");
			break;
		case O_METRICS_PORT:
			if (parse_uint(optarg, 0, 65535, &o.metrics_port))
				return bad("--metrics-port", optarg, "a TCP port, 0 to 65535");
			o.metrics_http = 1;
			break;
		case O_METRICS_ADDR:
			o.metrics_addr = optarg;
			break;
		case O_METRICS_PUBLIC:
			o.metrics_public = 1;
			break;
		case O_SHARD_CACHE:
			o.shard_cache = optarg;
			break;
		case O_SHARD_CACHE_SIZE:
			if (parse_size(optarg, &v) || v < (1u << 20))
				return bad("--shard-cache-size", optarg,
					   "a size of at least 1M, such as 200G");
			o.shard_cache_size = v;
			break;
		case O_S3_CONN:
			if (parse_uint(optarg, 1, 256, &o.storage.http.connections))
				return bad("--s3-connections", optarg, "1 to 256");
			break;
		case O_S3_TIMEOUT:
			if (parse_uint(optarg, 1, 3600, &u))
				return bad("--s3-timeout", optarg, "seconds, 1 to 3600");
			o.storage.http.stall_ms = u * 1000;
			break;
		case O_S3_GIVEUP:
			if (parse_uint(optarg, 1, 86400, &u))
				return bad("--s3-giveup", optarg, "seconds, 1 to 86400");
			o.storage.http.giveup_ms = u * 1000;
			break;
		case O_S3_ANON:
			o.storage.anonymous = 1;
			break;
		case O_S3_ADDR:
			if (!strcmp(optarg, "path"))
				o.storage.addressing = BFS_S3_PATH;
			else if (!strcmp(optarg, "virtual"))
				o.storage.addressing = BFS_S3_VIRTUAL;
			else if (!strcmp(optarg, "auto"))
				o.storage.addressing = BFS_S3_AUTO;
			else
				return bad("--s3-addressing", optarg,
					   "path, virtual or auto");
			break;
		case O_S3_ENDPOINT:
			o.storage.endpoint = optarg;
			break;
		case O_S3_REGION:
			o.storage.region = optarg;
			break;
		case O_INSECURE:
			o.storage.http.insecure = 1;
			break;
		case 'f':
			o.foreground = 1;
			break;
		case 'd':
			o.debug = 1;
			break;
		case 'o': {
			size_t len = fuse_opts ? strlen(fuse_opts) : 0;
			char *n = realloc(fuse_opts, len + strlen(optarg) + 2);

			if (!n)
				return 1;
			if (len)
				n[len++] = ',';
			strcpy(n + len, optarg);
			fuse_opts = n;
			break;
		}
		case 'h':
			fputs(usage_mount, stdout);
			return 0;
		default:
			free(fuse_opts);
			return bad_option("mount", c, argv, lo);
		}
	}
	if (argc - optind != 2) {
		free(fuse_opts);
		if (argc - optind < 2)
			return usage_error("mount", "needs SHARD_DIR and MOUNTPOINT");
		return usage_error("mount", "too many arguments ('%s')",
				   argv[optind + 2]);
	}
	if (mean_given != std_given) {
		free(fuse_opts);
		fprintf(stderr, "batchfs mount: %s without %s: normalizing takes both (x - mean) / std, "
			"e.g. --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 (ImageNet's); "
			"--mean 0,0,0 --std 1,1,1 is no normalization\n",
			mean_given ? "--mean" : "--std", mean_given ? "--std" : "--mean");
		return 2;
	}
	if (o.engine.ranks && rank_given) {
		fprintf(stderr, "batchfs mount: --rank and --ranks exclude each other\n");
		return 2;
	}
	if (o.engine.ranks &&
	    o.engine.rank + o.engine.ranks > (o.engine.world ? o.engine.world : 1)) {
		fprintf(stderr, "batchfs mount: --ranks %u-%u must be below --world %u\n",
			o.engine.rank, o.engine.rank + o.engine.ranks - 1,
			o.engine.world ? o.engine.world : 1);
		return 2;
	}
	/* after --size, which a schedule from epoch 0 replaces */
	if (schedule && parse_schedule(schedule, &o.engine))
		return bad("--size-schedule", schedule,
			   "SIZE@EPOCH,... with epochs ascending, e.g. 160@0,192@40,224@80");
	if (!o.engine.augment_rrc &&
	    (schedule || o.engine.decode_scale_auto || o.engine.cache_res ||
	     o.engine.decode_whole || o.engine.rrc.scale[1] || o.engine.rrc.ratio[1])) {
		fprintf(stderr, "batchfs mount: --size-schedule, --decode-scale, --decode-whole, --cache-res, --rrc-scale and --rrc-ratio need --augment rrc\n");
		return 2;
	}
	if (o.engine.augment_rrc && (o.engine.augment_crop || o.engine.resize_crop)) {
		fprintf(stderr, "batchfs mount: --augment rrc crops by itself: not with %s\n",
			o.engine.augment_crop ? "--augment crop" : "--resize crop");
		return 2;
	}
	if (o.engine.world && o.engine.rank >= o.engine.world) {
		fprintf(stderr, "batchfs mount: --rank %u must be below --world %u\n",
			o.engine.rank, o.engine.world);
		return 2;
	}
	/* libfuse mallocs a reply buffer for every read (up to 1 MiB) and the
	 * cache writer mallocs whole batches per transaction.  glibc would
	 * serve those with fresh mmaps and trim them at every free, so each
	 * read paid page faults on fresh memory (29% of the daemon's time
	 * in a cold epoch, measured by make bench).  Keep them on the heap and
	 * reuse them; memory stays bounded by --mem and the request threads. */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	o.shard_dir = argv[optind];
	o.mountpoint = argv[optind + 1];
	o.source.dir = o.shard_dir;
	o.fuse_opts = fuse_opts;
	rc = bfs_mount_main(&o);
	free(fuse_opts);
	return rc;
}

static int cmd_unmount(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "lazy", no_argument, 0, 'l' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	int c, lazy = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":lh", lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			lazy = 1;
			break;
		case 'h':
			fputs(usage_unmount, stdout);
			return 0;
		default:
			return bad_option("unmount", c, argv, lo);
		}
	}
	if (argc - optind < 1)
		return usage_error("unmount", "needs MOUNTPOINT");
	if (argc - optind > 1)
		return usage_error("unmount", "too many arguments ('%s')",
				   argv[optind + 1]);
	return bfs_daemon_unmount(argv[optind], lazy);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (bfs_mounthelper_called(argv[0]))
		return bfs_mounthelper_main(argc, argv, cmd_mount);
	if (!cmd) {
		fputs(usage_top, stderr);
		return 2;
	}
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		fputs(usage_top, stdout);
		return 0;
	}
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") ||
	    !strcmp(cmd, "-V")) {
		printf("batchfs %s (output format %d)\n", BFS_VERSION,
		       BFS_FORMAT_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "mount"))
		return cmd_mount(argc - 1, argv + 1);
	if (!strcmp(cmd, "unmount") || !strcmp(cmd, "umount"))
		return cmd_unmount(argc - 1, argv + 1);
	if (!strcmp(cmd, "status"))
		return bfs_status_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "metrics"))
		return bfs_metrics_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "inspect"))
		return bfs_inspect_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "mkshards"))
		return bfs_mkshards_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "cache"))
		return bfs_cachecmd_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "index"))
		return bfs_indexcmd_main(argc - 1, argv + 1);
	if (cmd[0] == '-')
		return usage_error(NULL, "unknown option '%s'", cmd);
	return usage_error(NULL, "unknown command '%s'", cmd);
}
