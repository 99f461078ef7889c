/* tool/tokenize/tokenize_report.h: the counts that `glmtune tokenize` reports (stdout summary and
 * --report JSON): records read and kept, dropped by reason with the first locations, notes,
 * tokens, targets, rows, packing efficiency, and the same per input file. */
#ifndef GLM_TOKENIZE_REPORT_H
#define GLM_TOKENIZE_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "dataset/packer.h"
#include "dataset/reader.h"

typedef struct tok_source {
    char *name;
    int64_t records_read, records_kept, dropped, tokens, target_tokens, bytes;
} tok_source;

typedef struct tok_report {
    int64_t records_read, records_kept, bytes;
    json_t *layouts;        /* layout -> kept records */
    int64_t flag_turns, flag_off;           /* turns whose target status came from a loss flag */
    int64_t texts_split, windows, tails;    /* texts longer than T cut into windows */
    json_t *datasets;       /* max_samples / num_samples per dataset */
    json_t *dropped;        /* reason -> count */
    json_t *dropped_first;  /* reason -> [first locations] */
    json_t *notes;          /* note -> count */
    tok_source *src;
    size_t n_src, cap_src;
    json_t *final;          /* the whole report, after tok_report_finish */
} tok_report;

void tok_report_init(tok_report *r);
/* Interns a source name: the returned pointer lives as long as the report. */
const char *tok_report_source(tok_report *r, const char *name);
void tok_report_record(tok_report *r, const char *source, size_t nbytes);
void tok_report_keep(tok_report *r, const char *source, size_t tokens, size_t targets);
void tok_report_drop(tok_report *r, const char *source, const char *reason, const char *detail);
void tok_report_note(tok_report *r, const char *note);
/* A kept record's layout ("messages", "text", ...). */
void tok_report_layout(tok_report *r, const char *layout);
/* A kept record's turns whose target status came from a loss flag (off of them not trained). */
void tok_report_flags(tok_report *r, int turns, int off);
/* A text cut into `windows` documents (tail: its one-token last window was left out). */
void tok_report_windows(tok_report *r, size_t windows, bool tail);
/* A dataset's selection (recorded only when max_samples or num_samples applied to it). */
void tok_report_selection(tok_report *r, const glm_reader_dataset *d);
/* Builds r->final from the counts and the packers' totals. */
void tok_report_finish(tok_report *r, const glm_packer *train, const glm_packer *val, uint32_t T, double seconds,
                       int64_t input_bytes);
/* Prints the summary to stderr (and the drop reasons with first locations). */
void tok_report_print(const tok_report *r, bool ok);
void tok_report_free(tok_report *r);

#endif
