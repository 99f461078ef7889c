/* tool/train/train.h: the training run behind `glmtune train` (the loop lives in tool/ because it
 * joins the data loader (dataset/) with the model, optimizer and checkpoints (lora/)). */
#ifndef GLM_TOOL_TRAIN_H
#define GLM_TOOL_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

/* The resolved settings of a run (from tool/train/options.h: flags and --config YAML). */
typedef struct train_settings {
    const char *model, *data, *output_dir, *eval_data, *init_adapter, *resume, *dump_grads, *device;
    const char *lr_scheduler_type, *lora_target;
    int64_t per_device_train_batch_size, gradient_accumulation_steps, max_steps, save_steps, save_total_limit,
        logging_steps, eval_steps, seed, lora_rank, seq_len, max_nonfinite;
    double learning_rate, warmup_ratio, min_lr, weight_decay, adam_beta1, adam_beta2, adam_epsilon,
        max_grad_norm, num_train_epochs, lora_alpha, lora_dropout, rope_theta;
    double min_lr_rate;       /* cosine floor as a fraction of learning_rate (lr_scheduler_kwargs) */
    double loraplus_lr_ratio; /* LoRA+: lora_B at this x the learning rate; 0: off */
    bool logging_first_step;  /* log step 1 on its own (transformers' logging_first_step) */
    int64_t warmup_steps;
    int ckpt_mode;            /* glm_ckpt_mode (lora/model/plan.h) */
    double max_gpu_gib;       /* 0: the whole GPU */
    bool dry_run;             /* print the memory plan and stop */
    bool use_rslora, quiet, overwrite_output_dir;
    bool rope_inv_freq_bf16;  /* round the RoPE inv_freq table to bf16 (transformers after .to(bfloat16)) */
    char *settings_json;    /* all resolved settings as JSON text (for trainer_state and the log) */
    bool shard_base;          /* --shard-base: each rank holds 1/world of the frozen base */
    int quant_bits;           /* --quantization-bit: 4 (QLoRA base) or 0 */
    const char *quant_type;   /* --quantization-type: nf4 | fp4 */
    bool double_quant;        /* --double-quantization */
    bool fp8;                 /* --base-dtype fp8: the frozen linear layers in FP8 E4M3 */
    double comm_timeout;      /* seconds a collective may wait (--comm-timeout / ddp_timeout) */
    int dry_run_world;        /* --dry-run: the ranks to plan for (--gpus / --nproc; 1 otherwise) */
    double interconnect_gbps; /* --dry-run: the link's GB/s (0: NVLink and PCIe defaults) */
    double gpu_tflops;        /* --dry-run: useful TFLOP/s per GPU (0: GLM_DEFAULT_GPU_TFLOPS) */
    int context_parallel;     /* --context-parallel: ranks per row (1: off); must divide the world */
    bool by_sample;           /* packing false: a micro-batch is B samples (documents) concatenated in one row */
    const char *save_strategy, *eval_strategy, *logging_strategy; /* steps | epoch | no */
    double logging_ratio, save_ratio, eval_ratio; /* > 0: *_steps = ceil(ratio x total steps) */
    bool eval_from_val;       /* evaluate on the val split of data (asked for evaluation, no eval_data) */
    const char *stage;        /* LLaMA-Factory's stage (sft | pt), or NULL */
} train_settings;

/* Runs (or resumes) a training run. Errors: any glm_status with its message. */
glm_status train_run(const train_settings *ts);

/* --dry-run: the memory plan for the settings (model config, LoRA targets, the shards' row
 * length, the GPU's free memory or max_gpu_gib) printed to stdout, without loading weights.
 * *fits receives whether it fits. Errors: reading the config or shards, bad settings. */
glm_status train_dry_run(const train_settings *ts, int *fits);

#endif
