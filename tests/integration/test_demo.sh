#!/usr/bin/env bash
# The README's first command, `make demo`, as a new user runs it: it ends
# with `batchfs` as a command.  Into a PREFIX of the user's own (on the
# PATH, and not on it: the hint), as root into the default /usr/local (in
# a private mount namespace whose /usr/local and /usr/sbin are overlays,
# so nothing of this machine's is written), and without root for the
# default PREFIX: nothing installed, and the demo says the command that
# installs it.  The demo runs on a few generated JPEGs (DEMO_JPEGS), and
# its mount must be gone when it ends.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
BUILD=${BUILD:-build}
# the top make's jobserver and flags are not this one's; NVCC= leaves the
# GPU companion out (test_install.sh installs it)
MAKE_DEMO=(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory demo
	BUILD="$BUILD" NVCC=)
"$MKJPEG" "$D/jpegs" --classes 2 --per-class 20 --seed 8 --min-size 40 \
	--max-size 120 >/dev/null || { not_ok "mkjpeg"; t_end; }
chmod -R a+rX "$D"
# no batchfs on this PATH but the one the test puts there
BASEPATH=$(printf '%s' "$PATH" | tr ':' '\n' | while read -r p; do
	[ -x "$p/batchfs" ] || printf '%s:' "$p"; done)
BASEPATH=${BASEPATH%:}

# demo_ok NAME OUT: the demo showed a batch, read the epoch cold and warm,
# and unmounted and removed its folder
demo_ok() {
	local name=$1 out=$2 dir
	check "$name: the demo showed a batch's shape" grep -q "^(32, 224, 224, 3) float32" "$out"
	check "$name: the second read came from the cache" grep -q "^cache: 40 hits, 0 misses" "$out"
	dir=$(sed -n 's|.*\(/tmp/batchfs-demo\.[A-Za-z0-9]*\)/.*|\1|p' "$out" | head -1)
	check "$name: its folder ($dir) and mount are gone" \
		bash -c "test -n '$dir' && ! test -e '$dir' && ! grep -q '$dir' /proc/mounts"
	check "$name: it ran to its end" grep -qx done. "$out"
}

# ---- a PREFIX of the user's own, on the PATH
P=$D/prefix
PATH="$P/bin:$BASEPATH" DEMO_JPEGS="$D/jpegs" "${MAKE_DEMO[@]}" PREFIX="$P" \
	>"$D/own.out" 2>&1 || not_ok "make demo PREFIX=own: $(tail -5 "$D/own.out")"
demo_ok "PREFIX of one's own" "$D/own.out"
check "make demo installed batchfs into PREFIX/bin" test -x "$P/bin/batchfs"
check "the demo says it is on the PATH: $(grep -i path "$D/own.out" | tail -1)" \
	grep -qF "batchfs is installed and on your PATH: $P/bin/batchfs" "$D/own.out"
check "a new shell runs batchfs as a command" \
	env PATH="$P/bin:$BASEPATH" bash -c 'test "$(command -v batchfs)" = "$0" && batchfs -V | grep -q "^batchfs [0-9]"' "$P/bin/batchfs"

# ---- the same PREFIX not on the PATH: it says the export to run
PATH="$BASEPATH" DEMO_JPEGS="$D/jpegs" "${MAKE_DEMO[@]}" PREFIX="$P" \
	>"$D/off.out" 2>&1 || not_ok "make demo, PREFIX off the PATH: $(tail -5 "$D/off.out")"
check "off the PATH, the demo gives the export: $(grep -A1 'not on your PATH' "$D/off.out" | tr '\n' ' ')" \
	grep -qxF "  export PATH=$P/bin:\$PATH" "$D/off.out"

# ---- without root, for the default PREFIX: nothing installed, and the hint.
# make decides; a user who is not root could not write /usr/local/bin.
dec=$(setpriv --reuid=65534 --regid=65534 --clear-groups env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
	make -s --no-print-directory --eval 'demo-decision: ; @echo "[$(DEMO_INSTALL)]"' demo-decision 2>&1)
check "without root make demo leaves the default /usr/local alone ($dec)" test "$dec" = "[]"
PATH="$BASEPATH" DEMO_JPEGS="$D/jpegs" DEMO_PREFIX=/usr/local BUILD="$BUILD" \
	bash tools/demo.sh >"$D/user.out" 2>&1 || not_ok "tools/demo.sh uninstalled: $(tail -5 "$D/user.out")"
demo_ok "not installed" "$D/user.out"
check "not installed, the demo says the sudo make install that puts it on the PATH" \
	grep -qF "  sudo make install      # batchfs in /usr/local/bin, on the PATH" "$D/user.out"
check "... and where the built one is" grep -qF "or run it from the build: $PWD/$BUILD/batchfs" "$D/user.out"

# ---- root, the default PREFIX: make install into /usr/local, mount(8)'s
# helper into /sbin; here overlays of /usr/local and /usr/sbin in a private
# mount namespace take those writes
if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
	echo "skip demo_as_root: needs root and a private mount namespace"
else
	mkdir -p "$D/ovl"
	unshare -m --propagation private bash -s "$D" "$BASEPATH" "${MAKE_DEMO[@]}" \
		>"$D/root.out" 2>&1 <<'NS'
D=$1 BASEPATH=$2
shift 2
set -u
fail() { echo "NS-FAIL $*"; exit 1; }
mount -t tmpfs batchfs-test-ovl "$D/ovl" || fail "tmpfs"
for d in /usr/local /usr/sbin; do
	n=$(echo "$d" | tr / _)
	mkdir -p "$D/ovl/u$n" "$D/ovl/w$n"
	mount -t overlay batchfs-test-ovl -o "lowerdir=$d,upperdir=$D/ovl/u$n,workdir=$D/ovl/w$n" "$d" ||
		fail "overlay on $d"
done
PATH="/usr/local/bin:$BASEPATH" DEMO_JPEGS="$D/jpegs" "$@" || fail "make demo as root"
ls -l /usr/local/bin/batchfs /sbin/mount.batchfs
# the writes went into the overlays, not this machine's folders
test -x "$D/ovl/u_usr_local/bin/batchfs" -a -L "$D/ovl/u_usr_sbin/mount.batchfs" ||
	fail "the install is not in the overlays"
PATH="/usr/local/bin:$BASEPATH" bash -c 'command -v batchfs && batchfs -V' || fail "batchfs as a command"
echo NS-OK
NS
	check "as root, make demo ran: $(grep NS- "$D/root.out" | tail -1)" grep -q NS-OK "$D/root.out"
	demo_ok "as root" "$D/root.out"
	check "as root, it installed into /usr/local/bin, on the PATH" \
		grep -qF "batchfs is installed and on your PATH: /usr/local/bin/batchfs" "$D/root.out"
	check "... with mount(8)'s helper in /sbin" grep -q "/sbin/mount.batchfs -> /usr/local/bin/batchfs" "$D/root.out"
fi
t_end
