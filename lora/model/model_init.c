/* lora/model/model_init.c: a seeded random GLM-4 checkpoint (`glmtune init-model`), see lora/model/model.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/rng.h"
#include "kernels/backend.h"
#include "lora/model/model.h"
#include "kernels/formats.h"
#include "common/safetensors.h"

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

/* The values of tensor t: N(0, sd) (norms: 1 + N(0, 0.1)) from the counter-based generator of
 * kernels/backend.h (seed, stream = t, index = element), so any chunk can be made on any thread,
 * rounded once to bf16. */
typedef struct fill_ctx {
    const spec *sp;
    uint64_t seed;
} fill_ctx;


static glm_status fill_tensor(void *ctx, size_t t, int64_t first, int64_t count, void *dst) {
    const fill_ctx *fc = ctx;
    const spec *s = &fc->sp[t];
    float sd = s->kind == INIT_MATRIX ? (float)(1.0 / sqrt((double)s->d1)) : s->kind == INIT_EMBED ? 0.5f : 0.1f;
    float mean = s->kind == INIT_NORM ? 1.0f : 0.0f;
    uint16_t *d = dst;
    for (int64_t k = 0; k < count; k++) d[k] = glm_f32_to_bf16(mean + sd * glm_normal_hash(fc->seed, (uint64_t)t, (uint64_t)(first + k)));
    return GLM_OK;
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
    glm_status st = GLM_OK;
    if (!ts) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        spec *s = &sp[i];
        int64_t el = s->ndim == 1 ? s->d0 : s->d0 * s->d1;
        ts[i].name = s->name;
        ts[i].dtype = GLM_ST_BF16;
        ts[i].ndim = s->ndim;
        ts[i].shape[0] = s->d0;
        ts[i].shape[1] = s->d1;
        ts[i].numel = el;
        ts[i].nbytes = (size_t)el * 2;
    }
    if ((st = glm_mkdir_p(outdir))) goto done;
    { /* a config with absurd sizes would fill the disk before failing: check the space first */
        double need = 4096;
        for (int i = 0; i < n; i++) need += (double)ts[i].nbytes + 256;
        struct statvfs sv;
        if (statvfs(outdir, &sv) == 0) {
            double avail = (double)sv.f_bavail * (double)(sv.f_frsize ? sv.f_frsize : sv.f_bsize);
            if (need > avail) {
                st = glm_err(GLM_ERR_IO, "init-model: the model (L=%d C=%d F=%d V=%d) takes %.2f GiB in bf16, but the "
                             "filesystem of %s has %.2f GiB free; hint: check the sizes in the config, or write to "
                             "a filesystem with more space", cfg.L, cfg.C, cfg.F, cfg.V, need / 1073741824.0,
                             outdir, avail / 1073741824.0);
                goto done;
            }
        }
    }
    {
        char *mp = glm_path_join(outdir, "model.safetensors"), *cp = glm_path_join(outdir, "config.json"), *js = NULL;
        const char *meta[] = {"format", "pt"};
        fill_ctx fc = {sp, seed};
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        st = glm_st_write_parallel(mp, ts, (size_t)n, meta, 1, fill_tensor, &fc, ncpu > 0 ? (int)(ncpu < 64 ? ncpu : 64) : 1);
        if (!st) st = glm_config_to_json(&cfg, &js);
        if (!st) st = glm_write_file_atomic(cp, js, strlen(js));
        free(js);
        free(mp);
        free(cp);
    }
done:
    free(ts);
    free(sp);
    return st;
}
