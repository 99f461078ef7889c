#!/bin/bash
# Runs test_qlora_mpi (a sharded 4-bit base of segments) under mpirun with 3 ranks.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLM_TEST_QLORA_MPI:-}" ] || { echo "SKIPPED: this build has no MPI (CMake did not find it; tests/deps.sh installs libopenmpi-dev)"; exit 77; }
exec mpirun -np 3 "$GLM_TEST_QLORA_MPI"
