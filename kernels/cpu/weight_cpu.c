/* kernels/cpu/weight_cpu.c: the CPU backend's weight_quantize / weight_dequantize
 * (kernels/backend.h), over the 4-bit reference in kernels/cpu/quant4.c. */
#include "kernels/backend.h"

glm_status glm_cpu_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st, float offset) {
    (void)be; (void)dst; (void)src; (void)st; (void)offset;
    return glm_err(GLM_ERR_UNSUPPORTED, "weight quantize: not yet");
}

glm_status glm_cpu_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src) {
    (void)be; (void)dst; (void)dt; (void)src;
    return glm_err(GLM_ERR_UNSUPPORTED, "weight dequantize: not yet");
}
