/* kernels/cuda/backend_cuda.cu: the CUDA backend (DESIGN.md §4 precision contract).
 *
 * Storage: base weights and activations bf16 (be->weight_dtype = be->act_dtype = GLM_DT_BF16);
 * LoRA weights, their grads, AdamW moments, rstd, lse and the LoRA rank-r intermediates fp32.
 * Arithmetic: every kernel loads bf16 as float, computes in fp32 and rounds to bf16 once, at the
 * store (round to nearest even, __float2bfloat16). Reductions (RMSNorm sums, softmax sums,
 * cross-entropy, attention dot products) accumulate in fp32; sumsq accumulates in double.
 * GEMMs go through cublasGemmEx with CUBLAS_COMPUTE_32F (fp32 accumulation, no TF32).
 *
 * Everything is queued on one stream per backend; ops that return a host value (sumsq,
 * cross_entropy, download*, embedding's range check) synchronise. Every CUDA / cuBLAS / NCCL call
 * is checked, and the last error is read after every launch; failures return glm_status with a
 * message naming the op.
 *
 * The contract of each op is in kernels/backend.h; this file only notes where it rounds. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>

#ifdef GLMTUNE_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "kernels/backend.h"
}

typedef __nv_bfloat16 bf16;

/* ---------------------------------------------------------------------------- state, errors */

namespace {

struct cuda_impl {
    int device;
    cudaStream_t s;
    cublasHandle_t blas;
    /* grow-only scratch: [0],[1] matmul operand conversions, [2] matmul fp32 result,
     * [3] reductions (sumsq partials, cross-entropy rows), [4] attention backward D = rowsum(dO*O) */
    void *scratch[5];
    size_t scratch_cap[5];
    int *flag;   /* device int for in-kernel error reports */
#ifdef GLMTUNE_HAVE_NCCL
    ncclComm_t comm;
#endif
    glm_backend be;
};

inline cuda_impl *IMPL(const glm_backend *be) { return (cuda_impl *)be->impl; }

#define CU(call, op)                                                                                     \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess)                                                                           \
            return glm_err(e_ == cudaErrorMemoryAllocation ? GLM_ERR_NOMEM : GLM_ERR_INTERNAL,           \
                           "cuda backend: %s: %s failed: %s", (op), #call, cudaGetErrorString(e_));      \
    } while (0)

/* after every kernel launch: launch-configuration errors and earlier asynchronous faults */
#define LAUNCHED(op) CU(cudaGetLastError(), op)

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

#define BLAS(call, op)                                                                                   \
    do {                                                                                                 \
        cublasStatus_t b_ = (call);                                                                      \
        if (b_ != CUBLAS_STATUS_SUCCESS)                                                                 \
            return glm_err(GLM_ERR_INTERNAL, "cuda backend: %s: cuBLAS %s (%d)", (op), blas_name(b_), (int)b_); \
    } while (0)

glm_status scratch(cuda_impl *I, int slot, size_t bytes, void **out) {
    if (bytes > I->scratch_cap[slot]) {
        if (I->scratch[slot]) CU(cudaFree(I->scratch[slot]), "scratch");
        I->scratch[slot] = NULL;
        I->scratch_cap[slot] = 0;
        size_t n = bytes + bytes / 4 + 256;
        CU(cudaMalloc(&I->scratch[slot], n), "scratch");
        I->scratch_cap[slot] = n;
    }
    *out = I->scratch[slot];
    return GLM_OK;
}

inline unsigned grid_for(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    if (g > 65535LL * 16) g = 65535LL * 16; /* kernels below loop grid-stride */
    if (g < 1) g = 1;
    return (unsigned)g;
}

/* host float -> bf16 bits, round to nearest even (NaN stays NaN) */
inline uint16_t host_f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float host_bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16(v); }

/* block-wide sum of a float, blockDim.x a multiple of 32 and <= 1024; all threads get it */
__device__ float block_sum(float v, float *red) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}
__device__ float block_max(float v, float *red) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : -INFINITY;
    for (int o = 16; o; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

/* ---------------------------------------------------------------------------- memory */

glm_status cu_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free allocation error */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return glm_err(e == cudaErrorMemoryAllocation ? GLM_ERR_NOMEM : GLM_ERR_INTERNAL,
                       "cuda backend: cannot allocate %zu bytes for %s on device %d (%zu MiB free of %zu): %s", bytes,
                       what ? what : "a buffer", IMPL(be)->device, fr >> 20, tot >> 20, cudaGetErrorString(e));
    }
    *out = p;
    return GLM_OK;
}

void cu_free(const glm_backend *be, void *p) {
    if (p) cudaFree(p);
}

glm_status cu_upload(const glm_backend *be, void *dst, const void *src, size_t bytes) {
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

const int64_t CONV_CHUNK = 1 << 22; /* elements per host conversion chunk (8 MiB of bf16) */

glm_status cu_upload_f32(const glm_backend *be, void *dst, glm_dtype dt, const float *src, int64_t n) {
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

glm_status cu_download_f32(const glm_backend *be, float *dst, glm_dtype dt, const void *src, int64_t n) {
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

glm_status cu_zero(const glm_backend *be, void *p, size_t bytes) {
    if (bytes) CU(cudaMemsetAsync(p, 0, bytes, IMPL(be)->s), "zero");
    return GLM_OK;
}

glm_status cu_copy(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, IMPL(be)->s), "copy");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- matmul */

/* dst [rows, cols] packed f32 = src [rows, cols] bf16 with row stride ld */
__global__ void k_bf16_to_f32_2d(float *dst, const bf16 *src, int64_t rows, int64_t cols, int64_t lds) {
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        dst[i] = ld(src + r * lds + c);
    }
}

/* C[i, j] = bf16(T[i, j] + beta * C[i, j]) (beta == 0: C not read); T packed [M, N] f32 */
__global__ void k_epilogue_bf16(bf16 *C, int64_t ldc, const float *T, int64_t M, int64_t N, float beta) {
    int64_t n = M * N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        float v = T[i];
        if (beta != 0.0f) v += beta * ld(C + r * ldc + c);
        st(C + r * ldc + c, v);
    }
}

/* C = beta * C for K == 0 (beta == 0 writes zeros without reading) */
template <typename Tc>
__global__ void k_scale(Tc *C, int64_t ldc, int64_t M, int64_t N, float beta);
template <>
__global__ void k_scale<float>(float *C, int64_t ldc, int64_t M, int64_t N, float beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        C[r * ldc + c] = beta == 0.0f ? 0.0f : beta * C[r * ldc + c];
    }
}
template <>
__global__ void k_scale<bf16>(bf16 *C, int64_t ldc, int64_t M, int64_t N, float beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        st(C + r * ldc + c, beta == 0.0f ? 0.0f : beta * ld(C + r * ldc + c));
    }
}

cudaDataType cdt(glm_dtype d) { return d == GLM_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* Row-major C = alpha op(A) op(B) + beta C through column-major cuBLAS: C^T = op(B)^T op(A)^T. */
glm_status gemm_ex(cuda_impl *I, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                   glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta, void *C,
                   glm_dtype dtc, int64_t ldc) {
    BLAS(cublasGemmEx(I->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                      &alpha, B, cdt(dtb), (int)ldb, A, cdt(dta), (int)lda, &beta, C, cdt(dtc), (int)ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
         "matmul");
    return GLM_OK;
}

/* Rounding: bf16 x bf16 operands go straight to cuBLAS (products exact in fp32, fp32 accumulation,
 * one rounding at the store when C is bf16). Mixed operand dtypes (the LoRA branch: f32 LoRA
 * weights with bf16 activations) widen the bf16 operand to f32 (exact) and run an fp32 GEMM; a
 * bf16 C is then formed as bf16(alpha op(A) op(B) + beta C) with one rounding. */
glm_status cu_matmul(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                     glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta, void *C,
                     glm_dtype dtc, int64_t ldc) {
    cuda_impl *I = IMPL(be);
    if (M < 0 || N < 0 || K < 0 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX)
        return glm_err(GLM_ERR_ARG, "matmul: bad sizes M=%lld N=%lld K=%lld", (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return GLM_OK;
    if (K == 0) {
        if (dtc == GLM_DT_BF16) k_scale<bf16><<<grid_for(M * N, 256), 256, 0, I->s>>>((bf16 *)C, ldc, M, N, beta);
        else k_scale<float><<<grid_for(M * N, 256), 256, 0, I->s>>>((float *)C, ldc, M, N, beta);
        LAUNCHED("matmul (K = 0)");
        return GLM_OK;
    }
    bool direct = dta == dtb && (dta == GLM_DT_BF16 || dtc == GLM_DT_F32);
    if (direct) return gemm_ex(I, ta, tb, M, N, K, alpha, A, dta, lda, B, dtb, ldb, beta, C, dtc, ldc);
    const void *a = A, *b = B;
    int64_t la = lda, lb = ldb;
    if (dta == GLM_DT_BF16) {
        int64_t rows = ta ? K : M, cols = ta ? M : K;
        void *p;
        GLM_TRY(scratch(I, 0, (size_t)(rows * cols) * 4, &p));
        k_bf16_to_f32_2d<<<grid_for(rows * cols, 256), 256, 0, I->s>>>((float *)p, (const bf16 *)A, rows, cols, lda);
        LAUNCHED("matmul (widen A)");
        a = p;
        la = cols;
    }
    if (dtb == GLM_DT_BF16) {
        int64_t rows = tb ? N : K, cols = tb ? K : N;
        void *p;
        GLM_TRY(scratch(I, 1, (size_t)(rows * cols) * 4, &p));
        k_bf16_to_f32_2d<<<grid_for(rows * cols, 256), 256, 0, I->s>>>((float *)p, (const bf16 *)B, rows, cols, ldb);
        LAUNCHED("matmul (widen B)");
        b = p;
        lb = cols;
    }
    if (dtc == GLM_DT_F32)
        return gemm_ex(I, ta, tb, M, N, K, alpha, a, GLM_DT_F32, la, b, GLM_DT_F32, lb, beta, C, GLM_DT_F32, ldc);
    void *t;
    GLM_TRY(scratch(I, 2, (size_t)(M * N) * 4, &t));
    GLM_TRY(gemm_ex(I, ta, tb, M, N, K, alpha, a, GLM_DT_F32, la, b, GLM_DT_F32, lb, 0.0f, t, GLM_DT_F32, N));
    k_epilogue_bf16<<<grid_for(M * N, 256), 256, 0, I->s>>>((bf16 *)C, ldc, (const float *)t, M, N, beta);
    LAUNCHED("matmul (bf16 epilogue)");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- elementwise */

__global__ void k_add_bias(bf16 *y, int64_t ldy, const bf16 *b, int64_t N, int64_t D) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D, d = i - n * D;
        st(y + n * ldy + d, ld(y + n * ldy + d) + ld(b + d));
    }
}

glm_status cu_add_bias(const glm_backend *be, void *y, int64_t ldy, const void *b, int64_t N, int64_t D) {
    if (N <= 0 || D <= 0) return GLM_OK;
    k_add_bias<<<grid_for(N * D, 256), 256, 0, IMPL(be)->s>>>((bf16 *)y, ldy, (const bf16 *)b, N, D);
    LAUNCHED("add_bias");
    return GLM_OK;
}

__global__ void k_axpy(bf16 *y, const bf16 *x, float alpha, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        st(y + i, ld(y + i) + alpha * ld(x + i));
}

glm_status cu_axpy(const glm_backend *be, void *y, const void *x, float alpha, int64_t n) {
    if (n <= 0) return GLM_OK;
    k_axpy<<<grid_for(n, 256), 256, 0, IMPL(be)->s>>>((bf16 *)y, (const bf16 *)x, alpha, n);
    LAUNCHED("axpy");
    return GLM_OK;
}


__global__ void k_dropout(bf16 *y, int64_t ldy, const bf16 *x, int64_t ldx, int64_t N, int64_t D, float p, float inv,
                          uint64_t seed, uint64_t stream) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D, d = i - n * D;
        float v = ld(x + n * ldx + d);
        if (p > 0.0f) v = glm_dropout_u01(seed, stream, (uint64_t)i) >= p ? v * inv : 0.0f;
        st(y + n * ldy + d, v);
    }
}

glm_status cu_dropout(const glm_backend *be, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t N, int64_t D,
                      float p, uint64_t seed, uint64_t stream) {
    if (!(p >= 0.0f && p < 1.0f)) return glm_err(GLM_ERR_ARG, "dropout: probability %g is not in [0, 1)", p);
    if (N <= 0 || D <= 0) return GLM_OK;
    k_dropout<<<grid_for(N * D, 256), 256, 0, IMPL(be)->s>>>((bf16 *)y, ldy, (const bf16 *)x, ldx, N, D, p,
                                                              1.0f / (1.0f - p), seed, stream);
    LAUNCHED("dropout");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- transformer ops */

__global__ void k_embedding(bf16 *out, const bf16 *table, const uint32_t *ids, int64_t N, int64_t C, int64_t V,
                            int *bad) {
    int64_t n = blockIdx.x;
    uint32_t id = ids[n];
    bool ok = (int64_t)id < V;
    if (!ok && threadIdx.x == 0) atomicMin(bad, (int)min(n, (int64_t)INT_MAX));
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        out[n * C + c] = ok ? table[(int64_t)id * C + c] : __float2bfloat16(0.0f);
}

glm_status cu_embedding(const glm_backend *be, void *out, const void *table, const uint32_t *ids, int64_t N, int64_t C,
                        int64_t V) {
    cuda_impl *I = IMPL(be);
    if (N <= 0) return GLM_OK;
    int big = INT_MAX;
    CU(cudaMemcpyAsync(I->flag, &big, 4, cudaMemcpyHostToDevice, I->s), "embedding");
    k_embedding<<<(unsigned)N, 256, 0, I->s>>>((bf16 *)out, (const bf16 *)table, ids, N, C, V, I->flag);
    LAUNCHED("embedding");
    int bad = INT_MAX;
    CU(cudaMemcpyAsync(&bad, I->flag, 4, cudaMemcpyDeviceToHost, I->s), "embedding");
    CU(cudaStreamSynchronize(I->s), "embedding");
    if (bad != INT_MAX) {
        uint32_t id = 0;
        CU(cudaMemcpy(&id, ids + bad, 4, cudaMemcpyDeviceToHost), "embedding");
        return glm_err(GLM_ERR_ARG, "embedding: token id %u at position %d is outside the vocabulary (V = %lld)", id, bad,
                       (long long)V);
    }
    return GLM_OK;
}

/* rstd = 1/sqrt(mean(x^2) + eps) with an fp32 sum; y = bf16(x * rstd * w) */
__global__ void k_rmsnorm_fwd(bf16 *y, float *rstd, const bf16 *x, const bf16 *w, int64_t C, float eps) {
    __shared__ float red[32];
    int64_t n = blockIdx.x;
    const bf16 *xr = x + n * C;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = ld(xr + c);
        ss += v * v;
    }
    ss = block_sum(ss, red);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0) rstd[n] = r;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) st(y + n * C + c, ld(xr + c) * r * ld(w + c));
}

glm_status cu_rmsnorm_fwd(const glm_backend *be, void *y, float *rstd, const void *x, const void *w, int64_t N, int64_t C,
                          float eps) {
    if (N <= 0) return GLM_OK;
    k_rmsnorm_fwd<<<(unsigned)N, 256, 0, IMPL(be)->s>>>((bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, C, eps);
    LAUNCHED("rmsnorm_fwd");
    return GLM_OK;
}

/* dx = bf16(dx + r w dy - x r^3 / C * sum(dy w x)), fp32 sum */
__global__ void k_rmsnorm_bwd(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w, const float *rstd, int64_t C) {
    __shared__ float red[32];
    int64_t n = blockIdx.x;
    const bf16 *xr = x + n * C, *dyr = dy + n * C;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += ld(dyr + c) * ld(w + c) * ld(xr + c);
    dot = block_sum(dot, red);
    float r = rstd[n];
    float k = r * r * r * dot / (float)C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        st(dx + n * C + c, ld(dx + n * C + c) + (r * ld(w + c) * ld(dyr + c) - ld(xr + c) * k));
}

glm_status cu_rmsnorm_bwd(const glm_backend *be, void *dx, const void *dy, const void *x, const void *w, const float *rstd,
                          int64_t N, int64_t C) {
    if (N <= 0) return GLM_OK;
    k_rmsnorm_bwd<<<(unsigned)N, 256, 0, IMPL(be)->s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w,
                                                         rstd, C);
    LAUNCHED("rmsnorm_bwd");
    return GLM_OK;
}

/* one thread per (token, pair): angle in f32 as the CPU does, cos/sin in double rounded to f32
 * (bit-identical tables on both backends), the rotation in f32, one bf16 rounding per element */
__global__ void k_rope(bf16 *x, int64_t ldx, const int32_t *pos, int64_t N, int nheads, int Dh, int half,
                       const float *inv_freq, int inverse) {
    int64_t total = N * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = t / half;
        int i = (int)(t - n * half);
        float ang = (float)pos[n] * inv_freq[i];
        double sd, cd;
        sincos((double)ang, &sd, &cd);
        float c = (float)cd, s = (float)sd;
        if (inverse) s = -s;
        for (int h = 0; h < nheads; h++) {
            bf16 *xh = x + n * ldx + (int64_t)h * Dh;
            float x0 = ld(xh + 2 * i), x1 = ld(xh + 2 * i + 1);
            st(xh + 2 * i, x0 * c - x1 * s);
            st(xh + 2 * i + 1, x1 * c + x0 * s);
        }
    }
}

glm_status cu_rope(const glm_backend *be, void *x, int64_t ldx, const int32_t *pos, int64_t N, int nheads, int Dh,
                   int rot, const float *inv_freq, int inverse) {
    if (rot <= 0 || rot > Dh || rot % 2)
        return glm_err(GLM_ERR_ARG, "rope: rotary dims %d must be even and in (0, Dh=%d]", rot, Dh);
    if (N <= 0) return GLM_OK;
    k_rope<<<grid_for(N * (rot / 2), 256), 256, 0, IMPL(be)->s>>>((bf16 *)x, ldx, pos, N, nheads, Dh, rot / 2, inv_freq,
                                                                   inverse);
    LAUNCHED("rope");
    return GLM_OK;
}

__global__ void k_swiglu_fwd(bf16 *out, const bf16 *h, int64_t N, int64_t F) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F, f = i - n * F;
        float g = ld(h + n * 2 * F + f), u = ld(h + n * 2 * F + F + f);
        st(out + i, g / (1.0f + expf(-g)) * u);
    }
}

__global__ void k_swiglu_bwd(bf16 *dh, const bf16 *dout, const bf16 *h, int64_t N, int64_t F) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F, f = i - n * F;
        float g = ld(h + n * 2 * F + f), u = ld(h + n * 2 * F + F + f), d = ld(dout + i);
        float sg = 1.0f / (1.0f + expf(-g));
        st(dh + n * 2 * F + f, d * u * sg * (1.0f + g * (1.0f - sg)));
        st(dh + n * 2 * F + F + f, d * g * sg);
    }
}

glm_status cu_swiglu_fwd(const glm_backend *be, void *out, const void *h, int64_t N, int64_t F) {
    if (N <= 0 || F <= 0) return GLM_OK;
    k_swiglu_fwd<<<grid_for(N * F, 256), 256, 0, IMPL(be)->s>>>((bf16 *)out, (const bf16 *)h, N, F);
    LAUNCHED("swiglu_fwd");
    return GLM_OK;
}

glm_status cu_swiglu_bwd(const glm_backend *be, void *dh, const void *dout, const void *h, int64_t N, int64_t F) {
    if (N <= 0 || F <= 0) return GLM_OK;
    k_swiglu_bwd<<<grid_for(N * F, 256), 256, 0, IMPL(be)->s>>>((bf16 *)dh, (const bf16 *)dout, (const bf16 *)h, N, F);
    LAUNCHED("swiglu_bwd");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- attention
 * Tiled, FlashAttention-style, on CUDA cores in fp32: a block owns BQ = 32 query rows (forward,
 * dq) or BK = 32 keys (dk, dv) of one head; 4 threads per row, each holding Dh/4 output channels
 * in registers. Memory is O(T) per head (lse, D), never O(T^2). Tiles are bf16 in global memory
 * and fp32 in shared memory (row stride Dh + 1 against bank conflicts). The mask: key j is
 * allowed for query i when j <= i and doc[j] == doc[i] (same packed row). Tiles above the
 * diagonal are skipped. Scores s = (q . k) / sqrt(Dh) in fp32; the forward keeps a running max
 * and sum (online softmax) and stores lse = m + log(l); the backward recomputes P = exp(s - lse).
 * dk and dv are summed over the H / Hkv query heads of a group inside one block (no atomics, so
 * results are deterministic). Outputs are rounded to bf16 once. */

constexpr int BQ = 32, BK = 32, TPR = 4, ATT_THREADS = BQ * TPR, DHMAX = 128, NACC = DHMAX / TPR, NS = BK / TPR;

/* rows [r0, r0 + nrows) of row b's tokens, channels [coff, coff + Dh), into dst (row stride SD) as
 * fp32; rows past T read as 0 */
__device__ __forceinline__ void load_tile(float *dst, int SD, const bf16 *src, int64_t lds, int b, int T, int r0,
                                          int coff, int Dh, int nrows) {
    for (int idx = threadIdx.x; idx < nrows * Dh; idx += blockDim.x) {
        int rr = idx / Dh, c = idx - rr * Dh;
        int i = r0 + rr;
        dst[rr * SD + c] = i < T ? ld(src + ((int64_t)b * T + i) * lds + coff + c) : 0.0f;
    }
}

__device__ __forceinline__ void load_doc(int *dst, const int32_t *doc, int b, int T, int r0, int nrows) {
    for (int rr = threadIdx.x; rr < nrows; rr += blockDim.x) dst[rr] = r0 + rr < T ? doc[(int64_t)b * T + r0 + rr] : INT_MIN;
}

/* grid (ceil(T/BQ), H, B), ATT_THREADS threads */
__global__ void __launch_bounds__(ATT_THREADS) k_attn_fwd(bf16 *out, int64_t ldo, float *lse, const bf16 *q, int64_t ldq,
                                                         const bf16 *k, int64_t ldk, const bf16 *v, int64_t ldv,
                                                         const int32_t *doc, int T, int H, int Hkv, int Dh, float scale) {
    extern __shared__ float sm[];
    const int SD = Dh + 1, SP = BK + 1;
    float *Qs = sm, *KVs = Qs + BQ * SD, *Ps = KVs + BK * SD;
    int *docq = (int *)(Ps + BQ * SP), *dock = docq + BQ;
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / Hkv);
    const int r = threadIdx.x / TPR, sub = threadIdx.x % TPR, q0 = qt * BQ, i = q0 + r;
    load_tile(Qs, SD, q, ldq, b, T, q0, h * Dh, Dh, BQ);
    load_doc(docq, doc, b, T, q0, BQ);
    float m = -INFINITY, l = 0.0f, acc[NACC];
#pragma unroll
    for (int a = 0; a < NACC; a++) acc[a] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * BK;
        __syncthreads(); /* Qs/docq loaded; the previous tile's KVs and Ps are consumed */
        load_tile(KVs, SD, k, ldk, b, T, k0, g * Dh, Dh, BK);
        load_doc(dock, doc, b, T, k0, BK);
        __syncthreads();
        float s[NS];
#pragma unroll
        for (int jj = 0; jj < NS; jj++) s[jj] = 0.0f;
        for (int c = 0; c < Dh; c++) {
            float qv = Qs[r * SD + c];
#pragma unroll
            for (int jj = 0; jj < NS; jj++) s[jj] += qv * KVs[(sub + TPR * jj) * SD + c];
        }
        float mx = -INFINITY;
        const int di = docq[r];
#pragma unroll
        for (int jj = 0; jj < NS; jj++) {
            int jr = sub + TPR * jj, j = k0 + jr;
            bool ok = i < T && j <= i && dock[jr] == di;
            s[jj] = ok ? s[jj] * scale : -INFINITY;
            mx = fmaxf(mx, s[jj]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mnew = fmaxf(m, mx);
        float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
        float ps = 0.0f;
#pragma unroll
        for (int jj = 0; jj < NS; jj++) {
            float p = s[jj] == -INFINITY ? 0.0f : expf(s[jj] - mnew);
            Ps[r * SP + sub + TPR * jj] = p;
            ps += p;
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        l = l * alpha + ps;
        m = mnew;
#pragma unroll
        for (int a = 0; a < NACC; a++) acc[a] *= alpha;
        __syncthreads(); /* Ps written; K consumed */
        load_tile(KVs, SD, v, ldv, b, T, k0, g * Dh, Dh, BK);
        __syncthreads();
        for (int j = 0; j < BK; j++) {
            float p = Ps[r * SP + j];
#pragma unroll
            for (int a = 0; a < NACC; a++) {
                int c = sub + TPR * a;
                if (c < Dh) acc[a] += p * KVs[j * SD + c];
            }
        }
    }
    if (i < T) {
        bf16 *o = out + ((int64_t)b * T + i) * ldo + (int64_t)h * Dh;
        float inv = 1.0f / l;
#pragma unroll
        for (int a = 0; a < NACC; a++) {
            int c = sub + TPR * a;
            if (c < Dh) st(o + c, acc[a] * inv);
        }
        if (sub == 0) lse[((int64_t)b * H + h) * T + i] = m + logf(l);
    }
}

/* D[b, h, i] = dout_i . out_i (fp32); one warp per (b, h, i), warp-grid-stride (grid_for caps the
 * grid, and B*H*T reaches 32M rows at T = 1M) */
__global__ void k_attn_D(float *D, const bf16 *dout, const bf16 *out, int64_t ldo, int B, int T, int H, int Dh) {
    const int64_t nw = (int64_t)gridDim.x * blockDim.x >> 5, rows = (int64_t)B * H * T;
    const int lane = threadIdx.x & 31;
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; w < rows; w += nw) {
        int i = (int)(w % T);
        int64_t bh = w / T;
        int h = (int)(bh % H), b = (int)(bh / H);
        const bf16 *d = dout + ((int64_t)b * T + i) * ldo + (int64_t)h * Dh, *o = out + ((int64_t)b * T + i) * ldo + (int64_t)h * Dh;
        float s = 0.0f;
        for (int c = lane; c < Dh; c += 32) s += ld(d + c) * ld(o + c);
        for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) D[w] = s;
    }
}

/* dq for BQ query rows of one head; grid (ceil(T/BQ), H, B) */
__global__ void __launch_bounds__(ATT_THREADS) k_attn_dq(bf16 *dq, int64_t ldq, const bf16 *dout, int64_t ldo,
                                                        const float *lse, const float *D, const bf16 *q, const bf16 *k,
                                                        int64_t ldk, const bf16 *v, int64_t ldv, int64_t ldqi,
                                                        const int32_t *doc, int T, int H, int Hkv, int Dh, float scale) {
    extern __shared__ float sm[];
    const int SD = Dh + 1, SP = BK + 1;
    float *Qs = sm, *dOs = Qs + BQ * SD, *Ks = dOs + BQ * SD, *Vs = Ks + BK * SD, *dSs = Vs + BK * SD;
    int *docq = (int *)(dSs + BQ * SP), *dock = docq + BQ;
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / Hkv);
    const int r = threadIdx.x / TPR, sub = threadIdx.x % TPR, q0 = qt * BQ, i = q0 + r;
    load_tile(Qs, SD, q, ldqi, b, T, q0, h * Dh, Dh, BQ);
    load_tile(dOs, SD, dout, ldo, b, T, q0, h * Dh, Dh, BQ);
    load_doc(docq, doc, b, T, q0, BQ);
    const int64_t li = ((int64_t)b * H + h) * T + i;
    const float Li = i < T ? lse[li] : 0.0f, Di = i < T ? D[li] : 0.0f;
    float acc[NACC];
#pragma unroll
    for (int a = 0; a < NACC; a++) acc[a] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * BK;
        __syncthreads();
        load_tile(Ks, SD, k, ldk, b, T, k0, g * Dh, Dh, BK);
        load_tile(Vs, SD, v, ldv, b, T, k0, g * Dh, Dh, BK);
        load_doc(dock, doc, b, T, k0, BK);
        __syncthreads();
        float s[NS], dp[NS];
#pragma unroll
        for (int jj = 0; jj < NS; jj++) s[jj] = dp[jj] = 0.0f;
        for (int c = 0; c < Dh; c++) {
            float qv = Qs[r * SD + c], dv = dOs[r * SD + c];
#pragma unroll
            for (int jj = 0; jj < NS; jj++) {
                s[jj] += qv * Ks[(sub + TPR * jj) * SD + c];
                dp[jj] += dv * Vs[(sub + TPR * jj) * SD + c];
            }
        }
        const int di = docq[r];
#pragma unroll
        for (int jj = 0; jj < NS; jj++) {
            int jr = sub + TPR * jj, j = k0 + jr;
            bool ok = i < T && j <= i && dock[jr] == di;
            float p = ok ? expf(s[jj] * scale - Li) : 0.0f;
            dSs[r * SP + jr] = p * (dp[jj] - Di) * scale;
        }
        __syncthreads();
        for (int j = 0; j < BK; j++) {
            float ds = dSs[r * SP + j];
#pragma unroll
            for (int a = 0; a < NACC; a++) {
                int c = sub + TPR * a;
                if (c < Dh) acc[a] += ds * Ks[j * SD + c];
            }
        }
    }
    if (i < T) {
        bf16 *o = dq + ((int64_t)b * T + i) * ldq + (int64_t)h * Dh;
#pragma unroll
        for (int a = 0; a < NACC; a++) {
            int c = sub + TPR * a;
            if (c < Dh) st(o + c, acc[a]);
        }
    }
}

/* dk, dv for BK keys of one KV group, summed over the group's query heads; grid (ceil(T/BK), Hkv, B) */
__global__ void __launch_bounds__(ATT_THREADS) k_attn_dkdv(bf16 *dk, int64_t ldk, bf16 *dv, int64_t ldv, const bf16 *dout,
                                                          int64_t ldo, const float *lse, const float *D, const bf16 *q,
                                                          int64_t ldqi, const bf16 *k, int64_t ldki, const bf16 *v,
                                                          int64_t ldvi, const int32_t *doc, int T, int H, int Hkv, int Dh,
                                                          float scale) {
    extern __shared__ float sm[];
    const int SD = Dh + 1, SP = BQ + 1;
    float *Ks = sm, *Vs = Ks + BK * SD, *Qs = Vs + BK * SD, *dOs = Qs + BQ * SD, *Pt = dOs + BQ * SD, *dSt = Pt + BK * SP;
    float *Lq = dSt + BK * SP, *Dq = Lq + BQ;
    int *docq = (int *)(Dq + BQ), *dock = docq + BQ;
    const int kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, rep = H / Hkv;
    const int jr = threadIdx.x / TPR, sub = threadIdx.x % TPR, k0 = kt * BK, j = k0 + jr;
    load_tile(Ks, SD, k, ldki, b, T, k0, g * Dh, Dh, BK);
    load_tile(Vs, SD, v, ldvi, b, T, k0, g * Dh, Dh, BK);
    load_doc(dock, doc, b, T, k0, BK);
    float ak[NACC], av[NACC];
#pragma unroll
    for (int a = 0; a < NACC; a++) ak[a] = av[a] = 0.0f;
    const int nqt = (T + BQ - 1) / BQ;
    for (int h = g * rep; h < (g + 1) * rep; h++)
        for (int qt = kt; qt < nqt; qt++) { /* BQ == BK: query tiles before kt are fully masked */
            const int q0 = qt * BQ;
            __syncthreads();
            load_tile(Qs, SD, q, ldqi, b, T, q0, h * Dh, Dh, BQ);
            load_tile(dOs, SD, dout, ldo, b, T, q0, h * Dh, Dh, BQ);
            load_doc(docq, doc, b, T, q0, BQ);
            for (int rr = threadIdx.x; rr < BQ; rr += blockDim.x) {
                int64_t li = ((int64_t)b * H + h) * T + q0 + rr;
                Lq[rr] = q0 + rr < T ? lse[li] : 0.0f;
                Dq[rr] = q0 + rr < T ? D[li] : 0.0f;
            }
            __syncthreads();
            float s[NS], dp[NS];
#pragma unroll
            for (int ii = 0; ii < NS; ii++) s[ii] = dp[ii] = 0.0f;
            for (int c = 0; c < Dh; c++) {
                float kv = Ks[jr * SD + c], vv = Vs[jr * SD + c];
#pragma unroll
                for (int ii = 0; ii < NS; ii++) {
                    s[ii] += Qs[(sub + TPR * ii) * SD + c] * kv;
                    dp[ii] += dOs[(sub + TPR * ii) * SD + c] * vv;
                }
            }
            const int dj = dock[jr];
#pragma unroll
            for (int ii = 0; ii < NS; ii++) {
                int ir = sub + TPR * ii, i = q0 + ir;
                bool ok = i < T && j < T && j <= i && docq[ir] == dj;
                float p = ok ? expf(s[ii] * scale - Lq[ir]) : 0.0f;
                Pt[jr * SP + ir] = p;
                dSt[jr * SP + ir] = p * (dp[ii] - Dq[ir]) * scale;
            }
            __syncthreads();
            for (int ir = 0; ir < BQ; ir++) {
                float p = Pt[jr * SP + ir], ds = dSt[jr * SP + ir];
#pragma unroll
                for (int a = 0; a < NACC; a++) {
                    int c = sub + TPR * a;
                    if (c < Dh) {
                        av[a] += p * dOs[ir * SD + c];
                        ak[a] += ds * Qs[ir * SD + c];
                    }
                }
            }
        }
    if (j < T) {
        bf16 *ok_ = dk + ((int64_t)b * T + j) * ldk + (int64_t)g * Dh, *ov = dv + ((int64_t)b * T + j) * ldv + (int64_t)g * Dh;
#pragma unroll
        for (int a = 0; a < NACC; a++) {
            int c = sub + TPR * a;
            if (c < Dh) {
                st(ok_ + c, ak[a]);
                st(ov + c, av[a]);
            }
        }
    }
}

size_t smem_fwd(int Dh) { return (size_t)((BQ + BK) * (Dh + 1) + BQ * (BK + 1)) * 4 + (BQ + BK) * 4; }
size_t smem_dq(int Dh) { return (size_t)((2 * BQ + 2 * BK) * (Dh + 1) + BQ * (BK + 1)) * 4 + (BQ + BK) * 4; }
size_t smem_dkdv(int Dh) { return (size_t)((2 * BQ + 2 * BK) * (Dh + 1) + 2 * BK * (BQ + 1) + 2 * BQ) * 4 + (BQ + BK) * 4; }

glm_status check_attn(int B, int T, int H, int Hkv, int Dh) {
    if (H <= 0 || Hkv <= 0 || Dh <= 0 || H % Hkv)
        return glm_err(GLM_ERR_ARG, "attention: heads H=%d must be a positive multiple of KV groups Hkv=%d (Dh=%d)", H, Hkv, Dh);
    if (Dh > DHMAX)
        return glm_err(GLM_ERR_UNSUPPORTED, "attention: head dim %d is more than the CUDA kernels support (%d)", Dh, DHMAX);
    if (B <= 0 || T <= 0 || H > 65535 || B > 65535)
        return glm_err(GLM_ERR_ARG, "attention: bad batch B=%d T=%d (H=%d)", B, T, H);
    return GLM_OK;
}

glm_status cu_attention_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                            const void *k, int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H,
                            int Hkv, int Dh) {
    GLM_TRY(check_attn(B, T, H, Hkv, Dh));
    dim3 grid((unsigned)((T + BQ - 1) / BQ), (unsigned)H, (unsigned)B);
    k_attn_fwd<<<grid, ATT_THREADS, smem_fwd(Dh), IMPL(be)->s>>>((bf16 *)out, ldo, lse, (const bf16 *)q, ldq,
                                                                  (const bf16 *)k, ldk, (const bf16 *)v, ldv, doc, T, H, Hkv,
                                                                  Dh, (float)(1.0 / sqrt((double)Dh)));
    LAUNCHED("attention_fwd");
    return GLM_OK;
}

glm_status cu_attention_bwd(const glm_backend *be, void *dq, void *dk, void *dv, const void *dout, int64_t ldo,
                            const void *out, const float *lse, const void *q, int64_t ldq, const void *k, int64_t ldk,
                            const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv, int Dh) {
    GLM_TRY(check_attn(B, T, H, Hkv, Dh));
    cuda_impl *I = IMPL(be);
    float scale = (float)(1.0 / sqrt((double)Dh));
    void *Dp;
    int64_t rows = (int64_t)B * H * T;
    GLM_TRY(scratch(I, 4, (size_t)rows * 4, &Dp));
    k_attn_D<<<grid_for(rows * 32, 256), 256, 0, I->s>>>((float *)Dp, (const bf16 *)dout, (const bf16 *)out, ldo, B, T, H, Dh);
    LAUNCHED("attention_bwd (D)");
    /* dq, dk, dv must not overlap q, k, v (they are separate buffers in the model) */
    dim3 gq((unsigned)((T + BQ - 1) / BQ), (unsigned)H, (unsigned)B);
    k_attn_dq<<<gq, ATT_THREADS, smem_dq(Dh), I->s>>>((bf16 *)dq, ldq, (const bf16 *)dout, ldo, lse, (const float *)Dp,
                                                       (const bf16 *)q, (const bf16 *)k, ldk, (const bf16 *)v, ldv, ldq, doc,
                                                       T, H, Hkv, Dh, scale);
    LAUNCHED("attention_bwd (dq)");
    dim3 gk((unsigned)((T + BK - 1) / BK), (unsigned)Hkv, (unsigned)B);
    k_attn_dkdv<<<gk, ATT_THREADS, smem_dkdv(Dh), I->s>>>((bf16 *)dk, ldk, (bf16 *)dv, ldv, (const bf16 *)dout, ldo, lse,
                                                           (const float *)Dp, (const bf16 *)q, ldq, (const bf16 *)k, ldk,
                                                           (const bf16 *)v, ldv, doc, T, H, Hkv, Dh, scale);
    LAUNCHED("attention_bwd (dk, dv)");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- cross-entropy */

/* one block per row; fp32 max, sum of exp and lse; loss[i] = lse - logit[label] (fp32), cnt[i] = 1
 * for a target row, 0 for label < 0, -1 for label >= V; dl = bf16(scale (softmax - onehot)) */
__global__ void k_cross_entropy(bf16 *dl, const bf16 *l, const int32_t *labels, int64_t V, float scale, float *loss,
                                int *cnt) {
    __shared__ float red[32];
    __shared__ float ly;
    int64_t i = blockIdx.x;
    const bf16 *li = l + i * V;
    int32_t y = labels[i];
    if (y < 0 || (int64_t)y >= V) {
        if (threadIdx.x == 0) {
            loss[i] = 0.0f;
            cnt[i] = y < 0 ? 0 : -1;
        }
        if (dl && y < 0)
            for (int64_t c = threadIdx.x; c < V; c += blockDim.x) dl[i * V + c] = __float2bfloat16(0.0f);
        return;
    }
    if (threadIdx.x == 0) ly = ld(li + y); /* read before any thread overwrites the row (in place) */
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) mx = fmaxf(mx, ld(li + c));
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) s += expf(ld(li + c) - mx);
    s = block_sum(s, red);
    float lse = mx + logf(s);
    if (threadIdx.x == 0) {
        loss[i] = lse - ly;
        cnt[i] = 1;
    }
    if (dl)
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
            float p = expf(ld(li + c) - lse);
            st(dl + i * V + c, scale * (p - (c == y ? 1.0f : 0.0f)));
        }
}

glm_status cu_cross_entropy(const glm_backend *be, void *dlogits, const void *logits, const int32_t *labels, int64_t n,
                            int64_t V, float loss_scale, double *loss_sum, int64_t *n_targets) {
    cuda_impl *I = IMPL(be);
    *loss_sum = 0;
    if (n_targets) *n_targets = 0;
    if (n <= 0) return GLM_OK;
    void *p;
    GLM_TRY(scratch(I, 3, (size_t)n * 8, &p));
    float *loss = (float *)p;
    int *cnt = (int *)(loss + n);
    k_cross_entropy<<<(unsigned)n, 512, 0, I->s>>>((bf16 *)dlogits, (const bf16 *)logits, labels, V, loss_scale, loss, cnt);
    LAUNCHED("cross_entropy");
    std::vector<float> hl((size_t)n);
    std::vector<int> hc((size_t)n);
    GLM_TRY(cu_download(be, hl.data(), loss, (size_t)n * 4));
    GLM_TRY(cu_download(be, hc.data(), cnt, (size_t)n * 4));
    double tot = 0;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        if (hc[i] < 0) {
            int32_t y = 0;
            GLM_TRY(cu_download(be, &y, labels + i, 4));
            return glm_err(GLM_ERR_ARG, "cross_entropy: label %d at row %lld is outside the vocabulary (V = %lld)", y,
                           (long long)i, (long long)V);
        }
        if (hc[i]) {
            tot += hl[i];
            c++;
        }
    }
    *loss_sum = tot;
    if (n_targets) *n_targets = c;
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- optimizer, comm */

__global__ void k_adamw(float *w, const float *g, float *m, float *v, int64_t n, float beta1, float beta2, float eps,
                        float decay, float grad_scale, float step_size, float bc2_sqrt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i] * grad_scale;
        float wi = w[i] * decay;
        float mi = m[i] + (1.0f - beta1) * (gi - m[i]);
        float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        w[i] = wi - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}

glm_status cu_adamw(const glm_backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float grad_scale, int64_t step) {
    if (step < 1) return glm_err(GLM_ERR_ARG, "adamw: step must be >= 1 (got %lld)", (long long)step);
    if (n <= 0) return GLM_OK;
    double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    k_adamw<<<grid_for(n, 256), 256, 0, IMPL(be)->s>>>(w, g, m, v, n, beta1, beta2, eps, 1.0f - lr * weight_decay,
                                                        grad_scale, (float)((double)lr / bc1), (float)sqrt(bc2));
    LAUNCHED("adamw");
    return GLM_OK;
}

constexpr int SUMSQ_BLOCKS = 1024;

__global__ void k_sumsq(double *part, const float *x, int64_t n) {
    __shared__ double red[256];
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o; o >>= 1) {
        if ((int)threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = red[0];
}

/* Returns NaN (with the message recorded by glm_err) when a CUDA call fails. */
double cu_sumsq(const glm_backend *be, const float *x, int64_t n) {
    cuda_impl *I = IMPL(be);
    if (n <= 0) return 0.0;
    unsigned g = grid_for(n, 256);
    if (g > SUMSQ_BLOCKS) g = SUMSQ_BLOCKS;
    void *p;
    if (scratch(I, 3, SUMSQ_BLOCKS * 8, &p)) return NAN;
    k_sumsq<<<g, 256, 0, I->s>>>((double *)p, x, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        glm_err(GLM_ERR_INTERNAL, "cuda backend: sumsq: %s", cudaGetErrorString(e));
        return NAN;
    }
    double h[SUMSQ_BLOCKS];
    if (cu_download(be, h, p, (size_t)g * 8)) return NAN;
    double s = 0;
    for (unsigned i = 0; i < g; i++) s += h[i];
    return s;
}

glm_status cu_all_reduce(const glm_backend *be, float *x, int64_t n) {
    if (be->world <= 1 || n <= 0) return GLM_OK;
#ifdef GLMTUNE_HAVE_NCCL
    cuda_impl *I = IMPL(be);
    ncclResult_t r = ncclAllReduce(x, x, (size_t)n, ncclFloat, ncclSum, I->comm, I->s);
    if (r != ncclSuccess)
        return glm_err(GLM_ERR_INTERNAL, "cuda backend: all_reduce of %lld floats (rank %d of %d): NCCL: %s", (long long)n,
                       be->rank, be->world, ncclGetErrorString(r));
    return GLM_OK;
#else
    return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: all_reduce over %d ranks needs NCCL, and this build has none", be->world);
#endif
}

glm_status cu_sync(const glm_backend *be) {
    CU(cudaStreamSynchronize(IMPL(be)->s), "sync");
    return GLM_OK;
}

void destroy(cuda_impl *I) {
    if (!I) return;
    for (int i = 0; i < 5; i++)
        if (I->scratch[i]) cudaFree(I->scratch[i]);
    if (I->flag) cudaFree(I->flag);
    if (I->blas) cublasDestroy(I->blas);
#ifdef GLMTUNE_HAVE_NCCL
    if (I->comm) ncclCommDestroy(I->comm);
#endif
    if (I->s) cudaStreamDestroy(I->s);
    free(I);
}

glm_status create(int device, int rank, int world, const unsigned char *nccl_id, cuda_impl **out) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: no CUDA device found (%s); hint: --device cpu",
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n)
        return glm_err(GLM_ERR_ARG, "cuda backend: device %d does not exist (this machine has %d)", device, n);
    if (world < 1 || rank < 0 || rank >= world)
        return glm_err(GLM_ERR_ARG, "cuda backend: rank %d of world %d is not valid", rank, world);
#ifndef GLMTUNE_HAVE_NCCL
    if (world > 1)
        return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: %d ranks need NCCL, and this build has none; hint: rebuild with "
                       "NCCL (nccl.h, libnccl.so) installed", world);
#endif
    cuda_impl *I = (cuda_impl *)calloc(1, sizeof *I);
    if (!I) return glm_err(GLM_ERR_NOMEM, "out of memory");
    I->device = device;
    glm_status st = GLM_OK;
    cublasStatus_t bs;
#define FAIL_IF(cond, ...)                                                                                               \
    if (cond) {                                                                                                          \
        st = glm_err(GLM_ERR_INTERNAL, __VA_ARGS__);                                                                     \
        goto fail;                                                                                                       \
    }
    e = cudaSetDevice(device);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
    e = cudaStreamCreateWithFlags(&I->s, cudaStreamNonBlocking);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaStreamCreate: %s", cudaGetErrorString(e));
    e = cudaMalloc(&I->flag, 64);
    FAIL_IF(e != cudaSuccess, "cuda backend: cudaMalloc: %s", cudaGetErrorString(e));
    bs = cublasCreate(&I->blas);
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasCreate: %s", blas_name(bs));
    bs = cublasSetStream(I->blas, I->s);
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasSetStream: %s", blas_name(bs));
    bs = cublasSetMathMode(I->blas, CUBLAS_DEFAULT_MATH); /* fp32 GEMMs stay fp32 (no TF32) */
    FAIL_IF(bs != CUBLAS_STATUS_SUCCESS, "cuda backend: cublasSetMathMode: %s", blas_name(bs));
    e = cudaFuncSetAttribute(k_attn_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_fwd(DHMAX));
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_dq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq(DHMAX));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attn_dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkdv(DHMAX));
    FAIL_IF(e != cudaSuccess, "cuda backend: attention kernels need %zu bytes of shared memory: %s", smem_dkdv(DHMAX),
            cudaGetErrorString(e));
#ifdef GLMTUNE_HAVE_NCCL
    if (world > 1) {
        if (!nccl_id) {
            st = glm_err(GLM_ERR_ARG, "cuda backend: %d ranks need an NCCL unique id (glm_cuda_nccl_id on rank 0)", world);
            goto fail;
        }
        ncclUniqueId id;
        memcpy(id.internal, nccl_id, sizeof id.internal);
        ncclResult_t r = ncclCommInitRank(&I->comm, world, id, rank);
        FAIL_IF(r != ncclSuccess, "cuda backend: ncclCommInitRank (rank %d of %d): %s", rank, world, ncclGetErrorString(r));
    }
#endif
#undef FAIL_IF
    {
        glm_backend *b = &I->be;
        b->name = "cuda";
        b->weight_dtype = GLM_DT_BF16;
        b->act_dtype = GLM_DT_BF16;
        b->rank = rank;
        b->world = world;
        b->impl = I;
        b->alloc = cu_alloc;
        b->free = cu_free;
        b->upload = cu_upload;
        b->download = cu_download;
        b->upload_f32 = cu_upload_f32;
        b->download_f32 = cu_download_f32;
        b->zero = cu_zero;
        b->copy = cu_copy;
        b->matmul = cu_matmul;
        b->add_bias = cu_add_bias;
        b->axpy = cu_axpy;
        b->dropout = cu_dropout;
        b->embedding = cu_embedding;
        b->rmsnorm_fwd = cu_rmsnorm_fwd;
        b->rmsnorm_bwd = cu_rmsnorm_bwd;
        b->rope = cu_rope;
        b->swiglu_fwd = cu_swiglu_fwd;
        b->swiglu_bwd = cu_swiglu_bwd;
        b->attention_fwd = cu_attention_fwd;
        b->attention_bwd = cu_attention_bwd;
        b->cross_entropy = cu_cross_entropy;
        b->adamw = cu_adamw;
        b->sumsq = cu_sumsq;
        b->all_reduce = cu_all_reduce;
        b->sync = cu_sync;
    }
    *out = I;
    return GLM_OK;
fail:
    destroy(I);
    return st;
}

}  // namespace

/* ---------------------------------------------------------------------------- public */

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
    if (r != ncclSuccess) return glm_err(GLM_ERR_INTERNAL, "cuda backend: ncclGetUniqueId: %s", ncclGetErrorString(r));
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
