/* common/vec.h: growable arrays. GLM_VEC(T) declares {T *v; size_t n, cap;}; glm_vec_push
 * appends (returns GLM_ERR_NOMEM on failure). Zero-initialise before use; free(v.v) after. */
#ifndef GLM_VEC_H
#define GLM_VEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#define GLM_VEC(T) struct { T *v; size_t n, cap; }

/* Makes room for `extra` more elements. */
#define glm_vec_reserve(vec, extra)                                                            \
    glm_vec_grow_((void **)&(vec).v, &(vec).cap, (vec).n + (extra), sizeof(*(vec).v))
#define glm_vec_push(vec, x)                                                                   \
    (glm_vec_reserve(vec, 1) == GLM_OK ? ((vec).v[(vec).n++] = (x), GLM_OK) : GLM_ERR_NOMEM)
#define glm_vec_free(vec) (free((vec).v), (vec).v = NULL, (vec).n = (vec).cap = 0)

static inline glm_status glm_vec_grow_(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return GLM_OK;
    size_t nc = *cap ? *cap : 16;
    while (nc < need && nc <= SIZE_MAX / 2) nc *= 2;
    if (nc < need || nc > SIZE_MAX / elem) /* size_t overflow: cannot be allocated anyway */
        return glm_err(GLM_ERR_NOMEM, "out of memory (an array of %zu elements is too large)", need);
    void *p = realloc(*v, nc * elem);
    if (!p) return glm_err(GLM_ERR_NOMEM, "out of memory (growing an array to %zu elements)", nc);
    *v = p;
    *cap = nc;
    return GLM_OK;
}

/* Commonly used vectors. */
typedef GLM_VEC(uint32_t) glm_u32vec;
typedef GLM_VEC(uint8_t) glm_u8vec;
typedef GLM_VEC(char) glm_charvec;

#endif
