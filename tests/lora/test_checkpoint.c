#define _GNU_SOURCE
/* tests/lora/test_checkpoint.c: save / prune / latest / load round trip, and interrupted or
 * damaged checkpoints (partial .tmp dir, missing checksums, corrupt, truncated, missing file). */
#include <dlfcn.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/rng.h"
#include "lora/io/checkpoint.h"
#include "tests/check.h"

static char g_tmp[256];

/* unlink() seen by the library (this program's definition comes first): when g_watch is set, the
 * first removal of a file of a checkpoint whose path holds g_watch_name notes whether the
 * directory g_watch still exists under its name, i.e. whether a kill at that moment would leave a
 * half-deleted checkpoint-N. */
static const char *g_watch, *g_watch_name;
static int g_watch_seen, g_watch_in_place;
int unlink(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    if (g_watch && !g_watch_seen && strstr(path, g_watch_name)) {
        g_watch_seen = 1;
        g_watch_in_place = glm_is_dir(g_watch);
    }
    return real(path);
}

static void make_params(glm_param *p, glm_rng *r) {
    const char *names[2] = {"transformer.encoder.layers.0.self_attention.query_key_value.lora_A.weight",
                            "transformer.encoder.layers.0.self_attention.query_key_value.lora_B.weight"};
    int64_t shapes[2][2] = {{2, 3}, {5, 2}};
    for (int i = 0; i < 2; i++) {
        snprintf(p[i].name, sizeof p[i].name, "%s", names[i]);
        p[i].ndim = 2;
        p[i].shape[0] = shapes[i][0];
        p[i].shape[1] = shapes[i][1];
        p[i].numel = shapes[i][0] * shapes[i][1];
        p[i].w = malloc(p[i].numel * sizeof(float));
        p[i].g = malloc(p[i].numel * sizeof(float));
        for (int64_t j = 0; j < p[i].numel; j++) {
            p[i].w[j] = (float)glm_rng_normal(r);
            p[i].g[j] = (float)glm_rng_normal(r);
        }
    }
}

static void corrupt_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/glm_test_ckpt_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    char *out = glm_path_join(g_tmp, "run");
    glm_rng r;
    glm_rng_seed(&r, 42, 0);
    glm_param p[2];
    make_params(p, &r);
    glm_adamw_cfg cfg = glm_adamw_defaults();
    glm_optim o;
    CHECK(glm_optim_init(&o, NULL, p, 2, &cfg) == GLM_OK, "optim");
    glm_sched sched;
    glm_sched_init(&sched, GLM_SCHED_COSINE, 2e-4, 100, 0, 0.1, 1e-5, 0);
    const char *targets[] = {"query_key_value"};
    glm_adapter_cfg ac = {.r = 2, .alpha = 16, .dropout = 0.05, .target_modules = targets, .n_targets = 1};
    json_t *loader = json_pack("{s:I, s:I, s:s}", "epoch", (json_int_t)1, "position", (json_int_t)1234, "order", "abc");
    json_t *settings = json_pack("{s:f, s:i}", "learning_rate", 2e-4, "lora_rank", 2);
    json_t *hist = json_array();
    glm_rng rngs[2];
    glm_rng_seed(&rngs[0], 7, 1);
    glm_rng_seed(&rngs[1], 7, 2);
    rngs[1].s[3] = 0xffffffffffffffffULL; /* a word above 2^63 survives as a string */
    char *c10w = glm_path_join(out, "checkpoint-10"), *stale = glm_path_join(out, ".checkpoint-7.del");
    for (int step = 10; step <= 30; step += 10) {
        if (step == 30) { /* its save prunes checkpoint-10: watch how; and a killed prune's leftover */
            g_watch = c10w, g_watch_name = "checkpoint-10";
            glm_mkdir_p(stale);
        }
        glm_optim_step(&o, p, 2, glm_lr_at(&sched, step), NULL);
        json_array_append_new(hist, json_pack("{s:i, s:f}", "step", step, "loss", 3.0 - step * 0.01));
        glm_ckpt_save_args a = {.output_dir = out, .step = step, .epoch = step / 20.0, .params = p, .n_params = 2,
                                .optim = &o, .adapter = &ac, .data_loader = loader, .rngs = rngs, .n_rngs = 2,
                                .sched = &sched, .settings = settings, .log_history = hist,
                                .save_total_limit = 2};
        char *dir = NULL;
        CHECK(glm_ckpt_save(&a, &dir) == GLM_OK, "save %d: %s", step, glm_errmsg());
        CHECK(dir && glm_is_dir(dir), "dir exists");
        free(dir);
    }
    char *c10 = glm_path_join(out, "checkpoint-10"), *c20 = glm_path_join(out, "checkpoint-20"),
         *c30 = glm_path_join(out, "checkpoint-30");
    CHECK(!glm_is_dir(c10) && glm_is_dir(c20) && glm_is_dir(c30), "save_total_limit 2 pruned checkpoint-10");
    /* rotation renames a checkpoint aside before deleting a file of it (before: deleted in place,
     * so a kill could leave a half-deleted checkpoint-10) */
    CHECK(g_watch_seen && !g_watch_in_place, "pruned checkpoint-10 moved aside before its files were removed "
          "(seen %d, in place %d)", g_watch_seen, g_watch_in_place);
    g_watch = NULL;
    char *del10 = glm_path_join(out, ".checkpoint-10.del");
    CHECK(!glm_is_dir(del10) && !glm_is_dir(stale), "nothing left aside; a killed prune's .checkpoint-7.del removed");
    free(del10);
    free(stale);
    free(c10w);
    char *latest = NULL;
    int64_t ls;
    CHECK(glm_ckpt_latest(out, &latest, &ls) == GLM_OK && ls == 30 && latest && strcmp(latest, c30) == 0,
          "latest = 30");
    free(latest);

    /* trainer_state.json's stateful_callbacks as transformers' Trainer writes them: its resume takes
     * stateful_callbacks["TrainerControl"] and builds TrainerControl(**args) with attributes set */
    for (int64_t st = 7; st <= 10; st += 3) {
        glm_ckpt_save_args ta = {.output_dir = out, .step = st, .max_steps = 10};
        json_t *ts = glm_trainer_state_json(&ta);
        json_t *tc = json_object_get(json_object_get(ts, "stateful_callbacks"), "TrainerControl");
        json_t *args = json_object_get(tc, "args"), *attr = json_object_get(tc, "attributes");
        static const char *const flags[] = {"should_epoch_stop", "should_evaluate", "should_log", "should_save",
                                            "should_training_stop"};
        bool ok = json_is_object(args) && json_object_size(args) == 5 && json_is_object(attr) &&
                  json_object_size(attr) == 0 && json_object_size(tc) == 2;
        for (int k = 0; ok && k < 5; k++) ok = json_is_boolean(json_object_get(args, flags[k]));
        CHECK(ok, "step %lld: stateful_callbacks.TrainerControl is {args: the five flags, attributes: {}}", (long long)st);
        CHECK(ok && json_is_true(json_object_get(args, "should_save")) &&
                  json_is_false(json_object_get(args, "should_log")) &&
                  json_is_true(json_object_get(args, "should_training_stop")) == (st == 10),
              "step %lld of 10: should_save, and should_training_stop only at the last step", (long long)st);
        json_decref(ts);
    }

    /* load round trip */
    glm_ckpt c;
    CHECK(glm_ckpt_load(c30, &c) == GLM_OK, "load: %s", glm_errmsg());
    CHECK(c.step == 30 && c.epoch == 1.5 && c.optimizer_step == 3, "step/epoch %lld %g", (long long)c.step, c.epoch);
    CHECK(json_equal(c.data_loader, loader) && json_equal(c.settings, settings) && json_equal(c.log_history, hist),
          "loader, settings, history");
    CHECK(c.n_rngs == 2 && memcmp(c.rngs, rngs, sizeof rngs) == 0, "rng states");
    CHECK(c.has_sched && c.sched.type == sched.type && c.sched.lr == sched.lr &&
              c.sched.warmup_steps == sched.warmup_steps && c.sched.total_steps == 100 &&
              c.sched.min_lr_rate == sched.min_lr_rate, "scheduler");
    glm_param q[2];
    glm_rng r2;
    glm_rng_seed(&r2, 99, 0);
    make_params(q, &r2);
    glm_optim o2;
    glm_optim_init(&o2, NULL, q, 2, &cfg);
    CHECK(glm_ckpt_load_weights(&c, NULL, q, 2, &o2) == GLM_OK, "load weights: %s", glm_errmsg());
    CHECK(o2.step == 3, "optimizer step %lld", (long long)o2.step);
    for (int i = 0; i < 2; i++) {
        CHECK(memcmp(q[i].w, p[i].w, p[i].numel * 4) == 0, "weights %d", i);
        CHECK(memcmp(o2.m[i], o.m[i], p[i].numel * 4) == 0 && memcmp(o2.v[i], o.v[i], p[i].numel * 4) == 0, "m/v %d", i);
    }
    /* the optimizer file's step against glmtune_state.json's optimizer_step */
    c.optimizer_step = 4;
    CHECK(glm_ckpt_load_weights(&c, NULL, q, 2, &o2) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "optimizer_step 4"),
          "step mismatch: %s", glm_errmsg());
    c.optimizer_step = 3;
    /* a NaN in exp_avg and a negative exp_avg_sq: refused, naming the tensor (a NaN adapter otherwise) */
    {
        char *d50 = glm_path_join(out, "bad"), *dir = NULL;
        for (int bad = 0; bad < 2; bad++) {
            float *mh = malloc((size_t)p[1].numel * 4), *vh = malloc((size_t)p[1].numel * 4);
            glm_optim_get_state(&o, 1, mh, vh);
            const float m0 = mh[2], v0 = vh[2];
            if (bad == 0) mh[2] = NAN;
            else vh[2] = -1.0f;
            glm_optim_set_state(&o, 1, mh, vh);
            glm_ckpt_save_args a = {.output_dir = d50, .step = 50 + bad, .epoch = 2.5, .params = p, .n_params = 2,
                                    .optim = &o, .adapter = &ac, .data_loader = loader, .rngs = rngs, .n_rngs = 2,
                                    .sched = &sched, .settings = settings, .log_history = hist};
            CHECK(glm_ckpt_save(&a, &dir) == GLM_OK, "save the damaged state: %s", glm_errmsg());
            glm_ckpt cb;
            CHECK(glm_ckpt_load(dir, &cb) == GLM_OK, "load: %s", glm_errmsg());
            CHECK(glm_ckpt_load_weights(&cb, NULL, q, 2, &o2) == GLM_ERR_FORMAT &&
                      strstr(glm_errmsg(), bad ? "exp_avg_sq" : "exp_avg") && strstr(glm_errmsg(), "element 2") &&
                      strstr(glm_errmsg(), "hint"),
                  "damaged state %d refused: %s", bad, glm_errmsg());
            glm_ckpt_free(&cb);
            free(dir);
            dir = NULL;
            mh[2] = m0, vh[2] = v0;
            glm_optim_set_state(&o, 1, mh, vh);
            free(mh), free(vh);
        }
        free(d50);
    }
    /* the checkpoint is also a PEFT adapter directory */
    char *acfg = glm_path_join(c30, "adapter_config.json");
    json_error_t je;
    json_t *jc = json_load_file(acfg, 0, &je);
    CHECK(jc && json_integer_value(json_object_get(jc, "r")) == 2 &&
              json_integer_value(json_object_get(jc, "lora_alpha")) == 16, "adapter_config in checkpoint");
    json_decref(jc);
    free(acfg);
    /* shape mismatch on load */
    q[1].shape[1] = 3;
    q[1].numel = 15;
    free(q[1].w);
    q[1].w = malloc(15 * 4);
    glm_optim_free(&o2);
    CHECK(glm_ckpt_load_weights(&c, NULL, q, 2, NULL) == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "lora_B") &&
              strstr(glm_errmsg(), "lora-rank is 3") && strstr(glm_errmsg(), "--lora-rank 2"),
          "shape mismatch: %s", glm_errmsg());
    /* a checkpoint of a model of another size: lora_B's out_features 5, this run 7 (the rank the same): the
     * sizes are named, no lora-rank blamed */
    q[1].shape[0] = 7, q[1].shape[1] = 2;
    q[1].numel = 14;
    CHECK(glm_ckpt_load_weights(&c, NULL, q, 2, NULL) == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "lora_B") &&
              strstr(glm_errmsg(), "output size (out_features) is 5 in it and 7 in this model") &&
              strstr(glm_errmsg(), "model of another size") && !strstr(glm_errmsg(), "lora-rank"),
          "another model size: %s", glm_errmsg());
    glm_ckpt_free(&c);

    /* a save killed half way: a partial .tmp dir; and a checkpoint dir without checksums */
    char *t40 = glm_path_join(out, ".checkpoint-40.tmp"), *f40 = glm_path_join(t40, "adapter_model.safetensors");
    glm_mkdir_p(t40);
    glm_write_file_atomic(f40, "partial", 7);
    char *c50 = glm_path_join(out, "checkpoint-50"), *f50 = glm_path_join(c50, "trainer_state.json");
    glm_mkdir_p(c50);
    glm_write_file_atomic(f50, "{}", 2);
    CHECK(glm_ckpt_latest(out, &latest, &ls) == GLM_OK && ls == 30, "latest ignores .tmp and incomplete (%lld)",
          (long long)ls);
    free(latest);
    CHECK(glm_ckpt_verify(c50) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "checksums.txt") &&
              strstr(glm_errmsg(), "incomplete"), "no checksums: %s", glm_errmsg());
    glm_rmtree(c50);

    /* corrupt optimizer file: verify names it; latest falls back to 20 */
    char *opt30 = glm_path_join(c30, "optimizer.safetensors");
    corrupt_byte(opt30, 100);
    CHECK(glm_ckpt_verify(c30) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "optimizer.safetensors") &&
              strstr(glm_errmsg(), "corrupt"), "corrupt: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    CHECK(glm_ckpt_load(c30, &c) == GLM_ERR_FORMAT, "load refuses a corrupt checkpoint");
    CHECK(glm_ckpt_latest(out, &latest, &ls) == GLM_OK && ls == 20, "falls back to 20");
    free(latest);
    /* an export's view: the newest (30) with why it fails, and the newest complete one (20) */
    char *newest = NULL, *why = NULL;
    CHECK(glm_ckpt_scan(out, &newest, &why, &latest) == GLM_OK && newest && !strcmp(newest, c30) && why &&
              strstr(why, "optimizer.safetensors") && strstr(why, "corrupt") && latest && !strcmp(latest, c20),
          "scan: newest %s (%s), latest %s", newest ? newest : "-", why ? why : "-", latest ? latest : "-");
    free(newest);
    free(why);
    free(latest);
    corrupt_byte(opt30, 100); /* restore */
    CHECK(glm_ckpt_verify(c30) == GLM_OK, "restored: %s", glm_errmsg());
    CHECK(glm_ckpt_scan(out, &newest, &why, &latest) == GLM_OK && newest && !strcmp(newest, c30) && !why && latest &&
              !strcmp(latest, c30), "scan after the restore: %s", why ? why : "-");
    free(newest);
    free(latest);
    /* truncated adapter */
    char *ad30 = glm_path_join(c30, "adapter_model.safetensors");
    CHECK(truncate(ad30, 50) == 0, "truncate");
    CHECK(glm_ckpt_verify(c30) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "adapter_model.safetensors") &&
              strstr(glm_errmsg(), "truncated"), "truncated: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    /* missing trainer state */
    char *ts20 = glm_path_join(c20, "trainer_state.json");
    unlink(ts20);
    CHECK(glm_ckpt_verify(c20) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "trainer_state.json") &&
              strstr(glm_errmsg(), "missing"), "missing: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    CHECK(glm_ckpt_latest(out, &latest, &ls) == GLM_OK && latest == NULL && ls == -1, "no good checkpoint left");
    /* saving again replaces a damaged checkpoint of the same step and clears stale .tmp dirs */
    glm_ckpt_save_args a = {.output_dir = out, .step = 30, .epoch = 1.5, .params = p, .n_params = 2, .optim = &o,
                            .adapter = &ac, .save_total_limit = 0};
    CHECK(glm_ckpt_save(&a, NULL) == GLM_OK, "re-save: %s", glm_errmsg());
    CHECK(glm_ckpt_verify(c30) == GLM_OK && !glm_is_dir(t40), "re-saved 30 good, stale tmp removed");
    CHECK(glm_ckpt_latest(out, &latest, &ls) == GLM_OK && ls == 30, "latest 30 again");
    free(latest);
    /* output dir that does not exist: no checkpoint, not an error */
    char *none = glm_path_join(g_tmp, "nope");
    CHECK(glm_ckpt_latest(none, &latest, &ls) == GLM_OK && latest == NULL, "missing output dir");
    {
        char *nw = (char *)"x", *wy = (char *)"x", *lt = (char *)"x";
        CHECK(glm_ckpt_scan(none, &nw, &wy, &lt) == GLM_OK && !nw && !wy && !lt, "scan of a missing output dir");
    }

    free(none);
    free(ts20);
    free(ad30);
    free(opt30);
    free(t40);
    free(f40);
    free(c50);
    free(f50);
    free(c10);
    free(c20);
    free(c30);
    glm_optim_free(&o);
    for (int i = 0; i < 2; i++) {
        free(p[i].w);
        free(p[i].g);
        free(q[i].w);
        free(q[i].g);
    }
    json_decref(loader);
    json_decref(settings);
    json_decref(hist);
    free(out);
    glm_rmtree(g_tmp);
    return check_summary("test_checkpoint");
}
