/* lora/model/config.c: config.json of GLM-4 checkpoints, read and written with the keys of their
 * family's row (lora/model/family.h). */
#include "lora/model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/pyjson.h"
#include "lora/model/family.h"

const char *glm_layout_name(glm_layout l) { return glm_family_get(l)->layout_name; }

glm_status glm_layout_parse(const char *s, glm_layout *out) {
    char valid[128] = "";
    for (int i = 0; i < glm_family_count(); i++) {
        const glm_family *f = glm_family_at(i);
        bool match = !strcmp(s, f->layout_name);
        for (int k = 0; k < 2 && f->model_types[k]; k++) match = match || !strcmp(s, f->model_types[k]);
        if (match) {
            *out = f->layout;
            return GLM_OK;
        }
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "", f->layout_name);
    }
    return glm_err(GLM_ERR_ARG, "unknown checkpoint layout '%s'; valid: %s", s, valid);
}

/* Integer field; *found = false when absent. Errors when present but not a number. */
static glm_status get_num(json_t *root, const char *key, const char *path, double *v, bool *found) {
    json_t *j = json_object_get(root, key);
    *found = false;
    if (!j || json_is_null(j)) return GLM_OK;
    if (!json_is_number(j)) return glm_err(GLM_ERR_FORMAT, "%s: field '%s' is not a number", path, key);
    *v = json_number_value(j);
    *found = true;
    return GLM_OK;
}

static glm_status need_int(json_t *root, const char *key, const char *path, int *out) {
    double v;
    bool f;
    GLM_TRY(get_num(root, key, path, &v, &f));
    if (!f) return glm_err(GLM_ERR_FORMAT, "%s: required field '%s' is missing", path, key);
    if (v <= 0 || v != floor(v) || v > 2147483647.0)
        return glm_err(GLM_ERR_FORMAT, "%s: field '%s' must be a positive integer below 2^31 (found %.15g)", path, key,
                       v);
    *out = (int)v;
    return GLM_OK;
}

glm_status glm_config_validate(const glm_config *c, const char *what) {
    if (c->C <= 0 || c->L <= 0 || c->H <= 0 || c->Hkv <= 0 || c->Dh <= 0 || c->F <= 0 || c->V <= 0)
        return glm_err(GLM_ERR_FORMAT, "%s: sizes must be positive (C=%d L=%d H=%d Hkv=%d Dh=%d F=%d V=%d)", what,
                       c->C, c->L, c->H, c->Hkv, c->Dh, c->F, c->V);
    if (c->H % c->Hkv)
        return glm_err(GLM_ERR_FORMAT, "%s: %d attention heads are not a multiple of %d KV groups", what, c->H, c->Hkv);
    if (c->rope_dim <= 0 || c->rope_dim % 2 || c->rope_dim > c->Dh)
        return glm_err(GLM_ERR_FORMAT, "%s: rotary dims %d must be even and in (0, head dim %d]", what, c->rope_dim, c->Dh);
    if (!(c->eps > 0) || !isfinite(c->eps)) return glm_err(GLM_ERR_FORMAT, "%s: RMSNorm eps %g must be positive", what, c->eps);
    if (!(c->rope_base > 1) || !isfinite(c->rope_base))
        return glm_err(GLM_ERR_FORMAT, "%s: RoPE base %g must be > 1", what, c->rope_base);
    return GLM_OK;
}

/* "org/name" that is not a local path: what LLaMA-Factory YAMLs hold in model_name_or_path. */
static bool hub_id(const char *p) {
    const char *sl = strchr(p, '/');
    return sl && sl != p && p[0] != '.' && p[0] != '~' && sl[1] && !strchr(sl + 1, '/') && !glm_is_dir(p);
}

/* A checkpoint whose config.json has a "quantization_config" (GPTQ, AWQ, bitsandbytes, FP8, ... as transformers
 * writes it) holds packed integer weights under other tensor names (qweight, scales, ...), not the bf16 weights
 * glmtune reads: refused by its quant_method, with the way glmtune quantizes instead, before a "tensor not found". */
static glm_status check_not_quantized(json_t *root, const char *path) {
    json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q)) return GLM_OK;
    const char *method = json_is_object(q) ? json_string_value(json_object_get(q, "quant_method")) : NULL;
    json_t *bits = json_is_object(q) ? json_object_get(q, "bits") : NULL;
    char how[96] = "";
    if (method && json_is_integer(bits)) snprintf(how, sizeof how, " (%s, %lld-bit)", method, (long long)json_integer_value(bits));
    else if (method) snprintf(how, sizeof how, " (%s)", method);
    return glm_err(GLM_ERR_UNSUPPORTED, "%s: the checkpoint is quantized: its quantization_config%s says its weights are "
                   "stored packed, not as the bf16 weights glmtune reads; hint: use the original bf16 checkpoint of this "
                   "model (e.g. THUDM/glm-4-9b-chat): glmtune quantizes the frozen base itself when it loads it, with "
                   "--quantization-bit 4 (QLoRA, bitsandbytes' nf4) or --base-dtype fp8", path, how);
}

glm_status glm_config_load(const char *dir, double rope_theta_override, glm_config *cfg) {
    size_t dl = strlen(dir);
    char *path = (dl > 5 && !strcmp(dir + dl - 5, ".json")) ? strdup(dir) : glm_path_join(dir, "config.json");
    if (!path) return glm_err(GLM_ERR_NOMEM, "out of memory");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    glm_status st = GLM_OK;
    if (!root) {
        st = glm_is_file(path) ? glm_err(GLM_ERR_FORMAT, "%s: line %d: bad JSON: %s", path, je.line, je.text)
                               : glm_err(GLM_ERR_IO, "%s: cannot read the model config (hint: the model directory must hold config.json%s)", path,
                                         hub_id(dir) ? "; a Hugging Face Hub id is not downloaded: pass the local "
                                                       "directory of the GLM-4 model (--model_name_or_path DIR)" : "");
        free(path);
        return st;
    }
    memset(cfg, 0, sizeof(*cfg));
    if ((st = check_not_quantized(root, path))) goto done;
    const glm_family *f;
    if ((st = glm_family_for_config(root, path, &f))) goto done;
    if ((st = glm_family_check_block(f))) {
        st = glm_err_context(st, "%s", path);
        goto done;
    }
    cfg->layout = f->layout;
    const char *const *k = f->keys;
    double v;
    bool fd;
    if ((st = need_int(root, k[GLM_FK_HIDDEN], path, &cfg->C))) goto done;
    if ((st = need_int(root, k[GLM_FK_LAYERS], path, &cfg->L))) goto done;
    if ((st = need_int(root, k[GLM_FK_HEADS], path, &cfg->H))) goto done;
    if (!f->kv_groups_optional || json_object_get(root, k[GLM_FK_KV_GROUPS])) {
        if ((st = need_int(root, k[GLM_FK_KV_GROUPS], path, &cfg->Hkv))) goto done;
    } else cfg->Hkv = cfg->H;
    json_t *hd = json_object_get(root, k[GLM_FK_HEAD_DIM]);
    if (!f->head_dim_optional || (hd && !json_is_null(hd))) {
        if ((st = need_int(root, k[GLM_FK_HEAD_DIM], path, &cfg->Dh))) goto done;
    } else cfg->Dh = cfg->C / cfg->H;
    if ((st = need_int(root, k[GLM_FK_FFN], path, &cfg->F))) goto done;
    if ((st = need_int(root, k[GLM_FK_VOCAB], path, &cfg->V))) goto done;
    if ((st = get_num(root, k[GLM_FK_EPS], path, &v, &fd))) goto done;
    cfg->eps = fd ? (float)v : f->eps_default;
    /* the RoPE base and the rotated share: from the row's rope object first (transformers 5) */
    json_t *rp = f->rope_object ? json_object_get(root, f->rope_object) : NULL;
    bool have_base = false, have_frac = false;
    double frac = f->rotary_fraction;
    if (rp && json_is_object(rp)) {
        if ((st = get_num(rp, k[GLM_FK_ROPE], path, &v, &fd))) goto done;
        if (fd) cfg->rope_base = v * f->rope_scale, have_base = true;
        if (k[GLM_FK_ROTARY_FRACTION]) {
            if ((st = get_num(rp, k[GLM_FK_ROTARY_FRACTION], path, &v, &fd))) goto done;
            if (fd) frac = v, have_frac = true;
        }
    }
    if (!have_base) {
        if ((st = get_num(root, k[GLM_FK_ROPE], path, &v, &fd))) goto done;
        cfg->rope_base = fd ? v * f->rope_scale : f->rope_default_base;
    }
    if (k[GLM_FK_ROTARY_FRACTION] && !have_frac) {
        if ((st = get_num(root, k[GLM_FK_ROTARY_FRACTION], path, &v, &fd))) goto done;
        if (fd) frac = v;
    }
    /* without a key the share is fixed and truncates (THUDM: kv_channels // 2) */
    cfg->rope_dim = k[GLM_FK_ROTARY_FRACTION] ? (int)lround(cfg->Dh * frac) : (int)(cfg->Dh * f->rotary_fraction);
    json_t *b = json_object_get(root, k[GLM_FK_QKV_BIAS]);
    cfg->qkv_bias = b ? json_is_true(b) : f->qkv_bias_default;
    if ((st = get_num(root, k[GLM_FK_MAX_POSITIONS], path, &v, &fd))) goto done;
    cfg->max_positions = fd ? (int64_t)v : 0;
    if (f->rope_suspect_base > 0 && cfg->rope_base == f->rope_suspect_base && !(rope_theta_override > 0) &&
        cfg->C == f->rope_suspect_C && cfg->L == f->rope_suspect_L) {
        cfg->rope_suspect = true;
        glm_log_warn("%s: WARNING: %s", path, f->rope_suspect_warning);
    }
    if (rope_theta_override > 0) {
        cfg->rope_base = rope_theta_override;
        cfg->rope_overridden = true;
    }
    st = glm_config_validate(cfg, path);
done:
    json_decref(root);
    free(path);
    return st;
}

glm_status glm_config_to_json(const glm_config *c, char **out) {
    const glm_family *f = glm_family_get(c->layout);
    json_t *o = json_object();
    if (!o) return glm_err(GLM_ERR_NOMEM, "out of memory");
    json_object_set_new(o, "model_type", json_string(f->model_types[0]));
    json_object_set_new(o, "architectures", json_pack("[s]", f->architectures[0]));
    for (size_t i = 0; i < f->n_written; i++) {
        const glm_family_out *w = &f->written[i];
        json_t *v = NULL;
        switch (w->key) {
        case GLM_FK_HIDDEN: v = json_integer(c->C); break;
        case GLM_FK_LAYERS: v = json_integer(c->L); break;
        case GLM_FK_HEADS: v = json_integer(c->H); break;
        case GLM_FK_KV_GROUPS: v = json_integer(c->Hkv); break;
        case GLM_FK_HEAD_DIM: v = json_integer(c->Dh); break;
        case GLM_FK_FFN: v = json_integer(c->F); break;
        case GLM_FK_VOCAB: v = json_integer(c->V); break;
        case GLM_FK_EPS: v = json_real(glm_f32_shortest(c->eps)); break;
        case GLM_FK_ROPE: v = json_real(c->rope_base / f->rope_scale); break;
        case GLM_FK_ROTARY_FRACTION: v = json_real((double)c->rope_dim / c->Dh); break;
        case GLM_FK_QKV_BIAS: v = json_boolean(c->qkv_bias); break;
        case GLM_FK_MAX_POSITIONS:
            v = json_integer(c->max_positions > 0 ? c->max_positions : f->written_max_positions);
            break;
        default: v = json_loads(w->json, JSON_DECODE_ANY, NULL); break;
        }
        const char *key = w->key >= 0 ? f->keys[w->key] : w->name;
        if (!v || !key) {
            json_decref(v);
            json_decref(o);
            return glm_err(GLM_ERR_INTERNAL, "config.json of the %s layout: written key %zu (%s) has no %s in the "
                           "family table (lora/model/family.c)", f->layout_name, i, key ? key : "?", v ? "name" : "value");
        }
        json_object_set_new(o, key, v);
    }
    for (size_t i = 0; i < f->n_aliases; i++) {
        const glm_family_alias *a = &f->aliases[i];
        json_t *v = a->key == GLM_FK_VOCAB  ? json_integer(c->V)
                    : a->key == GLM_FK_EPS  ? json_real(glm_f32_shortest(c->eps))
                    : a->key == GLM_FK_ROPE ? json_real(c->rope_base / a->rope_scale)
                    : a->key == GLM_FK_MAX_POSITIONS
                        ? json_integer(c->max_positions > 0 ? c->max_positions : f->written_max_positions)
                        : NULL;
        if (!v) {
            json_decref(o);
            return glm_err(GLM_ERR_INTERNAL, "config.json of the %s layout: alias %s has no value in the family table "
                           "(lora/model/family.c)", f->layout_name, a->name);
        }
        json_object_set_new(o, a->name, v);
    }
    json_object_set_new(o, "tie_word_embeddings", json_boolean(f->tied_embeddings));
    /* special ids inside the vocabulary, or null */
    int64_t pad = -1, eos[4];
    int ne = 0;
    if (c->has_token_ids) {
        pad = c->pad_token_id < c->V ? c->pad_token_id : -1;
        for (int i = 0; i < c->n_eos_token_ids && i < 4; i++)
            if (c->eos_token_ids[i] >= 0 && c->eos_token_ids[i] < c->V) eos[ne++] = c->eos_token_ids[i];
    } else { /* the family's: GLM-4's <|endoftext|>, and its chat stop ids, when all fit the vocabulary */
        bool fit = f->pad_token_id < c->V;
        for (int i = 0; i < f->n_stop_ids; i++) fit = fit && f->stop_ids[i] < c->V;
        if (fit) {
            pad = f->pad_token_id;
            for (int i = 0; i < f->n_stop_ids && i < 4; i++) eos[ne++] = f->stop_ids[i];
        }
    }
    json_object_set_new(o, "pad_token_id", pad >= 0 ? json_integer(pad) : json_null());
    json_t *el = ne ? json_array() : json_null();
    for (int i = 0; i < ne; i++) json_array_append_new(el, json_integer(eos[i]));
    json_object_set_new(o, "eos_token_id", el);
    char *s = glm_tojson(o, 2);
    json_decref(o);
    if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory writing config.json");
    *out = s;
    return GLM_OK;
}

/* The shapes of docs/design.md §3 (THUDM configs: glm-4-9b-chat-1m, glm-4-9b-chat / glm-4-9b). */
glm_status glm_config_preset(const char *name, glm_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->layout = GLM_LAYOUT_CHATGLM;
    cfg->C = 4096;
    cfg->L = 40;
    cfg->H = 32;
    cfg->Dh = 128;
    cfg->F = 13696;
    cfg->V = 151552;
    cfg->eps = 1.5625e-07f;
    cfg->rope_dim = 64;
    cfg->qkv_bias = true;
    if (!strcmp(name, "glm-4-9b-chat-1m")) {
        cfg->Hkv = 4;
        cfg->rope_base = 1e8;
        cfg->max_positions = 1048576;
    } else if (!strcmp(name, "glm-4-9b-chat") || !strcmp(name, "glm-4-9b")) {
        cfg->Hkv = 2;
        cfg->rope_base = 5e6;
        cfg->max_positions = 131072;
    } else {
        return glm_err(GLM_ERR_ARG, "unknown model shape '%s'; known: glm-4-9b-chat-1m, glm-4-9b-chat, glm-4-9b%s", name,
                       strchr(name, '/') || strstr(name, ".json") ? " (a config.json or model directory: --config PATH)" : "");
    }
    return GLM_OK;
}
