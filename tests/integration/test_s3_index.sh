#!/usr/bin/env bash
# The sidecar index of a remote source, against the real SeaweedFS of
# s3lib.sh and nginx over https: `batchfs index s3://...` writes
# PREFIX/.batchfs-index with one PUT; a mount on a fresh sample cache and an
# empty shard cache GETs it before any shard byte and fetches no shard
# before the first batch is read (the shard cache's counters, and every GET
# the server answered, through faultproxy.py); its batches equal a local
# mount of the same shards (TFRecord, tar, gzip).  A shard replaced after
# indexing is scanned again and served with its new bytes; a damaged
# sidecar is passed over (a damaged entry costs its shard alone), saying
# so in the log; a rerun keeps what still fits; --cache reuses a node's
# stored indexes; the sidecar object and *.idx are never shards.  An https
# brace pattern with a sidecar published beside it (`batchfs index URL
# --out FILE`) does the same, a 404 meaning none; a wids shard index
# (index.json) names an https source's shards, and its sample counts are
# checked against the shards, a disagreement said, not refused.
source "$(dirname "$0")/lib.sh"
t_begin
source "$HERE/s3lib.sh"
source "$HERE/httpslib.sh"
s3_start
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)
# remote sources of shards are shuffled in blocks by default (1/32 of the
# shards, at least 1): the local mounts ask for that order too
COMMON=(--batch 8 --size 40x48 --shuffle 3 --epochs 2 --threads 2)
LOCAL=("${COMMON[@]}" --shuffle-block 1 --cache none)

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 13 --seed 5 --min-size 30 \
	--max-size 90 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/tfr" --per-shard 8 --quiet || { not_ok mkshards; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wds" --per-shard 9 >/dev/null || { not_ok mkwds; t_end; }
mkdir -p "$D/gz" && for f in "$D"/tfr/*.tfrecord; do gzip -c "$f" >"$D/gz/$(basename "$f").gz"; done
for p in tfr wds gz; do
	s3_upload "$D/$p" train "idx/$p" || { not_ok "upload $p"; t_end; }
done
# a DALI index beside a remote shard is never taken for a shard
printf '0 100\n' >"$D/one.idx"
curl -sf -X PUT -T "$D/one.idx" \
	"http://127.0.0.1:$FILER_PORT/buckets/train/idx/tfr/train-00000-of-00005.tfrecord.idx" >/dev/null ||
	not_ok "upload a .idx"

every_batch() { (cd "$1" && cat epoch-0000/* epoch-0001/*); }
stat_of() { $PY -c "import json,sys; s=json.load(open('$1/stats.json')); print(eval(sys.argv[1]))" "$2"; }
# the index counts of a mount: "shards from_sidecar scanned changed damaged"
counts() { stat_of "$1" "' '.join(str(s['index'][k]) for k in ('shards', 'from_sidecar', 'scanned', 'sidecar_changed', 'sidecar_damaged'))"; }
# what the shard cache fetched: "fetched bytes_fetched range_reads"
fetched() { stat_of "$1" "' '.join(str(s['remote'][k]) for k in ('fetched', 'bytes_fetched', 'range_reads'))"; }

# faultproxy.py in log mode in front of SeaweedFS: every GET it forwards
# is a line of $D/proxy.port.log ("GET PATH RANGE STATUS BYTES").
rm -f "$D/proxy.port"
$PY "$HERE/faultproxy.py" "$S3_PORT" "$D/proxy.port" log 0 2>>"$D/proxy.err" &
T_PIDS+=("$!")
for _ in $(seq 1 100); do [ -s "$D/proxy.port" ] && break; sleep 0.1; done
PROXY=http://127.0.0.1:$(cat "$D/proxy.port")
# shard_gets PREFIX: the GETs of PREFIX's objects but its sidecar
shard_gets() { grep "^GET /train/$1/" "$D/proxy.port.log" 2>/dev/null | grep -vc '/\.batchfs-index '; }

for p in tfr wds gz; do
	n=$(ls "$D/$p" | wc -l)
	out=$("$BATCHFS" index "s3://train/idx/$p" --shard-cache "$D/index-shards" 2>&1) ||
		{ not_ok "batchfs index s3://train/idx/$p: $out"; continue; }
	check "batchfs index s3://: $p's shards scanned and the sidecar written with a PUT" \
		bash -c "printf '%s' \"\$1\" | grep -q 'wrote s3://train/idx/$p/.batchfs-index: $n of $n shards (0 kept from the earlier sidecar, $n scanned)'" _ "$out"
	mount_fg "$D/$p" "$D/local-$p" "${LOCAL[@]}" || { not_ok "local mount $p"; continue; }
	: >"$D/proxy.port.log"
	if mount_fg "s3://train/idx/$p" "$D/s3-$p" "${COMMON[@]}" --cache "$D/lmdb-$p" \
		--shard-cache "$D/sc-$p" --s3-endpoint "$PROXY"; then
		check "$p: every shard's index came from the sidecar, none scanned (the .idx is no shard)" \
			test "$(counts "$D/s3-$p")" = "$n $n 0 0 0"
		check "$p: no shard fetched before the first batch is read (shard cache counters)" \
			test "$(fetched "$D/s3-$p")" = "0 0 0"
		got=$(shard_gets "idx/$p")
		check "$p: the server answered no GET of a shard before it ($got), and one of the sidecar" \
			bash -c "[ '$got' = 0 ] && grep -q '^GET /train/idx/$p/.batchfs-index .* 20[06] ' '$D/proxy.port.log'"
		check "$p: every batch equals the local mount's" \
			cmp <(every_batch "$D/local-$p") <(every_batch "$D/s3-$p")
		unmount_wait "$D/s3-$p"
	else
		not_ok "s3 mount of $p with its sidecar: $(tail -2 "$D/mount.log")"
	fi
	unmount_wait "$D/local-$p"
done
check "the mount message says how many shards came from the sidecar" \
	grep -q "sidecar index: 5 of 5 shards from it" "$D/mount.log"

out=$("$BATCHFS" index s3://train/idx/tfr --shard-cache "$D/index-shards2" 2>&1)
check "a rerun keeps every entry that still fits, and fetches nothing" \
	bash -c "printf '%s' \"\$1\" | grep -q '5 of 5 shards (5 kept from the earlier sidecar, 0 scanned)' &&
		printf '%s' \"\$1\" | grep -q 'fetched 0 shards to scan them'" _ "$out"
out=$("$BATCHFS" index s3://train/idx/tfr --cache "$D/lmdb-tfr" --shard-cache "$D/index-shards3" \
	--out "$D/from-cache.idx" 2>&1)
check "--cache: a node's stored indexes are reused, nothing fetched, --out written" \
	bash -c "printf '%s' \"\$1\" | grep -q '5 of 5 shards (0 kept from the earlier sidecar, 5 from the cache, 0 scanned)' &&
		printf '%s' \"\$1\" | grep -q 'fetched 0 shards' && [ -s '$D/from-cache.idx' ]" _ "$out"

# Two shards exchange their bytes after indexing: their entries no longer
# fit their ETags; they are scanned again and served with the new bytes.
a=train-00000-of-00005.tfrecord b=train-00001-of-00005.tfrecord
mkdir -p "$D/swapped" && cp "$D"/tfr/* "$D/swapped/" &&
	cp "$D/tfr/$a" "$D/swapped/$b" && cp "$D/tfr/$b" "$D/swapped/$a"
s3_upload "$D/swapped" train idx/tfr || not_ok "upload the swapped shards"
mount_fg "$D/swapped" "$D/ref-swapped" "${LOCAL[@]}" || not_ok "local mount of the swapped shards"
: >"$D/proxy.port.log"
if mount_fg s3://train/idx/tfr "$D/m-swap" "${COMMON[@]}" --cache "$D/lmdb-swap" \
	--shard-cache "$D/sc-swap" --s3-endpoint "$PROXY"; then
	check "two shards replaced since: scanned again, the others from the sidecar" \
		test "$(counts "$D/m-swap")" = "5 3 2 2 0"
	check "...only they were fetched to index them" \
		test "$(stat_of "$D/m-swap" "s['remote']['fetched']")" = 2
	check "...and every batch is the new shards' (no offset of the sidecar used)" \
		cmp <(every_batch "$D/ref-swapped") <(every_batch "$D/m-swap")
	check "batchfs status says where the indexes came from" \
		bash -c "'$BATCHFS' status '$D/m-swap' | grep -q '^index .*3 from the sidecar index, 0 from DALI .idx files, 2 scanned'"
	unmount_wait "$D/m-swap"
else
	not_ok "mount after two shards were replaced: $(tail -2 "$D/mount.log")"
fi
check "the mount message says how many changed since" \
	grep -q "2 changed since it was written, 0 not in it, 0 damaged: scanned" "$D/mount.log"
out=$("$BATCHFS" index s3://train/idx/tfr --shard-cache "$D/index-shards" -q 2>&1) ||
	not_ok "reindex: $out"

# A damaged sidecar object: the directory refuses it whole, a blob costs
# only its shard; the log says so, and the batches are right.
flip() { # FILE OFFSET: one byte inverted (negative: from the end)
	$PY -c "import sys; p, o = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, 'rb').read()); b[o] ^= 0xff; open(p, 'wb').write(b)" "$1" "$2"
}
put_sidecar() { # FILE: upload it as the tfr prefix's sidecar
	curl -sf -X PUT -T "$1" "http://127.0.0.1:$FILER_PORT/buckets/train/idx/tfr/.batchfs-index" >/dev/null
}
curl -sf -o "$D/good-index" "http://127.0.0.1:$FILER_PORT/buckets/train/idx/tfr/.batchfs-index" ||
	not_ok "download the sidecar"
damaged() { # NAME WANT-COUNTS LOG-PATTERN
	rm -rf "$D/sc-bad" "$D/lmdb-bad"
	if mount_fg s3://train/idx/tfr "$D/m-bad" "${COMMON[@]}" --cache "$D/lmdb-bad" \
		--shard-cache "$D/sc-bad"; then
		check "$1: counted as such" test "$(counts "$D/m-bad")" = "$2"
		check "$1: the batches are right" cmp <(every_batch "$D/ref-swapped") <(every_batch "$D/m-bad")
		check "$1: the log says so" grep -q -- "$3" "$D/mount.log"
		unmount_wait "$D/m-bad"
	else
		not_ok "$1: the mount failed: $(tail -2 "$D/mount.log")"
	fi
}
cp "$D/good-index" "$D/bad-index" && flip "$D/bad-index" 70 && put_sidecar "$D/bad-index"
damaged "a sidecar object whose directory is damaged is passed over whole" "5 0 5 0 0" \
	"s3://train/idx/tfr/.batchfs-index is damaged or not one (sidecar index: its directory's CRC32C fails)"
cp "$D/good-index" "$D/bad-index" && flip "$D/bad-index" -1 && put_sidecar "$D/bad-index"
damaged "an entry whose blob is damaged: only its shard is scanned" "5 4 1 0 1" \
	"sidecar index: 1 entries are damaged (the first: train-00004-of-00005.tfrecord)"
put_sidecar "$D/good-index"

# What batchfs index refuses.
out=$(AWS_ACCESS_KEY_ID=$S3_RO_KEY AWS_SECRET_ACCESS_KEY=$S3_RO_SECRET \
	"$BATCHFS" index s3://train/idx/wds --shard-cache "$D/index-shards" 2>&1)
check "credentials that may not write: the PUT's 403 is said, with --out as the way out" \
	bash -c "printf '%s' \"\$1\" | grep -q 'cannot write s3://train/idx/wds/.batchfs-index: .*403.*give --out FILE'" _ "$out"
out=$("$BATCHFS" index s3://train/nothing-here --shard-cache "$D/index-shards" 2>&1)
check "a prefix with no objects is named" \
	bash -c "printf '%s' \"\$1\" | grep -q 'no objects under this prefix'" _ "$out"

# ---- https: a sidecar published beside a brace pattern's shards ----------
mkdir -p "$D/www"
cp -r "$D/wds" "$D/www/wds"
https_start "$D/www"
export AWS_CA_BUNDLE=$HTTPS_CA
nw=$(ls "$D/wds" | wc -l)
URL="https://127.0.0.1:$HTTPS_PORT/wds/train-{000000..$(printf '%06d' $((nw - 1)))}.tar"
mount_fg "$D/wds" "$D/local-wds" "${LOCAL[@]}" || not_ok "local mount of the tars"
if mount_fg "$URL" "$D/https-none" "${COMMON[@]}" --cache none --shard-cache "$D/sc-https0"; then
	got=$(stat_of "$D/https-none" "(s['index']['sidecar'], s['index']['scanned'])")
	check "https:// without a sidecar (a 404): indexed by scanning, nothing said" \
		bash -c "[ \"\$1\" = '(False, $nw)' ] && ! grep -q 'sidecar index could not be read' '$D/mount.log'" _ "$got"
	unmount_wait "$D/https-none"
else
	not_ok "https:// mount without a sidecar: $(tail -2 "$D/mount.log")"
fi
out=$("$BATCHFS" index "$URL" --shard-cache "$D/index-shards" 2>&1)
check "batchfs index of https:// asks for --out" \
	bash -c "printf '%s' \"\$1\" | grep -q 'read-only over http(s): give --out FILE'" _ "$out"
out=$("$BATCHFS" index "$URL" --shard-cache "$D/index-shards" --out "$D/www/wds/.batchfs-index" 2>&1) ||
	not_ok "batchfs index $URL --out: $out"
check "batchfs index of https:// --out FILE: every shard, with its ETag" \
	bash -c "printf '%s' \"\$1\" | grep -q 'wrote $D/www/wds/.batchfs-index: $nw of $nw shards'" _ "$out"
: >"$HTTPS_LOG"
if mount_fg "$URL" "$D/https" "${COMMON[@]}" --cache "$D/lmdb-https" --shard-cache "$D/sc-https"; then
	check "https:// with a published sidecar: every index from it, none scanned" \
		test "$(counts "$D/https")" = "$nw $nw 0 0 0"
	check "https://: nginx served the sidecar and no tar before the first batch" \
		bash -c "[ \"\$(grep -c '^GET /wds/train-' '$HTTPS_LOG')\" = 0 ] && grep -q '^GET /wds/.batchfs-index 20[06] ' '$HTTPS_LOG'"
	check "https://: every batch equals the local mount's" \
		cmp <(every_batch "$D/local-wds") <(every_batch "$D/https")
	unmount_wait "$D/https"
else
	not_ok "https:// mount with a published sidecar: $(tail -2 "$D/mount.log")"
fi

# ---- wids: index.json names the shards -----------------------------------
# wids_json OUT [SHARD DELTA]: a wids index of the tars (nsamples: the
# images of each, as wids counts them; SHARD's off by DELTA)
wids_json() {
	$PY - "$D/www/wds" "$1" "${2:-}" "${3:-0}" <<'PY'
import json, os, sys, tarfile
d, out, odd, delta = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
shards = []
for name in sorted(f for f in os.listdir(d) if f.endswith(".tar")):
    with tarfile.open(os.path.join(d, name)) as t:
        keys = {m.name.rsplit(".", 1)[0] for m in t.getmembers() if m.isfile()}
    shards.append({"url": name, "nsamples": len(keys) + (delta if name == odd else 0),
                   "filesize": os.path.getsize(os.path.join(d, name))})
json.dump({"__kind__": "wids-shard-index-v1", "wids_version": 1,
           "name": "test", "shardlist": shards}, open(out, "w"))
PY
}
wids_json "$D/www/wds/index.json" && wids_json "$D/www/wds/odd.json" train-000001.tar 1 ||
	not_ok "write the wids indexes"
if mount_fg "https://127.0.0.1:$HTTPS_PORT/wds/index.json" "$D/wids" "${COMMON[@]}" \
	--cache none --shard-cache "$D/sc-wids"; then
	check "wids: index.json's shards are the source, every batch the local mount's" \
		cmp <(every_batch "$D/local-wds") <(every_batch "$D/wids")
	check "wids: the sidecar beside its shards is used too" \
		test "$(counts "$D/wids")" = "$nw $nw 0 0 0"
	check "wids: every sample count as it says, and the message says so" \
		grep -q "wids index: $nw shards, every sample count as it says" "$D/mount.log"
	unmount_wait "$D/wids"
else
	not_ok "mount of a wids index: $(tail -2 "$D/mount.log")"
fi
if mount_fg "https://127.0.0.1:$HTTPS_PORT/wds/odd.json" "$D/wids-odd" "${COMMON[@]}" \
	--cache none --shard-cache "$D/sc-wids"; then
	check "wids: a shard whose count disagrees is named in the mount message, and served" \
		bash -c "grep -q 'wids index: $nw shards, which disagrees: train-000001.tar holds 9 samples, the wids index says 10' '$D/mount.log' &&
			cmp <(cd '$D/local-wds' && cat epoch-0000/* epoch-0001/*) <(cd '$D/wids-odd' && cat epoch-0000/* epoch-0001/*)"
	check "wids: ...and warned of in the log" \
		grep -q "warning.*wids index .*odd.json disagrees with the shards: train-000001.tar holds 9 samples" "$D/mount.log"
	unmount_wait "$D/wids-odd"
else
	not_ok "mount of a wids index that disagrees: $(tail -2 "$D/mount.log")"
fi
printf '{"wids_version": 1, "shardlist": []}' >"$D/www/wds/empty.json"
mkdir -p "$D/refused"
T_MOUNTS+=("$D/refused")
out=$(timeout 60 "$BATCHFS" mount "https://127.0.0.1:$HTTPS_PORT/wds/empty.json" "$D/refused" \
	--cache none --shard-cache "$D/sc-wids" 2>&1)
check "wids: an index without shards is refused, saying so" \
	bash -c "printf '%s' \"\$1\" | grep -q 'wids index: no shards in it'" _ "$out"
out=$(timeout 60 "$BATCHFS" mount "https://127.0.0.1:$HTTPS_PORT/wds/none.json" "$D/refused" \
	--cache none --shard-cache "$D/sc-wids" 2>&1)
check "wids: an index that is not there (404) is named" \
	bash -c "printf '%s' \"\$1\" | grep -q 'wids index: https://127.0.0.1:$HTTPS_PORT/wds/none.json: HEAD: HTTP 404'" _ "$out"
unmount_wait "$D/local-wds"
unmount_wait "$D/ref-swapped"
t_end
