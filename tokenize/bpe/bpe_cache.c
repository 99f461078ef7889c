/* tokenize/bpe/bpe_cache.c: the table cache of the tiktoken BPE tokenizer.
 *
 * Building the tables of a GLM-4 tokenizer.model (hash table, filters, the backtracking
 * encoder's trie and derivation blocks; bpe.c, bpe_backtrack.c) costs about 0.15 CPU-seconds and
 * 50 MB of fresh memory at every start. The first load saves them to one file per tokenizer
 * file content; later loads map that file read-only (its pages come from the page cache, shared
 * between processes) after checking it.
 *
 * File: a header (cache_hdr below), then the sections in the order of sections(), each at an
 * offset rounded up to 64 bytes (zero padding between). Its name carries the format version and
 * the key: "bpe-v<version>-<FNV-1a 64 of the tokenizer file, hex>-<its length>.tables".
 *
 * A cache is used only when everything checks out: magic, version, header size, entry sizes
 * (the struct layouts of this build), the key (length and FNV-1a 64 of the tokenizer file's
 * bytes, as loaded now), the dimensions, the file's size against them, and a 64-bit checksum
 * of the header and every section. Otherwise (or on any I/O error) the tables are built as if
 * there were no cache, and saved again. Writing goes through glm_afile (temp file, fsync,
 * rename, fsync of the directory): a reader sees a whole file or none, and processes that
 * save at the same time each rename a whole file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "tokenize/bpe/bpe_internal.h"

#define CACHE_MAGIC "GLMBPETC"
#define CACHE_VERSION 2 /* 2: glm_bpe_load refuses far ranks (3d33e7a); tables an older build saved for such a file are not used */
#define N_SECTS (8 + GLM_BPE_BT_SECTS)

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t file_len, file_hash; /* the key: the tokenizer file's length and FNV-1a 64 */
    uint32_t n_ranks, slot_bytes;
    uint64_t blob_bytes, nslots;
    glm_bpe_bt_dims bt;
    uint64_t total_bytes; /* the cache file's size */
    uint64_t checksum;    /* sum_bytes over this header (with checksum = 0), then each section */
} cache_hdr;

static inline uint64_t rotl64(uint64_t x, int r) { return x << r | x >> (64 - r); }

/* A 64-bit checksum of p[0..n) continuing from h: four independent multiply-rotate lanes over
 * 8-byte words (about 6 bytes per cycle), then the tail and the length. Detects corruption and
 * truncation; not meant to resist an attacker (who could write the cache could write the
 * program). */
static uint64_t sum_bytes(uint64_t h, const void *p, uint64_t n) {
    const uint64_t P = 0x9E3779B97F4A7C15ull;
    const uint8_t *s = p;
    uint64_t a = h ^ 0x243F6A8885A308D3ull, b = h ^ 0x13198A2E03707344ull, c = h ^ 0xA4093822299F31D0ull,
             d = h ^ 0x082EFA98EC4E6C89ull, i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, s + i, 32);
        a = rotl64(a ^ w[0], 29) * P;
        b = rotl64(b ^ w[1], 29) * P;
        c = rotl64(c ^ w[2], 29) * P;
        d = rotl64(d ^ w[3], 29) * P;
    }
    for (; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        a = rotl64(a ^ w, 29) * P;
    }
    uint64_t x = a ^ rotl64(b, 17) ^ rotl64(c, 31) ^ rotl64(d, 47) ^ n;
    x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ x >> 27) * 0x94d049bb133111ebull;
    return x ^ x >> 31;
}

/* The cache directory (malloc'd) or NULL when there is none (see bpe_internal.h). */
static char *cache_dir(void) {
    const char *e = getenv("GLMTUNE_CACHE_DIR");
    if (e) return !*e || !strcmp(e, "off") ? NULL : strdup(e);
    if ((e = getenv("XDG_CACHE_HOME")) && *e == '/') return glm_path_join(e, "glmtune");
    if ((e = getenv("HOME")) && *e == '/') return glm_path_join(e, ".cache/glmtune");
    return NULL;
}

static char *cache_path(const char *dir, uint64_t file_hash, size_t len) {
    char name[96];
    snprintf(name, sizeof name, "bpe-v%d-%016llx-%llu.tables", CACHE_VERSION, (unsigned long long)file_hash,
             (unsigned long long)len);
    return glm_path_join(dir, name);
}

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* The sections of a cache with header h, in file order: sizes from h alone. Returns the file
 * size, or 0 when the sizes overflow. */
static uint64_t layout(const cache_hdr *h, uint64_t off[N_SECTS], uint64_t bytes[N_SECTS]) {
    const uint64_t lim = (uint64_t)1 << 40; /* no dimension comes near this */
    if (h->blob_bytes > lim || h->nslots > lim || h->bt.ncell > lim || h->bt.nps > lim) return 0;
    uint64_t nr = h->n_ranks;
    uint64_t sz[N_SECTS] = {h->blob_bytes, 4 * nr, 4 * nr, h->nslots * h->slot_bytes, 4 * 256, 4 * 65536,
                            8 * 1024, (1u << FILTER_LOG) / 8, h->bt.ncell * h->bt.cell_bytes,
                            nr * h->bt.tok_bytes, h->bt.nps * h->bt.pstate_bytes};
    uint64_t pos = align64(sizeof(cache_hdr));
    for (int i = 0; i < N_SECTS; i++) {
        off[i] = pos;
        bytes[i] = sz[i];
        pos = align64(pos + sz[i]);
    }
    return pos;
}

int glm_bpe_cache_load(glm_bpe *b, size_t len) {
    char *dir = cache_dir(), *path = dir ? cache_path(dir, b->file_hash, len) : NULL;
    free(dir);
    if (!path) return 0;
    glm_mmap m;
    glm_status st = glm_mmap_open(&m, path);
    free(path);
    if (st != GLM_OK) {
        glm_err_clear();
        return 0;
    }
    cache_hdr h;
    uint64_t off[N_SECTS], bytes[N_SECTS];
    const uint8_t *base = m.data;
    glm_bpe_bt *bt = NULL;
    if (m.size < sizeof h) goto miss;
    memcpy(&h, base, sizeof h);
    if (memcmp(h.magic, CACHE_MAGIC, 8) || h.version != CACHE_VERSION || h.header_bytes != sizeof h ||
        h.file_len != len || h.file_hash != b->file_hash || h.n_ranks < 256 || h.n_ranks > (1u << 30) ||
        h.slot_bytes != sizeof(bpe_slot) || h.nslots < 1024 || (h.nslots & (h.nslots - 1)) ||
        h.total_bytes != m.size || layout(&h, off, bytes) != m.size)
        goto miss;
    uint64_t want = h.checksum;
    h.checksum = 0;
    uint64_t sum = sum_bytes(0, &h, sizeof h);
    for (int i = 0; i < N_SECTS; i++) sum = sum_bytes(sum, base + off[i], bytes[i]);
    if (sum != want) goto miss;
    if (glm_bpe_bt_import(&h.bt, h.n_ranks, base + off[8], base + off[9], base + off[10], &bt) != GLM_OK) goto miss;
    b->n_ranks = h.n_ranks;
    b->blob = (char *)(base + off[0]);
    b->off = (uint32_t *)(base + off[1]);
    b->len = (uint32_t *)(base + off[2]);
    b->slots = (bpe_slot *)(base + off[3]);
    b->mask = (size_t)h.nslots - 1;
    memcpy(b->byte_rank, base + off[4], sizeof b->byte_rank);
    b->pair_rank = (uint32_t *)(base + off[5]);
    memcpy(b->edge, base + off[6], sizeof b->edge);
    b->filter = (uint64_t *)(base + off[7]);
    b->bt = bt;
    b->cache = m;
    return 1;
miss:
    glm_err_clear();
    glm_mmap_close(&m);
    return 0;
}

void glm_bpe_cache_save(const glm_bpe *b, size_t len) {
    if (!b->bt) return;
    char *dir = cache_dir(), *path = NULL;
    if (!dir || glm_mkdir_p(dir) != GLM_OK || !(path = cache_path(dir, b->file_hash, len))) goto done;
    cache_hdr h = {.version = CACHE_VERSION, .header_bytes = sizeof h, .file_len = len,
                   .file_hash = b->file_hash, .n_ranks = b->n_ranks, .slot_bytes = sizeof(bpe_slot),
                   .nslots = (uint64_t)b->mask + 1};
    memcpy(h.magic, CACHE_MAGIC, 8);
    for (uint32_t r = 0; r < b->n_ranks; r++)
        if (b->off[r] != NONE_RANK && b->off[r] + b->len[r] > h.blob_bytes) h.blob_bytes = b->off[r] + b->len[r];
    glm_bpe_sect bs[GLM_BPE_BT_SECTS];
    glm_bpe_bt_export(b->bt, &h.bt, bs);
    const void *src[N_SECTS] = {b->blob, b->off, b->len, b->slots, b->byte_rank, b->pair_rank, b->edge,
                                b->filter, bs[0].p, bs[1].p, bs[2].p};
    uint64_t off[N_SECTS], bytes[N_SECTS];
    if (!(h.total_bytes = layout(&h, off, bytes))) goto done;
    uint64_t sum = sum_bytes(0, &h, sizeof h);
    for (int i = 0; i < N_SECTS; i++) sum = sum_bytes(sum, src[i], bytes[i]);
    h.checksum = sum;
    static const uint8_t zeros[64];
    glm_afile af;
    if (glm_afile_open(&af, path) != GLM_OK) goto done;
    glm_status st = glm_afile_write(&af, &h, sizeof h);
    uint64_t pos = sizeof h;
    for (int i = 0; i < N_SECTS && st == GLM_OK; i++) {
        if ((st = glm_afile_write(&af, zeros, (size_t)(off[i] - pos))) == GLM_OK)
            st = glm_afile_write(&af, src[i], (size_t)bytes[i]);
        pos = off[i] + bytes[i];
    }
    if (st == GLM_OK) st = glm_afile_write(&af, zeros, (size_t)(h.total_bytes - pos));
    if (st == GLM_OK) glm_afile_commit(&af);
    else glm_afile_abort(&af);
done:
    glm_err_clear();
    free(dir);
    free(path);
}
