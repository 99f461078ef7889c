/* tests/check.h: a minimal test harness for C unit tests.
 * CHECK(cond, fmt, ...) records a failure with its location; main() ends with
 * `return check_summary("name");`, which prints "N passed, N failed" and returns 1 on any
 * failure. test_data_dir() returns the test data folder (GLM_FIXTURES, set by ctest to
 * tests/fixtures), or exits 1 with a message when it is missing: the data is part of the
 * repository, so a test never skips for want of it. */
#ifndef GLM_TESTS_CHECK_H
#define GLM_TESTS_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int check_passed_, check_failed_;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (cond) {                                                                            \
            check_passed_++;                                                                   \
        } else {                                                                               \
            check_failed_++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)

/* The norm-relative error ||a - b|| / ||b|| over n floats (||a - b|| when b is all zero); a NaN
 * anywhere gives INFINITY, so a tolerance check fails on it. */
static inline double check_rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    double r = den > 0 ? sqrt(num / den) : sqrt(num);
    return isnan(r) ? INFINITY : r;
}

/* |a-b| <= rtol * max(|b|, floor): relative closeness with an absolute floor for tiny values. */
static inline int check_close(double a, double b, double rtol, double floor_) {
    double s = fabs(b) > floor_ ? fabs(b) : floor_;
    return isfinite(a) && fabs(a - b) <= rtol * s;
}

/* Adds checks counted elsewhere (a shared harness such as tests/ops/op_runner.c, which has its own
 * counts) to this program's summary. */
static inline void check_merge(int passed, int failed) {
    check_passed_ += passed;
    check_failed_ += failed;
}

static inline int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

static inline const char *test_data_dir(void) {
    const char *s = getenv("GLM_FIXTURES");
    if (!s || access(s, R_OK) != 0) {
        fprintf(stderr, "FAIL: the test data folder GLM_FIXTURES=%s is not readable (ctest sets it to the "
                "repository's tests/fixtures)\n", s ? s : "(unset)");
        exit(1);
    }
    return s;
}

/* Every corpus file of tests/fixtures/corpora as reader inputs (in[3], paths in bufs): the folder,
 * which gives every file but the two in llamafactory/ that its dataset_info.json does not name (a
 * folder with a registry gives only the registered datasets), and those two. Returns 3. */
static inline size_t corpora_inputs(const char *data_dir, char bufs[3][4096], const char *in[3]) {
    snprintf(bufs[0], sizeof bufs[0], "%s/corpora", data_dir);
    snprintf(bufs[1], sizeof bufs[1], "%s/corpora/llamafactory/reason_tool_use_demo_50.jsonl", data_dir);
    snprintf(bufs[2], sizeof bufs[2], "%s/corpora/llamafactory/v1_sft_demo.jsonl", data_dir);
    for (int i = 0; i < 3; i++) in[i] = bufs[i];
    return 3;
}

#endif
