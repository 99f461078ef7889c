#!/usr/bin/env bash
# The CUDA module libglm_cuda.so takes no symbol from the program (kernels/cuda_host.h): nm lists
# no undefined glm_* symbol in it, it exports its entry points (glm_cuda_init among them) and
# nothing of the program's (glm_err ...: those are hidden), and the program exports no glm_*
# symbol for it (no --export-dynamic-symbol). Usage: module_symbols.sh GLMTUNE [MODULE]; MODULE
# empty when the build has no CUDA backend: then only the program's part runs, and the module's
# part says it is skipped.
set -uo pipefail
G=${1:?usage: module_symbols.sh GLMTUNE [MODULE]}
M=${2:-}
command -v nm >/dev/null || { echo "SKIP: nm (binutils) is not installed"; exit 77; }
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
none() { local out; out=$("$@" | grep ' glm_'); [ -z "$out" ] || { echo "$out" >&2; return 1; }; }
has() { nm -D --defined-only "$1" | grep -q " T $2\$" || { echo "no exported $2 in $1" >&2; return 1; }; }

check "the program $G is there" test -x "$G"
check "the program exports no glm_* symbol" none nm -D --defined-only "$G"
if [ -n "$M" ]; then
    check "the module $M is there" test -f "$M"
    check "the module resolves no glm_* symbol of the program (nm -D --undefined-only)" none nm -D --undefined-only "$M"
    for f in glm_cuda_init glm_cuda_abi_version glm_backend_cuda glm_cuda_device_count; do
        check "the module exports its entry point $f" has "$M" "$f"
    done
    for f in glm_err glm_errmsg glm_verr glm_assert_fail glm_mpi_abort glm_dtype_size glm_comm_delay_ms; do
        check "the module keeps its $f hidden" bash -c "! nm -D '$M' | grep -q ' $f\$'"
    done
else
    echo "SKIP (module part): this build has no CUDA backend (GLMTUNE_CUDA=OFF), so there is no libglm_cuda.so to check"
fi
echo "module_symbols: $pass passed, $fail failed"
[ "$fail" = 0 ]
