/* common/log.h: messages to stderr, with a process-wide verbosity.
 * Level 0 = errors only (--quiet), 1 = normal, 2 = verbose (--verbose). */
#ifndef GLM_LOG_H
#define GLM_LOG_H

extern int glm_log_level;

void glm_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void glm_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void glm_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void glm_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
