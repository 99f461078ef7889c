/* tests/train_util.h: helpers of the end-to-end training tests (tests/cli/test_train_golden.c,
 * tests/dist/test_train_dp.c, test_train_cp.c): run a command with its output kept in tmp/cmd.log (printed when it fails),
 * read metrics.jsonl, compare two safetensors files tensor by tensor; the test's start (binary,
 * directory); the golden batch as pre-tokenized JSONL. */
#ifndef GLM_TESTS_TRAIN_UTIL_H
#define GLM_TESTS_TRAIN_UTIL_H

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/safetensors.h"

static const char *G;   /* the glmtune binary */
static char tmp[64];    /* the test's directory (made by the test from a mkdtemp template) */

/* The test's start: G from $GLMTUNE and tmp made from the mkdtemp template tmpl ("/tmp/x.XXXXXX").
 * Returns 0, or the exit status for main: 77 (skipped: GLMTUNE not set) or 1. */
static inline int train_test_begin(const char *tmpl) {
    G = getenv("GLMTUNE");
    if (!G) {
        printf("SKIPPED: GLMTUNE (the binary) not set\n");
        return 77;
    }
    snprintf(tmp, sizeof tmp, "%s", tmpl);
    return mkdtemp(tmp) ? 0 : 1;
}

/* Writes the rows of a golden batch (fixtures/tiny-glm4/<layout>/golden.safetensors: input_ids,
 * labels, doc_lens) to f as pre-tokenized JSONL, one line per document, reps times over. */
static inline void golden_rows_jsonl(const glm_st_set *g, FILE *f, int reps) {
    const glm_st_tensor *ids = glm_st_find(g, "input_ids"), *labels = glm_st_find(g, "labels"),
                        *dl = glm_st_find(g, "doc_lens");
    const int64_t *I = ids->data, *Lb = labels->data, *D = dl->data;
    int B = (int)ids->shape[0], T = (int)ids->shape[1], nd = (int)dl->shape[1];
    for (int rep = 0; rep < reps; rep++)
        for (int b = 0; b < B; b++) {
            int off = 0;
            for (int k = 0; k < nd && D[b * nd + k] > 0; k++) {
                fprintf(f, "{\"input_ids\": [");
                for (int t = 0; t < D[b * nd + k]; t++) fprintf(f, "%s%lld", t ? ", " : "", (long long)I[b * T + off + t]);
                fprintf(f, "], \"labels\": [");
                for (int t = 0; t < D[b * nd + k]; t++) fprintf(f, "%s%lld", t ? ", " : "", (long long)Lb[b * T + off + t]);
                fprintf(f, "]}\n");
                off += (int)D[b * nd + k];
            }
        }
}

static inline int run(const char *fmt, ...) {
    char *cmd, *full, *lp;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&cmd, fmt, ap) < 0) return -1;
    va_end(ap);
    if (asprintf(&full, "%s >%s/cmd.log 2>&1", cmd, tmp) < 0) return -1;
    int rc = system(full);
    if (rc != 0) {
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
        char *log = NULL;
        size_t n;
        if (asprintf(&lp, "%s/cmd.log", tmp) >= 0) {
            if (glm_read_file(lp, &log, &n) == GLM_OK) fputs(log, stderr);
            free(lp);
        }
        free(log);
    }
    free(cmd);
    free(full);
    return rc;
}

/* The metrics.jsonl lines of a run, as parsed objects (a JSON array; the caller decrefs). */
static inline json_t *metrics(const char *dir) {
    char *p, *data = NULL;
    size_t n;
    json_t *a = json_array();
    if (asprintf(&p, "%s/metrics.jsonl", dir) < 0 || glm_read_file(p, &data, &n) != GLM_OK) return a;
    free(p);
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        if (j) json_array_append_new(a, j);
    }
    free(data);
    return a;
}

static inline double loss_at(json_t *m, int step) {
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *j = json_array_get(m, i);
        if (json_integer_value(json_object_get(j, "step")) == step && json_object_get(j, "loss"))
            return json_number_value(json_object_get(j, "loss"));
    }
    return NAN;
}

/* Largest over the tensors of a of ||a - b|| / ||b|| (||a - b|| when b is 0); *count compared.
 * Tensors missing in b, or of another size, give infinity. */
static inline double max_rel_diff(const char *pa, const char *pb, int *count) {
    glm_st_set *a, *b;
    *count = 0;
    if (glm_st_open(pa, &a) != GLM_OK) return INFINITY;
    if (glm_st_open(pb, &b) != GLM_OK) {
        glm_st_close(a);
        return INFINITY;
    }
    double worst = glm_st_count(a) == glm_st_count(b) ? 0 : INFINITY;
    for (size_t i = 0; i < glm_st_count(a); i++) {
        const glm_st_tensor *x = glm_st_at(a, i), *y = glm_st_find(b, x->name);
        if (!y || y->numel != x->numel) {
            worst = INFINITY;
            continue;
        }
        float *fx = malloc(4 * (size_t)x->numel), *fy = malloc(4 * (size_t)x->numel);
        glm_st_to_f32(x->dtype, x->data, (size_t)x->numel, fx);
        glm_st_to_f32(y->dtype, y->data, (size_t)y->numel, fy);
        double num = 0, den = 0;
        for (int64_t k = 0; k < x->numel; k++) {
            num += ((double)fx[k] - fy[k]) * ((double)fx[k] - fy[k]);
            den += (double)fy[k] * fy[k];
        }
        double e = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(e <= worst)) worst = e;
        (*count)++;
        free(fx);
        free(fy);
    }
    glm_st_close(a);
    glm_st_close(b);
    return worst;
}

static inline int same_file(const char *a, const char *b) {
    char *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    glm_read_file(a, &da, &na);
    glm_read_file(b, &db, &nb);
    int same = da && db && na == nb && !memcmp(da, db, na);
    free(da);
    free(db);
    return same;
}

/* The strings path() and fmt() return stay allocated for the test program's life, reachable from
 * here (so that LeakSanitizer, tests/sanitize.sh, sees no leak); a test makes a few dozen. */
static char *kept_[512];
static int n_kept_;
static inline char *keep(char *p) {
    if (p && n_kept_ < (int)(sizeof kept_ / sizeof kept_[0])) kept_[n_kept_++] = p;
    return p;
}

/* printf into a kept string (NULL when out of memory). */
static inline __attribute__((format(printf, 1, 2))) char *fmt(const char *f, ...) {
    char *p;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&p, f, ap);
    va_end(ap);
    return n < 0 ? NULL : keep(p);
}

/* tmp/name (a kept string). */
static inline char *path(const char *name) { return fmt("%s/%s", tmp, name); }

#endif
