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
#include "lora/model/family.h"
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
    const glm_family *f = glm_family_get(layout);
    GLM_TRY(glm_config_validate(&cfg, "init-model config"));
    if (!f->keys[GLM_FK_ROTARY_FRACTION] && cfg.rope_dim != (int)(cfg.Dh * f->rotary_fraction))
        return glm_err(GLM_ERR_ARG, "init-model: the %s layout rotates Dh/2 = %d channels per head, not %d", f->layout_name,
                       (int)(cfg.Dh * f->rotary_fraction), cfg.rope_dim);
    int64_t C = cfg.C, F = cfg.F, V = cfg.V, qd = (int64_t)cfg.H * cfg.Dh, kd = (int64_t)cfg.Hkv * cfg.Dh;
    int max = 3 + cfg.L * 12, n = 0;
    spec *sp = calloc((size_t)max, sizeof *sp);
    if (!sp) return glm_err(GLM_ERR_NOMEM, "out of memory");
    char nm[160];
    /* the family row's names (lora/model/family.h), in the order of the files transformers writes */
#define W(t, l) (glm_family_tensor_name(f, t, l, false, nm, sizeof nm), nm)
#define BIAS(t, l) (glm_family_tensor_name(f, t, l, true, nm, sizeof nm), nm)
    add(sp, &n, W(GLM_FT_EMBED, 0), 2, V, C, INIT_EMBED);
    for (int l = 0; l < cfg.L; l++) {
        add(sp, &n, W(GLM_FT_ATTN_NORM, l), 1, C, 0, INIT_NORM);
        if (!f->qkv_fused) {
            add(sp, &n, W(GLM_FT_Q, l), 2, qd, C, INIT_MATRIX);
            add(sp, &n, W(GLM_FT_K, l), 2, kd, C, INIT_MATRIX);
            add(sp, &n, W(GLM_FT_V, l), 2, kd, C, INIT_MATRIX);
            if (cfg.qkv_bias) {
                add(sp, &n, BIAS(GLM_FT_Q, l), 1, qd, 0, INIT_BIAS);
                add(sp, &n, BIAS(GLM_FT_K, l), 1, kd, 0, INIT_BIAS);
                add(sp, &n, BIAS(GLM_FT_V, l), 1, kd, 0, INIT_BIAS);
            }
        } else {
            add(sp, &n, W(GLM_FT_QKV, l), 2, qd + 2 * kd, C, INIT_MATRIX);
            if (cfg.qkv_bias) add(sp, &n, BIAS(GLM_FT_QKV, l), 1, qd + 2 * kd, 0, INIT_BIAS);
        }
        add(sp, &n, W(GLM_FT_O, l), 2, C, qd, INIT_MATRIX);
        add(sp, &n, W(GLM_FT_FFN_NORM, l), 1, C, 0, INIT_NORM);
        add(sp, &n, W(GLM_FT_GATE_UP, l), 2, 2 * F, C, INIT_MATRIX);
        add(sp, &n, W(GLM_FT_DOWN, l), 2, C, F, INIT_MATRIX);
    }
    add(sp, &n, W(GLM_FT_FINAL_NORM, 0), 1, C, 0, INIT_NORM);
    add(sp, &n, W(GLM_FT_OUTPUT, 0), 2, V, C, INIT_MATRIX);
#undef W
#undef BIAS

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
