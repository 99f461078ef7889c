#!/usr/bin/env bash
# Makes what tests/peft/check_peft.py checks with real PEFT + transformers (on the GPU machine,
# which has them): for each checkpoint layout of tests/fixtures/tiny-glm4, glmtune trains a
# LoRA adapter for 5 steps on the golden rows (evaluating on them at the end), exports it
# (fp32 and bf16) and a merged model (fp32 and the base's bf16). Output: OUT (default
# .device/peft, ignored by git), with the fixture files the check needs copied beside them.
# usage: tests/peft/make_artifacts.sh [GLMTUNE] [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
G=${1:-build/tool/glmtune}
OUT=${2:-.device/peft}
S=${GLM_FIXTURES:-tests/fixtures}
rm -rf "$OUT"
mkdir -p "$OUT"
cp "$S/make_fixtures.py" "$OUT/"
for layout in chatglm hf; do
    F="$S/tiny-glm4/$layout"
    D="$OUT/$layout"
    mkdir -p "$D"
    cp -r "$F" "$D/base"
    rm -rf "$D/base/adapter_init" "$D/base/golden.safetensors"
    python3 - "$F/golden.safetensors" "$D/golden.jsonl" <<'PY'
import json, sys
from safetensors.numpy import load_file
g = load_file(sys.argv[1])
with open(sys.argv[2], "w") as f:
    for b in range(g["input_ids"].shape[0]):
        off = 0
        for n in g["doc_lens"][b]:
            n = int(n)
            if n == 0:
                continue
            f.write(json.dumps({"input_ids": g["input_ids"][b, off:off + n].tolist(),
                                "labels": g["labels"][b, off:off + n].tolist()}) + "\n")
            off += n
PY
    $G tokenize --quiet --seq-len 48 -o "$D/shards" "$D/golden.jsonl"
    $G train --quiet --model "$F" --data "$D/shards" --eval-data "$D/shards" --output-dir "$D/run" \
        --lora-target all --lora-rank 4 --lora-alpha 8 --lora-dropout 0 --learning-rate 5e-3 \
        --per-device-train-batch-size 2 --max-steps 5 --eval-steps 5 --logging-steps 1 --seed 3
    $G export-adapter --checkpoint "$D/run" -o "$D/adapter"
    $G export-adapter --checkpoint "$D/run" --dtype bf16 -o "$D/adapter-bf16"
    $G export-adapter --checkpoint "$D/run" --merge --dtype fp32 -o "$D/merged"
    $G export-adapter --checkpoint "$D/run" --merge -o "$D/merged-bf16"
    grep '"eval_loss"' "$D/run/metrics.jsonl" | tail -1 > "$D/eval.json"
    rm -rf "$D/run" "$D/shards"
done
du -sh "$OUT"
