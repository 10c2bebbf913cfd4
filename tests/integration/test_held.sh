#!/usr/bin/env bash
# Batch files a reader holds are memory the mount caused.  With
# passthrough a held file cannot be reused, so its slot moves on to a
# fresh file; before, holding 192 batch files open under --mem 96M grew
# /dev/shm to ~600 MB while stats.json said 60.  Now held files count in
# the budget, and once it is spent the next opens are served through the
# daemon's own read path instead of handing out more files.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 1 --per-class 480 --min-size 40 --max-size 80 \
	--seed 3 >/dev/null || { not_ok "mkjpeg"; t_end; }
# 30 batches of 16 at 128x128 float32 (3 MiB each) per epoch, 7 epochs:
# 210 batch files, ~620 MiB if every one were a file of its own
OPTS=(--batch 16 --size 128x128 --epochs 7 --cache none --mem 96M --threads 2 --max-pixels 1M)
mount_fg "$D/jpegs" "$D/plain" "${OPTS[@]}" --no-passthrough || { not_ok "mount plain"; t_end; }
mkdir -p "$D/shm"
if ! mount -t tmpfs -o size=1g batchfs-test-slots "$D/shm"; then
	echo "skip held_files_stay_within_the_budget: cannot mount a tmpfs here"
	t_end
fi
T_MOUNTS+=("$D/shm")
mount_fg "$D/jpegs" "$D/pt" "${OPTS[@]}" --slot-dir "$D/shm" || { not_ok "mount"; t_end; }

check "192 batch files held open (some mapped) stay within --mem 96M" $PY - "$D/pt" "$D/plain" "$D/shm" <<'PY'
import glob, json, mmap, os, sys
pt, plain, shm = sys.argv[1:]
MiB = 1 << 20

def shmem():
    for l in open("/proc/meminfo"):
        if l.startswith("Shmem:"):
            return int(l.split()[1]) * 1024

def slot_files():
    st = os.statvfs(shm)
    return (st.f_blocks - st.f_bfree) * st.f_frsize

s = json.load(open(f"{pt}/stats.json"))
assert s["passthrough"] is True, "passthrough is off here"
budget = s["memory_budget"]
names = sorted(os.path.relpath(p, pt) for p in glob.glob(f"{pt}/epoch-*/batch-*[0-9].npy"))[:192]
base = shmem()
held, maps = [], []
for k, n in enumerate(names):
    f = open(f"{pt}/{n}", "rb")
    head = f.read(128)
    if k % 4 == 0:  # np.load(mmap_mode='r') closes the file and keeps a map
        maps.append((n, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)))
        f.close()
    else:
        held.append((n, f, head))
grown, files = shmem() - base, slot_files()
s = json.load(open(f"{pt}/stats.json"))
print(f"# Shmem grew {grown / MiB:.0f} MiB, slot files {files / MiB:.0f} MiB, "
      f"budget {budget / MiB:.0f} MiB; stats: {s['memory']}, "
      f"passthrough opens {s['passthrough_opens']}, declined {s['passthrough_declined']}")
assert files <= budget, (files, budget)
assert grown <= budget + 32 * MiB, (grown, budget)
assert s["memory_bytes"] <= budget, s["memory_bytes"]
assert s["passthrough_declined"] > 0 and s["passthrough_opens"] > 0, s
# every held file and mapping still has its batch's bytes
for n, f, head in held:
    assert head + f.read() == open(f"{plain}/{n}", "rb").read(), n
for n, m in maps:
    assert m[:] == open(f"{plain}/{n}", "rb").read(), n
for _, f, _ in held:
    f.close()
for _, m in maps:
    m.close()
PY

check "once let go, the held files are freed and every file reads right" $PY - "$D/pt" "$D/plain" "$D/shm" <<'PY'
import glob, json, os, sys
pt, plain, shm = sys.argv[1:]
for n in sorted(glob.glob(f"{plain}/epoch-000[56]/batch-*.npy")):
    r = os.path.relpath(n, plain)
    assert open(f"{pt}/{r}", "rb").read() == open(n, "rb").read(), r
s = json.load(open(f"{pt}/stats.json"))
assert s["memory"]["held_file_count"] == 0, s["memory"]
st = os.statvfs(shm)
assert (st.f_blocks - st.f_bfree) * st.f_frsize <= s["memory_budget"]
PY
unmount_wait "$D/pt"
t_end
