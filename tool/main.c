/* glmtune: LoRA fine-tuning for GLM-4 (see README.md). Dispatches the subcommands. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/strdist.h"
#include "tool/cli.h"

static const char *USAGE =
    "usage: glmtune COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  tokenize        conversation corpora -> packed GLM-4 training shards (+ --encode/--decode)\n"
    "  inspect         show a shard's samples decoded with targets marked, and statistics\n"
    "  train           fine-tune LoRA adapters on the shards (resumable)\n"
    "  export-adapter  write a checkpoint as a PEFT adapter directory (or --merge a full model;\n"
    "                  --format gguf: llama.cpp's GGUF adapter or merged model)\n"
    "  init-model      write a randomly initialised GLM-4-shaped model (demos and tests)\n"
    "  bench           time LoRA training steps on this GPU (random weights, no checkpoint needed)\n"
    "\n"
    "Run `glmtune COMMAND --help` for a command's options. --verbose (anywhere; or the environment\n"
    "variable GLMTUNE_VERBOSE=1) adds debug messages.\n";

int main(int argc, char **argv) {
    /* a write past the file size limit (ulimit -f) fails with EFBIG and is reported like any failed
     * write (file, reason, hint; the temporary output removed) instead of killing the process with
     * SIGXFSZ, which leaves no message and the temporary files behind */
    signal(SIGXFSZ, SIG_IGN);
    /* --verbose anywhere: debug messages; exported so that the ranks a launcher starts inherit it */
    int k = 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--verbose")) setenv("GLMTUNE_VERBOSE", "1", 1);
        else argv[k++] = argv[i];
    argv[k] = NULL;
    argc = k;
    const char *vb = getenv("GLMTUNE_VERBOSE");
    if (vb && *vb) {
        if (!strcmp(vb, "1") || !strcasecmp(vb, "true") || !strcasecmp(vb, "yes") || !strcasecmp(vb, "on")) glm_log_level = 2;
        else if (strcmp(vb, "0") && strcasecmp(vb, "false") && strcasecmp(vb, "no") && strcasecmp(vb, "off"))
            glm_log_warn("GLMTUNE_VERBOSE=%s: expected 1 (true, yes, on) or 0 (false, no, off); ignored", vb);
    }
    char *help_argv[3];
    if (argc == 3 && cli_flag(argv[1], "help") && argv[2][0] != '-') { /* `glmtune help train` = `glmtune train --help` */
        help_argv[0] = argv[0];
        help_argv[1] = argv[2];
        help_argv[2] = "--help";
        argv = help_argv;
    }
    if (argc < 2 || cli_flag(argv[1], "--help") || cli_flag(argv[1], "-h") || cli_flag(argv[1], "help")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? GLM_EXIT_USAGE : GLM_EXIT_OK;
    }
    if (cli_flag(argv[1], "--version") || cli_flag(argv[1], "-V") || cli_flag(argv[1], "version")) {
        puts("glmtune 0.1.0");
        return GLM_EXIT_OK;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"tokenize", cmd_tokenize},
                {"inspect", cmd_inspect},
                {"train", cmd_train},
                {"export-adapter", cmd_export_adapter},
                {"init-model", cmd_init_model},
                {"bench", cmd_bench}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    const char *names[sizeof cmds / sizeof cmds[0]];
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) names[i] = cmds[i].name;
    const char *near = argv[1][0] == '-' ? NULL : glm_closest_name(argv[1], names, sizeof names / sizeof names[0]);
    char mean[64] = "";
    if (near) snprintf(mean, sizeof mean, "did you mean %s? ", near);
    glm_log_error("unknown command \"%s\"; hint: %sone of tokenize, inspect, train, export-adapter, init-model, bench%s", argv[1],
                  mean, argv[1][0] == '-' ? " (options of glmtune itself: --help, --version, --verbose)" : "");
    return GLM_EXIT_USAGE;
}
