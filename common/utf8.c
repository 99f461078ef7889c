#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t glm_utf8_check(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        /* 3-byte characters (CJK) at a time: E1-EC and EE-EF take any two continuation bytes,
         * E0 needs A0-BF next (no overlong form), ED 80-9F (no surrogate) */
        while (i + 3 <= len && (c & 0xF0) == 0xE0) {
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F))
                return i;
            i += 3;
            if (i >= len) return len;
            c = s[i];
        }
        if (c < 0x80) continue;
        size_t n;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
        else return i;
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return len;
}

char *glm_utf8_lossy(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *w = out; /* each bad byte becomes 3 bytes at most */
    if (!out) return NULL;
    size_t i = 0;
    while (i < n) {
        size_t ok = glm_utf8_check(s + i, n - i);
        memcpy(w, s + i, ok);
        w += ok;
        i += ok;
        if (i < n) { /* skip one bad byte */
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    *w = 0;
    return out;
}
