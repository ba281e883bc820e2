"""Which tokenizer ``pdtrt bench`` measures lengths with, and why.

Lengths are exact only in the deployment's own tokens, so the benchmark looks for the tokenizer
the served preprocessing model loads, in this order: ``--tokenizer DIR``; the spec's tokenizer
(``--spec``) when it is a directory on this machine; the one the server itself names -- the
``tokenizer_dir`` parameter of the benchmarked model or of a step of its ensemble, read
through Triton's model-configuration API -- when that path exists here too (a deployment
served from this machine). Otherwise prompts are ``--isl`` words and the choice carries a
one-line note saying that lengths are approximate and why. This module decides; it does not
print.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from pdtrt.bench.prompts import TokenizerPrompts
from pdtrt.errors import PdtrtError

if TYPE_CHECKING:
    from pdtrt.blueprint.deployment import Deployment
    from pdtrt.client import LLMClient

__all__ = ["TOKENIZER_PARAMETER", "TokenizerChoice", "TokenizerOrigin", "choose_tokenizer",
           "served_tokenizer_dir"]

# The preprocessing model's parameter naming its tokenizer directory (NVIDIA's ensemble
# preprocessing model and pdtrt's generated one both call it this).
TOKENIZER_PARAMETER = "tokenizer_dir"


class TokenizerOrigin(StrEnum):
    OPTION = "option"  # --tokenizer DIR
    SPEC = "spec"  # the spec's tokenizer, found on this machine
    SERVER = "server"  # the served preprocessing model's tokenizer_dir, found on this machine
    NONE = "none"  # no tokenizer: lengths in words


@dataclass(frozen=True, kw_only=True)
class TokenizerChoice:
    prompts: TokenizerPrompts | None
    origin: TokenizerOrigin
    note: str | None = None  # why lengths are approximate (origin NONE)

    def to_dict(self) -> dict[str, object]:
        return {"origin": str(self.origin),
                "path": None if self.prompts is None else self.prompts.source,
                "note": self.note}


def _spec_tokenizer_dir(deployment: Deployment) -> Path:
    from pdtrt.blueprint.manifest import DEFAULT_ENGINES_ROOT, EngineLayout
    from pdtrt.repo.plan import tokenizer_dir_of

    return Path(tokenizer_dir_of(deployment, EngineLayout(DEFAULT_ENGINES_ROOT,
                                                          deployment.spec.name)))


def served_tokenizer_dir(client: LLMClient, model: str) -> str | None:
    """The ``tokenizer_dir`` that ``model`` (or the first step of its ensemble that has one)
    declares on the server, or None. Raises the client's errors for the model itself."""
    signature = client.check(model)
    if signature.parameters.get(TOKENIZER_PARAMETER):
        return signature.parameters[TOKENIZER_PARAMETER]
    for step in signature.steps:
        try:
            value = client.check(step).parameters.get(TOKENIZER_PARAMETER)
        except PdtrtError:  # a step that is not ready says nothing about the tokenizer
            continue
        if value:
            return value
    return None


def choose_tokenizer(client: LLMClient, models: Sequence[str], *,
                     tokenizer_dir: Path | None = None,
                     deployment: Deployment | None = None) -> TokenizerChoice:
    """The tokenizer to build and count prompts with (see the module docstring)."""
    if tokenizer_dir is not None:
        return TokenizerChoice(prompts=TokenizerPrompts.load(tokenizer_dir),
                               origin=TokenizerOrigin.OPTION)
    if deployment is not None:
        path = _spec_tokenizer_dir(deployment)
        if path.is_dir():
            return TokenizerChoice(prompts=TokenizerPrompts.load(path),
                                   origin=TokenizerOrigin.SPEC)
    served = next((d for d in (served_tokenizer_dir(client, m) for m in models) if d), None)
    if served is not None and Path(served).is_dir():
        return TokenizerChoice(prompts=TokenizerPrompts.load(Path(served)),
                               origin=TokenizerOrigin.SERVER)
    if served is not None:
        why = f"the server's tokenizer {served} is not on this machine"
    else:
        why = f"the server names no {TOKENIZER_PARAMETER} for {', '.join(models)}"
    return TokenizerChoice(
        prompts=None, origin=TokenizerOrigin.NONE,
        note=f"input lengths are approximate (words, not tokens): {why}; "
        "pass --tokenizer DIR with a copy of the deployment's tokenizer")
