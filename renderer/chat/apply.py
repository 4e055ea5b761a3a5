"""transformers' ``apply_chat_template(..., tokenize=False)``, re-done in the bounded sandbox.

Same inputs to the template, in the same order: messages with null-valued keys dropped and the
reasoning fields aliased (``thinking``/``reasoning_content``), ``tools``, ``documents``,
``add_generation_prompt``, the special tokens, then the request's template kwargs. Same
``continue_final_message`` trick: a tag is appended to the final message's text, the template is
rendered, and the text is cut at the tag. Same errors, as named ``RenderError`` types.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, Mapping

import jinja2
import jinja2.meta

from ..errors import (
    ChatTemplateLimitError,
    ChatTemplateRenderError,
    ChatTemplateSecurityError,
    ChatTemplateSyntaxError,
    ContinueFinalMessageError,
    InvalidParamsError,
    RenderError,
)
from .params import HF_CONFLICT_MESSAGE, UNEXPECTED_KWARGS
from .sandbox import TemplateLimits, compile_template, parse_template, render_text

# Parameters of transformers 5's ``apply_chat_template``: vLLM lets them through the kwargs filter
# even when the template does not use them. Only tools, documents, add_generation_prompt and
# continue_final_message mean anything when rendering text; the rest steer tokenization.
HF_APPLY_PARAMS = frozenset({
    "conversation", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "sanitize_control_tokens", "padding", "truncation",
    "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
})

# Names a message's reasoning is passed under; templates read the first.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


@lru_cache(maxsize=64)
def template_variables(chat_template: str) -> frozenset[str]:
    """Variables the template reads from its context."""
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(parse_template(chat_template)))
    except jinja2.TemplateSyntaxError as e:  # an unknown filter or test fails this analysis
        raise ChatTemplateSyntaxError(f"Invalid chat template: {e.message} (line {e.lineno})") from None


def resolve_template_kwargs(chat_template: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the kwargs the template uses or transformers accepts (vLLM's filter)."""
    accept = (template_variables(chat_template) | HF_APPLY_PARAMS) - UNEXPECTED_KWARGS
    return {k: v for k, v in kwargs.items() if k in accept}


def apply_chat_template(
    chat_template: str,
    conversation: list[dict[str, Any]],
    *,
    special_tokens: Mapping[str, str],
    template_kwargs: Mapping[str, Any],
    tools: list[dict[str, Any]] | None = None,
    limits: TemplateLimits = TemplateLimits(),
) -> str:
    """Render ``conversation`` with ``chat_template`` exactly as transformers would.

    ``template_kwargs`` are the resolved kwargs: ``add_generation_prompt``,
    ``continue_final_message``, ``documents`` and ``tools`` are taken out as transformers takes
    its parameters; its other parameters are dropped; everything else becomes a template variable.
    """
    kwargs = dict(template_kwargs)
    add_generation_prompt = bool(kwargs.pop("add_generation_prompt", False))
    continue_final = kwargs.pop("continue_final_message", False)
    documents = kwargs.pop("documents", None)
    kw_tools = kwargs.pop("tools", None)
    if tools is None:
        tools = kw_tools
    for name in HF_APPLY_PARAMS:
        kwargs.pop(name, None)
    if "messages" in kwargs:
        raise InvalidParamsError("chat_template_kwargs cannot set 'messages': it is the conversation itself.")
    if continue_final and add_generation_prompt:
        raise ContinueFinalMessageError(HF_CONFLICT_MESSAGE)
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise InvalidParamsError("Documents should be a list of dicts with 'title' and 'text' keys!")

    chat = _alias_reasoning([{k: v for k, v in m.items() if v is not None} for m in conversation])
    final_text: str | None = None
    if continue_final:
        chat, final_text = _tag_final_message(chat, chat_template, continue_final)

    template = compile_template(chat_template)
    context = {
        "messages": chat, "tools": copy.deepcopy(tools), "documents": copy.deepcopy(documents),
        "add_generation_prompt": add_generation_prompt, **special_tokens, **copy.deepcopy(kwargs),
    }
    text = _render(template, context, limits)
    if final_text is not None:
        text = _cut_at_tag(text, final_text)
    return text


def _render(template: jinja2.Template, context: dict[str, Any], limits: TemplateLimits) -> str:
    try:
        return render_text(template, context, limits)
    except RenderError:
        raise
    except jinja2.exceptions.SecurityError as e:
        raise ChatTemplateSecurityError(str(e)) from None
    except jinja2.exceptions.TemplateError as e:
        # raise_exception() lands here; its message is the template's own, passed on verbatim.
        raise ChatTemplateRenderError(str(e)) from None
    except RecursionError:
        raise ChatTemplateLimitError("Chat template recursion is too deep.") from None
    except MemoryError:
        raise ChatTemplateLimitError("Chat template ran out of memory.") from None
    except Exception as e:  # noqa: BLE001 (the template's own Python errors: TypeError, KeyError, ...)
        raise ChatTemplateRenderError(f"{type(e).__name__}: {e}") from None


def _alias_reasoning(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in chat:
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _tag_final_message(chat: list[dict[str, Any]], chat_template: str,
                       field: bool | str) -> tuple[list[dict[str, Any]], str]:
    """Append the continue tag to the final message's text (a copy); returns (chat, final text)."""
    if not chat:
        raise ContinueFinalMessageError("continue_final_message is set but the conversation is empty!")
    key = field if isinstance(field, str) else "content"
    final = chat[-1].get(key)
    if final is None:
        raise ContinueFinalMessageError(
            f'continue_final_message is set but the final message has no "{key}" to continue!'
        )
    fields = [key]
    if key in REASONING_FIELDS:
        fields = [f for f in REASONING_FIELDS if chat[-1].get(f) == final]
    if not any(f in chat_template for f in fields):
        raise ContinueFinalMessageError(
            f'continue_final_message is set to "{key}" but this is not an accepted field in the chat_template'
        )
    last = copy.deepcopy(chat[-1])
    if isinstance(final, (list, tuple)):
        for block in reversed(last[key]):
            if "text" in block:
                final = block["text"]
                block["text"] = block["text"] + CONTINUE_TAG
                break
        else:
            raise ContinueFinalMessageError(
                "continue_final_message is set but we could not find any text to continue in the final message!"
            )
    else:
        for f in fields:
            last[f] = last[f] + CONTINUE_TAG
    return [*chat[:-1], last], final


def _cut_at_tag(text: str, final: str) -> str:
    tag = CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise ContinueFinalMessageError(
            "continue_final_message is set but the final message does not appear in the chat after "
            "applying the chat template! This can happen if the chat template deletes portions of "
            "the final message. Please verify the chat template and final message in your chat to "
            "ensure they are compatible."
            f"Final message to continue: {final.strip()}\nRendered chat:\n{text}"
        )
    at = text.rindex(tag)
    if text[at: at + len(CONTINUE_TAG)] == CONTINUE_TAG:
        return text[:at]
    # The template trimmed the message's trailing space: cut more cautiously.
    return text[:at].rstrip()
