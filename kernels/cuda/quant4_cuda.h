/* kernels/cuda/quant4_cuda.h: the 4-bit (QLoRA) format's CUDA kernels (kernels/cuda/quant4.cu),
 * the same bits as the CPU reference (kernels/quant4.h): quantize (so that bench can quantize
 * random weights made on the GPU, and a loader can quantize on the device) and dequantize to
 * bf16 (before a layer's base GEMMs).
 *
 * All buffers of the glm_q4_tensor passed here are device memory (the struct itself is host
 * memory and may be a temporary: its pointer values are taken at launch). Work is queued on
 * `stream` (a cudaStream_t; NULL = the legacy default stream) and is asynchronous: errors
 * returned are launch errors; a fault shows at the next synchronisation. Callable from C. */
#ifndef GLM_KERNELS_CUDA_QUANT4_CUDA_H
#define GLM_KERNELS_CUDA_QUANT4_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/quant4.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device workspace bytes glm_q4_cuda_quantize needs for n weights: with double quantization the
 * fp32 absmax of every block (4 nblocks, 16-byte aligned) and one double per 256-block group for
 * the offset's partial sums; 0 without. */
size_t glm_q4_cuda_quantize_workspace(int64_t n, int double_quant);

/* Quantizes x[q->n] (device; float32, or bfloat16 when x_bf16 is 1: the flattened weight) into
 * q's device buffers (overwritten), exactly as glm_q4_quantize_f32 / _bf16 do (same bytes, the
 * double-quantization offset included: its double sums run in the CPU's order, one thread per
 * group, then one thread over the groups). `workspace`: glm_q4_cuda_quantize_workspace bytes
 * (device; NULL when that is 0). Non-finite input is not detected here (the CPU path reports it);
 * its codes are unspecified. Errors: GLM_ERR_ARG (bad q, missing workspace), GLM_ERR_DEVICE
 * (a launch failed: the CUDA error named). */
glm_status glm_q4_cuda_quantize(glm_q4_tensor *q, const void *x, int x_bf16, void *workspace, void *stream);

/* Dequantizes q into out[q->n] (device, bfloat16): out_i = code value x block absmax in fp32,
 * rounded once to nearest even, bit for bit glm_q4_dequantize_bf16. Reads (n+1)/2 code bytes and
 * the absmax pieces (4.5 or ~4.13 bits a weight) and writes 2 bytes a weight: memory-bound; the
 * fast path needs q->codes 8-byte and out 16-byte aligned (cudaMalloc's are), else a per-weight
 * kernel runs. Errors: GLM_ERR_ARG (bad q), GLM_ERR_DEVICE (launch failed). */
glm_status glm_q4_cuda_dequantize_bf16(const glm_q4_tensor *q, void *out, void *stream);

/* Waits for the device (cudaDeviceSynchronize): for tests and benchmarks that queue on the
 * default stream. Errors: GLM_ERR_DEVICE naming the CUDA error (a kernel fault). */
glm_status glm_q4_cuda_sync(void);

#ifdef __cplusplus
}
#endif

#endif
