/* common/status.h: status codes and the thread-local error message (docs/design.md §4).
 *
 * Library code never exits: a function that can fail returns glm_status and, on failure,
 * records a one-line message with glm_err(). Only tool/ turns a status into an exit code
 * (0 ok, 1 failure, 2 usage). Messages about input name the file, line/offset and record,
 * say what is wrong in plain words and end with "hint: ..." when there is an obvious fix. */
#ifndef GLM_STATUS_H
#define GLM_STATUS_H

#include <stdarg.h>

typedef enum {
    GLM_OK = 0,
    GLM_EOF = 1,           /* end of a stream: not an error */
    GLM_ERR_IO = 10,       /* open/read/write/fsync/rename failed */
    GLM_ERR_FORMAT = 11,   /* input is malformed (JSON, shard, safetensors, config ...) */
    GLM_ERR_ARG = 12,      /* a bad option or argument value (usage error at the CLI) */
    GLM_ERR_NOMEM = 13,    /* allocation failed */
    GLM_ERR_UNSUPPORTED = 14, /* valid input that glmtune does not handle */
    GLM_ERR_NUMERIC = 15,  /* non-finite values where finite ones are required */
    GLM_ERR_MISMATCH = 16, /* two inputs disagree (tokenizer fingerprint, shapes, vocab) */
    GLM_ERR_INTERNAL = 17, /* a bug in glmtune: an invariant of its own code does not hold (GLM_ASSERT) */
    GLM_ERR_DEVICE = 18,   /* a CUDA runtime, cuBLAS or cuDNN call failed: the device or its libraries */
    GLM_ERR_COMM = 19,     /* an NCCL or MPI collective or point-to-point call failed or timed out */
    GLM_ERR_LIBRARY = 20,  /* a library glmtune calls failed where its input was valid (PCRE2, sentencepiece) */
} glm_status;

/* Records the message (printf format) for this thread and returns `code`, so call sites
 * read `return glm_err(GLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));`. An argument
 * may be glm_errmsg() (the message is formatted aside first), but to put context before the
 * current message glm_err_context says it directly. */
glm_status glm_err(glm_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
glm_status glm_verr(glm_status code, const char *fmt, va_list ap);

/* Prepends context ("while reading X: ") to this thread's message and returns `code`. */
glm_status glm_err_context(glm_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* This thread's last message ("" if none). Valid until the next glm_err on this thread. */
const char *glm_errmsg(void);

/* Clears this thread's message. */
void glm_err_clear(void);

/* A short name for a status code ("io error", "format error", ...). */
const char *glm_status_name(glm_status s);

/* Checks an invariant of glmtune's own code (never input, never the device): when `cond` is false,
 * records "internal error at FILE:LINE: <message> (`cond` is false; a bug in glmtune: please report
 * it)" and returns GLM_ERR_INTERNAL from the enclosing function (which returns glm_status). The
 * message is a printf format and its arguments: GLM_ASSERT(i < n, "state index %zu of %zu", i, n). */
#define GLM_ASSERT(cond, ...)                                                                                  \
    do {                                                                                                       \
        if (!(cond)) return glm_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                           \
    } while (0)
glm_status glm_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* glm_assert_fail with the message's arguments as a va_list. */
glm_status glm_vassert_fail(const char *file, int line, const char *cond, const char *fmt, va_list ap);

/* Propagate a failure: GLM_TRY(expr) returns expr's status from the enclosing function. */
#define GLM_TRY(expr)                                                                          \
    do {                                                                                       \
        glm_status glm_try_s_ = (expr);                                                        \
        if (glm_try_s_ != GLM_OK) return glm_try_s_;                                           \
    } while (0)

#endif
