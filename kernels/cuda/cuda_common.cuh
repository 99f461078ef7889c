/* kernels/cuda/cuda_common.cuh: what the CUDA backend's files share: the backend's private state,
 * the error-checking macros, scratch buffers and small device helpers. One kernel family per file:
 *   backend_cuda.cu   creation, memory, accounting, profiling, the op table, public functions
 *   gemm.cu           matmul through cuBLASLt (bf16 in/out, fp32 accumulation), cached plans
 *   fp8.cu            the FP8 base format: quantizers, transposition, the FP8 GEMM (cuBLASLt)
 *   elementwise.cu    add_bias, axpy, dropout, cast, fill_normal, embedding, SwiGLU
 *   norm.cu           RMSNorm forward and backward
 *   rope.cu           partial interleaved RoPE, in place
 *   attention.cu      FlashAttention-2-style forward / dQ / dK dV on tensor cores (mma.sync)
 *   attention_ragged.cu  the attention ops through cuDNN's fused flash attention when cuDNN is
 *                     there (packed rows as ragged batches; attention_cudnn.cpp builds the graphs)
 *   cross_entropy.cu  fused softmax cross-entropy over a logits chunk
 *   optim.cu          AdamW, sum of squares
 *   comm.cu           the communicator: NCCL collectives on a second stream, requests, timeouts
 * Every launch is followed by LAUNCHED(op): it reads the launch error and, with the environment
 * variable GLMTUNE_DEBUG_SYNC=1, synchronises and names the op whose kernel faulted. */
#ifndef GLM_KERNELS_CUDA_COMMON_CUH
#define GLM_KERNELS_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef GLMTUNE_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "kernels/backend.h"
#include "kernels/comm.h"
}

typedef __nv_bfloat16 bf16;

namespace glmcu {

/* The hash of a plan cache's key (gemm.cu, fp8.cu): FNV-1a 64 over the key's bytes. Keys are plain
 * structs whose every byte is a field's (no padding, or zeroed first), compared with memcmp. */
template <class Key> struct key_bytes_hash {
    size_t operator()(const Key &k) const {
        const unsigned char *p = (const unsigned char *)&k;
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < sizeof k; i++) h = (h ^ p[i]) * 1099511628211ULL;
        return (size_t)h;
    }
};

struct gemm_cache; /* gemm.cu: cuBLASLt descriptors and algorithms by shape */
struct prof_state; /* backend_cuda.cu: profiling events */
struct comm_state; /* comm.cu: outstanding communication requests */
struct cudnn_attn; /* attention_cudnn.cpp: cuDNN's handle and attention graphs */
struct fp8_cache;  /* fp8.cu: cuBLASLt's FP8 GEMM descriptors by block shape */

enum { SCR_WIDEN_A, SCR_WIDEN_B, SCR_GEMM_F32, SCR_REDUCE, SCR_ATTN_D, SCR_ATTN_DOC, SCR_COMM, SCR_CUDNN_RUNS,
       SCR_CUDNN_RAGGED, SCR_CUDNN_STATS, SCR_CUDNN_WS, SCR_Q4, SCR_FP8_Q, SCR_FP8_VEC, SCR_FP8_TILE, SCR_COUNT };

struct cuda_impl {
    int device;
    int sm;               /* compute capability major * 10 + minor */
    cudaStream_t s;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_ws;          /* cuBLASLt workspace (LT_WS_BYTES) */
    gemm_cache *gemms;
    fp8_cache *fp8s;      /* NULL until the first FP8 GEMM */
    /* grow-only scratch by purpose (SCR_*): sized on the first step, reused after */
    void *scratch[SCR_COUNT];
    size_t scratch_cap[SCR_COUNT];
    int *flag;            /* device int for in-kernel error reports */
    bool debug_sync;      /* GLMTUNE_DEBUG_SYNC=1 */
    /* bytes held through alloc (and scratch), for mem_info */
    size_t in_use, peak;
    /* the process's device memory (memory.cu): where the figure comes from (MEM_*), NVML's device,
     * the device's used memory before this backend made its context (MEM_NVML_DEVICE; MEM_CUDART:
     * right after), the most seen outside in_use (mem_overhead), and the hard cap (0: none) */
    int mem_src;
    void *nvml_dev;
    size_t base_used;
    size_t overhead;
    size_t cap;
    void *sizes;          /* std::unordered_map<void *, size_t> */
    prof_state *prof;
    cudaStream_t cs;      /* communication stream (NCCL collectives; comm.cu) */
    /* host <-> device copies that overlap compute (upload_async / download_async): their stream,
     * an event marking the ops queued before a copy, and a ring of events, copy t recorded in
     * copy_ev[t % COPY_EVENTS] (a wait on an older ticket whose event was re-recorded waits for a
     * later copy: still correct, the copy stream being in order) */
    cudaStream_t xs;
    cudaEvent_t ops_ev;
    cudaEvent_t copy_ev[8];
    uint64_t n_copies;
    comm_state *cstate;
    /* attention implementation (GLMTUNE_ATTENTION): ATTN_AUTO cuDNN's fused attention where it
     * takes the shape, else glmtune's kernels; ATTN_OWN glmtune's only; ATTN_CUDNN cuDNN's only
     * (an error where it declines: for tests) */
    int attn_mode;
    double attn_ws_cap;   /* set_attention_ws_cap: the most bytes of cuDNN workspace; < 0: no cap */
    cudnn_attn *cudnn;    /* NULL until the first attention call loads cuDNN */
    bool cudnn_tried;     /* loading was tried (cudnn may still be NULL) */
    bool cudnn_noted;     /* the note that cuDNN is not used was printed */
    int32_t *runs_host;   /* pinned int32[2]: document runs and the longest (attention_ragged.cu) */
#ifdef GLMTUNE_HAVE_NCCL
    ncclComm_t comm;
#endif
    glm_backend be;
};

constexpr size_t LT_WS_BYTES = 32u << 20;

inline cuda_impl *IMPL(const glm_backend *be) { return (cuda_impl *)be->impl; }

glm_status sync_check(cuda_impl *I, const char *op);

#define CU(call, op)                                                                                     \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess)                                                                           \
            return glm_err(e_ == cudaErrorMemoryAllocation ? GLM_ERR_NOMEM : GLM_ERR_DEVICE,            \
                           "cuda backend: %s: %s failed: %s", (op), #call, cudaGetErrorString(e_));      \
    } while (0)

/* after every kernel launch (I: the cuda_impl): launch-configuration errors, earlier asynchronous
 * faults, and with GLMTUNE_DEBUG_SYNC=1 a synchronisation that names the op */
#define LAUNCHED_I(I, op)                                                                                \
    do {                                                                                                 \
        CU(cudaGetLastError(), op);                                                                      \
        if ((I)->debug_sync) GLM_TRY(glmcu::sync_check((I), (op)));                                      \
    } while (0)
#define LAUNCHED(op) LAUNCHED_I(IMPL(be), op)

const char *blas_name(cublasStatus_t s);

#define BLAS(call, op)                                                                                   \
    do {                                                                                                 \
        cublasStatus_t b_ = (call);                                                                      \
        if (b_ != CUBLAS_STATUS_SUCCESS)                                                                 \
            return glm_err(GLM_ERR_DEVICE, "cuda backend: %s: cuBLAS %s (%d)", (op), blas_name(b_), (int)b_); \
    } while (0)

/* A grow-only scratch buffer of at least `bytes` for purpose `slot`. */
glm_status scratch(cuda_impl *I, int slot, size_t bytes, void **out);
/* The display name of a scratch slot ("cuDNN attention workspace", ...). */
const char *scratch_name(int slot);
/* Grows slot `slot` to exactly `bytes` when it is smaller (scratch_reserve). */
glm_status scratch_exact(cuda_impl *I, int slot, size_t bytes);

/* memory.cu: the process's device memory as nvidia-smi counts it, and the hard cap.
 * mem_probe_start, before the context exists (the device's used memory, by NVML); mem_probe_context,
 * right after cudaSetDevice made it; mem_probe_end, after every handle and workspace of creation
 * (the overhead so far). process_bytes: the process's bytes now. cap_check: GLM_OK when `bytes` more
 * (rounded up to the driver's 2 MiB pages) stay within the cap, else GLM_ERR_NOMEM naming `what`. */
enum { MEM_NVML_PID, MEM_NVML_DEVICE, MEM_CUDART };
struct mem_probe {
    void *nvml_dev;
    size_t used_before;  /* NVML's used bytes of the device before the context (0: unknown) */
};
void mem_probe_start(int device, mem_probe *mp);
void mem_probe_context(cuda_impl *I, const mem_probe *mp);
void mem_probe_end(cuda_impl *I);
size_t process_bytes(cuda_impl *I);
glm_status cap_check(cuda_impl *I, size_t bytes, const char *what);
/* the op table's memory-truth entries (kernels/backend.h) */
void mem_ops(glm_backend *b);
/* attention_ragged.cu: the scratch of attention for shape s: bytes per slot (added into slot[]) and
 * cuDNN's workspace (the largest of the graphs the shape class needs) in *ws. Loads cuDNN. */
glm_status attn_scratch_need(cuda_impl *I, const glm_scratch_shape *s, size_t slot[SCR_COUNT], size_t *ws);

inline unsigned grid_for(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    if (g > 65535LL * 16) g = 65535LL * 16; /* kernels loop grid-stride */
    if (g < 1) g = 1;
    return (unsigned)g;
}

inline cudaDataType cdt(glm_dtype d) { return d == GLM_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* host float <-> bf16 bits, round to nearest even (NaN stays NaN) */
uint16_t host_f2bf(float f);
float host_bf2f(uint16_t h);

__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16(v); }

/* block-wide sum / max of a float, blockDim.x a multiple of 32 and <= 1024; every thread gets
 * the result. `red` is __shared__ float[32]. */
__device__ __forceinline__ float block_sum(float v, float *red) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}
__device__ __forceinline__ float block_max(float v, float *red) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : -INFINITY;
    for (int o = 16; o; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

/* 8 bf16 values as one 16-byte vector */
struct __align__(16) bf16x8 {
    __nv_bfloat162 v[4];
};

/* ---- the ops, by file ------------------------------------------------------------------- */

enum { ATTN_AUTO = GLM_ATTN_AUTO, ATTN_OWN = GLM_ATTN_OWN, ATTN_CUDNN = GLM_ATTN_CUDNN }; /* glm_attention_env */

/* gemm.cu */
glm_status gemm_init(cuda_impl *I);
void gemm_destroy(cuda_impl *I);
glm_status cu_matmul(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                     glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta, const void *C0,
                     void *C, glm_dtype dtc, int64_t ldc);
/* elementwise.cu */
glm_status cu_add_bias(const glm_backend *be, void *y, int64_t ldy, const void *b, int64_t N, int64_t D);
glm_status cu_axpy(const glm_backend *be, void *y, const void *x, float alpha, int64_t n);
glm_status cu_dropout(const glm_backend *be, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t N, int64_t D,
                      int64_t row0, float p, uint64_t seed, uint64_t stream);
glm_status cu_cast(const glm_backend *be, void *dst, glm_dtype dd, const void *src, glm_dtype ds, int64_t n);
glm_status cu_cast_2d(const glm_backend *be, void *dst, glm_dtype dd, int64_t ldd, const void *src, glm_dtype ds,
                      int64_t lds, int64_t rows, int64_t cols);
glm_status cu_fill_normal(const glm_backend *be, void *dst, glm_dtype dt, int64_t n, float mean, float std, uint64_t seed,
                          uint64_t stream);
/* fp8.cu: the FP8 base format (kernels/weight.h) and its GEMM */
void fp8_destroy(cuda_impl *I);
glm_status cu_fp8_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st);
glm_status cu_fp8_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src);
glm_status cu_fp8_quantize(const glm_backend *be, uint8_t *q, float *scale, const void *x, int64_t ldx, int64_t M, int64_t K,
                           const float *col_mul, int kind);
glm_status cu_fp8_matmul(const glm_backend *be, int64_t M, int64_t N, int64_t K, const void *x, int64_t ldx,
                         const float *col_mul, int x_kind, const uint8_t *w, const float *w_scale, float beta, void *y,
                         int64_t ldy);
glm_status cu_fp8_transpose(const glm_backend *be, uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols);
/* kernels/cuda/weight.cu: the quantized base formats (kernels/weight.h): 4-bit here, fp8 in fp8.cu */
glm_status cu_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st);
glm_status cu_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src);
glm_status cu_embedding(const glm_backend *be, void *out, const void *table, const uint32_t *ids, int64_t N, int64_t C,
                        int64_t V);
glm_status cu_swiglu_fwd(const glm_backend *be, void *out, const void *h, int64_t N, int64_t F);
glm_status cu_swiglu_bwd(const glm_backend *be, void *dh, const void *dout, const void *h, int64_t N, int64_t F,
                         const glm_rank_term *t);
/* norm.cu */
glm_status cu_rmsnorm_fwd(const glm_backend *be, void *y, float *rstd, const void *x, const void *w, int64_t N, int64_t C,
                          float eps);
glm_status cu_rmsnorm_bwd(const glm_backend *be, void *dx, const void *dy, const void *x, const void *w, const float *rstd,
                          int64_t N, int64_t C);
/* rope.cu */
glm_status cu_rope(const glm_backend *be, void *x, int64_t ldx, const int32_t *pos, int64_t N, int nheads, int Dh, int rot,
                   const float *inv_freq, int inverse);
/* attention.cu */
glm_status attention_init(cuda_impl *I);
glm_status cu_attention_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                            const void *k, int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H,
                            int Hkv, int Dh);
glm_status cu_attention_bwd(const glm_backend *be, void *dq, void *dk, void *dv, const void *dout, int64_t ldo,
                            const void *out, const float *lse, const void *D, const void *q, int64_t ldq, const void *k,
                            int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv,
                            int Dh);
glm_status cu_attention_delta(const glm_backend *be, void *D, const void *dout, int64_t ldd, const void *out, int64_t ldo,
                              int64_t n0, int64_t rows, int T, int H, int Dh);
glm_status cu_attention_block_fwd(const glm_backend *be, void *o, int64_t ldo, void *lse, int64_t ldl, const void *q,
                                  int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                                  const int32_t *q_doc, const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk,
                                  int H, int Hkv, int Dh, int init);
glm_status cu_attention_block_bwd(const glm_backend *be, void *dq, int64_t lddq, void *dk, int64_t lddk, void *dv,
                                  int64_t lddv, const void *dout, int64_t ldo, const void *out, const float *lse,
                                  int64_t ldl, const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                  int64_t ldv, const int32_t *q_doc, const int32_t *k_doc, int64_t q0, int64_t k0, int Tq,
                                  int Tk, int H, int Hkv, int Dh);
/* attention_ragged.cu: the whole-row attention ops through cuDNN. Each returns GLM_OK when cuDNN
 * computed the op, GLM_ERR_UNSUPPORTED when the caller should run glmtune's kernels instead
 * (cuDNN absent or declining the shape, GLMTUNE_ATTENTION=glmtune; with GLMTUNE_ATTENTION=cudnn
 * that is an error instead), other errors as they come. attn_ragged_destroy frees the cuDNN state. */
glm_status attn_ragged_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                           const void *k, int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H,
                           int Hkv, int Dh);
glm_status attn_ragged_bwd(const glm_backend *be, void *dq, void *dk, void *dv, const void *dout, int64_t ldo,
                           const void *out, const float *lse, const void *q, int64_t ldq, const void *k, int64_t ldk,
                           const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv, int Dh);
void attn_ragged_destroy(cuda_impl *I);
/* The attention implementation in use, for reports: "cuDNN 9.19.0 fused attention" or "glmtune
 * kernels" (static storage). */
const char *attn_impl_name(cuda_impl *I);
/* cross_entropy.cu */
glm_status cu_cross_entropy(const glm_backend *be, void *dlogits, const void *logits, const int32_t *labels,
                            const float *weights, float *logp, int64_t n, int64_t V, float loss_scale, double *loss_sum,
                            int64_t *n_targets);
/* optim.cu */
glm_status cu_adamw(const glm_backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float grad_scale, int64_t step);
glm_status cu_sumsq(const glm_backend *be, int count, const float *const *x, const int64_t *n, double *out);
/* comm.cu: comm_init creates the communication stream and request table (after the NCCL
 * communicator); comm_destroy frees them; comm_ops fills the op table's communication ops;
 * comm_release_waited frees the requests the compute stream waited for, after a host sync of it. */
glm_status comm_init(cuda_impl *I);
void comm_destroy(cuda_impl *I);
void comm_ops(glm_backend *b);
void comm_release_waited(cuda_impl *I);
/* backend_cuda.cu */
glm_status cu_download(const glm_backend *be, void *dst, const void *src, size_t bytes);

}  // namespace glmcu

#endif
