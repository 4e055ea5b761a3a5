"""vLLM's input renderer as a plain Python package (no Triton imports).

Heavy dependencies (transformers, torch) load lazily, on first use of what needs them.
"""

from .errors import RenderError
from .params import TokenizeParams
from .prompts import EngineInput, TextPrompt, TokenizedPrompt, TokensPrompt
from .renderer import Renderer, RendererConfig

__all__ = [
    "EngineInput",
    "RenderError",
    "Renderer",
    "RendererConfig",
    "TextPrompt",
    "TokenizeParams",
    "TokenizedPrompt",
    "TokensPrompt",
]
