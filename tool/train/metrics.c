#define _GNU_SOURCE
/* tool/train/metrics.c: metrics.jsonl, TensorBoard event files, loss-curve SVG (see metrics.h). */
#include "tool/train/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/pyjson.h"

glm_metrics_rec glm_metrics_rec_empty(int64_t step) {
    glm_metrics_rec r = {.step = step, .epoch = NAN, .loss = NAN, .grad_norm = NAN,
                         .learning_rate = NAN, .target_tokens = -1, .tokens_per_second = NAN,
                         .eval_loss = NAN, .eval_perplexity = NAN, .comm_share = NAN};
    return r;
}

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* ------------------------------------------------------------------ protobuf + TFRecord */

typedef struct {
    unsigned char b[1024];
    size_t n;
    bool overflow;
} pbuf;

static void pb_bytes(pbuf *p, const void *d, size_t n) {
    if (p->n + n > sizeof p->b) {
        p->overflow = true;
        return;
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void pb_varint(pbuf *p, uint64_t v) {
    unsigned char t[10];
    size_t k = 0;
    do {
        t[k] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    pb_bytes(p, t, k);
}
static void pb_le(pbuf *p, uint64_t v, int nbytes) {
    unsigned char t[8];
    for (int i = 0; i < nbytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    pb_bytes(p, t, (size_t)nbytes);
}
static void pb_double(pbuf *p, int field, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    pb_varint(p, (uint64_t)(field << 3 | 1));
    pb_le(p, u, 8);
}
static void pb_float(pbuf *p, int field, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    pb_varint(p, (uint64_t)(field << 3 | 5));
    pb_le(p, u, 4);
}
static void pb_len(pbuf *p, int field, const void *d, size_t n) {
    pb_varint(p, (uint64_t)(field << 3 | 2));
    pb_varint(p, n);
    pb_bytes(p, d, n);
}

glm_status glm_tfrecord_write(FILE *f, const void *data, size_t n) {
    unsigned char hdr[12];
    for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)((uint64_t)n >> (8 * i));
    uint32_t lc = glm_crc32c_masked(hdr, 8);
    for (int i = 0; i < 4; i++) hdr[8 + i] = (unsigned char)(lc >> (8 * i));
    uint32_t dc = glm_crc32c_masked(data, n);
    unsigned char foot[4];
    for (int i = 0; i < 4; i++) foot[i] = (unsigned char)(dc >> (8 * i));
    if (fwrite(hdr, 1, 12, f) != 12 || fwrite(data, 1, n, f) != n || fwrite(foot, 1, 4, f) != 4)
        return glm_err(GLM_ERR_IO, "TensorBoard event file: write failed: %s", strerror(errno));
    return GLM_OK;
}

glm_status glm_tb_write_version(FILE *f, double wall_time) {
    pbuf p = {.n = 0};
    pb_double(&p, 1, wall_time);
    pb_len(&p, 3, "brain.Event:2", 13);
    return glm_tfrecord_write(f, p.b, p.n);
}

glm_status glm_tb_write_session_start(FILE *f, double wall_time, int64_t step) {
    pbuf sl = {.n = 0}, ev = {.n = 0};
    pb_varint(&sl, 1 << 3 | 0); /* SessionLog.status */
    pb_varint(&sl, 1);          /* START */
    pb_double(&ev, 1, wall_time);
    pb_varint(&ev, 2 << 3 | 0);
    pb_varint(&ev, (uint64_t)step);
    pb_len(&ev, 7, sl.b, sl.n); /* Event.session_log */
    return glm_tfrecord_write(f, ev.b, ev.n);
}

glm_status glm_tb_write_scalar(FILE *f, double wall_time, int64_t step, const char *tag, float value) {
    pbuf val = {.n = 0}, sum = {.n = 0}, ev = {.n = 0};
    pb_len(&val, 1, tag, strlen(tag));
    pb_float(&val, 2, value);
    pb_len(&sum, 1, val.b, val.n);
    pb_double(&ev, 1, wall_time);
    pb_varint(&ev, 2 << 3 | 0);
    pb_varint(&ev, (uint64_t)step);
    pb_len(&ev, 5, sum.b, sum.n);
    if (val.overflow || sum.overflow || ev.overflow)
        return glm_err(GLM_ERR_ARG, "TensorBoard tag '%.40s...' is too long", tag);
    return glm_tfrecord_write(f, ev.b, ev.n);
}

/* ------------------------------------------------------------------ metrics.jsonl */

char *glm_metrics_json_line(const glm_metrics_rec *r) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "step", json_integer(r->step));
#define PUT(key, v) \
    if (isfinite(v)) json_object_set_new(o, key, json_real(v))
    PUT("epoch", r->epoch);
    PUT("loss", r->loss);
    PUT("grad_norm", r->grad_norm);
    PUT("learning_rate", r->learning_rate);
    if (r->target_tokens >= 0) json_object_set_new(o, "target_tokens", json_integer(r->target_tokens));
    PUT("tokens_per_second", r->tokens_per_second);
    if (r->n_ranks > 1 && r->tokens_per_second_rank) {
        json_t *a = json_array();
        for (int i = 0; i < r->n_ranks; i++) json_array_append_new(a, json_real(r->tokens_per_second_rank[i]));
        json_object_set_new(o, "tokens_per_second_per_rank", a);
        PUT("comm_exposed_share", r->comm_share);
        if (r->comm_bytes) {
            static const char *kinds[] = {"all_reduce", "all_gather", "sendrecv", "host"};
            json_t *cb = json_object();
            for (int k = 0; k < 4; k++) json_object_set_new(cb, kinds[k], json_real(r->comm_bytes[k]));
            json_object_set_new(o, "comm_bytes_per_step", cb);
        }
    }
    PUT("eval_loss", r->eval_loss);
    PUT("eval_perplexity", r->eval_perplexity);
#undef PUT
    char *s = glm_tojson(o, -1); /* Python's json.dumps text: shortest round-trip floats */
    json_decref(o);
    return s;
}

glm_status glm_metrics_open(glm_metrics *m, const char *dir, bool tensorboard) {
    memset(m, 0, sizeof(*m));
    GLM_TRY(glm_mkdir_p(dir));
    char *jp = glm_path_join(dir, "metrics.jsonl");
    if (!jp) return glm_err(GLM_ERR_NOMEM, "out of memory");
    m->jsonl = fopen(jp, "a");
    if (!m->jsonl) {
        glm_status st = glm_err(GLM_ERR_IO, "%s: cannot open for appending: %s", jp, strerror(errno));
        free(jp);
        return st;
    }
    free(jp);
    if (!tensorboard) return GLM_OK;
    char *runs = glm_path_join(dir, "runs");
    glm_status st = runs ? glm_mkdir_p(runs) : glm_err(GLM_ERR_NOMEM, "out of memory");
    char host[128] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    double t = now_s();
    long long secs = (long long)t;
    /* later than every event file there: readers take the files in name order */
    DIR *d = st == GLM_OK ? opendir(runs) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long long s2;
        if (sscanf(e->d_name, "events.out.tfevents.%lld.", &s2) == 1 && s2 >= secs) secs = s2 + 1;
    }
    if (d) closedir(d);
    if (st == GLM_OK &&
        asprintf(&m->events_path, "%s/events.out.tfevents.%lld.%s.%d", runs, secs, host, (int)getpid()) < 0) {
        m->events_path = NULL;
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    free(runs);
    if (st == GLM_OK) {
        m->events = fopen(m->events_path, "wb");
        if (!m->events) st = glm_err(GLM_ERR_IO, "%s: cannot create: %s", m->events_path, strerror(errno));
    }
    if (st == GLM_OK) st = glm_tb_write_version(m->events, t);
    if (st == GLM_OK && fflush(m->events) != 0)
        st = glm_err(GLM_ERR_IO, "%s: write failed: %s", m->events_path, strerror(errno));
    if (st != GLM_OK) glm_metrics_close(m);
    return st;
}

glm_status glm_metrics_log(glm_metrics *m, const glm_metrics_rec *r) {
    if (m->jsonl) {
        char *line = glm_metrics_json_line(r);
        if (!line) return glm_err(GLM_ERR_NOMEM, "out of memory");
        int bad = fprintf(m->jsonl, "%s\n", line) < 0 || fflush(m->jsonl) != 0;
        free(line);
        if (bad) return glm_err(GLM_ERR_IO, "metrics.jsonl: write failed: %s", strerror(errno));
    }
    if (m->events) {
        double t = now_s(), per_rank = NAN;
        if (r->n_ranks > 1 && r->tokens_per_second_rank) {
            per_rank = 0;
            for (int i = 0; i < r->n_ranks; i++) per_rank += r->tokens_per_second_rank[i] / r->n_ranks;
        }
        struct {
            const char *tag;
            double v;
        } s[] = {{"train/loss", r->loss},
                 {"train/grad_norm", r->grad_norm},
                 {"train/learning_rate", r->learning_rate},
                 {"train/tokens_per_second", r->tokens_per_second},
                 {"train/tokens_per_second_per_rank", per_rank},
                 {"train/comm_exposed_share", r->n_ranks > 1 ? r->comm_share : NAN},
                 {"train/epoch", r->epoch},
                 {"eval/loss", r->eval_loss},
                 {"eval/perplexity", r->eval_perplexity}};
        for (size_t i = 0; i < sizeof s / sizeof *s; i++)
            if (isfinite(s[i].v)) GLM_TRY(glm_tb_write_scalar(m->events, t, r->step, s[i].tag, (float)s[i].v));
        if (fflush(m->events) != 0)
            return glm_err(GLM_ERR_IO, "%s: write failed: %s", m->events_path, strerror(errno));
    }
    return GLM_OK;
}

glm_status glm_metrics_restart(glm_metrics *m, int64_t step) {
    if (!m->events) return GLM_OK;
    GLM_TRY(glm_tb_write_session_start(m->events, now_s(), step + 1));
    if (fflush(m->events) != 0) return glm_err(GLM_ERR_IO, "%s: write failed: %s", m->events_path, strerror(errno));
    return GLM_OK;
}

glm_status glm_metrics_truncate(const char *dir, int64_t step, int64_t *dropped) {
    if (dropped) *dropped = 0;
    char *path = glm_path_join(dir, "metrics.jsonl");
    if (!path) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (!glm_is_file(path)) {
        free(path);
        return GLM_OK;
    }
    char *text = NULL;
    size_t len = 0;
    glm_status st = glm_read_file(path, &text, &len);
    char *out = st == GLM_OK ? malloc(len + 1) : NULL;
    if (st == GLM_OK && !out) st = glm_err(GLM_ERR_NOMEM, "out of memory");
    size_t n = 0;
    int64_t gone = 0;
    for (char *line = text; st == GLM_OK && line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
        json_t *o = json_loadb(line, ll, 0, NULL);
        json_t *sj = json_object_get(o, "step");
        if (json_is_integer(sj) && json_integer_value(sj) <= step) {
            memcpy(out + n, line, ll);
            n += ll;
            out[n++] = '\n';
        } else if (ll) {
            gone++;
        }
        json_decref(o);
        line += ll + 1;
    }
    if (st == GLM_OK && gone) st = glm_write_file_atomic(path, out, n);
    if (dropped) *dropped = gone;
    free(out);
    free(text);
    free(path);
    return st;
}

void glm_metrics_close(glm_metrics *m) {
    if (m->jsonl) fclose(m->jsonl);
    if (m->events) fclose(m->events);
    free(m->events_path);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------ SVG */

/* A "nice" tick step (1, 2 or 5 x 10^k) giving about `target` ticks over span. */
static double nice_step(double span, int target) {
    if (!(span > 0)) return 1;
    double raw = span / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double nf = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
    return nf * mag;
}

static void fmt_num(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 8) dec = 8;
    snprintf(buf, n, "%.*f", dec, v);
}

glm_status glm_plot_loss_svg(const char *path, const int64_t *train_step, const double *train_loss,
                             size_t n_train, const int64_t *eval_step, const double *eval_loss,
                             size_t n_eval) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    size_t npts = 0;
    for (size_t i = 0; i < n_train; i++)
        if (isfinite(train_loss[i])) {
            xmin = fmin(xmin, (double)train_step[i]);
            xmax = fmax(xmax, (double)train_step[i]);
            ymin = fmin(ymin, train_loss[i]);
            ymax = fmax(ymax, train_loss[i]);
            npts++;
        }
    for (size_t i = 0; i < n_eval; i++)
        if (isfinite(eval_loss[i])) {
            xmin = fmin(xmin, (double)eval_step[i]);
            xmax = fmax(xmax, (double)eval_step[i]);
            ymin = fmin(ymin, eval_loss[i]);
            ymax = fmax(ymax, eval_loss[i]);
            npts++;
        }
    if (npts == 0 && (n_train || n_eval))
        return glm_err(GLM_ERR_ARG, "%s: no finite loss values to plot", path);
    if (npts == 0) {
        xmin = 0;
        xmax = 1;
        ymin = 0;
        ymax = 1;
    }
    if (xmax <= xmin) xmax = xmin + 1;
    if (ymax <= ymin) {
        ymax += 0.5;
        ymin -= 0.5;
    }
    double xs = nice_step(xmax - xmin, 8), ys = nice_step(ymax - ymin, 6);
    double x0 = floor(xmin / xs) * xs, x1 = ceil(xmax / xs) * xs;
    double y0 = floor(ymin / ys) * ys, y1 = ceil(ymax / ys) * ys;
    const double W = 800, H = 500, L = 70, R = 20, T = 40, B = 60;
    const double pw = W - L - R, ph = H - T - B;
#define PX(x) (L + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (T + (1 - ((y) - y0) / (y1 - y0)) * ph)
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return glm_err(GLM_ERR_NOMEM, "out of memory");
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">training loss</text>\n", W / 2);
    /* grid, ticks, labels */
    fprintf(f, "<g stroke=\"#dddddd\" stroke-width=\"1\">\n");
    for (double x = x0; x <= x1 + xs * 1e-9; x += xs)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", PX(x), T, PX(x), T + ph);
    for (double y = y0; y <= y1 + ys * 1e-9; y += ys)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", L, PY(y), L + pw, PY(y));
    fprintf(f, "</g>\n<g stroke=\"black\" stroke-width=\"1\">\n");
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", L, T + ph, L + pw, T + ph);
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", L, T, L, T + ph);
    fprintf(f, "</g>\n<g fill=\"black\">\n");
    char lab[64];
    for (double x = x0; x <= x1 + xs * 1e-9; x += xs) {
        fmt_num(lab, sizeof lab, x, xs);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\"/>"
                   "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
                PX(x), T + ph, PX(x), T + ph + 5, PX(x), T + ph + 18, lab);
    }
    for (double y = y0; y <= y1 + ys * 1e-9; y += ys) {
        fmt_num(lab, sizeof lab, y, ys);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\"/>"
                   "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n",
                L - 5, PY(y), L, PY(y), L - 8, PY(y) + 4, lab);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", L + pw / 2, H - 15);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">loss</text>\n",
            T + ph / 2, T + ph / 2);
    fprintf(f, "</g>\n");
    if (npts == 0)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"gray\">no data yet</text>\n",
                L + pw / 2, T + ph / 2);
    /* train: raw + smoothed (LLaMA-Factory plot_loss) */
    if (n_train) {
        double wgt = 1.8 * (1.0 / (1.0 + exp(-0.05 * (double)n_train)) - 0.5), last = NAN;
        fprintf(f, "<polyline class=\"train-raw\" fill=\"none\" stroke=\"#1f77b4\" stroke-opacity=\"0.4\" "
                   "stroke-width=\"1\" points=\"");
        for (size_t i = 0; i < n_train; i++)
            if (isfinite(train_loss[i])) fprintf(f, "%.2f,%.2f ", PX((double)train_step[i]), PY(train_loss[i]));
        fprintf(f, "\"/>\n<polyline class=\"train-smoothed\" fill=\"none\" stroke=\"#1f77b4\" "
                   "stroke-width=\"2\" points=\"");
        for (size_t i = 0; i < n_train; i++) {
            if (!isfinite(train_loss[i])) continue;
            last = isfinite(last) ? last * wgt + (1 - wgt) * train_loss[i] : train_loss[i];
            fprintf(f, "%.2f,%.2f ", PX((double)train_step[i]), PY(last));
        }
        fprintf(f, "\"/>\n");
    }
    if (n_eval) {
        fprintf(f, "<polyline class=\"eval\" fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
        for (size_t i = 0; i < n_eval; i++)
            if (isfinite(eval_loss[i])) fprintf(f, "%.2f,%.2f ", PX((double)eval_step[i]), PY(eval_loss[i]));
        fprintf(f, "\"/>\n<g fill=\"#ff7f0e\">\n");
        for (size_t i = 0; i < n_eval; i++)
            if (isfinite(eval_loss[i]))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/>\n", PX((double)eval_step[i]), PY(eval_loss[i]));
        fprintf(f, "</g>\n");
    }
    /* legend */
    double lx = L + pw - 150, ly = T + 10;
    fprintf(f, "<g>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"145\" height=\"62\" fill=\"white\" stroke=\"#999999\"/>\n",
            lx, ly);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-opacity=\"0.4\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">train (raw)</text>\n",
            lx + 8, ly + 14, lx + 32, ly + 14, lx + 38, ly + 18);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">train (smoothed)</text>\n",
            lx + 8, ly + 32, lx + 32, ly + 32, lx + 38, ly + 36);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">eval</text>\n</g>\n",
            lx + 8, ly + 50, lx + 32, ly + 50, lx + 38, ly + 54);
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    if (fclose(f) != 0 || !text) {
        free(text);
        return glm_err(GLM_ERR_NOMEM, "out of memory (SVG)");
    }
    glm_status st = glm_write_file_atomic(path, text, len);
    free(text);
    return st;
}
