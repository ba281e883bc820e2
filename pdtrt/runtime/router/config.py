"""The router's ``config.pbtxt`` parameters, read once into a typed object.

``pdtrt repo`` writes them from the spec (:mod:`pdtrt.repo.plan`); the router reads them at
``initialize``, and ``pdtrt serve``'s supervisor reads the same ones to know which endpoints
each phase has. A pool of one endpoint may be named by ``prefill_model`` + ``prefill_url``
alone (as hand-written repositories and tools that know one endpoint per pool do); the
``*_endpoints`` parameters win when present.
Parameters left out take the spec's defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pdtrt import envvars
from pdtrt.endpoints import EndpointSpec, parse_endpoints
from pdtrt.engine_io import PHASE_ROLES, Param, Role
from pdtrt.prefill_policy import PrefillPolicy
from pdtrt.runtime.router.pool import Routing

__all__ = ["RouterConfig"]

# Defaults of parameters a hand-written repository may leave out (= the spec's defaults).
DEFAULT_MAX_ATTEMPTS = 2
DEFAULT_MAX_MIGRATIONS = 2
DEFAULT_LIVENESS_S = 1.0
DEFAULT_PROBE_TIMEOUT_S = 4.0
DEFAULT_PROBE_INTERVAL_S = 2.0
DEFAULT_KV_OVERLAP_WEIGHT = 1.0
DEFAULT_KV_EVENTS_INTERVAL_S = 0.2


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    pools: Mapping[Role, tuple[EndpointSpec, ...]]  # each of PHASE_ROLES (aggregated may be ())
    prefill_policy: PrefillPolicy  # where each request's prefill runs
    early_first_token: bool
    error_output: str  # the engines' in-band error output; "" for none
    fallback_to_aggregated: bool  # a failed disaggregated path falls back to the aggregated one
    max_attempts: int  # endpoints tried per phase of one request
    # continuations of one request on another endpoint after a mid-stream failure
    max_migrations: int = DEFAULT_MAX_MIGRATIONS
    liveness_s: float  # silence of a phase call before its endpoint is probed; 0: never
    # a generation-only call with no response this long after it was sent has lost its KV
    # transfer (TensorRT-LLM #12542: the decode waits forever, answering probes); 0: no bound
    kv_transfer_deadline_s: float = 0.0
    probe_timeout_s: float
    probe_interval_s: float  # background probes of every endpoint; 0: none
    # core input -> the phase models' name for it (TensorRT-LLM 0.21: min_tokens, seed)
    phase_input_names: Mapping[str, str] = field(default_factory=dict)
    # how the phase models of this server are called: "bls", or "grpc" at the server's own
    # address (local_grpc_url)
    phase_transport: str = "bls"
    # how each pool chooses an endpoint; for kv_aware: the weight of a net-new prompt token
    # against one outstanding token, how often the engines' KV events are read, their block
    routing: Routing = Routing.LEAST_LOAD
    kv_overlap_weight: float = DEFAULT_KV_OVERLAP_WEIGHT
    kv_events_interval_s: float = DEFAULT_KV_EVENTS_INTERVAL_S
    kv_block_tokens: int = 0

    @property
    def aggregated_below(self) -> int:
        """Prompts shorter than this take the aggregated path; 0: never."""
        return self.prefill_policy.aggregated_below

    def local_grpc_url(self, env: Mapping[str, str] | None = None) -> str:
        """"" for BLS; for grpc the server's own ``HOST:PORT`` from ``PDTRT_SERVER_GRPC_URL``
        in ``env`` (default: the process environment; a wildcard host becomes loopback).
        Raises :class:`ValueError` when it is not there. Only the router resolves it: the
        server's address is the server's environment, which a reader of the config (the
        supervisor) may not have."""
        if self.phase_transport == "bls":
            return ""
        url = (os.environ if env is None else env).get(envvars.PDTRT_SERVER_GRPC_URL, "")
        if not url:
            raise ValueError(f"phase_transport grpc needs the server's own gRPC address in "
                             f"{envvars.PDTRT_SERVER_GRPC_URL} (pdtrt serve and a trtllm-1.2 "
                             "launch.sh set it); start the server with one of them, or set "
                             "router.phase_transport: bls")
        host, _, port = url.rpartition(":")
        return f"127.0.0.1:{port}" if host in ("0.0.0.0", "") else \
            f"[::1]:{port}" if host in ("[::]", "::") else url

    @classmethod
    def from_params(cls, p: Mapping[str, str]) -> RouterConfig:
        """Raises :class:`ValueError` for an endpoint list that does not parse, a phase
        without endpoints, a phase_transport that is not bls or grpc, or a routing that is
        not one of :class:`Routing` (kv_aware without a block size)."""
        pools = {role: _pool(p, role) for role in PHASE_ROLES}
        for role in (Role.PREFILL, Role.DECODE):
            if not pools[role]:
                raise ValueError(f"the router has no {role} endpoint: set '{_KEYS[role][0]}'")
        return cls(
            pools=pools,
            prefill_policy=PrefillPolicy(
                aggregated_below=int(p.get(Param.AGGREGATED_BELOW_TOKENS) or 0),
                max_local_prefill=int(p.get(Param.MAX_LOCAL_PREFILL_TOKENS) or 0),
                max_prefill_queue_depth=float(p.get(Param.MAX_PREFILL_QUEUE_DEPTH) or 0),
                local_prefill_limit=int(p.get(Param.LOCAL_PREFILL_LIMIT) or 0)),
            early_first_token=p.get(Param.EARLY_FIRST_TOKEN, "true") == "true",
            error_output=p.get(Param.ERROR_OUTPUT, ""),
            fallback_to_aggregated=p.get(Param.FALLBACK_TO_AGGREGATED, "false") == "true",
            max_attempts=int(p.get(Param.MAX_ATTEMPTS) or DEFAULT_MAX_ATTEMPTS),
            max_migrations=int(p.get(Param.MAX_MIGRATIONS, DEFAULT_MAX_MIGRATIONS)),
            liveness_s=float(p.get(Param.LIVENESS_S) or DEFAULT_LIVENESS_S),
            kv_transfer_deadline_s=float(p.get(Param.KV_TRANSFER_DEADLINE_S) or 0),
            probe_timeout_s=float(p.get(Param.PROBE_TIMEOUT_S) or DEFAULT_PROBE_TIMEOUT_S),
            probe_interval_s=float(p.get(Param.PROBE_INTERVAL_S, DEFAULT_PROBE_INTERVAL_S)
                                   or 0),
            phase_input_names=_renames(p.get(Param.PHASE_INPUT_NAMES, "")),
            phase_transport=_transport(p.get(Param.PHASE_TRANSPORT) or "bls"),
            **_kv_routing(p))


_KEYS = {Role.PREFILL: (Param.PREFILL_ENDPOINTS, Param.PREFILL_MODEL, Param.PREFILL_URL),
         Role.DECODE: (Param.DECODE_ENDPOINTS, Param.DECODE_MODEL, Param.DECODE_URL),
         Role.AGGREGATED: (Param.AGGREGATED_ENDPOINTS, Param.AGGREGATED_MODEL, None)}


def _pool(p: Mapping[str, str], role: Role) -> tuple[EndpointSpec, ...]:
    listed, model_key, url_key = _KEYS[role]
    if p.get(listed):
        return parse_endpoints(p[listed])
    model = p.get(model_key, "")
    if not model:
        return ()
    return (EndpointSpec(model=model, url=p.get(url_key, "") if url_key else ""),)


def _renames(text: str) -> dict[str, str]:
    """``CORE:ENGINE,...`` -> {core: engine}; raises :class:`ValueError` for an item that is
    not ``CORE:ENGINE``."""
    renames = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        core, sep, engine = item.partition(":")
        if not (sep and core and engine):
            raise ValueError(f"phase_input_names item {item!r} is not CORE:ENGINE")
        renames[core] = engine
    return renames


def _transport(transport: str) -> str:
    if transport not in ("bls", "grpc"):
        raise ValueError(f"phase_transport {transport!r} is not bls or grpc")
    return transport


def _kv_routing(p: Mapping[str, str]) -> dict[str, object]:
    routing = p.get(Param.ROUTING) or Routing.LEAST_LOAD
    if routing not in set(Routing):
        raise ValueError(f"routing {routing!r} is not one of {', '.join(Routing)}")
    block = int(p.get(Param.KV_BLOCK_TOKENS) or 0)
    if routing == Routing.KV_AWARE and block < 1:
        raise ValueError(f"routing kv_aware needs {Param.KV_BLOCK_TOKENS}: the engines' "
                         "tokens_per_block, which the router hashes prompts by")
    return {"routing": Routing(routing), "kv_block_tokens": block,
            "kv_overlap_weight": float(p.get(Param.KV_OVERLAP_WEIGHT)
                                       or DEFAULT_KV_OVERLAP_WEIGHT),
            "kv_events_interval_s": float(p.get(Param.KV_EVENTS_INTERVAL_S)
                                          or DEFAULT_KV_EVENTS_INTERVAL_S)}
