"""The plain-chat lane: a chat of plain messages under the default ``chat_params``, rendered in one
walk over its messages.

Most chats are a list of messages that are each a role (system, user or assistant), a string
content and maybe a string name, sent with no ``chat_params``. For those, every step of
``ChatRenderer.render_messages`` but three has the same outcome on every request: the validation
rebuilds each message as it came, the tool choice is "none", the trust and kwargs checks pass, the
content format, the template, its kwargs and the output parsing are the model's defaults. The
lane takes those from one run of the full path at start-up (``PlainLane.build``) and does per
request only what depends on the messages: one walk that checks each message is plain and builds
what the parse would (``plain_conversation``), and the compiled template's render.

A chat the lane does not take (any other role, key or type, tools, a ``chat_params`` bag, a
template that needs the "openai" content format or renders in Jinja), or whose render minijinja
declines, takes the full path. ``tests/unit/test_lane_equivalence.py`` holds the lane equal to the full
path on every recorded chat and on generated chats near its boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .messages import plain_message
from .shape import valid_utf8

if TYPE_CHECKING:
    from ..output_parsers.request import OutputParsing
    from .compiled_template import CompiledChatTemplate

# The roles whose plain message validates, parses and reaches the template unchanged (a developer
# message gains ``tools`` and may become a system one: the full path).
_ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True)
class PlainLane:
    """What the full path decides once for every plain chat under the default ``chat_params``."""

    compiled: CompiledChatTemplate
    """The model's template on minijinja (its load-time probe passed)."""

    add_generation_prompt: bool
    """The default kwargs' ``add_generation_prompt`` (no other kwarg reaches the template)."""

    output_parsing: OutputParsing
    """What ``detokenize`` reads from the output of a chat with no tools (tool choice "none")."""

    def render(self, messages: Any) -> tuple[str, list[dict[str, str]]] | None:
        """The prompt and conversation of a plain chat; None when the full path must render it."""
        conversation = plain_conversation(messages)
        if conversation is None:
            return None
        prompt = self.compiled.render(conversation, self.add_generation_prompt)
        return None if prompt is None else (prompt, conversation)


def plain_conversation(messages: Any) -> list[dict[str, str]] | None:
    """The parsed conversation of a non-empty list of plain messages, exactly as validation and the
    "string" format's parse build it (``messages.plain_message``: ``role``, ``content``, then
    ``name`` when sent); None for anything else. Each string must be valid UTF-8 as minijinja
    receives it (``is_plain``)."""
    if type(messages) is not list or not messages:
        return None
    conversation = []
    for msg in messages:
        parsed = plain_message(msg, "string")
        if parsed is None or parsed["role"] not in _ROLES or not valid_utf8(parsed["content"]):
            return None
        if "name" in parsed and not valid_utf8(parsed["name"]):
            return None
        conversation.append(parsed)
    return conversation
