/* tokenize/template/chat_internal.h (private to chat.c and chat_native.c): a message's fields, and a
 * rendered output kept flat (one text, segment boundaries) for the encoder. Not a public
 * interface; see chat.h. */
#ifndef GLM_TOKENIZE_CHAT_INTERNAL_H
#define GLM_TOKENIZE_CHAT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "common/vec.h"
#include "tokenize/template/chat.h"

/* The fields of one message that rendering and targets read (borrowed; NULL when absent). */
typedef struct {
    json_t *role, *content, *metadata, *tools, *loss;
} chat_msg;

/* A render as one text: segment i is text[start[i] .. start[i+1]) (start[n] = text.n is not
 * stored), literal or not as glm_tpl_segment. Zero-initialise; reuse after chat_flat_clear. */
typedef struct {
    glm_charvec text;
    GLM_VEC(size_t) start;
    glm_u8vec literal;
} chat_flat;

static inline void chat_flat_clear(chat_flat *f) { f->text.n = f->start.n = f->literal.n = 0; }
static inline void chat_flat_free(chat_flat *f) {
    glm_vec_free(f->text);
    glm_vec_free(f->start);
    glm_vec_free(f->literal);
}

/* Reads m's fields (m must be an object). */
static inline chat_msg chat_msg_of(json_t *m) {
    return (chat_msg){json_object_get(m, "role"), json_object_get(m, "content"), json_object_get(m, "metadata"),
                      json_object_get(m, "tools"), json_object_get(m, "loss")};
}

/* glm_chat_render_native into an EMPTY flat output (m NULL: no message); false (f left empty)
 * when the template or the message is not one it renders, or out of memory. */
bool chat_native_flat(const glm_template *tpl, const chat_msg *m, chat_flat *f);

/* glm_chat_encode_output for a flat output (f->start.n segments). valid: the text is known to be
 * valid UTF-8 (the native render of JSON strings), so it is not checked again. */
glm_status chat_encode_flat(const glm_tokenizer *tok, const chat_flat *f, bool valid, glm_u32vec *ids);

#endif
