/* kernels/cuda/weight.cu: weight_quantize / weight_dequantize (kernels/backend.h) of the CUDA
 * backend, over the 4-bit kernels of kernels/cuda/quant4.cu. */
#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

glm_status cu_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st, float offset) {
    (void)be, (void)dst, (void)src, (void)st, (void)offset;
    return glm_err(GLM_ERR_UNSUPPORTED, "weight quantize: not yet");
}

glm_status cu_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src) {
    (void)be, (void)dst, (void)dt, (void)src;
    return glm_err(GLM_ERR_UNSUPPORTED, "weight dequantize: not yet");
}

}  // namespace glmcu
