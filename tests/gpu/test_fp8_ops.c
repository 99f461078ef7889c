/* tests/gpu/test_fp8_ops.c: the FP8 base format on the CUDA backend against the CPU backend (its
 * specification, kernels/cpu/fp8_cpu.c), label "cuda":
 *   - kernels/formats.h's FP8 conversion against the GPU's own (cvt.rn.satfinite through
 *     __nv_cvt_float_to_fp8), every float32 input, both kinds;
 *   - weight_quantize / weight_dequantize of GLM_WF_FP8_E4M3, fp8_quantize (E4M3, E5M2, with and
 *     without the column multiplier), fp8_transpose: bit for bit, on odd shapes and GLM-4-9B's;
 *   - fp8_matmul (the forward with per-row weight scales, beta 0 and 1; the input gradient's form:
 *     E5M2, column multiplier, no row scales) against the CPU's emulation within TOL_FP8_GEMM and an
 *     elementwise bound (tests/gpu/tol.h), in three configurations of the GEMM: as it runs
 *     (outer-vector scales where cuBLASLt has them), in row blocks of 7 (GLMTUNE_FP8_BLOCK_ROWS), and
 *     through the f32 tile (GLMTUNE_FP8_GEMM=tile);
 *   - a forward and backward of the tiny GLM-4 (tests/fixtures/tiny-glm4, both layouts) with the
 *     fp8 base against the CPU backend's fp8 emulation, and both against the CPU's unquantized base.
 * Prints one line per comparison. Exits 77 without a CUDA device or FP8 tensor cores. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/formats.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "tests/check.h"
#include "tests/golden_batch.h"
#include "tests/gpu/tol.h"

static const glm_backend *cpu, *gpu;
static char fixtures[1024];

static uint64_t rng = 0x243f6a8885a308d3ULL;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static float nrand(void) { return (float)(sqrt(-2 * log(1 - urand())) * cos(6.283185307179586 * urand())); }
/* a random value rounded to bf16 (both backends then see the same numbers) */
static float bfrand(float s) { return glm_bf16_to_f32(glm_f32_to_bf16(nrand() * s)); }

/* device buffers */
static void *gpu_bytes(const void *host, size_t n) {
    void *p = NULL;
    CHECK(glm_be_alloc(gpu, n ? n : 1, "test", &p) == GLM_OK, "alloc %zu: %s", n, glm_errmsg());
    if (p && host && n) CHECK(glm_be_upload(gpu, p, host, n) == GLM_OK, "upload: %s", glm_errmsg());
    return p;
}
static void *gpu_bf16(const float *host, int64_t n) {
    void *p = gpu_bytes(NULL, (size_t)n * 2);
    if (p) CHECK(glm_be_upload_f32(gpu, p, GLM_DT_BF16, host, n) == GLM_OK, "upload bf16: %s", glm_errmsg());
    return p;
}
static void download(void *host, const void *dev, size_t n) {
    CHECK(glm_be_download(gpu, host, dev, n) == GLM_OK, "download: %s", glm_errmsg());
}

static void report(const char *what, double e, double tol) {
    printf("%-60s rel err %.3e (tol %.2e)%s\n", what, e, tol, e <= tol ? "" : "  FAIL");
    CHECK(e <= tol, "%s: rel err %.3e > %.2e", what, e, tol);
}

/* ------------------------------------------------------------------------- conversions */

static void test_conversions(void) {
    glm_status (*check)(const glm_backend *, int, uint64_t *, uint32_t *) =
        (glm_status(*)(const glm_backend *, int, uint64_t *, uint32_t *))glm_cuda_module_symbol("glm_cuda_fp8_convert_check");
    CHECK(check != NULL, "the module exports glm_cuda_fp8_convert_check");
    if (!check) return;
    for (int k = 0; k < 2; k++) {
        uint64_t bad = 0;
        uint32_t first = 0;
        CHECK(check(gpu, k, &bad, &first) == GLM_OK, "convert check: %s", glm_errmsg());
        printf("%-60s %llu of 2^32 differ%s\n", k ? "E5M2: glm_f32_to_fp8 vs cvt.rn.satfinite" : "E4M3: glm_f32_to_fp8 vs cvt.rn.satfinite",
               (unsigned long long)bad, bad ? "  FAIL" : "");
        if (bad) {
            float x;
            memcpy(&x, &first, 4);
            printf("  first: %08x (%.9g): glmtune %02x\n", first, x, glm_f32_to_fp8(x, (glm_fp8_kind)k));
        }
        CHECK(bad == 0, "%s: %llu inputs convert otherwise than the GPU's instruction", k ? "E5M2" : "E4M3",
              (unsigned long long)bad);
    }
}

/* ------------------------------------------------------------------------- quantizers */

static void test_weight(int64_t R, int64_t C) {
    float *w = malloc(sizeof(float) * R * C), *scc = malloc(4 * R), *scg = malloc(4 * R);
    uint8_t *qc = malloc(R * C), *qg = malloc(R * C);
    uint16_t *dqc = malloc(2 * R * C), *dqg = malloc(2 * R * C);
    for (int64_t i = 0; i < R * C; i++) w[i] = bfrand(0.02f * (float)(1 + (i / C) % 5));
    if (R > 3)
        for (int64_t c = 0; c < C; c++) w[3 * C + c] = 0; /* an all-zero row */
    glm_weight Wc = {GLM_WF_FP8_E4M3, R, C, R * C, qc, scc, NULL, NULL, 0, NULL, {0}};
    CHECK(glm_be_weight_quantize(cpu, &Wc, w, GLM_DT_F32) == GLM_OK, "cpu: %s", glm_errmsg());
    CHECK(glm_be_weight_dequantize(cpu, dqc, GLM_DT_BF16, &Wc) == GLM_OK, "cpu: %s", glm_errmsg());
    void *src = gpu_bf16(w, R * C);
    glm_weight Wg = {GLM_WF_FP8_E4M3, R, C, R * C, gpu_bytes(NULL, R * C), gpu_bytes(NULL, 4 * R), NULL, NULL, 0, NULL, {0}};
    void *dq = gpu_bytes(NULL, 2 * R * C);
    CHECK(glm_be_weight_quantize(gpu, &Wg, src, GLM_DT_BF16) == GLM_OK, "cuda: %s", glm_errmsg());
    CHECK(glm_be_weight_dequantize(gpu, dq, GLM_DT_BF16, &Wg) == GLM_OK, "cuda: %s", glm_errmsg());
    download(qg, Wg.data, R * C);
    download(scg, Wg.absmax, 4 * R);
    download(dqg, dq, 2 * R * C);
    int same = !memcmp(qc, qg, R * C) && !memcmp(scc, scg, 4 * R), dsame = !memcmp(dqc, dqg, 2 * R * C);
    printf("%-60s %s\n", "weight quantize (per row, E4M3) codes and scales", same ? "bit-exact" : "DIFFER  FAIL");
    CHECK(same, "weight quantize [%lld, %lld]: CUDA's bytes differ from the CPU's", (long long)R, (long long)C);
    CHECK(dsame, "weight dequantize [%lld, %lld]: CUDA's bf16 differ from the CPU's", (long long)R, (long long)C);
    glm_be_free(gpu, src), glm_be_free(gpu, Wg.data), glm_be_free(gpu, Wg.absmax), glm_be_free(gpu, dq);
    free(w), free(scc), free(scg), free(qc), free(qg), free(dqc), free(dqg);
}

/* with_mul: 0 none, 1 column multipliers (16-byte aligned: the 16-byte reads), 2 the same 4 bytes
   past an alignment (the 4-byte reads) */
static void test_act(int64_t M, int64_t K, int64_t ld, int kind, int with_mul) {
    float *x = malloc(sizeof(float) * M * ld), *mul = calloc((size_t)K + 1, 4), *sc = calloc((size_t)M + 1, 4),
          *sg = calloc((size_t)M + 1, 4);
    uint8_t *qc = malloc(M * K), *qg = malloc(M * K);
    for (int64_t i = 0; i < M * ld; i++) x[i] = bfrand(1.0f);
    x[(M / 2) * ld + K / 3] = 37.0f; /* an outlier */
    if (M > 2)
        for (int64_t k = 0; k < K; k++) x[1 * ld + k] = 0.0f; /* a row of zeros: scale 0 */
    const int o = with_mul == 2; /* mul[o .. o + K) */
    for (int64_t k = 0; k < K; k++) mul[o + k] = (float)(1e-3 * (1 + urand()));
    void *xd = gpu_bf16(x, M * ld), *md = gpu_bytes(mul, 4 * (K + 1)), *qd = gpu_bytes(NULL, M * K), *sd = gpu_bytes(NULL, 4 * M + 4);
    CHECK(glm_be_fp8_quantize(cpu, qc, sc, x, ld, M, K, with_mul ? mul + o : NULL, kind) == GLM_OK, "cpu: %s", glm_errmsg());
    CHECK(glm_be_fp8_quantize(gpu, qd, sd, xd, ld, M, K, with_mul ? (float *)md + o : NULL, kind) == GLM_OK, "cuda: %s",
          glm_errmsg());
    download(qg, qd, M * K);
    download(sg, sd, 4 * M);
    int same = !memcmp(qc, qg, M * K) && !memcmp(sc, sg, 4 * M);
    char what[200];
    snprintf(what, sizeof what, "fp8_quantize %s [%lld, %lld] ld %lld%s", kind ? "E5M2" : "E4M3", (long long)M, (long long)K,
             (long long)ld, with_mul == 1 ? " x column scales" : with_mul ? " x column scales (unaligned)" : "");
    printf("%-60s %s\n", what, same ? "bit-exact" : "DIFFER  FAIL");
    CHECK(same, "%s: CUDA's bytes differ from the CPU's", what);
    glm_be_free(gpu, xd), glm_be_free(gpu, md), glm_be_free(gpu, qd), glm_be_free(gpu, sd);
    free(x), free(mul), free(sc), free(sg), free(qc), free(qg);
}

static void test_transpose(int64_t R, int64_t C) {
    uint8_t *a = malloc(R * C), *tc = malloc(R * C), *tg = malloc(R * C);
    for (int64_t i = 0; i < R * C; i++) a[i] = (uint8_t)(urand() * 256);
    void *ad = gpu_bytes(a, R * C), *td = gpu_bytes(NULL, R * C);
    CHECK(glm_be_fp8_transpose(cpu, tc, a, R, C) == GLM_OK, "cpu: %s", glm_errmsg());
    CHECK(glm_be_fp8_transpose(gpu, td, ad, R, C) == GLM_OK, "cuda: %s", glm_errmsg());
    download(tg, td, R * C);
    char what[200];
    snprintf(what, sizeof what, "fp8_transpose [%lld, %lld]", (long long)R, (long long)C);
    printf("%-60s %s\n", what, memcmp(tc, tg, R * C) ? "DIFFER  FAIL" : "bit-exact");
    CHECK(!memcmp(tc, tg, R * C), "%s differs", what);
    glm_be_free(gpu, ad), glm_be_free(gpu, td);
    free(a), free(tc), free(tg);
}

/* ------------------------------------------------------------------------- GEMM */

/* y [M, N] = beta y + x [M, K] W^T (fwd: per-row scales, E4M3) or (x * colscale) quantized to E5M2 times
 * W^T without row scales (bwd: the input gradient's form); CUDA against the CPU emulation */
static void test_gemm(const char *cfg, int64_t M, int64_t N, int64_t K, int bwd, float beta) {
    const int64_t ldx = K + (M % 2 ? 16 : 0), ldy = N + 8;
    float *x = malloc(sizeof(float) * M * ldx), *wf = malloc(sizeof(float) * N * K), *ws = malloc(4 * N),
          *mul = malloc(4 * K), *yc = malloc(sizeof(float) * M * ldy), *yg = malloc(sizeof(float) * M * ldy);
    uint8_t *wq = malloc(N * K), *xq = malloc(M * K);
    for (int64_t i = 0; i < M * ldx; i++) x[i] = bfrand(bwd ? 1e-3f : 1.0f);
    for (int64_t i = 0; i < N * K; i++) wf[i] = bfrand(0.02f);
    for (int64_t k = 0; k < K; k++) mul[k] = (float)(1e-4 * (1 + 3 * urand()));
    for (int64_t i = 0; i < M * ldy; i++) yc[i] = bfrand(0.5f);
    float *y0 = malloc(sizeof(float) * M * ldy); /* y before the GEMM: the product term is c - beta y0 */
    memcpy(y0, yc, sizeof(float) * M * ldy);
    glm_weight W = {GLM_WF_FP8_E4M3, N, K, N * K, wq, ws, NULL, NULL, 0, NULL, {0}};
    CHECK(glm_be_weight_quantize(cpu, &W, wf, GLM_DT_F32) == GLM_OK, "cpu: %s", glm_errmsg());
    const int kind = bwd ? GLM_FP8_GRAD_KIND : GLM_FP8_E4M3;
    void *xd = gpu_bf16(x, M * ldx), *wd = gpu_bytes(wq, N * K), *sd = gpu_bytes(ws, 4 * N), *md = gpu_bytes(mul, 4 * K);
    void *yd = gpu_bf16(yc, M * ldy);
    CHECK(glm_be_fp8_matmul(cpu, M, N, K, x, ldx, bwd ? mul : NULL, kind, wq, bwd ? NULL : ws, beta, yc, ldy) == GLM_OK,
          "cpu: %s", glm_errmsg());
    glm_status st = glm_be_fp8_matmul(gpu, M, N, K, xd, ldx, bwd ? md : NULL, kind, wd, bwd ? NULL : sd, beta, yd, ldy);
    CHECK(st == GLM_OK, "cuda fp8_matmul: %s", glm_errmsg());
    CHECK(glm_be_download_f32(gpu, yg, GLM_DT_BF16, yd, M * ldy) == GLM_OK, "download: %s", glm_errmsg());
    /* the elementwise bound: S = s_x s_w sum_k |X W| (the terms' magnitudes), from the CPU's own codes */
    float *sx = malloc(4 * M); /* the CPU's row scales of x */
    CHECK(glm_be_fp8_quantize(cpu, xq, sx, x, ldx, M, K, bwd ? mul : NULL, kind) == GLM_OK, "cpu: %s", glm_errmsg());
    float *xv = malloc(sizeof(float) * M * K), *wv = malloc(sizeof(float) * N * K);
    for (int64_t i = 0; i < M * K; i++) xv[i] = glm_fp8_to_f32(xq[i], (glm_fp8_kind)kind);
    for (int64_t i = 0; i < N * K; i++) wv[i] = glm_fp8_to_f32(wq[i], GLM_FP8_E4M3);
    double num = 0, den = 0, worst = 0;
    int64_t bad = 0, untouched = 0;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            double S = 0;
            for (int64_t k = 0; k < K; k++) S += fabs((double)xv[m * K + k] * wv[n * K + k]);
            S *= (double)sx[m] * (bwd ? 1.0 : ws[n]);
            double c = yc[m * ldy + n], g = yg[m * ldy + n], d = fabs(g - c);
            /* tests/gpu/tol.h: the output's rounding, the accumulation's, and with beta the product's own rounding
             * before the add (cuBLASLt's outer-vector epilogue) */
            const double p = beta != 0.0f ? fabs(c - beta * y0[m * ldy + n]) : 0.0;
            double bound = TOL_FP8_OUT * (fabs(c) + p) + TOL_FP8_ACC * S + 1e-30;
            if (!(d <= bound)) bad++;
            if (d / bound > worst) worst = d / bound;
            num += d * d;
            den += c * c;
        }
        for (int64_t n = N; n < ldy; n++) untouched += yg[m * ldy + n] != glm_bf16_to_f32(glm_f32_to_bf16(yc[m * ldy + n]));
    }
    char what[240];
    snprintf(what, sizeof what, "fp8_matmul %s %s M=%lld N=%lld K=%lld beta %g", cfg, bwd ? "dgrad (E5M2 x col scales)" : "fwd",
             (long long)M, (long long)N, (long long)K, beta);
    report(what, den > 0 ? sqrt(num / den) : sqrt(num), TOL_FP8_GEMM);
    printf("%-60s worst |cuda - cpu| / bound %.3f, %lld of %lld past it\n", "", worst, (long long)bad, (long long)(M * N));
    CHECK(bad == 0, "%s: %lld outputs beyond the elementwise bound", what, (long long)bad);
    CHECK(untouched == 0, "%s: %lld elements past N were written", what, (long long)untouched);
    glm_be_free(gpu, xd), glm_be_free(gpu, wd), glm_be_free(gpu, sd), glm_be_free(gpu, md), glm_be_free(gpu, yd);
    free(x), free(wf), free(ws), free(mul), free(yc), free(y0), free(yg), free(wq), free(xq), free(xv), free(wv), free(sx);
}

/* expect_outer: every GEMM must have applied its scale vectors inside cuBLASLt (outer vectors;
 * sm_90 with cuBLAS 12.9+), not through the f32 tile: a silent fallback is a 2x slower GEMM */
static void gemm_suite(const char *cfg, int expect_outer) {
    int64_t counts[3] = {0, 0, 0}, after[3];
    void (*cnt)(const glm_backend *, int64_t *) = (void (*)(const glm_backend *, int64_t *))glm_cuda_module_symbol("glm_cuda_fp8_counts");
    if (cnt) cnt(gpu, counts);
    test_gemm(cfg, 33, 64, 48, 0, 0.0f);
    test_gemm(cfg, 33, 64, 48, 0, 1.0f);
    test_gemm(cfg, 33, 48, 64, 1, 0.0f);
    test_gemm(cfg, 40, 160, 64, 0, 1.0f);  /* the tiny fixture's dense_h_to_4h */
    test_gemm(cfg, 17, 5120, 4096, 0, 1.0f); /* GLM-4-9B-Chat-1M's query_key_value */
    test_gemm(cfg, 9, 4096, 13696, 0, 1.0f); /* dense_4h_to_h */
    test_gemm(cfg, 9, 13696, 4096, 1, 0.0f); /* dense_4h_to_h's input gradient */
    test_gemm(cfg, 5, 4096, 27392, 1, 0.0f); /* dense_h_to_4h's input gradient */
    /* the input gradients as the model runs them: onto the LoRA input gradient already in dx */
    test_gemm(cfg, 33, 48, 64, 1, 1.0f);
    test_gemm(cfg, 9, 13696, 4096, 1, 1.0f);
    test_gemm(cfg, 5, 4096, 27392, 1, 1.0f);
    if (cnt) {
        cnt(gpu, after);
        printf("%-60s outer vectors: input gradients %lld, forward %lld; through the f32 tile %lld\n", "FP8 GEMMs run:",
               (long long)(after[0] - counts[0]), (long long)(after[1] - counts[1]), (long long)(after[2] - counts[2]));
        if (expect_outer)
            CHECK(after[0] > counts[0] && after[1] > counts[1] && after[2] == counts[2], "%s: %lld GEMMs went through the "
                  "f32 tile instead of cuBLASLt's outer-vector scales (input gradients %lld, forward %lld there)", cfg,
                  (long long)(after[2] - counts[2]), (long long)(after[0] - counts[0]), (long long)(after[1] - counts[1]));
    }
}

/* ------------------------------------------------------------------------- the tiny model */


typedef struct run {
    double loss;
    float *logits, *grads;
    int64_t n_grads, n_logits;
} run;

/* logits, loss and LoRA grads of the golden batch on backend be with the base in fp8 (or not) */
static int run_model(const glm_backend *be, const char *layout, int fp8, const golden *g, run *r) {
    char dir[1200], adir[1300];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, layout);
    snprintf(adir, sizeof adir, "%s/adapter_init", dir);
    memset(r, 0, sizeof *r);
    glm_base_format f = {0, GLM_WF_NF4, 0, fp8};
    glm_model *m = NULL;
    glm_lora *l = NULL;
    glm_status st = glm_model_load_fmt(dir, be, 0, 0, &f, &m);
    CHECK(st == GLM_OK, "%s %s fp8 %d: load: %s", be->name, layout, fp8, glm_errmsg());
    if (st) return 0;
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    st = glm_lora_create(m, &lc, 1, &l);
    if (!st) st = glm_lora_load_peft(l, adir);
    CHECK(st == GLM_OK, "%s %s: adapter: %s", be->name, layout, glm_errmsg());
    glm_batch b = {g->B, g->T, g->ids, g->targets, g->pos, g->doc, NULL};
    const int64_t N = (int64_t)g->B * g->T, V = m->cfg.V;
    r->logits = malloc(sizeof(float) * N * V);
    r->n_logits = N * V;
    if (!st) st = glm_model_logits(m, l, &b, r->logits);
    CHECK(st == GLM_OK, "%s %s: logits: %s", be->name, layout, glm_errmsg());
    double ls = 0;
    int64_t nt = 0;
    if (!st) st = glm_model_step(m, l, &b, 1.0f / (float)g->n_target, 1, 1, 0, &ls, &nt);
    CHECK(st == GLM_OK, "%s %s: step: %s", be->name, layout, glm_errmsg());
    r->loss = nt ? ls / nt : NAN;
    for (int i = 0; l && i < l->n_params; i++) r->n_grads += l->params[i].numel;
    r->grads = malloc(sizeof(float) * (r->n_grads + 1));
    int64_t off = 0;
    for (int i = 0; !st && i < l->n_params; i++) {
        CHECK(glm_be_download(be, r->grads + off, l->params[i].g, l->params[i].numel * 4) == GLM_OK, "grads: %s", glm_errmsg());
        off += l->params[i].numel;
    }
    glm_lora_free(l);
    glm_model_free(m);
    return st == GLM_OK;
}

static void free_run(run *r) { free(r->logits), free(r->grads); }

static void test_model(const char *layout) {
    golden g;
    if (!golden_load(fixtures, layout, &g)) return;
    run ref = {0}, c8 = {0}, g8 = {0};
    if (run_model(cpu, layout, 0, &g, &ref) && run_model(cpu, layout, 1, &g, &c8) && run_model(gpu, layout, 1, &g, &g8)) {
        const int64_t n_logits = ref.n_logits;
        char what[300];
        const double e_cpu_l = check_rel_l2(c8.logits, ref.logits, n_logits), e_gpu_l = check_rel_l2(g8.logits, ref.logits, n_logits);
        const double e_cpu_g = check_rel_l2(c8.grads, ref.grads, ref.n_grads), e_gpu_g = check_rel_l2(g8.grads, ref.grads, ref.n_grads);
        printf("%s: the fp8 base's own error (CPU emulation vs the CPU's unquantized base): logits %.3e, loss %.6f vs "
               "%.6f, LoRA grads %.3e\n", layout, e_cpu_l, c8.loss, ref.loss, e_cpu_g);
        const double e_cpu_loss = fabs(c8.loss - ref.loss) / fabs(ref.loss), k = TOL_FP8_MODEL_FACTOR;
        /* tests/gpu/tol.h: k x the fp8 base's own error on the CPU + the bf16 run's tolerance */
        snprintf(what, sizeof what, "%s fp8 logits: cuda vs cpu emulation", layout);
        report(what, check_rel_l2(g8.logits, c8.logits, n_logits), k * e_cpu_l + TOL_MODEL_LOGITS);
        snprintf(what, sizeof what, "%s fp8 loss: cuda vs cpu emulation (%.6f vs %.6f)", layout, g8.loss, c8.loss);
        report(what, fabs(g8.loss - c8.loss) / fabs(c8.loss), k * e_cpu_loss + TOL_MODEL_LOSS);
        snprintf(what, sizeof what, "%s fp8 LoRA grads: cuda vs cpu emulation", layout);
        report(what, check_rel_l2(g8.grads, c8.grads, ref.n_grads), k * e_cpu_g + TOL_MODEL_GRAD);
        /* against the unquantized base: the GPU's fp8 run no further from it than k x the emulation */
        snprintf(what, sizeof what, "%s fp8 logits: cuda vs the unquantized base", layout);
        report(what, e_gpu_l, k * e_cpu_l + TOL_MODEL_LOGITS);
        snprintf(what, sizeof what, "%s fp8 LoRA grads: cuda vs the unquantized base", layout);
        report(what, e_gpu_g, k * e_cpu_g + TOL_MODEL_GRAD);
        CHECK(c8.loss != ref.loss, "%s: the emulated fp8 base changes the loss", layout);
    }
    free_run(&ref), free_run(&c8), free_run(&g8);
    golden_free(&g);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *only = argc > 1 ? argv[1] : NULL; /* conversions | quantize | gemm | model */
    if (glm_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    snprintf(fixtures, sizeof fixtures, "%s/tiny-glm4", test_data_dir());
    glm_status st;
    gpu = glm_backend_cuda(0, &st);
    if (!gpu) {
        printf("SKIPPED: CUDA backend: %s\n", glm_errmsg());
        return st == GLM_ERR_UNSUPPORTED ? 77 : 1;
    }
    cpu = glm_backend_cpu();
    if (!glm_be_supports(gpu, GLM_FEATURE_FP8)) {
        printf("SKIPPED: %s has no FP8 tensor cores\n", glm_cuda_device_name(0));
        glm_backend_cuda_close(gpu);
        return 77;
    }
    printf("device: %s\n", glm_cuda_device_name(0));
    if (!only || !strcmp(only, "conversions")) test_conversions();
    if (!only || !strcmp(only, "quantize")) {
        test_weight(37, 80);
        test_weight(5120, 4096);
        test_weight(27392, 4096);
        for (int kind = 0; kind < 2; kind++)
            for (int mul = 0; mul < 3; mul++) {
                test_act(13, 48, 53, kind, mul);
                test_act(8192, 4096, 5120, kind, mul);
            }
        for (int kind = 0; kind < 2; kind++) /* dense_h_to_4h's input gradient: the widest column multipliers */
            for (int mul = 0; mul < 2; mul++) test_act(64, 27392, 27392, kind, mul);
        for (int kind = 0; kind < 2; kind++) {
            test_act(33, 4608, 4608, kind, 1); /* query_key_value's input gradient: 576 chunks of 8, not a power of two */
            test_act(5, 40960, 40968, kind, 1); /* wider than the chunks a block keeps in registers: the rest read twice */
            test_act(7, 13696, 13697, kind, 0); /* a row stride that is not a multiple of 8: the scalar kernel */
        }
        test_transpose(37, 80);    /* not whole 64 x 64 tiles: the byte tiles */
        test_transpose(128, 192);  /* whole 64 x 64 tiles: the word tiles */
        test_transpose(4096, 13696);
        test_transpose(27392, 4096);
    }
    if (!only || !strcmp(only, "gemm")) {
        /* sm_90: cuBLASLt applies the weight's row scales itself (outer vectors); sm_89: the tile */
        int sm = 0;
        const char *dn = strstr(glm_cuda_device_name(0), "(sm_");
        if (dn) sm = atoi(dn + 4);
        gemm_suite("(as it runs)", sm == 90);
        /* the same on fresh backends: accumulation promoted to fp32, row blocks of 7, then the f32 tile */
        glm_backend_cuda_close(gpu);
        setenv("GLMTUNE_FP8_ACCUM", "fp32", 1);
        gpu = glm_backend_cuda(0, &st);
        CHECK(gpu != NULL, "cuda: %s", glm_errmsg());
        if (gpu) gemm_suite("(fp32 accumulation)", sm == 90);
        if (gpu) glm_backend_cuda_close(gpu);
        unsetenv("GLMTUNE_FP8_ACCUM");
        setenv("GLMTUNE_FP8_BLOCK_ROWS", "7", 1);
        gpu = glm_backend_cuda(0, &st);
        CHECK(gpu != NULL, "cuda: %s", glm_errmsg());
        if (gpu) gemm_suite("(blocks of 7 rows)", sm == 90);
        if (gpu) glm_backend_cuda_close(gpu);
        setenv("GLMTUNE_FP8_GEMM", "tile", 1);
        gpu = glm_backend_cuda(0, &st);
        CHECK(gpu != NULL, "cuda: %s", glm_errmsg());
        if (gpu) gemm_suite("(f32 tile, blocks of 7)", 0);
        if (gpu) glm_backend_cuda_close(gpu);
        unsetenv("GLMTUNE_FP8_GEMM");
        unsetenv("GLMTUNE_FP8_BLOCK_ROWS");
        gpu = glm_backend_cuda(0, &st);
        if (!gpu) return check_summary("test_fp8_ops");
    }
    if (!only || !strcmp(only, "model")) {
        test_model("chatglm");
        test_model("hf");
    }
    glm_backend_cuda_close(gpu);
    return check_summary("test_fp8_ops");
}
