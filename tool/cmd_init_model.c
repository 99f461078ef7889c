#define _GNU_SOURCE
/* glmtune init-model: a randomly initialised GLM-4-shaped checkpoint (for the demo and tests). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/fileio.h"
#include "common/log.h"
#include "lora/model/config.h"
#include "lora/model/model.h"
#include "tokenize/tokenizer.h"
#include "tool/cli.h"

static const char *USAGE =
    "usage: glmtune init-model --config FILE -o OUTDIR [--layout chatglm|hf] [--seed N] [--tokenizer DIR]";
static const char *ABOUT =
    "Writes config.json and model.safetensors (bf16) of a GLM-4-shaped model with seeded random\n"
    "weights. FILE is a config.json in either layout (THUDM chatglm or transformers glm); the output\n"
    "layout defaults to the config's. --tokenizer copies tokenizer.model and tokenizer_config.json\n"
    "into OUTDIR, so that `glmtune train` can check that shards and model share the tokenizer.\n";

static glm_status copy_file(const char *src_dir, const char *name, const char *dst_dir, bool required) {
    char *src = glm_path_join(src_dir, name), *dst = glm_path_join(dst_dir, name);
    glm_status s = GLM_OK;
    if (glm_is_file(src)) {
        char *data;
        size_t n;
        s = glm_read_file(src, &data, &n);
        if (s == GLM_OK) {
            s = glm_write_file_atomic(dst, data, n);
            free(data);
        }
    } else if (required) {
        s = glm_err(GLM_ERR_IO, "%s: not found; hint: --tokenizer takes a directory with tokenizer.model", src);
    }
    free(src);
    free(dst);
    return s;
}

int cmd_init_model(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *layout_s = NULL, *tok = NULL;
    uint64_t seed = 0;
    bool help = false;
    const glm_arg_opt opts[] = {
        {.name = "config", .type = GLM_ARG_STRING, .dest = &config, .metavar = "FILE",
         .help = "the model's config.json (chatglm or glm layout)"},
        {.name = "output", .short_name = 'o', .alias = "out", .type = GLM_ARG_STRING, .dest = &out, .metavar = "OUTDIR",
         .help = "the directory to write, new or empty"},
        {.name = "layout", .type = GLM_ARG_STRING, .dest = &layout_s, .metavar = "chatglm|hf",
         .help = "the output's tensor names (default: the config's layout)"},
        {.name = "seed", .type = GLM_ARG_U64, .dest = &seed, .def = "0", .help = "seed of the random weights"},
        {.name = "tokenizer", .type = GLM_ARG_STRING, .dest = &tok, .metavar = "DIR",
         .help = "a directory with tokenizer.model (and tokenizer_config.json) to copy into OUTDIR; its special ids "
                 "go into config.json (pad, eos)"},
    };
    const glm_arg_cmd cmd = {.name = "init-model", .usage = USAGE, .about = ABOUT, .opts = opts,
                             .n_opts = sizeof opts / sizeof *opts};
    glm_status s = glm_args_parse(&cmd, argc - 1, argv + 1, &help);
    if (s == GLM_OK && help) {
        glm_args_help(stdout, &cmd);
        return GLM_EXIT_OK;
    }
    if (s == GLM_OK && (!config || !out)) s = glm_err(GLM_ERR_ARG, "init-model needs --config FILE and -o OUTDIR");
    char outbuf[4096];
    if (s == GLM_OK) {
        snprintf(outbuf, sizeof outbuf, "%s", out);
        out = glm_path_strip_slash(outbuf);
        if (!*out) s = glm_err(GLM_ERR_ARG, "init-model: -o \"\" is empty; hint: -o OUTDIR");
    }
    glm_config cfg;
    glm_layout layout;
    if (s == GLM_OK) s = glm_config_load(config, 0, &cfg);
    if (s == GLM_OK) s = glm_config_validate(&cfg, config);
    layout = cfg.layout;
    if (s == GLM_OK && layout_s) s = glm_layout_parse(layout_s, &layout);
    /* Written aside in "<out>.tmp.<pid>" and renamed into place, as every glmtune output: a killed
     * run (a 9B model is ~19 GB) leaves no half-written model, and the next run removes its leftovers. */
    char *target = NULL, *tmp = NULL;
    if (s == GLM_OK) s = glm_output_target_dir(out, &target); /* a symbolic link: its target is replaced */
    if (s == GLM_OK) glm_cleanup_leftovers(target);
    if (s == GLM_OK && glm_is_file(target)) s = glm_err(GLM_ERR_ARG, "-o %s is a file; hint: -o takes a directory", out);
    if (s == GLM_OK) {
        char *c = glm_path_join(target, "config.json"), *w = glm_path_join(target, "model.safetensors"),
             *x = glm_path_join(target, "model.safetensors.index.json");
        if (glm_is_file(c) || glm_is_file(w) || glm_is_file(x))
            s = glm_err(GLM_ERR_ARG, "%s already holds a model (config.json / model.safetensors); hint: choose a new "
                        "directory", out);
        free(c);
        free(w);
        free(x);
    }
    if (s == GLM_OK) {
        DIR *d = opendir(target);
        struct dirent *e;
        while (d && s == GLM_OK && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                s = glm_err(GLM_ERR_ARG, "-o %s already holds %s: the directory is replaced as a whole; hint: choose "
                            "a new or empty directory", out, e->d_name);
        if (d) closedir(d);
    }
    if (s == GLM_OK && tok) { /* the tokenizer's special ids go into config.json (pad, eos) */
        glm_tokenizer *t = NULL;
        s = glm_tokenizer_load(tok, &t);
        if (s == GLM_OK) {
            static const char *const names[] = {"<|endoftext|>", "<|user|>", "<|observation|>"};
            cfg.has_token_ids = true;
            cfg.pad_token_id = -1;
            for (int i = 0; i < 3; i++) {
                int64_t id = glm_tokenizer_special_id(t, names[i], strlen(names[i]));
                if (id < 0) continue;
                if (id >= cfg.V) {
                    glm_log_warn("%s: %s is id %lld, outside the model's vocabulary of %d: config.json leaves it out",
                                 tok, names[i], (long long)id, cfg.V);
                    continue;
                }
                if (i == 0) cfg.pad_token_id = id;
                cfg.eos_token_ids[cfg.n_eos_token_ids++] = id;
            }
            glm_tokenizer_free(t);
        }
    }
    if (s == GLM_OK && asprintf(&tmp, "%s.tmp.%d", target, (int)getpid()) < 0) {
        tmp = NULL;
        s = glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    if (s == GLM_OK && glm_is_dir(tmp)) glm_rmtree(tmp);
    if (s == GLM_OK) s = glm_mkdir_aside(tmp, target);
    if (s == GLM_OK) s = glm_model_init_random(&cfg, seed, tmp, layout);
    if (s == GLM_OK && tok) {
        s = copy_file(tok, "tokenizer.model", tmp, true);
        if (s == GLM_OK) s = copy_file(tok, "tokenizer_config.json", tmp, false);
    }
    if (s == GLM_OK) s = glm_commit_dir(tmp, target);
    if (s != GLM_OK && tmp && glm_is_dir(tmp)) glm_rmtree(tmp);
    free(tmp);
    free(target);
    if (s != GLM_OK) return cli_fail(s);
    glm_log_info("wrote a random %s-layout GLM-4 (L=%d C=%d H=%d Hkv=%d F=%d V=%d, seed %llu) to %s",
                 glm_layout_name(layout), cfg.L, cfg.C, cfg.H, cfg.Hkv, cfg.F, cfg.V, (unsigned long long)seed, out);
    return GLM_EXIT_OK;
}
