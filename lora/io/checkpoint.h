/* lora/io/checkpoint.h: resumable training checkpoints.
 *
 * A checkpoint is the directory <output_dir>/checkpoint-<step>/ holding
 *   adapter_model.safetensors  LoRA weights, fp32, PEFT keys "base_model.model.<param name>"
 *   adapter_config.json        as export (so a checkpoint is also a loadable PEFT adapter)
 *   optimizer.safetensors      "<param name>.exp_avg" / ".exp_avg_sq" fp32; metadata step
 *   trainer_state.json         transformers' TrainerState, exactly its fields (so
 *                              TrainerState.load_from_json and the tools that read it work):
 *                              epoch, global_step, max_steps, logging_steps, eval_steps,
 *                              save_steps, train_batch_size, num_train_epochs,
 *                              num_input_tokens_seen, total_flos, log_history, best_metric,
 *                              best_global_step, best_model_checkpoint, is_local_process_zero,
 *                              is_world_process_zero, is_hyper_param_search, trial_name,
 *                              trial_params, stateful_callbacks
 *   glmtune_state.json         what resuming needs beyond that: {"format": "glmtune-checkpoint",
 *                              "version": 2, "global_step", "epoch", "optimizer_step",
 *                              "data_loader" (caller's object), "rng" ([[4 decimal strings] per
 *                              glm_rng]), "scheduler" {type, lr, total_steps, warmup_steps,
 *                              min_lr_rate, num_cycles}, "settings" (the resolved settings)}
 *                              (version 1 checkpoints kept these in trainer_state.json; they
 *                              still load)
 *   checksums.txt              one line per other file: "<crc32 hex8> <size> <name>"
 * Saving writes everything into <output_dir>/.checkpoint-<step>.tmp/, fsyncs and renames it
 * (glm_commit_dir), then prunes old checkpoints; a kill at any point leaves the previous
 * checkpoints intact and at most a stale .tmp directory, which readers ignore. */
#ifndef GLM_CHECKPOINT_H
#define GLM_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/rng.h"
#include "common/status.h"
#include "lora/io/export.h"
#include "lora/adapter/optim.h"
#include "lora/adapter/param.h"

struct glm_backend;

#define GLM_CKPT_CHECKSUMS "checksums.txt"

typedef struct glm_ckpt_save_args {
    const char *output_dir;
    int64_t step;                  /* global optimizer step (names the directory) */
    double epoch;                  /* fractional epoch */
    const struct glm_backend *be;  /* holds params' w and the optimizer state; NULL = host */
    const glm_param *params;
    size_t n_params;
    const glm_optim *optim;        /* m, v, step (NULL: no optimizer.safetensors, e.g. tests) */
    const glm_adapter_cfg *adapter;/* for adapter_config.json */
    const json_t *data_loader;     /* opaque loader position (object; NULL -> {}) */
    const glm_rng *rngs;           /* RNG states to restore, in a fixed order */
    size_t n_rngs;
    const glm_sched *sched;        /* may be NULL */
    const json_t *settings;        /* resolved settings (object; NULL -> {}) */
    const json_t *log_history;     /* array of logged records for the plot (NULL -> []) */
    int save_total_limit;          /* keep the newest K checkpoints; <= 0 keeps all */
    /* trainer_state.json's run description (transformers' TrainerState; 0 when unknown) */
    int64_t max_steps, logging_steps, eval_steps, save_steps, train_batch_size;
    double num_train_epochs;
    int64_t num_input_tokens_seen; /* tokens of the rows trained on so far (padding included) */
} glm_ckpt_save_args;

/* transformers' TrainerState as a JSON object (new reference), from the arguments of a save:
 * best_metric / best_global_step / best_model_checkpoint from the lowest "eval_loss" in
 * log_history (null when there is none; the checkpoint named is output_dir/checkpoint-<step>),
 * total_flos 0 (not counted), stateful_callbacks {"TrainerControl": {"args": {should_epoch_stop,
 * should_evaluate, should_log false, should_save true, should_training_stop (step >= max_steps > 0)},
 * "attributes": {}}} as transformers' Trainer writes it (its resume restores TrainerControl from
 * there). NULL when out of memory. */
json_t *glm_trainer_state_json(const glm_ckpt_save_args *a);

/* Saves a checkpoint as described above; *out_dir (if not NULL) receives the final path
 * (malloc'd). Then removes the oldest checkpoint-* directories beyond save_total_limit (never
 * the one just saved) and stale .checkpoint-*.tmp directories. Errors: GLM_ERR_IO naming the
 * file, GLM_ERR_NOMEM, GLM_ERR_ARG (step < 0). On error the temp directory is removed and
 * earlier checkpoints are untouched. */
glm_status glm_ckpt_save(const glm_ckpt_save_args *a, char **out_dir);

/* Whether `dir` looks like a checkpoint directory (it has checksums.txt); a training output
 * directory has a trainer_state.json too (written at the end of a run), but no checksums.txt. */
bool glm_ckpt_is_dir(const char *dir);

/* Checks checksums.txt of `dir`: every listed file exists with that size and CRC-32, and no
 * required file (adapter_model.safetensors, trainer_state.json) is missing from the list.
 * Errors: GLM_ERR_FORMAT naming the file that is missing, truncated (size) or corrupt (crc),
 * with a hint to resume from an older checkpoint. */
glm_status glm_ckpt_verify(const char *dir);

/* A loaded checkpoint's state (weights are loaded separately into existing params). */
typedef struct glm_ckpt {
    char *dir;
    int64_t step;
    double epoch;
    int64_t optimizer_step;
    json_t *state;          /* glmtune_state.json (or a version 1 trainer_state.json), owned */
    json_t *trainer_state;  /* trainer_state.json (owned) */
    int64_t num_input_tokens_seen; /* from trainer_state.json (0 when absent) */
    json_t *data_loader;    /* borrowed from state */
    json_t *settings;       /* borrowed from state */
    json_t *log_history;    /* borrowed from trainer_state (array) */
    glm_rng *rngs;          /* n_rngs states */
    size_t n_rngs;
    bool has_sched;
    glm_sched sched;
} glm_ckpt;

/* Verifies (glm_ckpt_verify) and parses trainer_state.json of `dir` into *c.
 * Errors: as verify, GLM_ERR_FORMAT for a malformed field (named). */
glm_status glm_ckpt_load(const char *dir, glm_ckpt *c);

/* Loads the LoRA weights (overwrite params[i].w, via be->upload when be != NULL) and, when
 * optim != NULL, exp_avg / exp_avg_sq and the optimizer step from the checkpoint. Every param
 * must be present with its shape, and the adapter file must hold no other tensor (a weight the
 * run does not train would be lost from its later checkpoints). Errors: GLM_ERR_MISMATCH naming
 * the param and file (missing / shape / a tensor the run lacks; hint: different lora-rank or
 * lora-target than the checkpoint). */
glm_status glm_ckpt_load_weights(const glm_ckpt *c, const struct glm_backend *be, glm_param *params,
                                 size_t n, glm_optim *optim);
void glm_ckpt_free(glm_ckpt *c);

/* The newest complete checkpoint in output_dir: checkpoint-<digits> directories (".tmp" and
 * hidden entries ignored), by step, newest first; the first that passes glm_ckpt_verify wins
 * (a failing newer one is reported with glm_log_warn). *path = NULL and *step = -1 when there
 * is none (GLM_OK). Errors: GLM_ERR_IO when output_dir cannot be listed (a missing output_dir
 * is "none"). */
glm_status glm_ckpt_latest(const char *output_dir, char **path, int64_t *step);

/* For a reader that must not fall back to older weights without a word (an export): the
 * checkpoints of output_dir as glm_ckpt_latest sees them, without warnings. *newest: the
 * newest checkpoint-N directory, complete or not; *why: its glm_ckpt_verify error when it fails,
 * else NULL; *latest: the newest one that passes (as glm_ckpt_latest; == *newest's path when
 * *why is NULL). All malloc'd, NULL when there is none. Errors: as glm_ckpt_latest. */
glm_status glm_ckpt_scan(const char *output_dir, char **newest, char **why, char **latest);

#endif
