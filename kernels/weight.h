/* kernels/weight.h: a frozen base weight as every part of glmtune sees it (docs/design.md §7): its
 * format, its buffers and its logical shape, in one descriptor.
 *
 * Formats
 *   f32, bf16   dense row-major [rows, cols] elements (the CPU reference holds f32, CUDA bf16).
 *   nf4, fp4    bitsandbytes' 4-bit layout (QLoRA, Dettmers et al. 2023; bitsandbytes'
 *               functional.py quantize_4bit): the tensor flattened row-major and cut into blocks of
 *               64 elements; each block stores absmax = max |w| (f32) and 4-bit codes of w / absmax
 *               in the NF4 or FP4 code book, two codes per byte (the first element in the high
 *               nibble). With double quantization the absmax values, less their mean (`offset`), are
 *               themselves quantized blockwise in groups of 256 with bitsandbytes' signed dynamic
 *               8-bit map, one f32 scale per group (absmax2). Dequantized value = code value x absmax,
 *               in f32, rounded once to the activation dtype (kernels/formats.h holds the code books
 *               and the arithmetic, shared by host and device code).
 *   fp8         OCP FP8 E4M3 (kernels/formats.h), one byte per element, row-major [rows, cols],
 *               with one f32 scale per row (output channel) in `absmax`: scale = max_c |w[r, c]| /
 *               448, code = E4M3(w * (448 / max)) rounded to nearest even (glm_fp8_encode); the
 *               value a code stands for is its E4M3 value x the row's scale. Its GEMMs run on FP8
 *               tensor cores (glm_base_matmul, be->fp8_matmul), never on a dequantized copy. The input
 *               gradient's GEMM reads the codes transposed, [cols, rows], from `data_t` (made by
 *               be->fp8_transpose into a slot of the model's workspace; NULL elsewhere).
 *
 * Which parts are quantized: the linear layers' matrices (query_key_value, dense, dense_h_to_4h,
 * dense_4h_to_h); the embedding and the output layer stay dense, as PEFT's QLoRA leaves them.
 *
 * Sharding (--shard-base): a rank holds `n` consecutive elements of the flattened tensor starting
 * at element `first`; for a 4-bit format shards are whole double-quantization groups
 * (glm_weight_shard_elems), so a shard's codes, absmax and absmax2 are contiguous slices of the
 * whole tensor's and all-gathering them gives the whole tensor's buffers. */
#ifndef GLM_KERNELS_WEIGHT_H
#define GLM_KERNELS_WEIGHT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef enum {
    GLM_WF_F32 = 0,  /* dense float32 */
    GLM_WF_BF16 = 1, /* dense bfloat16 */
    GLM_WF_NF4 = 2,  /* 4-bit NormalFloat (bitsandbytes) */
    GLM_WF_FP4 = 3,  /* 4-bit float E2M1 (bitsandbytes' FP4 code book) */
    GLM_WF_FP8_E4M3 = 4, /* FP8 E4M3 with one f32 scale per row */
} glm_wformat;

typedef struct glm_weight {
    glm_wformat fmt;
    int64_t rows, cols; /* logical shape [rows (out features), cols (in features)] of the whole tensor */
    int64_t n;          /* elements held here: rows * cols, or this rank's shard */
    void *data;         /* dense: n elements; 4-bit: (n + 1) / 2 bytes of codes; fp8: n bytes of codes */
    void *absmax;       /* 4-bit: per block, f32; with double quantization uint8 codes; fp8: per row, the f32 scale */
    float *absmax2;     /* double quantization: f32 per group of 256 blocks; else NULL */
    float *offset;      /* double quantization: [1] f32, the mean absmax subtracted before quantizing it (of the
                           whole tensor: a shard holds the whole tensor's); else NULL */
    int double_quant;   /* 1: absmax double-quantized */
    void *data_t;       /* fp8 in a layer's backward: the codes transposed, [cols, rows] (a working copy); else NULL */
} glm_weight;

/* The scratch the CUDA backend's fp8_matmul takes whatever the shapes (it quantizes the activation
 * in row blocks of at most 64 MiB of codes, with at most 64 MiB of f32 tile where its GEMM cannot
 * apply the weight's row scales itself, and 2 MiB of scale vectors): scratch_need counts it when
 * glm_scratch_shape.fp8 is set, the planner's estimate likewise. */
#define GLM_FP8_BLOCK_BYTES (64.0 * 1048576.0)
#define GLM_FP8_SCRATCH_BYTES (2.0 * GLM_FP8_BLOCK_BYTES + 2.0 * 1048576.0)

/* The byte sizes of a weight's buffers for n elements of format f. */
typedef struct glm_weight_bytes_t {
    size_t data, absmax, absmax2, offset;
} glm_weight_bytes_t;

/* "f32", "bf16", "nf4", "fp4", "fp8". */
const char *glm_wformat_name(glm_wformat f);
/* 1 for the 4-bit formats (a GEMM needs them dequantized first), 0 for dense ones and fp8 (whose
 * GEMMs read the codes). */
int glm_wformat_packed(glm_wformat f);
/* 1 for the formats made by be->weight_quantize from a dense matrix (4-bit, fp8), 0 for dense ones. */
int glm_wformat_quantized(glm_wformat f);
/* Parses f32|bf16|nf4|fp4|fp8. Errors: GLM_ERR_ARG naming the valid values. */
glm_status glm_wformat_parse(const char *s, glm_wformat *out);

/* Buffer sizes of n elements in format f (double_quant only matters for the 4-bit formats):
 * dense: n * 4 or n * 2; 4-bit: kernels/quant4.h's glm_q4_size: ceil(n / 2) code bytes,
 * ceil(n / 64) absmax entries of 4 bytes (1 byte with double quantization), then ceil(blocks /
 * 256) f32 absmax2 and the 4-byte offset; fp8: the n code bytes only (its scales are per row:
 * glm_weight_matrix_bytes). */
glm_weight_bytes_t glm_weight_bytes(glm_wformat f, int64_t n, int double_quant);
/* Their sum. */
double glm_weight_total_bytes(glm_wformat f, int64_t n, int double_quant);
/* The buffers of a whole [rows, cols] matrix in format f: glm_weight_bytes of rows x cols
 * elements, and for fp8 its rows f32 scales in absmax (4 rows bytes). */
glm_weight_bytes_t glm_weight_matrix_bytes(glm_wformat f, int64_t rows, int64_t cols, int double_quant);

/* The bytes of a working copy holding n elements of format f with each buffer starting at a
 * 256-byte boundary (data, then absmax, then absmax2; the offset is not gathered: a shard holds
 * the whole tensor's): what a gather or dequantization slot takes. */
double glm_weight_slot_bytes(glm_wformat f, int64_t n, int double_quant);

/* Elements of one shard of a tensor of n elements split over `world` ranks: ceil(n / world),
 * rounded up to whole double-quantization groups (64 x 256 elements) for a 4-bit format; the
 * last shard is padded with zeros. world <= 1: n. */
int64_t glm_weight_shard_elems(glm_wformat f, int64_t n, int world);

#endif
