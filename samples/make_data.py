#!/usr/bin/env python3
"""Writes glmtune's embedded sample corpus (samples/data/) from a fixed seed.

Every conversation here is original, generated from small hand-written tables below
(arithmetic, word games, unit conversions, weekdays, opposites, colours, simple Chinese),
so that a tiny model can visibly learn the patterns and its loss falls within minutes.
Three layouts that users have:
  chat_messages.jsonl  OpenAI / GLM-4 "messages" (system prompts, multi-turn, tool calls)
  sharegpt.json        a JSON array of {"conversations": [{"from", "value"}, ...]}
  alpaca.json          a JSON array of {"instruction", "input", "output"}
Run: python3 samples/make_data.py   (the outputs are committed; glmtune needs no Python)."""
import json
import os
import random

rng = random.Random(20241129)
here = os.path.dirname(os.path.abspath(__file__))
out_dir = os.path.join(here, "data")

WORDS = ["garden", "planet", "window", "rocket", "silver", "candle", "forest", "bridge", "pencil", "harbor",
         "meadow", "button", "lantern", "river", "pepper", "marble", "violin", "tunnel", "basket", "shadow"]
OPPOSITES = [("hot", "cold"), ("early", "late"), ("loud", "quiet"), ("empty", "full"), ("open", "closed"),
             ("light", "heavy"), ("fast", "slow"), ("young", "old"), ("wide", "narrow"), ("happy", "sad"),
             ("rough", "smooth"), ("above", "below"), ("buy", "sell"), ("win", "lose"), ("dry", "wet")]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
DAYS_ZH = ["星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日"]
DIGITS_ZH = ["零", "一", "二", "三", "四", "五", "六", "七", "八", "九", "十"]
COLORS = [("红色", "red"), ("蓝色", "blue"), ("绿色", "green"), ("黄色", "yellow"), ("黑色", "black"),
          ("白色", "white"), ("紫色", "purple"), ("橙色", "orange"), ("灰色", "gray"), ("粉色", "pink")]
MIX = [("red", "yellow", "orange"), ("blue", "yellow", "green"), ("red", "blue", "purple"),
       ("red", "white", "pink"), ("black", "white", "gray"), ("blue", "white", "light blue")]
ANIMALS = [("cat", "kitten"), ("dog", "puppy"), ("cow", "calf"), ("sheep", "lamb"), ("horse", "foal"),
           ("duck", "duckling"), ("frog", "tadpole"), ("goat", "kid"), ("bear", "cub"), ("owl", "owlet")]
SYSTEMS = ["You are a concise assistant. Answer in one sentence.",
           "You are Pip, a patient helper who explains small facts clearly.",
           "You answer questions about words and numbers. Keep replies short.",
           "你是一个简洁的助手，用一句话回答。"]
SMALL_TALK = [
    ("Hello!", "Hello! What would you like to work on today?"),
    ("Good morning.", "Good morning! I hope your day starts well."),
    ("Thanks for the help.", "You're welcome. Come back any time."),
    ("Can you keep answers short?", "Yes. I will keep them short."),
    ("Tell me a tip for focusing.", "Work in short blocks of time and put your phone in another room."),
    ("How do I remember a new word?", "Use it in three sentences today and say it aloud once more tomorrow."),
    ("What should I drink on a hot day?", "Water is best; drink small amounts often."),
    ("Give me one idea for a rainy afternoon.", "Build a blanket fort and read a book inside it."),
    ("你好！", "你好！今天想做点什么？"),
    ("谢谢你。", "不客气，随时欢迎再来。"),
    ("给我一个早睡的建议。", "睡前一小时放下手机，把房间的灯调暗。"),
    ("下雨天可以做什么？", "可以在家读一本书，或者做一顿简单的晚饭。"),
]


def arithmetic():
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    kind = rng.choice(["plus", "minus", "times"])
    if kind == "plus":
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    if kind == "minus":
        a, b = max(a, b), min(a, b)
        return f"What is {a} minus {b}?", f"{a} minus {b} is {a - b}."
    a, b = a % 13 + 1, b % 13 + 1
    return f"What is {a} times {b}?", f"{a} times {b} is {a * b}."


def reverse_word():
    w = rng.choice(WORDS)
    return f"Reverse the word '{w}'.", f"'{w}' reversed is '{w[::-1]}'."


def count_letters():
    w = rng.choice(WORDS)
    return f"How many letters are in '{w}'?", f"'{w}' has {len(w)} letters."


def sort_numbers():
    xs = rng.sample(range(1, 100), rng.randint(3, 6))
    return "Sort these numbers from smallest to largest: " + ", ".join(map(str, xs)), \
        "Sorted: " + ", ".join(map(str, sorted(xs))) + "."


def units():
    n = rng.randint(2, 12)
    kind = rng.choice(["hours", "kilometers", "days", "minutes"])
    if kind == "hours":
        return f"How many minutes are in {n} hours?", f"{n} hours is {n * 60} minutes."
    if kind == "kilometers":
        return f"How many meters are in {n} kilometers?", f"{n} kilometers is {n * 1000} meters."
    if kind == "days":
        return f"How many hours are in {n} days?", f"{n} days is {n * 24} hours."
    return f"How many seconds are in {n} minutes?", f"{n} minutes is {n * 60} seconds."


def next_day():
    i = rng.randrange(7)
    return f"What day comes after {DAYS[i]}?", f"{DAYS[(i + 1) % 7]} comes after {DAYS[i]}."


def opposite():
    a, b = rng.choice(OPPOSITES)
    if rng.random() < 0.5:
        a, b = b, a
    return f"What is the opposite of '{a}'?", f"The opposite of '{a}' is '{b}'."


def baby_animal():
    a, b = rng.choice(ANIMALS)
    return f"What is a baby {a} called?", f"A baby {a} is called a {b}."


def mix_colors():
    a, b, c = rng.choice(MIX)
    return f"What color do you get when you mix {a} and {b}?", f"Mixing {a} and {b} gives {c}."


def zh_add():
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"{a} 加 {b} 等于多少？", f"{a} 加 {b} 等于 {a + b}。"


def zh_digit():
    n = rng.randint(0, 10)
    return f"数字 {n} 用中文怎么写？", f"数字 {n} 写作“{DIGITS_ZH[n]}”。"


def zh_day():
    i = rng.randrange(7)
    return f"{DAYS_ZH[i]}之后是星期几？", f"{DAYS_ZH[i]}之后是{DAYS_ZH[(i + 1) % 7]}。"


def zh_color():
    zh, en = rng.choice(COLORS)
    if rng.random() < 0.5:
        return f"{zh}的英文是什么？", f"{zh}的英文是 {en}。"
    return f"How do you say {en} in Chinese?", f"{en} in Chinese is {zh}."


TASKS = [arithmetic, reverse_word, count_letters, sort_numbers, units, next_day, opposite, baby_animal,
         mix_colors, zh_add, zh_digit, zh_day, zh_color]


def qa():
    if rng.random() < 0.1:
        return rng.choice(SMALL_TALK)
    return rng.choice(TASKS)()


def follow_up(q, a):
    """A second turn that builds on the first, for multi-turn conversations."""
    kind = rng.choice(["again", "why", "another"])
    if kind == "again":
        return "Can you say that again, briefly?", a
    if kind == "why":
        return "Are you sure?", "Yes. " + a
    q2, a2 = rng.choice(TASKS)()
    return "Another one: " + q2, a2


TOOLS = [
    {"type": "function", "function": {
        "name": "convert_currency",
        "description": "Convert money between currencies at today's rate (codes like USD, EUR).",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
            "required": ["amount", "from", "to"]}}},
    {"type": "function", "function": {
        "name": "get_forecast",
        "description": "Get tomorrow's weather forecast for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "count_words",
        "description": "统计一段文字里的词数。",
        "parameters": {"type": "object", "properties": {
            "text": {"type": "string", "description": "要统计的文字"}}, "required": ["text"]}}},
]


def tool_conversations():
    return [
        [{"role": "system", "content": "", "tools": [TOOLS[0]]},
         {"role": "user", "content": "How many euros is 40 US dollars?"},
         {"role": "assistant", "metadata": "convert_currency", "content": json.dumps({"amount": 40, "from": "USD", "to": "EUR"})},
         {"role": "observation", "content": json.dumps({"result": 36.8, "currency": "EUR"})},
         {"role": "assistant", "content": "40 US dollars is about 36.80 euros today."}],
        [{"role": "system", "content": "", "tools": [TOOLS[1]]},
         {"role": "user", "content": "Will it rain in Lisbon tomorrow?"},
         {"role": "assistant", "metadata": "get_forecast", "content": json.dumps({"city": "Lisbon"})},
         {"role": "observation", "content": json.dumps({"city": "Lisbon", "forecast": "light rain", "high_c": 17, "low_c": 11})},
         {"role": "assistant", "content": "Yes, light rain is expected in Lisbon tomorrow, between 11 and 17 °C."},
         {"role": "user", "content": "Thanks. Should I take an umbrella?"},
         {"role": "assistant", "content": "Yes, a small umbrella would be a good idea."}],
        [{"role": "system", "content": "", "tools": [TOOLS[2]]},
         {"role": "user", "content": "“今天天气很好我们去公园”有几个词？"},
         {"role": "assistant", "metadata": "count_words", "content": json.dumps({"text": "今天天气很好我们去公园"}, ensure_ascii=False)},
         {"role": "observation", "content": json.dumps({"words": 6}, ensure_ascii=False)},
         {"role": "assistant", "content": "这句话一共有 6 个词。"}],
    ]


def chat_messages(n):
    convs = []
    for i in range(n):
        msgs = []
        if rng.random() < 0.35:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        q, a = qa()
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        for _ in range(rng.choice([0, 0, 1, 2])):
            q2, a2 = follow_up(q, a)
            msgs += [{"role": "user", "content": q2}, {"role": "assistant", "content": a2}]
        convs.append({"messages": msgs})
    tools = tool_conversations()
    for k, t in enumerate(tools):
        convs.insert(10 + 30 * k, {"messages": t})
    return convs


def sharegpt(n):
    out = []
    for i in range(n):
        conv = []
        q, a = qa()
        conv += [{"from": "human", "value": q}, {"from": "gpt", "value": a}]
        if rng.random() < 0.3:
            q2, a2 = follow_up(q, a)
            conv += [{"from": "human", "value": q2}, {"from": "gpt", "value": a2}]
        item = {"conversations": conv}
        if rng.random() < 0.2:
            item["system"] = rng.choice(SYSTEMS)
        out.append(item)
    return out


def alpaca(n):
    out = []
    for i in range(n):
        kind = rng.randrange(4)
        if kind == 0:
            w = rng.choice(WORDS)
            out.append({"instruction": "Reverse the given word.", "input": w, "output": w[::-1]})
        elif kind == 1:
            xs = rng.sample(range(1, 100), rng.randint(3, 6))
            out.append({"instruction": "Sort the numbers from smallest to largest.", "input": ", ".join(map(str, xs)),
                        "output": ", ".join(map(str, sorted(xs)))})
        elif kind == 2:
            a, b = rng.choice(OPPOSITES)
            out.append({"instruction": "Give the opposite of the word.", "input": a, "output": b})
        else:
            q, a = rng.choice(TASKS)()
            out.append({"instruction": q, "input": "", "output": a})
    return out


os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "chat_messages.jsonl"), "w", encoding="utf-8") as f:
    for c in chat_messages(150):
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
with open(os.path.join(out_dir, "sharegpt.json"), "w", encoding="utf-8") as f:
    json.dump(sharegpt(90), f, ensure_ascii=False, indent=1)
    f.write("\n")
with open(os.path.join(out_dir, "alpaca.json"), "w", encoding="utf-8") as f:
    json.dump(alpaca(100), f, ensure_ascii=False, indent=1)
    f.write("\n")
