/* common/log.h: messages to stderr, with a process-wide verbosity.
 * Level 0 = errors only (--quiet), 1 = normal, 2 = debug messages too (--verbose, GLMTUNE_VERBOSE=1).
 *
 * Status lines: on a terminal, long work redraws one line in place ("\r<text>\x1b[K", no
 * newline: glm_progress, the train step line). While such a line is open, any message first
 * ends it with a newline, so every message starts on its own line and the status line is
 * redrawn below it at its next update. Everything here holds one lock, so messages from worker
 * threads never interleave mid-line. */
#ifndef GLM_LOG_H
#define GLM_LOG_H

#include <stdbool.h>

extern int glm_log_level;

void glm_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void glm_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void glm_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void glm_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Draws a status line: with `tty`, "\r<text>\x1b[K" and the line stays open (the next message
 * starts a new line); without, "<text>\n" (a log line). Printed whatever the log level: the
 * caller decides (e.g. --quiet draws none). */
void glm_log_status(bool tty, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets a prefix printed after "glmtune: " on every message and status line (e.g. "rank 1: " in
 * a data-parallel run; "" or NULL: none). Copied (at most 63 bytes). */
void glm_log_set_prefix(const char *prefix);

/* Ends an open status line with a newline (nothing when none is open). */
void glm_log_status_end(void);
/* Prints "<text>\n" as its own line (ending an open status line first), without the
 * "glmtune: " prefix: report tables and result lines. */
void glm_log_plain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
