#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

int cli_value(int argc, char **argv, int *i, const char *name, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) {
        glm_err(GLM_ERR_ARG, "option %s needs a value; hint: see --help", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

bool cli_flag(const char *arg, const char *name) { return strcmp(arg, name) == 0; }

glm_status cli_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') return glm_err(GLM_ERR_ARG, "%s: expected a non-negative integer, got \"%s\"", opt, s ? s : "");
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return glm_err(GLM_ERR_ARG, "%s: expected a non-negative integer, got \"%s\"", opt, s);
    *out = v;
    return GLM_OK;
}

glm_status cli_double(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s) return glm_err(GLM_ERR_ARG, "%s: expected a number, got \"%s\"", opt, s);
    *out = v;
    return GLM_OK;
}

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
