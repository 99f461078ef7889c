/* kernels/cuda/elementwise.cu: the memory-bound elementwise ops: add_bias, axpy, dropout, cast,
 * fill_normal, embedding, SwiGLU forward and backward. Each reads bf16 as float, computes in fp32
 * and rounds once at the store. The large ones (SwiGLU, bias, cast) move 16 bytes per thread
 * access when the sizes allow (a multiple of 8 elements, 16-byte aligned rows), else one element. */
#include <limits.h>

#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- add_bias: y[n, d] += b[d] ------------------------------------------------------------ */

__global__ void k_add_bias(bf16 *y, int64_t ldy, const bf16 *b, int64_t N, int64_t D) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D, d = i - n * D;
        st(y + n * ldy + d, ld(y + n * ldy + d) + ld(b + d));
    }
}

/* 8 columns per thread */
__global__ void k_add_bias8(bf16 *y, int64_t ldy, const bf16 *b, int64_t N, int64_t D8) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * D8; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D8, d = (i - n * D8) * 8;
        bf16x8 v = *(bf16x8 *)(y + n * ldy + d), w = *(const bf16x8 *)(b + d);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 a = __bfloat1622float2(v.v[j]), c = __bfloat1622float2(w.v[j]);
            v.v[j] = __floats2bfloat162_rn(a.x + c.x, a.y + c.y);
        }
        *(bf16x8 *)(y + n * ldy + d) = v;
    }
}

glm_status cu_add_bias(const glm_backend *be, void *y, int64_t ldy, const void *b, int64_t N, int64_t D) {
    if (N <= 0 || D <= 0) return GLM_OK;
    cudaStream_t s = IMPL(be)->s;
    if (D % 8 == 0 && ldy % 8 == 0 && aligned16(y) && aligned16(b))
        k_add_bias8<<<grid_for(N * D / 8, 256), 256, 0, s>>>((bf16 *)y, ldy, (const bf16 *)b, N, D / 8);
    else
        k_add_bias<<<grid_for(N * D, 256), 256, 0, s>>>((bf16 *)y, ldy, (const bf16 *)b, N, D);
    LAUNCHED("add_bias");
    return GLM_OK;
}

/* ---- axpy --------------------------------------------------------------------------------- */

__global__ void k_axpy(bf16 *y, const bf16 *x, float alpha, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        st(y + i, ld(y + i) + alpha * ld(x + i));
}

glm_status cu_axpy(const glm_backend *be, void *y, const void *x, float alpha, int64_t n) {
    if (n <= 0) return GLM_OK;
    k_axpy<<<grid_for(n, 256), 256, 0, IMPL(be)->s>>>((bf16 *)y, (const bf16 *)x, alpha, n);
    LAUNCHED("axpy");
    return GLM_OK;
}

/* ---- dropout ------------------------------------------------------------------------------ */

__global__ void k_dropout(bf16 *y, int64_t ldy, const bf16 *x, int64_t ldx, int64_t N, int64_t D, int64_t row0, float p,
                          float inv, uint64_t seed, uint64_t stream) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D, d = i - n * D;
        float v = ld(x + n * ldx + d);
        if (p > 0.0f) v = glm_dropout_u01(seed, stream, (uint64_t)(row0 * D + i)) >= p ? v * inv : 0.0f;
        st(y + n * ldy + d, v);
    }
}

glm_status cu_dropout(const glm_backend *be, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t N, int64_t D,
                      int64_t row0, float p, uint64_t seed, uint64_t stream) {
    if (N <= 0 || D <= 0) return GLM_OK;
    k_dropout<<<grid_for(N * D, 256), 256, 0, IMPL(be)->s>>>((bf16 *)y, ldy, (const bf16 *)x, ldx, N, D, row0, p,
                                                              1.0f / (1.0f - p), seed, stream);
    LAUNCHED("dropout");
    return GLM_OK;
}

/* ---- cast, fill_normal -------------------------------------------------------------------- */

__global__ void k_f32_to_bf16(bf16 *d, const float *s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = __float2bfloat16(s[i]);
}
__global__ void k_bf16_to_f32(float *d, const bf16 *s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = __bfloat162float(s[i]);
}

glm_status cu_cast(const glm_backend *be, void *dst, glm_dtype dd, const void *src, glm_dtype ds, int64_t n) {
    if (n <= 0) return GLM_OK;
    cuda_impl *I = IMPL(be);
    if (dd == ds) {
        if (dst != src) CU(cudaMemcpyAsync(dst, src, (size_t)n * glm_dtype_size(dd), cudaMemcpyDeviceToDevice, I->s), "cast");
        return GLM_OK;
    }
    if (dd == GLM_DT_BF16) k_f32_to_bf16<<<grid_for(n, 256), 256, 0, I->s>>>((bf16 *)dst, (const float *)src, n);
    else k_bf16_to_f32<<<grid_for(n, 256), 256, 0, I->s>>>((float *)dst, (const bf16 *)src, n);
    LAUNCHED("cast");
    return GLM_OK;
}

__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16 *p, float v) { *p = __float2bfloat16(v); }

template <typename D, typename S>
__global__ void k_cast_2d(D *d, int64_t ldd, const S *s, int64_t lds, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        stf(d + r * ldd + c, ldf(s + r * lds + c));
    }
}

/* The context-parallel ring's K|V packing and accumulator stores (tests/gpu/test_cuda_ops.c: cast_2d). */
glm_status cu_cast_2d(const glm_backend *be, void *dst, glm_dtype dd, int64_t ldd, const void *src, glm_dtype ds,
                      int64_t lds, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return GLM_OK;
    if (dd == GLM_DT_F64 || ds == GLM_DT_F64)
        return glm_err(GLM_ERR_UNSUPPORTED, "cuda backend: cast_2d: f64 buffers exist only on the CPU backend");
    cuda_impl *I = IMPL(be);
    if (dd == ds) {
        size_t e = glm_dtype_size(dd);
        CU(cudaMemcpy2DAsync(dst, (size_t)ldd * e, src, (size_t)lds * e, (size_t)cols * e, (size_t)rows,
                             cudaMemcpyDeviceToDevice, I->s), "cast_2d");
        return GLM_OK;
    }
    int64_t n = rows * cols;
    if (dd == GLM_DT_BF16)
        k_cast_2d<bf16, float><<<grid_for(n, 256), 256, 0, I->s>>>((bf16 *)dst, ldd, (const float *)src, lds, rows, cols);
    else
        k_cast_2d<float, bf16><<<grid_for(n, 256), 256, 0, I->s>>>((float *)dst, ldd, (const bf16 *)src, lds, rows, cols);
    LAUNCHED("cast_2d");
    return GLM_OK;
}

template <typename T>
__global__ void k_fill_normal(T *d, int64_t n, float mean, float std, uint64_t seed, uint64_t stream) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = (T)(mean + std * glm_normal_hash(seed, stream, (uint64_t)i));
}

glm_status cu_fill_normal(const glm_backend *be, void *dst, glm_dtype dt, int64_t n, float mean, float std, uint64_t seed,
                          uint64_t stream) {
    if (n <= 0) return GLM_OK;
    cudaStream_t s = IMPL(be)->s;
    if (dt == GLM_DT_BF16) k_fill_normal<bf16><<<grid_for(n, 256), 256, 0, s>>>((bf16 *)dst, n, mean, std, seed, stream);
    else k_fill_normal<float><<<grid_for(n, 256), 256, 0, s>>>((float *)dst, n, mean, std, seed, stream);
    LAUNCHED("fill_normal");
    return GLM_OK;
}

/* ---- embedding ---------------------------------------------------------------------------- */

__global__ void k_embedding(bf16 *out, const bf16 *table, const uint32_t *ids, int64_t N, int64_t C, int64_t V, int *bad) {
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        uint32_t id = ids[n];
        bool ok = (int64_t)id < V;
        if (!ok && threadIdx.x == 0) atomicMin(bad, (int)min(n, (int64_t)INT_MAX));
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            out[n * C + c] = ok ? table[(int64_t)id * C + c] : __float2bfloat16(0.0f);
    }
}

glm_status cu_embedding(const glm_backend *be, void *out, const void *table, const uint32_t *ids, int64_t N, int64_t C,
                        int64_t V) {
    cuda_impl *I = IMPL(be);
    if (N <= 0) return GLM_OK;
    int big = INT_MAX;
    CU(cudaMemcpyAsync(I->flag, &big, 4, cudaMemcpyHostToDevice, I->s), "embedding");
    k_embedding<<<(unsigned)(N < 65535 * 16 ? N : 65535 * 16), 256, 0, I->s>>>((bf16 *)out, (const bf16 *)table, ids, N, C,
                                                                               V, I->flag);
    LAUNCHED("embedding");
    int bad = INT_MAX;
    CU(cudaMemcpyAsync(&bad, I->flag, 4, cudaMemcpyDeviceToHost, I->s), "embedding");
    CU(cudaStreamSynchronize(I->s), "embedding");
    if (bad != INT_MAX) {
        uint32_t id = 0;
        CU(cudaMemcpy(&id, ids + bad, 4, cudaMemcpyDeviceToHost), "embedding");
        return glm_err(GLM_ERR_ARG, "embedding: token id %u at position %d is outside the vocabulary (V = %lld)", id, bad,
                       (long long)V);
    }
    return GLM_OK;
}

/* ---- SwiGLU ------------------------------------------------------------------------------- */

__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + __expf(-g)); }

__global__ void k_swiglu_fwd(bf16 *out, const bf16 *h, int64_t N, int64_t F) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F, f = i - n * F;
        float g = ld(h + n * 2 * F + f), u = ld(h + n * 2 * F + F + f);
        st(out + i, silu_f(g) * u);
    }
}

__global__ void k_swiglu_fwd8(bf16 *out, const bf16 *h, int64_t N, int64_t F) {
    const int64_t F8 = F / 8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F8; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F8, f = (i - n * F8) * 8;
        bf16x8 g8 = *(const bf16x8 *)(h + n * 2 * F + f), u8 = *(const bf16x8 *)(h + n * 2 * F + F + f), o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 g = __bfloat1622float2(g8.v[j]), u = __bfloat1622float2(u8.v[j]);
            o.v[j] = __floats2bfloat162_rn(silu_f(g.x) * u.x, silu_f(g.y) * u.y);
        }
        *(bf16x8 *)(out + n * F + f) = o;
    }
}

__global__ void k_swiglu_bwd(bf16 *dh, const bf16 *dout, const bf16 *h, int64_t N, int64_t F) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F, f = i - n * F;
        float g = ld(h + n * 2 * F + f), u = ld(h + n * 2 * F + F + f), d = ld(dout + i);
        float sg = 1.0f / (1.0f + __expf(-g));
        st(dh + n * 2 * F + f, d * u * sg * (1.0f + g * (1.0f - sg)));
        st(dh + n * 2 * F + F + f, d * g * sg);
    }
}

/* dh may equal h (in place): each thread reads its gate/up values before writing them */
__global__ void k_swiglu_bwd8(bf16 *dh, const bf16 *dout, const bf16 *h, int64_t N, int64_t F) {
    const int64_t F8 = F / 8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F8; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F8, f = (i - n * F8) * 8;
        bf16x8 g8 = *(const bf16x8 *)(h + n * 2 * F + f), u8 = *(const bf16x8 *)(h + n * 2 * F + F + f),
               d8 = *(const bf16x8 *)(dout + n * F + f), dg, du;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 g = __bfloat1622float2(g8.v[j]), u = __bfloat1622float2(u8.v[j]), d = __bfloat1622float2(d8.v[j]);
            float s0 = 1.0f / (1.0f + __expf(-g.x)), s1 = 1.0f / (1.0f + __expf(-g.y));
            dg.v[j] = __floats2bfloat162_rn(d.x * u.x * s0 * (1.0f + g.x * (1.0f - s0)), d.y * u.y * s1 * (1.0f + g.y * (1.0f - s1)));
            du.v[j] = __floats2bfloat162_rn(d.x * g.x * s0, d.y * g.y * s1);
        }
        *(bf16x8 *)(dh + n * 2 * F + f) = dg;
        *(bf16x8 *)(dh + n * 2 * F + F + f) = du;
    }
}

glm_status cu_swiglu_fwd(const glm_backend *be, void *out, const void *h, int64_t N, int64_t F) {
    if (N <= 0 || F <= 0) return GLM_OK;
    cudaStream_t s = IMPL(be)->s;
    if (F % 8 == 0 && aligned16(out) && aligned16(h))
        k_swiglu_fwd8<<<grid_for(N * F / 8, 256), 256, 0, s>>>((bf16 *)out, (const bf16 *)h, N, F);
    else
        k_swiglu_fwd<<<grid_for(N * F, 256), 256, 0, s>>>((bf16 *)out, (const bf16 *)h, N, F);
    LAUNCHED("swiglu_fwd");
    return GLM_OK;
}

/* The same with d = dout + scale (u a)[n, f] (glm_rank_term; any shape): a thread per element,
 * the term's r products read from memory */
__global__ void k_swiglu_bwd_rank(bf16 *dh, const bf16 *dout, const bf16 *h, int64_t N, int64_t F, const bf16 *u, int64_t ldu,
                                  const bf16 *a, int r, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * F; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / F, f = i - n * F;
        float p = 0.0f;
        for (int j = 0; j < r; j++) p += ld(u + n * ldu + j) * ld(a + (int64_t)j * F + f);
        float g = ld(h + n * 2 * F + f), up = ld(h + n * 2 * F + F + f), d = ld(dout + i) + scale * p;
        float sg = 1.0f / (1.0f + __expf(-g));
        st(dh + n * 2 * F + f, d * up * sg * (1.0f + g * (1.0f - sg)));
        st(dh + n * 2 * F + F + f, d * g * sg);
    }
}

/* The term's rank R at compile time, 8 columns a thread: blocks of 32 x 8 threads, x over 256
 * columns, y over rows (striding by 8 gridDim.y); each thread keeps its columns of a [R, 8] in
 * registers for all of its rows (a read once per thread, not once per element), u's row is one
 * address per warp (a broadcast). The added term costs 8 R FMAs per 8 elements, on data already in
 * registers: the op stays at the memory traffic of the plain backward, and the pass over dout that
 * the term would otherwise take (read and write, [N, F]) is gone. dh may equal h. */
template <int R>
__global__ void __launch_bounds__(256) k_swiglu_bwd_rank8(bf16 *dh, const bf16 *dout, const bf16 *h, int64_t N, int64_t F,
                                                          const bf16 *u, int64_t ldu, const bf16 *a, float scale) {
    const int64_t f = ((int64_t)blockIdx.x * 32 + threadIdx.x) * 8;
    if (f >= F) return;
    bf16x8 av[R];
#pragma unroll
    for (int j = 0; j < R; j++) av[j] = *(const bf16x8 *)(a + (int64_t)j * F + f);
    for (int64_t n = (int64_t)blockIdx.y * 8 + threadIdx.y; n < N; n += (int64_t)gridDim.y * 8) {
        float uj[R];
#pragma unroll
        for (int j = 0; j < R; j++) uj[j] = ld(u + n * ldu + j);
        const bf16x8 g8 = *(const bf16x8 *)(h + n * 2 * F + f), u8 = *(const bf16x8 *)(h + n * 2 * F + F + f),
                     d8 = *(const bf16x8 *)(dout + n * F + f);
        bf16x8 dg, du;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float2 p = make_float2(0.0f, 0.0f);
#pragma unroll
            for (int j = 0; j < R; j++) {
                const float2 aj = __bfloat1622float2(av[j].v[q]);
                p.x += uj[j] * aj.x, p.y += uj[j] * aj.y;
            }
            float2 g = __bfloat1622float2(g8.v[q]), up = __bfloat1622float2(u8.v[q]), d = __bfloat1622float2(d8.v[q]);
            d.x += scale * p.x, d.y += scale * p.y;
            float s0 = 1.0f / (1.0f + __expf(-g.x)), s1 = 1.0f / (1.0f + __expf(-g.y));
            dg.v[q] = __floats2bfloat162_rn(d.x * up.x * s0 * (1.0f + g.x * (1.0f - s0)), d.y * up.y * s1 * (1.0f + g.y * (1.0f - s1)));
            du.v[q] = __floats2bfloat162_rn(d.x * g.x * s0, d.y * g.y * s1);
        }
        *(bf16x8 *)(dh + n * 2 * F + f) = dg;
        *(bf16x8 *)(dh + n * 2 * F + F + f) = du;
    }
}

template <int R>
static void launch_bwd_rank8(cudaStream_t s, bf16 *dh, const bf16 *dout, const bf16 *h, int64_t N, int64_t F,
                             const glm_rank_term *t) {
    const int64_t gx = (F / 8 + 31) / 32;
    const int64_t gy = std::max<int64_t>(1, std::min<int64_t>((N + 7) / 8, std::max<int64_t>(1, 1056 / gx)));
    k_swiglu_bwd_rank8<R><<<dim3((unsigned)gx, (unsigned)std::min<int64_t>(gy, 65535)), dim3(32, 8), 0, s>>>(
        dh, dout, h, N, F, (const bf16 *)t->u, t->ldu, (const bf16 *)t->a, t->scale);
}

glm_status cu_swiglu_bwd(const glm_backend *be, void *dh, const void *dout, const void *h, int64_t N, int64_t F,
                         const glm_rank_term *t) {
    if (t && (t->r < 1 || t->ldu < t->r))
        return glm_err(GLM_ERR_ARG, "swiglu_bwd: a rank term of r %d, ldu %lld", t->r, (long long)t->ldu);
    if (N <= 0 || F <= 0) return GLM_OK;
    cudaStream_t s = IMPL(be)->s;
    const bool vec = F % 8 == 0 && aligned16(dh) && aligned16(dout) && aligned16(h) && (!t || aligned16(t->a)) &&
                     F / 8 <= (int64_t)INT_MAX;
    bf16 *DH = (bf16 *)dh;
    const bf16 *DO = (const bf16 *)dout, *H = (const bf16 *)h;
    if (t && vec && t->r == 8)
        launch_bwd_rank8<8>(s, DH, DO, H, N, F, t);
    else if (t && vec && t->r == 16)
        launch_bwd_rank8<16>(s, DH, DO, H, N, F, t);
    else if (t && vec && t->r == 4)
        launch_bwd_rank8<4>(s, DH, DO, H, N, F, t);
    else if (t)
        k_swiglu_bwd_rank<<<grid_for(N * F, 256), 256, 0, s>>>(DH, DO, H, N, F, (const bf16 *)t->u, t->ldu, (const bf16 *)t->a,
                                                              t->r, t->scale);
    else if (vec)
        k_swiglu_bwd8<<<grid_for(N * F / 8, 256), 256, 0, s>>>(DH, DO, H, N, F);
    else
        k_swiglu_bwd<<<grid_for(N * F, 256), 256, 0, s>>>(DH, DO, H, N, F);
    LAUNCHED("swiglu_bwd");
    return GLM_OK;
}

}  // namespace glmcu
