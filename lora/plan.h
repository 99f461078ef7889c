/* lora/plan.h: the memory planner of a training step (what the model keeps between its forward
 * and backward passes, and in what pieces it works), a pure function of the model's shape, the
 * LoRA's shape, the micro-batch and a memory budget, so `train --dry-run` can print it without
 * loading a weight.
 *
 * Per layer, one of three activation policies (DESIGN.md §4 "gradient checkpointing"):
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
#include "lora/config.h"

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
    int64_t max_in_attn;   /* widest input of an adapter on query_key_value / dense */
    int64_t max_in_mlp;    /* widest input of an adapter on dense_h_to_4h / dense_4h_to_h */
    int dropout;           /* lora_dropout > 0 (needs a dropped-out copy of the input) */
} glm_lora_info;

typedef struct glm_plan_opts {
    glm_ckpt_mode mode;    /* requested policy */
    double budget;         /* bytes the whole training state may take on the device */
    int64_t mlp_chunk;     /* 0: chosen by the planner */
    int64_t loss_chunk;    /* 0: chosen by the planner */
    int act_bytes;         /* activation element size (2: bf16 on CUDA, 4: CPU) */
    int weight_bytes;      /* base weight element size */
    int lora_shadow;       /* the backend keeps act-dtype copies of the LoRA weights */
    int optimizer;         /* count AdamW's two moments (training) */
    int shard_world;       /* > 1: --shard-base over this many ranks (the model's shard_world); 0: whole base */
    int cp;                /* > 1: context parallel over this many ranks (lora/ring_attention.h): each holds
                              2 chunks of every row and the ring's buffers; 0 or 1: off */
    int acc_bytes;         /* the ring's accumulator element size (be->acc_dtype: 8 on the CPU, 4 on CUDA); 0: 4 */
    int offload;           /* 1: the layer inputs (checkpoints) in host memory (lora/model_step.c copies them
                              out in the forward and back in the backward); 0: only as host_budget says */
    double host_budget;    /* > 0 (with offload 0): when a training step does not fit the device budget, plan
                              the offload instead if that fits and its host bytes are at most this; 0: never */
} glm_plan_opts;

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
    /* predicted bytes on the device */
    double weights, lora, checkpoints, saved, working, loss_head, fixed, total, budget;
    int shard_world;                    /* > 1: weights is this rank's shard of the base ... */
    double gathered;                    /* ... and gathered the slots the layers are all-gathered into */
    double recompute_gflop;             /* extra forward work per step from recomputation */
    double ring;                        /* context parallel: the ring's K|V blocks, dK|dV and f32 accumulators, document ids */
    int offload;                        /* the layer inputs in host memory: then checkpoints is ... */
    double host;                        /* ... the device's share (2 layers' inputs) and host the host bytes */
    int fits;
} glm_plan;

/* Elements of one shard when a tensor of n elements is split over `world` ranks (the last shard
 * zero-padded): ceil(n / world). */
static inline int64_t glm_shard_elems(int64_t n, int world) { return world > 1 ? (n + world - 1) / world : n; }

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
/* The host bytes one rank may offload to: 3/4 of glm_host_memory() shared by ranks_here ranks. */
double glm_host_budget(int ranks_here);

/* The longest row length T, a multiple of `step`, at most max_T, whose plan (rows B, backward)
 * under `opts` fits the budget; 0 when even `step` tokens do not fit. *best (may be NULL) receives
 * that plan. The plans' totals grow with T, so a bisection over at most ~50 plans. */
int64_t glm_plan_longest(const glm_config *c, const glm_lora_info *li, int B, int backward, const glm_plan_opts *opts,
                         int64_t step, int64_t max_T, glm_plan *best);

/* Byte counts per token (or per chunk token) of the plan's pieces, for the model's workspace. */
double glm_plan_bytes_keep(const glm_config *c, int act_bytes);      /* one keep layer, per token */
double glm_plan_bytes_selective(const glm_config *c, int act_bytes); /* one selective layer, per token */

/* Prints the plan: the policy per layer range, chunks, predicted bytes by part and the total
 * against the budget (GiB), and with fits == 0 what to change. */
void glm_plan_print(const glm_plan *p, const glm_config *c, FILE *f);

#endif
