/* tool/cli.h: small helpers shared by the subcommands: option matching and exit codes. */
#ifndef GLM_CLI_H
#define GLM_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

/* Exit codes (DESIGN.md §4). */
enum { GLM_EXIT_OK = 0, GLM_EXIT_FAIL = 1, GLM_EXIT_USAGE = 2 };

/* If argv[*i] is `--name VALUE` or `--name=VALUE`, stores VALUE in *val, advances *i past it and
 * returns 1; returns -1 (with a message) when the value is missing; 0 when argv[*i] is another
 * option. */
int cli_value(int argc, char **argv, int *i, const char *name, const char **val);
/* 1 when argv[i] is exactly the flag `name`. */
bool cli_flag(const char *arg, const char *name);
/* Parses a non-negative integer / a number; GLM_ERR_ARG naming the option otherwise. */
glm_status cli_u64(const char *opt, const char *s, uint64_t *out);
glm_status cli_double(const char *opt, const char *s, double *out);
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
