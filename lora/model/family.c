/* lora/model/family.c: the model-family table (see family.h) and its lookups. */
#include "lora/model/family.h"

#include <stdio.h>
#include <string.h>

/* Names that two rows share, written once. */
static const char k_input_layernorm[] = "input_layernorm";
static const char k_post_attention_layernorm[] = "post_attention_layernorm";
static const char k_hidden_size[] = "hidden_size";
static const char k_num_attention_heads[] = "num_attention_heads";

/* THUDM's names (modeling_chatglm.py) */
static const char k_query_key_value[] = "query_key_value";
static const char k_dense[] = "dense";
static const char k_dense_h_to_4h[] = "dense_h_to_4h";
static const char k_dense_4h_to_h[] = "dense_4h_to_h";

/* transformers' GlmForCausalLM (models/glm/modeling_glm.py) */
static const char k_q_proj[] = "q_proj";
static const char k_k_proj[] = "k_proj";
static const char k_v_proj[] = "v_proj";
static const char k_o_proj[] = "o_proj";
static const char k_gate_up_proj[] = "gate_up_proj";
static const char k_down_proj[] = "down_proj";

/* llama.cpp's names for architecture "chatglm" (gguf-py constants.py, MODEL_ARCH.CHATGLM): both
 * layouts convert to it, the hf one with separate attn_q / attn_k / attn_v (docs/design.md §9). */
static const char *const k_gguf[GLM_FT_COUNT] = {
    [GLM_FT_EMBED] = "token_embd",   [GLM_FT_FINAL_NORM] = "output_norm", [GLM_FT_OUTPUT] = "output",
    [GLM_FT_ATTN_NORM] = "attn_norm", [GLM_FT_QKV] = "attn_qkv",           [GLM_FT_Q] = "attn_q",
    [GLM_FT_K] = "attn_k",           [GLM_FT_V] = "attn_v",               [GLM_FT_O] = "attn_output",
    [GLM_FT_FFN_NORM] = "ffn_norm",  [GLM_FT_GATE_UP] = "ffn_up",         [GLM_FT_DOWN] = "ffn_down",
};

/* config.json as glm_config_to_json writes it (the keys of THUDM's configs, and of transformers'
 * GlmConfig), after model_type and architectures */
static const glm_family_out k_chatglm_written[] = {
    {GLM_FK_HIDDEN, NULL, NULL},       {GLM_FK_LAYERS, NULL, NULL},
    {GLM_FK_HEADS, NULL, NULL},        {GLM_FK_KV_GROUPS, NULL, NULL},
    {-1, "multi_query_attention", "true"},
    {GLM_FK_HEAD_DIM, NULL, NULL},     {GLM_FK_FFN, NULL, NULL},
    {GLM_FK_VOCAB, NULL, NULL},        {GLM_FK_EPS, NULL, NULL},
    {GLM_FK_ROPE, NULL, NULL},         {GLM_FK_QKV_BIAS, NULL, NULL},
    {-1, "add_bias_linear", "false"},  {-1, "rmsnorm", "true"},
    {-1, "post_layer_norm", "true"},   {GLM_FK_MAX_POSITIONS, NULL, NULL},
    {-1, "torch_dtype", "\"bfloat16\""},
};
static const glm_family_out k_hf_written[] = {
    {GLM_FK_HIDDEN, NULL, NULL},       {GLM_FK_LAYERS, NULL, NULL},
    {GLM_FK_HEADS, NULL, NULL},        {GLM_FK_KV_GROUPS, NULL, NULL},
    {GLM_FK_HEAD_DIM, NULL, NULL},     {GLM_FK_FFN, NULL, NULL},
    {GLM_FK_VOCAB, NULL, NULL},        {GLM_FK_EPS, NULL, NULL},
    {GLM_FK_ROPE, NULL, NULL},         {GLM_FK_ROTARY_FRACTION, NULL, NULL},
    {GLM_FK_QKV_BIAS, NULL, NULL},     {-1, "hidden_act", "\"silu\""},
    {GLM_FK_MAX_POSITIONS, NULL, NULL}, {-1, "dtype", "\"bfloat16\""},
};

/* llama.cpp's converter (convert_hf_to_gguf.py, ChatGLMModel) reads vocab_size even when
 * padded_vocab_size is there, and only THUDM's rope_ratio, layernorm_epsilon and seq_length */
static const glm_family_alias k_chatglm_aliases[] = {{GLM_FK_VOCAB, "vocab_size", 0}};
static const glm_family_alias k_hf_aliases[] = {
    {GLM_FK_ROPE, "rope_ratio", 10000.0}, {GLM_FK_EPS, "layernorm_epsilon", 0}, {GLM_FK_MAX_POSITIONS, "seq_length", 0}};

#define GLM4_TOKENIZER                                                                                   \
    .tokenizer = GLM_TOKENIZER_TIKTOKEN_GLM4, .pad_token_id = 151329, /* <|endoftext|> */               \
        .stop_ids = {151329, 151336, 151338}, /* <|endoftext|> <|user|> <|observation|> */               \
        .n_stop_ids = 3, .target_rule = "all" /* --train-on's default: every assistant turn, GLM-4's recipe */

static const glm_family k_rows[] = {
    {
        .layout = GLM_LAYOUT_CHATGLM,
        .layout_name = "chatglm",
        .title = "THUDM GLM-4-9B",
        .model_types = {"chatglm"},
        .architectures = {"ChatGLMModel"},
        .config_class = "ChatGLMConfig",
        .keys = {[GLM_FK_HIDDEN] = k_hidden_size, [GLM_FK_LAYERS] = "num_layers",
                 [GLM_FK_HEADS] = k_num_attention_heads, [GLM_FK_KV_GROUPS] = "multi_query_group_num",
                 [GLM_FK_HEAD_DIM] = "kv_channels", [GLM_FK_FFN] = "ffn_hidden_size",
                 [GLM_FK_VOCAB] = "padded_vocab_size", [GLM_FK_EPS] = "layernorm_epsilon",
                 [GLM_FK_ROPE] = "rope_ratio", [GLM_FK_QKV_BIAS] = "add_qkv_bias",
                 [GLM_FK_MAX_POSITIONS] = "seq_length"},
        .rope_scale = 10000.0, /* THUDM's base is 10000 x rope_ratio */
        .rope_default_base = 10000.0,
        .eps_default = 1e-5f,
        .qkv_bias_default = true,
        .rotary_fraction = 0.5, /* RotaryEmbedding(kv_channels // 2) */
        .written = k_chatglm_written,
        .n_written = sizeof k_chatglm_written / sizeof *k_chatglm_written,
        .aliases = k_chatglm_aliases,
        .n_aliases = sizeof k_chatglm_aliases / sizeof *k_chatglm_aliases,
        .written_max_positions = 131072,
        .tensors = {[GLM_FT_EMBED] = {"transformer.embedding", "word_embeddings"},
                    [GLM_FT_FINAL_NORM] = {"transformer.encoder", "final_layernorm"},
                    [GLM_FT_OUTPUT] = {"transformer", "output_layer"},
                    [GLM_FT_ATTN_NORM] = {NULL, k_input_layernorm},
                    [GLM_FT_QKV] = {"self_attention", k_query_key_value},
                    [GLM_FT_O] = {"self_attention", k_dense},
                    [GLM_FT_FFN_NORM] = {NULL, k_post_attention_layernorm},
                    [GLM_FT_GATE_UP] = {"mlp", k_dense_h_to_4h},
                    [GLM_FT_DOWN] = {"mlp", k_dense_4h_to_h}},
        .layer_prefix = "transformer.encoder.layers",
        .ignored = {"transformer.rotary_pos_emb.inv_freq"}, /* a buffer; RoPE comes from the config */
        .qkv_fused = true,
        .n_linears = 4,
        .linears = {GLM_FT_QKV, GLM_FT_O, GLM_FT_GATE_UP, GLM_FT_DOWN},
        .linear_names = {k_query_key_value, k_dense, k_dense_h_to_4h, k_dense_4h_to_h},
        /* vLLM's ChatGLMForCausalLM takes LoRA on all four */
        .linear_vllm = {true, true, true, true},
        .embedding_padding_idx = false, /* the remote code builds the embedding without padding_idx */
        .gguf_arch = "chatglm",
        .gguf_layer_prefix = "blk",
        .gguf = k_gguf,
        .post_norms = false,
        .rope_style = GLM_ROPE_INTERLEAVED_PAIRS,
        .tied_embeddings = false,
        .fused_gate_up = true,
        GLM4_TOKENIZER,
    },
    {
        .layout = GLM_LAYOUT_HF,
        .layout_name = "hf",
        .title = "GLM-4-9B -hf",
        .model_types = {"glm"},
        .architectures = {"GlmForCausalLM"},
        .config_class = "GlmConfig",
        .keys = {[GLM_FK_HIDDEN] = k_hidden_size, [GLM_FK_LAYERS] = "num_hidden_layers",
                 [GLM_FK_HEADS] = k_num_attention_heads, [GLM_FK_KV_GROUPS] = "num_key_value_heads",
                 [GLM_FK_HEAD_DIM] = "head_dim", [GLM_FK_FFN] = "intermediate_size",
                 [GLM_FK_VOCAB] = "vocab_size", [GLM_FK_EPS] = "rms_norm_eps",
                 [GLM_FK_ROPE] = "rope_theta", [GLM_FK_ROTARY_FRACTION] = "partial_rotary_factor",
                 [GLM_FK_QKV_BIAS] = "attention_bias", [GLM_FK_MAX_POSITIONS] = "max_position_embeddings"},
        .kv_groups_optional = true,
        .head_dim_optional = true,
        .rope_object = "rope_parameters",
        .rope_scale = 1.0,
        .rope_default_base = 10000.0,
        .eps_default = 1e-5f,
        .qkv_bias_default = true,
        .rotary_fraction = 0.5,
        .written = k_hf_written,
        .n_written = sizeof k_hf_written / sizeof *k_hf_written,
        .aliases = k_hf_aliases,
        .n_aliases = sizeof k_hf_aliases / sizeof *k_hf_aliases,
        .written_max_positions = 131072,
        /* the wrong value ships in the GLM-4-9B -hf configs (C 4096, 40 layers); a small model with
           base 10000 (tests, demos) is taken as it says */
        .rope_suspect_base = 10000.0,
        .rope_suspect_C = 4096,
        .rope_suspect_L = 40,
        .rope_suspect_warning =
            "rope_theta is 10000. Real GLM-4-9B -hf configs carry this wrong value: the THUDM configs say "
            "10000 x rope_ratio = 5e6 (glm-4-9b-chat) or 1e8 (glm-4-9b-chat-1m). Training with the wrong RoPE "
            "base damages the model. hint: pass --rope-theta 1e8 (or 5e6) unless this really is a model trained "
            "with base 10000",
        .tensors = {[GLM_FT_EMBED] = {"model", "embed_tokens"},
                    [GLM_FT_FINAL_NORM] = {"model", "norm"},
                    [GLM_FT_OUTPUT] = {NULL, "lm_head"},
                    [GLM_FT_ATTN_NORM] = {NULL, k_input_layernorm},
                    [GLM_FT_Q] = {"self_attn", k_q_proj},
                    [GLM_FT_K] = {"self_attn", k_k_proj},
                    [GLM_FT_V] = {"self_attn", k_v_proj},
                    [GLM_FT_O] = {"self_attn", k_o_proj},
                    [GLM_FT_FFN_NORM] = {NULL, k_post_attention_layernorm},
                    [GLM_FT_GATE_UP] = {"mlp", k_gate_up_proj},
                    [GLM_FT_DOWN] = {"mlp", k_down_proj}},
        .layer_prefix = "model.layers",
        .qkv_fused = false,
        .n_linears = 6,
        .linears = {GLM_FT_Q, GLM_FT_K, GLM_FT_V, GLM_FT_O, GLM_FT_GATE_UP, GLM_FT_DOWN},
        .linear_names = {k_q_proj, k_k_proj, k_v_proj, k_o_proj, k_gate_up_proj, k_down_proj},
        /* vLLM runs GlmForCausalLM as its LlamaForCausalLM, whose LoRA expects gate_proj and up_proj
           and refuses an adapter module named gate_up_proj */
        .linear_vllm = {true, true, true, true, false, true},
        .embedding_padding_idx = true, /* GlmModel: nn.Embedding(vocab_size, C, padding_idx=pad_token_id) */
        .gguf_arch = "chatglm",
        .gguf_layer_prefix = "blk",
        .gguf = k_gguf,
        .post_norms = false,
        .rope_style = GLM_ROPE_INTERLEAVED_PAIRS,
        .tied_embeddings = false,
        .fused_gate_up = true,
        GLM4_TOKENIZER,
    },
};

/* GLM relatives whose config.json says what they are and that glmtune does not implement. */
static const struct {
    const char *model_type, *architecture, *title, *has;
} k_refused[] = {
    {"glm4", "Glm4ForCausalLM", "GLM-4-0414",
     "post_self_attn_layernorm and post_mlp_layernorm (a norm after attention and after the MLP in every layer)"},
    {"glm4_moe", "Glm4MoeForCausalLM", "GLM-4.5 / GLM-4.5-Air",
     "a mixture-of-experts MLP (mlp.experts.N and a router, mlp.gate)"},
};

int glm_family_count(void) { return (int)(sizeof k_rows / sizeof *k_rows); }

const glm_family *glm_family_at(int i) { return i >= 0 && i < glm_family_count() ? &k_rows[i] : NULL; }

const glm_family *glm_family_get(glm_layout layout) {
    for (int i = 0; i < glm_family_count(); i++)
        if (k_rows[i].layout == layout) return &k_rows[i];
    return &k_rows[0];
}

void glm_family_supported(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < glm_family_count() && k < n; i++) {
        const glm_family *f = &k_rows[i];
        int w = snprintf(buf + k, n - k, "%s%s (%s, %s)", i ? ", " : "", f->model_types[0], f->architectures[0], f->title);
        if (w < 0) break;
        k += (size_t)w;
    }
}

/* Whether the JSON array (or string) `arch` names `name`. */
static bool names_arch(const json_t *arch, const char *name) {
    if (json_is_string(arch)) return !strcmp(json_string_value(arch), name);
    for (size_t i = 0; json_is_array(arch) && i < json_array_size(arch); i++)
        if (json_is_string(json_array_get(arch, i)) && !strcmp(json_string_value(json_array_get(arch, i)), name))
            return true;
    return false;
}

glm_status glm_family_for_config(const json_t *root, const char *path, const glm_family **out) {
    *out = NULL;
    const json_t *jmt = json_object_get(root, "model_type");
    const char *mt = json_string_value(jmt);
    const json_t *arch = json_object_get(root, "architectures");
    for (int i = 0; mt && i < glm_family_count(); i++)
        for (int k = 0; k < 2 && k_rows[i].model_types[k]; k++)
            if (!strcmp(mt, k_rows[i].model_types[k])) {
                *out = &k_rows[i];
                return GLM_OK;
            }
    char sup[512];
    glm_family_supported(sup, sizeof sup);
    for (size_t i = 0; i < sizeof k_refused / sizeof *k_refused; i++)
        if ((mt && !strcmp(mt, k_refused[i].model_type)) || names_arch(arch, k_refused[i].architecture))
            return glm_err(GLM_ERR_UNSUPPORTED, "%s: %s (model_type \"%s\", %s) has %s, which glmtune does not "
                           "implement; supported: %s", path, k_refused[i].title, k_refused[i].model_type,
                           k_refused[i].architecture, k_refused[i].has, sup);
    if (!mt)
        return glm_err(GLM_ERR_FORMAT, "%s: model_type is %s; glmtune reads the config.json of a model it knows by its "
                       "model_type; supported: %s; hint: the config.json of the checkpoint as published has it",
                       path, jmt ? "not a string" : "missing", sup);
    return glm_err(GLM_ERR_FORMAT, "%s: model_type \"%s\" is not a model glmtune trains; supported: %s", path, mt, sup);
}

glm_status glm_family_check_block(const glm_family *f) {
    const char *what = f->post_norms ? "post-attention and post-MLP norms"
                       : f->rope_style != GLM_ROPE_INTERLEAVED_PAIRS ? "a RoPE style other than interleaved pairs"
                       : f->tied_embeddings ? "an output layer tied to the embedding"
                       : !f->fused_gate_up ? "separate gate and up matrices"
                                           : NULL;
    if (what)
        return glm_err(GLM_ERR_UNSUPPORTED, "%s (model_type \"%s\"): the block has %s, which glmtune's model does not "
                       "implement", f->title, f->model_types[0], what);
    return GLM_OK;
}

static bool layer_tensor(glm_family_tensor t) { return t >= GLM_FT_ATTN_NORM; }

/* "<prefix>.<layer>.<group>.<name>" (prefix and layer for per-layer tensors, group when set) + suffix. */
static bool join(const char *prefix, int layer, const char *group, const char *name, const char *suffix, char *buf,
                 size_t n) {
    char lp[96] = "";
    if (prefix) snprintf(lp, sizeof lp, "%s.%d.", prefix, layer);
    int w = snprintf(buf, n, "%s%s%s%s%s", lp, group ? group : "", group ? "." : "", name, suffix);
    return w >= 0 && (size_t)w < n;
}

bool glm_family_module_path(const glm_family *f, glm_family_tensor t, int layer, char *buf, size_t n) {
    buf[0] = 0;
    if (t < 0 || t >= GLM_FT_COUNT || !f->tensors[t].name) return false;
    return join(layer_tensor(t) ? f->layer_prefix : NULL, layer, f->tensors[t].group, f->tensors[t].name, "", buf, n);
}

bool glm_family_tensor_name(const glm_family *f, glm_family_tensor t, int layer, bool bias, char *buf, size_t n) {
    buf[0] = 0;
    if (t < 0 || t >= GLM_FT_COUNT || !f->tensors[t].name) return false;
    return join(layer_tensor(t) ? f->layer_prefix : NULL, layer, f->tensors[t].group, f->tensors[t].name,
                bias ? ".bias" : ".weight", buf, n);
}

bool glm_family_gguf_name(const glm_family *f, glm_family_tensor t, int layer, bool bias, char *buf, size_t n) {
    buf[0] = 0;
    if (t < 0 || t >= GLM_FT_COUNT || !f->tensors[t].name || !f->gguf[t]) return false;
    return join(layer_tensor(t) ? f->gguf_layer_prefix : NULL, layer, NULL, f->gguf[t], bias ? ".bias" : ".weight",
                buf, n);
}

bool glm_family_ignored(const glm_family *f, const char *name) {
    for (int i = 0; i < 2 && f->ignored[i]; i++)
        if (!strcmp(name, f->ignored[i])) return true;
    return false;
}

bool glm_family_lora_weight(const glm_family *f, const char *name) {
    size_t pl = strlen(f->layer_prefix);
    if (strncmp(name, f->layer_prefix, pl) || name[pl] != '.' || name[pl + 1] < '0' || name[pl + 1] > '9') return false;
    long layer = 0;
    for (const char *d = name + pl + 1; *d >= '0' && *d <= '9'; d++)
        if ((layer = layer * 10 + (*d - '0')) > 1000000) return false;
    for (int k = 0; k < f->n_linears; k++) {
        char path[256];
        if (!glm_family_module_path(f, f->linears[k], (int)layer, path, sizeof path)) continue;
        size_t n = strlen(path);
        if (!strncmp(name, path, n) && (!strcmp(name + n, ".lora_A.weight") || !strcmp(name + n, ".lora_B.weight")))
            return true;
    }
    return false;
}
