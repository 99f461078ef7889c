/* lora/model/layer.c: a GLM-4 decoder layer's forward over the backend ops (docs/design.md §3), with
 * its LoRA adapters: linear layers, the attention half, the MLP, over a glm_layer_ctx
 * (lora/model/step_internal.h), so any driver can run it: the training step, a decode loop.
 *
 * Linear layers: y = x W^T (+ bias) + scaling * dropout(x) A^T B^T. The LoRA up-projection and
 * the bias go into y first and the base GEMM accumulates onto them (beta = 1); residual linears
 * (dense, dense_4h_to_h) accumulate all three onto the residual stream. The frozen matrices go
 * through glm_base_matmul. Every token-local op runs over chunks of cx->chunk tokens; attention,
 * the one op whose inputs span the row, over all N. Every op is preceded by be->phase() so
 * `glmtune bench` can time the step by phase. */
#include "lora/model/step_internal.h"

#define OFF(p, elems) ((void *)((char *)(p) + (size_t)(elems) * cx->esz))
#define PH(x) glm_be_phase(be, (x))

/* The mask of a token is indexed by its key: cx->drop_key of its place in the whole batch (row b,
 * token t of the whole row: b * T_row + t), or that place itself without keys. The rows are cut
 * into runs of tokens whose keys follow each other, one be->dropout each: with context parallel
 * (local tokens from two chunks of each row) every rank draws the masks the unsplit step draws,
 * and with keys every layout of the rows into micro-batches and ranks draws a token's mask alike. */
glm_status glm_layer_drop_rows(const glm_layer_ctx *cx, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t rows,
                               int64_t D, int64_t row0, uint64_t stream) {
    const glm_backend *be = cx->be;
    const glm_cp_layout *cpl = cx->ring ? &cx->ring->L : NULL;
    if (!cpl && !cx->drop_key) return glm_be_dropout(be, y, ldy, x, ldx, rows, D, row0, cx->p_drop, cx->seed, stream);
    const size_t e = glm_dtype_size(be->act_dtype);
    for (int64_t n = 0; n < rows;) {
        int64_t l = row0 + n, b = l / cx->T, j = l % cx->T;
        int64_t t = cpl ? glm_cp_global(cpl, j) : j; /* in the whole row */
        int64_t run = cpl ? cpl->S - j % cpl->S : cx->T - j; /* consecutive in the whole row */
        if (run > rows - n) run = rows - n;
        /* a run stops at the row's end: context parallel's padding tokens (t in [T_row, Tp), last
         * in the row) have no key in drop_key; they take their place g as key (their outputs are
         * read by nothing: no labels, and only they attend to themselves) */
        if (t < cx->T_row && t + run > cx->T_row) run = cx->T_row - t;
        const int64_t g = b * cx->T_row + t;
        uint64_t key = (uint64_t)g;
        if (cx->drop_key && t < cx->T_row) {
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

const glm_weight *glm_layer_base_weight(const glm_layer_weights *lw, glm_linear lin) {
    switch (lin) {
    case GLM_LIN_QKV: return &lw->wqkv;
    case GLM_LIN_DENSE: return &lw->wo;
    case GLM_LIN_H4H: return &lw->w1;
    default: return &lw->w2;
    }
}

/* Rows of the whole [N, in] matrix starting at row0, so chunks and recomputation draw the same mask. */
glm_status glm_layer_lora_input(const glm_layer_ctx *cx, const glm_lora_site *s, const void *x, int64_t in, int64_t rows,
                                int64_t row0, const void **xin) {
    *xin = x;
    if (cx->p_drop > 0) {
        GLM_TRY(glm_layer_drop_rows(cx, cx->lora_drop, in, x, in, rows, in, row0, (uint64_t)s->layer * 8 + s->module));
        *xin = cx->lora_drop;
    }
    return GLM_OK;
}

/* The forward writes the kept u, the backward's dB reads it instead of computing u again: one
 * read of the adapter's input fewer a site. */
void *glm_layer_kept_u(const glm_layer_ctx *cx, int layer, glm_linear lin, int64_t *ld) {
    const glm_lora *L = cx->lora;
    if (!cx->acts || !cx->acts->lora_u || !L) return NULL;
    int64_t before = 0, n = 0;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        const glm_linear sl = L->sites[L->layer_first[layer] + k].lin;
        before += sl < lin;
        n += sl == lin;
    }
    *ld = n * L->r;
    return OFF(cx->acts->lora_u, before * cx->N * L->r);
}

/* y[:, site rows] = beta * y0 + scaling * dropout(x) A^T B^T for every adapter on (layer, lin);
 * y0 (row stride ldy) is y itself when NULL. u goes to the layer's kept u (glm_layer_kept_u) or
 * the chunk buffer. */
static glm_status lora_up(const glm_layer_ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows,
                          int64_t row0, void *y, int64_t ldy, float beta, const void *y0) {
    const glm_backend *be = cx->be;
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
    void *ku = glm_layer_kept_u(cx, layer, lin, &ldk);
    if (n > 1 && cx->lora_stacked && cx->p_drop == 0) {
        /* the adapters share the input: u = x [A_1; ...; A_n]^T in one GEMM (the copies are stacked) */
        const int64_t ldu = (int64_t)n * r;
        void *u = ku ? OFF(ku, row0 * ldu) : cx->lora_u;
        GLM_TRY(glm_be_matmul(be, 0, 1, rows, ldu, in, 1.0f, x, ad, in, cx->lora_A[first], ad, in, 0.0f, u, ad, ldu));
        int j = 0;
        for (int k = 0; k < L->layer_count[layer]; k++) {
            int si = L->layer_first[layer] + k;
            const glm_lora_site *s = &L->sites[si];
            if (s->lin != lin) continue;
            GLM_TRY(glm_be_matmul_from(be, 0, 1, rows, s->out, r, L->scaling, OFF(u, j * r), ad, ldu, cx->lora_B[si], ad, r,
                                       beta, y0 ? OFF(y0, s->row0) : NULL, OFF(y, s->row0), ad, ldy));
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
        void *u = ku ? OFF(ku, row0 * ldk + j * r) : cx->lora_u;
        GLM_TRY(glm_layer_lora_input(cx, s, x, in, rows, row0, &xin));
        GLM_TRY(glm_be_matmul(be, 0, 1, rows, r, in, 1.0f, xin, ad, in, cx->lora_A[si], ad, in, 0.0f, u, ad, ldu));
        GLM_TRY(glm_be_matmul_from(be, 0, 1, rows, s->out, r, L->scaling, u, ad, ldu, cx->lora_B[si], ad, r, beta,
                                   y0 ? OFF(y0, s->row0) : NULL, OFF(y, s->row0), ad, ldy));
        j++;
    }
    return GLM_OK;
}

/* y [rows, out] (row stride ldy) = x W^T (+ bias) + LoRA, or with residual != 0 y = res + all of
 * it, res [rows, out] (row stride ldy) the residual stream's input, or y itself when NULL. x
 * [rows, in] act; rows start at row `row0` of the call's N tokens. When the adapters cover every
 * output row, LoRA's up-projection reads res and writes y in one GEMM (no copy of res); else res
 * is copied first. */
static glm_status linear_fwd(const glm_layer_ctx *cx, int layer, glm_linear lin, const void *x, int64_t in, int64_t rows,
                             int64_t row0, void *y, int64_t ldy, int64_t out, int residual, const void *res) {
    const glm_backend *be = cx->be;
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
        return glm_base_matmul(be, 0, rows, x, in, glm_layer_base_weight(lw, lin), 1.0f, y, ldy);
    }
    PH(GLM_PHASE_GEMM);
    GLM_TRY(glm_base_matmul(be, 0, rows, x, in, glm_layer_base_weight(lw, lin), residual ? 1.0f : 0.0f, y, ldy));
    if (bias) {
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_add_bias(be, y, ldy, bias, rows, out));
    }
    if (n) GLM_TRY(lora_up(cx, layer, lin, x, in, rows, row0, y, ldy, 1.0f, NULL));
    return GLM_OK;
}

glm_status glm_layer_attn_fwd(const glm_layer_ctx *cx, int l, const void *x_in, void *x_mid) {
    const glm_model *m = cx->m;
    const glm_config *c = &m->cfg;
    const glm_backend *be = cx->be;
    const glm_layer_weights *lw = cx->lw;
    const glm_layer_acts *b = cx->acts;
    const int keep = b->pol == GLM_CKPT_NONE;
    int64_t N = cx->N, C = c->C, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, Dqkv = qd + 2 * kd;
    const int64_t mc = cx->chunk;
    GLM_FOR_CHUNKS(n0, rows, N, mc) {
        void *xn = keep ? OFF(b->xn1, n0 * C) : cx->xn_c;
        float *rs = keep ? b->rstd1 + n0 : cx->rstd_c;
        PH(GLM_PHASE_ELEMENTWISE);
        GLM_TRY(glm_be_rmsnorm_fwd(be, xn, rs, OFF(x_in, n0 * C), lw->ln1, rows, C, c->eps));
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_QKV, xn, C, rows, n0, OFF(b->qkv, n0 * Dqkv), Dqkv, Dqkv, 0, NULL));
    }
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(glm_be_rope(be, b->qkv, Dqkv, cx->pos, N, c->H + c->Hkv, c->Dh, c->rope_dim, m->inv_freq, 0));
    PH(GLM_PHASE_ATTN_FWD);
    if (cx->attn) /* the driver's (a KV cache) */
        GLM_TRY(cx->attn(cx->attn_user, l, b->qkv, Dqkv, b->o, qd, b->lse));
    else if (cx->ring) /* context parallel: the ring over the group (lora/model/ring_attention.h) */
        GLM_TRY(glm_ring_attention_fwd(cx->ring, b->o, qd, b->lse, b->qkv, Dqkv, OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd),
                                       Dqkv));
    else
        GLM_TRY(glm_be_attention_fwd(be, b->o, qd, b->lse, b->qkv, Dqkv, OFF(b->qkv, qd), Dqkv, OFF(b->qkv, qd + kd), Dqkv,
                                     cx->doc, cx->B, cx->T, c->H, c->Hkv, c->Dh));
    GLM_FOR_CHUNKS(n0, rows, N, mc) /* x_mid = x_in + dense(o) */
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_DENSE, OFF(b->o, n0 * qd), qd, rows, n0, OFF(x_mid, n0 * C), C, C, 1,
                           OFF(x_in, n0 * C)));
    return GLM_OK;
}

glm_status glm_layer_mlp_in(const glm_layer_ctx *cx, int l, const void *x_mid, int64_t n0, int64_t rows, void **xn2,
                            float **rstd2, void **h, void **a) {
    const glm_config *c = &cx->m->cfg;
    const glm_backend *be = cx->be;
    const glm_layer_acts *b = cx->acts;
    const int keep = b->pol == GLM_CKPT_NONE;
    int64_t C = c->C, F = c->F;
    *xn2 = keep ? OFF(b->xn2, n0 * C) : cx->xn_c;
    *rstd2 = keep ? b->rstd2 + n0 : cx->rstd_c;
    *h = keep ? OFF(b->h, n0 * 2 * F) : cx->h_c;
    *a = keep ? OFF(b->a, n0 * F) : cx->a_c;
    PH(GLM_PHASE_ELEMENTWISE);
    GLM_TRY(glm_be_rmsnorm_fwd(be, *xn2, *rstd2, OFF(x_mid, n0 * C), cx->lw->ln2, rows, C, c->eps));
    GLM_TRY(linear_fwd(cx, l, GLM_LIN_H4H, *xn2, C, rows, n0, *h, 2 * F, 2 * F, 0, NULL));
    PH(GLM_PHASE_ELEMENTWISE);
    return glm_be_swiglu_fwd(be, *a, *h, rows, F);
}

glm_status glm_layer_fwd(const glm_layer_ctx *cx, int l, const void *x_in, void *x_out) {
    const glm_config *c = &cx->m->cfg;
    void *xm = cx->acts->x_mid ? cx->acts->x_mid : x_out;
    GLM_TRY(glm_layer_attn_fwd(cx, l, x_in, xm));
    int64_t C = c->C, F = c->F, mc = cx->chunk;
    GLM_FOR_CHUNKS(n0, rows, cx->N, mc) {
        void *xn2, *h, *a;
        float *rstd2;
        GLM_TRY(glm_layer_mlp_in(cx, l, xm, n0, rows, &xn2, &rstd2, &h, &a));
        /* x_out = x_mid + dense_4h_to_h(a) (in place when x_mid is x_out) */
        GLM_TRY(linear_fwd(cx, l, GLM_LIN_4HH, a, F, rows, n0, OFF(x_out, n0 * C), C, C, 1, OFF(xm, n0 * C)));
    }
    return GLM_OK;
}
