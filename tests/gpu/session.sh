#!/bin/bash
# tests/gpu/session.sh: one device call's worth of the GPU check, by name (the device lends 10
# minutes a call and 30 a session; docs/gpu-check.md). On the GPU machine with .device/gpu carried
# (tests/gpu/stage.sh here). Logs and tables under $OUT.
#   check    tests/gpu/run.sh parts ops, attention, model (every CUDA op against the CPU op, both
#            attention implementations, the model on both checkpoint layouts and on glmtune's
#            attention kernels' lean backward), then glmtune bench at 8k and 32k, bf16 and fp8 bases
#   multi    tests/gpu/run.sh parts fp8, cli, multi, cp, then the longest 4-bit row at 16 GiB by a
#            real step
#   long     the longest 4-bit row at 22 GiB by a real step, then the bf16 base's longest row on the
#            whole GPU by the memory proof
#   speed    the FP8 base's test (test_fp8_ops), its GEMM part by part (bench_cuda fp8), its 9B
#            fidelity on the GPU, then glmtune bench at 8k and 32k with the bf16 and fp8 bases and
#            both peers (hf_bench.py, hf_liger_bench.py: liger-kernel unpacked under .whl/site,
#            carried) in the one command (docs/bench/2026-12-04-h200.md was made so; about 260 s)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
export GLM_FIXTURES=$root/tests/fixtures
out=${OUT:-/tmp/glm-session}
mkdir -p "$out"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
bench() { # name, timeout, args...
  local n=$1 lim=$2; shift 2
  timeout "$lim" "$G" bench "$@" >"$out/bench_$n.log" 2>&1; local rc=$?
  el "bench $n ($*): exit $rc"
  grep -E "^\| *[0-9]|^glmtune bench|tokens/s|attention:" "$out/bench_$n.log" | head -12
}
case ${1:-check} in
check)
  GLM_GPU_PARTS="ops attention model" timeout 400 bash "$root/tests/gpu/run.sh" >"$out/run.txt" 2>&1
  el "run.sh ops attention model: exit $?"
  tail -12 "$out/run.txt"
  grep -E "FAIL|9B shape" "$out/cuda_model.log" | head -20
  grep -E "^FAIL|attention_delta|attention_bwd\+D dq" "$out/cuda_ops.log" "$out"/cuda_ops_attention_*.log | head -20
  bench bf16 75 --seq-len 8192,32768 --steps 3
  bench fp8 75 --base-dtype fp8 --seq-len 8192,32768 --steps 3
  ;;
multi)
  GLM_GPU_PARTS="fp8 cli multi cp" GLM_MULTI_LIMIT=150 timeout 330 bash "$root/tests/gpu/run.sh" >"$out/run.txt" 2>&1
  el "run.sh fp8 cli multi cp: exit $?"
  tail -14 "$out/run.txt"
  bench q4_16 200 --max-seq-len --quantization-bit 4 --max-gpu-memory 16 --max-step-seconds 170
  ;;
long)
  bench q4_22 440 --max-seq-len --quantization-bit 4 --max-gpu-memory 22 --max-step-seconds 380
  bench bf16_whole $(( 570 - ($(date +%s) - t0) )) --max-seq-len --prove-memory
  ;;
speed)
  timeout 150 "$pre/bin/test_fp8_ops" >"$out/fp8_ops.log" 2>&1
  el "test_fp8_ops: exit $?"
  grep -E "FAIL|FP8 GEMMs run|passed" "$out/fp8_ops.log" | head -20
  timeout 40 "$pre/bin/bench_cuda" fp8 >"$out/bench_cuda_fp8.log" 2>&1
  el "bench_cuda fp8: exit $?"; grep "^| fp8" "$out/bench_cuda_fp8.log"
  timeout 40 "$pre/bin/fp8_fidelity" --device cuda >"$out/fp8_fidelity.log" 2>&1
  el "fp8_fidelity: exit $?"; grep -E "^\| [0-9a-z]|worst|loss" "$out/fp8_fidelity.log"
  bench bf16 90 --seq-len 8192,32768 --steps 3
  bench fp8 90 --base-dtype fp8 --seq-len 8192,32768 --steps 3
  export PYTHONPATH=$root/.whl/site${PYTHONPATH:+:$PYTHONPATH}
  for p in hf_bench hf_liger_bench; do
    PYTHONUNBUFFERED=1 timeout 130 python3 "$pre/shared/bench/$p.py" --seq 8192,32768 --gc 1 --steps 3 >"$out/$p.jsonl" 2>"$out/$p.err"
    el "$p: exit $?"; cat "$out/$p.jsonl"; tail -2 "$out/$p.err"
  done
  ;;
esac
el "done"
