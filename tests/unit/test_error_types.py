"""Every named error type can be raised and renders a message: the renderer's (``renderer/errors/``)
and the OpenAI front's own (``openai_front/errors.py``). Arguments are made from each constructor's
annotations, so a new type with a constructor this cannot fill fails here, not at its first raise."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest

import openai_front.errors as front_errors
import renderer.errors as render_errors
from renderer.errors import RenderError


def _types() -> list[type[Exception]]:
    found: dict[str, type[Exception]] = {}
    for module in (render_errors, front_errors):
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = obj
    return [found[k] for k in sorted(found)]


SAMPLES: dict[Any, Any] = {str: "sample", int: 3, float: 1.5, bool: True, object: "v"}


def _sample(annotation: Any) -> Any:
    """A value of an annotation as the constructors use them (strings under ``from __future__``)."""
    hint = annotation
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        (inner, *_) = typing.get_args(hint) or (str,)
        return [_sample(inner)]
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return _sample(next(a for a in typing.get_args(hint) if a is not type(None)))
    if inspect.isclass(hint) and issubclass(hint, RenderError):
        return RenderError("the cause")
    return SAMPLES.get(hint, "v")


def _made(cls: type[Exception]) -> Exception:
    hints = typing.get_type_hints(cls.__init__)  # in the module that defines that __init__
    kwargs = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        kwargs[name] = _sample(hints.get(name, object))
    return cls(**kwargs)


@pytest.mark.parametrize("cls", _types(), ids=lambda c: c.__name__)
def test_every_error_type_is_raised_with_a_message_and_says_what_it_is(cls: type[Exception]) -> None:
    assert cls.__doc__ and cls.__doc__.strip(), f"{cls.__name__} says nowhere what it is"
    with pytest.raises(cls) as raised:
        raise _made(cls)
    if issubclass(cls, RenderError) and cls.__init__ is not RenderError.__init__:
        assert str(raised.value).strip(), f"{cls.__name__} writes an empty message"
