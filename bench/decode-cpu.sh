#!/usr/bin/env bash
# CPU decode speed of pp-decode against llama.cpp and PyTorch transformers on
# the same weights, and against the memory bandwidth.
#
#   bench/decode-cpu.sh [--models "llama-110m llama-1b"] [--precisions "fp32 bf16 q8_0"]
#                       [--threads "1 2"] [-n 128] [--prompt "1 2 3 4 5 6 7 8"] [--repeat 1]
#                       [--batch 16] [--batch-n 32] [--batch-weights fp32]
#                       [--time-limit 900] [--budget 0] [--json FILE] [--quick]
#
# Run from anywhere after `make`. For each model preset, random weights
# (pp-init model=PRESET) are exported with pp-ckpt to GGUF at each precision
# and to safetensors (fp32), and every side decodes --prompt (token ids: no
# tokenizer) greedily for -n tokens at batch 1, end-of-sequence ignored, once
# per --threads count:
#   pp            pp-decode --ckpt RUN --weights P --temperature 0 --ignore-eos
#                 --json, under OMP_NUM_THREADS=T
#   llama.cpp     llama-cpp-python on the GGUF of precision P, n_threads=T
#   transformers  AutoModelForCausalLM on PyTorch 2.x, torch.set_num_threads(T),
#                 fp32 and bf16 (no q8_0), KV cache, eager loop of argmax
# (bench/decode_ref.py has the last two). Each reports decode tokens/s: the
# generated tokens after the first, over their time, model load and prefill
# not counted; with --repeat R, the fastest of R runs (less sensitive to
# other load on the machine). The table gives them, pp/llama.cpp, pp/transformers, and pp's
# fraction of the memory read bandwidth at T threads (bench/membw-cpu.c,
# built here with cc -O3 -march=native -fopenmp: the best of 10 sums of a
# 1 GiB float array), counting as bytes per token the weights pp reads
# (pp-decode's figure: its totals' weights_bytes).
#
# Then --batch ragged prompts (lengths 4 to 64 tokens) in one pp-decode run
# (--batch B --prompt-file, one prompt per line) against B runs of one prompt
# each, --batch-n tokens per prompt, --batch-weights, the largest --threads;
# --batch 0 skips it.
#
# The llama.cpp and transformers sides run in the venv of
# scripts/setup-bench-env.sh (made on first use; PP_BENCH_PYTHON overrides
# its python), PP_DECODE overrides the pp-decode binary. Each run is killed
# after --time-limit seconds (0: none) or its share of what is left of
# --budget seconds (0: none), and reported as failed. --quick: llama-110m,
# -n 32, --batch 4, --batch-n 16 (where not given): a check that the script
# works, in about a minute (two with --repeat 3).
#
# Prints the tables on stdout (progress on stderr) and, with --json, writes
# them as JSON. Exit 1 when a tool is missing or any run failed, 2 on a
# usage error.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init decode-cpu

models="llama-110m llama-1b" precisions="fp32 bf16 q8_0" threads="1 2" n=128
prompt="1 2 3 4 5 6 7 8" repeat=1 batch=16 batch_n=32 batch_weights=fp32 time_limit=900 budget=0 json=
quick=0 membw_mib=1024 membw_passes=10 given=
usage() { sed -n '2,44s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--models) models=$2 given+=" models"; shift 2 ;;
	--precisions) precisions=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	-n) n=$2 given+=" n"; shift 2 ;;
	--prompt) prompt=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--batch) batch=$2 given+=" batch"; shift 2 ;;
	--batch-n) batch_n=$2 given+=" batch_n"; shift 2 ;;
	--batch-weights) batch_weights=$2; shift 2 ;;
	--time-limit) time_limit=$2; shift 2 ;;
	--budget) budget=$2; shift 2 ;;
	--json) json=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
# --quick's settings, where no option gave them
if [ "$quick" = 1 ]; then
	for v in models=llama-110m n=32 batch=4 batch_n=16; do
		[[ " $given " == *" ${v%%=*} "* ]] || printf -v "${v%%=*}" %s "${v#*=}"
	done
fi
bench_ints n repeat batch batch_n time_limit budget
[ "$n" -ge 2 ] || usage_error "-n must be at least 2"
[ "$repeat" -ge 1 ] || usage_error "--repeat must be at least 1"
[ "$batch" -eq 0 ] || [ "$batch_n" -ge 2 ] || usage_error "--batch-n must be at least 2"
[ -n "${models// /}" ] || usage_error "--models: empty"
[ -n "${precisions// /}" ] || usage_error "--precisions: empty"
for p in $precisions $batch_weights; do
	case $p in fp32 | bf16 | q8_0) ;; *) usage_error "precision $p: expected fp32, bf16 or q8_0" ;; esac
done
[ -n "${threads// /}" ] || usage_error "--threads: empty"
max_threads=0
for t in $threads; do
	[[ $t =~ ^[1-9][0-9]*$ ]] || usage_error "--threads '$threads': expected positive integers"
	[ "$t" -le "$max_threads" ] || max_threads=$t
done
[[ $prompt =~ ^[0-9]+( [0-9]+)*$ ]] || usage_error "--prompt '$prompt': expected token ids separated by single spaces"
[ -z "$json" ] || json=$(bench_out "$json") || exit 1

decode=${PP_DECODE:-$root/build/bin/pp-decode}
[ -x "$decode" ] || die "pp-decode not found at $decode: build it with make, or set PP_DECODE"
pp_init=$(bench_tool pp-init)
pp_ckpt=$(bench_tool pp-ckpt)
pp_train=$(bench_tool pp-train)

py=${PP_BENCH_PYTHON:-}
if [ -z "$py" ]; then
	say "the benchmark venv (scripts/setup-bench-env.sh) ..."
	py=$("$root/scripts/setup-bench-env.sh") || die "the benchmark venv is not available (scripts/setup-bench-env.sh)"
fi
HF_HUB_OFFLINE=1 "$py" -c 'import torch, transformers, llama_cpp' 2>"$bench_tmp/python.log" ||
	die "$py cannot import torch, transformers and llama_cpp: $(tail -n 1 "$bench_tmp/python.log")"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

load0=$(cut -d' ' -f1 /proc/loadavg)
n_models=$(wc -w <<<"$models") n_prec=$(wc -w <<<"$precisions") n_thr=$(wc -w <<<"$threads")
# runs still to go, for --budget's shares: pp and llama.cpp per precision and
# threads, transformers per precision, the ragged batch and its singles
runs_left=$((n_models * (n_prec * (2 * n_thr + 1) * repeat + (batch > 0 ? batch + 1 : 0))))
prompt_tokens=$(wc -w <<<"$prompt")

# --- memory bandwidth -----------------------------------------------------------
cc=$(command -v cc || command -v gcc) || die "no C compiler (cc) for bench/membw-cpu.c"
"$cc" -O3 -march=native -fopenmp -o "$bench_tmp/membw-cpu" "$root/bench/membw-cpu.c" 2>"$bench_tmp/membw.build.log" ||
	die "cc could not build bench/membw-cpu.c: $(tail -n 3 "$bench_tmp/membw.build.log")"
say "memory read bandwidth ($membw_mib MiB, best of $membw_passes, threads: $threads) ..."
# shellcheck disable=SC2086 # the thread counts are separate arguments
"$bench_tmp/membw-cpu" -m "$membw_mib" -p "$membw_passes" $threads >"$bench_tmp/membw.json" 2>"$bench_tmp/membw.log" ||
	die "bench/membw-cpu failed: $(tail -n 1 "$bench_tmp/membw.log")"
say "bandwidth: $(python3 -c 'import json, sys
print(", ".join("%s thread(s) %.1f GB/s" % kv for kv in json.load(open(sys.argv[1]))["gbs"].items()))' "$bench_tmp/membw.json")"

# --- runs -----------------------------------------------------------------------
# next_limit [K]: $limit, the wall-clock limit of the next process, which
# makes K runs (default 1): K times a run's (bench_limit), counting them done
next_limit() {
	local k=${1:-1}
	limit=$(bench_limit "$time_limit" "$budget" "$((runs_left > 0 ? runs_left : 1))")
	limit=$((limit * k))
	runs_left=$((runs_left - k))
}

# failed_reason RC LIMIT LOG WHAT: why a run failed, one line
failed_reason() {
	if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then
		echo "$4 ran past the ${2} s limit"
	else
		echo "$4 exited $1: $(grep -v '^$' "$3" | tail -n 1)"
	fi
}

# pp_run TAG THREADS WEIGHTS PROMPTS ARGS...: pp-decode --ckpt $run ARGS
# under OMP_NUM_THREADS=THREADS and $limit, its figures in TAG.pp.json
# (decode_ref.py pp, which checks that PROMPTS prompts came back), or the
# reason it failed in TAG.pp.err
pp_run() {
	local tag=$1 t=$2 w=$3 prompts=$4 rc=0 t0 t1
	shift 4
	rm -f "$bench_tmp/$tag.pp.json" "$bench_tmp/$tag.pp.err"
	t0=$(date +%s.%N)
	OMP_NUM_THREADS=$t bench_timeout "$limit" "$decode" --ckpt "$run" --weights "$w" --temperature 0 \
		--ignore-eos --json "$@" >"$bench_tmp/$tag.out" 2>"$bench_tmp/$tag.log" || rc=$?
	t1=$(date +%s.%N)
	if [ "$rc" -ne 0 ]; then
		failed_reason "$rc" "$limit" "$bench_tmp/$tag.log" pp-decode >"$bench_tmp/$tag.pp.err"
	elif ! python3 "$root/bench/decode_ref.py" pp "$bench_tmp/$tag.out" --log "$bench_tmp/$tag.log" \
		--weights "$w" --prompts "$prompts" --wall "$(python3 -c "print($t1 - $t0)")" \
		>"$bench_tmp/$tag.pp.json" 2>"$bench_tmp/$tag.pp.err"; then
		rc=1
	fi
	if [ "$rc" -ne 0 ]; then
		rm -f "$bench_tmp/$tag.pp.json"
		return 1
	fi
}

# pp_fastest TAG: TAG.pp.json, the fastest (decode_tok_s) of TAG.1.pp.json
# ... TAG.$repeat.pp.json
pp_fastest() {
	local r best=1
	for ((r = 2; r <= repeat; r++)); do
		if python3 -c 'import json, sys
sys.exit(json.load(open(sys.argv[1]))["decode_tok_s"] <= json.load(open(sys.argv[2]))["decode_tok_s"])' \
			"$bench_tmp/$1.$r.pp.json" "$bench_tmp/$1.$best.pp.json"; then
			best=$r
		fi
	done
	cp "$bench_tmp/$1.$best.pp.json" "$bench_tmp/$1.pp.json"
}

# ref_run TAG SIDE ARGS...: bench/decode_ref.py SIDE ARGS in the venv under
# $limit, its JSON lines in TAG.jsonl, or the reason it failed in TAG.err
ref_run() {
	local tag=$1 side=$2 rc=0 t0=$SECONDS
	shift 2
	rm -f "$bench_tmp/$tag.jsonl" "$bench_tmp/$tag.err"
	OMP_NUM_THREADS=$max_threads bench_timeout "$limit" "$py" "$root/bench/decode_ref.py" "$side" "$@" \
		>"$bench_tmp/$tag.jsonl" 2>"$bench_tmp/$tag.log" || rc=$?
	if [ "$rc" -ne 0 ]; then
		failed_reason "$rc" "$limit" "$bench_tmp/$tag.log" "decode_ref.py $side" >"$bench_tmp/$tag.err"
		say "$tag: $side failed: $(cat "$bench_tmp/$tag.err"); last lines of its log:"
		tail -n 5 "$bench_tmp/$tag.log" >&2
		return 1
	fi
	say "$tag: $side $(python3 -c 'import json, sys
print(" ".join("%.1f" % json.loads(x)["decode_tok_s"] for x in open(sys.argv[1])))' "$bench_tmp/$tag.jsonl") tok/s ($((SECONDS - t0)) s)"
}

failed=0 lengths=
for m in $models; do
	say "$m: pp-init, pp-ckpt export ..."
	"$pp_init" --plan --json model="$m" >"$bench_tmp/$m.plan.json" 2>"$bench_tmp/$m.plan.log" ||
		die "pp-init rejected model=$m: $(tail -n 1 "$bench_tmp/$m.plan.log")"
	"$pp_train" model="$m" --print-config >"$bench_tmp/$m.preset.json" 2>"$bench_tmp/$m.plan.log" ||
		die "pp-train rejected model=$m: $(tail -n 1 "$bench_tmp/$m.plan.log")"
	max_seq=$(benchlib get "$bench_tmp/$m.preset.json" model.max_seq_len)
	[ $((prompt_tokens + n)) -le "$max_seq" ] ||
		die "$m: the prompt ($prompt_tokens tokens) + -n $n exceeds its context of $max_seq"
	[ "$batch" -eq 0 ] || [ $((64 + batch_n)) -le "$max_seq" ] ||
		die "$m: the longest ragged prompt (64 tokens) + --batch-n $batch_n exceeds its context of $max_seq"
	run=$bench_tmp/run-$m
	"$pp_init" model="$m" -o "$run" >"$bench_tmp/$m.init.log" 2>&1 ||
		die "pp-init model=$m -o $run failed: $(tail -n 1 "$bench_tmp/$m.init.log")"
	hf=0
	for p in $precisions; do
		"$pp_ckpt" export "$run" --format gguf --dtype "$p" -o "$bench_tmp/$m.$p.gguf" >"$bench_tmp/$m.export.log" 2>&1 ||
			die "pp-ckpt export --format gguf --dtype $p failed: $(tail -n 1 "$bench_tmp/$m.export.log")"
		[ "$p" = q8_0 ] || hf=1
	done
	if [ "$hf" = 1 ]; then
		"$pp_ckpt" export "$run" --format safetensors -o "$bench_tmp/$m-hf" >"$bench_tmp/$m.export.log" 2>&1 ||
			die "pp-ckpt export --format safetensors failed: $(tail -n 1 "$bench_tmp/$m.export.log")"
	fi

	for p in $precisions; do
		for t in $threads; do
			tag=$m.$p.$t t0=$SECONDS
			for ((r = 1; r <= repeat; r++)); do
				next_limit
				pp_run "$tag.$r" "$t" "$p" 1 --prompt "$prompt" --batch 1 -n "$n" || break
			done
			if [ "$r" -gt "$repeat" ]; then
				pp_fastest "$tag"
				say "$tag: pp $(printf %.1f "$(benchlib get "$bench_tmp/$tag.pp.json" decode_tok_s)") tok/s ($((SECONDS - t0)) s with start-up)"
			else
				failed=1
				mv "$bench_tmp/$tag.$r.pp.err" "$bench_tmp/$tag.pp.err"
				say "$tag: pp failed: $(cat "$bench_tmp/$tag.pp.err")"
			fi
		done
		next_limit $((n_thr * repeat))
		ref_run "$m.$p.llama" llama.cpp "$bench_tmp/$m.$p.gguf" --threads "$threads" --prompt "$prompt" \
			-n "$n" --repeat "$repeat" || failed=1
		[ "$p" != q8_0 ] || continue
		next_limit $((n_thr * repeat))
		ref_run "$m.$p.hf" transformers "$bench_tmp/$m-hf" --dtype "$p" --threads "$threads" \
			--prompt "$prompt" -n "$n" --repeat "$repeat" || failed=1
	done

	# ragged batch: prompt k has 4 * (1 + 7k mod 16) ids
	if [ "$batch" -gt 0 ]; then
		: >"$bench_tmp/ragged.txt"
		lengths=
		for ((k = 0; k < batch; k++)); do
			len=$((4 * (1 + k * 7 % 16))) line=
			lengths+="${lengths:+,}$len"
			for ((j = 0; j < len; j++)); do line+="$(((k * 7919 + j * 104729) % 31999 + 1)) "; done
			echo "${line% }" >>"$bench_tmp/ragged.txt"
		done
		say "$m: $batch ragged prompts in one pp-decode run ($batch_weights, $max_threads threads) ..."
		next_limit
		if pp_run "$m.ragged.batch" "$max_threads" "$batch_weights" "$batch" \
			--prompt-file "$bench_tmp/ragged.txt" --batch "$batch" -n "$batch_n"; then
			say "$m: the same $batch prompts in $batch runs ..."
			k=0
			while read -r line; do
				next_limit
				if ! pp_run "$m.ragged.single.$k" "$max_threads" "$batch_weights" 1 \
					--prompt "$line" --batch 1 -n "$batch_n"; then
					failed=1
					say "$m: single run $((k + 1)) failed: $(cat "$bench_tmp/$m.ragged.single.$k.pp.err")"
					break
				fi
				k=$((k + 1))
			done <"$bench_tmp/ragged.txt"
		else
			failed=1
			say "$m: ragged batch failed: $(cat "$bench_tmp/$m.ragged.batch.pp.err")"
		fi
	fi
	# the model's files are large (llama-1b: about 15 GB in all)
	rm -rf "$run" "$bench_tmp/$m-hf" "$bench_tmp/$m".*.gguf
done

# --- report ---------------------------------------------------------------------
python3 - "$bench_tmp/meta.json" <<EOF
import json, sys
ints = lambda s: [int(x) for x in s.split()]
json.dump({"bench": "decode-cpu", "cpu": """$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //; s/"//g')""",
           "nproc": $(nproc), "date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "commit": "$(bench_commit)",
           "quick": $([ "$quick" = 1 ] && echo True || echo False),
           "n": $n, "prompt_tokens": $prompt_tokens, "models": "$models".split(),
           "precisions": "$precisions".split(), "threads": ints("$threads"),
           "bandwidth": json.load(open("$bench_tmp/membw.json"))["gbs"],
           "bandwidth_note": "bench/membw-cpu.c: best of $membw_passes sums of a $membw_mib MiB float array",
           "batch": $batch, "batch_n": $batch_n, "batch_weights": "$batch_weights",
           "batch_threads": $max_threads, "batch_lengths": "$lengths",
           "load_average": ["$load0", "$(cut -d' ' -f1 /proc/loadavg)"]}, open(sys.argv[1], "w"))
EOF
python3 "$root/bench/decode_ref.py" report "$bench_tmp/meta.json" "$bench_tmp" ${json:+"$json"}
echo "# load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end (other work on the machine slows every side)"
[ -z "$json" ] || say "wrote $json"
exit $failed
