/* kernels/cuda/attention.cu: causal grouped-query attention over packed rows on the tensor cores
 * (FlashAttention-2's algorithm, Dao 2023, written for this backend; contract in
 * kernels/backend.h).
 *
 * Numbers: q, k, v, dout bf16; S = q k^T and every other product by mma.sync m16n8k16 (bf16
 * operands, fp32 accumulation, sm_80 and later); softmax in fp32 in base 2 (scores times
 * scale * log2(e), exp2); P and dS rounded to bf16 once as the operands of the second products;
 * lse kept in fp32 (natural log) for the backward; outputs rounded to bf16 once.
 *
 * Tiles: head dims are padded to DHP = 64 or 128 (zero-filled, so Dh may be any multiple of 8
 * up to 128); each warp owns 32 query rows (forward, dQ: two m16 tiles, every K/V fragment
 * feeding both) or 16 keys (dK dV). Shared-memory rows
 * are padded by 8 elements (16 bytes) so the 8 row addresses of an ldmatrix hit 8 different bank
 * groups. K/V (forward, dQ) and Q/dO (dK dV) tiles are double-buffered with cp.async, so the
 * next tile's loads overlap this tile's products.
 *
 * Documents: a prologue kernel turns doc ids into, per position, the first position of its
 * document (dstart) and one past its last (dend). A query tile visits key tiles from
 * dstart[first query] to its last query, and a key tile visits query tiles from its first key to
 * dend[last key]: tiles wholly outside every query's document, and tiles above the diagonal,
 * are never loaded. Only tiles that straddle the diagonal or a document boundary evaluate the
 * mask (j <= i and doc[j] == doc[i]) per element.
 *
 * Where cuDNN is there, whole rows go to its fused flash attention first (attention_ragged.cu);
 * these kernels run where it is absent or declines, and always for ring blocks.
 *
 * Backward: D = rowsum(dO * O) (fp32), then two kernels without atomics, so results are
 * deterministic: dQ per query tile (recomputes S and dP), and dK, dV per key tile summed over the
 * H / Hkv query heads of its KV group (recomputes S and dP too: 7 tile products in all, against
 * FlashAttention-2's 5 with atomic dQ updates).
 *
 * Ring blocks (context parallel, attention_block_fwd / _bwd): the same three kernels with the
 * template flag BLK: a query block against a key block of the same row, global offsets in the
 * causal test, each block's own document ids (tile ranges by binary search: ids are
 * non-decreasing), and f32 accumulators: the forward merges its (o, lse) into the running ones by
 * the online-softmax rule, the backward adds into dq, dk, dv. Each accumulator element is owned by
 * one thread of one launch, so the read-modify-writes need no atomics. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"

namespace glmcu {

constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

/* ---- PTX wrappers ------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t sm_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, asynchronously; ok == false writes 16 zero bytes and reads nothing */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sm_addr(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8 */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sm_addr(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sm_addr(p)));
}

/* d += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulators */
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Fragment address helpers (lane = threadIdx.x % 32), for a tile with row stride SR elements:
 * - a_frag: the A operand (16 rows x 16 k) at (r0, c0) of a row-major [rows][k] tile;
 * - b_frag: two B operands (k 16 x n 8, n-tiles n0 and n0 + 8) from a row-major [n][k] tile
 *   (K for S = Q K^T): registers {0,1} are n-tile n0, {2,3} n-tile n0 + 8;
 * - bt_frag: the same from a row-major [k][n] tile (V for O = P V), with ldmatrix.trans. */
__device__ __forceinline__ const bf16 *a_frag(const bf16 *t, int SR, int r0, int c0, int lane) {
    return t + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * SR + c0 + (lane >> 4) * 8;
}
__device__ __forceinline__ const bf16 *b_frag(const bf16 *t, int SR, int n0, int k0, int lane) {
    return t + (n0 + (lane & 7) + (lane >> 4) * 8) * SR + k0 + ((lane >> 3) & 1) * 8;
}
__device__ __forceinline__ const bf16 *bt_frag(const bf16 *t, int SR, int k0, int n0, int lane) {
    return t + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * SR + n0 + (lane >> 4) * 8;
}

/* The A operand of the next product from two fp32 accumulator tiles (n-tiles 2kk, 2kk+1 of a
 * 16-row strip): FlashAttention's register reuse of P. */
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
    a[0] = pack2(lo[0], lo[1]);
    a[1] = pack2(lo[2], lo[3]);
    a[2] = pack2(hi[0], hi[1]);
    a[3] = pack2(hi[2], hi[3]);
}

/* The tile products. asm volatile keeps program order, so each product is written as a sequence
 * of steps (one ldmatrix.x4, two MMAs) whose operands are loaded RING - 1 steps ahead: with 8 warps
 * per multiprocessor there are not enough warps to hide the shared-memory latency otherwise. */
constexpr int RING = 4;

/* acc[MT][NT] += A x B^T with both from shared memory: A the rows r0 + 16 mt.. (mt < MT) of an
 * [rows][KD * 16] tile (S = Q K^T, dP = dO V^T; keys in dK/dV: S^T = K Q^T, dP^T = V dO^T), B an
 * [NT * 8 rows (n)][KD * 16 (k)] tile. Each B fragment feeds MT x 2 MMAs: with MT > 1, half the
 * shared-memory traffic per MMA of the one-tile form. */
template <int KD, int NT, int MT>
__device__ __forceinline__ void gemm_sAm_sB(float (&acc)[MT][NT][4], const bf16 *A, int r0, const bf16 *B, int SR, int lane) {
    constexpr int NP = NT / 2, S = KD * NP;
    uint32_t fa[2][MT][4], f[RING][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) ldsm4(fa[0][mt], a_frag(A, SR, r0 + 16 * mt, 0, lane));
#pragma unroll
    for (int t = 0; t < RING - 1 && t < S; t++) ldsm4(f[t], b_frag(B, SR, (t % NP) * 16, (t / NP) * 16, lane));
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int kk = s / NP, np = s % NP;
        if (np == 0 && kk + 1 < KD)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) ldsm4(fa[(kk + 1) & 1][mt], a_frag(A, SR, r0 + 16 * mt, (kk + 1) * 16, lane));
        if (s + RING - 1 < S) {
            const int t = s + RING - 1;
            ldsm4(f[t % RING], b_frag(B, SR, (t % NP) * 16, (t / NP) * 16, lane));
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma16816(acc[mt][2 * np], fa[kk & 1][mt], f[s % RING][0], f[s % RING][1]);
            mma16816(acc[mt][2 * np + 1], fa[kk & 1][mt], f[s % RING][2], f[s % RING][3]);
        }
    }
}

/* acc[MT][ND] += a[MT] (registers: KK k-steps of 16) x B, B a [KK * 16 rows (k)][ND * 8 (n)]
 * row-major shared tile read with ldmatrix.trans (O += P V, dQ += dS K, dV += P^T dO,
 * dK += dS^T Q). */
template <int KK, int ND, int MT>
__device__ __forceinline__ void gemm_rAm_sBt(float (&acc)[MT][ND][4], const uint32_t (&a)[MT][KK][4], const bf16 *B, int SR,
                                             int lane) {
    constexpr int DP = ND / 2, S = KK * DP;
    uint32_t f[RING][4];
#pragma unroll
    for (int t = 0; t < RING - 1 && t < S; t++) ldsm4t(f[t], bt_frag(B, SR, (t / DP) * 16, (t % DP) * 16, lane));
#pragma unroll
    for (int s = 0; s < S; s++) {
        if (s + RING - 1 < S) {
            const int t = s + RING - 1;
            ldsm4t(f[t % RING], bt_frag(B, SR, (t / DP) * 16, (t % DP) * 16, lane));
        }
        const int kk = s / DP, dp = s % DP;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma16816(acc[mt][2 * dp], a[mt][kk], f[s % RING][0], f[s % RING][1]);
            mma16816(acc[mt][2 * dp + 1], a[mt][kk], f[s % RING][2], f[s % RING][3]);
        }
    }
}

/* The one-tile forms (MT = 1) with [NT][4] / [ND][4] accumulators: the dK/dV kernel's. */
template <int KD, int NT>
__device__ __forceinline__ void gemm_sA_sB(float (&acc)[NT][4], const bf16 *A, int r0, const bf16 *B, int SR, int lane) {
    gemm_sAm_sB<KD, NT, 1>(reinterpret_cast<float(&)[1][NT][4]>(acc), A, r0, B, SR, lane);
}
template <int KK, int ND>
__device__ __forceinline__ void gemm_rA_sBt(float (&acc)[ND][4], const uint32_t (&a)[KK][4], const bf16 *B, int SR, int lane) {
    gemm_rAm_sBt<KK, ND, 1>(reinterpret_cast<float(&)[1][ND][4]>(acc), reinterpret_cast<const uint32_t(&)[1][KK][4]>(a), B, SR,
                            lane);
}

/* Rows [r0, r0 + R) of a [T, ld] bf16 matrix (g: its row 0, first channel of the head), DHP
 * columns of which the first Dh are real, into shared memory (row stride DHP + 8); rows >= T and
 * columns >= Dh become zeros. */
template <int R, int DHP, int NT>
__device__ __forceinline__ void load_rows(bf16 *sm, const bf16 *g, int64_t ld, int r0, int T, int Dh) {
    constexpr int CPR = DHP / 8, SR = DHP + 8;
    for (int idx = threadIdx.x; idx < R * CPR; idx += NT) {
        int rr = idx / CPR, cc = (idx % CPR) * 8, i = r0 + rr;
        bool ok = i < T && cc < Dh;
        cp16(sm + rr * SR + cc, ok ? g + (int64_t)i * ld + cc : g, ok);
    }
}

/* Key tile starting at position n0 into K/V buffer `buf` (BN rows each, cp.async) and the keys'
 * document ids into dks[buf] (plain stores; -1 past T). */
template <int BN, int DHP, int NT>
__device__ __forceinline__ void load_kv_tile(bf16 *Ks, bf16 *Vs, int *dks, int buf, const bf16 *kg, int64_t ldk,
                                             const bf16 *vg, int64_t ldv, const int32_t *docb, int n0, int T, int Dh) {
    constexpr int SR = DHP + 8;
    load_rows<BN, DHP, NT>(Ks + buf * BN * SR, kg, ldk, n0, T, Dh);
    load_rows<BN, DHP, NT>(Vs + buf * BN * SR, vg, ldv, n0, T, Dh);
    for (int j = threadIdx.x; j < BN; j += NT) dks[buf * BN + j] = n0 + j < T ? docb[n0 + j] : -1;
}

/* The query-block kernels' K/V double buffer at key tile kt (of kt0..kt1): starts loading tile
 * kt + 1 into the other buffer, waits for tile kt's loads (issued one iteration before, or by the
 * prologue for kt0) and the whole block; returns the buffer kt is in. */
template <int BN, int DHP, int NT>
__device__ __forceinline__ int kv_tile_next(bf16 *Ks, bf16 *Vs, int *dks, int kt, int kt0, int kt1, const bf16 *kg,
                                            int64_t ldk, const bf16 *vg, int64_t ldv, const int32_t *kdoc, int Tk, int Dh) {
    const int buf = (kt - kt0) & 1;
    if (kt < kt1) {
        load_kv_tile<BN, DHP, NT>(Ks, Vs, dks, buf ^ 1, kg, ldk, vg, ldv, kdoc, (kt + 1) * BN, Tk, Dh);
        cp_commit();
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
    __syncthreads();
    return buf;
}

/* Whether every query row q0.. of the block sees every key of tile k0..k0+BN-1 (keys' documents
 * dk), so that the tile needs no mask: whole rows, the block in one document that starts at or
 * before k0 and the tile at or before the first row; ring blocks (BLK), the tile's first and
 * last keys in the rows' document and causal with the block's offset delta. */
template <int BN, bool BLK>
__device__ __forceinline__ bool tile_unmasked(bool one_doc, const int *dk, const int32_t *docb, int k0, int q0, int kstart,
                                              int delta) {
    if constexpr (BLK) return one_doc && dk[0] == docb[q0] && dk[BN - 1] == docb[q0] && k0 + BN - 1 <= q0 + delta;
    else return one_doc && k0 >= kstart && k0 + BN - 1 <= q0;
}

/* Whether query row i (document di) sees key j (document dj): causal (with the ring block's
 * offset delta, 0 for whole rows) and in the same document. */
__device__ __forceinline__ bool key_visible(int i, int di, int j, int dj, int delta) { return j <= i + delta && dj == di; }

/* acc = 0 for an array of mma accumulator fragments ([B] or [A][B]). */
template <int B>
__device__ __forceinline__ void zero_frags(float (&acc)[B][4]) {
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[b][e] = 0.0f;
}
template <int A, int B>
__device__ __forceinline__ void zero_frags(float (&acc)[A][B][4]) {
#pragma unroll
    for (int a = 0; a < A; a++)
#pragma unroll
        for (int b = 0; b < B; b++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[a][b][e] = 0.0f;
}

/* ---- document bounds ---------------------------------------------------------------------- */

constexpr int DOC_THREADS = 1024;

/* One block per packed row: dstart[i] = first position of i's document, dend[i] = one past its
 * last (documents are contiguous runs of equal doc ids). Each thread scans a contiguous chunk;
 * a block-wide max-scan (for starts) and min-scan (for ends) carries across chunks. */
__global__ void __launch_bounds__(DOC_THREADS) k_doc_bounds(int32_t *dstart, int32_t *dend, const int32_t *doc, int T) {
    __shared__ int sc[DOC_THREADS];
    const int64_t rb = (int64_t)blockIdx.x * T;
    const int32_t *d = doc + rb;
    const int t = threadIdx.x, chunk = (T + DOC_THREADS - 1) / DOC_THREADS;
    const int lo = min(t * chunk, T), hi = min(lo + chunk, T);
    int last = -1, first = INT_MAX;
    for (int i = lo; i < hi; i++)
        if (i == 0 || d[i] != d[i - 1]) {
            last = i;
            if (first == INT_MAX) first = i;
        }
    /* inclusive max-scan of `last` over threads */
    sc[t] = last;
    __syncthreads();
    for (int off = 1; off < DOC_THREADS; off <<= 1) {
        int v = t >= off ? sc[t - off] : -1;
        __syncthreads();
        sc[t] = max(sc[t], v);
        __syncthreads();
    }
    int cur = t > 0 ? sc[t - 1] : -1;
    __syncthreads();
    for (int i = lo; i < hi; i++) {
        if (i == 0 || d[i] != d[i - 1]) cur = i;
        dstart[rb + i] = cur;
    }
    /* suffix min-scan of the first boundary of each chunk (boundaries at position > 0 only) */
    if (first == 0) {
        first = INT_MAX;
        for (int i = 1; i < hi; i++)
            if (d[i] != d[i - 1]) {
                first = i;
                break;
            }
    }
    sc[t] = first;
    __syncthreads();
    for (int off = 1; off < DOC_THREADS; off <<= 1) {
        int v = t + off < DOC_THREADS ? sc[t + off] : INT_MAX;
        __syncthreads();
        sc[t] = min(sc[t], v);
        __syncthreads();
    }
    int nxt = t + 1 < DOC_THREADS ? sc[t + 1] : INT_MAX;
    for (int i = hi - 1; i >= lo; i--) {
        dend[rb + i] = nxt == INT_MAX ? T : nxt;
        if (i > 0 && d[i] != d[i - 1]) nxt = i;
    }
}

/* ---- one block of a context-parallel ring ------------------------------------------------- */

/* What the kernels need to run on one block of the ring (attention_block_fwd / _bwd) instead of a
 * whole row (template flag BLK): the key block's document ids and length, delta = q0 - k0 of the
 * global indices (query i of the block may see key j iff j <= i + delta and kdoc[j] == qdoc[i]),
 * and the f32 accumulators: fo (forward: the running output; backward: dq) [Tq, ldfo], flse (the
 * forward's running lse, the backward's final lse; head h of query i at h * ldl + i), fdk, fdv
 * [Tk, ldfdk / ldfdv]. Document ids are non-decreasing in both blocks (contiguous runs with
 * increasing ids, as the packer writes them and the model step checks), so the keys a query tile
 * may see and the queries a key tile may be seen by are index ranges found by binary search. */
struct BlockArgs {
    const int32_t *kdoc;
    int Tk, delta, init;
    float *fo, *flse, *fdk, *fdv;
    int64_t ldfo, ldl, ldfdk, ldfdv;
};

/* First index of a[0, n) (non-decreasing) with a[idx] >= x (upper: > x); n when none. */
__device__ __forceinline__ int lower_idx(const int32_t *a, int n, int x, bool upper) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (a[mid] < x || (upper && a[mid] == x)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The keys [*lo, *hi] (none when hi < lo) that queries [qa, qb] of a block may see. */
__device__ __forceinline__ void block_keys(const BlockArgs &ba, const int32_t *qdoc, int qa, int qb, int *lo, int *hi) {
    *lo = lower_idx(ba.kdoc, ba.Tk, qdoc[qa], false);
    *hi = min(min(ba.Tk - 1, qb + ba.delta), lower_idx(ba.kdoc, ba.Tk, qdoc[qb], true) - 1);
}

/* The queries [*lo, *hi] of a block (Tq of them) that may see keys [ka, kb]. */
__device__ __forceinline__ void block_queries(const BlockArgs &ba, const int32_t *qdoc, int Tq, int ka, int kb, int *lo,
                                              int *hi) {
    *lo = max(max(0, ka - ba.delta), lower_idx(qdoc, Tq, ba.kdoc[ka], false));
    *hi = lower_idx(qdoc, Tq, ba.kdoc[kb], true) - 1;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The forward's end on a block: the block's own result (o / l, lse_b = (m + log2 l) ln 2) merged
 * into the running f32 output and lse (or written over them with ba.init); rows that saw no key
 * keep theirs (init: o = 0, lse = -inf). The 4 threads of a quad hold one row's columns; all read
 * the old lse before one of them writes the new one. */
template <int MT, int ND>
__device__ __forceinline__ void block_fwd_merge(const BlockArgs &ba, float (&o)[MT][ND][4], const float (&m)[MT][2],
                                                const float (&l)[MT][2], const int (&ri)[MT][2], int Tq, int h, int Dh,
                                                int tig) {
    float *fo = ba.fo + (int64_t)h * Dh, *fl = ba.flse + (int64_t)h * ba.ldl;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lt = l[mt][hf];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const int i = ri[mt][hf];
            const float lold = i < Tq && !ba.init ? fl[i] : -INFINITY;
            __syncwarp();
            if (i >= Tq || (lt <= 0.0f && !ba.init)) continue;
            const float lb = lt > 0.0f ? (m[mt][hf] + log2f(lt)) * LN2 : -INFINITY;
            float ln = lb, wa = 0.0f, wb = lt > 0.0f ? 1.0f / lt : 0.0f;
            if (!ba.init && lold != -INFINITY) {
                const float mx = fmaxf(lold, lb);
                ln = mx + log1pf(expf(fminf(lold, lb) - mx));
                wa = expf(lold - ln);
                wb = expf(lb - ln) / lt;
            }
#pragma unroll
            for (int n = 0; n < ND; n++) {
                const int c = n * 8 + 2 * tig;
                if (c >= Dh) continue;
                float2 *p = (float2 *)(fo + (int64_t)i * ba.ldfo + c), r;
                r.x = o[mt][n][2 * hf] * wb;
                r.y = o[mt][n][2 * hf + 1] * wb;
                if (wa != 0.0f) {
                    const float2 old = *p;
                    r.x += old.x * wa;
                    r.y += old.y * wa;
                }
                *p = r;
            }
            if (tig == 0) fl[i] = ln;
        }
}

/* The forward: grid (ceil(T / BM), H, B), NW warps; block x handles query tile nqt - 1 - x
 * (longest first). Each warp owns MT m-tiles (16 MT query rows), Q read from shared memory at each
 * k-step; BM = 16 MT NW query rows per block, BN keys per tile. */
template <int DHP, int NW, int MT, int BN, bool BLK>
__global__ void __launch_bounds__(NW * 32) k_fa_fwd_mt(bf16 *out, int64_t ldo, float *lse, const bf16 *q, int64_t ldq,
                                                      const bf16 *k, int64_t ldk, const bf16 *v, int64_t ldv,
                                                      const int32_t *doc, const int32_t *dstart, int T, int H, int Hkv, int Dh,
                                                      float sl2, BlockArgs ba) {
    constexpr int BM = 16 * MT * NW, SR = DHP + 8, NT = NW * 32, KD = DHP / 16, NTN = BN / 8, ND = DHP / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + BM * SR, *Vs = Ks + 2 * BN * SR;
    int *dks = (int *)(Vs + 2 * BN * SR);
    const int nqt = (T + BM - 1) / BM, qt = nqt - 1 - (int)blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (H / Hkv), q0 = qt * BM, qlast = min(q0 + BM, T) - 1;
    const int64_t rb = (int64_t)b * T;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const bf16 *qg = q + rb * ldq + (int64_t)h * Dh, *kg = k + rb * ldk + (int64_t)g * Dh, *vg = v + rb * ldv + (int64_t)g * Dh;
    const int32_t *docb = doc + rb, *kdoc = BLK ? ba.kdoc : docb;
    const int Tk = BLK ? ba.Tk : T, delta = BLK ? ba.delta : 0;
    int kstart, klim;
    bool one_doc;
    if constexpr (BLK) {
        block_keys(ba, docb, q0, qlast, &kstart, &klim);
        one_doc = docb[q0] == docb[qlast];
    } else {
        kstart = dstart[rb + q0];
        klim = qlast;
        one_doc = dstart[rb + qlast] <= q0;
    }
    const int kt0 = kstart / BN, kt1 = klim < kstart ? kt0 - 1 : klim / BN;

    load_rows<BM, DHP, NT>(Qs, qg, ldq, q0, T, Dh);
    load_kv_tile<BN, DHP, NT>(Ks, Vs, dks, 0, kg, ldk, vg, ldv, kdoc, kt0 * BN, Tk, Dh);
    cp_commit();

    const int r0 = warp * 16 * MT; /* the warp's first row within the tile */
    int ri[MT][2], rd[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            ri[mt][hf] = q0 + r0 + 16 * mt + gid + 8 * hf;
            rd[mt][hf] = ri[mt][hf] < T ? docb[ri[mt][hf]] : -2;
        }
    float o[MT][ND][4], m[MT][2], l[MT][2];
    zero_frags(o);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int kt = kt0; kt <= kt1; kt++) {
        const int buf = kv_tile_next<BN, DHP, NT>(Ks, Vs, dks, kt, kt0, kt1, kg, ldk, vg, ldv, kdoc, Tk, Dh);
        const bf16 *Kb = Ks + buf * BN * SR, *Vb = Vs + buf * BN * SR;
        const int *dk = dks + buf * BN;
        float s[MT][NTN][4];
        zero_frags(s);
        gemm_sAm_sB<KD, NTN, MT>(s, Qs, r0, Kb, SR, lane);
        const int k0 = kt * BN;
        const bool full = tile_unmasked<BN, BLK>(one_doc, dk, docb, k0, q0, kstart, delta);
        uint32_t pa[MT][BN / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < NTN; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = s[mt][nt][e] * sl2;
                    if (!full) {
                        const int jl = nt * 8 + 2 * tig + (e & 1), hf = e >> 1;
                        if (!key_visible(ri[mt][hf], rd[mt][hf], k0 + jl, dk[jl], delta)) x = -INFINITY;
                    }
                    s[mt][nt][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float bs[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
                const float mn = fmaxf(m[mt][hf], mx[hf]);
                bs[hf] = mn == -INFINITY ? 0.0f : mn;
                const float a = exp2f(m[mt][hf] - bs[hf]);
                m[mt][hf] = mn;
                l[mt][hf] *= a;
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    o[mt][n][2 * hf] *= a;
                    o[mt][n][2 * hf + 1] *= a;
                }
            }
#pragma unroll
            for (int nt = 0; nt < NTN; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[mt][nt][e] = exp2f(s[mt][nt][e] - bs[e >> 1]);
                    ps[e >> 1] += s[mt][nt][e];
                }
            l[mt][0] += ps[0];
            l[mt][1] += ps[1];
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
        }
        gemm_rAm_sBt<BN / 16, ND, MT>(o, pa, Vb, SR, lane);
        __syncthreads(); /* this buffer is refilled two iterations on */
    }
    cp_wait<0>(); /* a block with no visible key issued its first loads only */
    if constexpr (BLK) {
        block_fwd_merge<MT, ND>(ba, o, m, l, ri, T, h, Dh, tig);
        return;
    }
    bf16 *og = out + rb * ldo + (int64_t)h * Dh;
    float *lr = lse + ((int64_t)b * H + h) * T;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lt = l[mt][hf];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
            const int i = ri[mt][hf];
            if (i < T) {
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    const int c = n * 8 + 2 * tig;
                    if (c < Dh) *(uint32_t *)(og + (int64_t)i * ldo + c) = pack2(o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv);
                }
                if (tig == 0) lr[i] = (m[mt][hf] + log2f(lt)) * LN2;
            }
        }
}

/* ---- backward: D = rowsum(dO * O) ---------------------------------------------------------- */

/* one head of one token, summed by a warp (the one order of D's sum: attention_delta's D and the
 * backward's own are the same bits) */
__device__ __forceinline__ float warp_row_delta(const bf16 *d, const bf16 *o, int Dh, int lane) {
    float s = 0.0f;
    for (int c = 2 * lane; c < Dh; c += 64) {
        float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)(d + c)), e = __bfloat1622float2(*(const __nv_bfloat162 *)(o + c));
        s += a.x * e.x + a.y * e.y;
    }
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    return s;
}

/* one warp per (b, h, i), warp-grid-stride */
__global__ void k_attn_D(float *D, const bf16 *dout, const bf16 *out, int64_t ldo, int B, int T, int H, int Dh) {
    const int64_t nw = (int64_t)gridDim.x * blockDim.x >> 5, rows = (int64_t)B * H * T;
    const int lane = threadIdx.x & 31;
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; w < rows; w += nw) {
        int i = (int)(w % T);
        int64_t bh = w / T;
        int h = (int)(bh % H), b = (int)(bh / H);
        float s = warp_row_delta(dout + ((int64_t)b * T + i) * ldo + (int64_t)h * Dh, out + ((int64_t)b * T + i) * ldo + (int64_t)h * Dh,
                                 Dh, lane);
        if (lane == 0) D[w] = s;
    }
}

/* attention_delta: one warp per (token r of the chunk, head h), warp-grid-stride; D in lse's
 * [B, H, T] layout for token n0 + r = b T + i */
__global__ void k_attn_delta(float *D, const bf16 *dout, int64_t ldd, const bf16 *out, int64_t ldo, int64_t n0, int64_t rows,
                             int T, int H, int Dh) {
    const int64_t nw = (int64_t)gridDim.x * blockDim.x >> 5, n = rows * H;
    const int lane = threadIdx.x & 31;
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; w < n; w += nw) {
        const int64_t r = w / H, t = n0 + r, b = t / T, i = t % T;
        const int h = (int)(w % H);
        float s = warp_row_delta(dout + r * ldd + (int64_t)h * Dh, out + r * ldo + (int64_t)h * Dh, Dh, lane);
        if (lane == 0) D[(b * H + h) * T + i] = s;
    }
}

/* ---- backward: dQ --------------------------------------------------------------------------- */

/* dQ: grid (ceil(T / BM), H, B); dq = scale * sum_j P_ij (dP_ij - D_i) k_j over the visible keys.
 * MT m-tiles (16 MT query rows) per warp, Q and dO read from shared memory at each k-step (as
 * the forward): BM = 16 MT NW query rows per block, BN keys per tile. */
template <int DHP, int NW, int MT, int BN, bool BLK>
__global__ void __launch_bounds__(NW * 32) k_fa_dq_mt(bf16 *dq, int64_t lddq, const bf16 *dout, int64_t ldo, const float *lse,
                                                     const float *Dv, const bf16 *q, int64_t ldq, const bf16 *k, int64_t ldk,
                                                     const bf16 *v, int64_t ldv, const int32_t *doc, const int32_t *dstart,
                                                     int T, int H, int Hkv, int Dh, float sl2, float scale, BlockArgs ba) {
    constexpr int BM = 16 * MT * NW, SR = DHP + 8, NT = NW * 32, KD = DHP / 16, NTN = BN / 8, ND = DHP / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + BM * SR, *Ks = dOs + BM * SR, *Vs = Ks + 2 * BN * SR;
    int *dks = (int *)(Vs + 2 * BN * SR);
    const int nqt = (T + BM - 1) / BM, qt = nqt - 1 - (int)blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (H / Hkv), q0 = qt * BM, qlast = min(q0 + BM, T) - 1;
    const int64_t rb = (int64_t)b * T;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const bf16 *kg = k + rb * ldk + (int64_t)g * Dh, *vg = v + rb * ldv + (int64_t)g * Dh;
    const int32_t *docb = doc + rb, *kdoc = BLK ? ba.kdoc : docb;
    const int Tk = BLK ? ba.Tk : T, delta = BLK ? ba.delta : 0;
    int kstart, klim;
    bool one_doc;
    if constexpr (BLK) {
        block_keys(ba, docb, q0, qlast, &kstart, &klim);
        if (klim < kstart) return; /* no key of this block is visible: dq gets nothing */
        one_doc = docb[q0] == docb[qlast];
    } else {
        kstart = dstart[rb + q0];
        klim = qlast;
        one_doc = dstart[rb + qlast] <= q0;
    }
    const int kt0 = kstart / BN, kt1 = klim / BN;

    load_rows<BM, DHP, NT>(Qs, q + rb * ldq + (int64_t)h * Dh, ldq, q0, T, Dh);
    load_rows<BM, DHP, NT>(dOs, dout + rb * ldo + (int64_t)h * Dh, ldo, q0, T, Dh);
    load_kv_tile<BN, DHP, NT>(Ks, Vs, dks, 0, kg, ldk, vg, ldv, kdoc, kt0 * BN, Tk, Dh);
    cp_commit();

    const int r0 = warp * 16 * MT;
    const float *lr = BLK ? lse + (int64_t)h * ba.ldl : lse + ((int64_t)b * H + h) * T, *Dr = Dv + ((int64_t)b * H + h) * T;
    int ri[MT][2], rd[MT][2];
    float L[MT][2], Dd[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = q0 + r0 + 16 * mt + gid + 8 * hf;
            ri[mt][hf] = i;
            rd[mt][hf] = i < T ? docb[i] : -2;
            L[mt][hf] = i < T ? lr[i] * LOG2E : 0.0f;
            Dd[mt][hf] = i < T ? Dr[i] : 0.0f;
        }
    float acc[MT][ND][4];
    zero_frags(acc);

    for (int kt = kt0; kt <= kt1; kt++) {
        const int buf = kv_tile_next<BN, DHP, NT>(Ks, Vs, dks, kt, kt0, kt1, kg, ldk, vg, ldv, kdoc, Tk, Dh);
        const bf16 *Kb = Ks + buf * BN * SR, *Vb = Vs + buf * BN * SR;
        const int *dk = dks + buf * BN;
        float s[MT][NTN][4], dp[MT][NTN][4];
        zero_frags(s);
        zero_frags(dp);
        gemm_sAm_sB<KD, NTN, MT>(s, Qs, r0, Kb, SR, lane);
        gemm_sAm_sB<KD, NTN, MT>(dp, dOs, r0, Vb, SR, lane);
        const int k0 = kt * BN;
        const bool full = tile_unmasked<BN, BLK>(one_doc, dk, docb, k0, q0, kstart, delta);
        uint32_t da[MT][BN / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int nt = 0; nt < NTN; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hf = e >> 1;
                    bool ok = true;
                    if (!full) {
                        /* key_visible written out: through the helper, nvcc 13 spills 24 bytes in
                         * the Dh 128 instance of this kernel (ptxas -v) */
                        const int jl = nt * 8 + 2 * tig + (e & 1), j = k0 + jl;
                        ok = j <= ri[mt][hf] + delta && dk[jl] == rd[mt][hf];
                    }
                    const float p = ok ? exp2f(s[mt][nt][e] * sl2 - L[mt][hf]) : 0.0f;
                    s[mt][nt][e] = p * (dp[mt][nt][e] - Dd[mt][hf]);
                }
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) acc_to_a(da[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
        }
        gemm_rAm_sBt<BN / 16, ND, MT>(acc, da, Kb, SR, lane);
        __syncthreads();
    }
    /* whole rows: dq = scale acc (bf16); ring blocks: dq += scale acc (the f32 accumulator) */
    bf16 *og = BLK ? nullptr : dq + rb * lddq + (int64_t)h * Dh;
    float *fo = BLK ? ba.fo + (int64_t)h * Dh : nullptr;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = ri[mt][hf];
            if (i >= T) continue;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                const int c = n * 8 + 2 * tig;
                if (c >= Dh) continue;
                const float x = acc[mt][n][2 * hf] * scale, y = acc[mt][n][2 * hf + 1] * scale;
                if constexpr (BLK) {
                    float2 *p = (float2 *)(fo + (int64_t)i * ba.ldfo + c), r = *p;
                    *p = make_float2(r.x + x, r.y + y);
                } else {
                    *(uint32_t *)(og + (int64_t)i * lddq + c) = pack2(x, y);
                }
            }
        }
}

/* ---- backward: dK, dV --------------------------------------------------------------------- */

/* grid (ceil(T / BN), Hkv, B): the block owns BN = 16 NW keys of KV group g and loops over
 * (query head of the group, query tile of BM rows): S^T = K Q^T, P^T, dP^T = V dO^T,
 * dV += P^T dO, dS^T = P^T (dP^T - D), dK += dS^T Q; dk = scale dK. The Q / dO tiles go through
 * an ST-stage cp.async pipeline (loads issued ST - 1 tiles ahead). */
template <int DHP, int NW, int BM, int ST, bool BLK>
__global__ void __launch_bounds__(NW * 32) k_fa_dkdv(bf16 *dk, int64_t lddk, bf16 *dv, int64_t lddv, const bf16 *dout,
                                                    int64_t ldo, const float *lse, const float *Dv, const bf16 *q, int64_t ldq,
                                                    const bf16 *k, int64_t ldk, const bf16 *v, int64_t ldv, const int32_t *doc,
                                                    const int32_t *dstart, const int32_t *dend, int T, int H, int Hkv, int Dh,
                                                    float sl2, float scale, BlockArgs ba) {
    constexpr int BN = 16 * NW, SR = DHP + 8, NT = NW * 32, KD = DHP / 16, NTM = BM / 8, ND = DHP / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + BN * SR, *Qs = Vs + BN * SR, *dOs = Qs + ST * BM * SR;
    float *Ls = (float *)(dOs + ST * BM * SR), *Ds = Ls + ST * BM;
    int *dqs = (int *)(Ds + ST * BM);
    const int kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, rep = H / Hkv;
    const int Tk = BLK ? ba.Tk : T, delta = BLK ? ba.delta : 0;
    const int k0 = kt * BN, klast = min(k0 + BN, Tk) - 1;
    const int64_t rb = (int64_t)b * T;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int32_t *docb = doc + rb, *kdoc = BLK ? ba.kdoc : docb;
    int qt0, nq;
    if constexpr (BLK) {
        int qlo, qhi;
        block_queries(ba, docb, T, k0, klast, &qlo, &qhi);
        if (qhi < qlo) return; /* no query of this block sees these keys: dk, dv get nothing */
        qt0 = qlo / BM;
        nq = qhi / BM - qt0 + 1;
    } else {
        qt0 = k0 / BM;
        nq = (dend[rb + klast] - 1) / BM - qt0 + 1;
    }
    const int total = rep * nq;
    const int64_t lstride = BLK ? ba.ldl : T;

    load_rows<BN, DHP, NT>(Ks, k + rb * ldk + (int64_t)g * Dh, ldk, k0, Tk, Dh);
    load_rows<BN, DHP, NT>(Vs, v + rb * ldv + (int64_t)g * Dh, ldv, k0, Tk, Dh);
    auto load_q = [&](int it, int buf) {
        const int hh = g * rep + it / nq, qs = (qt0 + it % nq) * BM;
        load_rows<BM, DHP, NT>(Qs + buf * BM * SR, q + rb * ldq + (int64_t)hh * Dh, ldq, qs, T, Dh);
        load_rows<BM, DHP, NT>(dOs + buf * BM * SR, dout + rb * ldo + (int64_t)hh * Dh, ldo, qs, T, Dh);
        for (int r = threadIdx.x; r < BM; r += NT) {
            const int i = qs + r;
            const int64_t li = ((int64_t)b * H + hh) * T + i;
            const bool ok = i < T;
            Ls[buf * BM + r] = ok ? lse[((int64_t)b * H + hh) * lstride + i] * LOG2E : 0.0f;
            Ds[buf * BM + r] = ok ? Dv[li] : 0.0f;
            dqs[buf * BM + r] = ok ? docb[i] : -2;
        }
    };
#pragma unroll
    for (int s0 = 0; s0 < ST - 1; s0++) { /* group 0 also holds K and V */
        if (s0 < total) load_q(s0, s0);
        cp_commit();
    }

    const int j_lo = k0 + warp * 16 + gid, j_hi = j_lo + 8;
    const int dj_lo = j_lo < Tk ? kdoc[j_lo] : -1, dj_hi = j_hi < Tk ? kdoc[j_hi] : -1;
    const int kd0 = kdoc[k0], kdl = kdoc[klast];
    float adk[ND][4], adv[ND][4];
    zero_frags(adk);
    zero_frags(adv);

    for (int it = 0; it < total; it++) {
        {
            const int nx = it + ST - 1;
            if (nx < total) load_q(nx, nx % ST);
            cp_commit(); /* possibly empty: keeps one group per iteration */
        }
        cp_wait<ST - 1>();
        __syncthreads();
        const int buf = it % ST;
        const bf16 *Qb = Qs + buf * BM * SR, *dOb = dOs + buf * BM * SR;
        const float *Lb = Ls + buf * BM, *Db = Ds + buf * BM;
        const int *dqb = dqs + buf * BM;
        const int q0 = (qt0 + it % nq) * BM, qlast = min(q0 + BM, T) - 1;
        float st_[NTM][4], dpt[NTM][4];
        zero_frags(st_);
        zero_frags(dpt);
        gemm_sA_sB<KD, NTM>(st_, Ks, warp * 16, Qb, SR, lane);
        gemm_sA_sB<KD, NTM>(dpt, Vs, warp * 16, dOb, SR, lane);
        const bool full = BLK ? q0 + BM <= T && klast == k0 + BN - 1 && klast <= q0 + delta && dqb[0] == kd0 &&
                                    dqb[BM - 1] == kd0 && kdl == kd0
                              : q0 + BM <= T && klast <= q0 && dstart[rb + qlast] <= k0;
#pragma unroll
        for (int nt = 0; nt < NTM; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int il = nt * 8 + 2 * tig + (e & 1), i = q0 + il;
                bool ok = true;
                if (!full) ok = e < 2 ? key_visible(i, dqb[il], j_lo, dj_lo, delta) : key_visible(i, dqb[il], j_hi, dj_hi, delta);
                const float p = ok ? exp2f(st_[nt][e] * sl2 - Lb[il]) : 0.0f;
                st_[nt][e] = p;
                dpt[nt][e] = p * (dpt[nt][e] - Db[il]);
            }
        uint32_t pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            acc_to_a(pa[kk], st_[2 * kk], st_[2 * kk + 1]);
            acc_to_a(da[kk], dpt[2 * kk], dpt[2 * kk + 1]);
        }
        gemm_rA_sBt<BM / 16, ND>(adv, pa, dOb, SR, lane);
        gemm_rA_sBt<BM / 16, ND>(adk, da, Qb, SR, lane);
        __syncthreads();
    }
    /* whole rows: dk = scale dK, dv = dV (bf16); ring blocks: added into the f32 accumulators */
    bf16 *kgo = BLK ? nullptr : dk + rb * lddk + (int64_t)g * Dh, *vgo = BLK ? nullptr : dv + rb * lddv + (int64_t)g * Dh;
    float *fk = BLK ? ba.fdk + (int64_t)g * Dh : nullptr, *fv = BLK ? ba.fdv + (int64_t)g * Dh : nullptr;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        const int c = n * 8 + 2 * tig;
        if (c >= Dh) continue;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int j = hf ? j_hi : j_lo;
            if (j >= Tk) continue;
            const float kx = adk[n][2 * hf] * scale, ky = adk[n][2 * hf + 1] * scale, vx = adv[n][2 * hf],
                        vy = adv[n][2 * hf + 1];
            if constexpr (BLK) {
                float2 *pk = (float2 *)(fk + (int64_t)j * ba.ldfdk + c), *pv = (float2 *)(fv + (int64_t)j * ba.ldfdv + c);
                const float2 rk = *pk, rv = *pv;
                *pk = make_float2(rk.x + kx, rk.y + ky);
                *pv = make_float2(rv.x + vx, rv.y + vy);
            } else {
                *(uint32_t *)(kgo + (int64_t)j * lddk + c) = pack2(kx, ky);
                *(uint32_t *)(vgo + (int64_t)j * lddv + c) = pack2(vx, vy);
            }
        }
    }
}

/* ---- host side ------------------------------------------------------------------------------ */

constexpr int NWARPS = 4;

/* The launch configurations (tests/gpu/attn_variants.sh measured the alternatives; numbers in
 * docs/bench-attention.md): forward and dQ with 32 query rows per warp (MT 2), the forward over
 * 64-key tiles and dQ over 32-key tiles; dK/dV over 64-query tiles, double-buffered. */
constexpr int FWD_MT = 2, FWD_BN = 64, DQ_MT = 2, DQ_BN = 32, DKDV_BM = 64, DKDV_ST = 2;

/* Shared memory per block of each kernel (bytes). */
template <int DHP>
constexpr size_t smem_fwd() {
    return (size_t)(16 * FWD_MT * NWARPS + 4 * FWD_BN) * (DHP + 8) * 2 + 2 * FWD_BN * 4;
}
template <int DHP>
constexpr size_t smem_dq() {
    return (size_t)(2 * 16 * DQ_MT * NWARPS + 4 * DQ_BN) * (DHP + 8) * 2 + 2 * DQ_BN * 4;
}
template <int DHP>
constexpr size_t smem_dkdv() {
    return (size_t)(2 * 16 * NWARPS + 2 * DKDV_ST * DKDV_BM) * (DHP + 8) * 2 + 3 * DKDV_ST * DKDV_BM * 4;
}

template <typename K>
static cudaError_t smem_attr(K kern, size_t bytes) {
    return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <int DHP, bool BLK>
static cudaError_t set_smem_1() {
    cudaError_t e = smem_attr(k_fa_fwd_mt<DHP, NWARPS, FWD_MT, FWD_BN, BLK>, smem_fwd<DHP>());
    if (!e) e = smem_attr(k_fa_dq_mt<DHP, NWARPS, DQ_MT, DQ_BN, BLK>, smem_dq<DHP>());
    if (!e) e = smem_attr(k_fa_dkdv<DHP, NWARPS, DKDV_BM, DKDV_ST, BLK>, smem_dkdv<DHP>());
    return e;
}
template <int DHP>
static cudaError_t set_smem() {
    cudaError_t e = set_smem_1<DHP, false>();
    return e ? e : set_smem_1<DHP, true>();
}

glm_status attention_init(cuda_impl *I) {
    cudaError_t e = set_smem<64>();
    if (e == cudaSuccess) e = set_smem<128>();
    if (e != cudaSuccess)
        return glm_err(GLM_ERR_DEVICE, "cuda backend: the attention kernels need %zu bytes of shared memory per block: %s",
                       smem_fwd<128>(), cudaGetErrorString(e));
    return GLM_OK;
}

static glm_status check_attn(int B, int T, int H, int Hkv, int Dh, const void *const *ptrs, int nptr, const int64_t *lds,
                             int nld) {
    if (Dh > 128 || Dh % 8)
        return glm_err(GLM_ERR_UNSUPPORTED, "attention: head dim %d: the CUDA kernels take multiples of 8 up to 128", Dh);
    if (H > 65535 || B > 65535) /* grid dimensions */
        return glm_err(GLM_ERR_ARG, "attention: bad batch B=%d T=%d (H=%d)", B, T, H);
    for (int i = 0; i < nptr; i++)
        if ((uintptr_t)ptrs[i] & 15)
            return glm_err(GLM_ERR_UNSUPPORTED, "attention: the CUDA kernels need 16-byte aligned q, k, v and outputs");
    for (int i = 0; i < nld; i++)
        if (lds[i] % 8)
            return glm_err(GLM_ERR_UNSUPPORTED, "attention: row stride %lld is not a multiple of 8 elements", (long long)lds[i]);
    return GLM_OK;
}

/* dstart, dend [B*T] in scratch */
static glm_status doc_bounds(const glm_backend *be, const int32_t *doc, int B, int T, int32_t **ds, int32_t **de) {
    cuda_impl *I = IMPL(be);
    void *p;
    GLM_TRY(scratch(I, SCR_ATTN_DOC, (size_t)B * T * 8, &p));
    *ds = (int32_t *)p;
    *de = *ds + (int64_t)B * T;
    k_doc_bounds<<<B, DOC_THREADS, 0, I->s>>>(*ds, *de, doc, T);
    LAUNCHED("attention (document bounds)");
    return GLM_OK;
}

/* The launches, shared by whole rows (BLK false) and ring blocks (BLK true; ba as in BlockArgs). */
template <bool BLK>
static void launch_fwd(cuda_impl *I, dim3 grid, int Dh, bf16 *out, int64_t ldo, float *lse, const bf16 *q, int64_t ldq,
                       const bf16 *k, int64_t ldk, const bf16 *v, int64_t ldv, const int32_t *doc, const int32_t *ds, int T,
                       int H, int Hkv, float sl2, BlockArgs ba) {
#define ARGS out, ldo, lse, q, ldq, k, ldk, v, ldv, doc, ds, T, H, Hkv, Dh, sl2, ba
    if (Dh <= 64) k_fa_fwd_mt<64, NWARPS, FWD_MT, FWD_BN, BLK><<<grid, NWARPS * 32, smem_fwd<64>(), I->s>>>(ARGS);
    else k_fa_fwd_mt<128, NWARPS, FWD_MT, FWD_BN, BLK><<<grid, NWARPS * 32, smem_fwd<128>(), I->s>>>(ARGS);
#undef ARGS
}

/* dq first, then dk and dv (dq, dk, dv have the row strides of q, k, v: they may be column blocks
 * of one buffer). */
template <bool BLK>
static void launch_bwd(cuda_impl *I, dim3 gq, dim3 gk, int Dh, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, int64_t ldo,
                       const float *lse, const float *Dp, const bf16 *q, int64_t ldq, const bf16 *k, int64_t ldk,
                       const bf16 *v, int64_t ldv, const int32_t *doc, const int32_t *ds, const int32_t *de, int T, int H,
                       int Hkv, float sl2, float scale, BlockArgs ba) {
#define QARGS dq, ldq, dout, ldo, lse, Dp, q, ldq, k, ldk, v, ldv, doc, ds, T, H, Hkv, Dh, sl2, scale, ba
#define KARGS dk, ldk, dv, ldv, dout, ldo, lse, Dp, q, ldq, k, ldk, v, ldv, doc, ds, de, T, H, Hkv, Dh, sl2, scale, ba
    if (Dh <= 64) k_fa_dq_mt<64, NWARPS, DQ_MT, DQ_BN, BLK><<<gq, NWARPS * 32, smem_dq<64>(), I->s>>>(QARGS);
    else k_fa_dq_mt<128, NWARPS, DQ_MT, DQ_BN, BLK><<<gq, NWARPS * 32, smem_dq<128>(), I->s>>>(QARGS);
    if (gk.x == 0) return;
    if (Dh <= 64) k_fa_dkdv<64, NWARPS, DKDV_BM, DKDV_ST, BLK><<<gk, NWARPS * 32, smem_dkdv<64>(), I->s>>>(KARGS);
    else k_fa_dkdv<128, NWARPS, DKDV_BM, DKDV_ST, BLK><<<gk, NWARPS * 32, smem_dkdv<128>(), I->s>>>(KARGS);
#undef QARGS
#undef KARGS
}

glm_status cu_attention_fwd(const glm_backend *be, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                            const void *k, int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H,
                            int Hkv, int Dh) {
    const void *ptrs[] = {out, q, k, v};
    const int64_t lds[] = {ldo, ldq, ldk, ldv};
    GLM_TRY(check_attn(B, T, H, Hkv, Dh, ptrs, 4, lds, 4));
    glm_status cst = attn_ragged_fwd(be, out, ldo, lse, q, ldq, k, ldk, v, ldv, doc, B, T, H, Hkv, Dh);
    if (cst != GLM_ERR_UNSUPPORTED || IMPL(be)->attn_mode == ATTN_CUDNN) return cst; /* cuDNN did it, or failed */
    cuda_impl *I = IMPL(be);
    int32_t *ds, *de;
    GLM_TRY(doc_bounds(be, doc, B, T, &ds, &de));
    const float sl2 = (float)(1.0 / sqrt((double)Dh)) * LOG2E;
    dim3 grid((unsigned)((T + 16 * FWD_MT * NWARPS - 1) / (16 * FWD_MT * NWARPS)), (unsigned)H, (unsigned)B);
    launch_fwd<false>(I, grid, Dh, (bf16 *)out, ldo, lse, (const bf16 *)q, ldq, (const bf16 *)k, ldk, (const bf16 *)v, ldv,
                      doc, ds, T, H, Hkv, sl2, BlockArgs{});
    LAUNCHED("attention_fwd");
    return GLM_OK;
}

glm_status cu_attention_delta(const glm_backend *be, void *D, const void *dout, int64_t ldd, const void *out, int64_t ldo,
                              int64_t n0, int64_t rows, int T, int H, int Dh) {
    if (Dh % 2 || ((uintptr_t)dout | (uintptr_t)out) & 3 || ldd % 2 || ldo % 2)
        return glm_err(GLM_ERR_UNSUPPORTED, "attention_delta: the CUDA kernel reads bf16 pairs: an even head dim (%d), "
                       "4-byte aligned inputs and even row strides", Dh);
    cuda_impl *I = IMPL(be);
    k_attn_delta<<<grid_for(rows * H * 32, 256), 256, 0, I->s>>>((float *)D, (const bf16 *)dout, ldd, (const bf16 *)out, ldo, n0,
                                                                rows, T, H, Dh);
    LAUNCHED("attention_delta");
    return GLM_OK;
}

glm_status cu_attention_bwd(const glm_backend *be, void *dq, void *dk, void *dv, const void *dout, int64_t ldo,
                            const void *out, const float *lse, const void *D, const void *q, int64_t ldq, const void *k,
                            int64_t ldk, const void *v, int64_t ldv, const int32_t *doc, int B, int T, int H, int Hkv,
                            int Dh) {
    const void *ptrs[] = {dq, dk, dv, dout, out, q, k, v};
    const int64_t lds[] = {ldo, ldq, ldk, ldv};
    GLM_TRY(check_attn(B, T, H, Hkv, Dh, ptrs, 8, lds, 4));
    if (!D) { /* cuDNN's fused backward reads out itself: it runs only where D is not given */
        glm_status cst = attn_ragged_bwd(be, dq, dk, dv, dout, ldo, out, lse, q, ldq, k, ldk, v, ldv, doc, B, T, H, Hkv, Dh);
        if (cst != GLM_ERR_UNSUPPORTED || IMPL(be)->attn_mode == ATTN_CUDNN) return cst; /* cuDNN did it, or failed */
    }
    cuda_impl *I = IMPL(be);
    const float scale = (float)(1.0 / sqrt((double)Dh)), sl2 = scale * LOG2E;
    int64_t rows = (int64_t)B * H * T;
    const void *Dp = D;
    if (!Dp) {
        void *Ds;
        GLM_TRY(scratch(I, SCR_ATTN_D, (size_t)rows * 4, &Ds));
        k_attn_D<<<grid_for(rows * 32, 256), 256, 0, I->s>>>((float *)Ds, (const bf16 *)dout, (const bf16 *)out, ldo, B, T, H, Dh);
        LAUNCHED("attention_bwd (D)");
        Dp = Ds;
    }
    int32_t *ds, *de;
    GLM_TRY(doc_bounds(be, doc, B, T, &ds, &de));
    /* dq, dk, dv have the row strides of q, k, v (they may be column blocks of one buffer) */
    dim3 gq((unsigned)((T + 16 * DQ_MT * NWARPS - 1) / (16 * DQ_MT * NWARPS)), (unsigned)H, (unsigned)B);
    dim3 gk((unsigned)((T + 16 * NWARPS - 1) / (16 * NWARPS)), (unsigned)Hkv, (unsigned)B);
    launch_bwd<false>(I, gq, gk, Dh, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout, ldo, lse, (const float *)Dp,
                      (const bf16 *)q, ldq, (const bf16 *)k, ldk, (const bf16 *)v, ldv, doc, ds, de, T, H, Hkv, sl2, scale,
                      BlockArgs{});
    LAUNCHED("attention_bwd (dk, dv)");
    return GLM_OK;
}

/* ---- attention blocks for the context-parallel ring (kernels/backend.h) ------------------------
 * The same kernels with BLK: the global offsets in the causal test, the key block's own document
 * ids, f32 accumulators (this backend's acc_dtype) merged by lse (forward) or added to (backward).
 * One row per call. */
static glm_status block_delta(int64_t q0, int64_t k0, int *delta) {
    if (q0 - k0 > INT_MAX / 2 || k0 - q0 > INT_MAX / 2)
        return glm_err(GLM_ERR_ARG, "attention block: offsets q0=%lld, k0=%lld too far apart", (long long)q0, (long long)k0);
    *delta = (int)(q0 - k0);
    return GLM_OK;
}

glm_status cu_attention_block_fwd(const glm_backend *be, void *o, int64_t ldo, void *lse, int64_t ldl, const void *q,
                                  int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                                  const int32_t *q_doc, const int32_t *k_doc, int64_t q0, int64_t k0, int Tq, int Tk,
                                  int H, int Hkv, int Dh, int init) {
    if (Tq == 0 || (Tk == 0 && !init)) return GLM_OK; /* zero-sized: nothing to do */
    const void *ptrs[] = {o, q, k, v};
    const int64_t lds[] = {ldq, ldk, ldv};
    GLM_TRY(check_attn(1, Tq, H, Hkv, Dh, ptrs, 4, lds, 3));
    BlockArgs ba{};
    GLM_TRY(block_delta(q0, k0, &ba.delta));
    ba.kdoc = k_doc, ba.Tk = Tk, ba.init = init, ba.fo = (float *)o, ba.flse = (float *)lse, ba.ldfo = ldo, ba.ldl = ldl;
    const float sl2 = (float)(1.0 / sqrt((double)Dh)) * LOG2E;
    dim3 grid((unsigned)((Tq + 16 * FWD_MT * NWARPS - 1) / (16 * FWD_MT * NWARPS)), (unsigned)H, 1);
    launch_fwd<true>(IMPL(be), grid, Dh, NULL, 0, NULL, (const bf16 *)q, ldq, (const bf16 *)k, ldk, (const bf16 *)v, ldv,
                     q_doc, NULL, Tq, H, Hkv, sl2, ba);
    LAUNCHED("attention_block_fwd");
    return GLM_OK;
}

glm_status cu_attention_block_bwd(const glm_backend *be, void *dq, int64_t lddq, void *dk, int64_t lddk, void *dv,
                                  int64_t lddv, const void *dout, int64_t ldo, const void *out, const float *lse,
                                  int64_t ldl, const void *q, int64_t ldq, const void *k, int64_t ldk, const void *v,
                                  int64_t ldv, const int32_t *q_doc, const int32_t *k_doc, int64_t q0, int64_t k0, int Tq,
                                  int Tk, int H, int Hkv, int Dh) {
    if (Tq == 0 || Tk == 0) return GLM_OK; /* zero-sized: nothing to do */
    const void *ptrs[] = {dq, dk, dv, dout, out, q, k, v};
    const int64_t lds[] = {ldo, ldq, ldk, ldv};
    GLM_TRY(check_attn(1, Tq, H, Hkv, Dh, ptrs, 8, lds, 4));
    cuda_impl *I = IMPL(be);
    BlockArgs ba{};
    GLM_TRY(block_delta(q0, k0, &ba.delta));
    ba.kdoc = k_doc, ba.Tk = Tk, ba.fo = (float *)dq, ba.fdk = (float *)dk, ba.fdv = (float *)dv, ba.ldfo = lddq;
    ba.ldfdk = lddk, ba.ldfdv = lddv, ba.ldl = ldl;
    const float scale = (float)(1.0 / sqrt((double)Dh)), sl2 = scale * LOG2E;
    const int64_t rows = (int64_t)H * Tq;
    void *Dp;
    GLM_TRY(scratch(I, SCR_ATTN_D, (size_t)rows * 4, &Dp));
    k_attn_D<<<grid_for(rows * 32, 256), 256, 0, I->s>>>((float *)Dp, (const bf16 *)dout, (const bf16 *)out, ldo, 1, Tq, H, Dh);
    LAUNCHED("attention_block_bwd (D)");
    dim3 gq((unsigned)((Tq + 16 * DQ_MT * NWARPS - 1) / (16 * DQ_MT * NWARPS)), (unsigned)H, 1);
    dim3 gk((unsigned)((Tk + 16 * NWARPS - 1) / (16 * NWARPS)), (unsigned)Hkv, 1);
    launch_bwd<true>(I, gq, gk, Dh, NULL, NULL, NULL, (const bf16 *)dout, ldo, lse, (const float *)Dp, (const bf16 *)q, ldq,
                     (const bf16 *)k, ldk, (const bf16 *)v, ldv, q_doc, NULL, NULL, Tq, H, Hkv, sl2, scale, ba);
    LAUNCHED("attention_block_bwd");
    return GLM_OK;
}

}  // namespace glmcu

