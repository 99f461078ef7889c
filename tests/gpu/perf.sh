#!/bin/bash
# tests/gpu/perf.sh: the speed benchmarks, run on the GPU machine with .device/gpu carried (made
# by tests/gpu/stage.sh here). In one command, so every number comes from one machine and run:
#   1. bench_cuda: one small benchmark per kernel family (tests/bench/bench_cuda.c);
#   2. glmtune bench: the GLM-4-9B-Chat-1M shape, LoRA r=8 on every linear layer, micro-batch 1,
#      one document per step, at the sequence lengths of $GLM_SEQS (default 8192), with the
#      planner's choice, and at 8192 with full checkpointing and with --max-gpu-memory 22;
#   3. with GLM_PEER=1: ../shared/bench/hf_bench.py (transformers + PEFT, the same configuration)
#      at $GLM_PEER_SEQS (default 8192), checkpointed.
# Writes $OUT/perf.md (the tables), $OUT/*.jsonl and logs; prints the tables. Usage on the GPU
# machine: bash tests/gpu/perf.sh [families for bench_cuda]
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pre=$root/.device/gpu
out=${OUT:-/tmp/glm-perf}
mkdir -p "$out"
export LD_LIBRARY_PATH=$pre/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/lib/python3*/dist-packages/nvidia/{nccl,cublas,cu13}/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/{nccl,cublas,cu13}/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
G=$pre/bin/glmtune
md=$out/perf.md
{
  echo "# glmtune speed on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ); commit: $(cat "$pre/COMMIT" 2>/dev/null || echo unknown)"
  echo
} >"$md"
if [ "${GLM_KERNELS:-1}" = 1 ]; then
  echo "## Kernels (tests/bench/bench_cuda.c)" >>"$md"; echo >>"$md"
  timeout 240 "$pre/bin/bench_cuda" "$@" 2>&1 | tee "$out/bench_cuda.log" | grep -v '^bench_cuda on' >>"$md"
  echo >>"$md"
fi
seqs=${GLM_SEQS:-8192}
echo "## glmtune bench (planner's choice)" >>"$md"; echo >>"$md"
timeout ${GLM_BENCH_TIMEOUT:-300} "$G" bench --seq-len "$seqs" --steps ${GLM_STEPS:-3} 2>&1 | tee "$out/bench_auto.log" >>"$md"
echo >>"$md"
if [ "${GLM_VARIANTS:-1}" = 1 ]; then
  echo "## glmtune bench, 8192 tokens, full checkpointing" >>"$md"; echo >>"$md"
  timeout 120 "$G" bench --seq-len 8192 --gradient-checkpointing full --steps 3 2>&1 | tee "$out/bench_full.log" >>"$md"
  echo >>"$md"
  echo "## glmtune bench, --max-gpu-memory 22 (a 24 GB card), 4096 and 8192 tokens" >>"$md"; echo >>"$md"
  timeout 120 "$G" bench --seq-len 4096,8192 --max-gpu-memory 22 --steps 3 2>&1 | tee "$out/bench_22.log" >>"$md"
  echo >>"$md"
fi
if [ "${GLM_PEER:-0}" = 1 ]; then
  echo "## transformers + PEFT (../shared/bench/hf_bench.py), same machine, same command" >>"$md"; echo >>"$md"
  echo '```' >>"$md"
  PYTHONUNBUFFERED=1 timeout ${GLM_PEER_TIMEOUT:-300} python3 "$pre/shared/bench/hf_bench.py" --seq "${GLM_PEER_SEQS:-8192}" --gc 1 --steps 3 \
      2>"$out/hf_bench.err" | tee "$out/hf_bench.jsonl" >>"$md"
  echo '```' >>"$md"
  tail -3 "$out/hf_bench.err"
fi
cat "$md"
