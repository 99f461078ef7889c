#!/usr/bin/env bash
# The FP8 base from the command line (CPU backend, which emulates FP8): --base-dtype fp8 trains (the
# log says the CPU emulates it), its losses differ from the bf16 base's a little (first step within
# 1%, not equal), resume continues it bit for bit, the adapter exports as any other and --merge
# notes the FP8 base; --base-dtype fp8 with --quantization-bit 4 or --shard-base, an unknown dtype and a model whose
# matrices FP8 tensor cores cannot take are refused with the reason; the dry run counts a byte per
# weight. (The sample config's FFN width, 344, is not a multiple of 16: the model here has 352.)
set -uo pipefail
G=${GLMTUNE:?}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/glmfp8.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
loss() { grep -o '"loss": *[0-9.e+-]*' "$1" | sed -n "${2}p" | grep -o '[0-9.e+-]*$'; }

sed 's/"ffn_hidden_size": 344/"ffn_hidden_size": 352/' "$SRC/samples/model-config.json" >"$T/cfg.json"
"$G" init-model --config "$T/cfg.json" --tokenizer "$SRC/samples/tokenizer" --seed 1 -o "$T/model" 2>/dev/null
"$G" tokenize --quiet --tokenizer "$SRC/samples/tokenizer" --seq-len 256 -o "$T/shards" "$SRC/samples/data/chat_messages.jsonl" 2>/dev/null
common=(--device cpu --model "$T/model" --data "$T/shards" --lora-rank 4 --max-steps 3 --save-steps 2 --logging-steps 1 --seed 3)
"$G" train "${common[@]}" --output-dir "$T/bf16" >"$T/bf16.log" 2>&1
"$G" train "${common[@]}" --output-dir "$T/fp8" --base-dtype fp8 >"$T/fp8.log" 2>&1; rc=$?
check "train --base-dtype fp8: exit 0 ($rc)" test $rc = 0
check "... the log says the CPU emulates the FP8 GEMMs" has "$T/fp8.log" "quantized to FP8 E4M3 (a scale per output channel) while loading, their GEMMs emulated on the CPU"
l16=$(loss "$T/bf16/metrics.jsonl" 1); l8=$(loss "$T/fp8/metrics.jsonl" 1)
check "... its first loss ($l8) is not the bf16 base's ($l16)" test -n "$l8" -a "$l8" != "$l16"
check "... but within 1% of it" awk -v a="$l8" -v b="$l16" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.01 * b) }'
"$G" train "${common[@]}" --output-dir "$T/fp8" --base-dtype fp8 --resume-from-checkpoint >"$T/fp8r.log" 2>&1
check "... resumed from checkpoint-2: step 3's loss as uninterrupted" test "$(loss "$T/fp8/metrics.jsonl" 3)" = "$(grep -o '"loss": *[0-9.e+-]*' "$T/fp8/metrics.jsonl" | tail -1 | grep -o '[0-9.e+-]*$')"
# refusals
"$G" train "${common[@]}" --output-dir "$T/x" --base-dtype fp8 --quantization-bit 4 >"$T/both.log" 2>&1; rc=$?
check "--base-dtype fp8 --quantization-bit 4: refused (exit 2: $rc)" test $rc = 2
check "... saying both set the base's format" has "$T/both.log" "both set the frozen base's format"
"$G" train "${common[@]}" --output-dir "$T/x" --base-dtype fp16 >"$T/fp16.log" 2>&1; rc=$?
check "--base-dtype fp16: refused (exit 2: $rc)" test $rc = 2 && check "... naming the choices" has "$T/fp16.log" "expected bf16 or fp8"
"$G" train "${common[@]}" --output-dir "$T/x" --base-dtype fp8 --shard-base >"$T/shard.log" 2>&1; rc=$?
check "--base-dtype fp8 --shard-base: refused (exit 2: $rc)" test $rc = 2 && check "... saying so" has "$T/shard.log" "the fp8 base is not sharded yet"
"$G" init-model --config "$SRC/samples/model-config.json" --tokenizer "$SRC/samples/tokenizer" --seed 1 -o "$T/odd" 2>/dev/null
"$G" train --device cpu --model "$T/odd" --data "$T/shards" --max-steps 1 --output-dir "$T/y" --base-dtype fp8 >"$T/odd.log" 2>&1; rc=$?
check "an FFN width of 344 with fp8: refused (exit $rc)" test $rc != 0
check "... naming the dimension and the rule" has "$T/odd.log" "matrix dimension 344 is not a multiple of 16"
check "... with the way out" has "$T/odd.log" "hint: --base-dtype bf16"
"$G" train --dry-run --quiet --model "$T/odd" --seq-len 256 --device cpu --base-dtype fp8 >"$T/oddry.log" 2>&1; rc=$?
check "the dry run refuses it as the run does (exit 1: $rc)" test $rc = 1
check "... with the same message" has "$T/oddry.log" "matrix dimension 344 is not a multiple of 16"
mkdir -p "$T/m9b" && cp "$SRC/tests/fixtures/glm4-tokenizer/config.glm-4-9b-chat-1m.json" "$T/m9b/config.json"
"$G" train --dry-run --quiet --model "$T/m9b" --seq-len 8192 --device cuda --max-gpu-memory 12 --base-dtype fp8 >"$T/dry8big" 2>&1
check "an fp8 plan that does not fit: the 4-bit hint says it replaces fp8" has "$T/dry8big" "--quantization-bit 4 (QLoRA) instead of --base-dtype fp8"
# the dry run counts a byte per weight and the transposed layer
"$G" train --dry-run --quiet --model "$T/model" --seq-len 256 --device cuda --max-gpu-memory 1 --base-dtype fp8 >"$T/dry8" 2>&1
check "dry run: the FP8 layers named" has "$T/dry8" "frozen linear layers in FP8 E4M3"
# export: the adapter as any other; --merge into the bf16 base with a note
"$G" export-adapter --checkpoint "$T/fp8" -o "$T/ad" >"$T/ad.log" 2>&1; rc=$?
check "export-adapter of an fp8 run: exit 0 ($rc)" test $rc = 0 -a -f "$T/ad/adapter_model.safetensors"
"$G" export-adapter --checkpoint "$T/fp8" --merge -o "$T/merged" >"$T/merged.log" 2>&1; rc=$?
check "export-adapter --merge of an fp8 run: exit 0 ($rc)" test $rc = 0 -a -f "$T/merged/config.json"
check "... with a note that it merges into the bf16 base" has "$T/merged.log" "trained on an FP8 base; its adapter is merged into the bf16 weights"
# the adapter loads like any other: a bf16 run initialised from it starts from its weights
"$G" train "${common[@]}" --max-steps 1 --output-dir "$T/from" --init-adapter "$T/ad" >"$T/from.log" 2>&1; rc=$?
check "an fp8 run's adapter initialises a bf16 run (exit $rc)" test $rc = 0
echo "test_fp8_cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
