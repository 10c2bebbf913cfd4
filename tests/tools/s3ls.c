/*
 * s3ls - list a remote source through the storage layer (storage.h), as a
 * mount lists it: `s3ls URL` prints each object's name (as its bytes, one
 * a line), then a last line "# N objects, R requests".  For
 * test_s3_listing.sh, which checks pagination and the bytewise order
 * against a listing it knows.  Credentials and endpoint come from the
 * environment, as for batchfs mount.  Exit status 0, or 1 with the error
 * on stderr.
 */
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/storage/storage.h"

int main(int argc, char **argv)
{
	bfs_storage_opts o;
	bfs_storage_object *objs = NULL;
	bfs_storage *st = NULL;
	bfs_http_stats hs;
	char errmsg[BFS_ERRMSG_MAX] = "";
	size_t n = 0;
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: s3ls URL\n");
		return 2;
	}
	memset(&o, 0, sizeof(o));
	bfs_http_opts_default(&o.http);
	if ((err = bfs_storage_open(argv[1], &o, &st, errmsg)) ||
	    (err = bfs_storage_list(st, &objs, &n, errmsg))) {
		fprintf(stderr, "s3ls: %s: %s\n", argv[1],
			errmsg[0] ? errmsg : bfs_strerror(err));
		bfs_storage_close(st);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		printf("%s\n", objs[i].name);
	bfs_storage_stats(st, &hs);
	printf("# %zu objects, %llu requests\n", n,
	       (unsigned long long)hs.requests);
	bfs_storage_objects_free(objs, n);
	bfs_storage_close(st);
	return 0;
}
