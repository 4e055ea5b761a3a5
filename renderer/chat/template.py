"""Where a model's chat template comes from, and which one a request uses.

A model folder is read directly (no tokenizer load), the way transformers 5 loads it:

* tokenizer: ``chat_template.jinja`` plus ``additional_chat_templates/*.jinja`` (named templates),
  else ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of ``{name, template}``);
* processor (only when the folder has a processor, i.e. ``processor_config.json`` or
  ``preprocessor_config.json``): ``processor_config.json``'s ``chat_template``, else the legacy
  ``chat_template.json``, else ``chat_template.jinja``;
* special tokens (``bos_token``, ``eos_token``, ...) from ``tokenizer_config.json``, then the legacy
  ``special_tokens_map.json``; templates see them as variables.

Resolution follows vLLM: the request's template (or the name of one of the tokenizer's named
templates), then the processor's unless the request has tools, then the tokenizer's (its
``tool_use`` template when tools are given, else ``default``); none is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ChatTemplateResolutionError
from ..model_info import read_json_object

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""transformers' named special tokens: the ones ``special_tokens_map`` hands to templates."""


@dataclass(frozen=True)
class ChatTemplateSource:
    """The chat templates and special tokens a model provides."""

    tokenizer_template: str | Mapping[str, str] | None = None
    """The tokenizer's template, or its named templates (``default``, ``tool_use``, ...)."""

    processor_template: str | None = None
    """The multimodal processor's template, if the model has a processor that defines one."""

    special_tokens: Mapping[str, str] = field(default_factory=dict)
    """Named special tokens as template variables, e.g. ``{"bos_token": "<s>"}``."""

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> "ChatTemplateSource":
        d = Path(model_dir)
        config = read_json_object(d / "tokenizer_config.json")
        return cls(
            tokenizer_template=_tokenizer_template(d, config),
            processor_template=_processor_template(d),
            special_tokens=_special_tokens(config, read_json_object(d / "special_tokens_map.json")),
        )


def resolve_chat_template(source: ChatTemplateSource, request_template: str | None, tools: list[Any] | None) -> str:
    """The template text a request renders with."""
    named = source.tokenizer_template if isinstance(source.tokenizer_template, Mapping) else None
    if request_template is not None:
        if named is not None and request_template in named:
            return named[request_template]
        return request_template
    if tools is None and source.processor_template is not None:
        return source.processor_template
    if isinstance(source.tokenizer_template, str):
        return source.tokenizer_template
    if named is not None:
        if tools is not None and "tool_use" in named:
            return named["tool_use"]
        if "default" in named:
            return named["default"]
    raise ChatTemplateResolutionError()


def _tokenizer_template(d: Path, config: Mapping[str, Any]) -> str | dict[str, str] | None:
    # Template files take priority over the config entry (transformers 5).
    templates: dict[str, str] = {}
    if (d / "chat_template.jinja").is_file():
        templates["default"] = (d / "chat_template.jinja").read_text(encoding="utf-8")
    extra_dir = d / "additional_chat_templates"
    if extra_dir.is_dir():
        for f in sorted(extra_dir.glob("*.jinja")):
            templates[f.name.removesuffix(".jinja")] = f.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    entry = config.get("chat_template")
    if isinstance(entry, list):
        return {t["name"]: t["template"] for t in entry}
    return entry if isinstance(entry, str) else None


def _processor_template(d: Path) -> str | None:
    if not ((d / "processor_config.json").is_file() or (d / "preprocessor_config.json").is_file()):
        return None
    entry = read_json_object(d / "processor_config.json").get("chat_template")
    if entry is None:
        entry = read_json_object(d / "chat_template.json").get("chat_template")
    if entry is None and (d / "chat_template.jinja").is_file():
        entry = (d / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(entry, Mapping):
        entry = entry.get("default")
    return entry if isinstance(entry, str) else None


def _special_tokens(config: Mapping[str, Any], legacy: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name, legacy.get(name))
        if isinstance(value, Mapping):  # a serialized AddedToken
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out
