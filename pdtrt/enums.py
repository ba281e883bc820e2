"""pdtrt's vocabulary as enums: phases, targets, data types, quantisation, transports.

Strings exist only at the YAML/CLI edge; everything inside pdtrt passes these enums. The enum
*values* are the spellings users write in ``pdtrt.yaml`` and on the command line.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = [
    "DType",
    "DeviceKind",
    "KVDType",
    "KVTransferBackend",
    "LengthKind",
    "Percentile",
    "Phase",
    "PhaseTransport",
    "Sampler",
    "ServingBackend",
    "ServingMode",
    "Target",
    "TritonBackend",
    "WeightQuant",
]


class Phase(StrEnum):
    """The two phases of LLM inference that pdtrt places on separate pools."""

    PREFILL = "prefill"
    DECODE = "decode"


class Target(StrEnum):
    """A pinned software stack pdtrt deploys to: one :mod:`pdtrt.targets` module each
    (docs/build.md has a section per target)."""

    REFERENCE = "reference"
    TRTLLM_0_21 = "trtllm-0.21"
    TRTLLM_1_2 = "trtllm-1.2"


class TritonBackend(StrEnum):
    """The Triton backend of a model pdtrt generates (``backend:`` in its ``config.pbtxt``)."""

    PYTHON = "python"
    TENSORRTLLM = "tensorrtllm"  # NVIDIA's TensorRT-LLM C++ backend


class DeviceKind(StrEnum):
    GPU = "gpu"
    CPU = "cpu"


class DType(StrEnum):
    """Activation / compute dtype of the model."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"

    @property
    def num_bytes(self) -> int:
        return 4 if self is DType.FP32 else 2


class WeightQuant(StrEnum):
    """How the weights of the transformer layers' linear projections are stored.

    ``none`` keeps them in the model dtype. Embeddings, the LM head and norms always stay in the
    model dtype (TensorRT-LLM / ModelOpt exclude them from quantisation by default).
    """

    NONE = "none"
    FP8 = "fp8"
    INT8_WEIGHT_ONLY = "int8-wo"
    INT4_WEIGHT_ONLY = "int4-wo"
    INT4_AWQ = "int4-awq"

    def bytes_per_param(self, dtype: DType) -> float:
        """Bytes per quantised weight, group scales included (int4: one 16-bit scale per 128)."""
        if self is WeightQuant.NONE:
            return float(dtype.num_bytes)
        if self in (WeightQuant.FP8, WeightQuant.INT8_WEIGHT_ONLY):
            return 1.0
        return 0.5 + 2.0 / 128


class KVDType(StrEnum):
    """Data type of the KV cache; must be equal on the prefill and decode side."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    FP32 = "fp32"  # the reference engine's CPU cache

    @property
    def num_bytes(self) -> int:
        if self is KVDType.FP32:
            return 4
        return 1 if self in (KVDType.FP8, KVDType.INT8) else 2


class KVTransferBackend(StrEnum):
    """Transport of the KV cache between prefill and decode instances."""

    UCX = "ucx"


class PhaseTransport(StrEnum):
    """How the router calls the phase models of its own Triton server."""

    AUTO = "auto"  # grpc where the target gives the router its server's address, else bls
    BLS = "bls"  # Triton's in-process business-logic scripting calls
    GRPC = "grpc"  # the server's own gRPC port, as for a pool in another server


class Routing(StrEnum):
    """How the router chooses among the endpoints of a pool (docs/serve.md, KV-aware routing)."""

    LEAST_LOAD = "least_load"  # least outstanding tokens, then calls, per instance
    ROUND_ROBIN = "round_robin"  # the least recently chosen
    KV_AWARE = "kv_aware"  # least cost: net-new prompt tokens there, weighted, plus load
    KV_CAPACITY = "kv_capacity"  # the least used fraction of its KV blocks after the request


class Sampler(StrEnum):
    """Which of TensorRT-LLM 1.2's samplers an LLM-API engine runs (LlmArgs ``sampler_type``;
    the values are its spellings). They differ in what a request's sampling inputs do: the C++
    decoder applies every one, 1.2's TorchSampler ignores some (docs/spec.md, the engine
    section)."""

    TRTLLM = "TRTLLMSampler"  # the C++ decoder (what the trtllm-0.21 C++ backend always runs)
    TORCH = "TorchSampler"  # the PyTorch flow's own, what LlmArgs' "auto" picks at beam width 1


class ServingMode(StrEnum):
    """Both phases on the same GPUs (the baseline) or prefill and decode on separate pools."""

    AGGREGATED = "aggregated"
    DISAGGREGATED = "disaggregated"


class ServingBackend(StrEnum):
    """The serving runtime whose scheduler and kernels the performance model is calibrated to.

    pdtrt deploys TensorRT-LLM; vLLM and SGLang appear because the calibration data measures
    them too, and their fitted efficiency factors show how much of a prediction is the runtime.
    """

    TRTLLM = "trtllm"
    VLLM = "vllm"
    SGLANG = "sglang"


class LengthKind(StrEnum):
    """Shape of a prompt/output length distribution (``pdtrt bench`` and ``pdtrt simulate``)."""

    FIXED = "fixed"
    UNIFORM = "uniform"
    NORMAL = "normal"


class Percentile(IntEnum):
    """A latency percentile pdtrt reports, and the share of requests an SLO asks to meet its
    targets (``P90``: 90 %, see :mod:`pdtrt.workload.slo`)."""

    P50 = 50
    P90 = 90
    P95 = 95
    P99 = 99

    @property
    def share(self) -> float:
        """The percentile as a share of requests (0.9 for ``P90``)."""
        return self.value / 100

    @property
    def label(self) -> str:
        """``"p90"`` (``str()`` stays ``"90"``, as for any ``IntEnum``)."""
        return f"p{self.value}"
