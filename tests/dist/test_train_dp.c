/* tests/dist/test_train_dp.c: data parallel on the CPU backend over MPI, end to end through the
 * CLI (run by test_train_dp.sh, which sets Open MPI up; the ranks start with glmtune train
 * --device cpu --nproc 2, i.e. under mpirun). On the tiny GLM-4 fixture (chatglm layout, its
 * adapter_init so that every gradient is non-zero) and the golden rows written twice (8 documents
 * packed into 5 rows of 48 tokens):
 *   - 2 ranks x micro-batch 1 == 1 rank x micro-batch 2: step 1's loss and every LoRA gradient
 *     (--dump-grads, before clipping) within 1e-6 relative, and 3 steps' losses (the third global
 *     batch has one row: rank 1 runs a placeholder row) and the final adapters;
 *   - with gradient accumulation: 2 ranks x 1 x accumulation 2 == 1 rank x micro-batch 4;
 *   - the same with LoRA dropout 0.1 (the masks keyed by the tokens' places in the data, not by
 *     the micro-batch or rank that holds them): 2 ranks x 1 == 1 rank x 2, 2 ranks x 1 x
 *     accumulation 2 == 1 rank x 4 == 1 rank x 1 x accumulation 4, and with packing false (micro-
 *     batches of samples) 2 ranks x 1 == 1 rank x 2;
 *   - the same with --shard-base (each rank holds half of every base matrix), and with a 4-bit base
 *     (--quantization-bit 4) sharded in its stored format;
 *   - only rank 0 writes: one metrics line per step, one TensorBoard file, the per-rank tokens/s
 *     and the communication share logged;
 *   - resume across ranks: 8 steps straight == 4 + resume + 4 (2 ranks, LoRA dropout on, cosine
 *     schedule with warmup), losses and adapters bit-identical. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/safetensors.h"
#include "tests/check.h"
#include "tests/train_util.h"

/* The golden rows (both documents of both rows), written twice, as pre-tokenized JSONL. */
static void write_rows(const char *fix, const char *jsonl) {
    char *gold;
    gold = fmt("%s/golden.safetensors", fix);
    glm_st_set *g;
    if (glm_st_open(gold, &g) != GLM_OK) {
        CHECK(0, "open %s: %s", gold, glm_errmsg());
        exit(1);
    }
    FILE *f = fopen(jsonl, "w");
    golden_rows_jsonl(g, f, 2);
    fclose(f);
    glm_st_close(g);
    free(gold);
}

/* One equivalence: the run `dp` (`ranks` ranks) against `ref` (1 rank): step 1's gradients and every
 * step's loss within 1e-6, the final adapters within 1e-5 (three AdamW steps on top). */
static void compare(const char *what, const char *ref, const char *dp, int steps, int ranks) {
    char *gr, *gd, *ar, *ad, *er, *ed;
    gr = fmt("%s/%s.grads", tmp, ref);
    gd = fmt("%s/%s.grads", tmp, dp);
    ar = fmt("%s/%s", tmp, ref);
    ad = fmt("%s/%s", tmp, dp);
    int cnt = 0;
    double d = max_rel_diff(gd, gr, &cnt);
    CHECK(d < 1e-6 && cnt == 16, "%s: step 1 gradients: max rel diff %.3g over %d tensors", what, d, cnt);
    json_t *mr = metrics(ar), *md = metrics(ad);
    for (int s = 1; s <= steps; s++) {
        double a = loss_at(mr, s), b = loss_at(md, s);
        CHECK(check_close(b, a, 1e-6, 0), "%s: step %d loss %.12g vs %.12g", what, s, b, a);
    }
    CHECK(json_array_size(md) == (size_t)steps, "%s: %zu metrics lines for %d steps (only rank 0 writes)", what,
          json_array_size(md), steps);
    json_t *last = json_array_get(md, json_array_size(md) - 1);
    json_t *per = json_object_get(last, "tokens_per_second_per_rank");
    double share = json_number_value(json_object_get(last, "comm_exposed_share"));
    if (ranks > 1)
        CHECK(json_array_size(per) == (size_t)ranks && json_number_value(json_array_get(per, 0)) > 0 && share >= 0 &&
                  share < 1, "%s: per-rank tokens/s and the communication share are logged", what);
    json_decref(mr);
    json_decref(md);
    er = fmt("%s/%s-adapter", tmp, ref);
    ed = fmt("%s/%s-adapter", tmp, dp);
    CHECK(run("%s export-adapter --checkpoint %s -o %s", G, ar, er) == 0 && run("%s export-adapter --checkpoint %s -o %s", G, ad, ed) == 0,
          "%s: export both", what);
    char *pr, *pd;
    pr = fmt("%s/adapter_model.safetensors", er);
    pd = fmt("%s/adapter_model.safetensors", ed);
    d = max_rel_diff(pd, pr, &cnt);
    CHECK(d < 1e-5 && cnt == 16, "%s: adapters after %d steps: max rel diff %.3g", what, steps, d);
    free(gr), free(gd), free(ar), free(ad), free(er), free(ed), free(pr), free(pd);
}

int main(void) {
    const char *data_dir = test_data_dir();
    int rc = train_test_begin("/tmp/glmdp.XXXXXX");
    if (rc) return rc;
    char *fix, *jsonl = path("rows.jsonl"), *shards = path("shards"), *common;
    fix = fmt("%s/tiny-glm4/chatglm", data_dir);
    write_rows(fix, jsonl);
    CHECK(run("%s tokenize --quiet --seq-len 48 -o %s %s", G, shards, jsonl) == 0, "tokenize");
    common = fmt("--model %s --init-adapter %s/adapter_init --data %s --lora-target all --lora-rank 4 --lora-alpha 8 "
                      "--lora-dropout 0 --learning-rate 1e-3 --weight-decay 0.01 --lr-scheduler-type constant "
                      "--logging-steps 1 --seed 5 --device cpu --quiet", fix, fix, shards);
    struct {
        const char *name, *flags;
    } runs[] = {
        {"ref-b2", "--per-device-train-batch-size 2 --max-steps 3"},
        {"dp-b1", "--nproc 2 --per-device-train-batch-size 1 --max-steps 3"},
        {"ref-b4", "--per-device-train-batch-size 4 --max-steps 3"},
        {"dp-b1-acc2", "--nproc 2 --per-device-train-batch-size 1 --gradient-accumulation-steps 2 --max-steps 3"},
        {"dp-b1-shard", "--nproc 2 --per-device-train-batch-size 1 --shard-base --max-steps 3"},
        {"dp-b1-acc2-shard", "--nproc 2 --per-device-train-batch-size 1 --gradient-accumulation-steps 2 --shard-base "
                             "--gradient-checkpointing full --max-steps 3"},
        /* the 4-bit base: sharded, each rank gathers the codes, absmax and absmax2 of whole double-quantization
         * groups (dense_h_to_4h's 20480 weights split 16384 + 4096) */
        {"ref-b2-q4", "--per-device-train-batch-size 2 --max-steps 3 --quantization-bit 4"},
        {"dp-b1-shard-q4", "--nproc 2 --per-device-train-batch-size 1 --shard-base --max-steps 3 --quantization-bit 4"},
        /* LoRA dropout on: every layout draws a token's mask alike */
        {"ref-b2-drop", "--lora-dropout 0.1 --per-device-train-batch-size 2 --max-steps 3"},
        {"dp-b1-drop", "--lora-dropout 0.1 --nproc 2 --per-device-train-batch-size 1 --max-steps 3"},
        {"ref-b4-drop", "--lora-dropout 0.1 --per-device-train-batch-size 4 --max-steps 3"},
        {"dp-b1-acc2-drop", "--lora-dropout 0.1 --nproc 2 --per-device-train-batch-size 1 --gradient-accumulation-steps 2 "
                            "--max-steps 3"},
        {"b1-acc4-drop", "--lora-dropout 0.1 --per-device-train-batch-size 1 --gradient-accumulation-steps 4 --max-steps 3"},
        {"ref-b2-drop-nopack", "--lora-dropout 0.1 --packing false --per-device-train-batch-size 2 --max-steps 3"},
        {"dp-b1-drop-nopack", "--lora-dropout 0.1 --packing false --nproc 2 --per-device-train-batch-size 1 --max-steps 3"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
        CHECK(run("%s train %s %s --output-dir %s/%s --dump-grads %s/%s.grads", G, common, runs[i].flags, tmp, runs[i].name,
                  tmp, runs[i].name) == 0, "train %s", runs[i].name);
    compare("2 ranks x 1 vs 1 rank x 2", "ref-b2", "dp-b1", 3, 2);
    compare("2 ranks x 1 x accumulation 2 vs 1 rank x 4", "ref-b4", "dp-b1-acc2", 3, 2);
    compare("--shard-base: 2 ranks x 1 vs 1 rank x 2", "ref-b2", "dp-b1-shard", 3, 2);
    compare("--shard-base, accumulation 2, full recomputation vs 1 rank x 4", "ref-b4", "dp-b1-acc2-shard", 3, 2);
    compare("4-bit base, --shard-base: 2 ranks x 1 vs 1 rank x 2", "ref-b2-q4", "dp-b1-shard-q4", 3, 2);
    compare("dropout 0.1: 2 ranks x 1 vs 1 rank x 2", "ref-b2-drop", "dp-b1-drop", 3, 2);
    compare("dropout 0.1: 2 ranks x 1 x accumulation 2 vs 1 rank x 4", "ref-b4-drop", "dp-b1-acc2-drop", 3, 2);
    compare("dropout 0.1: 1 rank x 1 x accumulation 4 vs 1 rank x 4", "ref-b4-drop", "b1-acc4-drop", 3, 1);
    compare("dropout 0.1, packing false: 2 ranks x 1 sample vs 1 rank x 2", "ref-b2-drop-nopack", "dp-b1-drop-nopack", 3, 2);
    {   /* and the dropout is on: its gradients differ from the run without it */
        char *a, *b;
        a = fmt("%s/ref-b2.grads", tmp);
        b = fmt("%s/ref-b2-drop.grads", tmp);
        int cnt = 0;
        double d = max_rel_diff(b, a, &cnt);
        CHECK(d > 1e-3, "dropout 0.1 changes the step 1 gradients (max rel diff %.3g from dropout 0)", d);
        free(a), free(b);
    }
    /* one TensorBoard file: only rank 0 writes */
    char *runs_dir = path("dp-b1/runs");
    char *ls;
    ls = fmt("test $(ls %s | wc -l) -eq 1", runs_dir);
    CHECK(system(ls) == 0, "one event file in %s", runs_dir);

    /* resume across ranks: 8 steps straight == 4 + resume + 4 */
    const char *rflags = "--nproc 2 --lora-dropout 0.1 --learning-rate 3e-3 --lr-scheduler-type cosine --warmup-steps 2 "
                         "--per-device-train-batch-size 1 --max-steps 8 --save-steps 4";
    char *a = path("resume-a"), *b = path("resume-b");
    CHECK(run("%s train %s %s --output-dir %s", G, common, rflags, a) == 0, "8 steps on 2 ranks");
    CHECK(run("%s train %s %s --output-dir %s --resume-from-checkpoint %s/checkpoint-4", G, common, rflags, b, a) == 0,
          "resume from checkpoint-4 on 2 ranks for the last 4 steps");
    json_t *ma = metrics(a), *mb = metrics(b);
    int equal = 1;
    for (int s = 5; s <= 8; s++) {
        double la = loss_at(ma, s), lb = loss_at(mb, s);
        if (!(la == lb && isfinite(la))) {
            equal = 0;
            fprintf(stderr, "step %d: %.17g vs %.17g\n", s, la, lb);
        }
    }
    CHECK(equal, "steps 5-8: the resumed run's losses are bit-identical to the straight run's");
    json_decref(ma);
    json_decref(mb);
    char *ea = path("resume-a-adapter"), *eb = path("resume-b-adapter");
    CHECK(run("%s export-adapter --checkpoint %s -o %s", G, a, ea) == 0 && run("%s export-adapter --checkpoint %s -o %s", G, b, eb) == 0,
          "export both");
    char *pa, *pb;
    pa = fmt("%s/adapter_model.safetensors", ea);
    pb = fmt("%s/adapter_model.safetensors", eb);
    CHECK(same_file(pa, pb), "the resumed run's adapter is bit-identical to the straight run's");
    if (!check_failed_) glm_rmtree(tmp);
    else fprintf(stderr, "outputs kept in %s\n", tmp);
    return check_summary("test_train_dp");
}
