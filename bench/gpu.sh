#!/usr/bin/env bash
# GPU training throughput of pp-train against PyTorch on one GPU.
#
#   bench/gpu.sh [--model llama-1b] [--seqs "2048 4096"] [--tokens 16384]
#                [--dtype bf16|fp32] [--microbatch auto|N] [--mem-fraction 0.7]
#                [--warmup 2] [--steps 5]
#                [--time-limit 150] [--budget 0] [--json FILE] [--profile]
#                [--smoke]
#
# Run from anywhere after `make` on a machine with a GPU. For each sequence
# length it trains the model preset (default llama-1b, TinyLlama-1.1B's
# shape) with pp-train device=cuda dtype=bf16 data=synthetic (--dtype fp32:
# the fp32 backend), and the same architecture
# as a Hugging Face LlamaForCausalLM (random init) in PyTorch through
# bench/torch_train.py with the usual fast settings: bf16 autocast over fp32
# weights, attention "sdpa", torch.compile of each decoder layer,
# AdamW(fused=True); a setting the installed torch lacks falls back, with a
# note in the output. Both sides train the same batch: --tokens / seq
# sequences per step in microbatches of --microbatch (auto: the largest
# power of two whose memory, as pp-init --plan computes it, fits in
# --mem-fraction of the GPU's memory), for --warmup + --steps steps, and
# tokens/s is the mean over the --steps steady steps. Each run is killed
# after --time-limit seconds (0: no limit), or its share of what is left of
# --budget seconds for the whole script (0: no budget), and reported as
# failed; the table still comes out.
#
# FLOPs per token = 6N + 6*L*Hq*D*T (llm.c; pp-init --plan prints N), for
# both sides. pp's MFU is pp-train's (metrics.jsonl), against the dense bf16
# peak of libcommon/plan/plan.c's table (989.4 TFLOP/s for H100 SXM and H200),
# and PyTorch's is taken against the same peak; on a device not in the table
# neither side gets an MFU. Under dtype=bf16 pp keeps bf16 activations and
# compute weights with fp32 master weights, gradients and AdamW state (as
# PyTorch's autocast does); under fp32 its products are exact fp32 unless
# PP_CUDA_TF32=1. The table names each side's dtype.
#
# --profile: after the table, pp-train once more at the first sequence
# length for --warmup + 2 steps under PP_CUDA_PROFILE=1, and its per-op
# table (the CUDA backend's: each cuBLASLt product shape, kernel, copy and
# fill with its time, share and calls; pp-train(1)) on stdout.
#
# --smoke: llama-tiny on the CPU in fp32 (seq 32 and 64, 128 tokens, microbatch 2,
# 1 warm-up + 2 steps, PyTorch from scripts/setup-reference.sh), a check
# that the script works end to end, in seconds (tests/e2e/test_bench.sh).
#
# Prints the table on stdout (progress on stderr) and, with --json, writes
# it as JSON. PP_PYTHON picks the python for PyTorch (default: python3 on
# PATH with a GPU, the reference venv with --smoke). Exit 1 when any run
# failed (the table still shows the others), 2 on a usage error.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init gpu

model=llama-1b seqs="2048 4096" tokens=16384 microbatch=auto mem_fraction=0.7 warmup=2 steps=5
time_limit=150 budget=0 json= smoke=0 device=cuda dtype=bf16 profile=0
usage() { sed -n '2,48s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--model) model=$2; shift 2 ;;
	--seqs) seqs=$2; shift 2 ;;
	--tokens) tokens=$2; shift 2 ;;
	--dtype) dtype=$2; shift 2 ;;
	--microbatch) microbatch=$2; shift 2 ;;
	--mem-fraction) mem_fraction=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--time-limit) time_limit=$2; shift 2 ;;
	--budget) budget=$2; shift 2 ;;
	--json) json=$2; shift 2 ;;
	--profile) profile=1; shift ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
if [ "$smoke" = 1 ]; then
	model=llama-tiny seqs="32 64" tokens=128 microbatch=2 warmup=1 steps=2 device=cpu dtype=fp32
fi
[ "$dtype" = bf16 ] || [ "$dtype" = fp32 ] || usage_error "--dtype $dtype: expected bf16 or fp32"
bench_ints tokens warmup steps time_limit budget
[ "$microbatch" = auto ] || bench_ints microbatch
[ "$steps" -ge 1 ] || usage_error "--steps must be at least 1"
[[ $mem_fraction =~ ^0?\.[0-9]+$|^1(\.0*)?$ ]] || usage_error "--mem-fraction $mem_fraction: expected a number in (0, 1]"
for s in $seqs; do
	[[ $s =~ ^[1-9][0-9]*$ ]] || usage_error "--seqs: '$s' is not a positive integer"
	[ "$tokens" -ge "$s" ] && [ $((tokens % s)) -eq 0 ] ||
		usage_error "--tokens $tokens is not a positive multiple of seq $s"
done
[ -z "$json" ] || json=$(bench_out "$json") || exit 1

pp_init=$(bench_tool pp-init)
bench_tool pp-train >/dev/null
if [ "$device" = cuda ]; then
	gpu=$(bench_gpu_name)
	[ -n "$gpu" ] || die "no GPU on this machine (nvidia-smi lists none); --smoke runs on the CPU"
	[ -f "$root/build/obj/.variant-cuda" ] || die "pp was built without CUDA (nvcc not found, or make CUDA=0)"
	gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
	torch_args=(--device cuda --dtype bf16 --attn sdpa --compile --fused)
	device_desc=$gpu
else
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
	torch_args=(--device cpu --dtype bf16 --attn sdpa --compile --fused --threads "$OMP_NUM_THREADS")
	device_desc="cpu ($OMP_NUM_THREADS threads)"
fi
py=$(bench_python "$device")
total=$((warmup + steps))

# the preset's own context, raised where a run is longer
"$pp_init" --plan --json model="$model" >"$bench_tmp/preset.plan" 2>"$bench_tmp/preset.log" ||
	die "pp-init rejected model=$model: $(tail -n 1 "$bench_tmp/preset.log")"
"$(bench_tool pp-train)" model="$model" --print-config >"$bench_tmp/preset.json" 2>>"$bench_tmp/preset.log" ||
	die "pp-train rejected model=$model: $(tail -n 1 "$bench_tmp/preset.log")"
max_seq=$(benchlib get "$bench_tmp/preset.json" model.max_seq_len)

tags= failed=0 runs_left=$((2 * $(wc -w <<<"$seqs")))
for seq in $seqs; do
	tag=s$seq
	tags+=" $tag"
	batch=$((tokens / seq))
	keys=(model.preset="$model" seq_len="$seq" global_batch="$batch" device="$device" dtype="$dtype")
	[ "$seq" -le "$max_seq" ] || keys+=(model.max_seq_len="$seq")
	mb=$microbatch
	if [ "$mb" = auto ]; then
		plans=()
		for ((m = batch; m >= 1; m /= 2)); do
			[ $((batch % m)) -eq 0 ] || continue
			"$pp_init" --plan --json "${keys[@]}" microbatch=$m >"$bench_tmp/$tag.mb$m.plan" 2>"$bench_tmp/$tag.plan.log" ||
				die "pp-init --plan rejected ${keys[*]} microbatch=$m: $(tail -n 1 "$bench_tmp/$tag.plan.log")"
			plans+=("$m=$bench_tmp/$tag.mb$m.plan")
		done
		mem_gib=$(python3 -c "print($gpu_mib / 1024 * $mem_fraction)")
		mb=$(benchlib fit-microbatch "$batch" "$mem_gib" "${plans[@]}") || exit 1
	fi
	[ $((batch % mb)) -eq 0 ] || usage_error "--microbatch $mb does not divide the batch of $batch sequences at seq $seq"
	keys+=(microbatch="$mb")
	[ -n "${profile_keys+x}" ] || profile_keys=("${keys[@]}")
	"$pp_init" --plan --json "${keys[@]}" >"$bench_tmp/$tag.plan" 2>"$bench_tmp/$tag.plan.log" ||
		die "pp-init --plan rejected ${keys[*]}: $(tail -n 1 "$bench_tmp/$tag.plan.log")"
	read -r fpt gib <<<"$(benchlib get "$bench_tmp/$tag.plan" flops_per_token.train memory.total_gib)"
	printf '{"seq": %d, "global_batch": %d, "microbatch": %d, "flops_per_token": %s, "pp_planned_gib": %s}\n' \
		"$seq" "$batch" "$mb" "$fpt" "$gib" >"$bench_tmp/$tag.row.json"
	say "seq $seq: $batch sequences per step in microbatches of $mb (pp's plan: $(printf %.1f "$gib") GiB)"

	bench_pp_train "$tag" "$warmup" "$(bench_limit "$time_limit" "$budget" $runs_left)" "${keys[@]}" \
		steps="$total" data=synthetic checkpoint_period=0 save_on_completion=false eval_interval=0 log_period=1 || failed=1
	runs_left=$((runs_left - 1))
	if [ -s "$bench_tmp/$tag.json" ]; then
		bench_torch "$tag" "$py" "$(bench_limit "$time_limit" "$budget" $runs_left)" \
			--steps "$total" --warmup "$warmup" "${torch_args[@]}" || failed=1
		runs_left=$((runs_left - 1))
	else
		echo "not run: pp-train rejected the config" >"$bench_tmp/$tag.torch.err"
		runs_left=$((runs_left - 1))
	fi
done

if [ "$dtype" = bf16 ]; then
	pp_note="bf16 activations and compute weights, fp32 master weights, gradients and AdamW state on $device"
elif [ "${PP_CUDA_TF32:-0}" = 0 ]; then
	pp_note="matrix products in exact fp32 on $device"
else
	pp_note="matrix products in TF32 on $device (PP_CUDA_TF32=$PP_CUDA_TF32: TF32 tensor cores)"
fi
read -r params matmul <<<"$(benchlib get "$bench_tmp/preset.plan" params.total params.matmul)"
cat >"$bench_tmp/meta.json" <<EOF
{"bench": "gpu", "model": "$model", "params": $params, "matmul_params": $matmul,
 "device": "$device_desc", "date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "commit": "$(bench_commit)",
 "warmup": $warmup, "steps": $steps, "smoke": $([ "$smoke" = 1 ] && echo true || echo false),
 "pp_dtype": "$dtype", "pp_note": "$pp_note"}
EOF
benchlib gpu-report "$bench_tmp/meta.json" "$bench_tmp" "$tags" ${json:+"$json"}
[ -z "$json" ] || say "wrote $json"
if [ "$profile" = 1 ]; then
	bench_profile "$(bench_limit "$time_limit" "$budget" 1)" \
		"Per-op time of pp-train (${profile_keys[*]}, $((warmup + 2)) steps, PP_CUDA_PROFILE=1):" \
		"$(bench_tool pp-train)" "${profile_keys[@]}" steps=$((warmup + 2)) data=synthetic \
		checkpoint_period=0 save_on_completion=false eval_interval=0 log_period=1 \
		run_dir="$bench_tmp/run-profile" --quiet
fi
exit $failed
