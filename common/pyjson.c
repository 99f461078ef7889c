/* common/pyjson.c: json.dumps(ensure_ascii=False) and Python's float repr. See pyjson.h. */
#include "common/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
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
    put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++) put(b, " ", 1);
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
    case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
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
