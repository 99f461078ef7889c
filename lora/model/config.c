/* lora/model/config.c: config.json of GLM-4 checkpoints in the chatglm and hf layouts. */
#include "lora/model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/pyjson.h"

const char *glm_layout_name(glm_layout l) { return l == GLM_LAYOUT_HF ? "hf" : "chatglm"; }

glm_status glm_layout_parse(const char *s, glm_layout *out) {
    if (!strcmp(s, "chatglm")) *out = GLM_LAYOUT_CHATGLM;
    else if (!strcmp(s, "hf") || !strcmp(s, "glm")) *out = GLM_LAYOUT_HF;
    else return glm_err(GLM_ERR_ARG, "unknown checkpoint layout '%s'; valid: chatglm, hf", s);
    return GLM_OK;
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
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (mt && !strcmp(mt, "chatglm")) cfg->layout = GLM_LAYOUT_CHATGLM;
    else if (mt && !strcmp(mt, "glm")) cfg->layout = GLM_LAYOUT_HF;
    else if (json_object_get(root, "multi_query_group_num") || json_object_get(root, "padded_vocab_size")) cfg->layout = GLM_LAYOUT_CHATGLM;
    else if (json_object_get(root, "num_key_value_heads")) cfg->layout = GLM_LAYOUT_HF;
    else {
        st = glm_err(GLM_ERR_FORMAT, "%s: neither a THUDM chatglm nor a transformers glm config (model_type '%s')", path, mt ? mt : "(none)");
        goto done;
    }
    double v;
    bool f;
    if (cfg->layout == GLM_LAYOUT_CHATGLM) {
        if ((st = need_int(root, "hidden_size", path, &cfg->C))) goto done;
        if ((st = need_int(root, "num_layers", path, &cfg->L))) goto done;
        if ((st = need_int(root, "num_attention_heads", path, &cfg->H))) goto done;
        if ((st = need_int(root, "multi_query_group_num", path, &cfg->Hkv))) goto done;
        if ((st = need_int(root, "kv_channels", path, &cfg->Dh))) goto done;
        if ((st = need_int(root, "ffn_hidden_size", path, &cfg->F))) goto done;
        if ((st = need_int(root, "padded_vocab_size", path, &cfg->V))) goto done;
        if ((st = get_num(root, "layernorm_epsilon", path, &v, &f))) goto done;
        cfg->eps = f ? (float)v : 1e-5f;
        if ((st = get_num(root, "rope_ratio", path, &v, &f))) goto done;
        cfg->rope_base = 10000.0 * (f ? v : 1.0);
        cfg->rope_dim = cfg->Dh / 2;
        json_t *b = json_object_get(root, "add_qkv_bias");
        cfg->qkv_bias = b ? json_is_true(b) : true;
        if ((st = get_num(root, "seq_length", path, &v, &f))) goto done;
        cfg->max_positions = f ? (int64_t)v : 0;
    } else {
        if ((st = need_int(root, "hidden_size", path, &cfg->C))) goto done;
        if ((st = need_int(root, "num_hidden_layers", path, &cfg->L))) goto done;
        if ((st = need_int(root, "num_attention_heads", path, &cfg->H))) goto done;
        if (json_object_get(root, "num_key_value_heads")) {
            if ((st = need_int(root, "num_key_value_heads", path, &cfg->Hkv))) goto done;
        } else cfg->Hkv = cfg->H;
        if (json_object_get(root, "head_dim") && !json_is_null(json_object_get(root, "head_dim"))) {
            if ((st = need_int(root, "head_dim", path, &cfg->Dh))) goto done;
        } else cfg->Dh = cfg->C / cfg->H;
        if ((st = need_int(root, "intermediate_size", path, &cfg->F))) goto done;
        if ((st = need_int(root, "vocab_size", path, &cfg->V))) goto done;
        if ((st = get_num(root, "rms_norm_eps", path, &v, &f))) goto done;
        cfg->eps = f ? (float)v : 1e-5f;
        json_t *rp = json_object_get(root, "rope_parameters");
        bool have_theta = false;
        double prf = 0.5;
        bool have_prf = false;
        if (rp && json_is_object(rp)) {
            if ((st = get_num(rp, "rope_theta", path, &v, &f))) goto done;
            if (f) cfg->rope_base = v, have_theta = true;
            if ((st = get_num(rp, "partial_rotary_factor", path, &v, &f))) goto done;
            if (f) prf = v, have_prf = true;
        }
        if (!have_theta) {
            if ((st = get_num(root, "rope_theta", path, &v, &f))) goto done;
            cfg->rope_base = f ? v : 10000.0;
        }
        if (!have_prf) {
            if ((st = get_num(root, "partial_rotary_factor", path, &v, &f))) goto done;
            if (f) prf = v;
        }
        cfg->rope_dim = (int)lround(cfg->Dh * prf);
        json_t *b = json_object_get(root, "attention_bias");
        cfg->qkv_bias = b ? json_is_true(b) : true;
        if ((st = get_num(root, "max_position_embeddings", path, &v, &f))) goto done;
        cfg->max_positions = f ? (int64_t)v : 0;
        /* the wrong value ships in the GLM-4-9B -hf configs (C 4096, 40 layers); a small model
         * with base 10000 (tests, demos) is taken as it says */
        if (cfg->rope_base == 10000.0 && !(rope_theta_override > 0) && cfg->C == 4096 && cfg->L == 40) {
            cfg->rope_suspect = true;
            glm_log_warn("%s: WARNING: rope_theta is 10000. Real GLM-4-9B -hf configs carry this wrong value: the "
                         "THUDM configs say 10000 x rope_ratio = 5e6 (glm-4-9b-chat) or 1e8 (glm-4-9b-chat-1m). "
                         "Training with the wrong RoPE base damages the model. hint: pass --rope-theta 1e8 "
                         "(or 5e6) unless this really is a model trained with base 10000", path);
        }
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
    json_t *o = json_object();
    if (!o) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (c->layout == GLM_LAYOUT_CHATGLM) {
        json_object_set_new(o, "model_type", json_string("chatglm"));
        json_object_set_new(o, "architectures", json_pack("[s]", "ChatGLMModel"));
        json_object_set_new(o, "hidden_size", json_integer(c->C));
        json_object_set_new(o, "num_layers", json_integer(c->L));
        json_object_set_new(o, "num_attention_heads", json_integer(c->H));
        json_object_set_new(o, "multi_query_group_num", json_integer(c->Hkv));
        json_object_set_new(o, "multi_query_attention", json_true());
        json_object_set_new(o, "kv_channels", json_integer(c->Dh));
        json_object_set_new(o, "ffn_hidden_size", json_integer(c->F));
        json_object_set_new(o, "padded_vocab_size", json_integer(c->V));
        json_object_set_new(o, "layernorm_epsilon", json_real(glm_f32_shortest(c->eps)));
        json_object_set_new(o, "rope_ratio", json_real(c->rope_base / 10000.0));
        json_object_set_new(o, "add_qkv_bias", json_boolean(c->qkv_bias));
        json_object_set_new(o, "add_bias_linear", json_false());
        json_object_set_new(o, "rmsnorm", json_true());
        json_object_set_new(o, "post_layer_norm", json_true());
        json_object_set_new(o, "seq_length", json_integer(c->max_positions > 0 ? c->max_positions : 131072));
        json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    } else {
        json_object_set_new(o, "model_type", json_string("glm"));
        json_object_set_new(o, "architectures", json_pack("[s]", "GlmForCausalLM"));
        json_object_set_new(o, "hidden_size", json_integer(c->C));
        json_object_set_new(o, "num_hidden_layers", json_integer(c->L));
        json_object_set_new(o, "num_attention_heads", json_integer(c->H));
        json_object_set_new(o, "num_key_value_heads", json_integer(c->Hkv));
        json_object_set_new(o, "head_dim", json_integer(c->Dh));
        json_object_set_new(o, "intermediate_size", json_integer(c->F));
        json_object_set_new(o, "vocab_size", json_integer(c->V));
        json_object_set_new(o, "rms_norm_eps", json_real(glm_f32_shortest(c->eps)));
        json_object_set_new(o, "rope_theta", json_real(c->rope_base));
        json_object_set_new(o, "partial_rotary_factor", json_real((double)c->rope_dim / c->Dh));
        json_object_set_new(o, "attention_bias", json_boolean(c->qkv_bias));
        json_object_set_new(o, "hidden_act", json_string("silu"));
        json_object_set_new(o, "max_position_embeddings", json_integer(c->max_positions > 0 ? c->max_positions : 131072));
        json_object_set_new(o, "dtype", json_string("bfloat16"));
    }
    json_object_set_new(o, "tie_word_embeddings", json_false());
    /* special ids inside the vocabulary, or null */
    int64_t pad = -1, eos[4];
    int ne = 0;
    if (c->has_token_ids) {
        pad = c->pad_token_id < c->V ? c->pad_token_id : -1;
        for (int i = 0; i < c->n_eos_token_ids && i < 4; i++)
            if (c->eos_token_ids[i] >= 0 && c->eos_token_ids[i] < c->V) eos[ne++] = c->eos_token_ids[i];
    } else if (c->V > 151338) { /* GLM-4's: <|endoftext|>, and the stop ids <|endoftext|> <|user|> <|observation|> */
        pad = 151329;
        eos[ne++] = 151329;
        eos[ne++] = 151336;
        eos[ne++] = 151338;
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

/* The shapes of DESIGN.md §3 (THUDM configs: glm-4-9b-chat-1m, glm-4-9b-chat / glm-4-9b). */
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
