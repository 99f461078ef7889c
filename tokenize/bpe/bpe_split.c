/* tokenize/bpe/bpe_split.c: the GLM-4 split regex (tiktoken's pat_str): which piece starts at a given
 * offset. tiktoken finds all matches of the pattern, leftmost-first, with a backtracking engine;
 * PCRE2 (JIT) here does the same, and two hand-written paths decide most pieces faster while
 * following the alternatives in the same order, exactly as the backtracking engine does:
 *   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)   2 [^\r\n\p{L}\p{N}]?\p{L}+   3 \p{N}{1,3}
 *   4 ' ?[^\s\p{L}\p{N}]+[\r\n]*'    5 \s*[\r\n]+   6 \s+(?!\S)   7 \s+
 *  - ascii_piece(): every character it examines is ASCII (English text, code), whose classes
 *    are fixed: \p{L} = [A-Za-z], \p{N} = [0-9], \s = [\t\n\v\f\r ].
 *  - bmp_piece(): characters of the Basic Multilingual Plane (Chinese, Japanese, Korean,
 *    Cyrillic, ...), classified by a 64 KiB table that is filled from the compiled PCRE2 classes
 *    themselves (so it agrees with the PCRE2 path by construction).
 * Both return 0 ("ask PCRE2") where they would have to look at a character outside their range,
 * and for an apostrophe followed by a non-ASCII character (case folding: 'ſ matches 's).
 * test_tokenizer compares them with PCRE2 at every offset of random ASCII and random BMP text. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "tokenize/bpe/bpe_internal.h"

const char glm_bpe_glm4_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

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

/* Alternative 1 of the split pattern at an apostrophe s[p] (p + 1 < len): the length of the
 * contraction ('s 't 'm 'd 'll 've 're, any case) starting there, 0 when there is none, or
 * SIZE_MAX when a non-ASCII byte is involved (case folding: s also folds with U+017F, so PCRE2
 * decides). */
static inline size_t contraction(const uint8_t *s, size_t len, size_t p) {
    uint8_t d = s[p + 1];
    if (d >= 0x80) return SIZE_MAX;
    d |= 0x20;
    if (d == 's' || d == 't' || d == 'm' || d == 'd') return 2;
    if ((d == 'r' || d == 'v' || d == 'l') && p + 2 < len) {
        uint8_t e = s[p + 2];
        if (e >= 0x80) return SIZE_MAX;
        e |= 0x20;
        if ((d == 'l' && e == 'l') || (d != 'l' && e == 'e')) return 3;
    }
    return 0;
}

/* Length of the regex piece starting at s[p] (p < len), decided without PCRE2 when every byte the
 * regex would examine is ASCII; 0 = "ask the next path". */
static inline size_t ascii_piece(const uint8_t *s, size_t len, size_t p) {
    uint8_t c = s[p], k = cls_tab[c];
    size_t q;
    if (k & C_HI) return 0;
    if (c == '\'' && p + 1 < len) { /* 1 */
        size_t n = contraction(s, len, p);
        if (n) return n == SIZE_MAX ? 0 : n;
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


/* ------------------------------------------------------------------------- BMP */

/* Classes of every BMP code point as the compiled pattern sees them: C_L = in L_, C_N = in N_,
 * C_S = in S_ (C_NL: \r and \n only). Surrogates (never in valid UTF-8) stay 0. */
static uint8_t cls_bmp[65536];
static int cls_ok; /* the tables were built */

/* The code point at s[i] (valid UTF-8) and its byte length; 0 for a 4-byte sequence. */
static inline int cp_at(const uint8_t *s, size_t i, uint32_t *cp) {
    uint8_t c = s[i];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F); return 2; }
    if (c < 0xF0) {
        *cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
        return 3;
    }
    return 0;
}

/* As ascii_piece, for text whose examined characters are all in the BMP (table classes); 0 when
 * it meets a 4-byte character or an apostrophe before a non-ASCII character. */
static size_t bmp_piece(const uint8_t *s, size_t len, size_t p) {
    uint32_t cp, cp2;
    int w = cp_at(s, p, &cp), w2;
    if (!w) return 0;
    uint8_t k = cls_bmp[cp];
    size_t q;
    if (cp == '\'' && p + 1 < len) { /* 1 */
        size_t n = contraction(s, len, p);
        if (n) return n == SIZE_MAX ? 0 : n;
    }
    if (k & C_L) { /* 2 without the optional prefix */
        q = p + (size_t)w;
        goto letters;
    }
    if (!(k & (C_N | C_NL)) && p + (size_t)w < len) { /* 2 with the prefix [^\r\n L N] */
        if (!(w2 = cp_at(s, p + (size_t)w, &cp2))) return 0;
        if (cls_bmp[cp2] & C_L) {
            q = p + (size_t)w + (size_t)w2;
            goto letters;
        }
    }
    if (k & C_N) { /* 3: one to three digits */
        q = p + (size_t)w;
        for (int n = 1; n < 3 && q < len; n++) {
            if (!(w2 = cp_at(s, q, &cp2))) return 0;
            if (!(cls_bmp[cp2] & C_N)) break;
            q += (size_t)w2;
        }
        return q - p;
    }
    /* 4: an optional ASCII space, then characters that are none of \s L N, then \r \n */
    q = p;
    if (cp == ' ' && p + 1 < len) {
        if (!(w2 = cp_at(s, p + 1, &cp2))) return 0;
        if (!(cls_bmp[cp2] & (C_S | C_L | C_N))) q = p + 1;
    }
    if (!(w2 = cp_at(s, q, &cp2))) return 0;
    if (!(cls_bmp[cp2] & (C_S | C_L | C_N))) {
        q += (size_t)w2;
        while (q < len) {
            if (!(w2 = cp_at(s, q, &cp2))) return 0;
            if (cls_bmp[cp2] & (C_S | C_L | C_N)) break;
            q += (size_t)w2;
        }
        while (q < len && (s[q] == '\r' || s[q] == '\n')) q++;
        return q - p;
    }
    /* the character at p is whitespace here: take the whole run */
    size_t e = p, last = p; /* last: where the run's last character starts */
    int nch = 0;
    while (e < len) {
        if (!(w2 = cp_at(s, e, &cp2))) return 0;
        if (!(cls_bmp[cp2] & C_S)) break;
        last = e;
        e += (size_t)w2;
        nch++;
    }
    for (q = e; q > p; q--) /* 5: \s* gives back characters until [\r\n]+ matches: the last newline */
        if (s[q - 1] == '\r' || s[q - 1] == '\n') return q - p;
    if (e == len) return e - p;      /* 6 at the end of the text */
    if (nch >= 2) return last - p;   /* 6: leave the last character for the next piece */
    return e - p;                    /* 7 */
letters:
    while (q < len) {
        if (!(w2 = cp_at(s, q, &cp2))) return 0;
        if (!(cls_bmp[cp2] & C_L)) break;
        q += (size_t)w2;
    }
    return q - p;
}

static pthread_once_t cls_once = PTHREAD_ONCE_INIT;

/* UTF-8 of code point cp (< 0x10000, not a surrogate) into u; returns its length. */
static size_t utf8_bmp(uint32_t cp, uint8_t *u) {
    if (cp < 0x80) {
        u[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), u[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
}

/* Fills cls_tab and cls_bmp: each BMP code point is matched against the pattern's own classes.
 * All the code points (surrogates left out) are written in order into one UTF-8 text, and each
 * class's runs ("class+") are found in it: a few thousand matches instead of one per code point
 * and class (which took a tenth of the tokenizer's load). */
static void init_cls(void) {
    for (int c = 0; c < 256; c++) cls_tab[c] = cls_of(c);
    static const char *const pats[3] = {L_ "+", N_ "+", S_ "+"};
    static const uint8_t bits[3] = {C_L, C_N, C_S};
    pcre2_code *re[3] = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    uint8_t *text = malloc(3 * 65536);
    uint16_t *cp_at_byte = malloc(3 * 65536 * sizeof *cp_at_byte); /* the code point starting at a byte */
    int ok = md && text && cp_at_byte;
    size_t n = 0;
    for (uint32_t cp = 0; cp < 65536 && ok; cp++) {
        cls_bmp[cp] = (cp == '\r' || cp == '\n') ? C_NL : 0;
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        cp_at_byte[n] = (uint16_t)cp;
        n += utf8_bmp(cp, text + n);
    }
    for (int k = 0; k < 3 && ok; k++) {
        int errc;
        PCRE2_SIZE erroff;
        re[k] = pcre2_compile((PCRE2_SPTR)pats[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &errc,
                              &erroff, NULL);
        ok = re[k] != NULL;
        if (!ok) break;
        pcre2_jit_compile(re[k], PCRE2_JIT_COMPLETE);
        for (size_t p = 0; p < n;) {
            int rc = pcre2_match(re[k], text, n, p, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc <= 0) {
                ok = 0;
                break;
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            for (size_t q = ov[0]; q < ov[1]; q += text[q] < 0x80 ? 1 : text[q] < 0xE0 ? 2 : 3)
                cls_bmp[cp_at_byte[q]] |= bits[k];
            p = ov[1];
        }
    }
    for (int k = 0; k < 3; k++)
        if (re[k]) pcre2_code_free(re[k]);
    if (md) pcre2_match_data_free(md);
    free(text);
    free(cp_at_byte);
    cls_ok = ok; /* otherwise bmp_piece is never used */
}

glm_status glm_bpe_split_init(glm_bpe *b) {
    pthread_once(&cls_once, init_cls);
    int errc;
    PCRE2_SIZE erroff;
    b->re = pcre2_compile((PCRE2_SPTR)pcre2_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &errc, &erroff, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errc, msg, sizeof msg);
        return glm_err(GLM_ERR_LIBRARY, "PCRE2 cannot compile the GLM-4 split regex at offset %zu: %s",
                       (size_t)erroff, (const char *)msg);
    }
    b->jit = pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE) == 0;
    return GLM_OK;
}

/* One PCRE2 match at offset p; returns the piece length or 0 with the error set. */
static size_t regex_piece(const glm_bpe *b, const char *text, size_t len, size_t p,
                          glm_bpe_splitter *sp, glm_status *st) {
    pcre2_match_data **md = &sp->md;
    pcre2_match_context **mctx = &sp->mctx;
    pcre2_jit_stack **jstack = &sp->jstack;
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
            *st = glm_err(GLM_ERR_LIBRARY, "PCRE2: the split regex failed at byte offset %zu: %s", p,
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

size_t glm_bpe_split_next(const glm_bpe *b, const char *text, size_t len, size_t p,
                          glm_bpe_splitter *sp, glm_status *st) {
    size_t n = ascii_piece((const uint8_t *)text, len, p);
    if (!n && cls_ok) n = bmp_piece((const uint8_t *)text, len, p);
    if (!n) n = regex_piece(b, text, len, p, sp, st);
    return n;
}

void glm_bpe_splitter_free(glm_bpe_splitter *sp) {
    if (sp->md) pcre2_match_data_free(sp->md);
    if (sp->mctx) pcre2_match_context_free(sp->mctx);
    if (sp->jstack) pcre2_jit_stack_free(sp->jstack);
    memset(sp, 0, sizeof *sp);
}

size_t glm_bpe_piece_len(const glm_bpe *b, const char *text, size_t len, size_t pos, int use_fast) {
    if (pos >= len) return 0;
    size_t n = 0;
    if (use_fast == 1) n = ascii_piece((const uint8_t *)text, len, pos);
    if (use_fast == 2 && cls_ok) n = bmp_piece((const uint8_t *)text, len, pos);
    if (use_fast == 3) {
        n = ascii_piece((const uint8_t *)text, len, pos);
        if (!n && cls_ok) n = bmp_piece((const uint8_t *)text, len, pos);
    }
    if (n) return n;
    glm_bpe_splitter sp = {0};
    glm_status st = GLM_OK;
    n = regex_piece(b, text, len, pos, &sp, &st);
    glm_bpe_splitter_free(&sp);
    return n;
}
