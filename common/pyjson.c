/* common/pyjson.c: json.dumps(ensure_ascii=False) and Python's float repr. See pyjson.h. */
#include "common/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/jsonfast.h"
#include "common/vec.h"

char *glm_py_float_repr(double d, char buf[32]) {
    if (isnan(d)) return strcpy(buf, "nan");
    if (isinf(d)) return strcpy(buf, d < 0 ? "-inf" : "inf");
    if (d == 0) return strcpy(buf, signbit(d) ? "-0.0" : "0.0");
    /* Shortest round-trip digits: the smallest precision whose %e form reads back exactly. */
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp = [-]D[.DDD]e[+-]XX: collect the digits and the exponent. */
    const char *s = tmp;
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    char dig[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') dig[nd++] = *s;
    int e = atoi(s + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--; /* %.*e can pad with zeros only when p>needed */
    dig[nd] = 0;
    char *o = buf;
    if (neg) *o++ = '-';
    if (e < -4 || e >= 16) {
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -e - 1; i++) *o++ = '0';
        memcpy(o, dig, nd);
        o += nd;
        *o = 0;
    } else {
        for (int i = 0; i <= e; i++) *o++ = i < nd ? dig[i] : '0';
        *o++ = '.';
        if (nd > e + 1) {
            memcpy(o, dig + e + 1, nd - e - 1);
            o += nd - e - 1;
        } else {
            *o++ = '0';
        }
        *o = 0;
    }
    return buf;
}

typedef struct {
    glm_charvec v;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (glm_vec_reserve(b->v, n + 1) != GLM_OK) { b->oom = 1; return; }
    memcpy(b->v.v + b->v.n, s, n);
    b->v.n += n;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_string(sbuf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue; /* as is (the run is copied at once) */
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) { snprintf(u, sizeof u, "\\u%04x", c); esc = u; }
        }
        if (esc) {
            put(b, s + run, i - run);
            puts_(b, esc);
            run = i + 1;
        }
    }
    put(b, s + run, n - run);
    put(b, "\"", 1);
}

static void newline_indent(sbuf *b, int indent, int level) {
    size_t k = (size_t)indent * (size_t)level;
    if (b->oom || glm_vec_reserve(b->v, k + 2) != GLM_OK) {
        b->oom = 1;
        return;
    }
    b->v.v[b->v.n++] = '\n';
    memset(b->v.v + b->v.n, ' ', k);
    b->v.n += k;
}

static void dump(sbuf *b, json_t *v, int indent, int level) {
    char num[40];
    switch (json_typeof(v)) {
    case JSON_NULL: puts_(b, "null"); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, num);
        break;
    case JSON_REAL: {
        double d = json_real_value(v);
        if (isnan(d)) puts_(b, "NaN");
        else if (isinf(d)) puts_(b, d < 0 ? "-Infinity" : "Infinity");
        else puts_(b, glm_py_float_repr(d, num));
        break;
    }
    case JSON_STRING: {
        const char *t;
        size_t tn;
        if (glm_json_numtext(v, NULL, &t, &tn)) put(b, t, tn); /* a number jansson cannot hold */
        else put_string(b, json_string_value(v), json_string_length(v));
        break;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) { puts_(b, "[]"); break; }
        put(b, "[", 1);
        for (size_t i = 0; i < n; i++) {
            if (i) puts_(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(b, indent, level + 1);
            dump(b, json_array_get(v, i), indent, level + 1);
        }
        if (indent >= 0) newline_indent(b, indent, level);
        put(b, "]", 1);
        break;
    }
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) { puts_(b, "{}"); break; }
        put(b, "{", 1);
        const char *k;
        json_t *x;
        size_t i = 0;
        json_object_foreach(v, k, x) {
            if (i++) puts_(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(b, indent, level + 1);
            put_string(b, k, strlen(k));
            puts_(b, ": ");
            dump(b, x, indent, level + 1);
        }
        if (indent >= 0) newline_indent(b, indent, level);
        put(b, "}", 1);
        break;
    }
    }
}

/* ------------------------------------------------------------------ json.loads' numbers */

/* A number-text value is a JSON string "\0#" + kind ('i' or 'f') + the text: no decoded JSON
 * text yields a leading NUL unless it holds "\u0000", which glm_json_loadb_py refuses. */
#define NUMTEXT_TAG "\0#"

bool glm_json_numtext(const json_t *v, char *kind, const char **text, size_t *len) {
    if (!json_is_string(v)) return false;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n < 4 || memcmp(s, NUMTEXT_TAG, 2) != 0 || (s[2] != 'i' && s[2] != 'f')) return false;
    if (kind) *kind = s[2];
    if (text) *text = s + 3;
    if (len) *len = n - 3;
    return true;
}

/* The end of the JSON string that starts at s[i] == '"' (the index after its closing quote), or
 * n; *nul set when it holds a \u0000 escape. */
static size_t string_end(const char *s, size_t n, size_t i, bool *nul) {
    for (i++; i < n; i++) {
        if (s[i] == '"') return i + 1;
        if (s[i] == '\\' && i + 1 < n) {
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) *nul = true;
            i++;
        }
    }
    return n;
}

/* Is the integer text t[0..n) ([-]digits) outside the range of json_int_t (64 bits)? */
static bool int_out_of_range(const char *t, size_t n) {
    bool neg = t[0] == '-';
    const char *d = t + neg;
    size_t k = n - neg;
    const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
    if (k != 19) return k > 19;
    return memcmp(d, lim, 19) > 0;
}

/* Appends s to *o (growing it); false when out of memory. */
static bool grow_put(char **o, size_t *on, size_t *cap, const char *s, size_t n) {
    if (*on + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 256) + n;
        char *x = realloc(*o, c);
        if (!x) return false;
        *o = x;
        *cap = c;
    }
    memcpy(*o + *on, s, n);
    *on += n;
    return true;
}

json_t *glm_json_loadb_py(const char *data, size_t n, size_t flags, json_error_t *err) {
    json_t *v = NULL;
    if ((flags & ~(size_t)JSON_DECODE_ANY) == 0 && (v = glm_json_parse_fast(data, n, (flags & JSON_DECODE_ANY) != 0)))
        return v; /* the common case, parsed fast; anything else as jansson parses it */
    v = json_loadb(data, n, flags, err);
    if (v) return v;
    int code = json_error_code(err);
    if (code != json_error_numeric_overflow && code != json_error_invalid_syntax) return NULL;
    /* Rewrite the text: each number jansson cannot hold becomes a number-text string. */
    json_error_t first = *err;
    char *o = NULL;
    size_t on = 0, cap = 0, i = 0;
    bool nul = false, changed = false, ok = true;
    while (i < n && ok) {
        char c = data[i];
        if (c == '"') {
            size_t e = string_end(data, n, i, &nul);
            ok = grow_put(&o, &on, &cap, data + i, e - i);
            i = e;
            continue;
        }
        const char *word = NULL;
        size_t wl = 0;
        char kind = 0;
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i + (c == '-');
            bool real = false;
            while (j < n && ((data[j] >= '0' && data[j] <= '9') || data[j] == '.' || data[j] == 'e' ||
                             data[j] == 'E' || ((data[j] == '+' || data[j] == '-') &&
                                                (data[j - 1] == 'e' || data[j - 1] == 'E')))) {
                real |= data[j] == '.' || data[j] == 'e' || data[j] == 'E';
                j++;
            }
            if (c == '-' && j == i + 1 && n - i >= 9 && !memcmp(data + i, "-Infinity", 9)) {
                word = "-Infinity", wl = 9, kind = 'f', j = i + 9;
            } else if (j > i + (c == '-')) {
                char buf[64];
                size_t tl = j - i;
                if (!real && int_out_of_range(data + i, tl)) {
                    word = data + i, wl = tl, kind = 'i';
                } else if (real && tl < sizeof buf) {
                    memcpy(buf, data + i, tl);
                    buf[tl] = 0;
                    double d = strtod(buf, NULL);
                    if (isinf(d)) word = d < 0 ? "-Infinity" : "Infinity", wl = d < 0 ? 9 : 8, kind = 'f';
                }
            }
            if (!kind) {
                ok = grow_put(&o, &on, &cap, data + i, j - i);
                i = j;
                continue;
            }
            i = j;
        } else if (n - i >= 8 && !memcmp(data + i, "Infinity", 8)) {
            word = "Infinity", wl = 8, kind = 'f', i += 8;
        } else if (n - i >= 3 && !memcmp(data + i, "NaN", 3)) {
            word = "NaN", wl = 3, kind = 'f', i += 3;
        } else {
            ok = grow_put(&o, &on, &cap, data + i, 1);
            i++;
            continue;
        }
        char tag[9] = {'"', '\\', 'u', '0', '0', '0', '0', '#', kind};
        ok = grow_put(&o, &on, &cap, tag, 9) && grow_put(&o, &on, &cap, word, wl) && grow_put(&o, &on, &cap, "\"", 1);
        changed = true;
    }
    if (ok && changed && !nul) v = json_loadb(o, on, flags | JSON_ALLOW_NUL, err);
    free(o);
    if (!v) *err = first; /* report what is wrong with the text as given */
    return v;
}

char *glm_tojson(json_t *v, int indent) {
    if (!v) return NULL;
    sbuf b = {{0}, 0};
    dump(&b, v, indent, 0);
    put(&b, "", 0);
    if (b.oom || !b.v.v) { free(b.v.v); return NULL; }
    b.v.v[b.v.n] = 0;
    return b.v.v;
}

double glm_f32_shortest(float f) {
    if (!isfinite(f)) return (double)f;
    char tmp[40];
    for (int p = 1; p <= 9; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, (double)f);
        if (strtof(tmp, NULL) == f) return strtod(tmp, NULL);
    }
    return (double)f;
}

glm_status glm_json_write_file(const char *path, json_t *v, int indent) {
    char *text = glm_tojson(v, indent);
    if (!text) return glm_err(GLM_ERR_NOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        free(text);
        return glm_err(GLM_ERR_NOMEM, "out of memory writing %s", path);
    }
    t2[n] = '\n';
    t2[n + 1] = 0;
    glm_status st = glm_write_file_atomic(path, t2, n + 1);
    free(t2);
    return st;
}
