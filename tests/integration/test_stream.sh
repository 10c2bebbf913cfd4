#!/usr/bin/env bash
# s3:// through a shard cache a quarter of the source's size, against a
# real SeaweedFS on loopback: every batch equals the same shards mounted
# from a local directory, in file order and shuffled, cold and warm; the
# cache is never above its limit on disk (sampled during the epochs);
# bytes fetched per epoch in file order stay about the dataset's once; a
# remount whose indexes the LMDB cache holds fetches no shard byte before a
# batch is asked for; a kill -9 in the middle of a download leaves nothing
# that is used; two mounts sharing one cache fetch each object once; the
# server down in the middle of an epoch for a while (the epoch completes,
# with the same bytes) and past --s3-giveup (EIO naming the object, the
# mount stays up and serves again); an object replaced in the middle of an
# epoch fails its reads, never with mixed bytes; a source three times
# --mem streams through within --mem + 64 MiB of peak RSS.
source "$(dirname "$0")/lib.sh"
t_begin
source "$HERE/s3lib.sh"
s3_start
D=$T_DIR
COMMON=(--batch 16 --epochs 2 --threads 2)

"$MKJPEG" "$D/jpegs" --classes 4 --per-class 64 --seed 11 --min-size 200 \
	--max-size 400 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/tfr" --per-shard 16 --quiet || { not_ok mkshards; t_end; }
s3_upload "$D/tfr" train tfr || { not_ok "upload"; t_end; }
SIZE=$(cat "$D"/tfr/* | wc -c)
LIM=$((SIZE / 4))
[ "$LIM" -ge 1048576 ] || { not_ok "the dataset is too small for a 1 MiB cache: $SIZE bytes"; t_end; }

every_batch() { (cd "$1" && cat epoch-0000/* epoch-0001/*); }
remote() { # MNT FIELD: stats.json's remote.FIELD
	$PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["remote"][sys.argv[2]])' "$1/stats.json" "$2"
}
# ondisk SC: the bytes the objects and fetches of shard cache SC take on
# disk now (allocated blocks; each inode once: a fetch renamed from tmp/ to
# data/ while find walks is one file)
ondisk() {
	find "$1" -type f \( -path '*/data/*' -o -path '*/tmp/*' \) -printf '%i %b\n' 2>/dev/null |
		sort -u -k1,1 | awk '{ s += $2 * 512 } END { print s + 0 }'
}
# sample MNT SC OUT: ondisk SC every 20 ms into OUT while MNT is mounted
sample() {
	(while mountpoint -q "$1"; do ondisk "$2"; sleep 0.02; done >"$3") &
	T_PIDS+=("$!")
	SAMPLER=$!
}
proxy() { # MODE COUNT [options]: starts faultproxy.py before SeaweedFS, sets PROXY_PORT
	rm -f "$D/proxy.port" "$D/proxy.port.log"
	$PY "$HERE/faultproxy.py" "$S3_PORT" "$D/proxy.port" "$@" 2>>"$D/proxy.err" &
	PROXY_PID=$!
	T_PIDS+=("$PROXY_PID")
	for _ in $(seq 1 100); do [ -s "$D/proxy.port" ] && break; sleep 0.1; done
	PROXY_PORT=$(cat "$D/proxy.port")
}
stop_proxy() { kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; }

# ---- file order through a quarter of the source -----------------------------
mount_fg "$D/tfr" "$D/local" "${COMMON[@]}" --size 32x32 --cache none || { not_ok "local mount"; t_end; }
if mount_fg s3://train/tfr "$D/fo" "${COMMON[@]}" --size 32x32 --cache none \
	--shard-cache "$D/sc-fo" --shard-cache-size "$LIM"; then
	sample "$D/fo" "$D/sc-fo" "$D/fo.disk"
	check "file order through a cache of a quarter of the source: every batch equals the local mount's" \
		cmp <(every_batch "$D/local") <(every_batch "$D/fo")
	# Read-ahead deeper than half the cache would pin every object it
	# has: the next ones could not be fetched whole, their records would
	# be read by range and then fetched again (here: 2 batches of 16
	# records of 26 KB in 843 KB).
	check "...read-ahead stays within half the cache (prefetch_max $($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["prefetch_max"])' "$D/fo/stats.json"))" \
		$PY - "$D/fo/stats.json" "$SIZE" "$LIM" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
size, lim = int(sys.argv[2]), int(sys.argv[3])
want = lim // 2 // (size // 256) // 16  # 256 records, --batch 16
assert s["prefetch_max"] == want, (s["prefetch_max"], want)
assert s["prefetch_depth"] <= want, s["prefetch_depth"]
PY
	check "...each epoch fetched at most 1.05 times the dataset's bytes" \
		$PY - "$D/fo/stats.json" "$SIZE" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["remote"]
size = int(sys.argv[2])
epochs = {e["epoch"]: e["bytes"] for e in r["bytes_by_epoch"]}
assert sorted(epochs) == [0, 1], epochs
for e, b in epochs.items():
    assert b <= 1.05 * size, (e, b, size, {k: r[k] for k in (
        "bytes_by_epoch", "fetched", "evictions", "range_reads", "waits", "found")})
PY
	unmount_wait "$D/fo"
	wait "$SAMPLER" 2>/dev/null
	check "...and the cache was never above its limit on disk ($(sort -n "$D/fo.disk" | tail -1) of $LIM bytes at most, $(wc -l <"$D/fo.disk") samples)" \
		bash -c "[ \$(wc -l <'$D/fo.disk') -gt 5 ] && [ \$(sort -n '$D/fo.disk' | tail -1) -le $LIM ]"
else
	not_ok "s3 mount in file order: $(tail -2 "$D/mount.log")"
fi

# ---- a block order through the same cache ---------------------------------------
# Blocks of 2 shards: the one served and the next fetched fit in the
# quarter cache (4 shards).
mount_fg "$D/tfr" "$D/local-bl" "${COMMON[@]}" --size 32x32 --shuffle 7 --shuffle-block 2 \
	--cache none || { not_ok "local block-shuffled mount"; t_end; }
if mount_fg s3://train/tfr "$D/bl" "${COMMON[@]}" --size 32x32 --shuffle 7 --shuffle-block 2 \
	--cache none --shard-cache "$D/sc-bl" --shard-cache-size "$LIM"; then
	sample "$D/bl" "$D/sc-bl" "$D/bl.disk"
	check "a block order (2 shards a block) through the quarter cache: every batch equals the local mount's" \
		cmp <(every_batch "$D/local-bl") <(every_batch "$D/bl")
	check "...each epoch fetched at most 1.05 times the dataset's bytes" \
		$PY - "$D/bl/stats.json" "$SIZE" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["remote"]
size = int(sys.argv[2])
epochs = {e["epoch"]: e["bytes"] for e in r["bytes_by_epoch"]}
assert sorted(epochs) == [0, 1], epochs
for e, b in epochs.items():
    assert b <= 1.05 * size, (e, b, size, {k: r[k] for k in (
        "bytes_by_epoch", "fetched", "evictions", "range_reads", "waits", "found")})
PY
	unmount_wait "$D/bl"
	wait "$SAMPLER" 2>/dev/null
	check "...and the cache was never above its limit on disk ($(sort -n "$D/bl.disk" | tail -1) of $LIM bytes at most)" \
		bash -c "[ \$(sort -n '$D/bl.disk' | tail -1) -le $LIM ]"
else
	not_ok "s3 mount in a block order: $(tail -2 "$D/mount.log")"
fi

# ---- globally shuffled, cold then warm --------------------------------------------
mount_fg "$D/tfr" "$D/local-sh" "${COMMON[@]}" --size 32x32 --shuffle 5 --shuffle-block global --cache none ||
	{ not_ok "local shuffled mount"; t_end; }
if mount_fg s3://train/tfr "$D/sh" "${COMMON[@]}" --size 32x32 --shuffle 5 --shuffle-block global --cache "$D/lmdb" \
	--shard-cache "$D/sc-sh" --shard-cache-size "$LIM"; then
	sample "$D/sh" "$D/sc-sh" "$D/sh.disk"
	check "a global shuffle through the quarter cache: every batch equals the local mount's, cold" \
		cmp <(every_batch "$D/local-sh") <(every_batch "$D/sh")
	check "...records whose objects it does not keep whole are read by range" \
		bash -c "[ $(remote "$D/sh" range_reads) -gt 0 ]"
	unmount_wait "$D/sh"
	wait "$SAMPLER" 2>/dev/null
	check "...and the cache was never above its limit on disk ($(sort -n "$D/sh.disk" | tail -1) of $LIM bytes at most)" \
		bash -c "[ \$(sort -n '$D/sh.disk' | tail -1) -le $LIM ]"
else
	not_ok "s3 mount shuffled: $(tail -2 "$D/mount.log")"
fi
# The LMDB cache has every index now: an empty shard cache, and not a
# byte of a shard is fetched until a batch is asked for.
if mount_fg s3://train/tfr "$D/warm" "${COMMON[@]}" --size 32x32 --shuffle 5 --shuffle-block global --cache "$D/lmdb" \
	--shard-cache "$D/sc-warm" --shard-cache-size "$LIM"; then
	sleep 0.3
	check "a remount with every index stored fetches no shard byte before a batch is asked for (one LIST)" \
		bash -c "[ $(remote "$D/warm" requests) = 1 ] && [ $(remote "$D/warm" bytes_fetched) = 0 ] &&
			[ $(remote "$D/warm" range_reads) = 0 ] && grep -q '16 of 16 shard indexes stored, 0 objects fetched' '$D/mount.log'"
	check "...and every batch equals the local mount's, warm" \
		cmp <(every_batch "$D/local-sh") <(every_batch "$D/warm")
	unmount_wait "$D/warm"
else
	not_ok "warm s3 mount: $(tail -2 "$D/mount.log")"
fi

# ---- kill -9 in the middle of a download ----------------------------------------
proxy stall 1
mkdir -p "$D/killed"
"$BATCHFS" mount -f s3://train/tfr "$D/killed" "${COMMON[@]}" --size 32x32 --cache none \
	--shard-cache "$D/sc-kill" --shard-cache-size "$LIM" --s3-endpoint "http://127.0.0.1:$PROXY_PORT" \
	--s3-timeout 60 >>"$D/mount.log" 2>&1 &
KILLED=$!
T_PIDS+=("$KILLED")
T_MOUNTS+=("$D/killed")
for _ in $(seq 1 100); do
	[ -s "$D/proxy.port.log" ] && ls "$D"/sc-kill/*/tmp/* >/dev/null 2>&1 && break
	sleep 0.1
done
kill -9 "$KILLED" 2>/dev/null
wait "$KILLED" 2>/dev/null
stop_proxy
check "a fetch stalled in the middle: its file is in tmp/ when the daemon is killed" \
	bash -c "ls '$D'/sc-kill/*/tmp/* >/dev/null 2>&1"
if mount_fg s3://train/tfr "$D/after-kill" "${COMMON[@]}" --size 32x32 --cache none \
	--shard-cache "$D/sc-kill" --shard-cache-size "$LIM"; then
	check "...the remount removes what the killed fetch left" \
		bash -c "[ $(remote "$D/after-kill" removed) -ge 1 ]"
	check "...and every batch is right" cmp <(every_batch "$D/local") <(every_batch "$D/after-kill")
	unmount_wait "$D/after-kill"
else
	not_ok "remount after kill -9: $(tail -2 "$D/mount.log")"
fi

# ---- two mounts on one node share the cache ---------------------------------------
proxy log 0
mkdir -p "$D/two-a" "$D/two-b"
for m in two-a two-b; do
	"$BATCHFS" mount -f s3://train/tfr "$D/$m" "${COMMON[@]}" --size 32x32 --cache none \
		--shard-cache "$D/sc-two" --s3-endpoint "http://127.0.0.1:$PROXY_PORT" \
		>>"$D/mount.log" 2>&1 &
	T_PIDS+=("$!")
	T_MOUNTS+=("$D/$m")
done
for _ in $(seq 1 300); do
	[ -e "$D/two-a/dataset.json" ] && [ -e "$D/two-b/dataset.json" ] && break
	sleep 0.1
done
every_batch "$D/two-a" >"$D/two-a.bytes" &
every_batch "$D/two-b" >"$D/two-b.bytes"
wait $!
check "two mounts sharing one shard cache: both serve every batch right" \
	bash -c "cmp '$D/two-a.bytes' <(cd '$D/local' && cat epoch-0000/* epoch-0001/*) &&
		cmp '$D/two-b.bytes' '$D/two-a.bytes'"
check "...and between them fetched each object once (no byte twice, at the server)" \
	$PY - "$D/proxy.port.log" "$D/tfr" <<'PY'
import collections, os, sys
got = collections.Counter()
for line in open(sys.argv[1]):
    w = line.split()
    if w[0] == "GET" and w[3] == "206":
        got[os.path.basename(w[1])] += int(w[4])
for name in os.listdir(sys.argv[2]):
    size = os.path.getsize(os.path.join(sys.argv[2], name))
    assert got[name] == size, (name, got[name], size)
PY
"$BATCHFS" unmount "$D/two-a" >/dev/null 2>&1
"$BATCHFS" unmount "$D/two-b" >/dev/null 2>&1
stop_proxy

# ---- the server down in the middle of an epoch --------------------------------------
# Each mount below has its own --size: its samples are not in the LMDB
# cache, its shard indexes are (they do not depend on the size).
proxy down 0 --down-seconds 10 --after 3
mount_fg "$D/tfr" "$D/local-34" "${COMMON[@]}" --size 34x34 --cache none || not_ok "local mount 34"
if mount_fg s3://train/tfr "$D/down" "${COMMON[@]}" --size 34x34 --cache "$D/lmdb" \
	--shard-cache "$D/sc-down" --shard-cache-size "$LIM" --s3-giveup 60 \
	--s3-endpoint "http://127.0.0.1:$PROXY_PORT"; then
	check "the server down for 10 s in the middle of an epoch: the epochs complete with the same bytes" \
		cmp <(every_batch "$D/local-34") <(every_batch "$D/down")
	check "...it was down, and the requests were retried" \
		bash -c "grep -q '^down' '$D/proxy.port.log' && [ $($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["remote"]["retries"]["reset"])' "$D/down/stats.json") -gt 0 ]"
	unmount_wait "$D/down"
else
	not_ok "mount through the proxy: $(tail -2 "$D/mount.log")"
fi
stop_proxy
unmount_wait "$D/local-34"

# Down 14 s with --s3-giveup 2: a read can wait through more than one
# give-up before its error (the read-ahead's fetch fails, then the batch,
# started again, waits out a later fetch of the same object), 4.5 to 6.7 s
# in all; with 8 s down the server was sometimes back before the last.
proxy down 0 --down-seconds 14 --after 3
mount_fg "$D/tfr" "$D/local-35" "${COMMON[@]}" --size 35x35 --cache none || not_ok "local mount 35"
if mount_fg s3://train/tfr "$D/gone" "${COMMON[@]}" --size 35x35 --cache "$D/lmdb" \
	--shard-cache "$D/sc-gone" --shard-cache-size "$LIM" --s3-giveup 2 \
	--s3-endpoint "http://127.0.0.1:$PROXY_PORT"; then
	t0=$SECONDS
	$PY - "$D/gone" "$D/local-35" "$D/gone.out" <<'PY'
import errno, os, sys, time
mnt, ref, out = sys.argv[1:]
failed = []
for e in ("epoch-0000",):
    for f in sorted(os.listdir(os.path.join(ref, e))):
        t = time.monotonic()
        try:
            ok = open(os.path.join(mnt, e, f), "rb").read() == open(os.path.join(ref, e, f), "rb").read()
            assert ok, f
        except OSError as x:
            assert x.errno == errno.EIO, x
            if not failed:  # said in the check's name, not checked
                open(out + ".t", "w").write("%.1f" % (time.monotonic() - t))
            failed.append(os.path.join(e, f))
open(out, "w").write("\n".join(failed))
PY
	check "the server down past --s3-giveup: batches fail with EIO$( [ -s "$D/gone.out" ] &&
		echo " (the first read that failed took $(cat "$D/gone.out.t") s)" ||
		echo " (none did: $(grep -c . "$D/proxy.port.log" 2>/dev/null) proxy lines, $((SECONDS - t0)) s; $(grep -E 'gave up|EIO|error' "$D/mount.log" | tail -2 | tr '\n' ' '))")" \
		bash -c "[ -s '$D/gone.out' ]"
	check "...the log names the object, the attempts and the cause" \
		grep -q "s3://train/tfr/train-.*gave up after .* attempts.*--s3-giveup 2 s.*connection reset or refused" "$D/mount.log"
	sleep $((t0 + 15 - SECONDS > 0 ? t0 + 15 - SECONDS : 0))
	check "...the mount stays up, and once the server is back the failed batches are served, right" \
		$PY - "$D/gone" "$D/local-35" "$D/gone.out" <<'PY'
import os, sys
mnt, ref, out = sys.argv[1:]
for f in open(out).read().split():
    assert open(os.path.join(mnt, f), "rb").read() == open(os.path.join(ref, f), "rb").read(), f
PY
	unmount_wait "$D/gone"
else
	not_ok "mount through the proxy: $(tail -2 "$D/mount.log")"
fi
stop_proxy
unmount_wait "$D/local-35"

# ---- memory: a source three times --mem streams through the cache ----------------------
# Three tars of 8 small samples and a 60 MB member each (not an image:
# passed over, but in the shard's bytes): every object is fetched whole,
# through curl's buffer into the file, and the daemon's peak RSS stays
# within --mem + 64 MiB.
$PY - "$D/jpegs" "$D/fat" <<'PY'
import io, os, sys, tarfile
src, out = sys.argv[1:]
os.makedirs(out)
cls = os.path.join(src, sorted(os.listdir(src))[0])
files = sorted(os.path.join(cls, f) for f in os.listdir(cls))[:24]
for s in range(3):
    with tarfile.open(os.path.join(out, "fat-%06d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
        for i, f in enumerate(files[8 * s: 8 * s + 8]):
            for ext, data in (("jpg", open(f, "rb").read()), ("cls", b"%d" % i)):
                ti = tarfile.TarInfo("s%d_%d.%s" % (s, i, ext))
                ti.size, ti.mtime = len(data), 0
                t.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("pad.bin")
        ti.size, ti.mtime = 60 << 20, 0
        t.addfile(ti, io.BytesIO(bytes(60 << 20)))
PY
s3_upload "$D/fat" train fat || not_ok "upload fat"
mount_fg "$D/fat" "$D/local-fat" --batch 8 --size 32x32 --cache none || not_ok "local mount fat"
if mount_fg s3://train/fat "$D/fat-s3" --batch 8 --size 32x32 --cache none --mem 64M \
	--shard-cache "$D/sc-fat" --shard-cache-size 128M; then
	check "objects three times --mem: every batch equals the local mount's" \
		cmp <(cd "$D/local-fat" && cat epoch-0000/*) <(cd "$D/fat-s3" && cat epoch-0000/*)
	hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$MOUNT_PID/status")
	check "...and the daemon's peak RSS stays within --mem + 64 MiB ($((hwm / 1024)) MiB)" \
		bash -c "[ $hwm -le $(((64 + 64) * 1024)) ] && [ $(remote "$D/fat-s3" bytes_fetched) -ge $((3 * 60 << 20)) ]"
	unmount_wait "$D/fat-s3"
else
	not_ok "s3 mount of the fat tars: $(tail -2 "$D/mount.log")"
fi
unmount_wait "$D/local-fat"

# ---- an object replaced in the middle of an epoch -------------------------------------
mount_fg "$D/tfr" "$D/local-36" "${COMMON[@]}" --size 36x36 --cache none || not_ok "local mount 36"
if mount_fg s3://train/tfr "$D/repl" "${COMMON[@]}" --size 36x36 --cache "$D/lmdb" \
	--shard-cache "$D/sc-repl" --shard-cache-size "$LIM"; then
	victim=$(ls "$D/tfr" | sed -n 4p)
	curl -sf -X PUT -T "$D/tfr/$(ls "$D/tfr" | sed -n 5p)" \
		"http://127.0.0.1:$FILER_PORT/buckets/train/tfr/$victim" >/dev/null || not_ok "replace $victim"
	check "an object replaced after the listing: its batches fail with EIO, every other batch is right" \
		$PY - "$D/repl" "$D/local-36" <<'PY'
import errno, os, sys
mnt, ref = sys.argv[1:]
failed = 0
for e in ("epoch-0000", "epoch-0001"):
    for f in sorted(os.listdir(os.path.join(ref, e))):
        try:
            assert open(os.path.join(mnt, e, f), "rb").read() == open(os.path.join(ref, e, f), "rb").read(), f
        except OSError as x:
            assert x.errno == errno.EIO, x
            failed += 1
assert failed > 0
PY
	check "...and the log says why (412: If-Match)" grep -q "$victim.*HTTP 412" "$D/mount.log"
	unmount_wait "$D/repl"
else
	not_ok "mount before the replacement: $(tail -2 "$D/mount.log")"
fi
t_end
