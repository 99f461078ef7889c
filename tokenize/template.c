/* tokenize/template.c: the Jinja-subset interpreter of template.h.
 *
 * Three stages: (1) the source is split into text / {{ }} / {% %} chunks with jinja2's
 * whitespace rules (trim_blocks, lstrip_blocks, '-' and '+' modifiers); (2) a recursive-descent
 * parser builds an immutable AST (expression precedence as jinja2's parser: conditional, or,
 * and, not, comparisons/in, + -, ~, * / // %, **, unary, postfix, filters/tests); (3) the
 * renderer walks the AST with a per-call context (scope frames), so one template can be
 * rendered by many threads at once. Values are jansson json_t; NULL stands for "undefined". */
#include "tokenize/template.h"

#include <ctype.h>
#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <wctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/vec.h"
#include "tokenize/tojson.h"

#define MAX_DEPTH 200 /* parse nesting and evaluation recursion limit */

/* ------------------------------------------------------------------------------------------ */
/* AST                                                                                          */

enum {
    E_CONST, E_NAME, E_LIST, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NOT, E_NEG, E_POS, E_BIN, E_AND, E_OR, E_COND,
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_BREAK, S_CONTINUE, S_BLOCK
};
enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT,
    OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN
};

typedef struct node node;
typedef GLM_VEC(node *) nodevec;
typedef GLM_VEC(char *) strvec;

struct node {
    int kind, op;
    size_t off;            /* source offset, for line:col in messages */
    node *a, *b, *c, *d;   /* operands (E_SLICE: a[b:c:d]; E_COND: b if a else c) */
    nodevec args;          /* list items; dict k,v pairs; call/filter/test arguments */
    strvec kw;             /* keyword names parallel to args (NULL = positional) */
    char *name;            /* variable, attribute, filter, test, set attribute */
    json_t *cst;           /* E_CONST */
    size_t ts, tl;         /* S_TEXT: range in the template's source */
    nodevec body, orelse;  /* statement bodies */
    strvec targets;        /* S_FOR / S_SET / S_SETBLOCK target names */
};

struct glm_template {
    char *name;
    char *src;   /* normalised source (\n newlines, one trailing newline dropped) */
    size_t len;
    nodevec all; /* every node, for freeing */
    nodevec body;
};

static void line_col(const char *src, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && src[i]; i++) {
        if (src[i] == '\n') { l++; c = 1; } else { c++; }
    }
    *line = l;
    *col = c;
}

/* ------------------------------------------------------------------------------------------ */
/* Parser                                                                                       */

enum { T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_END };

typedef struct {
    int type;
    size_t s, e;   /* source range */
    char *str;     /* T_STR: unescaped value; T_NAME/T_OP: the text */
    double f;
    long long i;
} tok;

enum { C_TEXT, C_VAR, C_BLOCK };
typedef struct {
    int type;
    size_t s, e;   /* text range, or the tag's inner content range */
    size_t off;    /* tag start */
} chunk;

typedef struct {
    glm_template *t;
    const char *src;
    GLM_VEC(chunk) chunks;
    size_t ci;                 /* next chunk */
    GLM_VEC(tok) toks;         /* tokens of the current tag */
    size_t ti;
    int depth;
    glm_status st;
} parser;

static glm_status perr(parser *p, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static glm_status perr(parser *p, size_t off, const char *fmt, ...) {
    if (p->st != GLM_OK) return p->st; /* keep the first message */
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(p->src, off, &line, &col);
    p->st = glm_err(GLM_ERR_FORMAT, "%s:%d:%d: %s", p->t->name, line, col, msg);
    return p->st;
}

static node *mk(parser *p, int kind, size_t off) {
    node *n = calloc(1, sizeof *n);
    if (!n || glm_vec_push(p->t->all, n) != GLM_OK) {
        free(n);
        p->st = glm_err(GLM_ERR_NOMEM, "%s: out of memory while parsing the template", p->t->name);
        return NULL;
    }
    n->kind = kind;
    n->off = off;
    return n;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Finds the end of a {{ }} or {% %} tag starting its content at `i`: the closing "}}"/"%}"
 * outside strings and brackets. Returns the offset of the closing delimiter or (size_t)-1. */
static size_t find_tag_end(const char *s, size_t n, size_t i, char close, size_t *open_str) {
    int depth = 0;
    while (i < n) {
        char ch = s[i];
        if (ch == '\'' || ch == '"') {
            size_t at = i;
            i++;
            while (i < n && s[i] != ch) i += (s[i] == '\\' && i + 1 < n) ? 2 : 1;
            if (i >= n) { *open_str = at; return (size_t)-1; }
            i++;
            continue;
        }
        if (depth == 0 && ch == close && i + 1 < n && s[i + 1] == '}') return i;
        if (ch == '(' || ch == '[' || ch == '{') depth++;
        else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) depth--;
        i++;
    }
    return (size_t)-1;
}

/* Stage 1: chunks with jinja2's whitespace handling. */
static glm_status split_chunks(parser *p) {
    const char *s = p->src;
    size_t n = p->t->len, pos = 0;
    int line_starting = 1;
    while (pos <= n) {
        size_t idx = pos;
        while (idx + 1 < n && !(s[idx] == '{' && (s[idx + 1] == '{' || s[idx + 1] == '%' || s[idx + 1] == '#'))) idx++;
        if (idx + 1 >= n) idx = n;
        size_t ts = pos, te = idx;
        if (idx < n) {
            char kind = s[idx + 1], mod = idx + 2 < n ? s[idx + 2] : 0;
            if (mod == '-') {
                while (te > ts && is_ws(s[te - 1])) te--;
            } else if ((kind == '%' || kind == '#') && mod != '+') {
                /* lstrip_blocks: drop spaces/tabs between the line start and the tag */
                size_t l = te;
                while (l > ts && s[l - 1] != '\n') l--;
                int has_nl = l > ts;
                if (has_nl || line_starting) {
                    size_t k = l;
                    while (k < te && (s[k] == ' ' || s[k] == '\t')) k++;
                    if (k == te) te = l;
                }
            }
        }
        if (te > ts) {
            chunk c = {C_TEXT, ts, te, ts};
            if (glm_vec_push(p->chunks, c) != GLM_OK) return p->st = GLM_ERR_NOMEM;
        }
        if (idx >= n) break;
        char kind = s[idx + 1];
        size_t cs = idx + 2;
        if (cs < n && (s[cs] == '-' || s[cs] == '+')) cs++;
        size_t close;
        if (kind == '#') {
            const char *q = strstr(s + cs, "#}");
            if (!q) return perr(p, idx, "comment {# is never closed; hint: end it with #}");
            close = (size_t)(q - s);
        } else {
            size_t open_str = (size_t)-1;
            close = find_tag_end(s, n, cs, kind == '{' ? '}' : '%', &open_str);
            if (close == (size_t)-1 && open_str != (size_t)-1)
                return perr(p, open_str, "string literal is never closed; hint: add the closing %c", s[open_str]);
            if (close == (size_t)-1)
                return perr(p, idx, "%s is never closed; hint: end it with %s",
                            kind == '{' ? "{{" : "{%", kind == '{' ? "}}" : "%}");
        }
        size_t ce = close;
        char endmod = 0;
        if (ce > cs && (s[ce - 1] == '-' || s[ce - 1] == '+')) {
            endmod = s[ce - 1];
            ce--;
        }
        pos = close + 2;
        if (endmod == '-') {
            while (pos < n && is_ws(s[pos])) pos++;
            line_starting = pos > close + 2 && s[pos - 1] == '\n';
        } else if (kind != '{' && endmod != '+' && pos < n && s[pos] == '\n') {
            pos++; /* trim_blocks */
            line_starting = 1;
        } else {
            line_starting = 0;
        }
        if (kind != '#') {
            chunk c = {kind == '{' ? C_VAR : C_BLOCK, cs, ce, idx};
            if (glm_vec_push(p->chunks, c) != GLM_OK) return p->st = GLM_ERR_NOMEM;
        }
        if (pos >= n) break;
    }
    return GLM_OK;
}

static void free_toks(parser *p) {
    for (size_t i = 0; i < p->toks.n; i++) free(p->toks.v[i].str);
    p->toks.n = 0;
    p->ti = 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void put_utf8(glm_charvec *v, uint32_t cp) {
    char b[4];
    int n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) { b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 63)); b[2] = (char)(0x80 | (cp & 63)); n = 3; }
    else { b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 63)); b[2] = (char)(0x80 | ((cp >> 6) & 63)); b[3] = (char)(0x80 | (cp & 63)); n = 4; }
    for (int i = 0; i < n; i++) glm_vec_push(*v, b[i]);
}

/* Tokenises a tag's content [s, e). */
static glm_status lex(parser *p, size_t s, size_t e) {
    free_toks(p);
    const char *src = p->src;
    size_t i = s;
    static const char *ops2[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
    while (1) {
        while (i < e && is_ws(src[i])) i++;
        tok t = {0};
        t.s = i;
        if (i >= e) {
            t.type = T_END;
            t.e = i;
            if (glm_vec_push(p->toks, t) != GLM_OK) return p->st = GLM_ERR_NOMEM;
            return GLM_OK;
        }
        char c = src[i];
        if (isalpha((unsigned char)c) || c == '_') {
            while (i < e && (isalnum((unsigned char)src[i]) || src[i] == '_')) i++;
            t.type = T_NAME;
            t.str = strndup(src + t.s, i - t.s);
        } else if (isdigit((unsigned char)c)) {
            int isf = 0;
            while (i < e && (isdigit((unsigned char)src[i]) || src[i] == '_')) i++;
            if (i + 1 < e && src[i] == '.' && isdigit((unsigned char)src[i + 1])) {
                isf = 1;
                i++;
                while (i < e && (isdigit((unsigned char)src[i]) || src[i] == '_')) i++;
            }
            if (i < e && (src[i] == 'e' || src[i] == 'E')) {
                size_t k = i + 1;
                if (k < e && (src[k] == '+' || src[k] == '-')) k++;
                if (k < e && isdigit((unsigned char)src[k])) {
                    isf = 1;
                    i = k;
                    while (i < e && isdigit((unsigned char)src[i])) i++;
                }
            }
            char buf[64];
            size_t m = 0;
            for (size_t k = t.s; k < i && m < sizeof buf - 1; k++)
                if (src[k] != '_') buf[m++] = src[k];
            buf[m] = 0;
            if (isf) { t.type = T_FLOAT; t.f = strtod(buf, NULL); }
            else { t.type = T_INT; t.i = strtoll(buf, NULL, 10); }
        } else if (c == '\'' || c == '"') {
            glm_charvec v = {0};
            i++;
            while (i < e && src[i] != c) {
                char ch = src[i];
                if (ch == '\\' && i + 1 < e) {
                    char x = src[i + 1];
                    i += 2;
                    switch (x) {
                    case 'n': glm_vec_push(v, '\n'); break;
                    case 't': glm_vec_push(v, '\t'); break;
                    case 'r': glm_vec_push(v, '\r'); break;
                    case 'b': glm_vec_push(v, '\b'); break;
                    case 'f': glm_vec_push(v, '\f'); break;
                    case '0': glm_vec_push(v, '\0'); break;
                    case '\\': glm_vec_push(v, '\\'); break;
                    case '\'': glm_vec_push(v, '\''); break;
                    case '"': glm_vec_push(v, '"'); break;
                    case '\n': break;
                    case 'x': case 'u': case 'U': {
                        int nd = x == 'x' ? 2 : x == 'u' ? 4 : 8;
                        uint32_t cp = 0;
                        int k;
                        for (k = 0; k < nd && i < e && hexval(src[i]) >= 0; k++, i++) cp = cp * 16 + (uint32_t)hexval(src[i]);
                        if (k != nd || cp > 0x10FFFF) {
                            free(v.v);
                            return perr(p, i, "bad \\%c escape in a string literal", x);
                        }
                        put_utf8(&v, cp);
                        break;
                    }
                    default: glm_vec_push(v, '\\'); glm_vec_push(v, x);
                    }
                } else {
                    glm_vec_push(v, ch);
                    i++;
                }
            }
            if (i >= e) {
                free(v.v);
                return perr(p, t.s, "string literal is never closed; hint: add the closing %c", c);
            }
            i++;
            glm_vec_push(v, '\0');
            if (!v.v) return p->st = glm_err(GLM_ERR_NOMEM, "out of memory");
            t.type = T_STR;
            t.str = v.v;
            t.i = (long long)v.n - 1; /* length (may contain NUL) */
        } else {
            t.type = T_OP;
            int len = 0;
            for (int k = 0; ops2[k]; k++)
                if (i + 1 < e && src[i] == ops2[k][0] && src[i + 1] == ops2[k][1]) len = 2;
            if (!len) {
                if (!strchr("+-*/%~<>=()[]{},.:|", c))
                    return perr(p, i, "unexpected character '%c' in an expression", c);
                len = 1;
            }
            i += len;
            t.str = strndup(src + t.s, len);
        }
        t.e = i;
        if (glm_vec_push(p->toks, t) != GLM_OK) { free(t.str); return p->st = GLM_ERR_NOMEM; }
    }
}

static tok *cur(parser *p) { return &p->toks.v[p->ti]; }
static int is_op(parser *p, const char *op) { tok *t = cur(p); return t->type == T_OP && !strcmp(t->str, op); }
static int is_name(parser *p, const char *nm) { tok *t = cur(p); return t->type == T_NAME && !strcmp(t->str, nm); }
static int is_name2(parser *p, const char *nm) {
    return p->ti + 1 < p->toks.n && p->toks.v[p->ti + 1].type == T_NAME && !strcmp(p->toks.v[p->ti + 1].str, nm);
}
static void adv(parser *p) { if (cur(p)->type != T_END) p->ti++; }
static const char *tokdesc(parser *p) { tok *t = cur(p); return t->type == T_END ? "end of tag" : t->str ? t->str : "literal"; }
static int expect_op(parser *p, const char *op) {
    if (is_op(p, op)) { adv(p); return 1; }
    perr(p, cur(p)->s, "expected '%s', found '%s'", op, tokdesc(p));
    return 0;
}

static node *p_expr(parser *p);
static node *p_or(parser *p);
static node *p_unary(parser *p, int with_filter);

/* Arguments "(a, b, k=v)" after the '(' was consumed. */
static int p_args(parser *p, node *n) {
    while (!is_op(p, ")")) {
        char *kw = NULL;
        if (cur(p)->type == T_NAME && p->ti + 1 < p->toks.n && p->toks.v[p->ti + 1].type == T_OP &&
            !strcmp(p->toks.v[p->ti + 1].str, "=")) {
            kw = strdup(cur(p)->str);
            adv(p);
            adv(p);
        }
        node *a = p_expr(p);
        if (!a || glm_vec_push(n->args, a) != GLM_OK || glm_vec_push(n->kw, kw) != GLM_OK) {
            free(kw);
            if (p->st == GLM_OK) p->st = GLM_ERR_NOMEM;
            return 0;
        }
        if (!is_op(p, ",")) break;
        adv(p);
    }
    return expect_op(p, ")");
}

static node *p_primary(parser *p) {
    tok *t = cur(p);
    node *n = NULL;
    if (++p->depth > MAX_DEPTH) { perr(p, t->s, "expression nested too deeply"); return NULL; }
    switch (t->type) {
    case T_STR: {
        /* adjacent string literals concatenate, as in jinja2 */
        glm_charvec v = {0};
        size_t off = t->s;
        while (cur(p)->type == T_STR) {
            tok *q = cur(p);
            glm_vec_reserve(v, (size_t)q->i + 1);
            if (!v.v) break;
            memcpy(v.v + v.n, q->str, (size_t)q->i);
            v.n += (size_t)q->i;
            adv(p);
        }
        n = mk(p, E_CONST, off);
        if (n) n->cst = json_stringn_nocheck(v.v ? v.v : "", v.n);
        free(v.v);
        break;
    }
    case T_INT: n = mk(p, E_CONST, t->s); if (n) n->cst = json_integer(t->i); adv(p); break;
    case T_FLOAT: n = mk(p, E_CONST, t->s); if (n) n->cst = json_real(t->f); adv(p); break;
    case T_NAME: {
        const char *s = t->str;
        if (!strcmp(s, "true") || !strcmp(s, "True")) { n = mk(p, E_CONST, t->s); if (n) n->cst = json_true(); }
        else if (!strcmp(s, "false") || !strcmp(s, "False")) { n = mk(p, E_CONST, t->s); if (n) n->cst = json_false(); }
        else if (!strcmp(s, "none") || !strcmp(s, "None")) { n = mk(p, E_CONST, t->s); if (n) n->cst = json_null(); }
        else { n = mk(p, E_NAME, t->s); if (n) n->name = strdup(s); }
        adv(p);
        break;
    }
    case T_OP:
        if (is_op(p, "(")) {
            size_t off = t->s;
            adv(p);
            if (is_op(p, ")")) { adv(p); n = mk(p, E_LIST, off); break; }
            node *e = p_expr(p);
            if (!e) return NULL;
            if (is_op(p, ",")) { /* tuple: a list value */
                n = mk(p, E_LIST, off);
                if (!n || glm_vec_push(n->args, e) != GLM_OK) return NULL;
                while (is_op(p, ",")) {
                    adv(p);
                    if (is_op(p, ")")) break;
                    node *x = p_expr(p);
                    if (!x || glm_vec_push(n->args, x) != GLM_OK) return NULL;
                }
            } else {
                n = e;
            }
            if (!expect_op(p, ")")) return NULL;
        } else if (is_op(p, "[")) {
            n = mk(p, E_LIST, t->s);
            adv(p);
            while (n && !is_op(p, "]")) {
                node *x = p_expr(p);
                if (!x || glm_vec_push(n->args, x) != GLM_OK) return NULL;
                if (!is_op(p, ",")) break;
                adv(p);
            }
            if (!expect_op(p, "]")) return NULL;
        } else if (is_op(p, "{")) {
            n = mk(p, E_DICT, t->s);
            adv(p);
            while (n && !is_op(p, "}")) {
                node *k = p_expr(p);
                if (!k || !expect_op(p, ":")) return NULL;
                node *v = p_expr(p);
                if (!v || glm_vec_push(n->args, k) != GLM_OK || glm_vec_push(n->args, v) != GLM_OK) return NULL;
                if (!is_op(p, ",")) break;
                adv(p);
            }
            if (!expect_op(p, "}")) return NULL;
        } else {
            perr(p, t->s, "unexpected '%s' in an expression", t->str);
            return NULL;
        }
        break;
    default:
        perr(p, t->s, "expected an expression, found %s", tokdesc(p));
        return NULL;
    }
    if (!n && p->st == GLM_OK) p->st = glm_err(GLM_ERR_NOMEM, "out of memory");
    return n;
}

static node *p_postfix(parser *p, node *n) {
    while (n) {
        tok *t = cur(p);
        if (is_op(p, ".")) {
            adv(p);
            tok *nm = cur(p);
            node *a = mk(p, E_ATTR, t->s);
            if (!a) return NULL;
            a->a = n;
            if (nm->type == T_NAME) a->name = strdup(nm->str);
            else if (nm->type == T_INT) { a->kind = E_ITEM; a->b = mk(p, E_CONST, nm->s); if (!a->b) return NULL; a->b->cst = json_integer(nm->i); }
            else { perr(p, nm->s, "expected an attribute name after '.'"); return NULL; }
            adv(p);
            n = a;
        } else if (is_op(p, "[")) {
            adv(p);
            node *x[3] = {NULL, NULL, NULL};
            int slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(p, ":") && !is_op(p, "]")) {
                    x[k] = p_expr(p);
                    if (!x[k]) return NULL;
                }
                if (k < 2 && is_op(p, ":")) { slice = 1; adv(p); } else break;
            }
            if (!expect_op(p, "]")) return NULL;
            node *a = mk(p, slice ? E_SLICE : E_ITEM, t->s);
            if (!a) return NULL;
            a->a = n;
            a->b = x[0];
            a->c = x[1];
            a->d = x[2];
            if (!slice && !x[0]) { perr(p, t->s, "empty subscript []"); return NULL; }
            n = a;
        } else if (is_op(p, "(")) {
            adv(p);
            node *a = mk(p, E_CALL, t->s);
            if (!a) return NULL;
            a->a = n;
            if (!p_args(p, a)) return NULL;
            n = a;
        } else {
            break;
        }
    }
    return n;
}

static node *p_filters(parser *p, node *n) {
    while (n) {
        tok *t = cur(p);
        if (is_op(p, "|")) {
            adv(p);
            if (cur(p)->type != T_NAME) { perr(p, cur(p)->s, "expected a filter name after '|'"); return NULL; }
            node *f = mk(p, E_FILTER, cur(p)->s);
            if (!f) return NULL;
            f->a = n;
            f->name = strdup(cur(p)->str);
            adv(p);
            if (is_op(p, "(")) { adv(p); if (!p_args(p, f)) return NULL; }
            n = f;
        } else if (is_name(p, "is")) {
            adv(p);
            node *f = mk(p, E_TEST, t->s);
            if (!f) return NULL;
            f->a = n;
            if (is_name(p, "not")) { f->op = 1; adv(p); }
            tok *nm = cur(p);
            if (nm->type == T_NAME) f->name = strdup(nm->str);
            else if (nm->type == T_OP && (!strcmp(nm->str, "==") || !strcmp(nm->str, "!=") ||
                                          !strcmp(nm->str, "<") || !strcmp(nm->str, ">") ||
                                          !strcmp(nm->str, "<=") || !strcmp(nm->str, ">=")))
                f->name = strdup(nm->str);
            else { perr(p, nm->s, "expected a test name after 'is'"); return NULL; }
            adv(p);
            if (is_op(p, "(")) {
                adv(p);
                if (!p_args(p, f)) return NULL;
            } else if (cur(p)->type == T_STR || cur(p)->type == T_INT || cur(p)->type == T_FLOAT ||
                       (cur(p)->type == T_NAME && !is_name(p, "and") && !is_name(p, "or") &&
                        !is_name(p, "else") && !is_name(p, "if") && !is_name(p, "is") && !is_name(p, "in") && !is_name(p, "not"))) {
                node *arg = p_unary(p, 0); /* `is divisibleby 3`, `is sameas none` */
                if (!arg || glm_vec_push(f->args, arg) != GLM_OK || glm_vec_push(f->kw, NULL) != GLM_OK) return NULL;
            }
            n = f;
        } else if (is_op(p, "(")) {
            n = p_postfix(p, n);
        } else {
            break;
        }
    }
    return n;
}

static node *p_unary(parser *p, int with_filter) {
    tok *t = cur(p);
    node *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        int neg = is_op(p, "-");
        adv(p);
        n = mk(p, neg ? E_NEG : E_POS, t->s);
        if (!n) return NULL;
        n->a = p_unary(p, 0);
        if (!n->a) return NULL;
    } else {
        n = p_primary(p);
    }
    n = p_postfix(p, n);
    if (with_filter) n = p_filters(p, n);
    return n;
}

static node *bin(parser *p, int op, size_t off, node *l, node *r) {
    if (!l || !r) return NULL;
    node *n = mk(p, E_BIN, off);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static node *p_pow(parser *p) {
    node *n = p_unary(p, 1);
    while (n && is_op(p, "**")) { size_t o = cur(p)->s; adv(p); n = bin(p, OP_POW, o, n, p_unary(p, 1)); }
    return n;
}
static node *p_math2(parser *p) {
    node *n = p_pow(p);
    while (n) {
        int op = is_op(p, "*") ? OP_MUL : is_op(p, "/") ? OP_DIV : is_op(p, "//") ? OP_FDIV : is_op(p, "%") ? OP_MOD : -1;
        if (op < 0) break;
        size_t o = cur(p)->s;
        adv(p);
        n = bin(p, op, o, n, p_pow(p));
    }
    return n;
}
static node *p_concat(parser *p) {
    node *n = p_math2(p);
    while (n && is_op(p, "~")) { size_t o = cur(p)->s; adv(p); n = bin(p, OP_CAT, o, n, p_math2(p)); }
    return n;
}
static node *p_math1(parser *p) {
    node *n = p_concat(p);
    while (n) {
        int op = is_op(p, "+") ? OP_ADD : is_op(p, "-") ? OP_SUB : -1;
        if (op < 0) break;
        size_t o = cur(p)->s;
        adv(p);
        n = bin(p, op, o, n, p_concat(p));
    }
    return n;
}
static node *p_compare(parser *p) {
    node *n = p_math1(p), *last = n;
    int chained = 0;
    while (n) {
        int op = is_op(p, "==") ? OP_EQ : is_op(p, "!=") ? OP_NE : is_op(p, "<") ? OP_LT : is_op(p, ">") ? OP_GT
               : is_op(p, "<=") ? OP_LE : is_op(p, ">=") ? OP_GE : is_name(p, "in") ? OP_IN
               : (is_name(p, "not") && is_name2(p, "in")) ? OP_NOTIN : -1;
        if (op < 0) break;
        size_t o = cur(p)->s;
        adv(p);
        if (op == OP_NOTIN) adv(p);
        node *rhs = p_math1(p);
        if (!rhs) return NULL;
        if (n->kind == E_BIN && n->op >= OP_EQ && chained) {
            /* a < b < c means (a < b) and (b < c), as in Python (b is evaluated twice) */
            node *and_ = mk(p, E_AND, o);
            if (!and_) return NULL;
            and_->a = n;
            and_->b = bin(p, op, o, last, rhs);
            n = and_->b ? and_ : NULL;
        } else if (n->kind == E_AND && chained) {
            node *and_ = mk(p, E_AND, o);
            if (!and_) return NULL;
            and_->a = n;
            and_->b = bin(p, op, o, last, rhs);
            n = and_->b ? and_ : NULL;
        } else {
            n = bin(p, op, o, n, rhs);
        }
        last = rhs;
        chained = 1;
    }
    return n;
}
static node *p_not(parser *p) {
    if (is_name(p, "not")) {
        node *n = mk(p, E_NOT, cur(p)->s);
        adv(p);
        if (n) n->a = p_not(p);
        return n && n->a ? n : NULL;
    }
    return p_compare(p);
}
static node *p_and(parser *p) {
    node *n = p_not(p);
    while (n && is_name(p, "and")) {
        node *a = mk(p, E_AND, cur(p)->s);
        adv(p);
        if (!a) return NULL;
        a->a = n;
        a->b = p_not(p);
        n = a->b ? a : NULL;
    }
    return n;
}
static node *p_or(parser *p) {
    node *n = p_and(p);
    while (n && is_name(p, "or")) {
        node *a = mk(p, E_OR, cur(p)->s);
        adv(p);
        if (!a) return NULL;
        a->a = n;
        a->b = p_and(p);
        n = a->b ? a : NULL;
    }
    return n;
}
static node *p_expr(parser *p) {
    int depth = p->depth;
    node *n = p_or(p);
    while (n && is_name(p, "if")) {
        node *c = mk(p, E_COND, cur(p)->s);
        adv(p);
        if (!c) return NULL;
        c->b = n;
        c->a = p_or(p);
        if (!c->a) return NULL;
        if (is_name(p, "else")) {
            adv(p);
            c->c = p_expr(p);
            if (!c->c) return NULL;
        }
        n = c;
    }
    p->depth = depth;
    return n;
}

static int expect_end(parser *p) {
    if (cur(p)->type == T_END) return 1;
    perr(p, cur(p)->s, "unexpected '%s'; hint: the tag should end here", tokdesc(p));
    return 0;
}

/* Names "a" or "a, b" (for/set targets). */
static int p_targets(parser *p, strvec *out) {
    do {
        if (cur(p)->type != T_NAME) { perr(p, cur(p)->s, "expected a variable name, found '%s'", tokdesc(p)); return 0; }
        char *s = strdup(cur(p)->str);
        if (!s || glm_vec_push(*out, s) != GLM_OK) { free(s); p->st = GLM_ERR_NOMEM; return 0; }
        adv(p);
        if (!is_op(p, ",")) break;
        adv(p);
    } while (1);
    return 1;
}

/* Parses statements until a block tag whose keyword is in `ends` (NULL-terminated); returns
 * the index of that keyword, or -1 at the end of the template (error if ends were expected). */
static int p_body(parser *p, nodevec *body, const char *const *ends, size_t open_off, const char *open) {
    while (p->ci < p->chunks.n) {
        chunk *c = &p->chunks.v[p->ci++];
        if (c->type == C_TEXT) {
            node *n = mk(p, S_TEXT, c->s);
            if (!n) return -2;
            n->ts = c->s;
            n->tl = c->e - c->s;
            if (glm_vec_push(*body, n) != GLM_OK) return -2;
            continue;
        }
        if (lex(p, c->s, c->e) != GLM_OK) return -2;
        if (c->type == C_VAR) {
            if (cur(p)->type == T_END) { perr(p, c->off, "empty {{ }}"); return -2; }
            node *n = mk(p, S_OUT, c->off);
            if (!n || !(n->a = p_expr(p)) || !expect_end(p) || glm_vec_push(*body, n) != GLM_OK) return -2;
            continue;
        }
        tok *kw = cur(p);
        if (kw->type != T_NAME) { perr(p, kw->s, "expected a tag name after {%%"); return -2; }
        if (ends)
            for (int k = 0; ends[k]; k++)
                if (!strcmp(kw->str, ends[k])) { adv(p); return k; }
        const char *k = kw->str;
        size_t off = c->off;
        node *n = NULL;
        if (!strcmp(k, "if")) {
            static const char *const ife[] = {"elif", "else", "endif", NULL};
            adv(p);
            n = mk(p, S_IF, off);
            if (!n || !(n->a = p_expr(p)) || !expect_end(p)) return -2;
            node *at = n;
            while (1) {
                int r = p_body(p, &at->body, ife, off, "{% if %}");
                if (r < 0) return -2;
                if (r == 0) { /* elif: a nested if in the else branch */
                    node *e = mk(p, S_IF, p->chunks.v[p->ci - 1].off);
                    if (!e || !(e->a = p_expr(p)) || !expect_end(p) || glm_vec_push(at->orelse, e) != GLM_OK) return -2;
                    at = e;
                    continue;
                }
                if (r == 1) {
                    static const char *const ende[] = {"endif", NULL};
                    if (!expect_end(p)) return -2;
                    if (p_body(p, &at->orelse, ende, off, "{% if %}") < 0) return -2;
                }
                if (!expect_end(p)) return -2;
                break;
            }
        } else if (!strcmp(k, "for")) {
            static const char *const fe[] = {"else", "endfor", NULL};
            adv(p);
            n = mk(p, S_FOR, off);
            if (!n || !p_targets(p, &n->targets)) return -2;
            if (!is_name(p, "in")) { perr(p, cur(p)->s, "expected 'in' in {%% for %%}"); return -2; }
            adv(p);
            if (!(n->a = p_or(p))) return -2; /* p_or: a trailing `if` is the loop filter */
            if (is_name(p, "if")) { adv(p); if (!(n->b = p_expr(p))) return -2; }
            if (is_name(p, "recursive")) { perr(p, cur(p)->s, "recursive loops are not supported"); return -2; }
            if (!expect_end(p)) return -2;
            int r = p_body(p, &n->body, fe, off, "{% for %}");
            if (r < 0) return -2;
            if (r == 0) {
                static const char *const ende[] = {"endfor", NULL};
                if (!expect_end(p) || p_body(p, &n->orelse, ende, off, "{% for %}") < 0) return -2;
            }
            if (!expect_end(p)) return -2;
        } else if (!strcmp(k, "set")) {
            adv(p);
            n = mk(p, S_SET, off);
            if (!n || !p_targets(p, &n->targets)) return -2;
            if (n->targets.n == 1 && is_op(p, ".")) {
                adv(p);
                if (cur(p)->type != T_NAME) { perr(p, cur(p)->s, "expected an attribute name"); return -2; }
                n->name = strdup(cur(p)->str);
                adv(p);
            }
            if (is_op(p, "=")) {
                adv(p);
                node *e = p_expr(p);
                if (!e) return -2;
                if (is_op(p, ",")) { /* set a, b = x, y */
                    node *l = mk(p, E_LIST, e->off);
                    if (!l || glm_vec_push(l->args, e) != GLM_OK) return -2;
                    while (is_op(p, ",")) {
                        adv(p);
                        node *x = p_expr(p);
                        if (!x || glm_vec_push(l->args, x) != GLM_OK) return -2;
                    }
                    e = l;
                }
                n->a = e;
                if (!expect_end(p)) return -2;
            } else if (cur(p)->type == T_END && n->targets.n == 1 && !n->name) {
                static const char *const ende[] = {"endset", NULL};
                n->kind = S_SETBLOCK;
                if (p_body(p, &n->body, ende, off, "{% set %}") < 0 || !expect_end(p)) return -2;
            } else {
                perr(p, cur(p)->s, "expected '=' in {%% set %%}");
                return -2;
            }
        } else if (!strcmp(k, "break") || !strcmp(k, "continue")) {
            adv(p);
            n = mk(p, k[0] == 'b' ? S_BREAK : S_CONTINUE, off);
            if (!n || !expect_end(p)) return -2;
        } else if (!strcmp(k, "generation")) {
            static const char *const ende[] = {"endgeneration", NULL};
            adv(p);
            n = mk(p, S_BLOCK, off);
            if (!n || !expect_end(p) || p_body(p, &n->body, ende, off, "{% generation %}") < 0 || !expect_end(p)) return -2;
        } else if (!strcmp(k, "macro") || !strcmp(k, "call") || !strcmp(k, "filter") || !strcmp(k, "include") ||
                   !strcmp(k, "extends") || !strcmp(k, "block") || !strcmp(k, "import") || !strcmp(k, "from") ||
                   !strcmp(k, "raw") || !strcmp(k, "with") || !strcmp(k, "autoescape")) {
            perr(p, kw->s, "{%% %s %%} is not supported by glmtune's template engine; hint: rewrite the template without it", k);
            return -2;
        } else {
            perr(p, kw->s, "unknown or unexpected tag {%% %s %%}%s%s", k, open ? " inside " : "", open ? open : "");
            return -2;
        }
        if (glm_vec_push(*body, n) != GLM_OK) return -2;
    }
    if (ends) {
        int k = 0;
        while (ends[k + 1]) k++;
        perr(p, open_off, "%s is never closed; hint: add {%% %s %%}", open, ends[k]);
        return -2;
    }
    return -1;
}

static void free_node(node *n) {
    free(n->args.v);
    for (size_t i = 0; i < n->kw.n; i++) free(n->kw.v[i]);
    free(n->kw.v);
    free(n->name);
    if (n->cst) json_decref(n->cst);
    free(n->body.v);
    free(n->orelse.v);
    for (size_t i = 0; i < n->targets.n; i++) free(n->targets.v[i]);
    free(n->targets.v);
    free(n);
}

void glm_template_free(glm_template *t) {
    if (!t) return;
    for (size_t i = 0; i < t->all.n; i++) free_node(t->all.v[i]);
    free(t->all.v);
    free(t->body.v);
    free(t->name);
    free(t->src);
    free(t);
}

glm_status glm_template_parse(const char *src, const char *name, glm_template **out) {
    if (!src || !out) return glm_err(GLM_ERR_ARG, "glm_template_parse: NULL argument");
    glm_template *t = calloc(1, sizeof *t);
    if (!t) return glm_err(GLM_ERR_NOMEM, "out of memory");
    t->name = strdup(name ? name : "template");
    size_t n = strlen(src);
    t->src = malloc(n + 1);
    if (!t->name || !t->src) { glm_template_free(t); return glm_err(GLM_ERR_NOMEM, "out of memory"); }
    /* newlines: \r\n and \r -> \n; drop one trailing newline (keep_trailing_newline=False) */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            t->src[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            t->src[m++] = src[i];
        }
    }
    if (m > 0 && t->src[m - 1] == '\n') m--;
    t->src[m] = 0;
    t->len = m;
    parser p = {0};
    p.t = t;
    p.src = t->src;
    glm_status st = split_chunks(&p);
    if (st == GLM_OK) {
        p_body(&p, &t->body, NULL, 0, NULL);
        st = p.st;
    }
    free_toks(&p);
    free(p.toks.v);
    free(p.chunks.v);
    if (st != GLM_OK) {
        if (st == GLM_ERR_NOMEM && !*glm_errmsg()) glm_err(st, "out of memory while parsing a template");
        glm_template_free(t);
        return st;
    }
    *out = t;
    return GLM_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Output                                                                                       */

static glm_status seg_add(glm_tpl_output *o, const char *s, size_t n, int literal) {
    if (n == 0) return GLM_OK;
    if (literal && o->n && o->seg[o->n - 1].literal) {
        glm_tpl_segment *g = &o->seg[o->n - 1];
        char *x = realloc(g->text, g->len + n + 1);
        if (!x) return glm_err(GLM_ERR_NOMEM, "out of memory rendering a template");
        memcpy(x + g->len, s, n);
        g->len += n;
        x[g->len] = 0;
        g->text = x;
        return GLM_OK;
    }
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 16;
        glm_tpl_segment *x = realloc(o->seg, nc * sizeof *x);
        if (!x) return glm_err(GLM_ERR_NOMEM, "out of memory rendering a template");
        o->seg = x;
        o->cap = nc;
    }
    char *x = malloc(n + 1);
    if (!x) return glm_err(GLM_ERR_NOMEM, "out of memory rendering a template");
    memcpy(x, s, n);
    x[n] = 0;
    o->seg[o->n++] = (glm_tpl_segment){x, n, literal};
    return GLM_OK;
}

/* Moves all segments of `src` to the end of `dst` (src is left empty). */
static glm_status seg_move(glm_tpl_output *dst, glm_tpl_output *src) {
    glm_status st = GLM_OK;
    for (size_t i = 0; i < src->n && st == GLM_OK; i++)
        st = seg_add(dst, src->seg[i].text, src->seg[i].len, src->seg[i].literal);
    glm_tpl_output_free(src);
    return st;
}

void glm_tpl_output_free(glm_tpl_output *o) {
    if (!o) return;
    for (size_t i = 0; i < o->n; i++) free(o->seg[i].text);
    free(o->seg);
    o->seg = NULL;
    o->n = o->cap = 0;
}

char *glm_tpl_output_join(const glm_tpl_output *o, size_t *len) {
    size_t n = 0;
    for (size_t i = 0; i < o->n; i++) n += o->seg[i].len;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < o->n; i++) {
        memcpy(s + k, o->seg[i].text, o->seg[i].len);
        k += o->seg[i].len;
    }
    s[k] = 0;
    if (len) *len = n;
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                       */

typedef struct {
    const glm_template *t;
    GLM_VEC(json_t *) frames; /* frames[0] = vars (borrowed), the rest owned objects */
    GLM_VEC(json_t *) ns;     /* namespace() objects created by this render (borrowed) */
    int loopctl;              /* 1 break, 2 continue */
    int depth;
} rctx;

static glm_status rerr(rctx *c, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static glm_status rerr(rctx *c, size_t off, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(c->t->src, off, &line, &col);
    return glm_err(GLM_ERR_FORMAT, "%s:%d:%d: %s", c->t->name, line, col, msg);
}

static const char *tname(json_t *v) {
    if (!v) return "undefined";
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

static int truthy(json_t *v) {
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

static int is_num(json_t *v) { return v && (json_is_number(v) || json_is_boolean(v)); }
static int is_intlike(json_t *v) { return v && (json_is_integer(v) || json_is_boolean(v)); }
static double numv(json_t *v) { return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_number_value(v); }
static long long intv(json_t *v) { return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_integer_value(v); }

static void cv_put(glm_charvec *b, const char *s, size_t n) {
    if (glm_vec_reserve(*b, n + 1) != GLM_OK) return;
    memcpy(b->v + b->n, s, n);
    b->n += n;
}
static void cv_puts(glm_charvec *b, const char *s) { cv_put(b, s, strlen(s)); }

static void py_repr(json_t *v, glm_charvec *b);

/* Python str() of a value (undefined -> ""). */
static void py_str(json_t *v, glm_charvec *b) {
    char num[40];
    if (!v) return;
    switch (json_typeof(v)) {
    case JSON_STRING: cv_put(b, json_string_value(v), json_string_length(v)); break;
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
    cv_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '\\') cv_puts(b, "\\\\");
        else if (ch == (unsigned char)q) { e[0] = '\\'; e[1] = q; cv_put(b, e, 2); }
        else if (ch == '\n') cv_puts(b, "\\n");
        else if (ch == '\r') cv_puts(b, "\\r");
        else if (ch == '\t') cv_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) { snprintf(e, sizeof e, "\\x%02x", ch); cv_puts(b, e); }
        else cv_put(b, (const char *)&ch, 1);
    }
    cv_put(b, &q, 1);
}

/* Python repr() of a value: strings quoted, lists/dicts as Python prints them. */
static void py_repr(json_t *v, glm_charvec *b) {
    if (!v) return;
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
    py_str(v, b);
}

static json_t *str_of(json_t *v) {
    glm_charvec b = {0};
    py_str(v, &b);
    json_t *r = json_stringn_nocheck(b.v ? b.v : "", b.n);
    free(b.v);
    return r;
}

static int py_equal(json_t *a, json_t *b) {
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
            if (!py_equal(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !py_equal(x, y)) return 0;
        }
        return 1;
    }
    return 1; /* null */
}

/* Python ordering: returns 0 ok (*r = -1/0/1) or -1 when the types cannot be ordered. */
static int py_cmp(json_t *a, json_t *b, int *r) {
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
            if (py_equal(x, y)) continue;
            return py_cmp(x, y, r);
        }
        *r = n1 < n2 ? -1 : n1 > n2;
        return 0;
    }
    return -1;
}

/* UTF-8 code point boundaries of s: offsets[0..ncp] (offsets[ncp] = n). Caller frees. */
static size_t *cp_offsets(const char *s, size_t n, size_t *ncp) {
    size_t *o = malloc((n + 1) * sizeof *o);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) o[k++] = i;
    o[k] = n;
    *ncp = k;
    return o;
}

static size_t length_of(json_t *v) {
    if (json_is_string(v)) {
        size_t k = 0, n = json_string_length(v);
        const char *s = json_string_value(v);
        for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
        return k;
    }
    if (json_is_array(v)) return json_array_size(v);
    if (json_is_object(v)) return json_object_size(v);
    return 0;
}

/* Items of an iterable as a new list: list -> copy, dict -> keys, string -> characters,
 * undefined -> empty. NULL (with *bad = 1) for a value that is not iterable. */
static json_t *iter_list(json_t *v, int *bad) {
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
        size_t *o = cp_offsets(s, json_string_length(v), &ncp);
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
static json_t *do_slice(json_t *v, int has[3], long long x[3]) {
    size_t n;
    size_t *o = NULL;
    if (json_is_string(v)) {
        o = cp_offsets(json_string_value(v), json_string_length(v), &n);
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
        for (long long i = start; step > 0 ? i < stop : i > stop; i += step) cv_put(&b, s + o[i], o[i + 1] - o[i]);
        r = json_stringn_nocheck(b.v ? b.v : "", b.n);
        free(b.v);
        free(o);
    } else {
        r = json_array();
        for (long long i = start; step > 0 ? i < stop : i > stop; i += step) json_array_append(r, json_array_get(v, (size_t)i));
    }
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Evaluation                                                                                   */

static glm_status eval_p(rctx *c, node *e, json_t **out, glm_tpl_output *pc);
static glm_status eval(rctx *c, node *e, json_t **out) { return eval_p(c, e, out, NULL); }
static glm_status render_body(rctx *c, nodevec *body, glm_tpl_output *out);

static json_t *lookup(rctx *c, const char *name) {
    for (size_t i = c->frames.n; i-- > 0;) {
        json_t *v = c->frames.v[i] ? json_object_get(c->frames.v[i], name) : NULL;
        if (v) return v;
    }
    return NULL;
}

/* Evaluated call arguments. */
typedef struct {
    json_t *pos[8];
    size_t npos;
    json_t *kwv[8];
    const char *kwn[8];
    size_t nkw;
} argv_t;

static void args_free(argv_t *a) {
    for (size_t i = 0; i < a->npos; i++) json_decref(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) json_decref(a->kwv[i]);
}

static glm_status eval_args(rctx *c, node *n, argv_t *a) {
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < n->args.n; i++) {
        json_t *v;
        glm_status st = eval(c, n->args.v[i], &v);
        if (st != GLM_OK) { args_free(a); return st; }
        if (n->kw.v[i]) {
            if (a->nkw == 8) { json_decref(v); args_free(a); return rerr(c, n->off, "too many keyword arguments"); }
            a->kwn[a->nkw] = n->kw.v[i];
            a->kwv[a->nkw++] = v;
        } else {
            if (a->npos == 8) { json_decref(v); args_free(a); return rerr(c, n->off, "too many arguments"); }
            a->pos[a->npos++] = v;
        }
    }
    return GLM_OK;
}

/* Argument `i` (positional) or keyword `kw`; *found says whether it was given. */
static json_t *arg(argv_t *a, size_t i, const char *kw, int *found) {
    if (i < a->npos) { if (found) *found = 1; return a->pos[i]; }
    for (size_t k = 0; k < a->nkw; k++)
        if (kw && !strcmp(a->kwn[k], kw)) { if (found) *found = 1; return a->kwv[k]; }
    if (found) *found = 0;
    return NULL;
}

/* Keyword-only argument `kw`, or NULL. */
static json_t *kwarg(argv_t *a, const char *kw) {
    for (size_t k = 0; k < a->nkw; k++)
        if (!strcmp(a->kwn[k], kw)) return a->kwv[k];
    return NULL;
}

static int ws_char(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }

static json_t *strip_str(const char *s, size_t n, json_t *chars, int left, int right) {
    const char *set = chars && json_is_string(chars) ? json_string_value(chars) : NULL;
    size_t a = 0, b = n;
#define IN_SET(ch) (set ? (strchr(set, (ch)) != NULL && (ch) != 0) : ws_char(ch))
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
        if (bad) { cv_put(&b, s + at, 1); k++; continue; }
        int up;
        if (mode == 0) up = 0;
        else if (mode == 1) up = 1;
        else if (mode == 2) up = k == 0;
        else up = word_start;
        uint32_t m;
        if (loc) m = up ? (uint32_t)towupper_l((wint_t)cp, loc) : (uint32_t)towlower_l((wint_t)cp, loc);
        else m = cp < 0x80 ? (uint32_t)(up ? toupper((int)cp) : tolower((int)cp)) : cp;
        if (mode == 3) word_start = !(loc ? iswalpha_l((wint_t)cp, loc) : isalpha((int)(cp < 0x80 ? cp : 0)));
        put_utf8(&b, m);
        k++;
    }
    json_t *r = json_stringn_nocheck(b.v ? b.v : "", b.n);
    free(b.v);
    return r;
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
        size_t *off = cp_offsets(a, n, &ncp);
        if (!off) return NULL;
        for (size_t k = 0; k <= ncp; k++) {
            if (count < 0 || done < count) { cv_put(&b, w, wn); done++; }
            if (k < ncp) cv_put(&b, a + off[k], off[k + 1] - off[k]);
        }
        free(off);
    } else {
        while (i < n) {
            if ((count < 0 || done < count) && i + on <= n && !memcmp(a + i, o, on)) {
                cv_put(&b, w, wn);
                i += on;
                done++;
            } else {
                cv_put(&b, a + i, 1);
                i++;
            }
        }
    }
    json_t *r = json_stringn_nocheck(b.v ? b.v : "", b.n);
    free(b.v);
    return r;
}

static json_t *split_str(const char *s, size_t n, json_t *sep, long long maxsplit) {
    json_t *r = json_array();
    if (!sep || json_is_null(sep)) {
        size_t i = 0;
        long long done = 0;
        while (1) {
            while (i < n && ws_char(s[i])) i++;
            if (i >= n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = n;
                while (e > i && ws_char(s[e - 1])) e--;
                json_array_append_new(r, json_stringn_nocheck(s + i, e - i));
                break;
            }
            size_t j = i;
            while (j < n && !ws_char(s[j])) j++;
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

static glm_status call_method(rctx *c, node *e, json_t *obj, const char *m, argv_t *a, json_t **out) {
    *out = NULL;
    if (obj && json_is_string(obj)) {
        const char *s = json_string_value(obj);
        size_t n = json_string_length(obj);
        json_t *x = arg(a, 0, NULL, NULL);
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            if (!x || !json_is_string(x)) return rerr(c, e->off, "str.%s() needs a string argument", m);
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
            json_t *sep = arg(a, 0, "sep", NULL), *mx = arg(a, 1, "maxsplit", NULL);
            if (sep && json_is_string(sep) && json_string_length(sep) == 0) return rerr(c, e->off, "str.split(): empty separator");
            if (sep && !json_is_string(sep) && !json_is_null(sep)) return rerr(c, e->off, "str.split() needs a string separator");
            *out = split_str(s, n, sep, mx && is_intlike(mx) ? intv(mx) : -1);
            return GLM_OK;
        }
        if (!strcmp(m, "replace")) {
            json_t *y = arg(a, 1, NULL, NULL), *cnt = arg(a, 2, NULL, NULL);
            if (!x || !y || !json_is_string(x) || !json_is_string(y)) return rerr(c, e->off, "str.replace() needs two strings");
            *out = replace_str(obj, x, y, cnt && is_intlike(cnt) ? intv(cnt) : -1);
            return GLM_OK;
        }
        if (!strcmp(m, "find")) {
            if (!x || !json_is_string(x)) return rerr(c, e->off, "str.find() needs a string argument");
            const char *h = json_string_value(x);
            size_t k = json_string_length(x);
            long long r = -1;
            for (size_t i = 0; i + k <= n; i++)
                if (!memcmp(s + i, h, k)) {
                    r = 0;
                    for (size_t j = 0; j < i; j++) r += ((unsigned char)s[j] & 0xC0) != 0x80;
                    break;
                }
            *out = json_integer(r);
            return GLM_OK;
        }
        return rerr(c, e->off, "strings have no method '%s' here", m);
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
            json_t *key = arg(a, 0, NULL, NULL), *def = arg(a, 1, "default", NULL);
            json_t *r = key && json_is_string(key) ? json_object_get(obj, json_string_value(key)) : NULL;
            if (!r) r = def ? def : json_null();
            *out = json_incref(r);
            return GLM_OK;
        }
        return rerr(c, e->off, "dicts have no method '%s' here", m);
    }
    return rerr(c, e->off, "%s has no method '%s'", tname(obj), m);
}

static glm_status call_global(rctx *c, node *e, const char *name, argv_t *a, json_t **out) {
    *out = NULL;
    if (!strcmp(name, "raise_exception")) {
        glm_charvec b = {0};
        py_str(arg(a, 0, NULL, NULL), &b);
        glm_status st = rerr(c, e->off, "the template raised an error: %.*s", (int)b.n, b.v ? b.v : "");
        free(b.v);
        return st;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        json_t *o = json_object();
        json_t *init = arg(a, 0, NULL, NULL);
        if (init && json_is_object(init)) json_object_update(o, init);
        for (size_t i = 0; i < a->nkw; i++) json_object_set(o, a->kwn[i], a->kwv[i]);
        if (name[0] == 'n' && glm_vec_push(c->ns, o) != GLM_OK) { json_decref(o); return GLM_ERR_NOMEM; }
        *out = o;
        return GLM_OK;
    }
    if (!strcmp(name, "range")) {
        long long x[3] = {0, 0, 1};
        for (size_t i = 0; i < a->npos && i < 3; i++) {
            if (!is_intlike(a->pos[i])) return rerr(c, e->off, "range() needs integers");
            x[i] = intv(a->pos[i]);
        }
        if (a->npos == 1) { x[1] = x[0]; x[0] = 0; }
        if (x[2] == 0) return rerr(c, e->off, "range() step must not be zero");
        json_t *r = json_array();
        for (long long i = x[0]; x[2] > 0 ? i < x[1] : i > x[1];) {
            if (json_array_size(r) >= 1000000) { json_decref(r); return rerr(c, e->off, "range() too long"); }
            json_array_append_new(r, json_integer(i));
            if (__builtin_add_overflow(i, x[2], &i)) break;
        }
        *out = r;
        return GLM_OK;
    }
    return rerr(c, e->off, "'%s' is undefined or not callable", name);
}

/* Jinja tests: returns 1/0, or -1 for an unknown test. */
static int run_test(const char *t, json_t *v, argv_t *a) {
    json_t *x = arg(a, 0, NULL, NULL);
    if (!strcmp(t, "defined")) return v != NULL;
    if (!strcmp(t, "undefined")) return v == NULL;
    if (!strcmp(t, "none")) return v && json_is_null(v);
    if (!strcmp(t, "string")) return v && json_is_string(v);
    if (!strcmp(t, "mapping")) return v && json_is_object(v);
    if (!strcmp(t, "iterable")) return v && (json_is_array(v) || json_is_object(v) || json_is_string(v));
    if (!strcmp(t, "sequence")) return v && (json_is_array(v) || json_is_object(v) || json_is_string(v));
    if (!strcmp(t, "number")) return v && is_num(v);
    if (!strcmp(t, "integer")) return v && json_is_integer(v);
    if (!strcmp(t, "float")) return v && json_is_real(v);
    if (!strcmp(t, "boolean")) return v && json_is_boolean(v);
    if (!strcmp(t, "true")) return v && json_is_true(v);
    if (!strcmp(t, "false")) return v && json_is_false(v);
    if (!strcmp(t, "even") || !strcmp(t, "odd")) {
        if (!v || !is_intlike(v)) return 0;
        long long r = intv(v) % 2;
        return t[0] == 'e' ? r == 0 : r != 0;
    }
    if (!strcmp(t, "divisibleby")) return v && x && is_intlike(v) && is_intlike(x) && intv(x) != 0 && intv(v) % intv(x) == 0;
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==") || !strcmp(t, "sameas")) return py_equal(v, x);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !py_equal(v, x);
    int r;
    if (!strcmp(t, "lt") || !strcmp(t, "<")) return py_cmp(v, x, &r) == 0 && r < 0;
    if (!strcmp(t, "gt") || !strcmp(t, ">")) return py_cmp(v, x, &r) == 0 && r > 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return py_cmp(v, x, &r) == 0 && r <= 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return py_cmp(v, x, &r) == 0 && r >= 0;
    if (!strcmp(t, "in")) {
        if (!x) return 0;
        if (json_is_array(x)) { for (size_t i = 0; i < json_array_size(x); i++) if (py_equal(v, json_array_get(x, i))) return 1; return 0; }
        if (json_is_object(x)) return v && json_is_string(v) && json_object_get(x, json_string_value(v)) != NULL;
        if (json_is_string(x) && v && json_is_string(v)) {
            size_t n = json_string_length(x), k = json_string_length(v);
            for (size_t i = 0; i + k <= n; i++) if (!memcmp(json_string_value(x) + i, json_string_value(v), k)) return 1;
        }
        return 0;
    }
    return -1;
}

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

static glm_status apply_filter(rctx *c, node *e, json_t *v, argv_t *a, json_t **out) {
    const char *f = e->name;
    *out = NULL;
    if (!strcmp(f, "tojson")) {
        /* transformers: json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys) */
        json_t *ind = arg(a, 0, "indent", NULL), *sk = arg(a, 3, "sort_keys", NULL);
        json_t *ea = kwarg(a, "ensure_ascii"), *sep = kwarg(a, "separators");
        if (!v) return rerr(c, e->off, "tojson of an undefined value");
        if ((ea && truthy(ea)) || (sep && !json_is_null(sep)))
            return rerr(c, e->off, "tojson: ensure_ascii=True and separators are not supported");
        if (ind && !json_is_null(ind) && !is_intlike(ind)) return rerr(c, e->off, "tojson: indent must be an integer");
        int indent = ind && is_intlike(ind) ? (int)intv(ind) : -1;
        json_t *sorted = sk && truthy(sk) ? sorted_copy(v) : NULL;
        char *s = glm_tojson(sorted ? sorted : v, indent);
        json_decref(sorted);
        if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
        *out = json_string_nocheck(s);
        free(s);
        return GLM_OK;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (v && !json_is_string(v) && !json_is_array(v) && !json_is_object(v))
            return rerr(c, e->off, "object of type '%s' has no length", tname(v));
        *out = json_integer((json_int_t)(v ? length_of(v) : 0));
        return GLM_OK;
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        json_t *def = arg(a, 0, "default_value", NULL), *boolean = arg(a, 1, "boolean", NULL);
        int use_def = !v || (boolean && truthy(boolean) && !truthy(v));
        if (use_def) *out = def ? json_incref(def) : json_string("");
        else *out = json_incref(v);
        return GLM_OK;
    }
    if (!strcmp(f, "string")) { *out = str_of(v); return GLM_OK; }
    if (!strcmp(f, "safe") || !strcmp(f, "e") || !strcmp(f, "escape")) {
        /* no autoescaping in chat templates: safe/escape pass strings through as str() */
        *out = v && json_is_string(v) ? json_incref(v) : str_of(v);
        return GLM_OK;
    }
    if (!strcmp(f, "trim") || !strcmp(f, "lower") || !strcmp(f, "upper") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        json_t *s = str_of(v);
        if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
        const char *p = json_string_value(s);
        size_t n = json_string_length(s);
        if (f[0] == 't' && f[1] == 'r') *out = strip_str(p, n, arg(a, 0, "chars", NULL), 1, 1);
        else *out = case_str(p, n, f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 3);
        json_decref(s);
        return GLM_OK;
    }
    if (!strcmp(f, "replace")) {
        json_t *s = str_of(v), *x = arg(a, 0, "old", NULL), *y = arg(a, 1, "new", NULL), *cnt = arg(a, 2, "count", NULL);
        if (!x || !y || !json_is_string(x) || !json_is_string(y)) { json_decref(s); return rerr(c, e->off, "replace needs two strings"); }
        *out = replace_str(s, x, y, cnt && is_intlike(cnt) ? intv(cnt) : -1);
        json_decref(s);
        return GLM_OK;
    }
    if (!strcmp(f, "items")) {
        if (!v) { *out = json_array(); return GLM_OK; }
        if (!json_is_object(v)) return rerr(c, e->off, "items needs a mapping, got %s", tname(v));
        return call_method(c, e, v, "items", a, out);
    }
    if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs")) {
        double d = 0;
        int isint = 0;
        if (v && is_num(v)) { d = numv(v); isint = is_intlike(v); }
        else if (v && json_is_string(v)) { char *end; d = strtod(json_string_value(v), &end); if (*end) d = 0; isint = 0; }
        if (f[0] == 'i') *out = json_integer(v && is_intlike(v) ? intv(v) : (json_int_t)d);
        else if (f[0] == 'f') *out = json_real(d);
        else {
            if (!v || !is_num(v)) return rerr(c, e->off, "abs needs a number, got %s", tname(v));
            *out = isint ? json_integer(llabs(intv(v))) : json_real(fabs(d));
        }
        return GLM_OK;
    }
    int bad = 0;
    if (!strcmp(f, "list")) {
        *out = iter_list(v, &bad);
        return bad ? rerr(c, e->off, "list needs an iterable, got %s", tname(v)) : GLM_OK;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        json_t *l = iter_list(v, &bad);
        if (bad) return rerr(c, e->off, "%s needs a sequence, got %s", f, tname(v));
        size_t n = json_array_size(l);
        *out = n ? json_incref(json_array_get(l, f[0] == 'f' ? 0 : n - 1)) : NULL;
        json_decref(l);
        return GLM_OK;
    }
    if (!strcmp(f, "reverse")) {
        if (v && json_is_string(v)) {
            int has[3] = {0, 0, 1};
            long long x[3] = {0, 0, -1};
            *out = do_slice(v, has, x);
            return GLM_OK;
        }
        json_t *l = iter_list(v, &bad);
        if (bad) return rerr(c, e->off, "reverse needs a sequence, got %s", tname(v));
        json_t *r = json_array();
        for (size_t i = json_array_size(l); i-- > 0;) json_array_append(r, json_array_get(l, i));
        json_decref(l);
        *out = r;
        return GLM_OK;
    }
    if (!strcmp(f, "join")) {
        json_t *sep = arg(a, 0, "d", NULL), *attr = arg(a, 1, "attribute", NULL);
        json_t *l = iter_list(v, &bad);
        if (bad) return rerr(c, e->off, "join needs a sequence, got %s", tname(v));
        glm_charvec b = {0};
        for (size_t i = 0; i < json_array_size(l); i++) {
            if (i && sep) py_str(sep, &b);
            json_t *x = json_array_get(l, i);
            if (attr && json_is_string(attr)) x = json_is_object(x) ? json_object_get(x, json_string_value(attr)) : NULL;
            py_str(x, &b);
        }
        json_decref(l);
        *out = json_stringn_nocheck(b.v ? b.v : "", b.n);
        free(b.v);
        return GLM_OK;
    }
    if (!strcmp(f, "map")) {
        json_t *attr = arg(a, 0, "attribute", NULL), *def = arg(a, 1, "default", NULL);
        json_t *l = iter_list(v, &bad);
        if (bad) return rerr(c, e->off, "map needs a sequence, got %s", tname(v));
        json_t *r = json_array();
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *x = json_array_get(l, i), *y = NULL;
            if (attr && json_is_string(attr)) {
                y = json_is_object(x) ? json_object_get(x, json_string_value(attr)) : NULL;
                if (!y) y = def;
                if (y) json_array_append(r, y);
                else json_array_append_new(r, json_null());
            } else if (attr && json_is_string(attr) == 0 && a->npos > 0 && json_is_string(a->pos[0])) {
                json_array_append(r, x);
            } else {
                json_decref(l);
                json_decref(r);
                return rerr(c, e->off, "map supports only map(attribute='name')");
            }
        }
        json_decref(l);
        *out = r;
        return GLM_OK;
    }
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) {
        json_t *attr = arg(a, 0, NULL, NULL);
        if (!attr || !json_is_string(attr)) return rerr(c, e->off, "%s needs an attribute name", f);
        json_t *l = iter_list(v, &bad);
        if (bad) return rerr(c, e->off, "%s needs a sequence, got %s", f, tname(v));
        argv_t sub = {0};
        for (size_t i = 2; i < a->npos; i++) sub.pos[sub.npos++] = a->pos[i];
        const char *test = a->npos > 1 && json_is_string(a->pos[1]) ? json_string_value(a->pos[1]) : NULL;
        json_t *r = json_array();
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *x = json_array_get(l, i);
            json_t *y = json_is_object(x) ? json_object_get(x, json_string_value(attr)) : NULL;
            int ok = test ? run_test(test, y, &sub) : truthy(y);
            if (ok < 0) { json_decref(l); json_decref(r); return rerr(c, e->off, "unknown test '%s'", test); }
            if (ok == (f[0] == 's')) json_array_append(r, x);
        }
        json_decref(l);
        *out = r;
        return GLM_OK;
    }
    return rerr(c, e->off, "unknown filter '%s'", f);
}

static glm_status arith(rctx *c, node *e, json_t *l, json_t *r, json_t **out) {
    int op = e->op;
    *out = NULL;
    if (op == OP_CAT) {
        glm_charvec b = {0};
        py_str(l, &b);
        py_str(r, &b);
        *out = json_stringn_nocheck(b.v ? b.v : "", b.n);
        free(b.v);
        return GLM_OK;
    }
    if (op >= OP_EQ) {
        int res, cr;
        switch (op) {
        case OP_EQ: res = py_equal(l, r); break;
        case OP_NE: res = !py_equal(l, r); break;
        case OP_IN: case OP_NOTIN: {
            if (r && !json_is_array(r) && !json_is_object(r) && !json_is_string(r))
                return rerr(c, e->off, "'in' needs a list, dict or string on the right, got %s", tname(r));
            if (r && json_is_string(r) && !(l && json_is_string(l)))
                return rerr(c, e->off, "'in <string>' needs a string on the left, got %s", tname(l));
            argv_t a = {0};
            a.pos[0] = r;
            a.npos = 1;
            res = run_test("in", l, &a);
            if (op == OP_NOTIN) res = !res;
            break;
        }
        default:
            if (py_cmp(l, r, &cr) != 0)
                return rerr(c, e->off, "cannot compare %s with %s", tname(l), tname(r));
            res = op == OP_LT ? cr < 0 : op == OP_GT ? cr > 0 : op == OP_LE ? cr <= 0 : cr >= 0;
        }
        *out = json_boolean(res);
        return GLM_OK;
    }
    if (op == OP_ADD && l && r && json_is_string(l) && json_is_string(r)) {
        glm_charvec b = {0};
        py_str(l, &b);
        py_str(r, &b);
        *out = json_stringn_nocheck(b.v ? b.v : "", b.n);
        free(b.v);
        return GLM_OK;
    }
    if (op == OP_ADD && l && r && json_is_array(l) && json_is_array(r)) {
        *out = json_copy(l);
        json_array_extend(*out, r);
        return GLM_OK;
    }
    if (op == OP_MUL && l && r && (json_is_string(l) || json_is_array(l)) && is_intlike(r)) {
        long long k = intv(r), unit = (long long)(json_is_string(l) ? json_string_length(l) + 1 : json_array_size(l) + 1);
        if (k > 0 && k > 100000000 / unit)
            return rerr(c, e->off, "repetition too large");
        if (json_is_string(l)) {
            glm_charvec b = {0};
            for (long long i = 0; i < k; i++) py_str(l, &b);
            *out = json_stringn_nocheck(b.v ? b.v : "", b.n);
            free(b.v);
        } else {
            *out = json_array();
            for (long long i = 0; i < k; i++) json_array_extend(*out, l);
        }
        return GLM_OK;
    }
    if (!is_num(l) || !is_num(r))
        return rerr(c, e->off, "unsupported operand types for arithmetic: %s and %s", tname(l), tname(r));
    int ints = is_intlike(l) && is_intlike(r);
    double x = numv(l), y = numv(r);
    long long i = ints ? intv(l) : 0, j = ints ? intv(r) : 0;
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL:
        if (ints) {
            long long z;
            int of = op == OP_ADD ? __builtin_add_overflow(i, j, &z) : op == OP_SUB ? __builtin_sub_overflow(i, j, &z)
                                                                    : __builtin_mul_overflow(i, j, &z);
            if (of) return rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
            *out = json_integer(z);
        } else {
            *out = json_real(op == OP_ADD ? x + y : op == OP_SUB ? x - y : x * y);
        }
        break;
    case OP_DIV:
        if (y == 0) return rerr(c, e->off, "division by zero");
        *out = json_real(x / y);
        break;
    case OP_FDIV: case OP_MOD:
        if (y == 0) return rerr(c, e->off, "division by zero");
        if (ints) {
            if (i == LLONG_MIN && j == -1) return rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
            long long q = i / j, m = i % j;
            if (m != 0 && ((m < 0) != (j < 0))) { q--; m += j; }
            *out = json_integer(op == OP_FDIV ? q : m);
        } else {
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            *out = json_real(op == OP_FDIV ? floor(x / y) : m);
        }
        break;
    case OP_POW:
        if (ints && j >= 0) {
            long long p = 1;
            for (long long k = 0; k < j; k++) {
                if (__builtin_mul_overflow(p, i, &p)) return rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
                if (p == 0 || p == 1) break;
            }
            if (p == 1 && i == -1 && j % 2) p = -1;
            *out = json_integer(p);
        } else {
            *out = json_real(pow(x, y));
        }
        break;
    default: return rerr(c, e->off, "internal: bad operator");
    }
    return GLM_OK;
}

/* Evaluates `e` into *out (a new reference; NULL = undefined). When pc is not NULL, it also
 * appends segments whose concatenation equals str(*out), marking string literals of the
 * template as literal (so `'<|' + role + '|>'` yields literal, data, literal). */
static glm_status eval_p(rctx *c, node *e, json_t **out, glm_tpl_output *pc) {
    glm_status st = GLM_OK;
    json_t *l = NULL, *r = NULL, *v = NULL;
    *out = NULL;
    if (++c->depth > MAX_DEPTH * 2) { c->depth--; return rerr(c, e->off, "expression nested too deeply"); }
    switch (e->kind) {
    case E_CONST:
        v = json_is_string(e->cst) ? json_stringn_nocheck(json_string_value(e->cst), json_string_length(e->cst)) : json_deep_copy(e->cst);
        if (pc && json_is_string(v)) {
            st = seg_add(pc, json_string_value(v), json_string_length(v), 1);
            pc = NULL;
        }
        break;
    case E_NAME:
        v = lookup(c, e->name);
        if (v) json_incref(v);
        break;
    case E_LIST:
        v = json_array();
        for (size_t i = 0; i < e->args.n && st == GLM_OK; i++) {
            st = eval(c, e->args.v[i], &l);
            if (st == GLM_OK) json_array_append_new(v, l ? l : json_null());
            l = NULL;
        }
        break;
    case E_DICT:
        v = json_object();
        for (size_t i = 0; i + 1 < e->args.n && st == GLM_OK; i += 2) {
            st = eval(c, e->args.v[i], &l);
            if (st != GLM_OK) break;
            if (!l || !json_is_string(l)) { st = rerr(c, e->args.v[i]->off, "dict keys must be strings here, got %s", tname(l)); json_decref(l); break; }
            st = eval(c, e->args.v[i + 1], &r);
            if (st == GLM_OK) json_object_set_new(v, json_string_value(l), r ? r : json_null());
            json_decref(l);
        }
        l = r = NULL;
        break;
    case E_ATTR:
    case E_ITEM: {
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (!l) {
            st = rerr(c, e->off, "%s%s%s is undefined, so it has no %s", e->a->kind == E_NAME ? "'" : "",
                      e->a->kind == E_NAME ? e->a->name : "the value", e->a->kind == E_NAME ? "'" : "",
                      e->kind == E_ATTR ? "attributes" : "items");
            break;
        }
        if (e->kind == E_ATTR) {
            if (json_is_object(l)) v = json_object_get(l, e->name);
            if (v) json_incref(v);
            break;
        }
        st = eval(c, e->b, &r);
        if (st != GLM_OK) break;
        if (json_is_object(l) && r && json_is_string(r)) {
            v = json_object_get(l, json_string_value(r));
            if (v) json_incref(v);
        } else if ((json_is_array(l) || json_is_string(l)) && r && is_intlike(r)) {
            long long k = intv(r), n = (long long)(json_is_array(l) ? json_array_size(l) : length_of(l));
            if (k < 0) k += n;
            if (k >= 0 && k < n) {
                if (json_is_array(l)) v = json_incref(json_array_get(l, (size_t)k));
                else {
                    int has[3] = {1, 1, 0};
                    long long x[3] = {k, k + 1, 1};
                    v = do_slice(l, has, x);
                }
            }
        }
        break;
    }
    case E_SLICE: {
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (!l || !(json_is_array(l) || json_is_string(l))) { st = rerr(c, e->off, "cannot slice %s", tname(l)); break; }
        int has[3] = {0, 0, 0};
        long long x[3] = {0, 0, 1};
        node *part[3] = {e->b, e->c, e->d};
        for (int k = 0; k < 3 && st == GLM_OK; k++) {
            if (!part[k]) continue;
            st = eval(c, part[k], &r);
            if (st != GLM_OK) break;
            if (r && !json_is_null(r)) {
                if (!is_intlike(r)) st = rerr(c, part[k]->off, "slice indices must be integers, got %s", tname(r));
                else { has[k] = 1; x[k] = intv(r); }
            }
            json_decref(r);
            r = NULL;
        }
        if (st == GLM_OK) {
            if (has[2] && x[2] == 0) st = rerr(c, e->off, "slice step cannot be zero");
            else v = do_slice(l, has, x);
        }
        break;
    }
    case E_CALL: {
        argv_t a;
        node *f = e->a;
        if (f->kind == E_ATTR) {
            st = eval(c, f->a, &l);
            if (st != GLM_OK) break;
            if (!l) { st = rerr(c, f->off, "cannot call .%s() on an undefined value", f->name); break; }
            if ((st = eval_args(c, e, &a)) != GLM_OK) break;
            st = call_method(c, e, l, f->name, &a, &v);
            args_free(&a);
        } else if (f->kind == E_NAME) {
            if (lookup(c, f->name)) { st = rerr(c, e->off, "'%s' is not callable", f->name); break; }
            if ((st = eval_args(c, e, &a)) != GLM_OK) break;
            st = call_global(c, e, f->name, &a, &v);
            args_free(&a);
        } else {
            st = rerr(c, e->off, "this value is not callable");
        }
        break;
    }
    case E_FILTER: {
        argv_t a;
        st = eval(c, e->a, &l);
        if (st != GLM_OK || (st = eval_args(c, e, &a)) != GLM_OK) break;
        st = apply_filter(c, e, l, &a, &v);
        args_free(&a);
        break;
    }
    case E_TEST: {
        argv_t a;
        st = eval(c, e->a, &l);
        if (st != GLM_OK || (st = eval_args(c, e, &a)) != GLM_OK) break;
        int res = run_test(e->name, l, &a);
        args_free(&a);
        if (res < 0) st = rerr(c, e->off, "unknown test '%s'", e->name);
        else v = json_boolean(e->op ? !res : res);
        break;
    }
    case E_NOT:
        st = eval(c, e->a, &l);
        if (st == GLM_OK) v = json_boolean(!truthy(l));
        break;
    case E_NEG:
    case E_POS:
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (!is_num(l)) { st = rerr(c, e->off, "bad operand type for unary %c: %s", e->kind == E_NEG ? '-' : '+', tname(l)); break; }
        if (e->kind == E_POS) v = is_intlike(l) ? json_integer(intv(l)) : json_real(numv(l));
        else if (is_intlike(l) && intv(l) == LLONG_MIN) st = rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
        else v = is_intlike(l) ? json_integer(-intv(l)) : json_real(-numv(l));
        break;
    case E_AND:
    case E_OR:
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (truthy(l) == (e->kind == E_OR)) { v = l; l = NULL; }
        else st = eval_p(c, e->b, &v, pc), pc = NULL;
        break;
    case E_COND:
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (truthy(l)) st = eval_p(c, e->b, &v, pc);
        else if (e->c) st = eval_p(c, e->c, &v, pc);
        pc = NULL;
        break;
    case E_BIN:
        if (pc && (e->op == OP_ADD || e->op == OP_CAT)) {
            glm_tpl_output lp = {0}, rp = {0};
            st = eval_p(c, e->a, &l, &lp);
            if (st == GLM_OK) st = eval_p(c, e->b, &r, &rp);
            if (st == GLM_OK) st = arith(c, e, l, r, &v);
            if (st == GLM_OK && v && json_is_string(v)) {
                st = seg_move(pc, &lp);
                if (st == GLM_OK) st = seg_move(pc, &rp);
                pc = NULL;
            }
            glm_tpl_output_free(&lp);
            glm_tpl_output_free(&rp);
        } else {
            st = eval(c, e->a, &l);
            if (st == GLM_OK) st = eval(c, e->b, &r);
            if (st == GLM_OK) st = arith(c, e, l, r, &v);
        }
        break;
    default:
        st = rerr(c, e->off, "internal: not an expression");
    }
    json_decref(l);
    json_decref(r);
    c->depth--;
    if (st != GLM_OK) { json_decref(v); return st; }
    if (pc && v) {
        glm_charvec b = {0};
        py_str(v, &b);
        st = seg_add(pc, b.v ? b.v : "", b.n, 0);
        free(b.v);
        if (st != GLM_OK) { json_decref(v); return st; }
    }
    *out = v;
    return GLM_OK;
}

/* Binds for/set targets to a value (tuple unpacking for several names). */
static glm_status bind(rctx *c, node *s, json_t *frame, json_t *v) {
    if (s->targets.n == 1) return json_object_set(frame, s->targets.v[0], v ? v : json_null()) ? GLM_ERR_NOMEM : GLM_OK;
    int bad;
    json_t *l = iter_list(v, &bad);
    if (!l || json_array_size(l) != s->targets.n) {
        json_decref(l);
        return rerr(c, s->off, "cannot unpack %s into %zu names", tname(v), s->targets.n);
    }
    for (size_t i = 0; i < s->targets.n; i++) json_object_set(frame, s->targets.v[i], json_array_get(l, i));
    json_decref(l);
    return GLM_OK;
}

static glm_status render_for(rctx *c, node *s, glm_tpl_output *out) {
    json_t *it = NULL, *items = NULL;
    glm_status st = eval(c, s->a, &it);
    if (st != GLM_OK) return st;
    int bad;
    items = iter_list(it, &bad);
    if (bad) {
        st = rerr(c, s->a->off, "cannot loop over %s", tname(it));
        json_decref(it);
        return st;
    }
    json_decref(it);
    if (!items) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (s->b) { /* loop filter */
        json_t *kept = json_array();
        json_t *fr = json_object();
        if (glm_vec_push(c->frames, fr) != GLM_OK) { json_decref(fr); json_decref(kept); json_decref(items); return GLM_ERR_NOMEM; }
        for (size_t i = 0; i < json_array_size(items) && st == GLM_OK; i++) {
            json_t *x = json_array_get(items, i), *cond = NULL;
            st = bind(c, s, fr, x);
            if (st == GLM_OK) st = eval(c, s->b, &cond);
            if (st == GLM_OK && truthy(cond)) json_array_append(kept, x);
            json_decref(cond);
        }
        c->frames.n--;
        json_decref(fr);
        json_decref(items);
        items = kept;
        if (st != GLM_OK) { json_decref(items); return st; }
    }
    size_t n = json_array_size(items);
    if (n == 0) {
        json_decref(items);
        return render_body(c, &s->orelse, out);
    }
    for (size_t i = 0; i < n && st == GLM_OK; i++) {
        json_t *fr = json_object(), *loop = json_object();
        if (!fr || !loop || glm_vec_push(c->frames, fr) != GLM_OK) { json_decref(fr); json_decref(loop); st = GLM_ERR_NOMEM; break; }
        json_object_set_new(loop, "index0", json_integer((json_int_t)i));
        json_object_set_new(loop, "index", json_integer((json_int_t)i + 1));
        json_object_set_new(loop, "revindex", json_integer((json_int_t)(n - i)));
        json_object_set_new(loop, "revindex0", json_integer((json_int_t)(n - i - 1)));
        json_object_set_new(loop, "first", json_boolean(i == 0));
        json_object_set_new(loop, "last", json_boolean(i + 1 == n));
        json_object_set_new(loop, "length", json_integer((json_int_t)n));
        if (i > 0) json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (i + 1 < n) json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        json_object_set_new(fr, "loop", loop);
        st = bind(c, s, fr, json_array_get(items, i));
        if (st == GLM_OK) st = render_body(c, &s->body, out);
        c->frames.n--;
        json_decref(fr);
        if (c->loopctl == 1) { c->loopctl = 0; break; }
        c->loopctl = 0;
    }
    json_decref(items);
    return st;
}

static int is_namespace(rctx *c, json_t *v) {
    for (size_t i = 0; i < c->ns.n; i++)
        if (c->ns.v[i] == v) return 1;
    return 0;
}

static glm_status render_body(rctx *c, nodevec *body, glm_tpl_output *out) {
    glm_status st = GLM_OK;
    if (++c->depth > MAX_DEPTH * 2) { c->depth--; return glm_err(GLM_ERR_FORMAT, "%s: blocks nested too deeply", c->t->name); }
    for (size_t i = 0; i < body->n && st == GLM_OK && !c->loopctl; i++) {
        node *s = body->v[i];
        json_t *v = NULL;
        switch (s->kind) {
        case S_TEXT: st = seg_add(out, c->t->src + s->ts, s->tl, 1); break;
        case S_OUT: st = eval_p(c, s->a, &v, out); json_decref(v); break;
        case S_IF:
            st = eval(c, s->a, &v);
            if (st == GLM_OK) st = render_body(c, truthy(v) ? &s->body : &s->orelse, out);
            json_decref(v);
            break;
        case S_FOR: st = render_for(c, s, out); break;
        case S_SET: {
            st = eval(c, s->a, &v);
            if (st != GLM_OK) break;
            json_t *top = c->frames.v[c->frames.n - 1];
            if (s->name) {
                json_t *ns = lookup(c, s->targets.v[0]);
                if (!ns || !is_namespace(c, ns))
                    st = rerr(c, s->off, "cannot set an attribute of '%s': it is not a namespace(); hint: create it with {%% set %s = namespace() %%}",
                              s->targets.v[0], s->targets.v[0]);
                else json_object_set(ns, s->name, v ? v : json_null());
            } else {
                st = bind(c, s, top, v);
            }
            json_decref(v);
            break;
        }
        case S_SETBLOCK: {
            glm_tpl_output tmp = {0};
            st = render_body(c, &s->body, &tmp);
            if (st == GLM_OK) {
                size_t n;
                char *txt = glm_tpl_output_join(&tmp, &n);
                if (!txt) st = glm_err(GLM_ERR_NOMEM, "out of memory");
                else json_object_set_new(c->frames.v[c->frames.n - 1], s->targets.v[0], json_stringn_nocheck(txt, n));
                free(txt);
            }
            glm_tpl_output_free(&tmp);
            break;
        }
        case S_BREAK: c->loopctl = 1; break;
        case S_CONTINUE: c->loopctl = 2; break;
        case S_BLOCK: st = render_body(c, &s->body, out); break;
        default: st = rerr(c, s->off, "internal: unknown statement");
        }
    }
    c->depth--;
    return st;
}

glm_status glm_template_render(const glm_template *t, json_t *vars, glm_tpl_output *out) {
    if (!t || !out) return glm_err(GLM_ERR_ARG, "glm_template_render: NULL argument");
    if (vars && !json_is_object(vars)) return glm_err(GLM_ERR_ARG, "%s: template variables must be a JSON object", t->name);
    rctx c = {0};
    c.t = t;
    json_t *root = json_object();
    if (!root || glm_vec_push(c.frames, vars) != GLM_OK || glm_vec_push(c.frames, root) != GLM_OK) {
        json_decref(root);
        free(c.frames.v);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    glm_status st = render_body(&c, (nodevec *)&t->body, out);
    json_decref(root);
    free(c.frames.v);
    free(c.ns.v);
    return st;
}
