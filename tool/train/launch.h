/* tool/train/launch.h: `glmtune train --gpus N` / `--device cpu --nproc N`: the process the user starts
 * becomes a supervisor that starts the ranks, waits for them, and stops them all when one fails
 * or when it is interrupted.
 *
 * --gpus N | a,b,c: one worker per GPU, each this same binary with the same arguments (fork +
 *   exec of /proc/self/exe) and GLMTUNE_RANK / GLMTUNE_WORLD_SIZE / GLMTUNE_LOCAL_RANK /
 *   GLMTUNE_DEVICE / GLMTUNE_NCCL_ID in its environment (the NCCL unique id is made here, by
 *   ncclGetUniqueId, and travels in the environment: never over a network of glmtune's own).
 * --device cpu --nproc N: one child, `mpirun -np N <this binary> train <the same arguments>`: CPU
 *   ranks talk over MPI, so MPI starts them (mpirun names a rank that dies; this supervisor adds
 *   its own line and stops mpirun when interrupted).
 * A worker recognises itself by those variables (or an MPI launcher's) and trains.
 * Verified: the --nproc path end to end in CI (tests/dist/test_train_kill.sh); the supervision
 * itself with ordinary programs as workers (tests/dist/test_launch.c). The --gpus path with real
 * GPU workers and NCCL has run with several workers on one GPU (tests/gpu/multi.sh, --gpus 0,0 and
 * 0,0,0,0), not yet on several GPUs. */
#ifndef GLM_TOOL_LAUNCH_H
#define GLM_TOOL_LAUNCH_H

#include <sys/types.h>

/* One supervised child. */
typedef struct launch_child {
    char **argv;      /* argv[0] is the program (a path, or a name looked up in PATH) */
    char **env;       /* extra "NAME=value" entries for its environment (NULL-terminated; may be NULL) */
    char name[96];    /* how messages name it: "rank 1 (GPU 3)", "mpirun (2 CPU ranks)" */
    pid_t pid;        /* filled by launch_supervise */
    int status;       /* waitpid status once it ended */
    int ended;
    int stop_sig;     /* what asks it to finish its step, save a checkpoint and stop: 0, the signal received
                         (SIGTERM / SIGUSR1); mpirun: SIGUSR1, which it forwards to the ranks (SIGTERM it
                         turns into killing them) */
} launch_child;

/* Starts every child (fork + execvp, in this process group, with the extra environment), then
 * waits. When a child ends with a failure (non-zero exit or a signal) while others run, prints
 * "<name> (pid P) exited with status S | was killed by signal K (name); stopping the other N
 * worker(s)" and sends them SIGTERM, then SIGKILL to those still alive `grace_s` seconds later.
 * SIGINT to this process is forwarded as SIGINT to every child (the same grace, then SIGKILL).
 * SIGTERM / SIGUSR1 (a Slurm preemption, `sbatch --signal`) ask the run to save and stop: each child
 * gets its stop_sig (or the signal itself), and this process waits for them without a deadline of its
 * own (the ranks finish the current step and write a checkpoint first); a second signal then stops
 * them as SIGINT does. Returns the exit code for the command: 0 when every child exited 0; 128 + the
 * signal when interrupted or stopped; else the first failed child's exit code (1 when it was killed). A child
 * that cannot start (exec fails) counts as failed with status 127. Never returns before every
 * child has ended. */
int launch_supervise(launch_child *c, int n, double grace_s);

/* Handles --gpus / --nproc of `glmtune train` (argv: the arguments after "train", as given).
 * Returns -1 when this process is to train itself (no --gpus / --nproc, or it already is a
 * worker: GLMTUNE_RANK or an MPI launcher's variables are set), else the exit code of the
 * supervised run. gpus: the option's value or NULL; nproc: 0 or the CPU rank count. */
int launch_train(int argc, char **argv, const char *gpus, int nproc, int quiet);

/* Parses --gpus: "N" -> devices 0..N-1, "a,b,c" -> those ids, in that order; an id may repeat
 * ("0,0": two ranks on GPU 0, launch_gpus_shared). Fills devs (at most max) and returns the
 * count, or -1 with a message (glm_errmsg) for a malformed value. */
int launch_parse_gpus(const char *gpus, int *devs, int max);

/* 1 when a device appears more than once in devs[n]: the ranks of that GPU share it, which NCCL
 * allows only between "hosts", so launch_train gives each worker launch_shared_gpu_env's
 * variables and prints one warning that such a run checks correctness, never speed. */
int launch_gpus_shared(const int *devs, int n);

/* The environment of rank `rank` of a run whose GPUs repeat: NCCL_HOSTID=glmtune-shared-gpu-rank-R
 * (its own "host"), and NCCL's socket transport over loopback: NCCL_SOCKET_IFNAME=lo, NCCL_NET=Socket,
 * NCCL_IB_DISABLE=1, NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1, NCCL_NVLS_ENABLE=0, each unless the
 * environment sets it already (NCCL_HOSTID always). Writes at most max malloc'd "NAME=value"
 * strings to env and returns how many. */
int launch_shared_gpu_env(int rank, char **env, int max);

#endif
