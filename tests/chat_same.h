/* tests/chat_same.h: whether two rendered chat templates are the same segments (texts, literal
 * flags and boundaries): the native GLM-4 renderer and the interpreter are held to this. */
#ifndef GLM_TESTS_CHAT_SAME_H
#define GLM_TESTS_CHAT_SAME_H
#include <string.h>

#include "tokenize/template/chat.h"

static int same_segments(const glm_tpl_output *a, const glm_tpl_output *b) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->seg[i].literal != b->seg[i].literal || a->seg[i].len != b->seg[i].len ||
            memcmp(a->seg[i].text, b->seg[i].text, a->seg[i].len))
            return 0;
    return 1;
}

#endif
