/* lora/model/head.c: the loss heads over the final hidden state: final_layernorm, the output layer
 * and the cross-entropy, over chunks of the plan's loss_chunk tokens so the [N, V] logits are never
 * held at once. */
#include <stdlib.h>

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

/* Whether chunk [n0, n0 + nc) holds a labelled position. */
static int chunk_has_labels(const struct glm_ws *w, int64_t n0, int64_t nc) {
    for (int64_t i = n0; i < n0 + nc; i++)
        if (w->lab_host[i] >= 0) return 1;
    return 0;
}

/* Phase 1 (weights NULL: the labels' log-probabilities into dev_logp, no gradient) or phase 3
 * (weights: dlogits over the logits, then the output layer's and the norm's backward into dx) over
 * every chunk with labels. Adds the cross-entropy's target count to *n_targets. */
static glm_status head_pass(glm_model *m, struct glm_ws *w, const glm_weight *out_w, const void *x_final, int64_t N,
                            const float *weights, float *dev_logp, float loss_scale, int64_t *n_targets) {
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const int64_t C = c->C, V = c->V, lc = w->plan.loss_chunk;
    void *xnf = GLM_WB(w, GLM_BUF_LOSS_XN), *logits = GLM_WB(w, GLM_BUF_LOSS_LOGITS), *dxnf = GLM_WB(w, GLM_BUF_LOSS_DXN);
    float *rstdf = GLM_WB(w, GLM_BUF_LOSS_RSTD);
    for (int64_t n0 = 0; n0 < N; n0 += lc) {
        const int64_t nc = N - n0 < lc ? N - n0 : lc;
        if (!chunk_has_labels(w, n0, nc)) continue;
        const void *xf = OFF(x_final, n0 * C);
        double ls = 0;
        int64_t nt = 0;
        PH(GLM_PHASE_LOSS);
        GLM_TRY(glm_be_rmsnorm_fwd(be, xnf, rstdf, xf, m->final_ln, nc, C, c->eps));
        GLM_TRY(glm_base_matmul(be, 0, nc, xnf, C, out_w, 0.0f, logits, V));
        if (!weights) {
            GLM_TRY(glm_be_cross_entropy(be, NULL, logits, w->labels + n0, NULL, dev_logp + n0, nc, V, 1.0f, &ls, &nt));
        } else {
            GLM_TRY(glm_be_cross_entropy(be, logits, logits, w->labels + n0, weights + n0, NULL, nc, V, loss_scale, &ls, &nt));
            GLM_TRY(glm_base_matmul(be, 1, nc, logits, V, out_w, 0.0f, dxnf, C));
            GLM_TRY(glm_be_rmsnorm_bwd(be, OFF(w->bwd.dx, n0 * C), dxnf, xf, m->final_ln, rstdf, nc, C));
        }
        *n_targets += nt;
    }
    return GLM_OK;
}

glm_status glm_head_general(glm_model *m, struct glm_ws *w, const glm_weight *out_w, const void *x_final, const glm_batch *b,
                            const glm_loss_head *head, float loss_scale, int backward, float *logp_out, double *loss,
                            int64_t *n_targets) {
    const glm_backend *be = m->be;
    const int64_t N = (int64_t)b->B * b->T;
    float *dev_logp, *dev_w;
    GLM_TRY(glm_ws_head_bufs(w, &dev_logp, &dev_w));
    float *lp = logp_out ? logp_out : malloc((size_t)N * sizeof(float));
    float *wt = head ? malloc((size_t)N * sizeof(float)) : NULL;
    glm_status st = !lp || (head && !wt) ? glm_err(GLM_ERR_NOMEM, "loss head: out of memory for %lld tokens", (long long)N)
                                         : GLM_OK;
    int64_t nt = 0, nt3 = 0;
    /* phase 1: the chunks without labels leave their zeros */
    if (!st) st = glm_be_zero(be, dev_logp, (size_t)N * sizeof(float));
    if (!st) st = head_pass(m, w, out_w, x_final, N, NULL, dev_logp, 1.0f, &nt);
    if (!st) st = glm_be_download(be, lp, dev_logp, (size_t)N * sizeof(float));
    if (n_targets) *n_targets = nt;
    if (!st && !head) {
        double s = 0;
        for (int64_t i = 0; i < N; i++) s -= lp[i];
        if (loss) *loss = s;
    }
    if (!st && head) { /* phase 2 on the host */
        for (int64_t i = 0; i < N; i++) wt[i] = 0; /* positions without a label: defined, never read */
        const glm_head_tokens tk = {b, N, w->lab_host, lp};
        double hl = 0;
        st = head->weights(head->user, &tk, wt, &hl);
        if (!st && loss) *loss = hl;
    }
    if (!st && head && backward) { /* phase 3 */
        st = glm_be_upload(be, dev_w, wt, (size_t)N * sizeof(float));
        if (!st) st = head_pass(m, w, out_w, x_final, N, dev_w, NULL, loss_scale, &nt3);
    }
    if (!logp_out) free(lp);
    free(wt);
    return st;
}
