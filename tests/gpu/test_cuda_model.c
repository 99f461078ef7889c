/* tests/gpu/test_cuda_model.c: glm_model_step / glm_model_logits on the CUDA backend (bf16
 * weights and activations, fp32 LoRA) against the CPU backend (fp32) on the tiny GLM-4 fixtures
 * ($GLM_FIXTURES/tiny-glm4/{chatglm,hf}: model, PEFT adapter_init, golden batch), both
 * checkpoint layouts: logits, loss and every LoRA grad within the bf16 tolerances of
 * tests/gpu/tol.h; the loss also against the float64 golden; gradient checkpointing gives the
 * same grads; LoRA dropout masks agree with the CPU's; the copies that overlap compute (offload,
 * the next batch's upload) change nothing; the hf layout's 4-bit base (segments) the same bytes
 * as the CPU's. Prints one line per comparison.
 * Exits 77 when there is no CUDA device or no fixtures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "lora/model/config.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "common/safetensors.h"
#include "tests/check.h"
#include "tests/model_opt.h"
#include "tests/golden_batch.h"
#include "tests/gpu/tol.h"

static char fixtures[1024];
static const glm_backend *cpu, *gpu;
static const char *gpu_tag = ""; /* appended to test_9b_shape's rows: which attention the gpu backend runs */

/* all grads of an adapter, as one host array (downloaded from the backend) */
static float *grads(const glm_backend *be, glm_lora *l, int64_t *n_out) {
    int64_t n = 0;
    for (int i = 0; i < l->n_params; i++) n += l->params[i].numel;
    float *g = malloc(n * 4), *p = g;
    for (int i = 0; i < l->n_params; i++) {
        CHECK(glm_be_download(be, p, l->params[i].g, l->params[i].numel * 4) == GLM_OK, "download grad: %s", glm_errmsg());
        p += l->params[i].numel;
    }
    *n_out = n;
    return g;
}

typedef struct side {
    glm_model *m;
    glm_lora *l;
} side;

static int open_side(const glm_backend *be, const char *layout, side *s) {
    char dir[1200], adir[1300];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, layout);
    snprintf(adir, sizeof adir, "%s/adapter_init", dir);
    memset(s, 0, sizeof *s);
    glm_status st = glm_model_load(dir, be, 0, &s->m);
    CHECK(st == GLM_OK, "%s %s: load: %s", be->name, layout, glm_errmsg());
    if (st) return 0;
    MODEL_OPT(s->m, loss_chunk, 7); /* several loss-head chunks */
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    st = glm_lora_create(s->m, &lc, 1, &s->l);
    if (!st) st = glm_lora_load_peft(s->l, adir);
    CHECK(st == GLM_OK, "%s %s: adapter: %s", be->name, layout, glm_errmsg());
    return st == GLM_OK;
}

static void close_side(side *s) {
    glm_lora_free(s->l);
    glm_model_free(s->m);
}

static void report(const char *what, double e, double tol) {
    printf("%-44s rel err %.3e (tol %.0e)%s\n", what, e, tol, e <= tol ? "" : "  FAIL");
    CHECK(e <= tol, "%s: rel err %.3e > %.0e", what, e, tol);
}

static void test_layout(const char *layout) {
    golden g;
    if (!golden_load(fixtures, layout, &g)) return;
    side c, d;
    if (!open_side(cpu, layout, &c) || !open_side(gpu, layout, &d)) return;
    glm_batch b = {g.B, g.T, g.ids, g.targets, g.pos, g.doc, NULL};
    int64_t N = (int64_t)g.B * g.T, V = c.m->cfg.V;
    char what[400];

    /* logits with the adapter */
    float *lc = malloc(N * V * 4), *lg = malloc(N * V * 4);
    CHECK(glm_model_logits(c.m, c.l, &b, lc) == GLM_OK, "cpu logits: %s", glm_errmsg());
    CHECK(glm_model_logits(d.m, d.l, &b, lg) == GLM_OK, "cuda logits: %s", glm_errmsg());
    snprintf(what, sizeof what, "%s logits", layout);
    report(what, check_rel_l2(lg, lc, N * V), TOL_MODEL_LOGITS);

    /* loss and grads */
    float scale = 1.0f / (float)g.n_target;
    double lsc = 0, lsg = 0;
    int64_t ntc = 0, ntg = 0;
    CHECK(glm_model_step(c.m, c.l, &b, scale, 1, 0, 0, &lsc, &ntc) == GLM_OK, "cpu step: %s", glm_errmsg());
    glm_status st = glm_model_step(d.m, d.l, &b, scale, 1, 0, 0, &lsg, &ntg);
    CHECK(st == GLM_OK, "cuda step: %s", glm_errmsg());
    CHECK(ntc == ntg && ntg == g.n_target, "%s: targets cpu %lld cuda %lld golden %lld", layout, (long long)ntc,
          (long long)ntg, (long long)g.n_target);
    snprintf(what, sizeof what, "%s loss vs cpu (%.6f vs %.6f)", layout, lsg / ntg, lsc / ntc);
    report(what, fabs(lsg / ntg - lsc / ntc) / fabs(lsc / ntc), TOL_MODEL_LOSS);
    snprintf(what, sizeof what, "%s loss vs float64 golden (%.6f)", layout, g.loss);
    report(what, fabs(lsg / ntg - g.loss) / fabs(g.loss), TOL_MODEL_LOSS);
    int64_t n;
    float *gc = grads(cpu, c.l, &n), *gg = grads(gpu, d.l, &n);
    snprintf(what, sizeof what, "%s LoRA grads, all %d tensors", layout, c.l->n_params);
    report(what, check_rel_l2(gg, gc, n), TOL_MODEL_GRAD);
    double worst = 0;
    int wi = 0;
    int64_t off = 0;
    for (int i = 0; i < c.l->n_params; i++) {
        double e = check_rel_l2(gg + off, gc + off, c.l->params[i].numel);
        if (e > worst) worst = e, wi = i;
        off += c.l->params[i].numel;
    }
    snprintf(what, sizeof what, "%s worst grad tensor (%s)", layout, strstr(c.l->params[wi].name, "layers") ?
             strstr(c.l->params[wi].name, "layers") : c.l->params[wi].name);
    report(what, worst, TOL_MODEL_GRAD);

    /* gradient checkpointing on CUDA: same grads */
    glm_lora_zero_grads(d.l);
    double ls2 = 0;
    CHECK(glm_model_step(d.m, d.l, &b, scale, 1, 1, 0, &ls2, &ntg) == GLM_OK, "cuda ckpt step: %s", glm_errmsg());
    float *gk = grads(gpu, d.l, &n);
    snprintf(what, sizeof what, "%s cuda checkpointed vs not (%s)", layout, memcmp(gk, gg, n * 4) ? "not bitwise" : "bitwise");
    report(what, check_rel_l2(gk, gg, n), 1e-6);
    CHECK(ls2 == lsg, "%s: checkpointed loss %.17g vs %.17g", layout, ls2, lsg);

    /* the layer inputs offloaded to page-locked host memory (copied out and back on the copy
     * stream): the same loss and grads as checkpointed, bit for bit */
    MODEL_OPT(d.m, offload, 1);
    glm_lora_zero_grads(d.l);
    double lso = 0;
    CHECK(glm_model_step(d.m, d.l, &b, scale, 1, 1, 0, &lso, &ntg) == GLM_OK, "cuda offload step: %s", glm_errmsg());
    CHECK(glm_model_current_plan(d.m) && glm_model_current_plan(d.m)->offload, "%s: the offload plan", layout);
    float *go = grads(gpu, d.l, &n);
    snprintf(what, sizeof what, "%s cuda offloaded vs checkpointed (%s)", layout, memcmp(go, gk, n * 4) ? "not bitwise" : "bitwise");
    report(what, check_rel_l2(go, gk, n), 1e-6);
    CHECK(lso == ls2, "%s: offloaded loss %.17g vs %.17g", layout, lso, ls2);
    free(go);
    MODEL_OPT(d.m, offload, 0);

    /* LoRA dropout: the same masks on both backends */
    c.l->dropout = d.l->dropout = 0.3f;
    glm_lora_zero_grads(c.l);
    glm_lora_zero_grads(d.l);
    CHECK(glm_model_step(c.m, c.l, &b, scale, 1, 0, 42, &lsc, &ntc) == GLM_OK, "cpu dropout step: %s", glm_errmsg());
    CHECK(glm_model_step(d.m, d.l, &b, scale, 1, 1, 42, &lsg, &ntg) == GLM_OK, "cuda dropout step: %s", glm_errmsg());
    float *dc = grads(cpu, c.l, &n), *dg = grads(gpu, d.l, &n);
    snprintf(what, sizeof what, "%s dropout 0.3 loss vs cpu", layout);
    report(what, fabs(lsg - lsc) / fabs(lsc), TOL_MODEL_LOSS);
    snprintf(what, sizeof what, "%s dropout 0.3 grads vs cpu (ckpt on cuda)", layout);
    report(what, check_rel_l2(dg, dc, n), TOL_MODEL_GRAD);

    free(lc), free(lg), free(gc), free(gg), free(gk), free(dc), free(dg);
    close_side(&c);
    close_side(&d);
    golden_free(&g);
}

/* copies n elements of a GPU (bf16) tensor into a CPU (fp32) one */
static void to_cpu(void *c, const void *gsrc, int64_t n) {
    CHECK(glm_be_download_f32(gpu, c, GLM_DT_BF16, gsrc, n) == GLM_OK, "download weights: %s", glm_errmsg());
}

/* GLM-4-9B-Chat-1M's real layer shapes (C 4096, H 32, Hkv 4, Dh 128, F 13696, V 151552) with 2
 * layers: one training step on the GPU against the CPU on the same weights (made on the GPU in
 * bf16, copied to the CPU model): loss and every LoRA grad (lora_B random, so lora_A's grads are
 * not zero), a row of 3 documents with boundaries inside attention tiles; then the GPU's other
 * plans (selective with MLP chunks, full) against its own first result. */
/* A linear matrix of the GPU model into the CPU model's dense one: its bf16 values, or a 4-bit
 * one's dequantized on the GPU (be->weight_dequantize). */
static void mat_to_cpu(glm_weight *c, const glm_weight *g) {
    const int64_t n = g->rows * g->cols;
    if (!glm_wformat_packed(g->fmt)) {
        to_cpu(c->data, g->data, n);
        return;
    }
    void *tmp = NULL;
    CHECK(glm_be_alloc(gpu, (size_t)n * 2, "dequantized", &tmp) == GLM_OK, "alloc: %s", glm_errmsg());
    CHECK(glm_be_weight_dequantize(gpu, tmp, GLM_DT_BF16, g) == GLM_OK, "dequantize: %s", glm_errmsg());
    to_cpu(c->data, tmp, n);
    glm_be_free(gpu, tmp);
}

/* quant: the GPU model's linear layers in nf4 with double quantization (quantized on the GPU),
 * the CPU model holding their dequantized values: the 4-bit layers' outputs against bf16 GEMMs
 * on the dequantized weights, at the same tolerances. */
static void test_9b_shape(int quant) {
    glm_config cfg;
    CHECK(glm_config_preset("glm-4-9b-chat-1m", &cfg) == GLM_OK, "preset");
    cfg.L = 2;
    glm_model *gm = NULL, *cm = NULL;
    glm_lora *gl = NULL, *cl = NULL;
    glm_base_format nf4 = {.quant_bits = 4, .q4 = GLM_WF_NF4, .double_quant = 1};
    CHECK(glm_model_create_random_fmt(&cfg, gpu, 3, quant ? &nf4 : NULL, &gm) == GLM_OK, "gpu model: %s", glm_errmsg());
    CHECK(glm_model_create_random(&cfg, cpu, 3, &cm) == GLM_OK, "cpu model: %s", glm_errmsg());
    if (!gm || !cm) return;
    int64_t C = cfg.C, F = cfg.F, V = cfg.V, qd = (int64_t)cfg.H * cfg.Dh, Dqkv = glm_config_qkv_rows(&cfg);
    to_cpu(cm->embed.data, gm->embed.data, V * C);
    to_cpu(cm->out_w.data, gm->out_w.data, V * C);
    to_cpu(cm->final_ln, gm->final_ln, C);
    for (int l = 0; l < cfg.L; l++) {
        glm_layer_weights *a = &cm->layers[l], *b = &gm->layers[l];
        to_cpu(a->ln1, b->ln1, C), to_cpu(a->ln2, b->ln2, C), to_cpu(a->bqkv, b->bqkv, Dqkv);
        mat_to_cpu(&a->wqkv, &b->wqkv), mat_to_cpu(&a->wo, &b->wo), mat_to_cpu(&a->w1, &b->w1), mat_to_cpu(&a->w2, &b->w2);
    }
    (void)Dqkv, (void)qd, (void)F;
    glm_lora_config lc = {.r = 8, .alpha = 16, .dropout = 0, .use_rslora = false, .targets = "all"};
    CHECK(glm_lora_create(gm, &lc, 5, &gl) == GLM_OK && glm_lora_create(cm, &lc, 5, &cl) == GLM_OK, "lora: %s", glm_errmsg());
    if (!gl || !cl) goto out;
    for (int i = 1; i < gl->n_params; i += 2) { /* lora_B ~ N(0, 0.02^2) on both */
        glm_param *p = &cl->params[i];
        CHECK(glm_be_fill_normal(cpu, p->w, GLM_DT_F32, p->numel, 0.0f, 0.02f, 9, (uint64_t)i) == GLM_OK, "fill");
        CHECK(glm_be_upload(gpu, gl->params[i].w, p->w, (size_t)p->numel * 4) == GLM_OK, "upload B");
    }
    {
        const int T = 320;
        uint32_t ids[320];
        uint8_t tg[320];
        int32_t pos[320], doc[320];
        for (int t = 0; t < T; t++) {
            doc[t] = t < 100 ? 0 : t < 300 ? 1 : 2;
            pos[t] = t - (doc[t] == 0 ? 0 : doc[t] == 1 ? 100 : 300);
            tg[t] = pos[t] > 0;
            ids[t] = (uint32_t)((t * 2654435761u) % (uint32_t)V);
        }
        glm_batch b = {1, T, ids, tg, pos, doc, NULL};
        float scale = 1.0f / 317.0f; /* targets: every position but a document's first (99 + 199 + 19) */
        double lsc = 0, lsg = 0;
        int64_t ntc = 0, nt = 0, n;
        CHECK(glm_model_step(cm, cl, &b, scale, 1, GLM_CKPT_NONE, 0, &lsc, &ntc) == GLM_OK, "cpu step: %s", glm_errmsg());
        CHECK(glm_model_step(gm, gl, &b, scale, 1, GLM_CKPT_AUTO, 0, &lsg, &nt) == GLM_OK, "cuda step: %s", glm_errmsg());
        char tag[120];
        snprintf(tag, sizeof tag, "%s%s", quant ? "9B shape, nf4 base (dequantized on the CPU)" : "9B shape", gpu_tag);
        char what0[200];
        snprintf(what0, sizeof what0, "%s (2 layers, T 320, 3 docs) loss vs cpu", tag);
        report(what0, fabs(lsg - lsc) / fabs(lsc), TOL_MODEL_LOSS);
        float *gc = grads(cpu, cl, &n), *g0 = grads(gpu, gl, &n);
        snprintf(what0, sizeof what0, "%s LoRA grads vs cpu", tag);
        report(what0, check_rel_l2(g0, gc, n), TOL_MODEL_GRAD);
        double worst = 0;
        int64_t off = 0;
        for (int i = 0; i < cl->n_params; i++) {
            worst = fmax(worst, check_rel_l2(g0 + off, gc + off, cl->params[i].numel));
            off += cl->params[i].numel;
        }
        snprintf(what0, sizeof what0, "%s worst LoRA grad tensor vs cpu", tag);
        report(what0, worst, TOL_MODEL_GRAD);
        glm_ckpt_mode modes[] = {GLM_CKPT_SELECTIVE, GLM_CKPT_FULL};
        for (int k = 0; k < 2; k++) {
            MODEL_OPT(gm, mlp_chunk, 100);
            glm_lora_zero_grads(gl);
            double l2 = 0;
            CHECK(glm_model_step(gm, gl, &b, scale, 1, modes[k], 0, &l2, &nt) == GLM_OK, "cuda %s: %s", glm_ckpt_name(modes[k]),
                  glm_errmsg());
            float *g2 = grads(gpu, gl, &n);
            char what[200];
            snprintf(what, sizeof what, "%s cuda %s, MLP chunks of 100 vs keep", tag, glm_ckpt_name(modes[k]));
            report(what, fmax(check_rel_l2(g2, g0, n), fabs(l2 - lsg) / fabs(lsg)), 1e-2);
            free(g2);
        }
        MODEL_OPT(gm, mlp_chunk, 0);
        free(gc), free(g0);
    }
out:
    glm_lora_free(gl), glm_lora_free(cl);
    glm_model_free(gm), glm_model_free(cm);
}

/* One training step's loss and LoRA grads (host fp32, malloc'ed) on the GPU. */
static float *step_grads(glm_model *m, glm_lora *l, const glm_batch *b, float scale, glm_ckpt_mode mode, double *loss) {
    int64_t nt = 0, n = 0;
    glm_lora_zero_grads(l);
    *loss = NAN;
    if (glm_model_step(m, l, b, scale, 1, mode, 0, loss, &nt) != GLM_OK) return NULL;
    return grads(m->be, l, &n);
}

/* The copies that overlap compute (the copy stream): 8 layers of a mid-size shape, rows of 8192
 * tokens in 5 documents, so that each layer input's copy (16 MiB) runs beside a layer's kernels.
 * (1) the layer inputs offloaded to host memory, downloaded during the next layer's forward and
 * uploaded during the later layer's backward: the same loss and grads as kept on the GPU, three
 * times over; (2) the next batch uploaded during a step's backward (glm_model_prefetch from the
 * next_batch hook, three batches in turn): each step equal to the same batch uploaded by the step
 * itself, and the prefetched batches used. With glmtune's attention kernels (deterministic) the
 * runs must agree bit for bit (tol 0: any missing wait, a stale or torn slot, shows); with
 * cuDNN's, within TOL_RERUN_CUDNN (its backward's atomics; tests/gpu/tol.h). */
typedef struct rot { glm_model *m; const glm_batch *b; } rot;
static glm_status prefetch_hook(void *user) {
    rot *r = user;
    return glm_model_prefetch(r->m, r->b);
}

static void test_overlap(const glm_backend *be, const char *attn, double tol) {
    glm_config cfg;
    CHECK(glm_config_preset("glm-4-9b-chat-1m", &cfg) == GLM_OK, "preset");
    cfg.L = 8, cfg.C = 1024, cfg.H = 8, cfg.Hkv = 2, cfg.Dh = 128, cfg.rope_dim = 64, cfg.F = 2816, cfg.V = 8192;
    glm_model *m = NULL;
    glm_lora *l = NULL;
    CHECK(glm_model_create_random(&cfg, be, 4, &m) == GLM_OK, "overlap model: %s", glm_errmsg());
    glm_lora_config lc = {.r = 8, .alpha = 16, .dropout = 0, .use_rslora = false, .targets = "all"};
    if (!m || glm_lora_create(m, &lc, 5, &l) != GLM_OK) {
        CHECK(0, "overlap lora: %s", glm_errmsg());
        glm_model_free(m);
        return;
    }
    for (int i = 1; i < l->n_params; i += 2) /* lora_B nonzero: lora_A gets gradients */
        CHECK(glm_be_fill_normal(be, l->params[i].w, GLM_DT_F32, l->params[i].numel, 0.0f, 0.02f, 9, (uint64_t)i) == GLM_OK, "fill");
    enum { T = 8192 };
    static uint32_t ids[3][T];
    static uint8_t tg[T];
    static int32_t pos[T], doc[T];
    const int starts[] = {0, 1000, 3001, 3100, 6000, T};
    for (int d = 0; d < 5; d++)
        for (int t = starts[d]; t < starts[d + 1]; t++) doc[t] = d, pos[t] = t - starts[d], tg[t] = pos[t] > 0;
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < T; t++) ids[k][t] = (uint32_t)(((uint64_t)(t + 7919 * k) * 2654435761u) % (uint32_t)cfg.V);
    glm_batch b[3];
    for (int k = 0; k < 3; k++) b[k] = (glm_batch){1, T, ids[k], tg, pos, doc, NULL};
    const float scale = 1.0f / (T - 5);
    int64_t n = 0;
    for (int i = 0; i < l->n_params; i++) n += l->params[i].numel;
    double ref_loss[3];
    float *ref[3];
    MODEL_OPT(m, offload, -1);
    for (int k = 0; k < 3; k++) ref[k] = step_grads(m, l, &b[k], scale, GLM_CKPT_FULL, &ref_loss[k]);
    CHECK(ref[0] && ref[1] && ref[2], "overlap reference steps: %s", glm_errmsg());
    if (!ref[0] || !ref[1] || !ref[2]) goto out;
    MODEL_OPT(m, offload, 1);
    for (int rep = 0; rep < 3; rep++) {
        double lo;
        float *g = step_grads(m, l, &b[rep], scale, GLM_CKPT_FULL, &lo);
        CHECK(g && glm_model_current_plan(m)->offload, "offload step: %s", glm_errmsg());
        char what[160];
        snprintf(what, sizeof what, "%s: 8 layers x 8192 tokens, offloaded (copies beside the kernels) vs on the GPU, run %d (%s)",
                 attn, rep + 1, g && !memcmp(g, ref[rep], (size_t)n * 4) && lo == ref_loss[rep] ? "bitwise" : "not bitwise");
        report(what, g ? fmax(check_rel_l2(g, ref[rep], n), fabs(lo - ref_loss[rep]) / fabs(ref_loss[rep])) : 1.0, tol);
        free(g);
    }
    {
        rot r = {m, NULL};
        glm_model_set_next_batch(m, prefetch_hook, &r);
        int64_t hits = m->batches_prefetched;
        int same = 1;
        double worst = 0;
        for (int s = 0; s < 6; s++) {
            r.b = &b[(s + 1) % 3];
            double lo;
            float *g = step_grads(m, l, &b[s % 3], scale, GLM_CKPT_FULL, &lo);
            CHECK(g, "prefetch step %d: %s", s, glm_errmsg());
            same &= g && !memcmp(g, ref[s % 3], (size_t)n * 4) && lo == ref_loss[s % 3];
            worst = fmax(worst, g ? fmax(check_rel_l2(g, ref[s % 3], n), fabs(lo - ref_loss[s % 3]) / fabs(ref_loss[s % 3])) : 1.0);
            free(g);
        }
        glm_model_set_next_batch(m, NULL, NULL);
        char what[200];
        snprintf(what, sizeof what, "%s: 6 steps, each batch uploaded during the step before (and offloaded) vs uploaded by the "
                 "step (%s)", attn, same ? "bitwise" : "not bitwise");
        report(what, worst, tol);
        CHECK(m->batches_prefetched - hits == 5, "the steps used the prefetched batches: %lld of 5",
              (long long)(m->batches_prefetched - hits));
    }
out:
    MODEL_OPT(m, offload, 0);
    for (int k = 0; k < 3; k++) free(ref[k]);
    glm_lora_free(l);
    glm_model_free(m);
}

/* The overlap test on a second backend with glmtune's attention kernels (GLMTUNE_ATTENTION is
 * read when a backend is made). */
static void test_overlap_own_kernels(int with_9b) {
    setenv("GLMTUNE_ATTENTION", "glmtune", 1);
    glm_status st;
    const glm_backend *own = glm_backend_cuda(0, &st);
    unsetenv("GLMTUNE_ATTENTION");
    CHECK(own, "a backend with glmtune's attention kernels: %s", glm_errmsg());
    if (!own) return;
    test_overlap(own, "glmtune's attention", 0.0);
    if (with_9b) {
        /* no library workspace: the plan's lean backward (d_o written over o, D from attention_delta;
           lora/model/plan.h dout_over_out), the 9B layers against the CPU */
        const glm_backend *auto_be = gpu;
        gpu = own, gpu_tag = " (glmtune's attention: d_o over o, D given)";
        test_9b_shape(0);
        gpu = auto_be, gpu_tag = "";
    }
    glm_backend_cuda_close(own);
}

/* Usage: test_cuda_model [overlap]  (overlap: only the copy-overlap tests, e.g. under
 * compute-sanitizer) */
/* The hf layout's 4-bit base (nf4 with double quantization, fp4 without): query_key_value quantized
 * on the GPU segment by segment (q_proj, k_proj, v_proj each alone, kernels/weight.h "Segments")
 * and dequantized into the dense slot one launch per segment: every matrix's stored bytes and
 * dequantized bf16 bits equal the CPU reference's (the checkpoint is bf16, so both quantize the
 * same values). */
static void test_hf_q4(void) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/hf", fixtures);
    for (int k = 0; k < 2; k++) {
        glm_base_format f = {.quant_bits = 4, .q4 = k ? GLM_WF_FP4 : GLM_WF_NF4, .double_quant = !k};
        glm_model *c = NULL, *g = NULL;
        CHECK(glm_model_load_fmt(dir, cpu, 0, 0, &f, &c) == GLM_OK, "cpu hf 4-bit: %s", glm_errmsg());
        CHECK(glm_model_load_fmt(dir, gpu, 0, 0, &f, &g) == GLM_OK, "gpu hf 4-bit: %s", glm_errmsg());
        int same_bytes = 1, same_deq = 1, segs = 1;
        for (int l = 0; c && g && l < c->cfg.L; l++) {
            const glm_weight *cw[4] = {&c->layers[l].wqkv, &c->layers[l].wo, &c->layers[l].w1, &c->layers[l].w2};
            const glm_weight *gw[4] = {&g->layers[l].wqkv, &g->layers[l].wo, &g->layers[l].w1, &g->layers[l].w2};
            segs &= cw[0]->segs.n == 3 && gw[0]->segs.n == 3;
            for (int i = 0; i < 4; i++) {
                glm_weight_bytes_t b = glm_weight_seg_bytes(cw[i]->fmt, cw[i]->n, cw[i]->double_quant, &cw[i]->segs);
                const void *cb[4] = {cw[i]->data, cw[i]->absmax, cw[i]->absmax2, cw[i]->offset};
                const void *gb[4] = {gw[i]->data, gw[i]->absmax, gw[i]->absmax2, gw[i]->offset};
                size_t nb[4] = {b.data, b.absmax, b.absmax2, b.offset};
                for (int j = 0; j < 4; j++) {
                    if (!nb[j]) continue;
                    char *h = malloc(nb[j]);
                    CHECK(glm_be_download(gpu, h, gb[j], nb[j]) == GLM_OK, "download: %s", glm_errmsg());
                    same_bytes &= !memcmp(h, cb[j], nb[j]);
                    free(h);
                }
                const int64_t n = cw[i]->rows * cw[i]->cols;
                uint16_t *hc = malloc((size_t)n * 2), *hg = malloc((size_t)n * 2);
                void *d = NULL;
                CHECK(glm_be_alloc(gpu, (size_t)n * 2, "dequantized", &d) == GLM_OK, "alloc");
                CHECK(glm_be_weight_dequantize(gpu, d, GLM_DT_BF16, gw[i]) == GLM_OK, "gpu dequantize: %s", glm_errmsg());
                CHECK(glm_be_download(gpu, hg, d, (size_t)n * 2) == GLM_OK, "download");
                CHECK(glm_be_weight_dequantize(cpu, hc, GLM_DT_BF16, cw[i]) == GLM_OK, "cpu dequantize: %s", glm_errmsg());
                same_deq &= !memcmp(hc, hg, (size_t)n * 2);
                glm_be_free(gpu, d);
                free(hc), free(hg);
            }
        }
        CHECK(c && g && segs && same_bytes && same_deq, "hf layout %s: query_key_value in 3 segments; every matrix's 4-bit "
              "bytes and dequantized bf16 bits on the GPU == the CPU's", k ? "fp4" : "nf4 dq");
        glm_model_free(c);
        glm_model_free(g);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the log even if the process dies */
    const int only_overlap = argc > 1 && !strcmp(argv[1], "overlap"), only_qlora = argc > 1 && !strcmp(argv[1], "qlora");
    if (glm_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    const char *data_dir = test_data_dir();
    snprintf(fixtures, sizeof fixtures, "%s/tiny-glm4", data_dir);
    glm_status st;
    gpu = glm_backend_cuda(0, &st);
    if (!gpu) {
        printf("SKIPPED: CUDA backend: %s\n", glm_errmsg());
        return st == GLM_ERR_UNSUPPORTED ? 77 : 1;
    }
    cpu = glm_backend_cpu();
    if (only_qlora) {
        test_hf_q4();
        test_9b_shape(1);
        glm_backend_cuda_close(gpu);
        return check_summary("test_cuda_model");
    }
    if (!only_overlap) test_hf_q4(), test_9b_shape(0), test_9b_shape(1);
    test_overlap(gpu, "auto (cuDNN's attention where it is there)", TOL_RERUN_CUDNN);
    test_overlap_own_kernels(!only_overlap);
    if (!only_overlap) {
        test_layout("chatglm");
        test_layout("hf");
    }
    glm_backend_cuda_close(gpu);
    return check_summary("test_cuda_model");
}
