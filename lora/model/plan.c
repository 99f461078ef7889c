/* lora/model/plan.c: the memory planner (lora/model/plan.h). It sizes every buffer of a training step
 * (glm_plan.buf); the model's workspace (lora/model/step_ws.c) allocates exactly those, so the plan is
 * the one place a size is decided. The host's memory: plan_host.c; the longest-row search: plan_search.c;
 * the printed plan: plan_print.c. */
#include "lora/model/plan.h"

#include "common/log.h"
#include "common/meminfo.h"
#include "lora/model/family.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *glm_ckpt_name(glm_ckpt_mode m) {
    switch (m) {
    case GLM_CKPT_NONE: return "none";
    case GLM_CKPT_FULL: return "full";
    case GLM_CKPT_SELECTIVE: return "selective";
    default: return "auto";
    }
}

glm_status glm_ckpt_parse(const char *s, glm_ckpt_mode *out) {
    if (!s) return glm_err(GLM_ERR_ARG, "gradient checkpointing: no value");
    /* any case: YAML written for Python says True / False */
    if (!strcasecmp(s, "none") || !strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "off") || !strcasecmp(s, "no"))
        *out = GLM_CKPT_NONE;
    else if (!strcasecmp(s, "full") || !strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "on") ||
             !strcasecmp(s, "yes"))
        *out = GLM_CKPT_FULL;
    else if (!strcasecmp(s, "selective"))
        *out = GLM_CKPT_SELECTIVE;
    else if (!strcasecmp(s, "auto"))
        *out = GLM_CKPT_AUTO;
    else
        return glm_err(GLM_ERR_ARG, "--gradient-checkpointing (gradient_checkpointing) '%s' is not known; hint: auto, none, "
                       "selective or full (true = full, false = none)", s);
    return GLM_OK;
}

glm_ckpt_mode glm_plan_layer(const glm_plan *p, int l) {
    if (l < p->n_keep) return GLM_CKPT_NONE;
    if (l < p->n_keep + p->n_selective) return GLM_CKPT_SELECTIVE;
    return GLM_CKPT_FULL;
}

static double qkv_rows(const glm_config *c) { return (double)(c->H + 2 * c->Hkv) * c->Dh; }

/* xn1, qkv, o, x_mid, xn2, h, a (act) + rstd1, rstd2, lse (f32) */
double glm_plan_bytes_keep(const glm_config *c, int e) {
    double qd = (double)c->H * c->Dh;
    return e * (3.0 * c->C + qkv_rows(c) + qd + 3.0 * c->F) + 4.0 * (2 + c->H);
}

/* qkv, o, x_mid (act) + lse (f32) */
double glm_plan_bytes_selective(const glm_config *c, int e) {
    double qd = (double)c->H * c->Dh;
    return e * (qkv_rows(c) + qd + c->C) + 4.0 * c->H;
}

static const struct {
    const char *name;
    glm_buf_cat cat;
} BUFS[GLM_BUF_COUNT] = {
    [GLM_BUF_X] = {"layer inputs", GLM_BUFCAT_INPUTS},
    [GLM_BUF_XSLOT] = {"layer inputs (device slots of the offloaded ones)", GLM_BUFCAT_INPUTS},
    [GLM_BUF_KEEP_QKV] = {"kept qkv", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_O] = {"kept attention output", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_XMID] = {"kept residual after attention", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_LSE] = {"kept lse", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_XN1] = {"kept xn1", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_XN2] = {"kept xn2", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_H] = {"kept MLP h", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_A] = {"kept MLP a", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_RSTD1] = {"kept rstd1", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_RSTD2] = {"kept rstd2", GLM_BUFCAT_KEPT},
    [GLM_BUF_KEEP_LORA_U] = {"kept lora u", GLM_BUFCAT_KEPT},
    [GLM_BUF_QKV] = {"qkv", GLM_BUFCAT_WORKING},
    [GLM_BUF_O] = {"attention output", GLM_BUFCAT_WORKING},
    [GLM_BUF_LSE] = {"lse", GLM_BUFCAT_WORKING},
    [GLM_BUF_XMID] = {"x_mid / d_o", GLM_BUFCAT_WORKING},
    [GLM_BUF_DX] = {"dx", GLM_BUFCAT_WORKING},
    [GLM_BUF_DQKV] = {"d_qkv", GLM_BUFCAT_WORKING},
    [GLM_BUF_ATTN_D] = {"attention D = rowsum(d_o * o)", GLM_BUFCAT_WORKING},
    [GLM_BUF_XN_C] = {"norm output chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_RSTD_C] = {"rstd chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_H_C] = {"MLP h chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_A_C] = {"MLP a chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_DA_C] = {"MLP d_a chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_DH_C] = {"MLP d_h chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_DXN_C] = {"d_xn chunk", GLM_BUFCAT_WORKING},
    [GLM_BUF_LORA_U] = {"lora u", GLM_BUFCAT_WORKING},
    [GLM_BUF_LORA_DU] = {"lora du", GLM_BUFCAT_WORKING},
    [GLM_BUF_LORA_DROP] = {"lora dropout copy", GLM_BUFCAT_WORKING},
    [GLM_BUF_LORA_COPIES] = {"lora act-dtype copies", GLM_BUFCAT_WEIGHTS},
    [GLM_BUF_LOSS_XN] = {"final norm chunk", GLM_BUFCAT_LOSS},
    [GLM_BUF_LOSS_RSTD] = {"final rstd chunk", GLM_BUFCAT_LOSS},
    [GLM_BUF_LOSS_LOGITS] = {"logits chunk", GLM_BUFCAT_LOSS},
    [GLM_BUF_LOSS_DXN] = {"loss dxn chunk", GLM_BUFCAT_LOSS},
    [GLM_BUF_BATCH] = {"batch ids / pos / doc / labels", GLM_BUFCAT_WORKING},
    [GLM_BUF_RING_KV] = {"ring K|V block", GLM_BUFCAT_RING},
    [GLM_BUF_RING_DKV] = {"ring dK|dV accumulator", GLM_BUFCAT_RING},
    [GLM_BUF_RING_ACC] = {"ring output / dQ accumulator", GLM_BUFCAT_RING},
    [GLM_BUF_RING_LSE] = {"ring lse accumulator", GLM_BUFCAT_RING},
    [GLM_BUF_RING_GDOC] = {"the rows' document ids", GLM_BUFCAT_RING},
    [GLM_BUF_WGATHER] = {"gathered layer weights", GLM_BUFCAT_WEIGHTS},
    [GLM_BUF_WGATHER_BIG] = {"gathered embedding / output layer", GLM_BUFCAT_WEIGHTS},
    [GLM_BUF_WDENSE] = {"dequantized layer weights", GLM_BUFCAT_WEIGHTS},
    [GLM_BUF_WTRANS] = {"transposed fp8 layer weights", GLM_BUFCAT_WEIGHTS},
    [GLM_BUF_BACKEND] = {"backend scratch", GLM_BUFCAT_WORKING},
};

const char *glm_buf_name(glm_buf_id id) { return id >= 0 && id < GLM_BUF_COUNT ? BUFS[id].name : "?"; }
glm_buf_cat glm_buf_category(glm_buf_id id) { return id >= 0 && id < GLM_BUF_COUNT ? BUFS[id].cat : GLM_BUFCAT_WORKING; }

int glm_plan_x_in_slot(const glm_plan *p, int L, int l) { return p->n_host > 0 && (l < p->n_host || l == L); }

static void setb(glm_plan *p, glm_buf_id id, double bytes, int count) {
    p->buf[id].bytes = count > 0 ? ceil(fmax(bytes, 16.0) / 256.0) * 256.0 : 0;
    p->buf[id].count = count > 0 ? count : 0;
}

static double bufs_of(const glm_plan *p, glm_buf_cat cat) {
    double t = 0;
    for (int i = 0; i < GLM_BUF_COUNT; i++)
        if (BUFS[i].cat == cat) t += p->buf[i].bytes * p->buf[i].count;
    return t;
}

glm_wsegs glm_plan_qkv_segs(const glm_config *c, glm_wformat f) {
    glm_wsegs s = {0, {0, 0, 0}};
    if (!glm_wformat_packed(f) || glm_family_get(c->layout)->qkv_fused) return s;
    s.n = 3;
    s.rows[0] = (int64_t)c->H * c->Dh;
    s.rows[1] = s.rows[2] = (int64_t)c->Hkv * c->Dh;
    return s;
}

/* The linear matrices of a layer: query_key_value, dense, dense_h_to_4h, dense_4h_to_h (elements, and
 * their rows: the output features). */
static void layer_mats(const glm_config *c, int64_t mats[4], int64_t rows[4]) {
    int64_t C = c->C, qd = (int64_t)c->H * c->Dh, F = c->F, qkv = (int64_t)qkv_rows(c);
    mats[0] = qkv * C, rows[0] = qkv;
    mats[1] = C * qd, rows[1] = C;
    mats[2] = 2 * F * C, rows[2] = 2 * F;
    mats[3] = C * F, rows[3] = C;
}

static glm_wformat linear_format(const glm_plan_opts *o, int wb) {
    if (glm_wformat_quantized(o->base_format)) return o->base_format;
    return wb == 2 ? GLM_WF_BF16 : GLM_WF_F32;
}

/* The base weights a rank holds (whole, or with --shard-base over W ranks its shard of each matrix:
 * embedding, output layer, per layer query_key_value, dense, dense_h_to_4h, dense_4h_to_h; the norms
 * and the bias whole), and the working copies: gather slots (two layers' four matrices in their
 * stored format and one [V, C]) with sharding, one layer dequantized to act dtype with a 4-bit base,
 * one layer's codes transposed for the backward with an fp8 base (1 byte per weight and an f32 scale
 * per row). The model allocates the same (lora/model/model.c, lora/model/step_weights.c) from glm_weight_bytes and
 * glm_weight_matrix_bytes. */
static double base_bytes(const glm_config *c, const glm_plan_opts *o, int wb, int e, int W, glm_plan *p) {
    int64_t mats[4], rows[4];
    layer_mats(c, mats, rows);
    const glm_wformat lf = linear_format(o, wb), df = wb == 2 ? GLM_WF_BF16 : GLM_WF_F32;
    const int fp8 = lf == GLM_WF_FP8_E4M3;
    double layer = 0, slot = 0, dense = 0, trans = 0;
    const glm_wsegs qs = glm_plan_qkv_segs(c, lf);
    for (int i = 0; i < 4; i++) { /* query_key_value: its stored elements and one offset a segment (hf: 3) */
        const glm_wsegs *sg = i == 0 ? &qs : NULL;
        int64_t sn = glm_weight_shard_elems(lf, glm_weight_stored_elems(lf, sg, rows[i], mats[i] / rows[i]), W);
        glm_weight_bytes_t b = glm_weight_seg_bytes(lf, sn, o->double_quant, sg);
        layer += (double)b.data + (double)b.absmax + (double)b.absmax2 + (double)b.offset + (fp8 ? 4.0 * rows[i] : 0.0);
        slot += glm_weight_slot_bytes(lf, sn * (W > 1 ? W : 1), o->double_quant);
        dense += glm_weight_slot_bytes(e == 2 ? GLM_WF_BF16 : GLM_WF_F32, mats[i], 0);
        trans += glm_weight_slot_bytes(GLM_WF_FP8_E4M3, mats[i], 0);
    }
    int64_t vs = glm_weight_shard_elems(df, (int64_t)c->V * c->C, W);
    double vc = glm_weight_total_bytes(df, vs, 0);
    double small = wb * (c->C + c->L * (2.0 * c->C + (c->qkv_bias ? qkv_rows(c) : 0)));
    setb(p, GLM_BUF_WGATHER, slot, W > 1 ? 2 : 0);
    setb(p, GLM_BUF_WGATHER_BIG, glm_weight_slot_bytes(df, vs * W, 0), W > 1 ? 1 : 0);
    setb(p, GLM_BUF_WDENSE, dense, glm_wformat_packed(lf) ? 1 : 0);
    setb(p, GLM_BUF_WTRANS, trans, fp8 && p->backward ? 1 : 0);
    return 2.0 * vc + small + c->L * layer;
}

/* The backend's scratch for a step when it does not say (a dry run without a GPU): what the CUDA
 * backend's scratch_need answers (kernels/cuda/memory.cu, attention_ragged.cu), slot by slot:
 * attention's D (4 bytes per query head) and document bounds (8 per token); cuDNN's backward
 * workspace for whole rows (8 bytes per query element, measured with cuDNN 9.19: 4.02 GiB at
 * 131072 x 4096), its lse copies and document runs; the FP8 GEMM's blocks; the loss reduction (8
 * bytes for each of at most 2048 rows). cuBLASLt's workspace is part of the CUDA overhead a dry run
 * takes off the budget (GLM_DRY_CUDA_OVERHEAD_GIB), not of the scratch. */
static double scratch_estimate(const glm_config *c, double N, int backward, int e, int cp, int fp8, double *attn_ws) {
    double qd = (double)c->H * c->Dh, H = c->H, b = 8.0 * 2048;
    *attn_ws = 0;
    if (e != 2) return 0;
    if (fp8) b += GLM_FP8_SCRATCH_BYTES;
    if (!backward) return b + 8 * N;
    b += 4 * N * H + 8 * N;
    if (!cp) {
        *attn_ws = 8 * N * qd;
        b += 8 * N * qd + 8 * N * H + 4 * N;
    }
    return b;
}

/* Sets every buffer of plan p (its B, T, N, cp, chunks, policy and n_host already set) for the
 * options o, and the totals. */
static void size_bufs(const glm_config *c, const glm_lora_info *li, const glm_plan_opts *o, int e, glm_plan *p) {
    const int L = c->L, backward = p->backward, cp = p->cp;
    const double N = (double)p->N, C = c->C, F = c->F, H = c->H, qd = (double)c->H * c->Dh, Dqkv = qkv_rows(c);
    const double mc = (double)p->mlp_chunk, lc = (double)p->loss_chunk;
    const int wb = o->weight_bytes > 0 ? o->weight_bytes : e;
    const int n_attn = p->n_keep + p->n_selective, any_chunked = !backward || p->n_keep < L;
    memset(p->buf, 0, sizeof p->buf);
    /* the backend's scratch, and whether attention takes a library's workspace in it */
    double est_ws = 0, est = scratch_estimate(c, N, backward, e, cp, o->base_format == GLM_WF_FP8_E4M3, &est_ws);
    p->scratch = o->scratch > 0 ? o->scratch : o->scratch < 0 ? 0 : est;
    p->attn_ws = o->scratch > 0 ? o->attn_ws : o->scratch < 0 ? 0 : est_ws;
    if (p->attn_lean || o->no_attn_lib) { /* glmtune's attention kernels: no library workspace */
        p->scratch -= p->attn_ws;
        p->attn_ws = 0;
    }
    /* no library workspace: the attention backward runs from D (attention_delta), its output
       gradient over its output (glm_plan.dout_over_out) */
    const int lean = p->dout_over_out = backward && !cp && p->attn_ws <= 0;
    const double ea = o->acc_bytes > 0 ? o->acc_bytes : 4;
    /* layer inputs */
    if (!backward) {
        setb(p, GLM_BUF_X, N * C * e, 2);
    } else {
        int in_slots = p->n_host > 0 ? p->n_host + 1 : 0;
        setb(p, GLM_BUF_X, N * C * e, L + 1 - in_slots);
        setb(p, GLM_BUF_XSLOT, N * C * e, p->n_host > 0 ? 2 : 0);
    }
    /* kept activations */
    if (backward) {
        setb(p, GLM_BUF_KEEP_QKV, N * Dqkv * e, n_attn);
        setb(p, GLM_BUF_KEEP_O, N * qd * e, n_attn);
        setb(p, GLM_BUF_KEEP_XMID, N * C * e, n_attn);
        setb(p, GLM_BUF_KEEP_LSE, N * H * 4, n_attn);
        setb(p, GLM_BUF_KEEP_XN1, N * C * e, p->n_keep);
        setb(p, GLM_BUF_KEEP_XN2, N * C * e, p->n_keep);
        setb(p, GLM_BUF_KEEP_H, N * 2 * F * e, p->n_keep);
        setb(p, GLM_BUF_KEEP_A, N * F * e, p->n_keep);
        setb(p, GLM_BUF_KEEP_RSTD1, N * 4, p->n_keep);
        setb(p, GLM_BUF_KEEP_RSTD2, N * 4, p->n_keep);
    }
    /* row-spanning working buffers */
    const int scratch_attn = !backward || p->n_full > 0;
    setb(p, GLM_BUF_QKV, N * Dqkv * e, scratch_attn);
    setb(p, GLM_BUF_O, N * qd * e, scratch_attn);
    setb(p, GLM_BUF_LSE, N * H * 4, scratch_attn);
    setb(p, GLM_BUF_XMID, N * fmax(C, qd) * e, backward && !lean);
    setb(p, GLM_BUF_DX, N * C * e, backward);
    setb(p, GLM_BUF_DQKV, N * (lean ? fmax(Dqkv, C) : Dqkv) * e, backward);
    setb(p, GLM_BUF_ATTN_D, N * H * ea, lean);
    /* chunks */
    setb(p, GLM_BUF_XN_C, mc * C * e, any_chunked);
    setb(p, GLM_BUF_RSTD_C, mc * 4, any_chunked);
    setb(p, GLM_BUF_H_C, mc * 2 * F * e, any_chunked);
    setb(p, GLM_BUF_A_C, mc * F * e, any_chunked);
    setb(p, GLM_BUF_DA_C, mc * F * e, backward);
    setb(p, GLM_BUF_DH_C, mc * (lean ? fmax(2 * F, qd) : 2 * F) * e, backward);
    setb(p, GLM_BUF_DXN_C, mc * C * e, backward);
    p->lora = 0;
    if (li && li->r > 0) {
        double sites = li->max_sites_lin > 0 ? li->max_sites_lin : 1;
        double in = fmax((double)li->max_in_attn, (double)li->max_in_mlp);
        setb(p, GLM_BUF_LORA_U, mc * li->r * sites * e, 1);
        setb(p, GLM_BUF_KEEP_LORA_U, N * li->r * (li->max_sites_layer > 0 ? li->max_sites_layer : 1) * e,
             backward ? p->n_keep : 0);
        setb(p, GLM_BUF_LORA_DU, mc * li->r * e, backward);
        setb(p, GLM_BUF_LORA_DROP, mc * in * e, li->dropout);
        setb(p, GLM_BUF_LORA_COPIES, (double)li->params * e + 512.0 * li->n_sites + 256.0, o->lora_shadow);
        p->lora = (double)li->params * (8.0 + (o->optimizer ? 8.0 : 0.0));
    }
    /* loss head */
    setb(p, GLM_BUF_LOSS_XN, lc * C * e, 1);
    setb(p, GLM_BUF_LOSS_RSTD, lc * 4, 1);
    setb(p, GLM_BUF_LOSS_LOGITS, lc * c->V * e, 1);
    setb(p, GLM_BUF_LOSS_DXN, lc * C * e, backward);
    setb(p, GLM_BUF_BATCH, N * 4, 4 * (cp ? 1 : 2));
    if (cp) { /* the ring (lora/model/ring_attention.h) */
        const double kd2 = 2.0 * c->Hkv * c->Dh;
        setb(p, GLM_BUF_RING_KV, N * kd2 * e, 2);
        setb(p, GLM_BUF_RING_DKV, N * kd2 * ea, backward ? 2 : 0);
        setb(p, GLM_BUF_RING_ACC, N * qd * ea, 1);
        setb(p, GLM_BUF_RING_LSE, N * H * ea, 1);
        setb(p, GLM_BUF_RING_GDOC, (double)p->B * (double)p->T_padded * 4, 1);
    }
    p->weights = base_bytes(c, o, wb, e, p->shard_world, p);
    setb(p, GLM_BUF_BACKEND, p->scratch, p->scratch > 0);
    p->gathered = p->buf[GLM_BUF_WGATHER].bytes * p->buf[GLM_BUF_WGATHER].count +
                  p->buf[GLM_BUF_WGATHER_BIG].bytes * p->buf[GLM_BUF_WGATHER_BIG].count;
    p->dequant = p->buf[GLM_BUF_WDENSE].bytes * p->buf[GLM_BUF_WDENSE].count +
                 p->buf[GLM_BUF_WTRANS].bytes * p->buf[GLM_BUF_WTRANS].count;
    p->lora += p->buf[GLM_BUF_LORA_COPIES].bytes * p->buf[GLM_BUF_LORA_COPIES].count;
    p->checkpoints = bufs_of(p, GLM_BUFCAT_INPUTS);
    p->host = backward ? p->n_host * N * C * e : 0;
    p->offload = p->n_host > 0;
    p->saved = bufs_of(p, GLM_BUFCAT_KEPT);
    p->working = bufs_of(p, GLM_BUFCAT_WORKING);
    p->fixed = p->working;
    p->loss_head = bufs_of(p, GLM_BUFCAT_LOSS);
    p->ring = bufs_of(p, GLM_BUFCAT_RING);
    p->total = p->weights + p->gathered + p->dequant + p->lora + p->checkpoints + p->saved + p->working + p->loss_head +
               p->ring;
    p->fits = p->total <= o->budget;
}

/* The plan for n_host offloaded layer inputs: chunks, then the policy (AUTO: the cheapest mix of
 * keep / selective / full layers that fits). */
static void plan_once(const glm_config *c, const glm_lora_info *li, int B, int T, int backward, const glm_plan_opts *o,
                      int n_host, int lean, glm_plan *p) {
    memset(p, 0, sizeof *p);
    const int e = o->act_bytes > 0 ? o->act_bytes : 2;
    const int cp = o->cp > 1 ? o->cp : 0;
    const int64_t Tp = cp ? ((int64_t)T + 2 * cp - 1) / (2 * cp) * (2 * cp) : T, TL = cp ? Tp / cp : T;
    const double N = (double)B * TL, C = c->C, F = c->F;
    const int L = c->L;
    p->B = B;
    p->T = T;
    p->cp = cp;
    p->T_local = TL;
    p->T_padded = Tp;
    p->N = (int64_t)B * TL;
    p->backward = backward;
    p->requested = o->mode;
    p->budget = o->budget;
    p->shard_world = o->shard_world > 1 ? o->shard_world : 0;
    p->n_host = backward ? n_host : 0;
    p->attn_lean = lean;
    p->base_format = linear_format(o, o->weight_bytes > 0 ? o->weight_bytes : e);

    /* what exists whatever the chunks and the policy: the room left for them */
    p->n_keep = 0;
    p->n_selective = 0;
    p->n_full = L;
    p->mlp_chunk = p->loss_chunk = 1;
    p->attn_lean = lean;
    size_bufs(c, li, o, e, p);
    double room = o->budget - (p->total - p->working - p->loss_head);

    /* chunks: at most 2048 tokens of logits and 8192 tokens of every token-local op (GEMMs of that
     * height already run at full speed), fewer when they would take more than 1/16 (logits) or 1/8
     * (the chunk buffers) of the room left */
    int64_t lc = o->loss_chunk, mc = o->mlp_chunk;
    if (lc <= 0) {
        lc = 2048;
        double per = e * (C * (backward ? 2 : 1) + c->V) + 4;
        while (lc > 64 && lc * per > fmax(room / 16, 64.0 * 1048576)) lc /= 2;
    }
    if (lc > p->N) lc = p->N;
    if (mc <= 0) {
        mc = p->N < 8192 ? p->N : 8192;
        double per = e * (3 * C + 6 * F);
        while (mc > 512 && mc * per > fmax(room / 8, 256.0 * 1048576)) mc = (mc + 1) / 2;
    }
    if (mc > p->N) mc = p->N;
    p->mlp_chunk = mc;
    p->loss_chunk = lc;

    const double qd = (double)c->H * c->Dh;
    /* one layer's kept activations as the buffers are rounded (setb) */
#define R256(x) (ceil((x) / 256.0) * 256.0)
    const double ms = R256(N * qkv_rows(c) * e) + R256(N * qd * e) + R256(N * C * e) + R256(N * c->H * 4.0),
                 mk = ms + 2 * R256(N * C * e) + R256(N * 2 * F * e) + R256(N * F * e) + 2 * R256(N * 4.0);
#undef R256
    /* recomputation per token and layer, in FLOP: selective redoes dense_h_to_4h; full redoes
     * query_key_value, dense, dense_h_to_4h and the attention forward (4 (T/2) H Dh: QK^T and PV
     * over half the keys on average). The planner's cost weighs attention x2 (it runs at about
     * half a GEMM's rate); the reported figure counts FLOP once. */
    const double f_attn = 4.0 * (T / 2.0) * qd, f_sel = 2.0 * 2 * F * C,
                 f_full = 2.0 * (qkv_rows(c) + qd + 2 * F) * C + f_attn, f_full_cost = f_full + f_attn;
    int best_k = 0, best_s = 0;
    if (!backward) {
        best_k = best_s = 0;
    } else if (o->mode != GLM_CKPT_AUTO) {
        best_k = o->mode == GLM_CKPT_NONE ? L : 0;
        best_s = o->mode == GLM_CKPT_SELECTIVE ? L : 0;
    } else {
        int found = 0;
        double best_cost = INFINITY;
        for (int k = L; k >= 0; k--) {
            for (int pass = 0; pass < 2; pass++) { /* pass 0: no full layers; pass 1: with full layers */
                /* the bytes apart from the kept activations, for this k and whether any layer is full */
                p->n_keep = k;
                p->n_selective = pass ? 0 : L - k;
                p->n_full = L - p->n_keep - p->n_selective;
                if (pass && p->n_full == 0) continue;
                size_bufs(c, li, o, e, p);
                double left = o->budget - (p->total - p->saved) - k * mk;
                if (left < 0) continue;
                double sd = ms > 0 ? floor(left / ms) : (double)(L - k);
                int s = sd > L - k ? L - k : (int)sd; /* compared in double: a huge budget must not overflow */
                int fl = L - k - s;
                if ((fl > 0) != pass) continue;
                double cost = s * f_sel + fl * f_full_cost;
                if (cost < best_cost - 1e-9) {
                    best_cost = cost;
                    best_k = k;
                    best_s = s;
                    found = 1;
                }
            }
        }
        if (!found) { /* nothing fits: report the leanest plan */
            best_k = 0;
            best_s = 0;
        }
    }
    p->n_keep = best_k;
    p->n_selective = best_s;
    p->n_full = L - best_k - best_s;
    size_bufs(c, li, o, e, p);
    p->recompute_gflop = backward ? N * (p->n_selective * f_sel + p->n_full * f_full) / 1e9 : 0;
}

/* The plan with the fewest layer inputs in host memory that fits (none when it fits without), for
 * one attention choice; *p is the plan without offloading when none fits. */
static void plan_offload(const glm_config *c, const glm_lora_info *li, int B, int T, int backward, const glm_plan_opts *o,
                         int lean, glm_plan *p) {
    const int L = c->L;
    if (backward && o->offload) {
        plan_once(c, li, B, T, backward, o, o->offload_layers > 0 && o->offload_layers < L ? o->offload_layers : L, lean, p);
        return;
    }
    plan_once(c, li, B, T, backward, o, 0, lean, p);
    p->host_budget = o->host_budget;
    if (p->fits || !p->backward || o->host_budget <= 0) return;
    /* more offloaded, less on the device: a bisection over n_host, within the host budget (a plan
       over it is kept for the hints: what offloading would take) */
    glm_plan q;
    plan_once(c, li, B, T, backward, o, L, lean, &q);
    if (!q.fits) {
        p->all_offloaded_total = q.total;
        return;
    }
    int lo = 0, hi = L; /* lo does not fit, hi fits */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        plan_once(c, li, B, T, backward, o, mid, lean, &q);
        if (q.fits) hi = mid;
        else lo = mid;
    }
    plan_once(c, li, B, T, backward, o, hi, lean, &q);
    q.host_budget = o->host_budget;
    if (q.host <= o->host_budget) {
        *p = q;
    } else {
        p->host_short_layers = hi;
        p->host_short = q.host;
    }
}

void glm_plan_make(const glm_config *c, const glm_lora_info *li, int B, int T, int backward, const glm_plan_opts *o,
                   glm_plan *p) {
    /* cuDNN's fused attention where its workspace fits (offloading layer inputs costs less than
     * glmtune's slower attention kernels), else glmtune's kernels, which need no workspace */
    plan_offload(c, li, B, T, backward, o, 0, p);
    if (p->fits || p->attn_ws <= 0) return;
    glm_plan q;
    plan_offload(c, li, B, T, backward, o, 1, &q);
    if (q.fits || q.total < p->total) *p = q; /* or, neither fitting, the leaner of the two for the report */
}
