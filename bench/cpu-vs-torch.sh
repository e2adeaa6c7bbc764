#!/usr/bin/env bash
# CPU training throughput of pp-train against PyTorch on the same models.
#
#   bench/cpu-vs-torch.sh [--models "gpt-126m llama-110m"] [--warmup 1] [--steps 3]
#                         [--seq 256] [--batch 4]
#
# Run from anywhere after `make`. For each model preset it trains pp-train
# (data=synthetic) and the same architecture as a Hugging Face transformers
# model in PyTorch (bench/torch_train.py, fp32, eager attention, AdamW, clip
# 1.0), both with OMP_NUM_THREADS threads (default: every core), the same
# batch (one microbatch of --batch sequences) and sequence length, for
# --warmup + --steps steps, and averages tokens/s over the --steps steady
# steps (pp's from RUNDIR/metrics.jsonl). The PyTorch side runs in the venv of
# scripts/setup-reference.sh (Debian's torch 1.13.1 + pinned transformers).
# Prints a table on stdout; progress goes to stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init cpu-vs-torch

models="gpt-126m llama-110m" warmup=1 steps=3 seq=256 batch=4
usage() { sed -n '2,16s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--models) models=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--seq) seq=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints warmup steps seq batch
[ "$steps" -ge 1 ] || usage_error "--steps must be at least 1"

bench_tool pp-train >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
py=$(bench_python cpu)
total=$((warmup + steps))
load0=$(cut -d' ' -f1 /proc/loadavg)
say "$OMP_NUM_THREADS threads, batch $batch x seq $seq, $warmup warm-up + $steps timed steps"

rows=()
for m in $models; do
	bench_pp_train "$m" "$warmup" 0 model.preset="$m" steps="$total" global_batch="$batch" \
		microbatch="$batch" seq_len="$seq" data=synthetic save_on_completion=false \
		eval_interval=0 log_period=1 || exit 1
	read -r pp_tps pp_best pp_loss <<<"$(benchlib get "$bench_tmp/$m.pp.json" tokens_per_s tokens_per_s_best loss_first)"
	bench_torch "$m" "$py" 0 --steps $total --warmup "$warmup" || exit 1
	read -r th_tps th_best th_loss th_params th_torch th_tf th_blas <<<"$(benchlib get "$bench_tmp/$m.torch.json" \
		tokens_per_s tokens_per_s_best loss_first params torch transformers blas)"
	th_ver="torch-$th_torch/transformers-$th_tf, BLAS $th_blas"
	rows+=("$(printf '%-12s %8.1fM %12.1f %12.1f %9.2f %10.2f %10.3f %12.3f' "$m" \
		"$(python3 -c "print($th_params / 1e6)")" "$pp_tps" "$th_tps" \
		"$(python3 -c "print($pp_tps / $th_tps)")" \
		"$(python3 -c "print($pp_best / $th_best)")" "$pp_loss" "$th_loss")")
done

echo "# CPU training throughput: $OMP_NUM_THREADS threads of $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), fp32, batch $batch x seq $seq, mean of $steps steps after $warmup warm-up (best-step: pp/torch of each side's fastest step, less sensitive to other load)"
echo "# PyTorch: $th_ver, Hugging Face model, eager attention; load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end (other work on the machine slows both sides)"
printf '%-12s %9s %12s %12s %9s %10s %10s %12s\n' model params "pp tok/s" "torch tok/s" pp/torch \
	"best-step" "pp loss@1" "torch loss@1"
printf '%s\n' "${rows[@]}"
