/* tests/tokenize/test_tokenizer.c: the GLM-4 tiktoken tokenizer against tiktoken's output
 * (tests/fixtures/tokenizer_golden.jsonl), round trips, a 1 MB single-piece run (no
 * quadratic blow-up), a reference merge for long pieces, the backtracking encoder against the merge
 * loop (every token, random concatenations of tokens), the hand-written split paths against PCRE2,
 * invalid input, concurrent use.
 * usage: test_tokenizer [golden.jsonl]   (default $GLM_FIXTURES/tokenizer_golden.jsonl) */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fileio.h"
#include "tests/check.h"
#include "tokenize/bpe/bpe.h"
#include "tokenize/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    char *text;
    size_t len;
    uint32_t *ids;
    size_t n;
} gcase;

static GLM_VEC(gcase) cases;

static void load_golden(const char *path) {
    char *data;
    size_t len;
    glm_status st = glm_read_file(path, &data, &len);
    CHECK(st == GLM_OK, "read %s: %s", path, glm_errmsg());
    if (st) return;
    size_t line = 0;
    for (char *p = data; p < data + len;) {
        char *nl = memchr(p, '\n', (size_t)(data + len - p));
        size_t ll = nl ? (size_t)(nl - p) : (size_t)(data + len - p);
        line++;
        if (ll) {
            json_error_t je;
            json_t *j = json_loadb(p, ll, JSON_ALLOW_NUL, &je);
            CHECK(j, "%s:%zu: %s", path, line, je.text);
            if (j) {
                json_t *t = json_object_get(j, "text"), *ids = json_object_get(j, "ids");
                gcase c = {0};
                c.len = json_string_length(t);
                c.text = malloc(c.len + 1);
                memcpy(c.text, json_string_value(t), c.len + 1);
                c.n = json_array_size(ids);
                c.ids = malloc((c.n + 1) * sizeof *c.ids);
                for (size_t i = 0; i < c.n; i++) c.ids[i] = (uint32_t)json_integer_value(json_array_get(ids, i));
                glm_vec_push(cases, c);
                json_decref(j);
            }
        }
        p += ll + 1;
    }
    free(data);
}

/* tiktoken's merge loop written independently of bpe.c (O(n^2), reference only). */
static void ref_merge(const glm_bpe *b, const uint8_t *s, size_t n, glm_u32vec *out) {
    size_t *start = malloc((n + 1) * sizeof *start), m = n + 1;
    for (size_t i = 0; i <= n; i++) start[i] = i;
    for (;;) {
        int64_t best = -1;
        size_t bi = 0;
        for (size_t i = 0; i + 2 < m; i++) {
            int64_t r = glm_bpe_rank(b, s + start[i], start[i + 2] - start[i]);
            if (r >= 0 && (best < 0 || r < best)) best = r, bi = i;
        }
        if (best < 0) break;
        memmove(start + bi + 1, start + bi + 2, (m - bi - 2) * sizeof *start);
        m--;
    }
    for (size_t i = 0; i + 1 < m; i++) glm_vec_push(*out, (uint32_t)glm_bpe_rank(b, s + start[i], start[i + 1] - start[i]));
    free(start);
}

static uint64_t lcg = 0x1234567;
static uint32_t rnd(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg >> 33);
}
static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A text of about `bytes` bytes: Chinese characters drawn from the 600 most common-looking
 * ones of the CJK block start (so merges happen), no spaces: one regex piece. */
static char *cjk_text(size_t bytes, size_t *len) {
    char *t = malloc(bytes + 8);
    size_t n = 0;
    while (n + 3 <= bytes) n += put_utf8(t + n, 0x4E00 + rnd() % 600);
    t[n] = 0;
    *len = n;
    return t;
}

static int roundtrip(const glm_tokenizer *tok, const char *text, size_t len, const glm_u32vec *ids) {
    glm_charvec dec = {0};
    int ok = glm_tokenizer_decode(tok, ids->v, ids->n, &dec) == GLM_OK && dec.n == len &&
             memcmp(dec.v, text, len) == 0;
    glm_vec_free(dec);
    return ok;
}

typedef struct {
    const glm_tokenizer *tok;
    size_t from, step;
    int bad;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    glm_u32vec ids = {0};
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = w->from; i < cases.n; i += w->step) {
            ids.n = 0;
            gcase *c = &cases.v[i];
            if (glm_tokenizer_encode(w->tok, c->text, c->len, &ids) != GLM_OK || ids.n != c->n ||
                (c->n && memcmp(ids.v, c->ids, c->n * sizeof *c->ids) != 0))
                w->bad++;
        }
    glm_vec_free(ids);
    return NULL;
}

int main(int argc, char **argv) {
    const char *data_dir = test_data_dir();
    char dir[4096], golden[4096];
    snprintf(dir, sizeof dir, "%s/glm4-tokenizer", data_dir);
    if (argc > 1) snprintf(golden, sizeof golden, "%s", argv[1]);
    else snprintf(golden, sizeof golden, "%s/tokenizer_golden.jsonl", data_dir);

    glm_tokenizer *tok = NULL;
    double t0 = now_s();
    glm_status st = glm_tokenizer_load(dir, &tok);
    CHECK(st == GLM_OK, "load %s: %s", dir, glm_errmsg());
    if (st) return check_summary("test_tokenizer");
    printf("load: %.3f s\n", now_s() - t0);

    /* --- metadata */
    CHECK(strcmp(glm_tokenizer_kind(tok), "tiktoken") == 0, "kind %s", glm_tokenizer_kind(tok));
    CHECK(glm_tokenizer_vocab_size(tok) == 151343, "vocab %u", glm_tokenizer_vocab_size(tok));
    CHECK(glm_tokenizer_n_special(tok) == 14, "n_special %zu", glm_tokenizer_n_special(tok));
    static const struct { const char *s; int64_t id; } sp[] = {
        {"<|endoftext|>", 151329}, {"[gMASK]", 151331}, {"<sop>", 151333}, {"<|system|>", 151335},
        {"<|user|>", 151336}, {"<|assistant|>", 151337}, {"<|observation|>", 151338}, {"<|user|", -1}, {"", -1}};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
        int64_t id = glm_tokenizer_special_id(tok, sp[i].s, strlen(sp[i].s));
        CHECK(id == sp[i].id, "special %s: %lld, want %lld", sp[i].s, (long long)id, (long long)sp[i].id);
    }
    uint32_t id0;
    const char *s0 = glm_tokenizer_special(tok, 0, &id0);
    CHECK(s0 && strcmp(s0, "<|endoftext|>") == 0 && id0 == 151329, "special 0: %s %u", s0 ? s0 : "NULL", id0);
    CHECK(glm_tokenizer_special(tok, 14, NULL) == NULL, "special 14 exists");
    CHECK(glm_tokenizer_chat_template(tok) && strstr(glm_tokenizer_chat_template(tok), "[gMASK]<sop>"),
          "chat template missing");
    CHECK(strstr(glm_tokenizer_path(tok), "tokenizer.model") != NULL, "path %s", glm_tokenizer_path(tok));
    glm_tokenizer *tok2 = NULL;
    char file[4200];
    snprintf(file, sizeof file, "%s/tokenizer.model", dir);
    CHECK(glm_tokenizer_load(file, &tok2) == GLM_OK, "load by file: %s", glm_errmsg());
    if (tok2) {
        CHECK(glm_tokenizer_fingerprint(tok2) == glm_tokenizer_fingerprint(tok), "fingerprint differs");
        CHECK(glm_tokenizer_n_special(tok2) == 14, "config not found next to the file");
        glm_tokenizer_free(tok2);
    }
    printf("fingerprint: %016llx\n", (unsigned long long)glm_tokenizer_fingerprint(tok));

    /* --- golden cases */
    load_golden(golden);
    CHECK(cases.n >= 40, "only %zu golden cases", cases.n);
    size_t bad_enc = 0, bad_dec = 0, bytes = 0;
    glm_u32vec ids = {0};
    t0 = now_s();
    for (size_t i = 0; i < cases.n; i++) {
        gcase *c = &cases.v[i];
        ids.n = 0;
        st = glm_tokenizer_encode(tok, c->text, c->len, &ids);
        bytes += c->len;
        if (st != GLM_OK || ids.n != c->n || (c->n && memcmp(ids.v, c->ids, c->n * sizeof *c->ids) != 0)) {
            if (bad_enc++ < 5) {
                fprintf(stderr, "golden case %zu (%zu bytes) \"%.80s\": got %zu ids, want %zu\n", i + 1, c->len,
                        c->text, ids.n, c->n);
                for (size_t k = 0; k < ids.n || k < c->n; k++) {
                    if (k < ids.n && k < c->n && ids.v[k] == c->ids[k]) continue;
                    fprintf(stderr, "  first difference at %zu: got %d want %d\n", k,
                            k < ids.n ? (int)ids.v[k] : -1, k < c->n ? (int)c->ids[k] : -1);
                    break;
                }
            }
        }
        glm_charvec dec = {0};
        if (glm_tokenizer_decode(tok, c->ids, c->n, &dec) != GLM_OK || dec.n != c->len ||
            (c->len && memcmp(dec.v, c->text, c->len) != 0))
            bad_dec++;
        glm_vec_free(dec);
    }
    double dt = now_s() - t0;
    CHECK(bad_enc == 0, "%zu of %zu golden cases encode differently", bad_enc, cases.n);
    CHECK(bad_dec == 0, "%zu of %zu golden cases do not decode to their text", bad_dec, cases.n);
    printf("golden: %zu cases, %zu bytes, %zu encode mismatches, %zu decode mismatches (%.1f MB/s incl. decode)\n",
           cases.n, bytes, bad_enc, bad_dec, bytes / dt / 1e6);

    /* --- special strings are plain text */
    ids.n = 0;
    CHECK(glm_tokenizer_encode(tok, "<|user|>hi[gMASK]", 17, &ids) == GLM_OK, "%s", glm_errmsg());
    for (size_t i = 0; i < ids.n; i++) CHECK(ids.v[i] < 151329, "special id %u from plain text", ids.v[i]);
    uint32_t spids[2] = {151336, 151331};
    glm_charvec dec = {0};
    CHECK(glm_tokenizer_decode(tok, spids, 2, &dec) == GLM_OK && dec.n == 15 && memcmp(dec.v, "<|user|>[gMASK]", 15) == 0,
          "special decode");
    glm_vec_free(dec);

    /* --- long pieces: heap merge vs the reference loop, on 100..400-byte CJK pieces */
    const glm_bpe *bpe = NULL;
    glm_bpe *own = NULL;
    {
        char *data;
        size_t len;
        if (glm_read_file(file, &data, &len) == GLM_OK) {
            CHECK(glm_bpe_load(file, data, len, &own) == GLM_OK, "%s", glm_errmsg());
            free(data);
            bpe = own;
        }
    }
    for (int k = 0; bpe && k < 30; k++) {
        size_t len;
        char *t = cjk_text(100 + rnd() % 300, &len);
        glm_u32vec a = {0}, r = {0};
        CHECK(glm_tokenizer_encode(tok, t, len, &a) == GLM_OK, "%s", glm_errmsg());
        ref_merge(bpe, (const uint8_t *)t, len, &r);
        CHECK(a.n == r.n && memcmp(a.v, r.v, a.n * 4) == 0, "heap merge differs from the reference on %zu bytes", len);
        glm_vec_free(a);
        glm_vec_free(r);
        free(t);
    }
    /* --- the backtracking encoder (bpe_backtrack.c) against the merge loop (bpe.c): the bytes of
     * every token up to 255 bytes (reachable ones merge back to themselves, the others to what the
     * loop says), then random concatenations of tokens: any tokens, CJK-heavy ones, repeats of
     * one token, and random bytes */
    if (bpe) {
        size_t checked = 0, differ = 0;
        glm_u32vec a = {0}, r = {0};
        uint32_t nr = glm_bpe_n_ranks(bpe);
        GLM_VEC(uint32_t) cjk = {0};
        for (uint32_t id = 0; id < nr; id++) {
            const char *tb;
            size_t tl;
            if (!glm_bpe_token(bpe, id, &tb, &tl) || tl > 255) continue;
            for (size_t i = 0; i + 2 < tl; i++)
                if ((uint8_t)tb[i] >= 0xE3 && (uint8_t)tb[i] <= 0xE9) {
                    glm_vec_push(cjk, id);
                    break;
                }
            a.n = r.n = 0;
            st = glm_bpe_merge(bpe, tb, tl, 1, &a);
            CHECK(st == GLM_OK, "backtracking on token %u: %s", id, glm_errmsg());
            glm_bpe_merge(bpe, tb, tl, 0, &r);
            checked++;
            if ((a.n != r.n || memcmp(a.v, r.v, a.n * 4)) && differ++ < 5)
                fprintf(stderr, "token %u: backtracking gives %zu ids, the merge loop %zu\n", id, a.n, r.n);
        }
        char buf[256];
        for (int k = 0; k < 60000; k++) {
            size_t len = 0;
            int kind = k % 4;
            uint32_t rep = rnd() % nr;
            while (len < 255) {
                const char *tb = NULL;
                size_t tl = 0;
                if (kind == 3) {
                    buf[len++] = (char)(rnd() % 256);
                    if (rnd() % 16 == 0) break;
                    continue;
                }
                uint32_t id = kind == 0 ? rnd() % nr : kind == 1 ? cjk.v[rnd() % cjk.n] : rep;
                if (!glm_bpe_token(bpe, id, &tb, &tl) || len + tl > 255) break;
                memcpy(buf + len, tb, tl);
                len += tl;
                if (rnd() % 8 == 0) break;
            }
            if (len == 0) continue;
            a.n = r.n = 0;
            st = glm_bpe_merge(bpe, buf, len, 1, &a);
            CHECK(st == GLM_OK, "backtracking: %s", glm_errmsg());
            glm_bpe_merge(bpe, buf, len, 0, &r);
            checked++;
            if ((a.n != r.n || memcmp(a.v, r.v, a.n * 4)) && differ++ < 5)
                fprintf(stderr, "random case %d (kind %d, %zu bytes): backtracking gives %zu ids, the merge "
                        "loop %zu\n", k, kind, len, a.n, r.n);
        }
        CHECK(differ == 0, "the backtracking encoder differs from the merge loop in %zu of %zu cases", differ,
              checked);
        printf("backtracking encoder = merge loop on %zu token and random cases\n", checked);
        glm_vec_free(a);
        glm_vec_free(r);
        glm_vec_free(cjk);
    }
    /* --- the ASCII fast path against PCRE2 at every position of random ASCII texts */
    if (bpe) {
        static const char alpha[] = " \t\n\r\v\f'sStTlLrReEvVdDmMx09,.!-\x01\x1f";
        size_t checked = 0, differ = 0;
        char t[64];
        for (int k = 0; k < 20000; k++) {
            size_t len = 1 + rnd() % 24;
            for (size_t i = 0; i < len; i++) t[i] = alpha[rnd() % (sizeof alpha - 1)];
            for (size_t p = 0; p < len; p++) {
                size_t f = glm_bpe_piece_len(bpe, t, len, p, 1), r = glm_bpe_piece_len(bpe, t, len, p, 0);
                checked++;
                if (f != r && differ++ < 5) fprintf(stderr, "fast path %zu vs PCRE2 %zu at %zu of \"%.*s\"\n", f, r, p, (int)len, t);
            }
        }
        CHECK(differ == 0, "ASCII fast path differs from PCRE2 at %zu of %zu positions", differ, checked);
        printf("ASCII fast path = PCRE2 at %zu random positions\n", checked);
    }

    /* --- the BMP fast path (and both paths together) against PCRE2 at every position of random
     * texts drawn from letters, digits, spaces and punctuation of many scripts: CJK ideographs
     * and punctuation, fullwidth forms, kana (U+30FC is a letter), Hangul, Cyrillic, Greek,
     * Latin-1, Arabic-Indic digits, Roman numeral U+2160 (a number), combining marks (neither
     * letter nor number), the Unicode spaces and U+180E, emoji (4 bytes: left to PCRE2), the
     * contraction apostrophe and U+017F (folds with s), CR LF */
    if (bpe) {
        static const uint32_t cps[] = {
            0x4E00, 0x4E2D, 0x6587, 0x9FA5, 0x3001, 0x3002, 0xFF0C, 0xFF1A, 0x201C, 0x201D, 0xFF08,
            0x300A, 0x3005, 0x3007, 0xFF21, 0xFF41, 0xFF11, 0x3042, 0x30AB, 0x30FC, 0xAC00, 0x0416,
            0x03B1, 0x00E9, 0x00B7, 0x0663, 0x2160, 0x0301, 0x3000, 0x00A0, 0x2003, 0x0085, 0x180E,
            0x2028, 0x1F600, 0x20000, 0x017F, '\'', 's', 'T', 'a', '7', ' ', ' ', '\n', '\r', '\t',
            ',', '-', '!'};
        size_t checked = 0, differ[2] = {0, 0};
        char t[128];
        for (int k = 0; k < 30000; k++) {
            size_t len = 0, nch = 1 + rnd() % 20;
            for (size_t i = 0; i < nch; i++) len += put_utf8(t + len, cps[rnd() % (sizeof cps / sizeof *cps)]);
            for (size_t p = 0; p < len; p++) {
                if (((uint8_t)t[p] & 0xC0) == 0x80) continue; /* pieces start on characters */
                size_t r = glm_bpe_piece_len(bpe, t, len, p, 0);
                for (int m = 0; m < 2; m++) {
                    size_t f = glm_bpe_piece_len(bpe, t, len, p, m == 0 ? 2 : 3);
                    if (f != r && differ[m]++ < 5)
                        fprintf(stderr, "%s path %zu vs PCRE2 %zu at %zu of a %zu-byte text\n",
                                m == 0 ? "BMP" : "combined", f, r, p, len);
                }
                checked++;
            }
        }
        CHECK(differ[0] == 0 && differ[1] == 0, "BMP fast path differs from PCRE2 at %zu (combined: %zu) of %zu "
              "positions", differ[0], differ[1], checked);
        printf("BMP fast path = PCRE2 at %zu random positions\n", checked);
    }

    /* --- classes where PCRE2 10.42's tables differ from tiktoken's (Unicode 16); expected splits
     * from tiktoken 0.14 (tests/bench/unicode_classes.sh lists all differing code points) */
    static const struct { const char *text; size_t first; } cls_cases[] = {
        {"a\xe1\xb2\x89" "b", 5},          /* U+1C89 letter (Unicode 16): "a?b" is one \p{L}+ piece */
        {"a\xf0\xae\xaf\xb0" "b", 6},      /* U+2EBF0 CJK ext. I letter */
        {"a\xf0\xb1\x8d\x90" "b", 6},      /* U+31350 CJK ext. H letter */
        {"1\xf0\x91\xbd\x90" "2x", 6},     /* U+11F50 Kawi digit: \p{N}{1,3} */
        {"1\xf0\x9e\x97\xb1" "2x", 6},     /* U+1E5F1 Ol Onal digit */
        {" \xe1\xa0\x8e" "x", 4},           /* U+180E is not \s for tiktoken: " ?[^\s\p{L}\p{N}]+" */
        {"a\xc2\x85" "b", 1},               /* U+0085 is \s in both */
        {"\xc2\x85" "b", 3},                /* ... and a valid prefix for letters */
        {"  \xe3\x80\x80" "x", 2},       /* U+3000 ideographic space: \s+(?!\S) leaves it to prefix "x" */
        {"  \xc2\xa0x", 2},               /* U+00A0 no-break space */
    };
    for (size_t k = 0; bpe && k < sizeof cls_cases / sizeof *cls_cases; k++) {
        for (int m = 0; m <= 3; m++) {
            size_t got = glm_bpe_piece_len(bpe, cls_cases[k].text, strlen(cls_cases[k].text), 0, m);
            CHECK(got == cls_cases[k].first, "class case %zu (path %d): first piece %zu bytes, want %zu", k, m,
                  got, cls_cases[k].first);
        }
    }
    glm_bpe_free(own);

    /* --- 1 MB single pieces: CJK (PCRE2 + heap merge), ASCII letters, Latin-1 letters, spaces */
    {
        size_t len;
        char *t = cjk_text(1 << 20, &len);
        ids.n = 0;
        t0 = now_s();
        st = glm_tokenizer_encode(tok, t, len, &ids);
        dt = now_s() - t0;
        CHECK(st == GLM_OK, "%s", glm_errmsg());
        CHECK(dt < 5.0, "1 MB CJK piece took %.2f s (quadratic?)", dt);
        CHECK(roundtrip(tok, t, len, &ids), "1 MB CJK round trip");
        printf("1 MB CJK piece: %zu ids in %.3f s\n", ids.n, dt);
        free(t);
        const char *units[] = {"a", "\xc3\xa9", " ", "\xe3\x80\x80" /* U+3000 ideographic space */, "7"};
        for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
            size_t ul = strlen(units[u]), n = (1 << 20) / ul;
            char *b = malloc(n * ul);
            for (size_t i = 0; i < n; i++) memcpy(b + i * ul, units[u], ul);
            ids.n = 0;
            t0 = now_s();
            st = glm_tokenizer_encode(tok, b, n * ul, &ids);
            dt = now_s() - t0;
            CHECK(st == GLM_OK, "1 MB of U+%s: %s", units[u], glm_errmsg());
            CHECK(dt < 5.0, "1 MB run of \"%s\" took %.2f s", units[u], dt);
            CHECK(roundtrip(tok, b, n * ul, &ids), "1 MB run of \"%s\" round trip", units[u]);
            printf("1 MB run of \"%s\": %zu ids in %.3f s\n", units[u], ids.n, dt);
            free(b);
        }
    }

    /* --- invalid UTF-8 is rejected and leaves the output alone */
    static const char *badutf[] = {"ok\xff", "\xc0\x80", "\xed\xa0\x80", "ab\xe4\xbd", "\xf4\x90\x80\x80", "\x80"};
    for (size_t i = 0; i < sizeof badutf / sizeof *badutf; i++) {
        ids.n = 1;
        ids.v[0] = 7;
        st = glm_tokenizer_encode(tok, badutf[i], strlen(badutf[i]), &ids);
        CHECK(st == GLM_ERR_FORMAT, "invalid UTF-8 case %zu accepted (%d)", i, st);
        CHECK(ids.n == 1 && ids.v[0] == 7, "output changed on error");
        CHECK(strstr(glm_errmsg(), "offset") != NULL, "message lacks the offset: %s", glm_errmsg());
    }
    ids.n = 0;
    CHECK(glm_tokenizer_encode(tok, "a\0b", 3, &ids) == GLM_OK && ids.n >= 2, "embedded NUL");

    /* --- decode of out-of-range ids */
    uint32_t badid[3] = {100, 151343, 5};
    dec = (glm_charvec){0};
    st = glm_tokenizer_decode(tok, badid, 3, &dec);
    CHECK(st == GLM_ERR_ARG, "out-of-range id accepted (%d)", st);
    CHECK(strstr(glm_errmsg(), "151343") != NULL, "message does not name the id: %s", glm_errmsg());
    CHECK(dec.n == 0, "output changed on error");
    uint32_t big = 0xffffffffu;
    CHECK(glm_tokenizer_decode(tok, &big, 1, &dec) == GLM_ERR_ARG, "id 2^32-1 accepted");
    glm_vec_free(dec);

    /* --- concurrent encoding on one tokenizer */
    {
        enum { NT = 4 };
        pthread_t th[NT];
        worker w[NT];
        for (int i = 0; i < NT; i++) {
            w[i] = (worker){tok, (size_t)i, NT, 0};
            pthread_create(&th[i], NULL, work, &w[i]);
        }
        int bad = 0;
        for (int i = 0; i < NT; i++) pthread_join(th[i], NULL), bad += w[i].bad;
        CHECK(bad == 0, "%d mismatches when encoding from %d threads", bad, NT);
    }

    /* --- load errors (no table cache: a file is checked, never taken from tables saved before) */
    setenv("GLMTUNE_CACHE_DIR", "off", 1);
    glm_tokenizer *x = NULL;
    CHECK(glm_tokenizer_load("/nonexistent/dir", &x) == GLM_ERR_IO && !x, "missing path");
    char tmpl[] = "/tmp/glm_tok_XXXXXX";
    if (mkdtemp(tmpl)) {
        char p[256];
        snprintf(p, sizeof p, "%s/tokenizer.model", tmpl);
        glm_write_file_atomic(p, "this is not a tokenizer\n", 24);
        CHECK(glm_tokenizer_load(tmpl, &x) == GLM_ERR_FORMAT, "garbage accepted");
        printf("garbage: %s\n", glm_errmsg());
        const char *badb64 = "IQ== 0\nIg== 1\n!!!! 2\n";
        glm_write_file_atomic(p, badb64, strlen(badb64));
        CHECK(glm_tokenizer_load(p, &x) == GLM_ERR_FORMAT && strstr(glm_errmsg(), ":3:"), "bad base64: %s", glm_errmsg());
        const char *dup = "IQ== 0\nIQ== 1\n";
        glm_write_file_atomic(p, dup, strlen(dup));
        CHECK(glm_tokenizer_load(p, &x) == GLM_ERR_FORMAT, "duplicate token accepted");
        printf("duplicate: %s\n", glm_errmsg());
        /* a 15-byte file with rank 10^9: refused at once, naming the line (before: 3.9 GB of
         * rank tables allocated, then "no token for the single byte 0x00") */
        const char *huge = "IQ== 1000000000";
        glm_write_file_atomic(p, huge, strlen(huge));
        CHECK(glm_tokenizer_load(p, &x) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "tokenizer.model:1:") &&
              strstr(glm_errmsg(), "rank 1000000000") && strstr(glm_errmsg(), "hint"), "huge rank: %s", glm_errmsg());
        printf("huge rank: %s\n", glm_errmsg());
        /* every single byte, then one far rank on line 258: the line named; a small gap is accepted */
        glm_charvec v = {0};
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int c = 0; c < 256; c++) {
            char line[32];
            int n = snprintf(line, sizeof line, "%c%c== %d\n", b64[c >> 2], b64[(c & 3) << 4], c);
            CHECK(glm_vec_reserve(v, (size_t)n) == GLM_OK, "mem");
            memcpy(v.v + v.n, line, (size_t)n), v.n += (size_t)n;
        }
        const char *tail_ok = "YWI= 300\n", *tail_far = "YWI= 300\nYWJj 999999\n";
        glm_charvec w = {0};
        CHECK(glm_vec_reserve(w, v.n + 64) == GLM_OK, "mem");
        memcpy(w.v, v.v, v.n), memcpy(w.v + v.n, tail_ok, strlen(tail_ok));
        glm_write_file_atomic(p, w.v, v.n + strlen(tail_ok));
        /* (a tokenizer.model alone: no special tokens, an empty table to sort, which was
         * qsort(NULL, 0, ...), undefined behaviour that -fsanitize=undefined stops at) */
        CHECK(glm_tokenizer_load(p, &x) == GLM_OK, "256 bytes and a gap to rank 300, no specials: %s", glm_errmsg());
        glm_u32vec enc = {0};
        CHECK(x && glm_tokenizer_encode(x, "ab", 2, &enc) == GLM_OK && enc.n == 1 && enc.v[0] == 300,
              "\"ab\" is rank 300: %zu ids", enc.n);
        glm_vec_free(enc);
        glm_tokenizer_free(x);
        x = NULL;
        memcpy(w.v + v.n, tail_far, strlen(tail_far));
        glm_write_file_atomic(p, w.v, v.n + strlen(tail_far));
        CHECK(glm_tokenizer_load(p, &x) == GLM_ERR_FORMAT && strstr(glm_errmsg(), ":258:") &&
              strstr(glm_errmsg(), "rank 999999"), "far rank after the bytes: %s", glm_errmsg());
        glm_vec_free(v);
        glm_vec_free(w);
        glm_rmtree(tmpl);
    }

    for (size_t i = 0; i < cases.n; i++) free(cases.v[i].text), free(cases.v[i].ids);
    glm_vec_free(cases);
    glm_vec_free(ids);
    glm_tokenizer_free(tok);
    return check_summary("test_tokenizer");
}
