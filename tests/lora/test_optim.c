#define _GNU_SOURCE
/* tests/lora/test_optim.c: LR schedules against hand-computed values; clip + AdamW against the
 * fixtures' torch results (golden.safetensors: grad.<key>, grad_norm, step1.<key>). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lora/adapter/optim.h"
#include "common/safetensors.h"
#include "tests/check.h"

static void test_schedules(void) {
    glm_sched s;
    const double lr = 1e-3;
    /* linear, 10 steps, 2 warmup: 0, lr/2, lr, then lr*(10-k)/8 */
    CHECK(glm_sched_init(&s, GLM_SCHED_LINEAR, lr, 10, 2, 0, 0, 0) == GLM_OK, "%s", glm_errmsg());
    double lin[11] = {0, 5e-4, 1e-3, 8.75e-4, 7.5e-4, 6.25e-4, 5e-4, 3.75e-4, 2.5e-4, 1.25e-4, 0};
    for (int k = 0; k <= 10; k++)
        CHECK(check_close(glm_lr_at(&s, k), lin[k], 1e-12, 1e-15), "linear %d: %g vs %g", k, glm_lr_at(&s, k), lin[k]);
    CHECK(glm_lr_at(&s, 12) == 0, "linear past the end is 0");
    /* constant ignores warmup; constant_with_warmup ramps */
    glm_sched_init(&s, GLM_SCHED_CONSTANT, lr, 10, 4, 0, 0, 0);
    CHECK(glm_lr_at(&s, 0) == lr && glm_lr_at(&s, 9) == lr, "constant");
    glm_sched_init(&s, GLM_SCHED_CONSTANT_WITH_WARMUP, lr, 10, 4, 0, 0, 0);
    CHECK(check_close(glm_lr_at(&s, 1), 2.5e-4, 1e-12, 0) && glm_lr_at(&s, 4) == lr &&
              glm_lr_at(&s, 100) == lr, "constant_with_warmup");
    /* cosine, no warmup, 10 steps: lr * 0.5 * (1 + cos(pi k / 10)) */
    glm_sched_init(&s, GLM_SCHED_COSINE, lr, 10, 0, 0, 0, 0);
    CHECK(glm_lr_at(&s, 0) == lr, "cosine start");
    CHECK(check_close(glm_lr_at(&s, 5), 5e-4, 1e-12, 0), "cosine mid %g", glm_lr_at(&s, 5));
    /* k=2: 0.5 * (1 + cos(pi/5)) = 0.5 * (1 + 0.80901699437) = 0.904508497 */
    CHECK(check_close(glm_lr_at(&s, 2), 9.04508497187e-4, 1e-10, 0), "cosine 2 %.12g", glm_lr_at(&s, 2));
    CHECK(fabs(glm_lr_at(&s, 10)) < 1e-18, "cosine end");
    /* cosine with 2 warmup of 12: step 7 -> p = 5/10 -> lr/2 */
    glm_sched_init(&s, GLM_SCHED_COSINE, lr, 12, 2, 0, 0, 0);
    CHECK(check_close(glm_lr_at(&s, 1), 5e-4, 1e-12, 0) && check_close(glm_lr_at(&s, 7), 5e-4, 1e-12, 0),
          "cosine warmup");
    /* cosine_with_min_lr, min_lr 1e-4 (rate 0.1): mid = lr*(0.5*0.9+0.1) = 5.5e-4; end 1e-4 */
    CHECK(glm_sched_init(&s, GLM_SCHED_COSINE_WITH_MIN_LR, lr, 10, 0, 0, 1e-4, 0) == GLM_OK, "min lr");
    CHECK(check_close(glm_lr_at(&s, 5), 5.5e-4, 1e-12, 0), "min-lr mid %g", glm_lr_at(&s, 5));
    CHECK(check_close(glm_lr_at(&s, 10), 1e-4, 1e-12, 0), "min-lr end %g", glm_lr_at(&s, 10));
    glm_sched_init(&s, GLM_SCHED_COSINE_WITH_MIN_LR, lr, 10, 0, 0, 0, 0.2);
    CHECK(check_close(glm_lr_at(&s, 10), 2e-4, 1e-12, 0), "min-lr-rate end");
    /* warmup ratio: ceil(0.1 * 25) = 3 */
    glm_sched_init(&s, GLM_SCHED_LINEAR, lr, 25, 0, 0.1, 0, 0);
    CHECK(s.warmup_steps == 3, "warmup ratio -> %lld", (long long)s.warmup_steps);
    CHECK(check_close(glm_lr_at(&s, 1), lr / 3, 1e-12, 0), "ratio warmup lr");
    glm_sched_init(&s, GLM_SCHED_LINEAR, lr, 20, 0, 0.1, 0, 0);
    CHECK(s.warmup_steps == 2, "ceil(2.0) = 2 -> %lld", (long long)s.warmup_steps);
    glm_sched_init(&s, GLM_SCHED_LINEAR, lr, 25, 5, 0.5, 0, 0);
    CHECK(s.warmup_steps == 5, "warmup steps win over ratio");
    /* errors */
    glm_sched_type t;
    CHECK(glm_sched_parse_type("cosine_with_min_lr", &t) == GLM_OK && t == GLM_SCHED_COSINE_WITH_MIN_LR, "parse");
    CHECK(glm_sched_parse_type("cosin", &t) == GLM_ERR_ARG && strstr(glm_errmsg(), "cosin"), "bad type");
    CHECK(glm_sched_init(&s, GLM_SCHED_COSINE_WITH_MIN_LR, lr, 10, 0, 0, 0, 0) == GLM_ERR_ARG, "no floor");
    CHECK(glm_sched_init(&s, GLM_SCHED_LINEAR, lr, 0, 0, 0, 0, 0) == GLM_ERR_ARG, "0 steps");
    CHECK(glm_sched_init(&s, GLM_SCHED_LINEAR, -1, 10, 0, 0, 0, 0) == GLM_ERR_ARG, "negative lr");
    CHECK(glm_sched_init(&s, GLM_SCHED_LINEAR, lr, 10, 0, 1.5, 0, 0) == GLM_ERR_ARG, "ratio > 1");
}

#define PREFIX "base_model.model."

static void test_adamw_golden(const char *data_dir, const char *layout, double want_norm) {
    char *gp = NULL, *ap = NULL;
    if (asprintf(&gp, "%s/tiny-glm4/%s/golden.safetensors", data_dir, layout) < 0 ||
        asprintf(&ap, "%s/tiny-glm4/%s/adapter_init", data_dir, layout) < 0)
        abort();
    glm_st_set *g = NULL, *a = NULL;
    CHECK(glm_st_open(gp, &g) == GLM_OK, "%s", glm_errmsg());
    CHECK(glm_st_open(ap, &a) == GLM_OK, "%s", glm_errmsg());
    if (!g || !a) return;
    size_t n = glm_st_count(a);
    glm_param *p = calloc(n, sizeof(*p));
    for (size_t i = 0; i < n; i++) {
        const glm_st_tensor *t = glm_st_at(a, i);
        snprintf(p[i].name, sizeof p[i].name, "%s", t->name + strlen(PREFIX));
        p[i].ndim = 2;
        p[i].shape[0] = t->shape[0];
        p[i].shape[1] = t->shape[1];
        p[i].numel = t->numel;
        p[i].w = malloc(t->numel * sizeof(float));
        p[i].g = malloc(t->numel * sizeof(float));
        CHECK(glm_st_read_f32(a, t->name, 2, t->shape, p[i].w) == GLM_OK, "%s", glm_errmsg());
        char key[512];
        snprintf(key, sizeof key, "grad.%s", t->name);
        CHECK(glm_st_read_f32(g, key, 2, t->shape, p[i].g) == GLM_OK, "%s", glm_errmsg());
    }
    glm_adamw_cfg cfg = glm_adamw_defaults();
    cfg.weight_decay = 0.01;
    cfg.max_grad_norm = 1.0;
    glm_optim o;
    CHECK(glm_optim_init(&o, NULL, p, n, &cfg) == GLM_OK, "%s", glm_errmsg());
    double norm;
    glm_grad_norm(&o, p, n, &norm);
    CHECK(check_close(norm, want_norm, 1e-6, 0), "%s grad_norm %.9g vs %.9g", layout, norm, want_norm);
    float gn_golden;
    int64_t one = 1;
    glm_st_read_f32(g, "grad_norm", 1, &one, &gn_golden);
    CHECK(check_close(norm, gn_golden, 1e-6, 0), "grad_norm vs golden tensor");
    glm_step_stats st;
    CHECK(glm_optim_step(&o, p, n, 1e-3, &st) == GLM_OK, "%s", glm_errmsg());
    CHECK(o.step == 1, "step count");
    CHECK(check_close(st.clip_coef, 1.0 / (want_norm + 1e-6), 1e-6, 0), "clip coef %g", st.clip_coef);
    double worst = 0;
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++) {
        char key[512];
        snprintf(key, sizeof key, "step1." PREFIX "%s", p[i].name);
        float *want = malloc(p[i].numel * sizeof(float));
        CHECK(glm_st_read_f32(g, key, 2, p[i].shape, want) == GLM_OK, "%s", glm_errmsg());
        for (int64_t j = 0; j < p[i].numel; j++) {
            double d = fabs(p[i].w[j] - want[j]) / fmax(fabs(want[j]), 1e-6);
            if (d > worst) worst = d;
            if (!check_close(p[i].w[j], want[j], 1e-4, 1e-6)) nbad++;
        }
        /* m after one step = (1 - beta1) * coef * g */
        float *m = malloc(p[i].numel * sizeof(float)), *v = malloc(p[i].numel * sizeof(float));
        glm_optim_get_state(&o, i, m, v);
        CHECK(check_close(m[0], 0.1 * st.clip_coef * p[i].g[0], 1e-5, 1e-12), "m %s", p[i].name);
        CHECK(check_close(v[0], 0.001 * pow(st.clip_coef * p[i].g[0], 2), 1e-5, 1e-20), "v %s", p[i].name);
        free(m);
        free(v);
        free(want);
    }
    printf("  %s: grad_norm %.9g (golden %.9g), step1 worst relative difference %.3g\n", layout,
           norm, want_norm, worst);
    CHECK(nbad == 0, "%s: %zu step1 elements off by more than 1e-4 relative (worst %g)", layout, nbad, worst);

    /* non-finite gradient: refused, nothing changes */
    float saved_w = p[0].w[0], saved_g = p[0].g[1];
    p[0].g[1] = NAN;
    CHECK(glm_optim_step(&o, p, n, 1e-3, &st) == GLM_ERR_NUMERIC, "NaN grad refused");
    CHECK(o.step == 1 && p[0].w[0] == saved_w, "no update on NaN");
    p[0].g[1] = INFINITY;
    CHECK(glm_optim_step(&o, p, n, 1e-3, &st) == GLM_ERR_NUMERIC, "inf grad refused");
    p[0].g[1] = saved_g;
    /* state round trip through get/set into a fresh optimizer, then identical second steps */
    glm_optim o2;
    glm_optim_init(&o2, NULL, p, n, &cfg);
    for (size_t i = 0; i < n; i++) {
        float *m = malloc(p[i].numel * sizeof(float)), *v = malloc(p[i].numel * sizeof(float));
        glm_optim_get_state(&o, i, m, v);
        glm_optim_set_state(&o2, i, m, v);
        free(m);
        free(v);
    }
    o2.step = o.step;
    float *wcopy = malloc(p[0].numel * sizeof(float));
    memcpy(wcopy, p[0].w, p[0].numel * sizeof(float));
    glm_optim_step(&o, p, n, 5e-4, NULL);
    float *w1 = malloc(p[0].numel * sizeof(float));
    memcpy(w1, p[0].w, p[0].numel * sizeof(float));
    /* rewind param 0 only is not enough (o2 updates all), so compare m/v of param 0 instead */
    memcpy(p[0].w, wcopy, p[0].numel * sizeof(float));
    glm_optim_step(&o2, p, n, 5e-4, NULL);
    CHECK(memcmp(w1, p[0].w, p[0].numel * sizeof(float)) == 0, "resumed state gives the same step");
    free(w1);
    free(wcopy);
    glm_optim_free(&o2);
    /* mismatched param list */
    CHECK(glm_optim_step(&o, p, n - 1, 1e-3, NULL) == GLM_ERR_MISMATCH, "n mismatch");
    glm_optim_free(&o);
    /* max_grad_norm 0 disables clipping */
    cfg.max_grad_norm = 0;
    glm_optim_init(&o, NULL, p, n, &cfg);
    glm_optim_step(&o, p, n, 1e-3, &st);
    CHECK(st.clip_coef == 1.0f, "no clip when max_grad_norm = 0");
    glm_optim_free(&o);
    cfg.beta1 = 1.0;
    CHECK(glm_optim_init(&o, NULL, p, n, &cfg) == GLM_ERR_ARG, "beta1 = 1 refused");
    for (size_t i = 0; i < n; i++) {
        free(p[i].w);
        free(p[i].g);
    }
    free(p);
    glm_st_close(g);
    glm_st_close(a);
    free(gp);
    free(ap);
}

/* LoRA+ by hand: the first AdamW step from zero moments moves each weight by
 *   m1 = (1-b1) g, v1 = (1-b2) g^2, bias corrections 1-b1 and 1-b2
 *   => dw = -lr_i * (m1 / (1-b1)) / (sqrt(v1 / (1-b2)) + eps) = -lr_i * g / (|g| + eps)
 * so with weight decay 0, a lora_A weight moves by -lr g/(|g|+eps) and a lora_B weight by
 * -ratio lr g/(|g|+eps) (PEFT's create_loraplus_optimizer: group B at lr x loraplus_lr_ratio).
 * With weight decay wd the B weight is first scaled by 1 - ratio lr wd (decoupled decay at its own
 * lr, as torch.optim.AdamW does per param group). */
static void test_loraplus(void) {
    glm_param p[2] = {0};
    const char *names[2] = {"model.layers.0.self_attn.q_proj.lora_A.weight", "model.layers.0.self_attn.q_proj.lora_B.weight"};
    float g[2][4] = {{0.5f, -2.0f, 1e-3f, 3.0f}, {-0.25f, 4.0f, -1.0f, 0.125f}};
    float w0[2][4] = {{0.1f, 0.2f, -0.3f, 0.4f}, {1.0f, -1.0f, 0.5f, -0.5f}};
    for (int i = 0; i < 2; i++) {
        snprintf(p[i].name, sizeof p[i].name, "%s", names[i]);
        p[i].ndim = 2;
        p[i].shape[0] = 2;
        p[i].shape[1] = 2;
        p[i].numel = 4;
        p[i].w = malloc(16);
        p[i].g = malloc(16);
        memcpy(p[i].w, w0[i], 16);
        memcpy(p[i].g, g[i], 16);
    }
    double lr = 1e-3, ratio = 16, wd = 0.1;
    glm_adamw_cfg cfg = glm_adamw_defaults();
    cfg.max_grad_norm = 0; /* no clipping: g as given */
    cfg.weight_decay = wd;
    cfg.lr_ratio_b = ratio;
    glm_optim o;
    CHECK(glm_optim_init(&o, NULL, p, 2, &cfg) == GLM_OK, "%s", glm_errmsg());
    CHECK(glm_optim_step(&o, p, 2, lr, NULL) == GLM_OK, "%s", glm_errmsg());
    for (int i = 0; i < 2; i++) {
        double lri = i ? lr * ratio : lr;
        for (int j = 0; j < 4; j++) {
            double want = w0[i][j] * (1 - lri * wd) - lri * g[i][j] / (fabs(g[i][j]) + 1e-8);
            CHECK(check_close(p[i].w[j], want, 1e-6, 1e-9), "%s[%d]: %.9g, by hand %.9g", i ? "B" : "A", j, p[i].w[j],
                  want);
        }
    }
    /* ratio 0 is off: both at lr */
    glm_optim_free(&o);
    cfg.lr_ratio_b = 0;
    for (int i = 0; i < 2; i++) memcpy(p[i].w, w0[i], 16);
    CHECK(glm_optim_init(&o, NULL, p, 2, &cfg) == GLM_OK && glm_optim_step(&o, p, 2, lr, NULL) == GLM_OK, "step");
    double want = w0[1][1] * (1 - lr * wd) - lr * g[1][1] / (fabs(g[1][1]) + 1e-8);
    CHECK(check_close(p[1].w[1], want, 1e-6, 1e-9), "ratio 0: B at lr (%.9g vs %.9g)", p[1].w[1], want);
    glm_optim_free(&o);
    cfg.lr_ratio_b = -1;
    CHECK(glm_optim_init(&o, NULL, p, 2, &cfg) == GLM_ERR_ARG, "negative ratio refused");
    for (int i = 0; i < 2; i++) {
        free(p[i].w);
        free(p[i].g);
    }
}

/* Params laid out flat (glm_param.w_flat: one norm and one update for all, the zeros between them
 * staying zeros) against the same params in their own buffers: the same weights and state, bit for
 * bit, with clipping, weight decay and LoRA+ (which takes the per-param path in both). */
static void test_flat(void) {
    enum { NP = 3, STEPS = 3 };
    const int64_t numel[NP] = {5, 8, 3}, off[NP] = {0, 8, 16}; /* 16-byte aligned, gaps of 3 and 0 */
    const char *names[NP] = {"a.lora_A.weight", "a.lora_B.weight", "b.lora_A.weight"};
    for (int plus = 0; plus < 2; plus++) {
        float *wf = calloc(20, 4), *gf = calloc(20, 4);
        glm_param pf[NP] = {0}, ps[NP] = {0};
        for (int i = 0; i < NP; i++) {
            glm_param *a = &pf[i], *b = &ps[i];
            snprintf(a->name, sizeof a->name, "%s", names[i]);
            snprintf(b->name, sizeof b->name, "%s", names[i]);
            a->ndim = b->ndim = 1;
            a->shape[0] = b->shape[0] = a->numel = b->numel = numel[i];
            a->w_flat = wf, a->g_flat = gf, a->flat_off = off[i];
            a->w = wf + off[i], a->g = gf + off[i];
            b->w = malloc(4 * (size_t)numel[i]), b->g = malloc(4 * (size_t)numel[i]);
            for (int64_t j = 0; j < numel[i]; j++) a->w[j] = b->w[j] = (float)(0.1 * (i + 1) - 0.03 * (double)j);
        }
        glm_adamw_cfg cfg = glm_adamw_defaults();
        cfg.weight_decay = 0.01;
        cfg.max_grad_norm = 0.5; /* clips: the norm of the grads below is above it */
        cfg.lr_ratio_b = plus ? 16 : 0;
        glm_optim of, os;
        CHECK(glm_optim_init(&of, NULL, pf, NP, &cfg) == GLM_OK && of.m_flat, "flat params: one state buffer");
        CHECK(glm_optim_init(&os, NULL, ps, NP, &cfg) == GLM_OK && !os.m_flat, "separate params: a buffer each");
        for (int t = 0; t < STEPS; t++) {
            for (int i = 0; i < NP; i++)
                for (int64_t j = 0; j < numel[i]; j++) pf[i].g[j] = ps[i].g[j] = (float)(0.7 * (j - 2) + 0.3 * i + 0.1 * t);
            glm_step_stats sf, ss;
            CHECK(glm_optim_step(&of, pf, NP, 1e-2, &sf) == GLM_OK && glm_optim_step(&os, ps, NP, 1e-2, &ss) == GLM_OK, "steps");
            CHECK(sf.grad_norm == ss.grad_norm && sf.clip_coef == ss.clip_coef && sf.clip_coef < 1.0f,
                  "LoRA+ %d step %d: norm %.9g / %.9g, clip %.9g / %.9g", plus, t, sf.grad_norm, ss.grad_norm, sf.clip_coef,
                  ss.clip_coef);
        }
        int same = 1, gaps = 1;
        for (int i = 0; i < NP; i++)
            same &= !memcmp(pf[i].w, ps[i].w, 4 * (size_t)numel[i]) && !memcmp(of.m[i], os.m[i], 4 * (size_t)numel[i]) &&
                    !memcmp(of.v[i], os.v[i], 4 * (size_t)numel[i]);
        for (int64_t j = 5; j < 8; j++) gaps &= wf[j] == 0.0f && of.m_flat[j] == 0.0f && of.v_flat[j] == 0.0f;
        CHECK(same, "LoRA+ %d: flat and separate params give the same weights, m and v bit for bit", plus);
        CHECK(gaps, "LoRA+ %d: the gaps between flat params stay zero", plus);
        glm_optim_free(&of);
        glm_optim_free(&os);
        for (int i = 0; i < NP; i++) free(ps[i].w), free(ps[i].g);
        free(wf), free(gf);
    }
}

int main(void) {
    test_schedules();
    test_loraplus();
    test_flat();
    const char *data_dir = test_data_dir();
    test_adamw_golden(data_dir, "chatglm", 1.4943607960178498); /* meta.json summary */
    test_adamw_golden(data_dir, "hf", 1.3972674672955805);
    return check_summary("test_optim");
}
