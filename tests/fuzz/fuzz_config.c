/* tests/fuzz/fuzz_config.c: a model's config.json (lora/model/config.c: glm_config_load, both
 * layouts, every field's type and range checks, the rope_theta rules), then the config written
 * back (glm_config_to_json) as export-adapter --merge and init-model write it. The input is the
 * file; an odd length also passes a --rope-theta override. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "lora/model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    const char *path = fuzz_write_file(data, size, ".json");
    glm_config cfg;
    if (glm_config_load(path, (size & 1) ? 5e6 : 0, &cfg) == GLM_OK) {
        (void)glm_config_validate(&cfg, "fuzz");
        (void)glm_config_qkv_rows(&cfg);
        char *json = NULL;
        if (glm_config_to_json(&cfg, &json) == GLM_OK) free(json);
    }
    unlink(path);
    return 0;
}
