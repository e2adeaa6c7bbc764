#!/usr/bin/env bash
# pp-init --simulate and --search (libcommon/sim):
#   - against published results of the seeds' systems, pp's efficiency
#     being its own as measured on an H100: MaxText's A3 Mega recipe
#     (Llama2-7B, fsdp 8 x dp 2 on two nodes, 4 x 4096 per GPU: 55% MFU in
#     MaxText's count, attention as if not causal) and Pax's GPT tables at
#     seq 2048 (126M, dp 64, 4 per GPU: 2098.16 seq/s on 64 A100, 4709.12 on
#     64 H100; 5B, fsdp 256, 8 per GPU, Pax's remat of everything but the
#     products: 594.13 on 256 A100, 1657.24 on 256 H100), each within 35%.
#     Pax's runs are simulated with Pax's kernels (sim.attention=materialized:
#     XLA's attention with its scores through HBM; sim.embedding=onehot:
#     Praxis's lookup as a product), and pp's own prediction is printed
#     beside (docs/PERFORMANCE.md explains each gap);
#   - the calibration reproduces pp's own H100 measurements it was fitted to;
#   - the breakdown adds up to the step; the bubble follows the schedule;
#   - search: llama2-70b on 8 DGX H100 nodes in under 10 s, every layout it
#     lists fits by pp-init --plan, and the best's line given to --simulate
#     predicts the same step; a model that fits nowhere says so and names
#     the smallest cluster that fits;
#   - bad input: an unknown cluster (the known ones listed), a cluster file
#     missing a field, a layout whose world is not the cluster's GPUs.
. "$(dirname "$0")/../tools/lib.sh"
command -v jq >/dev/null || { skip simulate "jq is not installed (scripts/install-deps.sh)"; exit 0; }
sim() { pp-init --simulate --json data=synthetic "$@"; }
pax="seq_len=2048 dtype=bf16 device=cuda sim.attention=materialized sim.embedding=onehot"

# --- published results ----------------------------------------------------------------------
# name | what is compared | published | bound | command
while IFS='|' read -r name what want bound args; do
	[ -n "$name" ] || continue
	if ! got=$(sim $args 2>$T/sim.log | jq -r "$what"); then
		fail simulate/published_$name "$(tail -n 1 $T/sim.log)"
		continue
	fi
	own=
	if [[ "$args" == *sim.* ]]; then
		# shellcheck disable=SC2086 # args holds key=value words
		own=", with pp's kernels $(sim $(printf '%s\n' $args | grep -v '^sim\.') 2>/dev/null | jq -r "$what")"
	fi
	echo "  $name: predicted $got, published $want$own"
	check simulate/published_$name awk -v g="$got" -v w="$want" -v b="$bound" \
		'BEGIN { r = g / w; exit !(r > 0 && r <= 1 + b && r >= 1 - b) }'
done <<EOF
a3mega|.mfu_noncausal|0.55|0.35|--cfg $PP_ROOT/configs/llama2-7b-a3mega.json cluster=a3-mega nodes=2
gpt126m_a100|.tokens_per_s / 2048|2098.16|0.35|model=gpt-126m $pax global_batch=256 dp=64 microbatch=4 cluster=a100-sxm nodes=8
gpt126m_h100|.tokens_per_s / 2048|4709.12|0.35|model=gpt-126m $pax global_batch=256 dp=64 microbatch=4 cluster=dgx-h100 nodes=8
gpt5b_a100|.tokens_per_s / 2048|594.13|0.35|model=gpt-5b $pax global_batch=2048 fsdp=256 microbatch=8 recompute=minimal cluster=a100-sxm nodes=32
gpt5b_h100|.tokens_per_s / 2048|1657.24|0.35|model=gpt-5b $pax global_batch=2048 fsdp=256 microbatch=8 recompute=minimal cluster=dgx-h100 nodes=32
EOF

# --- pp's own H100 measurements (docs/PERFORMANCE.md), which the calibration fits ---------------
while IFS='|' read -r name want args; do
	[ -n "$name" ] || continue
	got=$(sim $args cluster=dgx-h100 2>/dev/null | jq -r .mfu)
	echo "  $name: predicted MFU $got, measured $want"
	check simulate/measured_$name awk -v g="$got" -v w="$want" 'BEGIN { exit !(g > 0 && g / w < 1.03 && g / w > 0.97) }'
done <<EOF
llama1b_2048|0.472|model=llama-1b seq_len=2048 global_batch=8 microbatch=8 dtype=bf16 device=cuda
llama1b_4096|0.450|model=llama-1b model.max_seq_len=4096 seq_len=4096 global_batch=4 microbatch=4 dtype=bf16 device=cuda
a3mega_12_layers|0.535|--cfg $PP_ROOT/configs/llama2-7b-a3mega.json dp=1 fsdp=1 global_batch=4 model.n_layers=12
EOF

# --- the breakdown and the pipeline ------------------------------------------------------------
pipe="model=llama2-7b seq_len=2048 global_batch=64 microbatch=1 dtype=bf16 device=cuda cluster=dgx-h100 nodes=1"
sim $pipe pp=8 schedule=1f1b >$T/1f1b.json 2>$T/pipe.log &&
	sim $pipe pp=8 schedule=interleaved1f1b virtual_stages=4 >$T/inter.json 2>>$T/pipe.log &&
	sim $pipe pp=8 schedule=gpipe >$T/gpipe.json 2>>$T/pipe.log ||
	fail simulate/pipeline "$(tail -n 1 $T/pipe.log)"
check simulate/breakdown_adds_up eval 'jq -e "(.breakdown_s | add) as \$s | (\$s - .step_s | fabs) < 1e-6 * .step_s" $T/1f1b.json >/dev/null'
# 1f1b's bubble is (p - 1) / (m + p - 1) = 7 / 71 of the step at equal stages; the last
# stage's head makes them unequal, which only adds to it
check simulate/bubble_1f1b eval 'jq -e ".breakdown_s.bubble / .step_s | . >= 7 / 71 and . < 0.3" $T/1f1b.json >/dev/null'
# GPipe runs the same critical path as 1f1b, holding every microbatch's activations
check simulate/gpipe_same_step_more_memory eval 'jq -e --slurpfile a $T/1f1b.json ".step_s == \$a[0].step_s and .memory_gib > 2 * \$a[0].memory_gib and (.fits | not)" $T/gpipe.json >/dev/null'
check simulate/interleaving_shrinks_bubble eval '[ "$(jq -r ".breakdown_s.bubble < $(jq .breakdown_s.bubble $T/1f1b.json)" $T/inter.json)" = true ]'

# --- search -------------------------------------------------------------------------------------
big="model=llama2-70b seq_len=4096 global_batch=64 dtype=bf16 device=cuda data=synthetic"
start=$(date +%s.%N)
pp-init --search --json $big cluster=dgx-h100 nodes=8 >$T/search.json 2>$T/search.log ||
	fail simulate/search "$(tail -n 2 $T/search.log)"
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
echo "  search: $(jq -r '"\(.tried) layouts, \(.fitting) fit"' $T/search.json) in $secs s; best $(jq -r '.best[0].layout' $T/search.json)"
check simulate/search_under_10s awk -v s="$secs" 'BEGIN { exit !(s < 10) }'
check simulate/search_lists_ten eval '[ "$(jq ".best | length" $T/search.json)" -eq 10 ]'
fits_all() {
	local line
	jq -r '.best[].layout' $T/search.json | while read -r line; do
		pp-init --plan --json $big $line | jq -e '.memory.total_gib <= 80' >/dev/null || { echo "does not fit: $line"; return 1; }
	done
}
check simulate/search_every_layout_fits fits_all
best=$(jq -r '.best[0].layout' $T/search.json)
check simulate/search_best_agrees_with_simulate eval '[ "$(sim $big $best cluster=dgx-h100 nodes=8 | jq .step_s)" = "$(jq .best[0].step_s $T/search.json)" ]'
pp-init --search model=gpt3-175b seq_len=2048 global_batch=64 dtype=bf16 device=cuda data=synthetic cluster=a100-sxm nodes=1 >$T/none.txt 2>&1
check simulate/search_fits_nowhere grep -qE "nothing fits on 1 node; the smallest a100-sxm cluster that fits has [0-9]+ nodes" $T/none.txt

# --- bad input ----------------------------------------------------------------------------------
expect_fail simulate/unknown_cluster 2 "unknown cluster 'dgx-b900'; known: .*a100-sxm.*dgx-h100" \
	pp-init --simulate model=llama-1b cluster=dgx-b900
jq 'del(.inter_node.bus_gbps)' "$PP_ROOT/configs/clusters/dgx-h100.json" >$T/broken.json
expect_fail simulate/cluster_missing_field 2 "$T/broken.json: inter_node.bus_gbps: a number is missing" \
	pp-init --simulate model=llama-1b cluster=$T/broken.json
expect_fail simulate/world_mismatch 2 "world pp 1 x dp 4 x fsdp 1 x tp 1 = 4 ranks is not the 16 GPUs of 2 dgx-h100 nodes of 8" \
	pp-init --simulate model=llama-1b dp=4 global_batch=8 cluster=dgx-h100 nodes=2
expect_fail simulate/needs_cluster 2 "needs cluster=NAME" pp-init --simulate model=llama-1b
expect_fail simulate/search_needs_nodes 2 "needs nodes=N" pp-init --search model=llama-1b cluster=h200
expect_fail simulate/bad_kernel 2 "sim.attention=flash: expected fused \(pp's\) or materialized" \
	pp-init --simulate model=llama-1b cluster=h200 sim.attention=flash
expect_fail simulate/unknown_sim_key 2 "sim.optimizer: unknown key \(sim.attention, sim.embedding\)" \
	pp-init --simulate model=llama-1b cluster=h200 sim.optimizer=adam
