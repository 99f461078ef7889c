/* common/jsonfast.c: a fast path for parsing JSON into jansson values (see jsonfast.h).
 *
 * Recursive descent over the bytes in memory. Strings are scanned 16 bytes (SSE2) or 8 bytes at a
 * time for the bytes that need attention ('"', '\\', control characters, non-ASCII), non-ASCII is checked as
 * jansson's utf.c checks it, and a string without escapes goes to jansson straight from the
 * input. Numbers follow jansson's lex_scan_number: an integer (no '.', 'e' or 'E') is a
 * json_integer (strtoll's value), anything else a json_real (strtod's value, as jsonp_strtod). */
#include "common/jsonfast.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { MAX_NEST = 512 };

typedef struct {
    const unsigned char *p, *end;
    char *buf; /* decoded strings with escapes */
    size_t cap;
    int depth;
    bool dot_ok; /* the locale's decimal point is "." (strtod reads JSON reals as they are) */
} fparser;

static json_t *parse_value(fparser *s);

static inline void skip_ws(fparser *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

/* Bytes of an 8-byte word (little-endian load) that are '"', '\\', below 0x20 or above 0x7f:
 * the lowest set 0x80 bit marks the first such byte (higher ones may be false positives). */
static inline uint64_t special_bytes(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (w | ((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b)) & high;
}

/* Skips the run of plain printable ASCII at s->p (no '"', '\\', control or non-ASCII byte). */
static inline void skip_plain(fparser *s) {
    const unsigned char *p = s->p, *end = s->end;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        /* signed x < 0x20: control characters, and every byte >= 0x80 */
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)), _mm_cmplt_epi8(x, space));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits) {
            s->p = p + __builtin_ctz(bits);
            return;
        }
        p += 16;
    }
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t m = special_bytes(w);
        if (m) {
            s->p = p + (__builtin_ctzll(m) >> 3);
            return;
        }
        p += 8;
    }
#endif
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
    s->p = p;
}

/* Length of the valid UTF-8 sequence at p (p[0] >= 0x80), or 0 when it is invalid by jansson's
 * rules (utf8_check_first / utf8_check_full). */
static inline size_t utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    size_t left = (size_t)(end - p);
    if ((c & 0xF0) == 0xE0) { /* first: CJK text is made of these */
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* a UTF-16 surrogate */
        return 3;
    }
    if (c >= 0xC2 && c <= 0xDF) return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at p as a number, or -1. */
static inline long hex4(const unsigned char *p) {
    int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3]);
    if ((a | b | c | d) < 0) return -1;
    return (long)((a << 12) | (b << 8) | (c << 4) | d);
}

static bool buf_reserve(fparser *s, size_t need) {
    if (need <= s->cap) return true;
    size_t c = s->cap ? s->cap : 256;
    while (c < need) c *= 2;
    char *x = realloc(s->buf, c);
    if (!x) return false;
    s->buf = x;
    s->cap = c;
    return true;
}

/* Scans the string whose opening quote is at s->p[-1]. Returns false when it is not valid (or
 * holds what the fast path leaves to jansson). *out and *len: its bytes (into the input when it
 * has no escape, else decoded into s->buf). */
static bool scan_string(fparser *s, const char **out, size_t *len) {
    const unsigned char *start = s->p;
    size_t n = 0;        /* decoded bytes in s->buf (escaped strings only) */
    bool escaped = false;
    for (;;) {
        const unsigned char *run = s->p;
        for (;;) { /* plain ASCII and valid UTF-8 */
            skip_plain(s);
            if (s->p >= s->end) return false;
            if (*s->p < 0x80) break;
            do { /* a run of non-ASCII characters (CJK text) */
                size_t k = utf8_seq(s->p, s->end);
                if (!k) return false;
                s->p += k;
            } while (s->p < s->end && *s->p >= 0x80);
        }
        unsigned char c = *s->p;
        if (c < 0x20) return false;
        if (escaped) { /* copy the run into the decoded text */
            size_t k = (size_t)(s->p - run);
            if (!buf_reserve(s, n + k + 4)) return false;
            memcpy(s->buf + n, run, k);
            n += k;
        }
        if (c == '"') {
            s->p++;
            if (escaped) {
                *out = s->buf;
                *len = n;
            } else {
                *out = (const char *)start;
                *len = (size_t)(s->p - 1 - start);
            }
            return true;
        }
        /* c == '\\' */
        if (!escaped) {
            size_t k = (size_t)(s->p - start);
            if (!buf_reserve(s, k + 4)) return false;
            memcpy(s->buf, start, k);
            n = k;
            escaped = true;
        }
        if (s->end - s->p < 2) return false;
        unsigned char e = s->p[1];
        s->p += 2;
        char ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            if (s->end - s->p < 4) return false;
            long u = hex4(s->p);
            s->p += 4;
            if (u <= 0) return false; /* invalid, or \u0000 (refused without JSON_ALLOW_NUL) */
            if (u >= 0xDC00 && u <= 0xDFFF) return false; /* a lone low surrogate */
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u') return false;
                long lo = hex4(s->p + 2);
                if (lo < 0xDC00 || lo > 0xDFFF) return false;
                s->p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (!buf_reserve(s, n + 4)) return false;
            char *o = s->buf + n;
            if (u < 0x80) {
                o[0] = (char)u;
                n += 1;
            } else if (u < 0x800) {
                o[0] = (char)(0xC0 | (u >> 6));
                o[1] = (char)(0x80 | (u & 0x3F));
                n += 2;
            } else if (u < 0x10000) {
                o[0] = (char)(0xE0 | (u >> 12));
                o[1] = (char)(0x80 | ((u >> 6) & 0x3F));
                o[2] = (char)(0x80 | (u & 0x3F));
                n += 3;
            } else {
                o[0] = (char)(0xF0 | (u >> 18));
                o[1] = (char)(0x80 | ((u >> 12) & 0x3F));
                o[2] = (char)(0x80 | ((u >> 6) & 0x3F));
                o[3] = (char)(0x80 | (u & 0x3F));
                n += 4;
            }
            continue;
        }
        default: return false;
        }
        if (!buf_reserve(s, n + 1)) return false;
        s->buf[n++] = ch;
    }
}

static inline bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* A number, as jansson's lex_scan_number reads it. */
static json_t *parse_number(fparser *s) {
    const unsigned char *start = s->p, *p = s->p, *end = s->end;
    bool neg = false;
    if (p < end && *p == '-') neg = true, p++;
    if (p >= end || !is_digit(*p)) return NULL;
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p)) return NULL; /* a leading zero */
    } else {
        while (p < end && is_digit(*p)) p++;
    }
    const unsigned char *int_end = p;
    bool real = false;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
        real = true;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
        real = true;
    }
    s->p = p;
    if (!real) {
        const unsigned char *d = start + neg;
        size_t nd = (size_t)(int_end - d);
        if (nd > 19) return NULL; /* out of the 64-bit range: jansson fails, the caller keeps the text */
        uint64_t v = 0;
        for (size_t i = 0; i < nd; i++) v = v * 10 + (uint64_t)(d[i] - '0'); /* < 10^19 < 2^64 */
        if (v > (uint64_t)INT64_MAX + neg) return NULL;
        return json_integer(neg ? (json_int_t)(0 - v) : (json_int_t)v);
    }
    char tmp[64];
    size_t len = (size_t)(p - start);
    if (!s->dot_ok || len >= sizeof tmp) return NULL;
    memcpy(tmp, start, len);
    tmp[len] = 0;
    errno = 0;
    char *e;
    double d = strtod(tmp, &e);
    if (e != tmp + len || ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE)) return NULL;
    return json_real(d);
}

static json_t *parse_object(fparser *s) {
    json_t *obj = json_object();
    if (!obj) return NULL;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return obj;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '"') goto fail;
        s->p++;
        const char *k;
        size_t kl;
        if (!scan_string(s, &k, &kl)) goto fail;
        /* the key may live in s->buf, which the value's strings reuse: keep a copy */
        char small[128], *key = small;
        if (kl >= sizeof small && !(key = malloc(kl + 1))) goto fail;
        memcpy(key, k, kl);
        skip_ws(s);
        json_t *v = NULL;
        if (s->p < s->end && *s->p == ':') {
            s->p++;
            skip_ws(s);
            v = parse_value(s);
        }
        int bad = !v || json_object_setn_new_nocheck(obj, key, kl, v) != 0; /* a repeated key: last value, first place */
        if (key != small) free(key);
        if (bad) goto fail;
        skip_ws(s);
        if (s->p >= s->end) goto fail;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            return obj;
        }
        goto fail;
    }
fail:
    json_decref(obj);
    return NULL;
}

static json_t *parse_array(fparser *s) {
    json_t *arr = json_array();
    if (!arr) return NULL;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return arr;
    }
    for (;;) {
        json_t *v = parse_value(s);
        if (!v || json_array_append_new(arr, v) != 0) goto fail;
        skip_ws(s);
        if (s->p >= s->end) goto fail;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == ']') {
            s->p++;
            return arr;
        }
        goto fail;
    }
fail:
    json_decref(arr);
    return NULL;
}

/* A literal word (true, false, null) that must not run on into more letters. */
static bool word(fparser *s, const char *w, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0) return false;
    s->p += n;
    return true;
}

static json_t *parse_value(fparser *s) {
    if (s->p >= s->end) return NULL;
    json_t *v = NULL;
    switch (*s->p) {
    case '"': {
        s->p++;
        const char *t;
        size_t n;
        if (!scan_string(s, &t, &n)) return NULL;
        return json_stringn_nocheck(t, n);
    }
    case '{':
    case '[':
        if (++s->depth > MAX_NEST) return NULL;
        s->p++;
        v = s->p[-1] == '{' ? parse_object(s) : parse_array(s);
        s->depth--;
        return v;
    case 't': v = word(s, "true", 4) ? json_true() : NULL; break;
    case 'f': v = word(s, "false", 5) ? json_false() : NULL; break;
    case 'n': v = word(s, "null", 4) ? json_null() : NULL; break;
    default: return parse_number(s);
    }
    /* "truex" is one invalid token for jansson */
    if (v && s->p < s->end && ((*s->p | 0x20) >= 'a' && (*s->p | 0x20) <= 'z')) v = NULL;
    return v;
}

json_t *glm_json_parse_fast(const char *data, size_t n, bool decode_any) {
    if (!data) return NULL;
    const struct lconv *lc = localeconv();
    fparser s = {(const unsigned char *)data, (const unsigned char *)data + n, NULL, 0, 0,
                 lc && lc->decimal_point && !strcmp(lc->decimal_point, ".")};
    skip_ws(&s);
    if (s.p >= s.end || (!decode_any && *s.p != '{' && *s.p != '[')) return NULL;
    json_t *v = parse_value(&s);
    if (v) {
        skip_ws(&s);
        if (s.p != s.end) { /* trailing text */
            json_decref(v);
            v = NULL;
        }
    }
    free(s.buf);
    return v;
}
