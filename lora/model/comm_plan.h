/* lora/model/comm_plan.h: the communication of one optimizer step of a multi-rank run, predicted from
 * the shapes alone (no weights), for `train --dry-run --gpus N / --nproc N`: the bytes each rank
 * sends, by kind, the time they take at an interconnect's bandwidth, the step's compute time at
 * a stated throughput, and how much of the communication the overlap can hide.
 *
 * Bytes (per rank, per optimizer step of `accum` micro-batches; the rule of be->comm_bytes,
 * kernels/backend.h: ring all-reduce 2 (n-1)/n x the buffer, all-gather (n-1) x the shard,
 * sendrecv its bytes), following what tool/train/train.c and lora/model/step.c issue:
 *   gradient all-reduce   every LoRA gradient (fp32, li->params elements) once per step, over all
 *                         `world` ranks;
 *   --shard-base gathers  per micro-batch the embedding and the output layer ([V, C] each, dense)
 *                         and the four base matrices of L - 2 layers in the forward and L - 2 in
 *                         the backward, in their stored format: the two gather slots still hold
 *                         layers 0 and 1 from the previous backward and layers L-1 and L-2 from
 *                         the forward; recomputation uses the backward's gather. The run's first
 *                         micro-batch gathers layers 0 and 1 too (first_step_extra);
 *   ring (context parallel, n = cp ranks per row, B rows of T_local = 2S local tokens):
 *                         per layer and micro-batch, forward n-1 K|V blocks of B T_local 2 Hkv Dh
 *                         act elements; a layer the plan recomputes in full sends them again in
 *                         its backward; backward n-1 K|V blocks and n dK|dV blocks of acc_bytes
 *                         elements.
 * Times: bytes / (GB/s x 1e9). Compute: the plan's tokens x useful FLOP per token (docs/design.md §6:
 * 4 N_matmul + 6 L T H Dh, T the whole row's length) plus its recomputation, at `tflops` useful
 * TFLOP/s; forward a third of the useful work, backward two thirds plus the recomputation.
 * Overlap (what glmtune overlaps): the all-reduce starts layer by layer in the last micro-batch's
 * backward (all but the last layer's bucket can hide behind it); each layer's gather is
 * prefetched behind the previous layer's compute (the embedding's, at a micro-batch's start, is
 * not); each ring block travels while the previous block computes (a layer's attention time / n
 * per ring step). Exposed = what does not fit behind that compute. */
#ifndef GLM_LORA_COMM_PLAN_H
#define GLM_LORA_COMM_PLAN_H

#include <stdio.h>

#include "kernels/weight.h"
#include "lora/model/config.h"
#include "lora/model/plan.h"

/* The interconnects the dry run names, GB/s per direction (nominal). */
typedef struct glm_link {
    const char *name;
    double gbps;
} glm_link;
#define GLM_LINK_NVLINK_GBPS 450.0  /* NVLink 4 (H100/H200 SXM): 18 links x 25 GB/s per direction */
#define GLM_LINK_PCIE5_GBPS 64.0    /* PCIe 5.0 x16, per direction */
#define GLM_LINK_PCIE4_GBPS 32.0    /* PCIe 4.0 x16, per direction */
/* Useful TFLOP/s assumed for the compute estimate: glmtune's measured 11,986 tokens/s at 8k on one
 * H200 x 43.5 useful GFLOP per token (docs/design.md §6), 53% of the card's 989 dense bf16. */
#define GLM_DEFAULT_GPU_TFLOPS 521.0

typedef struct glm_comm_plan_in {
    const glm_config *cfg;
    int64_t lora_params;   /* trainable parameters (their fp32 gradients are all-reduced) */
    const glm_plan *plan;  /* the rank's memory plan: B, T, T_local, n_full, recompute_gflop */
    int world;             /* ranks in all */
    int cp;                /* ranks per row (1: no context parallel) */
    int shard_base;        /* --shard-base (with world > 1) */
    int accum;             /* micro-batches per optimizer step */
    int act_bytes, acc_bytes, weight_bytes; /* 2/4/2 on CUDA, 4/8/4 on the CPU */
    glm_wformat base_format;
    int double_quant;
    double tflops;         /* useful TFLOP/s per rank (> 0) */
} glm_comm_plan_in;

typedef struct glm_comm_plan {
    /* bytes per rank per optimizer step (steady state) */
    double all_reduce, all_gather, ring_kv, ring_dkv;
    double first_step_extra;     /* the run's first step's extra gathers (layers 0 and 1) */
    double gather_layer;         /* one layer's four matrices, per gather (what a rank sends) */
    double gather_big;           /* the embedding or the output layer, per gather */
    int gathers_fwd, gathers_bwd;/* layer gathers per micro-batch, forward and backward */
    double ring_kv_block, ring_dkv_block; /* one ring message */
    /* compute estimate, seconds per optimizer step */
    double flop, compute_s, fwd_s, bwd_s;
} glm_comm_plan;

/* The prediction for `in` (pure arithmetic). */
void glm_comm_plan_make(const glm_comm_plan_in *in, glm_comm_plan *out);

/* Seconds of communication the overlap cannot hide, per kind (all-reduce, gathers, ring), at
 * `gbps` GB/s, for plan cp made from `in`. */
void glm_comm_plan_exposed(const glm_comm_plan_in *in, const glm_comm_plan *cp, double gbps, double exposed[3]);

/* Prints the table: bytes per kind, the time at each link of links[n], how much is exposed, the
 * compute estimate and the step time with the exposed communication; then one line a script can
 * read: "comm bytes per step per rank: all_reduce A all_gather G sendrecv S" (integers). */
void glm_comm_plan_print(const glm_comm_plan_in *in, const glm_comm_plan *cp, const glm_link *links, int n, FILE *f);

#endif
