#!/usr/bin/env bash
# --resize-filter pil through real mounts, against torchvision computed here
# on the same JPEGs (Image.open(f).convert("RGB"), as ImageFolder loads):
#   --resize crop --crop-from S  == CenterCrop(H, W)(Resize(S)(img)), ToTensor
#   --resize stretch             == Resize((H, W))(img), ToTensor
#   --augment rrc,flip           == F.resized_crop(img, *box, (H, W)) (+ hflip)
#                                   for the box and flip index.json names
# every sample bit for bit, gray JPEGs, up- and downscales included; and the
# default (tf) filter is not torchvision's, so the comparison can fail.
# Skips (with the reason) where torchvision or Pillow is not importable.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
if ! $PY -c "import torchvision, PIL" 2>/dev/null; then
	echo "skip test_pil: torchvision or Pillow is not importable (pip install torchvision pillow)"
	exit 0
fi

# 36 JPEGs of 30..200 px (so Resize(64) shrinks most and enlarges some),
# 4:2:0, 4:2:2 and 4:4:4, every 5th gray, every 7th CMYK
"$MKJPEG" "$D/jpegs" --classes 3 --per-class 12 --seed 71 --min-size 30 \
	--max-size 200 --gray-every 5 --cmyk-every 7 >/dev/null || { not_ok mkjpeg; t_end; }

# compare MNT MODE H W [S]: every batch of epoch 0 against torchvision
cmp_tv() {
	$PY - "$D/jpegs" "$@" <<'PY'
import glob, json, sys
import numpy as np
import torch
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F
src, m, mode, H, W = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
S = int(sys.argv[6]) if len(sys.argv) > 6 else 0
bil = T.InterpolationMode.BILINEAR
if mode == "crop":
    tf = T.Compose([T.Resize(S, interpolation=bil), T.CenterCrop((H, W)), T.ToTensor()])
elif mode == "stretch":
    tf = T.Compose([T.Resize((H, W), interpolation=bil), T.ToTensor()])
n = flips = 0
nb = json.load(open(m + "/dataset.json"))["batches_per_epoch"]
worst = 0.0
for k in range(nb):
    x = np.load(f"{m}/epoch-0000/batch-{k:06d}.npy")
    idx = json.load(open(f"{m}/epoch-0000/batch-{k:06d}.index.json"))
    for p, s in enumerate(idx["samples"]):
        img = Image.open(f"{src}/{s['shard']}").convert("RGB")
        if mode == "rrc":
            y, xx, h, w = s["box"]
            r = F.resized_crop(img, y, xx, h, w, [H, W], interpolation=bil)
            if s["flip"]:
                r = F.hflip(r)
                flips += 1
            want = T.ToTensor()(r)
        else:
            want = tf(img)
        want = want.permute(1, 2, 0).numpy()   # HWC, as the mount's default layout
        worst = max(worst, float(np.abs(x[p] - want).max()))
        if not np.array_equal(x[p], want):
            raise SystemExit(f"batch {k} position {p} ({s['shard']}, {img.size}): max "
                             f"difference {np.abs(x[p] - want).max() * 255:.1f}/255")
        n += 1
assert n == 36, n
if mode == "rrc":
    assert 0 < flips < n, flips
print(f"{n} samples equal to torchvision's")
PY
}

mount_fg "$D/jpegs" "$D/crop" --resize crop --crop-from 64 --size 56x48 --batch 8 \
	--resize-filter pil --cache none || { not_ok "mount crop"; t_end; }
check "Resize(64) + CenterCrop((56, 48)) + ToTensor, every sample bit for bit" cmp_tv "$D/crop" crop 56 48 64
cp "$D/crop/dataset.json" "$D/crop-dataset.json"
unmount_wait "$D/crop"

mount_fg "$D/jpegs" "$D/st" --size 40x52 --batch 8 --resize-filter pil \
	--cache "$D/cache" || { not_ok "mount stretch"; t_end; }
check "Resize((40, 52)) + ToTensor, every sample bit for bit (cold cache)" cmp_tv "$D/st" stretch 40 52
unmount_wait "$D/st"
mount_fg "$D/jpegs" "$D/st2" --size 40x52 --batch 8 --resize-filter pil \
	--cache "$D/cache" || { not_ok "remount stretch"; t_end; }
check "the same from the warm cache" cmp_tv "$D/st2" stretch 40 52
unmount_wait "$D/st2"

mount_fg "$D/jpegs" "$D/rrc" --augment rrc,flip --shuffle 5 --size 48x40 --batch 6 \
	--resize-filter pil --cache none || { not_ok "mount rrc"; t_end; }
check "RandomResizedCrop's boxes + hflip, every sample bit for bit" cmp_tv "$D/rrc" rrc 48 40
unmount_wait "$D/rrc"

# the default filter is TensorFlow's: not torchvision's (the check above can fail)
mount_fg "$D/jpegs" "$D/tf" --resize crop --crop-from 64 --size 56x48 --batch 8 \
	--cache none || { not_ok "mount tf"; t_end; }
if out=$(cmp_tv "$D/tf" crop 56 48 64 2>&1); then
	not_ok "the tf filter differs from torchvision: it was equal ($out)"
else
	ok "the tf filter differs from torchvision ($(printf '%s' "$out" | tail -1))"
fi
check "pil and tf have different fingerprints (a cache never mixes them)" $PY - \
	"$D/tf/dataset.json" "$D/crop-dataset.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["fingerprint"] for p in sys.argv[1:3])
assert a != b, (a, b)
PY
check "dataset.json names the filter, and Pillow's resize and decode under pil" $PY - \
	"$D/tf/dataset.json" "$D/crop-dataset.json" <<'PY'
import json, sys
tf, pil = (json.load(open(p)) for p in sys.argv[1:3])
assert tf["resize_filter"] == "tf" and "tf.image.resize" in tf["resize"], tf["resize"]
assert pil["resize_filter"] == "pil" and "Pillow" in pil["resize"] and "ISLOW" in pil["decode"], pil
PY
unmount_wait "$D/tf"

mkdir -p "$D/bad"
if out=$("$BATCHFS" mount "$D/jpegs" "$D/bad" --resize-filter lanczos 2>&1); then
	not_ok "--resize-filter lanczos was accepted"
	fusermount3 -u "$D/bad" 2>/dev/null
elif printf '%s' "$out" | grep -q -- "--resize-filter"; then
	ok "an unknown filter is refused, naming the option"
else
	not_ok "--resize-filter lanczos: the refusal does not name the option: $out"
fi
t_end
