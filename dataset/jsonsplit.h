/* dataset/jsonsplit.h: a streaming splitter that cuts a JSON byte stream into records.
 *
 * The input arrives in blocks of any size (a 100 MB array on one line never has to be in memory);
 * the splitter tracks strings, backslash escapes and bracket depth, and returns the bytes of one
 * record at a time, which the caller hands to jansson (docs/design.md §8: "jansson parses one value
 * from memory; a 100 MB single-line array needs a streaming splitter").
 *
 * Layout is detected from the content, never from a file name:
 *   - first non-space byte '[' : a JSON array; each element is a record;
 *   - otherwise                : a sequence of top-level values, i.e. JSON Lines, or one
 *                                (possibly pretty-printed) top-level object, or several
 *                                concatenated objects. Each top-level value is a record.
 *   - only whitespace          : no records.
 * A UTF-8 byte-order mark at offset 0 is skipped; CR before LF, blank lines and a last line
 * without newline are accepted.
 *
 * Line mode (JSON Lines): once a top-level value has started and ended on one line (or the
 * caller passes lines_hint, e.g. for a ".jsonl" name), a newline ends the record even if
 * brackets are still open, so one broken line costs one record and the next line is read. (Any
 * one-line value switches it on, not only the first: a ".json" file holding JSON Lines whose
 * first line is broken still recovers at the next line.) In line mode a line is one record: a
 * value is returned when its line ends, and anything but whitespace after it on its line (a
 * trailing comma, a second value) makes the whole line one SYNTAX problem, with the column of the
 * first such byte.
 *
 * Memory: one record's bytes at most; a record longer than max_record is scanned to its end
 * without being stored and reported as GLM_JSPLIT_TOO_LARGE. */
#ifndef GLM_DATASET_JSONSPLIT_H
#define GLM_DATASET_JSONSPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/vec.h"

typedef enum {
    GLM_JSPLIT_OK = 0,     /* data/n hold the record's bytes (jansson decides if they are valid) */
    GLM_JSPLIT_TOO_LARGE,  /* longer than max_record: data is NULL, n is the full length */
    GLM_JSPLIT_SYNTAX,     /* bytes that cannot be a record (text after a record on its line,
                              an empty array element, a line that ends with open brackets) */
    GLM_JSPLIT_TRUNCATED,  /* the stream ended inside this record, or an array before its ']' */
} glm_jsplit_problem;

typedef enum {
    GLM_JSON_LAYOUT_UNKNOWN = 0, /* nothing but whitespace seen yet */
    GLM_JSON_LAYOUT_ARRAY,       /* [ elem, elem, ... ] */
    GLM_JSON_LAYOUT_LINES,       /* top-level values: JSON Lines or one/more objects */
} glm_json_layout;

/* One record as cut by the splitter. Pointers are valid until the next feed/finish call. */
typedef struct glm_jsplit_rec {
    const char *data;     /* record bytes (not NUL-terminated); NULL for TOO_LARGE */
    size_t n;             /* number of bytes (for TOO_LARGE: the full length scanned) */
    int64_t index;        /* 0-based record index in the stream (problems count as records) */
    int64_t line;         /* 1-based line of the record's first byte */
    int64_t offset;       /* byte offset of the record's first byte (BOM included in offsets) */
    int64_t column;       /* for a problem: 1-based byte column (in its line) where it is, 0 = not known */
    glm_jsplit_problem problem;
    char what[256];       /* for a problem: plain-words description (no file name) */
} glm_jsplit_rec;

typedef struct glm_jsonsplit {
    size_t max_record;
    bool lines_hint;
    glm_json_layout layout;
    bool line_mode;       /* JSON Lines decided (newline ends a record) */
    int state;
    int bom;              /* BOM bytes matched at the start */
    int64_t offset;       /* bytes consumed so far */
    int64_t line;         /* current line, 1-based */
    int64_t line_start;   /* offset of the current line's first byte */
    bool held;            /* line mode: a complete value waiting for the end of its line */
    int64_t depth;        /* bracket depth inside the current record */
    bool in_str, esc;
    bool after_comma;     /* array: the last separator was ',' */
    bool overflow;        /* current record exceeded max_record */
    bool pending_reset;   /* a record was returned: clear buf before the next byte */
    bool byte_by_byte;    /* tests: no skipping over string contents, every byte through the
                             state machine (the reference for the skipping) */
    int64_t rec_line, rec_offset, rec_len, rec_column, index;
    glm_jsplit_problem rec_problem;
    char rec_what[256];
    glm_charvec buf;
} glm_jsonsplit;

/* Prepares a splitter. max_record: the largest record stored, in bytes (0 = 256 MiB).
 * lines_hint: treat newlines as record ends from the first line (the caller knows the
 * stream is JSON Lines, e.g. from a ".jsonl" name); content still decides array vs lines. */
void glm_jsonsplit_init(glm_jsonsplit *s, size_t max_record, bool lines_hint);

/* Consumes bytes from p[0..n) until one record is complete or the block is used up.
 * *used: bytes consumed (call again with p + *used for the rest). *have: true when *rec holds
 * a record (or a per-record problem). Errors (fatal for the stream; the message has no file
 * name, the caller adds it): GLM_ERR_FORMAT for text after a top-level array, a stream that
 * is not JSON at all (starts with a byte no JSON value starts with, UTF-16), an incomplete BOM;
 * GLM_ERR_NOMEM. */
glm_status glm_jsonsplit_feed(glm_jsonsplit *s, const char *p, size_t n, size_t *used,
                              glm_jsplit_rec *rec, bool *have);

/* Ends the stream: may return one last record (a value without trailing newline, or a
 * TRUNCATED problem: the stream ended inside a record, or inside a top-level array before its
 * ']'; `what` gives the byte offset where the data ends). Errors: GLM_ERR_FORMAT for an
 * incomplete byte-order mark. */
glm_status glm_jsonsplit_finish(glm_jsonsplit *s, glm_jsplit_rec *rec, bool *have);

/* Frees the record buffer. */
void glm_jsonsplit_free(glm_jsonsplit *s);

#endif
