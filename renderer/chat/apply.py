"""transformers' ``apply_chat_template(..., tokenize=False)``, re-done in the bounded sandbox.

The transformers vLLM 0.32 runs with (``transformers<5.20``): the messages exactly as parsed (no
keys dropped, no reasoning aliases added), ``tools``, ``documents``, ``add_generation_prompt``, the
special tokens, then the request's template kwargs. Same ``continue_final_message`` trick: a tag is
appended to the final message's text, the template is rendered, and the text is cut at the tag.
Same errors, as named ``RenderError`` types; an error the template raises carries the template's
own message, as vLLM passes it on.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import jinja2
import jinja2.meta

from ..errors import (
    AssistantTokensMaskError,
    ChatTemplateRecursionError,
    ChatTemplateRenderError,
    ChatTemplateResourceError,
    ChatTemplateSecurityError,
    ChatTemplateSyntaxError,
    ContinueFieldNotInTemplateError,
    ContinueWithGenerationPromptError,
    DocumentsError,
    EmptyConversationError,
    FinalMessageFieldError,
    FinalMessageNotRenderedError,
    FinalMessageTypeError,
    NoTextToContinueError,
    RenderError,
    TemplateCallArgumentError,
)
from ..json_fields import json_copy
from .params import TEMPLATE_CHOICE_KWARGS
from .sandbox import COMPILE_FAILURES, TemplateLimits, compile_error, compile_template, parse_template, render_text

# Parameters of transformers' ``apply_chat_template`` (5.19, vLLM 0.32's): vLLM lets them through
# the kwargs filter even when the template does not use them. Only tools, documents,
# add_generation_prompt and continue_final_message mean anything when rendering text; the rest
# steer tokenization, except the two that collide with what the renderer passes itself.
HF_APPLY_PARAMS = frozenset(
    {
        "self",
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
# Kwargs that pass vLLM's filter but collide with what vLLM passes itself: Python refuses the call,
# and vLLM answers with Python's words (naming its own functions).
# Each maps to the function Python names and whether it calls the name a keyword argument.
COLLIDING_KWARGS = {
    "self": ("maybe_make_thread_pool.<locals>.TokenizerPool.apply_chat_template", False),
    "messages": ("jinja2.environment.Template.render", True),
}


@lru_cache(maxsize=64)
def template_variables(chat_template: str) -> frozenset[str]:
    """Variables the template reads from its context."""
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(parse_template(chat_template)))
    except jinja2.TemplateSyntaxError as e:
        # An unknown filter or test fails this analysis; vLLM answers with jinja's text, which
        # names the analysis ("<introspection>") as the file.
        raise ChatTemplateSyntaxError(str(e)) from None
    except COMPILE_FAILURES as e:  # the analysis recursing too deep, Python's nesting limits: a named 400
        raise compile_error(e) from None


def resolve_template_kwargs(chat_template: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the kwargs the template uses or transformers accepts (vLLM's filter). ``chat_template``
    and ``tokenize`` never reach the template: the renderer has consumed them."""
    accept = (template_variables(chat_template) | HF_APPLY_PARAMS) - TEMPLATE_CHOICE_KWARGS
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
    ``continue_final_message`` and ``documents`` are taken out as transformers takes its
    parameters; its other parameters are dropped; everything else becomes a template variable.
    """
    kwargs = dict(template_kwargs)
    for name, (function, keyword) in COLLIDING_KWARGS.items():
        if name in kwargs:
            raise TemplateCallArgumentError(function, name, keyword=keyword)
    add_generation_prompt = bool(kwargs.pop("add_generation_prompt", False))
    continue_final = kwargs.pop("continue_final_message", False)
    documents = kwargs.pop("documents", None)
    if kwargs.get("return_assistant_tokens_mask"):
        # vLLM renders with return_dict=False, which transformers refuses alongside this.
        raise AssistantTokensMaskError()
    for name in HF_APPLY_PARAMS:
        kwargs.pop(name, None)
    if not conversation:
        raise EmptyConversationError()
    if continue_final and add_generation_prompt:
        raise ContinueWithGenerationPromptError()
    if documents is not None:
        _check_documents(documents)

    chat = conversation
    final_text: str | None = None
    if continue_final:
        try:
            chat, final_text = _tag_final_message(json_copy(chat), chat_template, continue_final)
        except TypeError as e:  # a final text that is not a string: vLLM answers with Python's words
            raise FinalMessageTypeError(str(e)) from None

    template = compile_template(chat_template)
    context = {
        "messages": chat,
        "tools": json_copy(tools),
        "documents": json_copy(documents),
        "add_generation_prompt": add_generation_prompt,
        **special_tokens,
        **json_copy(kwargs),
    }
    text = _render(template, context, limits)
    if final_text is not None:
        text = _cut_at_tag(text, final_text)
    return text


def _check_documents(documents: Any) -> None:
    """transformers' check (documents from the kwargs arrive unvalidated); a non-iterable fails
    with Python's words, as in vLLM."""
    try:
        items = iter(documents)
    except TypeError as e:
        raise DocumentsError(str(e)) from None
    if not all(isinstance(d, dict) for d in items):
        raise DocumentsError()


def _render(template: jinja2.Template, context: dict[str, Any], limits: TemplateLimits) -> str:
    # vLLM answers a template that fails with the template's own message (the jinja error's text,
    # or the Python error's) and nothing else.
    try:
        return render_text(template, context, limits)
    except RenderError:
        raise
    except jinja2.exceptions.SecurityError as e:
        raise ChatTemplateSecurityError(str(e)) from None
    except jinja2.exceptions.TemplateError as e:
        raise ChatTemplateRenderError(str(e)) from None
    except RecursionError:
        raise ChatTemplateRecursionError() from None
    except MemoryError:
        # In a request template's worker this is its address-space cap (template_worker.py).
        raise ChatTemplateResourceError() from None
    except Exception as e:  # noqa: BLE001 (the template's own Python errors: TypeError, KeyError, ...)
        raise ChatTemplateRenderError(str(e)) from None


def _tag_final_message(
    chat: list[dict[str, Any]], chat_template: str, field: bool | str
) -> tuple[list[dict[str, Any]], str]:
    """Append the continue tag to the final message's text (``chat`` is a copy); returns
    (chat, final text)."""
    key = field if isinstance(field, str) else "content"
    final = chat[-1].get(key)
    if final is None:
        raise FinalMessageFieldError(key)
    if key not in chat_template:
        raise ContinueFieldNotInTemplateError(key)
    last = chat[-1]
    if isinstance(final, (list, tuple)):
        for block in reversed(last[key]):
            if "text" in block:
                final = block["text"]
                block["text"] = block["text"] + CONTINUE_TAG
                break
        else:
            raise NoTextToContinueError()
    else:
        last[key] = last[key] + CONTINUE_TAG
    return chat, final


def _cut_at_tag(text: str, final: str) -> str:
    tag = CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise FinalMessageNotRenderedError(final.strip(), text)
    at = text.rindex(tag)
    if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG:
        return text[:at]
    # The template trimmed the message's trailing space: cut more cautiously.
    return text[:at].rstrip()
