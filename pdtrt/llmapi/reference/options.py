"""The LLM-API options the reference ``LLM`` takes, checked like upstream's ``LlmArgs``.

TensorRT-LLM's ``LLM(model, **kwargs)`` turns its keyword arguments into ``LlmArgs``, a
pydantic model that forbids unknown keys; its nested configs (``KvCacheConfig``,
``CacheTransceiverConfig``) do the same. The reference keeps that contract for the options it
understands, with upstream's names, so the options file the ``trtllm-1.2`` target writes for a
GPU is the same kind of file the reference target hands to the CPU: an unknown key is a
``ValueError`` naming it (with "did you mean"), not a silently ignored setting. Options that only
tune GPU execution (CUDA graphs, the overlap scheduler, chunked prefill) are accepted and have no
effect here: the fields below "accepted for the GPU" (``stream_interval`` is honoured). Every
field, nested ones included, is one of upstream's with its type and default
(``pdtrt/data/targets/trtllm-1.2-llm-args.yaml``; tests/llmapi/test_contract.py fails when the
reference accepts a key or value that does not).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdtrt.suggest import did_you_mean

__all__ = ["CacheTransceiverConfig", "CudaGraphConfig", "KvCacheConfig", "ReferenceLlmArgs",
           "SchedulerConfig"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class KvCacheConfig(_Strict):
    tokens_per_block: int = 32
    enable_block_reuse: bool = True
    event_buffer_max_size: int = Field(default=0, ge=0)  # KV cache events kept (0: none)
    free_gpu_memory_fraction: float | None = Field(default=0.9, ge=0, le=1)
    max_tokens: int | None = None
    dtype: str = "auto"


class CacheTransceiverConfig(_Strict):
    backend: Literal["DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI"] | None = None
    max_tokens_in_buffer: int | None = None
    kv_transfer_timeout_ms: int | None = Field(default=None, gt=0)
    kv_transfer_sender_future_timeout_ms: int | None = Field(default=1000, gt=0)


class CudaGraphConfig(_Strict):
    batch_sizes: list[int] | None = None
    max_batch_size: int = Field(default=0, ge=0)
    enable_padding: bool = False


class SchedulerConfig(_Strict):
    capacity_scheduler_policy: Literal["MAX_UTILIZATION", "GUARANTEED_NO_EVICT",
                                       "STATIC_BATCH"] = "GUARANTEED_NO_EVICT"
    context_chunking_policy: Literal["FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS"] | None = None


class ReferenceLlmArgs(_Strict):
    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_input_len: int = 1024
    max_seq_len: int | None = None
    max_beam_width: int = 1
    sampler_type: Literal["TRTLLMSampler", "TorchSampler", "auto"] = "auto"
    kv_cache_config: KvCacheConfig = KvCacheConfig()
    cache_transceiver_config: CacheTransceiverConfig | None = None
    # a streaming request's responses: the first token, every N-th iteration, the last
    # (upstream's rule, llm.stream_due)
    stream_interval: int = Field(default=1, gt=0)
    # accepted for the GPU; no effect on the CPU reference
    backend: Literal["pytorch"] = "pytorch"
    cuda_graph_config: CudaGraphConfig | None = CudaGraphConfig()
    scheduler_config: SchedulerConfig = SchedulerConfig()
    disable_overlap_scheduler: bool = False
    enable_chunked_prefill: bool = False
    enable_iter_perf_stats: bool = False
    enable_attention_dp: bool = False
    print_iter_log: bool = False
    pipeline_parallel_size: int = 1
    gpus_per_node: int | None = None  # the GPUs an instance pins (trtllm-1.2's gpu_device_ids)
    enable_autotuner: bool = True

    @property
    def torch_sampler(self) -> bool:
        """The PyTorch flow's TorchSampler samples: asked for, or ``auto`` without beam search
        (upstream's ``instantiate_sampler``, tensorrt_llm/_torch/pyexecutor/_util.py, picks
        TRTLLMSampler for ``auto`` only when the decoding mode is beam search, i.e.
        ``max_beam_width`` > 1). The reference applies each one's rules (:mod:`.llm`)."""
        return self.sampler_type == "TorchSampler" or (
            self.sampler_type == "auto" and self.max_beam_width == 1)

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> ReferenceLlmArgs:
        """Raises ``ValueError`` naming the first bad option (and the closest known one)."""
        try:
            return cls.model_validate(kwargs)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(p) for p in first["loc"])
            known = _known(first["loc"][:-1])
            hint = did_you_mean(str(first["loc"][-1]), known) if first["type"] == \
                "extra_forbidden" else ""
            raise ValueError(f"LLM option '{path}': {first['msg']}{hint}") from None


def _known(parent: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = ReferenceLlmArgs
    for key in parent:
        ann = model.model_fields[str(key)].annotation
        nested = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type)
                  and issubclass(a, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)
