#!/usr/bin/env bash
# Pipeline schedules on CPU: measured step time against the ideal time of
# each schedule (libcommon/schedule/schedule.h, through build/bench/tool_schedule).
#
#   bench/schedules.sh [--pp 4] [--m "8 16"] [--schedules "gpipe 1f1b ..."]
#                      [--warmup 2] [--steps 6] [--rounds 2] [--layers 8]
#                      [--d-model 256] [--seq 128]
#
# Run from anywhere after `make -j2 tests`. Progress goes to stderr, the
# table to stdout.
#
# Model: llama-tiny with n_layers 8, d_model 256, 8 heads (8 kv heads),
# d_ff 768, seq 128, one sequence per microbatch, data=synthetic: a stage's
# work per microbatch is tens of milliseconds while an activation message is
# 128 KiB, so compute dominates message latency.
#
# Schedules: for each m and schedule (interleaved1f1b with virtual_stages=2),
# pp-train runs on pp ranks (mpirun --oversubscribe --bind-to none, each
# rank OMP_NUM_THREADS=1) for warmup + steps steps; the table's step time is
# the median of the steady steps (after the warm-up) over all rounds. Each
# round runs every configuration once, so a change in the machine's
# background load spreads over all rows instead of landing on one.
#
# Per-stage costs (the input of the ideal time), measured once, one process,
# one thread, pp=1 (the whole model on one rank, no messages):
#   C  per-microbatch forward + backward of the whole model: the slope of the
#      median step time between a run with 1 microbatch and one with 8
#      (t(m) = m C + O). The intercept O is the per-step work outside the
#      pipeline (gradient norm, AdamW, data); in the pp runs each rank has
#      1/pp of it, which the ideal time leaves out and the table prints.
#   F  forward of the whole model per microbatch: the evaluation pass
#      (eval_interval=1, eval_batches=8, the same forward without the
#      backward), timed between its two log lines, divided by 8.
#   per stage: f = F / pp, b = (C - F) / pp; the weight-gradient part of the
#      backward that zbh1 defers, w = b / 2 (the dX and dW products of a
#      linear layer cost the same; attention's backward, which has no
#      weights, makes the true w a little smaller).
#   interleaved1f1b's chunks hold half a stage: f/2, b/2, w/2 each.
# The stages are not exactly equal: stage 0 adds the embedding lookup, the
# last stage the final norm, the 256-word output head and the loss (about 4%
# of a stage here).
#
# Columns:
#   step_s       median measured step time (seconds, rank 0's wall clock)
#   ideal_s      tool_schedule's critical path with f, b, w: the step time
#                with one core per rank and free messages
#   bound_s      max(ideal_s, pp m (f + b) / nproc): on a machine with fewer
#                cores than ranks the total compute spread over every core
#                is a lower bound too
#   bubble_meas  1 - m (f + b) / step_s (each rank computes m (f + b))
#   bubble_th    theoretical bubble at these costs: (p-1)/(m+p-1) for gpipe,
#                1f1b and eager1f1b, (p-1)/(v m+p-1) for interleaved, and
#                zbh1's from tool_schedule
#   meas/ideal   step_s / ideal_s
#   load         1-minute load average when the row's runs started (mean)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

pp=4 ms="8 16" schedules="gpipe 1f1b eager1f1b interleaved1f1b zbh1"
warmup=2 steps=6 rounds=2 layers=8 dmodel=256 seq=128
usage() { sed -n '2,10s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
	case $1 in
	--pp) pp=$2; shift 2 ;;
	--m) ms=$2; shift 2 ;;
	--schedules) schedules=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--layers) layers=$2; shift 2 ;;
	--d-model) dmodel=$2; shift 2 ;;
	--seq) seq=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "schedules: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
for v in pp warmup steps rounds layers dmodel seq; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "schedules: --$v ${!v}: expected an integer" >&2; exit 2; }
done
for m in $ms; do
	[[ $m =~ ^[0-9]+$ && $m -ge 1 ]] || { echo "schedules: --m '$m': expected integers >= 1" >&2; exit 2; }
done
[ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] && [ "$pp" -ge 1 ] ||
	{ echo "schedules: --steps, --rounds and --pp must be at least 1" >&2; exit 2; }

train=$root/build/bin/pp-train tool=$root/build/bench/tool_schedule
for x in "$train" "$tool"; do
	[ -x "$x" ] || { echo "schedules: $x not found: run make -j2 tests first" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "schedules: mpirun not found" >&2; exit 1; }
load0=$(cut -d' ' -f1-3 /proc/loadavg)
ncpu=$(nproc) # before OMP_NUM_THREADS=1, which nproc obeys
export PP_CONFIG_DIR=${PP_CONFIG_DIR:-$root/configs} OMP_NUM_THREADS=1
py=/usr/bin/python3

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pp-bench-schedules.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
total=$((warmup + steps))
model=(model=llama-tiny model.n_layers="$layers" model.d_model="$dmodel" model.n_heads=8
	model.n_kv_heads=8 model.d_ff=$((3 * dmodel)) seq_len="$seq" microbatch=1 data=synthetic
	save_on_completion=false log_period=1 steps="$total")
load() { cut -d' ' -f1 /proc/loadavg; }

# median of the steady steps' step_time in the metrics files given
steady_median() {
	"$py" - "$warmup" "$@" <<'EOF'
import json, statistics, sys
w, times = int(sys.argv[1]), []
for path in sys.argv[2:]:
    rows = [json.loads(l) for l in open(path) if l.strip()]
    times += [r["step_time"] for r in rows if "step_time" in r and r["step"] > w]
if not times:
    sys.exit("no steady steps in " + " ".join(sys.argv[2:]))
print(statistics.median(times))
EOF
}

# fails with the log's tail when pp-train does
run_train() { # log, then pp-train's arguments (after the launcher, if any)
	local log=$1
	shift
	if ! "$@" 2>"$log" >/dev/null; then
		echo "schedules: failed: $*" >&2
		tail -n 15 "$log" >&2
		exit 1
	fi
}

# --- per-stage costs: pp=1, one process --------------------------------------
echo "schedules: calibrating on pp=1 (m=1 and m=8, eval 8 batches per step) ..." >&2
for cm in 1 8; do
	# the log has no clock: stamp every line as it comes; the evaluation lies
	# between "step k/n | loss" and "step k/n | val_loss"
	if ! "$train" "${model[@]}" pp=1 global_batch=$cm run_dir="$tmp/cal-$cm" eval_interval=1 \
		eval_batches=8 2>&1 >/dev/null |
		while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done \
			>"$tmp/cal-$cm.log"; then
		echo "schedules: the pp=1 calibration run failed (m=$cm):" >&2
		tail -n 15 "$tmp/cal-$cm.log" >&2
		exit 1
	fi
done
t1=$(steady_median "$tmp/cal-1/metrics.jsonl")
t8=$(steady_median "$tmp/cal-8/metrics.jsonl")
read -r C O F f b w <<<"$("$py" - "$t1" "$t8" "$pp" "$warmup" "$tmp"/cal-[18].log <<'EOF'
import re, statistics, sys
t1, t8, pp, warmup = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
C = (t8 - t1) / 7
O = t1 - C
evals = []
for path in sys.argv[5:]:
    last = None
    for line in open(path):
        stamp, text = line.split(" ", 1)
        s = re.search(r"step (\d+)/\d+ \| (val_loss)?", text)
        if not s:
            continue
        if s.group(2) and last is not None and int(s.group(1)) > warmup:
            evals.append((float(stamp) - last) / 8)
        last = float(stamp)
if not evals or C <= 0:
    sys.exit("schedules: calibration failed (C=%g, %d eval timings)" % (C, len(evals)))
F = statistics.median(evals)
f, b = F / pp, (C - F) / pp
print(C, O, F, f, b, b / 2)
EOF
)"
echo "schedules: per microbatch, whole model: fwd+bwd $C s, fwd $F s; per step outside the pipeline $O s" >&2

# --- the schedules --------------------------------------------------------------
declare -A files loads
for ((r = 1; r <= rounds; r++)); do
	for m in $ms; do
		for s in $schedules; do
			v=1 extra=()
			[ "$s" = interleaved1f1b ] && v=2 extra=(virtual_stages=2)
			key=$s.$m
			loads[$key]="${loads[$key]:-} $(load)"
			dir=$tmp/run-$s-$m-$r
			echo "schedules: round $r/$rounds: $s m=$m (load $(load)) ..." >&2
			run_train "$dir.log" mpirun -n "$pp" --allow-run-as-root --oversubscribe --bind-to none \
				-x OMP_NUM_THREADS -x PP_CONFIG_DIR "$train" "${model[@]}" pp="$pp" schedule="$s" \
				"${extra[@]}" global_batch="$m" run_dir="$dir" --quiet
			files[$key]="${files[$key]:-} $dir/metrics.jsonl"
		done
	done
done

# --- the table ------------------------------------------------------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
echo "# pipeline schedules on CPU: pp=$pp ranks on $ncpu cores ($cpu)$([ "$pp" -gt "$ncpu" ] && echo ": OVERSUBSCRIBED, $pp ranks share $ncpu cores")"
echo "# nproc $ncpu; load average at start $load0, at the end $(cut -d' ' -f1-3 /proc/loadavg); git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# model llama-tiny, $layers layers, d_model $dmodel, d_ff $((3 * dmodel)), seq $seq, microbatch 1; OMP_NUM_THREADS=1 per rank"
echo "# $warmup warm-up + $steps timed steps x $rounds rounds; step_s = median of the timed steps"
printf '# per stage and microbatch: f %.4f s, b %.4f s, w %.4f s (pp=1: fwd+bwd %.4f s, fwd %.4f s); per-step overhead %.4f s (/%d per rank, not in ideal_s)\n' \
	"$f" "$b" "$w" "$C" "$F" "$O" "$pp"
printf '%-16s %3s %3s %8s %8s %8s %11s %9s %10s %5s\n' schedule v m step_s ideal_s bound_s \
	bubble_meas bubble_th meas/ideal load
for m in $ms; do
	for s in $schedules; do
		v=1
		[ "$s" = interleaved1f1b ] && v=2
		key=$s.$m
		# shellcheck disable=SC2086
		step=$(steady_median ${files[$key]})
		json=$("$tool" "$s" "$pp" "$v" "$m" \
			"$("$py" -c "print($f / $v)")" "$("$py" -c "print($b / $v)")" "$("$py" -c "print($w / $v)")")
		"$py" - "$json" "$step" "$ncpu" "${loads[$key]}" <<'EOF'
import json, statistics, sys
j, step, ncpu = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
load = statistics.mean(float(x) for x in sys.argv[4].split())
p, v, m = j["p"], j["v"], j["m"]
work = j["compute_per_rank"]              # m v (f + b) / v per chunk = m (f + b)
ideal = j["ideal_time"]
bound = max(ideal, p * work / ncpu)
th = j["bubble_theory"] if j["bubble_theory"] is not None else j["bubble_ideal"]
print("%-16s %3d %3d %8.3f %8.3f %8.3f %11.3f %9.3f %10.2f %5.1f"
      % (j["kind"], v, m, step, ideal, bound, 1 - work / step, th, step / ideal, load))
EOF
	done
done
