#include "hash.h"

#include <pthread.h>
#include <zlib.h>

uint32_t glm_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

static uint32_t crc32c_table[256];
static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc32c_table[i] = c;
    }
}

static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

uint32_t glm_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc32c_once, crc32c_init); /* callers may be on several threads */
    const unsigned char *p = data;
    crc = ~crc;
    while (n--) crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t glm_crc32c_masked(const void *data, size_t n) {
    uint32_t c = glm_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

uint64_t glm_fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
