/* kernels/cuda/host.c: the module's side of the host-services table (kernels/cuda_host.h): the
 * definitions of the program's functions that the module's code calls, each forwarding to the
 * program's through the table that glm_cuda_init received. Compiled with hidden visibility
 * (kernels/CMakeLists.txt: C_VISIBILITY_PRESET hidden), like kernels/backend_shared.c, so the
 * module neither takes these symbols from the program nor exports them; glm_cuda_init is its one
 * exported symbol here. The loader calls glm_cuda_init before any other entry point, so H is set
 * whenever module code runs. */
#include "kernels/backend.h"
#include "kernels/cuda_host.h"

static const glm_cuda_host *H;

__attribute__((visibility("default"))) int glm_cuda_init(const glm_cuda_host *h) {
    H = h;
    return GLM_BACKEND_ABI_VERSION;
}

glm_status glm_verr(glm_status code, const char *fmt, va_list ap) { return H->verr(code, fmt, ap); }

glm_status glm_err(glm_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    H->verr(code, fmt, ap);
    va_end(ap);
    return code;
}

const char *glm_errmsg(void) { return H->errmsg(); }

glm_status glm_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    glm_status st = H->vassert_fail(file, line, cond, fmt, ap);
    va_end(ap);
    return st;
}

void glm_mpi_abort(int code) { H->mpi_abort(code); }
