"""Requests lost when a router's process dies, counted across the reload that heals it.

A stream in flight through a router whose Python-backend stub dies is never ended by Triton
2.51 (docs/design/serve.md), and the reloaded router cannot know how many there were. The dead
router's metrics can: Triton keeps a model's custom metric families until the model is
reloaded, so its ``pdtrt_router_requests_in_flight`` gauge still holds the count at its death.
``pdtrt serve``'s supervisor reads it before it reloads the router (:func:`in_flight`), adds
it to the total kept in the router's model directory (:func:`record_lost`), and the reloaded
router exports that total as ``pdtrt_router_lost_to_reload_total`` (:func:`read_lost`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

__all__ = ["IN_FLIGHT_METRIC", "LOST_FILE", "LOST_METRIC", "in_flight", "read_lost",
           "record_lost", "reset_lost"]

IN_FLIGHT_METRIC = "pdtrt_router_requests_in_flight"
LOST_METRIC = "pdtrt_router_lost_to_reload_total"
LOST_FILE = "lost_requests.json"  # in the router's model directory


def in_flight(metrics_text: str, model: str) -> int | None:
    """The router ``model``'s in-flight gauge in a Prometheus text page (None: absent)."""
    pattern = re.compile(rf'^{IN_FLIGHT_METRIC}\{{(?P<labels>[^}}]*)\}} (?P<value>\S+)$')
    for line in metrics_text.splitlines():
        if (m := pattern.match(line)) and f'model="{model}"' in m["labels"]:
            return int(float(m["value"]))
    return None


def read_lost(model_dir: Path) -> int:
    """The requests lost to reloads of the router in ``model_dir`` so far (0: none noted)."""
    try:
        return int(json.loads((model_dir / LOST_FILE).read_text())["lost"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def record_lost(model_dir: Path, count: int) -> int:
    """Add ``count`` to the total (written whole or not at all); returns the new total."""
    total = read_lost(model_dir) + count
    tmp = model_dir / f".{LOST_FILE}.tmp"
    tmp.write_text(json.dumps({"lost": total}) + "\n")
    os.replace(tmp, model_dir / LOST_FILE)
    return total


def reset_lost(model_dir: Path) -> None:
    """Forget a total a previous server left (a new supervisor counts from zero)."""
    (model_dir / LOST_FILE).unlink(missing_ok=True)
