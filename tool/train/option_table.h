/* tool/train/option_table.h: the tables behind `glmtune train`'s options (tool/train/option_table.c),
 * read by the parser (tool/train/options.c) and through glm_opts_table. A new training option is one
 * row of glm_train_opt_defs (and its field in glm_train_opts, tool/train/options.h). */
#ifndef GLM_TOOL_TRAIN_OPTION_TABLE_H
#define GLM_TOOL_TRAIN_OPTION_TABLE_H

#include <stddef.h>

#include "tool/train/options.h"

/* The most options the table may have (glm_train_opts.src and .line are per option). */
#define GLM_TRAIN_OPTS_MAX 64

/* The options: kebab flag, snake key, alias, type, default, unit, help, field of glm_train_opts. */
extern const glm_opt_def glm_train_opt_defs[];
extern const size_t glm_train_opt_count;

/* What glmtune answers to a LLaMA-Factory / transformers key that is not an option:
 *   KEY_INFO      accepted, not needed by glmtune (why);
 *   KEY_TOKENIZE  read by `glmtune tokenize --config` from the same YAML (the data side);
 *   KEY_REFUSE    a feature glmtune does not have: accepted when off (false, null, 0, empty),
 *                 refused with the reason otherwise. */
typedef enum { KEY_INFO, KEY_TOKENIZE, KEY_REFUSE } glm_lf_key_kind;
typedef struct glm_lf_key {
    const char *key;
    glm_lf_key_kind kind;
    const char *why;
} glm_lf_key;
extern const glm_lf_key glm_lf_keys[];
extern const size_t glm_lf_key_count;

/* What glmtune writes in place of a tracker (report_to and the tracking keys' answer). */
extern const char glm_lf_why_track[];

/* The keys options.c handles itself (key_special; listed for "did you mean"). */
extern const char *const glm_lf_special_keys[];
extern const size_t glm_lf_special_count;

#endif
