#!/usr/bin/env bash
# The main job, end to end on the embedded sample, on a fresh Debian machine:
#   1. install what is missing (apt-get) and build (CMake),
#   2. tokenize samples/data (three corpus layouts) with the sample tokenizer into packed shards,
#   3. make a tiny random GLM-4-shaped model (glmtune init-model),
#   4. LoRA-train it for a few dozen steps (the loss falls), on the GPU when there is one (the
#      default --device auto), else on the CPU,
#   5. export the adapter in PEFT format.
# Outputs go to build/sample/ (override with OUT=...).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/deps.sh
glm_install_deps
mkdir -p build
glm_build build
G=build/tool/glmtune
OUT=${OUT:-build/sample}
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== tokenize"
$G tokenize --tokenizer samples/tokenizer --seq-len 256 --val-size 0.05 --report "$OUT/tokenize-report.json" \
    -o "$OUT/shards" samples/data
$G inspect "$OUT/shards" | tail -n 5

echo "== init-model"
$G init-model --config samples/model-config.json --tokenizer samples/tokenizer --seed 1 -o "$OUT/model"

echo "== train ($(if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then echo "GPU: --device auto picks it"; else echo "no GPU: CPU backend"; fi))"
$G train --config samples/train.yaml --model "$OUT/model" --data "$OUT/shards" --eval-data "$OUT/shards" \
    --output-dir "$OUT/run"

echo "== export-adapter"
$G export-adapter --checkpoint "$OUT/run" -o "$OUT/adapter"
ls -l "$OUT/adapter"

# the loss must clearly fall: mean of the last 5 logged losses vs the first logged loss
python_free_check() {
    awk -F'"loss": ?' 'NF > 1 { split($2, a, /[,}]/); l[n++] = a[1] }
        END { if (n < 10) { print "too few logged steps"; exit 1 }
              s = 0; for (i = n - 5; i < n; i++) s += l[i]; s /= 5
              printf "loss: first %.4f, mean of last 5 %.4f\n", l[0], s
              if (!(s < l[0] - 0.5)) { print "the loss did not fall"; exit 1 } }' "$OUT/run/metrics.jsonl"
}
python_free_check
echo "sample run OK: shards $OUT/shards, model $OUT/model, run $OUT/run (loss_curve.svg), adapter $OUT/adapter"
