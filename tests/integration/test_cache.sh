#!/usr/bin/env bash
# The LMDB sample cache through real mounts: warm bytes equal cold bytes,
# it persists across remounts and is shared by concurrent mounts, a
# corrupted value is detected and replaced, the size limit holds, a full
# disk still serves, kill -9 during writes loses nothing, a changed shard
# invalidates its entries, and `batchfs cache` reports, verifies and clears.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
C=$D/cache
OPTS=(--batch 8 --size 64x64)

"$MKJPEG" "$D/jpegs" --classes 2 --per-class 20 --seed 11 --min-size 60 \
	--max-size 160 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 10 --quiet || { not_ok mkshards; t_end; }

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
cp "$D/ref/epoch-0000/batch-000002.npy" "$D/ref2.npy"
unmount_wait "$D/ref"

mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$C" || { not_ok "mount cold"; t_end; }
sums "$D/m" >"$D/sums.cold"
check "a cold epoch with the cache equals one without" cmp "$D/sums.ref" "$D/sums.cold"
check "the cold epoch's 40 samples are inserted, one transaction per batch" wait_inserts "$D/m" 40
unmount_wait "$D/m"
check "data.mdb exists in the cache directory" test -s "$C/data.mdb"

mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$C" || { not_ok "mount warm"; t_end; }
sums "$D/m" >"$D/sums.warm"
check "after a remount a warm epoch is byte-identical to the cold one" cmp "$D/sums.cold" "$D/sums.warm"
check "the warm epoch decoded nothing: every sample was a cache hit" bash -c "
	test \"\$(stat_of() { :; }; $PY -c \"import json; s=json.load(open('$D/m/stats.json')); print(s['cache']['hits'], s['samples_decoded'])\")\" = '40 0'"
check "the remount took every shard index from the cache" \
	test "$(stat_of "$D/m" "s['cache']['index_hits']")" -ge 4

# a second mount of the same shards, at the same time, shares the cache
mount_fg "$D/shards" "$D/m2" "${OPTS[@]}" --cache "$C" || { not_ok "mount second"; t_end; }
sums "$D/m2" >"$D/sums.second"
check "two concurrent mounts share one cache" bash -c "
	cmp -s '$D/sums.cold' '$D/sums.second' &&
	test \"\$($PY -c \"import json; print(json.load(open('$D/m2/stats.json'))['cache']['hits'])\")\" = 40"
unmount_wait "$D/m2"
unmount_wait "$D/m"

check "batchfs cache stats shows entries and a fingerprint" bash -c "
	'$BATCHFS' cache stats '$C' | tee '$D/cstats' | grep -qi 'entries' && grep -Eq '[0-9a-f]{16}' '$D/cstats'"
check "batchfs cache verify passes on a healthy cache" "$BATCHFS" cache verify "$C"

# Corrupt one stored sample in data.mdb: the read must detect it and decode again.
$PY - "$C/data.mdb" "$D/ref2.npy" <<'PY' || not_ok "corrupt a cached value"
import sys
import numpy as np
import struct
f = open(sys.argv[1], "r+b")
# only the pages in use: the file may be as long as the map (sparse)
meta = [f.read(4096)[16:16 + 136] for _ in range(2) if not f.seek(_ * 4096)]
last = max((struct.unpack_from("<QQ", m, 120) for m in meta), key=lambda x: x[1])[0]
f.seek(0)
db = bytearray(f.read((last + 1) * 4096))
sample = np.load(sys.argv[2])[3].tobytes()   # one cached sample's exact bytes
pos = db.find(sample[:256])
assert pos >= 0, "sample not found in data.mdb"
f.seek(pos + len(sample) // 2)               # flip a bit in its middle
f.write(bytes([db[pos + len(sample) // 2] ^ 0x40]))
f.close()
PY
check "batchfs cache verify finds the corrupted entry" bash -c "! '$BATCHFS' cache verify '$C' >/dev/null 2>&1"
mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$C" || { not_ok "mount after corruption"; t_end; }
sums "$D/m" >"$D/sums.corrupt"
check "a corrupted value is detected and the right bytes are served" bash -c "
	cmp -s '$D/sums.ref' '$D/sums.corrupt' &&
	test \"\$($PY -c \"import json; print(json.load(open('$D/m/stats.json'))['cache']['crc_errors'])\")\" -ge 1"
check "the corrupted entry is replaced" wait_inserts "$D/m" 1
unmount_wait "$D/m"
check "after the replacement verify passes again" "$BATCHFS" cache verify "$C"

# A changed shard (new mtime) invalidates its entries.
touch -d '2001-01-01' "$D/shards/$(ls "$D/shards" | head -1)"
mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$C" || { not_ok "mount after touch"; t_end; }
sums "$D/m" >"$D/sums.touched"
check "a shard whose mtime changed is decoded again; the rest are hits" bash -c "
	cmp -s '$D/sums.ref' '$D/sums.touched' &&
	test \"\$($PY -c \"import json; s=json.load(open('$D/m/stats.json')); print(s['samples_decoded'], s['cache']['hits'])\")\" = '10 30'"
unmount_wait "$D/m"

check "batchfs cache clear empties the cache" bash -c "
	'$BATCHFS' cache clear '$C' >'$D/clear.out' 2>&1 &&
	{ ! '$BATCHFS' cache stats '$C' >/dev/null 2>&1 || '$BATCHFS' cache stats '$C' | grep -Eiq 'samples +0\b|entries:? +0\b'; }"

# The size limit holds under pressure, and batches are still served.
"$MKJPEG" "$D/big" --classes 1 --per-class 60 --seed 3 --min-size 100 --max-size 200 >/dev/null
mount_fg "$D/big" "$D/s" --batch 8 --size 224x224 --cache "$D/small" --cache-size 16M ||
	{ not_ok "mount small cache"; t_end; }
sums "$D/s" >"$D/sums.small1"
sleep 1
sums "$D/s" >"$D/sums.small2"
check "with a 16 MiB limit data.mdb stays within the limit" \
	test "$(stat -c %s "$D/small/data.mdb")" -le $((16 << 20))
check "a full cache still serves every batch, with the same bytes" cmp "$D/sums.small1" "$D/sums.small2"
unmount_wait "$D/s"

# A full file system (a 2 MiB tmpfs) still serves batches.
mkdir -p "$D/tiny"
if mount -t tmpfs -o size=2m tmpfs "$D/tiny" 2>/dev/null; then
	T_MOUNTS+=("$D/tiny")
	mount_fg "$D/shards" "$D/t" "${OPTS[@]}" --cache "$D/tiny/c" ||
		{ not_ok "mount on full tmpfs"; t_end; }
	sums "$D/t" >"$D/sums.tiny"
	check "a cache on a full file system still serves the right bytes" cmp "$D/sums.ref" "$D/sums.tiny"
	unmount_wait "$D/t"
	umount "$D/tiny"
else
	not_ok "a cache on a full file system: cannot mount a tmpfs here"
fi

# A cold epoch that outruns the writer (20 float32 batches of 19 MB from
# small JPEGs, each commit synced to disk) is still cached whole: a batch waiting for the
# writer keeps its slot, so decoding waits instead of the cache dropping
# it, and the epoch after a remount decodes nothing.
"$MKJPEG" "$D/many" --classes 2 --per-class 320 --seed 8 --min-size 48 \
	--max-size 96 >/dev/null || { not_ok "mkjpeg many"; t_end; }
"$BATCHFS" mkshards "$D/many" "$D/manys" --per-shard 160 --quiet || { not_ok "mkshards many"; t_end; }
mount_fg "$D/manys" "$D/w" --batch 32 --size 224x224 --cache "$D/wc" || { not_ok "mount many"; t_end; }
cat "$D/w/epoch-0000/"*.npy >/dev/null   # as fast as decoding goes
sums "$D/w" >"$D/sums.wcold"
check "a cold epoch faster than the writer drops no batch" \
	test "$(stat_of "$D/w" "s['cache']['dropped_queue']")" = 0
unmount_wait "$D/w"
mount_fg "$D/manys" "$D/w" --batch 32 --size 224x224 --cache "$D/wc" || { not_ok "remount many"; t_end; }
sums "$D/w" >"$D/sums.wwarm"
check "after the remount the epoch decodes nothing (640 hits) and has the same bytes" bash -c "
	test \"\$($PY -c \"import json; s=json.load(open('$D/w/stats.json')); print(s['cache']['hits'] >= 640, s['cache']['misses'], s['samples_decoded'])\")\" = 'True 0 0' &&
	cmp '$D/sums.wcold' '$D/sums.wwarm'"
# The epoch read 385 MB of values out of data.mdb's map; each is unmapped
# once read, so the daemon's resident set does not grow by the cache
# (it did: RssFile was the whole data.mdb after a warm epoch).
RSSF=$(awk '/^RssFile:/ {print int($2 / 1024)}' "/proc/$MOUNT_PID/status")
MDB=$(du -m "$D/wc/data.mdb" | cut -f1)
check "a warm epoch leaves the cache's pages out of the daemon's resident set (RssFile ${RSSF} MiB, data.mdb ${MDB} MiB)" \
	test "$RSSF" -lt 64
unmount_wait "$D/w"

# kill -9 of the daemon while it writes the cache, then a remount.
mount_fg "$D/big" "$D/k" --batch 8 --size 224x224 --cache "$D/kc" || { not_ok "mount kill"; t_end; }
cat "$D/k/epoch-0000/"*.npy >/dev/null &
sleep 0.5
kill -9 "$MOUNT_PID"
wait 2>/dev/null
fusermount3 -u "$D/k" 2>/dev/null || umount -l "$D/k" 2>/dev/null
mount_fg "$D/big" "$D/k" --batch 8 --size 224x224 --cache "$D/kc" || { not_ok "remount after kill"; t_end; }
sums "$D/k" >"$D/sums.killed"
unmount_wait "$D/k"
mount_fg "$D/big" "$D/k" --batch 8 --size 224x224 --cache none || { not_ok "mount clean"; t_end; }
sums "$D/k" >"$D/sums.clean"
check "after kill -9 during cache writes a remount serves the right bytes" \
	cmp "$D/sums.clean" "$D/sums.killed"
check "and the cache verifies" "$BATCHFS" cache verify "$D/kc"
t_end
