/* tests/fuzz/replay_main.c: runs a libFuzzer harness without libFuzzer (any compiler, any
 * sanitizer or none): calls LLVMFuzzerTestOneInput on every file named on the command line and
 * on every file of every folder named there (in name order, hidden files skipped), as libFuzzer
 * does when given files. Linked with each tests/fuzz/fuzz_<target>.c into replay_<target>, which
 * ctest runs on tests/fuzz/regressions/<target>/ (label cpu), so that the sanitizer build replays
 * every seed and every fixed finding under AddressSanitizer and UndefinedBehaviorSanitizer.
 * A crash is the harness's abort or a sanitizer's report; a missing or empty folder is an error
 * (exit 2) so that a wrong path cannot pass. With -v, prints each input and the
 * last error message glmtune set while it ran (what stopped the parse; empty: none). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* optional in a harness, as in libFuzzer */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* glmtune's last error message (common/status.h), for -v */
const char *glm_errmsg(void) __attribute__((weak));
void glm_err_clear(void) __attribute__((weak));

static int verbose;

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 2;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 2;
    }
    if (verbose) fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    /* an exact-size copy, so that ASan sees reads past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) return 2;
    memcpy(exact, buf, n);
    free(buf);
    if (glm_err_clear) glm_err_clear();
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    if (verbose && glm_errmsg) fprintf(stderr, "replay:   last error: %s\n", glm_errmsg());
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_dir(const char *dir, size_t *count) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open folder %s\n", dir);
        return 2;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn) return 2;
        names = nn;
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        if (!names[n]) return 2;
        sprintf(names[n], "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            rc = run_file(names[i]);
            if (rc == 0) ++*count;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    size_t count = 0;
    int rc = 0, args = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (!strcmp(argv[i], "-v")) {
            verbose = 1;
            continue;
        }
        args++;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such file or folder\n", argv[i]);
            rc = 2;
        } else if (S_ISDIR(st.st_mode)) {
            size_t before = count;
            rc = run_dir(argv[i], &count);
            if (rc == 0 && count == before) {
                fprintf(stderr, "replay: %s: no input files\n", argv[i]);
                rc = 2;
            }
        } else {
            rc = run_file(argv[i]);
            if (rc == 0) count++;
        }
    }
    if (!args) {
        fprintf(stderr, "usage: %s [-v] FILE|FOLDER...\n", argv[0]);
        return 2;
    }
    if (rc == 0) printf("replay: %zu inputs, no crash\n", count);
    return rc;
}
