#!/usr/bin/env bash
# A busy unmount names the processes that hold the mount (an open file, a
# mapping, a working directory) and leaves it mounted and serving;
# `unmount --lazy` detaches it at once, and the daemon exits when the last
# holder lets go.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 1 --per-class 8 --seed 4 --min-size 24 \
	--max-size 48 >/dev/null || { not_ok "mkjpeg"; t_end; }
mkdir -p "$D/m"
# without passthrough a mapping is of the mount's own file
out=$("$BATCHFS" mount "$D/jpegs" "$D/m" --batch 4 --size 16x16 --threads 1 \
	--cache none --no-passthrough 2>&1) || { not_ok "mount: $out"; t_end; }
T_MOUNTS+=("$D/m")
DAEMON=$(getfattr --only-values -n user.batchfs.pid "$D/m" 2>/dev/null)
T_PIDS+=("$DAEMON")

# three holders: a working directory, an open file, a mapping (fd closed)
(cd "$D/m/epoch-0000" && exec sleep 600) &
CWD=$!
$PY - "$D/m/epoch-0000/batch-000000.npy" "$D/open.ready" <<'PY' &
import sys, time
f = open(sys.argv[1], "rb")
open(sys.argv[2], "w").close()
time.sleep(600)
PY
OPEN=$!
$PY - "$D/m/epoch-0000/batch-000001.npy" "$D/map.ready" <<'PY' &
# mmap(2) itself: Python's mmap module would keep a dup of the descriptor
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDONLY)
p = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
os.close(fd)
assert p not in (None, ctypes.c_void_p(-1).value)
assert ctypes.string_at(p, 6) == b"\x93NUMPY"
open(sys.argv[2], "w").close()
time.sleep(600)
PY
MAP=$!
T_PIDS+=("$CWD" "$OPEN" "$MAP")
for i in $(seq 1 300); do
	[ -e "$D/open.ready" ] && [ -e "$D/map.ready" ] &&
		[ "$(readlink /proc/$CWD/cwd)" = "$D/m/epoch-0000" ] && break
	sleep 0.1
done

"$BATCHFS" unmount "$D/m" >"$D/busy.out" 2>"$D/busy.err"
rc=$?
check "a busy unmount fails (exit 1)" test "$rc" = 1
check "it names the process whose working directory is inside" \
	grep -q "sleep (pid $CWD: its working directory)" "$D/busy.err"
check "it names the process with an open file" \
	grep -Eq "python[0-9.]* \(pid $OPEN: an open file\)" "$D/busy.err"
check "it names the process with a mapping" \
	grep -Eq "python[0-9.]* \(pid $MAP: a mapped file\)" "$D/busy.err"
check "it says what to do: --lazy" grep -q "batchfs unmount --lazy $D/m" "$D/busy.err"
check "the message is one line" test "$(wc -l <"$D/busy.err")" = 1
check "the mount stays mounted and serving" \
	bash -c "mountpoint -q '$D/m' && test -s '$D/m/dataset.json'"
check "its daemon still runs" alive "$DAEMON"

"$BATCHFS" unmount --lazy "$D/m" >"$D/lazy.out" 2>"$D/lazy.err"
rc=$?
check "unmount --lazy succeeds (exit 0): $(cat "$D/lazy.err")" test "$rc" = 0
check "the mount point is detached at once" bash -c "! mountpoint -q '$D/m'"
check "it says the daemon exits once the holders let go" \
	grep -q "is detached; its daemon (pid $DAEMON) exits once .*sleep (pid $CWD" "$D/lazy.out"
check "the daemon still serves them through the detached mount" bash -c \
	"head -c 6 /proc/$CWD/cwd/batch-000001.npy | od -An -c | tr -d ' ' | grep -qx '223NUMPY'"
check "the daemon still runs" alive "$DAEMON"
kill "$CWD" "$OPEN" "$MAP" 2>/dev/null
wait "$CWD" "$OPEN" "$MAP" 2>/dev/null
gone=0
for i in $(seq 1 100); do alive "$DAEMON" || { gone=1; break; }; sleep 0.1; done
check "once they let go, the daemon exits" test "$gone" = 1

# a lazy unmount of a mount nobody holds
mkdir -p "$D/m2"
"$BATCHFS" mount "$D/jpegs" "$D/m2" --batch 4 --size 16x16 --threads 1 \
	--cache "$D/cache" >/dev/null 2>&1 || { not_ok "second mount"; t_end; }
T_MOUNTS+=("$D/m2")
P2=$(getfattr --only-values -n user.batchfs.pid "$D/m2" 2>/dev/null)
cat "$D/m2/epoch-0000/batch-000000.npy" >/dev/null
check "unmount --lazy of a mount nobody holds" "$BATCHFS" unmount --lazy "$D/m2"
check "... unmounts it" bash -c "! mountpoint -q '$D/m2'"
gone=0
for i in $(seq 1 100); do alive "$P2" || { gone=1; break; }; sleep 0.1; done
check "... and its daemon exits" test "$gone" = 1

# ---- only batchfs is unmounted (issue 23, 3): a tmpfs of this test's own
if [ "$(id -u)" != 0 ]; then
	echo "skip unmount_refuses_other_file_systems: mounting a tmpfs needs root"
else
	mkdir -p "$D/t1"
	mount -t tmpfs -o size=1m batchfs-test-tmpfs "$D/t1" || { not_ok "mount a tmpfs"; t_end; }
	T_MOUNTS+=("$D/t1")
	echo keep >"$D/t1/file"
	for how in "" --lazy; do
		"$BATCHFS" unmount $how "$D/t1" >"$D/t1.out" 2>"$D/t1.err"
		rc=$?
		check "unmount $how of a tmpfs fails (exit 1)" test "$rc" = 1
		check "... says what it is: $(cat "$D/t1.err")" \
			grep -qx "batchfs: $D/t1 is a tmpfs mount, not batchfs; nothing was unmounted" "$D/t1.err"
		check "... and leaves it mounted, its file there" \
			bash -c "mountpoint -q '$D/t1' && test \"\$(cat '$D/t1/file')\" = keep"
	done
	out=$("$BATCHFS" status "$D/t1" 2>&1)
	check "status of a tmpfs says it is not batchfs: $out" \
		bash -c "printf '%s' \"\$1\" | grep -q 'is not a batchfs mount (it is a tmpfs mount)'" _ "$out"
	umount "$D/t1"
fi

# ---- a stopped daemon (issue 23, 5): status and unmount say so, at once
mkdir -p "$D/m3"
"$BATCHFS" mount "$D/jpegs" "$D/m3" --batch 4 --size 16x16 --threads 1 \
	--cache none >/dev/null 2>&1 || { not_ok "third mount"; t_end; }
T_MOUNTS+=("$D/m3")
P3=$(getfattr --only-values -n user.batchfs.pid "$D/m3" 2>/dev/null)
T_PIDS+=("$P3")
kill -STOP "$P3"
# a deadline only against a hang: 30 s, far beyond the 3 s the probe waits
timeout 30 "$BATCHFS" status "$D/m3" >"$D/st.out" 2>"$D/st.err"
rc=$?
check "status of a stopped daemon's mount returns, exit 1 (not 124: a hang)" test "$rc" = 1
check "... and says the daemon is stopped: $(cat "$D/st.err")" \
	grep -q "its daemon $P3 is stopped (state T)" "$D/st.err"
timeout 30 "$BATCHFS" status --json "$D/m3" >"$D/stj.out" 2>"$D/stj.err"
rc=$?
check "status --json too (exit $rc)" test "$rc" = 1
check "... says so" grep -q "its daemon $P3 is stopped (state T)" "$D/stj.err"
timeout 30 "$BATCHFS" unmount "$D/m3" >"$D/um.out" 2>"$D/um.err"
rc=$?
check "unmount of a stopped daemon's mount returns, exit 1 (exit $rc)" test "$rc" = 1
check "... says the daemon is stopped, not busy: $(cat "$D/um.err")" \
	bash -c "grep -q 'its daemon $P3 is stopped (state T)' '$D/um.err' && ! grep -q busy '$D/um.err'"
check "... points at kill -CONT and --lazy" \
	bash -c "grep -q 'kill -CONT $P3' '$D/um.err' && grep -q 'batchfs unmount --lazy $D/m3' '$D/um.err'"
check "... and leaves it mounted" mountpoint -q "$D/m3"
kill -CONT "$P3"
check "once continued it serves" bash -c \
	"timeout 30 head -c 6 '$D/m3/epoch-0000/batch-000000.npy' | od -An -c | tr -d ' ' | grep -qx '223NUMPY'"
check "... status reads it" timeout 30 "$BATCHFS" status --interval 0.1 "$D/m3"
check "... and it unmounts" timeout 60 "$BATCHFS" unmount "$D/m3"
check "... its mount point free" bash -c "! mountpoint -q '$D/m3'"
if alive "$P3"; then not_ok "... its daemon exited"; else ok "... its daemon exited"; fi

# ---- a dead batchfs mount (its daemon killed) is still cleaned
mkdir -p "$D/m4"
"$BATCHFS" mount "$D/jpegs" "$D/m4" --batch 4 --size 16x16 --threads 1 \
	--cache none >/dev/null 2>&1 || { not_ok "fourth mount"; t_end; }
T_MOUNTS+=("$D/m4")
P4=$(getfattr --only-values -n user.batchfs.pid "$D/m4" 2>/dev/null)
kill -9 "$P4"
for i in $(seq 1 100); do alive "$P4" || break; sleep 0.1; done
check "a dead batchfs mount is unmounted: $("$BATCHFS" unmount "$D/m4" 2>&1)" \
	bash -c "! mountpoint -q '$D/m4'"
t_end
