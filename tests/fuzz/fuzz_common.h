/* tests/fuzz/fuzz_common.h: helpers for the libFuzzer targets (see tests/fuzz/README.md). */
#ifndef GLM_FUZZ_COMMON_H
#define GLM_FUZZ_COMMON_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

/* A per-process scratch file for parsers that read paths (shards, safetensors, YAML): the
 * input's bytes are written there. /dev/shm when it exists (memory), else /tmp. */
static inline const char *fuzz_write_file(const uint8_t *data, size_t size, const char *suffix) {
    static char path[256];
    snprintf(path, sizeof path, "%s/glmtune-fuzz.%d%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

/* A per-process scratch folder (made on first use, same place as fuzz_write_file's file), for
 * parsers that read a folder (a tokenizer, an adapter, a sharded index beside its shards). */
static char fuzz_dir_path[256];
/* Removes a folder and what it holds (the harnesses' folders hold files and plain folders). */
static inline void fuzz_rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[1024];
            if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= (int)sizeof p) continue;
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) fuzz_rm_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}
/* removed at exit, with what the harness left there */
static inline void fuzz_dir_remove(void) { fuzz_rm_tree(fuzz_dir_path); }
static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_path[0]) {
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/glmtune-fuzz-dir.%d",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
        if (mkdir(fuzz_dir_path, 0700) != 0) abort();
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* Writes `size` bytes to <fuzz_dir()>/<name> and returns that path (static buffer, one per call
 * site's next call). */
static inline const char *fuzz_write_in_dir(const char *name, const void *data, size_t size) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

/* Quiet: library messages are for people, not for fuzzing logs. */
static inline void fuzz_quiet(void) { glm_log_level = -1; }

#endif
