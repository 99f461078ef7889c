/* kernels/cuda_host.h: the host services the program hands to the CUDA module libglm_cuda.so when
 * it loads it (kernels/cuda_loader.c), so that the module resolves no symbol of the program: the
 * module's own glm_err, glm_verr, glm_errmsg, glm_assert_fail and glm_mpi_abort (hidden,
 * kernels/cuda/host.c) forward to the program's through this table, and the program's state is
 * the one both use (this thread's error message, which glm_errmsg reads in the program; MPI).
 * Pure helpers both need (glm_dtype_size, the communication accounting's byte rules) are compiled
 * into both instead (kernels/backend_shared.c).
 *
 * Part of the interface between the program and the module: a change to the struct or to
 * glm_cuda_init bumps GLM_BACKEND_ABI_VERSION (kernels/backend_table.h), which the loader checks
 * before it calls glm_cuda_init. */
#ifndef GLM_KERNELS_CUDA_HOST_H
#define GLM_KERNELS_CUDA_HOST_H

#include <stdarg.h>

#include "common/status.h"

typedef struct glm_cuda_host {
    /* common/status.h's glm_verr, glm_errmsg, glm_vassert_fail (this thread's message) */
    glm_status (*verr)(glm_status code, const char *fmt, va_list ap);
    const char *(*errmsg)(void);
    glm_status (*vassert_fail)(const char *file, int line, const char *cond, const char *fmt, va_list ap);
    /* kernels/backend.h's glm_mpi_abort (MPI_Abort under mpirun / srun, else returns) */
    void (*mpi_abort)(int code);
} glm_cuda_host;

/* The module's entry point that takes the table: called once by the loader, after the version
 * check and before any other entry point of the module; `h` (static storage) stays valid while
 * the module is loaded. Returns GLM_BACKEND_ABI_VERSION (the loader checks it again). */
typedef int (*glm_cuda_init_fn)(const glm_cuda_host *h);

#endif
