/* lora/model/step_internal.h: what the files of the model's step share and nothing outside
 * lora/model/ may call (the public interface is lora/model/model.h).
 *
 * The step, one job a file:
 *   layer.c       a decoder layer's forward (linear + LoRA, the attention half, the MLP), over a
 *                 glm_layer_ctx: no training workspace needed
 *   layer_bwd.c   a decoder layer's backward to its input and the LoRA weights (same context)
 *   step_ws.c     the training workspace (struct glm_ws): the plan table's buffers, their binding
 *                 (layer inputs, kept activations, LoRA copies, batches, ring), ensure/prepare/free
 *   step_weights.c  the frozen base's working copies: --shard-base gathers, the 4-bit layer
 *                 dequantized, the fp8 layer transposed
 *   step_batch.c  the batch: checks, labels, upload and prefetch
 *   head.c        the loss head over chunks of logits
 *   step.c        the driver: glm_model_step, glm_model_logits
 *   model_plan.c  the step's memory plan (budget, scratch shape, glm_model_plan) */
#ifndef GLM_LORA_STEP_INTERNAL_H
#define GLM_LORA_STEP_INTERNAL_H

#include "lora/model/head.h"
#include "lora/model/model.h"
#include "lora/model/ring_attention.h"

/* The sizes of m's training step (B rows of T tokens, loss chunks of loss_chunk rows) that decide
 * the backend's scratch: glm_scratch_shape_for with the model's context-parallel group, world
 * and base format (fp8). Overwrites *s. */
void glm_model_scratch_shape(const glm_model *m, int B, int T, int backward, int64_t loss_chunk, glm_scratch_shape *s);

/* ============================================================================ the layer */

/* Where one layer's activations live while it runs (all act dtype but the f32 rstd and lse;
 * N = B T tokens of the call, Dqkv = (H + 2 Hkv) Dh):
 *   pol GLM_CKPT_NONE (keep): every pointer set: what the backward reads, nothing recomputed
 *   pol GLM_CKPT_SELECTIVE: qkv, o, lse, x_mid kept; the MLP's inputs recomputed in the backward
 *   pol GLM_CKPT_FULL: qkv, o, lse are the caller's working buffers, x_mid, xn1.. NULL; the
 *       backward recomputes the attention half (inference: always this) */
typedef struct glm_layer_acts {
    glm_ckpt_mode pol;
    void *qkv;        /* [N, Dqkv] q | k | v after RoPE */
    void *o;          /* [N, H Dh] attention output */
    float *lse;       /* [N H] f32 attention's log-sum-exp, as be->attention_fwd writes it */
    void *x_mid;      /* [N, C] the residual after attention, or NULL (FULL: built in the layer's output) */
    void *xn1, *xn2;  /* keep: [N, C] the two norms' outputs */
    void *h, *a;      /* keep: [N, 2F] gate | up, [N, F] SwiGLU output */
    float *rstd1, *rstd2; /* keep: [N] */
    void *lora_u;     /* keep with adapters, training only: [N, sites r] u = x A^T of every adapter of the layer
                         (per linear a block [N, n r], linears in order), or NULL: u computed again */
} glm_layer_acts;

/* The backward's working buffers (act dtype but attn_d). */
typedef struct glm_layer_bwd_bufs {
    void *dx;         /* [N, C] the residual stream's gradient: d loss / d x_out in, d loss / d x_in out */
    void *xmid;       /* [N, max(C, H Dh)] a FULL layer's recomputed x_mid, then d_o */
    void *dqkv;       /* [N, Dqkv] (dout_over_out: [N, max(Dqkv, C)], holding the recomputed x_mid first) */
    void *dxn_c;      /* [chunk, C] a norm output's gradient */
    void *da_c;       /* [chunk, F] */
    void *dh_c;       /* [chunk, 2F] (dout_over_out: at least [chunk, H Dh]) */
    void *attn_d;     /* dout_over_out: [B, H, T] acc, D = rowsum(d_o * o); else unused */
    int dout_over_out;/* lora/model/plan.h: d_o over o chunk by chunk, x_mid recomputed into dqkv */
} glm_layer_bwd_bufs;

/* Everything a decoder layer needs to run, and nothing of the training workspace: the training
 * driver (step.c) fills it from struct glm_ws; any other driver fills it from its own buffers.
 *
 * What a decode driver (generation with a KV cache) must provide:
 *   - be, m (config, RoPE table), lora (NULL: base only) with lora_A/lora_B as the GEMMs read them
 *     (act dtype; on the CPU the fp32 weights themselves) and lora_stacked 0 unless the copies of
 *     a linear's adapters lie back to back as step_ws.c lays them out; p_drop 0 (no dropout);
 *   - per layer lw (whole, dense or fp8, as glm_base_matmul takes them: gather / dequantize first
 *     for a sharded or 4-bit base) and acts with pol GLM_CKPT_FULL over its working qkv, o, lse;
 *   - B, T, N and pos/doc of the tokens of this call (device int32 [N]; positions continue the
 *     cached ones: a sequence's new token at position = its length so far);
 *   - the chunk scratch: xn_c, rstd_c, h_c, a_c for `chunk` tokens, lora_u [chunk, sites r];
 *   - attn: the attention over its cache. The layer's own attention sees only the tokens of the
 *     call (a prefill); attn gets q|k|v after RoPE and must append k|v to the layer's cache and
 *     write o and lse of the new queries over everything cached. ring stays NULL; bwd unused.
 * The training driver sets ring (context parallel), dropout, kept activations and bwd. */
typedef struct glm_layer_ctx {
    const glm_backend *be;
    const glm_model *m;           /* cfg, inv_freq; its weights are not read (lw is) */
    glm_lora *lora;               /* NULL: no adapter */
    void *const *lora_A;          /* per site: lora_A [r, in] as the GEMMs read it (act dtype) */
    void *const *lora_B;          /* per site: lora_B [out, r] */
    int lora_stacked;             /* 1: a (layer, linear)'s lora_A copies lie back to back ([n r, in]): one GEMM for their u */
    const glm_layer_weights *lw;  /* the current layer's weights (set per layer) */
    const glm_layer_acts *acts;   /* the current layer's activations (set per layer) */
    int B, T;                     /* rows and tokens per row held here (context parallel: the local 2S) */
    int64_t N;                    /* B T */
    const int32_t *pos, *doc;     /* device int32 [N]: positions (RoPE) and document ids (attention's mask) */
    glm_ring *ring;               /* context parallel: the ring over the group (ring_attention.h); NULL: off */
    /* LoRA dropout: the mask of feature d of the token of key k is glm_dropout_u01(seed, layer * 8 +
       module, k * D + d) (glm_model_step); p_drop 0: none */
    float p_drop;
    uint64_t seed;
    int T_row;                    /* the rows' whole length (the keys index tokens of the whole rows) */
    const uint64_t *drop_key;     /* [B * T_row] host, or NULL: the key of row b token t is b * T_row + t */
    int64_t chunk;                /* tokens per chunk of the token-local ops */
    void *xn_c;                   /* [chunk, C] */
    float *rstd_c;                /* [chunk] */
    void *h_c, *a_c;              /* [chunk, 2F], [chunk, F] */
    void *lora_u, *lora_du, *lora_drop; /* [chunk, sites r], [chunk, r], [chunk, widest LoRA input] (drop: p_drop > 0) */
    const glm_layer_bwd_bufs *bwd;/* the backward's buffers (glm_layer_bwd only) */
    /* attention override (NULL: be->attention_fwd over the call's documents, or the ring): o [N, H Dh]
       (row stride ldo) and lse from q|k|v [N, Dqkv] (row stride ldqkv, after RoPE), OVERWRITTEN */
    glm_status (*attn)(void *user, int layer, const void *qkv, int64_t ldqkv, void *o, int64_t ldo, float *lse);
    void *attn_user;
    size_t esz;                   /* bytes of an act element */
} glm_layer_ctx;

/* One decoder layer l (docs/design.md §3): x_out [N, C] = x_in + attn(...) + mlp(...), act dtype,
 * OVERWRITTEN (x_out != x_in); activations into cx->acts as its policy keeps them (a FULL layer
 * builds x_mid in x_out, which the MLP then accumulates onto chunk by chunk). Linear layers: y =
 * x W^T (+ bias) + scaling dropout(x) A^T B^T. Errors: the backend's (and cx->attn's). */
glm_status glm_layer_fwd(const glm_layer_ctx *cx, int l, const void *x_in, void *x_out);

/* Backward of layer l: on entry cx->bwd->dx = d loss / d x_out [N, C]; on return d loss / d x_in
 * (OVERWRITTEN); ACCUMULATES the layer's LoRA gradients (fp32 g) and recomputes what cx->acts does
 * not keep from x_in [N, C]. Errors: GLM_ERR_ARG with cx->attn set (no backward through a cache),
 * the backend's. */
glm_status glm_layer_bwd(const glm_layer_ctx *cx, int l, const void *x_in);

/* For layer.c and layer_bwd.c: */

/* The attention half of layer l: per chunk xn1 = rmsnorm(x_in) and qkv, RoPE, attention (o, lse),
 * then per chunk x_mid [N, C] = x_in + dense(o) (OVERWRITTEN; may be the layer's output). */
glm_status glm_layer_attn_fwd(const glm_layer_ctx *cx, int l, const void *x_in, void *x_mid);

/* The MLP's inputs for tokens [n0, n0 + rows): xn2 = rmsnorm(x_mid), rstd2, h = dense_h_to_4h(xn2),
 * a = silu(gate) * up, into the kept buffers (keep) or the chunk buffers; the pointers returned. */
glm_status glm_layer_mlp_in(const glm_layer_ctx *cx, int l, const void *x_mid, int64_t n0, int64_t rows, void **xn2,
                            float **rstd2, void **h, void **a);

/* Inverted dropout y = x * mask / (1 - p) over rows [row0, row0 + rows) of the call's tokens, D
 * features (row strides ldy, ldx; y may be x), masks keyed as glm_layer_ctx says; context parallel:
 * by the tokens' places in the whole rows. Errors: the backend's. */
glm_status glm_layer_drop_rows(const glm_layer_ctx *cx, void *y, int64_t ldy, const void *x, int64_t ldx, int64_t rows,
                               int64_t D, int64_t row0, uint64_t stream);

/* The input of site s's LoRA branch for rows [row0, row0 + rows): x [rows, in] itself, or its
 * dropped-out copy in cx->lora_drop. */
glm_status glm_layer_lora_input(const glm_layer_ctx *cx, const glm_lora_site *s, const void *x, int64_t in, int64_t rows,
                                int64_t row0, const void **xin);

/* The kept u of the adapters on (layer, lin), from cx->acts->lora_u: the block [N, n r] (n
 * adapters on lin, side by side in site order), *ld = n r; NULL when the layer keeps none. */
void *glm_layer_kept_u(const glm_layer_ctx *cx, int layer, glm_linear lin, int64_t *ld);

/* The frozen matrix of linear lin in lw. */
const glm_weight *glm_layer_base_weight(const glm_layer_weights *lw, glm_linear lin);

/* for (n0, rows) over the chunks of mc tokens of N */
#define GLM_FOR_CHUNKS(n0, rows, N, mc) \
    for (int64_t n0 = 0, rows = (N) < (mc) ? (N) : (mc); n0 < (N); n0 += (mc), rows = (N) - n0 < (mc) ? (N) - n0 : (mc))

/* ============================================================================ the training workspace */

/* A batch held on the device (non-context-parallel steps): what glm_model_prefetch or the step
 * uploaded, and the host copy it came from (compared with a step's batch to find it). */
typedef struct glm_batch_set {
    uint32_t *ids;           /* device [N] */
    int32_t *pos, *doc, *labels;
    char *host;              /* be->host_alloc: ids, pos, doc, labels (4 N bytes each), targets (N bytes) */
    int B, T;                /* the batch held (B = 0: none) */
    int64_t n_labels;
    uint64_t ticket;         /* its upload (be->upload_async) */
    int pending;             /* uploaded by glm_model_prefetch during a step: the copy may be in flight */
    int prefetched;          /* filled by glm_model_prefetch and not used yet */
} glm_batch_set;

/* The frozen base's working copies (the plan's GLM_BUF_WGATHER*, GLM_BUF_WDENSE, GLM_BUF_WTRANS;
 * step_weights.c). A gather slot's matrices are all-gathered from every rank's shard
 * (be->all_gather_start), in the stored format, and waited for (be->comm_wait) just before use;
 * CUDA orders the gather after the compute queued before it, so refilling the slot of layer l-1
 * while layer l computes is safe. A 4-bit layer is dequantized (be->weight_dequantize) into the
 * dense slot just before it runs; an fp8 layer's codes are transposed (be->fp8_transpose) into the
 * trans slot just before its backward. */
typedef struct glm_wslots {
    int sharded, packed;
    void *slot[2];              /* gather: two layers, each the four matrices' buffers at offsets */
    size_t off[4][3];           /* byte offset in a slot of matrix i's data, absmax, absmax2 */
    size_t shard_b[4][3];       /* bytes of matrix i's buffers in one shard */
    int layer[2];               /* the layer a gather slot holds (or is being filled with); -1: none */
    int req[2][4][3];           /* outstanding gathers of a slot (-1: none) */
    glm_layer_weights view[2];  /* gathered layer weights (the stored format, whole) */
    void *big;                  /* [V, C]: the embedding or the output layer */
    int big_what, big_req;      /* 0 none, 1 embedding, 2 output layer; its outstanding gather */
    size_t big_shard_b;
    glm_weight big_view;
    void *dense;                /* 4-bit base: one layer's matrices in act dtype */
    size_t dense_off[4];
    int dense_layer;            /* the layer the dense slot holds; -1: none */
    glm_layer_weights dview;    /* its view */
    void *trans;                /* fp8 base, backward: one layer's codes transposed */
    size_t trans_off[4];
    int trans_layer;            /* the layer the trans slot holds; -1: none */
    glm_layer_weights tview;    /* its view: the layer's weights with data_t set */
} glm_wslots;

/* The training step's buffers, allocated once per batch shape from the plan's table (glm_plan.buf:
 * the plan decides every size; step_ws.c allocates and binds them):
 *   layer inputs        the residual stream at each layer boundary [N, C] (always kept): on the
 *                       device, or for the plan's first n_host layers in host memory (xh,
 *                       be->host_alloc: page-locked on CUDA) through two device slots, input l in
 *                       slot l % 2 (the last layer's output too, when any input is offloaded): the
 *                       forward downloads each offloaded input while the next layer computes, the
 *                       backward uploads layer l-1's input while layer l's backward computes
 *                       (be->upload_async / download_async, waited for by tickets just before the
 *                       slot is overwritten or read)
 *   kept, per layer     keep: xn1, qkv (after RoPE), o, x_mid, xn2, h, a, rstd1, rstd2, lse;
 *                       selective: qkv, o, x_mid, lse; full: nothing (acts[l])
 *   row-spanning        attention's operands for layers that do not keep them (qkv, o, lse), the
 *                       recomputed x_mid (whose buffer then holds d_o), dx and d_qkv [N, .]:
 *                       attention is the only op whose inputs span the row
 *   chunks              every token-local op (norms, the four projections with their LoRA, SwiGLU,
 *                       residual adds, their gradients) runs over chunks of mlp_chunk tokens: a
 *                       norm's output, rstd, the MLP's h and a and their gradients, d_xn, LoRA's u,
 *                       du and dropped-out input exist for one chunk; the loss head's chunk
 *   batches             two sets of ids/pos/doc/labels [N] with page-locked host copies: the step
 *                       uses the set that glm_model_prefetch filled during the previous step's
 *                       backward (its upload overlapped that backward), or fills one itself
 *   LoRA copies         act-dtype copies of lora_A / lora_B (bf16 on CUDA), refreshed from the
 *                       fp32 weights at every step, so every LoRA GEMM has act-dtype operands;
 *                       on the CPU (act = f32) the weights themselves.
 *   weight slots        a sharded base's gather slots (two layers' matrices in their stored
 *                       format, one [V, C]); a 4-bit base's dequantized layer (act dtype); an
 *                       fp8 base's transposed layer (its codes [cols, rows], for the backward) */
struct glm_ws {
    const glm_backend *be;
    glm_plan plan;
    glm_ckpt_mode mode;      /* requested */
    const glm_lora *lora;    /* the adapter the LoRA copies belong to (NULL: none) */
    int B_cap, T, backward;  /* T: the rows' length; with context parallel each row holds TL = 2S of them here */
    int TL, cp;
    double max_bytes;
    int64_t mlp_over, loss_over;
    int offload_over;        /* m->opt.offload and m->opt.offload_layers when the workspace was made */
    int plan_offload_layers;
    size_t esz;
    void **buf[GLM_BUF_COUNT]; /* plan.buf[id].count buffers each */
    void **xs;               /* [L + 1]: layer input l on the device (its own buffer, or its slot) */
    void **xh;               /* [n_host]: host copies of the offloaded layer inputs */
    int n_xh;
    glm_layer_acts *acts;    /* [L]: where each layer's activations go (training workspaces; FULL layers: work) */
    glm_layer_acts work;     /* a FULL layer's: the row-spanning working buffers */
    glm_layer_bwd_bufs bwd;  /* the backward's working buffers */
    void **shA, **shB;       /* per site: act-dtype lora_A [r, in], lora_B [out, r] */
    int shadows;             /* 1: shA/shB are copies to refresh; 0: the fp32 weights */
    uint32_t *ids;           /* the step's batch: bset[cur]'s (context parallel: its own) */
    int32_t *pos, *doc, *labels;
    int32_t *lab_host;       /* the labels on the host */
    glm_batch_set bset[2];   /* non-context-parallel: the batches held, the step's in bset[cur] */
    int cur;
    /* context parallel: the ring's buffers, the rows' document ids (device [B, Tp] and host), and
     * a host scratch for the local tokens' ids and positions */
    glm_ring ring;
    int32_t *gdoc, *gdoc_host, *loc_host;
    glm_wslots W;
    float *head_logp, *head_w; /* a general loss head's [N] fp32 log-probabilities and weights (glm_ws_head_bufs) */
    void **allocs;
    int n_allocs, cap_allocs;
};

/* The first buffer of plan buffer `id` (NULL when the plan has none). */
#define GLM_WB(w, id) ((w)->buf[id] ? (w)->buf[id][0] : NULL)

/* Frees the workspace (NULL: nothing) and everything it allocated. */
void glm_ws_free(struct glm_ws *w);

/* Context parallel needs the group's communicator of m->opt.cp ranks. Errors: GLM_ERR_ARG. */
glm_status glm_ws_check_cp(const glm_model *m);

/* m->ws for a call of B rows of T tokens: the current workspace when it fits (shape, mode,
 * adapter, dropout buffer when dropout != 0, the model's plan settings), else a new one from a
 * new plan (the old one freed). Errors: GLM_ERR_NOMEM with the plan and hints, backend errors. */
glm_status glm_ws_ensure(glm_model *m, glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, int dropout);

/* The general loss head's device buffers, fp32 [plan.N] each: the targets' log-probabilities and
 * the per-token weights, allocated at the first call (outside the plan's table: 8 bytes a token).
 * Errors: GLM_ERR_NOMEM. */
glm_status glm_ws_head_bufs(struct glm_ws *w, float **logp, float **weights);

/* The act-dtype copies of lora's weights from its fp32 weights (once per step; none on a
 * backend whose act dtype is f32). Errors: the backend's. */
glm_status glm_ws_refresh_lora(struct glm_ws *w, glm_lora *lora);

/* ============================================================================ weight slots */

/* The weight slots' layout in w's plan buffers (lora/model/plan.c sizes them with the same
 * glm_weight_slot_bytes); every slot empty. */
void glm_wslots_layout(const glm_model *m, struct glm_ws *w);

/* Starts gathering layer l's four matrices into its slot (l % 2) unless the slot holds it
 * already; nothing when the base is not sharded. Errors: communication errors. */
glm_status glm_wslots_gather_start(glm_model *m, struct glm_ws *w, int l);

/* Layer l's weights for its GEMMs: dense and whole (gathered, then dequantized into the dense
 * slot for a 4-bit base), or fp8; backward != 0: for the layer's backward (an fp8 layer's codes
 * transposed into the trans slot too). *out is valid until the slot is reused. Errors: the
 * backend's, communication errors. */
glm_status glm_wslots_layer(glm_model *m, struct glm_ws *w, int l, int backward, const glm_layer_weights **out);

/* Starts gathering the embedding (what 1) or the output layer (what 2) into the [V, C] slot. */
glm_status glm_wslots_big_start(glm_model *m, struct glm_ws *w, int what);

/* The embedding (what 1) or the output layer (what 2), whole and dense (gathered and waited for
 * when the base is sharded). Errors: communication errors. */
glm_status glm_wslots_big(glm_model *m, struct glm_ws *w, int what, const glm_weight **out);

/* ============================================================================ the batch */

/* Puts the step's batch b on the device (w->ids, pos, doc, labels; labels on the host in
 * w->lab_host: label of position t = the target token t+1, or -1) and its label count in
 * *n_labels: the batch set holding it (filled by glm_model_prefetch, or the previous step's), else
 * a set filled now; the step's ops wait for its upload. Context parallel (cpl != NULL): this rank's
 * local tokens of the whole rows (lora/model/ring_attention.h), labels from the whole rows, and
 * every token's document id (w->gdoc) for the ring. Errors: GLM_ERR_ARG (a bad batch: id >= V, a
 * target at a document's first token, documents not contiguous), the backend's. */
glm_status glm_ws_upload_batch(glm_model *m, struct glm_ws *w, const glm_batch *b, const glm_cp_layout *cpl,
                               int64_t *n_labels);

/* ============================================================================ the loss head */

/* The SFT loss head over the final hidden state x_final [N, C] (act, on the device), in chunks of
 * the plan's loss_chunk tokens: xn = final_layernorm(x), logits = xn out_w^T [chunk, V], then
 * cross-entropy against w->labels: ADDS nothing, OVERWRITES *loss_sum = sum of -log softmax(logits)
 * [label] over the labelled positions and *n_targets their count; with backward, d(loss_sum *
 * loss_scale) / d x_final into w->bwd.dx (which the caller zeroed), chunk by chunk in one pass
 * (dlogits over the logits). logits_out (host f32 [N, V], or NULL): every chunk's logits
 * downloaded instead (no loss; *n_targets untouched). Chunks without labels are skipped.
 * Errors: the backend's. */
glm_status glm_head_sft(glm_model *m, struct glm_ws *w, const glm_weight *out_w, const void *x_final, int64_t N,
                        float loss_scale, int backward, float *logits_out, double *loss_sum, int64_t *n_targets);

/* The general loss head (lora/model/head.h) over x_final [N, C] of batch b (non-context-parallel:
 * N = B T, w->labels / w->lab_host its labels): phase 1, the labels' log-probabilities (chunks as
 * glm_head_sft's, no gradient) downloaded into logp_out (host fp32 [N], OVERWRITTEN; NULL: a
 * scratch); *n_targets (may be NULL) OVERWRITTEN with the target positions. head NULL: *loss =
 * -sum of logp (glm_model_logp), nothing else. Else phase 2, head->weights (*loss its loss), and
 * with backward phase 3: per chunk cross-entropy with the weights as dlogits, d(loss_scale Loss) /
 * d x_final into w->bwd.dx (zeroed by the caller). Errors: GLM_ERR_NOMEM, the backend's, the head's. */
glm_status glm_head_general(glm_model *m, struct glm_ws *w, const glm_weight *out_w, const void *x_final, const glm_batch *b,
                            const glm_loss_head *head, float loss_scale, int backward, float *logp_out, double *loss,
                            int64_t *n_targets);

#endif
