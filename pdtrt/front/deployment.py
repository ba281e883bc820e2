"""The served deployment as the front sees it: from the repository's ``pdtrt-repo.json``, the
model names a request may use, the token-level model the front calls (the ``router``, or
``aggregated`` when the repository has no router) and the context window a request must fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pdtrt.engine_io import ModelName
from pdtrt.errors import ApiError, ServerError

__all__ = ["ServedDeployment"]

_MANIFEST = "pdtrt-repo.json"


@dataclass(frozen=True, kw_only=True)
class ServedDeployment:
    """The served deployment as the front sees it (from ``pdtrt-repo.json``)."""

    name: str  # the deployment's name
    model_id: str  # what /v1/models lists and requests name (the spec's model name)
    engine_model: str  # the token-level Triton model the front calls
    tokenizer_dir: Path
    max_seq_len: int  # prompt + output tokens, the smallest of the served phases
    max_input_len: int

    @property
    def names(self) -> tuple[str, ...]:
        """The model names a request may use (the model's and the deployment's)."""
        return (self.model_id, self.name)

    @classmethod
    def from_repository(cls, repository: Path) -> ServedDeployment:
        """Raises :class:`ServerError` for a repository pdtrt did not generate or with neither
        a router nor an aggregated model."""
        path = repository / _MANIFEST
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ServerError(f"cannot read {path}: {exc}", hint="the OpenAI front serves "
                              "repositories that `pdtrt repo` / `pdtrt serve SPEC` generated"
                              ) from None
        models = manifest.get("models", [])
        engine_model = next((m for m in (ModelName.ROUTER, ModelName.AGGREGATED)
                             if m in models), None)
        if engine_model is None or not manifest.get("tokenizer_dir"):
            raise ServerError(f"{repository} has no router or aggregated model with a tokenizer"
                              f" (models: {', '.join(models) or 'none'})",
                              hint="serve the front beside a repository of mode both, "
                              "disaggregated or aggregated")
        limits = manifest.get("limits", {}).values()
        spec = manifest.get("spec", {})
        return cls(name=manifest.get("deployment", repository.name),
                   model_id=spec.get("model", {}).get("name") or repository.name,
                   engine_model=str(engine_model), tokenizer_dir=Path(manifest["tokenizer_dir"]),
                   max_seq_len=min((int(x["max_seq_len"]) for x in limits), default=2048),
                   max_input_len=min((int(x["max_input_len"]) for x in limits), default=2048))

    def output_budget(self, num_prompt: int, max_tokens: int | None) -> int:
        """How many tokens the request may generate; raises :class:`ApiError` when the prompt
        does not fit or ``max_tokens`` overruns the context window."""
        if num_prompt > self.max_input_len or num_prompt >= self.max_seq_len:
            raise ApiError(f"the prompt has {num_prompt} tokens; this deployment takes at most "
                           f"{min(self.max_input_len, self.max_seq_len - 1)}",
                           param="messages", code="context_length_exceeded")
        room = self.max_seq_len - num_prompt
        if max_tokens is None:
            return room
        if max_tokens > room:
            raise ApiError(f"max_tokens is {max_tokens}, but the context window of "
                           f"{self.max_seq_len} tokens leaves {room} after the {num_prompt}-token "
                           "prompt", param="max_tokens", code="context_length_exceeded")
        return max_tokens
