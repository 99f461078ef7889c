#!/bin/bash
# tests/gpu/perf.sh: the speed benchmarks (glmtune bench against the peers), on the GPU machine with .device/gpu carried
# (made by tests/gpu/stage.sh here), in one command so every number comes from one machine and
# one run. Stages (environment, 1 = on):
#   GLM_MODEL_TEST  test_cuda_model first (the model on the GPU against the CPU, final kernels)
#   GLM_KERNELS     bench_cuda: one benchmark per kernel family (tests/bench/bench_cuda.c)
#   GLM_SEQS        glmtune bench at these lengths, planner's choice, 3 timed steps (default 8192)
#   GLM_VARIANTS    8192 with full checkpointing; 4096 and 8192 with --max-gpu-memory 22
#   GLM_LONG_SEQS   glmtune bench at these lengths, one untimed-warm-up-free step each
#   GLM_PEER        ../shared/bench/hf_bench.py (transformers + PEFT, same configuration,
#                   checkpointed) at GLM_PEER_SEQS (default 8192)
# Writes $OUT/perf.md (every table) and logs; prints perf.md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pre=$root/.device/gpu
out=${OUT:-/tmp/glm-perf}
mkdir -p "$out"
. "$root/tests/gpu/env.sh" # LD_LIBRARY_PATH: staged libraries, CUDA, cuDNN / NCCL from the wheels
export GLM_FIXTURES=$root/tests/fixtures # the test data (tracked, so it travels with the working tree)
G=$pre/bin/glmtune
md=$out/perf.md
section() { printf '\n## %s\n\n' "$1" >>"$md"; }
{
  echo "# glmtune speed on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ); commit measured: $(cat "$pre/COMMIT" 2>/dev/null || echo unknown);"\
       "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
} >"$md"
if [ "${GLM_MODEL_TEST:-0}" = 1 ]; then
  timeout 150 "$pre/bin/test_cuda_model" >"$out/cuda_model.log" 2>&1
  section "test_cuda_model (exit $?)"
  grep -E "rel err|passed" "$out/cuda_model.log" | sed 's/^/    /' >>"$md"
fi
if [ "${GLM_KERNELS:-1}" = 1 ]; then
  section "Kernels (tests/bench/bench_cuda.c)"
  timeout 120 "$pre/bin/bench_cuda" 2>&1 | tee "$out/bench_cuda.log" | grep -v '^bench_cuda on' >>"$md"
fi
if [ -n "${GLM_SEQS:-8192}" ]; then
  section "glmtune bench, the planner's choice"
  timeout ${GLM_BENCH_TIMEOUT:-200} "$G" bench --seq-len "${GLM_SEQS:-8192}" --steps 3 2>&1 | tee "$out/bench_auto.log" >>"$md"
fi
if [ "${GLM_VARIANTS:-0}" = 1 ]; then
  section "glmtune bench, 8192 tokens, --gradient-checkpointing full"
  timeout 60 "$G" bench --seq-len 8192 --gradient-checkpointing full --steps 3 2>&1 | tee "$out/bench_full.log" >>"$md"
  section "glmtune bench, --max-gpu-memory 22 (a 24 GB card)"
  timeout 80 "$G" bench --seq-len 4096,8192 --max-gpu-memory 22 --steps 3 2>&1 | tee "$out/bench_22.log" >>"$md"
fi
if [ -n "${GLM_LONG_SEQS:-}" ]; then
  section "glmtune bench, long sequences (one step each, no warm-up)"
  timeout ${GLM_LONG_TIMEOUT:-300} "$G" bench --seq-len "$GLM_LONG_SEQS" --warmup 0 --steps 1 2>&1 | tee "$out/bench_long.log" >>"$md"
fi
if [ "${GLM_PEER:-0}" = 1 ]; then
  section "transformers + PEFT (../shared/bench/hf_bench.py), checkpointed, same machine and command"
  echo '```' >>"$md"
  PYTHONUNBUFFERED=1 timeout ${GLM_PEER_TIMEOUT:-200} python3 "$pre/shared/bench/hf_bench.py" --seq "${GLM_PEER_SEQS:-8192}" --gc 1 \
      --steps 3 2>"$out/hf_bench.err" | tee "$out/hf_bench.jsonl" >>"$md"
  echo '```' >>"$md"
  tail -3 "$out/hf_bench.err"
fi
cat "$md"
