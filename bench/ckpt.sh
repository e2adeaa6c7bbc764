#!/usr/bin/env bash
# Checkpoint throughput: pp-ckpt convert (a reshard) and pp-ckpt export
# --format safetensors of a random model, against a plain
# sequential copy (cp) of the same bytes measured in the same run, with each
# command's peak resident memory.
#
#   bench/ckpt.sh [--model llama-1b] [--layout "tp=2"] [--dir DIR] [--json FILE] [--smoke]
#
# pp-init writes the model's step-0 checkpoint (its parameters in fp32: 4
# bytes each; pp-init writes no AdamW state) under DIR (default: a temporary
# directory on the same file system as $TMPDIR); then, each timed with
# /usr/bin/time:
#   cp       the checkpoint's files to a new directory (read + write: the floor)
#   cp+sync  the same, then sync -f: on disk, as convert leaves its output
#            (pp fsyncs every file it commits)
#   convert  pp-ckpt convert CKPT -o OUT LAYOUT --params-only: every tensor
#            read whole, cut into the new layout's blocks, written, hashed
#            and committed (AdamW m and v, where a checkpoint has them, take
#            the same path)
#   export   pp-ckpt export CKPT --format safetensors (fp32)
# Throughput = the checkpoint's bytes / seconds; the ratio to cp's
# is the figure of merit (goal >= 0.8), with peak RSS (goal < 2 GB for a 1B
# model). The page cache is dropped before each command where the bench runs
# as root (echo 3 > /proc/sys/vm/drop_caches), so every side reads from disk.
# --smoke: llama-tiny, for tests/e2e/test_bench.sh. Prints a table on stdout
# (progress on stderr) and, with --json, the same as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init ckpt

model=llama-1b layout="tp=2" dir= json= smoke=0
usage() { sed -n '2,26s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--model) model=$2; shift 2 ;;
	--layout) layout=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--json) json=$2; shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
[ "$smoke" = 0 ] || model=llama-tiny
[ -z "$json" ] || json=$(bench_out "$json") || exit 1
[ -x /usr/bin/time ] || die "/usr/bin/time not found (Debian: time)"
init=$(bench_tool pp-init) ckpt=$(bench_tool pp-ckpt)
work=${dir:-$bench_tmp}
mkdir -p "$work" && work=$(cd "$work" && pwd)
rm -rf "$work/src" "$work/cp" "$work/conv" "$work/hf"

say "writing $model's step-0 checkpoint (pp-init) in $work"
"$init" model="$model" -o "$work/src" >/dev/null 2>"$bench_tmp/init.log" ||
	die "pp-init failed: $(tail -n 1 "$bench_tmp/init.log")"
src=$work/src/checkpoints/step_00000000
bytes=$(du -sb "$src" | cut -f1)

drop_caches() { [ "$(id -u)" -ne 0 ] || { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null || true; }
# timed NAME CMD...: seconds and peak RSS (kB) of CMD into $bench_tmp/NAME.*
timed() {
	local name=$1
	shift
	drop_caches
	/usr/bin/time -f "%e %M" -o "$bench_tmp/$name.time" "$@" >/dev/null 2>"$bench_tmp/$name.log" ||
		die "$name failed: $(tail -n 2 "$bench_tmp/$name.log")"
	say "$name: $(cat "$bench_tmp/$name.time") (s, peak kB)"
}
timed cp cp -r "$src" "$work/cp"
rm -rf "$work/cp"
timed cp+sync sh -c 'cp -r "$1" "$2" && sync -f "$2"' sh "$src" "$work/cp"
timed convert "$ckpt" convert "$src" -o "$work/conv" $layout --params-only
timed export "$ckpt" export "$src" --format safetensors -o "$work/hf"
params=$("$ckpt" info "$src" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["parameters"])')

python3 - "$bench_tmp" "$bytes" "$params" "$model" "$layout" "$(bench_commit)" "${json:-}" <<'EOF'
import json, os, platform, sys, time
tmp, nbytes, params, model, layout, commit, out = sys.argv[1:8]
nbytes, params = int(nbytes), int(params)
rows = []
names = ("cp", "cp+sync", "convert", "export")
for name in names:
    s, kb = open(os.path.join(tmp, name + ".time")).read().split()
    s = max(float(s), 1e-3)
    rows.append({"command": name, "seconds": float(s), "bytes_read": nbytes,
                 "gb_per_s": nbytes / s / 1e9, "peak_rss_mb": int(kb) / 1024})
cp = rows[0]["gb_per_s"]
for r in rows:
    r["vs_cp"] = r["gb_per_s"] / cp
print(f"# {model} ({params:,} parameters), checkpoint {nbytes / 1e9:.2f} GB (fp32 parameters); "
      f"convert to {layout}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
      f"{os.cpu_count()} cores")
print(f"{'command':<9} {'seconds':>8} {'GB read':>8} {'GB/s':>7} {'vs cp':>6} {'peak RSS MB':>12}")
for r in rows:
    print(f"{r['command']:<9} {r['seconds']:8.2f} {r['bytes_read'] / 1e9:8.2f} {r['gb_per_s']:7.3f} "
          f"{r['vs_cp']:6.2f} {r['peak_rss_mb']:12.1f}")
if out:
    json.dump({"bench": "ckpt", "model": model, "parameters": params, "checkpoint_bytes": nbytes,
               "layout": layout, "commit": commit, "rows": rows}, open(out, "w"), indent=1)
EOF
[ -z "$json" ] || say "wrote $json"
rm -rf "$work/src" "$work/cp" "$work/conv" "$work/hf"
