/* glmtune train: parses the options (flags and --config YAML, tool/train/options.h), prints the
 * resolved settings and runs the training loop (tool/train/train.c). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "tool/train/options.h"
#include "lora/model/plan.h"
#include "tool/cli.h"
#include "tool/train/dist.h"
#include "tool/train/launch.h"
#include "tool/train/train.h"

/* Ctrl-C (SIGINT) of a single-process run: the process ends at once, as before (a checkpoint is
 * written aside and renamed, so none is ever half-written), but says so first and names what stays:
 * write(2) and a constant message prepared beforehand are all a handler may use. Ranks of --nproc /
 * --gpus runs are left to the default: their supervisor reports the interrupt once.
 * SIGTERM and SIGUSR1 (a Slurm preemption or time limit; `sbatch --signal=USR1@120`), in every
 * training process, ranks included: finish the current optimizer step, write a checkpoint of it, and
 * exit with 128 + the signal (train_request_stop; the ranks agree on the step in its all-reduce); a
 * second one ends the process at once. A signal the caller ignores stays ignored. */
static char g_interrupt_msg[1200], g_stop_msg[1200];
static size_t g_interrupt_len, g_stop_len;
static volatile sig_atomic_t g_stop_asked;
static void on_interrupt(int sig) {
    ssize_t w = write(2, g_interrupt_msg, g_interrupt_len);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}
static void on_stop(int sig) {
    if (g_stop_asked) { /* asked again: stop now */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop_asked = 1;
    ssize_t w = write(2, g_stop_msg, g_stop_len);
    (void)w;
    train_request_stop(sig);
}
static void set_handler(int sig, void (*h)(int)) {
    struct sigaction sa = {0}, old;
    if (sigaction(sig, NULL, &old) != 0 || old.sa_handler == SIG_IGN) return;
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}
static void catch_signals(const char *output_dir, bool single, bool quiet_rank) {
    const char *dir = output_dir ? output_dir : "the output directory";
    int n = snprintf(g_interrupt_msg, sizeof g_interrupt_msg,
                     "\nglmtune: interrupted: stopping; the checkpoints in %s stay as they are (resume with "
                     "--resume-from-checkpoint)\n", dir);
    g_interrupt_len = n < 0 ? 0 : (size_t)n < sizeof g_interrupt_msg ? (size_t)n : sizeof g_interrupt_msg - 1;
    n = quiet_rank ? 0 : snprintf(g_stop_msg, sizeof g_stop_msg,
                                  "\nglmtune: asked to stop (SIGTERM/SIGUSR1): finishing the current optimizer step, then "
                                  "a checkpoint in %s and exit (again: stop at once)\n", dir);
    g_stop_len = n < 0 ? 0 : (size_t)n < sizeof g_stop_msg ? (size_t)n : sizeof g_stop_msg - 1;
    if (single) set_handler(SIGINT, on_interrupt);
    set_handler(SIGTERM, on_stop);
    set_handler(SIGUSR1, on_stop);
}

int cmd_train(int argc, char **argv) {
    glm_train_opts o;
    memset(&o, 0, sizeof o);
    glm_status s = GLM_OK;
    bool quiet = false, quiet_settings = false;
    /* --quiet is a display option of the command, not a training setting */
    char **args = malloc(sizeof(char *) * (size_t)(argc + 1));
    int n = 0;
    for (int i = 1; i < argc; i++) { /* argv[0] is "train" */
        if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) quiet = true;
        else args[n++] = argv[i];
    }
    args[n] = NULL;
    /* the settings' notes and warnings once per run: not again in the ranks glmtune's supervisor
     * started (it printed them: GLMTUNE_SUPERVISED) nor in ranks above 0 (errors still print) */
    dist_info d0;
    const int saved_level = glm_log_level;
    if ((getenv("GLMTUNE_SUPERVISED") || (dist_detect(&d0) == GLM_OK && d0.rank > 0)) && glm_log_level > 0)
        glm_log_level = 0;
    if (s == GLM_OK) s = glm_opts_parse(&o, n, args);
    free(args);
    if (s == GLM_OK && o.help) {
        printf("usage: glmtune train [--config FILE.yaml] [options]\n\n"
               "LoRA fine-tuning of a GLM-4 checkpoint on shards from `glmtune tokenize`. Every option is also\n"
               "a snake_case key of --config (LLaMA-Factory-style YAML); flags override the file.\n"
               "(-q, --quiet: no progress lines; --verbose: debug messages too; command line only.)\n\n");
        if (!glm_mpi_built())
            printf("(this glmtune was built without MPI: --nproc and runs under mpirun are not available)\n\n");
        glm_opts_help(stdout);
        glm_opts_free(&o);
        return GLM_EXIT_OK;
    }
    if (s == GLM_OK) s = glm_opts_validate(&o);
    if (s != GLM_OK) { /* every settings problem is a usage error (exit 2) */
        glm_opts_free(&o);
        cli_fail(s);
        return GLM_EXIT_USAGE;
    }
    /* evaluation asked for (eval_strategy steps/epoch set, or eval_steps given) without eval_data: the val split
     * of the training shards (tokenize's --val-size / val_size), as LLaMA-Factory evaluates on val_size's split */
    size_t nopt;
    const glm_opt_def *tab = glm_opts_table(&nopt);
    unsigned char src_strategy = 0, src_eval_steps = 0;
    for (size_t i = 0; i < nopt; i++) {
        if (!strcmp(tab[i].key, "eval_strategy")) src_strategy = o.src[i];
        if (!strcmp(tab[i].key, "eval_steps")) src_eval_steps = o.src[i];
    }
    bool no_eval = !strcmp(o.eval_strategy, "no");
    bool asked = !no_eval && ((src_strategy == GLM_SRC_CONFIG || src_strategy == GLM_SRC_CLI) ||
                              ((src_eval_steps == GLM_SRC_CONFIG || src_eval_steps == GLM_SRC_CLI) && o.eval_steps > 0));
    bool eval_from_val = false;
    if (o.eval_data && *o.eval_data && access(o.eval_data, F_OK) != 0 && !strchr(o.eval_data, '/')) {
        /* LLaMA-Factory's eval_dataset names datasets: glmtune tokenize --config put them in the val split */
        glm_log_info("eval_dataset: %s names datasets, which `glmtune tokenize --config` tokenized into the val split of "
                     "the shards: that split stands for them", o.eval_data);
        if (no_eval)
            glm_log_warn("eval_strategy is no%s: eval_dataset %s is not evaluated; hint: eval_strategy: steps",
                         src_strategy == GLM_SRC_LF ? " (transformers' default, the YAML does not set it)" : "", o.eval_data);
        else asked = true;
        free(o.eval_data);
        o.eval_data = NULL;
    }
    if (asked && !(o.eval_data && *o.eval_data) && o.data) eval_from_val = true;
    if (no_eval && o.eval_data && *o.eval_data)
        glm_log_warn("eval_strategy is no%s: eval_data %s is not evaluated; hint: eval_strategy: steps",
                     src_strategy == GLM_SRC_LF ? " (transformers' default, the YAML does not set it)" : "", o.eval_data);
    else if (no_eval && (src_eval_steps == GLM_SRC_CONFIG || src_eval_steps == GLM_SRC_CLI) && o.eval_steps > 0)
        glm_log_warn("eval_steps is %lld but eval_strategy is no%s: no evaluation will run; hint: eval_strategy: steps",
                     (long long)o.eval_steps, src_strategy == GLM_SRC_LF ? " (transformers' default)" : "");
    glm_log_level = saved_level;
    if (o.gpus && o.context_parallel > 1) { /* before any worker starts: a usage error */
        int devs[1024], n = launch_parse_gpus(o.gpus, devs, 1024);
        if (n > 0 && n % o.context_parallel) {
            s = glm_err(GLM_ERR_ARG, "--context-parallel %lld does not divide the %d GPUs of --gpus %s; hint: --gpus %lld "
                        "(or a multiple), or a --context-parallel that divides %d", (long long)o.context_parallel, n, o.gpus,
                        (long long)o.context_parallel, n);
            glm_opts_free(&o);
            cli_fail(s);
            return GLM_EXIT_USAGE;
        }
    }
    /* --gpus / --nproc: this process supervises the ranks it starts (tool/train/launch.c) */
    if (!o.dry_run) {
        char **targs = malloc(sizeof(char *) * (size_t)(argc + 1));
        for (int i = 1; i < argc; i++) targs[i - 1] = argv[i];
        int code = launch_train(argc - 1, targs, o.gpus, (int)o.nproc, quiet);
        free(targs);
        if (code >= 0) {
            glm_opts_free(&o);
            return code;
        }
    }
    dist_info di;
    if (dist_detect(&di) == GLM_OK && di.rank > 0) quiet_settings = true; /* rank 0 prints them */
    if (!quiet && !quiet_settings) glm_opts_print(stderr, &o);
    char targets[1024] = "";
    for (size_t i = 0; i < o.lora_target.n; i++)
        snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s%s", i ? "," : "", o.lora_target.v[i]);
    json_t *sj = glm_opts_to_json(&o);
    glm_ckpt_mode ckpt = GLM_CKPT_AUTO;
    glm_ckpt_parse(o.gradient_checkpointing, &ckpt); /* checked by glm_opts_validate */
    train_settings ts = {
        .opt = o,
        .eval_data = o.eval_data && *o.eval_data ? o.eval_data : eval_from_val ? o.data : NULL,
        .resume = o.resume_from_checkpoint,
        .device = o.device ? o.device : "auto", /* setup() in train.c resolves auto */
        .lora_target = o.lora_target.n ? targets : "all",
        .eval_steps = o.eval_steps > 0 || o.eval_ratio > 0 ? o.eval_steps : o.save_steps,
        .eval_ratio = o.eval_steps > 0 || o.eval_ratio > 0 ? o.eval_ratio : o.save_ratio,
        .by_sample = !o.packing,
        .eval_from_val = eval_from_val,
        .rope_inv_freq_bf16 = o.rope_inv_freq_dtype && !strcmp(o.rope_inv_freq_dtype, "bfloat16"),
        .ckpt_mode = (int)ckpt,
        .max_gpu_gib = o.max_gpu_memory,
        .quiet = quiet,
        .quant_bits = (int)o.quantization_bit,
        .quant_type = o.quantization_type,
        .double_quant = o.double_quantization,
        .fp8 = !strcmp(o.base_dtype, "fp8"),
        .context_parallel = (int)o.context_parallel,
        .dry_run_world = 1,
        .settings_json = sj ? json_dumps(sj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL,
    };
    json_decref(sj);
    if (ts.opt.dry_run) {
        int fits = 0;
        if (o.nproc > 0) ts.dry_run_world = (int)o.nproc;
        if (o.gpus) {
            int devs[1024], n = launch_parse_gpus(o.gpus, devs, 1024);
            if (n < 0) {
                free(ts.settings_json);
                glm_opts_free(&o);
                return cli_fail(GLM_ERR_ARG);
            }
            ts.dry_run_world = n;
        }
        s = train_dry_run(&ts, &fits);
        free(ts.settings_json);
        glm_opts_free(&o);
        if (s) return cli_fail(s);
        return fits ? GLM_EXIT_OK : GLM_EXIT_FAIL;
    }
    bool single = dist_detect(&di) != GLM_OK || di.world <= 1;
    catch_signals(ts.opt.output_dir, single, !single && di.rank > 0);
    s = train_run(&ts);
    free(ts.settings_json);
    glm_opts_free(&o);
    /* stopped by SIGTERM / SIGUSR1 with a checkpoint: 128 + the signal; a rank of glmtune's supervisor exits 0 (under
     * mpirun a non-zero status would abort the other ranks), and the supervisor reports 128 + what it received */
    if (s == GLM_OK && train_stopped_by()) return getenv("GLMTUNE_SUPERVISED") ? GLM_EXIT_OK : 128 + train_stopped_by();
    return s == GLM_OK ? GLM_EXIT_OK : cli_fail(s);
}
