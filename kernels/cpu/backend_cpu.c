/* kernels/cpu/backend_cpu.c: the CPU reference backend (fp32 storage, cblas_sgemm, double
 * accumulators for reductions). It is the specification the CUDA backend is tested against
 * (docs/design.md §4); clarity beats speed here. See kernels/backend.h for each op's contract. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/meminfo.h"
#include "kernels/backend.h"

static void cpu_set_attention_ws_cap(const glm_backend *be, double bytes) { (void)be, (void)bytes; }

/* kernels/cpu/weight_cpu.c */
glm_status glm_cpu_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st);
glm_status glm_cpu_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src);
/* kernels/cpu/fp8_cpu.c */
glm_status glm_cpu_fp8_quantize(const glm_backend *be, uint8_t *q, float *scale, const void *x, int64_t ldx, int64_t M,
                                int64_t K, const float *col_mul, int kind);
glm_status glm_cpu_fp8_matmul(const glm_backend *be, int64_t M, int64_t N, int64_t K, const void *x, int64_t ldx,
                              const float *col_mul, int x_kind, const uint8_t *w, const float *w_scale, float beta, void *y,
                              int64_t ldy);
glm_status glm_cpu_fp8_transpose(const glm_backend *be, uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols);

/* attention_block.c */
glm_status glm_cpu_attention_block_fwd(const glm_backend *be, void *o, int64_t ldo, void *lse, int64_t ldl,
                                       const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                       int64_t ldv, const int32_t *q_doc, const int32_t *k_doc, int64_t q0,
                                       int64_t k0, int Tq, int Tk, int H, int Hkv, int Dh, int init);
glm_status glm_cpu_attention_block_bwd(const glm_backend *be, void *dq, int64_t lddq, void *dk, int64_t lddk,
                                       void *dv, int64_t lddv, const void *dout, int64_t ldo, const void *out,
                                       const float *lse, int64_t ldl, const void *q, int64_t ldq, const void *k,
                                       int64_t ldk, const void *v, int64_t ldv, const int32_t *q_doc,
                                       const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk, int H, int Hkv,
                                       int Dh);
/* the block backward with D_i given ([H, ldl] double, lse's layout; NULL: from dout and out) */
glm_status glm_cpu_attention_block_bwd_d(const glm_backend *be, void *dq, int64_t lddq, void *dk, int64_t lddk,
                                         void *dv, int64_t lddv, const void *dout, int64_t ldo, const void *out,
                                         const float *lse, int64_t ldl, const double *D, const void *q, int64_t ldq,
                                         const void *k, int64_t ldk, const void *v, int64_t ldv, const int32_t *q_doc,
                                         const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk, int H, int Hkv,
                                         int Dh);
glm_status glm_cpu_attention_delta(const glm_backend *be, void *D, const void *dout, int64_t ldd, const void *out,
                                   int64_t ldo, int64_t n0, int64_t rows, int T, int H, int Dh);

void glm_rope_inv_freq(double base, int rot, float *inv_freq) {
    for (int i = 0; i < rot / 2; i++) inv_freq[i] = (float)(1.0 / pow(base, (double)(2 * i) / (double)rot));
}

static glm_status need_f32(glm_dtype dt, const char *op) {
    if (dt != GLM_DT_F32)
        return glm_err(GLM_ERR_UNSUPPORTED, "cpu backend: %s: only float32 buffers are supported (got bf16)", op);
    return GLM_OK;
}

/* ---- memory ------------------------------------------------------------------------------ */

static glm_status cpu_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    /* 64-byte alignment for vector loads; round the size up as aligned_alloc requires. */
    size_t n = (bytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    void *p = bytes > SIZE_MAX - 63 ? NULL : aligned_alloc(64, n);
    if (!p) return glm_err(GLM_ERR_NOMEM, "cpu backend: out of memory allocating %zu bytes for %s", bytes, what ? what : "a buffer");
    *out = p;
    return GLM_OK;
}

static void cpu_free(const glm_backend *be, void *p) { free(p); }

static glm_status cpu_memcpy(const glm_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
    return GLM_OK;
}

static glm_status cpu_host_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    *out = malloc(bytes ? bytes : 1);
    if (!*out) return glm_err(GLM_ERR_NOMEM, "out of host memory for %s (%zu bytes)", what, bytes);
    return GLM_OK;
}

static void cpu_host_free(const glm_backend *be, void *p) { free(p); }

static glm_status cpu_upload_async(const glm_backend *be, void *dst, const void *src, size_t bytes, int after_ops,
                                   uint64_t *ticket) {
    (void)after_ops;
    *ticket = 0;
    return cpu_memcpy(be, dst, src, bytes);
}

static glm_status cpu_download_async(const glm_backend *be, void *dst, const void *src, size_t bytes, uint64_t *ticket) {
    *ticket = 0;
    return cpu_memcpy(be, dst, src, bytes);
}

static glm_status cpu_copy_wait(const glm_backend *be, uint64_t ticket) { return GLM_OK; }

static glm_status cpu_upload_f32(const glm_backend *be, void *dst, glm_dtype dt, const float *src, int64_t n) {
    GLM_TRY(need_f32(dt, "upload_f32"));
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
    return GLM_OK;
}

static glm_status cpu_download_f32(const glm_backend *be, float *dst, glm_dtype dt, const void *src, int64_t n) {
    GLM_TRY(need_f32(dt, "download_f32"));
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
    return GLM_OK;
}

static glm_status cpu_zero(const glm_backend *be, void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
    return GLM_OK;
}

/* ---- dense algebra ----------------------------------------------------------------------- */

static glm_status cpu_matmul(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                             float alpha, const void *A, glm_dtype dta, int64_t lda,
                             const void *B, glm_dtype dtb, int64_t ldb,
                             float beta, const void *C0, void *C, glm_dtype dtc, int64_t ldc) {
    GLM_TRY(need_f32(dta, "matmul A"));
    GLM_TRY(need_f32(dtb, "matmul B"));
    GLM_TRY(need_f32(dtc, "matmul C"));
    if (M == 0 || N == 0) return GLM_OK;
    float *c = C;
    if (C0 && beta != 0.0f) /* C0's rows into C, then C accumulates */
        for (int64_t i = 0; i < M; i++) memmove(c + i * ldc, (const float *)C0 + i * ldc, (size_t)N * sizeof(float));
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return GLM_OK;
    }
    if (beta == 0.0f) /* BLAS may read C when beta == 0 in some builds: make it clean */
        for (int64_t i = 0; i < M; i++) memset(c + i * ldc, 0, (size_t)N * sizeof(float));
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, c, (int)ldc);
    return GLM_OK;
}

static glm_status cpu_add_bias(const glm_backend *be, void *y, int64_t ldy, const void *b, int64_t N, int64_t D) {
    float *Y = y;
    const float *bb = b;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) Y[n * ldy + d] += bb[d];
    return GLM_OK;
}

static glm_status cpu_axpy(const glm_backend *be, void *y, const void *x, float alpha, int64_t n) {
    float *Y = y;
    const float *X = x;
    for (int64_t i = 0; i < n; i++) Y[i] += alpha * X[i];
    return GLM_OK;
}

static glm_status cpu_dropout(const glm_backend *be, void *y, int64_t ldy, const void *x, int64_t ldx,
                              int64_t N, int64_t D, int64_t row0, float p, uint64_t seed, uint64_t stream) {
    float *Y = y;
    const float *X = x;
    float inv = 1.0f / (1.0f - p);
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            float v = X[n * ldx + d];
            if (p > 0.0f) v = glm_dropout_u01(seed, stream, (uint64_t)((row0 + n) * D + d)) >= p ? v * inv : 0.0f;
            Y[n * ldy + d] = v;
        }
    return GLM_OK;
}

/* ---- transformer ops --------------------------------------------------------------------- */

static glm_status cpu_embedding(const glm_backend *be, void *out, const void *table, const uint32_t *ids,
                                int64_t N, int64_t C, int64_t V) {
    float *o = out;
    const float *t = table;
    for (int64_t n = 0; n < N; n++) {
        if ((int64_t)ids[n] >= V)
            return glm_err(GLM_ERR_ARG, "embedding: token id %u at position %lld is outside the vocabulary (V = %lld)",
                           ids[n], (long long)n, (long long)V);
        memcpy(o + n * C, t + (int64_t)ids[n] * C, (size_t)C * sizeof(float));
    }
    return GLM_OK;
}

static glm_status cpu_rmsnorm_fwd(const glm_backend *be, void *y, float *rstd, const void *x, const void *w,
                                  int64_t N, int64_t C, float eps) {
    float *Y = y;
    const float *X = x, *W = w;
    for (int64_t n = 0; n < N; n++) {
        const float *xr = X + n * C;
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
        rstd[n] = r;
        for (int64_t c = 0; c < C; c++) Y[n * C + c] = xr[c] * r * W[c];
    }
    return GLM_OK;
}

static glm_status cpu_rmsnorm_bwd(const glm_backend *be, void *dx, const void *dy, const void *x,
                                  const void *w, const float *rstd, int64_t N, int64_t C) {
    float *DX = dx;
    const float *DY = dy, *X = x, *W = w;
    for (int64_t n = 0; n < N; n++) {
        const float *xr = X + n * C, *dyr = DY + n * C;
        double dot = 0;
        for (int64_t c = 0; c < C; c++) dot += (double)dyr[c] * W[c] * xr[c];
        double r = rstd[n];
        double k = r * r * r * dot / (double)C;
        for (int64_t c = 0; c < C; c++) DX[n * C + c] += (float)(r * W[c] * dyr[c] - xr[c] * k);
    }
    return GLM_OK;
}

static glm_status cpu_rope(const glm_backend *be, void *x, int64_t ldx, const int32_t *pos, int64_t N,
                           int nheads, int Dh, int rot, const float *inv_freq, int inverse) {
    int half = rot / 2;
    float *cs = malloc((size_t)half * 2 * sizeof(float));
    if (!cs) return glm_err(GLM_ERR_NOMEM, "rope: out of memory");
    float *X = x;
    for (int64_t n = 0; n < N; n++) {
        float fp = (float)pos[n];
        for (int i = 0; i < half; i++) {
            float ang = fp * inv_freq[i];
            cs[2 * i] = (float)cos((double)ang);
            cs[2 * i + 1] = (float)sin((double)ang);
            if (inverse) cs[2 * i + 1] = -cs[2 * i + 1];
        }
        for (int h = 0; h < nheads; h++) {
            float *xh = X + n * ldx + (int64_t)h * Dh;
            for (int i = 0; i < half; i++) {
                float x0 = xh[2 * i], x1 = xh[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
                xh[2 * i] = x0 * c - x1 * s;
                xh[2 * i + 1] = x1 * c + x0 * s;
            }
        }
    }
    free(cs);
    return GLM_OK;
}

static glm_status cpu_swiglu_fwd(const glm_backend *be, void *out, const void *h, int64_t N, int64_t F) {
    float *O = out;
    const float *Hh = h;
    for (int64_t n = 0; n < N; n++)
        for (int64_t f = 0; f < F; f++) {
            double g = Hh[n * 2 * F + f], u = Hh[n * 2 * F + F + f];
            O[n * F + f] = (float)(g / (1.0 + exp(-g)) * u);
        }
    return GLM_OK;
}

static glm_status cpu_swiglu_bwd(const glm_backend *be, void *dh, const void *dout, const void *h,
                                 int64_t N, int64_t F, const glm_rank_term *t) {
    if (t && (t->r < 1 || t->ldu < t->r))
        return glm_err(GLM_ERR_ARG, "swiglu_bwd: a rank term of r %d, ldu %lld", t->r, (long long)t->ldu);
    float *DH = dh;
    const float *DO = dout, *Hh = h, *U = t ? t->u : NULL, *A = t ? t->a : NULL;
    for (int64_t n = 0; n < N; n++)
        for (int64_t f = 0; f < F; f++) {
            double g = Hh[n * 2 * F + f], u = Hh[n * 2 * F + F + f], d = DO[n * F + f];
            if (t) { /* d += scale (du A)[n, f] */
                double p = 0;
                for (int j = 0; j < t->r; j++) p += (double)U[n * t->ldu + j] * A[(int64_t)j * F + f];
                d += (double)t->scale * p;
            }
            double sg = 1.0 / (1.0 + exp(-g));
            DH[n * 2 * F + f] = (float)(d * u * sg * (1.0 + g * (1.0 - sg)));
            DH[n * 2 * F + F + f] = (float)(d * g * sg);
        }
    return GLM_OK;
}

/* The whole-row attention is written once, in attention_block.c: each row of T tokens is one
 * block of queries against one block of keys covering the row (q0 = k0 = 0, Tq = Tk = T), into
 * the block ops' double accumulators, rounded here to f32 once. The block ops compute each
 * query's sums in the order the whole-row loops did (heads, then queries, then keys), so the
 * results are the same bits. Scratch: T (H + 2 Hkv) Dh + H T doubles for a row. */
static glm_status cpu_attention_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse,
                                    const void *q, int64_t ldq, const void *k, int64_t ldk,
                                    const void *v, int64_t ldv, const int32_t *doc,
                                    int B, int T, int H, int Hkv, int Dh) {
    const int64_t qd = (int64_t)H * Dh;
    double *o = malloc((size_t)T * (size_t)qd * sizeof(double)), *l = malloc((size_t)T * (size_t)H * sizeof(double));
    if (!o || !l) {
        free(o);
        free(l);
        return glm_err(GLM_ERR_NOMEM, "attention_fwd: out of memory for a row of %d tokens", T);
    }
    glm_status st = GLM_OK;
    for (int b = 0; b < B && !st; b++) {
        const int64_t r0 = (int64_t)b * T;
        st = glm_cpu_attention_block_fwd(be, o, qd, l, T, (const float *)q + r0 * ldq, ldq, (const float *)k + r0 * ldk,
                                         ldk, (const float *)v + r0 * ldv, ldv, doc + r0, doc + r0, 0, 0, T, T, H, Hkv, Dh,
                                         1);
        for (int64_t i = 0; !st && i < T; i++)
            for (int64_t c = 0; c < qd; c++) ((float *)out)[(r0 + i) * ldo + c] = (float)o[i * qd + c];
        for (int64_t i = 0; !st && i < (int64_t)H * T; i++) lse[(int64_t)b * H * T + i] = (float)l[i];
    }
    free(o);
    free(l);
    return st;
}

/* dq, dk, dv of each row from the block backward over the whole row (one block), rounded to f32 once */
static glm_status cpu_attention_bwd(const glm_backend *be, void *dq, void *dk, void *dv,
                                    const void *dout, int64_t ldo, const void *out, const float *lse,
                                    const void *D, const void *q, int64_t ldq, const void *k, int64_t ldk,
                                    const void *v, int64_t ldv, const int32_t *doc,
                                    int B, int T, int H, int Hkv, int Dh) {
    const int64_t qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh;
    double *aq = malloc((size_t)T * (size_t)qd * sizeof(double)), *ak = malloc((size_t)T * (size_t)kd * sizeof(double)),
           *av = malloc((size_t)T * (size_t)kd * sizeof(double));
    if (!aq || !ak || !av) {
        free(aq);
        free(ak);
        free(av);
        return glm_err(GLM_ERR_NOMEM, "attention_bwd: out of memory for a row of %d tokens", T);
    }
    glm_status st = GLM_OK;
    for (int b = 0; b < B && !st; b++) {
        const int64_t r0 = (int64_t)b * T;
        memset(aq, 0, (size_t)T * (size_t)qd * sizeof(double));
        memset(ak, 0, (size_t)T * (size_t)kd * sizeof(double));
        memset(av, 0, (size_t)T * (size_t)kd * sizeof(double));
        st = glm_cpu_attention_block_bwd_d(be, aq, qd, ak, kd, av, kd, (const float *)dout + r0 * ldo, ldo,
                                           D ? NULL : (const float *)out + r0 * ldo, lse + (int64_t)b * H * T, T,
                                           D ? (const double *)D + (int64_t)b * H * T : NULL,
                                           (const float *)q + r0 * ldq, ldq, (const float *)k + r0 * ldk, ldk,
                                           (const float *)v + r0 * ldv, ldv, doc + r0, doc + r0, 0, 0, T, T, H, Hkv, Dh);
        for (int64_t i = 0; !st && i < T; i++) {
            for (int64_t c = 0; c < qd; c++) ((float *)dq)[(r0 + i) * ldq + c] = (float)aq[i * qd + c];
            for (int64_t c = 0; c < kd; c++) {
                ((float *)dk)[(r0 + i) * ldk + c] = (float)ak[i * kd + c];
                ((float *)dv)[(r0 + i) * ldv + c] = (float)av[i * kd + c];
            }
        }
    }
    free(aq);
    free(ak);
    free(av);
    return st;
}

static glm_status cpu_cross_entropy(const glm_backend *be, void *dlogits, const void *logits,
                                    const int32_t *labels, const float *weights, float *logp, int64_t n, int64_t V,
                                    float loss_scale, double *loss_sum, int64_t *n_targets) {
    const float *L = logits;
    float *DL = dlogits;
    double tot = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *li = L + i * V;
        int32_t y = labels[i];
        if (y < 0) {
            if (DL) memset(DL + i * V, 0, (size_t)V * sizeof(float));
            if (logp) logp[i] = 0.0f;
            continue;
        }
        if ((int64_t)y >= V)
            return glm_err(GLM_ERR_ARG, "cross_entropy: label %d at row %lld is outside the vocabulary (V = %lld)",
                           y, (long long)i, (long long)V);
        double mx = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            if (li[v] > mx) mx = li[v];
        double s = 0;
        for (int64_t v = 0; v < V; v++) s += exp((double)li[v] - mx);
        double lse = mx + log(s);
        double loss = lse - (double)li[y];
        /* without weights: the unweighted sums and factors, bit for bit */
        tot += weights ? (double)weights[i] * loss : loss;
        cnt++;
        if (logp) logp[i] = (float)-loss; /* before dlogits: in place, the row is overwritten below */
        if (DL) {
            const double sc = weights ? (double)loss_scale * (double)weights[i] : (double)loss_scale;
            float *di = DL + i * V;
            for (int64_t v = 0; v < V; v++) {
                double p = exp((double)li[v] - lse);
                di[v] = (float)(sc * (p - (v == y ? 1.0 : 0.0)));
            }
        }
    }
    /* a non-finite loss is returned as it is: the trainer counts and skips such steps */
    *loss_sum = tot;
    if (n_targets) *n_targets = cnt;
    return GLM_OK;
}

/* ---- optimizer and communication --------------------------------------------------------- */

static glm_status cpu_adamw(const glm_backend *be, float *w, const float *g, float *m, float *v, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            float grad_scale, int64_t step) {
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = 1.0f - lr * weight_decay;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        w[i] *= decay;
        m[i] += (1.0f - beta1) * (gi - m[i]);
        v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        w[i] -= step_size * (m[i] / denom);
    }
    return GLM_OK;
}

static glm_status cpu_sumsq(const glm_backend *be, int count, const float *const *x, const int64_t *n, double *out) {
    for (int k = 0; k < count; k++) {
        double s = 0;
        for (int64_t i = 0; i < n[k]; i++) s += (double)x[k][i] * x[k][i];
        out[k] = s;
    }
    return GLM_OK;
}

static glm_status cpu_sync(const glm_backend *be) { return GLM_OK; }

/* f32 <-> f32 only (the CPU backend has no bf16 buffers) */
static glm_status cpu_cast(const glm_backend *be, void *dst, glm_dtype dd, const void *src, glm_dtype ds, int64_t n) {
    GLM_TRY(need_f32(dd, "cast"));
    GLM_TRY(need_f32(ds, "cast"));
    if (n > 0 && dst != src) memmove(dst, src, (size_t)n * sizeof(float));
    return GLM_OK;
}

/* f32 <-> f32 / f64 (the CPU backend has no bf16 buffers; f64 only as its acc_dtype) */
static glm_status cpu_cast_2d(const glm_backend *be, void *dst, glm_dtype dd, int64_t ldd, const void *src, glm_dtype ds,
                              int64_t lds, int64_t rows, int64_t cols) {
    if (dd == GLM_DT_BF16 || ds == GLM_DT_BF16 || (dd == GLM_DT_F64 && ds == GLM_DT_F64))
        return glm_err(GLM_ERR_UNSUPPORTED, "cpu backend: cast_2d: only f32 -> f32, f64 -> f32 and f32 -> f64");
    for (int64_t r = 0; r < rows; r++) {
        if (dd == GLM_DT_F32 && ds == GLM_DT_F32) {
            memmove((float *)dst + r * ldd, (const float *)src + r * lds, (size_t)cols * sizeof(float));
        } else if (dd == GLM_DT_F32) {
            const double *s = (const double *)src + r * lds;
            float *d = (float *)dst + r * ldd;
            for (int64_t c = 0; c < cols; c++) d[c] = (float)s[c];
        } else {
            const float *s = (const float *)src + r * lds;
            double *d = (double *)dst + r * ldd;
            for (int64_t c = 0; c < cols; c++) d[c] = s[c];
        }
    }
    return GLM_OK;
}

static glm_status cpu_fill_normal(const glm_backend *be, void *dst, glm_dtype dt, int64_t n, float mean, float std,
                                  uint64_t seed, uint64_t stream) {
    GLM_TRY(need_f32(dt, "fill_normal"));
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = mean + std * glm_normal_hash(seed, stream, (uint64_t)i);
    return GLM_OK;
}

/* free: the machine's available memory (MemAvailable, common/meminfo.h: the host-offload planner's
   rule), not MemFree, which the page cache of large file reads shrinks to a fraction of it */
static void cpu_mem_info(const glm_backend *be, size_t *free_b, size_t *total_b, size_t *in_use, size_t *peak) {
    long pg = sysconf(_SC_PAGESIZE), tot = sysconf(_SC_PHYS_PAGES);
    const double total = pg > 0 && tot > 0 ? (double)pg * (double)tot : 0;
    if (total_b) *total_b = (size_t)total;
    if (free_b) *free_b = (size_t)glm_mem_available(total);
    if (in_use) *in_use = 0;
    if (peak) *peak = 0;
}
static void cpu_mem_reset_peak(const glm_backend *be) {}
/* nothing on a device; the cap is host memory's, held by the planner's budget */
static size_t cpu_mem_process(const glm_backend *be) { return 0; }
static size_t cpu_mem_overhead(const glm_backend *be) { return 0; }
static glm_status cpu_set_mem_cap(const glm_backend *be, size_t bytes) { return GLM_OK; }
static glm_status cpu_scratch_need(const glm_backend *be, const glm_scratch_shape *s, size_t *bytes, size_t *attn_ws) {
    *bytes = 0;
    if (attn_ws) *attn_ws = 0;
    return GLM_OK;
}
static glm_status cpu_scratch_reserve(const glm_backend *be, const glm_scratch_shape *s, int with_attn_ws) { return GLM_OK; }

/* Profiling on the CPU: wall-clock time between phase marks (single-threaded use). */
static int cpu_prof_on, cpu_prof_phase;
static double cpu_prof_t0, cpu_prof_ms[GLM_PHASE_COUNT];

static double cpu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static void cpu_prof_enable(const glm_backend *be, int on) {
    cpu_prof_on = on;
    cpu_prof_phase = GLM_PHASE_OTHER;
    cpu_prof_t0 = cpu_now_ms();
    memset(cpu_prof_ms, 0, sizeof cpu_prof_ms);
}
static void cpu_phase(const glm_backend *be, int p) {
    if (!cpu_prof_on || p < 0 || p >= GLM_PHASE_COUNT) return;
    double t = cpu_now_ms();
    cpu_prof_ms[cpu_prof_phase] += t - cpu_prof_t0;
    cpu_prof_t0 = t;
    cpu_prof_phase = p;
}
static int cpu_supports(const glm_backend *be, glm_feature f) {
    (void)be;
    switch (f) {
    case GLM_FEATURE_RING_ATTENTION: return 1; /* kernels/cpu/attention_block.c */
    case GLM_FEATURE_COMM: return glm_mpi_built();
    case GLM_FEATURE_WEIGHT_4BIT: return 1; /* kernels/cpu/quant4.c */
    case GLM_FEATURE_FP8: return 1;         /* kernels/cpu/fp8_cpu.c: the emulation */
    default: return 0;
    }
}

static glm_status cpu_prof_collect(const glm_backend *be, double *ms) {
    if (!cpu_prof_on) return GLM_OK;
    cpu_phase(be, cpu_prof_phase);
    for (int i = 0; i < GLM_PHASE_COUNT; i++) {
        ms[i] += cpu_prof_ms[i];
        cpu_prof_ms[i] = 0;
    }
    return GLM_OK;
}

const char *glm_phase_name(int p) {
    static const char *names[GLM_PHASE_COUNT] = {"other", "attention fwd", "attention bwd", "base GEMMs", "LoRA",
                                                 "norms, RoPE, elementwise", "loss head (GEMMs + CE)", "optimizer"};
    return p >= 0 && p < GLM_PHASE_COUNT ? names[p] : "?";
}

static glm_backend cpu_backend = {
    .name = "cpu",
    .weight_dtype = GLM_DT_F32,
    .act_dtype = GLM_DT_F32,
    .acc_dtype = GLM_DT_F64,
    .rank = 0,
    .world = 1,
    .impl = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .upload_async = cpu_upload_async,
    .download_async = cpu_download_async,
    .copy_wait = cpu_copy_wait,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .upload_f32 = cpu_upload_f32,
    .download_f32 = cpu_download_f32,
    .zero = cpu_zero,
    .copy = cpu_memcpy,
    .matmul = cpu_matmul,
    .weight_quantize = glm_cpu_weight_quantize,
    .weight_dequantize = glm_cpu_weight_dequantize,
    .fp8_quantize = glm_cpu_fp8_quantize,
    .fp8_matmul = glm_cpu_fp8_matmul,
    .fp8_transpose = glm_cpu_fp8_transpose,
    .add_bias = cpu_add_bias,
    .axpy = cpu_axpy,
    .dropout = cpu_dropout,
    .embedding = cpu_embedding,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope = cpu_rope,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .attention_delta = glm_cpu_attention_delta,
    .attention_block_fwd = glm_cpu_attention_block_fwd,
    .attention_block_bwd = glm_cpu_attention_block_bwd,
    .cross_entropy = cpu_cross_entropy,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .sync = cpu_sync, /* the communication ops: glm_cpu_comm_ops (comm_mpi.c) */
    .cast = cpu_cast,
    .cast_2d = cpu_cast_2d,
    .fill_normal = cpu_fill_normal,
    .set_attention_ws_cap = cpu_set_attention_ws_cap,
    .mem_info = cpu_mem_info,
    .mem_reset_peak = cpu_mem_reset_peak,
    .mem_process = cpu_mem_process,
    .mem_overhead = cpu_mem_overhead,
    .set_mem_cap = cpu_set_mem_cap,
    .scratch_need = cpu_scratch_need,
    .scratch_reserve = cpu_scratch_reserve,
    .prof_enable = cpu_prof_enable,
    .phase = cpu_phase,
    .prof_collect = cpu_prof_collect,
    .supports = cpu_supports,
};

void glm_cpu_comm_ops(glm_backend *b); /* comm_mpi.c */

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static void cpu_init(void) { glm_cpu_comm_ops(&cpu_backend); }

const glm_backend *glm_backend_cpu(void) {
    pthread_once(&cpu_once, cpu_init);
    return &cpu_backend;
}
