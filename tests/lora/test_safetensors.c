#define _GNU_SOURCE
/* tests/lora/test_safetensors.c: the safetensors reader/writer against the tiny-glm4 fixtures
 * (written by the reference Python safetensors), round trips, conversions, and corrupt files. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/safetensors.h"
#include "tests/check.h"

static char g_tmp[256];

static char *fx(const char *data_dir, const char *rel) {
    char *p = NULL;
    if (asprintf(&p, "%s/tiny-glm4/%s", data_dir, rel) < 0) abort();
    return p;
}

static char *tmp_path(const char *name) { return glm_path_join(g_tmp, name); }

/* Writes a raw safetensors file: header JSON (as given) + `datalen` bytes of a pattern. */
static char *write_raw(const char *name, const char *header, size_t datalen) {
    char *p = tmp_path(name);
    uint64_t hlen_field = strlen(header);
    FILE *f = fopen(p, "wb");
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(hlen_field >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < datalen; i++) fputc((int)(i & 0xff), f);
    fclose(f);
    return p;
}

/* Opens a file expected to fail; checks the status and that the message holds each needle. */
static void expect_fail(const char *path, glm_status want, const char *needle1, const char *needle2) {
    glm_st_set *s = NULL;
    glm_status st = glm_st_open(path, &s);
    CHECK(st == want, "%s: status %d (want %d): %s", path, st, want, glm_errmsg());
    CHECK(s == NULL, "set must be NULL on failure");
    const char *m = glm_errmsg();
    CHECK(strstr(m, path) != NULL, "message names the file: %s", m);
    if (needle1) CHECK(strstr(m, needle1) != NULL, "message has '%s': %s", needle1, m);
    if (needle2) CHECK(strstr(m, needle2) != NULL, "message has '%s': %s", needle2, m);
    printf("  rejected as expected: %s\n", m);
    if (s) glm_st_close(s);
}

static void test_conversions(void) {
    /* f16 specials and subnormals */
    uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00, 0xfc00, 0x0000, 0x8000, 0x3555};
    float want[] = {1.0f, -2.0f, 65504.0f, 5.960464477539063e-08f, 6.103515625e-05f, INFINITY,
                    -INFINITY, 0.0f, -0.0f, 0.333251953125f};
    float f[10];
    CHECK(glm_st_to_f32(GLM_ST_F16, h, 10, f) == GLM_OK, "f16");
    for (int i = 0; i < 10; i++) CHECK(f[i] == want[i], "f16[%d] %g vs %g", i, f[i], want[i]);
    CHECK(signbit(f[8]), "-0");
    uint16_t back[10];
    CHECK(glm_st_from_f32(GLM_ST_F16, f, 10, back) == GLM_OK, "to f16");
    for (int i = 0; i < 10; i++) CHECK(back[i] == h[i], "f16 round trip %d: %04x vs %04x", i, back[i], h[i]);
    /* rounding: ties to even, overflow to inf, subnormal rounding, NaN */
    float r[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 65519.0f, 0x1p-25f, 0x1.8p-25f, NAN,
                 1e-8f};
    uint16_t rw[] = {0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x0000, 0x0001, 0x7e00, 0x0000};
    uint16_t ro[8];
    glm_st_from_f32(GLM_ST_F16, r, 8, ro);
    for (int i = 0; i < 8; i++) CHECK(ro[i] == rw[i], "f16 rounding %d: %04x vs %04x", i, ro[i], rw[i]);
    /* bf16 */
    float b[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -3.5f, NAN, INFINITY};
    uint16_t bw[] = {0x3f80, 0x3f80, 0x3f82, 0xc060, 0x7fc0, 0x7f80};
    uint16_t bo[6];
    glm_st_from_f32(GLM_ST_BF16, b, 6, bo);
    for (int i = 0; i < 6; i++) CHECK(bo[i] == bw[i], "bf16 %d: %04x vs %04x", i, bo[i], bw[i]);
    float bb[6];
    glm_st_to_f32(GLM_ST_BF16, bo, 6, bb);
    CHECK(bb[3] == -3.5f && isnan(bb[4]) && isinf(bb[5]), "bf16 back");
    double d[2] = {0.1, -1e300};
    float df[2];
    glm_st_to_f32(GLM_ST_F64, d, 2, df);
    CHECK(df[0] == 0.1f && isinf(df[1]), "f64");
    CHECK(glm_st_to_f32(GLM_ST_I64, d, 1, df) == GLM_ERR_UNSUPPORTED, "i64 not convertible");
    CHECK(glm_st_from_f32(GLM_ST_F64, df, 1, d) == GLM_ERR_UNSUPPORTED, "to f64 unsupported");
}

static void test_fixtures(const char *data_dir) {
    static const struct {
        const char *layout;
        size_t n_golden, n_adapter, n_model;
    } L[] = {{"chatglm", 42, 16, 18}, {"hf", 58, 24, 0}};
    for (int li = 0; li < 2; li++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s/golden.safetensors", L[li].layout);
        char *p = fx(data_dir, rel);
        glm_st_set *g = NULL;
        CHECK(glm_st_open(p, &g) == GLM_OK, "open %s: %s", p, glm_errmsg());
        if (g) {
            CHECK(glm_st_count(g) == L[li].n_golden, "%s count %zu", p, glm_st_count(g));
            const glm_st_tensor *t = glm_st_find(g, "input_ids");
            CHECK(t && t->dtype == GLM_ST_I64 && t->ndim == 2 && t->shape[0] == 2 &&
                      t->shape[1] == 48, "input_ids");
            t = glm_st_find(g, "logits");
            CHECK(t && t->dtype == GLM_ST_F32 && t->ndim == 3 && t->numel == 2 * 48 * 512, "logits");
            CHECK(glm_st_find(g, "nope") == NULL, "missing -> NULL");
            CHECK(glm_st_metadata(g, "format") == NULL, "golden has no metadata");
            float loss;
            int64_t one = 1;
            CHECK(glm_st_read_f32(g, "loss", 1, &one, &loss) == GLM_OK, "loss f64->f32");
            double want = li == 0 ? 6.554488328169311 : 6.618062894386013; /* meta.json */
            CHECK(check_close(loss, want, 1e-7, 0), "loss %.9g vs %.9g", loss, want);
            int64_t wrong[2] = {2, 49};
            float dummy[2 * 49];
            glm_status st = glm_st_read_f32(g, "labels", 2, wrong, dummy);
            CHECK(st == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "labels") &&
                      strstr(glm_errmsg(), "[2, 48]") && strstr(glm_errmsg(), "[2, 49]"),
                  "shape mismatch message: %s", glm_errmsg());
            int64_t lshape[2] = {2, 48};
            st = glm_st_read_f32(g, "labels", 2, lshape, dummy);
            CHECK(st == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "labels"), "I64 -> f32: %s",
                  glm_errmsg());
            st = glm_st_read_f32(g, "absent.weight", 1, &one, dummy);
            CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "absent.weight") &&
                      strstr(glm_errmsg(), "golden"), "missing: %s", glm_errmsg());
            glm_st_close(g);
        }
        free(p);

        /* adapter dir: the one *.safetensors file in the directory */
        snprintf(rel, sizeof rel, "%s/adapter_init", L[li].layout);
        p = fx(data_dir, rel);
        glm_st_set *a = NULL;
        CHECK(glm_st_open(p, &a) == GLM_OK, "open %s: %s", p, glm_errmsg());
        if (a) {
            CHECK(glm_st_count(a) == L[li].n_adapter, "adapter count %zu", glm_st_count(a));
            CHECK(glm_st_metadata(a, "format") && strcmp(glm_st_metadata(a, "format"), "pt") == 0,
                  "format pt");
            for (size_t i = 0; i < glm_st_count(a); i++) {
                const glm_st_tensor *t = glm_st_at(a, i);
                CHECK(t->dtype == GLM_ST_F32 && t->ndim == 2 && strncmp(t->name, "base_model.model.", 17) == 0,
                      "adapter tensor %s", t->name);
                CHECK(glm_st_find(a, t->name) == t, "find %s", t->name);
            }
            glm_st_close(a);
        }
        free(p);

        /* sharded base checkpoint through the directory (index preferred) */
        p = fx(data_dir, L[li].layout);
        glm_st_set *m = NULL;
        CHECK(glm_st_open(p, &m) == GLM_OK, "open %s: %s", p, glm_errmsg());
        if (m) {
            if (L[li].n_model) CHECK(glm_st_count(m) == L[li].n_model, "model count %zu", glm_st_count(m));
            const char *emb = li == 0 ? "transformer.embedding.word_embeddings.weight"
                                      : "model.embed_tokens.weight";
            const glm_st_tensor *t = glm_st_find(m, emb);
            CHECK(t && t->dtype == GLM_ST_BF16 && t->shape[0] == 512 && t->shape[1] == 64, "%s", emb);
            CHECK(glm_st_metadata(m, "format") != NULL, "shard metadata");
            if (li == 0 && t) {
                /* cross-checked at dev time with numpy on the raw bytes */
                float *w = malloc(512 * 64 * sizeof(float));
                CHECK(glm_st_read_f32(m, emb, 2, t->shape, w) == GLM_OK, "read emb");
                double sum = 0;
                for (int i = 0; i < 512 * 64; i++) sum += w[i];
                CHECK(check_close(sum, -5.80075740814209, 1e-12, 1e-9), "emb sum %.15g", sum);
                CHECK(check_close(w[0], -0.04418945, 1e-6, 0) && check_close(w[1], 0.17089844, 1e-6, 0) && check_close(w[2], 0.20605469, 1e-6, 0),
                      "emb[0..2] %g %g %g", w[0], w[1], w[2]);
                free(w);
                const glm_st_tensor *o = glm_st_find(m, "transformer.output_layer.weight");
                CHECK(o && strstr(o->file, "model-00002-of-00002.safetensors"), "shard of output");
            }
            glm_st_close(m);
        }
        free(p);
        /* the index file itself */
        snprintf(rel, sizeof rel, "%s/model.safetensors.index.json", L[li].layout);
        p = fx(data_dir, rel);
        CHECK(glm_st_open(p, &m) == GLM_OK, "open index: %s", glm_errmsg());
        if (m) glm_st_close(m);
        free(p);
    }
}

static void test_roundtrip(void) {
    float f32[6] = {1, -2, 3.5f, 1e-30f, -0.0f, 7};
    uint16_t bf[4] = {0x3f80, 0x4000, 0xc040, 0x0001};
    int64_t i64[3] = {-1, 0, 1LL << 40};
    double f64[1] = {3.141592653589793};
    glm_st_tensor t[5] = {
        {.name = "a.weight", .dtype = GLM_ST_F32, .ndim = 2, .shape = {2, 3}, .numel = 6, .data = f32, .nbytes = 24},
        {.name = "b", .dtype = GLM_ST_BF16, .ndim = 1, .shape = {4}, .numel = 4, .data = bf, .nbytes = 8},
        {.name = "c\"quoted\"", .dtype = GLM_ST_I64, .ndim = 1, .shape = {3}, .numel = 3, .data = i64, .nbytes = 24},
        {.name = "scalar", .dtype = GLM_ST_F64, .ndim = 0, .numel = 1, .data = f64, .nbytes = 8},
        {.name = "empty", .dtype = GLM_ST_F32, .ndim = 2, .shape = {0, 5}, .numel = 0, .data = NULL, .nbytes = 0},
    };
    const char *meta[] = {"format", "pt", "note", "x"};
    char *p = tmp_path("rt.safetensors");
    CHECK(glm_st_write(p, t, 5, meta, 2) == GLM_OK, "write: %s", glm_errmsg());
    /* header length is a multiple of 8 and padded with spaces */
    char *raw;
    size_t len;
    CHECK(glm_read_file(p, &raw, &len) == GLM_OK, "read raw");
    uint64_t hl;
    memcpy(&hl, raw, 8);
    CHECK(hl % 8 == 0, "header length %llu multiple of 8", (unsigned long long)hl);
    CHECK(len == 8 + hl + 24 + 8 + 24 + 8, "file size %zu", len);
    free(raw);
    glm_st_set *s = NULL;
    CHECK(glm_st_open(p, &s) == GLM_OK, "reopen: %s", glm_errmsg());
    if (s) {
        CHECK(glm_st_count(s) == 5, "count");
        for (int i = 0; i < 5; i++) {
            const glm_st_tensor *r = glm_st_at(s, i);
            CHECK(strcmp(r->name, t[i].name) == 0, "order %d: %s", i, r->name);
            CHECK(r->dtype == t[i].dtype && r->ndim == t[i].ndim && r->numel == t[i].numel &&
                      r->nbytes == t[i].nbytes, "%s meta", t[i].name);
            for (int d = 0; d < t[i].ndim; d++) CHECK(r->shape[d] == t[i].shape[d], "shape");
            CHECK(t[i].nbytes == 0 || memcmp(r->data, t[i].data, t[i].nbytes) == 0, "%s bytes", t[i].name);
        }
        CHECK(glm_st_metadata(s, "note") && strcmp(glm_st_metadata(s, "note"), "x") == 0, "meta");
        glm_st_close(s);
    }
    /* invalid writes are refused and leave nothing behind */
    glm_st_tensor bad = t[0];
    bad.nbytes = 20;
    char *q = tmp_path("bad.safetensors");
    CHECK(glm_st_write(q, &bad, 1, NULL, 0) == GLM_ERR_ARG && strstr(glm_errmsg(), "a.weight"),
          "nbytes mismatch refused: %s", glm_errmsg());
    CHECK(!glm_is_file(q), "no file on refused write");
    glm_st_tensor dup[2] = {t[0], t[0]};
    CHECK(glm_st_write(q, dup, 2, NULL, 0) == GLM_ERR_ARG, "duplicate refused");
    free(q);
    free(p);
}

static void test_corrupt(const char *data_dir) {
    /* truncated copy of a real file */
    char *src = fx(data_dir, "chatglm/golden.safetensors");
    char *raw;
    size_t len;
    CHECK(glm_read_file(src, &raw, &len) == GLM_OK, "read golden");
    char *p = tmp_path("truncated.safetensors");
    glm_write_file_atomic(p, raw, len / 2);
    expect_fail(p, GLM_ERR_FORMAT, "beyond the end", "truncated");
    free(p);
    p = tmp_path("tiny.safetensors");
    glm_write_file_atomic(p, raw, 5);
    expect_fail(p, GLM_ERR_FORMAT, "truncated", NULL);
    free(p);
    p = tmp_path("cut_header.safetensors");
    glm_write_file_atomic(p, raw, 100);
    expect_fail(p, GLM_ERR_FORMAT, "header length", "beyond the file");
    free(p);
    /* a flipped byte inside the header JSON */
    p = tmp_path("badjson.safetensors");
    raw[8] = '[';
    raw[9] = '{';
    glm_write_file_atomic(p, raw, len);
    expect_fail(p, GLM_ERR_FORMAT, "bad header JSON", NULL);
    free(p);
    free(raw);
    free(src);
    /* crafted headers */
    p = write_raw("dtype.safetensors", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    expect_fail(p, GLM_ERR_FORMAT, "'w'", "unknown dtype 'F8_E4M3'");
    free(p);
    p = write_raw("span.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16);
    expect_fail(p, GLM_ERR_FORMAT, "'w'", "does not match");
    free(p);
    p = write_raw("overlap.safetensors",
                  "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16);
    expect_fail(p, GLM_ERR_FORMAT, "overlap", "'y'");
    free(p);
    p = write_raw("beyond.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    expect_fail(p, GLM_ERR_FORMAT, "'w'", "beyond the end");
    free(p);
    p = write_raw("shape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
    expect_fail(p, GLM_ERR_FORMAT, "'w'", "shape");
    free(p);
    p = write_raw("notobj.safetensors", "[1,2,3] ", 0);
    expect_fail(p, GLM_ERR_FORMAT, "not a JSON object", NULL);
    free(p);
    /* index problems */
    char *s1 = tmp_path("s1.safetensors");
    float v[2] = {1, 2};
    glm_st_tensor t = {.name = "a", .dtype = GLM_ST_F32, .ndim = 1, .shape = {2}, .numel = 2, .data = v, .nbytes = 8};
    glm_st_write(s1, &t, 1, NULL, 0);
    p = tmp_path("model.safetensors.index.json");
    const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}";
    glm_write_file_atomic(p, idx, strlen(idx));
    expect_fail(p, GLM_ERR_FORMAT, "'b'", "does not hold");
    idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"missing.safetensors\"}}";
    glm_write_file_atomic(p, idx, strlen(idx));
    expect_fail(p, GLM_ERR_IO, "missing.safetensors", NULL);
    idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
    char *s2 = tmp_path("s2.safetensors");
    glm_st_tensor t2[2] = {t, t};
    t2[1].name = "c";
    glm_st_write(s2, t2, 2, NULL, 0); /* s2 also holds "a": duplicate across shards */
    glm_write_file_atomic(p, idx, strlen(idx));
    glm_st_set *s = NULL;
    CHECK(glm_st_open(p, &s) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "twice"), "dup across shards: %s",
          glm_errmsg());
    idx = "{\"weight_map\": 3}";
    glm_write_file_atomic(p, idx, strlen(idx));
    expect_fail(p, GLM_ERR_FORMAT, "weight_map", NULL);
    free(s1);
    free(s2);
    free(p);
    p = tmp_path("does-not-exist.safetensors");
    expect_fail(p, GLM_ERR_IO, "cannot open", NULL);
    free(p);
}

int main(void) {
    const char *data_dir = test_data_dir();
    snprintf(g_tmp, sizeof g_tmp, "/tmp/glm_test_st_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    test_conversions();
    test_fixtures(data_dir);
    test_roundtrip();
    test_corrupt(data_dir);
    glm_rmtree(g_tmp);
    return check_summary("test_safetensors");
}
