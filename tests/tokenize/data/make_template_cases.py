#!/usr/bin/env python3
"""Generates the expected outputs for tests/tokenize/test_template.c with Python's jinja2 and
json.dumps, configured the way transformers renders chat templates (sandboxed jinja2,
trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False, indent=...),
raise_exception). Run: python3 make_template_cases.py  (writes template_cases.jsonl and
tojson_cases.jsonl next to this file). Only for producing test data: glmtune needs no Python."""
import json
import os

from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError

here = os.path.dirname(os.path.abspath(__file__))


def raise_exception(msg):
    raise TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

msgs = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <|user|> there"},
    {"role": "assistant", "content": "Hello!", "metadata": ""},
    {"role": "user", "content": "  spaced out  "},
]

cases = [
    ("text", "plain text only\n", {}),
    ("trailing_newline_kept_once", "a\n\n", {}),
    ("var", "x={{ x }} y={{ y }} z={{ undefined_thing }}.", {"x": 1, "y": "two"}),
    ("literals", "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 1.5 }}{{ true }}{{ none }}{{ [1, 'x', none, true] }}{{ {'k': 'v', 'n': 2} }}", {}),
    ("floats", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7.5 % 2 }}", {}),
    ("arith", "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'a' ~ 1 ~ none }} {{ -x }} {{ +x }}", {"x": 5}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'a' != 'a' }} {{ [1,2] == [1,2] }} {{ 3 > 2 >= 2 }}", {}),
    ("logic", "{{ x and y }}|{{ x or y }}|{{ not x }}|{{ '' or 'dflt' }}|{{ 0 and 1 }}|{{ none or [] }}", {"x": "a", "y": 0}),
    ("in", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 3 not in [1] }}", {"d": {"k": 1}}),
    ("if_elif_else", "{% for n in [0, 1, 2, 3] %}{% if n == 0 %}zero{% elif n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("for_loop_vars", "{% for x in xs %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.revindex }}:{{ x }}\n{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("for_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("for_filter", "{% for x in xs if x > 1 %}{{ x }}{{ ',' if not loop.last }}{% endfor %}", {"xs": [1, 2, 3, 0, 5]}),
    ("for_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}[{{ k }}]{% endfor %}", {"d": {"b": 1, "a": [2], "c": None}}),
    ("for_items_filter", "{% for k, v in d | items %}{{ k }}:{{ v }} {% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("set_scope", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}[{{ x }}]{% endfor %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(total=0, seen=false) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% if i == 2 %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.seen }}", {}),
    ("set_block", "{% set greeting %}Hello, {{ name }}!{% endset %}[{{ greeting | upper }}]", {"name": "Ana"}),
    ("set_tuple", "{% set a, b = 1, 'two' %}{{ a }}-{{ b }}", {}),
    ("filters", "{{ '  x y  ' | trim }}|{{ 'AbC' | lower }}|{{ 'abc' | upper }}|{{ xs | length }}|{{ 'héllo' | length }}|{{ xs | join(', ') }}|{{ xs | first }}|{{ xs | last }}|{{ 5 | string }}|{{ missing | default('dv') }}|{{ '' | default('e', true) }}|{{ xs | reverse | list }}|{{ 'hello world' | title }}|{{ 'hello' | capitalize }}|{{ 'a-b-c' | replace('-', '+') }}|{{ '42' | int + 1 }}|{{ 3 | float }}|{{ -4 | abs }}", {"xs": ["p", "q", "r"]}),
    ("tojson_filter", "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(indent=0) }}\n{{ s | tojson }}", {"v": {"a": [1, 2.5, {"b": None, "c": []}], "d": {}, "e": "ü\n\"q\"\t\u0001"}, "s": "plain"}),
    ("tojson_sort_keys", "{{ v | tojson(sort_keys=true) }}|{{ v | tojson(indent=1, sort_keys=true) }}", {"v": {"b": 1, "a": {"d": 2, "c": [3]}, "B": 0}}),
    ("tests", "{{ x is defined }} {{ y is defined }} {{ y is not defined }} {{ n is none }} {{ x is string }} {{ d is mapping }} {{ xs is iterable }} {{ 3 is number }} {{ x is number }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby(3) }} {{ d is not mapping }}", {"x": "s", "n": None, "d": {}, "xs": [1]}),
    ("methods", "{{ s.startswith('He') }} {{ s.endswith('!') }} {{ s.strip() }} {{ s.split(',') }} {{ ' a  b '.split() }} {{ d.get('k') }} {{ d.get('zz', 'def') }} {{ d.keys() | list }} {{ d.values() | list }} {{ s.lower() }} {{ s.upper() }} {{ s.replace('l', 'L') }} {{ '--x--'.strip('-') }} {{ s.rstrip('! ') }}", {"s": " Hello, world! ", "d": {"k": "v", "k2": 2}}),
    ("item_access", "{{ d['a']['b'] }} {{ d.a.b }} {{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ 'hello'[1:3] }} {{ '你好世界'[1:3] }} {{ xs[10] }}|{{ d.nope }}|", {"d": {"a": {"b": "deep"}}, "xs": [10, 20, 30]}),
    ("conditional_expr", "{{ 'yes' if x else 'no' }} {{ 'yes' if y else 'no' }} [{{ 'only' if y }}]", {"x": 1, "y": 0}),
    ("comments_ws", "a {# a comment #} b\n{#- trimmed -#}\n  c  {{- ' d ' -}}  e\n", {}),
    ("trim_lstrip", "<ul>\n  {% for x in xs %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n", {"xs": [1, 2]}),
    ("lstrip_not_var", "line\n    {{ x }}\n    {% if true %}\n    kept\n    {% endif %}\nend", {"x": "v"}),
    ("plus_modifier", "a\n  {%+ if true %}x{% endif +%}\nb", {}),
    ("minus_modifiers", "a   \n\n{%- if true -%}\n\n  x  \n{%- endif %}\n\n  b", {}),
    ("selectattr", "{% for m in msgs | selectattr('role', 'equalto', 'user') %}{{ m.content }};{% endfor %}{{ msgs | map(attribute='role') | join(',') }}|{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}", {"msgs": msgs}),
    ("chatml_like", "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", {"messages": msgs, "add_generation_prompt": True}),
    ("system_first", "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set loop_messages = messages[1:] %}{% else %}{% set sys = 'default' %}{% set loop_messages = messages %}{% endif %}[{{ sys }}]{% for m in loop_messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}", {"messages": msgs[:3]}),
    ("strings_escapes", "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 'line\\nbreak' }} {{ 'uni\\u00e9' }} {{ 'a' 'b' }}", {}),
    ("python_repr", "{{ ['it\\'s', \"q\\\"\", 'n\\n'] }} {{ {'a': none, 'b': [true, false], 'c': 1.5} }} {{ [] }} {{ {} }}", {}),
    ("unicode", "{{ s }}|{{ s | upper }}|{{ s[0] }}|{{ s | length }}", {"s": "élan 北京 👍"}),
    ("nested_loops", "{% for row in rows %}{% set outer = loop.index %}{% for c in row %}{{ outer }}.{{ loop.index }}={{ c }} {% endfor %}|{% endfor %}", {"rows": [["a", "b"], ["c"]]}),
    ("is_tests_on_metadata", "{% for m in ms %}{% if m.metadata is defined and m.metadata %}({{ m.metadata }}){% endif %}{{ m.content }}{% endfor %}", {"ms": [{"content": "a", "metadata": "f"}, {"content": "b"}, {"content": "c", "metadata": ""}]}),
]

# The demo's own chat template (samples/tokenizer/chat_template.jinja) on sample conversations.
with open(os.path.join(here, "..", "..", "..", "samples", "tokenizer", "chat_template.jinja"), encoding="utf-8") as f:
    sample_tpl = f.read()
with open(os.path.join(here, "..", "..", "..", "samples", "data", "chat_messages.jsonl"), encoding="utf-8") as f:
    sample_convs = [json.loads(line)["messages"] for line in f]
picked = [c for c in sample_convs if "tools" in c[0]] + sample_convs[:3]
for k, conv in enumerate(picked):
    cases.append((f"sample_template_{k}", sample_tpl, {"messages": conv, "add_generation_prompt": k % 2 == 1}))

errors = [
    ("raise", "{% if true %}{{ raise_exception('bad input!') }}{% endif %}", {}, "bad input!"),
    ("attr_of_undefined", "{{ nothing.attr }}", {}, "undefined"),
    ("compare_types", "{{ 1 < 'a' }}", {}, "compare"),
]

parse_errors = [
    # (name, template, line, col) of the error as glmtune reports it
    ("unclosed_if", "line1\n{% if x %}\nbody\n", 2, 1),
    ("bad_expr", "ok\nok {{ 1 + }}\n", 2, 11),
    ("unknown_tag", "{% frobnicate %}", 1, 4),
    ("unclosed_var", "a\nb {{ x ", 2, 3),
    ("unclosed_string", "{{ 'abc }}", 1, 4),
    ("stray_endfor", "x\n  {% endfor %}", 2, 6),
    ("macro", "{% macro m() %}{% endmacro %}", 1, 4),
    ("bad_char", "{{ a ; b }}", 1, 6),
]

with open(os.path.join(here, "template_cases.jsonl"), "w", encoding="utf-8") as f:
    for name, src, vars_ in cases:
        out = env.from_string(src).render(**vars_)
        f.write(json.dumps({"name": name, "template": src, "vars": vars_, "expected": out}, ensure_ascii=False) + "\n")
    for name, src, vars_, msg in errors:
        try:
            env.from_string(src).render(**vars_)
            raise SystemExit(f"{name}: expected an error")
        except Exception:
            pass
        f.write(json.dumps({"name": name, "template": src, "vars": vars_, "error": msg}, ensure_ascii=False) + "\n")
    for name, src, line, col in parse_errors:
        if name == "macro":  # valid jinja2, but unsupported by glmtune: only glmtune's error is checked
            f.write(json.dumps({"name": name, "template": src, "parse_error": [line, col]}) + "\n")
            continue
        try:
            env.from_string(src).render()
            raise SystemExit(f"{name}: expected a parse error")
        except Exception:
            pass
        f.write(json.dumps({"name": name, "template": src, "parse_error": [line, col]}, ensure_ascii=False) + "\n")

values = [
    None, True, False, 0, -17, 2 ** 53 + 1, 1.0, -0.0, 0.1, 1e-05, 0.0001, 1e16, 1e15, 123456789.125,
    1.7976931348623157e308, 5e-324, 2.5e-10, 3.14159, 1e22, 100.0, 12345678901234567890.0,
    "", "plain", "quote\" back\\slash", "ctl\n\r\t\b\f\u0001\u001f\u007f", "ünïcødé 北京 👍", "</script>&'",
    [], {}, [1, [2, [3, []]]], {"b": 1, "a": {"z": [], "y": {}}, "c": [None, True, 1.5]},
    {"name": "get_weather", "description": "查询", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
]
with open(os.path.join(here, "tojson_cases.jsonl"), "w", encoding="utf-8") as f:
    for v in values:
        for indent in (None, 0, 2, 4):
            f.write(json.dumps({"value": v, "indent": indent, "expected": json.dumps(v, ensure_ascii=False, indent=indent)}, ensure_ascii=False) + "\n")
