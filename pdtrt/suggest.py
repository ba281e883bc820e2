""""Did you mean ...?" suggestions for unknown names (spec keys, GPU names, enum values)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``' (did you mean 'x'?)'`` for the closest choice, or ``''`` when none is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{matches[0]}'?)" if matches else ""
