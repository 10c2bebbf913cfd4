#!/usr/bin/env bash
# A file that is not a shard never has its content quoted: a shard dir
# holding a symlink to a private file of secret text (as one to
# /etc/shadow would be, readable by every user through stats.json with
# --allow-other), and files of other kinds (gzip, PNG) under shard names.
# stats.json, index.json, the log and the mount's own output name each
# file and what it looks like, and hold no byte, character or number
# decoded from the secret.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

mkdir -p "$D/private"
$PY - "$D/private/secret.txt" <<'PY' || { not_ok "write the secret"; t_end; }
import sys
line = b"SECRET-TOKEN-1234 root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n"
open(sys.argv[1], "wb").write(line * 12)    # over 512 bytes: a tar block
PY
chmod 600 "$D/private/secret.txt"
"$MKJPEG" "$D/jpegs" --classes 1 --per-class 4 --seed 2 --min-size 24 \
	--max-size 40 >/dev/null || { not_ok mkjpeg; t_end; }
printf 'some text' | gzip -c >"$D/private/data.gz"
printf '\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x10\0\0\0\x10\x08\x02\0\0\0' >"$D/private/img.png"

# TFRecord, tar (--format tar) and folder layouts, each with a good shard,
# the symlink to the secret and the gzip and PNG files under shard names.
$PY - "$D" <<'PY' || { not_ok "write the shard dirs"; t_end; }
import io, os, shutil, sys, tarfile
from tfrec import example, record, write_shard
d = sys.argv[1]
jp = sorted(os.path.join(r, f) for r, _, fs in os.walk(d + "/jpegs") for f in fs)
for sub in ("tfr", "tar", "folder/c", "only"):
    os.makedirs(f"{d}/{sub}")
write_shard(f"{d}/tfr/good.tfrecord",
            [record(example({"image/encoded": open(p, "rb").read(), "image/class/label": i}))
             for i, p in enumerate(jp)])
with tarfile.open(f"{d}/tar/good.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for i, p in enumerate(jp):
        t.add(p, f"s{i}.jpg")
        data = b"%d" % i
        ti = tarfile.TarInfo(f"s{i}.cls"); ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
for i, p in enumerate(jp):
    shutil.copy(p, f"{d}/folder/c/good{i}.jpg")
for sub, ext in (("tfr", ".tfrecord"), ("tar", ".tar"), ("folder/c", ".jpg"), ("only", ".tfrecord")):
    os.symlink(f"{d}/private/secret.txt", f"{d}/{sub}/secret{ext}")
    if sub != "only":
        shutil.copy(f"{d}/private/data.gz", f"{d}/{sub}/data{ext}")
        shutil.copy(f"{d}/private/img.png", f"{d}/{sub}/img{ext}")
PY

# What must never appear: the text itself, and the numbers the scanners
# used to decode from it (the TFRecord length field and CRCs, the tar
# checksum field and byte sum, the decoder's first four bytes).
$PY - "$D/private/secret.txt" >"$D/forbidden" <<'PY'
import struct, sys
from tfrec import crc32c, masked_crc
b = open(sys.argv[1], "rb").read()
out = ["SECRET", "TOKEN", "saltsalt", "hashhash"]
out.append(str(struct.unpack("<Q", b[:8])[0]))
out.append("0x%08x" % struct.unpack("<I", b[8:12])[0])
out.append("0x%08x" % masked_crc(b[:8]))
h = bytearray(b[:512]); h[148:156] = b" " * 8
out.append("0o%o" % sum(h))
out.append(" ".join("%02X" % c for c in b[:4]))
print("\n".join(out))
PY

scan_for_secret() { # FILE...: fails, naming what it found, if any is there
	local f hit=0
	for f in "$@"; do
		if grep -aF -f "$D/forbidden" "$f" >"$D/hits"; then
			echo "$f: $(head -3 "$D/hits")"
			hit=1
		fi
	done
	return $hit
}

read_all() { # MNT: every batch file, stats.json and each index.json
	local m=$1 f
	for f in "$m"/epoch-0000/*.npy; do cat "$f" >/dev/null 2>&1; done
	for f in "$m"/epoch-0000/batch-*.labels.npy; do
		cat "${f%.labels.npy}.index.json" >>"$D/out.$2" 2>/dev/null
	done
	cat "$m/stats.json" >>"$D/out.$2"
}

mount_fg "$D/tfr" "$D/m1" --batch 2 --size 16x16 --allow-other || { not_ok "mount tfrecord dir"; t_end; }
mount_fg "$D/tar" "$D/m2" --batch 2 --size 16x16 --allow-other --format tar || { not_ok "mount tar dir"; t_end; }
mount_fg "$D/folder" "$D/m3" --batch 2 --size 16x16 --allow-other || { not_ok "mount folder"; t_end; }
read_all "$D/m1" tfr
read_all "$D/m2" tar
read_all "$D/m3" folder
unmount_wait "$D/m1"
# again from the cached shard indexes
mount_fg "$D/tfr" "$D/m4" --batch 2 --size 16x16 || { not_ok "remount tfrecord dir"; t_end; }
read_all "$D/m4" tfr-cached
# a dir of nothing but the symlink: the mount fails, and says why
mkdir -p "$D/m5"
"$BATCHFS" mount -f "$D/only" "$D/m5" --batch 2 >"$D/out.only" 2>&1 &&
	not_ok "a dir of only the secret mounted"
"$BATCHFS" mount "$D/only" "$D/m5" --batch 2 >>"$D/out.only" 2>&1 &&
	{ T_MOUNTS+=("$D/m5"); not_ok "a dir of only the secret mounted (daemon)"; }

check "the test sees the secret where it is" \
	grep -qF -f "$D/forbidden" "$D/private/secret.txt"
check "stats.json names each file that is not a shard and what it looks like" \
	$PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
def errs(m):
    return {e["shard"]: e["message"] for e in json.load(open(f"{d}/{m}/stats.json"))["errors"]}
t = errs("m4")
assert t["secret.tfrecord"] == "not a TFRecord, tar or JPEG file: its first record header fails its length CRC", t
# gzip is read now: what its data hold is named, never quoted
assert t["data.tfrecord"] == ("in its gzip-compressed data: record 0 at offset 0: "
                              "file ends inside the 12-byte header (9 bytes left)"), t
assert t["img.tfrecord"].endswith("it looks like a PNG image"), t
t = errs("m2")
assert t["secret.tar"] == "not a TFRecord, tar or JPEG file: its first 512 bytes are not a tar header", t
assert t["data.tar"] == ("in its gzip-compressed data: member 0 at offset 0: "
                         "file ends inside the 512-byte header (9 bytes left)"), t
assert t["img.tar"].endswith("it looks like a PNG image"), t
t = errs("m3")
assert t["c/secret.jpg"] == "not a JPEG, PNG or WebP image: no image signature", t
assert t["c/data.jpg"] == "not a JPEG, PNG or WebP image: looks like gzip data", t
assert t["c/img.jpg"] == "PNG cut short before the end of its IHDR chunk (29 bytes)", t
PY
check "the failed mount names the file and what is wrong with it" \
	grep -q "secret.tfrecord: not a TFRecord, tar or JPEG file" "$D/out.only"
check "no secret in stats.json or index.json (TFRecord, tar, folder, cached index)" \
	scan_for_secret "$D/out.tfr" "$D/out.tar" "$D/out.folder" "$D/out.tfr-cached"
check "no secret in the log or the mount's output" \
	scan_for_secret "$D/mount.log" "$D/out.only"
t_end
