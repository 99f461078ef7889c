/* tests/dist/test_launch.c: the supervisor behind `glmtune train --gpus N` (tool/train/launch.c),
 * with ordinary programs as workers (the GPU workers themselves need GPUs): every worker
 * succeeding gives 0; one that fails (an exit status, or killed by a signal) stops the others at
 * once with a message naming it and its status; SIGINT stops every worker (status 130); a worker
 * that ignores SIGTERM is killed after the grace period; a worker that cannot start counts as
 * failed (127); --gpus values parse or are refused with a message. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "tests/check.h"
#include "tool/train/launch.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static char logpath[] = "/tmp/glmlaunch.XXXXXX";
static int saved_err = -1;

/* Runs the supervisor with stderr captured; returns its code, *log the messages, *secs the time. */
static int supervise(launch_child *c, int n, double grace, char **log, double *secs) {
    fflush(stderr);
    saved_err = dup(2);
    FILE *f = fopen(logpath, "w");
    dup2(fileno(f), 2);
    double t0 = now();
    int code = launch_supervise(c, n, grace);
    *secs = now() - t0;
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    fclose(f);
    size_t len;
    *log = NULL;
    glm_read_file(logpath, log, &len);
    return code;
}

static launch_child child(const char *name, const char *script) {
    static char *argvs[16][4]; /* static: the children's argv outlive the calls, and nothing leaks */
    static int n_argv;
    launch_child c;
    memset(&c, 0, sizeof c);
    if (n_argv == 16) abort();
    c.argv = argvs[n_argv++];
    c.argv[0] = "sh";
    c.argv[1] = "-c";
    c.argv[2] = (char *)script;
    snprintf(c.name, sizeof c.name, "%s", name);
    return c;
}

static int alive(pid_t p) { return kill(p, 0) == 0; }

static pthread_t main_thread;
static void *interrupt_later(void *arg) { /* as Ctrl-C would: SIGINT, to the thread waiting in the supervisor */
    usleep(400 * 1000);
    pthread_kill(main_thread, SIGINT);
    return NULL;
}

int main(void) {
    int fd = mkstemp(logpath);
    if (fd < 0) return 1;
    close(fd);
    char *log;
    double secs;
    /* all succeed */
    launch_child ok[3] = {child("rank 0 (GPU 0)", "exit 0"), child("rank 1 (GPU 1)", "sleep 0.2; exit 0"),
                          child("rank 2 (GPU 2)", "exit 0")};
    CHECK(supervise(ok, 3, 5, &log, &secs) == 0, "every worker succeeded: 0 (%s)", log);
    free(log);
    /* one fails with status 3: the others (sleeping 30 s) are stopped at once */
    launch_child f1[3] = {child("rank 0 (GPU 0)", "exec sleep 30"), child("rank 1 (GPU 3)", "sleep 0.2; exit 3"),
                          child("rank 2 (GPU 5)", "exec sleep 30")};
    int code = supervise(f1, 3, 5, &log, &secs);
    CHECK(code == 3 && secs < 5, "a failed worker's status (3) in %.1f s", secs);
    CHECK(log && strstr(log, "rank 1 (GPU 3) (pid") && strstr(log, "exited with status 3; stopping the other 2 worker(s)"),
          "message: %s", log);
    CHECK(!alive(f1[0].pid) && !alive(f1[2].pid) && WIFSIGNALED(f1[0].status) && WTERMSIG(f1[0].status) == SIGTERM,
          "the others were stopped with SIGTERM");
    free(log);
    /* one killed by a signal */
    launch_child f2[2] = {child("rank 0 (GPU 0)", "exec sleep 30"), child("rank 1 (GPU 1)", "sleep 0.2; kill -9 $$")};
    code = supervise(f2, 2, 5, &log, &secs);
    CHECK(code == 1 && secs < 5, "a killed worker gives 1 (got %d)", code);
    CHECK(log && strstr(log, "rank 1 (GPU 1)") && strstr(log, "was killed by signal 9 (Killed); stopping the other 1 worker"),
          "message: %s", log);
    free(log);
    /* a worker that ignores SIGTERM is killed after the grace period */
    launch_child f3[2] = {child("rank 0 (GPU 0)", "trap '' TERM; exec sleep 30"), child("rank 1 (GPU 1)", "sleep 0.3; exit 1")};
    code = supervise(f3, 2, 1.0, &log, &secs);
    CHECK(code == 1 && secs >= 1.0 && secs < 6 && WIFSIGNALED(f3[0].status) && WTERMSIG(f3[0].status) == SIGKILL,
          "SIGKILL after the grace period (%.1f s)", secs);
    CHECK(log && strstr(log, "still running 1 s after SIGTERM: sending SIGKILL"), "message: %s", log);
    free(log);
    /* SIGINT: every worker stopped, 130 */
    launch_child f4[2] = {child("rank 0 (GPU 0)", "exec sleep 30"), child("rank 1 (GPU 1)", "exec sleep 30")};
    pthread_t th;
    main_thread = pthread_self();
    pthread_create(&th, NULL, interrupt_later, NULL);
    code = supervise(f4, 2, 5, &log, &secs);
    pthread_join(th, NULL);
    CHECK(code == 130 && secs < 5 && !alive(f4[0].pid) && !alive(f4[1].pid), "interrupted: 130, no worker left (%d)", code);
    CHECK(log && strstr(log, "interrupted (Interrupt): stopping the 2 workers; the last checkpoint stays as it is"),
          "message: %s", log);
    free(log);
    /* one child (mpirun and its ranks): named, not counted */
    launch_child f6[1] = {child("mpirun (2 CPU ranks)", "exec sleep 30")};
    pthread_create(&th, NULL, interrupt_later, NULL);
    code = supervise(f6, 1, 5, &log, &secs);
    pthread_join(th, NULL);
    CHECK(code == 130 && !alive(f6[0].pid), "interrupted mpirun: 130 (%d)", code);
    CHECK(log && strstr(log, "interrupted (Interrupt): stopping mpirun (2 CPU ranks); the last checkpoint"),
          "message: %s", log);
    free(log);
    /* a worker that cannot start */
    launch_child f5[1];
    memset(f5, 0, sizeof f5);
    char *av[] = {"/nonexistent/glmtune", NULL};
    f5[0].argv = av;
    snprintf(f5[0].name, sizeof f5[0].name, "rank 0 (GPU 0)");
    CHECK(supervise(f5, 1, 1, &log, &secs) == 127 && strstr(log, "cannot start rank 0 (GPU 0)"), "exec failure: %s", log);
    free(log);
    /* --gpus values */
    int d[8];
    CHECK(launch_parse_gpus("3", d, 8) == 3 && d[0] == 0 && d[2] == 2, "--gpus 3");
    CHECK(launch_parse_gpus("0,2,3", d, 8) == 3 && d[1] == 2 && d[2] == 3, "--gpus 0,2,3");
    CHECK(launch_parse_gpus("2,2", d, 8) == 2 && d[0] == 2 && d[1] == 2 && launch_gpus_shared(d, 2), "--gpus 2,2: two ranks on GPU 2");
    CHECK(launch_parse_gpus("0,1,0", d, 8) == 3 && launch_gpus_shared(d, 3) && launch_parse_gpus("0,1", d, 8) == 2 &&
          !launch_gpus_shared(d, 2), "a repeated GPU is detected, distinct ones are not");
    {
        char *e[16] = {0};
        setenv("NCCL_SOCKET_IFNAME", "eth7", 1);
        int k0 = launch_shared_gpu_env(0, e, 16), hostid = 0, lo = 0, net = 0;
        char *e1[16] = {0};
        int k1 = launch_shared_gpu_env(1, e1, 16);
        for (int i = 0; i < k0; i++) {
            hostid += !strcmp(e[i], "NCCL_HOSTID=glmtune-shared-gpu-rank-0");
            lo += !strncmp(e[i], "NCCL_SOCKET_IFNAME=", 19);
            net += !strcmp(e[i], "NCCL_NET=Socket") || !strcmp(e[i], "NCCL_P2P_DISABLE=1") || !strcmp(e[i], "NCCL_SHM_DISABLE=1");
        }
        CHECK(k0 == k1 && hostid == 1 && !strcmp(e1[0], "NCCL_HOSTID=glmtune-shared-gpu-rank-1") && lo == 0 && net == 3,
              "shared GPU: each rank its own NCCL_HOSTID, the socket transport, the user's NCCL_SOCKET_IFNAME kept");
        unsetenv("NCCL_SOCKET_IFNAME");
        char *e2[16] = {0};
        int k2 = launch_shared_gpu_env(0, e2, 16), lo2 = 0;
        for (int i = 0; i < k2; i++) lo2 += !strcmp(e2[i], "NCCL_SOCKET_IFNAME=lo");
        CHECK(lo2 == 1, "shared GPU: NCCL_SOCKET_IFNAME=lo when the user set none");
        for (int i = 0; i < 16; i++) free(e[i]), free(e1[i]), free(e2[i]);
    }
    CHECK(launch_parse_gpus("1,x", d, 8) < 0 && launch_parse_gpus("0", d, 8) < 0 && launch_parse_gpus("9", d, 8) < 0,
          "malformed values refused");
    unlink(logpath);
    return check_summary("test_launch");
}
