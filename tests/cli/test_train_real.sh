#!/usr/bin/env bash
# Real input end to end: the real GLM-4 tokenizer over every file of tests/fixtures/corpora into shards,
# a tiny GLM-4-shaped model with the real vocabulary size (151552) and the real tokenizer, a few
# LoRA steps on the CPU (loss finite and logged, eval on the val split), checkpoint, export of a
# PEFT adapter (keys, shapes, config), and a merged model that loads like the base.
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
T=$(mktemp -d /tmp/glmreal.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }

# (the two llamafactory files its dataset_info.json does not name are inputs of their own: the folder
# gives only the registered ones)
$G tokenize --quiet --tokenizer "$F/glm4-tokenizer" --seq-len 512 --truncate --val-size 8 -o "$T/shards" "$F/corpora" \
    "$F/corpora/llamafactory/reason_tool_use_demo_50.jsonl" "$F/corpora/llamafactory/v1_sft_demo.jsonl" 2>"$T/tok.log"
check "tokenize the corpora" test -f "$T/shards/manifest.json"
cat > "$T/config.json" <<'JSON'
{"model_type": "chatglm", "hidden_size": 64, "num_layers": 2, "num_attention_heads": 4,
 "multi_query_group_num": 2, "kv_channels": 16, "ffn_hidden_size": 160, "padded_vocab_size": 151552,
 "layernorm_epsilon": 1.5625e-07, "rope_ratio": 1, "add_qkv_bias": true, "seq_length": 8192}
JSON
$G init-model --config "$T/config.json" --tokenizer "$F/glm4-tokenizer" --seed 3 -o "$T/model" 2>/dev/null
check "init-model with the real vocabulary" test -f "$T/model/model.safetensors" -a -f "$T/model/tokenizer.model"
$G train --quiet --device cpu --model "$T/model" --data "$T/shards" --eval-data "$T/shards" --output-dir "$T/run" \
    --lora-target all --lora-rank 8 --lora-alpha 16 --learning-rate 2e-3 --per-device-train-batch-size 2 \
    --max-steps 4 --logging-steps 1 --eval-steps 4 --save-steps 2 --save-total-limit 1 2>"$T/train.log"
check "train 4 steps (exit $?)" test -f "$T/run/metrics.jsonl"
check "4 logged steps with finite losses" test "$(grep -c '"loss": *[0-9]' "$T/run/metrics.jsonl")" = 4
check "eval loss logged" grep -q '"eval_loss"' "$T/run/metrics.jsonl"
check "save_total_limit 1 keeps only checkpoint-4" test -d "$T/run/checkpoint-4" -a ! -d "$T/run/checkpoint-2"
check "loss curve" test -s "$T/run/loss_curve.svg"
$G export-adapter --checkpoint "$T/run" -o "$T/adapter" 2>/dev/null
check "adapter exported" test -f "$T/adapter/adapter_model.safetensors" -a -f "$T/adapter/adapter_config.json"
check "adapter keys in the chatglm layout" grep -q 'base_model.model.transformer.encoder.layers.1.mlp.dense_4h_to_h.lora_B.weight' "$T/adapter/adapter_model.safetensors"
check "adapter config" grep -q '"peft_type": *"LORA"' "$T/adapter/adapter_config.json"
# evaluation runs without LoRA dropout (PEFT model.eval()): from the trained (nonzero) adapter and a
# negligible learning rate, the eval loss is the same with --lora-dropout 0.5 as with 0
for p in 0 0.5; do
  $G train --quiet --device cpu --model "$T/model" --data "$T/shards" --eval-data "$T/shards" --output-dir "$T/drop$p" \
      --init-adapter "$T/adapter" --lora-target all --lora-rank 8 --lora-alpha 16 --lora-dropout $p \
      --learning-rate 1e-30 --per-device-train-batch-size 2 --max-steps 1 --eval-steps 1 2>/dev/null
done
e0=$(grep -o '"eval_loss": *[^,}]*' "$T/drop0/metrics.jsonl"); e5=$(grep -o '"eval_loss": *[^,}]*' "$T/drop0.5/metrics.jsonl")
# (within 1e-9, not bit for bit: the two processes may multiply with different OpenBLAS thread
# counts, kernels/cpu/blas_loader.c, and so round differently; dropout left on would move it ~1e-2)
check "eval loss without LoRA dropout ($e0 vs $e5)" python3 -c '
import sys; a, b = (float(x.split(":")[1]) for x in sys.argv[1:3]); sys.exit(abs(a - b) > 1e-9 * abs(b))' "$e0" "$e5"
$G export-adapter --checkpoint "$T/run" --merge --dtype bf16 -o "$T/merged" 2>/dev/null
check "merged model with config and tokenizer" test -f "$T/merged/model.safetensors" -a -f "$T/merged/config.json" -a -f "$T/merged/tokenizer.model"
# the merged model is a valid base for another run (loads, trains)
$G train --quiet --device cpu --model "$T/merged" --data "$T/shards" --output-dir "$T/run2" --max-steps 1 --lora-rank 2 2>/dev/null
check "the merged model loads and trains" test -d "$T/run2/checkpoint-1"
# shards made with another tokenizer are refused before training
printf '{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}\n' > "$T/pre.jsonl"
$G tokenize --quiet --seq-len 512 -o "$T/pre" "$T/pre.jsonl" 2>/dev/null
$G train --quiet --device cpu --model "$T/model" --data "$T/pre" --output-dir "$T/run3" --max-steps 1 --seq-len 256 2>"$T/e.log"
check "a seq_len the shards do not have is an error" grep -q "rows of 512 tokens" "$T/e.log"
echo "test_train_real: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
