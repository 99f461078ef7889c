#include "tokenize_report.h"

#include "common/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIRST_LOCATIONS = 3 };

static void incr(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    json_object_set_new(obj, key, json_integer(v ? json_integer_value(v) + 1 : 1));
}

void tok_report_init(tok_report *r) {
    memset(r, 0, sizeof *r);
    r->dropped = json_object();
    r->dropped_first = json_object();
    r->notes = json_object();
    r->layouts = json_object();
    r->datasets = json_array();
}

void tok_report_layout(tok_report *r, const char *layout) { incr(r->layouts, layout); }

void tok_report_flags(tok_report *r, int turns, int off) {
    r->flag_turns += turns;
    r->flag_off += off;
}

void tok_report_windows(tok_report *r, size_t windows, bool tail) {
    r->texts_split++;
    r->windows += (int64_t)windows;
    r->tails += tail;
}

void tok_report_selection(tok_report *r, const glm_reader_dataset *d) {
    if (d->max_samples < 0 && d->num_samples < 0) return;
    if (d->returned == 0 && !d->cut && d->records < 0) return; /* a dataset with no source */
    char *name = glm_utf8_lossy(d->name);
    json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:b}", "dataset", name ? name : "?", "max_samples",
                          (json_int_t)d->max_samples, "num_samples", (json_int_t)d->num_samples,
                          "records", (json_int_t)d->records, "records_returned", (json_int_t)d->returned,
                          "rest_not_read", d->cut);
    free(name);
    json_array_append_new(r->datasets, o);
}

static tok_source *find_src(tok_report *r, const char *name) {
    /* records of one source arrive together: look from the end */
    for (size_t i = r->n_src; i-- > 0;)
        if (r->src[i].name == name || !strcmp(r->src[i].name, name)) return &r->src[i];
    return NULL;
}

const char *tok_report_source(tok_report *r, const char *name) {
    tok_source *s = find_src(r, name);
    if (s) return s->name;
    if (r->n_src == r->cap_src) {
        r->cap_src = r->cap_src ? 2 * r->cap_src : 16;
        r->src = realloc(r->src, r->cap_src * sizeof *r->src);
    }
    s = &r->src[r->n_src++];
    memset(s, 0, sizeof *s);
    s->name = strdup(name);
    return s->name;
}

void tok_report_record(tok_report *r, const char *source, size_t nbytes) {
    tok_source *s = find_src(r, source);
    r->records_read++;
    r->bytes += (int64_t)nbytes;
    if (s) {
        s->records_read++;
        s->bytes += (int64_t)nbytes;
    }
}

void tok_report_keep(tok_report *r, const char *source, size_t tokens, size_t targets) {
    tok_source *s = find_src(r, source);
    r->records_kept++;
    if (s) {
        s->records_kept++;
        s->tokens += (int64_t)tokens;
        s->target_tokens += (int64_t)targets;
    }
}

void tok_report_drop(tok_report *r, const char *source, const char *reason, const char *detail) {
    tok_source *s = find_src(r, source);
    if (s) s->dropped++;
    incr(r->dropped, reason);
    json_t *first = json_object_get(r->dropped_first, reason);
    if (!first) {
        first = json_array();
        json_object_set_new(r->dropped_first, reason, first);
    }
    if (json_array_size(first) < FIRST_LOCATIONS) {
        char *text = glm_utf8_lossy(detail ? detail : reason); /* file names are bytes, JSON is UTF-8 */
        json_array_append_new(first, json_string(text ? text : reason));
        free(text);
    }
}

void tok_report_note(tok_report *r, const char *note) { incr(r->notes, note); }

void tok_report_finish(tok_report *r, const glm_packer *train, const glm_packer *val, uint32_t T, double seconds,
                       int64_t input_bytes) {
    json_t *j = json_object();
    int64_t rows = (int64_t)(train->rows + val->rows);
    int64_t tokens = (int64_t)(train->tokens + val->tokens), targets = (int64_t)(train->targets + val->targets);
    json_object_set_new(j, "records_read", json_integer(r->records_read));
    json_object_set_new(j, "records_kept", json_integer(r->records_kept));
    json_object_set_new(j, "dropped", json_deep_copy(r->dropped));
    json_object_set_new(j, "dropped_first", json_deep_copy(r->dropped_first));
    json_object_set_new(j, "notes", json_deep_copy(r->notes));
    json_object_set_new(j, "layouts", json_deep_copy(r->layouts));
    json_object_set_new(j, "loss_flag_turns", json_pack("{s:I,s:I,s:I}", "turns", (json_int_t)r->flag_turns,
                                                        "trained", (json_int_t)(r->flag_turns - r->flag_off),
                                                        "not_trained", (json_int_t)r->flag_off));
    json_object_set_new(j, "text_windows", json_pack("{s:I,s:I,s:I}", "texts_split", (json_int_t)r->texts_split,
                                                     "windows", (json_int_t)r->windows, "one_token_tails_left_out",
                                                     (json_int_t)r->tails));
    json_object_set_new(j, "datasets", json_deep_copy(r->datasets));
    json_object_set_new(j, "tokens", json_integer(tokens));
    json_object_set_new(j, "target_tokens", json_integer(targets));
    json_object_set_new(j, "rows", json_integer(rows));
    json_object_set_new(j, "seq_len", json_integer(T));
    json_object_set_new(j, "packing_efficiency", json_real(rows ? (double)tokens / ((double)rows * T) : 0));
    json_object_set_new(j, "target_fraction", json_real(rows ? (double)targets / ((double)rows * T) : 0));
    json_object_set_new(j, "train", json_pack("{s:I,s:I,s:I,s:I}", "rows", (json_int_t)train->rows, "samples",
                                              (json_int_t)train->n_docs, "tokens", (json_int_t)train->tokens,
                                              "target_tokens", (json_int_t)train->targets));
    json_object_set_new(j, "val", json_pack("{s:I,s:I,s:I,s:I}", "rows", (json_int_t)val->rows, "samples",
                                            (json_int_t)val->n_docs, "tokens", (json_int_t)val->tokens,
                                            "target_tokens", (json_int_t)val->targets));
    json_object_set_new(j, "seconds", json_real(seconds));
    json_object_set_new(j, "input_bytes", json_integer(input_bytes));
    json_object_set_new(j, "mb_per_second", json_real(seconds > 0 ? (double)input_bytes / seconds / 1e6 : 0));
    json_t *files = json_object();
    for (size_t i = 0; i < r->n_src; i++) {
        tok_source *s = &r->src[i];
        char *name = glm_utf8_lossy(s->name);
        json_object_set_new(files, name ? name : "?",
                            json_pack("{s:I,s:I,s:I,s:I,s:I}", "records_read", (json_int_t)s->records_read,
                                      "records_kept", (json_int_t)s->records_kept, "dropped", (json_int_t)s->dropped,
                                      "tokens", (json_int_t)s->tokens, "target_tokens", (json_int_t)s->target_tokens));
        free(name);
    }
    json_object_set_new(j, "files", files);
    r->final = j;
}

void tok_report_print(const tok_report *r, bool ok) {
    FILE *f = stderr;
    json_t *j = r->final;
    fprintf(f, "\n%-24s %lld\n", "records read", (long long)r->records_read);
    fprintf(f, "%-24s %lld\n", "records kept", (long long)r->records_kept);
    const char *k;
    json_t *v;
    json_object_foreach(r->dropped, k, v) {
        fprintf(f, "%-24s %lld   dropped: %s\n", "", (long long)json_integer_value(v), k);
        json_t *first = json_object_get(r->dropped_first, k);
        size_t i;
        json_t *loc;
        json_array_foreach(first, i, loc) fprintf(f, "%-28s e.g. %s\n", "", json_string_value(loc));
    }
    json_object_foreach(r->notes, k, v) fprintf(f, "%-24s %lld   note: %s\n", "", (long long)json_integer_value(v), k);
    if (json_object_size(r->layouts) > 1 || json_object_get(r->layouts, "text")) {
        fprintf(f, "%-24s", "layouts");
        json_object_foreach(r->layouts, k, v) fprintf(f, " %s %lld", k, (long long)json_integer_value(v));
        fprintf(f, "\n");
    }
    if (r->flag_turns)
        fprintf(f, "%-24s %lld turns decided by their loss flag (%lld trained, %lld not)\n", "loss flags",
                (long long)r->flag_turns, (long long)(r->flag_turns - r->flag_off), (long long)r->flag_off);
    if (r->texts_split)
        fprintf(f, "%-24s %lld texts longer than a row cut into %lld windows%s\n", "text windows",
                (long long)r->texts_split, (long long)r->windows, r->tails ? " (one-token tails left out)" : "");
    size_t di;
    json_t *d;
    json_array_foreach(r->datasets, di, d) {
        json_int_t ns = json_integer_value(json_object_get(d, "num_samples"));
        json_int_t ms = json_integer_value(json_object_get(d, "max_samples"));
        fprintf(f, "%-24s %s: %lld records", "selection", json_string_value(json_object_get(d, "dataset")),
                (long long)json_integer_value(json_object_get(d, "records_returned")));
        if (ns >= 0) fprintf(f, " (num_samples %lld of %lld)", (long long)ns, (long long)json_integer_value(json_object_get(d, "records")));
        else fprintf(f, " (max_samples %lld%s)", (long long)ms, json_is_true(json_object_get(d, "rest_not_read")) ? ", the rest not read" : "");
        fprintf(f, "\n");
    }
    if (j) {
        fprintf(f, "%-24s %lld (%lld targets)\n", "tokens", (long long)json_integer_value(json_object_get(j, "tokens")),
                (long long)json_integer_value(json_object_get(j, "target_tokens")));
        fprintf(f, "%-24s %lld x %lld tokens (train %lld, val %lld)\n", "rows",
                (long long)json_integer_value(json_object_get(j, "rows")),
                (long long)json_integer_value(json_object_get(j, "seq_len")),
                (long long)json_integer_value(json_object_get(json_object_get(j, "train"), "rows")),
                (long long)json_integer_value(json_object_get(json_object_get(j, "val"), "rows")));
        fprintf(f, "%-24s %.1f%% tokens, %.1f%% targets\n", "packing efficiency",
                100 * json_real_value(json_object_get(j, "packing_efficiency")),
                100 * json_real_value(json_object_get(j, "target_fraction")));
        fprintf(f, "%-24s %.2f s, %.1f MB/s\n", "time", json_real_value(json_object_get(j, "seconds")),
                json_real_value(json_object_get(j, "mb_per_second")));
        if (r->n_src > 1) {
            fprintf(f, "per file:\n");
            for (size_t i = 0; i < r->n_src; i++)
                fprintf(f, "  %8lld read %8lld kept %10lld tokens  %s\n", (long long)r->src[i].records_read,
                        (long long)r->src[i].records_kept, (long long)r->src[i].tokens, r->src[i].name);
        }
    }
    if (!ok) fprintf(f, "(failed: no output was written)\n");
}

void tok_report_free(tok_report *r) {
    json_decref(r->dropped);
    json_decref(r->dropped_first);
    json_decref(r->notes);
    json_decref(r->layouts);
    json_decref(r->datasets);
    if (r->final) json_decref(r->final);
    for (size_t i = 0; i < r->n_src; i++) free(r->src[i].name);
    free(r->src);
    memset(r, 0, sizeof *r);
}
