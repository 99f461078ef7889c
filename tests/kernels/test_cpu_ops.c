/* tests/kernels/test_cpu_ops.c: the CPU reference backend's ops, through the op table
 * (tests/ops/op_table.h) on its small cases: every op against a float64 computation written in
 * the table where it has one, every backward op against central finite differences of its
 * forward, and each entry's backend-local checks (error returns, reproducible masks, ...). Then
 * what is not a table op: the RoPE frequency table, the memory ops, the communication ops with
 * one rank, and the CPU's refusal of bf16 buffers. Prints the table's rows.
 * Usage: test_cpu_ops [name]: only the table entries whose name contains it (and no other check).
 *        test_cpu_ops --compare [name]: instead, the comparison run of tests/gpu/test_cuda_ops (the
 *        table's cmp cases at GLM-4-9B's shapes) with the CPU as both backends, where every
 *        comparison must come out exact: it exercises a new entry's cases, derived inputs and props
 *        without a GPU (minutes and several GB of memory; not run by ctest). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/comm.h"
#include "tests/check.h"
#include "tests/ops/op_table.h"

static const glm_backend *be;

/* glm_rope_inv_freq: 1 / base^(2i / rot) rounded once to f32 */
static void test_inv_freq(void) {
    float invf[2];
    glm_rope_inv_freq(10000.0, 4, invf);
    CHECK(invf[0] == 1.0f && invf[1] == 0.01f, "inv_freq table: %g %g", invf[0], invf[1]);
}

static void test_memory(void) {
    float x[25];
    for (int i = 0; i < 25; i++) x[i] = (float)i + 0.5f;
    void *p = NULL;
    CHECK(glm_be_alloc(be, 100, "t", &p) == GLM_OK && p, "alloc");
    glm_be_upload(be, p, x, 100);
    float back[25];
    glm_be_download(be, back, p, 100);
    CHECK(memcmp(back, x, 100) == 0, "upload/download round trip");
    glm_be_zero(be, p, 100);
    glm_be_download(be, back, p, 100);
    CHECK(back[0] == 0 && back[24] == 0, "zero");
    glm_be_free(be, p);
    float a = 1;
    CHECK(glm_be_matmul(be, 0, 0, 1, 1, 1, 1, &a, GLM_DT_BF16, 1, &a, GLM_DT_F32, 1, 0, &a, GLM_DT_F32, 1) == GLM_ERR_UNSUPPORTED,
          "cpu matmul refuses bf16");
}

/* the communication ops with one rank: local */
static void test_comm_world1(void) {
    float x[4] = {1, 2, 3, 4};
    CHECK(glm_comm_all_reduce(be, x, 4) == GLM_OK && be->world == 1 && x[3] == 4, "all_reduce is a no-op on cpu");
    float src[5] = {1, 2, 3, 4, 5}, dst[5] = {0}, keep[5];
    memcpy(keep, src, sizeof keep);
    int req = 7;
    CHECK(glm_comm_all_reduce_start(be, src, 5, &req) == GLM_OK && req < 0 && !memcmp(src, keep, sizeof keep),
          "world 1: all_reduce_start leaves the data and gives no request");
    CHECK(glm_comm_all_gather_start(be, dst, src, sizeof src, &req) == GLM_OK && glm_comm_wait(be, req) == GLM_OK &&
              !memcmp(dst, src, sizeof src),
          "world 1: all_gather copies the shard");
    memset(dst, 0, sizeof dst);
    CHECK(glm_comm_sendrecv(be, src, 0, dst, 0, sizeof src) == GLM_OK && !memcmp(dst, src, sizeof src), "world 1: sendrecv to itself");
    CHECK(glm_comm_sendrecv(be, src, 1, dst, 0, 4) == GLM_ERR_ARG, "world 1: rank 1 does not exist");
    double h = 2.5;
    CHECK(glm_comm_all_reduce_host(be, &h, 1) == GLM_OK && h == 2.5 && glm_comm_sync(be) == GLM_OK, "world 1: host sum");
    glm_comm_progress(be);
    glm_comm_abort(be, 1); /* returns with one rank */
    CHECK(glm_comm_wait_ms(be, 1) >= 0, "wait time");
}

int main(int argc, char **argv) {
    const int compare = argc > 1 && !strcmp(argv[1], "--compare");
    const char *filter = argc > 1 + compare ? argv[1 + compare] : NULL;
    be = glm_backend_cpu();
    op_run_opts o = {.test = be, .ref = compare ? be : NULL, .filter = filter, .time = 0};
    int ran = op_run(&o);
    CHECK(ran > 0, "no op of the table matches \"%s\"", filter ? filter : "");
    if (!filter && !compare) {
        test_inv_freq();
        test_memory();
        test_comm_world1();
    }
    op_print_table();
    int passed, failed;
    op_counts(&passed, &failed);
    check_merge(passed, failed);
    return check_summary("test_cpu_ops");
}
