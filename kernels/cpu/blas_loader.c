/* kernels/cpu/blas_loader.c: cblas_sgemm for the CPU backend, from OpenBLAS loaded on first use.
 *
 * Why not link OpenBLAS: its library constructor starts its thread pool (one thread per CPU) the
 * moment the program is loaded, for every glmtune command, and OpenBLAS 0.3.x answers a failed
 * pthread_create there with raise(SIGINT) (driver/others/blas_server.c, blas_thread_init). Under a
 * limit on threads (a container's pids limit, ulimit -u) `glmtune tokenize`, which never
 * multiplies a matrix, died before main(). Loaded here instead, OpenBLAS starts only when the CPU
 * backend first multiplies, and only with as many threads as can be started at that moment
 * (measured by starting them, parked, and joining them; OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS
 * or OMP_NUM_THREADS set by the user are left alone). When OpenBLAS cannot be loaded at all, a
 * plain loop computes the same product (each element a double-precision dot product, then
 * alpha, beta in float), with a warning: slow but correct. */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/log.h"

typedef void (*sgemm_fn)(OPENBLAS_CONST enum CBLAS_ORDER, OPENBLAS_CONST enum CBLAS_TRANSPOSE,
                         OPENBLAS_CONST enum CBLAS_TRANSPOSE, OPENBLAS_CONST blasint, OPENBLAS_CONST blasint,
                         OPENBLAS_CONST blasint, OPENBLAS_CONST float, OPENBLAS_CONST float *, OPENBLAS_CONST blasint,
                         OPENBLAS_CONST float *, OPENBLAS_CONST blasint, OPENBLAS_CONST float, float *,
                         OPENBLAS_CONST blasint);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sgemm_fn g_sgemm;

static pthread_mutex_t g_park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_park_cv = PTHREAD_COND_INITIALIZER;
static int g_release;

static void *parked(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_park_mu);
    while (!g_release) pthread_cond_wait(&g_park_cv, &g_park_mu);
    pthread_mutex_unlock(&g_park_mu);
    return NULL;
}

/* How many threads (this one included, at most `want`) can run at once right now. */
static int startable_threads(int want) {
    pthread_t th[256];
    if (want > 256) want = 256;
    g_release = 0;
    int n = 0;
    while (n < want - 1 && pthread_create(&th[n], NULL, parked, NULL) == 0) n++;
    pthread_mutex_lock(&g_park_mu);
    g_release = 1;
    pthread_cond_broadcast(&g_park_cv);
    pthread_mutex_unlock(&g_park_mu);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    return n + 1;
}

static void load(void) {
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("GOTO_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) {
        cpu_set_t set;
        int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus < 1) cpus = 1;
        int can = startable_threads(cpus);
        if (can < cpus)
            glm_log_warn("only %d of %d threads can be started (a limit on processes/threads: ulimit -u or a pids "
                         "limit): the CPU backend's OpenBLAS uses %d", can, cpus, can);
        char v[16];
        snprintf(v, sizeof v, "%d", can);
        setenv("OPENBLAS_NUM_THREADS", v, 0);
    }
    static const char *const names[] = {"libopenblas.so.0", GLM_OPENBLAS_LIBRARY, "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !g_sgemm; i++) {
        void *h = names[i][0] ? dlopen(names[i], RTLD_NOW | RTLD_LOCAL) : NULL;
        if (h) g_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    }
    if (!g_sgemm)
        glm_log_warn("OpenBLAS could not be loaded (%s): the CPU backend multiplies with a plain loop (slow); hint: "
                     "apt-get install libopenblas0", dlerror());
}

/* The plain product: C = alpha op(A) op(B) + beta C, row- or column-major. */
static void sgemm_loop(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint M, blasint N,
                       blasint K, float alpha, const float *A, blasint lda, const float *B, blasint ldb, float beta,
                       float *C, blasint ldc) {
    if (order == CblasColMajor) { /* C^T = op(B)^T op(A)^T in row-major terms */
        sgemm_loop(CblasRowMajor, tb, ta, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc);
        return;
    }
    int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    for (blasint i = 0; i < M; i++)
        for (blasint j = 0; j < N; j++) {
            double s = 0;
            for (blasint k = 0; k < K; k++)
                s += (double)(at ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (double)(bt ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            float *c = &C[(size_t)i * ldc + j];
            *c = alpha * (float)s + (beta == 0.0f ? 0.0f : beta * *c);
        }
}

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER Order, OPENBLAS_CONST enum CBLAS_TRANSPOSE TransA,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE TransB, OPENBLAS_CONST blasint M, OPENBLAS_CONST blasint N,
                 OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha, OPENBLAS_CONST float *A,
                 OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *B, OPENBLAS_CONST blasint ldb,
                 OPENBLAS_CONST float beta, float *C, OPENBLAS_CONST blasint ldc) {
    pthread_once(&g_once, load);
    if (g_sgemm)
        g_sgemm(Order, TransA, TransB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        sgemm_loop(Order, TransA, TransB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
