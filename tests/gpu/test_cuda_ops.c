/* tests/gpu/test_cuda_ops.c: every op of the CUDA backend against the CPU reference op
 * (DESIGN.md §5) on random inputs (never zeros; values pre-rounded to bf16 so both backends read
 * the same numbers), outputs poisoned with NaN first (or filled with random values where the op
 * accumulates or leaves columns alone), at GLM-4-9B's real shapes (C 4096, H 32, Hkv 4, Dh 128,
 * F 13696, V 151552 for the cross-entropy chunk) and odd ones. Tolerances: tests/gpu/tol.h.
 * Prints a table: op, shape, norm-relative error, tolerance, CUDA time (median of 3, ms).
 * Exits 77 (skipped) when no CUDA device is present. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "common/status.h"
#include "kernels/backend.h"
#include "kernels/comm.h"
#include "kernels/quant4.h"
#include "tests/check.h"
#include "tests/gpu/tol.h"

static const glm_backend *cpu, *gpu;

/* ---- helpers ---- */

static uint64_t rng_state = 0x1234567ULL;
static uint64_t rnd64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double rnd_u(void) { return (double)(rnd64() >> 11) * (1.0 / 9007199254740992.0); }

static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* n random values, uniform in +-scale * [0.05, 1] with random sign (never 0), rounded to bf16 */
static float *randv(int64_t n, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double u = 0.05 + 0.95 * rnd_u();
        p[i] = bf16_round((float)((rnd64() & 1 ? -u : u) * scale));
    }
    return p;
}
/* normal(0, scale), rounded to bf16, zero replaced */
static float *randn(int64_t n, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double u1 = rnd_u() + 1e-12, u2 = rnd_u();
        float v = bf16_round((float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) * scale));
        p[i] = v == 0.0f ? bf16_round(0.01f * scale) : v;
    }
    return p;
}

static void *cbuf(const float *h, int64_t n) {
    void *p;
    if (glm_be_alloc(cpu, (size_t)n * 4, "test", &p)) abort();
    memcpy(p, h, (size_t)n * 4);
    return p;
}
static void *gbuf(glm_dtype dt, const float *h, int64_t n) {
    void *p;
    glm_status st = glm_be_alloc(gpu, (size_t)n * glm_dtype_size(dt), "test", &p);
    if (st) {
        fprintf(stderr, "gpu alloc: %s\n", glm_errmsg());
        exit(1);
    }
    if (h && glm_be_upload_f32(gpu, p, dt, h, n)) {
        fprintf(stderr, "gpu upload: %s\n", glm_errmsg());
        exit(1);
    }
    return p;
}
/* a device buffer filled with NaN */
static void *gpoison(glm_dtype dt, int64_t n) {
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = NAN;
    void *p = gbuf(dt, h, n);
    free(h);
    return p;
}
static void *ibuf(const glm_backend *be, const void *h, int64_t n) {
    void *p;
    if (glm_be_alloc(be, (size_t)n * 4, "test ints", &p) || glm_be_upload(be, p, h, (size_t)n * 4)) {
        fprintf(stderr, "int buffer: %s\n", glm_errmsg());
        exit(1);
    }
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* median of 3 timed runs of `expr` on the GPU (after the checked run, which was the warm-up) */
#define TIMEIT(ms, expr)                                                                       \
    do {                                                                                       \
        double t_[3];                                                                          \
        for (int r_ = 0; r_ < 3; r_++) {                                                       \
            double a_ = now();                                                                 \
            (void)(expr);                                                                      \
            glm_be_sync(gpu);                                                                    \
            t_[r_] = now() - a_;                                                               \
        }                                                                                      \
        double lo_ = fmin(t_[0], fmin(t_[1], t_[2])), hi_ = fmax(t_[0], fmax(t_[1], t_[2]));   \
        ms = (t_[0] + t_[1] + t_[2] - lo_ - hi_) * 1e3;                                        \
    } while (0)

typedef struct row {
    char op[40], shape[64];
    double err, tol, ms;
} row;
static row rows[256];
static int nrows;

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void record(const char *op, const char *shape, double err, double tol, double ms) {
    CHECK(err <= tol, "%s %s: norm-relative error %.3e > %.1e", op, shape, err, tol);
    if (nrows < 256) {
        row *r = &rows[nrows++];
        snprintf(r->op, sizeof r->op, "%s", op);
        snprintf(r->shape, sizeof r->shape, "%s", shape);
        r->err = err;
        r->tol = tol;
        r->ms = ms;
    }
}

/* downloads the GPU buffer (dtype dt, n elements) and compares with the CPU one */
static double cmp(const char *op, const char *shape, glm_dtype dt, const void *g, const float *c, int64_t n, double tol,
                  double ms) {
    float *h = malloc((size_t)n * 4);
    glm_status st = glm_be_download_f32(gpu, h, dt, g, n);
    CHECK(st == GLM_OK, "%s: download: %s", op, glm_errmsg());
    double e = st ? INFINITY : rel_err(h, c, n);
    if (isnan(e)) e = INFINITY;
    record(op, shape, e, tol, ms);
    free(h);
    return e;
}

#define OK(expr) CHECK((expr) == GLM_OK, "%s", glm_errmsg())

/* ---- matmul ---- */

static void t_matmul(int ta, int tb, int64_t M, int64_t N, int64_t K, glm_dtype da, glm_dtype db, glm_dtype dc, float alpha,
                     float beta, int64_t extra_ldc) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, ldc = N + extra_ldc;
    float *A = randv(ar * ac, 1.0f), *B = randv(br * bc, 1.0f), *C = randv(M * ldc, 1.0f);
    float *cA = cbuf(A, ar * ac), *cB = cbuf(B, br * bc), *cC = cbuf(C, M * ldc);
    void *gA = gbuf(da, A, ar * ac), *gB = gbuf(db, B, br * bc);
    /* beta == 0: poison C (where the product lands) to check it is not read; else random C */
    void *gC;
    if (beta == 0.0f && extra_ldc == 0) gC = gpoison(dc, M * ldc);
    else gC = gbuf(dc, C, M * ldc);
    OK(glm_be_matmul(cpu, ta, tb, M, N, K, alpha, cA, GLM_DT_F32, ac, cB, GLM_DT_F32, bc, beta, cC, GLM_DT_F32, ldc));
    OK(glm_be_matmul(gpu, ta, tb, M, N, K, alpha, gA, da, ac, gB, db, bc, beta, gC, dc, ldc));
    const char *dn[2] = {"f32", "bf16"};
    char op[40], shape[64];
    snprintf(op, sizeof op, "matmul %s%s %s.%s>%s", ta ? "T" : "N", tb ? "T" : "N", dn[da], dn[db], dn[dc]);
    snprintf(shape, sizeof shape, "%lldx%lldx%lld b%g ldc+%lld", (long long)M, (long long)N, (long long)K, beta,
             (long long)extra_ldc);
    cmp(op, shape, dc, gC, cC, M * ldc, dc == GLM_DT_BF16 ? TOL_BF16 : TOL_F32, 0);
    double ms = 0;
    TIMEIT(ms, glm_be_matmul(gpu, ta, tb, M, N, K, alpha, gA, da, ac, gB, db, bc, 0.0f, gC, dc, ldc));
    rows[nrows - 1].ms = ms;
    free(A), free(B), free(C);
    glm_be_free(cpu, cA), glm_be_free(cpu, cB), glm_be_free(cpu, cC);
    glm_be_free(gpu, gA), glm_be_free(gpu, gB), glm_be_free(gpu, gC);
}

static void test_matmul(void) {
    const glm_dtype F = GLM_DT_F32, H = GLM_DT_BF16;
    /* the model's base linears: y = x W^T (bf16), dx = dy W, logits chunk */
    t_matmul(0, 1, 256, 5120, 4096, H, H, H, 1.0f, 0.0f, 0);   /* query_key_value */
    t_matmul(0, 1, 256, 4096, 4096, H, H, H, 1.0f, 1.0f, 0);   /* dense, accumulate into residual */
    t_matmul(0, 0, 256, 13696, 4096, H, H, H, 1.0f, 0.0f, 0);  /* dx of dense_4h_to_h */
    t_matmul(0, 1, 64, 151552, 4096, H, H, H, 1.0f, 0.0f, 0);  /* logits chunk */
    t_matmul(0, 1, 77, 333, 129, H, H, F, 0.5f, 0.0f, 0);      /* bf16 x bf16 -> f32 */
    t_matmul(1, 0, 37, 53, 29, H, H, H, 1.0f, 0.0f, 0);        /* odd, transposed A */
    t_matmul(1, 1, 37, 53, 29, F, F, F, 2.0f, 1.0f, 3);        /* odd, both transposed, strided C */
    /* the LoRA branch (r = 8): mixed f32 LoRA weights and bf16 activations */
    t_matmul(0, 1, 256, 8, 4096, H, F, F, 1.0f, 0.0f, 0);      /* u = x A^T */
    t_matmul(0, 1, 256, 4096, 8, F, F, H, 2.0f, 1.0f, 1024);   /* y[:, cols] += s u B^T (column block) */
    t_matmul(1, 0, 5120, 8, 256, H, F, F, 2.0f, 1.0f, 0);      /* dB += s dy^T u */
    t_matmul(0, 0, 256, 8, 13696, H, F, F, 2.0f, 0.0f, 0);     /* du = s dy B */
    t_matmul(1, 0, 8, 4096, 256, F, H, F, 1.0f, 1.0f, 0);      /* dA += du^T x */
    t_matmul(0, 0, 256, 4096, 8, F, F, H, 1.0f, 0.0f, 0);      /* dropout scratch = du A */
    t_matmul(0, 0, 256, 13696, 8, F, F, H, 1.0f, 1.0f, 0);     /* dx += du A */
    t_matmul(0, 0, 31, 17, 5, F, F, F, 1.0f, 0.0f, 0);         /* odd fp32 */
    /* the LoRA branch as the model runs it: bf16 copies of the LoRA weights, bf16 activations */
    t_matmul(0, 1, 256, 8, 4096, H, H, H, 1.0f, 0.0f, 0);      /* u = x A^T */
    t_matmul(0, 1, 256, 24, 4096, H, H, H, 1.0f, 0.0f, 0);     /* u of q/k/v adapters at once */
    t_matmul(0, 1, 256, 4096, 8, H, H, H, 2.0f, 1.0f, 1024);   /* y[:, cols] += s u B^T */
    t_matmul(1, 0, 5120, 8, 256, H, H, F, 2.0f, 1.0f, 0);      /* dB += s dy^T u (fp32 grads) */
    t_matmul(0, 0, 256, 8, 13696, H, H, H, 2.0f, 0.0f, 0);     /* du = s dy B */
    t_matmul(1, 0, 8, 4096, 256, H, H, F, 1.0f, 1.0f, 0);      /* dA += du^T x (fp32 grads) */
    t_matmul(0, 0, 256, 13696, 8, H, H, H, 1.0f, 1.0f, 0);     /* dx += du A */
    /* K == 0: C = beta C */
    t_matmul(0, 0, 13, 7, 0, H, H, H, 1.0f, 0.5f, 0);
}

/* ---- elementwise ---- */

static void test_elementwise(void) {
    char shape[64];
    double ms;
    /* add_bias into a strided matrix (qkv: ldy = D; odd: ldy > D) */
    int64_t cases[2][3] = {{256, 5120, 5120}, {33, 77, 100}};
    for (int c = 0; c < 2; c++) {
        int64_t N = cases[c][0], D = cases[c][1], ldy = cases[c][2];
        float *y = randv(N * ldy, 1.0f), *b = randv(D, 1.0f);
        float *cy = cbuf(y, N * ldy), *cb = cbuf(b, D);
        void *gy = gbuf(GLM_DT_BF16, y, N * ldy), *gb = gbuf(GLM_DT_BF16, b, D);
        OK(glm_be_add_bias(cpu, cy, ldy, cb, N, D));
        OK(glm_be_add_bias(gpu, gy, ldy, gb, N, D));
        snprintf(shape, sizeof shape, "N%lld D%lld ld%lld", (long long)N, (long long)D, (long long)ldy);
        float *h = malloc(N * ldy * 4);
        glm_be_download_f32(gpu, h, GLM_DT_BF16, gy, N * ldy);
        TIMEIT(ms, glm_be_add_bias(gpu, gy, ldy, gb, N, D));
        record("add_bias", shape, rel_err(h, cy, N * ldy), TOL_BF16, ms);
        free(h), free(y), free(b);
        glm_be_free(cpu, cy), glm_be_free(cpu, cb), glm_be_free(gpu, gy), glm_be_free(gpu, gb);
    }
    /* axpy */
    {
        int64_t n = 1000003;
        float *y = randv(n, 1.0f), *x = randv(n, 1.0f);
        float *cy = cbuf(y, n), *cx = cbuf(x, n);
        void *gy = gbuf(GLM_DT_BF16, y, n), *gx = gbuf(GLM_DT_BF16, x, n);
        OK(glm_be_axpy(cpu, cy, cx, -0.75f, n));
        OK(glm_be_axpy(gpu, gy, gx, -0.75f, n));
        float *h = malloc(n * 4);
        glm_be_download_f32(gpu, h, GLM_DT_BF16, gy, n);
        TIMEIT(ms, glm_be_axpy(gpu, gy, gx, -0.75f, n));
        record("axpy", "n1000003", rel_err(h, cy, n), TOL_BF16, ms);
        free(h), free(y), free(x);
        glm_be_free(cpu, cy), glm_be_free(cpu, cx), glm_be_free(gpu, gy), glm_be_free(gpu, gx);
    }
    /* dropout: strided in -> packed out, and in place; the masks must agree exactly */
    {
        int64_t N = 256, D = 4096, ldx = 5120;
        float *x = randv(N * ldx, 1.0f);
        float *cx = cbuf(x, N * ldx), *cy = cbuf(x, N * D);
        void *gx = gbuf(GLM_DT_BF16, x, N * ldx), *gy = gpoison(GLM_DT_BF16, N * D);
        OK(glm_be_dropout(cpu, cy, D, cx, ldx, N, D, 0, 0.1f, 42, 17));
        OK(glm_be_dropout(gpu, gy, D, gx, ldx, N, D, 0, 0.1f, 42, 17));
        TIMEIT(ms, glm_be_dropout(gpu, gy, D, gx, ldx, N, D, 0, 0.1f, 42, 17));
        cmp("dropout p0.1", "N256 D4096 ldx5120", GLM_DT_BF16, gy, cy, N * D, TOL_BF16, ms);
        /* masks: zero pattern identical */
        float *h = malloc(N * D * 4);
        glm_be_download_f32(gpu, h, GLM_DT_BF16, gy, N * D);
        int64_t diff = 0;
        for (int64_t i = 0; i < N * D; i++) diff += (h[i] == 0.0f) != (((float *)cy)[i] == 0.0f);
        CHECK(diff == 0, "dropout: %lld mask elements differ from the CPU's", (long long)diff);
        /* in place, odd */
        OK(glm_be_dropout(cpu, cx, ldx, cx, ldx, 7, 333, 0, 0.5f, 7, 3));
        OK(glm_be_dropout(gpu, gx, ldx, gx, ldx, 7, 333, 0, 0.5f, 7, 3));
        cmp("dropout p0.5 in place", "N7 D333 ld5120", GLM_DT_BF16, gx, cx, N * ldx, TOL_BF16, 0);
        /* p = 0 copies */
        OK(glm_be_dropout(cpu, cy, D, cx, ldx, N, D, 0, 0.0f, 42, 17));
        OK(glm_be_dropout(gpu, gy, D, gx, ldx, N, D, 0, 0.0f, 42, 17));
        cmp("dropout p0", "N256 D4096", GLM_DT_BF16, gy, cy, N * D, 0.0, 0);
        CHECK(glm_be_dropout(gpu, gy, D, gx, ldx, N, D, 0, 1.0f, 1, 1) == GLM_ERR_ARG, "dropout p = 1 is an error");
        free(h), free(x);
        glm_be_free(cpu, cx), glm_be_free(cpu, cy), glm_be_free(gpu, gx), glm_be_free(gpu, gy);
    }
}

/* ---- transformer ops ---- */

static void test_embedding(void) {
    int64_t V = 1000, C = 4096, N = 300;
    float *t = randv(V * C, 1.0f);
    uint32_t *ids = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) ids[i] = (uint32_t)(rnd64() % V);
    float *ct = cbuf(t, V * C), *co = cbuf(t, N * C);
    void *gt = gbuf(GLM_DT_BF16, t, V * C), *go = gpoison(GLM_DT_BF16, N * C);
    uint32_t *ci = ibuf(cpu, ids, N), *gi = ibuf(gpu, ids, N);
    OK(glm_be_embedding(cpu, co, ct, ci, N, C, V));
    OK(glm_be_embedding(gpu, go, gt, gi, N, C, V));
    double ms;
    TIMEIT(ms, glm_be_embedding(gpu, go, gt, gi, N, C, V));
    cmp("embedding", "V1000 C4096 N300", GLM_DT_BF16, go, co, N * C, 0.0, ms);
    ids[123] = (uint32_t)V;
    glm_be_upload(gpu, gi, ids, N * 4);
    glm_status st = glm_be_embedding(gpu, go, gt, gi, N, C, V);
    CHECK(st == GLM_ERR_ARG && strstr(glm_errmsg(), "position 123"), "embedding: id >= V is an error naming it: %s",
          glm_errmsg());
    free(t), free(ids);
    glm_be_free(cpu, ct), glm_be_free(cpu, co), glm_be_free(cpu, ci);
    glm_be_free(gpu, gt), glm_be_free(gpu, go), glm_be_free(gpu, gi);
}

static void test_rmsnorm(int64_t N, int64_t C) {
    char shape[64];
    snprintf(shape, sizeof shape, "N%lld C%lld", (long long)N, (long long)C);
    float eps = 1.5625e-07f;
    float *x = randn(N * C, 2.0f), *w = randv(C, 1.0f), *dy = randn(N * C, 1.0f), *dx = randn(N * C, 1.0f);
    float *cx = cbuf(x, N * C), *cw = cbuf(w, C), *cy = cbuf(x, N * C), *cr = cbuf(x, N), *cdy = cbuf(dy, N * C),
          *cdx = cbuf(dx, N * C);
    void *gx = gbuf(GLM_DT_BF16, x, N * C), *gw = gbuf(GLM_DT_BF16, w, C), *gy = gpoison(GLM_DT_BF16, N * C),
         *gr = gpoison(GLM_DT_F32, N), *gdy = gbuf(GLM_DT_BF16, dy, N * C), *gdx = gbuf(GLM_DT_BF16, dx, N * C);
    OK(glm_be_rmsnorm_fwd(cpu, cy, (float *)cr, cx, cw, N, C, eps));
    OK(glm_be_rmsnorm_fwd(gpu, gy, gr, gx, gw, N, C, eps));
    double ms;
    TIMEIT(ms, glm_be_rmsnorm_fwd(gpu, gy, gr, gx, gw, N, C, eps));
    cmp("rmsnorm_fwd y", shape, GLM_DT_BF16, gy, cy, N * C, TOL_BF16, ms);
    cmp("rmsnorm_fwd rstd", shape, GLM_DT_F32, gr, cr, N, TOL_F32, 0);
    /* the backward uses the CPU's rstd on both sides (the GPU's is within 1e-5) */
    glm_be_upload(gpu, gr, cr, N * 4);
    OK(glm_be_rmsnorm_bwd(cpu, cdx, cdy, cx, cw, (float *)cr, N, C));
    OK(glm_be_rmsnorm_bwd(gpu, gdx, gdy, gx, gw, gr, N, C));
    float *h = malloc(N * C * 4);
    glm_be_download_f32(gpu, h, GLM_DT_BF16, gdx, N * C);
    TIMEIT(ms, glm_be_rmsnorm_bwd(gpu, gdx, gdy, gx, gw, gr, N, C));
    record("rmsnorm_bwd (accumulates)", shape, rel_err(h, cdx, N * C), TOL_BF16, ms);
    free(h), free(x), free(w), free(dy), free(dx);
    glm_be_free(cpu, cx), glm_be_free(cpu, cw), glm_be_free(cpu, cy), glm_be_free(cpu, cr), glm_be_free(cpu, cdy), glm_be_free(cpu, cdx);
    glm_be_free(gpu, gx), glm_be_free(gpu, gw), glm_be_free(gpu, gy), glm_be_free(gpu, gr), glm_be_free(gpu, gdy), glm_be_free(gpu, gdx);
}

static void test_rope(int64_t N, int nheads, int Dh, int rot, int64_t ldx, double base) {
    char shape[64];
    snprintf(shape, sizeof shape, "N%lld heads%d Dh%d rot%d", (long long)N, nheads, Dh, rot);
    float *x = randn(N * ldx, 1.0f), inv[512];
    glm_rope_inv_freq(base, rot, inv);
    int32_t *pos = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) pos[i] = (int32_t)(rnd64() % 8192);
    pos[0] = 0;
    float *cx = cbuf(x, N * ldx), *cinv = cbuf(inv, rot / 2);
    void *gx = gbuf(GLM_DT_BF16, x, N * ldx), *ginv = gbuf(GLM_DT_F32, inv, rot / 2);
    int32_t *cp = ibuf(cpu, pos, N), *gp = ibuf(gpu, pos, N);
    for (int inverse = 0; inverse < 2; inverse++) {
        OK(glm_be_rope(cpu, cx, ldx, cp, N, nheads, Dh, rot, cinv, inverse));
        OK(glm_be_rope(gpu, gx, ldx, gp, N, nheads, Dh, rot, ginv, inverse));
        cmp(inverse ? "rope inverse" : "rope", shape, GLM_DT_BF16, gx, cx, N * ldx, TOL_BF16, 0);
    }
    double ms;
    TIMEIT(ms, glm_be_rope(gpu, gx, ldx, gp, N, nheads, Dh, rot, ginv, 0));
    rows[nrows - 1].ms = ms;
    CHECK(glm_be_rope(gpu, gx, ldx, gp, N, nheads, Dh, 3, ginv, 0) == GLM_ERR_ARG, "rope: odd rot is an error");
    free(x), free(pos);
    glm_be_free(cpu, cx), glm_be_free(cpu, cinv), glm_be_free(cpu, cp);
    glm_be_free(gpu, gx), glm_be_free(gpu, ginv), glm_be_free(gpu, gp);
}

static void test_swiglu(int64_t N, int64_t F) {
    char shape[64];
    snprintf(shape, sizeof shape, "N%lld F%lld", (long long)N, (long long)F);
    float *h = randn(N * 2 * F, 2.0f), *dout = randn(N * F, 1.0f);
    float *ch = cbuf(h, N * 2 * F), *co = cbuf(dout, N * F), *cdo = cbuf(dout, N * F), *cdh = cbuf(h, N * 2 * F);
    void *gh = gbuf(GLM_DT_BF16, h, N * 2 * F), *go = gpoison(GLM_DT_BF16, N * F), *gdo = gbuf(GLM_DT_BF16, dout, N * F),
         *gdh = gpoison(GLM_DT_BF16, N * 2 * F);
    OK(glm_be_swiglu_fwd(cpu, co, ch, N, F));
    OK(glm_be_swiglu_fwd(gpu, go, gh, N, F));
    double ms;
    TIMEIT(ms, glm_be_swiglu_fwd(gpu, go, gh, N, F));
    cmp("swiglu_fwd", shape, GLM_DT_BF16, go, co, N * F, TOL_BF16, ms);
    OK(glm_be_swiglu_bwd(cpu, cdh, cdo, ch, N, F));
    OK(glm_be_swiglu_bwd(gpu, gdh, gdo, gh, N, F));
    TIMEIT(ms, glm_be_swiglu_bwd(gpu, gdh, gdo, gh, N, F));
    cmp("swiglu_bwd", shape, GLM_DT_BF16, gdh, cdh, N * 2 * F, TOL_BF16, ms);
    free(h), free(dout);
    glm_be_free(cpu, ch), glm_be_free(cpu, co), glm_be_free(cpu, cdo), glm_be_free(cpu, cdh);
    glm_be_free(gpu, gh), glm_be_free(gpu, go), glm_be_free(gpu, gdo), glm_be_free(gpu, gdh);
}

/* doc ids of B rows of T tokens: random document lengths (some of 1 token) */
static int32_t *make_docs(int B, int T, int mean_len) {
    int32_t *d = malloc((size_t)B * T * 4);
    for (int b = 0; b < B; b++) {
        int doc = 0, left = 1 + (int)(rnd64() % (2 * mean_len));
        for (int t = 0; t < T; t++) {
            if (left-- == 0) {
                doc++;
                left = (int)(rnd64() % (2 * mean_len));
            }
            d[(int64_t)b * T + t] = doc;
        }
    }
    return d;
}

/* q, k, v as column blocks of one [B*T, (H+2Hkv)Dh] buffer, like the model */
static void test_attention(int B, int T, int H, int Hkv, int Dh, int mean_doc) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d H%d Hkv%d Dh%d", B, T, H, Hkv, Dh);
    int64_t N = (int64_t)B * T, qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd;
    float *qkv = randn(N * ld, 1.0f), *dout = randn(N * qd, 1.0f);
    int32_t *doc = make_docs(B, T, mean_doc);
    float *cqkv = cbuf(qkv, N * ld), *co = cbuf(dout, N * qd), *clse = cbuf(qkv, (int64_t)B * H * T),
          *cdo = cbuf(dout, N * qd), *cd = cbuf(qkv, N * ld);
    void *gqkv = gbuf(GLM_DT_BF16, qkv, N * ld), *go = gpoison(GLM_DT_BF16, N * qd),
         *glse = gpoison(GLM_DT_F32, (int64_t)B * H * T), *gdo = gbuf(GLM_DT_BF16, dout, N * qd),
         *gd = gpoison(GLM_DT_BF16, N * ld);
    int32_t *cdoc = ibuf(cpu, doc, N), *gdoc = ibuf(gpu, doc, N);
    OK(glm_be_attention_fwd(cpu, co, qd, clse, cqkv, ld, cqkv + qd, ld, cqkv + qd + kd, ld, cdoc, B, T, H, Hkv, Dh));
    OK(glm_be_attention_fwd(gpu, go, qd, glse, gqkv, ld, (uint16_t *)gqkv + qd, ld, (uint16_t *)gqkv + qd + kd, ld, gdoc, B, T,
                          H, Hkv, Dh));
    double ms;
    TIMEIT(ms, glm_be_attention_fwd(gpu, go, qd, glse, gqkv, ld, (uint16_t *)gqkv + qd, ld, (uint16_t *)gqkv + qd + kd, ld,
                                  gdoc, B, T, H, Hkv, Dh));
    cmp("attention_fwd out", shape, GLM_DT_BF16, go, co, N * qd, TOL_BF16, ms);
    cmp("attention_fwd lse", shape, GLM_DT_F32, glse, clse, (int64_t)B * H * T, TOL_F32, 0);
    /* the backward from the same (CPU) forward output on both sides, rounded to bf16 */
    for (int64_t i = 0; i < N * qd; i++) co[i] = bf16_round(co[i]);
    glm_be_upload_f32(gpu, go, GLM_DT_BF16, co, N * qd);
    glm_be_upload(gpu, glse, clse, (size_t)B * H * T * 4);
    OK(glm_be_attention_bwd(cpu, cd, cd + qd, cd + qd + kd, cdo, qd, co, clse, cqkv, ld, cqkv + qd, ld, cqkv + qd + kd, ld,
                          cdoc, B, T, H, Hkv, Dh));
    uint16_t *g16 = gd, *q16 = gqkv;
    OK(glm_be_attention_bwd(gpu, g16, g16 + qd, g16 + qd + kd, gdo, qd, go, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld,
                          gdoc, B, T, H, Hkv, Dh));
    TIMEIT(ms, glm_be_attention_bwd(gpu, g16, g16 + qd, g16 + qd + kd, gdo, qd, go, glse, q16, ld, q16 + qd, ld, q16 + qd + kd,
                                  ld, gdoc, B, T, H, Hkv, Dh));
    cmp("attention_bwd dq|dk|dv", shape, GLM_DT_BF16, gd, cd, N * ld, TOL_BF16, ms);
    /* dk and dv alone (smaller than dq, so a wrong dk would hide in the whole-buffer norm) */
    float *h = malloc(N * ld * 4), *a = malloc(N * kd * 4), *c = malloc(N * kd * 4);
    glm_be_download_f32(gpu, h, GLM_DT_BF16, gd, N * ld);
    for (int part = 1; part <= 2; part++) {
        int64_t off = qd + (part - 1) * kd;
        for (int64_t r = 0; r < N; r++)
            for (int64_t j = 0; j < kd; j++) {
                a[r * kd + j] = h[r * ld + off + j];
                c[r * kd + j] = cd[r * ld + off + j];
            }
        record(part == 1 ? "attention_bwd dk" : "attention_bwd dv", shape, rel_err(a, c, N * kd), TOL_BF16, 0);
    }
    free(h), free(a), free(c);
    free(qkv), free(dout), free(doc);
    glm_be_free(cpu, cqkv), glm_be_free(cpu, co), glm_be_free(cpu, clse), glm_be_free(cpu, cdo), glm_be_free(cpu, cd),
        glm_be_free(cpu, cdoc);
    glm_be_free(gpu, gqkv), glm_be_free(gpu, go), glm_be_free(gpu, glse), glm_be_free(gpu, gdo), glm_be_free(gpu, gd),
        glm_be_free(gpu, gdoc);
}

/* T = 8192 (the CPU op would take minutes): the GPU forward at sampled query rows against a
 * double-precision reference computed here; the backward is run and must be finite. */
static void test_attention_long(int T, int H, int Hkv, int Dh) {
    char shape[64];
    snprintf(shape, sizeof shape, "B1 T%d H%d Hkv%d Dh%d (rows)", T, H, Hkv, Dh);
    int64_t N = T, qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd;
    float *qkv = randn(N * ld, 1.0f);
    int32_t *doc = make_docs(1, T, 3000);
    void *gqkv = gbuf(GLM_DT_BF16, qkv, N * ld), *go = gpoison(GLM_DT_BF16, N * qd), *glse = gpoison(GLM_DT_F32, (int64_t)H * T);
    int32_t *gdoc = ibuf(gpu, doc, N);
    uint16_t *q16 = gqkv;
    OK(glm_be_attention_fwd(gpu, go, qd, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld, gdoc, 1, T, H, Hkv, Dh));
    double ms;
    TIMEIT(ms, glm_be_attention_fwd(gpu, go, qd, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld, gdoc, 1, T, H, Hkv, Dh));
    float *o = malloc(N * qd * 4);
    glm_be_download_f32(gpu, o, GLM_DT_BF16, go, N * qd);
    int samples[] = {0, 1, 31, 32, 33, 1000, 2047, 4095, 4096, 6000, T - 33, T - 2, T - 1};
    int ns = sizeof samples / sizeof samples[0];
    float *a = malloc((size_t)ns * qd * 4), *c = malloc((size_t)ns * qd * 4);
    double *s = malloc((size_t)T * 8), scale = 1.0 / sqrt((double)Dh);
    for (int si = 0; si < ns; si++) {
        int i = samples[si];
        for (int h = 0; h < H; h++) {
            int g = h / (H / Hkv);
            const float *qi = qkv + (int64_t)i * ld + h * Dh;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                s[j] = -INFINITY;
                if (doc[j] != doc[i]) continue;
                const float *kj = qkv + (int64_t)j * ld + qd + g * Dh;
                double d = 0;
                for (int cc = 0; cc < Dh; cc++) d += (double)qi[cc] * kj[cc];
                s[j] = d * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int cc = 0; cc < Dh; cc++) c[(int64_t)si * qd + h * Dh + cc] = 0;
            for (int j = 0; j <= i; j++)
                if (s[j] > -INFINITY) sum += exp(s[j] - mx);
            for (int j = 0; j <= i; j++) {
                if (s[j] == -INFINITY) continue;
                double p = exp(s[j] - mx) / sum;
                const float *vj = qkv + (int64_t)j * ld + qd + kd + g * Dh;
                for (int cc = 0; cc < Dh; cc++) c[(int64_t)si * qd + h * Dh + cc] += (float)(p * vj[cc]);
            }
            for (int cc = 0; cc < Dh; cc++) a[(int64_t)si * qd + h * Dh + cc] = o[(int64_t)i * qd + h * Dh + cc];
        }
    }
    record("attention_fwd long", shape, rel_err(a, c, (int64_t)ns * qd), TOL_BF16, ms);
    /* backward: runs, writes every element, finite */
    float *dout = randn(N * qd, 1.0f);
    void *gdo = gbuf(GLM_DT_BF16, dout, N * qd), *gd = gpoison(GLM_DT_BF16, N * ld);
    uint16_t *d16 = gd;
    OK(glm_be_attention_bwd(gpu, d16, d16 + qd, d16 + qd + kd, gdo, qd, go, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld,
                          gdoc, 1, T, H, Hkv, Dh));
    TIMEIT(ms, glm_be_attention_bwd(gpu, d16, d16 + qd, d16 + qd + kd, gdo, qd, go, glse, q16, ld, q16 + qd, ld, q16 + qd + kd,
                                  ld, gdoc, 1, T, H, Hkv, Dh));
    float *hd = malloc(N * ld * 4);
    glm_be_download_f32(gpu, hd, GLM_DT_BF16, gd, N * ld);
    int64_t bad = 0;
    for (int64_t i = 0; i < N * ld; i++) bad += !isfinite(hd[i]);
    CHECK(bad == 0, "attention_bwd T=%d: %lld elements not finite (unwritten?)", T, (long long)bad);
    record("attention_bwd long (finite)", shape, bad ? INFINITY : 0.0, TOL_BF16, ms);
    /* dq at the sampled query rows, dk and dv at the same rows as keys, against float64 sums that
     * use the GPU's forward output and lse (both checked above): P_ij = exp(s_ij - lse_i),
     * dS_ij = P_ij (dO_i . v_j - dO_i . O_i) */
    {
        float *lse = malloc((size_t)H * T * 4), *do16 = malloc(N * qd * 4);
        glm_be_download(gpu, lse, glse, (size_t)H * T * 4);
        glm_be_download_f32(gpu, do16, GLM_DT_BF16, gdo, N * qd);
        float *aq = malloc((size_t)ns * (qd + 2 * kd) * 4), *cq = malloc((size_t)ns * (qd + 2 * kd) * 4);
        double *acc = malloc((size_t)(qd + 2 * kd) * 8);
        int64_t w = qd + 2 * kd;
        for (int si = 0; si < ns; si++) {
            int r = samples[si];
            for (int64_t cc = 0; cc < w; cc++) acc[cc] = 0;
            for (int h = 0; h < H; h++) {
                int g = h / (H / Hkv);
                /* as a query: dq_r */
                const float *qi = qkv + (int64_t)r * ld + h * Dh, *doi = do16 + (int64_t)r * qd + h * Dh, *oi = o + (int64_t)r * qd + h * Dh;
                double Di = 0;
                for (int cc = 0; cc < Dh; cc++) Di += (double)doi[cc] * oi[cc];
                for (int j = 0; j <= r; j++) {
                    if (doc[j] != doc[r]) continue;
                    const float *kj = qkv + (int64_t)j * ld + qd + g * Dh, *vj = kj + kd;
                    double sdot = 0, dp = 0;
                    for (int cc = 0; cc < Dh; cc++) sdot += (double)qi[cc] * kj[cc], dp += (double)doi[cc] * vj[cc];
                    double p = exp(sdot * scale - lse[(int64_t)h * T + r]), ds = p * (dp - Di);
                    for (int cc = 0; cc < Dh; cc++) acc[h * Dh + cc] += ds * scale * kj[cc];
                }
                /* as a key: dk_r, dv_r summed over the group's heads */
                const float *kr = qkv + (int64_t)r * ld + qd + g * Dh, *vr = kr + kd;
                for (int i = r; i < T && doc[i] == doc[r]; i++) {
                    const float *qq = qkv + (int64_t)i * ld + h * Dh, *dd = do16 + (int64_t)i * qd + h * Dh, *oo = o + (int64_t)i * qd + h * Dh;
                    double sdot = 0, dp = 0, Dq = 0;
                    for (int cc = 0; cc < Dh; cc++)
                        sdot += (double)qq[cc] * kr[cc], dp += (double)dd[cc] * vr[cc], Dq += (double)dd[cc] * oo[cc];
                    double p = exp(sdot * scale - lse[(int64_t)h * T + i]), ds = p * (dp - Dq);
                    for (int cc = 0; cc < Dh; cc++) {
                        acc[qd + g * Dh + cc] += ds * scale * qq[cc];
                        acc[qd + kd + g * Dh + cc] += p * dd[cc];
                    }
                }
            }
            for (int64_t cc = 0; cc < w; cc++) {
                cq[(int64_t)si * w + cc] = (float)acc[cc];
                aq[(int64_t)si * w + cc] = hd[(int64_t)r * ld + cc];
            }
        }
        record("attention_bwd long (rows)", shape, rel_err(aq, cq, (int64_t)ns * w), TOL_BF16, 0);
        free(lse), free(do16), free(aq), free(cq), free(acc);
    }
    free(hd), free(dout), free(o), free(a), free(c), free(s), free(qkv), free(doc);
    glm_be_free(gpu, gqkv), glm_be_free(gpu, go), glm_be_free(gpu, glse), glm_be_free(gpu, gdoc), glm_be_free(gpu, gdo),
        glm_be_free(gpu, gd);
}

/* cast f32 <-> bf16 and fill_normal against the CPU op (the same counter-based generator) */
/* The context-parallel ring simulated in one process: a row of T tokens in 2 N chunks of S,
 * "rank" r holding chunks r and 2N-1-r (the zigzag layout), every rank's query chunks against
 * every rank's key chunks in ring order (step s: the keys of rank (r - s) mod N), through
 * attention_block_fwd (merged into f32 o and lse, init on the first block) and
 * attention_block_bwd (added into f32 dq, dk, dv). Pairs with no visible key (keys after the
 * queries, other documents) are called too: the kernels must leave those accumulators alone.
 * Compared with the CPU's whole-row attention_fwd / _bwd. */
/* The ring's block calls in order: for rank r, its query chunks r and 2N-1-r against, at step s,
 * the key chunks of rank (r - s) mod N; init marks each query chunk's first block. Fills
 * (q chunk, k chunk, init) triples; returns their number (8 N^2). */
static int ring_pairs(int N, int (*pairs)[3]) {
    int n = 0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < 2; c++)
            for (int st = 0; st < N; st++) {
                const int src = ((r - st) % N + N) % N;
                for (int kc2 = 0; kc2 < 2; kc2++) {
                    pairs[n][0] = c ? 2 * N - 1 - r : r;
                    pairs[n][1] = kc2 ? 2 * N - 1 - src : src;
                    pairs[n][2] = st == 0 && kc2 == 0;
                    n++;
                }
            }
    return n;
}

static void test_attention_ring(int N, int S, int H, int Hkv, int Dh, int mean_doc) {
    char shape[64];
    const int T = 2 * N * S;
    snprintf(shape, sizeof shape, "ring N%d S%d H%d Hkv%d Dh%d", N, S, H, Hkv, Dh);
    int64_t qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd;
    float *qkv = randn(T * ld, 1.0f), *dout = randn(T * qd, 1.0f);
    int32_t *doc = make_docs(1, T, mean_doc);
    float *cqkv = cbuf(qkv, T * ld), *co = cbuf(dout, T * qd), *clse = cbuf(qkv, (int64_t)H * T), *cdo = cbuf(dout, T * qd),
          *cd = cbuf(qkv, T * ld);
    int32_t *cdoc = ibuf(cpu, doc, T), *gdoc = ibuf(gpu, doc, T);
    OK(glm_be_attention_fwd(cpu, co, qd, clse, cqkv, ld, cqkv + qd, ld, cqkv + qd + kd, ld, cdoc, 1, T, H, Hkv, Dh));
    uint16_t *gqkv = gbuf(GLM_DT_BF16, qkv, T * ld);
    float *fo = gpoison(GLM_DT_F32, T * qd), *fl = gpoison(GLM_DT_F32, (int64_t)H * T);
    CHECK(gpu->acc_dtype == GLM_DT_F32, "CUDA acc_dtype is f32");
    CHECK(glm_be_supports(gpu, GLM_FEATURE_RING_ATTENTION) && glm_be_supports(gpu, GLM_FEATURE_WEIGHT_4BIT) &&
          !glm_be_supports(gpu, GLM_FEATURE_COUNT), "CUDA supports the ring's blocks and the 4-bit format, nothing unknown");
    { /* zero-sized calls, with heads 1 x 1 of dim 1, do nothing and succeed */
        double z = 0;
        int32_t d = 0;
        OK(glm_be_attention_block_fwd(gpu, &z, 1, &z, 1, &z, 1, &z, 1, &z, 1, &d, &d, 0, 0, 0, 0, 1, 1, 1, 1));
        OK(glm_be_attention_block_bwd(gpu, &z, 1, &z, 1, &z, 1, &z, 1, &z, (float *)&z, 1, &z, 1, &z, 1, &z, 1, &d, &d, 0, 0, 0,
                                    0, 1, 1, 1));
    }
    int(*pairs)[3] = malloc(sizeof *pairs * 8 * N * N), np = ring_pairs(N, pairs);
    double t0 = now();
    for (int p = 0; p < np; p++) {
        const int q0 = pairs[p][0] * S, k0 = pairs[p][1] * S;
        OK(glm_be_attention_block_fwd(gpu, fo + (int64_t)q0 * qd, qd, fl + q0, T, gqkv + (int64_t)q0 * ld, ld,
                                    gqkv + (int64_t)k0 * ld + qd, ld, gqkv + (int64_t)k0 * ld + qd + kd, ld, gdoc + q0,
                                    gdoc + k0, q0, k0, S, S, H, Hkv, Dh, pairs[p][2]));
    }
    OK(glm_be_sync(gpu));
    double ms = (now() - t0) * 1e3;
    cmp("attention_block_fwd o (ring)", shape, GLM_DT_F32, fo, co, T * qd, TOL_BF16, ms);
    cmp("attention_block_fwd lse (ring)", shape, GLM_DT_F32, fl, clse, (int64_t)H * T, TOL_F32, 0);
    /* backward from the CPU's forward (out rounded to bf16, its lse), as test_attention does */
    for (int64_t i = 0; i < T * qd; i++) co[i] = bf16_round(co[i]);
    OK(glm_be_attention_bwd(cpu, cd, cd + qd, cd + qd + kd, cdo, qd, co, clse, cqkv, ld, cqkv + qd, ld, cqkv + qd + kd, ld,
                          cdoc, 1, T, H, Hkv, Dh));
    void *go = gbuf(GLM_DT_BF16, co, T * qd), *gdo = gbuf(GLM_DT_BF16, dout, T * qd);
    float *glse = gbuf(GLM_DT_F32, clse, (int64_t)H * T), *fdq = gbuf(GLM_DT_F32, NULL, T * qd),
          *fdk = gbuf(GLM_DT_F32, NULL, T * kd), *fdv = gbuf(GLM_DT_F32, NULL, T * kd);
    OK(glm_be_zero(gpu, fdq, (size_t)T * qd * 4));
    OK(glm_be_zero(gpu, fdk, (size_t)T * kd * 4));
    OK(glm_be_zero(gpu, fdv, (size_t)T * kd * 4));
    t0 = now();
    for (int p = 0; p < np; p++) {
        const int q0 = pairs[p][0] * S, k0 = pairs[p][1] * S;
        OK(glm_be_attention_block_bwd(gpu, fdq + (int64_t)q0 * qd, qd, fdk + (int64_t)k0 * kd, kd, fdv + (int64_t)k0 * kd, kd,
                                    (uint16_t *)gdo + (int64_t)q0 * qd, qd, (uint16_t *)go + (int64_t)q0 * qd, glse + q0, T,
                                    gqkv + (int64_t)q0 * ld, ld, gqkv + (int64_t)k0 * ld + qd, ld,
                                    gqkv + (int64_t)k0 * ld + qd + kd, ld, gdoc + q0, gdoc + k0, q0, k0, S, S, H, Hkv, Dh));
    }
    OK(glm_be_sync(gpu));
    ms = (now() - t0) * 1e3;
    float *h = malloc((size_t)T * qd * 4), *c = malloc((size_t)T * qd * 4);
    const char *names[3] = {"attention_block_bwd dq (ring)", "attention_block_bwd dk (ring)", "attention_block_bwd dv (ring)"};
    float *bufs[3] = {fdq, fdk, fdv};
    for (int part = 0; part < 3; part++) {
        const int64_t w = part ? kd : qd, off = part == 0 ? 0 : part == 1 ? qd : qd + kd;
        OK(glm_be_download_f32(gpu, h, GLM_DT_F32, bufs[part], T * w));
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < w; j++) c[t * w + j] = cd[t * ld + off + j];
        double e = rel_err(h, c, T * w);
        record(names[part], shape, isnan(e) ? INFINITY : e, TOL_BF16, part ? 0 : ms);
    }
    free(h), free(c), free(qkv), free(dout), free(doc), free(pairs);
    glm_be_free(cpu, cqkv), glm_be_free(cpu, co), glm_be_free(cpu, clse), glm_be_free(cpu, cdo), glm_be_free(cpu, cd),
        glm_be_free(cpu, cdoc);
    glm_be_free(gpu, gqkv), glm_be_free(gpu, fo), glm_be_free(gpu, fl), glm_be_free(gpu, go), glm_be_free(gpu, gdo),
        glm_be_free(gpu, glse), glm_be_free(gpu, fdq), glm_be_free(gpu, fdk), glm_be_free(gpu, fdv), glm_be_free(gpu, gdoc);
}

static void test_cast_fill(void) {
    int64_t n = 1000003;
    float *x = randn(n, 3.0f), *c = malloc(n * 4);
    void *g32 = gbuf(GLM_DT_F32, x, n), *g16 = gpoison(GLM_DT_BF16, n), *b32 = gpoison(GLM_DT_F32, n);
    OK(glm_be_cast(gpu, g16, GLM_DT_BF16, g32, GLM_DT_F32, n));
    OK(glm_be_cast(gpu, b32, GLM_DT_F32, g16, GLM_DT_BF16, n));
    for (int64_t i = 0; i < n; i++) c[i] = bf16_round(x[i]);
    cmp("cast f32>bf16>f32", "n1000003", GLM_DT_F32, b32, c, n, 0.0, 0);
    OK(glm_be_fill_normal(cpu, c, GLM_DT_F32, n, 0.25f, 0.5f, 11, 5));
    OK(glm_be_fill_normal(gpu, b32, GLM_DT_F32, n, 0.25f, 0.5f, 11, 5));
    cmp("fill_normal f32", "n1000003", GLM_DT_F32, b32, c, n, TOL_F32, 0);
    OK(glm_be_fill_normal(gpu, g16, GLM_DT_BF16, n, 0.25f, 0.5f, 11, 5));
    cmp("fill_normal bf16", "n1000003", GLM_DT_BF16, g16, c, n, TOL_BF16, 0);
    /* cast_2d (the ring's K|V packing and accumulator stores): a 300 x 700 block of rows with
     * stride 1001 into rows of stride 704, f32 > bf16 and bf16 > f32; the columns past 700 keep
     * their poison-free zeros */
    const int64_t rows = 300, cols = 700, lds = 1001, ldd = 704;
    float *e = calloc((size_t)rows * ldd, 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) e[r * ldd + j] = bf16_round(x[r * lds + j]);
    OK(glm_be_zero(gpu, g16, (size_t)rows * ldd * 2));
    OK(glm_be_cast_2d(gpu, g16, GLM_DT_BF16, ldd, g32, GLM_DT_F32, lds, rows, cols));
    cmp("cast_2d f32>bf16", "300x700 ld 1001>704", GLM_DT_BF16, g16, e, rows * ldd, 0.0, 0);
    OK(glm_be_zero(gpu, b32, (size_t)rows * ldd * 4));
    OK(glm_be_cast_2d(gpu, b32, GLM_DT_F32, ldd, g16, GLM_DT_BF16, ldd, rows, cols));
    cmp("cast_2d bf16>f32", "300x700 ld 704", GLM_DT_F32, b32, e, rows * ldd, 0.0, 0);
    free(e);
    free(x), free(c);
    glm_be_free(gpu, g32), glm_be_free(gpu, g16), glm_be_free(gpu, b32);
}

static void test_cross_entropy(int64_t n, int64_t V) {
    char shape[64];
    snprintf(shape, sizeof shape, "n%lld V%lld", (long long)n, (long long)V);
    float *l = randn(n * V, 3.0f);
    int32_t *lab = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) lab[i] = (i % 5 == 2) ? -1 : (int32_t)(rnd64() % V);
    float *cl = cbuf(l, n * V), *cd = cbuf(l, n * V);
    void *gl = gbuf(GLM_DT_BF16, l, n * V), *gd = gpoison(GLM_DT_BF16, n * V);
    int32_t *clab = ibuf(cpu, lab, n), *glab = ibuf(gpu, lab, n);
    double ls_c = 0, ls_g = 0;
    int64_t nt_c = 0, nt_g = 0;
    float scale = 1.0f / 50;
    OK(glm_be_cross_entropy(cpu, cd, cl, clab, n, V, scale, &ls_c, &nt_c));
    OK(glm_be_cross_entropy(gpu, gd, gl, glab, n, V, scale, &ls_g, &nt_g));
    double ms;
    TIMEIT(ms, glm_be_cross_entropy(gpu, gd, gl, glab, n, V, scale, &ls_g, &nt_g));
    CHECK(nt_c == nt_g, "cross_entropy: %lld targets vs CPU %lld", (long long)nt_g, (long long)nt_c);
    record("cross_entropy loss", shape, fabs(ls_g - ls_c) / fabs(ls_c), TOL_F32, ms);
    cmp("cross_entropy dlogits", shape, GLM_DT_BF16, gd, cd, n * V, TOL_BF16, 0);
    /* in place (the model's use), forward only */
    OK(glm_be_cross_entropy(gpu, gl, gl, glab, n, V, scale, &ls_g, &nt_g));
    cmp("cross_entropy in place", shape, GLM_DT_BF16, gl, cd, n * V, TOL_BF16, 0);
    double ls_f = 0;
    OK(glm_be_upload_f32(gpu, gl, GLM_DT_BF16, l, n * V));
    OK(glm_be_cross_entropy(gpu, NULL, gl, glab, n, V, scale, &ls_f, &nt_g));
    CHECK(ls_f == ls_g, "cross_entropy: forward-only loss %.17g vs %.17g", ls_f, ls_g);
    lab[n - 1] = (int32_t)V;
    glm_be_upload(gpu, glab, lab, n * 4);
    CHECK(glm_be_cross_entropy(gpu, NULL, gl, glab, n, V, scale, &ls_f, &nt_g) == GLM_ERR_ARG, "cross_entropy: label >= V");
    free(l), free(lab);
    glm_be_free(cpu, cl), glm_be_free(cpu, cd), glm_be_free(cpu, clab);
    glm_be_free(gpu, gl), glm_be_free(gpu, gd), glm_be_free(gpu, glab);
}

/* ---- optimizer, reductions, memory ---- */

static void test_adamw_sumsq(void) {
    int64_t n = 100003;
    float *w = randv(n, 0.1f), *g = randv(n, 0.01f), *m = randv(n, 0.001f), *v = randv(n, 1e-4f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *cw = cbuf(w, n), *cg = cbuf(g, n), *cm = cbuf(m, n), *cv = cbuf(v, n);
    float *gw = gbuf(GLM_DT_F32, w, n), *gg = gbuf(GLM_DT_F32, g, n), *gm = gbuf(GLM_DT_F32, m, n), *gv = gbuf(GLM_DT_F32, v, n);
    for (int step = 1; step <= 3; step++) {
        OK(glm_be_adamw(cpu, cw, cg, cm, cv, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, step));
        OK(glm_be_adamw(gpu, gw, gg, gm, gv, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, step));
    }
    cmp("adamw w (3 steps)", "n100003", GLM_DT_F32, gw, cw, n, TOL_F32, 0);
    cmp("adamw m", "n100003", GLM_DT_F32, gm, cm, n, TOL_F32, 0);
    cmp("adamw v", "n100003", GLM_DT_F32, gv, cv, n, TOL_F32, 0);
    double ms;
    TIMEIT(ms, glm_be_adamw(gpu, gw, gg, gm, gv, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 4));
    rows[nrows - 3].ms = ms;
    CHECK(glm_be_adamw(gpu, gw, gg, gm, gv, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 0) == GLM_ERR_ARG, "adamw step 0");
    int64_t sizes[3] = {1, 1000, 4000037};
    for (int k = 0; k < 3; k++) {
        int64_t nn = sizes[k];
        float *x = randv(nn, 1.0f);
        float *gx = gbuf(GLM_DT_F32, x, nn);
        double c = glm_be_sumsq(cpu, x, nn), gres = glm_be_sumsq(gpu, gx, nn);
        char shape[32];
        snprintf(shape, sizeof shape, "n%lld", (long long)nn);
        TIMEIT(ms, glm_be_sumsq(gpu, gx, nn));
        record("sumsq", shape, fabs(gres - c) / c, TOL_SUMSQ, ms);
        free(x);
        glm_be_free(gpu, gx);
    }
    free(w), free(g), free(m), free(v);
    glm_be_free(cpu, cw), glm_be_free(cpu, cg), glm_be_free(cpu, cm), glm_be_free(cpu, cv);
    glm_be_free(gpu, gw), glm_be_free(gpu, gg), glm_be_free(gpu, gm), glm_be_free(gpu, gv);
}

static void test_memory(void) {
    int64_t n = 5000011;
    float *x = malloc(n * 4), *y = malloc(n * 4), *r = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((rnd_u() - 0.5) * 1e3);
    x[0] = 1.00390625f;    /* 1 + 2^-8: a tie, rounds to even (1.0) */
    x[1] = 1.01171875f;    /* 1 + 3 * 2^-8: a tie, rounds up to 1.015625 */
    x[2] = INFINITY;
    /* upload/download raw */
    void *g = gbuf(GLM_DT_F32, NULL, n), *g2 = gbuf(GLM_DT_F32, NULL, n);
    OK(glm_be_upload(gpu, g, x, n * 4));
    OK(glm_be_copy(gpu, g2, g, n * 4));
    OK(glm_be_download(gpu, y, g2, n * 4));
    CHECK(!memcmp(x, y, n * 4), "upload / copy / download are exact");
    OK(glm_be_zero(gpu, g2, n * 4));
    OK(glm_be_download(gpu, y, g2, n * 4));
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++) nz += y[i] != 0.0f;
    CHECK(nz == 0, "zero: %lld nonzero", (long long)nz);
    /* bf16 conversions: round to nearest even on upload, exact on download */
    void *h = gbuf(GLM_DT_BF16, NULL, n);
    OK(glm_be_upload_f32(gpu, h, GLM_DT_BF16, x, n));
    OK(glm_be_download_f32(gpu, y, GLM_DT_BF16, h, n));
    for (int64_t i = 0; i < n; i++) r[i] = bf16_round(x[i]);
    CHECK(!memcmp(r, y, n * 4), "upload_f32 / download_f32 bf16 round to nearest even");
    CHECK(y[0] == 1.0f && y[1] == 1.015625f && isinf(y[2]), "bf16 ties: %g %g %g", y[0], y[1], y[2]);
    OK(glm_be_upload_f32(gpu, g, GLM_DT_F32, x, n));
    OK(glm_be_download_f32(gpu, y, GLM_DT_F32, g, n));
    CHECK(!memcmp(x, y, n * 4), "upload_f32 / download_f32 f32 are exact");
    /* all_reduce with world 1 leaves the data alone */
    OK(glm_comm_all_reduce(gpu, g, n));
    OK(glm_be_download(gpu, y, g, n * 4));
    CHECK(!memcmp(x, y, n * 4), "all_reduce world 1 is a no-op");
    void *z;
    CHECK(glm_be_alloc(gpu, 0, "empty", &z) == GLM_OK && z, "alloc(0) gives a pointer");
    glm_be_free(gpu, z);
    glm_be_free(gpu, NULL);
    CHECK(glm_be_alloc(gpu, (size_t)1 << 50, "a petabyte", &z) == GLM_ERR_NOMEM && strstr(glm_errmsg(), "a petabyte"),
          "alloc failure names the tensor: %s", glm_errmsg());
    OK(glm_be_sync(gpu));
    record("memory (upload/copy/bf16 rne)", "n5000011", 0.0, 0.0, 0);
    free(x), free(y), free(r);
    glm_be_free(gpu, g), glm_be_free(gpu, g2), glm_be_free(gpu, h);
}

/* ---- the 4-bit (QLoRA) format: kernels/cuda/quant4.cu against kernels/cpu/quant4.c ----
 * Not a backend op: its functions are taken from the CUDA module the backend loaded
 * (glm_cuda_module_symbol). GPU quantize vs CPU quantize and GPU dequantize vs
 * CPU dequantize must be bit for bit; the row's error column is the count of differing bytes. */
static struct {
    size_t (*workspace)(int64_t, int);
    glm_status (*quantize)(glm_q4_tensor *, const void *, int, void *, void *);
    glm_status (*dequantize_bf16)(const glm_q4_tensor *, void *, void *);
    glm_status (*sync)(void);
} q4;

/* device buffers for a quantized tensor of n weights */
static glm_q4_tensor q4_gpu_alloc(glm_q4_type type, int64_t n, int dq) {
    glm_q4_sizes s = glm_q4_size(n, dq);
    glm_q4_tensor q = {.type = type, .double_quant = dq, .n = n};
    q.codes = gbuf(GLM_DT_F32, NULL, ((int64_t)s.codes + 3) / 4);
    if (dq) {
        q.absmax_codes = gbuf(GLM_DT_F32, NULL, ((int64_t)s.absmax_codes + 3) / 4);
        q.absmax2 = gbuf(GLM_DT_F32, NULL, s.ngroups);
        q.offset = gbuf(GLM_DT_F32, NULL, 1);
    } else {
        q.absmax = gbuf(GLM_DT_F32, NULL, s.nblocks);
    }
    return q;
}
static void q4_gpu_free(glm_q4_tensor *q) {
    glm_be_free(gpu, q->codes), glm_be_free(gpu, q->absmax), glm_be_free(gpu, q->absmax_codes);
    glm_be_free(gpu, q->absmax2), glm_be_free(gpu, q->offset);
}
/* bytes of `len` at device `d` that differ from host `h` */
static int64_t q4_diff(const void *d, const void *h, size_t len) {
    unsigned char *t = malloc(len ? len : 1);
    OK(glm_be_download(gpu, t, d, len));
    int64_t k = 0;
    for (size_t i = 0; i < len; i++) k += t[i] != ((const unsigned char *)h)[i];
    free(t);
    return k;
}

static void t_quant4(glm_q4_type type, int dq, int64_t rows, int64_t cols, int bf16_in, int timed) {
    int64_t n = rows * cols;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld %s%s", (long long)rows, (long long)cols, bf16_in ? "bf16" : "f32",
             dq ? " dq" : "");
    float *x = randn(n, 0.02f);
    for (int64_t i = 5; i < n; i += 977) x[i] *= 25.0f; /* outliers, as real weights have */
    uint16_t *xh = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) xh[i] = glm_f32_to_bf16(x[i]);
    /* the CPU reference */
    glm_q4_tensor c;
    OK(glm_q4_alloc(&c, type, n, dq));
    OK(bf16_in ? glm_q4_quantize_bf16(&c, xh) : glm_q4_quantize_f32(&c, x));
    uint16_t *ref = malloc((size_t)n * 2);
    OK(glm_q4_dequantize_bf16(&c, ref));
    /* the GPU: quantize from device input, compare every buffer; dequantize, compare */
    void *gx;
    OK(glm_be_alloc(gpu, (size_t)n * (bf16_in ? 2 : 4), "q4 input", &gx));
    OK(glm_be_upload(gpu, gx, bf16_in ? (const void *)xh : (const void *)x, (size_t)n * (bf16_in ? 2 : 4)));
    OK(glm_be_sync(gpu));
    glm_q4_tensor g = q4_gpu_alloc(type, n, dq);
    size_t wsb = q4.workspace(n, dq);
    void *ws = wsb ? gbuf(GLM_DT_F32, NULL, (int64_t)(wsb + 3) / 4) : NULL;
    OK(q4.quantize(&g, gx, bf16_in, ws, NULL));
    OK(q4.sync());
    glm_q4_sizes s = glm_q4_size(n, dq);
    int64_t bad = q4_diff(g.codes, c.codes, s.codes);
    bad += dq ? q4_diff(g.absmax_codes, c.absmax_codes, s.absmax_codes) + q4_diff(g.absmax2, c.absmax2, s.absmax2) +
                    q4_diff(g.offset, c.offset, 4)
              : q4_diff(g.absmax, c.absmax, s.absmax);
    char op[40];
    snprintf(op, sizeof op, "q4 quantize %s (bytes off)", glm_q4_type_name(type));
    record(op, shape, (double)bad, 0.0, 0);
    void *gy = gbuf(GLM_DT_BF16, NULL, n);
    OK(q4.dequantize_bf16(&g, gy, NULL));
    OK(q4.sync());
    int64_t badv = q4_diff(gy, ref, (size_t)n * 2);
    double ms = 0;
    if (timed) {
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double a = now();
            for (int k = 0; k < 10; k++) q4.dequantize_bf16(&g, gy, NULL);
            OK(q4.sync());
            best = fmin(best, (now() - a) / 10);
        }
        ms = best * 1e3;
        double bytes = (double)(s.total + (size_t)n * 2);
        printf("q4 dequantize %s %s: %.3f ms, %.0f GB/s (%.3f bytes read + 2 written a weight)\n",
               glm_q4_type_name(type), shape, ms, bytes / best / 1e9, (double)s.total / n);
    }
    snprintf(op, sizeof op, "q4 dequantize %s (bytes off)", glm_q4_type_name(type));
    record(op, shape, (double)badv, 0.0, ms);
    /* an unaligned output (the per-weight kernel) gives the same values */
    if (!timed && n < 5000000) {
        void *gz = gbuf(GLM_DT_BF16, NULL, n + 1);
        OK(q4.dequantize_bf16(&g, (char *)gz + 2, NULL));
        OK(q4.sync());
        uint16_t *t = malloc((size_t)(n + 1) * 2);
        OK(glm_be_download(gpu, t, gz, (size_t)(n + 1) * 2));
        CHECK(!memcmp(t + 1, ref, (size_t)n * 2), "q4 dequantize, unaligned output: differs");
        free(t);
        glm_be_free(gpu, gz);
    }
    q4_gpu_free(&g);
    glm_be_free(gpu, gx), glm_be_free(gpu, gy), glm_be_free(gpu, ws);
    glm_q4_free(&c);
    free(x), free(xh), free(ref);
}

static void test_quant4(void) {
    *(void **)&q4.workspace = glm_cuda_module_symbol("glm_q4_cuda_quantize_workspace");
    *(void **)&q4.quantize = glm_cuda_module_symbol("glm_q4_cuda_quantize");
    *(void **)&q4.dequantize_bf16 = glm_cuda_module_symbol("glm_q4_cuda_dequantize_bf16");
    *(void **)&q4.sync = glm_cuda_module_symbol("glm_q4_cuda_sync");
    CHECK(q4.workspace && q4.quantize && q4.dequantize_bf16 && q4.sync,
          "the 4-bit kernels in the loaded CUDA module (libglm_cuda.so): symbols missing");
    if (!q4.sync) return;
    t_quant4(GLM_Q4_NF4, 0, 4096, 13696, 1, 1); /* GLM-4-9B's dense_4h_to_h (and dense_h_to_4h^T) */
    t_quant4(GLM_Q4_NF4, 1, 4096, 13696, 1, 1);
    t_quant4(GLM_Q4_FP4, 1, 5120, 4096, 1, 0);  /* query_key_value */
    t_quant4(GLM_Q4_NF4, 1, 1, 1000003, 0, 0);  /* f32 input, odd n, short last block and group */
    t_quant4(GLM_Q4_FP4, 0, 7, 9, 0, 0);        /* one short block */
    t_quant4(GLM_Q4_NF4, 1, 65, 1, 1, 0);       /* a 1-weight last block */
}

/* The memory truth (kernels/backend.h) on a second backend of its own (fresh scratch slots): the
 * process's bytes and overhead are measured; scratch_reserve grows exactly what scratch_need
 * answers, and attention forward and backward, cross-entropy and sumsq at that shape then grow
 * nothing more; the hard cap refuses an allocation past it, naming it, and lets it through once
 * lifted. */
static void test_memcap(void) {
    glm_status st;
    const glm_backend *g = glm_backend_cuda(0, &st);
    CHECK(g != NULL, "a second CUDA backend: %s", glm_errmsg());
    if (!g) return;
    const double M = 1048576.0;
    size_t proc = glm_be_mem_process(g), over = glm_be_mem_overhead(g), fr, tot, use0, use, peak;
    CHECK(proc > 0 && over >= (32u << 20), "the process holds %.1f MiB, overhead %.1f MiB (at least cuBLASLt's 32)",
          proc / M, over / M);
    glm_be_mem_info(g, &fr, &tot, &use0, &peak);
    const int B = 1, T = 4096, H = 32, Hkv = 4, Dh = 128;
    const int64_t N = (int64_t)B * T, qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd, V = 151552, lrows = 64;
    glm_scratch_shape sh = {.B = B, .T = T, .H = H, .Hkv = Hkv, .Dh = Dh, .ldq = ld, .ldk = ld, .ldv = ld, .ldo = qd,
                            .backward = 1, .loss_rows = lrows};
    size_t need = 0, ws = 0;
    CHECK(glm_be_scratch_need(g, &sh, &need, &ws) == GLM_OK, "scratch_need: %s", glm_errmsg());
    CHECK(need >= (size_t)N * H * 4 + (size_t)N * 8 && ws <= need, "scratch for 4096 tokens: %.1f MiB (cuDNN's workspace "
          "%.1f MiB)", need / M, ws / M);
    CHECK(glm_be_scratch_reserve(g, &sh, 1) == GLM_OK, "scratch_reserve: %s", glm_errmsg());
    glm_be_mem_info(g, &fr, &tot, &use, &peak);
    CHECK(use - use0 == need, "reserve grew %.3f MiB, scratch_need said %.3f", (use - use0) / M, need / M);
    /* the ops at that shape */
    float *qkv = randn(N * ld, 1.0f), *lg = randn(lrows * V, 2.0f);
    int32_t *doc = calloc((size_t)N, 4), lab[64];
    for (int i = 0; i < lrows; i++) lab[i] = (int32_t)(rnd64() % V);
    void *gq = gbuf(GLM_DT_BF16, qkv, N * ld), *go = gpoison(GLM_DT_BF16, N * qd), *glse = gpoison(GLM_DT_F32, N * H),
         *gd = gpoison(GLM_DT_BF16, N * ld), *gl = gbuf(GLM_DT_BF16, lg, lrows * V);
    int32_t *gdoc = ibuf(gpu, doc, N), *glab = ibuf(gpu, lab, lrows);
    glm_be_mem_info(g, &fr, &tot, &use0, &peak); /* gbuf allocates on `gpu`: g's own count is unchanged */
    uint16_t *q16 = gq, *d16 = gd;
    OK(glm_be_attention_fwd(g, go, qd, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld, gdoc, B, T, H, Hkv, Dh));
    OK(glm_be_attention_bwd(g, d16, d16 + qd, d16 + qd + kd, go, qd, go, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld, gdoc, B,
                        T, H, Hkv, Dh));
    double ls = 0;
    int64_t nt = 0;
    OK(glm_be_cross_entropy(g, gl, gl, glab, lrows, V, 1.0f, &ls, &nt));
    (void)glm_be_sumsq(g, glse, N * H);
    OK(glm_be_sync(g));
    glm_be_mem_info(g, &fr, &tot, &use, &peak);
    CHECK(use == use0, "attention, cross-entropy and sumsq grew no scratch past the reserve (%.3f MiB more)",
          ((double)use - (double)use0) / M);
    /* the cap */
    proc = glm_be_mem_process(g);
    CHECK(glm_be_set_mem_cap(g, proc + (64u << 20)) == GLM_OK, "a cap 64 MiB above what the process holds: %s", glm_errmsg());
    void *a = NULL, *b = NULL;
    CHECK(glm_be_alloc(g, 16u << 20, "16 MiB under the cap", &a) == GLM_OK, "16 MiB under the cap: %s", glm_errmsg());
    st = glm_be_alloc(g, 256u << 20, "the buffer over the cap", &b);
    CHECK(st == GLM_ERR_NOMEM && strstr(glm_errmsg(), "the buffer over the cap") && strstr(glm_errmsg(), "max-gpu-memory"),
          "256 MiB over the cap refused, named: %s", glm_errmsg());
    CHECK(glm_be_mem_process(g) <= proc + (64u << 20), "the process stayed within the cap (%.1f MiB over what it held)",
          ((double)glm_be_mem_process(g) - (double)proc) / M);
    CHECK(glm_be_set_mem_cap(g, 1u << 20) == GLM_ERR_NOMEM, "a cap below what the process holds: an error");
    OK(glm_be_set_mem_cap(g, 0));
    CHECK(glm_be_alloc(g, 256u << 20, "the same buffer, no cap", &b) == GLM_OK, "no cap: %s", glm_errmsg());
    record("memory cap and scratch_need", "B1 T4096 H32 Hkv4 Dh128", 0.0, 0.0, 0);
    glm_be_free(g, a), glm_be_free(g, b);
    glm_be_free(gpu, gq), glm_be_free(gpu, go), glm_be_free(gpu, glse), glm_be_free(gpu, gd), glm_be_free(gpu, gl), glm_be_free(gpu, gdoc),
        glm_be_free(gpu, glab);
    free(qkv), free(lg), free(doc);
    glm_backend_cuda_close(g);
}

/* test_cuda_ops [attention]: everything, or the attention tests alone (for kernel variants) */
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the log even if the process dies */
    int only_attention = argc > 1 && !strcmp(argv[1], "attention");
    glm_status st;
    if (glm_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    gpu = glm_backend_cuda(0, &st);
    if (!gpu) {
        printf("SKIPPED: CUDA backend: %s\n", glm_errmsg());
        return st == GLM_ERR_UNSUPPORTED ? 77 : 1;
    }
    cpu = glm_backend_cpu();
    CHECK(!strcmp(gpu->name, "cuda") && gpu->act_dtype == GLM_DT_BF16 && gpu->weight_dtype == GLM_DT_BF16 && gpu->world == 1,
          "backend table");
    if (!only_attention) {
        test_memory();
        test_matmul();
        test_elementwise();
        test_embedding();
        test_rmsnorm(256, 4096);
        test_rmsnorm(7, 67);
        test_rope(256, 36, 128, 64, 5120, 1e8); /* GLM-4-9B-1M: H + Hkv = 36 heads rotate in the qkv row */
        test_rope(37, 6, 16, 8, 128, 10000);    /* tiny: Dh 16, rot 8 */
        test_swiglu(256, 13696);
        test_swiglu(5, 77);
    }
    test_attention(1, 512, 32, 4, 128, 150);   /* GLM-4-9B-1M heads, packed docs */
    test_attention(2, 77, 4, 2, 16, 20);       /* tiny fixture heads, odd T */
    test_attention(1, 100, 6, 3, 72, 1000);    /* one document (plain causal), Dh not a power of 2 */
    test_attention(8192, 32, 64, 2, 16, 10);   /* B*H*T = 16.8M rows: more warps than grid_for's capped grid */
    test_attention(1, 1000, 32, 4, 128, 400);  /* real heads, several 64-row tiles, boundaries inside tiles */
    test_attention(3, 200, 8, 2, 64, 50);      /* head dim 64 (the other tile width), several rows */
    test_attention(1, 333, 8, 2, 128, 100000); /* one document, T not a multiple of any tile */
    test_attention(2, 130, 4, 4, 40, 3);       /* Hkv = H, Dh 40 (padded to 64), many tiny documents */
    test_attention_long(8192, 4, 1, 128);
    test_attention_ring(2, 256, 32, 4, 128, 150);  /* GLM-4-9B-1M heads, 2 ranks, documents across chunks */
    test_attention_ring(3, 128, 8, 2, 64, 100000); /* one document, 3 ranks, head dim 64 */
    test_attention_ring(4, 120, 4, 1, 128, 30);    /* chunks not a multiple of any tile, many documents */
    test_attention_ring(3, 25, 4, 2, 16, 20);      /* tiny heads and chunks */
    if (!only_attention) {
        test_cross_entropy(17, 151552); /* GLM-4 vocab */
        test_cross_entropy(9, 1001);
        test_adamw_sumsq();
        test_cast_fill();
        test_quant4();
        test_memcap();
    }
    printf("\n%-30s %-32s %10s %8s %9s\n", "op", "shape", "rel err", "tol", "ms");
    for (int i = 0; i < nrows; i++)
        printf("%-30s %-32s %10.2e %8.0e %9.3f%s\n", rows[i].op, rows[i].shape, rows[i].err, rows[i].tol, rows[i].ms,
               rows[i].err <= rows[i].tol ? "" : "  FAIL");
    printf("attention implementation: %s\n", glm_cuda_attention_impl(gpu));
    glm_backend_cuda_close(gpu);
    return check_summary("test_cuda_ops");
}
