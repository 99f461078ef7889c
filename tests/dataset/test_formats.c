/* Format conversion tests: each layout's normalization rule, the error keys and messages
 * (naming source, line and record), dataset_info mappings, Python-style json.dumps. */
#include <string.h>

#include "common/pyjson.h"
#include "common/status.h"
#include "dataset/dataset_info.h"
#include "dataset/formats.h"
#include "tests/check.h"

static glm_conversation g_conv;
static const char *g_reason;

static glm_convert_opts g_opt; /* options for the next conversions (format set per call) */

/* Converts `json` (read as Python's json.loads reads it) as record 6 at line 7 of "mem.jsonl".
 * Returns the status. */
static glm_status conv(const char *json, glm_format fmt, const void *mapping) {
    glm_record rec;
    memset(&rec, 0, sizeof rec);
    rec.source = "mem.jsonl";
    rec.line = 7;
    rec.index = 6;
    rec.mapping = mapping;
    json_error_t e;
    rec.value = glm_json_loadb_py(json, strlen(json), 0, &e);
    if (!rec.value) {
        fprintf(stderr, "bad test JSON: %s: %s\n", json, e.text);
        return GLM_ERR_INTERNAL;
    }
    glm_conversation_free(&g_conv);
    glm_convert_opts o = g_opt;
    o.format = fmt;
    glm_status st = glm_record_convert_ex(&rec, &o, &g_conv, &g_reason);
    json_decref(rec.value);
    return st;
}

/* The messages as compact JSON text (sorted keys) for comparison. */
static char g_text[8192];
static const char *msgs(void) {
    char *s = json_dumps(g_conv.messages, JSON_COMPACT | JSON_SORT_KEYS);
    snprintf(g_text, sizeof g_text, "%s", s ? s : "(null)");
    free(s);
    return g_text;
}

static bool has_note(const char *n) {
    for (int i = 0; i < g_conv.n_notes; i++)
        if (!strcmp(g_conv.notes[i], n)) return true;
    return false;
}

#define EXPECT_MSGS(json, fmt, map, want)                                                      \
    do {                                                                                       \
        glm_status st_ = conv(json, fmt, map);                                                 \
        CHECK(st_ == GLM_OK, "%s: %s", json, glm_errmsg());                                    \
        if (st_ == GLM_OK) CHECK(!strcmp(msgs(), want), "\n got  %s\n want %s", g_text, want); \
    } while (0)

#define EXPECT_OK(json, fmt, map)                                                              \
    do {                                                                                       \
        glm_status st_ = conv(json, fmt, map);                                                 \
        CHECK(st_ == GLM_OK, "%s: %s", json, glm_errmsg());                                    \
    } while (0)

#define EXPECT_FAIL(json, fmt, map, reason)                                                    \
    do {                                                                                       \
        glm_status st_ = conv(json, fmt, map);                                                 \
        CHECK(st_ == GLM_ERR_FORMAT && g_reason && !strcmp(g_reason, reason),                  \
              "%s: status %d reason %s (want %s)", json, st_, g_reason ? g_reason : "-", reason); \
        CHECK(strstr(glm_errmsg(), "mem.jsonl:7: record 6") && strstr(glm_errmsg(), "hint"),   \
              "message: %s", glm_errmsg());                                                    \
    } while (0)

static void dumps_is(const char *json, const char *want) {
    json_t *v = json_loads(json, JSON_DECODE_ANY, NULL);
    glm_charvec o = {0};
    CHECK(v && glm_json_dumps_py(v, &o) == GLM_OK && o.v && !strcmp(o.v, want),
          "dumps %s -> %s, want %s", json, o.v ? o.v : "-", want);
    glm_vec_free(o);
    json_decref(v);
}

int main(void) {
    glm_format f;
    CHECK(glm_format_parse("sharegpt", &f) == GLM_OK && f == GLM_FMT_SHAREGPT, "parse");
    CHECK(glm_format_parse("yaml", &f) == GLM_ERR_ARG && strstr(glm_errmsg(), "alpaca"), "bad");

    /* json.dumps(x, ensure_ascii=False) reference outputs (CPython 3) */
    dumps_is("{\"a\": 1, \"b\": [true, null, \"x\"], \"c\": {}}",
             "{\"a\": 1, \"b\": [true, null, \"x\"], \"c\": {}}");
    dumps_is("{\"city\": \"北京\", \"q\": \"a\\\"b\\\\c\\n\\t\\u0001\"}",
             "{\"city\": \"北京\", \"q\": \"a\\\"b\\\\c\\n\\t\\u0001\"}");
    dumps_is("[1.5, 0.1, 100.0, 1e16, 1e-05, 0.0001, 123456789012345.6, -2.5e-10, 1e300]",
             "[1.5, 0.1, 100.0, 1e+16, 1e-05, 0.0001, 123456789012345.6, -2.5e-10, 1e+300]");
    dumps_is("[]", "[]");

    /* --- messages (OpenAI / GLM-4) */
    EXPECT_MSGS("{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", "
                "\"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"S\",\"role\":\"system\"},{\"content\":\"hi\",\"role\":\"user\"},"
                "{\"content\":\"yo\",\"role\":\"assistant\"}]");
    CHECK(g_conv.format == GLM_FMT_MESSAGES, "detected messages");
    /* tools as a string of bare schemas -> wrapped, on an inserted system message; tool_calls
     * with object and string arguments; tool role -> observation */
    EXPECT_MSGS("{\"tools\": \"[{\\\"name\\\": \\\"f\\\", \\\"parameters\\\": {}}]\", \"messages\": "
                "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                "null, \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                "\"arguments\": {\"x\": \"é\", \"n\": [1, 2.5]}}}, {\"function\": {\"name\": \"g\", "
                "\"arguments\": \"{\\\"y\\\":1}\"}}]}, {\"role\": \"tool\", \"content\": \"r\"}, "
                "{\"role\": \"assistant\", \"content\": \"done\"}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"\",\"role\":\"system\",\"tools\":[{\"function\":{\"name\":\"f\","
                "\"parameters\":{}},\"type\":\"function\"}]},{\"content\":\"q\",\"role\":\"user\"},"
                "{\"content\":\"{\\\"x\\\": \\\"é\\\", \\\"n\\\": [1, 2.5]}\",\"metadata\":\"f\","
                "\"role\":\"assistant\"},{\"content\":\"{\\\"y\\\":1}\",\"metadata\":\"g\",\"role\":"
                "\"assistant\"},{\"content\":\"r\",\"role\":\"observation\"},{\"content\":\"done\","
                "\"role\":\"assistant\"}]");
    /* tools on the system message, "[]" and "" mean none; GLM-4 metadata kept verbatim */
    EXPECT_MSGS("{\"tools\": \"[]\", \"messages\": [{\"role\": \"system\", \"content\": \"S\", "
                "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]}, "
                "{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"metadata\": \"w\", \"content\": \"{\\\"a\\\": 1}\"}, {\"role\": \"observation\","
                " \"content\": \"ok\"}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"S\",\"role\":\"system\",\"tools\":[{\"function\":{\"name\":\"w\"},"
                "\"type\":\"function\"}]},{\"content\":\"q\",\"role\":\"user\"},{\"content\":"
                "\"{\\\"a\\\": 1}\",\"metadata\":\"w\",\"role\":\"assistant\"},{\"content\":\"ok\","
                "\"role\":\"observation\"}]");
    EXPECT_MSGS("{\"tools\": \"\", \"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}",
                GLM_FMT_AUTO, NULL, "[{\"content\":\"q\",\"role\":\"user\"}]");
    /* content parts: text/value concatenated, reasoning dropped, tool_call part */
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                "\"a\"}, {\"type\": \"text\", \"value\": \"b\"}], \"loss_weight\": 0.0}, "
                "{\"role\": \"assistant\", \"content\": [{\"type\": \"reasoning\", \"value\": "
                "\"think\"}, {\"type\": \"text\", \"value\": \"ok\"}, {\"type\": \"tool_call\", "
                "\"value\": \"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": {\\\"k\\\": 1}}\"}]}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"ab\",\"loss\":false,\"role\":\"user\"},{\"content\":\"ok\",\"role\":"
                "\"assistant\"},{\"content\":\"{\\\"k\\\": 1}\",\"metadata\":\"f\",\"role\":\"assistant\"}]");
    CHECK(has_note("reasoning_dropped"), "note reasoning_dropped");
    CHECK(g_conv.loss_flag_turns == 1 && g_conv.loss_flag_off == 1, "loss_weight 0.0 counted as a flag");

    EXPECT_FAIL("{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}", GLM_FMT_AUTO, NULL,
                "unknown_role");
    CHECK(strstr(glm_errmsg(), "\"bot\""), "names the role: %s", glm_errmsg());
    EXPECT_FAIL("{\"tools\": \"[{not json\", \"messages\": [{\"role\": \"user\", \"content\": "
                "\"x\"}]}", GLM_FMT_AUTO, NULL, "bad_tools");
    EXPECT_FAIL("{\"tools\": [42], \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                GLM_FMT_AUTO, NULL, "bad_tools");
    EXPECT_FAIL("{\"messages\": []}", GLM_FMT_AUTO, NULL, "empty_conversation");
    EXPECT_FAIL("{\"messages\": \"hi\"}", GLM_FMT_AUTO, NULL, "no_messages");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
                GLM_FMT_AUTO, NULL, "bad_content");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", GLM_FMT_AUTO, NULL,
                "bad_content");
    EXPECT_FAIL("{\"messages\": [\"hi\"]}", GLM_FMT_AUTO, NULL, "bad_message");
    EXPECT_FAIL("{\"text\": \"x\", \"label\": 1}", GLM_FMT_AUTO, NULL, "unsupported_layout");
    CHECK(strstr(glm_errmsg(), "\"text\""), "lists keys: %s", glm_errmsg());
    EXPECT_FAIL("{\"instruction\": \"x\", \"output\": \"y\"}", GLM_FMT_MESSAGES, NULL,
                "no_messages");
    CHECK(strstr(glm_errmsg(), "no \"messages\" list") && strstr(glm_errmsg(), "messages records need \"messages\""),
          "--format messages names \"messages\": %s", glm_errmsg());
    /* a forced layout's hint names that layout's own key */
    EXPECT_FAIL("{\"instruction\": \"x\", \"output\": \"y\"}", GLM_FMT_SHAREGPT, NULL,
                "no_messages");
    CHECK(strstr(glm_errmsg(), "no \"conversations\" list") &&
              strstr(glm_errmsg(), "sharegpt records need \"conversations\"") && !strstr(glm_errmsg(), "\"messages\""),
          "--format sharegpt names \"conversations\": %s", glm_errmsg());

    /* --- ShareGPT */
    EXPECT_MSGS("{\"system\": \"S\", \"tools\": \"[{\\\"name\\\": \\\"f\\\"}]\", \"conversations\": "
                "[{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"function_call\", \"value\": "
                "\"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": {\\\"a\\\": \\\"b\\\"}}\"}, "
                "{\"from\": \"observation\", \"value\": \"{}\"}, {\"from\": \"gpt\", \"value\": "
                "\"done\"}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"S\",\"role\":\"system\",\"tools\":[{\"function\":{\"name\":\"f\"},"
                "\"type\":\"function\"}]},{\"content\":\"q\",\"role\":\"user\"},{\"content\":"
                "\"{\\\"a\\\": \\\"b\\\"}\",\"metadata\":\"f\",\"role\":\"assistant\"},{\"content\":"
                "\"{}\",\"role\":\"observation\"},{\"content\":\"done\",\"role\":\"assistant\"}]");
    CHECK(g_conv.format == GLM_FMT_SHAREGPT, "sharegpt");
    /* an empty turn ("" / [] / whitespace) drops the record, naming the turn */
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"gpt\", "
                "\"value\": \"\"}]}", GLM_FMT_AUTO, NULL, "empty_turn");
    CHECK(strstr(glm_errmsg(), "conversations[1] (gpt)"), "names the turn: %s", glm_errmsg());
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": []}, {\"role\": \"assistant\", "
                "\"content\": \"a\"}]}", GLM_FMT_AUTO, NULL, "empty_turn");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \" \\n\\t\\u3000\"}]}", GLM_FMT_AUTO, NULL, "empty_turn");
    EXPECT_FAIL("{\"instruction\": \"\", \"input\": \" \", \"output\": \"y\"}", GLM_FMT_AUTO, NULL, "empty_turn");
    EXPECT_FAIL("{\"instruction\": \"x\", \"output\": \"\"}", GLM_FMT_AUTO, NULL, "empty_turn");
    EXPECT_MSGS("{\"conversations\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                "\"assistant\", \"content\": \"a\"}]}", GLM_FMT_SHAREGPT, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"a\",\"role\":\"assistant\"}]");
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"function_call\", \"value\": \"not json\"}]}",
                GLM_FMT_AUTO, NULL, "bad_tool_call");
    /* a function_call turn without a value (once a crash: the NULL value reached type_name) */
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"function_call\"}]}",
                GLM_FMT_AUTO, NULL, "bad_tool_call");
    CHECK(strstr(glm_errmsg(), "conversations[1] (function_call) has no content"), "message: %s", glm_errmsg());
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"narrator\", \"value\": \"x\"}]}", GLM_FMT_AUTO,
                NULL, "unknown_role");

    /* --- Alpaca */
    EXPECT_MSGS("{\"instruction\": \"I\", \"input\": \"X\", \"output\": \"O\", \"system\": \"S\", "
                "\"history\": [[\"q1\", \"a1\"]], \"text\": \"ignored\"}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"S\",\"role\":\"system\"},{\"content\":\"q1\",\"role\":\"user\"},"
                "{\"content\":\"a1\",\"role\":\"assistant\"},{\"content\":\"I\\nX\",\"role\":"
                "\"user\"},{\"content\":\"O\",\"role\":\"assistant\"}]");
    EXPECT_MSGS("{\"instruction\": \"I\", \"input\": \"\", \"response\": \"R\"}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"I\",\"role\":\"user\"},{\"content\":\"R\",\"role\":\"assistant\"}]");
    EXPECT_FAIL("{\"instruction\": \"I\"}", GLM_FMT_AUTO, NULL, "no_response");
    EXPECT_FAIL("{\"instruction\": \"I\", \"output\": \"O\", \"history\": [[\"q\"]]}",
                GLM_FMT_AUTO, NULL, "bad_history");

    /* --- pretokenized */
    CHECK(conv("{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3]}", GLM_FMT_AUTO, NULL) ==
              GLM_OK && g_conv.format == GLM_FMT_PRETOKENIZED &&
              json_array_size(g_conv.input_ids) == 3 && json_array_size(g_conv.labels) == 3,
          "pretokenized: %s", glm_errmsg());
    EXPECT_FAIL("{\"input_ids\": [1, -2]}", GLM_FMT_AUTO, NULL, "bad_input_ids");
    CHECK(strstr(glm_errmsg(), "input_ids[1] = -2 is out of range"), "message: %s", glm_errmsg());
    /* an integer beyond 64 bits is named by its digits, not called "an integer, not a token id" */
    EXPECT_FAIL("{\"input_ids\": [1, 2, 99999999999999999999]}", GLM_FMT_AUTO, NULL, "bad_input_ids");
    CHECK(strstr(glm_errmsg(), "input_ids[2] = 99999999999999999999 is out of range"), "message: %s", glm_errmsg());
    EXPECT_FAIL("{\"input_ids\": [1, 2.5]}", GLM_FMT_AUTO, NULL, "bad_input_ids");
    CHECK(strstr(glm_errmsg(), "input_ids[1] is a number, not a token id"), "message: %s", glm_errmsg());
    EXPECT_FAIL("{\"input_ids\": [1, 2], \"labels\": [1]}", GLM_FMT_AUTO, NULL, "bad_labels");

    /* --- per-turn loss flags: "loss" (xtuner, ms-swift), "weight" (axolotl), "loss_weight"
     * (LLaMA-Factory v1), on any role; a tool call inherits its turn's flag */
    EXPECT_MSGS("{\"messages\": [{\"role\": \"system\", \"content\": \"S\", \"loss\": true}, "
                "{\"role\": \"user\", \"content\": \"q\", \"loss\": true}, {\"role\": \"assistant\", "
                "\"content\": \"a\", \"loss\": false}, {\"role\": \"user\", \"content\": \"q2\"}, "
                "{\"role\": \"assistant\", \"content\": \"a2\", \"loss\": null}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"S\",\"loss\":true,\"role\":\"system\"},{\"content\":\"q\",\"loss\":true,"
                "\"role\":\"user\"},{\"content\":\"a\",\"loss\":false,\"role\":\"assistant\"},{\"content\":"
                "\"q2\",\"role\":\"user\"},{\"content\":\"a2\",\"role\":\"assistant\"}]");
    CHECK(g_conv.loss_flag_turns == 3 && g_conv.loss_flag_off == 1, "3 flagged turns, 1 off: %d %d",
          g_conv.loss_flag_turns, g_conv.loss_flag_off);
    EXPECT_MSGS("{\"conversations\": [{\"from\": \"human\", \"value\": \"q\", \"weight\": 0}, {\"from\": "
                "\"gpt\", \"value\": \"a\", \"weight\": 1}, {\"from\": \"human\", \"value\": \"q2\", "
                "\"weight\": 1.0}, {\"from\": \"gpt\", \"value\": \"a2\", \"weight\": 0.0}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\",\"loss\":false,\"role\":\"user\"},{\"content\":\"a\",\"loss\":true,"
                "\"role\":\"assistant\"},{\"content\":\"q2\",\"loss\":true,\"role\":\"user\"},{\"content\":"
                "\"a2\",\"loss\":false,\"role\":\"assistant\"}]");
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"calling\", \"loss\": false, \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                "\"arguments\": {}}}]}, {\"role\": \"tool\", \"content\": \"r\"}, {\"role\": \"assistant\", "
                "\"content\": \"a\"}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"calling\",\"loss\":false,\"role\":"
                "\"assistant\"},{\"content\":\"{}\",\"loss\":false,\"metadata\":\"f\",\"role\":\"assistant\"},"
                "{\"content\":\"r\",\"role\":\"observation\"},{\"content\":\"a\",\"role\":\"assistant\"}]");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"a\", \"weight\": 0.5}]}", GLM_FMT_AUTO, NULL, "bad_loss_flag");
    CHECK(strstr(glm_errmsg(), "messages[1].weight"), "names the turn and key: %s", glm_errmsg());
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"loss\": \"no\"}, {\"role\": "
                "\"assistant\", \"content\": \"a\"}]}", GLM_FMT_AUTO, NULL, "bad_loss_flag");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"a\", \"loss\": true, \"weight\": 0}]}", GLM_FMT_AUTO, NULL, "bad_loss_flag");

    /* --- role order: each case drops the record with role_order, naming the turn */
    EXPECT_FAIL("{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"assistant\", "
                "\"content\": \"a\"}, {\"role\": \"user\", \"content\": \"q\"}]}", GLM_FMT_AUTO, NULL, "role_order");
    CHECK(strstr(glm_errmsg(), "messages[1] (assistant)"), "names the turn: %s", glm_errmsg());
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"gpt\", \"value\": \"a\"}]}", GLM_FMT_AUTO, NULL, "role_order");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"user\", "
                "\"content\": \"q2\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}", GLM_FMT_AUTO, NULL,
                "role_order");
    CHECK(strstr(glm_errmsg(), "messages[1] (user)") && strstr(glm_errmsg(), "--merge-consecutive-turns"),
          "names the turn and the option: %s", glm_errmsg());
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"r\"}]}", GLM_FMT_AUTO, NULL, "role_order");
    CHECK(strstr(glm_errmsg(), "messages[2] (observation)"), "names the tool turn: %s", glm_errmsg());
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"observation\", "
                "\"value\": \"r\"}]}", GLM_FMT_AUTO, NULL, "role_order");
    /* two tool results after one call are fine; so are two assistant messages (text + call) */
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {}}}, {\"function\": "
                "{\"name\": \"g\", \"arguments\": {}}}]}, {\"role\": \"tool\", \"content\": \"r1\"}, "
                "{\"role\": \"tool\", \"content\": \"r2\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"{}\",\"metadata\":\"f\",\"role\":"
                "\"assistant\"},{\"content\":\"{}\",\"metadata\":\"g\",\"role\":\"assistant\"},{\"content\":"
                "\"r1\",\"role\":\"observation\"},{\"content\":\"r2\",\"role\":\"observation\"},{\"content\":"
                "\"a\",\"role\":\"assistant\"}]");
    g_opt.merge_consecutive_turns = true; /* --merge-consecutive-turns joins same-role neighbours */
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"user\", "
                "\"content\": \"q2\", \"loss\": true}, {\"role\": \"assistant\", \"content\": \"a\"}, "
                "{\"role\": \"assistant\", \"content\": \"b\"}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\\nq2\",\"loss\":true,\"role\":\"user\"},{\"content\":\"a\\nb\","
                "\"role\":\"assistant\"}]");
    CHECK(has_note("turns_merged"), "note turns_merged");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", "
                "\"content\": \"q\"}]}", GLM_FMT_AUTO, NULL, "role_order"); /* merging does not fix this */
    g_opt.merge_consecutive_turns = false;

    /* --- reasoning: reasoning_content and reasoning parts, dropped (counted) or kept as content */
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"A\", \"reasoning_content\": \"R\"}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"A\",\"role\":\"assistant\"}]");
    CHECK(has_note("reasoning_dropped") && !has_note("reasoning_kept"), "reasoning dropped");
    g_opt.keep_reasoning = true;
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"A\", \"reasoning_content\": \"R\"}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"<think>\\nR\\n</think>\\n\\nA\","
                "\"role\":\"assistant\"}]");
    CHECK(has_note("reasoning_kept") && !has_note("reasoning_dropped"), "reasoning kept");
    EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": [{\"type\": \"reasoning\", \"value\": \"R1\"}, {\"type\": \"text\", \"value\": "
                "\"A\"}]}]}", GLM_FMT_AUTO, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"<think>\\nR1\\n</think>\\n\\nA\","
                "\"role\":\"assistant\"}]");
    g_opt.keep_reasoning = false;
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"reasoning_content\": \"R\"}, "
                "{\"role\": \"assistant\", \"content\": \"a\"}]}", GLM_FMT_AUTO, NULL, "bad_content");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                "\"content\": \"\", \"reasoning_content\": \"R\"}]}", GLM_FMT_AUTO, NULL, "empty_turn");

    /* --- pretraining text */
    CHECK(conv("{\"text\": \"Hello world\"}", GLM_FMT_AUTO, NULL) == GLM_OK && g_conv.format == GLM_FMT_TEXT &&
          !strcmp(json_string_value(g_conv.text), "Hello world") && !g_conv.messages, "text detected: %s", glm_errmsg());
    EXPECT_FAIL("{\"text\": \"x\", \"url\": \"u\"}", GLM_FMT_AUTO, NULL, "unsupported_layout");
    CHECK(strstr(glm_errmsg(), "--format text"), "hint --format text: %s", glm_errmsg());
    CHECK(conv("{\"text\": \"x\", \"url\": \"u\"}", GLM_FMT_TEXT, NULL) == GLM_OK && g_conv.format == GLM_FMT_TEXT,
          "--format text");
    g_opt.text_column = "content";
    CHECK(conv("{\"content\": \"body\", \"id\": 3}", GLM_FMT_AUTO, NULL) == GLM_OK &&
          g_conv.format == GLM_FMT_TEXT && !strcmp(json_string_value(g_conv.text), "body"), "--text-column");
    g_opt.text_column = NULL;
    EXPECT_FAIL("{\"text\": \" \\n\"}", GLM_FMT_AUTO, NULL, "empty_text");
    EXPECT_FAIL("{\"text\": 12}", GLM_FMT_AUTO, NULL, "bad_content");
    EXPECT_FAIL("{\"body\": \"x\"}", GLM_FMT_TEXT, NULL, "no_text");

    /* --- numbers stay as written: one integer above 2^63 does not turn the others into floats.
     * Expected text: CPython 3.11, json.dumps(json.loads(s), ensure_ascii=False) */
    EXPECT_OK("{\"tools\": [{\"name\": \"f\", \"parameters\": {\"maximum\": 18446744073709551616, "
                "\"minimum\": 5}}], \"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                "\"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 5, "
                "\"big\": 18446744073709551616, \"neg\": -18446744073709551617, \"f\": 1.5, \"e\": 1E5, \"tiny\": "
                "2.5e-5, \"inf\": 1e400, \"max\": 9223372036854775807}}}]}]}", GLM_FMT_AUTO, NULL);
    {
        json_t *call = json_array_get(g_conv.messages, 2);
        const char *args = json_string_value(json_object_get(call, "content"));
        CHECK(args && !strcmp(args, "{\"x\": 5, \"big\": 18446744073709551616, \"neg\": -18446744073709551617, "
                                    "\"f\": 1.5, \"e\": 100000.0, \"tiny\": 2.5e-05, \"inf\": Infinity, "
                                    "\"max\": 9223372036854775807}"),
              "arguments as Python writes them: %s", args ? args : "(none)");
        json_t *tools = json_object_get(json_array_get(g_conv.messages, 0), "tools");
        char *t = glm_tojson(tools, -1);
        CHECK(t && strstr(t, "\"maximum\": 18446744073709551616, \"minimum\": 5"), "tools: %s", t ? t : "-");
        free(t);
    }
    /* the same inside a tool call given as JSON text (ShareGPT function_call, glaive tools string) */
    EXPECT_OK("{\"tools\": \"[{\\\"name\\\": \\\"f\\\", \\\"n\\\": 18446744073709551616}]\", \"conversations\": "
                "[{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"function_call\", \"value\": "
                "\"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": {\\\"id\\\": 18446744073709551616, \\\"k\\\": 7}}\"}]}",
                GLM_FMT_AUTO, NULL);
    {
        const char *args = json_string_value(json_object_get(json_array_get(g_conv.messages, 2), "content"));
        CHECK(args && !strcmp(args, "{\"id\": 18446744073709551616, \"k\": 7}"), "function_call: %s", args ? args : "-");
        char *t = glm_tojson(json_object_get(json_array_get(g_conv.messages, 0), "tools"), -1);
        CHECK(t && strstr(t, "\"n\": 18446744073709551616"), "tools string: %s", t ? t : "-");
        free(t);
    }
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": 18446744073709551616}]}", GLM_FMT_AUTO, NULL,
                "bad_content");
    CHECK(strstr(glm_errmsg(), "an integer"), "a big integer is an integer, not text: %s", glm_errmsg());

    /* --- preference data (issue 34): not supervised data, refused record by record with the hint, whatever
     * layout the rest of the record has; LLaMA-Factory's dpo_en_demo / kto_en_demo records, its alpaca pairs,
     * TRL's prompt/chosen/rejected (text or conversational) and unpaired prompt/completion/label */
    static const char *const pairs[] = {
        "{\"conversations\": [{\"from\": \"human\", \"value\": \"Hi!\"}], \"chosen\": {\"from\": \"gpt\", \"value\": "
        "\"Hello.\"}, \"rejected\": {\"from\": \"gpt\", \"value\": \"Go away.\"}}",
        "{\"instruction\": \"Add 2 and 2.\", \"input\": \"\", \"chosen\": \"4\", \"rejected\": \"5\"}",
        "{\"prompt\": \"The sky is\", \"chosen\": \" blue.\", \"rejected\": \" green.\"}",
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"Sky?\"}], \"chosen\": [{\"role\": \"assistant\", "
        "\"content\": \"Blue.\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"Green.\"}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chosen\": {\"role\": \"assistant\", "
        "\"content\": \"Hello\"}, \"rejected\": {\"role\": \"assistant\", \"content\": \"No\"}}",
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        EXPECT_FAIL(pairs[i], GLM_FMT_AUTO, NULL, "preference_pair");
        CHECK(strstr(glm_errmsg(), "preference pair") && strstr(glm_errmsg(), "preference training is not available") &&
                  strstr(glm_errmsg(), "stage: dpo"), "pair %zu: %s", i, glm_errmsg());
    }
    EXPECT_FAIL(pairs[0], GLM_FMT_SHAREGPT, NULL, "preference_pair"); /* a forced chat layout too */
    EXPECT_FAIL(pairs[1], GLM_FMT_ALPACA, NULL, "preference_pair");
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\": "
                "\"A bad answer\"}], \"label\": false}", GLM_FMT_AUTO, NULL, "kto_label");
    CHECK(strstr(glm_errmsg(), "undesirable (false)") && strstr(glm_errmsg(), "stage: dpo"), "kto false: %s", glm_errmsg());
    EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\": "
                "\"A\"}], \"label\": true}", GLM_FMT_AUTO, NULL, "kto_label");
    CHECK(strstr(glm_errmsg(), "desirable (true)"), "kto true: %s", glm_errmsg());
    EXPECT_FAIL("{\"prompt\": \"The sky is\", \"completion\": \" green.\", \"label\": false}", GLM_FMT_AUTO, NULL,
                "kto_label");
    EXPECT_FAIL("{\"instruction\": \"Q\", \"output\": \"A\", \"label\": false}", GLM_FMT_AUTO, NULL, "kto_label");
    /* not preference data: a label that is not true/false, one of chosen/rejected alone, or a layout forced to
     * text / pretokenized (the columns say what is trained) */
    CHECK(conv("{\"instruction\": \"Q\", \"output\": \"A\", \"label\": \"sports\"}", GLM_FMT_AUTO, NULL) == GLM_OK,
          "a text label is no KTO label: %s", glm_errmsg());
    CHECK(conv("{\"instruction\": \"Q\", \"output\": \"A\", \"chosen\": \"x\"}", GLM_FMT_AUTO, NULL) == GLM_OK,
          "chosen alone is no pair: %s", glm_errmsg());
    CHECK(conv("{\"text\": \"T\", \"label\": true}", GLM_FMT_TEXT, NULL) == GLM_OK && g_conv.format == GLM_FMT_TEXT,
          "--format text reads the text: %s", glm_errmsg());
    /* dataset_info entries: "ranking": true, a kto_tag column (any name), refused as such */
    {
        json_t *pr = json_loads("{\"pairs\": {\"file_name\": \"p.json\", \"ranking\": true, \"formatting\": "
                                "\"sharegpt\", \"columns\": {\"messages\": \"conversations\", \"chosen\": \"good\", "
                                "\"rejected\": \"bad\"}}, \"kto\": {\"file_name\": \"k.json\", \"formatting\": "
                                "\"sharegpt\", \"columns\": {\"messages\": \"messages\", \"kto_tag\": \"ok\"}, "
                                "\"tags\": {\"role_tag\": \"role\", \"content_tag\": \"content\", \"user_tag\": \"user\", "
                                "\"assistant_tag\": \"assistant\"}}}", 0, NULL);
        glm_dsinfo *pi = NULL;
        CHECK(glm_dsinfo_from_json(pr, "/tmp/dataset_info.json", &pi) == GLM_OK, "%s", glm_errmsg());
        json_decref(pr);
        const glm_dsinfo_entry *pe = pi ? glm_dsinfo_find_name(pi, "pairs") : NULL, *ke = pi ? glm_dsinfo_find_name(pi, "kto") : NULL;
        CHECK(pe && pe->ranking && !pe->kto && pe->unsupported && strstr(pe->unsupported, "stage: dpo"), "ranking entry");
        CHECK(ke && ke->kto && !ke->ranking && ke->unsupported && strstr(ke->unsupported, "stage: dpo"), "kto entry");
        if (pe && ke) {
            EXPECT_FAIL("{\"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}], \"good\": {\"from\": "
                        "\"gpt\", \"value\": \"A\"}, \"bad\": {\"from\": \"gpt\", \"value\": \"B\"}}", GLM_FMT_AUTO, pe,
                        "preference_pair");
            CHECK(strstr(glm_errmsg(), "\"ranking\": true"), "ranking named: %s", glm_errmsg());
            EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", "
                        "\"content\": \"A\"}], \"ok\": 0}", GLM_FMT_AUTO, ke, "kto_label");
            CHECK(strstr(glm_errmsg(), "kto_tag"), "kto_tag named: %s", glm_errmsg());
        }
        glm_dsinfo_free(pi);
    }

    /* --- dataset_info mappings */
    json_t *root = json_loads(
        "{\"chat\": {\"file_name\": \"c.json\", \"formatting\": \"sharegpt\", \"columns\": "
        "{\"messages\": \"msgs\", \"system\": \"sys\"}, \"tags\": {\"role_tag\": \"r\", "
        "\"content_tag\": \"c\", \"user_tag\": \"me\", \"assistant_tag\": \"bot\"}}, "
        "\"qa\": {\"file_name\": \"q.json\", \"columns\": {\"prompt\": \"question\", "
        "\"response\": \"answer\", \"system\": \"sp\"}}, "
        "\"oa\": {\"file_name\": \"o.json\", \"formatting\": \"openai\"}, "
        "\"pt\": {\"file_name\": \"c4_demo.jsonl\", \"columns\": {\"prompt\": \"text\"}}, "
        "\"few\": {\"file_name\": \"c.json\", \"num_samples\": 3}}", 0, NULL);
    CHECK(glm_dsinfo_looks_like(root), "registry detected");
    glm_dsinfo *info = NULL;
    CHECK(glm_dsinfo_from_json(root, "/tmp/dataset_info.json", &info) == GLM_OK, "%s",
          glm_errmsg());
    json_decref(root);
    if (info) {
        const glm_dsinfo_entry *chat = glm_dsinfo_find_name(info, "chat");
        const glm_dsinfo_entry *qa = glm_dsinfo_find_name(info, "qa");
        const glm_dsinfo_entry *oa = glm_dsinfo_find_name(info, "oa");
        EXPECT_MSGS("{\"sys\": \"S\", \"msgs\": [{\"r\": \"me\", \"c\": \"q\"}, {\"r\": \"bot\", "
                    "\"c\": \"a\"}]}", GLM_FMT_AUTO, chat,
                    "[{\"content\":\"S\",\"role\":\"system\"},{\"content\":\"q\",\"role\":\"user\"},"
                    "{\"content\":\"a\",\"role\":\"assistant\"}]");
        EXPECT_MSGS("{\"question\": \"Q\", \"answer\": \"A\", \"sp\": \"S\"}", GLM_FMT_AUTO, qa,
                    "[{\"content\":\"S\",\"role\":\"system\"},{\"content\":\"Q\",\"role\":\"user\"},"
                    "{\"content\":\"A\",\"role\":\"assistant\"}]");
        EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                    "\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {}}}]}, {\"role\": "
                    "\"tool\", \"content\": \"r\"}]}", GLM_FMT_AUTO, oa,
                    "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"{}\",\"metadata\":\"f\","
                    "\"role\":\"assistant\"},{\"content\":\"r\",\"role\":\"observation\"}]");
        EXPECT_FAIL("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                    "\"tool\", \"content\": \"r\"}]}", GLM_FMT_AUTO, oa, "role_order");
        EXPECT_FAIL("{\"msgs\": [{\"r\": \"them\", \"c\": \"q\"}]}", GLM_FMT_AUTO, chat,
                    "unknown_role");
        /* LLaMA-Factory's pt entries ({"columns": {"prompt": "text"}}): the text layout */
        const glm_dsinfo_entry *pt = glm_dsinfo_find_name(info, "pt");
        CHECK(pt && pt->text_column && !strcmp(pt->text_column, "text") && !qa->text_column, "pt entry");
        CHECK(conv("{\"text\": \"T\"}", GLM_FMT_AUTO, pt) == GLM_OK && g_conv.format == GLM_FMT_TEXT, "pt entry: text");
        CHECK(glm_dsinfo_find_name(info, "few")->num_samples == 3 && pt->num_samples == -1, "num_samples read");
        EXPECT_FAIL("{\"conversations\": []}", GLM_FMT_AUTO, chat, "no_messages");
        glm_dsinfo_free(info);
    }
    json_t *notreg = json_loads("{\"conversations\": [], \"id\": {\"file_name\": 1}}", 0, NULL);
    CHECK(!glm_dsinfo_looks_like(notreg), "a record is not a registry");
    json_decref(notreg);
    glm_conversation_free(&g_conv);
    return check_summary("test_formats");
}
