/* tests/fuzz/fuzz_archive.c: corpus files through the reader (dataset/reader.c: libarchive's
 * tar / zip / gzip / zstd / xz / bzip2 readers, archive members and their names, compressed
 * members, the "not gzip" fallback, then the JSON splitter and record parse of what comes out).
 * The first input byte picks the file name's suffix, which decides how the reader opens it;
 * the rest is the file. Records are capped at 64 KiB, and reading stops after 4096 records. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset/reader.h"
#include "fuzz_common.h"

/* no plain ".json": a .json file whose content is a dataset_info.json registry makes the reader
 * open the files it names (fuzz_dsinfo covers registries) */
static const char *const k_suffix[] = {".tar", ".tar.gz", ".tgz", ".zip", ".jsonl.gz", ".json.gz", ".jsonl.zst",
                                       ".json.xz", ".jsonl.bz2", ".jsonl", ".tar.zst", ".tar.xz", ".tar.bz2",
                                       ".json.zst", ".jsonl.xz", ".json.bz2"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    if (size < 1) return 0;
    const char *suffix = k_suffix[data[0] % (sizeof k_suffix / sizeof *k_suffix)];
    const char *path = fuzz_write_file(data + 1, size - 1, suffix);
    const char *inputs[1] = {path};
    glm_reader *r = NULL;
    if (glm_reader_open(inputs, 1, NULL, &r) == GLM_OK) {
        glm_reader_set_max_record(r, 64 << 10);
        glm_record rec;
        memset(&rec, 0, sizeof rec);
        for (int i = 0; i < 4096 && glm_reader_next(r, &rec) == GLM_OK; i++) {
            json_decref(rec.value);
            rec.value = NULL;
        }
        (void)glm_reader_bytes_read(r);
        (void)glm_reader_n_sources(r);
        (void)glm_reader_n_empty(r);
        glm_reader_close(r);
    }
    unlink(path);
    return 0;
}
