/* tests/fuzz/fuzz_stindex.c: a sharded checkpoint's model.safetensors.index.json
 * (common/safetensors.c: open_index through glm_st_open: the weight_map, file names that must
 * stay in the folder, each shard opened once, every mapped tensor in the shard the index names,
 * duplicate names across shards), then every tensor read as the model loader reads it. The input
 * is the index; the folder beside it holds two small shards written once per process:
 *   model-00001-of-00002.safetensors: "a.weight" F32 [2, 3], "b.weight" BF16 [4]
 *   model-00002-of-00002.safetensors: "c.weight" F16 [3], "a.bias" F32 [2]
 *   model.safetensors: "a.weight" F32 [2, 3] (a file also named by the other shards' tensor) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/safetensors.h"
#include "fuzz_common.h"

static void make_shards(void) {
    static int done;
    if (done) return;
    done = 1;
    static const float a[6] = {1, 2, 3, 4, 5, 6}, bias[2] = {0.5f, -0.5f};
    static const uint16_t b[4] = {0x3f80, 0x4000, 0x4040, 0x4080}, c[3] = {0x3c00, 0x4000, 0x4200};
    char p[512];
    glm_st_tensor t1[2] = {{.name = "a.weight", .dtype = GLM_ST_F32, .ndim = 2, .shape = {2, 3}, .numel = 6, .data = a, .nbytes = sizeof a},
                           {.name = "b.weight", .dtype = GLM_ST_BF16, .ndim = 1, .shape = {4}, .numel = 4, .data = b, .nbytes = sizeof b}};
    glm_st_tensor t2[2] = {{.name = "c.weight", .dtype = GLM_ST_F16, .ndim = 1, .shape = {3}, .numel = 3, .data = c, .nbytes = sizeof c},
                           {.name = "a.bias", .dtype = GLM_ST_F32, .ndim = 1, .shape = {2}, .numel = 2, .data = bias, .nbytes = sizeof bias}};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", fuzz_dir());
    if (glm_st_write(p, t1, 2, NULL, 0) != GLM_OK) abort();
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", fuzz_dir());
    if (glm_st_write(p, t2, 2, NULL, 0) != GLM_OK) abort();
    snprintf(p, sizeof p, "%s/model.safetensors", fuzz_dir());
    if (glm_st_write(p, t1, 1, NULL, 0) != GLM_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    make_shards();
    const char *path = fuzz_write_in_dir("model.safetensors.index.json", data, size);
    glm_st_set *s = NULL;
    if (glm_st_open(path, &s) == GLM_OK) {
        float buf[16];
        for (size_t i = 0; i < glm_st_count(s); i++) {
            const glm_st_tensor *t = glm_st_at(s, i);
            if (t->numel > 16) continue;
            (void)glm_st_read_f32(s, t->name, t->ndim, t->shape, buf);
            (void)glm_st_find(s, t->name);
        }
        (void)glm_st_metadata(s, "format");
        glm_st_close(s);
    }
    /* the folder form: the index is preferred to model.safetensors */
    if (glm_st_open(fuzz_dir(), &s) == GLM_OK) glm_st_close(s);
    unlink(path);
    return 0;
}
