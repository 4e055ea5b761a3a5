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

Where the template provably reads a message only through the constant keys ``role``, ``content``
and ``name`` and never names ``tools`` or ``documents`` (``message_keys``), its output depends on
a chat only through those keys of each message, in order. Then a chat with tools, tool calls or
other keys renders on minijinja too, cut down to those keys (``conversation_for``), provided what
is left is plain; the probe renders tool chats both ways to hold this.

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
from .shape import PLAIN_KEYS, valid_utf8

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


# A chat may be cut down to the plain keys (``shape.PLAIN_KEYS``): those the probe gives its
# messages, so that each is exercised (and ``name`` both present and absent). None of them is also
# a dict method's name, which Jinja's ``message.key`` would find before the item.


def message_keys(ast: nodes.Template) -> frozenset[str] | None:
    """The message keys the template reads, where every read of a message is a constant key among
    ``role``, ``content`` and ``name`` and neither ``tools`` nor ``documents`` is named; None
    otherwise (a message printed, compared, tested, assigned or passed whole; a name bound to a
    message and to anything else). Run after ``unsupported_construct`` has admitted the template,
    so no filter, method, macro or ``loop.previtem`` can reach a message another way."""
    parents: dict[int, nodes.Node] = {}
    stack: list[nodes.Node] = [ast]
    while stack:
        node = stack.pop()
        for child in node.iter_child_nodes():
            parents[id(child)] = node
            stack.append(child)

    def over_messages(loop: nodes.For) -> bool:
        it = loop.iter
        if isinstance(it, nodes.Getitem) and isinstance(it.arg, nodes.Slice):
            it = it.node
        return isinstance(it, nodes.Name) and it.name == "messages"

    message_vars: set[str] = set()
    for loop in ast.find_all(nodes.For):
        if over_messages(loop):
            if not isinstance(loop.target, nodes.Name):
                return None
            message_vars.add(loop.target.name)
    keys: set[str] = set()
    for name in ast.find_all(nodes.Name):
        parent = parents[id(name)]
        if name.ctx != "load":
            if (
                name.name == "messages"
                or name.name in message_vars
                and not (isinstance(parent, nodes.For) and parent.target is name and over_messages(parent))
            ):
                return None  # the name holds something else too
            continue
        if name.name in ("tools", "documents"):
            return None
        if name.name == "messages":
            if isinstance(parent, nodes.For) and parent.iter is name:
                continue
            if not (isinstance(parent, nodes.Getitem) and parent.node is name):
                return None
            if isinstance(parent.arg, nodes.Slice):
                loop = parents.get(id(parent))
                if isinstance(loop, nodes.For) and loop.iter is parent:
                    continue
                return None
            key = _key_read(parent, parents)  # messages[i]: one message, read by key
        elif name.name in message_vars:
            key = _key_read(name, parents)
        else:
            continue
        if key not in PLAIN_KEYS:
            return None
        keys.add(key)  # type: ignore[arg-type]
    return frozenset(keys)


def _key_read(expr: nodes.Node, parents: Mapping[int, nodes.Node]) -> str | None:
    """The constant key ``expr[...]`` or ``expr.key`` reads, if that is what ``expr`` is used for."""
    parent = parents.get(id(expr))
    if isinstance(parent, nodes.Getitem) and parent.node is expr:
        arg = parent.arg
        return arg.value if isinstance(arg, nodes.Const) and type(arg.value) is str else None
    if isinstance(parent, nodes.Getattr) and parent.node is expr:
        return parent.attr
    return None


class CompiledChatTemplate:
    """The model's template compiled by minijinja, serving the chats ``conversation_for`` admits
    (see the module)."""

    def __init__(
        self,
        source: str,
        special_tokens: Mapping[str, str],
        max_output_chars: int,
        keys: frozenset[str] | None = None,
    ) -> None:
        import minijinja

        self.source = source
        """The template text this serves (requests naming another template render in Jinja)."""
        self.keys = keys
        """The message keys the template reads (``message_keys``): chats are cut down to them, and
        may carry tools; None: only plain chats without tools, as they are."""
        # The keys the probe never leaves out: a cut message must hold those the template reads.
        self._required = _ROLE_AND_CONTENT if keys is None else keys & _ROLE_AND_CONTENT
        self._special_tokens = dict(special_tokens)
        self._max_output_chars = max_output_chars
        env = minijinja.Environment(fuel=_FUEL)
        env.trim_blocks = True  # transformers' environment (sandbox.py)
        env.lstrip_blocks = True
        env.keep_trailing_newline = False
        env.add_function("raise_exception", _raise_exception)
        env.add_template("chat", source)
        self._env = env

    def conversation_for(self, conversation: list[Any], tools: Any, documents: Any) -> list[dict[str, Any]] | None:
        """What minijinja renders for this request's conversation: the conversation itself when
        plain with no tools, or cut down to ``keys`` when the template reads no more; None when
        it must render in the Jinja sandbox."""
        if documents is not None:
            return None
        if self.keys is None:
            return conversation if tools is None and is_plain(conversation) else None
        if is_plain(conversation, self._required):
            return conversation  # nothing to cut: a key it holds and the template skips is never read
        keys = self.keys
        cut = []
        for message in conversation:
            if type(message) is not dict:
                return None
            cut.append({k: v for k, v in message.items() if k in keys})
        return cut if is_plain(cut, self._required) else None

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


_ROLE_AND_CONTENT = frozenset({"role", "content"})


def is_plain(conversation: list[Any], required: frozenset[str] = _ROLE_AND_CONTENT) -> bool:
    """Whether every message holds each key of ``required`` and no key but ``role``, ``content``
    and ``name``, each exactly a ``str`` minijinja receives unchanged (valid UTF-8: it turns a
    lone surrogate into U+FFFD). (The renderer's parse always sets ``role`` and ``content``.)"""
    for message in conversation:
        if type(message) is not dict or not required.issubset(message):
            return False
        for key, value in message.items():
            if key not in PLAIN_KEYS or type(value) is not str or not valid_utf8(value):
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
        ast = ENV.parse(source)
        construct = unsupported_construct(ast)
    except Exception as e:  # noqa: BLE001 (a template Jinja cannot parse renders nowhere else)
        return None, EngineChoice("jinja2", f"Jinja cannot parse the template ({e})")
    if construct is not None:
        return None, EngineChoice("jinja2", f"the template uses {construct}")
    keys = message_keys(ast)
    try:
        compiled = CompiledChatTemplate(source, dict(special_tokens), limits.max_output_chars, keys)
    except Exception as e:  # noqa: BLE001 (minijinja's syntax differs: Jinja keeps it)
        return None, EngineChoice("jinja2", f"minijinja does not compile the template ({e})")
    served = 0
    for conversation, agp, tools in probe_corpus():
        try:
            want: str | None = apply_chat_template(
                source,
                conversation,
                special_tokens=dict(special_tokens),
                template_kwargs={"add_generation_prompt": agp},
                tools=tools,
                limits=limits,
            )
        except Exception:  # noqa: BLE001 (the template refused it: minijinja must refuse it too)
            want = None
        cut = compiled.conversation_for(conversation, tools, None)
        got = None if cut is None else compiled._render(cut, agp)
        if got is None:
            continue  # not served, or minijinja refused: such a request renders in Jinja
        if got != want:
            what = "renders differently" if want is not None else "does not fail where Jinja fails"
            return None, EngineChoice("jinja2", f"minijinja {what} on a probe conversation")
        served += 1
    if not served:
        return None, EngineChoice("jinja2", "minijinja rendered none of the probe conversations")
    scope = "plain chats" if keys is None else f"chats cut to {', '.join(sorted(keys))}, tools or not"
    return compiled, EngineChoice("minijinja", f"equal to Jinja on every load-time probe ({served} served; {scope})")


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


# Tools and tool-call turns as the renderer hands them to a template (arguments parsed, a call's
# content empty), with the odd shapes a client may send beside them.
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "get_time"}},
]
_CALL = {"id": "call_1", "function": {"arguments": {"city": "Paris"}, "name": "get_weather"}, "type": "function"}


def _tool_chats() -> list[list[dict[str, Any]]]:
    user = {"role": "user", "content": "What's the weather in Paris?"}
    calls = {"role": "assistant", "content": "", "tool_calls": [_CALL, {**_CALL, "id": "call_2"}]}
    result = {"role": "tool", "content": '{"temperature": 21}', "tool_call_id": "call_1"}
    return [
        [user],
        [{"role": "system", "content": "Use the tools."}, user, calls, result, {"role": "assistant", "content": "21"}],
        [user, {"role": "assistant", "content": "Checking.", "tool_calls": [_CALL]}, result, user],
        [user, {"role": "assistant", "content": None, "tool_calls": [_CALL]}, result],
        [user, {"role": "assistant", "tool_calls": [_CALL]}, {**result, "name": "get_weather"}],
        [
            {**user, "reasoning": "hmm", "extra": {"nested": [1, 2]}},
            {"role": "tool", "content": "", "tool_call_id": ""},
        ],
    ]


def probe_corpus() -> list[tuple[list[dict[str, Any]], bool, list[dict[str, Any]] | None]]:
    """Conversations (with the generation prompt on and off, and the tools they are sent with)
    the two engines must agree on: plain ones, and tool chats with and without tools."""
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
    probes = [(chat, agp, None) for chat in chats for agp in (True, False)]
    tool_chats = _tool_chats()
    return probes + [
        (chat, agp, tools) for chat in tool_chats for agp in (True, False) for tools in (None, _PROBE_TOOLS)
    ]


def _every_character() -> str:
    return "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))


def _raise_exception(message: Any) -> None:
    raise RuntimeError(message)  # minijinja fails the render; Jinja then renders it with its words
