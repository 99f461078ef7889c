/* common/arena.c: a bump allocator, and jansson's values in it (see arena.h). */
#include "common/arena.h"

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

enum { ALIGN = 16, FIRST_CHUNK = 256 << 10, LARGE = 64 << 10 };

struct glm_arena_chunk {
    glm_arena_chunk *next;
    size_t size;     /* bytes of data after the header */
    _Alignas(16) char data[];
};

void glm_arena_init(glm_arena *a, size_t limit) {
    *a = (glm_arena){0};
    a->limit = limit;
}

void *glm_arena_alloc(glm_arena *a, size_t n) {
    if (n >= LARGE) return NULL;
    n = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (n == 0) n = ALIGN;
    size_t limit = a->limit ? a->limit : (size_t)64 << 20;
    if (a->used + n > limit) return NULL;
    if ((size_t)(a->end - a->cur) < n) {
        glm_arena_chunk *c = a->spare;
        if (c) {
            a->spare = c->next;
        } else {
            size_t size = a->head ? a->head->size * 2 : FIRST_CHUNK;
            if (!(c = malloc(sizeof *c + size))) return NULL;
            c->size = size;
        }
        c->next = a->head;
        a->head = c;
        a->cur = c->data;
        a->end = c->data + c->size;
    }
    void *p = a->cur;
    a->cur += n;
    a->used += n;
    return p;
}

bool glm_arena_owns(const glm_arena *a, const void *p) {
    uintptr_t x = (uintptr_t)p;
    for (const glm_arena_chunk *c = a->head; c; c = c->next)
        if (x >= (uintptr_t)c->data && x < (uintptr_t)c->data + c->size) return true;
    return false;
}

void glm_arena_reset(glm_arena *a) {
    /* keep the largest chunk (the newest, as sizes double) for reuse, free the others */
    glm_arena_chunk *keep = a->head ? a->head : a->spare;
    glm_arena_chunk *lists[2] = {a->head, a->spare};
    for (int l = 0; l < 2; l++)
        for (glm_arena_chunk *c = lists[l], *next; c; c = next) {
            next = c->next;
            if (c != keep) free(c);
        }
    if (keep) keep->next = NULL;
    a->head = NULL;
    a->spare = keep;
    a->cur = a->end = NULL;
    a->used = 0;
}

static _Thread_local glm_arena *tl_arena; /* the span's arena, kept after its end until freed */
static _Thread_local bool tl_on;          /* inside a span: allocate from tl_arena */

void glm_arena_free(glm_arena *a) {
    glm_arena_reset(a);
    free(a->spare);
    *a = (glm_arena){0};
    if (tl_arena == a) tl_arena = NULL, tl_on = false;
}

/* ------------------------------------------------------------------ jansson's allocations */

static void *json_alloc(size_t n) {
    if (tl_on) {
        void *p = glm_arena_alloc(tl_arena, n);
        if (p) return p;
    }
    return malloc(n);
}

static void json_dealloc(void *p) {
    if (!p) return;
    if (tl_arena && glm_arena_owns(tl_arena, p)) return; /* freed with the arena */
    free(p);
}

static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static void install(void) { json_set_alloc_funcs(json_alloc, json_dealloc); }

void glm_json_alloc_install(void) { pthread_once(&install_once, install); }

void glm_json_arena_begin(glm_arena *a) {
    glm_json_alloc_install();
    tl_arena = a;
    tl_on = true;
}

void glm_json_arena_end(void) { tl_on = false; }
