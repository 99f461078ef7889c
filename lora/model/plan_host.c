/* lora/model/plan_host.c: the host memory the planner plans with (lora/model/plan.h): the machine's
 * memory (or GLMTUNE_HOST_MEMORY_GIB), the ranks on this machine, the margin and each rank's share. */
#include "lora/model/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/meminfo.h"

/* GLMTUNE_HOST_MEMORY_GIB in GiB when it is a plain positive decimal number, else 0 (a warning
 * once when it is set but not one) */
static double env_host_gib(void) {
    const char *env = getenv("GLMTUNE_HOST_MEMORY_GIB"); /* plan for another machine's memory (and tests) */
    if (!env) return 0;
    char *end;
    double g = strtod(env, &end);
    if (*env && strspn(env, "0123456789.eE+") == strlen(env) && end != env && !*end && isfinite(g) && g > 0 && g < 1e9)
        return g;
    static int warned;
    if (!warned++)
        glm_log_warn("GLMTUNE_HOST_MEMORY_GIB=\"%s\" is not a positive number of GiB (e.g. 512): planning with this "
                     "machine's memory", env);
    return 0;
}

int glm_host_memory_from_env(void) { return env_host_gib() > 0; }

double glm_host_memory(void) {
    double g = env_host_gib();
    if (g > 0) return g * 1073741824.0;
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

int glm_local_ranks(void) {
    /* glmtune --gpus starts all its ranks on this machine; MPI launchers, Slurm and torchrun say how many are here */
    const char *vars[] = {"GLMTUNE_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE",
                          "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        int n = v ? atoi(v) : 0; /* Slurm may write "8(x2)": the count before the parenthesis */
        if (n >= 1 && n <= 1 << 20) return n;
    }
    return 1;
}

double glm_host_available(void) { return glm_mem_available(glm_host_memory()); }

double glm_host_margin(void) { return fmax(4.0 * 1073741824.0, 0.05 * glm_host_memory()); }

double glm_host_budget(int ranks_here) {
    const int r = ranks_here > 1 ? ranks_here : 1;
    if (glm_host_memory_from_env()) return fmax(0.0, glm_host_memory() - glm_host_margin()) / r;
    return fmax(0.0, glm_host_available() - glm_host_margin()) / r;
}
