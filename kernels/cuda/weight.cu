/* kernels/cuda/weight.cu: weight_quantize / weight_dequantize (kernels/backend.h) of the CUDA
 * backend, over the 4-bit kernels of kernels/cuda/quant4.cu (the same bytes as the CPU reference),
 * queued on the backend's stream. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quant4_cuda.h"

namespace glmcu {

static glm_status q4_view(const glm_weight *w, glm_q4_tensor *q, const char *op) {
    /* (kernels/weight.c's helpers live in the program, not in this module) */
    if (w->fmt != GLM_WF_NF4 && w->fmt != GLM_WF_FP4)
        return glm_err(GLM_ERR_ARG, "%s: the weight is dense (format %d), not a 4-bit format", op, (int)w->fmt);
    q->type = w->fmt == GLM_WF_FP4 ? GLM_Q4_FP4 : GLM_Q4_NF4;
    q->double_quant = w->double_quant;
    q->n = w->n;
    q->codes = (uint8_t *)w->data;
    q->absmax = w->double_quant ? NULL : (float *)w->absmax;
    q->absmax_codes = w->double_quant ? (uint8_t *)w->absmax : NULL;
    q->absmax2 = w->absmax2;
    q->offset = w->offset;
    return GLM_OK;
}

glm_status cu_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st) {
    cuda_impl *I = IMPL(be);
    if (dst->fmt == GLM_WF_FP8_E4M3) return cu_fp8_weight_quantize(be, dst, src, st);
    glm_q4_tensor q;
    GLM_TRY(q4_view(dst, &q, "weight quantize"));
    if (st != GLM_DT_BF16 && st != GLM_DT_F32)
        return glm_err(GLM_ERR_UNSUPPORTED, "weight quantize: source dtype %d (f32 or bf16)", (int)st);
    size_t wsb = glm_q4_cuda_quantize_workspace(q.n, q.double_quant);
    void *ws = NULL;
    if (wsb) GLM_TRY(scratch(I, SCR_Q4, wsb, &ws));
    return glm_q4_cuda_quantize(&q, src, st == GLM_DT_BF16, ws, I->s);
}

glm_status cu_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src) {
    if (src->fmt == GLM_WF_FP8_E4M3) return cu_fp8_weight_dequantize(be, dst, dt, src);
    glm_q4_tensor q;
    GLM_TRY(q4_view(src, &q, "weight dequantize"));
    if (dt != GLM_DT_BF16) return glm_err(GLM_ERR_UNSUPPORTED, "weight dequantize: the CUDA backend dequantizes to bf16");
    return glm_q4_cuda_dequantize_bf16(&q, dst, IMPL(be)->s);
}

}  // namespace glmcu
