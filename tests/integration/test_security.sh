#!/usr/bin/env bash
# Security properties of a real mount: it is read-only (every call that
# would change it fails with EROFS or EPERM); allow_other is off unless
# --allow-other is given, and then other users may read but not write;
# files are 0444 and directories 0555, owned by the mounting user; no name
# outside the canonical ones resolves ("..", over-long names, odd bytes,
# non-canonical numbers); and log lines escape every byte that comes from a
# shard (a shard named with an escape sequence and a newline, records whose
# bad payloads make the decoder and parser talk), in the foreground log and
# in the daemon's --log file.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
NB=65534
asnobody() { setpriv --reuid=$NB --regid=$NB --clear-groups "$@"; }
export NB
export -f asnobody

"$MKJPEG" "$D/jpegs" --classes 2 --per-class 8 --min-size 40 --max-size 90 \
	--seed 5 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 8 --quiet || { not_ok mkshards; t_end; }
chmod 0755 "$D"
chmod -R a+rX "$D/shards"

mount_fg "$D/shards" "$D/mnt" --batch 4 --size 32x32 --threads 2 || { not_ok "mount"; t_end; }
M=$D/mnt
E=$M/epoch-0000

check "every call that would change the mount fails with EROFS (or EPERM)" $PY - "$M" <<'PY'
import errno, os, sys
m = sys.argv[1]
f, d = m + "/epoch-0000/batch-000000.npy", m + "/epoch-0000"
calls = {
    "open O_WRONLY": lambda: os.open(f, os.O_WRONLY),
    "open O_RDWR": lambda: os.open(f, os.O_RDWR),
    "open O_RDONLY|O_TRUNC": lambda: os.open(f, os.O_RDONLY | os.O_TRUNC),
    "open O_CREAT new": lambda: os.open(d + "/new.npy", os.O_WRONLY | os.O_CREAT, 0o644),
    "open O_APPEND": lambda: os.open(m + "/dataset.json", os.O_WRONLY | os.O_APPEND),
    "mkdir": lambda: os.mkdir(m + "/epoch-0001"),
    "rmdir": lambda: os.rmdir(d),
    "unlink": lambda: os.unlink(f),
    "rename": lambda: os.rename(f, d + "/batch-000009.npy"),
    "rename dir": lambda: os.rename(d, m + "/epoch-0009"),
    "link": lambda: os.link(f, d + "/hard.npy"),
    "symlink": lambda: os.symlink("/etc/passwd", d + "/passwd"),
    "mknod fifo": lambda: os.mkfifo(d + "/fifo"),
    "setxattr": lambda: os.setxattr(f, "user.batchfs.shape", b"(1,)"),
    "removexattr": lambda: os.removexattr(f, "user.batchfs.shape"),
    "truncate": lambda: os.truncate(f, 0),
    "chmod": lambda: os.chmod(f, 0o666),
    "chown": lambda: os.chown(f, 65534, 65534),
    "utime": lambda: os.utime(f, (0, 0)),
}
bad = []
for name, call in calls.items():
    try:
        call()
        bad.append(f"{name}: succeeded")
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EPERM):
            bad.append(f"{name}: {errno.errorcode.get(e.errno, e.errno)}")
assert not bad, bad
assert not os.access(f, os.W_OK) and os.access(f, os.R_OK)
assert os.statvfs(m).f_flag & os.ST_RDONLY
print(len(calls), "calls refused")
PY
check "the bytes are unchanged after all those attempts" \
	cmp <(cat "$E/batch-000000.npy") "$E/batch-000000.npy"

check "/proc/mounts: ro, default_permissions, and no allow_other by default" \
	bash -c "o=\$(awk -v m='$M' '\$2 == m {print \$4}' /proc/mounts); echo \"\$o\";
		[[ ,\$o, == *,ro,* && ,\$o, == *,default_permissions,* && ,\$o, != *,allow_other,* ]]"
check "files are 0444 and directories 0555, owned by the mounting user" \
	bash -c "test \"\$(stat -c '%a %u %g' '$E/batch-000000.npy' '$M/dataset.json' '$M/stats.json' '$E/batch-000000.labels.npy' | sort -u)\" = '444 $(id -u) $(id -g)' &&
		test \"\$(stat -c '%a %u %g' '$M' '$E' | sort -u)\" = '555 $(id -u) $(id -g)'"
# Acting as another user takes root (setpriv), and so does --allow-other
# unless /etc/fuse.conf says user_allow_other; CI runs as root.
if [ "$(id -u)" -eq 0 ]; then
	check "another user (nobody) may not read it without --allow-other (EACCES)" \
		bash -c "! asnobody cat '$M/dataset.json' >/dev/null 2>'$D/n1.err' && grep -q 'Permission denied' '$D/n1.err' &&
			! asnobody ls '$E' >/dev/null 2>&1"
	mount_fg "$D/shards" "$D/mao" --batch 4 --size 32x32 --threads 2 --allow-other ||
		{ not_ok "mount --allow-other"; t_end; }
	check "--allow-other shows allow_other in /proc/mounts" \
		bash -c "[[ ,\$(awk -v m='$D/mao' '\$2 == m {print \$4}' /proc/mounts), == *,allow_other,* ]]"
	check "with --allow-other, nobody reads the same bytes root reads" \
		bash -c "cmp <(asnobody cat '$D/mao/epoch-0000/batch-000001.npy') '$E/batch-000001.npy'"
	check "with --allow-other, nobody still cannot write (EROFS/EACCES)" \
		bash -c "! asnobody sh -c 'echo x >> \"$D/mao/dataset.json\"' 2>/dev/null &&
			! asnobody touch '$D/mao/epoch-0000/new' 2>/dev/null"
	unmount_wait "$D/mao"
else
	echo "skip other users' access: needs root to act as another user (setpriv)"
fi

check "the directories list only canonical names" $PY - "$M" <<'PY'
import os, sys
m = sys.argv[1]
assert sorted(os.listdir(m)) == ["dataset.json", "epoch-0000", "stats.json"], os.listdir(m)
# every batch's .npy and .labels.npy, and nothing but batch-NNNNNN.* files
# (index.json and preview.jpg may be listed too) that exist
import re
names = os.listdir(m + "/epoch-0000")
want = {f"batch-{k:06d}{s}" for k in range(4) for s in (".npy", ".labels.npy")}
assert want <= set(names), names
for n in names:
    assert re.fullmatch(r"batch-00000[0-3]\.[a-z.]+", n), n
    os.stat(f"{m}/epoch-0000/{n}")
PY
check "no other name resolves: '..'-tricks, odd bytes, long and non-canonical names" \
	$PY - "$M" <<'PY'
import errno, os, sys
m = os.fsencode(sys.argv[1])
e = m + b"/epoch-0000"
names = [b"batch-0.npy", b"batch-00000.npy", b"batch-0000000.npy", b"batch-+00000.npy",
         b"batch--00000.npy", b"batch- 00000.npy", b"batch-000000.npy.bak",
         b"batch-000000.NPY", b"BATCH-000000.npy", b" batch-000000.npy",
         b"batch-000000.npy ", b"batch-000000.npy\n", b"batch-00000\n.npy",
         b"batch-000000\xff.npy", b"\xff", b"%2e%2e", b"..%2fdataset.json",
         b"batch-%30%30%30%30%30%30.npy", b"batch-000004.npy", b"batch-000000.labels",
         b"batch-000000.labels.npy.npy", b"batch-000000..npy", b"batch-000000",
         b"batch-\xd9\xa0\xd9\xa0\xd9\xa0\xd9\xa0\xd9\xa0\xd9\xa0.npy", b"etc", b"passwd"]
roots = [b"epoch-0", b"epoch-0001", b"epoch-00000", b"epoch-+000", b"Epoch-0000",
         b"dataset.json\n", b"stats.json.tmp", b"..%2f..%2fetc%2fpasswd", b"\x1b[31m",
         b"epoch-0000\xff", b"proc", b"etc"]
bad = []
for parent, lst in ((e, names), (m, roots)):
    for n in lst:
        try:
            os.stat(parent + b"/" + n)
            bad.append(n)
        except OSError as x:
            if x.errno != errno.ENOENT:
                bad.append((n, x.errno))
# '..' is resolved by the kernel, within the mount and up out of it as for
# any directory: the daemon never sees it, and it maps onto nothing new.
assert os.path.samefile(e + b"/..", m)
assert os.path.samefile(e + b"/../epoch-0000/./batch-000000.npy", e + b"/batch-000000.npy")
for n, want in ((b"a" * 255, errno.ENOENT), (b"a" * 256, errno.ENAMETOOLONG),
                (b"batch-" + b"0" * 300 + b".npy", errno.ENAMETOOLONG),
                (b"epoch-" + b"0" * 249, errno.ENOENT), (b"epoch-" + b"0" * 250, errno.ENAMETOOLONG)):
    try:
        os.stat(e + b"/" + n)
        bad.append(n[:20])
    except OSError as x:
        if x.errno != want:
            bad.append((n[:20], x.errno, want))
try:
    os.stat(e + b"/" + b"/".join([b"x" * 200] * 30))
    bad.append("4 KiB path")
except OSError as x:
    if x.errno not in (errno.ENAMETOOLONG, errno.ENOENT):
        bad.append(("4 KiB path", x.errno))
assert not bad, bad
print(len(names) + len(roots) + 6, "names refused")
PY
unmount_wait "$M"

# ---- log lines escape shard bytes ---------------------------------------------
# A shard whose *name* holds an escape sequence and a newline that would
# forge a log line, with records that make the decoder and the Example
# parser report (non-JPEG bytes, feature keys with control bytes), a record
# over --max-pixels, and a cut record so the index complains too.
mkdir -p "$D/evil"
$PY - "$D/evil" <<'PY'
import os, sys
from tfrec import example, record, write_shard
d = os.fsencode(sys.argv[1])
jp = open(sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1] + "/../jpegs") for f in fs)[0], "rb").read()
evil = b"a\x1b[31mRED\x1b[0m\nFAKE 2020-01-01 batchfs[1] error: forged\r\x07.tfrecord"
recs = [record(example({"image/encoded": jp, "image/class/label": 0})),
        record(example({"image/encoded": b"\x1b[2J\x1b]0;pwned\x07\n\xff\xfe", "image/class/label": 1})),
        record(example({"image/\x1b[1mkey\n": jp, "image/class/label": 2})),
        record(example({"image/encoded": jp, "image/class/label": 3}))]
write_shard(d + b"/" + evil, recs)
with open(d + b"/" + evil, "ab") as f:
    f.write(record(b"x" * 40)[:20])
write_shard(d + b"/b\xff\xfe%s%n\\x41.tfrecord", recs[:1] + [recs[1]] + recs[2:])
PY
check "the evil shard names exist on disk" test "$(find "$D/evil" -type f -printf x | wc -c)" = 2
LOG0=$(wc -l <"$D/mount.log")
mount_fg "$D/evil" "$D/me" --batch 2 --size 32x32 --threads 1 || { not_ok "mount evil"; t_end; }
for f in "$D/me/epoch-0000"/*; do cat "$f" >/dev/null 2>&1; done
unmount_wait "$D/me"
tail -n +$((LOG0 + 1)) "$D/mount.log" >"$D/evil.log"

# The same in the daemon's own log file (no -f: forked, --log FILE).
mkdir -p "$D/md" "$D/ms"
"$BATCHFS" mount "$D/evil" "$D/md" --batch 2 --size 32x32 --threads 1 \
	--log "$D/daemon.log" >/dev/null 2>&1 || not_ok "daemon mount with --log"
T_MOUNTS+=("$D/md")
for f in "$D/md/epoch-0000"/*; do cat "$f" >/dev/null 2>&1; done
"$BATCHFS" unmount "$D/md" >/dev/null 2>&1

for L in "$D/evil.log" "$D/daemon.log"; do
	n=$(basename "$L")
	check "$n: has log lines for the evil shards" \
		bash -c "test \$(grep -c 'bad sample' '$L') -ge 4 && grep -q 'shard a' '$L'"
	check "$n: no raw control or non-ASCII byte (only \\n ends lines)" \
		bash -c "! LC_ALL=C grep -q '[^[:print:]]' '$L'"
	check "$n: the escape sequence, newline and 0xff show as \\x.. escapes" \
		bash -c "grep -qF 'a\\x1b[31mRED\\x1b[0m\\x0aFAKE' '$L' && grep -qF 'b\\xff\\xfe%s%n\\x5cx41.tfrecord' '$L'"
	check "$n: no forged line" bash -c "! grep -q '^FAKE' '$L'"
	check "$n: every line is a batchfs log line" \
		bash -c "! grep -v '^[0-9-]* [0-9:]* batchfs\\[[0-9]*\\] [a-z]*: ' '$L' | grep -v '^batchfs: ' | grep -q ."
done
check "stats.json keeps the exact names, JSON-escaped" bash -c "
	'$BATCHFS' mount '$D/evil' '$D/ms' --batch 2 --size 32x32 --threads 1 --log /dev/null >/dev/null &&
	for f in '$D/ms/epoch-0000'/*; do cat \"\$f\" >/dev/null 2>&1; done;
	$PY -c '
import json, sys
raw = open(\"$D/ms/stats.json\", \"rb\").read()
assert all(b >= 0x20 and b < 0x7f or b == 10 for b in raw), \"raw control byte in stats.json\"
st = json.loads(raw)
want = \"a\x1b[31mRED\x1b[0m\nFAKE 2020-01-01 batchfs[1] error: forged\r\x07.tfrecord\"
assert want in st[\"bad_shards\"], st[\"bad_shards\"]'; rc=\$?; '$BATCHFS' unmount '$D/ms' >/dev/null; exit \$rc"
T_MOUNTS+=("$D/ms")
# A mount that fails prints its message on the terminal: a shard name's
# escape sequence must not reach it raw.
mkdir -p "$D/escdir" "$D/escmnt"
printf 'garbage that is not a shard' >"$D/escdir/a$(printf '\033')[31mRED.tfrecord"
out=$("$BATCHFS" mount "$D/escdir" "$D/escmnt" --format tfrecord 2>&1)
check "a failed mount's message shows a shard name's escape as \\x1b, never raw" \
	bash -c "printf '%s' \"\$1\" | grep -qF 'a\\x1b[31mRED' && ! printf '%s' \"\$1\" | LC_ALL=C grep -q \$'\\033'" _ "$out"
t_end
