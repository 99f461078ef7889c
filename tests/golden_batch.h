/* tests/golden_batch.h: the packed batch of tests/fixtures/tiny-glm4/<layout>/golden.safetensors
 * (input_ids, labels, position_ids, doc_lens, n_target_tokens, loss) as the arrays glm_batch
 * takes, for the model tests of both backends. Include after tests/check.h. */
#ifndef GLM_TESTS_GOLDEN_BATCH_H
#define GLM_TESTS_GOLDEN_BATCH_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lora/model/model.h"
#include "common/safetensors.h"

typedef struct golden {
    glm_st_set *set;
    int B, T;
    uint32_t *ids;     /* [B*T] */
    uint8_t *targets;  /* [B*T]: labels != -100 */
    int32_t *pos, *doc;
    int64_t n_target;  /* n_target_tokens */
    double loss;       /* the golden loss (with adapter_init) */
} golden;

static inline int64_t golden_i64(const glm_st_tensor *t, int64_t i) { return ((const int64_t *)t->data)[i]; }

/* Loads <fixtures>/<layout>/golden.safetensors; returns 1, or 0 after a failed CHECK. */
static inline int golden_load(const char *fixtures, const char *layout, golden *g) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/golden.safetensors", fixtures, layout);
    memset(g, 0, sizeof *g);
    if (glm_st_open(path, &g->set) != GLM_OK) {
        CHECK(0, "open %s: %s", path, glm_errmsg());
        return 0;
    }
    const glm_st_tensor *ids = glm_st_find(g->set, "input_ids"), *lab = glm_st_find(g->set, "labels");
    const glm_st_tensor *pos = glm_st_find(g->set, "position_ids"), *dl = glm_st_find(g->set, "doc_lens");
    const glm_st_tensor *nt = glm_st_find(g->set, "n_target_tokens"), *loss = glm_st_find(g->set, "loss");
    if (!ids || !lab || !pos || !dl || !nt || !loss || ids->dtype != GLM_ST_I64) {
        CHECK(0, "golden tensors missing in %s", path);
        return 0;
    }
    g->B = (int)ids->shape[0];
    g->T = (int)ids->shape[1];
    int64_t N = (int64_t)g->B * g->T;
    g->ids = malloc(N * 4);
    g->targets = malloc(N);
    g->pos = malloc(N * 4);
    g->doc = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) {
        g->ids[i] = (uint32_t)golden_i64(ids, i);
        g->targets[i] = golden_i64(lab, i) != -100;
        g->pos[i] = (int32_t)golden_i64(pos, i);
    }
    for (int b = 0; b < g->B; b++) {
        int t = 0;
        for (int d = 0; d < dl->shape[1]; d++)
            for (int64_t k = 0; k < golden_i64(dl, b * dl->shape[1] + d); k++) g->doc[b * g->T + t++] = d;
        CHECK(t == g->T, "doc_lens of row %d sum to %d, not T = %d", b, t, g->T);
    }
    g->n_target = golden_i64(nt, 0);
    float f = NAN;
    if (loss->dtype == GLM_ST_F64) g->loss = ((const double *)loss->data)[0];
    else if (glm_st_to_f32(loss->dtype, loss->data, 1, &f) == GLM_OK) g->loss = f;
    return 1;
}

static inline void golden_free(golden *g) {
    glm_st_close(g->set);
    free(g->ids);
    free(g->targets);
    free(g->pos);
    free(g->doc);
}

/* Rows [row0, row0 + nrows) as a glm_batch. */
static inline glm_batch golden_batch(const golden *g, int row0, int nrows) {
    glm_batch b = {nrows, g->T, g->ids + row0 * g->T, g->targets + row0 * g->T, g->pos + row0 * g->T,
                   g->doc + row0 * g->T, NULL};
    return b;
}

#endif
