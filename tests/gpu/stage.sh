#!/bin/bash
# tests/gpu/stage.sh: run HERE (the build machine, with nvcc and every -dev package) before
# running tests/gpu/run.sh on the GPU machine. Builds the CUDA tests in build-cuda and copies into
# .device/gpu (ignored by git; carry it to the GPU machine):
#   bin/     test_cuda_ops, test_cuda_model, test_fp8_ops, bench_cuda, fp8_probe, fp8_fidelity, glmtune, libglm_cuda.so (the CUDA
#            backend)
#   lib/     (as lib.tar.xz) the shared libraries they need that the GPU machine lacks (everything ldd
#            resolves except glibc, libstdc++/libgcc and the CUDA/cuBLAS/NCCL libraries, which
#            the GPU machine has in its own, matching versions)
#   shared/  the peer benchmarks (bench/hf_bench.py, hf_liger_bench.py, from ../shared), which tests/gpu/perf.sh runs
#            beside glmtune's (the tests' data, tests/fixtures, is tracked and travels with the tree)
# Usage: tests/gpu/stage.sh   (GLM_SHARED overrides ../shared; GLM_CUDA_ARCHS the GPU targets
#        built, default 90: the H200 the device tool lends; the project's default build carries
#        80 86 89 90)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${GLM_SHARED:-$root/../shared}
build=$root/build-cuda
out=$root/.device/gpu
. "$root/tests/deps.sh"
fe=$(glm_cudnn_frontend)
cmake -S "$root" -B "$build" -G Ninja -DGLMTUNE_CUDA=ON -DCMAKE_CUDA_COMPILER=${CUDACXX:-/usr/local/cuda/bin/nvcc} \
      -DCMAKE_CUDA_ARCHITECTURES="${GLM_CUDA_ARCHS:-90}" ${fe:+-DGLMTUNE_CUDNN_FRONTEND_DIR="$fe"} >/dev/null
ninja -C "$build" test_cuda_ops test_cuda_model test_fp8_ops bench_cuda fp8_probe fp8_fidelity glmtune
rm -rf "$out"
fix=$root/tests/fixtures
# the CPU reference runs below read the fixtures' safetensors with Python (numpy, safetensors)
python3 -c 'import safetensors, numpy' 2>/dev/null || python3 -m pip install -q safetensors numpy >&2
mkdir -p "$out/bin" "$out/lib" "$out/cli"
cp "$build/tests/gpu/test_cuda_ops" "$build/tests/gpu/test_cuda_model" "$build/tests/gpu/test_fp8_ops" "$build/tests/gpu/bench_cuda" "$build/tests/gpu/fp8_probe" "$build/tests/bench/fp8_fidelity" \
   "$build/tool/glmtune" "$out/bin/"
# the CUDA backend module, loaded from beside the program (kernels/cuda_loader.c)
cp "$build/tool/libglm_cuda.so" "$out/bin/"
# for tests/gpu/cli_check.sh: the golden rows as shards, and the same run on the CPU here as the
# reference (3 steps, both layouts)
for layout in chatglm hf; do
  python3 - "$fix/tiny-glm4/$layout/golden.safetensors" "$out/cli/$layout.jsonl" <<'PY'
import json, sys
from safetensors.numpy import load_file
g = load_file(sys.argv[1])
with open(sys.argv[2], "w") as f:
    for b in range(g["input_ids"].shape[0]):
        off = 0
        for n in map(int, g["doc_lens"][b]):
            if n:
                f.write(json.dumps({"input_ids": g["input_ids"][b, off:off + n].tolist(),
                                    "labels": g["labels"][b, off:off + n].tolist()}) + "\n")
                off += n
PY
  "$build/tool/glmtune" tokenize --quiet --seq-len 48 -o "$out/cli/$layout-shards" "$out/cli/$layout.jsonl"
  "$build/tool/glmtune" train --quiet --device cpu --model "$fix/tiny-glm4/$layout" \
      --data "$out/cli/$layout-shards" --output-dir "$out/cli/$layout-cpu" $(cat "$root/tests/gpu/cli_flags.txt") \
      --dump-grads "$out/cli/$layout-cpu-grads.safetensors"
done
# for tests/gpu/cp.sh: its rows of 50 tokens and the 1-rank run on the CPU (the specification its
# tolerance analysis compares every CUDA run with): the same documents as cp.sh writes
mkdir -p "$out/cp"
python3 - "$out/cp/docs.jsonl" <<'PY'
import random, sys, json
random.seed(7)
with open(sys.argv[1], "w") as f:
    for n in (50, 30, 27, 26, 24, 23, 11, 9):
        ids = [random.randrange(512) for _ in range(n)]
        labels = [-100 if t == 0 or random.random() < 0.15 else ids[t] for t in range(n)]
        f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
PY
"$build/tool/glmtune" tokenize --quiet --seq-len 50 -o "$out/cp/s50" "$out/cp/docs.jsonl"
"$build/tool/glmtune" train --quiet --device cpu --model "$fix/tiny-glm4/chatglm" \
    --init-adapter "$fix/tiny-glm4/chatglm/adapter_init" --data "$out/cp/s50" --lora-target all --lora-rank 4 \
    --lora-alpha 8 --learning-rate 1e-3 --lr-scheduler-type constant --max-steps 2 --logging-steps 1 --seed 5 \
    --per-device-train-batch-size 1 --gradient-accumulation-steps 4 --gradient-checkpointing full \
    --output-dir "$out/cp/cpu" --dump-grads "$out/cp/cpu.st"
# (libmpi and its Open MPI libraries are copied: glmtune links MPI, which it only initialises
# under mpirun / --nproc; the --gpus workers use NCCL)
skip='^(libopenblas|libgfortran|libquadmath|libsentencepiece|libpcre2-8|libjansson|linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas\.|libcublasLt\.|libnccl\.)'
for b in "$out"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
done
if [ -f "$shared/bench/hf_bench.py" ]; then
  mkdir -p "$out/shared/bench" && cp "$shared/bench/hf_bench.py" "$out/shared/bench/"
  # the stronger peer (transformers + PEFT + Liger's kernels; liger-kernel unpacked under .whl/site, carried)
  [ -f "$shared/bench/hf_liger_bench.py" ] && cp "$shared/bench/hf_liger_bench.py" "$out/shared/bench/"
else
  echo "note: $shared/bench/hf_bench.py not found: tests/gpu/perf.sh will have no transformers + PEFT comparison" >&2
fi
echo "$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!.device' || echo -dirty)" >"$out/COMMIT"
ls "$out/lib"
# the libraries travel compressed (40 MB, most of it ICU's data, to 11 MB: the device tool carries
# at most 64 MB with the tree); tests/gpu/env.sh and run.sh unpack them on the GPU machine
tar -C "$out" -cJf "$out/lib.tar.xz" lib && rm -rf "$out/lib"
du -sh "$out" "$out"/*
