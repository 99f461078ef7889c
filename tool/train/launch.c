/* tool/train/launch.c: the supervisor of `glmtune train --gpus N` and `--device cpu --nproc N`
 * (tool/train/launch.h). */
#define _GNU_SOURCE
#include "tool/train/launch.h"

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "tool/cli.h"

static volatile sig_atomic_t g_sig, g_nsig;
static void on_signal(int s) {
    g_sig = s;
    g_nsig++;
}
static void on_alarm(int s) { (void)s; }

static double mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void describe(const launch_child *c, char *buf, size_t n) {
    if (WIFEXITED(c->status))
        snprintf(buf, n, "%s (pid %d) exited with status %d", c->name, (int)c->pid, WEXITSTATUS(c->status));
    else if (WIFSIGNALED(c->status))
        snprintf(buf, n, "%s (pid %d) was killed by signal %d (%s)", c->name, (int)c->pid, WTERMSIG(c->status),
                 strsignal(WTERMSIG(c->status)));
    else
        snprintf(buf, n, "%s (pid %d) ended (status 0x%x)", c->name, (int)c->pid, c->status);
}

/* "rank 1 (GPU 3)" / "mpirun (2 CPU ranks)" when one child is live, else "the 3 workers". */
static const char *live_names(const launch_child *c, int n, int live, char *buf, size_t sz) {
    for (int i = 0; live == 1 && i < n; i++)
        if (!c[i].ended && c[i].pid > 0) return c[i].name;
    snprintf(buf, sz, "the %d workers", live);
    return buf;
}

static int failed(const launch_child *c) { return !WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0; }

static void kill_live(launch_child *c, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (!c[i].ended && c[i].pid > 0) kill(c[i].pid, sig);
}

int launch_supervise(launch_child *c, int n, double grace_s) {
    struct sigaction sa, old_int, old_term, old_usr1, old_alrm;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, &old_alrm);
    g_sig = 0;
    g_nsig = 0;
    int live = 0, code = 0, first_fail = -1, stopping = 0, saving = 0;
    double kill_at = 0;
    const pid_t self = getpid();
    for (int i = 0; i < n; i++) {
        c[i].ended = 0;
        c[i].status = 0;
        fflush(NULL);
        pid_t p = fork();
        if (p == 0) {
            /* the supervisor killed (kill -9, or SIGHUP of a closed terminal) takes its workers with it:
             * without this, mpirun and the ranks went on training, orphaned, holding the output lock */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != self) _exit(128 + SIGTERM); /* it died before prctl */
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGUSR1, SIG_DFL);
            for (char **e = c[i].env; e && *e; e++) putenv(*e);
            execvp(c[i].argv[0], c[i].argv);
            fprintf(stderr, "glmtune: cannot start %s (%s): %s\n", c[i].name, c[i].argv[0], strerror(errno));
            _exit(127);
        }
        if (p < 0) {
            glm_log_error("cannot start %s: fork: %s", c[i].name, strerror(errno));
            c[i].ended = 1;
            c[i].status = 127 << 8;
            first_fail = first_fail < 0 ? i : first_fail;
            break;
        }
        c[i].pid = p;
        live++;
    }
    if (first_fail >= 0 && live) {
        char w[64];
        glm_log_error("stopping %s already started", live_names(c, n, live, w, sizeof w));
        kill_live(c, n, SIGTERM);
        stopping = 1;
        kill_at = mono() + grace_s;
    }
    while (live > 0) {
        if (g_sig && !stopping && !saving && g_sig != SIGINT && g_nsig == 1) {
            /* SIGTERM / SIGUSR1: the ranks finish the step, save and stop; no deadline here */
            char w[64];
            glm_log_warn("%s: asking %s to finish the current optimizer step, write a checkpoint and stop (a second "
                         "signal stops at once)", g_sig == SIGTERM ? "SIGTERM" : "SIGUSR1", live_names(c, n, live, w, sizeof w));
            for (int i = 0; i < n; i++)
                if (!c[i].ended && c[i].pid > 0) kill(c[i].pid, c[i].stop_sig ? c[i].stop_sig : g_sig);
            saving = g_sig;
        }
        if (g_sig && !stopping && (!saving || g_nsig > 1)) {
            char w[64];
            glm_log_error("interrupted (%s): stopping %s; the last checkpoint stays as it is", strsignal(g_sig),
                          live_names(c, n, live, w, sizeof w));
            kill_live(c, n, SIGINT);
            stopping = 1;
            kill_at = mono() + grace_s;
        }
        if (stopping) {
            double left = kill_at - mono();
            if (left <= 0) {
                char w[64];
                glm_log_error("%s still running %g s after SIGTERM: sending SIGKILL", live_names(c, n, live, w, sizeof w),
                              grace_s);
                kill_live(c, n, SIGKILL);
                kill_at = mono() + 3600;
            } else {
                alarm((unsigned)left + 1);
            }
        }
        int st = 0;
        pid_t p = waitpid(-1, &st, 0);
        alarm(0);
        if (p < 0) {
            if (errno == EINTR) continue;
            if (errno == ECHILD) break;
            continue;
        }
        int i = 0;
        while (i < n && c[i].pid != p) i++;
        if (i == n) continue; /* not ours */
        c[i].ended = 1;
        c[i].status = st;
        live--;
        bool as_asked = saving && WIFEXITED(st) && WEXITSTATUS(st) == 128 + (c[i].stop_sig ? c[i].stop_sig : saving);
        if (failed(&c[i]) && !as_asked && first_fail < 0) {
            first_fail = i;
            if (!stopping) {
                char d[256];
                describe(&c[i], d, sizeof d);
                if (live)
                    glm_log_error("%s; stopping the other %d worker(s)", d, live);
                else
                    glm_log_error("%s", d);
                kill_live(c, n, SIGTERM);
                stopping = 1;
                kill_at = mono() + grace_s;
            }
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGALRM, &old_alrm, NULL);
    if (saving && !stopping && first_fail < 0) code = 128 + saving; /* the ranks stopped as asked, with a checkpoint */
    else if (g_sig && (!saving || stopping)) code = 128 + g_sig;
    else if (first_fail >= 0) code = WIFEXITED(c[first_fail].status) && WEXITSTATUS(c[first_fail].status) ? WEXITSTATUS(c[first_fail].status) : 1;
    return code;
}

int launch_parse_gpus(const char *gpus, int *devs, int max) {
    if (!gpus || !*gpus) return glm_err(GLM_ERR_ARG, "--gpus: empty value"), -1;
    if (!strchr(gpus, ',')) {
        char *end;
        long n = strtol(gpus, &end, 10);
        if (*end || n < 1 || n > max)
            return glm_err(GLM_ERR_ARG, "--gpus %s: expected a number of GPUs from 1 to %d, or a list of ids (0,2,3)", gpus, max), -1;
        for (int i = 0; i < n; i++) devs[i] = i;
        return (int)n;
    }
    int k = 0;
    const char *p = gpus;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1023 || (*end && *end != ',') || k == max)
            return glm_err(GLM_ERR_ARG, "--gpus %s: expected comma-separated device ids (0,2,3)", gpus), -1;
        devs[k++] = (int)v; /* a device named again: several ranks share it (launch_gpus_shared) */
        p = *end ? end + 1 : end;
    }
    return k;
}

int launch_gpus_shared(const int *devs, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (devs[i] == devs[j]) return 1;
    return 0;
}

/* NCCL's socket transport between ranks of one GPU: NCCL refuses two ranks of one host on one
 * device, but ranks whose host ids differ are "other hosts" to it and reach each other through
 * its network transport; that one is the socket transport over the loopback interface when
 * InfiniBand is off. NCCL_HOSTID replaces the host hash NCCL derives from the host name;
 * NCCL_NET=Socket and NCCL_IB_DISABLE=1 pick the socket transport; NCCL_SOCKET_IFNAME=lo lets
 * it use loopback (which it skips unless named); NCCL_P2P_DISABLE and NCCL_SHM_DISABLE keep the
 * intra-host transports out should NCCL still see the ranks as neighbours (NCCL 2.28
 * environment variables, docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). */
static const char *const shared_env[][2] = {
    {"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_NET", "Socket"}, {"NCCL_IB_DISABLE", "1"},
    {"NCCL_P2P_DISABLE", "1"},    {"NCCL_SHM_DISABLE", "1"}, {"NCCL_NVLS_ENABLE", "0"},
};

int launch_shared_gpu_env(int rank, char **env, int max) {
    int k = 0;
    if (k < max && asprintf(&env[k], "NCCL_HOSTID=glmtune-shared-gpu-rank-%d", rank) >= 0) k++;
    for (size_t i = 0; i < sizeof shared_env / sizeof *shared_env && k < max; i++) {
        if (getenv(shared_env[i][0])) continue; /* the user's own setting stays */
        if (asprintf(&env[k], "%s=%s", shared_env[i][0], shared_env[i][1]) >= 0) k++;
    }
    return k;
}

static char *xstrdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xstrdup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

int launch_train(int argc, char **argv, const char *gpus, int nproc, int quiet) {
    if (!gpus && nproc <= 0) return -1;
    if (getenv("GLMTUNE_RANK") || glm_mpi_launched()) {
        glm_log_debug("--%s: this process is a rank of a launched run: it trains", gpus ? "gpus" : "nproc");
        return -1;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        glm_log_error("cannot find this program's path (/proc/self/exe): %s", strerror(errno));
        return 1;
    }
    self[sl] = 0;
    if (nproc > 0) { /* CPU ranks: MPI starts them */
        if (!glm_mpi_built()) {
            glm_log_error("--nproc %d: this glmtune was built without MPI, which CPU ranks talk over; hint: apt-get install "
                          "libopenmpi-dev openmpi-bin and rebuild", nproc);
            return 1;
        }
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (cores > 0 && nproc > 8 * cores) { /* each rank is a whole training process: 1000 of them swamp a machine */
            glm_log_error("--nproc %d on %ld CPU cores: more than 8 ranks per core is refused (each rank is a whole "
                          "training process); hint: --nproc %ld, or start the ranks yourself with mpirun -np N",
                          nproc, cores, cores);
            return 2;
        }
        char **av = calloc((size_t)argc + 16, sizeof *av);
        int k = 0;
        av[k++] = "mpirun";
        av[k++] = "-np";
        av[k++] = xstrdup_printf("%d", nproc);
        if (cores > 0 && nproc > cores) {
            glm_log_warn("--nproc %d on %ld CPU cores: the ranks share cores (slower than fewer ranks)", nproc, cores);
            av[k++] = "--oversubscribe";
        }
        if (geteuid() == 0) av[k++] = "--allow-run-as-root"; /* Open MPI refuses root otherwise */
        av[k++] = self;
        av[k++] = "train";
        for (int i = 0; i < argc; i++) av[k++] = argv[i];
        av[k] = NULL;
        /* Open MPI on one machine: no single-copy kernel mechanism unless the user chose one
         * (containers forbid the ptrace-based CMA it uses by default, and then every large
         * message fails) */
        char *env[3] = {"GLMTUNE_SUPERVISED=1", NULL, NULL}; /* the ranks: the settings' notes are printed here */
        if (!getenv("OMPI_MCA_btl_vader_single_copy_mechanism"))
            env[1] = "OMPI_MCA_btl_vader_single_copy_mechanism=none";
        launch_child ch = {.argv = av, .env = env, .stop_sig = SIGUSR1}; /* mpirun forwards SIGUSR1 to the ranks */
        snprintf(ch.name, sizeof ch.name, "mpirun (%d CPU ranks)", nproc);
        if (!quiet) glm_log_info("starting %d CPU ranks under mpirun", nproc);
        int code = launch_supervise(&ch, 1, 10.0);
        if (code && !g_sig) {
            if (WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 127) /* execvp failed: the message above says why */
                glm_log_error("mpirun, or the program it was to start, could not be run (status 127: not found); hint: "
                              "apt-get install openmpi-bin (mpirun on PATH), or start the ranks with your MPI launcher "
                              "(mpirun -np %d glmtune train --device cpu ...)", nproc);
            else if (WIFEXITED(ch.status) && WEXITSTATUS(ch.status) > 128)
                glm_log_error("the CPU ranks stopped: one was killed by signal %d (%s); mpirun's message above names the rank",
                              WEXITSTATUS(ch.status) - 128, strsignal(WEXITSTATUS(ch.status) - 128));
            else
                glm_log_error("the CPU ranks stopped with status %d (mpirun's message above names the rank that failed first)",
                              code);
        }
        free(av[2]);
        free(av);
        return code;
    }
    int devs[1024];
    int n = launch_parse_gpus(gpus, devs, 1024);
    if (n < 0) {
        glm_log_error("%s", glm_errmsg());
        return GLM_EXIT_USAGE;
    }
    char idhex[257] = "";
#ifdef GLMTUNE_HAVE_CUDA
    int have = glm_cuda_device_count();
    for (int i = 0; i < n; i++)
        if (devs[i] >= have) {
            glm_log_error("--gpus %s: device %d does not exist (this machine has %d CUDA device%s); hint: %s", gpus,
                          devs[i], have, have == 1 ? "" : "s",
                          have ? "--gpus N for the first N, or a list of the device numbers (--gpus 0,1)"
                               : "--device cpu --nproc N runs N CPU ranks; `train --dry-run --gpus N --max-gpu-memory G` "
                                 "plans for N GPUs without them");
            return GLM_EXIT_USAGE;
        }
    if (n > 1) {
        unsigned char id[128];
        if (glm_cuda_nccl_id(id) != GLM_OK) {
            glm_log_error("--gpus %s: %s", gpus, glm_errmsg());
            return 1;
        }
        for (int i = 0; i < 128; i++) sprintf(idhex + 2 * i, "%02x", id[i]);
    }
#else
    glm_log_error("--gpus %s: this build has only the CPU reference backend (built without nvcc); hint: --device cpu "
                  "--nproc N for CPU ranks", gpus);
    return GLM_EXIT_USAGE;
#endif
    int shared = launch_gpus_shared(devs, n);
    if (shared)
        glm_log_warn("--gpus %s names a GPU more than once: its ranks share it and talk over NCCL's socket transport "
                     "(loopback), each with its own NCCL_HOSTID. This checks the multi-rank code paths' correctness "
                     "only, never their speed; each rank plans its memory as if the GPU's free memory were its own "
                     "(give --max-gpu-memory GiB per rank)", gpus);
    launch_child *ch = calloc((size_t)n, sizeof *ch);
    char **av = calloc((size_t)argc + 3, sizeof *av);
    av[0] = self;
    av[1] = "train";
    for (int i = 0; i < argc; i++) av[i + 2] = argv[i];
    for (int r = 0; r < n; r++) {
        ch[r].argv = av;
        ch[r].env = calloc(24, sizeof(char *));
        ch[r].env[0] = xstrdup_printf("GLMTUNE_RANK=%d", r);
        ch[r].env[1] = xstrdup_printf("GLMTUNE_WORLD_SIZE=%d", n);
        ch[r].env[2] = xstrdup_printf("GLMTUNE_LOCAL_RANK=%d", r);
        ch[r].env[3] = xstrdup_printf("GLMTUNE_DEVICE=%d", devs[r]);
        ch[r].env[4] = xstrdup_printf("GLMTUNE_NCCL_ID=%s", idhex);
        ch[r].env[5] = xstrdup_printf("GLMTUNE_SUPERVISED=1"); /* the settings' notes are printed here */
        if (shared) launch_shared_gpu_env(r, ch[r].env + 6, 16);
        snprintf(ch[r].name, sizeof ch[r].name, "rank %d (GPU %d)", r, devs[r]);
    }
    if (!quiet) glm_log_info("starting %d worker(s), one per GPU (%s)", n, gpus);
    int code = launch_supervise(ch, n, 10.0);
    for (int r = 0; r < n; r++) {
        for (int k = 0; ch[r].env[k]; k++) free(ch[r].env[k]);
        free(ch[r].env);
    }
    free(ch);
    free(av);
    return code;
}
