/* tests/kernels/fake_cuda_module.c: a stand-in for libglm_cuda.so from other sources, for
 * test_cuda_loader. FAKE_STALE: it reports a backend interface version one above this build's
 * (a module built before or after the op table changed); FAKE_UNVERSIONED: it has the entry points of
 * a module from before the version check, but no glm_cuda_abi_version. Nothing here is ever called
 * but the version: the loader must refuse the module first. */
#include <stddef.h>

#include "kernels/backend.h"

#ifdef FAKE_STALE
int glm_cuda_abi_version(void) { return GLM_BACKEND_ABI_VERSION + 1; }
#endif

int glm_cuda_device_count(void) { return 1; } /* what a working module on a GPU machine says */
