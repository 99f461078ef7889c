#define _GNU_SOURCE
/* tests/lora/test_metrics.c: metrics.jsonl lines, the TensorBoard event file parsed back here
 * (TFRecord CRCs, Event / Summary fields), and the loss SVG (well-formed tags, polylines). */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "tool/train/metrics.h"
#include "tests/check.h"

static char g_tmp[256];

/* ---- a tiny protobuf reader ---- */
static uint64_t rd_varint(const unsigned char **p, const unsigned char *end) {
    uint64_t v = 0;
    int sh = 0;
    while (*p < end) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) break;
        sh += 7;
    }
    return v;
}

typedef struct {
    double wall;
    int64_t step;
    char version[32];
    char tag[64];
    float value;
    int n_values;
} event;

static int parse_event(const unsigned char *p, const unsigned char *end, event *e) {
    memset(e, 0, sizeof(*e));
    while (p < end) {
        uint64_t key = rd_varint(&p, end);
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (wt == 1) {
            if (field == 1) memcpy(&e->wall, p, 8);
            p += 8;
        } else if (wt == 0) {
            uint64_t v = rd_varint(&p, end);
            if (field == 2) e->step = (int64_t)v;
        } else if (wt == 2) {
            uint64_t n = rd_varint(&p, end);
            const unsigned char *q = p, *qend = p + n;
            if (field == 3) snprintf(e->version, sizeof e->version, "%.*s", (int)n, (const char *)q);
            if (field == 5) { /* Summary */
                while (q < qend) {
                    uint64_t k2 = rd_varint(&q, qend);
                    uint64_t n2 = rd_varint(&q, qend);
                    if (k2 != (1 << 3 | 2)) return -1;
                    const unsigned char *v = q, *vend = q + n2;
                    e->n_values++;
                    while (v < vend) { /* Value */
                        uint64_t k3 = rd_varint(&v, vend);
                        if (k3 == (1 << 3 | 2)) {
                            uint64_t n3 = rd_varint(&v, vend);
                            snprintf(e->tag, sizeof e->tag, "%.*s", (int)n3, (const char *)v);
                            v += n3;
                        } else if (k3 == (2 << 3 | 5)) {
                            memcpy(&e->value, v, 4);
                            v += 4;
                        } else {
                            return -1;
                        }
                    }
                    q = vend;
                }
            }
            p = qend;
        } else if (wt == 5) {
            p += 4;
        } else {
            return -1;
        }
    }
    return 0;
}

static void test_events_and_jsonl(void) {
    glm_metrics m;
    CHECK(glm_metrics_open(&m, g_tmp, true) == GLM_OK, "open: %s", glm_errmsg());
    glm_metrics_rec r1 = glm_metrics_rec_empty(1);
    r1.epoch = 0.01;
    r1.loss = 2.5;
    r1.grad_norm = 1.25;
    r1.learning_rate = 1e-4;
    r1.target_tokens = 4096;
    r1.tokens_per_second = 5000;
    glm_metrics_rec r2 = r1;
    r2.step = 2;
    r2.loss = 2.25;
    glm_metrics_rec r3 = glm_metrics_rec_empty(2);
    r3.eval_loss = 2.0;
    r3.eval_perplexity = exp(2.0);
    CHECK(glm_metrics_log(&m, &r1) == GLM_OK && glm_metrics_log(&m, &r2) == GLM_OK &&
              glm_metrics_log(&m, &r3) == GLM_OK, "log");
    char *events = strdup(m.events_path);
    glm_metrics_close(&m);

    /* metrics.jsonl */
    char *jp = glm_path_join(g_tmp, "metrics.jsonl"), *text;
    size_t len;
    CHECK(glm_read_file(jp, &text, &len) == GLM_OK, "read jsonl");
    int lines = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
        json_error_t je;
        json_t *o = json_loads(l, 0, &je);
        CHECK(o != NULL, "line %d parses: %s", lines, je.text);
        if (!o) continue;
        if (lines == 0)
            CHECK(json_integer_value(json_object_get(o, "step")) == 1 &&
                      json_real_value(json_object_get(o, "loss")) == 2.5 &&
                      json_integer_value(json_object_get(o, "target_tokens")) == 4096 &&
                      json_real_value(json_object_get(o, "learning_rate")) == 1e-4 &&
                      json_object_get(o, "grad_norm") && json_object_get(o, "epoch") &&
                      json_object_get(o, "tokens_per_second") && !json_object_get(o, "eval_loss"),
                  "line 1 fields");
        if (lines == 2)
            CHECK(json_real_value(json_object_get(o, "eval_loss")) == 2.0 &&
                      fabs(json_real_value(json_object_get(o, "eval_perplexity")) - exp(2.0)) < 1e-6 &&
                      !json_object_get(o, "loss"), "eval line fields");
        json_decref(o);
    }
    CHECK(lines == 3, "3 lines, got %d", lines);
    free(text);
    /* appending on reopen (resume) */
    CHECK(glm_metrics_open(&m, g_tmp, false) == GLM_OK && m.events == NULL, "reopen without tb");
    glm_metrics_log(&m, &r1);
    glm_metrics_close(&m);
    glm_read_file(jp, &text, &len);
    int nl = 0;
    for (size_t i = 0; i < len; i++) nl += text[i] == '\n';
    CHECK(nl == 4, "appended: %d lines", nl);
    free(text);
    free(jp);

    /* the event file, record by record */
    CHECK(strstr(events, "/runs/events.out.tfevents.") != NULL, "event file name %s", events);
    CHECK(glm_read_file(events, &text, &len) == GLM_OK, "read events");
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    int nrec = 0, bad_crc = 0, n_scalars = 0;
    bool saw_loss2 = false, saw_eval = false, version_first = false;
    while (p < end) {
        if (end - p < 16) {
            CHECK(0, "trailing %td bytes", end - p);
            break;
        }
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
        uint32_t lc = p[8] | p[9] << 8 | p[10] << 16 | (uint32_t)p[11] << 24;
        if (lc != glm_crc32c_masked(p, 8)) bad_crc++;
        const unsigned char *d = p + 12;
        if ((uint64_t)(end - d) < n + 4) {
            CHECK(0, "record overruns the file");
            break;
        }
        uint32_t dc = d[n] | d[n + 1] << 8 | d[n + 2] << 16 | (uint32_t)d[n + 3] << 24;
        if (dc != glm_crc32c_masked(d, n)) bad_crc++;
        event e;
        CHECK(parse_event(d, d + n, &e) == 0, "record %d parses", nrec);
        CHECK(e.wall > 1.5e9, "wall time %f", e.wall);
        if (nrec == 0) version_first = strcmp(e.version, "brain.Event:2") == 0;
        if (e.n_values) {
            n_scalars++;
            CHECK(e.n_values == 1, "one value per event");
            if (e.step == 2 && strcmp(e.tag, "train/loss") == 0) saw_loss2 = e.value == 2.25f;
            if (e.step == 2 && strcmp(e.tag, "eval/loss") == 0) saw_eval = e.value == 2.0f;
        }
        p = d + n + 4;
        nrec++;
    }
    CHECK(bad_crc == 0, "%d bad CRCs", bad_crc);
    CHECK(version_first, "first record is file_version brain.Event:2");
    CHECK(n_scalars == 5 + 5 + 2, "scalar events %d", n_scalars);
    CHECK(saw_loss2 && saw_eval, "train/loss at step 2 and eval/loss");
    /* a known CRC: masked crc32c of "" per TensorFlow = mask(0) = 0xa282ead8 */
    CHECK(glm_crc32c_masked("", 0) == 0xa282ead8u, "masked crc of empty");
    free(text);
    printf("  event file: %d records, CRCs ok\n", nrec);
    free(events);
}

/* Checks that every element opened is closed in order; returns the number of elements. */
static int check_tags(const char *s) {
    const char *stack[256];
    size_t lens[256];
    int depth = 0, count = 0;
    for (const char *p = strchr(s, '<'); p; p = strchr(p + 1, '<')) {
        if (p[1] == '?' || p[1] == '!') continue;
        const char *gt = strchr(p, '>');
        if (!gt) return -1;
        if (p[1] == '/') {
            size_t n = strcspn(p + 2, " >");
            if (depth == 0 || lens[depth - 1] != n || strncmp(stack[depth - 1], p + 2, n) != 0) return -1;
            depth--;
        } else {
            count++;
            if (gt[-1] == '/') continue;
            if (depth == 256) return -1;
            stack[depth] = p + 1;
            lens[depth++] = strcspn(p + 1, " />");
        }
    }
    return depth == 0 ? count : -1;
}

static int count_points(const char *svg, const char *cls) {
    char key[64];
    snprintf(key, sizeof key, "class=\"%s\"", cls);
    const char *p = strstr(svg, key);
    if (!p) return -1;
    p = strstr(p, "points=\"");
    if (!p) return -1;
    p += 8;
    int n = 0;
    for (; *p && *p != '"'; p++) n += *p == ',';
    return n;
}

static void test_svg(void) {
    int64_t ts[50], es[5];
    double tl[50], el[5];
    for (int i = 0; i < 50; i++) {
        ts[i] = (i + 1) * 10;
        tl[i] = 3.0 * exp(-i / 20.0) + 0.3 * sin(i);
    }
    tl[7] = NAN; /* a non-finite point is skipped, not drawn */
    for (int i = 0; i < 5; i++) {
        es[i] = (i + 1) * 100;
        el[i] = 2.5 - 0.2 * i;
    }
    char *p = glm_path_join(g_tmp, "loss.svg"), *text;
    size_t len;
    CHECK(glm_plot_loss_svg(p, ts, tl, 50, es, el, 5) == GLM_OK, "svg: %s", glm_errmsg());
    CHECK(glm_read_file(p, &text, &len) == GLM_OK, "read svg");
    int n = check_tags(text);
    CHECK(n > 20, "tags balance (%d elements)", n);
    CHECK(strstr(text, "<svg") && strstr(text, "</svg>"), "svg root");
    CHECK(count_points(text, "train-raw") == 49 && count_points(text, "train-smoothed") == 49 &&
              count_points(text, "eval") == 5, "polylines %d %d %d", count_points(text, "train-raw"),
          count_points(text, "train-smoothed"), count_points(text, "eval"));
    CHECK(strstr(text, ">step<") && strstr(text, ">loss<") && strstr(text, ">500<"), "axis labels and ticks");
    CHECK(!strstr(text, "nan") && !strstr(text, "inf"), "no nan/inf in coordinates");
    free(text);
    /* empty plot is fine; only-NaN is an error */
    CHECK(glm_plot_loss_svg(p, NULL, NULL, 0, NULL, NULL, 0) == GLM_OK, "empty plot");
    glm_read_file(p, &text, &len);
    CHECK(check_tags(text) > 0 && strstr(text, "no data yet"), "empty plot well-formed");
    free(text);
    double nanv[1] = {NAN};
    int64_t s1[1] = {1};
    CHECK(glm_plot_loss_svg(p, s1, nanv, 1, NULL, NULL, 0) == GLM_ERR_ARG, "all-NaN refused");
    /* a single point (flat ranges) */
    double one[1] = {1.5};
    CHECK(glm_plot_loss_svg(p, s1, one, 1, NULL, NULL, 0) == GLM_OK, "one point");
    glm_read_file(p, &text, &len);
    CHECK(check_tags(text) > 0 && !strstr(text, "nan"), "one point ok");
    free(text);
    free(p);
}

/* Resume: metrics.jsonl keeps the lines up to the checkpoint's step (eval lines of that step
 * included), drops later ones and a line torn by a kill. */
static void test_truncate(void) {
    char *d = glm_path_join(g_tmp, "trunc"), *p;
    glm_mkdir_p(d);
    p = glm_path_join(d, "metrics.jsonl");
    const char *text = "{\"step\": 1, \"loss\": 3.0}\n{\"step\": 2, \"loss\": 2.5}\n{\"step\": 2, \"eval_loss\": 2.4}\n"
                       "{\"step\": 3, \"loss\": 2.25}\n{\"step\": 4, \"lo";
    glm_write_file_atomic(p, text, strlen(text));
    int64_t dropped = -1;
    CHECK(glm_metrics_truncate(d, 2, &dropped) == GLM_OK && dropped == 2, "truncate: %s, dropped %lld", glm_errmsg(),
          (long long)dropped);
    char *got;
    size_t n;
    glm_read_file(p, &got, &n);
    CHECK(!strcmp(got, "{\"step\": 1, \"loss\": 3.0}\n{\"step\": 2, \"loss\": 2.5}\n{\"step\": 2, \"eval_loss\": 2.4}\n"),
          "kept: %s", got);
    free(got);
    char *none = glm_path_join(g_tmp, "nothing-here");
    CHECK(glm_metrics_truncate(none, 5, &dropped) == GLM_OK && dropped == 0, "no metrics.jsonl is fine");
    free(none);
    free(p);
    free(d);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/glm_test_metrics_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    test_events_and_jsonl();
    test_truncate();
    test_svg();
    glm_rmtree(g_tmp);
    return check_summary("test_metrics");
}
