/* tokenize/template/template_internal.h: private to the Jinja-subset interpreter of template.h (the
 * public API stays there); the AST, the render context and the functions the template_*.c
 * files call across files (prefixed tpl_).
 *
 * Three stages: (1) the source is split into text / {{ }} / {% %} chunks with jinja2's
 * whitespace rules (trim_blocks, lstrip_blocks, '-' and '+' modifiers); (2) a recursive-descent
 * parser builds an immutable AST (expression precedence as jinja2's parser: conditional, or,
 * and, not, comparisons/in, + -, ~, * / // %, **, unary, postfix, filters/tests); (3) the
 * renderer walks the AST with a per-call context (scope frames), so one template can be
 * rendered by many threads at once. Values are jansson json_t; NULL stands for "undefined".
 *
 * Files: template_lex.c      stages 1 and 2 (chunks, tokens, parser), glm_template_parse/free;
 *        template_eval.c     stage 3 (expressions, operators, statements), the output segments,
 *                            glm_template_render;
 *        template_builtins.c filters, tests, string/dict methods and global functions;
 *        template_value.c    Python semantics of values (str(), ==, <, iteration, slicing) and
 *                            the UTF-8 helpers they share. */
#ifndef GLM_TOKENIZE_TEMPLATE_INTERNAL_H
#define GLM_TOKENIZE_TEMPLATE_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/vec.h"
#include "tokenize/template/template.h"

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
    uint64_t serial; /* unique per parse in the process (caches key on it, see chat.c) */
    char *name;
    char *src;   /* normalised source (\n newlines, one trailing newline dropped) */
    size_t len;
    nodevec all; /* every node, for freeing */
    nodevec body;
};

/* 1-based line and column (in bytes) of source offset `off` (template_lex.c). */
void tpl_line_col(const char *src, size_t off, int *line, int *col);

/* ------------------------------------------------------------------------------------------ */
/* Render context (template_eval.c)                                                            */

typedef struct {
    const glm_template *t;
    GLM_VEC(json_t *) frames; /* frames[0] = vars (borrowed), the rest owned objects */
    GLM_VEC(json_t *) ns;     /* namespace() objects created by this render (borrowed) */
    int loopctl;              /* 1 break, 2 continue */
    int depth;
} rctx;

/* Evaluated call arguments. */
typedef struct {
    json_t *pos[8];
    size_t npos;
    json_t *kwv[8];
    const char *kwn[8];
    size_t nkw;
} argv_t;

/* A GLM_ERR_FORMAT "NAME:LINE:COL: message" error at source offset `off`; returns its status. */
glm_status tpl_rerr(rctx *c, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------------------------ */
/* Values (template_value.c)                                                                    */

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static inline int is_num(json_t *v) { return v && (json_is_number(v) || json_is_boolean(v)); }
static inline int is_intlike(json_t *v) { return v && (json_is_integer(v) || json_is_boolean(v)); }
static inline double numv(json_t *v) { return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_number_value(v); }
static inline long long intv(json_t *v) { return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_integer_value(v); }

/* Python type name of a value ("undefined" for NULL). */
const char *tpl_tname(json_t *v);
/* Python truthiness (undefined is false). */
int tpl_truthy(json_t *v);
/* Appends n bytes to b (keeps room for a NUL; silently stops when out of memory). */
void tpl_cv_put(glm_charvec *b, const char *s, size_t n);
/* Takes b's bytes as a new JSON string and frees b's buffer. */
json_t *tpl_cv_json(glm_charvec *b);
/* Appends code point cp to v as UTF-8. */
void tpl_put_utf8(glm_charvec *v, uint32_t cp);
/* Python str() of a value (undefined -> ""). */
void tpl_py_str(json_t *v, glm_charvec *b);
/* str(v) as a new JSON string. */
json_t *tpl_str_of(json_t *v);
/* Python ==. */
int tpl_py_equal(json_t *a, json_t *b);
/* Python ordering: returns 0 ok (*r = -1/0/1) or -1 when the types cannot be ordered. */
int tpl_py_cmp(json_t *a, json_t *b, int *r);
/* Number of UTF-8 code points in s[0..n). */
size_t tpl_cp_count(const char *s, size_t n);
/* UTF-8 code point boundaries of s: offsets[0..ncp] (offsets[ncp] = n). Caller frees. */
size_t *tpl_cp_offsets(const char *s, size_t n, size_t *ncp);
/* len(): code points of a string, items of a list or dict, 0 otherwise. */
size_t tpl_length_of(json_t *v);
/* Items of an iterable as a new list: list -> copy, dict -> keys, string -> characters,
 * undefined -> empty. NULL (with *bad = 1) for a value that is not iterable. */
json_t *tpl_iter_list(json_t *v, int *bad);
/* Python slice of a list or string. */
json_t *tpl_do_slice(json_t *v, int has[3], long long x[3]);

/* ------------------------------------------------------------------------------------------ */
/* Builtins (template_builtins.c)                                                               */

/* obj.m(args) for string and dict methods; *out is a new reference. */
glm_status tpl_call_method(rctx *c, node *e, json_t *obj, const char *m, argv_t *a, json_t **out);
/* Global function `name`(args): raise_exception, namespace, dict, range. */
glm_status tpl_call_global(rctx *c, node *e, const char *name, argv_t *a, json_t **out);
/* Jinja tests: returns 1/0, or -1 for an unknown test. */
int tpl_run_test(const char *t, json_t *v, argv_t *a);
/* v | e->name(args); *out is a new reference (NULL = undefined). */
glm_status tpl_apply_filter(rctx *c, node *e, json_t *v, argv_t *a, json_t **out);

#endif
