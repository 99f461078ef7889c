/* tests/lora/test_qlora.c: the 4-bit (QLoRA) base on the CPU backend, the reference. A step on the
 * tiny GLM-4 fixture loaded with --quantization-bit 4 (nf4, with and without double quantization)
 * equals bit for bit a step on a checkpoint whose linear matrices bitsandbytes 0.50.2 quantized and
 * dequantized to bf16 (tests/fixtures/bnb4/tiny-chatglm-nf4*, made by make_qlora_tiny.py): the
 * dequantized weights, the loss and every LoRA gradient. Also: the layer weights really are
 * 4-bit (their bytes), sharding's format helpers, and the plan's count of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/quant4.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "tests/check.h"

enum { T = 40 };

/* One row of T tokens: two documents (24 + 16), targets after the first token of each. */
static void make_batch(int V, uint32_t *ids, uint8_t *tg, int32_t *pos, int32_t *doc, glm_batch *b) {
    uint64_t s = 12345;
    for (int t = 0; t < T; t++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[t] = (uint32_t)((s >> 33) % (uint64_t)V);
        doc[t] = t < 24 ? 0 : 1;
        pos[t] = t < 24 ? t : t - 24;
        tg[t] = pos[t] > 0;
    }
    *b = (glm_batch){1, T, ids, tg, pos, doc, NULL};
}

/* A LoRA adapter on every linear with lora_B set to a fixed pattern (so lora_A's grads are not 0). */
static glm_lora *adapter(glm_model *m) {
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    glm_lora *l = NULL;
    CHECK(glm_lora_create(m, &lc, 11, &l) == GLM_OK, "lora: %s", glm_errmsg());
    if (!l) return NULL;
    for (int i = 1; i < l->n_params; i += 2)
        for (int64_t k = 0; k < l->params[i].numel; k++) l->params[i].w[k] = 0.01f * (float)((k * 7 + i) % 13 - 6);
    return l;
}

static void one(const char *data_dir, const char *src, int dq) {
    const glm_backend *be = glm_backend_cpu();
    char orig[1024], ref[1024];
    snprintf(orig, sizeof orig, "%s/tiny-glm4/chatglm", data_dir);
    snprintf(ref, sizeof ref, "%s/tests/fixtures/bnb4/tiny-chatglm-nf4%s", src, dq ? "-dq" : "");
    glm_base_format f = {4, GLM_WF_NF4, dq, 0};
    glm_model *q = NULL, *d = NULL;
    CHECK(glm_model_load_fmt(orig, be, 0, 0, &f, &q) == GLM_OK, "load nf4%s: %s", dq ? " dq" : "", glm_errmsg());
    CHECK(glm_model_load(ref, be, 0, &d) == GLM_OK, "load the bitsandbytes checkpoint %s: %s", ref, glm_errmsg());
    if (!q || !d) goto out;
    CHECK(!strcmp(glm_base_format_name(q), dq ? "nf4 + double quantization" : "nf4"), "name %s", glm_base_format_name(q));
    /* the stored weights are 4-bit: their buffers' bytes, and dequantized they are bitsandbytes' */
    for (int l = 0; l < q->cfg.L; l++) {
        const glm_weight *qw[4] = {&q->layers[l].wqkv, &q->layers[l].wo, &q->layers[l].w1, &q->layers[l].w2};
        const glm_weight *dw[4] = {&d->layers[l].wqkv, &d->layers[l].wo, &d->layers[l].w1, &d->layers[l].w2};
        for (int i = 0; i < 4; i++) {
            int64_t n = dw[i]->rows * dw[i]->cols;
            CHECK(qw[i]->fmt == GLM_WF_NF4 && qw[i]->n == n && qw[i]->double_quant == dq && (dq ? qw[i]->offset != NULL : 1),
                  "layer %d matrix %d: nf4 of %lld elements", l, i, (long long)n);
            float *x = malloc((size_t)n * 4);
            CHECK(glm_be_weight_dequantize(be, x, GLM_DT_F32, qw[i]) == GLM_OK, "dequantize: %s", glm_errmsg());
            CHECK(!memcmp(x, dw[i]->data, (size_t)n * 4), "layer %d matrix %d: glmtune's dequantized nf4%s == bitsandbytes'",
                  l, i, dq ? " dq" : "");
            free(x);
        }
    }
    /* a training step on each: the same loss and LoRA gradients, bit for bit */
    glm_lora *lq = adapter(q), *ld = adapter(d);
    if (!lq || !ld) goto out2;
    uint32_t ids[T];
    uint8_t tg[T];
    int32_t pos[T], doc[T];
    glm_batch b;
    make_batch(q->cfg.V, ids, tg, pos, doc, &b);
    double sq = 0, sd = 0;
    int64_t nq = 0, nd = 0;
    CHECK(glm_model_step(q, lq, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &sq, &nq) == GLM_OK, "step nf4: %s", glm_errmsg());
    CHECK(glm_model_step(d, ld, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &sd, &nd) == GLM_OK, "step bnb: %s", glm_errmsg());
    CHECK(sq == sd && nq == nd && nq == 38, "nf4%s loss sum %.17g == bitsandbytes checkpoint's %.17g (%lld targets)",
          dq ? " dq" : "", sq, sd, (long long)nq);
    int same = lq->n_params == ld->n_params;
    for (int i = 0; same && i < lq->n_params; i++)
        same = !memcmp(lq->params[i].g, ld->params[i].g, (size_t)lq->params[i].numel * 4);
    CHECK(same, "nf4%s: every LoRA gradient bit-identical to the bitsandbytes checkpoint's", dq ? " dq" : "");
    /* and the dense base differs (the test can fail): the original's loss is another number */
    {
        glm_model *o = NULL;
        CHECK(glm_model_load(orig, be, 0, &o) == GLM_OK, "load the bf16 original");
        glm_lora *lo = o ? adapter(o) : NULL;
        double so = 0;
        int64_t no = 0;
        if (lo) CHECK(glm_model_step(o, lo, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &so, &no) == GLM_OK, "step bf16");
        CHECK(so != sq, "the bf16 base's loss %.17g differs from the 4-bit one's %.17g", so, sq);
        glm_lora_free(lo);
        glm_model_free(o);
    }
    /* the plan counts the 4-bit bytes and a dequantization slot */
    glm_plan pq, pd;
    glm_model_plan(q, lq, 1, T, 1, GLM_CKPT_FULL, &pq);
    glm_model_plan(d, ld, 1, T, 1, GLM_CKPT_FULL, &pd);
    CHECK(pq.weights < pd.weights && pq.dequant > 0 && pd.dequant == 0 && pq.base_format == GLM_WF_NF4,
          "plan: 4-bit weights %.0f < dense %.0f bytes, dequantization slot %.0f", pq.weights, pd.weights, pq.dequant);
out2:
    glm_lora_free(lq);
    glm_lora_free(ld);
out:
    glm_model_free(q);
    glm_model_free(d);
}

int main(void) {
    const char *data_dir = test_data_dir();
    const char *src = getenv("GLM_SRC");
    if (!src) src = ".";
    one(data_dir, src, 0);
    one(data_dir, src, 1);
    /* shards of a 4-bit tensor are whole double-quantization groups */
    CHECK(glm_weight_shard_elems(GLM_WF_NF4, 1000000, 3) % 16384 == 0 && glm_weight_shard_elems(GLM_WF_NF4, 1000000, 3) * 3 >= 1000000,
          "4-bit shards of whole groups");
    CHECK(glm_weight_shard_elems(GLM_WF_BF16, 1000000, 3) == 333334, "dense shards: ceil(n / world)");
    glm_weight_bytes_t wb = glm_weight_bytes(GLM_WF_NF4, 4096LL * 13696, 1);
    CHECK(wb.data + wb.absmax + wb.absmax2 + wb.offset == 28939652, "nf4 dq bytes of a 4096 x 13696 matrix (%zu)",
          wb.data + wb.absmax + wb.absmax2 + wb.offset);
    return check_summary("test_qlora");
}
