/* tokenize/bpe/bpe_internal.h (private to bpe.c and bpe_backtrack.c): the loaded BPE table and its
 * lookups. Not a public interface; see bpe.h. */
#ifndef GLM_TOKENIZE_BPE_INTERNAL_H
#define GLM_TOKENIZE_BPE_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdint.h>
#include <string.h>

#include "common/fileio.h"
#include "tokenize/bpe/bpe.h"

typedef struct glm_bpe_bt glm_bpe_bt;

#define NONE_RANK UINT32_MAX
#define FILTER_LOG 21 /* 2^21 bits = 256 KiB, fits in L2; ~7% false positives at 151k tokens */

/* One hash-table slot (16 bytes): the token's first 8 bytes (zero padded) and length live in the
 * slot, so a lookup of a token of <= 8 bytes touches one cache line and never the blob. */
typedef struct {
    uint64_t head; /* first min(len, 8) bytes, little endian, zero padded */
    uint32_t len;  /* token length; 0 = empty slot */
    uint32_t rank;
} bpe_slot;

struct glm_bpe {
    char *blob;        /* all token bytes back to back */
    uint32_t *off;     /* [n_ranks] offset into blob, NONE_RANK = unassigned rank */
    uint32_t *len;     /* [n_ranks] token length in bytes */
    uint32_t n_ranks;  /* max rank + 1 */
    bpe_slot *slots;   /* open addressing, linear probing */
    size_t mask;       /* slots - 1 (power of two) */
    uint32_t byte_rank[256];
    uint32_t *pair_rank; /* [65536] rank of the 2-byte token (b0 << 8 | b1), NONE_RANK if none */
    uint64_t edge[1024]; /* bit (first byte << 8 | last byte) set when some token of >= 3 bytes
                            has those end bytes: an 8 KiB first test that stays in L1 */
    uint64_t *filter;    /* [2^FILTER_LOG / 64] bit (hash >> (64 - FILTER_LOG)) set for every token:
                            a clear bit proves "not a token" without touching the 4 MB table */
    pcre2_code *re;
    int jit;           /* JIT compiled */
    glm_bpe_bt *bt;    /* the backtracking encoder's tables (bpe_backtrack.c), NULL if not built */
    uint64_t file_hash; /* FNV-1a 64 of the tokenizer file's bytes */
    glm_mmap cache;    /* the table cache that blob, off, len, slots, pair_rank, filter and bt's
                          tables point into (bpe_cache.c); empty when they are malloc'd */
};

/* ------------------------------------------------------------------------- hashing */

/* Little-endian load of the first min(n, 8) bytes of p, zero padded (n >= 1). For 4..8 bytes
 * two overlapping 4-byte loads are OR-ed: the overlap holds the same bytes, so the result is exact,
 * without a branch per length. */
static inline uint64_t load_head(const uint8_t *p, size_t n) {
    uint64_t w;
    if (n >= 8) {
        memcpy(&w, p, 8);
        return w;
    }
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        return (uint64_t)lo | (uint64_t)hi << (8 * (n - 4));
    }
    w = p[0];
    if (n >= 2) w |= (uint64_t)p[1] << 8;
    if (n == 3) w |= (uint64_t)p[2] << 16;
    return w;
}

/* A 64-bit hash of a byte string given its head (load_head): the head and each further 8-byte
 * word folded with multiply-xorshift rounds (splitmix64-style). Only spreads tokens over the
 * table; not meant to resist attack. */
static inline uint64_t hash_bytes(const uint8_t *p, size_t n, uint64_t head) {
    uint64_t h = (head ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull)) * 0xbf58476d1ce4e5b9ull;
    for (size_t i = 8; i < n; i += 8) {
        h ^= h >> 29;
        h = (h ^ load_head(p + i, n - i)) * 0x94d049bb133111ebull;
    }
    h ^= h >> 31;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

/* Rank of s[0..n) or NONE_RANK. use_filter: consult the Bloom-style bit filter first (worth it
 * where most lookups miss, as inside merges; whole pieces mostly hit). */
static inline uint32_t lookup_f(const glm_bpe *b, const uint8_t *s, size_t n, int use_filter) {
    if (n <= 2) return n == 2 ? b->pair_rank[s[0] << 8 | s[1]] : b->byte_rank[s[0]];
    unsigned eb = (unsigned)s[0] << 8 | s[n - 1];
    if (use_filter && !(b->edge[eb >> 6] >> (eb & 63) & 1)) return NONE_RANK;
    uint64_t head = load_head(s, n);
    uint64_t h = hash_bytes(s, n, head);
    uint64_t fb = h >> (64 - FILTER_LOG);
    if (use_filter && !(b->filter[fb >> 6] >> (fb & 63) & 1)) return NONE_RANK;
    size_t i = (size_t)h & b->mask;
    for (;;) {
        const bpe_slot *e = &b->slots[i];
        if (e->len == n && e->head == head &&
            (n <= 8 || memcmp(b->blob + b->off[e->rank] + 8, s + 8, n - 8) == 0))
            return e->rank;
        if (e->len == 0) return NONE_RANK;
        i = (i + 1) & b->mask;
    }
}

static inline uint32_t lookup(const glm_bpe *b, const uint8_t *s, size_t n) { return lookup_f(b, s, n, 1); }


/* The split regex's per-call state (PCRE2 match data, and a JIT stack for very long runs). */
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
} glm_bpe_splitter;

/* Compiles the split regex into b->re (bpe_split.c) and, once per process, the class tables of
 * the hand-written split paths. Errors: GLM_ERR_LIBRARY (PCRE2 cannot compile the regex). */
glm_status glm_bpe_split_init(glm_bpe *b);

/* Length in bytes of the piece that starts at text[p] (p < len; text valid UTF-8, whole text
 * given for the look-ahead); 0 on a regex engine error (*st set). */
size_t glm_bpe_split_next(const glm_bpe *b, const char *text, size_t len, size_t p,
                          glm_bpe_splitter *sp, glm_status *st);

/* Frees what a splitter holds and zeroes it. */
void glm_bpe_splitter_free(glm_bpe_splitter *sp);

/* The longest piece (and token) the backtracking encoder handles; longer pieces use the merge
 * loop. Part lengths then fit in a byte. */
#define BT_MAX_PIECE 255

/* Builds b->bt (bpe_backtrack.c) for a loaded table whose 256 single bytes are all tokens.
 * Errors: GLM_ERR_NOMEM. */
glm_status glm_bpe_bt_build(glm_bpe *b);

/* The length in bytes of the longest token of at most BT_MAX_PIECE bytes that is not reachable
 * (its bytes alone merge to other tokens): glm_bpe_bt_encode never returns such a token, so a
 * piece up to this length must be looked up whole first. */
uint32_t glm_bpe_bt_unreachable_max(const glm_bpe_bt *bt);

/* A table as bytes, for the table cache (bpe_cache.c). */
typedef struct {
    const void *p;
    uint64_t bytes;
} glm_bpe_sect;

/* The sizes of the backtracking tables, and the byte sizes of their entries (the layout that a
 * cache must have been written with). */
typedef struct {
    uint64_t ncell, nps;
    uint32_t max_len, unreach_max, bound_shift;
    uint32_t cell_bytes, tok_bytes, pstate_bytes;
} glm_bpe_bt_dims;

#define GLM_BPE_BT_SECTS 3

/* The backtracking tables of bt for the cache: their sizes into *d and, into sect, the trie cells
 * (ncell entries), the per-token entries (n_ranks of them; sect[1].bytes is left 0 for the caller
 * to set) and the derivation blocks (nps entries), in that order. */
void glm_bpe_bt_export(const glm_bpe_bt *bt, glm_bpe_bt_dims *d, glm_bpe_sect sect[GLM_BPE_BT_SECTS]);

/* Backtracking tables over arrays that live elsewhere (a table cache's mapping, which must
 * outlive them; glm_bpe_bt_free then frees only the struct): cell[d->ncell], t[n_ranks],
 * ps[d->nps], as glm_bpe_bt_export gave them. Checks the entry sizes and the dimensions, not the
 * contents (the cache's checksum does). Errors: GLM_ERR_FORMAT (another layout), GLM_ERR_NOMEM. */
glm_status glm_bpe_bt_import(const glm_bpe_bt_dims *d, uint32_t n_ranks, const void *cell, const void *t,
                             const void *ps, glm_bpe_bt **out);

/* The table cache (bpe_cache.c): the tables that glm_bpe_load builds from a tokenizer file, saved
 * in one file per tokenizer file content under the cache directory ($GLMTUNE_CACHE_DIR; else
 * $XDG_CACHE_HOME/glmtune; else $HOME/.cache/glmtune; GLMTUNE_CACHE_DIR=off or empty: no cache).
 *
 * glm_bpe_cache_load: fills b's tables from the cache of the file whose length is `len` and
 * whose FNV-1a 64 is b->file_hash (b->n_ranks, blob, off, len, slots, mask, byte_rank,
 * pair_rank, edge, filter and bt, mapped read-only from the cache file into b->cache). Returns 1
 * on success; 0 when there is no cache or it does not validate (another format version or
 * layout, another tokenizer file, a size or checksum mismatch, any I/O error): b is then as it
 * was and the tables must be built. Never fails otherwise. */
int glm_bpe_cache_load(glm_bpe *b, size_t len);

/* Saves b's built tables as the cache of a tokenizer file of `len` bytes (temp file, fsync,
 * rename, so a reader sees a whole file or none). Best effort: any error leaves no cache and is
 * not reported (the thread's error message is cleared). */
void glm_bpe_cache_save(const glm_bpe *b, size_t len);

/* Frees b->bt's tables (NULL is fine). */
void glm_bpe_bt_free(glm_bpe_bt *bt);

/* Encodes one regex piece s[0..n) (1 <= n <= BT_MAX_PIECE) with the backtracking encoder, APPENDING its ids to
 * *out: the same ids as the merge loop (see bpe_backtrack.c). Errors: GLM_ERR_NOMEM,
 * GLM_ERR_ARG (n too long), GLM_ERR_INTERNAL (no encoding found: a bug). */
glm_status glm_bpe_bt_encode(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out);

#endif
