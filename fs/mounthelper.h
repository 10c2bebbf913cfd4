/*
 * mounthelper.h - batchfs as mount(8)'s helper: `mount -t fuse.batchfs
 * SRC MNT -o batch=32,size=224x224`, an fstab line and a systemd .mount
 * unit all end in `mount.fuse.batchfs SRC MNT -o OPTIONS` (mount(8) looks
 * for /sbin/mount.TYPE).  Installed as symlinks mount.batchfs and
 * mount.fuse.batchfs to the batchfs binary, which sees its name in
 * argv[0] and turns the helper's arguments into `batchfs mount`'s.
 *
 * Translation of -o OPTIONS (comma-separated, as mount(8) passes them):
 *   - mount(8)'s own options are dropped: defaults, auto, noauto, user,
 *     nouser, users, owner, group, nofail, _netdev, rw (a batchfs mount is
 *     read-only whatever it is asked), comment=..., x-... (x-systemd.*);
 *   - FUSE and kernel mount options go to FUSE as `-o`: ro, [no]dev,
 *     [no]suid, [no]exec, the atime family, [a]sync, dirsync,
 *     allow_root, auto_unmount, default_permissions, fsname= (what
 *     /proc/mounts shows as the source; the type stays fuse.batchfs),
 *     max_read=, and the SELinux context options;
 *   - refused: subtype= (a batchfs mount is of type fuse.batchfs, never
 *     what an option says), and help (`batchfs mount --help` would exit
 *     0 with nothing mounted);
 *   - every other option is a `batchfs mount` option: NAME=VALUE becomes
 *     --NAME=VALUE, NAME becomes --NAME, with '_' read as '-'
 *     (drop_remainder = drop-remainder); `batchfs mount` checks them, so
 *     an unknown one is refused with its name, and so is an abbreviation
 *     (f is not format: batchfs mount takes only whole option names).  The lists of --mean,
 *     --std and --augment may be written with ':' (mean=0.485:0.456:0.406)
 *     or with commas, as mount(8) splits them (mean=0.485,0.456,0.406):
 *     a bare number after mean= or std=, and a bare flip/crop/none after
 *     augment=, joins the list before it.
 * Helper flags: -f (fake: translate, mount nothing), -v (say the command),
 * -n and -s (accepted: there is no mtab, and every option is
 * known or refused), -t TYPE (fuse.batchfs or batchfs), -N is refused.
 *
 * FUSE-free; the parse is a pure function.
 */
#ifndef BFS_FS_MOUNTHELPER_H
#define BFS_FS_MOUNTHELPER_H

#include <stddef.h>

/* Was the program called as a mount helper (argv0's last component is
 * mount.batchfs or mount.fuse.batchfs)? */
int bfs_mounthelper_called(const char *argv0);

/* The helper's arguments as `batchfs mount` takes them. */
typedef struct {
	int argc;
	char **argv;   /* argv[0] "mount", options, SRC, MNT; NULL-ended */
	int fake;      /* -f: translate, mount nothing */
	int verbose;   /* -v */
} bfs_mounthelper_args;

/* Translate the helper's argc/argv (argv[0] the helper's name) into
 * *out, which the caller frees with bfs_mounthelper_free.  0; -EINVAL
 * with err (cap bytes: one line) for arguments that are not a helper's
 * call (not exactly SRC and MNT, -N, another -t type, -o without a
 * value); -ENOMEM. */
int bfs_mounthelper_parse(int argc, char **argv, bfs_mounthelper_args *out,
			  char *err, size_t cap);
void bfs_mounthelper_free(bfs_mounthelper_args *a); /* accepts zeroed */

/* The helper's main: parse, then run mount_cmd (batchfs mount's main,
 * which checks every option) on the translated arguments; with -f only
 * translate (and with -v say the command) and mount nothing.  Returns the
 * exit status: mount_cmd's, or 2 for a usage error. */
int bfs_mounthelper_main(int argc, char **argv,
			 int (*mount_cmd)(int argc, char **argv));

#endif
