"""Write the benchmark inputs (``benchmarks/inputs/*.json``) from seeded data.

Each file is perf_analyzer ``--input-data`` JSON for one render ensemble (BYTES tensors, shapes
without the batch dimension since the models batch), and ``load()`` turns one back into plain
requests for the other drivers (in-process baselines, the HTTP load generator, the vLLM peer), so
every driver sends exactly the same mix.

| file | ensemble | what |
|---|---|---|
| completion_short | render_completion | 5-40 words |
| completion_long | render_completion | 300-1100 words (about 400-1500 tokens) |
| completion_mix | render_completion | 80 % short, 20 % long (shuffled) |
| chat_multiturn | render_chat | system + 1-6 user/assistant rounds |
| chat_tools | render_chat | tool definitions, calls and results (tests/support/chat_cases.py content + generated) |
| chat_mix | render_chat | 70 % multi-turn, 30 % tools |

``python -m benchmarks.make_inputs`` rewrites them; the output depends only on the seed.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INPUTS = Path(__file__).resolve().parent / "inputs"
SEED = 20240611

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will more out "
    "up into do any your what can some them other than then its only time could these two may first "
    "new very after most also made over did many before must through years where much way well down "
    "should because each just those people how too little state good make world still own see men work "
    "long get here between both life being under never day same another know while last might great old "
    "year off come since against go came right used take three states himself few house use during "
    "without again place around however home small found thought went say part once general high upon "
    "school every does got united left number course war until always away something fact though water "
    "less public put think almost hand enough far took head yet government system better set told nothing "
    "night end why called didn't eyes find going look asked later knew point next program city business give "
    "group toward young days let room president side social given present several order national possible "
    "rather second face per among form important often things looked early white case john become large "
    "big need four within felt along children saw best church ever least power development light thing "
    "kubernetes tensor latency throughput tokenizer batching inference gradient embedding vector "
    "café naïve résumé über straße 東京 北京 こんにちは 안녕하세요 Ελληνικά русский 🚀 🌍 😀"
).split()
TOPICS = [
    "the weather",
    "a recipe",
    "Python code",
    "history",
    "travel plans",
    "a bug report",
    "math homework",
    "a poem",
    "the stock market",
    "gardening",
    "physics",
    "a job interview",
]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Sydney", "Zürich", "São Paulo", "Nairobi", "Reykjavík"]


def _sentence(rng: random.Random, lo: int = 6, hi: int = 18) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    words[0] = words[0][:1].upper() + words[0][1:]
    end = rng.choice([".", ".", ".", "?", "!", ":", "..."])
    if rng.random() < 0.15:
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
    return " ".join(words) + end


def _text(rng: random.Random, n_words: int) -> str:
    out: list[str] = []
    count = 0
    while count < n_words:
        s = _sentence(rng)
        out.append(s)
        count += s.count(" ") + 1
        if rng.random() < 0.12:
            out.append("\n\n")
    return " ".join(out).replace(" \n\n ", "\n\n").strip()


def short_prompt(rng: random.Random) -> str:
    return _text(rng, rng.randint(5, 40))


def long_prompt(rng: random.Random) -> str:
    return _text(rng, rng.randint(300, 1100))


def multiturn_chat(rng: random.Random) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.7:
        msgs.append(
            {"role": "system", "content": f"You are a helpful assistant for {rng.choice(TOPICS)}. " + _sentence(rng)}
        )
    for _ in range(rng.randint(1, 6)):
        msgs.append({"role": "user", "content": _text(rng, rng.randint(4, 60))})
        msgs.append({"role": "assistant", "content": _text(rng, rng.randint(10, 120))})
    msgs.append({"role": "user", "content": _text(rng, rng.randint(4, 60))})
    return {"messages": msgs}


def _chat_cases() -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT))
    from tests.support.chat_cases import CASES

    return CASES


def tools_chat(rng: random.Random, cases: list[dict[str, Any]]) -> dict[str, Any]:
    if rng.random() < 0.4:
        # Not tools_dict_arguments: vLLM's OpenAI schema refuses non-string tool-call arguments.
        c = rng.choice(
            [c for c in cases if c["id"].startswith(("tools_", "tool_")) and c["id"] != "tools_dict_arguments"]
        )
        return {"messages": c["messages"], "chat_params": _rendered_tools(c.get("chat_params", {}))}
    from tests.support.chat_cases import TIME_TOOL, WEATHER_TOOL

    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Use the tools when they help. " + _sentence(rng)}]
    for _ in range(rng.randint(1, 3)):
        city = rng.choice(CITIES)
        msgs.append({"role": "user", "content": f"What's the weather in {city}? " + _sentence(rng, 3, 12)})
        call_id = f"call{rng.randint(0, 99999):05d}"
        args = {"city": city, "unit": rng.choice(["celsius", "fahrenheit"])}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(
                    {"temperature": rng.randint(-20, 40), "condition": rng.choice(["sunny", "cloudy", "rain", "snow"])}
                ),
            }
        )
        msgs.append({"role": "assistant", "content": _text(rng, rng.randint(5, 40))})
    msgs.append({"role": "user", "content": "And the time there? " + _sentence(rng, 3, 10)})
    return {"messages": msgs, "chat_params": _rendered_tools({"tools": [WEATHER_TOOL, TIME_TOOL]})}


def _rendered_tools(chat_params: dict[str, Any]) -> dict[str, Any]:
    """Tools rendered as vLLM renders them by default: tool_choice "none" (its default with tools,
    "auto", is refused without a tool-call parser, by vLLM's render server and by ours alike)."""
    if chat_params.get("tools") and "tool_choice" not in chat_params:
        return {**chat_params, "tool_choice": "none"}
    return chat_params


def _bytes(value: str) -> dict[str, Any]:
    return {"content": [value], "shape": [1]}


def completion_entry(prompt: str) -> dict[str, Any]:
    return {"prompt": _bytes(prompt)}


def chat_entry(req: dict[str, Any]) -> dict[str, Any]:
    # Every entry carries chat_params ("{}" when none) so all entries have the same inputs.
    return {
        "messages": _bytes(json.dumps(req["messages"], ensure_ascii=False)),
        "chat_params": _bytes(json.dumps(req.get("chat_params") or {}, ensure_ascii=False)),
    }


def build() -> dict[str, dict[str, Any]]:
    cases = _chat_cases()
    rng = random.Random(SEED)
    short = [short_prompt(rng) for _ in range(96)]
    long = [long_prompt(rng) for _ in range(32)]
    mix = short[:64] + long[:16]
    rng.shuffle(mix)
    multi = [multiturn_chat(rng) for _ in range(64)]
    tools = [tools_chat(rng, cases) for _ in range(48)]
    chat_mix = multi[:42] + tools[:18]
    rng.shuffle(chat_mix)
    files = {
        "completion_short": [completion_entry(p) for p in short],
        "completion_long": [completion_entry(p) for p in long],
        "completion_mix": [completion_entry(p) for p in mix],
        "chat_multiturn": [chat_entry(c) for c in multi],
        "chat_tools": [chat_entry(c) for c in tools],
        "chat_mix": [chat_entry(c) for c in chat_mix],
    }
    return {name: {"data": entries} for name, entries in files.items()}


def write() -> list[Path]:
    INPUTS.mkdir(parents=True, exist_ok=True)
    out = []
    for name, doc in build().items():
        path = INPUTS / f"{name}.json"
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=0) + "\n")
        out.append(path)
    return out


def model_of(name: str) -> str:
    return "render_chat" if name.startswith("chat") else "render_completion"


def path_of(name: str) -> Path:
    return INPUTS / f"{name}.json"


def load(name: str) -> list[dict[str, Any]]:
    """The requests of one input file: ``{"prompt": str}`` or ``{"messages": [...], "chat_params": {...}}``."""
    doc = json.loads(path_of(name).read_text())
    out = []
    for e in doc["data"]:
        if "prompt" in e:
            out.append({"prompt": e["prompt"]["content"][0]})
        else:
            out.append(
                {
                    "messages": json.loads(e["messages"]["content"][0]),
                    "chat_params": json.loads(e["chat_params"]["content"][0]),
                }
            )
    return out


if __name__ == "__main__":
    for p in write():
        print(f"{p.relative_to(ROOT)}: {len(json.loads(p.read_text())['data'])} requests, {p.stat().st_size} bytes")
