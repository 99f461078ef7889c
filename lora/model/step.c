/* lora/model/step.c: the training step's driver (lora/model/model.h): glm_model_step and
 * glm_model_logits over the workspace (step_ws.c), the weight slots (step_weights.c), the batch
 * (step_batch.c), the layers (layer.c, layer_bwd.c) and the loss head (head.c): the forward over
 * every layer keeping what the plan keeps, the head, then the backward from the last layer down,
 * with the offloaded layer inputs, the sharded base's gathers and the data-parallel hooks
 * interleaved. */
#include <math.h>

#include "lora/model/step_internal.h"

/* The layer context of a call over workspace w: the batch on the device, the LoRA copies, the
 * chunk and backward buffers (per layer the driver sets lw and acts). */
static void layer_ctx(glm_model *m, glm_lora *lora, struct glm_ws *w, const glm_batch *b, int TL, int cp, uint64_t seed,
                      float p_drop, glm_layer_ctx *cx) {
    *cx = (glm_layer_ctx){
        .be = m->be,
        .m = m,
        .lora = lora,
        .lora_A = w->shA,
        .lora_B = w->shB,
        .lora_stacked = w->shadows,
        .B = b->B,
        .T = TL,
        .N = (int64_t)b->B * TL,
        .pos = w->pos,
        .doc = w->doc,
        .ring = cp ? &w->ring : NULL,
        .p_drop = p_drop,
        .seed = seed,
        .T_row = b->T,
        .drop_key = b->drop_key,
        .chunk = w->plan.mlp_chunk,
        .xn_c = GLM_WB(w, GLM_BUF_XN_C),
        .rstd_c = GLM_WB(w, GLM_BUF_RSTD_C),
        .h_c = GLM_WB(w, GLM_BUF_H_C),
        .a_c = GLM_WB(w, GLM_BUF_A_C),
        .lora_u = GLM_WB(w, GLM_BUF_LORA_U),
        .lora_du = GLM_WB(w, GLM_BUF_LORA_DU),
        .lora_drop = GLM_WB(w, GLM_BUF_LORA_DROP),
        .bwd = &w->bwd,
        .esz = w->esz,
    };
}

/* Where layer l's activations go in workspace w: a training workspace's plan, else the working buffers. */
static const glm_layer_acts *acts_of(const struct glm_ws *w, int l) { return w->backward ? &w->acts[l] : &w->work; }

/* One call: the forward, a loss head (head NULL and logp_out NULL: SFT's fused one, or logits_out;
 * else the general head of lora/model/head.h, which with head NULL gives logp_out) and the backward. */
static glm_status run(glm_model *m, glm_lora *lora, const glm_batch *b, float loss_scale, int backward, glm_ckpt_mode mode,
                      uint64_t seed, float p_drop, double *loss_sum, int64_t *n_targets, float *logits_out,
                      const glm_loss_head *head, float *logp_out) {
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    if (!b || b->B <= 0 || b->T <= 0 || !b->ids || !b->pos || !b->doc)
        return glm_err(GLM_ERR_ARG, "model step: empty or incomplete batch (B and T must be positive; ids, pos, doc required)");
    if (lora && (lora->L != c->L || lora->be != be))
        return glm_err(GLM_ERR_MISMATCH, "model step: the LoRA adapter was built for another model");
    if (!lora) backward = 0;
    const int cp = m->opt.cp > 1;
    GLM_TRY(glm_ws_check_cp(m));
    if (cp && logits_out)
        return glm_err(GLM_ERR_UNSUPPORTED, "model logits with context parallel: each rank holds only its chunks of a row; "
                       "hint: compute logits without --context-parallel");
    if (cp && (head || logp_out))
        return glm_err(GLM_ERR_UNSUPPORTED, "a loss head over log-probabilities with context parallel: its per-sequence "
                       "statistics need whole rows, which the group splits; hint: train it without --context-parallel");
    GLM_TRY(glm_ws_ensure(m, lora, b->B, b->T, backward, mode, lora && p_drop > 0));
    struct glm_ws *w = m->ws;
    /* cuDNN's attention workspace: what the plan holds for it and the room the plan leaves (a batch of
     * many documents pads to a wider graph); none when the plan left it out: glmtune's kernels */
    glm_be_set_attention_ws_cap(be, w->plan.attn_lean ? 0 : w->plan.attn_ws + fmax(0.0, w->plan.budget - w->plan.total));
    w->ring.B = b->B; /* this batch's rows (at most the workspace's) */
    const glm_cp_layout *cpl = cp ? &w->ring.L : NULL;
    const int TL = cp ? w->TL : b->T;
    const int L = m->run_layers > 0 && m->run_layers < c->L ? m->run_layers : c->L; /* the memory proof: the first ones */
    int64_t N = (int64_t)b->B * TL, C = c->C, V = c->V, nlab = 0;
    glm_status st = glm_ws_upload_batch(m, w, b, cpl, &nlab);
    if (!st) st = glm_ws_refresh_lora(w, lora);
    if (st) return st;
    glm_layer_ctx cx;
    layer_ctx(m, lora, w, b, TL, cp, seed, p_drop, &cx);
    const glm_weight *embed, *out_w;
    GLM_TRY(glm_wslots_big(m, w, 1, &embed)); /* sharded base: the embedding gathered ... */
    if (w->W.sharded) GLM_TRY(glm_wslots_gather_start(m, w, 0));
    glm_be_phase(be, GLM_PHASE_ELEMENTWISE);
    const size_t xbytes = (size_t)(N * C) * w->esz;
    const int n_host = backward ? w->plan.n_host : 0;
    uint64_t slot_down[2] = {0, 0}; /* offload: the last download from each slot */
    GLM_TRY(glm_be_embedding(be, w->xs[0], embed->data, w->ids, N, C, V));
    if (w->W.sharded) GLM_TRY(glm_wslots_big_start(m, w, 2)); /* ... then the output layer prefetched into its slot */
    if (n_host > 0) GLM_TRY(glm_be_download_async(be, w->xh[0], w->xs[0], xbytes, &slot_down[0]));
    for (int l = 0; l < L; l++) {
        GLM_TRY(glm_wslots_layer(m, w, l, 0, &cx.lw)); /* gathered, dequantized ... */
        if (w->W.sharded && l + 1 < L) /* ... and the next gather started behind it */
            GLM_TRY(glm_wslots_gather_start(m, w, l + 1));
        /* offload: layer l's output overwrites a slot whose last input must have reached host memory */
        if (n_host > 0 && glm_plan_x_in_slot(&w->plan, L, l + 1)) GLM_TRY(glm_be_copy_wait(be, slot_down[(l + 1) & 1]));
        cx.acts = acts_of(w, l);
        GLM_TRY(glm_layer_fwd(&cx, l, w->xs[l], w->xs[l + 1]));
        if (l + 1 < n_host) GLM_TRY(glm_be_download_async(be, w->xh[l + 1], w->xs[l + 1], xbytes, &slot_down[(l + 1) & 1]));
    }
    GLM_TRY(glm_wslots_big(m, w, 2, &out_w)); /* every rank, whether its chunks have targets or not */
    if (backward) GLM_TRY(glm_be_zero(be, w->bwd.dx, (size_t)(N * C) * w->esz));
    if (head || logp_out)
        GLM_TRY(glm_head_general(m, w, out_w, w->xs[L], b, head, loss_scale, backward, logp_out, loss_sum, n_targets));
    else
        GLM_TRY(glm_head_sft(m, w, out_w, w->xs[L], N, loss_scale, backward, logits_out, loss_sum, n_targets));
    if (n_targets && logits_out) *n_targets = nlab;
    if (backward) {
        uint64_t up[2] = {0, 0}; /* offload: the last upload into each slot */
        for (int l = L - 1; l >= 0; l--) {
            GLM_TRY(glm_wslots_layer(m, w, l, 1, &cx.lw)); /* backward order: layer l (still there after the forward for
                                                              the last ones), l-1's gather prefetched */
            if (w->W.sharded && l > 0) GLM_TRY(glm_wslots_gather_start(m, w, l - 1));
            /* offload: layer l-1's input goes into its slot (free: it held layer l+1's input or the
             * loss head's) while layer l's backward runs; layer l's own was uploaded during layer
             * l+1's (or, for the last layer, never left its slot) */
            if (l > 0 && l - 1 < n_host)
                GLM_TRY(glm_be_upload_async(be, w->xs[l - 1], w->xh[l - 1], xbytes, 1, &up[(l - 1) & 1]));
            if (l < n_host) GLM_TRY(glm_be_copy_wait(be, up[l & 1]));
            cx.acts = acts_of(w, l);
            GLM_TRY(glm_layer_bwd(&cx, l, w->xs[l]));
            if (m->grad_ready) GLM_TRY(m->grad_ready(m->grad_ready_user, l)); /* layer l's LoRA grads are final */
        }
    }
    glm_be_phase(be, GLM_PHASE_OTHER);
    /* the host is idle until the queued work is done: the trainer prepares the next batch */
    if (backward && m->next_batch) GLM_TRY(m->next_batch(m->next_batch_user));
    GLM_TRY(glm_be_sync(be));
    w->bset[0].pending = w->bset[1].pending = 0; /* every copy is done */
    return GLM_OK;
}

glm_status glm_model_step(glm_model *m, glm_lora *lora, const glm_batch *batch, float loss_scale, int backward,
                          int grad_checkpointing, uint64_t dropout_seed, double *loss_sum, int64_t *n_targets) {
    float p = lora ? lora->dropout : 0.0f;
    glm_ckpt_mode mode = grad_checkpointing >= 0 && grad_checkpointing <= 3 ? (glm_ckpt_mode)grad_checkpointing : GLM_CKPT_FULL;
    return run(m, lora, batch, loss_scale, backward, mode, dropout_seed, p, loss_sum, n_targets, NULL, NULL, NULL);
}

glm_status glm_model_logits(glm_model *m, glm_lora *lora, const glm_batch *batch, float *logits) {
    return run(m, lora, batch, 1.0f, 0, GLM_CKPT_FULL, 0, 0.0f, NULL, NULL, logits, NULL, NULL);
}

glm_status glm_model_step_head(glm_model *m, glm_lora *lora, const glm_batch *batch, const glm_loss_head *head,
                               float loss_scale, int backward, int grad_checkpointing, uint64_t dropout_seed, double *loss,
                               int64_t *n_targets) {
    if (!head || !head->weights) return glm_err(GLM_ERR_ARG, "model step: a loss head without its weights function");
    float p = lora ? lora->dropout : 0.0f;
    glm_ckpt_mode mode = grad_checkpointing >= 0 && grad_checkpointing <= 3 ? (glm_ckpt_mode)grad_checkpointing : GLM_CKPT_FULL;
    return run(m, lora, batch, loss_scale, backward, mode, dropout_seed, p, loss, n_targets, NULL, head, NULL);
}

glm_status glm_model_logp(glm_model *m, glm_lora *lora, const glm_batch *batch, float *logp, int64_t *n_targets) {
    if (!logp) return glm_err(GLM_ERR_ARG, "model logp: no output array");
    return run(m, lora, batch, 1.0f, 0, GLM_CKPT_FULL, 0, 0.0f, NULL, n_targets, NULL, NULL, logp);
}
