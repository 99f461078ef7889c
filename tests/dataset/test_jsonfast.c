/* tests/dataset/test_jsonfast.c: the fast JSON parser (common/jsonfast.h) against jansson.
 *
 * The oracle is jansson's json_loadb with the same flags: whenever the fast parser returns a
 * value, jansson must return the same value (types, key order, string bytes, integer values,
 * the bits of every double); whenever jansson parses a text in the common form (no integer
 * outside 64 bits, shallow nesting), the fast parser must not give up on it. Checked on hand-made
 * cases, on every record of tests/fixtures/corpora, and on about 100,000 random
 * mutations of records (quotes, escapes, surrogates, bad UTF-8, numbers, brackets spliced in). */
#include <jansson.h>
#include <locale.h>
#include <string.h>

#include "../check.h"
#include "../json_same.h"
#include "common/jsonfast.h"
#include "common/pyjson.h"
#include "common/rng.h"
#include "dataset/reader.h"

typedef struct {
    size_t both, fast_only, jansson_only, neither, differ;
} tally;

/* Parses t[0..n) both ways; returns the fast result's status: 1 parsed, 0 gave up. */
static int compare(const char *t, size_t n, bool any, tally *y) {
    json_error_t e;
    json_t *f = glm_json_parse_fast(t, n, any);
    json_t *j = json_loadb(t, n, any ? JSON_DECODE_ANY : 0, &e);
    if (f && j) {
        y->both++;
        if (!json_same(f, j)) {
            y->differ++;
            if (y->differ <= 5) fprintf(stderr, "differs from jansson: %.*s\n", (int)(n < 300 ? n : 300), t);
        }
    } else if (f) {
        y->fast_only++;
        if (y->fast_only <= 5) fprintf(stderr, "fast parsed what jansson refuses (%s): %.*s\n", e.text, (int)(n < 300 ? n : 300), t);
    } else if (j) {
        y->jansson_only++;
    } else {
        y->neither++;
    }
    json_decref(f);
    json_decref(j);
    return f != NULL;
}

/* Hand-made cases: `ok` says whether the fast path must parse the text (1) or leave it (0);
 * either way a parse must equal jansson's. */
static void hand_cases(void) {
    static const struct {
        const char *t;
        int any, ok;
    } C[] = {
        {"{}", 0, 1}, {"[]", 0, 1}, {" \t\r\n{ \"a\" : [ 1 , -2 , 3.5 , true , false , null ] } \n", 0, 1},
        {"{\"a\":1,\"b\":2,\"a\":3}", 0, 1},           /* a repeated key: last value, first place */
        {"{\"k\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", 0, 1}, /* every named escape */
        {"[\"\\u00e9\\u4e2d\\ud83d\\ude00\\u0001\\u007f\\uFFFF\"]", 0, 1},
        {"[\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\x7f\"]", 0, 1},
        {"[0, -0, 9223372036854775807, -9223372036854775808, 1234567890123456789]", 0, 1},
        {"[0.0, -0.0, 1e5, 1E+5, 1e-5, 2.5e-308, 1e-400, 1.7976931348623157e308, 0.1, 123.456e-7]", 0, 1},
        {"\"text\"", 1, 1}, {"17", 1, 1}, {"-3.5", 1, 1}, {"true", 1, 1}, {"null", 1, 1},
        {"[\"a\"] ", 0, 1}, {"[[[[[[[[[[1]]]]]]]]]]", 0, 1}, {"{\"\":\"\"}", 0, 1},
        /* left to jansson (invalid, or outside the fast path) */
        {"\"text\"", 0, 0}, {"17", 0, 0}, {"", 0, 0}, {" ", 1, 0}, {"[1,]", 0, 0}, {"[1 2]", 0, 0},
        {"{\"a\" 1}", 0, 0}, {"{\"a\":1,}", 0, 0}, {"{1:2}", 0, 0}, {"[01]", 0, 0}, {"[1.]", 0, 0},
        {"[.5]", 0, 0}, {"[1e]", 0, 0}, {"[-]", 0, 0}, {"[+1]", 0, 0}, {"[truex]", 0, 0}, {"[tru]", 0, 0},
        {"[NaN]", 0, 0}, {"[Infinity]", 0, 0}, {"[9223372036854775808]", 0, 0},
        {"[-9223372036854775809]", 0, 0}, {"[1e400]", 0, 0}, {"[-1e400]", 0, 0},
        {"[\"\\u0000\"]", 0, 0}, {"[\"\\ud800\"]", 0, 0}, {"[\"\\udc00\"]", 0, 0}, {"[\"\\ud800\\u0041\"]", 0, 0},
        {"[\"\\x\"]", 0, 0}, {"[\"\\u12\"]", 0, 0}, {"[\"\\u12g4\"]", 0, 0}, {"[\"a\tb\"]", 0, 0},
        {"[\"\x80\"]", 0, 0}, {"[\"\xc0\xaf\"]", 0, 0}, {"[\"\xe0\x80\xaf\"]", 0, 0}, {"[\"\xed\xa0\x80\"]", 0, 0},
        {"[\"\xf4\x90\x80\x80\"]", 0, 0}, {"[\"\xf5\x80\x80\x80\"]", 0, 0}, {"[\"\xe4\xb8\"]", 0, 0},
        {"[\"abc", 0, 0}, {"[\"abc\\", 0, 0}, {"{\"a\":1", 0, 0}, {"[1] x", 0, 0}, {"[1][2]", 0, 0},
        {"\xef\xbb\xbf[1]", 0, 0}, {"[1,\x00]", 0, 0},
    };
    tally y = {0};
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        size_t n = strlen(C[i].t);
        if (!strcmp(C[i].t, "[1,\x00]")) n = 5;
        int got = compare(C[i].t, n, C[i].any, &y);
        CHECK(got == C[i].ok, "case %zu (%s): the fast path %s", i, C[i].t, got ? "parsed it" : "gave up");
    }
    CHECK(y.differ == 0 && y.fast_only == 0, "hand cases: %zu differ, %zu parsed only by the fast path", y.differ, y.fast_only);
    /* nesting: 512 levels are parsed, 513 are left to jansson (which allows 2048) */
    char deep[2 * 513 + 1];
    for (int d = 512; d <= 513; d++) {
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        CHECK(compare(deep, 2 * (size_t)d, false, &y) == (d == 512), "nesting %d", d);
    }
    /* a record as glm_json_loadb_py sees it: an integer beyond 64 bits still becomes number text */
    json_error_t e;
    const char *big = "{\"a\": 18446744073709551616, \"b\": 1}";
    json_t *v = glm_json_loadb_py(big, strlen(big), 0, &e);
    const char *t = NULL;
    size_t tl = 0;
    CHECK(v && glm_json_numtext(json_object_get(v, "a"), NULL, &t, &tl) && tl == 20 &&
              json_integer_value(json_object_get(v, "b")) == 1, "big integer through glm_json_loadb_py");
    json_decref(v);
}

static const char *const PIECES[] = {
    "\"", "\\", "\\u0000", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u00e9", "\x80", "\xc3", "\xed\xa0\x80",
    "\xf4\x90\x80\x80", "\xe4\xb8", "\xe4\xb8\xad", "1e400", "-0", "123456789012345678901", "NaN", "1.5e-400",
    "9223372036854775808", "-9223372036854775808", "9223372036854775807", "00", "1.", ".5", "tru", "truex", ",",
    "}", "]", "{", "[", ":", "\t", "\x01", "\x7f", " ", "\\/", "\\b", "\\x", "0.1", "1E5", "-", "\"a\":1,\"a\":2",
    "\r", "\n", "[]", "{}", "null", "false", "\"\"",
};

/* Random splices of PIECES into `rec`; returns how many mutants the fast path parsed. */
static void mutate(glm_rng *r, const char *rec, size_t n, int count, tally *y) {
    char *buf = malloc(n + 256);
    for (int k = 0; k < count; k++) {
        size_t m = n;
        memcpy(buf, rec, n);
        int edits = 1 + (int)glm_rng_below(r, 3);
        for (int e = 0; e < edits; e++) {
            const char *p = PIECES[glm_rng_below(r, sizeof PIECES / sizeof *PIECES)];
            size_t pl = strlen(p), at = glm_rng_below(r, m + 1);
            if (m + pl > n + 255) break;
            if (glm_rng_below(r, 2) && at + pl <= m) {
                memcpy(buf + at, p, pl); /* overwrite */
            } else {
                memmove(buf + at + pl, buf + at, m - at); /* insert */
                memcpy(buf + at, p, pl);
                m += pl;
            }
        }
        compare(buf, m, glm_rng_below(r, 4) == 0, y);
    }
    free(buf);
}

int main(void) {
    hand_cases();

    /* mutations of small hand-written records (always run) */
    static const char *const SEEDS[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"\\u4f60\\u597d \\\"q\\\"\\n\"}, {\"role\": "
        "\"assistant\", \"content\": \"\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80\", \"loss\": false}]}",
        "{\"instruction\": \"add\", \"input\": \"1 + 2\", \"output\": \"3\", \"n\": [1, -2.5e3, 0.1, true, null]}",
        "{\"conversations\": [{\"from\": \"human\", \"value\": \"x\"}], \"tools\": \"[{\\\"name\\\": \\\"f\\\"}]\"}",
    };
    glm_rng r;
    glm_rng_seed(&r, 2024, 0);
    tally ym = {0};
    for (size_t i = 0; i < sizeof SEEDS / sizeof *SEEDS; i++) mutate(&r, SEEDS[i], strlen(SEEDS[i]), 20000, &ym);

    /* the corpora: every record parsed by the fast path, equal to jansson; then mutants */
    const char *data_dir = test_data_dir();
    size_t records = 0;
    {
        char bufs[3][4096];
        const char *in[3];
        size_t nin = corpora_inputs(data_dir, bufs, in);
        glm_reader *rd = NULL;
        CHECK(glm_reader_open(in, nin, NULL, &rd) == GLM_OK, "open %s: %s", in[0], glm_errmsg());
        glm_reader_set_deferred_parse(rd, true);
        glm_record rec;
        tally yc = {0};
        size_t fast = 0;
        while (rd && glm_reader_next(rd, &rec) == GLM_OK) {
            if (rec.raw) {
                records++;
                fast += (size_t)compare(rec.raw, rec.nbytes, false, &yc);
                if (records % 8 == 0) mutate(&r, rec.raw, rec.nbytes, 25, &ym);
            }
            free(rec.raw);
            json_decref(rec.value);
        }
        glm_reader_close(rd);
        /* 1,500: the sum of the records column of tests/fixtures/corpora/SOURCES.md */
        CHECK(records == 1500 && fast == records && yc.differ == 0 && yc.fast_only == 0,
              "corpora: %zu records, %zu parsed by the fast path, %zu differ from jansson", records, fast, yc.differ);
    }
    CHECK(ym.differ == 0, "mutants: %zu of %zu parsed both ways differ", ym.differ, ym.both);
    CHECK(ym.fast_only == 0, "mutants: %zu parsed by the fast path were refused by jansson", ym.fast_only);
    CHECK(ym.jansson_only == 0, "mutants: the fast path gave up on %zu that jansson parses", ym.jansson_only);
    CHECK(ym.both > 5000 && ym.neither > 5000, "mutants exercise both sides: %zu parsed, %zu refused", ym.both, ym.neither);
    printf("mutants: %zu parsed both ways, %zu refused both ways; corpus records: %zu\n", ym.both, ym.neither, records);

    /* a locale whose decimal point is not "." makes the fast path leave reals to jansson */
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") || setlocale(LC_NUMERIC, "fr_FR.UTF-8")) {
        tally yl = {0};
        CHECK(compare("[1.5]", 5, false, &yl) == 0 && compare("[15]", 4, false, &yl) == 1 && yl.differ == 0,
              "decimal comma locale");
        setlocale(LC_NUMERIC, "C");
    }
    return check_summary("test_jsonfast");
}
