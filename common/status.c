#include "status.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char g_msg[4096];

glm_status glm_verr(glm_status code, const char *fmt, va_list ap) {
    /* formatted aside first: an argument may be glm_errmsg() itself, i.e. g_msg (vsnprintf into
     * a buffer it also reads from is undefined) */
    char msg[sizeof g_msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(g_msg, msg, sizeof g_msg);
    return code;
}

glm_status glm_err(glm_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    glm_verr(code, fmt, ap);
    va_end(ap);
    return code;
}

glm_status glm_err_context(glm_status code, const char *fmt, ...) {
    char prefix[1024], old[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    if (snprintf(g_msg, sizeof g_msg, "%s: %s", prefix, old) >= (int)sizeof g_msg)
        memcpy(g_msg + sizeof g_msg - 4, "...", 4); /* cut to the buffer: say so */
    return code;
}

glm_status glm_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    glm_status st = glm_vassert_fail(file, line, cond, fmt, ap);
    va_end(ap);
    return st;
}

glm_status glm_vassert_fail(const char *file, int line, const char *cond, const char *fmt, va_list ap) {
    /* the file as the source tree names it (lora/adapter/optim.c), not the build's absolute path */
    const char *f = file, *last = NULL;
    for (const char *p = file; *p; p++)
        if (*p == '/') {
            f = last ? last + 1 : f;
            last = p;
        }
    if (!last) f = file;
    char msg[sizeof g_msg / 2];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return glm_err(GLM_ERR_INTERNAL, "internal error at %s:%d: %s (`%s` is false; a bug in glmtune: please report it)", f,
                   line, msg, cond);
}

const char *glm_errmsg(void) { return g_msg; }

void glm_err_clear(void) { g_msg[0] = 0; }

const char *glm_status_name(glm_status s) {
    switch (s) {
    case GLM_OK: return "ok";
    case GLM_EOF: return "end of stream";
    case GLM_ERR_IO: return "i/o error";
    case GLM_ERR_FORMAT: return "format error";
    case GLM_ERR_ARG: return "bad argument";
    case GLM_ERR_NOMEM: return "out of memory";
    case GLM_ERR_UNSUPPORTED: return "unsupported";
    case GLM_ERR_NUMERIC: return "numeric error";
    case GLM_ERR_MISMATCH: return "mismatch";
    case GLM_ERR_INTERNAL: return "internal error";
    case GLM_ERR_DEVICE: return "device error";
    case GLM_ERR_COMM: return "communication error";
    case GLM_ERR_LIBRARY: return "library error";
    }
    return "unknown error";
}
