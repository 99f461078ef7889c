/* tests/bench/bench_tokenizer.c: encoder throughput of glmtune's tokenizer.
 *
 * usage: bench_tokenizer --text FILE [--tokenizer DIR] [--threads 1,2] [--min-time S] [--label NAME]
 *
 * Reads FILE (UTF-8 text) and reports, as "label threads MB/s ids fnv1a64(ids)" lines:
 *   - threads=1: the whole file encoded in one glm_tokenizer_encode call (as tiktoken's
 *     encode_ordinary(text) does), best of repeated runs for at least --min-time seconds;
 *   - threads=N: the file cut into ~1 MiB chunks at newlines, the chunks shared among N threads
 *     (each encodes whole chunks on one shared tokenizer); wall time of the whole batch.
 * MB = 1e6 bytes of input text. The id hash lets bench_tokenizer.sh compare with tiktoken. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "tokenize/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *p;
    size_t n;
} chunk;

typedef struct {
    const glm_tokenizer *tok;
    const chunk *chunks;
    size_t n_chunks;
    atomic_size_t *next;
    size_t ids;
    int failed;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    glm_u32vec ids = {0};
    for (;;) {
        size_t i = atomic_fetch_add(w->next, 1);
        if (i >= w->n_chunks) break;
        ids.n = 0;
        if (glm_tokenizer_encode(w->tok, w->chunks[i].p, w->chunks[i].n, &ids) != GLM_OK) {
            fprintf(stderr, "encode failed: %s\n", glm_errmsg());
            w->failed = 1;
            break;
        }
        w->ids += ids.n;
    }
    glm_vec_free(ids);
    return NULL;
}

int main(int argc, char **argv) {
    const char *text_path = NULL, *tok_dir = NULL, *threads_arg = "1,2", *label = "text";
    double min_time = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--text") && i + 1 < argc) text_path = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads_arg = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc) min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else {
            fprintf(stderr, "usage: bench_tokenizer --text FILE [--tokenizer DIR] [--threads 1,2] "
                            "[--min-time S] [--label NAME]\n");
            return 2;
        }
    }
    char def_dir[4096];
    if (!tok_dir) {
        const char *sh = getenv("GLM_SHARED");
        snprintf(def_dir, sizeof def_dir, "%s/glm4-tokenizer", sh ? sh : "../shared");
        tok_dir = def_dir;
    }
    if (!text_path) {
        fprintf(stderr, "bench_tokenizer: --text FILE is required\n");
        return 2;
    }
    glm_tokenizer *tok;
    double t0 = now_s();
    if (glm_tokenizer_load(tok_dir, &tok) != GLM_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", glm_errmsg());
        return 1;
    }
    double load_s = now_s() - t0;
    char *text;
    size_t len;
    if (glm_read_file(text_path, &text, &len) != GLM_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", glm_errmsg());
        return 1;
    }
    fprintf(stderr, "tokenizer %s loaded in %.3f s; text %s: %zu bytes\n", tok_dir, load_s, text_path, len);

    /* single call over the whole text */
    glm_u32vec ids = {0};
    double best = 1e30, spent = 0;
    int reps = 0;
    while (spent < min_time || reps < 2) {
        ids.n = 0;
        t0 = now_s();
        if (glm_tokenizer_encode(tok, text, len, &ids) != GLM_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", glm_errmsg());
            return 1;
        }
        double dt = now_s() - t0;
        spent += dt;
        reps++;
        if (dt < best) best = dt;
    }
    uint64_t h = glm_fnv1a64(GLM_FNV1A64_INIT, ids.v, ids.n * sizeof *ids.v);
    printf("glmtune %s whole 1 %.2f %zu %016llx\n", label, len / best / 1e6, ids.n, (unsigned long long)h);
    fflush(stdout);

    /* chunked, threads */
    GLM_VEC(chunk) chunks = {0};
    for (size_t p = 0; p < len;) {
        size_t e = p + (1u << 20) < len ? p + (1u << 20) : len;
        while (e < len && text[e - 1] != '\n') e++;
        glm_vec_push(chunks, ((chunk){text + p, e - p}));
        p = e;
    }
    for (const char *a = threads_arg; *a;) {
        int nt = atoi(a);
        if (nt < 1 || nt > 256) {
            fprintf(stderr, "bench_tokenizer: bad thread count in %s\n", threads_arg);
            return 2;
        }
        double bt = 1e30, sp = 0;
        int r = 0;
        size_t nids = 0;
        while (sp < min_time || r < 2) {
            atomic_size_t next = 0;
            pthread_t th[256];
            worker w[256];
            t0 = now_s();
            for (int i = 0; i < nt; i++) {
                w[i] = (worker){tok, chunks.v, chunks.n, &next, 0, 0};
                pthread_create(&th[i], NULL, work, &w[i]);
            }
            nids = 0;
            for (int i = 0; i < nt; i++) {
                pthread_join(th[i], NULL);
                nids += w[i].ids;
                if (w[i].failed) return 1;
            }
            double dt = now_s() - t0;
            sp += dt;
            r++;
            if (dt < bt) bt = dt;
        }
        printf("glmtune %s chunks %d %.2f %zu -\n", label, nt, len / bt / 1e6, nids);
        fflush(stdout);
        while (*a && *a != ',') a++;
        if (*a == ',') a++;
    }
    glm_vec_free(chunks);
    glm_vec_free(ids);
    free(text);
    glm_tokenizer_free(tok);
    return 0;
}
