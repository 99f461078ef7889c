/* tests/fuzz/fuzz_shard.c: the shard reader (dataset/shard.c: glm_shard_open's validation), then
 * every row and document read as the loader reads them. For inputs of 128+ bytes of even length
 * (real shards are multiples of 8), the harness writes the payload and header CRC-32s the reader
 * expects (shard.h offsets 112 and 124), so that mutations get past the checksums to the
 * structure checks; odd lengths keep their bytes, to exercise the checksum checks themselves. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "dataset/shard.h"
#include "fuzz_common.h"

static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    if (size >= GLM_SHARD_HEADER_BYTES && !(size & 1)) {
        wr32(buf + 112, glm_crc32(0, buf + GLM_SHARD_HEADER_BYTES, size - GLM_SHARD_HEADER_BYTES));
        wr32(buf + 124, glm_crc32(0, buf, 124));
    }
    const char *path = fuzz_write_file(buf, size, ".bin");
    free(buf);
    glm_shard sh;
    if (glm_shard_open(path, &sh) == GLM_OK) {
        uint64_t sum = 0;
        for (uint32_t r = 0; r < sh.n_rows; r++) {
            for (uint64_t d = sh.rowdocs[r]; d < sh.rowdocs[r + 1]; d++) {
                const glm_shard_doc *doc = &sh.docs[d];
                sum += doc->len + doc->record;
                if (doc->source < sh.n_sources) sum += strlen(sh.sources[doc->source]);
            }
            for (uint32_t t = 0; t < sh.seq_len; t++) {
                uint64_t i = (uint64_t)r * sh.seq_len + t;
                sum += sh.ids[i] + ((sh.targets[i / 8] >> (i % 8)) & 1);
            }
        }
        if (sum == 0xdeadbeef) abort(); /* keeps the reads */
        glm_shard_close(&sh);
    }
    unlink(path);
    return 0;
}
