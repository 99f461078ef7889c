/* End to end through the CLI, against tests/fixtures/tiny-glm4/{chatglm,hf}/golden.safetensors
 * (transformers + PEFT + torch AdamW in float64): the golden rows are written as pre-tokenized
 * JSONL, tokenized, trained for one step from the fixture's adapter_init with the fixture's
 * settings (meta.json), with --dump-grads, and exported. The loss (metrics.jsonl), every
 * gradient and the exported adapter (step1) must be within 1e-4 relative. Then the training
 * invariants: micro-batch 2 == micro-batch 1 x accumulation 2, gradient checkpointing on == off,
 * and N steps == N/2 steps + resume + N/2 steps (bit-identical on the CPU). */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/safetensors.h"
#include "tests/check.h"
#include "tests/train_util.h"

/* ||a - b|| / ||b|| over n elements (b in f64 from the fixture). */
static double rel_err(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double *read_f64(const glm_st_set *s, const char *name, int64_t *n) {
    const glm_st_tensor *t = glm_st_find(s, name);
    if (!t) return NULL;
    double *d = malloc(sizeof(double) * (size_t)t->numel);
    float *f = malloc(sizeof(float) * (size_t)t->numel);
    if (t->dtype == GLM_ST_F64) memcpy(d, t->data, 8 * (size_t)t->numel);
    else {
        glm_st_to_f32(t->dtype, t->data, (size_t)t->numel, f);
        for (int64_t i = 0; i < t->numel; i++) d[i] = f[i];
    }
    free(f);
    *n = t->numel;
    return d;
}

/* The loss metrics.jsonl logged for `step` (NaN when none). */
static double metrics_loss(const char *run_dir, int step) {
    json_t *m = metrics(run_dir);
    double loss = loss_at(m, step);
    json_decref(m);
    return loss;
}

/* layout: "chatglm" or "hf". extra: additional train flags. The hf goldens were computed by
 * make_fixtures.py after model.to(torch.bfloat16) and back to float64, which also rounds
 * transformers' RoPE inv_freq buffer to bf16 (its README says float32): the hf case therefore
 * trains with --rope-inv-freq-dtype bfloat16, the table such a cast transformers model uses. */
static void layout_case(const char *data_dir, const char *layout, const char *targets, const char *extra) {
    char *fix, *gold, *jsonl, *shards, *rund, *grads, *adapter;
    asprintf(&fix, "%s/tiny-glm4/%s", data_dir, layout);
    asprintf(&gold, "%s/golden.safetensors", fix);
    asprintf(&jsonl, "%s/%s.jsonl", tmp, layout);
    asprintf(&shards, "%s/%s-shards", tmp, layout);
    asprintf(&rund, "%s/%s-run", tmp, layout);
    asprintf(&grads, "%s/%s-grads.safetensors", tmp, layout);
    asprintf(&adapter, "%s/%s-adapter", tmp, layout);
    glm_st_set *g;
    if (glm_st_open(gold, &g) != GLM_OK) {
        CHECK(0, "open %s: %s", gold, glm_errmsg());
        return;
    }
    /* the golden batch as pre-tokenized documents */
    const glm_st_tensor *ids = glm_st_find(g, "input_ids");
    const int B = (int)ids->shape[0], T = (int)ids->shape[1];
    FILE *f = fopen(jsonl, "w");
    golden_rows_jsonl(g, f, 1);
    fclose(f);
    char *common;
    asprintf(&common, "%s --learning-rate 1e-3 --weight-decay 0.01 --max-grad-norm 1.0 --adam-beta1 0.9 "
                         "--adam-beta2 0.999 --adam-epsilon 1e-8 --lr-scheduler-type constant --lora-rank 4 --device cpu "
                         "--lora-alpha 8 --lora-dropout 0 --logging-steps 1 --seed 5 --quiet", extra);
    CHECK(run("%s tokenize --quiet --seq-len %d -o %s %s", G, T, shards, jsonl) == 0, "tokenize pre-tokenized golden rows");
    CHECK(run("%s train --model %s --data %s --output-dir %s --init-adapter %s/adapter_init --lora-target %s "
              "--per-device-train-batch-size %d --max-steps 1 --dump-grads %s %s",
              G, fix, shards, rund, fix, targets, B, grads, common) == 0, "train one step");
    CHECK(run("%s export-adapter --checkpoint %s -o %s", G, rund, adapter) == 0, "export-adapter");

    /* loss */
    int64_t n;
    double *loss = read_f64(g, "loss", &n);
    double got = metrics_loss(rund, 1);
    CHECK(check_close(got, loss[0], 1e-4, 0), "%s loss %.8f vs golden %.8f", layout, got, loss[0]);
    free(loss);
    /* gradients and step1 */
    glm_st_set *dg = NULL, *ad = NULL;
    char *adp;
    asprintf(&adp, "%s/adapter_model.safetensors", adapter);
    CHECK(glm_st_open(grads, &dg) == GLM_OK, "open dumped grads: %s", glm_errmsg());
    CHECK(glm_st_open(adp, &ad) == GLM_OK, "open exported adapter: %s", glm_errmsg());
    int ngrad = 0, nstep = 0;
    for (size_t i = 0; dg && ad && i < glm_st_count(g); i++) {
        const glm_st_tensor *t = glm_st_at(g, i);
        const char *key = NULL;
        glm_st_set *mine = NULL;
        if (!strncmp(t->name, "grad.", 5)) key = t->name + 5, mine = dg, ngrad++;
        else if (!strncmp(t->name, "step1.", 6)) key = t->name + 6, mine = ad, nstep++;
        else continue;
        const glm_st_tensor *m = glm_st_find(mine, key);
        CHECK(m != NULL, "%s: %s missing in %s", layout, key, mine == dg ? "--dump-grads" : "the exported adapter");
        if (!m) continue;
        double *ref = read_f64(g, t->name, &n);
        float *x = malloc(4 * (size_t)n);
        glm_st_to_f32(m->dtype, m->data, (size_t)n, x);
        double e = rel_err(x, ref, n);
        CHECK(m->numel == n && e < 1e-4, "%s %s: rel err %.3g", layout, t->name, e);
        free(ref);
        free(x);
    }
    CHECK(ngrad > 0 && nstep == ngrad && (size_t)ngrad == (dg ? glm_st_count(dg) : 0), "%s: %d grads, %d step1 compared",
          layout, ngrad, nstep);
    glm_st_close(dg);
    glm_st_close(ad);
    glm_st_close(g);

    /* micro-batch 2 == 1 x accumulation 2; gradient checkpointing on == off */
    char *g1, *g2, *r2;
    asprintf(&g1, "%s/%s-g-accum.safetensors", tmp, layout);
    asprintf(&g2, "%s/%s-g-ckpt.safetensors", tmp, layout);
    asprintf(&r2, "%s/%s-run2", tmp, layout);
    CHECK(run("%s train --model %s --data %s --output-dir %s --init-adapter %s/adapter_init --lora-target %s "
              "--per-device-train-batch-size 1 --gradient-accumulation-steps 2 --max-steps 1 --dump-grads %s %s",
              G, fix, shards, r2, fix, targets, g1, common) == 0, "train 1 x accumulation 2");
    int cnt;
    double d = max_rel_diff(g1, grads, &cnt);
    CHECK(d < 1e-6 && cnt == ngrad, "%s: micro-batch 2 vs 1 x accumulation 2: max rel diff %.3g over %d", layout, d, cnt);
    glm_rmtree(r2);
    CHECK(run("%s train --model %s --data %s --output-dir %s --init-adapter %s/adapter_init --lora-target %s "
              "--per-device-train-batch-size 2 --gradient-checkpointing --max-steps 1 --dump-grads %s %s",
              G, fix, shards, r2, fix, targets, g2, common) == 0, "train with gradient checkpointing");
    d = max_rel_diff(g2, grads, &cnt);
    CHECK(d == 0 && cnt == ngrad, "%s: gradient checkpointing on vs off: max rel diff %.3g (bit-identical expected)",
          layout, d);
    free(g1);
    free(g2);
    free(common);
    free(r2);
    free(fix);
    free(gold);
    free(jsonl);
    free(shards);
    free(rund);
    free(grads);
    free(adapter);
    free(adp);
}

/* N steps == N/2 + resume + N/2, bit-identical, on the golden rows (micro-batch 1, shuffled, LoRA
 * dropout on, cosine schedule with warmup: every piece of state must be restored). */
static void resume_case(const char *data_dir) {
    char *fix, *shards, *a, *b, *ea, *eb;
    asprintf(&fix, "%s/tiny-glm4/chatglm", data_dir);
    asprintf(&shards, "%s/chatglm-shards", tmp);
    asprintf(&a, "%s/resume-a", tmp);
    asprintf(&b, "%s/resume-b", tmp);
    asprintf(&ea, "%s/resume-a-adapter", tmp);
    asprintf(&eb, "%s/resume-b-adapter", tmp);
    const char *common = "--lora-target all --lora-rank 4 --lora-alpha 8 --lora-dropout 0.1 --learning-rate 3e-3 "
                         "--lr-scheduler-type cosine --warmup-steps 2 --per-device-train-batch-size 1 "
                         "--num-train-epochs 4 --save-steps 4 --logging-steps 1 --seed 11 --device cpu --quiet";
    /* 2 rows, batch 1: 2 steps per epoch, 8 steps in all */
    CHECK(run("%s train --model %s --data %s --output-dir %s %s", G, fix, shards, a, common) == 0, "8 steps in one run");
    /* the straight run saved checkpoint-4 on its way: continue from it into another directory */
    CHECK(run("%s train --model %s --data %s --output-dir %s --resume-from-checkpoint %s/checkpoint-4 %s", G, fix,
              shards, b, a, common) == 0, "resume from checkpoint-4 for the last 4 steps");
    CHECK(run("%s export-adapter --checkpoint %s -o %s", G, a, ea) == 0 &&
          run("%s export-adapter --checkpoint %s -o %s", G, b, eb) == 0, "export both");
    char *pa, *pb;
    asprintf(&pa, "%s/adapter_model.safetensors", ea);
    asprintf(&pb, "%s/adapter_model.safetensors", eb);
    char *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    glm_read_file(pa, &da, &na);
    glm_read_file(pb, &db, &nb);
    CHECK(da && db && na == nb && !memcmp(da, db, na), "resumed run's adapter is bit-identical to the straight run's");
    double la = metrics_loss(a, 8), lb = metrics_loss(b, 8);
    CHECK(la == lb && isfinite(la), "step 8 loss equal: %.9g vs %.9g", la, lb);
    free(da);
    free(db);
    free(pa);
    free(pb);
    free(fix);
    free(shards);
    free(a);
    free(b);
    free(ea);
    free(eb);
}

int main(void) {
    const char *data_dir = test_data_dir();
    int rc = train_test_begin("/tmp/glmgold.XXXXXX");
    if (rc) return rc;
    layout_case(data_dir, "chatglm", "query_key_value,dense,dense_h_to_4h,dense_4h_to_h", "");
    layout_case(data_dir, "hf", "q_proj,k_proj,v_proj,o_proj,gate_up_proj,down_proj", "--rope-inv-freq-dtype bfloat16");
    resume_case(data_dir);
    if (!check_failed_) glm_rmtree(tmp);
    else fprintf(stderr, "outputs kept in %s\n", tmp);
    return check_summary("test_train_golden");
}
