"""The commented example specs pdtrt ships (``pdtrt spec init``; ``docs/examples/`` links them)."""

from __future__ import annotations

from importlib import resources

from pdtrt.errors import PdtrtError
from pdtrt.suggest import did_you_mean

__all__ = ["DEFAULT_EXAMPLE", "example_names", "example_text"]

# the seed scenario on the current stack (trtllm-1.2, NGC 26.07);
# llama3-8b-h100-l40s-trtllm-0.21 is the same deployment on the legacy trtllm-0.21 (NGC 25.08)
DEFAULT_EXAMPLE = "llama3-8b-h100-l40s"


def _dir():
    return resources.files("pdtrt").joinpath("data/specs")


def example_names() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in _dir().iterdir()
                  if p.name.endswith(".yaml"))


def example_text(name: str) -> str:
    names = example_names()
    if name not in names:
        raise PdtrtError(f"no example spec '{name}'{did_you_mean(name, names)}",
                         hint=f"examples: {', '.join(names)}")
    return _dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8")
