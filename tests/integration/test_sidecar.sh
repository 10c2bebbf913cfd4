#!/usr/bin/env bash
# The sidecar index of a local shard directory and DALI's .idx files: a
# mount after `batchfs index` scans no shard (TFRecord, tar, gzip) and
# serves the bytes of a mount that scanned them; a shard replaced since is
# scanned again, never read at the sidecar's offsets; a damaged, cut or
# unfitting sidecar is passed over with a note in the log, a damaged entry
# costs only its shard's scan; a rerun keeps what still fits; what cannot
# be indexed or written is refused with why.  DALI's .idx files index
# TFRecord shards, and one that does not match its shard fails the read
# naming it.  (tests/integration/test_s3_index.sh: the same from s3://.)
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)
COMMON=(--batch 8 --size 40x48 --shuffle 3 --epochs 2 --threads 2 --cache none)

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 13 --seed 5 --min-size 30 \
	--max-size 90 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/tfr" --per-shard 8 --quiet || { not_ok mkshards; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wds" --per-shard 9 >/dev/null || { not_ok mkwds; t_end; }
mkdir -p "$D/gz" && for f in "$D"/tfr/*.tfrecord; do gzip -c "$f" >"$D/gz/$(basename "$f").gz"; done

every_batch() { (cd "$1" && cat epoch-0000/* epoch-0001/*); }
stat_of() { $PY -c "import json,sys; s=json.load(open('$1/stats.json')); print(eval(sys.argv[1]))" "$2"; }
# the index counts of a mount: "shards from_sidecar scanned changed damaged"
counts() { stat_of "$1" "' '.join(str(s['index'][k]) for k in ('shards', 'from_sidecar', 'scanned', 'sidecar_changed', 'sidecar_damaged'))"; }
# ref NAME DIR: a mount of a copy of DIR made now, without any index
ref() {
	rm -rf "$D/copy-$1" && cp -r "$2" "$D/copy-$1" && rm -f "$D/copy-$1/.batchfs-index" &&
		mount_fg "$D/copy-$1" "$D/ref-$1" "${COMMON[@]}"
}

for p in tfr wds gz; do
	n=$(ls "$D/$p" | wc -l)
	out=$("$BATCHFS" index "$D/$p" 2>&1) || { not_ok "batchfs index $p: $out"; continue; }
	check "batchfs index $p: every shard scanned and written" \
		bash -c "printf '%s' \"\$1\" | grep -q \"wrote $D/$p/.batchfs-index: $n of $n shards (0 kept from the earlier sidecar, $n scanned)\"" _ "$out"
	ref "$p" "$D/$p" || { not_ok "reference mount $p"; continue; }
	mount_fg "$D/$p" "$D/m-$p" "${COMMON[@]}" || { not_ok "mount $p"; continue; }
	check "$p: the mount took every shard's index from the sidecar, scanned none" \
		test "$(counts "$D/m-$p")" = "$n $n 0 0 0"
	check "$p: every batch equals a mount that scanned the shards" \
		cmp <(every_batch "$D/ref-$p") <(every_batch "$D/m-$p")
	unmount_wait "$D/m-$p"
	unmount_wait "$D/ref-$p"
done
check "the mount message says how many shards came from the sidecar" \
	grep -q "sidecar index: 5 of 5 shards from it" "$D/mount.log"

out=$("$BATCHFS" index "$D/tfr" 2>&1)
check "a rerun keeps every entry that still fits" \
	bash -c "printf '%s' \"\$1\" | grep -q '5 of 5 shards (5 kept from the earlier sidecar, 0 scanned)'" _ "$out"

# Two shards exchange their bytes (each keeps its name and inode): their
# entries no longer fit, and they are scanned.
a=$D/tfr/train-00000-of-00005.tfrecord b=$D/tfr/train-00001-of-00005.tfrecord
cp "$a" "$D/swap" && cp "$b" "$a" && cp "$D/swap" "$b"
ref swapped "$D/tfr" && mount_fg "$D/tfr" "$D/m-swap" "${COMMON[@]}" &&
	check "two shards rewritten since: scanned again, the others from the sidecar" \
		test "$(counts "$D/m-swap")" = "5 3 2 2 0" &&
	check "...and every batch is the rewritten shards' (no offset of the sidecar used)" \
		cmp <(every_batch "$D/ref-swapped") <(every_batch "$D/m-swap") ||
	not_ok "mount after two shards were rewritten"
unmount_wait "$D/m-swap"
check "the mount message says how many changed since" \
	grep -q "2 changed since it was written, 0 not in it, 0 damaged: scanned" "$D/mount.log"
"$BATCHFS" index "$D/tfr" -q || not_ok "reindex"

# A damaged sidecar: the header or directory refuses it whole; a blob
# costs only its shard.
flip() { # FILE OFFSET: one byte inverted (negative: from the end)
	$PY -c "import sys; p, o = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, 'rb').read()); b[o] ^= 0xff; open(p, 'wb').write(b)" "$1" "$2"
}
cp "$D/tfr/.batchfs-index" "$D/good-index"
damaged() { # NAME WANT-COUNTS LOG-PATTERN
	if mount_fg "$D/tfr" "$D/m-bad" "${COMMON[@]}"; then
		check "$1: counted as such" test "$(counts "$D/m-bad")" = "$2"
		check "$1: the batches are right" cmp <(every_batch "$D/ref-swapped") <(every_batch "$D/m-bad")
		check "$1: the log says so" grep -q -- "$3" "$D/mount.log"
		unmount_wait "$D/m-bad"
	else
		not_ok "$1: the mount failed: $(tail -2 "$D/mount.log")"
	fi
	cp "$D/good-index" "$D/tfr/.batchfs-index"
}
flip "$D/tfr/.batchfs-index" 70
damaged "a sidecar whose directory is damaged is passed over whole" "5 0 5 0 0" \
	"is damaged or not one (sidecar index: its directory's CRC32C fails)"
flip "$D/tfr/.batchfs-index" -1
damaged "an entry whose blob is damaged: only its shard is scanned" "5 4 1 0 1" \
	"sidecar index: 1 entries are damaged (the first: train-00004-of-00005.tfrecord)"
truncate -s 100 "$D/tfr/.batchfs-index"
damaged "a sidecar cut short is passed over" "5 0 5 0 0" "areas add up to another length"
"$BATCHFS" index "$D/tfr" --label-key none -q || not_ok "index with --label-key none"
damaged "a sidecar written with another --label-key is passed over, saying why" "5 0 5 0 0" \
	"is not used: it was written with --label-key none, not (the default)"

# What batchfs index refuses.
refused() { # NAME PATTERN ARGS...
	local name=$1 pat=$2 out
	shift 2
	if out=$("$BATCHFS" index "$@" 2>&1); then
		not_ok "$name: it succeeded: $out"
	elif printf '%s' "$out" | grep -q -- "$pat"; then
		ok "$name"
	else
		not_ok "$name: $out"
	fi
}
refused "an https:// source is read-only: --out FILE, and where to publish it" \
	"read-only over http(s): give --out FILE, then publish FILE as .batchfs-index in the folder of the shards" \
	"https://example.invalid/shard-{0..3}.tar"
refused "a folder of images has no shard indexes" "is a folder of images" "$D/jpegs"
rm -f "$D/wds/.batchfs-index" && mkdir "$D/wds/.batchfs-index"
refused "a sidecar that cannot be written: the path and why" \
	"cannot write $D/wds/.batchfs-index: Is a directory" "$D/wds"
check "...and no temporary file is left" bash -c "! ls -a '$D/wds' | grep -q 'batchfs-index.tmp'"
refused "no such directory" "No such file or directory" "$D/nothing"

# DALI's .idx files (tfrecord2idx's "OFFSET SIZE" per record) beside the
# shards of a copy without the sidecar.
dali() { # DIR [swap]: write SHARD.idx for each shard (swap: the first two
	#                 records of the first shard exchange their sizes)
	$PY - "$@" <<'PY'
import os, struct, sys
d, swap = sys.argv[1], len(sys.argv) > 2
for k, n in enumerate(sorted(f for f in os.listdir(d) if f.endswith(".tfrecord"))):
    b, off, recs = open(os.path.join(d, n), "rb").read(), 0, []
    while off < len(b):
        size = struct.unpack_from("<Q", b, off)[0] + 16
        recs.append([off, size])
        off += size
    if swap and k == 0:
        recs[0][1], recs[1][1] = recs[1][1], recs[0][1]
        recs[1][0] = recs[0][1]
    with open(os.path.join(d, n + ".idx"), "w") as f:
        f.writelines(f"{o} {s}\n" for o, s in recs)
PY
}
rm -rf "$D/dali" && cp -r "$D/copy-swapped" "$D/dali" && dali "$D/dali"
if mount_fg "$D/dali" "$D/m-dali" "${COMMON[@]}"; then
	check "DALI .idx files index every TFRecord shard, none is scanned" \
		test "$(stat_of "$D/m-dali" "(s['index']['from_dali'], s['index']['scanned'])")" = "(5, 0)"
	check "...and the batches are the scanned shards'" \
		cmp <(every_batch "$D/ref-swapped") <(every_batch "$D/m-dali")
	check "...and the mount message says so" grep -q "5 shards indexed from DALI .idx files" "$D/mount.log"
	unmount_wait "$D/m-dali"
else
	not_ok "mount with DALI .idx files: $(tail -2 "$D/mount.log")"
fi
# ...or in a folder of their own (--dali-index), as DALI's pipelines keep them
mkdir -p "$D/dali-idx" && mv "$D"/dali/*.idx "$D/dali-idx/"
if mount_fg "$D/dali" "$D/m-dalidir" "${COMMON[@]}" --dali-index "$D/dali-idx"; then
	check "--dali-index DIR: the .idx files there index every shard" \
		test "$(stat_of "$D/m-dalidir" "(s['index']['from_dali'], s['index']['scanned'])")" = "(5, 0)"
	check "...with the same batches" cmp <(every_batch "$D/ref-swapped") <(every_batch "$D/m-dalidir")
	unmount_wait "$D/m-dalidir"
else
	not_ok "mount with --dali-index: $(tail -2 "$D/mount.log")"
fi
out=$("$BATCHFS" mount "$D/dali" "$D/m-dalidir" --dali-index "$D/no-such" 2>&1)
check "--dali-index that is not a folder is refused, named" \
	bash -c "printf '%s' \"\$1\" | grep -q -- '--dali-index $D/no-such: No such file or directory'" _ "$out"
mv "$D"/dali-idx/*.idx "$D/dali/"
dali "$D/dali" swap
if mount_fg "$D/dali" "$D/m-dali2" "${COMMON[@]}"; then
	check "a DALI .idx whose offsets miss the records: those reads fail (EIO), never other bytes" \
		bash -c "! cat '$D/m-dali2'/epoch-0000/* >/dev/null 2>&1"
	check "...and the log names the .idx" \
		grep -q "came from DALI's train-00000-of-00005.tfrecord.idx" "$D/mount.log"
	unmount_wait "$D/m-dali2"
else
	not_ok "mount with a wrong DALI .idx: $(tail -2 "$D/mount.log")"
fi
unmount_wait "$D/ref-swapped"
t_end
