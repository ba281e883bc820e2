"""pdtrt repo validate: one seeded defect per case, each reported precisely; engine manifests."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pdtrt.blueprint.manifest import EngineManifest, KVLayout, write_manifest
from pdtrt.enums import KVDType, Phase, Target, WeightQuant
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.validate import validate_repo
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A generated reference repository (both ensembles) and its (not yet built) engines root."""
    root = tmp_path_factory.mktemp("pristine")
    dep = load_deployment(EXAMPLES / "reference-cpu.yaml")
    generate_repo(dep, root / "repo", mode=RepoMode.BOTH, engines_root=root / "engines")
    return root


@pytest.fixture
def repo(pristine, tmp_path) -> Path:
    shutil.copytree(pristine / "repo", tmp_path / "repo")
    return tmp_path / "repo"


def _edit(repo: Path, model: str, old: str, new: str, count: int = 1) -> None:
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    assert old in text, f"{old!r} not in {model}/config.pbtxt"
    path.write_text(text.replace(old, new, count))


def _set_field(repo: Path, model: str, tensor: str, field: str, value: str) -> None:
    """Change ``field`` of the tensor called ``tensor`` in ``model``'s config."""
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    pattern = re.compile(rf'(name: "{tensor}"\n(?:\s+\S.*\n)*?\s+{field}: )([^\n]+)')
    new, n = pattern.subn(lambda m: m.group(1) + value, text, count=1)
    assert n == 1
    path.write_text(new)


DEFECTS = {
    "unfilled-placeholder-structural": (
        lambda r: _edit(r, "router", "max_batch_size: 32",
                        "max_batch_size: ${triton_max_batch_size}"),
        ["router: unfilled placeholder ${triton_max_batch_size} at line 5 (NVIDIA "
         "fill_template.py leaves unknown keys in place)",
         "router: config.pbtxt does not parse with Triton's schema: 5:17 : 'max_batch_size: "
         "${triton_max_batch_size}': Couldn't parse integer: $"]),
    "unfilled-placeholder-string": (
        lambda r: _edit(r, "preprocessing", 'key: "tokenizer_dir"\n  value: { string_value: "',
                        'key: "tokenizer_dir"\n  value: { string_value: "${tokenizer_dir}'),
        [re.compile(r"preprocessing: unfilled placeholder \$\{tokenizer_dir\} at line \d+ ")]),
    "schema-typo": (
        lambda r: _edit(r, "decode", "max_batch_size: 32", "max_batch_sizes: 32"),
        ['decode: config.pbtxt does not parse with Triton\'s schema: 5:1 : Message type '
         '"inference.ModelConfig" has no field named "max_batch_sizes".']),
    "max-batch-0-with-scalar-reshape": (
        lambda r: _edit(r, "prefill", "max_batch_size: 8", "max_batch_size: 0"),
        [re.compile(r"prefill: max_batch_size is 0 but input\(s\) 'input_lengths', "
                    r"'request_output_len', .*'kv_events_cursor' have reshape: "
                    r"\{ shape: \[ \] \} ")]),
    "ensemble-step-unknown-model": (
        lambda r: _edit(r, "ensemble", 'model_name: "router"', 'model_name: "routr"'),
        ["ensemble: step 2 runs 'routr', which is not a model of this repository (did you mean "
         "'router'?)"]),
    "ensemble-dtype-mismatch": (
        lambda r: _set_field(r, "router", "temperature", "data_type", "TYPE_FP16"),
        ["ensemble: step 2 (router) input 'temperature' is TYPE_FP16 but 'temperature' "
         "(ensemble input) is TYPE_FP32"]),
    "ensemble-dims-mismatch": (
        lambda r: _set_field(r, "postprocessing", "TOKENS_BATCH", "dims", "[ -1 ]"),
        ["ensemble: step 3 (postprocessing) input 'TOKENS_BATCH' has dims [-1] but "
         "'_TOKENS_BATCH' (router.output_ids) has dims [-1, -1]",
         "ensemble_aggregated: step 3 (postprocessing) input 'TOKENS_BATCH' has dims [-1] but "
         "'_TOKENS_BATCH' (aggregated.output_ids) has dims [-1, -1]"]),
    "ensemble-maps-missing-input": (
        lambda r: _edit(r, "router", 'name: "streaming"', 'name: "stream_on"'),
        ["ensemble: step 2 (router) maps input 'streaming', which router does not have (did you "
         "mean 'stream_on'?)"]),
    "ensemble-unmapped-required-input": (
        lambda r: _edit(r, "ensemble", 'input_map { key: "input_lengths" value: '
                        '"_REQUEST_INPUT_LEN" }\n', ""),
        ["ensemble: step 2 (router): required input 'input_lengths' is not mapped"]),
    "ensemble-output-not-produced": (
        lambda r: _edit(r, "ensemble", 'value: "text_output"', 'value: "text_out"'),
        ["ensemble: output 'text_output' is not produced by any step"]),
    "ensemble-batch-exceeds-step": (
        lambda r: _edit(r, "ensemble_aggregated", "max_batch_size: 8", "max_batch_size: 64"),
        ["ensemble_aggregated: max_batch_size 64 exceeds step preprocessing's 32",
         "ensemble_aggregated: max_batch_size 64 exceeds step aggregated's 8",
         "ensemble_aggregated: max_batch_size 64 exceeds step postprocessing's 32"]),
    "router-names-missing-model": (
        lambda r: _edit(r, "router", 'string_value: "decode" }', 'string_value: "decoder" }'),
        ["router: parameter 'decode_model' names 'decoder', which is not a model of this "
         "repository (did you mean 'decode'?)"]),
    "router-remote-url-malformed": (
        lambda r: _edit(r, "router", 'key: "decode_url"\n  value: { string_value: ""',
                        'key: "decode_url"\n  value: { string_value: "http://node2"'),
        ["router: parameter 'decode_url' is 'http://node2', not a gRPC address HOST:PORT"]),
    "router-remote-pool-model-removed-without-url": (
        lambda r: shutil.rmtree(r / "decode"),
        ["router: parameter 'decode_model' names 'decode', which is not a model of this "
         "repository"]),
    "router-aggregated-threshold-without-model": (
        lambda r: (_edit(r, "router", 'string_value: "aggregated" }', 'string_value: "" }'),
                   _edit(r, "router", 'key: "aggregated_below_tokens"\n  value: { string_value: '
                         '"0"', 'key: "aggregated_below_tokens"\n  value: { string_value: "128"')),
        ["router: 'aggregated_below_tokens' is 128 but 'aggregated_model' is empty: short "
         "prompts have nowhere to go"]),
    "decoupled-inconsistent": (
        lambda r: _edit(r, "decode", "decoupled: true", "decoupled: false"),
        ["router: decoupled is true but decode (its 'decode_model') has decoupled false: a "
         "streaming path must be decoupled end to end"]),
    "missing-python-shim": (
        lambda r: (r / "prefill" / "1" / "model.py").unlink(),
        ["prefill: prefill/1/model.py is missing"]),
    "missing-version-dir": (
        lambda r: shutil.rmtree(r / "ensemble" / "1"),
        ["ensemble: no version directory (e.g. ensemble/1/)"]),
    "model-name-differs-from-dir": (
        lambda r: shutil.move(r / "postprocessing", r / "detokenizer"),
        ["detokenizer: config names the model 'postprocessing', its directory is 'detokenizer'",
         "ensemble: step 3 runs 'postprocessing', which is not a model of this repository",
         "ensemble_aggregated: step 3 runs 'postprocessing', which is not a model of this "
         "repository"]),
    "unknown-role": (
        lambda r: _edit(r, "decode", 'string_value: "decode" }', 'string_value: "decoder" }'),
        ["decode: parameter 'pdtrt_role' is 'decoder', not one of prefill, decode, aggregated, "
         "router, preprocessing, postprocessing"]),
    "missing-role-parameter": (
        lambda r: _edit(r, "postprocessing", 'key: "tokenizer_dir"', 'key: "tokenizer"'),
        ["postprocessing: parameter 'tokenizer_dir' is missing or empty"]),
}


def _matches(problems: tuple[str, ...], want: list) -> None:
    for w in want:
        if isinstance(w, re.Pattern):
            assert any(w.match(p) for p in problems), (w.pattern, problems)
        else:
            assert any(p == w or p.startswith(w + " (did") for p in problems), (w, problems)


def test_pristine_repository_has_no_problems(repo):
    report = validate_repo(repo)
    assert report.problems == ()
    assert report.target is Target.REFERENCE


@pytest.mark.parametrize(("example", "target"), [
    ("reference-cpu", Target.REFERENCE), ("llama3-8b-h100-l40s-trtllm-0.21", Target.TRTLLM_0_21)])
def test_target_is_inferred_from_the_engine_models_without_a_repo_manifest(tmp_path, example,
                                                                          target):
    dep = load_deployment(EXAMPLES / f"{example}.yaml")
    generate_repo(dep, tmp_path / "repo", mode=RepoMode.BOTH, engines_root=tmp_path / "e")
    (tmp_path / "repo" / "pdtrt-repo.json").unlink()
    assert validate_repo(tmp_path / "repo").target is target
    for model in ("prefill", "decode", "aggregated"):
        shutil.rmtree(tmp_path / "repo" / model)
    assert validate_repo(tmp_path / "repo").target is None  # no engine model: no evidence


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_validate_reports_seeded_defect(repo, defect):
    mutate, want = DEFECTS[defect]
    mutate(repo)
    report = validate_repo(repo)
    _matches(report.problems, want)
    assert len(report.problems) == len(want), report.problems


def _manifest(phase: Phase | None, **changes) -> EngineManifest:
    layout = dict(num_layers=2, num_kv_heads=2, head_dim=16, kv_dtype=KVDType.FP32,
                  tokens_per_block=16)
    layout.update(changes.pop("layout", {}))
    base = dict(phase=phase, target=Target.REFERENCE, model="pdtrt/tiny-llama", gpu_name=None,
                compute_capability=None, tp=1, pp=1, weights=WeightQuant.NONE,
                kv_layout=KVLayout(**layout), versions={"tensorrt_llm": None},
                build_settings={}, input_hashes={}, pdtrt_version="0.1.0")
    base.update(changes)
    return EngineManifest(**base)


def _build(pristine: Path, prefill: EngineManifest, decode: EngineManifest) -> Path:
    """Fake built engines in the pristine repo's engines root (removed by ``engines``)."""
    engines = pristine / "engines" / "reference-cpu"
    for phase, manifest in ((Phase.PREFILL, prefill), (Phase.DECODE, decode)):
        (engines / phase).mkdir(parents=True, exist_ok=True)
        write_manifest(engines / phase, manifest)
    (engines / "tokenizer").mkdir(exist_ok=True)
    return engines


@pytest.fixture
def engines(pristine):
    yield pristine / "engines" / "reference-cpu"
    shutil.rmtree(pristine / "engines", ignore_errors=True)


def test_compatible_engines_pass(repo, engines, pristine):
    _build(pristine, _manifest(Phase.PREFILL), _manifest(Phase.DECODE))
    report = validate_repo(repo, require_engines=True)
    assert report.problems == () and report.warnings == ()


def test_incompatible_kv_layout(repo, engines, pristine):
    _build(pristine, _manifest(Phase.PREFILL),
           _manifest(Phase.DECODE, layout={"kv_dtype": KVDType.BF16}))
    assert validate_repo(repo).problems == (
        "router: prefill and decode cannot hand over KV: KV layout differs: kv_dtype prefill "
        "fp32 != decode bf16",)


def test_engine_for_wrong_target_and_phase(repo, engines, pristine):
    _build(pristine, _manifest(Phase.DECODE),
           _manifest(Phase.DECODE, target=Target.TRTLLM_0_21, layout={"tokens_per_block": 32}))
    assert validate_repo(repo).problems == (
        f"decode: engine {engines / 'decode'} was built for trtllm-0.21, the repository is "
        "reference",
        "decode: parameter tokens_per_block is 16, the engine's is 32",
        f"prefill: engine {engines / 'prefill'} is a decode engine, the model serves prefill",
        "router: prefill and decode cannot hand over KV: KV layout differs: tokens_per_block "
        "prefill 16 != decode 32",
        "router: prefill and decode cannot hand over KV: targets differ: prefill reference != "
        "decode trtllm-0.21",
    )


def test_engine_dir_without_manifest(repo, engines):
    (engines / "prefill").mkdir(parents=True)
    report = validate_repo(repo, require_engines=True)
    assert (f"prefill: {engines / 'prefill'} has no pdtrt-engine.json: its target and KV layout "
            "cannot be checked") in report.problems
    assert (f"aggregated: {engines / 'prefill'} has no pdtrt-engine.json: its target and KV "
            "layout cannot be checked") in report.problems


def test_a_removed_pool_with_a_url_is_served_elsewhere(repo):
    """A pool whose model lives in another server (its *_url set) is not a missing model."""
    shutil.rmtree(repo / "decode")
    _edit(repo, "router", 'key: "decode_url"\n  value: { string_value: ""',
          'key: "decode_url"\n  value: { string_value: "10.0.0.7:8001"')
    assert validate_repo(repo).problems == ()


@pytest.fixture(scope="module")
def trtllm_pristine(tmp_path_factory):
    """A generated trtllm-0.21 repository of the seed example (both ensembles)."""
    root = tmp_path_factory.mktemp("trtllm")
    generate_repo(load_deployment(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml"), root / "repo",
                  mode=RepoMode.BOTH, engines_root=root / "engines")
    return root / "repo"


_REQUIRED = ("gpt_model_type", "tokenizer_dir", "xgrammar_tokenizer_info_path",
             "guided_decoding_backend", "gpt_model_path")


@pytest.mark.parametrize("model", ["prefill", "decode", "aggregated"])
@pytest.mark.parametrize("name", _REQUIRED)
def test_a_missing_backend_parameter_is_a_load_failure(trtllm_pristine, tmp_path, model, name):
    repo = tmp_path / "repo"
    shutil.copytree(trtllm_pristine, repo)
    assert validate_repo(repo).problems == ()
    config = repo / model / "config.pbtxt"
    text = config.read_text()
    block = re.search(rf'\nparameters {{\n  key: "{name}"\n  value: {{[^\n]*\n}}\n', text)
    assert block is not None
    config.write_text(text.replace(block.group(0), ""))
    [problem] = validate_repo(repo).problems
    assert problem.startswith(f"{model}: parameter '{name}' is missing: the tensorrtllm backend "
                              "of TensorRT-LLM 0.21.0 does not load the model")
    assert "triton-inference-server/tensorrtllm_backend@c2e65b8:" in problem


def test_a_hand_edited_tensorrtllm_model_is_checked_too(trtllm_pristine, tmp_path):
    """No pdtrt-repo.json, NVIDIA's own model name: the backend decides what is checked."""
    repo = tmp_path / "repo"
    shutil.copytree(trtllm_pristine / "decode", repo / "tensorrt_llm")
    _edit(repo, "tensorrt_llm", 'name: "decode"', 'name: "tensorrt_llm"')
    _edit(repo, "tensorrt_llm", 'string_value: "0;1"', 'string_value: "0,1"')  # gpu_device_ids
    _edit(repo, "tensorrt_llm", 'value: { string_value: "false" }\n}\n\nparameters {\n  key: '
          '"enable_chunked_context"', 'value: { string_value: "off" }\n}\n\nparameters {\n  key: '
          '"enable_chunked_context"')
    problems = validate_repo(repo).problems
    assert problems == (
        "tensorrt_llm: parameter 'enable_kv_cache_reuse': 'off' is not a boolean (true/false, "
        "1/0): the backend ignores it and uses its default (true)",
        "tensorrt_llm: parameter 'gpu_device_ids' has 1 instance group(s) for 2 model "
        "instance(s): instance i takes group i modulo the groups, so instances would share "
        "ranks or GPUs",
        "tensorrt_llm: instance 1: 1 rank(s) but 2 GPU(s) x num_nodes 1: an instance's "
        "gpu_device_ids x num_nodes must equal its tp x pp x cp ranks")
