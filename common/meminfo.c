#include "meminfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double glm_meminfo_value(const char *text, const char *key) {
    const size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, kl) || p[kl] != ':') continue;
        double kb;
        return sscanf(p + kl + 1, " %lf kB", &kb) == 1 && kb >= 0 ? kb * 1024.0 : -1;
    }
    return -1;
}

double glm_mem_available(double total) {
    const char *path = getenv("GLMTUNE_MEMINFO");
    FILE *f = fopen(path && *path ? path : "/proc/meminfo", "r");
    char text[16384];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    double v = glm_meminfo_value(text, "MemAvailable");
    return v >= 0 ? v : 0.75 * total;
}
