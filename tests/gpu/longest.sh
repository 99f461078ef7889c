#!/bin/bash
# tests/gpu/longest.sh: the longest row that trains per GPU memory budget (README "Memory: what
# fits where"), glmtune and its QLoRA peer in one command, on the GPU machine with .device/gpu
# carried (tests/gpu/stage.sh) and, for the peer, bitsandbytes unpacked under .whl/site (carried).
# Stages (environment; empty turns a stage off):
#   GLM_Q4_BUDGETS    glmtune bench --max-seq-len --quantization-bit 4 --max-gpu-memory LIST
#                     (default 12,16,22,40,80; 0 = the whole GPU)
#   GLM_BF16_BUDGETS  the same with the bf16 base (default 22)
#   GLM_MAX_STEP_S    --max-step-seconds: a longer step is shown by the memory proof, its time
#                     extrapolated and labelled so (default 120: the device's time is short)
#   GLM_PEER_BUDGETS  ../shared/bench/hf_bench.py --quant4 --budget-gib B (transformers + PEFT +
#                     bitsandbytes NF4 QLoRA) on the checkpoint `glmtune init-model --layout hf`
#                     writes here, at GLM_PEER_SEQS (default 4096,8192,16384), one timed step each
# Writes $OUT/longest.md (every table) and logs; prints longest.md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
out=${OUT:-/tmp/glm-longest}
mkdir -p "$out"
md=$out/longest.md
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
section() { printf '\n## %s\n\n' "$1" >>"$md"; }
{
  echo "# The longest row per memory budget on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ); commit measured: $(cat "$pre/COMMIT" 2>/dev/null || echo unknown);" \
       "host memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
} >"$md"
maxs=${GLM_MAX_STEP_S:-120}
if [ -n "${GLM_Q4_BUDGETS-12,16,22,40,80}" ]; then
  section "glmtune bench --max-seq-len --quantization-bit 4 (NF4, double quantization)"
  timeout ${GLM_Q4_TIMEOUT:-420} "$G" bench --max-seq-len --quantization-bit 4 \
      --max-gpu-memory "${GLM_Q4_BUDGETS-12,16,22,40,80}" --max-step-seconds "$maxs" 2>"$out/q4.err" | tee "$out/q4.log" >>"$md"
  echo "(exit $?)" >>"$md"; tail -3 "$out/q4.err"
fi
if [ -n "${GLM_BF16_BUDGETS-22}" ]; then
  section "glmtune bench --max-seq-len, bf16 base"
  timeout ${GLM_BF16_TIMEOUT:-300} "$G" bench --max-seq-len --max-gpu-memory "${GLM_BF16_BUDGETS-22}" \
      --max-step-seconds "$maxs" 2>"$out/bf16.err" | tee "$out/bf16.log" >>"$md"
  echo "(exit $?)" >>"$md"; tail -3 "$out/bf16.err"
fi
if [ -n "${GLM_PEER_BUDGETS:-}" ]; then
  section "transformers + PEFT + bitsandbytes QLoRA (hf_bench.py --quant4), same machine and command"
  export PYTHONPATH=$root/.whl/site${PYTHONPATH:+:$PYTHONPATH}
  "$G" init-model --config "$root/tests/fixtures/glm4-tokenizer/config.glm-4-9b-chat-1m.json" --layout hf \
      -o "$T/m9b-hf" --seed 1 2>"$out/init-hf.log" || { echo "init-model --layout hf failed" >>"$md"; tail -3 "$out/init-hf.log"; }
  echo '```' >>"$md"
  for b in ${GLM_PEER_BUDGETS//,/ }; do
    PYTHONUNBUFFERED=1 timeout ${GLM_PEER_TIMEOUT:-240} python3 "$pre/shared/bench/hf_bench.py" --model "$T/m9b-hf" --quant4 \
        --budget-gib "$b" --seq "${GLM_PEER_SEQS:-4096,8192,16384}" --gc 1 --steps 1 2>"$out/peer-$b.err" |
      sed "s/^/budget $b GiB: /" | tee -a "$out/peer.jsonl" >>"$md"
    tail -2 "$out/peer-$b.err"
  done
  echo '```' >>"$md"
fi
cat "$md"
