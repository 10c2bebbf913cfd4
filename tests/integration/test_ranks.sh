#!/usr/bin/env bash
# One mount per node: --ranks A-B --world W serves MNT/rank-R/ for each
# local rank, byte for byte what a mount of --rank R --world W serves, from
# one daemon; and --hold, which unmounts a mount once the last process that
# holds MNT/hold has gone, however it went (SIGKILL included).
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 17 --seed 8 --min-size 30 \
	--max-size 90 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 20 --quiet || { not_ok mkshards; t_end; }
# 51 samples; world 3: 17 a rank, batches of 4 (the last of 1)
A=(--batch 4 --size 20x24 --epochs 2 --shuffle 9 --augment flip --dtype uint8 --cache none)

mount_fg "$D/shards" "$D/node" "${A[@]}" --ranks 0-2 --world 3 --threads 2 ||
	{ not_ok "mount --ranks 0-2"; t_end; }
NODE_PID=$MOUNT_PID
for r in 0 1 2; do
	mount_fg "$D/shards" "$D/r$r" "${A[@]}" --rank $r --world 3 --threads 1 ||
		{ not_ok "mount --rank $r"; t_end; }
done

check "the mount message says 'ranks 0-2 of 3: 17 of 51 samples each'" \
	grep -q "mounted $D/shards on $D/node: ranks 0-2 of 3: 17 of 51 samples each, 5 batches of 4.*; each rank in rank-R/" "$T_DIR/mount.log"
check "the root holds dataset.json, stats.json and one folder per rank" \
	test "$(ls "$D/node" | tr '\n' ' ')" = "dataset.json rank-0 rank-1 rank-2 stats.json "
check "each rank folder holds the epochs" \
	test "$(ls "$D/node/rank-1" | tr '\n' ' ')" = "epoch-0000 epoch-0001 "
check "ranks that are not served do not exist" bash -c "
	! test -e '$D/node/rank-3' && ! test -e '$D/node/epoch-0000' && ! test -e '$D/node/rank-01'"
check "dataset.json names the ranks, and a one-rank mount its rank" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
n = json.load(open(d + "/node/dataset.json"))
one = json.load(open(d + "/r1/dataset.json"))
assert n["ranks"] == [0, 1, 2] and "rank" not in n and n["world"] == 3, n
assert one["rank"] == 1 and "ranks" not in one, one
assert n["files"]["images"] == "rank-R/epoch-NNNN/batch-NNNNNN.npy", n["files"]
for k in ("samples_per_epoch", "batches_per_epoch", "last_batch_size", "shape", "dtype"):
    assert n[k] == one[k], k
PY
for r in 0 1 2; do
	(cd "$D/node/rank-$r" && for f in epoch-*/*.npy; do md5sum "$f"; done) >"$D/node.$r"
	(cd "$D/r$r" && for f in epoch-*/*.npy; do md5sum "$f"; done) >"$D/one.$r"
done
check "each rank's batch and label files equal a mount of its own, byte for byte" bash -c "
	cmp '$D/node.0' '$D/one.0' && cmp '$D/node.1' '$D/one.1' && cmp '$D/node.2' '$D/one.2' &&
	test \$(wc -l < '$D/node.0') -eq 20"
check "index.json of a rank folder names the same samples and draws, and its rank" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
for r in range(3):
    for e in range(2):
        for k in range(5):
            p = f"epoch-{e:04d}/batch-{k:06d}.index.json"
            a = json.load(open(f"{d}/node/rank-{r}/{p}"))
            b = json.load(open(f"{d}/r{r}/{p}"))
            assert a.pop("rank") == r, (r, p)
            assert a == b, (r, p)
PY
check "the ranks of one epoch are disjoint and equal in number" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
for e in range(2):
    seen = []
    for r in range(3):
        s = [x["sample"] for k in range(5) for x in
             json.load(open(f"{d}/node/rank-{r}/epoch-{e:04d}/batch-{k:06d}.index.json"))["samples"]]
        assert len(s) == 17, len(s)
        seen.append(set(s))
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2]) and not (seen[0] & seen[2])
PY
check "one daemon serves every rank folder" bash -c "
	test \"\$(getfattr --absolute-names --only-values -n user.batchfs.pid '$D/node')\" = $NODE_PID"
check "two readers of two ranks each get read-ahead of their own" $PY - "$D/node" <<'PY'
import json, subprocess, sys
m = sys.argv[1]
code = ("import numpy as np, sys\n"
        "for k in range(5): np.load(f'%s/rank-{sys.argv[1]}/epoch-0001/batch-{k:06d}.npy')\n"
        "print('read', flush=True); sys.stdin.read()" % m)
# stats.json lists only readers whose process is alive: ask while they are
ps = [subprocess.Popen([sys.executable, "-c", code, str(r)], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True) for r in (0, 2)]
pids = {p.pid for p in ps}
assert all(p.stdout.readline() == "read\n" for p in ps)
st = json.load(open(m + "/stats.json"))["readers"]
for p in ps:
    p.stdin.close()
assert all(p.wait() == 0 for p in ps)
readers = {x["pid"] for x in st}
assert pids <= readers, (pids, readers)
PY
for r in 0 1 2; do fusermount3 -u "$D/r$r"; done
unmount_wait "$D/node"

mount_fg "$D/shards" "$D/part" "${A[@]}" --ranks 2-3 --world 4 || { not_ok "mount --ranks 2-3"; t_end; }
mount_fg "$D/shards" "$D/r3" "${A[@]}" --rank 3 --world 4 || { not_ok "mount --rank 3 of 4"; t_end; }
check "--ranks 2-3 of 4 serves rank 3 as --rank 3 of 4 does" bash -c "
	cd '$D/part/rank-3' && for f in epoch-*/*.npy; do cmp \"\$f\" '$D/r3/'\"\$f\" || exit 1; done &&
	test \"\$(ls '$D/part')\" = \"\$(printf 'dataset.json\nrank-2\nrank-3\nstats.json')\""
fusermount3 -u "$D/r3"
unmount_wait "$D/part"

check "--rank and --ranks together are refused" bash -c "
	! '$BATCHFS' mount -f '$D/shards' '$D/x' --rank 1 --ranks 0-1 --world 2 2>'$D/err' &&
	grep -q 'exclude each other' '$D/err'"
check "--ranks past the world is refused, naming both" bash -c "
	mkdir -p '$D/x' && ! '$BATCHFS' mount -f '$D/shards' '$D/x' --ranks 2-4 --world 4 2>'$D/err' &&
	grep -q -- '--ranks 2-4 must be below --world 4' '$D/err'"
check "--ranks 3-1 and --ranks x are refused" bash -c "
	! '$BATCHFS' mount -f '$D/shards' '$D/x' --ranks 3-1 --world 4 2>/dev/null &&
	! '$BATCHFS' mount -f '$D/shards' '$D/x' --ranks x --world 4 2>/dev/null &&
	! mountpoint -q '$D/x'"

# --hold: each holder is a process that keeps MNT/hold open; SIGKILL them.
hold_proc() { # MNT: a process that opens MNT/hold and sleeps; prints its pid
	$PY -c "
import os, sys, time
fd = os.open(sys.argv[1] + '/hold', os.O_RDONLY)
print(os.getpid(), flush=True)
time.sleep(600)" "$1" &
}
gone() { # PID MNT: the daemon exited and MNT is no mount (deadline 20 s)
	local i
	for i in $(seq 1 200); do
		if ! alive "$1" && ! mountpoint -q "$2"; then return 0; fi
		sleep 0.1
	done
	return 1
}
mount_fg "$D/shards" "$D/held" "${A[@]}" --ranks 0-1 --world 2 --hold 0 || { not_ok "mount --hold"; t_end; }
HELD_PID=$MOUNT_PID
check "--hold adds MNT/hold, an empty file, and dataset.json names it" bash -c "
	test -f '$D/held/hold' && test ! -s '$D/held/hold' &&
	grep -q '\"hold\": \"hold\"' '$D/held/dataset.json'"
hold_proc "$D/held" >"$D/h1"
H1=$!
T_PIDS+=("$H1")
hold_proc "$D/held" >"$D/h2"
H2=$!
T_PIDS+=("$H2")
for i in $(seq 1 100); do
	[ "$(getfattr --absolute-names --only-values -n user.batchfs.holders "$D/held/hold" 2>/dev/null)" = 2 ] && break
	sleep 0.1
done
check "the holders are counted" test "$(getfattr --absolute-names --only-values -n user.batchfs.holders "$D/held/hold")" = 2
kill -9 "$H1"
wait "$H1" 2>/dev/null
for i in $(seq 1 100); do
	[ "$(getfattr --absolute-names --only-values -n user.batchfs.holders "$D/held/hold" 2>/dev/null)" = 1 ] && break
	sleep 0.1
done
check "a holder killed with SIGKILL is let go of, and the mount stays for the other" bash -c "
	mountpoint -q '$D/held' && test \"\$(getfattr --absolute-names --only-values -n user.batchfs.holders '$D/held/hold')\" = 1 &&
	test \"\$(getfattr --absolute-names --only-values -n user.batchfs.holds '$D/held/hold')\" = 2 &&
	ls '$D/held/rank-1/epoch-0000' >/dev/null"
kill -9 "$H2"
wait "$H2" 2>/dev/null
check "when the last holder is killed the mount unmounts itself and its daemon exits" gone "$HELD_PID" "$D/held"

mount_fg "$D/shards" "$D/lone" "${A[@]}" --hold 1 || { not_ok "mount --hold 1"; t_end; }
check "a mount nobody holds within --hold SECONDS unmounts itself" gone "$MOUNT_PID" "$D/lone"
check "the log says why each of them ended" bash -c "
	grep -q 'the last holder of $D/held/hold closed it' '$T_DIR/mount.log' &&
	grep -q 'nobody opened $D/lone/hold within 1 s' '$T_DIR/mount.log'"

mount_fg "$D/shards" "$D/plain" "${A[@]}" || { not_ok "mount plain"; t_end; }
check "without --ranks and --hold there is neither a rank level nor MNT/hold" bash -c "
	test \"\$(ls '$D/plain' | tr '\n' ' ')\" = 'dataset.json epoch-0000 epoch-0001 stats.json '"
unmount_wait "$D/plain"
t_end
