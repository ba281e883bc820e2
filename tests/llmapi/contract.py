"""Checks of the LLM-API contract: names an engine-model run touched vs the pinned surface, and
the reference implementation's signatures vs the surface (tests/llmapi/test_contract.py).

:class:`Recorder` wraps the LLM-API classes the engine model gets and records every name it
touches: constructor and method keywords (``LLM.generate_async(streaming=)``), attributes read
on results and their outputs, and the dataclasses' keywords. :func:`unknown_names` lists those
the surface does not have; :func:`signature_mismatches` lists where the reference differs from
the surface. Both return messages; an empty list is a pass.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from pdtrt.llmapi import LLMApi
from pdtrt.llmapi.surface import REQUIRED, ClassSurface, ParamSurface, Surface

_KIND = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
         inspect.Parameter.KEYWORD_ONLY: "keyword", inspect.Parameter.VAR_KEYWORD: "var_keyword"}
# pdtrt's own hooks on the reference, reached only when the API in use is the reference
_REFERENCE_ONLY = ("_pdtrt_",)


class Recorder:
    def __init__(self) -> None:
        self.names: set[tuple[str, str]] = set()  # (class, name): attributes and methods
        self.keywords: set[tuple[str, str, str]] = set()  # (class, callable, keyword)
        self.positional: dict[tuple[str, str], int] = {}  # most positional args seen
        self.stats_keys: set[str] = set()  # keys read from get_stats' dicts (dotted)

    def call(self, cls: str, fn: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        key = (cls, fn)
        self.positional[key] = max(self.positional.get(key, 0), len(args))
        for kw in kwargs:
            self.keywords.add((cls, fn, kw))

    def api(self, api: LLMApi, llm: Any = None) -> tuple[LLMApi, Any]:
        """``api`` with recording classes, and ``llm`` (an instance) wrapped."""
        def factory(cls_name: str, target: Any) -> Any:
            def make(*args: Any, **kwargs: Any) -> Any:
                self.call(cls_name, "__init__", args, kwargs)
                made = target(*args, **kwargs)
                return _Proxy(made, cls_name, self) if cls_name == "LLM" else made
            make.__wrapped__ = target  # type: ignore[attr-defined]  # its fields, for the check
            return make

        wrapped = dataclasses.replace(
            api, LLM=factory("LLM", api.LLM),
            SamplingParams=factory("SamplingParams", api.SamplingParams),
            DisaggregatedParams=factory("DisaggregatedParams", api.DisaggregatedParams))
        return wrapped, None if llm is None else _Proxy(llm, "LLM", self)


class _Proxy:
    """Records what is read; wraps what comes back as the surface's class it is."""

    _RETURNS = {("LLM", "generate_async"): "RequestOutput"}
    _ATTRS = {"outputs": "CompletionOutput", "disaggregated_params": "DisaggregatedParams"}

    def __init__(self, target: Any, cls: str, rec: Recorder) -> None:
        object.__setattr__(self, "_t", target)
        object.__setattr__(self, "_c", cls)
        object.__setattr__(self, "_r", rec)

    def __getattr__(self, name: str) -> Any:
        target, cls, rec = self._t, self._c, self._r
        value = getattr(target, name)
        if name.startswith(_REFERENCE_ONLY):
            return value
        rec.names.add((cls, name))
        if callable(value) and not isinstance(value, type):
            def method(*args: Any, **kwargs: Any) -> Any:
                rec.call(cls, name, args, kwargs)
                out = value(*args, **kwargs)
                if (cls, name) == ("LLM", "get_stats"):
                    return [_StatsDict(d, "", rec) for d in out]
                returned = self._RETURNS.get((cls, name))
                return _Proxy(out, returned, rec) if returned else out
            return method
        sub = self._ATTRS.get(name)
        if sub == "CompletionOutput":
            return [_Proxy(o, sub, rec) for o in value]
        if sub and value is not None:
            return _Proxy(value, sub, rec)
        return value

    def __aiter__(self) -> _Proxy:
        self._r.names.add((self._c, "__aiter__"))
        return self

    async def __anext__(self) -> _Proxy:
        await self._t.__anext__()
        return self


class _StatsDict(dict):
    """An iteration-stats dict that records the keys read from it."""

    def __init__(self, data: dict[str, Any], prefix: str, rec: Recorder) -> None:
        super().__init__(data)
        self._prefix, self._rec = prefix, rec

    def _seen(self, key: str) -> str:
        self._rec.stats_keys.add(self._prefix + key)
        return key

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(self._seen(key))
        return _StatsDict(value, f"{self._prefix}{key}.", self._rec) \
            if isinstance(value, dict) else value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __contains__(self, key: object) -> bool:
        return super().__contains__(self._seen(str(key)))


def unknown_names(rec: Recorder, surface: Surface) -> list[str]:
    problems = [f"get_stats key {k!r} is not on the pinned surface"
                for k in sorted(rec.stats_keys)
                if not any(k == s or s.startswith(k + ".") or k.startswith(s + ".")
                           for s in surface.stats_keys)]
    for cls, name in sorted(rec.names):
        c = surface.cls(cls)
        if name == "__aiter__":
            continue  # RequestOutput is async-iterable on the surface
        if name not in c.names:
            problems.append(f"{cls}.{name} is not on the pinned surface")
    for cls, fn, kw in sorted(rec.keywords):
        params = _params_of(surface.cls(cls), fn)
        names = {p.name for p in params}
        if kw not in names and not any(p.kind == "var_keyword" for p in params):
            problems.append(f"{cls}.{fn}({kw}=) is not on the pinned surface")
    for (cls, fn), n in sorted(rec.positional.items()):
        positional = [p for p in _params_of(surface.cls(cls), fn) if p.kind == "positional"]
        if n > len(positional):
            problems.append(f"{cls}.{fn} called with {n} positional arguments; the surface "
                            f"has {len(positional)}")
    return problems


def _params_of(c: ClassSurface, fn: str) -> tuple[ParamSurface, ...]:
    if fn == "__init__":
        if c.fields:  # a keyword-only dataclass
            return tuple(ParamSurface(name=n, kind="keyword", default=d) for n, d in c.fields)
        return c.init
    return c.method(fn)


def _signature(fn: Any) -> tuple[tuple[str, str, Any], ...]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        default = REQUIRED if p.default is inspect.Parameter.empty else p.default
        out.append((p.name, _KIND[p.kind], None if p.kind == p.VAR_KEYWORD else default))
    return tuple(out)


def _expected(params: tuple[ParamSurface, ...]) -> tuple[tuple[str, str, Any], ...]:
    return tuple((p.name, p.kind, None if p.kind == "var_keyword" else p.default)
                 for p in params)


def signature_mismatches(surface: Surface, module: Any) -> list[str]:
    """Where ``module`` (pdtrt.llmapi.reference) differs from ``surface``."""
    problems = []
    for c in surface.classes:
        impl = getattr(module, c.name)
        if c.init and _signature(impl.__init__) != _expected(c.init):
            problems.append(f"{c.name}.__init__{_signature(impl.__init__)} != surface "
                            f"{_expected(c.init)}")
        for name, params in c.methods:
            got = _signature(getattr(impl, name)) if hasattr(impl, name) else None
            if got != _expected(params):
                problems.append(f"{c.name}.{name}{got} != surface {_expected(params)}")
        if c.fields:
            got_fields = tuple((f.name, _default(f)) for f in dataclasses.fields(impl)
                               if f.init)
            if got_fields != c.fields:
                problems.append(f"{c.name} fields {got_fields} != surface {c.fields}")
        missing = [a for a in c.attributes if not _has_attribute(impl, a)]
        if missing:
            problems.append(f"{c.name} lacks {missing}")
    return problems


def _default(f: dataclasses.Field) -> Any:
    return REQUIRED if f.default is dataclasses.MISSING else f.default


def _has_attribute(cls: Any, name: str) -> bool:
    if hasattr(cls, name):
        return True
    if dataclasses.is_dataclass(cls):
        return name in {f.name for f in dataclasses.fields(cls)}
    source = inspect.getsource(cls.__init__)  # set in __init__: self.<name> = ...
    return f"self.{name} =" in source
