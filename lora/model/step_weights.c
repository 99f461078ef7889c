/* lora/model/step_weights.c: the frozen base's working copies for the training step (struct
 * glm_wslots, lora/model/step_internal.h): a --shard-base model's layers all-gathered into two
 * slots (the next one prefetched while the current one computes) and its embedding / output layer
 * into a third; a 4-bit layer dequantized into the dense slot just before it runs (once per
 * forward, recomputation and backward of that layer); an fp8 layer's codes transposed into their
 * slot just before its backward (the input gradients' FP8 GEMMs read them K-contiguous). */
#include <string.h>

#include "kernels/comm.h"
#include "lora/model/step_internal.h"

void glm_wslots_layout(const glm_model *m, struct glm_ws *w) {
    glm_wslots *g = &w->W;
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
    g->slot[0] = GLM_WB(w, GLM_BUF_WGATHER);
    g->slot[1] = w->buf[GLM_BUF_WGATHER] && w->plan.buf[GLM_BUF_WGATHER].count > 1 ? w->buf[GLM_BUF_WGATHER][1] : NULL;
    g->big = GLM_WB(w, GLM_BUF_WGATHER_BIG);
    g->dense = GLM_WB(w, GLM_BUF_WDENSE);
    g->trans = GLM_WB(w, GLM_BUF_WTRANS);
}

static glm_weight *mat_of(glm_layer_weights *lw, int i) {
    return i == 0 ? &lw->wqkv : i == 1 ? &lw->wo : i == 2 ? &lw->w1 : &lw->w2;
}

glm_status glm_wslots_gather_start(glm_model *m, struct glm_ws *w, int l) {
    glm_wslots *g = &w->W;
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
    glm_wslots *g = &w->W;
    const glm_backend *be = m->be;
    if (!g->sharded) {
        *out = &m->layers[l];
        return GLM_OK;
    }
    GLM_TRY(glm_wslots_gather_start(m, w, l));
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
        d->n = glm_weight_whole_elems(d); /* the gathered stored array (its padding past the end unused) */
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
    glm_wslots *g = &w->W;
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

glm_status glm_wslots_layer(glm_model *m, struct glm_ws *w, int l, int backward, const glm_layer_weights **out) {
    glm_wslots *g = &w->W;
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
        q.n = glm_weight_whole_elems(s); /* rows x cols, or a segmented weight's stored array */
        memset(d, 0, sizeof *d);
        d->fmt = be->act_dtype == GLM_DT_BF16 ? GLM_WF_BF16 : GLM_WF_F32;
        d->rows = s->rows;
        d->cols = s->cols;
        d->n = d->rows * d->cols;
        d->data = (char *)g->dense + g->dense_off[i];
        GLM_TRY(glm_be_weight_dequantize(be, d->data, be->act_dtype, &q));
    }
    g->dense_layer = l;
    *out = v;
    return GLM_OK;
}

glm_status glm_wslots_big_start(glm_model *m, struct glm_ws *w, int what) {
    glm_wslots *g = &w->W;
    if (g->big_what == what) return GLM_OK;
    if (g->big_req >= 0) { /* the other one still in flight: it must land before being overwritten */
        GLM_TRY(glm_comm_wait(m->be, g->big_req));
        g->big_req = -1;
    }
    g->big_what = what;
    return glm_comm_all_gather_start(m->be, g->big, what == 1 ? m->embed.data : m->out_w.data, g->big_shard_b, &g->big_req);
}

glm_status glm_wslots_big(glm_model *m, struct glm_ws *w, int what, const glm_weight **out) {
    glm_wslots *g = &w->W;
    const glm_weight *whole = what == 1 ? &m->embed : &m->out_w;
    if (!g->sharded) {
        *out = whole;
        return GLM_OK;
    }
    GLM_TRY(glm_wslots_big_start(m, w, what));
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

