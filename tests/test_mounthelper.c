/*
 * test_mounthelper.c - fs/mounthelper: mount(8)'s `SRC MNT -o OPTIONS`
 * turned into batchfs mount's arguments, and what is refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fs/mounthelper.h"

/* The translated argv joined with spaces (argv[0] included). */
static char *translate(int argc, char **argv, int *rc, char *err, size_t cap)
{
	bfs_mounthelper_args a;
	char *out = calloc(1, 4096);

	*rc = bfs_mounthelper_parse(argc, argv, &a, err, cap);
	if (*rc == 0) {
		for (int i = 0; i < a.argc; i++) {
			if (i)
				strcat(out, " ");
			strcat(out, a.argv[i]);
		}
		assert_null(a.argv[a.argc]);
		bfs_mounthelper_free(&a);
	}
	return out;
}

static void expect(int argc, char **argv, const char *want)
{
	char err[256];
	int rc;
	char *got = translate(argc, argv, &rc, err, sizeof(err));

	if (rc)
		fail_msg("refused: %s", err);
	if (strcmp(got, want))
		fail_msg("got  '%s'\nwant '%s'", got, want);
	free(got);
}

static void expect_refused(int argc, char **argv, const char *why)
{
	char err[256] = "";
	int rc;
	char *got = translate(argc, argv, &rc, err, sizeof(err));

	assert_int_equal(rc, -EINVAL);
	if (!strstr(err, why))
		fail_msg("error '%s' does not say '%s'", err, why);
	free(got);
}

#define ARGS(...) (int)(sizeof((char *[]){ __VA_ARGS__ }) / sizeof(char *)), \
		  (char *[]){ __VA_ARGS__ }

static void test_mounthelper_knows_its_names(void **state)
{
	assert_true(bfs_mounthelper_called("/sbin/mount.fuse.batchfs"));
	assert_true(bfs_mounthelper_called("/usr/sbin/mount.batchfs"));
	assert_true(bfs_mounthelper_called("mount.batchfs"));
	assert_false(bfs_mounthelper_called("/usr/local/bin/batchfs"));
	assert_false(bfs_mounthelper_called("mount.batchfsx"));
	assert_false(bfs_mounthelper_called("mount.fuse"));
	assert_false(bfs_mounthelper_called(NULL));
}

static void test_mounthelper_turns_options_into_batchfs_mount_options(void **state)
{
	expect(ARGS("mount.fuse.batchfs", "/data/train", "/mnt/train", "-o",
		    "batch=32,size=224x224,shuffle=1,epochs=90,cache=/local/cache"),
	       "mount --batch=32 --size=224x224 --shuffle=1 --epochs=90 "
	       "--cache=/local/cache -- /data/train /mnt/train");
}

static void test_mounthelper_drops_the_options_that_are_mounts_own(void **state)
{
	expect(ARGS("mount.fuse.batchfs", "/d", "/m", "-o",
		    "rw,defaults,noauto,user,users,nofail,_netdev,x-systemd.automount,"
		    "comment=x,auto,owner,group,nouser,batch=4"),
	       "mount --batch=4 -- /d /m");
}

static void test_mounthelper_gives_fuse_and_kernel_options_to_fuse(void **state)
{
	expect(ARGS("mount.fuse.batchfs", "/d", "/m", "-o",
		    "nodev,batch=4,noexec,fsname=data,allow_root,noatime,ro"),
	       "mount --batch=4 -o nodev,noexec,fsname=data,allow_root,noatime,ro "
	       "-- /d /m");
}

static void test_mounthelper_reads_underscores_in_names_as_dashes_but_not_in_values(void **state)
{
	expect(ARGS("mount.batchfs", "/d", "/m", "-o",
		    "drop_remainder,label_offset=-1,cache=/my_cache,allow_other"),
	       "mount --drop-remainder --label-offset=-1 --cache=/my_cache "
	       "--allow-other -- /d /m");
}

static void test_mounthelper_joins_lists_that_mount_split_at_commas(void **state)
{
	expect(ARGS("mount.batchfs", "/d", "/m", "-o",
		    "mean=0.485,0.456,0.406,std=0.229:0.224:0.225,augment=flip,crop,"
		    "epochs=2"),
	       "mount --mean=0.485,0.456,0.406 --std=0.229,0.224,0.225 "
	       "--augment=flip,crop --epochs=2 -- /d /m");
	/* a bare word that is not the list's goes on as an option */
	expect(ARGS("mount.batchfs", "/d", "/m", "-o", "augment=flip,drop_remainder"),
	       "mount --augment=flip --drop-remainder -- /d /m");
}

static void test_mounthelper_takes_options_in_every_form_mount_passes(void **state)
{
	char err[64];
	bfs_mounthelper_args a;

	expect(ARGS("mount.batchfs", "/d", "/m", "-obatch=4", "-o", "epochs=2",
		    "-n", "-s", "-t", "fuse.batchfs"),
	       "mount --batch=4 --epochs=2 -- /d /m");
	assert_int_equal(bfs_mounthelper_parse(ARGS("mount.batchfs", "/d", "/m", "-fv"),
					       &a, err, sizeof(err)), 0);
	assert_true(a.fake);
	assert_true(a.verbose);
	bfs_mounthelper_free(&a);
	/* no -o at all: the defaults */
	expect(ARGS("mount.batchfs", "/d", "/m"), "mount -- /d /m");
}

static void test_mounthelper_passes_the_order_options_with_their_punctuation(void **state)
{
	/* fstab for a node of a shards split resuming on another world */
	expect(ARGS("mount.fuse.batchfs", "s3://bucket/train", "/mnt/train", "-o",
		    "shuffle=1,shuffle_block=16,split=shards,node_ranks=2,resume=3:1024@4/2+512@2"),
	       "mount --shuffle=1 --shuffle-block=16 --split=shards --node-ranks=2 "
	       "--resume=3:1024@4/2+512@2 -- s3://bucket/train /mnt/train");
}

static void test_mounthelper_refuses_what_is_not_a_helper_call(void **state)
{
	expect_refused(ARGS("mount.batchfs", "/d"), "needs SHARD_DIR and MOUNTPOINT");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "/x"), "too many arguments");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-o"), "-o needs a value");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-t", "ext4"),
		       "type 'ext4' is not batchfs's");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-N", "/proc/1/ns/mnt"),
		       "not supported");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-x"), "unknown option '-x'");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-o", "=3"), "bad option");
}

/* -o help would become `batchfs mount --help`: the usage, exit 0, and
 * mount(8) would report a mount that did not happen. */
static void test_mounthelper_refuses_help_as_an_option(void **state)
{
	(void)state;
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-o", "help"),
		       "'help' is not a mount option");
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-o", "batch=4,help"),
		       "'help' is not a mount option");
}

/* The type in /proc/mounts is fuse.batchfs, whatever an option says;
 * fsname (the source column) is still the caller's. */
static void test_mounthelper_refuses_a_subtype_the_type_stays_fuse_batchfs(void **state)
{
	(void)state;
	expect_refused(ARGS("mount.batchfs", "/d", "/m", "-o",
			    "fsname=/etc/passwd,subtype=ext4"),
		       "'subtype=ext4' is not an option: a batchfs mount is always of type fuse.batchfs");
	expect(ARGS("mount.batchfs", "/d", "/m", "-o", "fsname=/etc/passwd"),
	       "mount -o fsname=/etc/passwd -- /d /m");
}

static int called;
static char seen[1024];

static int fake_mount(int argc, char **argv)
{
	called++;
	seen[0] = '\0';
	for (int i = 0; i < argc; i++) {
		strcat(seen, argv[i]);
		strcat(seen, "|");
	}
	return 7;
}

static void test_mounthelper_runs_batchfs_mount_unless_faked(void **state)
{
	called = 0;
	assert_int_equal(bfs_mounthelper_main(ARGS("mount.batchfs", "/d", "/m", "-o",
						   "batch=4"), fake_mount), 7);
	assert_int_equal(called, 1);
	assert_string_equal(seen, "mount|--batch=4|--|/d|/m|");
	assert_int_equal(bfs_mounthelper_main(ARGS("mount.batchfs", "/d", "/m", "-f",
						   "-o", "batch=4"), fake_mount), 0);
	assert_int_equal(called, 1);
	assert_int_equal(bfs_mounthelper_main(ARGS("mount.batchfs", "/d"), fake_mount), 2);
	assert_int_equal(called, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mounthelper_knows_its_names),
		cmocka_unit_test(test_mounthelper_turns_options_into_batchfs_mount_options),
		cmocka_unit_test(test_mounthelper_drops_the_options_that_are_mounts_own),
		cmocka_unit_test(test_mounthelper_gives_fuse_and_kernel_options_to_fuse),
		cmocka_unit_test(test_mounthelper_reads_underscores_in_names_as_dashes_but_not_in_values),
		cmocka_unit_test(test_mounthelper_joins_lists_that_mount_split_at_commas),
		cmocka_unit_test(test_mounthelper_takes_options_in_every_form_mount_passes),
		cmocka_unit_test(test_mounthelper_passes_the_order_options_with_their_punctuation),
		cmocka_unit_test(test_mounthelper_refuses_what_is_not_a_helper_call),
		cmocka_unit_test(test_mounthelper_runs_batchfs_mount_unless_faked),
		cmocka_unit_test(test_mounthelper_refuses_help_as_an_option),
		cmocka_unit_test(test_mounthelper_refuses_a_subtype_the_type_stays_fuse_batchfs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
