/* tokenize/bpe/bpe.c: tiktoken-compatible byte-level BPE for GLM-4.
 *
 * Encoding = split the text into pieces with the GLM-4 regex (find-all, leftmost-first, as
 * tiktoken's Rust core does with fancy-regex), then for each piece:
 *   - a piece that is itself a token maps directly to its rank;
 *   - otherwise byte-pair merge: start from single bytes and repeatedly merge the adjacent pair
 *     whose concatenation has the lowest rank (leftmost on ties) until no pair is a token.
 *     Pieces up to SMALL_PIECE bytes use tiktoken's simple O(n*m) loop; longer ones (a run of CJK
 *     with no spaces is one piece) use a binary heap over (rank, start offset) with a linked list of parts and
 *     lazy deletion, O(n log n). Both choose the same pair at each step, so both give tiktoken's
 *     result.
 *
 * Pieces of 13..BT_MAX_PIECE bytes that are not a token go to the backtracking encoder
 * (bpe_backtrack.c), which gives the same ids about twice as fast as the heap on Chinese text.
 *
 * The split itself (the regex, its hand-written fast paths and how PCRE2's Unicode tables are
 * made to agree with the reference's) is in bpe_split.c. */
#include "tokenize/bpe/bpe_internal.h"

#include "common/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t glm_bpe_rank(const glm_bpe *b, const void *s, size_t n) {
    if (n == 0) return -1;
    uint32_t r = lookup(b, (const uint8_t *)s, n);
    return r == NONE_RANK ? -1 : (int64_t)r;
}

uint32_t glm_bpe_n_ranks(const glm_bpe *b) { return b->n_ranks; }

bool glm_bpe_token(const glm_bpe *b, uint32_t id, const char **bytes, size_t *n) {
    if (id >= b->n_ranks || b->off[id] == NONE_RANK) return false;
    *bytes = b->blob + b->off[id];
    *n = b->len[id];
    return true;
}

/* ------------------------------------------------------------------------- loading */

static int b64val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard base64 s[0..n) (with '=' padding, length a multiple of 4) into out; returns
 * the byte count or -1 when malformed. out must hold n/4*3 bytes. */
static long b64decode(const char *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=') {
                if (i + 4 != n || k < 2) return -1;
                v[k] = 0;
                pad++;
            } else {
                if (pad) return -1; /* data after padding */
                v[k] = b64val(c);
                if (v[k] < 0) return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return (long)o;
}

bool glm_bpe_detect(const char *data, size_t len) {
    size_t i = 0, nb = 0, nd = 0;
    while (i < len && (b64val((unsigned char)data[i]) >= 0 || data[i] == '=')) i++, nb++;
    if (!nb || i >= len || data[i] != ' ') return false;
    i++;
    while (i < len && data[i] >= '0' && data[i] <= '9') i++, nd++;
    if (!nd) return false;
    return i == len || data[i] == '\n' || (data[i] == '\r' && i + 1 < len && data[i + 1] == '\n');
}

void glm_bpe_free(glm_bpe *b) {
    if (!b) return;
    if (!b->cache.data) { /* else they point into the cache's mapping */
        free(b->blob);
        free(b->off);
        free(b->len);
        free(b->slots);
        free(b->pair_rank);
        free(b->filter);
    }
    if (b->re) pcre2_code_free(b->re);
    glm_bpe_bt_free(b->bt);
    glm_mmap_close(&b->cache);
    free(b);
}

uint64_t glm_bpe_file_hash(const glm_bpe *b) { return b->file_hash; }

bool glm_bpe_from_cache(const glm_bpe *b) { return b->cache.data != NULL; }

typedef struct {
    uint32_t rank, off, len, line;
} load_ent;

/* Inserts token `rank` (its bytes already in blob/off/len) into the hash table; a token whose
 * bytes are already present is an error naming both lines. */
static glm_status insert_token(glm_bpe *b, uint32_t rank, const char *path, uint32_t line,
                               const uint32_t *line_of_rank) {
    const uint8_t *s = (const uint8_t *)b->blob + b->off[rank];
    size_t n = b->len[rank];
    uint64_t head = load_head(s, n);
    uint64_t h = hash_bytes(s, n, head);
    uint64_t fb = h >> (64 - FILTER_LOG);
    b->filter[fb >> 6] |= 1ull << (fb & 63);
    size_t i = (size_t)h & b->mask;
    for (;;) {
        bpe_slot *e = &b->slots[i];
        if (e->len == 0) break;
        if (e->len == n && e->head == head && memcmp(b->blob + b->off[e->rank], s, n) == 0)
            return glm_err(GLM_ERR_FORMAT,
                           "%s:%u: token with rank %u has the same bytes as rank %u (line %u); "
                           "hint: a tiktoken BPE file lists each token once",
                           path, line, rank, e->rank, line_of_rank[e->rank]);
        i = (i + 1) & b->mask;
    }
    b->slots[i].head = head;
    b->slots[i].len = (uint32_t)n;
    b->slots[i].rank = rank;
    if (n >= 3) b->edge[(s[0] << 8 | s[n - 1]) >> 6] |= 1ull << ((s[0] << 8 | s[n - 1]) & 63);
    if (n == 1) b->byte_rank[s[0]] = rank;
    if (n == 2) b->pair_rank[s[0] << 8 | s[1]] = rank;
    return GLM_OK;
}

/* How far ranks may run past twice the number of tokens before a file is refused (see below). */
#define MAX_RANK_SLACK 65536

glm_status glm_bpe_load(const char *path, const char *data, size_t len, glm_bpe **out) {
    glm_status st = GLM_OK;
    GLM_VEC(load_ent) ents = {0};
    glm_charvec blob = {0};
    uint32_t *line_of = NULL;
    glm_bpe *b = calloc(1, sizeof *b);
    if (!b) return glm_err(GLM_ERR_NOMEM, "out of memory loading %s", path);
    b->file_hash = glm_fnv1a64(GLM_FNV1A64_INIT, data, len);
    if (glm_bpe_cache_load(b, len)) { /* the tables built by an earlier run from the same bytes */
        if ((st = glm_bpe_split_init(b)) != GLM_OK) goto fail;
        *out = b;
        return GLM_OK;
    }
    uint8_t tmp[4096];
    uint32_t max_rank = 0, max_rank_line = 0;
    size_t pos = 0;
    uint32_t line = 0;
    while (pos < len) {
        line++;
        const char *ls = data + pos;
        const char *nl = memchr(ls, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - ls) : len - pos;
        pos += ll + (nl ? 1 : 0);
        if (ll && ls[ll - 1] == '\r') ll--;
        if (ll == 0) continue;
        const char *sp = memchr(ls, ' ', ll);
        if (!sp) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: expected \"base64(token) rank\", found no space; "
                         "hint: is this a tiktoken BPE file?", path, line);
            goto fail;
        }
        size_t tl = (size_t)(sp - ls);
        if (tl > sizeof tmp / 3 * 4) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: token longer than %zu bytes", path, line, sizeof tmp);
            goto fail;
        }
        long nb = b64decode(ls, tl, tmp);
        if (nb <= 0) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: \"%.*s\" is not valid base64", path, line,
                         (int)(tl > 60 ? 60 : tl), ls);
            goto fail;
        }
        const char *rs = sp + 1, *re_ = ls + ll;
        if (rs == re_) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: missing rank after the token", path, line);
            goto fail;
        }
        uint64_t rank = 0;
        for (const char *q = rs; q < re_; q++) {
            if (*q < '0' || *q > '9' || rank > 0x3fffffff) {
                st = glm_err(GLM_ERR_FORMAT, "%s:%u: rank \"%.*s\" is not a number below 2^30",
                             path, line, (int)(re_ - rs > 30 ? 30 : re_ - rs), rs);
                goto fail;
            }
            rank = rank * 10 + (uint64_t)(*q - '0');
        }
        if (rank > 0x3fffffff) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: rank %llu too large", path, line, (unsigned long long)rank);
            goto fail;
        }
        if (blob.n + (size_t)nb > UINT32_MAX) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: vocabulary larger than 4 GiB", path, line);
            goto fail;
        }
        load_ent e = {(uint32_t)rank, (uint32_t)blob.n, (uint32_t)nb, line};
        if (glm_vec_reserve(blob, (size_t)nb) != GLM_OK || glm_vec_push(ents, e) != GLM_OK) {
            st = GLM_ERR_NOMEM;
            goto fail;
        }
        memcpy(blob.v + blob.n, tmp, (size_t)nb);
        blob.n += (size_t)nb;
        if (rank > max_rank) max_rank = (uint32_t)rank, max_rank_line = line;
    }
    if (ents.n == 0) {
        st = glm_err(GLM_ERR_FORMAT, "%s: no tokens found; hint: expected lines \"base64(token) rank\"", path);
        goto fail;
    }
    /* The tables below are indexed by rank: a rank far beyond the number of tokens (ranks run
     * 0..n-1 in tiktoken files, gaps are rare and small) would cost gigabytes before any other
     * check, so it is refused first, and so is a vocabulary without every single byte. */
    if ((uint64_t)max_rank >= 2 * (uint64_t)ents.n + MAX_RANK_SLACK) {
        st = glm_err(GLM_ERR_FORMAT, "%s:%u: rank %u is far beyond the %zu token%s of the file (ranks run from 0 "
                     "to the number of tokens, with few gaps); hint: is this a whole tiktoken BPE file "
                     "(\"base64(token) rank\" per line)?", path, max_rank_line, max_rank, ents.n,
                     ents.n > 1 ? "s" : "");
        goto fail;
    }
    {
        bool byte_seen[256] = {false};
        for (size_t i = 0; i < ents.n; i++)
            if (ents.v[i].len == 1) byte_seen[(uint8_t)blob.v[ents.v[i].off]] = true;
        for (int c = 0; c < 256; c++)
            if (!byte_seen[c]) {
                st = glm_err(GLM_ERR_FORMAT, "%s: no token for the single byte 0x%02x (%zu tokens read); hint: a "
                             "byte-level BPE vocabulary must contain all 256 bytes", path, c, ents.n);
                goto fail;
            }
    }
    b->n_ranks = max_rank + 1;
    b->off = malloc((size_t)b->n_ranks * sizeof *b->off);
    b->len = malloc((size_t)b->n_ranks * sizeof *b->len);
    line_of = malloc((size_t)b->n_ranks * sizeof *line_of);
    size_t nslots = 1024;
    while (nslots < ents.n + ents.n / 2) nslots *= 2; /* load factor <= 2/3 */
    b->slots = malloc(nslots * sizeof *b->slots);
    b->pair_rank = malloc(65536 * sizeof *b->pair_rank);
    b->filter = calloc((1u << FILTER_LOG) / 64, sizeof *b->filter);
    if (!b->off || !b->len || !line_of || !b->slots || !b->pair_rank || !b->filter) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory loading %s (%zu tokens)", path, ents.n);
        goto fail;
    }
    b->mask = nslots - 1;
    memset(b->slots, 0, nslots * sizeof *b->slots);
    for (int c = 0; c < 256; c++) b->byte_rank[c] = NONE_RANK;
    for (size_t i = 0; i < 65536; i++) b->pair_rank[i] = NONE_RANK;
    for (uint32_t r = 0; r < b->n_ranks; r++) b->off[r] = NONE_RANK, b->len[r] = 0;
    b->blob = blob.v;
    blob.v = NULL;
    for (size_t i = 0; i < ents.n; i++) {
        load_ent e = ents.v[i];
        if (b->off[e.rank] != NONE_RANK) {
            st = glm_err(GLM_ERR_FORMAT, "%s:%u: rank %u was already given on line %u; hint: ranks "
                         "must be unique", path, e.line, e.rank, line_of[e.rank]);
            goto fail;
        }
        b->off[e.rank] = e.off;
        b->len[e.rank] = e.len;
        line_of[e.rank] = e.line;
        if ((st = insert_token(b, e.rank, path, e.line, line_of)) != GLM_OK) goto fail;
    }
    for (int c = 0; c < 256; c++)
        if (b->byte_rank[c] == NONE_RANK) {
            st = glm_err(GLM_ERR_FORMAT, "%s: no token for the single byte 0x%02x; hint: a byte-level "
                         "BPE vocabulary must contain all 256 bytes", path, c);
            goto fail;
        }
    if ((st = glm_bpe_split_init(b)) != GLM_OK) goto fail;
    if ((st = glm_bpe_bt_build(b)) != GLM_OK) goto fail;
    free(line_of);
    glm_vec_free(ents);
    glm_bpe_cache_save(b, len);
    *out = b;
    return GLM_OK;
fail:
    free(line_of);
    glm_vec_free(ents);
    glm_vec_free(blob);
    glm_bpe_free(b);
    return st;
}

/* ------------------------------------------------------------------------- merging */

#ifndef SMALL_PIECE
#define SMALL_PIECE 16
#endif
#define STACK_PIECE 256

/* tiktoken's simple merge loop for a piece of n (2..SMALL_PIECE] bytes: find the lowest pair rank
 * (first a branch-free min over the array, then the first index holding it), merge, update the
 * two neighbouring pair ranks. O(n^2) but with tiny constants for the short pieces it serves. */
static glm_status merge_small(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    uint32_t start[SMALL_PIECE + 1], rank[SMALL_PIECE + 4];
    size_t m = n + 1; /* parts + end sentinel */
    for (size_t i = 0; i <= n; i++) start[i] = (uint32_t)i;
    for (size_t i = 0; i + 1 < n; i++) rank[i] = b->pair_rank[s[i] << 8 | s[i + 1]];
    for (size_t i = n - 1; i < n + 3; i++) rank[i] = NONE_RANK;
    for (;;) {
        /* min over rank[0 .. m-2] (the sentinel pads to a multiple of 4 lanes) */
        uint32_t m0 = NONE_RANK, m1 = NONE_RANK, m2 = NONE_RANK, m3 = NONE_RANK;
        size_t cnt = m - 1;
        for (size_t i = 0; i < cnt; i += 4) {
            m0 = rank[i] < m0 ? rank[i] : m0;
            m1 = rank[i + 1] < m1 ? rank[i + 1] : m1;
            m2 = rank[i + 2] < m2 ? rank[i + 2] : m2;
            m3 = rank[i + 3] < m3 ? rank[i + 3] : m3;
        }
        m0 = m0 < m1 ? m0 : m1;
        m2 = m2 < m3 ? m2 : m3;
        uint32_t best = m0 < m2 ? m0 : m2;
        if (best == NONE_RANK) break;
        size_t bi = 0;
        while (rank[bi] != best) bi++;
        /* merge parts bi and bi+1: drop start[bi+1] and rank[bi+1] */
        for (size_t i = bi + 1; i + 1 < m; i++) start[i] = start[i + 1], rank[i] = rank[i + 1];
        m--;
        rank[m - 1] = rank[m] = rank[m + 1] = rank[m + 2] = NONE_RANK;
        rank[bi] = bi + 2 < m ? lookup(b, s + start[bi], start[bi + 2] - start[bi]) : NONE_RANK;
        if (bi > 0) rank[bi - 1] = lookup(b, s + start[bi - 1], start[bi + 1] - start[bi - 1]);
    }
    GLM_TRY(glm_vec_reserve(*out, m - 1));
    for (size_t i = 0; i + 1 < m; i++) {
        uint32_t r = lookup(b, s + start[i], start[i + 1] - start[i]);
        GLM_ASSERT(r != NONE_RANK, "BPE produced a part that is not a token");
        out->v[out->n++] = r;
    }
    return GLM_OK;
}

typedef struct {
    uint32_t rank, pos, end;
} heap_ent;

static inline int heap_less(heap_ent a, heap_ent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}
static void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!heap_less(e, h[par])) break;
        h[i] = h[par];
        i = par;
    }
    h[i] = e;
}
static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], last = h[--*n];
    size_t i = 0, sz = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= sz) break;
        if (c + 1 < sz && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (sz) h[i] = last;
    return top;
}

/* Heap merge for long pieces: parts are a linked list over byte offsets (nxt[i] = start of the
 * next part, n = end); heap entries (rank, pos, end) are valid while part `pos` is alive and its
 * pair still ends at `end`. Pops the lowest (rank, pos): the same choice as tiktoken's loop. Each
 * merge pushes at most 2 entries, so the heap holds < 3n entries: O(n log n). */
static glm_status merge_heap(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    if (n > UINT32_MAX - 2) return glm_err(GLM_ERR_ARG, "a single regex piece of %zu bytes is too long", n);
    /* pieces up to STACK_PIECE bytes use stack buffers (no allocation) */
    uint32_t s_nxt[STACK_PIECE], s_prv[STACK_PIECE];
    uint8_t s_dead[STACK_PIECE];
    heap_ent s_h[3 * STACK_PIECE];
    int on_stack = n <= STACK_PIECE;
    uint32_t *nxt = on_stack ? s_nxt : malloc(n * sizeof *nxt);
    uint32_t *prv = on_stack ? s_prv : malloc(n * sizeof *prv);
    uint8_t *dead = on_stack ? memset(s_dead, 0, n) : calloc(n, 1);
    size_t hn = 0;
    heap_ent *h = on_stack ? s_h : malloc(3 * n * sizeof *h);
    glm_status st = GLM_OK;
    if (!nxt || !prv || !dead || !h) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory merging a %zu-byte piece", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) nxt[i] = (uint32_t)(i + 1), prv[i] = (uint32_t)i - 1;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = lookup(b, s + i, 2);
        if (r != NONE_RANK) heap_push(h, &hn, (heap_ent){r, (uint32_t)i, (uint32_t)(i + 2)});
    }
    while (hn) {
        heap_ent e = heap_pop(h, &hn);
        uint32_t p = e.pos;
        if (dead[p] || nxt[p] >= n || nxt[nxt[p]] != e.end) continue; /* stale */
        uint32_t q = nxt[p];
        dead[q] = 1;
        nxt[p] = nxt[q];
        if (nxt[p] < n) prv[nxt[p]] = p;
        if (nxt[p] < n) {
            uint32_t end = nxt[nxt[p]];
            uint32_t r = lookup(b, s + p, end - p);
            if (r != NONE_RANK) heap_push(h, &hn, (heap_ent){r, p, end});
        }
        if (p > 0) {
            uint32_t pp = prv[p];
            uint32_t r = lookup(b, s + pp, nxt[p] - pp);
            if (r != NONE_RANK) heap_push(h, &hn, (heap_ent){r, pp, nxt[p]});
        }
    }
    for (size_t i = 0; i < n; i = nxt[i]) {
        uint32_t r = lookup(b, s + i, nxt[i] - i);
        if (r == NONE_RANK) {
            st = glm_err(GLM_ERR_INTERNAL, "BPE produced a part that is not a token");
            goto done;
        }
        if ((st = glm_vec_push(*out, r)) != GLM_OK) goto done;
    }
done:
    if (!on_stack) {
        free(nxt);
        free(prv);
        free(dead);
        free(h);
    }
    return st;
}

/* The merge of one piece that is not itself a token: the simple loop for short pieces (an English
 * word that is not a token), the backtracking encoder (bpe_backtrack.c) up to BT_MAX_PIECE bytes
 * (a Chinese phrase), the heap above. */
#define BT_MIN_PIECE 12
static inline glm_status merge_piece(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    if (n <= BT_MIN_PIECE) return merge_small(b, s, n, out);
    if (b->bt && n <= BT_MAX_PIECE) return glm_bpe_bt_encode(b, s, n, out);
    return n <= SMALL_PIECE ? merge_small(b, s, n, out) : merge_heap(b, s, n, out);
}

static inline glm_status encode_piece(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    /* A piece that is itself a token is that token (tiktoken looks it up first). Short pieces
     * (English words) mostly are: straight to the table; longer ones mostly are not (a Chinese
     * phrase): the filters reject them without touching the table. The backtracking encoder
     * finds a piece that is a reachable token by itself, so pieces it takes need the lookup only
     * up to the longest unreachable token. */
    if (!b->bt || n <= BT_MIN_PIECE || n > BT_MAX_PIECE || n <= glm_bpe_bt_unreachable_max(b->bt)) {
        uint32_t r = lookup_f(b, s, n, n > 8);
        if (r != NONE_RANK) {
            if (out->n == out->cap) GLM_TRY(glm_vec_reserve(*out, 1));
            out->v[out->n++] = r;
            return GLM_OK;
        }
    }
    return merge_piece(b, s, n, out);
}

glm_status glm_bpe_merge(const glm_bpe *b, const void *s, size_t n, int method, glm_u32vec *out) {
    if (n == 0) return GLM_OK;
    const uint8_t *p = s;
    if (method == 1) {
        if (!b->bt) return glm_err(GLM_ERR_ARG, "glm_bpe_merge: the backtracking tables are not built");
        return glm_bpe_bt_encode(b, p, n, out);
    }
    if (n == 1) return glm_vec_push(*out, b->byte_rank[p[0]]);
    return n <= SMALL_PIECE ? merge_small(b, p, n, out) : merge_heap(b, p, n, out);
}

glm_status glm_bpe_encode(const glm_bpe *b, const char *text, size_t len, glm_u32vec *out) {
    const uint8_t *s = (const uint8_t *)text;
    glm_bpe_splitter sp = {0};
    glm_status st = GLM_OK;
    size_t p = 0;
    /* room for about one id per 3 bytes up front, so most pushes do not check capacity twice */
    if (len > 64 && (st = glm_vec_reserve(*out, len / 3)) != GLM_OK) return st;
    while (p < len) {
        size_t n = glm_bpe_split_next(b, text, len, p, &sp, &st);
        if (!n) break;
        if ((st = encode_piece(b, s + p, n, out)) != GLM_OK) break;
        p += n;
    }
    glm_bpe_splitter_free(&sp);
    return st;
}
