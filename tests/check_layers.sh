#!/usr/bin/env bash
# The layering of the tree, checked on every #include (make check-layers,
# part of make test):
#
#   fs/      the program: FUSE adapter, view, lifecycle, command line
#    |  may include cache/ and engine/
#   cache/   the sample cache (LMDB)
#    |  may include engine/
#   engine/  decode, resize, batches, sources: the core
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

if [ $bad = 0 ]; then
	echo "check-layers: engine <- cache <- fs, tools beside fs; no FUSE below fs/"
fi
exit $bad
