/* lora/model/head.h: loss heads: training objectives written as functions of the per-token
 * log-probabilities of the targets, over the same model step as SFT.
 *
 * SFT's token-normalised cross-entropy is the built-in head of glm_model_step: one fused pass per
 * chunk of logits (loss and dlogits together). Any other objective is a glm_loss_head and runs in
 * three phases inside one glm_model_step_head call:
 *   forward   the layers, as glm_model_step (same plan, checkpointing, dropout masks);
 *   phase 1   per chunk of logits, recomputed from the final hidden state: logp_i = log softmax(
 *             logits_i)[label_i] of every target position (no gradient), downloaded once;
 *   phase 2   on the host: head->weights computes the head's loss and per-token weights
 *             w_i = -dLoss/dlogp_i from logp (per-sequence statistics: sequences are the
 *             documents of the packed rows, glm_batch.doc);
 *   phase 3   (backward) per chunk of logits again: cross-entropy with weights w_i, so dlogits_i =
 *             loss_scale * w_i * (softmax_i - onehot_i) = loss_scale * dLoss/dlogits_i, then the
 *             output layer and final norm backward and the layers' backward as glm_model_step's.
 * The cost over SFT: one more pass over the output layer's GEMM (phase 1), two small transfers
 * ([N] fp32 each way) and one synchronisation.
 *
 * Preference objectives (docs/design.md §9) are a head plus a recipe, not another step. DPO (sigmoid):
 *   - recipe: pack each pair as two documents of one row (prompt + chosen answer, prompt +
 *     rejected answer; targets on the answers only) and keep, per row, which document is which;
 *   - reference pass: glm_model_logp(m, NULL, batch, ref_logp, NULL): the same model with the
 *     adapter off (lora NULL: no LoRA, no dropout), forward only; summed per document: rc, rr;
 *   - policy step: glm_model_step_head(m, lora, batch, &dpo, loss_scale 1, ...) with dpo.user
 *     holding ref sums, beta and P = the pairs of the whole global batch; dpo.weights sums logp
 *     per document (pc, pr), z = beta ((pc - pr) - (rc - rr)), loss += -log sigmoid(z) / P, and
 *     writes w_i = beta sigmoid(-z) / P on the chosen answer's targets, -beta sigmoid(-z) / P on
 *     the rejected one's (its rewards, margins and accuracies collected on the way); ipo / orpo /
 *     simpo change only these formulas (per-token means divide by the document's target count).
 * Everything the head needs is host data (the batch, labels, logp); the weights are the only way
 * back into the model, so a head never touches the backend or the workspace. */
#ifndef GLM_LORA_HEAD_H
#define GLM_LORA_HEAD_H

#include "lora/model/model.h"

/* What a head sees of one micro-batch (host memory, position-indexed: i = b T + t for row b,
 * position t of the batch's B rows of T tokens). Position i predicts token t + 1 of its row:
 * labels[i] = ids[i + 1] when targets[i + 1], else -1; the target is in position i's document
 * (doc[i]: a document's first token is never a target). */
typedef struct glm_head_tokens {
    const glm_batch *batch;   /* the micro-batch as the caller passed it (ids, targets, pos, doc, drop_key) */
    int64_t n;                /* B T */
    const int32_t *labels;    /* [n] int32 */
    const float *logp;        /* [n] fp32: log softmax(logits_i)[labels[i]] (the model's, as the step computes it:
                                 bf16 logits on CUDA), 0 where labels[i] < 0 */
} glm_head_tokens;

/* A loss head: the objective as a function of the targets' log-probabilities. */
typedef struct glm_loss_head {
    const char *name;
    /* Phase 2: OVERWRITES *loss with the head's loss for this micro-batch and w [n] (fp32) with
     * w_i = -dLoss/dlogp_i on target positions (any sign, 0 allowed; positions with labels < 0 are
     * not read). Errors it returns stop the step (before any gradient is touched). */
    glm_status (*weights)(void *user, const glm_head_tokens *tk, float *w, double *loss);
    void *user;
} glm_loss_head;

/* One micro-batch under head `head`: the forward, phases 1-3 above. OVERWRITES *loss (the head's
 * loss, may be NULL) and *n_targets (target positions, may be NULL); with backward != 0 and lora
 * != NULL ACCUMULATES loss_scale * dLoss / d(LoRA weights) into the params' g. With a head whose
 * weights are 1 on every target, the gradients are glm_model_step's (the same chunks and ops; the
 * CPU backend bit for bit) and Loss = -sum logp its loss_sum. Arguments, dropout masks and
 * checkpointing as glm_model_step. Buffers: two fp32 [N] device buffers beside the plan's (made
 * at the first call in a workspace). Errors: glm_model_step's; GLM_ERR_ARG (head or its weights
 * NULL); GLM_ERR_UNSUPPORTED with context parallel (the per-sequence statistics need the whole
 * rows, which the group splits); the head's own. */
glm_status glm_model_step_head(glm_model *m, glm_lora *lora, const glm_batch *batch, const glm_loss_head *head,
                               float loss_scale, int backward, int grad_checkpointing, uint64_t dropout_seed, double *loss,
                               int64_t *n_targets);

/* Forward only, phase 1: logp [B T] (host fp32, OVERWRITTEN) = the log-probability of each
 * position's label (labels as glm_head_tokens says; 0 where none), and *n_targets (may be NULL)
 * the target positions. lora NULL: the base model (a preference objective's reference pass);
 * else with the adapter, without dropout. Errors: as glm_model_step_head. */
glm_status glm_model_logp(glm_model *m, glm_lora *lora, const glm_batch *batch, float *logp, int64_t *n_targets);

#endif
