/* tool/cli.h: small helpers shared by the subcommands: exit codes and error display. */
#ifndef GLM_CLI_H
#define GLM_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

/* Exit codes (docs/design.md §4). */
enum { GLM_EXIT_OK = 0, GLM_EXIT_FAIL = 1, GLM_EXIT_USAGE = 2 };

/* 1 when arg is exactly `name` (the top level's own words: help, --version). The subcommands
 * read their options with the engine of common/args.h. */
bool cli_flag(const char *arg, const char *name);
/* Maps a status to an exit code: GLM_ERR_ARG -> 2, other errors -> 1, and prints the message. */
int cli_fail(glm_status s);
/* Prints the current error message (glm_errmsg) unless it is the one printed last: a message
 * printed early (a failed rank, before the others stop) is not repeated by cli_fail. */
void cli_show_error(void);

/* The subcommands. */
int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_export_adapter(int argc, char **argv);
int cmd_init_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
