#!/usr/bin/env bash
# A damaged data.mdb costs a rebuild, never the mount.  A cache is filled by
# a real mount (240 samples over two B-tree levels, shard indexes, counters,
# a free list), then damaged one byte at a time, each time in a fresh copy:
# 20 random bytes (fixed seed) in use on its live branch and leaf pages --
# page headers, node offset arrays, node headers, keys, inline data -- found
# by an independent reader of LMDB's format (lmdbpages.py).  For each one:
# `batchfs cache verify` exits 1 with a message (except for the few kinds
# of byte docs/RELIABILITY.md lists as harmless when changed: it then exits
# 0 or 1, never crashes), and a remount serves every batch with the bytes
# of a --cache none mount, its daemon alive to the end and exiting 0; when
# verify says the structure is damaged, the mount moved data.mdb aside
# (data.mdb.damaged-TIME) and its message says so.  (The cache's layout
# depends on how the writer grouped its commits, so the bytes picked vary a
# little from run to run; DAMAGE_SEED=N picks another set.)
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
OPTS=(--batch 16 --size 16x16)
SEED=${DAMAGE_SEED:-1}

"$MKJPEG" "$D/jpegs" --classes 2 --per-class 120 --seed 17 --min-size 24 \
	--max-size 64 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 60 --quiet || { not_ok mkshards; t_end; }

sums() { (cd "$1/epoch-0000" && for f in *; do printf '%s ' "$f"; md5sum <"$f"; done); }
stat_of() { $PY -c "import json,sys; s=json.load(open('$1/stats.json')); print(eval(sys.argv[1]))" "$2"; }
# wait until the mount's cache writer has inserted n entries (deadline 30 s)
wait_inserts() {
	local i
	for i in $(seq 1 300); do
		[ "$(stat_of "$1" "s['cache']['inserts']")" -ge "$2" ] && return 0
		sleep 0.1
	done
	return 1
}

mount_fg "$D/shards" "$D/ref" "${OPTS[@]}" --cache none || { not_ok "mount reference"; t_end; }
sums "$D/ref" >"$D/sums.ref"
unmount_wait "$D/ref"

mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$D/c" || { not_ok "mount to fill"; t_end; }
sums "$D/m" >"$D/sums.fill"
wait_inserts "$D/m" 240 || not_ok "the filling mount inserted its 240 samples"
unmount_wait "$D/m"
check "the filled cache serves the reference bytes and verifies" bash -c "
	cmp -s '$D/sums.ref' '$D/sums.fill' && '$BATCHFS' cache verify '$D/c' >/dev/null"
$PY "$HERE/lmdbpages.py" pick "$D/c/data.mdb" 20 "$SEED" >"$D/offsets" ||
	{ not_ok "pick bytes of the live B-tree pages"; t_end; }
check "the samples database has a branch level (separators are in play)" bash -c "
	grep -q . '$D/offsets' && $PY - '$D/c/data.mdb' <<'PY'
import struct, sys
sys.path.insert(0, '$HERE')
import lmdbpages
db = open(sys.argv[1], 'rb').read()
psize, _ = lmdbpages.pick_meta(db)
assert any(k == 'sep' for _, k in lmdbpages.used_bytes(db, psize))
PY"

n=0
while read -r off kind xor; do
	n=$((n + 1))
	W=$D/w$n
	rm -rf "$D/w$((n - 1))"
	cp -a "$D/c" "$W"
	$PY "$HERE/lmdbpages.py" flip "$W/data.mdb" "$off" "$xor"
	what="byte $off ($kind) ^ $xor"

	"$BATCHFS" cache verify "$W" >"$D/verify.out" 2>&1
	rc=$?
	case "$kind" in
	sep | freekey | slack) want="0 1" ;; # may go unseen: harmless
	*) want="1" ;;
	esac
	if ! printf '%s\n' $want | grep -qx "$rc" ||
		{ [ "$rc" = 1 ] && ! [ -s "$D/verify.out" ]; }; then
		not_ok "$what: batchfs cache verify exited $rc (want $want, with a message): $(head -c 300 "$D/verify.out")"
	fi

	if ! mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$W"; then
		not_ok "$what: the mount did not start"
		continue
	fi
	sums "$D/m" >"$D/sums.w" 2>"$D/sums.err"
	alive=0
	kill -0 "$MOUNT_PID" 2>/dev/null && alive=1
	unmount_wait "$D/m"
	wait "$MOUNT_PID"
	status=$?
	moved=ok
	if grep -q "is damaged" "$D/verify.out" &&
		! { ls "$W"/data.mdb.damaged-* >/dev/null 2>&1 &&
			grep "mounted" "$D/mount.log" | tail -1 | grep -q "data.mdb was damaged"; }; then
		moved="the structure is damaged, but the mount did not move data.mdb aside and say so"
	fi
	if ! cmp -s "$D/sums.ref" "$D/sums.w"; then
		not_ok "$what: the remount served other bytes: $(diff "$D/sums.ref" "$D/sums.w" | head -3 | tr '\n' ' ') $(head -c 200 "$D/sums.err")"
	elif [ "$alive" != 1 ] || [ "$status" != 0 ]; then
		not_ok "$what: the daemon died (alive $alive, exit status $status)"
	elif [ "$moved" != ok ]; then
		not_ok "$what: $moved"
	else
		ok "$what: verify exits $rc$( [ "$rc" = 1 ] && printf ' (%s)' "$(head -1 "$D/verify.out" | cut -c1-100)"); a remount serves the reference bytes and its daemon lives"
	fi
done <"$D/offsets"
check "20 damaged copies were tried" test "$n" = 20
t_end
