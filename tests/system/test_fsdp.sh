#!/usr/bin/env bash
# Fully sharded data parallelism (fsdp=N), under srun on the local Slurm
# cluster: a tiny llama and a tiny gpt (tied embeddings) reproduce the
# single process's losses and final parameters to 1e-5 relative over 20
# steps with fsdp over 2 and 4 ranks, fsdp x pp=2 (1f1b, zbh1,
# interleaved), fsdp x tp=2 and x tp=4 (the llama's 2 kv heads then shared
# by 2 tp ranks each, their gradients summed over tp from the shares), fsdp
# inside dp (hybrid sharding) and fsdp with every recompute policy. (fsdp
# in bf16 is not checked here: the CPU backend computes in fp32 only.)
# Then: each rank's parameter, gradient and optimizer shares are a quarter
# of the unsharded run's and, with the working set, match pp-init --plan to
# 10%; the next layer's gather goes out while a layer computes (the run's
# counters); a checkpoint resumes bitwise in its layout and to 1e-5 in
# another, and pp-ckpt verifies, describes and converts it; bad layouts get
# clear errors. Relative position biases (GLaM's) at tp=2 x fsdp=2 too.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
export OMP_NUM_THREADS=1
TOL=1e-5
compare=$PP_ROOT/build/tests/tool_ckpt_compare

layouts=(
	"2 fsdp=2"
	"4 fsdp=4"
	"4 pp=2 fsdp=2"
	"4 pp=2 fsdp=2 schedule=zbh1"
	"4 pp=2 fsdp=2 schedule=interleaved1f1b virtual_stages=2"
	"4 tp=2 fsdp=2"
	"8 tp=4 fsdp=2"
	"4 dp=2 fsdp=2"
	"2 fsdp=2 recompute=full"
	"2 fsdp=2 recompute=minimal"
	"2 fsdp=2 recompute=minimal_flash"
)
checks=(memory/shares memory/plan overlap resume/bitwise resume/other_layout
	ckpt/verify ckpt/info ckpt/convert)

slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4)
	for l in "${layouts[@]}" relative; do skip "fsdp/${l#* }" "$SLURM_SKIP"; done
	for c in "${checks[@]}"; do skip "fsdp/$c" "$SLURM_SKIP"; done
	exit 0 ;;
*)
	fail fsdp/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"
	exit 1 ;;
esac

common="model.n_layers=4 global_batch=8 microbatch=1 seq_len=32 steps=20 lr=1e-3 adamw.eps=1e-6 log_period=20"
layout_suite fsdp "$common" llama-tiny gpt-tiny -- "${layouts[@]}"
base="model=llama-tiny $common"
# GLaM's relative position biases in a sharded llama, with tp splitting them by head
rel="$base model.pos=relative"
# shellcheck disable=SC2086 # rel holds key=value words
pp-train $rel run_dir=$T/rel/base --quiet 2>$T/rel.log || fail fsdp/relative/baseline "$(tail -n 2 $T/rel.log)"
# shellcheck disable=SC2086
layout_run fsdp/relative/tp=2,fsdp=2 $T/rel/base $T/rel/tp2 4 $rel tp=2 fsdp=2

# --- memory: a quarter of each, and the plan ---------------------------------------
# 32 layers of a wider llama, so that a layer, not the embedding, is the
# largest unit and the working set is small beside the shares.
big="model=llama-tiny model.n_layers=32 model.d_model=128 model.n_heads=4 model.n_kv_heads=4 model.d_ff=256 global_batch=4 microbatch=1 seq_len=32 steps=1 save_on_completion=false"
# "parameters P MB, gradients G MB, optimizer O MB" [... "gathered units W MB, gradient buffers B MB"]
state() { grep -o 'training state on rank 0: .*' "$1" | grep -oE '[0-9.e+-]+ MB' | tr -d ' MB' | tr '\n' ' '; }
srun -n 4 --mpi=pmix pp-train $big dp=4 run_dir=$T/mem_dp 2>$T/mem_dp.log
srun -n 4 --mpi=pmix pp-train $big fsdp=4 run_dir=$T/mem_fsdp 2>$T/mem_fsdp.log
read -r p1 g1 o1 _ <<<"$(state $T/mem_dp.log)"
read -r p4 g4 o4 w4 b4 <<<"$(state $T/mem_fsdp.log)"
quarter() { awk -v a="$1" -v b="$2" 'BEGIN { r = b / a; exit !(r > 0.245 && r < 0.255) }'; }
if [ -n "${o4:-}" ] && quarter "$p1" "$p4" && quarter "$g1" "$g4" && quarter "$o1" "$o4"; then
	pass fsdp/memory/shares
	echo "  fsdp/memory: dp=4 parameters $p1 gradients $g1 optimizer $o1 MB; fsdp=4 shares $p4 $g4 $o4 MB, working set $w4 + $b4 MB"
else
	fail fsdp/memory/shares "dp=4: $p1 $g1 $o1 MB; fsdp=4: ${p4:-?} ${g4:-?} ${o4:-?} MB: $(grep -m1 -E 'error|state' $T/mem_fsdp.log)"
fi
# the plan's parameters + gradients + optimizer + working set against the run's
plan=$(pp-init --plan --json $big fsdp=4 2>&1 | jq -r '.memory | (.params + .grads + .optimizer + .gathered + .grad_buffers) / 1e6')
run=$(awk -v a="$p4" -v b="$g4" -v c="$o4" -v d="$w4" -v e="${b4:-0}" 'BEGIN { print a + b + c + d + e }')
if awk -v p="$plan" -v r="$run" 'BEGIN { exit !(p > 0 && r / p > 0.9 && r / p < 1.1) }'; then
	pass fsdp/memory/plan
	echo "  fsdp/memory: run $run MB, pp-init --plan $plan MB"
else
	fail fsdp/memory/plan "run $run MB, plan $plan MB"
fi

# --- overlap: the next layer's gather is issued before this one's compute ends -----
# every gather but the first of each pass is a prefetch: of the 32-layer
# run's, at least half
line=$(grep -o 'fsdp: [0-9]* all-gathers.*' $T/mem_fsdp.log)
read -r n p <<<"$(sed -E 's/^fsdp: ([0-9]+) all-gathers[^,]*, ([0-9]+) of them issued while.*/\1 \2/' <<<"$line")"
if [[ ${n:-} =~ ^[0-9]+$ && ${p:-} =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] && [ $((2 * p)) -ge "$n" ]; then
	pass fsdp/overlap
	echo "  $line"
else
	fail fsdp/overlap "no prefetch: ${line:-no fsdp line in the log}"
fi

# --- resume: bitwise in its layout, to 1e-5 in another ------------------------------
# the reference's step-10 checkpoint alone in a run directory, resumed to 20
runf() { srun -n 2 --mpi=pmix pp-train $base fsdp=2 checkpoint_period=10 "$@" --quiet; }
runf run_dir=$T/r_ref 2>/dev/null
mkdir -p $T/r_cut/checkpoints && cp -a $T/r_ref/checkpoints/step_00000010 $T/r_cut/checkpoints/
runf run_dir=$T/r_cut 2>$T/r_cut.log
resumed_bitwise() {
	grep -q "resumed from step 10" $T/r_cut.log && same_losses $T/r_ref $T/r_cut 10 &&
		$compare $T/r_ref/checkpoints/step_00000020 $T/r_cut/checkpoints/step_00000020 0 >/dev/null &&
		for f in $T/r_ref/checkpoints/step_00000020/optim-*.h5; do
			same_tensors $f $T/r_cut/checkpoints/step_00000020/${f##*/} /adam_m /adam_v || return 1
		done
}
check fsdp/resume/bitwise resumed_bitwise
mkdir -p $T/r_one/checkpoints && cp -a $T/r_ref/checkpoints/step_00000010 $T/r_one/checkpoints/
pp-train $base run_dir=$T/r_one --quiet 2>$T/r_one.log
check fsdp/resume/other_layout $compare $T/llama-tiny/base/checkpoints/step_00000020 $T/r_one/checkpoints/step_00000020 $TOL

# --- pp-ckpt: an fsdp checkpoint is an ordinary one --------------------------------
check fsdp/ckpt/verify pp-ckpt verify $T/r_ref/checkpoints/step_00000020
check fsdp/ckpt/info sh -c "pp-ckpt info $T/r_ref/checkpoints/step_00000020 | grep -q 'sharded over the run.s fsdp group'"
# to pp=2, and back to fsdp=2 (its AdamW state cut per fsdp rank, as the run's)
pp-ckpt convert $T/r_ref/checkpoints/step_00000020 -o $T/conv pp=2 >/dev/null 2>$T/conv.log
pp-ckpt convert $T/conv/checkpoints/step_00000020 -o $T/back pp=1 fsdp=2 >/dev/null 2>>$T/conv.log
converted() {
	local a=$T/r_ref/checkpoints/step_00000020 b=$T/back/checkpoints/step_00000020 f
	$compare $a $T/conv/checkpoints/step_00000020 0 >/dev/null &&
		same_tensors $a/shard-pp000-tp000.h5 $b/shard-pp000-tp000.h5 /params || return 1
	for f in $a/optim-*.h5; do
		same_tensors $f $b/${f##*/} /adam_m /adam_v || return 1
	done
}
check fsdp/ckpt/convert converted

# --- bad layouts ------------------------------------------------------------------
expect_fail fsdp/error/world_size 2 "fsdp=2.*needs 4 ranks.*has 2" srun -n 2 --mpi=pmix pp-train $base dp=2 fsdp=2 run_dir=$T/e1
expect_fail fsdp/error/batch 2 "global_batch 6 is not divisible by dp \* fsdp \* microbatch = 4 \* 1" pp-train $base fsdp=4 global_batch=6 --print-config
expect_fail fsdp/error/zero 2 "fsdp" pp-train $base fsdp=0 --print-config
expect_fail fsdp/error/moe 2 "fsdp 2: a mixture of experts" pp-train model=mixtral-tiny fsdp=2 --print-config
