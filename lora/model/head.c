/* lora/model/head.c: the loss heads over the final hidden state: final_layernorm, the output layer
 * and the cross-entropy, over chunks of the plan's loss_chunk tokens so the [N, V] logits are never
 * held at once. */
#include "lora/model/step_internal.h"

#define OFF(p, elems) ((void *)((char *)(p) + (size_t)(elems) * w->esz))
#define PH(x) glm_be_phase(be, (x))

/* The SFT head: one pass, the cross-entropy writing dlogits over the logits and the backward
 * through the output layer and the norm right behind it. */
glm_status glm_head_sft(glm_model *m, struct glm_ws *w, const glm_weight *out_w, const void *x_final, int64_t N,
                        float loss_scale, int backward, float *logits_out, double *loss_sum, int64_t *n_targets) {
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const int64_t C = c->C, V = c->V;
    void *dx = w->bwd.dx;
    void *xnf = GLM_WB(w, GLM_BUF_LOSS_XN), *logits = GLM_WB(w, GLM_BUF_LOSS_LOGITS), *dxnf = GLM_WB(w, GLM_BUF_LOSS_DXN);
    float *rstdf = GLM_WB(w, GLM_BUF_LOSS_RSTD);
    double total = 0;
    int64_t ntot = 0, lc = w->plan.loss_chunk;
    for (int64_t n0 = 0; n0 < N; n0 += lc) {
        int64_t nc = N - n0 < lc ? N - n0 : lc;
        if (!logits_out) { /* skip chunks without targets */
            int64_t k = 0;
            for (int64_t i = n0; i < n0 + nc; i++) k += w->lab_host[i] >= 0;
            if (!k) continue;
        }
        const void *xf = OFF(x_final, n0 * C);
        PH(GLM_PHASE_LOSS);
        GLM_TRY(glm_be_rmsnorm_fwd(be, xnf, rstdf, xf, m->final_ln, nc, C, c->eps));
        GLM_TRY(glm_base_matmul(be, 0, nc, xnf, C, out_w, 0.0f, logits, V));
        if (logits_out) {
            GLM_TRY(glm_be_download_f32(be, logits_out + n0 * V, be->act_dtype, logits, nc * V));
            continue;
        }
        double ls = 0;
        int64_t nt = 0;
        GLM_TRY(glm_be_cross_entropy(be, backward ? logits : NULL, logits, w->labels + n0, NULL, NULL, nc, V, loss_scale, &ls,
                                     &nt));
        total += ls;
        ntot += nt;
        if (backward) {
            GLM_TRY(glm_base_matmul(be, 1, nc, logits, V, out_w, 0.0f, dxnf, C));
            GLM_TRY(glm_be_rmsnorm_bwd(be, OFF(dx, n0 * C), dxnf, xf, m->final_ln, rstdf, nc, C));
        }
    }
    if (loss_sum) *loss_sum = total;
    if (n_targets && !logits_out) *n_targets = ntot;
    return GLM_OK;
}
