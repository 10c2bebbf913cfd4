/*
 * engine.c - what the engine is, as pure functions of it (see engine.h):
 * the geometry of epochs and batches (which sample sits where, the stage-1
 * form, the NPY header), the options it was made with, its fingerprint
 * and its default memory budget.  The rest is layered on this: slots.c
 * (batch memory), sample.c (one sample), readers.c (hint, get, put,
 * read-ahead, stats) and pool.c (create, the workers, destroy).
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "engine/pixels/augment.h"
#include "engine/base/npy.h"
#include "engine/pixels/resize.h"
#include "engine/version.h"

/* ---- geometry --------------------------------------------------------- */

/* The cached (stage-1) form of a sample for these options. */
void bfs__stage1_of(const bfs_engine_opts *o, int *h, int *w, bfs_dtype *dt,
		      int *post)
{
	int oh = o->height ? o->height : 224, ow = o->width ? o->width : 224;

	if (o->augment_rrc) { /* the decoded image, of its own size */
		*post = 1;
		*h = *w = 0;
		*dt = BFS_DTYPE_UINT8;
		return;
	}
	*post = o->augment_flip || o->augment_crop || o->nchw || o->normalize;
	*h = oh;
	*w = ow;
	if (o->augment_crop) { /* crop HxW out of a sample 8/7 larger */
		*h = oh + (oh + 3) / 7;
		*w = ow + (ow + 3) / 7;
	}
	/* stage 2 computes in float32 unless it only moves uint8 bytes */
	*dt = *post && o->dtype == BFS_DTYPE_FLOAT16 ? BFS_DTYPE_FLOAT32 : o->dtype;
}

void bfs_engine_cached_shape(const bfs_engine *e, int *h, int *w)
{
	*h = e->s1_h;
	*w = e->s1_w;
}

void bfs_engine_epoch_shape(const bfs_engine *e, unsigned epoch, int *h, int *w)
{
	*h = e->o.height;
	*w = e->o.width;
	for (unsigned k = 0; k < e->o.nsizes && e->o.sizes[k].from <= epoch; k++) {
		*h = e->o.sizes[k].h;
		*w = e->o.sizes[k].w;
	}
}

size_t bfs_engine_batch_sample_bytes(const bfs_engine *e, uint64_t id)
{
	int h, w;

	if (id >= e->total)
		return 0;
	bfs_engine_epoch_shape(e, (unsigned)bfs__epoch_of(e, id), &h, &w);
	return (size_t)h * (size_t)w * 3 * bfs_dtype_size(e->o.dtype);
}

void bfs__post_of(const bfs_engine *e, unsigned epoch, bfs_dtype src_dtype,
		  bfs_post_opts *po)
{
	int h, w;

	bfs_engine_epoch_shape(e, epoch, &h, &w);
	*po = (bfs_post_opts){
		.src_h = e->rrc ? h : e->s1_h, .src_w = e->rrc ? w : e->s1_w,
		.src_dtype = src_dtype, .h = h, .w = w, .out_dtype = e->o.dtype,
		.nchw = e->o.nchw, .normalize = e->o.normalize,
	};
	memcpy(po->mean, e->o.mean, sizeof(po->mean));
	memcpy(po->std, e->o.std, sizeof(po->std));
}

int bfs_engine_sample_aug(const bfs_engine *e, uint64_t id, unsigned j,
			  int *flip, int *x0, int *y0)
{
	bfs_aug a = { 0 };
	uint64_t i;

	if (id >= e->total || j >= bfs_engine_batch_count(e, id))
		return -EINVAL;
	i = bfs__sample_of(e, id, j);
	if (e->rrc && e->o.augment_flip)
		bfs_aug_draw(e->o.seed, bfs__epoch_of(e, id), i, 1, 1, 1, 1, 1, 0, &a);
	else if (!e->rrc && (e->o.augment_flip || e->o.augment_crop))
		bfs_aug_draw(e->o.seed, bfs__epoch_of(e, id), i, e->s1_h, e->s1_w,
			     e->o.height, e->o.width, e->o.augment_flip,
			     e->o.augment_crop, &a);
	*flip = a.flip;
	*x0 = a.x0;
	*y0 = a.y0;
	return 0;
}

uint64_t bfs_engine_batches_per_epoch(const bfs_engine *e)
{
	return e->per_epoch;
}

unsigned bfs_engine_epochs(const bfs_engine *e) { return e->o.epochs; }
unsigned bfs_engine_ranks(const bfs_engine *e) { return e->nranks; }
uint64_t bfs_engine_epoch_samples(const bfs_engine *e) { return e->epoch_n; }
const bfs_layout *bfs_engine_layout(const bfs_engine *e) { return e->layout; }

uint64_t bfs_engine_epoch_samples_of(const bfs_engine *e, unsigned epoch)
{
	if (epoch >= e->o.epochs)
		return 0;
	return e->partial && epoch == e->partial_epoch ? e->partial_n : e->epoch_n;
}

uint64_t bfs_engine_epoch_batches(const bfs_engine *e, unsigned epoch)
{
	if (epoch >= e->o.epochs)
		return 0;
	return e->partial && epoch == e->partial_epoch ? e->partial_batches : e->per_epoch;
}
size_t bfs_engine_sample_bytes(const bfs_engine *e) { return e->sample_bytes; }
const bfs_engine_opts *bfs_engine_options(const bfs_engine *e) { return &e->o; }

unsigned bfs_engine_batch_count(const bfs_engine *e, uint64_t id)
{
	uint64_t k, first, n;

	if (id >= e->total)
		return 0;
	k = id % e->per_epoch;
	first = k * e->o.batch;
	n = bfs_engine_epoch_samples_of(e, (unsigned)bfs__epoch_of(e, id));
	if (first >= n)
		return 0; /* past the resumed epoch's batches */
	if (first + e->o.batch <= n)
		return e->o.batch;
	return (unsigned)(n - first);
}

uint64_t bfs__epoch_of(const bfs_engine *e, uint64_t id)
{
	return (id / e->per_epoch) % e->o.epochs;
}

/* Source index of position j of batch id: its rank's k-th sample of its
 * epoch's layout, id = (r * epochs + epoch) * per_epoch + index
 * (engine.h), k = index * batch + j. */
uint64_t bfs__sample_of(const bfs_engine *e, uint64_t id, unsigned j)
{
	uint64_t k = (id % e->per_epoch) * e->o.batch + j;
	unsigned r = (unsigned)(id / e->per_rank);

	return bfs__order_sample(e, bfs__epoch_of(e, id), e->o.rank + r, k);
}

uint64_t bfs__ahead_of(const bfs_engine *e, uint64_t id, unsigned d)
{
	uint64_t base = id / e->per_rank * e->per_rank, s = id - base;
	uint64_t hole, p0, end, count;

	if (!e->partial)
		return base + (s + d) % e->per_rank;
	/* the rank's batches without the resumed epoch's holes [end, p0 +
	 * per_epoch): count them, step, and map back */
	hole = e->per_epoch - e->partial_batches;
	p0 = (uint64_t)e->partial_epoch * e->per_epoch;
	end = p0 + e->partial_batches;
	count = e->per_rank - hole;
	if (!count)
		return id;
	s = s < end ? s : s < p0 + e->per_epoch ? end : s - hole;
	s = (s + d) % count;
	return base + (s < end ? s : s + hole);
}

uint64_t bfs_engine_sample_index(const bfs_engine *e, uint64_t id, unsigned j)
{
	if (id >= e->total || j >= bfs_engine_batch_count(e, id))
		return UINT64_MAX;
	return bfs__sample_of(e, id, j);
}

size_t bfs_engine_npy_header(const bfs_engine *e, uint64_t id, char *hdr,
			     size_t cap)
{
	int h, w, len;
	uint64_t shape[4];

	bfs_engine_epoch_shape(e, id < e->total ? (unsigned)bfs__epoch_of(e, id) : 0, &h, &w);
	shape[0] = bfs_engine_batch_count(e, id);
	shape[1] = (uint64_t)h;
	shape[2] = (uint64_t)w;
	shape[3] = 3;
	if (e->o.nchw) {
		shape[1] = 3;
		shape[2] = (uint64_t)h;
		shape[3] = (uint64_t)w;
	}
	len = bfs_npy_header(hdr, cap, bfs_dtype_descr(e->o.dtype), shape, 4);
	return len > 0 ? (size_t)len : 0;
}

uint64_t bfs_hist_bound_ns(unsigned i)
{
	static const uint64_t step[3] = { 1, 25, 5 }; /* x 1, 2.5, 5 */
	uint64_t b = 100000; /* 100 us */

	if (i >= BFS_HIST_BUCKETS - 1)
		return UINT64_MAX;
	for (unsigned k = 0; k < i / 3; k++)
		b *= 10;
	return i % 3 == 1 ? b * step[1] / 10 : b * step[i % 3];
}

void bfs_hist_add(bfs_hist *h, uint64_t ns)
{
	unsigned i = 0;

	while (i < BFS_HIST_BUCKETS - 1 && ns > bfs_hist_bound_ns(i))
		i++;
	h->count[i]++;
	h->n++;
	h->sum_ns += ns;
}

/* ---- the memory budget's room ------------------------------------------ */

static uint64_t read_u64_file(const char *dir, const char *name)
{
	char file[4400];
	unsigned long long v = 0;
	FILE *f;

	snprintf(file, sizeof(file), "%s/%s", dir, name);
	if (!(f = fopen(file, "re")))
		return 0;
	if (fscanf(f, "%llu", &v) != 1) /* "max": no limit */
		v = 0;
	fclose(f);
	return v;
}

/* This process's cgroup memory limit and what the group uses now (v2
 * memory.max/current, or v1 memory.limit_in_bytes/usage_in_bytes); 0 if
 * none or unreadable.  A v1 "no limit" is a huge number, which the caller
 * ignores as larger than the RAM. */
static void cgroup_mem(uint64_t *max, uint64_t *current)
{
	char line[4096], v2[4200] = "", v1[4200] = "";
	FILE *f;

	*max = *current = 0;
	if (!(f = fopen("/proc/self/cgroup", "re")))
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':'), *q = p ? strchr(p + 1, ':') : NULL;

		if (!q)
			continue;
		q[strcspn(q, "\n")] = '\0';
		if (strncmp(line, "0::", 3) == 0)
			snprintf(v2, sizeof(v2), "/sys/fs/cgroup%s", q + 1);
		else if (q - p == 7 && strncmp(p + 1, "memory", 6) == 0)
			snprintf(v1, sizeof(v1), "/sys/fs/cgroup/memory%s", q + 1);
	}
	fclose(f);
	if (v2[0] && (*max = read_u64_file(v2, "memory.max")))
		*current = read_u64_file(v2, "memory.current");
	else if (v1[0] && (*max = read_u64_file(v1, "memory.limit_in_bytes")))
		*current = read_u64_file(v1, "memory.usage_in_bytes");
}

void bfs_engine_mem_room(const char *dir, bfs_mem_room *out)
{
	struct sysinfo si;
	struct statvfs sv;
	uint64_t cg_max, cg_cur;
	char line[256];
	FILE *f;

	*out = (bfs_mem_room){ 0 };
	if (sysinfo(&si) == 0 && si.totalram)
		out->ram_total = (uint64_t)si.totalram * (si.mem_unit ? si.mem_unit : 1);
	else {
		long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

		if (pages > 0 && psize > 0)
			out->ram_total = (uint64_t)pages * (uint64_t)psize;
	}
	if ((f = fopen("/proc/meminfo", "re"))) {
		unsigned long long kb;

		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
				out->ram_available = (uint64_t)kb << 10;
				break;
			}
		fclose(f);
	}
	cgroup_mem(&cg_max, &cg_cur);
	if (cg_max) {
		uint64_t left = cg_max > cg_cur ? cg_max - cg_cur : 0;

		if (!out->ram_total || cg_max < out->ram_total)
			out->ram_total = cg_max;
		if (!out->ram_available || left < out->ram_available)
			out->ram_available = left ? left : 1;
	}
	if (dir && statvfs(dir, &sv) == 0)
		out->dir_free = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

uint64_t bfs_engine_mem_cap(const bfs_mem_room *r)
{
	uint64_t cap = UINT64_MAX;

	if (r->ram_total)
		cap = r->ram_total / 2;
	if (r->ram_available && r->ram_available / 2 < cap)
		cap = r->ram_available / 2;
	return cap == UINT64_MAX ? 1ull << 30 : cap;
}

uint64_t bfs_engine_mem_max(const bfs_mem_room *r)
{
	if (r->ram_available && (!r->ram_total || r->ram_available < r->ram_total))
		return r->ram_available;
	return r->ram_total;
}

uint64_t bfs_engine_default_mem_for(const bfs_mem_room *r)
{
	uint64_t mem = r->ram_total ? r->ram_total / 8 : 1ull << 30;
	uint64_t cap = bfs_engine_mem_cap(r);

	if (mem > (1ull << 30))
		mem = 1ull << 30;
	if (mem < (256ull << 20))
		mem = 256ull << 20;
	return mem < cap ? mem : cap;
}

uint64_t bfs_engine_default_mem(void)
{
	bfs_mem_room r;

	bfs_engine_mem_room(NULL, &r);
	return bfs_engine_default_mem_for(&r);
}

int bfs_engine_dir_fits(const bfs_mem_room *r, uint64_t budget)
{
	return budget <= r->dir_free / 4 * 3;
}

void bfs_engine_fingerprint(const bfs_engine_opts *o, char out[17])
{
	char desc[256];
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
	int n, s1h, s1w, post;
	bfs_dtype dt;

	bfs__stage1_of(o, &s1h, &s1w, &dt, &post);
	if (o->augment_rrc) /* the decoded image: no output size in it */
		n = snprintf(desc, sizeof(desc),
			     "batchfs-format=%d;stage1=decoded-image;dtype=uint8;"
			     "decode=turbojpeg-ifast-fancy-cmyk-adobe,"
			     "png=spng-strip16-stripalpha,webp=libwebp-rgb;"
			     "reduce=shorter-side-%d-bilinear-halfpixel-noaa-round-even",
			     BFS_FORMAT_VERSION,
			     o->cache_res < 0 ? 0 : o->cache_res ? o->cache_res
								  : BFS_CACHE_RES_DEFAULT);
	else
		n = snprintf(desc, sizeof(desc),
			     "batchfs-format=%d;size=%dx%d;dtype=%s;"
			     "decode=turbojpeg-ifast-fancy-cmyk-adobe,"
			     "png=spng-strip16-stripalpha,webp=libwebp-rgb;"
			     "resize=bilinear-halfpixel-noaa",
			     BFS_FORMAT_VERSION, s1h, s1w, bfs_dtype_name(dt));
	/* Pillow's rules (decode and resize): another fingerprint; tf's keeps
	 * the one it always had */
	if (o->resize_filter == BFS_RESIZE_FILTER_PIL && n > 0 && n < (int)sizeof(desc))
		n += snprintf(desc + n, sizeof(desc) - (size_t)n,
			      ";filter=pil13-bilinear-aa-fixed22,decode=islow-fancy-cmyk-pil");
	if (!o->augment_rrc && o->resize_crop && n > 0 && n < (int)sizeof(desc))
		n += snprintf(desc + n, sizeof(desc) - (size_t)n, ";crop-from=%d",
			      o->crop_from ? o->crop_from : 256);
	for (int i = 0; i < n && i < (int)sizeof(desc); i++) {
		h ^= (unsigned char)desc[i];
		h *= 0x100000001b3ull;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}
