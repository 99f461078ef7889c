/* lora/model/step_ws.c: the training step's workspace (struct glm_ws, lora/model/step_internal.h):
 * every buffer of the plan's table (lora/model/plan.h decides every size; this file only allocates
 * them), bound to their uses: layer inputs and offload copies, kept activations, LoRA copies,
 * batch sets, the ring; made for a plan, kept while the calls fit it, freed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "lora/model/step_internal.h"

void glm_ws_free(struct glm_ws *w) {
    if (!w) return;
    for (int i = 0; i < w->n_allocs; i++) glm_be_free(w->be, w->allocs[i]);
    free(w->allocs);
    for (int i = 0; i < w->n_xh; i++) glm_be_host_free(w->be, w->xh[i]);
    for (int k = 0; k < 2; k++) glm_be_host_free(w->be, w->bset[k].host);
    for (int i = 0; i < GLM_BUF_COUNT; i++) free(w->buf[i]);
    free(w->xh);
    free(w->xs);
    free(w->acts);
    free(w->shA);
    free(w->shB);
    if (w->cp > 1) free(w->lab_host);
    free(w->gdoc_host);
    free(w->loc_host);
    free(w);
}

static glm_status ws_alloc(struct glm_ws *w, double bytes, const char *what, void **p) {
    if (w->n_allocs == w->cap_allocs) {
        int cap = w->cap_allocs ? 2 * w->cap_allocs : 64;
        void **a = realloc(w->allocs, (size_t)cap * sizeof *a);
        if (!a) return glm_err(GLM_ERR_NOMEM, "out of memory");
        w->allocs = a;
        w->cap_allocs = cap;
    }
    size_t b = bytes > 0 ? (size_t)bytes : 16; /* the plan rounds every buffer to 256 bytes (vector loads) */
    GLM_TRY(glm_be_alloc(w->be, b, what, p));
    w->allocs[w->n_allocs++] = *p;
    return GLM_OK;
}

const glm_plan *glm_model_current_plan(const glm_model *m) { return m->ws ? &m->ws->plan : NULL; }

/* The workspace's host arrays (layer inputs, kept activations, context parallel's host copies),
 * then every buffer of the plan's table, in the table's order, but the backend's own scratch. */
static glm_status ws_alloc_table(struct glm_ws *w, const glm_plan *p, int L) {
    w->xs = calloc((size_t)L + 1, sizeof(void *));
    w->acts = calloc((size_t)L, sizeof(glm_layer_acts));
    if (p->cp > 1) {
        w->lab_host = malloc((size_t)p->N * sizeof(int32_t));
        w->gdoc_host = malloc((size_t)p->B * (size_t)p->T_padded * sizeof(int32_t));
        w->loc_host = malloc((size_t)p->N * sizeof(int32_t));
    }
    if (!w->xs || !w->acts || (p->cp > 1 && (!w->lab_host || !w->gdoc_host || !w->loc_host)))
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    for (int id = 0; id < GLM_BUF_COUNT && !st; id++) {
        const glm_plan_buf *pb = &p->buf[id];
        if (pb->count <= 0 || id == GLM_BUF_BACKEND) continue; /* the backend grows its own scratch */
        if (!(w->buf[id] = calloc((size_t)pb->count, sizeof(void *)))) st = glm_err(GLM_ERR_NOMEM, "out of memory");
        for (int k = 0; k < pb->count && !st; k++) st = ws_alloc(w, pb->bytes, glm_buf_name((glm_buf_id)id), &w->buf[id][k]);
    }
    return st;
}

/* Each layer's input (its own buffer, or with offloading a slot plus a host copy); where a layer
 * that keeps nothing works (w->work) and the backward's buffers (w->bwd); for the backward, each
 * layer's kept activations as its checkpointing policy keeps them (w->acts). */
static glm_status ws_bind_layers(struct glm_ws *w, const glm_plan *p, int L) {
    w->work = (glm_layer_acts){.pol = GLM_CKPT_FULL, .qkv = GLM_WB(w, GLM_BUF_QKV), .o = GLM_WB(w, GLM_BUF_O),
                               .lse = GLM_WB(w, GLM_BUF_LSE)};
    w->bwd = (glm_layer_bwd_bufs){GLM_WB(w, GLM_BUF_DX), GLM_WB(w, GLM_BUF_XMID), GLM_WB(w, GLM_BUF_DQKV),
                                  GLM_WB(w, GLM_BUF_DXN_C), GLM_WB(w, GLM_BUF_DA_C), GLM_WB(w, GLM_BUF_DH_C),
                                  GLM_WB(w, GLM_BUF_ATTN_D), p->dout_over_out};
    if (!p->backward) {
        for (int l = 0; l <= L; l++) w->xs[l] = w->buf[GLM_BUF_X][l & 1];
        return GLM_OK;
    }
    /* layer inputs: the offloaded ones through the slots, the others in their own buffers */
    int next = 0;
    for (int l = 0; l <= L; l++)
        w->xs[l] = glm_plan_x_in_slot(p, L, l) ? w->buf[GLM_BUF_XSLOT][l & 1] : w->buf[GLM_BUF_X][next++];
    if (p->n_host > 0) {
        if (!(w->xh = calloc((size_t)p->n_host, sizeof(void *)))) return glm_err(GLM_ERR_NOMEM, "out of memory");
        for (int l = 0; l < p->n_host; l++, w->n_xh++)
            GLM_TRY(glm_be_host_alloc(w->be, (size_t)p->buf[GLM_BUF_XSLOT].bytes, "offloaded layer inputs", &w->xh[l]));
    }
    for (int l = 0; l < L; l++) { /* kept activations: layers [0, n_keep + n_selective) keep attention's */
        glm_layer_acts *s = &w->acts[l];
        *s = w->work;
        s->pol = glm_plan_layer(p, l);
        if (s->pol == GLM_CKPT_FULL) continue;
        s->qkv = w->buf[GLM_BUF_KEEP_QKV][l];
        s->o = w->buf[GLM_BUF_KEEP_O][l];
        s->x_mid = w->buf[GLM_BUF_KEEP_XMID][l];
        s->lse = w->buf[GLM_BUF_KEEP_LSE][l];
        if (s->pol == GLM_CKPT_SELECTIVE) continue;
        s->xn1 = w->buf[GLM_BUF_KEEP_XN1][l];
        s->xn2 = w->buf[GLM_BUF_KEEP_XN2][l];
        s->h = w->buf[GLM_BUF_KEEP_H][l];
        s->a = w->buf[GLM_BUF_KEEP_A][l];
        s->rstd1 = w->buf[GLM_BUF_KEEP_RSTD1][l];
        s->rstd2 = w->buf[GLM_BUF_KEEP_RSTD2][l];
        s->lora_u = w->buf[GLM_BUF_KEEP_LORA_U] ? w->buf[GLM_BUF_KEEP_LORA_U][l] : NULL;
    }
    return GLM_OK;
}

/* Each site's lora_A / lora_B as the step reads them: copies in the
 * activation dtype laid out in the plan's LORA_COPIES buffer, or the fp32 weights themselves. */
static glm_status ws_bind_lora(struct glm_ws *w, const glm_lora *lora, const glm_plan *p) {
    if (!lora) return GLM_OK;
    w->shA = calloc((size_t)lora->n_sites, sizeof(void *));
    w->shB = calloc((size_t)lora->n_sites, sizeof(void *));
    if (!w->shA || !w->shB) return glm_err(GLM_ERR_NOMEM, "out of memory");
    w->shadows = w->be->act_dtype != GLM_DT_F32;
    if (!w->shadows) {
        for (int si = 0; si < lora->n_sites; si++) {
            w->shA[si] = lora->params[lora->sites[si].pa].w;
            w->shB[si] = lora->params[lora->sites[si].pb].w;
        }
        return GLM_OK;
    }
    /* one buffer; per (layer, linear) the lora_A copies of its adapters are contiguous, so
     * one GEMM can compute u for all of them ([sites * r, in] stacked) */
    char *base = GLM_WB(w, GLM_BUF_LORA_COPIES);
    size_t off = 0;
    for (int l = 0; l < lora->L; l++)
        for (int lin = 0; lin < 4; lin++) {
            for (int k = 0; k < lora->layer_count[l]; k++) {
                int si = lora->layer_first[l] + k;
                if (lora->sites[si].lin != (glm_linear)lin) continue;
                w->shA[si] = base + off;
                off += (size_t)lora->params[lora->sites[si].pa].numel * w->esz;
            }
            for (int k = 0; k < lora->layer_count[l]; k++) {
                int si = lora->layer_first[l] + k;
                if (lora->sites[si].lin != (glm_linear)lin) continue;
                off = (off + 255) / 256 * 256;
                w->shB[si] = base + off;
                off += (size_t)lora->params[lora->sites[si].pb].numel * w->esz;
                off = (off + 255) / 256 * 256;
            }
        }
    if (!base || off > p->buf[GLM_BUF_LORA_COPIES].bytes)
        return glm_err(GLM_ERR_INTERNAL, "model step: the LoRA copies take %zu bytes, the plan sized %.0f", off,
                       p->buf[GLM_BUF_LORA_COPIES].bytes);
    return GLM_OK;
}

/* The batch sets in the plan's BATCH buffers (two, one being uploaded while the other runs;
 * context parallel: one) with their pinned host copies, the first one current. */
static glm_status ws_bind_batches(struct glm_ws *w, const glm_plan *p) {
    for (int k = 0; k < (p->cp > 1 ? 1 : 2); k++) {
        glm_batch_set *bs = &w->bset[k];
        void **bb = w->buf[GLM_BUF_BATCH] + 4 * k;
        bs->ids = bb[0];
        bs->pos = bb[1];
        bs->doc = bb[2];
        bs->labels = bb[3];
        if (p->cp <= 1)
            GLM_TRY(glm_be_host_alloc(w->be, (size_t)p->N * 17, "the batches' host copies", (void **)&bs->host));
    }
    w->ids = w->bset[0].ids;
    w->pos = w->bset[0].pos;
    w->doc = w->bset[0].doc;
    w->labels = w->bset[0].labels;
    return GLM_OK;
}

/* Context parallel: the ring (lora/model/ring_attention.h) over the plan's RING_* buffers and this
 * rank's place in the group's layout. */
static void ws_bind_ring(const glm_model *m, struct glm_ws *w, const glm_plan *p) {
    glm_ring *R = &w->ring;
    R->be = w->be;
    R->comm = m->opt.cp_comm;
    glm_cp_layout_make(p->T, p->cp, m->opt.cp_comm->rank, &R->L);
    R->B = p->B;
    R->H = m->cfg.H;
    R->Hkv = m->cfg.Hkv;
    R->Dh = m->cfg.Dh;
    R->kv[0] = w->buf[GLM_BUF_RING_KV][0];
    R->kv[1] = w->buf[GLM_BUF_RING_KV][1];
    if (p->backward) {
        R->dkv[0] = w->buf[GLM_BUF_RING_DKV][0];
        R->dkv[1] = w->buf[GLM_BUF_RING_DKV][1];
    }
    R->acc = GLM_WB(w, GLM_BUF_RING_ACC);
    R->lse_acc = GLM_WB(w, GLM_BUF_RING_LSE);
    w->gdoc = GLM_WB(w, GLM_BUF_RING_GDOC);
    R->gdoc = w->gdoc;
    R->gdoc_host = w->gdoc_host;
}

/* The workspace for plan p (and the LoRA copies of lora): every buffer of the plan's table. */
static glm_status ws_create(glm_model *m, const glm_lora *lora, const glm_plan *p, glm_ckpt_mode mode, struct glm_ws **out) {
    const glm_backend *be = m->be;
    struct glm_ws *w = calloc(1, sizeof *w);
    if (!w) return glm_err(GLM_ERR_NOMEM, "out of memory");
    w->be = be;
    w->plan = *p;
    w->mode = mode;
    w->lora = lora;
    w->B_cap = p->B;
    w->T = p->T;
    w->TL = (int)p->T_local;
    w->cp = p->cp;
    w->backward = p->backward;
    w->max_bytes = m->opt.max_bytes;
    w->mlp_over = m->opt.mlp_chunk;
    w->loss_over = m->opt.loss_chunk;
    w->offload_over = m->opt.offload;
    w->plan_offload_layers = m->opt.offload_layers;
    w->esz = glm_dtype_size(be->act_dtype);
    glm_status st = ws_alloc_table(w, p, m->cfg.L);
    if (!st) st = ws_bind_layers(w, p, m->cfg.L);
    if (!st) st = ws_bind_lora(w, lora, p);
    if (!st) st = ws_bind_batches(w, p);
    if (!st && p->cp > 1) ws_bind_ring(m, w, p);
    if (!st) {
        glm_wslots_layout(m, w);
        /* the backend's scratch grown now (cuDNN's workspace unless the plan left it out): an
         * out-of-memory or the memory cap shows here, before the first step */
        glm_scratch_shape sh;
        glm_model_scratch_shape(m, p->B, p->T, p->backward, p->loss_chunk, &sh);
        st = glm_be_scratch_reserve(be, &sh, !p->attn_lean);
    }
    if (st) {
        glm_ws_free(w);
        return st;
    }
    *out = w;
    return GLM_OK;
}

/* An out-of-memory while allocating the workspace: the message says what the plan was and what
 * to change. */
static glm_status oom_context(glm_status st, const glm_model *m, const glm_plan *p) {
    if (st != GLM_ERR_NOMEM) return st;
    const double G = 1073741824.0;
    return glm_err_context(st,
                           "the training step's buffers for %d x %d tokens (gradient checkpointing %s: %d layers keep, %d "
                           "selective, %d full; predicted %.2f GiB of a %.2f GiB budget) do not fit on the %s device; hint: "
                           "--gradient-checkpointing auto or full, a shorter --seq-len, a smaller --per-device-train-batch-size, "
                           "--quantization-bit 4, or --max-gpu-memory below what the card has free (glmtune train --dry-run "
                           "prints the plan)",
                           p->B, p->T, glm_ckpt_name(p->requested), p->n_keep, p->n_selective, p->n_full, p->total / G,
                           p->budget / G, m->be->name);
}

glm_status glm_ws_ensure(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, int dropout) {
    struct glm_ws *w = m->ws;
    if (w && w->T == T && w->cp == (m->opt.cp > 1 ? m->opt.cp : 0) && (w->cp == 0 || w->ring.comm == m->opt.cp_comm) && B <= w->B_cap &&
        (!backward || w->backward) && (w->mode == mode || !backward) && (!lora || w->lora == lora) &&
        (!dropout || GLM_WB(w, GLM_BUF_LORA_DROP)) &&
        w->max_bytes == m->opt.max_bytes && w->mlp_over == m->opt.mlp_chunk && w->loss_over == m->opt.loss_chunk &&
        w->offload_over == m->opt.offload && w->plan_offload_layers == m->opt.offload_layers)
        return GLM_OK;
    glm_ws_free(m->ws);
    m->ws = NULL;
    glm_plan p;
    glm_model_plan(m, lora, B, T, backward, mode, &p);
    glm_status st = ws_create(m, lora, &p, mode, &m->ws);
    return oom_context(st, m, &p);
}

glm_status glm_ws_check_cp(const glm_model *m) {
    if (m->opt.cp > 1 && (!m->opt.cp_comm || m->opt.cp_comm->world != m->opt.cp))
        return glm_err(GLM_ERR_ARG, "model step: context parallel over %d ranks needs their group communicator (cp_comm "
                       "of %d ranks)", m->opt.cp, m->opt.cp_comm ? m->opt.cp_comm->world : 0);
    return GLM_OK;
}

glm_status glm_model_prepare(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out) {
    GLM_TRY(glm_ws_check_cp(m));
    GLM_TRY(glm_ws_ensure(m, lora, B, T, backward && lora, mode, lora && lora->dropout > 0));
    if (out) *out = m->ws->plan;
    return GLM_OK;
}

glm_status glm_ws_head_bufs(struct glm_ws *w, float **logp, float **weights) {
    if (!w->head_logp) {
        const double b = (double)w->plan.N * sizeof(float);
        GLM_TRY(ws_alloc(w, b, "the loss head's log-probabilities", (void **)&w->head_logp));
        GLM_TRY(ws_alloc(w, b, "the loss head's weights", (void **)&w->head_w));
    }
    *logp = w->head_logp;
    *weights = w->head_w;
    return GLM_OK;
}

glm_status glm_ws_refresh_lora(struct glm_ws *w, glm_lora *L) {
    const glm_backend *be = w->be;
    if (!L || !w->shadows) return GLM_OK;
    glm_be_phase(be, GLM_PHASE_LORA);
    for (int si = 0; si < L->n_sites; si++) {
        const glm_param *A = &L->params[L->sites[si].pa], *B = &L->params[L->sites[si].pb];
        GLM_TRY(glm_be_cast(be, w->shA[si], be->act_dtype, A->w, GLM_DT_F32, A->numel));
        GLM_TRY(glm_be_cast(be, w->shB[si], be->act_dtype, B->w, GLM_DT_F32, B->numel));
    }
    return GLM_OK;
}

