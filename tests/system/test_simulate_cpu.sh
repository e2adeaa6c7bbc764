#!/usr/bin/env bash
# pp-init --simulate against pp's own runs on this machine: a description
# of it (2 cores, each a "GPU" of one rank of one thread) calibrated with
# pp-init --calibrate from the profile of one run (pp=2, 1f1b, 8
# microbatches), then the step of other layouts of the same model predicted
# and measured: pp=2 with each schedule and other microbatch counts, tp=2,
# dp=2, fsdp=2 and full recompute, each on 2 ranks of one thread (the 2
# cores not oversubscribed), the fastest step of rounds that alternate
# the layouts (the machine is shared; its noise only adds time). Every run goes through srun --mpi=pmix
# on the local Slurm cluster, each rank pinned to its own core. Each
# prediction within 25% of its measurement; a profile of another model is
# refused.
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=1
command -v jq >/dev/null || { skip simulate_cpu "jq is not installed (scripts/install-deps.sh)"; exit 0; }
. "$PP_ROOT/tests/tools/slurm-lib.sh"
slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4) skip simulate_cpu "$SLURM_SKIP"; exit 0 ;;
*) fail simulate_cpu/slurm "the local Slurm cluster did not start: $(tail -n 5 $T/slurm.log | tr '\n' ' ')"; exit 1 ;;
esac
# 2 ranks, each on its own core (the cluster's task plugin binds nothing)
mpi() {
	timeout 300 srun -n 2 --mpi=pmix bash -c 'exec taskset -c $((SLURM_LOCALID % $(getconf _NPROCESSORS_ONLN))) "$@"' pin "$@"
}
cat >$T/cpu.json <<'EOF'
{"name": "cpu-2", "description": "this machine: 2 cores, one rank of one thread each",
 "gpu": {"name": "CPU core", "bf16_tflops": 0.05, "fp32_tflops": 0.05, "fp8_tflops": 0, "hbm_gib": 8, "hbm_gbps": 10},
 "gpus_per_node": 2,
 "intra_node": {"name": "shared memory (MPI)", "bus_gbps": 2, "latency_us": 10},
 "inter_node": {"name": "none", "bus_gbps": 1, "latency_us": 100},
 "efficiency": {"gemm_max": 0.5, "gemm_half_flops": 100000, "attn_max": 0.3, "attn_half_seq": 64,
                "mem_eff": 0.5, "launch_us": 2, "source": "nominal, before calibration"}}
EOF
base="model=llama-tiny model.d_model=256 model.n_heads=8 model.n_kv_heads=4 model.d_ff=768
      model.n_layers=4 model.vocab_size=4096 data=synthetic seq_len=128 global_batch=8 log_period=1
      timing_skip_steps=2 save_on_completion=false checkpoint_period=0 eval_interval=0"

# the calibration: one profiled run
if ! mpi pp-train $base pp=2 microbatch=2 steps=7 profile_steps=3:8 run_dir=$T/cal --quiet 2>$T/cal.log; then
	fail simulate_cpu/calibration_run "$(tail -n 2 $T/cal.log)"
	exit 1
fi
pp-init --calibrate $T/cal/profile $base pp=2 microbatch=2 cluster=$T/cpu.json >$T/cal.json 2>$T/calibrate.txt ||
	{ fail simulate_cpu/calibrate "$(tail -n 2 $T/calibrate.txt)"; exit 1; }
sed 's/^/  /' $T/calibrate.txt
check simulate_cpu/calibrated eval 'jq -e ".efficiency.source | startswith(\"pp-init --calibrate\")" $T/cal.json >/dev/null'
expect_fail simulate_cpu/calibrate_other_model 2 "profile .*rank-0000[01].h5 is of model llama-tiny, pp 2 .*the config is of model llama-tiny, pp 1" \
	pp-init --calibrate $T/cal/profile $base microbatch=2 cluster=$T/cpu.json

# the layouts, measured in alternating rounds
layouts=("pp=2 microbatch=2" "pp=2 microbatch=4" "pp=2 microbatch=2 schedule=gpipe"
	"pp=2 microbatch=2 schedule=zbh1" "pp=2 microbatch=1 schedule=interleaved1f1b virtual_stages=2"
	"tp=2 microbatch=2" "dp=2 microbatch=2" "fsdp=2 microbatch=2" "pp=2 microbatch=2 recompute=full")
rounds=2
for ((r = 0; r < rounds; r++)); do
	for i in "${!layouts[@]}"; do
		mpi pp-train $base ${layouts[i]} steps=5 run_dir=$T/run_${i}_$r --quiet >/dev/null 2>$T/run_$i.log ||
			fail simulate_cpu/run_$i "${layouts[i]}: $(tail -n 2 $T/run_$i.log)"
	done
done
for i in "${!layouts[@]}"; do
	meas=$(cat $T/run_${i}_*/metrics.jsonl 2>/dev/null | jq -s '[.[] | select(.step > 2 and .step_time != null) | .step_time] | min')
	pred=$(pp-init --simulate --json $base ${layouts[i]} cluster=$T/cal.json nodes=1 2>$T/sim.log | jq .step_s)
	name=$(echo "${layouts[i]}" | tr ' =' '_')
	echo "  ${layouts[i]}: predicted $pred s, measured $meas s"
	check simulate_cpu/$name awk -v p="$pred" -v m="$meas" 'BEGIN { exit !(p > 0 && m > 0 && p / m <= 1.25 && p / m >= 0.75) }'
done
