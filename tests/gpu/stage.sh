#!/bin/bash
# tests/gpu/stage.sh: run HERE (the build machine, with nvcc and every -dev package) before
# running tests/gpu/run.sh on the GPU machine. Builds the CUDA tests in build-cuda and copies into
# .device/gpu (ignored by git; carry it to the GPU machine):
#   bin/     test_cuda_ops, test_cuda_model
#   lib/     the shared libraries they need that the GPU machine may lack (everything ldd
#            resolves except glibc, libstdc++/libgcc and the CUDA/cuBLAS/NCCL libraries, which
#            the GPU machine has in its own, matching versions)
#   shared/  the fixtures the tests read (fixtures/tiny-glm4)
# Usage: tests/gpu/stage.sh   (GLM_SHARED overrides ../shared)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${GLM_SHARED:-$root/../shared}
build=$root/build-cuda
out=$root/.device/gpu
cmake -S "$root" -B "$build" -G Ninja -DGLMTUNE_CUDA=ON -DCMAKE_CUDA_COMPILER=${CUDACXX:-/usr/local/cuda/bin/nvcc} >/dev/null
ninja -C "$build" test_cuda_ops test_cuda_model
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/shared/fixtures"
cp "$build/tests/gpu/test_cuda_ops" "$build/tests/gpu/test_cuda_model" "$out/bin/"
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas\.|libcublasLt\.|libnccl\.)'
for b in "$out"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
done
cp -r "$shared/fixtures/tiny-glm4" "$out/shared/fixtures/"
du -sh "$out" "$out"/*
ls "$out/lib"
