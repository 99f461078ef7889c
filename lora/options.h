/* lora/options.h: the options of `glmtune train`: one table (kebab-case flag, snake_case key,
 * type, default, unit, help) drives the command line (--name value, --name=value, bool flags,
 * --no-name), the YAML config (--config FILE.yaml, snake_case keys, LLaMA-Factory style), the
 * help text, and the resolved settings (printed, and saved as JSON in trainer_state.json).
 * Precedence: defaults < YAML < command line. */
#ifndef GLM_OPTIONS_H
#define GLM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/status.h"

typedef enum { GLM_OPT_INT, GLM_OPT_FLOAT, GLM_OPT_STRING, GLM_OPT_BOOL, GLM_OPT_LIST } glm_opt_type;

/* A list value (e.g. lora-target): malloc'd strings. */
typedef struct glm_strlist {
    char **v;
    size_t n;
} glm_strlist;

/* Where a value came from. */
typedef enum { GLM_SRC_DEFAULT = 0, GLM_SRC_CONFIG = 1, GLM_SRC_CLI = 2 } glm_opt_src;

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
    double weight_decay;
    double adam_beta1, adam_beta2, adam_epsilon;
    double max_grad_norm;
    double num_train_epochs;
    int64_t max_steps;                  /* -1: from num_train_epochs */
    int64_t save_steps;
    int64_t save_total_limit;           /* 0: keep all */
    int64_t logging_steps;
    char *eval_data;
    int64_t eval_steps;                 /* 0: with each save */
    int64_t seed;
    bool gradient_checkpointing;
    char *resume_from_checkpoint;       /* NULL: fresh; "latest": newest in output_dir; or a path */
    int64_t lora_rank;
    double lora_alpha;                  /* NaN until resolved: default 2 x lora_rank */
    double lora_dropout;
    glm_strlist lora_target;            /* "all" or module names */
    bool use_rslora;
    bool overwrite_output_dir;          /* start afresh in a directory with an earlier run */
    char *init_adapter;
    char *device;                       /* auto | cpu | cuda */
    int64_t seq_len;                    /* 0: the shards' row length; else must match it */
    char *dump_grads;                   /* file for the first step's gradients, or NULL */
    int64_t max_nonfinite;
    double rope_theta;                  /* RoPE base override; 0: from config.json */
    char *rope_inv_freq_dtype;          /* "float32" | "bfloat16": precision of the RoPE inv_freq table */
    char *config;                       /* the YAML file read, or NULL */
    bool help;                          /* --help / -h was given */
    unsigned char src[64];              /* glm_opt_src per table entry */
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
 * argv excludes the program and subcommand names. Accepts --name value, --name=value, bool
 * flags (--name, --name=false, --no-name, --name true|false), and -h/--help (sets o->help).
 * YAML: a mapping of snake_case keys (or aliases) to scalars or (for lists) sequences or
 * comma-separated strings; LLaMA-Factory keys that do not apply are accepted with an info line
 * (or mapped: cutoff_len -> seq_len, dataset -> data), and some are refused (fp16: true,
 * finetuning_type other than lora, stage other than sft, quantization_bit).
 * Errors: GLM_ERR_ARG naming the flag/key (and file:line for YAML) with the closest known name
 * by edit distance, or the bad value and the expected type; GLM_ERR_UNSUPPORTED for refused
 * settings, with the reason; GLM_ERR_IO / GLM_ERR_FORMAT for the YAML file. Does not call
 * glm_opts_validate. */
glm_status glm_opts_parse(glm_train_opts *o, int argc, char **argv);

/* Reads a YAML config into o (source CONFIG; fields already set from the command line are not
 * overwritten). Errors as glm_opts_parse. */
glm_status glm_opts_load_yaml(glm_train_opts *o, const char *path);

/* Sets one option from text by kebab name or snake key (source src). Errors: GLM_ERR_ARG. */
glm_status glm_opts_set(glm_train_opts *o, const char *name, const char *value, glm_opt_src src);

/* Checks required options (model, data, output-dir), ranges and choices, and resolves
 * lora_alpha (default 2 x lora_rank). Errors: GLM_ERR_ARG naming the option. */
glm_status glm_opts_validate(glm_train_opts *o);

/* The help text: one entry per option with its value type, unit, default and help. */
void glm_opts_help(FILE *f);

/* The resolved settings as a JSON object {snake_key: typed value} (new reference; NULL when out
 * of memory). Unset strings are null. */
json_t *glm_opts_to_json(const glm_train_opts *o);

/* Prints "  key = value   (default|config|command line)" lines. */
void glm_opts_print(FILE *f, const glm_train_opts *o);

/* LLaMA-Factory's "stage": sft and pt are accepted (the shards decide the targets); rm, ppo, dpo
 * and kto are refused by name with what they are; anything else too. path:line name the config.
 * Errors: GLM_ERR_UNSUPPORTED. */
glm_status glm_stage_check(const char *stage, const char *path, int line);

/* True when `key` is a YAML key that `glmtune train --config` accepts (an option, an alias, or a
 * LLaMA-Factory key it uses, checks or ignores with a reason), so that `glmtune tokenize --config`
 * can tell a training key from a typo in the same file. */
bool glm_opts_known_key(const char *key);

/* Levenshtein distance between a and b (for suggestions). */
size_t glm_edit_distance(const char *a, const char *b);

#endif
