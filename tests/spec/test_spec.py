"""Spec validation: the examples pass; every bad-spec fixture fails with its expected message.

Each fixture in fixtures/bad_specs/ states what it expects in header comments:
``# expect-path: P`` (the YAML path named), ``# expect: TEXT`` (substring of that issue's
message; repeatable) and optionally ``# expect-line: N``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLES
from pydantic import ValidationError

from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.enums import KVDType, Phase, Target, WeightQuant
from pdtrt.errors import SpecError
from pdtrt.spec.load import load_deployment, load_spec, parse_spec
from tests.buildspecs import write_spec
from tests.conftest import TESTS

BAD = sorted((TESTS / "fixtures" / "bad_specs").glob("*.yaml"))
assert BAD, "no bad-spec fixtures found: the parametrised tests below would pass vacuously"


def _expectations(path: Path) -> tuple[str, list[str], int | None]:
    want_path, texts, line = None, [], None
    for raw in path.read_text().splitlines():
        if raw.startswith("# expect-path: "):
            want_path = raw.removeprefix("# expect-path: ")
        elif raw.startswith("# expect-line: "):
            line = int(raw.removeprefix("# expect-line: "))
        elif raw.startswith("# expect: "):
            texts.append(raw.removeprefix("# expect: "))
    assert want_path and texts, f"{path.name} states no expectation"
    return want_path, texts, line


@pytest.mark.parametrize("fixture", BAD, ids=lambda p: p.stem)
def test_bad_spec_fails_with_its_message(fixture):
    want_path, texts, line = _expectations(fixture)
    with pytest.raises(SpecError) as info:
        load_deployment(fixture)
    issues = [i for i in info.value.issues if (i.path or "<root>") == want_path]
    assert issues, f"no issue at {want_path}; got {info.value.message}"
    issue = issues[0]
    for text in texts:
        assert text in issue.message
    if line is not None:
        assert issue.line == line
    assert str(fixture) in info.value.message  # the file is named


def test_fixture_count_covers_every_rule():
    from pdtrt.spec.rules import SHAPE_RULES

    assert len(BAD) >= len(SHAPE_RULES) + 8


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_examples_validate(example):
    dep = load_deployment(example)
    for phase in Phase:
        assert dep.fits[phase].fits


def test_seed_example_values():
    dep = load_deployment(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
    s = dep.spec
    assert s.target is Target.TRTLLM_0_21
    assert dep.gpus[Phase.PREFILL].key == "h100-sxm" and dep.gpus[Phase.DECODE].key == "l40s"
    assert (s.workload.isl, s.workload.osl) == (3000, 500)
    assert s.kv_cache_dtype(Phase.DECODE) is KVDType.FP8
    # 1 H100 at $4.916 + 2 L40S at $1.86
    assert dep.cost_per_hour_usd() == pytest.approx(4.916 + 2 * 1.86)


def test_all_issues_reported_at_once():
    text = (EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text()
    text = text.replace("tokens_per_block: 32        # must equal decode's", "tokens_per_block: 48")
    text = text.replace("kv_cache_dtype: fp8 ", "kv_cache_dtype: x ")
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="s.yaml")
    assert [i.path for i in info.value.issues] == ["model.kv_cache_dtype"]  # schema first
    text = text.replace("kv_cache_dtype: x ", "kv_cache_dtype: fp8 ")
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="s.yaml")
    assert {i.path for i in info.value.issues} == {"decode.engine.tokens_per_block",
                                                   "prefill.engine.tokens_per_block"}


def test_pool_overrides_weights():
    text = (EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text().replace(
        "    max_batch_size: 8\n", "    max_batch_size: 8\n    weights: fp8\n")
    spec, _ = parse_spec(text)
    assert spec.weights(Phase.PREFILL) is WeightQuant.FP8
    assert spec.weights(Phase.DECODE) is WeightQuant.NONE


def test_spec_is_frozen():
    spec = load_spec(EXAMPLES / "reference-cpu.yaml")
    with pytest.raises(ValidationError, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


def test_missing_file():
    with pytest.raises(SpecError, match="no such file"):
        load_spec("/nonexistent/pdtrt.yaml")


def test_relative_model_path_resolves_against_spec_dir(tmp_path):
    from conftest import models_dir

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(
        (models_dir() / "Qwen--Qwen3-8B.json").read_text())
    spec = tmp_path / "pdtrt.yaml"
    spec.write_text("name: q\ntarget: trtllm-0.21\nmodel: {name: my-qwen, path: ckpt}\n"
                    "prefill: {gpu: h100}\ndecode: {gpu: l40s}\nworkload: {isl: 100, osl: 10}\n")
    dep = load_deployment(spec)
    assert dep.model.name == "my-qwen" and dep.model.num_layers == 36


def test_json_schema_names_every_section():
    schema = DeploymentSpec.model_json_schema()
    assert set(schema["properties"]) == {
        "version", "name", "target", "model", "prefill", "decode", "kv_transfer", "router",
        "serving", "slo", "workload"}
    assert schema["additionalProperties"] is False


def test_pools_on_one_host_must_agree_on_their_net_devices(tmp_path):
    data = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    data["decode"]["net_devices"] = ["eth1"]  # both pools are on `cpu`: one host
    with pytest.raises(SpecError) as err:
        load_deployment(write_spec(tmp_path, data))
    assert [i.path for i in err.value.issues] == ["decode.net_devices"]
    assert "served from one host" in err.value.issues[0].message
    data["prefill"]["net_devices"] = ["eth1"]
    spec = load_deployment(write_spec(tmp_path, data)).spec
    assert spec.net_devices(Phase.PREFILL) == spec.net_devices(Phase.DECODE) == ("eth1",)


def test_a_mixed_decode_pool_names_each_endpoint_gpu(tmp_path):
    data = {"name": "t", "target": "trtllm-1.2",
            "model": {"name": "meta-llama/Meta-Llama-3.1-8B", "kv_cache_dtype": "fp8"},
            "prefill": {"gpu": "h100-sxm"},
            "decode": {"gpu": "l40s", "instances": 2, "endpoints": [
                {"url": "l40s-host:8001", "instances": 8},
                {"url": "h100-sxm-host:8001", "instances": 2, "gpu": "h100-sxm"}]},
            "router": {"routing": "kv_capacity"},
            "workload": {"isl": 3000, "osl": 500}}
    spec = load_deployment(write_spec(tmp_path, data)).spec
    assert spec.decode.instances_by_gpu() == {"l40s": 8, "h100-sxm": 2}
    assert spec.decode.num_gpus == 10 and spec.prefill.instances_by_gpu() == {"h100-sxm": 1}
    data["decode"]["endpoints"][1]["gpu"] = "a10g"  # Ampere: no FP8 KV cache
    with pytest.raises(SpecError) as err:
        load_deployment(write_spec(tmp_path, data))
    assert [i.path for i in err.value.issues] == ["decode.endpoints.1.gpu"]
    assert "a10g" in err.value.issues[0].message and "FP8" in err.value.issues[0].message
