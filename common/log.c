#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

int glm_log_level = 1;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

static void vlog(int level, const char *tag, const char *fmt, va_list ap) {
    if (glm_log_level < level) return;
    pthread_mutex_lock(&g_log_mu);
    fputs("glmtune: ", stderr);
    if (tag) fputs(tag, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
}

#define DEF(name, level, tag)                                                                  \
    void name(const char *fmt, ...) {                                                          \
        va_list ap;                                                                            \
        va_start(ap, fmt);                                                                     \
        vlog(level, tag, fmt, ap);                                                             \
        va_end(ap);                                                                            \
    }
DEF(glm_log_error, 0, "error: ")
DEF(glm_log_warn, 1, "warning: ")
DEF(glm_log_info, 1, NULL)
DEF(glm_log_debug, 2, "debug: ")
