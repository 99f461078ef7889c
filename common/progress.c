#include "progress.h"

#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double glm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void glm_progress_start(glm_progress *p, const char *label, const char *unit, int64_t total,
                        int64_t total_bytes, bool enabled) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    snprintf(p->unit, sizeof p->unit, "%s", unit);
    p->total = total;
    p->total_bytes = total_bytes;
    p->enabled = enabled;
    p->tty = isatty(2);
    p->t0 = p->last_draw = glm_now();
    pthread_mutex_init(&p->mu, NULL);
}

static void fmt_eta(char *buf, size_t n, double s) {
    if (s < 0 || s > 1e7) {
        snprintf(buf, n, "--:--");
        return;
    }
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, n, "%02d:%02d", t / 60, t % 60);
}

static void draw(glm_progress *p, double now, bool final) {
    double el = now - p->t0 > 1e-9 ? now - p->t0 : 1e-9;
    double rate = (double)p->done / el, mbs = (double)p->bytes / el / 1e6;
    double frac = -1;
    if (p->total_bytes > 0) frac = (double)p->bytes / (double)p->total_bytes;
    else if (p->total > 0) frac = (double)p->done / (double)p->total;
    char eta[32] = "";
    if (frac > 0 && !final) {
        char t[24];
        fmt_eta(t, sizeof t, el * (1 - frac) / frac);
        snprintf(eta, sizeof eta, " ETA %s", t);
    }
    char pct[16] = "";
    if (frac >= 0) snprintf(pct, sizeof pct, " %3.0f%%", 100 * (frac > 1 ? 1 : frac));
    char total[32] = "";
    if (p->total > 0) snprintf(total, sizeof total, "/%lld", (long long)p->total);
    char mb[32] = "";
    if (p->bytes > 0) snprintf(mb, sizeof mb, ", %.1f MB/s", mbs);
    glm_log_status(p->tty, "%s:%s %lld%s %s, %.1f %s/s%s%s", p->label, pct, (long long)p->done, total, p->unit, rate,
                   p->unit, mb, eta);
    if (final) glm_log_status_end();
}

void glm_progress_add(glm_progress *p, int64_t n, int64_t nbytes) {
    if (!p->enabled) return;
    pthread_mutex_lock(&p->mu);
    p->done += n;
    p->bytes += nbytes;
    double now = glm_now();
    if (now - p->last_draw >= (p->tty ? 0.1 : 30.0)) {
        p->last_draw = now;
        draw(p, now, false);
    }
    pthread_mutex_unlock(&p->mu);
}

void glm_progress_finish(glm_progress *p) {
    if (!p->enabled) return;
    pthread_mutex_lock(&p->mu);
    draw(p, glm_now(), true);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    p->enabled = false;
}
