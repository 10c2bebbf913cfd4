# bash completion for batchfs(1); installed as
# $PREFIX/share/bash-completion/completions/batchfs

_batchfs_mounts()
{
	# the batchfs mounts, from the mount table (never touching them)
	awk '$3 == "fuse.batchfs" { gsub(/\\040/, " ", $2); print $2 }' \
		/proc/self/mounts 2>/dev/null
}

# COMPREPLY from compgen's lines (names with spaces stay whole)
_batchfs_set()
{
	mapfile -t COMPREPLY < <(compgen "$@")
}

_batchfs()
{
	local cur prev cmd i
	COMPREPLY=()
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	cmd=
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		-*) ;;
		*) cmd=${COMP_WORDS[i]}; break ;;
		esac
	done

	if [[ -z $cmd ]]; then
		_batchfs_set -W "mount unmount status metrics inspect mkshards index cache version --help --version -V" -- "$cur"
		return
	fi

	case $cmd in
	mount)
		case $prev in
		--dtype) _batchfs_set -W "float32 float16 uint8" -- "$cur"; return ;;
		--resize) _batchfs_set -W "stretch crop" -- "$cur"; return ;;
		--layout) _batchfs_set -W "nhwc nchw" -- "$cur"; return ;;
		--format) _batchfs_set -W "auto tfrecord tar folder" -- "$cur"; return ;;
		--split) _batchfs_set -W "samples shards" -- "$cur"; return ;;
		--shuffle-block) _batchfs_set -W "global" -- "$cur"; return ;;
		--on-error) _batchfs_set -W "fail skip" -- "$cur"; return ;;
		--augment) _batchfs_set -W "flip crop flip,crop none" -- "$cur"; return ;;
		--threads|--prefetch) _batchfs_set -W "auto" -- "$cur"; return ;;
		--cache) _batchfs_set -d -W "none" -- "$cur"; return ;;
		--slot-dir|--shard-cache|--dali-index) _batchfs_set -d -- "$cur"; return ;;
		--s3-addressing) _batchfs_set -W "auto path virtual" -- "$cur"; return ;;
		--log|--metrics-file) _batchfs_set -f -- "$cur"; return ;;
		--batch|--size|--mem|--cache-size|--image-key|--label-key|--label-offset|--max-pixels|--max-inflate-ratio|--epochs|--shuffle|--rank|--world|--node-ranks|--resume|--crop-from|--mean|--std|--metrics-interval|--history-interval|--metrics-port|--metrics-addr|--shard-cache-size|--s3-connections|--s3-timeout|--s3-giveup|--s3-endpoint|--s3-region|-o)
			return ;;
		esac
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "--batch --size --dtype --resize --crop-from
				--augment --layout --mean --std --label-offset --threads
				--prefetch --mem --cache --cache-size --format --image-key
				--label-key --on-error --max-pixels --max-inflate-ratio --dali-index --epochs --shuffle
				--shuffle-block --rank --world --split --node-ranks --resume
				--drop-remainder --log --allow-other --slot-dir
				--no-passthrough --no-push --metrics-file --metrics-interval
				--metrics-port --metrics-addr --metrics-public --history-interval
				--shard-cache
				--shard-cache-size --s3-connections --s3-timeout --s3-giveup
				--s3-anonymous --s3-addressing --s3-endpoint --s3-region
				--no-verify-tls -o -f -d --help" -- "$cur"))
		else
			_batchfs_set -d -- "$cur"
		fi
		;;
	unmount|umount)
		if [[ $cur == -* ]]; then
			_batchfs_set -W "--lazy --help" -- "$cur"
		else
			_batchfs_set -W "$(_batchfs_mounts)" -- "$cur"
		fi
		;;
	status)
		case $prev in
		--interval|-i) return ;;
		--plot|-p) _batchfs_set -f -- "$cur"; return ;;
		esac
		if [[ $cur == -* ]]; then
			_batchfs_set -W "--watch --json --interval --plot --help" -- "$cur"
		else
			_batchfs_set -W "$(_batchfs_mounts)" -- "$cur"
		fi
		;;
	metrics)
		if [[ $cur == -* ]]; then
			_batchfs_set -W "--help" -- "$cur"
		else
			_batchfs_set -W "$(_batchfs_mounts)" -- "$cur"
		fi
		;;
	inspect)
		if [[ $cur == -* ]]; then
			_batchfs_set -W "--help" -- "$cur"
		else
			mapfile -t COMPREPLY < <(compgen -f -X '!*.npy' -- "$cur"
						  compgen -d -- "$cur")
		fi
		;;
	mkshards)
		case $prev in
		--per-shard|--prefix) return ;;
		esac
		if [[ $cur == -* ]]; then
			_batchfs_set -W "--per-shard --prefix --force --quiet --help" -- "$cur"
		else
			_batchfs_set -d -- "$cur"
		fi
		;;
	index)
		case $prev in
		--format) _batchfs_set -W "auto tfrecord tar" -- "$cur"; return ;;
		--label-key|--max-inflate-ratio) return ;;
		esac
		if [[ $cur == -* ]]; then
			_batchfs_set -W "--format --label-key --max-inflate-ratio --quiet --help" -- "$cur"
		else
			_batchfs_set -d -- "$cur"
		fi
		;;
	cache)
		local sub=
		for ((i++; i < COMP_CWORD; i++)); do
			case ${COMP_WORDS[i]} in -*) ;; *) sub=${COMP_WORDS[i]}; break ;; esac
		done
		if [[ -z $sub ]]; then
			_batchfs_set -W "stats verify clear --help" -- "$cur"
		elif [[ $prev == --fingerprint ]]; then
			return
		elif [[ $prev == --source || $prev == --shard-cache ]]; then
			_batchfs_set -d -- "$cur"
		elif [[ $cur == -* ]]; then
			_batchfs_set -W "--fingerprint --source --shard-cache --delete --help" -- "$cur"
		else
			_batchfs_set -d -- "$cur"
		fi
		;;
	esac
}
complete -o filenames -F _batchfs batchfs
