/* tool/train/train.c: the training loop (docs/design.md §2, §4).
 *
 * One optimizer step = one global batch = per_device_train_batch_size x
 * gradient_accumulation_steps x world rows. The loss of a step is the sum of target-token
 * cross-entropies over the whole global batch divided by its number of target tokens, so
 * 1 x B x 2 accumulation == 2B in one micro-batch == 2 ranks x B. Gradients are accumulated
 * over the micro-batches (each scaled by 1/N_global), all-reduced, clipped by global norm, and
 * applied by AdamW with the scheduled learning rate. A step whose loss or gradient norm is not
 * finite is skipped and counted; max_nonfinite such steps in a row abort the run.
 *
 * Context parallel (--context-parallel C, lora/model/ring_attention.h): the world's W ranks form W / C
 * data-parallel groups of C consecutive ranks (rank r: group r / C, place r % C in it). The data
 * is sharded over the groups (as over ranks without it); the C ranks of a group read the same
 * rows and each computes its 2 chunks of every row; every rank's loss sum and gradients are its
 * tokens' share, so the all-reduces over the whole world (loss, gradients) give the global
 * batch's, normalised by all its target tokens. */
#define _GNU_SOURCE
#include "train.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/pyjson.h"
#include "common/rng.h"
#include "dataset/loader.h"
#include "kernels/backend.h"
#include "kernels/comm.h"
#include "lora/io/checkpoint.h"
#include "lora/io/export.h"
#include "lora/adapter/lora.h"
#include "tool/train/metrics.h"
#include "lora/model/model.h"
#include "lora/adapter/optim.h"
#include "lora/model/ring_attention.h"
#include "common/safetensors.h"
#include "tokenize/tokenizer.h"
#include "tool/cli.h"
#include "tool/train/dist.h"
#include "tool/train/train_files.h"

/* Host buffers for one micro-batch of B rows. */
typedef struct {
    int B, T;
    uint32_t *ids;
    uint8_t *targets;
    int32_t *pos, *doc;
    uint64_t *key; /* the LoRA dropout key of each token (glm_batch.drop_key) */
} batch_buf;

static glm_status batch_alloc(batch_buf *b, int B, int T) {
    b->B = B;
    b->T = T;
    size_t n = (size_t)B * T;
    b->ids = malloc(4 * n);
    b->targets = malloc(n);
    b->pos = malloc(4 * n);
    b->doc = malloc(4 * n);
    b->key = malloc(8 * n);
    if (!b->ids || !b->targets || !b->pos || !b->doc || !b->key) return glm_err(GLM_ERR_NOMEM, "out of memory for a batch");
    return GLM_OK;
}

static void batch_free(batch_buf *b) {
    free(b->ids);
    free(b->targets);
    free(b->pos);
    free(b->doc);
    free(b->key);
}

/* Fills the first n rows of the buffer; returns the glm_batch view of them. A by-document loader
 * (packing false) gives n samples instead: concatenated into the buffer's one row, each its own
 * document (positions from 0, no attention across them), the rest of the row padding (id 0, no
 * target, a document of its own), as a packed row is. Each token's LoRA dropout key is its place
 * in the data, global row * T + position in the row (a sample's tokens keep theirs; padding gets
 * keys past the data's), so its mask in a step does not depend on the micro-batch or the rank that
 * holds it: 2 ranks x B train what 1 rank x 2B and accumulation do, dropout on. */
static glm_batch batch_fill(batch_buf *b, const glm_loader *l, const uint64_t *rows, int n) {
    if (l->by_doc) {
        uint32_t t = 0;
        for (int i = 0; i < n; i++) {
            uint32_t len = glm_loader_doc(l, rows[i], b->ids + t, b->targets + t, b->pos + t, b->doc + t, i, NULL);
            uint64_t k0 = l->docs[rows[i]].row * l->T + l->docs[rows[i]].off;
            for (uint32_t k = 0; k < len; k++) b->key[t + k] = k0 + k;
            t += len;
        }
        for (int32_t k = 0; t < (uint32_t)b->T; t++, k++) {
            b->ids[t] = 0;
            b->targets[t] = 0;
            b->pos[t] = k;
            b->doc[t] = n;
            b->key[t] = l->n_rows * l->T + (uint64_t)k;
        }
        return (glm_batch){1, b->T, b->ids, b->targets, b->pos, b->doc, b->key};
    }
    for (int i = 0; i < n; i++) {
        size_t o = (size_t)i * b->T;
        glm_loader_row(l, rows[i], b->ids + o, b->targets + o, b->pos + o, b->doc + o, NULL);
        for (int t = 0; t < b->T; t++) b->key[o + (size_t)t] = rows[i] * (uint64_t)b->T + (uint64_t)t;
    }
    return (glm_batch){n, b->T, b->ids, b->targets, b->pos, b->doc, b->key};
}

/* Checks, before training, that the shards fit the model: token ids inside the vocabulary,
 * the tokenizer the shards were made with is the model's, the sequence length expected. */
static glm_status check_data(const glm_loader *l, const char *what, const glm_model *m, const char *model_dir,
                             int64_t want_seq_len) {
    const glm_config *c = &m->cfg;
    GLM_TRY(train_check_seq_len(l, what, want_seq_len));
    if (l->vocab_size > (uint32_t)c->V)
        return glm_err(GLM_ERR_MISMATCH, "%s: the shards' tokenizer has %u ids but the model's vocabulary has %d; hint: "
                       "tokenize with the model's own tokenizer", what, l->vocab_size, c->V);
    for (size_t k = 0; k < l->n_shards; k++) {
        const glm_shard *sh = &l->shards[k];
        uint64_t n = (uint64_t)sh->n_rows * sh->seq_len;
        for (uint64_t i = 0; i < n; i++)
            if (sh->ids[i] >= (uint32_t)c->V)
                return glm_err(GLM_ERR_MISMATCH, "%s: token id %u at token %llu is outside the model's vocabulary (%d); "
                               "hint: the shards were made for another model", sh->path, sh->ids[i],
                               (unsigned long long)i, c->V);
        glm_shard_release(sh, 0, sh->map.size); /* the scan mapped every page: back to the page cache */
    }
    /* tokenizer fingerprint: the model directory's tokenizer, when it has one */
    char *tm = glm_path_join(model_dir, "tokenizer.model");
    bool has_tok = glm_is_file(tm);
    free(tm);
    if (!has_tok || l->fingerprint == 0) {
        glm_log_info("%s: %s; the tokenizer check is skipped", what,
                     l->fingerprint == 0 ? "pre-tokenized shards carry no tokenizer fingerprint"
                                         : "the model directory has no tokenizer.model");
        return GLM_OK;
    }
    glm_tokenizer *tok;
    GLM_TRY(glm_tokenizer_load(model_dir, &tok));
    uint64_t fp = glm_tokenizer_fingerprint(tok);
    glm_tokenizer_free(tok);
    if (fp != l->fingerprint)
        return glm_err(GLM_ERR_MISMATCH, "%s: the shards were made with another tokenizer (fingerprint %016llx) than the "
                       "model's %s/tokenizer.model (%016llx); hint: re-run glmtune tokenize --tokenizer %s",
                       what, (unsigned long long)l->fingerprint, model_dir, (unsigned long long)fp, model_dir);
    return GLM_OK;
}

/* Mean loss over every row of the eval split (forward only, LoRA dropout off as in PEFT's
 * model.eval(): glm_model_step applies lora->dropout to every forward, so it is zeroed here).
 * World > 1: data-parallel group g (rank g without context parallel) takes rows g*B.. of each
 * block of B*groups rows; every rank runs the same number of forwards (a rank without rows left
 * runs one untargeted row: with --shard-base or context parallel every forward is a sequence of
 * collectives), and the sums are all-reduced. */
static glm_status evaluate(glm_model *m, glm_lora *lora, glm_loader *ev, batch_buf *bb, int per_pass, int dp, int dp_rank,
                           double *loss) {
    const glm_backend *be = m->be;
    double sum = 0;
    int64_t nt = 0;
    uint64_t *rows = malloc(sizeof(uint64_t) * (size_t)per_pass);
    *loss = NAN;
    if (!rows) return glm_err(GLM_ERR_NOMEM, "out of memory (eval batch)");
    float p_drop = lora->dropout;
    lora->dropout = 0.0f;
    glm_status s = GLM_OK;
    const uint64_t P = (uint64_t)per_pass, N = ev->n_units; /* rows, or samples (packing false) */
    uint64_t block = P * (uint64_t)dp; /* data-parallel groups (= ranks without context parallel) */
    for (uint64_t b0 = 0; b0 < N && s == GLM_OK; b0 += block) {
        uint64_t r0 = b0 + (uint64_t)dp_rank * P;
        int n = r0 >= N ? 0 : (int)((N - r0) < P ? N - r0 : P);
        for (int i = 0; i < n; i++) rows[i] = r0 + (uint64_t)i;
        if (n == 0) rows[0] = 0;
        glm_batch b = batch_fill(bb, ev, rows, n ? n : 1);
        if (n == 0) memset(bb->targets, 0, (size_t)bb->T); /* a placeholder forward: no targets */
        double ls = 0;
        int64_t k = 0;
        s = glm_model_step(m, lora, &b, 0.0f, 0, 0, 0, &ls, &k);
        sum += ls;
        nt += k;
    }
    lora->dropout = p_drop;
    free(rows);
    double red[2] = {sum, (double)nt};
    if (s == GLM_OK && be->world > 1) s = glm_comm_all_reduce_host(be, red, 2);
    *loss = red[1] > 0 ? red[0] / red[1] : NAN;
    return s;
}

/* --dump-grads: the gradients (fp32, copied to the host from the backend) as safetensors with
 * PEFT key names. */
static glm_status dump_grads(const glm_backend *be, const char *path, const glm_param *p, int n) {
    glm_st_tensor *t = calloc((size_t)n, sizeof *t);
    char **names = calloc((size_t)n, sizeof *names);
    float **host = calloc((size_t)n, sizeof *host);
    glm_status s = t && names && host ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && s == GLM_OK; i++) {
        host[i] = malloc(4 * (size_t)p[i].numel);
        if (!host[i] || asprintf(&names[i], "base_model.model.%s", p[i].name) < 0) {
            s = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        s = glm_be_download(be, host[i], p[i].g, 4 * (size_t)p[i].numel);
        t[i] = (glm_st_tensor){.name = names[i], .dtype = GLM_ST_F32, .ndim = 2, .shape = {p[i].shape[0], p[i].shape[1]},
                               .numel = p[i].numel, .data = host[i], .nbytes = 4 * (size_t)p[i].numel};
    }
    if (s == GLM_OK) s = glm_st_write(path, t, (size_t)n, (const char *[]){"format", "pt"}, 1);
    for (int i = 0; i < n; i++) {
        free(names ? names[i] : NULL);
        free(host ? host[i] : NULL);
    }
    free(names);
    free(host);
    free(t);
    if (s == GLM_OK) glm_log_info("wrote the first step's gradients (before clipping) to %s", path);
    return s;
}

/* Splits "a,b,c" into module names for adapter_config.json (the resolved target list). */
static size_t target_names(const glm_lora *lora, const char **names) {
    int n;
    const char *const *all = glm_lora_module_names(lora->layout, &n);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (lora->module_on[i]) names[k++] = all[i];
    return k;
}

typedef struct {
    glm_model *model;
    glm_lora *lora;
    glm_param *params;
    int n_params;
    glm_optim optim;
    glm_sched sched;
    glm_loader data, eval;
    bool has_eval;
    int64_t logging_steps, save_steps, eval_steps; /* resolved (ratios of total_steps applied) */
    batch_buf bb;
    /* the next micro-batch, read during this one's backward (prefetch_next): its buffer, the
     * next step's global rows and this rank's share of them; the current step's place */
    batch_buf bb_next;
    uint64_t *pf_rows, *pf_mine;
    uint32_t pf_global;
    const uint64_t *pf_cur_mine;
    uint32_t pf_n_mine, pf_micro, pf_n_micro;
    int pf_B;
    int64_t n_micro_run;   /* training micro-batches run (with batches_prefetched: the --verbose summary) */
    json_t *history;
    int64_t step, total_steps;
    const char *targets[8];
    glm_adapter_cfg acfg;
    char *base_path;   /* realpath of the base model, for adapter_config.json */
    json_t *settings;
    int64_t tokens_seen; /* tokens of the rows trained on, over the whole run (resumes included) */
    dist_info dist;      /* this rank's place (tool/train/dist.h) */
    const glm_backend *be;
    int cp, dp, dp_rank; /* context parallel: ranks per row (1: off), data-parallel groups, this rank's group */
    const glm_backend *cp_comm; /* the group's communicator (comm_split; NULL without context parallel) */
    int n_buckets_started; /* layers whose gradient all-reduce the backward started this step */
    int out_lock;          /* rank 0: the output directory's lock (glm_lock_dir), or -1 */
    int64_t saved_step;    /* the step of the last checkpoint this run wrote (-1: none) */
} run_state;

/* A stop asked for by a signal (train_request_stop), and the one honoured (train_stopped_by). */
static volatile sig_atomic_t g_stop_sig;
static int g_stopped_sig;

void train_request_stop(int sig) { g_stop_sig = sig; }
int train_stopped_by(void) { return g_stopped_sig; }

static json_t *loader_pos(const glm_loader *l) {
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)l->data_fingerprint);
    return json_pack("{s:I,s:I,s:I,s:s,s:s}", "epoch", (json_int_t)l->epoch, "cursor", (json_int_t)l->cursor, "rows",
                     (json_int_t)l->n_units, "unit", l->by_doc ? "samples" : "rows", "data_fingerprint", fp);
}

/* The checkpoint's data against --data: the same rows (its data fingerprint, glm_loader.data_fingerprint),
 * or the position it saved would continue on other rows (data re-tokenized in place, another
 * seed, other shards). A checkpoint made before the fingerprint was kept is resumed with a note. */
static glm_status check_resume_data(const run_state *rs, const train_settings *ts, const char *ckpt, const json_t *dl) {
    const char *saved = json_string_value(json_object_get(dl, "data_fingerprint"));
    char now[24];
    snprintf(now, sizeof now, "%016llx", (unsigned long long)rs->data.data_fingerprint);
    if (!saved) {
        glm_log_info("%s has no data fingerprint (made by an older glmtune): that --data holds the rows it was trained on "
                     "is not checked", ckpt);
        return GLM_OK;
    }
    if (!strcmp(saved, now)) return GLM_OK;
    return glm_err(GLM_ERR_MISMATCH, "%s: the checkpoint was trained on other data than --data %s holds now (data "
                   "fingerprint %s, now %s: the shards were re-tokenized or replaced since): its saved position would "
                   "continue on different rows; hint: resume with the shards it was trained on, or start a new run on "
                   "these (another --output-dir, or --overwrite-output-dir)", ckpt, ts->opt.data, saved, now);
}

static glm_status save_checkpoint(run_state *rs, const train_settings *ts) {
    rs->saved_step = rs->step;
    if (rs->be->rank != 0) return GLM_OK; /* only rank 0 writes (every rank holds the same state) */
    json_t *pos = loader_pos(&rs->data);
    glm_ckpt_save_args a = {
        .output_dir = ts->opt.output_dir,
        .step = rs->step,
        .epoch = (double)rs->data.epoch + (double)rs->data.cursor / (double)rs->data.n_units,
        .be = rs->model->be,
        .params = rs->params,
        .n_params = (size_t)rs->n_params,
        .optim = &rs->optim,
        .adapter = &rs->acfg,
        .data_loader = pos,
        .sched = &rs->sched,
        .settings = rs->settings,
        .log_history = rs->history,
        .save_total_limit = (int)ts->opt.save_total_limit,
        .max_steps = rs->total_steps,
        .logging_steps = rs->logging_steps,
        .eval_steps = rs->eval_steps,
        .save_steps = rs->save_steps,
        .train_batch_size = ts->opt.per_device_train_batch_size,
        .num_train_epochs = ts->opt.num_train_epochs,
        .num_input_tokens_seen = rs->tokens_seen,
    };
    char *dir = NULL;
    glm_status s = glm_ckpt_save(&a, &dir);
    if (s == GLM_OK) glm_log_info("step %lld: saved %s", (long long)rs->step, dir);
    free(dir);
    json_decref(pos);
    return s;
}

/* A checkpoint resumes only the LoRA modules it was trained on: with fewer (a narrower
 * --lora-target) its other trained weights would be dropped from every later checkpoint, and
 * save_total_limit would then delete the last one that holds them; with more, the new modules
 * would have no optimizer state. Either is refused, as a changed lora_rank is, naming both sets. */
static glm_status check_resume_targets(const run_state *rs, const train_settings *ts, const char *ckpt) {
    char *p = glm_path_join(ckpt, "adapter_config.json");
    if (!p) return glm_err(GLM_ERR_NOMEM, "out of memory");
    char theirs[256], mine[256];
    bool same = true;
    glm_status s = glm_is_file(p) ? glm_lora_config_targets(rs->lora, p, theirs, mine, sizeof theirs, &same) : GLM_OK;
    if (s == GLM_OK && !same) {
        char list[256];
        snprintf(list, sizeof list, "%s", theirs);
        for (char *c = list; *c; c++) *c = *c == ' ' && c[1] ? ',' : *c;
        list[strcspn(list, " ")] = 0;
        s = glm_err(GLM_ERR_MISMATCH, "%s: the checkpoint was trained with LoRA on { %s}, but this run's --lora-target %s "
                    "gives { %s}: a checkpoint resumes exactly the modules it trained (fewer would drop trained weights "
                    "from every later checkpoint, more would start without their optimizer state); hint: resume with "
                    "--lora-target %s, or train other modules in a new run (another --output-dir)",
                    ckpt, theirs, ts->lora_target ? ts->lora_target : "all", mine, list);
    }
    free(p);
    return s;
}

static glm_status restore(run_state *rs, const train_settings *ts) {
    char *path = NULL;
    GLM_TRY(train_resume_path(ts, &path));
    glm_ckpt c;
    glm_status s = glm_ckpt_load(path, &c);
    if (s == GLM_OK) s = check_resume_targets(rs, ts, path);
    if (s == GLM_OK) s = glm_ckpt_load_weights(&c, rs->model->be, rs->params, (size_t)rs->n_params, &rs->optim);
    if (s == GLM_OK) {
        json_t *dl = c.data_loader;
        uint64_t rows = (uint64_t)json_integer_value(json_object_get(dl, "rows"));
        const char *unit = json_string_value(json_object_get(dl, "unit"));
        const char *want = rs->data.by_doc ? "samples" : "rows";
        if (strcmp(unit ? unit : "rows", want))
            s = glm_err(GLM_ERR_MISMATCH, "%s: the checkpoint took micro-batches of %s (packing %s), this run of %s; hint: "
                        "resume with the same packing setting", path, unit ? unit : "rows",
                        rs->data.by_doc ? "true" : "false", want);
        else if (rows != rs->data.n_units)
            s = glm_err(GLM_ERR_MISMATCH, "%s: the checkpoint was trained on data of %llu %s, --data has %llu; hint: "
                        "resume with the same --data", path, (unsigned long long)rows, want,
                        (unsigned long long)rs->data.n_units);
        else
            s = check_resume_data(rs, ts, path, dl);
        if (s == GLM_OK)
            s = glm_loader_seek(&rs->data, (uint64_t)json_integer_value(json_object_get(dl, "epoch")),
                                (uint64_t)json_integer_value(json_object_get(dl, "cursor")));
    }
    if (s == GLM_OK) train_warn_changed_settings(c.settings, rs->settings);
    if (s == GLM_OK) {
        rs->step = c.step;
        rs->tokens_seen = c.num_input_tokens_seen;
        json_decref(rs->history);
        rs->history = json_is_array(c.log_history) ? json_deep_copy(c.log_history) : json_array();
        glm_log_info("resuming from %s (step %lld, epoch %.2f)", path, (long long)c.step, c.epoch);
    }
    glm_ckpt_free(&c);
    free(path);
    return s;
}

static uint64_t mix64(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* LLaMA-Factory's stage against what the shards hold (report.json's "layouts", written by glmtune
 * tokenize): stage pt trains plain text, sft conversations; a mismatch trains other targets than the
 * YAML says, so it is said in one line (the shards decide the targets). Silent when unknown. */
static void check_stage(const train_settings *ts) {
    if (!ts->opt.stage || !ts->opt.data || !glm_is_dir(ts->opt.data)) return;
    char *rp = glm_path_join(ts->opt.data, "report.json");
    json_error_t je;
    json_t *r = rp ? json_load_file(rp, 0, &je) : NULL;
    free(rp);
    json_t *lay = json_object_get(r, "layouts");
    if (json_is_object(lay) && json_object_size(lay)) {
        json_int_t text = json_integer_value(json_object_get(lay, "text")), all = 0;
        const char *k;
        json_t *v;
        json_object_foreach(lay, k, v) all += json_integer_value(v);
        if (!strcmp(ts->opt.stage, "sft") && text > 0 && text == all)
            glm_log_warn("stage: sft, but the shards in %s hold plain text (tokenized as pretraining text, stage pt): "
                         "every token is a target, not only the replies; hint: stage: pt, or tokenize chat data",
                         ts->opt.data);
        else if (!strcmp(ts->opt.stage, "pt") && text < all)
            glm_log_warn("stage: pt, but %lld of the %lld samples in %s are conversations with targets on the replies "
                         "only (stage sft); hint: tokenize with stage: pt (--format text), or stage: sft",
                         (long long)(all - text), (long long)all, ts->opt.data);
    }
    json_decref(r);
}

/* The memory plan of this run from config.json and the training shards (rs->data, opened) alone,
 * before any weight is read; sets --max-gpu-memory as the backend's hard cap on everything the process holds on the
 * device. A plan that does not fit the budget (the cap less the CUDA context and library workspaces
 * the process already holds, or without a cap what the device has free) is an error that names its
 * total, the budget and what to change: a run that went on would stop out of memory mid-step. */
static glm_status check_plan(const run_state *rs, const train_settings *ts) {
    const glm_backend *be = rs->be;
    const double G = 1073741824.0;
    const int cpu = !strcmp(be->name, "cpu");
    if (ts->max_gpu_gib > 0) {
        if (cpu && be->rank == 0)
            glm_log_info("--max-gpu-memory on the CPU backend: the memory plan's budget (host memory is not capped)");
        glm_status st = glm_be_set_mem_cap(be, (size_t)(ts->max_gpu_gib * G));
        if (st) return glm_err_context(st, "--max-gpu-memory %g", ts->max_gpu_gib);
    }
    glm_config cfg;
    GLM_TRY(glm_config_load(ts->opt.model, ts->opt.rope_theta, &cfg));
    const glm_loader *l = &rs->data; /* opened (and every shard checked) once, before this */
    const int T = (int)l->T;
    const uint64_t group_rows = (l->n_rows + (uint64_t)rs->dp - 1) / (uint64_t)rs->dp;
    int B = (int)ts->opt.per_device_train_batch_size;
    if ((uint64_t)B > group_rows) B = (int)group_rows; /* as setup() sizes the step */
    glm_lora_config lc = {(int)ts->opt.lora_rank, (float)ts->opt.lora_alpha, (float)ts->opt.lora_dropout, ts->opt.use_rslora,
                          ts->lora_target};
    glm_lora_info li;
    GLM_TRY(glm_lora_info_for(&cfg, &lc, &li));
    /* as the model will plan its step (glm_model_prepare below): the same request */
    glm_plan_request rq = train_plan_request(ts, &cfg, &li, B, T, be->world, rs->cp, be, 0);
    glm_plan p;
    glm_plan_basis basis;
    GLM_TRY(glm_plan_request_make(&rq, &p, &basis));
    if (p.fits) return GLM_OK;
    const double budget = basis.opts.budget;
    char hints[512];
    int n = snprintf(hints, sizeof hints, "%s", ts->quant_bits == 4 ? "" : "--quantization-bit 4 (a 4-bit base, QLoRA), ");
    glm_plan_request ro = rq;
    ro.opts.offload = 1;
    glm_plan po;
    GLM_TRY(glm_plan_request_make(&ro, &po, NULL));
    if (!cpu && po.fits)
        n += snprintf(hints + n, sizeof hints - (size_t)n, "a machine with %.1f GiB of host memory free for the layer inputs "
                      "(offloaded, they would fit; %.1f GiB is available here), ", po.host / G, basis.opts.host_budget / G);
    if (rs->cp <= 1) n += snprintf(hints + n, sizeof hints - (size_t)n, "--context-parallel N with --gpus N, ");
    snprintf(hints + n, sizeof hints - (size_t)n, "a shorter --seq-len (rows of %d tokens now)%s", T,
             ts->max_gpu_gib > 0 ? ", or a larger --max-gpu-memory" : "");
    return glm_err(GLM_ERR_NOMEM, "%s: the memory plan for %d x %d tokens takes %.2f GiB and the budget is %.2f GiB (%s%s); "
                   "nothing was loaded; hint: %s (glmtune train --dry-run prints the plan)",
                   ts->opt.model, B, T, p.total / G, budget / G,
                   ts->max_gpu_gib > 0 ? "--max-gpu-memory" : "the device's free memory",
                   !cpu && ts->max_gpu_gib > 0 ? " less the CUDA context and library workspaces" : "", hints);
}

/* The frozen base in the format the settings ask for (bf16, 4-bit, fp8), loaded onto the backend,
 * and the RoPE table rounded to bf16 when asked (transformers' table after .to(torch.bfloat16)). */
static glm_status load_model(run_state *rs, const train_settings *ts) {
    const glm_backend *be = rs->be;
    const glm_base_format bf = train_base_format(ts);
    if (ts->fp8)
        glm_log_info("--base-dtype fp8: the frozen linear layers quantized to FP8 E4M3 (a scale per output channel) while "
                     "loading, their GEMMs %s", strcmp(be->name, "cpu") ? "on FP8 tensor cores"
                     : "emulated on the CPU (the same quantization, products summed in double: the reference the GPU's "
                       "FP8 tensor cores are tested against, not fast)");
    if (ts->quant_bits == 4) {
        glm_log_info("QLoRA: the frozen linear layers quantized to %s%s while loading (bitsandbytes' 4-bit format)",
                     glm_wformat_name(bf.q4), bf.double_quant ? " with double quantization" : "");
    }
    GLM_TRY(glm_model_load_fmt(ts->opt.model, be, ts->opt.rope_theta, ts->opt.shard_base && be->world > 1, &bf, &rs->model));
    if (ts->rope_inv_freq_bf16) { /* the table a transformers model uses after .to(torch.bfloat16) */
        int half = rs->model->cfg.rope_dim / 2;
        float *t = malloc(sizeof(float) * (size_t)half);
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)half);
        if (!t || !h) {
            free(t), free(h);
            return glm_err(GLM_ERR_NOMEM, "out of memory");
        }
        glm_rope_inv_freq(rs->model->cfg.rope_base, rs->model->cfg.rope_dim, t);
        glm_status s = glm_st_from_f32(GLM_ST_BF16, t, (size_t)half, h);
        if (s == GLM_OK) s = glm_st_to_f32(GLM_ST_BF16, h, (size_t)half, t);
        if (s == GLM_OK) s = glm_model_set_rope_inv_freq(rs->model, t);
        free(t);
        free(h);
        GLM_TRY(s);
    }
    return GLM_OK;
}

/* The training shards (opened before check_plan; checked here against the model and --seq-len) and
 * the evaluation rows: the val
 * split of --eval-data (else all its rows), or of the training shards when evaluation is asked for
 * without eval data. */
static glm_status open_data(run_state *rs, const train_settings *ts) {
    GLM_TRY(check_data(&rs->data, ts->opt.data, rs->model, ts->opt.model, ts->opt.seq_len));
    if (ts->by_sample) GLM_TRY(glm_loader_by_document(&rs->data));
    if (ts->eval_from_val) {
        /* evaluation asked for without eval_data: the val split of the training shards, as LLaMA-Factory
         * evaluates on the split val_size made; none: said once, and training goes on */
        glm_loader_close(&rs->eval);
        glm_status ev = glm_loader_open(&rs->eval, ts->eval_data, "val", (uint64_t)ts->opt.seed, false);
        if (ev != GLM_OK && ev != GLM_ERR_ARG) return ev; /* a val split that is there but broken */
        if (ev == GLM_OK) {
            GLM_TRY(check_data(&rs->eval, ts->eval_data, rs->model, ts->opt.model, (int64_t)rs->data.T));
            glm_log_info("evaluation (eval_strategy %s): the val split of %s, %llu rows", ts->opt.eval_strategy, ts->eval_data,
                         (unsigned long long)rs->eval.n_rows);
            rs->has_eval = true;
        } else {
            glm_log_warn("evaluation was asked for (eval_strategy %s) but %s has no val split and no eval_dataset / "
                         "eval_data is given: no evaluation will run; hint: tokenize with val_size (--val-size), or give "
                         "eval_dataset (--eval-data)", ts->opt.eval_strategy, ts->eval_data);
        }
    } else if (ts->eval_data && *ts->eval_data) {
        /* the val split of a tokenize output (--val-size), or, when it has none, all of its rows */
        glm_status ev = glm_loader_open(&rs->eval, ts->eval_data, "val", (uint64_t)ts->opt.seed, false);
        if (ev != GLM_OK && ev != GLM_ERR_ARG) return ev; /* a val split that is there but broken */
        if (ev != GLM_OK) {
            GLM_TRY(glm_loader_open(&rs->eval, ts->eval_data, "train", (uint64_t)ts->opt.seed, false));
            glm_log_info("%s has no val split: evaluating on all of its %llu rows", ts->eval_data,
                         (unsigned long long)rs->eval.n_rows);
        }
        GLM_TRY(check_data(&rs->eval, ts->eval_data, rs->model, ts->opt.model, (int64_t)rs->data.T));
        rs->has_eval = true;
    }
    if (rs->has_eval && ts->by_sample) GLM_TRY(glm_loader_by_document(&rs->eval));
    return GLM_OK;
}

/* The LoRA adapter (fresh, or --init-adapter's weights) and its AdamW state. */
static glm_status init_adapter(run_state *rs, const train_settings *ts) {
    const glm_backend *be = rs->be;
    glm_lora_config lc = {(int)ts->opt.lora_rank, (float)ts->opt.lora_alpha, (float)ts->opt.lora_dropout, ts->opt.use_rslora,
                          ts->lora_target};
    GLM_TRY(glm_lora_create(rs->model, &lc, (uint64_t)ts->opt.seed, &rs->lora));
    if (ts->opt.init_adapter && *ts->opt.init_adapter) { /* an adapter, a checkpoint, or a run's output directory */
        char *dir = NULL;
        glm_status s = train_init_adapter_path(ts->opt.init_adapter, &dir);
        if (s == GLM_OK) s = glm_lora_load_peft(rs->lora, dir);
        if (s == GLM_OK) {
            int n = 0;
            glm_lora_params(rs->lora, &n);
            glm_log_info("--init-adapter: the run starts from the LoRA adapter in %s (%d tensors)", dir, n);
        }
        free(dir);
        GLM_TRY(s);
    }
    rs->params = glm_lora_params(rs->lora, &rs->n_params);
    glm_adamw_cfg ac = {ts->opt.adam_beta1, ts->opt.adam_beta2, ts->opt.adam_epsilon, ts->opt.weight_decay, ts->opt.max_grad_norm,
                        ts->opt.loraplus_lr_ratio};
    GLM_TRY(glm_optim_init(&rs->optim, be, rs->params, (size_t)rs->n_params, &ac));
    return GLM_OK;
}

/* The schedule: optimizer steps (transformers' count), the learning-rate schedule, the micro-batch
 * buffers (sized to what a group can get), the logging/save/eval intervals; *rows_per_step and
 * *epoch_steps for the run's summary line. */
static glm_status plan_steps(run_state *rs, const train_settings *ts, uint64_t *rows_per_step, uint64_t *epoch_steps) {
    /* steps per epoch as transformers' Trainer counts them (trainer.py, set_initial_training_values, 4.46+):
     * ceil(len(dataloader) / accumulation) with len(dataloader) = ceil(units / (batch x ranks)), which is
     * ceil(units / (batch x accumulation x ranks)); units are rows (packing) or samples (packing false) */
    uint64_t global_rows = (uint64_t)(ts->opt.per_device_train_batch_size * ts->opt.gradient_accumulation_steps * rs->dp);
    uint64_t steps_per_epoch = (rs->data.n_units + global_rows - 1) / global_rows;
    *rows_per_step = global_rows;
    *epoch_steps = steps_per_epoch;
    rs->total_steps = ts->opt.max_steps > 0 ? ts->opt.max_steps : (int64_t)ceil(ts->opt.num_train_epochs * (double)steps_per_epoch);
    if (rs->total_steps <= 0)
        return glm_err(GLM_ERR_ARG, "nothing to train: max_steps %lld, num_train_epochs %g; hint: --max-steps N",
                       (long long)ts->opt.max_steps, ts->opt.num_train_epochs);
    glm_sched_type st;
    GLM_TRY(glm_sched_parse_type(ts->opt.lr_scheduler_type, &st));
    GLM_TRY(glm_sched_init(&rs->sched, st, ts->opt.learning_rate, rs->total_steps, ts->opt.warmup_steps, ts->opt.warmup_ratio,
                           ts->opt.min_lr, ts->opt.min_lr_rate));
    if (ts->opt.loraplus_lr_ratio > 0)
        glm_log_info("LoRA+: the lora_B weights learn at %g x the learning rate", ts->opt.loraplus_lr_ratio);
    /* a micro-batch larger than the data never fills: the buffers and the memory plan are for the rows a
     * group can get (each step then takes the whole epoch, as the Trainer's last, short batch does) */
    uint64_t group_rows = (rs->data.n_units + (uint64_t)rs->dp - 1) / (uint64_t)rs->dp;
    int B_eff = (int)ts->opt.per_device_train_batch_size;
    if ((uint64_t)B_eff > group_rows) {
        B_eff = (int)group_rows;
        glm_log_warn("--per-device-train-batch-size %lld is more than the %llu %s(s) %s: every step takes all of "
                     "them (one epoch per step); hint: a smaller batch, or more data",
                     (long long)ts->opt.per_device_train_batch_size, (unsigned long long)group_rows,
                     ts->by_sample ? "sample" : "row", rs->dp > 1 ? "each data-parallel group gets" : "in the data");
    }
    if (global_rows > rs->data.n_units && (uint64_t)B_eff == (uint64_t)ts->opt.per_device_train_batch_size)
        glm_log_warn("--gradient-accumulation-steps %lld: %llu %s(s) per optimizer step (%lld x %lld%s) is more than the "
                     "%llu in the data: every step takes all of them (one epoch per step, fewer micro-batches); hint: a "
                     "smaller --gradient-accumulation-steps, or more data", (long long)ts->opt.gradient_accumulation_steps,
                     (unsigned long long)global_rows, ts->by_sample ? "sample" : "row",
                     (long long)ts->opt.per_device_train_batch_size, (long long)ts->opt.gradient_accumulation_steps,
                     rs->dp > 1 ? " x the data-parallel groups" : "", (unsigned long long)rs->data.n_units);
    if (global_rows > rs->data.n_units) global_rows = rs->data.n_units;
    *rows_per_step = global_rows;
    if (ts->by_sample) {
        /* one row of B_eff samples: as long as the B_eff longest samples (train and eval) together, so any
         * micro-batch fits whatever the shuffle; the rest of a row is padding */
        uint64_t Trow = glm_loader_longest_docs(&rs->data, (uint32_t)B_eff);
        if (rs->has_eval) {
            uint64_t te = glm_loader_longest_docs(&rs->eval, (uint32_t)B_eff);
            Trow = te > Trow ? te : Trow;
        }
        if (Trow > (uint64_t)1 << 30)
            return glm_err(GLM_ERR_ARG, "packing false: %d samples make rows of up to %llu tokens; hint: a smaller "
                           "per_device_train_batch_size", B_eff, (unsigned long long)Trow);
        double mean = (double)rs->data.n_tokens / (double)rs->data.n_units;
        glm_log_info("packing false: each micro-batch is %d sample%s (as LLaMA-Factory batches them), concatenated into "
                     "one row of %llu tokens (the %d longest together) with document-masked attention; samples average "
                     "%.0f tokens, so about %.0f%% of a row is padding", B_eff, B_eff == 1 ? "" : "s",
                     (unsigned long long)Trow, B_eff, mean, 100.0 * (1.0 - (double)B_eff * mean / (double)Trow));
        GLM_TRY(batch_alloc(&rs->bb, 1, (int)Trow));
        GLM_TRY(batch_alloc(&rs->bb_next, 1, (int)Trow));
    } else {
        GLM_TRY(batch_alloc(&rs->bb, B_eff, (int)rs->data.T));
        GLM_TRY(batch_alloc(&rs->bb_next, B_eff, (int)rs->data.T));
    }
    /* logging_steps / save_steps / eval_steps below 1: ratios of the run's steps (transformers: ceil(ratio x
     * max_steps)) */
    rs->logging_steps = ts->opt.logging_ratio > 0 ? (int64_t)ceil(ts->opt.logging_ratio * (double)rs->total_steps) : ts->opt.logging_steps;
    rs->save_steps = ts->opt.save_ratio > 0 ? (int64_t)ceil(ts->opt.save_ratio * (double)rs->total_steps) : ts->opt.save_steps;
    rs->eval_steps = ts->eval_ratio > 0 ? (int64_t)ceil(ts->eval_ratio * (double)rs->total_steps) : ts->eval_steps;
    if (ts->opt.logging_ratio > 0 || ts->opt.save_ratio > 0 || ts->eval_ratio > 0)
        glm_log_info("of %lld steps: logging every %lld, saving every %lld, evaluating every %lld",
                     (long long)rs->total_steps, (long long)rs->logging_steps, (long long)rs->save_steps,
                     (long long)rs->eval_steps);
    return GLM_OK;
}

/* What the run writes: the adapter config of its checkpoints, the settings and the history they
 * carry, and (rank 0) the output directory, made and locked. */
static glm_status open_outputs(run_state *rs, const train_settings *ts) {
    const glm_backend *be = rs->be;
    size_t nt = target_names(rs->lora, rs->targets);
    /* adapter_config.json names the base by its absolute path, valid from any directory */
    rs->base_path = realpath(ts->opt.model, NULL);
    /* alpha and dropout as the user gave them (doubles: 0.1, not the float 0.100000001...) */
    rs->acfg = (glm_adapter_cfg){rs->lora->r, ts->opt.lora_alpha, ts->opt.lora_dropout, rs->targets, nt,
                                 rs->lora->use_rslora, rs->base_path ? rs->base_path : ts->opt.model};
    json_error_t je;
    rs->settings = ts->settings_json ? json_loads(ts->settings_json, 0, &je) : json_object();
    if (!rs->settings) rs->settings = json_object();
    rs->history = json_array();
    if (be->rank == 0) {
        GLM_TRY(glm_mkdir_p(ts->opt.output_dir));
        GLM_TRY(glm_lock_dir(ts->opt.output_dir, "glmtune train", "--output-dir", &rs->out_lock)); /* a fresh directory: locked once made */
    }
    return GLM_OK;
}

/* The run's two summary lines: the model, and the adapter with the data and the schedule. */
static void log_run(const run_state *rs, const train_settings *ts, uint64_t global_rows, uint64_t steps_per_epoch) {
    glm_log_info("model %s: %s layout, L=%d C=%d H=%d Hkv=%d F=%d V=%d, rope base %g", ts->opt.model,
                 glm_layout_name(rs->model->cfg.layout), rs->model->cfg.L, rs->model->cfg.C, rs->model->cfg.H,
                 rs->model->cfg.Hkv, rs->model->cfg.F, rs->model->cfg.V, rs->model->cfg.rope_base);
    int64_t np = 0;
    for (int i = 0; i < rs->n_params; i++) np += rs->params[i].numel;
    const char *unit = ts->by_sample ? "sample" : "row";
    uint64_t docs = 0; /* the samples (documents) the shards hold, packed rows or not (as glmtune inspect counts) */
    for (size_t k = 0; k < rs->data.n_shards; k++) docs += rs->data.shards[k].n_docs;
    glm_log_info("LoRA r=%d alpha=%g on %d modules (%lld trainable parameters); data: %llu rows x %u tokens, %llu "
                 "samples (%llu targets); %lld optimizer steps, %llu %s%s each (%llu per epoch)", rs->lora->r,
                 rs->lora->alpha, rs->lora->n_sites, (long long)np, (unsigned long long)rs->data.n_rows, rs->data.T,
                 (unsigned long long)docs,
                 (unsigned long long)rs->data.n_targets, (long long)rs->total_steps, (unsigned long long)global_rows, unit,
                 global_rows == 1 ? "" : "s", (unsigned long long)steps_per_epoch);
}

static glm_status setup(run_state *rs, const train_settings *ts) {
    if (rs->be->rank == 0) check_stage(ts);
    const glm_backend *be = rs->be;
    /* the training shards, read and checked once: their row length and count size the plan */
    GLM_TRY(glm_loader_open(&rs->data, ts->opt.data, "train", (uint64_t)ts->opt.seed, true));
    GLM_TRY(check_plan(rs, ts));
    if (ts->opt.shard_base && be->world > 1)
        glm_log_info("--shard-base: each of the %d ranks holds 1/%d of the frozen base weights", be->world, be->world);
    else if (ts->opt.shard_base)
        glm_log_warn("--shard-base with one rank: nothing to shard; the base is held whole");
    GLM_TRY(load_model(rs, ts));
    GLM_TRY(open_data(rs, ts));
    GLM_TRY(init_adapter(rs, ts));
    uint64_t global_rows = 0, steps_per_epoch = 0;
    GLM_TRY(plan_steps(rs, ts, &global_rows, &steps_per_epoch));
    GLM_TRY(open_outputs(rs, ts));
    log_run(rs, ts, global_rows, steps_per_epoch);
    if (ts->resume) GLM_TRY(restore(rs, ts));
    if (rs->cp > 1) {
        glm_cp_layout L;
        glm_cp_layout_make(rs->bb.T, rs->cp, rs->cp_comm->rank, &L);
        glm_log_info("context parallel: each row of %u tokens over %d ranks (%d data-parallel group%s of %d): chunks of %d "
                     "tokens, rank c of a group holding chunks c and %d-c%s", (unsigned)rs->bb.T, rs->cp, rs->dp,
                     rs->dp > 1 ? "s" : "", rs->cp, L.S, 2 * rs->cp - 1,
                     L.Tp > L.T ? "; rows padded with untargeted tokens to a multiple of 2 x the ranks" : "");
    }
    /* the step's buffers now, by the memory plan: an out-of-memory shows here, with the plan */
    glm_model_options mo = train_model_options(ts, rs->cp, rs->cp_comm);
    GLM_TRY(glm_model_set_options(rs->model, &mo));
    glm_plan plan;
    GLM_TRY(glm_model_prepare(rs->model, rs->lora, rs->bb.B, rs->bb.T, 1,
                              (glm_ckpt_mode)ts->ckpt_mode, &plan));
    if (!ts->quiet && be->rank == 0) glm_plan_print(&plan, &rs->model->cfg, stderr);
    return GLM_OK;
}

static void teardown(run_state *rs) {
    batch_free(&rs->bb);
    batch_free(&rs->bb_next);
    free(rs->pf_rows);
    free(rs->pf_mine);
    glm_optim_free(&rs->optim);
    glm_lora_free(rs->lora);
    glm_model_free(rs->model);
    if (rs->cp_comm) rs->be->comm_free(rs->cp_comm);
    dist_close(rs->be);
    glm_loader_close(&rs->data);
    if (rs->has_eval) glm_loader_close(&rs->eval);
    json_decref(rs->history);
    json_decref(rs->settings);
    free(rs->base_path);
    if (rs->out_lock >= 0) close(rs->out_lock);
}

/* One logging window: the optimizer steps since the last log (transformers' Trainer logs
 * tr_loss / (global_step - _globalstep_last_logged), the mean of the steps' losses, and the mean
 * grad norm; here tokens/s is over the window's step time, eval and checkpoint time excluded).
 * tokens and comm_ms are this rank's: its rows' tokens and its time blocked in communication. */
typedef struct {
    double loss_sum, gnorm_sum, seconds, tokens, comm_ms;
    double comm_bytes[GLM_COMM_KINDS]; /* bytes this rank sent in the window's steps, by kind */
    int64_t steps, targets;
} log_window;

/* A log_history entry in transformers' form: {"loss", "grad_norm", "learning_rate", "epoch", "step"}. */
static json_t *history_train(double loss, double gnorm, double lr, double epoch, int64_t step) {
    return json_pack("{s:f,s:f,s:f,s:f,s:I}", "loss", loss, "grad_norm", gnorm, "learning_rate", lr, "epoch", epoch,
                     "step", (json_int_t)step);
}

/* <output_dir>/trainer_state.json at the end of a run, as transformers' trainer.save_state()
 * leaves it (tools such as LLaMA-Factory's plot_loss read it there): the state of the last step,
 * with the run summary entry {"epoch", "step", "total_flos", "train_loss", "train_runtime",
 * "train_samples_per_second", "train_steps_per_second"} appended to log_history. */
static glm_status save_final_state(run_state *rs, const train_settings *ts, double loss_sum, int64_t n_loss,
                                   double seconds, int64_t steps_done, int64_t rows_done) {
    json_t *hist = json_deep_copy(rs->history);
    double epoch = rs->data.n_units ? (double)rs->data.epoch + (double)rs->data.cursor / (double)rs->data.n_units : 0;
    double sec = seconds > 1e-9 ? seconds : 1e-9;
    json_t *sum = json_pack("{s:f,s:I,s:f,s:f,s:f,s:f,s:f}", "epoch", epoch, "step", (json_int_t)rs->step,
                            "total_flos", 0.0, "train_loss", n_loss ? loss_sum / (double)n_loss : 0.0, "train_runtime",
                            seconds, "train_samples_per_second", (double)rows_done / sec, "train_steps_per_second",
                            (double)steps_done / sec);
    if (hist && sum) json_array_append_new(hist, sum);
    glm_ckpt_save_args a = {.output_dir = ts->opt.output_dir, .step = rs->step, .epoch = epoch, .log_history = hist,
                            .max_steps = rs->total_steps, .logging_steps = rs->logging_steps,
                            .eval_steps = rs->eval_steps, .save_steps = rs->save_steps,
                            .train_batch_size = ts->opt.per_device_train_batch_size,
                            .num_train_epochs = ts->opt.num_train_epochs, .num_input_tokens_seen = rs->tokens_seen};
    json_t *st = hist ? glm_trainer_state_json(&a) : NULL;
    char *p = glm_path_join(ts->opt.output_dir, "trainer_state.json");
    glm_status s = st && p ? glm_json_write_file(p, st, 2) : glm_err(GLM_ERR_NOMEM, "out of memory (trainer_state.json)");
    free(p);
    json_decref(st);
    json_decref(hist);
    return s;
}

/* World > 1: every rank learns whether any rank failed (one all-reduce of a flag). A rank that did
 * not fail gets an error saying so; the failed rank keeps its own message. */
static glm_status agree(const glm_backend *be, glm_status s) {
    if (!be || be->world <= 1) return s;
    double bad = s != GLM_OK;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", glm_errmsg());
    glm_status r = glm_comm_all_reduce_host(be, &bad, 1);
    if (r != GLM_OK) return r;
    if (bad > 0) {
        /* The failed rank says why before any rank exits: mpirun stops the whole job at the first
         * non-zero exit, which could cut the failed rank off before its message (then only
         * "stopping: 1 other rank(s) failed" would be seen). A second all-reduce holds the others
         * until it has printed. */
        if (s != GLM_OK) {
            glm_err(s, "%s", keep);
            cli_show_error();
        }
        double none = 0;
        r = glm_comm_all_reduce_host(be, &none, 1);
        if (r != GLM_OK && s == GLM_OK) return r;
    }
    if (s != GLM_OK) return glm_err(s, "%s", keep);
    if (bad > 0) return glm_err(GLM_ERR_ARG, "stopping: %g other rank(s) failed (their message says why)", bad);
    return GLM_OK;
}

/* The model's backward hook: layer l's LoRA gradients are final (last micro-batch of the step),
 * so their all-reduce starts now, one request per tensor, while the earlier layers compute (CPU:
 * MPI_Iallreduce, tested in CI; CUDA: NCCL on the communication stream, run with several ranks on
 * one GPU by tests/gpu/multi.sh, not yet on several GPUs; see kernels/cuda/comm.cu). */
static glm_status bucket_ready(void *user, int layer) {
    run_state *rs = user;
    const glm_backend *be = rs->be;
    const glm_lora *L = rs->lora;
    for (int k = 0; k < L->layer_count[layer]; k++) {
        const glm_lora_site *st = &L->sites[L->layer_first[layer] + k];
        int req;
        GLM_TRY(glm_comm_all_reduce_start(be, rs->params[st->pa].g, rs->params[st->pa].numel, &req));
        GLM_TRY(glm_comm_all_reduce_start(be, rs->params[st->pb].g, rs->params[st->pb].numel, &req));
    }
    glm_comm_progress(be); /* MPI moves the earlier buckets along */
    rs->n_buckets_started++;
    return GLM_OK;
}

/* This rank's rows of a global batch (every dp-th, from its data-parallel group's index) into
 * mine[]; returns how many. */
static uint32_t rows_of_rank(const run_state *rs, const uint64_t *rows, uint32_t got, uint64_t *mine) {
    uint32_t n = 0;
    for (uint32_t i = (uint32_t)rs->dp_rank; i < got; i += (uint32_t)rs->dp) mine[n++] = rows[i];
    return n;
}

/* Rows of micro-batch `micro` (of B) out of n_mine: 0 for a placeholder past them. */
static int micro_rows(uint32_t n_mine, uint32_t micro, int B) {
    uint32_t m0 = micro * (uint32_t)B;
    return m0 >= n_mine ? 0 : (int)(n_mine - m0 < (uint32_t)B ? n_mine - m0 : (uint32_t)B);
}

/* glm_model_step's next_batch hook: during a micro-batch's backward, the next micro-batch of the
 * step, or the first of the next step (its rows peeked from the loader, which does not move), is
 * read and its upload started (glm_model_prefetch). Nothing at an epoch's end, after the last
 * step, or for a placeholder; the step still uploads whatever it is given. */
static glm_status prefetch_next(void *user) {
    run_state *rs = user;
    const int B = rs->pf_B;
    const uint64_t *mine = rs->pf_cur_mine;
    uint32_t micro = rs->pf_micro + 1, n_mine = rs->pf_n_mine;
    if (micro >= rs->pf_n_micro) { /* the next step's first micro-batch */
        if (rs->step + 1 >= rs->total_steps || !rs->pf_rows) return GLM_OK;
        uint32_t got = glm_loader_peek(&rs->data, rs->pf_global, rs->pf_rows);
        n_mine = rows_of_rank(rs, rs->pf_rows, got, rs->pf_mine);
        mine = rs->pf_mine;
        micro = 0;
    }
    int n = micro_rows(n_mine, micro, B);
    if (!n) return GLM_OK;
    glm_batch b = batch_fill(&rs->bb_next, &rs->data, mine + micro * (uint32_t)B, n);
    return glm_model_prefetch(rs->model, &b);
}

/* One optimizer step's forward/backward passes on this rank: its group's rows (every dp-th row of
 * the global batch; dp = world without context parallel) in micro-batches of B; the gradients'
 * all-reduce starts layer by layer during the last micro-batch's backward and is waited for at
 * the end. With world > 1 every rank runs the same number of micro-batches
 * (ceil(ceil(got / dp) / B)), a rank short of rows running an untargeted placeholder row, because
 * every backward (and with --shard-base or context parallel every forward) is a sequence of
 * collectives that all ranks must make. *loss_sum: this rank's sum of target losses (its tokens'
 * share with context parallel); *tokens: its rows' tokens (its share of them). */
static glm_status step_passes(run_state *rs, const train_settings *ts, const uint64_t *rows, uint32_t got, uint64_t *mine,
                              int64_t n_global, double *loss_sum, double *tokens) {
    const glm_backend *be = rs->be;
    int B = (int)ts->opt.per_device_train_batch_size, W = be->world, DP = rs->dp;
    uint32_t n_mine = rows_of_rank(rs, rows, got, mine);
    uint32_t most = DP > 1 ? (got + (uint32_t)DP - 1) / (uint32_t)DP : n_mine;
    uint32_t n_micro = (most + (uint32_t)B - 1) / (uint32_t)B;
    *loss_sum = 0;
    *tokens = 0;
    rs->n_buckets_started = 0;
    glm_status s = GLM_OK;
    rs->pf_B = B;
    rs->pf_cur_mine = mine;
    rs->pf_n_mine = n_mine;
    rs->pf_n_micro = n_micro;
    for (uint32_t micro = 0; micro < n_micro && s == GLM_OK; micro++) {
        uint32_t m0 = micro * (uint32_t)B;
        int n = micro_rows(n_mine, micro, B);
        glm_batch b = batch_fill(&rs->bb, &rs->data, n ? mine + m0 : rows, n ? n : 1);
        if (n == 0) memset(rs->bb.targets, 0, (size_t)rs->bb.T); /* placeholder: no target, zero gradient */
        double ls = 0;
        int64_t k = 0;
        /* the dropout seed of the step: every micro-batch and rank share it, the masks follow the tokens'
         * keys (their places in the data, batch_fill) */
        uint64_t dseed = mix64((uint64_t)ts->opt.seed, (uint64_t)rs->step);
        bool last = micro + 1 == n_micro;
        if (W > 1 && last) glm_model_set_grad_ready(rs->model, bucket_ready, rs);
        rs->pf_micro = micro;
        glm_model_set_next_batch(rs->model, prefetch_next, rs);
        s = glm_model_step(rs->model, rs->lora, &b, (float)(1.0 / (double)n_global), 1, ts->ckpt_mode, dseed, &ls, &k);
        glm_model_set_grad_ready(rs->model, NULL, NULL);
        glm_model_set_next_batch(rs->model, NULL, NULL);
        rs->n_micro_run++;
        *loss_sum += ls;
        if (n) *tokens += (rs->data.by_doc ? (double)rs->bb.T : (double)n * rs->data.T) / rs->cp;
    }
    if (s == GLM_OK && W > 1) {
        if (rs->n_buckets_started != rs->model->cfg.L)
            return glm_err(GLM_ERR_INTERNAL, "the backward started %d of %d gradient buckets", rs->n_buckets_started,
                           rs->model->cfg.L);
        s = glm_comm_sync(be); /* every bucket reduced: the optimizer may read the grads */
    }
    return s;
}

static int strategy_mode(const char *s) {
    return !s || !strcmp(s, "steps") ? 0 : !strcmp(s, "epoch") ? 1 : 2;
}

/* The end of every run: the final adapter goes to output_dir itself as PEFT files (adapter_config.json +
 * adapter_model.safetensors, each written aside and renamed into place), as LLaMA-Factory's
 * trainer.save_model() leaves it, so the YAMLs that chain on it (adapter_name_or_path: saves/.../sft for
 * merging, inference, DPO after SFT) and --init-adapter find it there. */
static glm_status save_final_adapter(run_state *rs, const train_settings *ts) {
    if (rs->be->rank != 0) return GLM_OK;
    glm_status s = glm_adapter_write_files(ts->opt.output_dir, rs->model->be, rs->params, (size_t)rs->n_params, &rs->acfg,
                                           GLM_ST_F32);
    if (s == GLM_OK && !ts->quiet)
        glm_log_info("the final adapter (step %lld) is in %s (adapter_config.json, adapter_model.safetensors)",
                     (long long)rs->step, ts->opt.output_dir);
    return s == GLM_OK ? s : glm_err_context(s, "writing the final adapter into %s", ts->opt.output_dir);
}

/* The training loop's state beside run_state: the step's row buffers, the run's counters, the
 * logging window and the metrics file. */
typedef struct {
    glm_metrics mx;
    bool mx_open;
    int B;                          /* per_device_train_batch_size */
    uint32_t global_rows;           /* rows of a global batch: B x accumulation x data-parallel groups */
    uint64_t *rows, *mine;          /* [global_rows]: the step's global rows; this rank's share of them */
    double *ranks_stats, *tps_rank; /* [3 world], [world]: every rank's window, for rank 0's log */
    int64_t nonfinite_run, nonfinite_total, start_step;
    /* transformers' IntervalStrategy of saving, evaluating and logging: 0 steps, 1 epoch, 2 no */
    int save_mode, eval_mode, log_mode;
    bool save_on, tty;
    bool agreed_failure;            /* the error (if any) was decided alike on every rank */
    int stop_sig;                   /* a rank was asked to stop (SIGTERM, SIGUSR1): the signal; every rank agrees */
    double t_start, run_loss_sum;
    int64_t tokens_total, rows_total, run_losses;
    log_window win;
    double cbytes[GLM_COMM_KINDS], cbytes_step[GLM_COMM_KINDS];
} train_loop;

/* What logging needs of one optimizer step that updated the weights. */
typedef struct {
    double loss, gnorm, lr, tokens, epoch;
    double t_step;     /* when the step began (glm_now) */
    int64_t targets;   /* the global batch's target tokens */
    bool last, epoch_end;
} step_result;

/* This process's place in the run: the rank's backend (dist_detect, dist_backend), the context
 * parallel groups (rs->cp, dp, dp_rank, cp_comm), and, with several ranks, the start line of each
 * rank (the ranks after 0 then log errors only). */
static glm_status join_ranks(run_state *rs, const train_settings *ts) {
    /* under a cap NCCL makes its connections (and their device buffers) when the communicator is
     * created, where the overhead the planner takes off the cap is measured, not at the first
     * collective (NCCL 2.22+; an explicit NCCL_RUNTIME_CONNECT is kept) */
    if (ts->max_gpu_gib > 0) setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    glm_status s = dist_detect(&rs->dist);
    if (s == GLM_OK) s = dist_backend(ts->device, ts->opt.comm_timeout, &rs->dist, &rs->be);
    if (s != GLM_OK) return s;
    const glm_backend *be = rs->be;
    const int rank = be->rank, W = be->world;
    /* context parallel: groups of cp consecutive ranks; every rank decides alike, no collective yet */
    rs->cp = ts->context_parallel > 1 ? ts->context_parallel : 1;
    if (W % rs->cp) {
        s = glm_err(GLM_ERR_ARG, "--context-parallel %d does not divide the %d rank%s of this run (%s); hint: %d, %d, ... "
                    "ranks (--gpus / --nproc) for %d ranks per row, or a --context-parallel that divides %d", rs->cp, W,
                    W > 1 ? "s" : "", rs->dist.how, rs->cp, 2 * rs->cp, rs->cp, W);
        dist_close(be);
        return s;
    }
    rs->dp = W / rs->cp;
    rs->dp_rank = rank / rs->cp;
    if (rs->cp > 1 && (s = glm_ring_supported(be)) != GLM_OK) { /* a backend without the block attention ops */
        s = glm_err_context(s, "--context-parallel %d", rs->cp);
        dist_close(be);
        return s;
    }
    if (rs->cp > 1 && (s = glm_comm_split(be, rs->dp_rank, rank % rs->cp, &rs->cp_comm)) != GLM_OK) {
        dist_close(be);
        return s;
    }
    if (W > 1) {
        if (!ts->quiet) {
            char where[64] = "the CPU backend (MPI)";
            if (!strcmp(be->name, "cuda")) snprintf(where, sizeof where, "GPU %d (NCCL)", rs->dist.device);
            glm_log_plain("glmtune: rank %d of %d: pid %d, %s, started by %s", rank, W, (int)getpid(), where, rs->dist.how);
        }
        if (rank > 0) glm_log_level = 0; /* the other ranks are quiet: only errors, prefixed "rank R: " */
    }
    return GLM_OK;
}

/* Rank 0's metrics.jsonl and TensorBoard events, opened for this run: a fresh run removes an
 * earlier run's metrics, a resumed one drops the points logged after its checkpoint; both start
 * the events with a restart marker. */
static glm_status open_metrics(const run_state *rs, const train_settings *ts, train_loop *tl) {
    glm_status s = GLM_OK;
    if (!ts->resume) { /* a fresh run: no metrics of an earlier run in this directory */
        char *old = glm_path_join(ts->opt.output_dir, "metrics.jsonl");
        unlink(old);
        free(old);
    }
    if (ts->resume) { /* the points after the checkpoint are superseded by this run */
        int64_t dropped = 0;
        s = glm_metrics_truncate(ts->opt.output_dir, rs->step, &dropped);
        if (s == GLM_OK && dropped)
            glm_log_info("metrics.jsonl: removed %lld line(s) logged after step %lld by the run being resumed",
                         (long long)dropped, (long long)rs->step);
    }
    if (s == GLM_OK) s = glm_metrics_open(&tl->mx, ts->opt.output_dir, true);
    tl->mx_open = s == GLM_OK;
    if (s == GLM_OK && ts->resume) s = glm_metrics_restart(&tl->mx, rs->step); /* TensorBoard drops the superseded points */
    /* a fresh run's first event file starts with a START marker too: TensorBoard's Python loader
     * (--load_fast=false) purges on a later file's marker only when the run's first file had one */
    if (s == GLM_OK && !ts->resume) s = glm_metrics_restart(&tl->mx, rs->step);
    return s;
}

/* The loop's row buffers, strategies and counters from the settings and the run's current step;
 * false when a buffer could not be allocated. */
static bool loop_init(run_state *rs, const train_settings *ts, train_loop *tl) {
    const int W = rs->be->world;
    tl->B = (int)ts->opt.per_device_train_batch_size;
    int accum = (int)ts->opt.gradient_accumulation_steps;
    tl->global_rows = (uint32_t)(tl->B * accum * rs->dp);
    tl->rows = calloc(tl->global_rows, sizeof *tl->rows);
    tl->mine = calloc(tl->global_rows, sizeof *tl->mine);
    rs->pf_global = tl->global_rows;
    rs->pf_rows = calloc(tl->global_rows, sizeof *rs->pf_rows);
    rs->pf_mine = calloc(tl->global_rows, sizeof *rs->pf_mine);
    tl->ranks_stats = calloc(3 * (size_t)W, sizeof(double));
    tl->tps_rank = calloc((size_t)W, sizeof(double));
    tl->start_step = rs->step;
    tl->save_mode = strategy_mode(ts->opt.save_strategy);
    tl->eval_mode = strategy_mode(ts->opt.eval_strategy);
    tl->log_mode = strategy_mode(ts->opt.logging_strategy);
    tl->save_on = tl->save_mode != 2;
    tl->t_start = glm_now();
    tl->tty = isatty(2) && !ts->quiet && rs->be->rank == 0;
    return tl->rows && tl->mine && tl->ranks_stats && tl->tps_rank && rs->pf_rows && rs->pf_mine;
}

/* Frees the row buffers that loop_init allocated (the prefetch rows are run_state's: teardown). */
static void loop_free(train_loop *tl) {
    free(tl->rows);
    free(tl->mine);
    free(tl->ranks_stats);
    free(tl->tps_rank);
}

/* The step joins the logging window; at a logging point (logging_strategy) the window's mean
 * loss, this step's grad norm and the tokens/s (with several ranks: all of theirs, gathered)
 * go to metrics.jsonl and log_history (rank 0) and the status line, and the window restarts. */
static glm_status log_step(run_state *rs, const train_settings *ts, train_loop *tl, const step_result *r) {
    const glm_backend *be = rs->be;
    const int rank = be->rank, W = be->world;
    glm_status s = GLM_OK;
    log_window *win = &tl->win;
    win->loss_sum += r->loss;
    win->gnorm_sum += r->gnorm;
    win->steps++;
    win->targets += r->targets;
    win->tokens += r->tokens;
    win->seconds += glm_now() - r->t_step;
    win->comm_ms += glm_comm_wait_ms(be, 1);
    glm_comm_bytes(be, tl->cbytes, 1);
    for (int k = 0; k < GLM_COMM_KINDS; k++) win->comm_bytes[k] += tl->cbytes[k];
    tl->run_loss_sum += r->loss;
    tl->run_losses++;
    /* transformers' DefaultFlowCallback: steps: every logging_steps (and the first with logging_first_step);
     * epoch: at each epoch's end; no: never. glmtune also logs the last step (the end of the curve). */
    bool log_now = tl->log_mode == 0   ? rs->step % rs->logging_steps == 0 || r->last || (ts->opt.logging_first_step && rs->step == 1)
                   : tl->log_mode == 1 ? r->epoch_end || r->last || (ts->opt.logging_first_step && rs->step == 1)
                                       : false;
    /* loss: the window's mean (transformers logs tr_loss / steps since the last log); grad_norm: this
     * step's, as transformers logs the last step's grad_norm (trainer.py _maybe_log_save_evaluate) */
    double wloss = win->loss_sum / (double)win->steps, wgnorm = r->gnorm;
    double wtps = win->tokens / (win->seconds > 1e-9 ? win->seconds : 1e-9), comm_share = NAN;
    if (log_now && W > 1) { /* every rank's tokens, seconds and communication wait, for rank 0's log */
        double *ranks_stats = tl->ranks_stats;
        memset(ranks_stats, 0, 3 * (size_t)W * sizeof(double));
        ranks_stats[rank] = win->tokens;
        ranks_stats[W + rank] = win->seconds;
        ranks_stats[2 * W + rank] = win->comm_ms / 1e3;
        if ((s = glm_comm_all_reduce_host(be, ranks_stats, 3 * W)) != GLM_OK) return s;
        double tok = 0, sec = 0, comm = 0;
        for (int q = 0; q < W; q++) {
            double rs_ = ranks_stats[W + q] > 1e-9 ? ranks_stats[W + q] : 1e-9;
            tl->tps_rank[q] = ranks_stats[q] / rs_;
            tok += ranks_stats[q];
            sec = ranks_stats[W + q] > sec ? ranks_stats[W + q] : sec;
            comm += ranks_stats[2 * W + q] / rs_;
        }
        wtps = tok / (sec > 1e-9 ? sec : 1e-9); /* in total: every rank's tokens over the slowest rank's time */
        comm_share = comm / W;                  /* mean over the ranks of the step time spent waiting */
    }
    if (log_now && rank == 0) {
        glm_metrics_rec mr = glm_metrics_rec_empty(rs->step);
        mr.epoch = r->epoch;
        mr.loss = wloss;
        mr.grad_norm = wgnorm;
        mr.learning_rate = r->lr;
        mr.target_tokens = win->targets;
        mr.tokens_per_second = wtps;
        if (W > 1) {
            mr.tokens_per_second_rank = tl->tps_rank;
            mr.n_ranks = W;
            mr.comm_share = comm_share;
            for (int k = 0; k < GLM_COMM_KINDS; k++) tl->cbytes_step[k] = win->comm_bytes[k] / (double)win->steps;
            mr.comm_bytes = tl->cbytes_step;
        }
        s = glm_metrics_log(&tl->mx, &mr);
        json_array_append_new(rs->history, history_train(wloss, wgnorm, r->lr, r->epoch, rs->step));
    }
    if (!ts->quiet && rank == 0 && (tl->tty || log_now)) { /* on a terminal every step (the window so far), in a log each log */
        double el = glm_now() - tl->t_start,
               eta = el / (double)(rs->step - tl->start_step) * (double)(rs->total_steps - rs->step);
        char dp[96] = "";
        if (W > 1 && log_now) snprintf(dp, sizeof dp, " (%d ranks, %.0f/rank, comm %.0f%%)", W, wtps / W, 100 * comm_share);
        glm_log_status(tl->tty, "step %lld/%lld  epoch %.2f  loss %.4f  lr %.3g  grad norm %.3f  %.0f tok/s%s  ETA %.0fs",
                       (long long)rs->step, (long long)rs->total_steps, r->epoch, wloss, r->lr, wgnorm, wtps, dp, eta);
    }
    if (log_now) *win = (log_window){0};
    return s;
}

/* The eval split's loss at this step: to metrics.jsonl, log_history and the log (rank 0). */
static glm_status evaluate_step(run_state *rs, const train_settings *ts, train_loop *tl, double epoch) {
    const glm_backend *be = rs->be;
    const int B = tl->B;
    double el, t_eval = glm_now();
    glm_status s = evaluate(rs->model, rs->lora, &rs->eval, &rs->bb, B, rs->dp, rs->dp_rank, &el);
    if (s == GLM_OK && be->rank == 0) {
        double rt = glm_now() - t_eval, rts = rt > 1e-9 ? rt : 1e-9;
        uint64_t ev_steps = (rs->eval.n_units + (uint64_t)B - 1) / (uint64_t)B;
        glm_metrics_rec mr = glm_metrics_rec_empty(rs->step);
        mr.epoch = epoch;
        mr.eval_loss = el;
        mr.eval_perplexity = exp(el);
        s = glm_metrics_log(&tl->mx, &mr);
        json_array_append_new(rs->history,
                              json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I}", "eval_loss", el, "eval_perplexity", exp(el),
                                        "eval_runtime", rt, "eval_samples_per_second", (double)rs->eval.n_units / rts,
                                        "eval_steps_per_second", (double)ev_steps / rts, "epoch", epoch, "step",
                                        (json_int_t)rs->step));
        if (!ts->quiet) glm_log_plain("step %lld: eval loss %.4f, perplexity %.2f", (long long)rs->step, el, exp(el));
    }
    glm_comm_wait_ms(be, 1); /* evaluation's waits are not the training step's */
    return s;
}

/* One optimizer step: the global batch read and its passes run, the loss all-reduced, the
 * gradient norm, and the update (skipped for a batch without targets, or for a non-finite loss
 * or norm, max_nonfinite of them in a row stopping the run); then logging, evaluation and the
 * checkpoint as their strategies say. */
static glm_status train_step(run_state *rs, const train_settings *ts, train_loop *tl) {
    const glm_backend *be = rs->be;
    glm_status s;
    step_result r = {.t_step = glm_now()};
    glm_comm_wait_ms(be, 1); /* waits before the step (the last log's, a checkpoint's) are not its own */
    glm_comm_bytes(be, tl->cbytes, 1); /* and so are their bytes */
    uint32_t got;
    /* the global batch: the loader's position is global and the same on every rank */
    if ((s = glm_loader_next(&rs->data, tl->global_rows, tl->rows, &got)) != GLM_OK) return s;
    int64_t n_global = 0;
    for (uint32_t i = 0; i < got; i++) n_global += glm_loader_unit_targets(&rs->data, tl->rows[i]);
    /* this step took the epoch's last rows (samples): transformers' on_epoch_end follows it */
    r.epoch_end = rs->data.cursor >= rs->data.n_units;
    if ((s = glm_lora_zero_grads(rs->lora)) != GLM_OK) return s;
    if (n_global == 0) { /* the same decision on every rank: the batch is global */
        glm_log_warn("step %lld: the batch has no target token; skipped (not logged as loss 0)", (long long)rs->step + 1);
        rs->step++;
        if (rs->step == rs->total_steps && tl->save_on) s = save_checkpoint(rs, ts); /* the run still ends with a checkpoint */
        return s;
    }
    double loss_sum = 0, step_tokens = 0;
    if ((s = step_passes(rs, ts, tl->rows, got, tl->mine, n_global, &loss_sum, &step_tokens)) != GLM_OK) return s;
    tl->tokens_total += (int64_t)step_tokens;
    tl->rows_total += got;
    if (rs->data.by_doc) /* every rank's samples: the global batch */
        for (uint32_t i = 0; i < got; i++) rs->tokens_seen += rs->data.docs[tl->rows[i]].len;
    else
        rs->tokens_seen += (int64_t)got * rs->data.T; /* every rank's rows: the global batch */
    /* the loss over every rank's target tokens (docs/design.md §4): all-reduced, so every rank
     * takes the same skip / stop decisions below */
    /* ... with whether a rank was asked to stop (and by which signal), so all ranks stop after this step */
    int asked = g_stop_sig;
    double red[3] = {loss_sum, asked ? 1.0 : 0.0, (double)asked};
    if ((s = glm_comm_all_reduce_host(be, red, 3)) != GLM_OK) return s;
    loss_sum = red[0];
    if (red[1] > 0) tl->stop_sig = (int)lround(red[2] / red[1]);
    if (ts->opt.dump_grads && *ts->opt.dump_grads && rs->step == tl->start_step && tl->start_step == 0 && be->rank == 0)
        if ((s = dump_grads(be, ts->opt.dump_grads, rs->params, rs->n_params)) != GLM_OK) return s;
    double loss = loss_sum / (double)n_global, gnorm;
    /* from the all-reduced gradients: the same bits on every rank */
    if ((s = glm_grad_norm(&rs->optim, rs->params, (size_t)rs->n_params, &gnorm)) != GLM_OK) return s;
    double lr = glm_lr_at(&rs->sched, rs->step);
    rs->step++;
    if (!isfinite(loss) || !isfinite(gnorm)) {
        tl->nonfinite_run++;
        tl->nonfinite_total++;
        glm_log_warn("step %lld: non-finite %s (%g); the update is skipped (%lld in a row)", (long long)rs->step,
                     isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? gnorm : loss, (long long)tl->nonfinite_run);
        if (tl->nonfinite_run >= ts->opt.max_nonfinite) {
            s = glm_err(GLM_ERR_NUMERIC, "%lld steps in a row had a non-finite loss or gradient norm; stopping. hint: "
                        "lower --learning-rate, check the data with glmtune inspect, or resume from the last "
                        "checkpoint", (long long)tl->nonfinite_run);
            tl->agreed_failure = true; /* every rank decided it from the same values */
            return s;
        }
        if (rs->step == rs->total_steps && tl->save_on) s = save_checkpoint(rs, ts); /* the run still ends with a checkpoint */
        return s;
    }
    tl->nonfinite_run = 0;
    glm_step_stats st;
    if ((s = glm_optim_step(&rs->optim, rs->params, (size_t)rs->n_params, lr, &st)) != GLM_OK) return s;
    r.loss = loss;
    r.gnorm = gnorm;
    r.lr = lr;
    r.targets = n_global;
    r.tokens = step_tokens;
    r.epoch = (double)rs->data.epoch + (double)rs->data.cursor / (double)rs->data.n_units;
    r.last = rs->step == rs->total_steps;
    s = log_step(rs, ts, tl, &r);
    bool eval_now = tl->eval_mode == 0   ? rs->eval_steps > 0 && (rs->step % rs->eval_steps == 0 || r.last)
                    : tl->eval_mode == 1 ? r.epoch_end || r.last
                                         : false;
    if (s == GLM_OK && rs->has_eval && eval_now) s = evaluate_step(rs, ts, tl, r.epoch);
    bool save_now = tl->save_mode == 0   ? (rs->save_steps > 0 && rs->step % rs->save_steps == 0) || r.last
                    : tl->save_mode == 1 ? r.epoch_end || r.last
                                         : false;
    if (s == GLM_OK && save_now) s = save_checkpoint(rs, ts);
    if (s == GLM_OK && tl->stop_sig && rs->saved_step != rs->step) s = save_checkpoint(rs, ts); /* whatever the strategy */
    return s;
}

/* The run's end, whatever s says: the status line ended, metrics closed; on success the loss
 * plot, the final adapter in output_dir, trainer_state.json and the summary lines. */
static glm_status finish_run(run_state *rs, const train_settings *ts, train_loop *tl, glm_status s) {
    const int rank = rs->be->rank, W = rs->be->world;
    if (rank == 0) glm_log_status_end();
    if (s == GLM_OK && rs->step == tl->start_step && rs->step >= rs->total_steps)
        glm_log_info("nothing to do: the run already has %lld of %lld steps", (long long)rs->step, (long long)rs->total_steps);
    if (tl->mx_open) glm_metrics_close(&tl->mx);
    if (s == GLM_OK && rank == 0 && json_array_size(rs->history)) s = train_plot_history(rs->history, ts->opt.output_dir);
    if (s == GLM_OK && tl->stop_sig) { /* stopped early: the checkpoint holds the state; there is no final adapter */
        g_stopped_sig = tl->stop_sig;
        if (rank == 0) /* ranks that glmtune's supervisor started exit 0: it reports 128 + the signal it got */
        {
            char code[32] = "";
            if (!getenv("GLMTUNE_SUPERVISED")) snprintf(code, sizeof code, " (exit status %d)", 128 + tl->stop_sig);
            glm_log_warn("stopped by %s after step %lld of %lld: checkpoint-%lld is in %s; resume with "
                         "--resume-from-checkpoint%s",
                         tl->stop_sig == SIGTERM ? "SIGTERM" : tl->stop_sig == SIGUSR1 ? "SIGUSR1" : strsignal(tl->stop_sig),
                         (long long)rs->step, (long long)rs->total_steps, (long long)rs->step, ts->opt.output_dir, code);
        }
        return s;
    }
    if (s == GLM_OK) s = save_final_adapter(rs, ts);
    if (s == GLM_OK && rank == 0)
        s = save_final_state(rs, ts, tl->run_loss_sum, tl->run_losses, glm_now() - tl->t_start, rs->step - tl->start_step,
                             tl->rows_total);
    if (tl->nonfinite_total)
        glm_log_warn("%lld steps were skipped for a non-finite loss or gradient norm", (long long)tl->nonfinite_total);
    if (s == GLM_OK && !ts->quiet)
        glm_log_info("done: %lld steps, %lld tokens%s in %.1f s; the adapter and checkpoints in %s (merge with glmtune "
                     "export-adapter --checkpoint %s --merge -o DIR)", (long long)(rs->step - tl->start_step),
                     (long long)tl->tokens_total, W > 1 ? " on this rank" : "", glm_now() - tl->t_start, ts->opt.output_dir,
                     ts->opt.output_dir);
    if (s == GLM_OK && rs->model && rs->n_micro_run)
        glm_log_debug("%lld of %lld micro-batches were uploaded during the previous one's backward, %lld were still on the "
                      "device from an earlier step (the others, uploaded by their own step: %s)",
                      (long long)rs->model->batches_prefetched, (long long)rs->n_micro_run, (long long)rs->model->batches_kept,
                      rs->cp > 1 ? "all, as context parallel uploads each rank's chunks itself"
                                 : "the first, those after an epoch's end or an evaluation, placeholders");
    return s;
}

glm_status train_run(const train_settings *ts) {
    run_state rs;
    memset(&rs, 0, sizeof rs);
    rs.out_lock = -1;
    glm_status s = join_ranks(&rs, ts);
    if (s != GLM_OK) return s;
    const glm_backend *be = rs.be;
    const int rank = be->rank;
    /* rank 0 locks the directory (when it exists), clears it if asked; the others wait */
    if (rank == 0) s = glm_lock_dir(ts->opt.output_dir, "glmtune train", "--output-dir", &rs.out_lock);
    s = agree(be, rank == 0 && s == GLM_OK ? train_check_output_dir(ts) : s);
    if (s == GLM_OK) s = agree(be, setup(&rs, ts));
    train_loop tl;
    memset(&tl, 0, sizeof tl);
    if (s == GLM_OK && rank == 0) s = open_metrics(&rs, ts, &tl);
    s = agree(be, s);
    if (!loop_init(&rs, ts, &tl) && s == GLM_OK)
        s = glm_err(GLM_ERR_NOMEM, "out of memory (%u rows per step)", tl.global_rows);
    tl.agreed_failure = s != GLM_OK; /* setup failures were agreed: every rank stops by itself */
    if (s == GLM_OK) glm_comm_wait_ms(be, 1);
    rs.saved_step = -1;
    while (s == GLM_OK && rs.step < rs.total_steps && !tl.stop_sig) s = train_step(&rs, ts, &tl);
    if (s != GLM_OK && be->world > 1 && !tl.agreed_failure) {
        /* an error on this rank alone: the others may be waiting in a collective; stop them all */
        glm_log_error("%s; stopping every rank", glm_errmsg());
        glm_comm_abort(be, 1); /* MPI_Abort does not return; NCCL: the launcher stops the others */
        _exit(1);
    }
    s = finish_run(&rs, ts, &tl, s);
    loop_free(&tl);
    teardown(&rs);
    return s;
}
