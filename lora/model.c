/* lora/model.c: GLM-4's weights: loading either checkpoint layout, random weights made on the
 * device for benchmarks, freeing. The forward and backward are in lora/model_step.c. */
#include "lora/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "lora/safetensors.h"

/* ---------------------------------------------------------------------------- loading */

void glm_ws_free(struct glm_ws *w);          /* lora/model_step.c */
void glm_gather_free(glm_model *m);          /* lora/model_step.c */

void glm_model_free(glm_model *m) {
    if (!m) return;
    const glm_backend *be = m->be;
    glm_ws_free(m->ws);
    glm_gather_free(m);
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
    int world, rank; /* world > 1: keep only this rank's shard of the base matrices */
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

/* A base matrix of n elements (in ld->host): whole, or with sharding this rank's shard of
 * glm_shard_elems(n, world) elements, zero-padded past the tensor's end. */
static glm_status ld_upload_matrix(loader *ld, const char *what, int64_t n, void **dst) {
    if (ld->world <= 1) return ld_upload(ld, what, n, dst);
    int64_t sn = glm_shard_elems(n, ld->world), first = (int64_t)ld->rank * sn, have = n - first;
    if (have > sn) have = sn;
    if (have < 0) have = 0;
    /* the shard at the front of the scratch (the scratch holds the whole tensor, and sn <= n) */
    memmove(ld->host, ld->host + first, (size_t)have * sizeof(float));
    memset(ld->host + have, 0, (size_t)(sn - have) * sizeof(float));
    return ld_upload(ld, what, sn, dst);
}

/* One tensor, whole. */
static glm_status ld_tensor(loader *ld, const char *name, int ndim, int64_t d0, int64_t d1, void **dst) {
    GLM_TRY(ld_read(ld, name, ndim, d0, d1, 0));
    return ld_upload(ld, name, ndim == 1 ? d0 : d0 * d1, dst);
}

/* One base matrix (sharded when the loader shards). */
static glm_status ld_matrix(loader *ld, const char *name, int64_t d0, int64_t d1, void **dst) {
    GLM_TRY(ld_read(ld, name, 2, d0, d1, 0));
    return ld_upload_matrix(ld, name, d0 * d1, dst);
}

static glm_status load_weights(glm_model *m, loader *ld) {
    const glm_config *c = &m->cfg;
    int64_t C = c->C, F = c->F, V = c->V, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    int64_t Dqkv = qd + 2 * kd;
    bool hf = c->layout == GLM_LAYOUT_HF;
    char n[256];
    GLM_TRY(ld_matrix(ld, hf ? "model.embed_tokens.weight" : "transformer.embedding.word_embeddings.weight", V, C, &m->embed));
    GLM_TRY(ld_tensor(ld, hf ? "model.norm.weight" : "transformer.encoder.final_layernorm.weight", 1, C, 0, &m->final_ln));
    GLM_TRY(ld_matrix(ld, hf ? "lm_head.weight" : "transformer.output_layer.weight", V, C, &m->out_w));
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
            GLM_TRY(ld_upload_matrix(ld, NAME("self_attn.qkv"), Dqkv * C, &w->wqkv));
            if (c->qkv_bias) {
                GLM_TRY(ld_read(ld, NAME("self_attn.q_proj.bias"), 1, qd, 0, 0));
                GLM_TRY(ld_read(ld, NAME("self_attn.k_proj.bias"), 1, kd, 0, qd));
                GLM_TRY(ld_read(ld, NAME("self_attn.v_proj.bias"), 1, kd, 0, qd + kd));
                GLM_TRY(ld_upload(ld, NAME("self_attn.qkv.bias"), Dqkv, &w->bqkv));
            }
            GLM_TRY(ld_matrix(ld, NAME("self_attn.o_proj.weight"), C, qd, &w->wo));
            GLM_TRY(ld_matrix(ld, NAME("mlp.gate_up_proj.weight"), 2 * F, C, &w->w1));
            GLM_TRY(ld_matrix(ld, NAME("mlp.down_proj.weight"), C, F, &w->w2));
        } else {
            GLM_TRY(ld_matrix(ld, NAME("self_attention.query_key_value.weight"), Dqkv, C, &w->wqkv));
            if (c->qkv_bias) GLM_TRY(ld_tensor(ld, NAME("self_attention.query_key_value.bias"), 1, Dqkv, 0, &w->bqkv));
            GLM_TRY(ld_matrix(ld, NAME("self_attention.dense.weight"), C, qd, &w->wo));
            GLM_TRY(ld_matrix(ld, NAME("mlp.dense_h_to_4h.weight"), 2 * F, C, &w->w1));
            GLM_TRY(ld_matrix(ld, NAME("mlp.dense_4h_to_h.weight"), C, F, &w->w2));
        }
#undef NAME
    }
    return GLM_OK;
}

glm_status glm_model_load(const char *dir, const glm_backend *be, double rope_theta_override, glm_model **out) {
    return glm_model_load_dist(dir, be, rope_theta_override, 0, out);
}

glm_status glm_model_load_dist(const char *dir, const glm_backend *be, double rope_theta_override, int shard_base,
                               glm_model **out) {
    glm_model *m = calloc(1, sizeof *m);
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    m->be = be;
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
    loader ld = {be, NULL, malloc((size_t)biggest * sizeof(float)), m->shard_world, be->rank};
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

/* ---------------------------------------------------------------------------- random weights */

/* One tensor of n elements, allocated and filled where it lives. */
static glm_status rnd_tensor(glm_model *m, const char *what, int64_t n, float mean, float std, uint64_t seed,
                             uint64_t *stream, void **dst) {
    const glm_backend *be = m->be;
    GLM_TRY(be->alloc(be, (size_t)n * glm_dtype_size(be->weight_dtype), what, dst));
    return be->fill_normal(be, *dst, be->weight_dtype, n, mean, std, seed, (*stream)++);
}

glm_status glm_model_create_random(const glm_config *cfg, const glm_backend *be, uint64_t seed, glm_model **out) {
    GLM_TRY(glm_config_validate(cfg, "random model config"));
    glm_model *m = calloc(1, sizeof *m);
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    m->be = be;
    m->cfg = *cfg;
    const glm_config *c = &m->cfg;
    m->layers = calloc((size_t)c->L, sizeof *m->layers);
    glm_status st = m->layers ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    int64_t C = c->C, F = c->F, V = c->V, qd = (int64_t)c->H * c->Dh, Dqkv = glm_config_qkv_rows(c);
    uint64_t sm = 1;
    if (!st) st = rnd_tensor(m, "embedding", V * C, 0.0f, 0.5f, seed, &sm, &m->embed);
    if (!st) st = rnd_tensor(m, "final norm", C, 1.0f, 0.1f, seed, &sm, &m->final_ln);
    if (!st) st = rnd_tensor(m, "output layer", V * C, 0.0f, (float)(1.0 / sqrt((double)C)), seed, &sm, &m->out_w);
    for (int l = 0; l < c->L && !st; l++) {
        glm_layer_weights *w = &m->layers[l];
        if (!st) st = rnd_tensor(m, "input_layernorm", C, 1.0f, 0.1f, seed, &sm, &w->ln1);
        if (!st) st = rnd_tensor(m, "query_key_value", Dqkv * C, 0.0f, (float)(1.0 / sqrt((double)C)), seed, &sm, &w->wqkv);
        if (!st && c->qkv_bias) st = rnd_tensor(m, "query_key_value bias", Dqkv, 0.0f, 0.1f, seed, &sm, &w->bqkv);
        if (!st) st = rnd_tensor(m, "dense", C * qd, 0.0f, (float)(1.0 / sqrt((double)qd)), seed, &sm, &w->wo);
        if (!st) st = rnd_tensor(m, "post_attention_layernorm", C, 1.0f, 0.1f, seed, &sm, &w->ln2);
        if (!st) st = rnd_tensor(m, "dense_h_to_4h", 2 * F * C, 0.0f, (float)(1.0 / sqrt((double)C)), seed, &sm, &w->w1);
        if (!st) st = rnd_tensor(m, "dense_4h_to_h", C * F, 0.0f, (float)(1.0 / sqrt((double)F)), seed, &sm, &w->w2);
    }
    float invf[512];
    if (!st && c->rope_dim / 2 > 512) st = glm_err(GLM_ERR_UNSUPPORTED, "%d rotary dims per head is more than glmtune supports", c->rope_dim);
    if (!st) st = be->alloc(be, (size_t)(c->rope_dim / 2) * 4, "rope inv_freq", (void **)&m->inv_freq);
    if (!st) {
        glm_rope_inv_freq(c->rope_base, c->rope_dim, invf);
        st = be->upload(be, m->inv_freq, invf, (size_t)(c->rope_dim / 2) * 4);
    }
    if (!st) st = be->sync(be);
    if (st) {
        int L = c->L; /* c points into m */
        glm_model_free(m);
        return glm_err_context(st, "making a random %d-layer model on the %s backend", L, be->name);
    }
    *out = m;
    return GLM_OK;
}
