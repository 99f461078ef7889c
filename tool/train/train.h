/* tool/train/train.h: the training run behind `glmtune train` (the loop lives in tool/ because it
 * joins the data loader (dataset/) with the model, optimizer and checkpoints (lora/)). */
#ifndef GLM_TOOL_TRAIN_H
#define GLM_TOOL_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "tool/train/options.h"

/* The resolved settings of a run: the parsed options as they are (opt: every option of the table in
 * tool/train/option_table.c, so that a new option reaches the run as ts->opt.<field> with no copy to
 * write), and what is derived from them here. */
typedef struct train_settings {
    glm_train_opts opt;       /* the options (a shallow copy: its strings belong to the caller's glm_train_opts) */
    /* derived */
    const char *eval_data;    /* eval_data, or the training shards (their val split) when eval_from_val; NULL: none */
    const char *resume;       /* --resume-from-checkpoint: NULL (fresh), "latest" or a path */
    const char *device;       /* auto | cpu | cuda (auto when not given) */
    const char *lora_target;  /* the lora_target list joined with commas ("all" when empty) */
    int64_t eval_steps;       /* eval_steps, or save_steps when neither eval_steps nor its ratio is given */
    double eval_ratio;        /* > 0: eval_steps = ceil(ratio x total steps) (or save_ratio, as eval_steps) */
    int ckpt_mode;            /* glm_ckpt_mode (lora/model/plan.h) of --gradient-checkpointing */
    double max_gpu_gib;       /* --max-gpu-memory; 0: the whole GPU */
    bool quiet;               /* --quiet (a display option of the command, not in the table) */
    bool rope_inv_freq_bf16;  /* --rope-inv-freq-dtype bfloat16: the RoPE inv_freq table rounded to bf16
                                 (transformers after .to(bfloat16)) */
    char *settings_json;      /* all resolved settings as JSON text (for trainer_state and the log) */
    int quant_bits;           /* --quantization-bit: 4 (QLoRA base) or 0 */
    const char *quant_type;   /* --quantization-type: nf4 | fp4 */
    bool double_quant;        /* --double-quantization */
    bool fp8;                 /* --base-dtype fp8: the frozen linear layers in FP8 E4M3 */
    int dry_run_world;        /* --dry-run: the ranks to plan for (--gpus / --nproc; 1 otherwise) */
    int context_parallel;     /* --context-parallel: ranks per row (1: off); must divide the world */
    bool by_sample;           /* packing false: a micro-batch is B samples (documents) concatenated in one row */
    bool eval_from_val;       /* evaluate on the val split of data (asked for evaluation, no eval_data) */
} train_settings;

/* Runs (or resumes) a training run. A stop asked for by train_request_stop (SIGTERM, SIGUSR1) ends it
 * after the current optimizer step with a checkpoint of that step: every rank learns of the request in
 * the step's loss all-reduce, so all ranks stop after the same step; it returns GLM_OK and
 * train_stopped_by() says which signal. Errors: any glm_status with its message. */
glm_status train_run(const train_settings *ts);

/* Asks the run to stop after the current optimizer step, saving a checkpoint first (sig: the signal
 * that asked, for the exit status). Async-signal-safe: it only sets a flag. */
void train_request_stop(int sig);

/* After train_run: the signal whose stop it honoured (a checkpoint of the step it reached was
 * written, the final adapter not), else 0. The command exits with 128 + it (143 for SIGTERM). */
int train_stopped_by(void);

/* --dry-run: the memory plan for the settings (model config, LoRA targets, the shards' row
 * length, the GPU's free memory or max_gpu_gib) printed to stdout, without loading weights.
 * *fits receives whether it fits. Errors: reading the config or shards, bad settings. */
glm_status train_dry_run(const train_settings *ts, int *fits);

#endif
