/* kernels/cpu/weight_cpu.c: the CPU backend's weight_quantize / weight_dequantize
 * (kernels/backend.h) over the 4-bit reference of kernels/cpu/quant4.c (a glm_weight's buffers
 * seen as a glm_q4_tensor, host memory on this backend) and the fp8 one of kernels/cpu/fp8_cpu.c. */
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/quant4.h"

/* kernels/cpu/fp8_cpu.c */
glm_status glm_cpu_fp8_weight_quantize(glm_weight *dst, const void *src, glm_dtype st);
glm_status glm_cpu_fp8_weight_dequantize(void *dst, glm_dtype dt, const glm_weight *src);

/* The glm_q4_tensor view of a 4-bit glm_weight. Errors: GLM_ERR_ARG for a dense one. */
static glm_status q4_view(const glm_weight *w, glm_q4_tensor *q, const char *op) {
    if (!glm_wformat_packed(w->fmt))
        return glm_err(GLM_ERR_ARG, "%s: the weight is %s, not a quantized format", op, glm_wformat_name(w->fmt));
    q->type = w->fmt == GLM_WF_FP4 ? GLM_Q4_FP4 : GLM_Q4_NF4;
    q->double_quant = w->double_quant;
    q->n = w->n;
    q->codes = w->data;
    q->absmax = w->double_quant ? NULL : w->absmax;
    q->absmax_codes = w->double_quant ? w->absmax : NULL;
    q->absmax2 = w->absmax2;
    q->offset = w->offset;
    return GLM_OK;
}

glm_status glm_cpu_weight_quantize(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st) {
    (void)be;
    if (dst->fmt == GLM_WF_FP8_E4M3) return glm_cpu_fp8_weight_quantize(dst, src, st);
    glm_q4_tensor q;
    GLM_TRY(q4_view(dst, &q, "weight quantize"));
    if (st == GLM_DT_F32) return glm_q4_quantize_f32(&q, src);
    if (st == GLM_DT_BF16) return glm_q4_quantize_bf16(&q, src);
    return glm_err(GLM_ERR_UNSUPPORTED, "weight quantize: source dtype %d (f32 or bf16)", (int)st);
}

/* The values as bitsandbytes' dequantize_4bit returns them for a bf16 model: code x absmax in f32,
 * rounded once to bf16; as f32 (exact) or as bf16 bits. */
glm_status glm_cpu_weight_dequantize(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src) {
    (void)be;
    if (src->fmt == GLM_WF_FP8_E4M3) return glm_cpu_fp8_weight_dequantize(dst, dt, src);
    glm_q4_tensor q;
    GLM_TRY(q4_view(src, &q, "weight dequantize"));
    if (dt == GLM_DT_BF16) return glm_q4_dequantize_bf16(&q, dst);
    if (dt != GLM_DT_F32) return glm_err(GLM_ERR_UNSUPPORTED, "weight dequantize: destination dtype %d (f32 or bf16)", (int)dt);
    float *out = dst;
    GLM_TRY(glm_q4_dequantize_f32(&q, out));
    for (int64_t i = 0; i < q.n; i++) out[i] = glm_bf16_to_f32(glm_f32_to_bf16(out[i]));
    return GLM_OK;
}
