"""trtllm-1.2: the per-phase LLM-API options (golden files, reasons, phase differences), their
check against the pinned LlmArgs facts, the FP8 step's argv, and the target's spec rules.

Regenerate the golden options with ``.venv/bin/python -m pytest tests/targets/test_trtllm_1_2.py
--update-golden`` (tests/golden/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from buildspecs import write_spec

from pdtrt.blueprint.settings import SettingSource
from pdtrt.blueprint.steps import StepKind
from pdtrt.builder.plan import plan_build
from pdtrt.engine_io import KV_EVENT_BUFFER
from pdtrt.enums import Phase, Target
from pdtrt.errors import BuildRejected, SpecError
from pdtrt.facts.memory import GIB
from pdtrt.spec.load import load_deployment
from pdtrt.targets import trtllm_1_2
from pdtrt.targets.llm_args import load_llm_args, option_problems
from pdtrt.targets.llm_memory import MARGIN_BYTES, plan_memory
from pdtrt.targets.llm_options import LlmOption, cuda_graph_batch_sizes, options_mapping
from tests.conftest import EXAMPLES

EXAMPLE = "llama3-8b-h100-l40s"
FACTS = load_llm_args(Target.TRTLLM_1_2)


def _data() -> dict:
    return yaml.safe_load((EXAMPLES / f"{EXAMPLE}.yaml").read_text())


def _dep(tmp_path: Path, edit=lambda d: None):
    data = _data()
    edit(data)
    return load_deployment(write_spec(tmp_path, data))


def _options(plan, phase: Phase) -> dict:
    step = plan.phase(phase).steps[-1]  # a phase's own options are its last step
    assert step.kind is StepKind.LLM_OPTIONS
    return yaml.safe_load(step.content)


def _aggregated(plan) -> dict:
    [step] = [s for s in plan.steps if s.name == "aggregated-llm-options"]
    assert step.phase is Phase.PREFILL and step.output_dir.name == "aggregated"
    return yaml.safe_load(step.content)


@pytest.fixture(scope="module")
def plan():
    return plan_build(load_deployment(EXAMPLES / f"{EXAMPLE}.yaml"),
                      engines_root=Path("engines"))


@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_golden_options_file(plan, phase, golden):
    step = plan.phase(phase).steps[-1]
    assert step.kind is StepKind.LLM_OPTIONS and step.argv == ()
    assert step.output_dir == Path(f"engines/{EXAMPLE}/{phase}")
    golden(f"build/llm-options-{EXAMPLE}-{phase}.yaml", step.content)


def test_golden_aggregated_options_file(plan, golden):
    [step] = [s for s in plan.steps if s.name == "aggregated-llm-options"]
    assert step.output_dir == Path(f"engines/{EXAMPLE}/aggregated")
    golden(f"build/llm-options-{EXAMPLE}-aggregated.yaml", step.content)


def test_the_aggregated_baseline_is_served_as_one_engine_not_as_a_context_server(plan):
    prefill, decode, agg = (_options(plan, Phase.PREFILL), _options(plan, Phase.DECODE),
                            _aggregated(plan))
    # the prefill's checkpoint and token budget, the decode's concurrency
    assert (agg["max_num_tokens"], agg["max_batch_size"]) == (prefill["max_num_tokens"],
                                                              decode["max_batch_size"])
    assert agg["disable_overlap_scheduler"] is False and prefill["disable_overlap_scheduler"]
    assert agg["cuda_graph_config"]["batch_sizes"][-1] == decode["max_batch_size"]
    assert agg["kv_cache_config"]["enable_block_reuse"] is True  # sends no KV: #12542 moot
    assert "cache_transceiver_config" not in agg
    # on the H100 with no transfer buffer, it gets a larger share than the decode's L40S
    assert agg["kv_cache_config"]["free_gpu_memory_fraction"] >= 0.9
    assert option_problems(FACTS, agg) == []  # names and types LlmArgs 1.2 accepts


def test_the_phases_differ_where_the_phases_differ(plan):
    prefill, decode = _options(plan, Phase.PREFILL), _options(plan, Phase.DECODE)
    assert (prefill["max_batch_size"], decode["max_batch_size"]) == (8, 92)
    assert (prefill["max_num_tokens"], decode["max_num_tokens"]) == (16384, 512)
    assert (prefill["disable_overlap_scheduler"], decode["disable_overlap_scheduler"]) == (
        True, False)
    assert prefill["cuda_graph_config"] is None
    assert decode["cuda_graph_config"] == {"batch_sizes": [1, 2, 4, 8, 16, 32, 64, 92],
                                           "enable_padding": True}
    for options in (prefill, decode):
        assert options["kv_cache_config"]["enable_block_reuse"] is False
        assert options["kv_cache_config"]["dtype"] == "fp8"
        assert options["cache_transceiver_config"] == {
            "backend": "UCX", "max_tokens_in_buffer": 8192, "kv_transfer_timeout_ms": 30000}
        assert option_problems(FACTS, options) == []


def test_every_option_shows_in_the_plan_with_its_reason(plan):
    settings = plan.phase(Phase.DECODE).settings.values
    graphs = settings["cuda_graph_config.batch_sizes"]
    assert (graphs.value, graphs.source) == ("1,2,4,8,16,32,64,92", SettingSource.COMPUTED)
    assert "powers of two below max_batch_size 92" in graphs.why
    buffer = settings["cache_transceiver_config.max_tokens_in_buffer"]
    assert buffer.why == ("kv_transfer.buffer_size_bytes 536870912 B / 65536 B of KV per token "
                          "per rank, rounded down to tokens_per_block 32")
    assert settings["cache_transceiver_config.kv_transfer_timeout_ms"].why == (
        "kv_transfer.timeout_s 30 x 1000: a transfer from a prefill that died fails then "
        "instead of hanging")
    prefill = plan.phase(Phase.PREFILL).settings.values
    assert "no earlier" in prefill["cache_transceiver_config.kv_transfer_timeout_ms"].why
    assert prefill["enable_iter_perf_stats"].value == "true"  # else get_stats returns nothing


def test_each_phase_names_its_sampler_with_the_reason(plan, tmp_path):
    for phase in Phase:
        assert _options(plan, phase)["sampler_type"] == "TRTLLMSampler"  # never LlmArgs' auto
        why = plan.phase(phase).settings.values["sampler_type"].why
        assert why.startswith(f"{phase}.engine.sampler TRTLLMSampler: the ensemble takes "
                              "NVIDIA's sampling inputs")
        assert all(f"#{n}" in why for n in (16485, 16052, 17172, 12166, 5328))
    torch = plan_build(_dep(tmp_path, lambda d: [d[p].setdefault("engine", {}).update(
        sampler="TorchSampler") for p in ("prefill", "decode")]), engines_root=Path("engines"))
    options = _options(torch, Phase.DECODE)
    assert options["sampler_type"] == "TorchSampler" and option_problems(FACTS, options) == []
    assert "the engine model refuses requests" in \
        torch.phase(Phase.DECODE).settings.values["sampler_type"].why


def test_a_buffer_smaller_than_the_longest_prompt_is_refused(tmp_path):
    dep = _dep(tmp_path, lambda d: d["kv_transfer"].update(buffer_size_bytes=64 << 20))
    with pytest.raises(BuildRejected) as err:
        plan_build(dep, engines_root=tmp_path / "engines")
    assert err.value.reasons[0] == (
        "prefill: the KV-transfer buffer holds 1024 tokens (kv_transfer.buffer_size_bytes "
        "67108864 B / 65536 B of KV per token per rank, rounded down to tokens_per_block 32), "
        "fewer than the longest prompt, max_input_len 4096: a prompt's KV must fit it whole")


def _seeded(monkeypatch, option: LlmOption) -> None:
    real = trtllm_1_2.phase_options
    monkeypatch.setattr(trtllm_1_2, "phase_options",
                        lambda *args: (*real(*args), option))


@pytest.mark.parametrize(("key", "value", "message"), [
    ("kv_cache_config.enable_block_resue", False,
     "kv_cache_config.enable_block_resue: KvCacheConfig has no field 'enable_block_resue' "
     "(did you mean 'enable_block_reuse'?)"),
    ("disable_overlap_schedular", True,
     "disable_overlap_schedular: TorchLlmArgs has no field 'disable_overlap_schedular' "
     "(did you mean 'disable_overlap_scheduler'?)"),
    ("cache_transceiver_config.backend", "ucx",
     "cache_transceiver_config.backend: 'ucx' is not one of DEFAULT, UCX, NIXL, MOONCAKE, MPI "
     "(did you mean 'UCX'?)"),
    ("kv_cache_config.free_gpu_memory_fraction", "0.9",
     "kv_cache_config.free_gpu_memory_fraction: expected a number, got '0.9'"),
    ("cache_transceiver_config.kv_transfer_timeout_ms", 0,
     "cache_transceiver_config.kv_transfer_timeout_ms: 0 is not > 0"),
], ids=["misspelt-nested-key", "misspelt-key", "enum-case", "wrong-type", "bound"])
def test_a_bad_option_is_a_build_error_naming_key_and_file(monkeypatch, tmp_path, key, value,
                                                           message):
    _seeded(monkeypatch, LlmOption(key=key, value=value, source=SettingSource.COMPUTED,
                                   why="seeded"))
    dep = _dep(tmp_path)
    with pytest.raises(BuildRejected) as err:
        plan_build(dep, engines_root=tmp_path / "engines")
    file = tmp_path / "engines" / EXAMPLE / "prefill" / "extra_llm_api_options.yaml"
    assert err.value.reasons[0] == f"{file}: {message}"
    assert "llm_args.py @ 1b1598c0c25f" in err.value.reasons[-1]


def test_fp8_weights_quantize_with_modelopt_first(tmp_path, monkeypatch):
    monkeypatch.delenv("PDTRT_TRTLLM_EXAMPLES", raising=False)
    dep = _dep(tmp_path, lambda d: d["model"].update(weights="fp8"))
    plan = plan_build(dep, engines_root=Path("engines"))
    quantize, options = plan.phase(Phase.DECODE).steps
    assert quantize.kind is StepKind.HF_PTQ and quantize.gpu.key == "l40s"
    assert list(quantize.argv) == [
        "python3", "/opt/Model-Optimizer/examples/llm_ptq/hf_ptq.py",
        "--pyt_ckpt_path", "models/meta-llama/Meta-Llama-3.1-8B",
        "--export_path", f"engines/{EXAMPLE}/checkpoints/decode",
        "--qformat", "fp8", "--kv_cache_qformat", "fp8", "--calib_size", "512",
        "--batch_size", "1"]
    assert options.kind is StepKind.LLM_OPTIONS
    assert quantize.output_dir == Path(f"engines/{EXAMPLE}/checkpoints/decode")


def test_without_fp8_weights_no_step_needs_a_gpu(plan):
    assert all(s.gpu is None and s.in_process for s in plan.steps)
    assert plan.phase(Phase.PREFILL).notes == (
        "prefill: FP8 KV cache on bf16 weights: no calibrated KV scales (FP8 weights export "
        "them with ModelOpt)",)


@pytest.mark.parametrize(("edit", "path", "text"), [
    (lambda d: d["model"].update(kv_cache_dtype="int8"), "model.kv_cache_dtype",
     "trtllm-1.2 keeps the KV cache in the model dtype (bf16) or fp8, not int8"),
    (lambda d: d["model"].update(weights="int4-awq"), "model.weights",
     "trtllm-1.2 builds prefill weights none or fp8 (ModelOpt FP8), not int4-awq"),
], ids=["int8-kv", "int4-weights"])
def test_the_targets_spec_rules(tmp_path, edit, path, text):
    with pytest.raises(SpecError) as err:
        _dep(tmp_path, edit)
    assert any(i.path == path and i.message == text for i in err.value.issues), err.value.message


@pytest.mark.parametrize(("batch", "sizes"), [(1, (1,)), (8, (1, 2, 4, 8)),
                                              (92, (1, 2, 4, 8, 16, 32, 64, 92))])
def test_cuda_graph_batch_sizes(batch, sizes):
    assert cuda_graph_batch_sizes(batch) == sizes


def test_nested_options_become_one_mapping():
    options = (LlmOption(key="a.b", value=(1, 2), source=SettingSource.SPEC, why=""),
               LlmOption(key="a.c", value=None, source=SettingSource.SPEC, why=""),
               LlmOption(key="d", value=0.5, source=SettingSource.SPEC, why=""))
    assert options_mapping(options) == {"a": {"b": [1, 2], "c": None}, "d": 0.5}


def test_block_reuse_asked_of_a_pool_turns_it_on_with_kv_events_there_only(tmp_path):
    def reuse_on_decode(data):
        data["decode"]["engine"]["enable_block_reuse"] = True
    plan = plan_build(_dep(tmp_path, reuse_on_decode), engines_root=Path("engines"))
    decode, prefill = _options(plan, Phase.DECODE), _options(plan, Phase.PREFILL)
    assert decode["kv_cache_config"]["enable_block_reuse"] is True
    assert decode["kv_cache_config"]["event_buffer_max_size"] == KV_EVENT_BUFFER  # > 0: events
    assert prefill["kv_cache_config"]["enable_block_reuse"] is False
    assert "event_buffer_max_size" not in prefill["kv_cache_config"]
    assert _aggregated(plan)["kv_cache_config"]["event_buffer_max_size"] == KV_EVENT_BUFFER
    assert option_problems(FACTS, decode) == []  # names and types LlmArgs 1.2 accepts
    assert not [n for n in plan.phase(Phase.DECODE).notes + plan.phase(Phase.PREFILL).notes
                if "#12542" in n]  # a decode's reuse sends nothing: no warning


def test_block_reuse_on_the_prefill_warns_of_12542_and_names_the_routers_bound(tmp_path):
    def reuse_on_prefill(data):
        data["prefill"]["engine"]["enable_block_reuse"] = True
    plan = plan_build(_dep(tmp_path, reuse_on_prefill), engines_root=Path("engines"))
    [note] = [n for n in plan.phase(Phase.PREFILL).notes if "#12542" in n]
    assert "waiting for the KV forever" in note and "kv_transfer.timeout_s + 10 s" in note


def _decode_memory(plan, dep):
    return plan_memory(dep, Phase.DECODE, plan.phase(Phase.DECODE).settings)


def test_the_l40s_decode_leaves_at_least_the_margin(plan):
    dep = load_deployment(EXAMPLES / f"{EXAMPLE}.yaml")  # no fraction in the spec: computed
    memory = _decode_memory(plan, dep)
    # free: 48 GiB - 14.96 weights - 3.5 runtime - 0.04 activations - 0.5 buffer = 29.00 GiB;
    # graphs for 1..92: 8 x 32 MiB + 219 tokens x 599040 B = 0.37 GiB;
    # 1 - (2 + 0.37) / 29.00 = 0.918 -> 0.91
    assert (memory.fraction, memory.fraction_source) == (0.91, SettingSource.COMPUTED)
    assert memory.graph_sizes == (1, 2, 4, 8, 16, 32, 64, 92) and not memory.dropped_sizes
    assert memory.headroom_bytes >= MARGIN_BYTES
    assert memory.kv_bytes // memory.seq_bytes >= 92  # the largest captured batch fits its KV
    options = _options(plan, Phase.DECODE)
    assert options["kv_cache_config"]["free_gpu_memory_fraction"] == 0.91
    why = plan.phase(Phase.DECODE).settings.values["kv_cache_config.free_gpu_memory_fraction"].why
    assert why == (
        "1 - (margin 2.00 GiB + CUDA graphs 0.37 GiB) / 29.00 GiB free = 0.918, rounded down to "
        "0.01, at most 0.95 (NVIDIA's benchmark setting); KV 0.91 x 29.00 GiB free (l40s 48.00 "
        "GiB - weights 14.96 GiB - runtime 3.50 GiB - activations 0.04 GiB - transfer buffer "
        "0.50 GiB) = 26.39 GiB, leaving 2.61 GiB: CUDA graphs 0.37 GiB + 2.24 GiB (margin 2.00 "
        "GiB)")
    prefill = _options(plan, Phase.PREFILL)  # no graphs: the cap, 0.95
    assert prefill["kv_cache_config"]["free_gpu_memory_fraction"] == 0.95


def test_the_issues_l40s_figure_at_0_9(tmp_path):
    # issue 48: "free_gpu_memory_fraction 0.9 with CUDA graphs to batch 92 and a 512 MiB
    # transfer buffer leaves ~3 GB": 0.1 x 29.00 GiB = 2.90 GiB, 2.53 GiB after the graphs
    dep = _dep(tmp_path, lambda d: d["decode"]["engine"].update(
        kv_cache_free_gpu_mem_fraction=0.9))
    plan = plan_build(dep, engines_root=Path("engines"))
    memory = _decode_memory(plan, dep)
    assert round((memory.free_bytes - memory.kv_bytes) / GIB, 2) == 2.90
    assert round(memory.headroom_bytes / GIB, 2) == 2.53
    assert not [n for n in plan.phase(Phase.DECODE).notes if "margin" in n]


def test_an_explicit_spec_fraction_is_kept_with_a_note_when_it_leaves_less(tmp_path):
    dep = _dep(tmp_path, lambda d: d["decode"]["engine"].update(
        kv_cache_free_gpu_mem_fraction=0.97))
    plan = plan_build(dep, engines_root=Path("engines"))
    setting = plan.phase(Phase.DECODE).settings.values["kv_cache_config.free_gpu_memory_fraction"]
    assert (setting.value, setting.source) == ("0.97", SettingSource.SPEC)  # as shown
    assert setting.why.startswith("decode.engine.kv_cache_free_gpu_mem_fraction, kept: KV 0.97")
    assert _options(plan, Phase.DECODE)["kv_cache_config"]["free_gpu_memory_fraction"] == 0.97
    [note] = [n for n in plan.phase(Phase.DECODE).notes if "margin" in n]
    assert note.startswith("decode: decode.engine.kv_cache_free_gpu_mem_fraction 0.97 (the "
                           "spec's, kept): KV 0.97 x 29.00 GiB free")
    assert note.endswith("leaving 0.87 GiB: CUDA graphs 0.38 GiB + 0.49 GiB (margin 2.00 GiB): "
                         "less than the margin, so an allocation after the KV cache may run "
                         "out of memory; pdtrt's estimate would give 0.91 (omit the key to use "
                         "it)")
    # 0.97 still leaves the graphs room (the batch is 100 here: sized by the spec's fraction)
    assert _options(plan, Phase.DECODE)["cuda_graph_config"]["batch_sizes"][-1] == 100


def test_graphs_that_do_not_fit_beside_an_explicit_fraction_are_dropped(tmp_path):
    dep = _dep(tmp_path, lambda d: d["decode"]["engine"].update(
        kv_cache_free_gpu_mem_fraction=0.99))
    plan = plan_build(dep, engines_root=Path("engines"))
    graphs = _options(plan, Phase.DECODE)["cuda_graph_config"]
    assert graphs["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64]  # 102 dropped
    assert "decode: no CUDA graphs for batch sizes 102: their graphs would not fit beside the " \
        "KV cache (such batches run eagerly)" in plan.phase(Phase.DECODE).notes


def test_a_gpu_too_small_for_weights_buffer_and_margin_is_refused(tmp_path):
    def on_l4(data):
        data["prefill"]["gpu"] = "l4"
        data["kv_transfer"]["buffer_size_bytes"] = 4 << 30
    with pytest.raises(BuildRejected) as err:
        plan_build(_dep(tmp_path, on_l4), engines_root=tmp_path / "engines")
    assert err.value.reasons[0] == (
        "prefill: 0.23 GiB free (l4 24.00 GiB - weights 14.96 GiB - runtime 3.50 GiB - "
        "activations 1.31 GiB - transfer buffer 4.00 GiB) is less than the 2.00 GiB margin: no "
        "room for a KV cache on this GPU; use one with more memory, FP8 weights, a larger TP, "
        "or a smaller kv_transfer.buffer_size_bytes or max_num_tokens")


def test_stream_interval_goes_to_the_decode_and_the_aggregated_baseline_only(plan, tmp_path):
    assert _options(plan, Phase.DECODE)["stream_interval"] == 1  # written, never left implicit
    assert "stream_interval" not in _options(plan, Phase.PREFILL)  # one token per request

    def every_fourth(data):
        data["decode"]["engine"]["stream_interval"] = 4
    four = plan_build(_dep(tmp_path, every_fourth), engines_root=Path("engines"))
    decode, aggregated = _options(four, Phase.DECODE), _aggregated(four)
    assert decode["stream_interval"] == aggregated["stream_interval"] == 4
    assert "stream_interval" not in _options(four, Phase.PREFILL)
    assert option_problems(FACTS, decode) == option_problems(FACTS, aggregated) == []
    why = four.phase(Phase.DECODE).settings.values["stream_interval"].why
    assert why.startswith("decode.engine.stream_interval 4: a streaming request is answered "
                          "at its first token, every 4th iteration after and at its end")
