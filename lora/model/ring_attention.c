/* lora/model/ring_attention.c: the context-parallel attention ring (lora/model/ring_attention.h) over the
 * backend's block attention ops and its group communicator. */
#include "lora/model/ring_attention.h"

#include <stddef.h>

#include "kernels/comm.h"

void glm_cp_layout_make(int T, int n, int rank, glm_cp_layout *out) {
    if (n < 1) n = 1;
    out->n = n;
    out->rank = rank;
    out->T = T;
    out->Tp = (int)(((int64_t)T + 2 * n - 1) / (2 * n) * (2 * n));
    out->S = out->Tp / (2 * n);
}

glm_status glm_ring_supported(const glm_backend *be) {
    if (glm_be_supports(be, GLM_FEATURE_RING_ATTENTION)) return GLM_OK;
    return glm_err(GLM_ERR_UNSUPPORTED, "the %s backend does not compute the ring's block attention (context parallel); "
                   "hint: --context-parallel 1", be->name);
}

#define EL(p, elems, esz) ((void *)((char *)(p) + (size_t)(elems) * (esz)))

/* Whether query chunk [qg, qg + S) of row b may attend to any key of chunk [kg, kg + S): the key
 * chunk does not start after the queries, and (documents being contiguous runs with increasing
 * ids) the key chunk's last document is not before the query chunk's first. */
static int pair_live(const glm_ring *R, int b, int64_t qg, int64_t kg) {
    const int S = R->L.S;
    if (kg > qg) return 0;
    if (kg == qg) return 1;
    const int32_t *d = R->gdoc_host + (int64_t)b * R->L.Tp;
    return d[kg + S - 1] >= d[qg];
}

/* The blocks of one ring step: this rank's 2 query chunks of every row against the 2 key chunks
 * of rank src (the K|V block kvb). Forward (bwd == 0): merged into R->acc / lse, the diagonal pair
 * of step 0 first with init (it holds every query's own key, so every query starts there).
 * Backward: dq into R->acc, dK|dV into dkvb. */
static glm_status step_blocks(const glm_ring *R, int step, int src, const void *kvb, void *dkvb, int bwd, const float *lse,
                              const void *q, int64_t ldq, const void *dout, int64_t ldo, const void *out) {
    const glm_backend *be = R->be;
    const glm_cp_layout *L = &R->L;
    const int S = L->S, TL = 2 * S, c = L->rank, H = R->H, Hkv = R->Hkv, Dh = R->Dh;
    const int64_t qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh;
    const size_t e = glm_dtype_size(be->act_dtype), ea = glm_dtype_size(be->acc_dtype);
    for (int b = 0; b < R->B; b++)
        for (int qh = 0; qh < 2; qh++)
            for (int t = 0; t < 2; t++) {
                int kh = step == 0 ? (t ? 1 - qh : qh) : t; /* step 0: the diagonal pair first */
                int64_t qg = glm_cp_chunk_start(L, c, qh), kg = glm_cp_chunk_start(L, src, kh);
                int init = !bwd && step == 0 && kh == qh;
                if (!init && !pair_live(R, b, qg, kg)) continue;
                int64_t qrow = (int64_t)b * TL + (int64_t)qh * S, krow = (int64_t)b * TL + (int64_t)kh * S;
                const int32_t *qdoc = R->gdoc + (int64_t)b * L->Tp + qg, *kdoc = R->gdoc + (int64_t)b * L->Tp + kg;
                const void *kb = EL(kvb, krow * 2 * kd, e), *vb = EL(kvb, krow * 2 * kd + kd, e);
                int64_t lrow = (int64_t)b * H * TL + (int64_t)qh * S; /* lse of the chunk's first query, head 0 */
                if (!bwd) {
                    GLM_TRY(glm_be_attention_block_fwd(be, EL(R->acc, qrow * qd, ea), qd, EL(R->lse_acc, lrow, ea), TL,
                                                    EL(q, qrow * ldq, e), ldq, kb, 2 * kd, vb, 2 * kd, qdoc, kdoc, qg, kg, S,
                                                    S, H, Hkv, Dh, init));
                } else {
                    void *dk = EL(dkvb, krow * 2 * kd, ea);
                    GLM_TRY(glm_be_attention_block_bwd(be, EL(R->acc, qrow * qd, ea), qd, dk, 2 * kd, EL(dk, kd, ea), 2 * kd,
                                                    EL(dout, qrow * ldo, e), ldo, EL(out, qrow * ldo, e), lse + lrow, TL,
                                                    EL(q, qrow * ldq, e), ldq, kb, 2 * kd, vb, 2 * kd, qdoc, kdoc, qg, kg,
                                                    S, S, H, Hkv, Dh));
                }
                glm_comm_progress(R->comm); /* MPI moves the next block along between the blocks */
            }
    return GLM_OK;
}

static glm_status check_adjacent(const glm_ring *R, const void *k, int64_t ldk, const void *v, int64_t ldv, const char *what) {
    size_t e = glm_dtype_size(R->be->act_dtype);
    if ((const char *)v != (const char *)k + (size_t)R->Hkv * R->Dh * e || ldv != ldk)
        return glm_err(GLM_ERR_ARG, "ring attention: %s must be adjacent column blocks of one buffer with one row stride",
                       what);
    return GLM_OK;
}

glm_status glm_ring_attention_fwd(const glm_ring *R, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                                  const void *k, int64_t ldk, const void *v, int64_t ldv) {
    GLM_TRY(check_adjacent(R, k, ldk, v, ldv, "k and v"));
    const glm_backend *be = R->be, *cm = R->comm;
    const int n = R->L.n, c = R->L.rank;
    const int64_t Nl = (int64_t)R->B * glm_cp_local(&R->L), kd = (int64_t)R->Hkv * R->Dh, qd = (int64_t)R->H * R->Dh;
    const size_t e = glm_dtype_size(be->act_dtype);
    GLM_TRY(glm_be_cast_2d(be, R->kv[0], be->act_dtype, 2 * kd, k, be->act_dtype, ldk, Nl, 2 * kd));
    int cur = 0;
    for (int i = 0; i < n; i++) {
        int src = (c - i + n) % n, req = -1;
        if (i + 1 < n) /* the next block travels while this one computes */
            GLM_TRY(glm_comm_sendrecv_start(cm, R->kv[cur], (c + 1) % n, R->kv[1 - cur], (c + n - 1) % n,
                                       (size_t)(Nl * 2 * kd) * e, &req));
        GLM_TRY(step_blocks(R, i, src, R->kv[cur], NULL, 0, NULL, q, ldq, NULL, 0, NULL));
        if (req >= 0) GLM_TRY(glm_comm_wait(cm, req));
        cur ^= 1;
    }
    GLM_TRY(glm_be_cast_2d(be, lse, GLM_DT_F32, Nl * R->H, R->lse_acc, be->acc_dtype, Nl * R->H, 1, Nl * R->H));
    return glm_be_cast_2d(be, out, be->act_dtype, ldo, R->acc, be->acc_dtype, qd, Nl, qd);
}

glm_status glm_ring_attention_bwd(const glm_ring *R, void *dq, int64_t ldq, void *dk, int64_t ldk, void *dv, int64_t ldv,
                                  const void *dout, int64_t ldo, const void *out, const float *lse, const void *q,
                                  const void *k, const void *v) {
    GLM_TRY(check_adjacent(R, k, ldk, v, ldv, "k and v"));
    GLM_TRY(check_adjacent(R, dk, ldk, dv, ldv, "dk and dv"));
    const glm_backend *be = R->be, *cm = R->comm;
    const int n = R->L.n, c = R->L.rank;
    const int64_t Nl = (int64_t)R->B * glm_cp_local(&R->L), kd = (int64_t)R->Hkv * R->Dh, qd = (int64_t)R->H * R->Dh;
    const size_t e = glm_dtype_size(be->act_dtype), ea = glm_dtype_size(be->acc_dtype);
    GLM_TRY(glm_be_cast_2d(be, R->kv[0], be->act_dtype, 2 * kd, k, be->act_dtype, ldk, Nl, 2 * kd));
    GLM_TRY(glm_be_zero(be, R->dkv[0], (size_t)(Nl * 2 * kd) * ea)); /* all-zero bits: 0.0 in every dtype */
    GLM_TRY(glm_be_zero(be, R->acc, (size_t)(Nl * qd) * ea));
    int cur = 0;
    for (int i = 0; i < n; i++) {
        int src = (c - i + n) % n, rkv = -1, rd = -1;
        if (i + 1 < n)
            GLM_TRY(glm_comm_sendrecv_start(cm, R->kv[cur], (c + 1) % n, R->kv[1 - cur], (c + n - 1) % n,
                                       (size_t)(Nl * 2 * kd) * e, &rkv));
        GLM_TRY(step_blocks(R, i, src, R->kv[cur], R->dkv[cur], 1, lse, q, ldq, dout, ldo, out));
        /* the accumulator of src's K|V moves on with it; after n hops it is back at src, complete */
        GLM_TRY(glm_comm_sendrecv_start(cm, R->dkv[cur], (c + 1) % n, R->dkv[1 - cur], (c + n - 1) % n,
                                   (size_t)(Nl * 2 * kd) * ea, &rd));
        if (rkv >= 0) GLM_TRY(glm_comm_wait(cm, rkv));
        if (rd >= 0) GLM_TRY(glm_comm_wait(cm, rd));
        cur ^= 1;
    }
    GLM_TRY(glm_be_cast_2d(be, dq, be->act_dtype, ldq, R->acc, be->acc_dtype, qd, Nl, qd));
    return glm_be_cast_2d(be, dk, be->act_dtype, ldk, R->dkv[cur], be->acc_dtype, 2 * kd, Nl, 2 * kd);
}
