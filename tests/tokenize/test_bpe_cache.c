/* tests/tokenize/test_bpe_cache.c: the tiktoken tokenizer's table cache (tokenize/bpe/bpe_cache.c).
 * GLM-4's tokenizer.model loaded without a cache, then with an empty cache directory (built and
 * saved), again (mapped from the cache), after the cache file was corrupted, truncated or
 * replaced by another version's file (ignored, rebuilt, saved again), with an unwritable cache
 * directory, and a second vocabulary beside it (its own file): every load must give the same
 * token bytes, whole-token lookups and backtracking merges for every token, and the same ids for
 * a mixed text.
 * usage: test_bpe_cache   (needs $GLM_FIXTURES/glm4-tokenizer/tokenizer.model) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "tests/check.h"
#include "tokenize/bpe/bpe.h"

static char *model_data;
static size_t model_len;

static glm_bpe *load(const char *data, size_t len) {
    glm_bpe *b = NULL;
    CHECK(glm_bpe_load("tokenizer.model", data, len, &b) == GLM_OK, "load: %s", glm_errmsg());
    return b;
}

/* The same answers as ref for every token (bytes, whole lookup, backtracking merge) and a text. */
static void same_as(const glm_bpe *ref, const glm_bpe *b, const char *what) {
    uint32_t n = glm_bpe_n_ranks(ref);
    CHECK(glm_bpe_n_ranks(b) == n, "%s: %u ranks, not %u", what, glm_bpe_n_ranks(b), n);
    size_t bad = 0;
    glm_u32vec x = {0}, y = {0};
    for (uint32_t r = 0; r < n && bad < 5; r++) {
        const char *p, *q;
        size_t pn, qn;
        bool a = glm_bpe_token(ref, r, &p, &pn), c = glm_bpe_token(b, r, &q, &qn);
        if (a != c || (a && (pn != qn || memcmp(p, q, pn)))) {
            bad++;
            continue;
        }
        if (!a) continue;
        if (glm_bpe_rank(b, p, pn) != glm_bpe_rank(ref, p, pn)) bad++;
        if (pn > 255) continue;
        x.n = y.n = 0;
        glm_status s1 = glm_bpe_merge(ref, p, pn, 1, &x), s2 = glm_bpe_merge(b, p, pn, 1, &y);
        if (s1 != s2 || x.n != y.n || memcmp(x.v, y.v, 4 * x.n)) bad++;
    }
    CHECK(bad == 0, "%s: tokens answer differently from the built tables", what);
    const char *text = "Hello, world! 你好，世界。这是一个测试：缓存的表必须给出同样的结果。 1234567 "
                       "    indented\n\n\tcode(); émigré naïve 日本語のテキスト 🙂";
    x.n = y.n = 0;
    CHECK(glm_bpe_encode(ref, text, strlen(text), &x) == GLM_OK && glm_bpe_encode(b, text, strlen(text), &y) == GLM_OK &&
              x.n == y.n && !memcmp(x.v, y.v, 4 * x.n),
          "%s: the text encodes differently", what);
    glm_vec_free(x);
    glm_vec_free(y);
}

/* The one cache file in dir (malloc'd path) or NULL; *count: how many files. */
static char *cache_file(const char *dir, int *count) {
    DIR *d = opendir(dir);
    char *found = NULL;
    *count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            ++*count;
            free(found);
            found = glm_path_join(dir, e->d_name);
        }
    if (d) closedir(d);
    return found;
}

int main(void) {
    const char *data_dir = test_data_dir();
    char *path = glm_path_join(data_dir, "glm4-tokenizer/tokenizer.model");
    if (!path || glm_read_file(path, &model_data, &model_len) != GLM_OK) {
        printf("SKIPPED: %s not readable\n", path ? path : "(null)");
        return 77;
    }
    char dir[] = "/tmp/glm_bpe_cache_XXXXXX";
    if (!mkdtemp(dir)) {
        printf("SKIPPED: mkdtemp failed\n");
        return 77;
    }
    setenv("GLMTUNE_CACHE_DIR", "off", 1);
    glm_bpe *ref = load(model_data, model_len);
    CHECK(ref && !glm_bpe_from_cache(ref), "cache off: built");
    setenv("GLMTUNE_CACHE_DIR", dir, 1);

    /* cold: built, then saved */
    glm_bpe *b = load(model_data, model_len);
    int nfiles;
    char *cf = cache_file(dir, &nfiles);
    CHECK(b && !glm_bpe_from_cache(b) && cf && nfiles == 1, "cold: built and saved (%d files)", nfiles);
    if (ref && b) same_as(ref, b, "cold");
    glm_bpe_free(b);

    /* warm: mapped */
    b = load(model_data, model_len);
    CHECK(b && glm_bpe_from_cache(b), "warm: from the cache");
    if (ref && b) same_as(ref, b, "warm");

    /* corrupted (one byte in the middle, while a loaded tokenizer still maps the old file):
     * ignored, rebuilt, saved again */
    char *data = NULL;
    size_t len = 0;
    if (cf && glm_read_file(cf, &data, &len) == GLM_OK && len > 1000) {
        data[len / 2] ^= 0x40;
        glm_write_file_atomic(cf, data, len);
        glm_bpe *c = load(model_data, model_len);
        CHECK(c && !glm_bpe_from_cache(c), "corrupted: not used");
        if (ref && c) same_as(ref, c, "after corruption");
        glm_bpe_free(c);
        c = load(model_data, model_len);
        CHECK(c && glm_bpe_from_cache(c), "corrupted: saved again");
        glm_bpe_free(c);
        /* truncated */
        glm_write_file_atomic(cf, data, len - 64);
        c = load(model_data, model_len);
        CHECK(c && !glm_bpe_from_cache(c), "truncated: not used");
        if (ref && c) same_as(ref, c, "after truncation");
        glm_bpe_free(c);
        /* another format version (the header's version field, offset 8) */
        data[len / 2] ^= 0x40;
        data[8] ^= 1;
        glm_write_file_atomic(cf, data, len);
        c = load(model_data, model_len);
        CHECK(c && !glm_bpe_from_cache(c), "other version: not used");
        glm_bpe_free(c);
    }
    free(data);
    glm_bpe_free(b);

    /* another vocabulary: its own file, its own tables */
    {
        glm_charvec v = {0};
        const char *b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int c = 0; c < 256; c++) { /* the 256 bytes, then "ab" and "abc" */
            char line[32];
            int n = snprintf(line, sizeof line, "%c%c==%s %d\n", b64[c >> 2], b64[(c & 3) << 4], "", c);
            for (int i = 0; i < n; i++) glm_vec_push(v, line[i]);
        }
        const char *more = "YWI= 256\nYWJj 257\n";
        for (const char *q = more; *q; q++) glm_vec_push(v, *q);
        glm_bpe *s1 = load(v.v, v.n), *s2 = load(v.v, v.n);
        char *f = cache_file(dir, &nfiles);
        CHECK(s1 && s2 && !glm_bpe_from_cache(s1) && glm_bpe_from_cache(s2) && nfiles == 2,
              "a second vocabulary: its own cache file (%d files)", nfiles);
        CHECK(s2 && glm_bpe_rank(s2, "abc", 3) == 257 && glm_bpe_rank(s2, "ab", 2) == 256, "small vocabulary lookups");
        free(f);
        glm_bpe_free(s1);
        glm_bpe_free(s2);
        glm_vec_free(v);
    }

    /* a cache directory that cannot be made: no cache, no error */
    setenv("GLMTUNE_CACHE_DIR", "/proc/glmtune-no-such-dir", 1);
    b = load(model_data, model_len);
    CHECK(b && !glm_bpe_from_cache(b), "unwritable cache directory: built");
    glm_bpe_free(b);

    glm_bpe_free(ref);
    glm_rmtree(dir);
    free(cf);
    free(path);
    free(model_data);
    return check_summary("test_bpe_cache");
}
