/* kernels/backend_table.h: the op table a backend implements (the CPU reference, kernels/cpu/;
 * CUDA, kernels/cuda/), with each op's contract. Callers do not call these pointers: they call the
 * entry points of kernels/backend.h (glm_be_*) and kernels/comm.h (glm_comm_*), which check the
 * arguments every backend would check, once, and then call the table. A backend checks only what
 * is its own (dtypes it holds, alignment, its kernels' limits, data-dependent errors).
 * Include kernels/backend.h, not this file. */
#ifndef GLM_KERNELS_BACKEND_TABLE_H
#define GLM_KERNELS_BACKEND_TABLE_H

#ifndef GLM_KERNELS_BACKEND_H
#error "include kernels/backend.h"
#endif

/* The sizes of a training step that decide the backend's scratch (scratch_need). Elements, not
 * bytes; 0 where a kind of op does not run. */
typedef struct glm_scratch_shape {
    int B, T;               /* rows and tokens per row of the whole-row attention (N = B T tokens) */
    int H, Hkv, Dh;         /* attention heads, KV groups, head dim */
    int64_t ldq, ldk, ldv, ldo; /* the attention operands' row strides (0: q|k|v packed in one
                               [N, (H+2Hkv)Dh] buffer, out [N, H Dh]) */
    int backward;           /* 1: a training step (attention's backward too) */
    int max_docs;           /* the most documents a row may hold (0 or 1: one per row) */
    int cp_block;           /* > 0: context parallel, the ring's query blocks of this many tokens (no
                               whole-row attention) */
    int64_t loss_rows;      /* rows of one cross-entropy call (the loss chunk) */
    int64_t widen_a, widen_b, gemm_f32; /* the largest mixed-dtype GEMM operands widened to f32 (A, B) and
                               f32 results rounded to bf16 (M N), in elements */
    int64_t comm_doubles;   /* all_reduce_host's doubles (world > 1) */
    int fp8;                /* 1: the base GEMMs run in FP8 (be->fp8_matmul: its quantized activations, scale
                               vectors and f32 tiles) */
} glm_scratch_shape;

/* The version of the interface between the program and the CUDA module libglm_cuda.so: the layout
 * and meaning of struct glm_backend below, the module's entry points (glm_backend_cuda*,
 * glm_cuda_*) and the host-services table glm_cuda_init takes (kernels/cuda_host.h). BUMP IT
 * WITH EVERY CHANGE TO THE STRUCT (an op added, removed, moved or given other arguments) or to
 * those entry points and that table. The module reports the number it was built with
 * (glm_cuda_abi_version) and kernels/cuda_loader.c refuses one built with another: a stale module
 * would otherwise be called through a shifted table. */
#define GLM_BACKEND_ABI_VERSION 11

/* What a backend may or may not do, asked with be->supports (never by calling an op with zero sizes). */
typedef enum {
    GLM_FEATURE_RING_ATTENTION = 0, /* attention_block_fwd / _bwd: the context-parallel ring (lora/model/ring_attention.c) */
    GLM_FEATURE_COMM = 1,           /* communication between ranks (world > 1): CPU, this build has MPI; CUDA, the
                                       module has NCCL. Without it every communication op needs world 1. */
    GLM_FEATURE_WEIGHT_4BIT = 2,    /* weight_quantize / weight_dequantize of the 4-bit (QLoRA) format */
    GLM_FEATURE_FP8 = 3,            /* the fp8 base format and its ops (fp8_quantize, fp8_matmul, fp8_transpose): CUDA
                                       on FP8 tensor cores (sm_89 and later), CPU as their emulation */
    GLM_FEATURE_COUNT
} glm_feature;

/* The op table. Changing it changes GLM_BACKEND_ABI_VERSION (above). */
struct glm_backend {
    const char *name;       /* "cpu", "cuda" */
    glm_dtype weight_dtype; /* base (frozen) weights */
    glm_dtype act_dtype;    /* activations and activation gradients */
    glm_dtype acc_dtype;    /* accumulators carried across calls of the block attention ops (context-parallel
                               ring): CPU GLM_DT_F64 (its double accumulation, rounded once at the end), CUDA
                               GLM_DT_F32 */
    int rank, world;        /* data-parallel rank and world size (cpu: 0 and 1) */
    void *impl;             /* backend private state */

    /* ---- memory ------------------------------------------------------------------------ */

    /* Allocates `bytes` of backend memory (uninitialised) into *out. bytes == 0 gives a valid
     * non-NULL pointer. Errors: GLM_ERR_NOMEM naming `what` (a tensor name for the message). */
    glm_status (*alloc)(const glm_backend *be, size_t bytes, const char *what, void **out);
    /* Frees memory from alloc (NULL is a no-op). */
    void (*free)(const glm_backend *be, void *p);
    /* Host -> backend, `bytes` raw bytes (no conversion). */
    glm_status (*upload)(const glm_backend *be, void *dst, const void *src, size_t bytes);
    /* Backend -> host, `bytes` raw bytes (no conversion). */
    glm_status (*download)(const glm_backend *be, void *dst, const void *src, size_t bytes);
    /* Host float32 -> backend buffer of dtype `dt` (n elements); bf16 rounds to nearest even. */
    glm_status (*upload_f32)(const glm_backend *be, void *dst, glm_dtype dt, const float *src, int64_t n);
    /* Backend buffer of dtype `dt` -> host float32 (n elements; exact). */
    glm_status (*download_f32)(const glm_backend *be, float *dst, glm_dtype dt, const void *src, int64_t n);
    /* Sets `bytes` bytes to zero (all-zero bits = 0.0 in f32 and bf16). */
    glm_status (*zero)(const glm_backend *be, void *p, size_t bytes);
    /* Backend -> backend copy of `bytes` bytes (regions must not overlap). */
    glm_status (*copy)(const glm_backend *be, void *dst, const void *src, size_t bytes);
    /* Host memory for activations offloaded during a step (lora/model/step_ws.c): page-locked on
     * CUDA (cudaMallocHost), so that the async copies below run at full PCIe speed without a
     * staging copy; plain malloc on the CPU. Errors: GLM_ERR_NOMEM naming `what`. host_free(NULL)
     * is a no-op. */
    glm_status (*host_alloc)(const glm_backend *be, size_t bytes, const char *what, void **out);
    void (*host_free)(const glm_backend *be, void *p);
    /* Copies between backend memory and host memory from host_alloc that run while the ops
     * compute (CUDA: on a copy stream of the backend's own, in the order queued, so PCIe transfers
     * overlap kernels). A download, and an upload with after_ops = 1, starts once the ops queued
     * before it are done (they may write its source or read its destination); an upload with
     * after_ops = 0 may start at once (the caller knows no queued op uses its destination).
     * *ticket names the copy: ops queued after copy_wait(be, ticket) start once that copy, and
     * every copy queued before it, is done; an op that reads an upload's destination or writes a
     * download's source must be queued after its copy_wait. be->sync waits for every copy. The
     * host must not read a download's destination or change an upload's source before be->sync.
     * CPU: memcpy at once; the tickets are 0 and copy_wait does nothing. Errors: GLM_ERR_DEVICE
     * naming the copy (CUDA). */
    glm_status (*upload_async)(const glm_backend *be, void *dst, const void *host_src, size_t bytes, int after_ops,
                               uint64_t *ticket);
    glm_status (*download_async)(const glm_backend *be, void *host_dst, const void *src, size_t bytes, uint64_t *ticket);
    glm_status (*copy_wait)(const glm_backend *be, uint64_t ticket);

    /* ---- dense algebra ------------------------------------------------------------------ */

    /* Row-major GEMM: C = alpha * op(A) @ op(B) + beta * C0, op(X) = X or X^T (ta, tb nonzero =
     * transpose); C0 is C itself when NULL, else another matrix with C's dtype and row stride
     * (a residual sum written to a new buffer in the one GEMM: x_mid = x_in + LoRA(o) without a
     * copy). op(A) is [M,K], op(B) is [K,N], C is [M,N]; lda/ldb/ldc are row strides in
     * elements of the stored (untransposed) matrices. dta/dtb/dtc give each operand's dtype
     * (a LoRA matmul mixes f32 LoRA weights with act buffers). Accumulation fp32; CPU:
     * cblas_sgemm (only F32 operands; others -> GLM_ERR_UNSUPPORTED). beta == 0 overwrites C
     * without reading C or C0 (NaN there does not propagate); beta == 1 accumulates. */
    glm_status (*matmul)(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const void *A, glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta,
                         const void *C0, void *C, glm_dtype dtc, int64_t ldc);

    /* y[n, c] += b[c] for n < N, c < D; y act with row stride ldy, b of dtype w. */
    glm_status (*add_bias)(const glm_backend *be, void *y, int64_t ldy, const void *b, int64_t N, int64_t D);

    /* y[i] += alpha * x[i], i < n, both act. */
    glm_status (*axpy)(const glm_backend *be, void *y, const void *x, float alpha, int64_t n);

    /* Inverted dropout over a [N, D] act matrix (row strides ldx, ldy; in place allowed) whose
     * rows have the keys row0, row0 + 1, ... (their rows in the whole [*, D] matrix the mask is
     * defined on; the model step keys a token by its place in the data, glm_batch.drop_key, and
     * calls this op once per run of consecutive keys):
     * y[n,d] = keep ? x[n,d] / (1-p) : 0, keep = (glm_dropout_u01(seed, stream, (row0+n)*D+d) >= p).
     * The mask is a pure function of (seed, stream, element index) so recomputation, the
     * backward pass (the same op on the gradient) and any split of the rows into chunks,
     * micro-batches or ranks reproduce it exactly on every backend. p == 0 copies. Errors:
     * GLM_ERR_ARG when p is not in [0, 1). */
    glm_status (*dropout)(const glm_backend *be, void *y, int64_t ldy, const void *x, int64_t ldx,
                          int64_t N, int64_t D, int64_t row0, float p, uint64_t seed, uint64_t stream);

    /* dst[i] = src[i] converted from dtype `ds` to `dd`, i < n (f32 -> bf16 rounds to nearest
     * even; bf16 -> f32 and same-dtype copies are exact). Used for the act-dtype copies of the
     * fp32 LoRA weights that the LoRA GEMMs read. */
    glm_status (*cast)(const glm_backend *be, void *dst, glm_dtype dd, const void *src, glm_dtype ds, int64_t n);

    /* Strided 2-D copy with conversion: dst[r * ldd + c] = src[r * lds + c] converted from dtype ds
     * to dd, r < rows, c < cols (strides in elements of each buffer's dtype; narrowing rounds to
     * nearest even, widening is exact). Regions must not overlap. CPU: f32 -> f32, f64 -> f32, f32 ->
     * f64; CUDA: f32 and bf16 either way (GLM_ERR_UNSUPPORTED otherwise). Used to pack K|V column
     * blocks for the context-parallel ring and to store its accumulators into act / f32 buffers. */
    glm_status (*cast_2d)(const glm_backend *be, void *dst, glm_dtype dd, int64_t ldd, const void *src, glm_dtype ds,
                          int64_t lds, int64_t rows, int64_t cols);

    /* dst[i] = mean + std * z_i, i < n, z_i ~ N(0,1) from a counter-based generator of
     * (seed, stream, i) (Box-Muller on two glm_dropout_u01-style hashes), rounded once to dtype
     * dt; the same numbers on every backend up to the rounding of log/cos. For benchmark and test
     * weights generated where they live (no host copy). */
    glm_status (*fill_normal)(const glm_backend *be, void *dst, glm_dtype dt, int64_t n, float mean, float std,
                              uint64_t seed, uint64_t stream);

    /* ---- frozen base weights in other formats (kernels/weight.h) --------------------------- */

    /* Quantizes src, dst->n elements of dtype `st` (a flattened tensor), into dst's buffers
     * (allocated by the caller with glm_weight_bytes of dst->fmt, dst->n, dst->double_quant):
     * bitsandbytes' quantize_4bit with blocksize 64 (with double quantization, compress_statistics:
     * dst->offset receives the mean absmax, summed in double in a fixed order). The CPU op is the
     * specification (kernels/cpu/quant4.c, bit-exact to bitsandbytes' kernels, tests/fixtures/bnb4);
     * CUDA computes the same bytes. Errors: GLM_ERR_ARG (a dense dst format), GLM_ERR_UNSUPPORTED
     * (source dtype), GLM_ERR_NUMERIC (CPU: a NaN or infinite weight, named). */
    glm_status (*weight_quantize)(const glm_backend *be, glm_weight *dst, const void *src, glm_dtype st);
    /* Dequantizes src (a 4-bit glm_weight of src->n elements) into dst, n elements of dtype dt:
     * value = code value x absmax in f32, rounded once to bf16 (what bitsandbytes' dequantize_4bit
     * returns for bf16 input); dt = f32 stores that bf16 value exactly. OVERWRITES dst.
     * Errors: GLM_ERR_ARG (a dense src), GLM_ERR_UNSUPPORTED (dt). */
    glm_status (*weight_dequantize)(const glm_backend *be, void *dst, glm_dtype dt, const glm_weight *src);
    /* (fp8, GLM_WF_FP8_E4M3: weight_quantize takes a whole [rows, cols] matrix (dst->n = rows x
     * cols) and writes per row r: scale = glm_fp8_scale(amax_r, E4M3) into absmax[r] and the codes
     * glm_fp8_encode(w, glm_fp8_inv_scale(amax_r), E4M3) into data, amax_r = max_c |w[r, c]| of the
     * source values; the same bytes on every backend. weight_dequantize gives code value x scale
     * in f32, rounded once to bf16 (dt bf16) or exactly that bf16 value (dt f32); a whole matrix.
     * Errors as above; CPU: GLM_ERR_NUMERIC for a NaN or infinite weight, named.) */

    /* ---- FP8 GEMMs of the frozen base (GLM_FEATURE_FP8) ------------------------------------- */

    /* Quantizes the act matrix x [M, K] (row stride ldx) to FP8 of kind `kind` (glm_fp8_kind) with
     * one scale per row (current scaling: from each row's own absolute maximum; a row is one token's
     * activation or output gradient): v[m, k] = x[m, k], or x[m, k] * col_mul[k] (one rounded f32
     * multiply) when col_mul ([K] f32, backend memory) is not NULL; amax_m = max_k |v[m, k]| (NaN
     * if any of the row's v is); scale [M] (f32, backend memory) = glm_fp8_scale(amax_m, kind);
     * q [M, K] packed (row stride K) = glm_fp8_encode(v, glm_fp8_inv_scale(amax_m, kind), kind)
     * (kernels/formats.h). OVERWRITES q and scale. Every backend computes the same bytes. Errors:
     * GLM_ERR_ARG (sizes, kind). */
    glm_status (*fp8_quantize)(const glm_backend *be, uint8_t *q, float *scale, const void *x, int64_t ldx, int64_t M,
                               int64_t K, const float *col_mul, int kind);
    /* The FP8 GEMM of a frozen linear: y [M, N] (act, row stride ldy) = beta y + s_x[m] w_scale[n]
     * sum_k X[m, k] W[n, k], where X, s_x [M] are x [M, K] (act, row stride ldx; times col_mul [K]
     * when not NULL) quantized as fp8_quantize does with kind x_kind (a scale per row), and W [N, K]
     * (row stride K) are E4M3 codes with the per-row scales w_scale [N] f32 (NULL: 1). Both operands
     * are K-contiguous (cuBLASLt's FP8 kernels take only this "TN" layout). CPU (the emulation, the
     * specification): the exact products of the decoded FP8 values summed in double, times s_x[m]
     * then w_scale[n] in double, rounded once to f32, plus beta y in f32. CUDA: cuBLASLt FP8 tensor
     * cores (CUBLAS_COMPUTE_32F with fast accumulation, GLMTUNE_FP8_ACCUM=fp32 for cuBLAS' periodic
     * promotion), both scale vectors applied in the GEMM (outer vectors) and the result rounded once
     * to bf16, or where cuBLASLt has no such kernel an f32 tile scaled after; the activation is
     * quantized in row blocks into a fixed scratch, each row in one pass. beta == 0 does not read y.
     * K and N must be multiples of 16 (GLM_ERR_UNSUPPORTED otherwise, on every backend: CUDA's FP8
     * layout rule). M may be anything. Errors: GLM_ERR_ARG (sizes, kind), GLM_ERR_UNSUPPORTED,
     * GLM_ERR_DEVICE. */
    glm_status (*fp8_matmul)(const glm_backend *be, int64_t M, int64_t N, int64_t K, const void *x, int64_t ldx,
                             const float *col_mul, int x_kind, const uint8_t *w, const float *w_scale, float beta, void *y,
                             int64_t ldy);
    /* dst [cols, rows] = src [rows, cols]^T, bytes (FP8 codes), both packed. OVERWRITES dst. */
    glm_status (*fp8_transpose)(const glm_backend *be, uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols);


    /* ---- transformer ops ---------------------------------------------------------------- */

    /* Embedding lookup: out[n, :] = table[ids[n], :], n < N; table [V, C] w, out [N, C] act,
     * ids [N] uint32 in backend memory. The embedding is frozen: there is no backward.
     * Errors: GLM_ERR_ARG naming the position when ids[n] >= V (the CPU backend checks). */
    glm_status (*embedding)(const glm_backend *be, void *out, const void *table, const uint32_t *ids,
                            int64_t N, int64_t C, int64_t V);

    /* RMSNorm forward (GLM-4 / make_fixtures.py RMSNorm): for each row n of x [N, C] act,
     * rstd[n] = 1 / sqrt(mean_c(x[n,c]^2) + eps)  (mean in double on CPU, stored f32), and
     * y[n,c] = x[n,c] * rstd[n] * w[c]  (w [C] of dtype w). Overwrites y and rstd. */
    glm_status (*rmsnorm_fwd)(const glm_backend *be, void *y, float *rstd, const void *x, const void *w,
                              int64_t N, int64_t C, float eps);
    /* RMSNorm backward w.r.t. x (the norm weight is frozen): with r = rstd[n],
     * dx[n,c] += r * w[c] * dy[n,c] - x[n,c] * r^3 / C * sum_j dy[n,j] w[j] x[n,j]
     * (sum in double on CPU). ACCUMULATES into dx (the residual stream's gradient). */
    glm_status (*rmsnorm_bwd)(const glm_backend *be, void *dx, const void *dy, const void *x,
                              const void *w, const float *rstd, int64_t N, int64_t C);

    /* Partial interleaved RoPE (THUDM modeling_chatglm apply_rotary_pos_emb; transformers Glm):
     * x holds N rows (row stride ldx elements) of nheads heads of Dh contiguous channels. For
     * i < rot/2: angle = float32(float32(pos[n]) * inv_freq[i]), c = cos(angle), s = sin(angle)
     * (evaluated in double, rounded to f32), and the pair (x[2i], x[2i+1]) -> (x0 c - x1 s,
     * x1 c + x0 s); channels >= rot pass through. inv_freq [rot/2] f32 in backend memory, normally
     * glm_rope_inv_freq()'s table. inverse != 0 applies the transpose rotation (angle -> -angle),
     * which is the backward pass (dx = R^T dy). In place; pos [N] int32 in backend memory.
     * Errors: GLM_ERR_ARG when rot is odd or not in (0, Dh]. */
    glm_status (*rope)(const glm_backend *be, void *x, int64_t ldx, const int32_t *pos, int64_t N,
                       int nheads, int Dh, int rot, const float *inv_freq, int inverse);

    /* SwiGLU over [gate | up]: h [N, 2F] act holds gate in columns [0, F) and up in [F, 2F);
     * out[n, f] = silu(gate) * up, silu(g) = g / (1 + exp(-g)) (computed in double on CPU,
     * rounded to f32 once). Overwrites out [N, F]. */
    glm_status (*swiglu_fwd)(const glm_backend *be, void *out, const void *h, int64_t N, int64_t F);
    /* SwiGLU backward: dh[:, :F] = d * up * sig(g) * (1 + g (1 - sig(g))), dh[:, F:] = d *
     * silu(g), where d = dout [N, F], or d = dout + t->scale * t->u t->a (glm_rank_term: the
     * input gradient of a LoRA down-projection, du A, added here instead of in a pass of its own
     * over dout) when t is not NULL. dout is not written. OVERWRITES dh [N, 2F]. CPU: d and dh in
     * double, rounded to f32 once. Errors: GLM_ERR_ARG (t with r < 1). */
    glm_status (*swiglu_bwd)(const glm_backend *be, void *dh, const void *dout, const void *h,
                             int64_t N, int64_t F, const glm_rank_term *t);

    /* Causal grouped-query attention over packed rows. q, k, v are act matrices of B*T rows
     * (row strides ldq, ldk, ldv) holding H (q) or Hkv (k, v) heads of Dh channels; token i of
     * row b attends to tokens j <= i of the same row with doc[b*T+j] == doc[b*T+i]; q head h uses
     * KV group h / (H / Hkv); scores (q . k) / sqrt(Dh); softmax over the allowed keys.
     * out [B*T, H*Dh] (row stride ldo) and lse [B, H, T] f32 (log-sum-exp of the scaled scores,
     * kept for the backward) are overwritten. CPU: dot products and softmax sums in double,
     * probabilities rounded to f32 once. doc [B*T] int32 in backend memory; each document is one
     * contiguous run of positions of its row (as the packer writes them), which lets CUDA skip
     * whole tiles outside a query tile's documents. CUDA: cuDNN's fused flash attention with each
     * document a ragged sequence where cuDNN is there and takes the shape
     * (kernels/cuda/attention_ragged.cu), else glmtune's bf16 tensor-core tiles with fp32
     * accumulation (kernels/cuda/attention.cu); both need Dh <= 128 and a multiple of 8, row
     * strides multiples of 8 elements and 16-byte aligned q/k/v (GLM_ERR_UNSUPPORTED otherwise). */
    glm_status (*attention_fwd)(const glm_backend *be, void *out, int64_t ldo, float *lse,
                                const void *q, int64_t ldq, const void *k, int64_t ldk,
                                const void *v, int64_t ldv, const int32_t *doc,
                                int B, int T, int H, int Hkv, int Dh);
    /* Attention backward from dout [B*T, H*Dh] (row stride ldo), the forward's out and lse:
     * P = exp(S - lse), D_i = dout_i . out_i, dS = P (dout v^T - D), dq = dS k / sqrt(Dh),
     * dk = dS^T q / sqrt(Dh) and dv = P^T dout summed over the heads of each group
     * (FlashAttention-2's backward, Dao 2023, Algorithm 2).
     * D: NULL, or D_i already computed by attention_delta ([B, H, T] acc, lse's layout); then out
     * is not read (it may be NULL, or hold anything: the model writes dout over it, which saves a
     * [B*T, H*Dh] buffer, lora/model/plan.h). CUDA with D: glmtune's kernels (cuDNN's fused
     * backward reads out itself), with the same D they would compute, so the same bits.
     * OVERWRITES dq, dk, dv (row strides ldq, ldk, ldv, same layout as q, k, v; they may be
     * column blocks of one [B*T, (H+2Hkv)Dh] buffer). */
    glm_status (*attention_bwd)(const glm_backend *be, void *dq, void *dk, void *dv,
                                const void *dout, int64_t ldo, const void *out, const float *lse,
                                const void *D, const void *q, int64_t ldq, const void *k, int64_t ldk,
                                const void *v, int64_t ldv, const int32_t *doc,
                                int B, int T, int H, int Hkv, int Dh);
    /* attention_bwd's D for `rows` tokens of packed rows of T tokens, starting at token n0 of the
     * B*T: D[(b H + h) T + i] = sum_c dout[r, h Dh + c] out[r, h Dh + c] for r = 0 .. rows-1 and
     * token n0 + r = b T + i (a chunk may cross rows). dout [rows, H*Dh] and out [rows, H*Dh] act
     * (row strides ldd, ldo) are the chunk's own rows; D is acc (CPU: double, summed in the order
     * attention_bwd sums it, so the same bits; CUDA: f32, the order of its own kernels). OVERWRITES
     * the chunk's entries of D, no others. */
    glm_status (*attention_delta)(const glm_backend *be, void *D, const void *dout, int64_t ldd, const void *out,
                                  int64_t ldo, int64_t n0, int64_t rows, int T, int H, int Dh);

    /* ---- attention blocks, for context-parallel rings (lora/model/ring_attention.c) ---------------
     * A packed row's tokens are split over ranks; each rank computes its queries against one block
     * of keys at a time. Both ops take one block of queries, the row's tokens [q0, q0 + Tq), and one
     * block of keys, tokens [k0, k0 + Tk) of the same row (global token indices within the row, not
     * RoPE positions), with their document ids q_doc [Tq] and k_doc [Tk] (int32, backend memory; as
     * attention_fwd's doc). The mask is attention_fwd's in global indices: query i may attend key j
     * iff k0 + j <= q0 + i and k_doc[j] == q_doc[i]. One row per call; heads as attention_fwd (q
     * head h uses KV group h / (H / Hkv), scores (q . k) / sqrt(Dh)); q, k, v, out, dout are act
     * with row strides (elements); an lse buffer holds head h of query i at [h * ldl + i].
     * The accumulators carried from call to call ("acc") have type be->acc_dtype: on the CPU double,
     * so that the blocks' partial results are merged and summed in double and rounded to f32 once,
     * by cast_2d at the end, as the whole-row ops round (exact up to the order of the double
     * sums); on CUDA f32 (the whole-row kernels' tiles with the global offsets; document ids
     * non-decreasing along the row, as the model step checks). Zero-sized calls (Tq or Tk 0) do
     * nothing and succeed. A backend that has these ops says so with supports(GLM_FEATURE_RING_ATTENTION). */

    /* Forward of one block, MERGED into the running result of the key blocks seen so far by the
     * online-softmax rule (FlashAttention / ring attention): with the block's own softmax result
     * (o_b, lse_b) over its allowed keys, lse' = log(exp(lse) + exp(lse_b)) and
     * o' = o exp(lse - lse') + o_b exp(lse_b - lse'). o [Tq, H*Dh] acc (row stride ldo) and lse
     * [H, ...] acc are the running result; init != 0 OVERWRITES them with the block's result
     * instead (queries with no allowed key in the block get o = 0, lse = -inf); a query with no
     * allowed key in a merged block keeps its o and lse. After every key block of a row has been
     * merged, in any order, o and lse are attention_fwd's out and lse before its rounding to act /
     * f32. Errors: GLM_ERR_ARG (heads, sizes), GLM_ERR_NOMEM, GLM_ERR_UNSUPPORTED (CUDA: head dim
     * over 128 or not a multiple of 8, misaligned buffers). */
    glm_status (*attention_block_fwd)(const glm_backend *be, void *o, int64_t ldo, void *lse, int64_t ldl,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                      int64_t ldv, const int32_t *q_doc, const int32_t *k_doc, int64_t q0,
                                      int64_t k0, int Tq, int Tk, int H, int Hkv, int Dh, int init);
    /* Backward of one block, with the FINAL out [Tq, H*Dh] (act, row stride ldo, the same as dout's)
     * and lse (f32, over all the queries' keys, as attention_fwd keeps it): over the block's
     * allowed pairs P = exp(S - lse), D_i = dout_i . out_i, dS = P (dout v^T - D); ACCUMULATES
     * dq += dS k / sqrt(Dh) into dq [Tq, H*Dh] acc (row stride lddq), and dk += dS^T q / sqrt(Dh),
     * dv += P^T dout (summed over the heads of each group) into dk, dv [Tk, Hkv*Dh] acc (row strides
     * lddk, lddv). Summed over every key block of a query (dq) and every query block of a key (dk,
     * dv), the results are attention_bwd's before its rounding to act.
     * Errors: GLM_ERR_ARG (heads, sizes), GLM_ERR_NOMEM, GLM_ERR_UNSUPPORTED (CUDA: as the forward). */
    glm_status (*attention_block_bwd)(const glm_backend *be, void *dq, int64_t lddq, void *dk, int64_t lddk,
                                      void *dv, int64_t lddv, const void *dout, int64_t ldo, const void *out,
                                      const float *lse, int64_t ldl, const void *q, int64_t ldq, const void *k,
                                      int64_t ldk, const void *v, int64_t ldv, const int32_t *q_doc,
                                      const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk, int H, int Hkv,
                                      int Dh);

    /* Fused cross-entropy over a chunk of n rows of logits [n, V] (act), with optional per-row
     * weights and log-probabilities. For each target row (labels[i] >= 0; labels int32, backend
     * memory): lse_i = log sum_v exp(logits[i,v]) (double on CPU, fp32 on CUDA),
     * loss_i = lse_i - logits[i, labels[i]], w_i = weights[i] (fp32 [n], backend memory, read on
     * target rows only, any sign, zero allowed) or 1 when weights == NULL.
     * - *loss_sum (host, double, OVERWRITTEN) = sum over target rows of w_i * loss_i (CPU: in
     *   double; CUDA: each loss_i rounded to fp32, the products and the sum in double on the host);
     *   *n_targets (host, may be NULL) = the number of target rows, whatever their weights.
     * - dlogits != NULL: OVERWRITTEN (act [n, V]) with d(loss_scale * sum_i w_i loss_i)/dlogits =
     *   loss_scale * w_i * (softmax_i - onehot(labels[i])) on target rows, 0 on rows with
     *   labels[i] < 0 (CPU: the factor loss_scale * w_i in double; CUDA: in fp32); dlogits may
     *   equal logits (in place).
     * - logp != NULL: OVERWRITTEN (fp32 [n], backend memory) with logp[i] = logits[i, labels[i]] -
     *   lse_i = -loss_i (the label's log-probability, unweighted) on target rows, 0 on rows with
     *   labels[i] < 0. It must not overlap logits or dlogits.
     * With weights == NULL and logp == NULL the arithmetic is that of the unweighted op (the
     * results are bit for bit those of interface version 9).
     * A non-finite loss is returned as it is (the trainer counts and skips such steps).
     * Errors: GLM_ERR_ARG when a label is >= V (dlogits and logp are then unspecified). */
    glm_status (*cross_entropy)(const glm_backend *be, void *dlogits, const void *logits,
                                const int32_t *labels, const float *weights, float *logp, int64_t n,
                                int64_t V, float loss_scale, double *loss_sum, int64_t *n_targets);

    /* ---- optimizer and communication --------------------------------------------------- */

    /* torch.optim.AdamW (non-foreach) on n fp32 elements, step = 1-based step count:
       g' = g * grad_scale; w *= 1 - lr*weight_decay; m = m + (1-beta1)*(g' - m); v = beta2*v + (1-beta2)*g'^2;
       w -= (lr / (1-beta1^step)) * m / (sqrt(v)/sqrt(1-beta2^step) + eps)
       All arithmetic in f32 like torch's single-tensor path, bias corrections in double then
       rounded. Errors: GLM_ERR_ARG when step < 1. */
    glm_status (*adamw)(const glm_backend *be, float *w, const float *g, float *m, float *v, int64_t n,
                        float lr, float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, int64_t step);
    /* Sums of squares of `count` fp32 tensors, double accumulation: out[i] (host) = sum over
     * j < n[i] of x[i][j]^2. One host synchronisation for all of them (the gradient norm over
     * every LoRA tensor is one call). Errors: the device's (out is then unspecified). */
    glm_status (*sumsq)(const glm_backend *be, int count, const float *const *x, const int64_t *n, double *out);

    /* Sum of an fp32 buffer across the ranks, in place, complete on return (world 1: a no-op).
     * Every rank must make the same collective calls in the same order (as MPI and NCCL require). */
    glm_status (*all_reduce)(const glm_backend *be, float *x, int64_t n);
    /* Waits for queued work (CPU: no-op). */
    glm_status (*sync)(const glm_backend *be);

    /* ---- communication between data-parallel ranks ---------------------------------------
     * The communicator behind these ops: CPU, MPI (kernels/cpu/comm_mpi.c, glm_backend_cpu_dist);
     * CUDA, NCCL on a second stream (kernels/cuda/comm.cu, glm_backend_cuda_dist). With world 1
     * every op below is a local no-op (all_gather: a copy). Errors name the rank and the library
     * call (GLM_ERR_COMM); a collective that does not complete within the timeout
     * (set_comm_timeout) is an error, never a silent hang. After an error the caller stops every
     * rank with comm_abort. Requests are small integers >= 0, valid until waited for. */

    /* Starts a sum all-reduce of n fp32 elements in place (backend memory) and returns at once
     * with *req; the buffer must not be touched until the request is waited for (comm_wait or
     * comm_sync). CUDA: the reduction runs on the communication stream after the work queued so
     * far on the compute stream (an event), overlapping later compute. CPU: MPI_Iallreduce; MPI
     * progresses it during later comm calls (comm_progress). */
    glm_status (*all_reduce_start)(const glm_backend *be, float *x, int64_t n, int *req);
    /* All-gather of equal shards: rank k's `shard_bytes` bytes at src land at
     * dst + k * shard_bytes on every rank (dst holds world * shard_bytes bytes; src must not
     * overlap dst unless it is dst + rank * shard_bytes). Non-blocking like all_reduce_start:
     * *req is the request; dst may be read only after comm_wait(req). Raw bytes, no dtype. */
    glm_status (*all_gather_start)(const glm_backend *be, void *dst, const void *src, size_t shard_bytes, int *req);
    /* Orders later work after request req (req < 0: every outstanding request). CPU: returns when
     * it is complete. CUDA: the compute stream waits for it on the device (the host does not
     * block; a stuck collective is caught by the next comm_sync). */
    glm_status (*comm_wait)(const glm_backend *be, int req);
    /* Blocks the host until every outstanding request is complete, at most the timeout. The time
     * spent waiting here (after the compute queued before it finished: CUDA synchronises the
     * compute stream first) is communication that compute did not hide; it adds to comm_wait_ms. */
    glm_status (*comm_sync)(const glm_backend *be);
    /* Lets MPI progress outstanding non-blocking collectives (CPU; CUDA: no-op). Cheap. */
    void (*comm_progress)(const glm_backend *be);
    /* Sum of n host doubles across the ranks, in place, blocking (for the loss sums, target
     * counts and the decisions every rank must take alike: skip a step, stop the run). */
    glm_status (*all_reduce_host)(const glm_backend *be, double *x, int n);
    /* Point to point, for rings (context parallel, lora/model/ring_attention.c): sends `bytes` bytes of backend memory
     * at send to rank `dst` and receives `bytes` bytes from rank `src` into recv, complete on
     * return (CPU: MPI_Sendrecv; CUDA: ncclSend/ncclRecv in one group). send and recv must not
     * overlap. Errors: GLM_ERR_ARG for a rank outside [0, world). */
    glm_status (*sendrecv)(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes);
    /* sendrecv, non-blocking: starts it and returns at once with *req (as all_reduce_start): send
     * must not be written, nor recv read, until comm_wait(req) or comm_sync. CUDA: queued on the
     * communication stream after the compute queued so far. Messages between two ranks are matched
     * in the order they were started (there are no tags): ranks must start their sendrecvs in the
     * same order. Errors: as sendrecv. */
    glm_status (*sendrecv_start)(const glm_backend *be, const void *send, int dst, void *recv, int src, size_t bytes,
                                 int *req);
    /* Sub-communicators (context parallel x data parallel): splits be's ranks into groups by color
     * (the ranks passing the same color form one group, ordered by key, ties by rank) and returns
     * in *out a backend for this rank's group, whose rank and world are the group's and whose
     * communication ops (all of this section) run over the group only. Its compute ops, memory and
     * device are be's: buffers from be->alloc serve both. CPU: MPI_Comm_split; CUDA: ncclCommSplit
     * with its own communication stream and requests (run with several ranks on one GPU by
     * tests/gpu/cp.sh, not yet on several GPUs). A collective over
     * be: every rank calls it, in the same order as the other collectives. World 1: a backend of
     * world 1. Free it with comm_free before be is closed. Errors: GLM_ERR_ARG (color < 0),
     * GLM_ERR_COMM naming the library call, GLM_ERR_NOMEM, GLM_ERR_UNSUPPORTED (no MPI / NCCL
     * in this build while world > 1). */
    glm_status (*comm_split)(const glm_backend *be, int color, int key, const glm_backend **out);
    /* Frees a backend from comm_split (NULL: no-op); collective over its group. */
    void (*comm_free)(const glm_backend *sub);
    /* Seconds a collective may wait for the other ranks before it fails (default 1800, as
     * transformers' ddp_timeout); <= 0 restores the default. */
    void (*set_comm_timeout)(const glm_backend *be, double seconds);
    /* Milliseconds of communication that compute did not hide, since the last call with
     * reset != 0: every wait on a transfer of this process, on every communicator (a comm_split
     * group's waits count in its parent's total and the parent's in the group's: one total per
     * process), whatever waits: the gradient all-reduce, --shard-base's all-gathers, the
     * context-parallel ring's K|V and dK|dV sendrecvs, all_reduce_host.
     * How it is measured:
     *   CPU (MPI): the host blocks in every wait (comm_wait, comm_sync, sendrecv, all_reduce,
     *     all_reduce_host): the wall-clock time from the wait's start to the request's completion.
     *   CUDA: comm_wait (and sendrecv) make the compute stream wait for the communication stream
     *     on the device, so the host never blocks there. Where the request is not already complete
     *     when the wait is queued, two timing events are recorded on the compute stream, one just
     *     before the cudaStreamWaitEvent and one just after it; the time between them is how long
     *     the compute stream stalled on the transfer (zero when the transfer finished before the
     *     compute reached the wait). The pairs are read (cudaEventElapsedTime) here, which
     *     synchronises with them: call it after the step's work (the trainer does, after the
     *     optimizer). comm_sync (host block after synchronising the compute stream) adds its
     *     host wait. Cost: two event records per wait that could stall; none where the transfer
     *     is already done.
     * This is time this rank waited, not the transfers' duration: a transfer hidden behind compute
     * counts 0. Test hook: GLMTUNE_COMM_DELAY_MS=d in the environment makes every transfer take
     * at least d ms longer (CPU: its completion is held back until d ms after its start; CUDA: a
     * host function sleeping d ms is queued on the communication stream before it), a slow
     * interconnect simulated, so that tests can check the waits show up here. */
    double (*comm_wait_ms)(const glm_backend *be, int reset);
    /* Bytes this process's rank has sent since the last call with reset != 0, by kind
     * (glm_comm_kind), on every communicator (one total per process, as comm_wait_ms). Counted
     * when an op starts, by the bytes each rank sends under the ring algorithms (the "bus
     * bytes" of NCCL's performance notes): all-reduce of S bytes 2 (n - 1) / n x S; all-gather of
     * shards of s bytes (n - 1) x s; sendrecv its bytes (0 to itself). NCCL may pick another
     * algorithm (tree) whose wire bytes differ; these are the bytes lora/model/comm_plan.c predicts.
     * World 1: nothing is counted. bytes [GLM_COMM_KINDS] is OVERWRITTEN. */
    void (*comm_bytes)(const glm_backend *be, double *bytes, int reset);
    /* Stops every rank after an unrecoverable error on this one: prints nothing itself (the caller
     * reported the error). CPU: MPI_Abort(MPI_COMM_WORLD, code), which does not return. CUDA:
     * ncclCommAbort, then MPI_Abort when the ranks run under MPI; else it returns and the caller
     * exits non-zero (the launcher or torchrun stops the other ranks). World 1: returns. */
    void (*comm_abort)(const glm_backend *be, int code);

    /* ---- memory accounting and profiling ---------------------------------------------------- */

    /* The most workspace the attention ops may take for a library's fused kernels (CUDA: cuDNN's
     * backward workspace, about 8 bytes per query element), as the memory plan leaves it: a call
     * whose workspace would be larger runs glmtune's own kernels, which need none (one line on
     * stderr says so, once). bytes < 0: no cap (the default). CPU: nothing to cap. */
    void (*set_attention_ws_cap)(const glm_backend *be, double bytes);

    /* Memory of the device the backend computes on, in bytes: *total and *free as the device
     * reports them (CPU: physical RAM and MemAvailable, common/meminfo.h), *in_use and *peak the
     * bytes held through be->alloc now and at most since the last mem_reset_peak (CPU: 0, not
     * tracked). */
    void (*mem_info)(const glm_backend *be, size_t *free_b, size_t *total_b, size_t *in_use, size_t *peak);
    void (*mem_reset_peak)(const glm_backend *be);

    /* ---- the process's device memory as nvidia-smi counts it: a hard cap, fixed overhead, scratch ----
     * What a process holds on a GPU is more than its buffers: the CUDA context, cuBLAS / cuBLASLt /
     * cuDNN handles and workspaces, NCCL's buffers, the kernels' modules, and each buffer rounded up
     * to the driver's pages. The CUDA backend reads the driver's own per-process figure (NVML, the
     * number nvidia-smi prints; where NVML cannot name this process: the device's used memory less
     * what was used before this backend created its context) and enforces a cap on it. */

    /* Bytes this process holds on the backend's device now, as nvidia-smi counts them (CUDA: NVML's
     * used memory of this pid; without it, the device's used memory less what was used before the
     * backend was created). CPU: 0 (nothing on a device). Safe to call from another thread (a
     * sampler measuring a step's peak). */
    size_t (*mem_process)(const glm_backend *be);
    /* Bytes the process holds on the device outside be->alloc and the backend's scratch: the
     * context, library handles and their workspaces (cuBLASLt's 32 MiB, cuDNN's handle, NCCL's
     * buffers), loaded modules and the page rounding of the buffers held: mem_process less the bytes
     * held through alloc and scratch, the largest seen so far (it only grows: libraries load lazily),
     * plus 256 MiB held back for what loads during the first steps (the GEMM kernels cuBLASLt picks,
     * kernel modules, NCCL's connections; NCCL_RUNTIME_CONNECT=0, which glmtune train sets under
     * --max-gpu-memory, makes NCCL connect at creation).
     * The planner subtracts it from a cap (glm_model_budget). CPU: 0. */
    size_t (*mem_overhead)(const glm_backend *be);
    /* Makes `bytes` (0: none, the default) a hard cap on mem_process: from now on an allocation
     * (alloc, or a scratch slot growing inside an op) that would take the process past it fails with
     * GLM_ERR_NOMEM and a message naming what was allocated, the cap, what the process holds and a
     * hint. Errors: GLM_ERR_NOMEM when the process already holds more than `bytes` (the cap is still
     * set: later allocations fail). CPU: not enforced (host memory; the planner's budget still
     * holds it), returns GLM_OK. */
    glm_status (*set_mem_cap)(const glm_backend *be, size_t bytes);
    /* The scratch the backend grows inside its ops for a training step of shape *s (sum of its
     * scratch slots at the sizes they reach: attention's statistics and document bounds, cuDNN's
     * document runs, ragged offsets, log-sum-exp copy and workspace, the GEMMs' widened operands,
     * reductions), in *bytes; of that, the fused attention library's workspace in *attn_ws (may be
     * NULL), which the plan may leave out (set_attention_ws_cap(be, 0): glmtune's kernels, which
     * need none). CUDA asks cuDNN for the workspace of the graphs the step will build (the shape
     * class of attention_ragged.cu: batch and sequence length rounded up to powers of two) for the
     * worst layout of B rows of T tokens with up to s->max_docs documents a row (0: one). Loads
     * cuDNN when it is not loaded yet (its handle then counts in mem_overhead). CPU: 0.
     * Errors: GLM_ERR_ARG (sizes), GLM_ERR_DEVICE (cuDNN failed). */
    glm_status (*scratch_need)(const glm_backend *be, const struct glm_scratch_shape *s, size_t *bytes, size_t *attn_ws);
    /* Grows the scratch slots now to what scratch_need says for *s (with_attn_ws 0: without the
     * attention library's workspace), so that an out-of-memory, or the cap, shows before the first
     * step. Slots never shrink. Errors: GLM_ERR_NOMEM (the message names the slot and the cap). CPU:
     * nothing to do. */
    glm_status (*scratch_reserve)(const glm_backend *be, const struct glm_scratch_shape *s, int with_attn_ws);

    /* Profiling by phase. prof_enable(be, 1) turns it on (off by default: phase() is then free).
     * phase(be, p) says that the ops queued from now on belong to phase p (a glm_phase), until
     * the next phase() call. prof_collect(be, ms) waits for queued work and ADDS to ms[p] the
     * time in milliseconds spent in each phase since the previous collect (CUDA: events on the
     * stream; CPU: wall clock). */
    void (*prof_enable)(const glm_backend *be, int on);
    void (*phase)(const glm_backend *be, int p);
    glm_status (*prof_collect)(const glm_backend *be, double *ms);

    /* ---- capabilities ------------------------------------------------------------------------ */

    /* 1 when the backend does what feature f names (a glm_feature), else 0 (also for an f it does not
     * know). A backend from comm_split answers as its parent. */
    int (*supports)(const glm_backend *be, glm_feature f);
};

#endif
