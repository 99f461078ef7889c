/* lora/model/model.c: GLM-4's weights: loading either checkpoint layout (the tensor names of its
 * family row, lora/model/family.h), random weights made on the device for benchmarks, freeing.
 * The step (forward, loss heads, backward) is in lora/model/step*.c, layer*.c and head.c (step_internal.h). */
#include "lora/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/safetensors.h"
#include "lora/model/family.h"

/* ---------------------------------------------------------------------------- loading */

void glm_ws_free(struct glm_ws *w);          /* lora/model/step_ws.c */

static void weight_free(const glm_backend *be, glm_weight *w) {
    glm_be_free(be, w->data);
    glm_be_free(be, w->absmax);
    glm_be_free(be, w->absmax2);
    glm_be_free(be, w->offset);
    w->data = w->absmax = NULL;
    w->absmax2 = w->offset = NULL;
}

void glm_model_free(glm_model *m) {
    if (!m) return;
    const glm_backend *be = m->be;
    glm_ws_free(m->ws);
    weight_free(be, &m->embed);
    glm_be_free(be, m->final_ln);
    weight_free(be, &m->out_w);
    glm_be_free(be, m->inv_freq);
    if (m->layers)
        for (int l = 0; l < m->cfg.L; l++) {
            glm_layer_weights *w = &m->layers[l];
            glm_be_free(be, w->ln1);
            weight_free(be, &w->wqkv);
            glm_be_free(be, w->bqkv);
            weight_free(be, &w->wo);
            glm_be_free(be, w->ln2);
            weight_free(be, &w->w1);
            weight_free(be, &w->w2);
        }
    free(m->layers);
    free(m);
}

const char *glm_base_format_name(const glm_model *m) {
    if (!m) return "none";
    if (m->fmt.fp8) return "fp8 (E4M3, a scale per output channel)";
    if (m->fmt.quant_bits != 4) return m->be->weight_dtype == GLM_DT_BF16 ? "bf16" : "f32";
    if (m->fmt.q4 == GLM_WF_FP4) return m->fmt.double_quant ? "fp4 + double quantization" : "fp4";
    return m->fmt.double_quant ? "nf4 + double quantization" : "nf4";
}

/* fp8's conditions: a backend with FP8 GEMMs, the whole base on every rank, matrix dimensions that
 * FP8 tensor cores take (multiples of 16). */
static glm_status check_fp8(const glm_base_format *f, const glm_backend *be, const glm_config *c, int shard_world) {
    if (!f || !f->fp8) return GLM_OK;
    if (!glm_be_supports(be, GLM_FEATURE_FP8))
        return glm_err(GLM_ERR_UNSUPPORTED, "--base-dtype fp8: this %s device has no FP8 tensor cores (sm_89 or sm_90 "
                       "and later); hint: --base-dtype bf16, or --quantization-bit 4 for a smaller base", be->name);
    if (shard_world > 1)
        return glm_err(GLM_ERR_UNSUPPORTED, "--base-dtype fp8 with --shard-base: the fp8 base is not sharded yet (its "
                       "row scales would need a layout of their own); hint: drop --shard-base (the fp8 base is half "
                       "the bf16 one), or --base-dtype bf16");
    return glm_fp8_dims_check(c);
}

glm_status glm_fp8_dims_check(const glm_config *c) {
    const int64_t dims[4] = {c->C, c->F, (int64_t)c->H * c->Dh, glm_config_qkv_rows(c)};
    for (int i = 0; i < 4; i++)
        if (dims[i] % 16)
            return glm_err(GLM_ERR_UNSUPPORTED, "--base-dtype fp8: the model's matrix dimension %lld is not a multiple of "
                           "16, which FP8 tensor cores need (hidden %d, ffn %d, heads x head dim %lld, qkv rows %lld); "
                           "hint: --base-dtype bf16 (or --quantization-bit 4 for a smaller base)", (long long)dims[i], c->C,
                           c->F, (long long)c->H * c->Dh, (long long)glm_config_qkv_rows(c));
    return GLM_OK;
}

static glm_status check_fmt(const glm_base_format *f) {
    if (f && f->fp8 && f->quant_bits)
        return glm_err(GLM_ERR_ARG, "--base-dtype fp8 with --quantization-bit %d: choose one format for the frozen "
                       "base", f->quant_bits);
    if (!f || f->quant_bits == 0) return GLM_OK;
    if (f->quant_bits != 4)
        return glm_err(GLM_ERR_ARG, "quantization to %d bits: glmtune quantizes the base to 4 bits (QLoRA's nf4 or fp4); "
                       "hint: --quantization-bit 4, or none for the bf16 base", f->quant_bits);
    if (f->q4 != GLM_WF_NF4 && f->q4 != GLM_WF_FP4)
        return glm_err(GLM_ERR_ARG, "4-bit quantization type %s: expected nf4 or fp4", glm_wformat_name(f->q4));
    return GLM_OK;
}

/* The stored format of the model's linear matrices. */
static glm_wformat linear_fmt(const glm_model *m) {
    if (m->fmt.fp8) return GLM_WF_FP8_E4M3;
    if (m->fmt.quant_bits == 4) return m->fmt.q4;
    return m->be->weight_dtype == GLM_DT_BF16 ? GLM_WF_BF16 : GLM_WF_F32;
}

static glm_wformat dense_fmt(const glm_backend *be) { return be->weight_dtype == GLM_DT_BF16 ? GLM_WF_BF16 : GLM_WF_F32; }

/* Allocates w's buffers for n stored elements of format f (shape rows x cols; a 4-bit weight in the
 * segments segs, NULL: one). */
static glm_status weight_alloc(const glm_backend *be, glm_weight *w, glm_wformat f, int64_t rows, int64_t cols, int64_t n,
                               int dq, const glm_wsegs *segs, const char *what) {
    memset(w, 0, sizeof *w);
    w->fmt = f;
    w->rows = rows;
    w->cols = cols;
    w->n = n;
    w->double_quant = glm_wformat_packed(f) && dq;
    if (glm_wsegs_count(f, segs) > 1) w->segs = *segs;
    glm_weight_bytes_t b = n == rows * cols && !glm_wformat_packed(f) ? glm_weight_matrix_bytes(f, rows, cols, w->double_quant)
                                                                     : glm_weight_seg_bytes(f, n, w->double_quant, &w->segs);
    GLM_TRY(glm_be_alloc(be, b.data, what, &w->data));
    if (b.absmax) GLM_TRY(glm_be_alloc(be, b.absmax, what, &w->absmax));
    if (b.absmax2) GLM_TRY(glm_be_alloc(be, b.absmax2, what, (void **)&w->absmax2));
    if (b.offset) GLM_TRY(glm_be_alloc(be, b.offset, what, (void **)&w->offset));
    return GLM_OK;
}

/* Quantizes the dense matrix src (rows x cols, dtype be->weight_dtype, in backend memory) into w,
 * a 4-bit one segment by segment (segs: the checkpoint's source tensors, NULL: one; kernels/weight.h
 * "Segments"): whole, or with sharding over `world` ranks this rank's shard (the whole tensor
 * quantized into `tmp`, then the shard's slices of the stored array copied: a shard is whole
 * double-quantization groups, and holds every segment's offset). */
static glm_status quantize_matrix(const glm_backend *be, glm_weight *w, glm_wformat f, int dq, int64_t rows, int64_t cols,
                                  const glm_wsegs *segs, const void *src, int world, int rank, const char *what) {
    const int64_t n = glm_weight_stored_elems(f, segs, rows, cols);
    if (world <= 1) {
        GLM_TRY(weight_alloc(be, w, f, rows, cols, n, dq, segs, what));
        return glm_be_weight_quantize(be, w, src, be->weight_dtype);
    }
    glm_weight whole;
    glm_status st = weight_alloc(be, &whole, f, rows, cols, n, dq, segs, what);
    if (!st) st = glm_be_weight_quantize(be, &whole, src, be->weight_dtype);
    const int64_t sn = glm_weight_shard_elems(f, n, world), first = (int64_t)rank * sn;
    if (!st) st = weight_alloc(be, w, f, rows, cols, sn, dq, segs, what);
    if (!st && w->offset) /* the whole tensor's means, one a segment */
        st = glm_be_copy(be, w->offset, whole.offset, sizeof(float) * (size_t)glm_wsegs_count(f, &w->segs));
    if (!st) {
        glm_weight_bytes_t hb = glm_weight_bytes(f, n, whole.double_quant), sb = glm_weight_bytes(f, sn, w->double_quant),
                           fb = glm_weight_bytes(f, first, w->double_quant);
        void *dst[3] = {w->data, w->absmax, w->absmax2};
        const void *from[3] = {whole.data, whole.absmax, whole.absmax2};
        size_t have[3] = {hb.data, hb.absmax, hb.absmax2}, want[3] = {sb.data, sb.absmax, sb.absmax2},
               at[3] = {fb.data, fb.absmax, fb.absmax2};
        for (int i = 0; i < 3 && !st; i++) {
            if (!want[i]) continue;
            size_t k = at[i] < have[i] ? have[i] - at[i] : 0;
            if (k > want[i]) k = want[i];
            st = glm_be_zero(be, dst[i], want[i]);
            if (!st && k) st = glm_be_copy(be, dst[i], (const char *)from[i] + at[i], k);
        }
    }
    if (!st) st = glm_be_sync(be);
    weight_free(be, &whole);
    return st;
}

typedef struct loader {
    const glm_backend *be;
    glm_st_set *set;
    float *host;     /* scratch, large enough for the biggest tensor */
    int world, rank; /* world > 1: keep only this rank's shard of the base matrices */
    glm_wformat fmt; /* the linear matrices' format */
    int dq;
    void *dev;       /* a quantized base (4-bit, fp8): backend scratch for one dense matrix (quantized from there) */
    bool dry;        /* a dry run: list the tensors the load reads (seen), read and upload nothing */
    char **seen;
    size_t n_seen, cap_seen;
} loader;

/* Reads `name` (shape ndim/shape) into host[off ...] as f32; a dry run only notes the name. */
static glm_status ld_read(loader *ld, const char *name, int ndim, int64_t d0, int64_t d1, int64_t off) {
    if (ld->dry) {
        if (ld->n_seen == ld->cap_seen) {
            size_t cap = ld->cap_seen ? 2 * ld->cap_seen : 64;
            char **g = realloc(ld->seen, cap * sizeof *g);
            if (!g) return glm_err(GLM_ERR_NOMEM, "out of memory listing the model's tensors");
            ld->seen = g;
            ld->cap_seen = cap;
        }
        if (!(ld->seen[ld->n_seen] = strdup(name))) return glm_err(GLM_ERR_NOMEM, "out of memory listing the model's tensors");
        ld->n_seen++;
        return GLM_OK;
    }
    int64_t shape[2] = {d0, d1};
    return glm_st_read_f32(ld->set, name, ndim, shape, ld->host + off);
}

static glm_status ld_upload(loader *ld, const char *what, int64_t n, void **dst) {
    if (ld->dry) return GLM_OK;
    GLM_TRY(glm_be_alloc(ld->be, (size_t)n * glm_dtype_size(ld->be->weight_dtype), what, dst));
    return glm_be_upload_f32(ld->be, *dst, ld->be->weight_dtype, ld->host, n);
}

/* A matrix [d0, d1] (in ld->host) in `fmt`: dense whole, dense sharded (this rank's shard of
 * glm_weight_shard_elems elements, zero-padded past the tensor's end), or 4-bit / fp8 (quantized on
 * the backend from the dense upload; a 4-bit one source tensor by source tensor, segs, NULL: one). */
static glm_status ld_upload_weight(loader *ld, const char *what, int64_t d0, int64_t d1, glm_wformat fmt,
                                   const glm_wsegs *segs, glm_weight *dst) {
    const glm_backend *be = ld->be;
    const int64_t n = d0 * d1;
    if (ld->dry) return GLM_OK;
    if (glm_wformat_quantized(fmt)) {
        GLM_TRY(glm_be_upload_f32(be, ld->dev, be->weight_dtype, ld->host, n));
        return quantize_matrix(be, dst, fmt, ld->dq, d0, d1, segs, ld->dev, ld->world, ld->rank, what);
    }
    int64_t sn = glm_weight_shard_elems(fmt, n, ld->world);
    if (ld->world > 1) { /* the shard at the front of the scratch (the scratch holds the whole tensor, and sn <= n) */
        int64_t first = (int64_t)ld->rank * sn, have = n - first;
        if (have > sn) have = sn;
        if (have < 0) have = 0;
        memmove(ld->host, ld->host + first, (size_t)have * sizeof(float));
        memset(ld->host + have, 0, (size_t)(sn - have) * sizeof(float));
    }
    GLM_TRY(weight_alloc(be, dst, fmt, d0, d1, sn, 0, NULL, what));
    return glm_be_upload_f32(be, dst->data, be->weight_dtype, ld->host, sn);
}

/* One tensor, whole. */
static glm_status ld_tensor(loader *ld, const char *name, int ndim, int64_t d0, int64_t d1, void **dst) {
    GLM_TRY(ld_read(ld, name, ndim, d0, d1, 0));
    return ld_upload(ld, name, ndim == 1 ? d0 : d0 * d1, dst);
}

/* One linear matrix of a layer (the base format; sharded when the loader shards). */
static glm_status ld_matrix(loader *ld, const char *name, int64_t d0, int64_t d1, glm_weight *dst) {
    GLM_TRY(ld_read(ld, name, 2, d0, d1, 0));
    return ld_upload_weight(ld, name, d0, d1, ld->fmt, NULL, dst);
}

/* The embedding or the output layer: dense (sharded when the loader shards). */
static glm_status ld_big(loader *ld, const char *name, int64_t d0, int64_t d1, glm_weight *dst) {
    GLM_TRY(ld_read(ld, name, 2, d0, d1, 0));
    return ld->dry ? GLM_OK : ld_upload_weight(ld, name, d0, d1, dense_fmt(ld->be), NULL, dst); /* a dry run has no backend */
}

/* The name of tensor t of layer l for messages: its module path, and for the fused query_key_value
 * of a layout that stores q, k and v apart, q's path with "(q, k, v)"; " bias" for its bias. */
static const char *tensor_label(const glm_family *f, glm_family_tensor t, int l, bool bias, char *buf, size_t n) {
    bool stacked = t == GLM_FT_QKV && !f->qkv_fused;
    glm_family_module_path(f, stacked ? GLM_FT_Q : t, l, buf, n);
    if (stacked) strncat(buf, " (q, k, v)", n - strlen(buf) - 1);
    if (bias) strncat(buf, " bias", n - strlen(buf) - 1);
    return buf;
}

/* Reads every tensor of the model's family row (lora/model/family.h) into m, in the row's names:
 * the fused query_key_value, or q_proj, k_proj and v_proj stacked into it (a 4-bit base quantizes
 * them one by one, as bitsandbytes quantizes each of the checkpoint's linears: glm_plan_qkv_segs). */
static glm_status load_weights(glm_model *m, loader *ld) {
    const glm_config *c = &m->cfg;
    const glm_family *f = glm_family_get(c->layout);
    int64_t C = c->C, F = c->F, V = c->V, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    int64_t Dqkv = qd + 2 * kd;
    const glm_wsegs qkv_segs = glm_plan_qkv_segs(c, ld->fmt);
    char n[256];
#define W(t, l) (glm_family_tensor_name(f, t, l, false, n, sizeof n), n)
#define BIAS(t, l) (glm_family_tensor_name(f, t, l, true, n, sizeof n), n)
    GLM_TRY(ld_big(ld, W(GLM_FT_EMBED, 0), V, C, &m->embed));
    GLM_TRY(ld_tensor(ld, W(GLM_FT_FINAL_NORM, 0), 1, C, 0, &m->final_ln));
    GLM_TRY(ld_big(ld, W(GLM_FT_OUTPUT, 0), V, C, &m->out_w));
    for (int l = 0; l < c->L; l++) {
        glm_layer_weights *w = &m->layers[l];
        GLM_TRY(ld_tensor(ld, W(GLM_FT_ATTN_NORM, l), 1, C, 0, &w->ln1));
        GLM_TRY(ld_tensor(ld, W(GLM_FT_FFN_NORM, l), 1, C, 0, &w->ln2));
        if (!f->qkv_fused) {
            char what[300];
            GLM_TRY(ld_read(ld, W(GLM_FT_Q, l), 2, qd, C, 0));
            GLM_TRY(ld_read(ld, W(GLM_FT_K, l), 2, kd, C, qd * C));
            GLM_TRY(ld_read(ld, W(GLM_FT_V, l), 2, kd, C, (qd + kd) * C));
            GLM_TRY(ld_upload_weight(ld, tensor_label(f, GLM_FT_QKV, l, false, what, sizeof what), Dqkv, C, ld->fmt,
                                     &qkv_segs, &w->wqkv));
            if (c->qkv_bias) {
                GLM_TRY(ld_read(ld, BIAS(GLM_FT_Q, l), 1, qd, 0, 0));
                GLM_TRY(ld_read(ld, BIAS(GLM_FT_K, l), 1, kd, 0, qd));
                GLM_TRY(ld_read(ld, BIAS(GLM_FT_V, l), 1, kd, 0, qd + kd));
                GLM_TRY(ld_upload(ld, tensor_label(f, GLM_FT_QKV, l, true, what, sizeof what), Dqkv, &w->bqkv));
            }
        } else {
            GLM_TRY(ld_matrix(ld, W(GLM_FT_QKV, l), Dqkv, C, &w->wqkv));
            if (c->qkv_bias) GLM_TRY(ld_tensor(ld, BIAS(GLM_FT_QKV, l), 1, Dqkv, 0, &w->bqkv));
        }
        GLM_TRY(ld_matrix(ld, W(GLM_FT_O, l), C, qd, &w->wo));
        GLM_TRY(ld_matrix(ld, W(GLM_FT_GATE_UP, l), 2 * F, C, &w->w1));
        GLM_TRY(ld_matrix(ld, W(GLM_FT_DOWN, l), C, F, &w->w2));
    }
#undef W
#undef BIAS
    return GLM_OK;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every tensor of the checkpoint is one the load reads (a dry run of load_weights lists them) or
 * one its row ignores: a tensor nothing reads belongs to a block glmtune does not run (another
 * model's norms, a bias the config turns off, layers past the config's count), and training
 * without it would be training another model. llama.cpp refuses such files the same way. */
glm_status glm_model_check_tensors(const glm_config *c, const glm_st_set *set) {
    const glm_family *f = glm_family_get(c->layout);
    glm_model *m = calloc(1, sizeof *m);
    if (m) m->layers = calloc((size_t)c->L, sizeof *m->layers);
    if (!m || !m->layers) {
        free(m);
        return glm_err(GLM_ERR_NOMEM, "out of memory listing the model's tensors");
    }
    m->cfg = *c;
    loader ld = {0};
    ld.set = (glm_st_set *)set; /* a dry run reads nothing */
    ld.dry = true;
    glm_status st = load_weights(m, &ld);
    const glm_st_tensor *first = NULL;
    size_t extra = 0, nt = glm_st_count(set);
    if (st == GLM_OK) {
        qsort(ld.seen, ld.n_seen, sizeof *ld.seen, cmp_name);
        for (size_t i = 0; i < nt; i++) {
            const glm_st_tensor *t = glm_st_at(set, i);
            if (glm_family_ignored(f, t->name) || bsearch(&t->name, ld.seen, ld.n_seen, sizeof *ld.seen, cmp_name))
                continue;
            if (!first) first = t;
            extra++;
        }
    }
    for (size_t i = 0; i < ld.n_seen; i++) free(ld.seen[i]);
    free(ld.seen);
    free(m->layers);
    free(m);
    if (st || !first) return st;
    char more[64] = "";
    if (extra > 1) snprintf(more, sizeof more, " (and %zu more)", extra - 1);
    return glm_err(GLM_ERR_MISMATCH, "%s: tensor '%s'%s is not part of the %s model (model_type \"%s\", %d layers) that "
                   "config.json describes, and glmtune refuses to load a checkpoint in part; hint: check that "
                   "config.json belongs to these weights (its model_type, %s, %s)", first->file, first->name, more,
                   f->title, f->model_types[0], c->L, f->keys[GLM_FK_LAYERS], f->keys[GLM_FK_QKV_BIAS]);
}

glm_status glm_model_load(const char *dir, const glm_backend *be, double rope_theta_override, glm_model **out) {
    return glm_model_load_dist(dir, be, rope_theta_override, 0, out);
}

glm_status glm_model_load_dist(const char *dir, const glm_backend *be, double rope_theta_override, int shard_base,
                               glm_model **out) {
    return glm_model_load_fmt(dir, be, rope_theta_override, shard_base, NULL, out);
}

glm_status glm_model_load_fmt(const char *dir, const glm_backend *be, double rope_theta_override, int shard_base,
                              const glm_base_format *fmt, glm_model **out) {
    GLM_TRY(check_fmt(fmt));
    glm_model *m = calloc(1, sizeof *m);
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    m->be = be;
    if (fmt) m->fmt = *fmt;
    m->shard_world = shard_base && be->world > 1 ? be->world : 0;
    glm_status st = glm_config_load(dir, rope_theta_override, &m->cfg);
    if (st) {
        free(m);
        return st;
    }
    const glm_config *c = &m->cfg;
    m->layers = calloc((size_t)c->L, sizeof *m->layers);
    int64_t C = c->C, biggest = (int64_t)c->V * C;
    int64_t qkv = glm_config_qkv_rows(c) * C, ff = 2 * (int64_t)c->F * C;
    if (qkv > biggest) biggest = qkv;
    if (ff > biggest) biggest = ff;
    loader ld = {be, NULL, malloc((size_t)biggest * sizeof(float)), m->shard_world, be->rank, linear_fmt(m),
                 m->fmt.double_quant, NULL, false, NULL, 0, 0};
    if (!m->layers || !ld.host) {
        free(ld.host);
        glm_model_free(m);
        return glm_err(GLM_ERR_NOMEM, "out of memory loading the model (%lld floats of scratch)", (long long)biggest);
    }
    float invf[512];
    if (c->rope_dim / 2 > 512) st = glm_err(GLM_ERR_UNSUPPORTED, "%s: %d rotary dims per head is more than glmtune supports (1024)", dir, c->rope_dim);
    if (!st) st = glm_be_alloc(be, (size_t)(c->rope_dim / 2) * 4, "rope inv_freq", (void **)&m->inv_freq);
    if (!st) {
        glm_rope_inv_freq(c->rope_base, c->rope_dim, invf);
        st = glm_be_upload(be, m->inv_freq, invf, (size_t)(c->rope_dim / 2) * 4);
    }
    if (!st) st = check_fp8(fmt, be, c, m->shard_world);
    if (!st && glm_wformat_quantized(ld.fmt)) /* the dense matrix a 4-bit or fp8 one is quantized from */
        st = glm_be_alloc(be, (size_t)(qkv > ff ? qkv : ff) * glm_dtype_size(be->weight_dtype), "a matrix to quantize", &ld.dev);
    if (!st) st = glm_st_open(dir, &ld.set);
    if (st == GLM_OK) st = glm_model_check_tensors(&m->cfg, ld.set);
    if (st == GLM_OK) st = load_weights(m, &ld);
    if (ld.set) glm_st_close(ld.set);
    for (size_t i = 0; i < ld.n_seen; i++) free(ld.seen[i]);
    free(ld.seen);
    free(ld.host);
    glm_be_free(be, ld.dev);
    if (st) {
        glm_layout lay = c->layout;
        glm_model_free(m);
        return glm_err_context(st, "loading the %s-layout model from %s", glm_layout_name(lay), dir);
    }
    *out = m;
    return GLM_OK;
}

glm_status glm_model_set_rope_inv_freq(glm_model *m, const float *inv_freq) {
    return glm_be_upload(m->be, m->inv_freq, inv_freq, (size_t)(m->cfg.rope_dim / 2) * sizeof(float));
}

/* ---------------------------------------------------------------------------- random weights */

/* One tensor of n elements, allocated and filled where it lives. */
static glm_status rnd_tensor(glm_model *m, const char *what, int64_t n, float mean, float std, uint64_t seed,
                             uint64_t *stream, void **dst) {
    const glm_backend *be = m->be;
    GLM_TRY(glm_be_alloc(be, (size_t)n * glm_dtype_size(be->weight_dtype), what, dst));
    return glm_be_fill_normal(be, *dst, be->weight_dtype, n, mean, std, seed, (*stream)++);
}

/* A matrix [rows, cols] of format f: dense, filled where it lives; 4-bit or fp8, filled into the
 * dense scratch `tmp` and quantized from there (a 4-bit one in the segments segs, NULL: one). */
static glm_status rnd_matrix(glm_model *m, const char *what, glm_wformat f, const glm_wsegs *segs, int64_t rows,
                             int64_t cols, float std, uint64_t seed, uint64_t *stream, void *tmp, glm_weight *dst) {
    const glm_backend *be = m->be;
    if (!glm_wformat_quantized(f)) {
        GLM_TRY(weight_alloc(be, dst, f, rows, cols, rows * cols, 0, NULL, what));
        return glm_be_fill_normal(be, dst->data, be->weight_dtype, rows * cols, 0.0f, std, seed, (*stream)++);
    }
    GLM_TRY(glm_be_fill_normal(be, tmp, be->weight_dtype, rows * cols, 0.0f, std, seed, (*stream)++));
    return quantize_matrix(be, dst, f, m->fmt.double_quant, rows, cols, segs, tmp, 1, 0, what);
}

glm_status glm_model_create_random(const glm_config *cfg, const glm_backend *be, uint64_t seed, glm_model **out) {
    return glm_model_create_random_fmt(cfg, be, seed, NULL, out);
}

glm_status glm_model_create_random_fmt(const glm_config *cfg, const glm_backend *be, uint64_t seed,
                                       const glm_base_format *fmt, glm_model **out) {
    GLM_TRY(glm_config_validate(cfg, "random model config"));
    GLM_TRY(check_fmt(fmt));
    glm_model *m = calloc(1, sizeof *m);
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    m->be = be;
    m->cfg = *cfg;
    if (fmt) m->fmt = *fmt;
    const glm_config *c = &m->cfg;
    m->layers = calloc((size_t)c->L, sizeof *m->layers);
    glm_status st = m->layers ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    int64_t C = c->C, F = c->F, V = c->V, qd = (int64_t)c->H * c->Dh, Dqkv = glm_config_qkv_rows(c);
    const glm_wformat lf = linear_fmt(m), df = dense_fmt(be);
    void *tmp = NULL;
    if (!st) st = check_fp8(fmt, be, c, 0);
    if (!st && glm_wformat_quantized(lf)) {
        int64_t big = 2 * F * C > Dqkv * C ? 2 * F * C : Dqkv * C;
        st = glm_be_alloc(be, (size_t)big * glm_dtype_size(be->weight_dtype), "a matrix to quantize", &tmp);
    }
    uint64_t sm = 1;
    const float sc = (float)(1.0 / sqrt((double)C)), sq = (float)(1.0 / sqrt((double)qd)), sf = (float)(1.0 / sqrt((double)F));
    if (!st) st = rnd_matrix(m, "embedding", df, NULL, V, C, 0.5f, seed, &sm, NULL, &m->embed);
    if (!st) st = rnd_tensor(m, "final norm", C, 1.0f, 0.1f, seed, &sm, &m->final_ln);
    if (!st) st = rnd_matrix(m, "output layer", df, NULL, V, C, sc, seed, &sm, NULL, &m->out_w);
    const glm_family *fam = glm_family_get(c->layout);
    const glm_wsegs qkv_segs = glm_plan_qkv_segs(c, lf);
    char lb[300];
#define LABEL(t, bias) tensor_label(fam, t, l, bias, lb, sizeof lb)
    for (int l = 0; l < c->L && !st; l++) {
        glm_layer_weights *w = &m->layers[l];
        if (!st) st = rnd_tensor(m, LABEL(GLM_FT_ATTN_NORM, false), C, 1.0f, 0.1f, seed, &sm, &w->ln1);
        if (!st) st = rnd_matrix(m, LABEL(GLM_FT_QKV, false), lf, &qkv_segs, Dqkv, C, sc, seed, &sm, tmp, &w->wqkv);
        if (!st && c->qkv_bias) st = rnd_tensor(m, LABEL(GLM_FT_QKV, true), Dqkv, 0.0f, 0.1f, seed, &sm, &w->bqkv);
        if (!st) st = rnd_matrix(m, LABEL(GLM_FT_O, false), lf, NULL, C, qd, sq, seed, &sm, tmp, &w->wo);
        if (!st) st = rnd_tensor(m, LABEL(GLM_FT_FFN_NORM, false), C, 1.0f, 0.1f, seed, &sm, &w->ln2);
        if (!st) st = rnd_matrix(m, LABEL(GLM_FT_GATE_UP, false), lf, NULL, 2 * F, C, sc, seed, &sm, tmp, &w->w1);
        if (!st) st = rnd_matrix(m, LABEL(GLM_FT_DOWN, false), lf, NULL, C, F, sf, seed, &sm, tmp, &w->w2);
    }
#undef LABEL
    if (!st) st = glm_be_sync(be);
    glm_be_free(be, tmp);
    float invf[512];
    if (!st && c->rope_dim / 2 > 512) st = glm_err(GLM_ERR_UNSUPPORTED, "%d rotary dims per head is more than glmtune supports", c->rope_dim);
    if (!st) st = glm_be_alloc(be, (size_t)(c->rope_dim / 2) * 4, "rope inv_freq", (void **)&m->inv_freq);
    if (!st) {
        glm_rope_inv_freq(c->rope_base, c->rope_dim, invf);
        st = glm_be_upload(be, m->inv_freq, invf, (size_t)(c->rope_dim / 2) * 4);
    }
    if (!st) st = glm_be_sync(be);
    if (st) {
        int L = c->L; /* c points into m */
        glm_model_free(m);
        return glm_err_context(st, "making a random %d-layer model on the %s backend", L, be->name);
    }
    *out = m;
    return GLM_OK;
}
