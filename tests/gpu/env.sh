# tests/gpu/env.sh: sourced by the GPU machine's scripts (multi.sh, cp.sh, perf.sh, cli_check.sh):
# the staged binaries of tests/gpu/stage.sh ($pre, $G) and the library path they run with: the
# staged libraries, the machine's CUDA, and NCCL / cuBLAS / cuDNN from the Python wheels as a last
# resort (cuDNN is loaded by the attention ops when found). Needs $root; GLM_PRE names another
# staged directory.
pre=${GLM_PRE:-$root/.device/gpu}
G=$pre/bin/glmtune
# the staged libraries travel compressed (tests/gpu/stage.sh): unpacked once, here
[ -d "$pre/lib" ] || [ ! -f "$pre/lib.tar.xz" ] || tar -C "$pre" -xJf "$pre/lib.tar.xz"
export LD_LIBRARY_PATH=$pre/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/lib/python3*/dist-packages/nvidia/{nccl,cublas,cu13,cudnn}/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/{nccl,cublas,cu13,cudnn}/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
[ -x "$G" ] || { echo "no $G: run tests/gpu/stage.sh on the build machine and carry .device/gpu"; exit 1; }
