/* kernels/formats.h: number formats shared by host C and CUDA device code (header-only).
 *
 * - bfloat16 <-> float32: from common/bf16.h (the one definition of glmtune's rounding).
 * - The 4-bit code books of bitsandbytes (QLoRA): NF4 and FP4, 16 float values each, indexed by
 *   the 4-bit code; and the encoders that pick a code for a value normalised by its block's
 *   absmax, written as bitsandbytes' CUDA kernels decide (csrc/kernels.cu: dQuantizeNF4,
 *   dQuantizeFP4: a comparison tree with fixed thresholds, x > threshold goes up).
 * - The signed dynamic 8-bit map bitsandbytes uses for double quantization of the absmax values
 *   (functional.py create_dynamic_map(signed=True)), and its nearest-code search (kernels.cu
 *   dQuantize<0>: a binary search, then the midpoint of the two neighbours in fp32).
 *
 * Every function here is float32 arithmetic in the order written, the same bits on host and
 * device. The one multiply-then-add (glm_q4_absmax_dq) is kept from being fused into an FMA
 * (nvcc fuses by default; gcc may with -march flags that have FMA): __fmul_rn / __fadd_rn on the
 * device, a volatile product on the host. */
#ifndef GLM_KERNELS_FORMATS_H
#define GLM_KERNELS_FORMATS_H

#include <stdint.h>
#include <string.h>

#include "common/bf16.h" /* GLM_HOST_DEVICE and the bf16 rounding */

/* ---- bfloat16: common/bf16.h (glm_f32_to_bf16, glm_bf16_to_f32) ---- */

/* ---- 4-bit code books (bitsandbytes functional.py get_4bit_type; csrc/kernels.cu) ---- */

/* The 4-bit formats. Values are stored in files and in glm_q4_tensor; 0 is "not 4-bit". */
typedef enum { GLM_Q4_NF4 = 1, GLM_Q4_FP4 = 2 } glm_q4_type;

/* NF4 (QLoRA, Dettmers et al. 2023, arXiv:2305.14314): quantiles of N(0,1) scaled to [-1, 1],
 * code 7 exactly 0. As float literals, identical to bitsandbytes' get_4bit_type("nf4") and
 * kernels.cu nf4_dequantization_lut. Usable as an initialiser on host and device
 * (`__constant__ float t[16] = {GLM_NF4_CODE_VALUES};`). */
#define GLM_NF4_CODE_VALUES                                                                              \
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,   \
        -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, \
        0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,          \
        0.7229568362236023f, 1.0f

/* FP4 (1 sign bit, 2 exponent bits, 1 mantissa bit, bitsandbytes' bias) divided by its absmax 12:
 * codes 0-7 are 0, 0.0625, 8, 12, 4, 6, 2, 3 (/12); codes 8-15 the same negated (bit 3 = sign).
 * kernels.cu dDequantizeFP4Tree multiplies the magnitude by -1.0f for bit 3, so code 8 is -0.0f
 * (get_4bit_type writes +0 there; only the sign of a zero differs, and the kernels' -0.0 is what a
 * dequantized bf16 weight carries). */
#define GLM_FP4_CODE_VALUES                                                                              \
    0.0f, 0.005208333333f, 0.66666667f, 1.0f, 0.33333333f, 0.5f, 0.16666667f, 0.25f, -0.0f,             \
        -0.005208333333f, -0.66666667f, -1.0f, -0.33333333f, -0.5f, -0.16666667f, -0.25f

/* The 4-bit code of x = weight * (1 / absmax) (x in [-1, 1], or NaN for an all-zero block, as
 * bitsandbytes' kernels make it: 0 * inf): bitsandbytes' dQuantizeNF4 decision tree. The
 * thresholds are the fp32 midpoints of neighbouring NF4 values; x equal to a threshold takes the
 * lower code; NaN takes code 0 (every comparison is false). */
static inline GLM_HOST_DEVICE uint8_t glm_nf4_encode(float x) {
    if (x > 0.03979014977812767f) {
        if (x > 0.3893125355243683f) {
            if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 15 : 14;
            return x > 0.5016634166240692f ? 13 : 12;
        }
        if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 11 : 10;
        return x > 0.1202552504837513f ? 9 : 8;
    }
    if (x > -0.33967943489551544f) {
        if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 7 : 6;
        return x > -0.23460740596055984f ? 5 : 4;
    }
    if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 3 : 2;
    return x > -0.8480964004993439f ? 1 : 0;
}

/* The 4-bit FP4 code of x (normalised as for glm_nf4_encode): bitsandbytes' dQuantizeFP4. The sign
 * bit is x < 0 (so -0.0 and NaN get sign 0); the magnitude goes through a tree whose thresholds
 * are bitsandbytes' literals, not all exact midpoints: 0.583333f lies 5 ulp below 7/12 and
 * 0.00260417f 14 ulp above 1/384, so |x| in those slivers codes differently from a nearest-value
 * rule (bitsandbytes' CUDA kernels, hence QLoRA runs, use these literals; see
 * tests/fixtures/bnb4/README.md). */
static inline GLM_HOST_DEVICE uint8_t glm_fp4_encode(float x) {
    uint8_t sign = x < 0 ? 8 : 0;
    x = x < 0 ? -x : x; /* fabsf; NaN stays NaN */
    if (x > 0.29166667f) {
        if (x > 0.583333f) return (uint8_t)((x > 0.8333333f ? 3 : 2) + sign);
        return (uint8_t)((x > 0.4166667f ? 5 : 4) + sign);
    }
    if (x > 0.0859375f) return (uint8_t)((x > 0.20833333f ? 7 : 6) + sign);
    return (uint8_t)((x > 0.00260417f ? 1 : 0) + sign);
}

/* The code of x in format `type` (GLM_Q4_NF4 or GLM_Q4_FP4). */
static inline GLM_HOST_DEVICE uint8_t glm_q4_encode(glm_q4_type type, float x) {
    return type == GLM_Q4_FP4 ? glm_fp4_encode(x) : glm_nf4_encode(x);
}

/* The code-book value of 4-bit `code` (0..15; higher bits ignored) in format `type`. */
static inline GLM_HOST_DEVICE float glm_q4_code_value(glm_q4_type type, uint8_t code) {
    const float nf4[16] = {GLM_NF4_CODE_VALUES}, fp4[16] = {GLM_FP4_CODE_VALUES};
    return type == GLM_Q4_FP4 ? fp4[code & 15] : nf4[code & 15];
}

/* The dequantized value of `code` in a block whose absmax is `absmax`: code value x absmax, one
 * fp32 multiply (round to nearest even), as kDequantizeBlockwise computes it before it stores
 * (bf16 callers round this once with glm_f32_to_bf16). */
static inline GLM_HOST_DEVICE float glm_q4_dequant(glm_q4_type type, uint8_t code, float absmax) {
    return glm_q4_code_value(type, code) * absmax;
}

/* ---- double quantization: the signed dynamic 8-bit map ---- */

/* bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): 256 sorted
 * float32 values in [-0.993, 1]: 0, 1, and for each exponent i = 0..6 the 2^i midpoints of
 * linspace(0.1, 1, 2^i + 1) times +-10^(i-6). Entry 127 is 0, entry 255 is 1.
 * The values are the ones bitsandbytes 0.50.2 computes (torch 2.15's float32 linspace on the CPU,
 * which bitsandbytes then copies to the GPU), written as hex literals: recomputing them from the
 * formula with correctly rounded arithmetic differs in 22 entries by an ulp, so the table is the
 * specification. tests/kernels/test_quant4.c holds it equal to the map stored by
 * tests/fixtures/bnb4/make_bnb4.py. */
#define GLM_DYNAMIC8_MAP_VALUES \
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, \
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f, \
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f, \
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f, \
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f, \
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f, \
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f, \
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f, \
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f, \
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f, \
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f, \
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f, \
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, \
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f, \
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f, \
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f, \
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f, \
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f, \
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, \
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f, \
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f, \
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f, \
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f, \
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f, \
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, \
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f, \
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f, \
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, \
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f, \
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f, \
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, \
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f, \
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f, \
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f, \
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f, \
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f, \
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, \
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f, \
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f, \
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f, \
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f, \
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f, \
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, \
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f, \
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f, \
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f, \
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f, \
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f, \
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, \
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f, \
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f, \
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f, \
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f, \
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f, \
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f, \
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f, \
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f, \
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f, \
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f, \
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f, \
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f, \
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f, \
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f, \
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1p+0f


/* The 8-bit code of x (normalised: (absmax - offset) * (1 / absmax2)) in the sorted 256-entry
 * `map` (GLM_DYNAMIC8_MAP_VALUES): bitsandbytes' dQuantize<0> (kernels.cu), literally: a binary
 * search from entry 127 in steps 64..1 that keeps the bracketing entries, then the fp32 midpoint
 * (a + b) * 0.5f of x's two neighbours decides. Ties: x equal to the midpoint goes to the entry the
 * search ended on. NaN (an all-zero group: 0 * inf) ends on code 0. */
static inline GLM_HOST_DEVICE uint8_t glm_dynamic8_encode(const float *map, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f, val = map[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = map[pivot];
    }
    if (upper_pivot == 255) upper = map[upper_pivot];
    if (lower_pivot == 0) lower = map[lower_pivot];
    if (x > val) return (uint8_t)(x > (upper + val) * 0.5f ? upper_pivot : pivot);
    return (uint8_t)(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

/* A 64-weight block's absmax rebuilt from double quantization: map[code8] x absmax2 + offset, as
 * two fp32 operations each rounded (bitsandbytes: dequantize_blockwise writes the product to a
 * float32 tensor, then `absmax += offset`), never fused into one multiply-add. */
static inline GLM_HOST_DEVICE float glm_q4_absmax_dq(float map_value, float absmax2, float offset) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(__fmul_rn(map_value, absmax2), offset);
#else
    volatile float p = map_value * absmax2; /* a store the compiler cannot fuse into the add */
    return p + offset;
#endif
}

/* ---- FP8 (OCP 8-bit floating point, E4M3 and E5M2) ----
 *
 * The two formats of the OCP "OFP8" specification (Micikevicius et al. 2022, arXiv:2209.05433;
 * CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2, torch.float8_e4m3fn / float8_e5m2):
 *   E4M3: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN;
 *         largest finite 448 (0x7e), smallest subnormal 2^-9.
 *   E5M2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits (IEEE-like); 0x7c infinity,
 *         0x7d..0x7f NaN; largest finite 57344 (0x7b), smallest subnormal 2^-16.
 * glm_f32_to_fp8 rounds a float32 to nearest, ties to even, once, with saturation to the largest
 * finite value (infinities included): what CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)
 * and the sm_89+ instruction cvt.rn.satfinite compute; a NaN gives the canonical NaN 0x7f (no
 * sign), magnitudes at most half the smallest subnormal give a zero of x's sign. The arithmetic
 * is on the bits (integers only), the same on host and device. tests/kernels/test_fp8.c holds it to
 * ml_dtypes (tests/fixtures/fp8, every float32 input) and tests/gpu/test_fp8_ops.c to the GPU's
 * own conversion instruction. */

typedef enum { GLM_FP8_E4M3 = 0, GLM_FP8_E5M2 = 1 } glm_fp8_kind;

/* The kind an input gradient (dy times the weight's row scales) is quantized to in the FP8 base's
 * backward GEMM (glm_base_matmul). See docs/fp8.md for the choice. */
#ifndef GLM_FP8_GRAD_KIND
#define GLM_FP8_GRAD_KIND GLM_FP8_E5M2
#endif

#define GLM_FP8_E4M3_MAX 448.0f
#define GLM_FP8_E5M2_MAX 57344.0f

/* The largest finite value of kind k (448 or 57344). */
static inline GLM_HOST_DEVICE float glm_fp8_max(glm_fp8_kind k) { return k == GLM_FP8_E5M2 ? GLM_FP8_E5M2_MAX : GLM_FP8_E4M3_MAX; }

/* float32 -> FP8 code of kind k: round to nearest even with saturation (see above). */
static inline GLM_HOST_DEVICE uint8_t glm_f32_to_fp8(float x, glm_fp8_kind k) {
    const int M = k == GLM_FP8_E5M2 ? 2 : 3, bias = k == GLM_FP8_E5M2 ? 15 : 7;
    const uint32_t maxbits = k == GLM_FP8_E5M2 ? 0x47600000u : 0x43e00000u; /* 57344, 448 as float32 bits */
    const uint8_t maxcode = k == GLM_FP8_E5M2 ? 0x7b : 0x7e;
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;                  /* NaN */
    if (a > maxbits) return (uint8_t)(sign | maxcode); /* rounds to the largest finite value or overflows: saturate */
    if (a < 0x00800000u) return sign;                  /* float32 zero or subnormal: far below FP8's subnormals */
    const int e = (int)(a >> 23) - 127;                /* x = m 2^(e - 23) */
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    /* normal: keep M mantissa bits (shift 23 - M); subnormal (e < 1 - bias): units of 2^(1 - bias - M) */
    const int shift = e >= 1 - bias ? 23 - M : 23 - e + 1 - bias - M;
    if (shift > 25) return sign; /* below half the smallest subnormal (m < 2^24 <= half of 2^shift) */
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* normal: exponent field (e + bias), q in [2^M, 2^(M+1)]: a carry into the exponent is the next binade */
    const uint32_t code = e >= 1 - bias ? ((uint32_t)(e + bias) << M) + q - (1u << M) : q;
    return (uint8_t)(sign | code);
}

/* FP8 code of kind k -> float32 (exact). E4M3 0x7f/0xff and E5M2 0x7d..0x7f (either sign) are NaN,
 * E5M2 0x7c/0xfc infinity. */
static inline GLM_HOST_DEVICE float glm_fp8_to_f32(uint8_t c, glm_fp8_kind k) {
    const int M = k == GLM_FP8_E5M2 ? 2 : 3, bias = k == GLM_FP8_E5M2 ? 15 : 7;
    const uint32_t sign = (uint32_t)(c & 0x80u) << 24, ef = (uint32_t)(c & 0x7fu) >> M, man = c & ((1u << M) - 1u);
    uint32_t u;
    if (k == GLM_FP8_E4M3 && (c & 0x7fu) == 0x7fu) u = 0x7fc00000u;
    else if (k == GLM_FP8_E5M2 && ef == 31u) u = man ? 0x7fc00000u : sign | 0x7f800000u;
    else if (ef == 0) { /* subnormal: man x 2^(1 - bias - M), exact in float32 */
        float f = (float)man * (k == GLM_FP8_E5M2 ? 0x1p-16f : 0x1p-9f);
        return sign ? -f : f;
    } else
        u = sign | ((ef - (uint32_t)bias + 127u) << 23) | (man << (23 - M));
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x * y and x / y in float32, each rounded to nearest even and never fused with a neighbouring
 * operation (the device's __fmul_rn / __fdiv_rn: nvcc would contract a product into an FMA, and a
 * fast-math division is not correctly rounded), so host and device compute the same bits. */
static inline GLM_HOST_DEVICE float glm_fmul_rn(float x, float y) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(x, y);
#else
    volatile float p = x * y;
    return p;
#endif
}
static inline GLM_HOST_DEVICE float glm_fdiv_rn(float x, float y) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(x, y);
#else
    volatile float q = x / y;
    return q;
#endif
}

/* The scaling of a tensor (or one row of it) quantized to FP8 of kind k from its absolute maximum
 * amax (the max of |x| over it; NaN when any element is NaN): the stored scale (dequantized value =
 * code value x scale) is amax / max, and the elements are encoded as glm_f32_to_fp8(x * inv) with
 * inv = max / amax (both one float32 division): the largest magnitude lands on the format's largest
 * value. amax == 0 (an all-zero tensor): scale 0 and inv 0 (every code 0). An infinite amax gives
 * inv 0 and scale inf, a NaN amax NaN for both: the product of such a tensor is not finite, as it
 * would be unquantized. */
static inline GLM_HOST_DEVICE float glm_fp8_scale(float amax, glm_fp8_kind k) {
    return amax == 0.0f ? 0.0f : glm_fdiv_rn(amax, glm_fp8_max(k));
}
static inline GLM_HOST_DEVICE float glm_fp8_inv_scale(float amax, glm_fp8_kind k) {
    return amax == 0.0f ? 0.0f : glm_fdiv_rn(glm_fp8_max(k), amax);
}

/* The code of x in a tensor whose inverse scale is inv (glm_fp8_inv_scale): one rounded multiply,
 * then glm_f32_to_fp8. */
static inline GLM_HOST_DEVICE uint8_t glm_fp8_encode(float x, float inv, glm_fp8_kind k) {
    return glm_f32_to_fp8(glm_fmul_rn(x, inv), k);
}

/* |x| as float32 bits (sign cleared): the key whose integer maximum is the absolute maximum of a
 * tensor, NaN (bits above 0x7f800000) winning over every number, in any order of reduction. */
static inline GLM_HOST_DEVICE uint32_t glm_abs_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u & 0x7fffffffu;
}
static inline GLM_HOST_DEVICE float glm_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
