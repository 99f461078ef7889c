/* lora/model_init.c: a seeded random GLM-4 checkpoint (`glmtune init-model`), see lora/model.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/rng.h"
#include "lora/model.h"
#include "lora/safetensors.h"

typedef enum { INIT_NORM, INIT_EMBED, INIT_BIAS, INIT_MATRIX } init_kind;

typedef struct spec {
    char name[160];
    int ndim;
    int64_t d0, d1;
    init_kind kind;
} spec;

static void add(spec *s, int *n, const char *name, int ndim, int64_t d0, int64_t d1, init_kind k) {
    spec *t = &s[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->d0 = d0;
    t->d1 = d1;
    t->kind = k;
}

glm_status glm_model_init_random(const glm_config *cfg_in, uint64_t seed, const char *outdir, glm_layout layout) {
    glm_config cfg = *cfg_in;
    cfg.layout = layout;
    GLM_TRY(glm_config_validate(&cfg, "init-model config"));
    if (layout == GLM_LAYOUT_CHATGLM && cfg.rope_dim != cfg.Dh / 2)
        return glm_err(GLM_ERR_ARG, "init-model: the chatglm layout rotates Dh/2 = %d channels per head, not %d", cfg.Dh / 2, cfg.rope_dim);
    int64_t C = cfg.C, F = cfg.F, V = cfg.V, qd = (int64_t)cfg.H * cfg.Dh, kd = (int64_t)cfg.Hkv * cfg.Dh;
    bool hf = layout == GLM_LAYOUT_HF;
    int max = 3 + cfg.L * 12, n = 0;
    spec *sp = calloc((size_t)max, sizeof *sp);
    if (!sp) return glm_err(GLM_ERR_NOMEM, "out of memory");
    char nm[160];
    add(sp, &n, hf ? "model.embed_tokens.weight" : "transformer.embedding.word_embeddings.weight", 2, V, C, INIT_EMBED);
    for (int l = 0; l < cfg.L; l++) {
        const char *p = hf ? "model.layers" : "transformer.encoder.layers";
#define N_(fmt) (snprintf(nm, sizeof nm, "%s.%d." fmt, p, l), nm)
        add(sp, &n, N_("input_layernorm.weight"), 1, C, 0, INIT_NORM);
        if (hf) {
            add(sp, &n, N_("self_attn.q_proj.weight"), 2, qd, C, INIT_MATRIX);
            add(sp, &n, N_("self_attn.k_proj.weight"), 2, kd, C, INIT_MATRIX);
            add(sp, &n, N_("self_attn.v_proj.weight"), 2, kd, C, INIT_MATRIX);
            if (cfg.qkv_bias) {
                add(sp, &n, N_("self_attn.q_proj.bias"), 1, qd, 0, INIT_BIAS);
                add(sp, &n, N_("self_attn.k_proj.bias"), 1, kd, 0, INIT_BIAS);
                add(sp, &n, N_("self_attn.v_proj.bias"), 1, kd, 0, INIT_BIAS);
            }
            add(sp, &n, N_("self_attn.o_proj.weight"), 2, C, qd, INIT_MATRIX);
            add(sp, &n, N_("post_attention_layernorm.weight"), 1, C, 0, INIT_NORM);
            add(sp, &n, N_("mlp.gate_up_proj.weight"), 2, 2 * F, C, INIT_MATRIX);
            add(sp, &n, N_("mlp.down_proj.weight"), 2, C, F, INIT_MATRIX);
        } else {
            add(sp, &n, N_("self_attention.query_key_value.weight"), 2, qd + 2 * kd, C, INIT_MATRIX);
            if (cfg.qkv_bias) add(sp, &n, N_("self_attention.query_key_value.bias"), 1, qd + 2 * kd, 0, INIT_BIAS);
            add(sp, &n, N_("self_attention.dense.weight"), 2, C, qd, INIT_MATRIX);
            add(sp, &n, N_("post_attention_layernorm.weight"), 1, C, 0, INIT_NORM);
            add(sp, &n, N_("mlp.dense_h_to_4h.weight"), 2, 2 * F, C, INIT_MATRIX);
            add(sp, &n, N_("mlp.dense_4h_to_h.weight"), 2, C, F, INIT_MATRIX);
        }
#undef N_
    }
    add(sp, &n, hf ? "model.norm.weight" : "transformer.encoder.final_layernorm.weight", 1, C, 0, INIT_NORM);
    add(sp, &n, hf ? "lm_head.weight" : "transformer.output_layer.weight", 2, V, C, INIT_MATRIX);

    glm_st_tensor *ts = calloc((size_t)n, sizeof *ts);
    int64_t maxel = 1;
    for (int i = 0; i < n; i++) {
        int64_t el = sp[i].ndim == 1 ? sp[i].d0 : sp[i].d0 * sp[i].d1;
        if (el > maxel) maxel = el;
    }
    float *tmp = malloc((size_t)maxel * sizeof(float));
    glm_status st = GLM_OK;
    if (!ts || !tmp) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        spec *s = &sp[i];
        int64_t el = s->ndim == 1 ? s->d0 : s->d0 * s->d1;
        glm_rng rng;
        glm_rng_seed(&rng, seed, (uint64_t)i);
        double sd = s->kind == INIT_MATRIX ? 1.0 / sqrt((double)s->d1) : s->kind == INIT_EMBED ? 0.5 : 0.1;
        for (int64_t k = 0; k < el; k++) {
            double v = sd * glm_rng_normal(&rng);
            tmp[k] = (float)(s->kind == INIT_NORM ? 1.0 + v : v);
        }
        void *buf = malloc((size_t)el * 2);
        if (!buf) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory for %s (%lld bf16 values)", s->name, (long long)el);
            goto done;
        }
        if ((st = glm_st_from_f32(GLM_ST_BF16, tmp, (size_t)el, buf))) {
            free(buf);
            goto done;
        }
        ts[i].name = s->name;
        ts[i].dtype = GLM_ST_BF16;
        ts[i].ndim = s->ndim;
        ts[i].shape[0] = s->d0;
        ts[i].shape[1] = s->d1;
        ts[i].numel = el;
        ts[i].data = buf;
        ts[i].nbytes = (size_t)el * 2;
    }
    if ((st = glm_mkdir_p(outdir))) goto done;
    {
        char *mp = glm_path_join(outdir, "model.safetensors"), *cp = glm_path_join(outdir, "config.json"), *js = NULL;
        const char *meta[] = {"format", "pt"};
        st = glm_st_write(mp, ts, (size_t)n, meta, 1);
        if (!st) st = glm_config_to_json(&cfg, &js);
        if (!st) st = glm_write_file_atomic(cp, js, strlen(js));
        free(js);
        free(mp);
        free(cp);
    }
done:
    if (ts)
        for (int i = 0; i < n; i++) free((void *)ts[i].data);
    free(ts);
    free(tmp);
    free(sp);
    return st;
}
