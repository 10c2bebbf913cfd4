/*
 * test_host.c - fs/host's checks of the paths a mount is given (issue 23,
 * 13): a cache directory holds nothing but a batchfs cache, a log path is
 * not a directory, a --slot-dir is a tmpfs; and what mountinfo says of a
 * mount.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include <cmocka.h>

#include "fs/host.h"

static char dir[] = "/tmp/test_host.XXXXXX";

static void touch(const char *name)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_non_null(f = fopen(path, "w"));
	fclose(f);
}

static void rm(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_host.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(dir);
}

static void test_host_cache_dir_may_be_new_empty_or_a_batchfs_cache(void **state)
{
	static const char *const own[] = {
		"data.mdb", "lock.mdb", "users.lock", "damaged",
		"data.mdb.damaged-20260101-000000", "writer.lock",
	};
	char why[512] = "", sub[256];

	(void)state;
	snprintf(sub, sizeof(sub), "%s/new/deeper", dir);
	assert_int_equal(bfs_host_check_cache_dir(sub, why, sizeof(why)), 0);
	assert_int_equal(bfs_host_check_cache_dir(dir, why, sizeof(why)), 0);
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		touch(own[i]);
	assert_int_equal(bfs_host_check_cache_dir(dir, why, sizeof(why)), 0);
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		rm(own[i]);
}

/* --cache /etc: LMDB's files would land among someone else's */
static void test_host_cache_dir_of_other_files_is_refused_naming_one(void **state)
{
	char why[512] = "";

	(void)state;
	touch("data.mdb");
	touch("passwd");
	assert_int_equal(bfs_host_check_cache_dir(dir, why, sizeof(why)), -ENOTEMPTY);
	assert_non_null(strstr(why, "holds files that are not a batchfs cache ('passwd' among them)"));
	assert_non_null(strstr(why, dir));
	rm("passwd");
	touch("data.mdb.orig"); /* only data.mdb.damaged-* is ours */
	assert_int_equal(bfs_host_check_cache_dir(dir, why, sizeof(why)), -ENOTEMPTY);
	rm("data.mdb.orig");
	touch(".lock"); /* a bare ".lock" is no lock file's name */
	assert_int_equal(bfs_host_check_cache_dir(dir, why, sizeof(why)), -ENOTEMPTY);
	rm(".lock");
	rm("data.mdb");
}

static void test_host_cache_dir_that_is_a_file_is_refused(void **state)
{
	char why[512] = "", path[256];

	(void)state;
	touch("f");
	snprintf(path, sizeof(path), "%s/f", dir);
	assert_int_equal(bfs_host_check_cache_dir(path, why, sizeof(why)), -ENOTDIR);
	assert_non_null(strstr(why, "is not a directory"));
	rm("f");
}

static void test_host_log_path_that_is_a_directory_is_refused(void **state)
{
	char why[512] = "", path[256];

	(void)state;
	assert_int_equal(bfs_host_check_log_path(dir, why, sizeof(why)), -EISDIR);
	assert_non_null(strstr(why, "is a directory"));
	assert_int_equal(bfs_host_check_log_path("/", why, sizeof(why)), -EISDIR);
	snprintf(path, sizeof(path), "%s/new.log", dir);
	assert_int_equal(bfs_host_check_log_path(path, why, sizeof(why)), 0);
	touch("old.log");
	snprintf(path, sizeof(path), "%s/old.log", dir);
	assert_int_equal(bfs_host_check_log_path(path, why, sizeof(why)), 0);
	rm("old.log");
}

static void test_host_slot_dir_must_be_a_tmpfs_directory(void **state)
{
	char why[512] = "", path[256];
	struct statfs sf;

	(void)state;
	assert_int_equal(bfs_host_check_slot_dir("/etc", why, sizeof(why)),
			 statfs("/etc", &sf) == 0 && sf.f_type == TMPFS_MAGIC ? 0 : -EINVAL);
	if (statfs("/etc", &sf) == 0 && sf.f_type != TMPFS_MAGIC)
		assert_non_null(strstr(why, "--slot-dir /etc is not a tmpfs"));
	snprintf(path, sizeof(path), "%s/absent", dir);
	assert_int_equal(bfs_host_check_slot_dir(path, why, sizeof(why)), -ENOENT);
	touch("f");
	snprintf(path, sizeof(path), "%s/f", dir);
	assert_int_equal(bfs_host_check_slot_dir(path, why, sizeof(why)), -ENOTDIR);
	rm("f");
	if (statfs("/dev/shm", &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		assert_int_equal(bfs_host_check_slot_dir("/dev/shm", why, sizeof(why)), 0);
}

static void test_host_mount_info_gives_type_parent_and_device(void **state)
{
	bfs_host_mount m;

	(void)state;
	assert_int_equal(bfs_host_mount_info("/proc", &m), 1);
	assert_string_equal(m.fstype, "proc");
	assert_true(m.id > 0 && m.parent_id > 0 && m.id != m.parent_id);
	assert_non_null(strchr(m.devno, ':'));
	assert_int_equal(bfs_host_mount_info(dir, &m), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_host_cache_dir_may_be_new_empty_or_a_batchfs_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_cache_dir_of_other_files_is_refused_naming_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_cache_dir_that_is_a_file_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_log_path_that_is_a_directory_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_slot_dir_must_be_a_tmpfs_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_mount_info_gives_type_parent_and_device, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
