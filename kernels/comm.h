/* kernels/comm.h: communication between ranks, on its own: the entry points of the backend's
 * communication ops (glm_comm_*: data-parallel all-reduce and all-gather, the context-parallel
 * ring's send/receive, sub-communicators, timeouts, the accounting of bytes and exposed time) and
 * the kinds of communication the accounting counts. The contracts are the ops' in
 * kernels/backend_table.h ("communication between data-parallel ranks"); the CPU backend's
 * communicator is MPI (kernels/cpu/comm_mpi.c), CUDA's NCCL (kernels/cuda/comm.cu). */
#ifndef GLM_KERNELS_COMM_H
#define GLM_KERNELS_COMM_H

#include "kernels/backend.h"

/* The kinds of communication counted by be->comm_bytes. */
typedef enum {
    GLM_COMM_ALL_REDUCE = 0, /* all_reduce / all_reduce_start of fp32 buffers (the LoRA gradients) */
    GLM_COMM_ALL_GATHER,     /* all_gather_start (--shard-base's base weights) */
    GLM_COMM_SENDRECV,       /* sendrecv / sendrecv_start (the context-parallel ring's K|V and dK|dV) */
    GLM_COMM_HOST,           /* all_reduce_host (loss sums, decisions, the log's per-rank figures) */
    GLM_COMM_KINDS
} glm_comm_kind;

/* "all_reduce", "all_gather", "sendrecv", "host": the kinds' names in metrics.jsonl. */
const char *glm_comm_kind_name(int kind);

/* The bytes one rank sends for a collective over `world` ranks (be->comm_bytes' rule): an
 * all-reduce of `bytes` (2 (world - 1) / world x bytes), an all-gather of shards of `bytes`
 * ((world - 1) x bytes). 0 for world <= 1. */
double glm_comm_all_reduce_bytes(double bytes, int world);
double glm_comm_all_gather_bytes(double shard_bytes, int world);

/* GLMTUNE_COMM_DELAY_MS (the test hook of comm_wait_ms) in ms; 0 when unset or invalid. */
double glm_comm_delay_ms(void);

/* glm_comm_<op>(be, ...): the communication op (kernels/backend_table.h) of the same name
 * (comm_wait -> glm_comm_wait, set_comm_timeout -> glm_comm_set_timeout, ...); rank arguments and
 * colours are checked here, once. */

static inline glm_status glm_comm_all_reduce(const glm_backend *be, float *x, int64_t n) {
    return be->all_reduce(be, x, n);
}

static inline glm_status glm_comm_all_reduce_start(const glm_backend *be, float *x, int64_t n, int *req) {
    return be->all_reduce_start(be, x, n, req);
}

static inline glm_status glm_comm_all_gather_start(const glm_backend *be, void *dst, const void *src,
                                                   size_t shard_bytes, int *req) {
    return be->all_gather_start(be, dst, src, shard_bytes, req);
}

static inline glm_status glm_comm_wait(const glm_backend *be, int req) {
    return be->comm_wait(be, req);
}

static inline glm_status glm_comm_sync(const glm_backend *be) {
    return be->comm_sync(be);
}

static inline void glm_comm_progress(const glm_backend *be) {
    be->comm_progress(be);
}

static inline glm_status glm_comm_all_reduce_host(const glm_backend *be, double *x, int n) {
    return be->all_reduce_host(be, x, n);
}

static inline glm_status glm_comm_sendrecv(const glm_backend *be, const void *send, int dst, void *recv, int src,
                                           size_t bytes) {
    if (dst < 0 || dst >= be->world || src < 0 || src >= be->world)
        return glm_err(GLM_ERR_ARG, "sendrecv: rank %d -> %d, from %d: outside the world of %d", be->rank, dst, src, be->world);
    return be->sendrecv(be, send, dst, recv, src, bytes);
}

static inline glm_status glm_comm_sendrecv_start(const glm_backend *be, const void *send, int dst, void *recv,
                                                 int src, size_t bytes, int *req) {
    *req = -1;
    if (dst < 0 || dst >= be->world || src < 0 || src >= be->world)
        return glm_err(GLM_ERR_ARG, "sendrecv: rank %d -> %d, from %d: outside the world of %d", be->rank, dst, src, be->world);
    return be->sendrecv_start(be, send, dst, recv, src, bytes, req);
}

static inline glm_status glm_comm_split(const glm_backend *be, int color, int key, const glm_backend **out) {
    *out = NULL;
    if (color < 0) return glm_err(GLM_ERR_ARG, "comm_split: color %d must be >= 0", color);
    return be->comm_split(be, color, key, out);
}

static inline void glm_comm_free(const glm_backend *sub) {
    sub->comm_free(sub);
}

static inline void glm_comm_set_timeout(const glm_backend *be, double seconds) {
    be->set_comm_timeout(be, seconds);
}

static inline double glm_comm_wait_ms(const glm_backend *be, int reset) {
    return be->comm_wait_ms(be, reset);
}

static inline void glm_comm_bytes(const glm_backend *be, double *bytes, int reset) {
    be->comm_bytes(be, bytes, reset);
}

static inline void glm_comm_abort(const glm_backend *be, int code) {
    be->comm_abort(be, code);
}
#endif
