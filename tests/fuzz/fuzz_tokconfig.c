/* tests/fuzz/fuzz_tokconfig.c: glmtune tokenize --config FILE.yaml (tool/tokenize/tokenize_config.c:
 * the LLaMA-Factory data keys read by tok_config_load through the training config's YAML reader,
 * glm_yaml_config_each: libyaml, numbers, booleans, null spellings, the refused stages and mix
 * strategies, nested mappings, unknown keys with their closest known key). The input is the
 * file. */
#include <stdint.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "tool/tokenize/tokenize_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    const char *path = fuzz_write_file(data, size, ".yaml");
    tok_config c;
    if (tok_config_load(path, &c) == GLM_OK) tok_config_free(&c);
    unlink(path);
    return 0;
}
