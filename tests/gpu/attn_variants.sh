#!/bin/bash
# tests/gpu/attn_variants.sh: the attention kernels on the GPU machine (.device/gpu carried):
# bench_cuda's attention rows, test_cuda_ops' attention checks and `glmtune bench` at 8192
# tokens, logs to $OUT. The launch configuration is the constexpr block at the top of the host
# side of kernels/cuda/attention.cu (FWD_MT, FWD_BN, DQ_MT, DQ_BN, DKDV_BM, DKDV_ST): to compare
# configurations, stage one build per setting (tests/gpu/stage.sh into another directory, given
# as GLM_PRE) and run this script for each. The history of the measured settings is in
# docs/bench-attention.md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/glm-attn}
mkdir -p "$out"
. "$root/tests/gpu/env.sh" # LD_LIBRARY_PATH: staged libraries, CUDA, the wheels' libraries
# the variants compared are glmtune's own kernels: whole rows would otherwise go to cuDNN
export GLMTUNE_ATTENTION=glmtune
export GLM_FIXTURES=$root/tests/fixtures # the test data (tracked, so it travels with the working tree)
tag=$(basename "$pre")
timeout 120 "$pre/bin/bench_cuda" attention 2>&1 | grep '^| attention'
timeout 150 "$pre/bin/test_cuda_ops" attention >"$out/ops_$tag.log" 2>&1
echo "test_cuda_ops attention: exit $? ($(grep -c FAIL "$out/ops_$tag.log") FAIL lines)"
timeout 90 "$pre/bin/glmtune" bench --seq-len 8192 --steps 3 >"$out/bench8k_$tag.log" 2>&1
grep -E '^\| 8192' "$out/bench8k_$tag.log" | head -2
