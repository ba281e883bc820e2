"""A TensorRT-LLM target's build-tool flag schema, as data (``pdtrt/data/targets/*.yaml``).

The schema lists, per tool (``convert_checkpoint``, ``quantize``, ``trtllm_build``), every flag
pdtrt may render: its kind (int, choice, str, path, store-true flag), its choices, its default in
that TensorRT-LLM version. :meth:`TargetSchema.render` turns typed values into the exact argv
tail and raises :class:`BuildRejected` for an unknown flag or a value the version would refuse
-- so no argv reaches a tool unchecked. It says nothing about *which* values to choose; that is
:mod:`pdtrt.blueprint.settings` and :mod:`pdtrt.targets.trtllm_rules`.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from pdtrt.enums import Target
from pdtrt.errors import BuildError, BuildRejected
from pdtrt.suggest import did_you_mean

__all__ = ["FlagKind", "FlagSpec", "TargetRules", "TargetSchema", "Tool", "load_target_schema",
           "target_data"]


class Tool(StrEnum):
    CONVERT_CHECKPOINT = "convert_checkpoint"
    QUANTIZE = "quantize"
    TRTLLM_BUILD = "trtllm_build"
    HF_PTQ = "hf_ptq"  # NVIDIA ModelOpt's examples/llm_ptq/hf_ptq.py (trtllm-1.2's FP8 step)


class FlagKind(StrEnum):
    INT = "int"
    CHOICE = "choice"
    STR = "str"
    PATH = "path"
    FLAG = "flag"  # argparse store_true: present or absent


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlagSpec(_Frozen):
    kind: FlagKind
    choices: tuple[str, ...] = ()
    default: str | int | None = None
    min: int | None = None


class TargetRules(_Frozen):
    max_num_tokens_warn_above: int
    max_beam_width: int
    fp8_min_sm: int


class TargetSchema(_Frozen):
    target: Target
    container: str
    versions: dict[str, str]
    examples_dir: str
    python: str
    convert_scripts: dict[str, str]
    quantize_script: str
    tools: dict[Tool, dict[str, FlagSpec]]
    rules: TargetRules = Field(description="numbers the build rules use")

    def render(self, tool: Tool, values: dict[str, object]) -> list[str]:
        """``--flag value`` pairs for ``values`` (insertion order; ``None`` and False skipped).

        Raises :class:`BuildRejected` listing every unknown flag and invalid value.
        """
        flags = self.tools[tool]
        argv: list[str] = []
        problems: list[str] = []
        for name, value in values.items():
            spec = flags.get(name)
            if spec is None:
                problems.append(f"{tool}: TensorRT-LLM {self.versions['tensorrt_llm']} has no "
                                f"flag --{name}{did_you_mean(name, list(flags))}")
                continue
            if value is None or value is False:
                continue
            problem = _check(spec, value)
            if problem:
                problems.append(f"{tool} --{name} {value}: {problem}")
                continue
            argv.append(f"--{name}")
            if spec.kind is not FlagKind.FLAG:
                argv.append(str(value))
        if problems:
            raise BuildRejected(problems)
        return argv


def _check(spec: FlagSpec, value: object) -> str | None:
    if spec.kind is FlagKind.FLAG:
        return None if value is True else "a store-true flag takes no value"
    if spec.kind is FlagKind.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if spec.min is not None and value < spec.min:
            return f"must be >= {spec.min}"
        return None
    if spec.kind is FlagKind.CHOICE and str(value) not in spec.choices:
        return f"not one of {', '.join(spec.choices)}"
    return None


@cache
def load_target_schema(target: Target) -> TargetSchema:
    """The schema of ``target`` (an engine-era target; ``reference`` has none).

    Raises :class:`BuildError` when ``pdtrt/data/targets/<target>.yaml`` is missing.
    """
    return TargetSchema.model_validate(target_data(f"{target}.yaml", f"no schema file for "
                                                   f"target {target}"))


def target_data(name: str, missing: str) -> Any:
    """The parsed ``pdtrt/data/targets/<name>``; :class:`BuildError` saying ``missing`` (and
    which file to add) when there is none."""
    file = resources.files("pdtrt").joinpath(f"data/targets/{name}")
    try:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BuildError(missing, hint=f"add pdtrt/data/targets/{name}") from None
