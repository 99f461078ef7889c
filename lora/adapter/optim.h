/* lora/adapter/optim.h: learning-rate schedules (as transformers' get_scheduler) and AdamW with global
 * gradient-norm clipping (as torch.nn.utils.clip_grad_norm_ + torch.optim.AdamW).
 *
 * Step numbering: `step` in glm_lr_at is the number of optimizer steps already taken (0 for the
 * first update), exactly the `current_step` that transformers' LambdaLR passes to its lambda
 * (the Trainer calls scheduler.step() after each optimizer.step(), so update k (1-based) uses
 * lr_lambda(k-1)). glm_optim.step counts updates taken (torch's state["step"]). */
#ifndef GLM_OPTIM_H
#define GLM_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "lora/adapter/param.h"

struct glm_backend;

/* ------------------------------------------------------------------ LR schedules */

typedef enum {
    GLM_SCHED_CONSTANT,             /* lr */
    GLM_SCHED_CONSTANT_WITH_WARMUP, /* linear warmup, then lr */
    GLM_SCHED_LINEAR,               /* linear warmup, then linear decay to 0 at total_steps */
    GLM_SCHED_COSINE,               /* linear warmup, then half-cosine to 0 (or to min lr) */
    GLM_SCHED_COSINE_WITH_MIN_LR,   /* linear warmup, then half-cosine to min_lr */
} glm_sched_type;

typedef struct glm_sched {
    glm_sched_type type;
    double lr;            /* peak learning rate */
    int64_t total_steps;  /* number of optimizer updates in the run (num_training_steps) */
    int64_t warmup_steps; /* resolved (after warmup_ratio) */
    double min_lr_rate;   /* floor as a fraction of lr for the cosine kinds (0 = decay to 0) */
    double num_cycles;    /* cosine cycles; 0.5 = one half-cosine (transformers' default) */
} glm_sched;

/* Parses "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr" (the
 * transformers SchedulerType strings). Errors: GLM_ERR_ARG naming the value and the list. */
glm_status glm_sched_parse_type(const char *name, glm_sched_type *out);
const char *glm_sched_type_name(glm_sched_type t);

/* Fills `s`. warmup: warmup_steps when > 0, else ceil(warmup_ratio * total_steps)
 * (transformers TrainingArguments.get_warmup_steps). Minimum LR for the cosine kinds: min_lr
 * (absolute) when > 0 gives min_lr_rate = min_lr / lr, else min_lr_rate as given
 * (transformers' cosine_with_min_lr accepts exactly one of min_lr / min_lr_rate; here min_lr
 * wins). GLM_SCHED_COSINE_WITH_MIN_LR without a floor is an error, as in transformers.
 * Errors: GLM_ERR_ARG for lr <= 0 or non-finite, total_steps < 1, negative warmup, ratio
 * outside [0, 1], min_lr >= lr, rate outside [0, 1). */
glm_status glm_sched_init(glm_sched *s, glm_sched_type type, double lr, int64_t total_steps,
                          int64_t warmup_steps, double warmup_ratio, double min_lr,
                          double min_lr_rate);

/* Learning rate for the update after `step` completed updates (see the header comment):
 *   w = warmup_steps, N = total_steps, p = (step - w) / max(1, N - w)
 *   step < w (all but constant):   lr * step / max(1, w)
 *   constant(_with_warmup):        lr
 *   linear:                        lr * max(0, (N - step) / max(1, N - w))
 *   cosine, cosine_with_min_lr:    f = 0.5 * (1 + cos(pi * 2 * num_cycles * p));
 *                                  lr * max(0, f * (1 - min_lr_rate) + min_lr_rate)
 * (transformers.optimization: get_constant_schedule(_with_warmup), get_linear_schedule_with_
 * warmup, get_cosine_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup). In
 * double; the caller rounds to float for the update. */
double glm_lr_at(const glm_sched *s, int64_t step);

/* ------------------------------------------------------------------ AdamW */

typedef struct glm_adamw_cfg {
    double beta1, beta2;   /* 0.9, 0.999 (doubles like torch's Python floats) */
    double eps;            /* 1e-8 */
    double weight_decay;   /* decoupled (AdamW), applied to every LoRA tensor; 0.0 in HF default */
    double max_grad_norm;  /* clip threshold; <= 0 disables clipping (the norm is still computed) */
    double lr_ratio_b;     /* LoRA+ (Hayou et al. 2024, arXiv:2402.12354): params named "*.lora_B.*"
                              update with lr x this, as PEFT's create_loraplus_optimizer and
                              LLaMA-Factory's loraplus_lr_ratio (their weight decay stays
                              weight_decay, applied as 1 - lr_B * wd); <= 0: off (every param at lr) */
} glm_adamw_cfg;

/* torch / transformers defaults: 0.9, 0.999, 1e-8, 0.0, 1.0. */
glm_adamw_cfg glm_adamw_defaults(void);

/* AdamW state: exp_avg (m) and exp_avg_sq (v) per param, fp32, same shape as the param, in
 * backend memory (host memory when be is NULL); step = updates taken so far. */
typedef struct glm_optim {
    glm_adamw_cfg cfg;
    const struct glm_backend *be; /* NULL: host reference implementation */
    size_t n;
    int64_t *numel;               /* [n] */
    float **m, **v;               /* [n] buffers of numel[i] floats, zero-initialised */
    int64_t step;
    /* flat: every param in one pair of buffers (glm_param.w_flat, g_flat); m and v then are two
       buffers of flat_n floats with param i at its flat_off, and the norm and the update run once
       over all flat_n (the zeros between params stay zeros) */
    float *w_flat, *g_flat, *m_flat, *v_flat;
    int64_t flat_n;
} glm_optim;

/* Statistics of one update. */
typedef struct glm_step_stats {
    double grad_norm;  /* global L2 norm of all grads before clipping (float32-rounded) */
    float clip_coef;   /* the factor applied to the grads: min(1, max_norm / (norm + 1e-6)) */
    double lr;         /* the lr used */
} glm_step_stats;

/* Allocates zeroed m and v for `n` params (shapes from params[i].numel). be: the backend whose
 * memory holds the params (its alloc/zero/adamw/sumsq are used), or NULL for host arrays and
 * the reference math in optim.c. Errors: GLM_ERR_NOMEM naming the param; GLM_ERR_ARG for a bad
 * cfg (betas outside [0,1), eps <= 0, weight_decay < 0). On failure *o is left freed. */
glm_status glm_optim_init(glm_optim *o, const struct glm_backend *be, const glm_param *params,
                          size_t n, const glm_adamw_cfg *cfg);
void glm_optim_free(glm_optim *o);

/* Global gradient L2 norm sqrt(sum_i sum_j g_ij^2) over all params, summed in double (each
 * param's sum through be->sumsq, up to 256 params a call, or the host loop), returned as double
 * of the float32-rounded value (torch computes it in fp32). Overwrites *norm. Errors: the
 * backend's (a device failure), besides a NULL param grad. */
glm_status glm_grad_norm(const glm_optim *o, const glm_param *params, size_t n, double *norm);

/* One update of every param, torch semantics:
 *   total = glm_grad_norm; if not finite -> GLM_ERR_NUMERIC, nothing is changed (the caller
 *   counts non-finite steps, --max-nonfinite), step count unchanged.
 *   clip_coef = max_grad_norm > 0 ? min(1, max_grad_norm / (total + 1e-6)) : 1   (float32,
 *   torch.nn.utils.clip_grad_norm_; the grads are multiplied by it inside AdamW, the g buffers
 *   themselves are not modified).
 *   step += 1; then per param (torch.optim.AdamW, single-tensor path, float32 arithmetic), with
 *   lr_i = lr x cfg.lr_ratio_b for a LoRA+ B matrix (name containing ".lora_B."), else lr:
 *     g' = g * clip_coef; w *= 1 - lr_i*wd; m += (1-beta1) * (g' - m); v = beta2*v + (1-beta2) g'^2
 *     w -= (lr_i / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 *   Overwrites w, m, v (in place). `params` must be the list given to glm_optim_init.
 *   stats (may be NULL) receives the norm, coef and lr. Errors: GLM_ERR_MISMATCH when n or a
 *   numel differs from init, GLM_ERR_NUMERIC as above, GLM_ERR_ARG for lr < 0 / non-finite. */
glm_status glm_optim_step(glm_optim *o, glm_param *params, size_t n, double lr,
                          glm_step_stats *stats);

/* Copies param i's m and v to host arrays (numel floats each), for checkpoints. */
glm_status glm_optim_get_state(const glm_optim *o, size_t i, float *m_host, float *v_host);
/* Loads param i's m and v from host arrays (numel floats each), for resuming. */
glm_status glm_optim_set_state(glm_optim *o, size_t i, const float *m_host, const float *v_host);

/* The reference AdamW on host arrays (what optim.c runs when be is NULL; the formula is
 * glm_optim_step's per-param update). Scalars (1 - lr*wd, 1 - beta1, 1 - beta2, lr / bc1,
 * sqrt(bc2), eps) are computed in double and rounded to float once, as torch does with
 * Python-float hyperparameters; the elementwise math is float32. Exposed for the backend's
 * tests. */
void glm_adamw_ref(float *w, const float *g, float *m, float *v, int64_t n, double lr, double beta1,
                   double beta2, double eps, double weight_decay, float grad_scale, int64_t step);
/* The reference sum of squares (double accumulation). */
double glm_sumsq_ref(const float *x, int64_t n);

#endif
