/* tests/dataset/test_long_rows.c: rows of 1,048,576 tokens (the 1M context), end to end through
 * `glmtune tokenize --seq-len 1048576` with real long documents, then the loader streaming them.
 *   - 5 long documents, each the plain texts of tests/fixtures/pretrain/c4_demo.jsonl (English web text)
 *     concatenated 4 times in a different order (~628k tokens: more than 500k, and no two fit one
 *     row), and 40 short ones (single c4 texts), tokenized as pretraining text (--format text);
 *   - each long document lands whole in a row of its own: one document from [gMASK]<sop> to
 *     <|endoftext|>, more than 500k tokens, never cut into windows; the short documents fill the
 *     long rows' room (best fit: 5 rows in all);
 *   - the loader streams the rows: after opening (validating) the shards and after copying out
 *     each row, this process's resident memory is within 3 MiB of what it held with its row
 *     buffers before opening them, while the shards hold more than 20 MiB: a row's mapped pages
 *     (4 MiB of ids, mapped by the kernel in pieces of up to 2 MiB: at most 8 MiB) are resident
 *     only while it is copied (glm_shard_release). Keeping rows, or the files, mapped fails. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "dataset/loader.h"
#include "tests/check.h"

enum { T = 1048576, N_LONG = 5, PASSES = 4, N_SHORT = 40 };

/* this process's resident set (VmRSS) in bytes */
static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb * 1024;
}

int main(void) {
    const char *data_dir = test_data_dir(), *G = getenv("GLMTUNE");
    if (!G) {
        printf("SKIPPED: GLMTUNE (the binary) not set\n");
        return 77;
    }
    char tmp[] = "/tmp/glmlong.XXXXXX", cmd[4096], *c4, *in, *out;
    if (!mkdtemp(tmp)) return 1;
    asprintf(&c4, "%s/pretrain/c4_demo.jsonl", data_dir);
    asprintf(&in, "%s/in.jsonl", tmp);
    asprintf(&out, "%s/shards", tmp);

    /* the input: 5 long texts and 40 short ones */
    char *data = NULL;
    size_t n = 0, nt = 0;
    CHECK(glm_read_file(c4, &data, &n) == GLM_OK, "read %s", c4);
    const char *texts[400];
    json_t *keep = json_array();
    for (char *line = data ? strtok(data, "\n") : NULL; line && nt < 400; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j || !json_string_value(json_object_get(j, "text"))) continue;
        texts[nt++] = json_string_value(json_object_get(j, "text"));
        json_array_append_new(keep, j);
    }
    CHECK(nt == 300, "%zu c4 texts", nt);
    FILE *f = fopen(in, "w");
    for (int d = 0; d < N_LONG && nt; d++) {
        size_t cap = 0, len = 0;
        for (size_t i = 0; i < nt; i++) cap += strlen(texts[i]) + 2;
        cap = cap * PASSES + 64;
        char *doc = malloc(cap);
        len = (size_t)sprintf(doc, "Document %d.", d);
        for (int p = 0; p < PASSES; p++)
            for (size_t i = 0; i < nt; i++) {
                const char *t = texts[(i + (size_t)(37 * d + 101 * p)) % nt];
                doc[len++] = '\n', doc[len++] = '\n';
                memcpy(doc + len, t, strlen(t));
                len += strlen(t);
            }
        doc[len] = 0;
        json_t *o = json_pack("{s:s}", "text", doc);
        char *line = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        json_decref(o);
        free(doc);
    }
    for (int s = 0; s < N_SHORT && nt; s++) {
        json_t *o = json_pack("{s:s}", "text", texts[(size_t)(7 * s + 3) % nt]);
        char *line = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        json_decref(o);
    }
    fclose(f);
    json_decref(keep);
    free(data);
    snprintf(cmd, sizeof cmd, "%s tokenize --quiet --tokenizer %s/glm4-tokenizer --format text --seq-len %d -o %s %s", G,
             data_dir, T, out, in);
    CHECK(system(cmd) == 0, "tokenize --seq-len %d", T);

    /* the row buffers first (touched), then the baseline, then the shards */
    uint32_t *ids = malloc(4 * (size_t)T);
    uint8_t *tg = malloc(T);
    int32_t *pos = malloc(4 * (size_t)T), *doc = malloc(4 * (size_t)T);
    memset(ids, 1, 4 * (size_t)T), memset(tg, 1, T), memset(pos, 1, 4 * (size_t)T), memset(doc, 1, 4 * (size_t)T);
    double base = rss_bytes(), peak = base;
    glm_loader l;
    glm_status st = glm_loader_open(&l, out, "train", 1, true);
    CHECK(st == GLM_OK, "open the shards: %s", glm_errmsg());
    if (st != GLM_OK) return check_summary("test_long_rows");
    double after_open = rss_bytes();
    uint64_t shard_bytes = 0;
    for (size_t k = 0; k < l.n_shards; k++) shard_bytes += l.shards[k].map.size;
    const double slack = 3.0 * 1048576;
    CHECK(l.T == T && l.n_rows == N_LONG, "%llu rows of %u tokens (want %d of %d: the short documents fill the long rows)",
          (unsigned long long)l.n_rows, l.T, N_LONG, T);
    CHECK(shard_bytes > 6 * slack, "the shards (%.1f MiB) are much larger than the bound (%.1f MiB)",
          shard_bytes / 1048576.0, slack / 1048576.0);
    int long_docs = 0, docs = 0, rows_with_long = 0, whole = 1;
    uint32_t got;
    uint64_t rows[8];
    CHECK(glm_loader_next(&l, 8, rows, &got) == GLM_OK && got == l.n_rows, "an epoch's rows");
    for (uint32_t i = 0; i < got; i++) {
        int64_t ntg = 0;
        glm_loader_row(&l, rows[i], ids, tg, pos, doc, &ntg);
        double r = rss_bytes();
        if (r > peak) peak = r;
        if (getenv("GLM_TEST_VERBOSE")) printf("row %u: resident %.2f MiB above the buffers\n", i, (r - base) / 1048576.0);
        int longs = 0, t0 = 0;
        for (int t = 1; t <= T; t++) {
            if (t < T && doc[t] == doc[t - 1]) continue;
            int len = t - t0;
            int padding = pos[t0] == 0 && ids[t0] == 0 && len > 1 && ids[t0 + 1] == 0; /* the row's padding */
            if (!padding) {
                docs++;
                if (len > 500000) {
                    longs++;
                    /* one whole document: the text's prefix, every token after it a target, its end token */
                    whole &= ids[t0] == 151331 && ids[t0 + 1] == 151333 && ids[t - 1] == 151329 && pos[t - 1] == len - 1;
                }
            }
            t0 = t;
        }
        long_docs += longs;
        rows_with_long += longs == 1;
    }
    CHECK(long_docs == N_LONG && rows_with_long == N_LONG && whole,
          "%d documents of more than 500k tokens, one per row (%d rows), each whole ([gMASK]<sop> ... <|endoftext|>)",
          long_docs, rows_with_long);
    CHECK(docs == N_LONG + N_SHORT, "%d documents in the rows (want %d)", docs, N_LONG + N_SHORT);
    CHECK(after_open - base < slack, "opening (and validating) %.1f MiB of shards keeps %.2f MiB resident",
          shard_bytes / 1048576.0, (after_open - base) / 1048576.0);
    CHECK(peak - base < slack, "streaming %u rows: resident memory grew by %.2f MiB after a row (bound %.2f MiB)", got,
          (peak - base) / 1048576.0, slack / 1048576.0);
    if (getenv("GLM_TEST_VERBOSE"))
        printf("shards %.1f MiB; resident above the buffers: after open %.2f MiB, peak while streaming %.2f MiB\n",
               shard_bytes / 1048576.0, (after_open - base) / 1048576.0, (peak - base) / 1048576.0);
    glm_loader_close(&l);
    free(ids), free(tg), free(pos), free(doc);
    if (!check_failed_) glm_rmtree(tmp);
    else fprintf(stderr, "outputs kept in %s\n", tmp);
    free(c4), free(in), free(out);
    return check_summary("test_long_rows");
}
