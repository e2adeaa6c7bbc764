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
cd "$(dirname "$0")/.."
root=$PWD

models="gpt-126m llama-110m" warmup=1 steps=3 seq=256 batch=4
usage() { sed -n '2,16s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
	case $1 in
	--models) models=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--seq) seq=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "cpu-vs-torch: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
for v in warmup steps seq batch; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "cpu-vs-torch: --$v ${!v}: expected an integer" >&2; exit 2; }
done
[ "$steps" -ge 1 ] || { echo "cpu-vs-torch: --steps must be at least 1" >&2; exit 2; }

pp=$root/build/bin/pp-train
[ -x "$pp" ] || { echo "cpu-vs-torch: $pp not found: run make first" >&2; exit 1; }
export PP_CONFIG_DIR=${PP_CONFIG_DIR:-$root/configs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
py=$(scripts/setup-reference.sh) || {
	echo "cpu-vs-torch: the PyTorch environment is not available (scripts/setup-reference.sh)" >&2
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pp-bench-cpu-vs-torch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
total=$((warmup + steps))
load0=$(cut -d' ' -f1 /proc/loadavg)
echo "cpu-vs-torch: $OMP_NUM_THREADS threads, batch $batch x seq $seq, $warmup warm-up + $steps timed steps" >&2

rows=()
for m in $models; do
	args=(model.preset="$m" steps="$total" global_batch="$batch" microbatch="$batch" seq_len="$seq"
		data=synthetic run_dir="$tmp/run-$m" checkpoint_period=0 keep=1 eval_interval=0 log_period=1)
	"$pp" "${args[@]}" --print-config >"$tmp/$m.json" 2>"$tmp/$m.cfg.log" || {
		echo "cpu-vs-torch: pp-train rejected the config for $m: $(tail -n 1 "$tmp/$m.cfg.log")" >&2
		exit 1
	}

	echo "cpu-vs-torch: $m: pp-train ..." >&2
	t0=$SECONDS
	if ! "$pp" "${args[@]}" 2>"$tmp/$m.pp.log"; then
		echo "cpu-vs-torch: pp-train failed on $m; last lines:" >&2
		tail -n 15 "$tmp/$m.pp.log" >&2
		exit 1
	fi
	pp_res=$(/usr/bin/python3 - "$tmp/run-$m/metrics.jsonl" "$warmup" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "tokens_per_s" in r]
steady = [r["tokens_per_s"] for r in rows if r["step"] > int(sys.argv[2])]
if not steady:
    sys.exit("no steady-state steps in " + sys.argv[1])
print(sum(steady) / len(steady), max(steady), rows[0]["loss"])
EOF
	) || { echo "cpu-vs-torch: cannot read pp's metrics for $m" >&2; exit 1; }
	read -r pp_tps pp_best pp_loss <<<"$pp_res"
	echo "cpu-vs-torch: $m: pp-train $(printf '%.1f' "$pp_tps") tok/s ($((SECONDS - t0)) s with start-up and checkpoint)" >&2

	echo "cpu-vs-torch: $m: PyTorch ..." >&2
	t0=$SECONDS
	if ! "$py" bench/torch_train.py --config "$tmp/$m.json" --steps $total --warmup "$warmup" \
		>"$tmp/$m.torch.json" 2>"$tmp/$m.torch.log"; then
		echo "cpu-vs-torch: torch_train.py failed on $m; last lines:" >&2
		tail -n 15 "$tmp/$m.torch.log" >&2
		exit 1
	fi
	read -r th_tps th_best th_loss th_params th_ver <<<"$(/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["tokens_per_s"], r["tokens_per_s_best"], r["loss_first"], r["params"],
      "torch-%s/transformers-%s" % (r["torch"], r["transformers"]))' "$tmp/$m.torch.json")"
	echo "cpu-vs-torch: $m: PyTorch $(printf '%.1f' "$th_tps") tok/s ($((SECONDS - t0)) s)" >&2
	rows+=("$(printf '%-12s %8.1fM %12.1f %12.1f %9.2f %10.2f %10.3f %12.3f' "$m" \
		"$(/usr/bin/python3 -c "print($th_params / 1e6)")" "$pp_tps" "$th_tps" \
		"$(/usr/bin/python3 -c "print($pp_tps / $th_tps)")" \
		"$(/usr/bin/python3 -c "print($pp_best / $th_best)")" "$pp_loss" "$th_loss")")
done

echo "# CPU training throughput: $OMP_NUM_THREADS threads of $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), fp32, batch $batch x seq $seq, mean of $steps steps after $warmup warm-up (best-step: pp/torch of each side's fastest step, less sensitive to other load)"
echo "# PyTorch: $th_ver, Hugging Face model, eager attention; load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end (other work on the machine slows both sides)"
printf '%-12s %9s %12s %12s %9s %10s %10s %12s\n' model params "pp tok/s" "torch tok/s" pp/torch \
	"best-step" "pp loss@1" "torch loss@1"
printf '%s\n' "${rows[@]}"
