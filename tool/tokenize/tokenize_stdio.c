#define _GNU_SOURCE
#include "tokenize_stdio.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "tool/cli.h"

/* A line that cannot be converted: the message on stderr, and {"error": message, "line": N} as its
 * output line, so that the output still lines up with the input. */
static json_t *line_error(long lineno, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *line_error(long lineno, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    glm_log_error("<stdin>:%ld: %s", lineno, msg);
    return json_pack("{s:s,s:I}", "error", msg, "line", (json_int_t)lineno);
}

int tokenize_stdio(const glm_tokenizer *tok, bool encode) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    glm_u32vec ids = {0};
    glm_charvec bytes = {0};
    int rc = GLM_EXIT_OK;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) { /* a blank line gives a blank line: the output lines up with the input */
            putchar('\n');
            continue;
        }
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        json_t *out = NULL;
        if (!v || !json_is_object(v)) {
            out = line_error(lineno, "not a JSON object (%s); hint: one object per line, like {\"%s\": ...}",
                             v ? "another JSON value" : je.text, encode ? "text" : "ids");
            rc = GLM_EXIT_FAIL;
        } else if (encode) {
            json_t *t = json_object_get(v, "text");
            ids.n = 0;
            if (!json_is_string(t)) {
                out = line_error(lineno, "no string \"text\" field; hint: {\"text\": \"...\"}");
                rc = GLM_EXIT_FAIL;
            } else if (glm_tokenizer_encode(tok, json_string_value(t), json_string_length(t), &ids) != GLM_OK) {
                out = line_error(lineno, "%s", glm_errmsg());
                rc = GLM_EXIT_FAIL;
            } else {
                json_t *arr = json_array();
                for (size_t i = 0; i < ids.n; i++) json_array_append_new(arr, json_integer(ids.v[i]));
                out = json_pack("{s:o}", "ids", arr);
            }
        } else {
            json_t *a = json_object_get(v, "ids");
            ids.n = 0;
            bytes.n = 0;
            bool ok = json_is_array(a);
            for (size_t i = 0; ok && i < json_array_size(a); i++) {
                json_t *x = json_array_get(a, i);
                ok = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) <= UINT32_MAX;
                if (ok) glm_vec_push(ids, (uint32_t)json_integer_value(x));
            }
            if (!ok) {
                out = line_error(lineno, "\"ids\" must be an array of non-negative integers");
                rc = GLM_EXIT_FAIL;
            } else if (glm_tokenizer_decode(tok, ids.v, ids.n, &bytes) != GLM_OK) {
                out = line_error(lineno, "%s", glm_errmsg());
                rc = GLM_EXIT_FAIL;
            } else {
                json_t *s = json_stringn(bytes.v ? bytes.v : "", bytes.n);
                if (s) {
                    out = json_pack("{s:o}", "text", s);
                } else { /* the ids end inside a UTF-8 sequence: give the bytes as hex */
                    char *hex = malloc(2 * bytes.n + 1);
                    for (size_t i = 0; i < bytes.n; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)bytes.v[i]);
                    hex[2 * bytes.n] = 0;
                    out = json_pack("{s:n,s:s}", "text", "bytes_hex", hex);
                    free(hex);
                }
            }
        }
        if (out) {
            char *s = json_dumps(out, JSON_COMPACT);
            puts(s);
            free(s);
            json_decref(out);
        }
        if (v) json_decref(v);
    }
    free(line);
    glm_vec_free(ids);
    glm_vec_free(bytes);
    return rc;
}
