/* lora/adapter/lora.h: LoRA adapters on GLM-4's linear layers (Hu et al. 2021; PEFT's LoraLayer).
 * For a frozen linear y = x W^T with W [out, in], a target module adds
 *     y += scaling * dropout(x) A^T B^T,   A = lora_A [r, in], B = lora_B [out, r],
 * scaling = alpha / r, or alpha / sqrt(r) with rsLoRA (Kalajdzievski 2023; PEFT use_rslora).
 * Module names are the checkpoint layout's own (docs/design.md §3; the linears of its family row,
 * lora/model/family.h):
 *   chatglm: query_key_value, dense (self_attention.dense only), dense_h_to_4h, dense_4h_to_h
 *   hf:      q_proj, k_proj, v_proj, o_proj, gate_up_proj, down_proj
 * In the model the hf q/k/v_proj are the three row blocks of one fused query_key_value, so a
 * q_proj adapter adds to rows [0, H Dh) of it, k_proj to [H Dh, (H+Hkv) Dh), v_proj to the rest.
 * Weights, grads live in backend memory as fp32 (lora/adapter/param.h). */
#ifndef GLM_LORA_LORA_H
#define GLM_LORA_LORA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/backend.h"
#include "lora/model/config.h"
#include "lora/adapter/param.h"
#include "lora/model/plan.h"

struct glm_model;

/* The base linear a LoRA module attaches to. */
typedef enum {
    GLM_LIN_QKV = 0,   /* query_key_value [(H+2Hkv) Dh, C] (+ bias) */
    GLM_LIN_DENSE = 1, /* self_attention.dense / o_proj [C, H Dh] */
    GLM_LIN_H4H = 2,   /* dense_h_to_4h / gate_up_proj [2F, C] */
    GLM_LIN_4HH = 3,   /* dense_4h_to_h / down_proj [C, F] */
} glm_linear;

typedef struct glm_lora_config {
    int r;               /* rank, > 0 */
    float alpha;         /* lora_alpha */
    float dropout;       /* lora_dropout in [0, 1): PEFT applies it to the LoRA branch's input */
    bool use_rslora;     /* scaling alpha / sqrt(r) instead of alpha / r */
    const char *targets; /* comma-separated module names of the layout, or "all" / "all-linear",
                            or "vllm" (all but the hf layout's gate_up_proj, which vLLM cannot
                            load); NULL means "all" */
} glm_lora_config;

/* One adapter: the module `module` (index into glm_lora_module_names) of layer `layer`. */
typedef struct glm_lora_site {
    int layer;
    int module;        /* index in the layout's module list */
    glm_linear lin;    /* base linear it adds to */
    int64_t row0;      /* first output row of the base linear it adds to */
    int64_t out, in;   /* lora_B [out, r], lora_A [r, in] */
    int pa, pb;        /* indices of lora_A and lora_B in the param list */
} glm_lora_site;

typedef struct glm_lora {
    const glm_backend *be;
    glm_layout layout;
    int L;
    int r;
    float alpha, dropout, scaling;
    bool use_rslora;
    bool module_on[6];        /* which of the layout's modules are targets */
    int n_sites;
    glm_lora_site *sites;     /* ordered by layer, then module */
    int *layer_first;         /* [L] first site index of each layer */
    int *layer_count;         /* [L] number of sites in each layer */
    int n_params;
    glm_param *params;        /* [2 n_sites]: per site lora_A then lora_B */
    float *w_flat, *g_flat;   /* every param's weights and gradients, at params[i].flat_off ([flat_n]) */
    int64_t flat_n;
} glm_lora;

/* The module names of a layout (its family row's linear_names), in the fixed order used for params
 * (n = 4 or 6). */
const char *const *glm_lora_module_names(glm_layout layout, int *n);

/* Builds an adapter for `model` with PEFT's default init: lora_A ~ kaiming_uniform(a = sqrt(5)),
 * i.e. U(-1/sqrt(in), 1/sqrt(in)), drawn from glm_rng seeded (seed, stream = param index) so it
 * is reproducible; lora_B = 0; grads = 0. Errors: GLM_ERR_ARG for r <= 0, dropout outside [0, 1),
 * or an unknown target (the message lists the valid names of the model's layout); GLM_ERR_NOMEM. */
glm_status glm_lora_create(const struct glm_model *model, const glm_lora_config *cfg, uint64_t seed, glm_lora **out);
void glm_lora_free(glm_lora *lora);

/* Loads a PEFT adapter directory (adapter_config.json + adapter_model.safetensors, keys
 * "base_model.model.<param name>") into the adapter's weights (any of F32/BF16/F16/F64, converted
 * to fp32). adapter_config.json's r, lora_alpha, use_rslora and target_modules must match the
 * adapter's config. Errors: GLM_ERR_IO / GLM_ERR_FORMAT (missing files, missing tensor, naming
 * the file and key), GLM_ERR_MISMATCH (r, alpha, targets or a shape differ: expected vs found). */
glm_status glm_lora_load_peft(glm_lora *lora, const char *adapter_dir);

/* Reads the target modules of adapter_config.json at `path` (a checkpoint's or an adapter's;
 * target_modules a list of names, or one name or "all" as a string) and compares them with the
 * adapter's own: *same = whether they are the same set of modules; theirs / mine = the two sets
 * as "name name " in the layout's module order (buffers of n bytes). Errors: GLM_ERR_IO (cannot
 * read the file), GLM_ERR_FORMAT (bad JSON, target_modules missing or not strings), GLM_ERR_ARG
 * (a name that is no module of the adapter's layout), each naming the file. */
glm_status glm_lora_config_targets(const glm_lora *lora, const char *path, char *theirs, char *mine, size_t n,
                                   bool *same);

/* The adapter's shape for the memory planner (lora/model/plan.h), from a model config and LoRA
 * settings (no allocation), or of an existing adapter. Errors: as glm_lora_create's checks. */
glm_status glm_lora_info_for(const glm_config *c, const glm_lora_config *cfg, glm_lora_info *out);
void glm_lora_info_of(const glm_lora *lora, glm_lora_info *out);

/* The flat parameter list (layer by layer, module by module, lora_A before lora_B). */
glm_param *glm_lora_params(glm_lora *lora, int *n);

/* Sets every param's g to zero. */
glm_status glm_lora_zero_grads(glm_lora *lora);

/* The PEFT module path of a site, e.g. "transformer.encoder.layers.3.self_attention.dense" or
 * "model.layers.3.self_attn.q_proj" (into buf, at most n bytes). */
void glm_lora_module_path(glm_layout layout, int layer, int module, char *buf, size_t n);


#endif
