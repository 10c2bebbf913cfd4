#!/usr/bin/env bash
# Numbers of `batchfs mount` are read whole.  Before, sscanf's %u wrapped:
# --size 4294967297x64 and --size -4294967295x64 mounted as 1x64,
# 64x-4294967232 as 64x64, --size-schedule 4294967297@0 as 1x1, and
# --shuffle ' -1' as the seed 2^64-1.  Now each bad value below is refused
# with exit status 2 and a message naming its option, and nothing is
# mounted; the good values beside them mount.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/src" --classes 2 --per-class 3 --seed 3 >/dev/null || { not_ok "mkjpeg"; t_end; }
BASE=(--batch 2 --size 32x32 --cache none --threads 1)
RRC=(--augment rrc)

# OPTION VALUE [EXTRA OPTIONS...]: one row each
bad_rows=(
	"--size|4294967297x64"
	"--size|-4294967295x64"
	"--size|64x-4294967232"
	"--size|64x4294967360"
	"--size|18446744073709551617x1"
	"--size| 64"
	"--size|64x64x3"
	"--size-schedule|4294967297@0|rrc"
	"--size-schedule|64@0,4294967297x64@1|rrc"
	"--size-schedule|64@-1|rrc"
	"--size-schedule|64@0,96@4294967297|rrc"
	"--batch|4294967298"
	"--batch|-4294967295"
	"--threads|4294967297"
	"--threads|-1"
	"--prefetch|4294967297"
	"--epochs|4294967297"
	"--mem|-1"
	"--mem|18446744073709551616"
	"--mem|16777216T"
	"--mem| 1G"
	"--cache-size|-1G"
	"--cache-size|17179869184G"
	"--cache-res|4294967297|rrc"
	"--cache-res|-512|rrc"
	"--max-pixels|-1"
	"--max-pixels|18446744073709551616"
	"--crop-from|4294967552|crop"
	"--shuffle|-1"
	"--shuffle| -1"
	"--shuffle|18446744073709551616"
	"--label-offset|9223372036854775808"
	"--label-offset|-9223372036854775809"
	"--label-offset| 1"
	"--rank|4294967296"
	"--world|4294967297"
	"--ranks|0-4294967297"
	"--hold|4294967297"
	"--rrc-scale|0.08,1e999|rrc"
	"--rrc-scale|nan,1|rrc"
	"--rrc-ratio|0.75,inf|rrc"
	"--mean|nan,0,0|std"
	"--std|0,1,1|mean"
	"--std|1e39,1,1|mean"
)
n=0
for row in "${bad_rows[@]}"; do
	IFS='|' read -r opt val extra <<<"$row"
	n=$((n + 1))
	mnt="$D/m$n"
	mkdir -p "$mnt"
	T_MOUNTS+=("$mnt")
	args=("${BASE[@]}")
	# --mean and --std go together (each alone is refused for that), so a
	# bad value of one is given with a good other
	case "$extra" in
	rrc) args+=("${RRC[@]}") ;;
	crop) args+=(--resize crop) ;;
	mean) args+=(--mean 0.485,0.456,0.406) ;;
	std) args+=(--std 0.229,0.224,0.225) ;;
	esac
	out=$("$BATCHFS" mount "$D/src" "$mnt" "${args[@]}" "$opt" "$val" 2>&1)
	rc=$?
	if mountpoint -q "$mnt"; then
		shape=$(head -c 128 "$mnt/epoch-0000/batch-000000.npy" 2>/dev/null | grep -ao "'shape': ([^)]*)")
		not_ok "$opt '$val': mounted (batch ${shape:-?}), rc $rc"
		"$BATCHFS" unmount "$mnt" >/dev/null 2>&1 || fusermount3 -u "$mnt"
	elif [ "$rc" != 2 ]; then
		not_ok "$opt '$val': exit status $rc, not 2: $out"
	elif ! printf '%s' "$out" | grep -qF -- "$opt"; then
		not_ok "$opt '$val': the message does not name $opt: $out"
	else
		ok "$opt '$val' is refused naming $opt"
	fi
done

# the same options with good values mount (so the table above tests the
# values, not a mount that cannot start)
good_rows=(
	"--size|64x48"
	"--size-schedule|48@0,64x32@1|rrc"
	"--shuffle|0xffffffffffffffff"
	"--label-offset|-9223372036854775808"
	"--mem|64M"
	"--std|0.229,0.224,0.225|mean"
)
for row in "${good_rows[@]}"; do
	IFS='|' read -r opt val extra <<<"$row"
	n=$((n + 1))
	args=("${BASE[@]}")
	[ "$extra" = rrc ] && args+=("${RRC[@]}" --epochs 2)
	[ "$extra" = mean ] && args+=(--mean 0.485,0.456,0.406)
	if mount_fg "$D/src" "$D/m$n" "${args[@]}" "$opt" "$val"; then
		if [ "$opt" = --size ]; then
			check "--size 64x48: its batches are 2x64x48x3" \
				bash -c "head -c 128 '$D/m$n/epoch-0000/batch-000000.npy' | grep -aq \"'shape': (2, 64, 48, 3)\""
		else
			ok "$opt '$val' mounts"
		fi
		unmount_wait "$D/m$n"
	else
		not_ok "$opt '$val' does not mount: $(tail -2 "$T_DIR/mount.log")"
	fi
done
t_end
