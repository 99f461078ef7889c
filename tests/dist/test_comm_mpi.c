/* tests/dist/test_comm_mpi.c: the CPU backend's MPI communicator (kernels/cpu/comm_mpi.c), run by
 * test_comm_mpi.sh under mpirun with 3 ranks: all_reduce (blocking and started/progressed/waited,
 * against the sums computed here), all_gather of shards (separate and in place, a shard size that
 * is not a multiple of 4), all_reduce_host (doubles), the sendrecv ring that context parallelism
 * uses (blocking, and two non-blocking exchanges in flight matched in order), sub-communicators
 * (comm_split: group ranks, sums and rings within a group only, the world still usable), every
 * rank getting the same bits, and a collective that one rank does not join in time failing with
 * a message that names the rank and the call instead of hanging. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/comm.h"
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
    CHECK(glm_comm_all_reduce(be, x, N) == GLM_OK, "all_reduce: %s", glm_errmsg());
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
    CHECK(glm_comm_all_reduce_start(be, x, N, &q1) == GLM_OK && q1 >= 0, "start 1");
    CHECK(glm_comm_all_reduce_start(be, y, N / 2, &q2) == GLM_OK && q2 >= 0 && q2 != q1, "start 2");
    glm_comm_progress(be);
    CHECK(glm_comm_wait(be, q2) == GLM_OK, "wait 2: %s", glm_errmsg());
    CHECK(glm_comm_wait(be, q1) == GLM_OK, "wait 1: %s", glm_errmsg());
    CHECK(glm_comm_wait(be, q1) != GLM_OK, "waiting on a finished request is an error");
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
    CHECK(glm_comm_all_gather_start(be, all, x, N * 4, &q) == GLM_OK && glm_comm_wait(be, q) == GLM_OK, "gather results");
    int same = 1;
    for (int k = 0; k < W; k++) same &= !memcmp(all + (size_t)k * N * 4, x, N * 4);
    CHECK(same, "every rank holds the same all-reduced bits");

    /* all_gather of 13-byte shards, separate and in place */
    unsigned char sh[13], full[13 * 3], full2[13 * 3];
    for (int i = 0; i < 13; i++) sh[i] = (unsigned char)(r * 50 + i);
    CHECK(glm_comm_all_gather_start(be, full, sh, 13, &q) == GLM_OK && glm_comm_wait(be, q) == GLM_OK, "all_gather");
    memset(full2, 0xee, sizeof full2);
    memcpy(full2 + 13 * r, sh, 13);
    CHECK(glm_comm_all_gather_start(be, full2, full2 + 13 * r, 13, &q) == GLM_OK && glm_comm_sync(be) == GLM_OK, "in place");
    bad = 0;
    for (int k = 0; k < W; k++)
        for (int i = 0; i < 13; i++) bad += full[13 * k + i] != (unsigned char)(k * 50 + i) || full2[13 * k + i] != full[13 * k + i];
    CHECK(bad == 0, "all_gather: %d bytes wrong", bad);

    /* all_reduce_host */
    double h[3] = {r + 0.5, 1.0, r == 1 ? NAN : 0.0};
    CHECK(glm_comm_all_reduce_host(be, h, 3) == GLM_OK, "all_reduce_host");
    CHECK(h[0] == 0.5 + 1.5 + 2.5 && h[1] == 3.0 && isnan(h[2]), "host sums %g %g %g (a NaN anywhere is NaN everywhere)",
          h[0], h[1], h[2]);

    /* a ring: send to r+1, receive from r-1 */
    float sbuf[5], rbuf[5];
    for (int i = 0; i < 5; i++) sbuf[i] = (float)(100 * r + i);
    CHECK(glm_comm_sendrecv(be, sbuf, (r + 1) % W, rbuf, (r + W - 1) % W, sizeof sbuf) == GLM_OK, "sendrecv: %s", glm_errmsg());
    bad = 0;
    for (int i = 0; i < 5; i++) bad += rbuf[i] != (float)(100 * ((r + W - 1) % W) + i);
    CHECK(bad == 0, "ring: received the left neighbour's block");
    CHECK(glm_comm_sendrecv(be, sbuf, W, rbuf, 0, 4) == GLM_ERR_ARG, "a rank outside the world is refused");

    /* sendrecv_start: two exchanges between the same neighbours in flight at once (the ring's K/V
     * and dK/dV), waited in the other order: matched in the order they were started */
    float s2[5], r2[5];
    for (int i = 0; i < 5; i++) sbuf[i] = (float)(100 * r + i), s2[i] = (float)(-100 * r - i), rbuf[i] = r2[i] = -1;
    int qa = -1, qb = -1;
    CHECK(glm_comm_sendrecv_start(be, sbuf, (r + 1) % W, rbuf, (r + W - 1) % W, sizeof sbuf, &qa) == GLM_OK && qa >= 0,
          "sendrecv_start 1: %s", glm_errmsg());
    CHECK(glm_comm_sendrecv_start(be, s2, (r + 1) % W, r2, (r + W - 1) % W, sizeof s2, &qb) == GLM_OK && qb >= 0,
          "sendrecv_start 2: %s", glm_errmsg());
    glm_comm_progress(be);
    CHECK(glm_comm_wait(be, qb) == GLM_OK && glm_comm_wait(be, qa) == GLM_OK, "wait both: %s", glm_errmsg());
    bad = 0;
    for (int i = 0; i < 5; i++) {
        int left = (r + W - 1) % W;
        bad += rbuf[i] != (float)(100 * left + i) || r2[i] != (float)(-100 * left - i);
    }
    CHECK(bad == 0, "non-blocking ring: both blocks arrived, in order");

    /* sub-communicators: colour r % 2 (ranks {0, 2} and {1}), ordered by key -r (so world rank 2
     * is rank 0 of its group) */
    const glm_backend *sub = NULL;
    CHECK(glm_comm_split(be, -1, 0, &sub) == GLM_ERR_ARG && !sub, "a negative colour is refused");
    CHECK(glm_comm_split(be, r % 2, -r, &sub) == GLM_OK && sub, "comm_split: %s", glm_errmsg());
    if (sub) {
        int want_w = r % 2 ? 1 : 2, want_r = r == 2 ? 0 : r == 0 ? 1 : 0;
        CHECK(sub->world == want_w && sub->rank == want_r, "rank %d: group rank %d of %d (want %d of %d)", r, sub->rank,
              sub->world, want_r, want_w);
        CHECK(sub->matmul == be->matmul && !strcmp(sub->name, "cpu"), "the group's compute ops are the parent's");
        double g = r + 1;
        CHECK(glm_comm_all_reduce_host(sub, &g, 1) == GLM_OK, "group all_reduce_host: %s", glm_errmsg());
        CHECK(g == (r % 2 ? 2.0 : 1.0 + 3.0), "rank %d: the group sum %g covers its group only", r, g);
        float gx[4] = {(float)r, 1, 2, 3};
        int gq = -1;
        CHECK(glm_comm_all_reduce_start(sub, gx, 4, &gq) == GLM_OK && glm_comm_wait(sub, gq) == GLM_OK && gx[0] == (r % 2 ? 1.0f : 2.0f) &&
                  gx[3] == 3.0f * sub->world,
              "group all_reduce: %g %g", gx[0], gx[3]);
        /* a ring inside the group, by group ranks */
        int gr = sub->rank, gw = sub->world;
        for (int i = 0; i < 5; i++) sbuf[i] = (float)(10 * r + i), rbuf[i] = -1;
        CHECK(glm_comm_sendrecv_start(sub, sbuf, (gr + 1) % gw, rbuf, (gr + gw - 1) % gw, sizeof sbuf, &gq) == GLM_OK &&
                  glm_comm_wait(sub, gq) == GLM_OK,
              "group ring: %s", glm_errmsg());
        int peer = r % 2 ? 1 : 2 - r; /* the other member of {0, 2}, or itself */
        CHECK(rbuf[0] == (float)(10 * peer) && rbuf[4] == (float)(10 * peer + 4), "rank %d: group ring got %g from %d", r,
              rbuf[0], peer);
        CHECK(glm_comm_sendrecv(sub, sbuf, gw, rbuf, 0, 4) == GLM_ERR_ARG, "a group rank outside the group is refused");
        /* the world communicator still works beside the group's */
        double wsum = 1;
        CHECK(glm_comm_all_reduce_host(be, &wsum, 1) == GLM_OK && wsum == 3.0, "world all_reduce after the split");
        be->comm_free(sub);
    }
    /* a world-1 backend splits into a group of one */
    const glm_backend *one = glm_backend_cpu(), *osub = NULL;
    CHECK(glm_comm_split(one, 3, 0, &osub) == GLM_OK && osub && osub->world == 1 && osub->rank == 0, "world 1 split");
    one->comm_free(osub);

    /* a rank that does not join in time: the others fail with the rank and the call named */
    glm_comm_set_timeout(be, 0.5);
    double z = 1;
    if (r == 2) usleep(1500 * 1000);
    glm_status s = glm_comm_all_reduce_host(be, &z, 1);
    if (r != 2) {
        CHECK(s == GLM_ERR_COMM, "a late rank times the collective out (a communication error)");
        char want[64];
        snprintf(want, sizeof want, "rank %d of 3: MPI_Iallreduce", r);
        CHECK(strstr(glm_errmsg(), want) && strstr(glm_errmsg(), "did not complete within 0.5 s"), "message: %s",
              glm_errmsg());
        if (r == 0) printf("timeout message: %s\n", glm_errmsg());
    }
    glm_comm_set_timeout(be, 0);
    double wm = glm_comm_wait_ms(be, 1);
    CHECK(wm > (r == 2 ? -1 : 400), "waits are counted (%.0f ms)", wm);
    int fails = check_failed_;
    double tot = fails;
    /* the late rank's Iallreduce matched the abandoned one; a fresh collective still works */
    CHECK(glm_comm_all_reduce_host(be, &tot, 1) == GLM_OK, "after the timeout");
    char name[32];
    snprintf(name, sizeof name, "test_comm_mpi rank %d", r);
    int rc = check_summary(name);
    free(x);
    free(y);
    free(all);
    glm_backend_cpu_close(be);
    return rc || tot > 0;
}
