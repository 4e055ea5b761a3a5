"""How a setting spells true, for environment variables and model-config parameters alike."""

from __future__ import annotations

TRUE_SPELLINGS = frozenset({"1", "true", "yes", "on"})


def parse_flag(text: str) -> bool:
    """True for "1", "true", "yes" or "on" (any case, surrounding space ignored)."""
    return text.strip().lower() in TRUE_SPELLINGS
