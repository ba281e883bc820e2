"""How pool pods reach each other for the KV transfer: pod network, host network, RDMA.

The router reaches the pools over gRPC through Services; the KV cache moves *pod to pod* over
UCX (the decode pod pulls from the address the prefill pod put in ``context_phase_params``), so
``kv_transfer.transports`` must include one that crosses hosts. Three choices, each a trade-off
(docs/deploy.md):

- **pod network** (default): UCX over TCP on the CNI's interface. Works everywhere, no
  privileges; KV moves at TCP speed through the overlay.
- **RDMA devices** (``--rdma-resource``, e.g. ``rdma/rdma_shared_device_a`` from the RDMA
  shared device plugin; with ``--network-attachment`` for a Multus secondary network): UCX
  ``rc`` over InfiniBand/RoCE. The pool pods need the ``IPC_LOCK`` capability to pin memory, and
  Kubernetes gives added capabilities only to root processes (no ambient capabilities), so
  those pods run as root -- the one privilege pdtrt asks for, and only then.
- **host network** (``--network host``): the pods use the node's interfaces (RDMA ones
  included when the device is also granted). Bypasses the CNI and NetworkPolicies, exposes
  Triton's ports on the node and allows one pool pod per node and port.
"""

from __future__ import annotations

from enum import StrEnum

from pdtrt import envvars
from pdtrt.blueprint.spec import RDMA_TRANSPORTS, DeploymentSpec
from pdtrt.enums import Phase

__all__ = ["CROSS_HOST_TRANSPORTS", "RDMA_TRANSPORTS", "PodNetwork", "transport_problems",
           "ucx_env"]

# UCX transports that leave the host (UCX_TLS names, see `ucx_info -d`); "all" lets UCX pick.
CROSS_HOST_TRANSPORTS = RDMA_TRANSPORTS | {"tcp", "all"}
# Multus: the secondary networks a pod joins
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


class PodNetwork(StrEnum):
    POD = "pod"
    HOST = "host"


def ucx_env(spec: DeploymentSpec, phase: Phase | None) -> list[tuple[str, str]]:
    """The UCX environment of a pod serving ``phase``'s pool (None: the front) -- the same
    values ``pdtrt serve`` and ``pdtrt.env`` set from the spec; in the manifest they are
    visible to ``kubectl describe``."""
    kv = spec.kv_transfer
    env = [(envvars.UCX_TLS, ",".join(kv.transports))]
    devices = spec.net_devices(phase) if phase is not None else kv.net_devices
    if devices:
        env.append((envvars.UCX_NET_DEVICES, ",".join(devices)))
    if kv.interface:  # the pod's NIC whose address the transceiver advertises (e.g. net1)
        env.append((envvars.TRTLLM_UCX_INTERFACE, kv.interface))
    return env


def transport_problems(spec: DeploymentSpec, *, network: PodNetwork,
                       rdma_resource: str | None) -> tuple[str | None, list[str]]:
    """(an error, warnings) about the spec's UCX transports between pool pods: an error when
    no listed transport can cross pods (every KV pull would fail), warnings when RDMA is asked
    for on one side only."""
    transports = set(spec.kv_transfer.transports)
    listed = ", ".join(spec.kv_transfer.transports)
    rdma = sorted(transports & RDMA_TRANSPORTS)
    usable = (transports & {"tcp", "all"}) | (set(rdma) if rdma_resource is not None else set())
    if not usable:
        why = (f"its RDMA transports ({', '.join(rdma)}) need an RDMA device (--rdma-resource)"
               if rdma else "none of them crosses hosts")
        return (f"kv_transfer.transports [{listed}] gives the pool pods no way to move the KV "
                f"cache between pods: {why}"), []
    warnings = []
    if rdma and rdma_resource is None:
        warnings.append(
            f"kv_transfer.transports asks for {', '.join(rdma)} (InfiniBand/RoCE), but the pool "
            f"pods get no RDMA device (--network {network}, no --rdma-resource): UCX will use "
            f"{', '.join(sorted(usable))} between pods")
    if rdma_resource is not None and not rdma:
        warnings.append(f"--rdma-resource {rdma_resource} gives the pool pods an RDMA device, "
                        f"but kv_transfer.transports [{listed}] has no RDMA transport (rc, dc, "
                        "ud): UCX will not use it")
    return None, warnings
