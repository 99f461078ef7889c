/* lora/model_step.c: the GLM-4 forward, loss and backward to the LoRA weights, over the backend
 * ops (lora/model.h), with the memory plan of lora/plan.h.
 *
 * Buffers (the workspace, allocated once per batch shape and reused by every step):
 *   xs[0..L]            the residual stream at each layer boundary [N, C] (always kept): on the
 *                       device, or with the plan's offload in host memory (xh, be->host_alloc:
 *                       page-locked on CUDA) with two device slots, layer l's input in slot l % 2:
 *                       the forward downloads each layer's output while the next layer computes,
 *                       the backward uploads layer l-1's input while layer l's backward computes
 *                       (be->upload_async / download_async on CUDA's copy stream, waited for by
 *                       tickets just before the slot is overwritten or read)
 *   per layer, by plan  keep: xn1, qkv (after RoPE), o, x_mid, xn2, h, a, rstd1, rstd2, lse;
 *                       selective: qkv, o, x_mid, lse; full: nothing
 *   scratch             the same for the layer being recomputed; the MLP's xn2/h/a and their
 *                       gradients for one chunk of mlp_chunk tokens; dx, d_xn, d_o, d_qkv [N, .];
 *                       LoRA u = dropout(x) A^T and du; the loss head's chunk
 *   batches             two sets of ids/pos/doc/labels [N] with page-locked host copies: the step
 *                       uses the set that glm_model_prefetch filled during the previous step's
 *                       backward (its upload overlapped that backward), or fills one itself
 *   LoRA copies         act-dtype copies of lora_A / lora_B (bf16 on CUDA), refreshed from the
 *                       fp32 weights at every step, so every LoRA GEMM has act-dtype operands;
 *                       on the CPU (act = f32) the weights themselves.
 * Linear layers: y = x W^T (+ bias) + scaling * dropout(x) A^T B^T. The LoRA up-projection and
 * the bias go into y first and the base GEMM accumulates onto them (beta = 1); residual linears
 * (dense, dense_4h_to_h) accumulate all three onto the residual stream. Every op is preceded by
 * be->phase() so `glmtune bench` can time the step by phase. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "lora/model.h"
#include "lora/ring_attention.h"

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
    float *rstd1, *rstd2, *lse;
} saved;

struct glm_ws {
    const glm_backend *be;
    glm_plan plan;
    glm_ckpt_mode mode;      /* requested */
    const glm_lora *lora;    /* the adapter the LoRA copies belong to (NULL: none) */
    int B_cap, T, backward;  /* T: the rows' length; with context parallel each row holds TL = 2S of them here */
    int TL, cp;
    double max_bytes;
    int64_t mlp_over, loss_over;
    int offload_over;        /* m->offload when the workspace was made */
    size_t esz;
    void **xs;               /* [L + 1] (NULL entries with offload) */
    void **xh;               /* offload: [L + 1] host copies of the layer inputs; NULL: off */
    void *xslot[2];          /* offload: the device slots (layer l's input in slot l % 2) */
    int n_xh;                /* offload: xh entries allocated */
    saved *S;                /* [L] (backward only) */
    /* scratch for the layer being computed or recomputed */
    void *xn1, *qkv, *o, *x_mid;
    float *rstd1, *rstd2, *lse;
    void *xn2c, *hc, *ac, *dac, *dhc; /* MLP chunk */
    void *dx, *dxn, *d_o, *dqkv;       /* backward [N, .] */
    void *u, *du, *drop;               /* LoRA */
    void **shA, **shB;                 /* per site: act-dtype lora_A [r, in], lora_B [out, r] */
    int shadows;                       /* 1: shA/shB are copies to refresh; 0: the fp32 weights */
    void *xnf, *logits, *dxnf;         /* loss head chunk */
    float *rstdf;
    uint32_t *ids;                     /* the step's batch: bset[cur]'s (context parallel: its own) */
    int32_t *pos, *doc, *labels;
    int32_t *lab_host;                 /* the labels on the host */
    batch_set bset[2];                 /* non-context-parallel: the batches held, the step's in bset[cur] */
    int cur;
    /* context parallel: the ring's buffers, the rows' document ids (device [B, Tp] and host), and
     * a host scratch for the local tokens' ids and positions */
    glm_ring ring;
    int32_t *gdoc, *gdoc_host, *loc_host;
    void **allocs;
    int n_allocs, cap_allocs;
};

void glm_ws_free(struct glm_ws *w) {
    if (!w) return;
    for (int i = 0; i < w->n_allocs; i++) w->be->free(w->be, w->allocs[i]);
    free(w->allocs);
    for (int i = 0; i < w->n_xh; i++) w->be->host_free(w->be, w->xh[i]);
    for (int k = 0; k < 2; k++) w->be->host_free(w->be, w->bset[k].host);
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
    size_t b = bytes > 0 ? (size_t)bytes : 16;
    b = (b + 255) / 256 * 256; /* keep every buffer 256-byte aligned for vector loads */
    GLM_TRY(w->be->alloc(w->be, b, what, p));
    w->allocs[w->n_allocs++] = *p;
    return GLM_OK;
}

double glm_model_budget(const glm_model *m) {
    size_t fr = 0, tot = 0, use = 0, peak = 0;
    m->be->mem_info(m->be, &fr, &tot, &use, &peak);
    double b = (double)fr + (double)use - 1073741824.0;
    if (m->max_bytes > 0 && (b <= 0 || m->max_bytes < b)) b = m->max_bytes;
    return b;
}

void glm_model_plan(const glm_model *m, const glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out) {
    glm_lora_info li;
    glm_lora_info_of(lora, &li);
    glm_plan_opts o = {0};
    o.mode = mode;
    o.budget = glm_model_budget(m);
    o.mlp_chunk = m->mlp_chunk;
    o.loss_chunk = m->loss_chunk;
    o.act_bytes = (int)glm_dtype_size(m->be->act_dtype);
    o.weight_bytes = (int)glm_dtype_size(m->be->weight_dtype);
    o.lora_shadow = m->be->act_dtype != GLM_DT_F32;
    o.optimizer = m->optimizer;
    o.shard_world = m->shard_world;
    o.cp = m->cp;
    o.acc_bytes = (int)glm_dtype_size(m->be->acc_dtype);
    /* layer inputs in host memory: forced (m->offload 1), or where the step does not fit on a GPU
     * without it, within this rank's share of 3/4 of the machine's memory (the CPU backend's memory
     * is host memory) */
    o.offload = m->offload > 0;
    o.host_budget = m->offload == 0 && strcmp(m->be->name, "cpu") ? glm_host_budget(glm_local_ranks()) : 0;
    glm_plan_make(&m->cfg, lora ? &li : NULL, B, T, backward && lora, &o, out);
}

const glm_plan *glm_model_current_plan(const glm_model *m) { return m->ws ? &m->ws->plan : NULL; }

/* The workspace for plan p (and the LoRA copies of lora). */
static glm_status ws_create(glm_model *m, const glm_lora *lora, const glm_plan *p, glm_ckpt_mode mode, struct glm_ws **out) {
    const glm_config *c = &m->cfg;
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
    w->esz = glm_dtype_size(be->act_dtype);
    const double e = (double)w->esz, N = (double)p->N, C = c->C, F = c->F, qd = (double)c->H * c->Dh,
                 Dqkv = (double)glm_config_qkv_rows(c), H = c->H, V = c->V, mc = (double)p->mlp_chunk,
                 lc = (double)p->loss_chunk;
    w->xs = calloc((size_t)c->L + 1, sizeof(void *));
    w->S = calloc((size_t)c->L, sizeof(saved));
    glm_status st = GLM_OK;
    if (p->cp > 1) {
        w->lab_host = malloc((size_t)p->N * sizeof(int32_t));
        w->gdoc_host = malloc((size_t)p->B * (size_t)p->T_padded * sizeof(int32_t));
        w->loc_host = malloc((size_t)p->N * sizeof(int32_t));
    }
    if (!w->xs || !w->S || (p->cp > 1 && (!w->lab_host || !w->gdoc_host || !w->loc_host))) {
        glm_ws_free(w);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
#define A_(ptr, bytes, what) if ((st = ws_alloc(w, (bytes), (what), (void **)&(ptr)))) goto fail
    if (p->offload) {
        w->xh = calloc((size_t)c->L + 1, sizeof(void *));
        if (!w->xh) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int l = 0; l <= c->L; l++, w->n_xh++)
            if ((st = be->host_alloc(be, (size_t)(N * C * e), "offloaded layer inputs", &w->xh[l]))) goto fail;
        for (int k = 0; k < 2; k++) A_(w->xslot[k], N * C * e, "layer inputs (device slots of the offloaded ones)");
    } else {
        for (int l = 0; l <= c->L; l++) A_(w->xs[l], N * C * e, "layer inputs (checkpoints)");
    }
    if (p->backward)
        for (int l = 0; l < c->L; l++) {
            glm_ckpt_mode pol = glm_plan_layer(p, l);
            saved *s = &w->S[l];
            if (pol == GLM_CKPT_FULL) continue;
            A_(s->qkv, N * Dqkv * e, "kept qkv");
            A_(s->o, N * qd * e, "kept attention output");
            A_(s->x_mid, N * C * e, "kept residual");
            A_(s->lse, N * H * 4, "kept lse");
            if (pol == GLM_CKPT_SELECTIVE) continue;
            A_(s->xn1, N * C * e, "kept xn1");
            A_(s->xn2, N * C * e, "kept xn2");
            A_(s->h, N * 2 * F * e, "kept mlp h");
            A_(s->a, N * F * e, "kept mlp a");
            A_(s->rstd1, N * 4, "kept rstd1");
            A_(s->rstd2, N * 4, "kept rstd2");
        }
    A_(w->xn1, N * C * e, "xn1");
    A_(w->rstd1, N * 4, "rstd1");
    A_(w->rstd2, N * 4, "rstd2");
    if (!p->backward || p->n_full > 0) {
        A_(w->qkv, N * Dqkv * e, "qkv");
        A_(w->o, N * qd * e, "attention output");
        A_(w->x_mid, N * C * e, "x_mid");
        A_(w->lse, N * H * 4, "lse");
    }
    if (!p->backward || p->n_keep < c->L) {
        A_(w->xn2c, mc * C * e, "mlp xn2 chunk");
        A_(w->hc, mc * 2 * F * e, "mlp h chunk");
        A_(w->ac, mc * F * e, "mlp a chunk");
    }
    if (p->backward) {
        A_(w->dac, mc * F * e, "mlp d_a chunk");
        A_(w->dhc, mc * 2 * F * e, "mlp d_h chunk");
        A_(w->dx, N * C * e, "dx");
        A_(w->dxn, N * C * e, "d_xn");
        A_(w->d_o, N * qd * e, "d_o");
        A_(w->dqkv, N * Dqkv * e, "d_qkv");
    }
    if (lora) {
        glm_lora_info li;
        glm_lora_info_of(lora, &li);
        double r = lora->r, maxs = li.max_sites_lin > 0 ? li.max_sites_lin : 1;
        A_(w->u, N * r * maxs * e, "lora u");
        if (p->backward) A_(w->du, N * r * e, "lora du");
        if (lora->dropout > 0) {
            double d1 = N * (double)li.max_in_attn, d2 = mc * (double)li.max_in_mlp;
            A_(w->drop, (d1 > d2 ? d1 : d2) * e, "lora dropout copy");
        }
        w->shA = calloc((size_t)lora->n_sites, sizeof(void *));
        w->shB = calloc((size_t)lora->n_sites, sizeof(void *));
        if (!w->shA || !w->shB) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            goto fail;
        }
        w->shadows = be->act_dtype != GLM_DT_F32;
        if (w->shadows) {
            /* one buffer; per (layer, linear) the lora_A copies of its adapters are contiguous, so
             * one GEMM can compute u for all of them ([sites * r, in] stacked) */
            double tot = 0;
            for (int i = 0; i < lora->n_params; i++) tot += (double)lora->params[i].numel;
            char *base;
            A_(base, tot * e + 512.0 * lora->n_sites + 256.0, "lora act-dtype copies");
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
        } else {
            for (int si = 0; si < lora->n_sites; si++) {
                w->shA[si] = lora->params[lora->sites[si].pa].w;
                w->shB[si] = lora->params[lora->sites[si].pb].w;
            }
        }
    }
    A_(w->xnf, lc * C * e, "final norm chunk");
    A_(w->rstdf, lc * 4, "final rstd chunk");
    A_(w->logits, lc * V * e, "logits chunk");
    if (p->backward) A_(w->dxnf, lc * C * e, "loss dxn chunk");
    for (int k = 0; k < (p->cp > 1 ? 1 : 2); k++) {
        batch_set *bs = &w->bset[k];
        A_(bs->ids, N * 4, "ids");
        A_(bs->pos, N * 4, "pos");
        A_(bs->doc, N * 4, "doc");
        A_(bs->labels, N * 4, "labels");
        if (p->cp <= 1 && (st = be->host_alloc(be, (size_t)p->N * 17, "the batches' host copies", (void **)&bs->host)))
            goto fail;
    }
    w->ids = w->bset[0].ids;
    w->pos = w->bset[0].pos;
    w->doc = w->bset[0].doc;
    w->labels = w->bset[0].labels;
    if (p->cp > 1) { /* the ring (lora/ring_attention.h); the plan counts the same bytes */
        const double kd2 = 2.0 * c->Hkv * c->Dh, ea = (double)glm_dtype_size(be->acc_dtype);
        glm_ring *R = &w->ring;
        R->be = be;
        R->comm = m->cp_comm;
        glm_cp_layout_make(p->T, p->cp, m->cp_comm->rank, &R->L);
        R->B = p->B;
        R->H = c->H;
        R->Hkv = c->Hkv;
        R->Dh = c->Dh;
        A_(R->kv[0], N * kd2 * e, "ring K|V block");
        A_(R->kv[1], N * kd2 * e, "ring K|V block (arriving)");
        if (p->backward) {
            A_(R->dkv[0], N * kd2 * ea, "ring dK|dV accumulator");
            A_(R->dkv[1], N * kd2 * ea, "ring dK|dV accumulator (arriving)");
        }
        A_(R->acc, N * qd * ea, "ring output / dQ accumulator");
        A_(R->lse_acc, N * H * ea, "ring lse accumulator");
        A_(w->gdoc, (double)p->B * p->T_padded * 4, "the rows' document ids");
        R->gdoc = w->gdoc;
        R->gdoc_host = w->gdoc_host;
    }
#undef A_
    *out = w;
    return GLM_OK;
fail:
    glm_ws_free(w);
    return st;
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
                           "or --max-gpu-memory below what the card has free (glmtune train --dry-run prints the plan)",
                           p->B, p->T, glm_ckpt_name(p->requested), p->n_keep, p->n_selective, p->n_full, p->total / G,
                           p->budget / G, m->be->name);
}

static glm_status gather_make(glm_model *m); /* below: the sharded base's gather slots */

/* The workspace for this call: the current one when it fits (shape, mode, adapter, dropout
 * buffer when dropout is on), else a new one from a new plan. */
static glm_status ensure_ws(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, int dropout) {
    struct glm_ws *w = m->ws;
    if (w && w->T == T && w->cp == (m->cp > 1 ? m->cp : 0) && (w->cp == 0 || w->ring.comm == m->cp_comm) && B <= w->B_cap &&
        (!backward || w->backward) && (w->mode == mode || !backward) && (!lora || w->lora == lora) && (!dropout || w->drop) && w->max_bytes == m->max_bytes && w->mlp_over == m->mlp_chunk &&
        w->loss_over == m->loss_chunk && w->offload_over == m->offload)
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
    GLM_TRY(gather_make(m));
    GLM_TRY(ensure_ws(m, lora, B, T, backward && lora, mode, lora && lora->dropout > 0));
    if (out) *out = m->ws->plan;
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- sharded base */

/* The gather slots of frozen-base sharding (glm_model.shard_world > 1, see lora/model.h). A
 * slot's matrices are all-gathered from every rank's shard (be->all_gather_start) and waited for
 * (be->comm_wait) just before use; CUDA orders the gather after the compute queued before it, so
 * refilling the slot of layer l-1 while layer l computes is safe. */
struct glm_gather {
    void *slot[2];            /* two layers: wqkv, wo, w1, w2, each shard_elems * world elements */
    int64_t off[4], sn[4];    /* element offset in a slot and shard elements of each matrix */
    int layer[2];             /* the layer a slot holds (or is being filled with); -1: none */
    int req[2][4];            /* outstanding gathers of a slot (-1: none) */
    glm_layer_weights view[2];/* the whole weights of the slot's layer */
    void *big;                /* [V, C]: the embedding or the output layer */
    int big_what, big_req;    /* 0 none, 1 embedding, 2 output layer; its outstanding gather */
    int64_t big_sn;
};

void glm_gather_free(glm_model *m) {
    struct glm_gather *g = m->gather;
    if (!g) return;
    m->be->free(m->be, g->slot[0]);
    m->be->free(m->be, g->slot[1]);
    m->be->free(m->be, g->big);
    free(g);
    m->gather = NULL;
}

static glm_status gather_make(glm_model *m) {
    if (!m->shard_world || m->gather) return GLM_OK;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    int W = m->shard_world;
    size_t esz = glm_dtype_size(be->weight_dtype);
    struct glm_gather *g = calloc(1, sizeof *g);
    if (!g) return glm_err(GLM_ERR_NOMEM, "out of memory");
    int64_t C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, mats[4] = {glm_config_qkv_rows(c) * C, C * qd, 2 * F * C, C * F};
    int64_t tot = 0;
    for (int i = 0; i < 4; i++) {
        g->sn[i] = glm_shard_elems(mats[i], W);
        g->off[i] = tot;
        tot += g->sn[i] * W;
    }
    g->big_sn = glm_shard_elems((int64_t)c->V * C, W);
    g->layer[0] = g->layer[1] = -1;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) g->req[k][i] = -1;
    g->big_req = -1;
    glm_status st = be->alloc(be, (size_t)tot * esz, "gathered layer weights (slot 0)", &g->slot[0]);
    if (!st) st = be->alloc(be, (size_t)tot * esz, "gathered layer weights (slot 1)", &g->slot[1]);
    if (!st) st = be->alloc(be, (size_t)(g->big_sn * W) * esz, "gathered embedding / output layer", &g->big);
    m->gather = g;
    if (st) glm_gather_free(m);
    return st;
}

static void *shard_of(const glm_layer_weights *lw, int i) {
    return i == 0 ? lw->wqkv : i == 1 ? lw->wo : i == 2 ? lw->w1 : lw->w2;
}

/* Starts gathering layer l into its slot (l % 2) unless the slot holds it already. */
static glm_status gather_start(glm_model *m, int l) {
    struct glm_gather *g = m->gather;
    const glm_backend *be = m->be;
    int k = l % 2;
    if (g->layer[k] == l) return GLM_OK;
    size_t esz = glm_dtype_size(be->weight_dtype);
    g->layer[k] = l;
    for (int i = 0; i < 4; i++)
        GLM_TRY(be->all_gather_start(be, (char *)g->slot[k] + (size_t)g->off[i] * esz, shard_of(&m->layers[l], i),
                                     (size_t)g->sn[i] * esz, &g->req[k][i]));
    be->comm_progress(be);
    return GLM_OK;
}

/* Layer l's whole weights, gathered (waiting for its slot). */
static glm_status gather_use(glm_model *m, int l) {
    struct glm_gather *g = m->gather;
    const glm_backend *be = m->be;
    GLM_TRY(gather_start(m, l));
    int k = l % 2;
    for (int i = 0; i < 4; i++)
        if (g->req[k][i] >= 0) {
            glm_status st = be->comm_wait(be, g->req[k][i]);
            g->req[k][i] = -1;
            GLM_TRY(st);
        }
    size_t esz = glm_dtype_size(be->weight_dtype);
    glm_layer_weights *v = &g->view[k];
    *v = m->layers[l]; /* the norms and the bias are whole */
    v->wqkv = (char *)g->slot[k] + (size_t)g->off[0] * esz;
    v->wo = (char *)g->slot[k] + (size_t)g->off[1] * esz;
    v->w1 = (char *)g->slot[k] + (size_t)g->off[2] * esz;
    v->w2 = (char *)g->slot[k] + (size_t)g->off[3] * esz;
    return GLM_OK;
}

/* Starts gathering the embedding (what 1) or the output layer (what 2) into the [V, C] slot. */
static glm_status gather_big_start(glm_model *m, int what) {
    struct glm_gather *g = m->gather;
    if (g->big_what == what) return GLM_OK;
    if (g->big_req >= 0) { /* the other one still in flight: it must land before being overwritten */
        GLM_TRY(m->be->comm_wait(m->be, g->big_req));
        g->big_req = -1;
    }
    size_t esz = glm_dtype_size(m->be->weight_dtype);
    g->big_what = what;
    return m->be->all_gather_start(m->be, g->big, what == 1 ? m->embed : m->out_w, (size_t)g->big_sn * esz, &g->big_req);
}

static glm_status gather_big_use(glm_model *m, int what, const void **w) {
    struct glm_gather *g = m->gather;
    GLM_TRY(gather_big_start(m, what));
    if (g->big_req >= 0) {
        glm_status st = m->be->comm_wait(m->be, g->big_req);
        g->big_req = -1;
        GLM_TRY(st);
    }
    *w = g->big;
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- layers */

#define OFF(p, elems) ((void *)((char *)(p) + (size_t)(elems) * w->esz))

/* Layer l's input (l = L: the last layer's output) on the device: xs[l], or with offload its slot. */
static void *xdev(const struct glm_ws *w, int l) { return w->xh ? w->xslot[l & 1] : w->xs[l]; }
#define PH(x) be->phase(be, (x))

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
} ctx;

/* Inverted dropout over rows [row0, row0 + rows) of the step's tokens (see be->dropout). The mask
 * of a token is indexed by its place in the whole batch, row b token t -> b * T + t, so that with
 * context parallel (local tokens from two chunks of each row) every rank draws the mask the
 * unsplit step draws: the local rows are cut into runs of consecutive global tokens. */
static glm_status drop_rows(const ctx *cx, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t rows, int64_t D,
                            int64_t row0, uint64_t stream) {
    const glm_backend *be = cx->m->be;
    if (!cx->cpl) return be->dropout(be, y, ldy, x, ldx, rows, D, row0, cx->p_drop, cx->seed, stream);
    const size_t e = glm_dtype_size(be->act_dtype);
    const int64_t S = cx->cpl->S;
    for (int64_t n = 0; n < rows;) {
        int64_t l = row0 + n, b = l / cx->T, j = l % cx->T, run = S - j % S;
        if (run > rows - n) run = rows - n;
        int64_t g = b * cx->T_row + glm_cp_global(cx->cpl, j);
        GLM_TRY(be->dropout(be, (char *)y + (size_t)(n * ldy) * e, ldy, (const char *)x + (size_t)(n * ldx) * e, ldx, run, D,
                            g, cx->p_drop, cx->seed, stream));
        n += run;
    }
    return GLM_OK;
}

/* Layer l's frozen weights: the model's, or with a sharded base the gathered slot's (gather_use
 * was called for l before the layer runs). */
static const glm_layer_weights *LW(const ctx *cx, int l) {
    const struct glm_gather *g = cx->m->gather;
    return g ? &g->view[l % 2] : &cx->m->layers[l];
}

static const void *base_weight(const glm_layer_weights *lw, glm_linear lin) {
    switch (lin) {
    case GLM_LIN_QKV: return lw->wqkv;
    case GLM_LIN_DENSE: return lw->wo;
    case GLM_LIN_H4H: return lw->w1;
    default: return lw->w2;
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

/* y[:, site rows] = beta * y + scaling * dropout(x) A^T B^T for every adapter on (layer, lin). */
static glm_status lora_up(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows, int64_t row0, void *y,
                          int64_t ldy, float beta) {
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
    if (n > 1 && w->shadows && cx->p_drop == 0) {
        /* the adapters share the input: u = x [A_1; ...; A_n]^T in one GEMM (the copies are stacked) */
        GLM_TRY(be->matmul(be, 0, 1, rows, (int64_t)n * r, in, 1.0f, x, ad, in, w->shA[first], ad, in, 0.0f, w->u, ad,
                           (int64_t)n * r));
        int j = 0;
        for (int k = 0; k < L->layer_count[layer]; k++) {
            int si = L->layer_first[layer] + k;
            const glm_lora_site *s = &L->sites[si];
            if (s->lin != lin) continue;
            GLM_TRY(be->matmul(be, 0, 1, rows, s->out, r, L->scaling, OFF(w->u, j * r), ad, (int64_t)n * r, w->shB[si], ad, r,
                               beta, OFF(y, s->row0), ad, ldy));
            j++;
        }
        return GLM_OK;
    }
    for (int k = 0; k < L->layer_count[layer]; k++) {
        int si = L->layer_first[layer] + k;
        const glm_lora_site *s = &L->sites[si];
        if (s->lin != lin) continue;
        const void *xin;
        GLM_TRY(lora_input(cx, s, x, in, rows, row0, &xin));
        GLM_TRY(be->matmul(be, 0, 1, rows, r, in, 1.0f, xin, ad, in, w->shA[si], ad, in, 0.0f, w->u, ad, r));
        GLM_TRY(be->matmul(be, 0, 1, rows, s->out, r, L->scaling, w->u, ad, r, w->shB[si], ad, r, beta, OFF(y, s->row0), ad,
                           ldy));
    }
    return GLM_OK;
}

/* y [rows, out] (row stride ldy) = x W^T (+ bias) + LoRA, or with residual != 0 y += all of it.
 * x [rows, in] act; rows start at row `row0` of the step's N tokens. */
static glm_status linear_fwd(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows, int64_t row0,
                             void *y, int64_t ldy, int64_t out, int residual) {
    const glm_backend *be = cx->m->be;
    const glm_layer_weights *lw = LW(cx, layer);
    glm_dtype ad = be->act_dtype, wd = be->weight_dtype;
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
    if (lora_first) {
        GLM_TRY(lora_up(cx, layer, lin, x, in, rows, row0, y, ldy, residual ? 1.0f : 0.0f));
        if (bias) {
            PH(GLM_PHASE_ELEMENTWISE);
            GLM_TRY(be->add_bias(be, y, ldy, bias, rows, out));
        }
        PH(GLM_PHASE_GEMM);
        return be->matmul(be, 0, 1, rows, out, in, 1.0f, x, ad, in, base_weight(lw, lin), wd, in, 1.0f, y, ad, ldy);
    }
    PH(GLM_PHASE_GEMM);
    GLM_TRY(be->matmul(be, 0, 1, rows, out, in, 1.0f, x, ad, in, base_weight(lw, lin), wd, in, residual ? 1.0f : 0.0f, y, ad,
                       ldy));
    if (bias) {
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(be->add_bias(be, y, ldy, bias, rows, out));
    }
    if (n) GLM_TRY(lora_up(cx, layer, lin, x, in, rows, row0, y, ldy, 1.0f));
    return GLM_OK;
}

/* dx [rows, in] = dy W plus the LoRA input gradient (OVERWRITES dx); ACCUMULATES the LoRA weight
 * grads. dy [rows, out] act with row stride ldy; x is the linear's forward input [rows, in]. */
static glm_status linear_bwd(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows, int64_t row0,
                             const void *dy, int64_t ldy, int64_t out, void *dx) {
    const glm_backend *be = cx->m->be;
    struct glm_ws *w = cx->w;
    glm_dtype ad = be->act_dtype, wd = be->weight_dtype;
    PH(GLM_PHASE_GEMM);
    GLM_TRY(be->matmul(be, 0, 0, rows, in, out, 1.0f, dy, ad, ldy, base_weight(LW(cx, layer), lin), wd, in, 0.0f, dx,
                       ad, in));
    glm_lora *L = cx->lora;
    if (!L) return GLM_OK;
    const int r = L->r;
    PH(GLM_PHASE_LORA);
    for (int k = 0; k < L->layer_count[layer]; k++) {
        int si = L->layer_first[layer] + k;
        const glm_lora_site *s = &L->sites[si];
        if (s->lin != lin) continue;
        glm_param *A = &L->params[s->pa], *Bp = &L->params[s->pb];
        const void *dys = OFF(dy, s->row0), *xin;
        GLM_TRY(lora_input(cx, s, x, in, rows, row0, &xin));
        /* u [rows, r] = dropout(x) A^T (recomputed: cheaper than keeping it for every layer) */
        GLM_TRY(be->matmul(be, 0, 1, rows, r, in, 1.0f, xin, ad, in, w->shA[si], ad, in, 0.0f, w->u, ad, r));
        /* dB [out, r] += scaling dy^T u */
        GLM_TRY(be->matmul(be, 1, 0, s->out, r, rows, L->scaling, dys, ad, ldy, w->u, ad, r, 1.0f, Bp->g, GLM_DT_F32, r));
        /* du [rows, r] = scaling dy B */
        GLM_TRY(be->matmul(be, 0, 0, rows, r, s->out, L->scaling, dys, ad, ldy, w->shB[si], ad, r, 0.0f, w->du, ad, r));
        /* dA [r, in] += du^T dropout(x) */
        GLM_TRY(be->matmul(be, 1, 0, r, in, rows, 1.0f, w->du, ad, r, xin, ad, in, 1.0f, A->g, GLM_DT_F32, in));
        /* dx += dropout_bwd(du A) */
        if (cx->p_drop > 0) {
            uint64_t stream = (uint64_t)layer * 8 + s->module;
            GLM_TRY(be->matmul(be, 0, 0, rows, in, r, 1.0f, w->du, ad, r, w->shA[si], ad, in, 0.0f, w->drop, ad, in));
            GLM_TRY(drop_rows(cx, w->drop, in, w->drop, in, rows, in, row0, stream));
            GLM_TRY(be->axpy(be, dx, w->drop, 1.0f, rows * in));
        } else {
            GLM_TRY(be->matmul(be, 0, 0, rows, in, r, 1.0f, w->du, ad, r, w->shA[si], ad, in, 1.0f, dx, ad, in));
        }
    }
    return GLM_OK;
}

/* Where layer l's activations live under the plan. */
typedef struct bufs {
    glm_ckpt_mode pol;
    void *xn1, *qkv, *o, *x_mid;
    float *rstd1, *rstd2, *lse;
    const saved *S;   /* non-NULL for keep layers (their xn2, h, a) */
} bufs;

static bufs layer_bufs(ctx *cx, int l) {
    struct glm_ws *w = cx->w;
    bufs b;
    b.pol = w->backward ? glm_plan_layer(&w->plan, l) : GLM_CKPT_FULL;
    const saved *s = &w->S[l];
    int keep = b.pol == GLM_CKPT_NONE, attn = b.pol != GLM_CKPT_FULL;
    b.xn1 = keep ? s->xn1 : w->xn1;
    b.rstd1 = keep ? s->rstd1 : w->rstd1;
    b.rstd2 = keep ? s->rstd2 : w->rstd2;
    b.qkv = attn ? s->qkv : w->qkv;
    b.o = attn ? s->o : w->o;
    b.x_mid = attn ? s->x_mid : w->x_mid;
    b.lse = attn ? s->lse : w->lse;
    b.S = keep ? s : NULL;
    return b;
}

/* The attention half of layer l: xn1, qkv (+ RoPE), o, lse and x_mid = x_in + dense(o). */
static glm_status attn_fwd(ctx *cx, int l, const void *x_in, const bufs *b) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const glm_layer_weights *lw = LW(cx, l);
    struct glm_ws *w = cx->w;
    int64_t N = cx->N, C = c->C, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(be->rmsnorm_fwd(be, b->xn1, b->rstd1, x_in, lw->ln1, N, C, c->eps));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_QKV, b->xn1, C, N, 0, b->qkv, Dqkv, Dqkv, 0));
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(be->rope(be, b->qkv, Dqkv, w->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 0));
    PH(GLM_PHASE_ATTN_FWD);
    if (cx->cpl) /* context parallel: the ring over the group (lora/ring_attention.h) */
        GLM_TRY(glm_ring_attention_fwd(&w->ring, b->o, qd, b->lse, b->qkv, Dqkv, OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd),
                                       Dqkv));
    else
        GLM_TRY(be->attention_fwd(be, b->o, qd, b->lse, b->qkv, Dqkv, OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd), Dqkv,
                                  w->doc, cx->B, cx->T, c->H, c->Hkv, c->Dh));
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(be->copy(be, b->x_mid, x_in, (size_t)(N * C) * w->esz));
    return linear_fwd(cx, l, GLM_LIN_DENSE, b->o, qd, N, 0, b->x_mid, C, C, 1);
}

/* The MLP input side for tokens [n0, n0 + rows): xn2, h, a, computed into the layer's kept
 * buffers (keep layers) or the chunk scratch. */
static glm_status mlp_in(ctx *cx, int l, const bufs *b, int64_t n0, int64_t rows, void **xn2, void **h, void **a) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    struct glm_ws *w = cx->w;
    int64_t C = c->C, F = c->F;
    *xn2 = b->S ? OFF(b->S->xn2, n0 * C) : w->xn2c;
    *h = b->S ? OFF(b->S->h, n0 * 2 * F) : w->hc;
    *a = b->S ? OFF(b->S->a, n0 * F) : w->ac;
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(be->rmsnorm_fwd(be, *xn2, b->rstd2 + n0, OFF(b->x_mid, n0 * C), LW(cx, l)->ln2, rows, C, c->eps));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_H4H, *xn2, C, rows, n0, *h, 2 * F, 2 * F, 0));
    PH(GLM_PHASE_ELEMENTWISE);
    return be->swiglu_fwd(be, *a, *h, rows, F);
}

/* One decoder layer: x_out = layer(x_in), keeping what the plan keeps. */
static glm_status layer_fwd(ctx *cx, int l, const void *x_in, void *x_out) {
    const glm_config *c = &cx->m->cfg;
    const glm_backend *be = cx->m->be;
    struct glm_ws *w = cx->w;
    bufs b = layer_bufs(cx, l);
    GLM_TRY(attn_fwd(cx, l, x_in, &b));
    int64_t C = c->C, F = c->F, mc = w->plan.mlp_chunk;
    for (int64_t n0 = 0; n0 < cx->N; n0 += mc) {
        int64_t rows = cx->N - n0 < mc ? cx->N - n0 : mc;
        void *xn2, *h, *a;
        GLM_TRY(mlp_in(cx, l, &b, n0, rows, &xn2, &h, &a));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(be->copy(be, OFF(x_out, n0 * C), OFF(b.x_mid, n0 * C), (size_t)(rows * C) * w->esz));
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_4HH, a, F, rows, n0, OFF(x_out, n0 * C), C, C, 1));
    }
    return GLM_OK;
}

/* Backward of layer l: on entry w->dx = d loss / d x_out; on return d loss / d x_in. */
static glm_status layer_bwd(ctx *cx, int l, const void *x_in) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const glm_layer_weights *lw = LW(cx, l);
    struct glm_ws *w = cx->w;
    int64_t N = cx->N, C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    bufs b = layer_bufs(cx, l);
    if (b.pol == GLM_CKPT_FULL) {
        GLM_TRY(attn_fwd(cx, l, x_in, &b)); /* recompute the attention half */
    } else if (b.pol == GLM_CKPT_SELECTIVE) {
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(be->rmsnorm_fwd(be, b.xn1, b.rstd1, x_in, lw->ln1, N, C, c->eps));
    }
    /* the MLP, chunk by chunk (recomputing its inputs unless the layer keeps them) */
    int64_t mc = w->plan.mlp_chunk;
    for (int64_t n0 = 0; n0 < N; n0 += mc) {
        int64_t rows = N - n0 < mc ? N - n0 : mc;
        void *xn2, *h, *a;
        if (b.S) {
            xn2 = OFF(b.S->xn2, n0 * C);
            h = OFF(b.S->h, n0 * 2 * F);
            a = OFF(b.S->a, n0 * F);
        } else {
            GLM_TRY(mlp_in(cx, l, &b, n0, rows, &xn2, &h, &a));
        }
        void *dyc = OFF(w->dx, n0 * C), *dxnc = OFF(w->dxn, n0 * C);
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_4HH, a, F, rows, n0, dyc, C, C, w->dac));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(be->swiglu_bwd(be, w->dhc, w->dac, h, rows, F));
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_H4H, xn2, C, rows, n0, w->dhc, 2 * F, 2 * F, dxnc));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(be->rmsnorm_bwd(be, dyc, dxnc, OFF(b.x_mid, n0 * C), lw->ln2, b.rstd2 + n0, rows, C));
    }
    /* the attention half */
    GLM_TRY(linear_bwd(cx, l, GLM_LIN_DENSE, b.o, qd, N, 0, w->dx, C, C, w->d_o));
    PH(GLM_PHASE_ATTN_BWD);
    if (cx->cpl)
        GLM_TRY(glm_ring_attention_bwd(&w->ring, w->dqkv, Dqkv, OFF(w->dqkv, qd), Dqkv, OFF(w->dqkv, qd + kd), Dqkv, w->d_o, qd,
                                       b.o, b.lse, b.qkv, OFF(b.qkv, qd), OFF(b.qkv, qd + kd)));
    else
        GLM_TRY(be->attention_bwd(be, w->dqkv, OFF(w->dqkv, qd), OFF(w->dqkv, qd + kd), w->d_o, qd, b.o, b.lse, b.qkv, Dqkv,
                                  OFF(b.qkv, qd), Dqkv, OFF(b.qkv, qd + kd), Dqkv, w->doc, cx->B, cx->T, c->H, c->Hkv, c->Dh));
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(be->rope(be, w->dqkv, Dqkv, w->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 1));
    GLM_TRY(linear_bwd(cx, l, GLM_LIN_QKV, b.xn1, C, N, 0, w->dqkv, Dqkv, Dqkv, w->dxn));
    PH(GLM_PHASE_ELEMENTWISE);
    return be->rmsnorm_bwd(be, w->dx, w->dxn, x_in, lw->ln1, b.rstd1, N, C);
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
    if (s->pending) GLM_TRY(be->sync(be));
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
    GLM_TRY(be->upload_async(be, s->ids, h, 4 * n, after_ops, &tk)); /* the copy stream is in order: */
    GLM_TRY(be->upload_async(be, s->pos, h + 4 * cap, 4 * n, 0, &tk)); /* the first one's wait holds */
    GLM_TRY(be->upload_async(be, s->doc, h + 8 * cap, 4 * n, 0, &tk)); /* for the others */
    GLM_TRY(be->upload_async(be, s->labels, lab, 4 * n, 0, &s->ticket));
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
 * Context parallel: the batch holds whole rows; this rank's local tokens (lora/ring_attention.h)
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
        return be->copy_wait(be, s->ticket);
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
    GLM_TRY(be->upload(be, w->ids, loc, (size_t)NL * 4)); /* uint32 ids below V < 2^31: the same bits */
    for (int r = 0; r < b->B; r++)
        for (int j = 0; j < TL; j++) {
            int64_t t = glm_cp_global(cpl, j);
            loc[(int64_t)r * TL + j] = t < T ? b->pos[(int64_t)r * T + t] : (int32_t)(t - T); /* padding: 0, 1, ... */
        }
    GLM_TRY(be->upload(be, w->pos, loc, (size_t)NL * 4));
    GLM_TRY(be->upload(be, w->labels, lab, (size_t)NL * 4));
    GLM_TRY(be->upload(be, w->gdoc, gd, (size_t)b->B * (size_t)Tp * 4));
    *n_labels = cnt;
    return GLM_OK;
}

/* The act-dtype copies of the LoRA weights, from the fp32 weights (once per step). */
static glm_status refresh_lora_copies(const glm_backend *be, struct glm_ws *w, glm_lora *L) {
    if (!L || !w->shadows) return GLM_OK;
    PH(GLM_PHASE_LORA);
    for (int si = 0; si < L->n_sites; si++) {
        const glm_param *A = &L->params[L->sites[si].pa], *B = &L->params[L->sites[si].pb];
        GLM_TRY(be->cast(be, w->shA[si], be->act_dtype, A->w, GLM_DT_F32, A->numel));
        GLM_TRY(be->cast(be, w->shB[si], be->act_dtype, B->w, GLM_DT_F32, B->numel));
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
    GLM_TRY(gather_make(m));
    struct glm_ws *w = m->ws;
    w->ring.B = b->B; /* this batch's rows (at most the workspace's) */
    const glm_cp_layout *cpl = cp ? &w->ring.L : NULL;
    const int TL = cp ? w->TL : b->T;
    ctx cx = {m, lora, w, b->B, TL, (int64_t)b->B * TL, seed, p_drop, b->T, cpl};
    int64_t N = cx.N, C = c->C, V = c->V, nlab = 0;
    glm_status st = upload_batch(m, w, b, cpl, &nlab);
    if (!st) st = refresh_lora_copies(be, w, lora);
    if (st) return st;
    const void *embed = m->embed, *out_w = m->out_w;
    if (m->gather) { /* sharded base: the embedding gathered, then the output layer prefetched into its slot */
        GLM_TRY(gather_big_use(m, 1, &embed));
        GLM_TRY(gather_start(m, 0));
    }
    PH(GLM_PHASE_ELEMENTWISE);
    const size_t xbytes = (size_t)(N * C) * w->esz;
    const int off = w->xh && backward;
    uint64_t down_prev = 0, down_last = 0; /* offload: the downloads of the last two layer inputs */
    GLM_TRY(be->embedding(be, xdev(w, 0), embed, w->ids, N, C, V));
    if (off) GLM_TRY(be->download_async(be, w->xh[0], xdev(w, 0), xbytes, &down_last));
    if (m->gather) GLM_TRY(gather_big_start(m, 2));
    for (int l = 0; l < c->L; l++) {
        if (m->gather) { /* this layer's weights, and the next layer's gather started behind it */
            GLM_TRY(gather_use(m, l));
            if (l + 1 < c->L) GLM_TRY(gather_start(m, l + 1));
        }
        /* offload: layer l writes the slot of layer l-1's input, whose download ran during layer
         * l-1 (layer l's input downloads while layer l computes) */
        if (off) GLM_TRY(be->copy_wait(be, down_prev));
        GLM_TRY(layer_fwd(&cx, l, xdev(w, l), xdev(w, l + 1)));
        if (off && l + 1 < c->L) { /* the output to host memory (the last one stays on the device for the loss head) */
            down_prev = down_last;
            GLM_TRY(be->download_async(be, w->xh[l + 1], xdev(w, l + 1), xbytes, &down_last));
        }
    }
    if (m->gather) GLM_TRY(gather_big_use(m, 2, &out_w)); /* every rank, whether its chunks have targets or not */
    if (backward) GLM_TRY(be->zero(be, w->dx, (size_t)(N * C) * w->esz));
    double total = 0;
    int64_t ntot = 0, lc = w->plan.loss_chunk;
    for (int64_t n0 = 0; n0 < N; n0 += lc) {
        int64_t nc = N - n0 < lc ? N - n0 : lc;
        if (!logits_out) { /* skip chunks without targets */
            int64_t k = 0;
            for (int64_t i = n0; i < n0 + nc; i++) k += w->lab_host[i] >= 0;
            if (!k) continue;
        }
        const void *xf = OFF(xdev(w, c->L), n0 * C);
        PH(GLM_PHASE_LOSS);
        GLM_TRY(be->rmsnorm_fwd(be, w->xnf, w->rstdf, xf, m->final_ln, nc, C, c->eps));
        GLM_TRY(be->matmul(be, 0, 1, nc, V, C, 1.0f, w->xnf, be->act_dtype, C, out_w, be->weight_dtype, C, 0.0f, w->logits,
                           be->act_dtype, V));
        if (logits_out) {
            GLM_TRY(be->download_f32(be, logits_out + n0 * V, be->act_dtype, w->logits, nc * V));
            continue;
        }
        double ls = 0;
        int64_t nt = 0;
        GLM_TRY(be->cross_entropy(be, backward ? w->logits : NULL, w->logits, w->labels + n0, nc, V, loss_scale, &ls, &nt));
        total += ls;
        ntot += nt;
        if (backward) {
            GLM_TRY(be->matmul(be, 0, 0, nc, C, V, 1.0f, w->logits, be->act_dtype, V, out_w, be->weight_dtype, C, 0.0f,
                               w->dxnf, be->act_dtype, C));
            GLM_TRY(be->rmsnorm_bwd(be, OFF(w->dx, n0 * C), w->dxnf, xf, m->final_ln, w->rstdf, nc, C));
        }
    }
    if (loss_sum) *loss_sum = total;
    if (n_targets) *n_targets = logits_out ? nlab : ntot;
    if (backward) {
        uint64_t up = 0; /* offload: the upload of layer l's input */
        for (int l = c->L - 1; l >= 0; l--) {
            if (m->gather) { /* backward order: layer l (still in its slot after the forward for the last two), l-1 prefetched */
                GLM_TRY(gather_use(m, l));
                if (l > 0) GLM_TRY(gather_start(m, l - 1));
            }
            /* offload: layer L-1's input is still in its slot; layer l-1's goes into the other slot
             * (layer l+1's input or, for l = L-1, the loss head's) while layer l's backward runs */
            uint64_t up_next = 0;
            if (off && l > 0) GLM_TRY(be->upload_async(be, xdev(w, l - 1), w->xh[l - 1], xbytes, 1, &up_next));
            if (off) GLM_TRY(be->copy_wait(be, up));
            GLM_TRY(layer_bwd(&cx, l, xdev(w, l)));
            up = up_next;
            if (m->grad_ready) GLM_TRY(m->grad_ready(m->grad_ready_user, l)); /* layer l's LoRA grads are final */
        }
    }
    PH(GLM_PHASE_OTHER);
    /* the host is idle until the queued work is done: the trainer prepares the next batch */
    if (backward && m->next_batch) GLM_TRY(m->next_batch(m->next_batch_user));
    GLM_TRY(be->sync(be));
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
