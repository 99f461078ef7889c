/* lora/model.c: GLM-4 weights, forward and backward (to the LoRA weights) over the backend ops.
 * See lora/model.h. Activations saved per layer for the backward (without checkpointing):
 * x_in [N,C] (the residual stream, kept for every layer in both modes), xn1 [N,C], rstd1 [N],
 * qkv [N, (H+2Hkv)Dh] (after RoPE), o [N, H Dh], lse [B,H,T], x_mid [N,C], xn2 [N,C], rstd2 [N],
 * h [N,2F], a [N,F] and the LoRA intermediates u = dropout(x) A^T [N,r] per site. */
#include "lora/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "lora/safetensors.h"

/* ---------------------------------------------------------------------------- loading */

void glm_model_free(glm_model *m) {
    if (!m) return;
    const glm_backend *be = m->be;
    be->free(be, m->embed);
    be->free(be, m->final_ln);
    be->free(be, m->out_w);
    be->free(be, m->inv_freq);
    if (m->layers)
        for (int l = 0; l < m->cfg.L; l++) {
            glm_layer_weights *w = &m->layers[l];
            be->free(be, w->ln1);
            be->free(be, w->wqkv);
            be->free(be, w->bqkv);
            be->free(be, w->wo);
            be->free(be, w->ln2);
            be->free(be, w->w1);
            be->free(be, w->w2);
        }
    free(m->layers);
    free(m);
}

typedef struct loader {
    const glm_backend *be;
    glm_st_set *set;
    float *host;     /* scratch, large enough for the biggest tensor */
} loader;

/* Reads `name` (shape ndim/shape) into host[off ...] as f32. */
static glm_status ld_read(loader *ld, const char *name, int ndim, int64_t d0, int64_t d1, int64_t off) {
    int64_t shape[2] = {d0, d1};
    return glm_st_read_f32(ld->set, name, ndim, shape, ld->host + off);
}

static glm_status ld_upload(loader *ld, const char *what, int64_t n, void **dst) {
    GLM_TRY(ld->be->alloc(ld->be, (size_t)n * glm_dtype_size(ld->be->weight_dtype), what, dst));
    return ld->be->upload_f32(ld->be, *dst, ld->be->weight_dtype, ld->host, n);
}

/* One tensor, whole. */
static glm_status ld_tensor(loader *ld, const char *name, int ndim, int64_t d0, int64_t d1, void **dst) {
    GLM_TRY(ld_read(ld, name, ndim, d0, d1, 0));
    return ld_upload(ld, name, ndim == 1 ? d0 : d0 * d1, dst);
}

static glm_status load_weights(glm_model *m, loader *ld) {
    const glm_config *c = &m->cfg;
    int64_t C = c->C, F = c->F, V = c->V, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    int64_t Dqkv = qd + 2 * kd;
    bool hf = c->layout == GLM_LAYOUT_HF;
    char n[256];
    GLM_TRY(ld_tensor(ld, hf ? "model.embed_tokens.weight" : "transformer.embedding.word_embeddings.weight", 2, V, C, &m->embed));
    GLM_TRY(ld_tensor(ld, hf ? "model.norm.weight" : "transformer.encoder.final_layernorm.weight", 1, C, 0, &m->final_ln));
    GLM_TRY(ld_tensor(ld, hf ? "lm_head.weight" : "transformer.output_layer.weight", 2, V, C, &m->out_w));
    for (int l = 0; l < c->L; l++) {
        glm_layer_weights *w = &m->layers[l];
        const char *p = hf ? "model.layers" : "transformer.encoder.layers";
#define NAME(fmt) (snprintf(n, sizeof n, "%s.%d." fmt, p, l), n)
        GLM_TRY(ld_tensor(ld, NAME("input_layernorm.weight"), 1, C, 0, &w->ln1));
        GLM_TRY(ld_tensor(ld, NAME("post_attention_layernorm.weight"), 1, C, 0, &w->ln2));
        if (hf) {
            GLM_TRY(ld_read(ld, NAME("self_attn.q_proj.weight"), 2, qd, C, 0));
            GLM_TRY(ld_read(ld, NAME("self_attn.k_proj.weight"), 2, kd, C, qd * C));
            GLM_TRY(ld_read(ld, NAME("self_attn.v_proj.weight"), 2, kd, C, (qd + kd) * C));
            GLM_TRY(ld_upload(ld, NAME("self_attn.qkv"), Dqkv * C, &w->wqkv));
            if (c->qkv_bias) {
                GLM_TRY(ld_read(ld, NAME("self_attn.q_proj.bias"), 1, qd, 0, 0));
                GLM_TRY(ld_read(ld, NAME("self_attn.k_proj.bias"), 1, kd, 0, qd));
                GLM_TRY(ld_read(ld, NAME("self_attn.v_proj.bias"), 1, kd, 0, qd + kd));
                GLM_TRY(ld_upload(ld, NAME("self_attn.qkv.bias"), Dqkv, &w->bqkv));
            }
            GLM_TRY(ld_tensor(ld, NAME("self_attn.o_proj.weight"), 2, C, qd, &w->wo));
            GLM_TRY(ld_tensor(ld, NAME("mlp.gate_up_proj.weight"), 2, 2 * F, C, &w->w1));
            GLM_TRY(ld_tensor(ld, NAME("mlp.down_proj.weight"), 2, C, F, &w->w2));
        } else {
            GLM_TRY(ld_tensor(ld, NAME("self_attention.query_key_value.weight"), 2, Dqkv, C, &w->wqkv));
            if (c->qkv_bias) GLM_TRY(ld_tensor(ld, NAME("self_attention.query_key_value.bias"), 1, Dqkv, 0, &w->bqkv));
            GLM_TRY(ld_tensor(ld, NAME("self_attention.dense.weight"), 2, C, qd, &w->wo));
            GLM_TRY(ld_tensor(ld, NAME("mlp.dense_h_to_4h.weight"), 2, 2 * F, C, &w->w1));
            GLM_TRY(ld_tensor(ld, NAME("mlp.dense_4h_to_h.weight"), 2, C, F, &w->w2));
        }
#undef NAME
    }
    return GLM_OK;
}

glm_status glm_model_load(const char *dir, const glm_backend *be, double rope_theta_override, glm_model **out) {
    glm_model *m = calloc(1, sizeof *m);
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    m->be = be;
    glm_status st = glm_config_load(dir, rope_theta_override, &m->cfg);
    if (st) {
        free(m);
        return st;
    }
    const glm_config *c = &m->cfg;
    m->loss_chunk = (int64_t)(1 << 25) / c->V;
    if (m->loss_chunk < 1) m->loss_chunk = 1;
    m->layers = calloc((size_t)c->L, sizeof *m->layers);
    int64_t C = c->C, biggest = (int64_t)c->V * C;
    int64_t qkv = glm_config_qkv_rows(c) * C, ff = 2 * (int64_t)c->F * C;
    if (qkv > biggest) biggest = qkv;
    if (ff > biggest) biggest = ff;
    loader ld = {be, NULL, malloc((size_t)biggest * sizeof(float))};
    if (!m->layers || !ld.host) {
        free(ld.host);
        glm_model_free(m);
        return glm_err(GLM_ERR_NOMEM, "out of memory loading the model (%lld floats of scratch)", (long long)biggest);
    }
    float invf[512];
    if (c->rope_dim / 2 > 512) st = glm_err(GLM_ERR_UNSUPPORTED, "%s: %d rotary dims per head is more than glmtune supports (1024)", dir, c->rope_dim);
    if (!st) st = be->alloc(be, (size_t)(c->rope_dim / 2) * 4, "rope inv_freq", (void **)&m->inv_freq);
    if (!st) {
        glm_rope_inv_freq(c->rope_base, c->rope_dim, invf);
        st = be->upload(be, m->inv_freq, invf, (size_t)(c->rope_dim / 2) * 4);
    }
    if (!st) st = glm_st_open(dir, &ld.set);
    if (st == GLM_OK) st = load_weights(m, &ld);
    if (ld.set) glm_st_close(ld.set);
    free(ld.host);
    if (st) {
        glm_layout lay = c->layout;
        glm_model_free(m);
        return glm_err_context(st, "loading the %s-layout model from %s", glm_layout_name(lay), dir);
    }
    *out = m;
    return GLM_OK;
}

glm_status glm_model_set_rope_inv_freq(glm_model *m, const float *inv_freq) {
    return m->be->upload(m->be, m->inv_freq, inv_freq, (size_t)(m->cfg.rope_dim / 2) * sizeof(float));
}

/* ---------------------------------------------------------------------------- workspace */

typedef struct acts {
    void *xn1, *qkv, *o, *x_mid, *xn2, *h, *a;
    float *rstd1, *rstd2, *lse, *u;
} acts;

typedef struct ws {
    const glm_backend *be;
    size_t esz;             /* activation element size */
    int64_t N;
    void **xs;              /* [L+1] residual stream: input of each layer, final output */
    acts *A;                /* [L] (no checkpointing) or [1] (checkpointing) */
    int nA;
    /* backward scratch */
    void *dx, *d_a, *d_h, *d_xn, *d_o, *d_qkv, *drop;   /* act */
    float *du;
    /* loss head */
    void *xnf, *logits, *dxn;
    float *rstdf;
    uint32_t *ids;
    int32_t *pos, *doc, *labels;
    /* every allocation, for freeing */
    void *allocs[64 + 16 * 1024];
    int n_allocs;
} ws;

static glm_status ws_alloc(ws *w, size_t bytes, const char *what, void **p) {
    if (w->n_allocs >= (int)(sizeof w->allocs / sizeof w->allocs[0]))
        return glm_err(GLM_ERR_INTERNAL, "model workspace: too many buffers");
    GLM_TRY(w->be->alloc(w->be, bytes ? bytes : 4, what, p));
    w->allocs[w->n_allocs++] = *p;
    return GLM_OK;
}

static void ws_free(ws *w) {
    for (int i = 0; i < w->n_allocs; i++) w->be->free(w->be, w->allocs[i]);
    free(w->xs);
    free(w->A);
    free(w);
}

static glm_status ws_create(const glm_model *m, const glm_lora *lora, int B, int T, int nA, int backward, ws **out) {
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    ws *w = calloc(1, sizeof *w);
    if (!w) return glm_err(GLM_ERR_NOMEM, "out of memory");
    w->be = be;
    w->esz = glm_dtype_size(be->act_dtype);
    int64_t N = (int64_t)B * T, C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, Dqkv = glm_config_qkv_rows(c);
    w->N = N;
    size_t e = w->esz;
    w->xs = calloc((size_t)c->L + 1, sizeof(void *));
    w->A = calloc((size_t)nA, sizeof(acts));
    w->nA = nA;
    glm_status st = GLM_OK;
    if (!w->xs || !w->A) {
        ws_free(w);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    int r = lora ? lora->r : 0, max_sites = 0;
    int64_t max_in = 1;
    if (lora)
        for (int l = 0; l < lora->L; l++)
            if (lora->layer_count[l] > max_sites) max_sites = lora->layer_count[l];
    if (lora)
        for (int s = 0; s < lora->n_sites; s++)
            if (lora->sites[s].in > max_in) max_in = lora->sites[s].in;
    int64_t chunk = m->loss_chunk < N ? m->loss_chunk : N;
#define A_(p, bytes, what) if ((st = ws_alloc(w, (bytes), (what), (void **)&(p)))) goto fail
    for (int l = 0; l <= c->L; l++) A_(w->xs[l], N * C * e, "residual stream");
    for (int i = 0; i < nA; i++) {
        acts *a = &w->A[i];
        A_(a->xn1, N * C * e, "xn1");
        A_(a->qkv, N * Dqkv * e, "qkv");
        A_(a->o, N * qd * e, "attention output");
        A_(a->x_mid, N * C * e, "x_mid");
        A_(a->xn2, N * C * e, "xn2");
        A_(a->h, N * 2 * F * e, "mlp h");
        A_(a->a, N * F * e, "mlp a");
        A_(a->rstd1, N * 4, "rstd1");
        A_(a->rstd2, N * 4, "rstd2");
        A_(a->lse, (int64_t)B * c->H * T * 4, "lse");
        A_(a->u, (int64_t)max_sites * N * r * 4, "lora u");
    }
    A_(w->drop, N * max_in * e, "dropout scratch");
    if (backward) {
        A_(w->dx, N * C * e, "dx");
        A_(w->d_a, N * F * e, "d_a");
        A_(w->d_h, N * 2 * F * e, "d_h");
        A_(w->d_xn, N * C * e, "d_xn");
        A_(w->d_o, N * qd * e, "d_o");
        A_(w->d_qkv, N * Dqkv * e, "d_qkv");
        A_(w->du, N * (r ? r : 1) * 4, "lora du");
        A_(w->dxn, chunk * C * e, "loss dxn");
    }
    A_(w->xnf, chunk * C * e, "final norm chunk");
    A_(w->rstdf, chunk * 4, "final rstd chunk");
    A_(w->logits, chunk * c->V * e, "logits chunk");
    A_(w->ids, N * 4, "ids");
    A_(w->pos, N * 4, "pos");
    A_(w->doc, N * 4, "doc");
    A_(w->labels, N * 4, "labels");
#undef A_
    *out = w;
    return GLM_OK;
fail:
    ws_free(w);
    return st;
}

/* ---------------------------------------------------------------------------- layers */

#define OFF(p, elems) ((void *)((char *)(p) + (size_t)(elems) * w->esz))

typedef struct ctx {
    glm_model *m;
    glm_lora *lora;
    ws *w;
    int B, T;
    uint64_t seed;
    float p_drop;   /* 0 when no dropout (logits path) */
} ctx;

static const void *base_weight(const glm_layer_weights *lw, glm_linear lin) {
    switch (lin) {
    case GLM_LIN_QKV: return lw->wqkv;
    case GLM_LIN_DENSE: return lw->wo;
    case GLM_LIN_H4H: return lw->w1;
    default: return lw->w2;
    }
}

/* y[:, 0:out] = beta*y + x W^T + LoRA of (layer, lin); x [N,in] act, y act with row stride ldy. */
static glm_status linear_fwd(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, void *y, int64_t ldy,
                             int64_t out, float beta, float *u_layer) {
    const glm_backend *be = cx->m->be;
    ws *w = cx->w;
    glm_dtype ad = be->act_dtype, wd = be->weight_dtype;
    int64_t N = w->N;
    GLM_TRY(be->matmul(be, 0, 1, N, out, in, 1.0f, x, ad, in, base_weight(&cx->m->layers[layer], lin), wd, in, beta, y, ad, ldy));
    glm_lora *L = cx->lora;
    if (!L) return GLM_OK;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        const glm_lora_site *s = &L->sites[L->layer_first[layer] + k];
        if (s->lin != lin) continue;
        const glm_param *A = &L->params[s->pa], *Bp = &L->params[s->pb];
        float *u = u_layer + (int64_t)k * N * L->r;
        const void *xin = x;
        if (cx->p_drop > 0) {
            GLM_TRY(be->dropout(be, w->drop, in, x, in, N, in, cx->p_drop, cx->seed, (uint64_t)layer * 8 + s->module));
            xin = w->drop;
        }
        GLM_TRY(be->matmul(be, 0, 1, N, L->r, in, 1.0f, xin, ad, in, A->w, GLM_DT_F32, in, 0.0f, u, GLM_DT_F32, L->r));
        GLM_TRY(be->matmul(be, 0, 1, N, s->out, L->r, L->scaling, u, GLM_DT_F32, L->r, Bp->w, GLM_DT_F32, L->r, 1.0f,
                           OFF(y, s->row0), ad, ldy));
    }
    return GLM_OK;
}

/* dx = dy W (OVERWRITES dx [N,in]) plus the LoRA input gradient; ACCUMULATES LoRA weight grads.
 * dy [N, out] act with row stride ldy; x is the linear's forward input [N,in]. */
static glm_status linear_bwd(ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, const void *dy,
                             int64_t ldy, int64_t out, void *dx, const float *u_layer) {
    const glm_backend *be = cx->m->be;
    ws *w = cx->w;
    glm_dtype ad = be->act_dtype, wd = be->weight_dtype;
    int64_t N = w->N;
    GLM_TRY(be->matmul(be, 0, 0, N, in, out, 1.0f, dy, ad, ldy, base_weight(&cx->m->layers[layer], lin), wd, in, 0.0f, dx, ad, in));
    glm_lora *L = cx->lora;
    if (!L) return GLM_OK;
    int r = L->r;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        const glm_lora_site *s = &L->sites[L->layer_first[layer] + k];
        if (s->lin != lin) continue;
        glm_param *A = &L->params[s->pa], *Bp = &L->params[s->pb];
        const float *u = u_layer + (int64_t)k * N * r;
        const void *dys = OFF(dy, s->row0);
        uint64_t stream = (uint64_t)layer * 8 + s->module;
        /* dB [out, r] += scaling * dy^T u */
        GLM_TRY(be->matmul(be, 1, 0, s->out, r, N, L->scaling, dys, ad, ldy, u, GLM_DT_F32, r, 1.0f, Bp->g, GLM_DT_F32, r));
        /* du [N, r] = scaling * dy B */
        GLM_TRY(be->matmul(be, 0, 0, N, r, s->out, L->scaling, dys, ad, ldy, Bp->w, GLM_DT_F32, r, 0.0f, w->du, GLM_DT_F32, r));
        /* dA [r, in] += du^T dropout(x) */
        const void *xin = x;
        if (cx->p_drop > 0) {
            GLM_TRY(be->dropout(be, w->drop, in, x, in, N, in, cx->p_drop, cx->seed, stream));
            xin = w->drop;
        }
        GLM_TRY(be->matmul(be, 1, 0, r, in, N, 1.0f, w->du, GLM_DT_F32, r, xin, ad, in, 1.0f, A->g, GLM_DT_F32, in));
        /* dx += dropout_bwd(du A) */
        if (cx->p_drop > 0) {
            GLM_TRY(be->matmul(be, 0, 0, N, in, r, 1.0f, w->du, GLM_DT_F32, r, A->w, GLM_DT_F32, in, 0.0f, w->drop, ad, in));
            GLM_TRY(be->dropout(be, w->drop, in, w->drop, in, N, in, cx->p_drop, cx->seed, stream));
            GLM_TRY(be->axpy(be, dx, w->drop, 1.0f, N * in));
        } else {
            GLM_TRY(be->matmul(be, 0, 0, N, in, r, 1.0f, w->du, GLM_DT_F32, r, A->w, GLM_DT_F32, in, 1.0f, dx, ad, in));
        }
    }
    return GLM_OK;
}

/* One decoder layer: x_out = layer(x_in), saving activations in a. */
static glm_status layer_fwd(ctx *cx, int l, const void *x_in, acts *a, void *x_out) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const glm_layer_weights *lw = &m->layers[l];
    ws *w = cx->w;
    int64_t N = w->N, C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    int64_t Dqkv = qd + 2 * kd;
    GLM_TRY(be->rmsnorm_fwd(be, a->xn1, a->rstd1, x_in, lw->ln1, N, C, c->eps));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_QKV, a->xn1, C, a->qkv, Dqkv, Dqkv, 0.0f, a->u));
    if (lw->bqkv) GLM_TRY(be->add_bias(be, a->qkv, Dqkv, lw->bqkv, N, Dqkv));
    GLM_TRY(be->rope(be, a->qkv, Dqkv, w->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 0));
    GLM_TRY(be->attention_fwd(be, a->o, qd, a->lse, a->qkv, Dqkv, OFF(a->qkv, qd), Dqkv, OFF(a->qkv, qd + kd), Dqkv, w->doc,
                              cx->B, cx->T, c->H, c->Hkv, c->Dh));
    GLM_TRY(be->copy(be, a->x_mid, x_in, (size_t)(N * C) * w->esz));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_DENSE, a->o, qd, a->x_mid, C, C, 1.0f, a->u));
    GLM_TRY(be->rmsnorm_fwd(be, a->xn2, a->rstd2, a->x_mid, lw->ln2, N, C, c->eps));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_H4H, a->xn2, C, a->h, 2 * F, 2 * F, 0.0f, a->u));
    GLM_TRY(be->swiglu_fwd(be, a->a, a->h, N, F));
    GLM_TRY(be->copy(be, x_out, a->x_mid, (size_t)(N * C) * w->esz));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_4HH, a->a, F, x_out, C, C, 1.0f, a->u));
    return GLM_OK;
}

/* Backward of layer l: on entry w->dx = d loss / d x_out; on return d loss / d x_in. */
static glm_status layer_bwd(ctx *cx, int l, const void *x_in, acts *a) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    const glm_layer_weights *lw = &m->layers[l];
    ws *w = cx->w;
    int64_t N = w->N, C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    int64_t Dqkv = qd + 2 * kd;
    GLM_TRY(linear_bwd(cx, l, GLM_LIN_4HH, a->a, F, w->dx, C, C, w->d_a, a->u));
    GLM_TRY(be->swiglu_bwd(be, w->d_h, w->d_a, a->h, N, F));
    GLM_TRY(linear_bwd(cx, l, GLM_LIN_H4H, a->xn2, C, w->d_h, 2 * F, 2 * F, w->d_xn, a->u));
    GLM_TRY(be->rmsnorm_bwd(be, w->dx, w->d_xn, a->x_mid, lw->ln2, a->rstd2, N, C));
    GLM_TRY(linear_bwd(cx, l, GLM_LIN_DENSE, a->o, qd, w->dx, C, C, w->d_o, a->u));
    GLM_TRY(be->attention_bwd(be, w->d_qkv, OFF(w->d_qkv, qd), OFF(w->d_qkv, qd + kd), w->d_o, qd, a->o, a->lse, a->qkv, Dqkv,
                              OFF(a->qkv, qd), Dqkv, OFF(a->qkv, qd + kd), Dqkv, w->doc, cx->B, cx->T, c->H, c->Hkv, c->Dh));
    GLM_TRY(be->rope(be, w->d_qkv, Dqkv, w->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 1));
    GLM_TRY(linear_bwd(cx, l, GLM_LIN_QKV, a->xn1, C, w->d_qkv, Dqkv, Dqkv, w->d_xn, a->u));
    GLM_TRY(be->rmsnorm_bwd(be, w->dx, w->d_xn, x_in, lw->ln1, a->rstd1, N, C));
    return GLM_OK;
}

/* ---------------------------------------------------------------------------- step */

/* Validates the batch and uploads ids/pos/doc and the shifted labels (label of position t = the
 * target token t+1, or -1). */
static glm_status upload_batch(const glm_model *m, ws *w, const glm_batch *b, int64_t *n_labels) {
    const glm_backend *be = m->be;
    int64_t N = (int64_t)b->B * b->T;
    int32_t *lab = malloc((size_t)N * sizeof(int32_t));
    if (!lab) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    int64_t cnt = 0;
    for (int r = 0; r < b->B && !st; r++)
        for (int t = 0; t < b->T; t++) {
            int64_t i = (int64_t)r * b->T + t;
            if (b->ids[i] >= (uint32_t)m->cfg.V) {
                st = glm_err(GLM_ERR_ARG, "batch row %d position %d: token id %u is outside the model's vocabulary (V = %d)", r, t,
                             b->ids[i], m->cfg.V);
                break;
            }
            if (b->targets && b->targets[i] && (t == 0 || b->doc[i] != b->doc[i - 1])) {
                st = glm_err(GLM_ERR_ARG, "batch row %d position %d: the first token of a document is marked as a target "
                             "(nothing precedes it to predict it)", r, t);
                break;
            }
            lab[i] = (t + 1 < b->T && b->targets && b->targets[i + 1]) ? (int32_t)b->ids[i + 1] : -1;
            if (lab[i] >= 0) cnt++;
        }
    if (!st) st = be->upload(be, w->ids, b->ids, (size_t)N * 4);
    if (!st) st = be->upload(be, w->pos, b->pos, (size_t)N * 4);
    if (!st) st = be->upload(be, w->doc, b->doc, (size_t)N * 4);
    if (!st) st = be->upload(be, w->labels, lab, (size_t)N * 4);
    free(lab);
    *n_labels = cnt;
    return st;
}

static glm_status run(glm_model *m, glm_lora *lora, const glm_batch *b, float loss_scale, int backward, int ckpt,
                      uint64_t seed, float p_drop, double *loss_sum, int64_t *n_targets, float *logits_out) {
    const glm_config *c = &m->cfg;
    const glm_backend *be = m->be;
    if (!b || b->B <= 0 || b->T <= 0 || !b->ids || !b->pos || !b->doc)
        return glm_err(GLM_ERR_ARG, "model step: empty or incomplete batch (B and T must be positive; ids, pos, doc required)");
    if (lora && (lora->L != c->L || lora->be != be))
        return glm_err(GLM_ERR_MISMATCH, "model step: the LoRA adapter was built for another model");
    if (!lora) backward = 0;
    int single = ckpt || !backward; /* one set of layer activations, reused by every layer */
    ws *w = NULL;
    GLM_TRY(ws_create(m, lora, b->B, b->T, single ? 1 : c->L, backward, &w));
    ctx cx = {m, lora, w, b->B, b->T, seed, p_drop};
    int64_t N = w->N, C = c->C, V = c->V, nlab = 0;
    glm_status st = upload_batch(m, w, b, &nlab);
    if (st) goto out;
    if ((st = be->embedding(be, w->xs[0], m->embed, w->ids, N, C, V))) goto out;
    for (int l = 0; l < c->L; l++)
        if ((st = layer_fwd(&cx, l, w->xs[l], &w->A[single ? 0 : l], w->xs[l + 1]))) goto out;
    if (backward && (st = be->zero(be, w->dx, (size_t)(N * C) * w->esz))) goto out;
    double total = 0;
    int64_t ntot = 0;
    int32_t *lab_host = NULL;
    if (!logits_out) {
        lab_host = malloc((size_t)N * 4);
        if (!lab_host) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            goto out;
        }
        if ((st = be->download(be, lab_host, w->labels, (size_t)N * 4))) goto out_lab;
    }
    for (int64_t n0 = 0; n0 < N; n0 += m->loss_chunk) {
        int64_t nc = N - n0 < m->loss_chunk ? N - n0 : m->loss_chunk;
        if (lab_host) { /* skip chunks without targets */
            int64_t k = 0;
            for (int64_t i = n0; i < n0 + nc; i++) k += lab_host[i] >= 0;
            if (!k) continue;
        }
        const void *xf = OFF(w->xs[c->L], n0 * C);
        if ((st = be->rmsnorm_fwd(be, w->xnf, w->rstdf, xf, m->final_ln, nc, C, c->eps))) break;
        if ((st = be->matmul(be, 0, 1, nc, V, C, 1.0f, w->xnf, be->act_dtype, C, m->out_w, be->weight_dtype, C, 0.0f, w->logits,
                             be->act_dtype, V)))
            break;
        if (logits_out) {
            if ((st = be->download_f32(be, logits_out + n0 * V, be->act_dtype, w->logits, nc * V))) break;
            continue;
        }
        double ls = 0;
        int64_t nt = 0;
        if ((st = be->cross_entropy(be, backward ? w->logits : NULL, w->logits, w->labels + n0, nc, V, loss_scale, &ls, &nt)))
            break;
        total += ls;
        ntot += nt;
        if (backward) {
            if ((st = be->matmul(be, 0, 0, nc, C, V, 1.0f, w->logits, be->act_dtype, V, m->out_w, be->weight_dtype, C, 0.0f, w->dxn,
                                 be->act_dtype, C)))
                break;
            if ((st = be->rmsnorm_bwd(be, OFF(w->dx, n0 * C), w->dxn, xf, m->final_ln, w->rstdf, nc, C))) break;
        }
    }
out_lab:
    free(lab_host);
    if (st) goto out;
    if (loss_sum) *loss_sum = total;
    if (n_targets) *n_targets = logits_out ? nlab : ntot;
    if (backward) {
        for (int l = c->L - 1; l >= 0; l--) {
            acts *a = &w->A[ckpt ? 0 : l];
            if (ckpt && (st = layer_fwd(&cx, l, w->xs[l], a, w->xs[l + 1]))) break;
            if ((st = layer_bwd(&cx, l, w->xs[l], a))) break;
        }
    }
    if (!st) st = be->sync(be);
out:
    ws_free(w);
    return st;
}

glm_status glm_model_step(glm_model *m, glm_lora *lora, const glm_batch *batch, float loss_scale, int backward,
                          int grad_checkpointing, uint64_t dropout_seed, double *loss_sum, int64_t *n_targets) {
    float p = lora ? lora->dropout : 0.0f;
    return run(m, lora, batch, loss_scale, backward, grad_checkpointing, dropout_seed, p, loss_sum, n_targets, NULL);
}

glm_status glm_model_logits(glm_model *m, glm_lora *lora, const glm_batch *batch, float *logits) {
    return run(m, lora, batch, 1.0f, 0, 1, 0, 0.0f, NULL, NULL, logits);
}
