/* kernels/quant4.h: the 4-bit (QLoRA) frozen-weight format, bitsandbytes' layout (docs/design.md §7),
 * and its CPU reference (kernels/cpu/quant4.c). The CUDA kernels (kernels/cuda/quant4_cuda.h)
 * produce the same bits.
 *
 * A weight tensor of any shape is quantized as its flattened row-major array of n values, in
 * blocks of 64 consecutive values (the last block is short when n is not a multiple of 64), as
 * bitsandbytes' CUDA kernels block it (bnb.functional.quantize_4bit, blocksize 64):
 *   absmax_b = max |w| over block b                              (fp32)
 *   code_i   = encode(w_i * (1.0f / absmax_b))                    (fp32 reciprocal, then multiply)
 *   w'_i     = code_value(code_i) * absmax_b, rounded once to bf16 (dequantize_4bit's bf16 output)
 * with encode / code_value of kernels/formats.h (NF4 or FP4). Two codes per byte: value 2i in the
 * high nibble, 2i+1 in the low nibble; for odd n the last low nibble encodes a 0.0 pad.
 *
 * Double quantization (QLoRA's, bnb compress_statistics=True) stores the block absmax values as
 * 8-bit codes instead of fp32:
 *   offset   = mean of absmax_b over all blocks                   (one fp32)
 *   v_b      = absmax_b - offset                                  (fp32)
 *   absmax2_g = max |v_b| over group g of 256 consecutive blocks  (fp32; last group short)
 *   code8_b  = dynamic8_encode(v_b * (1.0f / absmax2_g))          (the signed dynamic map)
 * and rebuilds absmax_b = map[code8_b] * absmax2_g + offset (two rounded fp32 operations).
 *
 * The offset is the one piece bitsandbytes leaves to torch's float32 mean (its summation order
 * differs between CPU and GPU builds). Here it is fixed: sum in double, 256 blocks at a time in
 * index order, the partial sums added in order, divided by the number of blocks in double,
 * rounded once to float. It is the correctly rounded mean unless the double sum itself rounds
 * (it holds 53 bits; see tests/fixtures/bnb4/README.md for how it compares with torch's).
 *
 * Differences from bitsandbytes' GPU build, all documented in tests/fixtures/bnb4/README.md: it
 * is compiled with --use_fast_math, so its 1/absmax is an approximate reciprocal (<= 1 ulp off);
 * a value within an ulp of a code threshold can then take the neighbouring code there. Here (and
 * in glmtune's CUDA kernels) the reciprocal is IEEE-rounded, which is what bitsandbytes' kernel
 * source writes and what its CPU build computes. */
#ifndef GLM_KERNELS_QUANT4_H
#define GLM_KERNELS_QUANT4_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/formats.h"

#define GLM_Q4_BLOCKSIZE 64     /* weights per absmax block (bnb's QLoRA default) */
#define GLM_Q4_DQ_BLOCKSIZE 256 /* absmax values per second-level block (double quantization) */

/* One quantized tensor. Buffers are host memory for the functions of this header and device
 * memory for kernels/cuda/quant4_cuda.h. Which buffers exist depends on double_quant:
 *   double_quant 0: codes, absmax;
 *   double_quant 1: codes, absmax_codes, absmax2, offset (absmax is NULL).
 * Shapes: nblocks = ceil(n / 64), ngroups = ceil(nblocks / 256). */
typedef struct glm_q4_tensor {
    glm_q4_type type;       /* GLM_Q4_NF4 or GLM_Q4_FP4 */
    int double_quant;       /* 0 or 1 */
    int64_t n;              /* number of weights (all dims multiplied), >= 1 */
    uint8_t *codes;         /* [(n + 1) / 2] 4-bit codes, two a byte (2i high nibble, 2i+1 low) */
    float *absmax;          /* [nblocks] fp32 block absmax (double_quant 0) */
    uint8_t *absmax_codes;  /* [nblocks] 8-bit dynamic-map codes of absmax - offset (double_quant 1) */
    float *absmax2;         /* [ngroups] fp32 absmax of each group's absmax - offset (double_quant 1) */
    float *offset;          /* [1] mean of the blocks' absmax (double_quant 1) */
} glm_q4_tensor;

/* The byte sizes of one quantized tensor's buffers (what the planner counts), and its counts. */
typedef struct glm_q4_sizes {
    int64_t nblocks, ngroups;   /* ceil(n / 64); ceil(nblocks / 256) (0 without double quant) */
    size_t codes;               /* (n + 1) / 2 */
    size_t absmax;              /* 4 nblocks, or 0 with double quantization */
    size_t absmax_codes;        /* nblocks with double quantization, else 0 */
    size_t absmax2;             /* 4 ngroups with double quantization, else 0 */
    size_t offset;              /* 4 with double quantization, else 0 */
    size_t total;               /* the sum */
} glm_q4_sizes;

/* Byte sizes for n weights (n >= 1). Example: a 4096 x 13696 weight (n = 56,098,816) is
 * 28,049,408 code bytes + 3,506,176 absmax bytes (4.5 bits a weight), or with double quantization
 * 28,049,408 + 876,544 + 13,696 + 4 (about 4.127 bits a weight). */
glm_q4_sizes glm_q4_size(int64_t n, int double_quant);

/* "nf4" / "fp4" (bitsandbytes' quant_type strings); "?" for anything else. */
const char *glm_q4_type_name(glm_q4_type type);
/* Parses "nf4" or "fp4" (exact, lower case). Errors: GLM_ERR_ARG naming the string and the two
 * accepted values. */
glm_status glm_q4_type_parse(const char *s, glm_q4_type *out);

/* Allocates host buffers for n weights of `type` (sizes of glm_q4_size) and fills q's fields.
 * Errors: GLM_ERR_ARG (n < 1, unknown type), GLM_ERR_NOMEM (q is left with NULL buffers). */
glm_status glm_q4_alloc(glm_q4_tensor *q, glm_q4_type type, int64_t n, int double_quant);
/* Frees what glm_q4_alloc allocated (NULL buffers are fine) and zeroes q. */
void glm_q4_free(glm_q4_tensor *q);

/* Quantizes n = q->n values x[n] (the flattened weight, float32 or bfloat16 bits) into q's
 * buffers (overwritten), with q->type and q->double_quant, by the rules at the top of this file.
 * Deterministic: the same input gives the same bytes on every machine and in the CUDA kernels.
 * Errors: GLM_ERR_ARG (bad q: type, n < 1, a needed buffer NULL), GLM_ERR_NUMERIC naming the flat
 * index of the first NaN or infinite value (a base weight must be finite; q's buffers are then
 * unspecified). */
glm_status glm_q4_quantize_f32(glm_q4_tensor *q, const float *x);
glm_status glm_q4_quantize_bf16(glm_q4_tensor *q, const uint16_t *x);

/* The absmax of block b (0 <= b < nblocks) as dequantization uses it: absmax[b], or with double
 * quantization map[absmax_codes[b]] * absmax2[b / 256] + offset (fp32, not fused). */
float glm_q4_block_absmax(const glm_q4_tensor *q, int64_t b);

/* Dequantizes q into out[n] (overwritten): out_i = code_value(code_i) * absmax_b in fp32; the
 * bf16 variant rounds that product once to nearest even (bfloat16 bits), which is bit for bit
 * what bnb.functional.dequantize_4bit returns for a bf16 quant_state.dtype.
 * Errors: GLM_ERR_ARG (bad q). */
glm_status glm_q4_dequantize_f32(const glm_q4_tensor *q, float *out);
glm_status glm_q4_dequantize_bf16(const glm_q4_tensor *q, uint16_t *out);

/* The pieces of double quantization, for tests and for the CUDA path's checks:
 * glm_q4_absmax_mean: the offset of absmax[nblocks] as defined at the top of this file.
 * glm_q4_double_quant: codes8[nblocks] and absmax2[ceil(nblocks / 256)] of absmax[nblocks] for a
 * given offset (bnb's quantize_blockwise(absmax - offset, blocksize=256) with its CUDA kernels'
 * arithmetic). Both overwrite their outputs and cannot fail. */
float glm_q4_absmax_mean(const float *absmax, int64_t nblocks);
void glm_q4_double_quant(const float *absmax, int64_t nblocks, float offset, uint8_t *codes8, float *absmax2);

/* The signed dynamic 8-bit map (GLM_DYNAMIC8_MAP_VALUES of kernels/formats.h), 256 floats. */
extern const float glm_dynamic8_map[256];

#endif
