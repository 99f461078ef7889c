/* Tests of common/: atomic writes, rng determinism, checksums against published check values. */
#include <string.h>
#include <sys/stat.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/pyjson.h"
#include "common/rng.h"
#include "tests/check.h"

int main(void) {
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
    glm_rmtree(dir);
    CHECK(!glm_is_dir(dir), "rmtree");
    return check_summary("test_common");
}
