/* kernels/cuda/rope.cu: partial interleaved RoPE in place (kernels/backend.h). One thread per
 * (token, rotated pair): the angle in f32 as the CPU computes it, cos/sin in double rounded to
 * f32 (bit-identical tables on both backends), the rotation in f32, one bf16 rounding per
 * element; the thread then rotates that pair in every head of the token (q heads and k groups
 * of one qkv row), so the sin/cos are computed once per (token, pair). */
#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

__global__ void k_rope(bf16 *x, int64_t ldx, const int32_t *pos, int64_t N, int nheads, int Dh, int half,
                       const float *inv_freq, int inverse) {
    int64_t total = N * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = t / half;
        int i = (int)(t - n * half);
        float ang = (float)pos[n] * inv_freq[i];
        double sd, cd;
        sincos((double)ang, &sd, &cd);
        float c = (float)cd, s = (float)sd;
        if (inverse) s = -s;
        for (int h = 0; h < nheads; h++) {
            __nv_bfloat162 *p = (__nv_bfloat162 *)(x + n * ldx + (int64_t)h * Dh + 2 * i);
            float2 v = __bfloat1622float2(*p);
            *p = __floats2bfloat162_rn(v.x * c - v.y * s, v.y * c + v.x * s);
        }
    }
}

glm_status cu_rope(const glm_backend *be, void *x, int64_t ldx, const int32_t *pos, int64_t N, int nheads, int Dh, int rot,
                   const float *inv_freq, int inverse) {
    if (N <= 0) return GLM_OK;
    if (((uintptr_t)x & 3) || (ldx & 1) || (Dh & 1))
        return glm_err(GLM_ERR_UNSUPPORTED, "rope: x must be 4-byte aligned with even row stride and head dim");
    k_rope<<<grid_for(N * (rot / 2), 256), 256, 0, IMPL(be)->s>>>((bf16 *)x, ldx, pos, N, nheads, Dh, rot / 2, inv_freq,
                                                                   inverse);
    LAUNCHED("rope");
    return GLM_OK;
}

}  // namespace glmcu
