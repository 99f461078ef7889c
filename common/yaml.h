/* common/yaml.h: the reader of LLaMA-Factory-style YAML configs (one mapping of keys to scalars,
 * lists of scalars, or mappings of scalars), shared by `glmtune train --config` (tool/train/options.c)
 * and `glmtune tokenize --config` (tool/tokenize/tokenize_config.c), over libyaml. */
#ifndef GLM_COMMON_YAML_H
#define GLM_COMMON_YAML_H

#include <stdbool.h>

#include "common/status.h"

/* One key of a YAML config for glm_yaml_config_each: val is the scalar's text, a list's items
 * joined with commas, or for a mapping (mapping true) its JSON text when every value is a plain
 * scalar (numbers stay numbers), else NULL. line is the key's line (1-based) in path. */
typedef glm_status (*glm_yaml_key_fn)(void *ctx, const char *path, int line, const char *key, const char *val,
                                      bool mapping);
/* Reads the LLaMA-Factory-style YAML config at path (one mapping of keys; an empty file has no
 * keys) and calls fn for each key in file order, stopping at its first error. one_document: a
 * second document after "---" is an error (train), rather than ignored. Errors: GLM_ERR_IO
 * (open), GLM_ERR_FORMAT (bad YAML, not a mapping, a non-scalar key, a list of non-scalars, with
 * file:line), GLM_ERR_ARG (second document), GLM_ERR_NOMEM, or fn's. */
glm_status glm_yaml_config_each(const char *path, bool one_document, glm_yaml_key_fn fn, void *ctx);

#endif
