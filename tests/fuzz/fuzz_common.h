/* tests/fuzz/fuzz_common.h: helpers for the libFuzzer targets (see tests/fuzz/README.md). */
#ifndef GLM_FUZZ_COMMON_H
#define GLM_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Quiet: library messages are for people, not for fuzzing logs. */
static inline void fuzz_quiet(void) { glm_log_level = -1; }

#endif
