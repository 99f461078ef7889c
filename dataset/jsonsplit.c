/* dataset/jsonsplit.c: streaming record splitter for JSON arrays / JSON Lines (see jsonsplit.h). */
#include "dataset/jsonsplit.h"

#include <stdint.h>
#include <stdio.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string.h>

enum {
    S_START,      /* before the first non-space byte of the stream */
    S_BETWEEN,    /* line layout: between records */
    S_VALUE,      /* line layout: inside an object/array record, tracking depth */
    S_SCALAR,     /* line layout: a record that does not start with a bracket; ends at newline */
    S_AFTER,      /* line layout: after a record, rest of its line */
    S_GARBAGE,    /* line layout: bytes that cannot be a record, up to the newline */
    S_ARR_BEFORE, /* array: expecting an element or ']' */
    S_ARR_ELEM,   /* array: inside an element */
    S_ARR_END,    /* array: after the closing ']' */
};

static const unsigned char BOM[3] = {0xEF, 0xBB, 0xBF};

void glm_jsonsplit_init(glm_jsonsplit *s, size_t max_record, bool lines_hint) {
    memset(s, 0, sizeof *s);
    s->max_record = max_record ? max_record : ((size_t)256 << 20);
    s->lines_hint = lines_hint;
    s->line_mode = lines_hint;
    s->state = S_START;
    s->line = 1;
}

void glm_jsonsplit_free(glm_jsonsplit *s) { glm_vec_free(s->buf); }

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static bool can_start_value(unsigned char c) {
    return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' ||
           c == 'f' || c == 'n';
}

/* Appends k bytes of the current record; past max_record only the length is counted. */
static glm_status rec_append(glm_jsonsplit *s, const char *p, size_t k) {
    s->rec_len += (int64_t)k;
    if (s->overflow || k == 0) return GLM_OK;
    if ((size_t)s->rec_len > s->max_record) {
        s->overflow = true;
        glm_vec_free(s->buf); /* give the memory back while the rest is skipped */
        return GLM_OK;
    }
    GLM_TRY(glm_vec_reserve(s->buf, k));
    memcpy(s->buf.v + s->buf.n, p, k);
    s->buf.n += k;
    return GLM_OK;
}

static void rec_begin(glm_jsonsplit *s, glm_jsplit_problem problem, const char *what) {
    s->buf.n = 0;
    s->rec_len = 0;
    s->overflow = false;
    s->rec_line = s->line;
    s->rec_offset = s->offset;
    s->rec_problem = problem;
    s->rec_column = 0;
    snprintf(s->rec_what, sizeof s->rec_what, "%s", what ? what : "");
    s->depth = 0;
    s->in_str = s->esc = false;
}

/* Fills *rec with the finished record (trimming trailing whitespace when asked). */
static void rec_emit(glm_jsonsplit *s, glm_jsplit_rec *rec, bool trim) {
    if (trim && !s->overflow)
        while (s->buf.n > 0 && is_ws((unsigned char)s->buf.v[s->buf.n - 1])) s->buf.n--;
    rec->index = s->index++;
    rec->line = s->rec_line;
    rec->offset = s->rec_offset;
    rec->column = s->rec_column;
    rec->problem = s->rec_problem;
    snprintf(rec->what, sizeof rec->what, "%s", s->rec_what);
    if (s->overflow && rec->problem == GLM_JSPLIT_OK) {
        rec->problem = GLM_JSPLIT_TOO_LARGE;
        snprintf(rec->what, sizeof rec->what,
                 "the record is %lld bytes or more, over the limit of %zu bytes",
                 (long long)s->rec_len, s->max_record);
    }
    rec->data = s->overflow ? NULL : (s->buf.v ? s->buf.v : "");
    rec->n = s->overflow ? (size_t)s->rec_len : s->buf.n;
    s->pending_reset = true;
}

/* Past a newline byte: the next line starts. */
static inline void new_line(glm_jsonsplit *s) {
    s->offset++;
    s->line++;
    s->line_start = s->offset;
}

/* A value complete in line mode met something other than whitespace on its line (byte c): the
 * whole line becomes one SYNTAX problem, which names the column. */
static void spoil_held(glm_jsonsplit *s, unsigned char c) {
    s->held = false;
    s->rec_problem = GLM_JSPLIT_SYNTAX;
    s->rec_column = s->offset - s->line_start + 1;
    char what[32];
    snprintf(what, sizeof what, c >= 0x20 && c < 0x7f ? "'%c'" : "byte 0x%02x", c);
    snprintf(s->rec_what, sizeof s->rec_what,
             "unexpected %s at column %lld, after the end of the record on its line (JSON Lines holds one "
             "record per line and nothing after it%s)",
             what, (long long)s->rec_column, c == ',' ? ": a trailing comma?" : "");
}

/* Track strings and bracket depth for one byte inside a record; returns the new depth. */
static inline void track(glm_jsonsplit *s, unsigned char c) {
    if (s->in_str) {
        if (s->esc) s->esc = false;
        else if (c == '\\') s->esc = true;
        else if (c == '"') s->in_str = false;
        return;
    }
    if (c == '"') s->in_str = true;
    else if (c == '{' || c == '[') s->depth++;
    else if ((c == '}' || c == ']') && s->depth > 0) s->depth--;
}

/* The length of the run at p[0..n) without '"', '\\' or '\n': inside a string, the bytes that
 * change nothing but the offset (16 at a time with SSE2, else 8 where the byte order allows). */
static size_t string_run(const char *p, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), nl = _mm_set1_epi8('\n');
    for (; i + 16 <= n; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)), _mm_cmpeq_epi8(x, nl));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits) return i + (size_t)__builtin_ctz(bits);
    }
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\'), l = w ^ (ones * '\n');
        uint64_t m = (((q - ones) & ~q) | ((b - ones) & ~b) | ((l - ones) & ~l)) & high;
        if (m) return i + ((size_t)__builtin_ctzll(m) >> 3);
    }
#endif
    while (i < n && p[i] != '"' && p[i] != '\\' && p[i] != '\n') i++;
    return i;
}

/* The length of the run at p[0..n) of bytes that, outside a string inside a record, change
 * nothing but the offset: not '"', a bracket, ',' or a newline. */
static size_t inert_run(const char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == '\n') break;
        i++;
    }
    return i;
}

glm_status glm_jsonsplit_feed(glm_jsonsplit *s, const char *p, size_t n, size_t *used,
                              glm_jsplit_rec *rec, bool *have) {
    *have = false;
    *used = 0;
    if (s->pending_reset) {
        s->buf.n = 0;
        s->pending_reset = false;
    }
    bool recording = s->state == S_VALUE || s->state == S_SCALAR || s->state == S_GARBAGE ||
                     s->state == S_ARR_ELEM;
    size_t seg = 0; /* start of the not-yet-stored part of the current record in p */
    size_t i = 0;
    while (i < n) {
        if ((s->state == S_VALUE || s->state == S_ARR_ELEM) && !s->esc && !s->byte_by_byte) {
            /* string contents, or between strings the bytes that change nothing but the offset
             * (indentation, numbers, ':'): skipped at once */
            size_t k = s->in_str ? string_run(p + i, n - i) : inert_run(p + i, n - i);
            s->offset += (int64_t)k;
            i += k;
            if (i == n) break;
        }
        unsigned char c = (unsigned char)p[i];
        size_t adv = 1;   /* 0: process the same byte again in the new state */
        switch (s->state) {
        case S_START:
            if (s->offset < 3 && s->bom == s->offset && c == BOM[s->offset]) {
                s->bom++;
                break;
            }
            if (s->bom > 0 && s->bom < 3)
                return glm_err(GLM_ERR_FORMAT,
                               "line 1, offset 0: the file starts with an incomplete UTF-8 "
                               "byte-order mark; hint: re-save the file as UTF-8");
            if (is_ws(c)) break;
            if (c == 0xFF || c == 0xFE || c == 0)
                return glm_err(GLM_ERR_FORMAT,
                               "line %lld, offset %lld: the data starts with byte 0x%02x: it looks "
                               "like UTF-16 or binary data, not UTF-8 JSON; hint: convert it to "
                               "UTF-8 (iconv -f UTF-16 -t UTF-8)",
                               (long long)s->line, (long long)s->offset, c);
            if (c == '[') {
                s->layout = GLM_JSON_LAYOUT_ARRAY;
                s->state = S_ARR_BEFORE;
                s->after_comma = false;
                break;
            }
            if (!can_start_value(c))
                return glm_err(GLM_ERR_FORMAT,
                               "line %lld, offset %lld: the data starts with '%c' (0x%02x), which "
                               "no JSON value starts with: this is not JSON or JSON Lines; hint: "
                               "inputs must be a JSON array, JSON Lines or one JSON object",
                               (long long)s->line, (long long)s->offset,
                               c >= 0x20 && c < 0x7f ? c : '?', c);
            s->layout = GLM_JSON_LAYOUT_LINES;
            s->state = S_BETWEEN;
            adv = 0;
            break;
        case S_BETWEEN:
            if (is_ws(c)) break;
            if (c == '{' || c == '[') {
                rec_begin(s, GLM_JSPLIT_OK, NULL);
                s->state = S_VALUE;
            } else if (can_start_value(c)) {
                rec_begin(s, GLM_JSPLIT_OK, NULL);
                s->state = S_SCALAR;
            } else {
                char what[128];
                snprintf(what, sizeof what,
                         "the line starts with '%c' (0x%02x), which no JSON record starts with",
                         c >= 0x20 && c < 0x7f ? c : '?', c);
                rec_begin(s, GLM_JSPLIT_SYNTAX, what);
                s->state = S_GARBAGE;
            }
            recording = true;
            seg = i;
            adv = 0;
            /* the byte is processed again in the record state, with offset/line unchanged */
            goto next_noadv;
        case S_VALUE:
            if (c == '\n' && s->line_mode && s->depth > 0) {
                GLM_TRY(rec_append(s, p + seg, i - seg));
                recording = false;
                s->rec_problem = GLM_JSPLIT_SYNTAX;
                snprintf(s->rec_what, sizeof s->rec_what,
                         "the line ends with %lld unclosed bracket%s%s: the record is cut off",
                         (long long)s->depth, s->depth == 1 ? "" : "s",
                         s->in_str ? " inside a string" : "");
                s->state = S_BETWEEN;
                new_line(s);
                i++;
                rec_emit(s, rec, true);
                *have = true;
                *used = i;
                return GLM_OK;
            }
            track(s, c);
            if (s->depth == 0 && !s->in_str) {
                GLM_TRY(rec_append(s, p + seg, i + 1 - seg));
                recording = false;
                if (!s->line_mode) s->line_mode = s->rec_line == s->line;
                s->state = S_AFTER;
                s->offset++;
                i++;
                if (s->line_mode) { /* returned when its line ends with nothing else on it */
                    s->held = true;
                    continue;
                }
                rec_emit(s, rec, false);
                *have = true;
                *used = i;
                return GLM_OK;
            }
            break;
        case S_SCALAR:
        case S_GARBAGE:
            if (c == '\n') {
                GLM_TRY(rec_append(s, p + seg, i - seg));
                recording = false;
                s->state = S_BETWEEN;
                new_line(s);
                i++;
                rec_emit(s, rec, true);
                *have = true;
                *used = i;
                return GLM_OK;
            }
            break;
        case S_AFTER:
            if (c == ' ' || c == '\t' || c == '\r') break;
            if (c == '\n') {
                s->state = S_BETWEEN;
                if (!s->held) break;
                s->held = false;
                new_line(s);
                i++;
                rec_emit(s, rec, false);
                *have = true;
                *used = i;
                return GLM_OK;
            }
            if (s->line_mode) {
                if (s->held)
                    spoil_held(s, c); /* the rest of the line joins the record, one problem */
                else
                    rec_begin(s, GLM_JSPLIT_SYNTAX,
                              "unexpected text after the end of the previous record on the same line");
                s->state = S_GARBAGE;
                recording = true;
                seg = i;
                goto next_noadv;
            }
            s->state = S_BETWEEN;
            adv = 0;
            break;
        case S_ARR_BEFORE:
            if (is_ws(c)) break;
            if (c == ']' || c == ',') {
                if (c == ']' && !s->after_comma) {
                    s->state = S_ARR_END;
                    break;
                }
                rec_begin(s, GLM_JSPLIT_SYNTAX,
                          c == ']' ? "a comma before ']' with no element after it"
                                   : "an empty element (two commas in a row)");
                s->state = c == ']' ? S_ARR_END : S_ARR_BEFORE;
                s->after_comma = true;
                s->offset++;
                i++;
                rec_emit(s, rec, true);
                *have = true;
                *used = i;
                return GLM_OK;
            }
            rec_begin(s, GLM_JSPLIT_OK, NULL);
            s->state = S_ARR_ELEM;
            recording = true;
            seg = i;
            goto next_noadv;
        case S_ARR_ELEM:
            if (!s->in_str && s->depth == 0 && (c == ',' || c == ']')) {
                GLM_TRY(rec_append(s, p + seg, i - seg));
                recording = false;
                s->state = c == ',' ? S_ARR_BEFORE : S_ARR_END;
                s->after_comma = c == ',';
                s->offset++;
                i++;
                rec_emit(s, rec, true);
                *have = true;
                *used = i;
                return GLM_OK;
            }
            track(s, c);
            break;
        case S_ARR_END:
            if (is_ws(c)) break;
            return glm_err(GLM_ERR_FORMAT,
                           "line %lld, offset %lld: unexpected text after the end of the "
                           "top-level JSON array (starts with '%c'); hint: a file holds one "
                           "array, or one JSON object per line (JSON Lines)",
                           (long long)s->line, (long long)s->offset,
                           c >= 0x20 && c < 0x7f ? c : '?');
        }
        if (adv) {
            if (c == '\n') new_line(s);
            else s->offset++;
            i++;
        }
    next_noadv:;
    }
    if (recording) GLM_TRY(rec_append(s, p + seg, n - seg));
    *used = n;
    return GLM_OK;
}

glm_status glm_jsonsplit_finish(glm_jsonsplit *s, glm_jsplit_rec *rec, bool *have) {
    *have = false;
    if (s->pending_reset) {
        s->buf.n = 0;
        s->pending_reset = false;
    }
    switch (s->state) {
    case S_START:
        if (s->bom > 0 && s->bom < 3)
            return glm_err(GLM_ERR_FORMAT,
                           "line 1, offset 0: the file holds only an incomplete UTF-8 "
                           "byte-order mark; hint: re-save the file as UTF-8");
        return GLM_OK;
    case S_VALUE:
        s->rec_problem = GLM_JSPLIT_TRUNCATED;
        snprintf(s->rec_what, sizeof s->rec_what,
                 "the data ends inside this record (%lld unclosed bracket%s%s): the file looks "
                 "cut off",
                 (long long)s->depth, s->depth == 1 ? "" : "s", s->in_str ? ", inside a string" : "");
        s->state = S_BETWEEN;
        rec_emit(s, rec, true);
        *have = true;
        return GLM_OK;
    case S_SCALAR:
    case S_GARBAGE:
        s->state = S_BETWEEN;
        rec_emit(s, rec, true);
        *have = true;
        return GLM_OK;
    case S_AFTER: /* the last line, without a newline: its value */
        if (!s->held) return GLM_OK;
        s->held = false;
        s->state = S_BETWEEN;
        rec_emit(s, rec, false);
        *have = true;
        return GLM_OK;
    case S_ARR_BEFORE:
    case S_ARR_ELEM:
        /* A top-level array cut off (a download or `head -c` that stopped early): the complete
         * records before the cut were returned already; the cut-off tail is one TRUNCATED
         * problem, counted like a broken JSON Lines record (fatal only under --strict). */
        if (s->state == S_ARR_ELEM && s->depth == 0 && !s->in_str && !s->overflow) {
            /* cut right after an element's closing bracket (`[{...}, {...}` with no ',' or ']'
             * after it): that element is whole; return it, and the missing ']' on the next call */
            size_t n = s->buf.n;
            while (n > 0 && is_ws((unsigned char)s->buf.v[n - 1])) n--;
            if (n > 0 && (s->buf.v[n - 1] == '}' || s->buf.v[n - 1] == ']')) {
                s->state = S_ARR_BEFORE;
                s->after_comma = false;
                rec_emit(s, rec, true);
                *have = true;
                return GLM_OK;
            }
        }
        if (s->state == S_ARR_ELEM) {
            s->rec_problem = GLM_JSPLIT_TRUNCATED;
            snprintf(s->rec_what, sizeof s->rec_what,
                     "the data ends inside this record of the top-level array (%lld unclosed "
                     "bracket%s%s, at byte offset %lld): the file looks cut off",
                     (long long)s->depth, s->depth == 1 ? "" : "s", s->in_str ? ", inside a string" : "",
                     (long long)s->offset);
        } else {
            rec_begin(s, GLM_JSPLIT_TRUNCATED, NULL); /* no bytes: the cut is between records */
            snprintf(s->rec_what, sizeof s->rec_what,
                     "the data ends at byte offset %lld, before the top-level array is closed with "
                     "']' (after %lld records): the file looks cut off",
                     (long long)s->offset, (long long)s->index);
        }
        s->state = S_ARR_END;
        rec_emit(s, rec, true);
        *have = true;
        return GLM_OK;
    default:
        return GLM_OK;
    }
}
