#include "loader.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/hash.h"
#include "common/rng.h"

static glm_status add_shard(glm_loader *l, const char *path) {
    glm_shard *ns = realloc(l->shards, (l->n_shards + 1) * sizeof *ns);
    if (!ns) return glm_err(GLM_ERR_NOMEM, "out of memory");
    l->shards = ns;
    GLM_TRY(glm_shard_open(path, &l->shards[l->n_shards]));
    glm_shard *sh = &l->shards[l->n_shards++];
    if (l->n_shards == 1) {
        l->T = sh->seq_len;
        l->fingerprint = sh->fingerprint;
        l->vocab_size = sh->vocab_size;
    } else if (sh->seq_len != l->T || sh->fingerprint != l->fingerprint) {
        return glm_err(GLM_ERR_MISMATCH,
                       "%s: seq_len %u / tokenizer %016llx differs from the first shard's (%u / %016llx); "
                       "hint: all shards of a split must come from one glmtune tokenize run",
                       path, sh->seq_len, (unsigned long long)sh->fingerprint, l->T,
                       (unsigned long long)l->fingerprint);
    }
    return GLM_OK;
}

/* Before a shard of a tokenize output is opened: its size against the manifest entry's "bytes"
 * (manifests written before that field have none). */
static glm_status check_entry_size(const char *file, const json_t *e, const char *dir) {
    json_t *b = json_object_get(e, "bytes");
    struct stat st;
    if (!json_is_integer(b) || stat(file, &st) != 0 || (json_int_t)st.st_size == json_integer_value(b)) return GLM_OK;
    return glm_err(GLM_ERR_MISMATCH, "%s: %lld bytes, but %s/manifest.json says %lld: the shard was replaced or changed "
                   "after glmtune tokenize wrote it; hint: re-run glmtune tokenize for %s, or put back the shard it "
                   "wrote", file, (long long)st.st_size, dir, (long long)json_integer_value(b), dir);
}

/* An opened shard against its manifest entry: its header's counts and payload CRC-32 (which
 * glm_shard_open checked against the data), so that a valid shard of another corpus, or the val
 * shard copied over a train shard, is not trained on. */
static glm_status check_entry(const glm_shard *sh, const json_t *e, const char *dir) {
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", sh->payload_crc);
    const char *want_crc = json_string_value(json_object_get(e, "payload_crc32"));
    const struct {
        const char *key;
        uint64_t have;
    } counts[] = {{"rows", sh->n_rows}, {"samples", sh->n_docs}, {"tokens", sh->n_tokens}, {"target_tokens", sh->n_targets}};
    char what[160] = "";
    for (size_t i = 0; i < sizeof counts / sizeof *counts && !what[0]; i++) {
        json_t *v = json_object_get(e, counts[i].key);
        if (json_is_integer(v) && (uint64_t)json_integer_value(v) != counts[i].have)
            snprintf(what, sizeof what, "%llu %s, the manifest says %lld", (unsigned long long)counts[i].have,
                     counts[i].key, (long long)json_integer_value(v));
    }
    if (!what[0] && want_crc && strcmp(want_crc, crc))
        snprintf(what, sizeof what, "payload crc32 %s, the manifest says %s", crc, want_crc);
    if (!what[0]) return GLM_OK;
    return glm_err(GLM_ERR_MISMATCH, "%s: does not match its entry in %s/manifest.json (%s): it is another shard than the "
                   "one glmtune tokenize wrote there (another corpus's, or the val shard copied over it?); hint: re-run "
                   "glmtune tokenize for %s, or put back the shard it wrote", sh->path, dir, what, dir);
}

/* The data's fingerprint: FNV-1a over each shard's file name, payload CRC-32 and row count, in
 * order (what the rows are; a checkpoint keeps it to know its data again). */
static uint64_t data_fingerprint(const glm_loader *l) {
    uint64_t h = GLM_FNV1A64_INIT;
    for (size_t i = 0; i < l->n_shards; i++) {
        const glm_shard *sh = &l->shards[i];
        const char *base = strrchr(sh->path, '/') ? strrchr(sh->path, '/') + 1 : sh->path;
        h = glm_fnv1a64(h, base, strlen(base) + 1);
        h = glm_fnv1a64(h, &sh->payload_crc, sizeof sh->payload_crc);
        h = glm_fnv1a64(h, &sh->n_rows, sizeof sh->n_rows);
    }
    return h;
}

glm_status glm_loader_open(glm_loader *l, const char *path, const char *split, uint64_t seed, bool shuffle) {
    memset(l, 0, sizeof *l);
    l->seed = seed;
    l->shuffle = shuffle;
    glm_status s = GLM_OK;
    char *dir_of_manifest = NULL;
    size_t pl = strlen(path);
    if (pl >= 13 && !strcmp(path + pl - 13, "manifest.json") && (pl == 13 || path[pl - 14] == '/')) {
        dir_of_manifest = pl == 13 ? strdup(".") : strndup(path, pl - 14);
        path = dir_of_manifest;
    }
    if (!glm_is_dir(path) && !glm_is_file(path)) {
        /* a LLaMA-Factory YAML's `dataset: identity,alpaca_en_demo` names datasets, not shards */
        bool names = !strchr(path, '/') && !strstr(path, ".bin");
        s = glm_err(GLM_ERR_IO, "%s: not found; hint: --data (and --eval-data) take the output directory of glmtune tokenize (with "
                    "manifest.json), or one of its .bin shards%s", path,
                    names ? "; LLaMA-Factory dataset names are tokenized first (glmtune tokenize --config FILE.yaml "
                            "-o shards/), then --dataset shards/" : "");
        free(dir_of_manifest);
        return s;
    }
    if (glm_is_dir(path)) {
        char *mpath = glm_path_join(path, "manifest.json");
        json_error_t je;
        json_t *m = json_load_file(mpath, 0, &je);
        if (!m) {
            s = glm_is_file(mpath)
                    ? glm_err(GLM_ERR_FORMAT, "%s:%d: %s; hint: re-run glmtune tokenize", mpath, je.line, je.text)
                    : glm_err(GLM_ERR_IO, "%s: no manifest.json in this directory; hint: --data (and --eval-data) take the output "
                              "directory of glmtune tokenize", path);
            free(mpath);
            free(dir_of_manifest);
            return s;
        }
        free(mpath);
        json_t *shards = json_object_get(json_object_get(json_object_get(m, "splits"), split), "shards");
        if (!json_is_array(shards) || json_array_size(shards) == 0) {
            s = glm_err(GLM_ERR_ARG, "%s: the manifest has no \"%s\" shards%s", path, split,
                        strcmp(split, "val") == 0 ? "; hint: tokenize with --val-size N to make a validation split" : "");
        }
        size_t i;
        json_t *e;
        json_array_foreach(shards, i, e) {
            if (s != GLM_OK) break;
            const char *f = json_string_value(json_object_get(e, "file"));
            if (!f) {
                s = glm_err(GLM_ERR_FORMAT, "%s/manifest.json: shard entry %zu has no \"file\"", path, i);
                break;
            }
            char *fp = glm_path_join(path, f);
            s = fp ? check_entry_size(fp, e, path) : glm_err(GLM_ERR_NOMEM, "out of memory");
            if (s == GLM_OK) s = add_shard(l, fp);
            if (s == GLM_OK) s = check_entry(&l->shards[l->n_shards - 1], e, path);
            free(fp);
        }
        json_decref(m);
    } else {
        s = add_shard(l, path);
    }
    if (s == GLM_OK) {
        l->row_base = calloc(l->n_shards + 1, sizeof *l->row_base);
        if (!l->row_base) s = glm_err(GLM_ERR_NOMEM, "out of memory");
        for (size_t i = 0; s == GLM_OK && i < l->n_shards; i++) {
            l->row_base[i + 1] = l->row_base[i] + l->shards[i].n_rows;
            l->n_tokens += l->shards[i].n_tokens;
            l->n_targets += l->shards[i].n_targets;
        }
        if (s == GLM_OK) l->n_rows = l->n_units = l->row_base[l->n_shards];
        if (s == GLM_OK && l->n_rows == 0) s = glm_err(GLM_ERR_ARG, "%s: no rows in split \"%s\"", path, split);
        l->data_fingerprint = data_fingerprint(l);
    }
    if (s == GLM_OK) s = glm_loader_seek(l, 0, 0);
    if (s != GLM_OK) glm_loader_close(l);
    free(dir_of_manifest);
    return s;
}

void glm_loader_close(glm_loader *l) {
    for (size_t i = 0; i < l->n_shards; i++) glm_shard_close(&l->shards[i]);
    free(l->shards);
    free(l->row_base);
    free(l->perm);
    free(l->docs);
    memset(l, 0, sizeof *l);
}

glm_status glm_loader_seek(glm_loader *l, uint64_t epoch, uint64_t cursor) {
    if (cursor > l->n_units) return glm_err(GLM_ERR_ARG, "data position %llu is beyond the %llu %s of the data; hint: "
                                            "the checkpoint was made with other shards",
                                            (unsigned long long)cursor, (unsigned long long)l->n_units,
                                            l->by_doc ? "samples" : "rows");
    if (!l->perm) l->perm = malloc(l->n_units * sizeof *l->perm);
    if (!l->perm) return glm_err(GLM_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < l->n_units; i++) l->perm[i] = i;
    if (l->shuffle) {
        glm_rng r;
        glm_rng_seed(&r, l->seed, 0x10ade7 + epoch);
        for (uint64_t i = l->n_units; i > 1; i--) {
            uint64_t j = glm_rng_below(&r, i);
            uint64_t t = l->perm[i - 1];
            l->perm[i - 1] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->epoch = epoch;
    l->cursor = cursor;
    return GLM_OK;
}

glm_status glm_loader_next(glm_loader *l, uint32_t n, uint64_t *rows, uint32_t *got) {
    if (l->cursor >= l->n_units) GLM_TRY(glm_loader_seek(l, l->epoch + 1, 0));
    uint32_t k = 0;
    while (k < n && l->cursor < l->n_units) rows[k++] = l->perm[l->cursor++];
    *got = k;
    return GLM_OK;
}

uint32_t glm_loader_peek(const glm_loader *l, uint32_t n, uint64_t *rows) {
    uint32_t k = 0;
    for (uint64_t c = l->cursor; k < n && c < l->n_units; c++) rows[k++] = l->perm[c];
    return k;
}

const glm_shard *glm_loader_shard_of(const glm_loader *l, uint64_t row, uint32_t *local_row) {
    size_t lo = 0, hi = l->n_shards;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (l->row_base[mid] <= row) lo = mid;
        else hi = mid;
    }
    *local_row = (uint32_t)(row - l->row_base[lo]);
    return &l->shards[lo];
}

/* A row's ids and target bits are copied out: their pages go back to the page cache (a row of
 * 1M tokens is 4 MiB of ids; the loader never keeps several resident, see glm_shard_release). */
static void release_row(const glm_shard *sh, uint64_t base, uint32_t T) {
    const uint8_t *m = sh->map.data;
    glm_shard_release(sh, (uint64_t)((const uint8_t *)sh->ids - m) + 4 * base, 4 * (uint64_t)T);
    glm_shard_release(sh, (uint64_t)((const uint8_t *)sh->targets - m) + base / 8, (uint64_t)T / 8 + 1);
}

void glm_loader_row(const glm_loader *l, uint64_t row, uint32_t *ids, uint8_t *targets, int32_t *pos,
                    int32_t *doc, int64_t *n_targets) {
    uint32_t r;
    const glm_shard *sh = glm_loader_shard_of(l, row, &r);
    uint32_t T = sh->seq_len;
    uint64_t base = (uint64_t)r * T;
    memcpy(ids, sh->ids + base, 4 * (size_t)T);
    int64_t nt = 0;
    uint32_t t = 0;
    int32_t di = 0;
    for (uint64_t d = sh->rowdocs[r]; d < sh->rowdocs[r + 1]; d++, di++)
        for (uint32_t k = 0; k < sh->docs[d].len; k++, t++) {
            targets[t] = (uint8_t)glm_shard_target(sh, base + t);
            nt += targets[t];
            pos[t] = (int32_t)k;
            doc[t] = di;
        }
    for (int32_t k = 0; t < T; t++, k++) {
        targets[t] = 0;
        pos[t] = k;
        doc[t] = di;
    }
    if (n_targets) *n_targets = nt;
    release_row(sh, base, T);
}

int64_t glm_loader_row_targets(const glm_loader *l, uint64_t row) {
    uint32_t r;
    const glm_shard *sh = glm_loader_shard_of(l, row, &r);
    uint64_t base = (uint64_t)r * sh->seq_len;
    int64_t nt = 0;
    for (uint32_t t = 0; t < sh->seq_len; t++) nt += glm_shard_target(sh, base + t);
    glm_shard_release(sh, (uint64_t)((const uint8_t *)sh->targets - (const uint8_t *)sh->map.data) + base / 8,
                      (uint64_t)sh->seq_len / 8);
    return nt;
}

glm_status glm_loader_by_document(glm_loader *l) {
    uint64_t nd = 0;
    for (size_t k = 0; k < l->n_shards; k++) nd += l->shards[k].n_docs;
    struct glm_loader_docref *d = malloc((nd ? nd : 1) * sizeof *d);
    if (!d) return glm_err(GLM_ERR_NOMEM, "out of memory (index of %llu samples)", (unsigned long long)nd);
    uint64_t i = 0;
    for (size_t k = 0; k < l->n_shards; k++) {
        const glm_shard *sh = &l->shards[k];
        for (uint32_t r = 0; r < sh->n_rows; r++) {
            uint32_t off = 0;
            for (uint64_t j = sh->rowdocs[r]; j < sh->rowdocs[r + 1]; j++) {
                d[i++] = (struct glm_loader_docref){l->row_base[k] + r, off, sh->docs[j].len};
                off += sh->docs[j].len;
            }
        }
    }
    free(l->docs);
    free(l->perm);
    l->perm = NULL;
    l->docs = d;
    l->n_docs = nd;
    l->n_units = nd;
    l->by_doc = true;
    if (nd == 0) return glm_err(GLM_ERR_ARG, "the shards hold no document");
    return glm_loader_seek(l, 0, 0);
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

uint64_t glm_loader_longest_docs(const glm_loader *l, uint32_t n) {
    uint32_t *len = malloc((l->n_docs ? l->n_docs : 1) * sizeof *len);
    uint64_t sum = 0;
    if (!len) { /* no memory for the sort: the bound every sample respects */
        for (uint64_t i = 0; i < l->n_docs; i++) sum = l->docs[i].len > sum ? l->docs[i].len : sum;
        return sum * n;
    }
    for (uint64_t i = 0; i < l->n_docs; i++) len[i] = l->docs[i].len;
    qsort(len, l->n_docs, sizeof *len, cmp_u32_desc);
    for (uint64_t i = 0; i < l->n_docs && i < n; i++) sum += len[i];
    free(len);
    return sum;
}

uint32_t glm_loader_doc(const glm_loader *l, uint64_t d, uint32_t *ids, uint8_t *targets, int32_t *pos, int32_t *doc,
                        int32_t doc_index, int64_t *n_targets) {
    const struct glm_loader_docref *e = &l->docs[d];
    uint32_t r;
    const glm_shard *sh = glm_loader_shard_of(l, e->row, &r);
    uint64_t base = (uint64_t)r * sh->seq_len + e->off;
    memcpy(ids, sh->ids + base, 4 * (size_t)e->len);
    int64_t nt = 0;
    for (uint32_t k = 0; k < e->len; k++) {
        targets[k] = (uint8_t)glm_shard_target(sh, base + k);
        nt += targets[k];
        pos[k] = (int32_t)k;
        doc[k] = doc_index;
    }
    if (n_targets) *n_targets = nt;
    release_row(sh, base, e->len);
    return e->len;
}

int64_t glm_loader_unit_targets(const glm_loader *l, uint64_t u) {
    if (!l->by_doc) return glm_loader_row_targets(l, u);
    const struct glm_loader_docref *e = &l->docs[u];
    uint32_t r;
    const glm_shard *sh = glm_loader_shard_of(l, e->row, &r);
    uint64_t base = (uint64_t)r * sh->seq_len + e->off;
    int64_t nt = 0;
    for (uint32_t k = 0; k < e->len; k++) nt += glm_shard_target(sh, base + k);
    return nt;
}
