/* Shard format and packer: round trip, determinism, and rejection of corrupt, truncated and
 * wrong-version shards with a message naming the offset. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/rng.h"
#include "dataset/loader.h"
#include "dataset/packer.h"
#include "dataset/shard.h"
#include "tests/check.h"

static char *read_all(const char *p, size_t *n) {
    char *d;
    if (glm_read_file(p, &d, n) != GLM_OK) return NULL;
    return d;
}

/* Packs `ndocs` random documents (lengths 1..maxlen) into rows of T; returns totals. */
static void pack_random(const char *dir, uint32_t T, int ndocs, uint32_t maxlen, uint64_t seed, uint64_t *tok,
                        uint64_t *tgt, uint64_t *rows) {
    glm_shard_writer w;
    glm_packer p;
    glm_shard_writer_init(&w, dir, "train", T, 7, 0x1234, 1000);
    glm_packer_init(&p, T, 2000, &w); /* ~5 windows */
    glm_rng r;
    glm_rng_seed(&r, seed, 0);
    *tok = *tgt = 0;
    for (int i = 0; i < ndocs; i++) {
        uint32_t len = 1 + (uint32_t)glm_rng_below(&r, maxlen);
        glm_pack_doc d = {malloc(4 * len), malloc(len), len, i % 2 ? "b.jsonl" : "a.json", (uint64_t)i};
        for (uint32_t k = 0; k < len; k++) {
            d.ids[k] = (uint32_t)glm_rng_below(&r, 1000);
            d.targets[k] = k > 0 && glm_rng_below(&r, 2);
            *tgt += d.targets[k];
        }
        *tok += len;
        CHECK(glm_packer_add(&p, d) == GLM_OK, "add: %s", glm_errmsg());
    }
    CHECK(glm_packer_finish(&p) == GLM_OK, "finish: %s", glm_errmsg());
    *rows = p.rows;
    glm_packer_free(&p);
    glm_shard_writer_free(&w);
}

int main(void) {
    CHECK(glm_shard_is_file_name("train-00000.bin", "train") && glm_shard_is_file_name("val-123456.bin", "val") &&
              !glm_shard_is_file_name("train-0000.bin", "train") && !glm_shard_is_file_name("val-00000.bin", "train") &&
              !glm_shard_is_file_name("train-00000.bin.tmp.12", "train") &&
              !glm_shard_is_file_name("train-00000.binx", "train") && !glm_shard_is_file_name("train00000.bin", "train"),
          "shard file names");
    char dir[] = "/tmp/glmshard.XXXXXX", dir2[] = "/tmp/glmshard2.XXXXXX";
    CHECK(mkdtemp(dir) && mkdtemp(dir2), "mkdtemp");
    uint32_t T = 64;
    uint64_t tok, tgt, rows, tok2, tgt2, rows2;
    pack_random(dir, T, 500, 40, 7, &tok, &tgt, &rows);
    pack_random(dir2, T, 500, 40, 7, &tok2, &tgt2, &rows2);

    /* every document present once, counts agree, rows not over T, efficiency near the bound */
    glm_loader l;
    char *first = glm_path_join(dir, "train-00000.bin");
    CHECK(glm_loader_open(&l, first, "train", 1, false) == GLM_OK, "open shard: %s", glm_errmsg());
    glm_loader_close(&l);
    uint64_t seen_tok = 0, seen_tgt = 0, seen_rows = 0, seen_docs = 0;
    int recs[500] = {0};
    for (int i = 0;; i++) {
        char name[64];
        snprintf(name, sizeof name, "train-%05d.bin", i);
        char *p = glm_path_join(dir, name), *p2 = glm_path_join(dir2, name);
        if (!glm_is_file(p)) {
            free(p);
            free(p2);
            break;
        }
        glm_shard sh;
        CHECK(glm_shard_open(p, &sh) == GLM_OK, "open %s: %s", p, glm_errmsg());
        seen_tok += sh.n_tokens;
        seen_tgt += sh.n_targets;
        seen_rows += sh.n_rows;
        seen_docs += sh.n_docs;
        for (uint64_t d = 0; d < sh.n_docs; d++) recs[sh.docs[d].record]++;
        glm_shard_close(&sh);
        size_t n1, n2;
        char *a = read_all(p, &n1), *b = read_all(p2, &n2);
        CHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "same inputs give byte-identical shards (%s)", name);
        free(a);
        free(b);
        free(p);
        free(p2);
    }
    CHECK(seen_docs == 500, "all documents packed: %llu", (unsigned long long)seen_docs);
    int once = 1;
    for (int i = 0; i < 500; i++) once &= recs[i] == 1;
    CHECK(once, "each document exactly once");
    CHECK(seen_tok == tok && seen_rows == rows, "token and row counts");
    CHECK(seen_tgt <= tgt, "targets: first tokens never targets");
    double eff = (double)tok / (double)(rows * T);
    CHECK(eff > 0.9, "best-fit packing efficiency %.3f", eff);

    /* corruption: flip a payload byte */
    size_t n;
    char *data = read_all(first, &n);
    char *bad = glm_path_join(dir, "bad.bin");
    data[200] ^= 0x55;
    glm_write_file_atomic(bad, data, n);
    glm_shard sh;
    glm_status s = glm_shard_open(bad, &sh);
    CHECK(s == GLM_ERR_FORMAT && strstr(glm_errmsg(), "checksum") && strstr(glm_errmsg(), "offset"),
          "corrupt payload rejected: %s", glm_errmsg());
    data[200] ^= 0x55;
    /* truncated */
    glm_write_file_atomic(bad, data, n - 100);
    s = glm_shard_open(bad, &sh);
    CHECK(s == GLM_ERR_FORMAT && strstr(glm_errmsg(), "truncated"), "truncated rejected: %s", glm_errmsg());
    glm_write_file_atomic(bad, data, 50);
    CHECK(glm_shard_open(bad, &sh) == GLM_ERR_FORMAT, "short file rejected: %s", glm_errmsg());
    /* wrong version, with a valid header checksum */
    uint32_t v = 99, crc;
    memcpy(data + 8, &v, 4);
    crc = glm_crc32(0, data, 124);
    memcpy(data + 124, &crc, 4);
    glm_write_file_atomic(bad, data, n);
    s = glm_shard_open(bad, &sh);
    CHECK(s == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "version 99"), "wrong version rejected: %s", glm_errmsg());
    /* header corrupted */
    v = 1;
    memcpy(data + 8, &v, 4);
    data[20] ^= 1;
    glm_write_file_atomic(bad, data, n);
    s = glm_shard_open(bad, &sh);
    CHECK(s == GLM_ERR_FORMAT && strstr(glm_errmsg(), "header checksum"), "corrupt header rejected: %s", glm_errmsg());
    /* not a shard */
    char notshard[160];
    memset(notshard, '.', sizeof notshard);
    memcpy(notshard, "{\"hello\": 1}", 12);
    glm_write_file_atomic(bad, notshard, sizeof notshard);
    CHECK(glm_shard_open(bad, &sh) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "magic"), "not a shard: %s", glm_errmsg());
    /* counts so large that the section offsets wrap around 2^64, with offsets, sizes and
     * checksums made consistent with the wrapped values: rejected, never read out of bounds */
    {
        uint8_t h[144] = {0};
        uint32_t R = UINT32_MAX, T = UINT32_MAX;
        uint64_t rt = (uint64_t)R * T, o[5];
        o[0] = 128;
        o[1] = o[0] + 4 * rt;
        o[2] = o[1] + (((rt + 7) / 8 + 7) & ~(uint64_t)7);
        o[3] = o[2] + 8 * ((uint64_t)R + 1);
        o[4] = 140; /* sources: a count of 0 at 140, file ends at pad8(144) */
        uint64_t D = (o[4] - o[3]) / 16, fb = sizeof h;
        CHECK((uint64_t)(o[3] + 16 * D) == o[4], "crafted layout wraps to %llu", (unsigned long long)o[4]);
        memcpy(h, GLM_SHARD_MAGIC, 8);
        uint32_t u = GLM_SHARD_VERSION;
        memcpy(h + 8, &u, 4);
        u = GLM_SHARD_HEADER_BYTES;
        memcpy(h + 12, &u, 4);
        memcpy(h + 16, &T, 4);
        memcpy(h + 20, &R, 4);
        memcpy(h + 24, &D, 8);
        memcpy(h + 64, o, sizeof o);
        memcpy(h + 104, &fb, 8);
        u = glm_crc32(0, h + 128, sizeof h - 128);
        memcpy(h + 112, &u, 4);
        u = glm_crc32(0, h, 124);
        memcpy(h + 124, &u, 4);
        glm_write_file_atomic(bad, h, sizeof h);
        s = glm_shard_open(bad, &sh);
        CHECK(s == GLM_ERR_FORMAT && strstr(glm_errmsg(), "cannot fit"), "impossible counts rejected: %s",
              glm_errmsg());
    }
    free(data);
    free(bad);
    free(first);

    /* loader: shuffled epochs cover every row once; positions restore exactly */
    glm_loader a, b;
    char *f0 = glm_path_join(dir, "train-00000.bin");
    CHECK(glm_loader_open(&a, f0, "train", 3, true) == GLM_OK, "loader");
    CHECK(glm_loader_open(&b, f0, "train", 3, true) == GLM_OK, "loader");
    uint64_t r1[64], r2[64];
    uint32_t g1, g2;
    glm_loader_next(&a, 3, r1, &g1);
    glm_loader_seek(&b, a.epoch, a.cursor);
    glm_loader_next(&a, 4, r1, &g1);
    glm_loader_next(&b, 4, r2, &g2);
    CHECK(g1 == g2 && !memcmp(r1, r2, g1 * 8), "seek restores the position");
    uint32_t R = (uint32_t)a.n_rows;
    glm_loader_seek(&a, 5, 0);
    int *cnt = calloc(R, sizeof *cnt);
    uint32_t total = 0;
    while (total < R) {
        glm_loader_next(&a, 5, r1, &g1);
        for (uint32_t i = 0; i < g1; i++) cnt[r1[i]]++;
        total += g1;
    }
    int ok = 1;
    for (uint32_t i = 0; i < R; i++) ok &= cnt[i] == 1;
    CHECK(ok && total == R, "an epoch visits each row once, the last batch may be short");
    free(cnt);
    uint32_t ids[64];
    uint8_t tg[64];
    int32_t pos[64], doc[64];
    int64_t nt;
    glm_loader_row(&a, 0, ids, tg, pos, doc, &nt);
    CHECK(pos[0] == 0 && doc[0] == 0 && tg[0] == 0, "row starts a document");
    glm_loader_close(&a);
    glm_loader_close(&b);
    free(f0);

    /* an odd row length and an odd number of rows (R*T odd): the row and document tables sit at
     * an offset 4 mod 8 in the file; they are read through 8-aligned memory (before: misaligned
     * 64-bit reads, which -fsanitize=undefined stops at) and read back the same */
    {
        char dir3[] = "/tmp/glmshard3.XXXXXX";
        CHECK(mkdtemp(dir3) != NULL, "mkdtemp");
        int odd_shards = 0;
        for (int ndocs = 11; ndocs < 80 && !odd_shards; ndocs += 7) {
            glm_rmtree(dir3);
            glm_mkdir_p(dir3);
            pack_random(dir3, 63, ndocs, 30, 11, &tok, &tgt, &rows);
            for (int i = 0;; i++) {
                char name[64];
                snprintf(name, sizeof name, "train-%05d.bin", i);
                char *p = glm_path_join(dir3, name);
                glm_shard sh;
                if (!glm_is_file(p) || glm_shard_open(p, &sh) != GLM_OK) {
                    free(p);
                    break;
                }
                if (sh.n_rows % 2) {
                    odd_shards++;
                    CHECK((uintptr_t)sh.rowdocs % 8 == 0 && (uintptr_t)sh.docs % 8 == 0,
                          "R*T odd (%u x 63): row and document tables 8-aligned in memory", sh.n_rows);
                    uint64_t docs = 0, toks = 0;
                    for (uint32_t r = 0; r < sh.n_rows; r++)
                        for (uint64_t d = sh.rowdocs[r]; d < sh.rowdocs[r + 1]; d++) docs++, toks += sh.docs[d].len;
                    CHECK(docs == sh.n_docs && toks == sh.n_tokens && sh.rowdocs[sh.n_rows] == sh.n_docs,
                          "R*T odd: tables read back (%llu docs, %llu tokens)", (unsigned long long)docs,
                          (unsigned long long)toks);
                }
                glm_shard_close(&sh);
                free(p);
            }
        }
        CHECK(odd_shards > 0, "a shard with an odd number of rows of 63 was made");
        glm_loader lo;
        char *f3 = glm_path_join(dir3, "train-00000.bin");
        CHECK(glm_loader_open(&lo, f3, "train", 1, false) == GLM_OK, "loader on an odd shard: %s", glm_errmsg());
        glm_loader_close(&lo);
        free(f3);
        glm_rmtree(dir3);
    }
    glm_rmtree(dir);
    glm_rmtree(dir2);
    return check_summary("test_shard");
}
