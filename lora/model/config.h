/* lora/model/config.h: a GLM-4 checkpoint's config.json, in either layout (docs/design.md §3):
 * THUDM `chatglm` (model_type "chatglm") or transformers `glm` (GlmForCausalLM, "-hf" repos);
 * the keys of each are rows of lora/model/family.h. */
#ifndef GLM_LORA_CONFIG_H
#define GLM_LORA_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

typedef enum {
    GLM_LAYOUT_CHATGLM = 0, /* transformer.encoder.layers.N.self_attention.query_key_value ... */
    GLM_LAYOUT_HF = 1,      /* model.layers.N.self_attn.{q,k,v,o}_proj, mlp.gate_up_proj ... */
} glm_layout;

/* "chatglm" / "hf" (the family row's layout_name). */
const char *glm_layout_name(glm_layout l);
/* Parses a row's layout name or model_type: "chatglm", or "hf" (also "glm"). Errors: GLM_ERR_ARG
 * naming the valid values. */
glm_status glm_layout_parse(const char *s, glm_layout *out);

typedef struct glm_config {
    glm_layout layout;
    int C;          /* hidden_size */
    int L;          /* num_layers | num_hidden_layers */
    int H;          /* num_attention_heads */
    int Hkv;        /* multi_query_group_num | num_key_value_heads */
    int Dh;         /* kv_channels | head_dim (default C / H) */
    int F;          /* ffn_hidden_size | intermediate_size */
    int V;          /* padded_vocab_size | vocab_size */
    float eps;      /* layernorm_epsilon | rms_norm_eps */
    double rope_base;  /* 10000 * rope_ratio | rope_theta (after any override) */
    int rope_dim;      /* rotated channels per head: Dh/2 (chatglm) | Dh * partial_rotary_factor */
    bool qkv_bias;     /* add_qkv_bias | attention_bias */
    int64_t max_positions; /* seq_length | max_position_embeddings (0 if absent) */
    bool rope_overridden;  /* rope_base came from rope_theta_override */
    bool rope_suspect;     /* hf config with rope_theta == 10000: likely wrong (docs/design.md §3) */
    /* Special token ids written by glm_config_to_json (pad_token_id, eos_token_id). When
     * has_token_ids is false: GLM-4's own (pad 151329 = <|endoftext|>, eos 151329, 151336,
     * 151338) when they fit the vocabulary, else pad null and no eos. */
    bool has_token_ids;
    int64_t pad_token_id;      /* < 0: null */
    int64_t eos_token_ids[4];
    int n_eos_token_ids;
} glm_config;

/* Reads `<dir>/config.json` (or `dir` itself when it names a .json file) into *cfg.
 * The layout is the row of lora/model/family.h whose model_type the config has ("chatglm" ->
 * GLM_LAYOUT_CHATGLM; "glm" -> GLM_LAYOUT_HF), and the fields are read under that row's keys; a
 * config without model_type is refused (every published GLM-4-9B config has one; no layout is
 * guessed from the keys). rope_theta_override > 0 replaces the config's RoPE base (the CLI's
 * --rope-theta). A config of a row with a known wrong RoPE base (GLM-4-9B -hf: rope_theta 10000
 * for C 4096, 40 layers) and no override gets a loud warning (the true base is 10000 * rope_ratio
 * of the THUDM config: 5e6 for glm-4-9b-chat, 1e8 for glm-4-9b-chat-1m) and cfg->rope_suspect = true.
 * Errors: GLM_ERR_IO (unreadable), GLM_ERR_FORMAT (bad JSON, missing or unknown model_type with the
 * supported ones listed, missing or non-positive field, H not a multiple of Hkv, odd rotary dims),
 * GLM_ERR_UNSUPPORTED (a GLM relative glmtune does not implement, e.g. GLM-4-0414 "glm4", named
 * with what it has), each naming the file and field. */
glm_status glm_config_load(const char *dir, double rope_theta_override, glm_config *cfg);

/* Checks the fields for consistency (positive sizes, H % Hkv == 0, rope_dim even, <= Dh).
 * `what` names the source for messages. Errors: GLM_ERR_FORMAT. */
glm_status glm_config_validate(const glm_config *cfg, const char *what);

/* The shape of a known GLM-4 model by name (glm-4-9b-chat-1m, glm-4-9b-chat, glm-4-9b), chatglm
 * layout, as docs/design.md §3 lists them: for benchmarks and plans without a checkpoint.
 * Errors: GLM_ERR_ARG naming the known names. */
glm_status glm_config_preset(const char *name, glm_config *cfg);

/* Writes cfg as config.json text of its layout (malloc'd, NUL-terminated) into *json: the keys,
 * their order and the constant ones as the layout's family row lists them (lora/model/family.h),
 * with pad_token_id and eos_token_id always inside the vocabulary (or null; without
 * cfg->has_token_ids the row's pad id and chat stop ids when all fit): transformers builds the
 * embedding with padding_idx = pad_token_id and fails on one outside it, and GlmConfig's default
 * (151329) is outside any vocabulary smaller than GLM-4's. Errors: GLM_ERR_NOMEM,
 * GLM_ERR_INTERNAL (a row whose written key has no name or value). */
glm_status glm_config_to_json(const glm_config *cfg, char **json);

/* Rows of query_key_value: (H + 2 Hkv) Dh. */
static inline int64_t glm_config_qkv_rows(const glm_config *c) { return (int64_t)(c->H + 2 * c->Hkv) * c->Dh; }

#endif
