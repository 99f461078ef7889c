/* kernels/cuda/gemm.cu: the backend's matmul through cuBLASLt.
 *
 * Row-major C [M,N] = alpha op(A) op(B) + beta C0 (C0: C itself, or another matrix of C's layout,
 * cuBLASLt's C beside its D) runs as the column-major product C^T = op(B)^T op(A)^T (cuBLAS is
 * column-major). bf16 x bf16 operands go straight to cuBLASLt
 * with fp32 accumulation (CUBLAS_COMPUTE_32F) and C either bf16 (one rounding at the store, C
 * read as bf16 when beta != 0) or fp32: no fp32 temporaries, no conversion passes. fp32 x fp32
 * is an fp32 GEMM (no TF32). Operands of mixed dtypes (only tests ask for them: the model keeps
 * act-dtype copies of its LoRA weights) widen the bf16 one into an fp32 scratch copy (exact).
 *
 * cuBLASLt's descriptors and its heuristic's choice of algorithm are made once per shape (M, N,
 * K, strides, dtypes, transposes, pointer alignments) and cached; the step loop then only calls
 * cublasLtMatmul, with a fixed workspace of LT_WS_BYTES. */
#include <string.h>

#include <algorithm>
#include <unordered_map>

#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

struct gemm_key {
    int64_t M, N, K, lda, ldb, ldc;
    int ta, tb, dta, dtb, dtc, align;
    bool operator==(const gemm_key &o) const { return !memcmp(this, &o, sizeof *this); }
};
struct gemm_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool have_algo = false;
};
struct gemm_cache {
    std::unordered_map<gemm_key, gemm_plan, key_bytes_hash<gemm_key>> plans;
};

glm_status gemm_init(cuda_impl *I) {
    cublasStatus_t s = cublasLtCreate(&I->lt);
    if (s != CUBLAS_STATUS_SUCCESS) return glm_err(GLM_ERR_DEVICE, "cuda backend: cublasLtCreate: %s", blas_name(s));
    CU(cudaMalloc(&I->lt_ws, LT_WS_BYTES), "cuBLASLt workspace");
    I->gemms = new gemm_cache();
    return GLM_OK;
}

void gemm_destroy(cuda_impl *I) {
    if (I->gemms) {
        for (auto &kv : I->gemms->plans) {
            gemm_plan &p = kv.second;
            if (p.la) cublasLtMatrixLayoutDestroy(p.la);
            if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
            if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
            if (p.op) cublasLtMatmulDescDestroy(p.op);
        }
        delete I->gemms;
        I->gemms = nullptr;
    }
    if (I->lt_ws) cudaFree(I->lt_ws);
    I->lt_ws = nullptr;
    if (I->lt) cublasLtDestroy(I->lt);
    I->lt = nullptr;
}

static int align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    return (a & 15) == 0 ? 16 : (a & 7) == 0 ? 8 : (a & 3) == 0 ? 4 : 2;
}

/* The cached plan of one shape, made on first use. */
static glm_status plan_for(cuda_impl *I, const gemm_key &k, gemm_plan **out) {
    auto it = I->gemms->plans.find(k);
    if (it != I->gemms->plans.end()) {
        *out = &it->second;
        return GLM_OK;
    }
    gemm_plan p;
    int aA = k.align & 31, aB = (k.align >> 5) & 31, aC = (k.align >> 10) & 31;
    cublasOperation_t opa = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    cudaDataType_t st = CUDA_R_32F;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    size_t ws = LT_WS_BYTES;
    uint32_t al[3] = {(uint32_t)aB, (uint32_t)aA, (uint32_t)aC}; /* Lt's A is our B, Lt's B our A */
    cublasStatus_t s = cublasLtMatmulDescCreate(&p.op, ct, st);
    if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.la, cdt((glm_dtype)k.dtb), k.tb ? k.K : k.N, k.tb ? k.N : k.K, k.ldb);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.lb, cdt((glm_dtype)k.dta), k.ta ? k.M : k.K, k.ta ? k.K : k.M, k.lda);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.lc, cdt((glm_dtype)k.dtc), k.N, k.M, k.ldc);
    if (!s) s = cublasLtMatmulPreferenceCreate(&pref);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4);
    if (!s) {
        /* no algorithm is not an error: cublasGemmEx takes the shape instead */
        if (cublasLtMatmulAlgoGetHeuristic(I->lt, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &res, &nres) ==
                CUBLAS_STATUS_SUCCESS &&
            nres > 0) {
            p.algo = res.algo;
            p.have_algo = true;
        }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (s) {
        if (p.la) cublasLtMatrixLayoutDestroy(p.la);
        if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
        if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
        if (p.op) cublasLtMatmulDescDestroy(p.op);
        return glm_err(GLM_ERR_DEVICE, "cuda backend: matmul: cuBLASLt descriptor for M=%lld N=%lld K=%lld: %s",
                       (long long)k.M, (long long)k.N, (long long)k.K, blas_name(s));
    }
    *out = &I->gemms->plans.emplace(k, p).first->second;
    return GLM_OK;
}

/* cublasGemmEx, for shapes cuBLASLt has no algorithm for */
static glm_status gemm_ex(cuda_impl *I, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta, const void *C0,
                          void *C, glm_dtype dtc, int64_t ldc) {
    if (C0 && beta != 0.0f) { /* cublasGemmEx has no separate C: C0 into C first */
        const size_t e = dtc == GLM_DT_BF16 ? 2 : 4;
        CU(cudaMemcpy2DAsync(C, (size_t)ldc * e, C0, (size_t)ldc * e, (size_t)N * e, (size_t)M, cudaMemcpyDeviceToDevice, I->s),
           "matmul (C0 into C)");
    }
    BLAS(cublasGemmEx(I->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                      &alpha, B, cdt(dtb), (int)ldb, A, cdt(dta), (int)lda, &beta, C, cdt(dtc), (int)ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
         "matmul (cublasGemmEx)");
    return GLM_OK;
}

/* one GEMM with same-dtype operands (bf16/bf16 or f32/f32), C bf16 or f32; C0 NULL: C itself */
static glm_status gemm_lt(cuda_impl *I, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta, const void *C0,
                          void *C, glm_dtype dtc, int64_t ldc) {
    if (!C0 || beta == 0.0f) C0 = C;
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    k.ta = ta, k.tb = tb, k.dta = dta, k.dtb = dtb, k.dtc = dtc;
    k.align = align_of(A) | align_of(B) << 5 | std::min(align_of(C), align_of(C0)) << 10;
    gemm_plan *p;
    GLM_TRY(plan_for(I, k, &p));
    if (!p->have_algo)
        return gemm_ex(I, ta, tb, M, N, K, alpha, A, dta, lda, B, dtb, ldb, beta, C0 == C ? nullptr : C0, C, dtc, ldc);
    BLAS(cublasLtMatmul(I->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C0, p->lc, C, p->lc, &p->algo, I->lt_ws,
                        LT_WS_BYTES, I->s),
         "matmul (cublasLtMatmul)");
    LAUNCHED_I(I, "matmul");
    return GLM_OK;
}

/* dst [rows, cols] packed f32 = src [rows, cols] bf16 with row stride ld */
__global__ void k_bf16_to_f32_2d(float *dst, const bf16 *src, int64_t rows, int64_t cols, int64_t lds) {
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        dst[i] = ld(src + r * lds + c);
    }
}

/* C[i, j] = bf16(T[i, j] + beta * C0[i, j]) (beta == 0: C0 not read); T packed [M, N] f32 */
__global__ void k_epilogue_bf16(bf16 *C, const bf16 *C0, int64_t ldc, const float *T, int64_t M, int64_t N, float beta) {
    int64_t n = M * N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        float v = T[i];
        if (beta != 0.0f) v += beta * ld(C0 + r * ldc + c);
        st(C + r * ldc + c, v);
    }
}

/* C = beta * C0 for K == 0 (beta == 0 writes zeros without reading) */
template <typename Tc>
__global__ void k_scale(Tc *C, const Tc *C0, int64_t ldc, int64_t M, int64_t N, float beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        float v = beta == 0.0f ? 0.0f : beta * (float)C0[r * ldc + c];
        C[r * ldc + c] = (Tc)v;
    }
}

glm_status cu_matmul(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                     glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta, const void *C0,
                     void *C, glm_dtype dtc, int64_t ldc) {
    cuda_impl *I = IMPL(be);
    if (M == 0 || N == 0) return GLM_OK;
    if (!C0) C0 = C;
    if (K == 0) {
        if (dtc == GLM_DT_BF16)
            k_scale<bf16><<<grid_for(M * N, 256), 256, 0, I->s>>>((bf16 *)C, (const bf16 *)C0, ldc, M, N, beta);
        else k_scale<float><<<grid_for(M * N, 256), 256, 0, I->s>>>((float *)C, (const float *)C0, ldc, M, N, beta);
        LAUNCHED("matmul (K = 0)");
        return GLM_OK;
    }
    if (dta == dtb && (dta == GLM_DT_BF16 || dtc == GLM_DT_F32))
        return gemm_lt(I, ta, tb, M, N, K, alpha, A, dta, lda, B, dtb, ldb, beta, C0, C, dtc, ldc);
    /* mixed operand dtypes: widen the bf16 operand(s) to f32 (exact), fp32 GEMM */
    const void *a = A, *b = B;
    int64_t la = lda, lb = ldb;
    if (dta == GLM_DT_BF16) {
        int64_t rows = ta ? K : M, cols = ta ? M : K;
        void *p;
        GLM_TRY(scratch(I, SCR_WIDEN_A, (size_t)(rows * cols) * 4, &p));
        k_bf16_to_f32_2d<<<grid_for(rows * cols, 256), 256, 0, I->s>>>((float *)p, (const bf16 *)A, rows, cols, lda);
        LAUNCHED("matmul (widen A)");
        a = p;
        la = cols;
    }
    if (dtb == GLM_DT_BF16) {
        int64_t rows = tb ? N : K, cols = tb ? K : N;
        void *p;
        GLM_TRY(scratch(I, SCR_WIDEN_B, (size_t)(rows * cols) * 4, &p));
        k_bf16_to_f32_2d<<<grid_for(rows * cols, 256), 256, 0, I->s>>>((float *)p, (const bf16 *)B, rows, cols, ldb);
        LAUNCHED("matmul (widen B)");
        b = p;
        lb = cols;
    }
    if (dtc == GLM_DT_F32)
        return gemm_lt(I, ta, tb, M, N, K, alpha, a, GLM_DT_F32, la, b, GLM_DT_F32, lb, beta, C0, C, GLM_DT_F32, ldc);
    void *t;
    GLM_TRY(scratch(I, SCR_GEMM_F32, (size_t)(M * N) * 4, &t));
    GLM_TRY(gemm_lt(I, ta, tb, M, N, K, alpha, a, GLM_DT_F32, la, b, GLM_DT_F32, lb, 0.0f, nullptr, t, GLM_DT_F32, N));
    k_epilogue_bf16<<<grid_for(M * N, 256), 256, 0, I->s>>>((bf16 *)C, (const bf16 *)C0, ldc, (const float *)t, M, N, beta);
    LAUNCHED("matmul (bf16 epilogue)");
    return GLM_OK;
}

}  // namespace glmcu
