/* tests/fuzz/fuzz_options.c: the train options (tool/train/options.c). First byte even: the input is a
 * YAML config file (--config FILE: libyaml, then every key's rule: table options, aliases,
 * lr_scheduler_kwargs mappings, LLaMA-Factory keys, refusals); odd: the rest is a command line,
 * one argument per line. Then validation, the JSON of the settings and the printout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "tool/train/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    if (size < 1) return 0;
    glm_train_opts o;
    memset(&o, 0, sizeof o);
    if (!(data[0] & 1)) {
        const char *path = fuzz_write_file(data + 1, size - 1, ".yaml");
        char *argv[] = {"--config", (char *)path};
        if (glm_opts_parse(&o, 2, argv) == GLM_OK) (void)glm_opts_validate(&o);
        unlink(path);
    } else {
        char *text = malloc(size);
        if (!text) return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        char *argv[64];
        int argc = 0;
        for (char *save = NULL, *t = strtok_r(text, "\n", &save); t && argc < 64; t = strtok_r(NULL, "\n", &save))
            if (strncmp(t, "--config", 8)) argv[argc++] = t; /* no file reads from the command line */
        if (glm_opts_parse(&o, argc, argv) == GLM_OK) (void)glm_opts_validate(&o);
        free(text);
    }
    json_t *j = glm_opts_to_json(&o);
    json_decref(j);
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        glm_opts_print(null, &o);
        fclose(null);
    }
    glm_opts_free(&o);
    return 0;
}
