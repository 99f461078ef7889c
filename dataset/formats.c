/* dataset/formats.c: record -> normalized GLM-4 conversation (see formats.h). */
#include "dataset/formats.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pyjson.h"
#include "dataset/dataset_info.h"

/* ---------------------------------------------------------------- format names */

static const char *const FORMAT_NAMES[] = {"auto", "messages", "sharegpt", "alpaca", "pretokenized", "text"};
#define N_FORMATS (sizeof FORMAT_NAMES / sizeof *FORMAT_NAMES)

glm_status glm_format_parse(const char *name, glm_format *out) {
    if (!name || !*name) {
        *out = GLM_FMT_AUTO;
        return GLM_OK;
    }
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(name, FORMAT_NAMES[i]) == 0) {
            *out = (glm_format)i;
            return GLM_OK;
        }
    if (strcmp(name, "openai") == 0) {
        *out = GLM_FMT_MESSAGES;
        return GLM_OK;
    }
    if (strcmp(name, "pt") == 0 || strcmp(name, "pretrain") == 0) {
        *out = GLM_FMT_TEXT;
        return GLM_OK;
    }
    return glm_err(GLM_ERR_ARG, "--format %s: unknown format; hint: use auto, messages, sharegpt, "
                   "alpaca, pretokenized or text", name);
}

const char *glm_format_name(glm_format f) {
    return (unsigned)f < N_FORMATS ? FORMAT_NAMES[f] : "?";
}

void glm_conversation_free(glm_conversation *c) {
    if (!c) return;
    json_decref(c->text);
    json_decref(c->messages);
    json_decref(c->input_ids);
    json_decref(c->labels);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- text helpers */

static glm_status put(glm_charvec *o, const char *s, size_t n) {
    GLM_TRY(glm_vec_reserve(*o, n + 1));
    memcpy(o->v + o->n, s, n);
    o->n += n;
    o->v[o->n] = 0; /* keep it a C string */
    return GLM_OK;
}
static glm_status puts_(glm_charvec *o, const char *s) { return put(o, s, strlen(s)); }

glm_status glm_json_dumps_py(const json_t *v, glm_charvec *o) {
    char *s = glm_tojson((json_t *)v, -1); /* json.dumps' default separators, one line */
    if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory serialising JSON");
    glm_status st = puts_(o, s);
    free(s);
    return st;
}

/* ---------------------------------------------------------------- conversion context */

typedef struct conv {
    const glm_record *rec;
    const glm_dsinfo_entry *map;
    const glm_convert_opts *opt;
    glm_conversation *out;
    const char **reason;
    json_t *tools;          /* collected tools (owned) or NULL */
    const char *list_key;   /* where the turns come from ("messages", "history", ...) */
    GLM_VEC(int) turn;      /* per output message: its turn index in list_key (-1: none) */
    int cur_turn;           /* the turn being converted */
    json_t *cur_loss;       /* its loss flag (true/false) or NULL */
} conv;

/* The hint added to a message that has none of its own. */
static const char *default_hint(const char *reason) {
    static const struct { const char *reason, *hint; } H[] = {
        {"bad_tools", "tools must be a JSON list of function schemas, or that list as a string"},
        {"bad_tool_call", "a tool call is {\"name\": \"fn\", \"arguments\": {...}}"},
        {"bad_content", "content must be text, or a list of {\"type\": \"text\", \"text\": ...} "
                        "parts"},
        {"bad_message", "each message is {\"role\": ..., \"content\": ...}"},
        {"bad_history", "history is a list of [question, answer] pairs of strings"},
        {"bad_input_ids", "input_ids are token ids: integers from 0 to the vocabulary size - 1"},
        {"bad_labels", "labels are token ids or -100, one per input id (transformers convention)"},
    };
    for (size_t i = 0; i < sizeof H / sizeof *H; i++)
        if (!strcmp(H[i].reason, reason)) return H[i].hint;
    return "fix or drop the record";
}

static glm_status failv(conv *c, const char *reason, const char *fmt, va_list ap) {
    char what[1024];
    vsnprintf(what, sizeof what, fmt, ap);
    *c->reason = reason;
    bool hinted = strstr(what, "hint:") != NULL;
    return glm_err(GLM_ERR_FORMAT, "%s:%lld: record %lld: %s%s%s",
                   c->rec->source ? c->rec->source : "?", (long long)c->rec->line,
                   (long long)c->rec->index, what, hinted ? "" : "; hint: ",
                   hinted ? "" : default_hint(reason));
}

static glm_status fail(conv *c, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static glm_status fail(conv *c, const char *reason, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    glm_status s = failv(c, reason, fmt, ap);
    va_end(ap);
    return s;
}

static glm_status nomem(void) { return glm_err(GLM_ERR_NOMEM, "out of memory converting a record"); }

static void note(conv *c, const char *key) {
    glm_conversation *o = c->out;
    for (int i = 0; i < o->n_notes; i++)
        if (strcmp(o->notes[i], key) == 0) return;
    if (o->n_notes < 8) o->notes[o->n_notes++] = key;
}

/* A JSON string that is text (not a number kept as text by glm_json_loadb_py). */
static bool is_text(const json_t *v) { return json_is_string(v) && !glm_json_numtext(v, NULL, NULL, NULL); }

static const char *type_name(const json_t *v) {
    if (!v) return "missing";
    char kind;
    if (glm_json_numtext(v, &kind, NULL, NULL)) return kind == 'i' ? "an integer" : "a number";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Appends {"role", "content"[, "metadata"][, "loss"]} to the output (loss: the current turn's
 * flag, see loss_flag) and remembers its turn index. The content is put together from the
 * record's strings (UTF-8 checked when the record was parsed) and ASCII, so it is not checked
 * again. */
static glm_status push_msg(conv *c, const char *role, const char *content, size_t len,
                           const char *metadata) {
    json_t *m = json_object();
    if (!m || json_object_set_new(m, "role", json_string(role)) ||
        json_object_set_new(m, "content", json_stringn_nocheck(content, len)) ||
        (metadata && json_object_set_new(m, "metadata", json_string(metadata))) ||
        (c->cur_loss && json_object_set(m, "loss", c->cur_loss)) ||
        json_array_append_new(c->out->messages, m)) {
        json_decref(m);
        return nomem();
    }
    if (glm_vec_push(c->turn, c->cur_turn) != GLM_OK) return nomem();
    return GLM_OK;
}

/* ---------------------------------------------------------------- tools */

/* Adds the tools in `v` (a list, or a JSON-encoded string of one; "" / "[]" / null = none) to
 * c->tools. Bare function schemas {name, description, parameters} are wrapped as
 * {"type": "function", "function": schema} (the GLM-4 template reads tool.function). */
static glm_status add_tools(conv *c, const json_t *v, const char *where) {
    if (!v || json_is_null(v)) return GLM_OK;
    json_t *parsed = NULL;
    if (is_text(v)) {
        const char *s = json_string_value(v);
        size_t k = 0;
        while (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') k++;
        if (!s[k]) return GLM_OK;
        json_error_t jerr;
        parsed = glm_json_loadb_py(s, strlen(s), JSON_DECODE_ANY, &jerr);
        if (!parsed)
            return fail(c, "bad_tools", "%s is a string but not valid JSON (column %d: %s); "
                        "hint: tools must be a JSON list of function schemas, or that list "
                        "encoded as a string", where, jerr.column, jerr.text);
        v = parsed;
    }
    glm_status st = GLM_OK;
    if (json_is_object(v)) { /* one tool */
        json_t *arr = json_array();
        if (!arr || json_array_append((json_t *)arr, (json_t *)v)) st = nomem();
        json_decref(parsed);
        parsed = arr;
        v = arr;
        if (st) return st;
    }
    if (!json_is_array(v)) {
        st = fail(c, "bad_tools", "%s is %s, not a list of tools; hint: tools must be a JSON list "
                  "of function schemas", where, type_name(v));
        json_decref(parsed);
        return st;
    }
    if (!c->tools && !(c->tools = json_array())) st = nomem();
    for (size_t i = 0; i < json_array_size(v) && st == GLM_OK; i++) {
        json_t *t = json_array_get(v, i);
        json_t *type = json_object_get(t, "type");
        json_t *fn = json_object_get(t, "function");
        json_t *item = NULL;
        if (!json_is_object(t)) {
            st = fail(c, "bad_tools", "%s[%zu] is %s, not an object; hint: each tool is "
                      "{\"name\", \"description\", \"parameters\"} or {\"type\": \"function\", "
                      "\"function\": {...}}", where, i, type_name(t));
        } else if (is_text(type)) {
            if (strcmp(json_string_value(type), "function") == 0 &&
                !(json_is_object(fn) && is_text(json_object_get(fn, "name"))))
                st = fail(c, "bad_tools", "%s[%zu] has type \"function\" but no \"function\" "
                          "object with a \"name\"; hint: use {\"type\": \"function\", "
                          "\"function\": {\"name\": ..., \"parameters\": ...}}", where, i);
            else
                item = json_incref(t);
        } else if (is_text(json_object_get(t, "name"))) {
            item = json_object();
            if (!item || json_object_set_new(item, "type", json_string("function")) ||
                json_object_set(item, "function", t))
                st = nomem();
        } else {
            st = fail(c, "bad_tools", "%s[%zu] has neither a \"type\" nor a \"name\"; hint: each "
                      "tool is a function schema {\"name\", \"description\", \"parameters\"}",
                      where, i);
        }
        if (st == GLM_OK && json_array_append_new(c->tools, item)) st = nomem();
        else if (st != GLM_OK) json_decref(item);
    }
    json_decref(parsed);
    return st;
}

/* Puts c->tools on the first system message, inserting an empty one at the start if needed. */
static glm_status attach_tools(conv *c) {
    if (!c->tools || json_array_size(c->tools) == 0) return GLM_OK;
    json_t *msgs = c->out->messages;
    json_t *sys = NULL;
    for (size_t i = 0; i < json_array_size(msgs) && !sys; i++) {
        json_t *m = json_array_get(msgs, i);
        if (strcmp(json_string_value(json_object_get(m, "role")), "system") == 0) sys = m;
    }
    if (!sys) {
        sys = json_object();
        if (!sys || json_object_set_new(sys, "role", json_string("system")) ||
            json_object_set_new(sys, "content", json_string("")) ||
            json_array_insert_new(msgs, 0, sys))
            return nomem();
    }
    if (json_object_set(sys, "tools", c->tools)) return nomem();
    return GLM_OK;
}

/* ---------------------------------------------------------------- tool calls */

/* Appends an assistant tool-call message: metadata = name, content = arguments as JSON text
 * (a string is used as is; an object is serialized like Python's json.dumps). */
static glm_status push_tool_call(conv *c, const json_t *name, const json_t *args,
                                 const char *where) {
    if (!is_text(name) || json_string_length(name) == 0)
        return fail(c, "bad_tool_call", "%s has no function \"name\"; hint: a tool call is "
                    "{\"name\": \"fn\", \"arguments\": {...}}", where);
    glm_charvec text = {0};
    glm_status st = GLM_OK;
    if (!args || json_is_null(args)) {
        st = puts_(&text, "{}");
    } else if (is_text(args)) {
        json_error_t jerr;
        json_t *chk = glm_json_loadb_py(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &jerr);
        if (!chk) note(c, "tool_arguments_not_json");
        json_decref(chk);
        st = put(&text, json_string_value(args), json_string_length(args));
    } else {
        st = glm_json_dumps_py(args, &text);
    }
    if (st == GLM_OK)
        st = push_msg(c, "assistant", text.v ? text.v : "", text.n, json_string_value(name));
    glm_vec_free(text);
    return st;
}

/* A tool call written as JSON text {"name": ..., "arguments": ...} (ShareGPT function_call
 * turns, LLaMA-Factory "tool_call" content parts). A list of calls is accepted too. */
static glm_status push_tool_call_text(conv *c, const json_t *v, const char *where) {
    if (!v || json_is_null(v))
        return fail(c, "bad_tool_call", "%s has no content; hint: a tool call is {\"name\": \"fn\", "
                    "\"arguments\": {...}} as JSON text", where);
    json_t *parsed = NULL;
    if (is_text(v)) {
        json_error_t jerr;
        parsed = glm_json_loadb_py(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &jerr);
        if (!parsed)
            return fail(c, "bad_tool_call", "%s is not valid JSON (column %d: %s); hint: a tool "
                        "call is {\"name\": \"fn\", \"arguments\": {...}} as JSON text",
                        where, jerr.column, jerr.text);
        v = parsed;
    }
    glm_status st = GLM_OK;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && st == GLM_OK; i++) {
            json_t *x = json_array_get(v, i);
            if (!json_is_object(x))
                st = fail(c, "bad_tool_call", "%s[%zu] is %s, not {\"name\", \"arguments\"}",
                          where, i, type_name(x));
            else
                st = push_tool_call(c, json_object_get(x, "name"), json_object_get(x, "arguments"),
                                    where);
        }
    } else if (json_is_object(v)) {
        st = push_tool_call(c, json_object_get(v, "name"), json_object_get(v, "arguments"), where);
    } else {
        st = fail(c, "bad_tool_call", "%s is %s, not {\"name\", \"arguments\"}", where,
                  type_name(v));
    }
    json_decref(parsed);
    return st;
}

/* ---------------------------------------------------------------- roles */

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_OBSERVATION, R_FUNCTION_CALL, R_UNKNOWN };
static const char *const ROLE_OUT[] = {"system", "user", "assistant", "observation", "assistant"};

static int map_role(const conv *c, const char *r) {
    const glm_dsinfo_entry *m = c->map;
    if (m) {
        if (m->system_tag && !strcmp(r, m->system_tag)) return R_SYSTEM;
        if (m->user_tag && !strcmp(r, m->user_tag)) return R_USER;
        if (m->assistant_tag && !strcmp(r, m->assistant_tag)) return R_ASSISTANT;
        if (m->observation_tag && !strcmp(r, m->observation_tag)) return R_OBSERVATION;
        if (m->function_tag && !strcmp(r, m->function_tag)) return R_FUNCTION_CALL;
    }
    if (!strcmp(r, "system")) return R_SYSTEM;
    if (!strcmp(r, "user") || !strcmp(r, "human")) return R_USER;
    if (!strcmp(r, "assistant") || !strcmp(r, "gpt")) return R_ASSISTANT;
    /* OpenAI "tool" and legacy "function" results are GLM-4 observations */
    if (!strcmp(r, "observation") || !strcmp(r, "tool") || !strcmp(r, "function"))
        return R_OBSERVATION;
    if (!strcmp(r, "function_call")) return R_FUNCTION_CALL;
    return R_UNKNOWN;
}

/* ---------------------------------------------------------------- messages / ShareGPT turns */

/* Converts the content of message `i` (string, null, or list of typed parts) into text, a list of
 * pending tool calls (parts of type "tool_call", owned by *calls) and the text of its reasoning
 * parts (type "reasoning" or "thinking"). */
static glm_status content_text(conv *c, const json_t *content, size_t i, glm_charvec *text,
                               json_t **calls, glm_charvec *reasoning) {
    if (!content || json_is_null(content)) return GLM_OK;
    if (is_text(content))
        return put(text, json_string_value(content), json_string_length(content));
    if (!json_is_array(content))
        return fail(c, "bad_content", "message %zu: content is %s; hint: content must be a "
                    "string or a list of {\"type\": \"text\", \"text\": ...} parts", i,
                    type_name(content));
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *part = json_array_get(content, k);
        if (is_text(part)) {
            GLM_TRY(put(text, json_string_value(part), json_string_length(part)));
            continue;
        }
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *val = json_object_get(part, "text");
        if (!val) val = json_object_get(part, "value");
        if (!json_is_object(part) || !type)
            return fail(c, "bad_content", "message %zu, content part %zu is %s without a \"type\"; "
                        "hint: parts look like {\"type\": \"text\", \"text\": \"...\"}", i, k,
                        type_name(part));
        if (!strcmp(type, "text")) {
            if (!is_text(val))
                return fail(c, "bad_content", "message %zu, text part %zu has no string \"text\" "
                            "or \"value\"", i, k);
            GLM_TRY(put(text, json_string_value(val), json_string_length(val)));
        } else if (!strcmp(type, "reasoning") || !strcmp(type, "thinking")) {
            /* GLM-4-9B has no slot for chain-of-thought: collected for the reasoning policy */
            json_t *rv = is_text(val) ? val : json_object_get(part, "thinking");
            if (!is_text(rv))
                return fail(c, "bad_content", "message %zu, %s part %zu has no string \"text\" or "
                            "\"value\"", i, type, k);
            GLM_TRY(put(reasoning, json_string_value(rv), json_string_length(rv)));
        } else if (!strcmp(type, "tool_call")) {
            if (!val)
                return fail(c, "bad_tool_call", "message %zu, tool_call part %zu has no \"value\"",
                            i, k);
            if (!*calls && !(*calls = json_array())) return nomem();
            if (json_array_append(*calls, val)) return nomem();
        } else {
            return fail(c, "bad_content", "message %zu, content part %zu has type \"%s\": only "
                        "text, reasoning and tool_call parts are supported (GLM-4-9B chat is "
                        "text-only); hint: drop non-text parts", i, k, type);
        }
    }
    return GLM_OK;
}

/* True when s[0..n) is empty or only whitespace (ASCII or the common Unicode spaces). */
static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        if (b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\v' || b == '\f') { i++; continue; }
        if (i + 2 < n && b == 0xE3 && (unsigned char)s[i + 1] == 0x80 && (unsigned char)s[i + 2] == 0x80) {
            i += 3; /* U+3000 ideographic space */
            continue;
        }
        if (i + 1 < n && b == 0xC2 && ((unsigned char)s[i + 1] == 0xA0 || (unsigned char)s[i + 1] == 0x85)) {
            i += 2; /* U+00A0, U+0085 */
            continue;
        }
        return false;
    }
    return true;
}

/* Reads the per-turn loss flag of message m (turn i) into c->cur_loss: "loss": true/false
 * (xtuner, ms-swift), "weight": 0/1 (axolotl), "loss_weight": 0/1 (LLaMA-Factory v1),
 * "training": true/false (axolotl's message_field_training); null = no flag. The flag decides
 * whether the turn is a target, whatever its role (tokenize/template/chat.h). Counts flagged turns. */
static glm_status loss_flag(conv *c, const json_t *m, size_t i) {
    static const char *const keys[] = {"loss", "weight", "loss_weight", "training"};
    c->cur_loss = NULL;
    int flag = -1;
    const char *from = NULL;
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        json_t *v = json_object_get(m, keys[k]);
        if (!v || json_is_null(v)) continue;
        int f;
        if (json_is_boolean(v)) f = json_is_true(v);
        else if (json_is_number(v) && (json_number_value(v) == 0 || json_number_value(v) == 1))
            f = json_number_value(v) == 1;
        else
            return fail(c, "bad_loss_flag", "%s[%zu].%s is %s%s; glmtune trains a turn or not: use "
                        "true/false or 0/1; hint: a fractional weight cannot be honoured, drop it or "
                        "round it", c->list_key, i, keys[k], type_name(v),
                        json_is_number(v) ? " other than 0 or 1" : "");
        if (flag >= 0 && f != flag)
            return fail(c, "bad_loss_flag", "%s[%zu] has %s and %s that disagree; hint: keep one loss "
                        "flag per turn", c->list_key, i, from, keys[k]);
        flag = f;
        from = keys[k];
    }
    if (flag >= 0) {
        c->cur_loss = flag ? json_true() : json_false();
        c->out->loss_flag_turns++;
        if (!flag) c->out->loss_flag_off++;
    }
    return GLM_OK;
}

/* The reasoning policy (GLM-4-9B has no reasoning format): dropped with the note
 * "reasoning_dropped", or with keep_reasoning put before the answer in the content as
 * "<think>\n{reasoning}\n</think>\n\n{content}" (LLaMA-Factory's thought words) with the note
 * "reasoning_kept". */
static glm_status apply_reasoning(conv *c, glm_charvec *text, glm_charvec *reasoning) {
    if (!c->opt->keep_reasoning) {
        note(c, "reasoning_dropped");
        return GLM_OK;
    }
    note(c, "reasoning_kept");
    glm_charvec t = {0};
    glm_status st = puts_(&t, "<think>\n");
    if (st == GLM_OK) st = put(&t, reasoning->v, reasoning->n);
    if (st == GLM_OK) st = puts_(&t, "\n</think>\n\n");
    if (st == GLM_OK && text->n) st = put(&t, text->v, text->n);
    if (st != GLM_OK) {
        glm_vec_free(t);
        return st;
    }
    glm_vec_free(*text);
    *text = t;
    return GLM_OK;
}

/* "turn i (role)" for messages about output message k, naming where it came from. */
static void turn_name(const conv *c, size_t k, char *buf, size_t size) {
    const char *role = json_string_value(json_object_get(json_array_get(c->out->messages, k), "role"));
    int t = k < c->turn.n ? c->turn.v[k] : -1;
    if (t >= 0) snprintf(buf, size, "%s[%d] (%s)", c->list_key ? c->list_key : "turn", t, role);
    else snprintf(buf, size, "the record's %s message", role);
}

/* --merge-consecutive-turns: joins neighbours of the same role (user, system, or assistant
 * messages that are not tool calls) into one, their texts separated by "\n". The merged turn
 * is a target by flag when either part says so (true over false). */
static glm_status merge_turns(conv *c) {
    json_t *msgs = c->out->messages;
    for (size_t k = 1; k < json_array_size(msgs);) {
        json_t *a = json_array_get(msgs, k - 1), *b = json_array_get(msgs, k);
        const char *ra = json_string_value(json_object_get(a, "role"));
        const char *rb = json_string_value(json_object_get(b, "role"));
        bool calls = json_object_get(a, "metadata") || json_object_get(b, "metadata");
        if (strcmp(ra, rb) || !strcmp(ra, "observation") || calls) {
            k++;
            continue;
        }
        glm_charvec t = {0};
        json_t *ca = json_object_get(a, "content"), *cb = json_object_get(b, "content");
        glm_status st = put(&t, json_string_value(ca), json_string_length(ca));
        if (st == GLM_OK) st = put(&t, "\n", 1);
        if (st == GLM_OK) st = put(&t, json_string_value(cb), json_string_length(cb));
        json_t *la = json_object_get(a, "loss"), *lb = json_object_get(b, "loss");
        if (st == GLM_OK && (json_object_set_new(a, "content", json_stringn(t.v, t.n)) ||
                             ((la || lb) && json_object_set(a, "loss", json_is_true(la) || json_is_true(lb)
                                                                             ? json_true() : json_false()))))
            st = nomem();
        glm_vec_free(t);
        GLM_TRY(st);
        json_array_remove(msgs, k);
        if (k < c->turn.n) memmove(c->turn.v + k, c->turn.v + k + 1, (c->turn.n - k - 1) * sizeof *c->turn.v);
        if (c->turn.n) c->turn.n--;
        note(c, "turns_merged");
    }
    return GLM_OK;
}

/* The GLM-4 chat's role order: after the system messages a user turn comes first; no two user
 * turns in a row; an observation (tool result) follows a tool call (an assistant message with
 * metadata) or another observation. Violations drop the record with reason "role_order". */
static glm_status check_role_order(conv *c) {
    json_t *msgs = c->out->messages;
    const char *prev = NULL;   /* role of the previous non-system message */
    bool prev_call = false;    /* ... and whether it was a tool call */
    for (size_t k = 0; k < json_array_size(msgs); k++) {
        json_t *m = json_array_get(msgs, k);
        const char *r = json_string_value(json_object_get(m, "role"));
        if (!strcmp(r, "system")) continue;
        char where[160];
        const char *why = NULL, *hint = NULL;
        if (!prev && !strcmp(r, "assistant")) {
            why = "the first turn after the system prompt is an assistant turn";
            hint = "a conversation starts with the user; drop the leading assistant turn or add the "
                   "user turn it answers";
        } else if (prev && !strcmp(prev, "user") && !strcmp(r, "user")) {
            why = "follows another user turn";
            hint = "--merge-consecutive-turns joins them";
        } else if (!strcmp(r, "observation") && !prev_call && !(prev && !strcmp(prev, "observation"))) {
            why = "is a tool result (observation/tool) with no tool call before it";
            hint = "a tool result answers an assistant tool call (tool_calls, function_call or GLM-4 "
                   "metadata)";
        }
        if (why) {
            turn_name(c, k, where, sizeof where);
            return fail(c, "role_order", "%s %s; hint: %s", where, why, hint);
        }
        prev = r;
        prev_call = !strcmp(r, "assistant") && json_object_get(m, "metadata") != NULL;
    }
    return GLM_OK;
}

/* Converts a list of turns (OpenAI/GLM-4 messages or ShareGPT conversations). `list_key` names
 * the list for messages. Tags: role_key/content_key are tried first, then role/content and
 * from/value. */
static glm_status convert_turns(conv *c, const json_t *obj, const json_t *list,
                                const char *list_key) {
    const char *role_key = c->map && c->map->role_tag ? c->map->role_tag : "role";
    const char *content_key = c->map && c->map->content_tag ? c->map->content_tag : "content";
    if (!json_is_array(list))
        return fail(c, "no_messages", "\"%s\" is %s, not a list of messages; hint: use "
                    "[{\"role\": \"user\", \"content\": \"...\"}, ...]", list_key,
                    type_name(list));
    /* record-level system (ShareGPT "system" column) and tools */
    const char *sys_col = c->map && c->map->system ? c->map->system : "system";
    const char *tools_col = c->map && c->map->tools ? c->map->tools : "tools";
    json_t *sys = json_object_get(obj, sys_col);
    GLM_TRY(add_tools(c, json_object_get(obj, tools_col), "the record's tools"));
    size_t n = json_array_size(list);
    bool first_is_system = false;
    if (n > 0) {
        json_t *m0 = json_array_get(list, 0);
        json_t *r0 = json_object_get(m0, role_key);
        if (!r0) r0 = json_object_get(m0, "role");
        if (!r0) r0 = json_object_get(m0, "from");
        first_is_system = is_text(r0) && map_role(c, json_string_value(r0)) == R_SYSTEM;
    }
    c->list_key = list_key;
    c->cur_turn = -1;
    if (is_text(sys) && json_string_length(sys) > 0 && !first_is_system)
        GLM_TRY(push_msg(c, "system", json_string_value(sys), json_string_length(sys), NULL));
    else if (sys && !json_is_null(sys) && !is_text(sys))
        return fail(c, "bad_content", "the record's \"%s\" is %s, not a string", sys_col,
                    type_name(sys));

    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(list, i);
        if (!json_is_object(m))
            return fail(c, "bad_message", "%s[%zu] is %s, not an object; hint: each message is "
                        "{\"role\": ..., \"content\": ...}", list_key, i, type_name(m));
        json_t *rv = json_object_get(m, role_key);
        json_t *cv = json_object_get(m, content_key);
        if (!rv) rv = json_object_get(m, "role");
        if (!rv) rv = json_object_get(m, "from");
        if (!cv) cv = json_object_get(m, "content");
        if (!cv) cv = json_object_get(m, "value");
        if (!is_text(rv))
            return fail(c, "bad_message", "%s[%zu] has no string \"%s\" (role); hint: each message "
                        "is {\"%s\": \"user\", \"%s\": \"...\"}", list_key, i, role_key, role_key,
                        content_key);
        const char *rs = json_string_value(rv);
        int role = map_role(c, rs);
        c->cur_turn = (int)i;
        GLM_TRY(loss_flag(c, m, i));
        if (role == R_UNKNOWN)
            return fail(c, "unknown_role", "%s[%zu] has role \"%s\", which is not one of system, "
                        "user, assistant, observation, tool (ShareGPT: human, gpt, function_call, "
                        "observation)%s; hint: rename the role, or describe the tags in a "
                        "dataset_info.json", list_key, i, rs,
                        c->map ? " or the tags of the dataset_info entry" : "");
        if (role == R_FUNCTION_CALL) {
            char where[96];
            snprintf(where, sizeof where, "%s[%zu] (function_call)", list_key, i);
            GLM_TRY(push_tool_call_text(c, cv, where));
            continue;
        }
        if (role == R_SYSTEM) {
            char where[96];
            snprintf(where, sizeof where, "%s[%zu].tools", list_key, i);
            GLM_TRY(add_tools(c, json_object_get(m, "tools"), where));
        }
        glm_charvec text = {0}, reasoning = {0};
        json_t *calls = NULL;
        glm_status st = content_text(c, cv, i, &text, &calls, &reasoning);
        json_t *rc = json_object_get(m, "reasoning_content"); /* OpenAI-style (DeepSeek, vLLM) */
        if (st == GLM_OK && rc && !json_is_null(rc)) {
            if (!is_text(rc))
                st = fail(c, "bad_content", "%s[%zu].reasoning_content is %s, not a string", list_key,
                          i, type_name(rc));
            else
                st = put(&reasoning, json_string_value(rc), json_string_length(rc));
        }
        if (st == GLM_OK && reasoning.n > 0 && role != R_ASSISTANT)
            st = fail(c, "bad_content", "%s[%zu] has role \"%s\" but carries reasoning; hint: only "
                      "assistant messages reason", list_key, i, rs);
        if (st == GLM_OK && reasoning.n > 0) st = apply_reasoning(c, &text, &reasoning);
        glm_vec_free(reasoning);
        /* OpenAI assistant tool_calls: [{"function": {"name", "arguments"}}] */
        json_t *tc = json_object_get(m, "tool_calls");
        if (st == GLM_OK && tc && !json_is_null(tc) && !json_is_array(tc))
            st = fail(c, "bad_tool_call", "%s[%zu].tool_calls is %s, not a list", list_key, i,
                      type_name(tc));
        json_t *fc = json_object_get(m, "function_call"); /* OpenAI legacy single call */
        size_t ncalls = json_array_size(calls) + json_array_size(tc) + (json_is_object(fc) ? 1 : 0);
        if (st == GLM_OK && ncalls && role != R_ASSISTANT)
            st = fail(c, "bad_tool_call", "%s[%zu] has role \"%s\" but carries tool calls; hint: "
                      "only assistant messages call tools", list_key, i, rs);
        if (st == GLM_OK && ncalls == 0 && (role == R_USER || role == R_ASSISTANT) &&
            blank(text.v, text.n))
            st = fail(c, "empty_turn", "%s[%zu] (%s) is empty%s; hint: drop the record or fill in the "
                      "turn", list_key, i, rs, text.n ? " (only whitespace)" : "");
        if (st == GLM_OK && (text.n > 0 || ncalls == 0)) {
            const char *meta = NULL;
            char *meta_owned = NULL;
            json_t *mv = json_object_get(m, "metadata");
            if (is_text(mv)) meta = json_string_value(mv); /* GLM-4's own: verbatim */
            else if (mv && !json_is_null(mv)) {
                glm_charvec mt = {0};
                st = glm_json_dumps_py(mv, &mt);
                meta = meta_owned = mt.v;
            }
            if (st == GLM_OK)
                st = push_msg(c, ROLE_OUT[role], text.v ? text.v : "", text.n,
                              meta && *meta ? meta : NULL);
            free(meta_owned);
        }
        for (size_t k = 0; st == GLM_OK && k < json_array_size(tc); k++) {
            json_t *call = json_array_get(tc, k);
            json_t *f = json_object_get(call, "function");
            if (!f) f = call;
            char where[96];
            snprintf(where, sizeof where, "%s[%zu].tool_calls[%zu]", list_key, i, k);
            if (!json_is_object(f))
                st = fail(c, "bad_tool_call", "%s is %s, not an object", where, type_name(call));
            else
                st = push_tool_call(c, json_object_get(f, "name"), json_object_get(f, "arguments"),
                                    where);
        }
        if (st == GLM_OK && json_is_object(fc)) {
            char where[96];
            snprintf(where, sizeof where, "%s[%zu].function_call", list_key, i);
            st = push_tool_call(c, json_object_get(fc, "name"), json_object_get(fc, "arguments"),
                                where);
        }
        for (size_t k = 0; st == GLM_OK && k < json_array_size(calls); k++) {
            char where[96];
            snprintf(where, sizeof where, "%s[%zu] tool_call part", list_key, i);
            st = push_tool_call_text(c, json_array_get(calls, k), where);
        }
        json_decref(calls);
        glm_vec_free(text);
        GLM_TRY(st);
    }
    c->cur_turn = -1;
    c->cur_loss = NULL;
    if (json_array_size(c->out->messages) == 0)
        return fail(c, "empty_conversation", "\"%s\" holds no messages; hint: drop empty records",
                    list_key);
    if (c->opt->merge_consecutive_turns) GLM_TRY(merge_turns(c));
    GLM_TRY(check_role_order(c));
    return attach_tools(c);
}

/* ---------------------------------------------------------------- Alpaca */

static glm_status opt_string(conv *c, const json_t *obj, const char *key, const char **out,
                             size_t *len) {
    *out = "";
    *len = 0;
    json_t *v = key ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return GLM_OK;
    if (!is_text(v))
        return fail(c, "bad_content", "\"%s\" is %s, not a string; hint: Alpaca columns hold text",
                    key, type_name(v));
    *out = json_string_value(v);
    *len = json_string_length(v);
    return GLM_OK;
}

static glm_status convert_alpaca(conv *c, const json_t *obj) {
    const glm_dsinfo_entry *m = c->map;
    c->list_key = "history";
    const char *k_prompt = m && m->prompt ? m->prompt : "instruction";
    const char *k_query = m && m->query ? m->query : "input";
    const char *k_resp = m && m->response ? m->response : "output";
    const char *k_hist = m && m->history ? m->history : "history";
    const char *k_sys = m && m->system ? m->system : "system";
    const char *k_tools = m && m->tools ? m->tools : "tools";
    if (!m && !json_object_get(obj, k_resp) && json_object_get(obj, "response"))
        k_resp = "response"; /* torchtune's instruct layout */
    const char *sys, *prompt, *query, *resp;
    size_t ns, np, nq, nr;
    GLM_TRY(opt_string(c, obj, k_sys, &sys, &ns));
    GLM_TRY(opt_string(c, obj, k_prompt, &prompt, &np));
    GLM_TRY(opt_string(c, obj, k_query, &query, &nq));
    json_t *rv = json_object_get(obj, k_resp);
    if (!rv || json_is_null(rv))
        return fail(c, "no_response", "no \"%s\" (the answer) in an Alpaca record; hint: Alpaca "
                    "records are {\"instruction\", \"input\", \"output\"}", k_resp);
    GLM_TRY(opt_string(c, obj, k_resp, &resp, &nr));
    GLM_TRY(add_tools(c, json_object_get(obj, k_tools), "the record's tools"));
    if (ns) GLM_TRY(push_msg(c, "system", sys, ns, NULL));
    json_t *hist = json_object_get(obj, k_hist);
    if (hist && !json_is_null(hist)) {
        if (!json_is_array(hist))
            return fail(c, "bad_history", "\"%s\" is %s; hint: history is a list of "
                        "[question, answer] pairs", k_hist, type_name(hist));
        for (size_t i = 0; i < json_array_size(hist); i++) {
            json_t *pair = json_array_get(hist, i);
            json_t *q = json_array_get(pair, 0), *a = json_array_get(pair, 1);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !is_text(q) ||
                !is_text(a))
                return fail(c, "bad_history", "\"%s\"[%zu] is not a [question, answer] pair of "
                            "strings", k_hist, i);
            if (blank(json_string_value(q), json_string_length(q)) ||
                blank(json_string_value(a), json_string_length(a)))
                return fail(c, "empty_turn", "\"%s\"[%zu] has an empty %s; hint: drop the record or "
                            "fill in the turn", k_hist, i,
                            blank(json_string_value(q), json_string_length(q)) ? "question" : "answer");
            c->cur_turn = (int)i;
            GLM_TRY(push_msg(c, "user", json_string_value(q), json_string_length(q), NULL));
            GLM_TRY(push_msg(c, "assistant", json_string_value(a), json_string_length(a), NULL));
        }
    }
    /* user = instruction + "\n" + input, leaving out empty parts (LLaMA-Factory's converter) */
    glm_charvec u = {0};
    glm_status st = put(&u, prompt, np);
    if (st == GLM_OK && np && nq) st = put(&u, "\n", 1);
    if (st == GLM_OK) st = put(&u, query, nq);
    c->cur_turn = -1;
    if (st == GLM_OK && (blank(u.v, u.n) || blank(resp, nr)))
        st = fail(c, "empty_turn", "the %s is empty (\"%s\"%s%s%s); hint: drop the record or fill it in",
                  blank(u.v, u.n) ? "prompt" : "answer", blank(u.v, u.n) ? k_prompt : k_resp,
                  blank(u.v, u.n) ? " and \"" : "", blank(u.v, u.n) ? k_query : "", blank(u.v, u.n) ? "\"" : "");
    if (st == GLM_OK) st = push_msg(c, "user", u.v ? u.v : "", u.n, NULL);
    glm_vec_free(u);
    GLM_TRY(st);
    GLM_TRY(push_msg(c, "assistant", resp, nr, NULL));
    return attach_tools(c);
}

/* ---------------------------------------------------------------- pretokenized */

static glm_status convert_pretok(conv *c, const json_t *obj) {
    json_t *ids = json_object_get(obj, "input_ids");
    json_t *labels = json_object_get(obj, "labels");
    if (!json_is_array(ids) || json_array_size(ids) == 0)
        return fail(c, "bad_input_ids", "\"input_ids\" is %s; hint: pre-tokenized records are "
                    "{\"input_ids\": [ints], \"labels\": [ints, -100 = not a target]}",
                    ids ? (json_is_array(ids) ? "an empty list" : type_name(ids)) : "missing");
    size_t n = json_array_size(ids);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ids, i);
        if (json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) <= (json_int_t)UINT32_MAX)
            continue;
        const char *big;
        size_t nbig;
        char kind = 0;
        if (json_is_integer(x))
            return fail(c, "bad_input_ids", "input_ids[%zu] = %lld is out of range, not a token id (an integer "
                        ">= 0)", i, (long long)json_integer_value(x));
        if (glm_json_numtext(x, &kind, &big, &nbig) && kind == 'i') /* beyond 64 bits: show its digits */
            return fail(c, "bad_input_ids", "input_ids[%zu] = %.*s%s is out of range, not a token id (an integer "
                        ">= 0)", i, (int)(nbig > 40 ? 40 : nbig), big, nbig > 40 ? "..." : "");
        return fail(c, "bad_input_ids", "input_ids[%zu] is %s, not a token id (an integer >= 0)", i, type_name(x));
    }
    if (labels && !json_is_null(labels)) {
        if (!json_is_array(labels) || json_array_size(labels) != n)
            return fail(c, "bad_labels", "\"labels\" is %s of %zu, but input_ids has %zu; hint: "
                        "labels align with input_ids one to one (transformers convention)",
                        type_name(labels), json_array_size(labels), n);
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_array_get(labels, i);
            if (!json_is_integer(x) || (json_integer_value(x) < 0 && json_integer_value(x) != -100))
                return fail(c, "bad_labels", "labels[%zu] is %s (%lld): labels are token ids or "
                            "-100 (not a target)", i, type_name(x),
                            (long long)json_integer_value(x));
        }
        c->out->labels = json_incref(labels);
    }
    c->out->input_ids = json_incref(ids);
    return GLM_OK;
}

/* ---------------------------------------------------------------- text (pretraining) */

static glm_status convert_text(conv *c, const json_t *obj, const char *col) {
    json_t *v = json_object_get(obj, col);
    if (!v || json_is_null(v))
        return fail(c, "no_text", "no \"%s\" field in a pretraining record; hint: pretraining records "
                    "are {\"%s\": \"...\"}; --text-column names another field", col, col);
    if (!is_text(v))
        return fail(c, "bad_content", "\"%s\" is %s, not text; hint: pretraining records are "
                    "{\"%s\": \"...\"}", col, type_name(v), col);
    if (blank(json_string_value(v), json_string_length(v)))
        return fail(c, "empty_text", "\"%s\" is empty%s; hint: drop the record", col,
                    json_string_length(v) ? " (only whitespace)" : "");
    c->out->text = json_incref(v);
    return GLM_OK;
}

/* ---------------------------------------------------------------- preference data */

#define PREFERENCE_HINT "hint: preference training is not available in glmtune yet (it is planned: stage: dpo)"

/* A record of preference data is not supervised data: trained as SFT, a DPO pair would learn its prompt
 * (its answers ignored) and a KTO record its answer whatever its label says. Refused, each by its reason:
 * "preference_pair" for a LLaMA-Factory ranking entry's record or any record with both "chosen" and
 * "rejected" (LLaMA-Factory's alpaca / sharegpt pairs, TRL's prompt / chosen / rejected); "kto_label" for a
 * record of an entry with a kto_tag column or any record whose "label" is true/false (LLaMA-Factory's KTO
 * layout, TRL's unpaired prompt / completion / label). */
static glm_status check_preference(conv *c, const json_t *obj) {
    const glm_dsinfo_entry *m = c->map;
    const json_t *label = json_object_get(obj, "label");
    if ((m && m->ranking) || (json_object_get(obj, "chosen") && json_object_get(obj, "rejected")))
        return fail(c, "preference_pair", "a preference pair (a prompt with a \"chosen\" and a \"rejected\" answer%s): "
                    "not trained, it is not supervised data; " PREFERENCE_HINT "; to fine-tune on the preferred "
                    "answers, make each record a conversation that ends with its \"chosen\" answer",
                    m && m->ranking ? ", from a \"ranking\": true dataset_info entry" : "");
    if ((m && m->kto) || json_is_boolean(label))
        return fail(c, "kto_label", "a KTO record (its answer labelled %s by %s): not trained, it is not supervised "
                    "data (its answer would be learned whatever the label says); " PREFERENCE_HINT "; to fine-tune "
                    "on the desirable answers, keep the records labelled true and drop the label",
                    json_is_boolean(label) ? (json_is_true(label) ? "desirable (true)" : "undesirable (false)")
                                           : "desirable or not",
                    json_is_boolean(label) ? "\"label\"" : "the entry's kto_tag column");
    return GLM_OK;
}

/* ---------------------------------------------------------------- entry point */

glm_status glm_record_convert(const glm_record *rec, glm_format fmt, glm_conversation *out,
                              const char **reason) {
    glm_convert_opts o = {.format = fmt};
    return glm_record_convert_ex(rec, &o, out, reason);
}

glm_status glm_record_convert_ex(const glm_record *rec, const glm_convert_opts *opt,
                                 glm_conversation *out, const char **reason) {
    const char *dummy; /* per call: a shared static would be a data race between threads */
    if (!reason) reason = &dummy;
    *reason = NULL;
    memset(out, 0, sizeof *out);
    glm_convert_opts defaults = {0};
    if (!opt) opt = &defaults;
    conv c = {.rec = rec, .map = (const glm_dsinfo_entry *)rec->mapping, .opt = opt, .out = out,
              .reason = reason, .cur_turn = -1};
    const json_t *obj = rec->value;
    if (!json_is_object(obj))
        return fail(&c, rec->reason ? rec->reason : "not_an_object",
                    "the record is not a JSON object%s%s", rec->reason ? ": " : "",
                    rec->reason ? rec->detail : "");
    const glm_dsinfo_entry *m = c.map;
    bool map_turns = m && m->formatting && strcmp(m->formatting, "alpaca") != 0;
    /* the text layout's column: --text-column, a pretraining dataset_info entry's, or "text" */
    const char *text_col = opt->text_column ? opt->text_column
                         : m && m->text_column ? m->text_column
                         : m && opt->format == GLM_FMT_TEXT && m->prompt ? m->prompt : "text";
    const char *msg_key = NULL;
    glm_format f = opt->format;
    if (f != GLM_FMT_TEXT && f != GLM_FMT_PRETOKENIZED) {
        glm_status pst = check_preference(&c, obj);
        if (pst != GLM_OK) return pst;
    }
    if (f == GLM_FMT_AUTO && m && m->text_column && opt->chat_only)
        return fail(&c, "pretraining_entry", "dataset \"%s\" of %s is a pretraining entry (columns {\"prompt\": \"%s\"}, "
                    "no response): supervised fine-tuning (stage sft) drops its records, as LLaMA-Factory does; hint: "
                    "leave it out of dataset, or tokenize it on its own with stage: pt (--format text)",
                    m->name ? m->name : "?", m->registry ? m->registry : "dataset_info.json", m->text_column);
    if (f == GLM_FMT_AUTO) {
        if (m && m->text_column) f = GLM_FMT_TEXT;
        else if (map_turns) f = GLM_FMT_SHAREGPT;
        else if (m) f = GLM_FMT_ALPACA;
        else if (json_object_get(obj, "messages")) f = GLM_FMT_MESSAGES;
        else if (json_object_get(obj, "conversations")) f = GLM_FMT_SHAREGPT;
        else if (json_object_get(obj, "instruction")) f = GLM_FMT_ALPACA;
        else if (json_object_get(obj, "input_ids")) f = GLM_FMT_PRETOKENIZED;
        else if (json_object_get(obj, text_col) && (json_object_size(obj) == 1 || opt->text_column))
            f = GLM_FMT_TEXT; /* only a text field (or the one --text-column names): pretraining */
        else {
            char keys[200] = "";
            size_t used = 0;
            int k = 0;
            const char *key;
            json_t *v;
            json_object_foreach((json_t *)obj, key, v) {
                if (k++ == 8) {
                    snprintf(keys + used, sizeof keys - used, ", ...");
                    break;
                }
                int w = snprintf(keys + used, sizeof keys - used, "%s\"%s\"", k > 1 ? ", " : "",
                                 key);
                if (w < 0 || (size_t)w >= sizeof keys - used) break;
                used += (size_t)w;
            }
            if (json_object_get(obj, text_col))
                return fail(&c, "unsupported_layout", "no known layout: keys are {%s}; hint: for "
                            "pretraining text beside other fields use --format text (or "
                            "--text-column %s)", keys, text_col);
            return fail(&c, "unsupported_layout", "no known layout: keys are {%s}; hint: records "
                        "need \"messages\", \"conversations\", \"instruction\", \"input_ids\" or "
                        "\"text\", or a dataset_info.json entry that maps the columns", keys);
        }
    }
    out->format = f;
    glm_status st = GLM_OK;
    if (f == GLM_FMT_PRETOKENIZED) {
        st = convert_pretok(&c, obj);
    } else if (f == GLM_FMT_TEXT) {
        st = convert_text(&c, obj, text_col);
    } else if (!(out->messages = json_array())) {
        st = nomem();
    } else if (f == GLM_FMT_ALPACA) {
        st = convert_alpaca(&c, obj);
    } else {
        /* the layout's own key; the other one when only that is there (both lists are read alike) */
        const char *own = f == GLM_FMT_MESSAGES ? "messages" : "conversations";
        const char *other = f == GLM_FMT_MESSAGES ? "conversations" : "messages";
        bool mapped = m && m->messages && map_turns;
        if (mapped) msg_key = m->messages;
        else msg_key = !json_object_get(obj, own) && json_object_get(obj, other) ? other : own;
        json_t *list = json_object_get(obj, msg_key);
        if (!list)
            st = fail(&c, "no_messages", "no \"%s\" list in the record%s; hint: check --format "
                      "(%s records need \"%s\")", msg_key,
                      mapped ? " (the key comes from the dataset_info entry)" : "",
                      mapped ? "this dataset's" : glm_format_name(f), msg_key);
        else
            st = convert_turns(&c, obj, list, msg_key);
    }
    json_decref(c.tools);
    glm_vec_free(c.turn);
    if (st != GLM_OK) glm_conversation_free(out);
    return st;
}
