/* tests/cli/rename_shim.c: an LD_PRELOAD library for the output-swap tests. It wraps rename()
 * and renameat2() and, for the renames whose source or destination is named GLM_SHIM_NAME (the
 * last path component, e.g. the tokenize output directory), counts them and kills the process
 * with SIGKILL at the GLM_SHIM_KILL_AT-th one (1-based), before it happens
 * (GLM_SHIM_WHEN=before) or right after it (GLM_SHIM_WHEN=after). GLM_SHIM_NO_EXCHANGE=1 makes
 * renameat2(RENAME_EXCHANGE) fail with EINVAL, as on a filesystem without it, so that the
 * two-rename fallback runs. GLM_SHIM_WHEN=pause instead waits (up to 30 s, or until a signal
 * ends the process) before the chosen rename, after creating the file GLM_SHIM_MARK when set: a
 * test then knows the process is about to swap its output in, its temporary directory full.
 * Nothing else changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_count;

static int named(const char *p) {
    const char *name = getenv("GLM_SHIM_NAME");
    if (!name || !p) return 0;
    const char *b = strrchr(p, '/');
    return strcmp(b ? b + 1 : p, name) == 0;
}

/* Called around a matching rename: kills when this is the chosen one at the chosen moment. */
static void maybe_kill(int after) {
    const char *at = getenv("GLM_SHIM_KILL_AT"), *when = getenv("GLM_SHIM_WHEN");
    if (!at || atoi(at) != g_count) return;
    if (when && !strcmp(when, "pause")) {
        if (after) return;
        const char *mark = getenv("GLM_SHIM_MARK");
        int fd = mark ? open(mark, O_WRONLY | O_CREAT, 0644) : -1;
        if (fd >= 0) close(fd);
        for (int i = 0; i < 300; i++) usleep(100000);
        return;
    }
    int want_after = when && !strcmp(when, "after");
    if (want_after == after) raise(SIGKILL);
}

int rename(const char *a, const char *b) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int m = named(a) || named(b);
    if (m) g_count++, maybe_kill(0);
    int r = real(a, b);
    if (m) maybe_kill(1);
    return r;
}

int renameat2(int od, const char *a, int nd, const char *b, unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (!real) real = (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
    if ((flags & RENAME_EXCHANGE) && getenv("GLM_SHIM_NO_EXCHANGE")) {
        errno = EINVAL;
        return -1;
    }
    int m = named(a) || named(b);
    if (m) g_count++, maybe_kill(0);
    int r = real(od, a, nd, b, flags);
    if (m) maybe_kill(1);
    return r;
}
