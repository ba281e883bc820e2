"""The LLM-API contract: every LLM-API name pdtrt's engine model touches is on the pinned surface
(``pdtrt/data/targets/trtllm-1.2-llmapi.yaml``), and the reference implementation exposes exactly
the surface's signatures. The engine model is run through the fake Triton seam with recording
LLM-API classes (tests/llmapi/contract.py): initialize with an options file, aggregated
streaming and non-streaming requests, context_only then generation_only, a stop, a client
cancellation, the stats, finalize. A renamed field in a copy of the data fails both checks."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml

import pdtrt.llmapi.reference as reference
import pdtrt.runtime.engine.model as llm_engine_model
from pdtrt.engine_io import Param, RequestType, Role
from pdtrt.llmapi import LLMApiImpl, load_llm_api
from pdtrt.llmapi.surface import SURFACE_PATH, load_surface
from pdtrt.runtime.engine.config import LLMEngineConfig
from tests.llmapi.contract import Recorder, signature_mismatches, unknown_names
from tests.llmapi.ctx_peer import OPTIONS
from tests.runtime.fake_transceiver import FakeTransceiver
from tests.runtime.fake_triton import FakeTriton, model_args
from tests.runtime.test_engine_model import ended_once, request, stop

AGGREGATED = {k: v for k, v in OPTIONS.items() if k != "cache_transceiver_config"}


def _wait_first(req) -> None:
    for _ in range(500):
        if req.responses:
            return
        threading.Event().wait(0.01)


def _exercise(tiny_model, tiny_model_dir, tmp_path, monkeypatch) -> Recorder:
    """One fake-seam run over everything the engine model does with the LLM API."""
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    rec = Recorder()
    api, _ = rec.api(load_llm_api(LLMApiImpl.REFERENCE))
    monkeypatch.setattr(llm_engine_model, "load_llm_api", lambda: api)
    options = tmp_path / "aggregated.yaml"
    options.write_text(yaml.safe_dump(AGGREGATED))
    aggregated = llm_engine_model.TritonPythonModel(FakeTriton())
    aggregated.initialize(model_args("aggregated", {
        Param.ROLE: Role.AGGREGATED, Param.LLM_MODEL: str(tiny_model_dir),
        Param.LLM_OPTIONS: str(options)}))
    engine = ReferenceEngine(tiny_model, tokens_per_block=16)
    shared = FakeTransceiver(engine.layout)
    phases = {}
    for role in (Role.PREFILL, Role.DECODE):
        _, llm = rec.api(api, reference.LLM._from_engine(engine, transceiver=shared, **OPTIONS))
        model = llm_engine_model.TritonPythonModel(FakeTriton())
        model.setup(LLMEngineConfig(role=role, model=Path("in-memory"), options=OPTIONS), api,
                    llm, model_name=str(role), model_config=tiny_model.config.to_dict())
        phases[role] = model
    try:
        for streaming in (True, False):
            req = request(max_new=4, streaming=streaming, request_id=f"agg-{streaming}")
            aggregated.execute([req])
            assert ended_once(req)
        ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False, request_id="c")
        phases[Role.PREFILL].execute([ctx])
        assert ended_once(ctx)
        gen = request(max_new=6, request_type=RequestType.GENERATION_ONLY, request_id="g",
                      context_phase_params=ctx.responses[0].outputs["context_phase_params"])
        phases[Role.DECODE].execute([gen])
        assert ended_once(gen)
        held = request(request_type=RequestType.CONTEXT_ONLY, streaming=False, request_id="h")
        phases[Role.PREFILL].execute([held])
        assert ended_once(held)
        halt = stop("h")
        phases[Role.PREFILL].execute([halt])  # aborts the finished context result
        assert ended_once(halt)
        for how in ("stop", "cancel"):
            long = request(max_new=60, request_id=f"long-{how}")
            aggregated.execute([long])
            _wait_first(long)
            if how == "stop":
                aggregated.execute([stop(f"long-{how}")])
            else:
                long.cancel()
            assert ended_once(long)
    finally:
        aggregated.finalize()
        for model in phases.values():
            model.finalize()
    return rec


@pytest.fixture(scope="module")
def recorded(tiny_model, tiny_model_dir, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        return _exercise(tiny_model, tiny_model_dir, tmp_path_factory.mktemp("contract"), mp)


def test_the_run_touched_the_whole_engine_model_api(recorded):
    """A check that cannot fail is a defect: the run must reach each kind of name."""
    assert {("LLM", "generate_async"), ("LLM", "get_stats"), ("LLM", "shutdown"),
            ("RequestOutput", "outputs"), ("RequestOutput", "finished"),
            ("RequestOutput", "abort"), ("CompletionOutput", "token_ids"),
            ("CompletionOutput", "disaggregated_params"),
            ("DisaggregatedParams", "opaque_state")} <= recorded.names
    assert {("LLM", "__init__", "skip_tokenizer_init"),
            ("LLM", "generate_async", "disaggregated_params"),
            ("SamplingParams", "__init__", "max_tokens"),
            ("DisaggregatedParams", "__init__", "opaque_state")} <= recorded.keywords
    assert {"numQueuedRequests", "kvCacheStats.maxNumBlocks"} <= recorded.stats_keys


def test_every_name_the_engine_model_touches_is_on_the_pinned_surface(recorded):
    assert unknown_names(recorded, load_surface()) == []


def test_the_reference_exposes_exactly_the_surface_signatures():
    assert signature_mismatches(load_surface(), reference) == []


def test_the_request_types_are_the_surface_enum():
    assert tuple(RequestType) == load_surface().enum("request_type")
    for value in load_surface().enum("request_type"):
        assert reference.DisaggregatedParams(request_type=value).request_type == value


def test_the_api_is_tensorrt_llm_where_it_is_installed():
    import importlib.util

    expected = LLMApiImpl.TENSORRT_LLM if importlib.util.find_spec("tensorrt_llm") \
        else LLMApiImpl.REFERENCE
    assert load_llm_api().impl is expected
    if expected is LLMApiImpl.REFERENCE:
        with pytest.raises(ImportError):
            load_llm_api(LLMApiImpl.TENSORRT_LLM)


def test_a_renamed_field_fails_the_contract(recorded, tmp_path):
    text = SURFACE_PATH.read_text()
    assert "{name: opaque_state, default: null}" in text
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text.replace("{name: opaque_state, default: null}",
                                    "{name: opaque_blob, default: null}"))
    surface = load_surface(renamed)
    assert any("DisaggregatedParams fields" in p for p in signature_mismatches(surface,
                                                                               reference))
    unknown = unknown_names(recorded, surface)
    assert "DisaggregatedParams.opaque_state is not on the pinned surface" in unknown
    assert "DisaggregatedParams.__init__(opaque_state=) is not on the pinned surface" in unknown


def test_a_renamed_keyword_fails_the_contract(recorded, tmp_path):
    text = SURFACE_PATH.read_text()
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text.replace("{name: streaming, kind: positional, default: false}",
                                    "{name: stream, kind: positional, default: false}"))
    surface = load_surface(renamed)
    assert any(p.startswith("LLM.generate_async") for p in signature_mismatches(surface,
                                                                                 reference))
    assert "LLM.generate_async(streaming=) is not on the pinned surface" in \
        unknown_names(recorded, surface)




# -- the options: the reference accepts nothing TensorRT-LLM's LlmArgs refuses ------------------
def _twin_fields(model=None, prefix=""):
    """(dotted path, pydantic field) of every option the reference takes, nested ones too."""
    from pydantic import BaseModel

    from pdtrt.llmapi.reference.options import ReferenceLlmArgs

    model = model or ReferenceLlmArgs
    for name, field in model.model_fields.items():
        nested = [a for a in getattr(field.annotation, "__args__", (field.annotation,))
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        yield f"{prefix}{name}", field, (nested[0] if nested else None)
        if nested:
            yield from _twin_fields(nested[0], f"{prefix}{name}.")


def _nest(path: str, value):
    head, _, rest = path.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _facts_field(facts, path: str):
    model = facts.root
    *parents, last = path.split(".")
    for key in parents:
        model = facts.fields(model)[key].model
    return facts.fields(model).get(last)


def _probes(field):
    """Values that test a field's type, nullability and bounds at their edges."""
    from pdtrt.targets.llm_args import ArgType

    wrong = {ArgType.INT: ["1", 1.5, True], ArgType.FLOAT: ["0.5", True], ArgType.BOOL: [1, "yes"],
             ArgType.STR: [1], ArgType.ENUM: ["nope", 1], ArgType.INT_LIST: [[1.5], 1],
             ArgType.MODEL: [1, "x"]}
    probes = [None, *wrong.get(field.type, [])]
    for bound in (field.ge, field.gt, field.le):
        if bound is not None:
            edges = [bound - 1, bound, bound + 1]
            probes += [int(e) for e in edges] if field.type is ArgType.INT else edges
    probes += list(field.values)
    if field.default is not None:
        probes.append(field.default)
    return probes


def test_the_reference_accepts_no_option_the_pinned_llm_args_refuse():
    """Every option key of the reference (nested too) is a field of TensorRT-LLM's LlmArgs, and
    no value of a probe set (wrong types, null, each bound's edges, the enum values) is accepted
    by the reference where the pinned facts refuse it; where both have a default it is the
    same."""
    from pdtrt.enums import Target
    from pdtrt.llmapi.reference.options import ReferenceLlmArgs
    from pdtrt.targets.llm_args import load_llm_args, option_problems

    facts = load_llm_args(Target.TRTLLM_1_2)
    problems, probed = [], 0
    for path, field, nested in _twin_fields():
        upstream = _facts_field(facts, path)
        if upstream is None:
            problems.append(f"{path}: the reference takes it, LlmArgs has no such field")
            continue
        if nested is None and upstream.default is not None and \
                field.default != upstream.default:
            problems.append(f"{path}: default {field.default!r}, upstream {upstream.default!r}")
        for value in _probes(upstream):
            options = _nest(path, value)
            probed += 1
            try:
                ReferenceLlmArgs.from_kwargs(options)
            except ValueError:
                continue
            if option_problems(facts, options):
                problems.append(f"{path}={value!r}: the reference accepts it, LlmArgs refuses it")
    assert probed > 100 and problems == []


def test_every_stats_key_the_reference_returns_is_on_the_pinned_surface(tiny_model):
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    llm = reference.LLM._from_engine(ReferenceEngine(tiny_model, tokens_per_block=16),
                                     **{**AGGREGATED, "enable_iter_perf_stats": True})
    try:
        llm.generate_async([5, 6, 7], reference.SamplingParams(max_tokens=2, end_id=-1)
                           ).result(timeout=30)
        [stats] = llm.get_stats(0)
    finally:
        llm.shutdown()

    def keys(d, prefix=""):
        for k, v in d.items():
            yield from keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]

    assert set(keys(stats)) <= set(load_surface().stats_keys)


def test_the_load_check_needs_only_pinned_fields_and_treats_the_unpinned_as_optional():
    """pdtrt.llmapi.check holds a release to NEEDED: each is a field of the pinned surface,
    and each OPTIONAL field is one the pinned class lacks (else it would be NEEDED)."""
    from pdtrt.llmapi.check import NEEDED, OPTIONAL

    surface = load_surface()
    for cls, names in NEEDED.items():
        assert set(names) <= {n for n, _ in surface.cls(cls).fields}, cls
    for cls, names in OPTIONAL.items():
        assert not set(names) & {n for n, _ in surface.cls(cls).fields}, cls
