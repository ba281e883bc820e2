"""What differs between targets in a generated repository: one small table, no template copies.

Everything else (the ensemble, preprocessing, router, postprocessing, the engine model's core
I/O) is the same on every target. The fixed ``tensorrt_llm`` parameters below are the values
pdtrt chooses for TensorRT-LLM 0.21's Triton backend (parameter names from NVIDIA's
``inflight_batcher_llm/tensorrt_llm/config.pbtxt``; ``recv_poll_period_ms`` is read by the
backend but absent from NVIDIA's template). Per-deployment ones (engine path, memory fraction,
participant and device ids) are computed in :mod:`pdtrt.repo.plan`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.engine_io import ModelIO, engine_io
from pdtrt.enums import Target

__all__ = ["TargetRepoFacts", "repo_facts"]


@dataclass(frozen=True, kw_only=True)
class TargetRepoFacts:
    target: Target
    engine_backend: str  # Triton backend of the prefill / decode / aggregated models
    engine_io: ModelIO
    container_image: str | None  # where the repository is served (None: the embedded server)
    engine_fixed_parameters: tuple[tuple[str, str], ...]  # backend parameters, in render order
    executor_worker_path: str | None


_TRTLLM_0_21_FIXED = (
    ("max_beam_width", "1"),  # disaggregation needs beam width 1
    ("FORCE_CPU_ONLY_INPUT_TENSORS", "no"),
    ("gpt_model_type", "inflight_fused_batching"),  # disaggregation needs in-flight batching
    ("batch_scheduler_policy", "guaranteed_no_evict"),
    # Explicit, because the backend defaults it to true when unset, and a KV block evicted from
    # the reuse tree before its asynchronous send finished hangs the transfer (TRT-LLM #12542).
    ("enable_kv_cache_reuse", "false"),
    ("enable_chunked_context", "false"),
    ("exclude_input_in_output", "true"),
    ("normalize_log_probs", "true"),
    ("cancellation_check_period_ms", "100"),
    ("stats_check_period_ms", "100"),
    ("request_stats_max_iterations", "0"),
    # Unset, the orchestrator busy-polls its workers (tensorrtllm_backend #653: high CPU).
    ("recv_poll_period_ms", "1"),
)

_FACTS = {
    Target.REFERENCE: TargetRepoFacts(
        target=Target.REFERENCE, engine_backend="python",
        engine_io=engine_io(Target.REFERENCE), container_image=None,
        engine_fixed_parameters=(), executor_worker_path=None,
    ),
    Target.TRTLLM_0_21: TargetRepoFacts(
        target=Target.TRTLLM_0_21, engine_backend="tensorrtllm",
        engine_io=engine_io(Target.TRTLLM_0_21),
        container_image="nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3",
        engine_fixed_parameters=_TRTLLM_0_21_FIXED,
        executor_worker_path="/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
    ),
}


def repo_facts(target: Target) -> TargetRepoFacts:
    return _FACTS[target]
