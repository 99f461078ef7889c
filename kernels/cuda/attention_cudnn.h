/* kernels/cuda/attention_cudnn.h: cuDNN's fused flash attention (forward and backward) for the
 * CUDA backend's attention ops, through cuDNN's graph API (the cudnn-frontend headers, cuDNN
 * itself loaded with dlopen on first use: a build or machine without cuDNN still runs, on
 * glmtune's own kernels in attention.cu). Host code only (attention_cudnn.cpp); the document runs
 * and ragged offsets it takes are made on the GPU by attention.cu.
 *
 * Packed rows map onto cuDNN's ragged ("THD") batches: every document of every row is one
 * sequence of the cuDNN batch, its tokens found through per-sequence element offsets into q, k,
 * v, out, dout, dq, dk, dv (offset = first token's index in the B*T-row matrix * row stride), with
 * a padding mask (sequence lengths) and a top-left causal mask inside each sequence: exactly the
 * block-diagonal causal mask of attention_fwd (kernels/backend.h). The graph's batch nb and
 * maximum sequence length s_max are powers of two (s_max capped at T) so that few graphs serve
 * all batches; sequences past the real ones have length 0. */
#ifndef GLM_KERNELS_CUDA_ATTENTION_CUDNN_H
#define GLM_KERNELS_CUDA_ATTENTION_CUDNN_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/backend.h"
}

namespace glmcu {

struct cudnn_attn; /* the handle, the loaded library and the graphs built so far, by shape */

/* One graph's shape. The log-sum-exp tensor cuDNN reads / writes is token-major ([n, H] f32,
 * "TH1", the only layout its ragged kernels take; attention_ragged.cu transposes it to / from the
 * backend's head-major [B, H, T]). */
struct cudnn_attn_shape {
    int bwd;                  /* 0 forward, 1 backward */
    int nb, s_max;            /* graph batch (sequences) and maximum sequence length */
    int H, Hkv, Dh;
    int64_t ldq, ldk, ldv, ldo; /* row strides (elements) of q / dq, k / dk, v / dv, out / dout */
};

/* Device pointers of one call. Offsets: int64 [nb + 1] each (elements); seq_len int32 [nb]. */
struct cudnn_attn_args {
    const void *q, *k, *v;
    void *out;          /* forward: written; backward: read */
    float *stats;       /* forward: written; backward: read (token-major [n, H]) */
    const void *dout;   /* backward */
    void *dq, *dk, *dv; /* backward: written */
    const int32_t *seq_len;
    const int64_t *off_q, *off_k, *off_v, *off_o, *off_stats;
};

/* Loads cuDNN (libcudnn.so.9, the dynamic loader's search path; GLMTUNE_CUDNN_LIBRARY names
 * another file) and creates a handle on the current device. Returns NULL, with the reason in
 * *why (static storage), when cuDNN is absent, older than 9.6 (GQA with ragged batches) or fails
 * to start. */
cudnn_attn *cudnn_attn_create(const char **why);
void cudnn_attn_destroy(cudnn_attn *c);
/* cuDNN's version (e.g. 91900), 0 when not loaded. */
long cudnn_attn_version(const cudnn_attn *c);

/* The graph for `shape` (built, or found built), and its workspace in *ws_bytes. GLM_OK; or
 * GLM_ERR_UNSUPPORTED when cuDNN declines the shape (the reason in glm_err's message; the
 * refusal is remembered and not retried); GLM_ERR_DEVICE on other failures. *plan stays valid
 * until cudnn_attn_destroy. */
glm_status cudnn_attn_plan(cudnn_attn *c, const cudnn_attn_shape *shape, void **plan, int64_t *ws_bytes);

/* Runs a plan on stream s with workspace ws (at least *ws_bytes of cudnn_attn_plan). Errors:
 * GLM_ERR_DEVICE (cuDNN's message). */
glm_status cudnn_attn_run(cudnn_attn *c, void *plan, cudaStream_t s, const cudnn_attn_args *a, void *ws);

} // namespace glmcu

#endif
