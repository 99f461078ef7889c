#define _GNU_SOURCE
#include "shard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

static inline uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Section layout from the counts: the single source of truth for reader and writer. */
typedef struct { uint64_t ids, targets, rowdocs, docs, sources; } layout;
static layout make_layout(uint32_t T, uint32_t R, uint64_t D) {
    layout L;
    uint64_t rt = (uint64_t)R * T;
    L.ids = GLM_SHARD_HEADER_BYTES;
    L.targets = L.ids + 4 * rt;
    L.rowdocs = L.targets + pad8((rt + 7) / 8);
    L.docs = L.rowdocs + 8 * ((uint64_t)R + 1);
    L.sources = L.docs + 16 * D;
    return L;
}

#define BAD(off, ...) shard_bad(path, off, __VA_ARGS__)
static glm_status shard_bad(const char *path, uint64_t off, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return glm_err(GLM_ERR_FORMAT, "%s: offset %llu: %s", path, (unsigned long long)off, msg);
}

void glm_shard_close(glm_shard *sh) {
    if (sh->sources) {
        for (uint32_t i = 0; i < sh->n_sources; i++) free(sh->sources[i]);
        free(sh->sources);
    }
    glm_mmap_close(&sh->map);
    free(sh->aligned_meta);
    free(sh->path);
    memset(sh, 0, sizeof *sh);
}

/* Header of the mapped shard: magic, version, header CRC, the counts (into *sh), the section
 * offsets against the counts' layout (*L), the file size and the payload CRC. */
static glm_status check_header(const char *path, glm_shard *sh, layout *L) {
    const uint8_t *p = sh->map.data;
    uint64_t size = sh->map.size;
    const char *hint_trunc = "hint: the file is truncated or is not a glmtune shard; re-run glmtune tokenize";
    if (size < GLM_SHARD_HEADER_BYTES)
        return BAD(size, "file is %llu bytes, shorter than the %d-byte header; %s", (unsigned long long)size,
                   GLM_SHARD_HEADER_BYTES, hint_trunc);
    if (memcmp(p, GLM_SHARD_MAGIC, 8) != 0) return BAD(0, "bad magic (expected \"GLMSHARD\"); hint: this is not a glmtune shard");
    uint32_t version = rd32(p + 8);
    if (version != GLM_SHARD_VERSION)
        return glm_err(GLM_ERR_UNSUPPORTED,
                       "%s: offset 8: shard format version %u, this glmtune reads version %d; hint: re-run "
                       "glmtune tokenize with this version", path, version, GLM_SHARD_VERSION);
    if (glm_crc32(0, p, 124) != rd32(p + 124))
        return BAD(124, "header checksum mismatch (expected %08x, found %08x); hint: the header is corrupt, "
                   "re-run glmtune tokenize", glm_crc32(0, p, 124), rd32(p + 124));
    if (rd32(p + 12) != GLM_SHARD_HEADER_BYTES)
        return BAD(12, "header_bytes is %u, expected %d", rd32(p + 12), GLM_SHARD_HEADER_BYTES);
    sh->seq_len = rd32(p + 16);
    sh->n_rows = rd32(p + 20);
    sh->n_docs = rd64(p + 24);
    sh->n_tokens = rd64(p + 32);
    sh->n_targets = rd64(p + 40);
    sh->fingerprint = rd64(p + 48);
    sh->vocab_size = rd32(p + 56);
    if (sh->seq_len == 0) return BAD(16, "seq_len is 0");
    uint64_t rt = (uint64_t)sh->n_rows * sh->seq_len;
    if (rt > size / 4 || sh->n_docs > size / 16) /* before make_layout: its sums must not wrap */
        return BAD(20, "%u rows of %u tokens and %llu documents cannot fit in a %llu-byte file; %s", sh->n_rows,
                   sh->seq_len, (unsigned long long)sh->n_docs, (unsigned long long)size, hint_trunc);
    if (sh->n_docs > rt) return BAD(24, "n_docs %llu exceeds rows x seq_len", (unsigned long long)sh->n_docs);
    *L = make_layout(sh->seq_len, sh->n_rows, sh->n_docs);
    const uint64_t found[5] = {rd64(p + 64), rd64(p + 72), rd64(p + 80), rd64(p + 88), rd64(p + 96)};
    const uint64_t want[5] = {L->ids, L->targets, L->rowdocs, L->docs, L->sources};
    static const char *names[5] = {"ids_offset", "targets_offset", "rowdocs_offset", "docs_offset", "sources_offset"};
    for (int i = 0; i < 5; i++)
        if (found[i] != want[i])
            return BAD(64 + 8 * i, "%s is %llu, expected %llu from the counts; hint: the header is inconsistent",
                       names[i], (unsigned long long)found[i], (unsigned long long)want[i]);
    uint64_t file_bytes = rd64(p + 104);
    if (file_bytes != size)
        return BAD(104, "header says %llu bytes, file has %llu; %s", (unsigned long long)file_bytes,
                   (unsigned long long)size, hint_trunc);
    if (L->sources + 4 > size) return BAD(L->sources, "source table is beyond the end of the file; %s", hint_trunc);
    uint32_t crc = glm_crc32(0, p + GLM_SHARD_HEADER_BYTES, size - GLM_SHARD_HEADER_BYTES);
    if (crc != rd32(p + 112))
        return BAD(112, "payload checksum mismatch (expected %08x, computed %08x); hint: the file is corrupt, "
                   "re-run glmtune tokenize", rd32(p + 112), crc);
    sh->payload_crc = crc;
    return GLM_OK;
}

/* The source table at L->sources: the names into sh->sources, and nothing after it but padding. */
static glm_status read_sources(const char *path, glm_shard *sh, const layout *L) {
    const uint8_t *p = sh->map.data;
    uint64_t size = sh->map.size;
    uint64_t off = L->sources;
    sh->n_sources = rd32(p + off);
    off += 4;
    if (sh->n_sources > size) return BAD(L->sources, "source count %u is impossible", sh->n_sources);
    sh->sources = calloc(sh->n_sources ? sh->n_sources : 1, sizeof(char *));
    if (!sh->path || !sh->sources) return glm_err(GLM_ERR_NOMEM, "%s: out of memory opening the shard", path);
    for (uint32_t i = 0; i < sh->n_sources; i++) {
        if (off + 4 > size || off + 4 + rd32(p + off) > size)
            return BAD(off, "source name %u runs past the end of the file", i);
        uint32_t n = rd32(p + off);
        if (!(sh->sources[i] = strndup((const char *)p + off + 4, n)))
            return glm_err(GLM_ERR_NOMEM, "%s: out of memory opening the shard", path);
        off += 4 + n;
    }
    if (pad8(off) != size)
        return BAD(off, "%llu unexpected bytes after the source table", (unsigned long long)(size - off));
    return GLM_OK;
}

/* Rows and documents: the row index covers the documents in order, each document fits its row
 * and names a source, no target on a document's first token or on padding, ids below vocab_size,
 * and the token and target counts equal the header's. */
static glm_status check_rows(const char *path, const glm_shard *sh, const layout *L) {
    if (sh->rowdocs[0] != 0 || sh->rowdocs[sh->n_rows] != sh->n_docs)
        return BAD(L->rowdocs, "row document index does not cover the %llu documents", (unsigned long long)sh->n_docs);
    uint64_t ntok = 0, ntgt = 0;
    for (uint32_t r = 0; r < sh->n_rows; r++) {
        uint64_t a = sh->rowdocs[r], b = sh->rowdocs[r + 1];
        if (b < a || b > sh->n_docs)
            return BAD(L->rowdocs + 8 * (r + 1), "row %u: document index %llu out of order", r, (unsigned long long)b);
        uint64_t t = 0;
        for (uint64_t d = a; d < b; d++) {
            const glm_shard_doc *doc = &sh->docs[d];
            if (doc->len == 0 || t + doc->len > sh->seq_len)
                return BAD(L->docs + 16 * d, "row %u: document %llu of %u tokens does not fit (row has %u)", r,
                           (unsigned long long)d, doc->len, sh->seq_len);
            if (doc->source >= sh->n_sources)
                return BAD(L->docs + 16 * d + 4, "document %llu: source index %u out of range", (unsigned long long)d,
                           doc->source);
            uint64_t base = (uint64_t)r * sh->seq_len + t;
            if (glm_shard_target(sh, base))
                return BAD(L->targets + base / 8, "row %u: the first token of document %llu is marked as a target", r,
                           (unsigned long long)d);
            for (uint32_t k = 0; k < doc->len; k++) {
                if (sh->vocab_size && sh->ids[base + k] >= sh->vocab_size)
                    return BAD(L->ids + 4 * (base + k), "token id %u is outside the vocabulary (%u)", sh->ids[base + k],
                               sh->vocab_size);
                ntgt += glm_shard_target(sh, base + k);
            }
            t += doc->len;
        }
        for (uint64_t i = (uint64_t)r * sh->seq_len + t; i < (uint64_t)(r + 1) * sh->seq_len; i++)
            if (glm_shard_target(sh, i)) return BAD(L->targets + i / 8, "row %u: a padding token is marked as a target", r);
        ntok += t;
    }
    if (ntok != sh->n_tokens || ntgt != sh->n_targets)
        return BAD(32, "header counts (%llu tokens, %llu targets) differ from the data (%llu, %llu)",
                   (unsigned long long)sh->n_tokens, (unsigned long long)sh->n_targets, (unsigned long long)ntok,
                   (unsigned long long)ntgt);
    return GLM_OK;
}

glm_status glm_shard_open(const char *path, glm_shard *sh) {
    memset(sh, 0, sizeof *sh);
    GLM_TRY(glm_mmap_open(&sh->map, path));
    sh->path = strdup(path);
    layout L = {0};
    glm_status s = check_header(path, sh, &L);
    if (s == GLM_OK) {
        const uint8_t *p = sh->map.data;
        sh->ids = (const uint32_t *)(p + L.ids);
        sh->targets = p + L.targets;
        if ((uintptr_t)(p + L.rowdocs) % 8 == 0) {
            sh->rowdocs = (const uint64_t *)(p + L.rowdocs);
            sh->docs = (const glm_shard_doc *)(p + L.docs);
        } else { /* R*T odd: the 64-bit sections sit 4 bytes off; read them through an aligned copy */
            size_t nr = 8 * ((size_t)sh->n_rows + 1), nd = 16 * (size_t)sh->n_docs;
            uint8_t *m = malloc(nr + nd);
            if (!m) s = glm_err(GLM_ERR_NOMEM, "%s: out of memory opening the shard (%zu bytes of row and document "
                                "tables)", path, nr + nd);
            else {
                memcpy(m, p + L.rowdocs, nr);
                memcpy(m + nr, p + L.docs, nd);
                sh->aligned_meta = m;
                sh->rowdocs = (const uint64_t *)m;
                sh->docs = (const glm_shard_doc *)(m + nr);
            }
        }
        if (s == GLM_OK) s = read_sources(path, sh, &L);
    }
    if (s == GLM_OK) s = check_rows(path, sh, &L);
    if (s != GLM_OK) {
        glm_shard_close(sh);
        return s;
    }
    /* validation touched every page: leave them to the page cache, not this process (rows of
     * 1M tokens: the loader maps one row at a time, see glm_shard_release) */
    glm_shard_release(sh, 0, sh->map.size);
    return GLM_OK;
}

void glm_shard_release(const glm_shard *sh, uint64_t off, uint64_t len) {
    if (!sh->map.data || off >= sh->map.size) return;
    if (len > sh->map.size - off) len = sh->map.size - off;
    /* rounded OUT to 2 MiB: the kernel may map a file's page cache in large folios of up to that
     * size, and an edge piece left mapped would stay resident; dropping a neighbour's pages too
     * costs only a fault on its next read */
    const uint64_t A = 2u << 20;
    uint64_t a = off / A * A, b = (off + len + A - 1) / A * A;
    if (b > sh->map.size) b = sh->map.size;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t ps = pg > 0 ? (uint64_t)pg : 4096;
    b = (b + ps - 1) / ps * ps; /* madvise's length in whole pages (the mapping's last page is whole) */
    if (b > a) madvise((char *)sh->map.data + a, (size_t)(b - a), MADV_DONTNEED);
}

/* ------------------------------------------------------------------------------ writer */

#define SHARD_NAME "%s-%05u.bin" /* prefix, index: glm_shard_is_file_name matches it */

bool glm_shard_is_file_name(const char *name, const char *prefix) {
    size_t p = strlen(prefix), d = 0;
    if (strncmp(name, prefix, p) || name[p] != '-') return false;
    while (name[p + 1 + d] >= '0' && name[p + 1 + d] <= '9') d++;
    return d >= 5 && !strcmp(name + p + 1 + d, ".bin");
}

glm_status glm_shard_writer_init(glm_shard_writer *w, const char *dir, const char *prefix,
                                 uint32_t seq_len, uint32_t rows_per_shard, uint64_t fingerprint,
                                 uint32_t vocab_size) {
    memset(w, 0, sizeof *w);
    if (seq_len == 0 || rows_per_shard == 0) return glm_err(GLM_ERR_ARG, "shard writer: seq_len and rows per shard must be > 0");
    w->seq_len = seq_len;
    w->rows_per_shard = rows_per_shard;
    w->fingerprint = fingerprint;
    w->vocab_size = vocab_size;
    w->dir = strdup(dir);
    w->prefix = strdup(prefix);
    return glm_vec_push(w->rowdocs, 0);
}

static glm_status writer_flush(glm_shard_writer *w) {
    uint32_t R = (uint32_t)(w->rowdocs.n - 1), T = w->seq_len;
    if (R == 0) return GLM_OK;
    uint64_t D = w->docs.n, rt = (uint64_t)R * T;
    layout L = make_layout(T, R, D);
    uint64_t src_bytes = 4;
    for (size_t i = 0; i < w->sources.n; i++) src_bytes += 4 + strlen(w->sources.v[i]);
    uint64_t size = pad8(L.sources + src_bytes);
    /* The file is the header, the ids as they are in w->ids (written from there, not copied), and
     * the tail built here: target bits, row documents, documents, sources. */
    uint8_t hdr[GLM_SHARD_HEADER_BYTES] = {0}, *tail = calloc(1, size - L.targets);
    if (!tail) return glm_err(GLM_ERR_NOMEM, "out of memory building a shard of %llu bytes", (unsigned long long)size);
    memcpy(hdr, GLM_SHARD_MAGIC, 8);
    wr32(hdr + 8, GLM_SHARD_VERSION);
    wr32(hdr + 12, GLM_SHARD_HEADER_BYTES);
    wr32(hdr + 16, T);
    wr32(hdr + 20, R);
    wr64(hdr + 24, D);
    wr64(hdr + 32, w->n_tokens);
    wr64(hdr + 40, w->n_targets);
    wr64(hdr + 48, w->fingerprint);
    wr32(hdr + 56, w->vocab_size);
    wr64(hdr + 64, L.ids);
    wr64(hdr + 72, L.targets);
    wr64(hdr + 80, L.rowdocs);
    wr64(hdr + 88, L.docs);
    wr64(hdr + 96, L.sources);
    wr64(hdr + 104, size);
    const uint8_t *tg = w->targets.v;
    uint64_t i = 0;
    for (; i + 8 <= rt; i += 8) { /* 8 target flags per byte, lowest bit first */
        unsigned byte = 0;
        for (int k = 0; k < 8; k++) byte |= (unsigned)(tg[i + k] != 0) << k;
        tail[i / 8] = (uint8_t)byte;
    }
    for (; i < rt; i++)
        if (tg[i]) tail[i / 8] |= (uint8_t)(1u << (i % 8));
    memcpy(tail + (L.rowdocs - L.targets), w->rowdocs.v, 8 * ((uint64_t)R + 1));
    memcpy(tail + (L.docs - L.targets), w->docs.v, 16 * D);
    uint64_t off = L.sources - L.targets; /* offsets in tail */
    wr32(tail + off, (uint32_t)w->sources.n);
    off += 4;
    for (size_t k = 0; k < w->sources.n; k++) {
        uint32_t n = (uint32_t)strlen(w->sources.v[k]);
        wr32(tail + off, n);
        memcpy(tail + off + 4, w->sources.v[k], n);
        off += 4 + n;
    }
    /* the payload CRC runs over ids then tail, as over one buffer */
    uint32_t crc = glm_crc32(glm_crc32(0, w->ids.v, 4 * rt), tail, size - L.targets);
    wr32(hdr + 112, crc);
    wr32(hdr + 124, glm_crc32(0, hdr, 124));

    char name[512];
    snprintf(name, sizeof name, SHARD_NAME, w->prefix, w->next_index);
    char *path = glm_path_join(w->dir, name);
    glm_afile af;
    glm_status s = path ? glm_afile_open(&af, path) : glm_err(GLM_ERR_NOMEM, "out of memory");
    if (s == GLM_OK) {
        if ((s = glm_afile_write(&af, hdr, sizeof hdr)) == GLM_OK && (s = glm_afile_write(&af, w->ids.v, 4 * rt)) == GLM_OK &&
            (s = glm_afile_write(&af, tail, size - L.targets)) == GLM_OK)
            s = glm_afile_commit(&af);
        else
            glm_afile_abort(&af);
    }
    free(path);
    free(tail);
    if (s != GLM_OK) return s;
    if (w->n_written == w->cap_written) {
        size_t nc = w->cap_written ? 2 * w->cap_written : 8;
        void *p = realloc(w->written, nc * sizeof *w->written);
        if (!p) return glm_err(GLM_ERR_NOMEM, "out of memory");
        w->written = p;
        w->cap_written = nc;
    }
    w->written[w->n_written++] = (struct glm_shard_info){strdup(name), R, D, w->n_tokens, w->n_targets, crc, size};
    w->next_index++;
    /* reset the in-memory shard */
    w->ids.n = w->targets.n = w->docs.n = 0;
    w->rowdocs.n = 1;
    for (size_t i = 0; i < w->sources.n; i++) free(w->sources.v[i]);
    w->sources.n = 0;
    w->n_tokens = w->n_targets = 0;
    return GLM_OK;
}

static glm_status intern_source(glm_shard_writer *w, const char *name, uint32_t *idx) {
    /* documents of one source arrive together, so the last few entries are the likely hits */
    for (size_t i = w->sources.n; i-- > 0;)
        if (!strcmp(w->sources.v[i], name)) {
            *idx = (uint32_t)i;
            return GLM_OK;
        }
    char *c = strdup(name);
    if (!c) return glm_err(GLM_ERR_NOMEM, "out of memory");
    GLM_TRY(glm_vec_push(w->sources, c));
    *idx = (uint32_t)(w->sources.n - 1);
    return GLM_OK;
}

glm_status glm_shard_writer_add_row(glm_shard_writer *w, size_t n, const uint32_t *const *ids,
                                    const uint8_t *const *tg, const uint32_t *lens,
                                    const char *const *srcs, const uint64_t *recs) {
    uint64_t used = 0;
    for (size_t k = 0; k < n; k++) used += lens[k];
    GLM_ASSERT(used <= w->seq_len, "packer produced a row of %llu tokens (> %u)", (unsigned long long)used, w->seq_len);
    GLM_TRY(glm_vec_reserve(w->ids, w->seq_len));
    GLM_TRY(glm_vec_reserve(w->targets, w->seq_len));
    for (size_t k = 0; k < n; k++) {
        glm_shard_doc d = {lens[k], 0, recs[k]};
        GLM_TRY(intern_source(w, srcs[k], &d.source));
        GLM_TRY(glm_vec_push(w->docs, d));
        memcpy(w->ids.v + w->ids.n, ids[k], 4 * (size_t)lens[k]);
        for (uint32_t i = 0; i < lens[k]; i++) {
            uint8_t t = i == 0 ? 0 : (tg[k][i] != 0); /* a document's first token is never a target */
            w->targets.v[w->targets.n + i] = t;
            w->n_targets += t;
        }
        w->ids.n += lens[k];
        w->targets.n += lens[k];
    }
    size_t padn = w->seq_len - used;
    memset(w->ids.v + w->ids.n, 0, 4 * padn);
    memset(w->targets.v + w->targets.n, 0, padn);
    w->ids.n += padn;
    w->targets.n += padn;
    w->n_tokens += used;
    GLM_TRY(glm_vec_push(w->rowdocs, (uint64_t)w->docs.n));
    if (w->rowdocs.n - 1 >= w->rows_per_shard) return writer_flush(w);
    return GLM_OK;
}

glm_status glm_shard_writer_finish(glm_shard_writer *w) { return writer_flush(w); }

void glm_shard_writer_free(glm_shard_writer *w) {
    glm_vec_free(w->ids);
    glm_vec_free(w->targets);
    glm_vec_free(w->rowdocs);
    glm_vec_free(w->docs);
    for (size_t i = 0; i < w->sources.n; i++) free(w->sources.v[i]);
    glm_vec_free(w->sources);
    for (size_t i = 0; i < w->n_written; i++) free(w->written[i].file);
    free(w->written);
    free(w->dir);
    free(w->prefix);
    memset(w, 0, sizeof *w);
}
