#!/bin/bash
# tests/gpu/multi.sh: data parallel on a machine with 2 (or more) GPUs, with the
# binaries staged by tests/gpu/stage.sh (.device/gpu carried, as for tests/gpu/run.sh):
#   1. equivalence on CUDA: the tiny GLM-4 fixture, 1 GPU x micro-batch 2 against --gpus 2 x
#      micro-batch 1, and against --gpus 2 --shard-base: the 3 steps' losses and the first step's
#      gradients within 1e-2 relative (bf16 activations: B=2 and B=1 run GEMMs of other shapes,
#      so the roundings differ; the CPU backend's test_train_dp holds the same equivalence at 1e-6);
#   2. speed: a random GLM-4-9B-Chat-1M-shaped checkpoint (glmtune init-model, ~19 GB on disk),
#      rows of 8192 tokens, the tokens/s of the last logging window on 1 GPU and on --gpus 2:
#      the issue asks for >= 1.95x (torchrun + PEFT: 1.98x);
#   3. --shard-base --max-gpu-memory 22 on --gpus 2 at 8k: trains, and the GPUs' peak memory
#      (nvidia-smi, every 0.5 s) stays below 24 GB.
# Prints a table; exit 1 on any failure. Usage (on the GPU machine): tests/gpu/multi.sh
# (GLM_MULTI_STEPS: optimizer steps of the speed runs, default 12; GLM_MULTI_TMP: a directory with
# room for the 9B checkpoint, default mktemp -d).
# WRITTEN AND SYNTAX-CHECKED (bash -n), NOT YET RUN: no multi-GPU machine was lent when it was
# written.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 2 ] || { echo "SKIPPED: $ngpu GPU(s) here; data parallel needs 2"; exit 77; }
T=${GLM_MULTI_TMP:-$(mktemp -d)}
steps=${GLM_MULTI_STEPS:-12}
fail=0
row() { printf '%-10s %-52s %-6s %s\n' "$1" "$2" "$3" "$4"; [ "$3" = ok ] || fail=1; }
loss_of() { grep "\"step\": *$2," "$1/metrics.jsonl" | grep -o '"loss": *[0-9.e+-]*' | sed 's/.*: *//'; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.2e", (b != 0 ? d / b : 1) }'; }
okif() { awk -v r="$1" -v t="$2" 'BEGIN { print (r + 0 < t + 0) ? "ok" : "FAIL" }'; }
grads_rel() {
  python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys()
num = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in b)
den = sum(float(np.sum(b[k].astype(np.float64) ** 2)) for k in b)
print(f"{(num / den) ** 0.5:.3e}")
PY
}

# ---- 1. equivalence on CUDA (tiny fixture, the staged golden shards)
base=$pre/shared/fixtures/tiny-glm4/chatglm
flags="--quiet --device cuda --model $base --init-adapter $base/adapter_init --data $pre/cli/chatglm-shards --lora-target all
  --lora-rank 4 --lora-alpha 8 --learning-rate 1e-3 --lr-scheduler-type constant --max-steps 3 --logging-steps 1 --seed 3"
"$G" train $flags --per-device-train-batch-size 2 --output-dir "$T/eq1" --dump-grads "$T/eq1.st" 2>"$T/eq1.log" \
  || row equiv "1 GPU x 2" FAIL "$(tail -2 "$T/eq1.log")"
for v in "dp:" "shard:--shard-base"; do
  name=${v%%:*}; extra=${v#*:}
  if ! "$G" train $flags --gpus 2 --per-device-train-batch-size 1 $extra --output-dir "$T/eq-$name" \
       --dump-grads "$T/eq-$name.st" 2>"$T/eq-$name.log"; then
    row equiv "--gpus 2 x 1 $extra" FAIL "$(tail -3 "$T/eq-$name.log")"; continue
  fi
  for s in 1 2 3; do
    r=$(relerr "$(loss_of "$T/eq-$name" $s)" "$(loss_of "$T/eq1" $s)")
    row equiv "step $s loss: --gpus 2 x 1 $extra vs 1 GPU x 2" "$(okif "$r" 1e-2)" "rel $r"
  done
  r=$(grads_rel "$T/eq-$name.st" "$T/eq1.st")
  row equiv "step 1 gradients: --gpus 2 x 1 $extra vs 1 GPU x 2" "$(okif "$r" 1e-2)" "rel $r"
  n=$(wc -l <"$T/eq-$name/metrics.jsonl")
  row equiv "only rank 0 writes metrics ($extra)" "$([ "$n" = 3 ] && echo ok || echo FAIL)" "$n lines"
done

# ---- 2. speed at 8k: 1 GPU vs 2 GPUs, the 9B shape
cfg=$pre/shared/glm4-tokenizer/config.glm-4-9b-chat-1m.json
[ -f "$cfg" ] || cfg=$root/../shared/glm4-tokenizer/config.glm-4-9b-chat-1m.json
if [ ! -f "$T/m9b/config.json" ]; then
  "$G" init-model --config "$cfg" -o "$T/m9b" --seed 1 2>"$T/init.log" || row speed "init-model 9B" FAIL "$(tail -2 "$T/init.log")"
fi
awk 'BEGIN { srand(7); for (r = 0; r < 64; r++) { printf "{\"input_ids\": ["; for (i = 0; i < 8192; i++) printf "%s%d", i ? ", " : "", int(rand() * 151000); printf "], \"labels\": ["; for (i = 0; i < 8192; i++) printf "%s%d", i ? ", " : "", i ? int(rand() * 151000) : -100; print "]}" } }' >"$T/rows8k.jsonl"
# (labels random: the loss value does not matter here, only the work)
"$G" tokenize --quiet --seq-len 8192 -o "$T/s8k" "$T/rows8k.jsonl" 2>"$T/tok.log" || row speed "tokenize 8k rows" FAIL "$(tail -2 "$T/tok.log")"
speed() { # extra flags...; prints the last window's tokens/s
  local out=$T/speed-$RANDOM
  "$G" train --quiet --model "$T/m9b" --data "$T/s8k" --output-dir "$out" --max-steps "$steps" --logging-steps $((steps / 2)) \
    --save-steps 1000000 --lora-rank 8 --device cuda "$@" 2>"$out.log" || { tail -3 "$out.log" >&2; echo 0; return; }
  tail -1 "$out/metrics.jsonl" | grep -o '"tokens_per_second": *[0-9.e+-]*' | sed 's/.*: *//'
}
t1=$(speed --per-device-train-batch-size 1)
t2=$(speed --per-device-train-batch-size 1 --gpus 2)
ratio=$(awk -v a="$t2" -v b="$t1" 'BEGIN { printf "%.3f", b > 0 ? a / b : 0 }')
row speed "9B at 8k: 1 GPU tokens/s" "$(awk -v t="$t1" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" "$t1"
row speed "9B at 8k: --gpus 2 tokens/s (total)" "$(awk -v t="$t2" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" "$t2"
row speed "speed-up of 2 GPUs (goal >= 1.95)" "$(awk -v r="$ratio" 'BEGIN { print r >= 1.95 ? "ok" : "FAIL" }')" "${ratio}x"

# ---- 3. --shard-base --max-gpu-memory 22 on 2 GPUs at 8k
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$T/mem.csv" 2>/dev/null &
mon=$!
ts=$(speed --per-device-train-batch-size 1 --gpus 2 --shard-base --max-gpu-memory 22)
kill "$mon" 2>/dev/null
peak=$(sort -n "$T/mem.csv" | tail -1)
row shard "--shard-base --max-gpu-memory 22, --gpus 2, 8k: trains" "$(awk -v t="$ts" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" "$ts tokens/s"
row shard "... peak GPU memory below 24 GB (nvidia-smi)" "$(awk -v p="${peak:-0}" 'BEGIN { print (p > 0 && p < 24 * 1024) ? "ok" : "FAIL" }')" "${peak:-?} MiB"
echo "outputs in $T"
exit $fail
