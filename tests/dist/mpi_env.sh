# tests/dist/mpi_env.sh: sourced by the multi-rank tests. Finds mpirun (SKIPPED, exit 77, when it
# is absent: tests/deps.sh installs openmpi-bin, so CI always runs them) and sets Open MPI up for
# one machine: shared memory only (btl self,vader; no network), no single-copy kernel mechanism
# (containers forbid ptrace-based CMA), more ranks than cores allowed, waiting ranks yield the
# CPU, and root allowed (CI runs as root).
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIPPED: mpirun not found (apt-get install openmpi-bin libopenmpi-dev; tests/deps.sh does)"
    exit 77
fi
if [ -n "${GLMTUNE:-}" ] && "$GLMTUNE" train --help 2>/dev/null | grep -q "built without MPI"; then
    echo "SKIPPED: this glmtune was built without MPI"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_pml=ob1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_orte_base_help_aggregate=1
