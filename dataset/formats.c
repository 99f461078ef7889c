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

static const char *const FORMAT_NAMES[] = {"auto", "messages", "sharegpt", "alpaca", "pretokenized"};

glm_status glm_format_parse(const char *name, glm_format *out) {
    if (!name || !*name) {
        *out = GLM_FMT_AUTO;
        return GLM_OK;
    }
    for (int i = 0; i < 5; i++)
        if (strcmp(name, FORMAT_NAMES[i]) == 0) {
            *out = (glm_format)i;
            return GLM_OK;
        }
    if (strcmp(name, "openai") == 0) {
        *out = GLM_FMT_MESSAGES;
        return GLM_OK;
    }
    return glm_err(GLM_ERR_ARG, "--format %s: unknown format; hint: use auto, messages, sharegpt, "
                   "alpaca or pretokenized", name);
}

const char *glm_format_name(glm_format f) {
    return (unsigned)f < 5 ? FORMAT_NAMES[f] : "?";
}

void glm_conversation_free(glm_conversation *c) {
    if (!c) return;
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
    glm_conversation *out;
    const char **reason;
    json_t *tools;          /* collected tools (owned) or NULL */
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

static const char *type_name(const json_t *v) {
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

/* Appends {"role", "content"[, "metadata"]} to the output. */
static glm_status push_msg(conv *c, const char *role, const char *content, size_t len,
                           const char *metadata) {
    json_t *m = json_object();
    if (!m || json_object_set_new(m, "role", json_string(role)) ||
        json_object_set_new(m, "content", json_stringn(content, len)) ||
        (metadata && json_object_set_new(m, "metadata", json_string(metadata))) ||
        json_array_append_new(c->out->messages, m)) {
        json_decref(m);
        return nomem();
    }
    return GLM_OK;
}

/* ---------------------------------------------------------------- tools */

/* Adds the tools in `v` (a list, or a JSON-encoded string of one; "" / "[]" / null = none) to
 * c->tools. Bare function schemas {name, description, parameters} are wrapped as
 * {"type": "function", "function": schema} (the GLM-4 template reads tool.function). */
static glm_status add_tools(conv *c, const json_t *v, const char *where) {
    if (!v || json_is_null(v)) return GLM_OK;
    json_t *parsed = NULL;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t k = 0;
        while (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') k++;
        if (!s[k]) return GLM_OK;
        json_error_t jerr;
        parsed = json_loads(s, JSON_DECODE_ANY, &jerr);
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
        } else if (json_is_string(type)) {
            if (strcmp(json_string_value(type), "function") == 0 &&
                !(json_is_object(fn) && json_is_string(json_object_get(fn, "name"))))
                st = fail(c, "bad_tools", "%s[%zu] has type \"function\" but no \"function\" "
                          "object with a \"name\"; hint: use {\"type\": \"function\", "
                          "\"function\": {\"name\": ..., \"parameters\": ...}}", where, i);
            else
                item = json_incref(t);
        } else if (json_is_string(json_object_get(t, "name"))) {
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
    if (!json_is_string(name) || json_string_length(name) == 0)
        return fail(c, "bad_tool_call", "%s has no function \"name\"; hint: a tool call is "
                    "{\"name\": \"fn\", \"arguments\": {...}}", where);
    glm_charvec text = {0};
    glm_status st = GLM_OK;
    if (!args || json_is_null(args)) {
        st = puts_(&text, "{}");
    } else if (json_is_string(args)) {
        json_t *chk = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
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
    json_t *parsed = NULL;
    if (json_is_string(v)) {
        json_error_t jerr;
        parsed = json_loads(json_string_value(v), JSON_DECODE_ANY, &jerr);
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

/* Converts the content of message `i` (string, null, or list of typed parts) into text and a
 * list of pending tool calls (parts of type "tool_call", owned by *calls). */
static glm_status content_text(conv *c, const json_t *content, size_t i, glm_charvec *text,
                               json_t **calls) {
    if (!content || json_is_null(content)) return GLM_OK;
    if (json_is_string(content))
        return put(text, json_string_value(content), json_string_length(content));
    if (!json_is_array(content))
        return fail(c, "bad_content", "message %zu: content is %s; hint: content must be a "
                    "string or a list of {\"type\": \"text\", \"text\": ...} parts", i,
                    type_name(content));
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *part = json_array_get(content, k);
        if (json_is_string(part)) {
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
            if (!json_is_string(val))
                return fail(c, "bad_content", "message %zu, text part %zu has no string \"text\" "
                            "or \"value\"", i, k);
            GLM_TRY(put(text, json_string_value(val), json_string_length(val)));
        } else if (!strcmp(type, "reasoning") || !strcmp(type, "thinking")) {
            /* GLM-4 (non-reasoning chat model) has no slot for chain-of-thought: dropped. */
            note(c, "reasoning_dropped");
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
        first_is_system = json_is_string(r0) && map_role(c, json_string_value(r0)) == R_SYSTEM;
    }
    if (json_is_string(sys) && json_string_length(sys) > 0 && !first_is_system)
        GLM_TRY(push_msg(c, "system", json_string_value(sys), json_string_length(sys), NULL));
    else if (sys && !json_is_null(sys) && !json_is_string(sys))
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
        if (!json_is_string(rv))
            return fail(c, "bad_message", "%s[%zu] has no string \"%s\" (role); hint: each message "
                        "is {\"%s\": \"user\", \"%s\": \"...\"}", list_key, i, role_key, role_key,
                        content_key);
        const char *rs = json_string_value(rv);
        int role = map_role(c, rs);
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
        glm_charvec text = {0};
        json_t *calls = NULL;
        glm_status st = content_text(c, cv, i, &text, &calls);
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
        if (st == GLM_OK && (text.n > 0 || ncalls == 0)) {
            if (text.n == 0) note(c, "empty_turn"); /* kept; the GLM-4 template skips it */
            const char *meta = NULL;
            char *meta_owned = NULL;
            json_t *mv = json_object_get(m, "metadata");
            if (json_is_string(mv)) meta = json_string_value(mv); /* GLM-4's own: verbatim */
            else if (mv && !json_is_null(mv)) {
                glm_charvec mt = {0};
                st = glm_json_dumps_py(mv, &mt);
                meta = meta_owned = mt.v;
            }
            /* Per-message loss_weight (LLaMA-Factory v1) is ignored: targets follow the GLM-4
             * recipe (assistant turns), which is what loss_weight 1.0 on assistants means. */
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
    if (json_array_size(c->out->messages) == 0)
        return fail(c, "empty_conversation", "\"%s\" holds no messages; hint: drop empty records",
                    list_key);
    return attach_tools(c);
}

/* ---------------------------------------------------------------- Alpaca */

static glm_status opt_string(conv *c, const json_t *obj, const char *key, const char **out,
                             size_t *len) {
    *out = "";
    *len = 0;
    json_t *v = key ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return GLM_OK;
    if (!json_is_string(v))
        return fail(c, "bad_content", "\"%s\" is %s, not a string; hint: Alpaca columns hold text",
                    key, type_name(v));
    *out = json_string_value(v);
    *len = json_string_length(v);
    return GLM_OK;
}

static glm_status convert_alpaca(conv *c, const json_t *obj) {
    const glm_dsinfo_entry *m = c->map;
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
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(q) ||
                !json_is_string(a))
                return fail(c, "bad_history", "\"%s\"[%zu] is not a [question, answer] pair of "
                            "strings", k_hist, i);
            if (!json_string_length(q) || !json_string_length(a)) note(c, "empty_turn");
            GLM_TRY(push_msg(c, "user", json_string_value(q), json_string_length(q), NULL));
            GLM_TRY(push_msg(c, "assistant", json_string_value(a), json_string_length(a), NULL));
        }
    }
    /* user = instruction + "\n" + input, leaving out empty parts (LLaMA-Factory's converter) */
    glm_charvec u = {0};
    glm_status st = put(&u, prompt, np);
    if (st == GLM_OK && np && nq) st = put(&u, "\n", 1);
    if (st == GLM_OK) st = put(&u, query, nq);
    if (st == GLM_OK) {
        if (u.n == 0 || nr == 0) note(c, "empty_turn");
        st = push_msg(c, "user", u.v ? u.v : "", u.n, NULL);
    }
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
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > (json_int_t)UINT32_MAX)
            return fail(c, "bad_input_ids", "input_ids[%zu] is %s%s, not a token id (an integer "
                        ">= 0)", i, type_name(x), json_is_integer(x) ? " out of range" : "");
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

/* ---------------------------------------------------------------- entry point */

glm_status glm_record_convert(const glm_record *rec, glm_format fmt, glm_conversation *out,
                              const char **reason) {
    const char *dummy; /* per call: a shared static would be a data race between threads */
    if (!reason) reason = &dummy;
    *reason = NULL;
    memset(out, 0, sizeof *out);
    conv c = {rec, (const glm_dsinfo_entry *)rec->mapping, out, reason, NULL};
    const json_t *obj = rec->value;
    if (!json_is_object(obj))
        return fail(&c, rec->reason ? rec->reason : "not_an_object",
                    "the record is not a JSON object%s%s", rec->reason ? ": " : "",
                    rec->reason ? rec->detail : "");
    const glm_dsinfo_entry *m = c.map;
    bool map_turns = m && m->formatting && strcmp(m->formatting, "alpaca") != 0;
    const char *msg_key = NULL;
    glm_format f = fmt;
    if (f == GLM_FMT_AUTO) {
        if (map_turns) f = GLM_FMT_SHAREGPT;
        else if (m) f = GLM_FMT_ALPACA;
        else if (json_object_get(obj, "messages")) f = GLM_FMT_MESSAGES;
        else if (json_object_get(obj, "conversations")) f = GLM_FMT_SHAREGPT;
        else if (json_object_get(obj, "instruction")) f = GLM_FMT_ALPACA;
        else if (json_object_get(obj, "input_ids")) f = GLM_FMT_PRETOKENIZED;
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
            return fail(&c, "unsupported_layout", "no known layout: keys are {%s}; hint: records "
                        "need \"messages\", \"conversations\", \"instruction\" or \"input_ids\", "
                        "or a dataset_info.json entry that maps the columns", keys);
        }
    }
    out->format = f;
    glm_status st = GLM_OK;
    if (f == GLM_FMT_PRETOKENIZED) {
        st = convert_pretok(&c, obj);
    } else if (!(out->messages = json_array())) {
        st = nomem();
    } else if (f == GLM_FMT_ALPACA) {
        st = convert_alpaca(&c, obj);
    } else {
        if (m && m->messages && map_turns) msg_key = m->messages;
        else if (f == GLM_FMT_MESSAGES)
            msg_key = json_object_get(obj, "messages") ? "messages" : "conversations";
        else
            msg_key = json_object_get(obj, "conversations") ? "conversations" : "messages";
        json_t *list = json_object_get(obj, msg_key);
        if (!list)
            st = fail(&c, "no_messages", "no \"%s\" list in the record%s; hint: check --format "
                      "(records of this layout need \"%s\")", msg_key,
                      m ? " (the key comes from the dataset_info entry)" : "", msg_key);
        else
            st = convert_turns(&c, obj, list, msg_key);
    }
    json_decref(c.tools);
    if (st != GLM_OK) glm_conversation_free(out);
    return st;
}
