/* glmtune export-adapter: a training checkpoint -> a PEFT adapter directory, or with --merge the
 * full model W + scaling * B A in the base checkpoint's layout and sharding; --format gguf: the
 * same as GGUF files for llama.cpp and Ollama (lora/io/gguf_export.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/args.h"
#include "common/fileio.h"
#include "common/log.h"
#include "lora/io/checkpoint.h"
#include "lora/model/config.h"
#include "lora/model/family.h"
#include "lora/io/export.h"
#include "lora/io/gguf_export.h"
#include "common/safetensors.h"
#include "tool/cli.h"
#include "tool/export_vocab.h"

static const char *USAGE =
    "usage: glmtune export-adapter --checkpoint DIR -o OUTDIR [--format peft|gguf] [--dtype fp32|bf16|fp16|q8_0]\n"
    "                              [--merge [--base MODEL] [--tokenizer DIR]]";
static const char *ABOUT =
    "DIR is a checkpoint directory (checkpoint-N) or a training output directory (its latest\n"
    "checkpoint, which must be complete: a corrupt one is an error, not a fallback). Writes OUTDIR\n"
    "with adapter_config.json and adapter_model.safetensors (keys\n"
    "base_model.model.<module>.lora_A.weight / .lora_B.weight), loadable by PEFT and transformers.\n"
    "--format gguf writes llama.cpp's format instead: OUTDIR/adapter.gguf (llama-cli --lora), or with\n"
    "--merge OUTDIR/model.gguf (the merged model with its tokenizer; --dtype q8_0 quantizes it) and an\n"
    "Ollama Modelfile beside it (ollama create NAME -f OUTDIR/Modelfile).\n";
static const char *EPILOG =
    "vLLM: adapters of the THUDM (chatglm) layout load in vLLM on every module (ChatGLMForCausalLM\n"
    "supports LoRA on query_key_value, dense, dense_h_to_4h, dense_4h_to_h). Adapters of the -hf\n"
    "layout (GlmForCausalLM, in vLLM since 0.6.5) load on q_proj, k_proj, v_proj, o_proj and\n"
    "down_proj, but no vLLM version loads one with gate_up_proj (checked in vLLM's source up to its\n"
    "2026 releases; not run here): vLLM implements GlmForCausalLM with its LlamaForCausalLM, whose LoRA\n"
    "expects gate_proj and up_proj and fails with \"expected target modules in [...] but received\n"
    "['gate_up_proj']\". For vLLM, train with --lora-target vllm (every module but gate_up_proj in\n"
    "the hf layout), or serve a --merge export (a plain model, no adapter).\n";

/* glm_ckpt_verify's messages end in a hint about resuming: an export gives its own. */
static void drop_resume_hint(char *msg) {
    char *hint = msg ? strstr(msg, "; hint:") : NULL;
    if (hint) *hint = 0;
}

/* The checkpoint directory to export (*dir, malloc'd), verified against its checksums.txt: path
 * itself when it is a checkpoint, else the newest checkpoint-N of a run, which must be complete. */
static glm_status resolve_checkpoint(const char *path, char **dir) {
    if (glm_ckpt_is_dir(path)) {
        glm_status v = glm_ckpt_verify(path);
        if (v != GLM_OK) { /* verify's hint is about resuming: name the other checkpoints of the run instead */
            char why[1024];
            snprintf(why, sizeof why, "%s", glm_errmsg());
            drop_resume_hint(why);
            return glm_err(v, "%s; hint: export another checkpoint of the run (--checkpoint with the run's --output-dir "
                           "names its newest complete one)", why);
        }
        *dir = strdup(path);
        return *dir ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    if (!glm_is_dir(path))
        return glm_err(GLM_ERR_IO, "--checkpoint %s: %s; hint: a checkpoint-N directory or the --output-dir of glmtune "
                       "train", path, glm_is_file(path) ? "a file, not a directory" : "does not exist");
    char *newest = NULL, *why = NULL;
    glm_status s = glm_ckpt_scan(path, &newest, &why, dir);
    if (s != GLM_OK)
        return glm_err_context(s, "%s is neither a checkpoint (no checksums.txt) nor an output directory with one", path);
    drop_resume_hint(why);
    if (!newest)
        s = glm_err(GLM_ERR_IO, "%s: no checkpoint there (no checksums.txt, no complete checkpoint-N inside); "
                    "hint: pass a checkpoint-N directory or the --output-dir of glmtune train", path);
    else if (why && *dir) /* not the older one without a word: it would ship stale weights */
        s = glm_err(GLM_ERR_FORMAT, "%s: the newest checkpoint, %s, is not usable (%s); an export does not fall back "
                    "to an older one, whose weights may be stale; hint: to export the newest complete one, name it: "
                    "--checkpoint %s", path, newest, why, *dir);
    else if (why)
        s = glm_err(GLM_ERR_FORMAT, "%s: the newest checkpoint, %s, is not usable (%s), and no older one there is "
                    "complete; hint: train again to write a checkpoint", path, newest, why);
    free(newest);
    free(why);
    if (s != GLM_OK) {
        free(*dir);
        *dir = NULL;
    }
    return s;
}

/* --base for --merge must have the shape of the model the adapter was trained on. */
static glm_status same_shape(const char *base, const char *trained_on) {
    glm_config a, b;
    if (!glm_is_dir(trained_on) || glm_config_load(trained_on, 0, &b) != GLM_OK) {
        glm_log_info("the adapter's training base %s is not readable here: --base %s is not compared to it",
                     trained_on, base);
        return GLM_OK;
    }
    GLM_TRY(glm_config_load(base, 0, &a));
    if (a.layout != b.layout)
        return glm_err(GLM_ERR_MISMATCH, "--base %s is a %s-layout checkpoint; the adapter was trained on the %s layout "
                       "(%s) and carries its module names; hint: merge into a %s-layout checkpoint", base,
                       glm_layout_name(a.layout), glm_layout_name(b.layout), trained_on, glm_layout_name(b.layout));
    if ( a.C != b.C || a.L != b.L || a.H != b.H || a.Hkv != b.Hkv || a.Dh != b.Dh ||
        a.F != b.F || a.V != b.V)
        return glm_err(GLM_ERR_MISMATCH, "--base %s (%s layout, L=%d C=%d H=%d Hkv=%d F=%d V=%d) is not shaped like the "
                       "model the adapter was trained on, %s (%s layout, L=%d C=%d H=%d Hkv=%d F=%d V=%d); hint: "
                       "merge into the training base or a copy of it", base, glm_layout_name(a.layout), a.L, a.C, a.H,
                       a.Hkv, a.F, a.V, trained_on, glm_layout_name(b.layout), b.L, b.C, b.H, b.Hkv, b.F, b.V);
    return GLM_OK;
}

/* Files an export writes (adapter, or merged model); -o may replace a directory holding only these.
 * *(bool *)merge: a merged model. */
static bool export_file(const char *dir, const char *name, void *merge_p) {
    (void)dir;
    bool merge = *(const bool *)merge_p;
    static const char *const adapter[] = {"adapter_config.json", "adapter_model.safetensors", "README.md",
                                          GLM_GGUF_ADAPTER_FILE};
    static const char *const model[] = {"config.json", "generation_config.json", "tokenizer.model",
                                        "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                                        "added_tokens.json", "model.safetensors.index.json", GLM_GGUF_MODEL_FILE,
                                        GLM_GGUF_MODELFILE};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof adapter / sizeof *adapter; i++)
        if (!strcmp(name, adapter[i])) return true;
    if (!merge) return false;
    for (size_t i = 0; i < sizeof model / sizeof *model; i++)
        if (!strcmp(name, model[i])) return true;
    return (n > 12 && !strcmp(name + n - 12, ".safetensors")) || (n > 3 && !strcmp(name + n - 3, ".py"));
}

/* -o replaces its directory as a whole: refuse one that holds anything an export does not write
 * (a training run, a checkpoint, other files), and the base model or the checkpoint themselves. */
static glm_status check_outdir(const char *out, bool merge, const char *base, const char *ckpt) {
    char *ro = realpath(out, NULL);
    if (!ro) return GLM_OK; /* does not exist yet */
    glm_status s = GLM_OK;
    const char *others[2] = {base, ckpt};
    for (int i = 0; i < 2 && s == GLM_OK; i++) {
        char *r = others[i] ? realpath(others[i], NULL) : NULL;
        size_t n = r ? strlen(r) : 0;
        if (r && !strncmp(r, ro, strlen(ro)) && (n == strlen(ro) || r[strlen(ro)] == '/'))
            s = glm_err(GLM_ERR_ARG, "-o %s is or holds the %s (%s); hint: export to a new directory", out,
                        i == 0 ? "base model" : "checkpoint", others[i]);
        free(r);
    }
    char *first = NULL;
    if (s == GLM_OK && glm_is_dir(out)) s = glm_dir_first_foreign(out, export_file, &merge, &first);
    if (s == GLM_OK && first)
        s = glm_err(GLM_ERR_ARG, "-o %s already holds %s, which this export (%s) does not write: the directory would be "
                    "replaced as a whole; hint: export to a new or empty directory", out, first,
                    merge ? "--merge: a merged model" : "an adapter");
    free(first);
    free(ro);
    return s;
}

/* What one export writes: the adapter, or with merge the merged model. */
typedef struct export_job {
    bool merge, gguf;
    int gguf_type;                     /* glm_ggml_type, or GLM_GGUF_SAME_TYPE */
    const glm_gguf_vocab *vocab;       /* gguf with merge */
    bool out_made;                     /* -o was made by this export (removed again when it fails) */
    const char *out, *dir, *base, *dtype_s;
    const glm_param *params;
    size_t n;
    const glm_adapter_cfg *ac;
    glm_st_dtype dt;
    double scaling;
    int merge_dtype;
} export_job;

static glm_status export_write(const export_job *j) {
    glm_status s;
    if (j->gguf && !j->merge) {
        s = glm_gguf_export_adapter(j->out, NULL, j->params, j->n, j->ac, (glm_ggml_type)j->gguf_type);
        if (s == GLM_OK)
            glm_log_info("wrote the GGUF adapter of %s (%zu tensors, %s) to %s/%s", j->dir, j->n,
                         glm_ggml_type_name((glm_ggml_type)j->gguf_type), j->out, GLM_GGUF_ADAPTER_FILE);
    } else if (j->gguf) {
        s = glm_gguf_export_merged(j->base, j->out, NULL, j->params, j->n, j->scaling, j->gguf_type, j->vocab);
        if (s == GLM_OK)
            glm_log_info("wrote %s merged with the adapter of %s (scaling %g) as %s/%s, with an Ollama %s", j->base,
                         j->dir, j->scaling, j->out, GLM_GGUF_MODEL_FILE, GLM_GGUF_MODELFILE);
    } else if (!j->merge) {
        s = glm_export_adapter(j->out, NULL, j->params, j->n, j->ac, j->dt);
        if (s == GLM_OK)
            glm_log_info("wrote the PEFT adapter of %s (%zu tensors, %s) to %s", j->dir, j->n, j->dtype_s, j->out);
    } else {
        s = glm_export_merged(j->base, j->out, NULL, j->params, j->n, j->scaling, j->merge_dtype);
        if (s == GLM_OK)
            glm_log_info("wrote %s merged with the adapter of %s (scaling %g) to %s", j->base, j->dir, j->scaling, j->out);
    }
    return s;
}

/* Ctrl-C (SIGINT) or SIGTERM during an export: the export is written by a child process (the
 * export library has no stop points: a merged model is written tensor after tensor for minutes),
 * which the signal ends (the parent forwards what it is sent); the parent then removes the
 * child's temporary directory "<out>.tmp.<child pid>" (the size of the model) with
 * glm_cleanup_leftovers, which also puts back an -o that a kill inside the final swap left
 * missing, and dies of the same signal. A child killed otherwise (out of memory, a crash) is
 * cleaned up the same way and reported. */
static volatile sig_atomic_t g_export_sig;
static volatile pid_t g_export_child;
static void on_export_signal(int sig) {
    g_export_sig = sig;
    if (g_export_child > 0) kill(g_export_child, sig);
}

/* Catches (on) or restores (!on) SIGINT and SIGTERM; a signal the caller ignores stays ignored. */
static void export_signals(bool on) {
    static bool caught[2];
    const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction sa = {0}, old;
        sigemptyset(&sa.sa_mask);
        if (on) {
            if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
            sa.sa_handler = on_export_signal;
            sa.sa_flags = SA_RESTART;
        } else if (!caught[i]) {
            continue;
        } else {
            sa.sa_handler = SIG_DFL;
        }
        if (sigaction(sigs[i], &sa, NULL) == 0) caught[i] = on;
    }
}

/* Runs export_write(j) in a child process and returns the exit status; see on_export_signal. */
static int export_guarded(const export_job *j) {
    g_export_sig = 0;
    export_signals(true);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the parent killed outright: stop too (the next run cleans up) */
        export_signals(false);
        if (g_export_sig) raise(g_export_sig); /* sent between the fork and here */
        glm_status s = export_write(j);
        int rc = s == GLM_OK ? GLM_EXIT_OK : cli_fail(s);
        fflush(NULL);
        _exit(rc);
    }
    if (pid < 0) { /* no process to spare: export here, without the clean-up on a signal */
        glm_log_debug("export-adapter: fork failed (%s): exporting in this process", strerror(errno));
        export_signals(false);
        glm_status s = export_write(j);
        return s == GLM_OK ? GLM_EXIT_OK : cli_fail(s);
    }
    g_export_child = pid;
    if (g_export_sig) kill(pid, g_export_sig); /* arrived before the child's pid was known */
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    g_export_child = 0;
    export_signals(false);
    if (!WIFSIGNALED(ws)) return WIFEXITED(ws) ? WEXITSTATUS(ws) : GLM_EXIT_FAIL;
    const int csig = WTERMSIG(ws), sig = g_export_sig ? g_export_sig : csig;
    char *real = NULL;
    if (glm_output_target_dir(j->out, &real) != GLM_OK) real = NULL;
    glm_cleanup_leftovers(real ? real : j->out); /* the child is gone: its temporary directory goes */
    free(real);
    if (sig == SIGINT || sig == SIGTERM) {
        glm_err(GLM_ERR_IO, "interrupted (%s): the export stopped and its temporary directory was removed; %s was not "
                "half-written", strsignal(sig), j->out);
        cli_show_error();
        if (j->out_made) rmdir(j->out); /* made by this export, still empty: absent again */
        raise(sig); /* the default action now: the process ends as killed by the signal */
    }
    return cli_fail(glm_err(GLM_ERR_IO, "the export process was killed by signal %d (%s); its temporary directory "
                            "was removed and %s was not half-written; hint: if it ran out of memory, free some or "
                            "export on a larger machine", csig, strsignal(csig), j->out));
}

int cmd_export_adapter(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *dtype_s = "fp32", *base = NULL, *format = "peft", *tok_dir = NULL;
    bool merge = false, dtype_given = false, help = false;
    const glm_arg_opt opts[] = {
        {.name = "checkpoint", .type = GLM_ARG_STRING, .dest = &ckpt, .metavar = "DIR",
         .help = "the checkpoint to export: a checkpoint-N directory, or a training output directory (its newest "
                 "checkpoint, which must be complete)"},
        {.name = "output", .short_name = 'o', .type = GLM_ARG_STRING, .dest = &out, .metavar = "OUTDIR",
         .help = "the directory to write (replaced as a whole: a new or empty one, or an earlier export)"},
        {.name = "format", .type = GLM_ARG_STRING, .dest = &format, .metavar = "peft|gguf",
         .help = "peft (default): safetensors for PEFT, transformers and vLLM; gguf: llama.cpp's format "
                 "(adapter.gguf, or with --merge model.gguf and an Ollama Modelfile)"},
        {.name = "dtype", .type = GLM_ARG_STRING, .dest = &dtype_s, .metavar = "fp32|bf16|fp16|q8_0", .given = &dtype_given,
         .help = "the adapter's dtype: fp32 (default), bf16 or fp16 (also float32, bfloat16, float16, f32, f16); with "
                 "--merge, the merged model's (default there: the base checkpoint's); --format gguf --merge also takes "
                 "q8_0 (llama.cpp's 8-bit blocks)"},
        {.name = "merge", .type = GLM_ARG_FLAG, .dest = &merge,
         .help = "write the whole model instead: every adapted weight becomes W + scaling * B A, in the base "
                 "checkpoint's layout, shard files and dtype (or --dtype), with its config, tokenizer and generation "
                 "files copied"},
        {.name = "base", .type = GLM_ARG_STRING, .dest = &base, .metavar = "MODEL",
         .help = "--merge: the base model to merge into (default: the run's --model, named by the checkpoint)"},
        {.name = "tokenizer", .type = GLM_ARG_STRING, .dest = &tok_dir, .metavar = "DIR",
         .help = "--format gguf --merge: the tokenizer to put in the model file (tokenizer.model and "
                 "tokenizer_config.json; default: the base model's directory)"},
    };
    const glm_arg_cmd cmd = {.name = "export-adapter", .usage = USAGE, .about = ABOUT, .epilog = EPILOG, .opts = opts,
                             .n_opts = sizeof opts / sizeof *opts};
    glm_status s = glm_args_parse(&cmd, argc - 1, argv + 1, &help);
    if (s == GLM_OK && help) {
        glm_args_help(stdout, &cmd);
        return GLM_EXIT_OK;
    }
    if (s == GLM_OK && (!ckpt || !out)) s = glm_err(GLM_ERR_ARG, "export-adapter needs --checkpoint DIR and -o OUTDIR");
    char ckptbuf[4096];
    if (s == GLM_OK && *ckpt) { /* "run/" names "run" (no "run//checkpoint-4" in messages) */
        snprintf(ckptbuf, sizeof ckptbuf, "%s", ckpt);
        ckpt = glm_path_strip_slash(ckptbuf);
    }
    if (s == GLM_OK && !*out) s = glm_err(GLM_ERR_ARG, "export-adapter: -o \"\" is empty; hint: -o OUTDIR");
    char outbuf[4096];
    if (s == GLM_OK) { /* "adapter/" names the directory "adapter" */
        snprintf(outbuf, sizeof outbuf, "%s", out);
        out = glm_path_strip_slash(outbuf);
    }
    if (s == GLM_OK && base && !merge) s = glm_err(GLM_ERR_ARG, "--base is only used with --merge");
    bool gguf = false;
    if (s == GLM_OK) {
        if (!strcmp(format, "gguf")) gguf = true;
        else if (strcmp(format, "peft")) s = glm_err(GLM_ERR_ARG, "--format: expected peft or gguf, got \"%s\"", format);
    }
    if (s == GLM_OK && tok_dir && !(gguf && merge))
        s = glm_err(GLM_ERR_ARG, "--tokenizer is only used with --format gguf --merge (the model file carries the tokenizer)");
    glm_st_dtype dt = GLM_ST_F32;
    glm_ggml_type gt = GLM_GGML_F32;
    if (s == GLM_OK) {
        if (!strcmp(dtype_s, "fp32") || !strcmp(dtype_s, "float32") || !strcmp(dtype_s, "f32")) dt = GLM_ST_F32, gt = GLM_GGML_F32;
        else if (!strcmp(dtype_s, "bf16") || !strcmp(dtype_s, "bfloat16")) dt = GLM_ST_BF16, gt = GLM_GGML_BF16;
        else if (!strcmp(dtype_s, "fp16") || !strcmp(dtype_s, "float16") || !strcmp(dtype_s, "f16")) dt = GLM_ST_F16, gt = GLM_GGML_F16;
        else if (!strcmp(dtype_s, "q8_0") && gguf && merge) gt = GLM_GGML_Q8_0;
        else if (!strcmp(dtype_s, "q8_0"))
            s = glm_err(GLM_ERR_ARG, "--dtype q8_0 is for a merged GGUF model; hint: --format gguf --merge --dtype q8_0 (an "
                        "adapter stays f32, f16 or bf16)");
        else s = glm_err(GLM_ERR_ARG, "--dtype: expected fp32 (also float32, f32), bf16 (bfloat16) or fp16 (float16, f16)%s, "
                         "got \"%s\"", gguf && merge ? ", or q8_0" : "; q8_0 with --format gguf --merge only", dtype_s);
    }
    if (s != GLM_OK) return cli_fail(s);

    char *dir = NULL, *cfg_path = NULL, *st_path = NULL, *text = NULL;
    json_t *cfg = NULL;
    glm_st_set *st = NULL;
    glm_param *params = NULL;
    size_t n = 0, len;
    const char **targets = NULL;
    s = resolve_checkpoint(ckpt, &dir); /* verified there, once */
    if (s == GLM_OK) {
        /* the base model: --base, else the one the checkpoint's adapter_config.json names */
        char *cp = glm_path_join(dir, "adapter_config.json");
        json_t *c = json_load_file(cp, 0, NULL);
        const char *b = base ? base : (c ? json_string_value(json_object_get(c, "base_model_name_or_path")) : NULL);
        s = check_outdir(out, merge, merge ? b : NULL, ckpt);
        json_decref(c);
        free(cp);
    }
    /* -o made when new (removed again when the export fails) and locked for the export: a second
     * export into it stops at once instead of both reporting success */
    bool out_made = false;
    int out_lock = -1;
    if (s == GLM_OK) {
        out_made = !glm_is_dir(out);
        s = glm_mkdir_p(out);
        if (s != GLM_OK && s != GLM_ERR_NOMEM) {
            char why[512];
            snprintf(why, sizeof why, "%s", glm_errmsg());
            s = glm_err(s, "-o %s: cannot create the output (%s); hint: an output path in a directory you can write to",
                        out, why);
        }
        if (s == GLM_OK) s = glm_lock_dir(out, "glmtune export-adapter", "-o", &out_lock);
        if (s == GLM_ERR_ARG) out_made = false; /* in use: made at the same moment by the export that holds it */
    }
    if (s == GLM_OK) {
        cfg_path = glm_path_join(dir, "adapter_config.json");
        st_path = glm_path_join(dir, "adapter_model.safetensors");
        s = glm_read_file(cfg_path, &text, &len);
    }
    if (s == GLM_OK) {
        json_error_t je;
        cfg = json_loads(text, 0, &je);
        if (!cfg) s = glm_err(GLM_ERR_FORMAT, "%s:%d: %s", cfg_path, je.line, je.text);
    }
    if (s == GLM_OK) s = glm_st_open(st_path, &st);
    if (s == GLM_OK) {
        n = glm_st_count(st);
        params = calloc(n ? n : 1, sizeof *params);
        const glm_family *row = NULL; /* the run's row: the one whose LoRA weights the adapter holds */
        for (size_t i = 0; i < n && !row; i++)
            for (int r = 0; r < glm_family_count() && !row; r++) {
                const char *name = glm_st_at(st, i)->name;
                if (!strncmp(name, GLM_PEFT_PREFIX, strlen(GLM_PEFT_PREFIX))) name += strlen(GLM_PEFT_PREFIX);
                if (glm_family_lora_weight(glm_family_at(r), name)) row = glm_family_at(r);
            }
        for (size_t i = 0; i < n && s == GLM_OK; i++) {
            const glm_st_tensor *t = glm_st_at(st, i);
            const char *name = t->name;
            if (!strncmp(name, GLM_PEFT_PREFIX, strlen(GLM_PEFT_PREFIX))) name += strlen(GLM_PEFT_PREFIX);
            if (!row || !glm_family_lora_weight(row, name)) { /* it would be copied into the export unchecked */
                char mods[256] = "";
                for (int r = 0; r < glm_family_count(); r++) {
                    const glm_family *f = row ? row : glm_family_at(r);
                    for (int k = 0; k < f->n_linears; k++)
                        snprintf(mods + strlen(mods), sizeof mods - strlen(mods), "%s%s", *mods ? ", " : "",
                                 f->linear_names[k]);
                    if (row) break;
                }
                char rows[96];
                snprintf(rows, sizeof rows, "%s%s", row ? "the layout " : "any layout, such as ",
                         row ? row->layout_name : glm_family_at(0)->layout_name);
                s = glm_err(GLM_ERR_FORMAT, "%s: tensor '%s' is not a LoRA weight (lora_A or lora_B) of a module of %s "
                            "(%s), and glmtune exports only the LoRA weights it trains; hint: export a checkpoint "
                            "that glmtune train wrote, unchanged (a checkpoint-N or the --output-dir of the run)", st_path,
                            t->name, rows, mods);
                break;
            }
            glm_param *p = &params[i];
            snprintf(p->name, sizeof p->name, "%s", name);
            if (t->ndim != 2) {
                s = glm_err(GLM_ERR_FORMAT, "%s: tensor %s has %d dimensions, a LoRA weight has 2", st_path, t->name, t->ndim);
                break;
            }
            p->ndim = 2;
            p->shape[0] = t->shape[0];
            p->shape[1] = t->shape[1];
            p->numel = t->numel;
            p->w = malloc(sizeof(float) * (size_t)t->numel);
            s = glm_st_to_f32(t->dtype, t->data, (size_t)t->numel, p->w);
        }
    }
    glm_adapter_cfg ac = {0};
    export_job job = {0};
    if (s == GLM_OK) {
        json_t *tm = json_object_get(cfg, "target_modules");
        ac.n_targets = json_array_size(tm);
        targets = calloc(ac.n_targets + 1, sizeof *targets);
        for (size_t i = 0; i < ac.n_targets; i++) targets[i] = json_string_value(json_array_get(tm, i));
        ac.target_modules = targets;
        ac.r = (int)json_integer_value(json_object_get(cfg, "r"));
        ac.alpha = json_number_value(json_object_get(cfg, "lora_alpha"));
        ac.dropout = json_number_value(json_object_get(cfg, "lora_dropout"));
        ac.use_rslora = json_is_true(json_object_get(cfg, "use_rslora"));
        ac.base_model_name_or_path = json_string_value(json_object_get(cfg, "base_model_name_or_path"));
        if (ac.r < 1) s = glm_err(GLM_ERR_FORMAT, "%s: \"r\" must be a positive integer", cfg_path);
    }
    if (s == GLM_OK && !merge && !gguf) {
        for (size_t i = 0; i < ac.n_targets; i++) /* a module the family table says vLLM does not load */
            for (int r = 0; r < glm_family_count(); r++) {
                const glm_family *f = glm_family_at(r);
                for (int k = 0; k < f->n_linears; k++)
                    if (!f->linear_vllm[k] && ac.target_modules[i] && !strcmp(ac.target_modules[i], f->linear_names[k]))
                        glm_log_warn("the adapter adapts %s (%s layout): PEFT and transformers load it, vLLM does not "
                                     "(see --help); hint: for vLLM, train with --lora-target vllm or export with --merge",
                                     f->linear_names[k], f->layout_name);
            }
    } else if (s == GLM_OK && merge) {
        const char *b = base ? base : ac.base_model_name_or_path;
        if (!b) s = glm_err(GLM_ERR_ARG, "--merge: the checkpoint does not name its base model; hint: --base MODEL_DIR");
        if (s == GLM_OK && base && ac.base_model_name_or_path) s = same_shape(base, ac.base_model_name_or_path);
        double scaling = ac.use_rslora ? ac.alpha / sqrt((double)ac.r) : ac.alpha / ac.r;
        if (s == GLM_OK) { /* a QLoRA run: its adapter goes onto the bf16 base, as PEFT merges a QLoRA adapter */
            char *gp = glm_path_join(dir, "glmtune_state.json");
            json_t *gs = json_load_file(gp, 0, NULL), *qb = json_object_get(json_object_get(gs, "settings"), "quantization_bit");
            const char *bd = json_string_value(json_object_get(json_object_get(gs, "settings"), "base_dtype"));
            if (json_integer_value(qb) == 4)
                glm_log_info("note: %s trained on a 4-bit (QLoRA) base; its adapter is merged into the bf16 weights of %s, "
                             "as PEFT merges a QLoRA adapter", dir, b);
            else if (bd && !strcmp(bd, "fp8"))
                glm_log_info("note: %s trained on an FP8 base; its adapter is merged into the bf16 weights of %s", dir, b);
            json_decref(gs);
            free(gp);
        }
        job.base = b;
        job.scaling = scaling;
    }
    export_vocab ev = {0};
    if (s == GLM_OK && gguf && merge) { /* the tokenizer, read before any file is written */
        glm_config bc;
        s = glm_config_load(job.base, 0, &bc);
        if (s == GLM_OK) s = export_vocab_load(tok_dir ? tok_dir : job.base, bc.V, &ev);
        if (s == GLM_OK) glm_gguf_vocab_use_family(&ev.v, glm_family_get(bc.layout));
        if (s != GLM_OK && !tok_dir && s != GLM_ERR_NOMEM) {
            char why[1024];
            snprintf(why, sizeof why, "%s", glm_errmsg());
            s = glm_err(s, "%s; hint: a GGUF model carries its tokenizer: --tokenizer DIR (a directory with GLM-4's "
                        "tokenizer.model and tokenizer_config.json)", why);
        }
        job.vocab = &ev.v;
    }
    int rc = GLM_EXIT_OK;
    if (s == GLM_OK) {
        job.out = out, job.dir = dir, job.dtype_s = dtype_s, job.merge = merge;
        job.params = params, job.n = n, job.ac = &ac, job.dt = dt;
        job.merge_dtype = dtype_given ? (int)dt : GLM_EXPORT_SAME_DTYPE;
        job.gguf = gguf;
        job.gguf_type = dtype_given || !merge ? (int)gt : GLM_GGUF_SAME_TYPE;
        job.out_made = out_made;
        rc = export_guarded(&job);
    } else {
        rc = cli_fail(s);
    }
    if (rc != GLM_EXIT_OK && out_made) rmdir(out); /* made by this export, still empty: absent again */
    if (out_lock >= 0) close(out_lock);
    export_vocab_free(&ev);
    for (size_t i = 0; i < n; i++) free(params[i].w);
    free(params);
    free(targets);
    glm_st_close(st);
    json_decref(cfg);
    free(text);
    free(cfg_path);
    free(st_path);
    free(dir);
    return rc;
}
