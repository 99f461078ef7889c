/* common/jsonfast.h: a fast path for parsing JSON into jansson values.
 *
 * jansson's own parser reads its input one character at a time through a stream abstraction,
 * checks UTF-8 per character and copies every string twice; on the corpora it cost about 150
 * instructions per byte, a third of `glmtune tokenize`. This parser builds the same jansson
 * values (the same constructors, in the same order, so objects keep their key order and a
 * repeated key keeps its first place with its last value, as jansson and Python's json.loads
 * do) from valid JSON in its common form, at a small fraction of the cost. It never reports an
 * error: for anything it does not handle it returns NULL and the caller parses the text again
 * with the full path (glm_json_loadb_py), which gives the value or jansson's exact error. */
#ifndef GLM_JSONFAST_H
#define GLM_JSONFAST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Parses data[0..n) into a new jansson value, equal in every respect (types, key order, string
 * bytes, integer and double values) to what json_loadb(data, n, flags, ...) returns, with flags
 * 0 (decode_any false: the top level must be an object or an array) or JSON_DECODE_ANY
 * (decode_any true). Returns NULL, without any message, when the text is not valid JSON or
 * holds anything this fast path leaves to jansson: invalid UTF-8 (jansson's rules: no overlong
 * forms, no UTF-16 surrogates, nothing above U+10FFFF), a control character in a string, a
 * "\u0000" escape or an unpaired surrogate escape, an integer outside the 64-bit range, a number
 * whose double overflows, nesting deeper than 512, trailing text, or running out of memory.
 * Thread-safe. */
json_t *glm_json_parse_fast(const char *data, size_t n, bool decode_any);

#endif
