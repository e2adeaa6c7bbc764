#!/usr/bin/env bash
# The fine-tuning loop on a real model: SmolLM2-135M-Instruct imported from
# its GGUF file, LoRA (rank 8 on every linear layer) on a small instruction
# set written here, whose answers all take one unusual style ("Arr matey!
# ... Yo ho ho!"), tokenized as chat (the assistant's turns alone count).
#   - the held-out conversations' loss over the assistant's tokens falls
#     (pp-train's evaluation on val_data);
#   - pp-decode --chat of the LoRA run answers a new question, of another
#     kind, in that style, and the base model does not;
#   - the merged export (--merge-lora, imported back) decodes the same
#     tokens as the LoRA checkpoint, and pp-eval scores both alike.
. "$(dirname "$0")/../tools/lib.sh"
if ! G=$(cd "$PP_ROOT" && scripts/fetch-smollm2.sh 2>$T/fetch.log); then
	skip lora_smollm2 "SmolLM2 unavailable: $(tail -n 1 $T/fetch.log)"
	exit 0
fi
pp-ckpt import --format gguf "$G" -o $T/smol >/dev/null 2>$T/import.log ||
	{ fail lora_smollm2/import "$(tail -n 2 $T/import.log)"; exit 1; }
tok=$T/smol/tokenizer/tokenizer.json
/usr/bin/python3 "$PP_ROOT/tests/tools/style_chat.py" $T
for s in train val; do
	pp-tokenize --tokenizer $tok --format jsonl -o $T/$s.h5 $T/$s.jsonl >/dev/null 2>>$T/tok.log ||
		{ fail lora_smollm2/tokenize "$(tail -n 2 $T/tok.log)"; exit 1; }
done
pp-ckpt info $T/smol --config >$T/smol.json
common="--cfg $T/smol.json load_parameters_path=$T/smol data=$T/train.h5 val_data=$T/val.h5 tokenizer=$tok
	seq_len=96 global_batch=4 microbatch=2 microbatches=2 lr_schedule.type=constant
	lr_schedule.warmup_steps=0 lora.rank=8 lora.alpha=16 eval_batches=4 log_period=4"
pp-train $common run_dir=$T/lora steps=12 lr=2e-3 eval_interval=12 --quiet >/dev/null 2>$T/train.log ||
	{ fail lora_smollm2/train "$(tail -n 2 $T/train.log)"; exit 1; }
# the base's held-out loss: the adapters after one step of a vanishing rate (B = 0 at the start)
pp-train $common run_dir=$T/base steps=1 lr=1e-12 eval_interval=1 --quiet >/dev/null 2>$T/base.log ||
	{ fail lora_smollm2/base_loss "$(tail -n 2 $T/base.log)"; exit 1; }
# the held-out conversations' loss over the assistant's tokens (the mask's), as pp-train's evaluation gives it
val() { /usr/bin/python3 -c "import json,sys; print([json.loads(l)['val_loss'] for l in open(sys.argv[1]) if 'val_loss' in l][-1])" "$1/metrics.jsonl"; }
before=$(val $T/base) after=$(val $T/lora)
echo "  held-out loss (assistant tokens): base $before, LoRA $after"
check lora_smollm2/held_out_loss_falls awk "BEGIN { exit !($after < $before / 2) }"
ask() { echo "What color is the sky on a clear day?" | pp-decode --ckpt "$1" --chat --temperature 0 -n 16 2>/dev/null | tail -n 1; }
ask $T/lora >$T/lora.txt
ask $T/smol >$T/base.txt
echo "  LoRA: $(cat $T/lora.txt)"
echo "  base: $(cat $T/base.txt)"
check lora_smollm2/answers_in_style grep -q "^Arr matey!" $T/lora.txt
check lora_smollm2/base_does_not eval '! grep -qi "matey" $T/base.txt'
pp-ckpt export $T/lora --format safetensors --merge-lora -o $T/merged >/dev/null 2>$T/merge.log &&
	pp-ckpt import --format safetensors $T/merged -o $T/merged.run >/dev/null 2>>$T/merge.log ||
	fail lora_smollm2/merge "$(tail -n 2 $T/merge.log)"
ask $T/merged.run >$T/merged.txt
echo "  merged: $(cat $T/merged.txt)"
check lora_smollm2/merged_decodes_the_same eval '[ -s $T/merged.txt ] && cmp -s $T/lora.txt $T/merged.txt'
ev() { pp-eval --ckpt "$1" --data $T/val.h5 --json 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['loss'])"; }
check lora_smollm2/eval_lora_equals_merged eval 'a=$(ev $T/lora) b=$(ev $T/merged.run); awk "BEGIN { d = $a - $b; exit !(d < 1e-4 && d > -1e-4) }"'
