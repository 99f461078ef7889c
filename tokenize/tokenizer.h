/* tokenize/tokenizer.h: GLM tokenizers (tiktoken BPE for GLM-4, SentencePiece for ChatGLM-style
 * vocabularies) behind one interface.
 *
 * Token ids are uint32 everywhere (docs/design.md §4). A loaded tokenizer is immutable: encode/decode
 * and every query may be called concurrently from many threads on one tokenizer. */
#ifndef GLM_TOKENIZER_H
#define GLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/vec.h"

typedef struct glm_tokenizer glm_tokenizer;

/* Loads a tokenizer.
 * path: a model directory (holding tokenizer.model and optionally tokenizer_config.json) or a
 *   tokenizer file (tokenizer_config.json is then looked up in the same directory).
 * The kind is detected by file CONTENT, not name: tiktoken BPE text (first line
 * "base64(token) rank", i.e. ^[A-Za-z0-9+/=]+ [0-9]+$) or a SentencePiece model (protobuf
 * ModelProto).
 * Special tokens (id -> string) come from tokenizer_config.json "added_tokens_decoder"; for
 * SentencePiece also the model's user-defined and control pieces; for a ChatGLM3-style
 * SentencePiece vocabulary whose config names no special tokens and whose model has no
 * "<|user|>" piece, the ChatGLM3 specials [MASK] [gMASK] [sMASK] sop eop <|system|> <|user|>
 * <|assistant|> <|observation|> take ids vocab_size, vocab_size+1, ... in that order.
 * *out: a new tokenizer (free with glm_tokenizer_free); untouched on failure.
 * Errors: GLM_ERR_IO (missing/unreadable file), GLM_ERR_FORMAT (malformed model or config;
 * the message names the file and line/offset), GLM_ERR_NOMEM, GLM_ERR_LIBRARY (PCRE2 cannot
 * compile the split regex; sentencepiece disagrees with the model's own piece count). */
glm_status glm_tokenizer_load(const char *path, glm_tokenizer **out);

/* Frees a tokenizer (NULL is fine). */
void glm_tokenizer_free(glm_tokenizer *t);

/* Encodes ordinary text (UTF-8, `len` bytes, need not be NUL-terminated) and APPENDS the ids to
 * *out. Special-token strings inside the text are plain text (never special ids).
 * tiktoken: pre-split by the GLM-4 regex, then byte-pair merge by rank (as tiktoken does).
 * SentencePiece: the model's own segmentation, with user-defined pieces not matched in text.
 * Thread-safe. Errors: GLM_ERR_FORMAT for invalid UTF-8 (message gives the byte offset),
 * GLM_ERR_NOMEM, GLM_ERR_LIBRARY (a PCRE2 match error, a sentencepiece encode failure). On error *out keeps its previous ids (anything appended is removed). */
glm_status glm_tokenizer_encode(const glm_tokenizer *t, const char *text, size_t len, glm_u32vec *out);

/* glm_tokenizer_encode for text the caller knows to be valid UTF-8 (made of strings that a JSON
 * parser checked, for instance): the same ids, without checking the text again. Invalid UTF-8
 * here is a caller's bug (the split regex's behaviour on it is undefined). */
glm_status glm_tokenizer_encode_valid(const glm_tokenizer *t, const char *text, size_t len, glm_u32vec *out);

/* Decodes ids to bytes APPENDED to *out (not NUL-terminated; special ids become their strings).
 * The bytes need not be valid UTF-8 when a multi-byte character is cut between ids.
 * tiktoken: the concatenated token bytes. SentencePiece: pieces with U+2581 as a space, byte
 * pieces <0xNN> as the byte, control pieces that are not special as nothing, unknown as
 * " \u2047 ", and the one space of the dummy prefix (add_dummy_prefix) dropped when ids[0] is
 * an ordinary piece, so decode(encode(text)) == text for a model with byte fallback and the
 * identity normalizer.
 * Errors: GLM_ERR_ARG naming the first id that is out of range or unassigned (*out unchanged),
 * GLM_ERR_NOMEM. */
glm_status glm_tokenizer_decode(const glm_tokenizer *t, const uint32_t *ids, size_t n, glm_charvec *out);

/* The id of special token `s` (`len` bytes, exact match), or -1 if `s` is not special. */
int64_t glm_tokenizer_special_id(const glm_tokenizer *t, const char *s, size_t len);

/* Number of special tokens. */
size_t glm_tokenizer_n_special(const glm_tokenizer *t);

/* The i-th special token (in increasing id order), i < n_special: returns its NUL-terminated
 * string (owned by the tokenizer) and stores its id in *id (if id != NULL). NULL if i is out of
 * range. */
const char *glm_tokenizer_special(const glm_tokenizer *t, size_t i, uint32_t *id);

/* The longest special token whose string (up to its NUL) is a prefix of s[0..n): returns its
 * length and stores its id in *id; 0 when none matches (empty strings never do). Of two specials
 * with the same string, the lower id. */
size_t glm_tokenizer_special_at(const glm_tokenizer *t, const char *s, size_t n, uint32_t *id);

/* Flags for the 256 byte values: nonzero when some special token's string starts with that byte. */
const unsigned char *glm_tokenizer_special_starts(const glm_tokenizer *t);

/* The length of the longest special token string (0: no specials). */
size_t glm_tokenizer_special_maxlen(const glm_tokenizer *t);

/* Max id + 1, special tokens included (GLM-4: 151343; the model's padded_vocab_size is larger). */
uint32_t glm_tokenizer_vocab_size(const glm_tokenizer *t);

/* FNV-1a 64 over the model file's bytes, then for each special token in id order its id
 * (4 bytes, little endian) and its string with a terminating NUL. Equal fingerprints mean the
 * same ids for the same text. */
uint64_t glm_tokenizer_fingerprint(const glm_tokenizer *t);

/* tokenizer_config.json's "chat_template" string, or NULL when absent. Owned by the tokenizer. */
const char *glm_tokenizer_chat_template(const glm_tokenizer *t);

/* The end-of-text id: tokenizer_config.json's "eos_token" when it is a special token, else
 * "<|endoftext|>" (GLM-4: 151329); -1 when the tokenizer has neither. */
int64_t glm_tokenizer_eos_id(const glm_tokenizer *t);

/* "tiktoken" or "sentencepiece". */
const char *glm_tokenizer_kind(const glm_tokenizer *t);

/* The model file's path as loaded (e.g. "<dir>/tokenizer.model"). Owned by the tokenizer. */
const char *glm_tokenizer_path(const glm_tokenizer *t);

#endif
