/* kernels/cuda/comm.cu: the CUDA backend's communicator (kernels/backend.h, "communication
 * between data-parallel ranks"): NCCL collectives queued on a second stream (I->cs) so that they
 * overlap the compute stream (I->s).
 *
 * Run so far with several ranks on one GPU only (--gpus 0,0 and 0,0,0,0: each worker its own
 * NCCL_HOSTID, NCCL's socket transport; tests/gpu/multi.sh and cp.sh, which tests/gpu/run.sh runs
 * on every GPU session): results and byte counts checked, never speed. Not yet run on a machine
 * with several GPUs, where the same scripts are the check. The CPU/MPI communicator
 * (kernels/cpu/comm_mpi.c) has the same contract and is what the CI tests exercise.
 *
 * Ordering: a collective started by all_reduce_start / all_gather_start / sendrecv first makes the
 * communication stream wait for an event recorded on the compute stream (so it reads what the
 * compute queued before it), then queues the NCCL call, then records a "done" event: that event is
 * the request. comm_wait(req) makes the compute stream wait for it on the device (no host block).
 * comm_sync synchronises the compute stream, then polls every outstanding "done" event from the
 * host, checking ncclCommGetAsyncError, under the timeout: the time spent there is the
 * communication that the compute did not hide. On a timeout or an NCCL error the communicator is
 * aborted (ncclCommAbort) and the error names the rank and the call.
 *
 * Exposed communication (comm_wait_ms, kernels/backend.h says how it is measured): a comm_wait
 * on a request that is not yet complete brackets its cudaStreamWaitEvent with two timing events
 * on the compute stream; their distance is the compute stream's stall. The pairs, the host waits
 * and the byte counters live in one ledger per process, shared by the comm_split groups. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <utility>

#include <vector>

#include "kernels/cuda/cuda_common.cuh" /* kernels/backend.h and kernels/comm.h, with C linkage */

namespace glmcu {

struct comm_req {
    bool used = false;
    bool device_waited = false; /* the compute stream waits for it: complete after a sync of s */
    cudaEvent_t done = nullptr;
    char what[112] = "";
};

/* One per process (the world backend's), shared by its comm_split groups. */
struct comm_ledger {
    double wait_ms = 0;                       /* host waits (comm_sync) and resolved stalls */
    double bytes[GLM_COMM_KINDS] = {0, 0, 0, 0};
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> stalls; /* recorded on the compute stream, not yet read */
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pool;   /* read pairs for reuse */
    double delay_ms = -1;                     /* GLMTUNE_COMM_DELAY_MS, read once */
};

struct comm_state {
    std::vector<comm_req> req;
    double timeout_s = 1800.0;
    comm_ledger *led = nullptr;
    bool owns_ledger = false;
};

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

glm_status comm_init(cuda_impl *I) {
    I->cstate = new comm_state();
    I->cstate->led = new comm_ledger();
    I->cstate->owns_ledger = true;
    CU(cudaStreamCreateWithFlags(&I->cs, cudaStreamNonBlocking), "communication stream");
    return GLM_OK;
}

void comm_destroy(cuda_impl *I) {
    if (I->cstate) {
        for (comm_req &r : I->cstate->req)
            if (r.done) cudaEventDestroy(r.done);
        if (I->cstate->owns_ledger) {
            comm_ledger *L = I->cstate->led;
            for (auto &e : L->stalls) cudaEventDestroy(e.first), cudaEventDestroy(e.second);
            for (auto &e : L->pool) cudaEventDestroy(e.first), cudaEventDestroy(e.second);
            delete L;
        }
        delete I->cstate;
        I->cstate = nullptr;
    }
    if (I->cs) cudaStreamDestroy(I->cs);
    I->cs = nullptr;
}

void comm_release_waited(cuda_impl *I) {
    if (!I->cstate) return;
    for (comm_req &r : I->cstate->req)
        if (r.used && r.device_waited) r.used = false;
}

/* Reads the recorded stall pairs (waiting for each pair's second event) into wait_ms. */
static void ledger_resolve(comm_ledger *L) {
    for (auto &e : L->stalls) {
        float ms = 0;
        if (cudaEventSynchronize(e.second) == cudaSuccess && cudaEventElapsedTime(&ms, e.first, e.second) == cudaSuccess)
            L->wait_ms += ms;
        L->pool.push_back(e);
    }
    L->stalls.clear();
    cudaGetLastError(); /* a failed read leaves no sticky error (the next op reports real failures) */
}

#ifdef GLMTUNE_HAVE_NCCL

/* Sleeps GLMTUNE_COMM_DELAY_MS on the communication stream (the test hook of comm_wait_ms). */
static void CUDART_CB delay_fn(void *ms) {
    double d = *(double *)ms;
    struct timespec ts = {(time_t)(d / 1e3), (long)(fmod(d, 1e3) * 1e6)};
    nanosleep(&ts, nullptr);
}

/* A stall bracket on the compute stream: the first event, when any of the requests to be waited
 * for (req < 0: all outstanding ones not yet waited for) is not complete now; else none (*on = 0). */
static glm_status stall_open(cuda_impl *I, int req, int *on, std::pair<cudaEvent_t, cudaEvent_t> *pr) {
    *on = 0;
    comm_state *C = I->cstate;
    int pending = 0;
    for (size_t i = 0; i < C->req.size() && !pending; i++) {
        comm_req &q = C->req[i];
        if (!q.used || q.device_waited || (req >= 0 && (int)i != req)) continue;
        if (cudaEventQuery(q.done) != cudaSuccess) pending = 1;
    }
    cudaGetLastError(); /* cudaErrorNotReady is not an error */
    if (!pending) return GLM_OK;
    comm_ledger *L = C->led;
    if (L->stalls.size() >= 4096) ledger_resolve(L); /* a long run between reads: bound the list */
    if (!L->pool.empty()) {
        *pr = L->pool.back();
        L->pool.pop_back();
    } else {
        CU(cudaEventCreate(&pr->first), "comm_wait timing event");
        CU(cudaEventCreate(&pr->second), "comm_wait timing event");
    }
    CU(cudaEventRecord(pr->first, I->s), "comm_wait timing event");
    *on = 1;
    return GLM_OK;
}

static glm_status stall_close(cuda_impl *I, int on, std::pair<cudaEvent_t, cudaEvent_t> pr) {
    if (!on) return GLM_OK;
    CU(cudaEventRecord(pr.second, I->s), "comm_wait timing event");
    I->cstate->led->stalls.push_back(pr);
    return GLM_OK;
}

static glm_status nccl_fail(const glm_backend *be, ncclResult_t r, const char *what) {
    return glm_err(GLM_ERR_COMM, "rank %d of %d: %s failed: NCCL: %s (%s)", be->rank, be->world, what,
                   ncclGetErrorString(r), ncclGetLastError(IMPL(be)->comm));
}

/* A free request slot with its event; the communication stream made to wait for the compute
 * stream's queued work. */
static glm_status begin(const glm_backend *be, const char *what, int *id) {
    cuda_impl *I = IMPL(be);
    comm_state *C = I->cstate;
    int k = -1;
    for (size_t i = 0; i < C->req.size(); i++)
        if (!C->req[i].used) {
            k = (int)i;
            break;
        }
    if (k < 0) {
        GLM_ASSERT(C->req.size() < 4096, "rank %d: more than 4096 communication requests outstanding (a missing comm_wait)",
                   be->rank);
        C->req.emplace_back();
        k = (int)C->req.size() - 1;
        CU(cudaEventCreateWithFlags(&C->req[k].done, cudaEventDisableTiming), "communication event");
    }
    comm_req &r = C->req[k];
    r.used = true;
    r.device_waited = false;
    snprintf(r.what, sizeof r.what, "%s", what);
    cudaEvent_t ready = r.done; /* reused: recorded on s, waited by cs, then re-recorded on cs */
    CU(cudaEventRecord(ready, I->s), what);
    CU(cudaStreamWaitEvent(I->cs, ready, 0), what);
    comm_ledger *L = C->led;
    if (L->delay_ms < 0) L->delay_ms = glm_comm_delay_ms();
    if (L->delay_ms > 0) CU(cudaLaunchHostFunc(I->cs, delay_fn, &L->delay_ms), "GLMTUNE_COMM_DELAY_MS");
    *id = k;
    return GLM_OK;
}

static glm_status finish(const glm_backend *be, int id, ncclResult_t r) {
    cuda_impl *I = IMPL(be);
    comm_req &q = I->cstate->req[id];
    if (r != ncclSuccess) {
        q.used = false;
        return nccl_fail(be, r, q.what);
    }
    CU(cudaEventRecord(q.done, I->cs), q.what);
    return GLM_OK;
}

static glm_status cu_all_reduce_start(const glm_backend *be, float *x, int64_t n, int *req) {
    *req = -1;
    if (be->world <= 1 || n <= 0) return GLM_OK;
    char what[112];
    snprintf(what, sizeof what, "ncclAllReduce (sum of %lld floats)", (long long)n);
    GLM_TRY(begin(be, what, req));
    IMPL(be)->cstate->led->bytes[GLM_COMM_ALL_REDUCE] += glm_comm_all_reduce_bytes(4.0 * (double)n, be->world);
    return finish(be, *req, ncclAllReduce(x, x, (size_t)n, ncclFloat, ncclSum, IMPL(be)->comm, IMPL(be)->cs));
}

static glm_status cu_all_gather_start(const glm_backend *be, void *dst, const void *src, size_t shard_bytes, int *req) {
    *req = -1;
    if (be->world <= 1) {
        if (dst != src && shard_bytes)
            CU(cudaMemcpyAsync(dst, src, shard_bytes, cudaMemcpyDeviceToDevice, IMPL(be)->s), "all_gather (world 1)");
        return GLM_OK;
    }
    char what[112];
    snprintf(what, sizeof what, "ncclAllGather (%zu bytes per rank)", shard_bytes);
    GLM_TRY(begin(be, what, req));
    IMPL(be)->cstate->led->bytes[GLM_COMM_ALL_GATHER] += glm_comm_all_gather_bytes((double)shard_bytes, be->world);
    return finish(be, *req, ncclAllGather(src, dst, shard_bytes, ncclInt8, IMPL(be)->comm, IMPL(be)->cs));
}

static glm_status cu_sendrecv_start(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes,
                                    int *req) {
    *req = -1;
    cuda_impl *I = IMPL(be);
    if (be->world <= 1) {
        if (recv != send && bytes) CU(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, I->s), "sendrecv (world 1)");
        return GLM_OK;
    }
    char what[112];
    snprintf(what, sizeof what, "ncclSend/ncclRecv (%zu bytes to rank %d, from rank %d of %d)", bytes, dst, src, be->world);
    GLM_TRY(begin(be, what, req));
    if (dst != be->rank) I->cstate->led->bytes[GLM_COMM_SENDRECV] += (double)bytes;
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclSend(send, bytes, ncclInt8, dst, I->comm, I->cs);
    if (r == ncclSuccess) r = ncclRecv(recv, bytes, ncclInt8, src, I->comm, I->cs);
    ncclResult_t r2 = ncclGroupEnd();
    glm_status st = finish(be, *req, r != ncclSuccess ? r : r2);
    if (st) *req = -1;
    return st;
}

static glm_status cu_sendrecv(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes) {
    int id;
    GLM_TRY(cu_sendrecv_start(be, send, dst, recv, src, bytes, &id));
    if (id < 0) return GLM_OK;
    cuda_impl *I = IMPL(be);
    comm_req &q = I->cstate->req[id];
    int on;
    std::pair<cudaEvent_t, cudaEvent_t> pr;
    GLM_TRY(stall_open(I, id, &on, &pr));
    CU(cudaStreamWaitEvent(I->s, q.done, 0), q.what);
    q.device_waited = true;
    return stall_close(I, on, pr);
}

static glm_status cu_comm_wait(const glm_backend *be, int req) {
    cuda_impl *I = IMPL(be);
    if (be->world <= 1) return GLM_OK;
    comm_state *C = I->cstate;
    GLM_ASSERT(req < (int)C->req.size() && (req < 0 || C->req[req].used),
               "rank %d: comm_wait on request %d, which is not outstanding", be->rank, req);
    int on;
    std::pair<cudaEvent_t, cudaEvent_t> pr;
    GLM_TRY(stall_open(I, req, &on, &pr));
    for (size_t i = 0; i < C->req.size(); i++) {
        comm_req &q = C->req[i];
        if (!q.used || q.device_waited || (req >= 0 && (int)i != req)) continue;
        CU(cudaStreamWaitEvent(I->s, q.done, 0), q.what);
        q.device_waited = true;
    }
    return stall_close(I, on, pr);
}

static glm_status cu_comm_sync(const glm_backend *be) {
    cuda_impl *I = IMPL(be);
    if (be->world <= 1) return GLM_OK;
    comm_state *C = I->cstate;
    CU(cudaStreamSynchronize(I->s), "comm_sync (the compute before the wait)");
    double t0 = now_s();
    long sleep_ns = 0;
    for (size_t i = 0; i < C->req.size(); i++) {
        comm_req &q = C->req[i];
        if (!q.used) continue;
        for (;;) {
            cudaError_t e = cudaEventQuery(q.done);
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) {
                q.used = false;
                return glm_err(GLM_ERR_COMM, "rank %d of %d: %s: %s", be->rank, be->world, q.what, cudaGetErrorString(e));
            }
            ncclResult_t ar = ncclSuccess;
            ncclCommGetAsyncError(I->comm, &ar);
            if (ar != ncclSuccess && ar != ncclInProgress) {
                q.used = false;
                glm_status st = nccl_fail(be, ar, q.what);
                ncclCommAbort(I->comm);
                I->comm = nullptr;
                return st;
            }
            double el = now_s() - t0;
            if (el > C->timeout_s) {
                q.used = false;
                ncclCommAbort(I->comm); /* frees the stuck kernels so the process can exit */
                I->comm = nullptr;
                C->led->wait_ms += el * 1e3;
                return glm_err(GLM_ERR_COMM, "rank %d of %d: %s did not complete within %g s: another rank has "
                               "stopped, died or is stuck (its own messages say which); hint: --ddp-timeout SECONDS sets "
                               "this limit", be->rank, be->world, q.what, C->timeout_s);
            }
            sleep_ns = sleep_ns ? (sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2) : 2000;
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, nullptr);
        }
        q.used = false;
    }
    C->led->wait_ms += (now_s() - t0) * 1e3;
    return GLM_OK;
}

static glm_status cu_all_reduce(const glm_backend *be, float *x, int64_t n) {
    int req;
    GLM_TRY(cu_all_reduce_start(be, x, n, &req));
    return req < 0 ? GLM_OK : cu_comm_wait(be, req);
}

static glm_status cu_all_reduce_host(const glm_backend *be, double *x, int n) {
    if (be->world <= 1 || n <= 0) return GLM_OK;
    cuda_impl *I = IMPL(be);
    void *d;
    GLM_TRY(scratch(I, SCR_COMM, (size_t)n * 8, &d));
    CU(cudaMemcpyAsync(d, x, (size_t)n * 8, cudaMemcpyHostToDevice, I->s), "all_reduce_host");
    char what[112];
    snprintf(what, sizeof what, "ncclAllReduce (sum of %d doubles)", n);
    int id;
    GLM_TRY(begin(be, what, &id));
    I->cstate->led->bytes[GLM_COMM_HOST] += glm_comm_all_reduce_bytes(8.0 * n, be->world);
    GLM_TRY(finish(be, id, ncclAllReduce(d, d, (size_t)n, ncclDouble, ncclSum, I->comm, I->cs)));
    GLM_TRY(cu_comm_sync(be));
    CU(cudaMemcpy(x, d, (size_t)n * 8, cudaMemcpyDeviceToHost), "all_reduce_host");
    return GLM_OK;
}

static void cu_comm_abort(const glm_backend *be, int code) {
    cuda_impl *I = IMPL(be);
    if (be->world <= 1) return;
    if (I->comm) ncclCommAbort(I->comm);
    I->comm = nullptr;
    glm_mpi_abort(code); /* under mpirun / srun: stops the job; else returns */
}

#else /* no NCCL: world 1 only (creating a backend of world > 1 fails) */

static glm_status cu_all_reduce_start(const glm_backend *be, float *x, int64_t n, int *req) {
    *req = -1;
    return GLM_OK;
}
static glm_status cu_all_gather_start(const glm_backend *be, void *dst, const void *src, size_t shard_bytes, int *req) {
    *req = -1;
    if (dst != src && shard_bytes)
        CU(cudaMemcpyAsync(dst, src, shard_bytes, cudaMemcpyDeviceToDevice, IMPL(be)->s), "all_gather (world 1)");
    return GLM_OK;
}
static glm_status cu_sendrecv(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes) {
    if (recv != send && bytes) CU(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, IMPL(be)->s), "sendrecv");
    return GLM_OK;
}
static glm_status cu_sendrecv_start(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes,
                                    int *req) {
    *req = -1;
    return cu_sendrecv(be, send, dst, recv, src, bytes);
}
static glm_status cu_comm_wait(const glm_backend *be, int req) { return GLM_OK; }
static glm_status cu_comm_sync(const glm_backend *be) { return GLM_OK; }
static glm_status cu_all_reduce(const glm_backend *be, float *x, int64_t n) { return GLM_OK; }
static glm_status cu_all_reduce_host(const glm_backend *be, double *x, int n) { return GLM_OK; }
static void cu_comm_abort(const glm_backend *be, int code) {}

#endif

/* A group of ranks (comm_split): a cuda_impl that shares the parent's device, compute stream,
 * cuBLAS handles and memory accounting, with its own NCCL communicator (ncclCommSplit), its own
 * communication stream and request table, and its own scratch (all_reduce_host uses one).
 * Run with several ranks on one GPU (tests/gpu/cp.sh, its check), not yet on several GPUs. */
static glm_status cu_comm_split(const glm_backend *be, int color, int key, const glm_backend **out) {
    *out = nullptr;
    cuda_impl *I = IMPL(be);
    cuda_impl *J = (cuda_impl *)calloc(1, sizeof *J);
    if (!J) return glm_err(GLM_ERR_NOMEM, "comm_split: out of memory");
    *J = *I;
    for (int i = 0; i < SCR_COUNT; i++) {
        J->scratch[i] = nullptr;
        J->scratch_cap[i] = 0;
    }
    J->cs = nullptr;
    J->cstate = nullptr;
    int rank = 0, world = 1;
#ifdef GLMTUNE_HAVE_NCCL
    J->comm = nullptr;
#endif
    glm_status st = comm_init(J);
    if (st) {
        comm_destroy(J);
        free(J);
        return st;
    }
    J->cstate->timeout_s = I->cstate->timeout_s;
    delete J->cstate->led; /* the group shares the process's ledger */
    J->cstate->led = I->cstate->led;
    J->cstate->owns_ledger = false;
#ifdef GLMTUNE_HAVE_NCCL
    if (be->world > 1) {
        ncclResult_t r = ncclCommSplit(I->comm, color, key, &J->comm, nullptr);
        if (r == ncclSuccess) r = ncclCommUserRank(J->comm, &rank);
        if (r == ncclSuccess) r = ncclCommCount(J->comm, &world);
        if (r != ncclSuccess) {
            st = glm_err(GLM_ERR_COMM, "rank %d of %d: ncclCommSplit (color %d, key %d) failed: NCCL: %s", be->rank,
                         be->world, color, key, ncclGetErrorString(r));
            if (J->comm) ncclCommDestroy(J->comm);
            comm_destroy(J);
            free(J);
            return st;
        }
    }
#endif
    J->be.impl = J;
    J->be.rank = rank;
    J->be.world = world;
    *out = &J->be;
    return GLM_OK;
}

static void cu_comm_free(const glm_backend *sub) {
    if (!sub) return;
    cuda_impl *J = IMPL(sub);
    if (J->cs) cudaStreamSynchronize(J->cs);
#ifdef GLMTUNE_HAVE_NCCL
    if (J->comm) ncclCommDestroy(J->comm);
#endif
    comm_destroy(J);
    for (int i = 0; i < SCR_COUNT; i++)
        if (J->scratch[i]) cudaFree(J->scratch[i]);
    free(J);
}

static void cu_comm_progress(const glm_backend *be) {}

static void cu_set_comm_timeout(const glm_backend *be, double s) { IMPL(be)->cstate->timeout_s = s > 0 ? s : 1800.0; }

static double cu_comm_wait_ms(const glm_backend *be, int reset) {
    comm_ledger *L = IMPL(be)->cstate->led;
    ledger_resolve(L);
    double v = L->wait_ms;
    if (reset) L->wait_ms = 0;
    return v;
}

static void cu_comm_bytes(const glm_backend *be, double *bytes, int reset) {
    comm_ledger *L = IMPL(be)->cstate->led;
    for (int k = 0; k < GLM_COMM_KINDS; k++) {
        bytes[k] = L->bytes[k];
        if (reset) L->bytes[k] = 0;
    }
}

void comm_ops(glm_backend *b) {
    b->all_reduce = cu_all_reduce;
    b->all_reduce_start = cu_all_reduce_start;
    b->all_gather_start = cu_all_gather_start;
    b->comm_wait = cu_comm_wait;
    b->comm_sync = cu_comm_sync;
    b->comm_progress = cu_comm_progress;
    b->all_reduce_host = cu_all_reduce_host;
    b->sendrecv = cu_sendrecv;
    b->sendrecv_start = cu_sendrecv_start;
    b->comm_split = cu_comm_split;
    b->comm_free = cu_comm_free;
    b->set_comm_timeout = cu_set_comm_timeout;
    b->comm_wait_ms = cu_comm_wait_ms;
    b->comm_bytes = cu_comm_bytes;
    b->comm_abort = cu_comm_abort;
}

}  // namespace glmcu
