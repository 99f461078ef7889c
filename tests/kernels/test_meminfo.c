/* tests/kernels/test_meminfo.c: host memory available (common/meminfo.h), one rule for the CPU
 * backend and the host-offload planner: glm_meminfo_value parses /proc/meminfo texts (whole field
 * names, kB to bytes, absent fields); with GLMTUNE_MEMINFO naming a file where the page cache
 * holds most of memory (MemFree 1 GiB, MemAvailable 50 GiB), the CPU backend's mem_info reports
 * MemAvailable as its free memory (it reported MemFree, sysconf(_SC_AVPHYS_PAGES), and tiny runs
 * failed after large file reads with a negative budget) and glm_host_available the same; without
 * MemAvailable, both 3/4 of the total. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/meminfo.h"
#include "kernels/backend.h"
#include "lora/model/plan.h"
#include "tests/check.h"

static const char *const TEXT = "MemTotal:       131072000 kB\n"
                                "MemFree:         1048576 kB\n"
                                "MemAvailableX:         7 kB\n"
                                "MemAvailable:   52428800 kB\n"
                                "Buffers:          123456 kB\n"
                                "Cached:         50000000 kB\n";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0, "write %s", path);
    if (f) fclose(f);
}

int main(void) {
    const double K = 1024.0, G = 1073741824.0;
    CHECK(glm_meminfo_value(TEXT, "MemAvailable") == 52428800 * K, "MemAvailable: %.0f", glm_meminfo_value(TEXT, "MemAvailable"));
    CHECK(glm_meminfo_value(TEXT, "MemFree") == 1048576 * K, "MemFree (a line after the first)");
    CHECK(glm_meminfo_value(TEXT, "MemTotal") == 131072000 * K, "MemTotal (the first line)");
    CHECK(glm_meminfo_value(TEXT, "Cached") == 50000000 * K, "Cached (the last line)");
    CHECK(glm_meminfo_value(TEXT, "Mem") == -1, "a prefix of a field name is no field");
    CHECK(glm_meminfo_value(TEXT, "SwapFree") == -1, "an absent field: -1");
    CHECK(glm_meminfo_value("", "MemAvailable") == -1, "an empty text: -1");
    CHECK(glm_meminfo_value("MemAvailable: lots\n", "MemAvailable") == -1, "a value that does not parse: -1");

    const glm_backend *cpu = glm_backend_cpu();
    size_t fr = 0, tot = 0;
    char path[] = "/tmp/glm_meminfo.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    write_file(path, TEXT);
    setenv("GLMTUNE_MEMINFO", path, 1);
    glm_be_mem_info(cpu, &fr, &tot, NULL, NULL);
    CHECK((double)fr == 50.0 * G, "the CPU backend's free memory is MemAvailable (50 GiB), not MemFree (1 GiB): %.3f GiB",
          (double)fr / G);
    CHECK(tot > 0, "the CPU backend's total memory (physical)");
    CHECK(glm_host_available() == 50.0 * G, "the planner's available memory is the same MemAvailable: %.3f GiB",
          glm_host_available() / G);

    /* no MemAvailable (a kernel before 3.14): 3/4 of the total, for both */
    write_file(path, "MemTotal:       131072000 kB\nMemFree:         1048576 kB\n");
    glm_be_mem_info(cpu, &fr, &tot, NULL, NULL);
    CHECK((double)fr == (double)(size_t)(0.75 * (double)tot), "without MemAvailable, 3/4 of the total: %zu of %zu", fr, tot);
    if (!glm_host_memory_from_env())
        CHECK(glm_host_available() == 0.75 * glm_host_memory(), "the planner: 3/4 of the machine's memory");
    unsetenv("GLMTUNE_MEMINFO");
    unlink(path);

    /* the real /proc/meminfo, where there is one: a positive amount, at most the total */
    glm_be_mem_info(cpu, &fr, &tot, NULL, NULL);
    CHECK(fr > 0 && fr <= tot, "this machine: %zu bytes available of %zu", fr, tot);
    return check_summary("test_meminfo");
}
