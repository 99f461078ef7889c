/* kernels/backend_shared.c: the backend-independent helpers that both backends use, compiled into
 * glm_kernels (the program, the CPU backend) and into the CUDA module libglm_cuda.so, where they
 * are hidden (kernels/CMakeLists.txt: C_VISIBILITY_PRESET hidden): the module takes no symbol
 * from the program. Pure functions only (no state): state the two must share (the error message,
 * MPI) goes through the host-services table (kernels/cuda_host.h). */
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/comm.h"

size_t glm_dtype_size(glm_dtype dt) { return dt == GLM_DT_BF16 ? 2 : dt == GLM_DT_F64 ? 8 : 4; }

double glm_comm_all_reduce_bytes(double bytes, int world) { return world > 1 ? 2.0 * (world - 1) / world * bytes : 0; }
double glm_comm_all_gather_bytes(double shard_bytes, int world) { return world > 1 ? (double)(world - 1) * shard_bytes : 0; }

double glm_comm_delay_ms(void) {
    const char *s = getenv("GLMTUNE_COMM_DELAY_MS");
    if (!s || !*s) return 0;
    char *end;
    double v = strtod(s, &end);
    return *end || !(v > 0) || v > 1e6 ? 0 : v;
}
