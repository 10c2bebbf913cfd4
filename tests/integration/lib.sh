# Shared helpers for the integration tests: a private temp dir, real FUSE
# mounts in the foreground with a readiness deadline, and a trap that
# unmounts whatever a test mounted.  Source it; then call `t_begin`.
set -u
BATCHFS=${BATCHFS:-$PWD/build/batchfs}
MKJPEG=${MKJPEG:-$PWD/build/tests/mkjpeg}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
T_MOUNTS=()
T_PIDS=()
T_FAILED=0

t_cleanup() {
	[ -n "${KEEP:-}" ] && cp "$T_DIR/mount.log" /tmp/last-mount.log 2>/dev/null
	local m p
	for m in "${T_MOUNTS[@]+"${T_MOUNTS[@]}"}"; do
		if mountpoint -q "$m" 2>/dev/null; then
			fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
		fi
	done
	for p in "${T_PIDS[@]+"${T_PIDS[@]}"}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -n "${T_DIR:-}" ] && rm -rf "$T_DIR"
}

t_begin() {
	T_DIR=$(mktemp -d /tmp/batchfs-test.XXXXXX)
	# each test gets a private default sample cache, never the user's
	export XDG_CACHE_HOME="$T_DIR/xdg-cache"
	trap t_cleanup EXIT
	trap 'exit 130' INT TERM
	if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
		echo "skip $(basename "$0" .sh): no /dev/fuse or fusermount3 on this machine"
		exit 0
	fi
}

ok() { echo "ok $*"; }
not_ok() { echo "not ok $*"; T_FAILED=1; }
# check NAME CMD...: ok if CMD succeeds.
check() {
	local name=$1
	shift
	local out
	if out=$("$@" 2>&1); then
		ok "$name"
	else
		not_ok "$name: $(printf '%s' "$out" | tail -5 | tr '\n' ' ')"
	fi
}

# mount_fg SRC MNT [options...]: start `batchfs mount -f` in the background
# and wait (deadline 60 s) until the mount answers; sets MOUNT_PID.
mount_fg() {
	local src=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	"$BATCHFS" mount -f "$src" "$mnt" "$@" >>"$T_DIR/mount.log" 2>&1 &
	MOUNT_PID=$!
	T_PIDS+=("$MOUNT_PID")
	T_MOUNTS+=("$mnt")
	local i
	for i in $(seq 1 600); do
		if mountpoint -q "$mnt" && [ -e "$mnt/dataset.json" ]; then
			return 0
		fi
		if ! kill -0 "$MOUNT_PID" 2>/dev/null; then
			echo "mount of $src exited early:" >&2
			tail -5 "$T_DIR/mount.log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "mount of $src not ready after 60 s" >&2
	return 1
}

# unmount_wait MNT: unmount and wait for the foreground daemon to exit.
unmount_wait() {
	local mnt=$1
	"$BATCHFS" unmount "$mnt" >/dev/null 2>&1 || fusermount3 -u "$mnt" 2>/dev/null
	if [ -n "${MOUNT_PID:-}" ]; then
		local i
		for i in $(seq 1 100); do
			kill -0 "$MOUNT_PID" 2>/dev/null || break
			sleep 0.1
		done
	fi
}

# alive PID: the process runs (a zombie that no one reaped yet has exited).
alive() {
	[ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

t_end() {
	exit "$T_FAILED"
}
