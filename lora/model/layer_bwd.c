/* lora/model/layer_bwd.c: a GLM-4 decoder layer's backward to its input and to its LoRA weights,
 * over a glm_layer_ctx (lora/model/step_internal.h): the MLP chunk by chunk (its inputs
 * recomputed unless the layer keeps them), then the attention half (recomputed first for a FULL
 * layer), then query_key_value and input_layernorm chunk by chunk. */
#include "lora/model/step_internal.h"

#define OFF(p, elems) ((void *)((char *)(p) + (size_t)(elems) * cx->esz))
#define PH(x) glm_be_phase(be, (x))

/* dx [rows, in] = dy W plus the LoRA input gradient (OVERWRITES dx); ACCUMULATES the LoRA weight
 * grads. dy [rows, out] act with row stride ldy; x is the linear's forward input [rows, in].
 * The base GEMM writes dx and the rank-r GEMM du A adds onto it. (The other order, LoRA's input
 * gradient first and the base GEMM accumulating with beta 1, reads dx once less but made the base
 * GEMMs 7-10 ms slower a 9B step at 8k than the pass it saved: docs/bench/2026-12-05-h200.md.)
 * defer (may be NULL): when one adapter covers the linear and there is no dropout, du A is not
 * added here but described in *defer (du in cx->lora_du, valid until the next linear_bwd) for the
 * op that reads dx next to add inside (be->swiglu_bwd): a pass over dx fewer; else defer->u = NULL. */
static glm_status linear_bwd(const glm_layer_ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows,
                             int64_t row0, const void *dy, int64_t ldy, int64_t out, void *dx, glm_rank_term *defer) {
    const glm_backend *be = cx->be;
    glm_dtype ad = be->act_dtype;
    (void)out;
    if (defer) defer->u = NULL;
    PH(GLM_PHASE_GEMM);
    GLM_TRY(glm_base_matmul(be, 1, rows, dy, ldy, glm_layer_base_weight(cx->lw, lin), 0.0f, dx, in));
    glm_lora *L = cx->lora;
    if (!L) return GLM_OK;
    const int r = L->r;
    PH(GLM_PHASE_LORA);
    int64_t ldk = 0;
    void *ku = glm_layer_kept_u(cx, layer, lin, &ldk);
    int nsites = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) nsites += L->sites[L->layer_first[layer] + k].lin == lin;
    const int deferred = defer && nsites == 1 && cx->p_drop == 0;
    void *du = cx->lora_du, *drop = cx->lora_drop;
    int j = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        int si = L->layer_first[layer] + k;
        const glm_lora_site *s = &L->sites[si];
        if (s->lin != lin) continue;
        glm_param *A = &L->params[s->pa], *Bp = &L->params[s->pb];
        const void *dys = OFF(dy, s->row0), *xin;
        GLM_TRY(glm_layer_lora_input(cx, s, x, in, rows, row0, &xin));
        /* u [rows, r] = dropout(x) A^T: kept from the forward in keep layers, else computed again
           (the layers that recompute keep nothing for the backward) */
        const void *u = ku ? OFF(ku, row0 * ldk + (j++) * r) : cx->lora_u;
        const int64_t ldu = ku ? ldk : r;
        if (!ku)
            GLM_TRY(glm_be_matmul(be, 0, 1, rows, r, in, 1.0f, xin, ad, in, cx->lora_A[si], ad, in, 0.0f, cx->lora_u, ad, r));
        /* dB [out, r] += scaling dy^T u */
        GLM_TRY(glm_be_matmul(be, 1, 0, s->out, r, rows, L->scaling, dys, ad, ldy, u, ad, ldu, 1.0f, Bp->g, GLM_DT_F32, r));
        /* du [rows, r] = scaling dy B */
        GLM_TRY(glm_be_matmul(be, 0, 0, rows, r, s->out, L->scaling, dys, ad, ldy, cx->lora_B[si], ad, r, 0.0f, du, ad, r));
        /* dA [r, in] += du^T dropout(x) */
        GLM_TRY(glm_be_matmul(be, 1, 0, r, in, rows, 1.0f, du, ad, r, xin, ad, in, 1.0f, A->g, GLM_DT_F32, in));
        /* dx += dropout_bwd(du A) */
        if (cx->p_drop > 0) {
            uint64_t stream = (uint64_t)layer * 8 + s->module;
            GLM_TRY(glm_be_matmul(be, 0, 0, rows, in, r, 1.0f, du, ad, r, cx->lora_A[si], ad, in, 0.0f, drop, ad, in));
            GLM_TRY(glm_layer_drop_rows(cx, drop, in, drop, in, rows, in, row0, stream));
            GLM_TRY(glm_be_axpy(be, dx, drop, 1.0f, rows * in));
        } else if (deferred) {
            *defer = (glm_rank_term){du, r, cx->lora_A[si], r, 1.0f};
        } else {
            GLM_TRY(glm_be_matmul(be, 0, 0, rows, in, r, 1.0f, du, ad, r, cx->lora_A[si], ad, in, 1.0f, dx, ad, in));
        }
    }
    return GLM_OK;
}

glm_status glm_layer_bwd(const glm_layer_ctx *cx, int l, const void *x_in) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = cx->be;
    const glm_layer_weights *lw = cx->lw;
    const glm_layer_bwd_bufs *wb = cx->bwd;
    if (cx->attn || !wb)
        return glm_err(GLM_ERR_ARG, "layer backward: %s", cx->attn ? "not through a driver's attention (a KV cache)"
                                                                    : "no backward buffers");
    int64_t N = cx->N, C = c->C, F = c->F, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    const int64_t mc = cx->chunk;
    void *dx = wb->dx, *xmid_buf = wb->xmid, *dqkv = wb->dqkv, *dxn = wb->dxn_c;
    const glm_layer_acts *b = cx->acts;
    const int keep = b->pol == GLM_CKPT_NONE;
    /* dout_over_out (lora/model/plan.h): a full layer's recomputed x_mid in the d_qkv buffer, which
       the attention backward overwrites only once x_mid is dead */
    const int lean = wb->dout_over_out;
    void *xm = b->x_mid ? b->x_mid : lean ? dqkv : xmid_buf;
    if (b->pol == GLM_CKPT_FULL) GLM_TRY(glm_layer_attn_fwd(cx, l, x_in, xm)); /* recompute the attention half */
    /* the MLP, chunk by chunk (recomputing its inputs unless the layer keeps them) */
    GLM_FOR_CHUNKS(n0, rows, N, mc) {
        void *xn2, *h, *a;
        float *rstd2;
        if (keep) {
            xn2 = OFF(b->xn2, n0 * C);
            rstd2 = b->rstd2 + n0;
            h = OFF(b->h, n0 * 2 * F);
            a = OFF(b->a, n0 * F);
        } else {
            GLM_TRY(glm_layer_mlp_in(cx, l, xm, n0, rows, &xn2, &rstd2, &h, &a));
        }
        void *dyc = OFF(dx, n0 * C);
        glm_rank_term du_a; /* dense_4h_to_h's LoRA input gradient, added inside the SwiGLU backward */
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_4HH, a, F, rows, n0, dyc, C, C, wb->da_c, &du_a));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_swiglu_bwd(be, wb->dh_c, wb->da_c, h, rows, F, du_a.u ? &du_a : NULL));
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_H4H, xn2, C, rows, n0, wb->dh_c, 2 * F, 2 * F, dxn, NULL));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_rmsnorm_bwd(be, dyc, dxn, OFF(xm, n0 * C), lw->ln2, rstd2, rows, C));
    }
    /* the attention half: d_o into the x_mid buffer (the recomputed x_mid is dead now); or, with
       dout_over_out, each chunk of d_o into a chunk buffer, D = rowsum(d_o * o) from it and o's
       chunk, then d_o over o's chunk (the dense LoRA's gradient has read o by then) */
    void *d_o = xmid_buf, *D = NULL;
    const void *o_bwd = b->o;
    if (lean) {
        void *dc = wb->dh_c;
        D = wb->attn_d;
        GLM_FOR_CHUNKS(n0, rows, N, mc) {
            GLM_TRY(linear_bwd(cx, l, GLM_LIN_DENSE, OFF(b->o, n0 * qd), qd, rows, n0, OFF(dx, n0 * C), C, C, dc, NULL));
            PH(GLM_PHASE_ATTN_BWD);
            GLM_TRY(glm_be_attention_delta(be, D, dc, qd, OFF(b->o, n0 * qd), qd, n0, rows, cx->T, c->H, c->Dh));
            PH(GLM_PHASE_ELEMENTWISE);
            GLM_TRY(glm_be_copy(be, OFF(b->o, n0 * qd), dc, (size_t)(rows * qd) * cx->esz));
        }
        d_o = b->o;
        o_bwd = NULL;
    } else {
        GLM_FOR_CHUNKS(n0, rows, N, mc)
            GLM_TRY(linear_bwd(cx, l, GLM_LIN_DENSE, OFF(b->o, n0 * qd), qd, rows, n0, OFF(dx, n0 * C), C, C, OFF(d_o, n0 * qd),
                               NULL));
    }
    PH(GLM_PHASE_ATTN_BWD);
    if (cx->ring)
        GLM_TRY(glm_ring_attention_bwd(cx->ring, dqkv, Dqkv, OFF(dqkv, qd), Dqkv, OFF(dqkv, qd + kd), Dqkv, d_o, qd, b->o, b->lse,
                                       b->qkv, OFF(b->qkv, qd), OFF(b->qkv, qd + kd)));
    else
        GLM_TRY(glm_be_attention_bwd(be, dqkv, OFF(dqkv, qd), OFF(dqkv, qd + kd), d_o, qd, o_bwd, b->lse, D, b->qkv, Dqkv,
                                     OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd), Dqkv, cx->doc, cx->B, cx->T, c->H, c->Hkv,
                                     c->Dh));
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(glm_be_rope(be, dqkv, Dqkv, cx->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 1));
    /* query_key_value and input_layernorm, chunk by chunk (xn1 recomputed unless kept) */
    GLM_FOR_CHUNKS(n0, rows, N, mc) {
        void *xn1 = keep ? OFF(b->xn1, n0 * C) : cx->xn_c;
        float *rstd1 = keep ? b->rstd1 + n0 : cx->rstd_c;
        if (!keep) {
            PH(GLM_PHASE_ELEMENTWISE);
            GLM_TRY(glm_be_rmsnorm_fwd(be, xn1, rstd1, OFF(x_in, n0 * C), lw->ln1, rows, C, c->eps));
        }
        GLM_TRY(linear_bwd(cx, l, GLM_LIN_QKV, xn1, C, rows, n0, OFF(dqkv, n0 * Dqkv), Dqkv, Dqkv, dxn, NULL));
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_rmsnorm_bwd(be, OFF(dx, n0 * C), dxn, OFF(x_in, n0 * C), lw->ln1, rstd1, rows, C));
    }
    return GLM_OK;
}
