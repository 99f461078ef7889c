#!/bin/bash
# tests/gpu/fp8.sh: the FP8 base on the GPU machine in one command (after tests/gpu/stage.sh here,
# with .device/gpu carried): tests/gpu/test_fp8_ops (the quantizers bit for bit against the CPU, the
# conversions against the GPU's instruction, the FP8 GEMM in its three scaling paths, the tiny
# model's step; log $OUT/fp8_ops.log), tests/bench/fp8_fidelity.c on the GPU (the 9B shape: per GEMM,
# per layer, the loss; $OUT/fp8_fidelity.log), then `glmtune bench` at 8k with the bf16 base and the
# fp8 base (logs $OUT/bench_bf16.log, $OUT/bench_fp8.log). Exit status: test_fp8_ops's (0, 77 skipped,
# 1 failed), or 1 when a bench run failed.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
logdir=${OUT:-/tmp}
export GLM_FIXTURES=$root/tests/fixtures
nvidia-smi -L 2>/dev/null
"$pre/bin/test_fp8_ops" >"$logdir/fp8_ops.log" 2>&1
rc=$?
grep -E "device:|rel err|differ|bit-exact|DIFFER|FAIL|GEMMs run|fp8 base's own|worst|passed|SKIPPED" "$logdir/fp8_ops.log"
echo "test_fp8_ops: exit $rc"
# the FP8 base against the bf16 base on the 9B shape: per GEMM, per layer, the loss (tests/bench/fp8_fidelity.c)
if [ -x "$pre/bin/fp8_fidelity" ]; then
  timeout 300 "$pre/bin/fp8_fidelity" --device cuda >"$logdir/fp8_fidelity.log" 2>&1 || rc=1
  cat "$logdir/fp8_fidelity.log"
fi
for d in bf16 fp8; do
  "$G" bench --base-dtype $d --seq-len 8192 --steps 3 >"$logdir/bench_$d.log" 2>&1 || { echo "bench $d: failed"; rc=1; }
  grep -E "^glmtune bench|^\| 8192" "$logdir/bench_$d.log" | head -3
done
exit $rc
