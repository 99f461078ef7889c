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
 * whole tensor's and all-gathering them gives the whole tensor's buffers.
 *
 * Segments (4-bit only): a matrix the model holds as one but the checkpoint stores as several
 * tensors stacked by rows (the hf layout's q_proj, k_proj and v_proj in query_key_value) is
 * quantized source by source, as bitsandbytes quantizes each nn.Linear: each segment has its own
 * blocks of 64, its own offset (double quantization's mean) and its own groups of 256 blocks.
 * The stored buffers are those of one flattened 4-bit tensor of glm_weight_stored_elems elements
 * in which segment i starts at element glm_weight_seg_start (every segment but the first at a
 * whole double-quantization group: 64 x 256 elements; the elements between two segments are
 * padding, zero codes never dequantized; GLM-4-9B's q, k and v are whole groups, so it has no
 * padding); `offset` holds one f32 per segment. A segment is then a 4-bit tensor of its own
 * (glm_weight_seg), sharding cuts the stored array as it cuts any 4-bit tensor (whole groups), and
 * dequantizing (glm_weight_dequantize) writes each segment's rows where they sit in the dense
 * [rows, cols] matrix. Dense and fp8 weights ignore segments (their values do not depend on how
 * rows are grouped). */
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

#define GLM_WSEG_MAX 3 /* source tensors of one weight, at most */

/* The source tensors a weight is stacked from (kernels/weight.h "Segments"). */
typedef struct glm_wsegs {
    int n;                      /* 0 or 1: one tensor, quantized as one; 2 .. GLM_WSEG_MAX: n sources */
    int64_t rows[GLM_WSEG_MAX]; /* the rows of each source, in order (they add up to the weight's rows) */
} glm_wsegs;

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
    glm_wsegs segs;     /* 4-bit: the sources quantized one by one (n 0: the whole tensor as one); else n 0 */
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

/* ---- segments (4-bit weights stacked from several source tensors) ---- */

/* The number of segments of a weight of format f with sources s: s->n for a 4-bit format with
 * s->n >= 2, else 1 (s may be NULL). */
int glm_wsegs_count(glm_wformat f, const glm_wsegs *s);
/* The stored element where segment i (0 <= i < glm_wsegs_count) of a [rows, cols] weight begins:
 * 0 for i = 0, else the previous segment's start plus its rows x cols rounded up to whole
 * double-quantization groups (64 x 256 elements). */
int64_t glm_weight_seg_start(glm_wformat f, const glm_wsegs *s, int64_t cols, int i);
/* Elements of the stored array of a whole [rows, cols] weight: rows x cols for one segment, else
 * the last segment's start plus its elements (what glm_weight_bytes, glm_weight_shard_elems and
 * the planner count for it). */
int64_t glm_weight_stored_elems(glm_wformat f, const glm_wsegs *s, int64_t rows, int64_t cols);
/* The same of weight w (w's format, segments and shape). */
int64_t glm_weight_whole_elems(const glm_weight *w);
/* glm_weight_bytes of n stored elements, with one f32 offset per segment under double
 * quantization (a shard holds every segment's offset). */
glm_weight_bytes_t glm_weight_seg_bytes(glm_wformat f, int64_t n, int double_quant, const glm_wsegs *s);

/* Segment i of the whole weight w (w->n = glm_weight_whole_elems(w)) as a 4-bit weight of its own
 * in *out: its rows, cols, rows x cols elements and pointers into w's buffers (codes, absmax,
 * absmax2 at its start; offset + i); no segments. A weight of one segment gives itself (i = 0).
 * Errors: GLM_ERR_ARG (i out of range, or w a shard). */
glm_status glm_weight_seg(const glm_weight *w, int i, glm_weight *out);

struct glm_backend;
/* be->weight_quantize of each segment of dst from its rows of src (a dense [rows, cols] matrix of
 * dtype st, a glm_dtype), after zeroing dst's buffers when it has padding between segments; one call for a
 * weight of one segment (its behaviour unchanged). dst is whole (dst->n = glm_weight_whole_elems).
 * Errors: those of be->weight_quantize, GLM_ERR_ARG (a segmented shard). */
glm_status glm_weight_quantize(const struct glm_backend *be, glm_weight *dst, const void *src, int st);
/* be->weight_dequantize of each segment of src into its rows of dst (a dense [rows, cols] matrix
 * of dtype dt, a glm_dtype), one call (one CUDA launch) per segment; one call of src->n elements for a weight
 * of one segment. Errors: those of be->weight_dequantize, GLM_ERR_ARG (a segmented shard). */
glm_status glm_weight_dequantize(const struct glm_backend *be, void *dst, int dt, const glm_weight *src);

#endif
