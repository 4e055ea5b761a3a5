"""In-process cost of vLLM's chat request validation and of a whole chat render.

Times ``validate_chat_request``, ``ChatRenderer.render_messages`` and ``ChatStage.render`` (what
``chat_render`` runs per request: the messages' JSON text and the parsed ``chat_params`` bag,
``{}`` when none, as the benchmark inputs send it) per call on three sets:

- ``short``: seeded chats of one to three turns (user; system + user; user, assistant, user), the
  plain chats the issue's served latency is measured on;
- ``multiturn``: ``benchmarks/inputs/chat_multiturn.json`` (system + 1-6 rounds, plain strings);
- ``tools``: ``benchmarks/inputs/chat_tools.json`` (tools, calls, results: never the fast path,
  but their few ``tools`` lists are validated once, ``renderer/chat/known_tools.py``).

With the fast path present, each round times it and the full path (the fast path and the known
tool lists switched off) back to back, so the ratio is taken under the same machine load;
medians over the rounds. Each round also times ``ChatStage.render`` with ``CHAT_TEMPLATE_ENGINE`` ``auto`` (the model's template
on minijinja for plain chats, where proven equal) against ``jinja2``, back to back (rows
``stage.engine``), and with the plain-message parse (``messages.plain_message``)
against the general parse of every message, back to back (rows ``stage.parse``), and with the
request fields' JSON parsed by orjson where it provably equals ``json`` against ``json`` alone
(``renderer/json_fields.py``; rows ``stage.json``), and with the plain-chat lane against without it
(``renderer/chat/plain_lane.py``; rows ``stage.lane``: the lane is off in every other row, so each
of them measures its own lever as before the lane).

    .venv/bin/python -m benchmarks.chat_validation [--model build/models/smollm2-135m-instruct] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "build" / "models" / "smollm2-135m-instruct"


def short_chats(n: int = 64, seed: int = 26) -> list[dict[str, Any]]:
    """One to three turns of plain text, seeded."""
    from benchmarks.make_inputs import TOPICS, _sentence, _text

    rng = random.Random(seed)
    out = []
    for i in range(n):
        shape = i % 3
        user = {"role": "user", "content": _text(rng, rng.randint(4, 40))}
        if shape == 0:
            msgs = [user]
        elif shape == 1:
            system = f"You are a helpful assistant for {rng.choice(TOPICS)}. " + _sentence(rng)
            msgs = [{"role": "system", "content": system}, user]
        else:
            reply = {"role": "assistant", "content": _text(rng, rng.randint(10, 60))}
            msgs = [user, reply, {"role": "user", "content": _text(rng, rng.randint(4, 40))}]
        out.append({"messages": msgs, "chat_params": {}})
    return out


def _per_call_us(fn: Callable[[dict[str, Any]], Any], reqs: list[dict[str, Any]], seconds: float) -> float:
    calls = 0
    t0 = time.perf_counter()
    while True:
        for r in reqs:
            fn(r)
        calls += len(reqs)
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / calls * 1e6


@dataclass(frozen=True)
class _Subjects:
    """What is timed: the chat renderer, the chat stage (template engine ``auto``) and the stage on jinja2,
    with the validation levers as this checkout has them (``fast`` None where it has no fast path)."""

    chat: Any
    stage: Any
    jinja_stage: Any
    fast: Any
    known: Any
    lanes: dict[Any, Any]
    """Each renderer with the plain-chat lane it was built with (the lane is switched off by setting it to None)."""

    def validate(self, r: dict[str, Any]) -> Any:
        """The request's validation alone."""
        from renderer.chat import request as request_mod

        p = r["params"]
        return request_mod.validate_chat_request(r["messages"], p.tools, p.documents, p.tool_choice)

    def render(self, r: dict[str, Any]) -> Any:
        """``ChatRenderer.render_messages`` on the parsed request."""
        return self.chat.render_messages(r["messages"], r["params"])

    def stage_render(self, r: dict[str, Any]) -> Any:
        """The chat stage on the raw JSON messages and parameter bag, as the server calls it."""
        return self.stage.render(r["raw_messages"], r["bag"])

    def lane(self, on: bool) -> None:
        """The plain-chat lane on or off in both renderers."""
        for r, built in self.lanes.items():
            r._plain_lane = built if on else None


def run(model_dir: Path, rounds: int, seconds: float) -> dict[str, Any]:
    """Every lever on every request set, ``rounds`` times alternating; the median of each as a row."""
    s = _load_subjects(model_dir)
    sets = _request_sets()
    modes = ["fast", "full"] if s.fast is not None else ["current"]
    samples: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(rounds):
        for name, reqs in sets.items():
            s.lane(False)
            _time_validation(s, name, reqs, modes, seconds, samples)
            _time_stage_levers(s, name, reqs, seconds, samples)
    s.lane(True)
    if s.fast is not None:
        _validation_levers(s, off=False)
    rows = []
    for (name, what, mode), values in samples.items():
        rows.append({"set": name, "what": what, "mode": mode, "median_us": round(statistics.median(values), 1)})
    return {"model": str(model_dir), "rounds": rounds, "seconds": seconds, "rows": rows}


def _load_subjects(model_dir: Path) -> _Subjects:
    """The renderer and both stages on ``model_dir``, warmed up, and the validation levers as found."""
    from renderer.chat import ChatRenderer
    from renderer.chat import request as request_mod
    from renderer.chat_stage import ChatStage

    chat = ChatRenderer.from_model_dir(model_dir, mm_limits={})
    chat.warmup()
    stage = ChatStage.from_model_dir(model_dir)
    stage.warmup()
    jinja_stage = ChatStage.from_model_dir(model_dir, template_engine="jinja2")
    jinja_stage.warmup()
    fast = getattr(request_mod, "fast_validate", None)
    known = getattr(request_mod, "_validate_with_known_tools", None)
    # The plain-chat lane (renderer/chat/plain_lane.py) would take the plain chats past every lever
    # timed: off for their rows, measured on its own in rows ``stage.lane``.
    lanes = {r: r._plain_lane for r in (chat, stage.chat)}
    return _Subjects(chat, stage, jinja_stage, fast, known, lanes)


def _request_sets() -> dict[str, list[dict[str, Any]]]:
    """The short chats, multi-turn and tool chats, each request with its parsed parameters, raw JSON and bag."""
    from benchmarks.make_inputs import load
    from renderer.chat import ChatParams

    sets = {"short": short_chats(), "multiturn": load("chat_multiturn"), "tools": load("chat_tools")}
    for reqs in sets.values():
        for r in reqs:
            r["params"] = ChatParams.from_request(r.get("chat_params") or None)
            r["raw_messages"] = json.dumps(r["messages"], ensure_ascii=False)
            # The stage refuses vLLM's default "auto" without a tool parser; "none" still renders the tools.
            bag = r.get("chat_params") or {}
            r["bag"] = {**bag, "tool_choice": "none"} if bag.get("tools") else bag
    return sets


def _validation_levers(s: _Subjects, off: bool) -> None:
    """The fast path and the known tool lists switched off (``off``) or back to what they were."""
    from renderer.chat import request as request_mod

    request_mod.fast_validate = (lambda *a: None) if off else s.fast  # type: ignore[attr-defined]
    request_mod._validate_with_known_tools = (lambda *a: None) if off else s.known  # type: ignore[attr-defined]


def _time_validation(
    s: _Subjects,
    name: str,
    reqs: list[dict[str, Any]],
    modes: list[str],
    seconds: float,
    samples: dict[tuple[str, str, str], list[float]],
) -> None:
    """Validation, ``render_messages`` and the stage, each on the fast and the full path."""
    for what, fn in (("validate", s.validate), ("render_messages", s.render), ("stage.render", s.stage_render)):
        for mode in modes:
            # The full path: the fast path and the known tool lists switched off
            # (validate_chat_request looks both up per call).
            _validation_levers(s, off=mode == "full")
            samples.setdefault((name, what, mode), []).append(_per_call_us(fn, reqs, seconds))
    _validation_levers(s, off=False)


def _time_stage_levers(
    s: _Subjects,
    name: str,
    reqs: list[dict[str, Any]],
    seconds: float,
    samples: dict[tuple[str, str, str], list[float]],
) -> None:
    """The stage with each lever switched: template engine, message parse, JSON parse, plain-chat lane."""
    from renderer import json_fields
    from renderer.chat import messages as messages_mod

    for mode, st in (("auto", s.stage), ("jinja2", s.jinja_stage)):
        fn = lambda r, st=st: st.render(r["raw_messages"], r["bag"])  # noqa: E731
        samples.setdefault((name, "stage.engine", mode), []).append(_per_call_us(fn, reqs, seconds))
    plain = messages_mod.plain_message
    for mode in ("plain", "general"):
        # The general parse: the plain-message path switched off (looked up per message).
        messages_mod.plain_message = (lambda *a: None) if mode == "general" else plain  # type: ignore[assignment]
        samples.setdefault((name, "stage.parse", mode), []).append(_per_call_us(s.stage_render, reqs, seconds))
    messages_mod.plain_message = plain  # type: ignore[assignment]
    compiled = json_fields._compiled_parse
    for mode in ("orjson", "json"):
        # json alone: the compiled parse switched off (every text refused to it, as before).
        json_fields._compiled_parse = (lambda *a: json_fields._REFUSED) if mode == "json" else compiled  # type: ignore[assignment]
        samples.setdefault((name, "stage.json", mode), []).append(_per_call_us(s.stage_render, reqs, seconds))
    json_fields._compiled_parse = compiled  # type: ignore[assignment]
    for mode in ("lane", "nolane"):
        s.lane(mode == "lane")
        samples.setdefault((name, "stage.lane", mode), []).append(_per_call_us(s.stage_render, reqs, seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=0.3, help="per measurement")
    ap.add_argument("--json", type=Path, help="write the result here too")
    args = ap.parse_args()
    result = run(args.model, args.rounds, args.seconds)
    by_key = {(r["set"], r["what"], r["mode"]): r["median_us"] for r in result["rows"]}
    print(f"{'set':<10} {'what':<16} {'mode':<8} {'median us/call':>14}  ratio full/fast")
    for r in result["rows"]:
        ratio = ""
        if r["mode"] == "fast":
            ratio = f"{by_key[(r['set'], r['what'], 'full')] / r['median_us']:.2f}x"
        elif r["mode"] == "auto":
            ratio = f"{by_key[(r['set'], r['what'], 'jinja2')] / r['median_us']:.2f}x (jinja2/auto)"
        elif r["mode"] == "plain":
            ratio = f"{by_key[(r['set'], r['what'], 'general')] / r['median_us']:.2f}x (general/plain)"
        elif r["mode"] == "orjson":
            ratio = f"{by_key[(r['set'], r['what'], 'json')] / r['median_us']:.2f}x (json/orjson)"
        elif r["mode"] == "lane":
            ratio = f"{by_key[(r['set'], r['what'], 'nolane')] / r['median_us']:.2f}x (nolane/lane)"
        print(f"{r['set']:<10} {r['what']:<16} {r['mode']:<8} {r['median_us']:>14.1f}  {ratio}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
