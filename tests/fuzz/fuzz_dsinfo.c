/* tests/fuzz/fuzz_dsinfo.c: LLaMA-Factory's dataset_info.json registry (dataset/dataset_info.c:
 * entries, formatting, columns, tags, num_samples, hub keys, the unsupported kinds, file names
 * resolved against the folder), its look-ups (by name, by path, close names), then the reader
 * with the registry as glmtune tokenize --dataset reads it: each entry's records with its column
 * and tag mapping, converted. The input is the registry, written as dataset_info.json into a
 * folder that also holds (made once per process) a.json (alpaca), b.jsonl (sharegpt with
 * custom tags), c.json (openai messages) and d.json (pretraining text). The reader runs only
 * when every entry's file resolves into that folder (a registry may name any file, /dev/zero
 * included, which the reader would then read). */
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "dataset/dataset_info.h"
#include "dataset/formats.h"
#include "dataset/reader.h"
#include "fuzz_common.h"

static char g_real[PATH_MAX];

static void setup(void) {
    static const char a[] = "[{\"instruction\": \"hi\", \"input\": \"x\", \"output\": \"yo\", \"system\": \"s\", "
                            "\"history\": [[\"q\", \"a\"]]}, {\"instruction\": \"2\", \"output\": \"3\"}]";
    static const char b[] = "{\"conv\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \"yo\"}], "
                            "\"sys\": \"s\", \"tools\": \"[]\"}\n{\"conv\": [{\"from\": \"human\", \"value\": \"1\"}, "
                            "{\"from\": \"function_call\", \"value\": \"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": {}}\"}, "
                            "{\"from\": \"observation\", \"value\": \"2\"}, {\"from\": \"gpt\", \"value\": \"3\"}]}\n";
    static const char c[] = "[{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
                            "\"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}]";
    static const char d[] = "[{\"text\": \"plain text\"}, {\"text\": \"more\"}]";
    fuzz_write_in_dir("a.json", a, sizeof a - 1);
    fuzz_write_in_dir("b.jsonl", b, sizeof b - 1);
    fuzz_write_in_dir("c.json", c, sizeof c - 1);
    fuzz_write_in_dir("d.json", d, sizeof d - 1);
    if (!realpath(fuzz_dir(), g_real)) abort();
    strcat(g_real, "/");
}

/* Every entry's file is a regular file in the scratch folder. */
static bool all_inside(const glm_dsinfo *d) {
    size_t n = strlen(g_real);
    for (size_t i = 0; i < d->n; i++) {
        const char *p = d->entries[i].path;
        if (!p) continue;
        if (strncmp(p, g_real, n) || strchr(p + n, '/') || !glm_is_file(p)) return false;
    }
    return true;
}

static void read_all(const char *registry, const char *filter) {
    const char *inputs[1] = {registry};
    glm_reader_opts opts = {.dataset_filter = filter, .max_samples = 50, .seed = 1};
    glm_reader *r = NULL;
    if (glm_reader_open_ex(inputs, 1, &opts, &r) != GLM_OK) return;
    glm_reader_set_max_record(r, 64 << 10);
    for (size_t i = 0; i < glm_reader_n_datasets(r); i++) {
        glm_reader_dataset ds;
        glm_reader_dataset_info(r, i, &ds);
    }
    glm_record rec;
    memset(&rec, 0, sizeof rec);
    for (int i = 0; i < 2000 && glm_reader_next(r, &rec) == GLM_OK; i++) {
        if (rec.value) {
            glm_conversation c;
            const char *reason = NULL;
            if (glm_record_convert(&rec, GLM_FMT_AUTO, &c, &reason) == GLM_OK) glm_conversation_free(&c);
            json_decref(rec.value);
            rec.value = NULL;
        }
    }
    glm_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    if (!g_real[0]) setup();
    const char *path = fuzz_write_in_dir("dataset_info.json", data, size);
    char reg[PATH_MAX];
    snprintf(reg, sizeof reg, "%s", path);
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    if (root) (void)glm_dsinfo_looks_like(root);
    json_decref(root);
    glm_dsinfo *d = NULL;
    if (glm_dsinfo_load(reg, &d) == GLM_OK) {
        char names[512], *filter = NULL;
        size_t fl = 0;
        for (size_t i = 0; i < d->n; i++) {
            (void)glm_dsinfo_find_name(d, d->entries[i].name);
            if (d->entries[i].path) (void)glm_dsinfo_find_path(d, d->entries[i].path);
            if (d->entries[i].local && !d->entries[i].unsupported && fl < 200) {
                /* the comma list of the readable entries, as --dataset gives it */
                size_t k = strlen(d->entries[i].name);
                if (k && k < 100 && !strchr(d->entries[i].name, ',')) {
                    char *nf = realloc(filter, fl + k + 2);
                    if (!nf) break;
                    filter = nf;
                    if (fl) filter[fl++] = ',';
                    memcpy(filter + fl, d->entries[i].name, k + 1);
                    fl += k;
                }
            }
        }
        glm_dsinfo *const infos[1] = {d};
        glm_dsinfo_close_names(infos, 1, "alpaca_en", names, sizeof names, 5);
        bool inside = all_inside(d);
        glm_dsinfo_free(d);
        if (inside) read_all(reg, filter);
        free(filter);
    }
    return 0;
}
