/* tests/fuzz/fuzz_safetensors.c: safetensors headers (common/safetensors.c: glm_st_open's header
 * parse and offset/shape/dtype validation), then every tensor's data converted to float32 as the
 * model loader and export-adapter read them. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    const char *path = fuzz_write_file(data, size, ".safetensors");
    glm_st_set *s = NULL;
    if (glm_st_open(path, &s) == GLM_OK) {
        for (size_t i = 0; i < glm_st_count(s); i++) {
            const glm_st_tensor *t = glm_st_at(s, i);
            if (t->numel > (1 << 20)) continue;
            float *f = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
            if (f) glm_st_to_f32(t->dtype, t->data, (size_t)t->numel, f);
            free(f);
            (void)glm_st_find(s, t->name);
        }
        (void)glm_st_metadata(s, "format");
        glm_st_close(s);
    }
    unlink(path);
    return 0;
}
