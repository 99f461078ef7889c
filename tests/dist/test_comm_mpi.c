/* tests/dist/test_comm_mpi.c: the CPU backend's MPI communicator (kernels/cpu/comm_mpi.c), run by
 * test_comm_mpi.sh under mpirun with 3 ranks: all_reduce (blocking and started/progressed/waited,
 * against the sums computed here), all_gather of shards (separate and in place, a shard size that
 * is not a multiple of 4), all_reduce_host (doubles), the sendrecv ring that context parallelism
 * will use, every rank getting the same bits, and a collective that one rank does not join in
 * time failing with a message that names the rank and the call instead of hanging. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "tests/check.h"

static float val(int rank, int i) { return (float)((rank + 1) * 0.37 + i * 1e-3 - (i % 7) * 0.11); }

int main(void) {
    glm_status st;
    const glm_backend *be = glm_backend_cpu_dist(&st);
    if (!be) {
        printf("FAIL: glm_backend_cpu_dist: %s\n", glm_errmsg());
        return 1;
    }
    int r = be->rank, W = be->world;
    CHECK(W == 3, "world %d (run with mpirun -np 3)", W);
    CHECK(!strcmp(be->name, "cpu") && be->act_dtype == GLM_DT_F32, "a CPU backend");

    /* all_reduce, blocking */
    enum { N = 1000 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = val(r, i);
    CHECK(be->all_reduce(be, x, N) == GLM_OK, "all_reduce: %s", glm_errmsg());
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int k = 0; k < W; k++) want += val(k, i);
        if (fabs(x[i] - want) > 1e-5 * (fabs(want) + 1)) bad++;
    }
    CHECK(bad == 0, "all_reduce sums: %d wrong", bad);

    /* non-blocking: two requests in flight, progressed, waited in the other order */
    for (int i = 0; i < N; i++) y[i] = val(r, N - i), x[i] = val(r, i);
    int q1 = -1, q2 = -1;
    CHECK(be->all_reduce_start(be, x, N, &q1) == GLM_OK && q1 >= 0, "start 1");
    CHECK(be->all_reduce_start(be, y, N / 2, &q2) == GLM_OK && q2 >= 0 && q2 != q1, "start 2");
    be->comm_progress(be);
    CHECK(be->comm_wait(be, q2) == GLM_OK, "wait 2: %s", glm_errmsg());
    CHECK(be->comm_wait(be, q1) == GLM_OK, "wait 1: %s", glm_errmsg());
    CHECK(be->comm_wait(be, q1) != GLM_OK, "waiting on a finished request is an error");
    bad = 0;
    for (int i = 0; i < N; i++) {
        double a = 0, b = 0;
        for (int k = 0; k < W; k++) a += val(k, i), b += val(k, N - i);
        if (fabs(x[i] - a) > 1e-5 * (fabs(a) + 1)) bad++;
        if (i < N / 2 && fabs(y[i] - b) > 1e-5 * (fabs(b) + 1)) bad++;
        if (i >= N / 2 && y[i] != val(r, N - i)) bad++; /* beyond n: untouched */
    }
    CHECK(bad == 0, "non-blocking all_reduce: %d wrong", bad);
    /* the same bits on every rank: gather everyone's result and compare */
    unsigned char *all = malloc((size_t)W * N * 4);
    int q;
    CHECK(be->all_gather_start(be, all, x, N * 4, &q) == GLM_OK && be->comm_wait(be, q) == GLM_OK, "gather results");
    int same = 1;
    for (int k = 0; k < W; k++) same &= !memcmp(all + (size_t)k * N * 4, x, N * 4);
    CHECK(same, "every rank holds the same all-reduced bits");

    /* all_gather of 13-byte shards, separate and in place */
    unsigned char sh[13], full[13 * 3], full2[13 * 3];
    for (int i = 0; i < 13; i++) sh[i] = (unsigned char)(r * 50 + i);
    CHECK(be->all_gather_start(be, full, sh, 13, &q) == GLM_OK && be->comm_wait(be, q) == GLM_OK, "all_gather");
    memset(full2, 0xee, sizeof full2);
    memcpy(full2 + 13 * r, sh, 13);
    CHECK(be->all_gather_start(be, full2, full2 + 13 * r, 13, &q) == GLM_OK && be->comm_sync(be) == GLM_OK, "in place");
    bad = 0;
    for (int k = 0; k < W; k++)
        for (int i = 0; i < 13; i++) bad += full[13 * k + i] != (unsigned char)(k * 50 + i) || full2[13 * k + i] != full[13 * k + i];
    CHECK(bad == 0, "all_gather: %d bytes wrong", bad);

    /* all_reduce_host */
    double h[3] = {r + 0.5, 1.0, r == 1 ? NAN : 0.0};
    CHECK(be->all_reduce_host(be, h, 3) == GLM_OK, "all_reduce_host");
    CHECK(h[0] == 0.5 + 1.5 + 2.5 && h[1] == 3.0 && isnan(h[2]), "host sums %g %g %g (a NaN anywhere is NaN everywhere)",
          h[0], h[1], h[2]);

    /* a ring: send to r+1, receive from r-1 */
    float sbuf[5], rbuf[5];
    for (int i = 0; i < 5; i++) sbuf[i] = (float)(100 * r + i);
    CHECK(be->sendrecv(be, sbuf, (r + 1) % W, rbuf, (r + W - 1) % W, sizeof sbuf) == GLM_OK, "sendrecv: %s", glm_errmsg());
    bad = 0;
    for (int i = 0; i < 5; i++) bad += rbuf[i] != (float)(100 * ((r + W - 1) % W) + i);
    CHECK(bad == 0, "ring: received the left neighbour's block");
    CHECK(be->sendrecv(be, sbuf, W, rbuf, 0, 4) == GLM_ERR_ARG, "a rank outside the world is refused");

    /* a rank that does not join in time: the others fail with the rank and the call named */
    be->set_comm_timeout(be, 0.5);
    double z = 1;
    if (r == 2) usleep(1500 * 1000);
    glm_status s = be->all_reduce_host(be, &z, 1);
    if (r != 2) {
        CHECK(s == GLM_ERR_INTERNAL, "a late rank times the collective out");
        char want[64];
        snprintf(want, sizeof want, "rank %d of 3: MPI_Iallreduce", r);
        CHECK(strstr(glm_errmsg(), want) && strstr(glm_errmsg(), "did not complete within 0.5 s"), "message: %s",
              glm_errmsg());
        if (r == 0) printf("timeout message: %s\n", glm_errmsg());
    }
    be->set_comm_timeout(be, 0);
    double wm = be->comm_wait_ms(be, 1);
    CHECK(wm > (r == 2 ? -1 : 400), "waits are counted (%.0f ms)", wm);
    int fails = check_failed_;
    double tot = fails;
    /* the late rank's Iallreduce matched the abandoned one; a fresh collective still works */
    CHECK(be->all_reduce_host(be, &tot, 1) == GLM_OK, "after the timeout");
    char name[32];
    snprintf(name, sizeof name, "test_comm_mpi rank %d", r);
    int rc = check_summary(name);
    glm_backend_cpu_close(be);
    return rc || tot > 0;
}
