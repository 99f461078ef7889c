/* lora/model/ring_attention.h: context parallelism (--context-parallel n): the tokens of each
 * packed row split over the n ranks of a group, and causal attention over the whole row computed
 * as a ring over those ranks (Liu et al. 2023, "Ring Attention"; the load-balanced "zigzag"
 * layout of Brandon et al. 2023 / Megatron-LM's context parallelism).
 *
 * Layout. A row of T tokens is padded to Tp = ceil(T / 2n) * 2n tokens and cut into 2n chunks of
 * S = Tp / 2n tokens. Rank c (0 <= c < n) holds chunk c from the front and chunk 2n-1-c from the
 * back, in that order, as its 2S local tokens of the row: under the causal mask every rank then
 * does the same attention work (chunk c sees c+1/2 chunks' worth of keys, chunk 2n-1-c sees
 * 2n-c-1/2, together 2n for every c). Everything but attention is token-local and runs on the
 * local tokens; each rank knows the global token index, the RoPE position, the document id and
 * the target flag of its tokens (it reads whole rows from the shards), so positions, document
 * boundaries and targets are exactly those of the unsplit row.
 *
 * Padding rule. The Tp - T tokens appended to a row (at most 2n - 1) are token id 0, never
 * targets, position 0, 1, ..., and form one more document after the row's last (doc id
 * doc[T-1] + 1): no real token attends to them and they attend only to each other, so they change
 * neither the loss nor any gradient. The label of token T-1 stays "none" (nothing follows it).
 *
 * The ring. Per layer, forward: every rank packs its local K|V, then n steps: at step i it holds
 * the K|V of rank (c - i) mod n, starts sending it on to rank c+1 (sendrecv_start on the group's
 * communicator) while it computes its queries' attention against it (backend attention_block_fwd
 * per pair of chunks, merged into accumulators with the blocks' log-sum-exp), then waits for
 * the block from rank c-1. Backward (with the forward's merged out and lse): the K|V blocks travel
 * the same way, each with a dK|dV accumulator that every rank adds its queries' contribution
 * to and passes on; after n steps the accumulator of each rank's K|V is back home, complete. dQ
 * accumulates locally. Accumulators have the backend's acc_dtype (CPU: double, so the ring
 * rounds once, at the end, like the whole-row ops; CUDA: f32) and are rounded to act / f32 by
 * cast_2d at the end. Chunk pairs with no allowed (query, key) pair (a key chunk after the query
 * chunk, or chunks of disjoint documents) are skipped: per step a rank computes two chunk pairs'
 * worth of attention (step 0: one full pair and two diagonal halves).
 *
 * Communication per layer and rank: forward (n - 1) K|V blocks of 2S * 2 Hkv Dh act elements per
 * row; backward the same plus n dK|dV blocks of 2S * 2 Hkv Dh acc_dtype elements. */
#ifndef GLM_LORA_RING_ATTENTION_H
#define GLM_LORA_RING_ATTENTION_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/backend.h"

typedef struct glm_cp_layout {
    int n, rank;   /* ranks per row and this rank's place in [0, n) */
    int T;         /* the row's length in tokens (the shards' seq_len) */
    int Tp, S;     /* the padded length (a multiple of 2n) and the chunk length Tp / 2n */
} glm_cp_layout;

/* The layout of rows of T tokens over n ranks (n >= 1; rank in [0, n)). */
void glm_cp_layout_make(int T, int n, int rank, glm_cp_layout *out);

/* Local tokens per row: 2S. */
static inline int glm_cp_local(const glm_cp_layout *L) { return 2 * L->S; }

/* The global token index (in [0, Tp)) where local chunk h (0: the front one, 1: the back one) of
 * rank r starts. */
static inline int64_t glm_cp_chunk_start(const glm_cp_layout *L, int r, int h) {
    return (int64_t)(h ? 2 * L->n - 1 - r : r) * L->S;
}

/* The global token index of this rank's local token j (0 <= j < 2S). */
static inline int64_t glm_cp_global(const glm_cp_layout *L, int64_t j) {
    return j < L->S ? glm_cp_chunk_start(L, L->rank, 0) + j : glm_cp_chunk_start(L, L->rank, 1) + (j - L->S);
}

/* One rank's ring: the buffers the model's workspace owns (lora/model/step_ws.c) and where the rows'
 * document ids are. */
typedef struct glm_ring {
    const glm_backend *be;     /* computes (the blocks, the packing) */
    const glm_backend *comm;   /* the group's communicator (comm->world == L.n, comm->rank == L.rank) */
    glm_cp_layout L;
    int B, H, Hkv, Dh;         /* rows per batch and attention heads */
    const int32_t *gdoc;       /* [B, Tp] int32, backend memory: the document id of every token of the rows */
    const int32_t *gdoc_host;  /* [B, Tp] host copy (for skipping chunk pairs of disjoint documents) */
    void *kv[2];               /* [B * 2S, 2 Hkv Dh] act: the K|V block in use and the one arriving */
    void *dkv[2];              /* [B * 2S, 2 Hkv Dh] acc: the dK|dV accumulators travelling with them (backward) */
    void *acc;                 /* [B * 2S, H Dh] acc: the output (forward) or dQ (backward) accumulator */
    void *lse_acc;             /* [B, H, 2S] acc: the forward's running log-sum-exp */
} glm_ring;

/* Ring attention forward over this rank's local tokens (B rows of 2S, row-major, as the model
 * holds them): q [B*2S, H*Dh] and k, v [B*2S, Hkv*Dh] act (row strides ldq, ldk, ldv; after RoPE),
 * k and v adjacent column blocks of one buffer (v == k + Hkv*Dh elements, ldv == ldk, as in
 * query_key_value's output). OVERWRITES out [B*2S, H*Dh] act (row stride ldo) and lse
 * [B, H, 2S] f32 with the attention of every local query over all keys of its row (all ranks),
 * equal to attention_fwd on the whole row (CPU: up to the order of the double sums). A collective over
 * R->comm: every rank of the group calls it for the same layer. Errors: GLM_ERR_ARG (k, v not
 * adjacent), backend and communication errors (naming the rank and the call). */
glm_status glm_ring_attention_fwd(const glm_ring *R, void *out, int64_t ldo, float *lse, const void *q, int64_t ldq,
                                  const void *k, int64_t ldk, const void *v, int64_t ldv);

/* Ring attention backward: from dout [B*2S, H*Dh] act (row stride ldo, shared with out) and the
 * forward's out and lse, OVERWRITES dq [B*2S, H*Dh] and dk, dv [B*2S, Hkv*Dh] act (row strides ldq,
 * ldk, ldv; dk and dv adjacent like k and v) with the gradients of this rank's local queries,
 * keys and values over the whole row (equal to attention_bwd's on the whole row; CPU: up to the
 * order of the double sums); q, k, v have the row strides of dq, dk, dv (as in attention_bwd).
 * A collective over R->comm. Errors: as glm_ring_attention_fwd. */
glm_status glm_ring_attention_bwd(const glm_ring *R, void *dq, int64_t ldq, void *dk, int64_t ldk, void *dv, int64_t ldv,
                                  const void *dout, int64_t ldo, const void *out, const float *lse, const void *q,
                                  const void *k, const void *v);

/* Whether the backend computes the ring's block attention (be->supports, GLM_FEATURE_RING_ATTENTION):
 * GLM_OK, or GLM_ERR_UNSUPPORTED naming the backend. */
glm_status glm_ring_supported(const glm_backend *be);

#endif
