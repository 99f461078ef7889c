#!/bin/bash
# tests/gpu/attn_variants.sh: the attention kernel variants side by side on the GPU machine
# (.device/gpu carried): bench_cuda's attention rows and test_cuda_ops' attention checks under
# each setting of GLMTUNE_ATTN_FWD / GLMTUNE_ATTN_DQ / GLMTUNE_ATTN_DKDV (kernels/cuda/attention.cu),
# then `glmtune bench` at 8192 tokens with each. Logs to $OUT. The measured winners are the
# defaults in kernels/cuda/attention.cu (numbers: docs/bench-attention.md).
# Usage: bash tests/gpu/attn_variants.sh ["FWD DQ DKDV" ...]
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pre=$root/.device/gpu
out=${OUT:-/tmp/glm-attn}
mkdir -p "$out"
export LD_LIBRARY_PATH=$pre/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GLM_SHARED=$pre/shared
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("mt2 mt2 b32s2" "mt2 mt2 b32s3" "mt2 mt2 b64s2")
for v in "${variants[@]}"; do
  set -- $v
  tag="$1-$2-$3"
  export GLMTUNE_ATTN_FWD=$1 GLMTUNE_ATTN_DQ=$2 GLMTUNE_ATTN_DKDV=$3
  echo "== GLMTUNE_ATTN_FWD=$1 GLMTUNE_ATTN_DQ=$2 GLMTUNE_ATTN_DKDV=$3"
  timeout 120 "$pre/bin/bench_cuda" attention 2>&1 | grep '^| attention' | grep -v '8 documents'
  if [ "${GLM_CHECK:-1}" = 1 ]; then
    timeout 150 "$pre/bin/test_cuda_ops" attention >"$out/ops_$tag.log" 2>&1
    echo "test_cuda_ops attention: exit $? ($(grep -c FAIL "$out/ops_$tag.log") FAIL lines)"
  fi
  timeout 90 "$pre/bin/glmtune" bench --seq-len 8192 --steps 3 >"$out/bench8k_$tag.log" 2>&1
  grep -E '^\| 8192' "$out/bench8k_$tag.log" | head -2
done
