#!/usr/bin/env bash
# Runs every CPU test of glmtune on a fresh Debian machine: installs what is missing (apt-get),
# configures and builds with CMake (CUDA code too when nvcc is found), runs ctest -L cpu; then the
# sanitizer job, tests/sanitize.sh: the same tests in a second build with AddressSanitizer and
# UndefinedBehaviorSanitizer (GLMTUNE_SANITIZE=0 leaves it out).
# GPU tests (label cuda) run on a GPU machine with tests/gpu/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/deps.sh
glm_install_deps
mkdir -p build
glm_build build
(cd build && ctest -L cpu --output-on-failure -j "$(nproc)" --timeout 900)
if [ "${GLMTUNE_SANITIZE:-1}" != 0 ]; then
    bash tests/sanitize.sh
fi
