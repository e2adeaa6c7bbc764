#!/usr/bin/env bash
# Batch-1 decode speed of pp-decode on one GPU, against the GPU's measured
# memory bandwidth.
#
#   bench/gpu-decode.sh [--models "llama-1b llama2-7b"] [-n 256] [--dtype bf16|fp32]
#                       [--prompt "1 2 3 4 5 6 7 8"] [--bandwidth GBS]
#                       [--time-limit 300] [--budget 0] [--json FILE] [--profile]
#                       [--smoke]
#
# Run from anywhere after `make` on a machine with a GPU. For each model
# preset it runs
#   pp-decode --cfg CFG --random-init --prompt PROMPT -n N --batch 1
#             --temperature 0 --json
# with CFG = {model, device: cuda, dtype, seq_len: prompt + N}: random weights, no
# checkpoint; without a tokenizer the prompt is token ids. From pp-decode's
# JSON it takes the decode tokens/s and the bytes read per generated token
# (parameters + KV cache), and reports
#   MBU = bytes/token x tokens/s / bandwidth
# where bandwidth is measured here by bench/membw.cu (built with nvcc into
# build/bench/membw: cudaMemcpy device to device of 1 GiB, 20 times, GB/s
# counting read + write), or given with --bandwidth (GB/s, e.g. a
# datasheet's). A batch-1 decode step reads every weight once, so MBU says
# how close pp comes to the memory bound. Each pp-decode run is killed
# after --time-limit seconds (0: no limit), or its share of what is left of
# --budget seconds for the whole script (0: no budget), and reported as
# failed; the table still comes out.
#
# --profile: after the table, the first model once more without the CUDA
# graph (PP_CUDA_GRAPH=0, so that its kernels show) under PP_CUDA_PROFILE=1,
# and its per-op table on stdout (pp-decode(1)).
#
# --smoke: llama-tiny on the CPU in fp32, 16 tokens, without the bandwidth
# measurement (no GPU: no MBU unless --bandwidth is given): a check that the
# script works (tests/e2e/test_bench.sh).
#
# Prints a table on stdout (progress on stderr) and, with --json, writes it
# as JSON. PP_DECODE overrides the pp-decode binary. Exit 1 when pp-decode
# is missing or any run failed, 2 on a usage error.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init gpu-decode

models="llama-1b llama2-7b" n=256 prompt="1 2 3 4 5 6 7 8" bandwidth= time_limit=300 budget=0 json= smoke=0
profile=0
device=cuda dtype=bf16
usage() { sed -n '2,38s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--models) models=$2; shift 2 ;;
	-n) n=$2; shift 2 ;;
	--dtype) dtype=$2; shift 2 ;;
	--prompt) prompt=$2; shift 2 ;;
	--bandwidth) bandwidth=$2; shift 2 ;;
	--time-limit) time_limit=$2; shift 2 ;;
	--budget) budget=$2; shift 2 ;;
	--json) json=$2; shift 2 ;;
	--profile) profile=1; shift ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
[ "$smoke" = 0 ] || { models=llama-tiny n=16 device=cpu dtype=fp32; }
[ "$dtype" = bf16 ] || [ "$dtype" = fp32 ] || usage_error "--dtype $dtype: expected bf16 or fp32"
bench_ints n time_limit budget
[ "$n" -ge 1 ] || usage_error "-n must be at least 1"
if [ -n "$bandwidth" ] && ! python3 -c 'import sys; sys.exit(not float(sys.argv[1]) > 0)' "$bandwidth" 2>/dev/null; then
	usage_error "--bandwidth $bandwidth: expected GB/s, a positive number"
fi
[ -n "$prompt" ] || usage_error "--prompt: empty"
[ -z "$json" ] || json=$(bench_out "$json") || exit 1

decode=${PP_DECODE:-$root/build/bin/pp-decode}
[ -x "$decode" ] || die "pp-decode not found at $decode: this build has no pp-decode (cmd/pp-decode.c); build it with make, or set PP_DECODE"
pp_init=$(bench_tool pp-init)
pp_train=$(bench_tool pp-train)

if [ "$device" = cuda ]; then
	gpu=$(bench_gpu_name)
	[ -n "$gpu" ] || die "no GPU on this machine (nvidia-smi lists none); --smoke runs on the CPU"
	device_desc=$gpu
else
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
	device_desc="cpu ($OMP_NUM_THREADS threads)"
fi

# --- bandwidth ------------------------------------------------------------------
bw=null
if [ -n "$bandwidth" ]; then
	bw=$bandwidth bw_note="given with --bandwidth"
elif [ "$device" = cpu ]; then
	bw_note="skipped: --smoke runs on the CPU, where bench/membw.cu cannot run"
	say "bandwidth: $bw_note"
else
	nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	[ -x "$nvcc" ] || die "nvcc not found: it builds bench/membw.cu"
	mkdir -p "$root/build/bench"
	"$nvcc" -O2 -o "$root/build/bench/membw" "$root/bench/membw.cu" 2>"$bench_tmp/membw.build.log" ||
		die "nvcc could not build bench/membw.cu: $(tail -n 3 "$bench_tmp/membw.build.log")"
	"$root/build/bench/membw" >"$bench_tmp/membw.json" 2>"$bench_tmp/membw.log" ||
		die "bench/membw failed: $(tail -n 1 "$bench_tmp/membw.log")"
	bw=$(benchlib get "$bench_tmp/membw.json" gbs)
	bw_note="measured by bench/membw.cu: cudaMemcpy device to device of 1 GiB x 20, read + write"
	say "bandwidth: $bw GB/s ($bw_note)"
fi

# --- decode ---------------------------------------------------------------------
prompt_tokens=$(wc -w <<<"$prompt")
tags= failed=0 runs_left=$(wc -w <<<"$models")
for m in $models; do
	tag=$m
	tags+=" $tag"
	"$pp_init" --plan --json model="$m" >"$bench_tmp/$tag.plan" 2>"$bench_tmp/$tag.plan.log" ||
		die "pp-init rejected model=$m: $(tail -n 1 "$bench_tmp/$tag.plan.log")"
	"$pp_train" model="$m" --print-config >"$bench_tmp/$tag.preset.json" 2>"$bench_tmp/$tag.plan.log" ||
		die "pp-train rejected model=$m: $(tail -n 1 "$bench_tmp/$tag.plan.log")"
	max_seq=$(benchlib get "$bench_tmp/$tag.preset.json" model.max_seq_len)
	ctx=$((prompt_tokens + n))
	[ "$ctx" -le "$max_seq" ] || die "$m: prompt ($prompt_tokens tokens) + -n $n = $ctx exceeds its context of $max_seq"
	printf '{"model": "%s", "device": "%s", "dtype": "%s", "seq_len": %d, "run_dir": "%s"}\n' \
		"$m" "$device" "$dtype" "$ctx" "$bench_tmp/run-$tag" >"$bench_tmp/$tag.cfg.json"
	printf '{"model": "%s", "params": %s, "dtype": "%s"}\n' "$m" \
		"$(benchlib get "$bench_tmp/$tag.plan" params.total)" "$dtype" >"$bench_tmp/$tag.row.json"

	say "$m: pp-decode -n $n ..."
	t0=$SECONDS rc=0
	run_limit=$(bench_limit "$time_limit" "$budget" $runs_left)
	runs_left=$((runs_left - 1))
	bench_timeout "$run_limit" "$decode" --cfg "$bench_tmp/$tag.cfg.json" --random-init --prompt "$prompt" \
		-n "$n" --batch 1 --temperature 0 --json >"$bench_tmp/$tag.out" 2>"$bench_tmp/$tag.log" || rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "pp-decode ran past the ${run_limit} s limit" >"$bench_tmp/$tag.decode.err"
	elif [ "$rc" -ne 0 ]; then
		echo "pp-decode exited $rc: $(grep -v '^$' "$bench_tmp/$tag.log" | tail -n 1)" >"$bench_tmp/$tag.decode.err"
	elif ! benchlib decode-metrics "$bench_tmp/$tag.out" >"$bench_tmp/$tag.decode.json" 2>"$bench_tmp/$tag.decode.err"; then
		rc=1
	fi
	if [ "$rc" -ne 0 ]; then
		rm -f "$bench_tmp/$tag.decode.json"
		failed=1
		say "$m: failed: $(cat "$bench_tmp/$tag.decode.err")"
		tail -n 5 "$bench_tmp/$tag.log" >&2
		continue
	fi
	say "$m: $(printf %.1f "$(benchlib get "$bench_tmp/$tag.decode.json" tokens_per_s)") tok/s ($((SECONDS - t0)) s with start-up)"
done

cat >"$bench_tmp/meta.json" <<EOF
{"bench": "gpu-decode", "device": "$device_desc", "date": "$(date -u '+%Y-%m-%d %H:%M UTC')",
 "commit": "$(bench_commit)", "n": $n, "prompt_tokens": $prompt_tokens, "batch": 1,
 "smoke": $([ "$smoke" = 1 ] && echo true || echo false),
 "bandwidth_gbs": $bw, "bandwidth_note": "$bw_note"}
EOF
benchlib decode-report "$bench_tmp/meta.json" "$bench_tmp" "$tags" ${json:+"$json"}
[ -z "$json" ] || say "wrote $json"
if [ "$profile" = 1 ]; then
	m=${models%% *}
	PP_CUDA_GRAPH=0 bench_profile "$(bench_limit "$time_limit" "$budget" 1)" \
		"Per-op time of pp-decode ($m, -n $n, without the CUDA graph, PP_CUDA_PROFILE=1):" \
		"$decode" --cfg "$bench_tmp/$m.cfg.json" --random-init --prompt "$prompt" -n "$n" \
		--batch 1 --temperature 0
fi
exit $failed
