#!/usr/bin/env bash
# Mixture of experts end to end. In one process: capacity routing (drops
# counted and logged; a capacity nothing overflows is dropless exactly),
# GLaM with its relative position biases resumed bitwise,
# the MoE losses in metrics.jsonl, pp-init and pp-decode of a Mixtral, the
# plan with ep, and the bad MoE configs. Under srun on the local Slurm
# cluster: a tiny Mixtral and a tiny GLaM (relative position biases split
# by head over tp) trained at ep=1, ep=2, pp=2 x ep=2, tp=2 x ep=2 and with
# ZeRO-1 reproduce the single process (losses and
# final parameters to 1e-5 relative over 20 steps), at microbatch 1 and 4; checkpoints sharded over
# ep (format version 3), verified, resumed in another ep and resharded by
# pp-ckpt convert; the gradient buckets bitwise as one sum after the backward.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
export OMP_NUM_THREADS=1
TOL=1e-5
compare=$PP_ROOT/build/tests/tool_ckpt_compare
common="data=synthetic global_batch=8 microbatch=1 seq_len=32 steps=20 lr=1e-3 log_period=20"
last=checkpoints/step_00000020

# same_model A B: final parameters within TOL (tool prints the worst tensor)
same_model() { $compare $1/$last $2/$last $TOL >$T/cmp.log; }

# --- one process ------------------------------------------------------------------
for model in mixtral-tiny glam-tiny; do
	pp-train model=$model $common run_dir=$T/$model/base --quiet 2>$T/base.log ||
		fail "moe/$model/train" "$(tail -n 2 $T/base.log)"
done
# glam-tiny is GLaM as published, relative position biases included: 10
# steps, a restart, 10 more are the 20 of one run to the bit
pp-train model=glam-tiny $common checkpoint_period=10 run_dir=$T/glam-re --quiet 2>/dev/null
rm -rf $T/glam-re/checkpoints/step_00000020
pp-train model=glam-tiny $common run_dir=$T/glam-re --quiet 2>$T/glam-re.log
glam_resumes_bitwise() {
	grep -q "resumed from step 10" $T/glam-re.log && same_losses $T/glam-tiny/base $T/glam-re &&
		$compare $T/glam-tiny/base/$last $T/glam-re/$last 0 >/dev/null &&
		pp-ckpt info $T/glam-re | grep -q "self_attn.relative_attention_bias.weight  *4 x 32 "
}
check moe/resume/glam_relative_bitwise glam_resumes_bitwise
check moe/metrics_have_losses jq -e 'select(.step == 20) | .moe_aux_loss > 0 and .moe_z_loss > 0 and
	.moe_dropped_fraction == 0' $T/mixtral-tiny/base/metrics.jsonl

# capacity routing: mixtral-tiny's 4 experts at capacity factor 1 drop some
# of the 64 assignments a microbatch makes, counted in the log line and
# metrics.jsonl; at factor 4 an expert takes all N K assignments, so nothing
# drops and the run is bitwise the dropless one
pp-train model=mixtral-tiny $common model.capacity_factor=1 log_period=1 run_dir=$T/cap1 2>$T/cap1.log
check moe/capacity_drops_logged grep -qE "step 20/20 .* dropped [1-9][0-9.]*%" $T/cap1.log
check moe/capacity_drops_in_metrics jq -e 'select(.step == 20) | .moe_dropped_fraction > 0 and
	.moe_dropped_fraction < 0.5' $T/cap1/metrics.jsonl
pp-train model=mixtral-tiny $common model.capacity_factor=4 run_dir=$T/cap4 --quiet 2>/dev/null
capacity_is_dropless() {
	same_losses $T/mixtral-tiny/base $T/cap4 && $compare $T/mixtral-tiny/base/$last $T/cap4/$last 0 >/dev/null &&
		jq -e 'select(.step == 20) | .moe_dropped_fraction == 0' $T/cap4/metrics.jsonl >/dev/null
}
check moe/large_capacity_equals_dropless capacity_is_dropless

# pp-init writes a MoE step-0 checkpoint; pp-decode generates from a trained one
pp-init model=mixtral-tiny -o $T/init >/dev/null 2>$T/init.log
check moe/pp_init pp-ckpt verify $T/init
pp-decode --ckpt $T/mixtral-tiny/base --prompt "1 2 3" -n 8 --temperature 0 >$T/dec.txt 2>$T/dec.log
check moe/pp_decode grep -qE "^1 2 3( [0-9]+){8}$" $T/dec.txt
# the plan: E / ep experts per rank, and AdamW state split as ZeRO-1 splits it
pp-init --plan --json model=mixtral-8x7b pp=4 dp=8 tp=8 ep=8 global_batch=256 >$T/plan.json
check moe/plan_ep jq -e '.layout.ep == 8 and .params.active < .params.total' $T/plan.json

expect_fail moe/bad/top_k 2 "top_k 5 exceeds model.n_experts 4" pp-train model=mixtral-tiny model.top_k=5 --print-config
expect_fail moe/bad/ep_vs_experts 2 "ep 3 does not divide model.n_experts 4" pp-train model=mixtral-tiny dp=3 ep=3 global_batch=9 --print-config
expect_fail moe/bad/ep_vs_dp 2 "ep 4 does not divide dp 2" pp-train model=mixtral-tiny dp=2 ep=4 --print-config
expect_fail moe/bad/ep_dense 2 "needs a mixture of experts" pp-train model=llama-tiny dp=2 ep=2 --print-config
expect_fail moe/bad/router 2 "router" pp-train model=mixtral-tiny model.router=topk --print-config

# --- expert parallelism under srun ------------------------------------------------
layouts=(
	"mixtral-tiny 2 dp=2"
	"mixtral-tiny 2 dp=2 ep=2"
	"mixtral-tiny 4 pp=2 dp=2 ep=2"
	"mixtral-tiny 4 tp=2 dp=2 ep=2"
	"mixtral-tiny 4 dp=4 ep=2 shard_optimizer=true"
	"mixtral-tiny 8 pp=2 tp=2 dp=2 ep=2 shard_optimizer=true"
	"glam-tiny 2 dp=2 ep=2"
	"glam-tiny 4 pp=2 dp=2 ep=2 shard_optimizer=true"
	"glam-tiny 4 tp=2 dp=2 ep=2"
)
slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4)
	for l in "${layouts[@]}" resume convert buckets mb4; do skip "moe/layouts/${l// /,}" "$SLURM_SKIP"; done
	exit 0 ;;
*)
	fail moe/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"
	exit 1 ;;
esac

for l in "${layouts[@]}"; do
	read -r model n kv <<<"$l"
	# shellcheck disable=SC2086 # common and kv hold key=value words
	layout_run "moe/layouts/$model/${kv// /,}" $T/$model/base $T/$model/${kv// /_} $n model=$model $common $kv
done

# at a microbatch above 1 too: the load-balancing loss is a microbatch's, and
# every layout's microbatches are the single process's (layout.h), so the
# layouts reproduce it as they do at microbatch 1
mb4="${common/microbatch=1/microbatch=4}"
# shellcheck disable=SC2086 # mb4 holds key=value words
pp-train model=mixtral-tiny $mb4 run_dir=$T/mb4/base --quiet 2>$T/mb4.log ||
	fail moe/layouts_mb4/baseline "$(tail -n 2 $T/mb4.log)"
for l in "2 dp=2" "2 dp=2 ep=2" "4 pp=2 dp=2 ep=2"; do
	n=${l%% *} kv=${l#* }
	# shellcheck disable=SC2086 # mb4 and kv hold key=value words
	layout_run "moe/layouts_mb4/mixtral-tiny/${kv// /,}" $T/mb4/base $T/mb4/${kv// /_} $n \
		model=mixtral-tiny $mb4 $kv
done
# the first step's load-balancing loss (before any update): the same sum of
# the same microbatches' losses, so equal to rounding
aux_step1() { jq -r 'select(.step == 1) | .moe_aux_loss' "$1/metrics.jsonl"; }
check moe/layouts_mb4/aux_loss_step1 awk -v a="$(aux_step1 $T/mb4/base)" -v b="$(aux_step1 $T/mb4/dp=2_ep=2)" \
	'BEGIN { d = a - b; exit !(a > 0 && (d < 0 ? -d : d) <= 1e-7 * a) }'

# the checkpoint of dp=4 ep=2 with ZeRO-1: one shard per ep rank, one
# optimizer file per dp rank, format version 3, sound
ep_dir=$T/mixtral-tiny/dp=4_ep=2_shard_optimizer=true/$last
ep_format() {
	jq -e '.version == 3 and .mesh.ep == 2 and ([.files[].name] | sort) == ["optim-pp000-tp000-dp000.h5",
		"optim-pp000-tp000-dp001.h5", "optim-pp000-tp000-dp002.h5", "optim-pp000-tp000-dp003.h5",
		"shard-pp000-tp000-ep000.h5", "shard-pp000-tp000-ep001.h5"]' $ep_dir/manifest.json >/dev/null
}
check moe/ckpt/format_v3 ep_format
check moe/ckpt/verify pp-ckpt verify $ep_dir
check moe/ckpt/info_layout sh -c "pp-ckpt info $ep_dir | grep -q 'dp=4 ep=2, experts sharded over ep'"
check moe/ckpt/one_process_reads_it pp-decode --ckpt $ep_dir --prompt "1 2 3" -n 4 --temperature 0

# resume in another ep: 10 steps at dp=4 ep=2 (ZeRO-1), 10 in one process;
# and 10 in one process, 10 at dp=2 ep=2: both continue the same run
run4() { srun -n 4 --mpi=pmix pp-train model=mixtral-tiny $common dp=4 ep=2 shard_optimizer=true "$@" --quiet; }
run4 checkpoint_period=10 run_dir=$T/re1 2>/dev/null
rm -rf $T/re1/checkpoints/step_00000020
pp-train model=mixtral-tiny $common run_dir=$T/re1 --quiet 2>$T/re1.log
pp-train model=mixtral-tiny $common checkpoint_period=10 run_dir=$T/re2 --quiet 2>/dev/null
rm -rf $T/re2/checkpoints/step_00000020
srun -n 2 --mpi=pmix pp-train model=mixtral-tiny $common dp=2 ep=2 run_dir=$T/re2 --quiet 2>$T/re2.log
resumed_same() {
	grep -q "resumed from step 10" $T/$1.log && losses_close $T/mixtral-tiny/base $T/$1 &&
		same_model $T/mixtral-tiny/base $T/$1
}
check moe/resume/ep2_then_one_process resumed_same re1
check moe/resume/one_process_then_ep2 resumed_same re2

# pp-ckpt convert to dp=4 ep=2 with ZeRO-1 and back: every tensor and its
# AdamW state bitwise; the converted run resumes at ep=2 like the original
pp-ckpt convert $T/mixtral-tiny/base -o $T/conv dp=4 ep=2 shard_optimizer=true >/dev/null 2>$T/conv.log
pp-ckpt convert $T/conv -o $T/back dp=1 ep=1 shard_optimizer=false >/dev/null 2>>$T/conv.log
converted() {
	pp-ckpt verify $T/conv >/dev/null && ep_dir=$T/conv/$last ep_format &&
		$compare $T/mixtral-tiny/base/$last $T/back/$last 0 >/dev/null &&
		same_tensors $T/mixtral-tiny/base/$last/shard-pp000-tp000.h5 $T/back/$last/shard-pp000-tp000.h5 /adam_m /adam_v
}
check moe/convert/ep2_and_back converted
run4 steps=24 run_dir=$T/conv 2>$T/conv_run.log
cp -a $T/mixtral-tiny/dp=4_ep=2_shard_optimizer=true $T/orig
run4 steps=24 run_dir=$T/orig 2>/dev/null
conv_resumes() {
	grep -q "resumed from step 20" $T/conv_run.log &&
		$compare $T/orig/checkpoints/step_00000024 $T/conv/checkpoints/step_00000024 $TOL >$T/cmp.log
}
check moe/convert/resumes_at_ep2 conv_resumes

# the gradient sums in buckets during the backward (the experts' at the end
# of each chunk's pass): bitwise one sum after it, at dp=2 with ZeRO-1
b=$T/buckets
runb() { srun -n 2 --mpi=pmix pp-train model=mixtral-tiny $common dp=2 shard_optimizer=true "$@"; }
runb grad_bucket_mb=0 run_dir=$b/off --quiet 2>/dev/null
runb grad_bucket_mb=0.002 run_dir=$b/on 2>$b.log
buckets_bitwise() {
	grep -qE "gradient sum over dp: [1-9][0-9]* reduction\(s\) overlapped" $b.log &&
		same_losses $b/off $b/on && $compare $b/off/$last $b/on/$last 0 >/dev/null
}
check moe/buckets/bitwise buckets_bitwise
