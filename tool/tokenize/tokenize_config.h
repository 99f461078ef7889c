/* tool/tokenize/tokenize_config.h: `glmtune tokenize --config FILE.yaml`: the data keys of a
 * LLaMA-Factory training YAML (the same file `glmtune train --config` reads), so that one file
 * drives both commands. Keys read (LLaMA-Factory's names and meaning, src/llamafactory/hparams/
 * data_args.py and model_args.py):
 *   model_name_or_path  the model directory: its tokenizer.model and tokenizer_config.json
 *   dataset             comma list of dataset_info.json entry names
 *   dataset_dir         the folder that holds dataset_info.json (LLaMA-Factory's default "data")
 *   cutoff_len          tokens per packed row (--seq-len)
 *   max_samples         the first N records of each dataset
 *   val_size            a count or a fraction set aside as the validation split
 *   train_on_prompt     prompt tokens (system, user, tool results) are targets too
 *   mask_history        only the last assistant turn is a target
 *   stage               sft (chat data) or pt (plain text: the text layout); rm/ppo/dpo/kto refused
 *   seed                the validation split and num_samples draw
 *   tokenized_path      the output folder (-o)
 *   preprocessing_num_workers  worker threads
 *   template            not used: glmtune renders the model's own chat_template (a line says so)
 *   mix_strategy        concat (what glmtune does); the interleave strategies are refused
 *   default_system      the system message of every sample that has none (LLaMA-Factory's
 *                       template.encode: system or default_system)
 *   eval_dataset        comma list of entries tokenized into the val split (not with val_size)
 *   neat_packing        packed rows without attention across samples: what glmtune always does
 * These are answered in one line each with the reason: packing (a training setting: glmtune
 * train reads it), tool_format, enable_thinking, interleave_probs, streaming, buffer_size,
 * overwrite_cache, preprocessing_batch_size, media_dir, ignore_pad_token_for_loss, and the other
 * data keys of LLaMA-Factory's data_args.py that do not apply.
 * Every other key must be one `glmtune train --config` knows (it is then for training and
 * ignored here); anything else is an error naming the file, line and the closest known key. */
#ifndef GLM_TOKENIZE_CONFIG_H
#define GLM_TOKENIZE_CONFIG_H

#include <stdint.h>

#include "common/status.h"

typedef struct tok_config {
    char *model, *dataset, *dataset_dir, *stage, *tokenized_path;
    char *default_system, *eval_dataset;            /* NULL: not in the file */
    int64_t cutoff_len, max_samples, seed, workers; /* -1: not in the file */
    double val_size;                                /* < 0: not in the file */
    int train_on_prompt, mask_history;              /* -1: not in the file, else 0/1 */
} tok_config;

/* Reads `path` into *c (every field unset first). Relative paths in the file (dataset_dir,
 * tokenized_path, a local model_name_or_path) are taken as LLaMA-Factory takes them: relative to
 * the working directory. Errors: GLM_ERR_IO (unreadable), GLM_ERR_FORMAT (bad YAML, not a
 * mapping, a value of the wrong type; file:line), GLM_ERR_ARG (an unknown key, with the closest
 * known one), GLM_ERR_UNSUPPORTED (a stage or mix_strategy glmtune does not do, with why),
 * GLM_ERR_NOMEM. *c holds nothing to free on error. */
glm_status tok_config_load(const char *path, tok_config *c);

void tok_config_free(tok_config *c);

#endif
