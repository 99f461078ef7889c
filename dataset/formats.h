/* dataset/formats.h: one JSON record -> a normalized GLM-4 conversation (DESIGN.md §2).
 *
 * Output messages follow GLM-4's chat format (THUDM GLM-4 finetune/README.md, the
 * chat_template of glm-4-9b-chat's tokenizer_config.json): an array of
 *   {"role": "system"|"user"|"assistant"|"observation", "content": string,
 *    "metadata": string (assistant tool calls: the function name), "tools": array (system only)}
 * Tool calls are assistant messages with metadata = function name and content = the arguments as
 * JSON text. Tools are attached to the (first) system message; an empty-content system message
 * is inserted at the start when there is none (the template skips empty content).
 *
 * Layouts read (auto-detected per record from its keys, or forced):
 *   messages     {"messages": [{role, content, tool_calls?, metadata?, tools?}], "tools"?}
 *                OpenAI / GLM-4 / LLaMA-Factory v1 (content as text or a list of typed parts)
 *   sharegpt     {"conversations": [{from, value}], "system"?, "tools"?}  (also role/content)
 *   alpaca       {instruction, input?, output | response, system?, history?}
 *   pretokenized {"input_ids": [...], "labels"?: [...]}
 * A LLaMA-Factory dataset_info.json entry (rec->mapping) renames columns and role tags. */
#ifndef GLM_DATASET_FORMATS_H
#define GLM_DATASET_FORMATS_H

#include <jansson.h>

#include "common/status.h"
#include "common/vec.h"
#include "dataset/reader.h"

typedef enum { GLM_FMT_AUTO, GLM_FMT_MESSAGES, GLM_FMT_SHAREGPT, GLM_FMT_ALPACA, GLM_FMT_PRETOKENIZED } glm_format;

/* Parses a --format value: "auto", "messages", "sharegpt", "alpaca", "pretokenized" (also
 * "openai" = messages). Errors: GLM_ERR_ARG naming the accepted values. */
glm_status glm_format_parse(const char *name, glm_format *out);

/* The name of a format ("auto", "messages", ...). */
const char *glm_format_name(glm_format f);

typedef struct glm_conversation {
    glm_format format;      /* detected or forced */
    json_t *messages;       /* normalized GLM-4 messages (owned), NULL for pretokenized */
    json_t *input_ids, *labels; /* pretokenized: arrays of ints (owned); labels may be NULL */
    int n_notes;
    const char *notes[8];   /* distinct non-fatal notes (static strings): "empty_turn",
                               "reasoning_dropped", "tool_arguments_not_json", "big_int_as_real" */
} glm_conversation;

/* Converts one record (rec->value must be set) to *out. fmt: GLM_FMT_AUTO detects per record
 * ("messages" key -> messages; "conversations" or a sharegpt/openai mapping -> sharegpt;
 * "instruction" -> alpaca; "input_ids" -> pretokenized); another value forces the layout.
 * Per-record problems return GLM_ERR_FORMAT with *reason set to a short key: "no_messages",
 * "unknown_role", "bad_message", "bad_content", "bad_tools", "bad_tool_call",
 * "empty_conversation", "unsupported_layout", "no_response", "bad_history", "bad_input_ids",
 * "bad_labels"; the thread's message (glm_errmsg) says "source:line: record N: what; hint".
 * GLM_ERR_NOMEM on allocation failure. On failure *out holds nothing to free. Thread-safe. */
glm_status glm_record_convert(const glm_record *rec, glm_format fmt, glm_conversation *out,
                              const char **reason);

/* Frees what *c owns and zeroes it. */
void glm_conversation_free(glm_conversation *c);

/* Appends `v` serialized as Python's json.dumps(v, ensure_ascii=False) does by default:
 * separators ", " and ": ", object keys in their order, non-ASCII text as is, control characters
 * escaped (\n \r \t \b \f, others \u00xx), floats as Python's repr (shortest round-trip digits,
 * exponent form below 1e-4 and from 1e16). Used for tool-call arguments, so the text matches
 * what LLaMA-Factory / transformers feed the GLM-4 template. Errors: GLM_ERR_NOMEM. */
glm_status glm_json_dumps_py(const json_t *v, glm_charvec *out);

#endif
