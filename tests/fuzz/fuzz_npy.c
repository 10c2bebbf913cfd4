/*
 * fuzz_npy.c - NPY header parsing (bfs_npy_parse) from any bytes, the
 * statistics of `batchfs inspect` (bfs_inspect_compute) over whatever data
 * follow a header that fits, and a round trip: a parsed C-order header is written again with
 * bfs_npy_header and must parse back to the same descr and shape, with
 * bfs_npy_header_len agreeing with the bytes written.
 *
 * Properties: a documented result; header_len within the input; ndim
 * within 0..8; data_len = product(shape) * itemsize without overflow;
 * descr terminated; errmsg terminated.
 */
#include <errno.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/npy.h"
#include "tests/fuzz/fuzz.h"
#include "fs/inspect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char msg[BFS_ERRMSG_MAX], out[1024];
	bfs_npy_info info, again;
	size_t item;
	uint64_t count = 1;
	int r, n;

	memset(msg, 'x', sizeof(msg));
	msg[sizeof(msg) - 1] = 0;
	r = bfs_npy_parse(data, size, &info, msg);
	CHECK(r == 0 || r == BFS_E_FORMAT, "parse returned %d", r);
	CHECK_MSG(msg);
	if (r) {
		CHECK(msg[0], "error without a message");
		return 0;
	}
	CHECK(info.header_len <= size, "header_len %zu > %zu", info.header_len,
	      size);
	CHECK(info.ndim >= 0 && info.ndim <= BFS_NPY_MAX_NDIM, "ndim %d",
	      info.ndim);
	CHECK(memchr(info.descr, 0, sizeof(info.descr)), "descr not terminated");
	item = bfs_npy_itemsize(info.descr);
	CHECK(item > 0, "accepted descr '%s' has no item size", info.descr);
	for (int i = 0; i < info.ndim; i++)
		if (info.shape[i] == 0)
			count = 0;
	for (int i = 0; count && i < info.ndim; i++) {
		CHECK(count <= UINT64_MAX / info.shape[i], "count overflows");
		count *= info.shape[i];
	}
	CHECK(count <= SIZE_MAX / item && info.data_len == count * item,
	      "data_len %zu != %llu * %zu", info.data_len,
	      (unsigned long long)count, item);
	for (int i = info.ndim; i < BFS_NPY_MAX_NDIM; i++)
		CHECK(info.shape[i] == 0, "shape[%d] set beyond ndim", i);

	/* inspect reads data_len bytes after the header once the file is
	 * known to hold them (as bfs_inspect_main checks). */
	if (size - info.header_len >= info.data_len) {
		bfs_inspect_stats st;

		bfs_inspect_compute(data + info.header_len, &info, &st);
		CHECK(!st.supported || st.count == info.data_len / item,
		      "count %llu for %zu bytes",
		      (unsigned long long)st.count, info.data_len);
		CHECK(st.nan <= st.count, "more NaNs than values");
	}
	if (info.fortran_order)
		return 0;
	n = bfs_npy_header(out, sizeof(out), info.descr, info.shape, info.ndim);
	CHECK(n > 0 && n % 64 == 0, "rewrite returned %d for '%s'", n,
	      info.descr);
	CHECK(bfs_npy_header_len(info.descr, info.shape, info.ndim) == (size_t)n,
	      "header_len disagrees with the header written");
	CHECK(bfs_npy_parse(out, (size_t)n, &again, msg) == 0,
	      "own header does not parse: %s", msg);
	CHECK(again.ndim == info.ndim && strcmp(again.descr, info.descr) == 0 &&
	      !memcmp(again.shape, info.shape, sizeof(info.shape)) &&
	      again.header_len == (size_t)n && again.data_len == info.data_len &&
	      !again.fortran_order, "round trip changed the header");
	return 0;
}
