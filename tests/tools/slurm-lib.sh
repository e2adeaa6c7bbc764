# shellcheck shell=bash disable=SC2034 # SLURM_SKIP is read by the caller
# Sourced by shell tests that need a Slurm cluster: a real one-node cluster
# on loopback (tests/tools/slurm-cluster.sh), 8 CPUs, 4 fake GPUs, MpiDefault=pmix.
#
#   . "$PP_ROOT/tests/tools/lib.sh"
#   . "$PP_ROOT/tests/tools/slurm-lib.sh"
#   slurm_up || { skip slurm "$SLURM_SKIP"; exit 0; }   # or: exit 1 on failure
#   srun -n 4 --mpi=pmix pp-train ...
#
# slurm_up   brings the cluster up in a fresh directory ($SLURM_DIR; with
#            PP_SLURM_GPU_NODES=N, also N fake 8-GPU nodes for
#            sbatch --test-only -p gpu: see slurm-cluster.sh), exports
#            SLURM_CONF, and adds slurm_down to the caller's EXIT trap (in
#            front of what is there, e.g. lib.sh's `rm -rf "$T"`). It unsets
#            the SLURM_*/SBATCH_*/SALLOC_*/SRUN_* variables inherited from an
#            outer allocation first: they would point srun at the wrong job.
#            Returns 0 when up; 3 (not root) or 4 (packages missing) with the
#            reason in $SLURM_SKIP: print one SKIP line per check and go on;
#            1 on failure, with the daemons' logs on stderr.
# slurm_down stops the cluster, checks that none of its processes is left and
#            removes $SLURM_DIR (kept, and its path printed, when PP_KEEP=1 or
#            when processes are left). Safe to call twice, or without
#            slurm_up. A test that sets its own EXIT trap after slurm_up must
#            call slurm_down from it.
#
# Up takes about 1.2 s, down 0.1 to 0.6 s. Keep the test's own files out of
# $SLURM_DIR: `down` ends every process that has a file there open.
# A batch job: poll `squeue -h -j ID` until empty (sbatch --wait is slow),
# then read its state with `scontrol show job ID` (kept 300 s after the end).

SLURM_CLUSTER_SH=${PP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}/tests/tools/slurm-cluster.sh
SLURM_DIR=
SLURM_SKIP=

slurm_up() {
	local out rc v
	for v in $(compgen -v SLURM_) $(compgen -v SBATCH_) $(compgen -v SALLOC_) $(compgen -v SRUN_); do
		case "$v" in SLURM_DIR | SLURM_SKIP | SLURM_CLUSTER_SH) ;; *) unset "$v" ;; esac
	done
	[ -z "$SLURM_DIR" ] || slurm_down
	SLURM_DIR=$(mktemp -d /tmp/pp-slurm.XXXXXX) || return 1
	out=$(bash "$SLURM_CLUSTER_SH" up "$SLURM_DIR")
	rc=$?
	case $rc in
	0) ;;
	3) SLURM_SKIP="not root" ;;
	4) SLURM_SKIP="Slurm/munge/PMIx packages missing (scripts/install-deps.sh)" ;;
	esac
	if [ $rc -ne 0 ]; then
		# whatever went wrong, leave no daemon behind the removed directory
		[ $rc -eq 3 ] || [ $rc -eq 4 ] || bash "$SLURM_CLUSTER_SH" down "$SLURM_DIR" >/dev/null 2>&1
		rm -rf "$SLURM_DIR"
		SLURM_DIR=
		return $rc
	fi
	eval "$out"
	export SLURM_CONF
	# run slurm_down on exit, before the trap already set
	local cur
	cur=$(trap -p EXIT)
	if [[ "$cur" == *slurm_down* ]]; then
		:
	elif [ -n "$cur" ]; then
		eval "set -- $cur"
		# shellcheck disable=SC2064 # the old trap's text, expanded now on purpose
		trap "slurm_down; $3" EXIT
	else
		trap slurm_down EXIT
	fi
	return 0
}

slurm_down() {
	[ -n "$SLURM_DIR" ] || return 0
	local dir=$SLURM_DIR rc
	SLURM_DIR=
	bash "$SLURM_CLUSTER_SH" down "$dir"
	rc=$?
	unset SLURM_CONF
	if [ $rc -ne 0 ] || [ "${PP_KEEP:-0}" = 1 ]; then
		echo "slurm-lib: cluster directory kept: $dir" >&2
	else
		rm -rf "$dir"
	fi
	return $rc
}

# layout_run NAME BASE DIR N ARGS...: srun -n N --mpi=pmix pp-train ARGS
# run_dir=DIR, then passes NAME when every step's loss is within $TOL
# (relative) of run BASE's and so is every tensor of its newest checkpoint
# (build/tests/tool_ckpt_compare against BASE's of the same step); else
# fails NAME saying which and by how much. Needs lib.sh.
layout_run() {
	local name=$1 base=$2 dir=$3 n=$4 last
	shift 4
	last=$(cd "$base/checkpoints" 2>/dev/null && ls -d step_* | tail -n 1)
	if ! srun -n "$n" --mpi=pmix pp-train "$@" run_dir="$dir" --quiet 2>"$T/run.log"; then
		fail "$name" "srun exited $?: $(grep -m1 error "$T/run.log")"
	elif ! losses_close "$base" "$dir"; then
		fail "$name" "losses differ by $(loss_diff "$base" "$dir") relative (tolerance $TOL)"
	elif ! "$PP_ROOT/build/tests/tool_ckpt_compare" "$base/checkpoints/$last" "$dir/checkpoints/$last" \
		"$TOL" >"$T/cmp.log"; then
		fail "$name" "parameters differ: $(cat "$T/cmp.log")"
	else
		pass "$name"
		echo "  $name: losses within $(loss_diff "$base" "$dir"); $(cat "$T/cmp.log")"
	fi
}

# layout_suite PREFIX "COMMON" MODEL... -- LAYOUT...: for each MODEL, the
# single process's run of "model=MODEL COMMON" into $T/MODEL/base, then
# layout_run PREFIX/MODEL/LAYOUT against it for each LAYOUT ("N key=value
# ...": N ranks); a failed baseline fails PREFIX/MODEL/baseline and skips
# that model's layouts.
layout_suite() {
	local prefix=$1 common=$2 model l n kv models=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do models+=("$1"); shift; done
	shift
	for model in "${models[@]}"; do
		# shellcheck disable=SC2086 # common holds key=value words
		pp-train model=$model $common run_dir=$T/$model/base --quiet 2>$T/base.log ||
			{ fail "$prefix/$model/baseline" "$(tail -n 2 $T/base.log)"; continue; }
		for l in "$@"; do
			n=${l%% *} kv=${l#* }
			# shellcheck disable=SC2086 # common and kv hold key=value words
			layout_run "$prefix/$model/${kv// /,}" $T/$model/base $T/$model/${kv// /_} $n \
				model=$model $common $kv
		done
	done
}
