"""Expected texts of tests/cli/test_lf_semantics.sh's default_system-with-tools cases.

LLaMA-Factory takes `system or default_system` for every sample (template.py, Template._encode)
and renders it in the first turn together with the tool text. glmtune renders the model's own
chat_template, so the expected text is that template (tests/fixtures/glm4-tokenizer/
tokenizer_config.json) rendered here with jinja2 the way transformers renders chat templates
(sandboxed environment, trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False,
indent=...)), with the system message holding the system text and the tools, followed by the
<|user|> that glmtune appends after the last turn.

The conversation is case 3 of tests/fixtures/chat_golden.jsonl (a tool call and its result).

usage: python3 make_tools_system.py FIXTURES_DIR OUT_DIR
writes the inputs tools_no_system.jsonl (the tools as a record key, no system message) and
tools_own_system.jsonl (the tools on the sample's own system message, "Answer in Chinese."), and
their expected texts under default_system "You are a weather bot.": default_system_tools.expected
(the default in the tools' system message) and own_system_tools.expected (the sample's own
system, which the default does not replace)
"""
import json, os, sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def render(template, messages):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: \
        json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    return env.from_string(template).render(messages=messages, add_generation_prompt=False)


def main():
    fix, out = sys.argv[1], sys.argv[2]
    template = json.load(open(os.path.join(fix, "glm4-tokenizer", "tokenizer_config.json")))["chat_template"]
    case = json.loads(open(os.path.join(fix, "chat_golden.jsonl"), encoding="utf-8").readlines()[3])
    msgs = case["messages"]
    with open(os.path.join(out, "tools_no_system.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"messages": msgs[1:], "tools": msgs[0]["tools"]}, ensure_ascii=False) + "\n")
    own = json.loads(json.dumps(msgs))
    own[0]["content"] = "Answer in Chinese."
    with open(os.path.join(out, "tools_own_system.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"messages": own}, ensure_ascii=False) + "\n")
    for name, system in (("default_system_tools", "You are a weather bot."), ("own_system_tools", "Answer in Chinese.")):
        m = json.loads(json.dumps(msgs))
        m[0]["content"] = system
        with open(os.path.join(out, name + ".expected"), "w", encoding="utf-8") as f:
            f.write(render(template, m) + "<|user|>\n")


main()
