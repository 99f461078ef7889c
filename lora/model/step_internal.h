/* lora/model/step_internal.h: what the files of the model's step share and nothing outside
 * lora/model/ may call (the public interface is lora/model/model.h). */
#ifndef GLM_LORA_STEP_INTERNAL_H
#define GLM_LORA_STEP_INTERNAL_H

#include "lora/model/model.h"

/* The sizes of m's training step (B rows of T tokens, loss chunks of loss_chunk rows) that decide
 * the backend's scratch: glm_scratch_shape_for with the model's context-parallel group, world
 * and base format (fp8). Overwrites *s. */
void glm_model_scratch_shape(const glm_model *m, int B, int T, int backward, int64_t loss_chunk, glm_scratch_shape *s);

#endif
