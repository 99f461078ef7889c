/* Reader tests on inputs made at test time: every layout (array, JSON Lines, single object, BOM,
 * CRLF, no final newline, blank lines), every compression and archive kind, a ~100 MB one-line
 * array read in bounded memory, and broken inputs (invalid UTF-8, lone surrogate, truncated
 * JSON, truncated .gz, empty file, not JSON, oversize record). Every message is checked to name
 * the file and the record / line. */
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/rng.h"
#include "common/status.h"
#include "dataset/jsonsplit.h"
#include "common/utf8.h"
#include "dataset/reader.h"
#include "tests/check.h"

static char g_dir[256];

static char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

static void write_file(const char *name, const char *data, size_t n) {
    FILE *f = fopen(tpath(name), "wb");
    if (!f) {
        perror(name);
        exit(1);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}
static void write_str(const char *name, const char *s) { write_file(name, s, strlen(s)); }

typedef struct result {
    glm_status st;        /* open or final status (GLM_OK when the stream ended) */
    char err[2048];
    int n, n_problems;
    char reasons[16][32];
    char details[16][512];
    char sources[16][256];
    long long lines[16], offsets[16], index[16];
    json_t *values[16];
    size_t n_sources;
    size_t n_empty;
} result;

static void result_free(result *r) {
    for (int i = 0; i < 16; i++) json_decref(r->values[i]);
    memset(r, 0, sizeof *r);
}

static void read_all(result *res, const char *const *in, size_t n, const char *filter,
                     size_t max_record) {
    memset(res, 0, sizeof *res);
    glm_reader *r = NULL;
    res->st = glm_reader_open(in, n, filter, &r);
    if (res->st != GLM_OK) {
        snprintf(res->err, sizeof res->err, "%s", glm_errmsg());
        return;
    }
    if (max_record) glm_reader_set_max_record(r, max_record);
    glm_record rec;
    glm_status st;
    while ((st = glm_reader_next(r, &rec)) == GLM_OK) {
        int i = res->n++;
        if (rec.reason) res->n_problems++;
        if (i < 16) {
            snprintf(res->reasons[i], 32, "%s", rec.reason ? rec.reason : "");
            snprintf(res->details[i], 512, "%s", rec.detail);
            snprintf(res->sources[i], 256, "%s", rec.source);
            res->lines[i] = rec.line;
            res->offsets[i] = rec.offset;
            res->index[i] = rec.index;
            res->values[i] = rec.value;
        } else {
            json_decref(rec.value);
        }
    }
    res->st = st == GLM_EOF ? GLM_OK : st;
    if (st != GLM_EOF) snprintf(res->err, sizeof res->err, "%s", glm_errmsg());
    res->n_sources = glm_reader_n_sources(r);
    res->n_empty = glm_reader_n_empty(r);
    glm_reader_close(r);
}

static void read1(result *res, const char *name) {
    const char *in[1] = {tpath(name)};
    read_all(res, in, 1, NULL, 0);
}

static long long ival(json_t *v, const char *k) { return json_integer_value(json_object_get(v, k)); }

/* ~100 MB array on one line: memory must stay bounded. */
static void test_big_array(void) {
    FILE *f = fopen(tpath("big.json"), "wb");
    char elem[1100];
    char pad[1001];
    memset(pad, 'x', 1000);
    pad[1000] = 0;
    const int N = 100000;
    fputc('[', f);
    for (int i = 0; i < N; i++) {
        int k = snprintf(elem, sizeof elem, "%s{\"i\": %d, \"text\": \"%s\\n\\\"q\\\" [{,}]\"}",
                         i ? ", " : "", i, pad);
        fwrite(elem, 1, (size_t)k, f);
    }
    fputs("]", f);
    fclose(f);
    struct stat sb;
    stat(tpath("big.json"), &sb);
    const char *in[1] = {tpath("big.json")};
    glm_reader *r = NULL;
    CHECK(glm_reader_open(in, 1, NULL, &r) == GLM_OK, "%s", glm_errmsg());
    CHECK(glm_reader_total_bytes(r) == sb.st_size, "total bytes");
    glm_record rec;
    long long n = 0, bad = 0, sum = 0;
    glm_status st;
    while ((st = glm_reader_next(r, &rec)) == GLM_OK) {
        if (rec.reason || ival(rec.value, "i") != n) bad++;
        sum += ival(rec.value, "i");
        n++;
        json_decref(rec.value);
    }
    CHECK(st == GLM_EOF, "big: %s", glm_errmsg());
    CHECK(glm_reader_bytes_read(r) == sb.st_size, "bytes read %lld of %lld",
          (long long)glm_reader_bytes_read(r), (long long)sb.st_size);
    glm_reader_close(r);
    CHECK(n == N && bad == 0, "big: %lld records, %lld bad", n, bad);
    CHECK(sum == (long long)N * (N - 1) / 2, "big: order");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("big array: %lld bytes, %lld records, peak RSS %ld KiB\n", (long long)sb.st_size, n,
           ru.ru_maxrss);
#ifdef __SANITIZE_ADDRESS__ /* AddressSanitizer's shadow memory and quarantine are in the RSS: no bound there */
    printf("peak RSS not checked (AddressSanitizer build)\n");
#else
    CHECK(ru.ru_maxrss < 64 * 1024, "peak RSS %ld KiB >= 64 MiB", ru.ru_maxrss);
#endif
    remove(tpath("big.json"));
}

/* An archive written with libarchive's writer. */
static void make_archive(const char *name, int format, int filter, const char *const *members,
                         const char *const *data, const size_t *lens, int n) {
    struct archive *a = archive_write_new();
    archive_write_set_format(a, format);
    if (filter) archive_write_add_filter(a, filter);
    archive_write_open_filename(a, tpath(name));
    for (int i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, members[i]);
        archive_entry_set_size(e, (la_int64_t)lens[i]);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_write_header(a, e);
        archive_write_data(a, data[i], lens[i]);
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
}

static char *slurp(const char *name, size_t *n) {
    char *d = NULL;
    if (glm_read_file(tpath(name), &d, n) != GLM_OK) return NULL;
    return d;
}

/* Splits s[0..n) fed in blocks of `block` bytes; appends one line per record (index, line,
 * offset, problem, what, bytes) to *out, or the error. */
static void split_all(const char *s, size_t n, size_t block, bool lines_hint, glm_charvec *out) {
    glm_jsonsplit js;
    glm_jsonsplit_init(&js, 4096, lines_hint);
    js.byte_by_byte = block == 1; /* the reference */
    char head[512];
    glm_status st = GLM_OK;
    for (size_t i = 0; i < n && st == GLM_OK;) {
        size_t k = n - i < block ? n - i : block, off = 0;
        while (off < k && st == GLM_OK) {
            size_t used = 0;
            glm_jsplit_rec rec;
            bool have = false;
            st = glm_jsonsplit_feed(&js, s + i + off, k - off, &used, &rec, &have);
            off += used;
            if (st == GLM_OK && have) {
                int hl = snprintf(head, sizeof head, "%lld %lld %lld %d %s %zu|", (long long)rec.index, (long long)rec.line,
                                  (long long)rec.offset, (int)rec.problem, rec.what, rec.n);
                glm_vec_reserve(*out, (size_t)hl + (rec.data ? rec.n : 0) + 2);
                memcpy(out->v + out->n, head, (size_t)hl);
                out->n += (size_t)hl;
                if (rec.data) memcpy(out->v + out->n, rec.data, rec.n), out->n += rec.n;
                out->v[out->n++] = '\n';
            }
        }
        i += k;
    }
    glm_jsplit_rec rec;
    bool have = false;
    if (st == GLM_OK) st = glm_jsonsplit_finish(&js, &rec, &have);
    int hl = snprintf(head, sizeof head, "end %d %d %s\n", st, have, st == GLM_OK ? "" : glm_errmsg());
    glm_vec_reserve(*out, (size_t)hl + 1);
    memcpy(out->v + out->n, head, (size_t)hl + 1);
    out->n += (size_t)hl;
    glm_jsonsplit_free(&js);
}

/* The splitter skips string contents several bytes at a time: fed in blocks of any size it must
 * cut random streams (arrays and JSON Lines; strings with escapes, brackets, commas, raw
 * newlines, non-ASCII; broken records; records over the size limit) into the same records,
 * lines, offsets and problems as its byte-by-byte state machine (byte_by_byte, fed one byte at a
 * time: the reference). */
static void test_split_blocks(void) {
    static const char *const PARTS[] = {
        "{\"a\": ", "\"plain text that runs on for a while\"", "\"esc \\\" \\\\ \\n\"", "\"[{,}]\"", "\"\xe4\xb8\xad\xe6\x96\x87\"",
        "\"a\nb\"", "[1, 2]", "}", "]", ",", "\n", " ", "\"\\\\\"", "{\"k\": [\"v\", {\"x\": \"}\"}]}", "\r\n", "\"unterminated",
        "\\", "\"", "123", "null", "\xef\xbb\xbf",
    };
    glm_rng r;
    glm_rng_seed(&r, 99, 0);
    static const size_t blocks[] = {2, 3, 7, 13, 64, 4096, 1 << 20};
    size_t bad = 0, streams = 0, records = 0;
    for (int t = 0; t < 400; t++) {
        glm_charvec in = {0};
        bool array = glm_rng_below(&r, 2);
        if (array) glm_vec_push(in, '[');
        size_t parts = 5 + glm_rng_below(&r, 200);
        for (size_t k = 0; k < parts; k++) {
            const char *p = PARTS[glm_rng_below(&r, sizeof PARTS / sizeof *PARTS)];
            size_t pl = strlen(p);
            if (glm_rng_below(&r, 50) == 0) { /* a long string: over the 4096-byte record limit sometimes */
                size_t L = 100 + glm_rng_below(&r, 6000);
                glm_vec_reserve(in, L + 2);
                in.v[in.n++] = '"';
                for (size_t q = 0; q < L; q++) in.v[in.n++] = (char)('a' + q % 26);
                in.v[in.n++] = '"';
            }
            glm_vec_reserve(in, pl);
            memcpy(in.v + in.n, p, pl);
            in.n += pl;
        }
        if (array) glm_vec_push(in, ']');
        glm_charvec want = {0};
        bool hint = glm_rng_below(&r, 2);
        split_all(in.v, in.n, 1, hint, &want);
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
            glm_charvec got = {0};
            split_all(in.v, in.n, blocks[b], hint, &got);
            if (got.n != want.n || memcmp(got.v, want.v, got.n)) {
                if (bad++ < 2)
                    fprintf(stderr, "blocks of %zu differ from byte by byte:\n%.*s\n---\n%.*s\n", blocks[b], (int)got.n, got.v,
                            (int)want.n, want.v);
            }
            glm_vec_free(got);
        }
        for (size_t q = 0; q < want.n; q++) records += want.v[q] == '|';
        streams++;
        glm_vec_free(want);
        glm_vec_free(in);
    }
    CHECK(bad == 0 && records > 2000, "splitting in blocks: %zu of %zu streams differ (%zu records)", bad, streams, records);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/glm_test_reader.XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    result r;

    test_big_array();

    /* --- layouts */
    write_str("arr.json", "[\n  {\"i\": 0},\n  {\"i\": 1, \"s\": \"a,]}\\\"\"}\n]\n");
    read1(&r, "arr.json");
    CHECK(r.st == GLM_OK && r.n == 2 && r.n_problems == 0, "array: %d %s", r.n, r.err);
    CHECK(r.lines[1] == 3 && r.offsets[1] == 16, "array line/offset %lld %lld", r.lines[1],
          r.offsets[1]);
    CHECK(ival(r.values[1], "i") == 1, "array value");
    result_free(&r);

    write_str("lines.jsonl", "{\"i\": 0}\r\n\r\n\n{\"i\": 1}\r\n  {\"i\": 2}");
    read1(&r, "lines.jsonl");
    CHECK(r.st == GLM_OK && r.n == 3 && r.n_problems == 0, "jsonl crlf: %d %s", r.n, r.err);
    CHECK(r.lines[0] == 1 && r.lines[1] == 4 && r.lines[2] == 5, "jsonl lines %lld %lld %lld",
          r.lines[0], r.lines[1], r.lines[2]);
    CHECK(ival(r.values[2], "i") == 2, "last line without newline");
    result_free(&r);

    write_str("obj.json", "{\n  \"conversations\": [\n    {\"from\": \"human\"}\n  ]\n}\n");
    read1(&r, "obj.json");
    CHECK(r.st == GLM_OK && r.n == 1 && r.n_problems == 0, "single object: %d %s", r.n, r.err);
    result_free(&r);

    write_str("bom.json", "\xEF\xBB\xBF[{\"i\": 0}, {\"i\": 1}]");
    read1(&r, "bom.json");
    CHECK(r.st == GLM_OK && r.n == 2 && r.n_problems == 0, "BOM: %d %s", r.n, r.err);
    CHECK(r.offsets[0] == 4, "offsets count the BOM: %lld", r.offsets[0]);
    result_free(&r);

    write_str("bomlines.jsonl", "\xEF\xBB\xBF{\"i\": 0}\n{\"i\": 1}\n");
    read1(&r, "bomlines.jsonl");
    CHECK(r.st == GLM_OK && r.n == 2 && r.n_problems == 0, "BOM jsonl: %d %s", r.n, r.err);
    result_free(&r);

    write_str("empty.json", "");
    read1(&r, "empty.json");
    CHECK(r.st == GLM_OK && r.n == 0 && r.n_sources == 1 && r.n_empty == 1, "empty file: %d %s", r.n, r.err);
    result_free(&r);
    write_str("blank.jsonl", "\n \r\n\n");
    read1(&r, "blank.jsonl");
    CHECK(r.st == GLM_OK && r.n == 0, "blank lines only: %d %s", r.n, r.err);
    result_free(&r);
    write_str("emptyarr.json", "[ ]\n");
    read1(&r, "emptyarr.json");
    CHECK(r.st == GLM_OK && r.n == 0, "empty array: %d %s", r.n, r.err);
    result_free(&r);

    /* --- compressions (the command-line tools), content detection regardless of name */
    const char *jl = "{\"i\": 0}\n{\"i\": 1}\n{\"i\": 2}\n";
    const char *tools[4][2] = {{"gzip", "gz"}, {"zstd", "zst"}, {"xz", "xz"}, {"bzip2", "bz2"}};
    for (int t = 0; t < 4; t++) {
        char name[64], cmd[1024];
        snprintf(name, sizeof name, "c_%s.jsonl", tools[t][1]);
        write_str(name, jl);
        snprintf(cmd, sizeof cmd, "%s -q -f %s", tools[t][0], tpath(name));
        if (system(cmd) != 0) {
            printf("(%s not installed: skipping .%s)\n", tools[t][0], tools[t][1]);
            continue;
        }
        snprintf(name, sizeof name, "c_%s.jsonl.%s", tools[t][1], tools[t][1]);
        read1(&r, name);
        CHECK(r.st == GLM_OK && r.n == 3 && r.n_problems == 0, "%s: %d %s", name, r.n, r.err);
        CHECK(strstr(r.sources[0], name) != NULL, "source %s", r.sources[0]);
        result_free(&r);
    }

    /* --- archives: members, nested compression, non-JSON members skipped */
    system("true");
    write_str("inner.jsonl", "{\"i\": 10}\n{\"i\": 11}\n");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "gzip -q -f -k %s", tpath("inner.jsonl"));
    int have_gz = system(cmd) == 0;
    size_t gzlen = 0;
    char *gz = have_gz ? slurp("inner.jsonl.gz", &gzlen) : NULL;
    const char *members[] = {"data/a.jsonl", "README.txt", "data/b.json", "data/c.jsonl.gz"};
    const char *mdata[] = {"{\"i\": 0}\n{\"i\": 1}\n", "not json", "[{\"i\": 2}]", gz};
    size_t mlens[] = {strlen(mdata[0]), strlen(mdata[1]), strlen(mdata[2]), gzlen};
    int nm = gz ? 4 : 3;
    struct {
        const char *name;
        int format, filter;
    } kinds[] = {{"a.tar", ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 0},
                 {"a.tar.gz", ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP},
                 {"a.tar.xz", ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_XZ},
                 {"a.zip", ARCHIVE_FORMAT_ZIP, 0}};
    for (int k = 0; k < 4; k++) {
        make_archive(kinds[k].name, kinds[k].format, kinds[k].filter, members, mdata, mlens, nm);
        read1(&r, kinds[k].name);
        int expect = gz ? 5 : 3;
        CHECK(r.st == GLM_OK && r.n == expect && r.n_problems == 0, "%s: %d records %s",
              kinds[k].name, r.n, r.err);
        char want[600];
        snprintf(want, sizeof want, "%s:data/b.json", tpath(kinds[k].name));
        CHECK(r.n >= 3 && strcmp(r.sources[2], want) == 0, "member source %s", r.sources[2]);
        CHECK(r.n >= 3 && r.index[2] == 0, "index restarts per member");
        if (gz) CHECK(r.n == 5 && ival(r.values[4], "i") == 11, "nested .jsonl.gz member");
        CHECK(r.n_sources == (size_t)(gz ? 3 : 2), "%s: %zu sources", kinds[k].name, r.n_sources);
        result_free(&r);
    }
    free(gz);

    /* --- broken records */
    write_str("utf8.jsonl", "{\"i\": 0}\n{\"s\": \"ab\xff\"}\n{\"i\": 2}\n");
    read1(&r, "utf8.jsonl");
    CHECK(r.st == GLM_OK && r.n == 3 && r.n_problems == 1, "utf8: %d %s", r.n, r.err);
    CHECK(!strcmp(r.reasons[1], "invalid_utf8"), "reason %s", r.reasons[1]);
    CHECK(strstr(r.details[1], tpath("utf8.jsonl")) && strstr(r.details[1], ":2:") &&
          strstr(r.details[1], "record 1") && strstr(r.details[1], "offset 18") &&
          strstr(r.details[1], "hint"), "detail: %s", r.details[1]);
    result_free(&r);

    write_str("sur.json", "[{\"s\": \"ok \\ud83d\\ude00\"}, {\"s\": \"bad \\ud800 x\"}, "
                          "{\"s\": \"bad \\udc00\"}]");
    read1(&r, "sur.json");
    CHECK(r.st == GLM_OK && r.n == 3 && r.n_problems == 2, "surrogates: %d %s", r.n, r.err);
    CHECK(!strcmp(r.reasons[1], "lone_surrogate") && !strcmp(r.reasons[2], "lone_surrogate"),
          "reasons %s %s", r.reasons[1], r.reasons[2]);
    CHECK(strstr(r.details[1], "sur.json:1:") && strstr(r.details[1], "record 1"), "detail %s",
          r.details[1]);
    result_free(&r);

    /* a JSON Lines line cut off, a syntax error, a scalar, text after a record (the line is one
     * bad record, named by line:column) */
    write_str("trunc.jsonl", "{\"i\": 0}\n{\"i\": [1, 2\n{\"i\": 2}\n{\"i\" 3}\n\"str\"\n"
                             "{\"i\": 5} x\n{\"i\": 6}\n{\"i\": 7");
    read1(&r, "trunc.jsonl");
    CHECK(r.st == GLM_OK && r.n == 8, "trunc jsonl: %d %s", r.n, r.err);
    const char *want_reason[] = {"", "invalid_json", "", "invalid_json", "not_an_object",
                                 "invalid_json", "", "truncated_json"};
    for (int i = 0; i < 8 && i < r.n; i++)
        CHECK(!strcmp(r.reasons[i], want_reason[i]), "line record %d: %s, want %s (%s)", i,
              r.reasons[i], want_reason[i], r.details[i]);
    CHECK(r.lines[2] == 3 && ival(r.values[2], "i") == 2, "resync at the next line");
    CHECK(strstr(r.details[3], "trunc.jsonl:4:") && strstr(r.details[3], "record 3"), "detail %s",
          r.details[3]);
    CHECK(strstr(r.details[5], "trunc.jsonl:6:10: record 5") && strstr(r.details[5], "unexpected 'x' at column 10"),
          "detail %s", r.details[5]);
    CHECK(r.lines[6] == 7 && ival(r.values[6], "i") == 6, "the next line is record 6: line %lld",
          (long long)r.lines[6]);
    CHECK(strstr(r.details[7], "trunc.jsonl:8:") && strstr(r.details[7], "cut off"), "detail %s",
          r.details[7]);
    result_free(&r);

    /* a trailing comma on a line: that line is one bad record, the next ones keep their numbers */
    write_str("comma.jsonl", "{\"i\": 0}\n{\"i\": 1},\n{\"i\": 2}\n{\"i\": 3}, \r\n{\"i\": 4}");
    read1(&r, "comma.jsonl");
    CHECK(r.st == GLM_OK && r.n == 5 && r.n_problems == 2, "trailing commas: %d records, %d problems %s", r.n,
          r.n_problems, r.err);
    CHECK(r.n == 5 && !strcmp(r.reasons[1], "invalid_json") && strstr(r.details[1], "comma.jsonl:2:9: record 1") &&
              strstr(r.details[1], "trailing comma"), "trailing comma named by line:column: %s", r.details[1]);
    CHECK(r.n == 5 && ival(r.values[2], "i") == 2 && r.lines[2] == 3 && strstr(r.details[3], "comma.jsonl:4:9: record 3") &&
              ival(r.values[4], "i") == 4, "the records after it: numbered as their lines (%s)", r.n == 5 ? r.details[3] : "");
    result_free(&r);

    /* an array element with a syntax error: resync at the next element */
    write_str("arrsyn.json", "[{\"i\": 0}, {\"i\" 1}, {\"i\": 2}, 3, [4], , {\"i\": 6},]");
    read1(&r, "arrsyn.json");
    CHECK(r.st == GLM_OK && r.n == 8, "array resync: %d %s", r.n, r.err);
    const char *want2[] = {"", "invalid_json", "", "not_an_object", "not_an_object",
                           "invalid_json", "", "invalid_json"};
    for (int i = 0; i < 8 && i < r.n; i++)
        CHECK(!strcmp(r.reasons[i], want2[i]), "array record %d: %s want %s (%s)", i,
              r.reasons[i], want2[i], r.details[i]);
    result_free(&r);

    /* a truncated array (head -c of a download): the complete records are kept, the cut-off
     * tail is one truncated_json problem naming file, line, record and byte offsets */
    write_str("arrtrunc.json", "[\n{\"i\": 0},\n{\"i\": [1,");
    read1(&r, "arrtrunc.json");
    CHECK(r.st == GLM_OK && r.n == 2 && r.n_problems == 1, "truncated array: %d %s", r.n, r.err);
    CHECK(r.n == 2 && !strcmp(r.reasons[0], "") && ival(r.values[0], "i") == 0 &&
          !strcmp(r.reasons[1], "truncated_json"), "truncated array: kept %s, tail %s", r.reasons[0], r.reasons[1]);
    CHECK(strstr(r.details[1], "arrtrunc.json:3:") && strstr(r.details[1], "record 1") &&
          strstr(r.details[1], "offset 12") && strstr(r.details[1], "byte offset 21") &&
          strstr(r.details[1], "cut off") && strstr(r.details[1], "hint"), "detail: %s", r.details[1]);
    result_free(&r);
    /* cut between two records: the records are all kept, the missing ']' is the problem */
    write_str("arrcut.json", "[{\"i\": 0}, {\"i\": 1},\n");
    read1(&r, "arrcut.json");
    CHECK(r.st == GLM_OK && r.n == 3 && r.n_problems == 1, "cut array: %d %s", r.n, r.err);
    CHECK(r.n == 3 && ival(r.values[1], "i") == 1 && !strcmp(r.reasons[2], "truncated_json") &&
          strstr(r.details[2], "arrcut.json:2:") && strstr(r.details[2], "byte offset 21") &&
          strstr(r.details[2], "after 2 records"), "cut array detail: %s", r.n == 3 ? r.details[2] : "");
    result_free(&r);
    /* cut right after an element's closing brace (no ',' or ']' after it): that element is
     * whole and kept; the missing ']' is the problem */
    write_str("arrbrace.json", "[{\"i\": 0}, {\"i\": 1, \"j\": [2]}\n");
    read1(&r, "arrbrace.json");
    CHECK(r.st == GLM_OK && r.n == 3 && r.n_problems == 1, "array cut after a brace: %d %s", r.n, r.err);
    CHECK(r.n == 3 && !strcmp(r.reasons[1], "") && ival(r.values[1], "i") == 1 &&
          !strcmp(r.reasons[2], "truncated_json") && strstr(r.details[2], "after 2 records"),
          "array cut after a brace: kept %s, tail %s", r.n == 3 ? r.reasons[1] : "", r.n == 3 ? r.details[2] : "");
    result_free(&r);
    write_str("arrtail.json", "[{\"i\": 0}] {\"i\": 1}");
    read1(&r, "arrtail.json");
    CHECK(r.st == GLM_ERR_FORMAT && strstr(r.err, "arrtail.json") && strstr(r.err, "offset 11"),
          "text after array: %s", r.err);
    result_free(&r);
    write_str("text.json", "hello world\n");
    read1(&r, "text.json");
    CHECK(r.st == GLM_ERR_FORMAT && strstr(r.err, "text.json") && strstr(r.err, "not JSON"),
          "not JSON: %s", r.err);
    result_free(&r);
    write_file("utf16.json", "\xff\xfe[\0{\0", 6);
    read1(&r, "utf16.json");
    CHECK(r.st == GLM_ERR_FORMAT && strstr(r.err, "UTF-16"), "utf16: %s", r.err);
    result_free(&r);

    /* a truncated .gz: fatal, names the file */
    {
        FILE *f = fopen(tpath("tr.jsonl"), "wb");
        for (int i = 0; i < 20000; i++) fprintf(f, "{\"i\": %d, \"t\": \"%08x\"}\n", i, i * 2654435761u);
        fclose(f);
        snprintf(cmd, sizeof cmd, "gzip -q -f %s", tpath("tr.jsonl"));
        if (system(cmd) == 0) {
            size_t n = 0;
            char *d = slurp("tr.jsonl.gz", &n);
            write_file("tr.jsonl.gz", d, n / 2);
            free(d);
            read1(&r, "tr.jsonl.gz");
            CHECK(r.st == GLM_ERR_FORMAT && strstr(r.err, "tr.jsonl.gz") &&
                  strstr(r.err, "hint"), "truncated gz: %d records, %s", r.n, r.err);
            CHECK(r.n > 0 && r.n < 20000, "records before the cut: %d", r.n);
            printf("truncated .gz message: %s\n", r.err);
            result_free(&r);
        }
    }

    /* oversize record: skipped, the next one is read */
    {
        char *big = malloc(6000);
        int k = snprintf(big, 6000, "[{\"i\": 0}, {\"s\": \"");
        memset(big + k, 'y', 5000);
        snprintf(big + k + 5000, 6000 - k - 5000, "\"}, {\"i\": 2}]");
        write_str("oversize.json", big);
        free(big);
        const char *in[1] = {tpath("oversize.json")};
        read_all(&r, in, 1, NULL, 1000);
        CHECK(r.st == GLM_OK && r.n == 3 && !strcmp(r.reasons[1], "record_too_large") &&
              ival(r.values[2], "i") == 2, "oversize: %d %s %s", r.n, r.reasons[1], r.err);
        CHECK(strstr(r.details[1], "oversize.json:1:") && strstr(r.details[1], "record 1"),
              "detail %s", r.details[1]);
        result_free(&r);
    }

    /* --- mixed layouts, folders, globs, missing inputs */
    glm_mkdir_p(tpath("mix/sub"));
    write_str("mix/b.jsonl", "{\"i\": 1}\n{\"i\": 2}\n");
    write_str("mix/a.json", "[{\"i\": 0}]");
    write_str("mix/sub/c.json", "{\"i\": 3}");
    write_str("mix/.hidden.json", "{\"i\": 99}");
    write_str("mix/notes.txt", "hello");
    {
        const char *in[1] = {tpath("mix")};
        read_all(&r, in, 1, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 4 && r.n_problems == 0, "folder walk: %d %s", r.n, r.err);
        for (int i = 0; i < 4 && i < r.n; i++)
            CHECK(ival(r.values[i], "i") == i, "sorted order: record %d is %lld", i,
                  ival(r.values[i], "i"));
        result_free(&r);
        const char *g[1] = {tpath("mix/*.json*")};
        read_all(&r, g, 1, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 3, "glob: %d %s", r.n, r.err);
        result_free(&r);
        const char *nog[1] = {tpath("mix/*.parquet")};
        read_all(&r, nog, 1, NULL, 0);
        CHECK(r.st == GLM_ERR_ARG && strstr(r.err, "*.parquet"), "no match: %s", r.err);
        result_free(&r);
        const char *miss[2] = {tpath("mix/a.json"), tpath("nope.json")};
        read_all(&r, miss, 2, NULL, 0);
        CHECK(r.st == GLM_ERR_IO && strstr(r.err, "nope.json"), "missing: %s", r.err);
        result_free(&r);
        const char *empty_dir[1] = {tpath("mix/sub/none")};
        glm_mkdir_p(tpath("mix2"));
        empty_dir[0] = tpath("mix2");
        read_all(&r, empty_dir, 1, NULL, 0);
        CHECK(r.st == GLM_ERR_ARG, "nothing matched: %s", r.err);
        result_free(&r);
        const char *filt[1] = {tpath("mix")};
        read_all(&r, filt, 1, "x", 0);
        CHECK(r.st == GLM_ERR_ARG && strstr(r.err, "dataset_info"), "--dataset w/o registry: %s",
              r.err);
        result_free(&r);
    }

    /* --- a folder with a registry: it maps, it is not read; files it does not name are not read */
    glm_mkdir_p(tpath("reg"));
    write_str("reg/dataset_info.json",
              "{\"mine\": {\"file_name\": \"mine.json\", \"formatting\": \"sharegpt\", "
              "\"columns\": {\"messages\": \"msgs\"}, \"tags\": {\"role_tag\": \"r\", "
              "\"content_tag\": \"c\", \"user_tag\": \"me\", \"assistant_tag\": \"bot\"}}, "
              "\"other\": {\"file_name\": \"other.jsonl\"}, "
              "\"dpo\": {\"file_name\": \"dpo.json\", \"ranking\": true}, "
              "\"hub\": {\"hf_hub_url\": \"x/y\"}}");
    write_str("reg/mine.json", "[{\"msgs\": [{\"r\": \"me\", \"c\": \"hi\"}]}]");
    write_str("reg/other.jsonl", "{\"instruction\": \"a\", \"output\": \"b\"}\n");
    write_str("reg/dpo.json", "[{\"conversations\": []}]");
    write_str("reg/loose.jsonl", "{\"messages\": []}\n");
    {
        const char *in[1] = {tpath("reg")};
        read_all(&r, in, 1, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 2, "registry folder: %d records (mine and other; dpo skipped, loose.jsonl "
              "not named) %s", r.n, r.err);
        for (int i = 0; i < r.n; i++)
            CHECK(!json_object_get(r.values[i], "messages"), "registry folder: loose.jsonl (not registered) was read");
        result_free(&r);
        read_all(&r, in, 1, "mine", 0);
        CHECK(r.st == GLM_OK && r.n == 1 && json_object_get(r.values[0], "msgs"),
              "registry folder --dataset mine: %d %s", r.n, r.err);
        result_free(&r);
        read_all(&r, in, 1, "mien", 0);
        CHECK(r.st == GLM_ERR_ARG && strstr(r.err, "mine") && strstr(r.err, "dataset_info.json"),
              "unknown name: %s", r.err);
        result_free(&r);
        read_all(&r, in, 1, "dpo", 0);
        CHECK(r.st == GLM_ERR_ARG && strstr(r.err, "ranking"), "unsupported: %s", r.err);
        result_free(&r);
        const char *reg[1] = {tpath("reg/dataset_info.json")};
        read_all(&r, reg, 1, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 2, "registry input: %d %s", r.n, r.err);
        result_free(&r);
        /* a file the registry also names is read once, whichever comes first; a file named
         * twice on the command line is read twice (upsampling) */
        const char *reg_then_file[2] = {tpath("reg/dataset_info.json"), tpath("reg/other.jsonl")};
        read_all(&r, reg_then_file, 2, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 2, "registry then its file: %d records %s", r.n, r.err);
        result_free(&r);
        const char *file_then_reg[2] = {tpath("reg/other.jsonl"), tpath("reg/dataset_info.json")};
        read_all(&r, file_then_reg, 2, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 2, "file then its registry: %d records %s", r.n, r.err);
        result_free(&r);
        const char *twice[3] = {tpath("reg/dataset_info.json"), tpath("reg/other.jsonl"), tpath("reg/other.jsonl")};
        read_all(&r, twice, 3, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 3, "registry, then its file twice: %d records %s", r.n, r.err);
        result_free(&r);
        const char *folder_then_file[2] = {tpath("reg"), tpath("reg/mine.json")};
        read_all(&r, folder_then_file, 2, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 2, "folder then a file in it: %d records %s", r.n, r.err);
        result_free(&r);
        const char *folder_then_loose[2] = {tpath("reg"), tpath("reg/loose.jsonl")};
        read_all(&r, folder_then_loose, 2, NULL, 0);
        CHECK(r.st == GLM_OK && r.n == 3, "folder then an unregistered file in it, as an input: %d records %s", r.n,
              r.err);
        result_free(&r);
        /* a symlinked registry: file_name is relative to the folder of the link (dataset_dir) */
        glm_mkdir_p(tpath("reglink"));
        write_str("reglink/mine.json", "[{\"msgs\": [{\"r\": \"me\", \"c\": \"a\"}]}, "
                  "{\"msgs\": [{\"r\": \"me\", \"c\": \"b\"}]}]");
        CHECK(symlink(tpath("reg/dataset_info.json"), tpath("reglink/dataset_info.json")) == 0, "symlink");
        const char *linked[1] = {tpath("reglink")};
        read_all(&r, linked, 1, "mine", 0);
        CHECK(r.st == GLM_OK && r.n == 2, "symlinked registry reads the link's folder: %d %s", r.n, r.err);
        result_free(&r);
    }

    /* --- a folder with two symbolic links to itself (x -> ., y -> .): read once, the loops not
     * followed (before: 2^64 paths walked before the depth limit, a hang), said in one line. A
     * chain of folders each linking twice to the next (no loop) is read once too. */
    {
        glm_mkdir_p(tpath("loop"));
        write_str("loop/a.jsonl", "{\"i\": 0}\n{\"i\": 1}\n");
        CHECK(symlink(".", tpath("loop/x")) == 0 && symlink(".", tpath("loop/y")) == 0, "symlinks");
        glm_mkdir_p(tpath("loop/sub"));
        CHECK(symlink("..", tpath("loop/sub/up")) == 0, "symlink up");
        char *errf = tpath("loop.stderr");
        fflush(stderr);
        int saved = dup(2), fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        close(fd);
        alarm(20); /* a walk that follows the loops would take centuries: fail instead of hanging */
        const char *in[1] = {tpath("loop")};
        read_all(&r, in, 1, NULL, 0);
        alarm(0);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        CHECK(r.st == GLM_OK && r.n == 2 && r.n_sources == 1, "self-links: %d records, %zu sources %s", r.n,
              r.n_sources, r.err);
        result_free(&r);
        size_t n = 0;
        char *said = slurp("loop.stderr", &n);
        const char *hit = said ? strstr(said, "symbolic links lead back") : NULL;
        CHECK(hit && strstr(said, "3 symbolic links") && strstr(said, tpath("loop")) && strstr(said, "hint") &&
              !strstr(hit + 1, "symbolic links lead back"), "said once: %s", said ? said : "(nothing)");
        free(said);
        /* chain: c0/{p,q} -> c1, c1/{p,q} -> c2 ... c39 holds the data */
        glm_mkdir_p(tpath("chain"));
        for (int i = 0; i < 40; i++) {
            char d[64], t[64], l[64];
            snprintf(d, sizeof d, "chain/c%d", i);
            glm_mkdir_p(tpath(d));
            if (i == 39) break;
            snprintf(t, sizeof t, "../c%d", i + 1);
            snprintf(l, sizeof l, "chain/c%d/p", i);
            CHECK(symlink(t, tpath(l)) == 0, "chain link");
            snprintf(l, sizeof l, "chain/c%d/q", i);
            CHECK(symlink(t, tpath(l)) == 0, "chain link");
        }
        write_str("chain/c39/d.jsonl", "{\"i\": 0}\n");
        alarm(20);
        const char *cin[1] = {tpath("chain/c0")};
        read_all(&r, cin, 1, NULL, 0);
        alarm(0);
        CHECK(r.st == GLM_OK && r.n == 1, "2^39 paths to one folder: %d records %s", r.n, r.err);
        result_free(&r);
    }

    /* --- splitter directly: blocks of 1 byte give the same records */
    {
        const char *s = "\xEF\xBB\xBF[ {\"a\": \"x,\\\"]\"}, [1, {\"b\": 2}] ,{}]";
        glm_jsonsplit js;
        glm_jsonsplit_init(&js, 0, false);
        int n = 0;
        char got[3][64];
        for (size_t i = 0; s[i]; i++) {
            size_t used = 0;
            glm_jsplit_rec rec;
            bool have = false;
            size_t off = 0;
            while (off < 1) {
                CHECK(glm_jsonsplit_feed(&js, s + i + off, 1 - off, &used, &rec, &have) == GLM_OK,
                      "feed");
                off += used;
                if (have && n < 3) snprintf(got[n++], 64, "%.*s", (int)rec.n, rec.data);
            }
        }
        glm_jsplit_rec rec;
        bool have;
        CHECK(glm_jsonsplit_finish(&js, &rec, &have) == GLM_OK && !have, "finish");
        glm_jsonsplit_free(&js);
        CHECK(n == 3 && !strcmp(got[0], "{\"a\": \"x,\\\"]\"}") && !strcmp(got[1], "[1, {\"b\": 2}]") &&
              !strcmp(got[2], "{}"), "byte-by-byte: %d [%s] [%s] [%s]", n, got[0], got[1], got[2]);
    }
    test_split_blocks();
    CHECK(glm_utf8_check("a\xc0\xaf", 3) == 1, "overlong");
    CHECK(glm_utf8_check("\xed\xa0\x80", 3) == 0, "encoded surrogate");
    CHECK(glm_utf8_check("\xe4\xb8\xad\xf0\x9f\x98\x80", 7) == 7, "valid");
    CHECK(glm_json_lone_surrogate_at("\"\\\\ud800\"", 9) == -1, "escaped backslash is not an escape");

    glm_rmtree(g_dir);
    return check_summary("test_reader");
}
