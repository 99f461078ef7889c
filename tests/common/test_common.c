/* Tests of common/: atomic writes, rng determinism, checksums against published check values. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/fileio.h"
#include "common/hash.h"
#include "common/pyjson.h"
#include "common/rng.h"
#include "common/strdist.h"
#include "common/utf8.h"
#include "tests/check.h"

/* Outputs that are not regular files: a symbolic link is followed (the link stays), a FIFO and
 * a device are written through, never replaced by a regular file; a directory is an error. */
static void test_outputs(const char *dir) {
    char *target = glm_path_join(dir, "target.json"), *link = glm_path_join(dir, "link.json");
    char *data = NULL;
    size_t n;
    struct stat st;
    /* a link to an existing file: the file is replaced atomically, the link stays a link */
    CHECK(glm_write_file_atomic(target, "old", 3) == GLM_OK, "write target");
    CHECK(symlink("target.json", link) == 0, "symlink");
    CHECK(glm_write_file_atomic(link, "new!", 4) == GLM_OK, "write through the link: %s", glm_errmsg());
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link is still a link");
    CHECK(glm_read_file(target, &data, &n) == GLM_OK && n == 4 && !memcmp(data, "new!", 4), "target replaced");
    free(data);
    /* a dangling link creates its target */
    char *dang = glm_path_join(dir, "dangling.json"), *dtarget = glm_path_join(dir, "created.json");
    CHECK(symlink("created.json", dang) == 0, "symlink");
    CHECK(glm_write_file_atomic(dang, "x", 1) == GLM_OK, "dangling: %s", glm_errmsg());
    CHECK(lstat(dang, &st) == 0 && S_ISLNK(st.st_mode) && glm_is_file(dtarget), "dangling link's target created");
    /* a FIFO is written through (a reader is open on it), not replaced */
    char *fifo = glm_path_join(dir, "fifo");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    CHECK(rfd >= 0, "fifo reader");
    CHECK(glm_write_file_atomic(fifo, "through a fifo", 14) == GLM_OK, "fifo: %s", glm_errmsg());
    char buf[64] = {0};
    ssize_t got = rfd >= 0 ? read(rfd, buf, sizeof buf) : -1;
    CHECK(got == 14 && !memcmp(buf, "through a fifo", 14), "fifo content (%zd bytes)", got);
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "still a FIFO");
    if (rfd >= 0) close(rfd);
    /* /dev/null: written through, stays a device */
    CHECK(glm_write_file_atomic("/dev/null", "x", 1) == GLM_OK, "/dev/null: %s", glm_errmsg());
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is a device");
    /* a device that fails writes (a private node of /dev/full's numbers, 1:7, when we may make
     * one): the error is reported and the node stays a device */
    char *full = glm_path_join(dir, "full");
    if (mknod(full, S_IFCHR | 0666, makedev(1, 7)) == 0) {
        int fd = open(full, O_WRONLY);
        if (fd >= 0) {
            close(fd);
            CHECK(glm_write_file_atomic(full, "x", 1) == GLM_ERR_IO && strstr(glm_errmsg(), "No space left"),
                  "full device: %s", glm_errmsg());
            CHECK(lstat(full, &st) == 0 && S_ISCHR(st.st_mode), "the device node was not replaced");
        } else {
            printf("  (a private 1:7 device node cannot be opened here (%s): the /dev/full case is not run)\n",
                   strerror(errno));
        }
    } else {
        printf("  (mknod not permitted (%s): the /dev/full case is not run)\n", strerror(errno));
    }
    /* a directory is an error naming it */
    CHECK(glm_write_file_atomic(dir, "x", 1) == GLM_ERR_IO && strstr(glm_errmsg(), "is a directory"), "dir: %s",
          glm_errmsg());
    /* /dev/stdout resolves to an open descriptor: written through */
    char *t = NULL;
    bool through = false;
    CHECK(glm_output_target("/dev/stdout", &t, &through) == GLM_OK && through, "/dev/stdout is written through");
    free(t);
    CHECK(glm_output_target(link, &t, &through) == GLM_OK && !through && t && strstr(t, "target.json"),
          "a link resolves to its target: %s", t ? t : "");
    free(t);
    free(full);
    free(fifo);
    free(dang);
    free(dtarget);
    free(target);
    free(link);
}

/* glm_commit_dir: the old directory is replaced as a whole; a symbolic link is followed;
 * leftovers of a killed swap are cleaned, a missing output restored from its ".old" copy. */
/* A full disk while a regular file is written (its temporary file's descriptor pointed at /dev/full,
 * which fails writes with ENOSPC): the error names the file, says the disk is full and what is left:
 * a new file is not created (no "earlier file" that never was), an existing one keeps its content. */
static void test_disk_full(const char *dir) {
    int full = open("/dev/full", O_WRONLY);
    if (full < 0) {
        printf("  (/dev/full cannot be opened here (%s): the disk-full case is not run)\n", strerror(errno));
        return;
    }
    char *fresh = glm_path_join(dir, "fresh.bin"), *old = glm_path_join(dir, "old.bin");
    static char big[1 << 20];
    for (int k = 0; k < 4; k++) {
        bool existing = k & 1, at_commit = k & 2; /* the error from a large write, or from the flush at commit */
        const char *path = existing ? old : fresh;
        if (existing) CHECK(glm_write_file_atomic(old, "old", 3) == GLM_OK, "write old: %s", glm_errmsg());
        glm_afile af;
        CHECK(glm_afile_open(&af, path) == GLM_OK, "open %s: %s", path, glm_errmsg());
        if (!af.f) continue;
        CHECK(dup2(full, fileno(af.f)) >= 0, "dup2");
        glm_status st = at_commit ? glm_afile_write(&af, "x", 1) : glm_afile_write(&af, big, sizeof big);
        if (at_commit) {
            CHECK(st == GLM_OK, "a buffered byte: %s", glm_errmsg());
            st = glm_afile_commit(&af);
        } else {
            glm_afile_abort(&af);
        }
        const char *m = glm_errmsg();
        CHECK(st == GLM_ERR_IO && strstr(m, path) && strstr(m, "No space left") && strstr(m, "the disk is full") &&
                  strstr(m, "df -h"), "case %d: the file and a full disk: %s", k, m);
        if (existing) {
            char *data = NULL;
            size_t n = 0;
            CHECK(strstr(m, "the earlier file of that name is left as it was") != NULL, "case %d: %s", k, m);
            CHECK(glm_read_file(old, &data, &n) == GLM_OK && n == 3 && !memcmp(data, "old", 3), "the old file kept");
            free(data);
        } else {
            CHECK(!strstr(m, "earlier") && strstr(m, "it was not created"), "case %d: a new file: %s", k, m);
            CHECK(!glm_is_file(fresh), "the new file does not exist");
        }
    }
    close(full);
    free(fresh);
    free(old);
}

static void test_commit_dir(const char *dir) {
    char *out = glm_path_join(dir, "out"), *tmp = NULL, *f = NULL;
    CHECK(glm_mkdir_p(out) == GLM_OK, "mkdir");
    f = glm_path_join(out, "a");
    glm_write_file_atomic(f, "1", 1);
    free(f);
    asprintf(&tmp, "%s.tmp.%d", out, (int)getpid());
    glm_mkdir_p(tmp);
    f = glm_path_join(tmp, "b");
    glm_write_file_atomic(f, "2", 1);
    free(f);
    CHECK(glm_commit_dir(tmp, out) == GLM_OK, "commit: %s", glm_errmsg());
    char *fa = glm_path_join(out, "a"), *fb = glm_path_join(out, "b");
    CHECK(!glm_is_file(fa) && glm_is_file(fb) && !glm_is_dir(tmp), "replaced as a whole, no temp left");
    /* a link to the output: the target is replaced, the link stays */
    char *ln = glm_path_join(dir, "outlink"), *real = NULL;
    CHECK(symlink("out", ln) == 0, "symlink");
    CHECK(glm_output_target_dir(ln, &real) == GLM_OK && real && !strcmp(real + strlen(real) - 4, "/out"),
          "link target %s", real ? real : "");
    free(tmp);
    asprintf(&tmp, "%s.tmp.%d", real, (int)getpid());
    glm_mkdir_p(tmp);
    CHECK(glm_commit_dir(tmp, ln) == GLM_OK, "commit through link: %s", glm_errmsg());
    struct stat st;
    CHECK(lstat(ln, &st) == 0 && S_ISLNK(st.st_mode) && !glm_is_file(fb), "link kept, target replaced");
    /* leftovers of a killed run (pid 2^22+1 is above pid_max's default and cannot be running):
     * a missing output is restored from "<out>.old.<pid>", "<out>.tmp.<pid>" removed */
    char *old = NULL, *stale = NULL;
    asprintf(&old, "%s.old.4194305", out);
    asprintf(&stale, "%s.tmp.4194305", out);
    CHECK(rename(out, old) == 0 && glm_mkdir_p(stale) == GLM_OK, "make leftovers");
    glm_cleanup_leftovers(out);
    CHECK(glm_is_dir(out) && !glm_is_dir(old) && !glm_is_dir(stale), "restored and cleaned");
    /* with the output present, an ".old" copy is removed */
    glm_mkdir_p(old);
    glm_cleanup_leftovers(out);
    CHECK(glm_is_dir(out) && !glm_is_dir(old), "old copy removed");
    free(old);
    free(stale);
    free(real);
    free(ln);
    free(fa);
    free(fb);
    free(tmp);
    free(out);
}

/* The offset of the first byte that does not start a well-formed UTF-8 sequence (Unicode 15,
 * table 3-7, written out byte by byte), or n. The reference for glm_utf8_check. */
static size_t utf8_ref(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], lo = 0x80, hi = 0xBF;
        size_t k;
        if (c <= 0x7F) k = 0;
        else if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) k = 2, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) k = 2;
        else if (c == 0xED) k = 2, hi = 0x9F;
        else if (c >= 0xEE && c <= 0xEF) k = 2;
        else if (c == 0xF0) k = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        else if (c == 0xF4) k = 3, hi = 0x8F;
        else return i;
        if (i + k >= n + (k == 0)) return i;
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if (d < (j == 1 ? lo : 0x80) || d > (j == 1 ? hi : 0xBF)) return i;
        }
        i += k + 1;
    }
    return n;
}

/* The arena: alignment, ownership, the limit, reuse after a reset; jansson values created in a
 * span live in it (and are still freed as usual), values from outside a span are not. */
static void *arena_thread(void *arg) {
    glm_arena a;
    glm_arena_init(&a, 0);
    long ok = 1;
    for (int rep = 0; rep < 200; rep++) {
        glm_json_arena_begin(&a);
        json_t *o = json_pack("{s:s, s:[i, f, s]}", "k", "value", "list", rep, 0.5, "x");
        ok &= o && glm_arena_owns(&a, o) && json_integer_value(json_array_get(json_object_get(o, "list"), 0)) == rep;
        json_decref(o);
        glm_json_arena_end();
        glm_arena_reset(&a);
    }
    glm_arena_free(&a);
    return (void *)ok;
}

/* glm_dir_first_foreign: the first entry by name (hidden ones too) that the callback refuses. */
static bool not_x(const char *dir, const char *name, void *arg) {
    (void)dir;
    ++*(int *)arg;
    return name[0] != 'x';
}
static void test_dir_first_foreign(const char *dir) {
    char *sub = glm_path_join(dir, "foreign"), *first = NULL;
    int calls = 0;
    CHECK(glm_dir_first_foreign(sub, not_x, &calls, &first) == GLM_OK && !first && !calls, "missing dir: none");
    CHECK(glm_mkdir_p(sub) == GLM_OK, "mkdir");
    CHECK(glm_dir_first_foreign(sub, not_x, &calls, &first) == GLM_OK && !first && !calls, "empty dir: none");
    const char *names[] = {"b", "xz", ".xh", "xa", "a"};
    for (int i = 0; i < 5; i++) {
        char *p = glm_path_join(sub, names[i]);
        CHECK(glm_write_file_atomic(p, "", 0) == GLM_OK, "write %s", p);
        free(p);
    }
    CHECK(glm_dir_first_foreign(sub, not_x, &calls, &first) == GLM_OK && first && !strcmp(first, "xa"),
          "first foreign by name: %s", first ? first : "none");
    free(first);
    free(sub);
}

static void test_arena(void) {
    glm_arena a;
    glm_arena_init(&a, 1 << 20);
    char *p = glm_arena_alloc(&a, 3), *q = glm_arena_alloc(&a, 17);
    CHECK(p && q && ((uintptr_t)p & 15) == 0 && ((uintptr_t)q & 15) == 0 && q >= p + 16, "alignment");
    CHECK(glm_arena_owns(&a, p) && glm_arena_owns(&a, q + 16) && !glm_arena_owns(&a, &a), "owns");
    CHECK(glm_arena_alloc(&a, 64 << 10) == NULL, "a large block is left to malloc");
    size_t got = 0;
    while (glm_arena_alloc(&a, 4000)) got += 4000;
    CHECK(got > (900 << 10) && got <= (1 << 20), "the limit: %zu bytes handed out", got);
    glm_arena_reset(&a);
    CHECK(!glm_arena_owns(&a, p), "reset forgets");
    char *r = glm_arena_alloc(&a, 8);
    CHECK(r != NULL, "usable after a reset");
    glm_arena_free(&a);

    json_t *outside = json_string("made before the span");
    glm_arena b = {0};
    glm_json_arena_begin(&b);
    json_t *in = json_pack("{s:s, s:i}", "a", "text", "n", 7);
    CHECK(in && glm_arena_owns(&b, in), "a value made in a span is in the arena");
    json_object_set(in, "outside", outside); /* a malloc'd value referenced from the arena */
    char big[100000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    json_t *large = json_string(big); /* its text comes from malloc (a large block) */
    CHECK(large && json_string_length(large) == sizeof big - 1, "a large string in a span");
    json_decref(large);
    json_decref(in); /* frees nothing of the arena's; outside keeps its reference */
    glm_json_arena_end();
    json_t *after = json_string("after");
    CHECK(after && !glm_arena_owns(&b, after), "after the span values come from malloc");
    json_decref(after);
    glm_arena_free(&b);
    CHECK(!strcmp(json_string_value(outside), "made before the span"), "the outside value survives");
    json_decref(outside);

    pthread_t th[2];
    void *res[2] = {0, 0};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, arena_thread, NULL);
    for (int i = 0; i < 2; i++) pthread_join(th[i], &res[i]);
    CHECK(res[0] == (void *)1 && res[1] == (void *)1, "arenas on two threads at once");
}

/* GLM_ASSERT's two paths: a true invariant returns nothing from here, a false one GLM_ERR_INTERNAL */
static int assert_line_; /* the line of the failing GLM_ASSERT below */
static glm_status assert_index(size_t i, size_t n) {
    assert_line_ = __LINE__ + 1;
    GLM_ASSERT(i < n, "state index %zu of %zu", i, n);
    return GLM_OK;
}

static void test_status(void) {
    /* the four kinds of failure that are not about input are told apart, by code and by name */
    CHECK(GLM_ERR_DEVICE != GLM_ERR_INTERNAL && GLM_ERR_COMM != GLM_ERR_INTERNAL && GLM_ERR_COMM != GLM_ERR_DEVICE,
          "distinct codes");
    CHECK(!strcmp(glm_status_name(GLM_ERR_DEVICE), "device error"), "%s", glm_status_name(GLM_ERR_DEVICE));
    CHECK(!strcmp(glm_status_name(GLM_ERR_COMM), "communication error"), "%s", glm_status_name(GLM_ERR_COMM));
    CHECK(!strcmp(glm_status_name(GLM_ERR_INTERNAL), "internal error"), "%s", glm_status_name(GLM_ERR_INTERNAL));
    CHECK(!strcmp(glm_status_name(GLM_ERR_LIBRARY), "library error"), "%s", glm_status_name(GLM_ERR_LIBRARY));
    CHECK(GLM_ERR_LIBRARY != GLM_ERR_INTERNAL && GLM_ERR_LIBRARY != GLM_ERR_DEVICE && GLM_ERR_LIBRARY != GLM_ERR_COMM,
          "a library failure is its own kind");
    glm_err(GLM_ERR_IO, "earlier");
    CHECK(assert_index(2, 3) == GLM_OK && !strcmp(glm_errmsg(), "earlier"), "a true assertion leaves the message: %s",
          glm_errmsg());
    char want[256];
    snprintf(want, sizeof want, "internal error at common/test_common.c:%d: state index 3 of 3 (`i < n` is false; a bug "
             "in glmtune: please report it)", assert_line_);
    CHECK(assert_index(3, 3) == GLM_ERR_INTERNAL && !strcmp(glm_errmsg(), want), "a false assertion: %s\nwanted %s",
          glm_errmsg(), want);
}

int main(void) {
    test_arena();
    test_status();
    /* a message built from the current one (glm_err's buffer), and glm_err_context */
    glm_err(GLM_ERR_IO, "%s is a directory; hint: name a file", "/tmp/x");
    CHECK(glm_err(GLM_ERR_ARG, "--report: %s", glm_errmsg()) == GLM_ERR_ARG &&
          !strcmp(glm_errmsg(), "--report: /tmp/x is a directory; hint: name a file"), "glm_err of glm_errmsg(): %s",
          glm_errmsg());
    CHECK(glm_err_context(GLM_ERR_IO, "in %s", "a.json") == GLM_ERR_IO &&
          !strcmp(glm_errmsg(), "in a.json: --report: /tmp/x is a directory; hint: name a file"), "context: %s",
          glm_errmsg());
    /* UTF-8 validation: every 3-byte string that starts with E0-EF (alone, after ASCII, and before
     * a 2nd character), and random strings built from UTF-8-like pieces, against utf8_ref */
    {
        size_t bad = 0, tried = 0;
        unsigned char t[16];
        for (unsigned a = 0xE0; a <= 0xEF; a++)
            for (unsigned b = 0; b < 256; b++)
                for (unsigned c = 0; c < 256; c++) {
                    unsigned char u[3] = {(unsigned char)a, (unsigned char)b, (unsigned char)c};
                    memcpy(t, "ab", 2);
                    memcpy(t + 2, u, 3);
                    memcpy(t + 5, "\xe4\xb8\xad", 3);
                    const size_t cut[3][2] = {{2, 3}, {0, 8}, {2, 6}}; /* alone, in context, cut */
                    for (int k = 0; k < 3; k++) {
                        const char *x = (const char *)t + cut[k][0];
                        bad += glm_utf8_check(x, cut[k][1]) != utf8_ref((const unsigned char *)x, cut[k][1]);
                        tried++;
                    }
                }
        glm_rng r;
        glm_rng_seed(&r, 11, 0);
        static const unsigned char parts[] = {'a', ' ', 0x7f, 0x80, 0xbf, 0xc2, 0xdf, 0xe0, 0xe4, 0xed, 0xef,
                                              0xf0, 0xf4, 0xf5, 0xb8, 0xad, 0x9f, 0xa0, 0x90, 0x8f, 0xc0};
        for (int k = 0; k < 200000; k++) {
            size_t n = glm_rng_below(&r, 16);
            for (size_t i = 0; i < n; i++) t[i] = parts[glm_rng_below(&r, sizeof parts)];
            bad += glm_utf8_check((const char *)t, n) != utf8_ref(t, n);
            tried++;
        }
        CHECK(bad == 0, "glm_utf8_check differs from the reference on %zu of %zu strings", bad, tried);
    }

    /* CRC check values: "123456789" -> CRC-32 0xCBF43926, CRC-32C 0xE3069283 (RFC 3720 B.4). */
    CHECK(glm_crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 %08x", glm_crc32(0, "123456789", 9));
    CHECK(glm_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c %08x", glm_crc32c(0, "123456789", 9));
    /* FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (the published test vector). */
    CHECK(glm_fnv1a64(GLM_FNV1A64_INIT, "a", 1) == 0xaf63dc4c8601ec8cULL, "fnv1a64");

    /* float32 values written in their shortest decimal form: the nearest float to 0.1 is
     * 0.100000001490116119384765625, whose shortest float32 decimal is "0.1" (the same holds
     * for 1e-05; 1.5625e-07 = 2^-22 * 0.65536 is exact in both) */
    CHECK(glm_f32_shortest(0.1f) == 0.1 && glm_f32_shortest(1e-5f) == 1e-5 &&
              glm_f32_shortest(1.5625e-07f) == 1.5625e-07 && glm_f32_shortest(16.0f) == 16.0 &&
              glm_f32_shortest(0.3f) == 0.3 && glm_f32_shortest(-2.5e-3f) == -2.5e-3, "f32 shortest");
    char fb[32];
    CHECK(!strcmp(glm_py_float_repr(glm_f32_shortest(0.1f), fb), "0.1"), "0.1 repr: %s", fb);
    CHECK(!strcmp(glm_py_float_repr((double)0.1f, fb), "0.10000000149011612"), "the double of 0.1f: %s", fb);

    glm_rng a, b;
    glm_rng_seed(&a, 42, 0);
    glm_rng_seed(&b, 42, 0);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= glm_rng_u64(&a) == glm_rng_u64(&b);
    CHECK(same, "same seed, same stream");
    glm_rng_seed(&b, 42, 1);
    CHECK(glm_rng_u64(&a) != glm_rng_u64(&b), "streams differ");
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        double x = glm_rng_normal(&a);
        sum += x;
        sq += x * x;
    }
    CHECK(fabs(sum / 1e5) < 0.02 && fabs(sq / 1e5 - 1) < 0.02, "normal moments %g %g", sum / 1e5, sq / 1e5);

    char dir[] = "/tmp/glmtest.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char *p = glm_path_join(dir, "f.bin");
    CHECK(glm_write_file_atomic(p, "old", 3) == GLM_OK, "write: %s", glm_errmsg());
    glm_afile af;
    CHECK(glm_afile_open(&af, p) == GLM_OK, "open");
    glm_afile_write(&af, "new data", 8);
    glm_afile_abort(&af);
    char *data;
    size_t n;
    CHECK(glm_read_file(p, &data, &n) == GLM_OK && n == 3 && !memcmp(data, "old", 3), "abort keeps old");
    free(data);
    CHECK(glm_afile_open(&af, p) == GLM_OK, "open");
    glm_afile_write(&af, "new data", 8);
    CHECK(glm_afile_commit(&af) == GLM_OK, "commit");
    CHECK(glm_read_file(p, &data, &n) == GLM_OK && n == 8, "commit replaces");
    free(data);
    CHECK(glm_read_file("/nonexistent/x", &data, &n) == GLM_ERR_IO && strstr(glm_errmsg(), "/nonexistent/x"),
          "error names the file: %s", glm_errmsg());
    free(p);
    test_outputs(dir);
    test_disk_full(dir);
    test_commit_dir(dir);
    test_dir_first_foreign(dir);
    glm_rmtree(dir);
    CHECK(!glm_is_dir(dir), "rmtree");
    CHECK(glm_edit_distance("kitten", "sitting") == 3 && glm_edit_distance("", "abc") == 3 &&
              glm_edit_distance("same", "same") == 0, "edit distance");
    {
        const char *c[] = {"--seq-len", NULL, "--seed", "--shard-rows"};
        const char *g = glm_closest_name("--seqlen", c, 4);
        CHECK(g && !strcmp(g, "--seq-len"), "closest: %s", g ? g : "(none)");
        CHECK(glm_closest_name("--frobnicate", c, 4) == NULL, "nothing related: no suggestion");
    }
    return check_summary("test_common");
}
