"""TensorRT-LLM's LLM-API argument models as data, and the check of an options file against them.

The LLM API (``tensorrt_llm.LLM(model=..., **options)``) validates its keyword arguments with
pydantic models that forbid unknown keys (``TorchLlmArgs`` and its nested configs). A misspelt
or renamed key there is a crash on the GPU host at model load; here it is a ``pdtrt build``
error before anything runs. The facts -- field names, types, enum values, bounds, the defaults
that matter -- live in ``pdtrt/data/targets/<target>-llm-args.yaml`` with the source file and
commit they were read from; this module only loads them into typed objects and walks an
options mapping against them (:func:`option_problems`). It says nothing about *which* values to
write; that is :mod:`pdtrt.targets.llm_options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from functools import cache

from pydantic import BaseModel, ConfigDict

from pdtrt.enums import Target
from pdtrt.suggest import did_you_mean
from pdtrt.targets.schema import target_data

__all__ = ["ArgField", "ArgModel", "ArgType", "LlmArgsFacts", "load_llm_args", "option_problems"]


class ArgType(StrEnum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    INT_LIST = "int_list"
    STR_MAP = "str_map"
    ENUM = "enum"
    MODEL = "model"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgField(_Frozen):
    type: ArgType
    values: tuple[str, ...] = ()  # ENUM
    model: str | None = None  # MODEL: the nested model's name
    optional: bool = False  # also takes null
    default: int | float | bool | str | None = None
    ge: float | None = None
    le: float | None = None
    gt: float | None = None


class ArgModel(_Frozen):
    extends: str | None = None
    fields: dict[str, ArgField]


class Source(_Frozen):
    repository: str
    file: str
    commit: str
    version: str


class LlmArgsFacts(_Frozen):
    source: Source
    root: str
    models: dict[str, ArgModel]

    def fields(self, name: str) -> dict[str, ArgField]:
        """Every field of model ``name``, its bases' first."""
        model = self.models[name]
        inherited = self.fields(model.extends) if model.extends else {}
        return {**inherited, **model.fields}

    def cite(self) -> str:
        s = self.source
        return f"{s.repository} {s.file} @ {s.commit[:12]} ({s.version})"


@cache
def load_llm_args(target: Target) -> LlmArgsFacts:
    """The LLM-API facts of ``target``; raises :class:`BuildError` when it has none."""
    return LlmArgsFacts.model_validate(target_data(f"{target}-llm-args.yaml",
                                                   f"no LLM-API facts for target {target}"))


def option_problems(facts: LlmArgsFacts, options: Mapping[str, object]) -> list[str]:
    """Why ``options`` would be refused by the LLM API: one line per key, as its dotted path.

    An unknown key names the closest field (did you mean); a value names the expected type,
    enum values or bound. An empty list means every key and value is one the facts allow.
    """
    return _walk(facts, facts.root, options, "")


def _walk(facts: LlmArgsFacts, model: str, options: Mapping[str, object], prefix: str
          ) -> list[str]:
    fields = facts.fields(model)
    problems: list[str] = []
    for key, value in options.items():
        path = f"{prefix}{key}"
        field = fields.get(key)
        if field is None:
            problems.append(f"{path}: {model} has no field '{key}'"
                            f"{did_you_mean(str(key), fields)}")
            continue
        if value is None:
            if not field.optional:
                problems.append(f"{path}: {model}.{key} may not be null")
            continue
        if field.type is ArgType.MODEL:
            if not isinstance(value, Mapping):
                problems.append(f"{path}: expected a mapping ({field.model}), got {value!r}")
            else:
                problems += _walk(facts, str(field.model), value, f"{path}.")
            continue
        problem = _value_problem(field, value)
        if problem:
            problems.append(f"{path}: {problem}")
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _value_problem(field: ArgField, value: object) -> str | None:
    kind = field.type
    if kind is ArgType.BOOL:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if kind is ArgType.STR:
        return None if isinstance(value, str) else f"expected a string, got {value!r}"
    if kind is ArgType.ENUM:
        if str(value) in field.values and isinstance(value, str):
            return None
        same = next((v for v in field.values if v.lower() == str(value).lower()), None)
        hint = f" (did you mean '{same}'?)" if same else did_you_mean(str(value), field.values)
        return f"{value!r} is not one of {', '.join(field.values)}{hint}"
    if kind is ArgType.INT_LIST:
        ok = isinstance(value, list) and all(_is_int(v) for v in value)
        return None if ok else f"expected a list of integers, got {value!r}"
    if kind is ArgType.STR_MAP:
        ok = isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())
        return None if ok else f"expected a mapping of strings, got {value!r}"
    numeric = _is_int(value) or (kind is ArgType.FLOAT and isinstance(value, float))
    if not numeric:
        return f"expected {'an integer' if kind is ArgType.INT else 'a number'}, got {value!r}"
    assert isinstance(value, int | float)
    for bound, ok, text in ((field.ge, lambda b: value >= b, ">="),
                            (field.le, lambda b: value <= b, "<="),
                            (field.gt, lambda b: value > b, ">")):
        if bound is not None and not ok(bound):
            return f"{value} is not {text} {bound:g}"
    return None
