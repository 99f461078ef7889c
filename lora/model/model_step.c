/* lora/model/model_step.c: the GLM-4 forward, loss and backward to the LoRA weights, over the backend
 * ops (lora/model/model.h), with the memory plan of lora/model/plan.h.
 *
 * Buffers: the workspace, allocated once per batch shape from the plan's table (glm_plan.buf:
 * the plan decides every size, this file only allocates and uses them):
 *   layer inputs        the residual stream at each layer boundary [N, C] (always kept): on the
 *                       device, or for the plan's first n_host layers in host memory (xh,
 *                       be->host_alloc: page-locked on CUDA) through two device slots, input l in
 *                       slot l % 2 (the last layer's output too, when any input is offloaded): the
 *                       forward downloads each offloaded input while the next layer computes, the
 *                       backward uploads layer l-1's input while layer l's backward computes
 *                       (be->upload_async / download_async, waited for by tickets just before the
 *                       slot is overwritten or read)
 *   kept, per layer     keep: xn1, qkv (after RoPE), o, x_mid, xn2, h, a, rstd1, rstd2, lse;
 *                       selective: qkv, o, x_mid, lse; full: nothing
 *   row-spanning        attention's operands for layers that do not keep them (qkv, o, lse), the
 *                       recomputed x_mid (whose buffer then holds d_o), dx and d_qkv [N, .]:
 *                       attention is the only op whose inputs span the row
 *   chunks              every token-local op (norms, the four projections with their LoRA, SwiGLU,
 *                       residual adds, their gradients) runs over chunks of mlp_chunk tokens: a
 *                       norm's output, rstd, the MLP's h and a and their gradients, d_xn, LoRA's u,
 *                       du and dropped-out input exist for one chunk; the loss head's chunk
 *   batches             two sets of ids/pos/doc/labels [N] with page-locked host copies: the step
 *                       uses the set that glm_model_prefetch filled during the previous step's
 *                       backward (its upload overlapped that backward), or fills one itself
 *   LoRA copies         act-dtype copies of lora_A / lora_B (bf16 on CUDA), refreshed from the
 *                       fp32 weights at every step, so every LoRA GEMM has act-dtype operands;
 *                       on the CPU (act = f32) the weights themselves.
 *   weight slots        a sharded base's gather slots (two layers' matrices in their stored
 *                       format, one [V, C]); a 4-bit base's dequantized layer (act dtype); an
 *                       fp8 base's transposed layer (its codes [cols, rows], for the backward)
 * Linear layers: y = x W^T (+ bias) + scaling * dropout(x) A^T B^T. The LoRA up-projection and
 * the bias go into y first and the base GEMM accumulates onto them (beta = 1); residual linears
 * (dense, dense_4h_to_h) accumulate all three onto the residual stream. The frozen matrices go
 * through glm_base_matmul; a layer's 4-bit matrices are dequantized into the slot just before the
 * layer runs (once per forward, recomputation and backward of that layer); an fp8 layer's codes are
 * transposed into their slot just before its backward (the input gradients' FP8 GEMMs read them
 * K-contiguous). Every op is preceded by
 * be->phase() so `glmtune bench` can time the step by phase. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/comm.h"
#include "lora/model/model.h"
#include "lora/model/ring_attention.h"
#include "lora/model/step_internal.h"

/* A batch held on the device (non-context-parallel steps): what glm_model_prefetch or the step
 * uploaded, and the host copy it came from (compared with a step's batch to find it). */
typedef struct batch_set {
    uint32_t *ids;           /* device [N] */
    int32_t *pos, *doc, *labels;
    char *host;              /* be->host_alloc: ids, pos, doc, labels (4 N bytes each), targets (N bytes) */
    int B, T;                /* the batch held (B = 0: none) */
    int64_t n_labels;
    uint64_t ticket;         /* its upload (be->upload_async) */
    int pending;             /* uploaded by glm_model_prefetch during a step: the copy may be in flight */
    int prefetched;          /* filled by glm_model_prefetch and not used yet */
} batch_set;

typedef struct saved {
    void *xn1, *qkv, *o, *x_mid, *xn2, *h, *a;
    void *lora_u; /* keep layers with adapters: every adapter's u = x A^T (kept_u) */
    float *rstd1, *rstd2, *lse;
} saved;

/* The frozen base's working copies (the plan's GLM_BUF_WGATHER*, GLM_BUF_WDENSE). A gather slot's
 * matrices are all-gathered from every rank's shard (be->all_gather_start), in the stored format,
 * and waited for (be->comm_wait) just before use; CUDA orders the gather after the compute queued
 * before it, so refilling the slot of layer l-1 while layer l computes is safe. A 4-bit layer is
 * dequantized (be->weight_dequantize) into the dense slot just before it runs; an fp8 layer's codes
 * are transposed (be->fp8_transpose) into the trans slot just before its backward. */
typedef struct wslots {
    int sharded, packed;
    void *slot[2];              /* gather: two layers, each the four matrices' buffers at offsets */
    size_t off[4][3];           /* byte offset in a slot of matrix i's data, absmax, absmax2 */
    size_t shard_b[4][3];       /* bytes of matrix i's buffers in one shard */
    int layer[2];               /* the layer a gather slot holds (or is being filled with); -1: none */
    int req[2][4][3];           /* outstanding gathers of a slot (-1: none) */
    glm_layer_weights view[2];  /* gathered layer weights (the stored format, whole) */
    void *big;                  /* [V, C]: the embedding or the output layer */
    int big_what, big_req;      /* 0 none, 1 embedding, 2 output layer; its outstanding gather */
    size_t big_shard_b;
    glm_weight big_view;
    void *dense;                /* 4-bit base: one layer's matrices in act dtype */
    size_t dense_off[4];
    int dense_layer;            /* the layer the dense slot holds; -1: none */
    glm_layer_weights dview;    /* its view */
    void *trans;                /* fp8 base, backward: one layer's codes transposed */
    size_t trans_off[4];
    int trans_layer;            /* the layer the trans slot holds; -1: none */
    glm_layer_weights tview;    /* its view: the layer's weights with data_t set */
} wslots;

struct glm_ws {
    const glm_backend *be;
    glm_plan plan;
    glm_ckpt_mode mode;      /* requested */
    const glm_lora *lora;    /* the adapter the LoRA copies belong to (NULL: none) */
    int B_cap, T, backward;  /* T: the rows' length; with context parallel each row holds TL = 2S of them here */
    int TL, cp;
    double max_bytes;
    int64_t mlp_over, loss_over;
    int offload_over;        /* m->offload and m->offload_layers when the workspace was made */
    int plan_offload_layers;
    size_t esz;
    void **buf[GLM_BUF_COUNT]; /* plan.buf[id].count buffers each */
    void **xs;               /* [L + 1]: layer input l on the device (its own buffer, or its slot) */
    void **xh;               /* [n_host]: host copies of the offloaded layer inputs */
    int n_xh;
    saved *S;                /* [L] (backward only) */
    void *u, *du, *drop;     /* LoRA chunk buffers */
    void **shA, **shB;       /* per site: act-dtype lora_A [r, in], lora_B [out, r] */
    int shadows;             /* 1: shA/shB are copies to refresh; 0: the fp32 weights */
    uint32_t *ids;           /* the step's batch: bset[cur]'s (context parallel: its own) */
    int32_t *pos, *doc, *labels;
    int32_t *lab_host;       /* the labels on the host */
    batch_set bset[2];       /* non-context-parallel: the batches held, the step's in bset[cur] */
    int cur;
    /* context parallel: the ring's buffers, the rows' document ids (device [B, Tp] and host), and
     * a host scratch for the local tokens' ids and positions */
    glm_ring ring;
    int32_t *gdoc, *gdoc_host, *loc_host;
    wslots W;
    void **allocs;
    int n_allocs, cap_allocs;
};

/* The first buffer of plan buffer `id` (NULL when the plan has none). */
#define WB(w, id) ((w)->buf[id] ? (w)->buf[id][0] : NULL)

void glm_ws_free(struct glm_ws *w) {
    if (!w) return;
    for (int i = 0; i < w->n_allocs; i++) glm_be_free(w->be, w->allocs[i]);
    free(w->allocs);
    for (int i = 0; i < w->n_xh; i++) glm_be_host_free(w->be, w->xh[i]);
    for (int k = 0; k < 2; k++) glm_be_host_free(w->be, w->bset[k].host);
    for (int i = 0; i < GLM_BUF_COUNT; i++) free(w->buf[i]);
    free(w->xh);
    free(w->xs);
    free(w->S);
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

/* The weight slots' layout in the plan's buffers (lora/model/plan.c sizes them with the same
 * glm_weight_slot_bytes). */
static void wslots_layout(const glm_model *m, struct glm_ws *w) {
    wslots *g = &w->W;
    const glm_layer_weights *l0 = &m->layers[0];
    const glm_weight *mats[4] = {&l0->wqkv, &l0->wo, &l0->w1, &l0->w2};
    const int W = m->shard_world;
    g->sharded = W > 1;
    g->packed = glm_wformat_packed(l0->wqkv.fmt);
    g->layer[0] = g->layer[1] = -1;
    g->dense_layer = -1;
    g->trans_layer = -1;
    g->big_req = -1;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++) g->req[k][i][j] = -1;
    size_t off = 0, doff = 0, toff = 0;
    for (int i = 0; i < 4; i++) {
        glm_weight_bytes_t sb = glm_weight_bytes(mats[i]->fmt, mats[i]->n, mats[i]->double_quant);
        size_t b[3] = {sb.data, sb.absmax, sb.absmax2};
        for (int j = 0; j < 3; j++) {
            g->shard_b[i][j] = b[j];
            g->off[i][j] = off;
            off += ((size_t)(W > 1 ? W : 1) * b[j] + 255) / 256 * 256;
        }
        g->dense_off[i] = doff;
        doff += (size_t)glm_weight_slot_bytes(m->be->act_dtype == GLM_DT_BF16 ? GLM_WF_BF16 : GLM_WF_F32,
                                              mats[i]->rows * mats[i]->cols, 0);
        g->trans_off[i] = toff;
        toff += (size_t)glm_weight_slot_bytes(GLM_WF_FP8_E4M3, mats[i]->rows * mats[i]->cols, 0);
    }
    g->big_shard_b = glm_weight_bytes(m->embed.fmt, m->embed.n, 0).data;
    g->slot[0] = WB(w, GLM_BUF_WGATHER);
    g->slot[1] = w->buf[GLM_BUF_WGATHER] && w->plan.buf[GLM_BUF_WGATHER].count > 1 ? w->buf[GLM_BUF_WGATHER][1] : NULL;
    g->big = WB(w, GLM_BUF_WGATHER_BIG);
    g->dense = WB(w, GLM_BUF_WDENSE);
    g->trans = WB(w, GLM_BUF_WTRANS);
}

/* The workspace's host arrays (layer inputs, kept activations, context parallel's host copies),
 * then every buffer of the plan's table, in the table's order, but the backend's own scratch. */
static glm_status ws_alloc_table(struct glm_ws *w, const glm_plan *p, int L) {
    w->xs = calloc((size_t)L + 1, sizeof(void *));
    w->S = calloc((size_t)L, sizeof(saved));
    if (p->cp > 1) {
        w->lab_host = malloc((size_t)p->N * sizeof(int32_t));
        w->gdoc_host = malloc((size_t)p->B * (size_t)p->T_padded * sizeof(int32_t));
        w->loc_host = malloc((size_t)p->N * sizeof(int32_t));
    }
    if (!w->xs || !w->S || (p->cp > 1 && (!w->lab_host || !w->gdoc_host || !w->loc_host)))
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

/* Each layer's input (its own buffer, or with offloading a slot plus a host copy) and, for the
 * backward, each layer's kept activations as its checkpointing policy keeps them. */
static glm_status ws_bind_layers(struct glm_ws *w, const glm_plan *p, int L) {
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
        saved *s = &w->S[l];
        glm_ckpt_mode pol = glm_plan_layer(p, l);
        if (pol == GLM_CKPT_FULL) continue;
        s->qkv = w->buf[GLM_BUF_KEEP_QKV][l];
        s->o = w->buf[GLM_BUF_KEEP_O][l];
        s->x_mid = w->buf[GLM_BUF_KEEP_XMID][l];
        s->lse = w->buf[GLM_BUF_KEEP_LSE][l];
        if (pol == GLM_CKPT_SELECTIVE) continue;
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

/* The LoRA chunk buffers and each site's lora_A / lora_B as the step reads them: copies in the
 * activation dtype laid out in the plan's LORA_COPIES buffer, or the fp32 weights themselves. */
static glm_status ws_bind_lora(struct glm_ws *w, const glm_lora *lora, const glm_plan *p) {
    w->u = WB(w, GLM_BUF_LORA_U);
    w->du = WB(w, GLM_BUF_LORA_DU);
    w->drop = WB(w, GLM_BUF_LORA_DROP);
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
    char *base = WB(w, GLM_BUF_LORA_COPIES);
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
        batch_set *bs = &w->bset[k];
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
    R->comm = m->cp_comm;
    glm_cp_layout_make(p->T, p->cp, m->cp_comm->rank, &R->L);
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
    R->acc = WB(w, GLM_BUF_RING_ACC);
    R->lse_acc = WB(w, GLM_BUF_RING_LSE);
    w->gdoc = WB(w, GLM_BUF_RING_GDOC);
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
    w->max_bytes = m->max_bytes;
    w->mlp_over = m->mlp_chunk;
    w->loss_over = m->loss_chunk;
    w->offload_over = m->offload;
    w->plan_offload_layers = m->offload_layers;
    w->esz = glm_dtype_size(be->act_dtype);
    glm_status st = ws_alloc_table(w, p, m->cfg.L);
    if (!st) st = ws_bind_layers(w, p, m->cfg.L);
    if (!st) st = ws_bind_lora(w, lora, p);
    if (!st) st = ws_bind_batches(w, p);
    if (!st && p->cp > 1) ws_bind_ring(m, w, p);
    if (!st) {
        wslots_layout(m, w);
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

/* The workspace for this call: the current one when it fits (shape, mode, adapter, dropout
 * buffer when dropout is on), else a new one from a new plan. */
static glm_status ensure_ws(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, int dropout) {
    struct glm_ws *w = m->ws;
    if (w && w->T == T && w->cp == (m->cp > 1 ? m->cp : 0) && (w->cp == 0 || w->ring.comm == m->cp_comm) && B <= w->B_cap &&
        (!backward || w->backward) && (w->mode == mode || !backward) && (!lora || w->lora == lora) && (!dropout || w->drop) &&
        w->max_bytes == m->max_bytes && w->mlp_over == m->mlp_chunk && w->loss_over == m->loss_chunk &&
        w->offload_over == m->offload && w->plan_offload_layers == m->offload_layers)
        return GLM_OK;
    glm_ws_free(m->ws);
    m->ws = NULL;
    glm_plan p;
    glm_model_plan(m, lora, B, T, backward, mode, &p);
    glm_status st = ws_create(m, lora, &p, mode, &m->ws);
    return oom_context(st, m, &p);
}

/* Context parallel needs the group's communicator, of cp ranks. */
static glm_status check_cp(const glm_model *m) {
    if (m->cp > 1 && (!m->cp_comm || m->cp_comm->world != m->cp))
        return glm_err(GLM_ERR_ARG, "model step: context parallel over %d ranks needs their group communicator (cp_comm "
                       "of %d ranks)", m->cp, m->cp_comm ? m->cp_comm->world : 0);
    return GLM_OK;
}

glm_status glm_model_prepare(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out) {
    GLM_TRY(check_cp(m));
    GLM_TRY(ensure_ws(m, lora, B, T, backward && lora, mode, lora && lora->dropout > 0));
    if (out) *out = m->ws->plan;
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- weight slots */

static glm_weight *mat_of(glm_layer_weights *lw, int i) {
    return i == 0 ? &lw->wqkv : i == 1 ? &lw->wo : i == 2 ? &lw->w1 : &lw->w2;
}

/* Starts gathering layer l into its slot (l % 2) unless the slot holds it already. */
static glm_status gather_start(glm_model *m, struct glm_ws *w, int l) {
    wslots *g = &w->W;
    const glm_backend *be = m->be;
    int k = l % 2;
    if (!g->sharded || g->layer[k] == l) return GLM_OK;
    g->layer[k] = l;
    for (int i = 0; i < 4; i++) {
        const glm_weight *src = mat_of(&m->layers[l], i);
        const void *from[3] = {src->data, src->absmax, src->absmax2};
        for (int j = 0; j < 3; j++)
            if (g->shard_b[i][j])
                GLM_TRY(glm_comm_all_gather_start(be, (char *)g->slot[k] + g->off[i][j], from[j], g->shard_b[i][j],
                                             &g->req[k][i][j]));
    }
    glm_comm_progress(be);
    return GLM_OK;
}

/* Layer l's whole weights in the stored format: the model's, or gathered (waiting for its slot). */
static glm_status gathered(glm_model *m, struct glm_ws *w, int l, const glm_layer_weights **out) {
    wslots *g = &w->W;
    const glm_backend *be = m->be;
    if (!g->sharded) {
        *out = &m->layers[l];
        return GLM_OK;
    }
    GLM_TRY(gather_start(m, w, l));
    int k = l % 2;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            if (g->req[k][i][j] >= 0) {
                glm_status st = glm_comm_wait(be, g->req[k][i][j]);
                g->req[k][i][j] = -1;
                GLM_TRY(st);
            }
    glm_layer_weights *v = &g->view[k];
    *v = m->layers[l]; /* the norms and the bias are whole */
    for (int i = 0; i < 4; i++) {
        glm_weight *d = mat_of(v, i);
        const glm_weight *s = mat_of(&m->layers[l], i);
        char *base = g->slot[k];
        d->n = d->rows * d->cols; /* the gathered tensor (its padding past the end unused) */
        d->data = base + g->off[i][0];
        d->absmax = s->absmax ? base + g->off[i][1] : NULL;
        d->absmax2 = s->absmax2 ? (float *)(base + g->off[i][2]) : NULL;
    }
    *out = v;
    return GLM_OK;
}

/* Layer l's fp8 weights with their codes transposed (data_t) for the backward's input gradients:
 * transposed into the trans slot unless it holds them. */
static glm_status transposed(glm_model *m, struct glm_ws *w, int l, const glm_layer_weights *lw,
                             const glm_layer_weights **out) {
    wslots *g = &w->W;
    const glm_backend *be = m->be;
    if (!g->trans)
        return glm_err(GLM_ERR_ARG, "model step: an fp8 layer's backward without the plan's transposed-weights slot");
    if (g->trans_layer != l) {
        glm_be_phase(be, GLM_PHASE_GEMM);
        g->tview = *lw;
        for (int i = 0; i < 4; i++) {
            glm_weight *d = mat_of(&g->tview, i);
            d->data_t = (char *)g->trans + g->trans_off[i];
            GLM_TRY(glm_be_fp8_transpose(be, d->data_t, d->data, d->rows, d->cols));
        }
        g->trans_layer = l;
    }
    *out = &g->tview;
    return GLM_OK;
}

/* Layer l's weights for its GEMMs: dense and whole (gathered, then dequantized for a 4-bit base), or
 * fp8; backward != 0: for the layer's backward (an fp8 layer's codes transposed too). */
static glm_status layer_weights(glm_model *m, struct glm_ws *w, int l, int backward, const glm_layer_weights **out) {
    wslots *g = &w->W;
    const glm_layer_weights *lw;
    if (g->packed && g->dense_layer == l) {
        *out = &g->dview;
        return GLM_OK;
    }
    GLM_TRY(gathered(m, w, l, &lw));
    if (!g->packed) {
        if (backward && lw->wqkv.fmt == GLM_WF_FP8_E4M3) return transposed(m, w, l, lw, out);
        *out = lw;
        return GLM_OK;
    }
    const glm_backend *be = m->be;
    glm_be_phase(be, GLM_PHASE_GEMM);
    glm_layer_weights *v = &g->dview;
    *v = *lw;
    for (int i = 0; i < 4; i++) {
        glm_weight *d = mat_of(v, i);
        const glm_weight *s = mat_of((glm_layer_weights *)lw, i);
        glm_weight q = *s;
        q.n = s->rows * s->cols;
        memset(d, 0, sizeof *d);
        d->fmt = be->act_dtype == GLM_DT_BF16 ? GLM_WF_BF16 : GLM_WF_F32;
        d->rows = s->rows;
        d->cols = s->cols;
        d->n = q.n;
        d->data = (char *)g->dense + g->dense_off[i];
        GLM_TRY(glm_be_weight_dequantize(be, d->data, be->act_dtype, &q));
    }
    g->dense_layer = l;
    *out = v;
    return GLM_OK;
}

/* Starts gathering the embedding (what 1) or the output layer (what 2) into the [V, C] slot. */
static glm_status gather_big_start(glm_model *m, struct glm_ws *w, int what) {
    wslots *g = &w->W;
    if (g->big_what == what) return GLM_OK;
    if (g->big_req >= 0) { /* the other one still in flight: it must land before being overwritten */
        GLM_TRY(glm_comm_wait(m->be, g->big_req));
        g->big_req = -1;
    }
    g->big_what = what;
    return glm_comm_all_gather_start(m->be, g->big, what == 1 ? m->embed.data : m->out_w.data, g->big_shard_b, &g->big_req);
}

/* The embedding (what 1) or the output layer (what 2), whole and dense. */
static glm_status big_use(glm_model *m, struct glm_ws *w, int what, const glm_weight **out) {
    wslots *g = &w->W;
    const glm_weight *whole = what == 1 ? &m->embed : &m->out_w;
    if (!g->sharded) {
        *out = whole;
        return GLM_OK;
    }
    GLM_TRY(gather_big_start(m, w, what));
    if (g->big_req >= 0) {
        glm_status st = glm_comm_wait(m->be, g->big_req);
        g->big_req = -1;
        GLM_TRY(st);
    }
    g->big_view = *whole;
    g->big_view.n = whole->rows * whole->cols;
    g->big_view.data = g->big;
    *out = &g->big_view;
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- layers */

#define OFF(p, elems) ((void *)((char *)(p) + (size_t)(elems) * w->esz))

/* Layer input l (l = L: the last layer's output) on the device: its buffer, or its slot. */
static void *xdev(const struct glm_ws *w, int l) { return w->xs[l]; }
#define PH(x) glm_be_phase(be, (x))
/* for (n0, rows) over the chunks of mc tokens of N */
#define FOR_CHUNKS(n0, rows, N, mc) \
    for (int64_t n0 = 0, rows = (N) < (mc) ? (N) : (mc); n0 < (N); n0 += (mc), rows = (N) - n0 < (mc) ? (N) - n0 : (mc))

typedef struct ctx {
    glm_model *m;
    glm_lora *lora;
    struct glm_ws *w;
    int B, T;       /* rows and tokens per row held here (context parallel: the local 2S) */
    int64_t N;
    uint64_t seed;
    float p_drop;   /* 0 when no dropout (logits path) */
    int T_row;      /* the rows' whole length (the dropout masks index tokens of the whole rows) */
    const glm_cp_layout *cpl; /* context parallel: this rank's chunks; NULL: off */
    const glm_layer_weights *lw; /* the current layer's weights (layer_weights) */
    const uint64_t *drop_key; /* [B * T_row] the batch's dropout keys (glm_batch.drop_key), or NULL */
} ctx;

/* Inverted dropout over rows [row0, row0 + rows) of the step's tokens (see be->dropout). The mask
 * of a token is indexed by its key: cx->drop_key of its place in the whole batch (row b, token t of
 * the whole row: b * T_row + t), or that place itself without keys. The rows are cut into runs of
 * tokens whose keys follow each other, one be->dropout each: with context parallel (local tokens
 * from two chunks of each row) every rank draws the masks the unsplit step draws, and with keys
 * every layout of the rows into micro-batches and ranks draws a token's mask alike. */
static glm_status drop_rows(const ctx *cx, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t rows, int64_t D,
                            int64_t row0, uint64_t stream) {
    const glm_backend *be = cx->m->be;
    if (!cx->cpl && !cx->drop_key) return glm_be_dropout(be, y, ldy, x, ldx, rows, D, row0, cx->p_drop, cx->seed, stream);
    const size_t e = glm_dtype_size(be->act_dtype);
    for (int64_t n = 0; n < rows;) {
        int64_t l = row0 + n, b = l / cx->T, j = l % cx->T;
        int64_t t = cx->cpl ? glm_cp_global(cx->cpl, j) : j; /* in the whole row */
        int64_t run = cx->cpl ? cx->cpl->S - j % cx->cpl->S : cx->T - j; /* consecutive in the whole row */
        if (run > rows - n) run = rows - n;
        const int64_t g = b * cx->T_row + t;
        uint64_t key = (uint64_t)g;
        if (cx->drop_key) {
            const uint64_t *k = cx->drop_key + g;
            int64_t r = 1;
            while (r < run && k[r] == k[0] + (uint64_t)r) r++;
            run = r;
            key = k[0];
        }
        GLM_TRY(glm_be_dropout(be, (char *)y + (size_t)(n * ldy) * e, ldy, (const char *)x + (size_t)(n * ldx) * e, ldx, run, D,
                            (int64_t)key, cx->p_drop, cx->seed, stream));
        n += run;
    }
    return GLM_OK;
}

static const glm_weight *base_weight(const glm_layer_weights *lw, glm_linear lin) {
    switch (lin) {
    case GLM_LIN_QKV: return &lw->wqkv;
    case GLM_LIN_DENSE: return &lw->wo;
    case GLM_LIN_H4H: return &lw->w1;
    default: return &lw->w2;
    }
}

/* The input of site si's LoRA branch: x, or its dropped-out copy (rows of the whole [N, in]
 * matrix starting at row0, so chunks and recomputation draw the same mask). */
static glm_status lora_input(ctx *cx, const glm_lora_site *s, const void *x, int64_t in, int64_t rows, int64_t row0,
                             const void **xin) {
    *xin = x;
    if (cx->p_drop > 0) {
        GLM_TRY(drop_rows(cx, cx->w->drop, in, x, in, rows, in, row0, (uint64_t)s->layer * 8 + s->module));
        *xin = cx->w->drop;
    }
    return GLM_OK;
}

/* The kept u of the adapters on (layer, lin) in a keep layer of a training step, else NULL: the
 * block [N, n r] of the layer's GLM_BUF_KEEP_LORA_U (n adapters on lin, their u side by side in
 * site order; the blocks in linear order), *ld = n r. The forward writes it, the backward's dB
 * reads it instead of computing u again: one read of the adapter's input fewer a site. */
static void *kept_u(const ctx *cx, int layer, glm_linear lin, int64_t *ld) {
    const struct glm_ws *w = cx->w;
    const glm_lora *L = cx->lora;
    if (!w->backward || !w->S || !w->S[layer].lora_u || !L) return NULL;
    int64_t before = 0, n = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        const glm_linear sl = L->sites[L->layer_first[layer] + k].lin;
        before += sl < lin;
        n += sl == lin;
    }
    *ld = n * L->r;
    return OFF(w->S[layer].lora_u, before * cx->N * L->r);
}

/* y[:, site rows] = beta * y0 + scaling * dropout(x) A^T B^T for every adapter on (layer, lin);
 * y0 (row stride ldy) is y itself when NULL. u goes to the layer's kept u (kept_u) or the chunk
 * buffer. */
static glm_status lora_up(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows, int64_t row0, void *y,
                          int64_t ldy, float beta, const void *y0) {
    const glm_backend *be = cx->m->be;
    struct glm_ws *w = cx->w;
    glm_lora *L = cx->lora;
    glm_dtype ad = be->act_dtype;
    const int r = L->r;
    int first = -1, n = 0;
    for (int k = 0; k < L->layer_count[layer]; k++)
        if (L->sites[L->layer_first[layer] + k].lin == lin) {
            if (first < 0) first = L->layer_first[layer] + k;
            n++;
        }
    PH(GLM_PHASE_LORA);
    int64_t ldk = 0;
    void *ku = kept_u(cx, layer, lin, &ldk);
    if (n > 1 && w->shadows && cx->p_drop == 0) {
        /* the adapters share the input: u = x [A_1; ...; A_n]^T in one GEMM (the copies are stacked) */
        const int64_t ldu = (int64_t)n * r;
        void *u = ku ? OFF(ku, row0 * ldu) : w->u;
        GLM_TRY(glm_be_matmul(be, 0, 1, rows, ldu, in, 1.0f, x, ad, in, w->shA[first], ad, in, 0.0f, u, ad, ldu));
        int j = 0;
        for (int k = 0; k < L->layer_count[layer]; k++) {
            int si = L->layer_first[layer] + k;
            const glm_lora_site *s = &L->sites[si];
            if (s->lin != lin) continue;
            GLM_TRY(glm_be_matmul_from(be, 0, 1, rows, s->out, r, L->scaling, OFF(u, j * r), ad, ldu, w->shB[si], ad, r, beta,
                                       y0 ? OFF(y0, s->row0) : NULL, OFF(y, s->row0), ad, ldy));
            j++;
        }
        return GLM_OK;
    }
    int j = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        int si = L->layer_first[layer] + k;
        const glm_lora_site *s = &L->sites[si];
        if (s->lin != lin) continue;
        const void *xin;
        const int64_t ldu = ku ? ldk : r;
        void *u = ku ? OFF(ku, row0 * ldk + j * r) : w->u;
        GLM_TRY(lora_input(cx, s, x, in, rows, row0, &xin));
        GLM_TRY(glm_be_matmul(be, 0, 1, rows, r, in, 1.0f, xin, ad, in, w->shA[si], ad, in, 0.0f, u, ad, ldu));
        GLM_TRY(glm_be_matmul_from(be, 0, 1, rows, s->out, r, L->scaling, u, ad, ldu, w->shB[si], ad, r, beta,
                                   y0 ? OFF(y0, s->row0) : NULL, OFF(y, s->row0), ad, ldy));
        j++;
    }
    return GLM_OK;
}

/* y [rows, out] (row stride ldy) = x W^T (+ bias) + LoRA, or with residual != 0 y = res + all of
 * it, res [rows, out] (row stride ldy) the residual stream's input, or y itself when NULL. x
 * [rows, in] act; rows start at row `row0` of the step's N tokens. When the adapters cover every
 * output row, LoRA's up-projection reads res and writes y in one GEMM (no copy of res); else res
 * is copied first. */
static glm_status linear_fwd(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows, int64_t row0,
                             void *y, int64_t ldy, int64_t out, int residual, const void *res) {
    const glm_backend *be = cx->m->be;
    const glm_layer_weights *lw = cx->lw;
    const void *bias = lin == GLM_LIN_QKV ? lw->bqkv : NULL;
    glm_lora *L = cx->lora;
    int64_t covered = 0;
    int n = 0;
    if (L)
        for (int k = 0; k < L->layer_count[layer]; k++) {
            const glm_lora_site *s = &L->sites[L->layer_first[layer] + k];
            if (s->lin == lin) {
                n++;
                covered += s->out;
            }
        }
    /* LoRA (and bias) first, the base GEMM accumulating onto them; when the adapters leave some
     * output rows uncovered (hf q_proj alone, say) the base GEMM must write them first */
    int lora_first = n > 0 && (residual || covered == out);
    if (!residual || res == y) res = NULL;
    if (res && !(lora_first && covered == out)) { /* the residual copied into y, then y accumulates */
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_cast_2d(be, y, be->act_dtype, ldy, res, be->act_dtype, ldy, rows, out)); /* a strided copy */
        res = NULL;
    }
    if (lora_first) {
        GLM_TRY(lora_up(cx, layer, lin, x, in, rows, row0, y, ldy, residual ? 1.0f : 0.0f, res));
        if (bias) {
            PH(GLM_PHASE_ELEMENTWISE);
            GLM_TRY(glm_be_add_bias(be, y, ldy, bias, rows, out));
        }
        PH(GLM_PHASE_GEMM);
        return glm_base_matmul(be, 0, rows, x, in, base_weight(lw, lin), 1.0f, y, ldy);
    }
    PH(GLM_PHASE_GEMM);
    GLM_TRY(glm_base_matmul(be, 0, rows, x, in, base_weight(lw, lin), residual ? 1.0f : 0.0f, y, ldy));
    if (bias) {
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_add_bias(be, y, ldy, bias, rows, out));
    }
    if (n) GLM_TRY(lora_up(cx, layer, lin, x, in, rows, row0, y, ldy, 1.0f, NULL));
    return GLM_OK;
}

/* dx [rows, in] = dy W plus the LoRA input gradient (OVERWRITES dx); ACCUMULATES the LoRA weight
 * grads. dy [rows, out] act with row stride ldy; x is the linear's forward input [rows, in].
 * The base GEMM writes dx and the rank-r GEMM du A adds onto it. (The other order, LoRA's input
 * gradient first and the base GEMM accumulating with beta 1, reads dx once less but made the base
 * GEMMs 7-10 ms slower a 9B step at 8k than the pass it saved: docs/bench/2026-12-05-h200.md.)
 * defer (may be NULL): when one adapter covers the linear and there is no dropout, du A is not
 * added here but described in *defer (du in the workspace's w->du, valid until the next
 * linear_bwd) for the op that reads dx next to add inside (be->swiglu_bwd): a pass over dx
 * fewer; else defer->u = NULL. */
static glm_status linear_bwd(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows, int64_t row0,
                             const void *dy, int64_t ldy, int64_t out, void *dx, glm_rank_term *defer) {
    const glm_backend *be = cx->m->be;
    struct glm_ws *w = cx->w;
    glm_dtype ad = be->act_dtype;
    (void)out;
    if (defer) defer->u = NULL;
    PH(GLM_PHASE_GEMM);
    GLM_TRY(glm_base_matmul(be, 1, rows, dy, ldy, base_weight(cx->lw, lin), 0.0f, dx, in));
    glm_lora *L = cx->lora;
    if (!L) return GLM_OK;
    const int r = L->r;
    PH(GLM_PHASE_LORA);
    int64_t ldk = 0;
    void *ku = kept_u(cx, layer, lin, &ldk);
    int nsites = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) nsites += L->sites[L->layer_first[layer] + k].lin == lin;
    const int deferred = defer && nsites == 1 && cx->p_drop == 0;
    int j = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        int si = L->layer_first[layer] + k;
        const glm_lora_site *s = &L->sites[si];
        if (s->lin != lin) continue;
        glm_param *A = &L->params[s->pa], *Bp = &L->params[s->pb];
        const void *dys = OFF(dy, s->row0), *xin;
        GLM_TRY(lora_input(cx, s, x, in, rows, row0, &xin));
        /* u [rows, r] = dropout(x) A^T: kept from the forward in keep layers, else computed again
           (the layers that recompute keep nothing for the backward) */
        const void *u = ku ? OFF(ku, row0 * ldk + (j++) * r) : w->u;
        const int64_t ldu = ku ? ldk : r;
        if (!ku) GLM_TRY(glm_be_matmul(be, 0, 1, rows, r, in, 1.0f, xin, ad, in, w->shA[si], ad, in, 0.0f, w->u, ad, r));
        /* dB [out, r] += scaling dy^T u */
        GLM_TRY(glm_be_matmul(be, 1, 0, s->out, r, rows, L->scaling, dys, ad, ldy, u, ad, ldu, 1.0f, Bp->g, GLM_DT_F32, r));
        /* du [rows, r] = scaling dy B */
        GLM_TRY(glm_be_matmul(be, 0, 0, rows, r, s->out, L->scaling, dys, ad, ldy, w->shB[si], ad, r, 0.0f, w->du, ad, r));
        /* dA [r, in] += du^T dropout(x) */
        GLM_TRY(glm_be_matmul(be, 1, 0, r, in, rows, 1.0f, w->du, ad, r, xin, ad, in, 1.0f, A->g, GLM_DT_F32, in));
        /* dx += dropout_bwd(du A) */
        if (cx->p_drop > 0) {
            uint64_t stream = (uint64_t)layer * 8 + s->module;
            GLM_TRY(glm_be_matmul(be, 0, 0, rows, in, r, 1.0f, w->du, ad, r, w->shA[si], ad, in, 0.0f, w->drop, ad, in));
            GLM_TRY(drop_rows(cx, w->drop, in, w->drop, in, rows, in, row0, stream));
            GLM_TRY(glm_be_axpy(be, dx, w->drop, 1.0f, rows * in));
        } else if (deferred) {
            *defer = (glm_rank_term){w->du, r, w->shA[si], r, 1.0f};
        } else {
            GLM_TRY(glm_be_matmul(be, 0, 0, rows, in, r, 1.0f, w->du, ad, r, w->shA[si], ad, in, 1.0f, dx, ad, in));
        }
    }
    return GLM_OK;
}

/* Where layer l's activations live under the plan: the kept buffers (keep: all of them;
 * selective: attention's), else the working buffers. */
typedef struct bufs {
    glm_ckpt_mode pol;
    void *qkv, *o;
    float *lse;
    const saved *S;   /* keep layers: their xn1, xn2, h, a, rstd1, rstd2 */
    void *x_mid;      /* keep and selective layers: the kept residual after attention; else NULL */
} bufs;

static bufs layer_bufs(ctx *cx, int l) {
    struct glm_ws *w = cx->w;
    bufs b;
    b.pol = w->backward ? glm_plan_layer(&w->plan, l) : GLM_CKPT_FULL;
    const saved *s = &w->S[l];
    int keep = b.pol == GLM_CKPT_NONE, attn = b.pol != GLM_CKPT_FULL;
    b.qkv = attn ? s->qkv : WB(w, GLM_BUF_QKV);
    b.o = attn ? s->o : WB(w, GLM_BUF_O);
    b.lse = attn ? s->lse : (float *)WB(w, GLM_BUF_LSE);
    b.x_mid = attn ? s->x_mid : NULL;
    b.S = keep ? s : NULL;
    return b;
}

/* The attention half of layer l: per chunk xn1 and qkv, RoPE, attention (o, lse), then per chunk
 * x_mid = x_in + dense(o) (x_mid may be the layer's output buffer). */
static glm_status attn_fwd(ctx *cx, int l, const void *x_in, const bufs *b, void *x_mid) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const glm_layer_weights *lw = cx->lw;
    struct glm_ws *w = cx->w;
    int64_t N = cx->N, C = c->C, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    const int64_t mc = w->plan.mlp_chunk;
    FOR_CHUNKS(n0, rows, N, mc) {
        void *xn = b->S ? OFF(b->S->xn1, n0 * C) : WB(w, GLM_BUF_XN_C);
        float *rs = b->S ? b->S->rstd1 + n0 : (float *)WB(w, GLM_BUF_RSTD_C);
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_rmsnorm_fwd(be, xn, rs, OFF(x_in, n0 * C), lw->ln1, rows, C, c->eps));
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_QKV, xn, C, rows, n0, OFF(b->qkv, n0 * Dqkv), Dqkv, Dqkv, 0, NULL));
    }
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(glm_be_rope(be, b->qkv, Dqkv, w->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 0));
    PH(GLM_PHASE_ATTN_FWD);
    if (cx->cpl) /* context parallel: the ring over the group (lora/model/ring_attention.h) */
        GLM_TRY(glm_ring_attention_fwd(&w->ring, b->o, qd, b->lse, b->qkv, Dqkv, OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd),
                                       Dqkv));
    else
        GLM_TRY(glm_be_attention_fwd(be, b->o, qd, b->lse, b->qkv, Dqkv, OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd), Dqkv,
                                  w->doc, cx->B, cx->T, c->H, c->Hkv, c->Dh));
    FOR_CHUNKS(n0, rows, N, mc) /* x_mid = x_in + dense(o) */
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_DENSE, OFF(b->o, n0 * qd), qd, rows, n0, OFF(x_mid, n0 * C), C, C, 1,
                           OFF(x_in, n0 * C)));
    return GLM_OK;
}

/* The MLP input side for tokens [n0, n0 + rows): xn2, rstd2, h, a from x_mid's rows, computed into
 * the layer's kept buffers (keep layers) or the chunk buffers. */
static glm_status mlp_in(ctx *cx, int l, const bufs *b, const void *x_mid, int64_t n0, int64_t rows, void **xn2, float **rstd2,
                         void **h, void **a) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    struct glm_ws *w = cx->w;
    int64_t C = c->C, F = c->F;
    *xn2 = b->S ? OFF(b->S->xn2, n0 * C) : WB(w, GLM_BUF_XN_C);
    *rstd2 = b->S ? b->S->rstd2 + n0 : (float *)WB(w, GLM_BUF_RSTD_C);
    *h = b->S ? OFF(b->S->h, n0 * 2 * F) : WB(w, GLM_BUF_H_C);
    *a = b->S ? OFF(b->S->a, n0 * F) : WB(w, GLM_BUF_A_C);
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(glm_be_rmsnorm_fwd(be, *xn2, *rstd2, OFF(x_mid, n0 * C), cx->lw->ln2, rows, C, c->eps));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_H4H, *xn2, C, rows, n0, *h, 2 * F, 2 * F, 0, NULL));
    PH(GLM_PHASE_ELEMENTWISE);
    return glm_be_swiglu_fwd(be, *a, *h, rows, F);
}

/* One decoder layer: x_out = layer(x_in), keeping what the plan keeps. A layer that keeps no
 * activations builds x_mid in x_out, which the MLP then accumulates onto chunk by chunk. */
static glm_status layer_fwd(ctx *cx, int l, const void *x_in, void *x_out) {
    const glm_config *c = &cx->m->cfg;
    struct glm_ws *w = cx->w;
    bufs b = layer_bufs(cx, l);
    void *xm = b.x_mid ? b.x_mid : x_out;
    GLM_TRY(attn_fwd(cx, l, x_in, &b, xm));
    int64_t C = c->C, F = c->F, mc = w->plan.mlp_chunk;
    FOR_CHUNKS(n0, rows, cx->N, mc) {
        void *xn2, *h, *a;
        float *rstd2;
        GLM_TRY(mlp_in(cx, l, &b, xm, n0, rows, &xn2, &rstd2, &h, &a));
        /* x_out = x_mid + dense_4h_to_h(a) (in place when x_mid is x_out) */
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_4HH, a, F, rows, n0, OFF(x_out, n0 * C), C, C, 1, OFF(xm, n0 * C)));
    }
    return GLM_OK;
}

/* Backward of layer l: on entry dx = d loss / d x_out; on return d loss / d x_in. */
static glm_status layer_bwd(ctx *cx, int l, const void *x_in) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const glm_layer_weights *lw = cx->lw;
    struct glm_ws *w = cx->w;
    int64_t N = cx->N, C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    const int64_t mc = w->plan.mlp_chunk;
    void *dx = WB(w, GLM_BUF_DX), *xmid_buf = WB(w, GLM_BUF_XMID), *dqkv = WB(w, GLM_BUF_DQKV), *dxn = WB(w, GLM_BUF_DXN_C);
    bufs b = layer_bufs(cx, l);
    /* dout_over_out (lora/model/plan.h): a full layer's recomputed x_mid in the d_qkv buffer, which
       the attention backward overwrites only once x_mid is dead */
    const int lean = w->plan.dout_over_out;
    void *xm = b.x_mid ? b.x_mid : lean ? dqkv : xmid_buf;
    if (b.pol == GLM_CKPT_FULL) GLM_TRY(attn_fwd(cx, l, x_in, &b, xm)); /* recompute the attention half */
    /* the MLP, chunk by chunk (recomputing its inputs unless the layer keeps them) */
    FOR_CHUNKS(n0, rows, N, mc) {
        void *xn2, *h, *a;
        float *rstd2;
        if (b.S) {
            xn2 = OFF(b.S->xn2, n0 * C);
            rstd2 = b.S->rstd2 + n0;
            h = OFF(b.S->h, n0 * 2 * F);
            a = OFF(b.S->a, n0 * F);
        } else {
            GLM_TRY(mlp_in(cx, l, &b, xm, n0, rows, &xn2, &rstd2, &h, &a));
        }
        void *dyc = OFF(dx, n0 * C);
        glm_rank_term du_a; /* dense_4h_to_h's LoRA input gradient, added inside the SwiGLU backward */
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_4HH, a, F, rows, n0, dyc, C, C, WB(w, GLM_BUF_DA_C), &du_a));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_swiglu_bwd(be, WB(w, GLM_BUF_DH_C), WB(w, GLM_BUF_DA_C), h, rows, F, du_a.u ? &du_a : NULL));
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_H4H, xn2, C, rows, n0, WB(w, GLM_BUF_DH_C), 2 * F, 2 * F, dxn, NULL));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_rmsnorm_bwd(be, dyc, dxn, OFF(xm, n0 * C), lw->ln2, rstd2, rows, C));
    }
    /* the attention half: d_o into the x_mid buffer (the recomputed x_mid is dead now); or, with
       dout_over_out, each chunk of d_o into a chunk buffer, D = rowsum(d_o * o) from it and o's
       chunk, then d_o over o's chunk (the dense LoRA's gradient has read o by then) */
    void *d_o = xmid_buf, *D = NULL;
    const void *o_bwd = b.o;
    if (lean) {
        void *dc = WB(w, GLM_BUF_DH_C);
        D = WB(w, GLM_BUF_ATTN_D);
        FOR_CHUNKS(n0, rows, N, mc) {
            GLM_TRY(linear_bwd(cx, l, GLM_LIN_DENSE, OFF(b.o, n0 * qd), qd, rows, n0, OFF(dx, n0 * C), C, C, dc, NULL));
            PH(GLM_PHASE_ATTN_BWD);
            GLM_TRY(glm_be_attention_delta(be, D, dc, qd, OFF(b.o, n0 * qd), qd, n0, rows, cx->T, c->H, c->Dh));
            PH(GLM_PHASE_ELEMENTWISE);
            GLM_TRY(glm_be_copy(be, OFF(b.o, n0 * qd), dc, (size_t)(rows * qd) * w->esz));
        }
        d_o = b.o;
        o_bwd = NULL;
    } else {
        FOR_CHUNKS(n0, rows, N, mc)
            GLM_TRY(linear_bwd(cx, l, GLM_LIN_DENSE, OFF(b.o, n0 * qd), qd, rows, n0, OFF(dx, n0 * C), C, C, OFF(d_o, n0 * qd),
                               NULL));
    }
    PH(GLM_PHASE_ATTN_BWD);
    if (cx->cpl)
        GLM_TRY(glm_ring_attention_bwd(&w->ring, dqkv, Dqkv, OFF(dqkv, qd), Dqkv, OFF(dqkv, qd + kd), Dqkv, d_o, qd, b.o, b.lse,
                                       b.qkv, OFF(b.qkv, qd), OFF(b.qkv, qd + kd)));
    else
        GLM_TRY(glm_be_attention_bwd(be, dqkv, OFF(dqkv, qd), OFF(dqkv, qd + kd), d_o, qd, o_bwd, b.lse, D, b.qkv, Dqkv,
                                  OFF(b.qkv, qd), Dqkv, OFF(b.qkv, qd + kd), Dqkv, w->doc, cx->B, cx->T, c->H, c->Hkv, c->Dh));
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(glm_be_rope(be, dqkv, Dqkv, w->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 1));
    /* query_key_value and input_layernorm, chunk by chunk (xn1 recomputed unless kept) */
    FOR_CHUNKS(n0, rows, N, mc) {
        void *xn1 = b.S ? OFF(b.S->xn1, n0 * C) : WB(w, GLM_BUF_XN_C);
        float *rstd1 = b.S ? b.S->rstd1 + n0 : (float *)WB(w, GLM_BUF_RSTD_C);
        if (!b.S) {
            PH(GLM_PHASE_ELEMENTWISE);
            GLM_TRY(glm_be_rmsnorm_fwd(be, xn1, rstd1, OFF(x_in, n0 * C), lw->ln1, rows, C, c->eps));
        }
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_QKV, xn1, C, rows, n0, OFF(dqkv, n0 * Dqkv), Dqkv, Dqkv, dxn, NULL));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_rmsnorm_bwd(be, OFF(dx, n0 * C), dxn, OFF(x_in, n0 * C), lw->ln1, rstd1, rows, C));
    }
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- step */

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
    const batch_set *s = &w->bset[k];
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
    batch_set *s = &w->bset[k];
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
    if (!w || w->cp > 1 || m->cp > 1 || !b || b->B <= 0 || b->B > w->B_cap || b->T != w->T || !b->ids || !b->pos || !b->doc)
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

/* The step's batch on the device: the batch set holding it (filled by glm_model_prefetch, or
 * the previous step's), else a set filled now; the step's ops wait for its upload (copy_wait).
 * Context parallel: the batch holds whole rows; this rank's local tokens (lora/model/ring_attention.h)
 * are uploaded, with their labels taken from the whole row (the label of a chunk's last token is
 * the first token of the next chunk), and the document ids of every token of the rows (w->gdoc,
 * padded by the layout's padding rule) for the ring's masks. The labels stay on the host too
 * (w->lab_host). Errors: check_batch's, the backend's. */
static glm_status upload_batch(glm_model *m, struct glm_ws *w, const glm_batch *b, const glm_cp_layout *cpl,
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
        batch_set *s = &w->bset[k];
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

/* The act-dtype copies of the LoRA weights, from the fp32 weights (once per step). */
static glm_status refresh_lora_copies(const glm_backend *be, struct glm_ws *w, glm_lora *L) {
    if (!L || !w->shadows) return GLM_OK;
    PH(GLM_PHASE_LORA);
    for (int si = 0; si < L->n_sites; si++) {
        const glm_param *A = &L->params[L->sites[si].pa], *B = &L->params[L->sites[si].pb];
        GLM_TRY(glm_be_cast(be, w->shA[si], be->act_dtype, A->w, GLM_DT_F32, A->numel));
        GLM_TRY(glm_be_cast(be, w->shB[si], be->act_dtype, B->w, GLM_DT_F32, B->numel));
    }
    return GLM_OK;
}

static glm_status run(glm_model *m, glm_lora *lora, const glm_batch *b, float loss_scale, int backward, glm_ckpt_mode mode,
                      uint64_t seed, float p_drop, double *loss_sum, int64_t *n_targets, float *logits_out) {
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    if (!b || b->B <= 0 || b->T <= 0 || !b->ids || !b->pos || !b->doc)
        return glm_err(GLM_ERR_ARG, "model step: empty or incomplete batch (B and T must be positive; ids, pos, doc required)");
    if (lora && (lora->L != c->L || lora->be != be))
        return glm_err(GLM_ERR_MISMATCH, "model step: the LoRA adapter was built for another model");
    if (!lora) backward = 0;
    const int cp = m->cp > 1;
    GLM_TRY(check_cp(m));
    if (cp && logits_out)
        return glm_err(GLM_ERR_UNSUPPORTED, "model logits with context parallel: each rank holds only its chunks of a row; "
                       "hint: compute logits without --context-parallel");
    GLM_TRY(ensure_ws(m, lora, b->B, b->T, backward, mode, lora && p_drop > 0));
    struct glm_ws *w = m->ws;
    /* cuDNN's attention workspace: what the plan holds for it and the room the plan leaves (a batch of
     * many documents pads to a wider graph); none when the plan left it out: glmtune's kernels */
    glm_be_set_attention_ws_cap(be, w->plan.attn_lean ? 0 : w->plan.attn_ws + fmax(0.0, w->plan.budget - w->plan.total));
    w->ring.B = b->B; /* this batch's rows (at most the workspace's) */
    const glm_cp_layout *cpl = cp ? &w->ring.L : NULL;
    const int TL = cp ? w->TL : b->T;
    ctx cx = {m, lora, w, b->B, TL, (int64_t)b->B * TL, seed, p_drop, b->T, cpl, NULL, b->drop_key};
    const int L = m->run_layers > 0 && m->run_layers < c->L ? m->run_layers : c->L; /* the memory proof: the first ones */
    int64_t N = cx.N, C = c->C, V = c->V, nlab = 0;
    glm_status st = upload_batch(m, w, b, cpl, &nlab);
    if (!st) st = refresh_lora_copies(be, w, lora);
    if (st) return st;
    const glm_weight *embed, *out_w;
    GLM_TRY(big_use(m, w, 1, &embed)); /* sharded base: the embedding gathered ... */
    if (w->W.sharded) GLM_TRY(gather_start(m, w, 0));
    PH(GLM_PHASE_ELEMENTWISE);
    const size_t xbytes = (size_t)(N * C) * w->esz;
    const int n_host = backward ? w->plan.n_host : 0;
    uint64_t slot_down[2] = {0, 0}; /* offload: the last download from each slot */
    GLM_TRY(glm_be_embedding(be, xdev(w, 0), embed->data, w->ids, N, C, V));
    if (w->W.sharded) GLM_TRY(gather_big_start(m, w, 2)); /* ... then the output layer prefetched into its slot */
    if (n_host > 0) GLM_TRY(glm_be_download_async(be, w->xh[0], xdev(w, 0), xbytes, &slot_down[0]));
    for (int l = 0; l < L; l++) {
        GLM_TRY(layer_weights(m, w, l, 0, &cx.lw)); /* gathered, dequantized ... */
        if (w->W.sharded && l + 1 < L) GLM_TRY(gather_start(m, w, l + 1)); /* ... and the next gather started behind it */
        /* offload: layer l's output overwrites a slot whose last input must have reached host memory */
        if (n_host > 0 && glm_plan_x_in_slot(&w->plan, L, l + 1)) GLM_TRY(glm_be_copy_wait(be, slot_down[(l + 1) & 1]));
        GLM_TRY(layer_fwd(&cx, l, xdev(w, l), xdev(w, l + 1)));
        if (l + 1 < n_host) GLM_TRY(glm_be_download_async(be, w->xh[l + 1], xdev(w, l + 1), xbytes, &slot_down[(l + 1) & 1]));
    }
    GLM_TRY(big_use(m, w, 2, &out_w)); /* every rank, whether its chunks have targets or not */
    void *dx = WB(w, GLM_BUF_DX);
    if (backward) GLM_TRY(glm_be_zero(be, dx, (size_t)(N * C) * w->esz));
    void *xnf = WB(w, GLM_BUF_LOSS_XN), *logits = WB(w, GLM_BUF_LOSS_LOGITS), *dxnf = WB(w, GLM_BUF_LOSS_DXN);
    float *rstdf = WB(w, GLM_BUF_LOSS_RSTD);
    double total = 0;
    int64_t ntot = 0, lc = w->plan.loss_chunk;
    for (int64_t n0 = 0; n0 < N; n0 += lc) {
        int64_t nc = N - n0 < lc ? N - n0 : lc;
        if (!logits_out) { /* skip chunks without targets */
            int64_t k = 0;
            for (int64_t i = n0; i < n0 + nc; i++) k += w->lab_host[i] >= 0;
            if (!k) continue;
        }
        const void *xf = OFF(xdev(w, L), n0 * C);
        PH(GLM_PHASE_LOSS);
        GLM_TRY(glm_be_rmsnorm_fwd(be, xnf, rstdf, xf, m->final_ln, nc, C, c->eps));
        GLM_TRY(glm_base_matmul(be, 0, nc, xnf, C, out_w, 0.0f, logits, V));
        if (logits_out) {
            GLM_TRY(glm_be_download_f32(be, logits_out + n0 * V, be->act_dtype, logits, nc * V));
            continue;
        }
        double ls = 0;
        int64_t nt = 0;
        GLM_TRY(glm_be_cross_entropy(be, backward ? logits : NULL, logits, w->labels + n0, NULL, NULL, nc, V, loss_scale, &ls, &nt));
        total += ls;
        ntot += nt;
        if (backward) {
            GLM_TRY(glm_base_matmul(be, 1, nc, logits, V, out_w, 0.0f, dxnf, C));
            GLM_TRY(glm_be_rmsnorm_bwd(be, OFF(dx, n0 * C), dxnf, xf, m->final_ln, rstdf, nc, C));
        }
    }
    if (loss_sum) *loss_sum = total;
    if (n_targets) *n_targets = logits_out ? nlab : ntot;
    if (backward) {
        uint64_t up[2] = {0, 0}; /* offload: the last upload into each slot */
        for (int l = L - 1; l >= 0; l--) {
            GLM_TRY(layer_weights(m, w, l, 1, &cx.lw)); /* backward order: layer l (still there after the forward for the
                                                        last ones), l-1's gather prefetched */
            if (w->W.sharded && l > 0) GLM_TRY(gather_start(m, w, l - 1));
            /* offload: layer l-1's input goes into its slot (free: it held layer l+1's input or the
             * loss head's) while layer l's backward runs; layer l's own was uploaded during layer
             * l+1's (or, for the last layer, never left its slot) */
            if (l > 0 && l - 1 < n_host)
                GLM_TRY(glm_be_upload_async(be, xdev(w, l - 1), w->xh[l - 1], xbytes, 1, &up[(l - 1) & 1]));
            if (l < n_host) GLM_TRY(glm_be_copy_wait(be, up[l & 1]));
            GLM_TRY(layer_bwd(&cx, l, xdev(w, l)));
            if (m->grad_ready) GLM_TRY(m->grad_ready(m->grad_ready_user, l)); /* layer l's LoRA grads are final */
        }
    }
    PH(GLM_PHASE_OTHER);
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
    return run(m, lora, batch, loss_scale, backward, mode, dropout_seed, p, loss_sum, n_targets, NULL);
}

glm_status glm_model_logits(glm_model *m, glm_lora *lora, const glm_batch *batch, float *logits) {
    return run(m, lora, batch, 1.0f, 0, GLM_CKPT_FULL, 0, 0.0f, NULL, NULL, logits);
}
