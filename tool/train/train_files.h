/* tool/train/train_files.h: what `glmtune train` does with its output directory and settings besides
 * the loop (tool/train/train_files.c): refusing or clearing an earlier run, finding the checkpoint to
 * resume, saying which settings changed on resume, the loss curve, and the --dry-run plan. */
#ifndef GLM_TOOL_TRAIN_FILES_H
#define GLM_TOOL_TRAIN_FILES_H

#include <jansson.h>

#include "common/status.h"
#include "dataset/loader.h"
#include "lora/model/model.h"
#include "lora/model/model_plan.h"
#include "lora/model/plan.h"
#include "tool/train/train.h"

/* A fresh run (no ts->resume) refuses an output directory that holds an earlier run (checkpoints,
 * metrics.jsonl, trainer_state.json), with a hint, unless ts->overwrite_output_dir, which removes
 * them (and the earlier run's final adapter files). A resumed run only checks that its checkpoint exists (train_resume_path). Errors:
 * GLM_ERR_ARG (an earlier run there, no checkpoint to resume), GLM_ERR_IO. */
glm_status train_check_output_dir(const train_settings *ts);

/* Resolves --resume-from-checkpoint: "" / "latest" / "true" -> the newest complete checkpoint of
 * output_dir; a checkpoint directory; or another output directory (its newest). *path is malloc'd.
 * Errors: GLM_ERR_ARG when there is no complete checkpoint (with what to do). */
glm_status train_resume_path(const train_settings *ts, char **path);

/* Resolves --init-adapter (adapter_name_or_path): a PEFT adapter directory (adapter_config.json +
 * adapter_model.safetensors: a checkpoint-N, an export, or a run's output directory, which holds its
 * final adapter) is itself; a training output directory without one (a run cut short, or written by
 * an older glmtune) gives its newest complete checkpoint. A run directory is noted in one line (which
 * adapter it gives). *path is malloc'd. Errors: GLM_ERR_IO (no such directory, or neither an adapter
 * nor a run with a checkpoint there, with the hint), glm_ckpt_latest's. */
glm_status train_init_adapter_path(const char *given, char **path);

/* Logs a warning for each training setting whose value differs between the checkpoint's saved
 * settings and this run's (both JSON objects; anything else is ignored). */
void train_warn_changed_settings(const json_t *saved, const json_t *now);

/* A loader's rows (of `what`, named in the message) against the sequence length the settings ask
 * for (want_seq_len > 0; 0: whatever the shards have). Errors: GLM_ERR_MISMATCH with the hint. */
glm_status train_check_seq_len(const glm_loader *l, const char *what, int64_t want_seq_len);

/* The frozen base's format the settings ask for: --quantization-bit 4 (nf4 or fp4 by
 * --quantization-type, --double-quantization), --base-dtype fp8, else dense. */
glm_base_format train_base_format(const train_settings *ts);

/* The plan request (lora/model/model_plan.h) of a training step of settings ts: B rows of T tokens
 * with the adapter li, the model's options train_model_options gives the run, the base's format,
 * sharding (--shard-base) over `world` ranks, context parallel `cp` (<= 1: off), the host memory
 * of `local_ranks` ranks of this machine (0: as the launcher's environment says), on the live
 * backend be, or be NULL: a CUDA GPU described (a dry run without one). check_plan and the dry
 * run plan through it, with the options the run gives the model, so they plan what it will. */
glm_plan_request train_plan_request(const train_settings *ts, const glm_config *cfg, const glm_lora_info *li, int B,
                                    int T, int world, int cp, const glm_backend *be, int local_ranks);

/* The model's options for a run of settings ts (lora/model/model.h): the --max-gpu-memory cap in
 * bytes, AdamW's moments counted, context parallel over cp ranks of cp_comm (cp <= 1: off); the
 * chunks and the offload the planner's. check_plan and the dry run plan with the same options. */
glm_model_options train_model_options(const train_settings *ts, int cp, const glm_backend *cp_comm);

/* Writes <dir>/loss_curve.svg from a log_history array (train "loss" and "eval_loss" by "step").
 * Errors: GLM_ERR_NOMEM, glm_plot_loss_svg's. */
glm_status train_plot_history(const json_t *hist, const char *dir);

#endif
