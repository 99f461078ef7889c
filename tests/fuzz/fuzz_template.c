/* tests/fuzz/fuzz_template.c: the chat template interpreter (tokenize/template_*.c: lexer, parser,
 * evaluator, builtins). The input is either a JSON object, in the form of
 * tests/tokenize/data/template_cases.jsonl ({"template": ..., "vars": {...}}) or a
 * tokenizer_config.json ({"chat_template": ...}), or else the template source itself, rendered
 * with a conversation that uses tools, a tool call, an observation and a system message. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "tokenize/template/chat.h"
#include "tokenize/template/template.h"

static const char k_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\", \"tools\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": "
    "{\"type\": \"integer\"}}}}}]}, {\"role\": \"user\", \"content\": \"hi \\u4f60\\u597d\"}, {\"role\": "
    "\"assistant\", \"content\": \"{\\\"x\\\": 1}\", \"metadata\": \"f\"}, {\"role\": \"observation\", \"content\": "
    "\"2\"}, {\"role\": \"assistant\", \"content\": \"done\"}], \"add_generation_prompt\": true, \"x\": 1, \"y\": "
    "[1, 2.5, \"s\", null, true, {\"k\": \"v\"}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    json_t *in = json_loadb((const char *)data, size, 0, NULL), *vars = NULL;
    const char *tsrc = src;
    if (json_is_object(in)) {
        json_t *t = json_object_get(in, "template");
        if (!json_is_string(t)) t = json_object_get(in, "chat_template");
        if (json_is_string(t)) tsrc = json_string_value(t);
        vars = json_object_get(in, "vars");
        if (vars) json_incref(vars);
    }
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(k_vars, 0, NULL);
    }
    glm_template *tpl = NULL;
    if (glm_template_parse(tsrc, "fuzz", &tpl) == GLM_OK) {
        glm_tpl_output out = {0};
        (void)glm_template_render(tpl, vars, &out);
        char *joined = glm_tpl_output_join(&out, NULL);
        free(joined);
        glm_tpl_output_free(&out);
        json_t *msgs = json_object_get(vars, "messages");
        if (json_is_array(msgs)) {
            glm_tpl_output o2 = {0};
            (void)glm_chat_render(tpl, msgs, 0, &o2);
            glm_tpl_output_free(&o2);
        }
        glm_template_free(tpl);
    }
    json_decref(vars);
    json_decref(in);
    free(src);
    return 0;
}
