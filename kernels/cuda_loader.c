/* kernels/cuda_loader.c: the CUDA backend's entry points (kernels/backend.h), from the module
 * libglm_cuda.so loaded on first use.
 *
 * Why not link it: cuBLAS, cuBLASLt, NCCL and the CUDA runtime are mapped, relocated and
 * initialised by the dynamic loader when the program starts, for every glmtune command: about
 * 0.08 CPU-seconds and 26,000 page faults (225 MB resident) before main(), measured on the 2-core
 * development VM, which `glmtune tokenize`, `inspect` or `--help` never need. Loaded here, they
 * are paid for only by the commands that ask for a GPU (train, bench; `--device auto` asks how
 * many there are).
 *
 * The module (the .cu files of kernels/cuda) is looked up next to the running program
 * (<dir of /proc/self/exe>/libglm_cuda.so, then <that dir>/../lib/glmtune/libglm_cuda.so, where
 * `cmake --install` puts it), then at its place in the build tree. The module resolves no symbol
 * of the program: what it needs of the program's state (this thread's error message, MPI's abort)
 * it gets through the host-services table (kernels/cuda_host.h) that glm_cuda_init receives here,
 * before any other entry point is called; the pure helpers both use are compiled into both
 * (kernels/backend_shared.c). tests/kernels/module_symbols.sh checks it with nm.
 * A module whose glm_cuda_abi_version() is not this program's GLM_BACKEND_ABI_VERSION
 * (kernels/backend_table.h), or that lacks it, is refused: it was built from other sources, and its
 * op table would not match.
 * When it cannot be loaded, glm_cuda_device_count() is 0 with a warning that names the reason,
 * and glm_backend_cuda* fail with that reason. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "kernels/backend.h"
#include "kernels/comm.h"
#include "kernels/cuda_host.h"

#ifndef GLM_CUDA_MODULE
#define GLM_CUDA_MODULE "libglm_cuda.so"
#endif

/* The program's services the module uses (kernels/cuda_host.h). */
static const glm_cuda_host host = {
    .verr = glm_verr, .errmsg = glm_errmsg, .vassert_fail = glm_vassert_fail, .mpi_abort = glm_mpi_abort};

static struct {
    const glm_backend *(*backend)(int, glm_status *);
    const glm_backend *(*backend_dist)(int, int, int, const unsigned char *, glm_status *);
    void (*close)(const glm_backend *);
    int (*device_count)(void);
    const char *(*device_name)(int);
    glm_status (*nccl_id)(unsigned char *);
    const char *(*attention_impl)(const glm_backend *);
} fn;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char why[1024]; /* why the module could not be loaded; "" = loaded */

static char opened[PATH_MAX + 64]; /* the path of the module dlopen took */
static void *module;                /* its handle, once loaded and accepted */

static void *try_open(const char *path, char *errs, size_t cap) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) snprintf(opened, sizeof opened, "%s", path);
    if (!h) {
        const char *e = dlerror();
        size_t n = strlen(errs);
        snprintf(errs + n, cap - n, "%s%s", n ? "; " : "", e ? e : path);
    }
    return h;
}

static void load(void) {
    char exe[PATH_MAX], path[PATH_MAX + 64], errs[sizeof why] = "";
    void *h = NULL;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/libglm_cuda.so", exe);
        if (access(path, F_OK) == 0) h = try_open(path, errs, sizeof errs);
        snprintf(path, sizeof path, "%s/../lib/glmtune/libglm_cuda.so", exe);
        if (!h && access(path, F_OK) == 0) h = try_open(path, errs, sizeof errs);
    }
    if (!h && !errs[0]) h = try_open(GLM_CUDA_MODULE, errs, sizeof errs);
    if (h) {
        int (*abi)(void) = NULL;
        *(void **)&abi = dlsym(h, "glm_cuda_abi_version");
        int v = abi ? abi() : 0;
        if (v != GLM_BACKEND_ABI_VERSION) {
            snprintf(why, sizeof why, "the CUDA backend %.600s is refused: it was built for backend interface version %d%s, "
                     "this glmtune has version %d (the module comes from other sources); hint: rebuild it with this "
                     "glmtune (cmake --build <build dir>), or copy the libglm_cuda.so built with this glmtune beside "
                     "the glmtune program", opened, v, abi ? "" : " (it has no glm_cuda_abi_version: an older module)",
                     GLM_BACKEND_ABI_VERSION);
            glm_log_warn("%s", why);
            dlclose(h);
            return;
        }
        glm_cuda_init_fn init = NULL;
        struct {
            const char *name;
            void **p;
        } need[] = {{"glm_cuda_init", (void **)&init},
                    {"glm_backend_cuda", (void **)&fn.backend},
                    {"glm_backend_cuda_dist", (void **)&fn.backend_dist},
                    {"glm_backend_cuda_close", (void **)&fn.close},
                    {"glm_cuda_device_count", (void **)&fn.device_count},
                    {"glm_cuda_device_name", (void **)&fn.device_name},
                    {"glm_cuda_nccl_id", (void **)&fn.nccl_id},
                    {"glm_cuda_attention_impl", (void **)&fn.attention_impl}};
        const char *missing = NULL;
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
            if (!(*need[i].p = dlsym(h, need[i].name)) && !missing) missing = need[i].name;
        if (!missing) {
            int v2 = init(&host); /* the program's services, before any other entry point */
            if (v2 == GLM_BACKEND_ABI_VERSION) {
                module = h;
                return;
            }
            snprintf(errs, sizeof errs, "%.600s: glm_cuda_init answered interface version %d after glm_cuda_abi_version "
                     "said %d (a broken module)", opened, v2, v);
        } else {
            snprintf(errs, sizeof errs, "%.600s lacks the entry point %s (a module of another glmtune version?)", opened,
                     missing);
        }
        memset(&fn, 0, sizeof fn);
    }
    snprintf(why, sizeof why, "the CUDA backend (libglm_cuda.so) could not be loaded: %s; hint: keep "
             "libglm_cuda.so next to the glmtune program (the build puts it there)", errs);
    glm_log_warn("%s", why);
}

static bool ready(void) {
    pthread_once(&once, load);
    return fn.device_count != NULL;
}

const glm_backend *glm_backend_cuda(int device, glm_status *st) {
    if (ready()) return fn.backend(device, st);
    *st = glm_err(GLM_ERR_UNSUPPORTED, "%s", why);
    return NULL;
}

const glm_backend *glm_backend_cuda_dist(int device, int rank, int world, const unsigned char *nccl_id,
                                         glm_status *st) {
    if (ready()) return fn.backend_dist(device, rank, world, nccl_id, st);
    *st = glm_err(GLM_ERR_UNSUPPORTED, "%s", why);
    return NULL;
}

void glm_backend_cuda_close(const glm_backend *be) {
    if (be && ready()) fn.close(be);
}

int glm_cuda_device_count(void) { return ready() ? fn.device_count() : 0; }

const char *glm_cuda_device_name(int device) { return ready() ? fn.device_name(device) : "(no CUDA backend)"; }

const char *glm_cuda_attention_impl(const glm_backend *be) {
    return ready() ? fn.attention_impl(be) : "(no CUDA backend)";
}

glm_status glm_cuda_nccl_id(unsigned char id[128]) {
    if (ready()) return fn.nccl_id(id);
    return glm_err(GLM_ERR_UNSUPPORTED, "%s", why);
}

void *glm_cuda_module_symbol(const char *name) { return ready() && module ? dlsym(module, name) : NULL; }
