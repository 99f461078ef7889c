/* kernels/backend.h: the backend interface (docs/design.md §4), as callers see it: the entry points
 * glm_be_<op> (below; communication in kernels/comm.h), which check the arguments once and call
 * the op table (kernels/backend_table.h) that the CPU reference backend (kernels/cpu/) and CUDA
 * (kernels/cuda/) implement. The model code in lora/ calls only these entry points, so the same
 * model code runs on both. A backend's fields (name, dtypes, rank, world) are read directly.
 *
 * Memory model
 * - Every tensor an op touches lives in backend memory, obtained from be->alloc. Host <-> backend
 *   transfers are explicit (upload / download / upload_f32). On the CPU backend backend memory is
 *   host memory; on CUDA it is device memory and pointers must not be dereferenced by the host.
 * - Element types: the frozen base's dense tensors (norms, the qkv bias, the embedding, the output
 *   layer, and the linear matrices when their format is dense) have type be->weight_dtype; a linear
 *   matrix is a glm_weight (kernels/weight.h), dense or 4-bit; activations and their
 *   gradients (residual stream, normed inputs, q/k/v, attention output, MLP hidden, logits chunk)
 *   have type be->act_dtype. CPU: both GLM_DT_F32. CUDA: GLM_DT_BF16. LoRA weights, their grads,
 *   AdamW moments, softmax / RMSNorm statistics (lse, rstd) and the LoRA rank-r intermediates are
 *   always fp32. Where an op's docstring says "act", the buffer has be->act_dtype; "w" means
 *   be->weight_dtype; "f32" means float32; "i32" means int32.
 * - Ops are asynchronous on CUDA (one stream); anything that returns a host value (sumsq,
 *   cross_entropy's loss, download) synchronises.
 *
 * Precision contract: the CPU backend is the specification: fp32 storage, fp32 GEMM (cblas_sgemm),
 * double accumulators for every other reduction (norms, dot products in attention, softmax sums,
 * cross-entropy, sumsq). Each op says where it rounds.
 *
 * Shapes use the named dims of docs/design.md: N = number of tokens (B*T rows, row-major), C hidden,
 * H query heads, Hkv KV groups, Dh head dim, F FFN width, V vocab, r LoRA rank. */
#ifndef GLM_KERNELS_BACKEND_H
#define GLM_KERNELS_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "kernels/weight.h"

/* GLM_DT_F64 exists only as the CPU backend's acc_dtype (the context-parallel ring's accumulators). */
typedef enum { GLM_DT_F32 = 0, GLM_DT_BF16 = 1, GLM_DT_F64 = 2 } glm_dtype;

/* Bytes per element of a backend dtype (4, 2 or 8). */
size_t glm_dtype_size(glm_dtype dt);

typedef struct glm_backend glm_backend;

/* A rank-r product added to an [N, cols] operand inside the op that reads it (be->swiglu_bwd): the
 * term scale * u a, u [N, r] act (row stride ldu), a [r, cols] act row-major (row stride cols): a
 * LoRA adapter's input gradient du A, with du [N, r] and the adapter's A [r, in]. */
typedef struct glm_rank_term {
    const void *u;
    int64_t ldu;
    const void *a;
    int r;
    float scale;
} glm_rank_term;

#include "kernels/backend_table.h" /* struct glm_backend: the op table backends implement */

/* ---- the entry points ------------------------------------------------------------------
 * glm_be_<op>(be, ...) is the op <op> of kernels/backend_table.h, whose comment there is its
 * contract (formula and source, shapes, dtypes, rounding, errors). The checks every backend would
 * make on the arguments alone are made here, once (sizes and strides, head counts, a dropout
 * probability, RoPE's rotary dims, AdamW's step: GLM_ERR_ARG naming the op and the values); the
 * backend then checks only what is its own. Communication: kernels/comm.h. */

static inline glm_status glm_be_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    return be->alloc(be, bytes, what, out);
}

static inline void glm_be_free(const glm_backend *be, void *p) {
    be->free(be, p);
}

static inline glm_status glm_be_upload(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    return be->upload(be, dst, src, bytes);
}

static inline glm_status glm_be_download(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    return be->download(be, dst, src, bytes);
}

static inline glm_status glm_be_upload_f32(const glm_backend *be, void *dst, glm_dtype dt, const float *src,
                                           int64_t n) {
    return be->upload_f32(be, dst, dt, src, n);
}

static inline glm_status glm_be_download_f32(const glm_backend *be, float *dst, glm_dtype dt, const void *src,
                                             int64_t n) {
    return be->download_f32(be, dst, dt, src, n);
}

static inline glm_status glm_be_zero(const glm_backend *be, void *p, size_t bytes) {
    return be->zero(be, p, bytes);
}

static inline glm_status glm_be_copy(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    return be->copy(be, dst, src, bytes);
}

static inline glm_status glm_be_host_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    return be->host_alloc(be, bytes, what, out);
}

static inline void glm_be_host_free(const glm_backend *be, void *p) {
    be->host_free(be, p);
}

static inline glm_status glm_be_upload_async(const glm_backend *be, void *dst, const void *host_src, size_t bytes,
                                             int after_ops, uint64_t *ticket) {
    return be->upload_async(be, dst, host_src, bytes, after_ops, ticket);
}

static inline glm_status glm_be_download_async(const glm_backend *be, void *host_dst, const void *src, size_t bytes,
                                               uint64_t *ticket) {
    return be->download_async(be, host_dst, src, bytes, ticket);
}

static inline glm_status glm_be_copy_wait(const glm_backend *be, uint64_t ticket) {
    return be->copy_wait(be, ticket);
}

/* be->matmul with C0 given: C [M, N] = alpha op(A) op(B) + beta C0, C0 [M, N] with C's dtype and
 * row stride ldc (C0 == C or NULL: C accumulates in place). */
static inline glm_status glm_be_matmul_from(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                                            float alpha, const void *A, glm_dtype dta, int64_t lda, const void *B,
                                            glm_dtype dtb, int64_t ldb, float beta, const void *C0, void *C, glm_dtype dtc,
                                            int64_t ldc) {
    if (M < 0 || N < 0 || K < 0 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX) /* cuBLAS and cblas_sgemm take int sizes and strides */
        return glm_err(GLM_ERR_ARG, "matmul: bad sizes M=%lld N=%lld K=%lld (lda %lld ldb %lld ldc %lld)", (long long)M,
                       (long long)N, (long long)K, (long long)lda, (long long)ldb, (long long)ldc);
    return be->matmul(be, ta, tb, M, N, K, alpha, A, dta, lda, B, dtb, ldb, beta, C0 == C ? NULL : C0, C, dtc, ldc);
}

/* be->matmul: C [M, N] = alpha op(A) op(B) + beta C. */
static inline glm_status glm_be_matmul(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                                       float alpha, const void *A, glm_dtype dta, int64_t lda, const void *B,
                                       glm_dtype dtb, int64_t ldb, float beta, void *C, glm_dtype dtc, int64_t ldc) {
    return glm_be_matmul_from(be, ta, tb, M, N, K, alpha, A, dta, lda, B, dtb, ldb, beta, NULL, C, dtc, ldc);
}

static inline glm_status glm_be_add_bias(const glm_backend *be, void *y, int64_t ldy, const void *b, int64_t N,
                                         int64_t D) {
    return be->add_bias(be, y, ldy, b, N, D);
}

static inline glm_status glm_be_axpy(const glm_backend *be, void *y, const void *x, float alpha, int64_t n) {
    return be->axpy(be, y, x, alpha, n);
}

static inline glm_status glm_be_dropout(const glm_backend *be, void *y, int64_t ldy, const void *x, int64_t ldx,
                                        int64_t N, int64_t D, int64_t row0, float p, uint64_t seed, uint64_t stream) {
    if (!(p >= 0.0f && p < 1.0f)) return glm_err(GLM_ERR_ARG, "dropout: probability %g is not in [0, 1)", p);
    return be->dropout(be, y, ldy, x, ldx, N, D, row0, p, seed, stream);
}

static inline glm_status glm_be_cast(const glm_backend *be, void *dst, glm_dtype dd, const void *src, glm_dtype ds,
                                     int64_t n) {
    return be->cast(be, dst, dd, src, ds, n);
}

static inline glm_status glm_be_cast_2d(const glm_backend *be, void *dst, glm_dtype dd, int64_t ldd, const void *src,
                                        glm_dtype ds, int64_t lds, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0 || (rows > 1 && (ldd < cols || lds < cols)))
        return glm_err(GLM_ERR_ARG, "cast_2d: %lld x %lld with row strides %lld (dst) and %lld (src)", (long long)rows,
                       (long long)cols, (long long)ldd, (long long)lds);
    return be->cast_2d(be, dst, dd, ldd, src, ds, lds, rows, cols);
}

static inline glm_status glm_be_fill_normal(const glm_backend *be, void *dst, glm_dtype dt, int64_t n, float mean,
                                            float std, uint64_t seed, uint64_t stream) {
    return be->fill_normal(be, dst, dt, n, mean, std, seed, stream);
}

/* be->weight_quantize / weight_dequantize of each segment of a weight stacked from several
 * source tensors (kernels/weight.h "Segments": glm_weight_quantize, glm_weight_dequantize); of the
 * weight itself otherwise. */
static inline glm_status glm_be_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st) {
    return glm_weight_quantize(be, dst, src, (int)st);
}

static inline glm_status glm_be_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt,
                                                  const glm_weight *src) {
    return glm_weight_dequantize(be, dst, (int)dt, src);
}

static inline glm_status glm_be_fp8_quantize(const glm_backend *be, uint8_t *q, float *scale, const void *x, int64_t ldx,
                                             int64_t M, int64_t K, const float *col_mul, int kind) {
    return be->fp8_quantize(be, q, scale, x, ldx, M, K, col_mul, kind);
}

static inline glm_status glm_be_fp8_matmul(const glm_backend *be, int64_t M, int64_t N, int64_t K, const void *x,
                                           int64_t ldx, const float *col_mul, int x_kind, const uint8_t *w,
                                           const float *w_scale, float beta, void *y, int64_t ldy) {
    return be->fp8_matmul(be, M, N, K, x, ldx, col_mul, x_kind, w, w_scale, beta, y, ldy);
}

static inline glm_status glm_be_fp8_transpose(const glm_backend *be, uint8_t *dst, const uint8_t *src, int64_t rows,
                                              int64_t cols) {
    return be->fp8_transpose(be, dst, src, rows, cols);
}

static inline glm_status glm_be_embedding(const glm_backend *be, void *out, const void *table, const uint32_t *ids,
                                          int64_t N, int64_t C, int64_t V) {
    return be->embedding(be, out, table, ids, N, C, V);
}

static inline glm_status glm_be_rmsnorm_fwd(const glm_backend *be, void *y, float *rstd, const void *x, const void *w,
                                            int64_t N, int64_t C, float eps) {
    return be->rmsnorm_fwd(be, y, rstd, x, w, N, C, eps);
}

static inline glm_status glm_be_rmsnorm_bwd(const glm_backend *be, void *dx, const void *dy, const void *x,
                                            const void *w, const float *rstd, int64_t N, int64_t C) {
    return be->rmsnorm_bwd(be, dx, dy, x, w, rstd, N, C);
}

static inline glm_status glm_be_rope(const glm_backend *be, void *x, int64_t ldx, const int32_t *pos, int64_t N,
                                     int nheads, int Dh, int rot, const float *inv_freq, int inverse) {
    if (rot <= 0 || rot > Dh || rot % 2)
        return glm_err(GLM_ERR_ARG, "rope: rotary dims %d must be even and in (0, Dh=%d]", rot, Dh);
    return be->rope(be, x, ldx, pos, N, nheads, Dh, rot, inv_freq, inverse);
}

static inline glm_status glm_be_swiglu_fwd(const glm_backend *be, void *out, const void *h, int64_t N, int64_t F) {
    return be->swiglu_fwd(be, out, h, N, F);
}

static inline glm_status glm_be_swiglu_bwd(const glm_backend *be, void *dh, const void *dout, const void *h,
                                           int64_t N, int64_t F, const glm_rank_term *t) {
    return be->swiglu_bwd(be, dh, dout, h, N, F, t);
}

static inline glm_status glm_be_attention_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse,
                                              const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                              int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv, int Dh) {
    if (H <= 0 || Hkv <= 0 || Dh <= 0 || H % Hkv)
        return glm_err(GLM_ERR_ARG, "%s: heads H=%d must be a positive multiple of KV groups Hkv=%d (Dh=%d)", "attention", H, Hkv, Dh);
    if (B <= 0 || T <= 0) return glm_err(GLM_ERR_ARG, "attention: bad batch B=%d T=%d (H=%d)", B, T, H);
    return be->attention_fwd(be, out, ldo, lse, q, ldq, k, ldk, v, ldv, doc, B, T, H, Hkv, Dh);
}

static inline glm_status glm_be_attention_bwd(const glm_backend *be, void *dq, void *dk, void *dv, const void *dout,
                                              int64_t ldo, const void *out, const float *lse, const void *D,
                                              const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                              int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv, int Dh) {
    if (H <= 0 || Hkv <= 0 || Dh <= 0 || H % Hkv)
        return glm_err(GLM_ERR_ARG, "%s: heads H=%d must be a positive multiple of KV groups Hkv=%d (Dh=%d)", "attention", H, Hkv, Dh);
    if (B <= 0 || T <= 0) return glm_err(GLM_ERR_ARG, "attention: bad batch B=%d T=%d (H=%d)", B, T, H);
    if (!D && !out) return glm_err(GLM_ERR_ARG, "attention_bwd: neither the forward's out nor D = rowsum(dout * out) given");
    return be->attention_bwd(be, dq, dk, dv, dout, ldo, out, lse, D, q, ldq, k, ldk, v, ldv, doc, B, T, H, Hkv, Dh);
}

static inline glm_status glm_be_attention_delta(const glm_backend *be, void *D, const void *dout, int64_t ldd,
                                                const void *out, int64_t ldo, int64_t n0, int64_t rows, int T, int H,
                                                int Dh) {
    if (H <= 0 || Dh <= 0 || T <= 0 || n0 < 0 || rows < 0)
        return glm_err(GLM_ERR_ARG, "attention_delta: bad sizes (tokens %lld + %lld, T=%d, H=%d, Dh=%d)", (long long)n0,
                       (long long)rows, T, H, Dh);
    if (ldd < (int64_t)H * Dh || ldo < (int64_t)H * Dh)
        return glm_err(GLM_ERR_ARG, "attention_delta: row strides %lld / %lld below H*Dh = %lld", (long long)ldd,
                       (long long)ldo, (long long)H * Dh);
    if (rows == 0) return GLM_OK;
    return be->attention_delta(be, D, dout, ldd, out, ldo, n0, rows, T, H, Dh);
}

static inline glm_status glm_be_attention_block_fwd(const glm_backend *be, void *o, int64_t ldo, void *lse,
                                                    int64_t ldl, const void *q, int64_t ldq, const void *k,
                                                    int64_t ldk, const void *v, int64_t ldv, const int32_t *q_doc,
                                                    const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk,
                                                    int H, int Hkv, int Dh, int init) {
    if (Tq < 0 || Tk < 0) return glm_err(GLM_ERR_ARG, "attention_block_fwd: negative block size (Tq=%d, Tk=%d)", Tq, Tk);
    if (H <= 0 || Hkv <= 0 || Dh <= 0 || H % Hkv)
        return glm_err(GLM_ERR_ARG, "%s: heads H=%d must be a positive multiple of KV groups Hkv=%d (Dh=%d)", "attention_block_fwd", H, Hkv, Dh);
    return be->attention_block_fwd(be, o, ldo, lse, ldl, q, ldq, k, ldk, v, ldv, q_doc, k_doc, q0, k0, Tq, Tk, H, Hkv,
                                   Dh, init);
}

static inline glm_status glm_be_attention_block_bwd(const glm_backend *be, void *dq, int64_t lddq, void *dk,
                                                    int64_t lddk, void *dv, int64_t lddv, const void *dout,
                                                    int64_t ldo, const void *out, const float *lse, int64_t ldl,
                                                    const void *q, int64_t ldq, const void *k, int64_t ldk,
                                                    const void *v, int64_t ldv, const int32_t *q_doc,
                                                    const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk,
                                                    int H, int Hkv, int Dh) {
    if (Tq < 0 || Tk < 0) return glm_err(GLM_ERR_ARG, "attention_block_bwd: negative block size (Tq=%d, Tk=%d)", Tq, Tk);
    if (H <= 0 || Hkv <= 0 || Dh <= 0 || H % Hkv)
        return glm_err(GLM_ERR_ARG, "%s: heads H=%d must be a positive multiple of KV groups Hkv=%d (Dh=%d)", "attention_block_bwd", H, Hkv, Dh);
    return be->attention_block_bwd(be, dq, lddq, dk, lddk, dv, lddv, dout, ldo, out, lse, ldl, q, ldq, k, ldk, v, ldv,
                                   q_doc, k_doc, q0, k0, Tq, Tk, H, Hkv, Dh);
}

/* be->cross_entropy (kernels/backend_table.h): *loss_sum = sum over target rows of w_i * loss_i,
 * optional dlogits = loss_scale * w_i * (softmax - onehot), optional logp[i] = -loss_i. */
static inline glm_status glm_be_cross_entropy(const glm_backend *be, void *dlogits, const void *logits,
                                              const int32_t *labels, const float *weights, float *logp, int64_t n,
                                              int64_t V, float loss_scale, double *loss_sum, int64_t *n_targets) {
    return be->cross_entropy(be, dlogits, logits, labels, weights, logp, n, V, loss_scale, loss_sum, n_targets);
}

static inline glm_status glm_be_adamw(const glm_backend *be, float *w, const float *g, float *m, float *v, int64_t n,
                                      float lr, float beta1, float beta2, float eps, float weight_decay,
                                      float grad_scale, int64_t step) {
    if (step < 1) return glm_err(GLM_ERR_ARG, "adamw: step must be >= 1 (got %lld)", (long long)step);
    return be->adamw(be, w, g, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, step);
}

/* be->sumsq for `count` tensors: out[i] = sum of x[i][j]^2 (double), one synchronisation. */
static inline glm_status glm_be_sumsq_many(const glm_backend *be, int count, const float *const *x, const int64_t *n,
                                           double *out) {
    if (count < 0) return glm_err(GLM_ERR_ARG, "sumsq: negative tensor count %d", count);
    for (int i = 0; i < count; i++)
        if (n[i] < 0) return glm_err(GLM_ERR_ARG, "sumsq: tensor %d has a negative size %lld", i, (long long)n[i]);
    return count ? be->sumsq(be, count, x, n, out) : GLM_OK;
}

/* The sum of squares of one fp32 tensor of n elements (double accumulation), to the host; NaN
 * (the message recorded by glm_err) when the backend fails. */
static inline double glm_be_sumsq(const glm_backend *be, const float *x, int64_t n) {
    double s;
    return glm_be_sumsq_many(be, 1, &x, &n, &s) == GLM_OK ? s : NAN;
}

static inline glm_status glm_be_sync(const glm_backend *be) {
    return be->sync(be);
}

static inline void glm_be_set_attention_ws_cap(const glm_backend *be, double bytes) {
    be->set_attention_ws_cap(be, bytes);
}

static inline void glm_be_mem_info(const glm_backend *be, size_t *free_b, size_t *total_b, size_t *in_use,
                                   size_t *peak) {
    be->mem_info(be, free_b, total_b, in_use, peak);
}

static inline void glm_be_mem_reset_peak(const glm_backend *be) {
    be->mem_reset_peak(be);
}

static inline size_t glm_be_mem_process(const glm_backend *be) {
    return be->mem_process(be);
}

static inline size_t glm_be_mem_overhead(const glm_backend *be) {
    return be->mem_overhead(be);
}

static inline glm_status glm_be_set_mem_cap(const glm_backend *be, size_t bytes) {
    return be->set_mem_cap(be, bytes);
}

static inline glm_status glm_be_scratch_need(const glm_backend *be, const struct glm_scratch_shape *s, size_t *bytes,
                                             size_t *attn_ws) {
    if (s->B < 0 || s->T < 0 || s->H < 0)
        return glm_err(GLM_ERR_ARG, "scratch_need: negative sizes (B %d, T %d, H %d)", s->B, s->T, s->H);
    return be->scratch_need(be, s, bytes, attn_ws);
}

static inline glm_status glm_be_scratch_reserve(const glm_backend *be, const struct glm_scratch_shape *s,
                                                int with_attn_ws) {
    return be->scratch_reserve(be, s, with_attn_ws);
}

static inline void glm_be_prof_enable(const glm_backend *be, int on) {
    be->prof_enable(be, on);
}

static inline void glm_be_phase(const glm_backend *be, int p) {
    be->phase(be, p);
}

static inline glm_status glm_be_prof_collect(const glm_backend *be, double *ms) {
    return be->prof_collect(be, ms);
}

static inline int glm_be_supports(const glm_backend *be, glm_feature f) {
    return be->supports(be, f);
}

/* The one linear of the frozen base (every backend): with transpose == 0, y [M, W->rows] = beta y +
 * x [M, W->cols] W^T (the forward); with transpose != 0, y [M, W->cols] = beta y + x [M, W->rows] W
 * (the input gradient). x and y are act with row strides ldx, ldy; accumulation fp32 (be->matmul).
 * W must be whole and dense (f32 or bf16) or fp8: a 4-bit weight is dequantized into a dense slot
 * first (be->weight_dequantize), a shard gathered first. An fp8 W runs be->fp8_matmul: the
 * forward with x quantized to E4M3 and W's codes and row scales; the input gradient as
 * (x * scale_r) quantized to E5M2 (the weight's row scales folded into the gradient's columns, the
 * summed dimension, before its per-row scaling) times the transposed codes W->data_t.
 * Errors: GLM_ERR_ARG (no weight, a shard, an fp8 input gradient without W->data_t),
 * GLM_ERR_UNSUPPORTED (a packed format), the backend's matmul errors. */
glm_status glm_base_matmul(const glm_backend *be, int transpose, int64_t M, const void *x, int64_t ldx, const glm_weight *W,
                           float beta, void *y, int64_t ldy);


/* The phases of a training step, for profiling (be->phase). */
typedef enum {
    GLM_PHASE_OTHER = 0,     /* uploads, copies, anything unmarked */
    GLM_PHASE_ATTN_FWD,      /* attention forward (incl. its recomputation) */
    GLM_PHASE_ATTN_BWD,      /* attention backward */
    GLM_PHASE_GEMM,          /* the frozen base linears, forward and input-gradient */
    GLM_PHASE_LORA,          /* the LoRA rank-r GEMMs, their dropout and casts */
    GLM_PHASE_ELEMENTWISE,   /* embedding, RMSNorm, RoPE, SwiGLU, bias, residual copies */
    GLM_PHASE_LOSS,          /* final norm, output-layer GEMMs and cross-entropy */
    GLM_PHASE_OPTIMIZER,     /* grad norm, all-reduce, AdamW */
    GLM_PHASE_COUNT
} glm_phase;

/* Display name of a phase ("attention fwd", ...). */
const char *glm_phase_name(int p);

/* The RoPE frequencies as the references compute them: inv_freq[i] = float32(1 / base^(2i/rot)),
 * i < rot/2 (pow in double, rounded once to f32; torch's float32 pow is within 1 ulp). Host memory. */
void glm_rope_inv_freq(double base, int rot, float *inv_freq);

/* The CPU reference backend (a static table; fp32 everywhere; world 1). */
const glm_backend *glm_backend_cpu(void);

/* The CPU backend as one rank of an MPI job (kernels/cpu/comm_mpi.c): initialises MPI
 * (MPI_Init_thread, MPI_THREAD_FUNNELED; only the calling thread may use the communicator ops)
 * and returns a backend whose rank and world are MPI_COMM_WORLD's, whose collectives are MPI's
 * (MPI_Iallreduce, MPI_Iallgather, MPI_Sendrecv; sums in fp32 / double, the same bits on every
 * rank) and whose comm_abort is MPI_Abort. Call once per process; glm_backend_cpu_close finalises
 * MPI. Returns NULL and sets *st: GLM_ERR_UNSUPPORTED when this build has no MPI (the message
 * says how to get it), GLM_ERR_COMM when MPI_Init fails. */
const glm_backend *glm_backend_cpu_dist(glm_status *st);
void glm_backend_cpu_close(const glm_backend *be);

/* MPI for the tools (kernels/cpu/comm_mpi.c), whatever the backend: glm_mpi_built() is 1 when
 * this build has MPI. glm_mpi_launched() is 1 when the process was started by an MPI launcher
 * (mpirun / mpiexec of Open MPI or MPICH, srun with PMI/PMIx: their environment variables).
 * glm_mpi_init initialises MPI once (later calls return the same) and gives MPI_COMM_WORLD's
 * rank and size; glm_mpi_bcast broadcasts n bytes of host memory from rank `root`;
 * glm_mpi_finalize ends MPI (no-op when not initialised); glm_mpi_abort calls MPI_Abort
 * (returns only when MPI is not initialised). Errors: GLM_ERR_UNSUPPORTED (no MPI in this build),
 * GLM_ERR_COMM naming the MPI call. */
int glm_mpi_built(void);
int glm_mpi_launched(void);
glm_status glm_mpi_init(int *rank, int *world);
glm_status glm_mpi_bcast(void *buf, size_t n, int root);
void glm_mpi_finalize(void);
void glm_mpi_abort(int code);

/* The attention implementation GLMTUNE_ATTENTION asks a CUDA backend for, read the one way every
 * reader reads it (the backend when it is made, a dry run that plans for a GPU it has not got):
 * GLM_ATTN_AUTO (unset, empty or "auto": cuDNN's fused attention where it takes the shape, else
 * glmtune's kernels), GLM_ATTN_OWN ("glmtune"), GLM_ATTN_CUDNN ("cudnn"); -1 for any other value,
 * whose message is "GLMTUNE_ATTENTION=<value>: " GLM_ATTENTION_ENV_HINT. */
typedef enum { GLM_ATTN_AUTO = 0, GLM_ATTN_OWN = 1, GLM_ATTN_CUDNN = 2 } glm_attn_mode;
#define GLM_ATTENTION_ENV_HINT "expected auto, cudnn or glmtune"
static inline int glm_attention_env(const char **value) {
    const char *v = getenv("GLMTUNE_ATTENTION");
    if (value) *value = v ? v : "";
    if (!v || !*v || !strcmp(v, "auto")) return GLM_ATTN_AUTO;
    if (!strcmp(v, "glmtune")) return GLM_ATTN_OWN;
    if (!strcmp(v, "cudnn")) return GLM_ATTN_CUDNN;
    return -1;
}

#ifdef GLMTUNE_HAVE_CUDA
/* The CUDA backend (kernels/cuda/backend_cuda.cu; built when CMake's GLMTUNE_CUDA is ON, which
 * defines GLMTUNE_HAVE_CUDA for every target linking glm_kernels).
 * Storage: weight_dtype = act_dtype = GLM_DT_BF16; LoRA weights, grads, AdamW moments, rstd, lse
 * fp32. Arithmetic: each kernel reads bf16 as float, computes in fp32 (sumsq: double) and rounds
 * to bf16 once at the store; GEMMs are cublasGemmEx with CUBLAS_COMPUTE_32F (no TF32); matmuls
 * mixing an f32 and a bf16 operand widen the bf16 one to f32 (exact) and run an fp32 GEMM.
 * All work is queued on one stream of `device`; ops that return host values synchronise.
 * Use a backend from the thread that created it (or call cudaSetDevice(device) first).
 *
 * glm_backend_cuda(device, st): a single-rank backend (world 1; all_reduce is a no-op).
 * glm_backend_cuda_dist(device, rank, world, nccl_id, st): rank `rank` of `world` data-parallel
 *   ranks; world > 1 creates an NCCL communicator from nccl_id (128 bytes, made once by
 *   glm_cuda_nccl_id on rank 0 and passed to every rank) and all_reduce is ncclAllReduce(sum).
 * Both return NULL and set *st on failure: GLM_ERR_UNSUPPORTED (no CUDA device, or world > 1 in a
 * build without NCCL), GLM_ERR_ARG (no such device, bad rank/world), GLM_ERR_DEVICE (CUDA or
 * cuBLAS initialisation failed), GLM_ERR_COMM (NCCL's); the message names the call.
 * glm_backend_cuda_close frees the backend (synchronising first); NULL is a no-op.
 * glm_cuda_device_count: visible CUDA devices, 0 when there is no driver or device. */
const glm_backend *glm_backend_cuda(int device, glm_status *st);
const glm_backend *glm_backend_cuda_dist(int device, int rank, int world, const unsigned char *nccl_id, glm_status *st);
void glm_backend_cuda_close(const glm_backend *be);
int glm_cuda_device_count(void);
/* "NVIDIA H200 (sm_90, 139 GiB)" for device `device` (a static buffer). */
const char *glm_cuda_device_name(int device);
/* The attention implementation a CUDA backend has used so far (a static buffer): "cuDNN 9.19.0
 * fused attention" (kernels/cuda/attention_ragged.cu; "..., glmtune kernels where it declines"
 * once it declined a shape) or "glmtune kernels" (no cuDNN, GLMTUNE_ATTENTION=glmtune, or no
 * attention call yet). */
const char *glm_cuda_attention_impl(const glm_backend *be);
/* The address of `name` in the CUDA module this program loaded (the one glm_backend_cuda uses),
 * or NULL when the module is not loaded or lacks the symbol. For tests that call the module's
 * kernels directly (tests/gpu/test_cuda_ops.c's 4-bit check), never for the model. */
void *glm_cuda_module_symbol(const char *name);
glm_status glm_cuda_nccl_id(unsigned char id[128]);
#endif

/* The dropout hash: a uniform number in [0, 1) (24 bits) from (seed, stream, index), computed
 * by splitmix64-style mixing of seed ^ stream * K1 ^ index * K2. Every backend calls this one
 * function (host and device code) for its masks, so CPU and CUDA masks agree exactly. */
#ifdef __CUDACC__
#define GLM_HOST_DEVICE __host__ __device__
#else
#define GLM_HOST_DEVICE
#endif
static inline GLM_HOST_DEVICE float glm_dropout_u01(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ULL) ^ (index * 0xD1B54A32D192ED03ULL);
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}


/* A standard normal number from (seed, stream, index): Box-Muller on two 24-bit uniforms of the
 * dropout hash (streams 2*stream and 2*stream+1), u1 in (0, 1]. Host and device code share it,
 * so fill_normal gives the same numbers on every backend (up to logf/cosf rounding). */
static inline GLM_HOST_DEVICE float glm_normal_hash(uint64_t seed, uint64_t stream, uint64_t index) {
    float u1 = glm_dropout_u01(seed, 2 * stream, index) + (1.0f / 16777216.0f);
    float u2 = glm_dropout_u01(seed, 2 * stream + 1, index);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

#endif
