/* common/arena.h: a bump allocator for short-lived memory, and jansson's values in it.
 *
 * `glmtune tokenize` builds and frees thousands of small jansson values per record (the parsed
 * record, the converted conversation, the chat template's variables); with malloc/free that was
 * about a fifth of the command's time. A worker thread instead routes jansson's allocations to
 * its arena while it processes one record (glm_json_arena_begin/end) and then resets the arena:
 * allocating is a pointer bump, freeing a value is free of cost, and the memory is reused for the
 * next record. jansson's reference counting is unchanged (values are still freed as usual); only
 * where their bytes live changes. */
#ifndef GLM_ARENA_H
#define GLM_ARENA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct glm_arena_chunk glm_arena_chunk;

/* Zero-initialise (or glm_arena_init) before use. */
typedef struct glm_arena {
    glm_arena_chunk *head; /* chunks in use, newest first */
    glm_arena_chunk *spare; /* chunks kept by glm_arena_reset for reuse */
    char *cur, *end;       /* free space of the newest chunk */
    size_t used;           /* bytes handed out since the last reset */
    size_t limit;          /* glm_arena_alloc refuses (NULL) past this many bytes */
} glm_arena;

/* An empty arena that hands out at most `limit` bytes between resets (0: 64 MiB). */
void glm_arena_init(glm_arena *a, size_t limit);

/* n bytes aligned to 16, valid until glm_arena_reset / glm_arena_free. Returns NULL when the
 * request is large (>= 64 KiB: such blocks are better served by malloc), when the arena's limit
 * would be passed, or when out of memory; the caller then uses malloc. */
void *glm_arena_alloc(glm_arena *a, size_t n);

/* Is p inside memory this arena handed out since the last reset? */
bool glm_arena_owns(const glm_arena *a, const void *p);

/* Forgets every allocation; keeps one chunk for reuse and frees the others. */
void glm_arena_reset(glm_arena *a);

/* Frees all memory of the arena (it may be used again as if zero-initialised). */
void glm_arena_free(glm_arena *a);

/* Installs glmtune's allocation functions in jansson (json_set_alloc_funcs), once per process:
 * malloc and free for every thread outside a glm_json_arena_begin/end span. Call it before
 * other threads use jansson (glm_json_arena_begin calls it too). */
void glm_json_alloc_install(void);

/* From now on, the jansson values this thread creates take their memory from `a` (blocks the
 * arena refuses come from malloc), and freeing such a value costs nothing, until
 * glm_json_arena_end. Every value created in between must be freed before the arena is reset
 * (a value freed after glm_json_arena_end but before the reset is still recognised), and must
 * not be handed to another thread or kept by a cache. Not reentrant: one span per thread. */
void glm_json_arena_begin(glm_arena *a);

/* Ends this thread's span: jansson allocates with malloc again. */
void glm_json_arena_end(void);

#endif
