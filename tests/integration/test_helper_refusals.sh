#!/usr/bin/env bash
# mount(8)'s helper and `batchfs mount` refuse what would mislead or write
# where they should not (issue 23, 13): -o help (usage, exit 0, nothing
# mounted), an abbreviated option (-o f was --format taking '--'),
# subtype= (the type stays fuse.batchfs), a cache directory that holds
# someone else's files, a log path that is a directory, a --slot-dir that
# is not a tmpfs.  Nothing is written into the directories refused.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 1 --per-class 8 --seed 4 --min-size 24 \
	--max-size 48 >/dev/null || { not_ok "mkjpeg"; t_end; }
mkdir -p "$D/m" "$D/bin"
# the helper is the batchfs binary called as mount.batchfs
ln -s "$BATCHFS" "$D/bin/mount.batchfs"
H=$D/bin/mount.batchfs
BASE=batch=4,size=16x16,threads=1

# refused: exit $2 of "$H" ..., message $3, nothing mounted
refused() {
	local name=$1 want=$2
	shift 2
	local out rc
	out=$(timeout 60 "$@" 2>&1)
	rc=$?
	if [ "$rc" != 0 ] && [ "$rc" != 124 ] && printf '%s' "$out" | grep -q -- "$want" &&
		! mountpoint -q "$D/m"; then
		ok "$name"
	else
		not_ok "$name (exit $rc): $out"
		mountpoint -q "$D/m" && "$BATCHFS" unmount "$D/m" >/dev/null 2>&1
	fi
}

refused "-o help is refused (exit non-zero), nothing mounted" "'help' is not a mount option" \
	"$H" "$D/jpegs" "$D/m" -o "$BASE,help"
refused "-o f is not --format: an abbreviation is refused" "unknown option '--f'" \
	"$H" "$D/jpegs" "$D/m" -o "$BASE,f"
refused "batchfs mount --thr 1 too" "unknown option '--thr'" \
	"$BATCHFS" mount "$D/jpegs" "$D/m" --thr 1
refused "subtype= is refused: the type stays fuse.batchfs" "always of type fuse.batchfs" \
	"$H" "$D/jpegs" "$D/m" -o "$BASE,fsname=/etc/passwd,subtype=ext4"
refused "batchfs mount -o subtype= too" "of type fuse.batchfs" \
	"$BATCHFS" mount "$D/jpegs" "$D/m" -o subtype=ext4

# a directory of someone else's files is not a cache directory
mkdir -p "$D/etc"
echo "root:x:0:0" >"$D/etc/passwd"
refused "cache= a directory of other files is refused, naming one" \
	"holds files that are not a batchfs cache ('passwd' among them)" \
	"$H" "$D/jpegs" "$D/m" -o "$BASE,cache=$D/etc"
check "... and nothing was written there" \
	test "$(ls -A "$D/etc")" = passwd
mkdir -p "$D/logdir"
refused "log= a directory is refused" "log path $D/logdir is a directory" \
	"$H" "$D/jpegs" "$D/m" -o "$BASE,cache=none,log=$D/logdir"
check "... and nothing was written there" test -z "$(ls -A "$D/logdir")"
# this test's own directory is under /tmp: a tmpfs here would be skipped
if [ "$(stat -f -c %T "$D")" = tmpfs ]; then
	echo "skip slot_dir_not_tmpfs: $D is itself a tmpfs"
else
	mkdir -p "$D/slots"
	refused "slot_dir= a directory that is not a tmpfs is refused" \
		"--slot-dir $D/slots is not a tmpfs" \
		"$H" "$D/jpegs" "$D/m" -o "$BASE,cache=none,slot_dir=$D/slots"
fi

# what is still taken: fsname (the type stays fuse.batchfs), a new cache
# directory, a batchfs cache directory again, an empty one
mkdir -p "$D/empty"
for c in "$D/newcache" "$D/newcache" "$D/empty"; do
	out=$(timeout 60 "$H" "$D/jpegs" "$D/m" -o "$BASE,cache=$c,fsname=/etc/passwd,log=$D/daemon.log" 2>&1)
	rc=$?
	T_MOUNTS+=("$D/m")
	check "cache=$c and fsname= mount: $out" test "$rc" = 0
	check "... as type fuse.batchfs, whatever fsname says" \
		test "$(findmnt -n -o SOURCE,FSTYPE "$D/m" | tr -s ' ')" = "/etc/passwd fuse.batchfs"
	check "... serves a batch" bash -c \
		"head -c 6 '$D/m/epoch-0000/batch-000000.npy' | od -An -c | tr -d ' ' | grep -qx '223NUMPY'"
	check "... and unmounts" "$BATCHFS" unmount "$D/m"
done
check "the cache directory holds a batchfs cache" test -s "$D/newcache/data.mdb"
t_end
