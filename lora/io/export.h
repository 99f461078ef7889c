/* lora/io/export.h: a trained LoRA as a PEFT adapter directory (adapter_config.json +
 * adapter_model.safetensors, loadable by PeftModel.from_pretrained), or merged into a copy of
 * the base checkpoint (W + scaling * B @ A) in the base's own layout and sharding. */
#ifndef GLM_EXPORT_H
#define GLM_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/status.h"
#include "lora/adapter/param.h"
#include "common/safetensors.h"

struct glm_backend;

/* The adapter settings that go into adapter_config.json. */
typedef struct glm_adapter_cfg {
    int r;                                  /* LoRA rank */
    double alpha;                           /* lora_alpha */
    double dropout;                         /* lora_dropout */
    const char *const *target_modules;      /* module names, e.g. "query_key_value" */
    size_t n_targets;
    bool use_rslora;                        /* scaling alpha/sqrt(r) instead of alpha/r */
    const char *base_model_name_or_path;    /* NULL -> JSON null */
} glm_adapter_cfg;

/* The PEFT prefix of every adapter key. */
#define GLM_PEFT_PREFIX "base_model.model."

/* Passed as `dtype` to glm_export_merged: keep each merged tensor's base dtype. */
#define GLM_EXPORT_SAME_DTYPE (-1)

/* adapter_config.json as a new JSON object (caller decrefs): peft_type "LORA", task_type
 * "CAUSAL_LM", r, lora_alpha, lora_dropout, target_modules, use_rslora (only when true: PEFT
 * <= 0.7 rejects the key), bias "none",
 * fan_in_fan_out false, base_model_name_or_path, inference_mode true, init_lora_weights true,
 * modules_to_save / layers_to_transform / layers_pattern / revision null, rank_pattern {},
 * alpha_pattern {}: only keys that PEFT has accepted since 0.6, so old and new PEFT load it.
 * Returns NULL when out of memory. */
json_t *glm_adapter_config_json(const glm_adapter_cfg *c);

/* Writes adapter_config.json and adapter_model.safetensors into the existing directory `dir`
 * (each file atomically). Tensors: "base_model.model.<param name>" in param order, converted
 * from fp32 to `dtype` (GLM_ST_F32, GLM_ST_BF16 or GLM_ST_F16; round to nearest even),
 * metadata {"format": "pt"}. be: the backend holding params' w (download through it), or NULL
 * for host memory. Errors: GLM_ERR_ARG (bad dtype, r < 1, a param without ".lora_A.weight" /
 * ".lora_B.weight" name), GLM_ERR_IO, GLM_ERR_NOMEM. */
glm_status glm_adapter_write_files(const char *dir, const struct glm_backend *be,
                                   const glm_param *params, size_t n, const glm_adapter_cfg *c,
                                   glm_st_dtype dtype);

/* Writes the directory `outdir` as a whole: fill(tmpdir, arg) writes its files into a fresh
 * "<outdir>.tmp.<pid>" beside it (leftovers of killed exports there are removed first), then
 * glm_commit_dir renames it over `outdir` (a symbolic link's target is replaced); on failure the
 * temporary directory is removed and any previous `outdir` stays. Errors: fill's, GLM_ERR_IO. */
glm_status glm_export_dir(const char *outdir, glm_status (*fill)(const char *tmpdir, void *arg), void *arg);

/* A PEFT adapter directory at `outdir`, written as a whole: the files go to "<outdir>.tmp.<pid>",
 * then glm_commit_dir renames it over `outdir` (a kill leaves any previous `outdir` intact).
 * Errors as glm_adapter_write_files. */
glm_status glm_export_adapter(const char *outdir, const struct glm_backend *be,
                              const glm_param *params, size_t n, const glm_adapter_cfg *c,
                              glm_st_dtype dtype);

/* Merged model: for every tensor of the base checkpoint `base_dir` (sharded via its
 * model.safetensors.index.json, or one model.safetensors):
 *   "<module>.weight" with LoRA params "<module>.lora_A.weight" A [r, in] and
 *   "<module>.lora_B.weight" B [out, r]:  W' = W + scaling * (B @ A), W [out, in]
 *     computed in fp32 (B@A accumulated in double, scaling applied in double, added to fp32 W,
 *     one rounding), stored as `dtype` (GLM_EXPORT_SAME_DTYPE: the base tensor's dtype; or
 *     GLM_ST_F32 / GLM_ST_BF16 / GLM_ST_F16);
 *   every other tensor: copied byte-exact with GLM_EXPORT_SAME_DTYPE; with a dtype, every
 *     floating-point tensor is converted to it (integer tensors are copied) and config.json's
 *     torch_dtype (and dtype) say so; in the hf layout, config.json's pad_token_id is made valid
 *     for the vocabulary when it is not (or is absent, where GlmConfig's default 151329 applies):
 *     the first eos_token_id inside the vocabulary, else null, so that transformers loads it.
 * Same shard file names and tensor order; index.json with the same weight_map (total_size
 * recomputed); config.json, generation_config.json, tokenizer files (tokenizer.model,
 * tokenizer_config.json, tokenizer.json, special_tokens_map.json, added_tokens.json) and the
 * remote-code *.py files copied when present. scaling = alpha / r (or alpha / sqrt(r) with
 * rslora). Written as a directory like glm_export_adapter.
 * Errors: GLM_ERR_MISMATCH when an adapted module is missing in the base or shapes disagree
 * (names the module; hint: the adapter was trained on the other checkpoint layout),
 * GLM_ERR_FORMAT/IO from reading the base, GLM_ERR_NOMEM. */
glm_status glm_export_merged(const char *base_dir, const char *outdir,
                             const struct glm_backend *be, const glm_param *params, size_t n,
                             double scaling, int dtype);

/* Base tensor t as float32 into `out` (t->numel floats), merged as glm_export_merged merges it
 * when params adapt it ("<module>.lora_A.weight" / ".lora_B.weight" beside t's "<module>.weight":
 * W + scaling * (B @ A), B@A accumulated in double, one rounding to float32); used (n flags, or
 * NULL) marks the two params consumed. The one merge of every export format (safetensors here,
 * GGUF in gguf_export.c). Errors: GLM_ERR_MISMATCH (only one of A / B, shapes that do not fit,
 * naming the module), GLM_ERR_UNSUPPORTED (t not floating point), GLM_ERR_NOMEM. */
glm_status glm_export_merged_f32(const glm_st_tensor *t, const struct glm_backend *be, const glm_param *params,
                                 size_t n, double scaling, bool *used, float *out);

/* Copies params[i].w (numel floats) to host memory `dst` (through be->download, or memcpy when
 * be is NULL). Shared with checkpoint.c. */
glm_status glm_param_download(const struct glm_backend *be, const glm_param *p, float *dst);

#endif
