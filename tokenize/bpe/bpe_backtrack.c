/* tokenize/bpe/bpe_backtrack.c: a faster encoder for one regex piece that gives exactly tiktoken's
 * byte-pair merge result (the merge loop in bpe.c), after the "backtracking" encoder of GitHub's
 * rust-gems bpe crate (crates/bpe/README.md), generalised to vocabularies whose merges are not
 * in rank order. GLM-4's is not: Chinese tokens added at ranks ~98k+ are parts of older,
 * lower-ranked tokens (rank 23977 = b"\xa0" + "除", while "除" alone has rank 98928).
 *
 * Terms. BPE(x) = tiktoken's merge of the bytes x: start from single bytes, repeatedly merge the
 * adjacent pair whose concatenation is a token of lowest rank (leftmost on ties). A token t is
 * "reachable" when BPE(bytes(t)) = [t]. A pair (a, b) of tokens is "valid" when
 * BPE(bytes(a) + bytes(b)) = [a, b].
 *
 * Facts used. While no merge crosses the boundaries of a span of the text, the bytes inside it
 * evolve exactly as in BPE of the span alone (each merge is the lowest available pair, so also
 * the lowest inside the span). From that (the argument of the rust-gems README, Corollaries II
 * and III, which does not need rank order):
 *  1. A token formed inside a longer text is formed by the merges of BPE(its bytes), so an
 *     unreachable token never appears in a merge result (893 GLM-4 tokens, e.g. " 而", which
 *     only the whole-piece lookup in bpe.c produces).
 *  2. Reachable t_1..t_k is BPE(bytes(t_1) .. bytes(t_k)) iff every adjacent pair is valid. So the
 *     encoding of a text is the unique sequence of reachable tokens covering it with valid pairs,
 *     and a sequence with valid pairs covering a prefix of the text is the encoding of that prefix.
 *  3. Until a merge crosses the boundary between a and b, BPE(a + b) is a's own derivation and
 *     b's interleaved: at each state the lowest of a's next merge, b's next merge and the pair
 *     straddling the boundary (a's rightmost part + b's leftmost part) goes first, ties to the
 *     leftmost (a's merge, then the straddling pair, then b's).
 *
 * Encoding (backtracking): at position p with the tokens so far on a stack, take the longest
 * reachable token that is a prefix of the rest (a double-array trie); if it forms a valid pair
 * with the stack's top and does not end at a position known to be "dead", push it; else try the
 * next shorter reachable prefix token (the token nodes met on the same trie walk); when none is
 * left, mark p dead, pop, and go on with the popped token's next shorter prefix. By fact 2 the
 * stack is always the encoding of the text up to p, so a dead position stays dead and each
 * position's candidates are tried at most once: linear in the piece length times the number of
 * tokens starting at a position, never quadratic or exponential.
 *
 * Validity (fact 3) without re-running BPE: each reachable token's derivation is stored once at
 * load as states s_0 (all bytes) .. s_k (the token), each with m = the rank of its next merge
 * (NONE_RANK at s_k), rl and ll = the lengths of its rightmost and leftmost part. valid(a, b)
 * walks both derivations in merge order (a first when m_a <= m_b) and at each state looks up the
 * straddling string (a's last rl bytes + b's first ll bytes, contiguous in the text): the pair is
 * invalid as soon as it is a token of rank c with c < m_a and c <= m_b, the final state included
 * (a + b itself a token). A lower bound per state (the lowest rank of any token that extends the
 * rightmost part to the right, and the leftmost part to the left) skips the lookups that cannot
 * succeed.
 *
 * Pieces longer than BT_MAX_PIECE bytes, and tokens longer than that, are left to the merge loop
 * (part lengths then fit in a byte, so a state is 8 bytes). tests/tokenize/test_tokenizer.c
 * compares this encoder with the merge loop on every token, on random concatenations of tokens
 * and on the golden tiktoken cases. */
#include <stdlib.h>
#include <string.h>

#include "tokenize/bpe/bpe_internal.h"

typedef struct {
    int32_t base;  /* children of this node are cell[(base & BASE_MASK) + byte]; bit 31 (TOK_BIT):
                      the path to this node spells a reachable token */
    int32_t check; /* the parent node's index; -1 = free cell, -2 = the root */
    uint32_t rank; /* that token's rank (TOK_BIT set), so that one cache line serves the walk */
    uint32_t dv;   /* and its block in ps */
} dat_cell;

#define TOK_BIT ((int32_t)0x80000000u)
#define BASE_MASK 0x7fffffff

typedef struct {
    uint32_t dv;          /* its block in ps, NONE_RANK = not used here (unreachable or long) */
    uint32_t next_prefix; /* the longest reachable proper prefix token, NONE_RANK if none */
    uint32_t len;         /* bytes */
} bt_tok;

/* One state of a token's derivation, while it is recorded at load. */
typedef struct {
    uint32_t m;     /* rank of the next merge from this state, NONE_RANK at the last state */
    uint8_t rl, ll; /* byte lengths of the rightmost and the leftmost part in this state */
} deriv_ent;

/* A state of a token's derivation at which a merge across its right (or left) edge is possible
 * at all: some token that extends the edge part's bytes outwards ranks below the state's next
 * merge. Only these states can decide a pair (see the top); the others are not stored. Each
 * token has a block: a header (nr, nl set), nr entries for its right edge, nl for its left. */
typedef struct {
    uint32_t lo, hi; /* the state lasts from the merge at time lo to the merge at time hi, where a
                        merge's time is 1 + the highest rank merged so far in the token (0: the
                        start, UINT32_MAX: never); see valid_pair */
    uint32_t m;      /* rank of the next merge, NONE_RANK at the last state */
    uint8_t len;     /* byte length of the edge part (rightmost or leftmost) */
    uint8_t q;       /* lowest rank of a token extending the edge part outwards, >> bound_shift */
    uint8_t nr, nl;  /* header only */
} pstate;

struct glm_bpe_bt {
    dat_cell *cell;
    size_t ncell;     /* cells, with >= 256 free cells after the last used base */
    uint32_t max_len; /* the longest token in the trie (<= BT_MAX_PIECE), in bytes */
    uint32_t unreach_max; /* the longest unreachable token up to BT_MAX_PIECE bytes */
    int bound_shift;  /* pstate bounds are rank >> bound_shift */
    bt_tok *t;        /* [n_ranks] */
    pstate *ps;       /* the tokens' blocks */
    size_t nps;       /* entries of ps */
    int borrowed;     /* cell, t and ps point into a table cache (bpe_cache.c): not freed here */
};

uint32_t glm_bpe_bt_unreachable_max(const glm_bpe_bt *bt) { return bt->unreach_max; }

void glm_bpe_bt_free(glm_bpe_bt *bt) {
    if (!bt) return;
    if (!bt->borrowed) {
        free(bt->cell);
        free(bt->t);
        free(bt->ps);
    }
    free(bt);
}

void glm_bpe_bt_export(const glm_bpe_bt *bt, glm_bpe_bt_dims *d, glm_bpe_sect sect[GLM_BPE_BT_SECTS]) {
    *d = (glm_bpe_bt_dims){bt->ncell, bt->nps, bt->max_len, bt->unreach_max, (uint32_t)bt->bound_shift,
                           sizeof(dat_cell), sizeof(bt_tok), sizeof(pstate)};
    sect[0] = (glm_bpe_sect){bt->cell, bt->ncell * sizeof(dat_cell)};
    sect[1] = (glm_bpe_sect){bt->t, 0}; /* [n_ranks]: the caller knows n_ranks */
    sect[2] = (glm_bpe_sect){bt->ps, bt->nps * sizeof(pstate)};
}

glm_status glm_bpe_bt_import(const glm_bpe_bt_dims *d, uint32_t n_ranks, const void *cell, const void *t,
                             const void *ps, glm_bpe_bt **out) {
    if (d->cell_bytes != sizeof(dat_cell) || d->tok_bytes != sizeof(bt_tok) || d->pstate_bytes != sizeof(pstate) ||
        d->ncell < 257 || d->max_len > BT_MAX_PIECE || d->unreach_max > BT_MAX_PIECE || d->bound_shift > 31 ||
        ((uint64_t)(n_ranks - 1) >> d->bound_shift) >= 255 || d->nps == 0 || d->nps > UINT32_MAX)
        return glm_err(GLM_ERR_FORMAT, "backtracking tables of another layout");
    glm_bpe_bt *bt = calloc(1, sizeof *bt);
    if (!bt) return glm_err(GLM_ERR_NOMEM, "out of memory");
    *bt = (glm_bpe_bt){(dat_cell *)cell, (size_t)d->ncell, d->max_len, d->unreach_max, (int)d->bound_shift,
                       (bt_tok *)t, (pstate *)ps, (size_t)d->nps, 1};
    *out = bt;
    return GLM_OK;
}

/* ------------------------------------------------------------------------- derivations */

/* BPE(s[0..n)) by tiktoken's loop (n <= BT_MAX_PIECE), recording each state into out (n entries
 * at most: n - 1 merges + the last), and the rightmost and leftmost part's rank of each state
 * into rpart/lpart. start: n + 1, rank and part: n scratch slots.
 * Returns the number of parts left (1 = reachable); *k = the states recorded. */
static size_t derive(const glm_bpe *b, const uint8_t *s, size_t n, uint32_t *start, uint32_t *rank,
                     uint32_t *part, deriv_ent *out, uint32_t *rpart, uint32_t *lpart, size_t *k) {
    size_t m = n; /* parts */
    for (size_t i = 0; i <= n; i++) start[i] = (uint32_t)i;
    for (size_t i = 0; i < n; i++) part[i] = b->byte_rank[s[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = b->pair_rank[s[i] << 8 | s[i + 1]];
    size_t st = 0;
    for (;;) {
        uint32_t best = NONE_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) best = rank[i], bi = i; /* first minimum: leftmost on ties */
        out[st] = (deriv_ent){best, (uint8_t)(n - start[m - 1]), (uint8_t)(start[1] - start[0])};
        rpart[st] = part[m - 1];
        lpart[st] = part[0];
        st++;
        if (best == NONE_RANK) break;
        /* drop part bi + 1 (plain loops: a few elements, where a memmove call costs more) */
        for (size_t i = bi + 1; i < m; i++) start[i] = start[i + 1];
        for (size_t i = bi + 1; i + 2 < m; i++) rank[i] = rank[i + 1];
        part[bi] = best;
        for (size_t i = bi + 1; i + 1 < m; i++) part[i] = part[i + 1];
        m--;
        rank[bi] = bi + 1 < m ? lookup(b, s + start[bi], start[bi + 2] - start[bi]) : NONE_RANK;
        if (bi > 0) rank[bi - 1] = lookup(b, s + start[bi - 1], start[bi + 1] - start[bi - 1]);
    }
    *k = st;
    return m;
}

typedef struct {
    const uint8_t *p;
    uint32_t n, rank;
    uint64_t key; /* the first (or, sorting reversed, the last, reversed) 8 bytes, big-endian and
                     zero padded: most comparisons end here */
} tokref;

static void set_key(tokref *t, int rev) {
    uint32_t m = t->n < 8 ? t->n : 8; /* tokens are never empty */
    if (rev) /* the last m bytes, little endian, put the last byte on top */
        t->key = load_head(t->p + t->n - m, m) << (64 - 8 * m);
    else /* the first m bytes, zero padded, big endian */
        t->key = __builtin_bswap64(load_head(t->p, m));
}

static int cmp_tokref(const void *x, const void *y) {
    const tokref *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    uint32_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->p, b->p, n);
    if (c) return c;
    return a->n < b->n ? -1 : a->n > b->n;
}

static int cmp_tokref_rev(const void *x, const void *y) { /* by bytes read from the end */
    const tokref *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    uint32_t n = a->n < b->n ? a->n : b->n;
    for (uint32_t i = 1; i <= n; i++) {
        int d = (int)a->p[a->n - i] - (int)b->p[b->n - i];
        if (d) return d;
    }
    return a->n < b->n ? -1 : a->n > b->n;
}

/* Sorts t[0..n) by cmp (cmp_tokref or cmp_tokref_rev, keys set accordingly): a radix sort on the
 * 64-bit keys (4 passes of 16 bits), then the runs of equal keys by cmp. Three times faster than
 * qsort on the whole vocabulary, which matters at every tokenizer load. tmp: n scratch slots or
 * NULL (then qsort does it all). */
static void sort_tokrefs(tokref *t, size_t n, tokref *tmp, int (*cmp)(const void *, const void *)) {
    uint32_t *count = malloc(65536 * sizeof *count);
    if (!count || !tmp) {
        free(count);
        qsort(t, n, sizeof *t, cmp);
        return;
    }
    tokref *src = t, *dst = tmp;
    for (int pass = 0; pass < 4; pass++) {
        int shift = 16 * pass;
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++) count[src[i].key >> shift & 0xFFFF]++;
        uint32_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[src[i].key >> shift & 0xFFFF]++] = src[i];
        tokref *x = src;
        src = dst;
        dst = x;
    }
    free(count); /* after an even number of passes the result is back in t */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && t[j].key == t[i].key) j++;
        if (j - i > 1) qsort(t + i, j - i, sizeof *t, cmp);
        i = j;
    }
}

/* t[0..n) sorted so that every token's extensions directly follow it (by bytes, or by reversed
 * bytes when rev): low[r] = the lowest rank among the tokens of t that strictly extend token r
 * (at its end, or at its start when rev), NONE_RANK when none. stack: n scratch slots. */
static void extension_min(const tokref *t, size_t n, int rev, uint32_t *low, size_t *stack) {
    size_t ns = 0;
    for (size_t i = 0; i <= n; i++) {
        while (ns) {
            const tokref *top = &t[stack[ns - 1]];
            if (i < n && top->n < t[i].n &&
                !memcmp(top->p, t[i].p + (rev ? t[i].n - top->n : 0), top->n))
                break; /* t[i] extends the top */
            ns--;
            if (ns) {
                uint32_t sub = low[top->rank] < top->rank ? low[top->rank] : top->rank;
                uint32_t *par = &low[t[stack[ns - 1]].rank];
                if (sub < *par) *par = sub;
            }
        }
        if (i < n) {
            low[t[i].rank] = NONE_RANK;
            stack[ns++] = i;
        }
    }
}

/* ------------------------------------------------------------------------- double-array trie */

typedef struct {
    dat_cell *cell;
    size_t cap;        /* allocated cells */
    size_t used_end;   /* 1 + the highest used cell */
    size_t first_free; /* no free cell below this index (except 0 = root) */
} dat_builder;

static glm_status dat_grow(dat_builder *d, size_t need) {
    if (need <= d->cap) return GLM_OK;
    size_t cap = d->cap ? d->cap : 4096;
    while (cap < need) cap += cap / 2;
    dat_cell *c = realloc(d->cell, cap * sizeof *c);
    if (!c) return glm_err(GLM_ERR_NOMEM, "out of memory building the tokenizer's trie");
    d->cell = c;
    for (size_t i = d->cap; i < cap; i++) c[i] = (dat_cell){0, -1, NONE_RANK, NONE_RANK};
    d->cap = cap;
    return GLM_OK;
}

/* A base >= 1 such that cell[base + labels[i]] is free for every label (labels ascending). */
static glm_status dat_find_base(dat_builder *d, const uint8_t *labels, int nl, int32_t *base) {
    size_t p = d->first_free > (size_t)labels[0] + 1 ? d->first_free : (size_t)labels[0] + 1;
    for (size_t tries = 0;; p++) {
        GLM_TRY(dat_grow(d, p + 257));
        if (d->cell[p].check != -1) continue;
        size_t b = p - labels[0];
        int ok = 1;
        for (int i = 1; i < nl && ok; i++) ok = d->cell[b + labels[i]].check == -1;
        if (ok) {
            if (b + 256 > BASE_MASK) return glm_err(GLM_ERR_NOMEM, "tokenizer trie too large");
            *base = (int32_t)b;
            return GLM_OK;
        }
        if (++tries > 512 && p + 1 < d->used_end) p = d->used_end - 1; /* give up on the holes */
    }
}

typedef struct {
    int32_t node;
    uint32_t depth;
    uint32_t pre;  /* the longest reachable token that is a proper prefix of the path, NONE_RANK if none */
    size_t lo, hi; /* tokens[lo..hi) share the node's path as their first `depth` bytes */
} dat_item;

/* Builds the trie of the sorted tokens t[0..n) (bt->t[rank].dv already set): every token has its
 * path, so that a walk's depth bounds the tokens starting there; only reachable ones are marked
 * as candidates (TOK_BIT), each with its next_prefix (the deepest candidate above it on its path,
 * met on the way down). */
static glm_status dat_build(glm_bpe_bt *bt, const tokref *t, size_t n) {
    dat_builder d = {0};
    GLM_VEC(dat_item) stack = {0};
    glm_status st = dat_grow(&d, 1 << 16);
    if (st == GLM_OK) {
        d.cell[0].check = -2;
        d.first_free = 1;
        d.used_end = 1;
        st = glm_vec_push(stack, ((dat_item){0, 0, NONE_RANK, 0, n}));
    }
    while (st == GLM_OK && stack.n) {
        dat_item it = stack.v[--stack.n];
        size_t lo = it.lo;
        if (lo < it.hi && t[lo].n == it.depth) {
            if (bt->t[t[lo].rank].dv != NONE_RANK) { /* a reachable token: a candidate */
                d.cell[it.node].base |= TOK_BIT;
                d.cell[it.node].rank = t[lo].rank;
                d.cell[it.node].dv = bt->t[t[lo].rank].dv;
                bt->t[t[lo].rank].next_prefix = it.pre;
                it.pre = t[lo].rank;
            }
            lo++;
        }
        if (lo == it.hi) continue;
        uint8_t labels[256];
        size_t gstart[257];
        int nl = 0;
        for (size_t i = lo; i < it.hi; i++) {
            uint8_t c = t[i].p[it.depth];
            if (nl == 0 || labels[nl - 1] != c) {
                labels[nl] = c;
                gstart[nl++] = i;
            }
        }
        gstart[nl] = it.hi;
        int32_t base = 0;
        if ((st = dat_find_base(&d, labels, nl, &base)) != GLM_OK) break;
        d.cell[it.node].base |= base;
        for (int i = 0; i < nl; i++) {
            size_t c = (size_t)base + labels[i];
            d.cell[c].check = it.node;
            if (c + 1 > d.used_end) d.used_end = c + 1;
        }
        while (d.cell[d.first_free].check != -1) d.first_free++;
        for (int i = nl - 1; i >= 0 && st == GLM_OK; i--)
            st = glm_vec_push(stack, ((dat_item){base + labels[i], it.depth + 1, it.pre, gstart[i], gstart[i + 1]}));
    }
    glm_vec_free(stack);
    if (st == GLM_OK) st = dat_grow(&d, d.used_end + 257); /* a transition never reads past the end */
    if (st != GLM_OK) {
        free(d.cell);
        return st;
    }
    bt->cell = d.cell;
    bt->ncell = d.cap;
    return GLM_OK;
}

/* A candidate token at the current position: a token node met on the trie walk. */
typedef struct {
    uint32_t rank, dv, len;
} cand;

#define MAX_CANDS 32

/* Walks the trie along s[0..n) (n >= 1) and stores the reachable tokens that are prefixes of it
 * into cs, shortest first: all of them, or the longest MAX_CANDS with *dropped = 1 (the shorter
 * ones are then reached through next_prefix). Every single byte is a token, so the count is >= 1.
 * *depth: how many bytes of s the trie path covers (no token starting at s is longer). Prefetches
 * each candidate's block, which the validity check reads next. */
static inline int walk(const glm_bpe_bt *bt, const uint8_t *s, size_t n, cand *cs, int *dropped,
                       uint8_t *depth) {
    const dat_cell *c = bt->cell;
    int32_t node = 0, base = c[0].base;
    int nc = 0;
    *dropped = 0;
    size_t lim = n < bt->max_len ? n : bt->max_len, i = 0;
    for (; i < lim; i++) {
        int32_t nx = (base & BASE_MASK) + s[i];
        if (c[nx].check != node) break;
        node = nx;
        base = c[nx].base;
        /* branch-free: whether a node ends a token is hard to predict */
        int tok = (uint32_t)base >> 31;
        uint32_t dv = c[nx].dv & (0u - (uint32_t)tok); /* 0 when not a token, without a branch */
        cs[nc] = (cand){c[nx].rank, dv, (uint32_t)(i + 1)};
        __builtin_prefetch(bt->ps + dv);
        __builtin_prefetch(bt->ps + dv + 4);
        nc += tok;
        if (nc == MAX_CANDS) {
            memmove(cs, cs + 1, (MAX_CANDS - 1) * sizeof *cs);
            nc--;
            *dropped = 1;
        }
    }
    *depth = (uint8_t)i;
    return nc;
}

/* ------------------------------------------------------------------------- building */

/* Appends token r's block to bt->ps (growing it as needed) from its derivation d[0..k) with the
 * rightmost and leftmost part of each state in rpart/lpart; ext/pre: the lowest rank of a token
 * extending a token at its end / at its start (extension_min). Sets bt->t[r].dv. */
static glm_status add_block(glm_bpe_bt *bt, size_t *np, size_t *cap, uint32_t r, const deriv_ent *d,
                            const uint32_t *rpart, const uint32_t *lpart, size_t k, const uint32_t *ext,
                            const uint32_t *pre) {
    if (*np + 2 * k + 2 > *cap) { /* the loop below writes one entry past the last it keeps */
        size_t c = *cap + *cap / 2 + 2 * k + 2;
        pstate *ps = realloc(bt->ps, c * sizeof *ps);
        if (!ps) return glm_err(GLM_ERR_NOMEM, "out of memory building the tokenizer's tables");
        bt->ps = ps;
        *cap = c;
    }
    pstate *h = &bt->ps[*np];
    bt->t[r].dv = (uint32_t)*np;
    *h = (pstate){0};
    size_t p = *np + 1;
    for (int side = 0; side < 2; side++) {
        uint32_t lo = 0, hi = 0;
        size_t p0 = p;
        for (size_t j = 0; j < k; j++) {
            lo = hi;
            hi = d[j].m == NONE_RANK ? UINT32_MAX : (d[j].m + 1 > hi ? d[j].m + 1 : hi);
            uint32_t bound = side == 0 ? ext[rpart[j]] : pre[lpart[j]];
            /* kept or not is hard to predict (about half are): written always, counted when
             * kept, without a branch */
            uint32_t keep = (bound != NONE_RANK) & (side == 0 ? bound < d[j].m : bound <= d[j].m);
            bt->ps[p] = (pstate){lo, hi, d[j].m, side == 0 ? d[j].rl : d[j].ll,
                                 (uint8_t)(bound >> bt->bound_shift), 0, 0};
            p += keep;
        }
        if (side == 0) h->nr = (uint8_t)(p - p0);
        else h->nl = (uint8_t)(p - p0);
    }
    *np = p;
    return GLM_OK;
}

glm_status glm_bpe_bt_build(glm_bpe *b) {
    glm_status st = GLM_OK;
    glm_bpe_bt *bt = calloc(1, sizeof *bt);
    size_t n = b->n_ranks, n_all = 0, np = 0, cap = 0;
    uint32_t *ext = malloc(n * sizeof *ext), *pre = malloc(n * sizeof *pre);
    size_t *scratch = malloc(n * sizeof *scratch);
    tokref *all = malloc(n * sizeof *all), *tmp = malloc(n * sizeof *tmp);
    if (bt) bt->t = malloc(n * sizeof *bt->t);
    if (!bt || !ext || !pre || !scratch || !all || !tmp || !bt->t) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory building the tokenizer's tables");
        goto done;
    }
    for (uint32_t r = 0; r < b->n_ranks; r++) {
        bt->t[r] = (bt_tok){NONE_RANK, NONE_RANK, b->len[r]};
        if (b->off[r] == NONE_RANK || b->len[r] > BT_MAX_PIECE) continue;
        all[n_all++] = (tokref){(const uint8_t *)b->blob + b->off[r], b->len[r], r, 0};
        if (b->len[r] > bt->max_len) bt->max_len = b->len[r];
    }
    while (((size_t)(b->n_ranks - 1) >> bt->bound_shift) >= 255) bt->bound_shift++;
    /* The lowest rank of a token extending each token, at its start and at its end. Only
     * reachable tokens can be formed across an edge (fact 1); taking all of them gives a bound
     * that is as low or lower: still a bound, and known before the derivations. */
    for (size_t i = 0; i < n_all; i++) set_key(&all[i], 1);
    sort_tokrefs(all, n_all, tmp, cmp_tokref_rev);
    extension_min(all, n_all, 1, pre, scratch);
    for (size_t i = 0; i < n_all; i++) set_key(&all[i], 0);
    sort_tokrefs(all, n_all, tmp, cmp_tokref); /* also the order the trie is built in */
    extension_min(all, n_all, 0, ext, scratch);
    free(scratch);
    free(tmp);
    scratch = NULL;
    tmp = NULL;
    cap = n * 8; /* about what GLM-4 needs; add_block grows it */
    if (!(bt->ps = malloc(cap * sizeof *bt->ps))) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory building the tokenizer's tables");
        goto done;
    }
    /* Each reachable token's derivation and its block (the states where its right edge, or its
     * left edge, can be crossed), in rank order. */
    for (uint32_t r = 0; r < b->n_ranks; r++) {
        if (b->off[r] == NONE_RANK || b->len[r] > BT_MAX_PIECE) continue;
        uint32_t start[BT_MAX_PIECE + 1], rank[BT_MAX_PIECE + 1], part[BT_MAX_PIECE + 1];
        uint32_t rpart[BT_MAX_PIECE], lpart[BT_MAX_PIECE];
        deriv_ent d[BT_MAX_PIECE];
        size_t k, len = b->len[r];
        if (derive(b, (const uint8_t *)b->blob + b->off[r], len, start, rank, part, d, rpart, lpart, &k) != 1) {
            if (len > bt->unreach_max) bt->unreach_max = (uint32_t)len;
            continue;
        }
        if ((st = add_block(bt, &np, &cap, r, d, rpart, lpart, k, ext, pre)) != GLM_OK) goto done;
    }
    pstate *fit = realloc(bt->ps, (np ? np : 1) * sizeof *bt->ps); /* give back what was not used */
    if (fit) bt->ps = fit;
    bt->nps = np ? np : 1;
    if ((st = dat_build(bt, all, n_all)) != GLM_OK) goto done; /* and each token's next_prefix */
    b->bt = bt;
    bt = NULL;
done:
    free(ext);
    free(pre);
    free(scratch);
    free(all);
    free(tmp);
    glm_bpe_bt_free(bt);
    return st;
}

/* ------------------------------------------------------------------------- encoding */

/* Could a's state r and c's state l both be current, with a straddling token that ranks low
 * enough (a lower bound says) and is not longer than the walk at a's start went? 0/1 without
 * branches. */
static inline int may_cross(const pstate *r, const pstate *l, int sh, uint32_t a_len, uint32_t a_depth) {
    uint32_t q = (uint32_t)(r->q > l->q ? r->q : l->q) << sh;
    return (r->lo <= l->hi) & (l->lo < r->hi) & (q < r->m) & (q <= l->m) &
           ((r->len != a_len) | (a_len + l->len <= a_depth));
}

/* Is the straddling string of states r and l (a's rightmost part + c's leftmost part around
 * `at`) a token that merges before either side's next merge? */
static inline int crosses(const glm_bpe *b, const pstate *r, const pstate *l, const uint8_t *at) {
    uint32_t x = lookup(b, at - r->len, (size_t)r->len + l->len);
    return x < r->m && x <= l->m;
}

/* Is (a, c) a valid pair, a's bytes ending and c's starting at `at` in the text? a_dv, c_dv: their
 * blocks in ps; a_len: a's length; a_depth: the depth of the trie walk at a's start (no token
 * starting there is longer).
 * Fact 3 runs a's and c's derivations side by side, always the side with the lower next merge
 * first (a on ties). That order is the same as ordering the merges by their "time", the highest
 * rank merged so far in their own token (a token's merges that come after a higher one follow
 * it at once): a's state i and c's state j are both current at some point iff
 * lo_a <= hi_c and lo_c < hi_a. There the straddling string, a's rightmost part + c's leftmost
 * part, merges first iff it is a token of rank x < m_a and x <= m_c. Only states where that is
 * possible at all are stored, and a pair needs a lookup only where the bounds allow it. */
static inline int valid_pair(const glm_bpe *b, uint32_t a_dv, uint32_t a_len, uint32_t a_depth,
                             uint32_t c_dv, const uint8_t *at) {
    const glm_bpe_bt *bt = b->bt;
    const pstate *A = bt->ps + a_dv, *C = bt->ps + c_dv;
    const pstate *r0 = A + 1, *r1 = r0 + A->nr, *l0 = C + 1 + C->nr, *l1 = l0 + C->nl;
    const int sh = bt->bound_shift;
    size_t nl = (size_t)(l1 - l0);
    if ((size_t)(r1 - r0) * nl > 64) { /* long tokens: pair by pair */
        for (const pstate *r = r0; r < r1; r++)
            for (const pstate *l = l0; l < l1; l++)
                if (may_cross(r, l, sh, a_len, a_depth) && crosses(b, r, l, at)) return 0;
        return 1;
    }
    /* First which (r, l) need a lookup, without branches (hard to predict, mostly none), then
     * the lookups. */
    uint64_t need = 0;
    unsigned k = 0;
    for (const pstate *r = r0; r < r1; r++)
        for (const pstate *l = l0; l < l1; l++, k++) need |= (uint64_t)may_cross(r, l, sh, a_len, a_depth) << k;
    while (need) {
        unsigned i = (unsigned)__builtin_ctzll(need);
        need &= need - 1;
        if (crosses(b, r0 + i / nl, l0 + i % nl, at)) return 0;
    }
    return 1;
}

glm_status glm_bpe_bt_encode(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    const glm_bpe_bt *bt = b->bt;
    if (n > BT_MAX_PIECE) return glm_err(GLM_ERR_ARG, "glm_bpe_bt_encode: a piece over %d bytes", BT_MAX_PIECE);
    GLM_TRY(glm_vec_reserve(*out, n));
    uint32_t *stk = out->v + out->n; /* the stack of tokens is the output itself */
    size_t ns = 0, pos = 0;
    uint8_t dead[BT_MAX_PIECE + 1], depth[BT_MAX_PIECE + 1]; /* depth[p]: of the walk at p */
    memset(dead, 0, n + 1);
    cand cs[MAX_CANDS], t;
    int dropped, nc = walk(bt, s, n, cs, &dropped, &depth[0]);
    int from_walk = 1; /* t came from the walk (shorter candidates in cs), else from next_prefix */
    uint32_t top_dv = 0, top_len = 0;
    t = cs[--nc];
    while (pos < n) {
        while (dead[pos + t.len] ||
               (ns && !valid_pair(b, top_dv, top_len, depth[pos - top_len], t.dv, s + pos))) {
            if (from_walk && nc > 0) { /* the next shorter candidate at pos */
                t = cs[--nc];
                continue;
            }
            uint32_t next = !from_walk || dropped ? bt->t[t.rank].next_prefix : NONE_RANK;
            while (next == NONE_RANK) { /* none left: pos is dead, back up one token */
                GLM_ASSERT(ns > 0, "BPE found no encoding for a %zu-byte piece", n);
                dead[pos] = 1;
                uint32_t last = stk[--ns];
                pos -= bt->t[last].len;
                top_dv = ns ? bt->t[stk[ns - 1]].dv : 0;
                top_len = ns ? bt->t[stk[ns - 1]].len : 0;
                next = bt->t[last].next_prefix;
            }
            t = (cand){next, bt->t[next].dv, bt->t[next].len};
            from_walk = 0;
        }
        stk[ns++] = t.rank;
        top_dv = t.dv;
        top_len = t.len;
        pos += t.len;
        if (pos < n) {
            nc = walk(bt, s + pos, n - pos, cs, &dropped, &depth[pos]);
            t = cs[--nc];
            from_walk = 1;
        }
    }
    out->n += ns;
    return GLM_OK;
}
