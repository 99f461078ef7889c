/* tokenize/template/template_eval.c: stage 3, the renderer: walks the AST of template_lex.c with a
 * per-call context (scope frames), so one template can be rendered by many threads at once;
 * evaluates expressions and operators, runs the statements and collects the output segments. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/template/template_internal.h"

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
/* Errors                                                                                       */

glm_status tpl_rerr(rctx *c, size_t off, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    tpl_line_col(c->t->src, off, &line, &col);
    return glm_err(GLM_ERR_FORMAT, "%s:%d:%d: %s", c->t->name, line, col, msg);
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
            if (a->nkw == 8) { json_decref(v); args_free(a); return tpl_rerr(c, n->off, "too many keyword arguments"); }
            a->kwn[a->nkw] = n->kw.v[i];
            a->kwv[a->nkw++] = v;
        } else {
            if (a->npos == 8) { json_decref(v); args_free(a); return tpl_rerr(c, n->off, "too many arguments"); }
            a->pos[a->npos++] = v;
        }
    }
    return GLM_OK;
}

static glm_status arith(rctx *c, node *e, json_t *l, json_t *r, json_t **out) {
    int op = e->op;
    *out = NULL;
    if (op == OP_CAT || (op == OP_ADD && l && r && json_is_string(l) && json_is_string(r))) {
        glm_charvec b = {0};
        tpl_py_str(l, &b);
        tpl_py_str(r, &b);
        *out = tpl_cv_json(&b);
        return GLM_OK;
    }
    if (op >= OP_EQ) {
        int res, cr;
        switch (op) {
        case OP_EQ: res = tpl_py_equal(l, r); break;
        case OP_NE: res = !tpl_py_equal(l, r); break;
        case OP_IN: case OP_NOTIN: {
            if (r && !json_is_array(r) && !json_is_object(r) && !json_is_string(r))
                return tpl_rerr(c, e->off, "'in' needs a list, dict or string on the right, got %s", tpl_tname(r));
            if (r && json_is_string(r) && !(l && json_is_string(l)))
                return tpl_rerr(c, e->off, "'in <string>' needs a string on the left, got %s", tpl_tname(l));
            argv_t a = {0};
            a.pos[0] = r;
            a.npos = 1;
            res = tpl_run_test("in", l, &a);
            if (op == OP_NOTIN) res = !res;
            break;
        }
        default:
            if (tpl_py_cmp(l, r, &cr) != 0)
                return tpl_rerr(c, e->off, "cannot compare %s with %s", tpl_tname(l), tpl_tname(r));
            res = op == OP_LT ? cr < 0 : op == OP_GT ? cr > 0 : op == OP_LE ? cr <= 0 : cr >= 0;
        }
        *out = json_boolean(res);
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
            return tpl_rerr(c, e->off, "repetition too large");
        if (json_is_string(l)) {
            glm_charvec b = {0};
            for (long long i = 0; i < k; i++) tpl_py_str(l, &b);
            *out = tpl_cv_json(&b);
        } else {
            *out = json_array();
            for (long long i = 0; i < k; i++) json_array_extend(*out, l);
        }
        return GLM_OK;
    }
    if (!is_num(l) || !is_num(r))
        return tpl_rerr(c, e->off, "unsupported operand types for arithmetic: %s and %s", tpl_tname(l), tpl_tname(r));
    int ints = is_intlike(l) && is_intlike(r);
    double x = numv(l), y = numv(r);
    long long i = ints ? intv(l) : 0, j = ints ? intv(r) : 0;
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL:
        if (ints) {
            long long z;
            int of = op == OP_ADD ? __builtin_add_overflow(i, j, &z) : op == OP_SUB ? __builtin_sub_overflow(i, j, &z)
                                                                    : __builtin_mul_overflow(i, j, &z);
            if (of) return tpl_rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
            *out = json_integer(z);
        } else {
            *out = json_real(op == OP_ADD ? x + y : op == OP_SUB ? x - y : x * y);
        }
        break;
    case OP_DIV:
        if (y == 0) return tpl_rerr(c, e->off, "division by zero");
        *out = json_real(x / y);
        break;
    case OP_FDIV: case OP_MOD:
        if (y == 0) return tpl_rerr(c, e->off, "division by zero");
        if (ints) {
            if (i == LLONG_MIN && j == -1) return tpl_rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
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
                if (__builtin_mul_overflow(p, i, &p)) return tpl_rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
                if (p == 0 || p == 1) break;
            }
            if (p == 1 && i == -1 && j % 2) p = -1;
            *out = json_integer(p);
        } else {
            *out = json_real(pow(x, y));
        }
        break;
    default: return tpl_rerr(c, e->off, "internal: bad operator");
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
    if (++c->depth > MAX_DEPTH * 2) { c->depth--; return tpl_rerr(c, e->off, "expression nested too deeply"); }
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
            if (!l || !json_is_string(l)) { st = tpl_rerr(c, e->args.v[i]->off, "dict keys must be strings here, got %s", tpl_tname(l)); json_decref(l); break; }
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
            st = tpl_rerr(c, e->off, "%s%s%s is undefined, so it has no %s", e->a->kind == E_NAME ? "'" : "",
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
            long long k = intv(r), n = (long long)(json_is_array(l) ? json_array_size(l) : tpl_length_of(l));
            if (k < 0) k += n;
            if (k >= 0 && k < n) {
                if (json_is_array(l)) v = json_incref(json_array_get(l, (size_t)k));
                else {
                    int has[3] = {1, 1, 0};
                    long long x[3] = {k, k + 1, 1};
                    v = tpl_do_slice(l, has, x);
                }
            }
        }
        break;
    }
    case E_SLICE: {
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (!l || !(json_is_array(l) || json_is_string(l))) { st = tpl_rerr(c, e->off, "cannot slice %s", tpl_tname(l)); break; }
        int has[3] = {0, 0, 0};
        long long x[3] = {0, 0, 1};
        node *part[3] = {e->b, e->c, e->d};
        for (int k = 0; k < 3 && st == GLM_OK; k++) {
            if (!part[k]) continue;
            st = eval(c, part[k], &r);
            if (st != GLM_OK) break;
            if (r && !json_is_null(r)) {
                if (!is_intlike(r)) st = tpl_rerr(c, part[k]->off, "slice indices must be integers, got %s", tpl_tname(r));
                else { has[k] = 1; x[k] = intv(r); }
            }
            json_decref(r);
            r = NULL;
        }
        if (st == GLM_OK) {
            if (has[2] && x[2] == 0) st = tpl_rerr(c, e->off, "slice step cannot be zero");
            else v = tpl_do_slice(l, has, x);
        }
        break;
    }
    case E_CALL: {
        argv_t a;
        node *f = e->a;
        if (f->kind == E_ATTR) {
            st = eval(c, f->a, &l);
            if (st != GLM_OK) break;
            if (!l) { st = tpl_rerr(c, f->off, "cannot call .%s() on an undefined value", f->name); break; }
            if ((st = eval_args(c, e, &a)) != GLM_OK) break;
            st = tpl_call_method(c, e, l, f->name, &a, &v);
            args_free(&a);
        } else if (f->kind == E_NAME) {
            if (lookup(c, f->name)) { st = tpl_rerr(c, e->off, "'%s' is not callable", f->name); break; }
            if ((st = eval_args(c, e, &a)) != GLM_OK) break;
            st = tpl_call_global(c, e, f->name, &a, &v);
            args_free(&a);
        } else {
            st = tpl_rerr(c, e->off, "this value is not callable");
        }
        break;
    }
    case E_FILTER: {
        argv_t a;
        st = eval(c, e->a, &l);
        if (st != GLM_OK || (st = eval_args(c, e, &a)) != GLM_OK) break;
        st = tpl_apply_filter(c, e, l, &a, &v);
        args_free(&a);
        break;
    }
    case E_TEST: {
        argv_t a;
        st = eval(c, e->a, &l);
        if (st != GLM_OK || (st = eval_args(c, e, &a)) != GLM_OK) break;
        int res = tpl_run_test(e->name, l, &a);
        args_free(&a);
        if (res < 0) st = tpl_rerr(c, e->off, "unknown test '%s'", e->name);
        else v = json_boolean(e->op ? !res : res);
        break;
    }
    case E_NOT:
        st = eval(c, e->a, &l);
        if (st == GLM_OK) v = json_boolean(!tpl_truthy(l));
        break;
    case E_NEG:
    case E_POS:
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (!is_num(l)) { st = tpl_rerr(c, e->off, "bad operand type for unary %c: %s", e->kind == E_NEG ? '-' : '+', tpl_tname(l)); break; }
        if (e->kind == E_POS) v = is_intlike(l) ? json_integer(intv(l)) : json_real(numv(l));
        else if (is_intlike(l) && intv(l) == LLONG_MIN) st = tpl_rerr(c, e->off, "integer overflow (glmtune's integers are 64-bit)");
        else v = is_intlike(l) ? json_integer(-intv(l)) : json_real(-numv(l));
        break;
    case E_AND:
    case E_OR:
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (tpl_truthy(l) == (e->kind == E_OR)) { v = l; l = NULL; }
        else st = eval_p(c, e->b, &v, pc), pc = NULL;
        break;
    case E_COND:
        st = eval(c, e->a, &l);
        if (st != GLM_OK) break;
        if (tpl_truthy(l)) st = eval_p(c, e->b, &v, pc);
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
        st = tpl_rerr(c, e->off, "internal: not an expression");
    }
    json_decref(l);
    json_decref(r);
    c->depth--;
    if (st != GLM_OK) { json_decref(v); return st; }
    if (pc && v) {
        glm_charvec b = {0};
        tpl_py_str(v, &b);
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
    json_t *l = tpl_iter_list(v, &bad);
    if (!l || json_array_size(l) != s->targets.n) {
        json_decref(l);
        return tpl_rerr(c, s->off, "cannot unpack %s into %zu names", tpl_tname(v), s->targets.n);
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
    items = tpl_iter_list(it, &bad);
    if (bad) {
        st = tpl_rerr(c, s->a->off, "cannot loop over %s", tpl_tname(it));
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
            if (st == GLM_OK && tpl_truthy(cond)) json_array_append(kept, x);
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
            if (st == GLM_OK) st = render_body(c, tpl_truthy(v) ? &s->body : &s->orelse, out);
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
                    st = tpl_rerr(c, s->off, "cannot set an attribute of '%s': it is not a namespace(); hint: create it with {%% set %s = namespace() %%}",
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
        default: st = tpl_rerr(c, s->off, "internal: unknown statement");
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
