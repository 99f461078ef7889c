/* tool/train/dist.c: rank discovery and the backend of a data-parallel rank (tool/train/dist.h). */
#define _GNU_SOURCE
#include "tool/train/dist.h"

#include "kernels/comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/log.h"

/* An integer environment variable: 1 when set (into *v), 0 when unset; GLM_ERR_ARG when malformed. */
static int env_int(const char *name, int *v, glm_status *st) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < 0 || x > 1000000) {
        *st = glm_err(GLM_ERR_ARG, "environment variable %s=\"%s\" is not a non-negative integer", name, s);
        return 0;
    }
    *v = (int)x;
    return 1;
}

glm_status dist_detect(dist_info *d) {
    glm_status st = GLM_OK;
    *d = (dist_info){0, 1, 0, -1, 0, "single process"};
    int r, w, lr, dev;
    if (env_int("GLMTUNE_RANK", &r, &st) && env_int("GLMTUNE_WORLD_SIZE", &w, &st)) {
        d->rank = r, d->world = w, d->how = "glmtune --gpus";
        if (env_int("GLMTUNE_LOCAL_RANK", &lr, &st)) d->local_rank = lr;
        if (env_int("GLMTUNE_DEVICE", &dev, &st)) d->device = dev;
    } else if (glm_mpi_launched()) {
        d->mpi = 1, d->how = "MPI launcher";
        if (env_int("OMPI_COMM_WORLD_RANK", &r, &st) || env_int("PMI_RANK", &r, &st) || env_int("PMIX_RANK", &r, &st))
            d->rank = r;
        if (env_int("OMPI_COMM_WORLD_SIZE", &w, &st) || env_int("PMI_SIZE", &w, &st)) d->world = w;
        else d->world = 0; /* from MPI itself (dist_backend) */
        if (env_int("OMPI_COMM_WORLD_LOCAL_RANK", &lr, &st) || env_int("MPI_LOCALRANKID", &lr, &st) ||
            env_int("SLURM_LOCALID", &lr, &st))
            d->local_rank = lr;
        else
            d->local_rank = d->rank;
    } else if (env_int("SLURM_PROCID", &r, &st) && env_int("SLURM_NTASKS", &w, &st)) {
        d->rank = r, d->world = w, d->how = "Slurm";
        d->local_rank = env_int("SLURM_LOCALID", &lr, &st) ? lr : r;
    } else if (env_int("RANK", &r, &st) && env_int("WORLD_SIZE", &w, &st)) {
        d->rank = r, d->world = w, d->how = "torchrun-style variables";
        d->local_rank = env_int("LOCAL_RANK", &lr, &st) ? lr : r;
    }
    if (st) return st;
    if (d->world != 0 && (d->world < 1 || d->rank >= d->world))
        return glm_err(GLM_ERR_ARG, "%s: rank %d of world size %d is not a valid place; hint: RANK (or its launcher's "
                       "equivalent) must be below WORLD_SIZE", d->how, d->rank, d->world);
    return GLM_OK;
}

#ifdef GLMTUNE_HAVE_CUDA
static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

static glm_status parse_id(const char *hex, const char *from, unsigned char id[128]) {
    if (strlen(hex) < 256) return glm_err(GLM_ERR_FORMAT, "%s: the NCCL unique id is not 256 hex digits", from);
    for (int i = 0; i < 128; i++) {
        int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0) return glm_err(GLM_ERR_FORMAT, "%s: the NCCL unique id is not 256 hex digits", from);
        id[i] = (unsigned char)(a * 16 + b);
    }
    return GLM_OK;
}

/* The key that ties an id file to this run: GLMTUNE_RUN_ID, TORCHELASTIC_RUN_ID, or Slurm's job and
 * step ids. */
static const char *run_key(char *buf, size_t n) {
    const char *k = getenv("GLMTUNE_RUN_ID");
    if (!k) k = getenv("TORCHELASTIC_RUN_ID");
    if (!k && getenv("SLURM_JOB_ID")) {
        snprintf(buf, n, "slurm-%s.%s", getenv("SLURM_JOB_ID"), getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "0");
        k = buf;
    }
    return k;
}

/* The NCCL id through a file on a shared filesystem: rank 0 writes "<key> <hex>\n" atomically;
 * the others wait (at most timeout_s) for a file with this run's key. */
static glm_status id_by_file(const char *path, const dist_info *d, double timeout_s, unsigned char id[128]) {
    char kb[128];
    const char *key = run_key(kb, sizeof kb);
    if (!key)
        return glm_err(GLM_ERR_ARG, "GLMTUNE_NCCL_ID_FILE=%s: set GLMTUNE_RUN_ID to a value unique to this run on every "
                       "rank (torchrun's TORCHELASTIC_RUN_ID or Slurm's job id serve when present), so that no rank "
                       "reads the id of an earlier run", path);
    if (d->rank == 0) {
        GLM_TRY(glm_cuda_nccl_id(id));
        char *text = malloc(strlen(key) + 260);
        if (!text) return glm_err(GLM_ERR_NOMEM, "out of memory");
        int n = sprintf(text, "%s ", key);
        for (int i = 0; i < 128; i++) n += sprintf(text + n, "%02x", id[i]);
        text[n++] = '\n';
        glm_status s = glm_write_file_atomic(path, text, (size_t)n);
        free(text);
        return s;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char *data = NULL;
        size_t len = 0;
        if (glm_read_file(path, &data, &len) == GLM_OK) {
            size_t kl = strlen(key);
            int ok = len > kl + 256 && !strncmp(data, key, kl) && data[kl] == ' ';
            glm_status s = ok ? parse_id(data + kl + 1, path, id) : GLM_OK;
            free(data);
            if (ok) return s;
        }
        glm_err_clear();
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s)
            return glm_err(GLM_ERR_IO, "rank %d: %s: rank 0 did not write this run's NCCL id (key %s) within %g s; hint: "
                           "the path must be on a filesystem every node shares", d->rank, path, key, timeout_s);
        usleep(100 * 1000);
    }
}

static glm_status nccl_id_for(const dist_info *d, double timeout_s, unsigned char id[128]) {
    const char *env = getenv("GLMTUNE_NCCL_ID");
    if (env) return parse_id(env, "GLMTUNE_NCCL_ID", id);
    if (d->mpi && glm_mpi_built()) {
        GLM_TRY(glm_mpi_init(NULL, NULL));
        glm_status s = d->rank == 0 ? glm_cuda_nccl_id(id) : GLM_OK;
        int ok = s == GLM_OK;
        /* rank 0's failure travels with the id (an all-zero id with a flag) so no rank waits forever */
        unsigned char buf[129];
        buf[0] = (unsigned char)ok;
        memcpy(buf + 1, id, 128);
        GLM_TRY(glm_mpi_bcast(buf, sizeof buf, 0));
        if (!buf[0]) return s ? s : glm_err(GLM_ERR_COMM, "rank 0 could not make the NCCL unique id (see its message)");
        memcpy(id, buf + 1, 128);
        return GLM_OK;
    }
    const char *file = getenv("GLMTUNE_NCCL_ID_FILE");
    if (file) return id_by_file(file, d, timeout_s, id);
    return glm_err(GLM_ERR_ARG, "rank %d of %d (%s): no way to share the NCCL unique id; hint: start the ranks with "
                   "glmtune train --gpus N on one machine, under mpirun / srun --mpi=pmix, or set GLMTUNE_NCCL_ID_FILE "
                   "to a path on a shared filesystem (and GLMTUNE_RUN_ID)", d->rank, d->world, d->how);
}
#endif

glm_status dist_backend(const char *device, double comm_timeout_s, dist_info *d, const glm_backend **out) {
    const glm_backend *be = NULL;
    int want_cuda = !strcmp(device, "cuda");
#ifdef GLMTUNE_HAVE_CUDA
    if (!strcmp(device, "auto")) want_cuda = glm_cuda_device_count() > 0;
    if (want_cuda) {
        glm_status cst = GLM_OK;
        if (d->world == 0) { /* an MPI launcher that gave no size in the environment */
            GLM_TRY(glm_mpi_init(&d->rank, &d->world));
        }
        if (d->world <= 1) {
            be = glm_backend_cuda(d->device >= 0 ? d->device : 0, &cst);
        } else {
            int n = glm_cuda_device_count();
            int dev = d->device >= 0 ? d->device : (n > 0 ? d->local_rank % n : 0);
            unsigned char id[128];
            GLM_TRY(nccl_id_for(d, comm_timeout_s, id));
            be = glm_backend_cuda_dist(dev, d->rank, d->world, id, &cst);
            d->device = dev;
        }
        if (!be) return glm_err_context(cst, "--device %s (rank %d of %d)", device, d->rank, d->world);
    }
#endif
    if (!be) {
        if (want_cuda)
            return glm_err(GLM_ERR_UNSUPPORTED, "--device %s: this build has only the CPU reference backend (built "
                           "without nvcc); hint: --device cpu", device);
        if (strcmp(device, "cpu") && strcmp(device, "auto"))
            return glm_err(GLM_ERR_ARG, "--device %s is not known; hint: auto, cpu or cuda", device);
        if (d->world == 1 && !d->mpi) {
            be = glm_backend_cpu();
        } else {
            if (!d->mpi && d->world > 1)
                return glm_err(GLM_ERR_UNSUPPORTED, "rank %d of %d (%s) on the CPU: CPU ranks talk over MPI, so they must "
                               "be started by an MPI launcher; hint: glmtune train --device cpu --nproc %d, or mpirun -np "
                               "%d glmtune train --device cpu ...", d->rank, d->world, d->how, d->world, d->world);
            glm_status cst = GLM_OK;
            be = glm_backend_cpu_dist(&cst);
            if (!be) return cst;
            if (d->world > 0 && be->world != d->world) {
                glm_status s = glm_err(GLM_ERR_MISMATCH, "MPI says this job has %d ranks, the environment (%s) %d", be->world,
                                       d->how, d->world);
                glm_backend_cpu_close(be);
                return s;
            }
            d->rank = be->rank;
            d->world = be->world;
        }
    }
    glm_comm_set_timeout(be, comm_timeout_s);
    if (be->world > 1) {
        char p[32];
        snprintf(p, sizeof p, "rank %d: ", be->rank);
        glm_log_set_prefix(p);
    }
    *out = be;
    return GLM_OK;
}

void dist_close(const glm_backend *be) {
    if (!be) return;
#ifdef GLMTUNE_HAVE_CUDA
    if (!strcmp(be->name, "cuda")) {
        glm_backend_cuda_close(be);
        glm_mpi_finalize();
        return;
    }
#endif
    glm_backend_cpu_close(be);
}
