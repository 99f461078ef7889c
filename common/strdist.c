/* common/strdist.c: see strdist.h. */
#include "common/strdist.h"

#include <stdlib.h>
#include <string.h>

size_t glm_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = malloc((lb + 1) * sizeof(size_t));
    if (!row) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

const char *glm_closest_name(const char *s, const char *const *cands, size_t n) {
    const char *best = NULL;
    size_t bd = (size_t)-1, lim = strlen(s) / 4 > 2 ? strlen(s) / 4 : 2;
    for (size_t i = 0; i < n; i++) {
        if (!cands[i]) continue;
        size_t d = glm_edit_distance(s, cands[i]);
        if (d < bd) bd = d, best = cands[i];
    }
    return bd <= lim ? best : NULL;
}
