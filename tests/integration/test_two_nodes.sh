#!/usr/bin/env bash
# Two nodes, for real, on one machine: network namespaces for node 0, node
# 1 and the storage (SeaweedFS, s3://), joined through a router namespace
# by veth pairs (netns.sh).  Each node also has a mount namespace of its
# own (held by a "node init" process), its own node-local folder (LMDB
# cache, shard cache, $TMPDIR for the mount point) and its own processes.
# `torchrun --nnodes 2 --nproc-per-node 2` (c10d rendezvous hosted on node
# 0, gloo over the veths) trains the tiny CNN of the framework tests for 2
# epochs through one batchfs.Mount(per_node=True) per node
# (train_nodes.py).  Checked: each epoch's samples (shard:record, from
# index.json) are disjoint across the 4 ranks, equal in number and the
# whole dataset; the loss falls; with --split shards, no shard is read by
# both nodes in an epoch and each node fetches at most 0.55 of the
# dataset's bytes an epoch (stats.json): the source is indexed once with
# `batchfs index` before training, as docs/TRAINING.md says a team does,
# so that no node reads every shard to index it.  Losing a node: every process of
# node 1 (its daemon and its node init included) is killed with SIGKILL
# mid-epoch; node 0's job fails rather than hangs; nothing is left behind
# (no process, daemon, mount or mount point) on either node; the job
# resumes from its last checkpoint with --nnodes 1 --nproc-per-node 2
# (elastic resume), and over both runs the epoch's samples equal the
# dataset exactly, as a multiset.  A kill of this test (SIGTERM, SIGINT,
# or SIGKILL of its process group) leaves no namespace, process or mount:
# netns.sh's watchdog tears down what the trap could not.
#
# BFS_NODES_SOURCE=dir uses a shared local folder instead of s3:// (the
# default when there is no weed binary); BFS_NODES_SHARDS=DIR runs on a
# folder of TFRecord shards of your own instead of generated ones (every
# record a sample, 128 at least; with a count that 32 divides the multiset
# checks are equality with the dataset, else no sample twice);
# BFS_NODES_KEEP=DIR keeps what each rank recorded (OUT.rank-R.jsonl: per
# batch its samples, shard:record; per epoch the node's stats.json
# counters), the logs and the checkpoint's data state.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
NAME=test_two_nodes
source "$HERE/netns.sh"
if ! netns_check; then
	echo "skip $NAME: $NETNS_WHY"
	exit 0
fi
if ! $PY -c 'import torch' 2>/dev/null; then
	not_ok "torch: not installed (make python-deps, or pip install torch)"
	t_end
fi
if command -v torchrun >/dev/null; then TORCHRUN=(torchrun); else TORCHRUN=($PY -m torch.distributed.run); fi
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS

# What main has of the features this test exercises (other helpers' work
# lands piece by piece): --split shards, and elastic resume.
SPLIT=
"$BATCHFS" mount --help 2>&1 | grep -q -- '--split samples|shards' && SPLIT=shards
ELASTIC=0
$PY -c 'import inspect, sys, batchfs
sys.exit("resume" not in inspect.signature(batchfs.Mount).parameters)' 2>/dev/null && ELASTIC=1

netns_begin
# finish: with BFS_NODES_KEEP=DIR, what each rank recorded, the logs and
# the checkpoint's data state go there first; then t_end.
finish() {
	if [ -n "${BFS_NODES_KEEP:-}" ]; then
		mkdir -p "$BFS_NODES_KEEP" &&
			cp "$D"/*.jsonl "$D"/*.log "$D"/dataset.json "$D"/killed-ckpt.json "$D"/slurm/*.jsonl \
				"$BFS_NODES_KEEP"/ 2>/dev/null
		echo "# records kept in $BFS_NODES_KEEP"
	fi
	t_end
}
netns_track_mount "$D"
netns_track_dir "$D"
netns_router sw || { not_ok "router namespace"; finish; }
S=$(netns_attach sw st) && A0=$(netns_attach sw n0) && A1=$(netns_attach sw n1) ||
	{ not_ok "node namespaces"; finish; }

# A node: its network namespace, a mount namespace of its own held by its
# "init" (so that a node killed whole takes its mounts with it, as a
# machine that dies does), and its node-local folder.  The machine's root
# is private (no propagation), so the init first detaches its copies of
# every FUSE mount there was (other tests' mounts, which a copy would keep
# alive after their unmount).
declare -A INIT
NODE_INIT='awk '\''{ for (i = 7; i < NF; i++) if ($i == "-") break
	if ($(i + 1) ~ /^fuse/) { m = $5; gsub(/\\040/, " ", m); print length(m) "\t" m } }'\'' /proc/self/mountinfo |
	sort -rn | cut -f2- | while IFS= read -r m; do umount -l "$m" 2>/dev/null; done
echo ready; exec sleep infinity'
node_up() {
	mkdir -p "$D/$1/tmp" "$D/$1/cache" "$D/$1/shards"
	netns_spawn "$1" "$D/$1/init.log" unshare --mount --propagation private bash -c "$NODE_INIT"
	INIT[$1]=$NETNS_PID
	disown "$NETNS_PID"
	local i
	for i in $(seq 1 100); do
		grep -q ready "$D/$1/init.log" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
# node_exec NODE CMD...: CMD on NODE (its network and mount namespaces), in
# the folder WD (default: here).
node_exec() {
	local n=$1
	shift
	nsenter --net="$(netns_path "$n")" --mount="/proc/${INIT[$n]}/ns/mnt" --wd="${WD:-$PWD}" -- "$@"
}
node_up n0 && node_up n1 || { not_ok "node init processes"; finish; }

# The dataset: 8 shards of 24 samples of 4 classes (192: 6 batches of 8 a rank for 4
# ranks, 12 for 2, and 4 shards a node with --split shards).
if [ -n "${BFS_NODES_SHARDS:-}" ]; then
	cp -r "$BFS_NODES_SHARDS" "$D/data" || { not_ok "copy $BFS_NODES_SHARDS"; finish; }
else
	"$MKJPEG" "$D/jpegs" --classes 4 --per-class 48 --seed 26 --min-size 40 \
		--max-size 100 >/dev/null || { not_ok mkjpeg; finish; }
	# classes dealt round-robin over the shards, as a real training set's
	# shards are shuffled (mkshards keeps each class together, and a node
	# of a shards split would see two classes an epoch)
	$PY - "$D/jpegs" "$D/data" <<'PY' || { not_ok "writing the shards"; finish; }
import os, sys
from tfrec import example, record, write_shard
src, out = sys.argv[1], sys.argv[2]
classes = sorted(os.listdir(src))
files = [sorted(os.listdir(os.path.join(src, c))) for c in classes]
order = [(label, os.path.join(src, c, fs[i])) for i in range(max(map(len, files)))
         for label, (c, fs) in enumerate(zip(classes, files)) if i < len(fs)]
os.makedirs(out)
for s in range(8):
    write_shard(os.path.join(out, "train-%05d-of-00008.tfrecord" % s),
                [record(example({"image/encoded": open(p, "rb").read(),
                                 "image/class/label": label}))
                 for label, p in order[s::8]])
PY
fi
# Every sample of the dataset, shard:record, and its bytes, from the
# TFRecord framing (not from batchfs).
$PY - "$D/data" "$D/dataset.json" <<'PY' || { not_ok "reading the shards"; finish; }
import json, os, struct, sys
d, keys, size = sys.argv[1], [], 0
for name in sorted(os.listdir(d)):
    p = os.path.join(d, name)
    if not os.path.isfile(p) or name.startswith("."):
        continue
    size += os.path.getsize(p)
    with open(p, "rb") as f:
        b = f.read()
    i = r = 0
    while i < len(b):
        n = struct.unpack_from("<Q", b, i)[0]
        i += 12 + n + 4
        keys.append("%s:%d" % (name, r))
        r += 1
    assert i == len(b), name
json.dump({"keys": keys, "bytes": size}, open(sys.argv[2], "w"))
PY

SOURCE_KIND=${BFS_NODES_SOURCE:-s3}
if [ "$SOURCE_KIND" = s3 ] && ! command -v weed >/dev/null 2>&1; then
	echo "# no SeaweedFS weed binary: the nodes read a shared local folder"
	SOURCE_KIND=dir
fi
if [ "$SOURCE_KIND" = s3 ]; then
	source "$HERE/s3lib.sh"
	S3_ADDR=$S S3_EXEC=(nsenter --net="$(netns_path st)" --)
	s3_start
	disown "$S3_PID"  # netns.sh's teardown ends it: no "Killed" notice
	s3_upload "$D/data" train nodes || { not_ok "upload to SeaweedFS"; finish; }
	SRC=s3://train/nodes
else
	SRC=$D/data
fi
# As a team would: the source indexed once, from anywhere (here the
# storage's namespace, with a shard cache of its own), before training, so
# that no node reads a shard to index it and each fetches only its share.
IDX=("${S3_EXEC[@]+"${S3_EXEC[@]}"}")
if out=$("${IDX[@]+"${IDX[@]}"}" "$BATCHFS" index "$SRC" --shard-cache "$D/indexer/shards" 2>&1); then
	ok "batchfs index $SRC before training ($(printf '%s' "$out" | head -1 | sed 's/.*: \([0-9]* of [0-9]* shards\).*/\1/'))"
else
	not_ok "batchfs index $SRC: $out"
fi
rm -rf "$D/indexer"
echo "# source $SRC; split ${SPLIT:-samples (no --split shards in this build)}; elastic resume: $([ $ELASTIC = 1 ] && echo yes || echo no)"

PORT=29400
# job OUT MODE NODE IS_HOST NNODES [VAR=VALUE...]: one node's torchrun of
# train_nodes.py in the background (at most 300 s); JOB_PID.
job() {
	local out=$1 mode=$2 n=$3 host=$4 nnodes=$5 addr
	shift 5
	addr=$(ip -n "$(netns_name "$n")" -4 -o addr show eth0 | awk '{ split($4, a, "/"); print a[1] }')
	node_exec "$n" env "$@" BFS_NODE="$n" BFS_CACHE="$D/$n/cache" \
		BFS_SHARD_CACHE="$D/$n/shards" TMPDIR="$D/$n/tmp" GLOO_SOCKET_IFNAME=eth0 \
		BFS_SPLIT="$SPLIT" timeout 300 "${TORCHRUN[@]}" --nnodes "$nnodes" --nproc-per-node 2 \
		--rdzv-backend c10d --rdzv-endpoint "$A0:$PORT" --rdzv-conf "is_host=$host" \
		--local-addr "$addr" --max-restarts 0 "$HERE/train_nodes.py" "$SRC" "$out" "$mode" \
		>"$out.$n.log" 2>&1 </dev/null &
	JOB_PID=$!
}

# await PID: wait for PID (a job of this shell) and return its status.
# A loop of short sleeps rather than the wait builtin, which holds off the
# INT trap for as long as a child that ignores SIGINT runs (background
# jobs of a script do), so that a Ctrl-C tears down at once.
await() {
	while kill -0 "$1" 2>/dev/null; do
		sleep 0.2
	done
	wait "$1"
}

# leftovers NODE: what a job left on NODE: processes (but its init),
# batchfs mounts of ours in its mount namespace, batchfs mount points in
# its $TMPDIR.
leftovers() {
	local n=$1 p
	for p in $(ip netns pids "$(netns_name "$n")"); do
		[ "$p" = "${INIT[$n]}" ] || echo "process $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
	done
	if [ -r "/proc/${INIT[$n]}/mountinfo" ]; then
		awk -v d="$D/" '$0 ~ / - fuse\.batchfs / && index($5, d) == 1 { print "mount " $5 }' \
			"/proc/${INIT[$n]}/mountinfo"
	fi
	ls -A "$D/$n/tmp" | grep '^batchfs-' | sed 's/^/mount point in $TMPDIR: /'
}

# clean NAME NODE...: ok NAME when no NODE has leftovers (a deadline of
# 20 s: a daemon's exit after its last holder left takes a moment).
clean() {
	local name=$1 n left i
	shift
	for i in $(seq 1 200); do
		left=
		for n in "$@"; do
			left+=$(leftovers "$n" | sed "s/^/$n: /")
		done
		[ -z "$left" ] && { ok "$name"; return 0; }
		sleep 0.1
	done
	not_ok "$name: $(echo "$left" | head -5 | tr '\n' ';')"
}

# ---- a full run: 2 epochs on 2 nodes ----------------------------------------
t0=$SECONDS
job "$D/full" train n0 1 2
P0=$JOB_PID
job "$D/full" train n1 0 2
P1=$JOB_PID
await "$P0"; r0=$?
await "$P1"; r1=$?
if [ $r0 = 0 ] && [ $r1 = 0 ]; then
	ok "torchrun --nnodes 2 --nproc-per-node 2 across two network namespaces trains 2 epochs ($((SECONDS - t0)) s)"
else
	not_ok "the two-node run: node 0 exit $r0, node 1 exit $r1: $(tail -3 "$D/full.n0.log" "$D/full.n1.log" | tr '\n' ' ')"
	finish
fi
check "the ranks sit on their nodes, one daemon a node, each reading its node's mount" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
ev = [json.loads(l) for r in range(4) for l in open(f"{d}/full.rank-{r}.jsonl")]
start = {e["rank"]: e for e in ev if e["event"] == "start"}
assert sorted(start) == [0, 1, 2, 3], sorted(start)
assert [start[r]["node"] for r in range(4)] == ["n0", "n0", "n1", "n1"], start
assert start[0]["pid"] == start[1]["pid"] != start[2]["pid"] == start[3]["pid"]
assert start[0]["ranks"] == [0, 1] and start[2]["ranks"] == [2, 3], start
assert start[0]["path"].startswith(d + "/n0/tmp/") and start[2]["path"].startswith(d + "/n1/tmp/")
PY
check "each epoch's samples are disjoint across the 4 ranks, equal in number, and the whole dataset" $PY - "$D" <<'PY'
import collections, json, sys
d = sys.argv[1]
data = json.load(open(f"{d}/dataset.json"))["keys"]
ev = [json.loads(l) for r in range(4) for l in open(f"{d}/full.rank-{r}.jsonl")]
per = [e for e in ev if e["event"] == "start"][0]["samples_per_epoch"]
assert per == len(data) // 4, (per, len(data))
for e in (0, 1):
    s = [[k for x in ev if x["event"] == "batch" and x["rank"] == r and x["epoch"] == e
          for k in x["samples"]] for r in range(4)]
    assert [len(x) for x in s] == [per] * 4, (e, [len(x) for x in s])
    c = collections.Counter(k for x in s for k in x)
    assert max(c.values()) == 1, (e, [k for k, v in c.items() if v > 1][:5])
    assert set(c) <= set(data), (e, sorted(set(c) - set(data))[:5])
    if per * 4 == len(data):
        assert set(c) == set(data), e
PY
check "the loss over the dataset falls" $PY - "$D" <<'PY'
import json, sys
# each rank's mean loss over its epoch 0, before and after: the 4 ranks'
# epochs 0 together are the dataset, in equal parts
ev = [json.loads(l) for r in range(4) for l in open(f"{sys.argv[1]}/full.rank-{r}.jsonl")]
x = [e for e in ev if e["event"] == "eval"]
assert len(x) == 4, x
before, after = (sum(e[k] for e in x) / 4 for k in ("before", "after"))
print("loss", round(before, 3), "->", round(after, 3))
assert after < 0.9 * before, (before, after)
PY
if [ "$SPLIT" = shards ]; then
	check "--split shards: no shard is read by both nodes in an epoch (but one cut by the spans' boundary)" $PY - "$D" <<'PY'
import collections, json, sys
d = sys.argv[1]
data = json.load(open(f"{d}/dataset.json"))["keys"]
size = collections.Counter(k.rsplit(":", 1)[0] for k in data)
# each node a span of half the epoch's places: with equal shards that half
# of them fill, the boundary falls between two shards
even = len(set(size.values())) == 1 and len(data) % 4 == 0 and \
    (len(data) // 2) % next(iter(size.values())) == 0
ev = [json.loads(l) for r in range(4) for l in open(f"{d}/full.rank-{r}.jsonl")]
for e in (0, 1):
    shards = {n: {k.rsplit(":", 1)[0] for x in ev if x["event"] == "batch" and x["node"] == n
                  and x["epoch"] == e for k in x["samples"]} for n in ("n0", "n1")}
    both = shards["n0"] & shards["n1"]
    assert shards["n0"] and shards["n1"] and len(both) <= (0 if even else 1), (e, shards)
PY
	# Fetched bytes per node per epoch, from the shard cache's counters:
	# with the sidecar index, no node reads a shard to index it, so what
	# each fetches is what its share of the epoch needs.
	if [ "$SOURCE_KIND" != s3 ]; then
		echo "skip $NAME: --split shards' bytes per node: the source is a local folder: nothing is fetched"
	else
		check "--split shards: no node fetched a shard to index it (the sidecar)" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
for r in (0, 2):
    s = [json.loads(l) for l in open(f"{d}/full.rank-{r}.jsonl")][0]
    assert s["event"] == "start" and s["counters"]["bytes_fetched"] == 0, s["counters"]
PY
		# stats.json's bytes_by_epoch: what the shard cache fetched for
		# each epoch (a shard fetched ahead, while the node is still in
		# the epoch before, counts towards the epoch that needs it)
		check "--split shards: each node fetched at most 0.55 of the dataset's bytes an epoch (stats.json)" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
total = json.load(open(f"{d}/dataset.json"))["bytes"]
for r, n in ((0, "n0"), (2, "n1")):
    ev = [json.loads(l) for l in open(f"{d}/full.rank-{r}.jsonl")]
    end = [x for x in ev if x["event"] == "epoch-end"][-1]
    by = {e["epoch"]: e["bytes"] for e in end["remote"]["bytes_by_epoch"]}
    assert sorted(by) == [0, 1], by
    assert sum(by.values()) == end["bytes_fetched"] + end["remote"]["range_bytes"], (by, end)
    for e, got in sorted(by.items()):
        print(n, "epoch", e, "fetched", got, "of", total, "bytes:", round(got / total, 3))
        assert got <= 0.55 * total, (n, e, got, total)
PY
	fi
else
	echo "skip $NAME: --split shards (no shard split in this build): the shard and bytes checks"
fi
clean "the finished run left nothing on either node: no process, daemon, mount or mount point" n0 n1

# ---- the README's Slurm recipe ----------------------------------------------
# Its srun command line, as README.md has it, run by hand on each node with
# what srun sets for `--nodes 2 --ntasks-per-node 2` (there is no srun
# here), on README's script in CPU form (slurm_train.py, as train.py).
CMD=$($PY - README.md <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"^srun [^\n]*bash -c \\\n\s*'(.*?)'\n", t, re.M | re.S)
print(m.group(1).replace("\\\n", " ") if m else "")
PY
)
if [ -z "$CMD" ] || ! grep -q '^export HEAD=' README.md; then
	not_ok "README.md has no srun ... bash -c '...' recipe with HEAD exported"
else
	mkdir -p "$D/slurm/bin"
	cp "$HERE/slurm_train.py" "$D/slurm/train.py"
	ln -s "$(command -v "$PY")" "$D/slurm/bin/python"
	t0=$SECONDS
	SP=()
	for task in 0 1 2 3; do
		n=n$((task / 2))
		mkdir -p "$D/$n/slurm-tmp"
		WD=$D/slurm node_exec "$n" env PATH="$D/slurm/bin:$PATH" HEAD="$A0" \
			SLURM_JOB_ID=2626 SLURM_STEP_ID=0 SLURM_JOB_NODELIST="n[0-1]" SLURM_NNODES=2 \
			SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2 SLURM_TASKS_PER_NODE="2(x2)" \
			SLURM_PROCID=$task SLURM_NODEID=$((task / 2)) SLURM_LOCALID=$((task % 2)) \
			SLURM_TMPDIR="$D/$n/slurm-tmp" TMPDIR="$D/$n/tmp" GLOO_SOCKET_IFNAME=eth0 \
			BFS_SLURM_SOURCE="$SRC" BFS_SLURM_OUT="$D/slurm/out" \
			timeout 300 bash -c "$CMD" \
			>"$D/slurm/task-$task.log" 2>&1 </dev/null &
		SP+=($!)
	done
	rc=0
	for p in "${SP[@]}"; do await "$p" || rc=$?; done
	if [ $rc = 0 ]; then
		ok "README's srun command line trains on two nodes with srun's variables ($((SECONDS - t0)) s)"
	else
		not_ok "the Slurm recipe: exit $rc: $(tail -3 "$D"/slurm/task-*.log | tr '\n' ' ')"
	fi
	check "Slurm: one mount a node (per_node), its LMDB cache in the node's \$SLURM_TMPDIR, disjoint ranks" $PY - "$D" <<'PY'
import collections, json, os, sys
d = sys.argv[1]
data = json.load(open(f"{d}/dataset.json"))["keys"]
ev = [json.loads(l) for r in range(4) for l in open(f"{d}/slurm/out.rank-{r}.jsonl")]
st = {e["rank"]: e for e in ev if e["event"] == "start"}
assert [st[r]["env"]["RANK"] for r in range(4)] == ["0", "1", "2", "3"], st
assert st[0]["pid"] == st[1]["pid"] != st[2]["pid"] == st[3]["pid"], st
assert st[0]["ranks"] == [0, 1] and st[2]["ranks"] == [2, 3], st
for r, n in ((0, "n0"), (2, "n1")):
    assert st[r]["cache"] == f"{d}/{n}/slurm-tmp/batchfs-cache", st[r]["cache"]
    assert os.path.exists(st[r]["cache"] + "/data.mdb"), st[r]["cache"]
    assert st[r]["path"].startswith(f"{d}/{n}/tmp/batchfs-"), st[r]["path"]
assert not os.path.exists(os.environ["XDG_CACHE_HOME"] + "/batchfs"), "a cache in the default place"
for e in (0, 1):
    c = collections.Counter(k for x in ev if x["event"] == "batch" and x["epoch"] == e
                            for k in x["samples"])
    assert sum(c.values()) == len(data) // 4 * 4 and max(c.values()) == 1, e
    assert set(c) <= set(data) and (len(data) % 4 or set(c) == set(data)), e
PY
	clean "the Slurm run left nothing on either node" n0 n1
fi

# ---- losing a node ----------------------------------------------------------
# The same job, checkpointed by rank 0 every 2 batches; every rank stops
# after 3 batches of epoch 0 (past the checkpoint: the work after it is
# lost), and while they wait node 1 is killed whole.
t0=$SECONDS
H=(BFS_CKPT="$D/ckpt.pt" BFS_CKPT_EVERY=2 BFS_HOLD=0:3)
job "$D/cut" train n0 1 2 "${H[@]}"
P0=$JOB_PID
job "$D/cut" train n1 0 2 "${H[@]}"
P1=$JOB_PID
held=0
for i in $(seq 1 3000); do
	held=$(cat "$D"/cut.rank-*.jsonl 2>/dev/null | grep -c '"event": "held"')
	[ "$held" -ge 4 ] && break
	kill -0 "$P0" 2>/dev/null && kill -0 "$P1" 2>/dev/null || break
	sleep 0.1
done
if [ "$held" -lt 4 ]; then
	not_ok "the run to kill: $held of 4 ranks reached batch 3: $(tail -3 "$D/cut.n0.log" "$D/cut.n1.log" | tr '\n' ' ')"
	finish
fi
pids=$(ip netns pids "$(netns_name n1)")
daemon1=$($PY -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' "$D/cut.rank-2.jsonl")
mnt1=$(readlink "/proc/${INIT[n1]}/ns/mnt")
echo "# node 1's processes: $(echo $pids | wc -w), its daemon $daemon1"
kill -KILL $pids
for i in $(seq 1 100); do
	[ -z "$(ip netns pids "$(netns_name n1)")" ] && break
	sleep 0.1
done
await "$P1" 2>/dev/null
if [ -z "$(ip netns pids "$(netns_name n1)")" ] && ! alive "$daemon1"; then
	ok "SIGKILL of every process of node 1 mid-epoch (its daemon and node init too) leaves none"
else
	not_ok "node 1 killed: left $(ip netns pids "$(netns_name n1)" | tr '\n' ' '); daemon $daemon1 alive: $(alive "$daemon1" && echo yes)"
fi
check "node 1's mount namespace is gone with its last process, and its mount with it" $PY - "$mnt1" "$D/n1" <<'PY'
import os, sys
ns, d = sys.argv[1], sys.argv[2]
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            assert os.readlink(f"/proc/{p}/ns/mnt") != ns, ("a process still in it", p)
        except OSError:
            pass
with open("/proc/self/mountinfo") as f:
    assert not [l for l in f if f" {d}/" in l], "a mount of node 1 on the machine"
PY
cp "$D/ckpt.pt.json" "$D/killed-ckpt.json"  # the resumed run checkpoints too
touch "$D/cut.go"
await "$P0"
r0=$?
if [ $r0 = 124 ]; then
	not_ok "node 0's job hung after node 1 was lost (killed at 300 s)"
elif [ $r0 != 0 ]; then
	ok "node 0's job fails once node 1 is lost (exit $r0, $((SECONDS - t0)) s)"
else
	not_ok "node 0's job ended well without node 1"
fi
clean "node 0 is left with nothing: no process, daemon, mount or mount point" n0
# Node 1's own disk: the mount point its dead job made is still there (a
# machine that died does not clean up); the node's next Mount removes it.
left=$(ls -A "$D/n1/tmp" | grep '^batchfs-')
echo "# left on node 1's disk by the killed job: ${left:-nothing}"
if node_up n1 && node_exec n1 env TMPDIR="$D/n1/tmp" $PY -c '
import sys, batchfs
with batchfs.Mount(sys.argv[1], per_node=True, batch=8, size=(8, 8), cache="none") as m:
    pass' "$D/data" >"$D/n1/next.log" 2>&1; then
	clean "node 1's next Mount, once the node is back, removes the mount point the killed job left" n1
else
	not_ok "a Mount on node 1 after the kill: $(tail -3 "$D/n1/next.log" | tr '\n' ' ')"
fi

# ---- resuming on one node ---------------------------------------------------
if [ $ELASTIC = 0 ]; then
	echo "skip $NAME: resume on --nnodes 1 from the 2-node checkpoint: elastic resume not in main yet"
	finish
fi
t0=$SECONDS
job "$D/cut" resume n0 1 1 BFS_CKPT="$D/ckpt.pt"
P0=$JOB_PID
await "$P0"
r0=$?
if [ $r0 = 0 ]; then
	ok "the job resumes from its last checkpoint with --nnodes 1 --nproc-per-node 2 ($((SECONDS - t0)) s)"
else
	not_ok "the resumed run: exit $r0: $(tail -5 "$D/cut.n0.log" | tr '\n' ' ')"
	finish
fi
check "over both runs, epoch 0's samples equal the dataset exactly, as a multiset" $PY - "$D" <<'PY'
import collections, json, sys
d = sys.argv[1]
data = json.load(open(f"{d}/dataset.json"))["keys"]
ck = json.load(open(f"{d}/killed-ckpt.json"))
assert ck["epoch"] == 0 and ck["world"] == 4, ck
ev = [json.loads(l) for r in range(4) for l in open(f"{d}/cut.rank-{r}.jsonl")]
# the killed run: the batches its checkpoint counted (the rest was lost)
before = [k for x in ev if x["event"] == "batch" and x["mode"] == "train" and x["epoch"] == 0
          and x["batch"] < ck["batch"] for k in x["samples"]]
after = [[k for x in ev if x["event"] == "batch" and x["mode"] == "resume" and x["epoch"] == 0
          and x["rank"] == r for k in x["samples"]] for r in (0, 1)]
assert len(before) == 4 * 8 * ck["batch"], len(before)
st = [x for x in ev if x["event"] == "start" and x["mode"] == "resume"]
assert st and st[0]["resume_info"]["samples_before"] == len(before), st
assert len(after[0]) == len(after[1]) > 0, [len(a) for a in after]
assert len(after[0]) == st[0]["resume_info"]["samples_per_epoch"], (len(after[0]), st[0])
got = collections.Counter(before + after[0] + after[1])
assert max(got.values()) == 1 and set(got) <= set(data), (
    "twice:", [k for k, v in got.items() if v > 1][:5], "not in the dataset:",
    sorted(set(got) - set(data))[:5])
if len(data) % 32 == 0:  # nothing dropped: 4 ranks of 8, then 2 ranks
    assert got == collections.Counter(data), ("never:", sorted(set(data) - set(got))[:5])
PY
check "after the resumed epoch, epoch 1 is whole on the new world: disjoint, equal, the dataset" $PY - "$D" <<'PY'
import collections, json, sys
d = sys.argv[1]
data = json.load(open(f"{d}/dataset.json"))["keys"]
ev = [json.loads(l) for r in (0, 1) for l in open(f"{d}/cut.rank-{r}.jsonl")]
s = [[k for x in ev if x["event"] == "batch" and x["mode"] == "resume" and x["epoch"] == 1
      and x["rank"] == r for k in x["samples"]] for r in (0, 1)]
assert len(s[0]) == len(s[1]) == len(data) // 2, [len(x) for x in s]
got = collections.Counter(s[0] + s[1])
assert max(got.values()) == 1 and set(got) <= set(data)
if len(data) % 2 == 0:
    assert got == collections.Counter(data)
PY
clean "the resumed run left nothing on node 0: no process, daemon, mount or mount point" n0

finish
