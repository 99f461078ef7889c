/* Format conversion tests: each layout's normalization rule, the error keys and messages
 * (naming source, line and record), dataset_info mappings, Python-style json.dumps. */
#include <string.h>

#include "common/status.h"
#include "dataset/dataset_info.h"
#include "dataset/formats.h"
#include "tests/check.h"

static glm_conversation g_conv;
static const char *g_reason;

/* Converts `json` as record 6 at line 7 of "mem.jsonl". Returns the status. */
static glm_status conv(const char *json, glm_format fmt, const void *mapping) {
    glm_record rec;
    memset(&rec, 0, sizeof rec);
    rec.source = "mem.jsonl";
    rec.line = 7;
    rec.index = 6;
    rec.mapping = mapping;
    json_error_t e;
    rec.value = json_loads(json, 0, &e);
    if (!rec.value) {
        fprintf(stderr, "bad test JSON: %s: %s\n", json, e.text);
        return GLM_ERR_INTERNAL;
    }
    glm_conversation_free(&g_conv);
    glm_status st = glm_record_convert(&rec, fmt, &g_conv, &g_reason);
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
                "[{\"content\":\"ab\",\"role\":\"user\"},{\"content\":\"ok\",\"role\":\"assistant\"},"
                "{\"content\":\"{\\\"k\\\": 1}\",\"metadata\":\"f\",\"role\":\"assistant\"}]");
    CHECK(has_note("reasoning_dropped"), "note reasoning_dropped");

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

    /* --- ShareGPT */
    EXPECT_MSGS("{\"system\": \"S\", \"tools\": \"[{\\\"name\\\": \\\"f\\\"}]\", \"conversations\": "
                "[{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"function_call\", \"value\": "
                "\"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": {\\\"a\\\": \\\"b\\\"}}\"}, "
                "{\"from\": \"observation\", \"value\": \"{}\"}, {\"from\": \"gpt\", \"value\": "
                "\"\"}]}",
                GLM_FMT_AUTO, NULL,
                "[{\"content\":\"S\",\"role\":\"system\",\"tools\":[{\"function\":{\"name\":\"f\"},"
                "\"type\":\"function\"}]},{\"content\":\"q\",\"role\":\"user\"},{\"content\":"
                "\"{\\\"a\\\": \\\"b\\\"}\",\"metadata\":\"f\",\"role\":\"assistant\"},{\"content\":"
                "\"{}\",\"role\":\"observation\"},{\"content\":\"\",\"role\":\"assistant\"}]");
    CHECK(g_conv.format == GLM_FMT_SHAREGPT && has_note("empty_turn"), "sharegpt + empty_turn");
    EXPECT_MSGS("{\"conversations\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                "\"assistant\", \"content\": \"a\"}]}", GLM_FMT_SHAREGPT, NULL,
                "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"a\",\"role\":\"assistant\"}]");
    EXPECT_FAIL("{\"conversations\": [{\"from\": \"function_call\", \"value\": \"not json\"}]}",
                GLM_FMT_AUTO, NULL, "bad_tool_call");
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
    EXPECT_FAIL("{\"input_ids\": [1, 2], \"labels\": [1]}", GLM_FMT_AUTO, NULL, "bad_labels");

    /* --- dataset_info mappings */
    json_t *root = json_loads(
        "{\"chat\": {\"file_name\": \"c.json\", \"formatting\": \"sharegpt\", \"columns\": "
        "{\"messages\": \"msgs\", \"system\": \"sys\"}, \"tags\": {\"role_tag\": \"r\", "
        "\"content_tag\": \"c\", \"user_tag\": \"me\", \"assistant_tag\": \"bot\"}}, "
        "\"qa\": {\"file_name\": \"q.json\", \"columns\": {\"prompt\": \"question\", "
        "\"response\": \"answer\", \"system\": \"sp\"}}, "
        "\"oa\": {\"file_name\": \"o.json\", \"formatting\": \"openai\"}}", 0, NULL);
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
        EXPECT_MSGS("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                    "\"tool\", \"content\": \"r\"}]}", GLM_FMT_AUTO, oa,
                    "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"r\",\"role\":"
                    "\"observation\"}]");
        EXPECT_FAIL("{\"msgs\": [{\"r\": \"them\", \"c\": \"q\"}]}", GLM_FMT_AUTO, chat,
                    "unknown_role");
        EXPECT_FAIL("{\"conversations\": []}", GLM_FMT_AUTO, chat, "no_messages");
        glm_dsinfo_free(info);
    }
    json_t *notreg = json_loads("{\"conversations\": [], \"id\": {\"file_name\": 1}}", 0, NULL);
    CHECK(!glm_dsinfo_looks_like(notreg), "a record is not a registry");
    json_decref(notreg);
    glm_conversation_free(&g_conv);
    return check_summary("test_formats");
}
