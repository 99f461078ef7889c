/* kernels/cuda/fp8.cu: the FP8 base format on the CUDA backend (kernels/backend.h): the per-row
 * weight quantization and its dequantization, the per-row activation quantization
 * (fp8_quantize), the transposition of a weight's codes (fp8_transpose) and the FP8 GEMM of a
 * frozen linear through cuBLASLt (fp8_matmul). The codes are kernels/formats.h's arithmetic, the
 * CPU's bytes (kernels/cpu/fp8_cpu.c): the absolute maximum as an integer max of |x|'s bits (any
 * order), one IEEE division for each of scale and inverse scale, one rounded multiply per element.
 *
 * The GEMM. cuBLASLt's FP8 kernels take A transposed and B not ("TN", column-major), i.e. both
 * operands K-contiguous: with row-major X [M, K] (the quantized activation) and W [N, K] (the
 * weight's codes), Y^T [N, M] = W X^T is Lt's D = op(A) B with A = W (E4M3, K x N, ld K,
 * transposed), B = X (K x M, ld K), D = Y (N x M, ld ldy). The activation is quantized with a
 * scale per row (a token's activation or output gradient: s_x[m] from the row's absolute maximum),
 * in row blocks of at most GLM_FP8_BLOCK_BYTES of codes, each row read once, each block one GEMM.
 * The scales:
 *   "outer" (cuBLAS 12.9+ on sm_90: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F): B's scale the
 *     vector s_x [rows], A's the weight's row scales [N] (forward) or ones (the input gradient: its
 *     row scales are in X already, along the summed dimension); D bf16 with beta C, one GEMM;
 *   "tile" (where cuBLASLt has no outer-vector kernel for the shape: sm_89, older cuBLAS; or
 *     GLMTUNE_FP8_GEMM=tile): D f32 = W X^T into a tile of at most GLM_FP8_BLOCK_BYTES, then
 *     y = bf16(tile x s_x[m] x scale[n] + beta y).
 * Accumulation: CUBLAS_COMPUTE_32F with fast accumulation (the tensor cores' partial sums are not
 * promoted to fp32 as the GEMM goes: 7-19% faster with outer vectors, 1-5% per tensor, and the 9B
 * fidelity table unchanged, docs/fp8.md); GLMTUNE_FP8_ACCUM=fp32 promotes them.
 * GLMTUNE_FP8_BLOCK_ROWS=n caps a block's rows (tests: many blocks on small inputs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp8.h>
#include <algorithm>
#include <unordered_map>

#include "kernels/cuda/cuda_common.cuh"

extern "C" {
#include "kernels/formats.h"
}

namespace glmcu {

/* the scale vectors' slot: from byte 0 A's vector of ones for the input gradients (at most VEC_B / 4
 * floats: N <= VEC_B_MAX); from byte VEC_B the activation's row scales, B's vector (at most VEC_B_MAX
 * floats: the most rows of a block). cuBLASLt reads them through scale pointers, which must be
 * aligned (a scale 4 bytes into its buffer came back CUBLAS_STATUS_NOT_SUPPORTED on the H200 with
 * cuBLAS 13.1, tests/gpu/fp8_probe.cu shows it): both start on 1 MiB boundaries of the slot. */
constexpr size_t VEC_BYTES = 2u << 20, VEC_B = 1u << 20;
constexpr int64_t VEC_B_MAX = (int64_t)(VEC_BYTES - VEC_B) / 4;
constexpr int64_t BLOCK = (int64_t)GLM_FP8_BLOCK_BYTES;

enum { MODE_OUTER = 1, MODE_TILE = 2 };

struct fp8_key {
    int64_t rows, N, K, ldy;
    int kind, mode, align;
    int zero = 0; /* fills what would be padding: keys are built as temporaries, hashed and compared as bytes */
    bool operator==(const fp8_key &o) const { return !memcmp(this, &o, sizeof *this); }
};
static_assert(sizeof(fp8_key) == 4 * sizeof(int64_t) + 4 * sizeof(int), "fp8_key has no padding bytes");
struct fp8_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool ok = false; /* an algorithm was found */
};
struct fp8_cache {
    std::unordered_map<fp8_key, fp8_plan, key_bytes_hash<fp8_key>> plans;
    int64_t calls[3] = {0, 0, 0}; /* GEMMs run: [0] outer vectors without row scales (input gradients), [1] outer
                                     vectors with the weight's row scales (forward), [2] through the f32 tile */
    int force_tile = 0;           /* GLMTUNE_FP8_GEMM=tile: the tile even where outer vectors would do */
    int64_t block_rows = 0;       /* GLMTUNE_FP8_BLOCK_ROWS=n (> 0): at most n rows a block (tests: many blocks) */
    int8_t fast_accum = 1;        /* CUBLASLT_MATMUL_DESC_FAST_ACCUM: the tensor cores' own accumulation, not promoted
                                     to fp32 as it goes (7-19% faster at the 9B shapes, fidelity unchanged: docs/fp8.md);
                                     GLMTUNE_FP8_ACCUM=fp32 promotes */
};

static fp8_cache *cache_of(cuda_impl *I) {
    if (!I->fp8s) {
        I->fp8s = new fp8_cache();
        const char *e = getenv("GLMTUNE_FP8_GEMM");
        I->fp8s->force_tile = e && !strcmp(e, "tile");
        const char *r = getenv("GLMTUNE_FP8_BLOCK_ROWS");
        I->fp8s->block_rows = r ? atoll(r) : 0;
        const char *a = getenv("GLMTUNE_FP8_ACCUM");
        I->fp8s->fast_accum = !(a && !strcmp(a, "fp32"));
    }
    return I->fp8s;
}

void fp8_destroy(cuda_impl *I) {
    if (!I->fp8s) return;
    for (auto &kv : I->fp8s->plans) {
        fp8_plan &p = kv.second;
        if (p.la) cublasLtMatrixLayoutDestroy(p.la);
        if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
        if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
        if (p.op) cublasLtMatmulDescDestroy(p.op);
    }
    delete I->fp8s;
    I->fp8s = nullptr;
}

static int align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    return (a & 15) == 0 ? 16 : (a & 7) == 0 ? 8 : (a & 3) == 0 ? 4 : 2;
}

/* ---------------------------------------------------------------------------- kernels */

/* The block's maximum of every thread's a (blockDim.x a multiple of 32), returned to the threads of
 * warp 0; red is 32 words of shared memory. */
__device__ __forceinline__ uint32_t block_max_warp0(uint32_t a, uint32_t *red) {
    a = __reduce_max_sync(0xffffffffu, a);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
    __syncthreads();
    uint32_t v = 0;
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0;
        v = __reduce_max_sync(0xffffffffu, v);
    }
    return v;
}

/* The same maximum returned to every thread; red is 33 words of shared memory, free again on return. */
__device__ __forceinline__ uint32_t block_max_all(uint32_t a, uint32_t *red) {
    const uint32_t v = block_max_warp0(a, red);
    if (threadIdx.x == 0) red[32] = v;
    __syncthreads();
    const uint32_t r = red[32];
    __syncthreads();
    return r;
}

/* the value x[m, k] (times col_mul[k]) as fp8_quantize defines it */
__device__ __forceinline__ float act_value(const bf16 *x, int64_t ldx, int64_t m, int64_t k, const float *col_mul) {
    float v = ld(x + m * ldx + k);
    return col_mul ? glm_fmul_rn(v, col_mul[k]) : v;
}

/* ones [n] = 1 (A's scale vector of an input-gradient GEMM: its weight's row scales are inside X),
 * written by the quantization that precedes the GEMM on the stream, by all of its threads */
__device__ __forceinline__ void fill_ones(float *ones, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) ones[i] = 1.0f;
}

/* Row m of q [rows, K] (packed) and scale[m]: the row's absolute maximum, then its codes (any
 * alignment; one block a row, the row read twice, the second time mostly from the caches). */
__global__ void k_act_quant_row(const bf16 *__restrict__ x, int64_t ldx, int64_t rows, int64_t K,
                                const float *__restrict__ col_mul, int kind, uint8_t *__restrict__ q, float *__restrict__ scale,
                                float *ones, int64_t n_ones) {
    __shared__ uint32_t red[33];
    fill_ones(ones, n_ones);
    for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
        uint32_t a = 0;
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
            uint32_t b = glm_abs_bits(act_value(x, ldx, m, k, col_mul));
            a = b > a ? b : a;
        }
        const float am = glm_bits_f32(block_max_all(a, red)), inv = glm_fp8_inv_scale(am, (glm_fp8_kind)kind);
        if (threadIdx.x == 0) scale[m] = glm_fp8_scale(am, (glm_fp8_kind)kind);
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
            q[m * K + k] = glm_fp8_encode(act_value(x, ldx, m, k, col_mul), inv, (glm_fp8_kind)kind);
    }
}

/* The same 8 elements a thread (16-byte loads of bf16, 8-byte stores of codes), for x 16-byte
 * aligned with ldx and K multiples of 8: the row's 16-byte chunks stay in registers (QCH a thread)
 * between its absolute maximum and its codes, so each row is read from memory once (a row wider
 * than QCH x blockDim.x chunks reads the rest again). The codes through the GPU's own conversion
 * (cvt.rn.satfinite, sm_89+), which glm_cuda_fp8_convert_check shows equal to kernels/formats.h's
 * glm_f32_to_fp8 for every float32, so the bytes are the CPU's. */
constexpr int QCH = 8, QMAXT = 512;

template <bool MUL16>
__device__ __forceinline__ void values8(const bf16x8 &u, int64_t k, const float *col_mul, float v[8]) {
    for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(u.v[j]);
        v[2 * j] = f.x, v[2 * j + 1] = f.y;
    }
    if (!col_mul) return;
    if (MUL16) { /* col_mul 16-byte aligned: two 16-byte loads (the same products) */
        const float4 a = *(const float4 *)(col_mul + k), b = *(const float4 *)(col_mul + k + 4);
        const float m[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        for (int j = 0; j < 8; j++) v[j] = glm_fmul_rn(v[j], m[j]);
    } else {
        for (int j = 0; j < 8; j++) v[j] = glm_fmul_rn(v[j], col_mul[k + j]);
    }
}

__device__ __forceinline__ uint8_t encode_hw(float v, float inv, int kind) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return (uint8_t)__nv_cvt_float_to_fp8(glm_fmul_rn(v, inv), __NV_SATFINITE, kind == GLM_FP8_E5M2 ? __NV_E5M2 : __NV_E4M3);
#else
    return glm_fp8_encode(v, inv, (glm_fp8_kind)kind);
#endif
}

__device__ __forceinline__ uint32_t amax8(const float v[8], uint32_t a) {
    for (int j = 0; j < 8; j++) {
        uint32_t b = glm_abs_bits(v[j]);
        a = b > a ? b : a;
    }
    return a;
}

__device__ __forceinline__ uint64_t codes8(const float v[8], float inv, int kind) {
    uint64_t w = 0;
    for (int j = 0; j < 8; j++) w |= (uint64_t)encode_hw(v[j], inv, kind) << (8 * j);
    return w;
}

template <bool MUL16>
__global__ void __launch_bounds__(QMAXT) k_act_quant_row8(const bf16 *__restrict__ x, int64_t ldx, int64_t rows, int64_t K,
                                                          const float *__restrict__ col_mul, int kind, uint8_t *__restrict__ q,
                                                          float *__restrict__ scale, float *ones, int64_t n_ones) {
    __shared__ uint32_t red[33];
    fill_ones(ones, n_ones);
    const int64_t K8 = K / 8, T = blockDim.x;
    for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
        const bf16 *xr = x + m * ldx;
        bf16x8 c[QCH];
#pragma unroll
        for (int i = 0; i < QCH; i++) {
            const int64_t g = threadIdx.x + i * T;
            if (g < K8) c[i] = *(const bf16x8 *)(xr + g * 8);
        }
        uint32_t a = 0;
        float v[8];
#pragma unroll
        for (int i = 0; i < QCH; i++) {
            const int64_t g = threadIdx.x + i * T;
            if (g < K8) {
                values8<MUL16>(c[i], g * 8, col_mul, v);
                a = amax8(v, a);
            }
        }
        for (int64_t g = threadIdx.x + QCH * T; g < K8; g += T) {
            values8<MUL16>(*(const bf16x8 *)(xr + g * 8), g * 8, col_mul, v);
            a = amax8(v, a);
        }
        const float am = glm_bits_f32(block_max_all(a, red)), inv = glm_fp8_inv_scale(am, (glm_fp8_kind)kind);
        if (threadIdx.x == 0) scale[m] = glm_fp8_scale(am, (glm_fp8_kind)kind);
        uint8_t *qr = q + m * K;
#pragma unroll
        for (int i = 0; i < QCH; i++) {
            const int64_t g = threadIdx.x + i * T;
            if (g < K8) {
                values8<MUL16>(c[i], g * 8, col_mul, v);
                *(uint64_t *)(qr + g * 8) = codes8(v, inv, kind);
            }
        }
        for (int64_t g = threadIdx.x + QCH * T; g < K8; g += T) {
            values8<MUL16>(*(const bf16x8 *)(xr + g * 8), g * 8, col_mul, v);
            *(uint64_t *)(qr + g * 8) = codes8(v, inv, kind);
        }
    }
}

/* the threads of k_act_quant_row8's blocks for rows of K: enough warps that a row's chunks fit in
 * their registers, 64 to QMAXT */
static int row8_threads(int64_t K) {
    const int64_t need = (K / 8 + QCH - 1) / QCH;
    return (int)std::min<int64_t>(QMAXT, std::max<int64_t>(64, (need + 31) / 32 * 32));
}

/* the column multipliers read 16 bytes at a time (K a multiple of 8 already): 1.6 -> 3.1 TB/s for
 * dense_h_to_4h's input gradient at 8k (docs/bench/2026-12-05-h200.md) */
static bool mul16(const float *col_mul) { return col_mul && ((uintptr_t)col_mul & 15) == 0; }

/* 8 at a time where x's rows and q's are aligned for it */
static bool vec8(const void *x, int64_t ldx, int64_t K, const void *q) {
    return K % 8 == 0 && ldx % 8 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)q & 7) == 0;
}

/* y [rows, N] (ldy) = bf16(t [rows, N] x sx[r] x rs[n] + beta y) (rs NULL: 1); beta == 0 does not read y */
__global__ void k_tile_epilogue(bf16 *__restrict__ y, int64_t ldy, const float *__restrict__ t, int64_t rows, int64_t N,
                                const float *__restrict__ sx, const float *__restrict__ rs, float beta) {
    const int64_t n = rows * N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        float v = glm_fmul_rn(t[i], sx[r]);
        if (rs) v = glm_fmul_rn(v, rs[c]);
        if (beta != 0.0f) v += beta * ld(y + r * ldy + c);
        st(y + r * ldy + c, v);
    }
}

/* dst [cols, rows] = src [rows, cols]^T, 32 x 32 tiles of bytes through shared memory (any shape) */
__global__ void k_transpose8(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src, int64_t rows, int64_t cols) {
    __shared__ uint8_t tile[32][33];
    const int64_t r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
    }
}

/* dst [cols, rows] = src [rows, cols]^T for rows and cols multiples of 64 and both buffers 4-byte
 * aligned: a 64 x 64 tile per block of 16 x 16 threads, each moving four 4-byte words in (one per
 * row it reads) and four out (each packed from four rows of the tile); 0.67 -> 2.2 TB/s against
 * the byte tiles at the 9B shapes (docs/bench/2026-12-05-h200.md) */
__global__ void k_transpose8_64(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src, int64_t rows, int64_t cols) {
    __shared__ __align__(16) uint8_t tile[64][68]; /* rows padded by a word: the column reads spread over the banks */
    const int64_t r0 = (int64_t)blockIdx.y * 64, c0 = (int64_t)blockIdx.x * 64;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int i = 0; i < 4; i++) {
        const int r = ty + 16 * i;
        *(uint32_t *)&tile[r][4 * tx] = *(const uint32_t *)(src + (r0 + r) * cols + c0 + 4 * tx);
    }
    __syncthreads();
    for (int i = 0; i < 4; i++) {
        const int c = ty + 16 * i; /* the output row: column c0 + c of src */
        const uint32_t w = (uint32_t)tile[4 * tx][c] | (uint32_t)tile[4 * tx + 1][c] << 8 |
                           (uint32_t)tile[4 * tx + 2][c] << 16 | (uint32_t)tile[4 * tx + 3][c] << 24;
        *(uint32_t *)(dst + (c0 + c) * rows + r0 + 4 * tx) = w;
    }
}

/* one block per row: scale[r] and the row's E4M3 codes (kernels/weight.h's fp8 format) */
template <typename T>
__global__ void k_weight_quant(const T *__restrict__ w, int64_t cols, uint8_t *__restrict__ q, float *__restrict__ scale) {
    __shared__ uint32_t red[32];
    const int64_t r = blockIdx.x;
    const T *row = w + r * cols;
    uint32_t a = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        uint32_t b = glm_abs_bits((float)row[c]);
        a = b > a ? b : a;
    }
    const uint32_t v = block_max_warp0(a, red);
    if (threadIdx.x == 0) red[0] = v; /* after warp 0's reads of red: they precede its reduction */
    __syncthreads();
    const float am = glm_bits_f32(red[0]), inv = glm_fp8_inv_scale(am, GLM_FP8_E4M3);
    if (threadIdx.x == 0) scale[r] = glm_fp8_scale(am, GLM_FP8_E4M3);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) q[r * cols + c] = glm_fp8_encode((float)row[c], inv, GLM_FP8_E4M3);
}

/* out [rows, cols] bf16 = code value x scale[r], rounded once */
__global__ void k_weight_dequant(const uint8_t *__restrict__ q, const float *__restrict__ scale, int64_t rows, int64_t cols,
                                 uint16_t *__restrict__ out) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = glm_f32_to_bf16(glm_fmul_rn(glm_fp8_to_f32(q[i], GLM_FP8_E4M3), scale[i / cols]));
}

/* ---------------------------------------------------------------------------- weights */

glm_status cu_fp8_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st) {
    cuda_impl *I = IMPL(be);
    if (dst->n != dst->rows * dst->cols || !dst->data || !dst->absmax)
        return glm_err(GLM_ERR_ARG, "weight quantize (fp8): a whole [%lld, %lld] matrix with its codes and row scales "
                       "(n %lld)", (long long)dst->rows, (long long)dst->cols, (long long)dst->n);
    if (dst->rows == 0 || dst->cols == 0) return GLM_OK;
    if (dst->rows > INT32_MAX) return glm_err(GLM_ERR_ARG, "weight quantize (fp8): %lld rows", (long long)dst->rows);
    if (st == GLM_DT_BF16)
        k_weight_quant<bf16><<<(unsigned)dst->rows, 256, 0, I->s>>>((const bf16 *)src, dst->cols, (uint8_t *)dst->data,
                                                                     (float *)dst->absmax);
    else if (st == GLM_DT_F32)
        k_weight_quant<float><<<(unsigned)dst->rows, 256, 0, I->s>>>((const float *)src, dst->cols, (uint8_t *)dst->data,
                                                                      (float *)dst->absmax);
    else
        return glm_err(GLM_ERR_UNSUPPORTED, "weight quantize (fp8): source dtype %d (f32 or bf16)", (int)st);
    LAUNCHED("weight quantize (fp8)");
    return GLM_OK;
}

glm_status cu_fp8_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src) {
    if (dt != GLM_DT_BF16) return glm_err(GLM_ERR_UNSUPPORTED, "weight dequantize (fp8): the CUDA backend dequantizes to bf16");
    if (src->n != src->rows * src->cols)
        return glm_err(GLM_ERR_ARG, "weight dequantize (fp8): a whole matrix (n %lld of [%lld, %lld])", (long long)src->n,
                       (long long)src->rows, (long long)src->cols);
    if (src->n == 0) return GLM_OK;
    k_weight_dequant<<<grid_for(src->n, 256), 256, 0, IMPL(be)->s>>>((const uint8_t *)src->data, (const float *)src->absmax,
                                                                     src->rows, src->cols, (uint16_t *)dst);
    LAUNCHED("weight dequantize (fp8)");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- activations */

static glm_status check_kind(int kind, const char *op) {
    if (kind != GLM_FP8_E4M3 && kind != GLM_FP8_E5M2)
        return glm_err(GLM_ERR_ARG, "%s: FP8 kind %d (E4M3 %d or E5M2 %d)", op, kind, GLM_FP8_E4M3, GLM_FP8_E5M2);
    return GLM_OK;
}

/* q [rows, K] = the codes of x's rows and scale [rows] their scales (fp8_quantize's rule); ones
 * (n_ones of them, may be 0) set to 1 on the way (an input-gradient GEMM's A scale vector) */
static glm_status act_quant(cuda_impl *I, const void *x, int64_t ldx, int64_t rows, int64_t K, const float *col_mul, int kind,
                            uint8_t *q, float *scale, float *ones, int64_t n_ones) {
    if (rows == 0) return GLM_OK;
    const unsigned grid = (unsigned)std::min<int64_t>(rows, 1 << 20);
    if (vec8(x, ldx, K, q) && mul16(col_mul))
        k_act_quant_row8<true><<<grid, row8_threads(K), 0, I->s>>>((const bf16 *)x, ldx, rows, K, col_mul, kind, q, scale,
                                                                   ones, n_ones);
    else if (vec8(x, ldx, K, q))
        k_act_quant_row8<false><<<grid, row8_threads(K), 0, I->s>>>((const bf16 *)x, ldx, rows, K, col_mul, kind, q, scale,
                                                                    ones, n_ones);
    else
        k_act_quant_row<<<grid, 256, 0, I->s>>>((const bf16 *)x, ldx, rows, K, col_mul, kind, q, scale, ones, n_ones);
    LAUNCHED_I(I, "fp8 quantize");
    return GLM_OK;
}

glm_status cu_fp8_quantize(const glm_backend *be, uint8_t *q, float *scale, const void *x, int64_t ldx, int64_t M, int64_t K,
                           const float *col_mul, int kind) {
    GLM_TRY(check_kind(kind, "fp8 quantize"));
    if (M < 0 || K < 0 || ldx < K)
        return glm_err(GLM_ERR_ARG, "fp8 quantize: bad sizes M=%lld K=%lld ldx=%lld", (long long)M, (long long)K,
                       (long long)ldx);
    return act_quant(IMPL(be), x, ldx, M, K, col_mul, kind, q, scale, nullptr, 0);
}

glm_status cu_fp8_transpose(const glm_backend *be, uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0 || (rows + 31) / 32 > 65535)
        return glm_err(GLM_ERR_ARG, "fp8 transpose: bad sizes %lld x %lld", (long long)rows, (long long)cols);
    if (rows == 0 || cols == 0) return GLM_OK;
    cuda_impl *I = IMPL(be);
    if (rows % 64 == 0 && cols % 64 == 0 && rows / 64 <= 65535 && ((uintptr_t)src & 3) == 0 &&
        ((uintptr_t)dst & 3) == 0) {
        k_transpose8_64<<<dim3((unsigned)(cols / 64), (unsigned)(rows / 64)), dim3(16, 16), 0, I->s>>>(dst, src, rows, cols);
        LAUNCHED("fp8 transpose");
        return GLM_OK;
    }
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32)), block(32, 8);
    k_transpose8<<<grid, block, 0, I->s>>>(dst, src, rows, cols);
    LAUNCHED("fp8 transpose");
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- GEMM */

static void plan_free(fp8_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    *p = fp8_plan();
}

/* The cached plan of one block shape in one mode; p->ok false when cuBLASLt has no algorithm for it
 * (or declines its attributes: an older cuBLAS without outer-vector scaling). Outer vectors: the
 * heuristic wants the scale pointers set (cuBLASLt 13.1 refuses "OUTER_VEC_32F requires a custom
 * pointer" without them, and the plan fell back to the tile for every GEMM): sa and sb, the first
 * call's, each call sets its own. */
static fp8_plan *plan_for(cuda_impl *I, const fp8_key &k, const void *sa = nullptr, const void *sb = nullptr) {
    fp8_cache *c = cache_of(I);
    auto it = c->plans.find(k);
    if (it != c->plans.end()) return &it->second;
    fp8_plan p;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cudaDataType_t bt = k.kind == GLM_FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    const cudaDataType_t ct = k.mode == MODE_TILE ? CUDA_R_32F : CUDA_R_16BF;
    const int64_t ldc = k.mode == MODE_TILE ? k.N : k.ldy;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    size_t ws = LT_WS_BYTES;
    uint32_t al[3] = {16, 16, (uint32_t)(k.mode == MODE_TILE ? 16 : k.align)};
    cublasStatus_t s = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (!s && c->fast_accum)
        s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &c->fast_accum, sizeof c->fast_accum);
    if (!s && k.mode == MODE_OUTER) {
        int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
        if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
        if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        if (!s) s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    }
    if (!s) s = cublasLtMatrixLayoutCreate(&p.la, CUDA_R_8F_E4M3, k.K, k.N, k.K);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.lb, bt, k.K, k.rows, k.K);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.lc, ct, k.N, k.rows, ldc);
    if (!s) s = cublasLtMatmulPreferenceCreate(&pref);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4);
    if (!s && cublasLtMatmulAlgoGetHeuristic(I->lt, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &res, &nres) ==
                  CUBLAS_STATUS_SUCCESS &&
        nres > 0) {
        p.algo = res.algo;
        p.ok = true;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!p.ok) plan_free(&p); /* remembered as "no algorithm" */
    return &c->plans.emplace(k, p).first->second;
}

/* one cublasLtMatmul of a plan with its scale pointers (its status: the caller decides) */
static cublasStatus_t run_plan(cuda_impl *I, fp8_plan *p, const void *a_scale, const void *b_scale, const uint8_t *w,
                               const uint8_t *xq, float beta, void *c) {
    const float one = 1.0f;
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale);
    if (!s) s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale);
    if (!s)
        s = cublasLtMatmul(I->lt, p->op, &one, w, p->la, xq, p->lb, &beta, c, p->lc, c, p->lc, &p->algo, I->lt_ws, LT_WS_BYTES,
                           I->s);
    return s;
}

glm_status cu_fp8_matmul(const glm_backend *be, int64_t M, int64_t N, int64_t K, const void *x, int64_t ldx,
                         const float *col_mul, int x_kind, const uint8_t *w, const float *w_scale, float beta, void *y,
                         int64_t ldy) {
    cuda_impl *I = IMPL(be);
    GLM_TRY(check_kind(x_kind, "fp8 matmul"));
    if (M < 0 || N < 0 || K < 0 || ldx < K || ldy < N || M > INT32_MAX || N > VEC_B_MAX || K > INT32_MAX || ldy > INT32_MAX)
        return glm_err(GLM_ERR_ARG, "fp8 matmul: bad sizes M=%lld N=%lld K=%lld ldx=%lld ldy=%lld", (long long)M,
                       (long long)N, (long long)K, (long long)ldx, (long long)ldy);
    if (N % 16 || K % 16)
        return glm_err(GLM_ERR_UNSUPPORTED, "fp8 matmul: N=%lld and K=%lld must be multiples of 16 (the FP8 tensor "
                       "cores' layout)", (long long)N, (long long)K);
    if (I->sm < 89)
        return glm_err(GLM_ERR_UNSUPPORTED, "fp8 matmul: this GPU (sm_%d) has no FP8 tensor cores (sm_89 and later)", I->sm);
    if (M == 0 || N == 0) return GLM_OK;
    fp8_cache *c = cache_of(I);
    void *vec, *qv, *tile = nullptr;
    GLM_TRY(scratch(I, SCR_FP8_VEC, VEC_BYTES, &vec));
    /* A's scale vector: the weight's row scales, or (input gradient) ones written by the quantization */
    float *ones = (float *)vec, *bvec = (float *)((char *)vec + VEC_B);
    const float *avec = w_scale ? w_scale : ones;
    /* the rows of a block: codes and (tile mode) the f32 tile within GLM_FP8_BLOCK_BYTES, the scale vector within its room */
    int64_t rb = std::min<int64_t>(M, std::max<int64_t>(1, BLOCK / K));
    rb = std::min<int64_t>(rb, VEC_B_MAX);
    if (rb < M && rb > 128) rb -= rb % 128; /* whole tiles of cuBLASLt's kernels in every block but the last */
    if (c->block_rows > 0) rb = std::min<int64_t>(rb, c->block_rows);
    int mode = c->force_tile ? MODE_TILE : MODE_OUTER;
    GLM_TRY(scratch(I, SCR_FP8_Q, (size_t)(rb * K), &qv));
    for (int64_t r0 = 0; r0 < M;) {
        int64_t rows = std::min<int64_t>(rb, M - r0);
        bf16 *yb = (bf16 *)y + r0 * ldy;
        fp8_plan *p = nullptr;
        if (mode == MODE_OUTER) { /* sm_90's per-row scaling inside the GEMM; else the tile for good */
            p = plan_for(I, fp8_key{rows, N, K, ldy, x_kind, MODE_OUTER, align_of(yb)}, avec, bvec);
            if (!p->ok) mode = MODE_TILE;
        }
        if (mode == MODE_TILE) {
            rows = std::min<int64_t>(rows, std::max<int64_t>(1, BLOCK / (4 * N)));
            p = plan_for(I, fp8_key{rows, N, K, N, x_kind, MODE_TILE, 16});
            if (!tile) GLM_TRY(scratch(I, SCR_FP8_TILE, (size_t)(std::min<int64_t>(rb, std::max<int64_t>(1, BLOCK / (4 * N))) * N * 4), &tile));
        }
        if (!p->ok)
            return glm_err(GLM_ERR_UNSUPPORTED, "fp8 matmul: cuBLASLt has no FP8 algorithm for M=%lld N=%lld K=%lld (%s) on "
                           "sm_%d; hint: --base-dtype bf16", (long long)rows, (long long)N, (long long)K,
                           x_kind == GLM_FP8_E5M2 ? "E5M2 x E4M3" : "E4M3 x E4M3", I->sm);
        GLM_TRY(act_quant(I, (const bf16 *)x + r0 * ldx, ldx, rows, K, col_mul, x_kind, (uint8_t *)qv, bvec,
                          mode == MODE_OUTER && !w_scale ? ones : nullptr, mode == MODE_OUTER && !w_scale ? N : 0));
        cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
        if (mode == MODE_OUTER) {
            bs = run_plan(I, p, avec, bvec, w, (const uint8_t *)qv, beta, yb);
            if (bs != CUBLAS_STATUS_SUCCESS) {
                /* a cuBLASLt that offers the kernel but refuses the call: the tile from now on, and this block again */
                p->ok = false;
                mode = MODE_TILE;
                continue;
            }
        } else {
            bs = run_plan(I, p, nullptr, nullptr, w, (const uint8_t *)qv, 0.0f, tile);
            if (bs == CUBLAS_STATUS_SUCCESS) {
                k_tile_epilogue<<<grid_for(rows * N, 256), 256, 0, I->s>>>(yb, ldy, (const float *)tile, rows, N, bvec, w_scale,
                                                                           beta);
                LAUNCHED("fp8 matmul (row scales)");
            }
        }
        if (bs != CUBLAS_STATUS_SUCCESS)
            return glm_err(GLM_ERR_DEVICE, "cuda backend: fp8 matmul M=%lld N=%lld K=%lld: cublasLtMatmul: %s (%d)",
                           (long long)rows, (long long)N, (long long)K, blas_name(bs), (int)bs);
        LAUNCHED("fp8 matmul");
        c->calls[mode == MODE_TILE ? 2 : w_scale ? 1 : 0]++;
        r0 += rows;
    }
    return GLM_OK;
}

}  // namespace glmcu

using namespace glmcu;

/* For tests (tests/gpu/test_fp8_ops.c, through glm_cuda_module_symbol): the FP8 GEMMs this backend ran
 * so far by the way it applied the scales: counts[0] both scale vectors inside cuBLASLt (outer
 * vectors) with A's all ones (input gradients: the weight's row scales are in X), [1] outer vectors
 * with the weight's row scales (forward), [2] through the f32 tile. */
extern "C" void glm_cuda_fp8_counts(const glm_backend *be, int64_t counts[3]) {
    cuda_impl *I = IMPL(be);
    for (int i = 0; i < 3; i++) counts[i] = I->fp8s ? I->fp8s->calls[i] : 0;
}

/* every float32 bit pattern u in [0, 2^32): glm_f32_to_fp8 against the GPU's own conversion
 * (__nv_cvt_float_to_fp8 with __NV_SATFINITE: cvt.rn.satfinite on sm_89+) */
__global__ void k_convert_check(int kind, unsigned long long *bad, unsigned int *first) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long nbad = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (1ULL << 32); i += stride) {
        uint32_t u = (uint32_t)i;
        float x;
        memcpy(&x, &u, 4);
        uint8_t mine = glm_f32_to_fp8(x, (glm_fp8_kind)kind);
        uint8_t hw = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind == GLM_FP8_E5M2 ? __NV_E5M2 : __NV_E4M3);
        if (mine != hw) {
            nbad++;
            atomicMin(first, u);
        }
    }
    if (nbad) atomicAdd(bad, nbad);
}

/* For tests: runs k_convert_check for kind (glm_fp8_kind) on the backend's device; *mismatches the
 * inputs where the two differ, *first the smallest such bit pattern (0xffffffff: none). */
extern "C" glm_status glm_cuda_fp8_convert_check(const glm_backend *be, int kind, uint64_t *mismatches, uint32_t *first) {
    cuda_impl *I = IMPL(be);
    unsigned long long *d = nullptr;
    CU(cudaMalloc(&d, 16), "fp8 convert check");
    unsigned long long init[2] = {0, 0xffffffffULL};
    cudaError_t e = cudaMemcpyAsync(d, init, 16, cudaMemcpyHostToDevice, I->s);
    if (e == cudaSuccess) {
        k_convert_check<<<4096, 256, 0, I->s>>>(kind, d, (unsigned int *)(d + 1));
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(init, d, 16, cudaMemcpyDeviceToHost, I->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(I->s);
    cudaFree(d);
    if (e != cudaSuccess) return glm_err(GLM_ERR_DEVICE, "fp8 convert check: %s", cudaGetErrorString(e));
    *mismatches = init[0];
    *first = (uint32_t)init[1];
    return GLM_OK;
}
