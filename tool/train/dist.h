/* tool/train/dist.h: where this process stands among the data-parallel ranks of a run, and the backend
 * it trains on (the CPU backend over MPI, or CUDA over NCCL).
 *
 * A rank learns its place from its environment, in this order:
 *   GLMTUNE_RANK, GLMTUNE_WORLD_SIZE, GLMTUNE_LOCAL_RANK, GLMTUNE_DEVICE, GLMTUNE_NCCL_ID
 *        set by `glmtune train --gpus N` for its workers (tool/train/launch.c);
 *   an MPI launcher (mpirun/mpiexec of Open MPI or MPICH, srun with PMI/PMIx): rank and world
 *        from MPI itself, the local rank from OMPI_COMM_WORLD_LOCAL_RANK / MPI_LOCALRANKID /
 *        SLURM_LOCALID;
 *   Slurm without MPI (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID);
 *   torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK). MASTER_ADDR / MASTER_PORT, which
 *        torchrun also sets, are not used: glmtune has no network protocol of its own.
 * The NCCL unique id (CUDA, world > 1) comes from the launcher (GLMTUNE_NCCL_ID), or from rank 0
 * by MPI_Bcast under an MPI launcher, or through a file on a shared filesystem
 * (GLMTUNE_NCCL_ID_FILE, written atomically by rank 0 with the run's key, read by the others).
 * CPU ranks talk over MPI only: world > 1 on the CPU needs an MPI launcher.
 * Verified in CI: the CPU ranks under mpirun. The CUDA paths (glm_backend_cuda_dist): the NCCL id
 * from the launcher has run with several ranks on one GPU (tests/gpu/multi.sh, --gpus 0,0); the id
 * by MPI or a shared file has not yet run on a GPU; none has run on several GPUs. */
#ifndef GLM_TOOL_DIST_H
#define GLM_TOOL_DIST_H

#include "common/status.h"
#include "kernels/backend.h"

typedef struct dist_info {
    int rank, world, local_rank;
    int device;          /* CUDA device of this rank (-1: not chosen by the environment) */
    int mpi;             /* started by an MPI launcher */
    const char *how;     /* "single process", "glmtune --gpus", "MPI launcher", "Slurm", "torchrun-style variables" */
} dist_info;

/* Reads the environment (above). Errors: GLM_ERR_ARG naming the variable when its value is not a
 * valid rank / world size (rank outside [0, world)). */
glm_status dist_detect(dist_info *d);

/* The backend for this rank on `device` ("auto", "cpu" or "cuda"): world 1, the plain backend;
 * world > 1 on the CPU, glm_backend_cpu_dist (MPI; its world must match the environment's);
 * world > 1 on CUDA, glm_backend_cuda_dist on the rank's device with the NCCL id from the
 * launcher, MPI or the shared file. Sets the collectives' timeout (seconds) and, for world > 1, the
 * log prefix "rank R: ". d is updated with the backend's rank and world.
 * Errors: GLM_ERR_UNSUPPORTED (no MPI / NCCL / GPU in this build or machine; the message says what
 * to install or which option to use), GLM_ERR_ARG (inconsistent environment), backend errors. */
glm_status dist_backend(const char *device, double comm_timeout_s, dist_info *d, const glm_backend **out);

/* Frees a backend from dist_backend (finalises MPI when this process initialised it). */
void dist_close(const glm_backend *be);

#endif
