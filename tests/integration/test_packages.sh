#!/usr/bin/env bash
# The Debian package proven on a fresh Debian 12 root, not on this machine:
# a minimal root made by debootstrap (Debian's packages only; cached in
# $BFS_TEST_ROOT_CACHE, /var/cache/batchfs-test-root, and reused), then,
# in a copy-on-write overlay of it inside a private mount namespace:
# `apt-get install ./batchfs_*.deb fuse3 python3-numpy man-db`, with every
# dependency resolved from Debian; a mount of shards made here and a batch
# read with np.load; `man batchfs`; `mount -t fuse.batchfs` and unmount;
# `apt-get purge batchfs`, and nothing of it left.  Then the wheel, in a
# second overlay of the same root without the .deb: `pip install` of
# `make wheel`'s wheel into a venv (numpy from Debian, nothing from PyPI);
# the `batchfs` command saying that libfuse3 is missing until fuse3 is
# installed; then the same mount and read, and batchfs.Mount using the
# wheel's own program.
#
# Safety: /dev and /proc are bound into the root only inside the private
# namespace (`unshare --mount --propagation private`), so they vanish with
# it and the machine never sees them; nothing is removed while
# /proc/mounts shows a mount under it.  Skipped, with the reason, without
# root, unshare, debootstrap, dpkg-buildpackage, /dev/fuse, or a Debian
# mirror to build the root from.
set -u
BUILD=${BUILD:-build}
BATCHFS=${BATCHFS:-$PWD/$BUILD/batchfs}
MKJPEG=${MKJPEG:-$PWD/$BUILD/tests/mkjpeg}
CACHE=${BFS_TEST_ROOT_CACHE:-/var/cache/batchfs-test-root}
MIRROR=${BFS_TEST_MIRROR:-http://deb.debian.org/debian}
ROOT=$CACHE/bookworm
FAILED=0

skip() { echo "skip test_packages: $*"; exit 0; }
ok() { echo "ok $*"; }
not_ok() { echo "not ok $*"; FAILED=1; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, a private mount namespace)"
for c in unshare debootstrap dpkg-buildpackage chroot; do
	command -v "$c" >/dev/null || skip "no $c here (make package-deps)"
done
[ -e /dev/fuse ] || skip "no /dev/fuse on this machine"
unshare --mount --propagation private true 2>/dev/null ||
	skip "cannot make a private mount namespace here"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null
grep -qw overlay /proc/filesystems || skip "no overlayfs for a copy of the root"

# Whether anything is mounted at or under $1 (in this namespace).
mounted_under() {
	awk -v p="$1" '$2 == p || index($2, p "/") == 1 { f = 1 } END { exit !f }' /proc/mounts
}

# Remove $1 only when nothing is mounted under it.
safe_rm() {
	if mounted_under "$1"; then
		echo "test_packages: NOT removing $1: something is mounted under it" >&2
		return 1
	fi
	rm -rf "$1"
}

T=$(mktemp -d /tmp/batchfs-pkgtest.XXXXXX)
cleanup() {
	# the namespace's processes end with it; its mounts go with them
	[ -n "${NS_PID:-}" ] && kill "$NS_PID" 2>/dev/null && wait "$NS_PID" 2>/dev/null
	safe_rm "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the root: made once, then reused ------------------------------------
if [ ! -e "$ROOT/.batchfs-root-ok" ]; then
	echo "# test_packages: making a Debian 12 root in $ROOT (once; a few minutes)" >&2
	mkdir -p "$CACHE"
	NEW=$(mktemp -d "$CACHE/new.XXXXXX")
	# debootstrap mounts /proc and /sys in the target itself: in a
	# namespace of its own, those mounts end with it whatever happens
	if ! unshare --mount --propagation private \
		debootstrap --variant=minbase bookworm "$NEW" "$MIRROR" >"$T/debootstrap.log" 2>&1; then
		tail -5 "$T/debootstrap.log" >&2
		safe_rm "$NEW"
		skip "debootstrap of bookworm from $MIRROR failed (no network to a Debian mirror?)"
	fi
	# the package lists, so that each run only downloads what it installs
	cp /etc/resolv.conf "$NEW/etc/resolv.conf" 2>/dev/null
	if ! unshare --mount --propagation private sh -c '
		mount -t proc proc "$1/proc" && chroot "$1" apt-get update -qq' sh "$NEW" \
		>>"$T/debootstrap.log" 2>&1; then
		tail -5 "$T/debootstrap.log" >&2
		safe_rm "$NEW"
		skip "apt-get update in the new root failed (no network to a Debian mirror?)"
	fi
	touch "$NEW/.batchfs-root-ok"
	safe_rm "$ROOT" && mv "$NEW" "$ROOT"
fi
mkdir -p "$CACHE/archives/partial" # downloaded .debs, kept between runs

# ---- what goes in: the package, and shards made here -----------------------
if ! make --no-print-directory deb GPU=0 BUILD="$BUILD" >"$T/deb.log" 2>&1; then
	tail -20 "$T/deb.log"
	not_ok "make deb: see above"
	exit 1
fi
DEB=$(ls "$BUILD"/deb/batchfs_*.deb | head -1)
ok "make deb built $(basename "$DEB")"
WHEEL=
if ! python3 -c 'import auditwheel' 2>/dev/null || ! command -v patchelf >/dev/null; then
	echo "skip test_packages_wheel: no auditwheel or patchelf here (make wheel-deps)"
# The wheel's program is built in a folder of its own without sanitizers
# (a wheel of the ASan build would need libasan first in every process),
# and with none of the make flags that `make test SAN=...` passes down.
elif env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory wheel \
	BUILD="$BUILD/wheel-build" SAN= >"$T/wheel.log" 2>&1; then
	WHEEL=$(ls "$BUILD"/wheel-build/wheel/batchfs-*.whl | head -1)
	ok "make wheel built $(basename "$WHEEL")"
	cp "$WHEEL" "$T/"
else
	tail -20 "$T/wheel.log"
	not_ok "make wheel: see above"
fi
"$MKJPEG" "$T/jpegs" --classes 2 --per-class 12 --seed 3 >/dev/null &&
	"$BATCHFS" mkshards "$T/jpegs" "$T/shards" --per-shard 10 --quiet ||
	{ not_ok "test shards"; exit 1; }
cp "$DEB" "$T/"
mkdir -p "$T/deb"
mv "$T"/batchfs_*.deb "$T/deb/"

# ---- inside the root --------------------------------------------------------
# The script runs in the chroot; each check prints ok/not ok.
cat >"$T/inside.sh" <<'INSIDE'
set -u
ok() { echo "ok $*"; }
not_ok() { echo "not ok $*"; }
check() { local n=$1; shift; local o; if o=$("$@" 2>&1); then ok "$n"; else not_ok "$n: $(printf '%s' "$o" | tail -3 | tr '\n' ' ')"; fi; }
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
cd /pkg
install() { apt-get install -y -qq --no-install-recommends ./batchfs_*.deb fuse3 python3-numpy man-db; }
if ! install >/pkg/apt.log 2>&1; then
	apt-get update -qq >>/pkg/apt.log 2>&1 # the cached lists went stale
	install >>/pkg/apt.log 2>&1 || { not_ok "apt-get install ./batchfs_*.deb: $(tail -3 /pkg/apt.log | tr '\n' ' ')"; exit 1; }
fi
ok "apt-get install ./batchfs_*.deb resolved its dependencies from Debian"
dpkg -L batchfs >/pkg/files.txt
check "the package installs batchfs, the /sbin helpers, man pages, completion" sh -c '
	for f in /usr/bin/batchfs /sbin/mount.batchfs /sbin/mount.fuse.batchfs \
		/usr/share/man/man1/batchfs.1.gz /usr/share/man/man8/mount.batchfs.8.gz \
		/usr/share/bash-completion/completions/batchfs; do
		[ -e "$f" ] || { echo "missing $f"; exit 1; }; done'
check "batchfs runs, at the package's version" sh -c 'batchfs --version | grep -q "^batchfs $(dpkg-query -W -f="\${Version}" batchfs) "'
check "man batchfs shows the page" sh -c 'man -P cat batchfs 2>/dev/null | grep -q "batchfs mount"'
check "man mount.fuse.batchfs shows the helper's page" sh -c 'man -P cat 8 mount.fuse.batchfs 2>/dev/null | grep -q "mount(8) helper"'
mkdir -p /mnt/b /mnt/c
check "batchfs mount of the shards" batchfs mount /pkg/shards /mnt/b --size 32 --batch 8 --cache none
check "np.load reads a batch: 8 images of 32x32x3, labels 0 and 1" python3 -c '
import numpy as np
x = np.load("/mnt/b/epoch-0000/batch-000000.npy")
y = np.load("/mnt/b/epoch-0000/batch-000000.labels.npy")
assert x.shape == (8, 32, 32, 3) and x.dtype == np.float32, x.shape
assert 0 <= x.min() and x.max() <= 1 and x.std() > 0
assert set(y.tolist()) <= {0, 1}, y
'
check "batchfs unmount" batchfs unmount /mnt/b
check "mount -t fuse.batchfs, through /sbin/mount.fuse.batchfs" \
	mount -t fuse.batchfs /pkg/shards /mnt/c -o size=32x32,batch=8,cache=none
check "...is a fuse.batchfs mount that reads" sh -c '
	awk "\$2 == \"/mnt/c\" && \$3 == \"fuse.batchfs\" { f = 1 } END { exit !f }" /proc/mounts &&
	python3 -c "import numpy as np; assert np.load(\"/mnt/c/epoch-0000/batch-000001.npy\").shape == (8, 32, 32, 3)"'
check "umount /mnt/c" umount /mnt/c
check "apt-get purge batchfs" apt-get purge -y -qq batchfs
check "nothing of the package is left" sh -c '
	st=$(dpkg-query -W -f="\${db:Status-Status}" batchfs 2>/dev/null)
	[ -z "$st" ] || [ "$st" = not-installed ] || { echo "dpkg says: $st"; exit 1; }
	while read -r f; do
		[ -d "$f" ] && continue
		[ -e "$f" ] || [ -L "$f" ] && { echo "left: $f"; exit 1; }
	done < /pkg/files.txt
	[ ! -e /var/lib/dpkg/info/batchfs.list ] || { echo "left: its dpkg list"; exit 1; }'
INSIDE

cat >"$T/inside_wheel.sh" <<'INSIDE'
set -u
ok() { echo "ok $*"; }
not_ok() { echo "not ok $*"; }
check() { local n=$1; shift; local o; if o=$("$@" 2>&1); then ok "wheel: $n"; else not_ok "wheel: $n: $(printf '%s' "$o" | tail -3 | tr '\n' ' ')"; fi; }
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
cd /pkg
apt_in() { apt-get install -y -qq --no-install-recommends "$@" >>/pkg/apt.log 2>&1 ||
	{ apt-get update -qq >>/pkg/apt.log 2>&1; apt-get install -y -qq --no-install-recommends "$@" >>/pkg/apt.log 2>&1; }; }
apt_in python3-venv python3-numpy || { not_ok "wheel: apt-get install python3-venv python3-numpy"; exit 1; }
check "no batchfs package in this root" sh -c '! dpkg-query -W -f="\${db:Status-Status}" batchfs 2>/dev/null | grep -q installed'
python3 -m venv --system-site-packages /opt/v
check "pip install of the wheel into a venv, nothing from PyPI" \
	/opt/v/bin/pip install --no-index --disable-pip-version-check -q /pkg/batchfs-*.whl
out=$(/opt/v/bin/batchfs --version 2>&1); rc=$?
check "without fuse3 the batchfs command says libfuse3 is missing, and how to get it" \
	sh -c "[ $rc -eq 1 ] && printf '%s' \"\$1\" | grep -q 'libfuse3.so.3 is not installed.*apt-get install fuse3'" sh "$out"
apt_in fuse3 || { not_ok "wheel: apt-get install fuse3"; exit 1; }
check "with fuse3 it runs, at the wheel's version" sh -c '/opt/v/bin/batchfs --version | grep -q "^batchfs $(/opt/v/bin/python -c "import batchfs; print(batchfs.__version__)") "'
mkdir -p /mnt/w /mnt/x
check "batchfs mount of the shards, by the console script" \
	/opt/v/bin/batchfs mount /pkg/shards /mnt/w --size 32 --batch 8 --cache none
check "np.load reads a batch" /opt/v/bin/python -c '
import numpy as np
x = np.load("/mnt/w/epoch-0000/batch-000002.npy")
assert x.shape == (8, 32, 32, 3) and x.std() > 0, x.shape
'
check "batchfs unmount" /opt/v/bin/batchfs unmount /mnt/w
check "batchfs.Mount runs the wheel's own program, and reads" env -u BATCHFS /opt/v/bin/python -c '
import os, numpy as np, batchfs, batchfs._where as w
with batchfs.Mount("/pkg/shards", "/mnt/x", size=32, batch=8, cache="none") as m:
    assert os.path.realpath(m.program) == os.path.realpath(w.WHEEL_PROGRAM), m.program
    assert "/site-packages/batchfs/_bin/" in m.program, m.program
    assert np.load(m.epoch_dir(0) + "/batch-000000.npy").shape == (8, 32, 32, 3)
'
check "the mount is gone with the with block" sh -c '! awk "\$2 == \"/mnt/x\"" /proc/mounts | grep -q .'
INSIDE

# The namespace: an overlay of the cached root (which stays as it is), the
# machine's /dev and a new /proc bound in, then the script in the chroot.
cat >"$T/ns.sh" <<'NS'
set -eu
T=$1 ROOT=$2 CACHE=$3 PHASE=$4 SCRIPT=$5
M=$T/$PHASE/merged
mkdir -p "$T/$PHASE/upper" "$T/$PHASE/work" "$M"
mount -t overlay overlay -o "lowerdir=$ROOT,upperdir=$T/$PHASE/upper,workdir=$T/$PHASE/work" "$M"
mount --rbind /dev "$M/dev"
mount --make-rslave "$M/dev"
mount -t proc proc "$M/proc"
mount -t tmpfs tmpfs "$M/tmp"
mount -t tmpfs tmpfs "$M/run"
mount --bind "$CACHE/archives" "$M/var/cache/apt/archives"
mkdir -p "$M/pkg"
cp /etc/resolv.conf "$M/etc/resolv.conf" 2>/dev/null || true
cp -r "$T/shards" "$T/$SCRIPT" "$M/pkg/"
[ "$PHASE" = deb ] && cp "$T"/deb/batchfs_*.deb "$M/pkg/"
[ "$PHASE" = wheel ] && cp "$T"/batchfs-*.whl "$M/pkg/"
set +e
# A clean environment: nothing of the host (BATCHFS, PYTHONPATH, XDG_*)
# may help the installed package find its way.
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root LANG=C.UTF-8 chroot "$M" bash "/pkg/$SCRIPT"
rc=$?
cp "$M/pkg/apt.log" "$T/apt-$PHASE.log" 2>/dev/null
# leave nothing mounted in the root (the namespace ends anyway)
for m in /mnt/b /mnt/c /mnt/w /mnt/x; do
	mountpoint -q "$M$m" && umount -l "$M$m"
done
umount "$M/var/cache/apt/archives" "$M/run" "$M/tmp" "$M/proc"
umount -R "$M/dev"
umount "$M"
exit $rc
NS
# in_root PHASE SCRIPT: one phase in its own namespace and overlay, with a
# deadline, so a wedged install cannot hang the suite; its lines to out.txt
in_root() {
	unshare --mount --propagation private bash "$T/ns.sh" "$T" "$ROOT" "$CACHE" "$1" "$2" \
		>"$T/out-$1.txt" 2>&1 &
	NS_PID=$!
	for i in $(seq 1 6000); do
		kill -0 "$NS_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$NS_PID" 2>/dev/null; then
		echo "not ok $1: the checks in the root did not finish within 10 minutes" >>"$T/out-$1.txt"
		kill "$NS_PID"
	fi
	wait "$NS_PID" 2>/dev/null
	NS_PID=
	cat "$T/out-$1.txt"
	grep -q '^not ok' "$T/out-$1.txt" && FAILED=1
}
in_root deb inside.sh
grep -q '^ok nothing of the package is left' "$T/out-deb.txt" || FAILED=1
if [ -n "$WHEEL" ]; then
	in_root wheel inside_wheel.sh
	grep -q '^ok wheel: the mount is gone' "$T/out-wheel.txt" || FAILED=1
fi
exit "$FAILED"
