/* Tests of common/: atomic writes, rng determinism, checksums against published check values. */
#include <string.h>
#include <sys/stat.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/rng.h"
#include "common/utf8.h"
#include "tests/check.h"

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

int main(void) {
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
    glm_rmtree(dir);
    CHECK(!glm_is_dir(dir), "rmtree");
    return check_summary("test_common");
}
