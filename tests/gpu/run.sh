#!/bin/bash
# tests/gpu/run.sh: the one script run on the GPU machine: the CUDA backend's tests
# (label "cuda": tests/gpu/test_cuda_ops.c, tests/gpu/test_cuda_model.c, tests/gpu/test_fp8_ops.c), then a
# short table.
#
# Two modes:
#  - prebuilt (the usual one): tests/gpu/stage.sh ran on the build machine and .device/gpu was
#    carried here (bin/, lib/, shared/): the binaries run with LD_LIBRARY_PATH=.device/gpu/lib and
#    GLM_FIXTURES=tests/fixtures (tracked: the working tree carries it). The GPU machine lacks libarchive-dev and libyaml-dev, so it
#    cannot configure the project itself.
#  - build: no .device/gpu: cmake + ninja with CUDA into build-gpu, then `ctest -L cuda`.
# Logs go to $OUT (when set) as cuda_ops.log and cuda_model.log; then (prebuilt mode) cli_check.sh,
# and multi.sh and cp.sh in their one-GPU mode (--gpus 0,0 over NCCL's socket
# transport) with their tables in $OUT/multi.txt, $OUT/cp.txt and logs multi.log, cp.log. Exit status: 0 when every test
# passed or was skipped, 1 otherwise.
# GLM_GPU_PARTS picks parts (default all: "ops model fp8 attention cli multi cp"), to split the
# run over device calls of at most 10 minutes each (the whole run takes about 9), e.g.
# GLM_GPU_PARTS="ops fp8 attention" then GLM_GPU_PARTS="model cli multi cp".
set -u
want() { [[ " ${GLM_GPU_PARTS:-ops model fp8 attention cli multi cp} " == *" $1 "* ]]; }
root=$(cd "$(dirname "$0")/../.." && pwd)
pre=$root/.device/gpu
logdir=${OUT:-/tmp}
# the staged libraries travel compressed (tests/gpu/stage.sh): unpacked once, here
[ -d "$pre/lib" ] || [ ! -f "$pre/lib.tar.xz" ] || tar -C "$pre" -xJf "$pre/lib.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NCCL and cuBLAS from the Python wheels as a last resort (the system ones come first)
for d in /usr/local/lib/python3*/dist-packages/nvidia/{nccl,cublas,cu13,cudnn}/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/{nccl,cublas,cu13,cudnn}/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no GPU listed"
fail=0
if [ -x "$pre/bin/test_cuda_ops" ]; then
  export LD_LIBRARY_PATH=$pre/lib:$LD_LIBRARY_PATH
  export GLM_FIXTURES=$root/tests/fixtures # the test data (tracked, so it travels with the working tree)
  for t in test_cuda_ops test_cuda_model test_fp8_ops; do
    case $t in test_cuda_ops) want ops ;; test_cuda_model) want model ;; *) want fp8 ;; esac || continue
    ldd "$pre/bin/$t" | grep "not found" && echo "$t: missing libraries (above)"
    start=$(date +%s.%N)
    "$pre/bin/$t" >"$logdir/${t#test_}.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    case $rc in
      0) res=passed ;;
      77) res=skipped ;;
      *) res="FAILED (exit $rc)"; fail=1 ;;
    esac
    printf '%-18s %-18s %8.1f s\n' "$t" "$res" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" >>"$logdir/summary.txt"
  done
  # which FP8 cublasLtMatmul configurations this cuBLASLt runs (a diagnostic, seconds; printed below)
  if want fp8 && [ -x "$pre/bin/fp8_probe" ]; then timeout 60 "$pre/bin/fp8_probe" >"$logdir/fp8_probe.log" 2>&1; fi
  # the whole-row attention ops once with each implementation (the runs above use cuDNN's where
  # it is there): glmtune's own kernels, and cuDNN's forced (skipped when cuDNN cannot be loaded)
  for impl in glmtune cudnn; do
    want attention || continue
    GLMTUNE_ATTENTION=$impl "$pre/bin/test_cuda_ops" attention >"$logdir/cuda_ops_attention_$impl.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then res=passed
    elif [ $impl = cudnn ] && grep -q "cuDNN not used" "$logdir/cuda_ops_attention_$impl.log"; then res="skipped (no cuDNN)"
    else res="FAILED (exit $rc)"; fail=1; fi
    printf '%-18s %-18s\n' "attention ($impl)" "$res" >>"$logdir/summary.txt"
  done
else
  build=$root/build-gpu
  if cmake -S "$root" -B "$build" -G Ninja -DGLMTUNE_CUDA=ON >"$logdir/build.log" 2>&1 &&
     ninja -C "$build" test_cuda_ops test_cuda_model test_fp8_ops >>"$logdir/build.log" 2>&1; then
    (cd "$build" && ctest -L cuda --output-on-failure) >"$logdir/ctest.log" 2>&1 || fail=1
    cp "$logdir/ctest.log" "$logdir/ops.log"
  else
    echo "build failed:"; tail -30 "$logdir/build.log"; exit 1
  fi
fi
# GLM_SANITIZE=1: also run test_cuda_model (small, covers every op) under compute-sanitizer's
# memcheck and racecheck (Firecracker machines support it; gVisor ones do not).
if [ "${GLM_SANITIZE:-0}" = 1 ] && [ -x "$pre/bin/test_cuda_model" ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$pre/bin/test_cuda_model" >"$logdir/sanitize_$tool.log" 2>&1
    rc=$?
    [ $rc = 0 ] || fail=1
    printf '%-18s %-18s\n' "sanitizer $tool" "$([ $rc = 0 ] && echo clean || echo "FAILED (exit $rc)")" >>"$logdir/summary.txt"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard" "$logdir/sanitize_$tool.log" | head -5
  done
fi
echo
echo "== test_cuda_model =="
grep -E "rel err|FAIL|passed|SKIPPED" "$logdir/cuda_model.log" 2>/dev/null | head -60
echo
echo "== test_fp8_ops (and tests/gpu/fp8_probe.cu: FP8 cublasLtMatmul configurations) =="
cat "$logdir/fp8_probe.log" 2>/dev/null
grep -E "rel err|differ|bit-exact|DIFFER|FAIL|GEMMs run|fp8 base's own|passed|SKIPPED" "$logdir/fp8_ops.log" 2>/dev/null | head -80
echo
echo "== test_cuda_ops: op, shape, norm-relative error vs the CPU op, tolerance, CUDA ms =="
sed -n '/^op /,$p' "$logdir/cuda_ops.log" 2>/dev/null
grep -E "^FAIL|SKIPPED" "$logdir/cuda_ops.log" 2>/dev/null | head -30
if [ -x "$pre/bin/glmtune" ]; then
  echo
  echo "== glmtune train --device cuda vs --device cpu (tests/gpu/cli_check.sh) =="
  if want cli; then bash "$root/tests/gpu/cli_check.sh" || fail=1; else echo "(not in GLM_GPU_PARTS)"; fi
  # the multi-rank paths over NCCL: on one GPU its ranks share it (--gpus 0,0: the
  # socket transport, correctness only); tables in $OUT/multi.txt and $OUT/cp.txt
  for t in multi cp; do
    want $t || continue
    echo
    echo "== tests/gpu/$t.sh (data parallel, --shard-base, context parallel, bytes, comm share) =="
    start=$(date +%s.%N)
    OUT=$logdir timeout "${GLM_MULTI_LIMIT:-300}" bash "$root/tests/gpu/$t.sh" >"$logdir/$t.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    if [ -s "$logdir/$t.txt" ]; then cat "$logdir/$t.txt"; else tail -25 "$logdir/$t.log"; fi
    case $rc in 0) res=passed ;; 77) res=skipped ;; 124) res="FAILED (timeout)"; fail=1 ;; *) res="FAILED (exit $rc)"; fail=1 ;; esac
    printf '%-18s %-18s %8.1f s\n' "$t.sh" "$res" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" >>"$logdir/summary.txt"
  done
fi
echo
cat "$logdir/summary.txt" 2>/dev/null
exit $fail
