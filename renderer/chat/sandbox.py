"""The Jinja sandbox chat templates run in: transformers' environment, plus hard bounds.

Chat templates can come from requests, so they are untrusted code. The environment matches the one
``transformers`` compiles chat templates with (``ImmutableSandboxedEnvironment``, ``trim_blocks``,
``lstrip_blocks``, the ``loopcontrols`` extension and the ``{% generation %}`` tag, the ``tojson``
filter without HTML escaping, ``raise_exception``, ``strftime_now``, a guarded ``dict`` and
``namespace``), so what renders here renders byte-for-byte as ``apply_chat_template`` would.

On top of the sandbox (which already refuses attribute walks to ``__class__``/``__globals__`` and
mutation of lists and dicts) every render runs under a ``TemplateLimits`` budget:

* ``range()`` is capped at ``max_range`` items;
* every ``for`` loop is rewritten (in the AST, before compilation) to count its iterations against
  ``max_loop_iterations`` for the whole render, and to check the clock;
* string and list building (``~``, ``+``, ``*``, ``%``, ``**`` and the amplifying filters and string
  methods such as ``center``, ``replace``, ``join``) is checked *before* the result is allocated,
  so ``'x' * 10**12`` fails fast instead of exhausting memory;
* the rendered text is capped at ``max_output_chars`` and the render at ``max_seconds``.

The bounds are best effort against denial of service: a single C-level operation on data already
under the caps (sorting a million-item list, say) still runs to completion before the clock is
read again.
"""

from __future__ import annotations

import gc
import json
import math
import re
import string
import sys
import time
import traceback
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any, Callable, Iterable, Iterator

import jinja2
import jinja2.ext
import jinja2.filters
import jinja2.nodes as nodes
import jinja2.utils
import markupsafe
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from ..errors import (
    ChatTemplateBlocksError,
    ChatTemplateBuildError,
    ChatTemplateCompileError,
    ChatTemplateCountError,
    ChatTemplateDeadlineError,
    ChatTemplateIndentError,
    ChatTemplateLimitError,
    ChatTemplateLiteralError,
    ChatTemplateLoopError,
    ChatTemplateNestingError,
    ChatTemplateNumberError,
    ChatTemplateOutputError,
    ChatTemplatePaddingError,
    ChatTemplateRangeError,
    ChatTemplateSyntaxError,
    ChatTemplateTooLargeError,
)


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds on one chat-template render."""

    max_output_chars: int = 8_000_000
    """Longest rendered prompt, and longest string or list the template may build, in items."""

    max_range: int = 100_000
    """Most items one ``range()`` (or ``batch``/``slice`` count) may produce; Jinja's own cap."""

    max_loop_iterations: int = 1_000_000
    """Total ``for``-loop iterations over the whole render."""

    max_seconds: float = 2.0
    """Wall-clock budget of one render."""

    max_int_bits: int = 65_536
    """Largest integer ``**`` may produce, in bits (``9**9**9`` would take minutes)."""


class _Budget:
    """What one render has spent so far; lives in a context variable for the render's duration."""

    __slots__ = ("limits", "deadline", "iterations", "ops")

    def __init__(self, limits: TemplateLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.max_seconds
        self.iterations = 0
        self.ops = 0

    def op(self) -> None:
        """One guarded operation; the clock is read every 64 (each one is bounded in size)."""
        self.ops += 1
        if not self.ops & 63:
            self.check_time()

    def tick(self) -> None:
        self.iterations += 1
        if self.iterations > self.limits.max_loop_iterations:
            raise ChatTemplateLoopError(self.limits.max_loop_iterations)
        if not self.iterations & 63:
            self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise ChatTemplateDeadlineError(self.limits.max_seconds)

    def check_size(self, n: int, what: str) -> None:
        if n > self.limits.max_output_chars:
            raise ChatTemplateBuildError(what, n, self.limits.max_output_chars)


# Outside a render (constant folding at compile time) the default limits apply, without a clock.
_DEFAULT_LIMITS = TemplateLimits(max_seconds=math.inf)
_BUDGET: ContextVar[_Budget | None] = ContextVar("chat_template_budget", default=None)


def _budget() -> _Budget:
    return _BUDGET.get() or _Budget(_DEFAULT_LIMITS)


@contextmanager
def render_budget(limits: TemplateLimits) -> Iterator[_Budget]:
    """Run the enclosed render under ``limits``."""
    token = _BUDGET.set(_Budget(limits))
    try:
        yield _BUDGET.get()  # type: ignore[misc]
    finally:
        _BUDGET.reset(token)


def render_text(template: jinja2.Template, context: dict[str, Any], limits: TemplateLimits) -> str:
    """Render ``template`` chunk by chunk, enforcing ``limits`` on time and output size.

    A failed render leaves nothing alive: the template's frames (whose locals may hold a value
    just refused for its size) are cleared before the error leaves, so the value is freed at once
    rather than at the next full collection; after a bound was hit, one collection runs.
    """
    with render_budget(limits) as budget:
        chunks: list[str] = []
        total = 0
        stream = template.generate(**context)
        try:
            for chunk in stream:
                total += len(chunk)
                if total > limits.max_output_chars:
                    raise ChatTemplateOutputError(limits.max_output_chars)
                budget.check_time()
                chunks.append(chunk)
        except BaseException as e:
            chunks.clear()
            stream.close()
            release_traceback(e)
            if isinstance(e, (ChatTemplateLimitError, MemoryError, RecursionError)):
                gc.collect()
            raise
        return "".join(chunks)


def release_traceback(error: BaseException) -> None:
    """Clear the locals of the finished frames in ``error``'s traceback and in those of the errors
    it chains to: a traceback keeps every frame, and every value in it, alive."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        if tb is not None:
            traceback.clear_frames(tb.tb_next)  # not the first: the caller's frame, still running
        e = e.__cause__ or e.__context__


# --- size checks shared by binops, filters and string methods ----------------------------------

_DIGITS = re.compile(r"\d+")
# key, width, precision (each a number or "*": taken from the arguments), conversion
_PERCENT_SPEC = re.compile(r"%(\([^)]*\))?[#0\- +]*(\*|\d*)(?:\.(\*|\d*))?[hlL]?([a-zA-Z%])")
_MAX_JSON_INDENT = 1000


_TEXT = (str, bytes, bytearray)


def _sized(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, bytearray, list, tuple)) else None


def _text_floor(value: Any, limit: int) -> int:
    """A lower bound of ``len(str(value))``, computed without building it (stops past ``limit``):
    so a value whose text could never fit is refused before its text is made."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _TEXT):
            total += len(v)
        elif isinstance(v, (list, tuple, set, frozenset, dict)):
            n = len(v)
            total += 2 + 2 * max(n - 1, 0)  # brackets, then ", " between items
            if total > limit:
                return total
            if isinstance(v, dict):
                stack.extend(v.keys())
                stack.extend(v.values())
            else:
                stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            total += max(1, int(v.bit_length() * 0.30102))  # decimal digits, at least
        else:
            total += 1
        if total > limit:
            return total
    return total


def _check_text_of(values: Iterable[Any], what: str, extra: int = 0) -> None:
    """Refuse, before any is converted, values whose joined text must exceed the size limit."""
    budget = _budget()
    limit = budget.limits.max_output_chars
    total = extra
    for v in values:
        total += len(v) if type(v) is str else _text_floor(v, limit - total)
        if total > limit:
            break
    budget.check_size(total, what)


def _check_result(value: Any) -> Any:
    n = _sized(value)
    if n is not None:
        _budget().check_size(n, f"a {type(value).__name__}")
    return value


def _check_width(width: Any) -> None:
    if isinstance(width, int):
        _budget().check_size(width, "a padded string")


def _check_percent_format(fmt: Any, args: Any = ()) -> None:
    """A width or precision in a %-format ("%999999999d") pads the result; "*" takes it from the
    arguments ("%*s" % (n, s)). The arguments' own text is bounded before it is made."""
    if isinstance(fmt, (bytes, bytearray)):
        fmt = bytes(fmt).decode("latin-1")
    if not isinstance(fmt, str) or "%" not in fmt:
        return
    values = list(args) if isinstance(args, tuple) else [args]
    numbers: list[str] = []
    i = 0
    for m in _PERCENT_SPEC.finditer(fmt):
        key, width, precision, conversion = m.groups()
        if m.group() == "%%":
            continue
        for part in (width, precision):
            if part == "*":
                n = values[i] if i < len(values) else None
                i += 1
                if isinstance(n, int) and not isinstance(n, bool):
                    numbers.append(str(abs(n)))
            elif part:
                numbers.append(part)
        if key is None:
            i += 1
    _check_spec_numbers(numbers)
    _check_text_of(args.values() if isinstance(args, dict) else values, "a formatted string", len(fmt))


def _check_brace_format(fmt: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> None:
    """The same for str.format ("{:>999999999}"), nested specs included, with widths taken from
    the arguments ("{:>{w}}".format(s, w=n)) resolved first."""
    if not isinstance(fmt, str) or "{" not in fmt:
        return
    named = kwargs if isinstance(kwargs, dict) else {}
    formatter = string.Formatter()
    auto = 0

    def argument(name: str) -> Any:
        nonlocal auto
        head = re.match(r"[^.\[]*", name).group()  # type: ignore[union-attr]
        if head == "":
            head, auto = str(auto), auto + 1
        if head.isdigit():
            value = args[int(head)] if int(head) < len(args) else None
        else:
            value = named.get(head)
        return value if head == name or name == "" else None  # attributes and items: not followed

    numbers: list[str] = []
    try:
        for _, name, spec, _ in formatter.parse(fmt):
            if name is None:
                continue
            argument(name)  # an automatic field takes its number before the ones in its spec
            if spec and "{" in spec:
                parts = []
                for literal, inner, _, _ in formatter.parse(spec):
                    parts.append(literal)
                    if inner is not None:
                        value = argument(inner)
                        parts.append(str(value) if isinstance(value, (int, str)) else "")
                spec = "".join(parts)
            numbers += _DIGITS.findall(spec or "")
    except ValueError:
        return  # malformed, or an int too long to print: the real call raises its own error
    _check_spec_numbers(numbers)


def _check_spec_numbers(numbers: Iterable[str]) -> None:
    limit = _budget().limits.max_output_chars
    for digits in numbers:
        if len(digits) > 18 or int(digits) > limit:
            raise ChatTemplatePaddingError(digits, limit)


def _check_repeat(seq: Any, times: Any) -> None:
    n = _sized(seq)
    if n is not None and isinstance(times, int) and not isinstance(times, bool):
        _budget().check_size(n * max(times, 0), f"a repeated {type(seq).__name__}")


def _check_replace(s: Any, old: Any, new: Any, count: Any = None) -> None:
    if isinstance(s, _TEXT) and isinstance(old, _TEXT) and isinstance(new, _TEXT) and len(new) > len(old):
        hits = (len(s) + 1) if old == "" else s.count(old)
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _budget().check_size(len(s) + hits * (len(new) - len(old)), "a replaced string")


def _check_join(sep: Any, items: list[Any]) -> None:
    sep_len = len(sep) if isinstance(sep, _TEXT) else 0
    _check_text_of(items, "a joined string", sep_len * max(len(items) - 1, 0))


# --- globals and filters, as transformers defines them ---------------------------------------


def _raise_exception(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # transformers' filter: plain json.dumps (Jinja's own escapes HTML characters).
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if width > _MAX_JSON_INDENT:  # repeated on every line of the output
        raise ChatTemplateIndentError(width, _MAX_JSON_INDENT)
    _check_text_of([x], "a JSON text")
    return _check_result(
        json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    )


class _TemplateDict:
    """``dict`` for templates without the class itself (no ``dict.__subclasses__`` hacks)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """``namespace`` that refuses underscore-prefixed attributes (transformers' rule)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Jinja's signature trick
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
                f"{name!r}. Please rename the attribute."
            )


def _guarded_range(*args: Any) -> range:
    r = range(*args)
    limit = _budget().limits.max_range
    if len(r) > limit:
        raise ChatTemplateRangeError(len(r), limit)
    return r


def _guarded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    _budget().check_size(n * max, "a lorem ipsum text")
    return jinja2.utils.generate_lorem_ipsum(n, html, min, max)


def _center(value: Any, width: int = 80) -> str:
    _check_width(width)
    return jinja2.filters.do_center(value, width)


def _indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
    per_line = width if isinstance(width, int) else len(width) if isinstance(width, str) else 0
    lines = str(s).count("\n") + 1
    _budget().check_size(len(str(s)) + per_line * lines, "an indented string")
    return jinja2.filters.do_indent(s, width, first, blank)


@jinja2.pass_eval_context
def _replace(eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> str:
    _check_replace(str(s), str(old), str(new), count)
    return jinja2.filters.do_replace(eval_ctx, s, old, new, count)


@jinja2.pass_eval_context
def _join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
    items = list(value)
    if attribute is not None:  # the attributes are what gets joined: pick them first
        items = list(map(jinja2.filters.make_attrgetter(eval_ctx.environment, attribute), items))
    _check_join(d, items)
    return jinja2.filters.do_join(eval_ctx, items, d)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    _check_percent_format(value, kwargs or args)  # do_format's own choice of arguments
    return jinja2.filters.do_format(value, *args, **kwargs)


def _string(value: Any) -> str:
    _check_text_of([value], "a string")
    return markupsafe.soft_str(value)


@jinja2.pass_environment
def _sum(environment: jinja2.Environment, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """``sum`` as Jinja's, but lists add in linear time (``sum(start=[])`` copies the running
    total at every step: quadratic), with sizes and time checked at every step."""
    if isinstance(start, (int, float, str)):  # numbers are cheap; a str start fails at once
        return jinja2.filters.do_sum(environment, iterable, attribute, start)
    items: Iterable[Any] = iterable
    if attribute is not None:
        items = map(jinja2.filters.make_attrgetter(environment, attribute), iterable)
    budget = _budget()
    total = start
    owned = False  # whether total is a list made here, safe to extend in place
    for item in items:
        budget.check_time()
        if type(total) is list and type(item) is list:
            budget.check_size(len(total) + len(item), "a summed list")
            if not owned:
                total, owned = list(total), True
            total.extend(item)
        else:
            if _sized(total) is not None and _sized(item) is not None:
                budget.check_size(len(total) + len(item), f"a summed {type(total).__name__}")
            total, owned = total + item, False
    return total


def _batch(value: Any, linecount: int, fill_with: Any = None) -> Any:
    _check_count(linecount, "batch")
    return jinja2.filters.do_batch(value, linecount, fill_with)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Any:
    _check_count(slices, "slice")
    return jinja2.filters.do_slice(value, slices, fill_with)


def _check_count(n: Any, name: str) -> None:
    limit = _budget().limits.max_range
    if isinstance(n, int) and n > limit:
        raise ChatTemplateCountError(name, n, limit)


def _post_checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)  # keeps jinja_pass_arg, so pass_eval_context/pass_environment still apply
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.check_time()
        result = fn(*args, **kwargs)
        budget.check_time()  # one slow filter (wordwrap, urlize, sort) is noticed right after
        return _check_result(result)

    return wrapper


_GUARDED_FILTERS: dict[str, Callable[..., Any]] = {
    "center": _center,
    "indent": _indent,
    "replace": _replace,
    "join": _join,
    "format": _format,
    "string": _string,
    "sum": _sum,
    "batch": _batch,
    "slice": _slice,
}

# str methods that can grow a string far past their inputs, with the check to run first.
# (bytes and bytearray have the same methods, checked the same way.)
_STR_METHOD_CHECKS: dict[str, Callable[..., None]] = {
    "center": lambda s, width=0, *a: _check_width(width),
    "ljust": lambda s, width=0, *a: _check_width(width),
    "rjust": lambda s, width=0, *a: _check_width(width),
    "zfill": lambda s, width=0, *a: _check_width(width),
    "expandtabs": lambda s, tabsize=8: _budget().check_size(
        len(s)
        + s.count(b"\t" if isinstance(s, (bytes, bytearray)) else "\t") * (tabsize if isinstance(tabsize, int) else 0),
        "an expanded string",
    ),
    "replace": lambda s, old="", new="", count=-1: _check_replace(s, old, new, count),
    "join": lambda s, items=(): _check_join(s, list(items) if isinstance(items, (list, tuple)) else []),
    "format": lambda s, *a, **k: _check_brace_format(s, a, k),
    "format_map": lambda s, mapping=None: _check_brace_format(s, (), mapping),
    "translate": lambda s, table=None: _budget().check_size(
        len(s) * max([len(v) for v in table.values() if isinstance(v, str)] or [1])
        if isinstance(table, dict)
        else len(s),
        "a translated string",
    ),
}


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body (transformers uses it to mark
    assistant tokens; the text is unchanged)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


class _GuardedLoop:
    """An iterable that counts each item against the render's loop budget; sized like its source
    so ``loop.length``/``loop.last`` behave exactly as without the guard."""

    __slots__ = ("_source",)

    def __init__(self, source: Any) -> None:
        self._source = source

    def __iter__(self) -> Iterator[Any]:
        budget = _budget()
        for item in self._source:
            budget.tick()
            yield item

    def __len__(self) -> int:
        return len(self._source)


class _InsertGuards(NodeTransformer):
    """Rewrites ``for x in it`` to ``for x in environment.guard_loop(it)`` and ``a ~ b`` to
    ``environment.guard_concat(a, b)``."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _env_call("guard_loop", [node.iter], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _env_call("guard_concat", list(node.nodes), node.lineno)


def _env_call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(name), args, [], None, None).set_lineno(lineno)


# Types whose attribute safety is cached per (type, attribute): what templates see (JSON values,
# our namespace and dict wrappers, loop objects). Exact types only, never subclasses.
_CACHED_ATTRIBUTE_TYPES = frozenset(
    {
        str,
        bytes,
        dict,
        list,
        tuple,
        int,
        float,
        bool,
        type(None),
        markupsafe.Markup,
        _TemplateNamespace,
        _TemplateDict,
        jinja2.runtime.LoopContext,
    }
)
_MAX_CACHED_ATTRIBUTES = 4096


class ChatSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with bounded loops, sizes and time."""

    intercepted_binops = frozenset({"+", "*", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationTag, jinja2.ext.loopcontrols],
        )
        self.filters["tojson"] = _tojson
        for name, fn in _GUARDED_FILTERS.items():
            self.filters[name] = fn
        for name in list(self.filters):
            self.filters[name] = _post_checked(self.filters[name])
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["dict"] = _TemplateDict()
        self.globals["namespace"] = _TemplateNamespace
        self.globals["range"] = _guarded_range
        self.globals["lipsum"] = _guarded_lipsum
        self._safe_attributes: dict[tuple[type, str], bool] = {}

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        # The sandbox's answer depends only on (type(obj), attr) for these types: underscore names,
        # the internal attributes of functions, types, frames and generators (none of these), and
        # the mutating methods of known mutable types (by type and name). ``value`` is not read.
        kind = type(obj)
        if kind not in _CACHED_ATTRIBUTE_TYPES:
            return super().is_safe_attribute(obj, attr, value)
        key = (kind, attr)
        safe = self._safe_attributes.get(key)
        if safe is None:
            safe = super().is_safe_attribute(obj, attr, value)
            if len(self._safe_attributes) < _MAX_CACHED_ATTRIBUTES:  # namespace names are open-ended
                self._safe_attributes[key] = safe
        return safe

    # Reached only through the AST rewrite above; templates cannot name ``environment``.
    def guard_loop(self, iterable: Any) -> _GuardedLoop:
        return _GuardedLoop(iterable)

    def guard_concat(self, *values: Any) -> str:
        _check_text_of(values, "a concatenated string")  # before str() of a large list builds it
        parts = [str(v) for v in values]
        budget = _budget()
        budget.check_size(sum(map(len, parts)), "a concatenated string")
        budget.check_time()
        return "".join(parts)

    def concat(self, chunks: Iterable[str]) -> str:  # type: ignore[override]
        """Joins the output a block assignment (``{% set x %}...{% endset %}``), macro, call or
        filter block buffered: Jinja's generated code calls ``environment.concat`` there, so the
        size is checked before the string exists (``{{ x }}{{ x }}`` doubles it each time)."""
        parts = chunks if isinstance(chunks, list) else list(chunks)
        budget = _budget()
        budget.check_size(sum(map(len, parts)), "a block of template output")
        budget.check_time()
        return "".join(parts)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:
            # Templates concatenate strings all the time: the one size check covers the result.
            budget = _budget()
            budget.check_size(len(left) + len(right), "a str")
            budget.op()
            return left + right
        if operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        elif operator == "+":
            if _sized(left) is not None and _sized(right) is not None:
                _budget().check_size(len(left) + len(right), f"a {type(left).__name__}")
        elif operator == "%":
            _check_percent_format(left, right)
        elif operator == "**":
            _check_power(left, right)
        _budget().check_time()
        return _check_result(super().call_binop(context, operator, left, right))

    def call(self, context: jinja2.runtime.Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        # Every call (macros included: recursion through them doubles the work per level) reads
        # the clock.
        _budget().check_time()
        # str.format arrives wrapped by the sandbox; the bound method is its __wrapped__.
        owner = getattr(getattr(obj, "__wrapped__", obj), "__self__", None)
        if isinstance(owner, _TEXT):
            check = _STR_METHOD_CHECKS.get(getattr(obj, "__name__", ""))
            if check is not None:
                try:
                    check(owner, *args, **kwargs)
                except TypeError:
                    pass  # wrong arguments: let the real call raise its own error
        return _check_result(super().call(context, obj, *args, **kwargs))


def _check_power(base: Any, exp: Any) -> None:
    if isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1:
        bits = exp * math.log2(abs(base))
        limit = _budget().limits.max_int_bits
        if bits > limit:
            raise ChatTemplateNumberError(bits, limit)


ENV = ChatSandbox()
"""The one environment every chat template compiles in (stateless between renders)."""


# What parsing or compiling a template raises besides Jinja's own syntax errors, every one caused
# by the template's text: parser or compiler recursion, Python's static nesting limits (SyntaxError
# "too many statically nested blocks", IndentationError), memory, an integer literal too long to
# convert (ValueError).
COMPILE_FAILURES = (jinja2.TemplateSyntaxError, RecursionError, SyntaxError, MemoryError, ValueError, OverflowError)


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Compile a chat template (cached by its text), with loop and concatenation guards."""
    try:
        # A tree of its own: the rewrite works in place, and parse_template's copies are shared.
        ast = _InsertGuards().visit(ENV.parse(source))
        ast.set_environment(ENV)
        return ENV.from_string(ast)
    except COMPILE_FAILURES as e:  # TemplateAssertionError too: unknown filter or test
        raise compile_error(e) from None


@lru_cache(maxsize=64)
def parse_template(source: str) -> nodes.Template:
    """The template's untransformed Jinja AST (for variable and content-format analysis; read only)."""
    try:
        return ENV.parse(source)
    except COMPILE_FAILURES as e:
        raise compile_error(e) from None


_DIGIT_COUNT = re.compile(r"value has (\d+) digits")


def compile_error(e: BaseException) -> ChatTemplateSyntaxError:
    """The named error for a template that fails to parse or compile (one of
    ``COMPILE_FAILURES``); the failure's frames (a deep parser recursion) are released."""
    release_traceback(e)
    if isinstance(e, ChatTemplateSyntaxError):  # already named (parse_template's, seen again)
        return e
    if isinstance(e, jinja2.TemplateSyntaxError):
        # Jinja's own message, as vLLM returns it (no location: jinja leaves it out of compile errors).
        return ChatTemplateSyntaxError(e.message or str(e))
    if isinstance(e, RecursionError):
        return ChatTemplateNestingError()
    if isinstance(e, SyntaxError):
        return ChatTemplateBlocksError(e.msg)
    if isinstance(e, MemoryError):
        return ChatTemplateTooLargeError()
    digits = _DIGIT_COUNT.search(str(e))
    if digits is not None:
        return ChatTemplateLiteralError(digits.group(1), sys.get_int_max_str_digits())
    return ChatTemplateCompileError(e)
