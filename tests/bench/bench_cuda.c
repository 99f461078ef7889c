/* tests/bench/bench_cuda.c: one small benchmark per CUDA kernel family at GLM-4-9B-Chat-1M's
 * shapes (8192 tokens unless stated), against the ceilings measured on the H200 (docs/design.md §6,
 * device notes): cuBLAS bf16 GEMM ~800 TFLOP/s, cuDNN attention 543 TFLOP/s at 8k, HBM ~4 TB/s
 * (bytes read + written). Each row: the median of 7 timed runs after a warm-up (wall clock around
 * a synchronised run; every kernel here runs far longer than a launch). Random inputs, never
 * zeros. Prints a Markdown table. Usage: bench_cuda [family ...] (gemm fp8 attention norm
 * rope elementwise ce optim; default all). Exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/formats.h"

static const glm_backend *g;
static const double GEMM_CEIL = 800e12, ATTN_CEIL = 543e12, HBM_CEIL = 4.0e12;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
#define TIME(ms, expr)                                                                                  \
    do {                                                                                                \
        double t_[7];                                                                                   \
        if ((expr) != GLM_OK) {                                                                         \
            fprintf(stderr, "%s: %s\n", #expr, glm_errmsg());                                           \
            exit(1);                                                                                    \
        }                                                                                               \
        glm_be_sync(g);                                                                                     \
        for (int r_ = 0; r_ < 7; r_++) {                                                                \
            double a_ = now();                                                                          \
            (void)(expr);                                                                               \
            glm_be_sync(g);                                                                                 \
            t_[r_] = now() - a_;                                                                        \
        }                                                                                               \
        qsort(t_, 7, sizeof(double), cmpd);                                                             \
        ms = t_[3] * 1e3;                                                                               \
    } while (0)

static void *rnd(glm_dtype dt, int64_t n, float std, uint64_t stream) {
    void *p;
    if (glm_be_alloc(g, (size_t)n * glm_dtype_size(dt), "bench", &p) || glm_be_fill_normal(g, p, dt, n, 0.0f, std, 42, stream)) {
        fprintf(stderr, "alloc/fill %lld: %s\n", (long long)n, glm_errmsg());
        exit(1);
    }
    return p;
}

static void row_flops(const char *fam, const char *what, double ms, double flop, double ceil) {
    double r = flop / (ms * 1e-3);
    printf("| %s | %s | %.3f | %.1f TFLOP/s | %.0f%% |\n", fam, what, ms, r / 1e12, 100 * r / ceil);
}
static void row_bytes(const char *fam, const char *what, double ms, double bytes) {
    double r = bytes / (ms * 1e-3);
    printf("| %s | %s | %.3f | %.0f GB/s | %.0f%% |\n", fam, what, ms, r / 1e9, 100 * r / HBM_CEIL);
}

static const glm_dtype H = GLM_DT_BF16, F = GLM_DT_F32;
enum { N = 8192, C = 4096, QD = 4096, DQKV = 5120, FF = 13696, V = 151552, R = 8 };

static void bench_gemm(void) {
    struct {
        const char *what;
        int ta, tb;
        int64_t M, Nn, K;
        glm_dtype dc;
        float beta;
    } s[] = {
        {"query_key_value fwd [8192x4096]x[4096x5120]", 0, 1, N, DQKV, C, H, 0},
        {"dense fwd (beta 1 into residual)", 0, 1, N, C, QD, H, 1},
        {"dense_h_to_4h fwd [8192x4096]x[4096x27392]", 0, 1, N, 2 * FF, C, H, 0},
        {"dense_4h_to_h fwd [8192x13696]x[13696x4096]", 0, 1, N, C, FF, H, 1},
        {"dense_h_to_4h input grad", 0, 0, N, C, 2 * FF, H, 0},
        {"dense_4h_to_h input grad", 0, 0, N, FF, C, H, 0},
        {"output layer, 2048-token chunk", 0, 1, 2048, V, C, H, 0},
        {"LoRA u = x A^T (r 8)", 0, 1, N, R, C, H, 0},
        {"LoRA y += s u B^T (out 27392)", 0, 1, N, 2 * FF, R, H, 1},
        {"LoRA dA += du^T x (fp32 grad)", 1, 0, R, C, N, F, 1},
        {"LoRA dB += s dy^T u (fp32 grad, out 27392)", 1, 0, 2 * FF, R, N, F, 1},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        int64_t ar = s[i].ta ? s[i].K : s[i].M, ac = s[i].ta ? s[i].M : s[i].K;
        int64_t br = s[i].tb ? s[i].Nn : s[i].K, bc = s[i].tb ? s[i].K : s[i].Nn;
        void *A = rnd(H, ar * ac, 1, 1), *B = rnd(H, br * bc, 0.02f, 2), *Cm = rnd(s[i].dc, s[i].M * s[i].Nn, 1, 3);
        double ms;
        TIME(ms, glm_be_matmul(g, s[i].ta, s[i].tb, s[i].M, s[i].Nn, s[i].K, 1.0f, A, H, ac, B, H, bc, s[i].beta, Cm, s[i].dc,
                           s[i].Nn));
        double flop = 2.0 * s[i].M * s[i].Nn * s[i].K;
        if (s[i].K <= 64 || s[i].M <= 64 || s[i].Nn <= 64) /* rank-r: memory-bound, count bytes */
            row_bytes("gemm", s[i].what, ms,
                      2.0 * (ar * ac + br * bc) + glm_dtype_size(s[i].dc) * (double)s[i].M * s[i].Nn * (s[i].beta ? 2 : 1));
        else
            row_flops("gemm", s[i].what, ms, flop, GEMM_CEIL);
        glm_be_free(g, A), glm_be_free(g, B), glm_be_free(g, Cm);
    }
}

/* The FP8 base's GEMMs (kernels/cuda/fp8.cu's fp8_matmul: the activation's row scales and codes,
 * then cuBLASLt) at the frozen linears' shapes, beside the bf16 GEMM of the same shape, and
 * their parts: the activation quantization alone and a layer's codes transposed for the input
 * gradients. Forward: y = x W^T with W's row scales (E4M3 x E4M3); input gradient: dx = dy W from
 * the transposed codes, dy's columns times W's row scales, E5M2 (dy's row scales only). FLOP
 * counted as 2 M N K; the ceiling column is against bf16's 800 TFLOP/s (FP8's is about twice it). */
static void bench_fp8(void) {
    struct {
        const char *what;
        int64_t M, Nn, K; /* y [M, Nn] = x [M, K] . W^T, W [Nn, K] */
        int grad;         /* 1: an input gradient: W^T's codes, E5M2 activations, no weight row scales in the GEMM */
    } s[] = {
        {"query_key_value fwd", N, DQKV, C, 0},          {"dense fwd", N, C, QD, 0},
        {"dense_h_to_4h fwd", N, 2 * FF, C, 0},          {"dense_4h_to_h fwd", N, C, FF, 0},
        {"dense_h_to_4h input grad", N, C, 2 * FF, 1},   {"dense_4h_to_h input grad", N, FF, C, 1},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        const int64_t M = s[i].M, Nn = s[i].Nn, K = s[i].K;
        void *x = rnd(H, M * K, 1, 31), *wd = rnd(H, Nn * K, 0.02f, 32), *y = rnd(H, M * Nn, 1, 33);
        glm_weight w = {0};
        w.fmt = GLM_WF_FP8_E4M3, w.rows = Nn, w.cols = K, w.n = Nn * K;
        float *col = NULL;
        if (glm_be_alloc(g, (size_t)(Nn * K), "bench", &w.data) || glm_be_alloc(g, (size_t)Nn * 4, "bench", &w.absmax) ||
            glm_be_alloc(g, (size_t)K * 4, "bench", (void **)&col) || glm_be_weight_quantize(g, &w, wd, H) ||
            glm_be_fill_normal(g, col, F, K, 1.0f, 0.01f, 7, 34)) {
            fprintf(stderr, "fp8 weights: %s\n", glm_errmsg());
            exit(1);
        }
        double ms, flop = 2.0 * M * Nn * K;
        char what[160];
        TIME(ms, glm_be_matmul(g, 0, 1, M, Nn, K, 1.0f, x, H, K, wd, H, K, 0.0f, y, H, Nn));
        snprintf(what, sizeof what, "%s [%lldx%lld]x[%lldx%lld] bf16", s[i].what, (long long)M, (long long)K, (long long)K,
                 (long long)Nn);
        row_flops("fp8", what, ms, flop, GEMM_CEIL);
        if (!s[i].grad) {
            TIME(ms, glm_be_fp8_matmul(g, M, Nn, K, x, K, NULL, GLM_FP8_E4M3, w.data, w.absmax, 0.0f, y, Nn));
            snprintf(what, sizeof what, "%s fp8 (E4M3, row scales)", s[i].what);
        } else { /* W here stands for the transposed codes [Nn, K] of a [K, Nn] weight; col for its row scales */
            TIME(ms, glm_be_fp8_matmul(g, M, Nn, K, x, K, col, GLM_FP8_E5M2, w.data, NULL, 0.0f, y, Nn));
            snprintf(what, sizeof what, "%s fp8 (E5M2 x E4M3, row scales)", s[i].what);
        }
        row_flops("fp8", what, ms, flop, GEMM_CEIL);
        uint8_t *q = NULL;
        float *sc = NULL;
        if (glm_be_alloc(g, (size_t)(M * K), "bench", (void **)&q) || glm_be_alloc(g, 4 * (size_t)M, "bench", (void **)&sc)) exit(1);
        TIME(ms, glm_be_fp8_quantize(g, q, sc, x, K, M, K, s[i].grad ? col : NULL, s[i].grad ? GLM_FP8_E5M2 : GLM_FP8_E4M3));
        snprintf(what, sizeof what, "%s: the activation's row scales and codes alone", s[i].what);
        row_bytes("fp8", what, ms, 2.0 * M * K + (double)M * K); /* bf16 read once, codes written */
        if (s[i].grad) {
            uint8_t *wt = NULL;
            if (glm_be_alloc(g, (size_t)(Nn * K), "bench", (void **)&wt)) exit(1);
            TIME(ms, glm_be_fp8_transpose(g, wt, (const uint8_t *)w.data, Nn, K));
            snprintf(what, sizeof what, "%s: the weight's codes transposed [%lldx%lld]", s[i].what, (long long)Nn, (long long)K);
            row_bytes("fp8", what, ms, 2.0 * Nn * K);
            glm_be_free(g, wt);
        }
        glm_be_free(g, q), glm_be_free(g, sc), glm_be_free(g, col), glm_be_free(g, w.data), glm_be_free(g, w.absmax);
        glm_be_free(g, x), glm_be_free(g, wd), glm_be_free(g, y);
    }
}

/* The context-parallel ring's per-block kernels (attention_block_fwd / _bwd) on the two kinds of
 * block a ring step has: a query chunk of S tokens against the key chunk just before it (all S^2
 * pairs visible) and against itself (the causal diagonal, S^2 / 2 pairs); f32 accumulators, one
 * document. */
static void bench_attention_block(int Hh, int Hkv, int Dh, int64_t ld) {
    const int S = 8192;
    void *qkv = rnd(H, 2 * (int64_t)S * ld, 1, 14), *o = rnd(H, (int64_t)S * QD, 1, 15), *dO = rnd(H, (int64_t)S * QD, 1, 16);
    float *fo, *fl, *fdq, *fdk, *fdv;
    int32_t *doc;
    glm_be_alloc(g, (size_t)S * QD * 4, "o acc", (void **)&fo);
    glm_be_alloc(g, (size_t)Hh * S * 4, "lse acc", (void **)&fl);
    glm_be_alloc(g, (size_t)S * QD * 4, "dq acc", (void **)&fdq);
    glm_be_alloc(g, (size_t)S * Hkv * Dh * 4, "dk acc", (void **)&fdk);
    glm_be_alloc(g, (size_t)S * Hkv * Dh * 4, "dv acc", (void **)&fdv);
    glm_be_alloc(g, (size_t)2 * S * 4, "doc", (void **)&doc);
    glm_be_zero(g, doc, (size_t)2 * S * 4);
    uint16_t *q = (uint16_t *)qkv + (int64_t)S * ld; /* queries: the second chunk */
    for (int diag = 0; diag < 2; diag++) {
        uint16_t *k = (uint16_t *)qkv + (diag ? (int64_t)S * ld : 0) + QD, *v = k + Hkv * Dh;
        const int64_t k0 = diag ? S : 0;
        double fw, bw;
        glm_be_attention_block_fwd(g, fo, QD, fl, S, q, ld, q + QD, ld, q + QD + Hkv * Dh, ld, doc, doc, S, 0, S, S, Hh, Hkv, Dh, 1);
        TIME(fw, glm_be_attention_block_fwd(g, fo, QD, fl, S, q, ld, k, ld, v, ld, doc, doc, S, k0, S, S, Hh, Hkv, Dh, 0));
        TIME(bw, glm_be_attention_block_bwd(g, fdq, QD, fdk, Hkv * Dh, fdv, Hkv * Dh, dO, QD, o, fl, S, q, ld, k, ld, v, ld, doc,
                                        doc, S, k0, S, S, Hh, Hkv, Dh));
        double pairs = diag ? (double)S * S / 2 : (double)S * S, f = 4.0 * pairs * Hh * Dh;
        char w[96];
        snprintf(w, sizeof w, "ring block fwd %dx%d %s", S, S, diag ? "(diagonal)" : "(keys before)");
        row_flops("attention", w, fw, f, ATTN_CEIL);
        snprintf(w, sizeof w, "ring block bwd %dx%d %s", S, S, diag ? "(diagonal)" : "(keys before)");
        row_flops("attention", w, bw, 2 * f, ATTN_CEIL);
    }
    glm_be_free(g, qkv), glm_be_free(g, o), glm_be_free(g, dO), glm_be_free(g, fo), glm_be_free(g, fl), glm_be_free(g, fdq), glm_be_free(g, fdk),
        glm_be_free(g, fdv), glm_be_free(g, doc);
}

static void bench_attention(void) {
    const int Hh = 32, Hkv = 4, Dh = 128;
    int64_t ld = (Hh + 2 * Hkv) * Dh;
    int Ts[] = {8192, 32768};
    for (int k = 0; k < 3; k++) {
        int T = k < 2 ? Ts[k] : 8192, docs = k == 2;
        void *qkv = rnd(H, (int64_t)T * ld, 1, 10), *o = rnd(H, (int64_t)T * QD, 1, 11), *dO = rnd(H, (int64_t)T * QD, 1, 12),
             *d = rnd(H, (int64_t)T * ld, 1, 13);
        float *lse;
        int32_t *doc;
        glm_be_alloc(g, (size_t)Hh * T * 4, "lse", (void **)&lse);
        glm_be_alloc(g, (size_t)T * 4, "doc", (void **)&doc);
        int32_t *hd = malloc((size_t)T * 4);
        for (int t = 0; t < T; t++) hd[t] = docs ? t / 1024 : 0; /* 8 documents of 1024 tokens, or one */
        glm_be_upload(g, doc, hd, (size_t)T * 4);
        uint16_t *q = qkv, *dq = d;
        double fw, bw;
        TIME(fw, glm_be_attention_fwd(g, o, QD, lse, q, ld, q + QD, ld, q + QD + Hkv * Dh, ld, doc, 1, T, Hh, Hkv, Dh));
        TIME(bw, glm_be_attention_bwd(g, dq, dq + QD, dq + QD + Hkv * Dh, dO, QD, o, lse, NULL, q, ld, q + QD, ld, q + QD + Hkv * Dh, ld,
                                  doc, 1, T, Hh, Hkv, Dh));
        /* causal work: forward 2 T^2 H Dh (QK^T and PV over half the pairs), backward twice that;
         * with 8 documents of 1024 the visible pairs are 8 x 1024^2 / 2 */
        double pairs = docs ? 8.0 * 1024 * 1024 / 2 : (double)T * T / 2, f = 4.0 * pairs * Hh * Dh;
        char w[96];
        snprintf(w, sizeof w, "forward T=%d %s", T, docs ? "8 documents" : "one document");
        row_flops("attention", w, fw, f, ATTN_CEIL);
        snprintf(w, sizeof w, "backward T=%d %s", T, docs ? "8 documents" : "one document");
        row_flops("attention", w, bw, 2 * f, ATTN_CEIL);
        snprintf(w, sizeof w, "forward + backward T=%d %s", T, docs ? "8 documents" : "one document");
        row_flops("attention", w, fw + bw, 3 * f, ATTN_CEIL);
        free(hd);
        glm_be_free(g, qkv), glm_be_free(g, o), glm_be_free(g, dO), glm_be_free(g, d), glm_be_free(g, lse), glm_be_free(g, doc);
    }
    bench_attention_block(Hh, Hkv, Dh, ld);
}

static void bench_norm(void) {
    void *x = rnd(H, (int64_t)N * C, 1, 20), *y = rnd(H, (int64_t)N * C, 1, 21), *w = rnd(H, C, 1, 22), *dx = rnd(H, (int64_t)N * C, 1, 23);
    float *rstd;
    glm_be_alloc(g, N * 4, "rstd", (void **)&rstd);
    double ms;
    TIME(ms, glm_be_rmsnorm_fwd(g, y, rstd, x, w, N, C, 1e-6f));
    row_bytes("norm", "rmsnorm fwd [8192x4096]", ms, 4.0 * N * C);
    TIME(ms, glm_be_rmsnorm_bwd(g, dx, y, x, w, rstd, N, C));
    row_bytes("norm", "rmsnorm bwd [8192x4096]", ms, 8.0 * N * C);
    glm_be_free(g, x), glm_be_free(g, y), glm_be_free(g, w), glm_be_free(g, dx), glm_be_free(g, rstd);
}

static void bench_rope(void) {
    void *x = rnd(H, (int64_t)N * DQKV, 1, 30);
    int32_t *pos;
    float *inv;
    glm_be_alloc(g, N * 4, "pos", (void **)&pos);
    glm_be_alloc(g, 32 * 4, "inv", (void **)&inv);
    int32_t *hp = malloc(N * 4);
    for (int i = 0; i < N; i++) hp[i] = i;
    float hi[32];
    glm_rope_inv_freq(1e8, 64, hi);
    glm_be_upload(g, pos, hp, N * 4);
    glm_be_upload(g, inv, hi, sizeof hi);
    double ms;
    TIME(ms, glm_be_rope(g, x, DQKV, pos, N, 36, 128, 64, inv, 0));
    row_bytes("rope", "rope in place, 36 heads x 64 dims [8192 rows]", ms, 4.0 * N * 36 * 64);
    free(hp);
    glm_be_free(g, x), glm_be_free(g, pos), glm_be_free(g, inv);
}

static void bench_elementwise(void) {
    void *h = rnd(H, (int64_t)N * 2 * FF, 1, 40), *a = rnd(H, (int64_t)N * FF, 1, 41), *dh = rnd(H, (int64_t)N * 2 * FF, 1, 42);
    double ms;
    TIME(ms, glm_be_swiglu_fwd(g, a, h, N, FF));
    row_bytes("elementwise", "swiglu fwd [8192x13696]", ms, 6.0 * N * FF);
    TIME(ms, glm_be_swiglu_bwd(g, dh, a, h, N, FF, NULL));
    row_bytes("elementwise", "swiglu bwd [8192x13696]", ms, 10.0 * N * FF);
    { /* with dense_4h_to_h's LoRA input gradient du A (r = 8) added inside, against its own GEMM pass */
        void *du = rnd(H, (int64_t)N * 8, 1, 47), *A = rnd(H, (int64_t)8 * FF, 0.01f, 48);
        glm_rank_term t = {du, 8, A, 8, 1.0f};
        TIME(ms, glm_be_swiglu_bwd(g, dh, a, h, N, FF, &t));
        row_bytes("elementwise", "swiglu bwd + du A (r 8) inside [8192x13696]", ms, 10.0 * N * FF);
        TIME(ms, glm_be_matmul(g, 0, 0, N, FF, 8, 1.0f, du, H, 8, A, H, FF, 1.0f, a, H, FF));
        row_bytes("elementwise", "the GEMM pass it replaces: dout += du A [8192x13696]", ms, 4.0 * N * FF);
        glm_be_free(g, du), glm_be_free(g, A);
    }
    void *y = rnd(H, (int64_t)N * DQKV, 1, 43), *b = rnd(H, DQKV, 1, 44);
    TIME(ms, glm_be_add_bias(g, y, DQKV, b, N, DQKV));
    row_bytes("elementwise", "add_bias [8192x5120]", ms, 4.0 * N * DQKV);
    void *f32 = rnd(F, 21340160, 1, 45), *b16 = rnd(H, 21340160, 1, 46);
    TIME(ms, glm_be_cast(g, b16, H, f32, F, 21340160));
    row_bytes("elementwise", "cast f32 > bf16 (LoRA copies, 21.3M)", ms, 6.0 * 21340160);
    glm_be_free(g, h), glm_be_free(g, a), glm_be_free(g, dh), glm_be_free(g, y), glm_be_free(g, b), glm_be_free(g, f32), glm_be_free(g, b16);
}

static void bench_ce(void) {
    int n = 2048;
    void *l = rnd(H, (int64_t)n * V, 2, 50);
    int32_t *lab;
    glm_be_alloc(g, (size_t)n * 4, "labels", (void **)&lab);
    int32_t *hl = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) hl[i] = (i * 7919) % V;
    glm_be_upload(g, lab, hl, (size_t)n * 4);
    double ms, ls;
    int64_t nt;
    TIME(ms, glm_be_cross_entropy(g, l, l, lab, NULL, NULL, n, V, 1e-3f, &ls, &nt));
    row_bytes("cross-entropy", "loss + dlogits in place [2048x151552]", ms, 6.0 * n * V);
    free(hl);
    glm_be_free(g, l), glm_be_free(g, lab);
}

static void bench_optim(void) {
    int64_t n = 21340160; /* LoRA r=8 on every linear of the 9B model */
    float *w = rnd(F, n, 0.01f, 60), *gr = rnd(F, n, 0.01f, 61), *m = rnd(F, n, 0.01f, 62), *v = rnd(F, n, 0.01f, 63);
    glm_be_zero(g, v, (size_t)n * 4);
    double ms;
    TIME(ms, glm_be_adamw(g, w, gr, m, v, n, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1));
    row_bytes("optimizer", "adamw (21.3M fp32 params)", ms, 28.0 * n);
    glm_be_free(g, w), glm_be_free(g, gr), glm_be_free(g, m), glm_be_free(g, v);
}

int main(int argc, char **argv) {
#ifndef GLMTUNE_HAVE_CUDA
    printf("SKIPPED: built without CUDA\n");
    return 77;
#else
    glm_status st;
    if (glm_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    g = glm_backend_cuda(0, &st);
    if (!g) {
        printf("SKIPPED: %s\n", glm_errmsg());
        return 77;
    }
    printf("bench_cuda on %s; ceilings: GEMM %.0f TFLOP/s, attention %.0f TFLOP/s (cuDNN, 8k), HBM %.0f GB/s\n\n",
           glm_cuda_device_name(0), GEMM_CEIL / 1e12, ATTN_CEIL / 1e12, HBM_CEIL / 1e9);
    printf("| family | what | ms | rate | of ceiling |\n|---|---|---|---|---|\n");
    struct {
        const char *name;
        void (*fn)(void);
    } fams[] = {{"gemm", bench_gemm}, {"fp8", bench_fp8},       {"attention", bench_attention},
                {"norm", bench_norm}, {"rope", bench_rope},       {"elementwise", bench_elementwise},
                {"ce", bench_ce},     {"optim", bench_optim}};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        int on = argc < 2;
        for (int i = 1; i < argc; i++) on |= !strcmp(argv[i], fams[f].name);
        if (on) {
            fams[f].fn();
            fflush(stdout);
        }
    }
    glm_backend_cuda_close(g);
    return 0;
#endif
}
