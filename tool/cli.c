#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

bool cli_flag(const char *arg, const char *name) { return strcmp(arg, name) == 0; }

static char *g_shown; /* the error message printed last (cli_show_error) */

void cli_show_error(void) {
    if (g_shown && !strcmp(g_shown, glm_errmsg())) return;
    glm_log_error("%s", glm_errmsg());
    free(g_shown);
    g_shown = strdup(glm_errmsg());
}

int cli_fail(glm_status s) {
    cli_show_error();
    return s == GLM_ERR_ARG ? GLM_EXIT_USAGE : GLM_EXIT_FAIL;
}
