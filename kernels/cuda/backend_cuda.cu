/* kernels/cuda/backend_cuda.cu: the CUDA backend's state, memory, profiling and op table
 * (docs/design.md §4 precision contract; each op's contract is in kernels/backend.h, each kernel
 * family in its own file, see kernels/cuda/cuda_common.cuh).
 *
 * Storage: base weights and activations bf16 (be->weight_dtype = be->act_dtype = GLM_DT_BF16);
 * LoRA weights, their grads, AdamW moments, rstd and lse fp32. Arithmetic: every kernel loads
 * bf16 as float, computes in fp32 and rounds to bf16 once, at the store. GEMMs: cuBLASLt, fp32
 * accumulation, no TF32. Attention: bf16 tensor-core tiles, fp32 accumulation and softmax.
 *
 * The ops are queued on one stream per backend, the host <-> device copies that overlap them
 * (upload_async / download_async) on a second, NCCL's collectives on a third (comm.cu). Ops that
 * return a host value (sumsq, cross_entropy, download*, embedding's range check) synchronise.
 * Every CUDA / cuBLAS / NCCL call is checked, and the last error is read after every launch;
 * GLMTUNE_DEBUG_SYNC=1 also synchronises after each op (and copy) and names the one that
 * faulted. Needs compute capability 8.0 or later (the tensor-core instructions of the attention
 * kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/formats.h"

namespace glmcu {

/* ---------------------------------------------------------------------------- shared helpers */

const char *blas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "alloc failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "arch mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown status";
    }
}

glm_status sync_check(cuda_impl *I, const char *op) {
    cudaError_t e = cudaStreamSynchronize(I->s);
    if (e != cudaSuccess)
        return glm_err(GLM_ERR_DEVICE, "cuda backend: %s failed on the device (GLMTUNE_DEBUG_SYNC): %s", op,
                       cudaGetErrorString(e));
    return GLM_OK;
}

typedef std::unordered_map<void *, size_t> size_map;

static void account(cuda_impl *I, void *p, size_t bytes) {
    (*(size_map *)I->sizes)[p] = bytes;
    I->in_use += bytes;
    if (I->in_use > I->peak) I->peak = I->in_use;
}
static void unaccount(cuda_impl *I, void *p) {
    size_map &m = *(size_map *)I->sizes;
    auto it = m.find(p);
    if (it != m.end()) {
        I->in_use -= it->second;
        m.erase(it);
    }
}

const char *scratch_name(int slot) {
    static const char *const names[SCR_COUNT] = {
        "scratch: a GEMM's operand A widened to f32", "scratch: a GEMM's operand B widened to f32",
        "scratch: a GEMM's f32 result", "scratch: reductions (cross-entropy, sum of squares)",
        "scratch: attention's row statistics (D)", "scratch: attention's document bounds",
        "scratch: all_reduce_host's doubles", "scratch: cuDNN attention's document runs",
        "scratch: cuDNN attention's ragged offsets", "scratch: cuDNN attention's log-sum-exp copy",
        "scratch: cuDNN attention's workspace", "scratch: 4-bit quantization's workspace",
        "scratch: FP8 GEMM's quantized activation block", "scratch: FP8 GEMM's scales",
        "scratch: FP8 GEMM's f32 tile"};
    return slot >= 0 && slot < SCR_COUNT ? names[slot] : "scratch";
}

/* Grows slot to n bytes (exact), within the cap. */
static glm_status scratch_grow(cuda_impl *I, int slot, size_t n) {
    if (I->scratch[slot]) {
        CU(cudaStreamSynchronize(I->s), "scratch");
        unaccount(I, I->scratch[slot]);
        CU(cudaFree(I->scratch[slot]), "scratch");
    }
    I->scratch[slot] = NULL;
    I->scratch_cap[slot] = 0;
    GLM_TRY(cap_check(I, n, scratch_name(slot)));
    cudaError_t e = cudaMalloc(&I->scratch[slot], n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        I->scratch[slot] = NULL;
        return glm_err(e == cudaErrorMemoryAllocation ? GLM_ERR_NOMEM : GLM_ERR_DEVICE,
                       "cuda backend: cannot allocate %zu bytes of %s: %s", n, scratch_name(slot), cudaGetErrorString(e));
    }
    account(I, I->scratch[slot], n);
    I->scratch_cap[slot] = n;
    return GLM_OK;
}

glm_status scratch(cuda_impl *I, int slot, size_t bytes, void **out) {
    if (bytes > I->scratch_cap[slot]) {
        /* a quarter more than asked, so that slightly larger calls do not grow it again; exactly
         * what is asked where the quarter would pass the cap (scratch_reserve sizes slots exactly) */
        size_t n = bytes + bytes / 4 + 256;
        if (I->cap && cap_check(I, n, scratch_name(slot)) != GLM_OK) n = bytes;
        GLM_TRY(scratch_grow(I, slot, n));
    }
    *out = I->scratch[slot];
    return GLM_OK;
}

glm_status scratch_exact(cuda_impl *I, int slot, size_t bytes) {
    return bytes > I->scratch_cap[slot] ? scratch_grow(I, slot, bytes) : GLM_OK;
}

/* kernels/formats.h's rounding, the one definition */
uint16_t host_f2bf(float f) { return glm_f32_to_bf16(f); }
float host_bf2f(uint16_t h) { return glm_bf16_to_f32(h); }

/* ---------------------------------------------------------------------------- memory */

static glm_status cu_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    cuda_impl *I = IMPL(be);
    void *p = NULL;
    size_t n = bytes ? bytes : 256;
    GLM_TRY(cap_check(I, n, what));
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the allocation error */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return glm_err(e == cudaErrorMemoryAllocation ? GLM_ERR_NOMEM : GLM_ERR_DEVICE,
                       "cuda backend: cannot allocate %.2f GiB for %s on device %d (%.2f GiB free of %.2f, %.2f held by "
                       "glmtune): %s",
                       bytes / 1073741824.0, what ? what : "a buffer", I->device, fr / 1073741824.0, tot / 1073741824.0,
                       I->in_use / 1073741824.0, cudaGetErrorString(e));
    }
    account(I, p, n);
    *out = p;
    return GLM_OK;
}

static void cu_free(const glm_backend *be, void *p) {
    if (!p) return;
    unaccount(IMPL(be), p);
    cudaFree(p);
}

static glm_status cu_upload(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return GLM_OK;
    cuda_impl *I = IMPL(be);
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, I->s), "upload");
    CU(cudaStreamSynchronize(I->s), "upload");
    return GLM_OK;
}

glm_status cu_download(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return GLM_OK;
    cuda_impl *I = IMPL(be);
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, I->s), "download");
    CU(cudaStreamSynchronize(I->s), "download");
    return GLM_OK;
}

static glm_status cu_host_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *out = NULL;
        return glm_err(GLM_ERR_NOMEM, "cuda backend: cannot allocate %.2f GiB of page-locked host memory for %s: %s",
                       bytes / 1073741824.0, what, cudaGetErrorString(e));
    }
    return GLM_OK;
}

static void cu_host_free(const glm_backend *be, void *p) {
    if (p) cudaFreeHost(p);
}

/* The copy stream's side of upload_async / download_async (kernels/backend.h). */
static glm_status copy_async(cuda_impl *I, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int after_ops,
                             uint64_t *ticket, const char *op) {
    const int NEV = (int)(sizeof I->copy_ev / sizeof I->copy_ev[0]);
    if (after_ops) { /* the ops queued so far (the source's writers, the destination's readers) first */
        CU(cudaEventRecord(I->ops_ev, I->s), op);
        CU(cudaStreamWaitEvent(I->xs, I->ops_ev, 0), op);
    }
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, kind, I->xs), op);
    uint64_t t = ++I->n_copies;
    CU(cudaEventRecord(I->copy_ev[t % NEV], I->xs), op);
    *ticket = t;
    if (I->debug_sync) {
        cudaError_t e = cudaStreamSynchronize(I->xs);
        if (e != cudaSuccess)
            return glm_err(GLM_ERR_DEVICE, "cuda backend: %s failed on the device (GLMTUNE_DEBUG_SYNC): %s", op,
                           cudaGetErrorString(e));
    }
    return GLM_OK;
}

static glm_status cu_upload_async(const glm_backend *be, void *dst, const void *src, size_t bytes, int after_ops,
                                  uint64_t *ticket) {
    return copy_async(IMPL(be), dst, src, bytes, cudaMemcpyHostToDevice, after_ops, ticket, "upload_async");
}

static glm_status cu_download_async(const glm_backend *be, void *dst, const void *src, size_t bytes, uint64_t *ticket) {
    return copy_async(IMPL(be), dst, src, bytes, cudaMemcpyDeviceToHost, 1, ticket, "download_async");
}

static glm_status cu_copy_wait(const glm_backend *be, uint64_t ticket) {
    cuda_impl *I = IMPL(be);
    const int NEV = (int)(sizeof I->copy_ev / sizeof I->copy_ev[0]);
    if (ticket == 0) return GLM_OK;
    GLM_ASSERT(ticket <= I->n_copies, "cuda backend: copy_wait: ticket %llu was never issued", (unsigned long long)ticket);
    CU(cudaStreamWaitEvent(I->s, I->copy_ev[ticket % NEV], 0), "copy_wait");
    return GLM_OK;
}

const int64_t CONV_CHUNK = 1 << 22; /* elements per host conversion chunk (8 MiB of bf16) */

static glm_status cu_upload_f32(const glm_backend *be, void *dst, glm_dtype dt, const float *src, int64_t n) {
    if (n <= 0) return GLM_OK;
    if (dt == GLM_DT_F32) return cu_upload(be, dst, src, (size_t)n * 4);
    std::vector<uint16_t> tmp((size_t)std::min(n, CONV_CHUNK));
    for (int64_t i0 = 0; i0 < n; i0 += CONV_CHUNK) {
        int64_t k = std::min(CONV_CHUNK, n - i0);
        for (int64_t i = 0; i < k; i++) tmp[i] = host_f2bf(src[i0 + i]);
        GLM_TRY(cu_upload(be, (uint16_t *)dst + i0, tmp.data(), (size_t)k * 2));
    }
    return GLM_OK;
}

static glm_status cu_download_f32(const glm_backend *be, float *dst, glm_dtype dt, const void *src, int64_t n) {
    if (n <= 0) return GLM_OK;
    if (dt == GLM_DT_F32) return cu_download(be, dst, src, (size_t)n * 4);
    std::vector<uint16_t> tmp((size_t)std::min(n, CONV_CHUNK));
    for (int64_t i0 = 0; i0 < n; i0 += CONV_CHUNK) {
        int64_t k = std::min(CONV_CHUNK, n - i0);
        GLM_TRY(cu_download(be, tmp.data(), (const uint16_t *)src + i0, (size_t)k * 2));
        for (int64_t i = 0; i < k; i++) dst[i0 + i] = host_bf2f(tmp[i]);
    }
    return GLM_OK;
}

static void cu_set_attention_ws_cap(const glm_backend *be, double bytes) { IMPL(be)->attn_ws_cap = bytes; }

static glm_status cu_zero(const glm_backend *be, void *p, size_t bytes) {
    if (bytes) CU(cudaMemsetAsync(p, 0, bytes, IMPL(be)->s), "zero");
    return GLM_OK;
}

static glm_status cu_copy(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, IMPL(be)->s), "copy");
    return GLM_OK;
}

static glm_status cu_sync(const glm_backend *be) {
    CU(cudaStreamSynchronize(IMPL(be)->s), "sync");
    CU(cudaStreamSynchronize(IMPL(be)->xs), "sync (copies)");
    comm_release_waited(IMPL(be)); /* what the compute stream waited for is complete now */
    return GLM_OK;
}

static void cu_mem_info(const glm_backend *be, size_t *free_b, size_t *total_b, size_t *in_use, size_t *peak) {
    cuda_impl *I = IMPL(be);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) cudaGetLastError();
    if (free_b) *free_b = fr;
    if (total_b) *total_b = tot;
    if (in_use) *in_use = I->in_use;
    if (peak) *peak = I->peak;
}

static void cu_mem_reset_peak(const glm_backend *be) {
    cuda_impl *I = IMPL(be);
    I->peak = I->in_use;
}

/* ---------------------------------------------------------------------------- profiling */

struct prof_state {
    bool on = false;
    int cur = GLM_PHASE_OTHER;
    std::vector<cudaEvent_t> ev; /* pool, grows on first use only */
    std::vector<int> ph;         /* phase that starts at event i */
    size_t n = 0;
};

static cudaEvent_t prof_event(cuda_impl *I) {
    prof_state *P = I->prof;
    if (P->n == P->ev.size()) {
        cudaEvent_t e;
        if (cudaEventCreate(&e) != cudaSuccess) {
            cudaGetLastError();
            return NULL;
        }
        P->ev.push_back(e);
        P->ph.push_back(0);
    }
    return P->ev[P->n];
}

static void cu_phase(const glm_backend *be, int p) {
    cuda_impl *I = IMPL(be);
    prof_state *P = I->prof;
    if (!P->on || p == P->cur || p < 0 || p >= GLM_PHASE_COUNT) return;
    cudaEvent_t e = prof_event(I);
    if (!e || cudaEventRecord(e, I->s) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    P->ph[P->n++] = p;
    P->cur = p;
}

static void cu_prof_enable(const glm_backend *be, int on) {
    cuda_impl *I = IMPL(be);
    I->prof->on = on != 0;
    I->prof->n = 0;
    I->prof->cur = -1;
    if (on) cu_phase(be, GLM_PHASE_OTHER);
}

static int cu_supports(const glm_backend *be, glm_feature f) {
    (void)be;
    switch (f) {
    case GLM_FEATURE_RING_ATTENTION: return 1; /* kernels/cuda/attention.cu's block kernels */
#ifdef GLMTUNE_HAVE_NCCL
    case GLM_FEATURE_COMM: return 1;
#else
    case GLM_FEATURE_COMM: return 0;
#endif
    case GLM_FEATURE_WEIGHT_4BIT: return 1; /* kernels/cuda/quant4.cu */
    case GLM_FEATURE_FP8: return IMPL(be)->sm >= 89; /* kernels/cuda/fp8.cu: FP8 tensor cores */
    default: return 0;
    }
}

static glm_status cu_prof_collect(const glm_backend *be, double *ms) {
    cuda_impl *I = IMPL(be);
    prof_state *P = I->prof;
    if (!P->on) return GLM_OK;
    int last = P->cur;
    P->cur = -1;
    cu_phase(be, last); /* closing event; the next interval starts in the same phase */
    CU(cudaStreamSynchronize(I->s), "profiling");
    for (size_t i = 0; i + 1 < P->n; i++) {
        float t = 0;
        CU(cudaEventElapsedTime(&t, P->ev[i], P->ev[i + 1]), "profiling");
        ms[P->ph[i]] += t;
    }
    /* keep the closing event as the first of the next interval */
    if (P->n) {
        std::swap(P->ev[0], P->ev[P->n - 1]);
        P->ph[0] = last;
        P->n = 1;
    }
    P->cur = last;
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- create */

static void destroy(cuda_impl *I) {
    if (!I) return;
    for (int i = 0; i < SCR_COUNT; i++)
        if (I->scratch[i]) cudaFree(I->scratch[i]);
    if (I->flag) cudaFree(I->flag);
    attn_ragged_destroy(I);
    fp8_destroy(I);
    gemm_destroy(I);
    if (I->blas) cublasDestroy(I->blas);
#ifdef GLMTUNE_HAVE_NCCL
    if (I->comm) ncclCommDestroy(I->comm);
#endif
    comm_destroy(I);
    if (I->prof) {
        for (cudaEvent_t e : I->prof->ev) cudaEventDestroy(e);
        delete I->prof;
    }
    delete (size_map *)I->sizes;
    if (I->xs) cudaStreamDestroy(I->xs);
    if (I->ops_ev) cudaEventDestroy(I->ops_ev);
    for (cudaEvent_t e : I->copy_ev)
        if (e) cudaEventDestroy(e);
    if (I->s) cudaStreamDestroy(I->s);
    free(I);
}

static glm_status create(int device, int rank, int world, const unsigned char *nccl_id, cuda_impl **out) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        /* no GPU: the runtime says "driver version is insufficient" where there is no driver at all */
        const bool none = n == 0 || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;
        return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: %s (CUDA runtime: %s); hint: --device cpu, or `glmtune train "
                       "--dry-run --max-gpu-memory G` to plan for a GPU of G GiB without one",
                       none ? "no NVIDIA GPU with a working driver on this machine" : "CUDA could not list the devices",
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n)
        return glm_err(GLM_ERR_ARG, "cuda backend: device %d does not exist (this machine has %d); hint: device numbers "
                       "0 to %d (--gpus N takes the first N)", device, n, n - 1);
    if (world < 1 || rank < 0 || rank >= world)
        return glm_err(GLM_ERR_ARG, "cuda backend: rank %d of world %d is not valid", rank, world);
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return glm_err(GLM_ERR_DEVICE, "cuda backend: cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
    if (prop.major < 8)
        return glm_err(GLM_ERR_UNSUPPORTED,
                       "cuda backend: device %d (%s) has compute capability %d.%d; glmtune needs 8.0 or later (Ampere: A100, "
                       "RTX 30xx; Ada: RTX 40xx; Hopper: H100/H200) for bf16 tensor cores; hint: --device cpu",
                       device, prop.name, prop.major, prop.minor);
#ifndef GLMTUNE_HAVE_NCCL
    if (world > 1)
        return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: %d ranks need NCCL, and this build has none; hint: rebuild with "
                       "NCCL (nccl.h, libnccl.so) installed", world);
#endif
    cuda_impl *I = (cuda_impl *)calloc(1, sizeof *I);
    if (!I) return glm_err(GLM_ERR_NOMEM, "out of memory");
    I->device = device;
    I->sm = prop.major * 10 + prop.minor;
    I->sizes = new size_map();
    I->prof = new prof_state();
    const char *dbg = getenv("GLMTUNE_DEBUG_SYNC");
    I->debug_sync = dbg && *dbg && strcmp(dbg, "0") != 0;
    const char *am;
    I->attn_ws_cap = -1;
    I->attn_mode = glm_attention_env(&am);
    glm_status st = GLM_OK;
    cublasStatus_t bs;
    mem_probe mp;
    mem_probe_start(device, &mp); /* the device's used memory before this process's context */
#define FAIL_IF(cond, ...)                                                                                               \
    if (cond) {                                                                                                          \
        st = glm_err(GLM_ERR_DEVICE, __VA_ARGS__);                                                                       \
        goto fail;                                                                                                       \
    }
    e = cudaSetDevice(device);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
    mem_probe_context(I, &mp);
    if (I->attn_mode < 0) {
        st = glm_err(GLM_ERR_ARG, "GLMTUNE_ATTENTION=%s: " GLM_ATTENTION_ENV_HINT, am);
        goto fail;
    }
    e = cudaStreamCreateWithFlags(&I->s, cudaStreamNonBlocking);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaStreamCreate: %s", cudaGetErrorString(e));
    e = cudaStreamCreateWithFlags(&I->xs, cudaStreamNonBlocking);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaStreamCreate (copies): %s", cudaGetErrorString(e));
    e = cudaEventCreateWithFlags(&I->ops_ev, cudaEventDisableTiming);
    for (cudaEvent_t &ev : I->copy_ev)
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaEventCreate (copies): %s", cudaGetErrorString(e));
    e = cudaMalloc(&I->flag, 64);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaMalloc: %s", cudaGetErrorString(e));
    bs = cublasCreate(&I->blas);
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasCreate: %s", blas_name(bs));
    bs = cublasSetStream(I->blas, I->s);
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasSetStream: %s", blas_name(bs));
    bs = cublasSetMathMode(I->blas, CUBLAS_DEFAULT_MATH); /* fp32 GEMMs stay fp32 (no TF32) */
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasSetMathMode: %s", blas_name(bs));
    if ((st = gemm_init(I))) goto fail;
    /* cuBLAS's own GEMMs (gemm.cu's fallback) share cuBLASLt's workspace (one stream: never at the
     * same time) instead of allocating their own on first use, outside the accounting */
    bs = cublasSetWorkspace(I->blas, I->lt_ws, LT_WS_BYTES);
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasSetWorkspace: %s", blas_name(bs));
    if ((st = attention_init(I))) goto fail;
    if ((st = comm_init(I))) goto fail;
#ifdef GLMTUNE_HAVE_NCCL
    if (world > 1) {
        if (!nccl_id) {
            st = glm_err(GLM_ERR_ARG, "cuda backend: %d ranks need an NCCL unique id (glm_cuda_nccl_id on rank 0)", world);
            goto fail;
        }
        ncclUniqueId id;
        memcpy(id.internal, nccl_id, sizeof id.internal);
        ncclResult_t r = ncclCommInitRank(&I->comm, world, id, rank);
        if (r != ncclSuccess) {
            st = glm_err(GLM_ERR_COMM, "cuda backend: ncclCommInitRank (rank %d of %d): %s", rank, world, ncclGetErrorString(r));
            goto fail;
        }
    }
#endif
#undef FAIL_IF
    {
        glm_backend *b = &I->be;
        b->name = "cuda";
        b->weight_dtype = GLM_DT_BF16;
        b->act_dtype = GLM_DT_BF16;
        b->acc_dtype = GLM_DT_F32;
        b->rank = rank;
        b->world = world;
        b->impl = I;
        b->alloc = cu_alloc;
        b->free = cu_free;
        b->upload = cu_upload;
        b->host_alloc = cu_host_alloc;
        b->host_free = cu_host_free;
        b->upload_async = cu_upload_async;
        b->download_async = cu_download_async;
        b->copy_wait = cu_copy_wait;
        b->download = cu_download;
        b->upload_f32 = cu_upload_f32;
        b->download_f32 = cu_download_f32;
        b->zero = cu_zero;
        b->copy = cu_copy;
        b->matmul = cu_matmul;
        b->add_bias = cu_add_bias;
        b->axpy = cu_axpy;
        b->dropout = cu_dropout;
        b->cast = cu_cast;
        b->cast_2d = cu_cast_2d;
        b->fill_normal = cu_fill_normal;
        b->set_attention_ws_cap = cu_set_attention_ws_cap;
        b->weight_quantize = cu_weight_quantize;
        b->weight_dequantize = cu_weight_dequantize;
        b->fp8_quantize = cu_fp8_quantize;
        b->fp8_matmul = cu_fp8_matmul;
        b->fp8_transpose = cu_fp8_transpose;
        b->embedding = cu_embedding;
        b->rmsnorm_fwd = cu_rmsnorm_fwd;
        b->rmsnorm_bwd = cu_rmsnorm_bwd;
        b->rope = cu_rope;
        b->swiglu_fwd = cu_swiglu_fwd;
        b->swiglu_bwd = cu_swiglu_bwd;
        b->attention_fwd = cu_attention_fwd;
        b->attention_bwd = cu_attention_bwd;
        b->attention_delta = cu_attention_delta;
        b->attention_block_fwd = cu_attention_block_fwd;
        b->attention_block_bwd = cu_attention_block_bwd;
        b->cross_entropy = cu_cross_entropy;
        b->adamw = cu_adamw;
        b->sumsq = cu_sumsq;
        comm_ops(b); /* all_reduce, all_gather_start, comm_wait, ... (comm.cu) */
        b->sync = cu_sync;
        b->mem_info = cu_mem_info;
        b->mem_reset_peak = cu_mem_reset_peak;
        b->prof_enable = cu_prof_enable;
        b->phase = cu_phase;
        b->prof_collect = cu_prof_collect;
        b->supports = cu_supports;
        mem_ops(b); /* mem_process, mem_overhead, set_mem_cap, scratch_need, scratch_reserve (memory.cu) */
    }
    mem_probe_end(I); /* the context, handles and workspaces made so far: the overhead */
    *out = I;
    return GLM_OK;
fail:
    destroy(I);
    return st;
}

}  // namespace glmcu

/* ---------------------------------------------------------------------------- public */

using namespace glmcu;

/* The GLM_BACKEND_ABI_VERSION this module was built with (kernels/cuda_loader.c checks it). */
extern "C" int glm_cuda_abi_version(void) { return GLM_BACKEND_ABI_VERSION; }

extern "C" int glm_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" glm_status glm_cuda_nccl_id(unsigned char id[128]) {
#ifdef GLMTUNE_HAVE_NCCL
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return glm_err(GLM_ERR_COMM, "cuda backend: ncclGetUniqueId: %s", ncclGetErrorString(r));
    memcpy(id, u.internal, 128);
    return GLM_OK;
#else
    (void)id;
    return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: this build has no NCCL");
#endif
}

extern "C" const glm_backend *glm_backend_cuda_dist(int device, int rank, int world, const unsigned char *nccl_id,
                                                    glm_status *st) {
    cuda_impl *I = NULL;
    glm_status s = create(device, rank, world, nccl_id, &I);
    if (st) *st = s;
    return s ? NULL : &I->be;
}

extern "C" const glm_backend *glm_backend_cuda(int device, glm_status *st) {
    return glm_backend_cuda_dist(device, 0, 1, NULL, st);
}

extern "C" void glm_backend_cuda_close(const glm_backend *be) {
    if (!be) return;
    cuda_impl *I = IMPL(be);
    cudaStreamSynchronize(I->s);
    destroy(I);
}

extern "C" const char *glm_cuda_attention_impl(const glm_backend *be) { return attn_impl_name(IMPL(be)); }

extern "C" const char *glm_cuda_device_name(int device) {
    static char name[256];
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        return "unknown GPU";
    }
    snprintf(name, sizeof name, "%s (sm_%d%d, %.0f GiB)", p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0);
    return name;
}
