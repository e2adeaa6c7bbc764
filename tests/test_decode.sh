#!/usr/bin/env bash
# pp-decode end to end on the CPU: greedy decoding against Hugging Face
# transformers for each dense family, a checkpoint written by a pp=2 x tp=2
# run against the single-process one, pp-train --sample on the same code,
# text through a tokenizer, JSON output, and bad input. (The cached logits
# against the full forward are in test_decode.c; the ops in test_ops.c.)
. "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
tool=$PP_ROOT/build/tests/tool_hf_dump
tok=$PP_ROOT/../shared/data/llama2-tokenizer.model

# --- greedy tokens equal Hugging Face's, per family ------------------------------
# 12 tokens after a prompt of 8, past mistral-tiny's window of 4
if py=$(cd "$PP_ROOT" && scripts/setup-reference.sh 2>$T/setup.log); then
	for p in llama mistral gemma gpt; do
		if "$tool" model.preset=$p-tiny seq_len=16 model.init_std=0.1 --batch 1 --seed 99 \
			--generate 12 -o $T/$p.h5 2>$T/$p.log; then
			"$py" "$PP_ROOT/tests/hf_reference.py" $T/$p.h5 --tag decode/hf/$p | grep "/generate"
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

# --- JSON, batch, summary ---------------------------------------------------------------
pp-decode $cfg --random-init --prompt "1 2 3 4" -n 16 --batch 3 --json >$T/j.json 2>$T/j.log
check decode/json_figures jq -e '.prompt_tokens == 4 and .generated_tokens == 16 and .batch == 3
	and .decode_tok_s > 0 and .prefill_tok_s > 0 and .param_bytes > 0 and .kv_bytes_per_step > 0
	and .bytes_per_token > 0 and (.text | test("^1 2 3 4( [0-9]+){16}$"))' $T/j.json
check decode/json_no_summary test ! -s $T/j.log
pp-decode $cfg --random-init --prompt "1 2 3 4" -n 16 --temperature 0 >/dev/null 2>$T/sum.log
check decode/summary_line grep -qE "prompt 4 tokens, prefill [0-9.]+ tok/s; 16 tokens at [0-9.]+ tok/s" $T/sum.log

# --- text through a tokenizer -------------------------------------------------------------
if [ -f "$tok" ]; then
	big="model=llama-tiny model.vocab_size=32000 tokenizer=$tok"
	pp-decode $big --random-init --prompt "The quick brown fox" -n 8 --ignore-eos >$T/text.txt 2>$T/text.log
	check decode/text_continues_prompt grep -q "^The quick brown fox" $T/text.txt
	expect_fail decode/vocab_mismatch 2 "tokenizer .* has 32000 tokens but model.vocab_size=256" \
		pp-decode model=llama-tiny tokenizer=$tok --random-init --prompt hi
else
	skip decode/text "no $tok"
fi

# --- bad input ------------------------------------------------------------------------------
expect_fail decode/unknown_flag 2 "unknown argument '--frobnicate'" pp-decode $cfg --frobnicate
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
