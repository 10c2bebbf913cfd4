#!/usr/bin/env bash
# make install into a DESTDIR: what lands where, the installed binary run,
# the man pages and the bash completion, the GPU library's SONAME, header
# and pkg-config file (when CUDA built them); then mount(8) through the
# installed helper, `mount -t fuse.batchfs` and an fstab line (a private
# fstab, `mount -T`), in a private mount namespace that sees the DESTDIR
# at /usr/local/bin and the helper in /sbin; and make uninstall.  Nothing
# outside the test's directory is written.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
R=$D/root
BUILD=${BUILD:-build}

# the top make's jobserver and flags are not this one's
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory install \
	DESTDIR="$R" PREFIX=/usr/local BUILD="$BUILD" >"$D/install.out" 2>&1 ||
	{ not_ok "make install: $(tail -5 "$D/install.out")"; t_end; }
ok "make install DESTDIR=... PREFIX=/usr/local"
check "batchfs is in bin" test -x "$R/usr/local/bin/batchfs"
check "the mount helper is in /sbin, where mount(8) looks, linked to the installed batchfs" \
	test "$(readlink "$R/sbin/mount.batchfs")" = /usr/local/bin/batchfs
check "mount.fuse.batchfs (what type fuse.batchfs runs) links to it" \
	test "$(readlink "$R/sbin/mount.fuse.batchfs")" = mount.batchfs
check "man pages batchfs(1) and mount.batchfs(8)" \
	test -s "$R/usr/local/share/man/man1/batchfs.1" -a -s "$R/usr/local/share/man/man8/mount.batchfs.8"
check "bash completion" test -s "$R/usr/local/share/bash-completion/completions/batchfs"

# the installed binary runs, mounts and unmounts
IB=$R/usr/local/bin/batchfs
check "the installed batchfs runs: $("$IB" -V 2>&1)" bash -c "'$IB' -V | grep -q '^batchfs [0-9]'"
"$MKJPEG" "$D/jpegs" --classes 2 --per-class 6 --seed 6 --min-size 24 \
	--max-size 48 >/dev/null || { not_ok "mkjpeg"; t_end; }
"$IB" mkshards "$D/jpegs" "$D/sh" --per-shard 5 --quiet || not_ok "installed mkshards"
mkdir -p "$D/m"
out=$("$IB" mount "$D/sh" "$D/m" --batch 4 --size 16x16 --threads 1 --cache none 2>&1) ||
	{ not_ok "installed batchfs mount: $out"; t_end; }
T_MOUNTS+=("$D/m")
check "the installed batchfs serves a batch" bash -c \
	"head -c 128 '$D/m/epoch-0000/batch-000000.npy' | grep -aq \"'shape': (4, 16, 16, 3)\""
check "the installed batchfs status reads it" "$IB" status --interval 0.1 "$D/m"
check "the installed batchfs unmounts it" "$IB" unmount "$D/m"

if command -v groff >/dev/null; then
	for p in man1/batchfs.1 man8/mount.batchfs.8; do
		check "$p renders without warnings" bash -c \
			"out=\$(groff -man -ww -z '$R/usr/local/share/man/$p' 2>&1) && test -z \"\$out\""
	done
else
	echo "skip man_pages_render: no groff on this machine"
fi
check "the completion completes commands and options" bash -c "
	source '$R/usr/local/share/bash-completion/completions/batchfs'
	COMP_WORDS=(batchfs st); COMP_CWORD=1; _batchfs; test \"\${COMPREPLY[*]}\" = status
	COMP_WORDS=(batchfs unmount --la); COMP_CWORD=2; _batchfs; test \"\${COMPREPLY[*]}\" = --lazy
	COMP_WORDS=(batchfs mount --dtype u); COMP_CWORD=3; _batchfs; test \"\${COMPREPLY[*]}\" = uint8"

# ---- the GPU companion, when CUDA built it
LIBF=$(ls "$R"/usr/local/lib/libbatchfs_gpu.so.* 2>/dev/null | head -1)
if [ -z "$LIBF" ]; then
	echo "skip install_gpu_library: no CUDA toolkit here, so no libbatchfs_gpu.so or batchfs-gpu to install"
else
	check "batchfs-gpu is in bin" test -x "$R/usr/local/bin/batchfs-gpu"
	check "libbatchfs_gpu.so carries its SONAME, the file's name" bash -c \
		"readelf -d '$LIBF' | grep -q 'Library soname: \[$(basename "$LIBF")\]'"
	check "libbatchfs_gpu.so links to it" \
		test "$(readlink "$R/usr/local/lib/libbatchfs_gpu.so")" = "$(basename "$LIBF")"
	check "its header" test -s "$R/usr/local/include/batchfs_gpu.h"
	PC=(env PKG_CONFIG_PATH="$R/usr/local/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$R" pkg-config)
	check "pkg-config finds batchfs_gpu at the release's version" \
		test "$("${PC[@]}" --modversion batchfs_gpu)" = "$("$IB" -V | cut -d' ' -f2)"
	printf '#include <stdio.h>\n#include <batchfs_gpu.h>\nint main(void) { puts(bfs_gpu_version()); return 0; }\n' >"$D/gpu.c"
	check "a program builds against it with pkg-config's flags" bash -c \
		"cc '$D/gpu.c' \$(${PC[*]} --cflags --libs batchfs_gpu) -o '$D/gpu'"
	check "... needs it by its SONAME and runs" bash -c \
		"readelf -d '$D/gpu' | grep -q 'NEEDED.*\[$(basename "$LIBF")\]' &&
		 test \"\$(LD_LIBRARY_PATH='$R/usr/local/lib' '$D/gpu')\" = \"\$('$IB' -V | cut -d' ' -f2)\""
fi

# ---- mount(8): -t fuse.batchfs and an fstab line, through the helper
if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
	echo "skip mount_t_fuse_batchfs: mount(8) of a FUSE type and a private mount namespace need root"
else
	# the bytes `batchfs mount` serves with the same options
	mount_fg "$D/sh" "$D/ref" --batch 4 --size 16x16 --threads 1 --cache none \
		--shuffle 1 --epochs 2 --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 ||
		{ not_ok "reference mount"; t_end; }
	(cd "$D/ref/epoch-0001" && sha256sum batch-*.npy) >"$D/ref.sha"
	unmount_wait "$D/ref"
	OPTS=batch=4,size=16x16,threads=1,cache=none,shuffle=1,epochs=2,mean=0.485,0.456,0.406,std=0.229:0.224:0.225
	printf '%s %s fuse.batchfs %s,noauto,nofail,_netdev,x-systemd.device-timeout=10 0 0\n' \
		"$D/sh" "$D/m" "$OPTS" >"$D/fstab"
	unshare -m --propagation private bash -s "$D" "$R" "$OPTS" >"$D/ns.out" 2>&1 <<'NS'
D=$1 R=$2 OPTS=$3
set -u
fail() { echo "NS-FAIL $*"; exit 1; }
# a daemon left mounted would keep this namespace alive
trap 'mountpoint -q "$D/m" && umount -l "$D/m"' EXIT
# /sbin (-> /usr/sbin) with the installed helper beside what is there
mkdir -p "$D/realsbin" "$D/sbin"
mount --bind /usr/sbin "$D/realsbin" || fail "bind /usr/sbin"
for f in "$D"/realsbin/*; do ln -s "$f" "$D/sbin/"; done
cp -P "$R"/sbin/mount.batchfs "$R"/sbin/mount.fuse.batchfs "$D/sbin/"
mount --bind "$D/sbin" /usr/sbin || fail "bind the helper's /sbin"
mount --bind "$R/usr/local/bin" /usr/local/bin || fail "bind the installed bin"
# mount(8)'s own notes (utab) stay in the namespace too
mount -t tmpfs batchfs-test-run /run || fail "tmpfs /run"
mkdir -p "$D/m"
mount -t fuse.batchfs "$D/sh" "$D/m" -o "$OPTS" >"$D/mount-t.msg" 2>&1 ||
	fail "mount -t fuse.batchfs: $(cat "$D/mount-t.msg")"
findmnt -n -o SOURCE,FSTYPE "$D/m" >"$D/mount-t.findmnt"
cp "$D/m/dataset.json" "$D/mount-t.dataset.json"
(cd "$D/m/epoch-0001" && sha256sum batch-*.npy) >"$D/mount-t.sha"
umount "$D/m" 2>"$D/umount.err" ||
	fail "umount: $(cat "$D/umount.err"; fuser -vm "$D/m" 2>&1 | tr '\n' ' ')"
for i in $(seq 1 100); do mountpoint -q "$D/m" || break; sleep 0.1; done
mount -T "$D/fstab" "$D/m" >"$D/fstab.msg" 2>&1 || fail "mount -T fstab: $(cat "$D/fstab.msg")"
findmnt -n -o SOURCE,FSTYPE "$D/m" >"$D/fstab.findmnt"
(cd "$D/m/epoch-0001" && sha256sum batch-*.npy) >"$D/fstab.sha"
batchfs unmount "$D/m" || fail "batchfs unmount"
echo NS-OK
NS
	check "the namespace ran: $(grep NS- "$D/ns.out" | tail -1)" grep -q NS-OK "$D/ns.out"
	check "mount -t fuse.batchfs mounts through the helper: $(cat "$D/mount-t.msg" 2>/dev/null)" \
		grep -q "batchfs: mounted $D/sh on $D/m" "$D/mount-t.msg"
	check "findmnt shows the source and type fuse.batchfs" \
		test "$(tr -s ' ' <"$D/mount-t.findmnt")" = "$D/sh fuse.batchfs"
	check "the -o options became batchfs mount's (mean split by commas and joined again)" \
		$PY - "$D/mount-t.dataset.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["batch_size"] == 4 and d["epochs"] == 2 and d["shuffle"] is True and d["seed"] == 1, d
assert [round(x, 3) for x in d["mean"]] == [0.485, 0.456, 0.406], d["mean"]
assert [round(x, 3) for x in d["std"]] == [0.229, 0.224, 0.225], d["std"]
PY
	check "its batches are byte for byte batchfs mount's" cmp "$D/ref.sha" "$D/mount-t.sha"
	check "an fstab line mounts with mount -T FSTAB MOUNTPOINT" \
		test "$(tr -s ' ' <"$D/fstab.findmnt")" = "$D/sh fuse.batchfs"
	check "... the same bytes" cmp "$D/ref.sha" "$D/fstab.sha"
fi

env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory uninstall \
	DESTDIR="$R" PREFIX=/usr/local BUILD="$BUILD" >"$D/uninstall.out" 2>&1 ||
	not_ok "make uninstall: $(tail -3 "$D/uninstall.out")"
check "make uninstall leaves no file behind: $(find "$R" ! -type d | tr '\n' ' ')" \
	test -z "$(find "$R" ! -type d)"
t_end
