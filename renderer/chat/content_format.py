"""Which message-content shape a chat template expects: plain strings or OpenAI content parts.

"auto" follows vLLM: parse the template and look for a loop over a message's content
(``{% for part in message['content'] %}``), following the variables that messages and message
items are assigned to. Such a template takes OpenAI parts ("openai"); any other takes one string
per message ("string"), with text parts joined by newlines.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import Iterator

import jinja2.nodes as nodes

from ..errors import ChatTemplateError
from .sandbox import parse_template

CONTENT_FORMATS = ("auto", "string", "openai")
"""Values of ``chat_template_content_format``."""


def resolve_content_format(given: str, chat_template: str) -> str:
    """``given`` unless it is "auto"; then what the template's AST implies."""
    return given if given != "auto" else detect_content_format(chat_template)


@lru_cache(maxsize=64)
def detect_content_format(chat_template: str) -> str:
    """ "openai" if the template loops over message content parts, else "string"."""
    try:
        ast = parse_template(chat_template)
    except ChatTemplateError:
        return "string"  # vLLM's default when the template cannot be parsed
    return "openai" if next(_content_item_loops(ast), None) is not None else "string"


def _is_var(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name


def _is_attr(node: nodes.Node, name: str, key: str) -> bool:
    if isinstance(node, nodes.Getitem):
        return _is_var(node.node, name) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


def _is_var_or_elems(node: nodes.Node, name: str, key: str | None = None) -> bool:
    """``name`` (or ``name[key]``), possibly through filters, tests or slices."""
    if isinstance(node, nodes.Filter):
        return node.node is not None and _is_var_or_elems(node.node, name, key)
    if isinstance(node, nodes.Test):
        return _is_var_or_elems(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _is_var_or_elems(node.node, name, key)
    return _is_attr(node, name, key) if key else _is_var(node, name)


def _aliases(root: nodes.Node, name: str) -> Iterator[str]:
    """``name`` and every variable assigned from it (``{% set msgs = messages[1:] %}``), transitively."""
    yield name
    seen = {name}
    pending = deque([name])
    while pending:
        current = pending.popleft()
        for assign in root.find_all(nodes.Assign):
            target = assign.target
            if isinstance(target, nodes.Name) and _is_var_or_elems(assign.node, current):
                yield target.name
                if target.name not in seen:
                    seen.add(target.name)
                    pending.append(target.name)


def _loop_targets(root: nodes.Node, names: list[str], key: str | None) -> Iterator[str]:
    for loop in root.find_all(nodes.For):
        if isinstance(loop.target, nodes.Name) and any(_is_var_or_elems(loop.iter, n, key) for n in names):
            yield loop.target.name


def _content_item_loops(root: nodes.Node) -> Iterator[str]:
    # A CFG would track scopes properly; like vLLM, name matching is close enough in practice.
    message_names = list(_loop_targets(root, list(_aliases(root, "messages")), None))
    return _loop_targets(root, message_names, "content")
