/* tests/kernels/fake_cuda_module.c: a stand-in for libglm_cuda.so from other sources, for
 * test_cuda_loader. FAKE_STALE: it reports a backend interface version one above this build's
 * (a module built before or after the op table changed); FAKE_UNVERSIONED: it has the entry points of
 * a module from before the version check, but no glm_cuda_abi_version; FAKE_NOINIT: this build's
 * version and every entry point but glm_cuda_init, which takes the program's host services (a
 * module from before the host-services table, kernels/cuda_host.h). Nothing here is ever called
 * but the version: the loader must refuse the module first. */
#include <stddef.h>

#include "kernels/backend.h"

#ifdef FAKE_STALE
int glm_cuda_abi_version(void) { return GLM_BACKEND_ABI_VERSION + 1; }
#endif
#ifdef FAKE_NOINIT
int glm_cuda_abi_version(void) { return GLM_BACKEND_ABI_VERSION; }
const glm_backend *glm_backend_cuda(int device, glm_status *st) { return NULL; }
const glm_backend *glm_backend_cuda_dist(int device, int rank, int world, const unsigned char *id, glm_status *st) {
    return NULL;
}
void glm_backend_cuda_close(const glm_backend *be) {}
const char *glm_cuda_device_name(int device) { return "fake"; }
glm_status glm_cuda_nccl_id(unsigned char id[128]) { return GLM_ERR_UNSUPPORTED; }
const char *glm_cuda_attention_impl(const glm_backend *be) { return "fake"; }
#endif

int glm_cuda_device_count(void) { return 1; } /* what a working module on a GPU machine says */
