#!/usr/bin/env bash
# pp-decode end to end on the CPU: greedy decoding against Hugging Face
# transformers for each dense family, a checkpoint written by a pp=2 x tp=2
# run against the single-process one, pp-train --sample on the same code,
# text through a tokenizer, JSON output, and bad input. (The cached logits
# against the full forward are in test_decode.c; the ops in test_ops.c.)
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=1
tool=$PP_ROOT/build/tests/tool_hf_dump
tok=$(spm_tokenizer 2>$T/tok.err)

# --- greedy tokens equal Hugging Face's, per family ------------------------------
# 64 tokens after a prompt of 8, past mistral-tiny's window of 4
if py=$(cd "$PP_ROOT" && scripts/setup-reference.sh 2>$T/setup.log); then
	for p in llama mistral gemma gpt; do
		if "$tool" model.preset=$p-tiny seq_len=16 model.init_std=0.1 --batch 1 --seed 99 \
			--generate 64 -o $T/$p.h5 2>$T/$p.log; then
			"$py" "$PP_ROOT/tests/ref/hf_reference.py" $T/$p.h5 --tag decode/hf/$p | grep "/generate"
		else
			fail decode/hf/$p "tool_hf_dump: $(tail -n 1 $T/$p.log)"
		fi
	done
else
	skip decode/hf "reference environment unavailable: $(tail -n 1 $T/setup.log)"
fi

# --- any layout: a pp=2 x tp=2 checkpoint decodes as the single-process one -----
# Both runs train 3 steps from the same step-0 checkpoint (their weights agree
# to fp32 round-off); greedy decoding of 24 tokens must give the same ids.
cfg="model=llama-tiny data=synthetic global_batch=4 microbatch=2 seq_len=32 steps=3 lr=1e-2"
pp-init $cfg -o $T/one >/dev/null 2>$T/init.log && cp -r $T/one $T/four
pp-train $cfg run_dir=$T/one --quiet 2>$T/one.log
if mpirun -n 4 --allow-run-as-root --oversubscribe pp-train $cfg pp=2 tp=2 run_dir=$T/four \
	--quiet >/dev/null 2>$T/four.log; then
	check decode/layout/sharded test -f $T/four/checkpoints/step_00000003/shard-pp001-tp001.h5
	pp-decode $cfg run_dir=$T/one --prompt "5 6 7" -n 24 --temperature 0 >$T/one.txt 2>$T/d1.log
	pp-decode $cfg run_dir=$T/four --prompt "5 6 7" -n 24 --temperature 0 >$T/four.txt 2>$T/d4.log
	echo "single: $(cat $T/one.txt)"
	check decode/layout/pp2_tp2_same_text cmp -s $T/one.txt $T/four.txt
	check decode/layout/continues_prompt grep -qE "^5 6 7( [0-9]+){24}$" $T/four.txt
else
	fail decode/layout/pp2_tp2 "mpirun: $(grep -m1 error $T/four.log)"
fi

# --- pp-train --sample decodes like pp-decode on the same weights ------------------
pp-train $cfg run_dir=$T/one --quiet --sample 24 --prompt "5 6 7" --temperature 0 \
	>$T/sample.txt 2>$T/sample.log
check decode/train_sample_same_text cmp -s $T/one.txt $T/sample.txt
# a draw at temperature 1 is reproducible with its seed and differs from greedy
pp-decode $cfg run_dir=$T/one --prompt "5" -n 30 --temperature 1 --top-k 50 --seed 3 >$T/s1.txt 2>/dev/null
pp-decode $cfg run_dir=$T/one --prompt "5" -n 30 --temperature 1 --top-k 50 --seed 3 >$T/s2.txt 2>/dev/null
pp-decode $cfg run_dir=$T/one --prompt "5" -n 30 --temperature 1 --top-k 50 --seed 4 >$T/s3.txt 2>/dev/null
check decode/sample_seeded cmp -s $T/s1.txt $T/s2.txt
check decode/sample_seed_matters test "$(cat $T/s1.txt)" != "$(cat $T/s3.txt)"

# --- JSON lines, the summary on stderr ---------------------------------------------------
pp-decode $cfg --random-init --prompt "1 2 3 4" -n 16 --temperature 0 --json --logprobs 3 \
	>$T/j.json 2>$T/j.log
check decode/json_line jq -e '.index == 0 and .prompt == "1 2 3 4" and .prompt_tokens == 4
	and .completion_tokens == 16 and (.tokens | length) == 16 and (.logprobs | length) == 16
	and (.logprobs | all(. <= 0)) and (.top_logprobs | length) == 16
	and (.top_logprobs | all(length == 3)) and .top_logprobs[0][0].id == .tokens[0]
	and .top_logprobs[0][0].logprob == .logprobs[0] and .finish_reason == "length"
	and .decode_tok_s > 0 and .prefill_tok_s > 0 and .bytes_per_token > 0
	and (.completion | test("^( [0-9]+){16}$"))' $T/j.json
check decode/json_one_line test "$(wc -l <$T/j.json)" = 1
check decode/totals_json jq -e '.prompts == 1 and .failed == 0 and .prompt_tokens == 4
	and .generated_tokens == 16 and .steps == 15 and .decode_tok_s > 0 and .prefill_tok_s > 0
	and .weights == "fp32" and .weights_bytes > 0 and .kv_cache_bytes > 0
	and .bytes_per_step > .weights_bytes and .bandwidth_gb_s > 0' $T/j.log

# --- many prompts: a ragged batch equals each prompt decoded alone ------------------------------
# Nine prompts of different lengths, more than --batch 3, plain and JSON lines
# with their own sampling and lengths (and a blank line); a sequence that ends
# early lets the next prompt in while the others go on.
cat >$T/many.txt <<'PROMPTS'
5 6 7
{"prompt": "9", "max_tokens": 3}
{"prompt": "1 2 3 4 5 6 7 8 9 10 11 12", "temperature": 0}

{"prompt": "40 41", "seed": 11, "top_k": 20}
100 101 102 103 104 105
{"prompt": "7 7 7 7", "temperature": 0.5, "top_p": 0.9, "max_tokens": 20}
3
{"prompt": "17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35", "max_tokens": 2}
{"prompt": "60 61 62", "seed": 4}
PROMPTS
pp-decode $cfg run_dir=$T/one --prompt-file $T/many.txt --batch 3 -n 12 --temperature 1 --seed 5 \
	--json >$T/many.json 2>$T/many.log
check decode/batch/all_in_order jq -se '[.[].index] == [0,1,2,3,4,5,6,7,8] and
	([.[].line] == [1,2,3,5,6,7,8,9,10]) and all(.[]; .completion_tokens > 0)' $T/many.json
check decode/batch/refilled jq -e '.max_batch == 3 and .prompts == 9' $T/many.log
same=0 i=0
for line in 1 2 3 5 6 7 8 9 10; do
	sed -n "${line}p" $T/many.txt | pp-decode $cfg run_dir=$T/one --batch 1 -n 12 --temperature 1 \
		--seed 5 --json >$T/alone.json 2>/dev/null
	a=$(jq -c '[.tokens, .completion, .finish_reason]' $T/alone.json)
	b=$(jq -sc ".[$i] | [.tokens, .completion, .finish_reason]" $T/many.json)
	[ -n "$a" ] && [ "$a" = "$b" ] && same=$((same + 1))
	i=$((i + 1))
done
check decode/batch/same_as_alone test $same = 9
check decode/batch/lengths jq -se '.[1].completion_tokens == 3 and .[7].completion_tokens == 2 and
	.[5].completion_tokens == 20 and .[0].completion_tokens == 12' $T/many.json
# text mode from stdin: prompt and completion, one line each, in order
pp-decode $cfg run_dir=$T/one --batch 2 -n 4 --temperature 0 <$T/many.txt >$T/many.out 2>$T/many-text.log
check decode/batch/text_lines eval 'test "$(sed -n 1p $T/many.out | cut -d" " -f1-3)" = "5 6 7" &&
	test "$(wc -l <$T/many.out)" = 9'
check decode/summary_line grep -qE "9 prompts: [0-9]+ prompt tokens, prefill [0-9.]+ tok/s; [0-9]+ tokens at [0-9.]+ tok/s \(up to 2 at once\); weights [0-9.e-]+ GB \(fp32\), KV cache" $T/many-text.log

# --- text through a tokenizer -------------------------------------------------------------
if [ -f "$tok" ]; then
	big="model=llama-tiny model.vocab_size=32000 tokenizer=$tok"
	pp-decode $big --random-init --prompt "The quick brown fox" -n 8 --ignore-eos >$T/text.txt 2>$T/text.log
	check decode/text_continues_prompt grep -q "^The quick brown fox" $T/text.txt
	expect_fail decode/vocab_mismatch 2 "tokenizer .* has 32000 tokens but model.vocab_size=256" \
		pp-decode model=llama-tiny tokenizer=$tok --random-init --prompt hi
else
	skip decode/text "no SentencePiece tokenizer: $(cat $T/tok.err)"
fi

# --- bad input ------------------------------------------------------------------------------
expect_fail decode/unknown_flag 2 "unknown argument '--frobnicate'" pp-decode $cfg --frobnicate
expect_fail decode/logprobs_needs_json 2 "--logprobs 3: the top tokens are written in --json output only" pp-decode $cfg --random-init --prompt 1 --logprobs 3
expect_fail decode/no_checkpoint 2 "holds no checkpoint" pp-decode $cfg run_dir=$T/empty --prompt 1
expect_fail decode/bad_ckpt_dir 2 "nope: neither a checkpoint" pp-decode $cfg --ckpt $T/nope --prompt 1
expect_fail decode/other_model 2 "model.d_model" pp-decode $cfg model.d_model=96 run_dir=$T/one --prompt 1
long=$(seq -s ' ' 1 130 | awk '{for (i = 1; i <= NF; i++) printf "%d ", $i % 200}')
expect_fail decode/prompt_too_long 2 "prompt is 130 tokens, longer than the context.*max_seq_len=128" \
	pp-decode $cfg --random-init --prompt "$long"
expect_fail decode/past_context 2 "ask for at most 126" pp-decode $cfg --random-init --prompt "1 2 3" -n 200
expect_fail decode/bad_token 2 "token 999 is outside \[0, 256\)" pp-decode $cfg --random-init --prompt "1 999"
expect_fail decode/bad_top_p 2 "--top-p .1\.5." pp-decode $cfg --random-init --top-p 1.5
expect_fail decode/bad_n 2 "^pp-decode: error: -n 'x'" pp-decode $cfg --random-init -n x
expect_fail decode/prompt_and_file 2 "not both" pp-decode $cfg --random-init --prompt 1 --prompt-file /dev/null
expect_fail decode/missing_prompt_file 2 "--prompt-file: $T/none" pp-decode $cfg --random-init --prompt-file $T/none
expect_fail decode/bad_weights 2 "--weights 'q4': expected fp32, bf16, q8_0 or gguf" pp-decode $cfg --random-init --weights q4
expect_fail decode/empty_stdin 2 "stdin: no prompts" pp-decode $cfg --random-init </dev/null
printf '\n  \n' >$T/blank.txt
expect_fail decode/blank_file 2 "$T/blank.txt: no prompts" pp-decode $cfg --random-init --prompt-file $T/blank.txt

# a bad line fails alone, named by its line; the others still finish
{
	echo '1 2 3'
	echo '{"prompt": "4 5", "max_tokens": 2'
	echo '{"prompt": "4 5", "frobnicate": 1}'
	echo "$long"
	echo '1 999'
	echo 'hello world'
	echo '{"prompt": "1", "top_p": 7}'
	echo '{"messages": [{"role": "user", "content": "hi"}]}'
	echo '{"prompt": "6 7", "max_tokens": 3}'
} >$T/bad.txt
pp-decode $cfg --random-init --prompt-file $T/bad.txt -n 2 --json >$T/bad.json 2>$T/bad.log
rc=$?
check decode/bad_lines/exit_2 test $rc = 2
check decode/bad_lines/others_finish jq -se '.[0].completion_tokens == 2 and .[8].completion_tokens == 3
	and ([.[].index] == [0,1,2,3,4,5,6,7,8])' $T/bad.json
check decode/bad_lines/malformed_json grep -q "line 2: not a JSON object: .*column" $T/bad.log
check decode/bad_lines/unknown_field grep -q "line 3: unknown field 'frobnicate' (expected prompt, messages" $T/bad.log
check decode/bad_lines/over_context grep -q "line 4: the prompt is 130 tokens, longer than the context" $T/bad.log
check decode/bad_lines/unknown_token grep -q "line 5: prompt: token 999 is outside \[0, 256)" $T/bad.log
check decode/bad_lines/no_tokenizer grep -q "line 6: prompt 'hello world': without a tokenizer the prompt is token ids" $T/bad.log
check decode/bad_lines/bad_value grep -q "line 7: field 'top_p' 7: expected a probability" $T/bad.log
check decode/bad_lines/messages_need_chat grep -q "line 8: field 'messages' needs --chat" $T/bad.log
check decode/bad_lines/error_in_json jq -se '.[1].error | test("^line 2: ")' $T/bad.json
check decode/bad_lines/count grep -q "7 of 9 prompts failed" $T/bad.log
expect_fail decode/chat_without_tokenizer 2 "--chat needs a tokenizer: the checkpoint keeps none" \
	pp-decode $cfg --random-init --chat --prompt hi

# --- the block products' narrower paths (this machine's widest runs in test_decode) ---
for isa in avx2 generic; do
	PP_CPU_ISA=$isa "$PP_ROOT/build/tests/test_decode" >$T/isa-$isa.log 2>&1
	check decode/isa_$isa/blocks_and_weights eval '! grep -q "^FAIL" $T/isa-$isa.log &&
		test "$(grep -cE "^PASS: decode/(blocks/|.*/weights_)" $T/isa-$isa.log)" = 15'
done
