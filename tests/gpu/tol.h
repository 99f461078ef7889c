/* tests/gpu/tol.h: the tolerances of the op tests (the op table, tests/ops/, on CUDA and on the
 * CPU) and of the other CUDA tests, in one place, with the reasons.
 *
 * Every CUDA op is compared with the CPU reference op (kernels/cpu, fp32 storage, double
 * reductions) on the same inputs: random values already rounded to bf16, so both backends see
 * exactly the same numbers and only the CUDA side's own rounding is measured. The measure is the
 * norm-relative error ||cuda - cpu|| / ||cpu|| over the whole output buffer (a NaN anywhere, e.g.
 * an element left unwritten over the NaN poison, fails it).
 *
 * TOL_BF16 = 1e-2: outputs stored as bf16 (8 significant bits, unit roundoff 2^-9 ~ 2e-3). One
 *   rounding of the result gives ~1.1e-3 rms-relative; ops that read an output they rounded
 *   before (accumulating ones: rmsnorm_bwd, axpy, beta = 1 GEMMs) or whose fp32 internals
 *   differ from the CPU's double ones (attention, softmax) stay within a few 1e-3. An indexing,
 *   masking or race bug gives O(1).
 * TOL_F32 = 1e-5: fp32 outputs (rstd, lse, LoRA rank-r GEMMs, adamw, cross-entropy's loss sum)
 *   from exact inputs, accumulated in fp32 where the CPU uses double: the error grows like
 *   sqrt(K) * 6e-8 (K = 13696 gives ~7e-6 worst-case-ish, typically ~1e-6).
 * TOL_SUMSQ = 1e-10: both backends accumulate in double; only the order differs.
 * TOL_MODEL_LOGITS = 3e-2 (test_cuda_model): every logit of the tiny GLM-4 with bf16 weights,
 *   bf16 residual stream (rounded after each of the 4 residual adds), bf16 norm outputs, q/k/v,
 *   MLP activations and bf16 logits: about ten roundings of ~2e-3 along each path, amplified by
 *   the random (untrained) weights. Measured on an H200 (2026-11): 1.00e-2 (chatglm), 9.98e-3
 *   (hf); a real bug (mask, rope, layout) gives O(1).
 * TOL_MODEL_LOSS = 1e-2, TOL_MODEL_GRAD = 5e-2 (test_cuda_model): a whole forward + backward of
 *   the tiny GLM-4 with bf16 weights, residual stream and activation gradients rounds a few
 *   dozen times along the path (each ~2e-3 relative, partly cancelling); the loss, a mean over
 *   targets, averages much of it out (measured 1.4e-4 to 4.2e-4); the LoRA grads are products of
 *   two such chains (measured 1.3e-2 to 1.4e-2 overall, worst single tensor 1.9e-2). The CPU
 *   side uses the same bf16-rounded weights (the fixture is stored in bf16), so the gap measures
 *   activation rounding only.
 * TOL_RERUN_CUDNN = 1e-2 (test_cuda_model's copy-overlap test): the same step run twice on the
 *   GPU with cuDNN's attention, whose backward accumulates dQ with atomics (the order varies), so
 *   the LoRA grads of two runs differ in the last bf16 bits, amplified like the grads above:
 *   measured 1.6e-3 to 2.8e-3 (8 layers, 8192 tokens, H200). With glmtune's own attention kernels
 *   the same comparison is exact (tolerance 0). A stale or torn layer input gives O(1).
 * TOL_CP_LOSS = 1e-2, TOL_CP_GRAD = 3e-2 (tests/gpu/cp.sh): context parallel (the ring over
 *   2 or 4 ranks) against one GPU, the tiny fixture, step 1's LoRA gradients per tensor (worst
 *   tensor). Both sides are bf16 CUDA runs of the same step: neither is the truth, each is within
 *   the whole-step bf16 error of the CPU specification, which test_cuda_model measures at
 *   1.3e-2 to 1.4e-2 overall and 1.9e-2 for the worst tensor (TOL_MODEL_GRAD above). The ring
 *   computes attention with glmtune's own block kernels (kernels/cuda/attention.cu) on key
 *   blocks of S = T/2n tokens, merging the blocks' f32 results and rounding once to bf16, and
 *   its rows of 2S local tokens run every other GEMM with other shapes; the 1-GPU run uses
 *   cuDNN's whole-row kernels. Their roundings are different draws of the same size, largely
 *   independent, so the two runs differ by about sqrt(2) x each one's error against the CPU:
 *   ~2.0e-2 overall, ~2.7e-2 for the worst tensor, hence 3e-2. A GPU session measured 1.46e-2 with
 *   --context-parallel 2 against cp.sh's former 1e-2, which sat below this noise floor (1e-2 is
 *   what two bf16 runs of equal shapes reach, not two of different shapes). The loss, a mean over
 *   targets, averages the rounding out (measured 1.9e-4). What separates rounding from a bug:
 *   cp.sh also compares every run, the ring's included, with the CPU backend (each must be within
 *   TOL_MODEL_GRAD, like any CUDA step), and prints the 1-GPU run with glmtune's own kernels
 *   (GLMTUNE_ATTENTION=glmtune) against the cuDNN one and against the ring: a mask, chunk-order
 *   or merge bug in the ring gives O(1) against the CPU, far above TOL_MODEL_GRAD.
 *
 * The FP8 base (tests/gpu/test_fp8_ops.c). The quantizers (weights per row, activations per row,
 * the transposition) are compared bit for bit: both backends compute kernels/formats.h's integer
 * conversion after the same IEEE divisions and multiplies, from the same bf16 inputs. The GEMM
 * (be->fp8_matmul) is compared with the CPU's emulation, which multiplies the same FP8 codes
 * exactly and sums in double: what is left is the GPU's fp32 accumulation and its bf16 store.
 * TOL_FP8_OUT = 2^-8, TOL_FP8_ACC = 2^-11 (elementwise: |cuda - cpu| <= TOL_FP8_OUT |cpu| +
 *   TOL_FP8_ACC S [+ TOL_FP8_OUT |p| where beta != 0], S = s_x[m] s_w sum_k |X W|, the terms'
 *   magnitudes, p = cpu - beta y_before, the product term): the store rounds to bf16 (8-bit
 *   significand: at most 2^-8 relative; the scale multiplies and the beta add are fp32 roundings,
 *   2^-24 each). With beta != 0 cuBLASLt's outer-vector epilogue (sm_90) rounds the scaled product
 *   once more before it adds beta C (measured on the H200, cuBLAS 13.1: up to 2.7 x the single-rounding
 *   bound at K = 64, where S is only a few |p|; the f32 tile's own epilogue rounds once): the
 *   |p| term. That extra 2^-8 of p is far below the product's own E4M3 error (3.7e-2, docs/fp8.md).
 *   FP8 products are exact in fp32 (4-bit significands), and the accumulation, which Hopper's FP8
 *   tensor cores keep at about 14 bits (DeepSeek-V3's report measures it), errs: with
 *   GLMTUNE_FP8_ACCUM=fp32 (cuBLAS promotes the partial sums to fp32 after each instruction's K
 *   slice) by about 2^-14 S plus fp32's K/128 x 2^-24 S; with fast accumulation (the default: no
 *   promotion) each of the K/32 slice additions errs by 2^-14 of the running sum, which for terms of
 *   random sign stays about S / sqrt(K): in all sqrt(K/32) 2^-14 S / sqrt(K) < 2^-16 S. 2^-11 is 8
 *   times the larger. A wrong layout, a missing or misapplied scale, a row off by one give O(1).
 * TOL_FP8_GEMM = 1e-2: the norm-relative error of the whole output, as TOL_BF16 (bf16 stores).
 * TOL_FP8_MODEL_FACTOR = 2 (the tiny model, forward and backward, fp8 base): the GPU's fp8 run
 *   against the CPU's emulation, and against the CPU's unquantized base, must stay within 2 x the
 *   fp8 base's own error on the CPU (emulation against unquantized, measured in the same run) plus
 *   the bf16 tolerance of that quantity (TOL_MODEL_LOGITS / LOSS / GRAD). Why the fp8 error enters:
 *   the GPU quantizes bf16 activations that differ from the CPU's f32 ones by a relative d (the bf16
 *   run's ~1e-2); a value moving by d moves its E4M3 code by one step s (about 2^-3 relative) with
 *   probability d / s, an rms change of sqrt(d s) ~ 3e-2 per element, the same size as E4M3's own
 *   rounding error (s / sqrt(12) ~ 2.6e-2), which the CPU's fp8-vs-unquantized error measures: their
 *   ratio sqrt(12 d / s) ~ 1.2, hence 2. A bug gives O(1) against both references. */
/*
 * The CPU run of the op table (tests/kernels/test_cpu_ops.c) checks the CPU reference itself:
 * TOL_CPU_REF = 1e-5: a CPU op (fp32 storage) against a float64 computation written in the test
 *   (tests/ops/op_table.c), on small shapes: one rounding of each output to f32 (6e-8), sgemm's
 *   fp32 accumulation over K <= 7, AdamW's f32 arithmetic (a few ulps of each update, 2-3 steps),
 *   the f32 rounding of RoPE's cos/sin the specification itself asks for. A wrong formula, index,
 *   mask or stride gives 1e-3 or (mostly) O(1).
 * TOL_FD = 2e-3: a backward op against central finite differences (step 1e-2) of its forward's
 *   objective f(x) = <forward(x), upstream gradient> in fp32: truncation error h^2 |f'''| / 6
 *   (~1e-5 relative for these smooth functions), plus f32 rounding of f divided by 2h (a few 1e-5
 *   relative); measured 3e-7 (the linear ops: dropout, RoPE) to 3e-5 (RMSNorm, SwiGLU), attention
 *   1e-5 (the rows of test_cpu_ops' table). A wrong term gives 1e-2 or (mostly) far more.
 * TOL_FD_CE = 1e-3: the same for cross-entropy's dlogits, whose objective (a log-sum-exp) is
 *   smoother; the tolerance test_cpu_ops.c has always used. */
#ifndef GLM_TESTS_GPU_TOL_H
#define GLM_TESTS_GPU_TOL_H

static const double TOL_BF16 = 1e-2;
static const double TOL_F32 = 1e-5;
static const double TOL_SUMSQ = 1e-10;
static const double TOL_MODEL_LOGITS = 3e-2;
static const double TOL_MODEL_LOSS = 1e-2;
static const double TOL_MODEL_GRAD = 5e-2;
static const double TOL_RERUN_CUDNN = 1e-2;
static const double TOL_CP_LOSS = 1e-2;
static const double TOL_CP_GRAD = 3e-2;
static const double TOL_FP8_OUT = 0x1p-8;
static const double TOL_FP8_ACC = 0x1p-11;
static const double TOL_FP8_GEMM = 1e-2;
static const double TOL_FP8_MODEL_FACTOR = 2.0;
static const double TOL_CPU_REF = 1e-5;
static const double TOL_FD = 2e-3;
static const double TOL_FD_CE = 1e-3;

#endif
