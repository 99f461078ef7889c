/* lora/model/model_prove.c: the memory proof of a long training step (lora/model/model_prove.h), on the public
 * model API and the model's run_layers. */
#include "lora/model/model_prove.h"

#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

glm_status glm_model_prove_memory(glm_model *m, glm_lora *lora, const glm_batch *b, glm_ckpt_mode mode, int n_layers,
                                  glm_prove_result *out) {
    memset(out, 0, sizeof *out);
    if (!lora) return glm_err(GLM_ERR_ARG, "memory proof: no LoRA adapter (a training step needs one)");
    const int L = m->cfg.L;
    if (n_layers <= 0) n_layers = 2;
    if (n_layers > L) n_layers = L;
    GLM_TRY(glm_model_prepare(m, lora, b->B, b->T, 1, mode, &out->plan)); /* every buffer of the whole step */
    int64_t nt = 0;
    for (int64_t i = 0; i < (int64_t)b->B * b->T; i++) nt += b->targets[i] != 0;
    double ls = 0;
    int64_t got = 0;
    m->run_layers = n_layers;
    double t0 = now_s();
    glm_status st = glm_model_step(m, lora, b, (float)(1.0 / (double)(nt > 0 ? nt : 1)), 1, (int)mode, 0, &ls, &got);
    if (st == GLM_OK) st = glm_be_sync(m->be);
    double t1 = now_s();
    m->run_layers = 0;
    if (st == GLM_ERR_NUMERIC) st = GLM_OK; /* random weights: a non-finite loss does not matter here */
    GLM_TRY(st);
    out->layers = n_layers;
    out->seconds = t1 - t0;
    out->step_est_s = out->seconds * L / n_layers;
    return GLM_OK;
}
