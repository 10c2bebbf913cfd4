#!/usr/bin/env bash
# The memory budget stays within what the machine can give.  Before, a
# default --mem grew to hold four batches whatever their size: --augment
# rrc --size-schedule 64@0,10000x10000@1 --batch 16 made a 73,258 MiB
# budget on a 23 GiB machine, reading epoch 1 grew /dev/shm (slot files)
# to 23.9 GB and the OOM killer ended other users' processes; the mount
# message said "less than --mem 1024 MiB" of a budget grown past that;
# and batches that failed for memory ("out of memory for a batch", EIO)
# left errors_total at 0.  Nothing here allocates much: refusals happen at
# mount, budgets are read from stats.json before any batch is read.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/src" --classes 2 --per-class 4 --seed 5 >/dev/null || { not_ok "mkjpeg"; t_end; }
mib() { awk -v k="$1" '$1 == k":" { print int($2 / 1024) }' /proc/meminfo; }
total=$(mib MemTotal)

# ---- settings that cannot fit are refused at mount -------------------------
# refused SETTING...: exit 1, the message names --mem and the MiB needed,
# nothing mounted
refused() {
	local name=$1 mnt=$D/r$((++nref))
	shift
	mkdir -p "$mnt"
	T_MOUNTS+=("$mnt")
	out=$("$BATCHFS" mount "$D/src" "$mnt" "$@" 2>&1)
	rc=$?
	if mountpoint -q "$mnt"; then
		budget=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['memory_budget'] >> 20)" "$mnt/stats.json" 2>/dev/null)
		not_ok "$name: mounted, memory_budget ${budget:-?} MiB on a $total MiB machine"
		"$BATCHFS" unmount "$mnt" >/dev/null 2>&1 || fusermount3 -u "$mnt"
	elif [ "$rc" != 1 ] || ! printf '%s' "$out" | grep -q -- "--mem.* [0-9][0-9]* MiB"; then
		not_ok "$name: rc $rc: $out"
	else
		ok "$name: refused at mount ($(printf '%s' "$out" | cut -c1-160)...)"
	fi
}
nref=0
# one batch of epoch 1 is 18,311 MiB: refused unless two fit in half the RAM
if [ "$total" -lt 84000 ]; then
	refused "--size-schedule 64@0,10000x10000@1 --batch 16" \
		--augment rrc --size-schedule 64@0,10000x10000@1 --batch 16 --cache none --epochs 2
fi
refused "--size 16384x16384 --batch 65536" --size 16384x16384 --batch 65536 --cache none
refused "--augment rrc --cache-res 65535 --batch 65536" --augment rrc --cache-res 65535 --batch 65536
refused "--mem above the machine's RAM" --mem "$((total * 2))M" --cache none
refused "--mem 8G with batches of 96 GiB" --mem 8G --size 16384x16384 --batch 32 --cache none

# ---- a default budget that grows stays within the machine's share ----------
# One batch of a third of the cap: before, the budget grew to four of them
# (4/3 of the cap); now it stops at the cap.
avail0=$(mib MemAvailable)
cap=$(( (total < avail0 ? total : avail0) / 2 ))
slot=$((cap * 2 / 7))                      # MiB: 2/7 of the cap
b=$(( (slot + 3071) / 3072 ))              # 16384x16384 float32 is 3072 MiB
side=$($PY -c "import math,sys; print(min(16384, int(math.sqrt(int(sys.argv[1]) * 2**20 / (12 * int(sys.argv[2]))))))" "$slot" "$b")
mount_fg "$D/src" "$D/big" --size "${side}x${side}" --batch "$b" --cache none --threads 2 ||
	{ not_ok "mount --size ${side}x${side} --batch $b"; t_end; }
avail1=$(mib MemAvailable)
check "default --mem with batches of $slot MiB: memory_budget within half of RAM and of what is available" \
	$PY - "$D/big" "$total" "$avail0" "$avail1" "$slot" <<'PY'
import json, sys
mnt, total, a0, a1, slot = sys.argv[1], *map(int, sys.argv[2:])
s = json.load(open(mnt + "/stats.json"))
budget = s["memory_budget"] >> 20
assert budget <= total // 2, (budget, total)
assert budget <= max(a0, a1) // 2 + 64, (budget, a0, a1)
assert s["memory_budget"] <= s["memory_cap"], (s["memory_budget"], s["memory_cap"])
assert s["slots"]["total"] >= 2, s["slots"]
assert budget >= 2 * slot, (budget, slot)
PY
grep -F "on $D/big:" "$T_DIR/mount.log" >"$D/msg" || true
check "  the mount message states that budget" $PY - "$D/big" "$D/msg" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
msg = open(sys.argv[2]).read()
want = "memory %d MiB (default)" % (s["memory_budget"] >> 20)
assert want in msg, (want, msg)
PY
unmount_wait "$D/big"

# ---- a slot directory without room: passthrough off, the real budget named --
mkdir -p "$D/shm"
if mount -t tmpfs -o size=1g tmpfs "$D/shm"; then
	T_MOUNTS+=("$D/shm")
	# batches of 256 MiB: the default budget grows to four (1 GiB and more)
	mount_fg "$D/src" "$D/sd" --size 4096x4096 --batch 1 --cache none --threads 1 --slot-dir "$D/shm" ||
		{ not_ok "mount --slot-dir"; t_end; }
	grep -F "on $D/sd:" "$T_DIR/mount.log" >"$D/msg2" || true
	check "--slot-dir with 1 GiB: passthrough off, naming the budget it has no room for" \
		$PY - "$D/sd" "$D/msg2" "$D/shm" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
msg = open(sys.argv[2]).read()
budget = s["memory_budget"] >> 20
assert s["passthrough"] is False, s["passthrough"]
assert budget > 768, budget
want = "passthrough off (%s has 1024 MiB free, less than --mem %d MiB" % (sys.argv[3], budget)
assert want in msg, (want, msg)
PY
	unmount_wait "$D/sd"
	umount "$D/shm"
else
	echo "skip --slot-dir check: cannot mount a tmpfs here"
fi

# ---- a batch whose memory cannot be had counts as an error ----------------
# The daemon's address space is capped (prlimit) a little above what it
# uses once mounted: the first slots get memory, later ones do not.
if [ -n "${ASAN_OPTIONS:-}" ]; then
	echo "skip batch_memory_errors: an address-space limit and ASan's shadow memory do not mix"
else
	mount_fg "$D/src" "$D/oom" --size 1024x1024 --batch 2 --mem 1G --cache none --threads 1 \
		--no-passthrough --epochs 4 || { not_ok "mount oom"; t_end; }
	vm=$(awk '/^VmSize:/ { print $2 }' "/proc/$MOUNT_PID/status")
	prlimit --pid "$MOUNT_PID" --as=$(( (vm + 160 * 1024) * 1024 ))
	failed=0
	for f in "$D"/oom/epoch-*/batch-*[0-9].npy; do
		cat "$f" >/dev/null 2>&1 || failed=$((failed + 1))
	done
	check "batches that get no memory fail ($failed reads) and each counts in errors_total" \
		$PY - "$D/oom" "$failed" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
failed = int(sys.argv[2])
assert failed >= 1, "no read failed: the limit did not bite"
assert s["errors_total"] >= 1, s["errors_total"]
assert s["batch_memory_errors"] >= 1, s.get("batch_memory_errors")
assert s["errors_total"] >= s["batch_memory_errors"], (s["errors_total"], s["batch_memory_errors"])
PY
	unmount_wait "$D/oom"
fi

# ---- libfuse's request buffer cannot be had ------------------------------------
# A worker's request buffer (256 pages and a page of header: libfuse 3's
# FUSE_MAX_MAX_PAGES) is refused (tests/tools/preload/failmalloc.c).
# libfuse's own loop ended the whole loop then, and dropped a request
# another worker read at that moment: its reader waited forever (a CI run
# of test_budget's address-space case).  fs/loop.c's workers go on.
if [ -n "${ASAN_OPTIONS:-}" ]; then
	echo "skip request buffer: a preloaded malloc and the sanitizers' runtime do not mix"
else
	bufsize=$(( 257 * $(getconf PAGESIZE) ))
	mount_fg "$D/src" "$D/plain" --size 32x32 --batch 2 --cache none --threads 1 \
		--epochs 8 || { not_ok "mount plain"; t_end; }
	# the first worker's, three times
	if LD_PRELOAD="$PWD/$BUILD/tests/failmalloc.so" BFS_FAILMALLOC_SIZE=$bufsize \
		BFS_FAILMALLOC_COUNT=3 mount_fg "$D/src" "$D/nobuf" --size 32x32 --batch 2 \
		--cache none --threads 1; then
		check "libfuse's request buffer refused 3 times: the mount serves every batch, right" \
			cmp <(cat "$D"/plain/epoch-0000/batch-*[0-9].npy) \
			<(cat "$D"/nobuf/epoch-0000/batch-*[0-9].npy)
		check "...and the log says it waited the shortage out" \
			grep -q "out of memory for a FUSE request buffer: 0 threads serve meanwhile; trying again" \
			"$T_DIR/mount.log"
		unmount_wait "$D/nobuf"
	else
		not_ok "mount with libfuse's request buffer refused 3 times: $(tail -3 "$T_DIR/mount.log")"
	fi
	# every worker's but the first, while four readers read at once: each
	# read that finds the first worker busy wants another.  libfuse's loop
	# ended each time and could start no worker again (not even its
	# first): the mount served nothing until the refusals ran out.
	if LD_PRELOAD="$PWD/$BUILD/tests/failmalloc.so" BFS_FAILMALLOC_SIZE=$bufsize \
		BFS_FAILMALLOC_SKIP=1 BFS_FAILMALLOC_COUNT=100000 mount_fg "$D/src" "$D/onebuf" \
		--size 32x32 --batch 2 --cache none --threads 1 --epochs 8; then
		readers=()
		for r in 0 1 2 3; do
			( for e in 0 1 2 3 4 5 6 7; do
				cat "$D"/onebuf/epoch-000$e/batch-*[0-9].npy
			done >"$D/onebuf.$r" ) &
			readers+=("$!")
			T_PIDS+=("$!")
		done
		# a reader that waits forever on a dropped request would hang
		# the test: a bound far beyond the few seconds this takes
		for _ in $(seq 1 1200); do
			left=0
			for p in "${readers[@]}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
			[ $left -eq 0 ] && break
			sleep 0.1
		done
		check "every worker's buffer but the first refused, 4 readers at once: every read is answered ($left of 4 readers still waiting at the end)" \
			test $left -eq 0
		want=$(for e in 0 1 2 3 4 5 6 7; do cat "$D"/plain/epoch-000$e/batch-*[0-9].npy; done | md5sum)
		check "...with the right bytes, in each reader" \
			bash -c "for r in 0 1 2 3; do [ \"\$(md5sum <'$D/onebuf.'\$r)\" = '$want' ] || exit 1; done"
		check "...and the log says so, once" \
			bash -c "[ \$(grep -c 'out of memory for a FUSE request buffer: 1 thread serves meanwhile' '$T_DIR/mount.log') -eq 1 ]"
		unmount_wait "$D/onebuf"
	else
		not_ok "mount with every request buffer but the first refused: $(tail -3 "$T_DIR/mount.log")"
	fi
	unmount_wait "$D/plain"
fi
t_end
