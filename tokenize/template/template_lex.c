/* tokenize/template/template_lex.c: stages 1 and 2 of the interpreter: the source is split into
 * text / {{ }} / {% %} chunks with jinja2's whitespace rules (trim_blocks, lstrip_blocks, '-'
 * and '+' modifiers), each tag is tokenised, and a recursive-descent parser builds an immutable
 * AST (expression precedence as jinja2's parser: conditional, or, and, not, comparisons/in,
 * + -, ~, * / // %, **, unary, postfix, filters/tests). Also glm_template_parse/free. */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/template/template_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Source positions                                                                             */

void tpl_line_col(const char *src, size_t off, int *line, int *col) {
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
    tpl_line_col(p->src, off, &line, &col);
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
                        tpl_put_utf8(&v, cp);
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
        if (chained) {
            /* a < b < c means (a < b) and (b < c), as in Python (b is evaluated twice) */
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
    static uint64_t serials;
    if (t) t->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
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

uint64_t glm_template_serial(const glm_template *t) { return t->serial; }

const char *glm_template_source(const glm_template *t, size_t *len) {
    if (len) *len = t->len;
    return t->src;
}
