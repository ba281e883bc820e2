"""Spec rules of the pools' endpoints (``<pool>.endpoint(s)``, ``router.aggregated_endpoints``).

Each endpoint is a model of this deployment's repository or another Triton server's model
(``url``). The rules: other servers only on targets whose router can call them; several local
models per pool (or one not named after its pool) only on targets that can serve them; local
model names that do not clash with each other or with the repository's fixed models; no
endpoint named twice in one pool; an endpoint on another GPU type than its pool's (a mixed
pool) only in another server.
"""

from __future__ import annotations

from collections.abc import Iterator

from pdtrt.blueprint.spec import AGGREGATED_MODEL, DeploymentSpec
from pdtrt.endpoints import EndpointSpec
from pdtrt.engine_io import ModelName
from pdtrt.enums import Phase
from pdtrt.errors import SpecIssue
from pdtrt.targets.registry import REGISTRY, target_support

__all__ = ["POOL_RULES"]

_AGGREGATED = "router.aggregated_endpoints"


def _listed(spec: DeploymentSpec) -> Iterator[tuple[str, str, str, EndpointSpec]]:
    """(pool name, YAML path of the entry, of its url, endpoint) of every endpoint the spec
    names explicitly (the one-`endpoint` shorthand included)."""
    for phase in Phase:
        pool = spec.pool(phase)
        for i, e in enumerate(spec.pool_endpoints(phase)):
            if pool.endpoints:
                yield str(phase), f"{phase}.endpoints.{i}", f"{phase}.endpoints.{i}.url", e
            elif not e.is_local:
                yield str(phase), f"{phase}.endpoint", f"{phase}.endpoint", e
    for i, e in enumerate(spec.aggregated_endpoints()):
        yield AGGREGATED_MODEL, f"{_AGGREGATED}.{i}", f"{_AGGREGATED}.{i}.url", e


def _remote_supported(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    if target_support(spec.target).supports_remote_pools:
        return
    able = [str(s.target) for s in REGISTRY if s.supports_remote_pools]
    for _pool, _path, url_path, e in _listed(spec):
        if not e.is_local:
            yield SpecIssue(path=url_path,
                            message=f"pools in other Triton servers are supported on the "
                            f"{' and '.join(able)} target{'s' if len(able) > 1 else ''} only, "
                            f"not on {spec.target}; remove the endpoint and serve both pools "
                            "from this repository")


def _local_pools_supported(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    if target_support(spec.target).supports_endpoint_pools:
        return
    able = " and ".join(str(s.target) for s in REGISTRY if s.supports_endpoint_pools)
    for pool, path, _url, e in _listed(spec):
        if e.is_local and (e.model != pool or path.startswith(_AGGREGATED)):
            yield SpecIssue(path=f"{path}.model",
                            message=f"several local models per pool are supported on the "
                            f"{able} target only, not on {spec.target}; serve the {pool} pool "
                            f"from its one model '{pool}'")


_FIXED = {str(n) for n in ModelName} - {str(p) for p in Phase} - {AGGREGATED_MODEL}
_POOL_NAMES = {*(str(p) for p in Phase), AGGREGATED_MODEL}


def _names(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    owner: dict[str, str] = {}  # local model -> the pool that has it
    for pool, path, _url, e in _listed(spec):
        if not e.is_local:
            continue
        if e.model in _FIXED or (e.model in _POOL_NAMES and e.model != pool):
            yield SpecIssue(path=f"{path}.model",
                            message=f"'{e.model}' is the name of another model of the "
                            f"repository; name this {pool} endpoint e.g. '{pool}_b'")
        elif owner.get(e.model, pool) != pool:
            yield SpecIssue(path=f"{path}.model",
                            message=f"model '{e.model}' is already an endpoint of the "
                            f"{owner[e.model]} pool; each local model serves one pool")
        owner.setdefault(e.model, pool)


def _distinct(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    seen: set[tuple[str, str, str]] = set()
    for pool, path, _url, e in _listed(spec):
        key = (pool, e.model, e.url)
        if key in seen:
            yield SpecIssue(path=path, message=f"endpoint {e.label} is listed twice in the "
                            f"{pool} pool")
        seen.add(key)


def _other_gpu_is_another_server(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    """A local model runs on this server's cards, the pool's GPU type: an endpoint on another
    type (a mixed pool) is another Triton server."""
    entries = [(str(p), spec.pool(p).gpu, f"{p}.endpoints", spec.pool(p).endpoints)
               for p in Phase]
    entries.append((AGGREGATED_MODEL, spec.prefill.gpu, _AGGREGATED,
                    spec.router.aggregated_endpoints))
    for pool, gpu, path, endpoints in entries:
        for i, e in enumerate(endpoints):
            if e.gpu is not None and e.gpu != gpu and e.url is None:
                yield SpecIssue(path=f"{path}.{i}.gpu",
                                message=f"this {pool} endpoint is on {e.gpu}, not the pool's "
                                f"{gpu}: a model of this server runs on the pool's GPUs, so "
                                "an endpoint on another GPU type needs `url` (the Triton "
                                "server on those cards)")


POOL_RULES = (_remote_supported, _local_pools_supported, _names, _distinct,
              _other_gpu_is_another_server)
