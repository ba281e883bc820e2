"""What an LLM-API engine model serves: its role, the model the LLM API loads, the LLM-API options.

Two ways to say it in ``config.pbtxt`` (:class:`pdtrt.engine_io.Param`):

- ``llm_model`` + ``llm_options``: the checkpoint and the phase's LLM-API options file (the
  ``extra_llm_api_options`` YAML ``pdtrt build`` writes for the ``trtllm-1.2`` target), and
  ``gpu_device_ids``: each instance's GPUs, ``;`` between instances (``0,1;2,3``), which the
  instance makes its ``CUDA_VISIBLE_DEVICES`` before the LLM API starts;
- the reference target's parameters (``engine_dir``, ``max_batch_size``, ``max_num_tokens``,
  ``max_input_len``, ``max_seq_len``, ``tokens_per_block``, ``kv_transfer_timeout_s``,
  ``ucx_tls``, ``sampler_type``, ``stream_interval``), turned here into the same LLM-API
  options (``stream_interval`` under its own name): the KV block size
  goes to ``kv_cache_config.tokens_per_block`` (block reuse off, as for trtllm-1.2), the
  sampler to ``sampler_type`` (as the trtllm-1.2 options file names it), the prefill and
  decode roles get ``cache_transceiver_config`` (backend UCX, ``kv_transfer_timeout_ms``),
  ``max_beam_width`` comes from the engine's manifest, and the UCX transports become
  ``UCX_TLS`` (what UCX reads).

:func:`engine_limits` derives what a request may ask (prompt and sequence lengths, vocabulary,
beam width) from the options and the checkpoint's ``config.json`` -- read from where the LLM API
read the checkpoint: a local directory, or for a Hugging Face Hub name the Hub cache the LLM API
downloaded it into (``HF_HOME``, ``HF_TOKEN``) -- with the LLM API's defaults where the options
are silent. Every phase asks for iteration stats (``enable_iter_perf_stats``): without them
TensorRT-LLM's ``get_stats`` returns nothing and the queue and KV-usage gauges stay empty.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdtrt.engine_dir import build_setting
from pdtrt.engine_io import KV_EVENT_BUFFER, Param, Role
from pdtrt.runtime.request_parsing import EngineLimits

__all__ = ["LLMEngineConfig", "engine_limits", "kv_reuse_options"]

# LlmArgs defaults the limits fall back on (tensorrt_llm/llmapi/llm_args.py)
_DEFAULT_MAX_INPUT_LEN = 1024


@dataclass(frozen=True, kw_only=True)
class LLMEngineConfig:
    role: Role
    model: Path  # the checkpoint the LLM API loads
    options: Mapping[str, Any] = field(default_factory=dict)  # LLM-API options (LlmArgs names)
    ucx_tls: tuple[str, ...] = ()  # the reference target's UCX transports (UCX_TLS); () unset
    gpu_devices: tuple[tuple[int, ...], ...] = ()  # each instance's GPU ordinals; () unpinned

    @classmethod
    def from_params(cls, p: Mapping[str, str]) -> LLMEngineConfig:
        role = Role(p[Param.ROLE])
        if p.get(Param.LLM_MODEL):
            return cls(role=role, model=Path(p[Param.LLM_MODEL]),
                       options=_read_options(p.get(Param.LLM_OPTIONS, "")),
                       gpu_devices=_device_groups(p.get(Param.GPU_DEVICE_IDS, "")))
        engine_dir = Path(p[Param.ENGINE_DIR])
        options: dict[str, Any] = {
            "enable_iter_perf_stats": True,
            "max_batch_size": int(p[Param.MAX_BATCH_SIZE]),
            "max_num_tokens": int(p[Param.MAX_NUM_TOKENS]),
            "max_input_len": int(p[Param.MAX_INPUT_LEN]),
            "max_seq_len": int(p[Param.MAX_SEQ_LEN]),
            "max_beam_width": max_beam_width(engine_dir),
            # block reuse as the spec says (off unless asked, as pdtrt writes it for trtllm-1.2:
            # pdtrt/targets/llm_options.py), with KV events for the router's index when on
            "kv_cache_config": {"tokens_per_block": int(p[Param.TOKENS_PER_BLOCK]),
                                **kv_reuse_options(p.get(Param.ENABLE_BLOCK_REUSE) == "true")},
        }
        if p.get(Param.SAMPLER_TYPE):  # absent: LlmArgs' default, auto
            options["sampler_type"] = p[Param.SAMPLER_TYPE]
        if p.get(Param.STREAM_INTERVAL):  # absent: LlmArgs' default, 1 (a response per token)
            options["stream_interval"] = int(p[Param.STREAM_INTERVAL])
        if role.phase is not None:  # one phase alone: its KV crosses to or from the other
            options["cache_transceiver_config"] = {
                "backend": "UCX",
                "kv_transfer_timeout_ms": round(float(p[Param.KV_TRANSFER_TIMEOUT_S]) * 1000)}
        if role is Role.PREFILL:  # 1.2 refuses context-only requests with it on (as trtllm-1.2)
            options["disable_overlap_scheduler"] = True
        return cls(role=role, model=engine_dir, options=options,
                   ucx_tls=tuple(p[Param.UCX_TLS].split(",")) if p.get(Param.UCX_TLS) else ())

    def visible_devices(self, instance_name: str) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` for the instance Triton named ``instance_name``
        (``<model>_<group>_<ordinal>``: pdtrt writes one instance group); None when unpinned."""
        if not self.gpu_devices:
            return None
        ordinal = instance_name.rpartition("_")[2]
        if not ordinal.isdigit() or int(ordinal) >= len(self.gpu_devices):
            raise ValueError(f"instance {instance_name!r} has no GPUs in {Param.GPU_DEVICE_IDS} "
                             f"({len(self.gpu_devices)} group(s)): give every instance of the "
                             "model one group")
        return ",".join(str(g) for g in self.gpu_devices[int(ordinal)])

    @property
    def serves_phases(self) -> bool:
        """Context-only / generation-only requests: the KV cache transceiver is configured."""
        return self.options.get("cache_transceiver_config") is not None

    @property
    def kv_transfer_timeout_s(self) -> float:
        """How long a finished context-only request holds its KV for a decode: the option's
        ``kv_transfer_timeout_ms``; unset, TensorRT-LLM 1.2 holds it until pulled (inf)."""
        transceiver = self.options.get("cache_transceiver_config") or {}
        timeout_ms = transceiver.get("kv_transfer_timeout_ms")
        return math.inf if timeout_ms is None else float(timeout_ms) / 1000


def kv_reuse_options(enabled: bool) -> dict[str, Any]:
    """``kv_cache_config`` entries for block reuse on or off: on, with an event buffer so the
    engine publishes its blocks (LlmArgs' event_buffer_max_size defaults to 0: no events)."""
    return {"enable_block_reuse": True, "event_buffer_max_size": KV_EVENT_BUFFER} if enabled \
        else {"enable_block_reuse": False}


def _read_options(path: str) -> dict[str, Any]:
    """The LLM-API options file (``extra_llm_api_options`` YAML); yaml is imported only here,
    on the trtllm-1.2 path, whose ``tensorrt_llm`` loads it anyway -- the reference engine
    model's stub never does."""
    if not path:
        return {}
    import yaml

    return yaml.safe_load(Path(path).read_text()) or {}


def _device_groups(text: str) -> tuple[tuple[int, ...], ...]:
    try:
        return tuple(tuple(int(g) for g in group.split(",")) for group in text.split(";")
                     ) if text.strip() else ()
    except ValueError:
        raise ValueError(f"{Param.GPU_DEVICE_IDS} {text!r}: expected GPU ordinals, ',' within "
                         "an instance and ';' between instances (0,1;2,3)") from None


def max_beam_width(engine_dir: Path) -> int:
    """The ``max_beam_width`` the engine was built with (its manifest's build settings)."""
    return build_setting(engine_dir, "max_beam_width", 1)


def engine_limits(config: LLMEngineConfig, model_config: Mapping[str, Any] | None = None
                  ) -> EngineLimits:
    """What a request may ask of this engine; ``model_config`` is the checkpoint's
    ``config.json`` (read from where the LLM API read ``config.model`` when not given)."""
    if model_config is None:
        model_config = checkpoint_config(config.model, config.options.get("revision"))
    o = config.options
    return EngineLimits(
        role=config.role, max_input_len=int(o.get("max_input_len") or _DEFAULT_MAX_INPUT_LEN),
        max_seq_len=int(o.get("max_seq_len") or model_config["max_position_embeddings"]),
        vocab_size=int(model_config["vocab_size"]), serves_phases=config.serves_phases,
        max_beam_width=int(o.get("max_beam_width") or 1))


def checkpoint_config(model: Path, revision: str | None = None) -> dict[str, Any]:
    """The ``config.json`` of ``model``: a local checkpoint directory, else a Hugging Face Hub
    name, read from the Hub cache the LLM API has just downloaded the model into (or from the
    Hub, with ``HF_TOKEN``, if it is not cached). Raises ``ValueError`` saying which."""
    if model.is_dir():
        return json.loads((model / "config.json").read_text())
    name = str(model)
    if model.is_absolute() or name.startswith(".") or name.count("/") != 1:
        raise ValueError(f"model {name!r} is neither a checkpoint directory nor a Hugging Face "
                         "Hub name (org/model): check model.path in the spec, or the mount "
                         "that should hold it")
    from huggingface_hub import hf_hub_download  # the LLM API's own dependency

    try:
        try:
            path = hf_hub_download(name, "config.json", revision=revision,
                                   local_files_only=True)
        except Exception:  # not in the cache (yet): the Hub itself
            path = hf_hub_download(name, "config.json", revision=revision)
    except Exception as exc:
        raise ValueError(f"cannot read config.json of Hugging Face model {name!r}: {exc}; "
                         "a gated model needs HF_TOKEN, and the cache HF_HOME must be "
                         "mounted") from None
    return json.loads(Path(path).read_text())
