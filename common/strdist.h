/* common/strdist.h: string distance for "did you mean" hints (option names, YAML keys, dataset
 * names). */
#ifndef GLM_COMMON_STRDIST_H
#define GLM_COMMON_STRDIST_H

#include <stddef.h>

/* Levenshtein distance between a and b: the fewest single-byte insertions, deletions and
 * substitutions that turn a into b (Levenshtein 1966). O(|a| |b|) time, O(|b|) memory; returns
 * (size_t)-1 when memory runs out. */
size_t glm_edit_distance(const char *a, const char *b);

/* The candidate nearest to s (ties: the first), when its distance is at most max(2, |s| / 4),
 * else NULL: only a related name is worth suggesting. cands[n]: NUL-terminated names (NULL
 * entries are skipped). */
const char *glm_closest_name(const char *s, const char *const *cands, size_t n);

#endif
