/* lora/model/step_batch.c: the training step's batch on the device: its checks, the shifted labels,
 * the upload (two batch sets with page-locked host copies: glm_model_prefetch fills one during the
 * previous step's backward) and, with context parallel, this rank's local tokens of the rows. */
#include <string.h>

#include "common/log.h"
#include "lora/model/step_internal.h"

/* Checks a batch's tokens: ids inside the vocabulary, no target at a document's first token,
 * documents as contiguous runs of increasing indices. Errors: GLM_ERR_ARG naming row and position. */
static glm_status check_batch(const glm_model *m, const glm_batch *b) {
    for (int r = 0; r < b->B; r++)
        for (int t = 0; t < b->T; t++) {
            int64_t i = (int64_t)r * b->T + t;
            if (b->ids[i] >= (uint32_t)m->cfg.V)
                return glm_err(GLM_ERR_ARG, "batch row %d position %d: token id %u is outside the model's vocabulary (V = %d)", r,
                               t, b->ids[i], m->cfg.V);
            if (b->targets && b->targets[i] && (t == 0 || b->doc[i] != b->doc[i - 1]))
                return glm_err(GLM_ERR_ARG, "batch row %d position %d: the first token of a document is marked as a target "
                               "(nothing precedes it to predict it)", r, t);
            if (t > 0 && b->doc[i] < b->doc[i - 1])
                return glm_err(GLM_ERR_ARG, "batch row %d position %d: document index %d after %d; documents must be "
                               "contiguous runs with increasing indices (as the packer writes them)", r, t, b->doc[i],
                               b->doc[i - 1]);
        }
    return GLM_OK;
}

/* A batch set's host copy: ids, pos, doc, labels at 4 * cap bytes apart, then the targets
 * (cap = the workspace's B_cap * T tokens). */
static size_t set_cap(const struct glm_ws *w) { return (size_t)w->B_cap * (size_t)w->T; }

/* Whether batch set k holds batch b, token for token (a NULL targets is all zeros). */
static int set_holds(const struct glm_ws *w, int k, const glm_batch *b) {
    const glm_batch_set *s = &w->bset[k];
    if (!s->host || s->B != b->B || s->T != b->T) return 0;
    const size_t n = (size_t)b->B * b->T, cap = set_cap(w);
    if (memcmp(s->host, b->ids, 4 * n) || memcmp(s->host + 4 * cap, b->pos, 4 * n) || memcmp(s->host + 8 * cap, b->doc, 4 * n))
        return 0;
    const uint8_t *tg = (const uint8_t *)s->host + 16 * cap;
    if (b->targets) return !memcmp(tg, b->targets, n);
    for (size_t i = 0; i < n; i++)
        if (tg[i]) return 0;
    return 1;
}

/* Fills batch set k with the checked batch b: its host copy, the shifted labels (label of
 * position t = the target token t+1, or -1) and the upload of ids/pos/doc/labels on the copy
 * stream (after_ops: after the ops queued so far, which may still read the set's device buffers;
 * 0: the caller knows none does). A copy still in flight from the set's host copy is waited for
 * first (be->sync). */
static glm_status set_fill(const glm_model *m, struct glm_ws *w, int k, const glm_batch *b, int after_ops) {
    const glm_backend *be = m->be;
    glm_batch_set *s = &w->bset[k];
    if (s->pending) GLM_TRY(glm_be_sync(be));
    s->pending = s->prefetched = 0;
    s->B = 0;
    const size_t n = (size_t)b->B * b->T, cap = set_cap(w);
    char *h = s->host;
    int32_t *lab = (int32_t *)(h + 12 * cap);
    uint8_t *tg = (uint8_t *)h + 16 * cap;
    memcpy(h, b->ids, 4 * n);
    memcpy(h + 4 * cap, b->pos, 4 * n);
    memcpy(h + 8 * cap, b->doc, 4 * n);
    if (b->targets) memcpy(tg, b->targets, n);
    else memset(tg, 0, n);
    int64_t cnt = 0;
    for (int r = 0; r < b->B; r++)
        for (int t = 0; t < b->T; t++) {
            int64_t i = (int64_t)r * b->T + t;
            lab[i] = (t + 1 < b->T && tg[i + 1]) ? (int32_t)b->ids[i + 1] : -1;
            cnt += lab[i] >= 0;
        }
    uint64_t tk;
    GLM_TRY(glm_be_upload_async(be, s->ids, h, 4 * n, after_ops, &tk)); /* the copy stream is in order: */
    GLM_TRY(glm_be_upload_async(be, s->pos, h + 4 * cap, 4 * n, 0, &tk)); /* the first one's wait holds */
    GLM_TRY(glm_be_upload_async(be, s->doc, h + 8 * cap, 4 * n, 0, &tk)); /* for the others */
    GLM_TRY(glm_be_upload_async(be, s->labels, lab, 4 * n, 0, &s->ticket));
    s->B = b->B;
    s->T = b->T;
    s->n_labels = cnt;
    return GLM_OK;
}

glm_status glm_model_prefetch(glm_model *m, const glm_batch *b) {
    struct glm_ws *w = m->ws;
    if (!w || w->cp > 1 || m->opt.cp > 1 || !b || b->B <= 0 || b->B > w->B_cap || b->T != w->T || !b->ids || !b->pos || !b->doc)
        return GLM_OK; /* not for this workspace: the step uploads it */
    const int k = 1 - w->cur;
    if (set_holds(w, k, b) || set_holds(w, w->cur, b)) return GLM_OK;
    if (check_batch(m, b) != GLM_OK) { /* the step reports it, with the step's context */
        glm_err_clear();
        return GLM_OK;
    }
    /* set k was last read by the step before the current one, which has completed */
    GLM_TRY(set_fill(m, w, k, b, 0));
    w->bset[k].pending = w->bset[k].prefetched = 1;
    return GLM_OK;
}

/* Context parallel: the labels of a chunk's last token is the first token of the next chunk; the
 * rows' document ids are padded by the layout's padding rule. */
glm_status glm_ws_upload_batch(glm_model *m, struct glm_ws *w, const glm_batch *b, const glm_cp_layout *cpl,
                               int64_t *n_labels) {
    const glm_backend *be = m->be;
    if (!cpl) {
        int k = set_holds(w, 1 - w->cur, b) ? 1 - w->cur : set_holds(w, w->cur, b) ? w->cur : -1;
        if (k >= 0) {
            m->batches_prefetched += w->bset[k].prefetched;
            m->batches_kept += !w->bset[k].prefetched;
        } else {
            GLM_TRY(check_batch(m, b));
            k = 1 - w->cur;
            GLM_TRY(set_fill(m, w, k, b, 1));
        }
        glm_batch_set *s = &w->bset[k];
        s->prefetched = 0;
        w->cur = k;
        w->ids = s->ids;
        w->pos = s->pos;
        w->doc = s->doc;
        w->labels = s->labels;
        w->lab_host = (int32_t *)(s->host + 12 * set_cap(w));
        *n_labels = s->n_labels;
        return glm_be_copy_wait(be, s->ticket);
    }
    GLM_TRY(check_batch(m, b));
    int32_t *lab = w->lab_host;
    int64_t cnt = 0;
    const int T = b->T, TL = glm_cp_local(cpl), Tp = cpl->Tp;
    const int64_t NL = (int64_t)b->B * TL;
    int32_t *loc = w->loc_host, *gd = w->gdoc_host;
    for (int r = 0; r < b->B; r++) {
        const int64_t o = (int64_t)r * T;
        for (int t = 0; t < Tp; t++) gd[(int64_t)r * Tp + t] = t < T ? b->doc[o + t] : b->doc[o + T - 1] + 1;
        for (int j = 0; j < TL; j++) {
            int64_t t = glm_cp_global(cpl, j), l = (int64_t)r * TL + j;
            lab[l] = (t + 1 < T && b->targets && b->targets[o + t + 1]) ? (int32_t)b->ids[o + t + 1] : -1;
            cnt += lab[l] >= 0;
            loc[l] = t < T ? (int32_t)b->ids[o + t] : 0; /* padding: token 0 */
        }
    }
    GLM_TRY(glm_be_upload(be, w->ids, loc, (size_t)NL * 4)); /* uint32 ids below V < 2^31: the same bits */
    for (int r = 0; r < b->B; r++)
        for (int j = 0; j < TL; j++) {
            int64_t t = glm_cp_global(cpl, j);
            loc[(int64_t)r * TL + j] = t < T ? b->pos[(int64_t)r * T + t] : (int32_t)(t - T); /* padding: 0, 1, ... */
        }
    GLM_TRY(glm_be_upload(be, w->pos, loc, (size_t)NL * 4));
    GLM_TRY(glm_be_upload(be, w->labels, lab, (size_t)NL * 4));
    GLM_TRY(glm_be_upload(be, w->gdoc, gd, (size_t)b->B * (size_t)Tp * 4));
    *n_labels = cnt;
    return GLM_OK;
}

