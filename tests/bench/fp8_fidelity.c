/* tests/bench/fp8_fidelity.c: the FP8 base against the bf16 base on GLM-4-9B-Chat-1M's shape, the
 * same weights and batch (docs/fp8.md "Fidelity"): per GEMM of layer 0 the norm-relative L2 error
 * of the FP8 path's output against the dense path's (forward y = x W^T: query_key_value, dense,
 * dense_h_to_4h, dense_4h_to_h; input gradient dx = dy W with dy ~ N(0, 1)); per layer the error of
 * its output (x + attention + MLP, each layer fed the dense model's input); then the loss of a
 * forward over the whole model (L layers) with each base.
 *
 * The two models are glm_model_create_random_fmt with one seed: the same dense values, one of them
 * quantized to E4M3 with a scale per output channel (kernels/weight.h). The GEMM inputs are what
 * layer 0 feeds them: xn = rmsnorm(x) of x ~ N(0, 1) for query_key_value and dense_h_to_4h, the
 * attention output of those q, k, v (one causal document) for dense, and silu(gate) * up of
 * dense_h_to_4h's output for dense_4h_to_h; all computed on the dense model. The batch: N tokens of
 * one document, ids ~ uniform over V, the second half targets.
 *
 * Usage: fp8_fidelity [--device cpu|cuda] [--tokens N] [--layers L]
 *   (defaults: cpu, 128 tokens, 2 layers, where the FP8 GEMM is its emulation in double,
 *   kernels/cpu/fp8_cpu.c; cuda: 4096 tokens, 40 layers). Prints a Markdown table; exit 1 on an
 * error, 77 when the backend has no FP8 (GLM_FEATURE_FP8). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/formats.h"
#include "kernels/weight.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "tests/check.h"

static const glm_backend *be;

#define TRY(x)                                                                       \
    do {                                                                             \
        if ((x) != GLM_OK) {                                                         \
            fprintf(stderr, "fp8_fidelity: %s: %s\n", #x, glm_errmsg());             \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static void *act(int64_t n) {
    void *p;
    TRY(glm_be_alloc(be, (size_t)n * glm_dtype_size(be->act_dtype), "fp8_fidelity", &p));
    return p;
}
static float *host(const void *p, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)n);
    if (!h) exit(1);
    TRY(glm_be_download_f32(be, h, be->act_dtype, p, n));
    return h;
}
/* ||a - b|| / ||b|| of two device activations of n elements */
static double rel(const void *a, const void *b, int64_t n) {
    float *x = host(a, n), *y = host(b, n);
    const double r = check_rel_l2(x, y, n);
    free(x), free(y);
    return r;
}

/* out = layer l of model m applied to x [N, C] (one causal document, positions 0 .. N-1): the ops
 * the model's forward calls (lora/model/layer.c), with no LoRA; q/k/v in qkv, the rest in the
 * buffers given */
static void layer_out(const glm_model *m, int l, const void *x, void *out, void *xn, float *rstd, void *qkv, void *o,
                      float *lse, void *h, void *a, const int32_t *pos, const int32_t *doc, int64_t N) {
    const glm_config *c = &m->cfg;
    const glm_layer_weights *w = &m->layers[l];
    const int64_t C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    const size_t es = glm_dtype_size(be->act_dtype);
    TRY(glm_be_rmsnorm_fwd(be, xn, rstd, x, w->ln1, N, C, c->eps));
    TRY(glm_base_matmul(be, 0, N, xn, C, &w->wqkv, 0.0f, qkv, Dqkv));
    if (w->bqkv) TRY(glm_be_add_bias(be, qkv, Dqkv, w->bqkv, N, Dqkv));
    TRY(glm_be_rope(be, qkv, Dqkv, pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 0));
    TRY(glm_be_attention_fwd(be, o, qd, lse, qkv, Dqkv, (char *)qkv + qd * es, Dqkv, (char *)qkv + (qd + kd) * es, Dqkv, doc,
                             1, (int)N, c->H, c->Hkv, c->Dh));
    TRY(glm_be_copy(be, out, x, (size_t)(N * C) * es));
    TRY(glm_base_matmul(be, 0, N, o, qd, &w->wo, 1.0f, out, C));
    TRY(glm_be_rmsnorm_fwd(be, xn, rstd, out, w->ln2, N, C, c->eps));
    TRY(glm_base_matmul(be, 0, N, xn, C, &w->w1, 0.0f, h, 2 * F));
    TRY(glm_be_swiglu_fwd(be, a, h, N, F));
    TRY(glm_base_matmul(be, 0, N, a, F, &w->w2, 1.0f, out, C));
}

int main(int argc, char **argv) {
    const char *dev = "cpu";
    int64_t N = 0;
    int L = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) N = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) L = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: fp8_fidelity [--device cpu|cuda] [--tokens N] [--layers L]\n");
            return 2;
        }
    }
    const int cuda = !strcmp(dev, "cuda");
#ifdef GLMTUNE_HAVE_CUDA
    glm_status st = GLM_OK;
    be = cuda ? glm_backend_cuda(0, &st) : glm_backend_cpu();
#else
    be = cuda ? NULL : glm_backend_cpu();
#endif
    if (!be) {
        fprintf(stderr, "fp8_fidelity: no %s backend: %s\n", dev, cuda ? glm_errmsg() : "");
        return 77;
    }
    if (!glm_be_supports(be, GLM_FEATURE_FP8)) {
        printf("SKIPPED: the %s backend has no FP8 base\n", be->name);
        return 77;
    }
    if (N <= 0) N = cuda ? 4096 : 128;
    glm_config cfg;
    TRY(glm_config_preset("glm-4-9b-chat-1m", &cfg));
    cfg.L = L > 0 ? L : cuda ? cfg.L : 2;
    glm_model *md = NULL, *mf = NULL;
    glm_base_format f8 = {.fp8 = 1};
    TRY(glm_model_create_random_fmt(&cfg, be, 1, NULL, &md));
    TRY(glm_model_create_random_fmt(&cfg, be, 1, &f8, &mf));
    const int64_t C = cfg.C, F = cfg.F, qd = (int64_t)cfg.H * cfg.Dh, kd = (int64_t)cfg.Hkv * cfg.Dh, Dqkv = qd + 2 * kd;
    const glm_layer_weights *ld = &md->layers[0], *lf = &mf->layers[0];

    /* layer 0's GEMM inputs, on the dense model */
    void *x = act(N * C), *xn = act(N * C), *qkv = act(N * Dqkv), *o = act(N * qd), *h = act(N * 2 * F), *a = act(N * F);
    float *rstd, *lse;
    int32_t *doc;
    TRY(glm_be_alloc(be, sizeof(float) * (size_t)N, "rstd", (void **)&rstd));
    TRY(glm_be_alloc(be, sizeof(float) * (size_t)N * cfg.H, "lse", (void **)&lse));
    TRY(glm_be_alloc(be, sizeof(int32_t) * (size_t)N, "doc", (void **)&doc));
    int32_t *zeros = calloc((size_t)N, sizeof(int32_t));
    TRY(glm_be_upload(be, doc, zeros, sizeof(int32_t) * (size_t)N));
    TRY(glm_be_fill_normal(be, x, be->act_dtype, N * C, 0.0f, 1.0f, 7, 1));
    TRY(glm_be_rmsnorm_fwd(be, xn, rstd, x, ld->ln1, N, C, cfg.eps));
    TRY(glm_base_matmul(be, 0, N, xn, C, &ld->wqkv, 0.0f, qkv, Dqkv));
    TRY(glm_be_attention_fwd(be, o, qd, lse, qkv, Dqkv, (char *)qkv + qd * glm_dtype_size(be->act_dtype), Dqkv,
                             (char *)qkv + (qd + kd) * glm_dtype_size(be->act_dtype), Dqkv, doc, 1, (int)N, cfg.H, cfg.Hkv,
                             cfg.Dh));
    TRY(glm_base_matmul(be, 0, N, xn, C, &ld->w1, 0.0f, h, 2 * F));
    TRY(glm_be_swiglu_fwd(be, a, h, N, F));

    struct {
        const char *name;
        const glm_weight *wd, *wf;
        const void *in;
        int64_t in_w, out_w;
    } g[4] = {{"query_key_value", &ld->wqkv, &lf->wqkv, xn, C, Dqkv},
              {"dense", &ld->wo, &lf->wo, o, qd, C},
              {"dense_h_to_4h", &ld->w1, &lf->w1, xn, C, 2 * F},
              {"dense_4h_to_h", &ld->w2, &lf->w2, a, F, C}};
    printf("FP8 base (E4M3, a scale per output channel; input gradients %s) against the dense base on the %s backend, "
           "GLM-4-9B-Chat-1M shape, layer 0, %lld tokens\n\n",
           GLM_FP8_GRAD_KIND == GLM_FP8_E5M2 ? "E5M2" : "E4M3", be->name, (long long)N);
    printf("| GEMM | [out, in] | forward y = x W^T: rel L2 | input gradient dx = dy W: rel L2 |\n|---|---|---|---|\n");
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        void *yd = act(N * g[i].out_w), *yf = act(N * g[i].out_w), *dy = act(N * g[i].out_w), *dxd = act(N * g[i].in_w),
             *dxf = act(N * g[i].in_w), *codes_t;
        TRY(glm_base_matmul(be, 0, N, g[i].in, g[i].in_w, g[i].wd, 0.0f, yd, g[i].out_w));
        TRY(glm_base_matmul(be, 0, N, g[i].in, g[i].in_w, g[i].wf, 0.0f, yf, g[i].out_w));
        const double ef = rel(yf, yd, N * g[i].out_w);
        /* the input gradient reads the codes transposed (as the model's backward makes them) */
        glm_weight wt = *g[i].wf;
        TRY(glm_be_alloc(be, (size_t)(wt.rows * wt.cols), "codes transposed", &codes_t));
        TRY(glm_be_fp8_transpose(be, codes_t, wt.data, wt.rows, wt.cols));
        wt.data_t = codes_t;
        TRY(glm_be_fill_normal(be, dy, be->act_dtype, N * g[i].out_w, 0.0f, 1.0f, 8, (uint64_t)i));
        TRY(glm_base_matmul(be, 1, N, dy, g[i].out_w, g[i].wd, 0.0f, dxd, g[i].in_w));
        TRY(glm_base_matmul(be, 1, N, dy, g[i].out_w, &wt, 0.0f, dxf, g[i].in_w));
        const double eb = rel(dxf, dxd, N * g[i].in_w);
        worst = fmax(worst, fmax(ef, eb));
        printf("| %s | [%lld, %lld] | %.3e | %.3e |\n", g[i].name, (long long)g[i].out_w, (long long)g[i].in_w, ef, eb);
        glm_be_free(be, yd), glm_be_free(be, yf), glm_be_free(be, dy), glm_be_free(be, dxd), glm_be_free(be, dxf);
        glm_be_free(be, codes_t);
    }
    printf("\nworst GEMM: %.3e\n", worst);

    /* each layer's output, the layers fed the dense model's output of the layer before (so that
       each row measures one layer's own error): x_{l+1} = layer_l(x_l) with either base */
    int32_t *pos, *hpos = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t t = 0; t < N; t++) hpos[t] = (int32_t)t;
    TRY(glm_be_alloc(be, sizeof(int32_t) * (size_t)N, "pos", (void **)&pos));
    TRY(glm_be_upload(be, pos, hpos, sizeof(int32_t) * (size_t)N));
    void *xo_d = act(N * C), *xo_f = act(N * C);
    double worst_layer = 0;
    int worst_l = 0;
    printf("\n| layer | output x + attention + MLP: rel L2, fp8 vs dense |\n|---|---|\n");
    for (int l = 0; l < cfg.L; l++) {
        layer_out(md, l, x, xo_d, xn, rstd, qkv, o, lse, h, a, pos, doc, N);
        layer_out(mf, l, x, xo_f, xn, rstd, qkv, o, lse, h, a, pos, doc, N);
        const double e = rel(xo_f, xo_d, N * C);
        if (e > worst_layer) worst_layer = e, worst_l = l;
        if (l < 4 || l == cfg.L - 1) printf("| %d | %.3e |\n", l, e);
        TRY(glm_be_copy(be, x, xo_d, (size_t)(N * C) * glm_dtype_size(be->act_dtype)));
    }
    printf("\nworst layer output: %.3e (layer %d; the goal: none worse than 3e-2)\n", worst_layer, worst_l);
    free(hpos);

    /* the loss of one forward through all L layers with each base (LoRA B = 0: the base alone) */
    uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)N);
    uint8_t *tg = malloc((size_t)N);
    int32_t *hp = malloc(sizeof(int32_t) * (size_t)N);
    uint64_t s = 88172645463325252ull;
    for (int64_t t = 0; t < N; t++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        ids[t] = (uint32_t)(s % (uint64_t)cfg.V);
        tg[t] = t >= N / 2;
        hp[t] = (int32_t)t;
    }
    glm_batch b = {1, (int)N, ids, tg, hp, zeros, NULL};
    glm_lora_config lc = {.r = 8, .alpha = 16, .dropout = 0, .use_rslora = false, .targets = "all"};
    glm_lora *lrd = NULL, *lrf = NULL;
    TRY(glm_lora_create(md, &lc, 5, &lrd));
    TRY(glm_lora_create(mf, &lc, 5, &lrf));
    double lsd = 0, lsf = 0;
    int64_t ntd = 0, ntf = 0;
    TRY(glm_model_step(md, lrd, &b, 1.0f, 0, 0, 0, &lsd, &ntd));
    TRY(glm_model_step(mf, lrf, &b, 1.0f, 0, 0, 0, &lsf, &ntf));
    lsd /= (double)ntd, lsf /= (double)ntf;
    printf("\nloss over %lld targets, %d layers: dense %.6f, fp8 %.6f, relative difference %.3e (the goal: within 5e-3)\n",
           (long long)ntd, cfg.L, lsd, lsf, fabs(lsf - lsd) / fabs(lsd));
    glm_lora_free(lrd), glm_lora_free(lrf);
    glm_model_free(md), glm_model_free(mf);
    free(ids), free(tg), free(hp), free(zeros);
    return 0;
}
