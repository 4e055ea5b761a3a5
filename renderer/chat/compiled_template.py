"""The model's own chat template on a compiled engine (``minijinja``), where it provably renders
byte for byte as transformers' Jinja would.

Jinja compiles a template to Python once; what runs per request is that Python plus the sandbox's
guards (about a fifth of a served ``chat_render``). ``minijinja`` (Rust, Apache-2.0, the engine
other servers render Hugging Face templates with) renders the same text several times faster, but
it is another implementation: filters, methods, number formatting and whitespace rules differ.
So it serves only what is proven equal, the way ``TOKENIZER_BACKEND=auto`` serves fastokens:

* **the template** (checked once, at load): its Jinja syntax tree holds only constructs whose
  meaning is the same in both engines for every string (text, output, ``if``, ``for`` with its
  ``loop`` fields, ``set`` of a name, string constants, item and attribute lookups, ``+`` and
  ``~``, ``==``, ``!=``, ``in``, ``and``/``or``/``not``, the tests ``defined``, ``undefined``,
  ``none``, ``string``, slices, ``raise_exception``); no filter, no method call, no arithmetic on
  numbers, no macro. Then a probe: a corpus of plain conversations (roles and their orders,
  empty, multi-line and hostile strings, names present or not, with and without a generation
  prompt, one string of every code point) must render identically in both, and must fail in
  minijinja wherever Jinja fails;
* **the request** (checked per request): a plain conversation (each message only ``role``,
  ``content`` and maybe ``name``, all exactly ``str``, every string valid UTF-8), the model's own
  template, no tools, no documents, no template kwargs but ``add_generation_prompt`` and an unset
  ``continue_final_message``.

Everything else, and any request minijinja fails on or whose output exceeds the limits, renders
through the Jinja sandbox (``apply.py``), which alone words errors. Request templates never come
here: they stay in the worker. ``CHAT_TEMPLATE_ENGINE=jinja2`` turns this off.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import jinja2.nodes as nodes

from .apply import apply_chat_template
from .sandbox import ENV, TemplateLimits

ENGINES = ("auto", "jinja2")

# minijinja's fuel: instructions one render may run (printing a message as a dict costs one per
# character). Past it (0.7 s here) the request renders in the sandbox, under its own limits.
_FUEL = 20_000_000

# Keyword only appears inside calls, where keyword arguments are refused below.
_STATEMENTS = (nodes.Template, nodes.Keyword, nodes.Output, nodes.If, nodes.For, nodes.Assign)
_EXPRESSIONS = (
    nodes.TemplateData,
    nodes.Const,
    nodes.Name,
    nodes.Getitem,
    nodes.Getattr,
    nodes.Slice,
    nodes.Compare,
    nodes.Operand,
    nodes.Add,
    nodes.Concat,
    nodes.And,
    nodes.Or,
    nodes.Not,
    nodes.CondExpr,
    nodes.Test,
    nodes.Call,
    nodes.List,
    nodes.Tuple,
    nodes.Neg,
)
_COMPARISONS = frozenset({"eq", "ne", "in", "notin"})
_TESTS = frozenset({"defined", "undefined", "none", "string"})
_LOOP_FIELDS = frozenset({"first", "last", "index", "index0", "revindex", "revindex0", "length"})


@dataclass(frozen=True)
class EngineChoice:
    """Which engine renders the model's template for plain chats, and why."""

    engine: str
    """``minijinja`` or ``jinja2``."""

    reason: str
    """The setting, or what ruled minijinja out."""


def unsupported_construct(ast: nodes.Template) -> str | None:
    """The first construct of ``ast`` whose meaning may differ between Jinja and minijinja, named;
    None when every node is one both engines give the same meaning for every string."""
    for node in ast.find_all(nodes.Node):
        if isinstance(node, _STATEMENTS):
            if isinstance(node, nodes.For) and node.recursive:
                return "a recursive for loop"
            if isinstance(node, nodes.Assign) and not isinstance(node.target, nodes.Name):
                return "an assignment to something other than a name"
            continue
        if not isinstance(node, _EXPRESSIONS):
            return f"a {type(node).__name__} node"
        if isinstance(node, nodes.Const) and type(node.value) not in (str, bool, int, type(None)):
            return f"the constant {node.value!r}"
        if isinstance(node, nodes.Operand) and node.op not in _COMPARISONS:
            return f"the comparison {node.op!r}"
        if isinstance(node, nodes.Test) and node.name not in _TESTS:
            return f"the test {node.name!r}"
        if isinstance(node, nodes.Call) and not (
            isinstance(node.node, nodes.Name) and node.node.name == "raise_exception"
        ):
            return "a call other than raise_exception"
        if isinstance(node, nodes.Call) and (node.kwargs or node.dyn_args or node.dyn_kwargs):
            return "raise_exception with keyword arguments"
        if (
            isinstance(node, nodes.Getattr)
            and isinstance(node.node, nodes.Name)
            and node.node.name == "loop"
            and node.attr not in _LOOP_FIELDS
        ):
            return f"loop.{node.attr}"
    return None


class CompiledChatTemplate:
    """The model's template compiled by minijinja, serving plain chats only (see the module)."""

    def __init__(self, source: str, special_tokens: Mapping[str, str], max_output_chars: int) -> None:
        import minijinja

        self.source = source
        """The template text this serves (requests naming another template render in Jinja)."""
        self._special_tokens = dict(special_tokens)
        self._max_output_chars = max_output_chars
        env = minijinja.Environment(fuel=_FUEL)
        env.trim_blocks = True  # transformers' environment (sandbox.py)
        env.lstrip_blocks = True
        env.keep_trailing_newline = False
        env.add_function("raise_exception", _raise_exception)
        env.add_template("chat", source)
        self._env = env

    def render(self, conversation: list[dict[str, Any]], add_generation_prompt: bool) -> str | None:
        """The prompt; None when this request must render in the Jinja sandbox instead. (The
        load-time probe calls ``_render``, so what observes ``render`` sees requests only.)"""
        return self._render(conversation, add_generation_prompt)

    def _render(self, conversation: list[dict[str, Any]], add_generation_prompt: bool) -> str | None:
        try:
            text = self._env.render_template(
                "chat",
                messages=conversation,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self._special_tokens,
            )
        except Exception:  # noqa: BLE001 (any failure: Jinja renders it and words the error)
            return None
        return text if len(text) <= self._max_output_chars else None


def is_plain(conversation: list[dict[str, Any]]) -> bool:
    """Whether every message is only ``role``, ``content`` and maybe ``name``, each exactly a
    ``str`` minijinja receives unchanged (valid UTF-8: it turns a lone surrogate into U+FFFD)."""
    for message in conversation:
        if type(message) is not dict or not 2 <= len(message) <= 3:
            return False
        for key, value in message.items():
            if key not in ("role", "content", "name") or type(value) is not str:
                return False
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return False
    return bool(conversation)


def plain_kwargs(kwargs: Mapping[str, Any]) -> bool | None:
    """``add_generation_prompt`` when the resolved template kwargs are only it and an unset
    ``continue_final_message``; None otherwise."""
    agp = kwargs.get("add_generation_prompt", False)
    if type(agp) is not bool or kwargs.get("continue_final_message"):
        return None
    if any(k not in ("add_generation_prompt", "continue_final_message") for k in kwargs):
        return None
    return agp


def choose(
    setting: str, source: str | None, special_tokens: Mapping[str, str], limits: TemplateLimits
) -> tuple[CompiledChatTemplate | None, EngineChoice]:
    """The compiled template for ``source`` (the model's default), or None with the reason; the
    probe runs once per process for each template (about 0.2 s, mostly the every-character string)."""
    return _choose(setting, source, tuple(special_tokens.items()), limits)


@lru_cache(maxsize=16)
def _choose(
    setting: str, source: str | None, special_tokens: tuple[tuple[str, str], ...], limits: TemplateLimits
) -> tuple[CompiledChatTemplate | None, EngineChoice]:
    if setting == "jinja2":
        return None, EngineChoice("jinja2", "CHAT_TEMPLATE_ENGINE=jinja2")
    if source is None:
        return None, EngineChoice("jinja2", "the model has no chat template")
    try:
        import minijinja  # noqa: F401
    except ImportError:
        return None, EngineChoice("jinja2", "minijinja is not installed")
    try:
        # A tree of its own: the shared parse_template tree is constant-folded by the variable
        # analysis (jinja2.meta), and the choice must not depend on what ran first.
        construct = unsupported_construct(ENV.parse(source))
    except Exception as e:  # noqa: BLE001 (a template Jinja cannot parse renders nowhere else)
        return None, EngineChoice("jinja2", f"Jinja cannot parse the template ({e})")
    if construct is not None:
        return None, EngineChoice("jinja2", f"the template uses {construct}")
    try:
        compiled = CompiledChatTemplate(source, dict(special_tokens), limits.max_output_chars)
    except Exception as e:  # noqa: BLE001 (minijinja's syntax differs: Jinja keeps it)
        return None, EngineChoice("jinja2", f"minijinja does not compile the template ({e})")
    served = 0
    for conversation, agp in probe_corpus():
        try:
            want: str | None = apply_chat_template(
                source,
                conversation,
                special_tokens=dict(special_tokens),
                template_kwargs={"add_generation_prompt": agp},
                limits=limits,
            )
        except Exception:  # noqa: BLE001 (the template refused it: minijinja must refuse it too)
            want = None
        got = compiled._render(conversation, agp)
        if got is None:
            continue  # minijinja refused: such a request renders in Jinja, so nothing differs
        if got != want:
            what = "renders differently" if want is not None else "does not fail where Jinja fails"
            return None, EngineChoice("jinja2", f"minijinja {what} on a probe conversation")
        served += 1
    if not served:
        return None, EngineChoice("jinja2", "minijinja rendered none of the probe conversations")
    return compiled, EngineChoice("minijinja", f"equal to Jinja on every load-time probe ({served} served)")


# Strings the probe conversations carry: each one stresses a rule a template could treat
# differently (empty, whitespace at the edges and inside, newlines, markup-like text, quotes and
# escapes, the template syntax itself, control characters, non-ASCII and astral characters).
_TEXTS = (
    "Hello!",
    "",
    " ",
    "  padded both sides  ",
    "\n\nleading newlines",
    "trailing newlines\n\n",
    "line one\nline two\r\nline three",
    "\ttabs\tinside\t",
    "<|im_start|>user\nnot a real turn<|im_end|>",
    "<s>[INST] tags [/INST]</s>",
    "{{ messages }} {% if true %}x{% endif %} {# c #}",
    "'single' \"double\" `back` \\ backslash",
    "\x00\x01\x1b[31m\x1c\x1d\x1e\x1f\x7f",
    "\u00a0\u2028\u2029\u3000\ufeff",
    "héllo wörld, 世界, مرحبا, Привет",
    "🎉👍🏽🧑‍💻 emoji",
    "system",
    "assistant",
    "None",
    "True",
    "0",
)
_ROLES = ("system", "user", "assistant", "developer", "tool")


def probe_corpus() -> list[tuple[list[dict[str, Any]], bool]]:
    """Plain conversations (with the generation prompt on and off) the two engines must agree on."""
    chats: list[list[dict[str, Any]]] = []
    for i, text in enumerate(_TEXTS):
        other = _TEXTS[(i + 7) % len(_TEXTS)]
        chats += [
            [{"role": "user", "content": text}],
            [{"role": "system", "content": text}, {"role": "user", "content": other}],
            [{"role": "user", "content": other}, {"role": "assistant", "content": text}],
            [
                {"role": "system", "content": other},
                {"role": "user", "content": text},
                {"role": "assistant", "content": other},
                {"role": "user", "content": text},
            ],
            [{"role": "user", "content": text, "name": other}],
        ]
    for role in _ROLES:  # every role first, alone, twice in a row and after each other role
        chats.append([{"role": role, "content": "first"}])
        chats.append([{"role": role, "content": "a"}, {"role": role, "content": "b"}])
        chats += [[{"role": other, "content": "x"}, {"role": role, "content": "y"}] for other in _ROLES]
    # Every code point but the surrogates, in one string: any character either engine prints,
    # escapes (a message printed as a dict) or compares differently shows up here.
    every = _every_character()
    chats.append([{"role": "user", "content": every}])
    chats.append([{"role": "system", "content": every}, {"role": "user", "content": every, "name": every}])
    chats.append([{"role": "assistant", "content": "only the assistant", "name": "bot"}])
    chats.append([{"role": ("user", "assistant")[n % 2], "content": f"turn {n}"} for n in range(9)])
    chats.append([{"role": "custom_role", "content": "an unknown role"}])
    return [(chat, agp) for chat in chats for agp in (True, False)]


def _every_character() -> str:
    return "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))


def _raise_exception(message: Any) -> None:
    raise RuntimeError(message)  # minijinja fails the render; Jinja then renders it with its words
