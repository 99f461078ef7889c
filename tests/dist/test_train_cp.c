/* tests/dist/test_train_cp.c: context parallel (--context-parallel) end to end through the CLI on
 * the CPU backend over MPI (run by test_train_cp.sh, which sets Open MPI up; the ranks start with
 * glmtune train --device cpu --nproc N). On the tiny GLM-4 fixture (chatglm layout, its
 * adapter_init so that every gradient is non-zero) and 4 rows of 50 tokens packed from
 * pre-tokenized documents so that (checked on the shards) the rows hold:
 *     [50]  [30 | 11 | 9]  [27 | 23]  [26 | 24]
 * 50 is not a multiple of 2N for N = 2 (52 after padding, chunks of 13) or 3 (54, chunks of 9);
 * the boundary at 26 falls on a chunk edge for N = 2, the one at 27 for N = 3, the others inside
 * chunks. Against one process with the same micro-batches (1 row, accumulation 4):
 *   - --nproc 2 --context-parallel 2, --nproc 3 --context-parallel 3 (one group), and --nproc 4
 *     --context-parallel 2 (2 data-parallel groups of 2, accumulation 2): step 1's loss and every
 *     LoRA gradient (--dump-grads, before clipping), step 2's loss and the adapters after 2 steps;
 *   - the evaluation after step 2 (forward-only ring) and --shard-base beside context parallel;
 *   - only rank 0 writes metrics; the log says how the rows are split;
 *   - usage errors: a --context-parallel that does not divide --nproc / --gpus / the world.
 * Tolerances. The loss: 1e-6 relative (context parallel's bar; measured ~1e-9). The gradients:
 * 3e-6 per tensor, not 1e-6: both sides run the CPU backend's cblas_sgemm, whose per-row results depend
 * on how a call's rows fall into its tiles, so rows of 26 or 18 local tokens against rows of 50
 * move the LoRA gradients by up to ~1e-6 through the cancellation in the sums over tokens (the
 * reference moves as much against itself when only its chunk sizes change). test_cp_mpi holds
 * the model step to 1e-6 (measured ~5e-8) with a GEMM that does not depend on the tiling. Any
 * mask, position, label or chunk-order bug moves them by 1e-3 or more. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/loader.h"
#include "kernels/backend.h"
#include "tests/check.h"
#include "tests/train_util.h"

static const double TOL_LOSS = 1e-6, TOL_GRAD = 3e-6, TOL_ADAPTER = 1e-5;

/* Pre-tokenized documents (ids < 512, the fixture's vocabulary; the first token of each is not a
 * target, a few others are not either), in an order the packer turns into the rows above. */
static void write_docs(const char *jsonl) {
    static const int lens[] = {50, 30, 27, 26, 24, 23, 11, 9};
    FILE *f = fopen(jsonl, "w");
    for (size_t d = 0; d < sizeof lens / sizeof *lens; d++) {
        fprintf(f, "{\"input_ids\": [");
        for (int t = 0; t < lens[d]; t++) fprintf(f, "%s%u", t ? ", " : "", (unsigned)(glm_dropout_u01(7, d, t) * 512));
        fprintf(f, "], \"labels\": [");
        for (int t = 0; t < lens[d]; t++) {
            unsigned id = (unsigned)(glm_dropout_u01(7, d, t) * 512);
            int target = t > 0 && glm_dropout_u01(8, d, t) > 0.15f;
            fprintf(f, "%s%d", t ? ", " : "", target ? (int)id : -100);
        }
        fprintf(f, "]}\n");
    }
    fclose(f);
}

/* The rows' document lengths, in row order (as the trainer sees them, unshuffled). */
static void check_rows(const char *shards) {
    glm_loader l;
    if (glm_loader_open(&l, shards, "train", 1, false) != GLM_OK) {
        CHECK(0, "open %s: %s", shards, glm_errmsg());
        return;
    }
    static const int want[4][4] = {{50}, {30, 11, 9}, {27, 23}, {26, 24}};
    int found[4] = {0};
    uint32_t ids[50];
    uint8_t tg[50];
    int32_t pos[50], doc[50];
    CHECK(l.n_rows == 4 && l.T == 50, "4 rows of 50 tokens (%llu of %u)", (unsigned long long)l.n_rows, l.T);
    for (uint64_t r = 0; r < l.n_rows && r < 4; r++) {
        glm_loader_row(&l, r, ids, tg, pos, doc, NULL);
        int lens[8] = {0}, nd = 0;
        for (int t = 0; t < 50; t++) {
            if (t == 0 || doc[t] != doc[t - 1]) nd++;
            lens[nd - 1]++;
        }
        for (int w = 0; w < 4; w++) {
            int same = 1;
            for (int k = 0; k < 4; k++) same &= want[w][k] == (k < nd ? lens[k] : 0);
            if (same) found[w] = 1;
        }
    }
    CHECK(found[0] && found[1] && found[2] && found[3], "the rows hold [50] [30|11|9] [27|23] [26|24]");
    glm_loader_close(&l);
}

static double eval_at(json_t *m, int step) {
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *j = json_array_get(m, i);
        if (json_integer_value(json_object_get(j, "step")) == step && json_object_get(j, "eval_loss"))
            return json_number_value(json_object_get(j, "eval_loss"));
    }
    return NAN;
}

static void compare(const char *what, const char *ref, const char *run_) {
    char *gr = path(ref), *gd = path(run_), *fr, *fd, *er, *ed, *ar, *ad;
    fr = fmt("%s.grads", gr);
    fd = fmt("%s.grads", gd);
    int cnt = 0;
    double d = max_rel_diff(fd, fr, &cnt);
    CHECK(d < TOL_GRAD && cnt == 16, "%s: step 1 gradients: worst tensor rel diff %.3g over %d tensors", what, d, cnt);
    if (getenv("GLM_TEST_VERBOSE")) printf("%s: step 1 gradients: worst tensor %.3g\n", what, d);
    json_t *mr = metrics(gr), *md = metrics(gd);
    for (int s = 1; s <= 2; s++) {
        double a = loss_at(mr, s), b = loss_at(md, s);
        CHECK(check_close(b, a, TOL_LOSS, 0), "%s: step %d loss %.12g vs %.12g", what, s, b, a);
        if (getenv("GLM_TEST_VERBOSE")) printf("%s: step %d loss rel %.3g\n", what, s, fabs(b - a) / fabs(a));
    }
    double ea = eval_at(mr, 2), eb = eval_at(md, 2);
    CHECK(check_close(eb, ea, TOL_LOSS, 0), "%s: eval loss after step 2 %.12g vs %.12g", what, eb, ea);
    CHECK(json_array_size(md) == 3, "%s: %zu metrics lines for 2 steps and an evaluation (only rank 0 writes)", what,
          json_array_size(md));
    json_decref(mr);
    json_decref(md);
    er = fmt("%s-adapter", gr);
    ed = fmt("%s-adapter", gd);
    CHECK(run("%s export-adapter --checkpoint %s -o %s", G, gr, er) == 0 && run("%s export-adapter --checkpoint %s -o %s", G, gd, ed) == 0,
          "%s: export both", what);
    ar = fmt("%s/adapter_model.safetensors", er);
    ad = fmt("%s/adapter_model.safetensors", ed);
    d = max_rel_diff(ad, ar, &cnt);
    CHECK(d < TOL_ADAPTER && cnt == 16, "%s: adapters after 2 steps: max rel diff %.3g", what, d);
    free(gr), free(gd), free(fr), free(fd), free(er), free(ed), free(ar), free(ad);
}

static int grep_log(const char *needle) {
    char *lp = path("cmd.log"), *log = NULL;
    size_t n;
    int found = glm_read_file(lp, &log, &n) == GLM_OK && strstr(log, needle);
    if (!found && log) fprintf(stderr, "--- cmd.log has no \"%s\":\n%s", needle, log);
    free(log);
    free(lp);
    return found;
}

int main(void) {
    const char *data_dir = test_data_dir();
    int rc = train_test_begin("/tmp/glmcp.XXXXXX");
    if (rc) return rc;
    char *fix, *jsonl = path("docs.jsonl"), *shards = path("shards"), *common;
    fix = fmt("%s/tiny-glm4/chatglm", data_dir);
    write_docs(jsonl);
    CHECK(run("%s tokenize --quiet --seq-len 50 -o %s %s", G, shards, jsonl) == 0, "tokenize");
    check_rows(shards);
    common = fmt("--model %s --init-adapter %s/adapter_init --data %s --lora-target all --lora-rank 4 --lora-alpha 8 "
                      "--lora-dropout 0 --learning-rate 1e-3 --weight-decay 0.01 --lr-scheduler-type constant "
                      "--logging-steps 1 --seed 5 --device cpu --per-device-train-batch-size 1 --max-steps 2 --eval-data %s --eval-steps 2",
             fix, fix, shards, shards);
    struct {
        const char *name, *flags;
    } runs[] = {
        {"ref", "--gradient-accumulation-steps 4"},
        {"cp2", "--nproc 2 --context-parallel 2 --gradient-accumulation-steps 4"},
        {"cp3", "--nproc 3 --context-parallel 3 --gradient-accumulation-steps 4 --gradient-checkpointing full"},
        {"cp2dp2", "--nproc 4 --context-parallel 2 --gradient-accumulation-steps 2"},
        {"cp2shard", "--nproc 2 --context-parallel 2 --shard-base --gradient-accumulation-steps 4"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int rc = run("%s train %s %s --output-dir %s/%s --dump-grads %s/%s.grads", G, common, runs[i].flags, tmp, runs[i].name,
                     tmp, runs[i].name);
        CHECK(rc == 0, "train %s", runs[i].name);
        if (i == 3) /* the log of the 2 x 2 run */
            CHECK(grep_log("context parallel: each row of 50 tokens over 2 ranks (2 data-parallel groups of 2): chunks of 13 "
                           "tokens, rank c of a group holding chunks c and 3-c; rows padded"),
                  "the log says how the rows are split");
    }
    compare("--nproc 2 --context-parallel 2", "ref", "cp2");
    compare("--nproc 3 --context-parallel 3, full recomputation", "ref", "cp3");
    compare("--nproc 4 --context-parallel 2 (2 data-parallel groups)", "ref", "cp2dp2");
    compare("--nproc 2 --context-parallel 2 --shard-base", "ref", "cp2shard");

    /* usage errors: exit 2, the option and a hint named */
    CHECK(run("%s train %s --nproc 4 --context-parallel 3 --output-dir %s/e1", G, common, tmp) == 2 * 256 &&
              grep_log("--context-parallel 3 does not divide the 4 ranks of --nproc; hint: --nproc 3"),
          "--nproc 4 --context-parallel 3 is a usage error");
    CHECK(run("%s train %s --context-parallel 2 --output-dir %s/e2", G, common, tmp) == 2 * 256 &&
              grep_log("--context-parallel 2 does not divide the 1 rank of this run"),
          "--context-parallel 2 in one process is a usage error");
    CHECK(run("%s train %s --device auto --gpus 3 --context-parallel 2 --output-dir %s/e3", G, common, tmp) == 2 * 256 &&
              grep_log("--context-parallel 2 does not divide the 3 GPUs of --gpus 3"),
          "--gpus 3 --context-parallel 2 is refused before any worker starts");
    CHECK(run("%s train %s --context-parallel 0 --output-dir %s/e4", G, common, tmp) == 2 * 256 &&
              grep_log("--context-parallel must be between 1 and 4096"),
          "--context-parallel 0");
    if (!check_failed_) glm_rmtree(tmp);
    else fprintf(stderr, "outputs kept in %s\n", tmp);
    return check_summary("test_train_cp");
}
