/* lora/adapter/optim.c: LR schedules, gradient clipping and AdamW (see optim.h for the formulas).
 *
 * Two paths with identical semantics: with a backend (o->be != NULL) the work goes through
 * be->sumsq and be->adamw, in param_sumsq() and param_adamw() below; without one, the host
 * reference functions glm_sumsq_ref / glm_adamw_ref run on host arrays. Params laid out flat by
 * their owner (glm_param.w_flat: the LoRA adapter's) take one call of each for all of them (per
 * param with LoRA+'s second learning rate for the B matrices); others one sum per param, up to 256
 * a call, and one update per param. */
#include "lora/adapter/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ------------------------------------------------------------------ schedules */

static const char *const k_sched_names[] = {"constant", "constant_with_warmup", "linear", "cosine",
                                            "cosine_with_min_lr"};

glm_status glm_sched_parse_type(const char *name, glm_sched_type *out) {
    for (int i = 0; i < 5; i++)
        if (name && strcmp(name, k_sched_names[i]) == 0) {
            *out = (glm_sched_type)i;
            return GLM_OK;
        }
    return glm_err(GLM_ERR_ARG,
                   "lr-scheduler-type '%s' is not known; hint: use one of constant, "
                   "constant_with_warmup, linear, cosine, cosine_with_min_lr",
                   name ? name : "(null)");
}

const char *glm_sched_type_name(glm_sched_type t) {
    return (unsigned)t < 5 ? k_sched_names[t] : "?";
}

glm_status glm_sched_init(glm_sched *s, glm_sched_type type, double lr, int64_t total_steps,
                          int64_t warmup_steps, double warmup_ratio, double min_lr,
                          double min_lr_rate) {
    memset(s, 0, sizeof(*s));
    if (!(lr > 0) || !isfinite(lr))
        return glm_err(GLM_ERR_ARG, "learning-rate must be a positive number (got %g)", lr);
    if (total_steps < 1)
        return glm_err(GLM_ERR_ARG, "the run has %lld optimizer steps; need at least 1 (check "
                                    "max-steps / num-train-epochs and the data size)",
                       (long long)total_steps);
    if (warmup_steps < 0) return glm_err(GLM_ERR_ARG, "warmup-steps must be >= 0 (got %lld)", (long long)warmup_steps);
    if (!(warmup_ratio >= 0 && warmup_ratio <= 1))
        return glm_err(GLM_ERR_ARG, "warmup-ratio must be in [0, 1] (got %g)", warmup_ratio);
    if (min_lr < 0 || !isfinite(min_lr)) return glm_err(GLM_ERR_ARG, "min-lr must be >= 0 (got %g)", min_lr);
    if (min_lr > 0 && min_lr >= lr)
        return glm_err(GLM_ERR_ARG, "min-lr %g must be below learning-rate %g", min_lr, lr);
    if (!(min_lr_rate >= 0 && min_lr_rate < 1))
        return glm_err(GLM_ERR_ARG, "min-lr-rate must be in [0, 1) (got %g)", min_lr_rate);
    s->type = type;
    s->lr = lr;
    s->total_steps = total_steps;
    s->warmup_steps = warmup_steps > 0 ? warmup_steps : (int64_t)ceil(warmup_ratio * (double)total_steps);
    s->num_cycles = 0.5;
    s->min_lr_rate = min_lr > 0 ? min_lr / lr : min_lr_rate;
    if (type == GLM_SCHED_COSINE_WITH_MIN_LR && s->min_lr_rate == 0)
        return glm_err(GLM_ERR_ARG, "lr-scheduler-type cosine_with_min_lr needs min-lr (or a "
                                    "min_lr_rate); hint: e.g. --min-lr 1e-5, or use cosine");
    if (type != GLM_SCHED_COSINE && type != GLM_SCHED_COSINE_WITH_MIN_LR) s->min_lr_rate = 0;
    return GLM_OK;
}

double glm_lr_at(const glm_sched *s, int64_t step) {
    if (step < 0) step = 0;
    int64_t w = s->warmup_steps, N = s->total_steps;
    if (s->type == GLM_SCHED_CONSTANT) return s->lr;
    if (step < w) return s->lr * (double)step / (double)(w > 1 ? w : 1);
    double denom = (double)(N - w > 1 ? N - w : 1);
    switch (s->type) {
    case GLM_SCHED_CONSTANT_WITH_WARMUP:
        return s->lr;
    case GLM_SCHED_LINEAR: {
        double f = (double)(N - step) / denom;
        return s->lr * (f > 0 ? f : 0);
    }
    case GLM_SCHED_COSINE:
    case GLM_SCHED_COSINE_WITH_MIN_LR: {
        double p = (double)(step - w) / denom;
        double f = 0.5 * (1.0 + cos(M_PI * 2.0 * s->num_cycles * p));
        f = f * (1.0 - s->min_lr_rate) + s->min_lr_rate;
        return s->lr * (f > 0 ? f : 0);
    }
    default:
        return s->lr;
    }
}

/* ------------------------------------------------------------------ reference math */

double glm_sumsq_ref(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

void glm_adamw_ref(float *w, const float *g, float *m, float *v, int64_t n, double lr, double beta1,
                   double beta2, double eps, double weight_decay, float grad_scale, int64_t step) {
    /* torch.optim.adamw._single_tensor_adamw; scalars from Python floats (double) */
    const float decay = (float)(1.0 - lr * weight_decay);
    const float a1 = (float)(1.0 - beta1), b2 = (float)beta2, a2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2), epsf = (float)eps;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        w[i] = w[i] * decay;                        /* param.mul_(1 - lr * wd) */
        m[i] = m[i] + a1 * (gi - m[i]);             /* exp_avg.lerp_(grad, 1 - beta1) */
        v[i] = v[i] * b2 + a2 * gi * gi;            /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2) */
        float denom = sqrtf(v[i]) / bc2_sqrt + epsf; /* (v.sqrt() / bc2_sqrt).add_(eps) */
        w[i] = w[i] + (-step_size) * (m[i] / denom); /* param.addcdiv_(m, denom, -step_size) */
    }
}

/* ------------------------------------------------------------------ the two paths
 * Swapping to the backend is exactly these two calls (be->sumsq, be->adamw). */

/* out[i] = the sum of squares of g[i] (n[i] floats) for i < count. */
static glm_status param_sumsq(const glm_optim *o, int count, const float *const *g, const int64_t *n, double *out) {
    if (o->be) return glm_be_sumsq_many(o->be, count, g, n, out);
    for (int i = 0; i < count; i++) out[i] = glm_sumsq_ref(g[i], n[i]);
    return GLM_OK;
}

static glm_status param_adamw(const glm_optim *o, float *w, const float *g, float *m, float *v,
                              int64_t n, double lr, float grad_scale, int64_t step) {
    const glm_adamw_cfg *c = &o->cfg;
    if (o->be)
        return glm_be_adamw(o->be, w, g, m, v, n, (float)lr, (float)c->beta1, (float)c->beta2,
                            (float)c->eps, (float)c->weight_decay, grad_scale, step);
    glm_adamw_ref(w, g, m, v, n, lr, c->beta1, c->beta2, c->eps, c->weight_decay, grad_scale, step);
    return GLM_OK;
}

/* ------------------------------------------------------------------ optimizer */

glm_adamw_cfg glm_adamw_defaults(void) {
    glm_adamw_cfg c = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0,
                       .max_grad_norm = 1.0};
    return c;
}

static void buf_free(const glm_optim *o, float *p) {
    if (!p) return;
    if (o->be)
        glm_be_free(o->be, p);
    else
        free(p);
}

void glm_optim_free(glm_optim *o) {
    if (o->m_flat || o->v_flat) {
        buf_free(o, o->m_flat);
        buf_free(o, o->v_flat);
    } else {
        for (size_t i = 0; i < o->n; i++) {
            if (o->m) buf_free(o, o->m[i]);
            if (o->v) buf_free(o, o->v[i]);
        }
    }
    free(o->m);
    free(o->v);
    free(o->numel);
    memset(o, 0, sizeof(*o));
}

static glm_status buf_alloc(const glm_optim *o, int64_t numel, const char *what, float **out) {
    size_t bytes = (size_t)numel * sizeof(float);
    if (o->be) {
        void *p = NULL;
        GLM_TRY(glm_be_alloc(o->be, bytes, what, &p));
        *out = p;
        glm_status st = glm_be_zero(o->be, p, bytes);
        return st;
    }
    *out = calloc(numel ? (size_t)numel : 1, sizeof(float));
    if (!*out)
        return glm_err(GLM_ERR_NOMEM, "out of memory for the AdamW state of %s (%zu bytes)", what, bytes);
    return GLM_OK;
}

glm_status glm_optim_init(glm_optim *o, const struct glm_backend *be, const glm_param *params,
                          size_t n, const glm_adamw_cfg *cfg) {
    memset(o, 0, sizeof(*o));
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1))
        return glm_err(GLM_ERR_ARG, "adam-beta1 and adam-beta2 must be in [0, 1) (got %g, %g)",
                       cfg->beta1, cfg->beta2);
    if (!(cfg->eps > 0)) return glm_err(GLM_ERR_ARG, "adam-epsilon must be > 0 (got %g)", cfg->eps);
    if (!(cfg->weight_decay >= 0))
        return glm_err(GLM_ERR_ARG, "weight-decay must be >= 0 (got %g)", cfg->weight_decay);
    if (isnan(cfg->max_grad_norm)) return glm_err(GLM_ERR_ARG, "max-grad-norm is NaN");
    if (!(cfg->lr_ratio_b >= 0) || !isfinite(cfg->lr_ratio_b))
        return glm_err(GLM_ERR_ARG, "loraplus-lr-ratio must be >= 0 (got %g)", cfg->lr_ratio_b);
    o->cfg = *cfg;
    o->be = be;
    o->m = calloc(n ? n : 1, sizeof(float *));
    o->v = calloc(n ? n : 1, sizeof(float *));
    o->numel = calloc(n ? n : 1, sizeof(int64_t));
    if (!o->m || !o->v || !o->numel) {
        free(o->m);
        free(o->v);
        free(o->numel);
        memset(o, 0, sizeof(*o));
        return glm_err(GLM_ERR_NOMEM, "out of memory (AdamW state table)");
    }
    o->n = n;
    /* one flat pair of buffers holding every param: m and v laid out alike */
    int flat = n > 0;
    int64_t span = 0;
    for (size_t i = 0; i < n && flat; i++) {
        const glm_param *p = &params[i];
        flat = p->w_flat && p->g_flat && p->w_flat == params[0].w_flat && p->g_flat == params[0].g_flat && p->flat_off >= 0 &&
               p->w == p->w_flat + p->flat_off && p->g == p->g_flat + p->flat_off;
        if (p->flat_off + p->numel > span) span = p->flat_off + p->numel;
    }
    if (flat) {
        glm_status st = buf_alloc(o, span, "AdamW exp_avg", &o->m_flat);
        if (st == GLM_OK) st = buf_alloc(o, span, "AdamW exp_avg_sq", &o->v_flat);
        if (st != GLM_OK) {
            glm_optim_free(o);
            return st;
        }
        o->w_flat = params[0].w_flat, o->g_flat = params[0].g_flat, o->flat_n = span;
        for (size_t i = 0; i < n; i++) {
            o->numel[i] = params[i].numel;
            o->m[i] = o->m_flat + params[i].flat_off;
            o->v[i] = o->v_flat + params[i].flat_off;
        }
        return GLM_OK;
    }
    for (size_t i = 0; i < n; i++) {
        o->numel[i] = params[i].numel;
        glm_status st = buf_alloc(o, params[i].numel, params[i].name, &o->m[i]);
        if (st == GLM_OK) st = buf_alloc(o, params[i].numel, params[i].name, &o->v[i]);
        if (st != GLM_OK) {
            glm_optim_free(o);
            return st;
        }
    }
    return GLM_OK;
}

/* whether params are the ones the optimizer laid out flat (o->m_flat) */
static int is_flat(const glm_optim *o, const glm_param *params, size_t n) {
    return o->m_flat && n > 0 && n == o->n && params[0].w_flat == o->w_flat && params[0].g_flat == o->g_flat;
}

glm_status glm_grad_norm(const glm_optim *o, const glm_param *params, size_t n, double *norm) {
    double ss = 0;
    if (is_flat(o, params, n)) { /* every gradient, and the zeros between them, in one sum */
        const float *g = o->g_flat;
        GLM_TRY(param_sumsq(o, 1, &g, &o->flat_n, &ss));
        *norm = (double)(float)sqrt(ss);
        return GLM_OK;
    }
    enum { BATCH = 256 }; /* params per backend call (one synchronisation each) */
    const float *g[BATCH];
    int64_t cnt[BATCH];
    double part[BATCH];
    for (size_t i0 = 0; i0 < n; i0 += BATCH) {
        const int k = (int)(n - i0 < BATCH ? n - i0 : BATCH);
        for (int j = 0; j < k; j++) {
            const glm_param *p = &params[i0 + (size_t)j];
            GLM_ASSERT(p->g || !p->numel, "param %s has no gradient buffer", p->name);
            g[j] = p->g;
            cnt[j] = p->numel;
        }
        GLM_TRY(param_sumsq(o, k, g, cnt, part));
        for (int j = 0; j < k; j++) ss += part[j];
    }
    *norm = (double)(float)sqrt(ss);
    return GLM_OK;
}

glm_status glm_optim_step(glm_optim *o, glm_param *params, size_t n, double lr,
                          glm_step_stats *stats) {
    if (n != o->n)
        return glm_err(GLM_ERR_MISMATCH, "optimizer was set up for %zu params, step got %zu", o->n, n);
    for (size_t i = 0; i < n; i++)
        if (params[i].numel != o->numel[i])
            return glm_err(GLM_ERR_MISMATCH, "param %s has %lld elements, the optimizer state %lld",
                           params[i].name, (long long)params[i].numel, (long long)o->numel[i]);
    if (!(lr >= 0) || !isfinite(lr)) return glm_err(GLM_ERR_ARG, "learning rate %g is not valid", lr);
    double total;
    GLM_TRY(glm_grad_norm(o, params, n, &total));
    if (stats) {
        stats->grad_norm = total;
        stats->clip_coef = 1.0f;
        stats->lr = lr;
    }
    if (!isfinite(total))
        return glm_err(GLM_ERR_NUMERIC, "gradient norm is %g at step %lld: the update was skipped",
                       total, (long long)o->step + 1);
    float coef = 1.0f;
    if (o->cfg.max_grad_norm > 0) {
        /* clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, in fp32 */
        float c = (float)o->cfg.max_grad_norm / ((float)total + 1e-6f);
        coef = c < 1.0f ? c : 1.0f;
    }
    if (stats) stats->clip_coef = coef;
    o->step++;
    if (is_flat(o, params, n) && !(o->cfg.lr_ratio_b > 0)) /* one lr for all: one update over the flat buffers */
        return param_adamw(o, o->w_flat, o->g_flat, o->m_flat, o->v_flat, o->flat_n, lr, coef, o->step);
    for (size_t i = 0; i < n; i++) {
        /* LoRA+: the B matrices at lr x ratio (the group "lora_b" of LLaMA-Factory / "groupB" of PEFT) */
        double lr_i = o->cfg.lr_ratio_b > 0 && strstr(params[i].name, ".lora_B.") ? lr * o->cfg.lr_ratio_b : lr;
        GLM_TRY(param_adamw(o, params[i].w, params[i].g, o->m[i], o->v[i], params[i].numel, lr_i, coef, o->step));
    }
    return GLM_OK;
}

glm_status glm_optim_get_state(const glm_optim *o, size_t i, float *m_host, float *v_host) {
    GLM_ASSERT(i < o->n, "optimizer state index %zu of %zu", i, o->n);
    size_t bytes = (size_t)o->numel[i] * sizeof(float);
    if (o->be) {
        GLM_TRY(glm_be_download(o->be, m_host, o->m[i], bytes));
        return glm_be_download(o->be, v_host, o->v[i], bytes);
    }
    memcpy(m_host, o->m[i], bytes);
    memcpy(v_host, o->v[i], bytes);
    return GLM_OK;
}

glm_status glm_optim_set_state(glm_optim *o, size_t i, const float *m_host, const float *v_host) {
    GLM_ASSERT(i < o->n, "optimizer state index %zu of %zu", i, o->n);
    size_t bytes = (size_t)o->numel[i] * sizeof(float);
    if (o->be) {
        GLM_TRY(glm_be_upload(o->be, o->m[i], m_host, bytes));
        return glm_be_upload(o->be, o->v[i], v_host, bytes);
    }
    memcpy(o->m[i], m_host, bytes);
    memcpy(o->v[i], v_host, bytes);
    return GLM_OK;
}
