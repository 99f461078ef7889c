/* lora/model/plan.h: the memory planner of a training step (what the model keeps between its forward
 * and backward passes, and in what pieces it works), a pure function of the model's shape, the
 * LoRA's shape, the micro-batch and a memory budget, so `train --dry-run` can print it without
 * loading a weight.
 *
 * Per layer, one of three activation policies (docs/design.md §4 "gradient checkpointing"):
 *   keep       every activation of the layer stays until its backward (no recomputation);
 *   selective  the attention results stay (q/k/v after RoPE, the attention output and its
 *              log-sum-exp, the residual after attention); the norms and the MLP (its gate/up
 *              GEMM and SwiGLU) are recomputed in the backward: attention, the part whose cost
 *              grows with T, never runs twice;
 *   full       only the layer's input stays (the layer-boundary checkpoint); the backward
 *              recomputes the layer's forward (but not its last GEMM, whose output is the next
 *              checkpoint).
 * The layer inputs (L + 1 rows of [N, C]) are always kept. The MLP runs over chunks of
 * mlp_chunk tokens (it is token-wise), so its [N, 2F] intermediates exist for one chunk at a
 * time unless a layer keeps them; the loss head runs over loss_chunk tokens (the [n, V] logits
 * never exist for all tokens at once).
 *
 * GLM_CKPT_AUTO picks the fastest mix that fits: as many "keep" layers as fit, then "selective",
 * then "full", choosing among the counts by a FLOP-based cost of the recomputation. */
#ifndef GLM_LORA_PLAN_H
#define GLM_LORA_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "common/status.h"
#include "kernels/weight.h"
#include "lora/model/config.h"

typedef enum { GLM_CKPT_NONE = 0, GLM_CKPT_FULL = 1, GLM_CKPT_SELECTIVE = 2, GLM_CKPT_AUTO = 3 } glm_ckpt_mode;

/* "none", "full", "selective", "auto". */
const char *glm_ckpt_name(glm_ckpt_mode m);
/* Parses none|selective|full|auto, and true (= full) / false (= none) as transformers' flag.
 * Errors: GLM_ERR_ARG naming the valid values. */
glm_status glm_ckpt_parse(const char *s, glm_ckpt_mode *out);

/* The LoRA adapter's shape, as far as memory is concerned. */
typedef struct glm_lora_info {
    int r;                 /* rank (0: no LoRA) */
    int64_t params;        /* trainable parameters (lora_A + lora_B) */
    int max_sites_lin;     /* most adapters on one base linear of a layer (hf q/k/v: 3) */
    int max_sites_layer;   /* most adapters in one layer (all linears of the chatglm layout: 4) */
    int64_t max_in_attn;   /* widest input of an adapter on query_key_value / dense */
    int64_t max_in_mlp;    /* widest input of an adapter on dense_h_to_4h / dense_4h_to_h */
    int dropout;           /* lora_dropout > 0 (needs a dropped-out copy of the input) */
    int n_sites;           /* adapted (layer, module) pairs */
} glm_lora_info;

typedef struct glm_plan_opts {
    glm_ckpt_mode mode;    /* requested policy */
    double budget;         /* bytes the whole training state may take on the device */
    int64_t mlp_chunk;     /* tokens per chunk of every token-local op (norms, projections, MLP); 0: the planner's */
    int64_t loss_chunk;    /* 0: chosen by the planner */
    int act_bytes;         /* activation element size (2: bf16 on CUDA, 4: CPU) */
    int weight_bytes;      /* dense base weight element size (norms, bias, embedding, output layer, dense linears) */
    int lora_shadow;       /* the backend keeps act-dtype copies of the LoRA weights */
    int optimizer;         /* count AdamW's two moments (training) */
    int shard_world;       /* > 1: --shard-base over this many ranks (the model's shard_world); 0: whole base */
    int cp;                /* > 1: context parallel over this many ranks (lora/model/ring_attention.h): each holds
                              2 chunks of every row and the ring's buffers; 0 or 1: off */
    int acc_bytes;         /* the ring's accumulator element size (be->acc_dtype: 8 on the CPU, 4 on CUDA); 0: 4 */
    int offload;           /* 1: every layer input in host memory (offload_layers > 0: the first that many);
                              0: as few as host_budget allows where that makes a training step fit */
    double host_budget;    /* > 0 (with offload 0): when a training step does not fit the device budget, plan
                              the fewest layer inputs in host memory that make it fit, within this many bytes;
                              0: never */
    glm_wformat base_format; /* the linear matrices' format: a 4-bit one (nf4, fp4) or fp8, else dense of weight_bytes */
    int double_quant;      /* 4-bit: absmax double-quantized */
    int offload_layers;    /* with offload 1: the layer inputs 0 .. offload_layers-1 in host memory; 0: all */
    double scratch;        /* bytes of scratch the backend grows for such a step (its own query); < 0: none;
                              0: the planner's estimate for a CUDA backend (act_bytes 2), none on the CPU */
    double attn_ws;        /* of that, the fused attention library's workspace (cuDNN's), which the plan may
                              leave out (glmtune's own kernels need none); 0 with scratch 0: the estimate */
    int no_attn_lib;       /* 1: no fused attention library runs (GLMTUNE_ATTENTION=glmtune, planned without a GPU):
                              the estimate has no workspace for one */
} glm_plan_opts;

/* The step's buffers, each sized by the plan (glm_plan.buf) and allocated from it by the model's
 * workspace (lora/model/step_ws.c): the plan is the one place where a buffer's size is decided. */
typedef enum {
    /* layer inputs (the checkpoints; [N, C] act each) */
    GLM_BUF_X,          /* on the device: count = layer inputs kept there */
    GLM_BUF_XSLOT,      /* the two device slots of the offloaded ones */
    /* activations kept between forward and backward, per keep / selective layer */
    GLM_BUF_KEEP_QKV, GLM_BUF_KEEP_O, GLM_BUF_KEEP_XMID, GLM_BUF_KEEP_LSE, /* keep and selective layers */
    GLM_BUF_KEEP_XN1, GLM_BUF_KEEP_XN2, GLM_BUF_KEEP_H, GLM_BUF_KEEP_A, GLM_BUF_KEEP_RSTD1, GLM_BUF_KEEP_RSTD2, /* keep */
    GLM_BUF_KEEP_LORA_U, /* keep: [N, r] per adapter of the layer, u = x A^T (the backward's dB reads it) */
    /* working buffers that span the whole row: attention's operands and the residual gradient */
    GLM_BUF_QKV,        /* [N, (H+2Hkv)Dh] q, k, v after RoPE (layers that do not keep them) */
    GLM_BUF_O,          /* [N, H Dh] attention output */
    GLM_BUF_LSE,        /* [N, H] f32 */
    GLM_BUF_XMID,       /* [N, max(C, H Dh)]: the recomputed residual after attention, then d_o (not with
                           dout_over_out) */
    GLM_BUF_DX,         /* [N, C] the residual stream's gradient */
    GLM_BUF_DQKV,       /* [N, (H+2Hkv)Dh] attention's input gradients (with dout_over_out [N, max((H+2Hkv)Dh, C)]:
                           first the recomputed residual after attention) */
    GLM_BUF_ATTN_D,     /* [B, H, T] acc: D = rowsum(d_o * o) per head (with dout_over_out) */
    /* working buffers of one chunk of mlp_chunk tokens */
    GLM_BUF_XN_C,       /* [mc, C] a norm's output (xn1 or xn2) */
    GLM_BUF_RSTD_C,     /* [mc] f32 */
    GLM_BUF_H_C,        /* [mc, 2F] gate | up */
    GLM_BUF_A_C,        /* [mc, F] SwiGLU output */
    GLM_BUF_DA_C,       /* [mc, F] */
    GLM_BUF_DH_C,       /* [mc, 2F] (with dout_over_out at least [mc, H Dh]: a chunk of d_o on its way) */
    GLM_BUF_DXN_C,      /* [mc, C] a norm output's gradient */
    GLM_BUF_LORA_U,     /* [mc, sites r] */
    GLM_BUF_LORA_DU,    /* [mc, r] */
    GLM_BUF_LORA_DROP,  /* [mc, widest adapter input] the dropped-out input */
    GLM_BUF_LORA_COPIES,/* act-dtype copies of lora_A / lora_B */
    /* the loss head's chunk of loss_chunk tokens */
    GLM_BUF_LOSS_XN, GLM_BUF_LOSS_RSTD, GLM_BUF_LOSS_LOGITS, GLM_BUF_LOSS_DXN,
    /* the batch: ids, pos, doc, labels [N] (two sets: the next batch's upload overlaps this step) */
    GLM_BUF_BATCH,
    /* context parallel's ring (lora/model/ring_attention.h) */
    GLM_BUF_RING_KV, GLM_BUF_RING_DKV, GLM_BUF_RING_ACC, GLM_BUF_RING_LSE, GLM_BUF_RING_GDOC,
    /* the frozen base's working copies: gathered shards (--shard-base) and dequantized 4-bit layers */
    GLM_BUF_WGATHER,    /* count 2: two layers' matrices in the stored format, gathered */
    GLM_BUF_WGATHER_BIG,/* the embedding or output layer, gathered */
    GLM_BUF_WDENSE,     /* one layer's four matrices dequantized to act dtype (4-bit base) */
    GLM_BUF_WTRANS,     /* one layer's four fp8 matrices transposed (their input gradients' GEMMs; fp8 base) */
    /* scratch the backend grows inside its ops (attention, cuDNN's workspace, reductions, cuBLASLt) */
    GLM_BUF_BACKEND,
    GLM_BUF_COUNT
} glm_buf_id;

/* What a buffer is counted as in the plan's summary. */
typedef enum { GLM_BUFCAT_INPUTS, GLM_BUFCAT_KEPT, GLM_BUFCAT_WORKING, GLM_BUFCAT_LOSS, GLM_BUFCAT_RING,
               GLM_BUFCAT_WEIGHTS } glm_buf_cat;

typedef struct glm_plan_buf {
    double bytes;      /* one buffer, rounded up to 256 bytes (the workspace's alignment) */
    int count;         /* how many (0: not allocated) */
} glm_plan_buf;

/* The display name and category of buffer id. */
const char *glm_buf_name(glm_buf_id id);
glm_buf_cat glm_buf_category(glm_buf_id id);

typedef struct glm_plan {
    int B, T;              /* rows per micro-batch and the rows' length */
    int64_t N;             /* tokens on this rank: B * T_local */
    int cp;                /* > 1: context parallel over cp ranks; 0: off */
    int64_t T_local;       /* tokens of each row on this rank: T, or with context parallel 2 chunks of T_padded / 2cp */
    int64_t T_padded;      /* the row length the chunks cover: T rounded up to a multiple of 2cp (T without) */
    int backward;
    glm_ckpt_mode requested;
    int n_keep, n_selective, n_full;   /* layers [0, n_keep) keep, the next n_selective selective, the rest full */
    int64_t mlp_chunk, loss_chunk;
    glm_plan_buf buf[GLM_BUF_COUNT];   /* every buffer of the step (the workspace allocates exactly these) */
    /* predicted bytes on the device, summed from buf and the model's weights */
    double weights, lora, checkpoints, saved, working, loss_head, fixed, total, budget;
    int shard_world;                    /* > 1: weights is this rank's shard of the base ... */
    double gathered;                    /* ... and gathered the slots the layers are all-gathered into */
    double dequant;                     /* a 4-bit base: the slot one layer is dequantized into; fp8: the slot one
                                           layer's codes are transposed into for the backward */
    double scratch;                     /* the backend's scratch (in working) */
    int attn_lean;                      /* 1: no room for cuDNN's attention workspace: glmtune's kernels run */
    int dout_over_out;                  /* 1: the backward writes attention's output gradient d_o over its output o,
                                           chunk by chunk after attention_delta took D = rowsum(d_o * o) from both,
                                           and a full layer's recomputed residual after attention into the d_qkv
                                           buffer: no [N, C] x_mid / d_o buffer (8 KB a token at GLM-4-9B's shape).
                                           Where the attention needs no library workspace (the CPU; CUDA with
                                           glmtune's kernels: cuDNN's fused backward reads o itself), without
                                           context parallelism */
    double attn_ws;                     /* the workspace the attention library may take (0 with attn_lean) */
    double recompute_gflop;             /* extra forward work per step from recomputation */
    double ring;                        /* context parallel: the ring's K|V blocks, dK|dV and f32 accumulators, document ids */
    int offload;                        /* n_host > 0 */
    int n_host;                         /* the layer inputs 0 .. n_host-1 live in host memory (page-locked) */
    double host;                        /* their bytes; checkpoints then counts the device's share and its 2 slots */
    double host_budget;                 /* the host bytes the offload was held against (glm_plan_opts.host_budget) */
    int host_short_layers;              /* a plan that does not fit: offloading this many layer inputs would make it fit
                                           the device, but their host_short bytes are more than host_budget; 0: no such */
    double host_short;
    double all_offloaded_total;         /* a plan that does not fit even with every layer input offloaded: its device
                                           bytes then (0: not tried or it would fit) */
    glm_wformat base_format;
    int fits;
} glm_plan;

/* Whether layer input l (0 .. L; L is the last layer's output) lives in one of the offload slots
 * under plan p: the first n_host inputs, and the last layer's output when any is offloaded. */
int glm_plan_x_in_slot(const glm_plan *p, int L, int l);


/* Layer l's policy under the plan. */
glm_ckpt_mode glm_plan_layer(const glm_plan *p, int l);

/* Makes the plan for B rows of T tokens (backward: training step, else forward only; with
 * opts->cp > 1 this rank's share of them, see glm_plan.T_local).
 * Requested NONE / SELECTIVE / FULL apply to every layer (fits = 0 when it does not fit the
 * budget); AUTO chooses per layer. Chunks: opts' values when given, else the largest that leave
 * the layers room (mlp_chunk down to 512 tokens, loss_chunk down to 64). Layer inputs in host
 * memory: always with opts->offload, else (host_budget > 0) when that is what makes a training
 * step fit. Never fails: a plan that does not fit has fits = 0 and its predicted total. */
void glm_plan_make(const glm_config *c, const glm_lora_info *li, int B, int T, int backward, const glm_plan_opts *opts,
                   glm_plan *out);
/* The machine's physical memory in bytes (sysconf; the environment variable
 * GLMTUNE_HOST_MEMORY_GIB overrides it, to plan for another machine), 0 when unknown: what the
 * offload plans are held against (glm_plan_opts.host_budget). */
double glm_host_memory(void);
/* Whether glm_host_memory comes from a valid GLMTUNE_HOST_MEMORY_GIB. */
int glm_host_memory_from_env(void);
/* The ranks of this run on this machine, from the launcher's environment (glmtune --gpus, Open
 * MPI, MPICH, torchrun, Slurm); 1 when none says. */
int glm_local_ranks(void);
/* The host bytes one rank may offload to, shared by ranks_here ranks: what the machine has free
 * now (MemAvailable of /proc/meminfo; 3/4 of its memory where that is unknown) less
 * glm_host_margin(); planning for another machine (GLMTUNE_HOST_MEMORY_GIB), its memory less the
 * margin (the same rule on a machine with all of its memory free). */
double glm_host_budget(int ranks_here);
/* The machine's available memory (MemAvailable: common/meminfo.h's glm_mem_available, the CPU
 * backend's rule too) in bytes, and the margin kept free beside the
 * offloaded layer inputs: 4 GiB or 5% of the memory, whichever is more. */
double glm_host_available(void);
double glm_host_margin(void);

/* Makes the plan for rows of T tokens into *p (the caller's planner, with its own options). */
typedef void (*glm_plan_at_fn)(void *ctx, int T, glm_plan *p);
/* The longest row length T, a multiple of `step` (>= 1), at most max_T (and INT32_MAX), whose plan
 * at(ctx, T) fits (glm_plan.fits); 0 when even `step` tokens do not fit. *best (may be NULL)
 * receives the longest fitting plan, or with 0 the plan of `step` tokens (what even it takes). The
 * plans' totals grow with T, so a bisection over at most ~50 plans. The one longest-row search:
 * glm_plan_longest and lora/model/model_plan.h glm_plan_request_longest are it over their planners. */
int64_t glm_plan_bisect(glm_plan_at_fn at, void *ctx, int64_t step, int64_t max_T, glm_plan *best);

/* glm_plan_bisect over glm_plan_make with fixed options `opts` (rows B, backward). */
int64_t glm_plan_longest(const glm_config *c, const glm_lora_info *li, int B, int backward, const glm_plan_opts *opts,
                         int64_t step, int64_t max_T, glm_plan *best);

/* Bytes per token of one keep layer's and one selective layer's kept activations. */
/* The source tensors the query_key_value matrix of config c is stacked from when stored in format
 * f (kernels/weight.h "Segments"): for a 4-bit f and a layout whose checkpoint stores q, k and v
 * apart (hf: q_proj, k_proj, v_proj) the three, {3, {H Dh, Hkv Dh, Hkv Dh}}, each quantized on its
 * own as bitsandbytes quantizes them; otherwise none (n 0: one tensor, chatglm's fused
 * query_key_value quantized as one). The loader and the planner both take it from here. */
glm_wsegs glm_plan_qkv_segs(const glm_config *c, glm_wformat f);

double glm_plan_bytes_keep(const glm_config *c, int act_bytes);      /* one keep layer, per token */
double glm_plan_bytes_selective(const glm_config *c, int act_bytes); /* one selective layer, per token */

/* Prints the plan: the policy per layer range, chunks, predicted bytes by part and the total
 * against the budget (GiB), and with fits == 0 what to change. */
void glm_plan_print(const glm_plan *p, const glm_config *c, FILE *f);

#endif
