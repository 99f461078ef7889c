#define _GNU_SOURCE
/* lora/io/checkpoint.c: atomic, verified, resumable checkpoints (see checkpoint.h). */
#include "lora/io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/pyjson.h"
#include "kernels/backend.h"
#include "common/safetensors.h"

static const char *const k_files[] = {"adapter_model.safetensors", "adapter_config.json",
                                      "optimizer.safetensors", "trainer_state.json", "glmtune_state.json"};
static const char *const k_required[] = {"adapter_model.safetensors", "trainer_state.json"};

/* ------------------------------------------------------------------ save */

static char *ckpt_path(const char *output_dir, int64_t step);

static json_t *sched_json(const glm_sched *s) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(glm_sched_type_name(s->type)));
    json_object_set_new(o, "lr", json_real(s->lr));
    json_object_set_new(o, "total_steps", json_integer(s->total_steps));
    json_object_set_new(o, "warmup_steps", json_integer(s->warmup_steps));
    json_object_set_new(o, "min_lr_rate", json_real(s->min_lr_rate));
    json_object_set_new(o, "num_cycles", json_real(s->num_cycles));
    return o;
}

/* The lowest eval_loss of the history: *best (NaN when none) at *step. */
static void best_eval(const json_t *hist, double *best, int64_t *step) {
    *best = NAN;
    *step = -1;
    size_t i;
    json_t *r;
    json_array_foreach(hist, i, r) {
        json_t *e = json_object_get(r, "eval_loss");
        if (!json_is_number(e)) continue;
        double v = json_number_value(e);
        if (isfinite(v) && (!isfinite(*best) || v < *best)) {
            *best = v;
            *step = json_integer_value(json_object_get(r, "step"));
        }
    }
}

/* transformers' stateful_callbacks as its Trainer writes them at a save: the TrainerControl
 * record {"args": its five flags, "attributes": {}} (TrainerControl.state()); the Trainer restores
 * control from it on resume (TrainerControl.from_state, a KeyError when it is missing). At a save
 * should_save is set and the log / evaluate flags already cleared; should_training_stop is set
 * at the last step. Keys sorted, as its save_to_json writes them. */
static json_t *stateful_callbacks(const glm_ckpt_save_args *a) {
    bool last = a->max_steps > 0 && a->step >= a->max_steps;
    return json_pack("{s:{s:{s:b,s:b,s:b,s:b,s:b},s:{}}}", "TrainerControl", "args", "should_epoch_stop", 0,
                     "should_evaluate", 0, "should_log", 0, "should_save", 1, "should_training_stop", (int)last,
                     "attributes");
}

json_t *glm_trainer_state_json(const glm_ckpt_save_args *a) {
    json_t *o = json_object();
    if (!o) return NULL;
    double best;
    int64_t best_step;
    best_eval(a->log_history, &best, &best_step);
    char *best_dir = best_step >= 0 ? ckpt_path(a->output_dir, best_step) : NULL;
    json_object_set_new(o, "best_global_step", best_step >= 0 ? json_integer(best_step) : json_null());
    json_object_set_new(o, "best_metric", isfinite(best) ? json_real(best) : json_null());
    json_object_set_new(o, "best_model_checkpoint", best_dir ? json_string(best_dir) : json_null());
    free(best_dir);
    json_object_set_new(o, "epoch", json_real(a->epoch));
    json_object_set_new(o, "eval_steps", json_integer(a->eval_steps));
    json_object_set_new(o, "global_step", json_integer(a->step));
    json_object_set_new(o, "is_hyper_param_search", json_false());
    json_object_set_new(o, "is_local_process_zero", json_true());
    json_object_set_new(o, "is_world_process_zero", json_true());
    json_object_set_new(o, "log_history", a->log_history ? json_deep_copy(a->log_history) : json_array());
    json_object_set_new(o, "logging_steps", json_integer(a->logging_steps));
    json_object_set_new(o, "max_steps", json_integer(a->max_steps));
    json_object_set_new(o, "num_input_tokens_seen", json_integer(a->num_input_tokens_seen));
    json_object_set_new(o, "num_train_epochs", json_real(a->num_train_epochs));
    json_object_set_new(o, "save_steps", json_integer(a->save_steps));
    json_object_set_new(o, "stateful_callbacks", stateful_callbacks(a));
    json_object_set_new(o, "total_flos", json_real(0.0));
    json_object_set_new(o, "train_batch_size", json_integer(a->train_batch_size));
    json_object_set_new(o, "trial_name", json_null());
    json_object_set_new(o, "trial_params", json_null());
    return o;
}

static glm_status write_json_in(const char *dir, const char *name, json_t *o) {
    char *path = glm_path_join(dir, name);
    glm_status st = path && o ? glm_json_write_file(path, o, 2) : glm_err(GLM_ERR_NOMEM, "out of memory (%s)", name);
    free(path);
    return st;
}

static glm_status write_state(const char *dir, const glm_ckpt_save_args *a) {
    json_t *o = json_object();
    if (!o) return glm_err(GLM_ERR_NOMEM, "out of memory");
    json_object_set_new(o, "format", json_string("glmtune-checkpoint"));
    json_object_set_new(o, "version", json_integer(2));
    json_object_set_new(o, "global_step", json_integer(a->step));
    json_object_set_new(o, "epoch", json_real(a->epoch));
    json_object_set_new(o, "optimizer_step", json_integer(a->optim ? a->optim->step : a->step));
    json_object_set_new(o, "data_loader", a->data_loader ? json_deep_copy(a->data_loader) : json_object());
    json_t *rngs = json_array();
    for (size_t i = 0; i < a->n_rngs; i++) {
        json_t *w = json_array();
        for (int k = 0; k < 4; k++) {
            char buf[32];
            snprintf(buf, sizeof buf, "%" PRIu64, a->rngs[i].s[k]);
            json_array_append_new(w, json_string(buf));
        }
        json_array_append_new(rngs, w);
    }
    json_object_set_new(o, "rng", rngs);
    json_object_set_new(o, "scheduler", a->sched ? sched_json(a->sched) : json_null());
    json_object_set_new(o, "settings", a->settings ? json_deep_copy(a->settings) : json_object());
    glm_status st = write_json_in(dir, "glmtune_state.json", o);
    json_decref(o);
    json_t *ts = st == GLM_OK ? glm_trainer_state_json(a) : NULL;
    if (st == GLM_OK) st = write_json_in(dir, "trainer_state.json", ts);
    json_decref(ts);
    return st;
}

static glm_status write_optimizer(const char *dir, const glm_ckpt_save_args *a) {
    const glm_optim *o = a->optim;
    size_t n = a->n_params;
    GLM_ASSERT(o->n == n, "optimizer holds %zu params, checkpoint got %zu", o->n, n);
    glm_st_tensor *t = calloc(2 * n + 1, sizeof(*t));
    float **bufs = calloc(2 * n + 1, sizeof(float *));
    char **names = calloc(2 * n + 1, sizeof(char *));
    glm_status st = (t && bufs && names) ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == GLM_OK && i < n; i++) {
        const glm_param *p = &a->params[i];
        for (int k = 0; k < 2; k++) {
            size_t j = 2 * i + k;
            bufs[j] = malloc((p->numel ? (size_t)p->numel : 1) * sizeof(float));
            if (asprintf(&names[j], "%s.%s", p->name, k ? "exp_avg_sq" : "exp_avg") < 0) names[j] = NULL;
            if (!bufs[j] || !names[j]) {
                st = glm_err(GLM_ERR_NOMEM, "out of memory saving the optimizer state of %s", p->name);
                break;
            }
            t[j].name = names[j];
            t[j].dtype = GLM_ST_F32;
            t[j].ndim = p->ndim;
            t[j].shape[0] = p->shape[0];
            t[j].shape[1] = p->shape[1];
            t[j].numel = p->numel;
            t[j].data = bufs[j];
            t[j].nbytes = (size_t)p->numel * 4;
        }
        if (st == GLM_OK) st = glm_optim_get_state(o, i, bufs[2 * i], bufs[2 * i + 1]);
    }
    if (st == GLM_OK) {
        char step[32];
        snprintf(step, sizeof step, "%" PRId64, o->step);
        const char *meta[] = {"format", "glmtune-adamw", "step", step};
        char *path = glm_path_join(dir, "optimizer.safetensors");
        st = path ? glm_st_write(path, t, 2 * n, meta, 2) : glm_err(GLM_ERR_NOMEM, "out of memory");
        free(path);
    }
    for (size_t j = 0; j < 2 * n && bufs && names; j++) {
        free(bufs[j]);
        free(names[j]);
    }
    free(bufs);
    free(names);
    free(t);
    return st;
}

static glm_status file_crc(const char *path, uint32_t *crc, size_t *size) {
    glm_mmap m;
    GLM_TRY(glm_mmap_open(&m, path));
    *crc = glm_crc32(0, m.data, m.size);
    *size = m.size;
    glm_mmap_close(&m);
    return GLM_OK;
}

static glm_status write_checksums(const char *dir) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    for (size_t i = 0; st == GLM_OK && i < sizeof k_files / sizeof *k_files; i++) {
        char *p = glm_path_join(dir, k_files[i]);
        if (p && glm_is_file(p)) {
            uint32_t crc;
            size_t size;
            st = file_crc(p, &crc, &size);
            if (st == GLM_OK) fprintf(f, "%08x %zu %s\n", crc, size, k_files[i]);
        }
        free(p);
    }
    fclose(f);
    if (st == GLM_OK) {
        char *p = glm_path_join(dir, GLM_CKPT_CHECKSUMS);
        st = p ? glm_write_file_atomic(p, text, len) : glm_err(GLM_ERR_NOMEM, "out of memory");
        free(p);
    }
    free(text);
    return st;
}

/* checkpoint-<digits> -> step, else -1 */
static int64_t parse_ckpt_name(const char *name) {
    if (strncmp(name, "checkpoint-", 11) != 0) return -1;
    const char *d = name + 11;
    if (!*d) return -1;
    int64_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || v > INT64_MAX / 10 - 10) return -1;
        v = v * 10 + (*d - '0');
    }
    return v;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Steps of checkpoint-N directories in output_dir, ascending. */
static glm_status list_ckpts(const char *output_dir, int64_t **steps, size_t *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(output_dir);
    if (!d) {
        if (errno == ENOENT) return GLM_OK;
        return glm_err(GLM_ERR_IO, "%s: cannot list: %s", output_dir, strerror(errno));
    }
    size_t cap = 0;
    struct dirent *de;
    glm_status st = GLM_OK;
    while ((de = readdir(d))) {
        int64_t s = parse_ckpt_name(de->d_name);
        if (s < 0) continue;
        char *p = glm_path_join(output_dir, de->d_name);
        bool isdir = p && glm_is_dir(p);
        free(p);
        if (!isdir) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(*steps, cap * sizeof(int64_t));
            if (!ns) {
                st = glm_err(GLM_ERR_NOMEM, "out of memory");
                break;
            }
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (st != GLM_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return st;
    }
    if (*n) qsort(*steps, *n, sizeof(int64_t), cmp_i64);
    return st;
}

static char *ckpt_path(const char *output_dir, int64_t step) {
    char *p = NULL;
    if (asprintf(&p, "%s/checkpoint-%" PRId64, output_dir, step) < 0) return NULL;
    return p;
}

/* Removes checkpoint directory p: first renamed aside to the hidden "<output_dir>/.checkpoint-N.del",
 * then deleted, so that a kill during the deletion leaves a hidden leftover (removed by the next
 * prune), never a half-deleted checkpoint-N that a resume or an export would look at. */
static void remove_ckpt(const char *output_dir, int64_t step, const char *p) {
    char *aside = NULL;
    if (asprintf(&aside, "%s/.checkpoint-%" PRId64 ".del", output_dir, step) < 0) aside = NULL;
    if (!aside) return;
    if (glm_is_dir(aside)) glm_rmtree(aside); /* a leftover of the same name */
    if (rename(p, aside) != 0) {
        glm_log_warn("%s: cannot move the old checkpoint aside to remove it (%s): kept", p, strerror(errno));
    } else {
        glm_fsync_dir(output_dir); /* the rename is durable before any file of it goes */
        if (glm_rmtree(aside) == GLM_OK) glm_log_debug("removed old checkpoint %s", p);
    }
    free(aside);
}

/* Whether `name` is a hidden leftover of a killed save (".checkpoint-N.tmp") or removal
 * (".checkpoint-N.del"). */
static bool is_leftover_name(const char *name) {
    size_t l = strlen(name);
    return strncmp(name, ".checkpoint-", 12) == 0 && l > 16 &&
           (strcmp(name + l - 4, ".tmp") == 0 || strcmp(name + l - 4, ".del") == 0);
}

static void prune(const char *output_dir, int64_t keep_step, int limit) {
    /* stale temp dirs from killed saves, and checkpoints a killed prune was removing */
    DIR *d = opendir(output_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (is_leftover_name(de->d_name)) {
                char *p = glm_path_join(output_dir, de->d_name);
                if (p) glm_rmtree(p);
                free(p);
            }
        }
        closedir(d);
    }
    if (limit <= 0) return;
    int64_t *steps;
    size_t n;
    if (list_ckpts(output_dir, &steps, &n) != GLM_OK) return;
    size_t excess = n > (size_t)limit ? n - (size_t)limit : 0;
    for (size_t i = 0; i < n && excess; i++) {
        if (steps[i] == keep_step) continue;
        char *p = ckpt_path(output_dir, steps[i]);
        if (p) remove_ckpt(output_dir, steps[i], p);
        free(p);
        excess--;
    }
    free(steps);
}

glm_status glm_ckpt_save(const glm_ckpt_save_args *a, char **out_dir) {
    if (out_dir) *out_dir = NULL;
    if (a->step < 0) return glm_err(GLM_ERR_ARG, "checkpoint step %" PRId64 " < 0", a->step);
    GLM_TRY(glm_mkdir_p(a->output_dir));
    char *tmp = NULL, *final = ckpt_path(a->output_dir, a->step);
    if (asprintf(&tmp, "%s/.checkpoint-%" PRId64 ".tmp", a->output_dir, a->step) < 0) tmp = NULL;
    if (!tmp || !final) {
        free(tmp);
        free(final);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    if (glm_is_dir(tmp)) glm_rmtree(tmp);
    glm_status st = glm_mkdir_aside(tmp, final);
    if (st == GLM_OK) {
        glm_adapter_cfg none = {.r = 1, .alpha = 1};
        st = glm_adapter_write_files(tmp, a->be, a->params, a->n_params, a->adapter ? a->adapter : &none,
                                     GLM_ST_F32);
    }
    if (st == GLM_OK && a->optim) st = write_optimizer(tmp, a);
    if (st == GLM_OK) st = write_state(tmp, a);
    if (st == GLM_OK) st = write_checksums(tmp);
    if (st == GLM_OK) glm_cleanup_leftovers(final);
    if (st == GLM_OK) st = glm_commit_dir(tmp, final);
    if (st != GLM_OK) {
        glm_err_context(st, "saving checkpoint %s", final);
        glm_rmtree(tmp);
        free(tmp);
        free(final);
        return st;
    }
    prune(a->output_dir, a->step, a->save_total_limit);
    free(tmp);
    if (out_dir)
        *out_dir = final;
    else
        free(final);
    return GLM_OK;
}

/* ------------------------------------------------------------------ verify / load */

glm_status glm_ckpt_verify(const char *dir) {
    char *cp = glm_path_join(dir, GLM_CKPT_CHECKSUMS);
    if (!cp) return glm_err(GLM_ERR_NOMEM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    if (!glm_is_file(cp)) {
        glm_status st = glm_err(GLM_ERR_FORMAT,
                                "%s: missing; the checkpoint is incomplete (a save was interrupted?); "
                                "hint: resume from an older checkpoint", cp);
        free(cp);
        return st;
    }
    glm_status st = glm_read_file(cp, &text, &len);
    if (st != GLM_OK) {
        free(cp);
        return st;
    }
    bool seen_req[2] = {false, false};
    int lineno = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); st == GLM_OK && line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        unsigned crc;
        size_t size;
        char name[256];
        if (sscanf(line, "%8x %zu %255s", &crc, &size, name) != 3 || strchr(name, '/')) {
            st = glm_err(GLM_ERR_FORMAT, "%s: line %d is malformed (want '<crc32> <size> <name>')", cp, lineno);
            break;
        }
        for (int k = 0; k < 2; k++)
            if (strcmp(name, k_required[k]) == 0) seen_req[k] = true;
        char *p = glm_path_join(dir, name);
        if (!p) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        if (!glm_is_file(p)) {
            st = glm_err(GLM_ERR_FORMAT, "%s: missing from the checkpoint; hint: resume from an older "
                                         "checkpoint", p);
        } else {
            uint32_t got;
            size_t gsize;
            st = file_crc(p, &got, &gsize);
            if (st == GLM_OK && gsize != size)
                st = glm_err(GLM_ERR_FORMAT, "%s: truncated or changed: %zu bytes, the checksum file "
                                             "says %zu; hint: resume from an older checkpoint",
                             p, gsize, size);
            else if (st == GLM_OK && got != crc)
                st = glm_err(GLM_ERR_FORMAT, "%s: corrupt: crc32 %08x, the checksum file says %08x; "
                                             "hint: resume from an older checkpoint", p, got, crc);
        }
        free(p);
    }
    for (int k = 0; st == GLM_OK && k < 2; k++)
        if (!seen_req[k])
            st = glm_err(GLM_ERR_FORMAT, "%s: does not list %s; the checkpoint is incomplete", cp, k_required[k]);
    free(text);
    free(cp);
    return st;
}

void glm_ckpt_free(glm_ckpt *c) {
    free(c->dir);
    free(c->rngs);
    if (c->state) json_decref(c->state);
    if (c->trainer_state) json_decref(c->trainer_state);
    memset(c, 0, sizeof(*c));
}

bool glm_ckpt_is_dir(const char *dir) {
    char *p = glm_path_join(dir, GLM_CKPT_CHECKSUMS);
    bool yes = p && glm_is_file(p);
    free(p);
    return yes;
}

static glm_status load_json(const char *path, json_t **out) {
    json_error_t je;
    *out = json_load_file(path, 0, &je);
    if (!*out) return glm_err(GLM_ERR_FORMAT, "%s: line %d: bad JSON: %s", path, je.line, je.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return glm_err(GLM_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return GLM_OK;
}

glm_status glm_ckpt_load(const char *dir, glm_ckpt *c) {
    memset(c, 0, sizeof(*c));
    GLM_TRY(glm_ckpt_verify(dir));
    char *tp = glm_path_join(dir, "trainer_state.json"), *gp = glm_path_join(dir, "glmtune_state.json");
    if (!tp || !gp) {
        free(tp);
        free(gp);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    json_t *ts = NULL, *o = NULL;
    glm_status st = load_json(tp, &ts);
    /* version 2: glmtune_state.json; version 1 kept everything in trainer_state.json */
    char *sp = glm_is_file(gp) ? gp : tp;
    if (st == GLM_OK) {
        if (sp == gp) {
            st = load_json(gp, &o);
        } else {
            o = ts;
            json_incref(o);
        }
    }
    if (sp == gp) free(tp);
    else free(gp);
    if (st != GLM_OK) {
        json_decref(ts);
        json_decref(o);
        free(sp);
        return st;
    }
    c->state = o;
    c->trainer_state = ts;
    c->num_input_tokens_seen = json_integer_value(json_object_get(ts, "num_input_tokens_seen"));
    c->dir = strdup(dir);
    json_t *gs = json_object_get(o, "global_step"), *ep = json_object_get(o, "epoch"),
           *os = json_object_get(o, "optimizer_step"), *rng = json_object_get(o, "rng");
    if (!json_is_integer(gs) || !json_is_number(ep) || !json_is_integer(os) || !json_is_array(rng))
        st = glm_err(GLM_ERR_FORMAT, "%s: needs integer global_step and optimizer_step, number epoch, "
                                     "array rng", sp);
    if (st == GLM_OK) {
        c->step = json_integer_value(gs);
        c->epoch = json_number_value(ep);
        c->optimizer_step = json_integer_value(os);
        c->data_loader = json_object_get(o, "data_loader");
        c->settings = json_object_get(o, "settings");
        c->log_history = json_object_get(ts, "log_history");
        if (!json_is_array(c->log_history)) c->log_history = NULL;
        c->n_rngs = json_array_size(rng);
        c->rngs = calloc(c->n_rngs + 1, sizeof(glm_rng));
        if (!c->rngs) st = glm_err(GLM_ERR_NOMEM, "out of memory");
        for (size_t i = 0; st == GLM_OK && i < c->n_rngs; i++) {
            json_t *w = json_array_get(rng, i);
            for (int k = 0; st == GLM_OK && k < 4; k++) {
                const char *s = json_string_value(json_array_get(w, k));
                char *end = NULL;
                errno = 0;
                unsigned long long v = s ? strtoull(s, &end, 10) : 0;
                if (!s || !*s || *end || errno)
                    st = glm_err(GLM_ERR_FORMAT, "%s: rng[%zu][%d] must be a decimal string", sp, i, k);
                else
                    c->rngs[i].s[k] = v;
            }
        }
    }
    json_t *sc = json_object_get(o, "scheduler");
    if (st == GLM_OK && json_is_object(sc)) {
        glm_sched_type t;
        const char *tn = json_string_value(json_object_get(sc, "type"));
        if (glm_sched_parse_type(tn, &t) != GLM_OK) {
            st = glm_err(GLM_ERR_FORMAT, "%s: scheduler.type '%s' is not known", sp, tn ? tn : "");
        } else {
            c->has_sched = true;
            c->sched.type = t;
            c->sched.lr = json_number_value(json_object_get(sc, "lr"));
            c->sched.total_steps = json_integer_value(json_object_get(sc, "total_steps"));
            c->sched.warmup_steps = json_integer_value(json_object_get(sc, "warmup_steps"));
            c->sched.min_lr_rate = json_number_value(json_object_get(sc, "min_lr_rate"));
            c->sched.num_cycles = json_number_value(json_object_get(sc, "num_cycles"));
        }
    }
    free(sp);
    if (st != GLM_OK) glm_ckpt_free(c);
    return st;
}

static glm_status load_tensor(const glm_st_set *s, const char *file, const char *name, const glm_param *p,
                              float *dst) {
    const glm_st_tensor *t = glm_st_find(s, name);
    if (!t)
        return glm_err(GLM_ERR_MISMATCH, "%s: has no tensor '%s'; hint: the checkpoint was made with "
                                         "a different lora-rank / lora-target or model", file, name);
    if (t->ndim != p->ndim || t->shape[0] != p->shape[0] || (p->ndim > 1 && t->shape[1] != p->shape[1]))
        return glm_param_shape_error(file, name, t->ndim, t->shape, p);
    return glm_st_read_f32(s, name, p->ndim, p->shape, dst);
}

/* Every tensor of the checkpoint's adapter file is one of the run's params: a weight the run does
 * not train would be dropped from every checkpoint after this one. */
static glm_status check_no_extra(const glm_st_set *s, const char *file, const glm_param *params, size_t n) {
    if (glm_st_count(s) <= n) return GLM_OK; /* every param was found in it */
    for (size_t i = 0; i < glm_st_count(s); i++) {
        const char *name = glm_st_at(s, i)->name, *k = name;
        if (!strncmp(k, GLM_PEFT_PREFIX, strlen(GLM_PEFT_PREFIX))) k += strlen(GLM_PEFT_PREFIX);
        size_t j = 0;
        while (j < n && strcmp(params[j].name, k)) j++;
        if (j == n)
            return glm_err(GLM_ERR_MISMATCH, "%s: holds tensor '%s', which this run does not train: resuming would drop "
                           "it from every later checkpoint; hint: resume with the lora-target (and model) the checkpoint "
                           "was made with", file, name);
    }
    return GLM_OK;
}

/* A loaded tensor's values: finite (and with nonneg, not negative: AdamW's exp_avg_sq). Resuming
 * from NaN state would train a NaN adapter without a word. Errors: GLM_ERR_FORMAT naming the file,
 * the tensor and the first bad element. */
static glm_status check_values(const float *x, int64_t n, int nonneg, const char *file, const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (nonneg && x[i] < 0.0f))
            return glm_err(GLM_ERR_FORMAT, "%s: tensor %s element %lld is %g (%s); the checkpoint is damaged; hint: "
                           "resume from an earlier checkpoint-N, or start afresh", file, name, (long long)i, (double)x[i],
                           isfinite(x[i]) ? "a second moment cannot be negative" : "not a finite number");
    return GLM_OK;
}

glm_status glm_ckpt_load_weights(const glm_ckpt *c, const struct glm_backend *be, glm_param *params,
                                 size_t n, glm_optim *optim) {
    char *ap = glm_path_join(c->dir, "adapter_model.safetensors");
    char *op = glm_path_join(c->dir, "optimizer.safetensors");
    glm_st_set *as = NULL, *os = NULL;
    float *buf = NULL, *buf2 = NULL;
    glm_status st = (ap && op) ? glm_st_open(ap, &as) : glm_err(GLM_ERR_NOMEM, "out of memory");
    if (st == GLM_OK && optim) {
        if (!glm_is_file(op))
            st = glm_err(GLM_ERR_FORMAT, "%s: missing; the optimizer state cannot be resumed", op);
        else
            st = glm_st_open(op, &os);
    }
    if (st == GLM_OK && optim && optim->n != n)
        st = glm_err(GLM_ERR_INTERNAL, "optimizer holds %zu params, load got %zu", optim->n, n);
    for (size_t i = 0; st == GLM_OK && i < n; i++) {
        glm_param *p = &params[i];
        size_t bytes = (size_t)p->numel * sizeof(float);
        float *b1 = realloc(buf, bytes ? bytes : 4), *b2 = realloc(buf2, bytes ? bytes : 4);
        if (b1) buf = b1;
        if (b2) buf2 = b2;
        if (!b1 || !b2) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        char name[320];
        snprintf(name, sizeof name, GLM_PEFT_PREFIX "%s", p->name);
        st = load_tensor(as, ap, name, p, buf);
        if (st == GLM_OK) st = check_values(buf, p->numel, 0, ap, name);
        if (st != GLM_OK) break;
        if (be)
            st = glm_be_upload(be, p->w, buf, bytes);
        else
            memcpy(p->w, buf, bytes);
        if (st != GLM_OK || !optim) continue;
        snprintf(name, sizeof name, "%s.exp_avg", p->name);
        st = load_tensor(os, op, name, p, buf);
        if (st == GLM_OK) st = check_values(buf, p->numel, 0, op, name);
        snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
        if (st == GLM_OK) st = load_tensor(os, op, name, p, buf2);
        if (st == GLM_OK) st = check_values(buf2, p->numel, 1, op, name);
        if (st == GLM_OK) st = glm_optim_set_state(optim, i, buf, buf2);
    }
    if (st == GLM_OK) st = check_no_extra(as, ap, params, n);
    if (st == GLM_OK && optim) {
        const char *s = glm_st_metadata(os, "step");
        char *end = NULL;
        long long v = s ? strtoll(s, &end, 10) : -1;
        if (!s || *end || v < 0)
            st = glm_err(GLM_ERR_FORMAT, "%s: metadata 'step' is missing or not a number", op);
        else if (c && c->optimizer_step >= 0 && v != c->optimizer_step)
            st = glm_err(GLM_ERR_FORMAT, "%s: metadata 'step' is %lld but %s/glmtune_state.json says optimizer_step %lld; "
                         "the checkpoint is damaged; hint: resume from an earlier checkpoint-N, or start afresh", op, v,
                         c->dir, (long long)c->optimizer_step);
        else
            optim->step = v;
    }
    free(buf);
    free(buf2);
    glm_st_close(as);
    glm_st_close(os);
    free(ap);
    free(op);
    return st;
}

/* glm_ckpt_latest and glm_ckpt_scan: the checkpoints of output_dir, newest first, until one
 * passes glm_ckpt_verify (*path, *step; NULL and -1 when none). warn: each failing one is
 * reported with glm_log_warn. newest (when not NULL): the newest checkpoint, complete or not, and
 * *why its verify error when it fails (both malloc'd, NULL when none / when it passes). */
static glm_status find_complete(const char *output_dir, bool warn, char **path, int64_t *step, char **newest,
                                char **why) {
    *path = NULL;
    *step = -1;
    if (newest) *newest = *why = NULL;
    int64_t *steps;
    size_t n;
    GLM_TRY(list_ckpts(output_dir, &steps, &n));
    glm_status st = GLM_OK;
    for (size_t i = n; i-- > 0 && st == GLM_OK;) {
        char *p = ckpt_path(output_dir, steps[i]);
        if (!p) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        bool ok = glm_ckpt_verify(p) == GLM_OK;
        if (newest && i == n - 1 && (!(*newest = strdup(p)) || (!ok && !(*why = strdup(glm_errmsg())))))
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
        if (ok) {
            *path = p;
            *step = steps[i];
            break;
        }
        static char warned[4096]; /* a run looks twice (checks its output dir, then resumes): say it once */
        if (warn && strcmp(warned, p)) {
            glm_log_warn("skipping checkpoint %s: %s", p, glm_errmsg());
            snprintf(warned, sizeof warned, "%s", p);
        }
        free(p);
    }
    free(steps);
    if (st != GLM_OK) {
        free(*path);
        *path = NULL;
        *step = -1;
        if (newest) {
            free(*newest);
            free(*why);
            *newest = *why = NULL;
        }
    }
    return st;
}

glm_status glm_ckpt_latest(const char *output_dir, char **path, int64_t *step) {
    return find_complete(output_dir, true, path, step, NULL, NULL);
}

glm_status glm_ckpt_scan(const char *output_dir, char **newest, char **why, char **latest) {
    int64_t step;
    return find_complete(output_dir, false, latest, &step, newest, why);
}
