/* lora/model/model_plan.h: the one entry from a training run's settings to its memory plan.
 *
 * A glm_plan_request names the step (the model's shape, the LoRA's, B rows of T tokens, the
 * checkpointing mode), the base's format, the model's options (the --max-gpu-memory cap, chunks,
 * offload, context parallel) and the device: a live backend, asked for its free memory, the
 * overhead it holds (be->mem_overhead) and the scratch the step's ops need (be->scratch_need), or,
 * without one (a dry run on a machine with no GPU), a description of the CPU or CUDA backend with
 * the numbers those queries answer there. glm_plan_request_make turns it into the planner's options
 * (lora/model/plan.h glm_plan_opts: the budget, byte sizes, the host budget for offloading, the
 * scratch) and the plan. The model's own plan (glm_model_plan), `train`'s check before loading,
 * `train --dry-run` and `bench` all plan through it, so a dry run plans what the run will. */
#ifndef GLM_LORA_MODEL_PLAN_H
#define GLM_LORA_MODEL_PLAN_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/backend.h"
#include "lora/model/config.h"
#include "lora/model/model.h"
#include "lora/model/plan.h"

/* The CUDA context and library workspaces (cuBLAS, cuDNN) a CUDA run holds beside its plan, in GiB,
 * as measured on an H200 with CUDA 13.0 (0.94 to 0.97 GiB, bench --max-seq-len): what a plan for a
 * described CUDA device takes off the cap, as a run takes off the overhead it measures. */
#define GLM_PLAN_CUDA_OVERHEAD_GIB 0.97

typedef struct glm_plan_request {
    const glm_config *cfg;      /* the model's shape */
    const glm_lora_info *lora;  /* the adapter's (lora/model/plan.h); NULL: none (then forward only) */
    int B, T;                   /* rows per micro-batch, tokens per row */
    int backward;               /* 1: a training step (with lora), 0: forward only */
    glm_ckpt_mode mode;         /* gradient checkpointing asked for */
    glm_base_format fmt;        /* the frozen linear matrices' format (lora/model/model.h) */
    glm_model_options opts;     /* the model's options: max_bytes (the cap), chunks, offload, optimizer, cp
                                   (cp_comm is not read) */
    int world;                  /* ranks of the run (its communication scratch); 0 or 1: one */
    int shard_world;            /* > 1: the base sharded over this many ranks (glm_shard_world); 0: whole */
    int local_ranks;            /* ranks of the run on this machine, sharing its host memory for offloading;
                                   0: glm_local_ranks() (the launcher's environment) */
    double host_budget;         /* > 0: host bytes per rank for offloading in place of this machine's (plan for
                                   unbounded host memory: 1e18); 0: glm_host_budget(local_ranks) */
    const glm_backend *be;      /* the live backend asked; NULL: the device described by describe_cuda */
    int describe_cuda;          /* with be NULL: 1 the CUDA backend (bf16 weights and activations, f32
                                   accumulators, act-dtype LoRA copies, layer inputs offloadable to host memory,
                                   GLM_PLAN_CUDA_OVERHEAD_GIB of overhead, the planner's scratch estimate, the
                                   attention GLMTUNE_ATTENTION asks for); 0 the CPU backend (f32, f64
                                   accumulators, no overhead, no offload); the free memory unknown: the budget is
                                   the cap's */
} glm_plan_request;

/* What a plan was made from, beside the plan. */
typedef struct glm_plan_basis {
    glm_plan_opts opts;         /* the planner's options (opts.budget, opts.host_budget, opts.base_format, ...) */
    double overhead;            /* bytes the process holds beside the plan that came off the cap (0 without a cap
                                   too: be->mem_overhead, or GLM_PLAN_CUDA_OVERHEAD_GIB described) */
    int cap_below_overhead;     /* the cap is not more than the overhead: nothing is left for the step (the budget
                                   is then 1 byte, so that nothing fits) */
} glm_plan_basis;

/* The plan for request r into *out, and (basis may be NULL) what it was made from.
 *   budget (bytes) = free + in use by glmtune - 1 GiB  (be->mem_info; 0 for a described device), and with
 *   a cap (opts.max_bytes > 0): min(that, cap - overhead), the cap alone when the first is <= 0; a cap
 *   not above the overhead: 1 byte.
 * The backend's scratch is be->scratch_need's answer for the step's shape (glm_scratch_shape_for with
 * r's cp, world, B, T, loss_chunk and fmt.fp8), asked before the memory (loading cuDNN adds to the
 * overhead); a backend that answers 0 or fails, or a described device, gets the planner's estimate.
 * The host budget for offloading applies with opts.offload 0 on a device other than the CPU.
 * Errors: GLM_ERR_ARG (no cfg, B or T < 1; a described CUDA device with an invalid GLMTUNE_ATTENTION,
 * naming it). With a live backend it fails only on those arguments. */
glm_status glm_plan_request_make(const glm_plan_request *r, glm_plan *out, glm_plan_basis *basis);

/* The longest row length, a multiple of `step` and at most max_T, whose plan under r (r->T ignored)
 * fits, each length planned through glm_plan_request_make (so the budget and the backend's scratch
 * are asked for that length); *T_out 0 when even `step` tokens do not fit. *best (may be NULL)
 * receives the longest fitting plan, or with *T_out 0 the plan of `step` tokens (what even it takes).
 * A bisection over at most ~50 plans (lora/model/plan.h glm_plan_bisect). Errors: as
 * glm_plan_request_make. */
glm_status glm_plan_request_longest(const glm_plan_request *r, int64_t step, int64_t max_T, int64_t *T_out,
                                    glm_plan *best);

/* The request for model m's step of B rows of T tokens (li may be NULL: no adapter): its shape,
 * base format, options, shard world and backend (m->be, asked live). Overwrites *r. */
void glm_model_plan_request(const glm_model *m, const glm_lora_info *li, int B, int T, int backward, glm_ckpt_mode mode,
                            glm_plan_request *r);

/* The longest row for model m (glm_plan_request_longest over glm_model_plan_request: B rows,
 * training steps with lora, `mode`), in steps of `step` tokens up to max_T; 0 when even `step` does
 * not fit (then *best is that plan). */
int64_t glm_model_plan_longest(const glm_model *m, const glm_lora *lora, int B, glm_ckpt_mode mode, int64_t step,
                               int64_t max_T, glm_plan *best);

#endif
