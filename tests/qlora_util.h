/* tests/qlora_util.h: the QLoRA tests' batch and adapter (tests/lora/test_qlora.c, tests/dist/test_qlora_mpi.c). */
#ifndef GLM_TESTS_QLORA_UTIL_H
#define GLM_TESTS_QLORA_UTIL_H

#include <stdint.h>

#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "tests/check.h"

enum { QLORA_T = 40 };

/* One row of QLORA_T tokens drawn from `seed`: two documents (24 + 16), targets after the first
 * token of each. */
static inline void qlora_batch(uint64_t seed, int V, uint32_t *ids, uint8_t *tg, int32_t *pos, int32_t *doc, glm_batch *b) {
    uint64_t s = seed;
    for (int t = 0; t < QLORA_T; t++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[t] = (uint32_t)((s >> 33) % (uint64_t)V);
        doc[t] = t < 24 ? 0 : 1;
        pos[t] = t < 24 ? t : t - 24;
        tg[t] = pos[t] > 0;
    }
    *b = (glm_batch){1, QLORA_T, ids, tg, pos, doc, NULL};
}

/* A LoRA adapter on every linear with lora_B set to a fixed pattern (so lora_A's grads are not 0). */
static inline glm_lora *qlora_adapter(glm_model *m) {
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    glm_lora *l = NULL;
    CHECK(glm_lora_create(m, &lc, 11, &l) == GLM_OK, "lora: %s", glm_errmsg());
    if (!l) return NULL;
    for (int i = 1; i < l->n_params; i += 2)
        for (int64_t k = 0; k < l->params[i].numel; k++) l->params[i].w[k] = 0.01f * (float)((k * 7 + i) % 13 - 6);
    return l;
}

#endif
