"""The deployment spec (``pdtrt.yaml``): one typed, frozen object that drives every stage.

This module is the *shape* of the spec: sections, types, ranges, defaults, and a description for
every field (the JSON Schema of ``pdtrt spec schema`` is generated from it). It does no I/O.
Rules that relate several fields, or need the model's config and the GPU catalog, live in
:mod:`pdtrt.spec.rules`; reading a file and turning every problem into a located message lives
in :mod:`pdtrt.spec.load`.

Each class but the root :class:`DeploymentSpec` is one section of the file, named
``<Section>Section`` (``slo:`` is :class:`SLOSection`). A section is what the user writes; the
concept it configures has its own type where it is used: a pool's endpoints resolve to
:class:`pdtrt.endpoints.EndpointSpec` (:meth:`DeploymentSpec.pool_endpoints`), the ``slo``
section becomes a :class:`pdtrt.workload.SLO`, the ``workload`` section the defaults of
``pdtrt simulate`` and ``pdtrt bench`` (:mod:`pdtrt.sim.from_spec`, :mod:`pdtrt.bench.options`).

Numbers are strict: ``tp: "2"`` is an error, not 2. Enum-valued fields take their YAML spelling
(``target: trtllm-1.2``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from pdtrt.endpoints import EndpointSpec
from pdtrt.enums import (
    DType,
    KVDType,
    KVTransferBackend,
    Phase,
    PhaseTransport,
    Routing,
    Sampler,
    Target,
    WeightQuant,
)
from pdtrt.tracing_settings import DEFAULT_SERVICE_PREFIX, TracingSettings, check_endpoint

__all__ = [
    "SLOSection",
    "DeploymentSpec",
    "EndpointSection",
    "EngineLimitsSection",
    "KVTransferSection",
    "ModelSection",
    "PoolSection",
    "RouterHealthSection",
    "RouterSection",
    "ServingSection",
    "WorkloadSection",
]

# UCX transport names accepted in kv_transfer.transports (UCX_TLS); see `ucx_info -d`.
UCX_TRANSPORTS = (
    "all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "self", "tcp", "rc", "rc_x",
    "rc_v", "ud", "ud_x", "dc", "dc_x", "ib", "cuda", "cuda_copy", "cuda_ipc", "gdr_copy",
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _enum(desc: str):  # enum fields take their YAML spelling, so they are validated laxly
    return Field(strict=False, description=desc)


class ModelSection(_Section):
    name: str = Field(
        min_length=1,
        description="Model name: a built-in config (`pdtrt model-info --list`) or a label "
        "for `path`, e.g. meta-llama/Meta-Llama-3.1-8B.",
    )
    path: str | None = Field(
        default=None,
        description="Local Hugging Face checkpoint directory or config.json, or (reference "
        "target) a Llama-family .gguf file whose `name` is a built-in config; relative to the "
        "spec file. Omit to use the built-in config named by `name` (and, on the reference "
        "target, its pinned download when pdtrt ships one).",
    )
    dtype: Annotated[DType, _enum("Model (activation) dtype: bf16, fp16 or fp32.")] = DType.BF16
    weights: Annotated[
        WeightQuant,
        _enum("Weight quantisation of the layers' linear projections, for both pools unless a "
              "pool overrides it: none, fp8, int8-wo, int4-wo, int4-awq."),
    ] = WeightQuant.NONE
    kv_cache_dtype: Annotated[
        KVDType, _enum("KV-cache dtype: bf16, fp16, fp8, int8 (fp32 on the reference target).")
    ] = KVDType.BF16
    seed: int = Field(default=0, ge=0, description="Seed of the reference target's generated "
                      "checkpoint and tokenizer.")


class EngineLimitsSection(_Section):
    max_batch_size: int | None = Field(
        default=None, ge=1, description="Requests the engine schedules at once; omit to let the "
        "engine profile compute it.")
    max_num_tokens: int | None = Field(
        default=None, ge=1, description="Tokens batched into one engine step (prefill chunks + "
        "decode tokens).")
    max_input_len: int | None = Field(default=None, ge=1, description="Longest prompt, tokens.")
    max_seq_len: int | None = Field(
        default=None, ge=1, description="Longest prompt + output, tokens.")
    tokens_per_block: int = Field(
        default=32, ge=1, description="Tokens per paged-KV block; a power of two, equal on "
        "prefill and decode.")
    enable_block_reuse: bool = Field(
        default=False, description="Keep the KV blocks of served prompts and answers and "
        "reuse a new prompt's cached prefix (TensorRT-LLM's kv_cache_config."
        "enable_block_reuse), and publish the blocks as KV cache events for the router's KV "
        "index (router.routing kv_aware). Off by default: TensorRT-LLM #12542 (a block "
        "evicted from the reuse tree before its asynchronous send finished hangs the "
        "transfer) is open for disaggregated serving; docs/serve.md.")
    kv_cache_free_gpu_mem_fraction: float = Field(
        default=0.9, gt=0, lt=1, description="Fraction of the memory left after weights and "
        "activations given to the KV cache (TensorRT-LLM's kv_cache_free_gpu_mem_fraction).")
    sampler: Annotated[Sampler, _enum(
        "TensorRT-LLM's sampler (LlmArgs sampler_type), equal on both pools: TRTLLMSampler "
        "(the C++ decoder) applies every sampling input the ensemble takes; TorchSampler "
        "(1.2's default at beam width 1) ignores repetition/presence/frequency penalties, "
        "bad words and the per-request seed and counts the prompt toward min_length "
        "(TensorRT-LLM #16485, #16052, #17172, #12166), so the engine models refuse "
        "requests that set them. The aggregated model takes prefill's; docs/spec.md.")] = \
        Sampler.TRTLLM
    stream_interval: int = Field(
        default=1, ge=1, description="Decode pool: a streaming request gets a response at its "
        "first token, then every stream_interval-th decoding iteration, and at its end, each "
        "holding every token since the one before (TensorRT-LLM's LlmArgs stream_interval): "
        "fewer responses per token for the engine, the router and the client to handle, at "
        "the cost of burstier streams. The aggregated model takes the decode's; the prefill "
        "pool's must stay 1 (a context-only request makes one token). docs/spec.md.")
    weights: Annotated[
        WeightQuant | None, _enum("Override of model.weights for this pool.")
    ] = None
    kv_cache_dtype: Annotated[
        KVDType | None, _enum("Override of model.kv_cache_dtype for this pool (must still "
                              "equal the other pool's).")
    ] = None


# A pool endpoint: HOST:PORT, IPv6 hosts in brackets (the port's range is checked separately).
ENDPOINT = re.compile(r"^(?P<host>[A-Za-z0-9._\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$")


def _check_endpoint(value: str | None) -> str | None:
    """A pool endpoint: HOST:PORT (IPv6 hosts in brackets), port 1..65535."""
    if value is not None:
        m = ENDPOINT.match(value)
        if m is None:
            raise ValueError(f"endpoint {value!r} is not a gRPC address HOST:PORT (e.g. "
                             "10.0.0.5:8001 or [fd00::5]:8001, without a scheme)")
        if not 1 <= int(m["port"]) <= 65535:
            raise ValueError(f"port {m['port']} of endpoint {value!r} is not in 1..65535")
    return value


# A model name in a Triton repository that pdtrt generates (a directory name).
MODEL_NAME = r"^[a-z][a-z0-9_]*$"
AGGREGATED_MODEL = "aggregated"  # the aggregated path's model (on the prefill engine and pool)


class EndpointSection(_Section):
    """One endpoint of a pool: a model of this deployment's server, or another server's."""

    model: str | None = Field(
        default=None, pattern=MODEL_NAME, max_length=64,
        description="Without `url`: the name of a model this repository gets for the pool "
        "(its own Python-backend processes, so it fails alone), e.g. decode_b. With `url`: "
        "the model's name on that server [default: the pool's name, prefill / decode / "
        "aggregated].")
    url: Annotated[str | None, AfterValidator(_check_endpoint)] = Field(
        default=None, description="gRPC address HOST:PORT of another Triton server that serves "
        "the model; omit for a model of this server.")
    instances: int | None = Field(
        default=None, ge=1, description="Model instances behind this endpoint (its share of "
        "the load) [default: the pool's `instances`].")
    gpu: str | None = Field(
        default=None, min_length=1, description="GPU type of the server at `url` when it "
        "differs from the pool's `gpu`: a pool mixing GPU types (e.g. rented H100 decode "
        "beside owned L40S), which `router.routing: kv_capacity` fills in proportion to each "
        "endpoint's KV blocks [default: the pool's `gpu`; needs `url`].")

    @model_validator(mode="after")
    def _names_something(self) -> EndpointSection:
        if self.model is None and self.url is None:
            raise ValueError("an endpoint needs `model` (a model of this server) or `url` "
                             "(another Triton server), or both")
        return self


class PoolSection(_Section):
    gpu: str = Field(min_length=1, description="GPU type from the catalog (`pdtrt gpus`), or "
                     "`cpu` on the reference target.")
    tp: int = Field(default=1, ge=1, description="Tensor parallelism per instance.")
    pp: int = Field(default=1, ge=1, description="Pipeline parallelism per instance.")
    instances: int = Field(default=1, ge=1, description="Model instances in this pool (per "
                           "endpoint, when `endpoints` lists several).")
    price_per_hour_usd: float | None = Field(
        default=None, ge=0, description="Price of one GPU-hour; overrides the catalog default.")
    net_devices: Annotated[
        tuple[str, ...] | None,
        Field(strict=False, description="UCX_NET_DEVICES on the hosts of this pool, e.g. "
              "[mlx5_2:1], where they differ from the other pool's hosts; default "
              "kv_transfer.net_devices. Pools on one GPU type share a host and must agree."),
    ] = None
    engine: EngineLimitsSection = Field(default_factory=EngineLimitsSection,
                                        description="Engine limits of this pool.")
    endpoint: Annotated[str | None, AfterValidator(_check_endpoint)] = Field(
        default=None,
        description="gRPC address HOST:PORT of another Triton server that serves this pool's "
        "engine model (named `prefill` / `decode` there); this repository then has no local "
        "model for the pool and the router calls it over gRPC. Omit to serve it here. "
        "Shorthand for `endpoints: [{url: HOST:PORT}]`.")
    endpoints: tuple[EndpointSection, ...] = Field(
        default=(), strict=False,
        description="Several endpoints for this pool -- models of this server and other "
        "Triton servers; the router picks one per request by load and health and fails over "
        "between them (docs/serve.md). Omit for one model of this server named after the "
        "pool (or the one `endpoint`).")

    @model_validator(mode="after")
    def _one_way_to_name_endpoints(self) -> PoolSection:
        if self.endpoint is not None and self.endpoints:
            raise ValueError("set `endpoint` (one other server) or `endpoints` (a list), not "
                             "both")
        return self

    def resolved_endpoints(self, name: str) -> tuple[EndpointSpec, ...]:
        """This pool's endpoints with their defaults: ``name`` is the pool's model name (the
        phase), the one local model when none is listed and a remote model's default."""
        if self.endpoints:
            return tuple(EndpointSpec(model=e.model or name, url=e.url or "",
                                      instances=e.instances or self.instances)
                         for e in self.endpoints)
        return (EndpointSpec(model=name, url=self.endpoint or "", instances=self.instances),)

    def instances_by_gpu(self) -> dict[str, int]:
        """Model instances per GPU type, in the order the endpoints name them: an endpoint's
        ``gpu`` (another server's cards) when it gives one, else the pool's."""
        if not self.endpoints:
            return {self.gpu: self.instances}
        out: dict[str, int] = {}
        for e in self.endpoints:
            key = e.gpu or self.gpu
            out[key] = out.get(key, 0) + (e.instances or self.instances)
        return out

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp

    @property
    def num_instances(self) -> int:
        """Model instances of every endpoint (other servers' included)."""
        if not self.endpoints:
            return self.instances
        return sum(e.instances or self.instances for e in self.endpoints)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.num_instances


RDMA_TRANSPORTS = frozenset({"rc", "rc_v", "rc_x", "rc_mlx5", "ud", "ud_v", "ud_x", "ud_mlx5",
                             "dc", "dc_x", "dc_mlx5", "ib"})
"""UCX transports over InfiniBand verbs (``UCX_TLS`` names, see ``ucx_info -d``): a container
needs the host's RDMA devices and locked memory for them, or UCX silently does without."""


class KVTransferSection(_Section):
    backend: Annotated[KVTransferBackend, _enum("KV-cache transport: ucx.")] = (
        KVTransferBackend.UCX
    )
    transports: Annotated[
        tuple[str, ...],
        Field(strict=False, min_length=1, description="UCX transports (UCX_TLS), e.g. "
              "[sm, tcp] on one host, [rc, cuda_copy, cuda_ipc] with InfiniBand."),
    ] = ("sm", "tcp")
    net_devices: Annotated[
        tuple[str, ...],
        Field(strict=False, description="UCX_NET_DEVICES, e.g. [mlx5_0:1]; empty lets UCX "
              "choose."),
    ] = ()
    buffer_size_bytes: int = Field(
        default=512 * 1024 * 1024, ge=1, description="Transfer buffer per instance, bytes "
        "(reduces KV capacity on the GPU).")
    interface: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_.:-]{1,15}$",
        description="Network interface whose address the KV transceiver advertises on every "
        "host (TRTLLM_UCX_INTERFACE), e.g. eth1 or ib0: the NIC of the network the hosts reach "
        "each other on (`ip -br addr`). Required when the KV crosses hosts, unless "
        "interface_at_launch; PDTRT_UCX_INTERFACE_<GPU> at launch overrides it per host.")
    interface_at_launch: bool = Field(
        default=False, description="Name the interface only when launch.sh runs, per host, "
        "in PDTRT_UCX_INTERFACE_<GPU> (launch.sh refuses to start without it).")
    timeout_s: float = Field(default=30.0, gt=0, description="Seconds the prefill side keeps "
                             "a request's KV for the decode side to pull (TensorRT-LLM's "
                             "kv_transfer_timeout_ms). Also how long KV that no decode pulls "
                             "(a cancelled or failed request) stays in the prefill's cache: "
                             "TensorRT-LLM 1.2 frees it no earlier. Long enough for a loaded "
                             "decode to schedule the request, no longer.")

    @property
    def uses_rdma(self) -> bool:
        """The transports name an InfiniBand one (:data:`RDMA_TRANSPORTS`)."""
        return any(t in RDMA_TRANSPORTS for t in self.transports)


class RouterHealthSection(_Section):
    liveness_s: float = Field(
        default=1.0, gt=0, description="Seconds a phase call may go without a response before "
        "the router probes its endpoint; an endpoint that fails the probe ends the call with "
        "an error (and is ejected), one that answers is waited for.")
    probe_timeout_s: float = Field(
        default=4.0, gt=0, description="Seconds a health probe (a stop request for an unused "
        "id) may take before the endpoint counts as not answering.")
    probe_interval_s: float = Field(
        default=2.0, gt=0, description="Seconds between the router's background probes of "
        "every endpoint (how an ejected endpoint is re-admitted).")


class RouterSection(_Section):
    instances: int = Field(default=1, ge=1, description="Router (BLS) model instances.")
    early_first_token: bool = Field(
        default=True, description="Stream the prefill's first token at once instead of "
        "waiting for the decode phase.")
    aggregated_below_tokens: int = Field(
        default=0, ge=0, description="Prompts shorter than this go to the aggregated path "
        "(0 disables).")
    max_local_prefill_tokens: int = Field(
        default=0, ge=0, description="Conditional disaggregation: a request whose net-new "
        "prompt (the prompt less the prefix the decode endpoint's KV blocks hold, per the "
        "router's KV index; the whole prompt without block reuse) is at most this many "
        "tokens is prefilled by the decode endpoint itself -- one context_and_generation "
        "request, no prefill call, no KV transfer (0 disables; at most the decode engine's "
        "max_num_tokens). As trtllm-serve's conditional_disagg_config.max_local_prefill_length "
        "and Dynamo's max_local_prefill_length; docs/serve.md.")
    max_prefill_queue_depth: float = Field(
        default=0, ge=0, description="Conditional disaggregation: while even the least loaded "
        "healthy prefill endpoint has at least this many prefill calls in flight per instance, "
        "a prompt the decode engine takes in one step (its max_num_tokens) is prefilled there "
        "instead of queueing (0 disables).")
    fallback_to_aggregated: bool = Field(
        default=False, description="A request whose disaggregated path fails before any "
        "decode token reached the client (no healthy prefill or decode endpoint left) is "
        "served by the aggregated path instead (needs the aggregated model: --mode both).")
    max_attempts: int = Field(
        default=2, ge=1, description="Endpoints tried per phase of one request (1: no "
        "retry on another endpoint).")
    max_migrations: int = Field(
        default=2, ge=0, description="Times one request is continued on another endpoint "
        "after the decode serving it died, stalled or failed mid-stream: the prompt plus the "
        "tokens already sent are prefilled again and decoded for the rest of max_tokens, so "
        "the client's stream goes on (0: the request ends with the error). docs/migration.md.")
    routing: Annotated[Routing, _enum(
        "How a pool's endpoint is chosen per request: least_load (least outstanding tokens "
        "per instance), round_robin, or kv_aware (least net-new prompt tokens there -- the "
        "prompt minus the prefix its KV cache holds, from the engines' KV events -- times "
        "kv_overlap_weight, plus outstanding tokens per instance; needs "
        "engine.enable_block_reuse on a pool), or kv_capacity (the least used fraction of "
        "the endpoint's KV blocks once the request is there, from the engines' KV stats: "
        "endpoints of different sizes, a decode pool mixing GPU types, fill in proportion). "
        "kv_aware also gives conditional disaggregation its net-new count. docs/serve.md, "
        "KV-aware routing.")] = \
        Routing.LEAST_LOAD
    kv_overlap_weight: float = Field(
        default=1.0, ge=0, description="kv_aware routing: what one prompt token to prefill "
        "costs against one token an endpoint still owes (0: least load, the cache ignored).")
    kv_events_interval_s: float = Field(
        default=0.2, gt=0, description="kv_aware routing: seconds between two reads of "
        "every endpoint's KV events (how stale the router's KV index may be).")
    phase_transport: Annotated[PhaseTransport, _enum(
        "How the router calls the phase models of its own server: grpc (the server's own "
        "gRPC port, as for a pool in another server), bls (Triton's in-process calls) or auto "
        "(grpc, except on trtllm-0.21, whose launch cannot give the router its server's "
        "address). Decoupled BLS streams can deadlock Triton's Python-backend stub when "
        "several run at once (python_backend r24.10-main, docs/design/serve.md 'The BLS "
        "deadlock'). Router CPU per token: about a third less over gRPC where the router is "
        "the bottleneck, the same with the reference engines (benchmarks/router_bench.md). "
        "Pools in other servers always use gRPC.")
    ] = PhaseTransport.AUTO
    aggregated_endpoints: tuple[EndpointSection, ...] = Field(
        default=(), strict=False,
        description="Endpoints of the aggregated path (short prompts, fallback); omit for "
        "this repository's `aggregated` model. A `url` names another server serving "
        "`aggregated` (e.g. a `pdtrt serve --mode both` of the same spec).")
    health: RouterHealthSection = Field(default_factory=RouterHealthSection,
                                        description="Liveness deadline and health probes.")


class TracingSection(_Section):
    endpoint: Annotated[str, AfterValidator(check_endpoint)] | None = Field(
        default=None, description="OTLP/HTTP traces URL of an OpenTelemetry collector (e.g. "
        "http://otel-collector:4318/v1/traces): the front, router and engines export a span "
        "per request and phase there (docs/tracing.md). Omit: no tracing, no cost. `pdtrt "
        "serve --otlp-traces-endpoint` overrides it.")
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0, description="Share of requests "
                                "traced when their caller sent no sampled traceparent (a "
                                "caller's sampled traceparent is always followed).")
    service_prefix: str = Field(default=DEFAULT_SERVICE_PREFIX, pattern=r"^[A-Za-z0-9._-]+$",
                                max_length=64, description="Prefix of the spans' service "
                                "names: <prefix>-front, <prefix>-router, <prefix>-prefill, "
                                "<prefix>-decode.")

    def settings(self, endpoint: str | None = None) -> TracingSettings | None:
        """Where traces go (``endpoint``, e.g. a CLI flag, wins over the spec's); None: off."""
        url = endpoint or self.endpoint
        if not url:
            return None
        return TracingSettings(endpoint=url, sample_ratio=self.sample_ratio,
                               service_prefix=self.service_prefix)


class ServingSection(_Section):
    host: str = Field(default="127.0.0.1", min_length=1, description="Address the server "
                      "listens on; loopback unless you mean otherwise.")
    grpc_port: int | None = Field(default=None, ge=1, le=65535,
                                  description="gRPC port; omit for a free port.")
    http_port: int | None = Field(default=None, ge=1, le=65535,
                                  description="HTTP port; omit for a free port.")
    metrics_port: int | None = Field(default=None, ge=1, le=65535,
                                     description="Prometheus metrics port; omit for a free port.")
    streaming: bool = Field(default=True, description="Serve token streams (decoupled models).")
    metrics: bool = Field(default=True, description="Publish pdtrt's metrics.")
    share_gpus: bool = Field(
        default=False, description="Put every engine instance of a host on the same GPUs "
        "(ordinals from 0) instead of GPUs of its own: for a one-GPU host (scripts/"
        "gpu_smoke.sh) or development, never for measurements. Each pool then sets "
        "engine.kv_cache_free_gpu_mem_fraction so the engines leave each other room "
        "(trtllm-1.2).")
    tracing: TracingSection = Field(default_factory=TracingSection,
                                    description="OpenTelemetry traces (docs/tracing.md).")


class SLOSection(_Section):
    percentile: Literal[50, 90, 95, 99] = Field(
        default=90, description="Share of requests, as a percentile, that must meet both "
        "targets (pdtrt.workload.slo: the same for bench, simulate and plan).")
    ttft_ms: float | None = Field(default=None, gt=0, description="Time-to-first-token "
                                  "target, ms.")
    itl_ms: float | None = Field(default=None, gt=0, description="Inter-token latency target, "
                                 "ms, per request: its TPOT (mean inter-token time).")


class WorkloadSection(_Section):
    isl: int = Field(ge=1, description="Input (prompt) length, tokens.")
    osl: int = Field(ge=1, description="Output length, tokens.")
    request_rate_per_s: float | None = Field(default=None, gt=0,
                                             description="Open-loop request rate.")
    concurrency: int | None = Field(default=None, ge=1,
                                    description="Closed-loop concurrent requests.")

    @property
    def seq_len(self) -> int:
        return self.isl + self.osl


class DeploymentSpec(_Section):
    """pdtrt.yaml: a prefill/decode disaggregated deployment."""

    version: Literal[1] = Field(default=1, description="Spec format version.")
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64,
                      description="Deployment name (lowercase, digits, . _ -); engines go to "
                      "engines/<name>/.")
    target: Annotated[Target, _enum("Software stack: reference (CPU, embedded Triton), "
                                    "trtllm-1.2 (NGC tritonserver:26.07-trtllm-python-py3, the "
                                    "default for GPUs) or trtllm-0.21 (NGC "
                                    "tritonserver:25.08-trtllm-python-py3).")]
    model: ModelSection
    prefill: PoolSection
    decode: PoolSection
    kv_transfer: KVTransferSection = Field(default_factory=KVTransferSection)
    router: RouterSection = Field(default_factory=RouterSection)
    serving: ServingSection = Field(default_factory=ServingSection)
    slo: SLOSection = Field(default_factory=SLOSection)
    workload: WorkloadSection

    def pool(self, phase: Phase) -> PoolSection:
        return self.prefill if phase is Phase.PREFILL else self.decode

    def pool_endpoints(self, phase: Phase) -> tuple[EndpointSpec, ...]:
        """``phase``'s endpoints, defaults filled in (a model named after the phase)."""
        return self.pool(phase).resolved_endpoints(str(phase))

    def aggregated_endpoints(self) -> tuple[EndpointSpec, ...]:
        """The aggregated path's endpoints when ``router.aggregated_endpoints`` lists them
        (else the repository's own ``aggregated`` model, when it has one)."""
        return tuple(EndpointSpec(model=e.model or AGGREGATED_MODEL, url=e.url or "",
                                  instances=e.instances or self.prefill.instances)
                     for e in self.router.aggregated_endpoints)

    @property
    def endpoints(self) -> dict[Phase, tuple[str, ...]]:
        """The pools with endpoints in other Triton servers: phase -> their ``HOST:PORT``s."""
        return {p: urls for p in Phase
                if (urls := tuple(e.url for e in self.pool_endpoints(p) if e.url))}

    def weights(self, phase: Phase) -> WeightQuant:
        return self.pool(phase).engine.weights or self.model.weights

    def net_devices(self, phase: Phase) -> tuple[str, ...]:
        """``UCX_NET_DEVICES`` of ``phase``'s hosts: the pool's own, else ``kv_transfer``'s
        (empty: UCX chooses)."""
        own = self.pool(phase).net_devices
        return own if own is not None else self.kv_transfer.net_devices

    def host_net_devices(self, phases: Iterable[Phase]) -> tuple[str, ...]:
        """``UCX_NET_DEVICES`` of the one host serving the pools of ``phases`` (they agree: a
        spec rule), ``kv_transfer``'s when there are none."""
        return next((self.net_devices(p) for p in phases), self.kv_transfer.net_devices)

    def kv_cache_dtype(self, phase: Phase) -> KVDType:
        return self.pool(phase).engine.kv_cache_dtype or self.model.kv_cache_dtype
