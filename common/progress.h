/* common/progress.h: a progress display for long work (docs/design.md §4): count, rate, ETA.
 * On a terminal (stderr is a tty) one line redrawn at most 10 times a second; otherwise a
 * plain line at most every 30 s, so logs stay quiet. Thread-safe: workers may call
 * glm_progress_add() concurrently. */
#ifndef GLM_PROGRESS_H
#define GLM_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

typedef struct glm_progress {
    char label[64];
    char unit[32];         /* what is counted: "records", "steps" */
    int64_t total;         /* expected count, or 0 when unknown */
    int64_t total_bytes;   /* expected bytes, or 0 when unknown (drives ETA when known) */
    int64_t done, bytes;
    double t0, last_draw;
    bool tty, enabled;
    pthread_mutex_t mu;
} glm_progress;

/* Starts the display; `enabled` false makes every call a no-op (e.g. --quiet). */
void glm_progress_start(glm_progress *p, const char *label, const char *unit, int64_t total,
                        int64_t total_bytes, bool enabled);
/* Adds `n` counted items and `nbytes` bytes, redrawing when due. */
void glm_progress_add(glm_progress *p, int64_t n, int64_t nbytes);
/* Draws the final state and ends the line. */
void glm_progress_finish(glm_progress *p);

/* Monotonic seconds. */
double glm_now(void);

#endif
