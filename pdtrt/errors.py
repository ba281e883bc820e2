"""The one exception tree of pdtrt.

Every *expected* failure -- a bad spec, an unknown GPU, a model that does not fit, an
unsupported architecture -- is a :class:`PdtrtError`. The CLI prints it as one line plus a hint
and exits with status 2; anything else is a bug and keeps its traceback.

::

    PdtrtError                    expected failure; ``message`` + optional ``hint``
    ├── SpecError                 the deployment spec is invalid (carries every ``SpecIssue``)
    ├── CatalogError              unknown GPU name, unreadable or invalid catalog / prices file
    ├── ModelConfigError          HF config.json missing, unreadable or incomplete
    │   └── UnsupportedModelError architecture pdtrt cannot model yet (e.g. MoE)
    ├── InfeasibleError           the request is well-formed but impossible (model does not fit)
    │   └── NoFeasiblePlanError   ``pdtrt plan`` found no configuration to write a spec for
    ├── ServerError               a Triton server could not be started, or a model failed to load
    ├── KVTransferError           a request's KV cache could not be moved between instances
    ├── InvalidRequestError       a served model refuses one request's input (inside Triton)
    ├── PhaseError                a prefill / decode / aggregated phase failed a router request
    ├── ApiError                  the OpenAI front refuses or fails one HTTP request (its
    │                             ``status`` and OpenAI error ``type``; :mod:`pdtrt.front`)
    ├── BuildError                an engine build cannot be planned or did not complete
    │   ├── BuildRejected         invalid flag / setting combination for the target (before any run)
    │   ├── GPUMismatchError      the local GPU cannot build the phase's engine (compute capability)
    │   └── ToolchainError        TensorRT-LLM tools or versions missing / different from the target
    ├── IncompatibleEnginesError  engines that cannot serve together (``pdtrt engines check``)
    ├── LLMApiMismatchError       the installed TensorRT-LLM LLM API lacks a field or option
    │                             pdtrt's engine model needs (checked at load; ``pdtrt doctor``)
    ├── RepoError                 a model repository cannot be generated (e.g. DIR exists)
    │   ├── RepoInvalidError      ``pdtrt repo validate`` found problems (carries every one)
    │   └── ConfigParseError      a ``config.pbtxt`` Triton's schema rejects (names the line)
    ├── UnsupportedTargetError    a target pdtrt names but has no support module registered for
    ├── DeployError               Kubernetes manifests cannot be generated as asked (no image,
    │   │                         a name Kubernetes refuses, DIR exists, bad options)
    │   └── DeployInvalidError    manifests failed ``pdtrt deploy`` validation (carries every one)
    ├── BenchError                a benchmark that cannot run as asked (no model, no bound)
    ├── WorkloadError             a workload that cannot be generated as described (lengths,
    │                             arrival process, trace file, SLO) -- bench, simulate, plan
    └── ClientError               talking to a running server failed (``pdtrt infer`` / ``bench``)
        ├── ServerUnavailableError    nothing answers at the URL, or it is not ready
        ├── ModelNotFoundError        the server has no such model, or it is not ready
        ├── RequestError              the server rejected or failed one request
        └── DrainTimeoutError         an endpoint still had work when ``pdtrt drain`` gave up

:class:`InvalidRequestError` and :class:`PhaseError` are raised inside Triton's Python backend
(:mod:`pdtrt.runtime`): each becomes the error response of the one request it concerns, and the
server keeps serving; a client sees that response as a :class:`RequestError`. Outside the tree on
purpose: :class:`pdtrt.runtime.faults.InjectedFault` stands in for an *unexpected* engine
failure (an XID, an out-of-memory), so it must not look like an expected pdtrt error to any handler;
:class:`pdtrt.repo.render.GeneratedConfigBug` is a ``config.pbtxt`` pdtrt itself rendered wrong,
a bug that must keep its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ApiError",
    "BenchError",
    "BuildError",
    "BuildRejected",
    "CatalogError",
    "ConfigParseError",
    "DeployError",
    "DeployInvalidError",
    "DrainTimeoutError",
    "ClientError",
    "GPUMismatchError",
    "IncompatibleEnginesError",
    "InfeasibleError",
    "InvalidRequestError",
    "KVTransferError",
    "LLMApiMismatchError",
    "ModelConfigError",
    "ModelNotFoundError",
    "NoFeasiblePlanError",
    "PdtrtError",
    "PhaseError",
    "RepoError",
    "RepoInvalidError",
    "RequestError",
    "ServerError",
    "ServerUnavailableError",
    "SpecError",
    "SpecIssue",
    "ToolchainError",
    "UnsupportedModelError",
    "UnsupportedTargetError",
    "WorkloadError",
]


class PdtrtError(Exception):
    """Base of every expected pdtrt failure.

    ``message`` says what is wrong and where; ``hint`` says how to fix it.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict[str, object]:
        return {"error": type(self).__name__, "message": self.message, "hint": self.hint}


class _Problems(PdtrtError):
    """A check of a whole artefact (a repository, a set of manifests) that found problems:
    ``problems`` lists every one, the message counts them under ``source``."""

    def __init__(self, problems: list[str], *, source: str, hint: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(f"{source}: {len(self.problems)} problem(s)\n" + "\n".join(
            f"  {p}" for p in self.problems), hint=hint)

    def to_dict(self) -> dict[str, object]:
        out = super().to_dict()
        out["problems"] = list(self.problems)
        return out


@dataclass(frozen=True, kw_only=True)
class SpecIssue:
    """One problem in a spec: the YAML path (``prefill.tp``), its line when known, and why."""

    path: str
    message: str
    line: int | None = None

    def render(self, source: str | None = None) -> str:
        where = source or "<spec>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.path or '<root>'}: {self.message}"


class SpecError(PdtrtError):
    """The deployment spec is invalid. ``issues`` lists every problem found, not just the first."""

    def __init__(
        self, issues: list[SpecIssue], *, source: str | None = None, hint: str | None = None
    ) -> None:
        self.issues = list(issues)
        self.source = source
        lines = [issue.render(source) for issue in self.issues]
        super().__init__("\n".join(lines), hint=hint)

    def to_dict(self) -> dict[str, object]:
        out = super().to_dict()
        out["issues"] = [
            {"path": i.path, "line": i.line, "message": i.message} for i in self.issues
        ]
        return out


class CatalogError(PdtrtError):
    """An unknown GPU name, or a catalog / prices file that cannot be used."""


class ModelConfigError(PdtrtError):
    """A Hugging Face ``config.json`` that is missing, unreadable or lacks required fields."""


class UnsupportedModelError(ModelConfigError):
    """An architecture pdtrt cannot model yet (mixture-of-experts, encoder-decoder, ...)."""


class InfeasibleError(PdtrtError):
    """A well-formed request that cannot be satisfied, e.g. a model that does not fit."""


class ServerError(PdtrtError):
    """A Triton server that cannot be started or reached, or a model that failed to load."""


class KVTransferError(PdtrtError):
    """A request's KV cache could not be moved from prefill to decode (missing, expired,
    mismatched layout, transport failure)."""


class InvalidRequestError(PdtrtError):
    """One request to a served pdtrt model has bad input (an empty prompt, too many tokens, an
    unknown ``request_type``): it becomes that request's error response, nothing else."""


class PhaseError(PdtrtError):
    """A phase model (prefill, decode, aggregated) answered one router request with an error;
    the router ends that request with it (``decode failed: ...``)."""


class ApiError(PdtrtError):
    """One request to the OpenAI-compatible front cannot be served as asked: it becomes that
    request's OpenAI-shaped error body (``{"error": {message, type, param, code}}``) with HTTP
    ``status``; the front keeps serving."""

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def to_openai(self) -> dict[str, object]:
        text = self.message if self.hint is None else f"{self.message} ({self.hint})"
        return {"error": {"message": text, "type": self.type, "param": self.param,
                          "code": self.code}}


class BuildError(PdtrtError):
    """An engine build that cannot be planned, or a step that failed (its log file is named)."""


class BuildRejected(BuildError):
    """Settings that the target's flag schema or build rules reject; ``reasons`` lists them all."""

    def __init__(self, reasons: list[str], *, hint: str | None = None) -> None:
        self.reasons = list(reasons)
        super().__init__("build rejected:\n" + "\n".join(f"  - {r}" for r in self.reasons),
                         hint=hint)

    def to_dict(self) -> dict[str, object]:
        out = super().to_dict()
        out["reasons"] = self.reasons
        return out


class GPUMismatchError(BuildError):
    """The local GPU's compute capability differs from the one the engine is built for."""


class ToolchainError(BuildError):
    """TensorRT-LLM's tools are missing or their version differs from the target's."""


class LLMApiMismatchError(PdtrtError):
    """The installed LLM API (TensorRT-LLM, or a twin of it) lacks a field or an option that
    pdtrt's engine model needs: its load is refused (:mod:`pdtrt.llmapi.check`)."""


class IncompatibleEnginesError(PdtrtError):
    """Engines whose manifests say they cannot serve together (or here)."""
class RepoError(PdtrtError):
    """A Triton model repository cannot be generated as asked (output exists, mode conflict)."""


class RepoInvalidError(_Problems, RepoError):
    """A model repository failed ``pdtrt repo validate``; ``problems`` lists every one."""
class ConfigParseError(RepoError):
    """``config.pbtxt`` text that Triton's schema rejects; the message names the line."""


class UnsupportedTargetError(PdtrtError):
    """A :class:`pdtrt.enums.Target` with no support module in :mod:`pdtrt.targets.registry`."""


class NoFeasiblePlanError(InfeasibleError):
    """The planner found no disaggregated configuration meeting the SLOs: no spec to write."""
class ClientError(PdtrtError):
    """Talking to a running Triton server failed (the client side of ``infer`` / ``bench``)."""


class ServerUnavailableError(ClientError):
    """Nothing answers at the URL, or the server is not live and ready."""


class ModelNotFoundError(ClientError):
    """The server has no model of that name, or the model is not ready."""


class RequestError(ClientError):
    """The server rejected or failed one request (bad input, model error, timeout)."""


class DrainTimeoutError(ClientError):
    """An endpoint being drained still had requests in flight (or KV held) at the deadline."""


class BenchError(PdtrtError):
    """A benchmark that cannot run as asked: no model, no bound, conflicting options."""


class WorkloadError(PdtrtError):
    """A workload description that cannot be used: a bad length distribution, arrival rate,
    trace file or SLO (:mod:`pdtrt.workload`; the same for bench, simulate and plan)."""


class DeployError(PdtrtError):
    """Kubernetes manifests that cannot be generated as asked: a target without a container
    image, a name Kubernetes would refuse, options that contradict the spec, DIR exists."""


class DeployInvalidError(_Problems, DeployError):
    """Kubernetes objects that failed ``pdtrt deploy`` validation; ``problems`` lists every one
    (``Kind/name: path: message``)."""
