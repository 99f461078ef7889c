#define _GNU_SOURCE
/* tool/train/options.c: parsing the train options (see options.h): the command line, YAML configs
 * (common/yaml.h), defaults, validation, help and JSON, over the tables of tool/train/option_table.c. */
#include "tool/train/options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/strdist.h"
#include "common/yaml.h"
#include "tool/train/option_table.h"

/* the tables (tool/train/option_table.c) under the parser's short names */
#define k_opts glm_train_opt_defs
#define N_OPTS glm_train_opt_count
#define k_keys glm_lf_keys
#define N_KEYS glm_lf_key_count
#define k_special glm_lf_special_keys
#define N_SPECIAL glm_lf_special_count
#include "lora/model/plan.h"

/* 1 when s is a value of --gradient-checkpointing (so it is taken as the flag's value): the values
 * glm_ckpt_parse takes, without its error */
static int glm_ckpt_parse_quiet(const char *s) {
    glm_ckpt_mode m;
    if (glm_ckpt_parse(s, &m) == GLM_OK) return 1;
    glm_err_clear();
    return 0;
}

const glm_opt_def *glm_opts_table(size_t *n) {
    *n = N_OPTS;
    return k_opts;
}

static const char *type_name(glm_opt_type t) {
    switch (t) {
    case GLM_OPT_INT: return "integer";
    case GLM_OPT_FLOAT: return "number";
    case GLM_OPT_STRING: return "text";
    case GLM_OPT_BOOL: return "true|false";
    case GLM_OPT_LIST: return "list";
    }
    return "?";
}

/* A known name close to `s` (edit distance at most 2, or a third of the name; or a known name
 * that starts with s, for s of 4+ characters), else NULL: only related names are suggested.
 * kebab: flags (--learning-rate); else snake keys, aliases and the LLaMA-Factory keys. */
static const char *closest(const char *s, bool kebab) {
    static char out[128];
    const char *best = NULL;
    size_t bd = (size_t)-1, ls = strlen(s);
    const char *cands[N_OPTS * 2 + N_KEYS + N_SPECIAL]; /* a VLA: the tables live in option_table.c */
    size_t nc = 0;
    for (size_t i = 0; i < N_OPTS; i++) {
        cands[nc++] = kebab ? k_opts[i].name : k_opts[i].key;
        if (!kebab && k_opts[i].alias) cands[nc++] = k_opts[i].alias;
    }
    for (size_t i = 0; i < N_KEYS; i++) cands[nc++] = k_keys[i].key;
    for (size_t i = 0; i < N_SPECIAL; i++) cands[nc++] = k_special[i];
    for (size_t i = 0; i < nc; i++) {
        char c[128];
        snprintf(c, sizeof c, "%s", cands[i]);
        if (kebab)
            for (char *q = c; *q; q++) *q = *q == '_' ? '-' : *q;
        size_t d = glm_edit_distance(s, c);
        if (ls >= 4 && !strncmp(c, s, ls) && d > 1) d = 1; /* s is the start of a known name */
        if (d < bd && (d <= 2 || d * 3 <= ls)) {
            bd = d;
            snprintf(out, sizeof out, "%s", c);
            best = out;
        }
    }
    return best;
}

static const char *suggest_as(const char *s, bool kebab, bool flag, char *buf, size_t n);

/* " did you mean 'x'?" or "" (a static buffer per call site is enough: messages are made at once). */
static const char *suggest(const char *s, bool kebab, char *buf, size_t n) {
    return suggest_as(s, kebab, kebab, buf, n);
}

/* flag: suggest as --name, else as 'name' (the wording every command's unknown options share). */
static const char *suggest_as(const char *s, bool kebab, bool flag, char *buf, size_t n) {
    return glm_args_hint(buf, n, closest(s, kebab), flag, "train");
}

static void list_free(glm_strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static glm_status list_push(glm_strlist *l, const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (!n) return GLM_OK;
    char **nv = realloc(l->v, (l->n + 1) * sizeof(char *));
    if (!nv) return glm_err(GLM_ERR_NOMEM, "out of memory");
    l->v = nv;
    l->v[l->n] = strndup(s, n);
    if (!l->v[l->n]) return glm_err(GLM_ERR_NOMEM, "out of memory");
    l->n++;
    return GLM_OK;
}

/* true/yes/on/1, false/no/off/0 in any case: the words every command reads as booleans */
static bool parse_bool(const char *v, bool *out) { return glm_args_parse_bool(v, out); }

/* Sets table entry i from text. `where` names the source for messages. */
static glm_status set_value(glm_train_opts *o, size_t i, const char *v, glm_opt_src src, const char *where) {
    const glm_opt_def *d = &k_opts[i];
    void *field = (char *)o + d->offset;
    switch (d->type) {
    case GLM_OPT_INT: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno)
            return glm_err(GLM_ERR_ARG, "%s: %s wants an integer, got '%s'; hint: a whole number such as %s "
                           "(`glmtune train --help` lists the options)", where, d->name, v, d->def && *d->def ? d->def : "8");
        *(int64_t *)field = x;
        break;
    }
    case GLM_OPT_FLOAT: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return glm_err(GLM_ERR_ARG, "%s: %s wants a number, got '%s'; hint: a number such as %s "
                           "(`glmtune train --help` lists the options)", where, d->name, v, d->def && *d->def ? d->def : "1.0");
        *(double *)field = x;
        break;
    }
    case GLM_OPT_BOOL:
        if (!parse_bool(v, (bool *)field))
            return glm_err(GLM_ERR_ARG, "%s: %s wants true or false, got '%s'; hint: true/false, yes/no, on/off or 1/0",
                           where, d->name, v);
        break;
    case GLM_OPT_STRING: {
        glm_ckpt_mode cm; /* gradient checkpointing: stored as its mode name (true -> full, false -> none) */
        if (!strcmp(d->name, "gradient-checkpointing") && glm_ckpt_parse_quiet(v) && glm_ckpt_parse(v, &cm) == GLM_OK)
            v = glm_ckpt_name(cm);
        char *s = strdup(v);
        if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
        free(*(char **)field);
        *(char **)field = s;
        break;
    }
    case GLM_OPT_LIST: {
        glm_strlist *l = field, nl = {0};
        for (const char *p = v;;) {
            const char *c = strchr(p, ',');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            glm_status st = list_push(&nl, p, n);
            if (st != GLM_OK) {
                list_free(&nl);
                return st;
            }
            if (!c) break;
            p = c + 1;
        }
        if (!nl.n) return glm_err(GLM_ERR_ARG, "%s: %s is empty", where, d->name);
        list_free(l);
        *l = nl;
        break;
    }
    }
    o->src[i] = (unsigned char)src;
    return GLM_OK;
}

static long find_opt(const char *name) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (strcmp(name, k_opts[i].name) == 0 || strcmp(name, k_opts[i].key) == 0 ||
            (k_opts[i].alias && strcmp(name, k_opts[i].alias) == 0))
            return (long)i;
    if (strcmp(name, "lora_target_modules") == 0) return find_opt("lora_target");
    return -1;
}

glm_status glm_opts_set(glm_train_opts *o, const char *name, const char *value, glm_opt_src src) {
    long i = find_opt(name);
    char hint[200];
    if (i < 0) return glm_err(GLM_ERR_ARG, "unknown option '%s'%s", name, suggest(name, strchr(name, '_') == NULL, hint, sizeof hint));
    return set_value(o, (size_t)i, value, src, "option");
}

void glm_opts_free(glm_train_opts *o) {
    free(o->stage);
    o->stage = NULL;
    free(o->tokenized_path);
    o->tokenized_path = NULL;
    for (size_t i = 0; i < N_OPTS; i++) {
        void *field = (char *)o + k_opts[i].offset;
        if (k_opts[i].type == GLM_OPT_STRING) {
            free(*(char **)field);
            *(char **)field = NULL;
        } else if (k_opts[i].type == GLM_OPT_LIST) {
            list_free(field);
        }
    }
}

glm_status glm_opts_defaults(glm_train_opts *o) {
    memset(o, 0, sizeof(*o));
    o->lora_alpha = NAN;
    for (size_t i = 0; i < N_OPTS; i++)
        if (k_opts[i].def) GLM_TRY(set_value(o, i, k_opts[i].def, GLM_SRC_DEFAULT, "default"));
    return GLM_OK;
}

/* ------------------------------------------------------------------ keys of any source */

/* A YAML / command-line null: the setting keeps its default. */
static bool is_null(const char *v) {
    return !*v || !strcmp(v, "null") || !strcmp(v, "~") || !strcmp(v, "None");
}

/* "Off" for a feature switch: false, 0, null, none, an empty list. */
static bool is_off(const char *v) {
    bool b;
    char *end;
    if (is_null(v) || !strcasecmp(v, "none") || !strcmp(v, "[]") || !strcmp(v, "{}")) return true;
    if (parse_bool(v, &b)) return !b;
    double x = strtod(v, &end);
    return !*end && x == 0;
}

/* lr_scheduler_kwargs: a JSON object (a YAML mapping is turned into one; on the command line, a
 * JSON string as transformers takes it) of min_lr / min_lr_rate, for the cosine schedules. */
static glm_status sched_kwargs(glm_train_opts *o, const char *text, glm_opt_src src, const char *where) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    glm_status st = GLM_OK;
    if (!json_is_object(j)) {
        st = glm_err(GLM_ERR_ARG, "%s: lr_scheduler_kwargs must be a mapping such as {\"min_lr_rate\": 0.1}, got '%s'",
                     where, text);
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (strcmp(k, "min_lr") && strcmp(k, "min_lr_rate")) {
                st = glm_err(GLM_ERR_UNSUPPORTED, "%s: lr_scheduler_kwargs: %s is not supported; glmtune takes min_lr "
                             "or min_lr_rate (the floor of the cosine schedules)", where, k);
                break;
            }
            if (!json_is_number(v)) {
                st = glm_err(GLM_ERR_ARG, "%s: lr_scheduler_kwargs: %s must be a number", where, k);
                break;
            }
            char num[40];
            snprintf(num, sizeof num, "%.17g", json_number_value(v));
            long i = find_opt(k);
            if (src == GLM_SRC_CONFIG && o->src[i] == GLM_SRC_CLI) continue; /* the command line wins */
            if ((st = set_value(o, (size_t)i, num, src, where)) != GLM_OK) break;
        }
    }
    json_decref(j);
    return st;
}

/* Keys with their own rule. *handled = false for any other key. */
static glm_status key_special(glm_train_opts *o, const char *key, const char *val, glm_opt_src src, const char *where,
                              bool *handled) {
    *handled = true;
    bool b;
    if (!strcmp(key, "fp16")) {
        if (is_off(val)) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s: fp16: %s is refused: fp16 LoRA training of GLM-4 is widely reported to "
                       "diverge (loss 0 or NaN); glmtune trains in bf16; hint: remove fp16 (bf16 is used)", where, val);
    }
    /* LLaMA-Factory's method keys on the command line: a pasted llamafactory-cli line (its defaults apply) */
    static const char *const lf_method[] = {"stage", "do_train", "finetuning_type"};
    for (size_t k = 0; k < sizeof lf_method / sizeof *lf_method; k++)
        if (src == GLM_SRC_CLI && !strcmp(key, lf_method[k]) && !o->lf_cli_key) o->lf_cli_key = lf_method[k];
    if (!strcmp(key, "stage")) {
        GLM_TRY(glm_stage_check(val, where));
        if (src == GLM_SRC_CONFIG && o->stage) return GLM_OK; /* the command line's wins */
        free(o->stage);
        o->stage = strdup(val);
        return o->stage ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    if (!strcmp(key, "tokenized_path")) { /* LLaMA-Factory trains from it when it exists (tokenized_path_note) */
        if (is_null(val) || (src == GLM_SRC_CONFIG && o->tokenized_path)) return GLM_OK; /* the command line's wins */
        free(o->tokenized_path);
        o->tokenized_path = strdup(val);
        o->tokenized_line = src == GLM_SRC_CONFIG ? o->yaml_line : 0;
        return o->tokenized_path ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    if (!strcmp(key, "neat_packing")) { /* LLaMA-Factory: packing without attention across documents */
        if (!parse_bool(val, &b) && !is_null(val))
            return glm_err(GLM_ERR_ARG, "%s: neat_packing wants true or false, got '%s'", where, val);
        if (is_null(val) || !b) return GLM_OK;
        o->neat_packing = true;
        long pi = find_opt("packing");
        if (!(src == GLM_SRC_CONFIG && o->src[pi] == GLM_SRC_CLI)) GLM_TRY(set_value(o, (size_t)pi, "true", src, where));
        glm_log_info("%s: neat_packing: true: packed rows whose documents never attend to each other, which is how "
                     "glmtune always packs", where);
        return GLM_OK;
    }
    if (!strcmp(key, "report_to")) {
        static const char *const ok[] = {"none", "tensorboard", "null", "None", "[]", ""};
        char list[256];
        snprintf(list, sizeof list, "%s", val);
        for (char *tok = strtok(list, ", []"); tok; tok = strtok(NULL, ", []")) {
            bool fine = false;
            for (size_t k = 0; k < sizeof ok / sizeof *ok; k++) fine |= !strcmp(tok, ok[k]);
            if (!fine) {
                glm_log_warn("%s: report_to: %s is not supported: glmtune sends nothing to %s; it writes metrics.jsonl, "
                             "TensorBoard events (output_dir/runs) and loss_curve.svg", where, tok, tok);
                return GLM_OK;
            }
        }
        glm_log_info("%s: report_to: %s: %s", where, val, glm_lf_why_track);
        return GLM_OK;
    }
    if (!strcmp(key, "do_train")) {
        if (parse_bool(val, &b) && b) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s: do_train: %s: `glmtune train` always trains", where, val);
    }
    if (!strcmp(key, "finetuning_type")) {
        if (!strcmp(val, "lora")) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s: finetuning_type: %s is not supported; glmtune trains LoRA adapters only",
                       where, val);
    }
    if (!strcmp(key, "disable_gradient_checkpointing")) { /* LLaMA-Factory's switch */
        if (!parse_bool(val, &b) && !is_null(val))
            return glm_err(GLM_ERR_ARG, "%s: disable_gradient_checkpointing wants true or false, got '%s'", where, val);
        if (is_null(val) || !b) return GLM_OK;
        long gi = find_opt("gradient-checkpointing");
        if (src == GLM_SRC_CONFIG && o->src[gi] == GLM_SRC_CLI) return GLM_OK; /* the command line wins */
        if (o->src[gi] == src)
            return glm_err(GLM_ERR_ARG, "%s: disable_gradient_checkpointing and gradient_checkpointing are both set; "
                           "hint: keep one", where);
        GLM_TRY(glm_opts_set(o, "gradient-checkpointing", "false", src));
        glm_log_info("%s: disable_gradient_checkpointing: true: gradient checkpointing is off", where);
        return GLM_OK;
    }
    if (!strcmp(key, "lr_scheduler_kwargs")) {
        if (is_null(val)) return GLM_OK;
        return sched_kwargs(o, val, src, where);
    }
    if (!strcmp(key, "use_cpu")) { /* transformers' switch: the CPU backend */
        if (!parse_bool(val, &b) && !is_null(val))
            return glm_err(GLM_ERR_ARG, "%s: use_cpu wants true or false, got '%s'", where, val);
        long di = find_opt("device");
        if (is_null(val) || !b || (src == GLM_SRC_CONFIG && o->src[di] == GLM_SRC_CLI)) return GLM_OK;
        return set_value(o, (size_t)di, "cpu", src, where);
    }
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(key, k_keys[i].key)) continue;
        switch (k_keys[i].kind) {
        case KEY_INFO:
            glm_log_info("%s: %s is not needed: %s", where, key, k_keys[i].why);
            return GLM_OK;
        case KEY_TOKENIZE:
            glm_log_info("%s: %s is a tokenize-time key: `glmtune tokenize --config FILE.yaml` reads it from the same "
                         "YAML (train reads the shards tokenize wrote)", where, key);
            return GLM_OK;
        case KEY_REFUSE:
            if (is_off(val)) {
                glm_log_info("%s: %s: %s: nothing to do (%s)", where, key, val, k_keys[i].why);
                return GLM_OK;
            }
            return glm_err(GLM_ERR_UNSUPPORTED, "%s: %s: %s is not supported: %s; hint: remove %s", where, key, val,
                           k_keys[i].why, key);
        }
    }
    *handled = false;
    return GLM_OK;
}

/* Sets table option i from a YAML key or a command-line flag. From YAML (src CONFIG), an option
 * already given on the command line is kept and one given twice in the file is an error. A null
 * keeps the default. resume_from_checkpoint: true -> "latest", false -> none, else a path.
 * warmup_steps below 1 is a ratio of the run's steps (transformers 5). */
static glm_status set_option(glm_train_opts *o, size_t i, const char *key, const char *val, glm_opt_src src,
                             const char *where) {
    const glm_opt_def *d = &k_opts[i];
    if (src == GLM_SRC_CONFIG && o->src[i] == GLM_SRC_CLI) return GLM_OK; /* the command line wins */
    if (src == GLM_SRC_CONFIG && o->src[i] == GLM_SRC_CONFIG)
        return glm_err(GLM_ERR_ARG, "%s: %s is set twice in the config (keys %s / %s)", where, d->key, d->key,
                       d->alias ? d->alias : key);
    o->line[i] = src == GLM_SRC_CONFIG ? o->yaml_line : 0;
    if (src == GLM_SRC_CLI && !*val) /* "--max-steps=" or "--max-steps ''": a value was meant */
        return glm_err(GLM_ERR_ARG, "%s: the value is empty; hint: give a value (--%s VALUE) or leave "
                       "the option out for its default", where, d->name);
    bool b;
    if (d->type == GLM_OPT_STRING && d->optional_value && (parse_bool(val, &b) || is_null(val))) {
        char *v = parse_bool(val, &b) && b ? strdup("latest") : NULL;
        free(*(char **)((char *)o + d->offset));
        *(char **)((char *)o + d->offset) = v;
        o->src[i] = (unsigned char)src;
        return GLM_OK;
    }
    if (is_null(val) && d->type != GLM_OPT_LIST) { /* explicit null: the default stays */
        o->src[i] = (unsigned char)src;
        return GLM_OK;
    }
    if (!strcmp(d->key, "logging_steps") || !strcmp(d->key, "save_steps") || !strcmp(d->key, "eval_steps")) {
        char *end;
        double x = strtod(val, &end);
        double *ratio = d->key[0] == 'l' ? &o->logging_ratio : d->key[0] == 's' ? &o->save_ratio : &o->eval_ratio;
        *ratio = 0;
        if (!*end && x > 0 && x < 1) { /* transformers: below 1, a ratio of the total training steps */
            *ratio = x;
            GLM_TRY(set_value(o, i, "0", src, where));
            glm_log_info("%s: %s %s is below 1: a ratio of the training steps (ceil(%s x steps)), as transformers "
                         "reads it", where, d->key, val, val);
            return GLM_OK;
        }
    }
    if (!strcmp(d->key, "warmup_steps")) {
        char *end;
        double x = strtod(val, &end);
        if (!*end && x > 0 && x < 1) { /* transformers 5: warmup_steps < 1 is a ratio of the total steps */
            long ri = find_opt("warmup_ratio");
            if (o->src[ri] == src && o->warmup_ratio > 0)
                return glm_err(GLM_ERR_ARG, "%s: warmup_steps %s (a ratio, being below 1) and warmup_ratio are both "
                               "set; hint: keep one", where, val);
            GLM_TRY(set_value(o, (size_t)ri, val, src, where));
            GLM_TRY(set_value(o, i, "0", src, where));
            glm_log_info("%s: warmup_steps %s is below 1: read as a ratio of the training steps (warmup_ratio %s), as "
                         "transformers 5 does", where, val, val);
            return GLM_OK;
        }
    }
    GLM_TRY(set_value(o, i, val, src, where));
    if (!strcmp(key, "cutoff_len"))
        glm_log_info("%s: cutoff_len is used as seq_len: the shards' row length must equal it", where);
    return GLM_OK;
}

/* One key from either source: a table option (kebab, snake or alias), a key with its own rule,
 * or a LLaMA-Factory / transformers key answered in one line. Unknown keys are errors with a
 * close suggestion. */
static glm_status apply_key(glm_train_opts *o, const char *key, const char *val, glm_opt_src src, const char *where,
                            bool kebab) {
    long i = find_opt(key);
    if (i >= 0) return set_option(o, (size_t)i, key, val, src, where);
    bool handled;
    GLM_TRY(key_special(o, key, val, src, where, &handled));
    if (handled) return GLM_OK;
    char hint[200];
    if (src == GLM_SRC_CLI)
        return glm_err(GLM_ERR_ARG, "unknown option %s%s", where, suggest_as(where + 2, kebab, true, hint, sizeof hint));
    return glm_err(GLM_ERR_ARG, "%s: unknown key '%s'%s", where, key, suggest(key, kebab, hint, sizeof hint));
}

/* ------------------------------------------------------------------ YAML */

glm_status glm_stage_check(const char *stage, const char *where) {
    static const struct {
        const char *stage, *what;
    } refused[] = {
        {"rm", "reward-model training (a value head scored on chosen/rejected pairs)"},
        {"ppo", "PPO reinforcement learning (a reward model, rollouts and a value head)"},
        {"dpo", "DPO preference optimisation (chosen/rejected pairs and a reference model)"},
        {"kto", "KTO preference optimisation (desirable/undesirable labels and a reference model)"},
    };
    if (!strcmp(stage, "sft") || !strcmp(stage, "pt")) return GLM_OK;
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (!strcmp(stage, refused[i].stage))
            return glm_err(GLM_ERR_UNSUPPORTED, "%s: stage: %s is refused: it is %s, and glmtune trains LoRA with the "
                           "causal language-model loss only; hint: use stage: sft (chat data) or stage: pt (plain text), "
                           "or LLaMA-Factory for %s", where, stage, refused[i].what, stage);
    return glm_err(GLM_ERR_UNSUPPORTED, "%s: stage: %s is not a LLaMA-Factory stage glmtune knows; hint: use sft (chat "
                   "data) or pt (plain text)", where, stage);
}

bool glm_opts_known_key(const char *key) {
    if (find_opt(key) >= 0) return true;
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(key, k_keys[i].key)) return true;
    for (size_t i = 0; i < N_SPECIAL; i++)
        if (!strcmp(key, k_special[i])) return true;
    return false;
}

/* One key of a training config: scalars and lists as the command line takes them; a mapping is
 * lr_scheduler_kwargs (numbers by name), or the value of a key glmtune does not use (deepspeed,
 * fsdp_config, ...: answered like any other key); for an option it is an error. */
static glm_status yaml_train_key(void *ctx, const char *path, int line, const char *key, const char *val, bool mapping) {
    glm_train_opts *o = ctx;
    if (mapping && !strcmp(key, "lr_scheduler_kwargs") && !val)
        return glm_err(GLM_ERR_FORMAT, "%s:%d: lr_scheduler_kwargs: a mapping of names to numbers, such as "
                       "{min_lr_rate: 0.1}", path, line);
    if (mapping && strcmp(key, "lr_scheduler_kwargs")) {
        if (find_opt(key) >= 0)
            return glm_err(GLM_ERR_FORMAT, "%s:%d: %s: a nested mapping is not a valid value", path, line, key);
        val = "{}";
    }
    char where[300];
    snprintf(where, sizeof where, "%s:%d", path, line);
    o->yaml_line = line;
    glm_status st = apply_key(o, key, val, GLM_SRC_CONFIG, where, false);
    o->yaml_line = 0;
    return st;
}

/* What a LLaMA-Factory YAML is for, from its keys: a training file, or one of the others (merge,
 * chat/inference, eval, predict, a v1 file), which `glmtune train` refuses with its equivalent. */
typedef struct {
    char export_dir[256], adapter[256], infer_backend[64], task[64], model_class[64], line_key[64];
    bool do_predict, do_train, stage, dataset, output_dir, template_, model;
    int line;
} yaml_kind;

static glm_status yaml_kind_key(void *ctx, const char *path, int line, const char *key, const char *val, bool mapping) {
    (void)path;
    (void)mapping;
    yaml_kind *k = ctx;
    const char *v = val ? val : "";
    bool b = false;
#define KEEP(name, buf)                                                                                                \
    if (!strcmp(key, name) && !is_null(v)) {                                                                           \
        snprintf(k->buf, sizeof k->buf, "%s", v);                                                                      \
        if (!k->line) k->line = line, snprintf(k->line_key, sizeof k->line_key, "%s", key);                            \
    }
    KEEP("export_dir", export_dir)
    KEEP("infer_backend", infer_backend)
    KEEP("task", task)
    KEEP("model_class", model_class)
#undef KEEP
    if (!strcmp(key, "adapter_name_or_path")) snprintf(k->adapter, sizeof k->adapter, "%s", v);
    if (!strcmp(key, "do_predict") && parse_bool(v, &b) && b) k->do_predict = true;
    if (!strcmp(key, "do_train") && parse_bool(v, &b) && b) k->do_train = true;
    k->stage |= !strcmp(key, "stage");
    k->dataset |= !strcmp(key, "dataset") || !strcmp(key, "train_dataset");
    k->output_dir |= !strcmp(key, "output_dir");
    k->template_ |= !strcmp(key, "template");
    k->model |= !strcmp(key, "model_name_or_path");
    return GLM_OK;
}

/* Refuses a YAML that is not for training (LLaMA-Factory's merge, inference, eval, predict and v1
 * files) with the glmtune equivalent, or says there is none yet. */
static glm_status yaml_check_kind(const char *path) {
    yaml_kind k;
    memset(&k, 0, sizeof k);
    GLM_TRY(glm_yaml_config_each(path, true, yaml_kind_key, &k));
    const char *ad = *k.adapter ? k.adapter : "<adapter_name_or_path>";
    if (*k.model_class)
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: model_class: %s: a LLaMA-Factory v1 file (model, peft_config, "
                       "train_dataset, micro_batch_size), which glmtune does not read; hint: write it with the keys of "
                       "LLaMA-Factory's examples/train_lora/*.yaml (model_name_or_path, stage: sft, finetuning_type: lora, "
                       "lora_rank, dataset, per_device_train_batch_size, ...)", path, k.line, k.model_class);
    if (*k.export_dir)
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: export_dir: %s: a LLaMA-Factory merge (export) file, not a training "
                       "one; glmtune's merge: glmtune export-adapter --checkpoint %s --merge -o %s", path, k.line,
                       k.export_dir, ad, k.export_dir);
    if (*k.task)
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: task: %s: a LLaMA-Factory benchmark evaluation file (llamafactory-cli "
                       "eval); glmtune has no benchmark evaluation yet (train's eval_strategy gives the eval loss on a val "
                       "split)", path, k.line, k.task);
    if (k.do_predict && !k.do_train)
        return glm_err(GLM_ERR_UNSUPPORTED, "%s: do_predict: true without do_train: a LLaMA-Factory prediction file "
                       "(generation over eval_dataset); glmtune has no prediction yet: generation is planned", path);
    bool template_only = !k.stage && !k.do_train && !k.dataset && !k.output_dir && (k.template_ || *k.adapter) && k.model;
    if (*k.infer_backend || template_only)
        return glm_err(GLM_ERR_UNSUPPORTED, "%s%s%s: a LLaMA-Factory chat / inference file (llamafactory-cli chat, webchat, "
                       "api): glmtune has no generation yet (it is planned); hint: serve the adapter %s with vLLM, or merge it "
                       "first: glmtune export-adapter --checkpoint %s --merge -o DIR", path,
                       *k.infer_backend ? ": infer_backend: " : " (model and template, nothing to train)",
                       *k.infer_backend ? k.infer_backend : "", ad, ad);
    return GLM_OK;
}

glm_status glm_opts_load_yaml(glm_train_opts *o, const char *path) {
    GLM_TRY(yaml_check_kind(path));
    return glm_yaml_config_each(path, true, yaml_train_key, o);
}

/* ------------------------------------------------------------------ command line */

/* The command line goes through the option engine (common/args.h), which reads the spellings
 * (--name value, --name=value, snake_case names, bare and negated bools, a bare
 * --resume-from-checkpoint / --gradient-checkpointing) with a table made from k_opts; every
 * value reaches set_option as text, as a YAML value does. */
typedef struct {
    glm_train_opts *o;
    const glm_arg_opt *tab; /* N_OPTS entries for k_opts, then --no-gradient-checkpointing */
} cli_ctx;

static glm_status cli_option(const glm_arg_opt *a, const char *flag, const char *value, void *user) {
    cli_ctx *c = user;
    size_t i = (size_t)(a - c->tab);
    if (i == N_OPTS) { /* the bool flag it was; --no-gradient-checkpointing=false changes nothing */
        bool b = true;
        glm_args_parse_bool(value, &b);
        return b ? glm_opts_set(c->o, "gradient-checkpointing", "none", GLM_SRC_CLI) : GLM_OK;
    }
    if (!strcmp(k_opts[i].name, "config")) return GLM_OK; /* read before the other options */
    return set_option(c->o, i, flag + 2, value, GLM_SRC_CLI, flag);
}

/* A name outside the table: a LLaMA-Factory / transformers key, as --key value, --key=value, or
 * a bare --key (true); answered by apply_key (used, not needed, refused, or unknown with a
 * suggestion). */
static glm_status cli_key(const char *flag, const char *value, int argc, char **argv, int *i, void *user) {
    cli_ctx *c = user;
    const char *name = flag + 2;
    char key[128];
    snprintf(key, sizeof key, "%s", name);
    for (char *q = key; *q; q++) *q = *q == '-' ? '_' : *q;
    const char *val = value ? value : (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2)) ? argv[++*i] : "true";
    return apply_key(c->o, key, val, GLM_SRC_CLI, flag, strchr(name, '_') == NULL);
}

/* The engine's table for k_opts: kebab name (the snake key matches it: the engine takes '_' for
 * '-'), the YAML alias, bool or value, and the value a bare option stands for. */
static void cli_table(glm_arg_opt *tab, cli_ctx *c) {
    for (size_t i = 0; i < N_OPTS; i++) {
        const glm_opt_def *d = &k_opts[i];
        tab[i] = (glm_arg_opt){.name = d->name, .alias = d->alias, .type = d->type == GLM_OPT_BOOL ? GLM_ARG_BOOL : GLM_ARG_STRING,
                               .metavar = type_name(d->type), .help = d->help, .hook = cli_option};
        if (!strcmp(d->name, "lora-target")) tab[i].alias = "lora_target_modules"; /* PEFT's name */
        if (d->optional_value) tab[i].bare = "latest";
        if (!strcmp(d->name, "gradient-checkpointing")) tab[i].bare = "full"; /* transformers' bare flag */
    }
    tab[N_OPTS] = (glm_arg_opt){.name = "no-gradient-checkpointing", .type = GLM_ARG_FLAG, .hook = cli_option,
                                .hidden = true};
    c->tab = tab;
}

/* LLaMA-Factory's / transformers' defaults for the options a YAML leaves out (source
 * GLM_SRC_LF). Values: transformers' TrainingArguments (training_args.py, 4.4x-4.5x: learning_rate
 * 5e-5, per_device_train_batch_size 8, logging_steps 500, save_steps 500, eval_strategy "no",
 * eval_steps None -> logging_steps, lr_scheduler_type linear, ...), LLaMA-Factory's
 * FinetuningArguments (lora_rank 8, lora_alpha None -> 2 x rank, lora_dropout 0, lora_target all)
 * and its parser's packing = (stage == "pt"). */
static glm_status lf_defaults(glm_train_opts *o) {
    static const struct {
        const char *key, *val;
    } d[] = {
        {"learning_rate", "5e-5"}, {"per_device_train_batch_size", "8"}, {"gradient_accumulation_steps", "1"},
        {"logging_steps", "500"}, {"save_steps", "500"}, {"save_total_limit", "0"}, {"logging_first_step", "false"},
        {"eval_strategy", "no"}, {"save_strategy", "steps"}, {"logging_strategy", "steps"},
        {"lr_scheduler_type", "linear"}, {"warmup_steps", "0"}, {"warmup_ratio", "0"}, {"weight_decay", "0"},
        {"adam_beta1", "0.9"}, {"adam_beta2", "0.999"}, {"adam_epsilon", "1e-8"}, {"max_grad_norm", "1.0"},
        {"num_train_epochs", "3.0"}, {"max_steps", "-1"}, {"seed", "42"}, {"optim", "adamw_torch"},
        {"lora_rank", "8"}, {"lora_dropout", "0"}, {"lora_target", "all"},
    };
    for (size_t k = 0; k < sizeof d / sizeof *d; k++) {
        long i = find_opt(d[k].key);
        if (o->src[i] == GLM_SRC_DEFAULT) GLM_TRY(set_value(o, (size_t)i, d[k].val, GLM_SRC_LF, "default"));
    }
    long pi = find_opt("packing");
    if (o->src[pi] == GLM_SRC_DEFAULT)
        GLM_TRY(set_value(o, (size_t)pi, o->stage && !strcmp(o->stage, "pt") ? "true" : "false", GLM_SRC_LF, "default"));
    long ei = find_opt("eval_steps"), li = find_opt("logging_steps");
    if (o->src[ei] == GLM_SRC_DEFAULT) { /* transformers: eval_steps defaults to logging_steps */
        o->eval_steps = o->logging_steps;
        o->eval_ratio = o->logging_ratio;
        o->src[ei] = GLM_SRC_LF;
    }
    (void)li;
    return GLM_OK;
}

/* tokenized_path, as LLaMA-Factory reads it: shards there (manifest.json) are the training data unless
 * the command line names --dataset; a path that does not exist yet is made by `glmtune tokenize --config`
 * (LLaMA-Factory tokenizes and saves there itself); anything else there is not read. One line says which. */
static glm_status tokenized_path_note(glm_train_opts *o) {
    const char *tp = o->tokenized_path;
    char where[300];
    if (o->tokenized_line) snprintf(where, sizeof where, "%s:%d: tokenized_path", o->config, o->tokenized_line);
    else snprintf(where, sizeof where, "--tokenized_path");
    long di = find_opt("data");
    char *man = glm_path_join(tp, "manifest.json");
    bool shards = man && glm_is_file(man);
    free(man);
    if (shards && o->src[di] == GLM_SRC_CLI && o->data && strcmp(o->data, tp)) {
        glm_log_info("%s: %s holds shards, but the command line's --dataset %s is read instead", where, tp, o->data);
    } else if (shards) {
        if (o->data && strcmp(o->data, tp))
            glm_log_info("%s: %s holds shards (manifest.json): train reads them, as LLaMA-Factory loads its "
                         "tokenized_path (dataset %s is not read again)", where, tp, o->data);
        else
            glm_log_info("%s: %s holds shards (manifest.json): train reads them", where, tp);
        GLM_TRY(set_value(o, (size_t)di, tp, o->tokenized_line ? GLM_SRC_CONFIG : GLM_SRC_CLI, where));
    } else if (access(tp, F_OK) != 0) {
        glm_log_info("%s: %s does not exist yet: LLaMA-Factory would tokenize the dataset and save it there; glmtune "
                     "tokenizes in its own step: `glmtune tokenize --config %s --model_name_or_path MODEL` writes the "
                     "shards to %s, which train then reads", where, tp, o->config ? o->config : "FILE.yaml", tp);
    } else {
        glm_log_warn("%s: %s holds no glmtune shards (no manifest.json; a dataset LLaMA-Factory saved is not read "
                     "here): not used; hint: `glmtune tokenize --config %s` writes shards there (to a new or empty "
                     "directory)", where, tp, o->config ? o->config : "FILE.yaml");
    }
    return GLM_OK;
}

/* The packing choice in one line: packed rows or batches of samples, and why (where the value came from). */
static void packing_note(const glm_train_opts *o) {
    long pi = find_opt("packing");
    const char *st = o->stage ? o->stage : "sft";
    const char *what = o->packing ? "micro-batches of packed rows (several samples per row; glmtune never lets a sample "
                                    "attend to another, LLaMA-Factory's packing without neat_packing does)"
                                  : "each micro-batch is per_device_train_batch_size samples, as LLaMA-Factory batches them";
    switch (o->src[pi]) {
    case GLM_SRC_LF:
        glm_log_info("packing: %s: LLaMA-Factory's default for stage %s (its parser sets packing = stage == pt when it is "
                     "unset): %s", o->packing ? "true" : "false", st, what);
        break;
    case GLM_SRC_DEFAULT:
        glm_log_info("packing: %s: glmtune's default on a command line without --config or LLaMA-Factory keys: %s; hint: "
                     "--packing false batches samples as LLaMA-Factory's SFT does", o->packing ? "true" : "false", what);
        break;
    default:
        glm_log_info("packing: %s: %s%s: %s", o->packing ? "true" : "false",
                     o->neat_packing ? "neat_packing " : "", o->src[pi] == GLM_SRC_CONFIG ? "set by the config" :
                     "set on the command line", what);
        break;
    }
}

glm_status glm_opts_parse(glm_train_opts *o, int argc, char **argv) {
    GLM_TRY(glm_opts_defaults(o));
    /* first --config, so that the command line overrides it */
    const char *config = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) return glm_err(GLM_ERR_ARG, "--config needs a file name");
            config = argv[i + 1];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            config = argv[i] + 9;
        }
    }
    if (config) {
        GLM_TRY(glm_opts_load_yaml(o, config));
        long ci = find_opt("config");
        GLM_TRY(set_value(o, (size_t)ci, config, GLM_SRC_CLI, "--config"));
    }
    glm_arg_opt tab[GLM_TRAIN_OPTS_MAX + 1];
    cli_ctx ctx = {o, NULL};
    cli_table(tab, &ctx);
    const glm_arg_cmd cmd = {.name = "train", .opts = tab, .n_opts = N_OPTS + 1, .unknown = cli_key, .user = &ctx,
                             .help_continues = true};
    GLM_TRY(glm_args_parse(&cmd, argc, argv, &o->help));
    if (!config && o->lf_cli_key && !o->help)
        glm_log_info("--%s: a llamafactory-cli line: what it leaves out takes LLaMA-Factory's / transformers' defaults, "
                     "as in a YAML (packing = stage == pt, per_device_train_batch_size 8, learning_rate 5e-5, "
                     "logging_steps 500, ...; the settings dump marks each)", o->lf_cli_key);
    if (config || o->lf_cli_key) GLM_TRY(lf_defaults(o));
    if (o->tokenized_path && !o->help) GLM_TRY(tokenized_path_note(o));
    if (!o->help) packing_note(o);
    return GLM_OK;
}

/* ------------------------------------------------------------------ validate, print, JSON */

static glm_status validate(glm_train_opts *o);

glm_status glm_opts_validate(glm_train_opts *o) {
    glm_status st = validate(o);
    /* a value the config gave, refused here ("--lr-scheduler-type 'cosin' is not known"), names its
     * file and line as a refused key does */
    const char *m = glm_errmsg();
    if (st && o->config && !strncmp(m, "--", 2)) {
        char name[64];
        size_t n = strcspn(m + 2, " =:'");
        long i = -1;
        if (n < sizeof name) {
            memcpy(name, m + 2, n);
            name[n] = 0;
            i = find_opt(name);
        }
        if (i >= 0 && o->src[i] == GLM_SRC_CONFIG && o->line[i] > 0)
            return glm_err_context(st, "%s:%d: %s", o->config, o->line[i], k_opts[i].key);
    }
    return st;
}

static glm_status validate(glm_train_opts *o) {
    /* paths name what they name: "runs/a/" is the directory runs/a (checkpoints, resume checks) */
    char **paths[] = {&o->model, &o->data, &o->output_dir, &o->eval_data, &o->init_adapter, &o->resume_from_checkpoint};
    static const char *const names[] = {"model", "data", "output-dir", "eval-data", "init-adapter", "resume-from-checkpoint"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        if (*paths[i] && !**paths[i]) return glm_err(GLM_ERR_ARG, "--%s is empty; hint: give a path", names[i]);
        glm_path_strip_slash(*paths[i]);
    }
    if (!o->model) return glm_err(GLM_ERR_ARG, "--model is required (the base checkpoint directory)");
    if (o->seq_len < 0 || o->seq_len > ((int64_t)1 << 30)) /* before the --data check, whose hint names --seq-len */
        return glm_err(GLM_ERR_ARG, "--seq-len must be in 0..1073741824 (2^30; 0: from the shards; got %lld)",
                       (long long)o->seq_len);
    if (!o->data && !(o->dry_run && o->seq_len > 0))
        return glm_err(GLM_ERR_ARG, "--data is required (shards from `glmtune tokenize`)%s",
                       o->dry_run ? "; hint: or --seq-len T for a dry run without shards" : "");
    if (!o->output_dir && !o->dry_run)
        return glm_err(GLM_ERR_ARG, "--output-dir is required; hint: --output-dir runs/a (or output_dir: in the YAML), "
                       "where the checkpoints, metrics and the adapter go; --dry-run needs none");
#define NEED(cond, ...) \
    if (!(cond)) return glm_err(GLM_ERR_ARG, __VA_ARGS__)
    NEED(o->per_device_train_batch_size >= 1, "--per-device-train-batch-size must be >= 1 (got %lld)",
         (long long)o->per_device_train_batch_size);
    NEED(o->seed >= 0, "--seed: expected a non-negative integer, got %lld (glmtune tokenize refuses it too); hint: "
         "--seed 42", (long long)o->seed);
    NEED(o->gradient_accumulation_steps >= 1, "--gradient-accumulation-steps must be >= 1 (got %lld)",
         (long long)o->gradient_accumulation_steps);
    NEED(o->learning_rate > 0, "--learning-rate must be > 0 (got %g)", o->learning_rate);
    static const char *scheds[] = {"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr"};
    bool ok = false;
    for (int i = 0; i < 5; i++) ok |= strcmp(o->lr_scheduler_type, scheds[i]) == 0;
    NEED(ok, "--lr-scheduler-type '%s' is not known; hint: constant, constant_with_warmup, linear, cosine, "
             "cosine_with_min_lr", o->lr_scheduler_type);
    NEED(o->warmup_steps >= 0, "--warmup-steps must be >= 0");
    NEED(o->warmup_ratio >= 0 && o->warmup_ratio <= 1, "--warmup-ratio must be in [0, 1] (got %g)", o->warmup_ratio);
    NEED(o->min_lr >= 0 && (o->min_lr == 0 || o->min_lr < o->learning_rate),
         "--min-lr must be >= 0 and below --learning-rate (got %g)", o->min_lr);
    NEED(o->min_lr_rate >= 0 && o->min_lr_rate < 1, "--min-lr-rate must be in [0, 1) (got %g)", o->min_lr_rate);
    NEED(!(o->min_lr > 0 && o->min_lr_rate > 0),
         "min_lr (%g) and min_lr_rate (%g) are both set; hint: give one (transformers' cosine_with_min_lr takes one)",
         o->min_lr, o->min_lr_rate);
    if ((o->min_lr > 0 || o->min_lr_rate > 0) && strncmp(o->lr_scheduler_type, "cosine", 6))
        glm_log_warn("min_lr / min_lr_rate set the floor of the cosine schedules; lr_scheduler_type %s does not use "
                     "them", o->lr_scheduler_type);
    static const char *optims[] = {"adamw_torch", "adamw_torch_fused", "adamw_hf"};
    bool optim_ok = false;
    for (int i = 0; i < 3; i++) optim_ok |= strcmp(o->optim, optims[i]) == 0;
    if (!optim_ok)
        return glm_err(GLM_ERR_UNSUPPORTED, "optim '%s' is not supported: glmtune runs AdamW with torch.optim.AdamW's "
                       "update (adamw_torch, adamw_torch_fused and adamw_hf all mean that here); hint: optim: "
                       "adamw_torch", o->optim);
    NEED(o->loraplus_lr_ratio >= 0, "--loraplus-lr-ratio must be >= 0 (got %g; 0 turns LoRA+ off)", o->loraplus_lr_ratio);
    NEED(o->weight_decay >= 0, "--weight-decay must be >= 0 (got %g)", o->weight_decay);
    NEED(o->adam_beta1 >= 0 && o->adam_beta1 < 1, "--adam-beta1 must be in [0, 1) (got %g; transformers' default 0.9)",
         o->adam_beta1);
    NEED(o->adam_beta2 >= 0 && o->adam_beta2 < 1, "--adam-beta2 must be in [0, 1) (got %g; transformers' default 0.999)",
         o->adam_beta2);
    NEED(o->adam_epsilon > 0, "--adam-epsilon must be > 0 (got %g; transformers' default 1e-8)", o->adam_epsilon);
    NEED(o->max_grad_norm >= 0, "--max-grad-norm must be >= 0 (got %g; 0 disables clipping)", o->max_grad_norm);
    if (o->max_steps == 0) o->max_steps = -1; /* as transformers: max_steps <= 0 trains by epochs */
    NEED(o->max_steps > 0 || (o->max_steps == -1 && o->num_train_epochs > 0),
         "set --max-steps > 0 or --num-train-epochs > 0 (max-steps %lld, epochs %g)", (long long)o->max_steps,
         o->num_train_epochs);
    NEED(o->save_steps >= 1 || o->save_ratio > 0, "--save-steps must be >= 1 (or a ratio of the steps in (0, 1))");
    NEED(o->save_total_limit >= 0, "--save-total-limit must be >= 0 (0 keeps all)");
    NEED(o->logging_steps >= 1 || o->logging_ratio > 0, "--logging-steps must be >= 1 (or a ratio of the steps in (0, 1))");
    NEED(o->eval_steps >= 0, "--eval-steps must be >= 0");
    {
        char *const strat[3] = {o->save_strategy, o->eval_strategy, o->logging_strategy};
        static const char *const sname[3] = {"save-strategy", "eval-strategy", "logging-strategy"};
        for (int k = 0; k < 3; k++)
            NEED(strat[k] && (!strcmp(strat[k], "steps") || !strcmp(strat[k], "epoch") || !strcmp(strat[k], "no")),
                 "--%s '%s' is not known; hint: steps, epoch or no (transformers' IntervalStrategy%s)", sname[k],
                 strat[k] ? strat[k] : "", k == 0 ? "; \"best\" is not supported" : "");
    }
    NEED(o->lora_rank >= 1 && o->lora_rank <= 4096, "--lora-rank must be in 1..4096 (got %lld)", (long long)o->lora_rank);
    if (isnan(o->lora_alpha)) o->lora_alpha = 2.0 * (double)o->lora_rank;
    NEED(o->lora_alpha > 0, "--lora-alpha must be > 0 (got %g; the default is twice the rank)", o->lora_alpha);
    NEED(o->lora_dropout >= 0 && o->lora_dropout < 1, "--lora-dropout must be in [0, 1) (got %g; 0 turns dropout off, "
         "LLaMA-Factory's default)", o->lora_dropout);
    NEED(strcmp(o->device, "auto") == 0 || strcmp(o->device, "cpu") == 0 || strcmp(o->device, "cuda") == 0,
         "--device '%s' is not known; hint: auto, cpu or cuda", o->device);
    NEED(o->max_nonfinite >= 1, "--max-nonfinite must be >= 1");
    NEED(o->rope_theta >= 0, "--rope-theta must be >= 0 (0: from config.json)");
    NEED(o->quantization_bit == 0 || o->quantization_bit == 4,
         "--quantization-bit %lld: glmtune quantizes the frozen base to 4 bits (QLoRA) or not at all (0); 8-bit is not "
         "offered (hint: 4, or 0 for the bf16 base)", (long long)o->quantization_bit);
    NEED(!strcmp(o->quantization_type, "nf4") || !strcmp(o->quantization_type, "fp4"),
         "--quantization-type %s: expected nf4 or fp4", o->quantization_type);
    NEED(!strcmp(o->base_dtype, "bf16") || !strcmp(o->base_dtype, "fp8"),
         "--base-dtype %s: expected bf16 or fp8", o->base_dtype);
    NEED(strcmp(o->base_dtype, "fp8") || o->quantization_bit == 0,
         "--base-dtype fp8 with --quantization-bit %lld: both set the frozen base's format; hint: one of them (the 9B "
         "model's weights on the GPU: fp8 10.2 GiB and the fastest step, 4-bit 6.7 GiB)", (long long)o->quantization_bit);
    NEED(strcmp(o->base_dtype, "fp8") || !o->shard_base,
         "--base-dtype fp8 with --shard-base: the fp8 base is not sharded yet; hint: drop --shard-base (the fp8 base "
         "is about 10 GiB for the 9B model), or --base-dtype bf16");
    NEED(!strcmp(o->quantization_method, "bnb") || !strcmp(o->quantization_method, "bitsandbytes"),
         "--quantization-method %s: glmtune quantizes in bitsandbytes' 4-bit format only (bnb); GPTQ, AWQ, HQQ and EETQ "
         "checkpoints are not read (hint: quantization_method: bnb with the bf16 checkpoint)", o->quantization_method);
    {
        glm_ckpt_mode cm;
        GLM_TRY(glm_ckpt_parse(o->gradient_checkpointing, &cm));
    }
    NEED(o->max_gpu_memory >= 0 && isfinite(o->max_gpu_memory), "--max-gpu-memory must be >= 0 GiB (0: all the GPU has)");
    NEED(o->nproc >= 0 && o->nproc <= 4096, "--nproc must be between 0 and 4096 (got %lld)", (long long)o->nproc);
    NEED(!(o->nproc > 0 && o->gpus), "--nproc (CPU ranks) and --gpus (GPU workers) exclude each other; hint: --gpus N "
         "for GPUs, --device cpu --nproc N for CPU ranks");
    NEED(!(o->nproc > 0 && strcmp(o->device, "cuda") == 0), "--nproc starts CPU ranks; hint: --gpus N with --device cuda");
    NEED(!(o->gpus && strcmp(o->device, "cpu") == 0), "--gpus starts GPU workers; hint: --device cpu --nproc N for CPU ranks");
    NEED(o->comm_timeout > 0 && isfinite(o->comm_timeout), "--comm-timeout (ddp_timeout) must be > 0 seconds");
    NEED(o->interconnect_gbps >= 0 && isfinite(o->interconnect_gbps), "--interconnect-gbps must be >= 0 GB/s (0: the named defaults)");
    NEED(o->gpu_tflops >= 0 && isfinite(o->gpu_tflops), "--gpu-tflops must be >= 0 TFLOP/s (0: the default)");
    NEED(o->context_parallel >= 1 && o->context_parallel <= 4096, "--context-parallel must be between 1 and 4096 ranks "
         "(got %lld; 1: off)", (long long)o->context_parallel);
    NEED(!(o->context_parallel > 1 && o->nproc > 0 && o->nproc % o->context_parallel),
         "--context-parallel %lld does not divide the %lld ranks of --nproc; hint: --nproc %lld (or a multiple of it)",
         (long long)o->context_parallel, (long long)o->nproc, (long long)o->context_parallel);
    if (o->gpus) {
        const char *p = o->gpus;
        int ok = *p != 0;
        for (; *p; p++) ok &= (*p >= '0' && *p <= '9') || *p == ',';
        NEED(ok && o->gpus[strlen(o->gpus) - 1] != ',' && o->gpus[0] != ',' && !strstr(o->gpus, ",,") && strcmp(o->gpus, "0"),
             "--gpus '%s': expected a number of GPUs (2) or a comma-separated list of device ids (0,2,3)", o->gpus);
    }
    NEED(!o->rope_inv_freq_dtype || !strcmp(o->rope_inv_freq_dtype, "float32") ||
             !strcmp(o->rope_inv_freq_dtype, "bfloat16"),
         "--rope-inv-freq-dtype must be float32 or bfloat16");
#undef NEED
    return GLM_OK;
}

static json_t *value_json(const glm_train_opts *o, size_t i) {
    const glm_opt_def *d = &k_opts[i];
    const void *field = (const char *)o + d->offset;
    double ratio = !strcmp(d->key, "logging_steps") ? o->logging_ratio : !strcmp(d->key, "save_steps") ? o->save_ratio
                 : !strcmp(d->key, "eval_steps")    ? o->eval_ratio : 0;
    if (ratio > 0) return json_real(ratio); /* a ratio of the run's steps */
    switch (d->type) {
    case GLM_OPT_INT: return json_integer(*(const int64_t *)field);
    case GLM_OPT_FLOAT: {
        double v = *(const double *)field;
        return isfinite(v) ? json_real(v) : json_null();
    }
    case GLM_OPT_BOOL: return json_boolean(*(const bool *)field);
    case GLM_OPT_STRING: {
        const char *s = *(char *const *)field;
        return s ? json_string(s) : json_null();
    }
    case GLM_OPT_LIST: {
        const glm_strlist *l = field;
        json_t *a = json_array();
        for (size_t k = 0; a && k < l->n; k++) json_array_append_new(a, json_string(l->v[k]));
        return a;
    }
    }
    return json_null();
}

json_t *glm_opts_to_json(const glm_train_opts *o) {
    json_t *obj = json_object();
    for (size_t i = 0; obj && i < N_OPTS; i++) json_object_set_new(obj, k_opts[i].key, value_json(o, i));
    return obj;
}

void glm_opts_print(FILE *f, const glm_train_opts *o) {
    static const char *srcs[] = {"default", "config", "command line", "LLaMA-Factory/transformers default"};
    for (size_t i = 0; i < N_OPTS; i++) {
        json_t *v = value_json(o, i);
        char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(12)) : NULL;
        fprintf(f, "  %-28s = %-24s (%s)\n", k_opts[i].key, s ? s : "?", srcs[o->src[i] < 4 ? o->src[i] : 0]);
        free(s);
        json_decref(v);
    }
}

void glm_opts_help(FILE *f) {
    fprintf(f, "Options: --kebab-case or --snake_case (--learning_rate), --name value or --name=value; the same\n"
               "snake_case keys (and aliases) in --config FILE.yaml; flags override the file. LLaMA-Factory and\n"
               "transformers keys that glmtune does not use are accepted with one line saying why (or pointing to\n"
               "`glmtune tokenize --config` for the data keys), or refused with the reason.\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        const glm_opt_def *d = &k_opts[i];
        char head[96], text[2048];
        if (d->type == GLM_OPT_BOOL)
            snprintf(head, sizeof head, "--%s, --no-%s", d->name, d->name);
        else if (d->optional_value)
            snprintf(head, sizeof head, "--%s [%s]", d->name, d->unit[0] ? d->unit : type_name(d->type));
        else
            snprintf(head, sizeof head, "--%s %s", d->name, d->unit[0] ? d->unit : type_name(d->type));
        int n = snprintf(text, sizeof text, "%s", d->help);
        if (d->unit[0] && d->type != GLM_OPT_STRING && n >= 0 && (size_t)n < sizeof text)
            n += snprintf(text + n, sizeof text - (size_t)n, " [%s]", d->unit);
        if (n >= 0 && (size_t)n < sizeof text)
            n += snprintf(text + n, sizeof text - (size_t)n, " (default: %s",
                          d->def ? d->def : (strcmp(d->name, "lora-alpha") == 0 ? "2 x lora-rank" : "none"));
        if (d->alias && n >= 0 && (size_t)n < sizeof text)
            n += snprintf(text + n, sizeof text - (size_t)n, "; YAML also %s", d->alias);
        if (n >= 0 && (size_t)n < sizeof text) snprintf(text + n, sizeof text - (size_t)n, ")");
        glm_args_help_entry(f, head, text, 6, 100); /* the layout of every command's help, the text below its flag */
    }
}
