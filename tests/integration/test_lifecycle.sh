#!/usr/bin/env bash
# The daemon's life: relative paths, the stop signals systemd and container
# runtimes send, and `batchfs unmount` returning only once the daemon is
# gone.  The daemon works from / once detached, so a relative mount point
# it kept as given would name another file system there: the test puts one
# exactly where the relative name leads from /.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/w/shards" --classes 1 --per-class 12 --seed 5 >/dev/null ||
	{ not_ok "mkjpeg"; t_end; }
OPTS=(--batch 4 --size 32x32 --threads 1 --cache none)

# wait_gone PID: up to 10 s for a process to exit; 0 if it did.
wait_gone() {
	local i
	for i in $(seq 1 100); do
		alive "$1" || return 0
		sleep 0.1
	done
	return 1
}

if [ "$(id -u)" != 0 ]; then
	echo "skip signals_unmount_exactly_the_batchfs_mount: mounting the decoy tmpfs needs root"
else
	# From /, the relative name REL reaches $D/decoy; from $D/w it reaches
	# $D/w/$REL, the batchfs mount point.
	REL=${D#/}/decoy
	mkdir -p "$D/decoy" "$D/w/$REL"
	mount -t tmpfs -o size=1m batchfs-test-decoy "$D/decoy" ||
		{ not_ok "mount the decoy tmpfs"; t_end; }
	touch "$D/decoy/still-here"
	T_MOUNTS+=("$D/w/$REL")
	for sig in TERM INT HUP; do
		out=$(cd "$D/w" && "$BATCHFS" mount shards "$REL" "${OPTS[@]}" 2>&1) ||
			{ not_ok "relative mount for SIG$sig: $out"; continue; }
		pid=$(getfattr --only-values -n user.batchfs.pid "$D/w/$REL" 2>/dev/null)
		if [ -z "$pid" ] || ! alive "$pid"; then
			not_ok "the mount root names its daemon's pid (user.batchfs.pid): '$pid'"
			continue
		fi
		cat "$D/w/$REL/epoch-0000/batch-000001.npy" >/dev/null ||
			not_ok "read before SIG$sig"
		kill -"$sig" "$pid"
		if ! wait_gone "$pid"; then
			not_ok "SIG$sig: the daemon exits"
			kill -9 "$pid"
			continue
		fi
		check "SIG$sig leaves the file system the relative name reaches from / mounted" \
			test -e "$D/decoy/still-here"
		check "SIG$sig unmounts the batchfs mount itself" \
			bash -c "! mountpoint -q '$D/w/$REL' && ls '$D/w/$REL' >/dev/null"
		mountpoint -q "$D/decoy" || mount -t tmpfs -o size=1m batchfs-test-decoy "$D/decoy"
		touch "$D/decoy/still-here"
	done
	umount "$D/decoy"
fi

# `batchfs unmount` returns once the daemon has exited: a cache that is
# written while the mount is read must be closed by then.
mkdir -p "$D/m"
out=$("$BATCHFS" mount "$D/w/shards" "$D/m" --batch 4 --size 32x32 --threads 1 \
	--cache "$D/cache" 2>&1) || { not_ok "mount with a cache: $out"; t_end; }
T_MOUNTS+=("$D/m")
pid=$(getfattr --only-values -n user.batchfs.pid "$D/m" 2>/dev/null)
cat "$D"/m/epoch-0000/*.npy >/dev/null
"$BATCHFS" unmount "$D/m" >"$D/unmount.out" 2>&1
rc=$?
running=0
alive "$pid" && running=1
check "batchfs unmount exits 0" test "$rc" = 0
check "batchfs unmount returns after the daemon (pid $pid) has exited" test "$running" = 0
check "no process holds the cache directory after unmount" bash -c "
	for f in /proc/[0-9]*/fd/*; do
		case \$(readlink \"\$f\" 2>/dev/null) in '$D/cache'/*) exit 1 ;; esac
	done; exit 0"
wait_gone "$pid" || kill -9 "$pid" 2>/dev/null

# A relative mount point given to `batchfs unmount` is the same mount.
mkdir -p "$D/m2"; T_MOUNTS+=("$D/m2")
out=$(cd "$D/w" && "$BATCHFS" mount shards ../m2 "${OPTS[@]}" 2>&1 && "$BATCHFS" unmount ../m2 2>&1)
check "mount and unmount with relative paths: $out" bash -c "! mountpoint -q '$D/m2'"
t_end
