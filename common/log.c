#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int glm_log_level = 1;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_line_open; /* a status line without newline is on stderr (under g_log_mu) */
static char g_prefix[64];

void glm_log_set_prefix(const char *prefix) {
    pthread_mutex_lock(&g_log_mu);
    snprintf(g_prefix, sizeof g_prefix, "%s", prefix ? prefix : "");
    pthread_mutex_unlock(&g_log_mu);
}

static void end_line_locked(void) {
    if (g_line_open) fputc('\n', stderr);
    g_line_open = false;
}

/* Writes head + the formatted text + tail to stderr in one write, so that lines of processes
 * sharing a pipe (data-parallel ranks under mpirun) never interleave mid-line. */
static void emit_locked(const char *head, const char *fmt, va_list ap, const char *tail) {
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "%s", head);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof buf) {
        int k = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        if (k > 0) n += k;
    }
    size_t tl = strlen(tail);
    if ((size_t)n > sizeof buf - 1 - tl) n = (int)(sizeof buf - 1 - tl);
    memcpy(buf + n, tail, tl);
    fwrite(buf, 1, (size_t)n + tl, stderr);
}

static void vlog(int level, const char *tag, const char *fmt, va_list ap) {
    if (glm_log_level < level) return;
    pthread_mutex_lock(&g_log_mu);
    end_line_locked();
    char head[160];
    snprintf(head, sizeof head, "glmtune: %s%s", g_prefix, tag ? tag : "");
    emit_locked(head, fmt, ap, "\n");
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
    char head[80];
    snprintf(head, sizeof head, "%s%s", tty ? "\r" : "", g_prefix);
    emit_locked(head, fmt, ap, tty ? "\x1b[K" : "\n");
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
    emit_locked("", fmt, ap, "\n");
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
    va_end(ap);
}
