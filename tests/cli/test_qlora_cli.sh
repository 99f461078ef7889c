#!/usr/bin/env bash
# QLoRA from the command line (CPU backend): --quantization-bit 4 trains on the 4-bit base (the
# log says so, the loss is not the bf16 base's, resume continues it bit for bit), a LLaMA-Factory
# YAML's quantization_bit / quantization_type / double_quantization / quantization_method: bnb
# mean the same, other bit widths and methods are refused with the reason, the dry run counts the
# 4-bit bytes, and export-adapter --merge of a 4-bit run merges into the bf16 base with a note.
set -uo pipefail
G=${GLMTUNE:?}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/glmqlora.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
loss() { grep -o '"loss": *[0-9.e+-]*' "$1" | sed -n "${2}p" | grep -o '[0-9.e+-]*$'; }

"$G" init-model --config "$SRC/samples/model-config.json" --tokenizer "$SRC/samples/tokenizer" --seed 1 -o "$T/model" 2>/dev/null
"$G" tokenize --quiet --tokenizer "$SRC/samples/tokenizer" --seq-len 256 -o "$T/shards" "$SRC/samples/data/chat_messages.jsonl" 2>/dev/null
common=(--device cpu --model "$T/model" --data "$T/shards" --lora-rank 4 --max-steps 3 --save-steps 2 --logging-steps 1 --seed 3)
"$G" train "${common[@]}" --output-dir "$T/bf16" >"$T/bf16.log" 2>&1
"$G" train "${common[@]}" --output-dir "$T/q4" --quantization-bit 4 >"$T/q4.log" 2>&1; rc=$?
check "train --quantization-bit 4: exit 0 ($rc)" test $rc = 0
check "... the log names the 4-bit base" has "$T/q4.log" "quantized to nf4 with double quantization"
l16=$(loss "$T/bf16/metrics.jsonl" 1); l4=$(loss "$T/q4/metrics.jsonl" 1)
check "... its first loss ($l4) is not the bf16 base's ($l16)" test -n "$l4" -a "$l4" != "$l16"
"$G" train "${common[@]}" --output-dir "$T/q4" --quantization-bit 4 --resume-from-checkpoint >"$T/q4r.log" 2>&1
check "... resumed from checkpoint-2: step 3's loss as uninterrupted" test "$(loss "$T/q4/metrics.jsonl" 3)" = "$(grep -o '"loss": *[0-9.e+-]*' "$T/q4/metrics.jsonl" | tail -1 | grep -o '[0-9.e+-]*$')"
# fp4 without double quantization is another base again
"$G" train "${common[@]}" --output-dir "$T/fp4" --quantization-bit 4 --quantization-type fp4 --double-quantization false >"$T/fp4.log" 2>&1
check "--quantization-type fp4 --double-quantization false: named" has "$T/fp4.log" "quantized to fp4 while loading"
check "... another loss ($(loss "$T/fp4/metrics.jsonl" 1))" test "$(loss "$T/fp4/metrics.jsonl" 1)" != "$l4"
# a LLaMA-Factory YAML
cat >"$T/lf.yaml" <<YAML
model_name_or_path: $T/model
stage: sft
finetuning_type: lora
lora_rank: 4
quantization_bit: 4
quantization_method: bnb
quantization_type: nf4
double_quantization: true
max_steps: 1
output_dir: $T/lf
YAML
"$G" train --config "$T/lf.yaml" --device cpu --data "$T/shards" >"$T/lf.log" 2>&1; rc=$?
check "LLaMA-Factory YAML with quantization_bit: 4, quantization_method: bnb: exit 0 ($rc)" test $rc = 0
check "... trains the 4-bit base" has "$T/lf.log" "quantized to nf4 with double quantization"
"$G" train "${common[@]}" --output-dir "$T/q8" --quantization-bit 8 >"$T/q8.log" 2>&1; rc=$?
check "--quantization-bit 8: refused (exit 2: $rc), with the reason" test $rc = 2
check "... naming 4 as what glmtune offers" has "$T/q8.log" "quantizes the frozen base to 4 bits"
sed 's/quantization_method: bnb/quantization_method: gptq/' "$T/lf.yaml" >"$T/gptq.yaml"
"$G" train --config "$T/gptq.yaml" --device cpu --data "$T/shards" >"$T/gptq.log" 2>&1; rc=$?
check "quantization_method: gptq refused (exit $rc)" test $rc != 0
check "... saying bitsandbytes' format is the one read" has "$T/gptq.log" "bitsandbytes' 4-bit format only"
# the dry run counts 4-bit bytes
"$G" train --dry-run --quiet --model "$T/model" --seq-len 256 --device cuda --max-gpu-memory 1 --quantization-bit 4 >"$T/dry4" 2>&1
"$G" train --dry-run --quiet --model "$T/model" --seq-len 256 --device cuda --max-gpu-memory 1 >"$T/dry16" 2>&1
check "dry run: the 4-bit layers and their dequantization slot named" has "$T/dry4" "frozen linear layers in nf4"
# export: the adapter as any other; --merge into the bf16 base with a note
"$G" export-adapter --checkpoint "$T/q4" -o "$T/ad" >"$T/ad.log" 2>&1; rc=$?
check "export-adapter of a 4-bit run: exit 0 ($rc)" test $rc = 0 -a -f "$T/ad/adapter_model.safetensors"
"$G" export-adapter --checkpoint "$T/q4" --merge -o "$T/merged" >"$T/merged.log" 2>&1; rc=$?
check "export-adapter --merge of a 4-bit run: exit 0 ($rc)" test $rc = 0 -a -f "$T/merged/config.json"
check "... with a note that it merges into the bf16 base" has "$T/merged.log" "trained on a 4-bit (QLoRA) base; its adapter is merged into the bf16 weights"
"$G" export-adapter --checkpoint "$T/bf16" --merge -o "$T/merged16" >"$T/merged16.log" 2>&1
check "... no such note for a bf16 run" bash -c "! grep -q 'QLoRA' '$T/merged16.log'"
echo "test_qlora_cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
