/* glmtune tokenize: conversation corpora -> packed GLM-4 shards + manifest.json + report.
 *
 * Pipeline (docs/design.md §2): the reader (dataset/reader.h) streams records from every input in
 * order; batches of records are converted (dataset/formats.h) and rendered + encoded
 * (tokenize/template/chat.h) by a pool of worker threads while the next batch is read; results are
 * consumed in input order, so the output does not depend on the thread count; kept samples go
 * to the validation set or the packer (dataset/packer.h), which writes shards atomically.
 * Everything is written into a temporary directory that replaces OUTDIR only at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/args.h"
#include "common/fileio.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/progress.h"
#include "common/pyjson.h"
#include "dataset/dataset_info.h"
#include "dataset/formats.h"
#include "dataset/packer.h"
#include "dataset/reader.h"
#include "tokenize/template/chat.h"
#include "tokenize/template/template.h"
#include "tokenize/tokenizer.h"
#include "tool/cli.h"
#include "tool/tokenize/tokenize_config.h"
#include "tool/tokenize/tokenize_report.h"
#include "tool/tokenize/tokenize_stdio.h"

static const char *USAGE =
    "usage: glmtune tokenize --tokenizer PATH [options] -o OUTDIR INPUT...\n"
    "       glmtune tokenize --config FILE.yaml [options] [-o OUTDIR] [INPUT...]\n"
    "       glmtune tokenize --tokenizer PATH --encode|--decode  < in.jsonl > out.jsonl";
static const char *ABOUT =
    "Reads conversation corpora (or plain text for pretraining) and writes packed training shards\n"
    "in the GLM-4 chat format. INPUT: files, directories or globs; .json (array or one object) and\n"
    ".jsonl, plain or .gz .zst .xz .bz2, or inside .tar .tar.gz .zip archives; a LLaMA-Factory\n"
    "dataset_info.json; - is standard input. Options also spelled with underscores (--max_samples),\n"
    "and --opt=value.\n";

typedef struct {
    const char *tokenizer_path, *out, *format_name, *dataset, *template_path, *report_path;
    const char *text_column, *config_path, *dataset_dir;
    bool chat_only;        /* a YAML of stage sft (or another chat stage): pretraining entries dropped */
    const char *default_system; /* system message of the samples that have none (LLaMA-Factory's default_system) */
    const char *eval_dataset;   /* entries that go to the val split (LLaMA-Factory's eval_dataset) */
    char *reader_filter;        /* dataset + eval_dataset names for the reader (owned) */
    uint64_t seq_len, seed, threads, shard_rows;
    int64_t max_samples;   /* -1: all */
    double val_size;       /* >= 1: a count; (0, 1): a fraction; 0: none */
    int train_on;          /* glm_train_on bits */
    bool truncate, strict, quiet, encode, decode, keep_reasoning, merge_turns;
    bool lf_truncate;      /* --config without --truncate: cut a long chat as LLaMA-Factory does (lf_cut) */
    /* which settings the command line gave (they override --config) */
    bool set_seq_len, set_seed, set_val_size, set_threads, set_train_on, set_format, set_max_samples;
    const char **inputs;
    int n_inputs;
    tok_config cfg;        /* --config, holds the strings it supplied */
} tok_opts;

/* ------------------------------------------------------------------ one record, in and out */

/* Where a thread puts the tokens of the records it processes in one batch, one after the other:
 * the thread's own memory, reused batch after batch (two sets, as two batches are alive: the one
 * being processed and the one being consumed). No per-record allocation, and the reading thread
 * only reads these (a free into another thread's malloc arena takes that arena's lock). */
typedef struct {
    glm_u32vec ids;
    glm_u8vec tg;
} out_buf;

typedef struct {
    glm_record rec;        /* rec.source points to `source` (interned, lives for the run) */
    /* results: ids and targets are views of out->ids/out->tg from `off` (out_view refreshes the
     * pointers once the batch is done: the buffer may move while later records are added) */
    glm_u32vec ids;
    glm_u8vec tg;
    out_buf *out;
    size_t off;
    const char *drop;      /* reason key, or NULL when kept */
    char *drop_detail;
    const char *notes[8];
    int n_notes;
    bool truncated;
    glm_format layout;     /* the record's layout */
    uint32_t window;       /* > 0: a text longer than T, cut into documents of `window` tokens */
    int flag_turns, flag_off; /* turns whose target status came from a loss flag (off: not trained) */
} job;

typedef struct {
    const tok_opts *o;
    const glm_tokenizer *tok;
    const glm_template *tpl;
    glm_convert_opts copt;
    job *jobs;
    size_t n_jobs;
    size_t next;           /* atomic work counter */
    int parity;            /* which of a thread's two out_bufs this batch uses */
} batch_ctx;

static void job_drop(job *j, const char *reason, const char *msg) {
    j->drop = reason;
    free(j->drop_detail);
    if (asprintf(&j->drop_detail, "%s:%lld (record %lld): %s", j->rec.source, (long long)j->rec.line,
                 (long long)j->rec.index, msg) < 0)
        j->drop_detail = NULL;
}

static void pretokenized(batch_ctx *c, job *j, const glm_conversation *conv, out_buf *ob) {
    size_t n = json_array_size(conv->input_ids);
    uint32_t V = c->tok ? glm_tokenizer_vocab_size(c->tok) : 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(conv->input_ids, i);
        json_int_t id = json_integer_value(x);
        if (!json_is_integer(x) || id < 0 || id > UINT32_MAX || (V && (uint64_t)id >= V)) {
            char msg[160];
            snprintf(msg, sizeof msg, "input_ids[%zu] = %lld is not a token id%s", i, (long long)id,
                     V ? " of this tokenizer" : "");
            job_drop(j, "bad_token_id", msg);
            return;
        }
        json_t *lab = conv->labels ? json_array_get(conv->labels, i) : NULL;
        json_int_t l = lab ? json_integer_value(lab) : id;
        if (conv->labels && l != -100 && l != id) {
            char msg[200];
            snprintf(msg, sizeof msg, "labels[%zu] = %lld is neither -100 nor input_ids[%zu] = %lld; hint: labels "
                     "must be aligned with input_ids (transformers convention, the model shifts them)", i,
                     (long long)l, i, (long long)id);
            job_drop(j, "labels_mismatch", msg);
            return;
        }
        glm_vec_push(ob->ids, (uint32_t)id);
        glm_vec_push(ob->tg, (uint8_t)(i > 0 && l != -100));
    }
}

static void process_tokens(batch_ctx *c, job *j);

static void process_record(batch_ctx *c, job *j, out_buf *ob) {
    glm_record_parse_keep(&j->rec); /* the reader defers the JSON parse to the workers; job_clear frees the bytes */
    if (j->rec.reason) {
        j->drop = j->rec.reason;
        j->drop_detail = strdup(j->rec.detail);
        return;
    }
    glm_conversation conv;
    const char *reason = NULL;
    glm_err_clear();
    glm_status s = glm_record_convert_ex(&j->rec, &c->copt, &conv, &reason);
    if (s != GLM_OK) {
        j->drop = reason ? reason : "bad_record";
        j->drop_detail = strdup(glm_errmsg());
        return;
    }
    for (int k = 0; k < conv.n_notes && j->n_notes < 8; k++) j->notes[j->n_notes++] = conv.notes[k];
    j->layout = conv.format;
    j->flag_turns = conv.loss_flag_turns;
    j->flag_off = conv.loss_flag_off;
    size_t n0 = ob->ids.n; /* == ob->tg.n */
    if (conv.format == GLM_FMT_PRETOKENIZED) {
        pretokenized(c, j, &conv, ob);
    } else if (!c->tok) {
        job_drop(j, "needs_tokenizer", "a conversation or text record needs --tokenizer (only pre-tokenized records do not)");
    } else if (conv.format == GLM_FMT_TEXT) {
        s = glm_text_encode(c->tok, c->tpl, json_string_value(conv.text), json_string_length(conv.text), &ob->ids, &ob->tg);
        if (s != GLM_OK) job_drop(j, "render_error", glm_errmsg());
    } else {
        size_t nm = json_array_size(conv.messages);
        const char *role_last = json_string_value(json_object_get(json_array_get(conv.messages, nm ? nm - 1 : 0), "role"));
        if (nm > 1 && role_last && !strcmp(role_last, "user")) {
            /* a user turn after the last reply: nothing to learn from it. LLaMA-Factory's converters drop such a
             * sample (an odd message count is "invalid"); under its YAML glmtune does too, else it is kept, noted */
            if (c->o->lf_truncate) {
                glm_conversation_free(&conv);
                job_drop(j, "trailing_user_turn", "the conversation ends with a user turn after the last assistant "
                         "turn; LLaMA-Factory drops such a sample (hint: without --config it is kept, the turn untrained)");
                return;
            }
            if (j->n_notes < 8) j->notes[j->n_notes++] = "trailing_user_turn_kept";
        }
        json_t *first = json_array_get(conv.messages, 0);
        const char *role0 = json_string_value(json_object_get(first, "role"));
        bool has_system = role0 && !strcmp(role0, "system");
        const char *sys0 = has_system ? json_string_value(json_object_get(first, "content")) : NULL;
        if (c->o->default_system && !has_system) {
            /* LLaMA-Factory: system = the sample's system or default_system (template.encode) */
            json_array_insert_new(conv.messages, 0,
                                  json_pack("{s:s,s:s}", "role", "system", "content", c->o->default_system));
            if (j->n_notes < 8) j->notes[j->n_notes++] = "default_system_added";
        } else if (c->o->default_system && has_system && (!sys0 || !*sys0)) {
            /* an empty system message: the one that carries the sample's tools (formats.c puts them on a system
             * message of its own), or a record's "system": "". LLaMA-Factory's `system or default_system` takes
             * the default there too, rendered with the tools; the chat template puts it after the tool block */
            json_object_set_new(first, "content", json_string(c->o->default_system));
            if (j->n_notes < 8) j->notes[j->n_notes++] = "default_system_added";
        }
        s = glm_chat_encode(c->tok, c->tpl, conv.messages, (glm_train_on)c->o->train_on, &ob->ids, &ob->tg);
        if (s != GLM_OK) job_drop(j, "render_error", glm_errmsg());
    }
    glm_conversation_free(&conv);
    if (!j->drop && ob->tg.n != ob->ids.n) job_drop(j, "render_error", "internal: targets and ids differ in length");
    if (j->drop) {
        ob->ids.n = ob->tg.n = n0; /* nothing of it is kept */
        return;
    }
    j->out = ob;
    j->off = n0;
    j->ids = (glm_u32vec){ob->ids.v + n0, ob->ids.n - n0, 0};
    j->tg = (glm_u8vec){ob->tg.v + n0, ob->tg.n - n0, 0};
    process_tokens(c, j);
    if (j->drop) ob->ids.n = ob->tg.n = n0;
    else ob->ids.n = ob->tg.n = n0 + j->ids.n; /* --truncate may have shortened it */
}

/* LLaMA-Factory's infer_seqlen (data/processor/processor_utils.py): the lengths a (source,
 * target) pair keeps within `cutoff` tokens: the target is kept whole when it is under half of
 * the budget, else the source when it is, else both in proportion to their lengths. */
static void lf_infer_seqlen(size_t src, size_t tgt, size_t cutoff, size_t *src_keep, size_t *tgt_keep) {
    size_t max_tgt = tgt * 2 < cutoff ? cutoff
                   : src * 2 < cutoff ? cutoff - src
                                      : (size_t)((double)cutoff * ((double)tgt / (double)(src + tgt)));
    *tgt_keep = tgt < max_tgt ? tgt : max_tgt;
    size_t max_src = cutoff > *tgt_keep ? cutoff - *tgt_keep : 0;
    *src_keep = src < max_src ? src : max_src;
}

/* Cuts a chat longer than T as LLaMA-Factory's supervised processor does (_encode_supervised_example):
 * the tokens are split into (source, target) pairs, a source being a run of untargeted tokens (the
 * prompt turns up to the assistant's role token) and a target the run of targets after it (the
 * assistant's reply and its end token); with one token kept back for the end (LLaMA-Factory's
 * efficient_eos), each pair in turn keeps the first tokens of its source and its target that
 * infer_seqlen gives for the budget left, until the budget is spent. The sample's last token (the
 * end-of-turn token) then closes it, a target when the token before it is. In place; returns the
 * new length (<= T). */
static size_t lf_cut(uint32_t *ids, uint8_t *tg, size_t n, size_t T) {
    uint32_t end_id = ids[n - 1];
    size_t total = 1, w = 0, i = 0;
    while (i < n && total < T) {
        size_t s0 = i;
        while (i < n && !tg[i]) i++;
        size_t s1 = i;
        while (i < n && tg[i]) i++;
        size_t src = s1 - s0, tgt = i - s1, ks, kt;
        lf_infer_seqlen(src, tgt, T - total, &ks, &kt);
        memmove(ids + w, ids + s0, 4 * ks);
        memmove(tg + w, tg + s0, ks);
        w += ks;
        memmove(ids + w, ids + s1, 4 * kt);
        memmove(tg + w, tg + s1, kt);
        w += kt;
        total += ks + kt;
    }
    if (w > 0 && ids[w - 1] == end_id && tg[w - 1]) return w; /* it ends with a whole turn and its end token */
    ids[w] = end_id;
    tg[w] = w > 0 && tg[w - 1];
    return w + 1;
}

/* The checks and cuts on a record's tokens (j->ids, j->tg). */
static void process_tokens(batch_ctx *c, job *j) {
    uint64_t T = c->o->seq_len;
    if (j->ids.n > T && j->layout != GLM_FMT_TEXT && c->o->lf_truncate && !c->o->truncate && T >= 2) {
        j->ids.n = j->tg.n = lf_cut(j->ids.v, j->tg.v, j->ids.n, (size_t)T);
        j->truncated = true;
    }
    if (j->ids.n > T && j->layout == GLM_FMT_TEXT && !c->o->truncate) {
        /* pretraining text: consecutive windows of T tokens, each a document (see the consumer) */
        j->window = (uint32_t)T;
    } else if (j->ids.n > T) {
        if (!c->o->truncate) {
            char msg[160];
            snprintf(msg, sizeof msg, "%zu tokens, longer than --seq-len %llu; hint: --truncate keeps its first tokens and the end-of-turn token", j->ids.n,
                     (unsigned long long)T);
            job_drop(j, "too_long", msg);
            return;
        }
        /* keep the first T-1 tokens and the end-of-turn token; that token is a target only when
         * the token before it (now token T-2) belongs to an assistant turn, which is what the
         * target flag of the token it replaces says (targets[i]: token i-1 is an assistant's) */
        j->ids.v[T - 1] = j->ids.v[j->ids.n - 1];
        j->ids.n = j->tg.n = T;
        j->truncated = true;
    }
    size_t nt = 0;
    for (size_t i = 1; i < j->tg.n; i++) nt += j->tg.v[i] != 0;
    if (j->ids.n == 0) job_drop(j, "empty", "the sample has no tokens");
    else if (nt == 0) job_drop(j, "no_target", "no token to train on (no assistant reply, or all masked); hint: a sample needs "
                                  "an assistant turn (with --truncate: one that starts before the cut)");
}

/* One record, its jansson values (the parsed record, the conversation, the template's) in
 * `arena`: all of them are freed before it returns, and the arena is reset for the next. */
static void process(batch_ctx *c, job *j, glm_arena *arena, out_buf *ob) {
    glm_json_arena_begin(arena);
    process_record(c, j, ob);
    json_decref(j->rec.value);
    j->rec.value = NULL;
    glm_json_arena_end();
    glm_arena_reset(arena);
}

/* Takes records of batch c until none is left (by several threads at once); their tokens go to
 * ob[c->parity], emptied first (what it held belongs to the batch before the last one, which the
 * reading thread has consumed). */
static void run_batch(batch_ctx *c, glm_arena *arena, out_buf *ob) {
    out_buf *o = &ob[c->parity];
    if (o->ids.cap > (1u << 24)) glm_vec_free(o->ids); /* after a very long text: give it back */
    if (o->tg.cap > (1u << 24)) glm_vec_free(o->tg);
    o->ids.n = o->tg.n = 0;
    for (;;) {
        size_t i = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
        if (i >= c->n_jobs) break;
        process(c, &c->jobs[i], arena, o);
    }
}

/* Points j's ids and targets at its tokens, once the batch is done. */
static void out_view(job *j) {
    if (!j->out) return;
    j->ids.v = j->out->ids.v + j->off;
    j->tg.v = j->out->tg.v + j->off;
}

/* The worker threads, started once for the run: each batch is handed to all of them (gen counts
 * the batches); the reading thread waits until every worker is done with it (busy == 0). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    batch_ctx *batch;
    uint64_t gen;
    size_t busy, n;
    bool quit;
    pthread_t *th;
} worker_pool;

static void *pool_worker(void *arg) {
    worker_pool *p = arg;
    glm_arena arena; /* this thread's record values, reused from record to record */
    glm_arena_init(&arena, 0);
    out_buf ob[2] = {0};
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        batch_ctx *c = p->batch;
        pthread_mutex_unlock(&p->mu);
        run_batch(c, &arena, ob);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    glm_arena_free(&arena);
    for (int k = 0; k < 2; k++) {
        glm_vec_free(ob[k].ids);
        glm_vec_free(ob[k].tg);
    }
    return NULL;
}

/* Starts up to `want` workers. Under a limit on threads (ulimit -u, a container's pids limit) it
 * carries on with those that started, or none (then the reading thread does the work). */
static void pool_start(worker_pool *p, size_t want) {
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->th = calloc(want, sizeof *p->th);
    for (size_t t = 0; p->th && t < want; t++) {
        int rc = pthread_create(&p->th[t], NULL, pool_worker, p);
        if (rc == 0) {
            p->n++;
            continue;
        }
        glm_log_warn("could not start worker thread %zu of %zu (%s); continuing with %zu worker thread%s%s; "
                     "hint: a limit on processes/threads (ulimit -u, a container's pids limit) is reached; "
                     "--threads %zu avoids this warning", t + 1, want, strerror(rc), t, t == 1 ? "" : "s",
                     t ? "" : " (the reading thread does the work)", t ? t : 1);
        break;
    }
}

/* Hands batch c to every worker (which must all be idle: pool_wait). */
static void pool_run(worker_pool *p, batch_ctx *c) {
    pthread_mutex_lock(&p->mu);
    p->batch = c;
    p->busy = p->n;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
}

/* Waits until the workers are done with the batch they were given. */
static void pool_wait(worker_pool *p) {
    pthread_mutex_lock(&p->mu);
    while (p->busy) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Stops and joins the workers (after pool_wait). */
static void pool_stop(worker_pool *p) {
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (size_t t = 0; t < p->n; t++) pthread_join(p->th[t], NULL);
    free(p->th);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
}

/* Clears j for the next batch (its tokens live in a thread's out_buf). */
static void job_clear(job *j) {
    if (j->rec.value) json_decref(j->rec.value);
    free(j->rec.raw);
    free(j->drop_detail);
    memset(j, 0, sizeof *j);
}
/* ------------------------------------------------------------------ documents of a record */

/* The documents of one kept record (one, or the windows of a long text). */
typedef struct {
    glm_pack_doc *docs;
    size_t n;
} doc_set;

static void doc_set_free(doc_set *d) {
    for (size_t i = 0; i < d->n; i++) {
        free(d->docs[i].ids);
        free(d->docs[i].targets);
    }
    free(d->docs);
    d->docs = NULL;
    d->n = 0;
}

/* A deep copy of d (an eval_dataset entry also in dataset goes to both splits). */
static glm_status doc_set_copy(const doc_set *d, doc_set *out) {
    *out = (doc_set){calloc(d->n ? d->n : 1, sizeof *d->docs), 0};
    if (!out->docs) return glm_err(GLM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->n; i++) {
        glm_pack_doc c = d->docs[i];
        c.ids = malloc(4 * (size_t)c.len);
        c.targets = malloc(c.len);
        if (!c.ids || !c.targets) {
            free(c.ids), free(c.targets);
            doc_set_free(out);
            return glm_err(GLM_ERR_NOMEM, "out of memory");
        }
        memcpy(c.ids, d->docs[i].ids, 4 * (size_t)c.len);
        memcpy(c.targets, d->docs[i].targets, c.len);
        out->docs[out->n++] = c;
    }
    return GLM_OK;
}

/* Whether `name` is one of the comma-separated names in `list`. */
static bool name_in(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t k = strcspn(p, ",");
        size_t e = k;
        while (e && p[e - 1] == ' ') e--;
        if (e == n && !strncmp(p, name, n)) return true;
        p += k;
    }
    return false;
}

/* Moves j's tokens into documents: the whole sample, or (j->window) consecutive windows of that
 * many tokens, each a document whose first token is not a target (positions restart in each
 * document). A last window of one token (it could train nothing) is left out: *tail_dropped.
 * *targets: the target tokens of all documents. */
static glm_status job_docs(job *j, doc_set *out, size_t *targets, bool *tail_dropped) {
    *targets = 0;
    *tail_dropped = false;
    size_t w = j->window ? j->window : j->ids.n, n = (j->ids.n + w - 1) / w;
    if (j->window && j->ids.n - (n - 1) * w == 1) {
        n--;
        *tail_dropped = true;
    }
    out->docs = calloc(n, sizeof *out->docs);
    if (!out->docs) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (!j->window) {
        /* A copy in this (the reading) thread's memory: documents wait in the packer's window, and
         * kept in a worker's heap they made it grow a few pages at a time (an mprotect call each);
         * the worker's blocks are freed now and serve the next records. */
        size_t len = j->ids.n;
        glm_pack_doc *d = &out->docs[0];
        *d = (glm_pack_doc){malloc(len * sizeof *d->ids), malloc(len), (uint32_t)len, j->rec.source, (uint64_t)j->rec.index};
        if (!d->ids || !d->targets) {
            free(d->ids);
            free(d->targets);
            free(out->docs);
            out->docs = NULL;
            return glm_err(GLM_ERR_NOMEM, "out of memory");
        }
        memcpy(d->ids, j->ids.v, len * sizeof *d->ids);
        memcpy(d->targets, j->tg.v, len);
        out->n = 1;
        for (size_t i = 1; i < len; i++) *targets += j->tg.v[i] != 0;
        return GLM_OK;
    }
    for (size_t k = 0; k < n; k++) {
        size_t a = k * w, len = j->ids.n - a < w ? j->ids.n - a : w;
        glm_pack_doc *d = &out->docs[out->n];
        *d = (glm_pack_doc){malloc(len * sizeof *d->ids), malloc(len), (uint32_t)len, j->rec.source,
                            (uint64_t)j->rec.index};
        if (!d->ids || !d->targets) {
            free(d->ids);
            free(d->targets);
            doc_set_free(out);
            return glm_err(GLM_ERR_NOMEM, "out of memory");
        }
        out->n++;
        memcpy(d->ids, j->ids.v + a, len * sizeof *d->ids);
        memcpy(d->targets, j->tg.v + a, len);
        d->targets[0] = 0;
        for (size_t i = 1; i < len; i++) *targets += d->targets[i] != 0;
    }
    return GLM_OK;
}

static glm_status add_docs(glm_packer *p, doc_set *d) {
    glm_status s = GLM_OK;
    size_t i = 0;
    for (; i < d->n && s == GLM_OK; i++) s = glm_packer_add(p, d->docs[i]); /* the packer owns it now */
    for (; i < d->n; i++) {
        free(d->docs[i].ids);
        free(d->docs[i].targets);
    }
    free(d->docs);
    d->docs = NULL;
    d->n = 0;
    return s;
}

/* ------------------------------------------------------------------ validation selection */

typedef struct {
    uint64_t key;
    doc_set set;
    uint64_t seq;
} val_item;

typedef struct {
    double size;            /* count (>= 1) or fraction */
    uint64_t seed;
    GLM_VEC(val_item) heap; /* count mode: max-heap on key of the `size` smallest keys; fraction mode: the
                               candidates (records whose key fell below the running threshold), unordered */
    uint64_t n;             /* fraction mode: records routed so far */
} val_split;

static uint64_t val_key(uint64_t seed, uint64_t seq) {
    uint64_t h = glm_fnv1a64(GLM_FNV1A64_INIT, &seed, sizeof seed);
    h = glm_fnv1a64(h, &seq, sizeof seq);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static void heap_sift_down(val_item *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].key > h[m].key) m = l;
        if (r < n && h[r].key > h[m].key) m = r;
        if (m == i) return;
        val_item t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Routes the documents of one kept record (all of them to the same split, so that the windows
 * of a text never straddle train and val). With a count, the record may enter the heap of the
 * `size` smallest keys and the one it evicts (or itself) comes back in *to_train; the heap goes to
 * val at the end. A fraction f is an exact count too, as in HF datasets' train_test_split, which
 * LLaMA-Factory's val_size calls: ceil(f * n) of the n records (val_fraction_done). n is known only
 * at the end, so a record whose key is below a threshold that shrinks towards f as records come
 * (f + 8 sigma of the running count + 8/i) is held as a candidate and the rest go to train at once;
 * the candidates outnumber ceil(f * n) unless the keys are 8 sigma off (never, in practice: then
 * the val split is short and says so), and hold about f * n + 16 sqrt(f * n) records. */
static glm_status val_route(val_split *v, doc_set d, uint64_t seq, doc_set *to_train, doc_set *to_val) {
    *to_train = d;
    *to_val = (doc_set){0};
    if (v->size <= 0) return GLM_OK;
    uint64_t key = val_key(v->seed, seq);
    if (v->size < 1) {
        double f = v->size, i = (double)++v->n;
        double t = f + 8.0 * sqrt(f * (1.0 - f) / i) + 8.0 / i;
        if (t >= 1.0 || (double)key < t * 18446744073709551616.0) {
            GLM_TRY(glm_vec_push(v->heap, ((val_item){key, d, seq})));
            *to_train = (doc_set){0};
        }
        return GLM_OK;
    }
    size_t cap = (size_t)v->size;
    if (v->heap.n < cap) {
        GLM_TRY(glm_vec_push(v->heap, ((val_item){key, d, seq})));
        for (size_t i = v->heap.n - 1; i > 0 && v->heap.v[(i - 1) / 2].key < v->heap.v[i].key; i = (i - 1) / 2) {
            val_item t = v->heap.v[i];
            v->heap.v[i] = v->heap.v[(i - 1) / 2];
            v->heap.v[(i - 1) / 2] = t;
        }
        *to_train = (doc_set){0};
    } else if (key < v->heap.v[0].key) {
        *to_train = v->heap.v[0].set;
        v->heap.v[0] = (val_item){key, d, seq};
        heap_sift_down(v->heap.v, v->heap.n, 0);
    }
    return GLM_OK;
}

static int by_seq(const void *a, const void *b) {
    const val_item *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_key(const void *a, const void *b) {
    const val_item *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : by_seq(a, b);
}

/* Fraction mode, at the end: the ceil(f * n) candidates of smallest key stay (the val split, in
 * input order); the others (in input order) are returned for train: *rest, malloc'd, *n_rest. */
static glm_status val_fraction_done(val_split *v, val_item **rest, size_t *n_rest) {
    *rest = NULL;
    *n_rest = 0;
    if (!(v->size > 0 && v->size < 1) || v->heap.n == 0) return GLM_OK;
    size_t want = (size_t)ceil(v->size * (double)v->n); /* datasets: n_test = ceil(test_size * n_samples) */
    if (want > v->heap.n) {
        glm_log_warn("--val-size %g: %zu of the %llu samples went to the validation split instead of ceil(%g x %llu) = "
                     "%zu (the draw's keys were far off); hint: give a count, e.g. --val-size %zu", v->size, v->heap.n,
                     (unsigned long long)v->n, v->size, (unsigned long long)v->n, want, want);
        want = v->heap.n;
    }
    qsort(v->heap.v, v->heap.n, sizeof *v->heap.v, by_key);
    size_t nr = v->heap.n - want;
    if (nr) {
        if (!(*rest = malloc(nr * sizeof **rest))) return glm_err(GLM_ERR_NOMEM, "out of memory");
        memcpy(*rest, v->heap.v + want, nr * sizeof **rest);
        qsort(*rest, nr, sizeof **rest, by_seq);
    }
    *n_rest = nr;
    v->heap.n = want;
    return GLM_OK;
}

/* ------------------------------------------------------------------ options */

/* The CPUs this process may run on (its affinity mask; the online count when unknown). */
static uint64_t glm_usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (uint64_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint64_t)n : 1;
}

/* --train-on all|last|prompt|last,prompt -> glm_train_on bits. */
static glm_status parse_train_on(const char *v, int *out) {
    int bits = 0;
    char *copy = strdup(v), *save = NULL;
    if (!copy) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status s = GLM_OK;
    for (char *t = strtok_r(copy, ",+", &save); t && s == GLM_OK; t = strtok_r(NULL, ",+", &save)) {
        if (!strcmp(t, "all")) continue;
        if (!strcmp(t, "last")) bits |= GLM_TRAIN_LAST;
        else if (!strcmp(t, "prompt")) bits |= GLM_TRAIN_PROMPT;
        else s = glm_err(GLM_ERR_ARG, "--train-on: expected all, last, prompt or last,prompt, got \"%s\"", v);
    }
    free(copy);
    *out = bits;
    return s;
}

/* The hooks of the options that set train_on bits or check more than their type (user: tok_opts). */
static glm_status train_on_given(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    return parse_train_on(value, &((tok_opts *)user)->train_on);
}

static glm_status mask_history_given(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    tok_opts *o = user;
    o->train_on = *(const bool *)opt->dest ? o->train_on | GLM_TRAIN_LAST : o->train_on & ~GLM_TRAIN_LAST;
    return GLM_OK;
}

static glm_status train_on_prompt_given(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    tok_opts *o = user;
    o->train_on = *(const bool *)opt->dest ? o->train_on | GLM_TRAIN_PROMPT : o->train_on & ~GLM_TRAIN_PROMPT;
    return GLM_OK;
}

static glm_status val_size_given(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    double v = *(const double *)opt->dest;
    if (!isfinite(v) || v < 0 || (v >= 1 && v != (double)(uint64_t)v))
        return glm_err(GLM_ERR_ARG, "--val-size: expected a count (e.g. 200) or a fraction in (0, 1), got %s", value);
    return GLM_OK;
}

/* Settings from --config that the command line did not give. */
static glm_status apply_config(tok_opts *o, bool tok_set, bool out_set, bool dataset_set, bool dir_set) {
    tok_config *c = &o->cfg;
    GLM_TRY(tok_config_load(o->config_path, c));
    if (!tok_set && c->model) o->tokenizer_path = c->model;
    if (!out_set && c->tokenized_path) o->out = c->tokenized_path;
    if (!dataset_set && c->dataset) o->dataset = c->dataset;
    if (!o->eval_dataset && c->eval_dataset) o->eval_dataset = c->eval_dataset;
    if (!o->default_system && c->default_system) o->default_system = c->default_system;
    if (!dir_set && c->dataset_dir) o->dataset_dir = c->dataset_dir;
    if (!o->set_seq_len && c->cutoff_len >= 0) o->seq_len = (uint64_t)c->cutoff_len;
    if (!o->set_max_samples && c->max_samples >= 0) o->max_samples = c->max_samples;
    if (!o->set_val_size && c->val_size >= 0) o->val_size = c->val_size;
    if (!o->set_seed && c->seed >= 0) o->seed = (uint64_t)c->seed;
    if (!o->set_threads && c->workers > 0) o->threads = (uint64_t)c->workers;
    if (!o->set_train_on) {
        if (c->mask_history == 1) o->train_on |= GLM_TRAIN_LAST;
        if (c->train_on_prompt == 1) o->train_on |= GLM_TRAIN_PROMPT;
    }
    if (!o->set_format && c->stage && !strcmp(c->stage, "pt")) o->format_name = "text";
    /* LLaMA-Factory's stage defaults to sft: pretraining entries are dropped there (glm_convert_opts.chat_only) */
    o->chat_only = !(c->stage && !strcmp(c->stage, "pt"));
    o->lf_truncate = true; /* a LLaMA-Factory YAML: a chat longer than cutoff_len is cut as it cuts it */
    return GLM_OK;
}

static int parse_opts(int argc, char **argv, tok_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = glm_usable_cpus();
    o->max_samples = -1;
    o->inputs = calloc((size_t)argc + 1, sizeof(char *));
    uint64_t max_samples = 0;
    size_t n_inputs = 0;
    bool tok_set = false, out_set = false, dataset_set = false, dir_set = false, mask_history = false,
         train_on_prompt = false, help = false;
    const glm_arg_opt opts[] = {
        {.name = "tokenizer", .alias = "model-name-or-path", .type = GLM_ARG_STRING, .dest = &o->tokenizer_path,
         .metavar = "PATH", .given = &tok_set,
         .help = "model directory (tokenizer.model + tokenizer_config.json) or tokenizer file; not needed when every "
                 "record is pre-tokenized"},
        {.name = "output", .short_name = 'o', .alias = "tokenized-path", .type = GLM_ARG_STRING, .dest = &o->out,
         .metavar = "OUTDIR", .given = &out_set,
         .help = "output directory: created; a previous tokenize output there is replaced, a directory with other "
                 "files is refused"},
        {.name = "config", .type = GLM_ARG_STRING, .dest = &o->config_path, .metavar = "FILE.yaml",
         .help = "a LLaMA-Factory training YAML (the one glmtune train --config reads): model_name_or_path, dataset, "
                 "dataset_dir, cutoff_len, max_samples, val_size, train_on_prompt, mask_history, stage (pt = plain "
                 "text), seed, tokenized_path (= -o); options given here override it"},
        {.name = "format", .type = GLM_ARG_STRING, .dest = &o->format_name, .def = "auto", .metavar = "F",
         .given = &o->set_format,
         .help = "auto (per record) | messages | sharegpt | alpaca | pretokenized | text: pretraining, [gMASK]<sop> "
                 "text <|endoftext|>, all targets"},
        {.name = "text-column", .type = GLM_ARG_STRING, .dest = &o->text_column, .metavar = "NAME",
         .help = "the text layout's field (default \"text\"; a record with only that field is detected as text)"},
        {.name = "dataset", .type = GLM_ARG_STRING, .dest = &o->dataset, .metavar = "NAMES", .given = &dataset_set,
         .help = "with a dataset_info.json: the entries to read (comma list; default all entries with a local file)"},
        {.name = "dataset-dir", .type = GLM_ARG_STRING, .dest = &o->dataset_dir, .metavar = "DIR", .given = &dir_set,
         .help = "the folder that holds dataset_info.json (read when no INPUT is given)"},
        {.name = "eval-dataset", .type = GLM_ARG_STRING, .dest = &o->eval_dataset, .metavar = "NAMES",
         .help = "entries tokenized into the val split (LLaMA-Factory's eval_dataset; an entry also in --dataset is in "
                 "both splits; not with --val-size)"},
        {.name = "default-system", .type = GLM_ARG_STRING, .dest = &o->default_system, .metavar = "TEXT",
         .help = "the system message of every sample that has none (LLaMA-Factory's default_system), rendered by the "
                 "model's chat template"},
        {.name = "max-samples", .type = GLM_ARG_U64, .dest = &max_samples, .given = &o->set_max_samples,
         .help = "the first N records of each dataset (an entry, or an INPUT as given)"},
        {.name = "chat-template", .type = GLM_ARG_STRING, .dest = &o->template_path, .metavar = "FILE",
         .help = "a Jinja chat template to use instead of tokenizer_config.json's; it is applied to each message alone "
                 "and the renders joined, so only templates whose output for a message does not depend on the others "
                 "work (GLM-4's)"},
        {.name = "seq-len", .alias = "cutoff-len", .type = GLM_ARG_U64, .dest = &o->seq_len, .def = "8192",
         .metavar = "T", .given = &o->set_seq_len, .help = "tokens per packed row"},
        {.name = "train-on", .type = GLM_ARG_STRING, .metavar = "WHAT", .given = &o->set_train_on,
         .hook = train_on_given,
         .help = "all (default: every assistant turn) | last (the last assistant turn, LLaMA-Factory's mask_history) "
                 "| prompt (system, user and tool turns too, train_on_prompt) | last,prompt. A turn's own "
                 "\"loss\"/\"weight\"/\"loss_weight\" flag always decides for that turn"},
        {.name = "mask-history", .type = GLM_ARG_BOOL, .dest = &mask_history, .given = &o->set_train_on,
         .hook = mask_history_given, .help = "= --train-on last"},
        {.name = "train-on-prompt", .type = GLM_ARG_BOOL, .dest = &train_on_prompt, .given = &o->set_train_on,
         .hook = train_on_prompt_given, .help = "= --train-on prompt"},
        {.name = "keep-reasoning", .type = GLM_ARG_FLAG, .dest = &o->keep_reasoning,
         .help = "keep reasoning (reasoning_content, reasoning parts) in the assistant's content as "
                 "<think>...</think> (default: dropped, counted)"},
        {.name = "merge-consecutive-turns", .type = GLM_ARG_FLAG, .dest = &o->merge_turns,
         .help = "join neighbouring turns of one role (else two user turns in a row drop the record: role_order)"},
        {.name = "truncate", .type = GLM_ARG_FLAG, .dest = &o->truncate,
         .help = "cut samples longer than T to their first T-1 tokens and the end token (default: drop chats; split "
                 "texts into windows of T tokens)"},
        {.name = "val-size", .type = GLM_ARG_DOUBLE, .dest = &o->val_size, .metavar = "N", .given = &o->set_val_size,
         .hook = val_size_given, .help = "set N records (or a fraction like 0.05: ceil(0.05 x the samples), as LLaMA-Factory's val_size) aside "
                 "as the val split"},
        {.name = "seed", .type = GLM_ARG_U64, .dest = &o->seed, .def = "42", .given = &o->set_seed,
         .help = "seed of the validation selection and num_samples draws"},
        {.name = "strict", .type = GLM_ARG_FLAG, .dest = &o->strict,
         .help = "any bad record is fatal (default: skip it and count it by reason)"},
        {.name = "threads", .alias = "preprocessing-num-workers", .type = GLM_ARG_U64, .dest = &o->threads,
         .given = &o->set_threads, .help = "worker threads; default and maximum: the CPUs this process may use"},
        {.name = "report", .type = GLM_ARG_STRING, .dest = &o->report_path, .metavar = "FILE",
         .help = "also write the report as JSON"},
        {.name = "shard-rows", .type = GLM_ARG_U64, .dest = &o->shard_rows,
         .help = "rows per shard file (default: about 16 Mi tokens)"},
        {.name = "quiet", .short_name = 'q', .type = GLM_ARG_FLAG, .dest = &o->quiet, .help = "no progress display"},
        {.name = "verbose", .type = GLM_ARG_FLAG, .help = "debug messages too (files skipped and why)"},
        {.name = "encode", .type = GLM_ARG_FLAG, .dest = &o->encode,
         .help = "read JSONL {\"text\": ...} on stdin, write JSONL {\"ids\": [...]}"},
        {.name = "decode", .type = GLM_ARG_FLAG, .dest = &o->decode,
         .help = "read JSONL {\"ids\": [...]} on stdin, write JSONL {\"text\": ...}"},
    };
    const glm_arg_cmd cmd = {.name = "tokenize", .usage = USAGE, .about = ABOUT, .opts = opts,
                             .n_opts = sizeof opts / sizeof *opts, .pos = o->inputs, .max_pos = (size_t)argc,
                             .n_pos = &n_inputs, .pos_name = "INPUT", .user = o};
    glm_status s = o->inputs ? glm_args_parse(&cmd, argc - 1, argv + 1, &help) : glm_err(GLM_ERR_NOMEM, "out of memory");
    if (s == GLM_OK && help) {
        glm_args_help(stdout, &cmd);
        return -1;
    }
    o->n_inputs = (int)n_inputs;
    if (o->set_max_samples) o->max_samples = (int64_t)max_samples;
    bool threads_given = o->set_threads;
    if (s == GLM_OK && o->config_path) s = apply_config(o, tok_set, out_set, dataset_set, dir_set);
    if (s == GLM_OK && o->eval_dataset) { /* LLaMA-Factory: eval_dataset and val_size exclude each other */
        if (o->val_size > 0)
            s = glm_err(GLM_ERR_ARG, "eval_dataset (%s) and val_size (%g) are both set: the val split is one or the "
                        "other (LLaMA-Factory refuses both too); hint: drop one", o->eval_dataset, o->val_size);
        else if (!o->dataset)
            s = glm_err(GLM_ERR_ARG, "eval_dataset (%s) needs dataset: the training entries of dataset_info.json; "
                        "hint: --dataset NAMES", o->eval_dataset);
        else if (asprintf(&o->reader_filter, "%s,%s", o->dataset, o->eval_dataset) < 0)
            s = glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    if (s == GLM_OK && o->config_path && o->n_inputs == 0 && !o->dataset && !o->encode && !o->decode)
        s = glm_err(GLM_ERR_ARG, "%s names no dataset: LLaMA-Factory requires dataset for training, and tokenize would "
                    "otherwise read every entry of dataset_info.json (pretraining text among the chats); hint: "
                    "dataset: NAMES in the config (or --dataset NAMES), or give the corpus files as inputs",
                    o->config_path);
    if (s == GLM_OK && o->n_inputs == 0 && (o->dataset || o->dataset_dir)) {
        struct stat sb;
        if (!o->dataset_dir && stat("data", &sb) != 0) { /* LLaMA-Factory's default folder is not here */
            char cwd[PATH_MAX];
            s = glm_err(GLM_ERR_ARG, "datasets %s are looked up in dataset_dir, by default \"data\" in the current "
                        "folder (%s), which does not exist; hint: --dataset-dir DIR, the folder that holds "
                        "dataset_info.json (LLaMA-Factory's own is LLaMA-Factory/data), or dataset_dir: in the config",
                        o->dataset, getcwd(cwd, sizeof cwd) ? cwd : ".");
        }
        o->inputs[o->n_inputs++] = o->dataset_dir ? o->dataset_dir : "data"; /* LLaMA-Factory's default */
    }
    else if (s == GLM_OK && o->dataset && o->dataset_dir) { /* the registry's folder too */
        bool have = false;
        for (int i = 0; i < o->n_inputs; i++) have |= !strcmp(o->inputs[i], o->dataset_dir);
        if (!have) o->inputs[o->n_inputs++] = o->dataset_dir;
    }
    if (s == GLM_OK && o->encode && o->decode) s = glm_err(GLM_ERR_ARG, "--encode and --decode exclude each other");
    if (s == GLM_OK && o->report_path && !*o->report_path)
        s = glm_err(GLM_ERR_ARG, "--report \"\" is empty; hint: --report FILE, or leave it out (-o gets its own "
                    "report.json)");
    if (s == GLM_OK && o->report_path) { /* fail now, not after the whole run */
        char *target = NULL;
        bool through = false;
        s = glm_output_target(o->report_path, &target, &through);
        if (s != GLM_OK) {
            s = glm_err_context(GLM_ERR_ARG, "--report"); /* "--report: <why>" */
        } else if (through) { /* a device, FIFO or /dev/stdout: written through, so it must be writable */
            if (access(target, W_OK) != 0)
                s = glm_err(GLM_ERR_ARG, "--report %s: cannot write to it: %s", o->report_path, strerror(errno));
        } else {
            char *slash = strrchr(target, '/');
            const char *dir = slash ? (slash == target ? "/" : (*slash = 0, target)) : ".";
            if (access(dir, W_OK) != 0)
                s = glm_err(GLM_ERR_ARG, "--report %s: cannot write in %s: %s", o->report_path, dir, strerror(errno));
        }
        free(target);
    }
    if (s == GLM_OK && (o->encode || o->decode) && !o->tokenizer_path)
        s = glm_err(GLM_ERR_ARG, "--%s needs --tokenizer PATH", o->encode ? "encode" : "decode");
    if (s == GLM_OK && !o->encode && !o->decode) {
        if (o->out && *o->out) { /* "shards/" names the directory "shards" (its temp name, renames and messages) */
            static char outbuf[4096];
            snprintf(outbuf, sizeof outbuf, "%s", o->out);
            o->out = glm_path_strip_slash(outbuf);
        }
        if (o->out && !*o->out) s = glm_err(GLM_ERR_ARG, "tokenize: -o \"\" is empty; hint: -o OUTDIR");
        else if (!o->out) s = glm_err(GLM_ERR_ARG, "tokenize: no output directory; hint: -o OUTDIR%s",
                                 o->config_path ? " (or tokenized_path in the config)" : "");
        else if (o->n_inputs == 0) s = glm_err(GLM_ERR_ARG, "tokenize: no input files; hint: glmtune tokenize --tokenizer DIR -o OUT data/*.jsonl");
        else if (o->seq_len < 2 || o->seq_len > (1u << 24)) s = glm_err(GLM_ERR_ARG, "--seq-len must be in [2, 16777216]");
        else if (o->threads == 0) o->threads = 1;
    }
    if (s == GLM_OK && !o->encode && !o->decode && o->report_path && o->out) {
        /* a report inside -o would go into the old directory, which the run replaces as a whole */
        char rdir[4096], rreal[PATH_MAX], oreal[PATH_MAX];
        snprintf(rdir, sizeof rdir, "%s", o->report_path);
        char *slash = strrchr(rdir, '/');
        if (!slash) snprintf(rdir, sizeof rdir, ".");
        else if (slash == rdir) rdir[1] = 0;
        else *slash = 0;
        size_t ol;
        if (realpath(rdir, rreal) && realpath(o->out, oreal) && (ol = strlen(oreal)) &&
            !strncmp(rreal, oreal, ol) && (rreal[ol] == 0 || rreal[ol] == '/'))
            s = glm_err(GLM_ERR_ARG, "--report %s is inside -o %s, which the run replaces as a whole: the report would "
                        "be lost; hint: write it elsewhere (-o gets its own report.json)", o->report_path, o->out);
    }
    for (int i = 0; s == GLM_OK && !o->encode && !o->decode && i < o->n_inputs; i++)
        if (glm_reader_is_shards_dir(o->inputs[i]))
            s = glm_err(GLM_ERR_ARG, "%s is the output of glmtune tokenize (shards), not a corpus; hint: train on it with "
                        "glmtune train --data %s, or give the corpus files it was made from", o->inputs[i], o->inputs[i]);
    if (s == GLM_OK && !o->encode && !o->decode) {
        /* workers are CPU-bound: more than the CPUs this process may run on only add overhead (and
         * --threads 100000 would try to start that many threads per batch) */
        uint64_t cpus = glm_usable_cpus();
        if (o->threads > cpus) {
            if (threads_given)
                glm_log_warn("--threads %llu: capped at %llu, the CPUs this process may use (more workers only add "
                             "overhead)", (unsigned long long)o->threads, (unsigned long long)cpus);
            o->threads = cpus;
        }
    }
    return s == GLM_OK ? 0 : cli_fail(s);
}

/* ------------------------------------------------------------------ the run */

/* What a tokenize output holds, all written by tok_write_outputs and the shard writers: the
 * regular files manifest.json, report.json and the shards of the train and val splits. *arg
 * counts them. */
static bool tokenize_entry(const char *dir, const char *name, void *arg) {
    if (strcmp(name, "manifest.json") && strcmp(name, "report.json") && !glm_shard_is_file_name(name, "train") &&
        !glm_shard_is_file_name(name, "val"))
        return false;
    char *p = glm_path_join(dir, name);
    struct stat sb;
    bool file = p && lstat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    free(p);
    *(size_t *)arg += file;
    return file;
}

/* -o is replaced as a whole at the end (glm_commit_dir), deleting what it held: it may be new,
 * an empty directory or an earlier tokenize output (a manifest.json and only what tokenize
 * writes); anything else there (the user's notes, results, another tool's files) is refused,
 * naming the first such entry. Checked before the run and again just before the outputs are
 * written, as the run may take long. */
static glm_status check_outdir(const char *out) {
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    if (!strcmp(base, ".") || !strcmp(base, "..") || (!*base && strspn(out, "/") == strlen(out)))
        return glm_err(GLM_ERR_ARG, "-o %s: the output directory is replaced as a whole, so it cannot be the current, "
                       "a parent or the root directory; hint: name a directory, e.g. -o shards", out);
    struct stat ost;
    if (stat(out, &ost) == 0 && !S_ISDIR(ost.st_mode))
        return glm_err(GLM_ERR_ARG, "%s exists and is not a directory; hint: -o takes a directory", out);
    if (!glm_is_dir(out)) return GLM_OK;
    size_t n = 0;
    char *first = NULL, *m = glm_path_join(out, "manifest.json");
    glm_status s = glm_dir_first_foreign(out, tokenize_entry, &n, &first);
    if (s == GLM_OK && first)
        s = glm_err(GLM_ERR_ARG, "-o %s already holds %s, which tokenize does not write: the directory would be "
                    "replaced as a whole and %s deleted; hint: choose another -o (a new or empty directory), or move "
                    "%s out of it", out, first, first, first);
    else if (s == GLM_OK && n > 0 && !glm_reader_is_shards_dir(out))
        s = glm_err(GLM_ERR_ARG, "-o %s exists and is not a glmtune tokenize output (%s); hint: choose another -o (a new "
                    "or empty directory)", out, glm_is_file(m) ? "its manifest.json is not one tokenize wrote" :
                    "no manifest.json");
    free(first);
    free(m);
    return s;
}

/* -o checked, what killed runs left beside it cleaned ("<out>.tmp.<pid>", "<out>.old.<pid>"; an
 * output a kill left missing is restored first), -o made when it is new (*made: the caller removes
 * it again when the run fails) and locked for the run (*lock, glm_lock_dir: a second tokenize into
 * it stops at once, as a second train into an output directory does), then the temporary
 * directory *tmp that replaces it at the end. */
static glm_status prepare_outdir(const char *out, char **tmp, int *lock, bool *made) {
    GLM_TRY(check_outdir(out));
    glm_cleanup_leftovers(out);
    *made = !glm_is_dir(out);
    glm_status s = glm_mkdir_p(out);
    if (s != GLM_OK && s != GLM_ERR_NOMEM) {
        char why[512];
        snprintf(why, sizeof why, "%s", glm_errmsg());
        return glm_err(s, "%s: cannot create the output (%s); hint: an output path in a directory you can write to", out,
                       why);
    }
    GLM_TRY(s);
    s = glm_lock_dir(out, "glmtune tokenize", "-o", lock);
    if (s != GLM_OK) {
        *made = false; /* made at the same moment by the run that holds it */
        return s;
    }
    if (asprintf(tmp, "%s.tmp.%d", out, (int)getpid()) < 0) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_rmtree(*tmp);
    return glm_mkdir_aside(*tmp, out);
}

static json_t *shard_list(const glm_shard_writer *w) {
    json_t *a = json_array();
    for (size_t i = 0; i < w->n_written; i++) {
        const struct glm_shard_info *x = &w->written[i];
        char crc[16];
        snprintf(crc, sizeof crc, "%08x", x->crc);
        json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:I,s:I,s:s,s:I}", "file", x->file, "rows", (json_int_t)x->rows,
                                           "samples", (json_int_t)x->docs, "tokens", (json_int_t)x->tokens,
                                           "target_tokens", (json_int_t)x->targets, "payload_crc32", crc, "bytes",
                                           (json_int_t)x->bytes));
    }
    return a;
}

/* manifest.json (shards, counts, settings, tokenizer) and report.json into tmpdir; --report FILE. */
static glm_status tok_write_outputs(tok_report *rep, const char *tmpdir, const char *out, const char *report_path,
                                    const tok_opts *o, const glm_tokenizer *tok, const glm_shard_writer *wtrain,
                                    const glm_shard_writer *wval) {
    (void)out;
    json_t *m = json_object();
    json_object_set_new(m, "format", json_string(GLM_SHARDS_FORMAT));
    json_object_set_new(m, "version", json_integer(GLM_SHARD_VERSION));
    json_object_set_new(m, "seq_len", json_integer((json_int_t)o->seq_len));
    if (tok) {
        char fp[24];
        snprintf(fp, sizeof fp, "%016llx", (unsigned long long)glm_tokenizer_fingerprint(tok));
        /* absolute, so that inspect finds it from any directory */
        char *abs = realpath(glm_tokenizer_path(tok), NULL), *tp = glm_utf8_lossy(abs ? abs : glm_tokenizer_path(tok));
        free(abs);
        json_object_set_new(m, "tokenizer", json_pack("{s:s,s:s,s:s,s:I}", "path", tp ? tp : "?", "kind",
                                                      glm_tokenizer_kind(tok), "fingerprint", fp, "vocab_size",
                                                      (json_int_t)glm_tokenizer_vocab_size(tok)));
        free(tp);
    } else {
        json_object_set_new(m, "tokenizer", json_null());
    }
    json_t *inputs = json_array();
    for (int i = 0; i < o->n_inputs; i++) {
        char *in = glm_utf8_lossy(o->inputs[i]);
        json_array_append_new(inputs, json_string(in ? in : "?"));
        free(in);
    }
    static const char *const train_on_names[] = {"all", "last", "prompt", "last,prompt"};
    json_t *settings = json_pack("{s:o,s:s,s:s,s:b,s:f,s:I,s:b,s:s*,s:s*,s:b,s:b,s:I,s:s*,s:s*}", "inputs", inputs,
                                 "format", o->format_name, "train_on", train_on_names[o->train_on & 3],
                                 "truncate", o->truncate, "val_size", o->val_size, "seed", (json_int_t)o->seed,
                                 "strict", o->strict, "chat_template", o->template_path, "text_column",
                                 o->text_column, "keep_reasoning", o->keep_reasoning, "merge_consecutive_turns",
                                 o->merge_turns, "max_samples", (json_int_t)o->max_samples, "dataset", o->dataset,
                                 "config", o->config_path);
    json_object_set_new(m, "settings", settings);
    json_t *splits = json_object();
    json_t *tr = json_object_get(rep->final, "train"), *va = json_object_get(rep->final, "val");
    json_t *st = json_deep_copy(tr), *sv = json_deep_copy(va);
    json_object_set_new(st, "shards", shard_list(wtrain));
    json_object_set_new(sv, "shards", shard_list(wval));
    json_object_set_new(splits, "train", st);
    json_object_set_new(splits, "val", sv);
    json_object_set_new(m, "splits", splits);
    json_object_set_new(m, "report", json_string("report.json"));
    char *mp = glm_path_join(tmpdir, "manifest.json");
    glm_status s = glm_json_write_file(mp, m, 2);
    free(mp);
    json_decref(m);
    if (s == GLM_OK) {
        char *rp = glm_path_join(tmpdir, "report.json");
        s = glm_json_write_file(rp, rep->final, 2);
        free(rp);
    }
    if (s == GLM_OK && report_path) s = glm_json_write_file(report_path, rep->final, 2);
    return s;
}

static int tokenize_main(tok_opts *op);

/* Ctrl-C (SIGINT) or SIGTERM while tokenizing: the handler only notes the signal; the reading loop
 * stops at the next record, the run's temporary directory is removed, -o is left as it was, and
 * the process then dies of the same signal (so a shell loop or a script sees the interrupt). The
 * handler is one-shot (SA_RESETHAND): a second signal kills at once, and the next run into the
 * same -o removes what that left. */
static volatile sig_atomic_t g_stop_sig;
static void on_stop_signal(int sig) { g_stop_sig = sig; }
static void catch_stop_signals(bool on) {
    static bool caught[2];
    const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction sa = {0}, old;
        sigemptyset(&sa.sa_mask);
        if (on) { /* a signal the caller ignores (a background job of a script: SIGINT) stays ignored */
            if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
            sa.sa_handler = on_stop_signal;
            sa.sa_flags = SA_RESETHAND | SA_RESTART;
        } else if (!caught[i]) {
            continue;
        } else {
            sa.sa_handler = SIG_DFL;
        }
        if (sigaction(sigs[i], &sa, NULL) == 0) caught[i] = on;
    }
}

int cmd_tokenize(int argc, char **argv) {
    tok_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc == 0) rc = tokenize_main(&o);
    free(o.inputs);
    tok_config_free(&o.cfg);
    free(o.reader_filter);
    return rc < 0 ? GLM_EXIT_OK : rc; /* -1: --help was printed */
}

/* One tokenize run once the options are parsed: its tokenizer and template, the reader, the
 * output directory, the two splits' writers and packers, the validation draw and the report. */
typedef struct {
    tok_opts *o;              /* the run's copy of the options (o->out: the real output directory) */
    glm_tokenizer *tok;       /* NULL: every record is pre-tokenized */
    glm_template *tpl;
    glm_convert_opts copt;
    glm_reader *rd;
    char *tmpdir, *out_real;  /* the directory that replaces -o at the end; -o with its links followed */
    int out_lock;             /* -o's lock (glm_lock_dir), or -1 */
    bool out_made;            /* -o was made by this run */
    uint32_t T;
    glm_shard_writer wtrain, wval;
    glm_packer ptrain, pval;
    val_split vs;
    tok_report rep;
    uint64_t seq;             /* kept records routed so far: the validation draw's record number */
    double t0;                /* when the reading started */
} tok_run;

enum { TOK_BATCH = 512 }; /* records per batch that the workers process while the next is read */

/* The chat template: --chat-template FILE, else the tokenizer's; an error when it has none. */
static glm_status load_template(const tok_opts *o, const glm_tokenizer *tok, glm_template **tpl) {
    char *src = NULL;
    size_t n;
    const char *tsrc = glm_tokenizer_chat_template(tok), *tname = "tokenizer_config.json chat_template";
    if (o->template_path) {
        GLM_TRY(glm_read_file(o->template_path, &src, &n));
        tsrc = src;
        tname = o->template_path;
    }
    if (!tsrc)
        return glm_err(GLM_ERR_ARG, "%s: the tokenizer has no chat_template in tokenizer_config.json; hint: "
                       "pass --chat-template FILE", o->tokenizer_path);
    glm_status s = glm_template_parse(tsrc, tname, tpl);
    free(src);
    return s;
}

/* -o with its links followed (r->out_real, then r->o->out), the reader over the inputs and the
 * prepared output directory (prepare_outdir). */
static glm_status open_run(tok_run *r) {
    tok_opts *o = r->o;
    /* a symbolic link -o is followed: its target is replaced, the link stays */
    GLM_TRY(glm_output_target_dir(o->out, &r->out_real));
    if (strcmp(r->out_real, o->out)) glm_log_info("-o %s is a symbolic link: writing %s", o->out, r->out_real);
    o->out = r->out_real;
    glm_reader_opts ro = {o->reader_filter ? o->reader_filter : o->dataset, o->max_samples, o->seed};
    GLM_TRY(glm_reader_open_ex((const char *const *)o->inputs, (size_t)o->n_inputs, &ro, &r->rd));
    return prepare_outdir(o->out, &r->tmpdir, &r->out_lock, &r->out_made);
}

/* The train and val shard writers (into the temporary directory) and packers, the validation
 * draw and the report. */
static void init_splits(tok_run *r) {
    const tok_opts *o = r->o;
    r->T = (uint32_t)o->seq_len;
    uint64_t fp = r->tok ? glm_tokenizer_fingerprint(r->tok) : 0;
    uint32_t V = r->tok ? glm_tokenizer_vocab_size(r->tok) : 0;
    /* about 16 Mi tokens (64 MiB of ids) per shard: a shard is built in memory before its write */
    uint32_t rows_per_shard = o->shard_rows ? (uint32_t)o->shard_rows : (uint32_t)((1u << 24) / r->T + 1);
    glm_shard_writer_init(&r->wtrain, r->tmpdir, "train", r->T, rows_per_shard, fp, V);
    glm_shard_writer_init(&r->wval, r->tmpdir, "val", r->T, rows_per_shard, fp, V);
    glm_packer_init(&r->ptrain, r->T, (uint64_t)1 << 24, &r->wtrain);
    glm_packer_init(&r->pval, r->T, (uint64_t)1 << 24, &r->wval);
    r->vs = (val_split){.size = o->val_size, .seed = o->seed};
    tok_report_init(&r->rep);
}

/* Reads up to TOK_BATCH records into jb (*n of them; *eof at the end of the input); a stop
 * signal ends the run with an error. */
static glm_status read_batch(tok_run *r, job *jb, size_t *n, bool *eof) {
    *n = 0;
    while (!*eof && *n < TOK_BATCH) {
        if (g_stop_sig)
            return glm_err(GLM_ERR_IO, "interrupted (%s): stopped; nothing was written, %s is as it was",
                           strsignal(g_stop_sig), r->o->out);
        job *j = &jb[*n];
        glm_status st = glm_reader_next(r->rd, &j->rec);
        if (st == GLM_EOF) {
            *eof = true;
            break;
        }
        if (st != GLM_OK) return st;
        j->rec.source = tok_report_source(&r->rep, j->rec.source);
        (*n)++;
    }
    return GLM_OK;
}

/* One processed record, in input order: counted in the report, then dropped (fatal with
 * --strict) or its documents routed to the splits (eval_dataset entries to val, the others by
 * the validation draw) and added to their packers. */
static glm_status consume_job(tok_run *r, job *j) {
    const tok_opts *o = r->o;
    tok_report *rep = &r->rep;
    out_view(j);
    tok_report_record(rep, j->rec.source, j->rec.nbytes);
    for (int q = 0; q < j->n_notes; q++) tok_report_note(rep, j->notes[q]);
    if (j->drop) {
        tok_report_drop(rep, j->rec.source, j->drop, j->drop_detail);
        if (o->strict)
            return glm_err(GLM_ERR_FORMAT, "%s [%s] (--strict stops at the first bad record: without it they are "
                           "skipped and counted by reason)",
                           j->drop_detail ? j->drop_detail : j->drop, j->drop);
        return GLM_OK;
    }
    if (j->truncated) tok_report_note(rep, "truncated");
    tok_report_layout(rep, glm_format_name(j->layout));
    tok_report_flags(rep, j->flag_turns, j->flag_off);
    size_t nt, ntok = j->ids.n;
    bool tail;
    doc_set d = {0}, to_train, to_val;
    glm_status s = job_docs(j, &d, &nt, &tail);
    if (s == GLM_OK && j->window) tok_report_windows(rep, d.n, tail);
    if (s == GLM_OK) tok_report_keep(rep, j->rec.source, tail ? ntok - 1 : ntok, nt);
    /* eval_dataset: its entries go to the val split (and to train too when dataset names them) */
    const glm_dsinfo_entry *ent = j->rec.mapping;
    bool to_eval = o->eval_dataset && ent && ent->name && name_in(o->eval_dataset, ent->name);
    bool also_train = to_eval && name_in(o->dataset, ent->name);
    if (s == GLM_OK && to_eval && !also_train) {
        to_train = (doc_set){0};
        to_val = d;
        r->seq++;
    } else if (s == GLM_OK && to_eval) {
        to_train = d;
        s = doc_set_copy(&d, &to_val);
        r->seq++;
    } else if (s == GLM_OK) s = val_route(&r->vs, d, r->seq++, &to_train, &to_val);
    else doc_set_free(&d);
    if (s == GLM_OK && to_train.n) s = add_docs(&r->ptrain, &to_train);
    if (s == GLM_OK && to_val.n) s = add_docs(&r->pval, &to_val);
    doc_set_free(&to_train);
    doc_set_free(&to_val);
    return s;
}

/* Every record of the input, batch by batch: the worker threads convert and encode one batch
 * while the next is read, and the finished batch is consumed in input order (consume_job), so
 * the output does not depend on the thread count. Shows the progress line. */
static glm_status tokenize_records(tok_run *r) {
    glm_status s = GLM_OK;
    glm_progress prog;
    glm_progress_start(&prog, "tokenize", "records", 0, glm_reader_total_bytes(r->rd), !r->o->quiet);
    job *batches[2] = {calloc(TOK_BATCH, sizeof(job)), calloc(TOK_BATCH, sizeof(job))};
    worker_pool pool;
    pool_start(&pool, (size_t)r->o->threads);
    glm_arena main_arena = {0}; /* when no worker could start */
    out_buf main_out[2] = {0};
    batch_ctx ctx[2];
    int cur = 0;
    bool eof = false, running = false;
    size_t n_running = 0;
    int64_t last_bytes = 0;
    r->t0 = glm_now();
    while (s == GLM_OK) {
        size_t n;
        job *jb = batches[cur];
        if ((s = read_batch(r, jb, &n, &eof)) != GLM_OK) break;
        /* wait for the running batch, then start this one */
        if (running) {
            pool_wait(&pool);
            running = false;
        }
        if (n > 0) {
            ctx[cur] = (batch_ctx){r->o, r->tok, r->tpl, r->copt, jb, n, 0, cur};
            if (pool.n > 0) {
                pool_run(&pool, &ctx[cur]);
                running = true;
            } else {
                run_batch(&ctx[cur], &main_arena, main_out); /* every record of the batch, here and now */
            }
        }
        /* consume the previous batch (finished) in order */
        job *prev = batches[1 - cur];
        for (size_t k = 0; k < n_running && s == GLM_OK; k++) s = consume_job(r, &prev[k]);
        for (size_t k = 0; k < n_running; k++) job_clear(&prev[k]);
        int64_t b = glm_reader_bytes_read(r->rd);
        glm_progress_add(&prog, (int64_t)n_running, b - last_bytes);
        last_bytes = b;
        n_running = n;
        cur = 1 - cur;
        if (n == 0 && eof) break;
    }
    if (running) pool_wait(&pool);
    pool_stop(&pool);
    glm_arena_free(&main_arena);
    for (int k = 0; k < 2; k++) {
        glm_vec_free(main_out[k].ids);
        glm_vec_free(main_out[k].tg);
    }
    for (int b = 0; b < 2; b++) {
        for (size_t k = 0; k < TOK_BATCH; k++) job_clear(&batches[b][k]);
        free(batches[b]);
    }
    glm_progress_finish(&prog);
    return s;
}

/* The validation draw's records into the val packer in input order, then both packers' last
 * rows written. */
static glm_status flush_splits(tok_run *r) {
    val_item *rest = NULL;
    size_t n_rest = 0;
    glm_status s = val_fraction_done(&r->vs, &rest, &n_rest);
    for (size_t i = 0; i < n_rest; i++) { /* drawn as candidates, not among the ceil(f * n): train */
        if (s == GLM_OK) s = add_docs(&r->ptrain, &rest[i].set);
        else doc_set_free(&rest[i].set);
    }
    free(rest);
    if (s == GLM_OK && r->vs.heap.n) {
        qsort(r->vs.heap.v, r->vs.heap.n, sizeof *r->vs.heap.v, by_seq);
        for (size_t i = 0; i < r->vs.heap.n && s == GLM_OK; i++) s = add_docs(&r->pval, &r->vs.heap.v[i].set);
    }
    if (s == GLM_OK) s = glm_packer_finish(&r->ptrain);
    if (s == GLM_OK) s = glm_packer_finish(&r->pval);
    return s;
}

/* The run's result checked (a train split that is not empty), a warning for inputs without
 * records, and each dataset's selection into the report. */
static glm_status check_splits(tok_run *r) {
    if (r->ptrain.rows == 0 && r->rep.records_kept > 0)
        return glm_err(GLM_ERR_ARG, "all %lld kept samples went to the validation split, none is left for training; "
                       "nothing was written. hint: a smaller --val-size", (long long)r->rep.records_kept);
    if (r->ptrain.rows == 0)
        return glm_err(GLM_ERR_FORMAT, "no usable sample in the input (%lld records read, all dropped); nothing was "
                       "written. See the reasons above; hint: check --format, --seq-len, --tokenizer",
                       (long long)r->rep.records_read);
    if (glm_reader_n_empty(r->rd) > 20)
        glm_log_warn("%zu input files or archive members held no record (empty); the first 20 are "
                     "named above", glm_reader_n_empty(r->rd));
    for (size_t i = 0; i < glm_reader_n_datasets(r->rd); i++) {
        glm_reader_dataset ds;
        glm_reader_dataset_info(r->rd, i, &ds);
        tok_report_selection(&r->rep, &ds);
    }
    return GLM_OK;
}

/* Frees what init_splits and open_run made, and the tokenizer and template. */
static void close_run(tok_run *r) {
    for (size_t i = 0; i < r->vs.heap.n; i++) doc_set_free(&r->vs.heap.v[i].set);
    glm_vec_free(r->vs.heap);
    glm_packer_free(&r->ptrain);
    glm_packer_free(&r->pval);
    glm_shard_writer_free(&r->wtrain);
    glm_shard_writer_free(&r->wval);
    tok_report_free(&r->rep);
    free(r->tmpdir);
    free(r->out_real);
    glm_reader_close(r->rd);
    glm_template_free(r->tpl);
    glm_tokenizer_free(r->tok);
}

/* The run itself, once the options are parsed (the caller frees o->inputs). */
static int tokenize_main(tok_opts *op) {
    tok_opts o = *op;
    glm_status s = GLM_OK;
    glm_tokenizer *tok = NULL;
    if (o.tokenizer_path && o.tokenizer_path == o.cfg.model && !glm_is_dir(o.tokenizer_path) &&
        !glm_is_file(o.tokenizer_path))
        return cli_fail(glm_err(GLM_ERR_ARG, "%s: model_name_or_path %s is not a local folder (a hub id?): glmtune "
                                "reads the tokenizer from the model's folder; hint: override it with "
                                "--model_name_or_path DIR (or --tokenizer DIR)", o.config_path, o.tokenizer_path));
    glm_json_alloc_install(); /* before any thread: the workers' values live in arenas */
    if (o.tokenizer_path && (s = glm_tokenizer_load(o.tokenizer_path, &tok)) != GLM_OK) return cli_fail(s);
    if (o.encode || o.decode) {
        int rc = tokenize_stdio(tok, o.encode);
        glm_tokenizer_free(tok);
        return rc;
    }
    glm_format fmt;
    if ((s = glm_format_parse(o.format_name, &fmt)) != GLM_OK) {
        glm_tokenizer_free(tok);
        return cli_fail(s);
    }
    tok_run r = {.o = &o, .tok = tok, .copt = {fmt, o.text_column, o.keep_reasoning, o.merge_turns, o.chat_only},
                 .out_lock = -1};
    if (tok && (s = load_template(&o, tok, &r.tpl)) != GLM_OK) {
        glm_tokenizer_free(tok);
        return cli_fail(s);
    }
    if ((s = open_run(&r)) != GLM_OK) {
        if (r.out_made) rmdir(o.out);
        if (r.out_lock >= 0) close(r.out_lock);
        glm_reader_close(r.rd);
        glm_template_free(r.tpl);
        glm_tokenizer_free(tok);
        free(r.tmpdir);
        free(r.out_real);
        return cli_fail(s);
    }
    glm_reader_set_deferred_parse(r.rd, true);
    catch_stop_signals(true);
    init_splits(&r);
    s = tokenize_records(&r);
    if (s == GLM_OK) s = flush_splits(&r);
    double secs = glm_now() - r.t0;
    if (s == GLM_OK) s = check_splits(&r);
    if (s == GLM_OK) s = check_outdir(o.out); /* files put into -o during the run */
    if (s == GLM_OK) {
        tok_report_finish(&r.rep, &r.ptrain, &r.pval, r.T, secs, glm_reader_total_bytes(r.rd));
        s = tok_write_outputs(&r.rep, r.tmpdir, o.out, o.report_path, &o, tok, &r.wtrain, &r.wval);
    }
    if (s == GLM_OK && g_stop_sig)
        s = glm_err(GLM_ERR_IO, "interrupted (%s): stopped; nothing was written, %s is as it was", strsignal(g_stop_sig),
                    o.out);
    if (s == GLM_OK) s = glm_commit_dir(r.tmpdir, o.out);
    tok_report_print(&r.rep, s == GLM_OK);
    if (s != GLM_OK) glm_rmtree(r.tmpdir);
    if (s != GLM_OK && r.out_made) rmdir(o.out); /* made by this run, still empty: as it was, absent */
    if (r.out_lock >= 0) close(r.out_lock);
    close_run(&r);
    const int sig = g_stop_sig;
    catch_stop_signals(false);
    if (sig && s != GLM_OK) {
        cli_show_error();
        raise(sig); /* the default action now: the process ends as killed by the signal */
    }
    return s == GLM_OK ? GLM_EXIT_OK : cli_fail(s);
}
