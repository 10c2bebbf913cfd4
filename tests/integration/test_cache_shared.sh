#!/usr/bin/env bash
# One cache shared by mounts that disagree or misbehave (issue 23):
#  - mounts with different --cache-size on one cache: the smaller one's open
#    never cuts data.mdb under the larger one (that was a SIGBUS in it, or a
#    damaged cache), and each keeps to its own limit;
#  - a process stopped (SIGSTOP, a suspended job) in the middle of a cache
#    write: `batchfs cache clear` and `verify` name it and exit non-zero,
#    a new mount reads the cache without writing and says why, and nothing
#    waits past the lock wait;
#  - a --cache-size its file system cannot hold: said at mount, the first
#    drop is logged, and `batchfs status` shows it.
source "$(dirname "$0")/lib.sh"
t_begin
# a stopped process ignores SIGTERM until continued: continue ours first
trap 'for p in "${T_PIDS[@]+"${T_PIDS[@]}"}"; do kill -CONT "$p" 2>/dev/null; done; t_cleanup' EXIT
D=$T_DIR
CACHEHOLD=${CACHEHOLD:-$(dirname "$MKJPEG")/cachehold}
export BATCHFS_CACHE_LOCK_WAIT_MS=1000

"$MKJPEG" "$D/jpegs" --classes 2 --per-class 48 --seed 23 --min-size 90 \
	--max-size 200 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 12 --quiet || { not_ok mkshards; t_end; }
sums() { (cd "$1/epoch-0000" && for f in batch-*[0-9].npy; do printf '%s ' "$f"; md5sum <"$f"; done); }
json() { $PY -c "import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }
export PY
export -f json
state_of() { awk '{ sub(/.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null; }

A=(--batch 16 --size 128x128 --threads 1)
mount_fg "$D/shards" "$D/ref" "${A[@]}" --cache none || { not_ok "mount reference"; t_end; }
sums "$D/ref" >"$D/sums.ref"
unmount_wait "$D/ref"

# ---- 1. different --cache-size on one cache ----------------------------------
C=$D/cs
mount_fg "$D/shards" "$D/a" "${A[@]}" --cache "$C" --cache-size 1G || { not_ok "mount a"; t_end; }
PID_A=$MOUNT_PID
(for i in 1 2 3; do sums "$D/a" >"$D/sums.a$i"; done) &
READER=$!
rounds=0 small_ok=1
while [ $rounds -lt 12 ]; do
	mkdir -p "$D/b"
	if ! "$BATCHFS" mount "$D/shards" "$D/b" --batch 4 --size 64x64 --cache "$C" \
		--cache-size 2M >>"$D/b.log" 2>&1; then
		small_ok=0
		break
	fi
	head -c 1000 "$D/b/epoch-0000/batch-000000.npy" >/dev/null
	"$BATCHFS" unmount "$D/b" >>"$D/b.log" 2>&1
	rounds=$((rounds + 1))
	[ "$(stat -c %s "$C/data.mdb")" -ge $((1 << 30)) ] || { small_ok=0; break; }
done
wait "$READER"
check "mounts with a 2M limit open and close on a 1G mount's cache ($rounds rounds)" test $small_ok = 1
check "... and data.mdb is never shorter than the 1G mount maps" test "$(stat -c %s "$C/data.mdb")" -ge $((1 << 30))
check "the 1G mount survives them (no SIGBUS)" alive "$PID_A"
check "... and serves the reference bytes while they come and go" bash -c "
	cmp '$D/sums.ref' '$D/sums.a1' && cmp '$D/sums.ref' '$D/sums.a2' && cmp '$D/sums.ref' '$D/sums.a3'"
check "... and its own limit is 1G, whatever the others asked for" \
	test "$(json "$D/a/stats.json" "s['cache']['size_limit']")" = $((1 << 30))
unmount_wait "$D/a"
check "the cache is sound afterwards: verify passes" "$BATCHFS" cache verify "$C"
mount_fg "$D/shards" "$D/a" "${A[@]}" --cache "$C" --cache-size 1G || { not_ok "mount a again"; t_end; }
sums "$D/a" >"$D/sums.a4"
check "... and a remount is served from it, not moved aside" bash -c "
	cmp -s '$D/sums.ref' '$D/sums.a4' && ! grep -q 'damaged' '$D/mount.log' &&
	test \"\$(json '$D/a/stats.json' \"s['samples_decoded']\")\" = 0"
unmount_wait "$D/a"

# ---- 4. a writer stopped in the middle of a write ------------------------------
"$CACHEHOLD" "$C" >"$D/hold.out" 2>&1 &
HOLD=$!
T_PIDS+=("$HOLD")
for i in $(seq 1 300); do [ "$(state_of $HOLD)" = T ] && break; sleep 0.1; done
check "the holder is stopped in its write transaction" test "$(state_of $HOLD)" = T
check "batchfs cache clear names the stopped writer and exits non-zero, in time" bash -c "
	! timeout 60 '$BATCHFS' cache clear '$C' >'$D/clear.out' 2>&1 &&
	grep -q 'pid $HOLD' '$D/clear.out' && grep -q 'stopped' '$D/clear.out'"
check "batchfs cache verify does the same" bash -c "
	! timeout 60 '$BATCHFS' cache verify '$C' >'$D/verify.out' 2>&1 &&
	grep -q 'pid $HOLD' '$D/verify.out' && grep -q 'stopped' '$D/verify.out'"
: >"$D/mount.log"
mkdir -p "$D/r"
T_MOUNTS+=("$D/r") # a daemon whose mount timed out may mount later
if timeout 120 "$BATCHFS" mount "$D/shards" "$D/r" "${A[@]}" --cache "$C" >"$D/r.out" 2>&1; then
	check "a mount on that cache says which process holds it and that it is stopped" bash -c "
		grep -q 'pid $HOLD' '$D/r.out' && grep -q 'stopped' '$D/r.out'"
	sums "$D/r" >"$D/sums.r"
	got=$(json "$D/r/stats.json" "s['cache']['read_only'], s['cache']['inserts'], s['samples_decoded']")
	check "... and serves the right bytes from the cache, adding nothing ($got)" bash -c "
		cmp -s '$D/sums.ref' '$D/sums.r' && test '$got' = '(True, 0, 0)'"
	check "batchfs status says the cache is read-only and why" bash -c "
		'$BATCHFS' status '$D/r' | grep -q 'writer lock at mount: read-only'"
	"$BATCHFS" unmount "$D/r" >/dev/null 2>&1
else
	not_ok "a mount on a cache whose writer is stopped: $(tail -3 "$D/r.out" | tr '\n' ' ')"
fi
kill -CONT "$HOLD"
wait "$HOLD"
check "the holder, continued, ends its transaction and exits" test $? = 0
check "with the writer gone on, clear works again" "$BATCHFS" cache clear --fingerprint 0123456789abcdef "$C"

# A real daemon stopped at a few points of an rrc fill: whatever the point,
# clear and a new mount finish within the wait (or succeed at once).
for stop_after in 1 3 6; do
	R=$D/rc$stop_after
	mount_fg "$D/shards" "$D/f" --augment rrc --batch 8 --size 48x48 --threads 2 \
		--cache "$R" || { not_ok "mount rrc fill"; break; }
	FILL=$MOUNT_PID
	n=0
	for f in "$D/f/epoch-0000/"batch-*[0-9].npy; do
		cat "$f" >/dev/null
		n=$((n + 1))
		[ $n -ge $stop_after ] && break
	done
	kill -STOP "$FILL"
	mkdir -p "$D/g"
	T_MOUNTS+=("$D/g")
	check "rrc fill stopped after $stop_after batches: clear returns in time" bash -c "
		timeout 60 '$BATCHFS' cache clear --fingerprint 0123456789abcdef '$R' >'$D/c.out' 2>&1
		rc=\$?; [ \$rc -ne 124 ] && { [ \$rc = 0 ] || grep -q 'stopped' '$D/c.out'; }"
	check "... and a new mount starts in time" bash -c "
		timeout 120 '$BATCHFS' mount '$D/shards' '$D/g' --batch 8 --size 48x48 --cache '$R' >'$D/g.out' 2>&1 &&
		'$BATCHFS' unmount '$D/g'"
	kill -CONT "$FILL"
	unmount_wait "$D/f"
done

# ---- 10. a --cache-size the file system cannot hold -------------------------------
mkdir -p "$D/tiny"
if mount -t tmpfs -o size=20m tmpfs "$D/tiny" 2>/dev/null; then
	T_MOUNTS+=("$D/tiny")
	# 96 samples of 160x160 float32: 29 MB, more than the 20 MB there
	T=(--batch 16 --size 160x160 --threads 1)
	mount_fg "$D/shards" "$D/tref" "${T[@]}" --cache none || { not_ok "mount reference 160"; t_end; }
	sums "$D/tref" >"$D/sums.tref"
	unmount_wait "$D/tref"
	: >"$D/mount.log"
	mount_fg "$D/shards" "$D/t" "${T[@]}" --cache "$D/tiny/c" --cache-size 1G ||
		{ not_ok "mount on a 20 MB tmpfs"; t_end; }
	check "the mount says the file system cannot hold the --cache-size asked for" \
		grep -q 'room for [0-9]* MiB of cache, less than the 1024 MiB limit' "$D/mount.log"
	sums "$D/t" >"$D/sums.t"
	check "a cache on a full file system still serves the right bytes" cmp "$D/sums.tref" "$D/sums.t"
	for i in $(seq 1 100); do grep -q 'has no room left' "$D/mount.log" && break; sleep 0.1; done
	check "the first drop for lack of room is logged" grep -q 'its file system has no room left' "$D/mount.log"
	check "... once" test "$(grep -c 'has no room left' "$D/mount.log")" = 1
	check "batchfs status shows the samples not stored and why" bash -c "
		'$BATCHFS' status '$D/t' | grep -q 'samples not stored: the cache.s file system is full'"
	unmount_wait "$D/t"
	umount "$D/tiny"
else
	echo "skip cache_room: cannot mount a tmpfs here (needs root)"
fi
t_end
