#!/usr/bin/env bash
# The GPU benchmark scripts, run end to end on the CPU:
#   - scripts/gpu-check.sh --smoke build bench: bench/gpu.sh's smoke mode
#     (llama-tiny, pp-train and PyTorch on the CPU) through the GPU script's
#     stages, its table and JSON collected in OUTDIR with a summary; the
#     ratio pp/torch is a positive number equal to the two tokens/s, the
#     dtypes are named, a PyTorch fallback is never silent, and the per-op
#     profile it asks for says why there is none on the CPU;
#   - the MFU and MBU arithmetic of bench/benchlib.py on made-up runs with
#     known answers (steady-state means, PyTorch's MFU against pp's peak,
#     MBU = bytes/token x tok/s / bandwidth);
#   - bench/gpu-decode.sh: a clear failure without pp-decode, its smoke mode
#     when pp-decode is built, and pp-decode JSON without the figures;
#   - scripts/gpu-check.sh build without a GPU: builds, then says there is
#     no GPU and exits 3;
#   - bench/cpu-vs-torch.sh on a tiny model (it shares bench/lib.sh);
#   - bench/moe.sh's smoke mode: a tiny Mixtral against PyTorch's, dp=2 at
#     ep=1 and ep=2, and the all-to-all's bandwidth on two ranks;
#   - bench/profile.sh's smoke mode: step times without and with profiling;
#   - bench/fsdp.sh's smoke mode: fsdp=4 against ZeRO-1 over 4 ranks, step
#     time and peak memory;
#   - bench/a3mega.sh's smoke mode: the A3 Mega recipe's run on one device;
#   - bench/fp8.sh's smoke mode: each FP8 recipe beside the plain dtype, the
#     losses close, and pp-init --simulate's predicted speed-up beside;
#   - scripts/gpu-check.sh --smoke sim: bench/simulate.sh's smoke mode, the
#     calibration from the first run's profile and each run's prediction
#     beside its measurement, through the GPU script's stage;
#   - bench/ckpt.sh's smoke mode: cp, convert and export each timed, with
#     their ratios and peak memory;
#   - bench/ckpt-async.sh's smoke mode: the blocked time of synchronous and
#     asynchronous saves;
#   - bench/decode-cpu.sh --quick where its venv exists (scripts/setup-bench-env.sh);
#   - usage errors.
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1
py=$(scripts/setup-reference.sh 2>/dev/null) || py=
has_gpu=0
[ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -gt 0 ] && has_gpu=1
jqt() { jq -e "$@" >/dev/null 2>&1; } # jq test: exit 0 when the filter is true

# --- gpu.sh through gpu-check.sh, smoke mode --------------------------------------
if [ -z "$py" ]; then
	for c in gpu_check_smoke gpu_smoke_table gpu_smoke_json gpu_smoke_notes gpu_smoke_profile; do
		skip bench/$c "no PyTorch reference environment (scripts/setup-reference.sh)"
	done
else
	scripts/gpu-check.sh --smoke build bench $T/gc >$T/gc.out 2>&1
	rc=$?
	check bench/gpu_check_smoke eval '[ $rc -eq 0 ] && jqt "length == 2 and .[0].stage == \"build\" and .[1].stage == \"bench\" and all(.status == \"pass\") and all(.seconds >= 0)" $T/gc/summary.json && grep -q "^bench    pass " $T/gc/summary.txt && [ -s $T/gc/bench.log ] && [ -s $T/gc/versions.txt ]'
	[ $rc -eq 0 ] || tail -n 20 $T/gc.out
	# the table: one row per seq, the ratio a positive number equal to pp/torch
	table_ok() {
		local rows
		rows=$(awk '$1 ~ /^[0-9]+$/' $T/gc/bench-gpu.txt)
		[ "$(wc -l <<<"$rows")" -eq 2 ] && [ "$(cut -d' ' -f1 <<<"$rows" | tr '\n' ' ')" = "32 64 " ] &&
			awk '{ r = $NF; pp = $5; th = $(NF - 2)
				if (!(r ~ /^[0-9.]+$/ && r > 0 && $4 == "fp32" && $8 == "bf16")) exit 1
				d = r - pp / th; if (d < 0) d = -d; if (d > 0.0006 * r + 0.001) exit 1 }' <<<"$rows"
	}
	check bench/gpu_smoke_table table_ok
	check bench/gpu_smoke_json jqt '.bench == "gpu" and .smoke == true and .pp_dtype == "fp32" and (.rows | length == 2) and all(.rows[]; .pp.tokens_per_s > 0 and .torch.tokens_per_s > 0 and .pp_over_torch > 0 and (.pp_over_torch - .pp.tokens_per_s / .torch.tokens_per_s | fabs) < 1e-9 * .pp_over_torch and .pp.mfu == null and .torch.mfu == null and .flops_per_token > 0)' $T/gc/bench-gpu.json
	# every setting asked for and not honoured has its note
	check bench/gpu_smoke_notes jqt '.torch | (.compile or any(.notes[]; test("torch.compile"))) and (.attn == "sdpa" or any(.notes[]; test("sdpa"))) and (.fused_adamw or any(.notes[]; test("fused")))' $T/gc/bench-gpu.json
	# gpu-check asks for the per-op profile; on the CPU there is none, and
	# the table says why after its heading
	check bench/gpu_smoke_profile eval 'grep -A1 "^Per-op time of pp-train (.*PP_CUDA_PROFILE=1):$" $T/gc/bench-gpu.txt | grep -qx "no profile: the run did not use the CUDA backend"'
fi

# --- benchlib arithmetic on known inputs ------------------------------------------
m=$T/metrics.jsonl
cat >$m <<'EOF'
{"step": 1, "loss": 10.5, "lr": 0, "grad_norm": 1, "step_time": 9, "tokens_per_s": 100.0, "flops_per_s": 1e12, "mfu": 0.001}
{"step": 2, "loss": 10.0, "lr": 0, "grad_norm": 1, "step_time": 1, "tokens_per_s": 1000.0, "flops_per_s": 4e14, "mfu": 0.4}
{"step": 2, "val_loss": 9.9}
{"step": 3, "loss": 9.5, "lr": 0, "grad_norm": 1, "step_time": 1, "tokens_per_s": 3000.0, "flops_per_s": 6e14, "mfu": 0.6}
EOF
python3 bench/benchlib.py pp-metrics $m 1 >$T/pp.json 2>$T/pp.err
check bench/pp_metrics_mean jqt '.steps == 2 and .tokens_per_s == 2000 and .tokens_per_s_best == 3000 and .flops_per_s == 5e14 and .mfu == 0.5 and .loss_first == 10.5 and .loss_last == 9.5' $T/pp.json
sed 's/"mfu": 0.6/"mfu": null/' $m >$T/m2.jsonl
python3 bench/benchlib.py pp-metrics $T/m2.jsonl 1 >$T/pp2.json
check bench/pp_metrics_no_peak jqt '.mfu == null and .tokens_per_s == 2000' $T/pp2.json
expect_fail bench/pp_metrics_no_steady 1 "no step after the 3 warm-up steps" python3 bench/benchlib.py pp-metrics $m 3
# PyTorch's MFU against the peak pp-train used: peak = 5e14 / 0.5 = 1e15
# FLOP/s; torch at 4000 tok/s x 1e11 FLOP/token = 4e14 FLOP/s = MFU 0.4
mkdir -p $T/rep
cp $T/pp.json $T/rep/s8.pp.json
echo '{"seq": 8, "global_batch": 2, "microbatch": 1, "flops_per_token": 1e11}' >$T/rep/s8.row.json
echo '{"tokens_per_s": 4000.0, "loss_first": 10.4, "dtype": "bf16", "precision": "bf16 autocast", "attn": "sdpa", "compile": true, "fused_adamw": true, "notes": [], "torch": "9.9", "transformers": "9.9"}' >$T/rep/s8.torch.json
echo '{"seq": 16, "global_batch": 1, "microbatch": 1, "flops_per_token": 1e11}' >$T/rep/s16.row.json
echo "pp-train exited 1: out of memory" >$T/rep/s16.pp.err
echo '{"model": "m", "params": 1100000000, "matmul_params": 1000000000, "device": "GPU", "date": "d", "commit": "c", "warmup": 1, "steps": 2, "pp_dtype": "fp32"}' >$T/rep/meta.json
python3 bench/benchlib.py gpu-report $T/rep/meta.json $T/rep "s8 s16" $T/rep/out.json >$T/rep/table.txt 2>&1
check bench/report_mfu jqt '.rows[0] | .peak_tflops == 1000 and .pp.mfu == 0.5 and .torch.mfu == 0.4 and .torch.tflops == 400 and .pp.tflops == 500 and .pp_over_torch == 0.5' $T/rep/out.json
check bench/report_failed_row eval 'jqt ".rows[1] | .pp == null and .pp_error == \"pp-train exited 1: out of memory\" and .torch_error == \"not run\"" $T/rep/out.json && grep -q "^16 .* failed " $T/rep/table.txt && grep -q "seq 16: pp failed: pp-train exited 1: out of memory" $T/rep/table.txt && grep -q "peak 1000.0 TFLOP/s" $T/rep/table.txt'

# the microbatch: the largest that divides the batch and fits the budget
for mb in 1 2 4; do echo "{\"memory\": {\"total\": $((mb * 10 * 1024 * 1024 * 1024))}}" >$T/mb$mb.plan; done
fit() { python3 bench/benchlib.py fit-microbatch "$@" 1=$T/mb1.plan 2=$T/mb2.plan 4=$T/mb4.plan; }
check bench/fit_microbatch eval '[ "$(fit 8 45)" = 4 ] && [ "$(fit 8 39.9)" = 2 ] && [ "$(fit 2 100)" = 2 ] && [ "$(fit 8 10)" = 1 ]'
expect_fail bench/fit_microbatch_none 1 "no microbatch fits 9.0 GiB: microbatch 1 is planned at 10.0 GiB" fit 8 9

# --- gpu-decode.sh ------------------------------------------------------------------
fake=$T/fake-decode
printf '#!/bin/sh\necho "prompt and text"\necho '"'"'{"prompt_tokens": 8, "prefill_tokens_per_s": 900.5, "decode_tokens_per_s": 125.0, "bytes_per_token": 4000000000}'"'"'\n' >$fake
chmod +x $fake
PP_DECODE=$fake bench/gpu-decode.sh --smoke --bandwidth 1000 --json $T/dec.json >$T/dec.txt 2>$T/dec.err
# 125 tok/s x 4 GB = 500 GB/s of 1000: MBU 50%
check bench/decode_mbu eval 'jqt ".rows[0] | .tokens_per_s == 125 and .bytes_per_token == 4e9 and .achieved_gbs == 500 and .mbu == 0.5" $T/dec.json && grep -qE "^llama-tiny .* 125.0 .* 500.0 +50.0$" $T/dec.txt'
printf '#!/bin/sh\necho '"'"'{"decode_tokens_per_s": 12.5, "tokens": 16}'"'"'\n' >$fake
PP_DECODE=$fake bench/gpu-decode.sh --smoke >$T/dec2.txt 2>$T/dec2.err
rc=$?
check bench/decode_missing_key eval '[ $rc -eq 1 ] && grep -q "no bytes read per token (looked for bytes_per_token" $T/dec2.err && grep -q "keys: decode_tokens_per_s, tokens" $T/dec2.err && grep -qE "^llama-tiny .* failed" $T/dec2.txt'
expect_fail bench/decode_no_binary 1 "pp-decode not found at .*/none: this build has no pp-decode" env PP_DECODE=$T/none bench/gpu-decode.sh --smoke
if [ -x build/bin/pp-decode ]; then
	bench/gpu-decode.sh --smoke --json $T/dec3.json >$T/dec3.txt 2>$T/dec3.err
	check bench/decode_smoke eval 'jqt ".rows[0] | .tokens_per_s > 0 and .bytes_per_token > 0 and .mbu == null" $T/dec3.json || { tail -n 5 $T/dec3.err; false; }'
else
	skip bench/decode_smoke "build/bin/pp-decode is not built"
fi

# --- gpu-check.sh without a GPU ----------------------------------------------------
if [ $has_gpu = 1 ]; then
	skip bench/gpu_check_no_gpu "this machine has a GPU"
else
	scripts/gpu-check.sh build $T/gc0 >$T/gc0.out 2>&1
	rc=$?
	check bench/gpu_check_no_gpu eval '[ $rc -eq 3 ] && grep -q "gpu-check: no GPU on this machine" $T/gc0.out && jqt ".[0].stage == \"build\" and .[0].status == \"pass\" and .[1].status == \"no-GPU\"" $T/gc0/summary.json && grep -q "^nvcc " $T/gc0/versions.txt'
	expect_fail bench/gpu_no_gpu 1 "no GPU on this machine" bench/gpu.sh
fi

# --- cpu-vs-torch.sh (shares bench/lib.sh) -----------------------------------------
if [ -n "$py" ]; then
	bench/cpu-vs-torch.sh --models llama-tiny --seq 16 --batch 2 --warmup 1 --steps 1 >$T/cvt.txt 2>$T/cvt.err
	check bench/cpu_vs_torch eval 'awk '"'"'$1 == "llama-tiny" && $3 > 0 && $4 > 0 && $5 > 0 { ok = 1 } END { exit !ok }'"'"' $T/cvt.txt || { tail -n 5 $T/cvt.err; false; }'
	# PyTorch on the OpenMP OpenBLAS pp links, where the machine has it
	# (scripts/blas-env.sh): not the pthreads build beside torch's own pool
	blas=$(ldd build/bin/pp-train | awk '/libopenblas/ { print $3 }')
	if [[ $blas == */openblas-openmp/* ]]; then
		check bench/cpu_vs_torch_same_blas grep -q "BLAS $(dirname "$blas")/" $T/cvt.txt
	else
		skip bench/cpu_vs_torch_same_blas "pp-train links no OpenMP OpenBLAS (${blas:-none})"
	fi
else
	skip bench/cpu_vs_torch "no PyTorch reference environment"
fi

# --- moe.sh: a Mixtral against PyTorch's, ep=2, the all-to-all ---------------------------
if [ -n "$py" ]; then
	bench/moe.sh --smoke --json $T/moe.json >$T/moe.txt 2>$T/moe.err
	check bench/moe_smoke eval 'jqt ".pp_tokens_per_s > 0 and .torch_tokens_per_s > 0 and (.pp_over_torch - .pp_tokens_per_s / .torch_tokens_per_s | fabs) < 1e-9 and .dp2_ep2_tokens_per_s > 0 and ([.collectives[] | select(.op == \"alltoall\" and .bus_gb_s >= 0)] | length) == 4" $T/moe.json && grep -qE "^dp=2 ep=2" $T/moe.txt || { tail -n 5 $T/moe.err; false; }'
else
	skip bench/moe_smoke "no PyTorch reference environment"
fi
expect_fail bench/moe_bad_steps 2 "^moe: --steps x: expected an integer" bench/moe.sh --steps x

# --- fsdp.sh: fsdp=4 against ZeRO-1, step time and peak memory ----------------------------
bench/fsdp.sh --smoke --json $T/fsdp.json >$T/fsdp.txt 2>$T/fsdp.err
check bench/fsdp_smoke eval 'jqt ".zero1.step_ms > 0 and .fsdp.step_ms > 0 and .zero1.peak_rss_mb > 0 and .fsdp.peak_rss_mb > 0 and (.step_ratio - .fsdp.step_ms / .zero1.step_ms | fabs) < 1e-9" $T/fsdp.json && grep -q "^fsdp / ZeRO-1" $T/fsdp.txt || { tail -n 5 $T/fsdp.err; false; }'
expect_fail bench/fsdp_bad_rounds 2 "^fsdp: --rounds x: expected an integer" bench/fsdp.sh --rounds x

# --- fp8.sh: FP8 recipes against the plain dtype ------------------------------------------------
bench/fp8.sh --smoke --json $T/fp8.json >$T/fp8.txt 2>$T/fp8.err
check bench/fp8_smoke eval 'jqt ".bench == \"fp8\" and (.rows | length == 3) and (.rows | map(.recipe) == [\"none\", \"delayed\", \"current\"]) and (.rows[1].loss_vs_bf16 < 0.01) and all(.rows[]; .predicted_speedup > 0)" $T/fp8.json && grep -q "^tiny  *delayed" $T/fp8.txt || { tail -n 5 $T/fp8.err; false; }'

# --- simulate.sh through gpu-check.sh: predictions against measured steps --------------------
scripts/gpu-check.sh --smoke sim $T/gcs >$T/gcs.out 2>&1
check bench/simulate_smoke eval 'jqt ".bench == \"simulate\" and (.rows | map(.run) == [\"cal\", \"long\", \"a3mega\"]) and all(.rows[]; .predicted_s > 0 and .measured_s > 0 and (.ratio - .predicted_s / .measured_s | fabs) < 1e-9)" $T/gcs/bench-simulate.json && jqt "map(select(.stage == \"sim\"))[-1].status == \"pass\"" $T/gcs/summary.json && grep -q "^llama-tiny seq 64 (calibration)" $T/gcs/bench-simulate.txt || { tail -n 5 $T/gcs.out; false; }'

# --- a3mega.sh: the A3 Mega recipe on one device ------------------------------------------
bench/a3mega.sh --smoke --json $T/a3mega.json >$T/a3mega.txt 2>$T/a3mega.err
check bench/a3mega_smoke eval 'jqt ".bench == \"a3mega\" and .tokens_per_s > 0 and .mfu == null and .maxtext_mfu == 0.55" $T/a3mega.json && grep -q "^pp-train, fsdp 1, one device" $T/a3mega.txt || { tail -n 5 $T/a3mega.err; false; }'

# --- ckpt.sh: convert and export against cp -------------------------------------------
bench/ckpt.sh --smoke --json $T/ckpt.json >$T/ckpt.txt 2>$T/ckpt.err
check bench/ckpt_smoke eval 'jqt "[.rows[].command] == [\"cp\", \"cp+sync\", \"convert\", \"export\"] and all(.rows[]; .seconds >= 0 and .gb_per_s > 0 and .peak_rss_mb > 0) and .rows[0].vs_cp == 1" $T/ckpt.json && grep -qE "^convert +[0-9.]+ " $T/ckpt.txt || { tail -n 5 $T/ckpt.err; false; }'
expect_fail bench/ckpt_bad_arg 2 "unknown argument '--bogus'" bench/ckpt.sh --bogus

# --- profile.sh: step time with and without profiling ------------------------------------
bench/profile.sh --smoke --json $T/prof.json >$T/prof.txt 2>$T/prof.err
check bench/profile_smoke eval 'jqt "[.rows[].layout] == [\"one\", \"pp4\"] and all(.rows[]; .steps == 3 and .step_ms_off > 0 and .step_ms_on > 0 and .events_per_step > 0 and (.ratio - .step_ms_on / .step_ms_off | fabs) < 1e-9)" $T/prof.json && grep -qE "^pp4 +3 " $T/prof.txt || { tail -n 5 $T/prof.err; false; }'
expect_fail bench/profile_bad_steps 2 "^profile: --steps x: expected an integer" bench/profile.sh --steps x

# --- ckpt-async.sh: a save's blocked time, synchronous against asynchronous ---------------
bench/ckpt-async.sh --smoke --json $T/ca.json >$T/ca.txt 2>$T/ca.err
check bench/ckpt_async_smoke eval 'jqt "[.rows[].mode] == [\"sync\", \"async\"] and all(.rows[]; .saves == 3 and .blocked_s >= 0 and .blocked_s_per_gb >= 0) and .rows[0].blocked_vs_sync == 1 and .checkpoint_bytes > 0" $T/ca.json && grep -qE "^async +3 +[0-9.]+ " $T/ca.txt || { tail -n 5 $T/ca.err; false; }'
expect_fail bench/ckpt_async_bad_period 2 "need steps >= period" bench/ckpt-async.sh --steps 2 --period 4

# --- usage errors ----------------------------------------------------------------------
expect_fail bench/gpu_bad_tokens 2 "--tokens 1000 is not a positive multiple of seq 2048" bench/gpu.sh --tokens 1000
expect_fail bench/gpu_bad_arg 2 "unknown argument '--bogus'" bench/gpu.sh --bogus
expect_fail bench/gpu_bad_fraction 2 "--mem-fraction 1.5" bench/gpu.sh --mem-fraction 1.5
expect_fail bench/decode_bad_n 2 "^gpu-decode: -n x: expected an integer" bench/gpu-decode.sh -n x
expect_fail bench/gpu_bad_limit 2 "^gpu: --time-limit 1m: expected an integer" bench/gpu.sh --time-limit 1m
expect_fail bench/gpu_check_bad_stage 2 "unknown option '--fast'" scripts/gpu-check.sh --fast
expect_fail bench/gpu_check_two_dirs 2 "'b' is not a stage" scripts/gpu-check.sh build a b

# --- decode-cpu.sh: pp-decode against llama.cpp and transformers ----------------------------
# Its venv (PyTorch 2.x, llama.cpp built from source: minutes and gigabytes)
# is made by scripts/setup-bench-env.sh, not by the tests.
if [ -x .venv-bench/bin/python ]; then
	bench/decode-cpu.sh --quick -n 8 --batch 2 --batch-n 4 --json $T/dec.json >$T/dec.txt 2>$T/dec.err
	check bench/decode_cpu_quick eval 'jqt "[.rows[] | select(.threads == 1) | .pp.decode_tok_s > 0 and .[\"llama.cpp\"].decode_tok_s > 0 and .pp.bandwidth_fraction > 0] | length == 3 and all" $T/dec.json || { tail -n 5 $T/dec.err; false; }'
else
	skip bench/decode_cpu_quick "no benchmark environment (scripts/setup-bench-env.sh)"
fi
expect_fail bench/decode_cpu_bad_arg 2 "unknown argument '--bogus'" bench/decode-cpu.sh --bogus
