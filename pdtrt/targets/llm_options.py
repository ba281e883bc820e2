"""The per-phase LLM-API options of target trtllm-1.2: what "built for the phase and the GPU" is.

With the PyTorch flow there is no engine to build: ``tensorrt_llm.LLM(model=..., **options)``
loads the checkpoint and sizes itself from an options file (TensorRT-LLM's
``extra_llm_api_options`` YAML). :func:`phase_options` computes every value of that file from
the phase's settings (:mod:`pdtrt.blueprint.settings`: spec > profile > model facts), the pool,
the GPU and the phase, each as an :class:`LlmOption` with the reason it is what it is;
:func:`options_yaml` renders them deterministically. The values differ where the phases differ:
the prefill phase gets no CUDA graphs (its batches hold context requests, which graphs never
capture) and the overlap scheduler off (TensorRT-LLM's context servers do not support it); the
decode phase gets CUDA graphs for its batch sizes, keeps the overlap scheduler and takes the
spec's ``stream_interval``. Both get UCX cache transceivers and KV block reuse off. The
aggregated baseline (``--mode both`` / ``aggregated``) gets a file of its own
(:func:`aggregated_options`): the prefill's engine with the decode's batch and
``stream_interval``, served the way TensorRT-LLM serves one engine by default (overlap, CUDA
graphs, block reuse, chunked prefill where a prompt outgrows a step), no transceiver -- not the
prefill's context-only settings, which would make it a weak comparison.

Checking the keys against the pinned version's ``LlmArgs`` is :mod:`pdtrt.targets.llm_args`;
writing the file is the target's in-process build step (:mod:`pdtrt.targets.trtllm_1_2`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.settings import EngineSettings, Setting, SettingSource
from pdtrt.blueprint.triton_models import param_number
from pdtrt.engine_io import KV_EVENT_BUFFER
from pdtrt.enums import KVDType, Phase, Sampler
from pdtrt.errors import BuildRejected
from pdtrt.targets.llm_args import LlmArgsFacts, option_problems
from pdtrt.targets.llm_memory import PhaseMemory, cuda_graph_batch_sizes, plan_memory

__all__ = ["OPTIONS_FILE", "LlmOption", "aggregated_options", "aggregated_settings",
           "check_options", "cuda_graph_batch_sizes", "options_mapping", "options_yaml",
           "phase_options", "with_options"]

OPTIONS_FILE = "extra_llm_api_options.yaml"  # in the phase's directory

OptionValue = int | float | bool | str | tuple[int, ...] | None


@dataclass(frozen=True, kw_only=True)
class LlmOption:
    key: str  # dotted path into the options mapping: kv_cache_config.dtype
    value: OptionValue
    source: SettingSource
    why: str

    @property
    def shown(self) -> int | str | bool | None:
        """The value as a plan setting shows it (booleans, floats and lists as text)."""
        if isinstance(self.value, bool):
            return "true" if self.value else "false"  # the YAML's spelling
        if isinstance(self.value, tuple):
            return ",".join(map(str, self.value))
        if isinstance(self.value, float):
            return param_number(self.value)
        return self.value


def _from(settings: EngineSettings, name: str, key: str | None = None) -> LlmOption:
    s: Setting = settings.values[name]
    return LlmOption(key=key or name, value=s.value, source=s.source, why=s.why)


def _computed(key: str, value: OptionValue, why: str) -> LlmOption:
    return LlmOption(key=key, value=value, source=SettingSource.COMPUTED, why=why)


def _block_reuse(enabled: bool, phase: Phase) -> tuple[LlmOption, ...]:
    """Block reuse off unless the spec asks (TensorRT-LLM #12542); on, with the event buffer
    the engine model drains for the router's KV index."""
    if not enabled:
        return (_computed("kv_cache_config.enable_block_reuse", False,
                          "disaggregated serving: a block evicted from the reuse tree before "
                          "its asynchronous send finished hangs the transfer (TensorRT-LLM "
                          f"#12542); {phase}.engine.enable_block_reuse turns it on"),)
    return (LlmOption(key="kv_cache_config.enable_block_reuse", value=True,
                      source=SettingSource.SPEC, why=f"{phase}.engine.enable_block_reuse"),
            _computed("kv_cache_config.event_buffer_max_size", KV_EVENT_BUFFER,
                      "KV cache events for the router's KV index (0, the default, records "
                      "none); the engine model drains them every 50 ms"))


# Why each sampler, for the options file's header (docs/spec.md, "The sampler").
_SAMPLER_WHY = {
    Sampler.TRTLLM: "the ensemble takes NVIDIA's sampling inputs (penalties, bad words, "
    "per-request seed, min_length), which 1.2's TorchSampler ignores (TensorRT-LLM #16485, "
    "#16052, #17172, #12166); the C++ sampler applies them and serves disaggregated requests "
    "(#5328); speculative decoding would need TorchSampler",
    Sampler.TORCH: "the engine model refuses requests with the inputs 1.2's TorchSampler "
    "ignores (penalties, bad words, a sampled request's seed, min_length > 1: TensorRT-LLM "
    "#16485, #16052, #17172, #12166); TRTLLMSampler applies them",
}


def _sampler(dep: Deployment, phase: Phase) -> LlmOption:
    """Always written, never left to LlmArgs' ``auto`` (TorchSampler at beam width 1): which
    sampler runs decides what a request's sampling inputs do."""
    sampler = dep.spec.pool(phase).engine.sampler
    return LlmOption(key="sampler_type", value=str(sampler), source=SettingSource.SPEC,
                     why=f"{phase}.engine.sampler {sampler}: {_SAMPLER_WHY[sampler]}")


def _stream_interval(dep: Deployment) -> LlmOption:
    """The decode's response cadence, for the decode and the aggregated baseline (the prefill's
    context-only requests make one token: it gets none)."""
    value = dep.spec.decode.engine.stream_interval
    cadence = "a response per token" if value == 1 else (
        f"a streaming request is answered at its first token, every {value}th iteration "
        "after and at its end, each response holding the tokens since the one before")
    return LlmOption(key="stream_interval", value=value, source=SettingSource.SPEC,
                     why=f"decode.engine.stream_interval {value}: {cadence} (TensorRT-LLM's "
                     "PyExecutor._handle_responses)")


def _kv_dtype(dep: Deployment, phase: Phase) -> LlmOption:
    kv, model_dtype = dep.spec.kv_cache_dtype(phase), dep.spec.model.dtype
    if kv is KVDType.FP8:
        return LlmOption(key="kv_cache_config.dtype", value="fp8", source=SettingSource.SPEC,
                         why="model.kv_cache_dtype fp8")
    return LlmOption(key="kv_cache_config.dtype", value="auto", source=SettingSource.SPEC,
                     why=f"model.kv_cache_dtype {kv} = model.dtype {model_dtype}: auto keeps "
                     "the checkpoint's dtype")


def _transfer_buffer(dep: Deployment, phase: Phase, settings: EngineSettings) -> LlmOption:
    """Tokens of the KV-transfer buffer: the spec's bytes over one token's KV on one rank."""
    spec, pool = dep.spec, dep.spec.pool(phase)
    per_token = dep.model.kv_bytes_per_token(spec.kv_cache_dtype(phase), tp=pool.tp, pp=pool.pp)
    tpb = int(settings["tokens_per_block"])
    tokens = spec.kv_transfer.buffer_size_bytes // per_token // tpb * tpb
    longest = int(settings["max_input_len"])
    why = (f"kv_transfer.buffer_size_bytes {spec.kv_transfer.buffer_size_bytes} B / "
           f"{per_token} B of KV per token per rank, rounded down to tokens_per_block {tpb}")
    if tokens < longest:
        raise BuildRejected([
            f"{phase}: the KV-transfer buffer holds {tokens} tokens ({why}), fewer than the "
            f"longest prompt, max_input_len {longest}: a prompt's KV must fit it whole"],
            hint="raise kv_transfer.buffer_size_bytes, use fp8 KV, or lower max_input_len")
    return _computed("cache_transceiver_config.max_tokens_in_buffer", tokens, why)


def _graphs(memory: PhaseMemory, batch: int, *,
            what: str = "decode batches are generation-only, which CUDA graphs capture"
            ) -> list[LlmOption]:
    """CUDA graphs for generation batches: every size the memory leaves room for (none: no
    graphs)."""
    sizes = memory.graph_sizes
    why = f"{what}: powers of two below max_batch_size {batch}, and {batch}"
    if memory.dropped_sizes:
        why += (f"; not {','.join(map(str, memory.dropped_sizes))}: their graphs would not fit "
                "beside the KV cache")
    if not sizes:
        return [_computed("cuda_graph_config", None, why)]
    why += (f"; est. {memory.graph_bytes / (1 << 30):.2f} GiB (per size b: 32 MiB + b tokens "
            "of activations and float32 logits)")
    return [_computed("cuda_graph_config.batch_sizes", sizes, why),
            _computed("cuda_graph_config.enable_padding", True,
                      "a batch runs the graph of the next captured size up")]


def _fraction(memory: PhaseMemory, phase: Phase) -> LlmOption:
    if memory.fraction_source is SettingSource.SPEC:
        why = f"{phase}.engine.kv_cache_free_gpu_mem_fraction, kept: " + memory.arithmetic()
    else:
        why = f"{memory.computed()}; {memory.arithmetic()}"
    return LlmOption(key="kv_cache_config.free_gpu_memory_fraction", value=memory.fraction,
                     source=memory.fraction_source, why=why)


def _phase_specific(dep: Deployment, phase: Phase, settings: EngineSettings,
                    memory: PhaseMemory) -> list[LlmOption]:
    batch, budget = int(settings["max_batch_size"]), int(settings["max_num_tokens"])
    longest = int(settings["max_input_len"])
    if phase is Phase.PREFILL:
        chunked = longest > budget
        return [
            _computed("enable_chunked_prefill", chunked,
                      f"max_input_len {longest} {'>' if chunked else '<='} max_num_tokens "
                      f"{budget}: " + ("a prompt is split over steps" if chunked else
                                       "a whole prompt fits one step, no chunking needed")),
            _computed("disable_overlap_scheduler", True,
                      "context-only requests: TensorRT-LLM 1.2's worker refuses them while the "
                      "overlap scheduler is on (executor/base_worker.py _enqueue_request; the "
                      "guard left main with #12816, after 1.2.1)"),
            _computed("cuda_graph_config", None,
                      "prefill batches hold context requests, which CUDA graphs never capture; "
                      "none saves the graphs' memory"),
        ]
    return [
        _computed("enable_chunked_prefill", False,
                  "generation-only requests: the prompt arrives as transferred KV, nothing "
                  "to chunk"),
        _computed("disable_overlap_scheduler", False,
                  "decode steps overlap the host's scheduling with the GPU's step"),
        *_graphs(memory, batch),
        _stream_interval(dep),
    ]


def _limits(dep: Deployment, phase: Phase, settings: EngineSettings, memory: PhaseMemory,
            reuse: tuple[LlmOption, ...]) -> tuple[LlmOption, ...]:
    """The options every file starts with: parallelism, limits, sampler, KV cache."""
    pool = dep.spec.pool(phase)
    return (
        LlmOption(key="tensor_parallel_size", value=pool.tp, source=SettingSource.SPEC,
                  why=f"{phase}.tp"),
        LlmOption(key="pipeline_parallel_size", value=pool.pp, source=SettingSource.SPEC,
                  why=f"{phase}.pp"),
        _from(settings, "max_batch_size"),
        _from(settings, "max_num_tokens"),
        _from(settings, "max_input_len"),
        _from(settings, "max_seq_len"),
        _from(settings, "max_beam_width"),
        _sampler(dep, phase),
        _computed("enable_iter_perf_stats", True,
                  "without it TensorRT-LLM's get_stats returns nothing, so the engine model's "
                  "queue and KV-usage metrics stay empty"),
        _kv_dtype(dep, phase),
        _fraction(memory, phase),
        _from(settings, "tokens_per_block", "kv_cache_config.tokens_per_block"),
        *reuse,
        _computed("scheduler_config.capacity_scheduler_policy", "GUARANTEED_NO_EVICT",
                  "a request once scheduled keeps its KV blocks to the end (as trtllm-0.21)"),
    )


def phase_options(dep: Deployment, phase: Phase, settings: EngineSettings,
                  memory: PhaseMemory | None = None) -> tuple[LlmOption, ...]:
    """Every option of ``phase``'s file, in the file's order, for ``memory``
    (:func:`pdtrt.targets.llm_memory.plan_memory`, computed here when not given); raises
    :class:`BuildRejected` when the spec's KV-transfer buffer cannot hold the longest prompt or
    the GPU has no room for the KV cache."""
    spec, pool = dep.spec, dep.spec.pool(phase)
    memory = memory or plan_memory(dep, phase, settings)
    timeout_ms = round(spec.kv_transfer.timeout_s * 1000)
    return (
        *_limits(dep, phase, settings, memory, _block_reuse(pool.engine.enable_block_reuse,
                                                            phase)),
        *_phase_specific(dep, phase, settings, memory),
        LlmOption(key="cache_transceiver_config.backend", value="UCX",
                  source=SettingSource.SPEC, why=f"kv_transfer.backend {spec.kv_transfer.backend}"),
        _transfer_buffer(dep, phase, settings),
        LlmOption(key="cache_transceiver_config.kv_transfer_timeout_ms", value=timeout_ms,
                  source=SettingSource.SPEC,
                  why=f"kv_transfer.timeout_s {param_number(spec.kv_transfer.timeout_s)} x 1000: "
                  + _TIMEOUT_WHY[phase]),
    )


def aggregated_settings(prefill: EngineSettings, decode: EngineSettings) -> EngineSettings:
    """The aggregated baseline's limits: the prefill engine's (it serves the same checkpoint
    on the prefill's GPU), with the decode's ``max_batch_size``: it carries every request's
    generation too, so it must hold as many at once as the decode pool."""
    values = dict(prefill.values)
    batch = decode.values["max_batch_size"]
    values["max_batch_size"] = Setting(
        value=batch.value, source=batch.source,
        why=f"the decode's, as the baseline generates too: {batch.why}")
    return EngineSettings(phase=Phase.PREFILL, profile=prefill.profile, values=values)


def aggregated_options(dep: Deployment, settings: EngineSettings,
                       memory: PhaseMemory) -> tuple[LlmOption, ...]:
    """The aggregated baseline's file (``settings`` from :func:`aggregated_settings`,
    ``memory`` planned with ``aggregated=True``): one engine that runs context and generation
    as TensorRT-LLM serves by default -- chunked prefill where a prompt outgrows a step, the
    overlap scheduler, CUDA graphs for its generation batches, block reuse on (no KV is
    sent, so #12542 cannot hang it) -- and no cache transceiver."""
    batch, budget = int(settings["max_batch_size"]), int(settings["max_num_tokens"])
    longest = int(settings["max_input_len"])
    chunked = longest > budget
    reuse = (LlmOption(key="kv_cache_config.enable_block_reuse", value=True,
                       source=SettingSource.COMPUTED,
                       why="TensorRT-LLM's default; the disaggregated hang it risks "
                       "(TensorRT-LLM #12542) needs a KV transfer, which the baseline never "
                       "makes"),
             _computed("kv_cache_config.event_buffer_max_size", KV_EVENT_BUFFER,
                       "KV cache events for the router's KV index (0, the default, records "
                       "none); the engine model drains them every 50 ms"))
    return (
        *_limits(dep, Phase.PREFILL, settings, memory, reuse),
        _computed("enable_chunked_prefill", chunked,
                  f"max_input_len {longest} {'>' if chunked else '<='} max_num_tokens {budget}"
                  + (": a prompt is split over steps, so generation steps go on beside it"
                     if chunked else ": a whole prompt fits one step")),
        _computed("disable_overlap_scheduler", False,
                  "the baseline's requests run context and generation in one engine, which "
                  "TensorRT-LLM overlaps by default"),
        *_graphs(memory, batch, what="its generation-only steps are what CUDA graphs capture "
                 "(steps with a prompt in them run without)"),
        _stream_interval(dep),
    )


# Why each phase gets kv_transfer_timeout_ms (unset, TensorRT-LLM 1.2 waits forever).
_TIMEOUT_WHY = {
    Phase.PREFILL: "a KV no decode pulls (cancel, decode failure) is freed then and no earlier",
    Phase.DECODE: "a transfer from a prefill that died fails then instead of hanging",
}


def options_mapping(options: tuple[LlmOption, ...]) -> dict[str, object]:
    """The nested mapping the LLM API takes (``None`` a null; tuples as lists)."""
    out: dict[str, object] = {}
    for option in options:
        *parents, leaf = option.key.split(".")
        node = out
        for part in parents:
            child = node.setdefault(part, {})
            assert isinstance(child, dict), f"{option.key}: {part} is both a value and a map"
            node = child
        node[leaf] = list(option.value) if isinstance(option.value, tuple) else option.value
    return out


def check_options(facts: LlmArgsFacts, options: dict[str, object], *, file: Path) -> None:
    """Raise :class:`BuildRejected` naming ``file`` and each key the LLM API would refuse."""
    problems = option_problems(facts, options)
    if problems:
        raise BuildRejected(
            [f"{file}: {p}" for p in problems]
            + [f"{file}: the LLM API forbids unknown keys; its fields as of {facts.cite()} "
               "are in pdtrt/data/targets/trtllm-1.2-llm-args.yaml"])


def options_yaml(options: tuple[LlmOption, ...], *, serves: str, deployment: str) -> str:
    """The options file: a header giving every value's reason, then the YAML (stable order).
    ``serves``: what the file is for (``phase prefill``, ``the aggregated baseline``)."""
    lines = [f"# Generated by `pdtrt build` for {deployment}, {serves} -- regenerate, "
             "do not edit.",
             "# tensorrt_llm.LLM(model=<llm_model>, **yaml.safe_load(this file)); why each "
             "value:"]
    lines += [f"#   {o.key}: {o.source}: {o.why}" for o in options]
    body = yaml.safe_dump(options_mapping(options), sort_keys=False, default_flow_style=None,
                          width=100)
    return "\n".join(lines) + "\n" + body


def with_options(settings: EngineSettings, options: tuple[LlmOption, ...]) -> EngineSettings:
    """``settings`` plus one entry per option the limits do not already show."""
    values = dict(settings.values)
    for option in options:
        if option.key not in values:
            values[option.key] = Setting(value=option.shown, source=option.source,
                                         why=option.why)
    return EngineSettings(phase=settings.phase, profile=settings.profile, values=values)
