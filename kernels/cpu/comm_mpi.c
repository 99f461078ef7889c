/* kernels/cpu/comm_mpi.c: the CPU backend's communicator (kernels/backend.h, "communication
 * between data-parallel ranks") over MPI, and the small MPI API the tools use (rank discovery,
 * broadcasting the NCCL unique id, aborting the job).
 *
 * World 1 (glm_backend_cpu()): every op is local (all_gather copies, the rest do nothing).
 * World > 1 (glm_backend_cpu_dist()): MPI_COMM_WORLD (or a comm_split group's communicator, kept
 * in be->impl) with MPI_ERRORS_RETURN, so every MPI error
 * comes back as a message naming the rank and the call. Collectives are non-blocking
 * (MPI_Iallreduce, MPI_Iallgather, MPI_Isend/Irecv) and waited for by polling MPI_Test with a
 * short sleep, under a timeout: a rank whose peer stopped reports it instead of hanging (MPI
 * itself has no timeout on collectives). Open MPI makes progress on non-blocking collectives
 * only inside MPI calls: comm_progress (called by the trainer as each layer's gradients become
 * final) tests the outstanding requests so that buckets move while the backward computes.
 * Single-threaded use (MPI_THREAD_FUNNELED): the thread that created the backend makes every call.
 *
 * Built without MPI (CMake did not find it): world 1 works; glm_backend_cpu_dist and glm_mpi_init
 * fail with a message saying how to get MPI. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/comm.h"

#ifdef GLMTUNE_HAVE_MPI
#include <mpi.h>
#endif

static double g_timeout_s = 1800.0; /* transformers' ddp_timeout default */
static double g_wait_ms;
static double g_bytes[GLM_COMM_KINDS]; /* comm_bytes: this process's sends by kind */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int glm_mpi_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

#ifdef GLMTUNE_HAVE_MPI

int glm_mpi_built(void) { return 1; }

static int g_mpi_rank = -1, g_mpi_world = 0, g_mpi_inited;

static glm_status mpi_fail(int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return glm_err(GLM_ERR_COMM, "rank %d of %d: %s failed: %s", g_mpi_rank, g_mpi_world, call, msg);
}

/* The communicator of a CPU backend: a comm_split group's (be->impl), else MPI_COMM_WORLD. */
typedef struct cpu_comm {
    MPI_Comm comm;
} cpu_comm;
static MPI_Comm comm_of(const glm_backend *be) { return be->impl ? ((const cpu_comm *)be->impl)->comm : MPI_COMM_WORLD; }

glm_status glm_mpi_init(int *rank, int *world) {
    if (!g_mpi_inited) {
        int already = 0, prov = 0;
        MPI_Initialized(&already);
        if (!already) {
            int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &prov);
            if (rc != MPI_SUCCESS)
                return glm_err(GLM_ERR_COMM, "MPI_Init_thread failed (code %d); hint: start the ranks with mpirun -np N "
                               "(or srun --mpi=pmix)", rc);
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &g_mpi_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &g_mpi_world);
        g_mpi_inited = 1;
    }
    if (rank) *rank = g_mpi_rank;
    if (world) *world = g_mpi_world;
    return GLM_OK;
}

void glm_mpi_finalize(void) {
    int fin = 0;
    if (!g_mpi_inited) return;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    g_mpi_inited = 0;
}

void glm_mpi_abort(int code) {
    if (g_mpi_inited) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

/* ---- outstanding requests ---------------------------------------------------------------- */

#define MAX_REQ 4096
typedef struct {
    int used;
    MPI_Request r[2]; /* sendrecv uses two */
    int nr;
    double not_before; /* GLMTUNE_COMM_DELAY_MS: the earliest completion (monotonic seconds); 0: none */
    char what[112];
} pending;
static double g_delay_s = -1; /* GLMTUNE_COMM_DELAY_MS / 1000, read once */
static pending g_req[MAX_REQ];
static int g_req_hint;

static glm_status new_req(int *id, const char *what) {
    for (int k = 0; k < MAX_REQ; k++) {
        int i = (g_req_hint + k) % MAX_REQ;
        if (!g_req[i].used) {
            g_req[i].used = 1;
            g_req[i].nr = 0;
            if (g_delay_s < 0) g_delay_s = glm_comm_delay_ms() / 1e3;
            g_req[i].not_before = g_delay_s > 0 ? now_s() + g_delay_s : 0;
            snprintf(g_req[i].what, sizeof g_req[i].what, "%s", what);
            g_req_hint = (i + 1) % MAX_REQ;
            *id = i;
            return GLM_OK;
        }
    }
    return glm_err(GLM_ERR_INTERNAL, "rank %d: more than %d communication requests outstanding (a missing comm_wait)",
                   g_mpi_rank, MAX_REQ);
}

/* Waits for request i by polling MPI_Testall (spinning briefly, then sleeping up to 1 ms between
 * tests, so a waiting rank leaves the CPU to the others), at most g_timeout_s. */
static glm_status wait_req(int i) {
    pending *p = &g_req[i];
    double t0 = now_s();
    long sleep_ns = 0;
    for (;;) {
        int flag = 0;
        int rc = MPI_Testall(p->nr, p->r, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            p->used = 0;
            return mpi_fail(rc, p->what);
        }
        if (flag && (!p->not_before || now_s() >= p->not_before)) break;
        double el = now_s() - t0;
        if (el > g_timeout_s) {
            p->used = 0;
            g_wait_ms += el * 1e3;
            return glm_err(GLM_ERR_COMM, "rank %d of %d: %s did not complete within %g s: another rank has stopped, "
                           "died or is stuck (its own messages say which); hint: --ddp-timeout SECONDS sets this limit",
                           g_mpi_rank, g_mpi_world, p->what, g_timeout_s);
        }
        if (el > 1e-4) {
            sleep_ns = sleep_ns ? (sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2) : 2000;
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
        }
    }
    g_wait_ms += (now_s() - t0) * 1e3;
    p->used = 0;
    return GLM_OK;
}

static glm_status wait_all(void) {
    glm_status s = GLM_OK;
    for (int i = 0; i < MAX_REQ; i++)
        if (g_req[i].used) {
            glm_status t = wait_req(i);
            if (t && !s) s = t;
        }
    return s;
}

/* A contiguous datatype covering `bytes` in at most INT_MAX units (MPI counts are int). */
static glm_status byte_type(size_t bytes, MPI_Datatype *type, int *count, int *derived) {
    *derived = 0;
    if (bytes <= INT_MAX) {
        *type = MPI_BYTE;
        *count = (int)bytes;
        return GLM_OK;
    }
    size_t unit = 1u << 20;
    while (unit > 1 && bytes % unit) unit >>= 1;
    if (bytes / unit > INT_MAX)
        return glm_err(GLM_ERR_UNSUPPORTED, "rank %d: a %zu-byte shard is too large for one MPI call", g_mpi_rank, bytes);
    MPI_Type_contiguous((int)unit, MPI_BYTE, type);
    MPI_Type_commit(type);
    *count = (int)(bytes / unit);
    *derived = 1;
    return GLM_OK;
}

static glm_status cpu_all_reduce_start(const glm_backend *be, float *x, int64_t n, int *req) {
    *req = -1;
    if (be->world <= 1 || n <= 0) return GLM_OK;
    if (n > INT_MAX) return glm_err(GLM_ERR_UNSUPPORTED, "rank %d: all_reduce of %lld floats: too many for one MPI call", be->rank, (long long)n);
    char what[112];
    snprintf(what, sizeof what, "MPI_Iallreduce (sum of %lld floats)", (long long)n);
    GLM_TRY(new_req(req, what));
    pending *p = &g_req[*req];
    int rc = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, comm_of(be), &p->r[0]);
    if (rc != MPI_SUCCESS) {
        p->used = 0;
        return mpi_fail(rc, what);
    }
    p->nr = 1;
    g_bytes[GLM_COMM_ALL_REDUCE] += glm_comm_all_reduce_bytes(4.0 * (double)n, be->world);
    return GLM_OK;
}

static glm_status cpu_all_gather_start(const glm_backend *be, void *dst, const void *src, size_t shard_bytes, int *req) {
    *req = -1;
    if (be->world <= 1) {
        if (dst != src && shard_bytes) memmove(dst, src, shard_bytes);
        return GLM_OK;
    }
    char what[112];
    snprintf(what, sizeof what, "MPI_Iallgather (%zu bytes per rank)", shard_bytes);
    MPI_Datatype t;
    int count, derived;
    GLM_TRY(byte_type(shard_bytes, &t, &count, &derived));
    glm_status st = new_req(req, what);
    if (st) {
        if (derived) MPI_Type_free(&t);
        return st;
    }
    pending *p = &g_req[*req];
    const void *s = (const char *)src == (const char *)dst + (size_t)be->rank * shard_bytes ? MPI_IN_PLACE : src;
    int rc = MPI_Iallgather(s, count, t, dst, count, t, comm_of(be), &p->r[0]);
    if (derived) MPI_Type_free(&t); /* freed when the operation no longer needs it */
    if (rc != MPI_SUCCESS) {
        p->used = 0;
        return mpi_fail(rc, what);
    }
    p->nr = 1;
    g_bytes[GLM_COMM_ALL_GATHER] += glm_comm_all_gather_bytes((double)shard_bytes, be->world);
    return GLM_OK;
}

static glm_status cpu_comm_wait(const glm_backend *be, int req) {
    if (be->world <= 1) return GLM_OK;
    if (req < 0) return wait_all();
    GLM_ASSERT(req < MAX_REQ && g_req[req].used, "rank %d: comm_wait on request %d, which is not outstanding", be->rank, req);
    return wait_req(req);
}

static glm_status cpu_comm_sync(const glm_backend *be) { return be->world <= 1 ? GLM_OK : wait_all(); }

static void cpu_comm_progress(const glm_backend *be) {
    if (be->world <= 1) return;
    for (int i = 0; i < MAX_REQ; i++)
        if (g_req[i].used) {
            int flag = 0; /* a completed request becomes MPI_REQUEST_NULL: its wait returns at once */
            MPI_Testall(g_req[i].nr, g_req[i].r, &flag, MPI_STATUSES_IGNORE); /* errors surface at the wait */
        }
}

static glm_status cpu_all_reduce(const glm_backend *be, float *x, int64_t n) {
    int req;
    GLM_TRY(cpu_all_reduce_start(be, x, n, &req));
    return req < 0 ? GLM_OK : wait_req(req);
}

static glm_status cpu_all_reduce_host(const glm_backend *be, double *x, int n) {
    if (be->world <= 1 || n <= 0) return GLM_OK;
    char what[112];
    snprintf(what, sizeof what, "MPI_Iallreduce (sum of %d doubles)", n);
    int id;
    GLM_TRY(new_req(&id, what));
    pending *p = &g_req[id];
    int rc = MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, comm_of(be), &p->r[0]);
    if (rc != MPI_SUCCESS) {
        p->used = 0;
        return mpi_fail(rc, what);
    }
    p->nr = 1;
    g_bytes[GLM_COMM_HOST] += glm_comm_all_reduce_bytes(8.0 * n, be->world);
    return wait_req(id);
}

static glm_status cpu_sendrecv_start(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes,
                                     int *req) {
    *req = -1;
    if (be->world <= 1) {
        if (recv != send && bytes) memmove(recv, send, bytes);
        return GLM_OK;
    }
    char what[112];
    snprintf(what, sizeof what, "MPI_Isend/MPI_Irecv (%zu bytes to rank %d, from rank %d of %d)", bytes, dst, src, be->world);
    MPI_Datatype t;
    int count, derived;
    GLM_TRY(byte_type(bytes, &t, &count, &derived));
    glm_status st = new_req(req, what);
    if (st) {
        if (derived) MPI_Type_free(&t);
        return st;
    }
    pending *p = &g_req[*req];
    int rc = MPI_Irecv(recv, count, t, src, 7, comm_of(be), &p->r[0]);
    if (rc == MPI_SUCCESS) {
        p->nr = 1;
        rc = MPI_Isend(send, count, t, dst, 7, comm_of(be), &p->r[1]);
        if (rc == MPI_SUCCESS) p->nr = 2;
    }
    if (derived) MPI_Type_free(&t);
    if (rc != MPI_SUCCESS) {
        p->used = 0;
        *req = -1;
        return mpi_fail(rc, what);
    }
    if (dst != be->rank) g_bytes[GLM_COMM_SENDRECV] += (double)bytes;
    return GLM_OK;
}

static glm_status cpu_sendrecv(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes) {
    int req;
    GLM_TRY(cpu_sendrecv_start(be, send, dst, recv, src, bytes, &req));
    return req < 0 ? GLM_OK : wait_req(req);
}

/* A group of ranks: a copy of the parent's table whose impl holds the MPI communicator. */
static glm_status cpu_comm_split(const glm_backend *be, int color, int key, const glm_backend **out) {
    *out = NULL;
    glm_backend *b = malloc(sizeof *b);
    cpu_comm *cc = malloc(sizeof *cc);
    if (!b || !cc) {
        free(b);
        free(cc);
        return glm_err(GLM_ERR_NOMEM, "comm_split: out of memory");
    }
    *b = *be;
    if (be->world <= 1) { /* a group of one: no MPI involved */
        free(cc);
        b->impl = NULL;
        b->rank = 0;
        b->world = 1;
        *out = b;
        return GLM_OK;
    }
    int rc = MPI_Comm_split(comm_of(be), color, key, &cc->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(cc->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(cc->comm, &b->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(cc->comm, &b->world);
    if (rc != MPI_SUCCESS) {
        free(b);
        free(cc);
        return mpi_fail(rc, "MPI_Comm_split");
    }
    b->impl = cc;
    *out = b;
    return GLM_OK;
}

static void cpu_comm_free(const glm_backend *sub) {
    if (!sub) return;
    cpu_comm *cc = sub->impl;
    if (cc) {
        MPI_Comm_free(&cc->comm);
        free(cc);
    }
    free((void *)sub);
}

static void cpu_comm_abort(const glm_backend *be, int code) {
    if (be->world > 1) glm_mpi_abort(code);
}

static glm_status mpi_bcast_impl(void *buf, size_t n, int root) {
    GLM_ASSERT(g_mpi_inited, "glm_mpi_bcast before glm_mpi_init");
    if (n > INT_MAX) return glm_err(GLM_ERR_UNSUPPORTED, "glm_mpi_bcast: %zu bytes is too many", n);
    int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? GLM_OK : mpi_fail(rc, "MPI_Bcast");
}
glm_status glm_mpi_bcast(void *buf, size_t n, int root) { return mpi_bcast_impl(buf, n, root); }

#else /* no MPI in this build */

int glm_mpi_built(void) { return 0; }

static glm_status no_mpi(void) {
    return glm_err(GLM_ERR_UNSUPPORTED, "this glmtune was built without MPI, which CPU ranks (world > 1 on the CPU) and "
                   "runs under mpirun need; hint: apt-get install libopenmpi-dev openmpi-bin, then rebuild (tests/run.sh "
                   "installs them)");
}
glm_status glm_mpi_init(int *rank, int *world) { return no_mpi(); }
glm_status glm_mpi_bcast(void *buf, size_t n, int root) { return no_mpi(); }
void glm_mpi_finalize(void) {}
void glm_mpi_abort(int code) {}

static glm_status cpu_all_reduce_start(const glm_backend *be, float *x, int64_t n, int *req) {
    *req = -1;
    return be->world <= 1 ? GLM_OK : no_mpi();
}
static glm_status cpu_all_gather_start(const glm_backend *be, void *dst, const void *src, size_t shard_bytes, int *req) {
    *req = -1;
    if (be->world > 1) return no_mpi();
    if (dst != src && shard_bytes) memmove(dst, src, shard_bytes);
    return GLM_OK;
}
static glm_status cpu_comm_wait(const glm_backend *be, int req) { return GLM_OK; }
static glm_status cpu_comm_sync(const glm_backend *be) { return GLM_OK; }
static void cpu_comm_progress(const glm_backend *be) {}
static glm_status cpu_all_reduce(const glm_backend *be, float *x, int64_t n) { return be->world <= 1 ? GLM_OK : no_mpi(); }
static glm_status cpu_all_reduce_host(const glm_backend *be, double *x, int n) { return be->world <= 1 ? GLM_OK : no_mpi(); }
static glm_status cpu_sendrecv(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes) {
    if (be->world > 1) return no_mpi();
    if (recv != send && bytes) memmove(recv, send, bytes);
    return GLM_OK;
}
static glm_status cpu_sendrecv_start(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes,
                                     int *req) {
    *req = -1;
    return cpu_sendrecv(be, send, dst, recv, src, bytes);
}
static glm_status cpu_comm_split(const glm_backend *be, int color, int key, const glm_backend **out) {
    *out = NULL;
    if (be->world > 1) return no_mpi();
    glm_backend *b = malloc(sizeof *b);
    if (!b) return glm_err(GLM_ERR_NOMEM, "comm_split: out of memory");
    *b = *be;
    *out = b;
    return GLM_OK;
}
static void cpu_comm_free(const glm_backend *sub) { free((void *)sub); }
static void cpu_comm_abort(const glm_backend *be, int code) {}

#endif

static void cpu_set_comm_timeout(const glm_backend *be, double s) { g_timeout_s = s > 0 ? s : 1800.0; }

static double cpu_comm_wait_ms(const glm_backend *be, int reset) {
    double v = g_wait_ms;
    if (reset) g_wait_ms = 0;
    return v;
}

static void cpu_comm_bytes(const glm_backend *be, double *bytes, int reset) {
    for (int k = 0; k < GLM_COMM_KINDS; k++) {
        bytes[k] = g_bytes[k];
        if (reset) g_bytes[k] = 0;
    }
}

const char *glm_comm_kind_name(int kind) {
    static const char *names[GLM_COMM_KINDS] = {"all_reduce", "all_gather", "sendrecv", "host"};
    return kind >= 0 && kind < GLM_COMM_KINDS ? names[kind] : "?";
}

/* Fills the communication ops of a CPU backend table (backend_cpu.c calls it for its static
 * world-1 table; glm_backend_cpu_dist for the MPI one). */
void glm_cpu_comm_ops(glm_backend *b) {
    b->all_reduce = cpu_all_reduce;
    b->all_reduce_start = cpu_all_reduce_start;
    b->all_gather_start = cpu_all_gather_start;
    b->comm_wait = cpu_comm_wait;
    b->comm_sync = cpu_comm_sync;
    b->comm_progress = cpu_comm_progress;
    b->all_reduce_host = cpu_all_reduce_host;
    b->sendrecv = cpu_sendrecv;
    b->sendrecv_start = cpu_sendrecv_start;
    b->comm_split = cpu_comm_split;
    b->comm_free = cpu_comm_free;
    b->set_comm_timeout = cpu_set_comm_timeout;
    b->comm_wait_ms = cpu_comm_wait_ms;
    b->comm_bytes = cpu_comm_bytes;
    b->comm_abort = cpu_comm_abort;
}

static glm_backend g_dist;
static int g_dist_made;

const glm_backend *glm_backend_cpu_dist(glm_status *st) {
    int rank = 0, world = 1;
    glm_status s = glm_mpi_init(&rank, &world);
    if (s) {
        if (st) *st = s;
        return NULL;
    }
    if (!g_dist_made) {
        g_dist = *glm_backend_cpu();
        glm_cpu_comm_ops(&g_dist);
        g_dist.rank = rank;
        g_dist.world = world;
        g_dist_made = 1;
    }
    if (st) *st = GLM_OK;
    return &g_dist;
}

void glm_backend_cpu_close(const glm_backend *be) {
    if (be == &g_dist && g_dist_made) {
        g_dist_made = 0;
        glm_mpi_finalize();
    }
}
