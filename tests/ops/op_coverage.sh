#!/usr/bin/env bash
# Every op of the backend table (struct glm_backend in kernels/backend_table.h) has, by name, a CPU
# entry (kernels/cpu/*.c: `.op = ` in the table's initializer or `b->op = `), a CUDA entry
# (kernels/cuda/*.cu: `b->op = `) and a case in the op table (tests/ops/op_table.c: an entry
# `.name = "op"` or "op+variant"), unless the allow-list below names it with the reason; an
# allow-listed op that is no longer a field of the struct, or that has an op-table entry, fails too
# (the list must not go stale). Fails naming each op that lacks one. Usage: op_coverage.sh [SRC].
set -uo pipefail
S=${1:-${GLM_SRC:?usage: op_coverage.sh SRC (the source tree)}}
T="$S/kernels/backend_table.h"
[ -f "$T" ] || { echo "FAIL: $T does not exist" >&2; exit 1; }

# ops without an op-table entry, each with its reason (tests/ops/op_table.c's header says the same)
declare -A allow
for op in alloc free upload download upload_f32 download_f32 zero copy host_alloc host_free upload_async download_async copy_wait; do
    allow[$op]="memory op: tests/gpu/test_cuda_ops.c (test_memory) and tests/kernels/test_cpu_ops.c check it on its backend; there is nothing to compute against the CPU"
done
for op in all_reduce sync all_reduce_start all_gather_start comm_wait comm_sync comm_progress all_reduce_host sendrecv sendrecv_start comm_split comm_free set_comm_timeout comm_wait_ms comm_bytes comm_abort; do
    allow[$op]="communication op: needs several ranks (tests/dist/test_comm_mpi, tests/gpu/multi.sh), not one backend against another"
done
for op in set_attention_ws_cap mem_info mem_reset_peak mem_process mem_overhead set_mem_cap scratch_need scratch_reserve; do
    allow[$op]="memory accounting: tests/gpu/test_cuda_ops.c (test_memcap) and tests/lora/test_model.c check it; backend-specific numbers, no CPU reference"
done
for op in prof_enable phase prof_collect; do
    allow[$op]="profiling: timings, no values to compare (tests/gpu/test_cuda_ops.c)"
done
allow[supports]="a query, not an op: each test asks it (tests/kernels/test_attention_block.c, tests/gpu)"

ops=$(awk '/^struct glm_backend \{/ {on = 1} on && /^\};/ {on = 0} on' "$T" | grep -o '(\*[a-z_0-9]*)' | tr -d '(*)')
[ -n "$ops" ] || { echo "FAIL: no op found in struct glm_backend of $T" >&2; exit 1; }
n=0; fail=0
bad() { echo "FAIL: $*" >&2; fail=$((fail + 1)); }
for op in $ops; do
    n=$((n + 1))
    grep -Eq "(^[[:space:]]*\.$op[[:space:]]*=|\bb->$op[[:space:]]*=)" "$S"/kernels/cpu/*.c || bad "$op has no CPU entry (kernels/cpu/*.c: .$op = or b->$op =)"
    grep -Eq "\bb->$op[[:space:]]*=" "$S"/kernels/cuda/*.cu || bad "$op has no CUDA entry (kernels/cuda/*.cu: b->$op =)"
    if grep -Eq "\.name = \"$op(\+[^\"]*)?\"" "$S/tests/ops/op_table.c"; then
        [ -z "${allow[$op]:-}" ] || bad "$op has an op-table entry and is allow-listed too: take it off op_coverage.sh's list"
    elif [ -z "${allow[$op]:-}" ]; then
        bad "$op has no case in the op table (tests/ops/op_table.c: an entry .name = \"$op\")"
    fi
done
for op in "${!allow[@]}"; do
    grep -qx "$op" <<<"$ops" || bad "op_coverage.sh allow-lists $op, which struct glm_backend no longer has"
done
echo "op_coverage: $n ops of struct glm_backend, ${#allow[@]} allow-listed without an op-table case, $fail missing"
[ "$fail" = 0 ]
