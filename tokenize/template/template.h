/* tokenize/template/template.h: a Jinja subset for chat templates (parse once, render many times).
 *
 * Renders like transformers' apply_chat_template environment: jinja2 with trim_blocks=True,
 * lstrip_blocks=True, keep_trailing_newline=False (one trailing newline of the source is
 * dropped; \r\n and \r become \n), undefined values print as "", `tojson` =
 * json.dumps(ensure_ascii=False, indent=...), {% break %}/{% continue %} enabled,
 * {% generation %} blocks rendered as their body.
 *
 * Supported: {{ expr }}, {% if/elif/else/endif %}, {% for x in xs [if cond] %} ... {% else %}
 * ... {% endfor %} (tuple targets `for k, v in d.items()`; loop.index0/index/revindex/
 * revindex0/first/last/length/previtem/nextitem), {% set x = e %}, {% set a, b = e %},
 * {% set ns.x = e %} on namespace() objects, {% set x %}...{% endset %}, {# comments #},
 * whitespace control {%- -%} {{- -}} {#- -#} and {%+.
 * Expressions: string/int/float/true/false/none literals, [lists], {dicts}, (tuples),
 * variables, a.k, a['k'], a[0], slices a[i:j:k], calls, filters (tojson, length, count, trim,
 * string, lower, upper, capitalize, title, default/d, items, join, first, last, list, reverse,
 * replace, int, float, abs, safe, selectattr, rejectattr, map(attribute=)), tests (defined,
 * undefined, none, string, mapping, iterable, sequence, number, integer, float, boolean,
 * true, false, even, odd, divisibleby, eq/equalto/==, ne, in), operators or and not in
 * `not in` == != < > <= >= + - * / // % ** ~, `a if c else b`, string methods (startswith,
 * endswith, strip, lstrip, rstrip, split, upper, lower, replace, title, capitalize, find),
 * dict methods (items, get, keys, values), globals raise_exception(msg), namespace(...),
 * range(...).
 * Not supported (parse error naming the tag): macros, call/filter blocks, include/extends,
 * raw blocks, `%` string formatting. lower/upper/title/capitalize change ASCII letters only.
 *
 * Values are jansson json_t; "undefined" is distinct from JSON null (null prints "None"). */
#ifndef GLM_TOKENIZE_TEMPLATE_H
#define GLM_TOKENIZE_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include <stdint.h>

#include "common/status.h"

typedef struct glm_template glm_template;

/* One piece of rendered text. literal = 1: the text came from the template source (plain
 * template text, or a string literal inside an {{ expression }}, e.g. '<|user|>' in
 * {{ '<|user|>' + x }}); literal = 0: it came from a value computed from the data.
 * `text` is malloc'd and NUL-terminated; len excludes the NUL. Adjacent literal pieces are
 * merged; data pieces never are (each {{ }} value or concatenation part stays its own). */
typedef struct {
    char *text;
    size_t len;
    int literal;
} glm_tpl_segment;

/* The render output: seg[0..n) in order; concatenating the texts gives the rendered string. */
typedef struct {
    glm_tpl_segment *seg;
    size_t n, cap;
} glm_tpl_output;

/* Parses template source `src` (NUL-terminated UTF-8). `name` (e.g. the config file's path)
 * prefixes messages. Errors: GLM_ERR_FORMAT with "NAME:LINE:COL: what is wrong" (1-based,
 * column in bytes) for syntax errors and unsupported tags; GLM_ERR_NOMEM. *out is set only on
 * success; free with glm_template_free. */
glm_status glm_template_parse(const char *src, const char *name, glm_template **out);

/* Renders `t` with the variables of JSON object `vars` (read, never modified; may be NULL
 * for none), APPENDING segments to `out` (zero-initialise it first). Thread-safe: many
 * threads may render one template at once (each with its own `out`).
 * Errors (out may hold a partial render then): GLM_ERR_FORMAT "NAME:LINE:COL: ..." for
 * runtime errors (type errors, attribute of undefined, raise_exception(msg) which reports msg,
 * recursion/size limits), GLM_ERR_NOMEM. */
glm_status glm_template_render(const glm_template *t, json_t *vars, glm_tpl_output *out);

/* Concatenates out's segments into one malloc'd NUL-terminated string (*len may be NULL).
 * Returns NULL when out of memory. */
char *glm_tpl_output_join(const glm_tpl_output *o, size_t *len);

/* Frees the segments' texts and the array; leaves *o zeroed (reusable). */
void glm_tpl_output_free(glm_tpl_output *o);

/* Frees a parsed template (NULL is fine). */
void glm_template_free(glm_template *t);

/* A number unique to this parsed template in the process (never reused, unlike its address):
 * what per-template caches key on. */
uint64_t glm_template_serial(const glm_template *t);

/* The template's source as it is rendered: newlines normalised (\r\n and \r -> \n) and one
 * trailing newline dropped. *len (may be NULL) gets its length. Valid while t lives. */
const char *glm_template_source(const glm_template *t, size_t *len);

#endif
