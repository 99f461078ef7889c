/* common/meminfo.h: how much host memory the machine can give now, one rule for every user (the
 * CPU backend's be->mem_info, kernels/cpu/backend_cpu.c; the host-offload planner's
 * glm_host_available, lora/model/plan.c): MemAvailable of /proc/meminfo, the kernel's estimate of
 * what can be allocated without swapping, which counts reclaimable page cache as available. Not
 * MemFree (sysconf(_SC_AVPHYS_PAGES)): after large file reads (a checkpoint, shards) the page
 * cache holds most of memory and MemFree is a small fraction of what is really there. */
#ifndef GLM_COMMON_MEMINFO_H
#define GLM_COMMON_MEMINFO_H

/* The value of field `key` ("MemAvailable", "MemFree", ...) of a /proc/meminfo text (lines
 * "Key:   <n> kB"), in bytes (n x 1024); -1 when the text has no such line or it does not parse.
 * The key must match the whole field name ("MemAvailable" never matches "MemAvailableX"). */
double glm_meminfo_value(const char *text, const char *key);

/* The machine's available memory now in bytes: MemAvailable of /proc/meminfo (the file named by
 * GLMTUNE_MEMINFO instead, when set: a test hook); where that is unknown (no /proc, a kernel
 * before 3.14), 3/4 of `total` (the caller's idea of the machine's memory, in bytes). */
double glm_mem_available(double total);

#endif
