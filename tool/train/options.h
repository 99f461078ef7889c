/* tool/train/options.h: the options of `glmtune train`: one table (kebab-case flag, snake_case key,
 * type, default, unit, help) drives the command line (--name value, --name=value, bool flags,
 * --no-name), the YAML config (--config FILE.yaml, snake_case keys, LLaMA-Factory style), the
 * help text, and the resolved settings (printed, and saved as JSON in trainer_state.json).
 * Precedence: defaults < YAML < command line. The command line is read by the option engine of
 * common/args.h (the spellings every command shares), with a table made from this one. */
#ifndef GLM_OPTIONS_H
#define GLM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/status.h"
#include "common/yaml.h"

typedef enum { GLM_OPT_INT, GLM_OPT_FLOAT, GLM_OPT_STRING, GLM_OPT_BOOL, GLM_OPT_LIST } glm_opt_type;

/* A list value (e.g. lora-target): malloc'd strings. */
typedef struct glm_strlist {
    char **v;
    size_t n;
} glm_strlist;

/* Where a value came from. */
/* GLM_SRC_LF: a YAML left the key out, so LLaMA-Factory's / transformers' default applies (what
 * the file means there), in place of glmtune's own command-line default. */
typedef enum { GLM_SRC_DEFAULT = 0, GLM_SRC_CONFIG = 1, GLM_SRC_CLI = 2, GLM_SRC_LF = 3 } glm_opt_src;

typedef struct glm_train_opts {
    char *model;                        /* base checkpoint directory */
    char *data;                         /* tokenized shards (dir or manifest.json) */
    char *output_dir;
    int64_t per_device_train_batch_size;/* micro-batch rows */
    int64_t gradient_accumulation_steps;
    double learning_rate;
    char *lr_scheduler_type;
    int64_t warmup_steps;
    double warmup_ratio;
    double min_lr;
    double min_lr_rate;                 /* cosine floor as a fraction of learning_rate (lr_scheduler_kwargs) */
    double weight_decay;
    char *optim;                        /* adamw_torch | adamw_torch_fused | adamw_hf */
    double adam_beta1, adam_beta2, adam_epsilon;
    double max_grad_norm;
    double num_train_epochs;
    int64_t max_steps;                  /* -1: from num_train_epochs */
    int64_t save_steps;
    int64_t save_total_limit;           /* 0: keep all */
    int64_t logging_steps;
    bool logging_first_step;            /* log step 1 on its own too (transformers) */
    char *eval_data;
    int64_t eval_steps;                 /* 0: with each save */
    int64_t seed;
    char *gradient_checkpointing;       /* auto | none | selective | full (lora/model/plan.h glm_ckpt_parse) */
    double max_gpu_memory;              /* GiB the plan may use; 0: what the GPU has */
    bool dry_run;                       /* print the memory plan and exit */
    char *resume_from_checkpoint;       /* NULL: fresh; "latest": newest in output_dir; or a path */
    int64_t lora_rank;
    double lora_alpha;                  /* NaN until resolved: default 2 x lora_rank */
    double lora_dropout;
    glm_strlist lora_target;            /* "all" or module names */
    bool use_rslora;
    double loraplus_lr_ratio;           /* LoRA+: lora_B at this x learning_rate; 0: off */
    bool overwrite_output_dir;          /* start afresh in a directory with an earlier run */
    char *init_adapter;
    char *device;                       /* auto | cpu | cuda */
    char *gpus;                         /* "N" or "0,2,3": start one worker per GPU (tool/train/launch.c); NULL: this process */
    int64_t nproc;                      /* CPU ranks to start under mpirun (--device cpu); 0: this process */
    bool shard_base;                    /* each rank holds 1/world of the frozen base weights */
    int64_t quantization_bit;           /* 4: the frozen linear layers in 4 bits (QLoRA); 0: bf16 */
    char *quantization_type;            /* nf4 | fp4 */
    bool double_quantization;           /* 4-bit absmax quantized too */
    char *quantization_method;          /* bnb */
    char *base_dtype;                   /* bf16 | fp8: the frozen linear layers' storage and GEMMs */
    double comm_timeout;                /* seconds a collective may wait (transformers' ddp_timeout) */
    double interconnect_gbps;           /* --dry-run: the link's GB/s for the communication times; 0: the named defaults */
    double gpu_tflops;                  /* --dry-run: useful TFLOP/s for the compute time; 0: the default */
    int64_t context_parallel;           /* ranks per row (lora/model/ring_attention.h); 1: off */
    int64_t seq_len;                    /* 0: the shards' row length; else must match it */
    char *dump_grads;                   /* file for the first step's gradients, or NULL */
    int64_t max_nonfinite;
    double rope_theta;                  /* RoPE base override; 0: from config.json */
    char *rope_inv_freq_dtype;          /* "float32" | "bfloat16": precision of the RoPE inv_freq table */
    char *config;                       /* the YAML file read, or NULL */
    bool packing;                       /* true: micro-batches of packed rows; false: of B samples (LLaMA-Factory) */
    char *save_strategy;                /* steps | epoch | no (transformers' IntervalStrategy) */
    char *eval_strategy;                /* steps | epoch | no */
    char *logging_strategy;             /* steps | epoch | no */
    bool help;                          /* --help / -h was given */
    /* not in the table */
    char *stage;                        /* LLaMA-Factory's stage (sft | pt) when given, else NULL */
    bool neat_packing;                  /* LLaMA-Factory's neat_packing: true was given */
    char *tokenized_path;               /* LLaMA-Factory's tokenized_path (the YAML's or the command line's), or NULL */
    int tokenized_line;                 /* its line in the config (0: the command line) */
    const char *lf_cli_key;             /* the first LLaMA-Factory method key on the command line (stage, do_train,
                                           finetuning_type): a pasted llamafactory-cli line, which takes
                                           LLaMA-Factory's defaults as a YAML does; NULL when none (static text) */
    double logging_ratio, save_ratio, eval_ratio; /* *_steps given below 1: a ratio of the run's steps; 0: none */
    unsigned char src[64];              /* glm_opt_src per table entry */
    int line[64];                       /* the --config line that set a table entry (0: not from the config), for
                                           messages about its value */
    int yaml_line;                      /* while a config is read: the line of the key being set */
} glm_train_opts;

/* One option of the table. */
typedef struct glm_opt_def {
    const char *name;    /* kebab-case flag without "--" */
    const char *key;     /* snake_case YAML / JSON key */
    const char *alias;   /* another accepted YAML key (LLaMA-Factory / transformers), or NULL */
    glm_opt_type type;
    const char *def;     /* default as text; NULL: unset */
    const char *unit;    /* "" when none */
    const char *help;
    size_t offset;       /* field in glm_train_opts */
    bool optional_value; /* flag may be given without a value (then "latest") */
} glm_opt_def;

/* The table (n entries). */
const glm_opt_def *glm_opts_table(size_t *n);

/* Sets every field to its default (and frees nothing: use on a zeroed or freed struct). */
glm_status glm_opts_defaults(glm_train_opts *o);
void glm_opts_free(glm_train_opts *o);

/* Defaults, then `--config FILE` (wherever it is in argv) as YAML, then the other arguments.
 * argv excludes the program and subcommand names. Every option is accepted under its kebab flag
 * (--learning-rate), its snake_case key (--learning_rate) and its YAML alias
 * (--model_name_or_path, --dataset, --cutoff_len, --eval_dataset), as --name value or
 * --name=value; bool options also bare (--name), as --name true|false and --no-name / --no_name;
 * -h/--help sets o->help. So a `llamafactory-cli train` line pastes.
 * Every other LLaMA-Factory / transformers key, on the command line or in the YAML, is answered
 * in one line: used (lr_scheduler_kwargs {min_lr, min_lr_rate}, disable_gradient_checkpointing,
 * use_cpu, warmup_steps below 1 as a ratio), not needed (speed switches such as flash_attn,
 * enable_liger_kernel, use_unsloth, ddp_timeout: an info line saying why), read by `glmtune
 * tokenize --config` (max_samples, template, dataset_dir, ...: an info line pointing there), or
 * refused with the reason when it asks for a feature glmtune does not have (fp16, use_dora: true,
 * quantization_bit, stage other than sft/pt, an optim other than the AdamW ones, ...).
 * YAML: a mapping of keys to scalars, lists (for lora_target) or, for lr_scheduler_kwargs, a
 * mapping; null keeps the default. Precedence: defaults < YAML < command line.
 * With --config, or a command line that names LLaMA-Factory's method keys (--stage, --do_train,
 * --finetuning_type: a pasted `llamafactory-cli train` line; o->lf_cli_key names the first), an
 * option that neither the YAML nor the command line sets takes LLaMA-Factory's / transformers'
 * TrainingArguments default (source GLM_SRC_LF), since that is what the file or line means
 * there: learning_rate 5e-5, per_device_train_batch_size 8, logging_steps 500, save_steps 500,
 * eval_strategy no, eval_steps = logging_steps, packing = (stage == pt), lr_scheduler_type linear,
 * ... (transformers 4.5x training_args.py; LLaMA-Factory hparams/parser.py for packing).
 * The packing choice is always logged in one line: packed or not, and why (the source of the value).
 * tokenized_path (LLaMA-Factory trains from it when it exists): when it holds shards (manifest.json)
 * and the command line names no --dataset, train reads them, in place of the YAML's dataset, and says
 * so; when it does not exist, a line says that `glmtune tokenize --config` writes the shards there.
 * logging_steps / save_steps / eval_steps below 1 are ratios of the run's total steps
 * (o->logging_ratio, ...; the step count is then 0 until the run resolves it: ceil(ratio x steps)).
 * Errors: GLM_ERR_ARG naming the flag/key (and file:line for YAML) with a close known name when
 * there is one (edit distance; never an unrelated one), or the bad value and the expected type;
 * GLM_ERR_UNSUPPORTED for refused settings, with the reason; GLM_ERR_IO / GLM_ERR_FORMAT for the
 * YAML file. Does not call glm_opts_validate. */
glm_status glm_opts_parse(glm_train_opts *o, int argc, char **argv);

/* Reads a YAML config into o (source CONFIG; fields already set from the command line are not
 * overwritten). Errors as glm_opts_parse. */
glm_status glm_opts_load_yaml(glm_train_opts *o, const char *path);

/* Sets one option from text by kebab name or snake key (source src). Errors: GLM_ERR_ARG. */
glm_status glm_opts_set(glm_train_opts *o, const char *name, const char *value, glm_opt_src src);

/* Checks required options (model, data, output-dir), ranges and choices (optim: the AdamW names
 * only, else GLM_ERR_UNSUPPORTED; one of min_lr / min_lr_rate), and resolves lora_alpha
 * (default 2 x lora_rank). Errors: GLM_ERR_ARG naming the option. */
glm_status glm_opts_validate(glm_train_opts *o);

/* The help text: one entry per option with its value type, unit, default and help. */
void glm_opts_help(FILE *f);

/* The resolved settings as a JSON object {snake_key: typed value} (new reference; NULL when out
 * of memory). Unset strings are null. */
json_t *glm_opts_to_json(const glm_train_opts *o);

/* Prints "  key = value   (default|config|command line)" lines. */
void glm_opts_print(FILE *f, const glm_train_opts *o);

/* LLaMA-Factory's "stage": sft and pt are accepted (the shards decide the targets); rm, ppo, dpo
 * and kto are refused by name with what they are; anything else too. `where` names the source
 * for the message ("file.yaml:12", "--stage"). Errors: GLM_ERR_UNSUPPORTED. */
glm_status glm_stage_check(const char *stage, const char *where);

/* True when `key` is a YAML key that `glmtune train --config` accepts (an option, an alias, or a
 * LLaMA-Factory key it uses, checks or ignores with a reason), so that `glmtune tokenize --config`
 * can tell a training key from a typo in the same file. */
bool glm_opts_known_key(const char *key);


#endif
