/* lora/model/model_prove.h: the memory proof of a training step too long to run whole (glmtune bench
 * --max-seq-len, where a step would take longer than --max-step-seconds, or --prove-memory): every
 * buffer the plan holds for B rows of T tokens is allocated (glm_model_prepare: the plan's table and
 * the backend's scratch, cuDNN's workspace included) and the first layers' forward and backward run
 * in that workspace, with the loss head, so that the device's peak is the full step's (a layer's
 * buffers are the same for every layer) and, where the plan offloads layer inputs, one goes to host
 * memory and comes back. The step time is extrapolated from the layers measured. */
#ifndef GLM_LORA_MODEL_PROVE_H
#define GLM_LORA_MODEL_PROVE_H

#include "lora/model/model.h"

typedef struct glm_prove_result {
    glm_plan plan;     /* the whole step's plan (every buffer of it allocated) */
    int layers;        /* layers run (forward and backward) */
    double seconds;    /* their step: embedding, `layers` layers, loss head, their backward (synchronised) */
    double step_est_s; /* the whole step extrapolated: seconds x L / layers (the embedding and loss head counted
                          L / layers times: an upper bound) */
} glm_prove_result;

/* Runs the proof for batch b (its B rows of T tokens) with checkpointing `mode`: prepares the whole
 * step's workspace, then one training step of the first n_layers layers (m->run_layers; 2 when
 * n_layers <= 0, so that with offloaded layer inputs layer 0's input is downloaded and uploaded
 * again), gradients accumulated into lora's (zero them before and after as needed). Writes *out.
 * Errors: those of glm_model_prepare and glm_model_step (GLM_ERR_NOMEM naming the buffer, the cap). */
glm_status glm_model_prove_memory(glm_model *m, glm_lora *lora, const glm_batch *b, glm_ckpt_mode mode, int n_layers,
                                  glm_prove_result *out);

#endif
