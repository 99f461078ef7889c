/* tool/tokenize/tokenize_config.c: the data keys of a LLaMA-Factory YAML for `glmtune tokenize --config`
 * (see tokenize_config.h). Read by glm_yaml_config_each (common/yaml.h), the reader the training config shares. */
#include "tool/tokenize/tokenize_config.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/strdist.h"
#include "common/yaml.h"
#include "tool/train/options.h" /* glm_opts_known_key: the training keys of the same file */

/* The keys read here, for "did you mean". */
static const char *const k_keys[] = {"model_name_or_path", "dataset", "dataset_dir", "cutoff_len",
                                     "max_samples", "val_size", "train_on_prompt", "mask_history",
                                     "stage", "seed", "tokenized_path", "preprocessing_num_workers",
                                     "template", "mix_strategy", "default_system", "eval_dataset",
                                     "neat_packing", "packing"};
#define N_KEYS (sizeof k_keys / sizeof *k_keys)

void tok_config_free(tok_config *c) {
    free(c->model);
    free(c->dataset);
    free(c->dataset_dir);
    free(c->stage);
    free(c->tokenized_path);
    free(c->default_system);
    free(c->eval_dataset);
    memset(c, 0, sizeof *c);
}

static bool is_null(const char *v) { return !*v || !strcmp(v, "null") || !strcmp(v, "~") || !strcmp(v, "None"); }

static glm_status get_int(const char *path, int line, const char *key, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < 0)
        return glm_err(GLM_ERR_FORMAT, "%s:%d: %s: expected a whole number >= 0, got \"%s\"", path, line, key, v);
    *out = x;
    return GLM_OK;
}

static glm_status get_bool(const char *path, int line, const char *key, const char *v, int *out) {
    static const char *t[] = {"true", "True", "yes", "on", "1"}, *f[] = {"false", "False", "no", "off", "0"};
    for (int i = 0; i < 5; i++) {
        if (!strcmp(v, t[i])) return *out = 1, GLM_OK;
        if (!strcmp(v, f[i])) return *out = 0, GLM_OK;
    }
    return glm_err(GLM_ERR_FORMAT, "%s:%d: %s: expected true or false, got \"%s\"", path, line, key, v);
}

static glm_status get_str(const char *v, char **out) {
    free(*out);
    *out = is_null(v) ? NULL : strdup(v);
    if (!is_null(v) && !*out) return glm_err(GLM_ERR_NOMEM, "out of memory");
    return GLM_OK;
}

/* The closest key among the ones read here and the training options. */
static const char *closest_key(const char *key) {
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < N_KEYS; i++) {
        size_t d = glm_edit_distance(key, k_keys[i]);
        if (d < bd) bd = d, best = k_keys[i];
    }
    size_t n;
    const glm_opt_def *t = glm_opts_table(&n);
    for (size_t i = 0; i < n; i++) {
        const char *c[2] = {t[i].key, t[i].alias};
        for (int k = 0; k < 2; k++) {
            if (!c[k]) continue;
            size_t d = glm_edit_distance(key, c[k]);
            if (d < bd) bd = d, best = c[k];
        }
    }
    return bd <= strlen(key) / 2 + 1 ? best : NULL;
}

/* One key: value pair (value as text; lists joined by commas). */
static glm_status set_key(tok_config *c, const char *path, int line, const char *key, const char *v) {
    if (!strcmp(key, "model_name_or_path")) return get_str(v, &c->model);
    if (!strcmp(key, "dataset")) return get_str(v, &c->dataset);
    if (!strcmp(key, "dataset_dir")) return get_str(v, &c->dataset_dir);
    if (!strcmp(key, "tokenized_path")) return get_str(v, &c->tokenized_path);
    if (!strcmp(key, "cutoff_len")) return is_null(v) ? GLM_OK : get_int(path, line, key, v, &c->cutoff_len);
    if (!strcmp(key, "max_samples")) return is_null(v) ? GLM_OK : get_int(path, line, key, v, &c->max_samples);
    if (!strcmp(key, "seed")) return is_null(v) ? GLM_OK : get_int(path, line, key, v, &c->seed);
    if (!strcmp(key, "preprocessing_num_workers"))
        return is_null(v) ? GLM_OK : get_int(path, line, key, v, &c->workers);
    if (!strcmp(key, "train_on_prompt")) return get_bool(path, line, key, v, &c->train_on_prompt);
    if (!strcmp(key, "mask_history")) return get_bool(path, line, key, v, &c->mask_history);
    if (!strcmp(key, "val_size")) {
        char *end;
        double x = strtod(v, &end);
        if (is_null(v)) return GLM_OK;
        if (*end || end == v || !isfinite(x) || x < 0 || (x >= 1 && x != (double)(int64_t)x))
            return glm_err(GLM_ERR_FORMAT, "%s:%d: val_size: expected a count (e.g. 200) or a fraction in "
                           "(0, 1), got \"%s\"", path, line, v);
        c->val_size = x;
        return GLM_OK;
    }
    if (!strcmp(key, "stage")) {
        char where[600];
        snprintf(where, sizeof where, "%s:%d", path, line);
        if (!strcmp(v, "dpo") || !strcmp(v, "kto"))
            /* preference data is not supervised data: no shards that train would misuse */
            return glm_err(GLM_ERR_UNSUPPORTED, "%s: stage: %s is refused: it is %s preference optimisation (%s and a "
                           "reference model), which glmtune does not train; hint: preference training is not available "
                           "yet (it is planned: stage: dpo); use stage: sft with supervised data, or LLaMA-Factory for %s",
                           where, v, !strcmp(v, "dpo") ? "DPO" : "KTO",
                           !strcmp(v, "dpo") ? "chosen/rejected pairs" : "desirable/undesirable labels", v);
        GLM_TRY(glm_stage_check(v, where));
        return get_str(v, &c->stage);
    }
    if (!strcmp(key, "mix_strategy")) {
        if (is_null(v) || !strcmp(v, "concat")) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: mix_strategy: %s is not supported: glmtune concatenates "
                       "the datasets (concat) and the training loader shuffles them; hint: drop the key, "
                       "or use num_samples in dataset_info.json to weight a dataset", path, line, v);
    }
    if (!strcmp(key, "template")) {
        if (!is_null(v))
            glm_log_info("%s:%d: template: %s is not used: glmtune renders the chat format of the model's "
                         "own tokenizer_config.json (chat_template)", path, line, v);
        return GLM_OK;
    }
    if (!strcmp(key, "default_system")) return get_str(v, &c->default_system);
    if (!strcmp(key, "eval_dataset")) return get_str(v, &c->eval_dataset);
    if (!strcmp(key, "neat_packing")) {
        int b = 0;
        if (!is_null(v)) GLM_TRY(get_bool(path, line, key, v, &b));
        if (b) glm_log_info("%s:%d: neat_packing: true: rows hold whole samples that never attend to each other, which is "
                            "how glmtune always packs", path, line);
        return GLM_OK;
    }
    /* LLaMA-Factory data keys with no meaning here: one line each, with the reason */
    static const struct {
        const char *key, *why;
    } k_answer[] = {
        {"packing", "a training setting: glmtune train reads it (false: micro-batches of samples, true: of packed "
                    "rows); the shards serve both"},
        {"tool_format", "tool calls are rendered by the model's own chat_template (GLM-4's), not a LLaMA-Factory "
                        "tool formatter"},
        {"enable_thinking", "GLM-4-9B has no thinking mode in its chat template; reasoning in the data is dropped "
                            "or kept with --keep-reasoning"},
        {"interleave_probs", "glmtune concatenates the datasets (mix_strategy concat); weight a dataset with "
                             "num_samples in dataset_info.json"},
        {"streaming", "glmtune always streams the files (read once, in order, bounded memory)"},
        {"buffer_size", "used by LLaMA-Factory's streaming shuffle; glmtune's loader shuffles every epoch by seed"},
        {"overwrite_cache", "glmtune keeps no dataset cache: every tokenize run reads the files"},
        {"preprocessing_batch_size", "glmtune's workers take records in batches of their own size; use "
                                     "preprocessing_num_workers for the threads"},
        {"media_dir", "glmtune trains text models: images, videos and audio are not read"},
        {"ignore_pad_token_for_loss", "shards hold no pad token inside a sample; padding at a row's end is never a "
                                      "target"},
    };
    for (size_t k = 0; k < sizeof k_answer / sizeof *k_answer; k++)
        if (!strcmp(key, k_answer[k].key)) {
            if (!is_null(v)) glm_log_info("%s:%d: %s is not used by tokenize: %s", path, line, key, k_answer[k].why);
            return GLM_OK;
        }
    if (glm_opts_known_key(key)) return GLM_OK; /* a training key: glmtune train reads it */
    const char *near = closest_key(key);
    return glm_err(GLM_ERR_ARG, "%s:%d: unknown key '%s'%s%s%s", path, line, key,
                   near ? "; hint: did you mean '" : "; hint: see glmtune tokenize --help and glmtune "
                                                       "train --help for the keys",
                   near ? near : "", near ? "'?" : "");
}

/* One key for tokenize: a mapping is skipped when it is a training key's (lr_scheduler_kwargs,
 * ...), an error otherwise. */
static glm_status yaml_tok_key(void *ctx, const char *path, int line, const char *key, const char *val, bool mapping) {
    if (mapping) {
        if (glm_opts_known_key(key)) return GLM_OK; /* for training: glmtune train reads it */
        return glm_err(GLM_ERR_FORMAT, "%s:%d: %s: a nested mapping is not a valid value here", path, line, key);
    }
    return set_key(ctx, path, line, key, val);
}

glm_status tok_config_load(const char *path, tok_config *c) {
    memset(c, 0, sizeof *c);
    c->cutoff_len = c->max_samples = c->seed = c->workers = -1;
    c->val_size = -1;
    c->train_on_prompt = c->mask_history = -1;
    glm_status st = glm_yaml_config_each(path, false, yaml_tok_key, c);
    if (st != GLM_OK) tok_config_free(c);
    return st;
}
