/* kernels/cuda/cross_entropy.cu: fused softmax cross-entropy over a chunk of logits rows
 * (kernels/backend.h). One block of 512 threads per row: one pass keeps each thread's running
 * max and sum of exp (online softmax), merged across the block, then (with a gradient) a second
 * pass writes dlogits = loss_scale (softmax - onehot) in bf16, in place allowed. Rows of V a
 * multiple of 8 with 16-byte aligned rows read 16 bytes per access. Memory traffic per row:
 * 2 V bytes read for the loss, plus 2 V read and 2 V written for the gradient. The loss of each
 * row (fp32) and a target flag go to a scratch array that the host sums in double (with weights,
 * each loss times its weight, downloaded too, in double). With weights the gradient's factor is
 * loss_scale * w_i (fp32); logp (optional, fp32) receives logit[label] - lse. */
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

constexpr int CE_THREADS = 512;

__device__ __forceinline__ void online_add(float &m, float &s, float x) {
    if (x > m) {
        s = s * __expf(m - x) + 1.0f;
        m = x;
    } else {
        s += __expf(x - m);
    }
}

/* loss[i] = lse - logit[label] (fp32), cnt[i] = 1 for a target row, 0 for label < 0, -1 for
 * label >= V; dl = bf16(scale w_i (softmax - onehot)) (w_i = 1 without weights), rows with
 * label < 0 zeroed; logp (optional) = logit[label] - lse, 0 on rows with label < 0 */
__global__ void __launch_bounds__(CE_THREADS) k_cross_entropy(bf16 *dl, const bf16 *l, const int32_t *labels,
                                                              const float *weights, float *logp, int64_t V, float scale,
                                                              float *loss, int *cnt, int vec) {
    __shared__ float rm[32], rs[32];
    __shared__ float ly, lse_s;
    const int64_t i = blockIdx.x;
    const bf16 *li = l + i * V;
    const int32_t y = labels[i];
    if (y < 0 || (int64_t)y >= V) {
        if (threadIdx.x == 0) {
            loss[i] = 0.0f;
            cnt[i] = y < 0 ? 0 : -1;
            if (logp) logp[i] = 0.0f;
        }
        if (dl && y < 0)
            for (int64_t c = threadIdx.x; c < V; c += blockDim.x) dl[i * V + c] = __float2bfloat16(0.0f);
        return;
    }
    if (threadIdx.x == 0) ly = ld(li + y); /* read before any thread overwrites the row (in place) */
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        for (int64_t c = threadIdx.x * 8; c < V; c += (int64_t)blockDim.x * 8) {
            bf16x8 v = *(const bf16x8 *)(li + c);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(v.v[j]);
                online_add(m, s, f.x);
                online_add(m, s, f.y);
            }
        }
    } else {
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x) online_add(m, s, ld(li + c));
    }
    /* merge (m, s) across the warp, then the block */
    for (int o = 16; o; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        float mm = fmaxf(m, m2);
        s = (m == -INFINITY ? 0.0f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm));
        m = mm;
    }
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) {
        rm[w] = m;
        rs[w] = s;
    }
    __syncthreads();
    if (w == 0) {
        m = lane < nw ? rm[lane] : -INFINITY;
        s = lane < nw ? rs[lane] : 0.0f;
        for (int o = 16; o; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            float mm = fmaxf(m, m2);
            s = (m == -INFINITY ? 0.0f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm));
            m = mm;
        }
        if (lane == 0) {
            lse_s = m + logf(s);
            loss[i] = lse_s - ly;
            cnt[i] = 1;
            if (logp) logp[i] = ly - lse_s;
        }
    }
    __syncthreads();
    if (!dl) return;
    const float lse = lse_s;
    if (weights) scale *= weights[i];
    if (vec) {
        for (int64_t c = threadIdx.x * 8; c < V; c += (int64_t)blockDim.x * 8) {
            bf16x8 v = *(const bf16x8 *)(li + c), o;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(v.v[j]);
                int64_t c0 = c + 2 * j;
                float p0 = __expf(f.x - lse) - (c0 == y ? 1.0f : 0.0f), p1 = __expf(f.y - lse) - (c0 + 1 == y ? 1.0f : 0.0f);
                o.v[j] = __floats2bfloat162_rn(scale * p0, scale * p1);
            }
            *(bf16x8 *)(dl + i * V + c) = o;
        }
    } else {
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
            float p = __expf(ld(li + c) - lse);
            st(dl + i * V + c, scale * (p - (c == y ? 1.0f : 0.0f)));
        }
    }
}

glm_status cu_cross_entropy(const glm_backend *be, void *dlogits, const void *logits, const int32_t *labels,
                            const float *weights, float *logp, int64_t n, int64_t V, float loss_scale, double *loss_sum,
                            int64_t *n_targets) {
    cuda_impl *I = IMPL(be);
    *loss_sum = 0;
    if (n_targets) *n_targets = 0;
    if (n <= 0) return GLM_OK;
    void *p;
    GLM_TRY(scratch(I, SCR_REDUCE, (size_t)n * 8, &p));
    float *loss = (float *)p;
    int *cnt = (int *)(loss + n);
    auto al = [](const void *q) { return ((uintptr_t)q & 15) == 0; };
    int vec = V % 8 == 0 && al(logits) && (!dlogits || al(dlogits));
    k_cross_entropy<<<(unsigned)n, CE_THREADS, 0, I->s>>>((bf16 *)dlogits, (const bf16 *)logits, labels, weights, logp, V,
                                                          loss_scale, loss, cnt, vec);
    LAUNCHED("cross_entropy");
    std::vector<float> hl((size_t)n);
    std::vector<int> hc((size_t)n);
    GLM_TRY(cu_download(be, hl.data(), loss, (size_t)n * 4));
    GLM_TRY(cu_download(be, hc.data(), cnt, (size_t)n * 4));
    std::vector<float> hw(weights ? (size_t)n : 0);
    if (weights) GLM_TRY(cu_download(be, hw.data(), weights, (size_t)n * 4));
    double tot = 0;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        if (hc[i] < 0) {
            int32_t y = 0;
            GLM_TRY(cu_download(be, &y, labels + i, 4));
            return glm_err(GLM_ERR_ARG, "cross_entropy: label %d at row %lld is outside the vocabulary (V = %lld)", y,
                           (long long)i, (long long)V);
        }
        if (hc[i]) {
            tot += weights ? (double)hw[i] * (double)hl[i] : (double)hl[i];
            c++;
        }
    }
    *loss_sum = tot;
    if (n_targets) *n_targets = c;
    return GLM_OK;
}

}  // namespace glmcu
