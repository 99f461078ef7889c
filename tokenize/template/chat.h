/* tokenize/template/chat.h: GLM-4 chat encoding for training (docs/design.md §3, fixtures chat_golden).
 *
 * A conversation is rendered with the model's chat template (tokenize/template/template.h) and
 * tokenized with special-token strings recognised only where the TEMPLATE produced them:
 * `<|{{ role }}|>` (literal "<|" + data "user" + literal "|>") becomes the special token
 * <|user|>, while "<|user|>" typed inside a message's content stays plain text. */
#ifndef GLM_TOKENIZE_CHAT_H
#define GLM_TOKENIZE_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "common/status.h"
#include "common/vec.h"
#include "tokenize/template/template.h"
#include "tokenize/tokenizer.h"

/* Which messages are targets when a message carries no "loss" flag (bits; flags always win). */
typedef enum {
    GLM_TRAIN_ALL = 0,    /* every assistant turn is trained (the GLM-4 finetune recipe) */
    GLM_TRAIN_LAST = 1,   /* only the last assistant message (LLaMA-Factory's mask_history) */
    GLM_TRAIN_PROMPT = 2, /* system, user and observation messages too (train_on_prompt) */
} glm_train_on;

/* Encodes one conversation for training and APPENDS to ids / targets (same count to each).
 * messages: JSON array of objects {role: "system"|"user"|"assistant"|"observation",
 *   content: string (null/absent = empty), metadata?: string, tools?: array, loss?: bool};
 *   strings valid UTF-8, as jansson keeps them (values made with its *_nocheck constructors must
 *   be: the text the native GLM-4 renderer produces is not checked again).
 * ids = P + R(m_1) + ... + R(m_n) + [<|user|>], where P = the ids of the template rendered with
 *   messages=[] (GLM-4: [gMASK] <sop>), R(m) = the ids of the template rendered with
 *   messages=[m] with its leading P removed (ids via glm_chat_encode_output). The final
 *   <|user|> ends the last turn so that the model learns to stop.
 * targets[i] (0/1, uint8) = 1 when ids[i-1] belongs to a counted message: the tokens after its
 *   role token up to and including the role token that ends the turn. A message is counted when
 *   its "loss" is true, not when it is false; without a flag, assistant messages are counted (all
 *   of them, or with GLM_TRAIN_LAST the last one) and, with GLM_TRAIN_PROMPT, every other
 *   message too. targets[0] of a conversation is 0 (the prefix is never a target).
 *   In transformers' convention labels[i] = targets[i] ? ids[i] : -100.
 * Errors (ids/targets are then left as they were): GLM_ERR_FORMAT for a malformed message
 *   (names the message index and field, with a hint) or a template error, GLM_ERR_MISMATCH
 *   when a message's render does not start with P (a template this encoding cannot split) or
 *   the tokenizer has no <|user|>, GLM_ERR_NOMEM. Thread-safe for distinct ids/targets. */
glm_status glm_chat_encode(const glm_tokenizer *tok, const glm_template *tpl, json_t *messages,
                           glm_train_on train_on, glm_u32vec *ids, glm_u8vec *targets);

/* Encodes pretraining text and APPENDS to ids / targets: P (the template rendered with no
 * messages: GLM-4's [gMASK] <sop>, the prefix its tokenizer adds with special tokens), the text's
 * ids (glm_tokenizer_encode: special-token strings stay plain text), then the end-of-text id
 * (glm_tokenizer_eos_id). Every token after P is a target (the first text token included, eos
 * included); the tokens of P are not. Errors (ids/targets then left as they were):
 * GLM_ERR_MISMATCH when the tokenizer has no end-of-text token, the template's errors,
 * glm_tokenizer_encode's, GLM_ERR_NOMEM. Thread-safe for distinct ids/targets. */
glm_status glm_text_encode(const glm_tokenizer *tok, const glm_template *tpl, const char *text, size_t len,
                           glm_u32vec *ids, glm_u8vec *targets);

/* Renders `messages` (same form as above) with vars {messages, add_generation_prompt},
 * APPENDING segments to *out. The text of the whole conversation (chat_golden's "text").
 * Errors: as glm_template_render; GLM_ERR_FORMAT for a malformed message. */
glm_status glm_chat_render(const glm_template *tpl, json_t *messages, int add_generation_prompt,
                           glm_tpl_output *out);

/* Is tpl one of the GLM-4-9B chat templates that glm_chat_render_native renders (recognised by
 * the exact text of its source, and checked against the interpreter's renders of a few probe
 * messages, once per template and thread)? */
bool glm_chat_native_template(const glm_template *tpl);

/* Renders messages=[m] (m NULL: messages=[]) with add_generation_prompt false into the EMPTY
 * output *out, producing exactly the segments glm_chat_render gives (texts, literal flags,
 * merging), without the interpreter (tokenize/template/chat_native.c). Returns false, leaving *out empty,
 * when tpl is not a known GLM-4 template or m is outside the common form the native renderer
 * covers (then render with glm_chat_render); m must have passed glm_chat_encode's message checks.
 * Thread-safe. */
bool glm_chat_render_native(const glm_template *tpl, json_t *m, glm_tpl_output *out);

/* Tokenizes rendered segments, APPENDING to *ids: the segments' texts are concatenated; every
 * occurrence of one of the tokenizer's special-token strings (leftmost, longest first) becomes
 * its id, EXCEPT a match lying entirely inside one data segment (literal = 0), which stays
 * text; the text between special tokens is encoded with glm_tokenizer_encode (runs may cross
 * segment boundaries, exactly as encoding the concatenated string).
 * Errors: as glm_tokenizer_encode (ids unchanged on error). */
glm_status glm_chat_encode_output(const glm_tokenizer *tok, const glm_tpl_output *o, glm_u32vec *ids);

/* Loads and parses a chat template. path = NULL: the tokenizer's (tokenizer_config.json
 * "chat_template"); otherwise a file: a .json file is read as a tokenizer_config.json (its
 * "chat_template", a string or a list of {name, template} whose "default" entry is used),
 * any other file is the template text itself (e.g. .jinja).
 * Errors: GLM_ERR_IO (unreadable file), GLM_ERR_FORMAT (no chat_template; hint: pass one with
 * a template file; or a template syntax error with line:col), GLM_ERR_NOMEM. */
glm_status glm_chat_template_load(const glm_tokenizer *tok, const char *path, glm_template **out);

#endif
