/* tests/lora/test_model.c: the GLM-4 model with LoRA on the CPU backend against the reference
 * fixtures (tests/fixtures/tiny-glm4/{chatglm,hf}/golden.safetensors: transformers + PEFT in
 * float64), both checkpoint layouts; gradient checkpointing == none; micro-batch 2 == 1 + 1;
 * LoRA dropout backward vs finite differences; load errors; config parsing; random init.
 *
 * Tolerances: the fixtures' README says float32 code lands ~1e-6 relative from the float64
 * goldens and 1e-4 relative is a fair bound: we use ||a-b|| / ||b|| < 1e-4 per tensor, and an
 * elementwise |a-b| <= 1e-3 * max|b| (looser: single elements may sit near zero). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/log.h"
#include "kernels/backend.h"
#include "lora/model/config.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "common/safetensors.h"
#include "tests/check.h"
#include "tests/model_opt.h"
#include "tests/golden_batch.h"

static const double TOL_NORM = 1e-4, TOL_ELEM = 1e-3;
static char fixtures[1024];



/* Norm-relative and elementwise comparison of a float array with a golden tensor. */
static void compare(const char *what, const float *a, const glm_st_set *set, const char *name, int64_t n) {
    const glm_st_tensor *t = glm_st_find(set, name);
    if (!t) {
        CHECK(0, "%s: golden tensor %s missing", what, name);
        return;
    }
    CHECK(t->numel == n, "%s: %s has %lld elements, expected %lld", what, name, (long long)t->numel, (long long)n);
    if (t->numel != n) return;
    double *ref = malloc(n * sizeof(double));
    if (t->dtype == GLM_ST_F64) memcpy(ref, t->data, n * sizeof(double));
    else {
        float *f = malloc(n * 4);
        glm_st_to_f32(t->dtype, t->data, n, f);
        for (int64_t i = 0; i < n; i++) ref[i] = f[i];
        free(f);
    }
    double num = 0, den = 0, maxd = 0, maxr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        if (fabs(d) > maxd || !isfinite(d)) maxd = isfinite(d) ? fabs(d) : INFINITY;
        if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
    }
    double rel = sqrt(num) / sqrt(den);
    if (getenv("GLM_TEST_VERBOSE")) printf("%s: %s: norm-rel %.2e, max abs %.2e (max |b| %.2e)\n", what, name, rel, maxd, maxr);
    CHECK(rel < TOL_NORM, "%s: %s: ||a-b||/||b|| = %.3e", what, name, rel);
    CHECK(maxd <= TOL_ELEM * maxr, "%s: %s: max |a-b| = %.3e vs max |b| = %.3e", what, name, maxd, maxr);
    free(ref);
}

static double golden_scalar(const glm_st_set *set, const char *name) {
    float f = NAN;
    const glm_st_tensor *t = glm_st_find(set, name);
    if (t && t->dtype == GLM_ST_F64) return ((const double *)t->data)[0];
    if (t) glm_st_to_f32(t->dtype, t->data, 1, &f);
    return f;
}

/* Copies of all grads (host). */
static float **grab_grads(glm_lora *l) {
    int n;
    glm_param *p = glm_lora_params(l, &n);
    float **g = calloc(n, sizeof *g);
    for (int i = 0; i < n; i++) {
        g[i] = malloc(p[i].numel * 4);
        memcpy(g[i], p[i].g, p[i].numel * 4);
    }
    return g;
}

static void free_grads(glm_lora *l, float **g) {
    for (int i = 0; i < l->n_params; i++) free(g[i]);
    free(g);
}

static double grads_rel(glm_lora *l, float **a, float **b) {
    double num = 0, den = 0;
    for (int i = 0; i < l->n_params; i++)
        for (int64_t k = 0; k < l->params[i].numel; k++) {
            num += ((double)a[i][k] - b[i][k]) * ((double)a[i][k] - b[i][k]);
            den += (double)b[i][k] * b[i][k];
        }
    return sqrt(num) / sqrt(den);
}

static int grads_equal(glm_lora *l, float **a, float **b) {
    for (int i = 0; i < l->n_params; i++)
        if (memcmp(a[i], b[i], l->params[i].numel * 4)) return 0;
    return 1;
}

/* A next_batch hook that prefetches one batch (struct {glm_model *m; const glm_batch *b;}). */
static glm_status prefetch_hook(void *user) {
    struct pf { glm_model *m; const glm_batch *b; } *p = user;
    return glm_model_prefetch(p->m, p->b);
}

static void test_layout(const char *layout) {
    const glm_backend *be = glm_backend_cpu();
    char dir[1200], adir[1300];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, layout);
    snprintf(adir, sizeof adir, "%s/adapter_init", dir);
    golden g;
    if (!golden_load(fixtures, layout, &g)) return;
    glm_model *m = NULL;
    glm_status st = glm_model_load(dir, be, 0, &m);
    CHECK(st == GLM_OK, "%s: load: %s", layout, glm_errmsg());
    if (st) return;
    CHECK(m->cfg.layout == (strcmp(layout, "hf") ? GLM_LAYOUT_CHATGLM : GLM_LAYOUT_HF), "%s: layout detected", layout);
    MODEL_OPT(m, loss_chunk, 7); /* exercise the chunked loss head (96 tokens in 14 chunks) */
    if (m->cfg.layout == GLM_LAYOUT_HF) {
        /* make_fixtures.py saved the hf model with model.to(torch.bfloat16) and went back to
         * float64, which also rounded transformers' RoPE inv_freq buffer to bf16 (its goldens sit
         * 2.2e-4 from the chatglm ones, not the README's 3e-6). Reproduce that table here. */
        float inv[64];
        glm_rope_inv_freq(m->cfg.rope_base, m->cfg.rope_dim, inv);
        for (int i = 0; i < m->cfg.rope_dim / 2; i++) {
            uint16_t h;
            glm_st_from_f32(GLM_ST_BF16, &inv[i], 1, &h);
            glm_st_to_f32(GLM_ST_BF16, &h, 1, &inv[i]);
        }
        CHECK(glm_model_set_rope_inv_freq(m, inv) == GLM_OK, "set inv_freq");
    }
    int64_t N = (int64_t)g.B * g.T, V = m->cfg.V;
    glm_batch b = golden_batch(&g, 0, g.B);
    float *logits = malloc(N * V * 4);
    char what[64];

    /* base model */
    snprintf(what, sizeof what, "%s base", layout);
    CHECK(glm_model_logits(m, NULL, &b, logits) == GLM_OK, "%s: logits: %s", what, glm_errmsg());
    compare(what, logits, g.set, "logits_base", N * V);
    double ls = 0;
    int64_t nt = 0;
    CHECK(glm_model_step(m, NULL, &b, 1.0f, 1, 0, 0, &ls, &nt) == GLM_OK, "%s: step: %s", what, glm_errmsg());
    CHECK(nt == g.n_target, "%s: %lld target tokens, golden %lld", what, (long long)nt, (long long)g.n_target);
    CHECK(check_close(ls / nt, golden_scalar(g.set, "loss_base"), 1e-5, 0), "%s: loss %.8f vs %.8f", what, ls / nt,
          golden_scalar(g.set, "loss_base"));

    /* with the adapter */
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    glm_lora *l = NULL;
    st = glm_lora_create(m, &lc, 1, &l);
    CHECK(st == GLM_OK, "%s: lora create: %s", layout, glm_errmsg());
    if (st) goto out;
    CHECK(l->n_params == (strcmp(layout, "hf") ? 16 : 24), "%s: %d LoRA params", layout, l->n_params);
    /* PEFT init: A in U(-1/sqrt(in), 1/sqrt(in)) and not all zero, B zero */
    {
        glm_param *A = &l->params[0], *B = &l->params[1];
        double bound = 1 / sqrt((double)A->shape[1]), mx = 0;
        for (int64_t k = 0; k < A->numel; k++) mx = fmax(mx, fabs(A->w[k]));
        CHECK(mx > 0.5 * bound && mx <= bound, "%s: lora_A init bound %g (max %g)", layout, bound, mx);
        CHECK(glm_be_sumsq(be, B->w, B->numel) == 0, "%s: lora_B init is zero", layout);
    }
    st = glm_lora_load_peft(l, adir);
    CHECK(st == GLM_OK, "%s: load adapter: %s", layout, glm_errmsg());
    if (st) goto out;
    snprintf(what, sizeof what, "%s lora", layout);
    CHECK(glm_model_logits(m, l, &b, logits) == GLM_OK, "%s logits: %s", what, glm_errmsg());
    compare(what, logits, g.set, "logits", N * V);
    float scale = 1.0f / (float)g.n_target;
    CHECK(glm_model_step(m, l, &b, scale, 1, 0, 0, &ls, &nt) == GLM_OK, "%s: step: %s", what, glm_errmsg());
    CHECK(check_close(ls / nt, golden_scalar(g.set, "loss"), 1e-5, 0), "%s: loss %.8f vs %.8f", what, ls / nt,
          golden_scalar(g.set, "loss"));
    double gn = 0;
    for (int i = 0; i < l->n_params; i++) {
        char key[400];
        snprintf(key, sizeof key, "grad.base_model.model.%s", l->params[i].name);
        compare(what, l->params[i].g, g.set, key, l->params[i].numel);
        gn += glm_be_sumsq(be, l->params[i].g, l->params[i].numel);
    }
    CHECK(check_close(sqrt(gn), golden_scalar(g.set, "grad_norm"), 1e-4, 0), "%s: grad norm %g vs %g", what, sqrt(gn),
          golden_scalar(g.set, "grad_norm"));
    float **ref = grab_grads(l);

    /* gradient checkpointing gives the same grads, bit for bit */
    glm_lora_zero_grads(l);
    double ls2;
    CHECK(glm_model_step(m, l, &b, scale, 1, 1, 0, &ls2, &nt) == GLM_OK, "%s ckpt: %s", what, glm_errmsg());
    float **ck = grab_grads(l);
    CHECK(ls2 == ls, "%s: checkpointed loss %.17g vs %.17g", what, ls2, ls);
    CHECK(grads_equal(l, ck, ref), "%s: checkpointed grads differ (rel %.3e)", what, grads_rel(l, ck, ref));
    free_grads(l, ck);

    /* the other memory plans: selective, auto mixes forced by a small budget, the MLP in chunks of
     * 5 tokens (96 tokens: 20 chunks, the last partial): same loss and grads */
    {
        glm_plan pn, pa;
        glm_model_plan(m, l, g.B, g.T, 1, GLM_CKPT_NONE, &pn);
        double keep1 = glm_plan_bytes_keep(&m->cfg, 4) * (double)pn.N, sel1 = glm_plan_bytes_selective(&m->cfg, 4) * (double)pn.N;
        struct {
            glm_ckpt_mode mode;
            double budget;
            int64_t mlp;
            const char *name;
        } v[] = {
            {GLM_CKPT_SELECTIVE, 0, 0, "selective"},
            {GLM_CKPT_AUTO, pn.total - 0.5 * (keep1 - sel1), 0, "auto, one layer selective"},
            {GLM_CKPT_AUTO, -1, 5, "auto, some full, MLP chunks"},
            {GLM_CKPT_NONE, 0, 5, "none, MLP chunks of 5"},
            {GLM_CKPT_FULL, 0, 5, "full, MLP chunks of 5"},
        };
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            MODEL_OPT(m, max_bytes, v[i].budget > 0 ? v[i].budget : 0); /* < 0: found below */
            MODEL_OPT(m, mlp_chunk, v[i].mlp);
            if (v[i].budget < 0) { /* the largest budget that forces at least one full layer */
                double bud = pn.total;
                glm_plan q;
                do {
                    bud -= sel1 / 8;
                    MODEL_OPT(m, max_bytes, bud);
                    glm_model_plan(m, l, g.B, g.T, 1, GLM_CKPT_AUTO, &q);
                } while (q.n_full == 0 && bud > 0);
                CHECK(q.n_full > 0 && q.fits, "%s: a budget with a full layer (%.0f bytes)", what, bud);
            }
            glm_lora_zero_grads(l);
            double lv;
            CHECK(glm_model_step(m, l, &b, scale, 1, v[i].mode, 0, &lv, &nt) == GLM_OK, "%s %s: %s", what, v[i].name, glm_errmsg());
            pa = *glm_model_current_plan(m);
            if (v[i].mode == GLM_CKPT_AUTO)
                CHECK(pa.n_keep < m->cfg.L && pa.n_keep + pa.n_selective + pa.n_full == m->cfg.L, "%s %s: keep %d sel %d full %d",
                      what, v[i].name, pa.n_keep, pa.n_selective, pa.n_full);
            if (v[i].mlp) CHECK(pa.mlp_chunk == v[i].mlp, "%s %s: MLP chunk %lld", what, v[i].name, (long long)pa.mlp_chunk);
            float **gv = grab_grads(l);
            double rel = grads_rel(l, gv, ref);
            CHECK(check_close(lv, ls, 1e-6, 0) && rel < 1e-6, "%s %s (keep %d, selective %d, full %d): loss %.10g vs %.10g, "
                  "grads rel %.3e", what, v[i].name, pa.n_keep, pa.n_selective, pa.n_full, lv, ls, rel);
            free_grads(l, gv);
        }
        MODEL_OPT(m, max_bytes, 0);
        MODEL_OPT(m, mlp_chunk, 0);
    }

    /* the layer inputs offloaded to host memory (be->host_alloc, copied out in the forward and
     * back in the backward through two device slots), full and no recomputation: the same loss
     * and grads bit for bit; then a forward-only step in the same workspace */
    for (int k = 0; k < 4; k++) { /* full and none; every layer input offloaded, then only the first */
        glm_ckpt_mode mode = k % 2 ? GLM_CKPT_NONE : GLM_CKPT_FULL;
        const int n_host = k < 2 ? m->cfg.L : 1;
        MODEL_OPT(m, offload, 1);
        MODEL_OPT(m, offload_layers, k < 2 ? 0 : 1);
        glm_lora_zero_grads(l);
        double lo;
        CHECK(glm_model_step(m, l, &b, scale, 1, mode, 0, &lo, &nt) == GLM_OK, "%s offload %s: %s", what,
              glm_ckpt_name(mode), glm_errmsg());
        const glm_plan *po = glm_model_current_plan(m);
        CHECK(po && po->offload && po->n_host == n_host &&
                  po->host == (double)n_host * po->N * m->cfg.C * glm_dtype_size(be->act_dtype),
              "%s offload %s: the plan offloads %d layer inputs (%.0f host bytes)", what, glm_ckpt_name(mode), n_host,
              po ? po->host : 0);
        float **go = grab_grads(l);
        CHECK(lo == ls && grads_equal(l, go, ref), "%s offload %s: loss %.17g vs %.17g, grads rel %.3e", what,
              glm_ckpt_name(mode), lo, ls, grads_rel(l, go, ref));
        free_grads(l, go);
        CHECK(glm_model_step(m, l, &b, scale, 0, mode, 0, &lo, &nt) == GLM_OK && lo == ls, "%s offload %s: forward only",
              what, glm_ckpt_name(mode));
        MODEL_OPT(m, offload, 0);
        MODEL_OPT(m, offload_layers, 0);
    }

    /* micro-batch 2 == 1 + 1 accumulated */
    glm_lora_zero_grads(l);
    glm_batch b0 = golden_batch(&g, 0, 1), b1 = golden_batch(&g, 1, 1);
    double la, lb;
    int64_t na, nb;
    CHECK(glm_model_step(m, l, &b0, scale, 1, 0, 0, &la, &na) == GLM_OK, "row 0: %s", glm_errmsg());
    CHECK(glm_model_step(m, l, &b1, scale, 1, 1, 0, &lb, &nb) == GLM_OK, "row 1: %s", glm_errmsg());
    float **acc = grab_grads(l);
    double r12 = grads_rel(l, acc, ref);
    CHECK(r12 < 1e-6, "%s: 1+1 accumulation vs micro-batch 2: rel %.3e", what, r12);
    CHECK(na + nb == g.n_target && check_close(la + lb, ls, 1e-6, 0), "%s: 1+1 loss sums", what);

    /* the next batch uploaded ahead (glm_model_prefetch, from the next_batch hook during a step's
     * backward): the step that takes it uses it, with the same loss and grads as uploading it
     * itself; a prefetched batch the step does not take, or an invalid one, changes nothing */
    {
        double lp, l0, l1;
        int64_t np_;
        glm_lora_zero_grads(l); /* the reference: each step uploads its own batch */
        CHECK(glm_model_step(m, l, &b0, scale, 1, 0, 0, &l0, &np_) == GLM_OK &&
              glm_model_step(m, l, &b1, scale, 1, 0, 0, &l1, &np_) == GLM_OK, "%s prefetch: %s", what, glm_errmsg());
        float **g01 = grab_grads(l);
        CHECK(glm_model_step(m, l, &b, scale, 0, 0, 0, &lp, &np_) == GLM_OK, "%s prefetch: %s", what, glm_errmsg());
        glm_lora_zero_grads(l); /* the two batch sets now hold b and b1: b1 is prefetched into b's */
        int64_t hits = m->batches_prefetched, kept = m->batches_kept;
        struct pf { glm_model *m; const glm_batch *b; } ctx = {m, &b1};
        glm_model_set_next_batch(m, prefetch_hook, &ctx);
        CHECK(glm_model_step(m, l, &b0, scale, 1, 0, 0, &lp, &np_) == GLM_OK && lp == l0, "%s prefetch: row 0 %s", what,
              glm_errmsg());
        glm_model_set_next_batch(m, NULL, NULL);
        CHECK(glm_model_step(m, l, &b1, scale, 1, 0, 0, &lp, &np_) == GLM_OK && lp == l1 && np_ == nb, "%s prefetch: row 1 "
              "loss %.17g vs %.17g", what, lp, l1);
        CHECK(m->batches_prefetched == hits + 1 && m->batches_kept == kept, "%s prefetch: the step used the prefetched "
              "batch (%lld)", what, (long long)(m->batches_prefetched - hits));
        float **gp = grab_grads(l);
        CHECK(grads_equal(l, gp, g01), "%s prefetch: grads rel %.3e", what, grads_rel(l, gp, g01));
        free_grads(l, gp);
        free_grads(l, g01);
        CHECK(glm_model_prefetch(m, &b) == GLM_OK, "%s prefetch: %s", what, glm_errmsg());
        CHECK(glm_model_step(m, l, &b1, scale, 0, 0, 0, &lp, &np_) == GLM_OK && lp == l1, "%s prefetch: another batch "
              "prefetched", what);
        CHECK(m->batches_prefetched == hits + 1 && m->batches_kept == kept + 1, "%s prefetch: the other batch not used; "
              "the step's batch still on the device", what);
        glm_batch bad = b1;
        uint32_t *ids = malloc((size_t)b1.T * 4);
        memcpy(ids, b1.ids, (size_t)b1.T * 4);
        ids[b1.T / 2] = (uint32_t)m->cfg.V;
        bad.ids = ids;
        CHECK(glm_model_prefetch(m, &bad) == GLM_OK, "%s prefetch: an invalid batch is left to the step", what);
        CHECK(glm_model_step(m, l, &bad, scale, 0, 0, 0, &lp, &np_) == GLM_ERR_ARG && strstr(glm_errmsg(), "vocabulary"),
              "%s prefetch: the step reports the invalid batch: %s", what, glm_errmsg());
        free(ids);
    }
    free_grads(l, acc);

    /* forward only: no grads touched */
    glm_lora_zero_grads(l);
    CHECK(glm_model_step(m, l, &b, scale, 0, 0, 0, &ls2, &nt) == GLM_OK && ls2 == ls, "%s: forward-only loss", what);
    CHECK(glm_be_sumsq(be, l->params[1].g, l->params[1].numel) == 0, "%s: forward-only leaves grads alone", what);
    free_grads(l, ref);

    /* LoRA dropout: checkpointing reproduces the masks; backward matches finite differences */
    CHECK(glm_model_step(m, l, &b, scale, 1, 1, 0, &ls2, &nt) == GLM_OK, "%s: a training workspace without dropout", what);
    l->dropout = 0.3f;
    /* first in the mode of the current workspace (made without dropout): it must grow the
     * dropout buffer, not write through a missing one */
    glm_lora_zero_grads(l);
    CHECK(glm_model_step(m, l, &b, 1.0f, 1, 1, 42, &ls2, &nt) == GLM_OK, "%s dropout ckpt: %s", what, glm_errmsg());
    float **d1 = grab_grads(l);
    glm_lora_zero_grads(l);
    CHECK(glm_model_step(m, l, &b, 1.0f, 1, 0, 42, &ls, &nt) == GLM_OK, "%s dropout: %s", what, glm_errmsg());
    float **d0 = grab_grads(l);
    CHECK(grads_equal(l, d0, d1) && ls == ls2, "%s: dropout + checkpointing reproduces the grads", what);
    /* ... and so do selective recomputation and the MLP in chunks (row-offset masks) */
    MODEL_OPT(m, mlp_chunk, 5);
    glm_lora_zero_grads(l);
    CHECK(glm_model_step(m, l, &b, 1.0f, 1, GLM_CKPT_SELECTIVE, 42, &ls2, &nt) == GLM_OK, "%s dropout selective: %s", what,
          glm_errmsg());
    {
        float **d2 = grab_grads(l);
        CHECK(check_close(ls2, ls, 1e-6, 0) && grads_rel(l, d2, d0) < 1e-6, "%s: dropout, selective, MLP chunks: rel %.3e", what,
              grads_rel(l, d2, d0));
        free_grads(l, d2);
    }
    MODEL_OPT(m, mlp_chunk, 0);
    double lo;
    glm_model_step(m, l, &b, 1.0f, 0, 0, 43, &lo, &nt);
    CHECK(lo != ls, "%s: another dropout seed gives another loss", what);
    /* finite differences on elements of the first layer's lora_A and lora_B of two modules */
    int checks[4][2] = {{0, 3}, {1, 5}, {2, 17}, {3, 2}};
    for (int c = 0; c < 4; c++) {
        glm_param *p = &l->params[checks[c][0]];
        int64_t k = checks[c][1];
        float w0 = p->w[k], h = 1e-2f;
        double lp, lm;
        p->w[k] = w0 + h;
        glm_model_step(m, l, &b, 1.0f, 0, 0, 42, &lp, &nt);
        p->w[k] = w0 - h;
        glm_model_step(m, l, &b, 1.0f, 0, 0, 42, &lm, &nt);
        p->w[k] = w0;
        double fd = (lp - lm) / (2.0 * h), an = d0[checks[c][0]][k];
        CHECK(fabs(fd - an) <= 2e-2 * fabs(an) + 2e-4, "%s: dropout grad of %s[%lld]: fd %.6g vs backward %.6g", what, p->name,
              (long long)k, fd, an);
    }
    free_grads(l, d0);
    free_grads(l, d1);
    l->dropout = 0;

out:
    glm_lora_free(l);
    glm_model_free(m);
    free(logits);
    golden_free(&g);
}

/* ---- API errors ---- */

static void test_targets_and_adapter(void) {
    const glm_backend *be = glm_backend_cpu();
    char dir[1200], adir[1300];
    snprintf(dir, sizeof dir, "%s/chatglm", fixtures);
    snprintf(adir, sizeof adir, "%s/adapter_init", dir);
    glm_model *m = NULL;
    if (glm_model_load(dir, be, 0, &m) != GLM_OK) {
        CHECK(0, "load: %s", glm_errmsg());
        return;
    }
    glm_lora *l = NULL;
    glm_lora_config lc = {.r = 4, .alpha = 8, .targets = "query_key_value, q_proj"};
    CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_ERR_ARG && strstr(glm_errmsg(), "q_proj") &&
              strstr(glm_errmsg(), "dense_h_to_4h"),
          "unknown target lists the valid ones: %s", glm_errmsg());
    lc.targets = "dense";
    CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK && l->n_sites == 2 && l->sites[0].lin == GLM_LIN_DENSE,
          "dense means self_attention.dense only");
    CHECK(l && strcmp(l->params[0].name, "transformer.encoder.layers.0.self_attention.dense.lora_A.weight") == 0, "param name %s",
          l ? l->params[0].name : "");
    CHECK(glm_lora_load_peft(l, adir) == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "target_modules"),
          "adapter target mismatch: %s", glm_errmsg());
    glm_lora_free(l);
    lc.targets = "all";
    lc.r = 8;
    CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK, "create r=8");
    CHECK(glm_lora_load_peft(l, adir) == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "r is 4"), "adapter r mismatch: %s",
          glm_errmsg());
    glm_lora_free(l);
    /* an adapter of a model of another size (lora_A's in_features 32, not this model's hidden 64): said so, with
     * both sizes, not "a different lora-rank" */
    {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "/tmp/glm_test_adapter_%d", (int)getpid());
        glm_rmtree(tmp);
        glm_mkdir_p(tmp);
        const char *victim = "base_model.model.transformer.encoder.layers.0.self_attention.query_key_value.lora_A.weight";
        char *src = glm_path_join(adir, "adapter_model.safetensors"), *dst = glm_path_join(tmp, "adapter_model.safetensors");
        char *ca = glm_path_join(adir, "adapter_config.json"), *cb = glm_path_join(tmp, "adapter_config.json"), *data = NULL;
        size_t len = 0;
        glm_st_set *s = NULL;
        CHECK(glm_read_file(ca, &data, &len) == GLM_OK && glm_write_file_atomic(cb, data, len) == GLM_OK, "copy config");
        free(data);
        if (glm_st_open(src, &s) == GLM_OK) {
            size_t n = glm_st_count(s);
            glm_st_tensor *ts = calloc(n, sizeof *ts);
            for (size_t i = 0; i < n; i++) {
                ts[i] = *glm_st_at(s, i);
                if (!strcmp(ts[i].name, victim)) { /* [4, 64] -> [4, 32]: half the bytes */
                    ts[i].shape[1] /= 2;
                    ts[i].numel /= 2;
                    ts[i].nbytes /= 2;
                }
            }
            CHECK(glm_st_write(dst, ts, n, NULL, 0) == GLM_OK, "write the reshaped adapter: %s", glm_errmsg());
            free(ts);
            glm_st_close(s);
        }
        lc.r = 4;
        CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK, "create r=4");
        const char *e = glm_lora_load_peft(l, tmp) == GLM_ERR_MISMATCH ? glm_errmsg() : "";
        CHECK(strstr(e, victim) && strstr(e, "input size") && strstr(e, "32 in it and 64 in this model") &&
                  strstr(e, "model of another size") && !strstr(e, "lora-rank"),
              "adapter of another model size: %s", glm_errmsg());
        glm_lora_free(l);
        glm_rmtree(tmp);
        free(src), free(dst), free(ca), free(cb);
    }
    /* an adapter holding a tensor the run does not train (a module_to_save copy of output_layer, a name of no
     * module): refused, naming the tensor and the file, not dropped without a word */
    {
        const char *extra[2] = {"base_model.model.transformer.output_layer.weight",
                                "base_model.model.transformer.encoder.layers.0.self_attention.bogus.lora_A.weight"};
        const char *want[2] = {"trains LoRA only", "does not train"};
        for (int e = 0; e < 2; e++) {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "/tmp/glm_test_adapter_x%d_%d", e, (int)getpid());
            glm_rmtree(tmp);
            glm_mkdir_p(tmp);
            char *src = glm_path_join(adir, "adapter_model.safetensors"), *dst = glm_path_join(tmp, "adapter_model.safetensors");
            char *ca = glm_path_join(adir, "adapter_config.json"), *cb = glm_path_join(tmp, "adapter_config.json");
            char *data = NULL;
            size_t len = 0;
            glm_st_set *s = NULL;
            CHECK(glm_read_file(ca, &data, &len) == GLM_OK && glm_write_file_atomic(cb, data, len) == GLM_OK, "copy config");
            free(data);
            static float zeros[64 * 4];
            if (glm_st_open(src, &s) == GLM_OK) {
                size_t n = glm_st_count(s);
                glm_st_tensor *ts = calloc(n + 1, sizeof *ts);
                for (size_t i = 0; i < n; i++) ts[i] = *glm_st_at(s, i);
                ts[n] = (glm_st_tensor){.name = (char *)extra[e], .dtype = GLM_ST_F32, .ndim = 2, .shape = {4, 64},
                                        .numel = 256, .data = zeros, .nbytes = sizeof zeros};
                CHECK(glm_st_write(dst, ts, n + 1, NULL, 0) == GLM_OK, "write the adapter: %s", glm_errmsg());
                free(ts);
                glm_st_close(s);
            }
            lc.targets = "all";
            lc.r = 4;
            CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK, "create r=4");
            const char *msg = l && glm_lora_load_peft(l, tmp) != GLM_OK ? glm_errmsg() : "";
            CHECK(strstr(msg, extra[e]) && strstr(msg, dst) && strstr(msg, want[e]) && strstr(msg, "hint"),
                  "adapter with %s refused: %s", extra[e], msg);
            glm_lora_free(l);
            glm_rmtree(tmp);
            free(src), free(dst), free(ca), free(cb);
        }
    }
    lc.r = 4;
    lc.use_rslora = true;
    CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK && fabsf(l->scaling - 4.0f) < 1e-6f, "rsLoRA scaling alpha/sqrt(r)");
    glm_lora_free(l);
    lc.use_rslora = false;
    lc.r = 0;
    CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_ERR_ARG, "r = 0 refused");
    /* same seed -> same init */
    lc.r = 4;
    glm_lora *l2 = NULL;
    glm_lora_create(m, &lc, 5, &l);
    glm_lora_create(m, &lc, 5, &l2);
    CHECK(memcmp(l->params[2].w, l2->params[2].w, l->params[2].numel * 4) == 0, "seeded init is reproducible");
    /* bad batch: target on the first token of a document */
    golden g;
    if (golden_load(fixtures, "chatglm", &g)) {
        glm_batch b = golden_batch(&g, 1, 1);
        uint8_t saved = g.targets[g.T + 16];
        g.targets[g.T + 16] = 1; /* row 1's second document starts at 16 */
        double ls;
        int64_t nt;
        CHECK(glm_model_step(m, l, &b, 1, 1, 0, 0, &ls, &nt) == GLM_ERR_ARG && strstr(glm_errmsg(), "first token"),
              "target at a document start refused: %s", glm_errmsg());
        g.targets[g.T + 16] = saved;
        uint32_t id = g.ids[g.T + 3];
        g.ids[g.T + 3] = 600;
        CHECK(glm_model_step(m, l, &b, 1, 1, 0, 0, &ls, &nt) == GLM_ERR_ARG && strstr(glm_errmsg(), "vocabulary"),
              "id >= V refused: %s", glm_errmsg());
        g.ids[g.T + 3] = id;
        golden_free(&g);
    }
    glm_lora_free(l);
    glm_lora_free(l2);
    glm_model_free(m);
}

/* Writes the chatglm checkpoint to tmp/model.safetensors with one tensor dropped or re-shaped. */
static int write_broken(const char *src, const char *dst, const char *drop, const char *reshape) {
    glm_st_set *s = NULL;
    if (glm_st_open(src, &s) != GLM_OK) return 0;
    size_t n = glm_st_count(s), k = 0;
    glm_st_tensor *ts = calloc(n, sizeof *ts);
    for (size_t i = 0; i < n; i++) {
        const glm_st_tensor *t = glm_st_at(s, i);
        if (drop && !strcmp(t->name, drop)) continue;
        ts[k] = *t;
        if (reshape && !strcmp(t->name, reshape)) { /* [C] -> [C/2], half the bytes */
            ts[k].shape[0] /= 2;
            ts[k].numel /= 2;
            ts[k].nbytes /= 2;
        }
        k++;
    }
    char *p = glm_path_join(dst, "model.safetensors");
    glm_status st = glm_st_write(p, ts, k, NULL, 0);
    free(p);
    free(ts);
    glm_st_close(s);
    return st == GLM_OK;
}

static void copy_config(const char *src, const char *dst) {
    char *a = glm_path_join(src, "config.json"), *b = glm_path_join(dst, "config.json"), *data;
    size_t len;
    if (glm_read_file(a, &data, &len) == GLM_OK) {
        glm_write_file_atomic(b, data, len);
        free(data);
    }
    free(a);
    free(b);
}

static void test_load_errors(void) {
    const glm_backend *be = glm_backend_cpu();
    char src[1200], tmp[256];
    snprintf(src, sizeof src, "%s/chatglm", fixtures);
    snprintf(tmp, sizeof tmp, "/tmp/glm_test_model_%d", (int)getpid());
    glm_rmtree(tmp);
    glm_mkdir_p(tmp);
    copy_config(src, tmp);
    glm_model *m = NULL;
    const char *victim = "transformer.encoder.layers.1.mlp.dense_4h_to_h.weight";
    CHECK(write_broken(src, tmp, victim, NULL), "write broken copy");
    glm_status st = glm_model_load(tmp, be, 0, &m);
    CHECK(st != GLM_OK && strstr(glm_errmsg(), victim), "missing tensor named: %s", glm_errmsg());
    if (getenv("GLM_TEST_VERBOSE")) printf("missing: %s\n", glm_errmsg());
    const char *ln = "transformer.encoder.layers.0.post_attention_layernorm.weight";
    CHECK(write_broken(src, tmp, NULL, ln), "write reshaped copy");
    st = glm_model_load(tmp, be, 0, &m);
    CHECK(st == GLM_ERR_MISMATCH && strstr(glm_errmsg(), ln) && strstr(glm_errmsg(), "64") && strstr(glm_errmsg(), "32"),
          "wrong shape named with expected and found: %s", glm_errmsg());
    if (getenv("GLM_TEST_VERBOSE")) printf("shape: %s\n", glm_errmsg());
    CHECK(write_broken(src, tmp, NULL, NULL), "write full copy");
    st = glm_model_load(tmp, be, 0, &m);
    CHECK(st == GLM_OK, "the intact single-file copy loads: %s", glm_errmsg());
    glm_model_free(m);
    m = NULL;
    char *p = glm_path_join(tmp, "model.safetensors");
    glm_mmap mm;
    size_t size = 0;
    if (glm_mmap_open(&mm, p) == GLM_OK) {
        size = mm.size;
        glm_mmap_close(&mm);
    }
    CHECK(size > 1000 && truncate(p, (off_t)size - 1000) == 0, "truncate");
    st = glm_model_load(tmp, be, 0, &m);
    CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "model.safetensors"), "truncated file: %s", glm_errmsg());
    if (getenv("GLM_TEST_VERBOSE")) printf("truncated: %s\n", glm_errmsg());
    free(p);
    /* no weights at all */
    glm_rmtree(tmp);
    glm_mkdir_p(tmp);
    copy_config(src, tmp);
    CHECK(glm_model_load(tmp, be, 0, &m) != GLM_OK && strlen(glm_errmsg()) > 0, "no weights: %s", glm_errmsg());
    glm_rmtree(tmp);
    CHECK(glm_model_load(tmp, be, 0, &m) == GLM_ERR_IO && strstr(glm_errmsg(), "config.json"), "no dir: %s", glm_errmsg());
}

static void test_config(void) {
    char dir[1200];
    glm_config c;
    snprintf(dir, sizeof dir, "%s/chatglm", fixtures);
    CHECK(glm_config_load(dir, 0, &c) == GLM_OK, "chatglm config: %s", glm_errmsg());
    CHECK(c.layout == GLM_LAYOUT_CHATGLM && c.C == 64 && c.L == 2 && c.H == 4 && c.Hkv == 2 && c.Dh == 16 && c.F == 160 &&
              c.V == 512 && c.rope_dim == 8 && c.rope_base == 10000.0 && c.qkv_bias && fabsf(c.eps - 1.5625e-07f) < 1e-12f,
          "chatglm config fields");
    snprintf(dir, sizeof dir, "%s/hf", fixtures);
    CHECK(glm_config_load(dir, 0, &c) == GLM_OK, "hf config: %s", glm_errmsg());
    CHECK(c.layout == GLM_LAYOUT_HF && c.C == 64 && c.L == 2 && c.H == 4 && c.Hkv == 2 && c.Dh == 16 && c.F == 160 && c.V == 512 &&
              c.rope_dim == 8 && c.rope_base == 10000.0 && c.qkv_bias && !c.rope_suspect,
          "hf config fields; a tiny model's rope_theta 10000 is taken as it says");
    /* a GLM-4-9B-Chat-1M -hf config as published, with its wrong rope_theta */
    char big[] = "/tmp/glmcfg.XXXXXX";
    if (mkdtemp(big)) {
        char p[1300];
        snprintf(p, sizeof p, "%s/config.json", big);
        FILE *f = fopen(p, "w");
        fputs("{\"model_type\": \"glm\", \"hidden_size\": 4096, \"num_hidden_layers\": 40, \"num_attention_heads\": 32,"
              " \"num_key_value_heads\": 4, \"head_dim\": 128, \"intermediate_size\": 13696, \"vocab_size\": 151552,"
              " \"rms_norm_eps\": 1.5625e-07, \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5,"
              " \"attention_bias\": true}", f);
        fclose(f);
        int lvl = glm_log_level;
        glm_log_level = 0; /* the expected warning */
        CHECK(glm_config_load(big, 0, &c) == GLM_OK && c.rope_suspect && c.Hkv == 4 && c.rope_dim == 64,
              "GLM-4-9B -hf config with rope_theta 10000 flagged: %s", glm_errmsg());
        glm_log_level = lvl;
        CHECK(glm_config_load(big, 1e8, &c) == GLM_OK && !c.rope_suspect && c.rope_base == 1e8, "... unless overridden");
        unlink(p);
        rmdir(big);
    }
    CHECK(glm_config_load(dir, 1e8, &c) == GLM_OK && c.rope_base == 1e8 && c.rope_overridden && !c.rope_suspect,
          "rope_theta override");
    CHECK(glm_config_load("/nonexistent", 0, &c) == GLM_ERR_IO, "missing config");
}

static void test_init_random(void) {
    const glm_backend *be = glm_backend_cpu();
    glm_config c = {.C = 32, .L = 2, .H = 4, .Hkv = 2, .Dh = 8, .F = 48, .V = 96, .eps = 1e-6f, .rope_base = 5e6,
                    .rope_dim = 4, .qkv_bias = true};
    for (int lay = 0; lay < 2; lay++) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "/tmp/glm_test_init_%d_%d", (int)getpid(), lay);
        glm_status st = glm_model_init_random(&c, 11, tmp, (glm_layout)lay);
        CHECK(st == GLM_OK, "init-model %s: %s", glm_layout_name(lay), glm_errmsg());
        glm_model *m = NULL;
        st = glm_model_load(tmp, be, 0, &m);
        CHECK(st == GLM_OK, "load the random %s model: %s", glm_layout_name(lay), glm_errmsg());
        if (st) continue;
        CHECK(m->cfg.layout == (glm_layout)lay && m->cfg.rope_base == 5e6 && m->cfg.rope_dim == 4 && m->cfg.V == 96,
              "random model config round trip");
        uint32_t ids[8] = {1, 5, 9, 13, 95, 0, 7, 3};
        uint8_t tg[8] = {0, 1, 1, 1, 0, 0, 1, 1};
        int32_t pos[8] = {0, 1, 2, 3, 0, 1, 2, 3}, doc[8] = {0, 0, 0, 0, 1, 1, 1, 1};
        glm_batch b = {1, 8, ids, tg, pos, doc, NULL};
        double ls;
        int64_t nt;
        CHECK(glm_model_step(m, NULL, &b, 1, 0, 0, 0, &ls, &nt) == GLM_OK && nt == 5 && isfinite(ls) && ls / nt > 1 &&
                  ls / nt < 20,
              "random model loss %g over %lld", ls / nt, (long long)nt);
        glm_model_free(m);
        glm_rmtree(tmp);
    }
}

int main(void) {
    const char *data_dir = test_data_dir();
    snprintf(fixtures, sizeof fixtures, "%s/tiny-glm4", data_dir);
    test_config();
    test_layout("chatglm");
    test_layout("hf");
    test_targets_and_adapter();
    test_load_errors();
    test_init_random();
    return check_summary("test_model");
}
