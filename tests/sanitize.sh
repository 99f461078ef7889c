#!/usr/bin/env bash
# tests/sanitize.sh: the sanitizer job (tests/run.sh runs it after the CPU suite; CI with it).
# Builds the CPU code with AddressSanitizer (LeakSanitizer included) and UndefinedBehaviorSanitizer,
# undefined behaviour fatal at its first report (-DGLMTUNE_SANITIZE=ON, CUDA off), into build-asan,
# and runs every CPU test there (ctest -L cpu). Every sanitizer report goes to a file under
# $GLM_SAN_LOGS (default build-asan/sanitizer-logs), whichever process wrote it: a test that captures
# a program's stderr or expects it to fail would otherwise hide a report. The job fails when a test
# fails or when any report was written; the reports are printed.
# Settings the suite needs under the sanitizers (each for a reason):
#   verify_asan_link_order=0    tests/cli's rename shim is LD_PRELOADed before the ASan runtime
#   LSan suppressions           tests/lsan.supp: Open MPI's runtime memory, never freed by design;
#                               fast_unwind_on_malloc=0 so that those stacks reach Open MPI's frames
#   pids limit                  tests/cli/test_threads.sh turns leak detection off for the runs
#                               under a limit of tasks (LeakSanitizer needs a thread of its own)
#   peak RSS                    tests/dataset/test_reader.c skips its RSS bound in this build
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/deps.sh
glm_install_deps
B=build-asan
GLMTUNE_CUDA=OFF glm_build "$B" -DGLMTUNE_SANITIZE=ON
logs=${GLM_SAN_LOGS:-$PWD/$B/sanitizer-logs}
rm -rf "$logs"
mkdir -p "$logs"
chmod 1777 "$logs" # tests/cli/test_threads.sh runs glmtune as user nobody
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:verify_asan_link_order=0:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
export OMPI_MCA_mca_base_component_disable_dlclose=1
rc=0
(cd "$B" && ctest -L cpu --output-on-failure -j "$(nproc)" --timeout 1800) || rc=1
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
    echo "sanitizer reports ($(echo "$reports" | wc -l) files):" >&2
    for f in $reports; do echo "--- $f" >&2; head -60 "$f" >&2; done
    rc=1
fi
n=$(cd "$B" && ctest -N -L cpu | sed -n 's/^Total Tests: //p')
if [ $rc = 0 ]; then
    echo "sanitizer: $n passed, 0 failed"
else
    echo "sanitizer build: FAILED (see the failed tests and the reports above)" >&2
fi
exit $rc
