/* dataset/formats.h: one JSON record -> a normalized GLM-4 conversation (docs/design.md §2).
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
 *   text         {"text": "..."}: pretraining text (another column with --text-column, or a
 *                dataset_info entry whose only column is "prompt", as LLaMA-Factory's pt datasets)
 * A LLaMA-Factory dataset_info.json entry (rec->mapping) renames columns and role tags.
 *
 * What the converted turns say about training, for tokenize/template/chat.h:
 *   - a message of a turn that carries a loss flag gets "loss": true/false: "loss" (xtuner,
 *     ms-swift), "weight" 0/1 (axolotl), "loss_weight" 0/1 (LLaMA-Factory v1), "training"
 *     (axolotl); other values, or two flags that disagree, drop the record ("bad_loss_flag");
 *   - reasoning (an assistant's "reasoning_content", or content parts of type "reasoning" /
 *     "thinking") is dropped (note "reasoning_dropped") or, with keep_reasoning, put before the
 *     answer as "<think>\n...\n</think>\n\n" (note "reasoning_kept");
 *   - an empty user or assistant turn ("", [], only whitespace) drops the record ("empty_turn");
 *   - the role order is checked after conversion (with merge_consecutive_turns, neighbours of one
 *     role are joined first): a first turn from the assistant, two user turns in a row, or a tool
 *     result with no tool call before it drop the record ("role_order"), naming the turn.
 * Numbers in tools and tool-call arguments keep the text Python's json.loads/json.dumps give
 * them (common/pyjson.h), whatever other numbers the record holds. */
#ifndef GLM_DATASET_FORMATS_H
#define GLM_DATASET_FORMATS_H

#include <jansson.h>

#include "common/status.h"
#include "common/vec.h"
#include "dataset/reader.h"

typedef enum {
    GLM_FMT_AUTO, GLM_FMT_MESSAGES, GLM_FMT_SHAREGPT, GLM_FMT_ALPACA, GLM_FMT_PRETOKENIZED,
    GLM_FMT_TEXT
} glm_format;

/* Parses a --format value: "auto", "messages", "sharegpt", "alpaca", "pretokenized", "text"
 * (also "openai" = messages, "pt" = text). Errors: GLM_ERR_ARG naming the accepted values. */
glm_status glm_format_parse(const char *name, glm_format *out);

/* The name of a format ("auto", "messages", ...). */
const char *glm_format_name(glm_format f);

typedef struct glm_conversation {
    glm_format format;      /* detected or forced */
    json_t *messages;       /* normalized GLM-4 messages (owned), NULL for pretokenized / text */
    json_t *input_ids, *labels; /* pretokenized: arrays of ints (owned); labels may be NULL */
    json_t *text;           /* text: the text (a JSON string, owned) */
    int loss_flag_turns;    /* source turns whose target status came from a loss flag */
    int loss_flag_off;      /* ... of which flagged "not a target" */
    int n_notes;
    const char *notes[8];   /* distinct non-fatal notes (static strings): "reasoning_dropped",
                               "reasoning_kept", "turns_merged", "tool_arguments_not_json" */
} glm_conversation;

/* How records are converted (zero = the defaults). */
typedef struct glm_convert_opts {
    glm_format format;            /* GLM_FMT_AUTO (per record) or the layout to force */
    const char *text_column;      /* the text layout's field (NULL: "text", or the dataset_info
                                     entry's); given, a record with this field is text in auto */
    bool keep_reasoning;          /* keep reasoning in the content instead of dropping it */
    bool merge_consecutive_turns; /* join neighbouring turns of one role before the order check */
    bool chat_only;               /* supervised fine-tuning (a LLaMA-Factory YAML whose stage is not pt):
                                     the records of a pretraining dataset_info entry (columns {"prompt":
                                     "text"}, no response) are dropped, reason "pretraining_entry", as
                                     LLaMA-Factory drops them under stage sft, instead of becoming
                                     all-target text among the chats */
} glm_convert_opts;

/* Converts one record (rec->value must be set) to *out. opt->format GLM_FMT_AUTO detects per
 * record (a pretraining dataset_info entry -> text; "messages" key -> messages; "conversations"
 * or a sharegpt/openai mapping -> sharegpt; "instruction" or another mapping -> alpaca;
 * "input_ids" -> pretokenized; only a "text" field (or the --text-column field) -> text);
 * another value forces the layout. opt NULL = the defaults.
 * Per-record problems return GLM_ERR_FORMAT with *reason set to a short key: "no_messages",
 * "unknown_role", "bad_message", "bad_content", "bad_tools", "bad_tool_call", "bad_loss_flag",
 * "empty_turn", "role_order", "empty_conversation", "unsupported_layout", "no_response",
 * "bad_history", "bad_input_ids", "bad_labels", "no_text", "empty_text", "preference_pair" (a record of
 * a "ranking" dataset_info entry, or with both "chosen" and "rejected": DPO data), "kto_label" (a record
 * of an entry with a kto_tag column, or whose "label" is true/false: KTO data) -- these two unless the
 * layout is forced to text or pretokenized, each with the hint that preference training is not
 * available yet; the thread's message
 * (glm_errmsg) says "source:line: record N: what (naming the turn); hint".
 * GLM_ERR_NOMEM on allocation failure. On failure *out holds nothing to free. Thread-safe. */
glm_status glm_record_convert_ex(const glm_record *rec, const glm_convert_opts *opt,
                                 glm_conversation *out, const char **reason);

/* glm_record_convert_ex with the default options and the layout `fmt`. */
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
