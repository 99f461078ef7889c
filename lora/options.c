#define _GNU_SOURCE
/* lora/options.c: the train options table, command line and YAML parsing (see options.h). */
#include "lora/options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/log.h"

#define OFF(f) offsetof(glm_train_opts, f)

static const glm_opt_def k_opts[] = {
    {"model", "model", "model_name_or_path", GLM_OPT_STRING, NULL, "path",
     "base checkpoint directory (safetensors + config.json; THUDM chatglm or -hf layout)", OFF(model), false},
    {"data", "data", "dataset", GLM_OPT_STRING, NULL, "path",
     "tokenized training shards from `glmtune tokenize` (directory or manifest.json)", OFF(data), false},
    {"output-dir", "output_dir", NULL, GLM_OPT_STRING, NULL, "path",
     "where checkpoints, metrics.jsonl, loss_curve.svg and TensorBoard events go", OFF(output_dir), false},
    {"per-device-train-batch-size", "per_device_train_batch_size", NULL, GLM_OPT_INT, "1", "rows",
     "micro-batch: packed rows per GPU per forward/backward", OFF(per_device_train_batch_size), false},
    {"gradient-accumulation-steps", "gradient_accumulation_steps", NULL, GLM_OPT_INT, "1", "micro-batches",
     "micro-batches per optimizer step (global batch = this x micro-batch x GPUs)",
     OFF(gradient_accumulation_steps), false},
    {"learning-rate", "learning_rate", NULL, GLM_OPT_FLOAT, "1e-4", "", "peak AdamW learning rate",
     OFF(learning_rate), false},
    {"lr-scheduler-type", "lr_scheduler_type", NULL, GLM_OPT_STRING, "linear", "",
     "constant | constant_with_warmup | linear | cosine | cosine_with_min_lr (as transformers)",
     OFF(lr_scheduler_type), false},
    {"warmup-steps", "warmup_steps", NULL, GLM_OPT_INT, "0", "steps",
     "linear warmup length; overrides warmup-ratio when > 0", OFF(warmup_steps), false},
    {"warmup-ratio", "warmup_ratio", NULL, GLM_OPT_FLOAT, "0", "fraction",
     "warmup as a fraction of all optimizer steps (ceil(ratio x steps))", OFF(warmup_ratio), false},
    {"min-lr", "min_lr", NULL, GLM_OPT_FLOAT, "0", "", "floor of the cosine schedules (0: decay to 0)",
     OFF(min_lr), false},
    {"weight-decay", "weight_decay", NULL, GLM_OPT_FLOAT, "0", "", "AdamW decoupled weight decay",
     OFF(weight_decay), false},
    {"adam-beta1", "adam_beta1", NULL, GLM_OPT_FLOAT, "0.9", "", "AdamW beta1", OFF(adam_beta1), false},
    {"adam-beta2", "adam_beta2", NULL, GLM_OPT_FLOAT, "0.999", "", "AdamW beta2", OFF(adam_beta2), false},
    {"adam-epsilon", "adam_epsilon", NULL, GLM_OPT_FLOAT, "1e-8", "", "AdamW epsilon", OFF(adam_epsilon), false},
    {"max-grad-norm", "max_grad_norm", NULL, GLM_OPT_FLOAT, "1.0", "",
     "clip the global gradient L2 norm to this (0: no clipping)", OFF(max_grad_norm), false},
    {"num-train-epochs", "num_train_epochs", NULL, GLM_OPT_FLOAT, "3.0", "epochs",
     "passes over the training data (fractional allowed); ignored when max-steps > 0",
     OFF(num_train_epochs), false},
    {"max-steps", "max_steps", NULL, GLM_OPT_INT, "-1", "steps",
     "total optimizer steps; -1: from num-train-epochs", OFF(max_steps), false},
    {"save-steps", "save_steps", NULL, GLM_OPT_INT, "500", "steps", "save a checkpoint every N optimizer steps",
     OFF(save_steps), false},
    {"save-total-limit", "save_total_limit", NULL, GLM_OPT_INT, "0", "checkpoints",
     "keep only the newest N checkpoints (0: keep all)", OFF(save_total_limit), false},
    {"logging-steps", "logging_steps", NULL, GLM_OPT_INT, "10", "steps",
     "log loss / grad norm / lr every N optimizer steps", OFF(logging_steps), false},
    {"eval-data", "eval_data", "eval_dataset", GLM_OPT_STRING, NULL, "path",
     "tokenized evaluation shards (optional)", OFF(eval_data), false},
    {"eval-steps", "eval_steps", NULL, GLM_OPT_INT, "0", "steps",
     "evaluate every N optimizer steps (0: with each checkpoint save)", OFF(eval_steps), false},
    {"seed", "seed", NULL, GLM_OPT_INT, "42", "", "seed of the data order, LoRA init and dropout", OFF(seed), false},
    {"gradient-checkpointing", "gradient_checkpointing", NULL, GLM_OPT_BOOL, "true", "",
     "recompute each layer's activations in backward (less memory, ~30% more time)",
     OFF(gradient_checkpointing), false},
    {"resume-from-checkpoint", "resume_from_checkpoint", NULL, GLM_OPT_STRING, NULL, "path",
     "resume from a checkpoint directory; without a value (or \"latest\"): the newest in output-dir",
     OFF(resume_from_checkpoint), true},
    {"lora-rank", "lora_rank", NULL, GLM_OPT_INT, "8", "", "LoRA rank r", OFF(lora_rank), false},
    {"lora-alpha", "lora_alpha", NULL, GLM_OPT_FLOAT, NULL, "",
     "LoRA alpha; scaling = alpha / r (default 2 x lora-rank)", OFF(lora_alpha), false},
    {"lora-dropout", "lora_dropout", NULL, GLM_OPT_FLOAT, "0", "probability", "dropout on the LoRA input",
     OFF(lora_dropout), false},
    {"lora-target", "lora_target", NULL, GLM_OPT_LIST, "all", "",
     "modules to adapt, comma-separated (all, or e.g. query_key_value,dense / q_proj,v_proj)",
     OFF(lora_target), false},
    {"use-rslora", "use_rslora", NULL, GLM_OPT_BOOL, "false", "", "rank-stabilised scaling alpha / sqrt(r)",
     OFF(use_rslora), false},
    {"overwrite-output-dir", "overwrite_output_dir", NULL, GLM_OPT_BOOL, "false", "",
     "start afresh in an output-dir that holds an earlier run (its checkpoints, metrics and events are "
     "removed); without it such a directory is refused unless resuming", OFF(overwrite_output_dir), false},
    {"init-adapter", "init_adapter", "adapter_name_or_path", GLM_OPT_STRING, NULL, "path",
     "start from this PEFT adapter instead of a fresh LoRA", OFF(init_adapter), false},
    {"device", "device", NULL, GLM_OPT_STRING, "auto", "", "auto | cpu | cuda", OFF(device), false},
    {"seq-len", "seq_len", "cutoff_len", GLM_OPT_INT, "0", "tokens",
     "expected packed row length T (0: take it from the shards; else must match them)", OFF(seq_len), false},
    {"dump-grads", "dump_grads", NULL, GLM_OPT_STRING, NULL, "path",
     "write the first step's LoRA gradients to this safetensors file (debugging)", OFF(dump_grads), false},
    {"max-nonfinite", "max_nonfinite", NULL, GLM_OPT_INT, "5", "steps",
     "stop after this many optimizer steps in a row with a NaN/inf loss or gradient (each is skipped)",
     OFF(max_nonfinite), false},
    {"rope-theta", "rope_theta", NULL, GLM_OPT_FLOAT, "0", "",
     "RoPE base override (0: from config.json). Real GLM-4 -hf configs carry a wrong rope_theta of 10000: "
     "use 1e8 for glm-4-9b-chat-1m, 5e6 for glm-4-9b-chat", OFF(rope_theta), false},
    {"rope-inv-freq-dtype", "rope_inv_freq_dtype", NULL, GLM_OPT_STRING, "float32", "",
     "float32 (the table transformers builds on load) | bfloat16 (the table after model.to(torch.bfloat16), "
     "as a model cast to bf16 in transformers uses it)", OFF(rope_inv_freq_dtype), false},
    {"config", "config", NULL, GLM_OPT_STRING, NULL, "path",
     "YAML file of snake_case settings (LLaMA-Factory style); command-line flags override it",
     OFF(config), false},
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])
_Static_assert(N_OPTS <= 64, "glm_train_opts.src is too small");

/* LLaMA-Factory / transformers keys glmtune accepts in a YAML file without using them. */
static const struct {
    const char *key;
    const char *why;
} k_ignored[] = {
    {"template", "glmtune renders the GLM-4 chat format when tokenizing"},
    {"overwrite_cache", "there is no dataset cache; shards come from glmtune tokenize"},
    {"plot_loss", "loss_curve.svg is always written"},
    {"bf16", "the CUDA backend always computes in bf16 with fp32 LoRA weights"},
    {"pure_bf16", "the CUDA backend always computes in bf16 with fp32 LoRA weights"},
    {"ddp_timeout", "multi-GPU runs use NCCL directly"},
    {"report_to", "metrics.jsonl and TensorBoard events are always written"},
    {"preprocessing_num_workers", "tokenizing is a separate step (glmtune tokenize)"},
    {"dataloader_num_workers", "the loader reads packed shards directly"},
    {"dataset_dir", "give the tokenized shards with data"},
    {"max_samples", "select samples when tokenizing"},
    {"val_size", "give evaluation shards with eval-data"},
    {"train_on_prompt", "targets are chosen when tokenizing (glmtune tokenize --config)"},
    {"mask_history", "targets are chosen when tokenizing (glmtune tokenize --config)"},
    {"tokenized_path", "glmtune tokenize --config writes the shards there; give them with data"},
    {"per_device_eval_batch_size", "evaluation uses the training micro-batch size"},
    {"eval_strategy", "evaluation runs every eval-steps"},
    {"evaluation_strategy", "evaluation runs every eval-steps"},
    {"save_strategy", "checkpoints are saved every save-steps"},
    {"do_eval", "evaluation runs when eval-data is given"},
    {"logging_dir", "logs go to output-dir"},
    {"trust_remote_code", "no Python code is run"},
    {"flash_attn", "glmtune uses its own attention kernels"},
    {"save_only_model", "checkpoints always hold the optimizer state (small for LoRA)"},
    {"packing", "rows are always packed without cross-document attention"},
    {"neat_packing", "rows are always packed without cross-document attention"},
    {"run_name", "not used"},
    {"deepspeed", "glmtune replicates the frozen base and all-reduces LoRA gradients with NCCL"},
    {"logging_first_step", "not used"},
    {"disable_tqdm", "progress is shown only on a terminal"},
    {"lora_target_modules", NULL}, /* handled as an alias below; listed for suggestions */
};
#define N_IGNORED (sizeof k_ignored / sizeof k_ignored[0])

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

size_t glm_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = malloc((lb + 1) * sizeof(size_t));
    if (!row) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

/* The closest known name: kebab flags when `kebab`, else snake keys, aliases and ignored keys. */
static const char *closest(const char *s, bool kebab) {
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < N_OPTS; i++) {
        const char *cands[2] = {kebab ? k_opts[i].name : k_opts[i].key, kebab ? NULL : k_opts[i].alias};
        for (int k = 0; k < 2; k++) {
            if (!cands[k]) continue;
            size_t d = glm_edit_distance(s, cands[k]);
            if (d < bd) {
                bd = d;
                best = cands[k];
            }
        }
    }
    for (size_t i = 0; !kebab && i < N_IGNORED; i++) {
        size_t d = glm_edit_distance(s, k_ignored[i].key);
        if (d < bd) {
            bd = d;
            best = k_ignored[i].key;
        }
    }
    return best;
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

static bool parse_bool(const char *v, bool *out) {
    static const char *t[] = {"true", "yes", "on", "1"}, *f[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, t[i]) == 0) return *out = true, true;
        if (strcasecmp(v, f[i]) == 0) return *out = false, true;
    }
    return false;
}

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
            return glm_err(GLM_ERR_ARG, "%s: %s wants an integer, got '%s'", where, d->name, v);
        *(int64_t *)field = x;
        break;
    }
    case GLM_OPT_FLOAT: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return glm_err(GLM_ERR_ARG, "%s: %s wants a number, got '%s'", where, d->name, v);
        *(double *)field = x;
        break;
    }
    case GLM_OPT_BOOL:
        if (!parse_bool(v, (bool *)field))
            return glm_err(GLM_ERR_ARG, "%s: %s wants true or false, got '%s'", where, d->name, v);
        break;
    case GLM_OPT_STRING: {
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
    if (i < 0)
        return glm_err(GLM_ERR_ARG, "unknown option '%s'; hint: did you mean '%s'?", name,
                       closest(name, strchr(name, '_') == NULL));
    return set_value(o, (size_t)i, value, src, "option");
}

void glm_opts_free(glm_train_opts *o) {
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

/* ------------------------------------------------------------------ YAML */

static glm_status yaml_special(glm_train_opts *o, const char *path, int line, const char *key, const char *val,
                               bool *handled) {
    *handled = true;
    bool b;
    if (strcmp(key, "fp16") == 0) {
        if (parse_bool(val, &b) && !b) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED,
                       "%s:%d: fp16: %s is refused: fp16 LoRA training of GLM-4 is widely reported to "
                       "diverge (loss 0 or NaN); glmtune trains in bf16; hint: remove fp16 (bf16 is used)",
                       path, line, val);
    }
    if (strcmp(key, "stage") == 0) return glm_stage_check(val, path, line);
    if (strcmp(key, "do_train") == 0) {
        if (parse_bool(val, &b) && b) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: do_train: %s: `glmtune train` always trains", path, line, val);
    }
    if (strcmp(key, "finetuning_type") == 0) {
        if (strcmp(val, "lora") == 0) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: finetuning_type: %s is not supported; glmtune trains "
                                            "LoRA adapters only", path, line, val);
    }
    if (strcmp(key, "quantization_bit") == 0 || strcmp(key, "use_dora") == 0 ||
        strcmp(key, "pissa_init") == 0) {
        if (parse_bool(val, &b) && !b) return GLM_OK;
        if (strcmp(val, "null") == 0 || strcmp(val, "~") == 0 || !*val) return GLM_OK;
        return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: %s: %s is not supported (plain LoRA on a bf16 base)",
                       path, line, key, val);
    }
    for (size_t i = 0; i < N_IGNORED; i++)
        if (k_ignored[i].why && strcmp(key, k_ignored[i].key) == 0) {
            glm_log_info("%s:%d: %s: ignored (%s)", path, line, key, k_ignored[i].why);
            return GLM_OK;
        }
    *handled = false;
    return GLM_OK;
}

glm_status glm_stage_check(const char *stage, const char *path, int line) {
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
            return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: stage: %s is refused: it is %s, and glmtune trains "
                           "LoRA with the causal language-model loss only; hint: use stage: sft (chat "
                           "data) or stage: pt (plain text), or LLaMA-Factory for %s", path, line, stage,
                           refused[i].what, stage);
    return glm_err(GLM_ERR_UNSUPPORTED, "%s:%d: stage: %s is not a LLaMA-Factory stage glmtune knows; hint: "
                   "use sft (chat data) or pt (plain text)", path, line, stage);
}

bool glm_opts_known_key(const char *key) {
    static const char *const special[] = {"fp16", "stage", "do_train", "finetuning_type", "quantization_bit",
                                          "use_dora", "pissa_init"};
    if (find_opt(key) >= 0) return true;
    for (size_t i = 0; i < N_IGNORED; i++)
        if (!strcmp(key, k_ignored[i].key)) return true;
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        if (!strcmp(key, special[i])) return true;
    return false;
}

glm_status glm_opts_load_yaml(glm_train_opts *o, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return glm_err(GLM_ERR_IO, "%s: cannot open the config: %s", path, strerror(errno));
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return glm_err(GLM_ERR_NOMEM, "out of memory (YAML parser)");
    }
    yaml_parser_set_input_file(&p, f);
    glm_status st = GLM_OK;
    if (!yaml_parser_load(&p, &doc)) {
        st = glm_err(GLM_ERR_FORMAT, "%s:%zu:%zu: bad YAML: %s", path, p.problem_mark.line + 1,
                     p.problem_mark.column + 1, p.problem ? p.problem : "parse error");
        yaml_parser_delete(&p);
        fclose(f);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        /* an empty file sets nothing */
    } else if (root->type != YAML_MAPPING_NODE) {
        st = glm_err(GLM_ERR_FORMAT, "%s: the config must be a mapping of key: value lines", path);
    } else {
        for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; st == GLM_OK && pr < root->data.mapping.pairs.top;
             pr++) {
            yaml_node_t *k = yaml_document_get_node(&doc, pr->key), *v = yaml_document_get_node(&doc, pr->value);
            int line = (int)k->start_mark.line + 1;
            if (k->type != YAML_SCALAR_NODE) {
                st = glm_err(GLM_ERR_FORMAT, "%s:%d: keys must be plain names", path, line);
                break;
            }
            const char *key = (const char *)k->data.scalar.value;
            char *val = NULL;
            if (v->type == YAML_SCALAR_NODE) {
                val = strdup((const char *)v->data.scalar.value);
            } else if (v->type == YAML_SEQUENCE_NODE) {
                /* a list: join with commas for set_value */
                size_t cap = 1;
                for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                    yaml_node_t *e = yaml_document_get_node(&doc, *it);
                    if (e->type != YAML_SCALAR_NODE) {
                        st = glm_err(GLM_ERR_FORMAT, "%s:%d: %s: list items must be plain values", path, line, key);
                        break;
                    }
                    cap += e->data.scalar.length + 1;
                }
                if (st != GLM_OK) break;
                val = calloc(cap, 1);
                for (yaml_node_item_t *it = v->data.sequence.items.start; val && it < v->data.sequence.items.top;
                     it++) {
                    if (*val) strcat(val, ",");
                    strcat(val, (const char *)yaml_document_get_node(&doc, *it)->data.scalar.value);
                }
            } else {
                st = glm_err(GLM_ERR_FORMAT, "%s:%d: %s: a nested mapping is not a valid value", path, line, key);
                break;
            }
            if (!val) {
                st = glm_err(GLM_ERR_NOMEM, "out of memory");
                break;
            }
            bool handled;
            st = yaml_special(o, path, line, key, val, &handled);
            if (st == GLM_OK && !handled) {
                long i = find_opt(key);
                if (i < 0) {
                    st = glm_err(GLM_ERR_ARG, "%s:%d: unknown key '%s'; hint: did you mean '%s'?", path, line, key,
                                 closest(key, false));
                } else if (o->src[i] == GLM_SRC_CLI) {
                    /* the command line wins */
                } else if (o->src[i] == GLM_SRC_CONFIG) {
                    st = glm_err(GLM_ERR_ARG, "%s:%d: %s is set twice in the config (keys %s / %s)", path, line,
                                 k_opts[i].key, k_opts[i].key, k_opts[i].alias ? k_opts[i].alias : key);
                } else if (k_opts[i].type == GLM_OPT_STRING && k_opts[i].optional_value) {
                    /* resume_from_checkpoint: true -> latest, false/null -> none, else a path */
                    bool b;
                    if (parse_bool(val, &b) || strcmp(val, "null") == 0 || strcmp(val, "~") == 0 || !*val) {
                        free(o->resume_from_checkpoint);
                        o->resume_from_checkpoint = (parse_bool(val, &b) && b) ? strdup("latest") : NULL;
                        o->src[i] = GLM_SRC_CONFIG;
                    } else {
                        char where[300];
                        snprintf(where, sizeof where, "%s:%d", path, line);
                        st = set_value(o, (size_t)i, val, GLM_SRC_CONFIG, where);
                    }
                } else if (k_opts[i].type == GLM_OPT_STRING && (strcmp(val, "null") == 0 || strcmp(val, "~") == 0)) {
                    o->src[i] = GLM_SRC_CONFIG; /* explicit null: stays unset */
                } else {
                    char where[300];
                    snprintf(where, sizeof where, "%s:%d", path, line);
                    st = set_value(o, (size_t)i, val, GLM_SRC_CONFIG, where);
                    if (st == GLM_OK && strcmp(key, "cutoff_len") == 0)
                        glm_log_info("%s:%d: cutoff_len is used as seq_len: the shards' row length must equal it",
                                     path, line);
                }
            }
            free(val);
        }
    }
    if (st == GLM_OK) { /* one document only: a second one ("---") would be ignored silently */
        yaml_document_t doc2;
        if (yaml_parser_load(&p, &doc2)) {
            if (yaml_document_get_root_node(&doc2))
                st = glm_err(GLM_ERR_ARG, "%s:%zu: a second YAML document (after \"---\"): glmtune reads one; hint: "
                             "put every setting in one document", path, p.mark.line);
            yaml_document_delete(&doc2);
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    fclose(f);
    return st;
}

/* ------------------------------------------------------------------ command line */

static bool looks_bool(const char *s) {
    bool b;
    return s && parse_bool(s, &b);
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
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            o->help = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return glm_err(GLM_ERR_ARG, "unexpected argument '%s'; hint: options look like --name value", a);
        char name[128];
        const char *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) return glm_err(GLM_ERR_ARG, "option '%.60s...' is too long", a);
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        bool negated = false;
        long idx = -1;
        for (size_t k = 0; k < N_OPTS; k++)
            if (strcmp(name, k_opts[k].name) == 0) idx = (long)k;
        if (idx < 0 && strncmp(name, "no-", 3) == 0) {
            for (size_t k = 0; k < N_OPTS; k++)
                if (k_opts[k].type == GLM_OPT_BOOL && strcmp(name + 3, k_opts[k].name) == 0) idx = (long)k;
            negated = idx >= 0;
        }
        if (idx < 0 && (!strcmp(name, "fp16") || !strcmp(name, "bf16"))) {
            /* the precision flags of transformers' TrainingArguments: bf16 is what glmtune does,
             * fp16 is refused with its reason (the same rule as for the YAML keys) */
            const char *val = eq ? eq + 1 : (i + 1 < argc && looks_bool(argv[i + 1])) ? argv[++i] : "true";
            bool on;
            if (!parse_bool(val, &on)) return glm_err(GLM_ERR_ARG, "--%s: expected true or false, got %s", name, val);
            if (on && !strcmp(name, "fp16"))
                return glm_err(GLM_ERR_UNSUPPORTED, "--fp16 is refused: fp16 LoRA training of GLM-4 is widely reported to "
                               "diverge (loss 0 or NaN); glmtune trains in bf16; hint: drop --fp16 (bf16 is used)");
            continue;
        }
        if (idx < 0)
            return glm_err(GLM_ERR_ARG, "unknown option --%s; hint: did you mean --%s?", name, closest(name, true));
        const glm_opt_def *d = &k_opts[idx];
        char where[160];
        snprintf(where, sizeof where, "--%s", d->name);
        if (strcmp(d->name, "config") == 0) { /* done above */
            if (!eq) i++;
            continue;
        }
        const char *val;
        if (d->type == GLM_OPT_BOOL) {
            if (negated && eq) return glm_err(GLM_ERR_ARG, "--%s takes no value", name);
            if (eq)
                val = eq + 1;
            else if (!negated && i + 1 < argc && looks_bool(argv[i + 1]))
                val = argv[++i];
            else
                val = negated ? "false" : "true";
        } else if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc && !(d->optional_value && strncmp(argv[i + 1], "--", 2) == 0)) {
            val = argv[++i];
        } else if (d->optional_value) {
            val = "latest";
        } else {
            return glm_err(GLM_ERR_ARG, "--%s needs a value (%s)", d->name, type_name(d->type));
        }
        GLM_TRY(set_value(o, (size_t)idx, val, GLM_SRC_CLI, where));
    }
    return GLM_OK;
}

/* ------------------------------------------------------------------ validate, print, JSON */

glm_status glm_opts_validate(glm_train_opts *o) {
    if (!o->model) return glm_err(GLM_ERR_ARG, "--model is required (the base checkpoint directory)");
    if (!o->data) return glm_err(GLM_ERR_ARG, "--data is required (shards from `glmtune tokenize`)");
    if (!o->output_dir) return glm_err(GLM_ERR_ARG, "--output-dir is required");
#define NEED(cond, ...) \
    if (!(cond)) return glm_err(GLM_ERR_ARG, __VA_ARGS__)
    NEED(o->per_device_train_batch_size >= 1, "--per-device-train-batch-size must be >= 1 (got %lld)",
         (long long)o->per_device_train_batch_size);
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
    NEED(o->weight_decay >= 0, "--weight-decay must be >= 0");
    NEED(o->adam_beta1 >= 0 && o->adam_beta1 < 1, "--adam-beta1 must be in [0, 1)");
    NEED(o->adam_beta2 >= 0 && o->adam_beta2 < 1, "--adam-beta2 must be in [0, 1)");
    NEED(o->adam_epsilon > 0, "--adam-epsilon must be > 0");
    NEED(o->max_grad_norm >= 0, "--max-grad-norm must be >= 0 (0 disables clipping)");
    if (o->max_steps == 0) o->max_steps = -1; /* as transformers: max_steps <= 0 trains by epochs */
    NEED(o->max_steps > 0 || (o->max_steps == -1 && o->num_train_epochs > 0),
         "set --max-steps > 0 or --num-train-epochs > 0 (max-steps %lld, epochs %g)", (long long)o->max_steps,
         o->num_train_epochs);
    NEED(o->save_steps >= 1, "--save-steps must be >= 1");
    NEED(o->save_total_limit >= 0, "--save-total-limit must be >= 0 (0 keeps all)");
    NEED(o->logging_steps >= 1, "--logging-steps must be >= 1");
    NEED(o->eval_steps >= 0, "--eval-steps must be >= 0");
    NEED(o->lora_rank >= 1 && o->lora_rank <= 4096, "--lora-rank must be in 1..4096 (got %lld)", (long long)o->lora_rank);
    if (isnan(o->lora_alpha)) o->lora_alpha = 2.0 * (double)o->lora_rank;
    NEED(o->lora_alpha > 0, "--lora-alpha must be > 0");
    NEED(o->lora_dropout >= 0 && o->lora_dropout < 1, "--lora-dropout must be in [0, 1)");
    NEED(strcmp(o->device, "auto") == 0 || strcmp(o->device, "cpu") == 0 || strcmp(o->device, "cuda") == 0,
         "--device '%s' is not known; hint: auto, cpu or cuda", o->device);
    NEED(o->seq_len >= 0, "--seq-len must be >= 0");
    NEED(o->max_nonfinite >= 1, "--max-nonfinite must be >= 1");
    NEED(o->rope_theta >= 0, "--rope-theta must be >= 0 (0: from config.json)");
    NEED(!o->rope_inv_freq_dtype || !strcmp(o->rope_inv_freq_dtype, "float32") ||
             !strcmp(o->rope_inv_freq_dtype, "bfloat16"),
         "--rope-inv-freq-dtype must be float32 or bfloat16");
#undef NEED
    return GLM_OK;
}

static json_t *value_json(const glm_train_opts *o, size_t i) {
    const glm_opt_def *d = &k_opts[i];
    const void *field = (const char *)o + d->offset;
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
    static const char *srcs[] = {"default", "config", "command line"};
    for (size_t i = 0; i < N_OPTS; i++) {
        json_t *v = value_json(o, i);
        char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(12)) : NULL;
        fprintf(f, "  %-28s = %-24s (%s)\n", k_opts[i].key, s ? s : "?", srcs[o->src[i] < 3 ? o->src[i] : 0]);
        free(s);
        json_decref(v);
    }
}

void glm_opts_help(FILE *f) {
    fprintf(f, "Options (also as snake_case keys in --config FILE.yaml; flags override the file):\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        const glm_opt_def *d = &k_opts[i];
        char head[96];
        if (d->type == GLM_OPT_BOOL)
            snprintf(head, sizeof head, "--%s, --no-%s", d->name, d->name);
        else if (d->optional_value)
            snprintf(head, sizeof head, "--%s [%s]", d->name, d->unit[0] ? d->unit : type_name(d->type));
        else
            snprintf(head, sizeof head, "--%s %s", d->name, d->unit[0] ? d->unit : type_name(d->type));
        fprintf(f, "  %s\n      %s", head, d->help);
        if (d->unit[0] && d->type != GLM_OPT_STRING) fprintf(f, " [%s]", d->unit);
        fprintf(f, " (default: %s", d->def ? d->def : (strcmp(d->name, "lora-alpha") == 0 ? "2 x lora-rank" : "none"));
        if (d->alias) fprintf(f, "; YAML also %s", d->alias);
        fprintf(f, ")\n");
    }
}
