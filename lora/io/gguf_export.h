/* lora/io/gguf_export.h: a trained LoRA as GGUF files for llama.cpp and Ollama (docs/design.md §9):
 * the adapter alone (llama.cpp's --lora), or merged into the base model (one model file, with
 * the tokenizer, and an Ollama Modelfile beside it). Tensor names come from the family row of
 * the layout (lora/model/family.h: `gguf`, "blk"), the merge from glm_export_merged_f32.
 *
 * Adapter file (what llama.cpp's convert_lora_to_gguf.py writes and src/llama-adapter.cpp reads):
 *   general.architecture (the row's gguf_arch, "chatglm"), general.type "adapter", adapter.type
 *   "lora", adapter.lora.alpha (f32): llama.cpp scales B A by alpha / r, r = lora_a's ne[1], so
 *   the PEFT scaling alpha / r is alpha itself and rsLoRA's alpha / sqrt(r) is alpha * sqrt(r);
 *   general.file_type, general.quantization_version 2; per adapted module of layer N the pair
 *   "blk.N.<gguf name>.weight.lora_a" = A [r, in] (GGUF dims [in, r]) and ".lora_b" = B [out, r]
 *   (GGUF dims [r, out]); the hf layout's q_proj / k_proj / v_proj are attn_q / attn_k / attn_v,
 *   each its own pair, as the hf model file has them.
 *
 * Model file (what convert_hf_to_gguf.py's ChatGLMModel writes, with the true RoPE base, eps and
 * context length for either layout, and llama.cpp's chatglm loader reads): general.architecture,
 * general.type "model", general.name, general.file_type, general.quantization_version 2;
 * <arch>.context_length, embedding_length, feed_forward_length, block_count,
 * attention.head_count, attention.head_count_kv, attention.layer_norm_rms_epsilon (f32),
 * rope.dimension_count (the rotated channels per head: Dh/2 for GLM-4), rope.freq_base (f32),
 * attention.key_length / value_length when Dh != C / H; the tokenizer (gguf_vocab.h); tensors
 * token_embd, output_norm, output, blk.N.{attn_norm, attn_qkv (+ bias) | attn_q/k/v (+ biases),
 * attn_output, ffn_norm, ffn_up (gate rows, then up rows, as stored), ffn_down}, every one of them
 * a ".weight"/".bias" of the base checkpoint; 1-D tensors F32, 2-D tensors the asked type. */
#ifndef GLM_LORA_GGUF_EXPORT_H
#define GLM_LORA_GGUF_EXPORT_H

#include <stddef.h>

#include "common/status.h"
#include "lora/adapter/param.h"
#include "lora/io/export.h"
#include "lora/io/gguf.h"
#include "lora/io/gguf_vocab.h"
#include "lora/model/family.h"

struct glm_backend;

#define GLM_GGUF_ADAPTER_FILE "adapter.gguf"
#define GLM_GGUF_MODEL_FILE "model.gguf"
#define GLM_GGUF_MODELFILE "Modelfile" /* Ollama's */

/* Passed as `type` to the merged writers: each 2-D tensor in the base checkpoint's dtype (F32,
 * F16 or BF16). */
#define GLM_GGUF_SAME_TYPE (-1)

/* The family row whose LoRA module names all of params[0..n) are ("<layer prefix>.N.<module>.
 * lora_A.weight" / ".lora_B.weight" of one of its linears), into *out. Errors: GLM_ERR_MISMATCH
 * naming the first param no row places (an adapter of modules llama.cpp has no LoRA name for),
 * GLM_ERR_ARG (no params). */
glm_status glm_gguf_adapter_family(const glm_param *params, size_t n, const glm_family **out);

/* The adapter GGUF at `path` (written durably), of type F32, F16 or BF16 (values rounded to
 * nearest even). be: the backend holding params' w, or NULL for host memory.
 * Errors: GLM_ERR_ARG (another type, r < 1), GLM_ERR_MISMATCH (glm_gguf_adapter_family's; a module
 * with one of A / B, or A [r, in] and B [out, r] whose r differ), GLM_ERR_NUMERIC (a non-finite
 * weight, named), GLM_ERR_IO, GLM_ERR_NOMEM. */
glm_status glm_gguf_write_adapter(const char *path, const struct glm_backend *be, const glm_param *params, size_t n,
                                  const glm_adapter_cfg *c, glm_ggml_type type);

/* The merged model GGUF at `path`: base_dir's checkpoint (config.json through its family row,
 * the safetensors, sharded or not) with the LoRA of params merged (scaling as glm_export_merged),
 * 2-D tensors of `type` (F32, F16, BF16, Q8_0, or GLM_GGUF_SAME_TYPE; a Q8_0 tensor whose rows
 * are not whole blocks of 32 is written F16, as llama.cpp's converter does, and logged), the
 * tokenizer of `vocab` (its vocab_size must be the config's). Errors: GLM_ERR_MISMATCH (a LoRA
 * param with no base tensor, a base tensor the GGUF has no place for, vocabulary sizes that
 * differ), GLM_ERR_FORMAT (a tensor the family row names missing or of the wrong shape),
 * glm_config_load's, glm_export_merged_f32's, glm_gguf_add_vocab's, GLM_ERR_IO, GLM_ERR_NOMEM. */
glm_status glm_gguf_write_merged(const char *path, const char *base_dir, const struct glm_backend *be,
                                 const glm_param *params, size_t n, double scaling, int type,
                                 const glm_gguf_vocab *vocab);

/* An Ollama Modelfile at `path`: FROM ./<model_file>, TEMPLATE with GLM-4's chat format in Go
 * template form ([gMASK]<sop>, then per message with content "<|role|>\n<content>", roles system,
 * user, assistant and tool as <|observation|>, then <|assistant|>, as tokenizer_config.json's
 * chat_template renders it without tools), PARAMETER stop for each chat stop id of the family row
 * (<|endoftext|>, <|user|>, <|observation|>), their strings looked up in vocab's specials. Errors: GLM_ERR_ARG (a stop id that is not one of vocab's specials),
 * GLM_ERR_IO. */
glm_status glm_gguf_write_modelfile(const char *path, const char *model_file, const glm_family *f,
                                    const glm_gguf_vocab *vocab);

/* Directories written as a whole (glm_export_dir): OUTDIR/adapter.gguf; or OUTDIR/model.gguf and
 * OUTDIR/Modelfile. Errors as the writers. */
glm_status glm_gguf_export_adapter(const char *outdir, const struct glm_backend *be, const glm_param *params,
                                   size_t n, const glm_adapter_cfg *c, glm_ggml_type type);
glm_status glm_gguf_export_merged(const char *base_dir, const char *outdir, const struct glm_backend *be,
                                  const glm_param *params, size_t n, double scaling, int type,
                                  const glm_gguf_vocab *vocab);

#endif
