/* tokenize/template/template_value.c: Python semantics of template values (jansson json_t; NULL stands
 * for "undefined"): truthiness, str()/repr(), ==, ordering, len(), iteration, slicing, and the
 * UTF-8 helpers they share with the lexer and the builtins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/template/template_internal.h"
#include "common/pyjson.h"

/* Appends code point cp to v as UTF-8. */
void tpl_put_utf8(glm_charvec *v, uint32_t cp) {
    char b[4];
    int n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) { b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 63)); b[2] = (char)(0x80 | (cp & 63)); n = 3; }
    else { b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 63)); b[2] = (char)(0x80 | ((cp >> 6) & 63)); b[3] = (char)(0x80 | (cp & 63)); n = 4; }
    for (int i = 0; i < n; i++) glm_vec_push(*v, b[i]);
}

const char *tpl_tname(json_t *v) {
    char kind;
    if (!v) return "undefined";
    if (glm_json_numtext(v, &kind, NULL, NULL)) return kind == 'i' ? "int" : "float";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE: case JSON_FALSE: return "bool";
    default: return "None";
    }
}

int tpl_truthy(json_t *v) {
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

void tpl_cv_put(glm_charvec *b, const char *s, size_t n) {
    if (glm_vec_reserve(*b, n + 1) != GLM_OK) return;
    memcpy(b->v + b->n, s, n);
    b->n += n;
}
static void cv_puts(glm_charvec *b, const char *s) { tpl_cv_put(b, s, strlen(s)); }

/* Takes b's bytes as a new JSON string and frees b's buffer. */
json_t *tpl_cv_json(glm_charvec *b) {
    json_t *r = json_stringn_nocheck(b->v ? b->v : "", b->n);
    glm_vec_free(*b);
    return r;
}

static void py_repr(json_t *v, glm_charvec *b);

/* Python str() of a value (undefined -> ""). */
void tpl_py_str(json_t *v, glm_charvec *b) {
    char num[40];
    if (!v) return;
    const char *nt;
    size_t nn;
    char kind;
    if (glm_json_numtext(v, &kind, &nt, &nn)) { /* str() of a number jansson cannot hold */
        if (kind == 'i') tpl_cv_put(b, nt, nn);
        else cv_puts(b, nn == 3 ? "nan" : nt[0] == '-' ? "-inf" : "inf");
        return;
    }
    switch (json_typeof(v)) {
    case JSON_STRING: tpl_cv_put(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); cv_puts(b, num); break;
    case JSON_REAL: cv_puts(b, glm_py_float_repr(json_real_value(v), num)); break;
    case JSON_TRUE: cv_puts(b, "True"); break;
    case JSON_FALSE: cv_puts(b, "False"); break;
    case JSON_NULL: cv_puts(b, "None"); break;
    default: py_repr(v, b);
    }
}

static void py_repr_str(const char *s, size_t n, glm_charvec *b) {
    char q = '\'';
    if (memchr(s, '\'', n) && !memchr(s, '"', n)) q = '"';
    tpl_cv_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '\\') cv_puts(b, "\\\\");
        else if (ch == (unsigned char)q) { e[0] = '\\'; e[1] = q; tpl_cv_put(b, e, 2); }
        else if (ch == '\n') cv_puts(b, "\\n");
        else if (ch == '\r') cv_puts(b, "\\r");
        else if (ch == '\t') cv_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) { snprintf(e, sizeof e, "\\x%02x", ch); cv_puts(b, e); }
        else tpl_cv_put(b, (const char *)&ch, 1);
    }
    tpl_cv_put(b, &q, 1);
}

/* Python repr() of a value: strings quoted, lists/dicts as Python prints them. */
static void py_repr(json_t *v, glm_charvec *b) {
    if (!v) return;
    if (glm_json_numtext(v, NULL, NULL, NULL)) { tpl_py_str(v, b); return; }
    if (json_is_string(v)) { py_repr_str(json_string_value(v), json_string_length(v), b); return; }
    if (json_is_array(v)) {
        cv_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) cv_puts(b, ", ");
            py_repr(json_array_get(v, i), b);
        }
        cv_puts(b, "]");
        return;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        size_t i = 0;
        cv_puts(b, "{");
        json_object_foreach(v, k, x) {
            if (i++) cv_puts(b, ", ");
            py_repr_str(k, strlen(k), b);
            cv_puts(b, ": ");
            py_repr(x, b);
        }
        cv_puts(b, "}");
        return;
    }
    tpl_py_str(v, b);
}

json_t *tpl_str_of(json_t *v) {
    glm_charvec b = {0};
    tpl_py_str(v, &b);
    return tpl_cv_json(&b);
}

int tpl_py_equal(json_t *a, json_t *b) {
    if (!a || !b) return !a && !b;
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return intv(a) == intv(b);
        return numv(a) == numv(b);
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_string(a))
        return json_string_length(a) == json_string_length(b) &&
               !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!tpl_py_equal(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !tpl_py_equal(x, y)) return 0;
        }
        return 1;
    }
    return 1; /* null */
}

/* Python ordering: returns 0 ok (*r = -1/0/1) or -1 when the types cannot be ordered. */
int tpl_py_cmp(json_t *a, json_t *b, int *r) {
    if (is_num(a) && is_num(b)) {
        double x = numv(a), y = numv(b);
        if (is_intlike(a) && is_intlike(b)) { long long i = intv(a), j = intv(b); *r = i < j ? -1 : i > j; }
        else *r = x < y ? -1 : x > y;
        return 0;
    }
    if (a && b && json_is_string(a) && json_is_string(b)) {
        size_t n1 = json_string_length(a), n2 = json_string_length(b);
        int c = memcmp(json_string_value(a), json_string_value(b), n1 < n2 ? n1 : n2);
        *r = c ? (c < 0 ? -1 : 1) : (n1 < n2 ? -1 : n1 > n2);
        return 0;
    }
    if (a && b && json_is_array(a) && json_is_array(b)) {
        size_t n1 = json_array_size(a), n2 = json_array_size(b);
        for (size_t i = 0; i < n1 && i < n2; i++) {
            json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
            if (tpl_py_equal(x, y)) continue;
            return tpl_py_cmp(x, y, r);
        }
        *r = n1 < n2 ? -1 : n1 > n2;
        return 0;
    }
    return -1;
}

/* UTF-8 code point boundaries of s: offsets[0..ncp] (offsets[ncp] = n). Caller frees. */
size_t *tpl_cp_offsets(const char *s, size_t n, size_t *ncp) {
    size_t *o = malloc((n + 1) * sizeof *o);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) o[k++] = i;
    o[k] = n;
    *ncp = k;
    return o;
}

/* Number of UTF-8 code points in s[0..n). */
size_t tpl_cp_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t tpl_length_of(json_t *v) {
    if (json_is_string(v)) return tpl_cp_count(json_string_value(v), json_string_length(v));
    if (json_is_array(v)) return json_array_size(v);
    if (json_is_object(v)) return json_object_size(v);
    return 0;
}

/* Items of an iterable as a new list: list -> copy, dict -> keys, string -> characters,
 * undefined -> empty. NULL (with *bad = 1) for a value that is not iterable. */
json_t *tpl_iter_list(json_t *v, int *bad) {
    *bad = 0;
    json_t *l = json_array();
    if (!l) return NULL;
    if (!v) return l;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) json_array_append(l, json_array_get(v, i));
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) json_array_append_new(l, json_string_nocheck(k));
    } else if (json_is_string(v)) {
        size_t ncp;
        const char *s = json_string_value(v);
        size_t *o = tpl_cp_offsets(s, json_string_length(v), &ncp);
        if (!o) { json_decref(l); return NULL; }
        for (size_t i = 0; i < ncp; i++) json_array_append_new(l, json_stringn_nocheck(s + o[i], o[i + 1] - o[i]));
        free(o);
    } else {
        json_decref(l);
        *bad = 1;
        return NULL;
    }
    return l;
}

/* Python slice of a list or string. */
json_t *tpl_do_slice(json_t *v, int has[3], long long x[3]) {
    size_t n;
    size_t *o = NULL;
    if (json_is_string(v)) {
        o = tpl_cp_offsets(json_string_value(v), json_string_length(v), &n);
        if (!o) return NULL;
    } else {
        n = json_array_size(v);
    }
    long long step = has[2] ? x[2] : 1, len = (long long)n, start, stop;
    if (step == 0) { free(o); return NULL; }
    if (step > 0) {
        start = has[0] ? x[0] : 0;
        stop = has[1] ? x[1] : len;
        if (start < 0) start += len;
        if (start < 0) start = 0;
        if (start > len) start = len;
        if (stop < 0) stop += len;
        if (stop < 0) stop = 0;
        if (stop > len) stop = len;
    } else {
        start = has[0] ? x[0] : len - 1;
        stop = has[1] ? x[1] : -len - 1;
        if (start < 0) start += len;
        if (start < -1) start = -1;
        if (start > len - 1) start = len - 1;
        if (has[1]) {
            if (stop < 0) stop += len;
            if (stop < -1) stop = -1;
            if (stop > len - 1) stop = len - 1;
        } else {
            stop = -1;
        }
    }
    json_t *r;
    if (o) {
        glm_charvec b = {0};
        const char *s = json_string_value(v);
        for (long long i = start; step > 0 ? i < stop : i > stop;) {
            tpl_cv_put(&b, s + o[i], o[i + 1] - o[i]);
            if (__builtin_add_overflow(i, step, &i)) break; /* a step beyond the length ends the slice */
        }
        r = tpl_cv_json(&b);
        free(o);
    } else {
        r = json_array();
        for (long long i = start; step > 0 ? i < stop : i > stop;) {
            json_array_append(r, json_array_get(v, (size_t)i));
            if (__builtin_add_overflow(i, step, &i)) break; /* a step beyond the length ends the slice */
        }
    }
    return r;
}
