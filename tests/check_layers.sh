#!/usr/bin/env bash
# The layering of the tree, checked on every #include (make check-layers,
# part of make test):
#
#   fs/      the program: FUSE adapter, view, lifecycle, command line
#    |  may include cache/ and engine/
#   cache/   the sample cache (LMDB)
#    |  may include engine/
#   engine/  batches, sources, the schedule: the core
#    |  engine/ itself may include its subfolders, which sit below it:
#   engine/pixels/   decode, resize, augment (may include formats/, base/)
#   engine/formats/  TFRecord, Example, tar, gzip (may include base/)
#   engine/storage/  S3, http(s), the shard cache (may include base/)
#   engine/base/     errors, CRC, the byte source, NPY (includes only itself)
#
# tools/ (benchmarks, the GPU companion) may include the core, never fs/.
# No FUSE header below fs/ (the core is also compiled without fuse3's
# include path, so one would not even build).  Prints one line per broken
# rule and exits 1 if there is any.
set -u
cd "$(dirname "$0")/.."
bad=0

# includes FILE: the quoted project includes of FILE, one a line
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"; }

rule() { # FOLDER ALLOWED-PREFIXES...
	local dir=$1 f inc ok p
	shift
	for f in $(find "$dir" -name '*.[ch]' -o -name '*.cu' | sort); do
		for inc in $(includes "$f"); do
			ok=0
			for p in "$@"; do
				case "$inc" in "$p"/*) ok=1 ;; esac
			done
			if [ $ok = 0 ]; then
				echo "check-layers: $f includes \"$inc\": $dir may include only $*"
				bad=1
			fi
		done
	done
}

rule engine/base engine/base
rule engine/formats engine/formats engine/base
rule engine/pixels engine/pixels engine/formats engine/base
rule engine/storage engine/storage engine/base
rule engine engine
rule cache cache engine
rule fs fs cache engine
rule tools tools cache engine

for f in $(find engine cache -name '*.[ch]' | sort); do
	if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<fuse' "$f" >/dev/null; then
		echo "check-layers: $f includes a FUSE header: the core never sees FUSE"
		bad=1
	fi
done

# The network libraries stay in the storage layer: no curl, expat or
# OpenSSL header anywhere else (the engine's indexing reads through
# engine/storage/ and never sees HTTP).
for f in $(find engine cache fs tools -name '*.[ch]' -not -path 'engine/storage/*' | sort); do
	if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(curl/|expat|openssl/)' "$f" >/dev/null; then
		echo "check-layers: $f includes a network library's header: only engine/storage/ may"
		bad=1
	fi
done

# Calls between the files of one folder must not go round in a circle
# (an include graph cannot see them): from the built objects, each file's
# undefined symbols matched to the file of the folder that defines them,
# sorted with tsort, which names any loop.
BUILD=${BUILD:-build}
for dir in engine engine/base engine/formats engine/pixels engine/storage cache fs; do
	objs=
	for c in "$dir"/*.c; do
		o="$BUILD/$dir/$(basename "$c" .c).o"
		[ -f "$o" ] && objs="$objs $o"
	done
	[ -n "$objs" ] || continue
	edges=$(for o in $objs; do
		nm -u "$o" 2>/dev/null | awk '{print $2}' | sort -u >"$BUILD/.undef"
		for t in $objs; do
			[ "$o" = "$t" ] && continue
			if nm -g --defined-only "$t" 2>/dev/null | awk '{print $3}' | sort -u |
				comm -12 - "$BUILD/.undef" | grep -q .; then
				echo "$(basename "$o" .o) $(basename "$t" .o)"
			fi
		done
		echo "$(basename "$o" .o) $(basename "$o" .o)"
	done)
	rm -f "$BUILD/.undef"
	if ! printf '%s\n' "$edges" | tsort >/dev/null 2>"$BUILD/.tsort"; then
		echo "check-layers: the files of $dir/ call each other in a circle:"
		sed 's/^/  /' "$BUILD/.tsort"
		bad=1
	fi
	rm -f "$BUILD/.tsort"
done

if [ $bad = 0 ]; then
	echo "check-layers: engine/base <- formats, storage <- pixels <- engine <- cache <- fs, tools beside fs; no FUSE below fs/; curl, expat and OpenSSL only in engine/storage/; no circle of calls inside a folder"
fi
exit $bad
