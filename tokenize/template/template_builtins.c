/* tokenize/template/template_builtins.c: the template's builtins: filters (tojson, length, join, map,
 * selectattr, ...), tests (defined, none, string, divisibleby, in, ...), string and dict
 * methods (startswith, strip, split, replace, items, get, ...) and the global functions
 * raise_exception, namespace, dict and range. */
#include <ctype.h>
#include <locale.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "tokenize/template/template_internal.h"
#include "common/pyjson.h"

/* ------------------------------------------------------------------------------------------ */
/* Arguments                                                                                  */

/* Keyword-only argument `kw`, or NULL. */
static json_t *kwarg(argv_t *a, const char *kw) {
    for (size_t k = 0; k < a->nkw; k++)
        if (!strcmp(a->kwn[k], kw)) return a->kwv[k];
    return NULL;
}

/* Argument `i` (positional) or keyword `kw` (NULL: positional only); NULL when not given. */
static json_t *arg(argv_t *a, size_t i, const char *kw) {
    if (i < a->npos) return a->pos[i];
    return kw ? kwarg(a, kw) : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* String helpers                                                                             */

static json_t *strip_str(const char *s, size_t n, json_t *chars, int left, int right) {
    const char *set = chars && json_is_string(chars) ? json_string_value(chars) : NULL;
    size_t a = 0, b = n;
#define IN_SET(ch) (set ? (strchr(set, (ch)) != NULL && (ch) != 0) : is_ws(ch))
    if (left) while (a < b && IN_SET(s[a])) a++;
    if (right) while (b > a && IN_SET(s[b - 1])) b--;
#undef IN_SET
    return json_stringn_nocheck(s + a, b - a);
}

static locale_t utf8_loc;
static void utf8_locale_init(void) {
    utf8_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!utf8_loc) utf8_loc = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", (locale_t)0);
}
/* The C.UTF-8 locale for Unicode case mapping, created once (newlocale does not change the
 * process locale, so rendering stays thread-safe); (locale_t)0 where the C library lacks it,
 * and then only ASCII letters change case. */
static locale_t utf8_locale(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, utf8_locale_init);
    return utf8_loc;
}

/* Decodes one UTF-8 code point at s[*i] (invalid bytes decode as themselves, U+FFFD-free). */
static uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    unsigned char c = (unsigned char)s[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (*i + len > n) len = 1;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 31u) : len == 3 ? (c & 15u) : (c & 7u);
    for (int k = 1; k < len; k++) {
        unsigned char x = (unsigned char)s[*i + k];
        if ((x & 0xC0) != 0x80) { len = 1; cp = c; break; }
        cp = (cp << 6) | (x & 63u);
    }
    *i += len;
    return cp;
}

/* Python's str.lower/upper/capitalize/title (mode 0..3) with one-to-one Unicode case mappings
 * (towlower/towupper of C.UTF-8; Python's few one-to-many mappings such as 'ß'.upper() == 'SS'
 * are not reproduced). */
static json_t *case_str(const char *s, size_t n, int mode) {
    glm_charvec b = {0};
    locale_t loc = utf8_locale();
    int word_start = 1;
    size_t i = 0, k = 0;
    while (i < n) {
        size_t at = i;
        uint32_t cp = utf8_next(s, n, &i);
        int bad = i - at == 1 && cp >= 0x80;
        if (bad) { tpl_cv_put(&b, s + at, 1); k++; continue; }
        int up;
        if (mode == 0) up = 0;
        else if (mode == 1) up = 1;
        else if (mode == 2) up = k == 0;
        else up = word_start;
        uint32_t m;
        if (loc) m = up ? (uint32_t)towupper_l((wint_t)cp, loc) : (uint32_t)towlower_l((wint_t)cp, loc);
        else m = cp < 0x80 ? (uint32_t)(up ? toupper((int)cp) : tolower((int)cp)) : cp;
        if (mode == 3) word_start = !(loc ? iswalpha_l((wint_t)cp, loc) : isalpha((int)(cp < 0x80 ? cp : 0)));
        tpl_put_utf8(&b, m);
        k++;
    }
    return tpl_cv_json(&b);
}

static json_t *replace_str(json_t *s, json_t *old, json_t *new_, long long count) {
    const char *a = json_string_value(s), *o = json_string_value(old), *w = json_string_value(new_);
    size_t n = json_string_length(s), on = json_string_length(old), wn = json_string_length(new_);
    glm_charvec b = {0};
    size_t i = 0;
    long long done = 0;
    if (on == 0) {
        /* Python inserts `new` between every character and at both ends */
        size_t ncp;
        size_t *off = tpl_cp_offsets(a, n, &ncp);
        if (!off) return NULL;
        for (size_t k = 0; k <= ncp; k++) {
            if (count < 0 || done < count) { tpl_cv_put(&b, w, wn); done++; }
            if (k < ncp) tpl_cv_put(&b, a + off[k], off[k + 1] - off[k]);
        }
        free(off);
    } else {
        while (i < n) {
            if ((count < 0 || done < count) && i + on <= n && !memcmp(a + i, o, on)) {
                tpl_cv_put(&b, w, wn);
                i += on;
                done++;
            } else {
                tpl_cv_put(&b, a + i, 1);
                i++;
            }
        }
    }
    return tpl_cv_json(&b);
}

static json_t *split_str(const char *s, size_t n, json_t *sep, long long maxsplit) {
    json_t *r = json_array();
    if (!sep || json_is_null(sep)) {
        size_t i = 0;
        long long done = 0;
        while (1) {
            while (i < n && is_ws(s[i])) i++;
            if (i >= n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = n;
                while (e > i && is_ws(s[e - 1])) e--;
                json_array_append_new(r, json_stringn_nocheck(s + i, e - i));
                break;
            }
            size_t j = i;
            while (j < n && !is_ws(s[j])) j++;
            json_array_append_new(r, json_stringn_nocheck(s + i, j - i));
            done++;
            i = j;
        }
        return r;
    }
    const char *p = json_string_value(sep);
    size_t pn = json_string_length(sep), i = 0, st = 0;
    long long done = 0;
    while (i + pn <= n) {
        if ((maxsplit < 0 || done < maxsplit) && !memcmp(s + i, p, pn)) {
            json_array_append_new(r, json_stringn_nocheck(s + st, i - st));
            i += pn;
            st = i;
            done++;
        } else {
            i++;
        }
    }
    json_array_append_new(r, json_stringn_nocheck(s + st, n - st));
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Methods and global functions                                                               */

glm_status tpl_call_method(rctx *c, node *e, json_t *obj, const char *m, argv_t *a, json_t **out) {
    *out = NULL;
    if (obj && json_is_string(obj)) {
        const char *s = json_string_value(obj);
        size_t n = json_string_length(obj);
        json_t *x = arg(a, 0, NULL);
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            if (!x || !json_is_string(x)) return tpl_rerr(c, e->off, "str.%s() needs a string argument", m);
            size_t k = json_string_length(x);
            int r = k <= n && !memcmp(m[0] == 's' ? s : s + n - k, json_string_value(x), k);
            *out = json_boolean(r);
            return GLM_OK;
        }
        if (!strcmp(m, "strip")) { *out = strip_str(s, n, x, 1, 1); return GLM_OK; }
        if (!strcmp(m, "lstrip")) { *out = strip_str(s, n, x, 1, 0); return GLM_OK; }
        if (!strcmp(m, "rstrip")) { *out = strip_str(s, n, x, 0, 1); return GLM_OK; }
        if (!strcmp(m, "lower")) { *out = case_str(s, n, 0); return GLM_OK; }
        if (!strcmp(m, "upper")) { *out = case_str(s, n, 1); return GLM_OK; }
        if (!strcmp(m, "capitalize")) { *out = case_str(s, n, 2); return GLM_OK; }
        if (!strcmp(m, "title")) { *out = case_str(s, n, 3); return GLM_OK; }
        if (!strcmp(m, "split")) {
            json_t *sep = arg(a, 0, "sep"), *mx = arg(a, 1, "maxsplit");
            if (sep && json_is_string(sep) && json_string_length(sep) == 0) return tpl_rerr(c, e->off, "str.split(): empty separator");
            if (sep && !json_is_string(sep) && !json_is_null(sep)) return tpl_rerr(c, e->off, "str.split() needs a string separator");
            *out = split_str(s, n, sep, mx && is_intlike(mx) ? intv(mx) : -1);
            return GLM_OK;
        }
        if (!strcmp(m, "replace")) {
            json_t *y = arg(a, 1, NULL), *cnt = arg(a, 2, NULL);
            if (!x || !y || !json_is_string(x) || !json_is_string(y)) return tpl_rerr(c, e->off, "str.replace() needs two strings");
            *out = replace_str(obj, x, y, cnt && is_intlike(cnt) ? intv(cnt) : -1);
            return GLM_OK;
        }
        if (!strcmp(m, "find")) {
            if (!x || !json_is_string(x)) return tpl_rerr(c, e->off, "str.find() needs a string argument");
            const char *h = json_string_value(x);
            size_t k = json_string_length(x);
            long long r = -1;
            for (size_t i = 0; i + k <= n; i++)
                if (!memcmp(s + i, h, k)) {
                    r = (long long)tpl_cp_count(s, i);
                    break;
                }
            *out = json_integer(r);
            return GLM_OK;
        }
        return tpl_rerr(c, e->off, "strings have no method '%s' here", m);
    }
    if (obj && json_is_object(obj)) {
        const char *k;
        json_t *v;
        if (!strcmp(m, "items")) {
            json_t *r = json_array();
            json_object_foreach(obj, k, v) json_array_append_new(r, json_pack("[sO]", k, v));
            *out = r;
            return GLM_OK;
        }
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            json_t *r = json_array();
            json_object_foreach(obj, k, v) {
                if (m[0] == 'k') json_array_append_new(r, json_string_nocheck(k));
                else json_array_append(r, v);
            }
            *out = r;
            return GLM_OK;
        }
        if (!strcmp(m, "get")) {
            json_t *key = arg(a, 0, NULL), *def = arg(a, 1, "default");
            json_t *r = key && json_is_string(key) ? json_object_get(obj, json_string_value(key)) : NULL;
            if (!r) r = def ? def : json_null();
            *out = json_incref(r);
            return GLM_OK;
        }
        return tpl_rerr(c, e->off, "dicts have no method '%s' here", m);
    }
    return tpl_rerr(c, e->off, "%s has no method '%s'", tpl_tname(obj), m);
}

glm_status tpl_call_global(rctx *c, node *e, const char *name, argv_t *a, json_t **out) {
    *out = NULL;
    if (!strcmp(name, "raise_exception")) {
        glm_charvec b = {0};
        tpl_py_str(arg(a, 0, NULL), &b);
        glm_status st = tpl_rerr(c, e->off, "the template raised an error: %.*s", (int)b.n, b.v ? b.v : "");
        free(b.v);
        return st;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        json_t *o = json_object();
        json_t *init = arg(a, 0, NULL);
        if (init && json_is_object(init)) json_object_update(o, init);
        for (size_t i = 0; i < a->nkw; i++) json_object_set(o, a->kwn[i], a->kwv[i]);
        if (name[0] == 'n' && glm_vec_push(c->ns, o) != GLM_OK) { json_decref(o); return GLM_ERR_NOMEM; }
        *out = o;
        return GLM_OK;
    }
    if (!strcmp(name, "range")) {
        long long x[3] = {0, 0, 1};
        for (size_t i = 0; i < a->npos && i < 3; i++) {
            if (!is_intlike(a->pos[i])) return tpl_rerr(c, e->off, "range() needs integers");
            x[i] = intv(a->pos[i]);
        }
        if (a->npos == 1) { x[1] = x[0]; x[0] = 0; }
        if (x[2] == 0) return tpl_rerr(c, e->off, "range() step must not be zero");
        json_t *r = json_array();
        for (long long i = x[0]; x[2] > 0 ? i < x[1] : i > x[1];) {
            if (json_array_size(r) >= 1000000) { json_decref(r); return tpl_rerr(c, e->off, "range() too long"); }
            json_array_append_new(r, json_integer(i));
            if (__builtin_add_overflow(i, x[2], &i)) break;
        }
        *out = r;
        return GLM_OK;
    }
    return tpl_rerr(c, e->off, "'%s' is undefined or not callable", name);
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                      */

/* Jinja tests: returns 1/0, or -1 for an unknown test. */
int tpl_run_test(const char *t, json_t *v, argv_t *a) {
    json_t *x = arg(a, 0, NULL);
    if (!strcmp(t, "defined")) return v != NULL;
    if (!strcmp(t, "undefined")) return v == NULL;
    if (!strcmp(t, "none")) return v && json_is_null(v);
    if (!strcmp(t, "string")) return v && json_is_string(v) && !glm_json_numtext(v, NULL, NULL, NULL);
    if (!strcmp(t, "mapping")) return v && json_is_object(v);
    if (!strcmp(t, "iterable") || !strcmp(t, "sequence")) return v && (json_is_array(v) || json_is_object(v) || json_is_string(v));
    char kind;
    bool numtext = v && glm_json_numtext(v, &kind, NULL, NULL); /* a number jansson cannot hold */
    if (!strcmp(t, "number")) return v && (is_num(v) || numtext);
    if (!strcmp(t, "integer")) return v && (json_is_integer(v) || (numtext && kind == 'i'));
    if (!strcmp(t, "float")) return v && (json_is_real(v) || (numtext && kind == 'f'));
    if (!strcmp(t, "boolean")) return v && json_is_boolean(v);
    if (!strcmp(t, "true")) return v && json_is_true(v);
    if (!strcmp(t, "false")) return v && json_is_false(v);
    if (!strcmp(t, "even") || !strcmp(t, "odd")) {
        if (!v || !is_intlike(v)) return 0;
        long long r = intv(v) % 2;
        return t[0] == 'e' ? r == 0 : r != 0;
    }
    if (!strcmp(t, "divisibleby")) /* (LLONG_MIN % -1 traps: every integer is divisible by -1) */
        return v && x && is_intlike(v) && is_intlike(x) && intv(x) != 0 && (intv(x) == -1 || intv(v) % intv(x) == 0);
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==") || !strcmp(t, "sameas")) return tpl_py_equal(v, x);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !tpl_py_equal(v, x);
    int r;
    if (!strcmp(t, "lt") || !strcmp(t, "<")) return tpl_py_cmp(v, x, &r) == 0 && r < 0;
    if (!strcmp(t, "gt") || !strcmp(t, ">")) return tpl_py_cmp(v, x, &r) == 0 && r > 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return tpl_py_cmp(v, x, &r) == 0 && r <= 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return tpl_py_cmp(v, x, &r) == 0 && r >= 0;
    if (!strcmp(t, "in")) {
        if (!x) return 0;
        if (json_is_array(x)) { for (size_t i = 0; i < json_array_size(x); i++) if (tpl_py_equal(v, json_array_get(x, i))) return 1; return 0; }
        if (json_is_object(x)) return v && json_is_string(v) && json_object_get(x, json_string_value(v)) != NULL;
        if (json_is_string(x) && v && json_is_string(v)) {
            size_t n = json_string_length(x), k = json_string_length(v);
            for (size_t i = 0; i + k <= n; i++) if (!memcmp(json_string_value(x) + i, json_string_value(v), k)) return 1;
        }
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Filters                                                                                    */

static int cmp_keys(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A deep copy of v whose objects list their keys in sorted (code point) order, for
 * json.dumps(sort_keys=True). */
static json_t *sorted_copy(json_t *v) {
    if (json_is_array(v)) {
        json_t *r = json_array();
        for (size_t i = 0; i < json_array_size(v); i++) json_array_append_new(r, sorted_copy(json_array_get(v, i)));
        return r;
    }
    if (!json_is_object(v)) return json_incref(v);
    size_t n = json_object_size(v), k = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return NULL;
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) keys[k++] = key;
    qsort(keys, n, sizeof *keys, cmp_keys);
    json_t *r = json_object();
    for (size_t i = 0; i < n; i++) json_object_set_new(r, keys[i], sorted_copy(json_object_get(v, keys[i])));
    free(keys);
    return r;
}

glm_status tpl_apply_filter(rctx *c, node *e, json_t *v, argv_t *a, json_t **out) {
    const char *f = e->name;
    *out = NULL;
    if (!strcmp(f, "tojson")) {
        /* transformers: json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys) */
        json_t *ind = arg(a, 0, "indent"), *sk = arg(a, 3, "sort_keys");
        json_t *ea = kwarg(a, "ensure_ascii"), *sep = kwarg(a, "separators");
        if (!v) return tpl_rerr(c, e->off, "tojson of an undefined value");
        if ((ea && tpl_truthy(ea)) || (sep && !json_is_null(sep)))
            return tpl_rerr(c, e->off, "tojson: ensure_ascii=True and separators are not supported");
        if (ind && !json_is_null(ind) && !is_intlike(ind)) return tpl_rerr(c, e->off, "tojson: indent must be an integer");
        int indent = ind && is_intlike(ind) ? (int)intv(ind) : -1;
        json_t *sorted = sk && tpl_truthy(sk) ? sorted_copy(v) : NULL;
        char *s = glm_tojson(sorted ? sorted : v, indent);
        json_decref(sorted);
        if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
        *out = json_string_nocheck(s);
        free(s);
        return GLM_OK;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (v && !json_is_string(v) && !json_is_array(v) && !json_is_object(v))
            return tpl_rerr(c, e->off, "object of type '%s' has no length", tpl_tname(v));
        *out = json_integer((json_int_t)(v ? tpl_length_of(v) : 0));
        return GLM_OK;
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        json_t *def = arg(a, 0, "default_value"), *boolean = arg(a, 1, "boolean");
        int use_def = !v || (boolean && tpl_truthy(boolean) && !tpl_truthy(v));
        if (use_def) *out = def ? json_incref(def) : json_string("");
        else *out = json_incref(v);
        return GLM_OK;
    }
    if (!strcmp(f, "string")) { *out = tpl_str_of(v); return GLM_OK; }
    if (!strcmp(f, "safe") || !strcmp(f, "e") || !strcmp(f, "escape")) {
        /* no autoescaping in chat templates: safe/escape pass strings through as str() */
        *out = v && json_is_string(v) ? json_incref(v) : tpl_str_of(v);
        return GLM_OK;
    }
    if (!strcmp(f, "trim") || !strcmp(f, "lower") || !strcmp(f, "upper") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        json_t *s = tpl_str_of(v);
        if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
        const char *p = json_string_value(s);
        size_t n = json_string_length(s);
        if (f[0] == 't' && f[1] == 'r') *out = strip_str(p, n, arg(a, 0, "chars"), 1, 1);
        else *out = case_str(p, n, f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 3);
        json_decref(s);
        return GLM_OK;
    }
    if (!strcmp(f, "replace")) {
        json_t *s = tpl_str_of(v), *x = arg(a, 0, "old"), *y = arg(a, 1, "new"), *cnt = arg(a, 2, "count");
        if (!x || !y || !json_is_string(x) || !json_is_string(y)) { json_decref(s); return tpl_rerr(c, e->off, "replace needs two strings"); }
        *out = replace_str(s, x, y, cnt && is_intlike(cnt) ? intv(cnt) : -1);
        json_decref(s);
        return GLM_OK;
    }
    if (!strcmp(f, "items")) {
        if (!v) { *out = json_array(); return GLM_OK; }
        if (!json_is_object(v)) return tpl_rerr(c, e->off, "items needs a mapping, got %s", tpl_tname(v));
        return tpl_call_method(c, e, v, "items", a, out);
    }
    if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs")) {
        double d = 0;
        int isint = 0;
        if (v && is_num(v)) { d = numv(v); isint = is_intlike(v); }
        else if (v && json_is_string(v)) {
            /* Python's float(): no hexadecimal (strtod would read "0x10" as 16) */
            char *end;
            d = strpbrk(json_string_value(v), "xX") ? 0 : strtod(json_string_value(v), &end);
            if (!strpbrk(json_string_value(v), "xX") && *end) d = 0;
            isint = 0;
        }
        if (f[0] == 'i') {
            if (v && is_intlike(v)) {
                *out = json_integer(intv(v));
                return GLM_OK;
            }
            if (v && json_is_string(v)) { /* int('123') exactly, as Python; '42.5' goes through float */
                char *end;
                errno = 0;
                long long k = strtoll(json_string_value(v), &end, 10);
                if (!*end && end != json_string_value(v)) {
                    if (errno == ERANGE)
                        return tpl_rerr(c, e->off, "int: %.40s is outside glmtune's 64-bit integers", json_string_value(v));
                    *out = json_integer(k);
                    return GLM_OK;
                }
            }
            if (isnan(d)) d = 0; /* jinja2's int filter: int(float('nan')) raises ValueError -> the default 0 */
            if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) /* Python: OverflowError / a big int */
                return tpl_rerr(c, e->off, "int: %g is outside glmtune's 64-bit integers", d);
            *out = json_integer((json_int_t)d);
        } else if (f[0] == 'f') {
            *out = json_real(d);
        } else {
            if (!v || !is_num(v)) return tpl_rerr(c, e->off, "abs needs a number, got %s", tpl_tname(v));
            if (isint && intv(v) == LLONG_MIN) return tpl_rerr(c, e->off, "abs: integer overflow (glmtune's integers are 64-bit)");
            *out = isint ? json_integer(llabs(intv(v))) : json_real(fabs(d));
        }
        return GLM_OK;
    }
    int bad = 0;
    if (!strcmp(f, "list")) {
        *out = tpl_iter_list(v, &bad);
        return bad ? tpl_rerr(c, e->off, "list needs an iterable, got %s", tpl_tname(v)) : GLM_OK;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        json_t *l = tpl_iter_list(v, &bad);
        if (bad) return tpl_rerr(c, e->off, "%s needs a sequence, got %s", f, tpl_tname(v));
        size_t n = json_array_size(l);
        *out = n ? json_incref(json_array_get(l, f[0] == 'f' ? 0 : n - 1)) : NULL;
        json_decref(l);
        return GLM_OK;
    }
    if (!strcmp(f, "reverse")) {
        if (v && json_is_string(v)) {
            int has[3] = {0, 0, 1};
            long long x[3] = {0, 0, -1};
            *out = tpl_do_slice(v, has, x);
            return GLM_OK;
        }
        json_t *l = tpl_iter_list(v, &bad);
        if (bad) return tpl_rerr(c, e->off, "reverse needs a sequence, got %s", tpl_tname(v));
        json_t *r = json_array();
        for (size_t i = json_array_size(l); i-- > 0;) json_array_append(r, json_array_get(l, i));
        json_decref(l);
        *out = r;
        return GLM_OK;
    }
    if (!strcmp(f, "join")) {
        json_t *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        json_t *l = tpl_iter_list(v, &bad);
        if (bad) return tpl_rerr(c, e->off, "join needs a sequence, got %s", tpl_tname(v));
        glm_charvec b = {0};
        for (size_t i = 0; i < json_array_size(l); i++) {
            if (i && sep) tpl_py_str(sep, &b);
            json_t *x = json_array_get(l, i);
            if (attr && json_is_string(attr)) x = json_is_object(x) ? json_object_get(x, json_string_value(attr)) : NULL;
            tpl_py_str(x, &b);
        }
        json_decref(l);
        *out = tpl_cv_json(&b);
        return GLM_OK;
    }
    if (!strcmp(f, "map")) {
        json_t *attr = arg(a, 0, "attribute"), *def = arg(a, 1, "default");
        json_t *l = tpl_iter_list(v, &bad);
        if (bad) return tpl_rerr(c, e->off, "map needs a sequence, got %s", tpl_tname(v));
        json_t *r = json_array();
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *x = json_array_get(l, i);
            if (attr && json_is_string(attr)) {
                json_t *y = json_is_object(x) ? json_object_get(x, json_string_value(attr)) : NULL;
                if (!y) y = def;
                if (y) json_array_append(r, y);
                else json_array_append_new(r, json_null());
            } else {
                json_decref(l);
                json_decref(r);
                return tpl_rerr(c, e->off, "map supports only map(attribute='name')");
            }
        }
        json_decref(l);
        *out = r;
        return GLM_OK;
    }
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) {
        json_t *attr = arg(a, 0, NULL);
        if (!attr || !json_is_string(attr)) return tpl_rerr(c, e->off, "%s needs an attribute name", f);
        json_t *l = tpl_iter_list(v, &bad);
        if (bad) return tpl_rerr(c, e->off, "%s needs a sequence, got %s", f, tpl_tname(v));
        argv_t sub = {0};
        for (size_t i = 2; i < a->npos; i++) sub.pos[sub.npos++] = a->pos[i];
        const char *test = a->npos > 1 && json_is_string(a->pos[1]) ? json_string_value(a->pos[1]) : NULL;
        json_t *r = json_array();
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *x = json_array_get(l, i);
            json_t *y = json_is_object(x) ? json_object_get(x, json_string_value(attr)) : NULL;
            int ok = test ? tpl_run_test(test, y, &sub) : tpl_truthy(y);
            if (ok < 0) { json_decref(l); json_decref(r); return tpl_rerr(c, e->off, "unknown test '%s'", test); }
            if (ok == (f[0] == 's')) json_array_append(r, x);
        }
        json_decref(l);
        *out = r;
        return GLM_OK;
    }
    return tpl_rerr(c, e->off, "unknown filter '%s'", f);
}
