#define _GNU_SOURCE
/* tests/lora/test_options.c: train options from a LLaMA-Factory-style YAML and the command line. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/log.h"
#include "lora/options.h"
#include "lora/plan.h"
#include "tests/check.h"

static char g_tmp[256];

static const char *k_yaml =
    "### model\n"
    "model_name_or_path: /models/glm-4-9b-chat-1m\n"
    "trust_remote_code: true\n"
    "\n"
    "### method\n"
    "stage: sft\n"
    "do_train: true\n"
    "finetuning_type: lora\n"
    "lora_rank: 8\n"
    "lora_target: all\n"
    "\n"
    "### dataset\n"
    "dataset: /data/shards\n"
    "template: glm4\n"
    "cutoff_len: 2048\n"
    "max_samples: 1000\n"
    "overwrite_cache: true\n"
    "preprocessing_num_workers: 16\n"
    "\n"
    "### output\n"
    "output_dir: saves/glm4-9b/lora/sft\n"
    "logging_steps: 10\n"
    "save_steps: 500\n"
    "plot_loss: true\n"
    "overwrite_output_dir: true\n"
    "\n"
    "### train\n"
    "per_device_train_batch_size: 1\n"
    "gradient_accumulation_steps: 8\n"
    "learning_rate: 1.0e-4\n"
    "num_train_epochs: 3.0\n"
    "lr_scheduler_type: cosine\n"
    "warmup_ratio: 0.1\n"
    "bf16: true\n"
    "ddp_timeout: 180000000\n"
    "report_to: none\n";

static char *write_yaml(const char *name, const char *text) {
    char *p = glm_path_join(g_tmp, name);
    glm_write_file_atomic(p, text, strlen(text));
    return p;
}

static glm_status parse(glm_train_opts *o, int argc, const char **argv) {
    return glm_opts_parse(o, argc, (char **)argv);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/glm_test_opts_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    glm_log_level = 0; /* keep the "ignored" info lines out of the test log */
    char *y = write_yaml("sft.yaml", k_yaml);
    glm_train_opts o;

    /* YAML + command-line override */
    const char *a1[] = {"--config", y, "--learning-rate", "2e-4", "--max-steps=100"};
    CHECK(parse(&o, 5, a1) == GLM_OK, "parse: %s", glm_errmsg());
    CHECK(strcmp(o.model, "/models/glm-4-9b-chat-1m") == 0, "model alias");
    CHECK(strcmp(o.data, "/data/shards") == 0, "dataset -> data");
    CHECK(strcmp(o.output_dir, "saves/glm4-9b/lora/sft") == 0, "output_dir");
    CHECK(o.lora_rank == 8 && o.lora_target.n == 1 && strcmp(o.lora_target.v[0], "all") == 0, "lora");
    CHECK(o.seq_len == 2048, "cutoff_len -> seq_len");
    CHECK(o.gradient_accumulation_steps == 8 && o.per_device_train_batch_size == 1, "batch");
    CHECK(o.learning_rate == 2e-4, "CLI overrides YAML: %g", o.learning_rate);
    CHECK(o.num_train_epochs == 3.0 && o.max_steps == 100, "epochs float, max steps");
    CHECK(strcmp(o.lr_scheduler_type, "cosine") == 0 && o.warmup_ratio == 0.1, "scheduler");
    CHECK(o.weight_decay == 0 && o.adam_beta2 == 0.999 && o.max_grad_norm == 1.0 && o.seed == 42, "defaults");
    CHECK(strcmp(o.gradient_checkpointing, "auto") == 0, "gradient checkpointing auto by default");
    CHECK(o.resume_from_checkpoint == NULL, "no resume");
    CHECK(glm_opts_validate(&o) == GLM_OK, "validate: %s", glm_errmsg());
    CHECK(o.lora_alpha == 16, "alpha default 2 x rank: %g", o.lora_alpha);
    /* sources */
    size_t n;
    const glm_opt_def *t = glm_opts_table(&n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t[i].name, "learning-rate") == 0) CHECK(o.src[i] == GLM_SRC_CLI, "lr from cli");
        if (strcmp(t[i].name, "lora-rank") == 0) CHECK(o.src[i] == GLM_SRC_CONFIG, "rank from config");
        if (strcmp(t[i].name, "seed") == 0) CHECK(o.src[i] == GLM_SRC_DEFAULT, "seed default");
    }
    /* JSON of the resolved settings */
    json_t *j = glm_opts_to_json(&o);
    CHECK(j && json_object_size(j) == n, "every option in JSON");
    CHECK(json_real_value(json_object_get(j, "learning_rate")) == 2e-4 &&
              json_integer_value(json_object_get(j, "max_steps")) == 100 &&
              !strcmp(json_string_value(json_object_get(j, "gradient_checkpointing")), "auto") &&
              json_is_null(json_object_get(j, "eval_data")) &&
              json_array_size(json_object_get(j, "lora_target")) == 1 &&
              json_real_value(json_object_get(j, "lora_alpha")) == 16, "JSON values");
    json_decref(j);
    char *buf = NULL;
    size_t blen = 0;
    FILE *mf = open_memstream(&buf, &blen);
    glm_opts_print(mf, &o);
    fclose(mf);
    CHECK(strstr(buf, "learning_rate") && strstr(buf, "command line") && strstr(buf, "config"), "print");
    free(buf);
    glm_opts_free(&o);

    /* typo in YAML: suggestion */
    char *y2 = write_yaml("typo.yaml", "model: m\nlerning_rate: 1e-4\n");
    const char *a2[] = {"--config", y2};
    CHECK(parse(&o, 2, a2) == GLM_ERR_ARG && strstr(glm_errmsg(), "lerning_rate") &&
              strstr(glm_errmsg(), "did you mean 'learning_rate'") && strstr(glm_errmsg(), "typo.yaml:2"),
          "typo key: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    glm_opts_free(&o);
    /* fp16 refused, with the reason */
    char *y3 = write_yaml("fp16.yaml", "fp16: true\n");
    const char *a3[] = {"--config", y3};
    CHECK(parse(&o, 2, a3) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "fp16") && strstr(glm_errmsg(), "diverge"),
          "fp16: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    glm_opts_free(&o);
    char *y4 = write_yaml("fp16f.yaml", "fp16: false\nfinetuning_type: full\n");
    const char *a4[] = {"--config", y4};
    CHECK(parse(&o, 2, a4) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "finetuning_type"), "full refused: %s",
          glm_errmsg());
    glm_opts_free(&o);
    /* YAML list forms, resume true, bad value type, bad YAML, duplicate via alias */
    char *y5 = write_yaml("list.yaml", "lora_target:\n  - q_proj\n  - v_proj\nresume_from_checkpoint: true\n");
    const char *a5[] = {"--config", y5};
    CHECK(parse(&o, 2, a5) == GLM_OK && o.lora_target.n == 2 && strcmp(o.lora_target.v[1], "v_proj") == 0 &&
              o.resume_from_checkpoint && strcmp(o.resume_from_checkpoint, "latest") == 0, "list + resume: %s",
          glm_errmsg());
    glm_opts_free(&o);
    char *y6 = write_yaml("badval.yaml", "\n\nsave_steps: often\n");
    const char *a6[] = {"--config", y6};
    CHECK(parse(&o, 2, a6) == GLM_ERR_ARG && strstr(glm_errmsg(), "badval.yaml:3") && strstr(glm_errmsg(), "integer"),
          "bad value: %s", glm_errmsg());
    glm_opts_free(&o);
    char *y7 = write_yaml("bad.yaml", "model: [unclosed\n");
    const char *a7[] = {"--config", y7};
    CHECK(parse(&o, 2, a7) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "bad.yaml"), "bad yaml: %s", glm_errmsg());
    glm_opts_free(&o);
    char *y8 = write_yaml("dup.yaml", "model: a\nmodel_name_or_path: b\n");
    const char *a8[] = {"--config", y8};
    CHECK(parse(&o, 2, a8) == GLM_ERR_ARG && strstr(glm_errmsg(), "twice"), "dup: %s", glm_errmsg());
    glm_opts_free(&o);
    const char *a9[] = {"--config", "/nonexistent/x.yaml"};
    CHECK(parse(&o, 2, a9) == GLM_ERR_IO && strstr(glm_errmsg(), "x.yaml"), "missing config");
    glm_opts_free(&o);

    /* command line forms */
    const char *b1[] = {"--model", "m", "--data=d", "--output-dir", "out", "--no-gradient-checkpointing",
                        "--use-rslora", "--resume-from-checkpoint", "--seed", "7", "--lora-target",
                        "query_key_value, dense", "--max-steps", "-1", "--lora-alpha", "32"};
    CHECK(parse(&o, 16, b1) == GLM_OK, "cli: %s", glm_errmsg());
    CHECK(!strcmp(o.gradient_checkpointing, "none") && o.use_rslora && o.seed == 7, "bools, seed");
    CHECK(o.resume_from_checkpoint && strcmp(o.resume_from_checkpoint, "latest") == 0, "bare resume = latest");
    CHECK(o.lora_target.n == 2 && strcmp(o.lora_target.v[1], "dense") == 0, "list trimmed");
    CHECK(o.max_steps == -1 && o.lora_alpha == 32, "negative value, alpha");
    CHECK(glm_opts_validate(&o) == GLM_OK && o.lora_alpha == 32, "validate keeps explicit alpha");
    glm_opts_free(&o);
    /* --gradient-checkpointing: a mode, true/false as transformers, and the bare flag = full */
    {
        const char *g1[] = {"--gradient-checkpointing", "--seed", "3"};
        CHECK(parse(&o, 3, g1) == GLM_OK && !strcmp(o.gradient_checkpointing, "full") && o.seed == 3, "bare flag = full");
        glm_opts_free(&o);
        const char *g2[] = {"--gradient-checkpointing", "selective", "--max-gpu-memory", "22", "--dry-run"};
        CHECK(parse(&o, 5, g2) == GLM_OK && !strcmp(o.gradient_checkpointing, "selective") && o.max_gpu_memory == 22 &&
                  o.dry_run, "selective, max-gpu-memory, dry-run");
        glm_opts_free(&o);
        const char *g3[] = {"--model", "m", "--data", "d", "--output-dir", "o", "--gradient-checkpointing=sometimes"};
        CHECK(parse(&o, 7, g3) == GLM_OK && glm_opts_validate(&o) == GLM_ERR_ARG && strstr(glm_errmsg(), "selective"),
              "bad mode named: %s", glm_errmsg());
        glm_opts_free(&o);
        glm_ckpt_mode cm;
        CHECK(glm_ckpt_parse("true", &cm) == GLM_OK && cm == GLM_CKPT_FULL && glm_ckpt_parse("false", &cm) == GLM_OK &&
                  cm == GLM_CKPT_NONE && glm_ckpt_parse("auto", &cm) == GLM_OK && cm == GLM_CKPT_AUTO,
              "true = full, false = none");
    }
    const char *b2[] = {"--use-rslora", "false", "--resume-from-checkpoint=out/checkpoint-5", "--help"};
    CHECK(parse(&o, 4, b2) == GLM_OK && !o.use_rslora && strcmp(o.resume_from_checkpoint, "out/checkpoint-5") == 0 &&
              o.help, "bool value, resume path, help");
    CHECK(glm_opts_validate(&o) == GLM_ERR_ARG && strstr(glm_errmsg(), "--model"), "model required");
    glm_opts_free(&o);
    const char *b3[] = {"--lerning-rate", "1"};
    CHECK(parse(&o, 2, b3) == GLM_ERR_ARG && strstr(glm_errmsg(), "--lerning-rate") &&
              strstr(glm_errmsg(), "--learning-rate"), "cli typo: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    glm_opts_free(&o);
    const char *b4[] = {"--max-steps", "ten"};
    CHECK(parse(&o, 2, b4) == GLM_ERR_ARG && strstr(glm_errmsg(), "max-steps"), "bad int");
    glm_opts_free(&o);
    const char *b5[] = {"--save-steps"};
    CHECK(parse(&o, 1, b5) == GLM_ERR_ARG && strstr(glm_errmsg(), "needs a value"), "missing value");
    glm_opts_free(&o);
    const char *b6[] = {"stray"};
    CHECK(parse(&o, 1, b6) == GLM_ERR_ARG && strstr(glm_errmsg(), "stray"), "positional");
    glm_opts_free(&o);
    const char *b7[] = {"--model", "m", "--data", "d", "--output-dir", "o", "--device", "tpu"};
    CHECK(parse(&o, 8, b7) == GLM_OK && glm_opts_validate(&o) == GLM_ERR_ARG && strstr(glm_errmsg(), "tpu"),
          "device choice");
    glm_opts_free(&o);
    /* CLI wins over YAML even when the flag comes before --config */
    const char *b8[] = {"--lora-rank", "16", "--config", y};
    CHECK(parse(&o, 4, b8) == GLM_OK && o.lora_rank == 16, "cli before config still wins (%lld)", (long long)o.lora_rank);
    glm_opts_free(&o);

    /* help lists every option with its default */
    buf = NULL;
    mf = open_memstream(&buf, &blen);
    glm_opts_help(mf);
    fclose(mf);
    for (size_t i = 0; i < n; i++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", t[i].name);
        CHECK(strstr(buf, flag) != NULL, "help has %s", flag);
    }
    CHECK(strstr(buf, "(default: 1e-4") && strstr(buf, "[steps]") && strstr(buf, "2 x lora-rank"), "help details");
    free(buf);
    CHECK(glm_edit_distance("kitten", "sitting") == 3 && glm_edit_distance("", "abc") == 3 &&
              glm_edit_distance("same", "same") == 0, "edit distance");

    free(y);
    free(y2);
    free(y3);
    free(y4);
    free(y5);
    free(y6);
    free(y7);
    free(y8);
    glm_rmtree(g_tmp);
    return check_summary("test_options");
}
