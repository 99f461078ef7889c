/* kernels/cpu/fp8_cpu.c: the FP8 base format on the CPU backend, the specification the CUDA
 * backend is held to (kernels/backend.h: weight_quantize / weight_dequantize of GLM_WF_FP8_E4M3,
 * fp8_quantize, fp8_matmul, fp8_transpose). The CPU has no FP8 arithmetic: the codes are those of
 * kernels/formats.h, and the GEMM multiplies their decoded values (exact in double: two FP8
 * significands have at most 4 bits each) and sums them in double, the tensor cores' product
 * without their fp32 accumulation order. Every output is f32, as every CPU op's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/formats.h"

/* Value i of a source matrix of dtype st (f32 or bf16 bits). */
static inline float src_at(const void *src, glm_dtype st, int64_t i) {
    return st == GLM_DT_BF16 ? glm_bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
}

glm_status glm_cpu_fp8_weight_quantize(glm_weight *dst, const void *src, glm_dtype st) {
    if (st != GLM_DT_F32 && st != GLM_DT_BF16)
        return glm_err(GLM_ERR_UNSUPPORTED, "weight quantize (fp8): source dtype %d (f32 or bf16)", (int)st);
    if (dst->n != dst->rows * dst->cols || !dst->data || !dst->absmax)
        return glm_err(GLM_ERR_ARG, "weight quantize (fp8): a whole [%lld, %lld] matrix with its codes and row scales "
                       "(n %lld)", (long long)dst->rows, (long long)dst->cols, (long long)dst->n);
    uint8_t *q = dst->data;
    float *scale = dst->absmax;
    for (int64_t r = 0; r < dst->rows; r++) {
        const int64_t o = r * dst->cols;
        uint32_t amax = 0;
        for (int64_t c = 0; c < dst->cols; c++) {
            float v = src_at(src, st, o + c);
            if (!isfinite(v))
                return glm_err(GLM_ERR_NUMERIC, "weight quantize (fp8): element [%lld, %lld] of a [%lld, %lld] matrix is "
                               "%g; hint: the checkpoint is damaged", (long long)r, (long long)c, (long long)dst->rows,
                               (long long)dst->cols, (double)v);
            uint32_t b = glm_abs_bits(v);
            if (b > amax) amax = b;
        }
        const float am = glm_bits_f32(amax), inv = glm_fp8_inv_scale(am, GLM_FP8_E4M3);
        scale[r] = glm_fp8_scale(am, GLM_FP8_E4M3);
        for (int64_t c = 0; c < dst->cols; c++) q[o + c] = glm_fp8_encode(src_at(src, st, o + c), inv, GLM_FP8_E4M3);
    }
    return GLM_OK;
}

glm_status glm_cpu_fp8_weight_dequantize(void *dst, glm_dtype dt, const glm_weight *src) {
    if (dt != GLM_DT_F32 && dt != GLM_DT_BF16)
        return glm_err(GLM_ERR_UNSUPPORTED, "weight dequantize (fp8): destination dtype %d (f32 or bf16)", (int)dt);
    if (src->n != src->rows * src->cols)
        return glm_err(GLM_ERR_ARG, "weight dequantize (fp8): a whole matrix (n %lld of [%lld, %lld])", (long long)src->n,
                       (long long)src->rows, (long long)src->cols);
    const uint8_t *q = src->data;
    const float *scale = src->absmax;
    for (int64_t r = 0; r < src->rows; r++)
        for (int64_t c = 0; c < src->cols; c++) {
            const int64_t i = r * src->cols + c;
            uint16_t h = glm_f32_to_bf16(glm_fmul_rn(glm_fp8_to_f32(q[i], GLM_FP8_E4M3), scale[r]));
            if (dt == GLM_DT_BF16) ((uint16_t *)dst)[i] = h;
            else ((float *)dst)[i] = glm_bf16_to_f32(h);
        }
    return GLM_OK;
}

static glm_status check_kind(int kind, const char *op) {
    if (kind != GLM_FP8_E4M3 && kind != GLM_FP8_E5M2)
        return glm_err(GLM_ERR_ARG, "%s: FP8 kind %d (E4M3 %d or E5M2 %d)", op, kind, GLM_FP8_E4M3, GLM_FP8_E5M2);
    return GLM_OK;
}

glm_status glm_cpu_fp8_quantize(const glm_backend *be, uint8_t *q, float *scale, const void *x, int64_t ldx, int64_t M,
                                int64_t K, const float *col_mul, int kind) {
    (void)be;
    GLM_TRY(check_kind(kind, "fp8 quantize"));
    if (M < 0 || K < 0 || ldx < K)
        return glm_err(GLM_ERR_ARG, "fp8 quantize: bad sizes M=%lld K=%lld ldx=%lld", (long long)M, (long long)K,
                       (long long)ldx);
    const float *xf = x;
    for (int64_t m = 0; m < M; m++) { /* each row its own scale: its absolute maximum, then its codes */
        const float *xr = xf + m * ldx;
        uint32_t amax = 0;
        for (int64_t k = 0; k < K; k++) {
            uint32_t b = glm_abs_bits(col_mul ? glm_fmul_rn(xr[k], col_mul[k]) : xr[k]);
            if (b > amax) amax = b;
        }
        const float am = glm_bits_f32(amax), inv = glm_fp8_inv_scale(am, (glm_fp8_kind)kind);
        scale[m] = glm_fp8_scale(am, (glm_fp8_kind)kind);
        for (int64_t k = 0; k < K; k++)
            q[m * K + k] = glm_fp8_encode(col_mul ? glm_fmul_rn(xr[k], col_mul[k]) : xr[k], inv, (glm_fp8_kind)kind);
    }
    return GLM_OK;
}

glm_status glm_cpu_fp8_matmul(const glm_backend *be, int64_t M, int64_t N, int64_t K, const void *x, int64_t ldx,
                              const float *col_mul, int x_kind, const uint8_t *w, const float *w_scale, float beta, void *y,
                              int64_t ldy) {
    GLM_TRY(check_kind(x_kind, "fp8 matmul"));
    if (M < 0 || N < 0 || K < 0 || ldx < K || ldy < N)
        return glm_err(GLM_ERR_ARG, "fp8 matmul: bad sizes M=%lld N=%lld K=%lld ldx=%lld ldy=%lld", (long long)M,
                       (long long)N, (long long)K, (long long)ldx, (long long)ldy);
    if (N % 16 || K % 16)
        return glm_err(GLM_ERR_UNSUPPORTED, "fp8 matmul: N=%lld and K=%lld must be multiples of 16 (the FP8 tensor "
                       "cores' layout)", (long long)N, (long long)K);
    if (M == 0 || N == 0) return GLM_OK;
    uint8_t *xq = malloc((size_t)(M * K) + 1);
    float *xd = malloc(sizeof(float) * (size_t)(M * K) + 1), *wd = malloc(sizeof(float) * (size_t)(N * K) + 1);
    float *sx = malloc(sizeof(float) * (size_t)M + 1); /* the activation's row scales */
    glm_status st = GLM_OK;
    if (!xq || !xd || !wd || !sx)
        st = glm_err(GLM_ERR_NOMEM, "fp8 matmul: out of memory (%lld x %lld)", (long long)M, (long long)K);
    if (!st) st = glm_cpu_fp8_quantize(be, xq, sx, x, ldx, M, K, col_mul, x_kind);
    if (!st) {
        for (int64_t i = 0; i < M * K; i++) xd[i] = glm_fp8_to_f32(xq[i], (glm_fp8_kind)x_kind);
        for (int64_t i = 0; i < N * K; i++) wd[i] = glm_fp8_to_f32(w[i], GLM_FP8_E4M3);
        float *yf = y;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                const float *a = xd + m * K, *b = wd + n * K;
                double acc = 0;
                for (int64_t k = 0; k < K; k++) acc += (double)a[k] * (double)b[k];
                float v = (float)(acc * (double)sx[m] * (double)(w_scale ? w_scale[n] : 1.0f));
                yf[m * ldy + n] = beta == 0.0f ? v : v + beta * yf[m * ldy + n];
            }
    }
    free(xq);
    free(xd);
    free(wd);
    free(sx);
    return st;
}

glm_status glm_cpu_fp8_transpose(const glm_backend *be, uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols) {
    (void)be;
    if (rows < 0 || cols < 0) return glm_err(GLM_ERR_ARG, "fp8 transpose: bad sizes %lld x %lld", (long long)rows, (long long)cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    return GLM_OK;
}
