#!/usr/bin/env bash
# GPU checks of the CUDA backend, on a machine where nvidia-smi lists a GPU
# and pp was built with CUDA:
#   - every op of both CUDA tables against the CPU backend
#     (build/tests/tool_cuda_check: its own PASS/FAIL line per op and table,
#     relative error <= 1e-5 in fp32, <= 1e-2 in bf16); the shapes cuDNN
#     refuses by design (expected_skips below) are marked [expected];
#   - pp-train on device=cuda against device=cpu, 20 steps of each tiny
#     family (llama: rope + GQA + SwiGLU; gpt: learned positions, LayerNorm,
#     biases, GELU; mistral: sliding window; gemma: norm offset, GeGLU,
#     embedding scale; mixtral: 4 experts, top 2, the routing, permutation
#     and per-expert products on the device; glam: top-2 routing with
#     capacity, every other layer MoE, T5 relative position biases): every
#     step's loss within 1e-4 relative (fp32 on
#     both; thread-count changes on the CPU alone move these losses by 1e-8);
#   - cuDNN attention (PP_CUDA_ATTENTION=cudnn, bf16 inside): 20 llama
#     steps at seq_len 128 against device=cpu, every step's loss within
#     1e-2 relative; cuDNN must have taken the shape (no fallback line);
#     the same with GLaM's relative position biases (model.pos=relative);
#   - the same with PP_CUDNN_DP_WORKSPACE_MIB=0: cuDNN's deterministic
#     backward does not fit, runs on the plain kernels and says so;
#   - bf16 (dtype=bf16: bf16 activations and compute weights, fp32 master
#     weights, gradients and AdamW state; cuDNN attention) against fp32 on
#     the CPU, 20 steps of each family: every step's loss within 2e-2
#     relative;
#   - a bitwise resume on the GPU, in fp32 and in bf16: 20 steps in one go,
#     and the same run resumed from its step-10 checkpoint, give identical
#     losses and checkpoints (deterministic kernels); in bf16 once with the
#     plain attention kernels and once with cuDNN's at seq_len 128, whose
#     backward pp builds in cuDNN's deterministic form (no fallback to the
#     plain kernels allowed);
#   - the NCCL comm backend with size-1 communicators (every collective,
#     point-to-point and nonblocking call of build/tests/tool_comm_check);
#   - pp-decode on the GPU, greedy, from each family's 20-step CPU
#     checkpoint: the same tokens as on the CPU, and with the step's CUDA
#     graph (the default) the same text as without it (PP_CUDA_GRAPH=0), in
#     fp32 and in bf16, and from a prompt of one token;
#   - pp-eval on the GPU: a tiny llama's task items (multiple choice
#     batched through copies of cached contexts, a cloze item) scored as on
#     the CPU, log-likelihoods within 1e-4 relative;
#   - a profile (profile_steps) timed with CUDA events: every pass of the
#     window recorded with a positive length, the passes timed on the
#     device, the step's parts adding up to its time, and a trace whose
#     events nest on every thread.
# Elsewhere each check is one counted SKIP line. PP_TEST_GPU_DEVICE=cpu runs
# the training checks with cpu in place of cuda: a test of this script on a
# machine without a GPU. PP_TEST_GPU_EXTRA="key=value ..." adds settings to
# the device side of the comparisons with the CPU, a wrong result on
# purpose (tests/e2e/test_helpers.sh shows those checks failing on it).
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1
dev=${PP_TEST_GPU_DEVICE:-cuda}
read -ra extra <<<"${PP_TEST_GPU_EXTRA:-}"
families=(llama gpt mistral gemma mixtral glam)
checks=(ops)
for f in "${families[@]}"; do checks+=("${f}_cuda_vs_cpu"); done
checks+=(llama_cudnn_vs_cpu)
for f in "${families[@]}"; do checks+=("${f}_bf16_vs_cpu"); done
checks+=(relative_bias_cudnn_vs_cpu cudnn_workspace_fallback resume_bitwise resume_bitwise_bf16 resume_bitwise_bf16_cudnn)
for f in "${families[@]}"; do checks+=("${f}_decode_vs_cpu"); done
checks+=(decode_graph_vs_eager decode_graph_one_token_prompt decode_graph_vs_eager_bf16 eval_vs_cpu nccl_singleton)
checks+=(packing_cuda_vs_cpu lora_cuda_vs_cpu)
checks+=(fp8_delayed_vs_cpu fp8_current_vs_cpu fp8_gpt_current_vs_cpu fp8_mixtral_current_vs_cpu
	fp8_refused_without_fp8)
checks+=(profile_device_clock)
skip_all() {
	local c
	for c in "${checks[@]}"; do skip "gpu/$c" "$1"; done
	exit 0
}
if [ "$dev" = cuda ]; then
	gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	[ "$gpus" -gt 0 ] || skip_all "no GPU on this machine"
	[ -f build/obj/.variant-cuda ] || skip_all "pp was built without CUDA (nvcc not found, or make CUDA=0)"
	nvidia-smi -L | head -n 1
fi

# --- every op against the CPU backend ---------------------------------------------
# The shapes cuDNN refuses by design, as "check name part|reason part":
# tool_cuda_check's SKIP line for each is marked [expected]; gpu-check.sh
# fails its test stage on any other SKIP.
expected_skips=(
	"cudnn_attention_fwd[B=1 T=1 Hq=2 Hkv=1 D=16 window=0 nb=0]|T=1: cuDNN's backward does not take one token"
	"cudnn_attention_fwd[B=1 T=33 Hq=3 Hkv=1 D=20 window=7 nb=0]|head dim 20: cuDNN takes multiples of 8"
	"cudnn_attention_fwd[B=2 T=100 Hq=4 Hkv=2 D=32 window=0 nb=0]|before 9.16 needs T % 128 == 0"
	"cudnn_attention_fwd_bias[B=2 T=100 Hq=4 Hkv=4 D=64 window=0 nb=32]|before 9.16 needs T % 128 == 0"
)
mark_expected() { # the lines of tool_cuda_check, expected SKIP lines marked
	local line e
	while IFS= read -r line; do
		if [[ $line == SKIP:* ]]; then
			for e in "${expected_skips[@]}"; do
				if [[ $line == *"${e%%|*}"* && $line == *"${e#*|}"* ]]; then
					line="$line [expected]"
					break
				fi
			done
		fi
		printf '%s\n' "$line"
	done
}
if [ "$dev" = cuda ]; then
	build/tests/tool_cuda_check >$T/ops.log 2>&1
	rc=$?
	mark_expected <$T/ops.log
	grep -q '^FAIL: ' $T/ops.log || [ "$rc" -eq 0 ] || fail gpu/ops "tool_cuda_check exited $rc: $(tail -n 3 $T/ops.log)"
	[ "$rc" -eq 0 ] && pass gpu/ops
else
	skip gpu/ops "PP_TEST_GPU_DEVICE=$dev"
fi

# --- training: device=cuda against device=cpu ------------------------------------------
run="data=synthetic global_batch=8 microbatch=4 seq_len=32 steps=20 log_period=1 lr=3e-3"
# vs_cpu FAMILY TAG BOUND KEY=VALUE...: trains FAMILY with the settings into
# $T/FAMILY-TAG and checks gpu/FAMILY_TAG_vs_cpu: every logged loss within
# BOUND (relative) of the CPU run's
vs_cpu() {
	local f=$1 tag=$2 bound=$3 d rc
	shift 3
	pp-train model=$f-tiny $run "$@" "${extra[@]}" run_dir=$T/$f-$tag --quiet 2>$T/$f-$tag.log
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail gpu/${f}_${tag}_vs_cpu "$* exited $rc: $(tail -n 3 $T/$f-$tag.log)"
		return
	fi
	d=$(loss_diff $T/$f-cpu $T/$f-$tag)
	echo "$f-tiny $*: 20 steps, loss at step 20: cpu $(losses $T/$f-cpu | tail -n 1 | cut -d' ' -f2)," \
		"here $(losses $T/$f-$tag | tail -n 1 | cut -d' ' -f2), max relative difference $d"
	check gpu/${f}_${tag}_vs_cpu within "$d" "$bound"
}
for f in "${families[@]}"; do
	pp-train model=$f-tiny $run device=cpu run_dir=$T/$f-cpu --quiet 2>$T/$f-cpu.log
	vs_cpu $f cuda 1e-4 device=$dev
done

# --- fine-tuning: packed documents and LoRA against device=cpu --------------------------------
# packed documents run the plain attention kernels with each row's document
# bound; LoRA's adapters are strided copies and small products beside the
# frozen base. Short documents of llama2's tokenizer (from shared/data).
for i in $(seq 1 300); do
	echo "document $i: $(printf 'word%s ' $(seq 1 $((i % 23 + 2))))"
done >$T/docs.txt
pp-tokenize --tokenizer "$PP_ROOT/../shared/data/llama2-tokenizer.model" --one-doc-per-line \
	-o $T/docs.h5 $T/docs.txt >/dev/null 2>$T/docs.log
# ft_vs_cpu NAME BOUND KEY=VALUE...: the run on the CPU and on the device,
# gpu/NAME_vs_cpu: every logged loss within BOUND (relative)
ft_vs_cpu() {
	local name=$1 bound=$2 d
	shift 2
	if ! pp-train "$@" device=cpu run_dir=$T/$name-cpu --quiet 2>$T/$name-cpu.log ||
		! pp-train "$@" device=$dev "${extra[@]}" run_dir=$T/$name-dev --quiet 2>$T/$name-dev.log; then
		fail gpu/${name}_vs_cpu "$(tail -q -n 2 $T/$name-cpu.log $T/$name-dev.log)"
		return
	fi
	d=$(loss_diff $T/$name-cpu $T/$name-dev)
	echo "$name ($*): max relative difference of the losses $d"
	check gpu/${name}_vs_cpu within "$d" "$bound"
}
ft="model=llama-tiny global_batch=4 microbatch=2 seq_len=32 steps=8 log_period=1"
ft_vs_cpu packing_cuda 1e-4 $ft model.vocab_size=32000 data=$T/docs.h5 packing=true lr=3e-3
ft_vs_cpu lora_cuda 1e-4 $ft data=synthetic lora.rank=4 lora.alpha=8 lora.dropout=0.1 lr=3e-2

# --- FP8 against the CPU's emulation ---------------------------------------------------------
# 20 steps per recipe: the casts and current scaling's scales are the
# CPU's bit for bit (tool_cuda_check's fp8_cast and fp8_scale), the products
# run on FP8 tensor cores from sm_89 (else bf16 GEMMs of the same FP8
# values); the rest of the model is bf16 on the GPU and fp32 on the CPU,
# hence the bf16 bound
fp8_dtype=()
[ "$dev" = cuda ] && fp8_dtype=(dtype=bf16)
# (gpt_current: the GPT family's biased products, its GELU MLP unfused;
# mixtral_current: the experts' products, each source's rows scaled apart)
for r in delayed current gpt_current mixtral_current; do
	f8="model=llama-tiny global_batch=4 microbatch=2 seq_len=32 steps=20 log_period=1 lr=3e-3 data=synthetic fp8.recipe=${r#*_}"
	case $r in gpt_* | mixtral_*) f8="$f8 model=${r%_*}-tiny" ;; esac
	if pp-train $f8 device=cpu run_dir=$T/fp8-$r-cpu --quiet 2>$T/fp8-$r-cpu.log &&
		pp-train $f8 device=$dev "${fp8_dtype[@]}" "${extra[@]}" run_dir=$T/fp8-$r-dev --quiet 2>$T/fp8-$r-dev.log; then
		d=$(loss_diff $T/fp8-$r-cpu $T/fp8-$r-dev)
		echo "fp8 $r: max relative difference of the losses $d"
		check gpu/fp8_${r}_vs_cpu within "$d" 2e-2
	else
		fail gpu/fp8_${r}_vs_cpu "$(tail -q -n 2 $T/fp8-$r-cpu.log $T/fp8-$r-dev.log)"
	fi
done
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
if [ "$dev" = cuda ] && [ -n "$cc" ] && awk -v c="$cc" 'BEGIN { exit !(c < 8.9) }'; then
	expect_fail gpu/fp8_refused_without_fp8 2 "needs a GPU with FP8 tensor cores" \
		pp-train model=llama-tiny data=synthetic steps=1 dtype=bf16 fp8.recipe=delayed run_dir=$T/fp8-old
elif [ "$dev" = cuda ]; then
	skip gpu/fp8_refused_without_fp8 "this GPU has FP8 tensor cores (compute capability ${cc:-unknown})"
else
	skip gpu/fp8_refused_without_fp8 "needs device=cuda (PP_TEST_GPU_DEVICE=$dev)"
fi

# --- cuDNN attention against device=cpu ------------------------------------------------------
# bf16 attention moves the losses by far more than fp32 reordering does, so
# the bound is 1e-2; a shape cuDNN rejected would run the fp32 kernels and
# prove nothing, so its fallback line fails the check
crun="model=llama-tiny ${run/seq_len=32/seq_len=128}"
# cudnn_ok TAG KEY=VALUE...: llama-tiny with the settings on cuDNN against the CPU
cudnn_ok() {
	local tag=$1
	shift
	pp-train $crun "$@" device=cpu run_dir=$T/$tag-cpu --quiet 2>$T/$tag-cpu.log ||
		{ tail -n 3 $T/$tag-cpu.log; return 1; }
	PP_CUDA_ATTENTION=cudnn pp-train $crun "$@" device=$dev "${extra[@]}" run_dir=$T/$tag-dev \
		--quiet 2>$T/$tag-dev.log || { tail -n 3 $T/$tag-dev.log; return 1; }
	if grep 'runs on the plain kernels' $T/$tag-dev.log; then
		echo "cuDNN did not take the shape"
		return 1
	fi
	local d
	d=$(loss_diff $T/$tag-cpu $T/$tag-dev)
	echo "llama-tiny cudnn attention $*: 20 steps at seq_len 128, loss at step 20:" \
		"cpu $(losses $T/$tag-cpu | tail -n 1 | cut -d' ' -f2)," \
		"$dev $(losses $T/$tag-dev | tail -n 1 | cut -d' ' -f2), max relative difference $d"
	within "$d" 1e-2
}
check gpu/llama_cudnn_vs_cpu cudnn_ok cudnn
# GLaM's relative position biases through cuDNN (spread over (H,T,T), the
# gradient summed back per bucket)
check gpu/relative_bias_cudnn_vs_cpu cudnn_ok cudnn-rel model.pos=relative
# the deterministic backward's dP workspace over its limit: the backward
# runs on the plain kernels, says why, and still trains as the CPU does
workspace_fallback() {
	PP_CUDA_ATTENTION=cudnn PP_CUDNN_DP_WORKSPACE_MIB=0 pp-train $crun device=cuda dtype=bf16 \
		run_dir=$T/cudnn-ws --quiet 2>$T/cudnn-ws.log || { tail -n 3 $T/cudnn-ws.log; return 1; }
	grep "backward.*dP workspace of .* is over PP_CUDNN_DP_WORKSPACE_MIB=0.*runs on the plain kernels" \
		$T/cudnn-ws.log || { echo "no fallback line: $(tail -n 2 $T/cudnn-ws.log)"; return 1; }
	within "$(loss_diff $T/cudnn-cpu $T/cudnn-ws)" 2e-2
}
if [ "$dev" = cuda ]; then
	check gpu/cudnn_workspace_fallback workspace_fallback
else
	skip gpu/cudnn_workspace_fallback "dtype=bf16 needs device=cuda (PP_TEST_GPU_DEVICE=$dev)"
fi

# --- bf16 against fp32 on the CPU -------------------------------------------------------------
# Every activation rounds to 8 bits of mantissa (2^-9 relative), so the
# losses part from fp32 by far more than 1e-4; 2e-2 still fails a wrong
# gradient or a stale compute copy of the weights within a few steps.
for f in "${families[@]}"; do
	if [ "$dev" = cuda ]; then
		vs_cpu $f bf16 2e-2 device=cuda dtype=bf16
	else
		skip gpu/${f}_bf16_vs_cpu "dtype=bf16 needs device=cuda (PP_TEST_GPU_DEVICE=$dev)"
	fi
done

# --- bitwise resume on the GPU -----------------------------------------------------------
# The reference runs 20 steps saving at 10 and 20; the other run starts from
# a copy of the reference's step-10 checkpoint. Steps 11..20 must log the
# same losses and step 20 must save the same parameters and AdamW state.
cfg="model=llama-tiny model.d_model=128 model.n_heads=4 model.n_kv_heads=2 $run seq_len=64 checkpoint_period=10 device=$dev"
resume_ok() { # NAME [key=value...]: a name for the run directories, extra settings
	local ref=$T/ref-$1 res=$T/res-$1
	shift
	pp-train $cfg "$@" run_dir=$ref --quiet 2>$ref.log || { tail -n 3 $ref.log; return 1; }
	mkdir -p $res/checkpoints
	cp -r $ref/checkpoints/step_00000010 $res/checkpoints/
	pp-train $cfg "$@" run_dir=$res 2>$res.log || { tail -n 3 $res.log; return 1; }
	grep -q "resumed from step 10" $res.log &&
		same_losses $ref $res 10 &&
		same_tensors $ref/checkpoints/step_00000020/shard-pp000-tp000.h5 \
			$res/checkpoints/step_00000020/shard-pp000-tp000.h5
}
check gpu/resume_bitwise resume_ok fp32
# cuDNN's backward in its deterministic form: at seq_len 128, which every
# cuDNN 9 takes, and with no fallback to the plain kernels in either run
cudnn_resume_ok() {
	resume_ok bf16-cudnn dtype=bf16 seq_len=128 || return 1
	! grep -h 'runs on the plain kernels' $T/ref-bf16-cudnn.log $T/res-bf16-cudnn.log
}
if [ "$dev" = cuda ]; then
	PP_CUDA_ATTENTION=plain check gpu/resume_bitwise_bf16 resume_ok bf16 dtype=bf16
	PP_CUDA_ATTENTION=cudnn check gpu/resume_bitwise_bf16_cudnn cudnn_resume_ok
else
	skip gpu/resume_bitwise_bf16 "dtype=bf16 needs device=cuda (PP_TEST_GPU_DEVICE=$dev)"
	skip gpu/resume_bitwise_bf16_cudnn "dtype=bf16 needs device=cuda (PP_TEST_GPU_DEVICE=$dev)"
fi

# --- decoding on the GPU ------------------------------------------------------------------
# Greedy decoding from each family's trained CPU checkpoint: fp32 on both
# sides, so the argmax agrees unless two logits tie to 1e-6 (20 trained
# steps leave none). The CUDA graph replays the same kernels as the eager
# steps, so those two texts must be identical.
dec="--prompt '1 2 3 4 5 6 7 8' -n 24 --temperature 0 --ignore-eos"
for f in "${families[@]}"; do
	[ -d $T/$f-cpu/checkpoints ] || { fail gpu/${f}_decode_vs_cpu "no checkpoint from the training check"; continue; }
	eval pp-decode model=$f-tiny run_dir=$T/$f-cpu device=cpu $dec >$T/$f-dec-cpu.txt 2>$T/$f-dec-cpu.log
	eval pp-decode model=$f-tiny run_dir=$T/$f-cpu device=$dev $dec >$T/$f-dec-dev.txt 2>$T/$f-dec-dev.log
	rc=$?
	echo "$f-tiny decode: cpu '$(cat $T/$f-dec-cpu.txt)', $dev '$(cat $T/$f-dec-dev.txt)': $(tail -n 1 $T/$f-dec-dev.log)"
	check gpu/${f}_decode_vs_cpu test "$rc" -eq 0 -a -s $T/$f-dec-cpu.txt -a "$(cat $T/$f-dec-cpu.txt)" = "$(cat $T/$f-dec-dev.txt)"
done
graph_same() {
	eval PP_CUDA_GRAPH=0 pp-decode model=llama-tiny run_dir=$T/llama-cpu device=$dev $dec >$T/eager.txt 2>$T/eager.log ||
		{ tail -n 3 $T/eager.log; return 1; }
	[ "$dev" = cpu ] || grep -q "CUDA graph" $T/llama-dec-dev.log || { echo "the default run did not use a CUDA graph"; return 1; }
	cmp $T/eager.txt $T/llama-dec-dev.txt
}
check gpu/decode_graph_vs_eager graph_same
# a prompt of one token: the first forward is a step of one token too, and
# runs eagerly before the graph is recorded (it sizes the backend's scratch)
one_token() {
	local g
	for g in 1 0; do
		PP_CUDA_GRAPH=$g pp-decode model=llama-tiny run_dir=$T/llama-cpu device=$dev --prompt 5 -n 8 \
			--temperature 0 --ignore-eos >$T/one-$g.txt 2>$T/one-$g.log || { tail -n 3 $T/one-$g.log; return 1; }
	done
	[ -s $T/one-1.txt ] && cmp $T/one-0.txt $T/one-1.txt
}
check gpu/decode_graph_one_token_prompt one_token
# bf16: the graph and the eager steps run the same kernels on the same bf16
# values, so their texts are identical too
graph_same_bf16() {
	eval pp-decode model=llama-tiny run_dir=$T/llama-cpu device=cuda dtype=bf16 $dec >$T/bf16-graph.txt 2>$T/bf16-graph.log ||
		{ tail -n 3 $T/bf16-graph.log; return 1; }
	eval PP_CUDA_GRAPH=0 pp-decode model=llama-tiny run_dir=$T/llama-cpu device=cuda dtype=bf16 $dec >$T/bf16-eager.txt 2>$T/bf16-eager.log ||
		{ tail -n 3 $T/bf16-eager.log; return 1; }
	echo "llama-tiny bf16 decode: '$(cat $T/bf16-graph.txt)' (fp32 cpu: '$(cat $T/llama-dec-cpu.txt)')"
	grep -q "CUDA graph" $T/bf16-graph.log && [ -s $T/bf16-graph.txt ] && cmp $T/bf16-eager.txt $T/bf16-graph.txt
}
if [ "$dev" = cuda ]; then
	check gpu/decode_graph_vs_eager_bf16 graph_same_bf16
else
	skip gpu/decode_graph_vs_eager_bf16 "dtype=bf16 needs device=cuda (PP_TEST_GPU_DEVICE=$dev)"
fi

# --- pp-eval on the GPU ---------------------------------------------------------------------
# A tiny llama trained 20 steps with a tiny byte-level BPE tokenizer; its
# tasks' items (multiple choice in batches through copies of each context's
# cached keys and values, a cloze item alone) scored on the GPU as on the
# CPU: every request's log-likelihood within 1e-4 relative, the same
# greediness and predictions.
eval_same() {
	python3 tests/tools/tiny_bpe.py tokenizer.json $T/tok.json || return 1
	pp-train model=llama-tiny model.vocab_size=288 tokenizer=$T/tok.json $run device=cpu \
		run_dir=$T/eval-run --quiet 2>$T/eval-train.log || { tail -n 3 $T/eval-train.log; return 1; }
	printf '%s\n' '{"context": "the cat sat on", "choices": ["the mat", "a hat that the cat had", "it"], "answer": 0}' \
		'{"context": "in the beginning", "choices": ["was the word", "the end"], "answer": 0}' \
		'{"context": "then the", "choices": ["thing", "other thing then", "tin", "then"], "answer": 2}' >$T/mc.jsonl
	printf '%s\n' '{"text": "the hen in the inn then the thin"}' >$T/cloze.jsonl
	local d
	for d in cpu $dev; do
		pp-eval --ckpt $T/eval-run device=$d --tasks $T/mc.jsonl,$T/cloze.jsonl --json --per-item \
			>$T/eval-$d.json 2>$T/eval-$d.log || { tail -n 3 $T/eval-$d.log; return 1; }
	done
	python3 - $T/eval-cpu.json $T/eval-$dev.json <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) == 6, (len(a), len(b))
worst = 0
for x, y in zip(a, b):
    for r, s in zip(x.get("requests", []), y.get("requests", [])):
        assert r["tokens"] == s["tokens"] and r["greedy"] == s["greedy"], (r, s)
        worst = max(worst, abs(r["ll"] - s["ll"]) / abs(r["ll"]))
    assert x.get("pred") == y.get("pred") and x.get("pred_norm") == y.get("pred_norm")
print(f"pp-eval: log-likelihoods within {worst:.2g} relative of the CPU's")
assert worst <= 1e-4
PYEOF
}
check gpu/eval_vs_cpu eval_same

# --- NCCL with size-1 communicators ---------------------------------------------------------
if [ "$dev" = cuda ]; then
	PP_CHECK_BACKEND=nccl timeout 120 build/tests/tool_comm_check >$T/nccl.out 2>$T/nccl.err
	rc=$?
	n=$(grep -c '^PASS: ' $T/nccl.out)
	grep '^FAIL: ' $T/nccl.out
	echo "NCCL singleton: exit $rc, $n checks passed$(grep -m1 -i 'nccl' $T/nccl.err | sed 's/^/; /')"
	check gpu/nccl_singleton test "$rc" -eq 0 -a "$n" -ge 30 -a "$(grep -c '^FAIL: ' $T/nccl.out)" -eq 0
else
	skip gpu/nccl_singleton "PP_TEST_GPU_DEVICE=$dev"
fi

# --- a profile timed on the device ------------------------------------------------------------
profile_ok() {
	local dir=$T/prof-$dev
	pp-train model=llama-tiny $run steps=4 profile_steps=2:4 device=$dev run_dir=$dir --quiet \
		2>$dir.log || { tail -n 3 $dir.log; return 1; }
	pp-merge-profile $dir --json >$dir.json 2>>$dir.log &&
		pp-merge-profile $dir -o $dir.trace.json 2>>$dir.log || { tail -n 3 $dir.log; return 1; }
	python3 - $dir.json $([ "$dev" = cuda ] && echo 1 || echo 0) <<'EOF' || return 1
import json, sys
j = json.load(open(sys.argv[1]))
ops = {t["name"]: t for t in j["top_ops"]}
b = j["step_breakdown_ms"]
parts = sum(b[k] for k in ("compute", "exposed_comm", "bubble", "optimizer", "io", "other"))
print(f"profile: device clock {j['device_clock']}, forward {ops['forward']['mean_ms']:.3f} ms x "
      f"{ops['forward']['count']}, backward {ops['backward']['mean_ms']:.3f} ms, step {b['step']:.3f} ms, parts {parts:.3f} ms")
ok = (j["device_clock"] == (sys.argv[2] == "1") and j["steps"] == [2, 4] and
      ops["forward"]["count"] == 4 and ops["backward"]["count"] == 4 and
      ops["forward"]["mean_ms"] > 0 and ops["backward"]["mean_ms"] > 0 and
      abs(parts - b["step"]) <= 0.1 * b["step"] and b["compute"] <= b["step"])
sys.exit(0 if ok else 1)
EOF
	python3 tests/tools/trace_check.py $dir.trace.json --min-flows 0 --schema-if-installed
}
check gpu/profile_device_clock profile_ok
