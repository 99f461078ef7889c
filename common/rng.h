/* common/rng.h: seeded, platform-independent random numbers (xoshiro256** seeded by
 * splitmix64; Blackman & Vigna, https://prng.di.unimi.it/). The state is plain data so that a
 * checkpoint can save and restore it exactly. */
#ifndef GLM_RNG_H
#define GLM_RNG_H

#include <stdint.h>

typedef struct glm_rng {
    uint64_t s[4];
} glm_rng;

/* Seeds from a 64-bit seed and a stream id (different streams are independent sequences). */
void glm_rng_seed(glm_rng *r, uint64_t seed, uint64_t stream);
uint64_t glm_rng_u64(glm_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double glm_rng_uniform(glm_rng *r);
/* Uniform integer in [0, n), unbiased (n > 0). */
uint64_t glm_rng_below(glm_rng *r, uint64_t n);
/* Standard normal (Box-Muller, double). */
double glm_rng_normal(glm_rng *r);

#endif
