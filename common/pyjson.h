/* common/pyjson.h: JSON and number text exactly as Python prints them.
 *
 * Chat templates call `tojson`, which transformers defines as
 * json.dumps(x, ensure_ascii=False, indent=indent); the tool blocks of GLM-4's template are
 * rendered with it, so its bytes become training tokens and must match Python byte for byte.
 * The dataset layer uses the same text for tool-call arguments (LLaMA-Factory and transformers
 * serialise them with json.dumps(ensure_ascii=False)). */
#ifndef GLM_PYJSON_H
#define GLM_PYJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"

/* Python's repr(float) for `d` into buf (NUL-terminated; 32 bytes are always enough):
 * the shortest decimal string that reads back as the same double (IEEE-754 binary64),
 * fixed notation with ".0" when the decimal exponent e (d = m x 10^e, 1 <= |m| < 10) lies in
 * [-4, 16), else "1e-05" / "1.5e+100" style (sign and >= 2 exponent digits).
 * Non-finite values: "inf", "-inf", "nan" (Python's repr); json.dumps' names are produced by
 * glm_tojson. Returns buf. */
char *glm_py_float_repr(double d, char buf[32]);

/* Parses JSON text as Python's json.loads reads it, into jansson values (flags as json_loadb's).
 * jansson alone cannot hold what Python keeps: integers outside the 64-bit range (Python's are
 * unbounded; jansson fails, or with JSON_DECODE_INT_AS_REAL turns every integer into a float),
 * numbers beyond the double range (Python: inf) and the literals NaN, Infinity, -Infinity (which
 * json.loads accepts). Those become "number text" values (glm_json_numtext): strings holding a
 * private marker and the number's text, which glm_tojson writes as Python's json.dumps does
 * (digits as read; Infinity, -Infinity, NaN) and every other value stays as jansson reads it.
 * Returns a new reference, or NULL with *err set as json_loadb sets it (the text is invalid JSON
 * even for Python, or holds a "\u0000" escape together with such a number). */
json_t *glm_json_loadb_py(const char *data, size_t n, size_t flags, json_error_t *err);

/* True when v is a number-text value from glm_json_loadb_py; *kind = 'i' (an integer: *text is
 * its decimal digits as written, with '-' when negative) or 'f' (a float: *text is "Infinity",
 * "-Infinity" or "NaN"); text and len: where the text is and its length (not NUL-terminated).
 * Any argument but v may be NULL. */
bool glm_json_numtext(const json_t *v, char *kind, const char **text, size_t *len);

/* The text of json.dumps(v, ensure_ascii=False, indent=indent) in a malloc'd NUL-terminated
 * string (caller frees), or NULL when out of memory or v is NULL.
 *   indent < 0: one line, separators ", " and ": " (json.dumps' default, indent=None);
 *   indent >= 0: one element per line, indented by `indent` spaces per level, separators ","
 *                and ": ", empty lists/objects as [] / {}.
 * Object keys keep the input's order (jansson keeps insertion order). Strings: '"', '\\',
 * \n \r \t \b \f escaped by name, other bytes < 0x20 as \u00XX, everything else (non-ASCII
 * UTF-8, 0x7f) as is. Integers as integers; reals as Python's float repr (1.0, 1e-05, 0.1),
 * non-finite reals as Infinity, -Infinity, NaN; number-text values (glm_json_loadb_py) as their
 * text. */
char *glm_tojson(json_t *v, int indent);

/* The double whose value is the shortest decimal that reads back as the float32 `f` (so a
 * setting held as float, e.g. 0.1f = 0.100000001490116..., is written as 0.1, not
 * 0.10000000149011612). Non-finite values are returned unchanged. */
double glm_f32_shortest(float f);

/* A JSON file as every glmtune output writes it: glm_tojson(v, indent) (Python's json.dumps
 * text: floats in their shortest round-trip form, UTF-8 as is) and a final newline, written
 * through glm_write_file_atomic (temp name, fsync, rename; devices, FIFOs and /dev/stdout
 * written through). Errors: GLM_ERR_NOMEM, GLM_ERR_IO naming the file. */
glm_status glm_json_write_file(const char *path, json_t *v, int indent);

#endif
