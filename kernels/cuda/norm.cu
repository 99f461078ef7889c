/* kernels/cuda/norm.cu: RMSNorm forward and backward (GLM-4's RMSNorm, kernels/backend.h).
 * One block of 256 threads per row, fp32 sums (the CPU reference sums in double). Rows of
 * C <= 8192 with C a multiple of 8 and 16-byte aligned rows keep the row in registers between
 * the sum and the scaling (16-byte loads, each element read once); other shapes take the scalar
 * kernels. Memory traffic: forward reads x, writes y (4 C bytes per row in bf16); backward reads
 * x, dy and dx and writes dx (8 C bytes per row). */
#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

constexpr int NORM_THREADS = 256, NORM_MAXV = 4; /* 16-byte chunks per thread: C <= 256 * 8 * 4 */

/* rstd = 1/sqrt(mean(x^2) + eps); y = bf16(x * rstd * w) */
__global__ void k_rmsnorm_fwd(bf16 *y, float *rstd, const bf16 *x, const bf16 *w, int64_t C, float eps) {
    __shared__ float red[32];
    int64_t n = blockIdx.x;
    const bf16 *xr = x + n * C;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = ld(xr + c);
        ss += v * v;
    }
    ss = block_sum(ss, red);
    float r = rsqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0) rstd[n] = r;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) st(y + n * C + c, ld(xr + c) * r * ld(w + c));
}

__global__ void __launch_bounds__(NORM_THREADS) k_rmsnorm_fwd8(bf16 *y, float *rstd, const bf16 *x, const bf16 *w, int C,
                                                               float eps) {
    __shared__ float red[32];
    const int64_t n = blockIdx.x;
    const int nch = C / 8;
    const bf16 *xr = x + n * C;
    bf16x8 v[NORM_MAXV];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_MAXV; k++) {
        int ch = threadIdx.x + k * NORM_THREADS;
        if (ch < nch) {
            v[k] = *(const bf16x8 *)(xr + ch * 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(v[k].v[j]);
                ss += f.x * f.x + f.y * f.y;
            }
        }
    }
    ss = block_sum(ss, red);
    const float r = rsqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0) rstd[n] = r;
#pragma unroll
    for (int k = 0; k < NORM_MAXV; k++) {
        int ch = threadIdx.x + k * NORM_THREADS;
        if (ch < nch) {
            bf16x8 wv = *(const bf16x8 *)(w + ch * 8), o;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(v[k].v[j]), g = __bfloat1622float2(wv.v[j]);
                o.v[j] = __floats2bfloat162_rn(f.x * r * g.x, f.y * r * g.y);
            }
            *(bf16x8 *)(y + n * C + ch * 8) = o;
        }
    }
}

static bool vec_ok(int64_t C, const void *a, const void *b, const void *c, const void *d) {
    auto al = [](const void *p) { return ((uintptr_t)p & 15) == 0; };
    return C % 8 == 0 && C <= (int64_t)NORM_THREADS * 8 * NORM_MAXV && al(a) && al(b) && al(c) && (!d || al(d));
}

glm_status cu_rmsnorm_fwd(const glm_backend *be, void *y, float *rstd, const void *x, const void *w, int64_t N, int64_t C,
                          float eps) {
    if (N <= 0) return GLM_OK;
    cudaStream_t s = IMPL(be)->s;
    if (vec_ok(C, y, x, w, NULL))
        k_rmsnorm_fwd8<<<(unsigned)N, NORM_THREADS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, (int)C, eps);
    else
        k_rmsnorm_fwd<<<(unsigned)N, NORM_THREADS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, C, eps);
    LAUNCHED("rmsnorm_fwd");
    return GLM_OK;
}

/* dx = bf16(dx + r w dy - x r^3 / C * sum(dy w x)), fp32 sum */
__global__ void k_rmsnorm_bwd(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w, const float *rstd, int64_t C) {
    __shared__ float red[32];
    int64_t n = blockIdx.x;
    const bf16 *xr = x + n * C, *dyr = dy + n * C;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += ld(dyr + c) * ld(w + c) * ld(xr + c);
    dot = block_sum(dot, red);
    float r = rstd[n];
    float k = r * r * r * dot / (float)C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        st(dx + n * C + c, ld(dx + n * C + c) + (r * ld(w + c) * ld(dyr + c) - ld(xr + c) * k));
}

__global__ void __launch_bounds__(NORM_THREADS) k_rmsnorm_bwd8(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w,
                                                               const float *rstd, int C) {
    __shared__ float red[32];
    const int64_t n = blockIdx.x;
    const int nch = C / 8;
    const bf16 *xr = x + n * C, *dyr = dy + n * C;
    bf16x8 xv[NORM_MAXV], gv[NORM_MAXV];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_MAXV; k++) {
        int ch = threadIdx.x + k * NORM_THREADS;
        if (ch < nch) {
            xv[k] = *(const bf16x8 *)(xr + ch * 8);
            gv[k] = *(const bf16x8 *)(dyr + ch * 8);
            bf16x8 wv = *(const bf16x8 *)(w + ch * 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 a = __bfloat1622float2(xv[k].v[j]), g = __bfloat1622float2(gv[k].v[j]), c = __bfloat1622float2(wv.v[j]);
                dot += g.x * c.x * a.x + g.y * c.y * a.y;
            }
        }
    }
    dot = block_sum(dot, red);
    const float r = rstd[n], kk = r * r * r * dot / (float)C;
#pragma unroll
    for (int k = 0; k < NORM_MAXV; k++) {
        int ch = threadIdx.x + k * NORM_THREADS;
        if (ch < nch) {
            bf16 *dxp = dx + n * C + ch * 8;
            bf16x8 d = *(const bf16x8 *)dxp, wv = *(const bf16x8 *)(w + ch * 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 a = __bfloat1622float2(xv[k].v[j]), g = __bfloat1622float2(gv[k].v[j]), c = __bfloat1622float2(wv.v[j]),
                       o = __bfloat1622float2(d.v[j]);
                d.v[j] = __floats2bfloat162_rn(o.x + (r * c.x * g.x - a.x * kk), o.y + (r * c.y * g.y - a.y * kk));
            }
            *(bf16x8 *)dxp = d;
        }
    }
}

glm_status cu_rmsnorm_bwd(const glm_backend *be, void *dx, const void *dy, const void *x, const void *w, const float *rstd,
                          int64_t N, int64_t C) {
    if (N <= 0) return GLM_OK;
    cudaStream_t s = IMPL(be)->s;
    if (vec_ok(C, dx, dy, x, w))
        k_rmsnorm_bwd8<<<(unsigned)N, NORM_THREADS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w,
                                                             rstd, (int)C);
    else
        k_rmsnorm_bwd<<<(unsigned)N, NORM_THREADS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w,
                                                            rstd, C);
    LAUNCHED("rmsnorm_bwd");
    return GLM_OK;
}

}  // namespace glmcu
