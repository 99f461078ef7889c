/* common/bf16.h: bfloat16 <-> float32, the one definition of glmtune's rounding (round to nearest,
 * ties to even; NaN stays a quiet NaN), the same as CUDA's __float2bfloat16_rn and torch's
 * .to(torch.bfloat16). Header-only and shared by host C and CUDA device code (kernels/formats.h
 * builds the weight formats on it; common/safetensors.c converts files with it). */
#ifndef GLM_COMMON_BF16_H
#define GLM_COMMON_BF16_H

#include <stdint.h>
#include <string.h>

#ifndef GLM_HOST_DEVICE
#ifdef __CUDACC__
#define GLM_HOST_DEVICE __host__ __device__
#else
#define GLM_HOST_DEVICE
#endif
#endif

/* float32 -> bfloat16 bits: round to nearest, ties to even (add 0x7fff + the kept lsb, keep the
 * top 16 bits); overflow rounds to infinity; a NaN keeps its sign and top payload bits and is made
 * quiet (bit 6 of the bf16 set). */
static inline GLM_HOST_DEVICE uint16_t glm_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bfloat16 bits -> float32 (exact: the bits become the top half). */
static inline GLM_HOST_DEVICE float glm_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
