/* kernels/cpu/attention_block.c: the CPU reference of the block attention ops that the
 * context-parallel ring is made of (attention_block_fwd / attention_block_bwd, contract in
 * kernels/backend.h): one block of queries against one block of keys of the same packed row, with
 * global token indices (q0, k0) and document ids for the mask, and the online-softmax merge of
 * the forward's partial results. The one CPU attention: the whole-row ops (cpu_attention_fwd / _bwd,
 * backend_cpu.c) are these with one block covering each row. Dot products, softmax sums and merges
 * in double, and the accumulators are double too (the CPU backend's acc_dtype), so the ring rounds
 * to f32 once, at its end, as the whole-row ops do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

/* The last key of the block query i may see by causality (global index q0 + i), as an index into
 * the key block: -1 when the whole block lies after the query. */
static int last_key(int64_t q0, int64_t k0, int i, int Tk) {
    int64_t lim = q0 + i - k0;
    if (lim < 0) return -1;
    return lim >= Tk ? Tk - 1 : (int)lim;
}

glm_status glm_cpu_attention_block_fwd(const glm_backend *be, void *o_, int64_t ldo, void *lse_, int64_t ldl,
                                       const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                       int64_t ldv, const int32_t *q_doc, const int32_t *k_doc, int64_t q0,
                                       int64_t k0, int Tq, int Tk, int H, int Hkv, int Dh, int init) {
    (void)be;
    if (Tq == 0) return GLM_OK;
    const float *Q = q, *K = k, *Vv = v;
    double *o = o_, *lse = lse_;
    double scale = 1.0 / sqrt((double)Dh);
    double *s = malloc((size_t)(Tk > 0 ? Tk : 1) * sizeof(double));
    double *acc = malloc((size_t)Dh * sizeof(double));
    if (!s || !acc) {
        free(s);
        free(acc);
        return glm_err(GLM_ERR_NOMEM, "attention_block_fwd: out of memory");
    }
    int rep = H / Hkv;
    for (int h = 0; h < H; h++) {
        int g = h / rep;
        for (int i = 0; i < Tq; i++) {
            const float *qi = Q + (int64_t)i * ldq + (int64_t)h * Dh;
            double *oi = o + (int64_t)i * ldo + (int64_t)h * Dh;
            double *li = lse + (int64_t)h * ldl + i;
            int jmax = last_key(q0, k0, i, Tk);
            double mx = -INFINITY;
            for (int j = 0; j <= jmax; j++) {
                if (k_doc[j] != q_doc[i]) continue;
                const float *kj = K + (int64_t)j * ldk + (int64_t)g * Dh;
                double d = 0;
                for (int c = 0; c < Dh; c++) d += (double)qi[c] * kj[c];
                s[j] = d * scale;
                if (s[j] > mx) mx = s[j];
            }
            if (mx == -INFINITY) { /* no allowed key in this block */
                if (init) {
                    for (int c = 0; c < Dh; c++) oi[c] = 0.0;
                    *li = -INFINITY;
                }
                continue;
            }
            double sum = 0;
            for (int c = 0; c < Dh; c++) acc[c] = 0;
            for (int j = 0; j <= jmax; j++) {
                if (k_doc[j] != q_doc[i]) continue;
                double e = exp(s[j] - mx);
                sum += e;
                const float *vj = Vv + (int64_t)j * ldv + (int64_t)g * Dh;
                for (int c = 0; c < Dh; c++) acc[c] += e * vj[c];
            }
            double lb = mx + log(sum), lo = init ? -INFINITY : *li;
            if (lo == -INFINITY) { /* the first allowed keys of this query: the block's result */
                for (int c = 0; c < Dh; c++) oi[c] = acc[c] / sum;
                *li = lb;
                continue;
            }
            /* online-softmax merge of (o, lo) with (acc / sum, lb) */
            double m = lo > lb ? lo : lb;
            double ln = m + log(exp(lo - m) + exp(lb - m));
            double wo = exp(lo - ln), wb = exp(lb - ln) / sum;
            for (int c = 0; c < Dh; c++) oi[c] = oi[c] * wo + acc[c] * wb;
            *li = ln;
        }
    }
    free(s);
    free(acc);
    return GLM_OK;
}

/* D_i = dout_i . out_i of query i, head h, in double: the one place it is summed (attention_bwd's
 * given D and the block backward's own are the same bits) */
static double row_delta(const float *doi, const float *oi, int Dh) {
    double Di = 0;
    for (int c = 0; c < Dh; c++) Di += (double)doi[c] * oi[c];
    return Di;
}

glm_status glm_cpu_attention_delta(const glm_backend *be, void *D_, const void *dout, int64_t ldd, const void *out,
                                   int64_t ldo, int64_t n0, int64_t rows, int T, int H, int Dh) {
    (void)be;
    double *D = D_;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t n = n0 + r, b = n / T, i = n % T;
        for (int h = 0; h < H; h++)
            D[(b * H + h) * T + i] = row_delta((const float *)dout + r * ldd + (int64_t)h * Dh,
                                               (const float *)out + r * ldo + (int64_t)h * Dh, Dh);
    }
    return GLM_OK;
}

glm_status glm_cpu_attention_block_bwd_d(const glm_backend *be, void *dq_, int64_t lddq, void *dk_, int64_t lddk,
                                         void *dv_, int64_t lddv, const void *dout, int64_t ldo, const void *out,
                                         const float *lse, int64_t ldl, const double *Dgiven, const void *q,
                                         int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                                         const int32_t *q_doc, const int32_t *k_doc, int64_t q0, int64_t k0, int Tq,
                                         int Tk, int H, int Hkv, int Dh) {
    (void)be;
    if (Tq == 0 || Tk == 0) return GLM_OK;
    const float *Q = q, *K = k, *Vv = v, *DO = dout, *O = out;
    double *dq = dq_, *dk = dk_, *dv = dv_;
    double scale = 1.0 / sqrt((double)Dh);
    int rep = H / Hkv;
    double *adq = malloc((size_t)Dh * sizeof(double));
    if (!adq) return glm_err(GLM_ERR_NOMEM, "attention_block_bwd: out of memory");
    for (int h = 0; h < H; h++) {
        int g = h / rep;
        for (int i = 0; i < Tq; i++) {
            int jmax = last_key(q0, k0, i, Tk);
            if (jmax < 0) continue;
            const float *qi = Q + (int64_t)i * ldq + (int64_t)h * Dh;
            const float *doi = DO + (int64_t)i * ldo + (int64_t)h * Dh;
            double L = lse[(int64_t)h * ldl + i];
            if (L == -INFINITY) continue; /* a query with no key at all (never one of a real row) */
            double Di = Dgiven ? Dgiven[(int64_t)h * ldl + i] : row_delta(doi, O + (int64_t)i * ldo + (int64_t)h * Dh, Dh);
            int any = 0;
            for (int c = 0; c < Dh; c++) adq[c] = 0;
            for (int j = 0; j <= jmax; j++) {
                if (k_doc[j] != q_doc[i]) continue;
                const float *kj = K + (int64_t)j * ldk + (int64_t)g * Dh;
                const float *vj = Vv + (int64_t)j * ldv + (int64_t)g * Dh;
                double sdot = 0, dp = 0;
                for (int c = 0; c < Dh; c++) {
                    sdot += (double)qi[c] * kj[c];
                    dp += (double)doi[c] * vj[c];
                }
                double P = exp(sdot * scale - L);
                double dS = P * (dp - Di) * scale;
                double *akj = dk + (int64_t)j * lddk + (int64_t)g * Dh, *avj = dv + (int64_t)j * lddv + (int64_t)g * Dh;
                for (int c = 0; c < Dh; c++) {
                    adq[c] += dS * kj[c];
                    akj[c] += dS * qi[c];
                    avj[c] += P * doi[c];
                }
                any = 1;
            }
            if (!any) continue;
            double *dqi = dq + (int64_t)i * lddq + (int64_t)h * Dh;
            for (int c = 0; c < Dh; c++) dqi[c] += adq[c];
        }
    }
    free(adq);
    return GLM_OK;
}

glm_status glm_cpu_attention_block_bwd(const glm_backend *be, void *dq, int64_t lddq, void *dk, int64_t lddk,
                                       void *dv, int64_t lddv, const void *dout, int64_t ldo, const void *out,
                                       const float *lse, int64_t ldl, const void *q, int64_t ldq, const void *k,
                                       int64_t ldk, const void *v, int64_t ldv, const int32_t *q_doc,
                                       const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk, int H, int Hkv,
                                       int Dh) {
    return glm_cpu_attention_block_bwd_d(be, dq, lddq, dk, lddk, dv, lddv, dout, ldo, out, lse, ldl, NULL, q, ldq, k,
                                         ldk, v, ldv, q_doc, k_doc, q0, k0, Tq, Tk, H, Hkv, Dh);
}
