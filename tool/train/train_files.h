/* tool/train/train_files.h: what `glmtune train` does with its output directory and settings besides
 * the loop (tool/train/train_files.c): refusing or clearing an earlier run, finding the checkpoint to
 * resume, saying which settings changed on resume, the loss curve, and the --dry-run plan. */
#ifndef GLM_TOOL_TRAIN_FILES_H
#define GLM_TOOL_TRAIN_FILES_H

#include <jansson.h>

#include "common/status.h"
#include "dataset/loader.h"
#include "lora/model/plan.h"
#include "tool/train/train.h"

/* A fresh run (no ts->resume) refuses an output directory that holds an earlier run (checkpoints,
 * metrics.jsonl, trainer_state.json), with a hint, unless ts->overwrite_output_dir, which removes
 * them. A resumed run only checks that its checkpoint exists (train_resume_path). Errors:
 * GLM_ERR_ARG (an earlier run there, no checkpoint to resume), GLM_ERR_IO. */
glm_status train_check_output_dir(const train_settings *ts);

/* Resolves --resume-from-checkpoint: "" / "latest" / "true" -> the newest complete checkpoint of
 * output_dir; a checkpoint directory; or another output directory (its newest). *path is malloc'd.
 * Errors: GLM_ERR_ARG when there is no complete checkpoint (with what to do). */
glm_status train_resume_path(const train_settings *ts, char **path);

/* Logs a warning for each training setting whose value differs between the checkpoint's saved
 * settings and this run's (both JSON objects; anything else is ignored). */
void train_warn_changed_settings(const json_t *saved, const json_t *now);

/* A loader's rows (of `what`, named in the message) against the sequence length the settings ask
 * for (want_seq_len > 0; 0: whatever the shards have). Errors: GLM_ERR_MISMATCH with the hint. */
glm_status train_check_seq_len(const glm_loader *l, const char *what, int64_t want_seq_len);

/* The memory planner's options for a run of settings ts (train's own plan and its --dry-run, so the
 * two plan alike): the checkpointing mode, the base's format (bf16/f32, 4-bit, fp8), sharding over
 * `world` ranks, context parallel `cp`, byte sizes of the CPU (cpu != 0: f32) or CUDA (bf16)
 * backend, the layer-input offload within the host memory of `local_ranks` ranks of this machine
 * (GPU only), the GPU budget in bytes, and the backend's scratch `need` and the attention library's
 * workspace `ws` in bytes (0: the planner's estimate). */
glm_plan_opts train_plan_opts(const train_settings *ts, int cpu, int world, int cp, int local_ranks, double budget,
                              size_t need, size_t ws);

/* Writes <dir>/loss_curve.svg from a log_history array (train "loss" and "eval_loss" by "step").
 * Errors: GLM_ERR_NOMEM, glm_plot_loss_svg's. */
glm_status train_plot_history(const json_t *hist, const char *dir);

#endif
