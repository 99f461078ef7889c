#!/usr/bin/env python3
"""Expected ids and labels for the target rules and input layouts (per-turn loss flags, train_on_prompt and
mask_history, pretraining text and its windows, numbers kept as Python writes them, reasoning,
role order and empty turns), computed without glmtune:

  - the chat text: transformers' own chat-template renderer (transformers.utils.chat_template_utils
    .render_jinja_template, transformers 5.x) with the chat_template of
    tests/fixtures/glm4-tokenizer/tokenizer_config.json, one message at a time, as in
    tests/fixtures/make_fixtures.py (glm4_sft_example);
  - the ids: tiktoken with GLM-4's tokenizer.model and split pattern (tests/bench/glm4_tiktoken.py);
  - the GLM-4 messages each raw record stands for, and which of them are targets, are written
    out by hand below from the rules in docs/tokenize.md (a flagged turn is a target iff its flag
    says so; otherwise assistants, or every message with train_on_prompt, or only the last
    assistant with mask_history); a token is a target when the token before it belongs to a
    target message; <|user|> ends the last turn;
  - tool-call arguments: json.dumps(json.loads(raw), ensure_ascii=False), which keeps integers of
    any size and writes inf as Infinity;
  - pretraining text: [gMASK] <sop> + tiktoken(text) + <|endoftext|>, every token after the
    prefix a target; windows: consecutive slices of seq_len tokens, the first of each not a target.

Writes target_cases.jsonl (read by tests/dataset/test_targets.c), and for the CLI test
../../cli/data/pretrain_windows.jsonl (input) and pretrain_windows.expected (what
`glmtune inspect --json` prints for it, "file" left out, lines sorted), and
../../cli/data/c4_demo.expected (per record of tests/fixtures/pretrain/c4_demo.jsonl: index, id count
and FNV-1a 64 of the little-endian uint32 ids; numbers only, no text).
Run: python3 make_target_cases.py [DATA_DIR]   (default ../../fixtures, i.e. tests/fixtures; ../shared works too)
Only for producing test data: glmtune needs no Python."""
import json
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bench"))
from glm4_tiktoken import glm4_encoding  # noqa: E402
from transformers.utils.chat_template_utils import render_jinja_template  # noqa: E402

shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "fixtures")
tok_dir = os.path.join(shared, "glm4-tokenizer")
enc = glm4_encoding(tok_dir)
template = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))["chat_template"]
GMASK, SOP, EOS, USER = (enc.encode_single_token(t) for t in ("[gMASK]", "<sop>", "<|endoftext|>", "<|user|>"))


def render(messages):
    out, _ = render_jinja_template([messages], chat_template=template)
    return out[0]


def chat_example(messages, targets):
    """ids and labels (transformers convention: -100 = not a target) of GLM-4 messages, targets[i]
    saying whether message i is a target message."""
    ids, mask = [GMASK, SOP], [False, False]
    for m, t in zip(messages, targets):
        piece = enc.encode(render([m]), allowed_special="all")
        assert piece[:2] == [GMASK, SOP]
        piece = piece[2:]
        ids += piece
        mask += [t] * len(piece)
    ids.append(USER)
    mask = [False] + mask  # token i is a target when token i-1 belongs to a target message
    assert enc.encode(render(messages), allowed_special="all") == ids[:-1]
    return ids, [i if k else -100 for i, k in zip(ids, mask)]


def text_example(text):
    ids = [GMASK, SOP] + enc.encode_ordinary(text) + [EOS]
    return ids, [-100, -100] + ids[2:]


cases = []


def chat(name, record, messages, targets, **opts):
    ids, labels = chat_example(messages, targets)
    cases.append({"name": name, "record": json.dumps(record, ensure_ascii=False) if not isinstance(record, str)
                  else record, "opts": opts, "input_ids": ids, "labels": labels})


def drop(name, record, reason, **opts):
    cases.append({"name": name, "record": json.dumps(record, ensure_ascii=False), "opts": opts, "drop": reason})


U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731

# ---- per-turn loss flags (a file mixing loss: false turns and normal ones)
conv = [S("你是助手。"), U("What is 2+2?"), A("4"), U("And 3+3?"), A("6"), U("谢谢"), A("不客气！")]
chat("loss_false_mixed", {"messages": [conv[0], conv[1], dict(conv[2], loss=False), conv[3], conv[4], conv[5],
                                       dict(conv[6], loss=False)]},
     conv, [False, False, False, False, True, False, False])
chat("loss_true_on_user_and_system", {"messages": [dict(conv[0], loss=True), dict(conv[1], loss=True), conv[2],
                                                   conv[3], dict(conv[4], loss=False), conv[5], conv[6]]},
     conv, [True, True, True, False, False, False, True])
chat("axolotl_weight", {"conversations": [{"from": "human", "value": "What is 2+2?", "weight": 0},
                                          {"from": "gpt", "value": "4", "weight": 1},
                                          {"from": "human", "value": "And 3+3?", "weight": 1},
                                          {"from": "gpt", "value": "6", "weight": 0}]},
     conv[1:5], [False, True, True, False])
chat("llamafactory_loss_weight", {"messages": [{"role": "user", "content": [{"type": "text", "value": "hi"}],
                                                "loss_weight": 0.0},
                                               {"role": "assistant", "content": [{"type": "text", "value": "hello"}],
                                                "loss_weight": 1.0}]},
     [U("hi"), A("hello")], [False, True])
# ---- LLaMA-Factory's train_on_prompt and mask_history (the names users know)
chat("train_on_prompt", {"messages": conv}, conv, [True] * 7, train_on="prompt")
chat("mask_history", {"messages": conv}, conv, [False, False, False, False, False, False, True], train_on="last")
chat("mask_history_and_prompt", {"messages": conv}, conv, [True, True, False, True, False, True, True],
     train_on="last,prompt")
chat("mask_history_flag_wins", {"messages": conv[:2] + [dict(conv[2], loss=True)] + conv[3:]}, conv,
     [False, False, True, False, False, False, True], train_on="last")
# ---- tool calls: integers of any size next to small ones, floats, inf (Python's json.dumps)
raw_tools = ('{"tools": [{"type": "function", "function": {"name": "lookup", "description": "按编号查询", '
             '"parameters": {"type": "object", "properties": {"id": {"type": "integer", "maximum": '
             '18446744073709551616, "minimum": 0}, "scale": {"type": "number", "default": 1.5}}}}}], '
             '"messages": [{"role": "user", "content": "查 18446744073709551616"}, {"role": "assistant", '
             '"tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": {"id": '
             '18446744073709551616, "n": 5, "scale": 2.5e-5, "big": 1E5, "inf": 1e400, "neg": -99999999999999999999}}}]}, '
             '{"role": "tool", "content": "{\\"ok\\": true}"}, {"role": "assistant", "content": "找到了。"}]}')
rec = json.loads(raw_tools)
tools = rec["tools"]
args = rec["messages"][1]["tool_calls"][0]["function"]["arguments"]
msgs = [{"role": "system", "content": "", "tools": tools}, U("查 18446744073709551616"),
        {"role": "assistant", "metadata": "lookup", "content": json.dumps(args, ensure_ascii=False)},
        {"role": "observation", "content": "{\"ok\": true}"}, A("找到了。")]
chat("bigint_tool_arguments", raw_tools, msgs, [False, False, True, False, True])
raw_fc = ('{"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": '
          '"{\\"name\\": \\"f\\", \\"arguments\\": {\\"a\\": 18446744073709551617, \\"b\\": 2}}"}, '
          '{"from": "observation", "value": "r"}, {"from": "gpt", "value": "done"}]}')
chat("bigint_function_call_text", raw_fc,
     [U("q"), {"role": "assistant", "metadata": "f", "content": json.dumps({"a": 18446744073709551617, "b": 2})},
      {"role": "observation", "content": "r"}, A("done")], [False, True, False, True])
# ---- reasoning: dropped by default, kept as <think>...</think> with --keep-reasoning
rr = {"messages": [U("Why?"), dict(A("Because."), reasoning_content="Let me think: cause and effect.")]}
chat("reasoning_dropped", rr, [U("Why?"), A("Because.")], [False, True])
chat("reasoning_kept", rr, [U("Why?"), A("<think>\nLet me think: cause and effect.\n</think>\n\nBecause.")],
     [False, True], keep_reasoning=True)
chat("reasoning_part_kept", {"messages": [U("Why?"), {"role": "assistant", "content": [
    {"type": "reasoning", "value": "Step 1."}, {"type": "text", "value": "Because."}]}]},
     [U("Why?"), A("<think>\nStep 1.\n</think>\n\nBecause.")], [False, True], keep_reasoning=True)
# ---- role order and empty turns
drop("first_turn_assistant", {"messages": [S("s"), A("a"), U("q"), A("b")]}, "role_order")
drop("two_users", {"messages": [U("q1"), U("q2"), A("a")]}, "role_order")
drop("observation_without_call", {"messages": [U("q"), A("a"), {"role": "tool", "content": "r"}, A("b")]},
     "role_order")
chat("two_users_merged", {"messages": [U("q1"), U("q2"), A("a")]}, [U("q1\nq2"), A("a")], [False, True],
     merge=True)
drop("empty_assistant", {"messages": [U("q"), A("")]}, "empty_turn")
drop("whitespace_user", {"messages": [U(" \n\t"), A("a")]}, "empty_turn")
drop("empty_parts_user", {"messages": [{"role": "user", "content": []}, A("a")]}, "empty_turn")
# ---- pretraining text
for name, text in [("text_en", "Plain text for pretraining.\nSecond line, with <|user|> as plain text."),
                   ("text_zh", "GLM-4 的预训练文本：中文与 English 混合，数字 12345。")]:
    ids, labels = text_example(text)
    cases.append({"name": name, "record": json.dumps({"text": text}, ensure_ascii=False), "opts": {},
                  "input_ids": ids, "labels": labels})
ids, labels = text_example("a body in another column")
cases.append({"name": "text_column", "record": json.dumps({"body": "a body in another column", "id": 7}),
              "opts": {"text_column": "body"}, "input_ids": ids, "labels": labels})

with open(os.path.join(here, "target_cases.jsonl"), "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")

# ---- the CLI's text windows: inputs and what inspect --json prints (file left out, sorted)
cli = os.path.join(here, "..", "..", "cli", "data")
os.makedirs(cli, exist_ok=True)
texts = ["Short text that fits.",
         "A longer text that needs several windows at a small row length: " + "one two three four five " * 6,
         "长文本也会被切成窗口：" + "一二三四五六七八九十" * 4,
         "Its last window would hold the end token alone: so left out."]  # 17 tokens at SEQ 16
SEQ = 16
with open(os.path.join(cli, "pretrain_windows.jsonl"), "w", encoding="utf-8") as f:
    for t in texts:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
lines = []
for r, t in enumerate(texts):
    ids, _ = text_example(t)
    tg = [0, 0] + [1] * (len(ids) - 2)
    for a in range(0, len(ids), SEQ):
        w_ids, w_tg = ids[a:a + SEQ], tg[a:a + SEQ]
        if len(w_ids) == 1:
            continue  # a one-token window trains nothing: left out
        w_tg = [0] + w_tg[1:]  # a document's first token is never a target
        lines.append(json.dumps({"record": r, "ids": w_ids, "targets": w_tg}, separators=(",", ":")))
with open(os.path.join(cli, "pretrain_windows.expected"), "w") as f:
    f.write("\n".join(sorted(lines)) + "\n")


def fnv(ids):
    h = 0xcbf29ce484222325
    for byte in struct.pack("<%dI" % len(ids), *ids):
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


c4 = os.path.join(shared, "pretrain", "c4_demo.jsonl")
if os.path.exists(c4):
    with open(os.path.join(cli, "c4_demo.expected"), "w") as f:
        for i, line in enumerate(open(c4, encoding="utf-8")):
            ids, _ = text_example(json.loads(line)["text"])
            f.write("%d %d %016x\n" % (i, len(ids), fnv(ids)))
print("wrote %d cases, %d window lines" % (len(cases), len(lines)))
