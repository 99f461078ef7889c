#!/usr/bin/env bash
# samples/make_tokenizer.sh: trains the demo's small SentencePiece tokenizer on samples/data.
#
# Writes samples/tokenizer/tokenizer.model (BPE, byte fallback, identity normalisation, no
# dummy prefix, GLM-4's special tokens as user-defined symbols) and
# samples/tokenizer/tokenizer_config.json (added_tokens_decoder with the model's ids of those
# symbols, and chat_template = samples/tokenizer/chat_template.jinja, the GLM-4 format written
# for glmtune). Needs spm_train, spm_export_vocab and jq. The outputs are committed; rerun after
# changing samples/data (python3 samples/make_data.py) or the template.
# Usage: samples/make_tokenizer.sh [vocab_size]     (default 2000)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="$here/data"
out="$here/tokenizer"
vocab="${1:-2000}"
specials=('<|endoftext|>' '[MASK]' '[gMASK]' '[sMASK]' '<sop>' '<eop>' '<|system|>' '<|user|>' '<|assistant|>' '<|observation|>')

for tool in spm_train spm_export_vocab jq; do
  command -v "$tool" >/dev/null || { echo "make_tokenizer.sh: $tool not found (apt-get install sentencepiece jq)" >&2; exit 1; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The training text: every string of the three sample files, and the template's own text.
{
  jq -r '.messages[] | (.content // empty), (.metadata // empty)' "$data/chat_messages.jsonl"
  # tool definitions as the template shows them: JSON indented by 4 spaces
  jq --indent 4 '.messages[] | .tools // empty | .[] | .function' "$data/chat_messages.jsonl"
  jq -r '.[] | (.system // empty), (.conversations[].value)' "$data/sharegpt.json"
  jq -r '.[] | .instruction, .input, .output' "$data/alpaca.json"
  grep -v '[{}]' "$out/chat_template.jinja" || true
} | grep -v '^$' > "$work/corpus.txt"

syms="$(IFS=,; echo "${specials[*]}")"
spm_train --input="$work/corpus.txt" --model_prefix="$work/sp" --vocab_size="$vocab" \
  --model_type=bpe --byte_fallback=true --add_dummy_prefix=false \
  --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --split_digits=true --character_coverage=1.0 \
  --user_defined_symbols="$syms" --unk_id=0 --bos_id=-1 --eos_id=-1 --pad_id=-1 \
  --max_sentence_length=16384 --num_threads=2 --minloglevel=1 >"$work/train.log" 2>&1 \
  || { tail -20 "$work/train.log" >&2; exit 1; }
spm_export_vocab --model="$work/sp.model" --output="$work/vocab.tsv"

# added_tokens_decoder: {"<id>": {"content": ..., "special": true, ...}} with the model's ids.
decoder='{}'
for s in "${specials[@]}"; do
  id="$(awk -F'\t' -v s="$s" '$1 == s { print NR - 1; exit }' "$work/vocab.tsv")"
  [ -n "$id" ] || { echo "make_tokenizer.sh: $s is not in the trained vocabulary" >&2; exit 1; }
  decoder="$(jq -c --arg id "$id" --arg s "$s" \
    '. + {($id): {content: $s, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true}}' <<<"$decoder")"
done
n="$(wc -l < "$work/vocab.tsv")"

mkdir -p "$out"
cp "$work/sp.model" "$out/tokenizer.model.tmp" && mv "$out/tokenizer.model.tmp" "$out/tokenizer.model"
jq -n --argjson dec "$decoder" --rawfile tpl "$out/chat_template.jinja" '{
  added_tokens_decoder: $dec,
  chat_template: $tpl,
  eos_token: "<|endoftext|>",
  pad_token: "<|endoftext|>",
  model_max_length: 2048,
  clean_up_tokenization_spaces: false,
  tokenizer_class: "glmtune-sample (SentencePiece BPE)"
}' > "$out/tokenizer_config.json.tmp"
mv "$out/tokenizer_config.json.tmp" "$out/tokenizer_config.json"
echo "make_tokenizer.sh: $out/tokenizer.model ($n pieces), $out/tokenizer_config.json"
