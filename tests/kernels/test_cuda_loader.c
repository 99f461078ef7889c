/* tests/kernels/test_cuda_loader.c: the CUDA module loader (kernels/cuda_loader.c) refuses a
 * libglm_cuda.so beside the program that was built for another backend interface version
 * (FAKE_STALE) or that predates the version (FAKE_UNVERSIONED; fake_cuda_module.c): no device is
 * reported, glm_backend_cuda fails with GLM_ERR_UNSUPPORTED, and the message names both versions,
 * the module's path and the hint. FAKE_NOINIT: a module of this version without glm_cuda_init (the
 * host-services table's entry point) is refused the same way, the message naming the entry point. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "common/status.h"
#include "kernels/backend.h"

int main(void) {
    char exe[PATH_MAX], module[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0, "readlink /proc/self/exe");
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(module, sizeof module, "%s/libglm_cuda.so", exe);
    CHECK(access(module, F_OK) == 0, "the fake module %s is there", module);

    /* the fake says 1 device: a loaded module would report it */
    CHECK(glm_cuda_device_count() == 0, "a refused module reports no device (got %d)", glm_cuda_device_count());
    glm_status st = GLM_OK;
    const glm_backend *be = glm_backend_cuda(0, &st);
    const char *msg = glm_errmsg();
    CHECK(!be && st == GLM_ERR_UNSUPPORTED, "glm_backend_cuda refuses (status %d)", (int)st);
    CHECK(strstr(msg, module) != NULL, "the message names the module %s: %s", module, msg);
#ifdef FAKE_NOINIT
    CHECK(strstr(msg, "lacks the entry point glm_cuda_init"), "the missing entry point: %s", msg);
    CHECK(strstr(msg, "hint: keep libglm_cuda.so next to the glmtune program"), "the hint: %s", msg);
#else
    char want[128];
#ifdef FAKE_STALE
    snprintf(want, sizeof want, "built for backend interface version %d,", GLM_BACKEND_ABI_VERSION + 1);
#else
    snprintf(want, sizeof want, "version 0 (it has no glm_cuda_abi_version");
#endif
    CHECK(strstr(msg, want) != NULL, "the module's version (\"%s\"): %s", want, msg);
    snprintf(want, sizeof want, "this glmtune has version %d", GLM_BACKEND_ABI_VERSION);
    CHECK(strstr(msg, want) != NULL, "the program's version (\"%s\"): %s", want, msg);
    CHECK(strstr(msg, "hint: rebuild") && strstr(msg, "beside the glmtune program"), "the hint: %s", msg);
#endif
    return check_summary("test_cuda_loader");
}
