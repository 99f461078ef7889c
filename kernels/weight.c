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

/* ---------------------------------------------------------------------------- segments */

#define SEG_GROUP ((int64_t)GLM_Q4_BLOCKSIZE * GLM_Q4_DQ_BLOCKSIZE)

int glm_wsegs_count(glm_wformat f, const glm_wsegs *s) {
    return glm_wformat_packed(f) && s && s->n >= 2 ? (s->n < GLM_WSEG_MAX ? s->n : GLM_WSEG_MAX) : 1;
}

int64_t glm_weight_seg_start(glm_wformat f, const glm_wsegs *s, int64_t cols, int i) {
    int k = glm_wsegs_count(f, s);
    int64_t at = 0;
    for (int j = 0; j < i && j < k - 1; j++) at += (s->rows[j] * cols + SEG_GROUP - 1) / SEG_GROUP * SEG_GROUP;
    return at;
}

int64_t glm_weight_stored_elems(glm_wformat f, const glm_wsegs *s, int64_t rows, int64_t cols) {
    int k = glm_wsegs_count(f, s);
    if (k == 1) return rows * cols;
    return glm_weight_seg_start(f, s, cols, k - 1) + s->rows[k - 1] * cols;
}

int64_t glm_weight_whole_elems(const glm_weight *w) { return glm_weight_stored_elems(w->fmt, &w->segs, w->rows, w->cols); }

glm_weight_bytes_t glm_weight_seg_bytes(glm_wformat f, int64_t n, int double_quant, const glm_wsegs *s) {
    glm_weight_bytes_t b = glm_weight_bytes(f, n, double_quant);
    b.offset *= (size_t)glm_wsegs_count(f, s);
    return b;
}

glm_status glm_weight_seg(const glm_weight *w, int i, glm_weight *out) {
    const int k = glm_wsegs_count(w->fmt, &w->segs);
    if (i < 0 || i >= k)
        return glm_err(GLM_ERR_ARG, "weight segment %d of %d", i, k);
    if (k == 1) {
        *out = *w;
        return GLM_OK;
    }
    if (w->n != glm_weight_whole_elems(w))
        return glm_err(GLM_ERR_ARG, "a %s weight [%lld, %lld] of %d segments holds %lld of its %lld stored elements (a "
                       "shard: gather it first)", glm_wformat_name(w->fmt), (long long)w->rows, (long long)w->cols, k,
                       (long long)w->n, (long long)glm_weight_whole_elems(w));
    const int64_t at = glm_weight_seg_start(w->fmt, &w->segs, w->cols, i);
    const glm_weight_bytes_t b = glm_weight_bytes(w->fmt, at, w->double_quant); /* the buffers before it */
    *out = *w;
    memset(&out->segs, 0, sizeof out->segs);
    out->rows = w->segs.rows[i];
    out->n = out->rows * w->cols;
    out->data = w->data ? (char *)w->data + b.data : NULL;
    out->absmax = w->absmax ? (char *)w->absmax + b.absmax : NULL;
    out->absmax2 = w->absmax2 ? (float *)((char *)w->absmax2 + b.absmax2) : NULL;
    out->offset = w->offset ? w->offset + i : NULL;
    return GLM_OK;
}

glm_status glm_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, int st) {
    const int k = glm_wsegs_count(dst->fmt, &dst->segs);
    if (k == 1) return be->weight_quantize(be, dst, src, (glm_dtype)st);
    const int64_t stored = glm_weight_whole_elems(dst);
    if (stored != dst->rows * dst->cols) { /* padding between segments: zero codes, zero absmax */
        glm_weight_bytes_t b = glm_weight_bytes(dst->fmt, stored, dst->double_quant);
        GLM_TRY(glm_be_zero(be, dst->data, b.data));
        GLM_TRY(glm_be_zero(be, dst->absmax, b.absmax));
        if (b.absmax2) GLM_TRY(glm_be_zero(be, dst->absmax2, b.absmax2));
    }
    const size_t es = glm_dtype_size((glm_dtype)st);
    int64_t row = 0;
    for (int i = 0; i < k; i++) {
        glm_weight seg;
        GLM_TRY(glm_weight_seg(dst, i, &seg));
        GLM_TRY(be->weight_quantize(be, &seg, (const char *)src + (size_t)(row * dst->cols) * es, (glm_dtype)st));
        row += seg.rows;
    }
    return GLM_OK;
}

glm_status glm_weight_dequantize(const glm_backend *be, void *dst, int dt, const glm_weight *src) {
    const int k = glm_wsegs_count(src->fmt, &src->segs);
    if (k == 1) return be->weight_dequantize(be, dst, (glm_dtype)dt, src);
    const size_t es = glm_dtype_size((glm_dtype)dt);
    int64_t row = 0;
    for (int i = 0; i < k; i++) {
        glm_weight seg;
        GLM_TRY(glm_weight_seg(src, i, &seg));
        GLM_TRY(be->weight_dequantize(be, (char *)dst + (size_t)(row * src->cols) * es, (glm_dtype)dt, &seg));
        row += seg.rows;
    }
    return GLM_OK;
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
