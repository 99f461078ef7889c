/* tests/kernels/test_cpu_ops.c: the CPU reference backend's ops.
 * Every backward is checked against central finite differences of a random projection of the
 * forward (f(x) = sum(out * R), R random), on small shapes with random (never zero) inputs.
 * Forwards are checked against direct formulas (naive GEMM, torch AdamW formula, ...). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/backend.h"
#include "kernels/comm.h"
#include "tests/check.h"

static glm_rng rng;
static const glm_backend *be;

static float *randv(int64_t n, double scale) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double v = glm_rng_normal(&rng) * scale;
        if (fabs(v) < 1e-3) v = 1e-3 + v;   /* never zero */
        x[i] = (float)v;
    }
    return x;
}

static double dotd(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ||a-b|| / ||b|| in double */
static double relerr(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/* Finite differences of f() w.r.t. x[0..n) (step h, central), compared with analytic g. */
typedef double (*fwd_fn)(void *ctx);
static void fd_check(const char *what, fwd_fn f, void *ctx, float *x, const float *g, int64_t n, float h, double tol) {
    double *num = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        float x0 = x[i];
        x[i] = x0 + h;
        double fp = f(ctx);
        x[i] = x0 - h;
        double fm = f(ctx);
        x[i] = x0;
        num[i] = (fp - fm) / (2.0 * ((double)(x0 + h) - (double)x0));
    }
    double e = relerr(g, num, n);
    CHECK(e < tol, "%s: finite differences vs backward: rel err %.3e (tol %.1e)", what, e, tol);
    free(num);
}

/* ---- rmsnorm ---- */
typedef struct { int64_t N, C; float *x, *w, *R, *y, *rstd; } rms_ctx;
static double rms_f(void *p) {
    rms_ctx *c = p;
    glm_be_rmsnorm_fwd(be, c->y, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    return dotd(c->y, c->R, c->N * c->C);
}
static void test_rmsnorm(void) {
    rms_ctx c = {.N = 3, .C = 17};
    c.x = randv(c.N * c.C, 1.0);
    c.w = randv(c.C, 1.0);
    c.R = randv(c.N * c.C, 1.0);
    c.y = malloc(c.N * c.C * 4);
    c.rstd = malloc(c.N * 4);
    rms_f(&c);
    /* forward formula */
    double ss = 0;
    for (int k = 0; k < c.C; k++) ss += (double)c.x[c.C + k] * c.x[c.C + k];
    double r = 1.0 / sqrt(ss / c.C + 1e-5);
    CHECK(check_close(c.y[c.C + 5], c.x[c.C + 5] * r * c.w[5], 1e-6, 1e-6), "rmsnorm forward");
    float *dx = randv(c.N * c.C, 1.0), *dx0 = malloc(c.N * c.C * 4);
    memcpy(dx0, dx, c.N * c.C * 4);
    glm_be_rmsnorm_bwd(be, dx, c.R, c.x, c.w, c.rstd, c.N, c.C);
    for (int64_t i = 0; i < c.N * c.C; i++) dx[i] -= dx0[i]; /* it accumulates */
    fd_check("rmsnorm_bwd", rms_f, &c, c.x, dx, c.N * c.C, 1e-2f, 2e-3);
    free(c.x); free(c.w); free(c.R); free(c.y); free(c.rstd); free(dx); free(dx0);
}

/* ---- rope ---- */
static void test_rope(void) {
    int N = 5, nh = 3, Dh = 8, rot = 4;
    int64_t ld = nh * Dh + 3;
    int32_t pos[5] = {0, 1, 7, 1000, 123456};
    float *x = randv(N * ld, 1.0), *y = malloc(N * ld * 4), *z = randv(N * ld, 1.0), *zt = malloc(N * ld * 4);
    memcpy(y, x, N * ld * 4);
    memcpy(zt, z, N * ld * 4);
    float invf[2];
    glm_rope_inv_freq(10000.0, rot, invf);
    CHECK(invf[0] == 1.0f && invf[1] == 0.01f, "inv_freq table");
    CHECK(glm_be_rope(be, y, ld, pos, N, nh, Dh, rot, invf, 0) == GLM_OK, "rope fwd");
    /* direct formula on one element: token 3, head 1, pair 1 */
    float inv = (float)(1.0 / pow(10000.0, 2.0 / 4.0));
    float ang = (float)pos[3] * inv;
    const float *xh = x + 3 * ld + Dh;
    double e0 = xh[2] * cos(ang) - xh[3] * sin(ang);
    CHECK(check_close(y[3 * ld + Dh + 2], e0, 1e-5, 1e-5), "rope pair rotation: %g vs %g", y[3 * ld + Dh + 2], e0);
    CHECK(y[2 * ld + 2 * Dh + 6] == x[2 * ld + 2 * Dh + 6], "rope pass-through channels");
    CHECK(y[2 * ld + nh * Dh + 1] == x[2 * ld + nh * Dh + 1], "rope leaves the row padding alone");
    CHECK(y[0] == x[0] && y[1] == x[1], "rope at position 0 is the identity");
    /* backward = transpose: <R x, z> == <x, R^T z> */
    CHECK(glm_be_rope(be, zt, ld, pos, N, nh, Dh, rot, invf, 1) == GLM_OK, "rope bwd");
    double a = 0, b = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < nh * Dh; c++) {
            a += (double)y[n * ld + c] * z[n * ld + c];
            b += (double)x[n * ld + c] * zt[n * ld + c];
        }
    CHECK(fabs(a - b) < 1e-5 * fabs(a) + 1e-5, "rope backward is the transpose: %g vs %g", a, b);
    CHECK(glm_be_rope(be, y, ld, pos, N, nh, Dh, 5, invf, 0) != GLM_OK, "rope refuses odd rotary dims");
    free(x); free(y); free(z); free(zt);
}

/* ---- swiglu ---- */
typedef struct { int64_t N, F; float *h, *R, *out; } sw_ctx;
static double sw_f(void *p) {
    sw_ctx *c = p;
    glm_be_swiglu_fwd(be, c->out, c->h, c->N, c->F);
    return dotd(c->out, c->R, c->N * c->F);
}
static void test_swiglu(void) {
    sw_ctx c = {.N = 4, .F = 7};
    c.h = randv(c.N * 2 * c.F, 1.5);
    c.R = randv(c.N * c.F, 1.0);
    c.out = malloc(c.N * c.F * 4);
    sw_f(&c);
    double g = c.h[2 * 2 * c.F + 3], u = c.h[2 * 2 * c.F + c.F + 3];
    CHECK(check_close(c.out[2 * c.F + 3], g / (1 + exp(-g)) * u, 1e-6, 1e-7), "swiglu forward");
    float *dh = malloc(c.N * 2 * c.F * 4);
    glm_be_swiglu_bwd(be, dh, c.R, c.h, c.N, c.F);
    fd_check("swiglu_bwd", sw_f, &c, c.h, dh, c.N * 2 * c.F, 1e-2f, 2e-3);
    free(c.h); free(c.R); free(c.out); free(dh);
}

/* ---- attention ---- */
typedef struct {
    int B, T, H, Hkv, Dh;
    int64_t ld;   /* q|k|v packed in one buffer like the model: (H + 2 Hkv) Dh */
    float *qkv, *out, *lse, *R;
    int32_t *doc;
} at_ctx;
static double at_f(void *p) {
    at_ctx *c = p;
    int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    glm_be_attention_fwd(be, c->out, qd, c->lse, c->qkv, c->ld, c->qkv + qd, c->ld, c->qkv + qd + kd, c->ld,
                      c->doc, c->B, c->T, c->H, c->Hkv, c->Dh);
    return dotd(c->out, c->R, (int64_t)c->B * c->T * qd);
}
static void test_attention(void) {
    at_ctx c = {.B = 2, .T = 7, .H = 4, .Hkv = 2, .Dh = 4};
    c.ld = (int64_t)(c.H + 2 * c.Hkv) * c.Dh;
    int64_t NT = (int64_t)c.B * c.T, qd = (int64_t)c.H * c.Dh, kd = (int64_t)c.Hkv * c.Dh;
    c.qkv = randv(NT * c.ld, 1.0);
    c.out = malloc(NT * qd * 4);
    c.lse = malloc((size_t)c.B * c.H * c.T * 4);
    c.R = randv(NT * qd, 1.0);
    int32_t doc[14] = {0, 0, 0, 0, 0, 0, 0, /* row 1: docs of 3, 2, 2 */ 0, 0, 0, 1, 1, 2, 2};
    c.doc = doc;
    at_f(&c);
    /* naive reference for row 1, token 4 (doc 1 = tokens 3..4), head 3 (group 1) */
    {
        int i = 4, h = 3, g = 1;
        const float *Q = c.qkv + (7 + i) * c.ld + h * c.Dh;
        double s[2], mx = -1e300, sum = 0, o0 = 0;
        for (int j = 3; j <= 4; j++) {
            const float *K = c.qkv + (7 + j) * c.ld + qd + g * c.Dh;
            s[j - 3] = dotd(Q, K, c.Dh) / 2.0;
            if (s[j - 3] > mx) mx = s[j - 3];
        }
        for (int j = 3; j <= 4; j++) {
            double e = exp(s[j - 3] - mx);
            sum += e;
            o0 += e * c.qkv[(7 + j) * c.ld + qd + kd + g * c.Dh + 1];
        }
        o0 /= sum;
        CHECK(check_close(c.out[(7 + i) * qd + h * c.Dh + 1], o0, 1e-5, 1e-6), "attention forward vs naive: %g vs %g",
              c.out[(7 + i) * qd + h * c.Dh + 1], o0);
        /* the first token of a document attends only to itself */
        const float *v3 = c.qkv + (7 + 3) * c.ld + qd + kd + g * c.Dh;
        CHECK(check_close(c.out[(7 + 3) * qd + h * c.Dh + 2], v3[2], 1e-6, 1e-7), "document boundary masks attention");
    }
    float *dqkv = malloc(NT * c.ld * 4);
    for (int64_t i = 0; i < NT * c.ld; i++) dqkv[i] = 12345.0f; /* overwritten */
    CHECK(glm_be_attention_bwd(be, dqkv, dqkv + qd, dqkv + qd + kd, c.R, qd, c.out, c.lse, c.qkv, c.ld, c.qkv + qd, c.ld,
                            c.qkv + qd + kd, c.ld, c.doc, c.B, c.T, c.H, c.Hkv, c.Dh) == GLM_OK, "attention_bwd");
    fd_check("attention_bwd (dq, dk, dv)", at_f, &c, c.qkv, dqkv, NT * c.ld, 1e-2f, 2e-3);
    CHECK(glm_be_attention_fwd(be, c.out, qd, c.lse, c.qkv, c.ld, c.qkv, c.ld, c.qkv, c.ld, c.doc, 1, 2, 3, 2, 4) != GLM_OK,
          "attention refuses H not a multiple of Hkv");
    free(c.qkv); free(c.out); free(c.lse); free(c.R); free(dqkv);
}

/* ---- cross-entropy ---- */
typedef struct { int64_t n, V; float *logits; int32_t *labels; } ce_ctx;
static double ce_f(void *p) {
    ce_ctx *c = p;
    double loss;
    glm_be_cross_entropy(be, NULL, c->logits, c->labels, c->n, c->V, 1.0f, &loss, NULL);
    return loss * 0.25;
}
static void test_cross_entropy(void) {
    ce_ctx c = {.n = 5, .V = 11};
    c.logits = randv(c.n * c.V, 2.0);
    int32_t labels[5] = {3, -1, 10, 0, -1};
    c.labels = labels;
    float *d = malloc(c.n * c.V * 4);
    double loss;
    int64_t nt;
    CHECK(glm_be_cross_entropy(be, d, c.logits, c.labels, c.n, c.V, 0.25f, &loss, &nt) == GLM_OK, "ce");
    CHECK(nt == 3, "ce counts targets: %lld", (long long)nt);
    double ref = 0;
    for (int i = 0; i < 5; i++) {
        if (labels[i] < 0) continue;
        double s = 0;
        for (int v = 0; v < c.V; v++) s += exp((double)c.logits[i * c.V + v]);
        ref += log(s) - c.logits[i * c.V + labels[i]];
    }
    CHECK(check_close(loss, ref, 1e-9, 1e-9), "ce loss %g vs %g", loss, ref);
    CHECK(d[1 * c.V + 4] == 0.0f, "non-target rows get zero gradient");
    fd_check("cross_entropy dlogits", ce_f, &c, c.logits, d, c.n * c.V, 1e-2f, 1e-3);
    /* in place */
    float *l2 = malloc(c.n * c.V * 4);
    memcpy(l2, c.logits, c.n * c.V * 4);
    glm_be_cross_entropy(be, l2, l2, c.labels, c.n, c.V, 0.25f, &loss, &nt);
    CHECK(memcmp(l2, d, c.n * c.V * 4) == 0, "ce in place == out of place");
    labels[1] = 11;
    CHECK(glm_be_cross_entropy(be, d, c.logits, c.labels, c.n, c.V, 1.0f, &loss, &nt) == GLM_ERR_ARG, "ce label >= V is an error");
    free(c.logits); free(d); free(l2);
}

/* ---- matmul ---- */
static void test_matmul(void) {
    int M = 5, N = 6, K = 7;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
            float *A = randv((ta ? K : M) * lda, 1), *B = randv((tb ? N : K) * ldb, 1), *C = randv(M * ldc, 1);
            float *C0 = malloc(M * ldc * 4);
            memcpy(C0, C, M * ldc * 4);
            CHECK(glm_be_matmul(be, ta, tb, M, N, K, 0.5f, A, GLM_DT_F32, lda, B, GLM_DT_F32, ldb, 1.0f, C, GLM_DT_F32, ldc) == GLM_OK, "matmul");
            double maxe = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int k = 0; k < K; k++)
                        s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
                    double e = fabs(C[i * ldc + j] - (0.5 * s + C0[i * ldc + j]));
                    if (e > maxe) maxe = e;
                }
            CHECK(maxe < 1e-5, "matmul ta=%d tb=%d accumulate: max err %g", ta, tb, maxe);
            for (int i = 0; i < M * ldc; i++) C[i] = NAN;
            glm_be_matmul(be, ta, tb, M, N, K, 1.0f, A, GLM_DT_F32, lda, B, GLM_DT_F32, ldb, 0.0f, C, GLM_DT_F32, ldc);
            CHECK(isfinite(C[0]) && isfinite(C[(M - 1) * ldc + N - 1]), "matmul beta=0 ignores NaN in C");
            free(A); free(B); free(C); free(C0);
        }
    float a = 1;
    CHECK(glm_be_matmul(be, 0, 0, 1, 1, 1, 1, &a, GLM_DT_BF16, 1, &a, GLM_DT_F32, 1, 0, &a, GLM_DT_F32, 1) == GLM_ERR_UNSUPPORTED,
          "cpu matmul refuses bf16");
}

/* ---- dropout, embedding, adamw, sumsq, memory ---- */
static void test_misc(void) {
    int N = 50, D = 40;
    float *x = randv(N * D, 1), *y = malloc(N * D * 4), *y2 = malloc(N * D * 4), *g = randv(N * D, 1), *gd = malloc(N * D * 4);
    glm_be_dropout(be, y, D, x, D, N, D, 0, 0.25f, 99, 3);
    glm_be_dropout(be, y2, D, x, D, N, D, 0, 0.25f, 99, 3);
    CHECK(memcmp(y, y2, N * D * 4) == 0, "dropout mask is reproducible");
    int zeros = 0, ok = 1;
    for (int i = 0; i < N * D; i++) {
        if (y[i] == 0) zeros++;
        else if (fabsf(y[i] - x[i] / 0.75f) > 1e-6f * fabsf(x[i])) ok = 0;
    }
    CHECK(ok, "kept elements are scaled by 1/(1-p)");
    CHECK(zeros > 0.18 * N * D && zeros < 0.32 * N * D, "dropout rate ~0.25: %d of %d", zeros, N * D);
    glm_be_dropout(be, gd, D, g, D, N, D, 0, 0.25f, 99, 3);
    /* backward == same op: <drop(x), g> == <x, drop(g)> */
    CHECK(fabs(dotd(y, g, N * D) - dotd(x, gd, N * D)) < 1e-4, "dropout backward is the same mask");
    glm_be_dropout(be, y2, D, x, D, N, D, 0, 0.25f, 99, 4);
    CHECK(memcmp(y, y2, N * D * 4) != 0, "another stream gives another mask");
    CHECK(glm_be_dropout(be, y2, D, x, D, N, D, 0, 1.0f, 99, 4) == GLM_ERR_ARG, "dropout p=1 refused");
    /* row0: rows [20, N) on their own get the mask of the same rows of the whole matrix */
    glm_be_dropout(be, y2, D, x + 20 * D, D, N - 20, D, 20, 0.25f, 99, 3);
    CHECK(memcmp(y + 20 * D, y2, (size_t)(N - 20) * D * 4) == 0, "dropout of a row chunk (row0) = those rows of the whole");

    /* fill_normal: N(mean, std) moments over 200k draws, reproducible, another stream differs */
    {
        int64_t n = 200000;
        float *z = malloc(n * 4), *z2 = malloc(n * 4);
        CHECK(glm_be_fill_normal(be, z, GLM_DT_F32, n, 0.5f, 2.0f, 7, 1) == GLM_OK, "fill_normal");
        double m1 = 0, m2 = 0, m4 = 0;
        for (int64_t i = 0; i < n; i++) m1 += z[i];
        m1 /= n;
        for (int64_t i = 0; i < n; i++) {
            double d = (z[i] - m1) / 2.0;
            m2 += d * d;
            m4 += d * d * d * d;
        }
        m2 /= n;
        m4 /= n;
        CHECK(fabs(m1 - 0.5) < 0.02 && fabs(m2 - 1) < 0.02 && fabs(m4 - 3) < 0.1, "fill_normal moments: mean %g var %g kurtosis %g",
              m1, m2, m4);
        glm_be_fill_normal(be, z2, GLM_DT_F32, n, 0.5f, 2.0f, 7, 1);
        CHECK(memcmp(z, z2, n * 4) == 0, "fill_normal is reproducible");
        glm_be_fill_normal(be, z2, GLM_DT_F32, n, 0.5f, 2.0f, 7, 2);
        CHECK(memcmp(z, z2, n * 4) != 0, "fill_normal: another stream, other numbers");
        free(z);
        free(z2);
    }

    float table[12];
    for (int i = 0; i < 12; i++) table[i] = (float)i + 0.5f;
    uint32_t ids[3] = {2, 0, 3};
    float out[9];
    CHECK(glm_be_embedding(be, out, table, ids, 3, 3, 4) == GLM_OK && out[0] == 6.5f && out[3] == 0.5f && out[8] == 11.5f, "embedding");
    ids[1] = 4;
    CHECK(glm_be_embedding(be, out, table, ids, 3, 3, 4) == GLM_ERR_ARG, "embedding id >= V is an error");

    /* adamw vs the torch formula, two steps */
    int n = 9;
    float *w = randv(n, 1), *gr = randv(n, 1), *m = calloc(n, 4), *v = calloc(n, 4);
    double *wr = malloc(n * 8), *mr = calloc(n, 8), *vr = calloc(n, 8);
    for (int i = 0; i < n; i++) wr[i] = w[i];
    for (int step = 1; step <= 2; step++) {
        glm_be_adamw(be, w, gr, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, step);
        for (int i = 0; i < n; i++) {
            double gg = gr[i] * 0.5;
            wr[i] *= 1 - 1e-2 * 0.1;
            mr[i] = 0.9 * mr[i] + 0.1 * gg;
            vr[i] = 0.999 * vr[i] + 0.001 * gg * gg;
            wr[i] -= 1e-2 / (1 - pow(0.9, step)) * mr[i] / (sqrt(vr[i]) / sqrt(1 - pow(0.999, step)) + 1e-8);
        }
    }
    double maxe = 0;
    for (int i = 0; i < n; i++) maxe = fmax(maxe, fabs(w[i] - wr[i]) / fabs(wr[i]));
    CHECK(maxe < 1e-5, "adamw two steps vs formula: rel err %g", maxe);
    CHECK(glm_be_adamw(be, w, gr, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1, 0) == GLM_ERR_ARG, "adamw step 0 refused");
    CHECK(check_close(glm_be_sumsq(be, x, N * D), dotd(x, x, N * D), 1e-12, 1e-12), "sumsq");

    void *p = NULL;
    CHECK(glm_be_alloc(be, 100, "t", &p) == GLM_OK && p, "alloc");
    glm_be_upload(be, p, x, 100);
    float back[25];
    glm_be_download(be, back, p, 100);
    CHECK(memcmp(back, x, 100) == 0, "upload/download round trip");
    glm_be_zero(be, p, 100);
    glm_be_download(be, back, p, 100);
    CHECK(back[0] == 0 && back[24] == 0, "zero");
    glm_be_free(be, p);
    CHECK(glm_comm_all_reduce(be, x, 4) == GLM_OK && be->world == 1, "all_reduce is a no-op on cpu");
    { /* the communication ops with one rank: local */
        float src[5] = {1, 2, 3, 4, 5}, dst[5] = {0}, keep[5];
        memcpy(keep, src, sizeof keep);
        int req = 7;
        CHECK(glm_comm_all_reduce_start(be, src, 5, &req) == GLM_OK && req < 0 && !memcmp(src, keep, sizeof keep),
              "world 1: all_reduce_start leaves the data and gives no request");
        CHECK(glm_comm_all_gather_start(be, dst, src, sizeof src, &req) == GLM_OK && glm_comm_wait(be, req) == GLM_OK &&
                  !memcmp(dst, src, sizeof src), "world 1: all_gather copies the shard");
        memset(dst, 0, sizeof dst);
        CHECK(glm_comm_sendrecv(be, src, 0, dst, 0, sizeof src) == GLM_OK && !memcmp(dst, src, sizeof src), "world 1: sendrecv to itself");
        CHECK(glm_comm_sendrecv(be, src, 1, dst, 0, 4) == GLM_ERR_ARG, "world 1: rank 1 does not exist");
        double h = 2.5;
        CHECK(glm_comm_all_reduce_host(be, &h, 1) == GLM_OK && h == 2.5 && glm_comm_sync(be) == GLM_OK, "world 1: host sum");
        glm_comm_progress(be);
        glm_comm_abort(be, 1); /* returns with one rank */
        CHECK(glm_comm_wait_ms(be, 1) >= 0, "wait time");
    }
    float bias[3] = {1, 2, 3}, yb[6] = {0};
    glm_be_add_bias(be, yb, 3, bias, 2, 3);
    CHECK(yb[4] == 2 && yb[5] == 3, "add_bias");
    glm_be_axpy(be, yb, yb, 1.0f, 6);
    CHECK(yb[5] == 6, "axpy");
    free(x); free(y); free(y2); free(g); free(gd); free(w); free(gr); free(m); free(v); free(wr); free(mr); free(vr);
}

int main(void) {
    glm_rng_seed(&rng, 7, 0);
    be = glm_backend_cpu();
    test_matmul();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_attention();
    test_cross_entropy();
    test_misc();
    return check_summary("test_cpu_ops");
}
