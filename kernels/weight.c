/* kernels/weight.c: the base-weight descriptor's sizes and names (kernels/weight.h) and the one
 * entry point the model calls for every frozen linear, glm_base_matmul (kernels/backend.h). */
#include "kernels/weight.h"

#include <string.h>

#include "kernels/backend.h"
#include "kernels/formats.h"
#include "kernels/quant4.h"

const char *glm_wformat_name(glm_wformat f) {
    switch (f) {
    case GLM_WF_F32: return "f32";
    case GLM_WF_BF16: return "bf16";
    case GLM_WF_NF4: return "nf4";
    case GLM_WF_FP4: return "fp4";
    case GLM_WF_FP8_E4M3: return "fp8";
    }
    return "?";
}

int glm_wformat_packed(glm_wformat f) { return f == GLM_WF_NF4 || f == GLM_WF_FP4; }

int glm_wformat_quantized(glm_wformat f) { return glm_wformat_packed(f) || f == GLM_WF_FP8_E4M3; }

glm_status glm_wformat_parse(const char *s, glm_wformat *out) {
    static const glm_wformat all[] = {GLM_WF_F32, GLM_WF_BF16, GLM_WF_NF4, GLM_WF_FP4, GLM_WF_FP8_E4M3};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, glm_wformat_name(all[i]))) {
            *out = all[i];
            return GLM_OK;
        }
    return glm_err(GLM_ERR_ARG, "weight format '%s': expected f32, bf16, nf4, fp4 or fp8", s ? s : "");
}

glm_weight_bytes_t glm_weight_bytes(glm_wformat f, int64_t n, int double_quant) {
    glm_weight_bytes_t b = {0, 0, 0, 0};
    if (n < 0) n = 0;
    if (!glm_wformat_packed(f)) {
        b.data = (size_t)n * (f == GLM_WF_FP8_E4M3 ? 1 : f == GLM_WF_BF16 ? 2 : 4);
        return b;
    }
    if (n == 0) return b;
    glm_q4_sizes q = glm_q4_size(n, double_quant);
    b.data = q.codes;
    b.absmax = double_quant ? q.absmax_codes : q.absmax;
    b.absmax2 = q.absmax2;
    b.offset = q.offset;
    return b;
}

glm_weight_bytes_t glm_weight_matrix_bytes(glm_wformat f, int64_t rows, int64_t cols, int double_quant) {
    glm_weight_bytes_t b = glm_weight_bytes(f, rows * cols, double_quant);
    if (f == GLM_WF_FP8_E4M3 && rows > 0) b.absmax = (size_t)rows * sizeof(float);
    return b;
}

double glm_weight_total_bytes(glm_wformat f, int64_t n, int double_quant) {
    glm_weight_bytes_t b = glm_weight_bytes(f, n, double_quant);
    return (double)b.data + (double)b.absmax + (double)b.absmax2 + (double)b.offset;
}

static double round256(size_t b) { return (double)((b + 255) / 256 * 256); }

double glm_weight_slot_bytes(glm_wformat f, int64_t n, int double_quant) {
    glm_weight_bytes_t b = glm_weight_bytes(f, n, double_quant);
    return round256(b.data) + round256(b.absmax) + round256(b.absmax2);
}

int64_t glm_weight_shard_elems(glm_wformat f, int64_t n, int world) {
    if (world <= 1) return n;
    int64_t s = (n + world - 1) / world;
    if (glm_wformat_packed(f)) {
        const int64_t g = (int64_t)GLM_Q4_BLOCKSIZE * GLM_Q4_DQ_BLOCKSIZE;
        s = (s + g - 1) / g * g;
    }
    return s;
}

static glm_dtype dense_dtype(glm_wformat f) { return f == GLM_WF_BF16 ? GLM_DT_BF16 : GLM_DT_F32; }

glm_status glm_base_matmul(const glm_backend *be, int transpose, int64_t M, const void *x, int64_t ldx, const glm_weight *W,
                           float beta, void *y, int64_t ldy) {
    if (!W || !W->data)
        return glm_err(GLM_ERR_ARG, "base matmul: no weight");
    if (glm_wformat_packed(W->fmt))
        return glm_err(GLM_ERR_UNSUPPORTED, "base matmul: a %s weight [%lld, %lld] must be dequantized first "
                       "(be->weight_dequantize into a dense slot)", glm_wformat_name(W->fmt), (long long)W->rows,
                       (long long)W->cols);
    if (W->n != W->rows * W->cols)
        return glm_err(GLM_ERR_ARG, "base matmul: the weight holds %lld of its %lld x %lld elements (a shard: gather it "
                       "first)", (long long)W->n, (long long)W->rows, (long long)W->cols);
    if (W->fmt == GLM_WF_FP8_E4M3) {
        if (!transpose) /* y [M, rows] = x [M, cols] W^T: E4M3 activations, per-row weight scales */
            return glm_be_fp8_matmul(be, M, W->rows, W->cols, x, ldx, NULL, GLM_FP8_E4M3, W->data, W->absmax, beta, y, ldy);
        if (!W->data_t)
            return glm_err(GLM_ERR_ARG, "base matmul: the input gradient of an fp8 weight [%lld, %lld] reads its codes "
                           "transposed (data_t, be->fp8_transpose), which this view lacks", (long long)W->rows,
                           (long long)W->cols);
        /* y [M, cols] = sum_r x[m, r] scale_r codes[r, c]: the row scales go into x's columns */
        return glm_be_fp8_matmul(be, M, W->cols, W->rows, x, ldx, W->absmax, GLM_FP8_GRAD_KIND, W->data_t, NULL, beta, y, ldy);
    }
    const glm_dtype ad = be->act_dtype, wd = dense_dtype(W->fmt);
    if (!transpose) /* y [M, rows] = x [M, cols] W^T */
        return glm_be_matmul(be, 0, 1, M, W->rows, W->cols, 1.0f, x, ad, ldx, W->data, wd, W->cols, beta, y, ad, ldy);
    /* y [M, cols] = x [M, rows] W */
    return glm_be_matmul(be, 0, 0, M, W->cols, W->rows, 1.0f, x, ad, ldx, W->data, wd, W->cols, beta, y, ad, ldy);
}
