/* tests/fuzz/fuzz_jsonsplit.c: the streaming JSON splitter (dataset/jsonsplit.c) fed the input
 * in blocks of varying size; each record checked against the fast JSON path (common/jsonfast.h:
 * whatever it parses must be jansson's value exactly), then parsed (glm_record_parse: UTF-8,
 * surrogates, depth) and converted (glm_record_convert: messages / sharegpt / alpaca /
 * pretokenized, auto-detected or forced) as glmtune tokenize does. The first input byte picks
 * the block size, the lines hint and the forced format; the rest is the stream. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonfast.h"
#include "dataset/formats.h"
#include "dataset/jsonsplit.h"
#include "dataset/reader.h"
#include "fuzz_common.h"
#include "tests/json_same.h"

/* The fast JSON path (common/jsonfast.h) must give jansson's value whenever it gives one. */
static void check_fast(const char *bytes, size_t n) {
    for (int any = 0; any < 2; any++) {
        json_t *f = glm_json_parse_fast(bytes, n, any);
        if (!f) continue;
        json_t *j = json_loadb(bytes, n, any ? JSON_DECODE_ANY : 0, NULL);
        if (!j || !json_same(f, j)) abort();
        json_decref(f);
        json_decref(j);
    }
}

static void convert(const char *bytes, size_t n, glm_format fmt) {
    check_fast(bytes, n);
    glm_record rec;
    memset(&rec, 0, sizeof rec);
    rec.source = "fuzz.jsonl";
    rec.nbytes = n;
    rec.raw = malloc(n ? n : 1);
    if (!rec.raw) return;
    memcpy(rec.raw, bytes, n);
    glm_record_parse(&rec);
    if (rec.value) {
        glm_conversation c;
        const char *reason = NULL;
        if (glm_record_convert(&rec, fmt, &c, &reason) == GLM_OK) glm_conversation_free(&c);
        json_decref(rec.value);
    }
    free(rec.raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    static const size_t blocks[] = {1, 2, 3, 7, 64, 4096, 1 << 20, 5};
    size_t block = blocks[ctl & 7];
    bool lines = (ctl >> 3) & 1;
    glm_format fmt = (glm_format)((ctl >> 4) % 5);
    glm_jsonsplit s;
    glm_jsonsplit_init(&s, (ctl & 0x80) ? 4096 : 0, lines);
    glm_jsplit_rec rec;
    bool have;
    size_t off = 0;
    while (off < n) {
        size_t len = n - off < block ? n - off : block, used = 0;
        while (used < len) {
            size_t u = 0;
            if (glm_jsonsplit_feed(&s, p + off + used, len - used, &u, &rec, &have) != GLM_OK) goto done;
            used += u;
            if (have && rec.problem == GLM_JSPLIT_OK && rec.data) convert(rec.data, rec.n, fmt);
            if (!u && !have) break;
        }
        off += len;
    }
    if (glm_jsonsplit_finish(&s, &rec, &have) == GLM_OK && have && rec.problem == GLM_JSPLIT_OK && rec.data)
        convert(rec.data, rec.n, fmt);
done:
    glm_jsonsplit_free(&s);
    return 0;
}
