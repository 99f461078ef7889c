/* tests/gpu/test_cuda_model.c: glm_model_step / glm_model_logits on the CUDA backend (bf16
 * weights and activations, fp32 LoRA) against the CPU backend (fp32) on the tiny GLM-4 fixtures
 * ($GLM_SHARED/fixtures/tiny-glm4/{chatglm,hf}: model, PEFT adapter_init, golden batch), both
 * checkpoint layouts: logits, loss and every LoRA grad within the bf16 tolerances of
 * tests/gpu/tol.h; the loss also against the float64 golden; gradient checkpointing gives the
 * same grads; LoRA dropout masks agree with the CPU's. Prints one line per comparison.
 * Exits 77 when there is no CUDA device or no fixtures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "lora/lora.h"
#include "lora/model.h"
#include "lora/safetensors.h"
#include "tests/check.h"
#include "tests/golden_batch.h"
#include "tests/gpu/tol.h"

static char fixtures[1024];
static const glm_backend *cpu, *gpu;


static double rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    double r = den > 0 ? sqrt(num / den) : sqrt(num);
    return isnan(r) ? INFINITY : r;
}

/* all grads of an adapter, as one host array (downloaded from the backend) */
static float *grads(const glm_backend *be, glm_lora *l, int64_t *n_out) {
    int64_t n = 0;
    for (int i = 0; i < l->n_params; i++) n += l->params[i].numel;
    float *g = malloc(n * 4), *p = g;
    for (int i = 0; i < l->n_params; i++) {
        CHECK(be->download(be, p, l->params[i].g, l->params[i].numel * 4) == GLM_OK, "download grad: %s", glm_errmsg());
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
    s->m->loss_chunk = 7; /* several loss-head chunks */
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
    glm_batch b = {g.B, g.T, g.ids, g.targets, g.pos, g.doc};
    int64_t N = (int64_t)g.B * g.T, V = c.m->cfg.V;
    char what[400];

    /* logits with the adapter */
    float *lc = malloc(N * V * 4), *lg = malloc(N * V * 4);
    CHECK(glm_model_logits(c.m, c.l, &b, lc) == GLM_OK, "cpu logits: %s", glm_errmsg());
    CHECK(glm_model_logits(d.m, d.l, &b, lg) == GLM_OK, "cuda logits: %s", glm_errmsg());
    snprintf(what, sizeof what, "%s logits", layout);
    report(what, rel(lg, lc, N * V), TOL_MODEL_LOGITS);

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
    report(what, rel(gg, gc, n), TOL_MODEL_GRAD);
    double worst = 0;
    int wi = 0;
    int64_t off = 0;
    for (int i = 0; i < c.l->n_params; i++) {
        double e = rel(gg + off, gc + off, c.l->params[i].numel);
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
    report(what, rel(gk, gg, n), 1e-6);
    CHECK(ls2 == lsg, "%s: checkpointed loss %.17g vs %.17g", layout, ls2, lsg);

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
    report(what, rel(dg, dc, n), TOL_MODEL_GRAD);

    free(lc), free(lg), free(gc), free(gg), free(gk), free(dc), free(dg);
    close_side(&c);
    close_side(&d);
    golden_free(&g);
}

int main(void) {
    if (glm_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    const char *shared = check_shared();
    snprintf(fixtures, sizeof fixtures, "%s/fixtures/tiny-glm4", shared);
    glm_status st;
    gpu = glm_backend_cuda(0, &st);
    if (!gpu) {
        printf("SKIPPED: CUDA backend: %s\n", glm_errmsg());
        return st == GLM_ERR_UNSUPPORTED ? 77 : 1;
    }
    cpu = glm_backend_cpu();
    test_layout("chatglm");
    test_layout("hf");
    glm_backend_cuda_close(gpu);
    return check_summary("test_cuda_model");
}
