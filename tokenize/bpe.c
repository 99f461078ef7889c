/* tokenize/bpe.c: tiktoken-compatible byte-level BPE for GLM-4.
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
 * Split speed: most text is ASCII, and for a piece whose characters and look-ahead character are
 * all ASCII the regex's classes are fixed (\p{L} = [A-Za-z], \p{N} = [0-9],
 * \s = [\t\n\v\f\r ]), so ascii_piece() below decides the piece by hand, following the
 * alternatives in order exactly as the backtracking engine does. Whenever it would have to look
 * at a non-ASCII byte it returns 0 and PCRE2 (JIT) matches at that offset instead, so the hand
 * path never guesses about Unicode classes.
 *
 * PCRE2's Unicode tables differ from the reference's on some code points; see pcre2_pattern
 * below for what differs and how the pattern compensates. */
#include "tokenize/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char glm_bpe_glm4_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

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
    free(b->blob);
    free(b->off);
    free(b->len);
    free(b->slots);
    free(b->pair_rank);
    free(b->filter);
    if (b->re) pcre2_code_free(b->re);
    free(b);
}

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

static glm_status compile_regex(glm_bpe *b);

glm_status glm_bpe_load(const char *path, const char *data, size_t len, glm_bpe **out) {
    glm_status st = GLM_OK;
    GLM_VEC(load_ent) ents = {0};
    glm_charvec blob = {0};
    uint32_t *line_of = NULL;
    glm_bpe *b = calloc(1, sizeof *b);
    if (!b) return glm_err(GLM_ERR_NOMEM, "out of memory loading %s", path);
    uint8_t tmp[4096];
    uint32_t max_rank = 0;
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
        if (rank > max_rank) max_rank = (uint32_t)rank;
    }
    if (ents.n == 0) {
        st = glm_err(GLM_ERR_FORMAT, "%s: no tokens found; hint: expected lines \"base64(token) rank\"", path);
        goto fail;
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
    if ((st = compile_regex(b)) != GLM_OK) goto fail;
    free(line_of);
    glm_vec_free(ents);
    *out = b;
    return GLM_OK;
fail:
    free(line_of);
    glm_vec_free(ents);
    glm_vec_free(blob);
    glm_bpe_free(b);
    return st;
}

/* ------------------------------------------------------------------------- splitting */

enum { C_L = 1, C_N = 2, C_S = 4, C_NL = 8, C_HI = 16 };

/* ASCII classes as the regex sees them (identical in PCRE2-UCP and Rust regex for ASCII):
 * \p{L} = letters, \p{N} = digits, \s = \t \n \v \f \r and space, C_NL = \r \n, C_HI = non-ASCII. */
static uint8_t cls_of(int c) {
    if (c >= 0x80) return C_HI;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return C_L;
    if (c >= '0' && c <= '9') return C_N;
    if (c == '\r' || c == '\n') return C_S | C_NL;
    if (c == '\t' || c == '\v' || c == '\f' || c == ' ') return C_S;
    return 0;
}
static uint8_t cls_tab[256];
static void init_cls(void) {
    for (int c = 0; c < 256; c++) cls_tab[c] = cls_of(c);
}

/* Length of the regex piece starting at s[p] (p < len), decided without PCRE2 when every byte the
 * regex would examine is ASCII; 0 = "ask PCRE2". Follows the alternatives in order:
 *  1 (?i:'s|'t|'re|'ve|'m|'ll|'d)   2 [^\r\n\p{L}\p{N}]?\p{L}+   3 \p{N}{1,3}
 *  4 ' ?[^\s\p{L}\p{N}]+[\r\n]*'    5 \s*[\r\n]+   6 \s+(?!\S)   7 \s+ */
static inline size_t ascii_piece(const uint8_t *s, size_t len, size_t p) {
    uint8_t c = s[p], k = cls_tab[c];
    size_t q;
    if (k & C_HI) return 0;
    if (c == '\'' && p + 1 < len) { /* 1: only ASCII letters can be involved (s also folds with U+017F) */
        uint8_t d = s[p + 1];
        if (d >= 0x80) return 0;
        d |= 0x20;
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return 2;
        if ((d == 'r' || d == 'v' || d == 'l') && p + 2 < len) {
            uint8_t e = s[p + 2];
            if (e >= 0x80) return 0;
            e |= 0x20;
            if ((d == 'l' && e == 'l') || (d != 'l' && e == 'e')) return 3;
        }
    }
    if (k & C_L) {
        q = p + 1;
        goto letters;
    }
    if (!(k & (C_N | C_NL)) && p + 1 < len) { /* 2 with the optional prefix */
        uint8_t d = cls_tab[s[p + 1]];
        if (d & C_HI) return 0;
        if (d & C_L) {
            q = p + 2;
            goto letters;
        }
    }
    if (k & C_N) { /* 3 */
        q = p + 1;
        while (q < len && q < p + 3) {
            uint8_t d = cls_tab[s[q]];
            if (d & C_HI) return 0;
            if (!(d & C_N)) break;
            q++;
        }
        return q - p;
    }
    /* 4: punctuation = not \s, not L, not N */
    q = p;
    if (c == ' ' && p + 1 < len) {
        uint8_t d = cls_tab[s[p + 1]];
        if (d & C_HI) return 0;
        if (!(d & (C_S | C_L | C_N))) q = p + 1;
    }
    if (!(cls_tab[s[q]] & (C_S | C_L | C_N))) {
        q++;
        while (q < len) {
            uint8_t d = cls_tab[s[q]];
            if (d & C_HI) return 0;
            if (d & (C_S | C_L | C_N)) break;
            q++;
        }
        while (q < len && (cls_tab[s[q]] & C_NL)) q++;
        return q - p;
    }
    /* c is ASCII whitespace here */
    size_t e = p;
    while (e < len && (cls_tab[s[e]] & C_S)) e++;
    if (e < len && (cls_tab[s[e]] & C_HI)) return 0; /* the run might go on with Unicode spaces */
    for (q = e; q > p; q--) /* 5: \s* backtracks to the last newline of the run */
        if (cls_tab[s[q - 1]] & C_NL) return q - p;
    if (e == len) return e - p;     /* 6 at the end of text */
    if (e - p >= 2) return e - 1 - p; /* 6: leave the last space for the next piece */
    return e - p;                   /* 7 */
letters:
    while (q < len) {
        uint8_t d = cls_tab[s[q]];
        if (d & C_L) {
            q++;
            continue;
        }
        if (d & C_HI) return 0;
        break;
    }
    return q - p;
}

/* ------------------------------------------------------------------------- PCRE2 */

/* The pattern PCRE2 compiles: glm_bpe_glm4_pattern with its classes spelled so that PCRE2 10.42
 * (Unicode 14 tables) puts every code point where the reference puts it. The reference is
 * tiktoken 0.14's Rust regex engine (Unicode 16 tables). Measured for every code point
 * U+0000..U+10FFFF (surrogates excluded) by tests/bench/unicode_classes.sh, which uses tiktoken
 * itself as the oracle (an Encoding whose pattern is just the class and whose vocabulary is the
 * 256 bytes encodes exactly the members). Differences found, and fixed here:
 *   - \p{L}: 9272 code points that are letters only since Unicode 15/16 (Kawi, Nag Mundari,
 *     Garay, Tulu-Tigalari, CJK extensions H and I, Egyptian hieroglyphs ext. A, ...):
 *     added as GLM_L_EXTRA.
 *   - \p{N}: 120 digits new in Unicode 15/16: added as GLM_N_EXTRA.
 *   - \s: PCRE2 counts U+180E MONGOLIAN VOWEL SEPARATOR as a space (its old Zs category); the
 *     Unicode White_Space property that Rust uses does not. Spelled [^\S\x{180E}], and the
 *     complement class of alternative 4 admits U+180E explicitly.
 *   (U+0085 NEXT LINE is White_Space in both.) After the fix the sweep reports 0 differences.
 * A future PCRE2 with newer tables still gives the same result: the extra ranges then merely
 * repeat members. */
#define GLM_L_EXTRA \
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}" \
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}" \
    "\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}" \
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}" \
    "\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}" \
    "\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}" \
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}" \
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}" \
    "\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define GLM_N_EXTRA \
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}" \
    "\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}" \
    "\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}" \
    "\\x{1E5F1}-\\x{1E5FA}"
#define L_ "[\\p{L}" GLM_L_EXTRA "]"
#define N_ "[\\p{N}" GLM_N_EXTRA "]"
#define S_ "[^\\S\\x{180E}]"
#define NOT_S_ "[\\S\\x{180E}]"
static const char pcre2_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}" GLM_L_EXTRA "\\p{N}" GLM_N_EXTRA "]?" L_ "+"
    "|" N_ "{1,3}"
    "| ?(?:[^\\s\\p{L}" GLM_L_EXTRA "\\p{N}" GLM_N_EXTRA "]|\\x{180E})+[\\r\\n]*"
    "|" S_ "*[\\r\\n]+"
    "|" S_ "+(?!" NOT_S_ ")"
    "|" S_ "+";

/* The pattern after substitution, for tests and tools that check the classes. */
const char *glm_bpe_pcre2_pattern(void) { return pcre2_pattern; }

static pthread_once_t cls_once = PTHREAD_ONCE_INIT;

static glm_status compile_regex(glm_bpe *b) {
    pthread_once(&cls_once, init_cls);
    int errc;
    PCRE2_SIZE erroff;
    b->re = pcre2_compile((PCRE2_SPTR)pcre2_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &errc, &erroff, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errc, msg, sizeof msg);
        return glm_err(GLM_ERR_INTERNAL, "cannot compile the GLM-4 split regex at offset %zu: %s",
                       (size_t)erroff, (const char *)msg);
    }
    b->jit = pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE) == 0;
    return GLM_OK;
}

/* One PCRE2 match at offset p; returns the piece length or 0 with the error set. */
static size_t regex_piece(const glm_bpe *b, const char *text, size_t len, size_t p,
                          pcre2_match_data **md, pcre2_match_context **mctx,
                          pcre2_jit_stack **jstack, glm_status *st) {
    if (!*md) {
        *md = pcre2_match_data_create(1, NULL);
        if (!*md) {
            *st = glm_err(GLM_ERR_NOMEM, "out of memory (regex match data)");
            return 0;
        }
    }
    for (;;) {
        int rc = b->jit ? pcre2_jit_match(b->re, (PCRE2_SPTR)text, len, p, 0, *md, *mctx)
                        : pcre2_match(b->re, (PCRE2_SPTR)text, len, p, PCRE2_NO_UTF_CHECK, *md, *mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !*jstack) {
            /* a very long run: give this call a JIT stack of up to 256 MiB and retry */
            *jstack = pcre2_jit_stack_create(64 * 1024, 256u * 1024 * 1024, NULL);
            *mctx = pcre2_match_context_create(NULL);
            if (!*jstack || !*mctx) {
                *st = glm_err(GLM_ERR_NOMEM, "out of memory (regex JIT stack)");
                return 0;
            }
            pcre2_jit_stack_assign(*mctx, NULL, *jstack);
            continue;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            *st = glm_err(GLM_ERR_INTERNAL, "split regex failed at byte offset %zu: %s", p,
                          (const char *)msg);
            return 0;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(*md);
        if (ov[0] != p || ov[1] <= ov[0]) {
            *st = glm_err(GLM_ERR_INTERNAL, "split regex skipped bytes at offset %zu (match %zu..%zu)",
                          p, (size_t)ov[0], (size_t)ov[1]);
            return 0;
        }
        return ov[1] - ov[0];
    }
}

size_t glm_bpe_piece_len(const glm_bpe *b, const char *text, size_t len, size_t pos, int use_fast) {
    if (pos >= len) return 0;
    if (use_fast) {
        size_t n = ascii_piece((const uint8_t *)text, len, pos);
        if (n) return n;
    }
    pcre2_match_data *md = NULL;
    pcre2_match_context *mctx = NULL;
    pcre2_jit_stack *jstack = NULL;
    glm_status st = GLM_OK;
    size_t n = regex_piece(b, text, len, pos, &md, &mctx, &jstack, &st);
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jstack) pcre2_jit_stack_free(jstack);
    return n;
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
        if (r == NONE_RANK) return glm_err(GLM_ERR_INTERNAL, "BPE produced a part that is not a token");
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

static inline glm_status encode_piece(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    uint32_t r = lookup_f(b, s, n, 0);
    if (r != NONE_RANK) {
        if (out->n == out->cap) GLM_TRY(glm_vec_reserve(*out, 1));
        out->v[out->n++] = r;
        return GLM_OK;
    }
    return n <= SMALL_PIECE ? merge_small(b, s, n, out) : merge_heap(b, s, n, out);
}

glm_status glm_bpe_encode(const glm_bpe *b, const char *text, size_t len, glm_u32vec *out) {
    const uint8_t *s = (const uint8_t *)text;
    pcre2_match_data *md = NULL;
    pcre2_match_context *mctx = NULL;
    pcre2_jit_stack *jstack = NULL;
    glm_status st = GLM_OK;
    size_t p = 0;
    /* room for about one id per 3 bytes up front, so most pushes do not check capacity twice */
    if (len > 64 && (st = glm_vec_reserve(*out, len / 3)) != GLM_OK) return st;
    while (p < len) {
        size_t n = ascii_piece(s, len, p);
        if (!n) {
            n = regex_piece(b, text, len, p, &md, &mctx, &jstack, &st);
            if (!n) break;
        }
        if ((st = encode_piece(b, s + p, n, out)) != GLM_OK) break;
        p += n;
    }
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jstack) pcre2_jit_stack_free(jstack);
    return st;
}
