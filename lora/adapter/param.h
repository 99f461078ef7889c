/* lora/adapter/param.h: a trainable tensor as the optimizer, checkpoints, export and --dump-grads see it.
 * The LoRA adapter (lora/adapter/lora.h) exposes its weights as a flat list of glm_param, in a fixed
 * order (layer by layer, module by module, lora_A before lora_B). */
#ifndef GLM_PARAM_H
#define GLM_PARAM_H

#include <stdint.h>

#include "common/status.h"

typedef struct glm_param {
    char name[256];   /* PEFT key without the "base_model.model." prefix, e.g.
                         "transformer.encoder.layers.0.self_attention.query_key_value.lora_A.weight" */
    int ndim;         /* 2 */
    int64_t shape[2]; /* lora_A: [r, in_features]; lora_B: [out_features, r] */
    int64_t numel;
    float *w;         /* fp32 weights, in the backend's memory (host for cpu) */
    float *g;         /* fp32 gradient, same shape; accumulated by backward, zeroed by the trainer */
    float *w_flat, *g_flat; /* when not NULL: w = w_flat + flat_off, g = g_flat + flat_off, in two
                         buffers that hold every param of its owner at the same offsets, zeros
                         between them (the optimizer then updates them all in one call) */
    int64_t flat_off;
} glm_param;

/* The error (GLM_ERR_MISMATCH) for a tensor of an adapter or checkpoint file whose shape, `ndim` dims of
 * `shape`, is not the shape of the run's param p (the tensor `name` in `file`: the param itself or its
 * AdamW state). It says which dimension differs and what that means: the rank (lora_A's rows,
 * lora_B's columns: another lora-rank, hinting the rank to use) or a feature size (lora_A's columns
 * are the layer's input size, lora_B's rows its output size: the file was made for a model of another
 * size, hidden_size / ffn_hidden_size / heads, naming both sizes). Defined in lora/adapter/lora.c. */
glm_status glm_param_shape_error(const char *file, const char *name, int ndim, const int64_t *shape, const glm_param *p);

#endif
