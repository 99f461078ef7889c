/* lora/model/family.h: the model families glmtune trains, as data: one row per family and
 * checkpoint layout (docs/design.md §3). A row says which config.json it is (model_type,
 * architectures), which config keys hold the shape, the checkpoint's tensor names, the PEFT
 * target modules of its linears, the GGUF names llama.cpp uses for its tensors (docs/design.md §9),
 * the block it is (switches the model code checks), its tokenizer and chat stop ids. Every name
 * the loader (lora/model/model.c), init-model (model_init.c), config.json (config.c), LoRA
 * (lora/adapter/lora.c) and the exports (lora/io/export.c) use comes from here.
 *
 * Rows today, indexed by glm_layout:
 *   GLM_LAYOUT_CHATGLM: THUDM GLM-4-9B (model_type "chatglm", ChatGLMModel)
 *   GLM_LAYOUT_HF:      transformers GLM-4-9B -hf (model_type "glm", GlmForCausalLM)
 * Known relatives that are refused by name (glm_family_for_config): GLM-4-0414 ("glm4",
 * Glm4ForCausalLM: post-norms), GLM-4.5 ("glm4_moe", Glm4MoeForCausalLM: mixture of experts). */
#ifndef GLM_LORA_FAMILY_H
#define GLM_LORA_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"
#include "lora/model/config.h"

/* The config.json fields of the shape, by meaning; a row names each key (NULL: the family has
 * none, the row's default applies). */
typedef enum {
    GLM_FK_HIDDEN = 0,       /* C */
    GLM_FK_LAYERS,           /* L */
    GLM_FK_HEADS,            /* H */
    GLM_FK_KV_GROUPS,        /* Hkv */
    GLM_FK_HEAD_DIM,         /* Dh */
    GLM_FK_FFN,              /* F */
    GLM_FK_VOCAB,            /* V */
    GLM_FK_EPS,              /* RMSNorm eps */
    GLM_FK_ROPE,             /* the RoPE base, times the row's rope_scale */
    GLM_FK_ROTARY_FRACTION,  /* rotated share of each head's channels */
    GLM_FK_QKV_BIAS,         /* whether query_key_value has a bias */
    GLM_FK_MAX_POSITIONS,    /* context length */
    GLM_FK_COUNT
} glm_family_key;

/* The tensors of the block, by meaning. The first three are the model's, the others one per
 * layer. A layout has either the fused QKV or Q, K and V (with their biases). */
typedef enum {
    GLM_FT_EMBED = 0,   /* [V, C] */
    GLM_FT_FINAL_NORM,  /* [C] */
    GLM_FT_OUTPUT,      /* [V, C] */
    GLM_FT_ATTN_NORM,   /* [C] before attention */
    GLM_FT_QKV,         /* [(H + 2 Hkv) Dh, C] (+ bias [(H + 2 Hkv) Dh]) */
    GLM_FT_Q,           /* [H Dh, C] (+ bias) */
    GLM_FT_K,           /* [Hkv Dh, C] (+ bias) */
    GLM_FT_V,           /* [Hkv Dh, C] (+ bias) */
    GLM_FT_O,           /* [C, H Dh] */
    GLM_FT_FFN_NORM,    /* [C] before the MLP */
    GLM_FT_GATE_UP,     /* [2F, C]: gate rows, then up rows */
    GLM_FT_DOWN,        /* [C, F] */
    GLM_FT_COUNT
} glm_family_tensor;

/* A module's name: group (NULL: none) and name, so that a per-layer tensor is
 * "<layer prefix>.<N>.<group>.<name>.weight" and a model tensor "<group>.<name>.weight". */
typedef struct glm_family_name {
    const char *group;
    const char *name;
} glm_family_name;

/* One key of the config.json that glm_config_to_json writes, in order: a shape field
 * (key >= 0, a glm_family_key, written under the row's key name) or a constant (key < 0:
 * `name` with the JSON text `json`). */
typedef struct glm_family_out {
    int key;
    const char *name;
    const char *json;
} glm_family_out;

/* A key that the merged export's and init-model's config.json carry besides the row's own: the
 * other layout's name of a shape field, for readers that know only that one (llama.cpp's converter
 * reads THUDM's names, and vocab_size in either layout). Its value is the field's; for GLM_FK_ROPE
 * the base divided by rope_scale (THUDM's rope_ratio: base / 10000). glmtune's reader ignores it. */
typedef struct glm_family_alias {
    int key;            /* a glm_family_key */
    const char *name;
    double rope_scale;  /* GLM_FK_ROPE only */
} glm_family_alias;

typedef enum {
    GLM_ROPE_INTERLEAVED_PAIRS = 0, /* (x[2i], x[2i+1]) of the first rotated channels rotate together */
} glm_rope_style;

typedef enum {
    GLM_TOKENIZER_TIKTOKEN_GLM4 = 0, /* tokenizer.model: base64 token and rank per line, GLM-4's specials */
} glm_family_tokenizer;

#define GLM_FAMILY_MAX_LINEARS 6

typedef struct glm_family {
    glm_layout layout;
    const char *layout_name;         /* --layout's value: "chatglm", "hf" */
    const char *title;               /* for messages: "THUDM GLM-4-9B" */
    const char *model_types[2];      /* config.json model_type; [0] is written */
    const char *architectures[2];    /* config.json architectures; [0] is written */
    const char *config_class;        /* the Python class of config.json (for messages) */
    /* config.json */
    const char *keys[GLM_FK_COUNT];
    bool kv_groups_optional;         /* GLM_FK_KV_GROUPS absent: Hkv = H */
    bool head_dim_optional;          /* GLM_FK_HEAD_DIM absent or null: Dh = C / H */
    const char *rope_object;         /* an object whose rope and rotary-fraction keys come first
                                        (transformers 5's "rope_parameters"), or NULL */
    double rope_scale;               /* base = rope_scale x the GLM_FK_ROPE value (10000 x rope_ratio) */
    double rope_default_base;        /* base when the key is absent */
    float eps_default;
    bool qkv_bias_default;
    double rotary_fraction;          /* default; without a GLM_FK_ROTARY_FRACTION key the rotated
                                        channels are (int)(Dh x rotary_fraction), else lround */
    const glm_family_out *written;   /* glm_config_to_json's keys after model_type and architectures */
    size_t n_written;
    int64_t written_max_positions;   /* written when the config has none */
    const glm_family_alias *aliases; /* written after the row's keys (merged export, init-model) */
    size_t n_aliases;
    /* RoPE base the published configs of this row get wrong (docs/design.md §3): warn when the base is
       rope_suspect_base for a model of hidden size rope_suspect_C and rope_suspect_L layers */
    double rope_suspect_base;        /* 0: no warning for this row */
    int rope_suspect_C, rope_suspect_L;
    const char *rope_suspect_warning; /* printf format taking the config's path */
    /* checkpoint tensors */
    glm_family_name tensors[GLM_FT_COUNT]; /* name NULL: not in this layout */
    const char *layer_prefix;        /* "transformer.encoder.layers" */
    const char *ignored[2];          /* tensors present in checkpoints that carry nothing to load */
    bool qkv_fused;                  /* GLM_FT_QKV, else GLM_FT_Q/K/V */
    /* LoRA: the PEFT target modules, in parameter order */
    int n_linears;
    glm_family_tensor linears[GLM_FAMILY_MAX_LINEARS];
    const char *linear_names[GLM_FAMILY_MAX_LINEARS]; /* PEFT's names: tensors[linears[i]].name */
    bool linear_vllm[GLM_FAMILY_MAX_LINEARS]; /* vLLM loads an adapter on it ("vllm" target rule) */
    bool embedding_padding_idx;      /* transformers builds the embedding with padding_idx = pad_token_id
                                        (< vocabulary), and config_class defaults pad_token_id to the
                                        row's pad_token_id */
    /* GGUF (llama.cpp), docs/design.md §9 */
    const char *gguf_arch;           /* general.architecture: "chatglm" */
    const char *gguf_layer_prefix;   /* "blk" */
    const char *const *gguf;         /* [GLM_FT_COUNT]: "token_embd", "attn_qkv", ... (the layout's
                                        tensors[t] says whether it has tensor t) */
    /* the block */
    bool post_norms;                 /* a norm after attention and after the MLP (GLM-4-0414) */
    glm_rope_style rope_style;
    bool tied_embeddings;            /* the output layer is the embedding */
    bool fused_gate_up;              /* one [gate | up] matrix */
    /* tokenizer and chat */
    glm_family_tokenizer tokenizer;
    int64_t pad_token_id;            /* written when it fits the vocabulary */
    int64_t stop_ids[3];             /* chat stop ids (eos_token_id) */
    int n_stop_ids;
    const char *target_rule;         /* the training targets' rule (docs/design.md §3 "Targets") */
} glm_family;

/* The row of a layout (never NULL for a valid glm_layout). */
const glm_family *glm_family_get(glm_layout layout);

/* The number of rows, and row i (i < glm_family_count()). */
int glm_family_count(void);
const glm_family *glm_family_at(int i);

/* The row of config.json `root` (a jansson object), read from `path` (for messages), into *out.
 * The row is the one whose model_types holds root's "model_type". Errors (messages name the
 * path): GLM_ERR_UNSUPPORTED for a known GLM relative glmtune does not implement, named with what
 * it has that glmtune lacks ("GLM-4-0414 (Glm4ForCausalLM) has post_self_attn_layernorm and
 * post_mlp_layernorm, which glmtune does not implement; supported: ..."), GLM_ERR_FORMAT for any
 * other model_type, or a missing one (every GLM-4-9B config.json has one), listing the
 * supported model_types. */
glm_status glm_family_for_config(const json_t *root, const char *path, const glm_family **out);

/* "chatglm (ChatGLMModel, THUDM GLM-4-9B), glm (GlmForCausalLM, GLM-4-9B -hf)" into buf (n bytes). */
void glm_family_supported(char *buf, size_t n);

/* The block switches that glmtune's model implements (no post-norms, interleaved-pair RoPE,
 * an output layer of its own, a fused gate/up matrix): GLM_OK, or GLM_ERR_UNSUPPORTED naming the
 * row and the switch. */
glm_status glm_family_check_block(const glm_family *f);

/* The checkpoint name of tensor t (a weight, or with bias its bias) of layer `layer` (ignored for
 * the model's tensors) into buf (n bytes): "transformer.encoder.layers.3.self_attention.
 * query_key_value.weight". Returns false when the layout has no such tensor (buf = ""). */
bool glm_family_tensor_name(const glm_family *f, glm_family_tensor t, int layer, bool bias, char *buf, size_t n);

/* The module path of tensor t of layer `layer` (PEFT's module name: the tensor name without
 * ".weight"): "model.layers.3.self_attn.q_proj". Returns false when the layout has none. */
bool glm_family_module_path(const glm_family *f, glm_family_tensor t, int layer, char *buf, size_t n);

/* The GGUF name llama.cpp gives tensor t of layer `layer`: "blk.3.attn_qkv.weight" (".bias" with
 * bias), "token_embd.weight". Returns false when the layout has no such tensor. */
bool glm_family_gguf_name(const glm_family *f, glm_family_tensor t, int layer, bool bias, char *buf, size_t n);

/* Whether `name` is one of the row's tensors that checkpoints carry and nothing loads
 * (transformer.rotary_pos_emb.inv_freq). */
bool glm_family_ignored(const glm_family *f, const char *name);

/* Whether `name` (an adapter tensor without PEFT's "base_model.model.") is a LoRA weight of one of
 * the row's linears: "<module path of layer N>.lora_A.weight" or ".lora_B.weight". */
bool glm_family_lora_weight(const glm_family *f, const char *name);

#endif
