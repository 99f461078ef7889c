#!/bin/bash
# tests/gpu/attn_variants.sh: the attention kernel variants side by side on the GPU machine
# (.device/gpu carried): bench_cuda's attention rows and test_cuda_ops' attention checks under
# each GLMTUNE_ATTN_FWD / GLMTUNE_ATTN_DQ setting, then Nsight Compute's warp-state summary of
# the dK/dV kernel. Logs to $OUT. The measured winner is the default in kernels/cuda/attention.cu.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pre=$root/.device/gpu
out=${OUT:-/tmp/glm-attn}
mkdir -p "$out"
export LD_LIBRARY_PATH=$pre/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GLM_SHARED=$pre/shared
for v in "mt1 mt1" "mt2 mt2" "mt2b32 mt2"; do
  set -- $v
  echo "== GLMTUNE_ATTN_FWD=$1 GLMTUNE_ATTN_DQ=$2"
  GLMTUNE_ATTN_FWD=$1 GLMTUNE_ATTN_DQ=$2 timeout 120 "$pre/bin/bench_cuda" attention 2>&1 | grep '^| attention'
  GLMTUNE_ATTN_FWD=$1 GLMTUNE_ATTN_DQ=$2 timeout 150 "$pre/bin/test_cuda_ops" attention >"$out/ops_$1_$2.log" 2>&1
  echo "test_cuda_ops attention: exit $? ($(grep -c FAIL "$out/ops_$1_$2.log") FAIL lines)"
done
if command -v ncu >/dev/null && [ "${GLM_NCU:-1}" = 1 ]; then
  timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
      -k regex:'k_fa_(dkdv|fwd)' -c 2 "$pre/bin/bench_cuda" attention >"$out/ncu.log" 2>&1
  grep -E "k_fa_|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Stall|Warp Cycles Per Issued|Issued Warp" "$out/ncu.log" | head -60
fi
