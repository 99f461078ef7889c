/* kernels/cuda/attention_ragged.cu: attention_fwd / attention_bwd (kernels/backend.h) through
 * cuDNN's fused flash attention, with packed rows as ragged batches (attention_cudnn.h says how).
 *
 * Per call: k_doc_runs finds the document runs of the B*T positions (a run starts at each row's
 * first token and wherever the doc id changes) and the longest; the host reads their count (one
 * stream synchronisation, a few microseconds), picks the graph's batch nb (the next power of two)
 * and sequence length s_max (the next power of two of the longest run, at most T), and
 * k_ragged_fill writes the sequence lengths and the ragged offsets of every operand. cuDNN's
 * log-sum-exp is the natural-log one the backend keeps (of the scaled scores), token-major ([B*T, H],
 * the layout its ragged kernels take) and transposed to / from the backend's [B, H, T].
 *
 * Where cuDNN is absent or declines (head dims, old versions, a batch whose padded size
 * nb * s_max exceeds 4 B*T with over 0.25 GiB of workspace, out of memory for its workspace), the ops return GLM_ERR_UNSUPPORTED
 * and attention.cu runs glmtune's own kernels; the first time, one line on stderr says why. */
#include <limits.h>
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#ifdef GLMTUNE_HAVE_CUDNN
#include "kernels/cuda/attention_cudnn.h"
#endif

namespace glmcu {

#ifdef GLMTUNE_HAVE_CUDNN

constexpr int RUN_THREADS = 1024;

/* One block over all n = B*T positions: starts[j] = first position (index in the B*T matrix) of
 * run j, in order; runs[0] = the number of runs, runs[1] = the longest. */
__global__ void __launch_bounds__(RUN_THREADS) k_doc_runs(int32_t *starts, int32_t *runs, const int32_t *doc, int n, int T) {
    __shared__ int sc[RUN_THREADS];
    __shared__ int longest;
    const int t = threadIdx.x, chunk = (n + RUN_THREADS - 1) / RUN_THREADS;
    const int lo = min(t * chunk, n), hi = min(lo + chunk, n);
    int cnt = 0;
    for (int i = lo; i < hi; i++) cnt += (i % T == 0 || doc[i] != doc[i - 1]);
    sc[t] = cnt;
    if (t == 0) longest = 0;
    __syncthreads();
    for (int off = 1; off < RUN_THREADS; off <<= 1) { /* inclusive scan */
        int v = t >= off ? sc[t - off] : 0;
        __syncthreads();
        sc[t] += v;
        __syncthreads();
    }
    const int total = sc[RUN_THREADS - 1];
    int j = sc[t] - cnt;
    for (int i = lo; i < hi; i++)
        if (i % T == 0 || doc[i] != doc[i - 1]) starts[j++] = i;
    __syncthreads(); /* every start written (global writes are visible within the block) */
    int m = 0;
    for (int r = sc[t] - cnt; r < sc[t]; r++) m = max(m, (r + 1 < total ? starts[r + 1] : n) - starts[r]);
    atomicMax(&longest, m);
    __syncthreads();
    if (t == 0) {
        runs[0] = total;
        runs[1] = longest;
    }
}

/* seq_len [nb] and the offsets off[0..4] (q, k, v, o, stats), each [nb + 1] int64 elements; the
 * stats are token-major [n, H]. Runs past the real ones have length 0 and offset n (the end). */
__global__ void k_ragged_fill(int32_t *seq_len, int64_t *off, const int32_t *starts, int R, int nb, int n, int H,
                              int64_t ldq, int64_t ldk, int64_t ldv, int64_t ldo) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= nb; i += gridDim.x * blockDim.x) {
        const int64_t pos = i < R ? starts[i] : n;
        if (i < nb) seq_len[i] = i < R ? (int32_t)((i + 1 < R ? starts[i + 1] : n) - pos) : 0;
        int64_t *o = off + i;
        o[0] = pos * ldq;
        o[(nb + 1)] = pos * ldk;
        o[2 * (nb + 1)] = pos * ldv;
        o[3 * (nb + 1)] = pos * ldo;
        o[4 * (nb + 1)] = pos * H;
    }
}

/* lse [B, H, T] <-> packed [B*T, H] */
__global__ void k_lse_pack(float *packed, const float *lse, int64_t n, int T, int H, int to_packed) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * H; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pos = e / H, h = e % H, r = pos / T, t = pos % T;
        const int64_t l = (r * H + h) * T + t;
        if (to_packed) packed[e] = lse[l];
        else ((float *)lse)[l] = packed[e];
    }
}

static unsigned pow2_at_least(unsigned x) {
    unsigned p = 1;
    while (p < x) p <<= 1;
    return p;
}

/* The per-call preparation shared by both directions: loads cuDNN on first use, finds the runs,
 * plans the graph and fills seq_len and offsets. On GLM_ERR_UNSUPPORTED the caller falls back. */
struct ragged_call {
    void *plan;
    void *ws;
    int32_t *seq_len;
    int64_t *off;
    float *stats; /* cuDNN's log-sum-exp, token-major [B*T, H] (scratch) */
    int nb;       /* the graph's batch (offsets are [nb + 1] each) */
};

static glm_status decline(cuda_impl *I, glm_status st) {
    if (st == GLM_ERR_UNSUPPORTED && I->attn_mode == ATTN_AUTO && !I->cudnn_noted) {
        I->cudnn_noted = true;
        fprintf(stderr, "glmtune: note: attention runs on glmtune's kernels where cuDNN declines: %s\n", glm_errmsg());
    }
    return st;
}

/* Loads cuDNN on first use (GLM_ERR_UNSUPPORTED, said once, when it cannot be). */
static glm_status load_cudnn(cuda_impl *I) {
    if (!I->cudnn_tried) {
        I->cudnn_tried = true;
        const char *why = "";
        I->cudnn = cudnn_attn_create(&why);
        if (!I->cudnn) return decline(I, glm_err(GLM_ERR_UNSUPPORTED, "attention: cuDNN not used: %s", why));
        CU(cudaMallocHost(&I->runs_host, 2 * sizeof(int32_t)), "attention (cuDNN)");
    }
    if (!I->cudnn) return glm_err(GLM_ERR_UNSUPPORTED, "attention: cuDNN not loaded");
    return GLM_OK;
}

/* The padded batch cuDNN is asked to run (nb x s_max tokens) is declined when it is over 4x the
 * tokens and its backward's f32 dQ accumulator would pass 0.25 GiB (prepare, attn_scratch_need). */
static bool padded_too_big(int64_t nb, int64_t s_max, int64_t n, int H, int Dh) {
    const double padded_gib = (double)nb * s_max * H * Dh * 4 / 1073741824.0;
    return nb * s_max > 4 * n && padded_gib > 0.25;
}

static glm_status prepare(cuda_impl *I, int bwd, const int32_t *doc, int B, int T, int H, int Hkv, int Dh, int64_t ldq,
                          int64_t ldk, int64_t ldv, int64_t ldo, ragged_call *rc) {
    GLM_TRY(load_cudnn(I));
    const int64_t n64 = (int64_t)B * T;
    if (n64 >= INT_MAX / 2) return decline(I, glm_err(GLM_ERR_UNSUPPORTED, "attention: %lld tokens: over cuDNN's int32 "
                                                      "sequence indices here", (long long)n64));
    const int n = (int)n64;
    void *p;
    GLM_TRY(scratch(I, SCR_CUDNN_RUNS, (size_t)(n + 2) * 4, &p));
    int32_t *runs = (int32_t *)p, *starts = runs + 2;
    k_doc_runs<<<1, RUN_THREADS, 0, I->s>>>(starts, runs, doc, n, T);
    LAUNCHED_I(I, "attention (document runs)");
    CU(cudaMemcpyAsync(I->runs_host, runs, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, I->s), "attention (cuDNN)");
    CU(cudaStreamSynchronize(I->s), "attention (document runs)");
    const int R = I->runs_host[0], longest = I->runs_host[1];
    if (R < 1 || longest < 1 || longest > T)
        return glm_err(GLM_ERR_DEVICE, "attention: document runs %d (longest %d) for %d tokens", R, longest, n);
    cudnn_attn_shape sh;
    sh.bwd = bwd;
    sh.nb = (int)pow2_at_least((unsigned)R);
    sh.s_max = (int)pow2_at_least((unsigned)longest);
    if (sh.s_max > T) sh.s_max = T;
    sh.H = H, sh.Hkv = Hkv, sh.Dh = Dh, sh.ldq = ldq, sh.ldk = ldk, sh.ldv = ldv, sh.ldo = ldo;
    /* the backward's f32 dQ accumulator in cuDNN's workspace is nb * s_max * H * Dh * 4 bytes */
    const double padded_gib = (double)sh.nb * sh.s_max * H * Dh * 4 / 1073741824.0;
    if (padded_too_big(sh.nb, sh.s_max, n64, H, Dh))
        return decline(I, glm_err(GLM_ERR_UNSUPPORTED, "attention: %d documents of up to %d tokens pad to %d x %d "
                                  "(over 4x the %d tokens: %.2f GiB of workspace)", R, longest, sh.nb, sh.s_max, n,
                                  padded_gib));
    int64_t ws_bytes = 0;
    glm_status st = cudnn_attn_plan(I->cudnn, &sh, &rc->plan, &ws_bytes);
    if (st) return decline(I, st);
    if (I->attn_ws_cap == 0 && ws_bytes > 0)
        return decline(I, glm_err(GLM_ERR_UNSUPPORTED, "attention: the memory plan leaves the attention library no "
                                  "workspace (cuDNN asks %.1f MiB at %d tokens), as planned for rows this long",
                                  ws_bytes / 1048576.0, n));
    if (I->attn_ws_cap > 0 && (double)ws_bytes > I->attn_ws_cap)
        return decline(I, glm_err(GLM_ERR_UNSUPPORTED, "attention: cuDNN's %.1f MiB workspace is more than the memory "
                                  "plan leaves it (%.1f MiB)", ws_bytes / 1048576.0, I->attn_ws_cap / 1048576.0));
    GLM_TRY(scratch(I, SCR_CUDNN_RAGGED, (size_t)sh.nb * 4 + (size_t)(sh.nb + 1) * 5 * 8 + 16, &p));
    rc->off = (int64_t *)p;
    rc->nb = sh.nb;
    rc->seq_len = (int32_t *)(rc->off + (size_t)(sh.nb + 1) * 5);
    k_ragged_fill<<<grid_for(sh.nb + 1, 256), 256, 0, I->s>>>(rc->seq_len, rc->off, starts, R, sh.nb, n, H, ldq, ldk,
                                                               ldv, ldo);
    LAUNCHED_I(I, "attention (ragged offsets)");
    GLM_TRY(scratch(I, SCR_CUDNN_STATS, (size_t)n * H * 4, &p));
    rc->stats = (float *)p;
    rc->ws = NULL;
    if (ws_bytes > 0) {
        st = scratch(I, SCR_CUDNN_WS, (size_t)ws_bytes, &rc->ws);
        if (st == GLM_ERR_NOMEM)
            return decline(I, glm_err(GLM_ERR_UNSUPPORTED, "attention: no memory for cuDNN's %.2f GiB workspace",
                                      ws_bytes / 1073741824.0));
        if (st) return st;
    }
    return GLM_OK;
}

/* ATTN_CUDNN turns a fallback into an error */
static glm_status finish(cuda_impl *I, glm_status st) {
    /* (glm_err formats aside first, so its own message may be an argument) */
    if (st == GLM_ERR_UNSUPPORTED && I->attn_mode == ATTN_CUDNN)
        return glm_err(GLM_ERR_UNSUPPORTED, "GLMTUNE_ATTENTION=cudnn: %s", glm_errmsg());
    return st;
}

static void set_offsets(cudnn_attn_args *a, const ragged_call *rc) {
    const int64_t stride = rc->nb + 1;
    a->off_q = rc->off, a->off_k = rc->off + stride, a->off_v = rc->off + 2 * stride, a->off_o = rc->off + 3 * stride;
    a->off_stats = rc->off + 4 * stride;
}

glm_status attn_ragged_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                           const void *k, int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H,
                           int Hkv, int Dh) {
    cuda_impl *I = IMPL(be);
    if (I->attn_mode == ATTN_OWN) return GLM_ERR_UNSUPPORTED;
    ragged_call rc;
    glm_status st = prepare(I, 0, doc, B, T, H, Hkv, Dh, ldq, ldk, ldv, ldo, &rc);
    if (st) return finish(I, st);
    cudnn_attn_args a = {};
    a.q = q, a.k = k, a.v = v, a.out = out, a.stats = rc.stats;
    a.seq_len = rc.seq_len;
    set_offsets(&a, &rc);
    GLM_TRY(cudnn_attn_run(I->cudnn, rc.plan, I->s, &a, rc.ws));
    LAUNCHED_I(I, "attention_fwd (cuDNN)");
    const int64_t n = (int64_t)B * T;
    k_lse_pack<<<grid_for(n * H, 256), 256, 0, I->s>>>(rc.stats, lse, n, T, H, 0);
    LAUNCHED_I(I, "attention_fwd (cuDNN lse)");
    return GLM_OK;
}

glm_status attn_ragged_bwd(const glm_backend *be, void *dq, void *dk, void *dv, const void *dout, int64_t ldo,
                           const void *out, const float *lse, const void *q, int64_t ldq, const void *k, int64_t ldk,
                           const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv, int Dh) {
    cuda_impl *I = IMPL(be);
    if (I->attn_mode == ATTN_OWN) return GLM_ERR_UNSUPPORTED;
    ragged_call rc;
    glm_status st = prepare(I, 1, doc, B, T, H, Hkv, Dh, ldq, ldk, ldv, ldo, &rc);
    if (st) return finish(I, st);
    const int64_t n = (int64_t)B * T;
    k_lse_pack<<<grid_for(n * H, 256), 256, 0, I->s>>>(rc.stats, lse, n, T, H, 1);
    LAUNCHED_I(I, "attention_bwd (cuDNN lse)");
    cudnn_attn_args a = {};
    a.q = q, a.k = k, a.v = v, a.out = (void *)out, a.stats = rc.stats;
    a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
    a.seq_len = rc.seq_len;
    set_offsets(&a, &rc);
    GLM_TRY(cudnn_attn_run(I->cudnn, rc.plan, I->s, &a, rc.ws));
    LAUNCHED_I(I, "attention_bwd (cuDNN)");
    return GLM_OK;
}

/* The slots prepare() grows for B rows of T tokens: document runs (n + 2 int32), the ragged offsets
 * and lengths of the widest graph batch, the token-major log-sum-exp; and the workspace of the
 * graphs this shape class builds, asked of cuDNN: one document per row (batch pow2(B), length
 * min(pow2(T), T)), and with max_docs > 1 also the widest batch prepare() accepts (pow2 of up to
 * B max_docs documents, the longest up to the row's length, padded at most 4x or 0.25 GiB). */
static glm_status cudnn_scratch(cuda_impl *I, const glm_scratch_shape *s, size_t slot[SCR_COUNT], size_t *ws) {
    const int64_t n = (int64_t)s->B * s->T;
    if (n >= INT_MAX / 2) return GLM_OK; /* prepare() declines: glmtune's kernels */
    const int64_t docs = std::min<int64_t>(n, (int64_t)s->B * std::max(1, s->max_docs));
    const int s_max = std::min((int)pow2_at_least((unsigned)s->T), s->T);
    int nb_max = (int)pow2_at_least((unsigned)docs);
    slot[SCR_CUDNN_RUNS] += (size_t)(n + 2) * 4;
    slot[SCR_CUDNN_RAGGED] += (size_t)nb_max * 4 + (size_t)(nb_max + 1) * 5 * 8 + 16;
    slot[SCR_CUDNN_STATS] += (size_t)n * s->H * 4;
    cudnn_attn_shape sh;
    sh.H = s->H, sh.Hkv = s->Hkv, sh.Dh = s->Dh;
    const int64_t qkv = (int64_t)(s->H + 2 * s->Hkv) * s->Dh;
    sh.ldq = s->ldq > 0 ? s->ldq : qkv, sh.ldk = s->ldk > 0 ? s->ldk : qkv, sh.ldv = s->ldv > 0 ? s->ldv : qkv;
    sh.ldo = s->ldo > 0 ? s->ldo : (int64_t)s->H * s->Dh;
    int nbs[2] = {(int)pow2_at_least((unsigned)s->B), 0};
    if (s->max_docs > 1) { /* the widest batch of the longest length that prepare() still takes */
        int nb = nb_max;
        while (nb > nbs[0] && padded_too_big(nb, s_max, n, s->H, s->Dh)) nb /= 2;
        if (nb > nbs[0]) nbs[1] = nb;
    }
    int64_t most = 0;
    for (int k = 0; k < 2; k++) {
        if (!nbs[k]) continue;
        for (int bwd = 0; bwd <= (s->backward ? 1 : 0); bwd++) {
            sh.bwd = bwd;
            sh.nb = nbs[k];
            sh.s_max = s_max;
            void *plan;
            int64_t w = 0;
            glm_status st = cudnn_attn_plan(I->cudnn, &sh, &plan, &w);
            if (st == GLM_ERR_UNSUPPORTED) continue; /* declined: glmtune's kernels run it, no workspace */
            GLM_TRY(st);
            most = std::max(most, w);
        }
    }
    *ws = (size_t)most;
    slot[SCR_CUDNN_WS] += (size_t)most;
    return GLM_OK;
}

void attn_ragged_destroy(cuda_impl *I) {
    cudnn_attn_destroy(I->cudnn);
    I->cudnn = NULL;
    if (I->runs_host) cudaFreeHost(I->runs_host);
    I->runs_host = NULL;
}

const char *attn_impl_name(cuda_impl *I) {
    static char buf[96];
    if (I->attn_mode == ATTN_OWN || !I->cudnn) return "glmtune kernels";
    long v = cudnn_attn_version(I->cudnn);
    snprintf(buf, sizeof buf, "cuDNN %ld.%ld.%ld fused attention%s", v / 10000, v / 100 % 100, v % 100,
             I->cudnn_noted ? ", glmtune kernels where it declines" : "");
    return buf;
}

#else /* no cuDNN in this build */

static glm_status no_cudnn(const glm_backend *be) {
    if (IMPL(be)->attn_mode == ATTN_CUDNN)
        return glm_err(GLM_ERR_UNSUPPORTED, "GLMTUNE_ATTENTION=cudnn: this build has no cuDNN (cudnn.h and the "
                       "cudnn-frontend headers were not found at configure time)");
    return GLM_ERR_UNSUPPORTED;
}
glm_status attn_ragged_fwd(const glm_backend *be, void *, int64_t, float *, const void *, int64_t, const void *, int64_t,
                           const void *, int64_t, const int32_t *, int, int, int, int, int) {
    return no_cudnn(be);
}
glm_status attn_ragged_bwd(const glm_backend *be, void *, void *, void *, const void *, int64_t, const void *,
                           const float *, const void *, int64_t, const void *, int64_t, const void *, int64_t,
                           const int32_t *, int, int, int, int, int) {
    return no_cudnn(be);
}
void attn_ragged_destroy(cuda_impl *) {}
const char *attn_impl_name(cuda_impl *) { return "glmtune kernels"; }
static glm_status cudnn_scratch(cuda_impl *, const glm_scratch_shape *, size_t *, size_t *) { return GLM_OK; }

#endif

/* attention's scratch for shape s (cuda_common.cuh). Whole rows: glmtune's kernels' row statistics
 * (4 bytes per query head, backward) and document bounds (8 bytes per token), and where cuDNN runs
 * (GLMTUNE_ATTENTION auto or cudnn, cuDNN loadable) its slots too: a call cuDNN declines runs on
 * glmtune's kernels, so both may be grown in one step. Context parallel: the ring's query blocks. */
glm_status attn_scratch_need(cuda_impl *I, const glm_scratch_shape *s, size_t slot[SCR_COUNT], size_t *ws) {
    *ws = 0;
    if (s->cp_block > 0) {
        if (s->backward) slot[SCR_ATTN_D] += (size_t)s->H * s->cp_block * 4;
        return GLM_OK;
    }
    const size_t n = (size_t)s->B * s->T;
    if (s->backward) slot[SCR_ATTN_D] += n * s->H * 4;
    slot[SCR_ATTN_DOC] += n * 8;
    if (I->attn_mode == ATTN_OWN) return GLM_OK;
#ifdef GLMTUNE_HAVE_CUDNN
    glm_status st = load_cudnn(I);
    if (st == GLM_ERR_UNSUPPORTED) return I->attn_mode == ATTN_CUDNN ? finish(I, st) : GLM_OK;
    GLM_TRY(st);
#endif
    return cudnn_scratch(I, s, slot, ws);
}

} // namespace glmcu
