"""The thinking split of DeepSeek-R1 and Qwen3: ``<think>...</think>`` then the answer.

Held to vLLM 0.32's ``deepseek_r1`` and ``qwen3`` reasoning parsers. Both treat an output that
never opens the thinking as thinking until ``</think>`` (their templates open it in the prompt),
and an unclosed one as all thinking. Whole outputs: DeepSeek-R1 keeps a second ``</think>`` in the
content, Qwen3 drops it (and any ``<think>`` inside the thinking). Streamed, both decide by the
markers' token ids: a step that is only a marker sends nothing, the step holding ``</think>`` sends
the thinking before it and the content after it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import ReasoningParser
from .types import Delta


class DeepSeekR1ReasoningParser(ReasoningParser):
    """vLLM's "deepseek_r1"."""

    name = "deepseek_r1"

    def extract(self, text: str) -> tuple[str | None, str | None]:
        before, opened, after = text.partition(self.start)
        text = after if opened else before
        if self.end not in text:
            return text, None
        reasoning, _, content = text.partition(self.end)
        return reasoning, content or None

    def stream(self, previous_ids: Sequence[int], delta_text: str, delta_ids: Sequence[int]) -> Delta | None:
        if len(delta_ids) == 1 and delta_ids[0] in (self.start_id, self.end_id):
            return None  # a marker alone
        if self.start_id in previous_ids or self.start_id in delta_ids:
            return self._after_start(previous_ids, delta_text, delta_ids)
        # Never opened here (the prompt opened it): thinking until the end marker.
        if self.end_id in delta_ids:
            return self._split(delta_text)
        if self.end_id in previous_ids:
            return Delta(content=delta_text)
        return Delta(reasoning=delta_text)

    def _after_start(self, previous_ids: Sequence[int], delta_text: str, delta_ids: Sequence[int]) -> Delta:
        if self.start_id in previous_ids:
            if self.end_id in delta_ids:
                return self._split(delta_text)
            if self.end_id in previous_ids:
                return Delta(content=delta_text)
            return Delta(reasoning=delta_text)
        if self.end_id in delta_ids:  # opened and closed in this step
            opened = delta_text.find(self.start) + len(self.start)
            closed = delta_text.find(self.end)
            content = delta_text[closed + len(self.end) :]
            return Delta(reasoning=delta_text[opened:closed], content=content or None)
        return Delta(reasoning=delta_text)

    def _split(self, delta_text: str) -> Delta:
        closed = delta_text.find(self.end)
        content = delta_text[closed + len(self.end) :]
        return Delta(reasoning=delta_text[:closed], content=content or None)


class Qwen3ReasoningParser(DeepSeekR1ReasoningParser):
    """vLLM's "qwen3" (thinking on, its template's default)."""

    name = "qwen3"

    def extract(self, text: str) -> tuple[str | None, str | None]:
        thinking, closed, rest = text.partition(self.end)
        reasoning = thinking.replace(self.start, "") or None  # vLLM's qwen3 sends no empty thinking
        if not closed:
            return reasoning, None
        # Qwen3 may repeat </think> after closing its thinking: vLLM drops the repeats.
        return reasoning, rest.replace(self.end, "") or None
