/* kernels/cuda/optim.cu: AdamW (torch.optim.AdamW's single-tensor arithmetic in fp32), the sum
 * of squares for the gradient norm (double accumulation). (The NCCL all-reduce is in comm.cu.)
 * AdamW reads w, g, m, v and writes w, m, v: 28 bytes per parameter. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

__global__ void k_adamw(float *w, const float *g, float *m, float *v, int64_t n, float beta1, float beta2, float eps,
                        float decay, float grad_scale, float step_size, float bc2_sqrt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i] * grad_scale;
        float wi = w[i] * decay;
        float mi = m[i] + (1.0f - beta1) * (gi - m[i]);
        float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        w[i] = wi - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}

glm_status cu_adamw(const glm_backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float grad_scale, int64_t step) {
    if (n <= 0) return GLM_OK;
    double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    k_adamw<<<grid_for(n, 256), 256, 0, IMPL(be)->s>>>(w, g, m, v, n, beta1, beta2, eps, 1.0f - lr * weight_decay,
                                                        grad_scale, (float)((double)lr / bc1), (float)sqrt(bc2));
    LAUNCHED("adamw");
    return GLM_OK;
}

constexpr int SUMSQ_BLOCKS = 1024;

__global__ void k_sumsq(double *part, const float *x, int64_t n) {
    __shared__ double red[256];
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o; o >>= 1) {
        if ((int)threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = red[0];
}

/* The tensors' block partials go into the reduce scratch (SUMSQ_BLOCKS doubles) side by side, as
 * many tensors as fit, then one download per full scratch: 320 separate LoRA tensors take 5
 * synchronisations, not 320 (the adapter's flat buffer, lora/adapter/lora.h, is one tensor and
 * one synchronisation). A tensor gets at most SUMSQ_BLOCKS / 64 blocks
 * when there are several (a LoRA gradient is at most a few hundred thousand floats: 16 blocks
 * read it in microseconds), all of them when it is alone. */
glm_status cu_sumsq(const glm_backend *be, int count, const float *const *x, const int64_t *n, double *out) {
    cuda_impl *I = IMPL(be);
    void *p;
    GLM_TRY(scratch(I, SCR_REDUCE, SUMSQ_BLOCKS * 8, &p));
    double *part = (double *)p, h[SUMSQ_BLOCKS];
    unsigned nb[SUMSQ_BLOCKS]; /* the blocks of each tensor in the current batch */
    const unsigned cap = count == 1 ? SUMSQ_BLOCKS : SUMSQ_BLOCKS / 64;
    int first = 0; /* the batch's first tensor */
    unsigned used = 0;
    for (int k = 0; k <= count; k++) {
        unsigned g = 0;
        if (k < count && n[k] > 0) {
            g = grid_for(n[k], 256);
            if (g > cap) g = cap;
        }
        if (k == count || used + g > SUMSQ_BLOCKS || k - first == SUMSQ_BLOCKS) { /* the batch [first, k): download, sum */
            if (used) {
                GLM_TRY(cu_download(be, h, part, (size_t)used * 8));
            }
            unsigned o = 0;
            for (int t = first; t < k; t++) {
                double s = 0;
                for (unsigned b = 0; b < nb[t - first]; b++) s += h[o + b];
                out[t] = s;
                o += nb[t - first];
            }
            first = k;
            used = 0;
            if (k == count) break;
        }
        nb[k - first] = g;
        if (g) {
            k_sumsq<<<g, 256, 0, I->s>>>(part + used, x[k], n[k]);
            LAUNCHED("sumsq");
        }
        used += g;
    }
    return GLM_OK;
}

}  // namespace glmcu
