#!/bin/bash
# Runs test_cp_mpi (context parallel at the model level on the CPU over MPI, against one process)
# with Open MPI set up: 2 ranks (one group of 2), 3 ranks (one group of 3), 4 ranks as one group of
# 4, and 4 ranks as 2 data-parallel groups of 2.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLM_TEST_CP_MPI:-}" ] || { echo "SKIPPED: this build has no MPI (CMake did not find it; tests/deps.sh installs libopenmpi-dev)"; exit 77; }
for run in "2 2" "3 3" "4 4" "4 2"; do
  set -- $run
  echo "== mpirun -np $1: context parallel over $2 ranks ($(( $1 / $2 )) data-parallel group(s))"
  mpirun -np "$1" "$GLM_TEST_CP_MPI" "$2"
done
