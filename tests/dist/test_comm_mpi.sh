#!/bin/bash
# Runs test_comm_mpi under mpirun with 3 ranks (tests/dist/mpi_env.sh: the launcher's settings).
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
exec mpirun -np 3 "$GLM_TEST_COMM_MPI"
