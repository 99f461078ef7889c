#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

int glm_log_level = 1;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_line_open; /* a status line without newline is on stderr (under g_log_mu) */

static void end_line_locked(void) {
    if (g_line_open) fputc('\n', stderr);
    g_line_open = false;
}

static void vlog(int level, const char *tag, const char *fmt, va_list ap) {
    if (glm_log_level < level) return;
    pthread_mutex_lock(&g_log_mu);
    end_line_locked();
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

void glm_log_status(bool tty, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_log_mu);
    if (tty) fputc('\r', stderr);
    vfprintf(stderr, fmt, ap);
    fputs(tty ? "\x1b[K" : "\n", stderr);
    g_line_open = tty;
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
    va_end(ap);
}

void glm_log_status_end(void) {
    pthread_mutex_lock(&g_log_mu);
    end_line_locked();
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
}

void glm_log_plain(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_log_mu);
    end_line_locked();
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
    va_end(ap);
}
