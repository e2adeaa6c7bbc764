#!/usr/bin/env bash
# How long a checkpoint save blocks training: synchronous against
# asynchronous (async_checkpointing=true), measured in the same run.
#
#   bench/ckpt-async.sh [--model llama-110m] [--set "KEY=V ..."] [--steps 12] [--period 4]
#                       [--dir DIR] [--json FILE] [--smoke]
#
# Three pp-train runs of the same model, data and steps (one sequence of 64
# tokens per step: the saves, not the steps, are measured), one process:
#   none   no checkpoint (save_on_completion=false)
#   sync   a checkpoint every --period steps, written while the step waits
#   async  the same, written on a background thread
# and for each save the seconds the step was blocked, from the log: the
# whole save for sync ("saved checkpoint step N in S s"), the copy of the
# state for async ("training blocked S s"), and of that the mean time spent
# waiting for the previous save still in flight (make --period long enough
# for a save to finish in the background, and it is 0); also per GB of checkpoint
# (parameters and AdamW m and v, fp32), and the run's wall time over the
# run without saves, per save: what the saves cost in all, the background
# thread's share of the CPU included. The async/sync ratio of the blocked
# time is the figure of merit. The final save is off in every run, so the
# three runs train the same steps.
# --set adds config overrides (a bigger model: --set "model.n_layers=8"
# with --model llama-1b). --smoke: llama-tiny, for tests/e2e/test_bench.sh.
# Prints a table on stdout (progress on stderr) and, with --json, the same
# as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init ckpt-async

model=llama-110m set= steps=12 period=4 dir= json= smoke=0
usage() { sed -n '2,26s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--model) model=$2; shift 2 ;;
	--set) set=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--period) period=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--json) json=$2; shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints steps period
[ "$period" -ge 1 ] && [ "$steps" -ge "$period" ] || usage_error "--steps $steps, --period $period: need steps >= period >= 1"
if [ "$smoke" = 1 ]; then model=llama-tiny steps=6 period=2; fi
[ -z "$json" ] || json=$(bench_out "$json") || exit 1
train=$(bench_tool pp-train)
work=${dir:-$bench_tmp}
mkdir -p "$work" && work=$(cd "$work" && pwd)
# shellcheck disable=SC2206 # KEY=V words
cfg=(model=$model data=synthetic global_batch=1 microbatch=1 seq_len=64 steps=$steps log_period=1
	save_on_completion=false keep=1 $set)

for mode in none sync async; do
	rm -rf "${work:?}/$mode"
	case $mode in
	none) extra=(checkpoint_period=0) ;;
	sync) extra=(checkpoint_period=$period) ;;
	async) extra=(checkpoint_period=$period async_checkpointing=true) ;;
	esac
	say "$mode: $model, $steps steps${set:+, $set}"
	t0=$(date +%s.%N)
	"$train" "${cfg[@]}" "${extra[@]}" run_dir="$work/$mode" 2>"$bench_tmp/$mode.log" ||
		die "$mode: pp-train failed: $(tail -n 2 "$bench_tmp/$mode.log")"
	echo "$t0 $(date +%s.%N)" >"$bench_tmp/$mode.wall"
done
bytes=$(du -sb "$(ls -d "$work"/sync/checkpoints/step_* | tail -n 1)" | cut -f1)

python3 - "$bench_tmp" "$bytes" "$model" "$set" "$steps" "$period" "$(bench_commit)" "${json:-}" <<'PY'
import json, os, re, sys, time
tmp, nbytes, model, extra, steps, period, commit, out = sys.argv[1:9]
nbytes, steps, period = int(nbytes), int(steps), int(period)
pat = {"sync": r"saved checkpoint step \d+ in ([0-9.]+) s",
       "async": r"checkpoint step \d+: training blocked ([0-9.]+) s"}
# the part of an asynchronous save's block spent waiting for the one before
waits = r"checkpoint step \d+: training blocked [0-9.]+ s \(([0-9.]+) s waiting for the previous save"
wall, blocked = {}, {}
for mode in ("none", "sync", "async"):
    a, b = map(float, open(os.path.join(tmp, mode + ".wall")).read().split())
    wall[mode] = b - a
    log = open(os.path.join(tmp, mode + ".log")).read()
    blocked[mode] = [float(x) for x in re.findall(pat[mode], log)] if mode in pat else []
    if mode == "async":
        waited = sum(float(x) for x in re.findall(waits, log))
saves = steps // period
for mode in ("sync", "async"):
    if len(blocked[mode]) != saves:
        sys.exit(f"ckpt-async: {mode}: {len(blocked[mode])} saves in the log, expected {saves}")
gb = nbytes / 1e9
rows = []
for mode in ("sync", "async"):
    b = blocked[mode]
    mean = sum(b) / len(b)
    wait = waited / len(b) if mode == "async" else 0.0
    rows.append({"mode": mode, "saves": len(b), "blocked_s": mean, "blocked_max_s": max(b), "waiting_s": wait,
                 "blocked_s_per_gb": mean / gb, "overhead_s_per_save": (wall[mode] - wall["none"]) / len(b),
                 "wall_s": wall[mode]})
for r in rows:
    r["blocked_vs_sync"] = r["blocked_s"] / rows[0]["blocked_s"]
print(f"# {model}{' ' + extra if extra else ''}: checkpoint {gb:.2f} GB (fp32 parameters, AdamW m and v); "
      f"{steps} steps, a save every {period}; run without saves {wall['none']:.1f} s; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {os.cpu_count()} cores")
print(f"{'mode':<6} {'saves':>5} {'blocked s':>10} {'max s':>7} {'waiting s':>10} {'s per GB':>9} {'vs sync':>8} "
      f"{'run +s/save':>12}")
for r in rows:
    print(f"{r['mode']:<6} {r['saves']:5d} {r['blocked_s']:10.3f} {r['blocked_max_s']:7.3f} {r['waiting_s']:10.3f} "
          f"{r['blocked_s_per_gb']:9.3f} {r['blocked_vs_sync']:8.3f} {r['overhead_s_per_save']:12.2f}")
if out:
    json.dump({"bench": "ckpt-async", "model": model, "set": extra, "checkpoint_bytes": nbytes, "steps": steps,
               "period": period, "commit": commit, "wall_none_s": wall["none"], "rows": rows},
              open(out, "w"), indent=1)
PY
[ -z "$json" ] || say "wrote $json"
rm -rf "${work:?}"/none "${work:?}"/sync "${work:?}"/async
