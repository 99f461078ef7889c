#define _GNU_SOURCE
/* tests/lora/test_options.c: train options from a LLaMA-Factory-style YAML and the command line. */
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/log.h"
#include "tool/train/options.h"
#include "lora/model/plan.h"
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

/* Runs glm_opts_parse with stderr captured (the one-line answers are info lines); returns the
 * status, *log the text (malloc'd). */
static glm_status parse_logged(glm_train_opts *o, int argc, const char **argv, char **log) {
    char *p = glm_path_join(g_tmp, "stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int lvl = glm_log_level;
    glm_log_level = 1;
    glm_status st = glm_opts_parse(o, argc, (char **)argv);
    glm_log_level = lvl;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t n;
    *log = NULL;
    glm_read_file(p, log, &n);
    free(p);
    return st;
}

static int count_lines_with(const char *text, const char *needle) {
    int n = 0;
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), l);
        if (strstr(buf, needle)) n++;
        l = e ? e + 1 : l + len;
    }
    return n;
}

/* LLaMA-Factory and transformers spellings: snake_case flags, aliases, a llamafactory-cli line,
 * every key of LLaMA-Factory's own example YAMLs answered in one line, optim, disable_gradient_
 * checkpointing, lr_scheduler_kwargs, LoRA+, warmup_steps below 1, close-only suggestions. */
static void test_llamafactory(const char *yaml) {
    glm_train_opts o;
    char *log = NULL;
    /* a llamafactory-cli train line as a LLaMA-Factory user posted it for GLM-4 (without its --fp16), pasted */
    const char *a1[] = {"--trust-remote-code", "--model_name_or_path", "/data3/models/test/glm4", "--stage", "sft",
                        "--do_train", "--finetuning_type", "lora", "--template", "glm4", "--dataset", "shards",
                        "--output_dir", "out", "--learning_rate", "0.0005", "--num_train_epochs", "8",
                        "--cutoff_len", "4096", "--logging_steps", "1", "--warmup_ratio", "0.1", "--weight_decay",
                        "0.1", "--gradient_accumulation_steps", "8", "--save_total_limit", "1", "--save_steps", "256",
                        "--seed", "42", "--data_seed", "42", "--lr_scheduler_type", "cosine", "--overwrite_cache",
                        "--preprocessing_num_workers", "16", "--plot_loss", "--overwrite_output_dir",
                        "--per_device_train_batch_size", "1", "--bf16", "True"};
    CHECK(parse_logged(&o, sizeof a1 / sizeof *a1, a1, &log) == GLM_OK, "llamafactory-cli line: %s", glm_errmsg());
    CHECK(o.model && !strcmp(o.model, "/data3/models/test/glm4") && !strcmp(o.data, "shards") &&
              !strcmp(o.output_dir, "out") && o.learning_rate == 5e-4 && o.num_train_epochs == 8 && o.seq_len == 4096 &&
              o.logging_steps == 1 && o.warmup_ratio == 0.1 && o.weight_decay == 0.1 &&
              o.gradient_accumulation_steps == 8 && o.save_total_limit == 1 && o.save_steps == 256 &&
              !strcmp(o.lr_scheduler_type, "cosine") && o.overwrite_output_dir && o.per_device_train_batch_size == 1,
          "values from snake_case flags");
    CHECK(log && count_lines_with(log, "trust_remote_code") == 1 && count_lines_with(log, "overwrite_cache") == 1 &&
              count_lines_with(log, "tokenize --config") == 3 && count_lines_with(log, "plot_loss") == 1,
          "one line per key that is not used: %s", log ? log : "");
    free(log);
    glm_opts_free(&o);
    const char *a2[] = {"--model_name_or_path=m", "--dataset=d", "--output_dir=o", "--fp16"};
    CHECK(parse(&o, 4, a2) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "diverge"), "--fp16 refused: %s",
          glm_errmsg());
    glm_opts_free(&o);
    /* every key of LLaMA-Factory's example YAML is used or answered in exactly one line */
    const char *a3[] = {"--config", yaml};
    CHECK(parse_logged(&o, 2, a3, &log) == GLM_OK, "LF yaml: %s", glm_errmsg());
    static const char *const answered[] = {"trust_remote_code", "template", "max_samples", "overwrite_cache",
                                           "preprocessing_num_workers", "plot_loss", "bf16", "report_to",
                                           "cutoff_len"};
    for (size_t i = 0; i < sizeof answered / sizeof *answered; i++)
        CHECK(log && count_lines_with(log, answered[i]) == 1, "%s answered once: %s", answered[i], log ? log : "");
    CHECK(log && count_lines_with(log, "ddp_timeout") == 0 && o.comm_timeout == 180000000.0,
          "ddp_timeout is used (the collectives' timeout, comm_timeout): %g", o.comm_timeout);
    free(log);
    glm_opts_free(&o);
    /* speed switches: accepted with one line saying why they are not needed */
    const char *a4[] = {"--enable_liger_kernel", "--use_unsloth", "true", "--flash_attn", "fa2",
                        "--include_num_input_tokens_seen", "--ddp_timeout=9000"};
    /* (ddp_timeout is used: the collectives' timeout) */
    CHECK(parse_logged(&o, 7, a4, &log) == GLM_OK, "speed switches: %s", glm_errmsg());
    CHECK(log && count_lines_with(log, "is not needed") == 4 && o.comm_timeout == 9000.0 && strstr(log, "enable_liger_kernel is not needed: the "
              "linear + cross-entropy is already chunked"), "answers: %s", log ? log : "");
    free(log);
    glm_opts_free(&o);
    /* optim: the AdamW names pass, others are refused by name */
    for (int k = 0; k < 3; k++) {
        const char *names[] = {"adamw_torch", "adamw_torch_fused", "adamw_hf"};
        const char *a5[] = {"--model", "m", "--data", "d", "--output-dir", "o", "--optim", names[k]};
        CHECK(parse(&o, 8, a5) == GLM_OK && glm_opts_validate(&o) == GLM_OK && !strcmp(o.optim, names[k]), "optim %s",
              names[k]);
        glm_opts_free(&o);
    }
    const char *a6[] = {"--model", "m", "--data", "d", "--output-dir", "o", "--optim", "adafactor"};
    CHECK(parse(&o, 8, a6) == GLM_OK && glm_opts_validate(&o) == GLM_ERR_UNSUPPORTED &&
              strstr(glm_errmsg(), "optim 'adafactor' is not supported"), "adafactor refused: %s", glm_errmsg());
    glm_opts_free(&o);
    /* disable_gradient_checkpointing; the command line still wins */
    char *y1 = write_yaml("dgc.yaml", "disable_gradient_checkpointing: true\nlr_scheduler_type: cosine_with_min_lr\n"
                                      "lr_scheduler_kwargs:\n  min_lr_rate: 0.1\nloraplus_lr_ratio: 16\n"
                                      "loraplus_lr_embedding: 1.0e-6\nwarmup_steps: 0.05\n");
    const char *a7[] = {"--config", y1};
    CHECK(parse(&o, 2, a7) == GLM_OK, "dgc yaml: %s", glm_errmsg());
    json_t *j = glm_opts_to_json(&o);
    CHECK(json_is_false(json_object_get(j, "gradient_checkpointing")) ||
              (json_is_string(json_object_get(j, "gradient_checkpointing")) &&
               !strcmp(json_string_value(json_object_get(j, "gradient_checkpointing")), "none")),
          "disable_gradient_checkpointing: true turns it off");
    json_decref(j);
    CHECK(o.min_lr_rate == 0.1 && o.min_lr == 0, "lr_scheduler_kwargs min_lr_rate: %g", o.min_lr_rate);
    CHECK(o.loraplus_lr_ratio == 16, "loraplus_lr_ratio");
    CHECK(o.warmup_ratio == 0.05 && o.warmup_steps == 0, "warmup_steps 0.05 is a ratio (%g, %lld)", o.warmup_ratio,
          (long long)o.warmup_steps);
    glm_opts_free(&o);
    const char *a8[] = {"--config", y1, "--gradient_checkpointing", "true", "--lr_scheduler_kwargs",
                        "{\"min_lr\": 1e-6}", "--warmup_steps", "20", "--model", "m", "--data", "d", "--output_dir", "o"};
    CHECK(parse(&o, 14, a8) == GLM_OK, "cli over yaml: %s", glm_errmsg());
    j = glm_opts_to_json(&o);
    json_t *gc = json_object_get(j, "gradient_checkpointing");
    CHECK(json_is_true(gc) || (json_is_string(gc) && !strcmp(json_string_value(gc), "full")),
          "--gradient_checkpointing true wins over the YAML");
    json_decref(j);
    CHECK(o.min_lr == 1e-6 && o.warmup_steps == 20, "JSON lr_scheduler_kwargs on the command line; warmup 20 steps");
    CHECK(glm_opts_validate(&o) == GLM_ERR_ARG && strstr(glm_errmsg(), "both set"), "min_lr and min_lr_rate: %s",
          glm_errmsg());
    glm_opts_free(&o);
    const char *a9[] = {"--lr_scheduler_kwargs", "{\"num_cycles\": 2}"};
    CHECK(parse(&o, 2, a9) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "num_cycles"), "unknown kwarg: %s",
          glm_errmsg());
    glm_opts_free(&o);
    /* features glmtune does not have: fine when off, refused when on, with the reason */
    char *y2 = write_yaml("feat.yaml", "use_dora: false\nquantization_bit: null\nneftune_noise_alpha: 5\n");
    const char *a10[] = {"--config", y2};
    CHECK(parse(&o, 2, a10) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "feat.yaml:3") &&
              strstr(glm_errmsg(), "NEFTune"), "neftune refused: %s", glm_errmsg());
    glm_opts_free(&o);
    /* suggestions only for close names */
    const char *b1[] = {"--lora_rnak", "8"};
    CHECK(parse(&o, 2, b1) == GLM_ERR_ARG && strstr(glm_errmsg(), "did you mean --lora_rank?"), "close: %s",
          glm_errmsg());
    glm_opts_free(&o);
    const char *b2[] = {"--frobnicate", "1"};
    CHECK(parse(&o, 2, b2) == GLM_ERR_ARG && !strstr(glm_errmsg(), "did you mean") && strstr(glm_errmsg(), "--help"),
          "no unrelated suggestion: %s", glm_errmsg());
    printf("  %s\n", glm_errmsg());
    glm_opts_free(&o);
    char *y3 = write_yaml("far.yaml", "zzz_totally_unknown: 1\n");
    const char *b3[] = {"--config", y3};
    CHECK(parse(&o, 2, b3) == GLM_ERR_ARG && !strstr(glm_errmsg(), "did you mean"), "yaml unrelated: %s",
          glm_errmsg());
    glm_opts_free(&o);
    const char *b4[] = {"--max_step", "3"};
    CHECK(parse(&o, 2, b4) == GLM_ERR_ARG && strstr(glm_errmsg(), "did you mean --max_steps?"), "max_step: %s",
          glm_errmsg());
    glm_opts_free(&o);
    const char *b5[] = {"--warmup", "3"};
    CHECK(parse(&o, 2, b5) == GLM_ERR_ARG && strstr(glm_errmsg(), "did you mean --warmup-"), "prefix: %s",
          glm_errmsg());
    glm_opts_free(&o);
    free(y1);
    free(y2);
    free(y3);
}

/* A value the config gave that validation refuses names the config's file and line (as a refused
 * key does); the same value given on the command line is named as the option only. */
static void test_value_location(void) {
    glm_train_opts o;
    char *y = write_yaml("bad_value.yaml", "model_name_or_path: /m\ndataset: /d\noutput_dir: /o\nlr_scheduler_type: cosin\n");
    const char *a[] = {"--config", y};
    CHECK(parse(&o, 2, a) == GLM_OK, "parse: %s", glm_errmsg());
    char want[600];
    snprintf(want, sizeof want, "%s:4: lr_scheduler_type", y);
    CHECK(glm_opts_validate(&o) == GLM_ERR_ARG && !strncmp(glm_errmsg(), want, strlen(want)) &&
              strstr(glm_errmsg(), "'cosin'"), "a config value refused at validation names file:line: %s", glm_errmsg());
    glm_opts_free(&o);
    const char *b[] = {"--config", y, "--lr-scheduler-type", "cosinx"};
    CHECK(parse(&o, 4, b) == GLM_OK, "parse: %s", glm_errmsg());
    CHECK(glm_opts_validate(&o) == GLM_ERR_ARG && !strncmp(glm_errmsg(), "--lr-scheduler-type 'cosinx'", 28),
          "the command line's value is named as the option: %s", glm_errmsg());
    glm_opts_free(&o);
    free(y);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/glm_test_opts_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    glm_log_level = 0; /* keep the "ignored" info lines out of the test log */
    char *y = write_yaml("sft.yaml", k_yaml);
    glm_train_opts o;
    test_value_location();

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
        /* a YAML that leaves seed out means transformers' default (42), said as such */
        if (strcmp(t[i].name, "seed") == 0) CHECK(o.src[i] == GLM_SRC_LF, "seed: transformers' default under a YAML");
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

    test_llamafactory(y);
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
