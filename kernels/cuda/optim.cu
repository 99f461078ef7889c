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

/* Returns NaN (with the message recorded by glm_err) when a CUDA call fails. */
double cu_sumsq(const glm_backend *be, const float *x, int64_t n) {
    cuda_impl *I = IMPL(be);
    if (n <= 0) return 0.0;
    unsigned g = grid_for(n, 256);
    if (g > SUMSQ_BLOCKS) g = SUMSQ_BLOCKS;
    void *p;
    if (scratch(I, SCR_REDUCE, SUMSQ_BLOCKS * 8, &p)) return NAN;
    k_sumsq<<<g, 256, 0, I->s>>>((double *)p, x, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        glm_err(GLM_ERR_DEVICE, "cuda backend: sumsq: %s", cudaGetErrorString(e));
        return NAN;
    }
    double h[SUMSQ_BLOCKS];
    if (cu_download(be, h, p, (size_t)g * 8)) return NAN;
    double s = 0;
    for (unsigned i = 0; i < g; i++) s += h[i];
    return s;
}

}  // namespace glmcu
