"""NVIDIA's ``tensorrtllm`` Triton backend of TensorRT-LLM 0.21, as data: what it reads.

The C++ backend reads a ``tensorrt_llm`` model's ``parameters`` one by one. Most reads are
*guarded* (absent: a logged default), a few are *required* (absent: the model instance cannot be
created and the model does not load), and a value that does not parse is silently replaced by
the default. :class:`BackendContract` holds those facts, each with the source line it came
from (``pdtrt/data/targets/trtllm-0.21-backend.yaml``), and answers three questions:

- :meth:`~BackendContract.config_problems` -- what keeps a config from loading, or makes the
  backend ignore a value (``pdtrt repo validate``);
- :meth:`~BackendContract.load_error` -- the first failure the backend itself would report, with
  its own message (the test-only stand-in backend, ``tests/trtllm_backend_standin/``);
- :attr:`~BackendContract.required` -- the parameters a generated config must always carry.

It is not the backend: it says nothing about requests, engines or GPUs. Placement parameters
(``participant_ids``, ``gpu_device_ids``: ``;`` between model instances, ``,`` within one) are
checked more strictly than the backend does -- it drops a value it cannot parse, and then fails
later or picks GPUs on its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

__all__ = ["BackendContract", "BackendParameter", "ParamKind", "ReadKind",
           "load_backend_contract", "parse_instances"]

CONTRACT_FILE = "data/targets/trtllm-0.21-backend.yaml"
_TRUE, _FALSE = ("True", "true", "TRUE", "1"), ("False", "false", "FALSE", "0")


class ParamKind(StrEnum):
    STRING = "string"
    PATH = "path"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    INT_LIST = "int_list"  # comma-separated integers
    INSTANCES = "instances"  # ";" between model instances, "," within one
    CHOICES = "choices"
    JSON = "json"


class ReadKind(StrEnum):
    REQUIRED = "required"  # no guard: absent fails the load
    GUARDED = "guarded"  # absent or unparsable: the default
    LOOKAHEAD = "lookahead"  # required when decoding_mode is lookahead
    ENGINE = "engine"  # gpt_model_path: absent or missing on disk fails the load
    NOT_READ = "not_read"  # in NVIDIA's template, read by no line of the backend


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendParameter(_Frozen):
    name: str
    kind: ParamKind
    read: ReadKind
    file: Literal["model", "instance"]
    line: int
    default: str | None = None
    choices: tuple[str, ...] = ()
    unset: tuple[str, ...] = ()  # values a required string takes for "not set"
    note: str = ""

    def value_problem(self, value: str) -> str | None:
        """Why the backend cannot read ``value`` (None: it can)."""
        try:
            _parse(self.kind, value, self.choices)
        except ValueError as exc:
            return str(exc)
        return None


class BackendMessages(_Frozen):
    missing: str
    instance: str
    no_engine: str
    no_participants: str
    bad_model_type: str
    bad_boolean: str
    lookahead: str


class ExecutorMessages(_Frozen):
    rank_zero: str
    ranks: str
    devices: str


class BackendEnvironment(_Frozen):
    orchestrator: str
    spawn_processes: str


class BackendSource(_Frozen):
    repository: str
    commit: str
    files: dict[str, str]


def parse_instances(text: str) -> tuple[tuple[int, ...], ...]:
    """``"1,2;3,4"`` -> ``((1, 2), (3, 4))``; raises ValueError saying what is wrong."""
    groups = []
    for n, group in enumerate(text.split(";"), 1):
        items = [item.strip() for item in group.split(",")]
        if not group.strip() or not all(item.isdigit() for item in items):
            raise ValueError(f"{text!r} is not instances of integers (';' between instances, "
                             f"',' within one): instance {n} is {group!r}")
        groups.append(tuple(int(item) for item in items))
    return tuple(groups)


def _parse(kind: ParamKind, value: str, choices: tuple[str, ...]) -> None:
    """Raise ValueError when the backend's reader of ``kind`` would throw on ``value``."""
    text = value.strip()
    if kind is ParamKind.BOOL and value not in _TRUE + _FALSE:
        raise ValueError(f"{value!r} is not a boolean (true/false, 1/0)")
    if kind is ParamKind.INT and not text.lstrip("-").isdigit():
        raise ValueError(f"{value!r} is not an integer")
    if kind is ParamKind.FLOAT:
        try:
            float(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    if kind is ParamKind.INT_LIST and not all(x.strip().lstrip("-").isdigit()
                                              for x in text.split(",")):
        raise ValueError(f"{value!r} is not comma-separated integers")
    if kind is ParamKind.INSTANCES:
        parse_instances(value)
    if kind is ParamKind.CHOICES and value not in choices:
        raise ValueError(f"{value!r} is not one of {', '.join(choices)}")


class BackendContract(_Frozen):
    """The parameters the backend reads, in its read order, and its failure messages."""

    backend: str
    tensorrt_llm: str
    source: BackendSource
    messages: BackendMessages
    executor: ExecutorMessages
    environment: BackendEnvironment
    parameters: tuple[BackendParameter, ...]

    def parameter(self, name: str) -> BackendParameter | None:
        return next((p for p in self.parameters if p.name == name), None)

    def source_of(self, p: BackendParameter) -> str:
        """``repo@commit:file:line`` of the read of ``p``."""
        return f"{self.source.repository}@{self.source.commit[:7]}:{self.source.files[p.file]}:" \
               f"{p.line}"

    @property
    def required(self) -> tuple[str, ...]:
        """What a config must always carry: the unguarded reads and the engine path."""
        return tuple(p.name for p in self.parameters
                     if p.read in (ReadKind.REQUIRED, ReadKind.ENGINE))

    @property
    def read_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.parameters if p.read is not ReadKind.NOT_READ)

    def missing(self, params: Mapping[str, str]) -> tuple[BackendParameter, ...]:
        """The parameters whose absence fails the load, in the backend's read order."""
        lookahead = params.get("decoding_mode") == "lookahead"
        decoder_only = "encoder_model_path" not in params
        return tuple(p for p in self.parameters if p.name not in params and (
            p.read is ReadKind.REQUIRED or (p.read is ReadKind.ENGINE and decoder_only)
            or (p.read is ReadKind.LOOKAHEAD and lookahead)))

    def _failure(self, p: BackendParameter) -> str:
        if p.read is ReadKind.ENGINE:
            return self.messages.instance.format(error=self.messages.no_engine)
        if p.read is ReadKind.LOOKAHEAD:
            return self.messages.instance.format(error=self.messages.lookahead)
        return self.messages.instance.format(
            error=self.messages.missing.format(name=p.name))

    # -- for `pdtrt repo validate` -------------------------------------------------------------
    def config_problems(self, model: str, params: Mapping[str, str], *,
                        instance_count: int) -> list[str]:
        """Every reason the backend would not load ``model``, or would ignore a value."""
        problems = [f"{model}: parameter '{p.name}' is missing: the {self.backend} backend of "
                    f"TensorRT-LLM {self.tensorrt_llm} does not load the model ('"
                    f"{self._failure(p)}'; {self.source_of(p)})" for p in self.missing(params)]
        for name, value in params.items():
            p = self.parameter(name)
            if p is None or p.read is ReadKind.NOT_READ or p.kind is ParamKind.INSTANCES:
                continue
            why = p.value_problem(value)
            if why is None:
                continue
            if p.read is ReadKind.REQUIRED:
                problems.append(f"{model}: parameter '{name}': {why}: the backend does not "
                                f"load the model ('{self.messages.bad_model_type}')")
            else:
                problems.append(f"{model}: parameter '{name}': {why}: the backend ignores it "
                                f"and uses its default ({p.default})")
        problems += [f"{model}: {why}" for why in self.placement_problems(
            params, instance_count=instance_count)]
        return problems

    def placement_problems(self, params: Mapping[str, str], *,
                           instance_count: int) -> list[str]:
        """``participant_ids`` / ``gpu_device_ids``: their format, one group per instance,
        one GPU per rank, and rank 0 left to the orchestrator."""
        groups: dict[str, tuple[tuple[int, ...], ...]] = {}
        problems = []
        for name in ("participant_ids", "gpu_device_ids"):
            if name not in params:
                continue
            try:
                groups[name] = parse_instances(params[name])
            except ValueError as exc:
                problems.append(f"parameter '{name}': {exc} (the backend drops it with a "
                                "warning)")
                continue
            if len(groups[name]) != instance_count:
                problems.append(f"parameter '{name}' has {len(groups[name])} instance group(s) "
                                f"for {instance_count} model instance(s): instance i takes "
                                "group i modulo the groups, so instances would share ranks "
                                "or GPUs")
        ranks, gpus = groups.get("participant_ids", ()), groups.get("gpu_device_ids", ())
        if any(0 in g for g in ranks):
            problems.append(f"parameter 'participant_ids' names rank 0: "
                            f"{self.executor.rank_zero}")
        nodes = params.get("num_nodes", "1").strip()
        num_nodes = int(nodes) if nodes.isdigit() else 1
        for n, (r, g) in enumerate(zip(ranks, gpus, strict=False), 1):
            if len(g) * num_nodes != len(r):
                problems.append(f"instance {n}: {len(r)} rank(s) but {len(g)} GPU(s) x "
                                f"num_nodes {num_nodes}: {self.executor.devices}")
        return problems

    # -- for the stand-in backend ---------------------------------------------------------------
    def load_error(self, params: Mapping[str, str], *, instance_count: int,
                   env: Mapping[str, str] | None = None, tp_pp: int = 1,
                   path_exists: Callable[[str], bool] = os.path.exists) -> str | None:
        """The message the backend fails the load with (None: it loads), checked in its read
        order; ``tp_pp`` is the engine's ranks per instance."""
        env = os.environ if env is None else env
        placement = self.placement_problems(params, instance_count=instance_count)
        if placement:
            return f"pdtrt stand-in of the {self.backend} backend: {placement[0]}"
        for p in self.parameters:
            if p.file != "instance" or p.read is ReadKind.NOT_READ:
                continue
            if p.name == "num_nodes" and self._needs_participants(params, env):
                return self.messages.instance.format(error=self.messages.no_participants)
            value = params.get(p.name)
            if p.read is ReadKind.ENGINE and (value is None or not path_exists(value)):
                return self._failure(p)
            if value is None:
                if p in self.missing(params):
                    return self._failure(p)
                continue
            if p.name == "gpt_model_type" and value not in p.choices:
                return self.messages.instance.format(error=self.messages.bad_model_type)
        ranks = parse_instances(params["participant_ids"]) if "participant_ids" in params else ()
        wrong = next((g for g in ranks if len(g) != tp_pp), None)
        if wrong is not None:
            return self.messages.instance.format(
                error=f"{self.executor.ranks}: {len(wrong)} given, the engine has {tp_pp}")
        return None

    def _needs_participants(self, params: Mapping[str, str], env: Mapping[str, str]) -> bool:
        """Orchestrator mode without spawning, and no participant_ids (the backend's rule)."""
        spawn = env.get(self.environment.spawn_processes)
        return (_atoi(env.get(self.environment.orchestrator)) != 0
                and spawn is not None and _atoi(spawn) == 0 and "participant_ids" not in params)


def _atoi(text: str | None) -> int:
    """C's ``atoi``: the leading integer of ``text``, 0 when there is none."""
    digits = ""
    for ch in (text or "").strip():
        if not (ch.isdigit() or (ch in "+-" and not digits)):
            break
        digits += ch
    try:
        return int(digits)
    except ValueError:
        return 0


@cache
def load_backend_contract() -> BackendContract:
    """The 0.21 backend's contract (``pdtrt/data/targets/trtllm-0.21-backend.yaml``)."""
    text = resources.files("pdtrt").joinpath(CONTRACT_FILE).read_text(encoding="utf-8")
    return BackendContract.model_validate(yaml.safe_load(text))
